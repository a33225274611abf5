#!/usr/bin/env python3
"""tools/wheel_repair.py - gathers libtroupe.so and the shared libraries it needs that a
plain Linux machine with Python lacks into one directory, as `auditwheel repair` does for
a manylinux wheel: each library outside the manylinux policy's list (glibc's, libgcc_s,
libstdc++) is copied in under a name made unique by its hash (libgrpc-1a2b3c4d.so.29,
its soname too), every DT_NEEDED that names one is rewritten to that name, and every
file's RUNPATH is $ORIGIN, so the libraries resolve each other there and never clash
with another copy a process has loaded. Prints the platform tag the result satisfies:
manylinux_X_Y_<arch>, X.Y the newest glibc symbol version any of them needs.

Executables given after OUT_DIR (the `troupe` command) are gathered and relinked the same
way, under their own names.

Usage: tools/wheel_repair.py LIBTROUPE_SO OUT_DIR [EXECUTABLE...]
       (needs ldd, patchelf, objdump)
"""
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys

# What a manylinux system provides (PEP 600's policy: glibc's libraries, the compiler's
# runtime); everything else goes into the wheel.
PROVIDED = {
    "linux-vdso.so.1", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1", "libc.so.6",
    "libm.so.6", "libdl.so.2", "librt.so.1", "libpthread.so.0", "libresolv.so.2",
    "libutil.so.1", "libnsl.so.1", "libcrypt.so.1", "libgcc_s.so.1", "libstdc++.so.6",
}


def run(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def needed_closure(lib):
    """{soname: path} of everything the dynamic linker loads for lib (ldd's closure)."""
    found = {}
    for line in run("ldd", lib).splitlines():
        m = re.match(r"\s*(\S+)\s+=>\s+(\S+)", line)
        if m and m.group(2) != "not":
            found[m.group(1)] = os.path.realpath(m.group(2))
        elif "not found" in line:
            raise SystemExit(f"wheel_repair: {lib} needs {line.split()[0]}, not found here")
    return found


def unique_name(soname, path):
    digest = hashlib.sha256(open(path, "rb").read()).hexdigest()[:8]
    stem, dot, rest = soname.partition(".so")
    return f"{stem}-{digest}.so{rest}"


def glibc_needed(path):
    versions = re.findall(r"GLIBC_(\d+)\.(\d+)", run("objdump", "-T", path))
    return max(((int(a), int(b)) for a, b in versions), default=(2, 17))


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    lib, out, exes = sys.argv[1], sys.argv[2], sys.argv[3:]
    os.makedirs(out, exist_ok=True)
    closure = needed_closure(lib)
    for exe in exes:
        closure.update(needed_closure(exe))
    renamed = {so: unique_name(so, p) for so, p in closure.items() if so not in PROVIDED}
    files = []
    for so, new in sorted(renamed.items()):
        dst = os.path.join(out, new)
        shutil.copyfile(closure[so], dst)
        os.chmod(dst, 0o755)
        run("patchelf", "--set-soname", new, dst)
        files.append(dst)
    for src, name in [(lib, "libtroupe.so.1")] + [(e, os.path.basename(e)) for e in exes]:
        dst = os.path.join(out, name)
        shutil.copyfile(src, dst)
        os.chmod(dst, 0o755)
        files.append(dst)
    newest = (2, 17)
    for f in files:
        for dep in run("patchelf", "--print-needed", f).split():
            if dep in renamed:
                run("patchelf", "--replace-needed", dep, renamed[dep], f)
        run("patchelf", "--set-rpath", "$ORIGIN", f)
        newest = max(newest, glibc_needed(f))
    arch = platform.machine()
    print(f"manylinux_{newest[0]}_{newest[1]}_{arch}")


if __name__ == "__main__":
    main()
