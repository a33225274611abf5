"""examples/compare_paths.py - the three value paths from Python (bindings/python), as a
Ray user would write each with `import troupe as ray`: n actors allreduce float32 arrays
from 4 B to 64 MiB
  - through the object store (each puts its array, then gets the others' and sums: the
    way Ray users do it without collectives),
  - through a collective group (troupe.util.collective.allreduce, shm and gloo backends),
  - as a compiled graph (each actor's array into an allreduce node, then back),
every sum checked; prints one table of median times per op and the fastest path at each
size. tools/demo.sh runs it after the C version.

  python3 examples/compare_paths.py [2,4]
"""
import statistics
import sys
import time

import numpy as np

import troupe as ray
import troupe.util.collective as collective
from troupe.dag import InputNode, MultiOutputNode
from troupe.experimental.collective import allreduce

SIZES = [4, 4 << 10, 256 << 10, 1 << 20, 16 << 20, 64 << 20]
PATHS = ["objectstore", "shm", "gloo", "graph"]


def label(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB" if b >= 1 << 10 else f"{b} B"


@ray.remote
class Rank:
    def __init__(self, rank, world):
        self.rank, self.world = rank, world

    def join(self, backend, name):
        collective.init_collective_group(self.world, self.rank, backend, name)
        return True

    def make(self, count):
        return ray.put(np.full(count, self.rank + 1, dtype=np.float32))

    def sum_refs(self, refs):
        out = np.zeros_like(ray.get(refs[0]))
        for r in refs:
            out += ray.get(r)
        return float(out[0])

    def coll(self, name, count, iters):
        x = np.empty(count, dtype=np.float32)
        ts = []
        for _ in range(iters):
            x.fill(self.rank + 1)
            collective.barrier(name)
            t = time.perf_counter()
            collective.allreduce(x, name)
            ts.append(time.perf_counter() - t)
        return statistics.median(ts), float(x[0])

    def value(self, count):
        return np.full(count, self.rank + 1, dtype=np.float32)

    def first(self, t):
        return float(t[0])


def median_s(f, iters):
    ts = []
    for _ in range(iters):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def run(world, note):
    ranks = [Rank.remote(i, world) for i in range(world)]
    want = float(world * (world + 1) // 2)
    for backend in ("shm", "gloo"):
        assert all(ray.get([r.join.remote(backend, f"cmp-{backend}-{world}") for r in ranks]))
    rows = {}
    for size in SIZES:
        count = max(1, size // 4)
        iters = 30 if size <= 1 << 20 else 8
        row = {}

        def store():
            refs = ray.get([r.make.remote(count) for r in ranks])
            sums = ray.get([r.sum_refs.remote(refs) for r in ranks])
            assert sums == [want] * world, sums
        store()
        row["objectstore"] = median_s(store, iters)
        for backend in ("shm", "gloo"):
            out = ray.get([r.coll.remote(f"cmp-{backend}-{world}", count, iters) for r in ranks])
            assert all(v == want for _, v in out), out
            row[backend] = max(t for t, _ in out)
        with InputNode() as inp:
            outs = allreduce.bind([r.value.bind(inp) for r in ranks])
            dag = MultiOutputNode([r.first.bind(o) for r, o in zip(ranks, outs)])
        try:  # (slots of at most 8 MiB: a larger value goes as an object, by reference)
            slot = max(65536, min(size + 4096, 8 << 20))
            dag = dag.experimental_compile(_buffer_size_bytes=slot, _max_inflight_executions=2)
        except ValueError as e:
            row["graph"] = None
            note.append(f"graph at {label(size)}: {e}")
        else:
            assert ray.get(dag.execute(count)) == [want] * world
            row["graph"] = median_s(lambda: ray.get(dag.execute(count)), iters)
            dag.teardown()
        rows[size] = row
    for r in ranks:
        ray.kill(r)
    return rows


def main():
    worlds = [int(w) for w in (sys.argv[1] if len(sys.argv) > 1 else "2,4").split(",")]
    ray.init()
    try:
        print("allreduce of float32 arrays from Python, median per op (us); every sum "
              "checked")
        print(f"{'actors':>6} {'size':>8} " + " ".join(f"{p:>12}" for p in PATHS) +
              "   fastest")
        note = []
        for world in worlds:
            for size, row in run(world, note).items():
                best = min((p for p in row if row[p] is not None), key=row.get)
                print(f"{world:>6} {label(size):>8} " +
                      " ".join(f"{row[p] * 1e6:12.1f}" if row[p] is not None else
                               f"{'-':>12}" for p in PATHS) + f"   {best}")
        for n in note:
            print("  (" + n + ")")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
