#!/usr/bin/env bash
# Runs stagingd jobs of several shapes against one or more CUDA agents that
# serve at once, interleaved round by round on one page-cache-hot store, and
# prints a table of GB/s (one value a round, then the mean) per job and agent.
# For "does this agent option or job shape pay?" within one build:
#
#   bench/job-ab.sh BUILD_DIR [--store DIR] [--size SIZE] [--rounds N] [--figure gpu|e2e]
#                   [--agent NAME=ARGS]... --job NAME=ARGS...
#
#   --agent NAME=ARGS  an agent started with these lease-agent options (default:
#                      one agent, "default", with none); every job runs against each;
#                      ARGS may begin with @PATH: that lease-agent binary instead of
#                      BUILD_DIR's (an A/B between two commits' agents)
#   --job NAME=ARGS    stagingd job options besides --store and --agent
#   --figure           the job's "gpu path" line (streamed jobs) or "end to end" (default)
#
# Example (the ring-join measurement in docs/streaming.md):
#   bench/job-ab.sh build-device --agent j1="--ring-join 1" --agent j2="--ring-join 2" \
#       --job scan="--path stream --op scan --k 10 --query-seed 7" --job verify="--path stream --op verify"
# The store (default /dev/shm/job-ab-store, 8GiB of 64 MiB shards) is made once by
# `stagingd gen` and kept. Needs a GPU. Logs under $OUT (or a temporary folder).
set -uo pipefail

build=${1:-}
[[ -n $build && -d $build ]] || { sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
shift
store=/dev/shm/job-ab-store size=8GiB rounds=3 figure=e2e
agents=() jobs=()
while (($#)); do
    case $1 in
    --store) store=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --figure) figure=$2; shift 2 ;;
    --agent) agents+=("$2"); shift 2 ;;
    --job) jobs+=("$2"); shift 2 ;;
    *) echo "job-ab: expected an option, found '$1'" >&2; exit 2 ;;
    esac
done
((${#jobs[@]})) || { echo "job-ab: expected at least one --job NAME=ARGS" >&2; exit 2; }
((${#agents[@]})) || agents=("default=")
[[ $figure == gpu || $figure == e2e ]] || { echo "job-ab: --figure gpu or e2e, found '$figure'" >&2; exit 2; }
line=$([[ $figure == gpu ]] && echo 'gpu path' || echo 'end to end')

find_bin() { find "$build" -type f -name "$1" -perm -u+x 2>/dev/null | sort | head -n 1; }
S=$(find_bin stagingd) A=$(find_bin lease-agent)
[[ -n $S && -n $A ]] || { echo "job-ab: expected stagingd and lease-agent under $build" >&2; exit 2; }
logs=${OUT:-$(mktemp -d)}/job-ab
mkdir -p "$logs"
if [[ ! -f $store/MANIFEST ]]; then
    echo "job-ab: generating a $size store in $store"
    "$S" gen --out "$store" --size "$size" --shard-size 64MiB --seed 42 --force >"$logs/gen.log" 2>&1 ||
        { tail -n 5 "$logs/gen.log"; exit 1; }
fi
cat "$store"/shard-* >/dev/null 2>&1 # page-cache hot

declare -A sock pid
dirs=()
cleanup() {
    for n in "${!pid[@]}"; do kill "${pid[$n]}" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "${dirs[@]}"
}
trap cleanup EXIT
names=()
for a in "${agents[@]}"; do
    n=${a%%=*} args=${a#*=}
    d=$(mktemp -d) && chmod 700 "$d" && dirs+=("$d")
    sock[$n]=$d/agent.sock
    read -r -a extra <<<"$args"
    bin=$A
    if [[ ${extra[0]:-} == @* ]]; then # another build's lease-agent, for an A/B across commits
        bin=${extra[0]#@} extra=("${extra[@]:1}")
        [[ -x $bin ]] || { echo "job-ab: agent $n: expected an executable at '$bin'" >&2; exit 2; }
    fi
    "$bin" --backend cuda --socket "${sock[$n]}" --pinned-budget 16GiB --mapped-budget 1GiB "${extra[@]}" \
        >"$logs/agent-$n.log" 2>&1 &
    pid[$n]=$!
    for _ in $(seq 200); do [[ -S ${sock[$n]} ]] && break; sleep 0.05; done
    [[ -S ${sock[$n]} ]] || { echo "job-ab: agent $n did not start:"; tail -n 5 "$logs/agent-$n.log"; exit 1; }
    names+=("$n")
done

results=$logs/results.txt
: >"$results"
for ((r = 1; r <= rounds; r++)); do
    for j in "${jobs[@]}"; do
        jn=${j%%=*}
        read -r -a jargs <<<"${j#*=}"
        for n in "${names[@]}"; do
            log=$logs/job-$jn-$n-$r.log
            timeout 120 "$S" job --store "$store" --agent "${sock[$n]}" "${jargs[@]}" >"$log" 2>&1
            g=$(grep -m1 "$line" "$log" | grep -oE '[0-9]+\.[0-9]+ GB/s' | head -n 1 | cut -d' ' -f1)
            echo "$jn $n ${g:-FAIL}" >>"$results"
        done
    done
    echo "job-ab: round $r of $rounds done"
done
for n in "${names[@]}"; do
    kill -USR1 "${pid[$n]}" 2>/dev/null
done
sleep 1
for n in "${names[@]}"; do
    echo "agent $n: $(grep -o 'ring_chunks=[0-9]*.*ring_join_lapses=[0-9]*' "$logs/agent-$n.log" | tail -n 1)"
done
awk -v fig="$line" '
    { key = $1 SUBSEP $2; v[key] = v[key] (v[key] == "" ? "" : " / ") $3
      if ($3 != "FAIL") { s[key] += $3; c[key]++ }
      if (!($1 in js)) { js[$1] = 1; jo[++nj] = $1 }
      if (!($2 in as)) { as[$2] = 1; ao[++na] = $2 } }
    END {
        printf "| job \\ agent (GB/s, %s) |", fig; for (i = 1; i <= na; i++) printf " %s |", ao[i]; print ""
        printf "| --- |"; for (i = 1; i <= na; i++) printf " --- |"; print ""
        for (k = 1; k <= nj; k++) {
            printf "| %s |", jo[k]
            for (i = 1; i <= na; i++) {
                key = jo[k] SUBSEP ao[i]
                printf " %s%s |", v[key], c[key] ? sprintf(" (mean %.2f)", s[key] / c[key]) : ""
            }
            print ""
        }
    }' "$results"
echo "logs: $logs"
grep -q FAIL "$results" && exit 1
exit 0
