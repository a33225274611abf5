#!/usr/bin/env bash
# tools/pytest.sh - the Python package's tests, as a user installs it: `pip install
# ./bindings/python` (which builds libtroupe.so with Bazel and puts it in the package)
# into a virtual environment, .venv at the repository root, that sees Debian's numpy,
# cloudpickle and pytest (nothing is downloaded), then pytest on bindings/python/tests
# against real processes.
#
# Usage: tools/pytest.sh [pytest args...]      e.g. tools/pytest.sh --junitxml=out.xml -x
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/tools/deps.sh"
venv="$root/.venv"
if [[ ! -x "$venv/bin/python" ]]; then
    /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
"$venv/bin/pip" install -q --no-build-isolation --no-deps --force-reinstall \
    "$root/bindings/python"
cd "$root/bindings/python/tests" # (not the source tree's troupe/: the installed one)
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@" "$root/bindings/python/tests"
