#!/usr/bin/env bash
# Installs the Debian packages the build and tests need, only those missing.
# Idempotent and quiet when everything is present. Used by `make deps`.
set -euo pipefail

packages=(cmake make gcc libc6-dev pkg-config liburing-dev libjemalloc-dev check libsubunit-dev)

missing=()
for p in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if ((${#missing[@]})); then
    echo "deps: installing missing Debian packages: ${missing[*]}"
    if [[ $(id -u) -eq 0 ]]; then
        sudo=()
    elif command -v sudo >/dev/null; then
        sudo=(sudo)
    else
        echo "deps: need root (or sudo) to run apt-get install ${missing[*]}" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# CUDA 13 is not a Debian package: say loudly what its absence costs.
cuda_root=${LEASE_CUDA_ROOT:-/usr/local/cuda}
if [[ ! -x "$cuda_root/bin/nvcc" ]]; then
    echo "deps: WARNING: no CUDA toolkit at $cuda_root (no $cuda_root/bin/nvcc)." >&2
    echo "deps: the kernels' cubins, the GPU agent and the GPU tests will be SKIPPED." >&2
fi
