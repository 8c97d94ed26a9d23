#!/usr/bin/env bash
# Two GPUs against one on the same page-cache-hot store (issue 15, docs/multi-gpu.md):
#
#   scripts/device-2gpu.sh BUILD_DIR [--store DIR] [--gib N] [--op verify|scan]
#                                    [--path stream|whole] [--repeat N] [--self-test]
#
# Starts one lease-agent per GPU (--device 0 and --device 1, each on its own socket, named after
# its GPU's PCI bus id so stagingd places its staging threads on that GPU's NUMA node), then on
# one store in /dev/shm runs `stagingd job --agent A` (one GPU) and `stagingd job --agent A,B`
# (two), --repeat times each, best run kept. Prints the aggregate GB/s of each, each GPU's share
# of the two-GPU run, the ratio to one GPU, and whether the results are identical (shards clean,
# bad blocks, problems and every top-k row). Exit 0 when the goal holds: ratio >= 1.7, the two
# shares within 10% of each other, results identical; 1 otherwise; 2 on a setup failure.
#
#   BUILD_DIR    the carried build folder (make device-build): stagingd, lease-agent
#   --store DIR  the store (default /dev/shm/2gpu-store; reused when it exists)
#   --gib N      store size in GiB (default 16; --self-test: 32 MiB)
#   --op OP      verify (default) or scan
#   --path P     stream (default) or whole
#   --repeat N   runs of each (default 3)
#   --self-test  no GPU: two lease-agent-host processes, a 32 MiB store in /tmp, small budgets
#                (the ratio means nothing there; the script's plumbing is what it proves)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

build=${1:-}
[[ -n $build && -d $build ]] || { sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
shift
store= gib=16 op=verify path=stream repeat=3 selftest=0
while (($#)); do
    case $1 in
    --store) store=$2; shift 2 ;;
    --gib) gib=$2; shift 2 ;;
    --op) op=$2; shift 2 ;;
    --path) path=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --self-test) selftest=1; shift ;;
    *) echo "device-2gpu: unknown argument '$1'" >&2; exit 2 ;;
    esac
done

find_bin() { find "$build" -name "$1" -type f -perm -u+x 2>/dev/null | head -n 1; }
stagingd=$(find_bin stagingd)
if ((selftest)); then agent=$(find_bin lease-agent-host); else agent=$(find_bin lease-agent); fi
[[ -x $stagingd && -x $agent ]] || { echo "device-2gpu: no stagingd or agent under $build" >&2; exit 2; }
command -v python3 >/dev/null || { echo "device-2gpu: python3 is needed to read the reports" >&2; exit 2; }

work=$(mktemp -d /tmp/2gpu.XXXXXX)
out=${OUT:-$work}
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$work/a0" "$work/a1"
    # a self-test's store and reports are scratch unless $OUT keeps the reports
    ((selftest)) && [[ -z ${OUT:-} ]] && rm -rf "$work"
}
trap cleanup EXIT

if ((selftest)); then
    store=${store:-$work/store}
    size=32M shard=1M
    agent_opts=(--pinned-budget 6M --mapped-budget 2M)
    job_opts=(--pinned-pool 4M --segment-size 2M --chunk-size 256K --threads 2 --pages small)
else
    store=${store:-/dev/shm/2gpu-store}
    size=${gib}G shard=64M
    agent_opts=()
    job_opts=()
    nvidia-smi --query-gpu=index,name,pci.bus_id --format=csv,noheader 2>&1 | sed 's/^/  gpu: /'
    ulimit -S -l unlimited 2>/dev/null
fi

# The store, once; then every byte read so the runs meet a hot page cache.
if [[ ! -d $store ]]; then
    "$stagingd" gen --out "$store" --size "$size" --shard-size "$shard" --seed 15 --quiet ||
        { echo "device-2gpu: stagingd gen failed" >&2; exit 2; }
fi
cat "$store"/* >/dev/null

# An agent per GPU, each named after its bus id (nvidia-smi's 00000000:41:00.0 -> 0000:41:00.0).
for n in 0 1; do
    mkdir -p "$work/a$n" && chmod 0700 "$work/a$n"
    if ((selftest)); then
        name="ga-host gpu$n"
        dev=()
    else
        bdf=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader -i "$n" 2>/dev/null | tr 'A-F' 'a-f')
        bdf=${bdf: -12}
        name="ga-cuda $bdf"
        dev=(--device "$n")
    fi
    "$agent" "${dev[@]}" --socket "$work/a$n/agent.sock" --name "$name" "${agent_opts[@]}" \
        >"$out/agent$n.log" 2>&1 &
    pids+=($!)
done
for n in 0 1; do
    for _ in $(seq 100); do [[ -S $work/a$n/agent.sock ]] && break; sleep 0.1; done
    [[ -S $work/a$n/agent.sock ]] || { echo "device-2gpu: agent $n did not start:" >&2; tail -5 "$out/agent$n.log" >&2; exit 2; }
done
A=$work/a0/agent.sock B=$work/a1/agent.sock

run() { # run LABEL AGENTS: the best of --repeat runs into $out/LABEL.json
    local label=$1 agents=$2 best=-1 i
    for i in $(seq "$repeat"); do
        "$stagingd" job --store "$store" --agent "$agents" --op "$op" --path "$path" --json \
            "${job_opts[@]}" >"$work/$label.$i.json" 2>"$out/$label.$i.log" ||
            echo "device-2gpu: $label run $i exited $? (see $out/$label.$i.log)" >&2
        local gbs
        gbs=$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["summary"]; print(s["bytes"]/s["seconds"]/1e9 if s["seconds"] else 0)' "$work/$label.$i.json" 2>/dev/null || echo 0)
        echo "  $label run $i: $gbs GB/s"
        if python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > float(sys.argv[2]) else 1)' "$gbs" "$best"; then
            best=$gbs
            cp "$work/$label.$i.json" "$out/$label.json"
        fi
    done
}
echo "device-2gpu: $op, path $path, store $store ($(du -sh "$store" | cut -f1)), $repeat run(s) each"
run one "$A"
run two "$A,$B"

python3 - "$out/one.json" "$out/two.json" <<'PY'
import json, sys
one, two = (json.load(open(p)) for p in sys.argv[1:3])
def gbs(r):
    s = r["summary"]
    return s["bytes"] / s["seconds"] / 1e9 if s["seconds"] else 0.0
def results(r):  # what must be identical: the verdict, every shard's fate, every top-k row
    return (r["status"], r["shards"], r["problems"],
            [[(h["row"], h["score"]) for h in q["hits"]] for q in r.get("queries", [])])
g1, g2 = gbs(one), gbs(two)
ratio = g2 / g1 if g1 else 0.0
ag = two.get("agents", [])
total = sum(a["bytes"] for a in ag) or 1
shares = [a["bytes"] / total for a in ag]
print(f"one GPU      {g1:8.2f} GB/s")
print(f"two GPUs     {g2:8.2f} GB/s aggregate, {ratio:.2f}x one GPU (goal >= 1.70)")
for a, s in zip(ag, shares):
    print(f"  GPU {a['agent']}      {a['gb_per_s']:8.2f} GB/s, {a['shards']} shard(s), "
          f"{100 * s:5.1f}% of the bytes  \"{a['name']}\"")
even = len(shares) == 2 and min(shares) > 0 and max(shares) / min(shares) <= 1.10
same = results(one) == results(two)
print(f"shares       {'within' if even else 'NOT within'} 10% of each other")
print(f"results      {'identical to' if same else 'DIFFERENT from'} one GPU's")
ok = ratio >= 1.7 and even and same
print(f"goal         {'MET' if ok else 'NOT met'}")
sys.exit(0 if ok else 1)
PY
