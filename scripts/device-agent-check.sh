#!/usr/bin/env bash
# The CUDA agent's checks on the GPU machine, from the repository root, over
# a build folder made elsewhere with -DLEASE_GPU_ARCH=90 and carried here:
#
#   scripts/device-agent-check.sh [BUILD_DIR]      (default: build-device)
#
# 1. ctest -L gpu, the whole tree (test_agent_cuda: lease-agent with the CUDA
#    backend over its socket, and every other module's GPU tests);
# 2. lease-bench --spawn lease-agent (CUDA backend): socket ping-pong against
#    grant/release, batched leases/s, submit cycles and registration counts;
# 3. reg-bench --size-gib 4: lease segment registration against plain
#    cuMemHostRegister.
# Logs go to $OUT when it is set (the agents' own logs in agent-logs.tar.gz);
# a table of results is printed last. Exit 0 only if everything passed.
# Knobs: GPU_TESTS_REGEX=... runs only the GPU tests it matches (ctest -R);
# REG_BENCH=0 leaves reg-bench out; CTEST_LIMIT_S, BENCH_LIMIT_S, REG_LIMIT_S
# bound each step's seconds.
set -u

build=${1:-build-device}
log_dir=${OUT:-$(mktemp -d)}
mkdir -p "$log_dir"

if [[ ! -f "$build/CMakeCache.txt" ]]; then
  echo "device-agent-check: expected a configured build folder at '$build', found none" >&2
  exit 2
fi
here=$(cd "$build" && pwd -P)

# ctest files hold the absolute path the folder was built at: make it lead here.
built_at=$(sed -n 's/^CMAKE_CACHEFILE_DIR:INTERNAL=//p' "$build/CMakeCache.txt")
test_dir=$here
if [[ -n "$built_at" && "$built_at" != "$here" ]]; then
  if [[ ! -e "$built_at" ]]; then
    mkdir -p "$(dirname "$built_at")" && ln -s "$here" "$built_at" &&
      echo "device-agent-check: linked $built_at -> $here (the folder was built there)"
  fi
  [[ "$(cd "$built_at" 2>/dev/null && pwd -P)" == "$here" ]] && test_dir=$built_at
fi
arch=$(sed -n 's/^LEASE_GPU_ARCH:STRING=//p' "$build/CMakeCache.txt")
echo "device-agent-check: build $here (kernels for sm_${arch:-?})"
command -v nvidia-smi >/dev/null 2>&1 &&
  nvidia-smi --query-gpu=index,name,compute_cap,driver_version --format=csv,noheader

# 1. GPU tests; the agents' logs are kept (TH_KEEP_LOGS) and collected.
rm -f /tmp/ga-server-*.log
ctest_log="$log_dir/gpu-ctest.log"
echo "device-agent-check: ctest -L gpu (log: $ctest_log)"
select=(-L gpu)
[[ -n "${GPU_TESTS_REGEX:-}" ]] && select+=(-R "$GPU_TESTS_REGEX")
TH_KEEP_LOGS=1 timeout -k 5 "${CTEST_LIMIT_S:-170}" \
  ctest --test-dir "$test_dir" "${select[@]}" -V --timeout 150 >"$ctest_log" 2>&1
ctest_rc=$?
grep -E '^[[:space:]]*[0-9]+/[0-9]+ Test +#' "$ctest_log" || true
grep -E 'tests passed|tests failed' "$ctest_log" || true
grep -E '^long copy round|^[0-9]+%: Checks' "$ctest_log" || true
ls /tmp/ga-server-*.log >/dev/null 2>&1 &&
  tar -czf "$log_dir/agent-logs.tar.gz" /tmp/ga-server-*.log 2>/dev/null

# 2. lease-bench against the CUDA agent it starts itself.
bench_log="$log_dir/lease-bench.log"
echo "device-agent-check: lease-bench --spawn lease-agent (CUDA backend)"
timeout -k 5 "${BENCH_LIMIT_S:-60}" "$here/bench/lease-bench" --spawn "$here/gpu/cuda/lease-agent" \
  -- --pinned-budget 1G --mapped-budget 256M >"$bench_log" 2>&1
bench_rc=$?
sed -n '/^metric/,$p' "$bench_log"

# 3. reg-bench.
reg_log="$log_dir/reg-bench.log"
reg_rc=0
if [[ "${REG_BENCH:-1}" != 0 ]]; then
  echo "device-agent-check: reg-bench --size-gib 4"
  timeout -k 5 "${REG_LIMIT_S:-60}" "$here/bench/reg-bench" --size-gib 4 >"$reg_log" 2>&1
  reg_rc=$?
  tail -n 12 "$reg_log"
fi

echo
echo "==== device agent check: results ===="
printf '%-44s %s\n' "check" "result"
rows=$(sed -nE 's/^[[:space:]]*[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) \.*[ *]*([A-Za-z]+[A-Za-z ()]*[^ ]) +([0-9.]+ sec).*/\1|\2 (\3)/p' "$ctest_log")
if [[ -z "$rows" ]]; then
  printf '%-44s %s\n' "ctest -L gpu" "NO TESTS RAN (rc $ctest_rc)"
else
  while IFS='|' read -r name result; do
    printf '%-44s %s\n' "$name" "$result"
  done <<<"$rows"
fi
p50=$(sed -nE 's/^\(b\) grant \+ release p50 +\| +([0-9.]+ us) \| ([0-9.]+).*/\1 (\2x ping-pong)/p' "$bench_log")
batched=$(sed -nE 's/^\(c\) batched leases.*\| +([0-9]+ \/s).*/\1/p' "$bench_log")
regs=$(sed -nE 's/^\(d\) registrations before -> after +\| +(.*) \| (.*)/\1 (\2)/p' "$bench_log")
printf '%-44s %s\n' "lease-bench grant+release p50" "${p50:-FAIL (rc $bench_rc)}"
printf '%-44s %s\n' "lease-bench batched leases" "${batched:-FAIL (rc $bench_rc)}"
printf '%-44s %s\n' "lease-bench registrations over 100k cycles" "${regs:-FAIL (rc $bench_rc)}"
if [[ "${REG_BENCH:-1}" != 0 ]]; then
  printf '%-44s %s\n' "reg-bench --size-gib 4" "$([[ $reg_rc -eq 0 ]] && echo "ran (table above)" || echo "FAIL (rc $reg_rc)")"
fi
if [[ $ctest_rc -eq 0 && $bench_rc -eq 0 && $reg_rc -eq 0 && -n "$rows" ]] &&
  ! grep -qE 'Skipped|Not Run' <<<"$rows"; then
  echo "device agent check: ALL PASSED"
  exit 0
fi
echo "device agent check: NOT ALL PASSED (a skipped GPU test counts as not passed here)"
exit 1
