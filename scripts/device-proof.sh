#!/usr/bin/env bash
# The whole GPU proof in one command, for the lent H200 machine:
#
#   scripts/device-proof.sh [BUILD_DIR]      (default: build-device, made by `make device-build`)
#
# 0. reserves 2 MiB huge pages (PROOF_HUGEPAGES, default 3072 = 6 GiB; the old count is put
#    back at the end): stagingd's segments use them by default, and reg-bench compares them;
#    the thp part sets shmem_enabled to advise for its run and puts the old policy back;
# 1. every GPU test (ctest -L gpu) and the agent's self-test (scripts/device-check.sh);
# 2. the arch gate: an agent built for sm_120 must refuse this GPU (if BUILD_DIR/extra has one);
# 3. the benchmarks, each against its baseline in the same run: segment registration,
#    populating before registering, lease round trips, the doorbell, the scan paths, io_uring staging;
# 4. the pipeline: stagingd stages a store, the CUDA agent verifies and scans it.
# Logs go to $OUT (when set); a short table of results comes last.
# 5. peers (only when named: PROOF_PARTS="peers", 4 to 8 minutes alone): the peer benchmark,
#    scripts/device-peers.sh (bench/peers/README.md): ours (streaming and whole shards),
#    KvikIO (carry .whl/ from bench/peers/fetch-wheels.sh), PyTorch, naive, the ceilings, on
#    one 8 GiB page-cache-hot store; writes $OUT/peers.json, $OUT/peers.png, $OUT/peers.log.
#    PROOF_PEERS_ARGS goes to device-peers.sh (e.g. "--quick" or "--gib 4").
# PROOF_PARTS (default "tests arch reg thp populate lease doorbell scan stage pipeline") picks
# parts, to split the proof over calls that must each stay under a time limit.
set -u
build=${1:-build-device}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
log="$out/proof.log"
: >"$log"
rows=()
row() { rows+=("$(printf '%-30s %s' "$1" "$2")"); }
section() { printf '\n==== %s ====\n' "$*" | tee -a "$log"; }
parts=" ${PROOF_PARTS:-tests arch reg thp populate lease doorbell scan stage pipeline} "
want() { [[ "$parts" == *" $1 "* ]]; }

# run <name> <timeout> <cmd...>: output to the log; the last lines to stdout.
run() {
    local name=$1 limit=$2
    shift 2
    section "$name: $*"
    timeout "$limit" "$@" >>"$log" 2>&1
    local rc=$?
    tail -n "${TAIL:-12}" "$log"
    return $rc
}

section "device"
nvidia-smi --query-gpu=name,compute_cap,driver_version,pci.bus_id --format=csv,noheader | tee -a "$log"

# 0. huge pages
huge_sysfs=/sys/kernel/mm/hugepages/hugepages-2048kB
huge_before=$(cat "$huge_sysfs/nr_hugepages" 2>/dev/null || echo 0)
thp_file=/sys/kernel/mm/transparent_hugepage/shmem_enabled
thp_before=$(sed -n 's/.*\[\(.*\)\].*/\1/p' "$thp_file" 2>/dev/null)
restore_huge() {
    echo "$huge_before" >"$huge_sysfs/nr_hugepages" 2>/dev/null
    [[ -n "$thp_before" ]] && echo "$thp_before" >"$thp_file" 2>/dev/null
}
trap restore_huge EXIT
section "2 MiB huge pages: ${PROOF_HUGEPAGES:-3072} (were $huge_before)"
if echo "${PROOF_HUGEPAGES:-3072}" >"$huge_sysfs/nr_hugepages" 2>>"$log"; then
    echo "nr_hugepages $(cat "$huge_sysfs/nr_hugepages"), free $(cat "$huge_sysfs/free_hugepages")" | tee -a "$log"
    row "huge pages reserved" "$(cat "$huge_sysfs/nr_hugepages") x 2 MiB"
else
    echo "could not reserve huge pages (not root?): segments use 4 KiB pages" | tee -a "$log"
    row "huge pages reserved" "none (not permitted)"
fi

# 1. tests
if want tests; then
    OUT="$out" scripts/device-check.sh "$build" >"$out/check.txt" 2>&1
    check_rc=$?
    sed -n '/==== device check: results ====/,$p' "$out/check.txt"
    row "GPU tests + self-test" "$([[ $check_rc -eq 0 ]] && echo PASS || echo "FAIL (rc $check_rc)")"
fi

# 2. the arch gate
wrong="$build/extra/lease-agent-sm120"
if want arch && [[ -x "$wrong" ]]; then
    section "arch gate: an sm_120 build on this GPU"
    "$wrong" --self-test --bytes 1M >"$out/arch.txt" 2>&1
    rc=$?
    cat "$out/arch.txt" | tee -a "$log" | grep -iE 'sm_|refus|build' | head -4
    if [[ $rc -ne 0 ]] && grep -q "sm_120" "$out/arch.txt"; then row "sm_120 build refused" "PASS"; else row "sm_120 build refused" "FAIL"; fi
fi

B=$build
# 3. benchmarks
if want reg; then
    TAIL=6 run reg-bench 180 "$B/bench/reg-bench" --size-gib 4 --repeat 3 --pages 4k,huge && row reg-bench done || row reg-bench FAIL
fi
if want thp; then
    # shmem THP instead of reserved pages: the other 2 MiB route (docs/staging-pool.md).
    if echo advise >"$thp_file" 2>>"$log"; then
        TAIL=6 run reg-bench-thp 180 "$B/bench/reg-bench" --size-gib 4 --repeat 3 --pages 4k,thp && row "reg-bench (shmem THP)" done || row "reg-bench (shmem THP)" FAIL
        echo "$thp_before" >"$thp_file" 2>/dev/null
    else
        row "reg-bench (shmem THP)" "not run (shmem_enabled not writable)"
    fi
fi
if want populate; then
    TAIL=7 run populate-bench 120 "$B/bench/populate-bench" --size-gib 4 --repeat 3 && row populate-bench done || row populate-bench FAIL
fi
if want lease && [[ -x "$B/bench/lease-bench" ]]; then
    TAIL=8 run lease-bench 90 "$B/bench/lease-bench" --spawn "$B/gpu/cuda/lease-agent" -- --pinned-budget 1G --mapped-budget 256M && row lease-bench done || row lease-bench FAIL
fi
if want doorbell; then
    TAIL=6 run doorbell-bench 90 "$B/bench/doorbell-bench" --iters 2000 --work kernel-flag && row doorbell-bench done || row doorbell-bench FAIL
fi
if want scan; then
    TAIL=14 run scan-bench 150 "$B/bench/scan-bench" --sizes 16M,256M,2G && row scan-bench done || row scan-bench FAIL
fi
if want stage; then
    TAIL=8 run stage-bench 150 "$B/stagingd/stage-bench" --file /dev/shm/stage.bin --size 4GiB --threads 1,4,8,16 --repeat 3 && row stage-bench done || row stage-bench FAIL
fi
rm -f /dev/shm/stage.bin

# 4. the pipeline on the GPU: make demo's script with the CUDA agent and a 4 GiB store
if want pipeline; then
    section "pipeline: scripts/demo.sh with a 4 GiB store in /dev/shm"
    DEMO_DATA=/dev/shm/demo-data DEMO_SIZE=${PROOF_STORE:-4GiB} timeout 240 scripts/demo.sh "$B" \
        >"$out/demo.txt" 2>&1
    demo_rc=$?
    cat "$out/demo.txt" >>"$log"
    sed -n '/== Summary/,$p' "$out/demo.txt" | sed 's/\x1b\[[0-9;]*m//g'
    grep -h "2 MiB pages" "$out/demo.txt" | head -2
    row "pipeline (demo.sh, GPU)" "$([[ $demo_rc -eq 0 ]] && echo PASS || echo "FAIL (rc $demo_rc)")"
    rm -rf /dev/shm/demo-data
fi

# 5. the peer benchmark: its own part, never in the default set (it alone takes minutes)
if want peers; then
    section "peers: scripts/device-peers.sh $B ${PROOF_PEERS_ARGS:-}"
    read -r -a peers_args <<<"${PROOF_PEERS_ARGS:-}"
    OUT="$out" PEERS_BUDGET_S=${PEERS_BUDGET_S:-420} timeout 560 scripts/device-peers.sh "$B" \
        "${peers_args[@]}" >"$out/peers.txt" 2>&1
    peers_rc=$?
    cat "$out/peers.txt" >>"$log"
    # the table (printed last) and where the files went
    sed -n '/^path /,$p' "$out/peers.txt"
    grep -h "done in" "$out/peers.txt" | tail -n 1
    peers_what="$([[ $peers_rc -eq 0 ]] && echo PASS || echo "FAIL (rc $peers_rc)")"
    [[ -f $out/peers.png ]] && peers_what+=", chart peers.png" || peers_what+=", no chart"
    row "peer benchmark" "$peers_what"
    verdict=$(grep -m1 '^ours verified (.*KvikIO' "$out/peers.txt")
    [[ -n $verdict ]] && row "peers: ours verified vs KvikIO" "${verdict:0:110}"
    verdict=$(grep -m1 '^ours (.*KvikIO' "$out/peers.txt")
    [[ -n $verdict ]] && row "peers: ours vs KvikIO" "${verdict:0:90}"
fi

section "summary"
printf '%s\n' "${rows[@]}" | tee -a "$log"
