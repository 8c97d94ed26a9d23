# Shared by the tests/ops shell tests: a private directory, a host agent
# and stagingd on private sockets in it, and assertions. Source it with
# BUILD bin paths in the environment: STAGINGD, AGENT (lease-agent-host),
# LEASECTL, JSON_GET. Every process started here is stopped by its pid on
# exit.
set -u
tmp=$(mktemp -d /tmp/ops-test.XXXXXX) || exit 1
pids=""
failed=0
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"

cleanup() {
    for p in $pids; do
        kill -CONT "$p" 2>/dev/null
        kill "$p" 2>/dev/null
    done
    for p in $pids; do
        wait "$p" 2>/dev/null
    done
    rm -rf "$tmp"
}
trap cleanup EXIT

pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; failed=1; }

# check <what> <command...>: the command must succeed.
check() {
    what=$1
    shift
    if "$@"; then pass "$what"; else fail "$what"; fi
}

# contains <what> <file> <fixed string>
contains() {
    if grep -qF -- "$3" "$2"; then
        pass "$1"
    else
        fail "$1: '$3' not in $2:"
        sed 's/^/    | /' "$2" | head -40
    fi
}

# jeq <what> <file with JSON> <path> <expected value>
jeq() {
    got=$("$JSON_GET" "$3" < "$2" 2>&1)
    if [ "$got" = "$4" ]; then
        pass "$1 ($3 = $4)"
    else
        fail "$1: $3 is '$got', expected '$4'"
    fi
}

# wait_for <seconds> <command...>: polls every 0.1 s until it succeeds.
wait_for() {
    n=$(($1 * 10))
    shift
    while [ "$n" -gt 0 ]; do
        "$@" > /dev/null 2>&1 && return 0
        sleep 0.1
        n=$((n - 1))
    done
    return 1
}

# start_agent [options...]: lease-agent-host on $tmp/agent/agent.sock with
# budgets that fit an 8 MiB RLIMIT_MEMLOCK; its lines in $tmp/agent.log.
agent_sock=$tmp/agent/agent.sock
start_agent() {
    mkdir -p "$tmp/agent"
    chmod 0700 "$tmp/agent"
    "$AGENT" --socket "$agent_sock" --pinned-budget 6M --mapped-budget 2M "$@" > "$tmp/agent.log" 2>&1 &
    agent_pid=$!
    pids="$pids $agent_pid"
    wait_for 10 test -S "$agent_sock" || { fail "the agent did not start"; cat "$tmp/agent.log"; exit 1; }
}

# start_stagingd [options...]: stagingd run on $tmp/ctl.sock with a 4 MiB
# store of 1 MiB shards, waits until its control socket answers.
ctl_sock=$tmp/ctl.sock
store=$tmp/store
start_stagingd() {
    [ -d "$store" ] || "$STAGINGD" gen --out "$store" --size 4M --shard-size 1M --quiet ||
        { fail "stagingd gen"; exit 1; }
    "$STAGINGD" run --control "$ctl_sock" --agent "$agent_sock" --store "$store" \
        --pinned-pool 4M --segment-size 2M --inflight 3 --pages small "$@" \
        > "$tmp/stagingd.out" 2> "$tmp/stagingd.err" &
    sd_pid=$!
    pids="$pids $sd_pid"
    wait_for 10 "$STAGINGD" ctl --control "$ctl_sock" stats ||
        { fail "stagingd did not start"; cat "$tmp/stagingd.err"; exit 1; }
    # Ready once the agent accepted the segments.
    wait_for 10 sh -c "'$STAGINGD' ctl --control '$ctl_sock' stats | grep -q ': ready'"
}

finish() {
    if [ "$failed" -ne 0 ]; then
        echo "some checks failed"
        exit 1
    fi
    echo "all checks passed"
    exit 0
}
