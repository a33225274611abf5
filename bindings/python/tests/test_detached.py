"""lifetime="detached": an actor outlives the driver that made it and is found by name
from another driver (Ray's detached actors) in the namespace it was made in (each driver
that names none has an anonymous one of its own); an ordinary named one goes with its
driver."""
import subprocess
import sys
import time

import pytest

import troupe as ray

DRIVER = """
import sys
import troupe as ray

@ray.remote
class Counter:
    def __init__(self):
        self.n = 0
    def add(self, k):
        self.n += k
        return self.n

ray.init(address=sys.argv[1], namespace="detached-test")
a = Counter.options(name="kept", lifetime="detached").remote()
b = Counter.options(name="not-kept").remote()
assert ray.get(a.add.remote(5)) == 5 and ray.get(b.add.remote(1)) == 1
"""


@pytest.fixture(autouse=True)
def runtime():
    ray.init()
    yield
    ray.shutdown()


def test_detached_actor_outlives_its_driver(tmp_path):
    path = tmp_path / "driver.py"
    path.write_text(DRIVER)
    out = subprocess.run([sys.executable, str(path), ray.node_address()], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    with pytest.raises(ValueError):
        ray.get_actor("kept")  # (this driver's own namespace: another)
    a = ray.get_actor("kept", namespace="detached-test")
    assert ray.get(a.add.remote(2)) == 7  # the same actor: its state kept
    end = time.monotonic() + 5
    while time.monotonic() < end:
        try:
            ray.get_actor("not-kept", namespace="detached-test")
        except ValueError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("an ordinary actor outlived its driver")
    ray.kill(a)
