#!/bin/sh
# Fuzzes linkcheck's ELF reader and rules with libFuzzer.
# Usage: scripts/fuzz-linkcheck.sh [seconds]   (default 60)
#
# Configures a clang build folder with LEASE_FUZZ=ON (LINKCHECK_FUZZ_BUILD,
# default build-fuzz), builds fuzz_elf, fuzzes a scratch copy of
# tools/linkcheck/fuzz/corpus for the given time, then rebuilds the corpus
# as the seeds plus the fewest inputs that keep all coverage (-merge=1), so it
# stays small (tools/linkcheck/fuzz/make-seeds.sh remakes the seeds). A crash
# stops the script with the input saved under <build>/fuzz-artifacts/.
set -eu

seconds=${1:-60}
case $seconds in
'' | *[!0-9]*)
    echo "usage: $0 [seconds]: expected a whole number of seconds, found '$seconds'" >&2
    exit 2
    ;;
esac
command -v clang >/dev/null 2>&1 || {
    echo "fuzz-linkcheck: expected clang (with libFuzzer) on PATH, found none" >&2
    exit 2
}

repo=$(cd "$(dirname "$0")/.." && pwd)
build=${LINKCHECK_FUZZ_BUILD:-$repo/build-fuzz}
corpus=$repo/tools/linkcheck/fuzz/corpus
artifacts=$build/fuzz-artifacts/

cmake -S "$repo" -B "$build" -DCMAKE_C_COMPILER=clang -DLEASE_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target fuzz_elf -j"$(nproc)"
fuzzer=$build/tools/linkcheck/fuzz_elf

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$corpus"/* "$work"/
mkdir -p "$artifacts"

"$fuzzer" -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$artifacts" "$work"

# Rebuild the corpus from the seeds plus the fewest inputs that keep every
# feature seen, old corpus and new finds alike.
minimal=$(mktemp -d)
trap 'rm -rf "$work" "$minimal"' EXIT
cp "$corpus"/seed-* "$minimal"/
"$fuzzer" -merge=1 -max_len=4096 "$minimal" "$corpus" "$work" 2>&1 |
    grep -E "MERGE-OUTER: [0-9]+ new files" || true
find "$corpus" -type f ! -name 'seed-*' -delete
find "$minimal" -type f ! -name 'seed-*' -exec cp {} "$corpus"/ \;

echo "fuzz-linkcheck: corpus of $(ls "$corpus" | wc -l) files, $(cat "$corpus"/* | wc -c) bytes"
