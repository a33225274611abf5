#!/usr/bin/env bash
# tools/pytest.sh - the Python package's tests, as a user installs it: tools/pyenv.sh
# (`pip install ./bindings/python` into .venv, with Debian's numpy, cloudpickle and
# pytest), then pytest on bindings/python/tests against real processes.
#
# Usage: tools/pytest.sh [pytest args...]      e.g. tools/pytest.sh --junitxml=out.xml -x
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=$("$root/tools/pyenv.sh")
cd "$root/bindings/python/tests" # (not the source tree's troupe/: the installed one)
exec "$python" -m pytest -q -p no:cacheprovider "$@" "$root/bindings/python/tests"
