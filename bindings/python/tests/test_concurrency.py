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


def test_a_class_with_one_async_method_is_an_async_actor():
    """Ray's rule: one async def makes an async actor (max_concurrency 1000), whose plain
    methods run on its loop's thread, one at a time between the coroutines' steps. The
    signal pattern of Ray's own tests: calls that await an event wait while a plain method
    sets it."""
    @ray.remote(num_cpus=0)
    class Signal:
        def __init__(self):
            self.event = asyncio.Event()
            self.waiting = 0
            self.threads = set()

        def send(self):
            self.threads.add(threading.get_ident())
            self.event.set()

        async def wait(self):
            self.waiting += 1
            await self.event.wait()
            self.threads.add(threading.get_ident())
            return "woke"

        def waiting_now(self):
            self.threads.add(threading.get_ident())
            return self.waiting

        def loop_threads(self):
            return len(self.threads)

    s = Signal.remote()
    waits = [s.wait.remote() for _ in range(3)]
    deadline = time.monotonic() + 10
    while ray.get(s.waiting_now.remote()) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    ray.get(s.send.remote(), timeout=10)
    assert ray.get(waits, timeout=10) == ["woke"] * 3
    assert ray.get(s.loop_threads.remote()) == 1  # (every method on the loop's thread)

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

    c = Counter.remote()  # (the adds never run beside each other: no update is lost)
    ray.get([c.add.remote(i) for i in range(100)])
    assert ray.get(c.async_add.remote(100)) == 5050


# ------------------------------------------------------------------ concurrency groups

@ray.remote(concurrency_groups={"io": 2, "compute": 1})
class Grouped:
    """Methods that meet at a barrier of n parties (each of a group's calls waits for the
    others): they can meet only if the group runs n of them at once."""

    def __init__(self):
        self.barriers = {}
        self.lock = threading.Lock()

    def _meet(self, key, n, timeout):
        with self.lock:
            b = self.barriers.setdefault(key, threading.Barrier(n, timeout=timeout))
        try:
            b.wait()
            return "met"
        except threading.BrokenBarrierError:
            return "alone"

    @ray.method(concurrency_group="io")
    def read(self, key, n, timeout=5.0):
        return self._meet(key, n, timeout)

    @ray.method(concurrency_group="compute")
    def crunch(self, key, n, timeout=5.0):
        return self._meet(key, n, timeout)

    def plain(self, key, n, timeout=5.0):  # (the default group: max_concurrency 1)
        return self._meet(key, n, timeout)

    def sleep(self, s):
        time.sleep(s)
        return s


def test_concurrency_groups_run_beside_each_other():
    a = Grouped.remote()
    busy = a.sleep.remote(2.0)  # the default group's one thread
    t = time.monotonic()
    assert ray.get([a.read.remote("r", 2), a.read.remote("r", 2)]) == ["met", "met"]
    assert time.monotonic() - t < 1.8, "io's calls waited for the default group's"
    # compute has one thread: two of its calls never meet
    assert sorted(ray.get([a.crunch.remote("c", 2, 0.3), a.crunch.remote("c", 2, 0.3)])) \
        == ["alone", "alone"]
    # a call chooses its group: plain in io meets plain in io
    io_plain = a.plain.options(concurrency_group="io")
    assert ray.get([io_plain.remote("p", 2), io_plain.remote("p", 2)]) == ["met", "met"]
    assert ray.get(busy) == 2.0
    # a group the actor lacks: Ray's ValueError, at the call's get
    with pytest.raises(ValueError, match="'nope'"):
        ray.get(a.plain.options(concurrency_group="nope").remote("x", 1))


def test_concurrency_groups_are_checked():
    with pytest.raises(TypeError):
        Grouped.options(concurrency_groups=["io"])
    with pytest.raises(ValueError):
        Grouped.options(concurrency_groups={"io": 0})
    with pytest.raises(ValueError):
        Grouped.options(concurrency_groups={"a@b": 1})

    @ray.remote
    class Undeclared:
        @ray.method(concurrency_group="io")
        def f(self):
            return 1

    with pytest.raises(ValueError, match="does not declare"):
        Undeclared.remote()
    declared = Undeclared.options(concurrency_groups={"io": 1}).remote()
    assert ray.get(declared.f.remote()) == 1


def test_async_actor_groups():
    """An async actor's groups: io's calls overlap (they wait for each other on the
    loop), compute's one at a time."""
    @ray.remote(concurrency_groups={"io": 3, "compute": 1})
    class AsyncGrouped:
        def __init__(self):
            self.events = {}

        async def _meet(self, key, n, timeout):
            e = self.events.setdefault(key, [0, asyncio.Event()])
            e[0] += 1
            if e[0] >= n:
                e[1].set()
            try:
                await asyncio.wait_for(e[1].wait(), timeout)
                return "met"
            except asyncio.TimeoutError:
                return "alone"

        @ray.method(concurrency_group="io")
        async def read(self, key, n):
            return await self._meet(key, n, 5.0)

        @ray.method(concurrency_group="compute")
        async def crunch(self, key, n):
            return await self._meet(key, n, 0.3)

    a = AsyncGrouped.remote()
    assert ray.get([a.read.remote("r", 3) for _ in range(3)]) == ["met"] * 3
    assert ray.get([a.crunch.remote("c", 2) for _ in range(2)]) == ["alone", "met"]
