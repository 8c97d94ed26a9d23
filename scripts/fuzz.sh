#!/usr/bin/env bash
# make fuzz: runs every libFuzzer target for a while and reports what it did.
#   scripts/fuzz.sh [SECONDS] [TARGET...]      (make fuzz FUZZ_SECONDS=N FUZZ_TARGETS="...")
#
# Targets: proto, agent, shard (tests/fuzz/) and elf (tools/linkcheck/fuzz/);
# default all. Configures a clang build folder (FUZZ_BUILD, default
# build-fuzz) with LEASE_FUZZ=ON and no CUDA, builds the fuzzers, runs each
# for SECONDS (default 60) on a scratch copy of its kept corpus, and prints
# one line per target: executions, their rate, coverage (libFuzzer's cov:
# edges, ft: features) and the corpus it reached. A crash, leak or broken
# promise stops with the input kept under <build>/fuzz-artifacts/ and the
# exit status 1. FUZZ_MERGE=1 also folds what was found into the kept
# corpora as the fewest inputs that keep every feature (libFuzzer -merge=1);
# keep them small (tests/fuzz/corpus: under 1 MiB in all). FUZZ_JOBS=N runs
# N processes per target (libFuzzer -fork), for machines with cores to spare.
set -euo pipefail

seconds=${1:-60}
shift || true
case $seconds in
'' | *[!0-9]*)
    echo "usage: $0 [seconds] [target...]: expected a whole number of seconds, found '$seconds'" >&2
    exit 2
    ;;
esac
targets=("$@")
((${#targets[@]})) || targets=(proto agent shard elf)
command -v clang > /dev/null 2>&1 || {
    echo "fuzz: expected clang with libFuzzer on PATH, found none (Debian: apt-get install clang)" >&2
    exit 2
}

repo=$(cd "$(dirname "$0")/.." && pwd)
build=${FUZZ_BUILD:-$repo/build-fuzz}
[[ $build == /* ]] || build=$repo/$build
jobs=${FUZZ_JOBS:-1}
artifacts=$build/fuzz-artifacts/
mkdir -p "$build/logs" "$artifacts"

echo "fuzz: configuring and building $build (clang, LEASE_FUZZ=ON, no CUDA)"
cmake -S "$repo" -B "$build" -DCMAKE_C_COMPILER=clang -DLEASE_FUZZ=ON -DLEASE_WITH_CUDA=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$build/logs/fuzz-configure.log" 2>&1 || {
    tail -20 "$build/logs/fuzz-configure.log" >&2
    exit 1
}
cmake --build "$build" -j"$(nproc)" --target fuzz_all fuzz_elf > "$build/logs/fuzz-build.log" 2>&1 || {
    tail -30 "$build/logs/fuzz-build.log" >&2
    exit 1
}

# target -> binary, kept corpus, extra options
binary() {
    case $1 in
    elf) echo "$build/tools/linkcheck/fuzz_elf" ;;
    *) echo "$build/tests/fuzz/fuzz_$1" ;;
    esac
}
corpus() {
    case $1 in
    elf) echo "$repo/tools/linkcheck/fuzz/corpus" ;;
    *) echo "$repo/tests/fuzz/corpus/$1" ;;
    esac
}
options() {
    case $1 in
    elf) echo "-max_len=4096" ;;
    shard) echo "-max_len=9000" ;;
    *) echo "" ;;
    esac
}

status=0
summary=()
for t in "${targets[@]}"; do
    bin=$(binary "$t")
    kept=$(corpus "$t")
    [[ -x $bin && -d $kept ]] || {
        echo "fuzz: unknown target '$t' (expected proto, agent, shard or elf)" >&2
        exit 2
    }
    work=$(mktemp -d)
    cp "$kept"/* "$work"/
    log=$build/logs/fuzz-$t.log
    echo "fuzz: $t for $seconds s ($jobs job(s)), log $log"
    fork=()
    ((jobs > 1)) && fork=(-fork="$jobs" -ignore_crashes=0)
    # shellcheck disable=SC2046
    if ! "$bin" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 \
        -artifact_prefix="$artifacts$t-" "${fork[@]}" $(options "$t") "$work" > "$log" 2>&1; then
        echo "fuzz: $t FAILED: the input is under $artifacts; the end of its log:" >&2
        tail -40 "$log" >&2
        status=1
    fi
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    last=$(grep -E '^#[0-9]+' "$log" | tail -1)
    if [[ -z $execs ]]; then # -fork: the parent prints only its own lines
        execs=$(sed -n 's/^#\([0-9]*\).*/\1/p' <<< "$last")
        rate=$((${execs:-0} / (seconds > 0 ? seconds : 1)))
    fi
    cov=$(grep -o 'cov: [0-9]*' <<< "$last" | tail -1)
    ft=$(grep -o 'ft: [0-9]*' <<< "$last" | tail -1)
    corp=$(grep -o 'corp: [0-9]*/[0-9]*[a-zA-Z]*' <<< "$last" | tail -1)
    summary+=("$(printf '%-6s %4ss %12s execs %8s/s  %-10s %-10s %s' "$t" "$seconds" \
        "${execs:-?}" "${rate:-?}" "${cov:-cov: ?}" "${ft:-ft: ?}" "${corp:-corp: ?}")")
    if [[ ${FUZZ_MERGE:-0} == 1 && $status == 0 ]]; then
        minimal=$(mktemp -d)
        cp "$kept"/seed-* "$minimal"/
        # shellcheck disable=SC2046
        "$bin" -merge=1 $(options "$t") "$minimal" "$kept" "$work" > "$build/logs/fuzz-$t-merge.log" 2>&1
        find "$kept" -type f ! -name 'seed-*' -delete
        find "$minimal" -type f ! -name 'seed-*' -exec cp {} "$kept"/ \;
        rm -rf "$minimal"
        echo "fuzz: $t: kept corpus now $(ls "$kept" | wc -l) files, $(cat "$kept"/* | wc -c) bytes"
    fi
    rm -rf "$work"
done

echo "fuzz: summary (target, time, executions, rate, edges, features, corpus reached)"
printf '  %s\n' "${summary[@]}"
exit $status
