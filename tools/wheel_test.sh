#!/usr/bin/env bash
# tools/wheel_test.sh - builds the wheel (tools/wheel.sh) and installs it where no build
# tool is: a private mount namespace (unshare, root) in which the repository, Bazel and its
# cache, /usr/include (every -dev package's headers) and the system's own copy of each
# library the wheel bundles are hidden (bind-mounted over: empty directories, /dev/null),
# all but those Python itself loads (libssl, libz, ...: whatever has python3 has them).
# There, in a fresh venv (Debian's numpy and cloudpickle, as any Python machine's pip would
# give), `pip install --no-index <wheel>` and the README's Python example run, and the
# example's process maps its libraries from the wheel, not the system.
#
# Prints "FAILED <check>" for each check that fails, then "wheel_test: N checks, M failed"
# (tools/test.sh counts them as cases). Usage: tools/wheel_test.sh
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
checks=0 bad=0
check() { # check NAME COMMAND...: one case
    checks=$((checks + 1))
    if ! "${@:2}"; then
        echo "FAILED $1"
        bad=$((bad + 1))
    fi
}
finish() {
    echo "wheel_test: $checks checks, $bad failed"
    exit 0
}

work=$(mktemp -d /var/tmp/troupe-wheel-test.XXXXXX) # (not under /tmp: hidden below)
trap 'rm -rf "$work"' EXIT
wheel=$("$root/tools/wheel.sh" "$work/dist" 2>"$work/build.log" | tail -n1)
check "the wheel builds (tools/wheel.sh)" test -f "$wheel"
[[ -f "$wheel" ]] || { tail -20 "$work/build.log"; finish; }
name=$(basename "$wheel")
check "its name is troupe-<version>-py3-none-manylinux_<glibc>_<arch>.whl ($name)" \
    grep -qE '^troupe-[0-9.]+-py3-none-manylinux_[0-9]+_[0-9]+_[a-z0-9_]+\.whl$' <<<"$name"
if [[ $(id -u) -ne 0 ]] || ! command -v unshare >/dev/null; then
    echo "wheel_test: not root (or no unshare): the install where no build tool is was not tried"
    finish
fi

# What to hide: the system's copies of the bundled libraries (by soname, before repair),
# less Python's own libraries (its executable's and its extension modules' closure).
bundled=$(/usr/bin/python3 - "$wheel" <<'EOF'
import re, sys, zipfile
for n in zipfile.ZipFile(sys.argv[1]).namelist():
    m = re.match(r"troupe/_lib/(.+)-[0-9a-f]{8}(\.so.*)$", n)
    if m:
        print(m.group(1) + m.group(2))
EOF
)
pylibs=$( (ldd /usr/bin/python3; find /usr/lib/python3*/lib-dynload -name '*.so' -exec ldd {} \;) 2>/dev/null |
    awk '$2 == "=>" { print $1 }' | sort -u)
hide=()
for so in $bundled; do
    grep -qxF "$so" <<<"$pylibs" && continue
    for d in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib /usr/lib; do
        [[ -e "$d/$so" ]] && hide+=("$(readlink -f "$d/$so")")
    done
done
[[ ${#hide[@]} -gt 0 ]] && mapfile -t hide < <(printf '%s\n' "${hide[@]}" | sort -u)
check "the system has copies of the bundled libraries to hide (${#hide[@]})" test "${#hide[@]}" -gt 10

cat >"$work/example.py" <<'EOF'
import troupe as ray

@ray.remote
class Counter:
    def __init__(self):
        self.n = 0
    def add(self, k):
        self.n += k
        return self.n

ray.init()
c = Counter.remote()
print(ray.get([c.add.remote(i) for i in range(4)]))   # [0, 1, 3, 6]
maps = open("/proc/self/maps").read()
print("grpc from the wheel" if "/site-packages/troupe/_lib/libgrpc-" in maps else "grpc NOT from the wheel")
print("system grpc loaded" if "/libgrpc.so" in maps else "no system grpc")
from troupe import _runtime
print("extension: " + ("used" if _runtime.fast is not None else "not used"))
ray.shutdown()
EOF
cat >"$work/inside.sh" <<EOF
set -e
mount --make-rprivate /
for f in ${hide[*]}; do mount --bind /dev/null "\$f"; done
mount -t tmpfs none "$root"
mount -t tmpfs none /usr/include
[ -d /root/.cache/bazel ] && mount -t tmpfs none /root/.cache/bazel
for b in /usr/bin/bazel /usr/bin/bazel-bootstrap; do [ -e "\$b" ] && mount --bind /dev/null "\$b"; done
mount -t tmpfs none /tmp
command -v bazel >/dev/null && [ -s "\$(command -v bazel)" ] && { echo "bazel still here"; exit 3; }
cd "$work"
/usr/bin/python3 -m venv --system-site-packages venv
venv/bin/pip install -q --no-index --no-deps "$wheel"
cd /tmp && "$work/venv/bin/python" "$work/example.py"
"$work/venv/bin/troupe" --help 2>&1 | head -n 1 | sed 's/^/cli: /'
mkdir -p "$work/node"
"$work/venv/bin/troupe" start --head --port 0 --tmpdir "$work/node" >/dev/null
"$work/venv/bin/troupe" status --tmpdir "$work/node" | grep -q '"cluster"' && echo "head: up"
"$work/venv/bin/troupe" stop --tmpdir "$work/node" >/dev/null && echo "head: stopped"
EOF
out=$(timeout 300 unshare -m bash "$work/inside.sh" 2>&1)
rc=$?
[[ $rc -eq 0 ]] || echo "$out" | tail -20
check "pip install of the wheel and the README's example, no build tree, no Bazel, no -dev" \
    test "$rc" -eq 0
check "the example prints [0, 1, 3, 6]" grep -qxF "[0, 1, 3, 6]" <<<"$out"
check "its libraries come from the wheel" grep -qxF "grpc from the wheel" <<<"$out"
check "its C extension (troupe._fast) loads from the wheel" grep -qxF "extension: used" <<<"$out"
check "no system copy of them is loaded" grep -qxF "no system grpc" <<<"$out"
check "the troupe command runs from the wheel (troupe --help)" grep -q "^cli: .*troupe" <<<"$out"
check "troupe start --head, status and stop from the wheel" \
    grep -qx "head: stopped" <<<"$(grep -A1 -x "head: up" <<<"$out")"
[[ -n "${WHEEL_TEST_VERBOSE:-}" ]] && echo "$out" && echo "hidden: ${hide[*]}"
finish
