#!/usr/bin/env bash
# tools/check_readmes.sh - every directory with a README.md lists its files there: each C,
# C++, CUDA, Python, shell or Starlark file of the directory (not of its subdirectories,
# which have READMEs of their own) is named in it: by its name, by its module (a header
# or source of the same stem: `calls.c` names calls.h too; `stem.{h,c}`), or by a pattern
# in backquotes (`*_test.cc`, `<module>_test.cc`). Prints a line per README that misses one and
# "check_readmes: N checks, M failed" (one check per README); exit 0 when none failed.
# Run by tools/test.sh.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1

checks=0 bad=0
while IFS= read -r readme; do
    dir=$(dirname "$readme")
    [[ "$dir" == . || "$dir" == tests/abi* ]] && continue # (the top README; a frozen copy)
    checks=$((checks + 1))
    text=$(<"$readme")
    # patterns written in backquotes, e.g. `*_test.cc`
    mapfile -t pats < <(grep -o '`[^`]*[*<][^`]*`' <<<"$text" | tr -d '`' | sed 's/<[^>]*>/*/g')
    missing=()
    while IFS= read -r f; do
        name=${f##*/}
        stem=${name%.*} ext=${name##*.}
        grep -qF -- "$name" <<<"$text" && continue
        grep -qE -- "(^|[^A-Za-z0-9_])$stem\\.(\\{|c\\b|h\\b|cc\\b)" <<<"$text" && continue
        hit=0
        for p in "${pats[@]}"; do
            # shellcheck disable=SC2053
            [[ "$name" == $p || "$f" == $p ]] && { hit=1; break; }
        done
        [[ $hit -eq 1 ]] || missing+=("$name")
    done < <(git ls-files "$dir" | awk -F/ -v n="$(awk -F/ '{print NF}' <<<"$dir")" 'NF == n + 1' |
        grep -E '\.(c|h|cc|cu|py|sh|bzl)$')
    if [[ ${#missing[@]} -gt 0 ]]; then
        echo "FAILED $readme does not list: ${missing[*]}"
        bad=$((bad + 1))
    fi
done < <(git ls-files '*README.md' 'README.md')

echo "check_readmes: $checks checks, $bad failed"
[[ $bad -eq 0 ]]
