"""The worker: ``python -m troupe._worker``, started by a node (the config key
worker_command that troupe.init sets) as an actor's process or as the embedded node.

It registers one C class, "troupe.py": its constructor unpickles the Python class and its
arguments and makes the instance; its dispatch function (tr_actor_class.dispatch) runs the
instance's method of the call's name (tr_ctx_method) and replies the pickled result, or
the pickled exception with its traceback. It registers one task dispatch too
(tr_config_add_function with no name): the node's task pool runs this same command, and
each task's payload names its Python function by a digest (troupe.remote_function).
"""
import asyncio
import atexit
import collections.abc
import concurrent.futures
import ctypes
import functools
import inspect
import os
import pickle
import signal
import sys
import threading
import traceback
import types

from . import _errors, _ffi, _runtime, _serial, remote_function
from ._errors import check
from ._runtime import OBJECT_ARGS, RETURNS
from .actor import ENV, EXIT, PY_CLASS, is_async_class
from .exceptions import ActorExit
from .dag import FORGET, REGISTER, STEP_PREFIX
from .remote_function import FN_IN_REF, read_head

lib, byref = _ffi.lib, _ffi.byref
_state = {"loop": None}


def class_functions(cls):
    """name -> the plain function cls has by that name (its own or inherited; no static or
    class method): what a call of that method runs, with the instance first, however the
    instance or the class change later, as Ray's workers make an actor's method
    executors (the class's functions) when its class loads."""
    out = {}
    for name in dir(cls):
        f = inspect.getattr_static(cls, name, None)
        if type(f) is types.FunctionType:
            out[name] = f
    return out


def set_runtime(ctx):
    if not _runtime.is_initialized():
        _runtime.attach_worker(ctypes.c_void_p(lib.tr_ctx_runtime(ctx)))


def resolve(x, ctx):
    if isinstance(x, _serial.ArgRef):
        ref = _runtime.unheld_ref(x.id)
        if ref.is_object():  # writable, zero-copy until written (copy-on-write)
            return _runtime.get_writable(ref, "argument")
        data, n = ctypes.c_void_p(), ctypes.c_size_t()
        check(lib.tr_ctx_ref(ctx, x.index, byref(data), byref(n)), "a ref argument")
        view = memoryview(bytearray(ctypes.string_at(data.value, n.value)))  # (writable)
        try:
            return _serial.loads(view)
        except _serial.RemoteError as e:
            raise _errors.task_error(e, "an argument's call") from None
    return x


def call_payload(raw):
    """(num_returns, the arguments' payload) of a call's or a task's payload (bytes):
    num_returns k > 1 comes first (_runtime.RETURNS + u32 k), a generator's mode as its
    mark ("streaming", "dynamic"), else it is 1."""
    n = len(raw)
    if raw[:4] == _serial.MAGIC0:  # (no out-of-band buffer: no array to make writable)
        return 1, raw
    payload = bytearray(raw)  # (the arrays in it are the method's own, writable)
    if payload[:4] == RETURNS and n >= 8:
        return int.from_bytes(payload[4:8], "little"), payload[8:]
    if payload[:4] == _runtime.STREAMING:
        return "streaming", payload[4:]
    if payload[:4] == _runtime.DYNAMIC:
        return "dynamic", payload[4:]
    return 1, payload


def decode_args(ctx, addr, n):
    return decode_payload(ctx, bytearray(ctypes.string_at(addr, n)) if n else bytearray())


def decode_payload(ctx, payload):
    """(args, kwargs) of a call's arguments (bytes), refs resolved."""
    n = len(payload)
    if payload[:4] == _serial.MAGIC0:  # (the fast path: a plain pickle)
        a, kw = pickle.loads(memoryview(payload)[4:])
    elif payload[:4] == OBJECT_ARGS and n == 20:
        ref = _runtime.unheld_ref(bytes(payload[4:20]))
        a, kw = _runtime.get_writable(ref, "arguments")
    else:  # (a bytearray: the arrays in it are the method's own, writable)
        a, kw = _serial.loads(memoryview(payload))
    for x in a:
        if type(x) is _serial.ArgRef:
            break
    else:
        if not kw or not any(type(v) is _serial.ArgRef for v in kw.values()):
            return a, kw
    return tuple(resolve(x, ctx) for x in a), {k: resolve(v, ctx) for k, v in kw.items()}


def reply(ctx, data):
    check(lib.tr_ctx_reply(ctx, data, len(data)), f"replying {len(data)} bytes")


def reply_contains(ctx, data, refs):
    """A result with refs inside: they live with it until the caller has borrowed
    them (docs/OWNERSHIP.md)."""
    held = list(dict.fromkeys(refs))
    arr = (_ffi.Ref * len(held))(*[r._c for r in held])
    check(lib.tr_ctx_reply_contains(ctx, data, len(data), arr, len(held)),
          f"replying {len(data)} bytes with {len(held)} refs")


def reply_value(ctx, result):
    parts, total, refs = _serial.dumps(result)
    if refs:
        reply_contains(ctx, _serial.join(parts, total), refs)
    else:
        reply(ctx, _serial.join(parts, total))


def check_results(result, k):
    """A method's result for num_returns k > 1: a tuple or list of k values (a generator's
    values too, as Ray takes them), else Ray's ValueError. Returns the sequence."""
    if inspect.isgenerator(result):
        result = list(result)
    if not isinstance(result, (tuple, list)):
        raise ValueError(f"Task returned a {type(result).__name__}, not a sequence of "
                         f"{k} objects, but num_returns={k}.")
    if len(result) != k:
        raise ValueError(f"Task returned {len(result)} objects, but num_returns={k}.")
    return result


def yield_item(ctx, value):
    """One item of the call's stream, to its caller now (tr_ctx_yield; refs in it live as
    long as the item's ref)."""
    parts, total, refs = _serial.dumps(value)
    data = _serial.join(parts, total)
    if refs:
        held = list(dict.fromkeys(refs))
        arr = (_ffi.Ref * len(held))(*[r._c for r in held])
        check(lib.tr_ctx_yield_contains(ctx, data, len(data), arr, len(held)),
              f"yielding {len(data)} bytes with {len(held)} refs")
    else:
        check(lib.tr_ctx_yield(ctx, data, len(data)), f"yielding {len(data)} bytes")


def stream_items(ctx, result):
    """num_returns="streaming": each item the generator (sync or async) yields goes to the
    caller as it comes (yield_item), where its ref is ready while the generator runs on.
    An exception raised after some items is the call's (the caller's ObjectRefGenerator
    gives it after them)."""
    if inspect.isasyncgen(result):
        async def each():
            async for item in result:
                yield_item(ctx, item)
        loop_result(loop_future(each()))
    elif inspect.isgenerator(result) or isinstance(result, collections.abc.Iterator):
        for item in result:
            yield_item(ctx, item)
    else:
        raise TypeError(f"num_returns='streaming' needs a generator: the function returned "
                        f"a {type(result).__name__}")


def generator_refs(result):
    """The refs of the items a generator (sync or async) yields, each put in the store as
    it comes, in a DynamicObjectRefGenerator (num_returns="dynamic"; an exception after
    some items is a last ref's, whose get raises it, as Ray's; one before any fails the
    call)."""
    refs = []
    try:
        if inspect.isasyncgen(result):
            async def collect():
                async for item in result:
                    refs.append(_runtime.put(item))
            loop_result(loop_future(collect()))
        elif inspect.isgenerator(result) or isinstance(result, collections.abc.Iterator):
            for item in result:
                refs.append(_runtime.put(item))
        else:
            raise TypeError(f"num_returns='dynamic' needs a generator: the function returned "
                            f"a {type(result).__name__}")
    except Exception as e:
        if not refs:
            raise
        # Ray's: an exception after some items is the last ref's (its get raises it)
        err = _serial.dump_error(e, traceback.format_exc())
        refs.append(_runtime.put_payload([err], len(err)))
    except BaseException:
        refs.clear()  # (not when a cycle through the traceback is collected)
        raise
    return _runtime.DynamicObjectRefGenerator(refs)


def reply_results(ctx, result, k):
    """The result of a call made with num_returns k: one value (k == 1), or a tuple or list
    of k values, each serialized and replied as one part (tr_ctx_reply_multi): the
    caller's k refs each get one. A wrong number of values is Ray's ValueError, raised
    in the caller at get of each ref. A generator's: "streaming", its items one by one as
    it yields them (stream_items), then None; "dynamic", its items' refs as one value
    (generator_refs). After exit_actor() (caught by the method), the actor ends instead
    (ActorExit: dispatch's end_actor)."""
    if _runtime.exit_requested:
        raise ActorExit("exit_actor() was called")
    if k == 1:
        if type(result) in _serial.SIMPLE:  # (the fast path: a plain pickle)
            data = _serial.MAGIC0 + pickle.dumps(result, protocol=5)
            rc = lib.tr_ctx_reply(ctx, data, len(data))
            return check(rc, f"replying {len(data)} bytes") if rc else None
        return reply_value(ctx, result)
    if k == "streaming":
        stream_items(ctx, result)
        return reply_value(ctx, None)
    if k == "dynamic":
        return reply_value(ctx, generator_refs(result))
    err = None
    if inspect.isgenerator(result):  # (Ray's: values up to an exception, then the error)
        values = []
        try:
            for v in result:
                values.append(v)
                if len(values) > k:
                    result.close()  # (its finally runs now, env_vars still set)
                    break
        except Exception as e:
            if not values:  # (before any value: every ref's)
                raise
            lib.tr_ctx_failed(ctx)  # (the node's metrics count it as an error)
            if len(values) < k:
                err = _serial.dump_error(e, traceback.format_exc())
            else:  # (no ref left for it: the values stand, the error is logged, as Ray's)
                print(f"Unhandled error: a generator task threw an exception after all "
                      f"{k} of its return values were made:\n{traceback.format_exc()}",
                      file=sys.stderr, flush=True)
        result = values
    if err is None:
        result = check_results(result, k)
    data, held = [], []
    for v in result:
        parts, total, refs = _serial.dumps(v)
        held.extend(refs)
        data.append(_serial.join(parts, total))
    data += [err] * (k - len(data))  # (the refs after the values the generator gave)
    reply_parts(ctx, data, list(dict.fromkeys(held)))


def reply_parts(ctx, data, refs=()):
    """Replies the payloads of data (bytes), one part each (tr_ctx_reply_multi), and with
    refs (ObjectRefs in them) tr_ctx_reply_multi_contains, which keeps them alive as long
    as any of the caller's refs lives."""
    k = len(data)
    ptrs = (ctypes.c_void_p * k)(*[ctypes.cast(d, ctypes.c_void_p) for d in data])
    lens = (ctypes.c_size_t * k)(*[len(d) for d in data])
    if refs:
        arr = (_ffi.Ref * len(refs))(*[r._c for r in refs])
        check(lib.tr_ctx_reply_multi_contains(ctx, ptrs, lens, k, arr, len(refs)),
              f"replying {k} results")
        return
    check(lib.tr_ctx_reply_multi(ctx, ptrs, lens, k), f"replying {k} results")


def reply_error(ctx, e, k=1, text=None):
    """The exception e (being handled, or its traceback's text given) as the call's
    result (each of its k results, for num_returns k > 1), or as its C error where it
    cannot be pickled."""
    lib.tr_ctx_failed(ctx)  # (the node's metrics count it as an error)
    try:
        err = _serial.dump_error(e, traceback.format_exc() if text is None else text)
        if isinstance(k, int) and k > 1:
            reply_parts(ctx, [err] * k)
            return 0
        reply(ctx, err)
    except BaseException:
        text = f"{type(e).__name__}: {e}"
        lib.tr_ctx_set_error(ctx, text.encode(errors="replace")[:4000])
        return _errors.ETASK
    return 0


_loop_lock = threading.Lock()


def event_loop():
    """The worker's one asyncio loop, run by a thread of its own (started at the first
    coroutine). Every coroutine a method or task returns runs on it, so that calls that
    await overlap: an async actor's calls each wait on a thread of the worker's call
    pool (the C side's, up to max_concurrency of them, Ray's 1000 for an async actor)
    while their coroutines share the loop, as Ray's async actors do."""
    with _loop_lock:
        loop = _state["loop"]
        if loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="troupe-asyncio",
                             daemon=True).start()
            _state["loop"] = loop
        return loop


def on_loop(fn):
    """A plain method of an async actor, as a coroutine function: run() runs it on the
    worker's asyncio loop (its thread), as Ray runs an async actor's plain methods: never
    beside each other nor beside a coroutine's step. Its @troupe.method options go
    with it."""
    async def call(*a, **kw):
        return fn(*a, **kw)
    call.__troupe_method_options__ = getattr(fn, "__troupe_method_options__", None)
    return call


_starting = threading.local()  # .ctx: a call of an async actor that has not begun yet
_COROUTINE = types.CoroutineType
# (what the caller of the call that ran exit_actor() hears, with ActorDiedError: Ray's words)
EXIT_WHY = b"Worker exits by a user request: exit_actor() was called (INTENDED_USER_EXIT)"
_string_at = ctypes.string_at

_awaited = {}  # an async actor's calls whose coroutines run: id(future) -> (ctx, future)
_awaited_lock = threading.Lock()
_CANCEL_POLL_S = 0.05


def _watch_cancels():
    """On the loop, while coroutines of calls run: cancels those whose callers canceled
    them (troupe.cancel: tr_ctx_canceled), as Ray cancels an async actor's running call
    (asyncio.CancelledError in it)."""
    with _awaited_lock:
        running = list(_awaited.values())
        if not running:
            _state["watching"] = False
            return
    for ctx, fut in running:
        if lib.tr_ctx_canceled(ctx):
            fut.cancel()
    event_loop().call_later(_CANCEL_POLL_S, _watch_cancels)


class _LoopExit(Exception):
    """A SystemExit (exit_actor's ActorExit, sys.exit) raised in a coroutine on the
    worker's loop, carried to the thread that waits for it (asyncio would end the loop's
    thread with it, and every later coroutine would wait forever)."""

    def __init__(self, exc):
        super().__init__(exc)
        self.exc = exc


async def _guarded(aw):
    try:
        return await aw
    except SystemExit as e:
        raise _LoopExit(e) from None


def loop_future(aw):
    """The future of aw run on the worker's loop (its SystemExit carried: loop_result)."""
    return asyncio.run_coroutine_threadsafe(_guarded(aw), event_loop())


def loop_result(fut):
    """fut's result, a SystemExit in its coroutine raised here, as in a sync method."""
    try:
        return fut.result()
    except _LoopExit as x:
        raise x.exc from None


def _await(ctx, fut):
    """The result of a call's coroutine (fut), canceled where its caller cancels it."""
    with _awaited_lock:
        _awaited[id(fut)] = (ctx, fut)
        if not _state.get("watching"):
            _state["watching"] = True
            event_loop().call_soon_threadsafe(_watch_cancels)
    try:
        return loop_result(fut)
    except concurrent.futures.CancelledError:
        raise asyncio.CancelledError("the call was canceled (troupe.cancel)") from None
    finally:
        with _awaited_lock:
            _awaited.pop(id(fut), None)


def run(result):
    """result, or a coroutine's result run on the worker's loop. An async actor's call
    (_starting.ctx) has begun once the loop has its coroutine, or once its method gave
    anything else (an async generator, iterated later): the actor's next call may begin."""
    ctx = getattr(_starting, "ctx", None)
    fut = None
    if type(result) is _COROUTINE:
        fut = loop_future(result)
    if ctx is not None:
        _starting.ctx = None
        lib.tr_ctx_started(ctx)
        if fut is not None:
            return _await(ctx, fut)
    return loop_result(fut) if fut is not None else result


_pinned = set()
_ensure = ctypes.pythonapi.PyGILState_Ensure
_ensure.restype = ctypes.c_int


def pin_thread():
    """A thread troupe made (a compiled graph's loop) keeps its Python thread state:
    ctypes would make and free one per callback (several microseconds each)."""
    tid = threading.get_ident()
    if tid not in _pinned:
        _ensure()  # (never released: the state lives as long as the thread)
        _pinned.add(tid)


# ------------------------------------------------------------------ tasks

_functions = {}  # a task's function by the digest of its pickled bytes
_plain_tasks = {}  # ...those _fast.c runs (no options that run_task applies): digest -> fn
_FUNCTIONS_MAX = 4096


def _task_function(ctx, addr, n):
    """(the function, the offset of its arguments) of the task payload at addr."""
    digest, n_fn, off = read_head(addr, n)
    fn = _functions.get(digest)
    if n_fn != FN_IN_REF:
        if n_fn > n - off:
            raise ValueError("troupe: a task payload shorter than its function")
        at, off = off, off + n_fn
        if fn is None:
            fn = _serial.loads(memoryview(ctypes.string_at(addr + at, n_fn)))
    elif fn is None:  # in the store: the task's last ref
        data, k = ctypes.c_void_p(), ctypes.c_size_t()
        check(lib.tr_ctx_ref(ctx, lib.tr_ctx_num_refs(ctx) - 1, byref(data), byref(k)),
              "the task's function")
        fn = _serial.loads(memoryview(ctypes.string_at(data.value, k.value)))
    if digest not in _functions:
        if len(_functions) >= _FUNCTIONS_MAX:
            _functions.clear()
            _plain_tasks.clear()
        _functions[digest] = fn
        if _runtime.fast is not None and not isinstance(
                fn, (remote_function.EnvFunction, remote_function.RetryingFunction)) and \
                not (inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)):
            _plain_tasks[digest] = fn  # (its next tasks of plain arguments: _fast.c's)
    return fn, off


def run_retrying(fn, retries, on, decode):
    """fn(*args, **kwargs) on decode()'s arguments; while it raises an exception that on
    retries (Ray's retry_exceptions: remote_function.retries_exception), again on freshly
    decoded arguments (decode: from a copy of the payload, so that what a try wrote into an
    array argument is not seen by the next), up to retries more times (-1: without end)."""
    tries = 0
    while True:
        a, kw = decode()
        try:
            return run(fn(*a, **kw))
        except BaseException as e:
            if (isinstance(e, ActorExit) or (retries >= 0 and tries >= retries) or
                    not remote_function.retries_exception(on, e)):
                raise
            tries += 1


def exit_worker(e):
    """sys.exit() (SystemExit, not exit_actor's) in a method or a task: the worker process
    exits with its code, after the process's atexit handlers, as Ray's does. To the node
    and the callers it is a crash: the actor restarts where max_restarts allows and the
    call in flight goes again where max_task_retries (a task: max_retries) allows, else it
    fails with ActorDiedError."""
    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    run_exit_handlers()
    os._exit(code)


def run_exit_handlers():
    """The process's atexit handlers, then its output flushed, as when a Ray actor exits
    (C's exit does not run them)."""
    try:
        atexit._run_exitfuncs()
    except BaseException:
        pass
    sys.stdout.flush()
    sys.stderr.flush()


_running_task = [None]  # the ctx of the task the main thread runs now (on_cancel's)


def on_cancel(signum, frame):
    """SIGURG: a caller's troupe.cancel (without force) of a task of this node. If it is
    the one the main thread runs (tr_ctx_canceled), KeyboardInterrupt is raised in it, as
    Ray's cancel raises it in the task (a wait in time.sleep and the like ends at once);
    the caller's get raises TaskCancelledError. Anything else: nothing."""
    ctx = _running_task[0]
    if ctx is not None and lib.tr_ctx_canceled(ctx):
        _running_task[0] = None  # (once)
        raise KeyboardInterrupt("the task was canceled (troupe.cancel)")


def run_task(ctx, args, n):
    """Runs one task (remote_function.task_dispatch's runner in a worker)."""
    pin_thread()
    k = 1
    main = threading.current_thread() is threading.main_thread()
    saved = None  # runtime_env's env_vars: what os.environ had of them before
    inherited = None  # ...and what this worker's tasks and actors inherited before
    try:
        set_runtime(ctx)
        addr = args or 0
        fn, off = _task_function(ctx, addr, n)
        k, payload = call_payload(ctypes.string_at(addr + off, n - off) if n > off else b"")
        if isinstance(fn, remote_function.EnvFunction):
            saved = {name: os.environ.get(name) for name in fn.env}
            os.environ.update(fn.env)
            inherited = _runtime.inherit_env(fn.env)  # (its child tasks and actors')
            fn = fn.fn
        if main:
            _running_task[0] = ctx
        _runtime.current_call.ctx = ctx
        try:
            if isinstance(fn, remote_function.RetryingFunction):
                result = run_retrying(fn.fn, fn.retries, fn.on,
                                      lambda: decode_payload(ctx, bytearray(payload)))
            else:
                a, kw = decode_payload(ctx, payload)
                result = run(fn(*a, **kw))
        finally:
            _running_task[0] = None
            _runtime.current_call.ctx = None
        reply_results(ctx, result, k)  # (a generator's body runs here: env_vars still set)
    except SystemExit as e:
        exit_worker(e)
    except BaseException as e:
        return reply_error(ctx, e, k)
    finally:
        if inherited is not None:
            _runtime.inherit_env(inherited)
        for name, value in (saved or {}).items():  # (the pool's next task: as before)
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return 0


def fast_task_finish(ctx, result, rc):
    """A plain task's result _fast.c did not reply (not a builtin scalar), or its reply's
    failure rc: as run_task's end."""
    try:
        if rc:
            check(rc, "replying the result")
        if type(result) is _COROUTINE:  # (a function that returned one: run as run_task,
            main = threading.current_thread() is threading.main_thread()  # cancel's too)
            _runtime.current_call.ctx = ctx
            if main:
                _running_task[0] = ctx
            try:
                result = run(result)
            finally:
                _running_task[0] = None
                _runtime.current_call.ctx = None
        reply_results(ctx, result, 1)
    except SystemExit as e:
        exit_worker(e)
    except BaseException as e:
        return reply_error(ctx, e, 1)
    return 0


def fast_task_failed(ctx, exc):
    """A plain task's exception (the function's, or the decoding's), as run_task's
    handlers take it (its traceback from the function down)."""
    if isinstance(exc, SystemExit):
        exit_worker(exc)
    return reply_error(ctx, exc, 1, "".join(traceback.format_exception(exc)))


def _ready():
    """Ray's __ray_ready__: the actor runs."""
    return True


def _ray_call(inst, fn, *args, **kwargs):
    """Ray's __ray_call__(fn, *args, **kwargs): fn(the actor's instance, *args, **kwargs)."""
    return fn(inst, *args, **kwargs)


def main():
    # A line a task or method prints reaches the driver's output when it is printed, as
    # Ray streams its workers' lines (the node's workers write to the driver's stdout):
    # block-buffered, as a pipe or file makes it, it waited for the buffer to fill and
    # was lost when the node stopped the worker.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(line_buffering=True)
    signal.signal(signal.SIGURG, on_cancel)  # (troupe.cancel of a task running here)
    state = {"instance": None, "max_task_retries": 0, "async": False}
    steps = {}  # compiled graphs' steps here: step id -> (method, args' and kwargs' sources)
    names = {}  # the methods' names as C gives them (bytes) -> str
    plain = {}  # the methods _fast.c runs (sync actor, no options): name -> the class's
    # function (bound: called with the instance first), or True (looked up as getattr does)
    bound = {}  # the actor class's plain functions by name (class_functions)
    plain_steps = {}  # the steps it runs (one value, no raw input): name -> (method, spec)
    fast = _runtime.fast

    def end_actor(ctx, why=EXIT_WHY):
        """exit_actor() or __ray_terminate__: the actor ends for good once this call
        returns (tr_ctx_exit_actor): this call, and those not run yet, fail at their
        callers with ActorDiedError saying why; the process's atexit handlers run first,
        once, as Ray's."""
        if not state.get("ending"):
            state["ending"] = True
            run_exit_handlers()
        if lib.tr_ctx_exit_actor(ctx, why) != _errors.EACTOR_DIED:  # (refused: a graph's
            lib.tr_actor_kill(ctypes.c_void_p(lib.tr_ctx_runtime(ctx)),  # step) it goes now
                              lib.tr_ctx_actor_id(ctx), 1)
            os._exit(0)

    @_ffi.CTOR_FN
    def ctor(ctx, args, n, self_out):
        try:
            set_runtime(ctx)
            _runtime.set_current_actor(bytes(lib.tr_ctx_actor_id(ctx).b))
            raw = ctypes.string_at(args, n)
            payload = None if raw[:4] == OBJECT_ARGS else _serial.loads(memoryview(raw))
            if payload is not None and payload[0] == ENV:  # (runtime_env's env_vars:
                os.environ.update(payload[1])               # before the class's module)
                _runtime.inherit_env(payload[1])  # (its child tasks and actors')
                raw = bytes(payload[2])
                payload = None if raw[:4] == OBJECT_ARGS else _serial.loads(memoryview(raw))
            if payload is None:  # (arguments with refs in them: their object)
                payload = _runtime.get_writable(_runtime.unheld_ref(raw[4:20]),
                                                "the constructor's arguments")
            cls, a, kw = payload[:3]
            extra = payload[3] if len(payload) > 3 else {}
            if "resolve" in extra:  # (top-level refs: their values, as Ray's)
                pos, keys = extra["resolve"]
                a = tuple(_runtime.get_writable(x, "a constructor argument") if i in pos
                          else x for i, x in enumerate(a))  # (writable, as a method's)
                kw = {k: _runtime.get_writable(v, "a constructor argument") if k in keys
                      else v for k, v in kw.items()}
            state["max_task_retries"] = extra.get("max_task_retries", 0)
            state["instance"] = cls(*a, **kw)
            if fast is not None:
                fast.methods_changed()
            bound.clear()
            bound.update(class_functions(cls))
            if _runtime.exit_requested:  # (the constructor caught exit_actor(): it ends)
                end_actor(ctx)
            state["async"] = is_async_class(cls)
            self_out[0] = None
            return 0
        except BaseException as e:
            text = f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
            lib.tr_ctx_set_error(ctx, text.encode(errors="replace")[:4000])
            return _errors.ETASK

    @_ffi.DTOR_FN
    def dtor(self_ptr):
        """The worker exits orderly (its last handle went, SIGTERM): the instance goes,
        then the process's atexit handlers run."""
        state["instance"] = None
        if fast is not None:
            fast.methods_changed()  # (the instance goes now)
        run_exit_handlers()

    def method_of(inst, name):
        """What a call of method name runs: the class's function bound to the instance
        (bound), else the instance's attribute (a static or class method, a callable, an
        attribute of the instance alone), or None."""
        f = bound.get(name)
        return types.MethodType(f, inst) if f is not None else getattr(inst, name, None)

    def step_inputs(ctx, args, n, raw):
        """A graph step's input values: its first input's in the call's arguments, the
        others as its refs (copied: they are views for the step only); an input of raw
        array bytes (from a collective node; raw: input index -> its source) as a numpy
        array shaped as the value that went into it here. An error value (an upstream
        step raised) is returned as itself, to pass on."""
        data_in = [ctypes.string_at(args, n) if n else b""]
        for i in range(lib.tr_ctx_num_refs(ctx)):
            data, k = ctypes.c_void_p(), ctypes.c_size_t()
            check(lib.tr_ctx_ref(ctx, i, byref(data), byref(k)), "a graph step's input")
            data_in.append(ctypes.string_at(data.value, k.value) if k.value else b"")
        vals = []
        for k, r in enumerate(data_in):
            if k in raw:
                import numpy as np
                a = np.frombuffer(r, dtype=np.dtype(raw[k][2])).copy()
                shape = last_shape.get(raw[k][3])
                vals.append(a.reshape(shape) if shape is not None and
                            int(np.prod(shape)) == a.size else a)
            elif r[:4] == _serial.MAGIC_ERR:
                return None, r
            else:
                vals.append(_serial.loads(memoryview(r)))
        return vals, None

    def step_args(spec, vals):
        def one(src):
            kind = src[0]
            if kind == "const":
                return src[1]
            v = vals[src[1]]
            if kind in ("node", "raw"):
                return v
            if kind == "item":  # one of a num_returns > 1 step's values (its tuple's)
                return v[src[2]]
            ia, ikw = v  # the graph's input: execute(*args, **kwargs)
            if kind == "input":
                if len(ia) != 1 or ikw:
                    raise TypeError("InputNode bound as a whole needs execute(x) with one "
                                    "argument (use inp[i] or inp.key for several)")
                return ia[0]
            key = src[2]
            return ia[key] if isinstance(key, int) else ikw[key]
        sa, skw = spec
        return tuple(one(s) for s in sa), {k: one(s) for k, s in skw.items()}

    last_shape = {}  # step -> the shape of its last raw value here

    def raw_step(ctx, step, method, a, kw, dtype):
        """Runs a step whose value feeds a collective node: replies the array's bytes
        (the node reduces bytes), or fails the step in C (an error value would be
        reduced as numbers)."""
        import numpy as np
        try:
            v = np.ascontiguousarray(run(getattr(state["instance"], method)(*a, **kw)))
            if v.dtype != np.dtype(dtype):
                raise TypeError(f"{method} returned {v.dtype} into an allreduce of {dtype}")
            last_shape[step] = v.shape
            check(lib.tr_ctx_reply(ctx, ctypes.c_void_p(v.ctypes.data), v.nbytes),
                  f"replying {v.nbytes} bytes")
            return 0
        except BaseException as e:
            text = f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
            lib.tr_ctx_set_error(ctx, text.encode(errors="replace")[:4000])
            return _errors.ETASK

    @_ffi.METHOD_FN
    def dispatch(ctx, self_ptr, args, n):
        pin_thread()
        raw_name = lib.tr_ctx_method(ctx)
        name = names.get(raw_name)
        if name is None:
            name = raw_name.decode(errors="replace")
            if len(names) < 4096:
                names[raw_name] = name
        k = 1  # num_returns
        try:
            if name.startswith(STEP_PREFIX):  # a compiled graph's step
                step = name[len(STEP_PREFIX):]
                method, sa, skw, raw_dtype, n_out, raw = steps[step]
                vals, err = step_inputs(ctx, args, n, raw)
                if err is not None:
                    reply(ctx, err)
                    return 0
                a, kw = step_args((sa, skw), vals)
                if raw_dtype is not None:  # its value goes into a collective node: bytes
                    return raw_step(ctx, step, method, a, kw, raw_dtype)
                if n_out > 1:  # num_returns: its k values go on as one tuple (the
                    fn = getattr(state["instance"], method)  # consumers index it)
                    result = run(fn(*a, **kw))
                    reply_value(ctx, tuple(check_results(result, n_out)))
                    return 0
                name = method
            elif name == REGISTER:
                spec, _ = decode_args(ctx, args, n)
                step, method, sa, skw, raw_dtype = spec[:5]
                n_out = spec[5] if len(spec) > 5 else 1  # (its num_returns)
                if not callable(getattr(state["instance"], method, None)):
                    raise AttributeError(f"'{type(state['instance']).__name__}' actor has "
                                         f"no method '{method}'")
                raw = {s[1]: s for s in list(sa) + list(skw.values()) if s[0] == "raw"}
                steps[step] = (method, sa, skw, raw_dtype, n_out, raw)
                if fast is not None and not state["async"] and raw_dtype is None and \
                        n_out == 1 and not raw and not method.startswith("__"):
                    plain_steps[STEP_PREFIX + step] = (method, (sa, skw))  # (_fast.c's)
                reply(ctx, _serial.join(*_serial.dumps(True)[:2]))
                return 0
            elif name == EXIT:
                end_actor(ctx, b"__ray_terminate__() was called: the actor ended after the "
                               b"calls submitted before it")
                return 0
            elif name == FORGET:
                (step,), _ = decode_args(ctx, args, n)
                steps.pop(step, None)
                plain_steps.pop(STEP_PREFIX + step, None)
                reply(ctx, _serial.join(*_serial.dumps(True)[:2]))
                return 0
            else:
                _runtime.current_call.ctx = ctx  # (was_current_task_cancelled)
                k, payload = call_payload(_string_at(args, n) if n else b"")
                inst = state["instance"]
                fn = method_of(inst, name)
                if fn is None or name.startswith("__"):  # (Ray's built-ins, else none)
                    if name == "__ray_ready__":
                        fn = _ready
                    elif name == "__ray_call__":
                        fn = functools.partial(_ray_call, inst)
                    else:
                        raise AttributeError(f"'{type(inst).__name__}' actor has no "
                                             f"method '{name}'")
                # calls begin in the order they came (tr_ctx_started): an async actor's
                # once the loop has it (run), another's now
                if state["async"]:
                    _starting.ctx = ctx
                    if not (inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)):
                        fn = on_loop(fn)
                else:
                    lib.tr_ctx_started(ctx)
                opts = getattr(fn, "__troupe_method_options__", None)
                if opts is None and not state["async"] and fast is not None and \
                        not name.startswith("__"):  # (its next plain calls: _fast.c's)
                    plain[name] = bound.get(name, True)
                    fast.methods_changed()
                on = opts.get("retry_exceptions", False) if opts else False
                retries = opts.get("max_task_retries", state["max_task_retries"]) if on else 0
                if on and retries:  # (Ray's: the method's, else the actor's retries)
                    result = run_retrying(fn, retries, True if on is True else tuple(on),
                                          lambda: decode_payload(ctx, bytearray(payload)))
                else:
                    a, kw = decode_payload(ctx, payload)
                    result = fn(*a, **kw)
                    if type(result) is _COROUTINE or state["async"]:
                        result = run(result)
                reply_results(ctx, result, k)
                return 0
            inst = state["instance"]
            fn = method_of(inst, name)
            if fn is None or name.startswith("__"):
                raise AttributeError(f"'{type(inst).__name__}' actor has no method '{name}'")
            reply_results(ctx, run(fn(*a, **kw)), k)
        except ActorExit:
            end_actor(ctx)
        except SystemExit as e:
            exit_worker(e)
        except BaseException as e:
            exit_if_asked(ctx)
            return reply_error(ctx, e, k)
        finally:
            _starting.ctx = None
            _runtime.current_call.ctx = None
            exit_if_asked(ctx)  # (a stream whose generator caught exit_actor())
        return 0

    def exit_if_asked(ctx):
        """exit_actor() was called in this actor, its SystemExit caught by the method
        (or a generator, or the constructor): the actor ends now, as Ray's does once
        the task is over, whether it succeeded or failed."""
        if _runtime.exit_requested:
            end_actor(ctx)

    def fast_resolve(ctx, a, kw):
        """A plain call's refs passed as arguments: their values (decode_payload's)."""
        return tuple(resolve(x, ctx) for x in a), {k: resolve(v, ctx) for k, v in kw.items()}

    def fast_finish(ctx, result, rc):
        """A plain call's result _fast.c did not reply (not a builtin scalar), or its
        reply's failure rc: as dispatch's end."""
        try:
            if rc:
                check(rc, "replying the result")
            if type(result) is _COROUTINE:
                result = run(result)
            reply_results(ctx, result, 1)
        except ActorExit:
            end_actor(ctx)
        except SystemExit as e:
            exit_worker(e)
        except BaseException as e:
            exit_if_asked(ctx)
            return reply_error(ctx, e, 1)
        return 0

    def fast_failed(ctx, exc):
        """A plain call's exception (the method's, or the decoding's), as dispatch's
        handlers take it (its traceback from the method down)."""
        if isinstance(exc, ActorExit) or _runtime.exit_requested:
            end_actor(ctx)
            return 0
        if isinstance(exc, SystemExit):
            exit_worker(exc)
        else:
            return reply_error(ctx, exc, 1, "".join(traceback.format_exception(exc)))
        return 0

    cls = _ffi.ActorClass()
    lib.tr_actor_class_init(byref(cls))
    cls.name = PY_CLASS
    cls.ctor = ctor
    cls.dtor = dtor
    cls.dispatch = dispatch
    task_fn = remote_function.task_dispatch
    if fast is not None:  # (plain calls and tasks in C, every other through the ctypes ones)
        method_at, task_at, idle_at = fast.worker_configure(
            ctypes.cast(dispatch, ctypes.c_void_p).value,
            ctypes.cast(task_fn, ctypes.c_void_p).value,
            {"state": state, "methods": plain,
             "ArgRef": _serial.ArgRef, "resolve": fast_resolve, "finish": fast_finish,
             "failed": fast_failed, "tasks": _plain_tasks, "running": _running_task,
             "task_finish": fast_task_finish, "task_failed": fast_task_failed,
             "steps": plain_steps, "step_args": step_args})
        cls.dispatch = _ffi.METHOD_FN(method_at)
        cls.idle = idle_at  # (a plain call's thread keeps the GIL until its loop waits)
        task_fn = _ffi.TASK_FN(task_at)
    cls.n_methods = 0
    cfg = ctypes.c_void_p()
    remote_function.set_task_runner(run_task)
    if lib.tr_config_create(byref(cfg)) or lib.tr_config_add_class(cfg, byref(cls)) or \
            remote_function.add_task_dispatch(cfg, task_fn):
        print(f"troupe._worker: {_ffi.last_error()}", file=sys.stderr)
        sys.exit(2)
    lib.tr_worker_main(cfg)  # a worker or the node: runs it, then the process exits
    print(f"troupe._worker: {_ffi.last_error()} (it is started by a troupe node)",
          file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
    main()
