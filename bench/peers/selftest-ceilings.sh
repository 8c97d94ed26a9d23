#!/usr/bin/env bash
# peers-ceilings against the fake CUDA driver (ctest peers_ceilings_fakecuda):
# every mode passes on a small store, and each check fails when
# PEERS_CORRUPT_TEST=1 spoils one byte of the result.
#   selftest-ceilings.sh PEERS_CEILINGS STAGINGD FAKECUDA_LIB_DIR
set -uo pipefail
ceil=$1 stagingd=$2 fk=$3
[[ -e $fk/libcuda.so.1 ]] || { echo "no libcuda.so.1 in $fk: skipped"; exit 77; }
export LD_LIBRARY_PATH=$fk${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
tmp=$(mktemp -d /tmp/peers-ceil-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
"$stagingd" gen --out "$tmp/store" --size 16MiB --shard-size 1MiB --quiet || exit 1
fails=0 passes=0
expect() { # what rc-wanted cmd...
    local what=$1 want=$2
    shift 2
    "$@" >"$tmp/out" 2>&1
    local rc=$?
    if [[ $rc -ne $want ]] || { [[ $want -eq 0 ]] && ! grep -q '"ok": true' "$tmp/out"; } ||
        { [[ $want -ne 0 ]] && ! grep -q '"checked": "MISMATCH"' "$tmp/out"; }; then
        echo "FAIL: $what (exit $rc, wanted $want):"
        sed 's/^/  /' "$tmp/out"
        fails=$((fails + 1))
    else
        echo "ok: $what"
        passes=$((passes + 1))
    fi
}
for corrupt in 0 1; do
    want=$corrupt
    tag=$([[ $corrupt == 1 ]] && echo " detects a spoilt byte" || echo " passes")
    export PEERS_CORRUPT_TEST=$corrupt
    expect "h2d$tag" "$want" "$ceil" h2d --size 8M --repeat 2 --id h --label h
    expect "pread-fresh$tag" "$want" "$ceil" pread-fresh --store "$tmp/store" --threads 4 --buf 256K --repeat 2 --id f --label f
    expect "naive$tag" "$want" "$ceil" naive --store "$tmp/store" --threads 2 --repeat 2 --id n --label n
done
unset PEERS_CORRUPT_TEST
expect "pread-reused passes" 0 "$ceil" pread-reused --store "$tmp/store" --threads 4 --buf 1M --repeat 2 --id r --label r
"$ceil" bogus --id x --label y >/dev/null 2>&1
if [[ $? -eq 2 ]]; then echo "ok: a bad mode is a usage error"; passes=$((passes + 1)); else echo "FAIL: a bad mode"; fails=$((fails + 1)); fi
echo "$passes passed, $fails failed"
((fails == 0))
