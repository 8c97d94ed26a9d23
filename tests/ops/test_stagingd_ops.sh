#!/bin/sh
# stagingd as a service: READY=1 / STATUS= / STOPPING=1 over $NOTIFY_SOCKET
# (systemd's protocol, played by notify_listen), SIGHUP reopening the
# log-file after it was moved, every log line with a level and a
# subsystem, the metrics keys refused as they should be, and the control
# socket's JSON replies.
# usage: test_stagingd_ops.sh STAGINGD AGENT JSON_GET NOTIFY_LISTEN
STAGINGD=$1 AGENT=$2 JSON_GET=$3 NOTIFY_LISTEN=$4
LEASECTL=/nonexistent
. "$(dirname "$0")/lib.sh"

start_agent
"$STAGINGD" gen --out "$store" --size 4M --shard-size 1M --quiet

# ---- readiness, and the log file across SIGHUP ----
log=$tmp/stagingd.log
"$NOTIFY_LISTEN" "$tmp/notify.sock" 30 -- "$STAGINGD" run --control "$ctl_sock" \
    --agent "$agent_sock" --store "$store" --pinned-pool 4M --segment-size 2M --inflight 3 \
    --pages small --log-file "$log" > "$tmp/notify.txt" 2>&1 &
nl_pid=$!
pids="$pids $nl_pid"
check "READY=1 arrives" wait_for 10 grep -q "notify: READY=1" "$tmp/notify.txt"
contains "STATUS says where jobs come from" "$tmp/notify.txt" "notify: STATUS=serving jobs on $ctl_sock"
check "MAINPID is stagingd's" grep -q "notify: MAINPID=[0-9]" "$tmp/notify.txt"
sd=$(sed -n 's/^notify: MAINPID=//p' "$tmp/notify.txt")
check "the control socket answers once READY=1 was sent" "$STAGINGD" ctl --control "$ctl_sock" stats
"$STAGINGD" ctl --control "$ctl_sock" job > "$tmp/job1.txt" 2>&1
# The STATUS travels another socket, through notify_listen into the file:
# it may land just after the job's reply.
check "a job's verdict becomes the STATUS" \
    wait_for 10 grep -qF "notify: STATUS=job 1 verify: OK" "$tmp/notify.txt"

mv "$log" "$log.1"
kill -HUP "$sd"
check "SIGHUP: a new log file at the path" wait_for 5 test -s "$log"
contains "SIGHUP: said in the new file" "$log" "info: daemon: SIGHUP from pid"
contains "SIGHUP: reopened" "$log" "log file $log reopened"
contains "the moved file kept the lines before" "$log.1" "info: daemon: stagingd 0.1.0 ready"
"$STAGINGD" ctl --control "$ctl_sock" job > /dev/null 2>&1
contains "lines after SIGHUP go to the new file" "$log" "job 2: verify of $store started"
check "the moved file got none of them" sh -c "! grep -q 'job 2' '$log.1'"

"$STAGINGD" ctl --control "$ctl_sock" quit > /dev/null
wait "$nl_pid"; rc=$?
check "STOPPING=1 arrives and stagingd exits 0 (rc $rc)" [ "$rc" -eq 0 ]
contains "STOPPING=1" "$tmp/notify.txt" "notify: STOPPING=1"

# Every line: time, program[pid], a level, a subsystem, the message.
cat "$log.1" "$log" > "$tmp/all.log"
bad=$(grep -cvE '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+[+-][0-9]{4} stagingd\[[0-9]+\]: (error|warning|notice|info|debug): (daemon|control|job|client|pool|reader|metrics): ' "$tmp/all.log")
check "every log line has a level and a subsystem ($bad without)" [ "$bad" -eq 0 ]
[ "$bad" -eq 0 ] || grep -vE ': (error|warning|notice|info|debug): [a-z]+: ' "$tmp/all.log" | head -5

# ---- the metrics keys ----
"$STAGINGD" run --control "$tmp/c2.sock" --agent "$agent_sock" --metrics 0.0.0.0:9464 \
    --pages small > "$tmp/remote.txt" 2>&1; rc=$?
check "a non-loopback metrics address is refused (exit $rc)" [ "$rc" -eq 1 ]
contains "and says why and what allows it" "$tmp/remote.txt" "0.0.0.0:9464 is not a loopback address: metrics stay on this machine unless remote scrapes are allowed (metrics-remote = yes allows it)"
"$STAGINGD" run --control "$tmp/c2.sock" --agent "$agent_sock" --metrics nowhere > "$tmp/bad.txt" 2>&1; rc=$?
check "a malformed metrics address is a usage error (exit $rc)" [ "$rc" -eq 2 ]
contains "naming the key" "$tmp/bad.txt" "--metrics: expected HOST:PORT"
if [ "${LEASE_HAVE_MHD:-0}" = 1 ]; then
    printf 'metrics = 127.0.0.1:0\nlog-file = %s\n' "$tmp/cfg.log" > "$tmp/s.conf"
else
    echo "SKIP: built without libmicrohttpd: the config file names no metrics address"
    printf 'log-file = %s\n' "$tmp/cfg.log" > "$tmp/s.conf"
fi
"$STAGINGD" run --config "$tmp/s.conf" --control "$tmp/c3.sock" --agent "$agent_sock" \
    --pinned-pool 4M --segment-size 2M --pages small > /dev/null 2>&1 &
p3=$!
pids="$pids $p3"
if [ "${LEASE_HAVE_MHD:-0}" = 1 ]; then
    check "metrics and log-file from a config file" wait_for 10 grep -q "metrics: serving http://127.0.0.1:" "$tmp/cfg.log"
else
    check "log-file from a config file" wait_for 10 grep -q "ready: pool" "$tmp/cfg.log"
fi

# ---- the JSON replies ----
wait_for 10 sh -c "'$STAGINGD' ctl --control '$tmp/c3.sock' stats | grep -q ': ready'"
"$STAGINGD" ctl --control "$tmp/c3.sock" stats json > "$tmp/s.json"
jeq "stats json: the pool" "$tmp/s.json" pool.0.class PINNED
if [ "${LEASE_HAVE_MHD:-0}" = 1 ]; then
    jeq "stats json: the metrics key as given" "$tmp/s.json" config.metrics 127.0.0.1:0
    check "stats json: metrics_bound has the real port" sh -c "'$JSON_GET' config.metrics_bound < '$tmp/s.json' | grep -q '^127.0.0.1:[1-9]'"
fi
"$STAGINGD" ctl --control "$tmp/c3.sock" segments > "$tmp/seg.json"
jeq "segments: two PINNED and one MAPPED" "$tmp/seg.json" "segments#" 3
"$STAGINGD" ctl --control "$tmp/c3.sock" leases > "$tmp/l.json"
jeq "leases: none without a job" "$tmp/l.json" "leases#" 0
jeq "leases: no job" "$tmp/l.json" job null
"$STAGINGD" ctl --control "$tmp/c3.sock" stats json extra > "$tmp/x.txt" 2>&1; rc=$?
check "a command with a stray word is refused" [ "$rc" -eq 1 ]
finish
