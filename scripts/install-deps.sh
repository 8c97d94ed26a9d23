#!/usr/bin/env bash
# Installs the Debian packages the build and tests need, only those missing;
# one line when all are there. Used by `make deps` (and so by `make test` and
# `make demo`). apt's output goes to logs in DEPS_LOG_DIR (build/logs), one
# line per step on the terminal, the log's path printed if a step fails.
#
#   LEASE_CUDA_ROOT (/usr/local/cuda)  where the CUDA toolkit is looked for
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
log_dir=${DEPS_LOG_DIR:-build/logs}
cuda_root=${LEASE_CUDA_ROOT:-/usr/local/cuda}

# What a bare Debian 12 (debootstrap --variant=minbase) lacks for configure,
# build and every test: binutils (readelf, in the demo) and the sanitizer
# runtimes come with gcc.
packages=(cmake make gcc libc6-dev pkg-config liburing-dev libjemalloc-dev check libsubunit-dev)
# Operations (docs/operations.md): jansson for the JSON of stagingd's
# control replies and leasectl --json, libmicrohttpd for /metrics; and for
# the tests only, prometheus (its server and promtool scrape stagingd on
# loopback), systemd (systemd-analyze verify of the units; it installs in
# a container without booting it), man-db and groff-base (man -l).
packages+=(libjansson-dev libmicrohttpd-dev prometheus systemd man-db groff-base)

# The same rule as cmake/CudaDriver.cmake: the toolkit's nvcc, else (for the
# default root only) one on PATH. nvcc runs g++ even for cubins, and
# Debian's gcc does not bring it.
nvcc=
if [[ -x $cuda_root/bin/nvcc ]]; then
    nvcc=$cuda_root/bin/nvcc
elif [[ $cuda_root == /usr/local/cuda ]] && command -v nvcc > /dev/null; then
    nvcc=$(command -v nvcc)
fi
[[ -n $nvcc ]] && packages+=(g++)

missing=()
for p in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if ((${#missing[@]})); then
    echo "deps: installing ${#missing[@]} missing Debian packages: ${missing[*]}"
    if [[ $(id -u) -eq 0 ]]; then
        sudo=()
    elif command -v sudo > /dev/null; then
        sudo=(sudo)
    else
        echo "deps: need root (or sudo) to run apt-get install ${missing[*]}" >&2
        exit 1
    fi
    # env, not export: sudo would drop it. Status-Fd=1 puts apt's progress
    # lines where step.sh reads them.
    apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o APT::Status-Fd=1)
    "$here/step.sh" "deps: apt-get update" "$log_dir/apt-update.log" -- "${apt[@]}" update
    # The prometheus package starts and enables a server on every interface
    # (:9090); the tests run their own on loopback. Unless a policy is in
    # place already (containers have one), deny its start while apt runs,
    # and disable it after.
    policy=/usr/sbin/policy-rc.d
    own_policy=
    if [[ " ${missing[*]} " == *" prometheus "* && ! -e $policy ]]; then
        printf '#!/bin/sh\n# scripts/install-deps.sh: no prometheus service during apt-get.\ncase " $* " in *" prometheus "*) exit 101 ;; esac\nexit 0\n' |
            "${sudo[@]}" tee "$policy" > /dev/null && "${sudo[@]}" chmod 755 "$policy" && own_policy=1
    fi
    rc=0
    "$here/step.sh" "deps: apt-get install" "$log_dir/apt-install.log" -- \
        "${apt[@]}" install -y --no-install-recommends "${missing[@]}" || rc=$?
    [[ -n $own_policy ]] && "${sudo[@]}" rm -f "$policy"
    if [[ " ${missing[*]} " == *" prometheus "* ]]; then
        "${sudo[@]}" systemctl disable prometheus.service > /dev/null 2>&1 || true
        "${sudo[@]}" update-rc.d prometheus disable > /dev/null 2>&1 || true
    fi
    ((rc == 0)) || exit "$rc"
else
    echo "deps: the ${#packages[@]} Debian packages the build needs are installed"
fi

# CUDA 13 is not a Debian package: say loudly what its absence costs.
if [[ -z $nvcc ]]; then
    echo "deps: WARNING: no CUDA toolkit: no $cuda_root/bin/nvcc$([[ $cuda_root == /usr/local/cuda ]] && echo ", none on PATH")." >&2
    echo "deps: the kernels' cubins, the GPU agent and the GPU tests will be SKIPPED." >&2
fi
