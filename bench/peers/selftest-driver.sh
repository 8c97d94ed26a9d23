#!/usr/bin/env bash
# scripts/device-peers.sh --self-test from a build folder (ctest
# peers_driver_selftest): the whole driver with fakes; skipped (77) where the
# python has no numpy, which the fakes need.
#   selftest-driver.sh BUILD_DIR [PYTHON]
set -uo pipefail
build=$1 py=${PEERS_PYTHON:-${2:-python3}} # PEERS_PYTHON: one that has numpy
"$py" -c 'import numpy' 2>/dev/null || { echo "$py has no numpy: skipped"; exit 77; }
out=$(mktemp -d /tmp/peers-selftest-out-XXXXXX)
trap 'rm -rf "$out"' EXIT
OUT=$out PEERS_PYTHON=$py "$(dirname "$0")/../../scripts/device-peers.sh" "$build" --self-test --repeat 1
rc=$?
for f in peers.json peers.log; do
    [[ -s $out/$f ]] || { echo "FAIL: no $f"; rc=1; }
done
exit $rc
