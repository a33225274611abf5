"""Placement groups from Python (troupe.util.placement_group over tr_placement_group_*):
Ray's guide program with only its imports changed (read from RAY_DOC_CODE) and its flow in
our words, bundles reserved and refused on a
node of 4 CPUs and 2 (counted) GPUs, actors and tasks in bundles, removal, bad input."""
import time

import pytest

import troupe
from ray_doc_code import run
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


def test_rays_placement_group_example_program():
    """Ray's "Placement Groups" guide program (doc_code/placement_group_example.py, read
    from RAY_DOC_CODE: tests/ray_doc_code.py), its import lines changed only; it starts
    its own runtime (2 CPUs, 2 GPUs)."""
    try:
        ns = run("placement_group_example.py")
        # its last group, got back by its name by a "second driver"
        assert ns["pg"] == get_placement_group("global_name")
        assert placement_group_table(ns["pg"])["state"] == "CREATED"
    finally:
        troupe.shutdown()


def test_guide_flow_gpu_bundle_pending_actor_removal():
    """The guide's flow, in our words: a bundle of a CPU and a GPU got ready (get and
    wait), a group asking for a {"GPU": 2} bundle on a node of 2 counted GPUs in all
    stays pending (a get of its ready() times out), actors into the group (any bundle,
    and a GPU actor into bundle 0), removal (REMOVED in the table), a detached named
    group, and a group found by its name."""
    troupe.init(num_cpus=2, num_gpus=2)
    try:
        pg = placement_group([{"CPU": 1, "GPU": 1}])
        assert troupe.get(pg.ready(), timeout=10) == pg
        ready, unready = troupe.wait([pg.ready()], timeout=10)
        assert len(ready) == 1 and not unready
        assert placement_group_table(pg)["state"] == "CREATED"

        stuck = placement_group([{"CPU": 1}, {"GPU": 2}])
        with pytest.raises(troupe.exceptions.GetTimeoutError):
            troupe.get(stuck.ready(), timeout=1)
        assert placement_group_table(stuck)["state"] == "PENDING"

        @troupe.remote(num_cpus=1)
        class OneCpu:
            def ready(self):
                return "up"

        @troupe.remote(num_cpus=0, num_gpus=1)
        class OneGpu:
            def gpus(self):
                return troupe.get_gpu_ids()

        in_pg = PlacementGroupSchedulingStrategy(placement_group=pg)
        a = OneCpu.options(scheduling_strategy=in_pg).remote()
        assert troupe.get(a.ready.remote(), timeout=10) == "up"
        g = OneGpu.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=pg, placement_group_bundle_index=0)).remote()
        assert len(troupe.get(g.gpus.remote(), timeout=10)) == 1

        remove_placement_group(pg)
        remove_placement_group(stuck)
        assert placement_group_table(pg)["state"] == "REMOVED"

        kept = placement_group([{"CPU": 1}], lifetime="detached", name="kept_by_name")
        assert troupe.get(kept.ready(), timeout=10) == kept
        assert troupe.util.get_placement_group("kept_by_name") == kept
        remove_placement_group(kept)
    finally:
        troupe.shutdown()


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
