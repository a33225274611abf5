"""troupe.cancel, as Ray's ray.cancel: get of a canceled task or call raises
TaskCancelledError at once; force stops a running task (its worker restarts)."""
import time

import pytest

import troupe as ray


@pytest.fixture(autouse=True)
def runtime():
    ray.init()
    yield
    ray.shutdown()


@ray.remote
def blocking_operation():
    time.sleep(10e6)


@ray.remote
def quick(x):
    return x


@ray.remote
class Slow:
    def sleep(self, s):
        time.sleep(s)
        return s

    def add(self, x):
        return x + 1


def test_cancel_a_running_task_with_force():
    ref = blocking_operation.remote()
    with pytest.raises(ray.exceptions.GetTimeoutError):
        ray.get(ref, timeout=0.5)  # (it runs)
    t = time.monotonic()
    ray.cancel(ref, force=True)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(ref)
    assert time.monotonic() - t < 5
    assert ray.get(quick.remote(3)) == 3  # the pool goes on


def test_cancel_calls():
    a = Slow.remote()
    assert ray.get(a.add.remote(1)) == 2
    slow = a.sleep.remote(1.0)
    queued = a.add.remote(5)
    ray.cancel(queued)
    ray.cancel(slow)
    for r in (slow, queued):
        with pytest.raises(ray.exceptions.TaskCancelledError):
            ray.get(r)
    assert ray.get(a.add.remote(2)) == 3  # the actor goes on
    done = a.add.remote(9)
    assert ray.get(done) == 10
    ray.cancel(done)  # done already: nothing changes
    assert ray.get(done) == 10
    with pytest.raises(ValueError):
        ray.cancel(a.add.remote(0), force=True)  # force is for tasks
