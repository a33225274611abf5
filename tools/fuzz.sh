#!/usr/bin/env bash
# tools/fuzz.sh - coverage-guided fuzzing of the decoders with clang's libFuzzer (a dev
# tool: needs clang, e.g. `apt-get install clang`; CI runs the same targets under a
# deterministic driver instead, see tests/fuzz/).
#
#   tools/fuzz.sh [seconds per target, default 60] [target ...]
#   targets: codec frame trace merge
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
secs=${1:-60}
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(codec frame trace merge)
command -v clang >/dev/null || { echo "fuzz.sh: needs clang (apt-get install clang)" >&2; exit 1; }
out=${TMPDIR:-/tmp}/troupe-fuzz
mkdir -p "$out"
srcs=(core/*.c actor/protocol.c api/cmd/merge.c)
for t in "${targets[@]}"; do
    bin="$out/${t}_fuzz"
    clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -I. -Iapi/include \
        "tests/fuzz/${t}_fuzz.c" "${srcs[@]}" -o "$bin" -lgrpc -lgpr -lcrypto -lmsgpackc -luv -lm \
        -lpthread
    mkdir -p "$out/corpus-$t"
    echo "== fuzzing $t for ${secs}s (corpus $out/corpus-$t)"
    "$bin" -max_total_time="$secs" -max_len=4096 "$out/corpus-$t"
done
