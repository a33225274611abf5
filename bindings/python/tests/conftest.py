"""Each test runs against a fresh embedded node (troupe.init / troupe.shutdown around
it), in real worker processes; nothing of Ray is imported."""
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
