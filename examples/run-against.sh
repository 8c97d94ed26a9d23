#!/bin/sh
# Runs the examples build-outside.sh made against one agent, started here on
# a private socket, and says PASS or FAIL on its last line.
#
#   examples/run-against.sh OUTDIR AGENT [AGENT OPTION...]
#
# AGENT is lease-agent-host (any machine) or lease-agent (a GPU machine);
# its options follow (budgets, --device). The agent is stopped afterwards.
# Each OUTDIR/*-shared and *-static binary is run as `BINARY SOCKET` and
# must print a last line starting with PASS. Exits 0 only when all did.
set -u

if [ $# -lt 2 ]; then
    echo "usage: $0 OUTDIR AGENT [AGENT OPTION...]" >&2
    exit 2
fi
out=$(cd "$1" && pwd) || exit 2
agent=$2
shift 2
libdir=$(cat "$out/libdir" 2>/dev/null || echo prefix/lib)
case "$libdir" in
/*) ;;
*) libdir="$out/$libdir" ;; # relative to OUTDIR, which may have been carried
esac

dir=$(mktemp -d "${TMPDIR:-/tmp}/lease-example.XXXXXX") || exit 1
sock="$dir/agent.sock"
mkfifo "$dir/ready"
"$agent" --socket "$sock" --ready-fd 3 "$@" 3>"$dir/ready" >"$dir/agent.log" 2>&1 &
apid=$!
ready=$(timeout 30 head -n 1 "$dir/ready" 2>/dev/null)
case "$ready" in
ready*) ;;
*)
    echo "FAIL: $agent did not report ready on $sock; its log:"
    cat "$dir/agent.log"
    kill "$apid" 2>/dev/null
    wait "$apid" 2>/dev/null
    rm -rf "$dir"
    exit 1
    ;;
esac

status=0
ran=""
for bin in "$out"/*-shared "$out"/*-static; do
    [ -f "$bin" ] && [ -x "$bin" ] || continue
    name=$(basename "$bin")
    LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout 60 "$bin" "$sock" \
        >"$dir/$name.out" 2>&1
    rc=$?
    sed "s/^/$name: /" "$dir/$name.out"
    last=$(tail -n 1 "$dir/$name.out")
    case "$last" in
    PASS*) [ $rc -eq 0 ] || status=1 ;;
    *) status=1 ;;
    esac
    [ $rc -eq 0 ] || echo "$name: exit status $rc"
    ran="$ran $name"
done

kill -TERM "$apid" 2>/dev/null
wait "$apid"
arc=$?
if [ $arc -ne 0 ]; then
    echo "agent exit status $arc; its log:"
    cat "$dir/agent.log"
    status=1
fi
rm -rf "$dir"
if [ -z "$ran" ]; then
    echo "FAIL: no example binaries in $out (run build-outside.sh first)"
    exit 1
fi
if [ $status -eq 0 ]; then
    echo "PASS:$ran against $agent"
else
    echo "FAIL:$ran against $agent (see above)"
fi
exit $status
