#!/usr/bin/env bash
# Runs the same stagingd jobs through two or more builds, alternating, on one
# page-cache-hot store, and prints each job's end-to-end GB/s (median of the
# repeats) with its ratio to the first build. For "is this change slower?":
#
#   bench/ab-pipeline.sh [--store DIR] [--size SIZE] [--repeat N] [--ops LIST] \
#                        LABEL=DIR LABEL=DIR...
#
# Each DIR holds a `stagingd` and a `lease-agent` (any layout below it: the
# first executable of each name is used). The store is made once by the first
# build's generator (the shard format is shared) and reused while it exists.
# --ops: comma-separated job variants: verify (GPU checksums only),
# cpu-verify (also re-checked on the CPU), scan, verify16 (verify with 16 in
# flight). Needs a GPU (the agents run their CUDA backend). Logs in $OUT or
# a temporary folder.
set -uo pipefail

store=/dev/shm/ab-store
size=8GiB
repeat=3
ops=verify,cpu-verify,scan
builds=()
while (($#)); do
    case $1 in
    --store) store=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --ops) ops=$2; shift 2 ;;
    -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *=*) builds+=("$1"); shift ;;
    *) echo "ab-pipeline: expected LABEL=DIR or an option, found '$1'" >&2; exit 2 ;;
    esac
done
if ((${#builds[@]} < 1)); then
    echo "ab-pipeline: expected at least one LABEL=DIR" >&2
    exit 2
fi
logs=${OUT:-$(mktemp -d)}/ab
mkdir -p "$logs"

find_bin() { find "$1" -type f -name "$2" -perm -u+x 2>/dev/null | sort | head -n 1; }

labels=()
declare -A stagingd agent
for b in "${builds[@]}"; do
    label=${b%%=*} dir=${b#*=}
    stagingd[$label]=$(find_bin "$dir" stagingd)
    agent[$label]=$(find_bin "$dir" lease-agent)
    if [[ -z ${stagingd[$label]} || -z ${agent[$label]} ]]; then
        echo "ab-pipeline: $label: expected stagingd and lease-agent under $dir" >&2
        exit 2
    fi
    labels+=("$label")
done

first=${labels[0]}
if [[ ! -f $store/MANIFEST ]]; then
    echo "ab-pipeline: generating a $size store in $store"
    "${stagingd[$first]}" gen --out "$store" --size "$size" --shard-size 64MiB --seed 42 \
        --force >"$logs/gen.log" 2>&1 || { tail -n 5 "$logs/gen.log"; exit 1; }
fi
cat "$store"/shard-* >/dev/null 2>&1 # page-cache hot

# one_job LABEL OP: prints the job's end-to-end GB/s, or FAIL.
one_job() {
    local label=$1 op=$2 sock dir pid args=() st gbs
    dir=$(mktemp -d)
    sock=$dir/agent.sock
    "${agent[$label]}" --backend cuda --socket "$sock" --pinned-budget 8GiB --mapped-budget 1GiB \
        >"$logs/agent-$label-$op.log" 2>&1 &
    pid=$!
    for _ in $(seq 200); do [[ -S $sock ]] && break; sleep 0.05; done
    case $op in
    verify) args=(--op verify) ;;
    cpu-verify) args=(--op verify --cpu-verify) ;;
    scan) args=(--op scan --k 10 --query-seed 7) ;;
    verify16) args=(--op verify --inflight 16) ;;
    *) echo "FAIL(op)"; kill "$pid"; return ;;
    esac
    "${stagingd[$label]}" job --store "$store" --agent "$sock" "${args[@]}" \
        >"$logs/job-$label-$op.log" 2>&1
    st=$?
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    rm -rf "$dir"
    gbs=$(sed -n 's/.*end to end *\([0-9.]*\) GB\/s.*/\1/p' "$logs/job-$label-$op.log" | tail -n 1)
    if ((st != 0)) || [[ -z $gbs ]]; then echo "FAIL"; else echo "$gbs"; fi
}

median() { printf '%s\n' "$@" | grep -v FAIL | sort -n | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print "FAIL"}'; }

declare -A results
IFS=, read -r -a oplist <<<"$ops"
for ((r = 1; r <= repeat; r++)); do
    for op in "${oplist[@]}"; do
        for label in "${labels[@]}"; do
            v=$(one_job "$label" "$op")
            results[$label,$op]+=" $v"
            echo "ab-pipeline: run $r $op $label: $v GB/s"
        done
    done
done

echo
printf '%-12s %-12s %10s %10s   %s\n' job build "GB/s" "x $first" "runs"
for op in "${oplist[@]}"; do
    # shellcheck disable=SC2086
    base=$(median ${results[$first,$op]})
    for label in "${labels[@]}"; do
        # shellcheck disable=SC2086
        m=$(median ${results[$label,$op]})
        ratio=$(awk -v a="$m" -v b="$base" 'BEGIN { if (a+0 > 0 && b+0 > 0) printf "%.2f", a / b; else print "-" }')
        printf '%-12s %-12s %10s %10s  %s\n' "$op" "$label" "$m" "$ratio" "${results[$label,$op]}"
    done
done
