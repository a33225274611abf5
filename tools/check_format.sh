#!/usr/bin/env bash
# tools/check_format.sh - fails, naming each file, if any C or C++ source it is given (or,
# with no arguments, every one in the repository) differs from what clang-format makes
# of it under the repository's .clang-format. Run by //tools:format_test; to fix a file:
# clang-format -i FILE.
set -uo pipefail
if ! command -v clang-format >/dev/null 2>&1; then
    echo "check_format: clang-format is not installed (tools/deps.sh installs it)" >&2
    exit 1
fi
if [[ -n "${TEST_SRCDIR:-}" ]]; then
    cd "$TEST_SRCDIR/${TEST_WORKSPACE:-troupe}" || exit 1
elif [[ $# -eq 0 ]]; then
    cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
fi
files=("$@")
if [[ ${#files[@]} -eq 0 ]]; then
    mapfile -t files < <(find . -path ./bazel-\* -prune -o -path ./third_party -prune -o \
        -type f \( -name '*.c' -o -name '*.h' -o -name '*.cc' \) -print | sort)
fi
[[ -f .clang-format ]] || { echo "check_format: no .clang-format here" >&2; exit 1; }
bad=0
for f in "${files[@]}"; do
    if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then
        echo "not clang-formatted: $f (clang-format -i $f)"
        bad=$((bad + 1))
    fi
done
echo "check_format: ${#files[@]} files, $bad not formatted ($(clang-format --version))"
[[ $bad -eq 0 ]]
