"""troupe.timeline() (Ray's ray.timeline): the node's always-on events as Chrome
trace-event dicts, or a JSON file that keeps Perfetto's rules (tools/trace_check.py):
a Python actor's calls, each linked from its submission to its run, and a task's."""
import json
import os
import pathlib
import subprocess
import sys

import urllib.request

import troupe

CHECKER = pathlib.Path(__file__).resolve().parents[3] / "tools" / "trace_check.py"


@troupe.remote
class Worker:
    def step(self, x):
        return x + 1


@troupe.remote
def square(x):
    return x * x


@troupe.remote
def fails(x):
    raise ValueError(x)


def test_timeline_names_a_python_programs_calls(tmp_path):
    troupe.init()
    try:
        w = Worker.remote()
        assert troupe.get([w.step.remote(i) for i in range(10)]) == list(range(1, 11))
        assert troupe.get(square.remote(3)) == 9
        events = troupe.timeline()
        runs = [e for e in events if e.get("cat") == "call" and e.get("name") == "step"]
        assert len(runs) >= 10, [e for e in events if e.get("ph") == "X"][:20]
        subs = [e for e in events if e.get("cat") == "submit" and e.get("name") == "step"]
        assert len(subs) >= 10
        names = [e["args"]["name"] for e in events if e.get("name") == "process_name"]
        assert any(n.startswith("Worker actor ") for n in names), names
        flows = {e["id"] for e in events if e.get("ph") == "s"}
        assert len(flows) >= 10
        path = tmp_path / "trace.json"
        assert troupe.timeline(filename=str(path)) is None
        assert json.loads(path.read_text())["traceEvents"]
        r = subprocess.run([sys.executable, str(CHECKER), str(path), "--expect",
                            "name:step=20", "--expect", "flows=10"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        troupe.shutdown()


def test_the_tasks_list_shows_recent_runs():
    ctx = troupe.init()
    try:
        assert troupe.get([square.remote(i) for i in range(3)]) == [0, 1, 4]
        try:
            troupe.get(fails.remote(1))
        except Exception:
            pass
        url = f"http://{ctx.dashboard_url}/api/v1/tasks?limit=100"
        with urllib.request.urlopen(url, timeout=10) as r:
            tasks = json.loads(r.read())["items"]
        mine = [t for t in tasks if t["name"].endswith("square")]
        assert len(mine) == 3 and all(t["state"] == "FINISHED" for t in mine), tasks
        assert [t["state"] for t in tasks if t["name"].endswith("fails")] == ["FAILED"], tasks
    finally:
        troupe.shutdown()
