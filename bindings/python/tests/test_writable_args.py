"""Arguments arrive writable, as Ray gives them (an actor may keep an array and change it
in place later, e.g. run a collective on it): small ones as the method's own copy, large
ones through the store as private copy-on-write mappings (zero-copy until written; a
write never changes the object, which other readers still see as it was)."""
import gc

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
class Keeper:
    def __init__(self):
        self.kept = None

    def keep_and_add(self, arr, k):
        assert arr.flags.writeable
        arr += k  # in place, as a collective would
        self.kept = arr
        return float(arr.sum())

    def kept_sum(self):
        return float(self.kept.sum())

    def drop(self):
        self.kept = None
        return True


@ray.remote
def add_in_place(arr, k):
    arr += k
    return float(arr.sum())


@pytest.mark.parametrize("n", [10, 1 << 20])  # inline, and through the store
def test_method_arguments_are_writable_and_private(n):
    a = Keeper.remote()
    src = np.ones(n, dtype=np.float32)
    assert ray.get(a.keep_and_add.remote(src, 2)) == 3.0 * n
    assert ray.get(a.kept_sum.remote()) == 3.0 * n
    assert float(src.sum()) == n  # the caller's array is untouched
    ref = ray.put(src)  # an object passed by ref: the object never changes
    assert ray.get(a.keep_and_add.remote(ref, 1)) == 2.0 * n
    assert float(ray.get(ref).sum()) == n
    assert ray.get(add_in_place.remote(ref, 5)) == 6.0 * n
    assert float(ray.get(ref).sum()) == n
    assert ray.get(a.drop.remote())
    del ref
    assert store_empties(), ray.object_store_stats()


@ray.remote
class Holder:
    """Keeps the arrays its constructor is given and adds to them in place."""
    def __init__(self, a, b=None):
        assert a.flags.writeable and (b is None or b.flags.writeable)
        a += 1
        if b is not None:
            b += 1
        self.a, self.b = a, b

    def sums(self):
        return float(self.a.sum()), None if self.b is None else float(self.b.sum())


@ray.remote
def make(n):
    return np.zeros(n)


@pytest.mark.parametrize("n", [8, 1 << 20])
def test_constructor_refs_arrive_writable_and_private(n):
    """A top-level ref among the constructor's arguments gives it a writable array (a
    put object's as a copy-on-write mapping, a task's result as a private copy), as a
    method's arguments are; the object stays as it was for every other reader."""
    obj = ray.put(np.zeros(n))
    result = make.remote(n)
    h = Holder.remote(obj, b=result)
    assert ray.get(h.sums.remote()) == (float(n), float(n))
    assert float(ray.get(obj).sum()) == 0.0 and float(ray.get(result).sum()) == 0.0
    del h, obj, result
    assert store_empties()
