#!/bin/sh
# The agent as a service (lease-agent-host, and lease-agent --backend host
# when built: the same server code): READY=1 / STATUS= / STOPPING=1 over
# $NOTIFY_SOCKET (played by notify_listen), SIGHUP reopening --log-file
# after it was moved, every log line with a level and a subsystem,
# --config FILE (its keys, the command line winning, refusals naming the
# file and line; docs/config.md has a row for every key), and the
# --metrics refusals.
# usage: test_agent_ops.sh SOURCE_DIR LEASE_AGENT_HOST LEASE_AGENT|none NOTIFY_LISTEN
src=$1 AGENT=$2 CUDA_AGENT=$3 NOTIFY_LISTEN=$4
STAGINGD=/nonexistent LEASECTL=/nonexistent JSON_GET=/nonexistent
. "$(dirname "$0")/lib.sh"
mkdir -p "$tmp/agent"
chmod 0700 "$tmp/agent"

# ---- readiness, and the log file across SIGHUP ----
log=$tmp/agent.log
"$NOTIFY_LISTEN" "$tmp/notify.sock" 30 -- "$AGENT" --socket "$agent_sock" --pinned-budget 6M \
    --mapped-budget 2M --log-file "$log" > "$tmp/notify.txt" 2>&1 &
nl_pid=$!
pids="$pids $nl_pid"
check "READY=1 arrives" wait_for 10 grep -q "notify: READY=1" "$tmp/notify.txt"
contains "STATUS says where it serves" "$tmp/notify.txt" "notify: STATUS=serving $agent_sock"
check "MAINPID is the agent's" grep -q "notify: MAINPID=[0-9]" "$tmp/notify.txt"
ag=$(sed -n 's/^notify: MAINPID=//p' "$tmp/notify.txt")
check "the socket is there once READY=1 was sent" test -S "$agent_sock"
contains "the log file has the start" "$log" "info: server: serving $agent_sock"

mv "$log" "$log.1"
kill -HUP "$ag"
check "SIGHUP: a new log file at the path" wait_for 5 test -s "$log"
contains "SIGHUP: said in the new file" "$log" "info: server: SIGHUP from pid"
contains "SIGHUP: reopened" "$log" "log file reopened"
contains "the moved file kept the lines before" "$log.1" "notice: agent: HOST BACKEND"
kill -USR1 "$ag"
check "lines after SIGHUP go to the new file" wait_for 5 grep -q "SIGUSR1: stats follow" "$log"
check "the moved file got none of them" sh -c "! grep -q 'SIGUSR1' '$log.1'"

kill -TERM "$ag"
wait "$nl_pid"; rc=$?
check "STOPPING=1 arrives and the agent exits 0 (rc $rc)" [ "$rc" -eq 0 ]
contains "STOPPING=1" "$tmp/notify.txt" "notify: STOPPING=1"

# Every line: time, program[pid], a level, a subsystem, the message.
cat "$log.1" "$log" > "$tmp/all.log"
bad=$(grep -cvE '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+[+-][0-9]{4} lease-agent-host\[[0-9]+\]: (error|warning|notice|info|debug): (agent|server|lease|exec|host|metrics): ' "$tmp/all.log")
check "every log line has a level and a subsystem ($bad without)" [ "$bad" -eq 0 ]
[ "$bad" -eq 0 ] || grep -vE ': (error|warning|notice|info|debug): [a-z]+: ' "$tmp/all.log" | head -5

# ---- the metrics options ----
"$AGENT" --socket "$tmp/agent/b.sock" --pinned-budget 6M --mapped-budget 2M \
    --metrics 0.0.0.0:9464 > "$tmp/remote.txt" 2>&1; rc=$?
check "a non-loopback --metrics address is refused (exit $rc)" [ "$rc" -eq 1 ]
contains "and says what allows it" "$tmp/remote.txt" "(--metrics-remote allows it)"
"$AGENT" --metrics nowhere > "$tmp/bad.txt" 2>&1; rc=$?
check "a malformed --metrics address is a usage error (exit $rc)" [ "$rc" -eq 2 ]
contains "naming the option" "$tmp/bad.txt" "--metrics: expected HOST:PORT"

# ---- the config file ----
conf=$tmp/agent.conf
cat > "$conf" <<CONF
# the agent's settings
socket = $tmp/agent/c.sock
pinned-budget = 6M
mapped-budget = 1M
log-file = $tmp/cfg.log
log-level = debug
CONF
"$AGENT" --config "$conf" --mapped-budget 2M > "$tmp/c.out" 2>&1 &
p3=$!
pids="$pids $p3"
check "socket and log-file from a config file" wait_for 10 grep -q "serving $tmp/agent/c.sock" "$tmp/cfg.log"
contains "the command line wins over the file" "$tmp/cfg.log" "budgets PINNED 6291456 MAPPED 2097152 bytes"
kill "$p3"; wait "$p3"
printf 'pinned-budget = 6M\nbogus = 1\n' > "$tmp/bad.conf"
"$AGENT" --config "$tmp/bad.conf" > "$tmp/badconf.txt" 2>&1; rc=$?
check "an unknown key is a usage error (exit $rc)" [ "$rc" -eq 2 ]
contains "naming the file, line and key" "$tmp/badconf.txt" "$tmp/bad.conf:2: unknown key 'bogus'"
printf 'pinned-budget = lots\n' > "$tmp/bad2.conf"
"$AGENT" --config "$tmp/bad2.conf" > "$tmp/badconf2.txt" 2>&1
contains "a bad value names the file, line and key" "$tmp/badconf2.txt" "$tmp/bad2.conf:1: pinned-budget: expected"
printf 'help = yes\n' > "$tmp/bad3.conf"
"$AGENT" --config "$tmp/bad3.conf" > "$tmp/badconf3.txt" 2>&1
contains "a command-line-only key is refused" "$tmp/badconf3.txt" "$tmp/bad3.conf:1: 'help' is a command-line option only"
"$AGENT" --config "$tmp/none.conf" > "$tmp/noconf.txt" 2>&1; rc=$?
check "a missing config file is refused (exit $rc)" [ "$rc" -eq 2 ]
contains "and named" "$tmp/noconf.txt" "$tmp/none.conf: cannot open the config file"

# Every option --help names, but the command-line-only ones, is a key with
# a row in docs/config.md's table of the agent's keys.
{ "$AGENT" --help; [ "$CUDA_AGENT" = none ] || "$CUDA_AGENT" --help; } |
    grep -o -- '--[a-z][a-z0-9-]*' | sort -u | sed 's/^--//' |
    grep -vxE 'config|ready-fd|help|version|self-test|bytes|block-size|seed' > "$tmp/keys.txt"
sed -n '/^## The agent/,$p' "$src/docs/config.md" > "$tmp/config.md"
missing=""
for k in $(cat "$tmp/keys.txt"); do
    grep -qF "| \`$k\` |" "$tmp/config.md" || missing="$missing $k"
done
check "docs/config.md has every agent key ($(wc -l < "$tmp/keys.txt") keys; missing:${missing:- none})" [ -z "$missing" ]

if [ "$CUDA_AGENT" != none ]; then
    printf 'backend = host\nsocket = %s\nlog-file = %s\npinned-budget = 6M\nmapped-budget = 2M\n' \
        "$tmp/agent/d.sock" "$tmp/d.log" > "$tmp/d.conf"
    "$CUDA_AGENT" --config "$tmp/d.conf" > "$tmp/d.out" 2>&1 &
    p4=$!
    pids="$pids $p4"
    check "lease-agent: its own key (backend) and the server's from a config file" \
        wait_for 10 grep -q "serving $tmp/agent/d.sock" "$tmp/d.log"
    kill "$p4"; wait "$p4"
    printf 'self-test = yes\n' > "$tmp/st.conf"
    "$CUDA_AGENT" --config "$tmp/st.conf" > "$tmp/st.txt" 2>&1
    contains "lease-agent: self-test is no config key" "$tmp/st.txt" "'self-test' is a command-line option only"
else
    echo "lease-agent is not built (no CUDA toolkit): its config keys are not checked"
fi
finish
