"""max_concurrency and async actors: Ray's documented threaded-actor and async-actor
examples ("AsyncIO / Concurrency for Actors") with only the import changed, and checks
that calls really overlap, that the limit holds and that results reach their calls."""
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


# ------------------------------------------------------------------ Ray's examples

def test_ray_async_actor_example():
    @ray.remote
    class AsyncActor:
        def __init__(self, expected_num_tasks: int):
            self._event = asyncio.Event()
            self._curr_num_tasks = 0
            self._expected_num_tasks = expected_num_tasks

        # Multiple invocations of this method can run concurrently on the same event loop.
        async def run_concurrent(self):
            self._curr_num_tasks += 1
            if self._curr_num_tasks == self._expected_num_tasks:
                print("All coroutines are executing concurrently, unblocking.")
                self._event.set()
            else:
                print("Waiting for other coroutines to start.")

            await self._event.wait()
            print("All coroutines ran concurrently.")

    actor = AsyncActor.remote(4)
    refs = [actor.run_concurrent.remote() for _ in range(4)]

    # Fetch results using regular `ray.get`.
    ray.get(refs)

    # Fetch results using `asyncio` APIs.
    async def get_async():
        return await actor.run_concurrent.remote()

    # (the event is set by now: a fifth call runs straight through)
    assert asyncio.run(get_async()) is None


def test_ray_threaded_actor_example():
    @ray.remote
    class ThreadedActor:
        def task_1(self):
            return "I'm running in a thread!"

        def task_2(self):
            return "I'm running in another thread!"

    a = ThreadedActor.options(max_concurrency=2).remote()
    assert ray.get([a.task_1.remote(), a.task_2.remote()]) == [
        "I'm running in a thread!", "I'm running in another thread!"]


def test_ray_async_max_concurrency_example():
    @ray.remote
    class AsyncActor:
        async def run_task(self):
            await asyncio.sleep(0.5)
            return time.time()

    actor = AsyncActor.options(max_concurrency=2).remote()
    # Only 2 tasks will be running concurrently. Once 2 finish, the next 2 should run.
    t0 = time.time()
    ends = sorted(ray.get([actor.run_task.remote() for _ in range(8)]))
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
