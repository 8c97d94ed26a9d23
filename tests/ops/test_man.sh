#!/bin/sh
# The man pages render (man -l, groff without warnings) and list exactly
# the options each program's --help lists: every --option an option line of
# a page names must be in the program's help, and every --option the help
# names must have a line in its page. lease-agent loads the NVIDIA driver
# only when a CUDA path starts, so its --help runs everywhere and is what
# its page is checked against (its own options, gpu/cuda/agent_main.c, and
# the server's, gpu/server's option table). A build without the CUDA
# toolkit has no lease-agent: there only the page's server options are
# checked, against lease-agent-host --help, and the test says so.
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
# With a second argument, only the section of that heading.
page_opts() {
    LC_ALL=C MANWIDTH=250 man -l -P cat "$1" 2> "$tmp/man.err" |
        awk -v want="${2:-}" 'want == "" { print; next } /^[A-Z]/ { on = ($0 == want); next } on' |
        grep -E '^       (-[a-zA-Z], )?--[a-z]' | sed -E 's/^ +(-[a-zA-Z], )?//' | awk '{print $1}' |
        opts
}

compare() {
    page=$1 helpfile=$2 section=${3:-}
    base=$(basename "$page")${3:+ ($3)}
    if ! groff -man -Tutf8 -ww -z "$page" 2> "$tmp/groff.err" || [ -s "$tmp/groff.err" ]; then
        echo "FAIL: $base: groff warns:"; cat "$tmp/groff.err"; failed=1
    fi
    page_opts "$page" "$section" > "$tmp/page.txt"
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
for c in "" run job ctl gen verify import; do
    # shellcheck disable=SC2086
    "$STAGINGD" $c --help >> "$tmp/stagingd.help" 2>&1
done
compare "$man_dir/stagingd.8" "$tmp/stagingd.help"

"$HOST" --help > "$tmp/host.help"
if [ "$AGENT" = none ]; then
    echo "lease-agent is not built (no CUDA toolkit): only the page's server options are checked"
    compare "$man_dir/lease-agent.8" "$tmp/host.help" "SERVER OPTIONS"
elif "$AGENT" --help > "$tmp/agent.help" 2> "$tmp/agent.err"; then
    # lease-agent's help includes the server's; the host's is added so that
    # an option only lease-agent-host had would be caught too.
    cat "$tmp/host.help" >> "$tmp/agent.help"
    compare "$man_dir/lease-agent.8" "$tmp/agent.help"
else
    echo "FAIL: lease-agent --help (it needs no driver):"; cat "$tmp/agent.err"; failed=1
fi

# lease-agent-host's page is lease-agent's.
if [ "$(cat "$man_dir/lease-agent-host.8")" = ".so man8/lease-agent.8" ]; then
    echo "PASS: lease-agent-host.8 is lease-agent.8"
else
    echo "FAIL: lease-agent-host.8 should be '.so man8/lease-agent.8'"; failed=1
fi
[ "$failed" -eq 0 ] && echo "all checks passed"
exit "$failed"
