"""How values travel: pickle protocol 5 with out-of-band buffers, so that a numpy array's
bytes are written once into the message (or the object store) and read back in place.

A payload is one of:
  b"TRP0" + pickle                              no out-of-band buffer
  b"TRP1" + u32 n + u32 0 + u64 pickle_len + n * (u64 offset, u64 length) + pickle, then
            each buffer at its offset (64-byte aligned from the payload's start)
  b"TRPE" + pickle((exception or None, traceback text, repr))   a method raised

Classes and functions defined in ``__main__`` (and lambdas) go by value through
cloudpickle; plain data through the standard pickler (faster).
"""
import io
import pickle
import struct
import threading

MAGIC0, MAGIC1, MAGIC_ERR = b"TRP0", b"TRP1", b"TRPE"
ALIGN = 64
_HDR = struct.Struct("<4sIIQ")
_simple = (int, float, str, bytes, bool, type(None), complex)
SIMPLE = frozenset(_simple)  # (types the fast paths pickle straight)
SIMPLE_TYPES = _simple       # (the same, in order: _fast.c's)

_local = threading.local()
_plain_types = set()  # classes of the layers above that pickle by name (register_plain)


def register_plain(cls):
    """cls pickles through the standard pickler (its __reduce__ names a module-level
    function): values holding it stay on the fast path (an ObjectRef in a list)."""
    _plain_types.add(cls)


class ArgRef:
    """In a call's arguments: the ref passed at this place (index into the call's refs,
    and its id); the worker puts the value there, as Ray does for top-level refs."""
    __slots__ = ("index", "id")

    def __init__(self, index, id_):
        self.index, self.id = index, id_

    def __reduce__(self):
        return (ArgRef, (self.index, self.id))


def _plain(v, depth=0):
    """Whether the standard pickler gives a value the worker can load: builtin data,
    numpy arrays of plain dtypes, containers of those."""
    t = type(v)
    if t in _simple or t is ArgRef or t in _plain_types:
        return True
    if depth > 3:
        return False
    if t in (tuple, list):
        return len(v) <= 64 and all(_plain(x, depth + 1) for x in v)
    if t is dict:
        return len(v) <= 64 and all(type(k) in _simple and _plain(x, depth + 1)
                                    for k, x in v.items())
    mod = getattr(t, "__module__", "")
    return mod == "numpy" and t.__name__ == "ndarray" and v.dtype.kind in "biufcSU?" \
        or mod == "numpy" and t.__name__ in ("float64", "float32", "int64", "int32", "bool_")


def collecting():
    """Refs met while pickling, per thread: ObjectRef.__reduce__ appends itself."""
    return getattr(_local, "refs", None)


class _Collect:
    def __enter__(self):
        self.prev = getattr(_local, "refs", None)
        _local.refs = []
        return _local.refs

    def __exit__(self, *exc):
        _local.refs = self.prev


def collect():
    """A context manager whose value is the list of the refs pickled within it (a
    ray.cloudpickle dump: troupe.cloudpickle pins them)."""
    return _Collect()


def plain_args(args, kwargs):
    """The payload of a call's arguments (args, kwargs) when each is a builtin scalar (no
    buffer, no ref, nothing by value: the standard pickler straight), else None. The fast
    path of small calls: dumps((args, kwargs)) gives the same bytes at ~5x the cost."""
    for x in args:
        if type(x) not in SIMPLE:
            return None
    if kwargs:
        for x in kwargs.values():
            if type(x) not in SIMPLE:
                return None
    return MAGIC0 + pickle.dumps((args, kwargs), protocol=5)


def dumps(value):
    """(parts, total, refs): the payload as a list of bytes-like parts whose lengths add up
    to total (buffers at their aligned offsets, padding included), and the ObjectRefs the
    value contains."""
    if type(value) in SIMPLE:  # (the fast path: no buffer, no ref)
        data = pickle.dumps(value, protocol=5)
        return [MAGIC0, data], 4 + len(data), []
    bufs = []
    with _Collect() as refs:
        if _plain(value):
            data = pickle.dumps(value, protocol=5, buffer_callback=bufs.append)
        else:
            import cloudpickle
            f = io.BytesIO()
            cloudpickle.CloudPickler(f, protocol=5, buffer_callback=bufs.append).dump(value)
            data = f.getvalue()
    if not bufs:
        return [MAGIC0, data], 4 + len(data), list(refs)
    raws = [b.raw() for b in bufs]
    n = len(raws)
    head_len = _HDR.size + 16 * n
    off = head_len + len(data)
    table, parts, pads = [], [], []
    for r in raws:
        pad = (-off) % ALIGN
        off += pad
        table.append((off, r.nbytes))
        pads.append(pad)
        off += r.nbytes
    head = _HDR.pack(MAGIC1, n, 0, len(data)) + b"".join(struct.pack("<QQ", o, ln)
                                                           for o, ln in table)
    parts = [head, data]
    for pad, r in zip(pads, raws):
        if pad:
            parts.append(bytes(pad))
        parts.append(r)
    return parts, off, list(refs)


def join(parts, total):
    if len(parts) == 2 and parts[0] is MAGIC0:
        return MAGIC0 + parts[1]
    out = bytearray(total)
    write_into(memoryview(out), parts)
    return bytes(out)


def write_into(dst, parts):
    """Copies parts into the writable memoryview dst (of the payload's total length)."""
    at = 0
    for p in parts:
        n = memoryview(p).nbytes
        dst[at:at + n] = memoryview(p).cast("B") if not isinstance(p, bytes) else p
        at += n


def loads(view, copy_buffers=False):
    """The value of a payload in view (a read-only memoryview of bytes). Out-of-band
    buffers are views into it (read-only numpy arrays sharing its memory), or copies with
    copy_buffers (when view is valid only for now)."""
    magic = bytes(view[:4])
    if magic == MAGIC0:
        return pickle.loads(view[4:])
    if magic == MAGIC1:
        try:
            _, n, _, plen = _HDR.unpack_from(view, 0)
            if _HDR.size + 16 * n + plen > len(view):
                raise ValueError("troupe: a malformed payload (header past its end)")
            table = [struct.unpack_from("<QQ", view, _HDR.size + 16 * i) for i in range(n)]
        except struct.error as e:
            raise ValueError(f"troupe: a malformed payload ({e})") from None
        start = _HDR.size + 16 * n
        bufs = []
        for off, ln in table:
            if off + ln > len(view) or off < start + plen:
                raise ValueError("troupe: a malformed payload (buffer out of range)")
            b = view[off:off + ln]
            bufs.append(bytearray(b) if copy_buffers else b)
        return pickle.loads(view[start:start + plen], buffers=bufs)
    if magic == MAGIC_ERR:
        raise RemoteError(pickle.loads(view[4:]))
    raise ValueError(f"troupe: a value that is not a troupe payload (starts {magic!r})")


class RemoteError(Exception):
    """A method's exception, as loads found it: (cause or None, traceback, repr)."""

    def __init__(self, info):
        super().__init__(info)
        self.cause, self.traceback_str, self.text = info


def dump_error(exc, tb_text):
    """The TRPE payload for an exception a method raised (the exception itself when it
    pickles, else only its text)."""
    text = f"{type(exc).__name__}: {exc}"
    try:
        import cloudpickle
        body = cloudpickle.dumps((exc, tb_text, text), protocol=5)
        pickle.loads(body)  # (an exception whose reconstruction fails goes as text)
    except Exception:
        body = pickle.dumps((None, tb_text, text), protocol=5)
    return MAGIC_ERR + body
