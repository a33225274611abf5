#!/usr/bin/env bash
# tools/demo.sh - builds and runs the hello_actors example (an embedded node, a few actors,
# method calls and their results). Arguments go to the example.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
"$root/tools/deps.sh"
exec bazel run //examples:hello_actors -- "$@"
