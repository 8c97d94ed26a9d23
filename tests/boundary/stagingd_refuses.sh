#!/bin/sh
# End to end, layer 4: stagingd started with a fake libcuda.so.1 preloaded
# must refuse to start, name the library, and exit 1; started clean it passes.
# usage: stagingd_refuses.sh <stagingd> <fake libcuda.so.1>
stagingd=$1 fake=$2
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"

out=$("$stagingd" --self-check 2>&1); rc=$?
[ "$rc" -eq 0 ] || { echo "FAIL: clean stagingd --self-check exited $rc: $out"; exit 1; }

out=$(LD_PRELOAD="$fake" "$stagingd" --self-check 2>&1); rc=$?
echo "$out"
[ "$rc" -eq 1 ] || { echo "FAIL: expected exit 1 with a CUDA library mapped, got $rc"; exit 1; }
echo "$out" | grep -q "refusing to start: CUDA library mapped into stagingd: .*libcuda.so.1" ||
    { echo "FAIL: the refusal does not name libcuda.so.1"; exit 1; }
echo "PASS: stagingd refused to start with $fake mapped"
