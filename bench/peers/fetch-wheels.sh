#!/usr/bin/env bash
# Downloads KvikIO's wheels for the GPU machine into .whl/ at the repo root
# (ignored by git; nothing of KvikIO is committed). The machine has no package
# registry, so scripts/device-peers.sh installs these from the carried folder.
# Its image already has cupy-cuda13x, numpy and the nvidia-* wheels; what is
# left of KvikIO's Requires-Dist is listed below (checked with
#   unzip -p .whl/NAME-*.whl '*/METADATA' | grep ^Requires-Dist).
#
#   bench/peers/fetch-wheels.sh [--list]     (--list: what it would fetch)
set -euo pipefail
cd "$(dirname "$0")/../.."
KVIKIO_VERSION=${KVIKIO_VERSION:-26.10.0}
RAPIDS_LOGGER_VERSION=${RAPIDS_LOGGER_VERSION:-0.3.0}
wheels=(
    "kvikio-cu13==$KVIKIO_VERSION"
    "libkvikio-cu13==$KVIKIO_VERSION"
    "rapids-logger==$RAPIDS_LOGGER_VERSION"
)
if [[ ${1:-} == --list ]]; then
    printf '%s\n' "${wheels[@]}"
    exit 0
fi
mkdir -p .whl
# The device image is Python 3.12.3 on x86-64 with glibc 2.39; pip matches
# the manylinux tag exactly, so every plausible one is named.
plats=()
for n in 17 24 27 28 31 34 35 39; do plats+=(--platform "manylinux_2_${n}_x86_64"); done
plats+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)
for w in "${wheels[@]}"; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp "${plats[@]}" -d .whl "$w"
done
echo "wheels in .whl/:"
ls -l .whl/*.whl | awk '{printf "  %8.1f MiB  %s\n", $5 / 1048576, $NF}'
for f in .whl/*.whl; do
    echo "== $(basename "$f") needs:"
    unzip -p "$f" '*.dist-info/METADATA' | grep '^Requires-Dist' | grep -v 'extra ==' | sed 's/^/  /' || true
done
du -sh .whl
# Two versions of one package stop the whole install on the device: refuse them here.
dups=$(ls .whl/*.whl | sed 's|.*/||; s/-[0-9].*//' | sort | uniq -d)
if [[ -n $dups ]]; then
    echo "fetch-wheels: more than one version of: $dups; keep one (rm the others from .whl/)" >&2
    exit 1
fi
