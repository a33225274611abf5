"""Remote functions (Ray's tasks): ``@troupe.remote def f(...)``, ``f.remote(...)`` and
``f.options(...)``, over the C task API (tr_task_submit: a pool of warm worker
processes the node keeps, placed by resources, retried when a worker dies).

A task is one C call of the pool's class; its C function name is "py:<module>.<qualname>"
(what C's errors name), and every task runs the worker's one dispatch
(tr_config_add_function(cfg, NULL, ...), troupe._worker), which finds the Python function
by the digest its payload starts with:

  TASK_MAGIC + digest (16 bytes) + u32 n + the function's pickled bytes (n of them) +
  the arguments (as a method call's: _runtime.encode_args)

The function is pickled once per RemoteFunction (cloudpickle where it must go by value);
its bytes ride along with each call when they are small (a worker that has loaded them
before keeps the function by its digest and skips them), else (n = FN_IN_REF) they are
put in the store once and their object goes as the task's last ref.
"""
import ctypes
import functools
import hashlib
import inspect
import numbers
import struct
import warnings

from . import _errors, _ffi, _placement, _runtime, _serial, dag, ray_constants
from ._errors import check
from ._ffi import Ref, byref, lib
from ._runtime import ObjectRef, runtime

_fast = _runtime.fast

TASK_MAGIC = b"TRPT"
HEAD = struct.Struct("<4s16sI")  # magic, digest, n (the function's bytes that follow)
FN_IN_REF = 0xFFFFFFFF           # n: the function's bytes are the task's last ref
FN_INLINE_MAX = 4 << 10          # larger pickled functions go through the store (measured:
                                 # a task with 14.8 KiB of function inline took ~2 us more
                                 # than with 0.5 KiB; one with its 100 KiB in the store, none)

# Ray's task options: honoured
_TASK_OPTIONS = {"num_cpus", "num_gpus", "memory", "resources", "max_retries", "num_returns",
                 "name",
                 "placement_group", "placement_group_bundle_index", "retry_exceptions",
                 "runtime_env"}
DEFAULT_MAX_RETRIES = 3  # Ray's max_retries of a task (tr_task_options_init's too)
# Ray's, taken so that its code runs, but not done: a warning once when one is given a
# value other than Ray's defaults (listed)
_IGNORED_OPTIONS = {"scheduling_strategy": (None, "DEFAULT"),
                    "accelerator_type": (None,),
                    "placement_group_capture_child_tasks": (None, False),
                    "max_calls": (0, None), "enable_task_events": (None, True),
                    "_metadata": (None,), "label_selector": (None,), "_labels": (None,),
                    "object_store_memory": (None,), "fallback_strategy": (None,),
                    "_generator_backpressure_num_objects": (None,)}


# options whose values Ray checks by type (None is always allowed): a wrong one is its
# TypeError, with its words; an integer counts whatever its class (numpy's too)
_OPTION_TYPES = {"max_retries": (int,), "max_calls": (int,), "max_restarts": (int,),
                 "max_task_retries": (int,), "max_concurrency": (int,),
                 "num_returns": (int, str), "_metadata": (dict,), "namespace": (str,),
                 "name": (str,), "lifetime": (str,), "resources": (dict,),
                 "runtime_env": (dict,)}
_RETRY_KEYS = ("max_retries", "max_restarts", "max_task_retries")


def check_option_types(options):
    """Ray's checks of the types of options (TypeError, as Ray words it), and of the
    values of its retry counts and max_calls (ValueError)."""
    for k, v in options.items():
        types = _OPTION_TYPES.get(k)
        if types is None or v is None:
            continue
        if not (isinstance(v, types) or (int in types and isinstance(v, numbers.Integral))):
            raise TypeError(f"The type of keyword '{k}' must be {types + (type(None),)}, "
                            f"but received type {type(v)}")
        if k in _RETRY_KEYS and v < -1:
            raise ValueError(f"The keyword '{k}' only accepts None, 0, -1 or a positive "
                             f"integer, where -1 represents infinity.")
        if k == "max_calls" and v < 0:
            raise ValueError(f"The keyword '{k}' only accepts None, 0 or a positive integer")


def _check_precision(name, v):
    """Ray's: a resource's fractional quantity has at most 4 decimals (ValueError)."""
    if v and abs(v * 10000 - round(v * 10000)) > 1e-6:
        raise ValueError(f"The precision of the fractional quantity of resource {name} "
                         f"cannot go beyond 0.0001 ({name}={v!r})")


def check_placement_options(options, kind, retries_key):
    """The options actors and tasks share, as Ray checks them (kind: "actor" or "task"):
    num_cpus, num_gpus >= 0; retries_key (max_restarts, max_retries) an int >= -1;
    resources a dict of quantities >= 0 without CPU or GPU; name a non-empty str."""
    for key in ("num_cpus", "num_gpus"):
        v = options.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0):
            if kind == "actor" and isinstance(v, (int, float)) and not isinstance(v, bool):
                raise ValueError(f"Resource quantities may not be negative: the quantity "
                                 f"of resource {key} cannot be negative ({key}={v!r})")
            raise ValueError(f"The keyword '{key}' only accepts None, 0 or a positive "
                             f"number, got {v!r} ({kind} option {key})")
        if v is not None:
            _check_precision(key, v)
    mem = options.get("memory")  # (bytes: the node's "memory" resource, Ray's)
    if mem is not None and (isinstance(mem, bool) or not isinstance(mem, (int, float)) or
                            mem < 0):
        raise ValueError(f"The keyword 'memory' only accepts None, 0 or a positive number, "
                         f"got {mem!r} ({kind} option memory)")
    mr = options.get(retries_key)
    if mr is not None and (isinstance(mr, bool) or not isinstance(mr, numbers.Integral) or
                           mr < -1):
        raise ValueError(f"{kind} option {retries_key}={mr!r}: an int >= -1 is needed")
    res = options.get("resources")
    if res is not None:
        if not isinstance(res, dict):
            raise TypeError(f"{kind} option resources={res!r}: a dict is needed")
        if "CPU" in res or "GPU" in res:
            raise ValueError("use the num_cpus and num_gpus options instead of 'CPU' and "
                             "'GPU' in resources")
        for k, v in res.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise ValueError(f"resource {k!r}: {v!r} is not a quantity >= 0")
            _check_precision(k, v)
    name = options.get("name")
    if name is not None and (not isinstance(name, str) or not name):
        raise ValueError(f"{kind} option name={name!r}: a non-empty str is needed")


def memory_resource(options):
    """Ray's memory= option (bytes) as the node's "memory" resource: {} if none."""
    mem = options.get("memory")
    return {"memory": float(int(mem))} if mem else {}


def check_retry_exceptions(value, where):
    """Ray's retry_exceptions: a bool, or a list or tuple of exception classes (only those
    are retried). TypeError otherwise."""
    if isinstance(value, bool):
        return
    if isinstance(value, (list, tuple)) and all(
            inspect.isclass(t) and issubclass(t, BaseException) for t in value):
        return
    raise TypeError(f"{where}: retry_exceptions={value!r}: it must be either a boolean or a "
                    f"list of exception classes")


def retries_exception(on, e):
    """Whether retry_exceptions on (True, or exception classes) retries the exception e:
    True any Exception (not KeyboardInterrupt, SystemExit), classes only theirs."""
    if on is True:
        return isinstance(e, Exception)
    return bool(on) and isinstance(e, tuple(on))


class EnvFunction:
    """A task's function with runtime_env env_vars (Ray's; troupe.init's too): the worker
    sets them in os.environ while it runs (and puts back what was there after: its pool
    runs other tasks next). Pickled in its place."""
    __slots__ = ("fn", "env")

    def __init__(self, fn, env):
        self.fn, self.env = fn, env

    def __reduce__(self):
        return (EnvFunction, (self.fn, self.env))


class RetryingFunction:
    """A task's function with retry_exceptions (Ray's): the worker runs it again, on
    freshly decoded arguments, up to retries more times (-1: without end) while it raises
    an exception that on retries (retries_exception). Pickled in its place."""
    __slots__ = ("fn", "retries", "on")

    def __init__(self, fn, retries, on):
        self.fn, self.retries, self.on = fn, retries, on

    def __reduce__(self):
        return (RetryingFunction, (self.fn, self.retries, self.on))


def check_options(options, stacklevel):
    """Refuses an option Ray lacks (TypeError), a value Ray refuses (ValueError); warns
    once of one troupe takes but does not honour. stacklevel: the user's frame, counted
    from the caller."""
    bad = set(options) - _TASK_OPTIONS - set(_IGNORED_OPTIONS)
    if bad:
        raise TypeError(f"unknown options of a remote function: {sorted(bad)}")
    check_option_types(options)
    check_placement_options(options, "task", "max_retries")
    _runtime.check_num_returns(options.get("num_returns", 1), "a remote function's options")
    if "retry_exceptions" in options:
        check_retry_exceptions(options["retry_exceptions"], "a remote function's options")
    _runtime.env_vars(options.get("runtime_env"), "a remote function's options",
                      stacklevel + 1)
    ignored = [k for k in set(options) & set(_IGNORED_OPTIONS)
               if not any(options[k] is d or options[k] == d for d in _IGNORED_OPTIONS[k])
               and not (k == "scheduling_strategy" and _placement.check_strategy(options, ""))]
    if ignored:
        _errors.ignored("a remote function's options", ignored, stacklevel + 1)


def _c_name(text):
    """The task's C function name: "py:" + text, cut to C's 255 bytes (whole characters)."""
    b = ("py:" + text).encode(errors="replace")
    return b if len(b) <= 255 else b[:255].decode(errors="ignore").encode()


def check_size(n, name, kind="remote function"):
    """A function (or an actor class) pickled into n bytes: over
    ray_constants.FUNCTION_SIZE_ERROR_THRESHOLD a ValueError, over
    FUNCTION_SIZE_WARN_THRESHOLD a warning (Ray's: such a function has most likely
    captured a large object, which every task would carry)."""
    mib = n // (1 << 20)
    if n >= ray_constants.FUNCTION_SIZE_ERROR_THRESHOLD:
        raise ValueError(
            f"The {kind} {name} is too large ({mib} MiB > "
            f"FUNCTION_SIZE_ERROR_THRESHOLD={ray_constants.FUNCTION_SIZE_ERROR_THRESHOLD >> 20} "
            f"MiB): it holds a large object from its scope (a global or a closure's); put "
            f"that with troupe.put() and pass or capture its ref instead.")
    if n > ray_constants.FUNCTION_SIZE_WARN_THRESHOLD:
        warnings.warn(f"The {kind} {name} is very large ({mib} MiB): it holds a "
                      f"large object from its scope; troupe.put() it and pass its ref",
                      UserWarning, stacklevel=4)


_SHAPES_MAX = 64


class ArgCheck:
    """Ray's check of a call's arguments against its function's signature, at .remote()
    (a TypeError there, not in the worker). The hot path is two compares: lo <= the
    number of positional arguments <= hi, with no keyword arguments, is exactly what the
    signature takes then; any other call binds once per shape (its count and keyword
    names), remembered."""
    __slots__ = ("sig", "lo", "hi", "shapes", "name", "reduced")

    def __init__(self, sig, name):
        P = inspect.Parameter
        ps = list(sig.parameters.values())
        positional = [p for p in ps if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
        required_kw = any(p.kind == P.KEYWORD_ONLY and p.default is P.empty for p in ps)
        self.sig, self.name, self.shapes, self.reduced = sig, name, set(), None
        self.lo = sum(p.default is P.empty for p in positional) if not required_kw else 1 << 30
        self.hi = (1 << 30) if any(p.kind == P.VAR_POSITIONAL for p in ps) else len(positional)

    @classmethod
    def of(cls, fn, name, drop_first=False):
        """The check of fn's signature (without its first parameter: a method's self), or
        None where the signature cannot be read (a builtin)."""
        try:  # (any failure to read it: no check, the worker says what is wrong)
            sig = inspect.signature(fn)
            if drop_first:
                ps = list(sig.parameters.values())
                if not ps or ps[0].kind not in (inspect.Parameter.POSITIONAL_ONLY,
                                                inspect.Parameter.POSITIONAL_OR_KEYWORD):
                    return None  # (def m(*args): self is in args)
                sig = sig.replace(parameters=ps[1:])
            return cls(sig, name)
        except Exception:
            return None

    def __reduce__(self):  # (a handle's copy checks as its creator does: the parameters'
        if self.reduced is None:  # names, kinds and whether they have a default, one str)
            P = inspect.Parameter
            self.reduced = (_rebuild_check, (self.name, " ".join(
                f"{p.name}:{int(p.kind)}{int(p.default is not P.empty)}"
                for p in self.sig.parameters.values())))
        return self.reduced

    def check(self, args, kwargs):
        """Raises TypeError where the signature does not take (args, kwargs)."""
        if not kwargs and self.lo <= len(args) <= self.hi:
            return
        shape = (len(args), tuple(kwargs))
        if shape in self.shapes:
            return
        try:
            self.sig.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self.name}.remote(): {e}") from None
        if len(self.shapes) < _SHAPES_MAX:
            self.shapes.add(shape)


@functools.lru_cache(maxsize=4096)
def _rebuild_check(name, params):
    """An ArgCheck from its pickle, once per process for each (a handle passed in every
    call would otherwise build its methods' signatures each time); None where it does
    not read as one."""
    P = inspect.Parameter
    kinds = (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD, P.VAR_POSITIONAL, P.KEYWORD_ONLY,
             P.VAR_KEYWORD)  # (by their values, 0..4)
    try:
        ps = []
        for item in params.split():
            n, _, kd = item.rpartition(":")
            ps.append(P(n, kinds[int(kd[0])], default=None if kd[1] == "1" else P.empty))
        return ArgCheck(inspect.Signature(ps), name)
    except Exception:
        return None


class _Pickled:
    """A function's pickled bytes, once per RemoteFunction (its options' copies share
    it): the bytes, their digest, the refs the function holds (its closure's)."""
    __slots__ = ("data", "digest", "refs", "obj")

    def __init__(self, fn, name):
        parts, total, refs = _serial.dumps(fn)
        check_size(total, name)
        self.data = _serial.join(parts, total)
        self.digest = hashlib.blake2b(self.data, digest_size=16).digest()
        self.refs = list(dict.fromkeys(refs))
        self.obj = None  # (rt, the ObjectRef of data in the store) for a large function


class _Prepared:
    """What every task of a RemoteFunction sends on one runtime: the payload's head, the
    refs to add, the C options (read-only; a copy per call that has contained refs)."""
    __slots__ = ("rt", "head", "fn_ref", "fn_refs", "opts", "keep", "cname", "plain", "opts_at")


class RemoteFunction:
    """A function whose calls run as tasks on the node's pool of worker processes:
    ``f.remote(*args, **kwargs)`` returns an ObjectRef at once; ``f.options(...)`` the
    same function with other options. Calling ``f(...)`` directly is a TypeError, as in
    Ray."""

    def __init__(self, function, options, _shared=None):
        self._function = function
        self._options = dict(options)
        self._shared = _shared if _shared is not None else {}
        self._prepared = None
        module = getattr(function, "__module__", None) or "__main__"
        qualname = getattr(function, "__qualname__", None) or getattr(function, "__name__",
                                                                       "function")
        self._function_name = f"{module}.{qualname}"
        if "args" not in self._shared:  # (the signature's check, shared by options' copies)
            self._shared["args"] = ArgCheck.of(function, getattr(function, "__name__", qualname))
        self._args = self._shared["args"]
        # a generator function's calls give an ObjectRefGenerator (Ray's default for one)
        self._default_returns = "streaming" if (inspect.isgeneratorfunction(function) or
                                                inspect.isasyncgenfunction(function)) else 1
        self.__name__ = getattr(function, "__name__", qualname)
        self.__qualname__ = qualname
        self.__module__ = module
        self.__doc__ = getattr(function, "__doc__", None)

    def __call__(self, *args, **kwargs):
        raise TypeError("Remote functions cannot be called directly. Instead of running "
                        f"'{self._function_name}()', try '{self._function_name}.remote()'.")

    def options(self, **options):
        """The same function with these options over its own (Ray's f.options)."""
        check_options(options, 2)
        merged = dict(self._options)
        merged.update(options)
        return RemoteFunction(self._function, merged, self._shared)

    def bind(self, *args, **kwargs):
        """A node of a graph (Ray's f.bind): ``dag.execute(...)`` runs it as this task,
        its arguments' nodes first; a function of several results is not a node."""
        if self._options.get("num_returns", self._default_returns) != 1:
            raise ValueError(f"{self._function_name}: bind a remote function of "
                             f"num_returns=1 (its result is the node's value)")
        return dag.FunctionNode(self, args, kwargs, self._options)

    def __reduce__(self):
        return (_rebuild, (self._function, self._options))

    def __repr__(self):
        return f"RemoteFunction({self._function_name})"

    def remote(self, *args, **kwargs):
        """Submits the task; returns the ref of its result at once (num_returns k > 1: a
        list of k refs, one per value the function returns; 0: None, the task runs all
        the same; "streaming", a generator function's default: an ObjectRefGenerator;
        "dynamic": a ref whose value is a DynamicObjectRefGenerator)."""
        c = self._args
        if c is not None and (kwargs or not c.lo <= len(args) <= c.hi):
            c.check(args, kwargs)  # (Ray's TypeError of arguments its signature refuses)
        p = self._prepared
        if p is not None and p.plain:  # (builtin scalars in C; None: not taken)
            ref = _fast.task_one(p.rt, p.cname, p.head, p.opts_at, args, kwargs,
                                 self._function_name)
            if ref is not None:
                return ref
        rt = runtime()
        if p is None or p.rt is not rt:
            p = self._prepare(rt)
        k = self._options.get("num_returns", self._default_returns)
        mode = k if k in _runtime.GENERATOR_MODES else None
        payload, refs, contained = _runtime.encode_args(args, kwargs)
        if mode:
            payload, k = _runtime.with_generator(payload, mode), 1
        if p.fn_ref is not None:
            refs.append(p.fn_ref)
        if p.fn_refs:
            contained = list(dict.fromkeys(list(contained) + p.fn_refs))
        data = p.head + (payload if k <= 1 else _runtime.with_returns(payload, k))
        arr = (Ref * len(refs))(*[r._c for r in refs]) if refs else None
        opts = p.opts
        if contained:
            opts = _ffi.TaskOptions.from_buffer_copy(p.opts)
            carr = (Ref * len(contained))(*[r._c for r in contained])
            opts.contained, opts.n_contained = carr, len(contained)
        if mode == "streaming":  # (its items come as it yields them: tr_stream_next)
            outs = (Ref * 1)()
            check(lib.tr_task_submit_multi(rt, p.cname, data, len(data), arr, len(refs),
                                           byref(opts), _runtime.STREAMING_RETURNS, outs),
                  f"submitting task {self._function_name}")
            return _runtime.ObjectRefGenerator(_runtime.multi_refs(outs)[0])
        if k > 1:
            outs = (Ref * k)()
            check(lib.tr_task_submit_multi(rt, p.cname, data, len(data), arr, len(refs),
                                           byref(opts), k, outs),
                  f"submitting task {self._function_name}")
            return _runtime.multi_refs(outs)
        out = Ref()
        check(lib.tr_task_submit(rt, p.cname, data, len(data), arr, len(refs), byref(opts),
                                 byref(out)), f"submitting task {self._function_name}")
        ref = _runtime.fresh_ref(out)  # (a new id here: its hold needs no lock)
        if k == 1:
            return ref
        _runtime.forget(ref)  # (0: Ray's None; the task runs all the same)
        return None

    def _prepare(self, rt):
        """The function pickled (once per RemoteFunction), the head and options for rt."""
        o = self._options
        on = o.get("retry_exceptions", False)
        retries = o.get("max_retries")
        retries = DEFAULT_MAX_RETRIES if retries is None else retries
        key = ("pickled", tuple(on) if isinstance(on, (list, tuple)) else on, retries) \
            if on and retries else "pickled"
        env = {**_runtime.job_env_vars(),
               **_runtime.env_vars(o.get("runtime_env"), "a remote function's options")}
        if env:
            key = (key, tuple(sorted(env.items())))
        pk = self._shared.get(key)
        if pk is None:
            fn = self._function
            if on and retries:  # (the worker retries it: its own digest)
                fn = RetryingFunction(fn, retries, True if on is True else tuple(on))
            if env:
                fn = EnvFunction(fn, env)
            pk = self._shared[key] = _Pickled(fn, self._function_name)
        p = _Prepared()
        p.rt = rt
        p.fn_refs = pk.refs
        p.fn_ref = None
        if len(pk.data) <= FN_INLINE_MAX:
            p.head = HEAD.pack(TASK_MAGIC, pk.digest, len(pk.data)) + pk.data
        else:
            if pk.obj is None or pk.obj[0] is not rt:
                pk.obj = (rt, _runtime.put_payload([pk.data], len(pk.data)))
            p.fn_ref = pk.obj[1]
            p.head = HEAD.pack(TASK_MAGIC, pk.digest, FN_IN_REF)
        opts = _ffi.TaskOptions()
        lib.tr_task_options_init(byref(opts))
        for k in ("num_cpus", "num_gpus"):
            if o.get(k) is not None:
                setattr(opts, k, float(o[k]))
        if o.get("max_retries") is not None:
            opts.max_retries = int(o["max_retries"])
        _placement.apply_options(o, opts, f"remote function {self._function_name}")
        res = {k: v for k, v in (o.get("resources") or {}).items() if v > 0}
        res.update(memory_resource(o))
        res.update(_placement.affinity_resources(o, f"remote function {self._function_name}"))
        p.keep = []
        if res:
            arr = (_ffi.Resource * len(res))()
            for i, (k, v) in enumerate(sorted(res.items())):
                kb = str(k).encode()
                p.keep.append(kb)
                arr[i].name, arr[i].quantity = kb, float(v)
            opts.resources, opts.n_resources = arr, len(res)
            p.keep.append(arr)
        p.opts = opts
        p.cname = _c_name(o.get("name") or self._function_name)
        # one result, and nothing but the head and the arguments: _fast.task_one's tasks
        p.plain = (_fast is not None and p.fn_ref is None and not p.fn_refs and
                   o.get("num_returns", self._default_returns) == 1)
        p.opts_at = ctypes.addressof(opts)
        self._prepared = p
        return p


def _rebuild(function, options):
    return RemoteFunction(function, options)


def make(function, options, stacklevel):
    """@troupe.remote on a function (stacklevel: the user's frame, from the caller)."""
    check_options(options, stacklevel + 1)
    return RemoteFunction(function, options)


def read_head(addr, n):
    """(digest, n_fn, offset of the function's bytes) of a task's payload at addr."""
    if n < HEAD.size:
        raise ValueError("troupe: a task payload shorter than its head")
    magic, digest, n_fn = HEAD.unpack(ctypes.string_at(addr, HEAD.size))
    if magic != TASK_MAGIC:
        raise ValueError(f"troupe: not a task payload (starts {magic!r})")
    return digest, n_fn, HEAD.size


# ------------------------------------------------------------------ the callee side

_runner = None  # troupe._worker's run_task, in a worker process


def set_task_runner(fn):
    """The worker (troupe._worker, a layer above) gives the function that runs a task."""
    global _runner
    _runner = fn


def _dispatch(ctx, args, n):
    if _runner is None:
        lib.tr_ctx_set_error(ctx, b"troupe: this process runs no Python tasks (a driver)")
        return _errors.ETASK
    return _runner(ctx, args, n)


task_dispatch = _ffi.TASK_FN(_dispatch)  # (alive as long as the module: C keeps it)


def add_task_dispatch(cfg, fn=None):
    """Registers the one task dispatch (tr_config_add_function with no name: it runs every
    task) in a tr_config: the worker's (fn: _fast.c's, which hands what it does not run
    to task_dispatch; it lives as long as the process), and the driver's through
    troupe.init's config hook. Returns the C status."""
    return lib.tr_config_add_function(cfg, None, task_dispatch if fn is None else fn)


_runtime.on_config(lambda cfg: check(add_task_dispatch(cfg), "registering remote functions"))


def _ready_check(pg):
    """A placement group's ready() task: it runs once the group is placed."""
    return pg


def _ready(pg):
    strategy = _placement.PlacementGroupSchedulingStrategy(pg, 0)
    options = {"num_cpus": 0, "scheduling_strategy": strategy}
    return RemoteFunction(_ready_check, options).remote(pg)


_placement.set_ready_maker(_ready)
