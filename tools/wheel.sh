#!/usr/bin/env bash
# tools/wheel.sh - builds dist/troupe-<version>-py3-none-<platform>.whl: the Python
# package with libtroupe.so.1, the `troupe` command (installed as a console script: `troupe
# start`, `troupe status`, ...) and every shared library they need that a plain Linux
# machine with Python lacks (gRPC, OpenSSL, libuv, msgpack-c, Gloo, ...), repaired as
# auditwheel does (tools/wheel_repair.py: unique names, RUNPATH $ORIGIN), tagged with the
# manylinux platform they satisfy. `pip install dist/troupe-*.whl` then needs no Bazel
# and no -dev package (tools/wheel_test.sh checks it). With it goes troupe._fast, the C
# extension of the plain call (stable ABI of CPython 3.11: one file for 3.11 and later,
# linked to nothing but libc; older interpreters use the ctypes paths). Prints the
# wheel's path.
#
# Usage: tools/wheel.sh [OUT_DIR]      (default: dist/ at the repository root)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/dist}
"$root/tools/deps.sh" >&2
cd "$root"
bazel build -c opt //api:libtroupe.so //api/cmd:troupe >&2
stage=$(mktemp -d "${TMPDIR:-/tmp}/troupe-wheel.XXXXXX")
trap 'rm -rf "$stage"' EXIT
platform=$(/usr/bin/python3 "$root/tools/wheel_repair.py" bazel-bin/api/libtroupe.so "$stage/lib" \
    bazel-bin/api/cmd/troupe)
mkdir -p "$out"
# (a copy of the package's sources: setuptools writes its build/ and egg-info beside them)
cp -r "$root/bindings/python" "$stage/src"
rm -rf "$stage/src/build" "$stage/src/"*.egg-info "$stage/src/tests"
cp -r "$root/api/include" "$stage/src/include" # (troupe.h, for the extension troupe._fast)
TROUPE_LIBRARY_DIR="$stage/lib" TROUPE_WHEEL_PLATFORM="$platform" \
    /usr/bin/python3 -m pip wheel -q --no-build-isolation --no-deps -w "$stage/dist" "$stage/src" >&2
wheel=$(ls "$stage"/dist/troupe-*.whl)
cp "$wheel" "$out/"
echo "$out/$(basename "$wheel")"
