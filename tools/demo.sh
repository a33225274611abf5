#!/usr/bin/env bash
# tools/demo.sh - the README's first command: installs what is missing, then runs
#   1. examples/hello_actors: an embedded node, a few actors, calls, results, the measured
#      round trip of a method call;
#   2. examples/compare_paths: 2 and 4 actors allreduce float32 buffers from 4 B to
#      64 MiB through the object store, through each collective backend (shm, gloo) and
#      as a compiled graph (a collective node over the actors' outputs);
#      prints the median times and which path wins at each size, and draws time against
#      size (log axes, a line per path) in out/compare_paths.svg;
#   3. examples/compare_paths.py: the same three paths from Python (the troupe package,
#      installed into .venv by tools/pyenv.sh), one table.
# Argument: the actor counts to compare, e.g. 2,4 (the default).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
"$root/tools/deps.sh"
mkdir -p "$root/out"
bazel build //examples:hello_actors //examples:compare_paths
"$root/bazel-bin/examples/hello_actors"
echo
"$root/bazel-bin/examples/compare_paths" "$root/out/compare_paths.svg" "${1:-2,4}"
echo
python=$("$root/tools/pyenv.sh")
"$python" "$root/examples/compare_paths.py" "${1:-2,4}"
