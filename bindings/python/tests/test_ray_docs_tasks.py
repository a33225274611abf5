"""Ray's "Tasks" page examples, run with only their import lines changed (tests/
ray_doc_code.py: read from RAY_DOC_CODE, a copy of Ray's
doc/source/ray-core/doc_code; https://docs.ray.io/en/latest/ray-core/tasks.html):
tasks.py (remote functions, refs as arguments, ray.wait, num_returns, a generator's
returns, ray.cancel, resource options) and nested-tasks.py. Each asserts what the
program's own asserts and prints say."""
import pytest

import troupe as ray
from ray_doc_code import Output, run


def test_tasks_py(tmp_path):
    # (about 30 s on 2 cores: the program leaves 4 tasks of 10 s running and then waits
    # for one of 2 more, which queue behind them on a pool of 2 workers)
    with Output(tmp_path) as out:
        ray.init()
        try:
            ns = run("tasks.py")
            # ray.wait(num_returns=1) returned one of the two slow tasks, done
            assert len(ns["ready_refs"]) == 1 and len(ns["remaining_refs"]) == 1
            assert ray.get(ns["ready_refs"][0]) == 1
            # the generator's 3 values, one per ref
            assert ray.get([ns["a"], ns["b"], ns["c"]]) == [0, 1, 2]
            assert "Object reference was cancelled.\n" in out.text()
        finally:
            ray.shutdown()


def test_nested_tasks_py():
    ray.init(num_cpus=2, num_gpus=1)
    try:
        ns = run("nested-tasks.py")
        # (the program defines them; the page calls them: g's refs, h's values, and the
        # second g that gets f's result inside a task of 1 CPU and 1 GPU)
        f, h, g = ns["f"], ns["h"], ns["g"]
        assert ray.get(h.remote()) == [1, 1, 1, 1]
        assert ray.get(g.remote()) == 1
    finally:
        ray.shutdown()
