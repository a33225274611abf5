"""Builds the package with the C library inside it (troupe/_lib/libtroupe.so.1).

From the source tree, `pip install ./bindings/python` builds libtroupe.so with Bazel
(`bazel build //api:libtroupe.so`, at the repository root) and copies it in; with
TROUPE_LIBRARY set, that file is copied instead (an installed or prebuilt library).
"""
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


def library():
    given = os.environ.get("TROUPE_LIBRARY")
    if given:
        return given
    if not os.path.exists(os.path.join(ROOT, "WORKSPACE")):
        raise SystemExit("troupe: not in the troupe source tree, and TROUPE_LIBRARY is not "
                         "set: cannot find libtroupe.so.1 to package")
    subprocess.check_call(["bazel", "build", "//api:libtroupe.so"], cwd=ROOT)
    return os.path.join(ROOT, "bazel-bin", "api", "libtroupe.so")


class BuildPy(build_py):
    def run(self):
        super().run()
        dst = os.path.join(self.build_lib, "troupe", "_lib")
        os.makedirs(dst, exist_ok=True)
        shutil.copyfile(library(), os.path.join(dst, "libtroupe.so.1"))


class BinaryDistribution(Distribution):
    def has_ext_modules(self):  # a platform wheel: it carries a shared library
        return True


setup(cmdclass={"build_py": BuildPy}, distclass=BinaryDistribution)
