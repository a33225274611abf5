#!/usr/bin/env bash
# tools/test.sh - runs every Bazel test, and in a plain run (no extra Bazel arguments) the
# Python package's tests too (tools/pytest.sh), and prints the line CI reads: "N passed,
# N failed" (", N skipped" when some were skipped or disabled).
#
# In a plain run it also checks the layers (tools/check_layers.sh), the directories'
# READMEs (tools/check_readmes.sh), the wheel (tools/wheel_test.sh) and the Kubernetes
# manifests (tools/k8s_check.sh), each check a case.
#
# Usage: tools/test.sh [extra bazel args...]      e.g. tools/test.sh --config=asan
#
# Test cases are counted from each test target's GoogleTest XML, found through this run's
# Build Event Protocol file (never a stale bazel-testlogs/ left by an earlier run or another
# --config). A test target that failed to build, timed out or crashed without XML counts as
# one failure, and so does one whose process failed after all its cases passed (e.g. a
# sanitizer report at exit). Exit status: Bazel's when non-zero (4: no tests found), else
# 0 when nothing failed, else 1. No python: bash, grep, sed and awk.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
"$root/tools/deps.sh" || exit 1

# The CUDA build takes CUDA and NCCL from /usr/local/cuda (no Debian package has CUDA 13).
for arg in "$@"; do
    if [[ "$arg" == --config=cuda && ! ( -f /usr/local/cuda/include/nccl.h &&
          -e /usr/local/cuda/lib64/libnccl.so && -e /usr/local/cuda/lib64/libcudart.so ) ]]; then
        echo "tools/test.sh --config=cuda: CUDA and NCCL are not in /usr/local/cuda" \
            "(include/nccl.h, lib64/libnccl.so, lib64/libcudart.so)" >&2
        echo "0 passed, 1 failed"
        exit 1
    fi
done

bep=$(mktemp "${TMPDIR:-/tmp}/troupe-bep.XXXXXX")
trap 'rm -f "$bep"' EXIT

bazel test //... --keep_going --build_event_json_file="$bep" "$@"
bazel_rc=$?

# The value of a "key":"string" or "key":number field in one JSON line (first match).
field() {
    local v
    v=$(grep -o "\"$2\":\"[^\"]*\"" <<<"$1" | head -n1)
    if [[ -n "$v" ]]; then
        v=${v#*\":\"}
        printf '%s' "${v%\"}"
        return
    fi
    v=$(grep -o "\"$2\":[0-9]*" <<<"$1" | head -n1)
    printf '%s' "${v#*\":}"
}

# A local path from a file:// URI (percent-decoded).
uri_path() {
    local p=${1#file://}
    printf '%b' "${p//%/\\x}"
}

# The test.xml or test.log URI of a testResult line.
output_uri() {
    local v
    v=$(grep -o "{\"name\":\"$2\",\"uri\":\"[^\"]*\"" <<<"$1" | head -n1)
    v=${v#*\"uri\":\"}
    printf '%s' "${v%\"}"
}

# Counts a GoogleTest XML file: prints "cases failed skipped" on the first line, then the
# names of the failed cases, one a line. A case fails on a <failure> or <error> element
# (Bazel's own XML for a test that wrote none has one <error> case when it failed); it is
# skipped on result="skipped" (GTEST_SKIP) or result="suppressed" (a DISABLED_ test).
count_xml() {
    awk '
    function attr(s, name,    i, rest) {
        i = index(s, " " name "=\"")
        if (i == 0) return ""
        rest = substr(s, i + length(name) + 3)
        return substr(rest, 1, index(rest, "\"") - 1)
    }
    function finish() {
        if (failed_case) { failed++; names[failed] = cls (cls != "" ? "." : "") name }
        else if (skipped_case) skipped++
        in_case = 0
    }
    # Text inside CDATA (test logs, failure messages) is data, never markup.
    {
        s = $0; out = ""
        while (s != "") {
            if (in_cdata) {
                i = index(s, "]]>")
                if (i == 0) break
                s = substr(s, i + 3); in_cdata = 0
            } else {
                i = index(s, "<![CDATA[")
                if (i == 0) { out = out s; break }
                out = out substr(s, 1, i - 1); s = substr(s, i + 9); in_cdata = 1
            }
        }
        $0 = out
    }
    /<testcase[ \t>]/ {
        if (in_case) finish()
        line = substr($0, index($0, "<testcase"))
        in_case = 1; cases++
        name = attr(line, "name"); cls = attr(line, "classname")
        failed_case = (line ~ /<(failure|error)[ \t>\/]/)
        skipped_case = (line ~ /result="(skipped|suppressed)"/ || line ~ /<skipped[ \t>\/]/)
        if (line ~ /^<testcase[^>]*\/>/ || line ~ /<\/testcase>/) finish()
        next
    }
    in_case && /<(failure|error)[ \t>\/]/ { failed_case = 1 }
    in_case && /<skipped[ \t>\/]/ { skipped_case = 1 }
    in_case && /<\/testcase>/ { finish() }
    END {
        if (in_case) finish()
        print cases + 0, failed + 0, skipped + 0
        for (i = 1; i <= failed; i++) print names[i]
    }' "$1"
}

declare -A result_line=() # "label run shard" -> the last attempt's testResult line
declare -A summary=()     # label -> overallStatus
declare -A build=()       # label -> why it was not built, for those that were not
declare -a targets=()     # test labels, in the order Bazel reported them
declare -A known=()

add_target() {
    [[ -n "$1" && -z "${known[$1]:-}" ]] || return 0
    known[$1]=1
    targets+=("$1")
}

if [[ -s "$bep" ]]; then
    while IFS= read -r line; do
        case "$line" in
        '{"id":{"targetConfigured":'*'"testSize":'*)
            add_target "$(field "$line" label)"
            ;;
        '{"id":{"testResult":'*)
            label=$(field "$line" label)
            add_target "$label"
            result_line["$label $(field "$line" run) $(field "$line" shard)"]=$line
            ;;
        '{"id":{"targetCompleted":'*)
            label=$(field "$line" label)
            if [[ "$line" == *'"aborted":'* ]]; then
                build[$label]=$(field "$line" reason)
            elif [[ "$line" != *'"success":true'* ]]; then
                build[$label]=FAILED_TO_BUILD
            fi
            ;;
        '{"id":{"testSummary":'*)
            label=$(field "$line" label)
            add_target "$label"
            summary[$label]=$(field "$line" overallStatus)
            ;;
        esac
    done <"$bep"
fi

passed=0 failed=0 skipped=0
fail() {
    failed=$((failed + 1))
    echo "FAILED $*"
}

for label in "${targets[@]}"; do
    keys=()
    for key in "${!result_line[@]}"; do
        [[ "${key% * *}" == "$label" ]] && keys+=("$key")
    done
    if [[ ${#keys[@]} -eq 0 ]]; then
        # Built but neither run nor summarised: filtered out (tags, size), not a failure.
        status=${build[$label]:-${summary[$label]:-}}
        [[ -n "$status" && "$status" != PASSED ]] && fail "$label ($status: no test results)"
        continue
    fi
    for key in "${keys[@]}"; do
        line=${result_line[$key]}
        status=$(field "$line" status)
        xml=$(uri_path "$(output_uri "$line" test.xml)")
        log=$(uri_path "$(output_uri "$line" test.log)")
        bazel_case=${label#//}
        bazel_case=${bazel_case/://}
        if [[ -z "$xml" || ! -f "$xml" ]]; then
            fail "$label ($status, no test.xml; log: ${log:-none})"
            continue
        fi
        {
            read -r cases nfail nskip
            passed=$((passed + cases - nfail - nskip))
            skipped=$((skipped + nskip))
            while IFS= read -r name; do
                if [[ "$name" == "$bazel_case" ]]; then # Bazel's XML: the process failed
                    fail "$label ($status; log: $log)"
                else
                    fail "$label: $name"
                fi
            done
        } < <(count_xml "$xml")
        if [[ "$status" != PASSED && "$status" != FLAKY && "$nfail" -eq 0 ]]; then
            fail "$label ($status after its test cases passed; log: $log)"
        fi
    done
done

# The Python package's tests (pytest's JUnit XML, counted the same way), in a plain run:
# all of them with the C extension (troupe._fast), then those of calls, refs, plain tasks
# and graph steps, and the package's layers, without it (TROUPE_NO_EXTENSION=1: the
# ctypes paths alone).
python_tests() {
    local label=$1 pyxml cases nfail nskip name
    shift
    pyxml=$(mktemp "${TMPDIR:-/tmp}/troupe-pytest.XXXXXX")
    echo "=== tools/pytest.sh ($label)"
    "$root/tools/pytest.sh" --junitxml="$pyxml" "$@"
    if [[ ! -s "$pyxml" ]]; then
        fail "$label: tools/pytest.sh wrote no results"
    else
        {
            read -r cases nfail nskip
            passed=$((passed + cases - nfail - nskip))
            skipped=$((skipped + nskip))
            while IFS= read -r name; do
                fail "$label: $name"
            done
        } < <(sed -e 's/<testcase /\n<testcase /g' -e 's/<\/testcase>/<\/testcase>\n/g' "$pyxml" \
            >"$pyxml.lines" && count_xml "$pyxml.lines")
    fi
    rm -f "$pyxml" "$pyxml.lines"
}
if [[ $# -eq 0 ]]; then
    python_tests python
    TROUPE_NO_EXTENSION=1 python_tests "python, no extension" \
        -k "test_core or test_ownership or test_layers or plain_tasks or plain_steps"
fi

# The source tree's own checks (tools/check_layers.sh, tools/check_readmes.sh), each of
# their checks one case: a script prints "FAILED ..." per failed check and "NAME: N
# checks, M failed" last.
source_check() {
    local name=$1 out summary n_checks n_bad l
    echo "=== tools/$name.sh"
    out=$("$root/tools/$name.sh")
    echo "$out"
    summary=$(grep "^$name: [0-9]* checks, [0-9]* failed\$" <<<"$out")
    if [[ -z "$summary" ]]; then
        fail "$name: tools/$name.sh printed no summary"
        return
    fi
    read -r n_checks n_bad < <(sed 's/^[a-z0-9_]*: \([0-9]*\) checks, \([0-9]*\) failed$/\1 \2/' <<<"$summary")
    passed=$((passed + n_checks - n_bad))
    while IFS= read -r l; do
        fail "$name: ${l#FAILED }"
    done < <(grep '^FAILED ' <<<"$out")
}
if [[ $# -eq 0 ]]; then
    source_check check_layers
    source_check check_readmes
    source_check wheel_test # (the wheel installed where no build tool is)
    source_check k8s_check  # (deploy/kubernetes, rendered and checked)
fi

if [[ $bazel_rc -ne 0 && $failed -eq 0 ]]; then
    if [[ $bazel_rc -eq 4 ]]; then
        fail "(bazel found no test targets)"
    else
        fail "(bazel exited with $bazel_rc: see its errors above)"
    fi
fi

line="$passed passed, $failed failed"
[[ $skipped -gt 0 ]] && line+=", $skipped skipped"
echo "$line"

[[ $bazel_rc -ne 0 ]] && exit "$bazel_rc"
[[ $failed -eq 0 ]]
