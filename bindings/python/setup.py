"""Builds the package with the C library inside it (troupe/_lib/libtroupe.so.1).

From the source tree, `pip install ./bindings/python` builds libtroupe.so with Bazel
(`bazel build //api:libtroupe.so`, at the repository root) and copies it in; with
TROUPE_LIBRARY set, that file is copied instead (an installed or prebuilt library); with
TROUPE_LIBRARY_DIR set, every file of that directory (tools/wheel.sh: libtroupe.so.1 and
the libraries it needs, repaired by tools/wheel_repair.py). A wheel is tagged
py3-none-<platform> (the package loads its library with ctypes: any CPython 3 takes it),
the platform TROUPE_WHEEL_PLATFORM's if set (tools/wheel.sh: the manylinux tag the
repaired libraries satisfy).
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
        given = os.environ.get("TROUPE_LIBRARY_DIR")
        if given:
            for name in sorted(os.listdir(given)):
                shutil.copy2(os.path.join(given, name), os.path.join(dst, name))
            return
        shutil.copyfile(library(), os.path.join(dst, "libtroupe.so.1"))


try:
    from wheel.bdist_wheel import bdist_wheel

    class BdistWheel(bdist_wheel):
        def get_tag(self):
            _, _, plat = super().get_tag()
            return "py3", "none", os.environ.get("TROUPE_WHEEL_PLATFORM", plat)

    COMMANDS = {"bdist_wheel": BdistWheel}
except ImportError:  # (no wheel package: no wheel to build)
    COMMANDS = {}


class BinaryDistribution(Distribution):
    def has_ext_modules(self):  # a platform wheel: it carries a shared library
        return True


setup(cmdclass={"build_py": BuildPy, **COMMANDS}, distclass=BinaryDistribution)
