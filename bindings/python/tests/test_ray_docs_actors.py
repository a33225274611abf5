"""Ray's "Actors" pages' examples, run with only their import lines changed (tests/
ray_doc_code.py: read from RAY_DOC_CODE, a copy of Ray's doc/source/ray-core/doc_code):
actor_restart.py (max_restarts with max_task_retries: the call in flight when the actor
exits goes again to the restarted actor), actor_sync.py (an async actor as a signal
that tasks wait on) and pattern_pipelining.py (actors pulling work from a queue actor).
Each asserts what the program prints."""
import time

import troupe as ray
from ray_doc_code import Output, run


def test_actor_restart_py(tmp_path):
    # The actor exits (os._exit) on its 11th call, each time: that call was in flight,
    # and max_task_retries=-1 sends it to the restarted actor, which answers 1. Four
    # restarts give 50 answers 1..10, 1..10, ...; then every call fails with
    # RayActorError (printed FAILURE).
    with Output(tmp_path) as out:
        try:
            run("actor_restart.py")
            lines = out.text().split()
        finally:
            ray.shutdown()
    assert lines == [str(i) for i in range(1, 11)] * 5 + ["FAILURE"] * 10, lines


def test_actor_sync_py(tmp_path):
    with Output(tmp_path) as out:
        try:
            run("actor_sync.py")
            text = out.wait_for("go!", "go!", "go!", "go!")
        finally:
            ray.shutdown()
    assert text.index("ready...") < text.index("set..") < text.index("go!"), text


def test_pattern_pipelining_py(tmp_path):
    # two workers (one pulling its next item while it works, one not) each drain a
    # queue of 0..9 in order: what their workers print
    with Output(tmp_path) as out:
        try:
            run("pattern_pipelining.py")
            end = time.monotonic() + 20
            while len(numbers(out.text())) < 20 and time.monotonic() < end:
                time.sleep(0.05)
            items = numbers(out.text())
        finally:
            ray.shutdown()
    assert items == list(range(10)) * 2, items


def numbers(text):
    return [int(w) for w in text.split() if w.isdigit()]
