#!/usr/bin/env bash
# tools/pyenv.sh - makes .venv at the repository root (Debian's python3, seeing Debian's
# numpy, cloudpickle and pytest: nothing is downloaded) and installs this tree's Python
# package into it (`pip install ./bindings/python`, which builds libtroupe.so with Bazel).
# Prints the environment's python. Used by tools/pytest.sh and tools/demo.sh.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/tools/deps.sh" >&2
venv="$root/.venv"
if [[ ! -x "$venv/bin/python" ]]; then
    /usr/bin/python3 -m venv --system-site-packages "$venv" >&2
fi
"$venv/bin/pip" install -q --no-build-isolation --no-deps --force-reinstall \
    "$root/bindings/python" >&2
echo "$venv/bin/python"
