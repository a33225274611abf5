"""ray.util.collective's documented examples with `import troupe as ray` and
`troupe.util.collective as collective` (numpy arrays, CPU backends), then every op with 4
ranks checked against numpy, and bad input."""
import numpy as np
import pytest

import troupe
import troupe.util.collective as collective
from troupe import exceptions


@troupe.remote
class Worker:
    """The documentation's worker (numpy instead of cupy: the CPU backends)."""

    def __init__(self):
        self.send = np.ones((4,), dtype=np.float32)
        self.recv = np.zeros((4,), dtype=np.float32)

    def setup(self, world_size, rank, backend="gloo", group_name="default"):
        collective.init_collective_group(world_size, rank, backend, group_name)
        return True

    def compute(self, group_name="default"):
        collective.allreduce(self.send, group_name)
        return self.send

    def destroy(self, group_name="default"):
        collective.destroy_collective_group(group_name)
        return collective.is_group_initialized(group_name)

    def get_buffer(self):
        return self.recv

    def do_send(self, target_rank=0, group_name="default"):
        collective.send(self.send * 7, target_rank, group_name)

    def do_recv(self, src_rank=0, group_name="default"):
        collective.recv(self.recv, src_rank, group_name)
        return self.recv


@pytest.mark.parametrize("backend", ["gloo", "shm"])
def test_imperative_allreduce(ray, backend):
    num_workers = 2
    workers = []
    init_rets = []
    for i in range(num_workers):
        w = Worker.remote()
        workers.append(w)
        init_rets.append(w.setup.remote(num_workers, i, backend))
    assert ray.get(init_rets) == [True, True]
    results = ray.get([w.compute.remote() for w in workers])
    for r in results:
        assert np.array_equal(r, np.full(4, 2, dtype=np.float32))
    assert ray.get([w.destroy.remote() for w in workers]) == [False, False]


@pytest.mark.parametrize("backend", ["gloo", "shm"])
def test_declarative_allreduce(ray, backend):
    num_workers = 2
    workers = [Worker.remote() for _ in range(num_workers)]
    _options = {"group_name": "177", "world_size": 2, "ranks": [0, 1], "backend": backend}
    collective.declare_collective_group(workers, **_options)
    results = ray.get([w.compute.remote("177") for w in workers])
    for r in results:
        assert np.array_equal(r, np.full(4, 2, dtype=np.float32))
    # Ray's newer form
    more = [Worker.remote() for _ in range(2)]
    collective.create_collective_group(more, 2, [1, 0], backend, "178")
    assert all(np.array_equal(r, np.full(4, 2, dtype=np.float32))
               for r in ray.get([w.compute.remote("178") for w in more]))


def test_send_recv_pair(ray):
    workers = [Worker.remote() for _ in range(2)]
    collective.create_collective_group(workers, 2, [0, 1], "gloo", "8")
    done = workers[0].do_send.remote(1, "8")
    got = ray.get(workers[1].do_recv.remote(0, "8"))
    ray.get(done)
    assert np.array_equal(got, np.full(4, 7, dtype=np.float32))
    assert np.array_equal(ray.get(workers[1].get_buffer.remote()), np.full(4, 7, np.float32))


@troupe.remote
class Rank:
    def ops(self, rank, world, group, backend):
        collective.init_collective_group(world, rank, backend, group)
        out = {"rank": collective.get_rank(group),
               "size": collective.get_collective_group_size(group)}
        x = np.arange(6, dtype=np.float64) + 10 * rank
        collective.allreduce(x, group)
        out["allreduce"] = x.copy()
        y = np.full(3, rank + 1, dtype=np.int32)
        collective.allreduce(y, group, collective.ReduceOp.PRODUCT)
        out["prod"] = y.copy()
        m = np.array([rank, -rank], dtype=np.int64)
        collective.allreduce(m, group, collective.ReduceOp.MAX)
        out["max"] = m.copy()
        r = np.full(2, float(rank), dtype=np.float32)
        collective.reduce(r, 2 % world, group, collective.ReduceOp.SUM)
        out["reduce"] = r.copy()
        b = np.full(5, rank, dtype=np.uint8)
        collective.broadcast(b, 1 % world, group)
        out["broadcast"] = b.copy()
        lst = [np.zeros(2, dtype=np.int64) for _ in range(world)]
        collective.allgather(lst, np.array([rank, rank * rank], dtype=np.int64), group)
        out["allgather"] = np.stack(lst)
        rs = np.zeros(2, dtype=np.float32)
        collective.reducescatter(rs, [np.full(2, rank + j, np.float32) for j in range(world)],
                                 group)
        out["reducescatter"] = rs.copy()
        g = [np.zeros(1, np.int64) for _ in range(world)] if rank == 0 else None
        collective.gather(g, np.array([rank * 3], np.int64), 0, group)
        out["gather"] = None if g is None else np.concatenate(g)
        sc = np.zeros(2, np.int32)
        src = [np.array([j, j], np.int32) for j in range(world)] if rank == world - 1 else None
        collective.scatter(sc, src, world - 1, group)
        out["scatter"] = sc.copy()
        outs = [np.zeros(1, np.int64) for _ in range(world)]
        collective.alltoall(outs, [np.array([100 * rank + j], np.int64) for j in range(world)],
                            group)
        out["alltoall"] = np.concatenate(outs)
        e = np.zeros(0, np.float32)
        collective.allreduce(e, group)
        z = np.array(rank + 1.0)
        collective.allreduce(z, group)
        out["zero_d"] = float(z)
        collective.barrier(group)
        return out


@pytest.mark.parametrize("backend", ["shm", "gloo"])
def test_every_op_four_ranks(ray, backend):
    world = 4
    ranks = [Rank.remote() for _ in range(world)]
    outs = ray.get([a.ops.remote(i, world, "t4-" + backend, backend)
                    for i, a in enumerate(ranks)], timeout=120)
    base = np.arange(6, dtype=np.float64)
    for rank, o in enumerate(outs):
        assert o["rank"] == rank and o["size"] == world
        assert np.array_equal(o["allreduce"], sum(base + 10 * k for k in range(world)))
        assert np.array_equal(o["prod"], np.full(3, 24, np.int32))
        assert np.array_equal(o["max"], np.array([3, 0]))
        if rank == 2:
            assert np.array_equal(o["reduce"], np.full(2, 6.0, np.float32))
        else:
            assert np.array_equal(o["reduce"], np.full(2, float(rank), np.float32))
        assert np.array_equal(o["broadcast"], np.full(5, 1, np.uint8))
        assert np.array_equal(o["allgather"], np.array([[k, k * k] for k in range(world)]))
        assert np.array_equal(o["reducescatter"],
                              np.full(2, sum(k + rank for k in range(world)), np.float32))
        if rank == 0:
            assert np.array_equal(o["gather"], np.array([0, 3, 6, 9]))
        assert np.array_equal(o["scatter"], np.array([rank, rank], np.int32))
        assert np.array_equal(o["alltoall"], np.array([100 * k + rank for k in range(world)]))
        assert o["zero_d"] == 10.0


@troupe.remote
class Misuse:
    def join(self, rank):
        collective.init_collective_group(2, rank, "shm", "bad")
        return True

    def try_op(self, what):
        try:
            if what == "dtype":
                collective.allreduce(np.ones(3, dtype=np.uint16), "bad")
            elif what == "strided":
                collective.allreduce(np.ones(8, dtype=np.float32)[::2], "bad")
            elif what == "readonly":
                a = np.ones(3, dtype=np.float32)
                a.flags.writeable = False
                collective.allreduce(a, "bad")
            elif what == "list":
                collective.allreduce([1.0, 2.0], "bad")
            elif what == "nogroup":
                collective.allreduce(np.ones(3, np.float32), "never-joined")
            elif what == "backend":
                collective.init_collective_group(2, 0, "carrier-pigeon", "x")
        except Exception as e:  # (the actor lives on: returned, not raised)
            return type(e).__name__
        return "no error"

    def mismatch(self, n):
        try:
            collective.allreduce(np.ones(n, np.float32), "bad")
        except Exception as e:
            return type(e).__name__, str(e)
        return "no error", ""


def test_bad_input_gives_clear_errors(ray):
    a, b = Misuse.remote(), Misuse.remote()
    assert ray.get([a.join.remote(0), b.join.remote(1)]) == [True, True]
    assert ray.get(a.try_op.remote("dtype")) == "TypeError"
    assert ray.get(a.try_op.remote("strided")) == "ValueError"
    assert ray.get(a.try_op.remote("readonly")) == "ValueError"
    assert ray.get(a.try_op.remote("list")) == "TypeError"
    assert ray.get(a.try_op.remote("nogroup")) == "CollectiveError"
    assert ray.get(a.try_op.remote("backend")) == "ValueError"
    # ranks that disagree on the count: both told, the group usable afterwards
    (ka, ta), (kb, tb) = ray.get([a.mismatch.remote(3), b.mismatch.remote(4)], timeout=120)
    assert ka == kb == "ValueError", (ta, tb)
    assert ray.get([a.mismatch.remote(5), b.mismatch.remote(5)]) == [("no error", "")] * 2


def test_a_dead_rank_fails_the_others(ray):
    @ray.remote
    class R:
        def join(self, rank):
            collective.init_collective_group(2, rank, "shm", "dies")
            return True

        def op(self):
            try:
                collective.allreduce(np.ones(4, np.float32), "dies")
            except exceptions.CollectiveError as e:
                return e.code
            return "no error"

    a, b = R.remote(), R.remote()
    assert ray.get([a.join.remote(0), b.join.remote(1)]) == [True, True]
    pending = a.op.remote()
    ray.kill(b)
    assert ray.get(pending, timeout=60) == "TR_EPEER_DIED"


class HostBackedDeviceArray:
    """An array exposing __cuda_array_interface__ (as cupy, torch and numba arrays do)
    over host memory: there is no GPU here, so this checks only that such arrays go to
    the C library by pointer, in place, with their dtype and size (a CUDA build would get
    device memory there)."""

    def __init__(self, a, strides=None):
        self.a = a
        self.__cuda_array_interface__ = {
            "shape": a.shape, "typestr": a.dtype.str, "data": (a.ctypes.data, False),
            "strides": strides, "version": 3}


@troupe.remote
class DeviceRank:
    def run(self, rank):
        collective.init_collective_group(2, rank, "shm", "dev")
        a = np.full((2, 3), rank + 1.0, dtype=np.float64)
        collective.allreduce(HostBackedDeviceArray(a), "dev")
        errors = []
        try:
            collective.allreduce(HostBackedDeviceArray(a, strides=(8, 16)), "dev")
        except ValueError:
            errors.append("strided")
        try:
            collective.allgather([a, a], HostBackedDeviceArray(a), "dev")
        except TypeError:
            errors.append("list")
        parts = [np.zeros_like(a), np.zeros_like(a)]
        try:  # lists of GPU arrays: through one device buffer, in the CUDA build only
            collective.allgather([HostBackedDeviceArray(p) for p in parts],
                                 HostBackedDeviceArray(a), "dev")
            errors.append("gpu list" if np.array_equal(parts[0], np.full((2, 3), 3.0)) else
                          "gpu list: wrong values")
        except TypeError as e:  # the default build
            errors.append("gpu list" if "CUDA build" in str(e) else f"gpu list: {e}")
        except exceptions.CollectiveError as e:  # the CUDA build, in an actor with no GPU
            errors.append("gpu list" if "CUDA" in str(e) else f"gpu list: {e}")
        return a, errors


def test_arrays_with_cuda_array_interface_go_by_pointer(ray):
    ranks = [DeviceRank.remote() for _ in range(2)]
    for a, errors in ray.get([r.run.remote(i) for i, r in enumerate(ranks)]):
        assert np.array_equal(a, np.full((2, 3), 3.0))
        assert errors == ["strided", "list", "gpu list"]


def test_init_collective_group_takes_rays_gloo_timeout(ray):
    """Ray's fifth argument, gloo_timeout (ms): how long the join waits for the others."""
    from troupe.util import collective

    @troupe.remote
    class Joiner:
        def join(self, world, timeout):
            import time
            t = time.monotonic()
            try:
                collective.init_collective_group(world, 0, "gloo", f"gt{world}", timeout)
                return "joined"
            except Exception as e:
                return f"{type(e).__name__} after {time.monotonic() - t:.1f}"

    j = Joiner.remote()
    assert ray.get(j.join.remote(1, 30000)) == "joined"
    # a world of 2 whose other rank never comes: the join gives up after ~1 s, not 60
    out = ray.get(j.join.remote(2, 1000))
    assert out.split()[0].endswith("Error") and float(out.split()[-1]) < 10, out
    with pytest.raises(ValueError, match="gloo_timeout"):
        collective.init_collective_group(1, 0, "gloo", "bad", -5)
