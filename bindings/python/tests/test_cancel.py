"""troupe.cancel, as Ray's ray.cancel: get of a canceled task or call raises
TaskCancelledError at once; a running task is interrupted (KeyboardInterrupt in it);
force stops a running task (its worker restarts)."""
import os
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


@ray.remote(num_cpus=2)  # (the node's every CPU: the next task can only run after it)
def interruptible(marker):
    with open(marker, "w") as fh:
        fh.write(str(os.getpid()))
    try:
        time.sleep(120)
    except KeyboardInterrupt:  # (as Ray raises it in a canceled task)
        with open(marker, "a") as fh:
            fh.write(" interrupted")
        raise
    return "slept"


@ray.remote(num_cpus=2)
def where():
    return os.getpid()


def test_cancel_interrupts_a_running_task(tmp_path):
    marker = tmp_path / "m"
    ref = interruptible.remote(str(marker))
    deadline = time.monotonic() + 30
    while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
        time.sleep(0.01)
    pid = int(marker.read_text().split()[0])
    t = time.monotonic()
    ray.cancel(ref)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(ref)
    # its worker was interrupted, not killed: it takes the next task at once
    assert ray.get(where.remote(), timeout=30) == pid
    assert time.monotonic() - t < 10
    assert marker.read_text().endswith(" interrupted")


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
