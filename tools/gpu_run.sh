#!/usr/bin/env bash
# tools/gpu_run.sh - on a GPU machine, the GPU checks packed by tools/gpu_pack.sh (.gpu/):
# what the machine is, the CUDA build's tests (GPU cases included: they skip only where
# the machine lacks what they need), bench/nccl --json, and the Python package's GPU and
# collective tests against the CUDA build of libtroupe. Writes machine.txt, tests.log,
# bench_nccl.json and pytest.log to $OUT (or /tmp/gpu-out) and prints a summary.
#
# Usage: tools/gpu_run.sh [tests|bench|python|nochecks ...]   (default: the first three;
# nochecks: bench/nccl's two hosts again with the agreement check off)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
pack=$root/.gpu
out=${OUT:-/tmp/gpu-out}
mkdir -p "$out"
steps=("$@")
[[ ${#steps[@]} -gt 0 ]] || steps=(tests bench python)
py=$(command -v python3)
nccl_lib=$("$py" -c 'import nvidia.nccl as n, os; print(os.path.join(list(n.__path__)[0], "lib"))' \
    2>/dev/null || true)
export LD_LIBRARY_PATH=$pack/lib${nccl_lib:+:$nccl_lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export TROUPE_LIBRARY=$pack/lib/libtroupe.so.1
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    nvidia-smi | sed -n 3p
    "$py" -m pip show nvidia-nccl-cu13 2>/dev/null | sed -n 1,2p
    echo "nccl lib: $nccl_lib"
    uname -r
    echo "cpus: $(nproc)"
    ldd "$pack/bin/nccl_test" | grep -E 'not found|nccl|cudart' 
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"
has() { [[ " ${steps[*]} " == *" $1 "* ]]; }
if has tests; then
    logs=$(mktemp -d)
    for t in "$pack"/bin/*_test; do
        n=$(basename "$t")
        args=()
        [[ $n == actor_test ]] && args=("$pack/bin/troupe")
        (cd "$logs" && timeout 150 "$t" "${args[@]}" > "$logs/$n.log" 2>&1
         echo "exit $?" >> "$logs/$n.log") &
    done
    wait
    : > "$out/tests.log"
    for f in "$logs"/*.log; do
        n=$(basename "$f" .log)
        passed=$(grep -c '^\[       OK \]' "$f")
        failed=$(grep -o '^\[  FAILED  \] [A-Za-z0-9_/]*\.[A-Za-z0-9_/]*' "$f" | sort -u | wc -l)
        skipped=$(grep -o '^\[  SKIPPED \] [A-Za-z0-9_/]*\.[A-Za-z0-9_/]*' "$f" | sort -u | wc -l)
        echo "$n: $passed passed, $failed failed, $skipped skipped, $(tail -1 "$f")" \
            | tee -a "$out/tests.summary"
        { echo "===== $n"; cat "$f"; } >> "$out/tests.log"
    done
    cat "$out/tests.summary" >> "$out/tests.log"
    rm -f "$out/tests.summary"
fi
if has python; then
    echo "===== python"
    (cd "$root/bindings/python/tests" && PYTHONPATH=$root/bindings/python timeout 150 \
        "$py" -m pytest -q -p no:cacheprovider -rs test_gpu.py test_collective.py 2>&1) \
        | tee "$out/pytest.log" | tail -30
fi
if has bench; then
    echo "===== bench/nccl"
    timeout 200 "$pack/bin/bench_nccl" --json ${BENCH_ARGS:-} 2>&1 | tee "$out/bench_nccl.json"
    echo "bench exit ${PIPESTATUS[0]}"
fi
if has nochecks; then # two hosts with the agreement check off (what it costs there)
    echo "===== bench/nccl --only-hosts --no-checks"
    timeout 150 "$pack/bin/bench_nccl" --json --only-hosts --no-checks 2>&1 \
        | tee "$out/bench_nccl_nochecks.json"
fi
