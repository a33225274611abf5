"""Actors: @troupe.remote classes, their handles and method calls (the top of the user's
API: a handle's method also binds into a compiled graph, troupe.dag)."""
import ctypes
import inspect

from . import _errors, _ffi, _runtime, _serial
from ._errors import check
from ._ffi import ActorId, byref, lib
from ._runtime import runtime
from .dag import ClassMethodNode

PY_CLASS = b"troupe.py"      # the one C class every Python actor is (its dispatch runs
                             # the Python method of the call's name: _worker.py)

_ACTOR_OPTIONS = {"name", "num_cpus", "num_gpus", "resources", "max_restarts",
                  "get_if_exists"}
# Ray's, taken so that its code runs, but troupe does not do what they ask: a warning
_IGNORED_OPTIONS = {"namespace", "lifetime", "max_concurrency", "max_task_retries",
                    "runtime_env", "scheduling_strategy", "memory"}


def remote(*args, **options):
    """``@troupe.remote`` or ``@troupe.remote(num_cpus=1, ...)`` on a class: its instances
    become actors, each a worker process (``Cls.remote(...)``)."""
    if len(args) == 1 and not options and callable(args[0]):
        return _make(args[0], {})
    if args:
        raise TypeError("troupe.remote takes a class, or keyword options")
    return lambda obj: _make(obj, options)


def _make(obj, options):
    if not inspect.isclass(obj):
        raise TypeError(f"troupe.remote: {obj!r} is not a class (troupe runs actors; "
                        f"remote functions are not supported)")
    _check_options(options, 3)  # (from the user's @remote(...) line: through its lambda)
    return ActorClass(obj, options)


def _check_options(options, stacklevel):
    """Refuses an option Ray lacks; warns (once) of one troupe ignores. stacklevel: the
    user's frame, counted from this function's caller."""
    bad = set(options) - _ACTOR_OPTIONS - _IGNORED_OPTIONS
    if bad:
        raise TypeError(f"unknown actor options: {sorted(bad)}")
    _errors.ignored("an actor's options", set(options) & _IGNORED_OPTIONS, stacklevel + 1)


def _methods_of(cls):
    return frozenset(n for n, v in inspect.getmembers(cls)
                     if callable(v) and not (n.startswith("__") and n.endswith("__")))


class ActorClass:
    def __init__(self, cls, options):
        self._cls = cls
        self._options = dict(options)
        self._methods = _methods_of(cls)
        self.__name__ = cls.__name__
        self.__doc__ = cls.__doc__

    def options(self, **options):
        _check_options(options, 2)
        merged = dict(self._options)
        merged.update(options)
        return ActorClass._with(self, merged)

    @classmethod
    def _with(cls, base, options):
        c = cls.__new__(cls)
        c.__dict__.update(base.__dict__)
        c._options = options
        return c

    def remote(self, *args, **kwargs):
        """Creates the actor (placed by the node; it starts in the background) and
        returns its handle at once."""
        rt = runtime()
        o = self._options
        if o.get("get_if_exists") and o.get("name"):
            try:
                return get_actor(o["name"])
            except ValueError:
                pass
        opts = _ffi.ActorOptions()
        lib.tr_actor_options_init(byref(opts))
        opts.num_cpus = float(o.get("num_cpus") or 0)
        opts.num_gpus = float(o.get("num_gpus") or 0)
        res = o.get("resources") or {}
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
        opts.max_restarts = int(o.get("max_restarts") or 0)
        a, kw, refs = _runtime.args_with_refs(args, kwargs)
        if refs:
            raise TypeError("ObjectRefs as constructor arguments are not supported: pass "
                            "the value (troupe.get) or give the ref to a method")
        parts, total, _ = _serial.dumps((self._cls, a, kw))
        payload = _serial.join(parts, total)
        aid = ActorId()
        check(lib.tr_actor_create(rt, PY_CLASS, byref(opts), payload, len(payload), byref(aid)),
              f"creating actor {self._cls.__name__}")
        return ActorHandle(aid, self._cls.__name__, self._methods)

    def bind(self, *args, **kwargs):
        raise TypeError("binding an actor class in a graph is not supported: create the "
                        "actor, then bind its methods")

    def __call__(self, *args, **kwargs):
        raise TypeError(f"actor class {self.__name__} cannot be instantiated directly: use "
                        f"{self.__name__}.remote()")


class ActorHandle:
    """An actor: ``handle.method.remote(...)`` calls it; pickles, so other actors can call
    it too."""

    def __init__(self, aid, class_name, methods):
        self._id = aid
        self._class_name = class_name
        self._methods = methods  # None: any name (a handle found by name)

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        if self._methods is not None and name not in self._methods:
            raise AttributeError(f"actor class {self._class_name} has no method {name!r}")
        return ActorMethod(self, name)

    def _actor_id(self):
        return bytes(self._id.b)

    def __reduce__(self):
        return (_rebuild_handle, (bytes(self._id.b), self._class_name, self._methods))

    def __hash__(self):
        return hash(bytes(self._id.b))

    def __eq__(self, other):
        return isinstance(other, ActorHandle) and bytes(other._id.b) == bytes(self._id.b)

    def __repr__(self):
        return f"Actor({self._class_name}, {bytes(self._id.b).hex()})"


def _rebuild_handle(b, class_name, methods):
    aid = ActorId()
    ctypes.memmove(aid.b, b, 16)
    return ActorHandle(aid, class_name, methods)


class ActorMethod:
    def __init__(self, handle, name):
        self._handle = handle
        self._name = name

    def remote(self, *args, **kwargs):
        return call(self._handle, self._name, args, kwargs)

    def bind(self, *args, **kwargs):
        return ClassMethodNode(self._handle, self._name, args, kwargs)

    def options(self, **options):
        """Ray's per-call options (num_returns, ...): all ignored here, with a warning."""
        _errors.ignored("a method's options", options, 2)
        return self

    def __call__(self, *args, **kwargs):
        raise TypeError(f"actor methods cannot be called directly: use "
                        f".{self._name}.remote()")


def call(handle, method, args, kwargs):
    """Sends a method call; returns the ref of its result at once."""
    return _runtime.call(handle._id, method, args, kwargs,
                         f"calling {handle._class_name}.{method}")


def get_actor(name, namespace=None):
    """The handle of the actor created with options(name=name); ValueError if none (a
    node's actors share one namespace: namespace is ignored)."""
    if namespace is not None:
        _errors.ignored("get_actor", ["namespace"], 2)
    aid = ActorId()
    rc = lib.tr_actor_get(runtime(), str(name).encode(), byref(aid))
    if rc == _errors.ENOTFOUND:  # (Ray's class and words)
        raise _errors.error(rc, f"Failed to look up actor with name '{name}'", ValueError)
    check(rc, f"get_actor({name!r})")
    det = _ffi.ActorDetails()
    lib.tr_actor_details_init(byref(det))
    cls = "Actor"
    if lib.tr_actor_info(runtime(), aid, byref(det)) == 0:
        cls = det.class_name.decode(errors="replace")
    return ActorHandle(aid, cls if cls != PY_CLASS.decode() else "Actor", None)


def kill(actor, *, no_restart=True):
    """Kills the actor's process at once; its pending calls raise ActorDiedError."""
    if not isinstance(actor, ActorHandle):
        raise TypeError(f"troupe.kill wants an actor handle, got {type(actor).__name__}")
    check(lib.tr_actor_kill(runtime(), actor._id, 1 if no_restart else 0), "troupe.kill")


def actor_pid(actor):
    """The actor's worker process id (0 while none runs)."""
    det = _ffi.ActorDetails()
    lib.tr_actor_details_init(byref(det))
    check(lib.tr_actor_info(runtime(), actor._id, byref(det)), "actor info")
    return det.pid
