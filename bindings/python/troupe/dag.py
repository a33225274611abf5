"""Compiled graphs, with Ray's names (ray.dag): ``InputNode``, ``MultiOutputNode``,
``handle.method.bind(...)``, ``experimental_compile()``, ``execute()``,
``execute_async()`` (awaitable, driven by the graph's pollable fd), ``teardown()``,
``visualize()``, over tr_dag_* (api/include/troupe/dag.h): compiled once into
pre-allocated shared-memory channels, each execution then moves values actor to actor
without the node.

Each bound method becomes a step of its actor, registered in the actor before compile
(its method, and where each argument comes from: an upstream node's value, an item of
the graph's input, or a constant), and bound in C under the name "_troupe_dag:<step>".
A method's exception flows to the outputs (raised by get, with its traceback); a dead
actor fails the graph's executions with ActorDiedError.
"""
import asyncio
import ctypes
import itertools
import os
import re
import sys
import threading
import time
import types
import uuid
import weakref

from . import _errors, _ffi, _runtime, _serial
from ._errors import check
from ._ffi import byref, lib
from .exceptions import RayCgraphCapacityExceeded, RayChannelTimeoutError, TroupeError
from .util.collective.types import DTYPES, ReduceOp

STEP_PREFIX = "_troupe_dag:"
REGISTER = "_troupe_dag_register"
FORGET = "_troupe_dag_forget"
_steps = itertools.count()
_made = itertools.count()  # bound methods, in the order they are made
_SLICE_MS = 10  # a get of one of several outputs waits this long, then looks at the others
_GRACE_S = 1.0  # and raises another's exception once its own is still out this long after it
_FAST_FAIL_S = 0.05  # (asyncio) an execution out this long has its outputs looked at
_WATCH_S = 0.02  # and again this often while some are out
_live = weakref.WeakSet()  # compiled graphs, torn down by troupe.shutdown


PARENT_CLASS_NODE_KEY = "parent_class_node"  # (Ray's keys of a method node's other args)
PREV_CLASS_METHOD_CALL_KEY = "prev_class_method_call"
_IN_CLASS_CTOR = ("InputNode handles user dynamic input the the DAG, and cannot be used as "
                  "args, kwargs, or other_args_to_resolve in ClassNode constructor because "
                  "it is not available at class construction or binding time.")
_NOT_IN_WITH = ("InputNode is a singleton instance that should be only used in context "
                "manager for dag building and execution: with InputNode() as inp: ...")
_ONE_INPUT = "Each DAG should only have one unique InputNode."


class DAGNode:
    """A node of a graph (Ray's ray.dag.DAGNode): what it was bound with (get_args,
    get_kwargs), its options (get_options: those given to the decorator and .options(),
    as Ray's) and the other nodes it depends on (get_other_args_to_resolve: a method
    bound on a ClassNode, its class node and the method bound there before it)."""
    _options = {}
    _other = {}

    def __init__(self, args=(), kwargs=None, options=None, other_args_to_resolve=None):
        self._args = tuple(args)
        self._kwargs = dict(kwargs or {})
        self._options = dict(options or {})
        self._other = dict(other_args_to_resolve or {})

    def get_args(self):
        return self._args

    def get_kwargs(self):
        return self._kwargs

    def get_options(self):
        return self._options

    def get_other_args_to_resolve(self):
        return self._other

    def get_stable_uuid(self):
        u = self.__dict__.get("_stable_uuid")
        if u is None:
            u = self.__dict__["_stable_uuid"] = uuid.uuid4().hex
        return u

    def _get_toplevel_child_nodes(self):
        """The nodes among the arguments and other args themselves (not inside
        containers), once each, in order."""
        return list(dict.fromkeys(x for x in list(self._args) + list(self._kwargs.values()) +
                                  list(self._other.values()) if isinstance(x, DAGNode)))

    def _get_all_child_nodes(self):
        """Every node this one was bound with: in its arguments, nested in containers
        too, and its other args (a method's class node, the method before it); once
        each, in order."""
        found = _nested_nodes([list(self._args), self._kwargs, list(self._other.values())],
                              set())
        return list(dict.fromkeys(found))

    def _apply_and_replace_all_child_nodes(self, fn):
        """A copy of this node with each child node c (get_all_child_nodes) replaced by
        fn(c), fn called once per child."""
        table = {}

        def one(c):
            if id(c) not in table:
                table[id(c)] = fn(c)
            return table[id(c)]

        n = object.__new__(type(self))
        n.__dict__.update(self.__dict__)
        n.__dict__["_stable_uuid"] = self.get_stable_uuid()
        n._args = _replace_nodes(self._args, one)
        n._kwargs = _replace_nodes(self._kwargs, one)
        if self._other:
            n._other = {k: one(v) if isinstance(v, DAGNode) else v
                        for k, v in self._other.items()}
        n._after_replace(one)
        n.__dict__.pop("_readers", None)  # (the copy's readers are its own: none yet)
        _feeds(n, n._sources())
        return n

    def _after_replace(self, one):
        """(a subclass's child nodes kept outside its arguments)"""

    def _sources(self):
        """The nodes whose values this one reads (what compile follows: _feeds)."""
        return list(self._args) + list(self._kwargs.values())

    def apply_recursive(self, fn):
        """fn applied bottom up: to each node once (cached by its stable uuid), given a
        copy of the node whose children are what fn gave for them (Ray's)."""
        if not isinstance(fn, _CachingFn):
            fn = _CachingFn(fn)
        elif self.get_stable_uuid() in fn.cache:
            return fn.cache[self.get_stable_uuid()]
        return fn(self._apply_and_replace_all_child_nodes(lambda c: c.apply_recursive(fn)))

    def __getattr__(self, name):
        if name == "bind":
            raise AttributeError(f".bind() cannot be used again on {type(self)} ")
        if name == "remote":
            raise AttributeError(f".remote() cannot be used on {type(self)}. To execute "
                                 f"the task graph for this node, use .execute().")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __reduce__(self):
        raise ValueError(f"DAGNode cannot be serialized. DAGNode: {self}")

    def with_tensor_transport(self, transport="auto", device="default", _static_shape=False,
                              _direct_return=False):
        """Ray's hint of how this node's tensors travel; returns the node. A compiled
        graph moves every value through its shared-memory channels ("auto" and "cpu"
        are that); another transport (nccl) is ignored with a warning."""
        if str(transport).lower() not in ("auto", "cpu"):
            _errors.ignored("with_tensor_transport", {"transport": transport}, 2)
        return self

    def experimental_compile(self, *, enable_asyncio=False, _max_inflight_executions=None,
                             _buffer_size_bytes=None, _submit_timeout=None, **unused):
        if unused:  # Ray's other knobs (_overlap_gpu_communication, ...)
            _errors.ignored("experimental_compile", unused, 2)
        ctx = DAGContext.get_current()
        return CompiledDAG(self, enable_asyncio,
                           _max_inflight_executions or ctx.max_inflight_executions,
                           _buffer_size_bytes or ctx.buffer_size_bytes,
                           _submit_timeout if _submit_timeout is not None else
                           ctx.submit_timeout)

    def execute(self, *args, **kwargs):
        """Runs the graph once as ordinary actor calls (Ray's classic, uncompiled graphs):
        each bound method is called with its upstream calls' refs as arguments (an actor
        gets an upstream value when it is in) and the ObjectRef of the output comes back
        at once (a list of them for a MultiOutputNode): ``troupe.get(dag.execute(x))``.
        A node bound in several places is called once per execution."""
        return _run_classic(self, args, kwargs, {})

    def visualize(self, filename=None):
        """The uncompiled graph as Graphviz text (also written to filename, if given):
        each step named by its class and method."""
        return _write(_dot_of(self), filename)


class _CachingFn:
    """apply_recursive's fn, called once per node (by stable uuid); a graph of two
    different InputNodes is Ray's AssertionError."""

    def __init__(self, fn):
        self.fn, self.cache, self.input_uuid = fn, {}, None

    def __call__(self, node):
        u = node.get_stable_uuid()
        if u not in self.cache:
            self.cache[u] = self.fn(node)
        if isinstance(node, InputNode):
            if self.input_uuid is None:
                self.input_uuid = u
            elif self.input_uuid != u:
                raise AssertionError(_ONE_INPUT)
        return self.cache[u]


def _replace_nodes(x, fn):
    """x with each DAG node in it replaced by fn(node): in tuples, lists, dicts (keys and
    values), sets; a container with no node in it is x itself."""
    if isinstance(x, DAGNode):
        return fn(x)
    if isinstance(x, (tuple, list, set, frozenset)):
        items = [_replace_nodes(i, fn) for i in x]
        if all(a is b for a, b in zip(items, x)):
            return x
        try:  # (the same container type: a namedtuple's fields, a subclass)
            return type(x)(*items) if hasattr(x, "_fields") else type(x)(items)
        except TypeError:
            return tuple(items) if isinstance(x, tuple) else list(items) \
                if isinstance(x, list) else set(items)
    if isinstance(x, dict):
        items = [(_replace_nodes(k, fn), _replace_nodes(v, fn)) for k, v in x.items()]
        if all(a is k and b is v for (a, b), (k, v) in zip(items, x.items())):
            return x
        y = x.copy()  # (an OrderedDict stays one, a defaultdict keeps its factory)
        y.clear()
        y.update(items)
        return y
    return x


def _feeds(node, sources):
    """Records node as a reader of each DAG node among sources (what compile follows
    downstream to find nodes bound in the graph whose values reach no output)."""
    for x in sources:
        if isinstance(x, DAGNode):  # (the dict: InputNode's getattr makes nodes of names)
            x.__dict__.setdefault("_readers", []).append(node)


class InputNode(DAGNode):
    """The graph's input, made in a ``with InputNode() as inp:`` block: ``execute(x)``
    gives x; ``inp[i]`` / ``inp.key`` give one positional / keyword argument of
    ``execute(*args, **kwargs)``, or (run as calls, given one argument x) x's item or
    attribute, as Ray's."""

    def __init__(self, *args, _other_args_to_resolve=None, **kwargs):
        if args or kwargs:
            raise ValueError("InputNode should not take any args or kwargs.")
        super().__init__((), {}, {}, _other_args_to_resolve)
        self._entered = False

    def __enter__(self):
        self._entered = True
        return self

    def __exit__(self, *exc):
        return False

    def __getitem__(self, key):
        if not isinstance(key, (int, str)):
            raise AssertionError("Please only use int index or str as first-level key to "
                                 "access fields of dag input.")
        return InputAttributeNode(self, key)

    def __getattr__(self, key):
        if key.startswith("_"):
            raise AttributeError(key)
        return InputAttributeNode(self, key, by_attr=True)


class InputAttributeNode(DAGNode):
    def __init__(self, inp, key, by_attr=False):
        super().__init__((), {}, {}, {"dag_input_node": inp})
        self._input = inp
        self._key = key
        self._by_attr = by_attr  # inp.key, not inp[key] (execute(value) alone: getattr)
        _feeds(self, [inp])

    def _after_replace(self, one):
        self._input = self._other["dag_input_node"]

    def _sources(self):
        return [self._input]


class ClassNode(DAGNode):
    """An actor class bound with its constructor's arguments (Ray's ``Cls.bind(...)``): a
    classic execution creates the actor (once per execution), and the methods bound on
    this node (``node.method.bind(...)``) run on it in the order they were bound, each
    after the one bound before it, as Ray chains them, whether the graph's outputs read
    them or not. A compiled graph takes methods of actors already made."""

    def __init__(self, cls, args, kwargs, options=None):
        super().__init__(args, kwargs, options)
        self._cls = cls
        self._last_call = None  # the method node bound on it last
        if any(isinstance(n, (InputNode, InputAttributeNode))
               for n in self._get_all_child_nodes()):
            raise ValueError(_IN_CLASS_CTOR)
        _feeds(self, self._args + tuple(self._kwargs.values()))

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        if name == "bind":
            raise AttributeError(f".bind() cannot be used again on {type(self)} ")
        methods = getattr(self.__dict__.get("_cls"), "_methods", None)
        if methods is not None and name not in methods:
            cname = getattr(self.__dict__.get("_cls"), "__name__", "Actor")
            raise AttributeError(f"type object {cname!r} has no attribute {name!r}")
        return _BoundClassMethod(self, name)


class _BoundClassMethod:
    """A method of a ClassNode, to bind (``node.method.bind(...)``, or with options
    ``node.method.options(...).bind(...)``)."""

    def __init__(self, node, name, options=None):
        self._node, self._name, self._options = node, name, dict(options or {})

    def options(self, **options):
        return _BoundClassMethod(self._node, self._name, dict(self._options, **options))

    def bind(self, *args, **kwargs):
        k = self._options.get("num_returns", 1)
        n = ClassMethodNode(None, self._name, args, kwargs, k, self._options)
        n._class_node, n._prev = self._node, self._node._last_call
        n._other = {PARENT_CLASS_NODE_KEY: n._class_node, PREV_CLASS_METHOD_CALL_KEY: n._prev}
        self._node._last_call = n
        if k == 1:
            return n
        return tuple(ClassMethodOutputNode(n, i) for i in range(k))

    def __getattr__(self, name):
        if name == "remote":
            raise AttributeError(".remote() cannot be used on ClassMethodNodes. Use "
                                 ".bind() instead to express an symbolic actor method call.")
        raise AttributeError(name)


class ClassMethodNode(DAGNode):
    _class_node = None  # bound on a ClassNode (its _handle None): that node's actor
    _prev = None        # ...after the method node bound on it before this one

    def __init__(self, handle, method, args, kwargs, num_returns=1, options=None):
        super().__init__(args, kwargs, options)
        self._handle = handle
        self._method = method
        self._num_returns = num_returns  # k > 1: bind gave its k ClassMethodOutputNodes
        self._seq = next(_made)
        _feeds(self, self._args + tuple(self._kwargs.values()))

    def _after_replace(self, one):
        if self._class_node is not None:
            self._class_node = self._other.get(PARENT_CLASS_NODE_KEY)
            self._prev = self._other.get(PREV_CLASS_METHOD_CALL_KEY)


class FunctionNode(DAGNode):
    """A remote function bound with its arguments (Ray's ``f.bind(...)``): in a classic
    execution it runs as a task, given its upstream nodes' refs; a compiled graph takes
    actors' methods only (as Ray's)."""

    def __init__(self, function, args, kwargs, options=None):
        super().__init__(args, kwargs, options)
        self._function = function
        _feeds(self, self._args + tuple(self._kwargs.values()))


class ClassMethodOutputNode(DAGNode):
    """Value i of a method bound with num_returns k > 1 (``o1, o2 = a.f.bind(inp)``, as
    Ray's): an argument of other nodes, or an output. Run as calls, the method's call gives
    k refs and this is the i-th; in a compiled graph the method's step sends its k values
    on as one tuple and each reader takes item i."""

    def __init__(self, node, i):
        super().__init__((), {}, {}, {"node": node})
        self._node = node
        self._i = i
        _feeds(self, [node])

    def _after_replace(self, one):
        self._node = self._other["node"]

    def _sources(self):
        return [self._node]


class CollectiveNode:
    """An allreduce inside a graph (tr_dag_allreduce): the values of n bound methods on
    n distinct actors, numpy arrays of one dtype and size, reduced through an shm group
    of the graph's own; output i lives on input i's actor."""

    def __init__(self, inputs, op, dtype):
        import numpy as np
        self._inputs = list(inputs)
        if len(self._inputs) < 2 or not all(isinstance(x, ClassMethodNode)
                                            for x in self._inputs):
            raise TypeError("allreduce.bind takes a list of at least 2 bound methods")
        self._op = int(ReduceOp(op))
        self._dtype = np.dtype(dtype)
        if self._dtype.name not in DTYPES:
            raise TypeError(f"allreduce.bind: dtype {self._dtype} is not supported")
        self._c_dtype = DTYPES[self._dtype.name]


class CollectiveOutputNode(DAGNode):
    def __init__(self, coll, i):
        super().__init__()
        self._coll = coll
        self._i = i
        _feeds(self, coll._inputs)

    def _sources(self):
        return list(self._coll._inputs)


class _AllReduce:
    """``allreduce.bind([w.f.bind(inp) for w in workers], op=ReduceOp.SUM,
    dtype=np.float32)``: a list of nodes, the i-th on workers[i] (Ray's
    ray.experimental.collective.allreduce; dtype: troupe's, the arrays' element type,
    float32 unless given)."""

    def bind(self, input_nodes, op=0, dtype="float32", transport=None):
        if transport is not None:  # (a graph's own shm group: always)
            _errors.ignored("allreduce.bind", ["transport"], 2)
        coll = CollectiveNode(input_nodes, op, dtype)
        return [CollectiveOutputNode(coll, i) for i in range(len(coll._inputs))]


allreduce = _AllReduce()


class MultiOutputNode(DAGNode):
    def __init__(self, outputs):
        if not isinstance(outputs, (list, tuple)):
            raise ValueError(f"MultiOutputNode takes a list of nodes, got "
                             f"{type(outputs).__name__}")
        self._outputs = list(outputs)
        if not self._outputs:
            raise ValueError("MultiOutputNode needs at least one node")
        super().__init__(self._outputs)
        self._outputs = list(self._args)

    def _after_replace(self, one):
        self._outputs = list(self._args)

    def _sources(self):
        return []


def _run_classic(node, args, kwargs, made):
    """The value (an ObjectRef, a list of them, or the input's value) of node in one
    classic execution; made: id(node) -> its value so far (one call per node)."""
    if id(node) in made:
        return made[id(node)]

    def arg(x):  # (a node's value; nodes nested in containers give their refs, as Ray's)
        return _run_classic(x, args, kwargs, made) if isinstance(x, DAGNode) else \
            _replace_nodes(x, lambda n: _run_classic(n, args, kwargs, made))

    if isinstance(node, InputNode):
        if not node.__dict__.get("_entered"):
            raise AssertionError(_NOT_IN_WITH)
        first = made.setdefault("input", node)
        if first is not node:
            raise AssertionError(_ONE_INPUT)
        if len(args) != 1 or kwargs:
            raise TypeError("InputNode bound as a whole needs execute(x) with one argument "
                            "(use inp[i] or inp.key for several)")
        v = args[0]
    elif isinstance(node, InputAttributeNode):
        if not node._input.__dict__.get("_entered"):
            raise AssertionError(_NOT_IN_WITH)
        if made.setdefault("input", node._input) is not node._input:
            raise AssertionError(_ONE_INPUT)
        try:
            if len(args) == 1 and not kwargs:  # (Ray's: execute(x) alone: x's item or
                x = args[0]                    # attribute)
                v = getattr(x, node._key) if node._by_attr else x[node._key]
            else:
                v = args[node._key] if isinstance(node._key, int) else kwargs[node._key]
        except (LookupError, TypeError, AttributeError):
            raise TypeError(f"execute(): the graph reads input {node._key!r}, which "
                            f"this execution lacks") from None
    elif isinstance(node, ClassNode):  # (the constructor gets top-level refs' values)
        a = tuple(arg(x) for x in node._args)
        kw = {k: arg(x) for k, x in node._kwargs.items()}
        v = node._cls.remote(*a, **kw)
    elif isinstance(node, ClassMethodNode):
        handle = node._handle
        if node._class_node is not None:  # (its actor, and the calls bound on it before)
            handle = _run_classic(node._class_node, args, kwargs, made)
            if node._prev is not None:
                _run_classic(node._prev, args, kwargs, made)
        a = tuple(arg(x) for x in node._args)
        kw = {k: arg(x) for k, x in node._kwargs.items()}
        v = _runtime.call(handle._id, node._method, a, kw,
                          f"calling {handle._class_name}.{node._method}",
                          node._num_returns)
    elif isinstance(node, FunctionNode):
        a = tuple(arg(x) for x in node._args)
        kw = {k: arg(x) for k, x in node._kwargs.items()}
        v = node._function.remote(*a, **kw)
    elif isinstance(node, ClassMethodOutputNode):  # (its method's call: once, k refs)
        v = _run_classic(node._node, args, kwargs, made)[node._i]
    elif isinstance(node, MultiOutputNode):
        v = [_run_classic(x, args, kwargs, made) for x in node._outputs]
    else:  # (a collective node reduces in the compiled graph's own group only)
        raise TypeError(f"{type(node).__name__} runs only in a compiled graph: use "
                        f"experimental_compile()")
    made[id(node)] = v
    return v


def _nested_nodes(x, seen):
    """The DAG nodes inside a constant argument (lists, tuples, sets, dicts' keys and
    values, objects' attributes), counted once per place they appear."""
    if isinstance(x, DAGNode):
        return [x]
    if isinstance(x, (str, bytes, bytearray, int, float, complex, bool, type(None))) \
            or id(x) in seen:
        return []
    seen.add(id(x))
    if isinstance(x, dict):
        items = list(x.keys()) + list(x.values())
    elif isinstance(x, (list, tuple, set, frozenset)):
        items = list(x)
    elif isinstance(x, type) or not hasattr(x, "__dict__"):
        return []
    else:
        try:
            items = list(vars(x).values())
        except TypeError:
            return []
    return [n for i in items for n in _nested_nodes(i, seen)]


def _upstream(outs):
    """id -> node of outs and every node their values come from."""
    seen, to_visit = {}, list(outs)
    while to_visit:
        n = to_visit.pop()
        if id(n) in seen:
            continue
        seen[id(n)] = n
        if isinstance(n, InputAttributeNode):
            to_visit.append(n._input)
        elif isinstance(n, ClassMethodOutputNode):
            to_visit.append(n._node)
        elif isinstance(n, CollectiveOutputNode):
            to_visit.extend(n._coll._inputs)
        elif isinstance(n, (ClassMethodNode, FunctionNode)):
            to_visit.extend(a for a in list(n._args) + list(n._kwargs.values())
                        if isinstance(a, DAGNode))
    return seen


def _check_no_nested(nodes):
    """Raises ValueError (Ray's message) where a bound method among nodes was given a
    node inside a container: a compiled step's arguments are read from channels by
    position, so a node must be an argument of its own."""
    for n in nodes:
        if not isinstance(n, (ClassMethodNode, FunctionNode)):
            continue
        for a in list(n._args) + list(n._kwargs.values()):
            found = [] if isinstance(a, DAGNode) else _nested_nodes(a, set())
            if found:
                raise ValueError(
                    f"Found {len(found)} DAGNodes from the arg {a!r} in {_label(n)}. "
                    f"Please ensure that the argument is a single DAGNode and that a "
                    f"DAGNode is not allowed to be placed inside any type of container.")


def _input_items(nodes):
    """(number of positional arguments, keyword names) that execute() must be given for
    a graph of these nodes reading its input by item (inp[i], inp.key); None where it
    reads the whole input or none of it. Reading both ways is a ValueError (Ray's)."""
    whole, keys = False, []
    for n in nodes:
        if isinstance(n, (ClassMethodNode, FunctionNode)):
            for a in list(n._args) + list(n._kwargs.values()):
                whole = whole or isinstance(a, InputNode)
                if isinstance(a, InputAttributeNode) and a._key not in keys:
                    keys.append(a._key)
    if whole and keys:
        raise ValueError("All tasks must either use InputNode() directly, or they must "
                         "index to specific args or kwargs.")
    if not keys:
        return None
    ints = [k for k in keys if isinstance(k, int)]
    return (max(ints) + 1 if ints else 0), [k for k in keys if not isinstance(k, int)]


def _check_inputs_used(up):
    """Raises Ray's errors where the graph (up: its outputs and all upstream of them) has
    two InputNodes, or reads an input item only in nodes whose values reach no output."""
    inputs = list(dict.fromkeys(n._input if isinstance(n, InputAttributeNode) else n
                                for n in up.values()
                                if isinstance(n, (InputNode, InputAttributeNode))))
    if len(inputs) > 1:
        raise AssertionError(_ONE_INPUT)
    if not inputs:
        return
    bound = [r._key for r in inputs[0].__dict__.get("_readers", ())
             if isinstance(r, InputAttributeNode) and r.__dict__.get("_readers")]
    keys = list(dict.fromkeys(bound))
    used = {n._key for n in up.values() if isinstance(n, InputAttributeNode)}
    missing = [k for k in keys if k not in used]
    if missing:
        raise ValueError(
            f"Compiled Graph expects input to be accessed using all of attributes "
            f"{', '.join(map(str, keys))}, but {', '.join(map(str, missing))} "
            f"{'is' if len(missing) == 1 else 'are'} unused. Ensure all input attributes "
            f"are used and contribute to the computation of the Compiled Graph output.")


def _check_no_leaves(up):
    """Raises ValueError (Ray's message) where a node bound on the graph's nodes (up: the
    outputs and all upstream of them) reaches no output: a step nobody reads would run
    unseen, its exceptions lost."""
    leaves, seen, to_visit = [], set(up), [n for n in up.values()]
    while to_visit:
        for r in to_visit.pop().__dict__.get("_readers", ()):
            if id(r) in seen:
                continue
            seen.add(id(r))
            to_visit.append(r)
            if not r.__dict__.get("_readers"):
                leaves.append(r)
    if leaves:
        names = ", ".join(_label(n) for n in leaves)
        raise ValueError(
            f"Compiled DAG doesn't support leaf nodes, i.e., nodes that don't have "
            f"downstream nodes and are not output nodes. There are {len(leaves)} leaf "
            f"nodes in the DAG. Please add the outputs of {names} to the graph's "
            f"outputs (a MultiOutputNode), or bind something that reads them.")


def _label(node):
    if isinstance(node, ClassMethodOutputNode):
        return f"{_label(node._node)} (value {node._i})"
    if isinstance(node, CollectiveOutputNode):
        return f"allreduce (output {node._i})"
    if isinstance(node, FunctionNode):
        return node._function._function_name.rsplit(".", 1)[-1]
    if isinstance(node, ClassNode):
        return f"{getattr(node._cls, '__name__', 'Actor')}()"
    if node._handle is None:
        return f"{getattr(node._class_node._cls, '__name__', 'Actor')}.{node._method}"
    return f"{node._handle._class_name}.{node._method}"


def _dot_of(root):
    """Graphviz text of an uncompiled graph: every node it draws an edge from declared."""
    ids, lines, edges = {}, [], []

    def name(n):
        if isinstance(n, ClassMethodOutputNode):  # (drawn as its method's box)
            return name(n._node)
        key = id(n._input) if isinstance(n, InputAttributeNode) else id(n)
        if key not in ids:
            ids[key] = f"n{len(ids)}"
            if isinstance(n, (InputNode, InputAttributeNode)):
                lines.append(f'  {ids[key]} [label="input" shape=oval];')
            elif isinstance(n, (ClassMethodNode, FunctionNode)):
                lines.append(f'  {ids[key]} [label="{_label(n)}" shape=box];')
                for x in list(n._args) + list(n._kwargs.values()):
                    if isinstance(x, DAGNode):
                        edges.append(f"  {name(x)} -> {ids[key]};")
            elif isinstance(n, CollectiveOutputNode):
                lines.append(f'  {ids[key]} [label="allreduce {n._i}" shape=box];')
                edges.append(f"  {name(n._coll._inputs[n._i])} -> {ids[key]};")
        return ids[key]

    outs = root._outputs if isinstance(root, MultiOutputNode) else [root]
    tail = []
    for k, o in enumerate(outs):
        tail.append(f'  out{k} [label="output {k}" shape=oval];')
        tail.append(f"  {name(o)} -> out{k};")
    return "\n".join(["digraph troupe_dag {", "  rankdir=LR;"] + lines + edges + tail +
                     ["}", ""])


def _declare_all(text):
    """Graphviz text with a declaration added for any node an edge names that the text
    does not declare (so that the drawing shows every node it connects)."""
    declared = set(re.findall(r"^\s*(\w+) \[", text, re.M))
    missing = []
    for m in re.finditer(r"^\s*(\w+) -> (\w+)", text, re.M):
        for n in m.groups():
            if n not in declared:
                declared.add(n)
                missing.append(f'  {n} [label="{n}" shape=box];\n')
    if not missing:
        return text
    head, _, rest = text.partition("\n  rankdir=LR;\n")
    return head + "\n  rankdir=LR;\n" + "".join(missing) + rest


def _write(text, filename):
    if filename:
        with open(filename, "w") as f:
            f.write(text)
    return text


class CompiledDAG:
    def __init__(self, root, enable_asyncio, max_inflight, buffer_size, submit_timeout):
        rt = _runtime.runtime()
        self._g = ctypes.c_void_p()
        self._id = uuid.uuid4().hex
        self._lock = threading.Lock()
        self._async = enable_asyncio
        self._steps = []  # (handle, step id): forgotten at teardown
        self._execs = {}  # exec number -> _Exec
        self._down = False
        self._multi = isinstance(root, MultiOutputNode)
        outs = root._outputs if self._multi else [root]
        for o in outs:
            if not isinstance(o, (ClassMethodNode, ClassMethodOutputNode,
                                  CollectiveOutputNode)):
                raise TypeError("a graph's outputs must be bound methods (handle.m.bind)")
        up = _upstream(outs)
        _check_no_nested(up.values())
        _check_inputs_used(up)
        _check_no_leaves(up)
        self._wants = _input_items(up.values())
        self._raw = {}  # id(bound node) -> numpy dtype: its value feeds a collective
        self._step_ids = {}
        self._labels = {}  # step -> "Class.method" (visualize)
        self._collect_raw(outs, set())
        self._out_dtypes = [o._coll._dtype if isinstance(o, CollectiveOutputNode) else None
                            for o in outs]
        check(lib.tr_dag_create(rt, byref(self._g)), "tr_dag_create")
        try:
            inp = ctypes.c_uint32()
            check(lib.tr_dag_input(self._g, byref(inp)), "the graph's input")
            self._input = inp.value
            made = {}
            # bound in the order they were made (Ray's: an actor's steps run in the order
            # its methods were bound), each after the nodes it reads
            for n in sorted((n for n in up.values() if isinstance(n, ClassMethodNode)),
                            key=lambda n: n._seq):
                self._node(n, made)
            c_nodes = [self._any(o, made) for o in outs]
            # outputs that are values of one num_returns > 1 method are one C output (its
            # tuple), each taking its item at get
            c_outs = list(dict.fromkeys(c_nodes))
            self._out_at = [(c_outs.index(c), o._i if isinstance(o, ClassMethodOutputNode)
                             else None) for c, o in zip(c_nodes, outs)]
            arr = (ctypes.c_uint32 * len(c_outs))(*c_outs)
            check(lib.tr_dag_output(self._g, arr, len(c_outs)), "the graph's outputs")
            self._n_out = len(outs)
            opts = _ffi.DagOptions()
            lib.tr_dag_options_init(byref(opts))
            opts.max_inflight = int(max_inflight or 10)  # (Ray's default)
            opts.slot_bytes = int(buffer_size or 65536)
            opts.submit_timeout_ms = int((submit_timeout or 10) * 1000)
            opts.attach_timeout_ms = 30000
            check(lib.tr_dag_compile(self._g, byref(opts)), "compiling the graph")
        except BaseException:
            self.teardown()
            raise
        self._fd = lib.tr_dag_fd(self._g) if enable_asyncio else -1
        self._next_ready = 0  # (asyncio) the execution the fd's next count is for
        self._futures = {}  # (asyncio) execution -> its outputs' futures
        self._loop = None  # (asyncio) the loop watching the fd
        self._max_inflight = opts.max_inflight
        _live.add(self)

    def _collect_raw(self, nodes, seen):
        """Marks the bound methods whose values feed a collective node (they reply raw
        array bytes: the node reduces bytes)."""
        for n in nodes:
            if id(n) in seen:
                continue
            seen.add(id(n))
            if isinstance(n, CollectiveOutputNode):
                for x in n._coll._inputs:
                    self._raw[id(x)] = n._coll._dtype
                self._collect_raw(n._coll._inputs, seen)
            elif isinstance(n, ClassMethodNode):
                self._collect_raw(list(n._args) + list(n._kwargs.values()), seen)
            elif isinstance(n, ClassMethodOutputNode):
                self._collect_raw([n._node], seen)

    def _step_of(self, node):
        s = self._step_ids.get(id(node))
        if s is None:
            s = self._step_ids[id(node)] = f"{os.getpid():x}.{next(_steps):x}"
        return s

    def _any(self, node, made):
        if isinstance(node, CollectiveOutputNode):
            return self._collective(node._coll, made)[node._i]
        if isinstance(node, ClassMethodOutputNode):  # (its method's node: the tuple)
            return self._node(node._node, made)
        return self._node(node, made)

    def _collective(self, coll, made):
        """The C outputs of a collective node (its inputs bound first)."""
        if id(coll) in made:
            return made[id(coll)]
        ins = [self._node(x, made) for x in coll._inputs]
        arr = (ctypes.c_uint32 * len(ins))(*ins)
        outs = (ctypes.c_uint32 * len(ins))()
        check(lib.tr_dag_allreduce(self._g, arr, len(ins), coll._c_dtype, coll._op, outs),
               "allreduce.bind")
        made[id(coll)] = list(outs)
        return made[id(coll)]

    def _node(self, node, made):
        """The C node of a bound method (registered in its actor first)."""
        if id(node) in made:
            return made[id(node)]
        inputs, where = [], {}

        def source(x):
            if isinstance(x, (InputNode, InputAttributeNode, ClassMethodNode,
                              ClassMethodOutputNode, CollectiveOutputNode)):
                c = self._input if isinstance(x, (InputNode, InputAttributeNode)) \
                    else self._any(x, made)
                if c not in where:
                    where[c] = len(inputs)
                    inputs.append(c)
                k = where[c]
                if isinstance(x, InputNode):
                    return ("input", k)
                if isinstance(x, InputAttributeNode):
                    return ("input_item", k, x._key)
                if isinstance(x, CollectiveOutputNode):  # raw bytes, shaped as the value
                    producer = x._coll._inputs[x._i]    # that went in on this actor
                    return ("raw", k, x._coll._dtype.str, self._step_of(producer))
                if id(x) in self._raw:
                    return ("raw", k, self._raw[id(x)].str, self._step_of(x))
                if isinstance(x, ClassMethodOutputNode):
                    return ("item", k, x._i)
                return ("node", k)
            if isinstance(x, FunctionNode):
                raise TypeError("a remote function's node runs only as a task (execute() "
                                "before compiling): a compiled graph's steps are actors' "
                                "methods")
            if isinstance(x, DAGNode):
                raise TypeError(f"{type(x).__name__} cannot be a method's argument")
            return ("const", x)

        args = [source(a) for a in node._args]
        kwargs = {k: source(v) for k, v in node._kwargs.items()}
        if not inputs:  # (every step reads something: the input, if nothing else)
            inputs.append(self._input)
        step = self._step_of(node)
        self._labels[step] = _label(node)
        raw = self._raw.get(id(node))
        if node._handle is None:
            raise TypeError(f"{_label(node)}: a compiled graph binds methods of actors "
                            f"already made (Cls.remote()), not of a Cls.bind() node")
        what = f"binding {node._handle._class_name}.{node._method}"
        spec = (step, node._method, args, kwargs, raw.str if raw else None)
        if node._num_returns > 1:  # (its values go on as one tuple: the worker checks k)
            spec += (node._num_returns,)
        _runtime.get(_runtime.call(node._handle._id, REGISTER, spec, {}, what))
        self._steps.append((node._handle, step))
        arr = (ctypes.c_uint32 * len(inputs))(*inputs)
        out = ctypes.c_uint32()
        check(lib.tr_dag_bind(self._g, node._handle._id, (STEP_PREFIX + step).encode(), arr,
                               len(inputs), byref(out)),
               what)
        made[id(node)] = out.value
        return out.value

    # ------------------------------------------------------------ executing

    def execute(self, *args, **kwargs):
        """Submits one execution; returns a CompiledDAGRef (a list of them for a
        MultiOutputNode) at once."""
        if self._async:
            raise TypeError("this graph was compiled with enable_asyncio: use execute_async")
        e = self._submit(args, kwargs)
        refs = [CompiledDAGRef(self, e, i) for i in range(self._n_out)]
        return refs if self._multi else refs[0]

    def _submit(self, args, kwargs):
        if self._down:
            raise TroupeError("the graph was torn down", "TR_ESTATE")
        if self._wants is not None:  # (checked here: a step would fail on a missing one)
            n, names = self._wants
            if len(args) != n:
                raise ValueError(f"dag.execute() or dag.execute_async() must be called "
                                 f"with {n} positional args, got {len(args)}")
            for k in names:
                if k not in kwargs:
                    raise ValueError(f"dag.execute() or dag.execute_async() must be "
                                     f"called with kwarg `{k}`")
        data = _serial.plain_args(args, kwargs)  # (builtin scalars: the same bytes, faster)
        if data is None:
            parts, total, _ = _serial.dumps((args, kwargs))
            data = _serial.join(parts, total)
        e = ctypes.c_uint64()
        with self._lock:
            if len(self._execs) >= self._max_inflight:  # (Ray's: refused, not waited for)
                n = self._max_inflight
                raise RayCgraphCapacityExceeded(
                    f"The compiled graph can't have more than {n} in-flight executions, "
                    f"and you currently have {len(self._execs)} in-flight executions. "
                    f"Retrieve an output using ray.get before submitting more requests or "
                    f"increase `_max_inflight_executions`. ")
            check(lib.tr_dag_execute(self._g, data, len(data), byref(e)), "execute")
            self._execs[e.value] = _Exec(self._n_out)
        return e.value

    def _read(self, e, i, ms):
        """Reads output i of execution e into its results if it is in within ms (C's
        timeout; -1: none); whether it is. Its slot stays until all outputs are taken."""
        ex = self._execs.get(e)
        if ex is None:
            raise ValueError(f"execution {e} was released already")
        if ex.res[i] is not None:
            return True
        data, n = ctypes.c_void_p(), ctypes.c_size_t()
        c, item = self._out_at[i]
        rc = lib.tr_dag_get(self._g, e, c, ms, byref(data), byref(n))
        if rc == _errors.ETIMEDOUT:
            return False
        try:
            if rc == 0 and self._out_dtypes[i] is not None:  # a collective node's bytes
                import numpy as np
                v = np.frombuffer(ctypes.string_at(data.value, n.value),
                                  dtype=self._out_dtypes[i]).copy()
            elif rc == 0:
                payload = memoryview(ctypes.string_at(data.value, n.value)) if n.value else \
                    memoryview(b"")
                try:
                    v = _serial.loads(payload)
                except _serial.RemoteError as err:
                    raise _errors.task_error(err, "a compiled graph's step") from None
                v = v if item is None else v[item]
            else:
                check(rc, f"execution {e}")
            ex.res[i] = (True, v)
        except Exception as err:
            ex.res[i] = (False, err)
            if ex.failed is None:
                ex.failed, ex.failed_at = err, time.monotonic()
        return True

    def _fetch(self, e, i, timeout):
        """Output i of execution e (once), waiting up to timeout seconds (None: no limit);
        an exception of another output of e that comes first is raised once this output
        is still out _GRACE_S after it (Ray's fast fail: the execution failed; an output
        that comes meanwhile is its own value, even on a loaded host). Its slots go when
        all outputs are taken."""
        with self._lock:
            ex = self._execs.get(e)
            if ex is None or ex.taken[i]:
                raise ValueError(f"output {i} of execution {e} was got already")
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        try:
            while True:
                if self._n_out == 1:  # (nothing else to watch: one wait, as long as asked)
                    ms = -1 if deadline is None else \
                        max(0, int((deadline - time.monotonic()) * 1000))
                else:
                    ms = _SLICE_MS if deadline is None else \
                        max(0, min(_SLICE_MS, int((deadline - time.monotonic()) * 1000)))
                if self._read(e, i, ms):
                    ok, v = ex.res[i]
                    if ok:
                        return v
                    raise v
                for j in range(self._n_out):  # (dropped ones too: the execution failed)
                    if j != i:
                        self._read(e, j, 0)
                if ex.failed is not None and time.monotonic() - ex.failed_at >= _GRACE_S:
                    raise ex.failed
                if deadline is not None and time.monotonic() >= deadline:
                    raise RayChannelTimeoutError(f"execution {e}: output {i} not ready "
                                                 f"within {timeout} s")
        except RayChannelTimeoutError:
            raise  # (not taken: it may be got again)
        except BaseException:
            self._taken(e, i)
            raise
        finally:
            if ex.res[i] is not None:
                self._taken(e, i)

    def _taken(self, e, i):
        with self._lock:
            ex = self._execs.get(e)
            if ex is None or ex.taken[i]:
                return
            ex.taken[i] = True
            ex.left -= 1
            if ex.left == 0:
                self._release(e)

    def _release(self, e):  # (self._lock held)
        del self._execs[e]
        if not self._down:
            lib.tr_dag_release(self._g, e)

    def _unwatch(self):
        """(asyncio) Takes the graph's fd off the loop watching it (before it closes: a
        loop would otherwise keep a closed fd's number, and miss the next graph's)."""
        loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            try:
                loop.remove_reader(self._fd)
            except Exception:
                pass

    async def execute_async(self, *args, **kwargs):
        """Submits one execution; returns an asyncio future of its value (a list of them,
        one per output, for a MultiOutputNode), resolved when the graph's fd says its
        outputs are in, or as soon as one of them is an exception (Ray's fast fail).
        An execution holds its slots until its outputs are in."""
        if not self._async:
            raise TypeError("compile with experimental_compile(enable_asyncio=True)")
        loop = asyncio.get_running_loop()
        e = self._submit(args, kwargs)
        futs = [loop.create_future() for _ in range(self._n_out)]
        self._futures[e] = futs
        if self._loop is not loop:  # (a loop of its own per asyncio.run, say)
            self._unwatch()
            self._loop = loop
            loop.add_reader(self._fd, self._on_fd)
        loop.call_later(_FAST_FAIL_S, self._watch, e)
        return futs if self._multi else futs[0]

    def _settle(self, e, every):
        """Resolves execution e's futures from what has been read of its outputs: each
        read output its own, all others the execution's first exception (every: all
        outputs are in)."""
        ex, futs = self._execs.get(e), self._futures.get(e)
        if ex is None or futs is None:
            return
        for i, f in enumerate(futs):
            if f.done():
                continue
            if ex.res[i] is not None:
                ok, v = ex.res[i]
                f.set_result(v) if ok else f.set_exception(v)
            elif ex.failed is not None or every:
                f.set_exception(ex.failed or TroupeError(f"execution {e}: no output {i}"))
            if f.done():  # (marked seen, or asyncio logs the exception of each future that
                f.exception()  # nobody awaits: a gather raises only one of several)

    def _watch(self, e):
        """(asyncio) An execution still out after a while: reads what of it is in, so that
        an exception resolves its futures at once; again shortly while some are out."""
        futs = self._futures.get(e)
        if self._down or futs is None or all(f.done() for f in futs):
            return
        for i in range(self._n_out):
            self._read(e, i, 0)
        self._settle(e, False)
        if not all(f.done() for f in futs):
            self._loop.call_later(_WATCH_S, self._watch, e)

    def _on_fd(self):
        try:
            os.read(self._fd, 8)  # (semaphore mode: one execution per read)
        except BlockingIOError:
            return
        e = self._next_ready
        self._next_ready += 1
        if e not in self._execs:
            return
        try:
            for i in range(self._n_out):
                self._read(e, i, 0)
            self._settle(e, True)
        finally:
            self._futures.pop(e, None)
            with self._lock:  # (its slots go once the fd has counted it: the count runs
                if e in self._execs:  # from the oldest execution not released)
                    self._release(e)

    def get_id(self):
        """This compiled graph's id: a hex string, unique to it."""
        return self._id

    def visualize(self, filename=None, channel_details=False, **unused):
        """The graph as Graphviz text (also written to filename, if given): its steps
        named by their class and method, each channel with its slots (always: Ray's
        channel_details; its other arguments are ignored)."""
        out = ctypes.c_void_p()
        check(lib.tr_dag_to_dot(self._g, byref(out)), "visualize")
        text = ctypes.string_at(out.value).decode()
        lib.tr_free(out)
        for step, label in self._labels.items():
            text = text.replace(f'"{STEP_PREFIX}{step}\\n', f'"{label}\\n')
        return _write(_declare_all(text), filename)

    def teardown(self):
        """Stops the graph (its actors' loops end, its channels go); idempotent."""
        with self._lock:
            if self._down:
                return
            self._down = True
            g, self._g = self._g, None
            self._execs.clear()
        if self._async:
            self._unwatch()
        if g:
            lib.tr_dag_destroy(g)
        if not _runtime.is_initialized():
            # shutdown's hook (it runs with the runtime already taken away): the steps'
            # actors end with the runtime, and a FORGET call would start a new runtime,
            # as a driver's first use of troupe does
            self._steps = []
            return
        for handle, step in self._steps:  # (no wait: an actor may be dead)
            try:
                _runtime.call(handle._id, FORGET, (step,), {}, "forgetting a step")
            except Exception:
                pass
        self._steps = []

    def __del__(self):
        try:
            self.teardown()
        except Exception:
            pass


class _Exec:
    def __init__(self, n):
        self.taken = [False] * n  # its refs got or dropped: released when all are
        self.left = n
        self.res = [None] * n  # (ok, value or exception) of each output read
        self.failed = None  # the first exception read
        self.failed_at = None  # when (time.monotonic())


class CompiledDAGRef(_runtime.GettableRef):
    """One output of one execution: ``troupe.get(ref)`` or ``ref.get(timeout=)``, once."""

    def __init__(self, dag, e, i):
        self._dag, self._e, self._i = dag, e, i
        self._done = False

    def get(self, timeout=None):
        if self._done:
            raise ValueError("a CompiledDAGRef can be got once")
        self._done = True
        return self._dag._fetch(self._e, self._i, timeout)

    def __del__(self):
        if not self._done and not self._dag._down:
            try:
                self._dag._taken(self._e, self._i)
            except Exception:
                pass

    def __repr__(self):  # (Ray's form: no output index where the graph has one output)
        i = self._i if self._dag._multi else None
        return f"CompiledDAGRef({self._dag.get_id()}, execution_index={self._e}, " \
               f"channel_index={i})"


@_runtime.on_shutdown
def _teardown_all():
    for g in list(_live):
        g.teardown()


def _alias(name, **names):
    """Ray's import paths of these classes (``from ray.dag.input_node import InputNode``,
    ``ray.dag.output_node``): modules of their own in sys.modules, holding this one's."""
    mod = types.ModuleType(f"{__name__}.{name}", f"Ray's ray.dag.{name}: troupe.dag's names")
    mod.__dict__.update(names)
    sys.modules[mod.__name__] = mod
    globals()[name] = mod


class DAGContext:
    """The defaults of graphs compiled from now on (Ray's ray.dag.DAGContext):
    ``DAGContext.get_current()`` gives the one context; experimental_compile takes
    submit_timeout (seconds), buffer_size_bytes and max_inflight_executions from it
    where its own arguments leave them unset."""
    _current = None

    def __init__(self, submit_timeout=10, get_timeout=10, buffer_size_bytes=65536,
                 max_inflight_executions=10, asyncio_max_queue_size=None,
                 max_buffered_results=1000, overlap_gpu_communication=False,
                 teardown_timeout=30, read_iteration_timeout=0.1):
        self.submit_timeout = submit_timeout
        self.get_timeout = get_timeout
        self.buffer_size_bytes = buffer_size_bytes
        self.max_inflight_executions = max_inflight_executions
        self.asyncio_max_queue_size = asyncio_max_queue_size
        self.max_buffered_results = max_buffered_results
        self.overlap_gpu_communication = overlap_gpu_communication
        self.teardown_timeout = teardown_timeout
        self.read_iteration_timeout = read_iteration_timeout

    @classmethod
    def get_current(cls):
        if cls._current is None:
            cls._current = cls()
        return cls._current


_alias("input_node", InputNode=InputNode, InputAttributeNode=InputAttributeNode)
_alias("dag_node", DAGNode=DAGNode)
# (Ray's ray.dag.constants: the one a program sets here; profiling is not recorded)
_alias("constants", RAY_CGRAPH_ENABLE_PROFILING=False, RAY_CGRAPH_ENABLE_NVTX_PROFILING=False,
       PARENT_CLASS_NODE_KEY=PARENT_CLASS_NODE_KEY,
       PREV_CLASS_METHOD_CALL_KEY=PREV_CLASS_METHOD_CALL_KEY)
_alias("output_node", MultiOutputNode=MultiOutputNode)
_alias("class_node", ClassNode=ClassNode, ClassMethodNode=ClassMethodNode)
_alias("function_node", FunctionNode=FunctionNode)
