"""Builds the package with the C library inside it (troupe/_lib/libtroupe.so.1).

From the source tree, `pip install ./bindings/python` builds libtroupe.so with Bazel
(`bazel build //api:libtroupe.so`, at the repository root) and copies it in; with
TROUPE_LIBRARY set, that file is copied instead (an installed or prebuilt library); with
TROUPE_LIBRARY_DIR set, every file of that directory (tools/wheel.sh: libtroupe.so.1 and
the libraries it needs, repaired by tools/wheel_repair.py). A wheel is tagged
py3-none-<platform> (the package loads its library with ctypes: any CPython 3 takes it),
the platform TROUPE_WHEEL_PLATFORM's if set (tools/wheel.sh: the manylinux tag the
repaired libraries satisfy).

Built by CPython 3.11 or later, the package also carries troupe/_fast.abi3.so (_fast.c:
the plain call's two ends in C, on the stable ABI of 3.11, linked to nothing but libc;
it needs Python's headers, Debian's python3-dev). The package works without it: where it
cannot be built, the build says why and goes on; older interpreters never load it.
"""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
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


def include_dir():
    """The directory of troupe/troupe.h: the tree's api/include, or include/ beside this
    file (tools/wheel.sh copies it there)."""
    for d in (os.path.join(ROOT, "api", "include"), os.path.join(HERE, "include")):
        if os.path.exists(os.path.join(d, "troupe", "troupe.h")):
            return d
    return None


def extensions():
    inc = include_dir()
    if inc is None or sys.version_info < (3, 11):
        return []
    return [Extension("troupe._fast", ["troupe/_fast.c"], include_dirs=[inc],
                      define_macros=[("Py_LIMITED_API", "0x030B0000")], py_limited_api=True,
                      extra_compile_args=["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"])]


class OptionalBuildExt(build_ext):
    """The extension is an accelerator: a build that cannot compile it (no Python.h)
    says so and goes on without it."""

    def run(self):
        try:
            super().run()
        except Exception as e:  # (distutils' CompileError and the like)
            print(f"troupe: troupe._fast not built ({e}); the ctypes paths do its work",
                  file=sys.stderr)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as e:
            print(f"troupe: {ext.name} not built ({e}); the ctypes paths do its work",
                  file=sys.stderr)


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


setup(cmdclass={"build_py": BuildPy, "build_ext": OptionalBuildExt, **COMMANDS},
      distclass=BinaryDistribution, ext_modules=extensions())
