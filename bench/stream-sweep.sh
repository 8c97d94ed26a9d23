#!/usr/bin/env bash
# Two settings of the streaming path that docs/streaming.md leaves to the
# device, swept on one page-cache-hot store in one run (needs a GPU):
#
#   bench/stream-sweep.sh BUILD_DIR [--store DIR] [--size SIZE] [--repeat N]
#                         [--parts "streams cpu shape"]   (default: streams cpu)
#
#   1. how many CUDA streams the agent's rings need: `lease-agent
#      --ring-streams N` for N in 0 (a stream per ring) 1 2 4 8, each with
#      `stagingd job --op verify --path stream`;
#   2. where the CPU re-check should run: `--cpu-verify` with
#      --cpu-verify-threads 0 (each staging thread, per chunk while it is
#      in cache) 2 4 8, against the same job without --cpu-verify;
#   3. the ring's shape (--parts shape): staging threads (one ring each),
#      slots per ring, chunk size, ring depth and pool pages, one at a time
#      around the defaults, with the job's slot waits and sleeps per chunk
#      (many waits: the GPU side is behind; none: the reads are) and the
#      agent's CPU seconds per GB.
# Each row: the median end-to-end GB/s of --repeat runs (default 3), and the
# job's "cpu check" rate where it prints one. The store (default
# /dev/shm/peers-store, the peer benchmark's; made with `stagingd gen` of
# SIZE, default 8GiB, when absent) is reused. Logs go to $OUT or a
# temporary folder.
set -uo pipefail
build=${1:?usage: stream-sweep.sh BUILD_DIR [--store DIR] [--size SIZE] [--repeat N]}
shift
store=/dev/shm/peers-store size=8GiB repeat=3 parts="streams cpu"
while (($#)); do
    case $1 in
    --store) store=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --parts) parts=$2; shift 2 ;;
    *) echo "stream-sweep: expected --store, --size, --repeat or --parts, found '$1'" >&2; exit 2 ;;
    esac
done
find_bin() { find "$build" -type f -name "$1" -perm -u+x | sort | head -n 1; }
stagingd=$(find_bin stagingd) agent=$(find_bin lease-agent)
[[ -x $stagingd && -x $agent ]] || { echo "stream-sweep: no stagingd or lease-agent under $build" >&2; exit 2; }
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
work=$(mktemp -d)
mkdir -m 700 "$work/agent"
apid=
trap 'kill "$apid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
log=$out/stream-sweep.log
: >"$log"

if [[ ! -f $store/MANIFEST ]]; then
    echo "stream-sweep: making a $size store in $store" | tee -a "$log"
    "$stagingd" gen --out "$store" --size "$size" >>"$log" 2>&1 || { echo "stream-sweep: gen failed (see $log)" >&2; exit 1; }
fi

agent_start() {
    kill "$apid" 2>/dev/null
    wait "$apid" 2>/dev/null
    rm -f "$work/ready"
    mkfifo "$work/ready"
    "$agent" "$@" --socket "$work/agent/a.sock" --ready-fd 3 3>"$work/ready" 2>>"$log" &
    apid=$!
    local ready
    read -r -t 30 ready <"$work/ready" && [[ $ready == ready* ]] ||
        { echo "stream-sweep: the agent ($*) did not start (see $log)" >&2; exit 1; }
}

rows=()
# The agent's CPU seconds so far (utime + stime of /proc/PID/stat).
agent_cpu() { awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$apid/stat" 2>/dev/null || echo 0; }
med() { printf '%s\n' "$@" | grep . | sort -n | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print "-"}'; }
# job LABEL ARGS...: the median end-to-end GB/s of the repeats, the CPU
# check's, and (streamed jobs) slot waits and sleeps per chunk and the
# agent's CPU seconds per GB
job() {
    local label=$1 e2e=() chk=() wpc=() spc=() acpu=() r line c0 c1
    shift
    for ((r = 0; r < repeat; r++)); do
        c0=$(agent_cpu)
        line=$("$stagingd" job --store "$store" --agent "$work/agent/a.sock" "$@" 2>>"$log")
        local rc=$?
        printf '%s\n' "$line" >>"$log"
        ((rc == 0)) || { rows+=("$(printf '%-44s %s (exit %d)' "$label" FAILED "$rc")"); return; }
        c1=$(agent_cpu)
        e2e+=("$(sed -n 's/^ *end to end *\([0-9.]*\) GB\/s.*/\1/p' <<<"$line")")
        chk+=("$(sed -n 's/^ *cpu check *\([0-9.]*\) GB\/s.*/\1/p' <<<"$line")")
        local st
        st=$(sed -n 's/^ *streaming .* \([0-9]*\) chunk(s) stored.*; \([0-9]*\) slot wait(s), \([0-9]*\) sleep(s).*/\1 \2 \3/p' <<<"$line")
        if [[ -n $st ]]; then
            read -r nc nw ns <<<"$st"
            wpc+=("$(awk -v w="$nw" -v c="$nc" 'BEGIN {printf "%.2f", c ? w / c : 0}')")
            spc+=("$(awk -v s="$ns" -v c="$nc" 'BEGIN {printf "%.2f", c ? s / c : 0}')")
        fi
        local gb
        gb=$(sed -n 's/^ *bytes *\([0-9]*\).*/\1/p' <<<"$line" | head -n 1)
        acpu+=("$(awk -v a="$c0" -v b="$c1" -v g="${gb:-0}" 'BEGIN {printf "%.3f", g ? (b - a) / (g / 1e9) : 0}')")
    done
    rows+=("$(printf '%-44s %8s %10s %8s %8s %9s' "$label" "$(med "${e2e[@]}")" "$(med "${chk[@]}")" \
        "$(med "${wpc[@]}")" "$(med "${spc[@]}")" "$(med "${acpu[@]}")")")
}

want() { [[ " $parts " == *" $1 "* ]]; }
if want streams; then
    for n in 0 1 2 4 8; do
        agent_start --backend "${SWEEP_BACKEND:-cuda}" --ring-streams "$n"
        job "verify, stream, agent --ring-streams $n" --op verify --path stream
    done
fi
agent_start --backend "${SWEEP_BACKEND:-cuda}"
if want cpu; then
    job "verify, stream, no CPU check" --op verify --path stream
    for t in 0 2 4 8; do
        job "verify, stream, --cpu-verify-threads $t" --op verify --path stream --cpu-verify --cpu-verify-threads "$t"
    done
fi
if want shape; then
    # One setting at a time around the defaults (16 threads, 4 x 2 MiB
    # slots, depth 2, pages auto).
    T=${SWEEP_THREADS:-16}
    job "shape defaults (threads $T)" --op verify --path stream --threads "$T"
    job "shape defaults, scan" --op scan --path stream --threads "$T"
    for t in 4 8 12 14; do job "shape --threads $t" --op verify --path stream --threads "$t"; done
    for n in 2 3 6 8 16; do job "shape --ring-slots $n" --op verify --path stream --threads "$T" --ring-slots "$n"; done
    for c in 512KiB 1MiB 4MiB; do job "shape --chunk-size $c" --op verify --path stream --threads "$T" --chunk-size "$c"; done
    job "shape --chunk-size 1MiB --ring-slots 8" --op verify --path stream --threads "$T" --chunk-size 1MiB --ring-slots 8
    job "shape --chunk-size 512KiB --ring-slots 16" --op verify --path stream --threads "$T" --chunk-size 512KiB --ring-slots 16
    for d in 1 4; do job "shape --ring-depth $d" --op verify --path stream --threads "$T" --ring-depth "$d"; done
    for p in small huge thp; do job "shape --pages $p" --op verify --path stream --threads "$T" --pages "$p"; done
fi

printf '\n%-44s %8s %10s %8s %8s %9s\n' "stream-sweep ($repeat runs each, median)" "GB/s" "cpu check" \
    "waits/ch" "sleeps/ch" "agentCPU/GB"
printf '%s\n' "${rows[@]}"
