"""Refs owned and borrowed anywhere (docs/OWNERSHIP.md), as Ray programs use them: a call's
ref passed inside a list, returned from a method, kept by an actor after its owner let go.
Real worker processes; the store holds nothing once the refs are gone."""
import gc
import time

import numpy as np
import pytest

import troupe as ray
from conftest import store_empties


@pytest.fixture(autouse=True)
def runtime():
    ray.init()
    yield
    gc.collect()
    ray.shutdown()




@ray.remote
class ParameterServer:
    def __init__(self, n):
        self.n = n

    def reduce_gradients(self, *grads):
        return ray.put(np.sum(grads, axis=0))


@ray.remote
class DataWorker:
    def __init__(self, i):
        self.i = i
        self.kept = None

    def gradient(self, seed):
        return np.full(1000, float(self.i + seed), dtype=np.float64)

    def apply(self, refs):
        """Ray's blog: a list holding the reduction's ref; get it, then the ref inside."""
        inner = ray.get(refs[0])
        grad = ray.get(inner)
        return float(grad.sum())

    def sum_first(self, refs):
        return float(ray.get(refs[0]).sum())

    def keep(self, refs):
        self.kept = refs[0]
        return True

    def kept_value(self):
        return ray.get(self.kept)

    def drop(self):
        self.kept = None
        return True


def test_ray_blog_object_store_allreduce():
    """The Ray blog's allreduce through the object store: reduce_gradients returns
    ray.put(...); its call's ref goes inside a list to every worker."""
    ps = ParameterServer.remote(4)
    workers = [DataWorker.remote(i) for i in range(4)]
    for step in range(3):
        grads = [w.gradient.remote(step) for w in workers]
        reduced = ps.reduce_gradients.remote(*grads)
        sums = ray.get([w.apply.remote([reduced]) for w in workers])
        expect = 1000.0 * sum(i + step for i in range(4))
        assert sums == [expect] * 4
        # the driver can follow it too
        assert float(ray.get(ray.get(reduced)).sum()) == expect
        del reduced, grads
    assert store_empties(), ray.object_store_stats()


def test_a_borrower_keeps_the_value_after_the_owner_lets_go():
    w = DataWorker.remote(0)
    src = DataWorker.remote(1)
    for big in (False, True):
        seed = 5 if not big else 6
        ref = src.gradient.remote(seed) if big else ray.put(np.arange(10.0))
        assert ray.get(w.keep.remote([ref]))
        expect = ray.get(ref).copy()
        del ref
        gc.collect()
        time.sleep(0.2)
        assert np.array_equal(ray.get(w.kept_value.remote()), expect)
        assert ray.get(w.drop.remote())
    assert store_empties(), ray.object_store_stats()


def test_a_pending_result_nested_in_a_put_object():
    """A call's ref not done yet, inside an object another actor reads."""
    src, w = DataWorker.remote(2), DataWorker.remote(3)
    pending = src.gradient.remote(1)
    box = ray.put([pending])
    del pending  # the object keeps the result alive
    assert ray.get(w.sum_first.remote(ray.get(box))) == 1000.0 * 3
    value = ray.get(ray.get(box)[0])
    assert float(value.sum()) == 1000.0 * 3
    del box, value
    assert store_empties(), ray.object_store_stats()


def test_refs_returned_from_a_method_resolve_in_the_caller():
    @ray.remote
    class Maker:
        def make(self, k):
            return [ray.put(np.full(100, float(i))) for i in range(k)]

    m = Maker.remote()
    refs = ray.get(m.make.remote(5))
    assert [float(ray.get(r)[0]) for r in refs] == [0.0, 1.0, 2.0, 3.0, 4.0]
    del refs
    assert store_empties(), ray.object_store_stats()


def test_owner_died_is_its_own_error():
    assert issubclass(ray.exceptions.OwnerDiedError, ray.exceptions.ObjectLostError)
