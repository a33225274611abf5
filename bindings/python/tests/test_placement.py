"""Placement groups from Python (troupe.util.placement_group over tr_placement_group_*):
Ray's documented example with only the import changed, bundles reserved and refused on a
node of 4 CPUs and 2 (counted) GPUs, actors and tasks in bundles, removal, bad input."""
import time
from pprint import pprint

import pytest

import troupe
from troupe.util.placement_group import (get_placement_group, placement_group,
                                         placement_group_table, remove_placement_group)
from troupe.util.scheduling_strategies import PlacementGroupSchedulingStrategy


@pytest.fixture
def node():
    troupe.init(num_cpus=4, num_gpus=2)
    try:
        yield troupe
    finally:
        troupe.shutdown()


def test_rays_placement_group_example():
    """Ray's "Placement Groups" guide (its doc_code), `import ray` changed only."""
    import troupe as ray

    # Create a single node Ray cluster with 2 CPUs and 2 GPUs.
    ray.init(num_cpus=2, num_gpus=2)
    try:
        # Reserve a placement group of 1 bundle that reserves 1 CPU and 1 GPU.
        pg = placement_group([{"CPU": 1, "GPU": 1}])

        # Wait until placement group is created.
        ray.get(pg.ready(), timeout=10)

        # You can also use ray.wait.
        ready, unready = ray.wait([pg.ready()], timeout=10)
        assert len(ready) == 1 and not unready

        # You can look at placement group states using this API.
        print(placement_group_table(pg))
        assert placement_group_table(pg)["state"] == "CREATED"

        # Cannot create this placement group because we cannot create a {"GPU": 2} bundle.
        pending_pg = placement_group([{"CPU": 1}, {"GPU": 2}])
        # This raises the timeout exception!
        with pytest.raises(Exception) as e:
            ray.get(pending_pg.ready(), timeout=5)
        print("Cannot create a placement group because {'GPU': 2} bundle cannot be created.")
        print(e.value)

        @ray.remote(num_cpus=1)
        class Actor:
            def __init__(self):
                pass

            def ready(self):
                pass

        # Create an actor to a placement group.
        actor = Actor.options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=pg,
            )
        ).remote()

        # Verify the actor is scheduled.
        ray.get(actor.ready.remote(), timeout=10)

        # This API is asynchronous.
        remove_placement_group(pg)

        # Wait until placement group is killed.
        time.sleep(1)
        # Check that the placement group has died.
        pprint(placement_group_table(pg))
        assert placement_group_table(pg)["state"] == "REMOVED"
    finally:
        ray.shutdown()


def _available():
    return troupe.available_resources()


def test_reserve_pending_then_placed(node):
    pg = placement_group([{"CPU": 2}, {"CPU": 1}], strategy="PACK", name="first")
    assert pg.wait(10)
    assert pg.bundle_specs == [{"CPU": 2}, {"CPU": 1}] and pg.bundle_count == 2
    assert _available()["CPU"] == 1
    other = placement_group([{"CPU": 2}], strategy="STRICT_PACK")
    assert not other.wait(0.3)
    entry = placement_group_table(other)
    assert entry["state"] == "PENDING"
    assert "waiting for resources" in entry["stats"]["reason"]
    assert get_placement_group("first") == pg
    remove_placement_group(pg)
    assert other.wait(10)
    assert troupe.get(other.ready(), timeout=10) == other
    remove_placement_group(other)
    assert _available()["CPU"] == 4
    with pytest.raises(ValueError):
        get_placement_group("first")
    table = placement_group_table()
    assert {e["state"] for e in table.values()} == {"REMOVED"}


def test_strict_spread_alone_stays_pending_with_reason(node):
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_SPREAD")
    assert not pg.wait(0.2)
    assert "STRICT_SPREAD" in placement_group_table(pg)["stats"]["reason"]
    big = placement_group([{"CPU": 8}])
    assert not big.wait(0.2)
    assert "infeasible" in placement_group_table(big)["stats"]["reason"]


def test_actors_and_tasks_in_bundles(node):
    pg = placement_group([{"CPU": 1, "GPU": 1}, {"CPU": 1, "GPU": 1}], strategy="SPREAD")
    troupe.get(pg.ready(), timeout=10)

    @troupe.remote(num_gpus=1)
    class Gpu:
        def ids(self):
            import os
            return os.environ.get("CUDA_VISIBLE_DEVICES")

    a = Gpu.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, 0)).remote()
    b = Gpu.options(placement_group=pg, placement_group_bundle_index=1).remote()
    ids = troupe.get([a.ids.remote(), b.ids.remote()], timeout=20)
    assert sorted(ids) == ["0", "1"]

    @troupe.remote(num_cpus=1)
    def where():
        return "ran"

    ref = where.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, -1)).remote()
    assert troupe.get(ref, timeout=20) == "ran"

    remove_placement_group(pg)
    with pytest.raises(troupe.exceptions.ActorDiedError):
        troupe.get(a.ids.remote(), timeout=10)
    deadline = time.time() + 5
    while _available().get("GPU") != 2 and time.time() < deadline:
        time.sleep(0.1)
    assert _available()["GPU"] == 2 and _available()["CPU"] == 4
    with pytest.raises(troupe.exceptions.TroupeError, match="was removed"):
        Gpu.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg)).remote()


def test_bad_input(node):
    with pytest.raises(ValueError, match="unknown strategy"):
        placement_group([{"CPU": 1}], strategy="NOPE")
    with pytest.raises(ValueError):
        placement_group([])
    with pytest.raises(ValueError, match="asks for nothing"):
        placement_group([{"CPU": 0}])
    with pytest.raises(ValueError):
        placement_group([{"CPU": -1}])
    with pytest.raises(TypeError):
        placement_group({"CPU": 1})
    pg = placement_group([{"CPU": 1}])

    @troupe.remote
    class A:
        def f(self):
            return 1

    with pytest.raises(ValueError, match="out of range"):
        A.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, 3)).remote()
