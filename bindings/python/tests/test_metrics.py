"""troupe.init() returns Ray's context (dashboard_url: the node's metrics and status page),
and the node's Prometheus metrics count a Python program's calls by its own class names,
its exceptions as errors, and its tasks (docs/OBSERVABILITY.md)."""
import urllib.request

import pytest

import troupe


def scrape(ctx):
    with urllib.request.urlopen(f"http://{ctx.dashboard_url}/metrics", timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return r.read().decode()


def value(text, series):
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return None


@troupe.remote
class Flaky:
    def f(self, x):
        if x < 0:
            raise ValueError("negative")
        return x


@troupe.remote
def double(x):
    return 2 * x


def test_metrics_count_a_python_program():
    ctx = troupe.init()
    try:
        assert ctx.dashboard_url and ctx["address_info"]["webui_url"] == ctx.dashboard_url
        a = Flaky.remote()
        assert troupe.get([a.f.remote(i) for i in range(20)]) == list(range(20))
        for _ in range(3):
            with pytest.raises(ValueError):
                troupe.get(a.f.remote(-1))
        assert troupe.get([double.remote(i) for i in range(4)]) == [0, 2, 4, 6]
        m = scrape(ctx)
        assert value(m, 'troupe_calls_total{class="Flaky"}') == 23, m
        assert value(m, 'troupe_call_errors_total{class="Flaky"}') == 3
        assert value(m, "troupe_tasks_total") == 4
        assert value(m, 'troupe_actors{state="ALIVE"}') >= 1
    finally:
        troupe.shutdown()


def test_no_dashboard_when_asked_for_none():
    with troupe.init(include_dashboard=False) as ctx:
        assert ctx.dashboard_url is None
    assert not troupe.is_initialized()
