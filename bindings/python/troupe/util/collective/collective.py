"""The collective API over tr_group_* (api/include/troupe/troupe.h)."""
import ctypes

from ... import _errors, _ffi, _runtime
from ..._ffi import byref, lib
from ...exceptions import CollectiveArgumentError, CollectiveError
from .types import DTYPES, Backend, ReduceOp, unset_timeout_ms

_JOIN_TIMEOUT_MS = 60000
_LAZY = ("nccl",)  # backends whose communicator is made on the group's first op (Ray's)
_pending = {}      # group name -> (world_size, rank, backend): joined on its first op


def _check(rc, what):
    """A group's failure is a CollectiveError (whatever its code), a refused argument a
    ValueError."""
    _errors.check(rc, what, CollectiveError)


def _backend(backend):
    b = str(backend.value if isinstance(backend, Backend) else backend).lower()
    if b not in ("shm", "gloo", "nccl", "auto", "hier"):
        raise ValueError(f"unknown backend {backend!r} (shm, gloo, nccl, auto, hier)")
    return b


def _op(op):
    try:
        return int(ReduceOp(op))
    except ValueError:
        raise ValueError(f"unknown reduce op {op!r}") from None


def _name(group_name):
    if not isinstance(group_name, str) or not group_name:
        raise ValueError(f"group_name must be a non-empty str, got {group_name!r}")
    return group_name.encode()


def _join(world_size, rank, backend, group_name, what, timeout_ms=_JOIN_TIMEOUT_MS):
    rt = _runtime.runtime()
    g = ctypes.c_void_p()
    rc = lib.tr_group_join(rt, world_size, rank, backend.encode(), _name(group_name),
                           int(timeout_ms), byref(g))
    _check(rc, what)
    return g


def _group(group_name, what):
    """This process's handle of the group: joined already, one whose communicator is made
    on its first op (nccl: joined now), or a group declared for this actor
    (create_collective_group), joined now."""
    rt = _runtime.runtime()
    g = ctypes.c_void_p()
    lazy = _pending.get(group_name) if isinstance(group_name, str) else None
    if lazy is not None:
        world_size, rank, backend, timeout_ms = lazy
        try:
            g = _join(world_size, rank, backend, group_name, what, timeout_ms)
            del _pending[group_name]
            return g
        except (CollectiveError, ValueError) as e:
            raise CollectiveError(
                f"{what}: creating the {backend} communicator of collective group "
                f"'{group_name}' on its first op failed (a {backend} group needs a GPU for "
                f"each rank and a CUDA build of troupe): {e}", getattr(e, "code", None)) \
                from e
    rc = lib.tr_group_get(rt, _name(group_name), byref(g))
    if rc == _errors.ENOTFOUND:
        declared = lib.tr_group_is_declared(rt, _name(group_name))
        if declared < 0:
            _check(declared, what)
        if declared == 0:
            raise CollectiveError(f"{what}: the collective group '{group_name}' is not "
                                  f"initialized in this process (init_collective_group, or "
                                  f"create_collective_group from the driver)", "TR_ENOTFOUND")
        rc = lib.tr_group_open(rt, _name(group_name), _JOIN_TIMEOUT_MS, byref(g))
        if rc in (_errors.ESTATE, _errors.ENOTFOUND):  # declared, but not with this one
            what = f"{what}: this process is not in collective group '{group_name}'"
    _check(rc, what)
    return g


def _device(t, what, writable):
    """(pointer, element count, tr_dtype) of a GPU array (cupy, torch, numba: anything with
    __cuda_array_interface__), used in place: the C library takes device pointers on
    every backend in its CUDA build (nccl directly; shm and gloo staged through pinned
    memory)."""
    import numpy as np
    ai = t.__cuda_array_interface__
    dt = DTYPES.get(np.dtype(ai["typestr"]).name)
    if dt is None:
        raise TypeError(f"{what}: dtype {np.dtype(ai['typestr'])} is not supported")
    shape = tuple(ai["shape"])
    n = int(np.prod(shape)) if shape else 1
    item = np.dtype(ai["typestr"]).itemsize
    strides = ai.get("strides")
    if strides is not None and n > 1:
        want, acc = [], item
        for d in reversed(shape):
            want.append(acc)
            acc *= d
        if tuple(strides) != tuple(reversed(want)):
            raise ValueError(f"{what}: the GPU array must be C-contiguous")
    ptr, read_only = ai["data"]
    if writable and read_only:
        raise ValueError(f"{what}: the GPU array is read-only")
    return ctypes.c_void_p(ptr), n, dt


def _tensor(t, what, writable=True):
    """(pointer, element count, tr_dtype) of a numpy array (or a GPU array) used in
    place."""
    import numpy as np
    if not isinstance(t, np.ndarray):
        if hasattr(t, "__cuda_array_interface__"):
            return _device(t, what, writable)
        raise TypeError(f"{what}: a numpy array (or a GPU array with "
                        f"__cuda_array_interface__) is needed, got {type(t).__name__}")
    dt = DTYPES.get(t.dtype.name)
    if dt is None:
        raise TypeError(f"{what}: dtype {t.dtype} is not supported (int8, uint8, int32, "
                        f"int64, float16, float32, float64)")
    if not t.flags.c_contiguous:
        raise ValueError(f"{what}: the array must be C-contiguous (np.ascontiguousarray)")
    if writable and not t.flags.writeable:
        raise ValueError(f"{what}: the array is read-only (ops work in place: copy it)")
    return ctypes.c_void_p(t.ctypes.data), t.size, dt


def _is_gpu(t):
    import numpy as np
    return not isinstance(t, np.ndarray) and hasattr(t, "__cuda_array_interface__")


def _shape_dtype(t):
    import numpy as np
    if isinstance(t, np.ndarray):
        return t.shape, t.dtype
    ai = t.__cuda_array_interface__
    return tuple(ai["shape"]), np.dtype(ai["typestr"])


def _same(tensors, like, what, writable=False):
    """Every array of a list is a usable array (numpy, or GPU arrays with a GPU tensor)
    shaped like `like`."""
    gpu = _is_gpu(like)
    for x in tensors:
        _tensor(x, what, writable)
        if _is_gpu(x) != gpu:
            raise TypeError(f"{what}: the lists' arrays and the tensor are all numpy arrays "
                            f"or all GPU arrays")
    want = _shape_dtype(like)
    for x in tensors:
        if _shape_dtype(x) != want:
            raise CollectiveArgumentError(
                f"{what}: every array must have the shape and dtype of the tensor "
                f"({want[0]}, {want[1]}), got ({_shape_dtype(x)[0]}, {_shape_dtype(x)[1]})")


_cudart = None


def _cuda():
    """The CUDA runtime that libtroupe's CUDA build loaded: lists of GPU arrays go through
    one device buffer, as lists of numpy arrays go through one array."""
    global _cudart
    if _cudart is None:
        path = None
        with open("/proc/self/maps") as f:
            for line in f:
                if "/libcudart.so" in line:
                    path = line.split()[-1]
                    break
        if path is None:
            raise TypeError("lists of GPU arrays need libtroupe's CUDA build (built with "
                            "--config=cuda; this process has no CUDA runtime loaded)")
        rt = ctypes.CDLL(path)
        rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        rt.cudaFree.argtypes = [ctypes.c_void_p]
        rt.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                  ctypes.c_int]
        rt.cudaGetErrorString.restype = ctypes.c_char_p
        rt.cudaGetErrorString.argtypes = [ctypes.c_int]
        _cudart = rt
    return _cudart


def _cuda_check(rc, what):
    if rc:
        msg = _cuda().cudaGetErrorString(rc).decode(errors="replace")
        raise CollectiveError(f"{what}: CUDA error {rc}: {msg}")


class _DeviceStack:
    """world arrays' bytes side by side in device memory (the C ops' layout)."""

    def __init__(self, world, each):
        self.each, self.p = each, ctypes.c_void_p()
        _cuda_check(_cuda().cudaMalloc(ctypes.byref(self.p), max(world * each, 1)),
                    "cudaMalloc")

    def __del__(self):
        if self.p and _cudart is not None:
            _cudart.cudaFree(self.p)

    def at(self, j):
        return (self.p.value or 0) + j * self.each

    def fill(self, tensor_list):
        for j, t in enumerate(tensor_list):
            _cuda_check(_cuda().cudaMemcpy(self.at(j), t.__cuda_array_interface__["data"][0],
                                           self.each, 4), "cudaMemcpy")  # cudaMemcpyDefault
        _cuda_check(_cuda().cudaDeviceSynchronize(), "cudaDeviceSynchronize")  # (D2D: async)
        return self

    def spill(self, tensor_list):
        for j, t in enumerate(tensor_list):
            _cuda_check(_cuda().cudaMemcpy(t.__cuda_array_interface__["data"][0], self.at(j),
                                           self.each, 4), "cudaMemcpy")
        _cuda_check(_cuda().cudaDeviceSynchronize(), "cudaDeviceSynchronize")


def _stack(tensor_list, like, what):
    """(pointer, keep): the list's arrays side by side, for the C op to read."""
    import numpy as np
    if _is_gpu(like):
        d = _DeviceStack(len(tensor_list), _nbytes(like)).fill(tensor_list)
        return ctypes.c_void_p(d.p.value), d
    keep = np.ascontiguousarray(np.stack(tensor_list))
    return _tensor(keep, what, writable=False)[0], keep


def _room(world, like, what):
    """(pointer, out): room for world arrays like `like`, for the C op to write; then
    _unstack(out, tensor_list)."""
    import numpy as np
    if _is_gpu(like):
        d = _DeviceStack(world, _nbytes(like))
        return ctypes.c_void_p(d.p.value), d
    shape, dtype = _shape_dtype(like)
    out = np.empty((world,) + shape, dtype=dtype)
    return _tensor(out, what)[0], out


def _unstack(out, tensor_list):
    import numpy as np
    if isinstance(out, np.ndarray):
        for j, t in enumerate(tensor_list):
            np.copyto(t, out[j])
    else:
        out.spill(tensor_list)


def _nbytes(t):
    shape, dtype = _shape_dtype(t)
    n = 1
    for d in shape:
        n *= int(d)
    return n * dtype.itemsize


def _list(tensor_list, world, name, what):
    """A list argument of world arrays (Ray's RuntimeError otherwise)."""
    if not isinstance(tensor_list, list):
        raise CollectiveArgumentError(f"{what}: {name} must be a list of {world} arrays, "
                                      f"got {type(tensor_list).__name__}")
    if len(tensor_list) != world:
        raise CollectiveArgumentError(f"{what}: the length of {name} ({len(tensor_list)}) "
                                      f"must be the world size, {world}")


def _peer(g, rank, what):
    """A send's or recv's peer: another rank of the group (Ray's errors otherwise)."""
    world = lib.tr_group_size(g)
    if not 0 <= int(rank) < world:
        raise ValueError(f"{what}: rank {rank!r} is not in [0, {world})")
    if rank == lib.tr_group_rank(g):
        raise CollectiveArgumentError(f"{what}: the peer rank {rank} is this process's own")


# ------------------------------------------------------------------ groups

def init_collective_group(world_size, rank, backend=Backend.SHM, group_name="default",
                          gloo_timeout=_JOIN_TIMEOUT_MS):
    """Joins the group as `rank` (in an actor, or any process of the node); returns once
    all world_size ranks have joined, within gloo_timeout ms (Ray's argument; troupe's
    join waits that long whatever the backend: nccl's on the group's first op)."""
    if isinstance(gloo_timeout, bool) or not isinstance(gloo_timeout, int) or \
            gloo_timeout <= 0:
        raise ValueError(f"gloo_timeout {gloo_timeout!r}: a number of milliseconds > 0 "
                         f"is needed")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in [0, {world_size})")
    b = _backend(backend)
    what = f"init_collective_group({group_name!r})"
    if is_group_initialized(group_name):
        raise CollectiveError(f"{what}: trying to initialize a group twice", "TR_EEXIST")
    if b in _LAZY:  # (Ray's NCCL groups make their communicator on first use)
        _pending[group_name] = (world_size, rank, b, gloo_timeout)
        return
    _join(world_size, rank, b, group_name, what, gloo_timeout)


def create_collective_group(actors, world_size, ranks, backend=Backend.SHM,
                            group_name="default"):
    """From the driver: declares a group over actors (actors[i] gets ranks[i]); each
    joins on its first op."""
    actors = list(actors)
    ranks = list(ranks)
    if len(actors) != world_size or len(ranks) != world_size:
        raise CollectiveArgumentError(f"{len(actors)} actors and {len(ranks)} ranks for a "
                                      f"world of {world_size}")
    if sorted(ranks) != list(range(world_size)):
        raise CollectiveArgumentError(f"ranks {ranks} are not a permutation of "
                                      f"0..{world_size - 1}")
    ids = (_ffi.ActorId * world_size)(*[a._id for a in actors])
    rk = (ctypes.c_int * world_size)(*ranks)
    rc = lib.tr_group_declare(_runtime.runtime(), ids, world_size, rk,
                              _backend(backend).encode(), _name(group_name))
    _check(rc, f"create_collective_group({group_name!r})")


def declare_collective_group(actors, group_name="default", world_size=None, ranks=None,
                             backend=Backend.SHM):
    """Ray's older spelling of create_collective_group (keyword arguments)."""
    actors = list(actors)
    world_size = len(actors) if world_size is None else world_size
    ranks = list(range(world_size)) if ranks is None else ranks
    create_collective_group(actors, world_size, ranks, backend, group_name)


def destroy_collective_group(group_name="default"):
    """Leaves the group (this process's handle goes); no-op if not in it."""
    rt = _runtime.runtime()
    if _pending.pop(_name(group_name).decode(), None) is not None:
        return
    g = ctypes.c_void_p()
    if lib.tr_group_get(rt, _name(group_name), byref(g)) == 0:
        lib.tr_group_destroy(g)


def is_group_initialized(group_name="default"):
    if group_name in _pending:
        return True
    return bool(lib.tr_group_is_initialized(_runtime.runtime(), _name(group_name)))


def get_rank(group_name="default"):
    """This process's rank in the group, -1 if it has not joined it."""
    if group_name in _pending:
        return _pending[group_name][1]
    if not is_group_initialized(group_name):
        return -1
    return lib.tr_group_rank(_group(group_name, "get_rank"))


def get_collective_group_size(group_name="default"):
    """The group's world size, -1 if this process has not joined it."""
    if group_name in _pending:
        return _pending[group_name][0]
    if not is_group_initialized(group_name):
        return -1
    return lib.tr_group_size(_group(group_name, "get_collective_group_size"))


# ------------------------------------------------------------------ ops

def barrier(group_name="default"):
    g = _group(group_name, "barrier")
    _check(lib.tr_barrier(g, unset_timeout_ms), "barrier")


def allreduce(tensor, group_name="default", op=ReduceOp.SUM):
    """Every rank's tensor becomes the reduction of all ranks' (in place)."""
    p, n, dt = _tensor(tensor, "allreduce")
    g = _group(group_name, "allreduce")
    _check(lib.tr_allreduce(g, p, p, n, dt, _op(op), unset_timeout_ms), "allreduce")


def reduce(tensor, dst_rank=0, group_name="default", op=ReduceOp.SUM):
    """dst_rank's tensor becomes the reduction of all ranks' (the others' are unchanged)."""
    p, n, dt = _tensor(tensor, "reduce")
    g = _group(group_name, "reduce")
    _check(lib.tr_reduce(g, p, p, n, dt, _op(op), dst_rank, unset_timeout_ms), "reduce")


def broadcast(tensor, src_rank=0, group_name="default"):
    """Every rank's tensor becomes src_rank's."""
    p, n, dt = _tensor(tensor, "broadcast")
    g = _group(group_name, "broadcast")
    _check(lib.tr_broadcast(g, p, n, dt, src_rank, unset_timeout_ms), "broadcast")


def allgather(tensor_list, tensor, group_name="default"):
    """tensor_list[j] becomes rank j's tensor (a list of world arrays shaped like it)."""
    p, n, dt = _tensor(tensor, "allgather", writable=False)
    g = _group(group_name, "allgather")
    world = lib.tr_group_size(g)
    _list(tensor_list, world, "tensor_list", "allgather")
    _same(tensor_list, tensor, "allgather", writable=True)
    q, out = _room(world, tensor, "allgather")
    _check(lib.tr_allgather(g, p, q, n, dt, unset_timeout_ms), "allgather")
    _unstack(out, tensor_list)


def reduce_scatter(tensor, tensor_list, group_name="default", op=ReduceOp.SUM):
    """tensor becomes the reduction over all ranks of their tensor_list[rank]."""
    g = _group(group_name, "reduce_scatter")
    world = lib.tr_group_size(g)
    _list(tensor_list, world, "tensor_list", "reduce_scatter")
    p, n, dt = _tensor(tensor, "reduce_scatter")
    _same(tensor_list, tensor, "reduce_scatter")
    q, keep = _stack(tensor_list, tensor, "reduce_scatter")
    _check(lib.tr_reduce_scatter(g, q, p, n, dt, _op(op), unset_timeout_ms), "reduce_scatter")
    del keep


reducescatter = reduce_scatter  # Ray's spelling


def send(tensor, dst_rank, group_name="default"):
    p, n, dt = _tensor(tensor, "send", writable=False)
    g = _group(group_name, "send")
    _peer(g, dst_rank, "send")
    _check(lib.tr_send(g, p, n, dt, dst_rank, unset_timeout_ms), "send")


def recv(tensor, src_rank, group_name="default"):
    p, n, dt = _tensor(tensor, "recv")
    g = _group(group_name, "recv")
    _peer(g, src_rank, "recv")
    _check(lib.tr_recv(g, p, n, dt, src_rank, unset_timeout_ms), "recv")


def gather(tensor_list, tensor, dst_rank=0, group_name="default"):
    """MPI_Gather: at dst_rank, tensor_list[j] becomes rank j's tensor (tensor_list is
    ignored, and may be None, elsewhere)."""
    p, n, dt = _tensor(tensor, "gather", writable=False)
    g = _group(group_name, "gather")
    world, me = lib.tr_group_size(g), lib.tr_group_rank(g)
    out, q = None, ctypes.c_void_p()
    if me == dst_rank:
        _list(tensor_list, world, "tensor_list", "gather (at the root)")
        _same(tensor_list, tensor, "gather", writable=True)
        q, out = _room(world, tensor, "gather")
    _check(lib.tr_gather(g, p, q, n, dt, dst_rank, unset_timeout_ms), "gather")
    if out is not None:
        _unstack(out, tensor_list)


def scatter(tensor, tensor_list, src_rank=0, group_name="default"):
    """MPI_Scatter: tensor becomes src_rank's tensor_list[rank] (tensor_list is ignored,
    and may be None, off the root)."""
    p, n, dt = _tensor(tensor, "scatter")
    g = _group(group_name, "scatter")
    world, me = lib.tr_group_size(g), lib.tr_group_rank(g)
    q, keep = ctypes.c_void_p(), None
    if me == src_rank:
        _list(tensor_list, world, "tensor_list", "scatter (at the root)")
        _same(tensor_list, tensor, "scatter")
        q, keep = _stack(tensor_list, tensor, "scatter")
    _check(lib.tr_scatter(g, q, p, n, dt, src_rank, unset_timeout_ms), "scatter")
    del keep


def alltoall(out_list, in_list, group_name="default"):
    """MPI_Alltoall: out_list[j] becomes rank j's in_list[rank] (lists of world arrays of
    one shape and dtype)."""
    g = _group(group_name, "alltoall")
    world = lib.tr_group_size(g)
    for name, lst in (("out_list", out_list), ("in_list", in_list)):
        _list(lst, world, name, "alltoall")
    like = in_list[0]
    _, n, dt = _tensor(like, "alltoall", writable=False)
    _same(in_list, like, "alltoall")
    _same(out_list, like, "alltoall", writable=True)
    p, keep = _stack(in_list, like, "alltoall")
    q, out = _room(world, like, "alltoall")
    _check(lib.tr_alltoall(g, p, q, n, dt, unset_timeout_ms), "alltoall")
    _unstack(out, out_list)
    del keep
