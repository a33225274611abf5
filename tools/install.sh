#!/usr/bin/env bash
# tools/install.sh - installs troupe as a product: the public headers, libtroupe.so.1
# (SONAME libtroupe.so.1, only tr_* exported) with its libtroupe.so link, a pkg-config
# file, and the `troupe` and `troupe-worker` commands:
#
#   PREFIX/include/troupe/{troupe,dag,status}.h
#   PREFIX/lib/libtroupe.so.1, PREFIX/lib/libtroupe.so -> libtroupe.so.1
#   PREFIX/lib/pkgconfig/troupe.pc
#   PREFIX/bin/troupe, PREFIX/bin/troupe-worker
#
# Usage: tools/install.sh --prefix DIR            builds (bazel, -c opt), then installs
#        tools/install.sh --prefix DIR --from D   installs files already built, from D
#                                                 (D holds libtroupe.so, troupe and
#                                                 troupe-worker, or has them in cmd/:
#                                                 bazel-bin/api, or a test's)
# Then: cc $(pkg-config --cflags troupe) prog.c $(pkg-config --libs troupe)
# with PKG_CONFIG_PATH=DIR/lib/pkgconfig (and LD_LIBRARY_PATH=DIR/lib to run, unless DIR/lib
# is on the dynamic linker's path).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prefix="" from=""
while [[ $# -gt 0 ]]; do
    case "$1" in
    --prefix) prefix=${2:?--prefix needs a directory}; shift 2 ;;
    --from) from=${2:?--from needs a directory}; shift 2 ;;
    *) echo "usage: tools/install.sh --prefix DIR [--from BUILT_DIR]" >&2; exit 2 ;;
    esac
done
[[ -n "$prefix" ]] || { echo "usage: tools/install.sh --prefix DIR [--from BUILT_DIR]" >&2; exit 2; }

if [[ -z "$from" ]]; then
    "$root/tools/deps.sh"
    (cd "$root" && bazel build -c opt //api:libtroupe.so //api/cmd:troupe //api/cmd:troupe-worker)
    from="$root/bazel-bin/api"
fi
# where each built file is: D/FILE, or D/cmd/FILE (the commands in the build tree)
built() {
    local f
    for f in "$from/$1" "$from/cmd/$1"; do
        [[ -f "$f" ]] && { echo "$f"; return; }
    done
    echo "tools/install.sh: $from/$1 is missing" >&2
    exit 1
}
lib=$(built libtroupe.so)
troupe=$(built troupe)
worker=$(built troupe-worker)

status_h="$root/api/include/troupe/status.h"
ver() { sed -n "s/^#define TR_VERSION_$1 \\([0-9]*\\).*/\\1/p" "$status_h"; }
version="$(ver MAJOR).$(ver MINOR).$(ver PATCH)"
abi=$(sed -n 's/^#define TR_ABI_VERSION \([0-9]*\).*/\1/p' "$status_h")

mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
install -d "$prefix/include/troupe" "$prefix/lib/pkgconfig" "$prefix/bin"
install -m 0644 "$root"/api/include/troupe/*.h "$prefix/include/troupe/"
install -m 0755 "$lib" "$prefix/lib/libtroupe.so.$abi"
ln -sf "libtroupe.so.$abi" "$prefix/lib/libtroupe.so"
install -m 0755 "$troupe" "$worker" "$prefix/bin/"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" "$root/api/troupe.pc.in" \
    >"$prefix/lib/pkgconfig/troupe.pc"
echo "troupe $version (ABI $abi) installed in $prefix"
