"""The worker: ``python -m troupe._worker``, started by a node (the config key
worker_command that troupe.init sets) as an actor's process or as the embedded node.

It registers one C class, "troupe.py": its constructor unpickles the Python class and its
arguments and makes the instance; its dispatch function (tr_actor_class.dispatch) runs the
instance's method of the call's name (tr_ctx_method) and replies the pickled result, or
the pickled exception with its traceback.
"""
import asyncio
import collections
import ctypes
import inspect
import sys
import time
import traceback


def main():
    from troupe import _ffi, _runtime, _serial
    from troupe.actor import INLINE_MAX, OBJECT_ARGS, PY_CLASS
    from troupe._runtime import ObjectRef
    from troupe.exceptions import TroupeError
    lib, byref = _ffi.lib, _ffi.byref
    del INLINE_MAX

    state = {"instance": None, "loop": None}
    returned = collections.deque()  # (time, refs) returned in results, held a while
    HOLD_S = 300.0

    def set_runtime(ctx):
        if _runtime._rt is None:
            _runtime._rt = ctypes.c_void_p(lib.tr_ctx_runtime(ctx))
            _runtime._in_worker = True

    def resolve(x, ctx):
        if isinstance(x, _serial.ArgRef):
            ref = ObjectRef._from_bytes(x.id)
            if ref.is_object():  # held here: zero-copy for as long as the value lives
                return _runtime._get_one(ref, None, "argument")
            data, n = ctypes.c_void_p(), ctypes.c_size_t()
            rc = lib.tr_ctx_ref(ctx, x.index, byref(data), byref(n))
            if rc:
                raise _runtime.error(rc, "a ref argument")
            view = memoryview(ctypes.string_at(data.value, n.value)) if n.value else \
                memoryview(b"")
            try:
                return _serial.loads(view)
            except _serial._RemoteError as e:
                raise _runtime._task_error(e, "an argument's call") from None
        return x

    def decode_args(ctx, addr, n):
        payload = ctypes.string_at(addr, n) if n else b""
        if payload[:4] == OBJECT_ARGS and n == 20:
            ref = ObjectRef._from_bytes(payload[4:20])
            a, kw = _runtime._get_one(ref, None, "arguments")
        else:
            a, kw = _serial.loads(memoryview(payload))
        if any(isinstance(x, _serial.ArgRef) for x in a) or any(
                isinstance(v, _serial.ArgRef) for v in kw.values()):
            a = tuple(resolve(x, ctx) for x in a)
            kw = {k: resolve(v, ctx) for k, v in kw.items()}
        return a, kw

    def reply(ctx, data):
        rc = lib.tr_ctx_reply(ctx, data, len(data))
        if rc:
            raise TroupeError(f"replying {len(data)} bytes: {_ffi.last_error()}")

    def hold(refs):
        now = time.monotonic()
        while returned and now - returned[0][0] > HOLD_S:
            returned.popleft()
        if refs:
            returned.append((now, refs))

    def run(result):
        if inspect.iscoroutine(result):
            if state["loop"] is None:
                state["loop"] = asyncio.new_event_loop()
            return state["loop"].run_until_complete(result)
        return result

    @_ffi.CTOR_FN
    def ctor(ctx, args, n, self_out):
        try:
            set_runtime(ctx)
            cls, a, kw = _serial.loads(memoryview(ctypes.string_at(args, n)))
            state["instance"] = cls(*a, **kw)
            self_out[0] = None
            return 0
        except BaseException as e:
            text = f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
            lib.tr_ctx_set_error(ctx, text.encode(errors="replace")[:4000])
            return _ffi.ETASK

    @_ffi.DTOR_FN
    def dtor(self_ptr):
        state["instance"] = None

    @_ffi.METHOD_FN
    def dispatch(ctx, self_ptr, args, n):
        name = lib.tr_ctx_method(ctx).decode(errors="replace")
        try:
            a, kw = decode_args(ctx, args, n)
            inst = state["instance"]
            fn = getattr(inst, name, None)
            if fn is None or name.startswith("__"):
                raise AttributeError(f"'{type(inst).__name__}' actor has no method '{name}'")
            result = run(fn(*a, **kw))
            parts, total, refs = _serial.dumps(result)
            hold(refs)
            reply(ctx, _serial.join(parts, total))
        except BaseException as e:
            try:
                reply(ctx, _serial.dump_error(e, traceback.format_exc()))
            except BaseException:
                text = f"{type(e).__name__}: {e}"
                lib.tr_ctx_set_error(ctx, text.encode(errors="replace")[:4000])
                return _ffi.ETASK
        return 0

    cls = _ffi.ActorClass()
    lib.tr_actor_class_init(byref(cls))
    cls.name = PY_CLASS
    cls.ctor = ctor
    cls.dtor = dtor
    cls.dispatch = dispatch
    cls.n_methods = 0
    cfg = ctypes.c_void_p()
    if lib.tr_config_create(byref(cfg)) or lib.tr_config_add_class(cfg, byref(cls)):
        print(f"troupe._worker: {_ffi.last_error()}", file=sys.stderr)
        sys.exit(2)
    lib.tr_worker_main(cfg)  # a worker or the node: runs it, then the process exits
    print(f"troupe._worker: {_ffi.last_error()} (it is started by a troupe node)",
          file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
    main()
