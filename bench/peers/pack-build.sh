#!/usr/bin/env bash
# Copies the binaries the peer benchmark runs out of a build folder into a
# small one to carry to the GPU machine, where the whole build folder with
# its tests would not fit the 64 MiB that travels with the tree:
#
#   bench/peers/pack-build.sh BUILD_DIR [DEST]     (DEST default: build-peers, ignored by git)
#   then: carry [DEST, .whl] and run scripts/device-peers.sh DEST
set -euo pipefail
cd "$(dirname "$0")/../.."
src=${1:?usage: pack-build.sh BUILD_DIR [DEST]}
dest=${2:-build-peers}
rm -rf "$dest"
mkdir -p "$dest"
for name in stagingd lease-agent peers-ceilings; do
    bin=$(find "$src" -type f -name "$name" -perm -u+x | sort | head -n 1)
    if [[ -z $bin ]]; then
        echo "pack-build: no $name under $src" >&2
        exit 1
    fi
    cp -p "$bin" "$dest/$name"
    echo "  $name <- $bin"
done
du -sh "$dest" "$( [[ -d .whl ]] && echo .whl)" 2>/dev/null
