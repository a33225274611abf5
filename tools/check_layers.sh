#!/usr/bin/env bash
# tools/check_layers.sh - proves that the BUILD files enforce the layers of
# tools/layers.bzl, and that docs/ARCHITECTURE.md draws the same ones. For every ordered
# pair of layers (A, B) it adds a probe target to A's BUILD that depends on B's library,
# has Bazel analyse them all (`--nobuild`), and checks that exactly the edges the table
# allows are accepted and every other one is refused as "not visible"; then it puts the
# BUILD files back as they were (also on failure or interrupt). Then it compares the
# table with the one in docs/ARCHITECTURE.md. Prints a line per failed check and
# "check_layers: N checks, M failed"; exit status 0 when none failed. Run by tools/test.sh.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1

# The table: "PACKAGE DEP DEP ..." lines from layers.bzl's LAYERS.
table=$(sed -n '/^LAYERS = {/,/^}/p' tools/layers.bzl |
    sed -n 's/^ *"\(\/\/[^"]*\)": *\[\(.*\)\],.*/\1 \2/p' | tr -d '",')
[[ -n "$table" ]] || { echo "check_layers: no LAYERS table in tools/layers.bzl"; exit 1; }
declare -A allowed=()
layers=()
while read -r pkg deps; do
    layers+=("$pkg")
    for d in $deps; do allowed["$pkg $d"]=1; done
done <<<"$table"

# Each layer's library: what a probe names.
lib() {
    case "$1" in
    //api) echo "//api:runtime" ;;
    //api/cmd) echo "" ;; # binaries only: nothing may depend on the commands
    *) echo "$1" ;;
    esac
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/check_layers.XXXXXX")
restore() {
    for pkg in "${layers[@]}"; do
        f=${pkg#//}/BUILD
        [[ -f "$tmp/${f//\//_}" ]] && cp "$tmp/${f//\//_}" "$f"
    done
    rm -rf "$tmp"
}
trap restore EXIT INT TERM

probes=()
declare -A expect=() # probe label -> 1 if the edge is allowed
for a in "${layers[@]}"; do
    f=${a#//}/BUILD
    cp "$f" "$tmp/${f//\//_}"
    for b in "${layers[@]}"; do
        [[ "$a" == "$b" ]] && continue
        l=$(lib "$b")
        [[ -n "$l" ]] || continue
        name="layer_probe_$(tr '/' '_' <<<"${b#//}")"
        printf '\ncc_library(name = "%s", deps = ["%s"], tags = ["manual"])\n' "$name" "$l" >>"$f"
        probes+=("$a:$name")
        expect["$a:$name"]=${allowed["$a $b"]:-0}
    done
done

out=$(bazel build --nobuild --keep_going "${probes[@]}" 2>&1)
[[ -n "${CHECK_LAYERS_DEBUG:-}" ]] && echo "$out"
restore
trap - EXIT INT TERM

checks=0 bad=0
for p in "${probes[@]}"; do
    checks=$((checks + 1))
    refused=0
    grep -q "is not visible from target '$p'" <<<"$out" && refused=1
    if [[ ${expect[$p]} -eq 1 && $refused -eq 1 ]]; then
        echo "FAILED layer edge refused though the table allows it: $p"
        bad=$((bad + 1))
    elif [[ ${expect[$p]} -eq 0 && $refused -eq 0 ]]; then
        echo "FAILED layer edge accepted though the table forbids it: $p"
        bad=$((bad + 1))
    fi
done
# Anything else wrong with the probes (a typo in a label) fails the run.
others=$(grep "^ERROR:" <<<"$out" | grep -v "is not visible from target\|layer_probe_\|not all targets were analyzed")
if [[ -n "$others" ]]; then
    head -n 5 <<<"$others"
    checks=$((checks + 1)) bad=$((bad + 1))
fi

# docs/ARCHITECTURE.md's table: rows "| `//pkg` | `//dep`, `//dep` |".
doc=$(sed -n 's/^| `\(\/\/[a-z/]*\)` | \(.*\) |.*$/\1 \2/p' docs/ARCHITECTURE.md | tr -d '`,' |
    sed 's/ —//; s/  */ /g; s/ *$//')
checks=$((checks + 1))
if [[ "$(sort <<<"$doc")" != "$(sed 's/ *$//' <<<"$table" | sort)" ]]; then
    echo "FAILED docs/ARCHITECTURE.md's table of layers differs from tools/layers.bzl:"
    diff <(sed 's/ *$//' <<<"$table" | sort) <(sort <<<"$doc") | sed 's/^/  /'
    bad=$((bad + 1))
fi

echo "check_layers: $checks checks, $bad failed"
[[ $bad -eq 0 ]]
