#!/usr/bin/env bash
# tools/gpu_pack.sh - builds the CUDA build's GPU checks here and packs them into .gpu/
# (ignored by git) for a GPU machine, which has no Bazel and no Debian packages: the test
# and bench binaries (stripped of debug info), libtroupe.so.1 for the Python package, and
# the shared libraries they need (ldd) but the C runtime's, the CUDA driver's and NCCL's
# (NCCL is ~200 MB: the GPU machine's own, the nvidia-nccl-cu13 wheel's, is used).
# Then, on the GPU machine: tools/gpu_run.sh (the device tool: carry [".gpu"]).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
tests=(nccl_test gpu_test collective_test dag_test placement_test actor_test objects_test
       tasks_test)
targets=(//bench:nccl //api:libtroupe.so //api/cmd:troupe)
for t in "${tests[@]}"; do targets+=("//tests:$t"); done
bazel build --config=cuda "${targets[@]}"
bin=$(bazel info --config=cuda bazel-bin 2>/dev/null)
rm -rf .gpu
mkdir -p .gpu/bin .gpu/lib
for t in "${tests[@]}"; do strip --strip-debug -o ".gpu/bin/$t" "$bin/tests/$t"; done
strip --strip-debug -o .gpu/bin/bench_nccl "$bin/bench/nccl"
strip --strip-debug -o .gpu/bin/troupe "$bin/api/cmd/troupe"
strip --strip-debug -o .gpu/lib/libtroupe.so.1 "$bin/api/libtroupe.so"
# what the GPU machine must provide itself
skip='^(linux-vdso|ld-linux|libc|libm|libpthread|librt|libdl|libstdc\+\+|libgcc_s|libnccl|libcuda)\.'
for f in .gpu/bin/* .gpu/lib/libtroupe.so.1; do
    ldd "$f" | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
    [[ $name =~ $skip ]] || cp -L "$path" ".gpu/lib/$name"
done
du -sh .gpu
