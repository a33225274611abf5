"""ray.util.queue.Queue: a queue that the driver, tasks and actors share (its own async
actor keeps it), as Ray's actor-queue example uses it; blocking and non-blocking put and
get, timeouts, batches, async use."""
import asyncio
import time

import pytest

import troupe as ray
from troupe.util.queue import Empty, Full, Queue


@pytest.fixture(autouse=True)
def runtime():
    ray.init(num_cpus=4)
    yield
    ray.shutdown()


@ray.remote
def consumer(q):
    return q.get(block=True, timeout=30)


@ray.remote
class Producer:
    def fill(self, q, n):
        for i in range(n):
            q.put(i)
        return n


def test_tasks_and_actors_share_a_queue():
    q = Queue(maxsize=100)
    waiting = [consumer.remote(q) for _ in range(2)]  # (they wait for items)
    time.sleep(0.2)
    producer = Producer.remote()
    assert ray.get(producer.fill.remote(q, 10)) == 10
    got = sorted(ray.get(waiting))
    assert len(got) == 2 and set(got) <= set(range(10))
    assert q.qsize() == len(q) == 8 and not q.empty() and not q.full()
    rest = [q.get() for _ in range(8)]
    assert sorted(rest + got) == list(range(10)) and rest == sorted(rest)  # (in order)
    assert q.empty()


def test_bounds_timeouts_and_batches():
    q = Queue(maxsize=2)
    q.put_nowait("a")
    q.put("b", timeout=1)
    assert q.full()
    with pytest.raises(Full):
        q.put_nowait("c")
    t = time.monotonic()
    with pytest.raises(Full):
        q.put("c", timeout=0.2)
    assert 0.15 < time.monotonic() - t < 5
    assert q.get_nowait() == "a" and q.get(block=False) == "b"
    with pytest.raises(Empty):
        q.get_nowait()
    with pytest.raises(Empty):
        q.get(timeout=0.1)
    with pytest.raises(ValueError, match="timeout"):
        q.get(timeout=-1)
    with pytest.raises(Full):
        q.put_nowait_batch([1, 2, 3])  # (none of them: more than its room)
    q.put_nowait_batch([1, 2])
    with pytest.raises(Empty):
        q.get_nowait_batch(3)
    assert q.get_nowait_batch(2) == [1, 2]
    assert issubclass(Empty, __import__("queue").Empty)

    async def both():
        await q.put_async("x")
        return await q.get_async(timeout=5)
    assert asyncio.run(both()) == "x"
    q.shutdown()
