#!/usr/bin/env bash
# tools/install_test.sh - the installed product, used as a C user outside Bazel would:
# tools/install.sh into a fresh prefix (from the files Bazel built for this test), then
# examples built with the system compiler and `pkg-config troupe`, and run against the
# installed libtroupe.so.1: hello_actors (actors in its own executable), module_driver
# with module_adder.so (the generic worker, found next to the library, runs the classes).
# Also: the library's SONAME and that it exports the public API (tr_*) only; and a program
# built against troupe 0.1's headers runs against it (tests/abi/old_binary.c).
set -euo pipefail

lib=$1 cli=$2 worker=$3
root=$PWD
tmp=${TEST_TMPDIR:-$(mktemp -d)}
built="$tmp/built" prefix="$tmp/prefix"
mkdir -p "$built"
cp "$lib" "$built/libtroupe.so"
cp "$cli" "$built/troupe"
cp "$worker" "$built/troupe-worker"
tools/install.sh --prefix "$prefix" --from "$built"

fail() { echo "FAIL: $*" >&2; exit 1; }
so="$prefix/lib/libtroupe.so.1"
soname=$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
[[ "$soname" == libtroupe.so.1 ]] || fail "SONAME is '$soname', not libtroupe.so.1"
syms=$(nm -D --extern-only --defined-only "$so") # (a LOCAL TLS symbol in .dynsym is not exported)
others=$(awk '$3 !~ /^tr_[a-z]/ && $3 != "TROUPE_1" {print $3}' <<<"$syms")
[[ -z "$others" ]] || fail "libtroupe exports more than tr_*: $(head -5 <<<"$others")"
grep -q " tr_init_abi@@TROUPE_1$" <<<"$syms" || fail "tr_init_abi is not exported"

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
[[ "$(pkg-config --modversion troupe)" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "pkg-config --modversion"
cd "$tmp"
cc -Wall -Wextra -Werror $(pkg-config --cflags troupe) "$root/examples/hello_actors.c" \
    $(pkg-config --libs troupe) -o hello_actors
cc -Wall -Wextra -Werror $(pkg-config --cflags troupe) "$root/examples/module_driver.c" \
    $(pkg-config --libs troupe) -o module_driver
cc -Wall -Wextra -Werror -shared -fPIC $(pkg-config --cflags troupe) \
    "$root/examples/module_adder.c" -o module_adder.so
[[ "$(readelf -d hello_actors)" == *"[libtroupe.so.1]"* ]] || fail "hello_actors does not need libtroupe.so.1"

export LD_LIBRARY_PATH="$prefix/lib"
./hello_actors 2 >hello.out 2>&1 || { cat hello.out; fail "hello_actors"; }
grep -q "round trip" hello.out || { cat hello.out; fail "hello_actors printed no round trip"; }
./module_driver "$tmp/module_adder.so" >module.out 2>&1 || { cat module.out; fail "module_driver"; }
grep -q "ModuleAdder: 5 + 7 = 12" module.out || { cat module.out; fail "module_driver's sum"; }
pid=$(sed -n 's/.*worker pid \([0-9]*\).*/\1/p' module.out)
[[ -n "$pid" ]] || fail "no worker pid"
cat hello.out module.out

# ABI: a program built against troupe 0.1's headers (before tr_actor_class gained a field)
# runs against today's library.
cd "$tmp"
cc -Wall -Wextra -Werror -I "$root/tests/abi/troupe-0.1" "$root/tests/abi/old_binary.c" \
    -L "$prefix/lib" -ltroupe -o old_binary
./old_binary >old.out 2>&1 || { cat old.out; fail "old_binary"; }
cat old.out
grep -q "old binary: ok" old.out || fail "old_binary said no ok"
echo "PASS: installed in $prefix, built with pkg-config: hello_actors, module_driver, old_binary"
