"""Ray's "Tasks" page examples, run with only their import lines changed (tests/
ray_doc_code.py: read from RAY_DOC_CODE, a copy of Ray's
doc/source/ray-core/doc_code; https://docs.ray.io/en/latest/ray-core/tasks.html):
tasks.py (remote functions, refs as arguments, ray.wait, num_returns, a generator's
returns, ray.cancel, resource options), nested-tasks.py, and the "Ray Generators" page's
streaming_generator.py. Each asserts what the program's own asserts and prints say."""
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


def test_streaming_generator_py(tmp_path):
    # (about 80 s: its generators sleep 5 s between items, as the page's do. Every item
    # comes as it is yielded: the program's ray.wait asserts need it)
    with Output(tmp_path) as out:
        ray.init(num_cpus=2)
        try:
            ns = run("streaming_generator.py")
            text = out.text()
            assert "Exception is raised when i == 1 as expected" in text
            assert "timeout 0, nothing is ready." in text
            assert "Wait for 5 seconds. The next item is ready." in text
            assert "Wait for 0 seconds. The next item is not ready." in text
            assert sorted(ns["result"], key=str) == sorted([0, 1, 2, 3, 4, None], key=str)
            # the actors' and the asyncio examples' items, in order (2, 3, 4 of the first
            # generator are printed before them)
            lines = text.split("\n")
            assert lines.count("0") >= 6 and lines.count("4") >= 7
        finally:
            ray.shutdown()
