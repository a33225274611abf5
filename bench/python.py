"""bench/python.py - troupe from Python (bindings/python), beside the same C benchmarks
in the same run, so that the binding's cost is a ratio; and beside Ray, if it is
installed (a dev-side comparison: `pip install ray`; never a dependency).

  bazel run -c opt //bench:python -- [--json] [--rounds N] [--config KEY=VALUE]

From Python (medians): an actor call's round trip and pipelined calls per second (in
windows of 1000 in flight, as C's; and all 20000 at once); a
remote function's (task) round trip and tasks per second; a call's result passed inside a
list to another actor that gets it (nested ref); put of
a 64 MiB numpy array and get of it (zero-copy: a view of the store); allreduce of a 1 MiB
float32 array between 2 actors through the object store (put, then each rank gets the
other's and sums: the way Ray users do it without collectives), the shm and the gloo
backends (ops timed in the actors); a compiled graph's echo (one execution at a time).
The C figures come from //bench:actor_calls, :objects, :collectives and :dag, run by
this script; `*_py_cost_over_c` is how many times C's cost Python's is (times: py / c,
rates: c / py). The actor call's figures are measured in 3 rounds, each Python's then
C's (`actor_calls --spin-only`), so that a ratio compares the two in one host state (this
kind of host moves between states within minutes): each call figure is the median of its
rounds, and its ratio the median of the rounds' ratios.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

import troupe
import troupe.util.collective as col
from troupe.dag import InputNode

MiB = 1 << 20


@troupe.remote
def echo_task(x):
    return x


@troupe.remote
class Echo:
    def echo(self, x):
        return x

    def put_array(self, n):
        return [troupe.put(np.ones(n, dtype=np.float32))]

    def reduce_refs(self, refs):
        out = np.zeros_like(troupe.get(refs[0]))
        for r in refs:
            out += troupe.get(r)
        return out.nbytes

    def first(self, refs):
        return troupe.get(refs[0])

    def coll(self, world, rank, backend, name, n, iters):
        col.init_collective_group(world, rank, backend, name)
        x = np.ones(n, dtype=np.float32)
        times = []
        for _ in range(iters):
            col.barrier(name)
            t = time.perf_counter()
            col.allreduce(x, name)
            times.append(time.perf_counter() - t)
            x.fill(1)
        col.destroy_collective_group(name)
        return statistics.median(times) * 1e6


def median_us(f, n, warm=50):
    for _ in range(warm):
        f()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e6


def call_rtt_us(a, n, warm=200):
    """The median of n sync calls `troupe.get(a.echo.remote(1))`, each timed as timeit
    times a statement: written out between the timer's reads, the timer a local. (Through
    median_us, a lambda's frame and the lookups of time.perf_counter add ~50 ns here to
    each time, where bench/actor_calls' timer adds one clock read, ~20 ns.)"""
    pc = time.perf_counter
    ts = []
    keep = ts.append
    for _ in range(warm):
        troupe.get(a.echo.remote(1))
    for _ in range(n):
        t = pc()
        troupe.get(a.echo.remote(1))
        keep(pc() - t)
    return statistics.median(ts) * 1e6


def median_us_pair(f, g, n, block=500):
    """Medians of n times of f and of g, run in alternating blocks of `block` each: both
    see the same host state, and each runs hot (one at a time in turn, a call found its
    actor asleep after every task). After a warm-up of at least a second: a node
    prefaults its store in its first second, on 2 CPUs beside both sides (as
    bench/actor_calls warms up)."""
    w0 = time.perf_counter()
    i = 0
    while i < 1000 or time.perf_counter() - w0 < 1.0:
        f()
        g()
        i += 1
    tf, tg = [], []
    for base in range(0, n, block):
        for times, h in ((tf, f), (tg, g)):
            for _ in range(min(block, n - base)):
                t = time.perf_counter()
                h()
                times.append(time.perf_counter() - t)
    return statistics.median(tf) * 1e6, statistics.median(tg) * 1e6


def py_async_calls(a, total=100000, window=1000):
    """Pipelined calls per second, as C's are measured (bench_util.h's
    bench_async_calls_per_s): windows of `window` calls in flight, then their results,
    `total` calls in all."""
    m, get = a.echo.remote, troupe.get
    t = time.perf_counter()
    for base in range(0, total, window):
        get([m(base + i) for i in range(window)])
    return total // window * window / (time.perf_counter() - t)


def py_async_calls_all(a, n=20000):
    """Pipelined calls per second with all n in flight at once (a Ray program's
    `get([a.f.remote(i) for i in range(n)])`; no C figure beside it)."""
    t = time.perf_counter()
    troupe.get([a.echo.remote(i) for i in range(n)])
    return n / (time.perf_counter() - t)


def call_rounds(bindir, rounds=5):
    """The actor call's figures from Python and from C (actor_calls --spin-only), in
    alternating rounds: medians of each, and the medians of the rounds' ratios. A round's
    Python call is the mean of its figures just before and just after C's run (~1.5 s):
    this host's state can change within a round, and a figure on one side of C's alone
    gave ratios 0.2 apart in one run."""
    a = Echo.remote()
    troupe.get(a.echo.remote(0))
    w0 = time.perf_counter()
    while time.perf_counter() - w0 < 1.0:  # (warm, as median_us_pair)
        troupe.get(a.echo.remote(1))
    rows = []
    for _ in range(rounds):
        before = call_rtt_us(a, 3000)
        per_s = py_async_calls(a)
        r = subprocess.run([os.path.join(bindir, "actor_calls"), "--json", "--spin-only"],
                           check=True, capture_output=True, text=True)
        c = {m["name"]: m["value"] for m in map(json.loads, r.stdout.splitlines())
             if m.get("name")}
        rtt = (before + call_rtt_us(a, 3000)) / 2
        rows.append((rtt, per_s, c["sync_rtt_us_p50"], c["async_calls_per_s"]))
    med = statistics.median
    return {
        "py_call_rtt_us_p50": med(r[0] for r in rows),
        "py_async_calls_per_s": med(r[1] for r in rows),
        "c_call_rtt_us_p50": med(r[2] for r in rows),
        "c_async_calls_per_s": med(r[3] for r in rows),
        "call_rtt_us_p50_py_cost_over_c": med(r[0] / r[2] for r in rows),
        "async_calls_per_s_py_cost_over_c": med(r[3] / r[1] for r in rows),
    }


def py_figures(rounds):
    out = {}
    a = Echo.remote()
    troupe.get(a.echo.remote(0))
    troupe.get(echo_task.remote(0))
    # a call and a task, in alternating blocks: both see the same host state (whether the
    # workers share the driver's core moves either by 2-3x between runs here)
    out["py_call_rtt_us_p50"], out["py_task_rtt_us_p50"] = median_us_pair(
        lambda: troupe.get(a.echo.remote(1)), lambda: troupe.get(echo_task.remote(1)), 2000)
    out["py_async_calls_per_s"] = py_async_calls(a)
    out["py_async_calls_per_s_20000_in_flight"] = py_async_calls_all(a)
    n = 20000
    t = time.perf_counter()
    troupe.get([echo_task.remote(i) for i in range(n)])
    out["py_tasks_per_s"] = n / (time.perf_counter() - t)
    b = Echo.remote()
    troupe.get(b.echo.remote(0))
    # a call's result (in already) passed inside a list to another actor, which gets it:
    # b's call timed, as bench/tasks times C's nested_ref_call
    def nested():
        r = a.echo.remote(1)
        troupe.get(r)
        t = time.perf_counter()
        troupe.get(b.first.remote([r]))
        return time.perf_counter() - t

    nested_s = [nested() for _ in range(1100)][100:]
    out["py_nested_ref_call_us_p50"] = statistics.median(nested_s) * 1e6
    arr = np.ones(64 * MiB // 8, dtype=np.float64)
    puts = []
    for _ in range(rounds + 1):  # (each released before the next, as bench/objects does)
        t = time.perf_counter()
        ref = troupe.put(arr)
        puts.append(time.perf_counter() - t)
        del ref
    out["py_put_gbps_64MiB"] = arr.nbytes / statistics.median(puts[1:]) / 1e9
    ref = troupe.put(arr)
    out["py_get_us_p50_64MiB"] = median_us(lambda: troupe.get(ref), 1000)
    got = troupe.get(ref)
    assert not got.flags.writeable and got.nbytes == arr.nbytes and got[-1] == 1.0
    del ref, got
    # allreduce of 1 MiB between 2 actors
    ws = [Echo.remote(), Echo.remote()]
    count = MiB // 4

    def via_store():
        refs = troupe.get([w.put_array.remote(count) for w in ws])
        flat = [r[0] for r in refs]
        troupe.get([w.reduce_refs.remote(flat) for w in ws])

    out["py_allreduce_us_p50_objectstore_1MiB"] = median_us(via_store, 50, warm=5)
    for backend in ("shm", "gloo"):
        per = troupe.get([w.coll.remote(2, i, backend, f"b-{backend}", count, 200)
                          for i, w in enumerate(ws)])
        out[f"py_allreduce_us_p50_{backend}_1MiB"] = max(per)
    with InputNode() as inp:
        dag = a.echo.bind(inp)
    dag = dag.experimental_compile()
    out["py_dag_echo_us_p50"] = median_us(lambda: troupe.get(dag.execute(1)), 2000)
    dag.teardown()
    return out


def c_figures(bindir):
    def run(name, *args):
        r = subprocess.run([os.path.join(bindir, name), "--json", *args], check=True,
                           capture_output=True, text=True)
        return {m["name"]: m["value"] for m in map(json.loads, r.stdout.splitlines())
                if m.get("name")}
    calls = run("actor_calls")
    objs = run("objects")
    coll = run("collectives", "--sizes", "1MiB", "--worlds", "2", "--ops", "allreduce",
               "--paths", "shm,objectstore,gloo")
    dag = run("dag")
    tasks = run("tasks", "--calls", "2000")
    return {
        "c_task_rtt_us_p50": tasks["task_rtt_us_p50"],
        "c_tasks_per_s": tasks["tasks_per_s"],
        "c_nested_ref_call_us_p50": tasks["nested_ref_call_us_p50"],
        "c_call_rtt_us_p50": calls["sync_rtt_us_p50"],
        "c_async_calls_per_s": calls["async_calls_per_s"],
        "c_put_gbps_64MiB": objs["put_gbps_64MiB"],
        "c_get_us_p50_64MiB": objs["get_us_p50_64MiB"],
        "c_allreduce_us_p50_objectstore_1MiB": coll["allreduce_us_p50_objectstore_2r_1MiB"],
        "c_allreduce_us_p50_shm_1MiB": coll["allreduce_us_p50_shm_2r_1MiB"],
        "c_allreduce_us_p50_gloo_1MiB": coll["allreduce_us_p50_gloo_2r_1MiB"],
        "c_dag_echo_us_p50": dag["dag_echo_rtt_us_p50"],
    }


UNITS = {"per_s": "/s", "gbps": "GB/s", "_us": "us", "_over_": "x"}


def unit(name):
    for k, u in UNITS.items():
        if k in name:
            return u
    return ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--c-bench-dir", default=os.environ.get("TROUPE_BENCH_DIR", ""))
    ap.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                    help="a troupe config key for this run (e.g. call_spin_us=0)")
    args = ap.parse_args()
    troupe.init(_config=dict(kv.split("=", 1) for kv in args.config))
    rounds = {}
    try:
        if args.c_bench_dir:  # (first: one actor up, as bench/actor_calls times C's; after
            rounds = call_rounds(args.c_bench_dir)  # py_figures' ~40 ns slower here)
        py = py_figures(args.rounds)
    finally:
        troupe.shutdown()
    figs = dict(py)
    if args.c_bench_dir:
        c = c_figures(args.c_bench_dir)
        figs.update(c)
        for k, v in py.items():  # how many times C's cost Python's is (times: py / c;
            ck = "c_" + k[3:]     # rates: c / py)
            if ck in c and c[ck] and v:
                ratio = v / c[ck] if "per_s" not in k and "gbps" not in k else c[ck] / v
                figs[k[3:] + "_py_cost_over_c"] = ratio
        figs.update(rounds)  # (the call's figures and ratios: its interleaved rounds')
    try:
        import ray  # noqa: F401  (dev-side comparison only)
    except ImportError:
        ray = None
    if ray is not None:
        r = ray_figures()
        figs.update(r)
        for k, v in r.items():  # how many times troupe's cost Ray's is
            tk = "py_" + k[4:]
            if tk in py and py[tk] and v:
                figs[k[4:] + "_ray_cost_over_troupe"] = (
                    v / py[tk] if "per_s" not in k else py[tk] / v)
    if args.json:
        for k, v in figs.items():
            u = "x" if "_over_" in k else unit(k)
            print(json.dumps({"name": k, "value": round(v, 4), "unit": u}))
    else:
        print(f"{'metric':44} {'value':>14}")
        for k, v in figs.items():
            print(f"{k:44} {v:14.3f} {unit(k) or 'x'}")


def ray_figures():
    """The same figures through Ray, if installed (dev-side), each beside ours."""
    import ray
    ray.init(include_dashboard=False, log_to_driver=False, num_cpus=4)
    out = {}
    try:
        @ray.remote
        class RayEcho:
            def echo(self, x):
                return x

            def put_array(self, n):
                return [ray.put(np.ones(n, dtype=np.float32))]

            def reduce_refs(self, refs):
                out = np.zeros_like(ray.get(refs[0]))
                for r in refs:
                    out += ray.get(r)
                return out.nbytes

            def first(self, refs):
                return ray.get(refs[0])

        @ray.remote
        def ray_echo_task(x):
            return x

        a = RayEcho.remote()
        ray.get(a.echo.remote(0))
        ray.get(ray_echo_task.remote(0))
        out["ray_call_rtt_us_p50"], out["ray_task_rtt_us_p50"] = median_us_pair(
            lambda: ray.get(a.echo.remote(1)), lambda: ray.get(ray_echo_task.remote(1)), 1000)
        n = 5000
        t = time.perf_counter()  # (in troupe's windows of 1000: py_async_calls)
        for base in range(0, n, 1000):
            ray.get([a.echo.remote(base + i) for i in range(1000)])
        out["ray_async_calls_per_s"] = n / (time.perf_counter() - t)
        t = time.perf_counter()
        ray.get([ray_echo_task.remote(i) for i in range(n)])
        out["ray_tasks_per_s"] = n / (time.perf_counter() - t)
        b = RayEcho.remote()
        ray.get(b.echo.remote(0))

        def ray_nested():  # (as troupe's: b's call, with a's result in already)
            r = a.echo.remote(1)
            ray.get(r)
            t = time.perf_counter()
            ray.get(b.first.remote([r]))
            return time.perf_counter() - t

        out["ray_nested_ref_call_us_p50"] = statistics.median(
            [ray_nested() for _ in range(550)][50:]) * 1e6
        arr = np.ones(64 * MiB // 8, dtype=np.float64)
        ref = ray.put(arr)
        out["ray_get_us_p50_64MiB"] = median_us(lambda: ray.get(ref), 200)
        del ref
        ws = [RayEcho.remote(), RayEcho.remote()]

        def via_store():
            refs = ray.get([w.put_array.remote(MiB // 4) for w in ws])
            flat = [r[0] for r in refs]
            ray.get([w.reduce_refs.remote(flat) for w in ws])

        out["ray_allreduce_us_p50_objectstore_1MiB"] = median_us(via_store, 30, warm=3)
        try:
            from ray.dag import InputNode as RayInput
            with RayInput() as inp:
                dag = a.echo.bind(inp)
            dag = dag.experimental_compile()
            out["ray_dag_echo_us_p50"] = median_us(lambda: ray.get(dag.execute(1)), 1000)
            dag.teardown()
        except Exception as e:  # (a Ray without compiled graphs here)
            print(f"bench/python: Ray's compiled graph: {e}", file=sys.stderr)
    finally:
        ray.shutdown()
    return out


if __name__ == "__main__":
    sys.exit(main())
