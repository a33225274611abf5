"""The rest of the surface a Ray program touches (issue 24, item 4), each with real
actors: uncompiled graphs run as calls and visualize(), ray.method, exit_actor, actor
options (refused, warned or honoured, never dropped), class attributes, util.collective's
error types and lazy communicators, the runtime context and resources, ActorPool, actors
ended with their last handle, and init after shutdown."""
import os
import re
import sys
import time

import numpy as np
import pytest

import troupe
from troupe.dag import InputNode, MultiOutputNode


@troupe.remote
class Echo:
    GREETING = "hello"

    def echo(self, x):
        return x

    def add(self, a, b=0):
        return a + b

    def fail(self, x):
        raise ZeroDivisionError(f"no {x}")


# ------------------------------------------------------------------ uncompiled graphs

def test_uncompiled_graph_runs_as_calls(ray):
    a, b = Echo.remote(), Echo.remote()
    with InputNode() as inp:
        dag = a.echo.bind(inp)
    ref = dag.execute("hello")  # Ray's quickstart, before any compile
    assert isinstance(ref, ray.ObjectRef)
    assert ray.get(ref) == "hello"
    # (chain is compiled below: alone on its input, or the other graphs' nodes on that
    # input would be leaves of it)
    with InputNode() as inp:
        chain = a.echo.bind(b.echo.bind(inp))
    with InputNode() as inp:
        multi = MultiOutputNode([a.echo.bind(inp), b.add.bind(inp, 10)])
        items = b.add.bind(a.add.bind(inp[0], inp[1]), b=inp.k)
    assert ray.get(chain.execute(7)) == 7
    refs = multi.execute(5)
    assert isinstance(refs, list) and ray.get(refs) == [5, 15]
    assert ray.get(items.execute(1, 2, k=10)) == 13
    # a node bound twice runs once per execution (its one ref feeds both)
    with InputNode() as inp:
        shared = a.add.bind(inp, 1)
        both = MultiOutputNode([b.add.bind(shared, 0), b.add.bind(shared, 100)])
    assert ray.get(both.execute(1)) == [2, 102]
    # an error flows to the outputs as the method's own exception
    with InputNode() as inp:
        bad = b.echo.bind(a.fail.bind(inp))
    with pytest.raises(ZeroDivisionError, match="no 3"):
        ray.get(bad.execute(3))
    with pytest.raises(TypeError):
        dag.execute(1, 2)  # the whole input needs one argument
    # the same graph still compiles and runs
    compiled = chain.experimental_compile()
    assert ray.get(compiled.execute("x")) == "x"
    compiled.teardown()


@troupe.remote
class Tally:
    def __init__(self, start):
        self.total = start

    def add(self, x):
        self.total += x
        return self.total

    def get(self):
        return self.total


def test_class_nodes_create_their_actor_and_chain_its_calls(ray):
    # Cls.bind(...) (Ray's ClassNode): an execution creates the actor; the methods bound
    # on it run in the order bound, each after the one before, read by an output or not
    t, u = Tally.bind(10), Tally.bind(100)
    first = t.get.bind()
    t.add.bind(2)  # (no output reads these two: they run all the same, before the next)
    t.add.bind(4)
    u.add.bind(6)
    with InputNode() as inp:
        dag = MultiOutputNode([first, t.get.bind(), u.get.bind(), u.add.bind(inp["x"])])
        by_attr = Tally.bind(0).add.bind(inp.x)
    assert ray.get(dag.execute({"x": 1})) == [10, 16, 106, 107]  # (x: the value's item)
    import collections
    assert ray.get(by_attr.execute(collections.namedtuple("P", "x y")(3, 4))) == 3
    assert ray.get(dag.execute({"x": 5})) == [10, 16, 106, 111]  # (a new actor each time)
    assert ray.get(Tally.bind(Tally.bind(1).add.bind(2)).get.bind().execute()) == 3
    from troupe.dag.input_node import InputNode as Inp  # (Ray's import paths)
    from troupe.dag.output_node import MultiOutputNode as Multi
    assert Inp is InputNode and Multi is MultiOutputNode
    with pytest.raises(TypeError, match="already made"):
        t.get.bind().experimental_compile()


def _declared_and_edges(text):
    declared = set(re.findall(r"^\s*(\w+) \[", text, re.M))
    ends = {n for m in re.finditer(r"^\s*(\w+) -> (\w+)", text, re.M) for n in m.groups()}
    return declared, ends


def test_visualize_names_methods_and_declares_every_node(ray):
    a, b = Echo.remote(), Echo.remote()
    with InputNode() as inp:
        dag = MultiOutputNode([b.add.bind(a.echo.bind(inp), 1), a.echo.bind(inp)])
    for text in (dag.visualize(), dag.experimental_compile().visualize()):
        assert "Echo.echo" in text and "Echo.add" in text, text
        assert "_troupe_dag" not in text, text
        declared, ends = _declared_and_edges(text)
        assert ends and ends <= declared, text
    ray.shutdown()  # (tears the compiled graph down)
    ray.init(num_cpus=4)


# ------------------------------------------------------------------ init after shutdown

def test_init_after_shutdown_while_old_arrays_live():
    troupe.init(num_cpus=2)
    old = troupe.get(troupe.put(np.arange(1000, dtype=np.int64)))
    held = [old]  # (as a failed test's traceback keeps one)
    troupe.shutdown()
    for _ in range(2):  # a new runtime each time, the first one's array still readable
        troupe.init(num_cpus=2)
        try:
            a = Echo.remote()
            assert troupe.get(a.add.remote(1, 2)) == 3
            new = troupe.get(troupe.put(np.ones(10)))
            assert new.sum() == 10
        finally:
            troupe.shutdown()
        assert int(held[0].sum()) == 999 * 1000 // 2
        del new
    held.clear()
    del old
    import gc
    gc.collect()
    troupe.init(num_cpus=2)
    assert troupe.get(troupe.put(5)) == 5
    troupe.shutdown()


# ------------------------------------------------------------------ ray.method

def test_method_decorator(ray):
    if True:  # (concurrency groups: tests/test_concurrency.py)
        @ray.remote(concurrency_groups={"io": 1})
        class M:
            @ray.method(num_returns=1)
            def one(self, x):
                return x + 1

            @ray.method(concurrency_group="io")
            def grouped(self):
                return "ran"

            @ray.method
            def bare(self):
                return "bare"

    m = M.remote()
    assert ray.get([m.one.remote(1), m.grouped.remote(), m.bare.remote()]) == [2, "ran", "bare"]
    assert ray.get(m.one.options(num_returns=1).remote(5)) == 6

    @ray.remote
    class Two:  # (num_returns: tests/test_num_returns.py)
        @ray.method(num_returns=2)
        def pair(self):
            return 1, 2
    two = Two.remote()
    assert ray.get(two.pair.remote()) == [1, 2]
    with pytest.raises(ValueError, match="num_returns=-1"):
        m.one.options(num_returns=-1)
    with pytest.raises(TypeError):
        ray.method(num_return=1)  # (a typo: not Ray's)
    with pytest.raises(TypeError):
        m.one.options(bogus=1)


@troupe.remote
class Flaky:
    """Each method fails its first `fails` tries (counted per method), then returns the
    number of tries."""
    def __init__(self, fails):
        self.fails, self.tries = fails, {}

    def _try(self, name, kind=ValueError):
        self.tries[name] = self.tries.get(name, 0) + 1
        if self.tries[name] <= self.fails:
            raise kind(f"{name} try {self.tries[name]}")
        return self.tries[name]

    @troupe.method(retry_exceptions=True, max_task_retries=2)
    def retried(self):
        return self._try("retried")

    @troupe.method(retry_exceptions=[KeyError])
    def only_key_errors(self, kind):
        return self._try("only_key_errors:" + kind.__name__, kind)

    @troupe.method(retry_exceptions=True)
    def by_the_actors_retries(self):
        return self._try("by_the_actors_retries")

    def plain(self):
        return self._try("plain")

    @troupe.method(retry_exceptions=True, max_task_retries=-1)
    def quits(self):
        troupe.exit_actor()


def test_method_retry_exceptions(ray):
    f = Flaky.remote(2)
    assert ray.get(f.retried.remote()) == 3  # two failures, retried twice: the third ran
    f = Flaky.remote(3)
    with pytest.raises(ValueError, match="retried try 3"):
        ray.get(f.retried.remote())
    # the actor's max_task_retries, for methods that say retry_exceptions (Ray's: 0)
    g = Flaky.options(max_task_retries=4).remote(3)
    assert ray.get(g.by_the_actors_retries.remote()) == 4
    assert ray.get(g.only_key_errors.remote(KeyError)) == 4
    with pytest.raises(ValueError, match="try 1"):
        ray.get(g.only_key_errors.remote(ValueError))  # not in its list: once
    with pytest.raises(ValueError, match="plain try 1"):
        ray.get(g.plain.remote())  # no retry_exceptions: once
    with pytest.raises(ValueError, match="try 1"):  # the actor's default 0: once
        flaky = Flaky.remote(3)
        ray.get(flaky.by_the_actors_retries.remote())
    with pytest.raises(ray.exceptions.RayActorError):  # exit_actor is never retried
        flaky = Flaky.remote(0)
        ray.get(flaky.quits.remote(), timeout=30)
    with pytest.raises(TypeError, match="retry_exceptions"):
        @ray.remote
        class Bad:
            @ray.method(retry_exceptions="all")
            def m(self):
                pass
    with pytest.raises(ValueError, match="max_task_retries"):
        Flaky.options(max_task_retries=-2)


@troupe.remote(max_restarts=2, max_task_retries=1)
class Exiting:
    """sys.exit(code) in update() while the file at path has fewer than `quits` lines
    (one is added for each run): the process ends as if it crashed."""
    def __init__(self, path, quits):
        self.path, self.quits = path, quits

    def update(self):
        with open(self.path, "a+") as f:
            f.write("run\n")
            f.seek(0)
            runs = len(f.readlines())
        if runs <= self.quits:
            sys.exit(3)
        return runs

    def pid(self):
        return os.getpid()

    async def exit_async(self):
        sys.exit(2)


def test_sys_exit_in_a_method_ends_the_process_as_a_crash(ray, tmp_path):
    # (in a coroutine on the worker's loop too: no hang, the process ends)
    c = Exiting.options(max_restarts=0).remote(str(tmp_path / "c"), 0)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(c.exit_async.remote(), timeout=30)
    # Ray's actor_checkpointing: the actor restarts (max_restarts) and the call that was
    # in flight goes again (max_task_retries) to the new process
    a = Exiting.remote(str(tmp_path / "a"), 1)
    p0 = ray.get(a.pid.remote())
    assert ray.get(a.update.remote(), timeout=30) == 2
    assert ray.get(a.pid.remote()) != p0
    # retries used up: ActorDiedError, and the driver lives on (the error is never a
    # SystemExit of its own)
    b = Exiting.remote(str(tmp_path / "b"), 5)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(b.update.remote(), timeout=30)
    assert (tmp_path / "b").read_text().count("run") == 2  # the first run and one retry
    # and a task's sys.exit: its worker exits, the task goes again (max_retries)
    @ray.remote(max_retries=1)
    def quits_once(path):
        with open(path, "a+") as f:
            f.write("run\n")
            f.seek(0)
            runs = len(f.readlines())
        if runs == 1:
            sys.exit(0)
        return runs
    assert ray.get(quits_once.remote(str(tmp_path / "t")), timeout=30) == 2


def _runs(path):
    """One more line in the file at path; how many it has now."""
    with open(path, "a+") as f:
        f.write("run\n")
        f.seek(0)
        return len(f.readlines())


@troupe.remote(max_restarts=8)
class Crashing:
    """Methods whose first run crashes the worker (the file at path counts the runs):
    the actor's max_task_retries is 0, unless options say otherwise; some methods
    declare their own (Ray's @ray.method(max_task_retries=...))."""
    def plain(self, path):
        return self._crash_once(path)

    @troupe.method(max_task_retries=1)
    def retried(self, path):
        return self._crash_once(path)

    @troupe.method(max_task_retries=0)
    def never(self, path):
        return self._crash_once(path)

    @troupe.method(max_task_retries=1, num_returns=2)
    def retried_pair(self, path):
        return self._crash_once(path), "second"

    def _crash_once(self, path):
        runs = _runs(path)
        if runs == 1:
            os._exit(1)
        return runs


def test_a_methods_own_max_task_retries_over_the_actors(ray, tmp_path):
    """@ray.method(max_task_retries=n) (Ray's): a call of that method in flight when the
    worker dies goes again n times, whatever the actor's max_task_retries is (more, or
    none where the actor's are -1), through any handle of the actor: its own, a copy in
    another actor, one found by name."""
    a = Crashing.options(name="crashing").remote()
    assert ray.get(a.retried.remote(str(tmp_path / "r")), timeout=30) == 2
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(a.plain.remote(str(tmp_path / "p")), timeout=30)  # (the actor's: 0)
    assert ray.get(a.retried_pair.remote(str(tmp_path / "pair")), timeout=30) == [2, "second"]
    found = ray.get_actor("crashing")
    assert ray.get(found.retried.remote(str(tmp_path / "f")), timeout=30) == 2

    @ray.remote
    def through(handle, path):  # (a copy of the handle, in a task)
        return ray.get(handle.retried.remote(path), timeout=30)
    assert ray.get(through.remote(a, str(tmp_path / "t")), timeout=60) == 2
    b = Crashing.options(max_task_retries=-1).remote()
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(b.never.remote(str(tmp_path / "n")), timeout=30)
    assert ray.get(b.plain.remote(str(tmp_path / "bp")), timeout=30) == 2  # (the actor's)
    # a call's own, through .options(): over the method's and the actor's
    assert ray.get(a.plain.options(max_task_retries=1).remote(str(tmp_path / "o")),
                   timeout=30) == 2
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(b.plain.options(max_task_retries=0).remote(str(tmp_path / "o0")), timeout=30)
    for name, runs in (("r", 2), ("p", 1), ("pair", 2), ("f", 2), ("t", 2), ("n", 1),
                       ("bp", 2), ("o", 2), ("o0", 1)):
        assert (tmp_path / name).read_text().count("run") == runs, name


def test_ray_tests_small_surface(ray):
    """What Ray's own tests touch beside the API proper: init()'s context as a mapping of
    the node's addresses, wait([]), ray.ObjectID, ray._private.ray_constants, an actor's
    method passed to a task, Ray's TypeError for an option of the wrong type (its words)
    and ValueError for a bad value, namespace checks."""
    import re
    import troupe._private.ray_constants as rc
    ctx = ray.init(ignore_reinit_error=True)
    assert ctx is not None and ctx["address"] == ray.node_address() and "webui_url" in ctx
    assert ctx.address_info["address"] == ctx["address"] and sorted(ctx) == sorted(
        ctx.address_info)
    assert ray.wait([]) == ([], []) and ray.ObjectID is ray.ObjectRef
    assert rc.KV_NAMESPACE_FUNCTION_TABLE and rc.FUNCTION_SIZE_ERROR_THRESHOLD == 10**8

    @ray.remote
    class Adder:
        def add(self, x):
            return x + 1

    @ray.remote
    def call(method, x):
        return ray.get(method.remote(x))
    a = Adder.remote()
    assert ray.get(call.remote(a.add, 1)) == 2

    def f():
        return 1
    for key, types in (("max_retries", (int, type(None))), ("max_calls", (int, type(None))),
                       ("num_returns", (int, str, type(None)))):
        with pytest.raises(TypeError, match=re.escape(
                f"The type of keyword '{key}' must be {types}, but received type {float}")):
            ray.remote(**{key: 0.5})(f)
    class Plain:
        pass
    for key in ("max_restarts", "max_task_retries"):
        with pytest.raises(TypeError, match=f"The type of keyword '{key}'"):
            ray.remote(**{key: 0.5})(Plain)
        with pytest.raises(ValueError, match=f"The keyword '{key}' only accepts None, 0, -1"):
            Adder.options(**{key: np.int64(-5)})
    with pytest.raises(ValueError, match="The keyword 'max_retries' only accepts None, 0, -1"):
        ray.remote(max_retries=np.int64(-3))(f)
    with pytest.raises(ValueError, match="The keyword 'max_calls' only accepts None, 0 or"):
        ray.remote(max_calls=-1)(f)
    with pytest.raises(ValueError, match="The keyword 'num_returns' only accepts None, a "
                                         "non-negative integer, or \"dynamic\""):
        ray.remote(num_returns=-1)(f)
    assert ray.get(ray.remote(max_retries=np.int64(1))(f).remote()) == 1
    with pytest.raises(TypeError):
        Adder.options(namespace=123)
    with pytest.raises(ValueError):
        Adder.options(namespace="")
    with pytest.raises(TypeError):
        ray.get_actor("a", namespace=123)
    with pytest.raises(ValueError):
        ray.get_actor("a", namespace="")


def test_arguments_a_signature_refuses_are_a_type_error_at_remote(ray):
    """Ray's: .remote() with arguments the function's (or method's) signature refuses is
    a TypeError at once, not an error in the worker; through a copy of the handle too."""
    @ray.remote
    def f(a, b=2, *, c):
        return a + b + c

    @ray.remote
    def anything(*args, **kwargs):
        return len(args) + len(kwargs)
    for bad in [((1,), {}), ((1, 2, 3), {"c": 1}), ((), {"c": 1}), ((1,), {"c": 1, "d": 2}),
                ((1,), {"a": 1, "c": 1})]:
        for _ in range(2):  # (a shape refused is refused again: only good ones are kept)
            with pytest.raises(TypeError, match="f.remote()"):
                f.remote(*bad[0], **bad[1])
    assert ray.get([f.remote(1, c=3), f.remote(1, 5, c=3), f.options(name="g").remote(
        a=1, c=1)]) == [6, 9, 4]
    assert ray.get(anything.remote(1, 2, x=3)) == 3

    @ray.remote
    class Methods:
        def one(self, x):
            return x

        @staticmethod
        def static(x, y=1):
            return x + y

        @classmethod
        def klass(cls, x):
            return x

    m = Methods.remote()
    for call in (lambda: m.one.remote(), lambda: m.one.remote(1, 2),
                 lambda: m.one.remote(y=1), lambda: m.static.remote(),
                 lambda: m.klass.remote(1, 2), lambda: m.one.options(num_returns=1).remote()):
        with pytest.raises(TypeError, match="Methods"):
            call()
    assert ray.get([m.one.remote(1), m.one.remote(x=2), m.static.remote(1),
                    m.klass.remote(4)]) == [1, 2, 2, 4]

    @ray.remote
    def through(handle):
        try:
            handle.one.remote(1, 2)
        except TypeError as e:
            return str(e)
        return "no error"
    assert "Methods.one.remote()" in ray.get(through.remote(m))


def test_a_methods_invocation_decorator(ray):
    """Ray's __ray_invocation_decorator__ on a method: decorator(invoke)(args, kwargs) is
    what .remote() does and returns (the arguments it passes on checked against the
    method's own signature)."""
    def invocation(f):
        def invoke(args, kwargs):
            return f([args[0], args[0]], {}), kwargs  # (one argument sent as two)
        return invoke

    def execution(f):
        def run(self, b, c):
            return f(self, b + c)
        run.__ray_invocation_decorator__ = invocation
        return run

    @ray.remote
    class Decorated:
        @execution
        def method(self, x):
            return x + 1

    a = Decorated.remote()
    ref, extra = a.method.remote(3, kwarg=3)
    assert isinstance(ref, ray.ObjectRef) and extra == {"kwarg": 3} and ray.get(ref) == 7

    @ray.remote
    def through(handle):  # (a copy of the handle keeps its methods' decorators)
        ref, extra = handle.method.remote(4, kwarg=1)
        return ray.get(ref), extra
    assert ray.get(through.remote(a), timeout=60) == (9, {"kwarg": 1})
    from troupe import cloudpickle
    m = cloudpickle.loads(cloudpickle.dumps(a.method))  # (and so does a method passed on)
    ref, _ = m.remote(5)
    assert ray.get(ref) == 11


def test_namespace_of_the_wrong_type_at_init():
    with pytest.raises(TypeError):
        troupe.init(namespace=123)
    with pytest.raises(ValueError):
        troupe.init(namespace="")
    assert not troupe.is_initialized()


def test_a_function_that_captures_too_much_is_refused(ray):
    """Ray's FUNCTION_SIZE_ERROR_THRESHOLD: a remote function whose pickle is over it (it
    captured a large object) is a ValueError at its first remote(), naming it; over the
    warning's size, a warning."""
    big = np.zeros((100 << 20) // 8)

    @ray.remote
    def captures():
        return len(big)
    with pytest.raises(ValueError, match="captures is too large"):
        captures.remote()
    medium = np.zeros((12 << 20) // 8)

    @ray.remote
    def captures_less():
        return len(medium)
    with pytest.warns(UserWarning, match="captures_less is very large"):
        assert ray.get(captures_less.remote()) == len(medium)


def test_exit_actor_caught_still_ends_the_actor(ray):
    """Ray's: exit_actor() whose SystemExit the method catches ends the actor all the same
    once the method returns; that call and the next raise RayActorError."""
    @ray.remote
    class Exits:
        def exit(self, caught, really=True):
            try:
                if really:
                    troupe.actor.exit_actor()
            except SystemExit:
                if not caught:
                    raise
            return "returned"

        def exit_then_fail(self):
            try:
                troupe.actor.exit_actor()
            except SystemExit:
                pass
            raise ValueError("after exit_actor()")

        def side(self, path):
            open(path, "w").close()
            return "ran"

        def ping(self):
            return "alive"
    b = Exits.remote()
    assert ray.get(b.ping.remote()) == "alive"
    with pytest.raises((ValueError, ray.exceptions.RayActorError)):
        ray.get(b.exit_then_fail.remote(), timeout=30)
    marker = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"troupe-side-{os.getpid()}")
    with pytest.raises(ray.exceptions.RayActorError):  # (ended with the failed call)
        ray.get(b.side.remote(marker), timeout=30)
    assert not os.path.exists(marker)
    for caught in (True, False):
        a = Exits.remote()
        for _ in range(2):  # (its plain calls after the first: troupe._fast's)
            assert ray.get(a.exit.remote(caught, False)) == "returned"
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(a.exit.remote(caught), timeout=30)
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(a.ping.remote(), timeout=30)


def test_cloudpickle_keeps_a_ref_pickled_out_of_band(ray, tmp_path):
    # Ray's object_ref_serialization.py: a ref dumped with ray.cloudpickle into a file
    # (bytes troupe never sees travel) stays held until internal_api.free
    import gc
    base = ray.object_store_stats()["n_objects"]
    ref = ray.put({"hello": "world", "pad": b"x" * 200000})  # (an object in the store)
    with open(tmp_path / "store.pickle", "wb+") as f:
        ray.cloudpickle.dump(ref, f)
    del ref
    gc.collect()
    with open(tmp_path / "store.pickle", "rb") as f:
        again = ray.cloudpickle.load(f)
    assert ray.get(again)["hello"] == "world"
    assert ray.cloudpickle.loads(ray.cloudpickle.dumps([1, again]))[0] == 1
    ray._private.internal_api.free(again)
    del again
    gc.collect()
    deadline = time.monotonic() + 10
    while ray.object_store_stats()["n_objects"] > base and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ray.object_store_stats()["n_objects"] == base  # freed: nothing left behind
    with pytest.raises(TypeError, match="ObjectRef"):
        ray._private.internal_api.free("not a ref")
    assert "n_objects" in ray._private.internal_api.memory_summary()
    # pickled with plain pickle, nothing held it: gone, Ray's ObjectLostError
    import pickle
    lost = pickle.dumps(ray.put(b"y" * 200000))
    gc.collect()
    with pytest.raises(ray.exceptions.ObjectLostError):
        ray.get(pickle.loads(lost), timeout=5)


# ------------------------------------------------------------------ exit_actor

@troupe.remote(max_restarts=3)
class Quitter:
    def ping(self):
        return "pong"

    def quit(self):
        troupe.exit_actor()
        return "not reached"

    def quit_inside_except(self):
        try:
            troupe.exit_actor()
        except Exception:  # (a SystemExit: not caught here, as in Ray)
            return "swallowed"


def test_exit_actor(ray):
    q = Quitter.remote()
    assert ray.get(q.ping.remote()) == "pong"
    pending = q.quit.remote()
    after = q.ping.remote()
    with pytest.raises(ray.exceptions.ActorDiedError, match=r"exit_actor\(\)"):  # and why
        ray.get(pending, timeout=30)
    with pytest.raises(ray.exceptions.ActorDiedError):  # and calls not run yet fail
        ray.get(after, timeout=30)
    with pytest.raises(ray.exceptions.ActorDiedError):  # no restart (max_restarts=3)
        ray.get(q.ping.remote(), timeout=30)
    q2 = Quitter.remote()
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(q2.quit_inside_except.remote(), timeout=30)
    with pytest.raises(TypeError):  # in the driver: not an actor
        ray.exit_actor()
    # a threaded actor (its calls on a pool of threads) ends at once all the same
    q3 = Quitter.options(max_concurrency=2).remote()
    assert ray.get(q3.ping.remote()) == "pong"
    t0 = time.monotonic()
    with pytest.raises(ray.exceptions.ActorDiedError, match=r"exit_actor\(\)"):
        ray.get(q3.quit.remote(), timeout=30)
    with pytest.raises(ray.exceptions.ActorDiedError, match=r"exit_actor\(\)"):
        ray.get(q3.ping.remote(), timeout=30)
    assert time.monotonic() - t0 < 10


# ------------------------------------------------------------------ options, arguments

def test_options_refused_warned_or_honoured(ray):
    with pytest.raises(TypeError, match="unknown actor options"):
        ray.remote(num_cpu=1)(Echo._cls)  # a typo: refused at decoration
    with pytest.raises(TypeError, match="unknown actor options"):
        Echo.options(lifetimee="detached")  # and at .options()
    with pytest.raises(ValueError):
        Echo.options(lifetime="forever")
    with pytest.raises(ValueError):
        Echo.options(num_cpus=-1)
    with pytest.raises(ValueError):
        Echo.options(max_concurrency=0)
    with pytest.raises(ValueError):
        Echo.options(resources={"CPU": 1})
    with pytest.raises(ValueError):
        Echo.options(max_concurrency=65537)
    with pytest.warns(UserWarning, match=r"\['pip'\] of the actor option 'runtime_env'"):
        Echo.options(runtime_env={"pip": ["requests"]})
    with pytest.warns(UserWarning, match="'accelerator_type' \\('A100'\\)"):
        Echo.options(accelerator_type="A100")
    with pytest.raises(ValueError):
        Echo.options(memory=-1)
    import warnings
    with warnings.catch_warnings():  # Ray's defaults, which troupe does anyway: no warning
        warnings.simplefilter("error")
        Echo.options(max_concurrency=1, lifetime=None, max_task_retries=0, namespace=None)
        Echo.options(lifetime="detached", max_concurrency=4)  # (honoured)
        Echo.options(namespace="ns")
        Echo.options(memory=1024)  # (honoured: the node's "memory" resource)

    @ray.remote(runtime_env={"env_vars": {"TROUPE_TEST_VAR": "set"}})
    class Env:
        def read(self):
            import os
            return os.environ.get("TROUPE_TEST_VAR")

    env, plain = Env.remote(), Env.options(runtime_env=None).remote()
    assert ray.get(env.read.remote()) == "set"  # env_vars: honoured
    assert ray.get(plain.read.remote()) is None


def test_constructor_arguments_checked_at_once(ray):
    @ray.remote
    class Two:
        def __init__(self, a, b=1):
            self.s = a + b

        def get(self):
            return self.s

    @ray.remote
    class Plain:
        def ok(self):
            return True

    with pytest.raises(TypeError, match="Two.remote"):
        Two.remote()  # missing a: refused here, no worker started
    with pytest.raises(TypeError):
        Two.remote(1, 2, 3)
    with pytest.raises(TypeError):
        Two.remote(1, c=2)
    with pytest.raises(TypeError):
        Plain.remote(1)
    two, plain = Two.remote(1, b=5), Plain.remote()
    assert ray.get(two.get.remote()) == 6
    assert ray.get(plain.ok.remote())


def test_class_attributes_through_the_actor_class(ray):
    @ray.remote
    class C:
        LIMIT = 7
        names = ("a", "b")

        @staticmethod
        def helper(x):
            return x * 2

        @classmethod
        def build(cls):
            return cls.LIMIT

        def method(self):
            return self.LIMIT

    assert C.LIMIT == 7 and C.names == ("a", "b")
    assert C.helper(4) == 8 and C.build() == 7
    assert Echo.GREETING == "hello"
    with pytest.raises(AttributeError, match="actor method"):
        C.method
    with pytest.raises(AttributeError):
        C.nothing
    c = C.remote()
    assert ray.get(c.method.remote()) == 7


# ------------------------------------------------------------------ last handle

def _gone(pid, timeout=20):
    import os
    import time
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/status") as f:
                if "\nState:\tZ" in f.read():
                    return True
            os.kill(pid, 0)
        except (ProcessLookupError, FileNotFoundError):
            return True
        time.sleep(0.05)
    return False


@troupe.remote
class Pid:
    def pid(self):
        import os
        return os.getpid()

    def slow(self, x):
        import time
        time.sleep(0.5)
        return x

    def call(self, other):
        return troupe.get(other.pid.remote())

    def keep(self, other):
        self.kept = other

    def call_kept(self):
        return troupe.get(self.kept.pid.remote())

    def drop(self):
        self.kept = None


def test_actor_ends_with_its_last_handle(ray):
    import gc
    h = Pid.remote()
    pid = ray.get(h.pid.remote())
    pending = h.slow.remote("done")
    del h
    gc.collect()
    assert ray.get(pending, timeout=30) == "done"  # calls sent before still run
    assert _gone(pid)
    # a method of a temporary handle: the handle is gone before the call (Ray's error:
    # a method holds its handle weakly)
    with pytest.raises(RuntimeError, match="Lost reference to actor"):
        ray.get(Echo.remote().echo.remote(5))
    kept = Echo.remote()
    method = kept.echo
    assert ray.get(method.remote(5)) == 5
    # named actors stay
    named = Pid.options(name="stays").remote()
    named_pid = ray.get(named.pid.remote())
    del named
    gc.collect()
    assert not _gone(named_pid, timeout=1)
    stays = ray.get_actor("stays")
    assert ray.get(stays.pid.remote()) == named_pid


def test_a_handle_elsewhere_keeps_its_actor(ray):
    """Ray counts an actor's handles everywhere: a copy kept by another actor, inside
    an object, or in a call not yet run keeps it; it ends when the last copy goes."""
    import gc
    other = Pid.remote()
    # a copy kept by another actor
    h = Pid.remote()
    pid = ray.get(h.pid.remote())
    ray.get(other.keep.remote(h))
    del h
    gc.collect()
    assert not _gone(pid, timeout=1)
    assert ray.get(other.call_kept.remote()) == pid
    ray.get(other.drop.remote())
    assert _gone(pid)
    # a copy passed to a call, which has ended: nothing holds it
    h = Pid.remote()
    pid = ray.get(h.pid.remote())
    assert ray.get(other.call.remote(h)) == pid
    del h
    gc.collect()
    assert _gone(pid)
    # a copy inside an object
    h = Pid.remote()
    pid = ray.get(h.pid.remote())
    box = ray.put([h])
    del h
    gc.collect()
    assert not _gone(pid, timeout=1)
    assert ray.get(ray.get(box)[0].pid.remote()) == pid
    del box
    gc.collect()
    assert _gone(pid)


@troupe.remote
def _call_when(handle, gate):
    troupe.get(gate.wait.remote())
    return troupe.get(handle.pid.remote())


@troupe.remote
class _Gate:
    def __init__(self):
        import asyncio
        self.ev = asyncio.Event()

    async def wait(self):
        await self.ev.wait()

    async def open(self):
        self.ev.set()


def test_a_task_not_run_yet_keeps_the_actor(ray):
    """Ray's test_distributed_actor_handle_deletion: the handle passed to a task that
    cannot run yet, then deleted: the actor lives until the task is done."""
    import gc
    gate = _Gate.remote()
    h = Pid.remote()
    pid = ray.get(h.pid.remote())
    x = _call_when.remote(h, gate)
    del h
    gc.collect()
    assert not _gone(pid, timeout=1)
    ray.get(gate.open.remote())
    assert ray.get(x, timeout=30) == pid
    assert _gone(pid)


# ------------------------------------------------------------------ util.collective

@troupe.remote
class Rank:
    def join(self, world, rank, backend="shm", name="surface"):
        import troupe.util.collective as col
        col.init_collective_group(world, rank, backend, name)
        return col.is_group_initialized(name), col.get_rank(name), \
            col.get_collective_group_size(name)

    def misuse(self, what, name="surface"):
        import troupe.util.collective as col
        x = np.ones(4, np.float32)
        try:
            if what == "length":
                col.allgather([np.zeros(4, np.float32)] * 3, x, name)
            elif what == "shape":
                col.allgather([np.zeros(5, np.float32)] * 2, x, name)
            elif what == "not a list":
                col.reducescatter(x, (x, x), name)
            elif what == "twice":
                col.init_collective_group(2, 0, "shm", name)
            elif what == "self":
                col.send(x, col.get_rank(name), name)
            elif what == "rank":
                col.send(x, 7, name)
            elif what == "destroyed":
                col.destroy_collective_group(name)
                col.allreduce(x, name)
            elif what == "op":
                col.allreduce(x, name)
                return "ran"
        except Exception as e:
            return [c.__name__ for c in type(e).__mro__]
        return "no error"


def test_collective_errors_are_rays_types(ray):
    ranks = [Rank.remote(), Rank.remote()]
    assert ray.get([r.join.remote(2, i) for i, r in enumerate(ranks)]) == [(True, 0, 2),
                                                                         (True, 1, 2)]
    for what in ("length", "shape", "not a list", "twice", "self", "destroyed"):
        got = ray.get(ranks[0].misuse.remote(what))
        assert "RuntimeError" in got, (what, got)  # as Ray's ray.util.collective raises
    assert "ValueError" in ray.get(ranks[1].misuse.remote("rank"))
    with pytest.raises(RuntimeError):  # (from the driver too: ranks not a permutation)
        ray.util.collective.create_collective_group(ranks, 2, [0, 0], "shm", "bad")


def test_nccl_group_is_created_on_first_use(ray):
    r = Rank.remote()
    # on a machine without GPUs (or a troupe without CUDA) the group is made at once...
    assert ray.get(r.join.remote(1, 0, "nccl", "lazy"), timeout=30) == (True, 0, 1)
    # ...and its communicator on the first op: here it fails, clearly, as a RuntimeError
    got = ray.get(r.misuse.remote("op", "lazy"), timeout=60)
    if got != "ran":  # (a CUDA build on a GPU machine runs it)
        assert "RuntimeError" in got and "CollectiveError" in got, got


# ------------------------------------------------------------------ context, resources

@troupe.remote
class Where:
    def context(self):
        ctx = troupe.get_runtime_context()
        return {"job": ctx.get_job_id(), "node": ctx.get_node_id(),
                "actor": ctx.get_actor_id(), "name": ctx.get_actor_name(),
                "worker": ctx.get_worker_id(), "me": ctx.current_actor,
                "gpus": ctx.get_accelerator_ids()}


def test_runtime_context_and_resources(ray):
    ctx = ray.get_runtime_context()
    assert ctx.get_actor_id() is None and ctx.get_actor_name() is None  # a driver
    job, node = ctx.get_job_id(), ctx.get_node_id()
    assert len(job) == 8 and len(node) == 56 and int(job + node, 16) >= 0
    assert (ctx.job_id, ctx.node_id, ctx.actor_id) == (job, node, None)  # (Ray's properties)
    w = Where.options(name="where").remote()
    got = ray.get(w.context.remote())
    assert got["job"] == job and got["node"] == node  # one node session
    assert got["actor"] == w._actor_id().hex() and got["name"] == "where"
    assert got["worker"] != ctx.get_worker_id() and got["gpus"] == {"GPU": []}
    assert got["me"] == w  # current_actor: a handle of the same actor
    where = Where.remote()
    assert ray.get(where.context.remote())["name"] == ""

    total = ray.cluster_resources()
    assert total["CPU"] == 4.0 and "GPU" not in total and total["object_store_memory"] > 0
    busy = Where.options(num_cpus=1).remote()
    ray.get(busy.context.remote())
    free = ray.available_resources()
    assert free["CPU"] == 3.0 and free["object_store_memory"] <= total["object_store_memory"]
    (n,) = ray.nodes()
    assert n["Alive"] and n["NodeID"] == node and n["Resources"]["CPU"] == 4.0


def test_a_task_holds_its_resources_while_it_runs():
    """Ray's available_resources() inside a task leaves out what the task holds (its
    CPUs and custom resources), and only while it runs: its worker keeps none between
    tasks. A task no node could run is refused at once."""
    troupe.init(num_cpus=4, resources={"slot": 2})
    try:
        @troupe.remote(resources={"slot": 1})
        def inside():
            return troupe.available_resources()

        @troupe.remote(num_cpus=2)
        def two():
            return troupe.available_resources()

        got = troupe.get(inside.remote())
        assert got["CPU"] == 3.0 and got["slot"] == 1.0
        total = troupe.cluster_resources()["memory"]  # (Ray's: bytes, a resource as any)
        assert total > 0 and troupe.available_resources()["memory"] == total
        assert troupe.get(inside.options(memory=2**20).remote())["memory"] == total - 2**20
        assert troupe.get(two.remote())["CPU"] == 2.0
        free = troupe.available_resources()
        assert free["CPU"] == 4.0 and free["slot"] == 2.0

        @troupe.remote(resources={"slot": 2})
        class Both:
            def ok(self):
                return True
        assert troupe.get(Both.remote().ok.remote(), timeout=30)

        with pytest.raises(troupe.exceptions.TroupeError, match="CPU=100"):
            troupe.get(two.options(num_cpus=100).remote(), timeout=5)
    finally:
        troupe.shutdown()


def test_a_gpu_task_leaves_its_gpus_to_an_actor():
    """A task's worker is given its GPUs for its life, but they count as free once its
    task ends (Ray's available_resources()), and an actor that asks for them has them:
    the idle worker ends, and its next task waits for a GPU."""
    troupe.init(num_cpus=2, num_gpus=1)
    try:
        @troupe.remote(num_gpus=1)
        def gpus():
            return troupe.get_gpu_ids(), troupe.available_resources().get("GPU", 0.0)

        assert troupe.get(gpus.remote(), timeout=30) == ([0], 0.0)
        assert troupe.available_resources()["GPU"] == 1.0

        @troupe.remote(num_gpus=1)
        class Trainer:
            def gpus(self):
                return troupe.get_gpu_ids()
        t = Trainer.remote()
        assert troupe.get(t.gpus.remote(), timeout=30) == [0]
        later = gpus.remote()
        ready, _ = troupe.wait([later], timeout=0.5)
        assert not ready  # (the actor has the GPU)
        troupe.kill(t)
        assert troupe.get(later, timeout=30) == ([0], 0.0)
    finally:
        troupe.shutdown()


def test_actor_pool(ray):
    from troupe.util import ActorPool

    @ray.remote
    class Doubler:
        def double(self, v):
            import time
            time.sleep(0.05 * (v % 3))
            return 2 * v

    actors = [Doubler.remote() for _ in range(2)]
    pool = ActorPool(actors)
    assert list(pool.map(lambda a, v: a.double.remote(v), [1, 2, 3, 4])) == [2, 4, 6, 8]
    assert sorted(pool.map_unordered(lambda a, v: a.double.remote(v), range(5))) == \
        [0, 2, 4, 6, 8]
    for v in range(4):  # more items than actors: they wait for a free one
        pool.submit(lambda a, v: a.double.remote(v), v)
    assert not pool.has_free()
    assert [pool.get_next() for _ in range(4)] == [0, 2, 4, 6]
    assert not pool.has_next()
    with pytest.raises(StopIteration):
        pool.get_next()
    pool.submit(lambda a, v: a.double.remote(v), 10)
    pool.submit(lambda a, v: a.double.remote(v), 11)
    assert sorted([pool.get_next_unordered(), pool.get_next_unordered()]) == [20, 22]
    idle = pool.pop_idle()
    assert idle in actors and pool.has_free()
    with pytest.raises(ValueError):  # (the other one is in the pool still)
        pool.push([a for a in actors if a != idle][0])
    pool.push(idle)
    pool.submit(lambda a, v: a.double.remote(v), 2)  # (sleeps 0.1 s)
    with pytest.raises(TimeoutError):
        pool.get_next(timeout=0.01)
    assert pool.get_next() == 4


def test_actor_pool_as_ray_2(ray):
    """ActorPool as Ray 2's: map submits every value at once (before its results are
    iterated); a method of several values gives their list; an actor that died leaves
    the pool (its item raises RayActorError), one that raised stays; ray.get is looked
    up at each use."""
    from troupe.util import ActorPool

    @ray.remote
    class Worker:
        def __init__(self, healthy=True):
            self.healthy = healthy

        def run(self, x):
            if not self.healthy:
                ray.actor.exit_actor()
            if x == -1:
                raise ValueError("bad item")
            return x

        @ray.method(num_returns=2)
        def pair(self, x):
            return x, -x

    pool = ActorPool([Worker.remote()])
    seen = []
    submit = pool.submit
    pool.submit = lambda fn, v: (seen.append(v), submit(fn, v))
    results = pool.map(lambda a, v: a.run.remote(v), [1, 2])
    assert seen == [1, 2] and list(results) == [1, 2]
    pool.submit(lambda a, v: a.pair.remote(v), 3)
    pool.submit(lambda a, v: a.pair.remote(v), 4)
    assert pool.get_next() == [3, -3] and pool.get_next_unordered() == [4, -4]
    good, bad = Worker.remote(), Worker.remote(False)
    pool = ActorPool([good, bad])
    results = []
    for i in range(6):
        pool.submit(lambda a, v: a.run.remote(v), i)
        try:
            results.append(pool.get_next_unordered())
        except ray.exceptions.RayActorError:
            pass
    assert sorted(results) == [1, 2, 3, 4, 5] and pool._idle_actors == [good]
    pool.submit(lambda a, v: a.run.remote(v), -1)
    with pytest.raises(ValueError, match="bad item"):
        pool.get_next()
    assert pool._idle_actors == [good]
    import troupe as api
    pool.submit(lambda a, v: a.run.remote(v), 7)
    real = api.get
    api.get = lambda *a, **k: "looked up at use"
    try:
        assert pool.get_next() == "looked up at use"
    finally:
        api.get = real


# ------------------------------------------------------------------ small things Ray checks

def test_small_checks_as_rays(ray):
    with pytest.raises(TypeError, match="no arguments and no parentheses"):
        @ray.remote()
        class Empty:
            pass
    with pytest.raises(TypeError, match="Inheriting from actor classes is not currently"):
        class Derived(Echo):
            pass
    e = Echo.remote()
    with pytest.raises(ValueError, match="Invalid type of object refs"):
        ray.get([e.echo.remote(1), None])
    with pytest.raises(ValueError):
        ray.get({"not": "a ref"})


def test_ray_terminate_ends_the_actor_after_earlier_calls(ray):
    e = Echo.remote()
    first = e.echo.remote("before")
    e.__ray_terminate__.remote()
    assert ray.get(first) == "before"
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(e.echo.remote("after"), timeout=30)


@troupe.remote
class Holder:
    def __init__(self, value, nested=None, handle=None):
        self.value, self.nested, self.handle = value, nested, handle

    def read(self):
        nested = [troupe.get(r) for r in self.nested] if self.nested else None
        via = troupe.get(self.handle.echo.remote("through")) if self.handle else None
        return self.value, nested, via


def test_constructor_arguments_with_refs_and_handles(ray):
    """A top-level ref gives the constructor its value; refs nested in the arguments and
    actor handles stay refs, alive while the actor keeps them, though the driver drops
    its own (Ray's)."""
    import gc
    top, inner = ray.put(np.arange(4)), ray.put("inner")
    echo = Echo.remote()
    h = Holder.remote(top, nested=[inner], handle=echo)
    del inner, echo
    gc.collect()
    value, nested, via = ray.get(h.read.remote())
    assert list(value) == [0, 1, 2, 3] and nested == ["inner"] and via == "through"
    # through a graph run as calls: the inner actor's handle goes into the outer's
    # constructor, and the execution's own handles go when it returns
    outer = Holder.bind(1, None, Echo.bind())
    assert ray.get(outer.read.bind().execute()) == (1, None, "through")
    # a named actor keeps its arguments' refs too
    named = Holder.options(name="holder").remote(top, [ray.put(5)])
    assert ray.get(named.read.remote())[1] == [5]


def test_built_in_methods_and_dir(ray):
    a = Echo.remote()
    assert ray.get(a.__ray_ready__.remote()) is True
    assert ray.get(a.__ray_call__.remote(lambda self, x: self.add(x, 2), 40)) == 42
    assert {"echo", "add", "bind", "options", "remote"} <= set(dir(Echo))
    public = [n for n in dir(a) if not n.startswith("_")]
    assert "echo" in public and "remote" not in public
    assert {"__ray_ready__", "__ray_call__", "__ray_terminate__"} <= set(dir(a))
    assert set(dir(a.echo)) == {"bind", "options", "remote"}


def test_negative_resources_say_what_ray_says(ray):
    @troupe.remote
    def f():
        return 1

    with pytest.raises(ValueError, match="only accepts None, 0 or a positive number"):
        f.options(num_cpus=-1).remote()
    with pytest.raises(ValueError, match="quantity of resource num_cpus cannot be negative"):
        Echo.options(num_cpus=-1).remote()


def test_no_automatic_start_when_it_is_turned_off(tmp_path):
    """TROUPE_ENABLE_AUTO_CONNECT=0 (or Ray's RAY_ENABLE_AUTO_CONNECT=0): a remote call
    before troupe.init() raises instead of starting a node."""
    import subprocess
    script = tmp_path / "auto.py"
    script.write_text(
        "import troupe\n"
        "@troupe.remote\n"
        "def f():\n"
        "    return 1\n"
        "try:\n"
        "    f.remote()\n"
        "    print('started')\n"
        "except troupe.exceptions.TroupeError as e:\n"
        "    print('refused', 'troupe.init()' in str(e))\n"
        "troupe.init(num_cpus=1)\n"
        "print(troupe.get(f.remote()))\n")
    for var in ("TROUPE_ENABLE_AUTO_CONNECT", "RAY_ENABLE_AUTO_CONNECT"):
        env = dict(os.environ, **{var: "0"})
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                             env=env, timeout=120)
        assert out.stdout.split() == ["refused", "True", "1"], out.stderr[-2000:]


def test_a_restarted_actor_reads_its_constructor_refs_again(ray):
    @troupe.remote(max_restarts=2)
    class Restarting:
        def __init__(self, xs):
            self.xs = xs

        def read(self):
            return troupe.get(self.xs[0])

        def die(self):
            os._exit(1)

    r = Restarting.remote([ray.put(41)])
    assert ray.get(r.read.remote()) == 41
    with pytest.raises(troupe.exceptions.ActorDiedError):
        ray.get(r.die.remote())
    deadline = time.monotonic() + 30
    while True:  # (the restart runs the constructor again, from the same arguments)
        try:
            assert ray.get(r.read.remote()) == 41
            break
        except troupe.exceptions.ActorDiedError:
            assert time.monotonic() < deadline
            time.sleep(0.1)


def test_constructor_refs_from_two_threads_and_none_left_after(ray):
    """Actors made with refs in their arguments from two threads at once all read them;
    once they are killed and the refs dropped, the store holds nothing."""
    import threading
    from conftest import store_empties

    @troupe.remote
    class C:
        def __init__(self, xs):
            self.x = troupe.get(xs[0])

        def get(self):
            return self.x

    made, errors = [], []

    def make(base):
        try:
            for j in range(15):
                made.append((base + j, C.remote([troupe.put(base + j)])))
        except Exception as e:  # (reported below)
            errors.append(e)

    threads = [threading.Thread(target=make, args=(b,)) for b in (0, 100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(ray.get([h.get.remote() for _, h in made])) == sorted(v for v, _ in made)
    for _, h in made:
        troupe.kill(h)
    made.clear()
    assert store_empties()


def test_named_actors_live_in_namespaces(ray):
    """Ray's namespaces: one name in two namespaces is two actors; get_actor looks in the
    job's namespace (troupe.init's; here an anonymous one) unless told another."""
    a = Echo.options(name="foo", namespace="f1").remote()
    with pytest.raises(ValueError, match="in namespace 'f2'"):
        ray.get_actor("foo", namespace="f2")
    with pytest.raises(ValueError):
        ray.get_actor("foo")  # (the job's namespace: its own, anonymous)
    found = ray.get_actor("foo", namespace="f1")
    assert ray.get(found.echo.remote(1)) == 1
    b = Echo.options(name="foo").remote()  # (the same name, the job's namespace)
    found = ray.get_actor("foo")
    assert ray.get(found.echo.remote(2)) == 2
    again = Echo.options(name="foo", namespace="f1", get_if_exists=True).remote()
    assert again == a and again != b
    with pytest.raises(ValueError, match="namespace"):
        Echo.options(name="x", namespace="bad\x1fns")
    del a, b, again, found


def test_a_jobs_namespace_is_its_tasks_and_actors(tmp_path):
    """troupe.init(namespace=...): the names its actors, tasks and their actors make and
    find are that namespace's; another driver of the node finds them only there."""
    import subprocess
    script = tmp_path / "ns.py"
    script.write_text(
        "import sys, troupe\n"
        "@troupe.remote\n"
        "class A:\n"
        "    def ping(self):\n"
        "        return troupe.get_runtime_context().namespace\n"
        "@troupe.remote\n"
        "def make():\n"
        "    A.options(name='made_in_task', lifetime='detached').remote()\n"
        "    a = troupe.get_actor('made_in_task')\n"
        "    return troupe.get(a.ping.remote())\n"
        "if sys.argv[1] == 'first':\n"
        "    troupe.init(namespace='jobns')\n"
        "    print(troupe.get(make.remote()))\n"
        "    a = troupe.get_actor('made_in_task')\n"
        "    print(troupe.get(a.ping.remote()))\n"
        "    try:\n"
        "        troupe.get_actor('made_in_task', namespace='')\n"
        "        print('found in the default')\n"
        "    except ValueError:\n"
        "        print('not in the default')\n"
        "    print(troupe.node_address(), flush=True)\n"
        "    sys.stdin.readline()\n"
        "else:\n"
        "    troupe.init(address=sys.argv[2], namespace=sys.argv[3])\n"
        "    try:\n"
        "        a = troupe.get_actor('made_in_task')\n"
        "        print(troupe.get(a.ping.remote()))\n"
        "    except ValueError:\n"
        "        print('none here')\n")
    first = subprocess.Popen([sys.executable, str(script), "first"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        lines = [first.stdout.readline().strip() for _ in range(4)]
        assert lines[:3] == ["jobns", "jobns", "not in the default"], lines
        outs = [subprocess.run([sys.executable, str(script), "second", lines[3], ns],
                               capture_output=True, text=True, timeout=120).stdout.split()
                for ns in ("jobns", "other")]
        assert outs == [["jobns"], ["none", "here"]], outs
    finally:
        first.communicate("\n", timeout=60)


def test_a_job_without_a_namespace_has_an_anonymous_one(tmp_path):
    """Ray's: troupe.init() with no namespace gives the job one of its own, which its
    tasks (on pool workers every job shares) and its actors inherit: two such drivers of
    one node each make a detached actor of the same name, and neither sees the other's."""
    import subprocess
    script = tmp_path / "anon.py"
    script.write_text(
        "import sys, troupe\n"
        "@troupe.remote\n"
        "class A:\n"
        "    def ns(self):\n"
        "        return troupe.get_runtime_context().namespace\n"
        "@troupe.remote\n"
        "def ns():\n"
        "    return troupe.get_runtime_context().namespace\n"
        "if len(sys.argv) > 1:\n"
        "    troupe.init(address=sys.argv[1])\n"
        "else:\n"
        "    troupe.init()\n"
        "mine = troupe.get_runtime_context().namespace\n"
        "a = A.options(name='Pinger', lifetime='detached').remote()\n"
        "assert troupe.get(a.ns.remote()) == mine and troupe.get(ns.remote()) == mine\n"
        "print(mine, flush=True)\n"
        "if len(sys.argv) == 1:\n"
        "    print(troupe.node_address(), flush=True)\n"
        "    sys.stdin.readline()\n")
    first = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        ns1, address = first.stdout.readline().strip(), first.stdout.readline().strip()
        assert len(ns1) == 36, ns1  # (a UUID, as Ray's)
        second = subprocess.run([sys.executable, str(script), address], capture_output=True,
                                text=True, timeout=120)
        assert second.returncode == 0, second.stderr
        ns2 = second.stdout.strip()
        assert len(ns2) == 36 and ns2 != ns1, (ns1, ns2)
    finally:
        first.communicate("\n", timeout=60)


def test_job_config_gives_the_jobs_namespace_and_runtime_env():
    """Ray's ray.job_config.JobConfig, given to init: its namespace and runtime_env are the
    job's; an option troupe does not do warns."""
    from troupe.job_config import JobConfig
    jc = JobConfig(ray_namespace="from-job-config",
                   runtime_env={"env_vars": {"TROUPE_JC_VAR": "yes"}}, metadata={"k": "v"})
    troupe.init(job_config=jc)
    try:
        assert troupe.get_runtime_context().namespace == "from-job-config"

        @troupe.remote
        class Env:
            def read(self):
                return os.environ.get("TROUPE_JC_VAR"), troupe.get_runtime_context().namespace
        a = Env.options(name="jc-actor").remote()
        assert troupe.get(a.read.remote(), timeout=30) == ("yes", "from-job-config")
        assert troupe.get_actor("jc-actor", namespace="from-job-config") == a
    finally:
        troupe.shutdown()
    with pytest.warns(UserWarning, match="default_actor_lifetime"):
        troupe.init(job_config=JobConfig(default_actor_lifetime="detached"))
    troupe.shutdown()
    with pytest.raises(TypeError):
        JobConfig(ray_namespace=3)
