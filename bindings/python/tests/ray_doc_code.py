"""Ray's documented example programs (ray-project/ray, doc/source/ray-core/doc_code/*.py),
run as they are but for their import lines: `import ray` becomes `import troupe as ray`,
`import ray.dag` `import troupe.dag`, `from ray.x import` `from troupe.x import`. Nothing
else of the program's text is changed.

Ray's program text is not copied into this repository: a test reads it from a copy of
Ray's doc_code, the directory named by RAY_DOC_CODE (doc/source/ray-core/doc_code of a
Ray checkout, or the checkout itself), and is skipped where there is none.

A program runs in this process, on the runtime the test started (its functions and
classes are pickled by value: the module it runs as is not importable), with the
process's stdout and stderr (fds 1 and 2, which the node's workers inherit) going to a
file, so that what the program and its tasks print can be read back (Output)."""
import os
import re
import sys
import time

import pytest

_SUBDIR = os.path.join("doc", "source", "ray-core", "doc_code")

_IMPORTS = [
    (re.compile(r"^(\s*)import ray$", re.M), r"\1import troupe as ray"),
    (re.compile(r"^(\s*)import ray\.", re.M), r"\1import troupe."),
    (re.compile(r"^(\s*)from ray(\.| import)", re.M), r"\1from troupe\2"),
]


def doc_code_dir():
    d = os.environ.get("RAY_DOC_CODE")
    if not d:
        return None
    if os.path.isdir(os.path.join(d, _SUBDIR)):
        d = os.path.join(d, _SUBDIR)
    return d if os.path.isdir(d) else None


def source(name):
    """The program doc_code/<name>, its import lines changed (the test is skipped where
    there is no copy of Ray's doc_code)."""
    d = doc_code_dir()
    if d is None:
        pytest.skip("no copy of Ray's doc_code: set RAY_DOC_CODE to "
                    "ray/doc/source/ray-core/doc_code")
    path = os.path.join(d, name)
    if not os.path.exists(path):
        pytest.skip(f"{path} does not exist (another version of Ray's docs)")
    with open(path) as f:
        text = f.read()
    for pattern, repl in _IMPORTS:
        text = pattern.sub(repl, text)
    assert not re.search(r"^\s*(import|from) ray\b", text, re.M), \
        f"{name}: an import of ray left unchanged"
    return path, text


def run(name):
    """Runs doc_code/<name> as the module ray_doc_<name>; returns its globals."""
    path, text = source(name)
    module = "ray_doc_" + re.sub(r"\W", "_", name[:-3])
    namespace = {"__name__": module, "__file__": path, "__builtins__": __builtins__}
    exec(compile(text, path, "exec"), namespace)
    return namespace


class Output:
    """fds 1 and 2 of this process go to a file while it lives (a context manager):
    what the driver and the node's workers started after it print. wait_for(*texts)
    waits until each text was printed (tasks the program left running print later)."""

    def __init__(self, tmp_path):
        self.path = tmp_path / "output.txt"

    def __enter__(self):
        sys.stdout.flush()
        sys.stderr.flush()
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND,
                          0o644)
        self.saved = [os.dup(1), os.dup(2)]
        os.dup2(self.fd, 1)
        os.dup2(self.fd, 2)
        # (pytest's capture has sys.stdout write to a file of its own, not to fd 1)
        self.stream = open(self.fd, "w", buffering=1, closefd=False)
        self.sys_saved = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = self.stream
        return self

    def __exit__(self, *exc):
        self.stream.flush()
        sys.stdout, sys.stderr = self.sys_saved
        self.stream.close()
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)
        for fd in self.saved + [self.fd]:
            os.close(fd)

    def text(self):
        self.stream.flush()
        return self.path.read_text()

    def wait_for(self, *texts, timeout=20.0):
        end = time.monotonic() + timeout
        while True:
            out = self.text()
            if all(out.count(t) >= texts.count(t) for t in texts):
                return out
            if time.monotonic() > end:
                raise AssertionError(f"not printed in {timeout} s: {texts!r}; printed:\n{out}")
            time.sleep(0.05)
