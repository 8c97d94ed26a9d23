#!/bin/sh
# The man pages render (man -l, groff without warnings) and list exactly
# the options each program's --help lists: every --option an option line of
# a page names must be in the program's help, and every --option the help
# names must have a line in its page. lease-agent cannot run without the
# NVIDIA driver (it links libcuda.so.1), so where it cannot, its options are
# read from the usage texts in gpu/agent_main.c instead, and said so.
# usage: test_man.sh SOURCE_DIR STAGINGD LEASECTL LEASE_AGENT_HOST LEASE_AGENT|none
src=$1 STAGINGD=$2 LEASECTL=$3 HOST=$4 AGENT=$5
set -u
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=0
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
if ! command -v man > /dev/null || ! command -v groff > /dev/null; then
    echo "SKIP: man-db and groff-base are not installed (scripts/install-deps.sh installs them)"
    exit 77
fi

# The --options in a text, one per line, sorted.
opts() { grep -o -- '--[a-z][a-z0-9-]*' | sort -u; }

# The options a page lists: its option lines (".TP" items render at an
# indent of 7: "       --name ARG" or "       -h, --help").
page_opts() {
    LC_ALL=C MANWIDTH=250 man -l -P cat "$1" 2> "$tmp/man.err" |
        grep -E '^       (-[a-zA-Z], )?--[a-z]' | sed -E 's/^ +(-[a-zA-Z], )?//' | awk '{print $1}' |
        opts
}

compare() {
    page=$1 helpfile=$2
    base=$(basename "$page")
    if ! groff -man -Tutf8 -ww -z "$page" 2> "$tmp/groff.err" || [ -s "$tmp/groff.err" ]; then
        echo "FAIL: $base: groff warns:"; cat "$tmp/groff.err"; failed=1
    fi
    page_opts "$page" > "$tmp/page.txt"
    if [ -s "$tmp/man.err" ]; then
        echo "FAIL: $base: man -l says:"; cat "$tmp/man.err"; failed=1
    fi
    # "--key" is stagingd's placeholder in "--key VALUE or --key=VALUE".
    opts < "$helpfile" | grep -vx -- '--key' > "$tmp/help.txt"
    if diff -u "$tmp/help.txt" "$tmp/page.txt" > "$tmp/diff.txt"; then
        echo "PASS: $base lists the $(wc -l < "$tmp/page.txt") options --help lists"
    else
        echo "FAIL: $base and --help disagree (- only in --help, + only in the page):"
        cat "$tmp/diff.txt"
        failed=1
    fi
}

man_dir=$src/docs/man
"$LEASECTL" --help > "$tmp/leasectl.help"
compare "$man_dir/leasectl.8" "$tmp/leasectl.help"

: > "$tmp/stagingd.help"
for c in "" run job ctl gen verify; do
    # shellcheck disable=SC2086
    "$STAGINGD" $c --help >> "$tmp/stagingd.help" 2>&1
done
compare "$man_dir/stagingd.8" "$tmp/stagingd.help"

"$HOST" --help > "$tmp/agent.help"
if [ "$AGENT" != none ] && "$AGENT" --help >> "$tmp/agent.help" 2> /dev/null; then
    echo "lease-agent --help ran"
else
    echo "lease-agent cannot run here (no NVIDIA driver for libcuda.so.1): its options are read from the usage texts of gpu/agent_main.c"
    awk '/^static void agent_(server_)?usage\(/,/^}/' "$src/gpu/agent_main.c" | grep '"' >> "$tmp/agent.help"
fi
compare "$man_dir/lease-agent.8" "$tmp/agent.help"

# lease-agent-host's page is lease-agent's.
if [ "$(cat "$man_dir/lease-agent-host.8")" = ".so man8/lease-agent.8" ]; then
    echo "PASS: lease-agent-host.8 is lease-agent.8"
else
    echo "FAIL: lease-agent-host.8 should be '.so man8/lease-agent.8'"; failed=1
fi
[ "$failed" -eq 0 ] && echo "all checks passed"
exit "$failed"
