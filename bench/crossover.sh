#!/usr/bin/env bash
# Which path wins at which shard size (docs/streaming.md): streamed chunks
# through rings of pinned slots against whole shards staged and leased, on
# page-cache-hot stores of the same size in bytes and different shard
# sizes, verify and scan, one agent (needs a GPU):
#
#   bench/crossover.sh BUILD_DIR [--shards "1MiB 4MiB 16MiB 64MiB"] [--size 4GiB]
#                                [--repeat 3] [--dir /dev/shm]
#
# Each row: a shard size, the op, the median end-to-end GB/s of --repeat
# runs of `stagingd job --path stream` and of `--path whole` (its default
# --inflight), and their ratio. Stores are made once with `stagingd gen`
# (DIR/crossover-SIZE) and removed at the end. Logs go to $OUT or a
# temporary folder; the table comes last.
set -uo pipefail
build=${1:?usage: crossover.sh BUILD_DIR [--shards LIST] [--size SIZE] [--repeat N] [--dir DIR]}
shift
shards="1MiB 4MiB 16MiB 64MiB" size=4GiB repeat=3 dir=/dev/shm
while (($#)); do
    case $1 in
    --shards) shards=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    *) echo "crossover: expected --shards, --size, --repeat or --dir, found '$1'" >&2; exit 2 ;;
    esac
done
find_bin() { find "$build" -type f -name "$1" -perm -u+x | sort | head -n 1; }
stagingd=$(find_bin stagingd) agent=$(find_bin lease-agent)
[[ -x $stagingd && -x $agent ]] || { echo "crossover: no stagingd or lease-agent under $build" >&2; exit 2; }
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
work=$(mktemp -d)
mkdir -m 700 "$work/agent"
apid=
stores=()
cleanup() {
    kill "$apid" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$work" "${stores[@]}"
}
trap cleanup EXIT
log=$out/crossover.log
: >"$log"

mkfifo "$work/ready"
"$agent" --backend "${CROSSOVER_BACKEND:-cuda}" --socket "$work/agent/a.sock" --ready-fd 3 \
    3>"$work/ready" 2>>"$log" &
apid=$!
read -r -t 30 ready <"$work/ready" && [[ $ready == ready* ]] ||
    { echo "crossover: the agent did not start (see $log)" >&2; exit 1; }

med() { printf '%s\n' "$@" | grep . | sort -n | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print "-"}'; }
# gbps STORE ARGS...: the median end-to-end GB/s of the repeats, or FAILED
gbps() {
    local store=$1 v=() r line
    shift
    for ((r = 0; r < repeat; r++)); do
        line=$("$stagingd" job --store "$store" --agent "$work/agent/a.sock" "$@" 2>>"$log") ||
            { printf '%s\n' "$line" >>"$log"; echo FAILED; return; }
        printf '%s\n' "$line" >>"$log"
        v+=("$(sed -n 's/^ *end to end *\([0-9.]*\) GB\/s.*/\1/p' <<<"$line")")
    done
    med "${v[@]}"
}

rows=()
for sh in $shards; do
    store=$dir/crossover-$sh
    stores+=("$store")
    echo "crossover: store of $size in $sh shards" | tee -a "$log"
    "$stagingd" gen --out "$store" --size "$size" --shard-size "$sh" --force --quiet >>"$log" 2>&1 ||
        { echo "crossover: gen failed (see $log)" >&2; exit 1; }
    cat "$store"/*.sds >/dev/null # page-cache-hot (it is tmpfs in the default --dir)
    for op in verify scan; do
        "$stagingd" job --store "$store" --agent "$work/agent/a.sock" --op "$op" >/dev/null 2>>"$log" # warm-up
        s=$(gbps "$store" --op "$op" --path stream)
        w=$(gbps "$store" --op "$op" --path whole)
        ratio=$(awk -v s="$s" -v w="$w" 'BEGIN {if (s + 0 > 0 && w + 0 > 0) printf "%.2f", s / w; else print "-"}')
        rows+=("$(printf '%-8s %-7s %9s %9s %8s' "$sh" "$op" "$s" "$w" "$ratio")")
    done
    rm -rf "$store"
done

printf '\n%-8s %-7s %9s %9s %8s\n' "shard" "op" "stream" "whole" "s/w" | tee -a "$log"
printf '%s\n' "${rows[@]}" | tee -a "$log"
echo "(GB/s end to end, median of $repeat runs; store of $size each)" | tee -a "$log"
