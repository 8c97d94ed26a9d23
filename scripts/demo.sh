#!/usr/bin/env bash
# make demo: build output in $1 (default build). Runs the real pipeline end
# to end on this machine -- shard store -> io_uring staging -> leases -> GPU
# agent (CUDA, or the host backend where no GPU is usable) -> results -- and
# prints a summary table last.
#
#   DEMO_DATA (demo-data)  DEMO_SIZE (512MiB)  DEMO_SEED (42)
set -uo pipefail
build=${1:-build}
data=${DEMO_DATA:-demo-data}
size=${DEMO_SIZE:-512MiB}
seed=${DEMO_SEED:-42}
rows=()

if [[ -t 1 ]]; then bold=$'\033[1m' loud=$'\033[1;33m' off=$'\033[0m'; else bold= loud= off=; fi
step() { printf '\n%s== %s%s\n' "$bold" "$*" "$off"; }
record() { rows+=("$(printf '%-40s %s' "$1" "$2")"); }
loud() { printf '%s!! %s%s\n' "$loud" "$*" "$off"; }

stagingd=$build/stagingd/stagingd
linkcheck=$build/tools/linkcheck/linkcheck
agent_cuda=$build/gpu/cuda/lease-agent
agent_host=$build/gpu/server/lease-agent-host
gate=$build/tests/gpu_gate

run=$(mktemp -d /tmp/lease-demo-XXXXXX)
agent_pid=
stop_agent() {
    [[ -n $agent_pid ]] || return 0
    kill -TERM "$agent_pid" 2>/dev/null
    local st=0
    wait "$agent_pid" || st=$?
    agent_pid=
    return "$st"
}
trap 'stop_agent; rm -rf "$run"' EXIT

step "1/5 The CUDA boundary: linkcheck on the built stagingd, its start-up self check"
if "$linkcheck" "$stagingd"; then record "linkcheck stagingd" "PASS"; else record "linkcheck stagingd" "FAIL"; fi
echo "stagingd needs: $(readelf -d "$stagingd" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | tr '\n' ' ')"
if "$stagingd" --self-check; then record "stagingd start-up self check" "PASS"; else record "stagingd start-up self check" "FAIL"; fi

# How much the agent may pin decides how the data is cut. The host agent
# holds its budgets to RLIMIT_MEMLOCK even as root; raise the soft limit as
# far as this shell may.
ulimit -S -l unlimited 2>/dev/null || ulimit -S -l "$(ulimit -H -l)" 2>/dev/null
lock=$(ulimit -l)
if [[ $lock == unlimited ]] || ((lock >= 1048576)); then
    shard=64MiB inflight=4 budgets=() stream=()
    [[ $lock == unlimited ]] && shown=unlimited || shown="$((lock / 1024)) MiB"
    echo "locked-memory limit: $shown: 64 MiB shards, 4 in flight"
else
    lock_mib=$((lock / 1024))
    pinned_mib=$((lock_mib - 2))
    ((pinned_mib > 64)) && pinned_mib=64
    inflight=$((pinned_mib / 2))
    ((inflight > 8)) && inflight=8
    shard=1MiB budgets=(--pinned-budget "${pinned_mib}M" --mapped-budget 2M)
    # The streaming rings (one per staging thread) must fit the same budget.
    stream=(--chunk-size 256K --ring-slots 4)
    loud "RLIMIT_MEMLOCK here is ${lock_mib} MiB and cannot be raised: the agent may pin only"
    loud "${pinned_mib} MiB of shard buffers (+2 MiB of doorbell words). The demo cuts its data into"
    loud "1 MiB shards and keeps ${inflight} in flight (2 MiB pool segments). Raise the limit"
    loud "(ulimit -l unlimited, or LimitMEMLOCK=infinity under systemd) for 64 MiB shards."
    if ((inflight < 1)); then
        loud "Too little to run even one shard: the pipeline steps are skipped."
        inflight=0
    fi
fi

step "2/5 Demo data: a synthetic shard store of $size (seed $seed, $shard shards) in $data/"
params="stagingd-demo size=$size seed=$seed shard=$shard dim=128"
stamp="$data/DEMO-PARAMS"
if [[ -f $stamp && -f $data/MANIFEST ]] &&
    [[ "$(head -n1 "$stamp")" == "$params" ]] &&
    [[ "$(sed -n 2p "$stamp")" == "$(sha256sum < "$data/MANIFEST")" ]]; then
    echo "reusing $data/: it was generated with the same size, seed and shard size and its"
    echo "MANIFEST is unchanged ($(grep -vc '^#\|^stagingd-store' "$data/MANIFEST") shards)"
    record "demo data $size" "PASS (reused)"
else
    progress=()
    [[ -t 2 ]] && progress=(--progress)
    if "$stagingd" gen --out "$data" --size "$size" --shard-size "$shard" --seed "$seed" \
        --force "${progress[@]}"; then
        printf '%s\n%s\n' "$params" "$(sha256sum < "$data/MANIFEST")" > "$stamp"
        record "demo data $size" "PASS (generated)"
    else
        record "demo data $size" "FAIL"
        inflight=0
    fi
fi

step "3/5 The GPU agent"
sock=$run/agent/agent.sock
mkfifo "$run/ready"
backend=
# start_agent BACKEND: starts that agent in the background; 0 once it is ready.
start_agent() {
    local bin=$agent_host args=()
    [[ $1 == cuda ]] && bin=$agent_cuda args=(--backend cuda)
    "$bin" "${args[@]}" --socket "$sock" --ready-fd 3 "${budgets[@]}" \
        3> "$run/ready" 2> "$run/agent.log" &
    agent_pid=$!
    local ready
    read -r -t 20 ready < "$run/ready" && [[ $ready == ready* ]]
}
if ((inflight == 0)); then
    echo "skipped (see above)"
elif [[ ! -x $agent_cuda ]]; then
    why="lease-agent was not built (no CUDA toolkit at configure time)"
elif unfound=$(ldd "$agent_cuda" 2>&1 | sed -n 's/^[[:space:]]*\([^ ]*\) => not found$/\1/p') &&
    [[ -n $unfound ]]; then
    # Run, it would die in the loader: no NVIDIA driver installed here.
    why="lease-agent cannot be loaded here: no $(echo $unfound) on this machine (the NVIDIA driver's)"
elif ! why=$("$gate" /bin/true 2>&1); then
    why=${why#SKIP /bin/true: }
    why=${why:-no usable GPU}
else
    backend=cuda
fi
if ((inflight > 0)); then
    if [[ $backend == cuda ]]; then
        echo "A GPU is usable: starting the CUDA agent ($agent_cuda --backend cuda)"
        if ! start_agent cuda; then
            sed 's/^/  agent: /' "$run/agent.log"
            stop_agent || true
            record "agent (cuda backend)" "FAIL (did not start; the host backend ran instead)"
            why="lease-agent did not start with the CUDA backend (its log is above)"
            backend=
        fi
    fi
    if [[ $backend != cuda ]]; then
        backend=host
        loud "NO GPU IN USE: $why"
        loud "Starting lease-agent-host: the HOST BACKEND. mlock stands in for cuMemHostRegister,"
        loud "the kernels' C references run on CPU threads, doorbells are polled. Every byte still"
        loud "goes through stagingd's staging, leases, doorbells and releases."
        start_agent host
    fi
    st=$?
    sed 's/^/  agent: /' "$run/agent.log"
    if ((st == 0)); then
        echo "agent ready on $sock (pid $agent_pid)"
        record "agent ($backend backend)" "PASS"
    else
        stop_agent || true
        record "agent ($backend backend)" "FAIL (did not start)"
        inflight=0
    fi
fi

# job NAME OP ARGS...: runs `stagingd job`, showing its log (progress) and
# then its report; records a summary row.
job() {
    local name=$1 op=$2
    shift 2
    local out=$run/$name.out st=0
    "$stagingd" job --store "$data" --agent "$sock" --op "$op" --inflight "$inflight" \
        "${stream[@]}" "$@" > "$out" || st=$?
    sed 's/^/  /' "$out"
    local shards e2e gpu cpu path
    shards=$(sed -n 's/^  shards *\([0-9]* of [0-9]*\) done: \([0-9]*\) clean.*/\1 done, \2 clean/p' "$out")
    e2e=$(sed -n 's/^  end to end *\([0-9.]* GB\/s\).*/\1/p' "$out")
    # The streaming path's own figure, and the CPU re-check's apart from it.
    gpu=$(sed -n 's/^  gpu path *\([0-9.]* GB\/s\).*/\1/p' "$out")
    cpu=$(sed -n 's/^  cpu check *\([0-9.]* GB\/s\).*/\1/p' "$out")
    path=$(sed -n 's/^job [0-9]*: .*, path \([a-z]*\).*/\1/p' "$out")
    e2e="$e2e end to end${path:+, path $path}${gpu:+, GPU path $gpu}${cpu:+, CPU check $cpu}"
    if ((st == 0)); then
        record "stagingd job: $name" "PASS ($shards; $e2e)"
    else
        record "stagingd job: $name" "FAIL (exit $st: $shards)"
    fi
}

step "4/5 stagingd jobs: stream every shard through rings of pinned slots (or stage it whole), work on the agent"
if ((inflight > 0)); then
    echo "-- verify every block checksum on the agent (and again on the CPU: --cpu-verify)"
    job verify verify --cpu-verify
    echo
    echo "-- vector scan: each shard's top-10 for a query, merged into the global top-10"
    job scan scan --k 10 --query-seed 7
    best=$(sed -n 's/^  #1 *\(shard-[0-9]*\.sds\) *\([0-9]*\) *\([-0-9.e+]*\)$/\1 record \2, score \3/p' "$run/scan.out")
    [[ -n $best ]] && record "best match of the scan" "$best"
    # The peers are not run here (KvikIO, PyTorch: bench/peers/); a device run's recorded
    # verdict, when one was committed beside the chart, is shown as recorded, not as measured now.
    peers_json=bench/peers/peers.json
    if [[ $backend != host && -f $peers_json ]] && command -v python3 >/dev/null; then
        # The verify row's verdict, then its ratio to each row a goal names (report.py).
        while IFS= read -r verdict; do
            [[ -n $verdict ]] && record "peers (recorded in $peers_json)" "$verdict"
        done < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); v=d.get("verdicts", []); print("\n".join([x for x in v if x.startswith("ours verified")][:2] or [next((x for x in v if "KvikIO" in x), "")]))' "$peers_json" 2>/dev/null)
    elif [[ $backend != host ]]; then
        echo "-- against the peers (KvikIO, PyTorch): scripts/device-peers.sh (bench/peers/README.md)"
    fi
else
    echo "skipped (see above)"
fi

step "5/5 Stop the agent (SIGTERM: it drains, unregisters and removes its socket)"
if [[ -n $agent_pid ]]; then
    if stop_agent; then record "agent stopped cleanly" "PASS"; else record "agent stopped cleanly" "FAIL"; fi
    tail -n 3 "$run/agent.log" | sed 's/^/  agent: /'
else
    echo "no agent was running"
fi

step "Summary"
[[ $backend == host ]] && echo "(host backend: no GPU was used; see step 3)"
printf '%s\n' "${rows[@]}"
! printf '%s\n' "${rows[@]}" | grep -q ' FAIL'
