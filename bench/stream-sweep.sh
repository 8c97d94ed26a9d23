#!/usr/bin/env bash
# Two settings of the streaming path that docs/streaming.md leaves to the
# device, swept on one page-cache-hot store in one run (needs a GPU):
#
#   bench/stream-sweep.sh BUILD_DIR [--store DIR] [--size SIZE] [--repeat N]
#
#   1. how many CUDA streams the agent's rings need: `lease-agent
#      --ring-streams N` for N in 0 (a stream per ring) 1 2 4 8, each with
#      `stagingd job --op verify --path stream`;
#   2. where the CPU re-check should run: `--cpu-verify` with
#      --cpu-verify-threads 0 (each staging thread, per chunk while it is
#      in cache) 2 4 8, against the same job without --cpu-verify.
# Each row: the median end-to-end GB/s of --repeat runs (default 3), and the
# job's "cpu check" rate where it prints one. The store (default
# /dev/shm/peers-store, the peer benchmark's; made with `stagingd gen` of
# SIZE, default 8GiB, when absent) is reused. Logs go to $OUT or a
# temporary folder.
set -uo pipefail
build=${1:?usage: stream-sweep.sh BUILD_DIR [--store DIR] [--size SIZE] [--repeat N]}
shift
store=/dev/shm/peers-store size=8GiB repeat=3
while (($#)); do
    case $1 in
    --store) store=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    *) echo "stream-sweep: expected --store, --size or --repeat, found '$1'" >&2; exit 2 ;;
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
# job LABEL ARGS...: the median end-to-end GB/s of the repeats, the CPU check's too
job() {
    local label=$1 e2e=() chk=() r line
    shift
    for ((r = 0; r < repeat; r++)); do
        line=$("$stagingd" job --store "$store" --agent "$work/agent/a.sock" "$@" 2>>"$log" | tee -a "$log")
        [[ $? -eq 0 ]] || { rows+=("$(printf '%-44s %s' "$label" FAILED)"); return; }
        e2e+=("$(sed -n 's/^ *end to end *\([0-9.]*\) GB\/s.*/\1/p' <<<"$line")")
        chk+=("$(sed -n 's/^ *cpu check *\([0-9.]*\) GB\/s.*/\1/p' <<<"$line")")
    done
    med() { printf '%s\n' "$@" | grep . | sort -n | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print "-"}'; }
    rows+=("$(printf '%-44s %8s %10s' "$label" "$(med "${e2e[@]}")" "$(med "${chk[@]}")")")
}

for n in 0 1 2 4 8; do
    agent_start --backend cuda --ring-streams "$n"
    job "verify, stream, agent --ring-streams $n" --op verify --path stream
done
agent_start --backend cuda
job "verify, stream, no CPU check" --op verify --path stream
for t in 0 2 4 8; do
    job "verify, stream, --cpu-verify-threads $t" --op verify --path stream --cpu-verify --cpu-verify-threads "$t"
done

printf '\n%-44s %8s %10s\n' "stream-sweep ($repeat runs each, median)" "GB/s" "cpu check"
printf '%s\n' "${rows[@]}"
