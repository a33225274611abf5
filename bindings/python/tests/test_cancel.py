"""troupe.cancel, as Ray's ray.cancel: get of a canceled task or call raises
TaskCancelledError at once; a running task is interrupted (KeyboardInterrupt in it);
force stops a running task (its worker restarts); an actor's call not begun is not run,
an async actor's running call gets asyncio.CancelledError, a sync actor's running method
runs on and sees was_current_task_cancelled()."""
import asyncio
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


def test_a_cancel_as_another_calls_cause_is_still_a_task_cancelled_error():
    # (a TaskError whose cause is one: derived from the cause's class alone, whose own
    # bases include TaskError; both together have no method order)
    err = ray.exceptions.TaskError("f", "tb", ray.exceptions.TaskCancelledError("gone"))
    got = err.as_instanceof_cause()
    assert isinstance(got, ray.exceptions.TaskCancelledError) and got.traceback_str == "tb"


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


@ray.remote
class Counted:
    def __init__(self):
        self.n = 0
        self.saw = []

    def until_canceled(self, s):
        ctx = ray.get_runtime_context()
        t = time.monotonic()
        while not ctx.is_canceled() and time.monotonic() - t < s:  # (Ray's newer name)
            time.sleep(0.01)
        self.saw.append(ctx.was_current_task_cancelled())
        return s

    def add(self):
        self.n += 1
        return self.n

    def state(self):
        return self.n, self.saw


def test_a_sync_actors_calls_canceled():
    a = Counted.remote()
    assert ray.get(a.add.remote()) == 1
    running = a.until_canceled.remote(30)
    queued = a.add.remote()  # behind it: canceled before it begins, never run
    time.sleep(0.3)
    t = time.monotonic()
    ray.cancel(queued)
    ray.cancel(running)
    for r in (running, queued):
        with pytest.raises(ray.exceptions.TaskCancelledError):
            ray.get(r, timeout=10)
    # the running method was not interrupted: it saw its cancel and returned
    assert ray.get(a.state.remote(), timeout=20) == (1, [True])
    assert time.monotonic() - t < 10
    assert not ray.get_runtime_context().was_current_task_cancelled()  # (a driver)


@ray.remote
class AsyncWaiter:
    def __init__(self):
        self.events = []

    async def wait(self, s):
        try:
            await asyncio.sleep(s)
            self.events.append("slept")
        except asyncio.CancelledError:
            self.events.append("cancelled")
            raise
        return s

    async def events_seen(self):
        return self.events


def test_an_async_actors_running_call_is_cancelled():
    a = AsyncWaiter.remote()
    long = a.wait.remote(60)
    short = a.wait.remote(0.2)
    time.sleep(0.3)
    t = time.monotonic()
    ray.cancel(long)
    # (a RayTaskError too: Ray's documented `except ray.exceptions.RayTaskError`)
    with pytest.raises(ray.exceptions.TaskCancelledError) as err:
        ray.get(long, timeout=10)
    assert isinstance(err.value, ray.exceptions.RayTaskError)
    assert ray.get(short, timeout=10) == 0.2

    def seen():
        return ray.get(a.events_seen.remote(), timeout=10)
    while "cancelled" not in seen() and time.monotonic() - t < 10:
        time.sleep(0.05)
    assert sorted(seen()) == ["cancelled", "slept"]
    assert time.monotonic() - t < 10
    assert ray.get(a.wait.remote(0), timeout=10) == 0  # the actor goes on
