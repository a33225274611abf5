"""Ray's Compiled Graphs quickstart, run with only its import lines changed (tests/
ray_doc_code.py: read from RAY_DOC_CODE, a copy of Ray's
doc/source/ray-core/doc_code/cgraph_quickstart.py;
https://docs.ray.io/en/latest/ray-core/compiled-graph/quickstart.html): an actor's
calls, the same graph run lazily by dag.execute before any compile (ObjectRefs), then
compiled (CompiledDAGRefs), teardown, two actors in a chain, a MultiOutputNode, an
asyncio graph (execute_async) and an actor killed under a compiled graph. The versions
of the file with the GPU part (torch, NCCL between two GPU actors) are not run here."""
import asyncio

import pytest

import troupe as ray
from ray_doc_code import Output, run, source


def test_cgraph_quickstart(tmp_path):
    if "torch" in source("cgraph_quickstart.py")[1]:
        pytest.skip("this version of cgraph_quickstart.py needs torch and 2 GPUs")
    # the program calls asyncio.get_event_loop() as a fresh process may: an earlier
    # test's asyncio.run() left this one with none set
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    with Output(tmp_path) as out:
        ray.init()
        try:
            ns = run("cgraph_quickstart.py")
            printed = out.text()
        finally:
            ray.shutdown()
            asyncio.set_event_loop(None)
            loop.close()
    # three timings (actor call, lazy graph, compiled graph), then the chain's output
    # and the MultiOutputNode's
    assert printed.count("Execution takes ") == 3
    assert "\nhello\n['hello', 'hello']\n" in printed
    # (its own assert: the three actors not killed are alive, the graph failed with
    # ActorDiedError)
    assert ns["live_actors"] == ns["actors"][1:]
