#!/usr/bin/env bash
# tools/deps.sh - installs the Debian 12 packages troupe builds and tests with, if any is
# missing. Quiet when nothing is missing. Run it or source it; as root it installs with
# apt-get, otherwise through sudo, or it prints the apt-get line and fails.

troupe_deps() {
    local pkgs=(bazel-bootstrap libgrpc-dev libssl-dev libmsgpack-dev libuv1-dev libgtest-dev
        libgloo-dev pkg-config gcc g++ iproute2 procps patchelf
        clang-format gcc-aarch64-linux-gnu libc6-dev-arm64-cross
        python3 python3-dev python3-venv python3-pip python3-setuptools python3-wheel python3-numpy
        python3-cloudpickle python3-pytest python3-yaml prometheus chromium kubernetes-client
        slurmctld slurmd slurm-client munge)
    local missing=() p

    if ! command -v dpkg-query >/dev/null 2>&1; then
        echo "deps.sh: no dpkg here (not Debian?); make sure these are installed:" \
            "${pkgs[*]}" >&2
        command -v bazel >/dev/null 2>&1 && command -v gcc >/dev/null 2>&1
        return
    fi
    for p in "${pkgs[@]}"; do
        # (a kubectl from elsewhere, e.g. Google Cloud SDK's package, conflicts with Debian's)
        [[ $p == kubernetes-client ]] && command -v kubectl >/dev/null 2>&1 && continue
        if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]]; then
            missing+=("$p")
        fi
    done
    [[ ${#missing[@]} -eq 0 ]] && return 0

    local apt=(apt-get install -y --no-install-recommends "${missing[@]}")
    local sudo=()
    if [[ $(id -u) -ne 0 ]]; then
        if command -v sudo >/dev/null 2>&1; then
            sudo=(sudo)
        else
            echo "deps.sh: missing packages: ${missing[*]}" >&2
            echo "deps.sh: as root, run: apt-get update && ${apt[*]}" >&2
            return 1
        fi
    fi
    echo "deps.sh: installing ${missing[*]}" >&2
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q &&
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive "${apt[@]}"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    troupe_deps
    exit $?
else
    troupe_deps
fi
