"""Actors, calls, objects, refs and errors, as a Ray user writes them with `import troupe
as ray`: every expectation is computed here, independently of the runtime."""
import os
import time

import numpy as np
import pytest

import troupe
from troupe import exceptions


@troupe.remote
class Counter:
    def __init__(self, start=0):
        self.n = start

    def add(self, k=1):
        self.n += k
        return self.n

    def value(self):
        return self.n

    def pid(self):
        return os.getpid()

    def fail(self, text):
        raise KeyError(text)

    def echo(self, *args, **kwargs):
        return args, kwargs

    def same(self, v):
        return v

    def array(self, n, dtype="float32"):
        return np.arange(n, dtype=dtype)

    def total(self, a):
        return float(np.asarray(a).sum())

    def wait_inside(self, n):
        refs = [troupe.put(i) for i in range(n)]
        ready, rest = troupe.wait(refs, num_returns=n, timeout=10)
        return len(ready), len(rest), troupe.get(ready)

    def put_inside(self, n):
        ref = troupe.put(np.full(n, 3, dtype=np.int64))
        return float(troupe.get(ref).sum()), [ref]

    def get_nested(self, refs):
        return [float(troupe.get(r).sum()) for r in refs]

    def sleep(self, s):
        time.sleep(s)
        return s

    async def async_add(self, k):
        import asyncio
        await asyncio.sleep(0.01)
        self.n += k
        return self.n


class Plain:  # defined in the test module: pickled by reference, imported by workers
    def __init__(self, x):
        self.x = x


def test_actor_calls_in_order(ray):
    c = Counter.remote(10)
    refs = [c.add.remote(i) for i in range(100)]
    assert ray.get(refs) == [10 + i * (i + 1) // 2 for i in range(100)]
    assert ray.get(c.value.remote()) == 10 + 99 * 100 // 2
    assert ray.get(c.pid.remote()) != os.getpid()


def test_many_actors_are_processes(ray):
    actors = [Counter.remote(i) for i in range(4)]
    pids = ray.get([a.pid.remote() for a in actors])
    assert len(set(pids)) == 4
    assert ray.get([a.add.remote(1) for a in actors]) == [1, 2, 3, 4]


def test_arguments_and_results_of_every_kind(ray):
    c = Counter.remote()
    args = (1, 2.5, "s", b"b", None, [1, {"k": (2, 3)}], Plain(7))
    got_args, got_kwargs = ray.get(c.echo.remote(*args, key=True))
    assert got_args[:6] == args[:6]
    assert isinstance(got_args[6], Plain) and got_args[6].x == 7
    assert got_kwargs == {"key": True}
    f = ray.get(c.echo.remote(lambda x: x + 1))[0][0]  # a lambda goes by value
    assert f(1) == 2


def test_scalar_calls_take_the_fast_path_unchanged(ray):
    """Calls whose arguments and results are builtin scalars skip the general encoder
    (the fast path of small calls); they must decode to the same values, types kept."""
    from troupe import _serial
    for args, kwargs in [((1,), {}), ((), {}), ((True, None, 2.5, 3j, "é", b"\0"), {}),
                         ((1,), {"k": "v", "n": None}), ((1 << 80, -0.0), {})]:
        fast = _serial.plain_args(args, kwargs)
        parts, total, refs = _serial.dumps((args, kwargs))
        assert fast == _serial.join(parts, total) and not refs
    for not_plain in [((1, [2]), {}), ((), {"k": [1]}), ((np.float64(1),), {})]:
        assert _serial.plain_args(*not_plain) is None
    c = Counter.remote()
    for v in [0, 1 << 70, -3.5, float("inf"), 2j, True, None, "", "x" * 1000, b"\xff"]:
        (got,), kw = ray.get(c.echo.remote(v))
        assert got == v and type(got) is type(v) and kw == {}
        got = ray.get(c.same.remote(v))  # (a scalar result: the worker's fast path)
        assert got == v and type(got) is type(v)
    assert ray.get(c.echo.remote(1, key=2.5)) == ((1,), {"key": 2.5})
    big = "y" * (600 << 10)  # (over INLINE_MAX: through the store, the general path)
    assert ray.get(c.echo.remote(big))[0][0] == big


SCALARS = [0, 1, 255, 256, 65535, 65536, -1, -(1 << 31), (1 << 31) - 1, 1 << 31, -(1 << 31) - 1,
           (1 << 63) - 1, -(1 << 63), 1 << 63, -(1 << 63) - 1, 1 << 100, -(1 << 100), 0.0, -0.0,
           1.5, float("inf"), float("-inf"), 1e308, 5e-324, "", "a", "é" * 300, "x" * 70000,
           "\ud800", "a\0b", b"", b"\0" * 256, b"y" * 70000, True, False, None, 1 + 2j]


def identical(a, b):
    """Equal, of the same types, with the same sign of zero, all the way down."""
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(identical(a[k], b[k]) for k in a)
    if isinstance(a, float):
        return repr(a) == repr(b)
    return a == b


def test_plain_pickles_written_and_read_in_c_are_pickles(ray):
    """troupe._fast writes a call's scalar arguments and results as pickle opcodes, and
    reads such payloads itself: pickle.loads must read what it writes as the values it
    was given, and what it reads must be what pickle.loads reads, or left to it; a
    malformed or cut payload is pickle's to read (or refuse), never misread here."""
    import pickle
    import random
    from troupe import _runtime
    fast = _runtime.fast
    c = Counter.remote()
    for v in SCALARS:  # (each way: the driver's and the worker's ends)
        got = ray.get(c.same.remote(v))
        assert identical(got, v), (v, got)
        (got,), kw = ray.get(c.echo.remote(v, k=v))
        assert identical(got, v) and identical(kw, {"k": v}), (v, got, kw)
    nan = ray.get(c.same.remote(float("nan")))
    assert nan != nan
    for n in range(9):
        assert ray.get(c.echo.remote(*range(n))) == (tuple(range(n)), {})
    if fast is None:
        pytest.skip("troupe._fast is not used here: the ctypes paths do all")
    rng = random.Random(7)
    for _ in range(300):
        args = tuple(rng.choice(SCALARS) for _ in range(rng.randrange(6)))
        kwargs = {f"k{i}": rng.choice(SCALARS) for i in range(rng.randrange(3))}
        data = fast._write_plain(args, kwargs)
        if any(type(x) is complex or (type(x) is int and not -(1 << 63) <= x < 1 << 63) or
               x == "\ud800" for x in args + tuple(kwargs.values())):
            assert data is None  # (pickle's to write)
            continue
        assert identical(pickle.loads(data), (args, kwargs))
        assert fast._read_plain(data) == (True, (args, kwargs))
        read, value = fast._read_args(data)  # (the worker's read of up to 3 in place)
        assert read == (not kwargs and len(args) <= 3) and (not read or identical(value, args))
        ours = pickle.dumps((args, kwargs), 5)  # (pickle's own: FRAME, MEMOIZE)
        read, value = fast._read_plain(ours)
        assert not read or identical(value, (args, kwargs))
        for bad in (data[:rng.randrange(len(data))], ours[:rng.randrange(len(ours))],
                    bytes(b ^ (1 << rng.randrange(8)) if i == rng.randrange(len(data)) else b
                          for i, b in enumerate(data))):
            read, value = fast._read_plain(bad)
            if read:
                assert identical(value, pickle.loads(bad)), bad
            read, value = fast._read_args(bad)
            if read:  # (a pickle of (args, {}): those args, else not read)
                assert identical((value, {}), pickle.loads(bad)), bad
    for bad in (b"", b"\x80", b"\x80\x05", b"\x80\x05.", b"\x80\x05K", b"\x80\x05t.",
                b"\x80\x05\x86.", b"\x80\x05(" * 20 + b"t.", b"\x80\x05" + b")" * 100 + b".",
                b"\x80\x05\x8a\x09" + b"\0" * 9 + b".", b"\x80\x05X\xff\xff\xff\xff.",
                b"\x80\x05}K\x01u.", b"\x80\x05}(K\x01u.", b"\x80\x05}(]K\x01u.",
                b"\x80\x05" + b"N" * 64 + b"(t" + b"N" * 3 + b".",  # (past its stack: no room)
                b"\x80\x05" + b"N" * 63 + b"(t" + b"N" * 3 + b"."):
        assert fast._read_plain(bad) == (False, None), bad


def test_plain_calls_of_each_kind_of_method_run_as_the_python_dispatch_runs_them(ray):
    """A method's plain calls (troupe._fast, from the second on) run as the first (the
    Python dispatch) ran it: its class's function with the instance first, even where an
    attribute of the instance shadows it (as Ray's); a static method, a class method, a
    callable object as getattr finds each."""

    class Twice:
        def __call__(self, x):
            return ("callable", x)

    @ray.remote
    class Kinds:
        obj = Twice()

        def __init__(self):
            self.shadow = lambda x: ("instance", x)

        def plain(self, x, y=0):
            return x + y + 1

        @staticmethod
        def st(x):
            return x * 2

        @classmethod
        def cm(cls, x):
            return (cls.__name__, x * 3)

        def shadow(self, x):
            return ("class", x)

    k = Kinds.remote()
    for i in range(4):
        assert ray.get(k.plain.remote(i)) == i + 1
        assert ray.get(k.plain.remote(i, 10)) == i + 11
        assert ray.get(k.plain.remote(i, y=5)) == i + 6
        assert ray.get(k.st.remote(i)) == i * 2
        assert ray.get(k.cm.remote(i)) == ("Kinds", i * 3)
        assert ray.get(k.shadow.remote(i)) == ("class", i)
        assert ray.get(k.obj.remote(i)) == ("callable", i)
    with pytest.raises(TypeError):
        ray.get(k.plain.remote(1, 2, 3))


def test_a_sync_calls_release_waits_for_the_next_call_then_is_done(ray):
    """The ref of a call whose small value was got here (`ray.get(c.f.remote(x))`) gives
    its hold back at this process's next get through troupe._fast, while its reply is
    awaited (off the sync call's path): until then its result is held here,
    then it is released (a get of its id: stale). No more than 32 wait; any use of the
    runtime by the Python paths does them; a large value's ref is released at once."""
    import ctypes
    import pickle
    from troupe import _errors, _ffi, _runtime
    fast = _runtime.fast
    if fast is None:
        pytest.skip("troupe._fast is not used here: the ctypes paths do all")
    c = Counter.remote()
    ray.get(c.same.remote(0))
    _runtime.runtime()
    assert fast.pending() == []
    for i in range(5):
        assert ray.get(c.same.remote(i)) == i
        assert len(fast.pending()) == 1  # (the one before it: released as it went out)
    (last,) = fast.pending()
    data, n = ctypes.c_void_p(), ctypes.c_size_t()

    def get_rc(ident):  # (the runtime's pointer itself: runtime() would do them)
        return _ffi.lib.tr_get(_runtime._rt, _ffi.Ref.from_buffer_copy(ident), 0,
                               ctypes.byref(data), ctypes.byref(n))

    assert get_rc(last) == 0
    assert pickle.loads(ctypes.string_at(data, n.value)[4:]) == 4  # (MAGIC0, a pickle)
    _runtime.runtime()
    assert fast.pending() == [] and get_rc(last) == _errors.ESTALE
    refs = [c.same.remote(i) for i in range(100)]
    assert ray.get(refs) == list(range(100))
    del refs  # (100 go: 3 times 32 released at once, 4 wait)
    assert len(fast.pending()) == 4
    seen = fast.pending()
    assert ray.get(c.same.remote(b"x" * 10000)) == b"x" * 10000
    assert fast.pending() == []  # (the call did those; its own ref was released at once)
    assert all(get_rc(i) == _errors.ESTALE for i in seen)
    assert ray.get(c.same.remote(6)) == 6
    (p,) = fast.pending()
    r = c.same.remote(7)
    assert fast.pending() == [p]  # (a plain call to a connected actor keeps the GIL)
    assert ray.get(r) == 7 and fast.pending() == []  # (its get's wait did it)
    assert get_rc(p) == _errors.ESTALE


@troupe.remote
class Ticker:
    """A sync actor with a thread of its own that counts while it runs."""

    def __init__(self):
        import threading
        self.ticks = 0
        threading.Thread(target=self._tick, daemon=True).start()

    def _tick(self):
        while True:
            self.ticks += 1
            time.sleep(0.001)

    def ticks_now(self):
        return self.ticks

    def same(self, x):
        return x


def test_an_actors_own_threads_run_while_its_worker_keeps_the_gil(ray):
    """A plain call's worker thread keeps the GIL into its poll for the next call (the
    class's idle lets it go): the actor's other threads still run while it waits for
    calls, and between back-to-back calls (within the interpreter's switch interval)."""
    t = Ticker.remote()
    assert ray.get(t.same.remote(1)) == 1
    a = ray.get(t.ticks_now.remote())
    time.sleep(0.3)  # (no calls: the worker sleeps, the GIL given back before it)
    b = ray.get(t.ticks_now.remote())
    assert b - a >= 30, (a, b)
    end = time.monotonic() + 0.5
    while time.monotonic() < end:  # (back to back: the thread gets it switch by switch)
        for _ in range(100):
            ray.get(t.same.remote(2))
    c = ray.get(t.ticks_now.remote())
    assert c - b >= 10, (b, c)
    ray.kill(t)


def test_a_handles_methods_keep_their_rules_in_c(ray):
    """A handle's method's remote() (troupe._fast.Remote where the extension is used):
    scalars, keywords, values that are not scalars, a signature's TypeError at the call,
    a method kept after its handle's other names went; and the refs' holds' lock is
    reentrant (a ref may go in a finalizer that runs under it)."""
    from troupe import _runtime

    @ray.remote
    class Sig:
        def two(self, a, b=2):
            return a + b

    s = Sig.remote()
    two = s.two.remote
    assert ray.get(two(1)) == 3 and ray.get(two(1, 5)) == 6 and ray.get(two(1, b=7)) == 8
    assert ray.get(two(np.float64(1.5))) == 3.5  # (not a builtin scalar: the general path)
    with pytest.raises(TypeError):
        two()
    with pytest.raises(TypeError):
        two(1, 2, 3)
    with pytest.raises(TypeError):
        two(1, c=3)
    c = Counter.remote()
    assert ray.get(c.echo.remote(1, k="v")) == ((1,), {"k": "v"})
    assert ray.get(c.echo.remote(method=[1])) == ((), {"method": [1]})  # (general path's)
    assert ray.get(c.same.remote([1, "x"])) == [1, "x"]
    kept = c.same
    assert ray.get(kept.remote(4)) == 4
    import copy
    import inspect
    import pickle
    remote = c.same.remote  # (a callable like the method's own: pickled, copied, passed)
    assert str(inspect.signature(remote)) == "(*args, **kwargs)" and remote.__name__ == "remote"
    assert ray.get(pickle.loads(pickle.dumps(remote))(5)) == 5
    assert ray.get(copy.copy(remote)(6)) == 6

    @ray.remote
    def through(m, x):
        return ray.get(m(x))

    assert ray.get(through.remote(c.same.remote, 7)) == 7
    lock = _runtime._holds_lock
    with lock:
        with lock:
            ref = c.same.remote(9)
            assert ray.get(ref) == 9
            del ref  # (its hold goes under the lock this thread holds)
    assert lock.acquire() is True
    lock.release()
    with pytest.raises(RuntimeError):
        lock.release()
    # two threads taking a call's id while the lock is busy count it once
    import threading
    r = c.same.remote(3)
    busy, go = threading.Event(), threading.Event()

    def hold():
        with lock:
            busy.set()
            go.wait(5)

    holder = threading.Thread(target=hold)
    holder.start()
    busy.wait(5)
    takers = [threading.Thread(target=lambda: r._c) for _ in range(2)]
    for t in takers:
        t.start()
    time.sleep(0.2)
    go.set()
    for t in takers + [holder]:
        t.join()
    key = bytes(r._c)
    assert _runtime._holds[key][0] == 1
    del r
    import gc
    gc.collect()
    assert key not in _runtime._holds


def test_a_calls_ref_whose_id_left_it_counts_with_the_others(ray):
    """A call's ref is the only one of its id until its id leaves it (pickled, hashed,
    its _c read): from then on it counts with the ObjectRefs made of that id here, and
    the value lives until the last of them goes, whichever it is."""
    import gc
    from troupe import _runtime
    c = Counter.remote()
    before = set(_runtime._holds)
    refs = [c.same.remote(i) for i in range(50)]
    assert ray.get(refs) == list(range(50))
    del refs
    r = c.same.remote(5)
    back = ray.get(c.same.remote([r]))[0]  # (r pickled in the call, back in its result)
    assert back == r and back is not r
    del r
    gc.collect()
    assert ray.get(back) == 5
    r2 = c.same.remote(6)
    copy = troupe.ObjectRef.from_binary(r2.binary())
    hash(r2)
    del r2
    gc.collect()
    assert ray.get(copy) == 6
    del copy, back
    gc.collect()
    assert set(_runtime._holds) == before  # (nothing left counted)


def test_the_extension_runs_both_ends_or_neither(ray):
    """troupe._fast (the plain call in C) is used by the driver and its workers alike:
    with TROUPE_NO_EXTENSION=1 by neither (the ctypes paths), else by both where built."""
    import sys
    from troupe import _runtime

    @ray.remote
    class Probe:
        def fast(self):
            from troupe import _runtime
            return _runtime.fast is not None

    off = os.environ.get("TROUPE_NO_EXTENSION", "") not in ("", "0")
    here = _runtime.fast is not None
    probe = Probe.remote()
    assert ray.get(probe.fast.remote()) == here
    if off or sys.version_info < (3, 11):
        assert not here
    else:
        assert here, "troupe._fast was not built or did not load"


def test_get_of_a_list_mixes_every_kind_of_ref(ray):
    """get of a list or tuple: values in order, whatever each ref is (a call's scalar, an
    array, a put object, a ref that came in a value, an error: the first error in the
    list's order raises); the C path (troupe._fast.get) and the general one agree."""
    c = Counter.remote()
    arr = np.arange(10.0)
    put = ray.put({"k": 1})
    inner = ray.get(c.same.remote([put]))[0]  # (a borrowed ref: this process did not make it)
    refs = [c.same.remote(1), c.same.remote(arr), put, inner, c.same.remote("s")]
    got = ray.get(refs)
    assert got[0] == 1 and np.array_equal(got[1], arr) and got[2] == {"k": 1} and \
        got[3] == {"k": 1} and got[4] == "s"
    assert ray.get(tuple(refs[:1] + refs[4:])) == [1, "s"]
    failing = [c.same.remote(2), c.fail.remote("first"), c.fail.remote("second")]
    with pytest.raises(Exception, match="first"):
        ray.get(failing)
    assert ray.get([]) == []


class SlowToUnpickle:
    """An argument whose unpickling takes a while (it runs in the actor, before the
    method): the actor's next call must not wait for it."""
    def __init__(self, seconds):
        self.seconds = seconds

    def __setstate__(self, state):
        self.__dict__.update(state)
        time.sleep(self.seconds)


def test_plain_calls_keep_the_general_paths_rules(ray):
    """What the worker's plain path (troupe._fast) must do as the general one does: a
    call starts before its arguments are unpickled (a threaded actor's next call does
    not wait for them), a method's error carries its traceback; a method runs its class's
    function, as Ray's workers bind an actor's methods when its class loads (deleted from
    the class, or shadowed on the instance, it still runs); what is looked up on the
    instance (a static method) and is gone is the actor's AttributeError."""
    @ray.remote(max_concurrency=2)
    class Threaded:
        def take(self, x):
            return 1

        def ping(self):
            return 2

        def fail(self):
            raise ValueError("fails in fail")

        def drop(self, name):
            delattr(type(self), name)
            return True

        def unset(self, name):
            setattr(self, name, None)
            return True

        def own_attr(self):
            raise AttributeError("its own AttributeError")

        def own_type(self, x):
            raise TypeError("its own TypeError")

        def five(self, a, b, c, d, e=0):
            return [a, b, c, d, e]

        @staticmethod
        def st(x):
            return x

    t = Threaded.remote()
    for _ in range(3):  # (each method's calls after its first are plain ones)
        assert ray.get([t.take.remote(0), t.ping.remote()]) == [1, 2]
    slow = t.take.remote(SlowToUnpickle(1.5))
    time.sleep(0.2)
    t0 = time.monotonic()
    assert ray.get(t.ping.remote(), timeout=10) == 2
    assert time.monotonic() - t0 < 1.0, "the next call waited for the arguments' unpickling"
    assert ray.get(slow) == 1
    for _ in range(2):
        with pytest.raises(ValueError, match="fails in fail") as info:
            ray.get(t.fail.remote())
        assert "in fail" in str(info.value) and "fast_failed" not in str(info.value)
    for _ in range(2):  # (the method's own errors, not taken for a method gone)
        with pytest.raises(AttributeError, match="its own AttributeError"):
            ray.get(t.own_attr.remote())
        with pytest.raises(TypeError, match="its own TypeError"):
            ray.get(t.own_type.remote(1))
        assert ray.get(t.five.remote(1, 2, 3, 4, 5)) == [1, 2, 3, 4, 5]
        assert ray.get(t.five.remote(1, 2, 3, d=4)) == [1, 2, 3, 4, 0]
        assert ray.get(t.five.remote(1, 2, 3, 4), timeout=None) == [1, 2, 3, 4, 0]
    assert ray.get(t.drop.remote("ping"))
    assert ray.get(t.ping.remote()) == 2
    assert ray.get(t.unset.remote("five"))
    assert ray.get(t.five.remote(1, 2, 3, 4)) == [1, 2, 3, 4, 0]
    for _ in range(2):
        assert ray.get(t.st.remote(7)) == 7
    assert ray.get(t.drop.remote("st"))
    with pytest.raises(AttributeError, match="actor has no method 'st'"):
        ray.get(t.st.remote(7))
    assert ray.get(t.take.remote(5)) == 1


def test_put_get_zero_copy(ray):
    a = np.random.default_rng(1).random(1 << 20)
    ref = ray.put(a)
    b = ray.get(ref)
    assert np.array_equal(a, b)
    assert not b.flags.writeable  # a read-only view of the store
    addr = b.ctypes.data
    with open("/proc/self/maps") as f:
        maps = [line.split() for line in f]
    where = [m for m in maps if int(m[0].split("-")[0], 16) <= addr < int(m[0].split("-")[1], 16)]
    assert where and len(where[0]) >= 6, "the array's memory is not in a named mapping"
    assert "/dev/shm/" in where[0][5] or "troupe" in where[0][5], where[0]
    assert ray.get(ref) is not b  # (each get is a fresh view of the same bytes)
    assert ray.get(ref).ctypes.data == addr


def test_arrays_0d_empty_and_dtypes(ray):
    c = Counter.remote()
    for a in (np.float64(3.5), np.array(7), np.zeros((0,)), np.zeros((3, 0)),
              np.arange(6, dtype=np.int8).reshape(2, 3), np.array([1, 2], dtype=np.complex64)):
        got = ray.get(ray.put(a))
        assert np.array_equal(got, a) and np.asarray(got).dtype == np.asarray(a).dtype
        got, _ = ray.get(c.echo.remote(a))
        assert np.array_equal(got[0], a)
    big = ray.get(c.array.remote(1 << 21))  # 8 MiB result: through the store
    assert np.array_equal(big, np.arange(1 << 21, dtype=np.float32))


def test_refs_as_arguments(ray):
    c = Counter.remote()
    a = np.ones(1 << 20, dtype=np.float32)
    ref = ray.put(a)
    assert ray.get(c.total.remote(ref)) == float(1 << 20)  # a put object, by reference
    r1 = c.array.remote(1000)
    assert ray.get(c.total.remote(r1)) == float(sum(range(1000)))  # another call's result
    large = np.ones(1 << 20, dtype=np.float64)  # 8 MiB argument: through the store
    assert ray.get(c.total.remote(large)) == float(1 << 20)


def test_refs_returned_nested_and_hashable(ray):
    c = Counter.remote()
    s, refs = ray.get(c.put_inside.remote(10))
    assert s == 30.0
    assert isinstance(refs[0], ray.ObjectRef)
    assert float(ray.get(refs[0]).sum()) == 30.0
    r = ray.put(np.arange(4))
    assert ray.get(c.get_nested.remote([r, r])) == [6.0, 6.0]
    assert ray.get(c.wait_inside.remote(3)) == (3, 0, [0, 1, 2])
    assert len({r, r, ray.put(1)}) == 2
    assert r == r and hash(r) == hash(r)


def test_wait(ray):
    c, d = Counter.remote(), Counter.remote()
    slow = c.sleep.remote(2.0)
    fast = d.sleep.remote(0.01)
    ready, not_ready = ray.wait([slow, fast], num_returns=1, timeout=1.5)
    assert ready == [fast] and not_ready == [slow]
    ready, not_ready = ray.wait([slow, fast], num_returns=2, timeout=0.01)
    assert len(ready) + len(not_ready) == 2
    ready, _ = ray.wait([slow, fast], num_returns=2)
    assert set(ready) == {slow, fast}


def test_get_timeout_is_a_timeout_error(ray):
    c = Counter.remote()
    ref = c.sleep.remote(1.0)
    t = time.monotonic()
    with pytest.raises(TimeoutError):
        ray.get(ref, timeout=0.1)
    assert time.monotonic() - t < 0.9
    with pytest.raises(exceptions.GetTimeoutError):
        ray.get(ref, timeout=0.0)
    assert ray.get(ref) == 1.0  # the ref stays good


def test_method_exception_comes_back_raised(ray):
    c = Counter.remote()
    with pytest.raises(KeyError) as info:  # the cause's class...
        ray.get(c.fail.remote("nope"))
    assert isinstance(info.value, exceptions.RayTaskError)  # ...and Ray's
    assert "nope" in str(info.value)
    assert "in fail" in str(info.value) or "fail" in info.value.traceback_str
    assert "raise KeyError(text)" in info.value.traceback_str
    assert ray.get(c.add.remote(1)) == 1  # the actor lives on
    with pytest.raises(AttributeError):
        c.no_such_method  # known from the class
    any_name = troupe.actor.ActorHandle(c._id, "Counter", None)  # as get_actor gives
    with pytest.raises(AttributeError):  # a name the actor lacks: raised by the actor
        ray.get(any_name.nothing.remote())


def test_dead_actor_raises_actor_died(ray):
    c = Counter.remote()
    assert ray.get(c.add.remote(1)) == 1
    pending = c.sleep.remote(5)
    time.sleep(0.2)
    ray.kill(c)
    with pytest.raises(exceptions.ActorDiedError):
        ray.get(pending, timeout=10)
    with pytest.raises(exceptions.RayActorError):
        ray.get(c.add.remote(1), timeout=10)


def test_constructor_failure_is_actor_died(ray):
    @ray.remote
    class Bad:
        def __init__(self):
            raise RuntimeError("cannot start")

        def f(self):
            return 1

    b = Bad.remote()
    with pytest.raises(exceptions.ActorDiedError) as info:
        ray.get(b.f.remote(), timeout=30)
    assert "cannot start" in str(info.value)


def test_named_actors(ray):
    c = Counter.options(name="the-counter").remote(5)
    assert ray.get(c.add.remote(1)) == 6
    h = ray.get_actor("the-counter")
    assert ray.get(h.add.remote(1)) == 7
    with pytest.raises(ValueError):
        ray.get_actor("no-such-actor")
    with pytest.raises(Exception):
        Counter.options(name="the-counter").remote()  # a name is unique
    # Ray's get_or_create: the one that lives (its new arguments ignored), else a new one
    g = Counter.options(name="the-counter").get_or_create(100)
    assert ray.get(g.add.remote(1)) == 8
    fresh = Counter.options(name="made-now").get_or_create(100)
    assert ray.get(fresh.add.remote(1)) == 101
    with pytest.raises(ValueError, match="needs a name"):
        Counter.get_or_create(1)
    ray.kill(fresh)


def test_handles_pass_to_other_actors(ray):
    @ray.remote
    class Caller:
        def call(self, other, k):
            return troupe.get(other.add.remote(k))

    c = Counter.remote(100)
    callers = [Caller.remote() for _ in range(2)]
    assert sorted(ray.get([x.call.remote(c, 1) for x in callers])) == [101, 102]


def test_async_methods(ray):
    c = Counter.remote()
    assert ray.get([c.async_add.remote(2) for _ in range(3)]) == [2, 4, 6]


def test_bad_input_is_an_error_not_a_crash(ray):
    with pytest.raises(ValueError):  # (Ray's: "'object_refs' must either be an ObjectRef...")
        ray.get(42)
    with pytest.raises(TypeError):
        ray.remote(42)
    with pytest.raises(TypeError):  # (a remote function: called with .remote())
        ray.remote(lambda: 1)()
    with pytest.raises(TypeError):
        Counter.options(colour="red")
    with pytest.raises(TypeError):
        Counter()
    c = Counter.remote()
    with pytest.raises(TypeError):
        c.add(1)
    r = ray.put(1)
    stale = troupe.ObjectRef._from_bytes(bytes(16))
    with pytest.raises(exceptions.TroupeError):
        ray.get(stale, timeout=1)
    with pytest.raises(ValueError):
        ray.wait([r, r])
    assert ray.get(r) == 1


def test_not_initialized_and_reinit():
    # Ray's first use starts it (ray.init() with the defaults): so does troupe's
    assert not troupe.is_initialized()
    assert troupe.get(troupe.put(1)) == 1
    assert troupe.is_initialized()
    troupe.shutdown()
    troupe.init()
    try:
        with pytest.raises(RuntimeError):
            troupe.init()
        troupe.init(ignore_reinit_error=True)
    finally:
        troupe.shutdown()
    assert not troupe.is_initialized()


def test_nothing_left_in_the_store(ray):
    refs = [ray.put(np.ones(1000)) for _ in range(10)]
    assert ray.object_store_stats()["n_objects"] >= 10
    del refs
    import gc
    gc.collect()
    assert ray.object_store_stats()["n_objects"] == 0


def test_arrays_outlive_shutdown():
    troupe.init()
    a = troupe.get(troupe.put(np.arange(1000, dtype=np.int64)))
    troupe.shutdown()
    assert int(a.sum()) == 999 * 1000 // 2  # still mapped: no crash
    troupe.init()  # a new runtime, while the old store is still viewed (issue 24)
    assert troupe.get(troupe.put(5)) == 5
    assert int(a.sum()) == 999 * 1000 // 2
    troupe.shutdown()
    del a
    import gc
    gc.collect()
    troupe.init()  # the old runtime ended with the last array
    assert troupe.get(troupe.put(5)) == 5
    troupe.shutdown()


SCRIPT = """
import sys
import numpy as np
import troupe as ray

@ray.remote
class Accumulator:                      # defined in __main__: goes to workers by value
    def __init__(self, start):
        self.total = start
    def add(self, x):
        self.total += x
        return self.total

def scale(v):
    return v * 10

ray.init(address=sys.argv[1] if len(sys.argv) > 1 else None)
acc = Accumulator.remote(np.float64(1.5))
print(ray.get([acc.add.remote(scale(i)) for i in range(4)]))
ray.shutdown()
"""


def test_a_script_as_main_and_a_second_driver(tmp_path, ray):
    """A user's script run as __main__ (its classes pickled by value), on its own embedded
    node, then joining this test's node by its address."""
    import subprocess
    import sys
    path = tmp_path / "script.py"
    path.write_text(SCRIPT)
    for args in ([], [ray.node_address()]):
        out = subprocess.run([sys.executable, str(path), *args], capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "[1.5, 11.5, 31.5, 61.5]", out.stdout


def test_malformed_bytes_are_an_error_not_a_crash(ray):
    from troupe import _ffi, _runtime, _serial
    c = Counter.remote()
    for junk in (b"\x00garbage", b"TRP1" + b"\xff" * 40, b"TRP0\x80\x05junk", b"",
                 b"TRP0\x80\x05" + b"N" * 64 + b"(t" + b"N" * 3 + b"."):
        out = _ffi.Ref()  # bytes no binding would send, straight through the C API
        assert _ffi.lib.tr_call(_runtime.runtime(), c._id, b"add", junk, len(junk),
                                _ffi.byref(out)) == 0
        with pytest.raises(Exception):
            ray.get(troupe.ObjectRef(out), timeout=10)
    assert ray.get(c.add.remote(1)) == 1  # the actor lives on
    for junk in (b"TRP1" + b"\xff" * 40, b"XXXX"):
        with pytest.raises(ValueError):
            _serial.loads(memoryview(junk))
    for junk in (b"TRP1" + bytes(20), b"TRPE"):  # (a pickle of nothing)
        with pytest.raises(EOFError):
            _serial.loads(memoryview(junk))
