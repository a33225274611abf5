"""Remote functions (tasks), as Ray's documentation shows them, with only the import
changed: `@ray.remote def`, `f.remote()`, `f.options()`, refs in and out, nested tasks,
tasks that create actors, ray.wait, errors with their type, max_retries when the worker
dies. Real worker processes (the node's task pool); the store is empty after each test."""
import asyncio
import gc
import os
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest

import troupe as ray
from conftest import store_empties


@pytest.fixture(autouse=True)
def runtime():
    ray.init(resources={"custom": 2})
    yield
    gc.collect()
    ray.shutdown()




# ------------------------------------------------------------------ Ray's "Tasks" pages

@ray.remote
def square(x):
    return x * x


def test_ray_core_walkthrough_square():
    futures = [square.remote(i) for i in range(4)]
    assert ray.get(futures) == [0, 1, 4, 9]
    del futures
    assert store_empties()


@ray.remote
def my_function():
    return 1


@ray.remote
def function_with_an_argument(value):
    return value + 1


@ray.remote
def slow_function(seconds=10):
    time.sleep(seconds)
    return 1


def test_tasks_page_refs_as_arguments_and_wait():
    obj_ref = my_function.remote()
    assert ray.get(obj_ref) == 1
    # a task's ref as another task's argument: the value is passed
    obj_ref2 = function_with_an_argument.remote(obj_ref)
    assert ray.get(obj_ref2) == 2
    # before the first is in, too
    chained = function_with_an_argument.remote(function_with_an_argument.remote(
        my_function.remote()))
    assert ray.get(chained) == 3
    # ray.put's ref as an argument (top level: resolved; by keyword too)
    big = np.arange(300_000, dtype=np.float64)
    ref = ray.put(big)
    assert ray.get(square.remote(ray.put(7))) == 49
    total = ray.remote(lambda a, scale=1: float(a.sum()) * scale)
    assert ray.get(total.remote(ref, scale=2)) == float(big.sum()) * 2
    assert ray.get(total.remote(a=ref)) == float(big.sum())
    # ray.wait: the fast one is ready first (submitted first: on one CPU the pool has one
    # worker, which runs them in order)
    object_refs = [slow_function.remote(0), slow_function.remote(3)]
    ready, remaining = ray.wait(object_refs, num_returns=1, timeout=None)
    assert ready == [object_refs[0]] and remaining == [object_refs[1]]
    ready, remaining = ray.wait(object_refs, num_returns=2, timeout=0.1)
    assert len(ready) == 1
    del obj_ref, obj_ref2, chained, ref, object_refs, ready, remaining
    assert store_empties(6.0)


@ray.remote(num_cpus=1, num_gpus=0)
def with_resources():
    return "ok"


def test_specifying_resources_and_options():
    assert ray.get(with_resources.remote()) == "ok"
    assert ray.get(with_resources.options(num_cpus=0.5).remote()) == "ok"
    custom = ray.remote(resources={"custom": 1}, max_retries=0, num_returns=1)(
        lambda: os.getpid())
    assert ray.get(custom.remote()) != os.getpid()
    assert ray.get(custom.options(name="renamed", max_retries=2).remote()) > 0
    # the options' copy is the same function: pickled once
    assert custom.options(num_cpus=2)._shared is custom._shared


def test_calling_directly_is_a_type_error():
    with pytest.raises(TypeError, match="Remote functions cannot be called directly"):
        square(3)
    with pytest.raises(TypeError, match=r"try '.*square\.remote\(\)'"):
        square(3)


def test_options_are_checked():
    with pytest.raises(TypeError, match="unknown options"):
        ray.remote(colour="red")(lambda: 1)
    with pytest.raises(TypeError, match="unknown options"):
        square.options(max_restarts=1)  # (an actor's)
    with pytest.raises(ValueError):
        square.options(max_retries=-2)
    with pytest.raises(ValueError):
        square.options(num_cpus=-1)
    with pytest.raises(ValueError):
        square.options(resources={"CPU": 1})
    with pytest.raises(ValueError, match="num_returns"):
        square.options(num_returns=-1)  # (2 is honoured: tests/test_num_returns.py)
    from troupe import _errors
    with _errors._warned_lock:  # (warned once a process: another test may have been first)
        _errors._warned.discard(("a remote function's options", "accelerator_type"))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        f = square.options(accelerator_type="A100", memory=1 << 20,
                           scheduling_strategy="DEFAULT")
    assert [str(w.message) for w in seen if "accelerator_type" in str(w.message)]
    assert not [w for w in seen if "scheduling_strategy" in str(w.message)]
    assert not [w for w in seen if "memory" in str(w.message)]  # (honoured: a resource)
    assert all(w.filename == __file__ for w in seen)
    assert ray.get(f.remote(5)) == 25
    with pytest.raises(TypeError, match="function or a class"):
        ray.remote(42)


@ray.remote
def env_of(name):
    return os.environ.get(name)


@ray.remote
class EnvReader:
    def get(self, name):
        return os.environ.get(name)


def test_runtime_env_env_vars():
    # a task's own: set while it runs, gone for the pool's next task
    with_env = env_of.options(runtime_env={"env_vars": {"TROUPE_T_VAR": "task"}})
    assert ray.get(with_env.remote("TROUPE_T_VAR")) == "task"
    assert [ray.get(env_of.remote("TROUPE_T_VAR")) for _ in range(4)] == [None] * 4
    with pytest.raises(TypeError, match="env_vars"):
        env_of.options(runtime_env={"env_vars": {"X": 1}})
    # troupe.init's (the job's): every task's and actor's, under their own
    ray.shutdown()
    ray.init(runtime_env={"env_vars": {"TROUPE_J_VAR": "job", "TROUPE_T_VAR": "job"}})
    assert ray.get(env_of.remote("TROUPE_J_VAR")) == "job"
    assert ray.get(with_env.remote("TROUPE_T_VAR")) == "task"  # (the task's own wins)
    reader = EnvReader.remote()
    assert ray.get(reader.get.remote("TROUPE_J_VAR")) == "job"
    assert os.environ.get("TROUPE_J_VAR") is None  # (not the driver's)
    # inherited by the tasks a task starts (Ray's rule)
    assert ray.get(env_of_child.options(runtime_env={"env_vars": {"TROUPE_C_VAR": "p"}})
                   .remote("TROUPE_C_VAR")) == ["p", "job"]
    # the next runtime has its own job env (none here)
    ray.shutdown()
    ray.init()
    assert ray.get(env_of.remote("TROUPE_J_VAR")) is None


@ray.remote
def env_of_child(name):
    return [ray.get(env_of.remote(name)), ray.get(env_of.remote("TROUPE_J_VAR"))]


def test_node_affinity():
    from troupe.util.scheduling_strategies import NodeAffinitySchedulingStrategy as Affinity
    here = ray.get_runtime_context().node_id
    on_here = env_of.options(scheduling_strategy=Affinity(here, soft=False))
    assert ray.get(on_here.remote("HOME")) == os.environ.get("HOME")
    reader = EnvReader.options(scheduling_strategy=Affinity(here, soft=False)).remote()
    assert ray.get(reader.get.remote("HOME")) == os.environ.get("HOME")
    gone = "ab" * 28  # (no node has it)
    assert ray.get(env_of.options(scheduling_strategy=Affinity(gone, soft=True))
                   .remote("HOME")) == os.environ.get("HOME")
    with pytest.raises(ValueError, match="no live node"):
        env_of.options(scheduling_strategy=Affinity(gone, soft=False)).remote("HOME")
    with pytest.raises(ValueError, match="no live node"):
        EnvReader.options(scheduling_strategy=Affinity(gone, soft=False)).remote()


# ------------------------------------------------------------------ nested tasks

@ray.remote
def f():
    return 1


@ray.remote
def g():
    # f 4 times; the refs are the result
    return [f.remote() for _ in range(4)]


@ray.remote
def h():
    # f 4 times, waited for here
    return ray.get([f.remote() for _ in range(4)])


@ray.remote
def factorial(n):
    if n <= 1:
        return 1
    return n * ray.get(factorial.remote(n - 1))


def test_nested_remote_functions():
    refs = ray.get(g.remote())
    assert len(refs) == 4 and all(isinstance(r, ray.ObjectRef) for r in refs)
    assert ray.get(refs) == [1, 1, 1, 1]
    assert ray.get(h.remote()) == [1, 1, 1, 1]
    del refs
    assert store_empties()


def test_recursive_factorial():
    assert ray.get(factorial.remote(6)) == 720
    assert ray.get([factorial.remote(i) for i in range(1, 5)]) == [1, 2, 6, 24]
    assert store_empties()


@ray.remote
def call_it(fn, x):
    return ray.get(fn.remote(x))


def test_a_remote_function_as_an_argument():
    assert ray.get(call_it.remote(square, 9)) == 81


# ------------------------------------------------------------------ refs in and out

@ray.remote
def make_object(n):
    return ray.put(np.full(n, 3.0))


@ray.remote
def sum_inside(refs):
    return float(sum(ray.get(r).sum() for r in refs))


def test_a_task_returns_a_ref():
    inner = ray.get(make_object.remote(200_000))
    assert isinstance(inner, ray.ObjectRef)
    assert float(ray.get(inner).sum()) == 600_000.0
    del inner
    assert store_empties()


def test_refs_nested_in_arguments_are_borrowed():
    a = ray.put(np.ones(10))
    b = square.remote(np.ones(5))          # a task's pending result, nested
    c = make_object.remote(4)              # a ref of a ref
    assert ray.get(sum_inside.remote([a, b])) == 15.0
    assert ray.get(sum_inside.remote({"x": [a]}.get("x"))) == 10.0
    assert ray.get(sum_inside.remote([ray.get(c)])) == 12.0
    del a, b, c
    assert store_empties()


@ray.remote
class Counter:
    def __init__(self, start):
        self.n = start

    def incr(self):
        self.n += 1
        return self.n


@ray.remote
def use_an_actor(start):
    c = Counter.remote(start)
    ray.get(c.incr.remote())
    return ray.get(c.incr.remote())


@ray.remote
def hand_out_an_actor(start):
    return Counter.remote(start)


def test_a_task_creates_an_actor():
    assert ray.get(use_an_actor.remote(40)) == 42
    handle = ray.get(hand_out_an_actor.remote(10))
    assert ray.get(handle.incr.remote()) == 11


def test_a_task_is_not_an_actor():
    ctx = ray.remote(lambda: ray.get_runtime_context().get_actor_id())
    assert ray.get(ctx.remote()) is None


# ------------------------------------------------------------------ errors and retries

class MyError(Exception):
    pass


@ray.remote
def fails(kind):
    if kind == "value":
        raise ValueError("bad value")
    raise MyError("mine")


def test_errors_are_raised_with_their_type():
    with pytest.raises(ValueError, match="bad value") as info:
        ray.get(fails.remote("value"))
    assert isinstance(info.value, ray.exceptions.RayTaskError)
    assert "Remote traceback" in str(info.value) and "fails" in str(info.value)
    with pytest.raises(MyError):
        ray.get(fails.remote("mine"))
    # a failed task's ref as an argument: the dependent task fails with it
    with pytest.raises(ValueError):
        ray.get(square.remote(fails.remote("value")))
    # the worker that raised serves the next task
    assert ray.get(square.remote(3)) == 9
    assert store_empties()


@ray.remote(max_retries=1)
def dies_once(marker):
    if not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)
    return "second try"


@ray.remote(max_retries=0)
def dies_always(marker):
    with open(marker, "a") as fh:
        fh.write("x")
    os._exit(1)


def test_max_retries_when_the_worker_dies(tmp_path):
    assert ray.get(dies_once.remote(str(tmp_path / "once")), timeout=60) == "second try"
    marker = tmp_path / "always"
    with pytest.raises(ray.exceptions.WorkerCrashedError):
        ray.get(dies_always.remote(str(marker)), timeout=60)
    assert marker.read_text() == "x"  # run once: no retry
    marker2 = tmp_path / "twice"
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(dies_always.options(max_retries=1).remote(str(marker2)), timeout=60)
    assert marker2.read_text() == "xx"
    assert ray.get(square.remote(4)) == 16  # the pool serves on


@ray.remote
def flaky(marker, fail_times, kind, arr=None):
    """Raises `kind` the first fail_times times it runs (counted in the file marker);
    with arr, first checks it came unchanged and changes it (the retry must get a fresh
    copy)."""
    if arr is not None:
        assert arr[0] == 1.0, f"a retry saw the last try's change: {arr[0]}"
        arr[0] = -1.0
    with open(marker, "a") as fh:
        fh.write("x")
    if len(open(marker).read()) <= fail_times:
        raise {"value": ValueError, "key": KeyError}[kind](f"try {len(open(marker).read())}")
    return "ran " + str(len(open(marker).read()))


def test_retry_exceptions(tmp_path):
    # Ray's default: an exception is not retried
    m = tmp_path / "a"
    with pytest.raises(ValueError):
        ray.get(flaky.remote(str(m), 1, "value"))
    assert m.read_text() == "x"
    # True: any exception, up to max_retries more tries (Ray's default 3), on the same
    # arguments as the first (a fresh copy each: what a try changed is not seen)
    m = tmp_path / "b"
    arr = np.ones(1000)
    f = flaky.options(retry_exceptions=True)
    assert ray.get(f.remote(str(m), 3, "value", arr)) == "ran 4"
    m = tmp_path / "c"
    with pytest.raises(ValueError, match="try 4"):
        ray.get(f.remote(str(m), 9, "value"))
    assert m.read_text() == "xxxx"
    m = tmp_path / "d"
    with pytest.raises(ValueError, match="try 2"):
        ray.get(flaky.options(retry_exceptions=True, max_retries=1).remote(str(m), 9, "value"))
    m = tmp_path / "e"
    with pytest.raises(ValueError, match="try 1"):
        ray.get(flaky.options(retry_exceptions=True, max_retries=0).remote(str(m), 9, "value"))
    # a list: only its exceptions (and their subclasses)
    g = flaky.options(retry_exceptions=[LookupError], max_retries=5)
    m = tmp_path / "f"
    assert ray.get(g.remote(str(m), 2, "key")) == "ran 3"
    m = tmp_path / "g"
    with pytest.raises(ValueError):
        ray.get(g.remote(str(m), 2, "value"))
    assert m.read_text() == "x"
    # -1: without end (here until it succeeds)
    m = tmp_path / "h"
    assert ray.get(flaky.options(retry_exceptions=True, max_retries=-1)
                   .remote(str(m), 6, "value")) == "ran 7"
    # checked as Ray checks it
    with pytest.raises(TypeError, match="retry_exceptions"):
        flaky.options(retry_exceptions="yes")
    with pytest.raises(TypeError, match="retry_exceptions"):
        flaky.options(retry_exceptions=[ValueError, 3])
    with pytest.raises(TypeError, match="retry_exceptions"):
        ray.remote(retry_exceptions=1.5)(lambda: 1)
    assert store_empties()


# ------------------------------------------------------------------ how functions travel

_calls = 0


@ray.remote
def count_calls():
    global _calls
    _calls += 1
    return os.getpid(), _calls


def test_a_worker_loads_a_function_once():
    """The pickled function rides with each call, but a worker that has it keeps it (by
    its digest): its globals live on between calls."""
    seen = {}
    for _ in range(20):
        pid, n = ray.get(count_calls.remote())
        assert n == seen.get(pid, 0) + 1
        seen[pid] = n


@ray.remote
def plain_task(x, what="echo"):
    """A function whose tasks have builtin scalar arguments (troupe._fast's plain path
    after a worker's first run of it), doing what `what` says with x."""
    if what == "path":  # which path runs it: _worker.run_task's frame is under it, or not
        import inspect
        return "python" if any(f.function == "run_task" for f in inspect.stack(0)) else "c"
    if what == "list":
        return [x, x]
    if what == "array":
        return np.full(3, x)
    if what == "coroutine":  # (a plain function that returns one: run as run_task runs it)
        async def twice():
            return x * 2
        return twice()
    if what == "fail":
        raise ValueError(f"fails with {x}")
    if what == "evicts":  # (type attribute lookups that miss CPython's cache, then a raise:
        import threading  # the C path must not call the C API with the error set)
        local = threading.local()
        for i in range(60000):
            getattr(local, f"evict{i}", None)
        raise ValueError(f"fails after evicting {x}")
    if what == "sleeps_async":  # x: a marker file; a coroutine that sleeps (canceled)
        async def sleeps():
            with open(x, "w") as fh:
                fh.write(str(os.getpid()))
            await asyncio.sleep(120)
        return sleeps()
    if what == "sleep":  # x: a marker file (test_cancel's interruptible)
        with open(x, "w") as fh:
            fh.write(str(os.getpid()))
        try:
            time.sleep(120)
        except KeyboardInterrupt:
            with open(x, "a") as fh:
                fh.write(" interrupted")
            raise
    if what == "exit":  # x: a file of runs; the first exits its worker
        with open(x, "a+") as fh:
            fh.write("run\n")
            fh.seek(0)
            runs = len(fh.readlines())
        if runs == 1:
            sys.exit(0)
        return runs
    return x


def test_plain_tasks_keep_the_general_paths_rules(tmp_path):
    """What the worker's plain path of tasks (troupe._fast: a function the worker has run
    once, builtin scalar arguments, one result) must do as run_task does: scalar and
    other results, a returned coroutine run, an error with the function's traceback,
    troupe.cancel's KeyboardInterrupt in the function, sys.exit as the worker's crash
    (the task retried). With the extension a worker's later tasks take it; without it,
    none does."""
    from troupe import _runtime
    one = plain_task.options(num_cpus=os.cpu_count())  # (a pool of one worker)
    now = "c" if _runtime.fast is not None else "python"
    assert [ray.get(one.remote(0, "path")) for _ in range(3)] == ["python", now, now]
    for v in [0, 1 << 70, -3.5, float("inf"), 2j, True, None, "", "é", b"\xff"]:
        got = ray.get(one.remote(v))
        assert got == v and type(got) is type(v)
    assert ray.get(one.remote(x=2, what="list")) == [2, 2]
    assert np.array_equal(ray.get(one.remote(2.0, "array")), np.full(3, 2.0))
    assert ray.get(one.remote(4, "coroutine")) == 8
    for _ in range(2):
        with pytest.raises(ValueError, match="fails with 5") as info:
            ray.get(one.remote(5, "fail"))
        assert "plain_task" in str(info.value) and "fast_task" not in str(info.value)
    with pytest.raises(ValueError, match="fails after evicting 1"):
        ray.get(one.remote(1, "evicts"))
    for what in ("sleep", "sleeps_async"):
        marker = tmp_path / what
        ref = one.remote(str(marker), what)
        deadline = time.monotonic() + 30
        while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
            time.sleep(0.01)
        pid = int(marker.read_text().split()[0])
        ray.cancel(ref)
        with pytest.raises(ray.exceptions.TaskCancelledError):
            ray.get(ref)
        # (get raised at once; the worker was interrupted, not killed: it runs the next
        # at once, not after the sleep)
        t = time.monotonic()
        assert ray.get(one.remote(0, "path"), timeout=30) == now
        assert time.monotonic() - t < 20
        assert marker.read_text().split()[0] == str(pid)
    assert (tmp_path / "sleep").read_text() == f"{pid} interrupted"
    runs = tmp_path / "runs"
    assert ray.get(one.options(max_retries=1).remote(str(runs), "exit"), timeout=60) == 2
    assert ray.get(one.remote(7), timeout=30) == 7


def test_closures_large_functions_and_large_arguments():
    offset = 5
    add = ray.remote(lambda x: x + offset)
    assert ray.get(add.remote(1)) == 6
    table = list(range(20_000))  # captured: the function pickles to ~60 KiB (the store)
    lookup = ray.remote(lambda i: table[i])
    assert ray.get([lookup.remote(i) for i in (0, 19_999)]) == [0, 19_999]
    arr = np.arange(200_000, dtype=np.float64)  # 1.6 MB of arguments: the store
    assert ray.get(ray.remote(lambda a: float(a.sum())).remote(arr)) == float(arr.sum())
    del add, lookup
    assert store_empties()


SCRIPT = """
import time
import troupe as ray

ray.init()

@ray.remote
def square(x):
    return x * x

@ray.remote
def factorial(n):
    return 1 if n <= 1 else n * ray.get(factorial.remote(n - 1))

futures = [square.remote(i) for i in range(4)]
print(ray.get(futures))
print(ray.get(factorial.remote(5)))
del futures
time.sleep(0.1)
print(ray.object_store_stats()["n_objects"])
"""


def test_functions_of_main_go_by_value(tmp_path):
    path = tmp_path / "tasks_script.py"
    path.write_text(textwrap.dedent(SCRIPT))
    out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:3] == ["[0, 1, 4, 9]", "120", "0"], out.stdout


@ray.remote
class Submitter:
    def run(self, n):
        return ray.get([square.remote(i) for i in range(n)])


def test_an_actor_submits_tasks():
    s = Submitter.remote()
    assert ray.get(s.run.remote(5)) == [0, 1, 4, 9, 16]
