"""The rest of the surface a Ray program touches (issue 24, item 4), each with real
actors: uncompiled graphs run as calls and visualize(), ray.method, exit_actor, actor
options (refused, warned or honoured, never dropped), class attributes, util.collective's
error types and lazy communicators, the runtime context and resources, ActorPool, actors
ended with their last handle, and init after shutdown."""
import re

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
    with InputNode() as inp:
        chain = a.echo.bind(b.echo.bind(inp))
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
