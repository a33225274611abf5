"""max_concurrency and async actors: the cases of Ray's "AsyncIO / Concurrency for Actors"
guide (threaded and async actors, an async actor's limit), in our words, and checks that
calls really overlap, that the limit holds and that results reach their calls."""
import asyncio
import threading
import time

import pytest

import troupe as ray


@pytest.fixture(scope="module", autouse=True)
def cluster():
    ray.init()
    yield
    ray.shutdown()


# ------------------------------------------------------------------ the guide's cases

def test_async_actor_calls_meet_on_one_loop():
    """The concurrency guide's first case, in our words: an actor of async methods whose
    calls wait on one asyncio.Event until the last of n has arrived - only possible if
    they run at once on the worker's loop; then a ref awaited from asyncio."""
    @ray.remote
    class Rendezvous:
        def __init__(self, n):
            self.n = n
            self.arrived = 0
            self.all_here = asyncio.Event()

        async def arrive(self):
            self.arrived += 1
            if self.arrived >= self.n:
                self.all_here.set()
            await self.all_here.wait()
            return self.arrived

    r = Rendezvous.remote(4)
    assert sorted(ray.get([r.arrive.remote() for _ in range(4)], timeout=20)) == [4] * 4

    async def one_more():
        return await r.arrive.remote()

    assert asyncio.run(one_more()) == 5  # (the event is set: it runs straight through)


def test_threaded_actor_runs_two_methods():
    """max_concurrency=2 on a plain class: a threaded actor; its methods' results."""
    @ray.remote
    class TwoThreads:
        def left(self):
            return "left ran"

        def right(self):
            return "right ran"

    t = TwoThreads.options(max_concurrency=2).remote()
    assert ray.get([t.left.remote(), t.right.remote()]) == ["left ran", "right ran"]


def test_async_actor_limit_of_two():
    """An async actor given max_concurrency=2: 8 calls of 0.5 s take 4 rounds."""
    @ray.remote
    class Napper:
        async def nap(self):
            await asyncio.sleep(0.5)
            return time.time()

    n = Napper.options(max_concurrency=2).remote()
    t0 = time.time()
    ends = sorted(ray.get([n.nap.remote() for _ in range(8)]))
    took = time.time() - t0
    assert 1.9 < took < 3.5, took  # 4 rounds of 0.5 s: 2 at a time, not 8 and not 1
    assert ends[1] - ends[0] < 0.3 and ends[2] - ends[1] > 0.3, ends


# ------------------------------------------------------------------ beyond the examples

def test_threaded_actor_calls_wait_for_each_other():
    @ray.remote
    class Meeting:
        def __init__(self):
            self.barrier = threading.Barrier(2, timeout=10)

        def meet(self, i):
            self.barrier.wait()
            return i

    m = Meeting.options(max_concurrency=2).remote()
    assert ray.get([m.meet.remote(1), m.meet.remote(2)], timeout=20) == [1, 2]


def test_plain_actor_runs_one_call_at_a_time():
    @ray.remote
    class Meeting:
        def __init__(self):
            self.barrier = threading.Barrier(2, timeout=0.5)

        def meet(self, i):
            try:
                self.barrier.wait()
                return i
            except threading.BrokenBarrierError:
                return "alone"

    m = Meeting.remote()  # max_concurrency 1: the second call waits for the first
    assert ray.get([m.meet.remote(1), m.meet.remote(2)], timeout=20) == ["alone", "alone"]


def test_async_actor_default_concurrency_is_large():
    @ray.remote
    class Sleeper:
        async def nap(self, i):
            await asyncio.sleep(0.5)
            return i

    s = Sleeper.remote()  # an async actor: Ray's default max_concurrency 1000
    t0 = time.time()
    assert ray.get([s.nap.remote(i) for i in range(50)]) == list(range(50))
    assert time.time() - t0 < 3, "50 naps of 0.5 s did not overlap"


def test_async_actor_with_max_concurrency_one_runs_in_order():
    @ray.remote(max_concurrency=1)
    class Log:
        def __init__(self):
            self.seen = []

        async def add(self, i):
            await asyncio.sleep(0.01)
            self.seen.append(i)
            return list(self.seen)

    log = Log.remote()
    out = ray.get([log.add.remote(i) for i in range(5)])
    assert out[-1] == [0, 1, 2, 3, 4]


def test_results_reach_their_calls_under_threads():
    @ray.remote(max_concurrency=4)
    class Echo:
        def echo(self, x):
            time.sleep((hash(x) % 5) / 10000)
            return x

    e = Echo.remote()
    bad = []

    def hammer(t):
        for i in range(50):
            refs = [e.echo.remote((t, i, k)) for k in range(4)]
            if ray.get(refs) != [(t, i, k) for k in range(4)]:
                bad.append((t, i))

    ts = [threading.Thread(target=hammer, args=(t,)) for t in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not bad


def test_fast_call_returns_before_slow_one():
    @ray.remote(max_concurrency=2)
    class Mixed:
        def slow(self):
            time.sleep(1.5)
            return "slow"

        def fast(self):
            return "fast"

    m = Mixed.remote()
    slow = m.slow.remote()
    t0 = time.time()
    assert ray.get(m.fast.remote()) == "fast"
    assert time.time() - t0 < 1.0
    assert ray.get(slow) == "slow"


def test_async_method_errors_and_awaited_refs():
    @ray.remote
    class Worker:
        async def double(self, x):
            await asyncio.sleep(0)
            return 2 * x

        async def fail(self):
            await asyncio.sleep(0)
            raise ValueError("boom")

    @ray.remote
    class Caller:
        async def sum_doubles(self, w, xs):
            return sum(await asyncio.gather(*[w.double.remote(x) for x in xs]))

    w, c = Worker.remote(), Caller.remote()
    assert ray.get(c.sum_doubles.remote(w, [1, 2, 3])) == 12
    with pytest.raises(ValueError, match="boom"):
        ray.get(w.fail.remote())


def test_max_concurrency_is_checked():
    @ray.remote
    class A:
        def f(self):
            return 1

    with pytest.raises(ValueError):
        A.options(max_concurrency=0)
    with pytest.raises(ValueError):
        A.options(max_concurrency=65537)


def test_mixed_class_keeps_call_order_by_default():
    @ray.remote
    class Counter:
        def __init__(self):
            self.n = 0

        def add(self, k):
            self.n += k
            return self.n

        async def async_add(self, k):
            await asyncio.sleep(0)
            return self.add(k)

    c = Counter.remote()  # a plain method among async ones: max_concurrency 1
    assert ray.get([c.add.remote(i) for i in range(100)]) == [
        i * (i + 1) // 2 for i in range(100)]
    assert ray.get(c.async_add.remote(100)) == 5050
