#!/usr/bin/env bash
# The peer benchmark in one command, for the lent H200 machine (bench/peers/README.md):
#
#   scripts/device-peers.sh BUILD_DIR [--store DIR] [--gib 8] [--quick] [--repeat N]
#                                     [--dry-run] [--self-test]
#
# On the same page-cache-hot files (a stagingd store of 64 MiB shards in /dev/shm, made once with
# `stagingd gen`), each path in its own process: ours (`stagingd job` against the CUDA agent:
# the rows of OURS below), KvikIO in compat mode (its defaults and threads {8,16,32} x tasks
# {1,4,8,16} MiB, all files at once and file by file), PyTorch's two paths, the naive path and
# the ceilings (bench/peers/ceilings.c). Every path's bytes on the GPU are checked. Then the
# table (GB/s, ratio to ours, CPU-s/GB, checked) and $OUT/peers.json, $OUT/peers.png, and every
# path's log in $OUT/peers.log (a few files only: the device returns at most 8).
#
#   BUILD_DIR    the carried build folder (make device-build): stagingd, lease-agent, peers-ceilings
#   --store DIR  where the store lives (default /dev/shm/peers-store; reused when it matches)
#   --gib N      store size in GiB (default 8; --quick: 2)
#   --quick      2 GiB, one run per path, KvikIO's six main configurations only
#   --repeat N   timed runs per path, best reported (default 2)
#   --dry-run    print every step and command; run nothing
#   --self-test  on a machine without a GPU: a 32 MiB store of 1 MiB shards in /tmp, the host
#                agent, bench/peers/fakes for cupy, torch and KvikIO, peers-ceilings against the
#                fake CUDA driver when the build has one (tests/fakecuda), else those rows skipped
#
# KvikIO comes from wheels in .whl/ (bench/peers/fetch-wheels.sh, run where pip works); carry
# .whl and the build folder. Paths run most important first, and once PEERS_BUDGET_S (default
# 330) seconds have passed the rest are recorded as not run, so the whole run stays in bounds.
# The store is read until its read rate settles; then the main paths (PEERS_ROUND2) run a
# second round at the end, and each keeps its faster round.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
repo=$(pwd)

# ---- ours: id | label | what `stagingd job --help` must offer (an ERE, or -) | job arguments.
# Most important first (the budget may cut the tail). Streaming (docs/streaming.md): one ring
# of --ring-slots slots of --chunk-size bytes per staging thread; the default chunk is 2 MiB,
# swept here over 1, 4 and 8 MiB for verify. Whole shards at inflight 4 and 16 (issue #10
# item 3). Rows whose option this tree's stagingd lacks are listed as not built.
OURS=(
    "ours-stream-verify|ours: verify, streaming (2 MiB chunks)|--path.*stream|--op verify --path stream"
    "ours-stream-scan|ours: scan, streaming (2 MiB chunks)|--path.*stream|--op scan --path stream"
    "ours-stream-verify-t16|ours: verify, streaming, 16 threads x 3 slots (the old default)|--ring-slots|--op verify --path stream --threads 16 --ring-slots 3"
    "ours-stream-scan-t16|ours: scan, streaming, 16 threads x 3 slots (the old default)|--ring-slots|--op scan --path stream --threads 16 --ring-slots 3"
    "ours-verify|ours: verify, whole-shard, inflight 4|--path|--op verify --path whole --inflight 4"
    "ours-scan|ours: scan, whole-shard, inflight 4|--path|--op scan --path whole --inflight 4"
    "ours-verify-if16|ours: verify, whole-shard, inflight 16|--path|--op verify --path whole --inflight 16"
    "ours-stream-verify-1m|ours: verify, streaming, 1 MiB chunks|--chunk-size|--op verify --path stream --chunk-size 1M"
    "ours-stream-verify-4m|ours: verify, streaming, 4 MiB chunks|--chunk-size|--op verify --path stream --chunk-size 4M"
    "ours-stream-verify-8m|ours: verify, streaming, 8 MiB chunks|--chunk-size|--op verify --path stream --chunk-size 8M"
    "ours-scan-if16|ours: scan, whole-shard, inflight 16|--path|--op scan --path whole --inflight 16"
    "ours-stream-verify-cpu|ours: verify, streaming, --cpu-verify (check threads)|--cpu-verify-threads|--op verify --path stream --cpu-verify"
)
# The main paths, run a second time at the end (step 4); PEERS_ROUND2="" for none.
ROUND2=${PEERS_ROUND2-ours-stream-scan ours-stream-verify ours-stream-scan-t16 ours-stream-verify-t16 kv-t16-4M-all kv-t32-4M-all torch-bounce ceil-h2d}
# PEERS_AGENT_ARGS adds agent options (e.g. "--ring-streams 4": rings sharing 4 CUDA streams).
read -r -a AGENT_EXTRA <<<"${PEERS_AGENT_ARGS:-}"
AGENT_ARGS=(--backend cuda "${AGENT_EXTRA[@]}")

usage() { sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; }
build=
store=
gib=
quick=0
repeat=
dry=0
selftest=0
while (($#)); do
    case $1 in
    --store) store=$2; shift 2 ;;
    --gib) gib=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --repeat) repeat=$2; shift 2 ;;
    --dry-run) dry=1; shift ;;
    --self-test) selftest=1; shift ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "device-peers: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) [[ -z $build ]] && build=$1 || { echo "device-peers: one BUILD_DIR only" >&2; exit 2; }; shift ;;
    esac
done
[[ -n $build ]] || { usage >&2; exit 2; }
[[ -d $build ]] || { echo "device-peers: $build is not a build folder" >&2; exit 2; }
build=$(cd "$build" && pwd)

py=${PEERS_PYTHON:-python3}
export PYTHONDONTWRITEBYTECODE=1 # nothing left in the source tree
peers=$repo/bench/peers
t_start=$(date +%s)
budget=${PEERS_BUDGET_S:-330}
if ((dry)); then
    out=${OUT:-OUT} work=/tmp/peers-run-DRY
else
    out=${OUT:-$(mktemp -d /tmp/peers-out-XXXXXX)}
    work=$(mktemp -d /tmp/peers-run-XXXXXX)
    mkdir -p "$out" "$work/logs"
fi
logs=$work/logs
results=$work/results.jsonl
((dry)) || : >"$results"

if ((selftest)); then
    store=${store:-/tmp/peers-selftest-store}
    size=32MiB shard=1MiB
    repeat=${repeat:-2}
    # 6 MiB of PINNED budget: rings of 4 x 256 KiB on 2 threads, whole shards 3 at a time
    ours_extra=(--inflight 3 --threads 2 --chunk-size 256K --ring-slots 4)
    agent_budget=(--pinned-budget 6M --mapped-budget 2M)
    torch_extra=(--bounce 256K)
    ceil_h2d=64M ceil_h2d_label="64 MiB"
else
    store=${store:-/dev/shm/peers-store}
    ((quick)) && gib=${gib:-2}
    gib=${gib:-8}
    size=${gib}GiB shard=64MiB
    ((quick)) && repeat=${repeat:-1}
    repeat=${repeat:-2}
    ours_extra=()
    agent_budget=()
    torch_extra=()
    ceil_h2d=1G ceil_h2d_label="1 GiB"
fi

say() { printf '[%s +%3ds] %s\n' "$(date +%H:%M:%S)" "$(($(date +%s) - t_start))" "$*"; }
find_bin() { find "$build" -type f -name "$1" -perm -u+x 2>/dev/null | sort | head -n 1; }

# ---- what runs, most important first: id | timeout s | group | label | command (run by bash -c)
# The store, its checksums, the agent and the report are steps of their own below.
row() { # id timeout group label words...
    local id=$1 limit=$2 group=$3 label=$4
    shift 4
    printf '%s|%s|%s|%s|%s' "$id" "$limit" "$group" "$label" "$(printf '%q ' "$@" --id "$id" --label "$label" --json "$results")"
}
kv_row() { # threads task mode
    local how id label
    [[ $3 == all ]] && how="all files at once" || how="file by file"
    if [[ $1 == default ]]; then
        id=kv-default-$3 label="KvikIO compat, defaults (1 thread, 4 MiB tasks), $how"
        row "$id" 90 kvikio "$label" "$py" "$peers/kvikio_bench.py" --store "$store" --repeat "$repeat" --mode "$3"
    else
        id=kv-t$1-$2M-$3 label="KvikIO compat, $1 threads, $2 MiB tasks, $how"
        row "$id" 90 kvikio "$label" "$py" "$peers/kvikio_bench.py" --store "$store" --repeat "$repeat" --mode "$3" \
            --threads "$1" --task-size "$2M"
    fi
}
ceil=$(find_bin peers-ceilings)
plan=()
main_kv=("16 4 all" "16 16 all" "16 4 file" "16 16 file" "default - all" "default - file")
for c in "${main_kv[@]}"; do plan+=("$(kv_row $c)"); done
plan+=("$(row torch-bounce 120 torch "PyTorch, 16 threads each double-buffering a 64 MiB pinned bounce" \
    "$py" "$peers/torch_bench.py" --store "$store" --repeat "$repeat" --path bounce --threads 16 "${torch_extra[@]}")")
plan+=("$(row torch-from-file 120 torch "PyTorch, from_file().pin_memory().cuda(non_blocking) per file" \
    "$py" "$peers/torch_bench.py" --store "$store" --repeat "$repeat" --path from_file)")
plan+=("$(row naive 120 naive "naive: pread into malloc memory, cuMemcpyHtoD, per file" \
    "${ceil:-peers-ceilings}" naive --store "$store" --repeat "$repeat" --threads 8)")
plan+=("$(row ceil-h2d 60 ceiling "ceiling: pinned H2D copy, $ceil_h2d_label" "${ceil:-peers-ceilings}" h2d --size "$ceil_h2d" --repeat 5)")
for b in 1 4; do
    plan+=("$(row ceil-pread-reused-${b}M 60 ceiling "ceiling: 16 threads pread into reused $b MiB buffers" \
        "${ceil:-peers-ceilings}" pread-reused --store "$store" --threads 16 --buf ${b}M --repeat 3)")
done
plan+=("$(row ceil-pread-fresh 90 ceiling "ceiling: 16 threads pread into fresh store-sized memory" \
    "${ceil:-peers-ceilings}" pread-fresh --store "$store" --threads 16 --buf 4M --repeat 3)")
if ((!quick)); then
    for t in 8 16 32; do
        for ts in 1 4 8 16; do
            for mode in all file; do
                [[ " ${main_kv[*]} " == *" $t $ts $mode "* ]] && continue
                plan+=("$(kv_row $t $ts $mode)")
            done
        done
    done
fi

# ---- the steps
cleanup() {
    stop_agent
    [[ -n ${huge_before:-} ]] && echo "$huge_before" >"$huge_sysfs/nr_hugepages" 2>/dev/null
    ((dry)) || rm -rf "$work"
}
agent_pid=
stop_agent() {
    [[ -n $agent_pid ]] || return 0
    kill -TERM "$agent_pid" 2>/dev/null
    wait "$agent_pid" 2>/dev/null
    agent_pid=
}
trap cleanup EXIT

stagingd=$(find_bin stagingd)
if ((selftest)); then agent=$(find_bin lease-agent-host); else agent=$(find_bin lease-agent); fi
say "peer benchmark: build $build, store $store ($size in $shard shards), $repeat run(s) per path$( ((selftest)) && echo ', SELF-TEST (no GPU: fakes)')"
say "stagingd: ${stagingd:-NOT FOUND}; agent: ${agent:-NOT FOUND}; peers-ceilings: ${ceil:-NOT FOUND}; python: $py"
if ((dry)); then
    say "dry run: the store: $stagingd gen --out $store --size $size --shard-size $shard --seed 42 --force"
    say "dry run: checksums: $py $peers/peerlib.py sums $store"
    for o in "${OURS[@]}"; do
        IFS='|' read -r id label needs args <<<"$o"
        say "dry run: $id: $py $peers/ours_bench.py --stagingd $stagingd --agent SOCK --agent-pid PID --store $store --id $id --label '$label' --repeat $repeat -- $args ${ours_extra[*]} (needs: $needs)"
    done
    n=0
    for p in "${plan[@]}"; do
        n=$((n + 1))
        IFS='|' read -r id limit group label cmd <<<"$p"
        say "dry run: [$n/${#plan[@]}] $id ($group, ${limit} s at most): $cmd"
    done
    say "dry run: second round, the same commands: $ROUND2"
    say "dry run: report: $py $peers/report.py RESULTS --out-json $out/peers.json --png $out/peers.png"
    exit 0
fi
[[ -x $stagingd ]] || { echo "device-peers: no stagingd under $build" >&2; exit 1; }

if ((selftest)); then
    # PEERS_FAKES_LAST=1: a real package found earlier on PYTHONPATH (KvikIO, say) wins over its fake
    if [[ ${PEERS_FAKES_LAST:-0} == 1 ]]; then
        export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$peers/fakes
    else
        export PYTHONPATH=$peers/fakes${PYTHONPATH:+:$PYTHONPATH}
    fi
    fk=${PEERS_FAKECUDA_DIR:-$(dirname "$(find "$build" -path '*fakecuda*' -name libcuda.so.1 2>/dev/null | head -n 1)")}
    if [[ -n $ceil && -e $fk/libcuda.so.1 ]]; then
        say "self-test: peers-ceilings against the fake CUDA driver in $fk"
        export LD_LIBRARY_PATH=$fk${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    else
        say "self-test: no fake CUDA driver (tests/fakecuda) in this build: the C rows are skipped"
        ceil=
    fi
else
    nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader 2>&1 | sed 's/^/  gpu: /'
    # KvikIO's wheels, carried (the device has no registry); numpy, cupy and torch are there.
    if compgen -G ".whl/*.whl" >/dev/null; then
        if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/site .whl/*.whl >"$logs/pip.log" 2>&1; then
            export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
            say "wheels installed into /tmp/site: $(cd .whl && ls *.whl | tr '\n' ' ')"
        else
            say "WARNING: pip could not install .whl/*.whl (KvikIO rows will fail): $(tail -n 2 "$logs/pip.log" | tr '\n' ' ')"
        fi
    else
        say "WARNING: no .whl/ here: KvikIO rows will fail (run bench/peers/fetch-wheels.sh where pip works, carry .whl)"
    fi
    # The agent's pool takes 2 MiB pages while reserved ones are free (docs/stagingd.md).
    huge_sysfs=/sys/kernel/mm/hugepages/hugepages-2048kB
    want=${PEERS_HUGEPAGES:-1024}
    have=$(cat "$huge_sysfs/nr_hugepages" 2>/dev/null || echo 0)
    if ((have < want)) && echo "$want" >"$huge_sysfs/nr_hugepages" 2>/dev/null; then
        huge_before=$have
    fi
    say "2 MiB huge pages: $(cat "$huge_sysfs/nr_hugepages" 2>/dev/null || echo 0) reserved"
    ulimit -S -l unlimited 2>/dev/null
fi

# 1. the store, once: reused when its parameters and MANIFEST are unchanged
params="peers size=$size shard=$shard seed=42"
stamp=$store/PEERS-PARAMS
if [[ -f $stamp && -f $store/MANIFEST && "$(head -n 1 "$stamp")" == "$params" &&
    "$(sed -n 2p "$stamp")" == "$(sha256sum <"$store/MANIFEST")" ]]; then
    say "store: reusing $store ($params)"
else
    need_kib=$(($(numfmt --from=iec "${size%iB}") / 1024 + 65536))
    free_kib=$(df -Pk "$(dirname "$store")" | awk 'NR == 2 { print $4 }')
    if ((free_kib < need_kib)); then
        say "FAILED: $(dirname "$store") has $((free_kib / 1024)) MiB free, the store needs $((need_kib / 1024)) MiB"
        exit 1
    fi
    say "store: generating $size in $shard shards into $store"
    if ! "$stagingd" gen --out "$store" --size "$size" --shard-size "$shard" --seed 42 --force --quiet >"$logs/gen.log" 2>&1; then
        say "FAILED: stagingd gen: $(tail -n 3 "$logs/gen.log" | tr '\n' ' ')"
        exit 1
    fi
    printf '%s\n%s\n' "$params" "$(sha256sum <"$store/MANIFEST")" >"$stamp"
fi
if ! "$py" "$peers/peerlib.py" sums "$store" >"$logs/sums.log" 2>&1; then
    say "FAILED: the CPU checksums: $(tail -n 3 "$logs/sums.log" | tr '\n' ' ')"
    exit 1
fi
say "store: $(tail -n 1 "$logs/sums.log")"
# Every file read, 16 at a time, until two passes in a row read at rates within 5% of each other
# (at least 2 passes, at most PEERS_WARM_PASSES, default 8), before any path is timed: on the
# H200 the first read of pages written moments before ran at about half the speed of later
# ones (bench/ring-probe's first ring run, docs/streaming.md), and whichever path ran first
# would pay it alone. Each pass's rate is logged. The main paths also run a second round at
# the end (step 4), so early and late runs of them both count.
store_bytes=$(du -sb "$store" | cut -f1)
prev=0 passes=0
for ((pass = 1; pass <= ${PEERS_WARM_PASSES:-8}; pass++)); do
    passes=$pass
    t0=$EPOCHREALTIME
    find "$store" -maxdepth 1 -type f -print0 | xargs -0 -P 16 -n 8 cat >/dev/null ||
        say "warning: warming the page cache (pass $pass) failed"
    rate=$(awk -v b="$store_bytes" -v a="$t0" -v z="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b / (z - a) / 1e9 }')
    say "store: warm-up pass $pass: $rate GB/s"
    if ((pass >= 2)) && awk -v r="$rate" -v p="$prev" 'BEGIN { exit !(r > 0 && p > 0 && r / p < 1.05 && p / r < 1.05) }'; then
        break
    fi
    prev=$rate
done
say "store: page cache warmed ($passes pass(es))"

# results_of ID: how many lines the path has left (one a round)
results_of() { grep -c "\"id\": \"$1\"" "$results"; }
over_budget() { (($(date +%s) - t_start > budget)); }
# runpath ID LABEL GROUP TIMEOUT CMD (a string for eval): its output to its log; a line in the results either way
runpath() {
    local id=$1 label=$2 group=$3 limit=$4 cmd=$5 t0 rc before
    if over_budget; then
        "$py" "$peers/peerlib.py" fail --json "$results" --id "$id" --label "$label" --group "$group" \
            --error "not run: the run passed its ${budget} s budget" >/dev/null
        say "$id: not run (over the ${budget} s budget)"
        return
    fi
    t0=$(date +%s)
    before=$(results_of "$id")
    printf '$ %s\n' "$cmd" >>"$logs/$id.log"
    PYTHONUNBUFFERED=1 timeout "$limit" bash -c "$cmd" >>"$logs/$id.log" 2>&1
    rc=$?
    if (($(results_of "$id") == before)); then
        "$py" "$peers/peerlib.py" fail --json "$results" --id "$id" --label "$label" --group "$group" \
            --error "exited $rc without a result$( ((rc == 124)) && echo " (killed after ${limit} s)"); log: $(tail -n 2 "$logs/$id.log" | tr '\n' ' ' | cut -c1-200)" >/dev/null
    fi
    say "$id: $(grep "\"id\": \"$id\"" "$results" | tail -n 1 | "$py" -c '
import json, sys
r = json.loads(sys.stdin.read())
print(("%.2f GB/s, %s CPU-s/GB, checked %s" % (r["gbps"], r.get("cpu_s_per_gb"), r.get("checked"))) if r.get("ok")
      else ("SKIPPED: " if r.get("skipped") else "FAILED: ") + str(r.get("error"))[:150])') ($(($(date +%s) - t0)) s)"
}
skip_row() { # id label group why
    "$py" - "$results" "$1" "$2" "$3" "$4" <<'EOF'
import json, sys
path, i, label, group, why = sys.argv[1:]
with open(path, "a") as f:
    f.write(json.dumps({"id": i, "label": label, "group": group, "ok": False, "skipped": True, "error": why}) + "\n")
EOF
    say "$1: skipped: $4"
}

# 2. ours, against one agent
job_help=$("$stagingd" job --help 2>&1)
sock=$work/agent/agent.sock
if ((selftest)); then AGENT_ARGS=("${agent_budget[@]}"); fi
start_agent() {
    [[ -x $agent ]] || return 0
    rm -f "$work/ready"
    mkfifo "$work/ready"
    if ((selftest)); then
        "$agent" --socket "$sock" --ready-fd 3 "${agent_budget[@]}" 3>"$work/ready" 2>>"$logs/agent.log" &
    else
        "$agent" "${AGENT_ARGS[@]}" --socket "$sock" --ready-fd 3 3>"$work/ready" 2>>"$logs/agent.log" &
    fi
    agent_pid=$!
    if read -r -t 30 ready <"$work/ready" && [[ $ready == ready* ]]; then
        say "agent ready (pid $agent_pid): $(basename "$agent") ${AGENT_ARGS[*]}"
    else
        say "FAILED: the agent did not start: $(tail -n 3 "$logs/agent.log" | tr '\n' ' ')"
        kill -TERM "$agent_pid" 2>/dev/null
        agent_pid=
    fi
}
run_ours() { # one OURS entry
    local id label needs args cmd
    IFS='|' read -r id label needs args <<<"$1"
    if [[ $needs != - ]] && ! grep -Eq -- "$needs" <<<"$job_help"; then
        skip_row "$id" "$label" ours "not built in this tree (stagingd job --help offers no '$needs')"
        return
    fi
    if [[ -z $agent_pid ]]; then
        "$py" "$peers/peerlib.py" fail --json "$results" --id "$id" --label "$label" --group ours --error "no agent running" >/dev/null
        return
    fi
    cmd=$(printf '%q ' "$py" "$peers/ours_bench.py" --stagingd "$stagingd" --agent "$sock" --agent-pid "$agent_pid" \
        --store "$store" --id "$id" --label "$label" --repeat "$repeat" --json "$results" --log "$logs/$id.jobs.log" --)
    runpath "$id" "$label" ours 120 "$cmd $args ${ours_extra[*]}"
}
start_agent
for o in "${OURS[@]}"; do run_ours "$o"; done
stop_agent
say "agent stopped: $(tail -n 1 "$logs/agent.log" 2>/dev/null)"

# 3. the peers, the ceilings, the naive path
n=0
for p in "${plan[@]}"; do
    n=$((n + 1))
    IFS='|' read -r id limit group label cmd <<<"$p"
    if [[ ($group == naive || $group == ceiling) && -z $ceil ]]; then
        skip_row "$id" "$label" "$group" "peers-ceilings not built (no CUDA toolkit) or no driver to run it here"
        continue
    fi
    say "[$n/${#plan[@]}] $id"
    runpath "$id" "$label" "$group" "$limit" "$cmd"
done

# 4. a second round of the main paths, the same commands once everything else has run: on the
# H200 (2026-12-02) our first row, run seconds after the store was made and warmed, measured
# 41 GB/s and the same job 45-46 a minute later. Each of these paths then has an early and a
# late round, and report.py keeps the faster (runs pooled for the median). PEERS_ROUND2 names
# them (ids; "" for none); the budget still holds.
read -r -a round2 <<<"$ROUND2"
if ((${#round2[@]})) && ! over_budget; then
    say "second round: ${round2[*]}"
    for id in "${round2[@]}"; do
        if over_budget; then
            say "second round: $id and the rest not run (over the ${budget} s budget)"
            break
        fi
        found=
        for o in "${OURS[@]}"; do
            [[ ${o%%|*} == "$id" ]] && found=$o
        done
        if [[ -n $found ]]; then
            [[ -n $agent_pid ]] || start_agent
            run_ours "$found"
            continue
        fi
        stop_agent # the peers run without our agent, as in step 3
        for p in "${plan[@]}"; do
            IFS='|' read -r pid limit group label cmd <<<"$p"
            [[ $pid == "$id" ]] || continue
            found=1
            [[ ($group == naive || $group == ceiling) && -z $ceil ]] && continue
            runpath "$pid" "$label" "$group" "$limit" "$cmd"
        done
        [[ -n $found ]] || say "second round: no path '$id' (PEERS_ROUND2)"
    done
    stop_agent
fi

# 5. the table, the JSON, the chart
gpu=$( ((selftest)) && echo "none (self-test)" || nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
title="peers on the same page-cache-hot files: $(grep -vc '^#\|^stagingd-store' "$store/MANIFEST") files, $size, $store; $gpu"
"$py" "$peers/report.py" "$results" --out-json "$out/peers.json" --png "$out/peers.png" --title "$title" \
    --meta "gpu=$gpu" --meta "store=$store" --meta "size=$size" --meta "repeat=$repeat" \
    --meta "host=$(uname -n)" --meta "cores=$(nproc)" --meta "self_test=$selftest" >"$work/table.txt" 2>&1
report_rc=$?
{
    for f in "$logs"/*.log; do printf '\n==== %s ====\n' "$(basename "$f")"; cat "$f"; done
    printf '\n==== results.jsonl ====\n'
    cat "$results"
    printf '\n==== table ====\n'
    cat "$work/table.txt"
} >"$out/peers.log"
say "done in $(($(date +%s) - t_start)) s; logs in $out/peers.log, results in $out/peers.json$([[ -f $out/peers.png ]] && echo ", chart $out/peers.png")"
echo
cat "$work/table.txt"
exit $report_rc
