"""GPU arrays through the collective path, as ray.util.collective's users pass them: cupy
arrays and torch tensors (anything with __cuda_array_interface__) on the nccl backend,
and staged through the CPU backends (shm, gloo). Needs a GPU, cupy (and torch for its
case) and the library's CUDA build (`bazel build --config=cuda //api:libtroupe.so`, then
TROUPE_LIBRARY): without a GPU or cupy every case skips, saying why.

On a machine with one GPU the two ranks share it (num_gpus=0.5) and each is an NCCL host
of its own (runtime_env's NCCL_HOSTID): NCCL refuses two ranks of one communicator on one
GPU otherwise, and joins these over its socket transport, as it would two machines."""
import numpy as np
import pytest

import troupe
import troupe.util.collective as collective

try:
    import cupy as cp
    _GPUS = cp.cuda.runtime.getDeviceCount()
    _WHY = "" if _GPUS else "no CUDA device"
except Exception as e:  # no cupy, or no driver
    cp, _GPUS, _WHY = None, 0, f"no cupy or no CUDA device ({type(e).__name__}: {e})"

pytestmark = pytest.mark.skipif(not _GPUS, reason=_WHY)


def _rank_options(rank):
    """Placement of rank `rank` of 2: a GPU each, or half of the only one as a host of
    its own."""
    if _GPUS >= 2:
        return {"num_gpus": 1}
    return {"num_gpus": 0.5,
            "runtime_env": {"env_vars": {"NCCL_HOSTID": f"troupe-pytest-host-{rank}"}}}


@troupe.remote
class GpuRank:
    """ray.util.collective's documented worker, on cupy arrays."""

    def setup(self, world, rank, backend, group):
        collective.init_collective_group(world, rank, backend, group)
        self.rank = rank
        return True

    def ops(self, group, n):
        r = self.rank
        out = {}
        x = cp.full((n,), r + 1, dtype=cp.float32)
        collective.allreduce(x, group)
        out["allreduce"] = cp.asnumpy(x)
        y = cp.arange(n, dtype=cp.int32) * (3 if r == 0 else 0)
        collective.broadcast(y, 0, group)
        out["broadcast"] = cp.asnumpy(y)
        parts = [cp.zeros((n,), dtype=cp.float64) for _ in range(2)]
        collective.allgather(parts, cp.full((n,), 10.0 * (r + 1)), group)
        out["allgather"] = [cp.asnumpy(p) for p in parts]
        z = cp.arange(n, dtype=cp.int64) + 7 if r == 0 else cp.zeros((n,), dtype=cp.int64)
        if r == 0:
            collective.send(z, 1, group)
        else:
            collective.recv(z, 0, group)
        out["p2p"] = cp.asnumpy(z)
        rs = cp.zeros((n,), dtype=cp.float32)
        collective.reduce_scatter(rs, [cp.full((n,), (r + 1) * (j + 1), dtype=cp.float32)
                                       for j in range(2)], group)
        out["reduce_scatter"] = cp.asnumpy(rs)
        got = [cp.zeros((n,), dtype=cp.int32) for _ in range(2)] if r == 0 else None
        collective.gather(got, cp.full((n,), r + 5, dtype=cp.int32), 0, group)
        out["gather"] = [cp.asnumpy(x) for x in got] if r == 0 else None
        sc = cp.zeros((n,), dtype=cp.int32)
        collective.scatter(sc, [cp.full((n,), 40 + j, dtype=cp.int32) for j in range(2)]
                           if r == 0 else None, 0, group)
        out["scatter"] = cp.asnumpy(sc)
        outs = [cp.zeros((n,), dtype=cp.float64) for _ in range(2)]
        collective.alltoall(outs, [cp.full((n,), 100.0 * r + j) for j in range(2)], group)
        out["alltoall"] = [cp.asnumpy(x) for x in outs]
        collective.barrier(group)
        return out

    def torch_allreduce(self, group, n):
        import torch
        t = torch.full((n,), float(self.rank + 2), device="cuda")
        collective.allreduce(t, group)
        return t.cpu().numpy()


def _check(outs, n):
    for r, out in enumerate(outs):
        assert np.array_equal(out["allreduce"], np.full(n, 3.0, np.float32)), r
        assert np.array_equal(out["broadcast"], np.arange(n, dtype=np.int32) * 3), r
        assert np.array_equal(out["allgather"][0], np.full(n, 10.0)), r
        assert np.array_equal(out["allgather"][1], np.full(n, 20.0)), r
        # rank r's reduce_scatter: the sum over ranks q of (q + 1) * (r + 1)
        assert np.array_equal(out["reduce_scatter"], np.full(n, 3.0 * (r + 1), np.float32)), r
        assert np.array_equal(out["scatter"], np.full(n, 40 + r, np.int32)), r
        for j in range(2):  # rank j's in[r] = 100 j + r
            assert np.array_equal(out["alltoall"][j], np.full(n, 100.0 * j + r)), (r, j)
    assert np.array_equal(outs[1]["p2p"], np.arange(n, dtype=np.int64) + 7)
    assert [np.array_equal(x, np.full(n, 5 + j, np.int32))
            for j, x in enumerate(outs[0]["gather"])] == [True, True]


@pytest.mark.parametrize("backend", ["nccl", "shm", "gloo"])
def test_cupy_arrays_through_every_backend(ray, backend):
    n = 300_001  # not a multiple of any chunk
    ranks = [GpuRank.options(**_rank_options(r)).remote() for r in range(2)]
    group = f"gpu_{backend}"
    assert ray.get([a.setup.remote(2, r, backend, group) for r, a in enumerate(ranks)],
                   timeout=120) == [True, True]
    _check(ray.get([a.ops.remote(group, n) for a in ranks], timeout=120), n)
    for a in ranks:
        ray.kill(a)


def test_torch_tensors_over_nccl(ray):
    pytest.importorskip("torch")
    ranks = [GpuRank.options(**_rank_options(r)).remote() for r in range(2)]
    assert ray.get([a.setup.remote(2, r, "nccl", "gpu_torch") for r, a in enumerate(ranks)],
                   timeout=120) == [True, True]
    for got in ray.get([a.torch_allreduce.remote("gpu_torch", 4096) for a in ranks],
                       timeout=120):
        assert np.array_equal(got, np.full(4096, 5.0, np.float32))
    for a in ranks:
        ray.kill(a)
