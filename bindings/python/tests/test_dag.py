"""Ray Compiled Graphs' quickstart with `import troupe as ray` and `troupe.dag`: echo,
a chain, several outputs, one of four actors killed; then inputs by item and key,
constants, errors flowing to the outputs, timeouts, asyncio, numpy values."""
import asyncio

import numpy as np
import pytest

import troupe
from troupe.dag import InputNode, MultiOutputNode


@troupe.remote
class EchoActor:
    def echo(self, msg):
        return msg

    def add(self, a, b=0):
        return a + b

    def fail(self, x):
        raise ZeroDivisionError(f"no {x}")

    def slow(self, x):
        import time
        time.sleep(x)
        return x


def test_echo(ray):
    a = EchoActor.remote()
    with InputNode() as inp:
        dag = a.echo.bind(inp)
    dag = dag.experimental_compile()
    ref = dag.execute("hello")
    assert ray.get(ref) == "hello"
    for i in range(100):
        assert ray.get(dag.execute(i)) == i
    dag.teardown()


@troupe.remote
class PathActor:
    """Steps that say which path runs them: _worker's dispatch frame is under a step the
    Python path runs, not under one troupe._fast runs."""
    def path(self, x, tag="p"):
        import inspect
        by = "python" if any(f.function == "dispatch" and "_worker" in f.filename
                             for f in inspect.stack(0)) else "c"
        return f"{by}:{x}:{tag}"

    def array(self, x):
        return np.full(2, x)

    def fail(self, x):
        raise ZeroDivisionError(f"no {x}")

    def drop(self):
        delattr(type(self), "path")
        return True


def test_plain_steps_keep_the_general_paths_rules(ray):
    """What the worker's plain path of graph steps (troupe._fast: one value, no collective
    input, inputs that are plain pickles) must do as _worker's dispatch does: inputs by
    item and key, constants, non-scalar values, an upstream error passed on (the Python
    path's), an error with the step's traceback, a method deleted from the class (it
    runs, as a call of it does). Without the extension every step runs in Python."""
    from troupe import _runtime
    a, b = PathActor.remote(), PathActor.remote()
    by = "c" if _runtime.fast is not None else "python"
    with InputNode() as inp:
        dag = b.path.bind(a.path.bind(inp[0], tag=inp.t), "k")
    dag = dag.experimental_compile()
    for i in range(3):
        assert ray.get(dag.execute(i, t="q")) == f"{by}:{by}:{i}:q:k"
    dag.teardown()
    with InputNode() as inp:  # (an array's value: a step's input with a buffer, Python's)
        dag = b.path.bind(a.array.bind(inp))
    dag = dag.experimental_compile()
    for i in range(2):
        assert ray.get(dag.execute(3.5)) == "python:[3.5 3.5]:p"
    dag.teardown()
    with InputNode() as inp:
        dag = b.path.bind(a.fail.bind(inp))
    dag = dag.experimental_compile()
    for i in range(2):  # (the second step gets an error value: the Python path passes it)
        with pytest.raises(ZeroDivisionError, match=f"no {i}") as info:
            ray.get(dag.execute(i))
        assert "in fail" in str(info.value) and "fast_failed" not in str(info.value)
    dag.teardown()
    with InputNode() as inp:
        dag = a.array.bind(inp)
    dag = dag.experimental_compile()
    for i in range(2):
        assert np.array_equal(ray.get(dag.execute(3.5)), np.full(2, 3.5))
    dag.teardown()
    with InputNode() as inp:
        dag = a.path.bind(inp)
    dag = dag.experimental_compile()
    assert ray.get(dag.execute(1)) == f"{by}:1:p"
    assert ray.get(a.drop.remote())  # (deleted from the class: it still runs, as Ray's
    assert ray.get(dag.execute(2)) == "python:2:p"  # compiled steps, by the Python path)
    dag.teardown()


def test_chain(ray):
    a, b = EchoActor.remote(), EchoActor.remote()
    with InputNode() as inp:
        dag = a.echo.bind(inp)
        dag = b.echo.bind(dag)
    dag = dag.experimental_compile()
    assert ray.get(dag.execute("hello")) == "hello"
    assert "digraph" in dag.visualize()
    dag.teardown()


def test_multiple_outputs(ray):
    a, b = EchoActor.remote(), EchoActor.remote()
    with InputNode() as inp:
        dag = MultiOutputNode([a.echo.bind(inp), b.echo.bind(inp)])
    dag = dag.experimental_compile()
    refs = dag.execute("hello")
    assert isinstance(refs, list) and len(refs) == 2
    assert ray.get(refs) == ["hello", "hello"]
    dag.teardown()


def test_kill_one_of_four_actors(ray):
    actors = [EchoActor.remote() for _ in range(4)]
    with InputNode() as inp:
        outputs = [a.echo.bind(inp) for a in actors]
        dag = MultiOutputNode(outputs)
    compiled_dag = dag.experimental_compile()
    assert ray.get(compiled_dag.execute(1)) == [1, 1, 1, 1]
    ray.kill(actors[0])
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(compiled_dag.execute(1), timeout=30)
    compiled_dag.teardown()
    # a graph over the other three works
    with InputNode() as inp:
        dag = MultiOutputNode([a.echo.bind(inp) for a in actors[1:]])
    compiled_dag = dag.experimental_compile()
    assert ray.get(compiled_dag.execute(2)) == [2, 2, 2]
    compiled_dag.teardown()


def test_inputs_constants_and_numpy(ray):
    a, b = EchoActor.remote(), EchoActor.remote()
    with InputNode() as inp:
        dag = b.add.bind(a.add.bind(inp[0], inp[1]), b=inp.k)
    dag = dag.experimental_compile()
    assert ray.get(dag.execute(1, 2, k=10)) == 13
    x = np.arange(100_000, dtype=np.float64)  # over a slot: through the store
    got = ray.get(dag.execute(x, x, k=1.0))
    assert np.array_equal(got, 2 * x + 1)
    dag.teardown()
    with InputNode() as inp:
        dag = a.add.bind(inp, 5)
    dag = dag.experimental_compile()
    assert [ray.get(dag.execute(i)) for i in range(3)] == [5, 6, 7]
    dag.teardown()


def test_errors_flow_to_outputs_and_the_graph_goes_on(ray):
    a, b = EchoActor.remote(), EchoActor.remote()
    with InputNode() as inp:
        dag = MultiOutputNode([b.echo.bind(a.fail.bind(inp)), a.echo.bind(inp)])
    dag = dag.experimental_compile()
    refs = dag.execute(7)
    with pytest.raises(ZeroDivisionError) as info:
        ray.get(refs[0])
    assert "no 7" in str(info.value)
    assert ray.get(refs[1]) == 7
    r = dag.execute(8)
    assert ray.get(r[1]) == 8
    dag.teardown()
    with pytest.raises(AttributeError):  # a method the actor lacks: refused at compile
        lax = troupe.actor.ActorHandle(a._id, "EchoActor", None)  # (any method name)
        with InputNode() as inp:
            bad = lax.nothing.bind(inp)
        bad.experimental_compile()


def test_timeout_on_a_result(ray):
    a = EchoActor.remote()
    with InputNode() as inp:
        dag = a.slow.bind(inp)
    dag = dag.experimental_compile()
    ref = dag.execute(1.0)
    with pytest.raises(TimeoutError):
        ray.get(ref, timeout=0.1)
    dag.teardown()


def test_asyncio(ray):
    a = EchoActor.remote()
    with InputNode() as inp:
        dag = a.echo.bind(inp)
    dag = dag.experimental_compile(enable_asyncio=True)

    async def main():
        futs = [await dag.execute_async(i) for i in range(6)]
        return [await f for f in futs]

    assert asyncio.run(main()) == list(range(6))
    with pytest.raises(TypeError):
        dag.execute(1)
    dag.teardown()


@troupe.remote
class Reducer:
    def __init__(self, k):
        self.k = k

    def compute(self, x):
        if x < 0:
            raise ValueError("negative")
        return np.full((2, 3), self.k * x, dtype=np.float32)

    def recv(self, t):
        return t.shape, float(t.sum())


def test_allreduce_inside_a_graph(ray):
    from troupe.experimental.collective import allreduce
    ws = [Reducer.remote(i + 1) for i in range(3)]
    with InputNode() as inp:
        computes = [w.compute.bind(inp) for w in ws]
        collectives = allreduce.bind(computes)
        recvs = [w.recv.bind(c) for w, c in zip(ws, collectives)]
        dag = MultiOutputNode(recvs)
    dag = dag.experimental_compile()
    for x in (1, 2, 5):
        want = ((2, 3), 6.0 * (1 + 2 + 3) * x)  # each of 6 elements: x + 2x + 3x
        assert ray.get(dag.execute(x)) == [want] * 3
    with pytest.raises(Exception) as info:  # a failed input fails every output
        ray.get(dag.execute(-1))
    assert "negative" in str(info.value)
    assert ray.get(dag.execute(1)) == [((2, 3), 36.0)] * 3  # and the graph goes on
    dag.teardown()
    with InputNode() as inp:  # the collective's values as the graph's outputs
        dag = MultiOutputNode(allreduce.bind([w.compute.bind(inp) for w in ws]))
    dag = dag.experimental_compile()
    for out in ray.get(dag.execute(1)):
        assert np.array_equal(out, np.full(6, 6.0, np.float32))
    dag.teardown()


@troupe.remote
def _double(x):
    return 2 * x


@troupe.remote
def _plus(a, b=0):
    return a + b


def test_function_nodes_run_as_tasks(ray):
    """Ray's f.bind: remote functions in a graph run as tasks when it is executed (not
    compiled), mixed with actors' methods; the drawing names them; a compiled graph
    refuses them, and a function of several results is not a node."""
    a = EchoActor.remote()
    with InputNode() as inp:
        dag = _plus.bind(_double.bind(inp[0]), b=a.add.bind(inp[1], 1))
    assert ray.get(dag.execute(5, 10)) == 2 * 5 + 10 + 1
    assert ray.get(dag.execute(1, 0)) == 2 + 1
    text = dag.visualize()
    assert "_plus" in text and "_double" in text and "EchoActor.add" in text
    with InputNode() as inp:
        mixed = a.echo.bind(_double.bind(inp))
    with pytest.raises(TypeError, match="runs only as a task"):
        mixed.experimental_compile()
    assert ray.get(mixed.execute(4)) == 8
    with pytest.raises(ValueError, match="num_returns=1"):
        _double.options(num_returns=2).bind(1)


class _Box:
    def __init__(self, v):
        self.v = v


def test_a_node_inside_a_container_is_refused_at_compile(ray):
    """A node must be a method's argument of its own: one inside a list, tuple, dict or an
    object's attribute is refused at compile with ValueError, saying how many were found
    (a step reads its arguments from channels by position)."""
    a = EchoActor.remote()
    for wrap, n in [(lambda x: [x], 1), (lambda x: (1, x), 1), (lambda x: {"k": [x]}, 1),
                    (lambda x: [x, x], 2), (_Box, 1)]:
        with InputNode() as inp:
            dag = a.echo.bind(wrap(inp))
        with pytest.raises(ValueError, match=f"Found {n} DAGNodes from the arg .* in "
                                             f"EchoActor.echo.*inside any type of container"):
            dag.experimental_compile()
    with InputNode() as inp:  # deeper in the graph too, and among kwargs
        dag = a.add.bind(a.echo.bind(inp), b=[a.echo.bind(inp)])
    with pytest.raises(ValueError, match="Found 1 DAGNodes"):
        dag.experimental_compile()
    with InputNode() as inp:  # containers of plain values are constants as before
        dag = a.add.bind(inp, b=[1, {"x": _Box(2)}]).experimental_compile()
    got = ray.get(dag.execute([0]))
    assert got[:2] == [0, 1] and got[2]["x"].v == 2
    dag.teardown()


@troupe.remote
class Pair:
    @troupe.method(num_returns=2)
    def split(self, x):
        return x, -x


def test_a_node_whose_value_reaches_no_output_is_refused_at_compile(ray):
    """A bound method whose value no output depends on (a leaf: its exceptions would go
    unseen) fails compile with ValueError counting the leaves; so does the unused value of
    a method of two results. The graph compiles once it reads them."""
    a, p = EchoActor.remote(), Pair.remote()
    leaves = "doesn't support leaf nodes.*There are {} leaf nodes"
    with InputNode() as inp:
        first = a.echo.bind(inp)
        a.add.bind(first, 1)  # read by nobody
        a.echo.bind(inp)  # nor this
        dag = a.add.bind(first, 2)
    with pytest.raises(ValueError, match=leaves.format(2)):
        dag.experimental_compile()
    with InputNode() as inp:
        pos, neg = p.split.bind(inp)
        dag = a.echo.bind(pos)
    with pytest.raises(ValueError, match=leaves.format(1) + ".*Pair.split"):
        dag.experimental_compile()
    with InputNode() as inp:
        pos, neg = p.split.bind(inp)
        dag = MultiOutputNode([a.echo.bind(pos), neg])
    dag = dag.experimental_compile()
    assert ray.get(dag.execute(3)) == [3, -3]
    dag.teardown()


def test_execute_checks_the_arguments_a_graph_reads(ray):
    """A graph reading its input by item takes exactly the positional arguments up to the
    highest index it reads and every keyword it reads (ValueError, Ray's messages, the
    execution not submitted); reading the whole input beside items fails compile."""
    a = EchoActor.remote()
    with InputNode() as inp:
        dag = a.add.bind(inp[1], b=inp.k).experimental_compile()
    assert ray.get(dag.execute("unused", 2, k=3)) == 5
    for args, kwargs, says in [((2,), {"k": 3}, "with 2 positional args, got 1"),
                               ((1, 2, 3), {"k": 3}, "with 2 positional args, got 3"),
                               ((), {"args": (1, 2), "k": 3}, "args, got 0"),
                               ((1, 2), {}, "with kwarg `k`"),
                               ((1, 2), {"j": 3}, "with kwarg `k`")]:
        with pytest.raises(ValueError, match=r"dag.execute\(\) or dag.execute_async\(\) "
                                             r"must be called .*" + says):
            dag.execute(*args, **kwargs)
    assert ray.get(dag.execute(0, 4, k=1, extra=9)) == 5  # (keywords beyond are unread)
    dag.teardown()
    with InputNode() as inp:
        dag = a.add.bind(inp, a.echo.bind(inp[0]))
    with pytest.raises(ValueError, match=r"must either use InputNode\(\) directly"):
        dag.experimental_compile()


def test_an_output_that_fails_fails_its_execution_at_once(ray):
    """Ray's fast fail: getting any output of an execution (one ref, a list, an awaited
    future of execute_async, which gives one future per output) raises another output's
    exception as soon as it is in, not after the slower outputs; the graph goes on."""
    import time
    a, b = EchoActor.remote(), EchoActor.remote()
    for is_async in (False, True):
        with InputNode() as inp:
            dag = MultiOutputNode([a.slow.bind(inp[0]), b.fail.bind(inp[1])])
        dag = dag.experimental_compile(enable_asyncio=is_async)
        if not is_async:
            for pick in (lambda refs: refs, lambda refs: refs[0]):
                t = time.monotonic()
                with pytest.raises(ZeroDivisionError, match="no 7"):
                    ray.get(pick(dag.execute(3, 7)))
                assert time.monotonic() - t < 2.5
        else:
            async def main():
                futs = await dag.execute_async(3, 7)
                assert isinstance(futs, list) and len(futs) == 2
                t = time.monotonic()
                with pytest.raises(ZeroDivisionError, match="no 7"):
                    await asyncio.gather(*futs)
                with pytest.raises(ZeroDivisionError, match="no 7"):
                    await futs[0]
                assert time.monotonic() - t < 2.5
                with InputNode() as inp:  # (the graph goes on: a fresh one on b)
                    ok = b.echo.bind(inp).experimental_compile(enable_asyncio=True)
                assert await (await ok.execute_async(5)) == 5
                ok.teardown()
            asyncio.run(main())
        dag.teardown()


def test_more_executions_than_max_inflight_are_refused(ray):
    """Submitting beyond _max_inflight_executions unreleased executions raises Ray's
    RayCgraphCapacityExceeded at once (sync and asyncio); a result got makes room."""
    a = EchoActor.remote()
    with InputNode() as inp:
        dag = a.slow.bind(inp).experimental_compile(_max_inflight_executions=2)
    refs = [dag.execute(0.2), dag.execute(0.2)]
    with pytest.raises(troupe.exceptions.RayCgraphCapacityExceeded,
                       match="can't have more than 2 in-flight executions"):
        dag.execute(0)
    assert ray.get(refs[0]) == 0.2
    assert ray.get(dag.execute(0)) == 0
    assert ray.get(refs[1]) == 0.2
    dag.teardown()
    with InputNode() as inp:
        dag = a.slow.bind(inp).experimental_compile(enable_asyncio=True,
                                                    _max_inflight_executions=1)

    async def main():
        fut = await dag.execute_async(0.2)
        with pytest.raises(troupe.exceptions.RayCgraphCapacityExceeded):
            await dag.execute_async(0)
        return await fut

    assert asyncio.run(main()) == 0.2
    dag.teardown()


def test_compiled_refs_in_a_list_with_others_are_refused(ray):
    """ray.get of a list holding a CompiledDAGRef takes CompiledDAGRefs only (Ray's
    ValueError); a ref names its graph's id, execution and output (Ray's form)."""
    a = EchoActor.remote()
    with InputNode() as inp:
        dag = MultiOutputNode([a.echo.bind(inp), a.echo.bind(inp)]).experimental_compile()
    refs = dag.execute(1)
    assert repr(refs[1]) == f"CompiledDAGRef({dag.get_id()}, execution_index=0, " \
                            f"channel_index=1)"
    with pytest.raises(ValueError, match="must be a list of CompiledDAGRefs"):
        ray.get(refs + [a.echo.remote(2)])
    assert ray.get(refs) == [1, 1]
    dag.teardown()


@troupe.remote
class Acc:
    def __init__(self):
        self.v = 0

    def add(self, x):
        self.v += x
        return self.v

    def scale(self, x):
        self.v = self.v * 10 + x
        return self.v


def test_an_actors_steps_run_in_the_order_they_were_bound(ray):
    """Each actor runs its steps of an execution in the order its methods were bound
    (Ray's), whatever order the outputs list them in; MultiOutputNode takes a list
    (ValueError otherwise); visualize takes Ray's channel_details."""
    p, q = Acc.remote(), Acc.remote()
    with InputNode() as inp:
        first = q.scale.bind(p.add.bind(inp))  # q.scale bound before q.add
        second = p.scale.bind(q.add.bind(inp))
        dag = MultiOutputNode([second, first])
    dag = dag.experimental_compile()
    # p: add(1) = 1, then scale by q.add's 2 (q.scale(1) = 1 ran first): 12
    assert ray.get(dag.execute(1)) == [12, 1]
    assert "digraph" in dag.visualize(channel_details=True)
    dag.teardown()
    with pytest.raises(ValueError, match="takes a list"):
        MultiOutputNode(p.add.bind(1))
