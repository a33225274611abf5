"""Actors: @troupe.remote classes, their handles and method calls (the top of the user's
API: a handle's method also binds into a compiled graph, troupe.dag)."""
import ctypes
import hashlib
import inspect
import json
import numbers
import os
import threading
import types
import warnings
import weakref

from . import _errors, _ffi, _placement, _runtime, _serial, ray_constants, remote_function
from ._errors import check
from ._ffi import ActorId, Ref, byref, lib

_fast = _runtime.fast
from ._runtime import runtime
from .dag import ClassMethodNode, ClassMethodOutputNode, ClassNode
from .exceptions import ActorExit

PY_CLASS = b"troupe.py"      # the one C class every Python actor is (its dispatch runs
                             # the Python method of the call's name: _worker.py)
EXIT = "_troupe_exit"        # a call that ends the actor (exit_actor's, the last handle's)
# Ray's built-in methods of every actor: __ray_ready__() is True once it runs,
# __ray_call__(fn, *args) runs fn(instance, *args) in it
BUILTIN_METHODS = ("__ray_ready__", "__ray_call__")
ENV = "_troupe_env"          # a constructor payload that sets environment variables first

_ACTOR_OPTIONS = {"name", "num_cpus", "num_gpus", "memory", "resources", "max_restarts",
                  "get_if_exists", "runtime_env", "lifetime", "max_concurrency",
                  "placement_group", "placement_group_bundle_index", "max_task_retries",
                  "concurrency_groups", "namespace"}
# Ray's, taken so that its code runs, but troupe does not do what they ask: a warning
# when one is given a value other than Ray's default (which troupe does anyway)
_IGNORED_OPTIONS = {"scheduling_strategy": None,
                    "accelerator_type": None, "object_store_memory": None,
                    "placement_group_capture_child_tasks": None,
                    "max_pending_calls": -1, "enable_task_events": None, "_metadata": None,
                    "label_selector": None, "_labels": None,
                    "allow_out_of_order_execution": None, "fallback_strategy": None}
_METHOD_OPTIONS = {"num_returns": 1, "concurrency_group": None, "max_task_retries": 0,
                   "retry_exceptions": False, "enable_task_events": None,
                   "tensor_transport": None, "_generator_backpressure_num_objects": None}
_RUNTIME_ENV_HONOURED = {"env_vars"}
ASYNC_DEFAULT_CONCURRENCY = 1000  # Ray's max_concurrency for an async actor
_warned = set()
_warned_lock = threading.Lock()


def remote(*args, **options):
    """``@troupe.remote`` or ``@troupe.remote(num_cpus=1, ...)`` on a class: its instances
    become actors, each a worker process (``Cls.remote(...)``); on a function: a remote
    function, whose calls run as tasks (``f.remote(...)``, troupe.remote_function)."""
    if len(args) == 1 and not options:
        return _make(args[0], {})
    if args or not options:  # (Ray refuses @remote() too)
        raise TypeError("The @troupe.remote decorator must be applied either with no "
                        "arguments and no parentheses, for example '@troupe.remote', or with "
                        "keyword options, for example '@troupe.remote(num_cpus=1)'")
    return lambda obj: _make(obj, options)


def _make(obj, options):
    if inspect.isfunction(obj):
        return remote_function.make(obj, options, 3)
    if not inspect.isclass(obj):
        raise TypeError(f"The @troupe.remote decorator must be applied to either a function "
                        f"or a class, not {obj!r}")
    _check_options(options, 3)  # (from the user's @remote(...) line: through its lambda)
    return ActorClass(obj, options)


def _warn_once(key, text, stacklevel):
    """Warns text once per key per process (stacklevel: as warnings.warn's, from the
    caller)."""
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(text, stacklevel=stacklevel + 1)


def _check_options(options, stacklevel):
    """Refuses an option Ray lacks (TypeError) or a value Ray refuses (ValueError); warns
    (once per option) of one troupe takes but does not honour. stacklevel: the user's
    frame, counted from this function's caller."""
    bad = set(options) - _ACTOR_OPTIONS - set(_IGNORED_OPTIONS)
    if bad:
        raise TypeError(f"unknown actor options: {sorted(bad)}")
    remote_function.check_option_types(options)
    remote_function.check_placement_options(options, "actor", "max_restarts")
    lifetime = options.get("lifetime")
    if lifetime not in (None, "detached", "non_detached"):
        raise ValueError("actor option lifetime must be one of 'detached', 'non_detached' "
                         f"and None, got {lifetime!r}")
    ns = options.get("namespace")
    if ns is not None and (not ns or "\x1f" in ns or len(ns.encode()) > 255):
        raise ValueError(f"actor option namespace={ns!r}: a non-empty str of up to 255 bytes")
    mtr = options.get("max_task_retries")
    if mtr is not None and (isinstance(mtr, bool) or not isinstance(mtr, numbers.Integral) or
                            mtr < -1):
        raise ValueError(f"actor option max_task_retries={mtr!r}: an int >= -1 is needed")
    groups = options.get("concurrency_groups")
    if groups is not None:
        if not isinstance(groups, dict):
            raise TypeError(f"actor option concurrency_groups={groups!r}: a dict of group "
                            f"names to their max_concurrency is needed")
        for g, n in groups.items():
            if not isinstance(g, str) or not g or len(g.encode()) > 63 or \
                    any(ch in g for ch in ";=:,@"):
                raise ValueError(f"concurrency group name {g!r}: 1..63 bytes without "
                                 f"';', '=', ':', ',' or '@' are needed")
            if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 65536:
                raise ValueError(f"concurrency group {g!r}: max_concurrency={n!r}: an int "
                                 f"from 1 to 65536 is needed")
        if len(groups) > 64:
            raise ValueError(f"{len(groups)} concurrency groups: at most 64")
    mc = options.get("max_concurrency")
    if mc is not None:
        if isinstance(mc, bool) or not isinstance(mc, int) or mc < 1:
            raise ValueError(f"actor option max_concurrency={mc!r}: an int >= 1 is needed")
        if mc > 65536:
            raise ValueError(f"actor option max_concurrency={mc!r}: at most 65536")
    env = options.get("runtime_env")
    if env is not None:
        if not isinstance(env, dict):
            raise TypeError(f"actor option runtime_env={env!r}: a dict is needed")
        vars_ = env.get("env_vars") or {}
        if not isinstance(vars_, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                  for k, v in vars_.items()):
            raise TypeError("runtime_env's env_vars must be a dict of str to str")
        other = sorted(k for k in env if k not in _RUNTIME_ENV_HONOURED)
        if other:
            _warn_once(("runtime_env", tuple(other)),
                       f"troupe ignores {other} of the actor option 'runtime_env': only its "
                       f"env_vars are set; the actor runs in the driver's environment",
                       stacklevel + 1)
    for k in sorted(set(options) & set(_IGNORED_OPTIONS)):
        if k == "scheduling_strategy" and _placement.check_strategy(options, "actor"):
            continue  # a placement group's: honoured (_placement.apply_options)
        if options[k] != _IGNORED_OPTIONS[k]:
            _warn_once(("option", k),
                       f"troupe ignores the actor option '{k}' ({options[k]!r}): Ray's "
                       f"code runs, without what the option asks for", stacklevel + 1)


def method(*args, **options):
    """``@troupe.method(num_returns=1, concurrency_group=...)`` on an actor's method (Ray's
    ray.method): its options, checked when the class is decorated with @troupe.remote.
    num_returns=k > 1: a call gives k refs, the method returns k values (a tuple or
    list), each ref gets one; 0: a call gives None (it runs all the same)."""
    if len(args) == 1 and not options and callable(args[0]):
        args[0].__troupe_method_options__ = {}
        return args[0]
    if args:
        raise TypeError("troupe.method takes keyword options: @troupe.method(num_returns=1)")
    bad = set(options) - set(_METHOD_OPTIONS)
    if bad:
        raise TypeError(f"unknown options of troupe.method: {sorted(bad)} (it takes "
                        f"{sorted(_METHOD_OPTIONS)})")

    def annotate(fn):
        fn.__troupe_method_options__ = dict(options)
        return fn

    return annotate


def _check_method_options(where, options, stacklevel, declared=False):
    """num_returns is honoured (an int >= 0: ValueError otherwise), and max_task_retries
    (a call sent again when the actor's worker dies with it in flight); where declared
    (@troupe.method, not a call's options) retry_exceptions too, with max_task_retries: the
    worker runs the method again on an exception it names (_worker.run_retrying). The
    rest warn once."""
    _runtime.check_num_returns(options.get("num_returns", 1), where)
    honoured = {"num_returns", "concurrency_group", "max_task_retries"}
    group = options.get("concurrency_group")
    if group is not None and (not isinstance(group, str) or not group):
        raise ValueError(f"{where}: concurrency_group={group!r}: a group's name is needed")
    if "retry_exceptions" in options:
        remote_function.check_retry_exceptions(options["retry_exceptions"], where)
    mtr = options.get("max_task_retries")
    if mtr is not None and (isinstance(mtr, bool) or not isinstance(mtr, int) or mtr < -1):
        raise ValueError(f"{where}: max_task_retries={mtr!r}: an int >= -1 is needed")
    if declared:
        honoured.add("retry_exceptions")
    for k in sorted(set(options) - honoured):
        if options[k] != _METHOD_OPTIONS.get(k):
            _warn_once(("method option", k, repr(options[k])),
                       f"troupe ignores the method option '{k}' ({options[k]!r}): Ray's "
                       f"code runs, without what the option asks for", stacklevel + 1)


def is_async_class(cls):
    """Whether cls is an async actor (Ray's rule: one of its methods is an async def): it
    gets Ray's default max_concurrency of 1000, and its worker runs its plain methods on
    its asyncio loop's thread too (_worker.on_loop), one at a time between the
    coroutines' steps, as Ray's async actors do. As in Ray, calls that run at once start
    in no set order."""
    return any(inspect.iscoroutinefunction(v) or inspect.isasyncgenfunction(v)
               for n, v in inspect.getmembers(cls)
               if callable(v) and not (n.startswith("__") and n.endswith("__")))


def _methods_of(cls):
    return frozenset(n for n, v in inspect.getmembers(cls)
                     if callable(v) and not (n.startswith("__") and n.endswith("__")))


def _method_checks(cls):
    """{name: remote_function.ArgCheck} of cls's methods: a call's arguments its method's
    signature refuses are Ray's TypeError at .remote()."""
    out = {}
    for n in _methods_of(cls):
        raw = inspect.getattr_static(cls, n, None)
        where = f"{cls.__name__}.{n}"
        if isinstance(raw, staticmethod):
            c = remote_function.ArgCheck.of(raw.__func__, where)
        elif isinstance(raw, classmethod):
            c = remote_function.ArgCheck.of(getattr(cls, n), where)  # (bound: no cls)
        elif inspect.isfunction(raw):
            c = remote_function.ArgCheck.of(raw, where, drop_first=True)
        else:
            c = None
        if c is not None:
            out[n] = c
    return out


def _check_methods(cls):
    """@troupe.method's options of each method, checked at class decoration; returns
    {name: num_returns} of the methods whose num_returns is not 1."""
    returns = {}
    for n, v in inspect.getmembers(cls):
        opts = getattr(v, "__troupe_method_options__", None)
        if opts:
            _check_method_options(f"{cls.__name__}.{n}", opts, 5, declared=True)
        if opts and "num_returns" in opts:
            if opts["num_returns"] != 1:
                returns[n] = opts["num_returns"]
        elif inspect.isgeneratorfunction(v) or inspect.isasyncgenfunction(v):
            returns[n] = "streaming"  # (Ray's default for a generator method)
    return returns


def _method_retries(cls):
    """{name: max_task_retries} of the methods whose @troupe.method declares it: each call
    of one is sent again that many times when the actor's worker dies with it in flight,
    over the actor's own max_task_retries (Ray's; C's tr_call_options)."""
    out = {}
    for n, v in inspect.getmembers(cls):
        opts = getattr(v, "__troupe_method_options__", None)
        if opts and opts.get("max_task_retries") is not None:
            out[n] = int(opts["max_task_retries"])
    return out


def _method_groups(cls):
    """{concurrency group: [the methods @troupe.method puts in it]} of cls."""
    groups = {}
    for n, v in inspect.getmembers(cls):
        g = (getattr(v, "__troupe_method_options__", None) or {}).get("concurrency_group")
        if g is not None:
            groups.setdefault(g, []).append(n)
    return groups


def _groups_struct(cls_name, declared, methods, keep):
    """The C concurrency groups (an array, its length) of an actor whose options declare
    `declared` ({name: max_concurrency}) and whose methods say `methods` ({name: [methods]});
    what C borrows goes into keep. A method's group the actor does not declare is Ray's
    ValueError."""
    unknown = sorted(set(methods) - set(declared or {}))
    if unknown:
        raise ValueError(f"{cls_name}: methods of concurrency groups {unknown} that the actor "
                         f"does not declare (its concurrency_groups option)")
    if not declared:
        return None, 0
    arr = (_ffi.ConcurrencyGroup * len(declared))()
    for i, (g, n) in enumerate(declared.items()):
        names = [m.encode() for m in methods.get(g, [])]
        marr = (ctypes.c_char_p * max(1, len(names)))(*names)
        arr[i].name, arr[i].max_concurrency = g.encode(), n
        arr[i].methods, arr[i].n_methods = marr, len(names)
        keep.extend([names, marr])
    keep.append(arr)
    return arr, len(declared)


def _init_signature(cls):
    """The constructor's signature (with self), or None where it cannot be read."""
    if cls.__init__ is object.__init__:
        return inspect.Signature([inspect.Parameter("self",
                                                    inspect.Parameter.POSITIONAL_ONLY)])
    try:
        return inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        return None


class ActorClass:
    def __init__(self, cls, options, *more):
        if more:  # (class X(SomeActorClass): Python calls ActorClass(name, bases, dict))
            raise TypeError("Inheriting from actor classes is not currently supported. You "
                            "can instead inherit from a non-actor base class and make the "
                            "derived class an actor class (with @troupe.remote).")
        self._returns = _check_methods(cls)  # {method: num_returns} other than 1
        self._retries = _method_retries(cls)  # {method: its own max_task_retries}
        self._size_checked = False  # (the class's pickle, once, where a payload is large)
        self._method_groups = _method_groups(cls)  # {group: [its methods]}
        self._cls = cls
        self._options = dict(options)
        self._methods = _methods_of(cls)
        self._init_sig = _init_signature(cls)
        self._checks = _method_checks(cls)  # {method: its arguments' check}
        # {method: Ray's __ray_invocation_decorator__ of it}: wraps its calls' submission
        self._decorators = {n: v.__ray_invocation_decorator__ for n, v in
                            inspect.getmembers(cls, callable)
                            if getattr(v, "__ray_invocation_decorator__", None) is not None}
        self.__name__ = cls.__name__
        self.__qualname__ = getattr(cls, "__qualname__", cls.__name__)
        self.__module__ = cls.__module__
        self.__doc__ = cls.__doc__

    def __getattr__(self, name):
        """The class's own attributes (constants, static and class methods), as Ray lets
        ``MyActor.SOME_CONST`` read them; an instance method is called on a handle."""
        cls = self.__dict__.get("_cls")
        if cls is None or (name.startswith("__") and name.endswith("__")):
            raise AttributeError(name)
        try:
            raw = inspect.getattr_static(cls, name)
        except AttributeError:
            raise AttributeError(f"actor class {cls.__name__} has no attribute "
                                 f"{name!r}") from None
        if inspect.isfunction(raw):
            raise AttributeError(f"{cls.__name__}.{name} is an actor method: call it on an "
                                 f"actor, {cls.__name__}.remote().{name}.remote(...)")
        return getattr(cls, name)

    def options(self, **options):
        _check_options(options, 2)
        merged = dict(self._options)
        merged.update(options)
        return ActorClass._with(self, merged)

    def __dir__(self):  # (Ray's: what a user calls on the class, and its methods' names)
        return sorted(set(self._methods) | {"bind", "options", "remote"})

    def get_or_create(self, *args, **kwargs):
        """The actor named by options(name=...) if one lives, else a new one made with
        these arguments (Ray's; options(get_if_exists=True).remote(...))."""
        if not self._options.get("name"):
            raise ValueError(f"{self.__name__}.get_or_create() needs a name: "
                             f"{self.__name__}.options(name=...).get_or_create(...)")
        merged = dict(self._options, get_if_exists=True)
        return ActorClass._with(self, merged).remote(*args, **kwargs)

    @classmethod
    def _with(cls, base, options):
        c = cls.__new__(cls)
        c.__dict__.update(base.__dict__)
        c._options = options
        return c

    def remote(self, *args, **kwargs):
        """Creates the actor (placed by the node; it starts in the background) and
        returns its handle at once. Arguments its constructor cannot take are a
        TypeError here, before any process starts."""
        if self._init_sig is not None:
            try:
                self._init_sig.bind(None, *args, **kwargs)
            except TypeError as e:
                raise TypeError(f"{self.__name__}.remote(): {e}") from None
        rt = runtime()
        o = self._options
        if o.get("get_if_exists") and o.get("name"):
            try:
                return get_actor(o["name"], o.get("namespace"))
            except ValueError:
                pass
        opts = _ffi.ActorOptions()
        lib.tr_actor_options_init(byref(opts))
        opts.num_cpus = float(o.get("num_cpus") or 0)
        opts.num_gpus = float(o.get("num_gpus") or 0)
        res = {**(o.get("resources") or {}), **remote_function.memory_resource(o),
               **_placement.affinity_resources(o, f"actor {self._cls.__name__}")}
        keep = []
        if res:
            arr = (_ffi.Resource * len(res))()
            for i, (k, v) in enumerate(res.items()):
                kb = str(k).encode()
                keep.append(kb)
                arr[i].name, arr[i].quantity = kb, float(v)
            opts.resources, opts.n_resources = arr, len(res)
            keep.append(arr)
        if o.get("name"):
            opts.name = str(o["name"]).encode()
        if o.get("namespace") is not None:  # (its name's; else the job's)
            opts.ns = str(o["namespace"]).encode()
            keep.append(opts.ns)
        label = self._cls.__name__.encode(errors="replace")[:200]  # (status and metrics)
        keep.append(label)
        opts.class_label = label
        opts.max_restarts = int(o.get("max_restarts") or 0)
        # a call in flight when the actor's process dies goes again to the restarted one
        opts.max_task_retries = int(o.get("max_task_retries") or 0)
        opts.detached = 1 if o.get("lifetime") == "detached" else 0  # outlives its driver
        # Ray's default: 1000 for an async actor (every method an async def), else 1
        opts.max_concurrency = o.get("max_concurrency") or (
            ASYNC_DEFAULT_CONCURRENCY if is_async_class(self._cls) else 1)
        if o.get("name"):  # (what get_actor's handle needs to call it as this one does)
            bdata = _binding_data(self._cls.__name__, self._methods, self._returns,
                                  self._retries)
            keep.append(bdata)
            opts.binding_data = bdata
        _placement.apply_options(o, opts, f"actor {self._cls.__name__}")
        opts.concurrency_groups, opts.n_concurrency_groups = _groups_struct(
            self._cls.__name__, o.get("concurrency_groups"), self._method_groups, keep)
        extra = {}
        if o.get("max_task_retries"):  # (its methods' retry_exceptions: the worker's)
            extra["max_task_retries"] = o["max_task_retries"]
        # top-level refs: the constructor gets their values (Ray's); refs nested in the
        # arguments (and actor handles) stay refs, alive while the arguments' object is
        top = ([i for i, x in enumerate(args) if isinstance(x, _runtime.ObjectRef)],
               [k for k, x in kwargs.items() if isinstance(x, _runtime.ObjectRef)])
        if top[0] or top[1]:
            extra["resolve"] = top
        parts, total, nested = _serial.dumps((self._cls, args, kwargs, extra) if extra else
                                             (self._cls, args, kwargs))
        if total > ray_constants.FUNCTION_SIZE_WARN_THRESHOLD and \
                not getattr(self, "_size_checked", False):
            # (large: the class itself, or its arguments? Ray's limit is the class's)
            remote_function.check_size(_serial.dumps(self._cls)[1], self._cls.__name__,
                                       "actor")
            self._size_checked = True
        ctor_obj = None
        if nested:  # (an object that keeps them alive: the worker reads it, borrowing them)
            ctor_obj = _runtime.put_parts(parts, total, nested)
            payload = _runtime.OBJECT_ARGS + ctor_obj.binary()
        else:
            payload = _serial.join(parts, total)
        env = {**_runtime.job_env_vars(), **((o.get("runtime_env") or {}).get("env_vars") or {})}
        if env:  # set in the worker before the class is unpickled (its module imported)
            parts, total, _ = _serial.dumps((ENV, env, payload))
            payload = _serial.join(parts, total)
        aid = ActorId()
        rc = lib.tr_actor_create(rt, PY_CLASS, byref(opts), payload, len(payload), byref(aid))
        if rc == _errors.EEXIST and o.get("get_if_exists") and o.get("name"):
            return get_actor(o["name"], o.get("namespace"))  # (another made it meanwhile)
        check(rc, f"creating actor {self._cls.__name__}")
        handle = ActorHandle(aid, self._cls.__name__, self._methods, self._returns,
                             retries=self._retries)
        handle._checks = self._checks
        if self._decorators:
            handle._decorators = self._decorators
        if ctor_obj is not None:
            _keep_ctor_obj(handle, ctor_obj, opts.max_restarts != 0)
        else:
            _prune_ctor_objs()
        if not o.get("name") and o.get("lifetime") != "detached":
            handle._scope = _Scope(rt)  # ended with its last handle
        return handle

    def bind(self, *args, **kwargs):
        """The class bound in a graph (Ray's): a dag.ClassNode, whose classic execution
        creates the actor; its methods bind on it (``node.method.bind(...)``)."""
        return ClassNode(self, args, kwargs, self._options)

    def __call__(self, *args, **kwargs):
        raise TypeError(f"actor class {self.__name__} cannot be instantiated directly: use "
                        f"{self.__name__}.remote()")


# Constructor arguments with refs in them live in an object (tr_put_refs keeps the refs
# alive as long as it) that the worker reads: {actor id bytes: [the object, the ref of a
# __ray_ready__ call (the constructor ran once it is in), kept after that]}. An actor that
# cannot restart lets it go once it answered; one that can (its restart runs the
# constructor again) keeps it until it is killed for good, or has answered and its last
# handle here went uncopied; all go at shutdown. Looked at as actors are made and
# handles dropped.
_ctor_objs = {}
_ctor_lock = threading.Lock()


def _keep_ctor_obj(handle, obj, restartable):
    ready = ActorMethod(handle, "__ray_ready__").remote()
    with _ctor_lock:
        _ctor_objs[handle._actor_id()] = [obj, ready, restartable]
    _prune_ctor_objs()


def _prune_ctor_objs():
    with _ctor_lock:
        if not _ctor_objs:
            return
        items = list(_ctor_objs.items())
    done = [k for k, (_, ready, kept) in items if not kept and _runtime.is_done(ready)]
    with _ctor_lock:
        for k in done:
            _ctor_objs.pop(k, None)


def _forget_ctor_obj(aid):
    """The actor of id bytes aid ends with its last handle: its arguments go once its
    constructor has run (no restart after that)."""
    with _ctor_lock:
        e = _ctor_objs.get(aid)
        if e is not None:
            e[2] = False
    _prune_ctor_objs()


@_runtime.on_shutdown
def _drop_ctor_objs():
    _ctor_objs.clear()


class _Scope:
    """The actor of an ActorHandle that Cls.remote made here ends with its last handle,
    here or anywhere, as Ray counts an actor's handles: C counts them (tr_actor_handle).
    The C handle is made as the ActorHandle is first pickled (passed to another actor or
    task, put in an object): each copy holds it as a borrowed ref, and the actor ends once
    no copy is left in any process, object or call in flight. An ActorHandle never
    pickled makes it as it goes, and lets go at once: its actor ends now."""
    __slots__ = ("rt", "token")

    def __init__(self, rt):
        self.rt = rt
        self.token = None  # the C handle, an ObjectRef, from the first pickle


def _c_handle(aid):
    out = Ref()
    check(lib.tr_actor_handle(runtime(), aid, byref(out)), "an actor's handle")
    return _runtime.ObjectRef(out)


class ActorHandle:
    """An actor: ``handle.method.remote(...)`` calls it; pickles, so other actors can call
    it too."""
    _scope = None  # Cls.remote's handle of an actor that ends with its handles (_Scope)
    _checks = {}  # {method: its arguments' check}: the class's (its creator's handle)
    _decorators = {}  # {method: its __ray_invocation_decorator__} (its creator's handle)
    _token = None  # a copy's hold on its actor's C handle (an ObjectRef), or None

    def __init__(self, aid, class_name, methods, returns=None, token=None, retries=None):
        self._id = aid
        self._class_name = class_name
        self._methods = methods  # None: any name (a handle found by name)
        self._returns = returns or {}  # {method: its @troupe.method num_returns, not 1}
        self._retries = retries or {}  # {method: its @troupe.method max_task_retries}
        if token is not None:
            self._token = token

    def __del__(self):
        sc = self._scope
        try:
            if sc is None or sc.token is not None or not _runtime.is_initialized() or \
                    runtime() is not sc.rt:
                return  # (a copy, a named actor, or copies that hold the C handle)
            out = Ref()  # (never copied: made and let go, the actor ends now)
            if lib.tr_actor_handle(sc.rt, self._id, byref(out)) == 0:
                lib.tr_ref_release(sc.rt, out)
            if _ctor_objs:
                _forget_ctor_obj(bytes(self._id.b))
        except Exception:
            pass

    def __getattr__(self, name):
        if name == "__ray_terminate__":  # (Ray's: ends the actor after the calls before)
            return ActorMethod(self, EXIT, 1)
        if name in BUILTIN_METHODS:
            return ActorMethod(self, name, 1)
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        if self._methods is not None and name not in self._methods:
            raise AttributeError(f"actor class {self._class_name} has no method {name!r}")
        # kept as the handle's attribute (the next lookup finds it at once), holding the
        # handle weakly, as Ray's do: no cycle keeps an actor alive past its last handle
        m = self.__dict__[name] = ActorMethod(self, name, self._returns.get(name, 1),
                                              weak=True, retries=self._retries.get(name),
                                              check=self._checks.get(name),
                                              decorator=self._decorators.get(name))
        return m

    def _actor_id(self):
        return bytes(self._id.b)

    def __dir__(self):  # (Ray's: the methods, and its built-in ones)
        return sorted(self._methods or ()) + ["__init__", "__ray_call__", "__ray_ready__",
                                              "__ray_terminate__"]

    def __reduce__(self):
        sc = self._scope
        if sc is not None and sc.token is None:  # its first copy: the C handle they hold
            sc.token = _c_handle(self._id)
        token = sc.token if sc is not None else self._token
        return (_rebuild_handle, (bytes(self._id.b), self._class_name, self._methods,
                                  self._returns or None, token, self._retries or None,
                                  self._checks or None, self._decorators or None))

    def __hash__(self):
        return hash(bytes(self._id.b))

    def __eq__(self, other):
        return isinstance(other, ActorHandle) and bytes(other._id.b) == bytes(self._id.b)

    def __repr__(self):
        return f"Actor({self._class_name}, {bytes(self._id.b).hex()})"


def _rebuild_handle(b, class_name, methods, returns=None, token=None, retries=None,
                    checks=None, decorators=None):
    aid = ActorId()
    ctypes.memmove(aid.b, b, 16)
    handle = ActorHandle(aid, class_name, methods, returns, token, retries)
    if checks:
        handle._checks = checks
    if decorators:  # (its methods' __ray_invocation_decorator__, as its creator's handle)
        handle._decorators = decorators
    return handle


class ActorMethod:
    _bind_options = {}  # the options given (options()), a bound node's get_options()

    def __init__(self, handle, name, num_returns=1, group=None, weak=False, retries=None,
                 check=None, decorator=None):
        self._hard = None if weak else handle  # (weak: the handle's own attribute)
        self._weak = weakref.ref(handle) if weak else None
        self._name = name
        self._num_returns = num_returns
        self._group = group  # a call's own concurrency group (C's "method@group")
        self._retries = retries  # its own max_task_retries (None: the actor's)
        self._check = check  # its arguments' check (remote_function.ArgCheck), or None
        # Ray's __ray_invocation_decorator__: decorator(invoke)(args, kwargs) is remote()'s
        self._decorator = decorator
        self._plain = num_returns == 1 and group is None and retries is None and \
            decorator is None
        if self._plain and weak and _fast is not None:
            # remote() of plain calls in C (_fast.Remote). Only for a handle's own methods
            # (weak): the two hold each other, and a method that held its handle would
            # keep the actor alive until the collector found them.
            r = self.remote = _fast.Remote(self, handle._id, name, handle._class_name,
                                           -1 if check is None else check.lo,
                                           -1 if check is None else check.hi, self._weak)
            r.__name__ = r.__qualname__ = "remote"  # (as the method's: inspect, repr)
            r.__doc__ = ActorMethod.remote.__doc__
            r.__wrapped__ = types.MethodType(ActorMethod.remote, self)

    @property
    def _handle(self):
        """The actor's handle; a method of a handle gone is Ray's RuntimeError (the handle
        of `Cls.remote().method.remote()` is gone before the call)."""
        h = self._hard
        if h is None:
            h = self._weak()
            if h is None:
                raise RuntimeError("Lost reference to actor. Actor handles must be stored as "
                                   "variables, e.g. `actor = MyActor.remote()` before calling "
                                   "methods.")
        return h

    def remote(self, *args, **kwargs):
        """Calls the method: its ObjectRef at once (num_returns k > 1: a list of k refs;
        0: None, the call runs all the same). (A plain method's is its _fast.Remote where
        the extension is used, which takes the calls of scalars and gives the others
        here.)"""
        if self._plain:  # (the hot path)
            c = self._check
            if c is not None and (kwargs or not c.lo <= len(args) <= c.hi):
                c.check(args, kwargs)  # (Ray's TypeError of arguments its signature refuses)
            h = self._hard or self._handle
            if _fast is not None:  # (builtin scalars in C; None: not taken)
                ref = _fast.call_one(h._id, self._name, args, kwargs, h._class_name)
                if ref is not None:
                    return ref
            return _runtime.call_one(h._id, self._name, args, kwargs, h._class_name)
        if self._decorator is not None:  # (what it returns: the call's ref, and more)
            return self._decorator(lambda a, kw: self._invoke(tuple(a), dict(kw)))(args,
                                                                                  kwargs)
        return self._invoke(args, kwargs)

    def _invoke(self, args, kwargs):
        """The general path of remote() (what it takes after a decorator)."""
        c = self._check
        if c is not None and (kwargs or not c.lo <= len(args) <= c.hi):
            c.check(args, kwargs)
        name = self._name if self._group is None else f"{self._name}@{self._group}"
        return call(self._handle, name, args, kwargs, self._num_returns, self._retries)

    def bind(self, *args, **kwargs):
        """The method bound in a graph (troupe.dag): a node, or with num_returns k > 1 a
        tuple of k nodes, one per value (Ray's)."""
        if self._num_returns in _runtime.GENERATOR_MODES:
            raise ValueError(f"{self._handle._class_name}.{self._name}.bind: a generator "
                             f"method (num_returns={self._num_returns!r}) is not a node")
        node = ClassMethodNode(self._handle, self._name, args, kwargs, self._num_returns,
                               self._bind_options)
        if self._num_returns == 1:
            return node
        if self._num_returns == 0:
            raise ValueError(f"{self._handle._class_name}.{self._name}.bind: a method "
                             f"with num_returns=0 gives no node to bind")
        return tuple(ClassMethodOutputNode(node, i) for i in range(self._num_returns))

    def options(self, **options):
        """Ray's per-call options: num_returns, concurrency_group and max_task_retries
        honoured (the method with them; retries: when the actor's worker dies with the
        call in flight), the others ignored with a warning once; an option Ray lacks is a
        TypeError."""
        bad = set(options) - set(_METHOD_OPTIONS) - {"name"}
        if bad:
            raise TypeError(f"unknown options of a method call: {sorted(bad)}")
        _check_method_options(f"{self._handle._class_name}.{self._name}.options", options,
                              2)
        m = ActorMethod(self._handle, self._name,
                        options.get("num_returns", self._num_returns),
                        options.get("concurrency_group", self._group),
                        retries=options.get("max_task_retries", self._retries),
                        check=self._check, decorator=self._decorator)
        m._bind_options = dict(self._bind_options, **options)
        return m

    def __reduce__(self):  # (Ray's: a method passed on goes with its actor's handle)
        return (_rebuild_method, (self._handle, self._name, self._num_returns, self._group,
                                  self._retries, self._check, self._decorator))

    def __call__(self, *args, **kwargs):
        raise TypeError(f"actor methods cannot be called directly: use "
                        f".{self._name}.remote()")

    def __dir__(self):
        return ["bind", "options", "remote"]


def _rebuild_method(handle, name, num_returns, group, retries, check=None, decorator=None):
    return ActorMethod(handle, name, num_returns, group, retries=retries, check=check,
                       decorator=decorator)


def call(handle, method, args, kwargs, num_returns=1, retries=None):
    """Sends a method call; returns the ref of its result at once (a list of num_returns
    refs for num_returns > 1, None for 0, an ObjectRefGenerator for "streaming");
    retries: its own max_task_retries (None: the actor's)."""
    return _runtime.call(handle._id, method, args, kwargs,
                         f"calling {handle._class_name}.{method}", num_returns, retries)


def _binding_data(cls_name, methods, returns, retries=None):
    """JSON kept with a named actor (tr_actor_options.binding_data, up to 4096 bytes) for
    the handles get_actor makes anywhere: its class name, methods, their num_returns and
    max_task_retries (a long method list is left out: such a handle then takes any method
    name)."""
    meta = {"class": cls_name[:200], "returns": returns}
    if retries:
        meta["retries"] = retries
    full = json.dumps(dict(meta, methods=sorted(methods)), separators=(",", ":")).encode()
    if len(full) <= 4096:
        return full
    part = json.dumps(meta, separators=(",", ":")).encode()
    return part if len(part) <= 4096 else None


def _found_meta(aid):
    """(class name, methods, returns) from a Python actor's binding data; None if it has
    none or it does not read as ours."""
    out = ctypes.c_void_p()
    if lib.tr_actor_binding_data(runtime(), aid, byref(out)) or not out.value:
        return None
    try:
        meta = json.loads(ctypes.string_at(out.value))
    except ValueError:
        return None
    finally:
        lib.tr_free(out)
    if not isinstance(meta, dict) or not isinstance(meta.get("returns"), dict):
        return None
    returns = {str(k): v for k, v in meta["returns"].items()
               if v in ("streaming", "dynamic") or (type(v) is int and v >= 0)}
    retries = meta.get("retries")
    retries = {str(k): v for k, v in retries.items() if type(v) is int and v >= -1} \
        if isinstance(retries, dict) else {}
    methods = meta.get("methods")
    methods = frozenset(map(str, methods)) if isinstance(methods, list) else None
    return str(meta.get("class") or "Actor"), methods, returns, retries


def get_actor(name, namespace=None):
    """The handle of the actor created with options(name=name) in namespace (None: the
    job's, troupe.init's namespace); ValueError if none (Ray's)."""
    if namespace is not None and not isinstance(namespace, str):  # (Ray's checks)
        raise TypeError(f"namespace must be None or a string, got {type(namespace).__name__}")
    if namespace == "":
        raise ValueError("namespace must not be an empty string")
    aid = ActorId()
    rc = lib.tr_actor_get_in(runtime(), None if namespace is None else str(namespace).encode(),
                             str(name).encode(), byref(aid))
    if rc == _errors.ENOTFOUND:  # (Ray's class and words)
        where = "" if namespace is None else f" in namespace '{namespace}'"
        raise _errors.error(rc, f"Failed to look up actor with name '{name}'{where}",
                            ValueError)
    check(rc, f"get_actor({name!r})")
    det = _ffi.ActorDetails()
    lib.tr_actor_details_init(byref(det))
    cls = "Actor"
    if lib.tr_actor_info(runtime(), aid, byref(det)) == 0:
        cls = det.class_name.decode(errors="replace")
    if cls == PY_CLASS.decode():  # (its methods and their num_returns, as its creator's)
        meta = _found_meta(aid)
        if meta is not None:
            return ActorHandle(aid, meta[0], meta[1], meta[2], retries=meta[3])
        cls = "Actor"
    return ActorHandle(aid, cls, None)


def kill(actor, *, no_restart=True):
    """Kills the actor's process at once; its pending calls raise ActorDiedError."""
    if not isinstance(actor, ActorHandle):
        raise TypeError(f"troupe.kill wants an actor handle, got {type(actor).__name__}")
    check(lib.tr_actor_kill(runtime(), actor._id, 1 if no_restart else 0), "troupe.kill")
    if no_restart:  # (dead for good: its constructor never runs again)
        with _ctor_lock:
            _ctor_objs.pop(actor._actor_id(), None)


def actor_pid(actor):
    """The actor's worker process id (0 while none runs)."""
    det = _ffi.ActorDetails()
    lib.tr_actor_details_init(byref(det))
    check(lib.tr_actor_info(runtime(), actor._id, byref(det)), "actor info")
    return det.pid


def exit_actor():
    """Inside an actor's method: ends the actor for good (no restart) once the method
    returns control; the call that ran it, and calls not yet run, raise ActorDiedError
    in their callers (as Ray's ray.actor.exit_actor). TypeError outside an actor."""
    if _runtime.current_actor_id() is None:
        raise TypeError("exit_actor API is called on a non-actor worker: exit_actor() is "
                        "called inside an actor's method (use troupe.kill(handle) "
                        "elsewhere)")
    _runtime.request_exit()  # (caught, it ends the actor all the same, as Ray's)
    raise ActorExit("exit_actor() was called")


# ------------------------------------------------------------------ the node and context

def _node_status():
    """The node's status (tr_node_status's JSON, docs/NODE.md) as a dict."""
    out = ctypes.c_void_p()
    check(lib.tr_node_status(runtime(), byref(out)), "node status")
    try:
        return json.loads(ctypes.string_at(out.value).decode())
    finally:
        lib.tr_free(out)


def _hex_id(text, n):
    """A stable hex id of n bytes for text (Ray's ids are hex: node 28 bytes, job 4)."""
    return hashlib.sha224(text.encode()).hexdigest()[:2 * n]


def _resources(cpus, gpus, custom):
    """CPU, GPU and custom resources; custom as a dict, or as a cluster node's status says
    them ("name=amount,...")."""
    out = {"CPU": float(cpus or 0), "GPU": float(gpus or 0)}
    if isinstance(custom, str):
        custom = dict(kv.split("=", 1) for kv in custom.split(",") if "=" in kv)
    for k, v in (custom or {}).items():
        out[k] = out.get(k, 0.0) + float(v)
    return out


def _positive(d):
    return {k: v for k, v in d.items() if v > 0}  # (Ray lists no resource it has none of)


def cluster_resources():
    """The resources of the cluster's nodes in all (this node's, out of a cluster):
    {"CPU": 4.0, "GPU": 1.0, "object_store_memory": ..., custom ones}."""
    st = _node_status()
    nodes_ = [n for n in (st.get("cluster") or {}).get("nodes") or [] if n.get("alive")
              and not n.get("client")]
    if nodes_:
        total = {}
        for n in nodes_:
            for k, v in _resources(n.get("cpus"), n.get("gpus"), n.get("resources")).items():
                total[k] = total.get(k, 0.0) + v
    else:
        total = {k: float(v) for k, v in (st.get("resources_total") or {}).items()}
    total["object_store_memory"] = float((st.get("object_store") or {}).get("capacity", 0))
    return _positive(total)


def available_resources():
    """The resources free now on this node (Ray's available_resources; in a cluster,
    troupe knows only this node's free ones)."""
    st = _node_status()
    free = {k: float(v) for k, v in (st.get("resources_available") or {}).items()}
    for k, v in (st.get("resources_in_tasks") or {}).items():  # held by running tasks
        if k in free:
            free[k] = max(0.0, free[k] - float(v))
    for k, v in (st.get("resources_idle_in_tasks") or {}).items():  # GPUs idle task
        free[k] = free.get(k, 0.0) + float(v)  # workers give up to whoever waits for them
    store = st.get("object_store") or {}
    free["object_store_memory"] = float(store.get("capacity", 0) - store.get("bytes_used", 0))
    return _positive(free)


def nodes():
    """The cluster's nodes as Ray's ray.nodes() lists them (NodeID, Alive, Resources,
    NodeManagerAddress, ...): this node alone out of a cluster."""
    st = _node_status()
    cl = st.get("cluster") or {}
    out = []
    for n in cl.get("nodes") or []:
        addr = str(n.get("address", ""))
        out.append({"NodeID": _hex_id(str(n.get("id", addr)), 28),
                    "Alive": bool(n.get("alive")), "alive": bool(n.get("alive")),
                    "NodeManagerAddress": addr.rpartition(":")[0] or addr,
                    "NodeManagerHostname": addr.rpartition(":")[0] or addr,
                    "NodeName": addr, "IsHead": bool(n.get("head")),
                    "Resources": _positive(_resources(n.get("cpus"), n.get("gpus"),
                                                      n.get("resources"))),
                    "Labels": {}})
    if not out:
        addr = str(st.get("address", ""))
        out.append({"NodeID": _node_id(st), "Alive": True, "alive": True,
                    "NodeManagerAddress": "127.0.0.1", "NodeManagerHostname": os.uname()[1],
                    "NodeName": addr, "IsHead": True, "ObjectStoreSocketName": addr,
                    "Resources": _positive({k: float(v) for k, v in
                                            (st.get("resources_total") or {}).items()}),
                    "Labels": {}})
    return out


def _node_id(st):
    cl = st.get("cluster") or {}
    return _hex_id(str(cl.get("id") or st.get("address", "")), 28)


def _node_of(node_id):
    """(whether node_id is this node's, the resource only its node has: "node:<IP>", or
    None where no live node has that id): _placement's NodeAffinitySchedulingStrategy."""
    if node_id == _node_id(_node_status()):
        return True, None
    for n in nodes():
        if n["NodeID"] == node_id and n["Alive"]:
            return False, "node:" + n["NodeManagerAddress"]
    return False, None


_placement.set_node_resolver(_node_of)


class RuntimeContext:
    """Where this code runs (Ray's ray.runtime_context.RuntimeContext): ids as hex
    text. The job is the node's session: every driver and actor of one embedded node
    has its id (troupe has no job of its own per driver yet)."""

    def get_job_id(self):
        return _hex_id(_runtime.node_address(), 4)

    def get_node_id(self):
        return _node_id(_node_status())

    def get_worker_id(self):
        return _hex_id(f"{_runtime.node_address()}:{os.getpid()}", 28)

    def get_actor_id(self):
        """The actor's id (32 hex digits) in an actor's method; None in a driver."""
        aid = _runtime.current_actor_id()
        return aid.hex() if aid is not None else None

    def get_task_id(self):
        return None  # (a method call has no id of its own that troupe shows)

    def get_actor_name(self):
        """The actor's name ("" if it has none) in an actor; None in a driver."""
        det = self._details()
        # (the node keeps a name of a namespace as namespace, 0x1f, name)
        return None if det is None else det.name.decode(errors="replace").split("\x1f")[-1]

    @property
    def namespace(self):
        return _runtime.namespace()  # (the job's: an anonymous one when init named none)

    @property
    def current_actor(self):
        """A handle of the actor this code runs in (RuntimeError in a driver)."""
        aid = _runtime.current_actor_id()
        if aid is None:
            raise RuntimeError("current_actor is only available in an actor")
        det = self._details()
        cls = det.class_name.decode(errors="replace") if det is not None else "Actor"
        return _rebuild_handle(aid, cls if cls != PY_CLASS.decode() else "Actor", None)

    def was_current_task_cancelled(self):
        """Whether the task or method running on this thread was canceled (troupe.cancel):
        a method of a sync actor is not interrupted (Ray's rule) and may poll this."""
        return _runtime.current_call_canceled()

    is_canceled = was_current_task_cancelled  # (Ray's newer name)

    # Ray's properties of the same ids
    job_id = property(lambda self: self.get_job_id())
    node_id = property(lambda self: self.get_node_id())
    worker_id = property(lambda self: self.get_worker_id())
    actor_id = property(lambda self: self.get_actor_id())
    task_id = property(lambda self: self.get_task_id())

    def was_current_actor_reconstructed(self):
        det = self._details()
        return bool(det is not None and det.restarts > 0)

    def get_accelerator_ids(self):
        """{"GPU": the GPU ids this actor (or task) was given, as CUDA_VISIBLE_DEVICES
        names them}: none in a driver."""
        if _runtime.current_actor_id() is None and os.environ.get("TROUPE_ROLE") != "worker":
            return {"GPU": []}  # (a task's worker was started with its pool's GPUs)
        ids = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        return {"GPU": [x for x in ids.split(",") if x]}

    def get_placement_group_id(self):
        return None

    def get(self):
        return {"job_id": self.get_job_id(), "node_id": self.get_node_id(),
                "actor_id": self.get_actor_id(), "namespace": self.namespace}

    def _details(self):
        aid = _runtime.current_actor_id()
        if aid is None:
            return None
        det = _ffi.ActorDetails()
        lib.tr_actor_details_init(byref(det))
        a = ActorId()
        ctypes.memmove(a.b, aid, 16)
        if lib.tr_actor_info(runtime(), a, byref(det)) != 0:
            return None
        return det


def get_gpu_ids():
    """Ray's ray.get_gpu_ids(): the GPUs this worker (an actor's, or a task's) was given,
    as CUDA_VISIBLE_DEVICES names them (ints where they are numbers); [] in a driver."""
    ids = get_runtime_context().get_accelerator_ids()["GPU"]
    return [int(x) if x.isdigit() else x for x in ids]


def get_runtime_context():
    """Ray's ray.get_runtime_context(): job, node, worker and actor ids, the actor's name,
    its GPUs."""
    runtime()  # (TroupeError before troupe.init)
    return RuntimeContext()
