"""Ray's num_returns: ``@troupe.method(num_returns=k)``, ``.options(num_returns=k)`` on a
method call, ``@troupe.remote(num_returns=k)`` and ``f.options(num_returns=k)`` on remote
functions give k refs, each filled from one of the k values returned (over C's
tr_call_multi / tr_task_submit_multi / tr_ctx_reply_multi); bound in a graph, such a
method gives k nodes (uncompiled and compiled). Each test ends with the store empty."""
import gc
import time

import numpy as np
import pytest

import troupe
from troupe.dag import InputNode, MultiOutputNode


@troupe.remote
class Multi:
    def __init__(self):
        self.calls = 0

    @troupe.method(num_returns=2)
    def two(self, x):
        self.calls += 1
        return x, x + 1

    @troupe.method(num_returns=3)
    def three(self, x):
        self.calls += 1
        return [x, x * 2, x * 3]

    @troupe.method(num_returns=1)
    def one(self, x):
        self.calls += 1
        return (x, x)

    @troupe.method(num_returns=0)
    def nothing(self, x):
        self.calls += x

    def count(self):
        return self.calls

    def plain(self, *values):
        return values

    def wrong(self, n):
        return tuple(range(n))

    def scalar(self):
        return 7

    def raises(self, x):
        raise KeyError(f"no {x}")

    def big(self, n):
        return np.arange(n, dtype=np.float64), n

    def nested(self, box):
        return len(box), troupe.get(box[0])

    def with_ref(self):
        return troupe.put(1), 2

    def add(self, a, b=0):
        return a + b


@troupe.remote
class Keeper:
    def __init__(self):
        self.kept = None

    def keep(self, v):
        self.kept = v
        return v

    def keep_ref(self, box):
        self.kept = box[0]
        return True

    def read(self):
        return troupe.get(self.kept)


@troupe.remote(num_returns=2)
def split(x):
    return x, -x


@troupe.remote(num_returns=2)
def unbox(box):
    return len(box), troupe.get(box[0])


@troupe.remote
def put_each(values):  # (with num_returns=len(values): a ref in each result)
    return tuple(troupe.put(v) for v in values)


@troupe.remote
def triple(x):
    return x, x * 2, x * 3


@troupe.remote
def wrong_count(n):
    return list(range(n))


@troupe.remote(num_returns=3)
def task_raises(x):
    raise ZeroDivisionError(f"no {x}")


@troupe.remote(num_returns=0)
def touch(path):
    with open(path, "w") as f:
        f.write("ran")


@troupe.remote
def call_through(handle):
    """A handle passed to a task keeps its methods' num_returns."""
    refs = handle.two.remote(10)
    return troupe.get(refs)


def store_is_empty(ray):
    gc.collect()
    assert ray.object_store_stats()["n_objects"] == 0


# ------------------------------------------------------------------ methods

def test_method_num_returns_1_2_3(ray):
    a = Multi.remote()
    r = a.one.remote(4)
    assert isinstance(r, ray.ObjectRef)
    assert ray.get(r) == (4, 4)
    refs = a.two.remote(1)
    assert isinstance(refs, list) and len(refs) == 2
    assert all(isinstance(x, ray.ObjectRef) for x in refs)
    assert len(set(refs)) == 2
    assert ray.get(refs) == [1, 2]
    o1, o2, o3 = a.three.remote(2)
    assert ray.get([o3, o1, o2]) == [6, 2, 4]
    del r, refs, o1, o2, o3
    store_is_empty(ray)


def test_method_options_num_returns(ray):
    a = Multi.remote()
    refs = a.plain.options(num_returns=3).remote("a", "b", "c")
    assert [ray.get(x) for x in refs] == ["a", "b", "c"]
    one = a.plain.options(num_returns=1).remote(1, 2)
    assert ray.get(one) == (1, 2)
    # options override the decorator's, and leave the method as it was
    assert ray.get(a.two.options(num_returns=1).remote(5)) == (5, 6)
    assert ray.get(a.two.remote(5)) == [5, 6]
    with pytest.raises(ValueError):
        a.plain.options(num_returns=-1)
    with pytest.raises(ValueError):
        a.plain.options(num_returns=1.5)
    with pytest.raises(ValueError):
        a.plain.options(num_returns="several")  # ("streaming", "dynamic": test_generators)
    with pytest.raises(ValueError):
        @troupe.remote
        class Bad:
            @troupe.method(num_returns=-2)
            def f(self):
                pass
    del refs, one
    store_is_empty(ray)


def test_method_num_returns_0_runs_and_gives_none(ray):
    a = Multi.remote()
    assert a.nothing.remote(5) is None
    assert a.plain.options(num_returns=0).remote(1) is None
    assert ray.get(a.count.remote()) == 5  # (calls keep their order)
    store_is_empty(ray)


def test_each_ref_is_independent(ray):
    a, k = Multi.remote(), Keeper.remote()
    o1, o2, o3 = a.three.remote(7)
    del o1  # dropped before it is in
    gc.collect()
    assert ray.get(o3) == 21
    # one passed to another actor as an argument (resolved there) and nested in a value
    assert ray.get(k.keep.remote(o2)) == 14
    assert ray.get(k.keep_ref.remote([o3]))
    del o2, o3
    gc.collect()
    assert ray.get(k.read.remote()) == 21  # the borrowed one outlives the caller's
    # a large value as one result, the other small: each got alone
    arr_ref, n_ref = a.big.options(num_returns=2).remote(300_000)
    assert ray.get(n_ref) == 300_000
    del n_ref
    arr = ray.get(arr_ref)
    assert arr.shape == (300_000,) and arr[-1] == 299_999
    del arr, arr_ref
    del k
    gc.collect()
    store_is_empty(ray)


def test_refs_nested_in_the_arguments_of_a_multi_call(ray):
    a = Multi.remote()
    inner = ray.put(np.ones(3))
    r_len, r_val = a.nested.options(num_returns=2).remote([inner])
    del inner  # (the call keeps it alive until it is done)
    gc.collect()
    assert ray.get(r_val).tolist() == [1.0, 1.0, 1.0]
    assert ray.get(r_len) == 1
    # and a task's
    inner = ray.put("v")
    assert ray.get(unbox.remote([inner])) == [1, "v"]
    del r_len, r_val, inner
    store_is_empty(ray)


def test_refs_inside_one_of_several_results(ray):
    a = Multi.remote()
    inner_ref, two = a.with_ref.options(num_returns=2).remote()
    assert ray.get(two) == 2
    inner = ray.get(inner_ref)  # a ref the actor put, inside result 0
    assert isinstance(inner, ray.ObjectRef) and ray.get(inner) == 1
    del two
    gc.collect()
    assert ray.get(inner) == 1  # (held by us now, and by inner_ref's result)
    # passed on inside an argument: the result's container keeps it for the callee
    assert ray.get(unbox.remote([inner])) == [1, 1]
    del inner
    gc.collect()
    assert ray.get(ray.get(inner_ref)) == 1  # (inner_ref's result still holds it)
    # a task's several results, each with a ref in it, each result dropped on its own
    refs = put_each.options(num_returns=3).remote(["x", "y", "z"])
    assert [ray.get(ray.get(r)) for r in refs] == ["x", "y", "z"]
    first = ray.get(refs[0])
    del refs[0]
    gc.collect()
    assert ray.get(first) == "x" and [ray.get(ray.get(r)) for r in refs] == ["y", "z"]
    del first, inner_ref, refs
    store_is_empty(ray)


def test_wrong_number_of_values_fails_every_ref(ray):
    a = Multi.remote()
    for n in (1, 3):
        refs = a.wrong.options(num_returns=2).remote(n)
        for r in refs:
            with pytest.raises(ValueError, match=f"Task returned {n} objects, but "
                                                 f"num_returns=2"):
                ray.get(r)
    refs = a.scalar.options(num_returns=2).remote()
    for r in refs:
        with pytest.raises(ValueError, match="num_returns=2"):
            ray.get(r)
    assert ray.get(a.two.remote(0)) == [0, 1]  # the actor goes on
    del refs
    store_is_empty(ray)


def test_method_error_reaches_every_ref(ray):
    a = Multi.remote()
    refs = a.raises.options(num_returns=3).remote("x")
    for r in reversed(refs):
        with pytest.raises(KeyError, match="no x"):
            ray.get(r)
    # an error of an argument's call too
    bad = a.raises.remote("y")
    refs2 = a.two.remote(bad)
    for r in refs2:
        with pytest.raises(KeyError, match="no y"):
            ray.get(r)
    assert ray.get(a.two.remote(3)) == [3, 4]
    del refs, refs2, bad
    store_is_empty(ray)


def test_a_handle_elsewhere_keeps_num_returns(ray):
    a = Multi.remote()
    assert ray.get(call_through.remote(a)) == [10, 11]
    # (a handle that was copied holds a token object until it and its copies go)
    del a
    for _ in range(100):
        gc.collect()
        if ray.object_store_stats()["n_objects"] == 0:
            break
        time.sleep(0.05)
    store_is_empty(ray)


@troupe.remote
class Named:
    @troupe.method(num_returns=2)
    def two(self, x):
        return x, x + 1

    def items(self, n):
        yield from range(n)

    def plain(self):
        return "plain"


@troupe.remote
def found_elsewhere(name):
    """In another process: the handle get_actor gives there."""
    h = troupe.get_actor(name)
    a, b = h.two.remote(20)
    return troupe.get([a, b]), [troupe.get(r) for r in h.items.remote(3)]


def test_a_handle_found_by_name_calls_as_its_creators_does(ray):
    """get_actor's handle knows the actor's methods and their num_returns (kept with the
    actor: tr_actor_options.binding_data), here and in another process."""
    a = Named.options(name="found-by-name").remote()
    h = ray.get_actor("found-by-name")
    assert repr(h).startswith("Actor(Named, ")
    r1, r2 = h.two.remote(5)
    assert ray.get([r1, r2]) == [5, 6]
    gen = h.items.remote(4)
    assert isinstance(gen, troupe.ObjectRefGenerator)
    assert [ray.get(r) for r in gen] == [0, 1, 2, 3]
    assert ray.get(h.plain.remote()) == "plain"
    with pytest.raises(AttributeError, match="no method 'nope'"):
        h.nope
    assert ray.get(found_elsewhere.remote("found-by-name")) == ([20, 21], [0, 1, 2])
    ray.kill(a)
    del a, h, r1, r2, gen
    gc.collect()


# ------------------------------------------------------------------ tasks

def test_task_num_returns_1_2_3(ray):
    pos, neg = split.remote(3)
    assert ray.get(neg) == -3 and ray.get(pos) == 3
    one = triple.remote(1)
    assert isinstance(one, ray.ObjectRef) and ray.get(one) == (1, 2, 3)
    refs = triple.options(num_returns=3).remote(2)
    assert len(refs) == 3 and ray.get(refs) == [2, 4, 6]
    refs2 = split.options(num_returns=1).remote(4)
    assert ray.get(refs2) == (4, -4)
    # results passed on: one to a task, one to an actor
    x, y = split.remote(5)
    a = Multi.remote()
    assert ray.get(split.remote(y)) == [-5, 5]
    assert ray.get(a.add.remote(x, y)) == 0
    del pos, neg, one, refs, refs2, x, y
    store_is_empty(ray)


def test_task_num_returns_0_runs(ray, tmp_path):
    path = tmp_path / "ran"
    assert touch.remote(str(path)) is None
    import time
    deadline = time.time() + 20
    while not path.exists() and time.time() < deadline:
        time.sleep(0.02)
    assert path.exists()
    with pytest.raises(ValueError):
        triple.options(num_returns=-1)
    store_is_empty(ray)


def test_task_wrong_count_and_errors(ray):
    refs = wrong_count.options(num_returns=3).remote(2)
    for r in refs:
        with pytest.raises(ValueError, match="Task returned 2 objects, but num_returns=3"):
            ray.get(r)
    refs = task_raises.remote(1)
    assert len(refs) == 3
    for r in refs:
        with pytest.raises(ZeroDivisionError, match="no 1"):
            ray.get(r)
    del refs
    store_is_empty(ray)


# ------------------------------------------------------------------ graphs

@troupe.remote
class Actor:
    """As Ray's Compiled Graphs tests' actor."""

    def __init__(self, init_value):
        self.i = init_value

    def inc(self, x):
        self.i += x
        return self.i

    def echo(self, x):
        return x

    @troupe.method(num_returns=2)
    def return_two(self, x):
        return x, x + 1

    @troupe.method(num_returns=2)
    def return_two_but_raise_exception(self, x):
        raise RuntimeError("oops")

    @troupe.method(num_returns=2)
    def return_three(self, x):
        return x, x + 1, x + 2


def test_bind_gives_k_nodes_uncompiled(ray):
    a, b = Actor.remote(0), Actor.remote(0)
    with InputNode() as inp:
        nodes = a.return_two.bind(inp)
        assert isinstance(nodes, tuple) and len(nodes) == 2
        o1, o2 = nodes
        dag = MultiOutputNode([o1, o2])
    assert ray.get(dag.execute(1)) == [1, 2]
    with InputNode() as inp:
        o1, o2 = a.return_two.bind(inp)
        dag = MultiOutputNode([b.echo.bind(o2), o1, a.echo.bind(o1)])
    assert ray.get(dag.execute(10)) == [11, 10, 10]
    text = dag.visualize()
    assert "Actor.return_two" in text and "Actor.echo" in text
    # a single value as the graph's output
    with InputNode() as inp:
        _, o2 = a.return_two.bind(inp)
    assert ray.get(o2.execute(3)) == 4
    # errors reach every output
    with InputNode() as inp:
        o1, o2 = a.return_two_but_raise_exception.bind(inp)
        dag = MultiOutputNode([o1, b.echo.bind(o2)])
    for r in dag.execute(1):
        with pytest.raises(RuntimeError, match="oops"):
            ray.get(r)
    store_is_empty(ray)


def test_bind_gives_k_nodes_compiled(ray):
    a, b = Actor.remote(0), Actor.remote(0)
    with InputNode() as inp:
        o1, o2 = a.return_two.bind(inp)
        dag = MultiOutputNode([o1, o2])
    compiled = dag.experimental_compile()
    for i in range(5):
        assert ray.get(compiled.execute(i)) == [i, i + 1]
    compiled.teardown()
    with InputNode() as inp:
        o1, o2 = a.return_two.bind(inp)
        o3 = b.inc.bind(o2)
        dag = MultiOutputNode([o3, o1])
    compiled = dag.experimental_compile()
    assert ray.get(compiled.execute(1)) == [2, 1]
    assert ray.get(compiled.execute(1)) == [4, 1]
    assert "Actor.return_two" in compiled.visualize()
    compiled.teardown()
    # one value alone as the output: the other reaches no output (a leaf), refused as
    # Ray's compiled graphs refuse it
    with InputNode() as inp:
        o1, _ = a.return_two.bind(inp)
        dag = b.echo.bind(o1)
    with pytest.raises(ValueError, match="leaf nodes"):
        dag.experimental_compile()
    store_is_empty(ray)


def test_compiled_multi_errors_flow_and_the_graph_goes_on(ray):
    a, b = Actor.remote(0), Actor.remote(0)
    with InputNode() as inp:
        o1, o2 = a.return_two_but_raise_exception.bind(inp)
        dag = MultiOutputNode([o1, b.echo.bind(o2)])
    compiled = dag.experimental_compile()
    for r in compiled.execute(1):
        with pytest.raises(RuntimeError, match="oops"):
            ray.get(r)
    compiled.teardown()
    with InputNode() as inp:
        o1, o2 = a.return_three.bind(inp)
        dag = MultiOutputNode([o1, o2])
    compiled = dag.experimental_compile()
    for r in compiled.execute(1):
        with pytest.raises(ValueError, match="Task returned 3 objects, but num_returns=2"):
            ray.get(r)
    compiled.teardown()
    with InputNode() as inp:
        o1, o2 = a.return_two.bind(inp)
        dag = MultiOutputNode([o2, o1])
    compiled = dag.experimental_compile()
    assert ray.get(compiled.execute(8)) == [9, 8]
    compiled.teardown()
    store_is_empty(ray)
