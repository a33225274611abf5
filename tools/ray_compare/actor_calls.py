"""Ray Core on this machine, measured the way bench/actor_calls measures troupe: a small
echo method called on one actor, sync round trip (p50, p99) and pipelined async
throughput (a window of 1000 calls in flight). A dev-side comparison only (pip install
ray); troupe does not depend on it.

    python3 tools/ray_compare/actor_calls.py [--json] [--calls N]
"""
import json
import sys
import time

import ray


@ray.remote(num_cpus=0)
class Echo:
    def echo(self, x):
        return x


def main():
    as_json = "--json" in sys.argv
    calls = 5000
    if "--calls" in sys.argv:
        calls = int(sys.argv[sys.argv.index("--calls") + 1])
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    a = Echo.remote()
    ray.get(a.echo.remote(0))
    for i in range(500):
        ray.get(a.echo.remote(i))
    lat = []
    for i in range(calls):
        t = time.perf_counter()
        assert ray.get(a.echo.remote(i)) == i
        lat.append((time.perf_counter() - t) * 1e6)
    lat.sort()
    window, total = 1000, calls * 2
    t = time.perf_counter()
    for base in range(0, total, window):
        ray.get([a.echo.remote(base + i) for i in range(window)])
    per_s = total / (time.perf_counter() - t)
    out = [("ray_sync_rtt_us_p50", lat[len(lat) // 2], "us"),
           ("ray_sync_rtt_us_p99", lat[len(lat) * 99 // 100], "us"),
           ("ray_async_calls_per_s", per_s, "calls/s")]
    for name, value, unit in out:
        if as_json:
            print(json.dumps({"name": name, "value": value, "unit": unit}))
        else:
            print(f"{name:34s} {value:14.2f}  {unit}")
    ray.shutdown()


if __name__ == "__main__":
    main()
