"""Each test runs against a fresh embedded node (troupe.init / troupe.shutdown around
it), in real worker processes; nothing of Ray is imported."""
import gc
import time

import pytest

import troupe


@pytest.fixture
def ray():
    """troupe under the name Ray users' code uses, started for the test."""
    troupe.init(num_cpus=4)
    try:
        yield troupe
    finally:
        troupe.shutdown()


def store_empties(timeout=5.0):
    """Whether the node's store holds no object within timeout seconds (after a gc: refs
    that went out of scope release their holds; a dead worker's holds go shortly after)."""
    gc.collect()
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if troupe.object_store_stats()["n_objects"] == 0:
            return True
        time.sleep(0.05)
    return False
