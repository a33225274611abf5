#!/usr/bin/env bash
# bench/python.sh - runs bench/python.py (the `//bench:python` target) with the package
# from this tree (bindings/python), the libtroupe.so and the C benchmarks Bazel built
# beside it, under Debian's python3 (numpy from Debian), or $TROUPE_PYTHON.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
runfiles="${RUNFILES_DIR:-$0.runfiles}/troupe"
[[ -d "$runfiles" ]] || runfiles=$(cd "$here/.." && pwd)
export TROUPE_LIBRARY="$runfiles/api/libtroupe.so"
export TROUPE_BENCH_DIR="$runfiles/bench"
export PYTHONPATH="$runfiles/bindings/python${PYTHONPATH:+:$PYTHONPATH}"
exec "${TROUPE_PYTHON:-/usr/bin/python3}" "$runfiles/bench/python.py" "$@"
