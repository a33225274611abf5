"""The process's runtime: init/shutdown (and the hooks that layers above register for
it), ObjectRef, get/put/wait, and a call's wire format (call(): what an actor method call
sends; the worker decodes the same)."""
import asyncio
import atexit
import ctypes
import gc
import numbers
import os
import pickle
import sys
import threading
import time
import uuid
import weakref

from . import _errors, _ffi, _serial
from ._errors import check
from ._ffi import Ref, byref, c_size_t, c_void_p, lib
from .exceptions import GetTimeoutError, ObjectLostError, TroupeError

try:  # (optional: an interpreter it was not built for, or a build without Python.h)
    from . import _fast as _fast_module
except ImportError:
    _fast_module = None


def _extension_off():
    """TROUPE_NO_EXTENSION=1 here, or in the driver that started this worker (its node
    passes no TROUPE_ variable on: init exports it as PYTROUPE_NO_EXTENSION)."""
    return any(os.environ.get(v, "") not in ("", "0")
               for v in ("TROUPE_NO_EXTENSION", "PYTROUPE_NO_EXTENSION"))


# troupe._fast is used (the plain call's two ends and ObjectRef's fields in C) where it is
# built, the interpreter is 3.11 or later and TROUPE_NO_EXTENSION is not set
_use_fast = _fast_module is not None and sys.version_info >= (3, 11) and not _extension_off()

_rt = None          # tr_runtime* (c_void_p) of this process: the driver's, or a worker's
_in_worker = False  # this process runs an actor
_lock = threading.RLock()  # (re-entered by a finalizer that runs under it)
_job_env = {}  # init(runtime_env={"env_vars": ...}): every task's and actor's (job_env_vars)
_SLICE_MS = 200     # a wait with no timeout wakes this often (Ctrl-C is seen)
_shutdown_hooks = []  # on_shutdown's, newest first
_config_hooks = []    # on_config's, in order

INLINE_MAX = 512 << 10       # larger call arguments go through the object store
OBJECT_ARGS = b"TRPO"        # a call's arguments as an object: TRPO + its 16-byte id
RETURNS = b"TRPK"            # before a call's arguments: TRPK + u32 k, for num_returns k > 1
STREAMING = b"TRPG"          # before a call's arguments: num_returns="streaming" (generators)
DYNAMIC = b"TRPD"            # ...num_returns="dynamic"
GENERATOR_MODES = {"streaming": STREAMING, "dynamic": DYNAMIC}
                             # (the worker replies k parts: tr_ctx_reply_multi)


def runtime():
    """This process's tr_runtime*. A driver that uses troupe before troupe.init() gets it
    started with the defaults, as Ray's first remote call starts Ray."""
    if _rt is None:
        if _in_worker:
            raise TroupeError("troupe is not initialized in this worker", "TR_ESTATE")
        auto = os.environ.get("TROUPE_ENABLE_AUTO_CONNECT",
                              os.environ.get("RAY_ENABLE_AUTO_CONNECT", "1"))
        if auto.strip().lower() in ("0", "false", "no", "off"):
            raise TroupeError("troupe is not initialized: call troupe.init() first (automatic "
                              "start is off: TROUPE_ENABLE_AUTO_CONNECT=0)", "TR_ESTATE")
        init()
    if fast is not None:
        fast.flush()  # (the releases _fast put off, done before the runtime is used here)
    return _rt


def _set_rt(rt):
    """_rt is now rt (set here only: troupe._fast keeps its own copy)."""
    global _rt
    _rt = rt
    if fast is not None:
        fast.set_runtime(rt)


def is_initialized():
    return _rt is not None


def attach_worker(rt):
    """In a worker (the actor's process, from its first callback): rt is this process's
    runtime; init and shutdown are the node's, not the Python code's."""
    global _in_worker
    if _rt is None:
        _set_rt(rt)
        _in_worker = True


def on_shutdown(fn):
    """Has shutdown() call fn() first, before the runtime ends (newest hook first): how a
    layer above (troupe.dag's graphs) ends what it made over this one, without this layer
    knowing it."""
    _shutdown_hooks.insert(0, fn)
    return fn


def on_config(fn):
    """Has init() call fn(cfg) with the tr_config it builds, before tr_init: how a layer
    above (the worker's task dispatch) registers what the driver's config carries too."""
    if fn not in _config_hooks:
        _config_hooks.append(fn)
    return fn


def env_vars(runtime_env, where, stacklevel=1):
    """The env_vars of a runtime_env option (Ray's), checked: a dict of str to str; its
    other keys (pip, conda, working_dir, ...) are ignored with a warning (where: the
    option's place). stacklevel: as warnings.warn's, counted from the caller."""
    if runtime_env is None:
        return {}
    if not isinstance(runtime_env, dict):
        raise TypeError(f"{where}: runtime_env={runtime_env!r}: a dict is needed")
    found = runtime_env.get("env_vars") or {}
    if not isinstance(found, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                              for k, v in found.items()):
        raise TypeError("runtime_env's env_vars must be a dict of str to str")
    other = sorted(k for k in runtime_env if k != "env_vars")
    if other:
        _errors.ignored(f"{where}'s runtime_env (only its env_vars are set)", other,
                        stacklevel + 1)
    return dict(found)


def job_env_vars():
    """The env_vars of troupe.init's runtime_env: set for every task and actor (a task's
    or actor's own runtime_env adds to them). In a worker: those of the task or actor it
    runs, which the tasks and actors it starts inherit (Ray's rule)."""
    return dict(_job_env)


def namespace():
    """The namespace of the actor names this process makes and finds now: troupe.init's
    (one of its own, anonymous, when init names none: Ray's); in an actor's worker, its
    creator's; in a task, its submitter's (tr_runtime_namespace)."""
    rt = _rt
    if rt is None:
        return os.environ.get("TROUPE_NAMESPACE", "")
    buf = ctypes.create_string_buffer(256)
    check(lib.tr_runtime_namespace(rt, buf, 256), "tr_runtime_namespace")
    return buf.value.decode()


def inherit_env(env):
    """The worker's: env (a dict) is what the task or actor it runs now was given, for
    the tasks and actors it starts (job_env_vars); returns what it was, to put back."""
    global _job_env
    prev, _job_env = _job_env, dict(env)
    return prev


def node_address():
    """The address of this process's node (its socket path): another driver on this
    machine joins it with troupe.init(address=...)."""
    return lib.tr_runtime_address(runtime()).decode()


def timeline(filename=None):
    """The node's timeline (Ray's ray.timeline): every driver's and worker's recent events -
    calls submitted and run, gets, puts, collective ops, graph steps - as Chrome
    trace-event dicts (always recorded; no RAY_PROFILING). With filename, writes the JSON
    file there (Perfetto and chrome://tracing load it) and returns None."""
    import json
    import tempfile
    if filename is not None:
        check(lib.tr_timeline_dump(runtime(), os.fsencode(filename)), "timeline")
        return None
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "timeline.json")
        check(lib.tr_timeline_dump(runtime(), os.fsencode(path)), "timeline")
        with open(path, encoding="utf-8") as f:
            return json.load(f)["traceEvents"]


class Context(dict):
    """What init() returns (Ray's RayContext): a mapping of the node's addresses
    (address_info's: ctx["address"], as Ray's deprecated item access), with attributes
    address_info, dashboard_url (its metrics and status page, "HOST:PORT" as Ray's; None
    if it serves none), python_version, ray_version and troupe_version; a context manager
    that shuts troupe down."""

    def __init__(self, address_info, **attrs):
        super().__init__(address_info)
        self.address_info = address_info
        self.__dict__.update(attrs)

    def __getitem__(self, key):
        if key == "address_info":  # (troupe's before: the context as a dict of these)
            return self.address_info
        if key in ("dashboard_url", "python_version", "ray_version", "troupe_version"):
            return self.__dict__[key]
        return super().__getitem__(key)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        shutdown()

    def disconnect(self):
        shutdown()


def _context():
    import json
    raw = c_void_p()
    st = {}
    if lib.tr_node_status(_rt, byref(raw)) == 0 and raw.value:
        try:
            st = json.loads(ctypes.string_at(raw.value).decode())
        finally:
            lib.tr_free(raw)
    dash = st.get("dashboard") or ""
    url = dash[len("http://"):].rstrip("/") if dash.startswith("http://") else None
    address = lib.tr_runtime_address(_rt).decode()
    version = __version__()
    return Context({"address": address, "webui_url": url, "node_ip_address": "127.0.0.1",
                    "session_dir": os.path.dirname(address)},
                   dashboard_url=url, python_version=".".join(map(str, sys.version_info[:3])),
                   ray_version=version, troupe_version=version)


def __version__():
    return lib.tr_version_string().decode()


def init(address=None, *, num_cpus=None, num_gpus=None, resources=None,
         object_store_memory=None, log_level=None, ignore_reinit_error=False,
         include_dashboard=None, dashboard_host=None, dashboard_port=None,
         _cluster_token=None, _config=None, **unsupported):
    """Starts troupe in this process: an embedded node (address None), a node's socket
    path, or a cluster's head "HOST:PORT". Workers run this interpreter
    (``python -m troupe._worker``). Returns a Context (Ray's RayContext): its
    dashboard_url is the node's metrics and status page (include_dashboard=False: none;
    dashboard_port, dashboard_host: where an embedded node serves it)."""
    global _job_env
    env = unsupported.pop("runtime_env", None)
    memory = unsupported.pop("_memory", None)  # (Ray's: the node's "memory" resource)
    ns = unsupported.pop("namespace", None)
    jc = unsupported.pop("job_config", None)  # (Ray's JobConfig: its namespace, runtime_env)
    if jc is not None:
        if ns is None:
            ns = jc.ray_namespace
        if env is None:
            env = jc.runtime_env
        unsupported.update({f"job_config.{k}": v for k, v in jc._unhonoured().items()})
    if unsupported:  # Ray's (_system_config, ...)
        _errors.ignored("troupe.init", unsupported, stacklevel=2)
    job_env = env_vars(env, "troupe.init", stacklevel=2)
    if ns is not None:  # (Ray's: the job's actor names; its tasks and actors inherit it, in C)
        if not isinstance(ns, str):
            raise TypeError(f"namespace must be None or a string, got {type(ns).__name__}")
        if not ns or "\x1f" in ns or len(ns.encode()) > 255:
            raise ValueError(f"namespace {ns!r}: a non-empty str of up to 255 bytes")
    with _lock:
        if _rt is not None:
            if ignore_reinit_error or _in_worker:
                return None if _in_worker else _context()
            raise RuntimeError("troupe.init() was called already (ignore_reinit_error=True)")
        _job_env = job_env  # the job's: every task's and actor's (this runtime's only)
        cfg = c_void_p()
        check(lib.tr_config_create(byref(cfg)), "tr_config_create")
        try:
            settings = {"worker_command": f"{sys.executable} -m troupe._worker"}
            if address:
                settings["address"] = str(address)
            if num_cpus is not None:
                settings["num_cpus"] = str(num_cpus)
            if num_gpus is not None:
                settings["num_gpus"] = str(num_gpus)
            if resources:
                settings["resources"] = ",".join(f"{k}={v}" for k, v in resources.items())
            if memory is not None:
                settings["memory"] = str(int(memory))
            if object_store_memory:
                settings["object_store_bytes"] = str(int(object_store_memory))
            if log_level:
                settings["log_level"] = str(log_level)
            if _cluster_token:
                settings["cluster_token"] = _cluster_token
            if ns is None and not os.environ.get("TROUPE_NAMESPACE"):
                ns = str(uuid.uuid4())  # (Ray's anonymous namespace: names of this job's own)
            if ns is not None:
                settings["namespace"] = ns
            if include_dashboard is False:
                settings["metrics_port"] = "-1"
            elif dashboard_port is not None:
                settings["metrics_port"] = str(int(dashboard_port))
            if dashboard_host is not None:
                settings["metrics_host"] = str(dashboard_host)
            settings.update(_config or {})
            for k, v in settings.items():
                check(lib.tr_config_set(cfg, k.encode(), str(v).encode()), f"config {k!r}")
            for fn in _config_hooks:
                fn(cfg)
            _export_path()
            os.environ["PYTROUPE_LIBRARY"] = _ffi.library_path
            if _extension_off():  # (the workers do without it too)
                os.environ["PYTROUPE_NO_EXTENSION"] = "1"
            else:
                os.environ.pop("PYTROUPE_NO_EXTENSION", None)
            rt = c_void_p()
            check(lib.tr_init_abi(cfg, byref(rt), _ffi.ABI_VERSION), "troupe.init")
        finally:
            lib.tr_config_destroy(cfg)
        _set_rt(rt)
    atexit.register(shutdown)
    return _context()


def _export_path():
    """Workers import what the driver imports: its script's directory and sys.path go to
    them through PYTHONPATH (the node and its workers inherit the environment)."""
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    if main:
        paths.insert(0, os.path.dirname(os.path.abspath(main)))
    old = os.environ.get("PYTHONPATH", "")
    seen, out = set(), []
    for p in paths + (old.split(os.pathsep) if old else []):
        if p not in seen:
            seen.add(p)
            out.append(p)
    os.environ["PYTHONPATH"] = os.pathsep.join(out)


def shutdown():
    """Stops troupe in this process: its actors, its embedded node, its refs. Arrays got
    from the store stay readable: while any lives, the store stays mapped (the runtime's
    end waits for the last of them, or for the process's exit). troupe.init may start a
    new runtime meanwhile: the old one ends when its last array goes."""
    global _job_env
    with _lock:
        if _rt is None or _in_worker:
            return
        if fast is not None:
            fast.flush()
        rt = _rt
        _set_rt(None)
        _job_env = {}
        failed = None
        for fn in list(_shutdown_hooks):
            try:
                fn()
            except Exception as e:  # (the runtime ends all the same; the first is raised)
                failed = failed or e
        gc.collect()
        keeps = _views_of(rt)
        if keeps:
            _deferred.append(rt)
            for k in keeps:
                weakref.finalize(k, _finish_deferred)
        else:
            lib.tr_shutdown(rt)
        if failed is not None:
            raise failed


def _finish_deferred():
    """An array over a shut-down runtime's store went: each such runtime whose last one
    it was ends now (a runtime started since, and its arrays, are not waited for)."""
    with _lock:
        rts = [rt for rt in _deferred if not _views_of(rt)]
        for rt in rts:
            _deferred.remove(rt)
    for rt in rts:
        lib.tr_shutdown(rt)


# ------------------------------------------------------------------ refs

# One C hold per id in this process, however many ObjectRefs share it: id -> [count, rt].
# The hold is the ref's making (put, a call) or a borrow (a ref that came in a value); it
# is released when the last ObjectRef of that id goes (docs/OWNERSHIP.md).
_holds = {}
_holds_lock = _fast_module.HoldLock() if _use_fast else threading.RLock()  # (reentrant: a
# finalizer may run under it; the extension's is taken by its C code without a Python call)


class _PyRefBase:
    """ObjectRef's fields where troupe._fast is not used (its RefBase has them in C, and
    gives the hold back as the ref goes, as __del__ does here)."""
    __slots__ = ("_c", "_owned", "_rt", "__weakref__")

    def __del__(self):
        if not self._owned or self._rt is None or self._rt is not _rt:
            return
        try:
            with _holds_lock:
                key = bytes(self._c)
                h = _holds.get(key)
                if h is None or h[1] is not self._rt:
                    return
                h[0] -= 1
                if h[0] > 0:
                    return
                del _holds[key]
                # (under the lock: a borrow of the id waits until the C hold is gone)
                lib.tr_ref_release(self._rt, self._c)
        except Exception:
            pass


class ObjectRef(_fast_module.RefBase if _use_fast else _PyRefBase):
    """A future value: a call's result or an object in the store. Hashable; pickles (as
    an argument or inside a value) by its id. A ref that came in a value (an argument, a
    result, an object) is borrowed as it is unpickled: the value stays alive for this
    process for as long as an ObjectRef of it lives here, whatever its owner does."""
    __slots__ = ()

    def __init__(self, c, owned=True):
        if isinstance(c, (bytes, bytearray)):  # Ray's ObjectRef(id bytes): from_binary's
            if len(c) != 16:
                raise ValueError(f"ObjectRef: 16 id bytes are needed, got {len(c)}")
            r = Ref()
            ctypes.memmove(r.b, bytes(c), 16)
            c, owned = r, False
            self._c, self._owned, self._rt = c, False, _rt
            if _rt is not None:
                self._borrow()
            return
        self._c = c            # a Ref (16 bytes)
        self._owned = False    # this process holds it: released when the last one goes
        self._rt = rt = _rt
        if owned and rt is not None:  # one this process just made: its making is the hold
            key = bytes(c)     # (_hold's, inline: every call makes one)
            with _holds_lock:
                h = _holds.get(key)
                if h is None or h[1] is not rt:
                    _holds[key] = [1, rt]
                else:
                    h[0] += 1
                self._owned = True

    @classmethod
    def from_binary(cls, b):
        """The ref of 16 id bytes (binary()'s) that came in a value: borrowed here (held
        until the last ObjectRef of it goes). If it cannot be (its owner died, it is
        gone), it is not held, and get raises why."""
        r = Ref()
        ctypes.memmove(r.b, b, 16)
        ref = cls(r, owned=False)
        if ref._rt is not None:
            ref._borrow()
        return ref


    _from_bytes = from_binary  # (its earlier name)

    def binary(self):
        return bytes(self._c)

    def hex(self):
        return self.binary().hex()

    def is_object(self):
        """An object of the store (put, or a large result), not a call's own result."""
        return bool(self._c.b[15] & 0x80)

    def __hash__(self):
        return hash(self.binary())

    def __eq__(self, other):
        return isinstance(other, ObjectRef) and self.binary() == other.binary()

    def __repr__(self):
        return f"ObjectRef({self.hex()})"

    def __reduce__(self):
        refs = _serial.collecting()
        if refs is not None:
            refs.append(self)
        return (_rebuild_ref, (self.binary(),))

    def _of_this_runtime(self):
        """Whether it was made or got under the runtime this process runs now."""
        return self._rt is not None and self._rt is _rt

    def _hold(self):
        """This process holds the ref (it made it, or a get took its hold): counted."""
        if self._owned or self._rt is None:
            return
        with _holds_lock:
            key = bytes(self._c)
            h = _holds.get(key)
            if h is None or h[1] is not self._rt:
                _holds[key] = [1, self._rt]
            else:
                h[0] += 1
            self._owned = True

    def _borrow(self):
        """Takes this process's hold on a ref that came in a value (tr_ref_borrow), or
        counts one more on the hold it has."""
        with _holds_lock:
            key = bytes(self._c)
            h = _holds.get(key)
            if h is not None and h[1] is self._rt:
                h[0] += 1
                self._owned = True
                return
            if lib.tr_ref_borrow(self._rt, self._c) == 0:
                _holds[key] = [1, self._rt]
                self._owned = True

    def __await__(self):
        return _await_ref(self).__await__()


def unheld_ref(b):
    """The ObjectRef of 16 id bytes, held by nothing here (a call's argument the worker
    resolves itself: get_one holds it if it is an object)."""
    r = Ref()
    ctypes.memmove(r.b, b, 16)
    return ObjectRef(r, owned=False)


def _rebuild_ref(b):
    return ObjectRef.from_binary(b)


async def _await_ref(ref):
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, get, ref)


class _Keep:
    """Keeps a viewed value's ref (and so its memory) alive while a view of it lives."""
    __slots__ = ("ref", "__weakref__")

    def __init__(self, ref):
        self.ref = ref
        _views.add(self)


def fresh_ref(c):
    """ObjectRef(c) of a ref this process just made (a call's result: its id is new here,
    so no other thread can touch its entry, and the lock is not needed): the hot path of
    calls."""
    ref = _new_object(ObjectRef)
    ref._c = c
    rt = ref._rt = _rt
    if rt is None:
        ref._owned = False
    else:
        _holds[bytes(c)] = [1, rt]
        ref._owned = True
    return ref


_new_object = ObjectRef.__new__

_views = weakref.WeakSet()  # _Keeps alive: arrays over the store's memory
_deferred = []              # runtimes shut down while such arrays lived


def _viewing():
    """How many _Keeps live (iterating skips one dying now, whose entry may linger)."""
    return sum(1 for _ in _views)


def _view(addr, n, owner):
    """A read-only memoryview of n bytes at addr that keeps owner alive."""
    arr = (ctypes.c_char * n).from_address(addr)
    arr._owner = owner
    return memoryview(arr).cast("B").toreadonly()


class _PrivateMap:
    """A private copy-on-write mapping of an object (tr_object_map_private): unmapped when
    the last array over it goes."""
    __slots__ = ("rt", "ref", "addr", "n", "__weakref__")

    def __init__(self, rt, ref, addr, n):
        self.rt, self.ref, self.addr, self.n = rt, ref, addr, n
        _views.add(self)

    def __del__(self):
        if self.rt is not None and self.rt is _rt:
            try:
                lib.tr_object_unmap_private(self.rt, self.ref, c_void_p(self.addr), self.n)
            except Exception:
                pass


def get_writable(ref, what="argument"):
    """The value of an object with its arrays writable, as Ray gives a method its
    arguments: a private copy-on-write mapping (zero-copy until an array is written; a
    write changes this process's pages only, never the object). A call's result (no
    object) is decoded from a private copy of its bytes."""
    rt = runtime()
    data, n = c_void_p(), c_size_t()
    if not ref.is_object():
        rc = lib.tr_get(rt, ref._c, _ffi.FOREVER, byref(data), byref(n))
        if rc:
            check(rc, what)
        copy = bytearray(ctypes.string_at(data.value, n.value)) if n.value else bytearray()
        try:
            return _serial.loads(memoryview(copy))
        except _serial.RemoteError as e:
            raise _errors.task_error(e, what) from None
    rc = lib.tr_object_map_private(rt, ref._c, -1, byref(data), byref(n))
    if rc:
        check(rc, what)
    if not n.value:
        return _serial.loads(memoryview(b""))
    keep = _PrivateMap(rt, Ref.from_buffer_copy(ref._c), data.value, n.value)
    arr = (ctypes.c_char * n.value).from_address(data.value)
    arr._owner = keep
    try:
        return _serial.loads(memoryview(arr).cast("B"))
    except _serial.RemoteError as e:
        raise _errors.task_error(e, what) from None


_COPY_MAX = 4096  # a small result's bytes are copied once, its head looked at in the copy


def _decode(addr, n, ref, what):
    """The value of a payload at addr: a plain one (no out-of-band buffer) unpickled from
    a copy of its bytes (the fast path of small results); one with buffers through a view
    that keeps ref, and so the memory, alive while its arrays live."""
    if n >= 4:
        head = ctypes.string_at(addr, n if n <= _COPY_MAX else 4)
        if head[:4] == _serial.MAGIC0:
            return pickle.loads(memoryview(head)[4:] if n <= _COPY_MAX else
                                ctypes.string_at(addr + 4, n - 4))
    view = _view(addr, n, _Keep(ref)) if n else memoryview(b"")
    try:
        return _serial.loads(view)
    except _serial.RemoteError as e:
        raise _errors.task_error(e, what) from None


class GettableRef:
    """A ref that is not an object's: get() (and so troupe.get) resolves it by its own
    get(timeout=): a compiled graph's output (troupe.dag.CompiledDAGRef)."""

    def get(self, timeout=None):
        raise NotImplementedError


def get_one(ref, deadline, what="get"):
    """The value of one ObjectRef by deadline (time.monotonic(), None: none); what names
    the value in a method's error."""
    if deadline is None and fast is not None:  # (the hot path, in C)
        v = fast.get(ref, None)
        if v is not _NOT_TAKEN:
            return v
    return _get_general(ref, deadline, what)


_NOT_TAKEN = object()  # (_fast.get's answer where the general path is to take it)


def _get_general(ref, deadline, what):
    """get_one's path through ctypes: every value and error."""
    if not isinstance(ref, ObjectRef):
        raise ValueError(f"Invalid type of object refs, {type(ref)}, is given. 'object_refs' "
                         f"must either be an ObjectRef or a list of ObjectRefs.")
    rt = _rt if _rt is not None else runtime()
    data, n = c_void_p(), c_size_t()
    if deadline is None:
        rc = lib.tr_get(rt, ref._c, _SLICE_MS, byref(data), byref(n))
        while rc == _errors.ETIMEDOUT:
            rc = lib.tr_get(rt, ref._c, _SLICE_MS, byref(data), byref(n))
    else:
        while True:
            ms = min(max(0, int((deadline - time.monotonic()) * 1000)), _SLICE_MS)
            rc = lib.tr_get(rt, ref._c, ms, byref(data), byref(n))
            if rc != _errors.ETIMEDOUT or time.monotonic() >= deadline:
                break
    if rc == 0:
        if not ref._owned:
            ref._hold()
        return _decode(data.value or 0, n.value, ref, what)
    return _get_failed(rc, ref, what)


def _decode_got(ref, addr, n):
    """_fast.get's: the value of ref (held here), got: n bytes at addr that are no plain
    pickle."""
    return _decode(addr, n, ref, "get")


def _get_one_slow(ref):
    """get_one(ref) with no timeout, by its general path (_fast's get calls it for a ref
    it does not decode itself)."""
    return _get_general(ref, None, "get")


def _get_failed(rc, ref, what):
    """Raises the error of a get of ref that ended with rc."""
    if rc == _errors.ETIMEDOUT:
        raise GetTimeoutError(f"troupe.get: {ref} not ready within the timeout")
    # (an object no holder kept, freed: Ray's ObjectLostError, its code still the C one)
    check(rc, f"{ref} (released?)" if rc == _errors.ESTALE else what,
          ObjectLostError if rc == _ENOTFOUND else None)


_ENOTFOUND = _ffi.STATUS["TR_ENOTFOUND"]


def _get(refs, *, timeout=None):
    """The value of a ref, or of each ref of a list (in order), waiting up to timeout
    seconds in all (None: no limit). A method's exception is raised here, with its remote
    traceback; a dead actor raises ActorDiedError; a timeout GetTimeoutError. (Where
    troupe._fast is used, troupe.get is its Get, which has taken the plain cases before
    it comes here.)"""
    deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
    if isinstance(refs, ObjectRef):
        return get_one(refs, deadline)
    if isinstance(refs, GettableRef):
        return refs.get(timeout=timeout)
    if isinstance(refs, (list, tuple)):
        if any(isinstance(r, GettableRef) for r in refs) and \
                not all(isinstance(r, GettableRef) for r in refs):
            raise ValueError("Invalid type of object refs. 'object_refs' must be a list of "
                             "CompiledDAGRefs if there is any CompiledDAGRef within it.")
        return [r.get(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
                if isinstance(r, GettableRef) else get_one(r, deadline) for r in refs]
    raise ValueError(f"'object_refs' must either be an ObjectRef or a list of ObjectRefs, not "
                     f"{type(refs).__name__}")


def is_done(ref):
    """Whether ref's value (or its error) is in, without waiting."""
    ready, nready = (ctypes.c_uint8 * 1)(), c_size_t()
    return lib.tr_wait(runtime(), (Ref * 1)(ref._c), 1, 1, 0, ready, byref(nready)) == 0 \
        and nready.value >= 1


def wait(refs, *, num_returns=1, timeout=None, fetch_local=True):
    """(ready, not_ready): the first num_returns refs done (in the order given), within
    timeout seconds (None: no limit). Values stay in the node's store either way
    (fetch_local=False is ignored)."""
    if not fetch_local:
        _errors.ignored("troupe.wait", ["fetch_local"], stacklevel=2)
    refs = list(refs)
    if not all(isinstance(r, (ObjectRef, ObjectRefGenerator)) for r in refs):
        raise TypeError("troupe.wait wants a list of ObjectRefs (or ObjectRefGenerators)")
    if not refs:  # (Ray's: nothing to wait for)
        return [], []
    if num_returns < 0 or num_returns > len(refs):
        raise ValueError(f"num_returns {num_returns} with {len(refs)} refs")
    if len(set(refs)) != len(refs):
        raise ValueError("troupe.wait: the refs are not unique")
    if not refs:
        return [], []
    if any(isinstance(r, ObjectRefGenerator) for r in refs):
        return _wait_generators(refs, num_returns, timeout)
    rt = runtime()
    arr = (Ref * len(refs))(*[r._c for r in refs])
    ready = (ctypes.c_uint8 * len(refs))()
    nready = c_size_t()
    deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
    while True:
        ms = _SLICE_MS if deadline is None else min(
            _SLICE_MS, max(0, int((deadline - time.monotonic()) * 1000)))
        check(lib.tr_wait(rt, arr, len(refs), num_returns, ms, ready, byref(nready)),
              "troupe.wait")
        if nready.value >= num_returns or (deadline is not None and
                                           time.monotonic() >= deadline):
            break
    done = [r for r, k in zip(refs, ready) if k][:num_returns]
    taken = set(id(r) for r in done)
    return done, [r for r in refs if id(r) not in taken]


_GEN_POLL_S = 0.002  # troupe.wait of generators: how often it looks at them


def _wait_generators(refs, num_returns, timeout):
    """troupe.wait with ObjectRefGenerators among refs (Ray's): a generator is ready when
    its next item is in (or its end), a ref when it is done. Looks every _GEN_POLL_S,
    sleeping on the plain refs' tr_wait meanwhile."""
    rt = runtime()
    plain = [r for r in refs if isinstance(r, ObjectRef)]
    arr = (Ref * len(plain))(*[r._c for r in plain]) if plain else None
    flags = (ctypes.c_uint8 * max(1, len(plain)))()
    nready = c_size_t()
    deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
    while True:
        if plain:
            check(lib.tr_wait(rt, arr, len(plain), 0, 0, flags, byref(nready)), "troupe.wait")
        done_plain = {id(r) for r, k in zip(plain, flags) if k}
        ready = [r for r in refs if (id(r) in done_plain if isinstance(r, ObjectRef)
                                     else r._ready())]
        now = time.monotonic()
        if len(ready) >= num_returns or (deadline is not None and now >= deadline):
            break
        left = _GEN_POLL_S if deadline is None else min(_GEN_POLL_S, deadline - now)
        ms = max(0, int(left * 1000))
        if plain and len(done_plain) < len(plain):  # (a plain ref may finish meanwhile)
            check(lib.tr_wait(rt, arr, len(plain), len(done_plain) + 1, ms, flags,
                              byref(nready)), "troupe.wait")
        else:
            time.sleep(left)
    done = ready[:num_returns]
    taken = set(id(r) for r in done)
    return done, [r for r in refs if id(r) not in taken]


def put_payload(parts, total):
    """A payload (_serial.dumps' parts) as a new sealed object of the store."""
    rt = runtime()
    out, buf = Ref(), c_void_p()
    check(lib.tr_object_create(rt, total, byref(out), byref(buf)), "troupe.put")
    try:
        if total:
            dst = (ctypes.c_char * total).from_address(buf.value)
            _serial.write_into(memoryview(dst).cast("B"), parts)
    except BaseException:
        lib.tr_ref_release(rt, out)
        raise
    check(lib.tr_object_seal(rt, out), "troupe.put")
    return ObjectRef(out)


def put(value):
    """Puts value in the node's shared-memory store (one copy) and returns its ref. A
    numpy array comes back from get as a read-only array over the store's memory."""
    if isinstance(value, ObjectRef):
        raise TypeError("troupe.put of an ObjectRef: pass the ref itself")
    parts, total, refs = _serial.dumps(value)
    return put_parts(parts, total, refs)


def put_parts(parts, total, refs):
    """A payload (_serial.dumps' parts, and the refs in it) as a new object: one that
    holds refs keeps their values alive as long as it lives (tr_put_refs)."""
    if refs:
        data = _serial.join(parts, total)
        held = list(dict.fromkeys(refs))
        arr = (Ref * len(held))(*[r._c for r in held])
        out = Ref()
        check(lib.tr_put_refs(runtime(), data, len(data), arr, len(held), byref(out)),
              "troupe.put")
        return ObjectRef(out)
    return put_payload(parts, total)


def object_store_stats():
    s = _ffi.StoreStats()
    lib.tr_store_stats_init(byref(s))
    check(lib.tr_object_stats(runtime(), byref(s)), "object_stats")
    return {f: getattr(s, f) for f, _ in s._fields_ if f != "struct_size"}


# ------------------------------------------------------------------ calls

def args_with_refs(args, kwargs):
    """args and kwargs with each top-level ObjectRef replaced by an ArgRef, and the refs."""
    refs = []

    def sub(x):
        if isinstance(x, ObjectRef):
            refs.append(x)
            return _serial.ArgRef(len(refs) - 1, x.binary())
        return x

    if not any(isinstance(x, ObjectRef) for x in args) and not any(
            isinstance(x, ObjectRef) for x in kwargs.values()):
        return args, kwargs, refs
    return tuple(sub(x) for x in args), {k: sub(v) for k, v in kwargs.items()}, refs


def encode_args(args, kwargs):
    """(payload, refs, contained): a call's (or a task's) arguments as the worker decodes
    them. refs: the top-level ObjectRefs (each an ArgRef in the payload, resolved before
    the function runs), then the arguments' object when they are over INLINE_MAX;
    contained: the refs nested inside the arguments."""
    payload = _serial.plain_args(args, kwargs)
    if payload is not None and len(payload) <= INLINE_MAX:  # (scalars: no ref to look for)
        return payload, [], []
    a, kw, refs = args_with_refs(args, kwargs)
    parts, total, nested = _serial.dumps((a, kw))
    all_refs = list(refs)
    # refs inside the arguments (not the top-level ones, which the worker resolves): kept
    # alive until the call is done, for the method to borrow (docs/OWNERSHIP.md)
    if nested:
        top = set(refs)
        contained = [r for r in dict.fromkeys(nested) if r not in top]
    else:
        contained = nested
    if total > INLINE_MAX:  # through the store: one copy in, a view for the worker
        obj = put_payload(parts, total)
        payload = OBJECT_ARGS + obj.binary()
        all_refs.append(obj)
    else:
        payload = _serial.join(parts, total)
    return payload, all_refs, contained


def check_num_returns(n, where):
    """num_returns as Ray takes it: an int >= 0, or "streaming" or "dynamic" for a
    generator (ValueError otherwise)."""
    if n in GENERATOR_MODES:
        return n
    if isinstance(n, str) or isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise ValueError(f"The keyword 'num_returns' only accepts None, a non-negative "
                         f"integer, or \"dynamic\" (or \"streaming\" for a generator): "
                         f"{where}: num_returns={n!r}")
    if n < 0 or n > 1024:
        raise ValueError(f"The keyword 'num_returns' only accepts None, a non-negative "
                         f"integer, or \"dynamic\" ({where}: num_returns={n!r}; troupe "
                         f"takes up to 1024)")
    return int(n)


def with_generator(payload, mode):
    """A call's or task's arguments' payload for num_returns=mode: "streaming", the worker
    yields the generator's items one by one; "dynamic", it replies their refs at its end."""
    return GENERATOR_MODES[mode] + payload


class DynamicObjectRefGenerator:
    """The value of a num_returns="dynamic" task's or call's ref (Ray's): the refs of the
    items its generator yielded, in order (iterate it; len() counts them)."""

    def __init__(self, refs):
        self._refs = list(refs)

    def __iter__(self):
        return iter(self._refs)

    def __len__(self):
        return len(self._refs)

    def __repr__(self):
        return f"DynamicObjectRefGenerator({len(self._refs)} refs)"


STREAMING_RETURNS = ctypes.c_size_t(-1).value  # (troupe.h's TR_STREAMING)


_serial.register_plain(ObjectRef)  # (its __reduce__: _rebuild_ref, by name)


class ObjectRefGenerator:
    """What a generator's task or method call gives (Ray's, num_returns="streaming", a
    generator function's default): iterate it, sync or async, for the refs of the items
    the generator yields, each as soon as it has been yielded (tr_stream_next), while the
    generator runs on. An exception the generator raised after some items is the ref
    after theirs (get raises it), as is a failure of the call as a whole (its arguments,
    a dead worker)."""

    def __init__(self, ref):
        self._ref = ref
        self._end = False   # every item was taken
        self._done = False  # ...and the ending ref too (a failure's)
        self._peeked = None  # the next item's ref, taken by _ready

    def __iter__(self):
        return self

    def _ready(self):
        """Whether next() would not wait (an item is in, or the end): troupe.wait's."""
        if self._peeked is None and not self._end:
            out = Ref()
            rc = lib.tr_stream_next(self._ref._rt, self._ref._c, 0, byref(out))
            if rc == 0:
                self._peeked = ObjectRef(out)
            elif rc == 1:
                self._end = True
            elif rc != _errors.ETIMEDOUT:
                check(rc, "the next item of a generator")
        return self._peeked is not None or self._end

    def _next(self, timeout_ms):
        """The next item's ref; the call's ref once, if it failed; None at the end.
        Raises GetTimeoutError if none came within timeout_ms."""
        if self._peeked is not None:
            ref, self._peeked = self._peeked, None
            return ref
        if self._done:
            return None
        if not self._end:
            out = Ref()
            deadline = None if timeout_ms < 0 else time.monotonic() + timeout_ms / 1000
            while True:  # (in slices: a KeyboardInterrupt gets through)
                ms = _SLICE_MS if deadline is None else \
                    min(max(0, int((deadline - time.monotonic()) * 1000)), _SLICE_MS)
                rc = lib.tr_stream_next(self._ref._rt, self._ref._c, ms, byref(out))
                if rc != _errors.ETIMEDOUT or (deadline is not None and
                                               time.monotonic() >= deadline):
                    break
            if rc == 0:
                return ObjectRef(out)
            if rc == _errors.ETIMEDOUT:
                raise GetTimeoutError("the next item of a generator: none within the timeout")
            if rc != 1:
                check(rc, "the next item of a generator")
            self._end = True
        self._done = True
        try:
            get_one(self._ref, None)  # (done: at once)
        except Exception:  # (the generator raised, or the call failed: its ref says why)
            return self._ref
        return None

    def __next__(self):
        ref = self._next(-1)
        if ref is None:
            raise StopIteration
        return ref

    def __aiter__(self):
        return self

    async def __anext__(self):
        ref = await asyncio.get_running_loop().run_in_executor(None, self._next, -1)
        if ref is None:
            raise StopAsyncIteration
        return ref

    def completed(self):
        """A ref that is ready once the generator has run to its end."""
        return self._ref

    def is_finished(self):
        """Whether every item's ref has been taken."""
        return self._done

    def __repr__(self):
        return f"ObjectRefGenerator({self._ref})"


def multi_refs(outs):
    """ObjectRefs of the k refs tr_call_multi / tr_task_submit_multi wrote into outs."""
    return [ObjectRef(Ref.from_buffer_copy(r)) for r in outs]


def call_one(actor_id, method, args, kwargs, cls_name):
    """call() of one result (num_returns=1) of a method of class cls_name, the words of
    its error made only if it fails. The hot path: arguments of builtin scalars go in one
    pickle with no look for refs."""
    payload = _plain_args(args, kwargs)
    if payload is None or len(payload) > INLINE_MAX:
        return call(actor_id, method, args, kwargs, f"calling {cls_name}.{method}", 1)
    out = Ref()
    rc = _tr_call(_rt if _rt is not None else runtime(), actor_id, method.encode(), payload,
                  len(payload), byref(out))
    if rc:
        check(rc, f"calling {cls_name}.{method}")
    return fresh_ref(out)


_plain_args = _serial.plain_args
_tr_call = lib.tr_call


def call(actor_id, method, args, kwargs, what, num_returns=1, retries=None):
    """Sends a method call to the actor of actor_id (an _ffi.ActorId); returns the ref of
    its result at once (num_returns k > 1: a list of k refs, each one part of the result;
    0: None, the call runs all the same). what: the call, as its error names it.
    retries: the call's own max_task_retries (None: the actor's)."""
    mode = num_returns if num_returns in GENERATOR_MODES else None
    if retries is not None:
        return _call_opts(actor_id, method, args, kwargs, what, num_returns, retries)
    if mode == "streaming":
        return _call_stream(actor_id, method, args, kwargs, what)
    if mode is None and num_returns > 1:
        return _call_multi(actor_id, method, args, kwargs, what, num_returns)
    rt = runtime()
    payload, all_refs, contained = encode_args(args, kwargs)
    if mode:
        payload = with_generator(payload, mode)
    out = Ref()
    name = method.encode()
    if contained:
        arr = (Ref * len(all_refs))(*[r._c for r in all_refs])
        carr = (Ref * len(contained))(*[r._c for r in contained])
        rc = lib.tr_call_contains(rt, actor_id, name, payload, len(payload), arr, len(all_refs),
                                  carr, len(contained), byref(out))
    elif all_refs:
        arr = (Ref * len(all_refs))(*[r._c for r in all_refs])
        rc = lib.tr_call_refs(rt, actor_id, name, payload, len(payload), arr, len(all_refs),
                              byref(out))
    else:
        rc = lib.tr_call(rt, actor_id, name, payload, len(payload), byref(out))
    check(rc, what)
    ref = ObjectRef(out)
    if num_returns == 1 or mode == "dynamic":
        return ref
    if mode:
        return ObjectRefGenerator(ref)
    forget(ref)  # (0: Ray's None; the call runs all the same)
    return None


def encode_multi(args, kwargs, k):
    """(payload, refs) of a call with num_returns k > 1 (or "streaming"), as encode_args'.
    Refs nested in the arguments go with the arguments into an object of the store
    (tr_put_refs keeps them alive as long as it; the call keeps it until it is done), as
    tr_call_multi takes no contained refs."""
    a, kw, refs = args_with_refs(args, kwargs)
    parts, total, nested = _serial.dumps((a, kw))
    top = set(refs)
    contained = [r for r in dict.fromkeys(nested) if r not in top]
    all_refs = list(refs)
    if contained:
        data = _serial.join(parts, total)
        arr = (Ref * len(contained))(*[r._c for r in contained])
        out = Ref()
        check(lib.tr_put_refs(runtime(), data, len(data), arr, len(contained), byref(out)),
              "the arguments' object")
        obj = ObjectRef(out)
        payload = OBJECT_ARGS + obj.binary()
        all_refs.append(obj)
    elif total > INLINE_MAX:
        obj = put_payload(parts, total)
        payload = OBJECT_ARGS + obj.binary()
        all_refs.append(obj)
    else:
        payload = _serial.join(parts, total)
    return (with_generator(payload, k) if k == "streaming" else with_returns(payload, k),
            all_refs)


def with_returns(payload, k):
    """A call's or task's arguments' payload for num_returns k > 1: k first (the worker
    replies k parts)."""
    return RETURNS + k.to_bytes(4, "little") + payload


def _call_multi(actor_id, method, args, kwargs, what, k):
    """call() with num_returns k > 1 (tr_call_multi): a list of k refs."""
    rt = runtime()
    payload, all_refs = encode_multi(args, kwargs, k)
    arr = (Ref * len(all_refs))(*[r._c for r in all_refs]) if all_refs else None
    outs = (Ref * k)()
    check(lib.tr_call_multi(rt, actor_id, method.encode(), payload, len(payload), arr,
                            len(all_refs), k, outs), what)
    return multi_refs(outs)


def _call_opts(actor_id, method, args, kwargs, what, num_returns, retries):
    """call() of a method with its own max_task_retries (tr_call_opts), any num_returns."""
    rt = runtime()
    mode = num_returns if num_returns in GENERATOR_MODES else None
    opts = _ffi.CallOptions()
    lib.tr_call_options_init(byref(opts))
    opts.max_task_retries = int(retries)
    if mode == "streaming" or (mode is None and num_returns > 1):
        payload, all_refs = encode_multi(args, kwargs, num_returns)
        k = 1 if mode else num_returns
        opts.num_returns = STREAMING_RETURNS if mode else k
    else:
        payload, all_refs, contained = encode_args(args, kwargs)
        if mode:
            payload = with_generator(payload, mode)
        k = 1
        if contained:
            carr = (Ref * len(contained))(*[r._c for r in contained])
            opts.contained, opts.n_contained = carr, len(contained)
    arr = (Ref * len(all_refs))(*[r._c for r in all_refs]) if all_refs else None
    outs = (Ref * k)()
    check(lib.tr_call_opts(rt, actor_id, method.encode(), payload, len(payload), arr,
                           len(all_refs), byref(opts), outs), what)
    if mode == "streaming":
        return ObjectRefGenerator(multi_refs(outs)[0])
    if k > 1:
        return multi_refs(outs)
    ref = ObjectRef(Ref.from_buffer_copy(outs[0]))
    if num_returns == 1 or mode == "dynamic":
        return ref
    forget(ref)  # (0: Ray's None; the call runs all the same)
    return None


def _call_stream(actor_id, method, args, kwargs, what):
    """call() with num_returns="streaming" (tr_call_multi's TR_STREAMING): an
    ObjectRefGenerator, whose items come as the method yields them."""
    payload, all_refs = encode_multi(args, kwargs, "streaming")
    arr = (Ref * len(all_refs))(*[r._c for r in all_refs]) if all_refs else None
    outs = (Ref * 1)()
    check(lib.tr_call_multi(runtime(), actor_id, method.encode(), payload, len(payload), arr,
                            len(all_refs), STREAMING_RETURNS, outs), what)
    return ObjectRefGenerator(multi_refs(outs)[0])


# ------------------------------------------------------------------ num_returns=0

_forgotten = []  # refs of num_returns=0 calls and tasks, until they are done
_forget_cv = threading.Condition()
_forget_thread = [None]


def forget(ref):
    """A call made with num_returns=0 (Ray's: the caller gets None, the call runs): a
    thread of the package's waits for its ref (tr_wait, which sends the call if it is still
    queued: nothing else would, with no ref left to get) and drops it when it is done;
    its value or error is let go."""
    with _forget_cv:
        _forgotten.append(ref)
        if _forget_thread[0] is None:
            t = threading.Thread(target=_forget_loop, args=(ref._rt,), daemon=True,
                                 name="troupe-num_returns-0")
            _forget_thread[0] = t
            t.start()
        _forget_cv.notify()


def _forget_loop(rt):
    while True:
        with _forget_cv:
            while not _forgotten and _rt is rt:
                _forget_cv.wait(1.0)
            if _rt is not rt:
                return
            refs = list(_forgotten)
        arr = (Ref * len(refs))(*[r._c for r in refs])
        ready = (ctypes.c_uint8 * len(refs))()
        nready = c_size_t()
        if lib.tr_wait(rt, arr, len(refs), 1, 50, ready, byref(nready)) != 0:
            ready = [1] * len(refs)  # (a ref that cannot be waited for: let go)
        done = [r for r, k in zip(refs, ready) if k]
        if done:
            with _forget_cv:
                gone = set(map(id, done))
                _forgotten[:] = [r for r in _forgotten if id(r) not in gone]
            del done, refs


@on_shutdown
def _stop_forgetting():
    """(troupe.shutdown: _rt is None already) the thread ends before the runtime does."""
    with _forget_cv:
        t, _forget_thread[0] = _forget_thread[0], None
        _forget_cv.notify_all()
    if t is not None:
        t.join()
    with _forget_cv:
        _forgotten.clear()


# ------------------------------------------------------------------ (added: issue 24)

def _views_of(rt):
    """The _Keeps alive (arrays over the store's memory) of runtime rt's refs."""
    return [k for k in list(_views) if getattr(k.ref, "_rt", None) is rt]


_actor_id = None  # in an actor's process: its id (16 bytes), set by the worker


def set_current_actor(actor_id):
    """In a worker: the id (16 bytes) of the actor this process runs."""
    global _actor_id
    _actor_id = bytes(actor_id)


def current_actor_id():
    """The id (16 bytes) of the actor this process runs; None in a driver."""
    return _actor_id


exit_requested = False  # exit_actor() was called here: the method's end ends the actor
# (set by request_exit only: troupe._fast keeps its own copy)


def request_exit():
    global exit_requested
    exit_requested = True
    if fast is not None:
        fast.set_exit_requested()

current_call = threading.local()  # .ctx: the tr_ctx of the call or task this thread runs
# (by the Python paths; one troupe._fast runs is its current_ctx())


def current_call_canceled():
    """Whether the call or task this thread runs was canceled (troupe.cancel by a caller
    on its node): False outside one."""
    ctx = fast.current_ctx() if fast is not None else None  # (one _fast runs: its own)
    if ctx is None:
        ctx = getattr(current_call, "ctx", None)
    return bool(ctx is not None and lib.tr_ctx_canceled(ctx))


def cancel(ref, *, force=False, recursive=True):
    """Cancels the task or actor call of ref (Ray's ray.cancel): get of it raises
    TaskCancelledError. A call not yet sent never runs; one running runs on and its result
    is dropped, unless force (tasks only: their worker is stopped). recursive is taken
    (a task's own children are not canceled with it)."""
    if isinstance(ref, ObjectRefGenerator):  # (its call: the items yielded stay)
        ref = ref._ref
    if not isinstance(ref, ObjectRef):
        raise TypeError(f"troupe.cancel wants an ObjectRef, got {type(ref).__name__}")
    check(lib.tr_cancel(runtime(), ref._c, 1 if force else 0), "troupe.cancel")


# ------------------------------------------------------------------ the C extension

def _remote_general(method, /, *args, **kwargs):
    """An actor method's remote() by its class's code (_fast.Remote gives it the calls it
    does not make itself: arguments not all scalars, a signature's error, no troupe)."""
    return type(method).remote(method, *args, **kwargs)


def _call_failed(rc, cls_name, method):
    check(rc, f"calling {cls_name}.{method}")


def _submit_failed(rc, function_name):
    check(rc, f"submitting task {function_name}")


def _load_fast():
    """troupe._fast (the plain call's two ends in C, _fast.c), configured with this
    library's functions and this module's objects; None where it is not built, the
    interpreter is older than 3.11, or TROUPE_NO_EXTENSION=1: the ctypes paths then do
    all (payloads that mean the same values to both)."""
    if not _use_fast:
        return None
    addr = {name: ctypes.cast(getattr(lib, name), c_void_p).value
            for name in ("tr_call", "tr_call_nowait", "tr_get", "tr_ctx_method",
                         "tr_ctx_started", "tr_ctx_reply", "tr_ref_release", "tr_task_submit",
                         "tr_ctx_num_refs", "tr_ctx_ref")}
    _fast_module.configure(addr, {
        "dumps": pickle.dumps, "loads": pickle.loads, "protocol": 5, "Ref": Ref,
        "ObjectRef": ObjectRef, "not_taken": _NOT_TAKEN, "holds": _holds,
        "call_failed": _call_failed, "submit_failed": _submit_failed, "simple": _serial.SIMPLE_TYPES,
        "etimedout": _errors.ETIMEDOUT, "slice_ms": _SLICE_MS, "inline_max": INLINE_MAX,
        "copy_max": _COPY_MAX, "holds_lock": _holds_lock, "remote_general": _remote_general, "decode": _decode_got})
    return _fast_module


fast = _load_fast()  # (None: the ctypes paths do all)


def _make_get():
    """troupe.get: _get, or where troupe._fast is used its Get (plain cases with no Python
    frame, every other through _get), dressed as _get (inspect.signature sees _get)."""
    if fast is None:
        return _get
    g = fast.Get(_get, _get_one_slow)
    for k in ("__name__", "__qualname__", "__doc__", "__module__"):
        setattr(g, k, getattr(_get, k))
    g.__name__ = g.__qualname__ = "get"
    g.__wrapped__ = _get
    return g


get = _make_get()
