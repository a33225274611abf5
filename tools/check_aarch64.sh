#!/usr/bin/env bash
# tools/check_aarch64.sh - compiles the runtime's C sources for aarch64 with Debian's cross
# compiler (gcc-aarch64-linux-gnu), with the build's warnings as errors: troupe must build
# on ARM, and nothing x86-only (an intrinsic, an instruction) may creep into it. Compile
# only; the system libraries' headers are architecture-independent and come from
# /usr/include (OpenSSL's one generated header, configuration.h, from the host's multiarch
# directory: both are LP64). Run by //tools:aarch64_build_test.
set -uo pipefail
cc=aarch64-linux-gnu-gcc
if ! command -v "$cc" >/dev/null 2>&1; then
    echo "check_aarch64: $cc is not installed (tools/deps.sh installs it)" >&2
    exit 1
fi
if [[ -n "${TEST_SRCDIR:-}" ]]; then
    cd "$TEST_SRCDIR/${TEST_WORKSPACE:-troupe}" || exit 1
else
    cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
fi
out=$(mktemp -d "${TEST_TMPDIR:-/tmp}/aarch64.XXXXXX")
trap 'rm -rf "$out"' EXIT
n=0 bad=0
for f in core/*.c actor/*.c objectstore/*.c collective/*.c collective/shm/*.c dag/*.c api/*.c api/node/*.c \
    api/cmd/*.c; do
    [[ -f "$f" ]] || continue
    # the CUDA build's own files (x86-64 CUDA here): tools/test.sh --config=cuda compiles them
    [[ "$f" == dag/gpu.c ]] && continue
    n=$((n + 1))
    if ! "$cc" -std=c11 -D_GNU_SOURCE -O1 -Wall -Wextra -Werror -fvisibility=hidden \
        -I. -Iapi/include -idirafter /usr/include -idirafter /usr/include/x86_64-linux-gnu \
        -c "$f" -o "$out/$n.o"; then
        echo "does not build for aarch64: $f"
        bad=$((bad + 1))
    fi
done
echo "check_aarch64: $n files, $bad failed ($("$cc" --version | head -n1))"
[[ $n -gt 0 && $bad -eq 0 ]]
