#!/usr/bin/env bash
# tools/demo.sh - the README's first command: installs what is missing, then runs
#   1. examples/hello_actors: an embedded node, a few actors, calls, results, the measured
#      round trip of a method call;
#   2. examples/compare_paths: actors allreduce a buffer through the object store and
#      through each collective backend (shm, gloo); prints the times and speedups and
#      writes an SVG chart to out/compare_paths.svg.
# Arguments go to compare_paths: [actors=4] [KiB=1024].
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
"$root/tools/deps.sh"
mkdir -p "$root/out"
bazel build //examples:hello_actors //examples:compare_paths
"$root/bazel-bin/examples/hello_actors"
echo
"$root/bazel-bin/examples/compare_paths" "${1:-4}" "${2:-1024}" "$root/out/compare_paths.svg"
