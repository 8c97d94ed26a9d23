#!/bin/sh
# examples/lease_launch against a lease-agent serving the launch test kernels
# (tests/gpu/cuda/launch_kernels.cu and .kdesc in --cubin-dir), on a private
# socket; the example's last line must start with PASS.
#
#   launch_example.sh AGENT EXAMPLE CUBIN_DIR
set -u
agent=$1
example=$2
cubins=$3
dir=$(mktemp -d "${TMPDIR:-/tmp}/lease-launch.XXXXXX") || exit 1
sock="$dir/agent.sock"
mkfifo "$dir/ready"
# --seals legacy: the example's kernel writes its lease (examples/lease_launch.c)
"$agent" --socket "$sock" --cubin-dir "$cubins" --pinned-budget 64M --mapped-budget 16M --seals legacy \
    --ready-fd 3 3>"$dir/ready" >"$dir/agent.log" 2>&1 &
apid=$!
ready=$(timeout 60 head -n 1 "$dir/ready" 2>/dev/null)
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
timeout 120 "$example" "$sock" >"$dir/example.out" 2>&1
rc=$?
cat "$dir/example.out"
kill -TERM "$apid" 2>/dev/null
wait "$apid"
arc=$?
status=0
last=$(tail -n 1 "$dir/example.out")
case "$last" in
PASS*) [ $rc -eq 0 ] || status=1 ;;
*) status=1 ;;
esac
if [ $arc -ne 0 ] || [ $status -ne 0 ]; then
    echo "example exit status $rc, agent exit status $arc; the agent's log:"
    cat "$dir/agent.log"
    status=1
fi
rm -rf "$dir"
exit $status
