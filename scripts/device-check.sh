#!/usr/bin/env bash
# Runs the GPU checks on the GPU machine, from the repository root, over a
# build folder made elsewhere (`make device-build`) and carried here:
#
#   scripts/device-check.sh [BUILD_DIR]        (default: build-device)
#
# 1. ctest -L gpu (verbose log to $OUT/gpu-ctest.log when $OUT is set);
# 2. lease-agent --self-test --bytes $SELF_TEST_BYTES (default 512M);
# then a short table of results, last. Exit 0 only if everything passed.
# Needs nothing installed but the NVIDIA driver and ctest: liburing,
# jemalloc and Check are linked statically into the binaries.
set -u

build=${1:-build-device}
bytes=${SELF_TEST_BYTES:-512M}
log_dir=${OUT:-}

if [[ ! -f "$build/CMakeCache.txt" ]]; then
  echo "device-check: expected a configured build folder at '$build', found none" >&2
  exit 2
fi
here=$(cd "$build" && pwd -P)

# Some tests run scripts from the source tree by its absolute path too: make
# the path the build was configured from lead to this checkout (first: the
# build folder's own link below may live under it).
src_at=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
repo_root=$(cd "$(dirname "$0")/.." && pwd -P)
if [[ -n "$src_at" && ! -e "$src_at" ]]; then
  mkdir -p "$(dirname "$src_at")" && ln -s "$repo_root" "$src_at" &&
    echo "device-check: linked $src_at -> $repo_root (the sources were configured there)"
fi

# ctest files hold the absolute path the folder was built at. When it was
# built elsewhere, make that path lead here.
built_at=$(sed -n 's/^CMAKE_CACHEFILE_DIR:INTERNAL=//p' "$build/CMakeCache.txt")
test_dir=$here
if [[ -n "$built_at" && "$built_at" != "$here" ]]; then
  if [[ ! -e "$built_at" ]]; then
    mkdir -p "$(dirname "$built_at")" && ln -s "$here" "$built_at" &&
      echo "device-check: linked $built_at -> $here (the folder was built there)"
  fi
  if [[ "$(cd "$built_at" 2>/dev/null && pwd -P)" == "$here" ]]; then
    test_dir=$built_at
  else
    echo "device-check: warning: built at $built_at, which is not this folder; ctest may not find the tests" >&2
  fi
fi

arch=$(sed -n 's/^LEASE_GPU_ARCH:STRING=//p' "$build/CMakeCache.txt")
echo "device-check: build $here (kernels for sm_${arch:-?})"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=index,name,compute_cap,driver_version,pci.bus_id --format=csv,noheader || true
fi
if [[ -r /proc/driver/nvidia/version ]]; then
  head -n 1 /proc/driver/nvidia/version
fi

ctest_log=$(mktemp)
if [[ -n "$log_dir" ]]; then
  mkdir -p "$log_dir"
  ctest_log="$log_dir/gpu-ctest.log"
fi
echo "device-check: ctest -L gpu (log: $ctest_log)"
ctest --test-dir "$test_dir" -L gpu -V --timeout 600 >"$ctest_log" 2>&1
ctest_rc=$?
grep -E '^[[:space:]]*[0-9]+/[0-9]+ Test +#' "$ctest_log" || true
grep -E 'tests passed|tests failed' "$ctest_log" || true

agent="$here/gpu/cuda/lease-agent"
self_log=$(mktemp)
[[ -n "$log_dir" ]] && self_log="$log_dir/self-test.log"
echo "device-check: $agent --self-test --bytes $bytes"
if [[ -x "$agent" ]]; then
  "$agent" --self-test --bytes "$bytes" >"$self_log" 2>&1
  self_rc=$?
else
  echo "lease-agent not built in $here (was it configured with the CUDA toolkit?)" >"$self_log"
  self_rc=2
fi
cat "$self_log"

echo
echo "==== device check: results ===="
printf '%-34s %s\n' "test" "result"
rows=$(sed -nE 's/^[[:space:]]*[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) \.*[ *]*([A-Za-z]+[A-Za-z ()]*[^ ]) +([0-9.]+ sec).*/\1|\2 (\3)/p' "$ctest_log")
if [[ -z "$rows" ]]; then
  printf '%-34s %s\n' "ctest -L gpu" "NO TESTS RAN (rc $ctest_rc; see $ctest_log)"
else
  while IFS='|' read -r name result; do
    printf '%-34s %s\n' "$name" "$result"
  done <<<"$rows"
fi
if [[ $self_rc -eq 0 ]] && grep -q 'self-test PASS' "$self_log"; then
  printf '%-34s %s\n' "lease-agent --self-test $bytes" "PASS"
else
  printf '%-34s %s\n' "lease-agent --self-test $bytes" "FAIL (rc $self_rc)"
fi
if [[ $ctest_rc -eq 0 && $self_rc -eq 0 && -n "$rows" ]] && ! grep -qE 'Skipped|Not Run' <<<"$rows"; then
  echo "device check: ALL PASSED"
  exit 0
fi
echo "device check: NOT ALL PASSED (a skipped GPU test counts as not passed here)"
exit 1
