"""Graph nodes as Ray's DAG API shows them (ray.dag.DAGNode): what a node was bound with
and its options, rewriting a graph (apply_recursive), the rules of InputNode, nodes
nested in arguments when a graph runs as calls, and the errors Ray raises for misuse."""
import pickle

import pytest

import troupe
from troupe.dag import (PARENT_CLASS_NODE_KEY, PREV_CLASS_METHOD_CALL_KEY, DAGContext,
                        DAGNode, InputNode, MultiOutputNode)


@troupe.remote
def add(*xs, **kw):
    return sum(xs) + sum(v for v in kw.values() if isinstance(v, int))


@troupe.remote(num_gpus=0, max_retries=2)
def declared():
    return 1


@troupe.remote
class Acc:
    def __init__(self, v=0):
        self.v = v

    def inc(self, x):
        self.v += x
        return self.v

    def get(self):
        return self.v


def test_a_node_tells_its_arguments_options_and_children():
    a, b, c = add.bind(), add.bind(), add.bind()
    n = add.bind(1, a, x=b, y={"k": [c]})
    assert n.get_args() == (1, a)
    assert n.get_kwargs() == {"x": b, "y": {"k": [c]}}
    assert n._get_toplevel_child_nodes() == [a, b]
    assert n._get_all_child_nodes() == [a, b, c]
    d, e = add.bind(), add.bind()
    table = {a: d, b: d, c: e}
    m = n._apply_and_replace_all_child_nodes(lambda x: table[x])
    assert m._get_all_child_nodes() == [d, e]
    assert m.get_kwargs()["y"] == {"k": [e]}
    assert n._get_all_child_nodes() == [a, b, c]  # (a copy: the original is unchanged)
    # options: the decorator's, then .options(), as given
    assert add.bind().get_options() == {}
    assert declared.bind().get_options() == {"num_gpus": 0, "max_retries": 2}
    assert declared.options(num_cpus=3, name="x").bind().get_options() == {
        "num_gpus": 0, "max_retries": 2, "num_cpus": 3, "name": "x"}
    assert Acc.options(name="acc").bind(1).get_options() == {"name": "acc"}
    with pytest.raises(ValueError, match="cannot be serialized"):
        pickle.dumps(n)
    with pytest.raises(ValueError, match="cannot be serialized"):
        pickle.dumps(DAGNode([], {}, {}, {}))
    assert n.with_tensor_transport() is n


def test_methods_bound_on_a_class_node_chain_and_keep_their_options(ray):
    acc = Acc.options(name="acc_node").bind(10)
    first = acc.inc.options(name="first").bind(1)
    second = acc.inc.bind(2)
    out = acc.get.options(name="last").bind()
    other = out.get_other_args_to_resolve()
    assert other[PARENT_CLASS_NODE_KEY] is acc
    assert other[PREV_CLASS_METHOD_CALL_KEY] is second
    assert second.get_other_args_to_resolve()[PREV_CLASS_METHOD_CALL_KEY] is first
    assert first.get_other_args_to_resolve()[PREV_CLASS_METHOD_CALL_KEY] is None
    assert first.get_options() == {"name": "first"} and second.get_options() == {}
    assert out.get_options() == {"name": "last"}
    assert acc.get_options() == {"name": "acc_node"}
    assert ray.get(out.execute()) == 13  # 10 + 1 + 2, in bind order
    with pytest.raises(AttributeError, match=r"\.bind\(\) cannot be used again"):
        acc.bind()
    with pytest.raises(AttributeError, match=r"\.remote\(\) cannot be used on ClassMethodNodes"):
        acc.get.remote()
    with pytest.raises(AttributeError, match="'Acc' has no attribute 'remote'"):
        acc.remote()
    with pytest.raises(AttributeError, match=r"\.remote\(\) cannot be used on"):
        add.bind().remote()
    with pytest.raises(AttributeError, match="'Acc' has no attribute 'nope'"):
        acc.nope.bind()


def test_apply_recursive_visits_each_node_once():
    inp = InputNode()
    a, b = inp, add.bind(inp)
    for _ in range(10):
        a, b = add.bind(a, b), add.bind(a, b)
    seen = []
    calls = 0
    original = DAGNode.apply_recursive

    def counting(self, fn):
        nonlocal calls
        calls += 1
        return original(self, fn)

    DAGNode.apply_recursive = counting
    try:
        out = a.apply_recursive(lambda n: seen.append(type(n).__name__) or n)
    finally:
        DAGNode.apply_recursive = original
    # the root, then each computed node's distinct children once: a and b of levels 9..1
    # and the root have two each (19 x 2), b0 = add(inp) one; a cached child still counts
    assert calls == 1 + 19 * 2 + 1
    # fn once per distinct node: the root, a and b of levels 9..1, b0 and the input
    assert len(seen) == 1 + 18 + 1 + 1 and seen.count("InputNode") == 1
    assert isinstance(out, DAGNode) and out is not a


def test_input_node_rules(ray):
    with pytest.raises(ValueError, match="should not take any args or kwargs"):
        InputNode(0)
    with pytest.raises(ValueError, match="should not take any args or kwargs"):
        InputNode(key=1)
    loose = InputNode()
    with pytest.raises(AssertionError, match="should be only used in context manager"):
        add.bind(loose).execute(1)
    with InputNode() as inp:
        with pytest.raises(AssertionError, match="int index or str"):
            inp[(1, 2)]
        with pytest.raises(ValueError, match="cannot be used as args, kwargs"):
            Acc.bind(inp)
        with pytest.raises(ValueError, match="cannot be used as args, kwargs"):
            Acc.bind(v=inp[0])
    with InputNode() as other:
        two = add.bind(add.bind(inp), add.bind(other))
    with pytest.raises(AssertionError, match="only have one unique InputNode"):
        two.execute(1)


def test_input_items_run_as_calls(ray):
    class Obj:
        def __init__(self):
            self.f, self.g = 5, 6

    with InputNode() as inp:
        by_index = add.bind(inp[0], inp[2])
        by_key = add.bind(inp["m"], inp["n"])
        by_attr = add.bind(inp.f, inp.g)
        by_kw = add.bind(inp[0], inp.k)
    assert ray.get(by_index.execute(1, 2, 3)) == 4  # several arguments: positional
    assert ray.get(by_index.execute([10, 20, 30])) == 40  # one: its items (Ray's)
    assert ray.get(by_key.execute({"m": 1, "n": 2})) == 3
    assert ray.get(by_attr.execute(Obj())) == 11
    assert ray.get(by_kw.execute(1, k=7)) == 8
    with pytest.raises(TypeError, match="reads input 2"):
        by_index.execute(1, 2)


def test_nodes_nested_in_arguments_arrive_as_refs(ray):
    @troupe.remote
    def total(d):
        assert all(isinstance(v, troupe.ObjectRef) for v in d["refs"])
        return sum(troupe.get(v) for v in d["refs"]) + d["plain"]

    with InputNode() as inp:
        dag = total.bind({"refs": [add.bind(inp, 1), add.bind(inp, 2)], "plain": 100})
    assert ray.get(dag.execute(10)) == 11 + 12 + 100


def test_compile_names_an_input_item_read_only_off_the_outputs_path(ray):
    a = Acc.remote()
    with InputNode() as inp:
        i0, i1, i2 = inp[0], inp[1], inp[2]
        _ = a.inc.bind(i1)
        dag = MultiOutputNode([a.inc.bind(i0), a.inc.bind(i2)])
    with pytest.raises(ValueError, match="all of attributes 0, 1, 2, but 1 is unused"):
        dag.experimental_compile()


def test_compile_takes_its_defaults_from_the_dag_context(ray):
    ctx = DAGContext.get_current()
    assert ctx is DAGContext.get_current()
    before = ctx.max_inflight_executions
    ctx.max_inflight_executions = 2
    try:
        a = Acc.remote()
        with InputNode() as inp:
            dag = a.inc.bind(inp)
        g = dag.experimental_compile()
        refs = [g.execute(1), g.execute(1)]
        with pytest.raises(troupe.exceptions.RayCgraphCapacityExceeded):
            g.execute(1)
        assert [ray.get(r) for r in refs] == [1, 2]
        g.teardown()
    finally:
        ctx.max_inflight_executions = before


def test_a_class_node_takes_nodes_nested_in_its_arguments(ray):
    @troupe.remote
    class Keeps:
        def __init__(self, xs):
            self.xs = xs

        def total(self, y):
            return sum(troupe.get(r) for r in self.xs) + y

    with InputNode() as inp:
        dag = Keeps.bind([add.bind(1, 2), add.bind(3)]).total.bind(inp)
    assert ray.get(dag.execute(10)) == 16


def test_a_graph_rewritten_by_apply_recursive_still_compiles(ray):
    a = Acc.remote()
    with InputNode() as inp:
        g = a.inc.bind(inp)
    copy = g.apply_recursive(lambda n: n)
    assert copy is not g
    compiled = copy.experimental_compile()
    assert ray.get(compiled.execute(5)) == 5
    compiled.teardown()
