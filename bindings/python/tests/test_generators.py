"""Generators as Ray runs them (its "Ray Generators" pages, in our words): a generator
task or method gives an ObjectRefGenerator (num_returns="streaming", a generator
function's default), iterated sync or async for its items' refs, an exception after
some items as the ref after theirs; num_returns="dynamic" gives one ref whose value is
a DynamicObjectRefGenerator; a static num_returns takes a generator's values too. Real
worker processes; the store is empty after each test."""
import asyncio

import numpy as np
import pytest

import troupe
from conftest import store_empties


@troupe.remote
def count(n, big=False):
    for i in range(n):
        yield np.full(1 << 18, i, dtype=np.float64) if big else i


@troupe.remote
def fails_after(n):
    for i in range(n):
        yield i
    raise ValueError(f"after {n}")


@troupe.remote
def not_a_generator():
    return 5


@troupe.remote
def total(values):
    return sum(troupe.get(list(values)))


@troupe.remote
class Streamer:
    def stream(self, n):
        for i in range(n):
            yield i * 10

    async def astream(self, n):
        for i in range(n):
            await asyncio.sleep(0.001)
            yield i + 100

    @troupe.method(num_returns="dynamic")
    def dynamic(self, n):
        yield from range(n)

    @troupe.method(num_returns=2)
    def two(self):
        yield "a"
        yield "b"


def test_a_generator_task_streams_its_items_refs(ray):
    gen = count.remote(4)
    assert isinstance(gen, ray.ObjectRefGenerator)
    assert not gen.is_finished()
    refs = list(gen)
    assert all(isinstance(r, ray.ObjectRef) for r in refs)
    assert gen.is_finished()
    assert ray.get(refs) == [0, 1, 2, 3]
    gen = count.remote(3, big=True)  # (2 MiB items: through the store)
    got = [ray.get(r) for r in gen]
    assert [float(a[0]) for a in got] == [0.0, 1.0, 2.0] and got[0].nbytes == 2 << 20
    assert ray.get(next(count.remote(1))) == 0
    assert list(count.remote(0)) == []
    ray.get(gen.completed(), timeout=30)  # (ready once the generator has run)
    del refs, gen, got
    assert store_empties()


def _wait_between(path, n):
    """Yields 0..n-1, waiting after 0 until the file at path exists (30 s at most)."""
    import os
    import time
    for i in range(n):
        yield i
        until = time.monotonic() + 30
        while i == 0 and not os.path.exists(path) and time.monotonic() < until:
            time.sleep(0.002)


@troupe.remote
def wait_between(path, n):
    yield from _wait_between(path, n)


@troupe.remote
def endless():
    i = 0
    while True:
        yield i
        i += 1


@troupe.remote
class Waiter:
    def stream(self, path, n):
        yield from _wait_between(path, n)

    async def astream(self, path, n):
        import os
        for i in range(n):
            yield i
            while i == 0 and not os.path.exists(path):
                await asyncio.sleep(0.002)


def test_items_come_while_the_generator_runs_on(ray, tmp_path):
    """Each item's ref is ready as soon as it is yielded: the first one is got while its
    generator still waits for the file that lets it go on (task, method, async method)."""
    w = Waiter.remote()
    for i, make in enumerate([lambda p: wait_between.remote(p, 3),
                              lambda p: w.stream.remote(p, 3),
                              lambda p: w.astream.remote(p, 3)]):
        go = tmp_path / f"go{i}"
        gen = make(str(go))
        assert ray.get(next(gen), timeout=30) == 0
        with pytest.raises(ray.exceptions.GetTimeoutError):
            ray.get(gen.completed(), timeout=0.05)  # (it waits for go)
        assert ray.wait([gen], timeout=0) == ([], [gen])  # (wait: the next item)
        go.touch()
        assert ray.wait([gen], timeout=30) == ([gen], [])
        assert ray.get(list(gen), timeout=30) == [1, 2]
        assert gen.is_finished()
    del gen, w
    assert store_empties()


def test_an_endless_generator_is_taken_as_it_goes_and_canceled(ray):
    gen = endless.remote()
    assert [ray.get(next(gen), timeout=30) for _ in range(5)] == [0, 1, 2, 3, 4]
    ray.cancel(gen)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(gen.completed(), timeout=30)
    rest = list(gen)  # (the items yielded before the cancel, then the call's ref)
    assert rest and rest[-1] is gen.completed()
    del gen, rest
    assert store_empties()


def test_an_items_ref_goes_on_to_other_tasks(ray):
    refs = list(count.remote(5))
    assert ray.get(total.remote(refs)) == 10  # (refs nested in an argument: borrowed)
    del refs
    assert store_empties()


def test_an_exception_is_the_ref_after_the_items(ray):
    refs = list(fails_after.remote(2))
    assert len(refs) == 3
    assert ray.get(refs[:2]) == [0, 1]
    with pytest.raises(ValueError, match="after 2"):
        ray.get(refs[2])
    # a call that fails as a whole (no generator, bad arguments): one ref, raising why
    refs = list(not_a_generator.options(num_returns="streaming").remote())
    assert len(refs) == 1
    with pytest.raises(TypeError, match="needs a generator"):
        ray.get(refs[0])
    refs = list(count.remote("three"))
    assert len(refs) == 1
    with pytest.raises(TypeError):
        ray.get(refs[0])
    del refs
    assert store_empties()


def test_async_iteration(ray):
    async def main():
        out = []
        async for ref in count.remote(3):
            out.append(await ref)
        return out
    assert asyncio.run(main()) == [0, 1, 2]


def test_dynamic_generators(ray):
    ref = count.options(num_returns="dynamic").remote(3)
    assert isinstance(ref, ray.ObjectRef)
    dyn = ray.get(ref)
    assert isinstance(dyn, ray.DynamicObjectRefGenerator) and len(dyn) == 3
    assert [ray.get(r) for r in dyn] == [0, 1, 2]
    # an exception after some items is a last ref's (Ray's "generator errors")
    errs = ray.get(fails_after.options(num_returns="dynamic").remote(2))
    assert len(errs) == 3 and ray.get(list(errs)[:2]) == [0, 1]
    with pytest.raises(ValueError, match="after 2"):
        ray.get(list(errs)[2])
    with pytest.raises(ValueError, match="after 0"):  # (before any: the call fails)
        ray.get(fails_after.options(num_returns="dynamic").remote(0))
    # a static num_returns takes a generator's values: those before an exception are
    # the first refs', the exception the others'
    assert ray.get(count.options(num_returns=2).remote(2)) == [0, 1]
    # exactly k values, then an exception: no ref is left for it; the values stand and
    # the error is only logged (Ray's documented "generator errors" case)
    exact = fails_after.options(num_returns=2).remote(2)
    assert ray.get(exact) == [0, 1]
    one = exact[0]
    r = fails_after.options(num_returns=4).remote(2)
    assert ray.get(r[:2]) == [0, 1]
    for late in r[2:]:
        with pytest.raises(ValueError, match="after 2"):
            ray.get(late)
    with pytest.raises(ValueError, match="returned 3 objects"):  # (more than asked)
        ray.get(count.options(num_returns=2).remote(3)[0])
    del ref, dyn, errs, r, late, exact, one
    assert store_empties()


def test_generator_methods(ray):
    s = Streamer.remote()
    assert [ray.get(r) for r in s.stream.remote(3)] == [0, 10, 20]
    assert [ray.get(r) for r in s.astream.remote(2)] == [100, 101]
    assert [ray.get(r) for r in ray.get(s.dynamic.remote(2))] == [0, 1]
    assert ray.get(s.two.remote()) == ["a", "b"]
    ref = s.stream.options(num_returns="dynamic").remote(2)
    assert [ray.get(r) for r in ray.get(ref)] == [0, 10]
    with pytest.raises(ValueError, match="generator"):
        s.stream.bind(1)
    with pytest.raises(ValueError):
        count.bind(2)
    del s, ref
    assert store_empties()


def test_an_async_generator_waits_for_a_later_call(ray):
    """An async actor's generator that awaits what a call sent after it does: the later
    call begins while the generator waits (calls begin in order, not one at a time)."""
    @troupe.remote
    class Gate:
        def __init__(self):
            self.opened = asyncio.Event()

        async def stream(self):
            yield "before"
            await self.opened.wait()
            yield "after"

        async def open(self):
            self.opened.set()
            return "opened"

    g = Gate.remote()
    gen = g.stream.remote()
    assert ray.get(g.open.remote(), timeout=30) == "opened"
    assert [ray.get(r) for r in gen] == ["before", "after"]
