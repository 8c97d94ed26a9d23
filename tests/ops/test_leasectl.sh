#!/bin/sh
# leasectl against a real lease-agent-host and stagingd on private sockets:
# every command in each format, the agent's lease and segment lists (1.4,
# LT_CAP_INTROSPECT) with a job holding leases, leases held while the agent
# is frozen, doctor's OK/FIX lines and exit status, and that its
# connections leave stagingd's untouched.
# usage: test_leasectl.sh STAGINGD AGENT LEASECTL JSON_GET
STAGINGD=$1 AGENT=$2 LEASECTL=$3 JSON_GET=$4
. "$(dirname "$0")/lib.sh"

start_agent
start_stagingd
L="$LEASECTL --agent $agent_sock --stagingd $ctl_sock"

# ---- status ----
$L status > "$tmp/status.txt"; rc=$?
check "status exits 0 with both up" [ "$rc" -eq 0 ]
contains "status: the agent" "$tmp/status.txt" "agent $agent_sock: up, \"ga-host\" (HOST BACKEND: no GPU), protocol v1"
contains "status: budgets" "$tmp/status.txt" "budgets: PINNED 6.0 MiB, MAPPED 2.0 MiB, STAGED unbounded"
contains "status: stagingd" "$tmp/status.txt" "stagingd $ctl_sock: up, 0.1.0"
contains "status: stagingd's agent" "$tmp/status.txt" "agent 0 $agent_sock: ready, connection 1"
$L status --json > "$tmp/status.json"
jeq "status --json" "$tmp/status.json" agents.0.up true
jeq "status --json" "$tmp/status.json" agents.0.host_backend true
jeq "status --json" "$tmp/status.json" agents.0.budgets.PINNED 6291456
jeq "status --json" "$tmp/status.json" agents.0.budgets.STAGED null
jeq "status --json" "$tmp/status.json" stagingd.agents.0.state ready

# ---- stats, after a job ----
"$STAGINGD" ctl --control "$ctl_sock" job > "$tmp/job.txt" 2>&1
check "a job ran" grep -q "4 of 4 done: 4 clean" "$tmp/job.txt"
$L stats > "$tmp/stats.txt"; rc=$?
check "stats exits 0" [ "$rc" -eq 0 ]
contains "stats: the class table" "$tmp/stats.txt" "class   segments  registered  leases  leased  registrations"
# 4 segments: the pool's 3 and the agent's words area (LT_CAP_WORDS)
contains "stats: the client table" "$tmp/stats.txt" "stagingd         4     6.0 MiB"
contains "stats: stagingd's totals" "$tmp/stats.txt" "totals: 4 shard(s) (4 clean, 0 bad, 0 failed, 0 not run); 4.0 MiB staged"
$L stats --json > "$tmp/stats.json"
jeq "stats --json: classes" "$tmp/stats.json" agents.0.classes.1.class PINNED
jeq "stats --json: PINNED segments" "$tmp/stats.json" agents.0.classes.1.segments 2
jeq "stats --json: one client, leasectl left out" "$tmp/stats.json" "agents.0.per_client#" 1
jeq "stats --json: the client" "$tmp/stats.json" agents.0.per_client.0.name stagingd
jeq "stats --json: leases granted" "$tmp/stats.json" agents.0.per_client.0.leases_granted 4
jeq "stats --json: stagingd's pool" "$tmp/stats.json" stagingd.pool.0.class PINNED
jeq "stats --json: stagingd's totals" "$tmp/stats.json" stagingd.totals.submits 4

# ---- leases: freeze the agent while a job holds some ----
"$STAGINGD" gen --out "$tmp/big" --size 128M --shard-size 1M --quiet
held=0
for try in 1 2 3 4 5 6 7 8; do
    "$STAGINGD" ctl --control "$ctl_sock" job "$tmp/big" both > "$tmp/bigjob.txt" 2>&1 &
    job=$!
    # A 128 MiB job may take less than 0.2 s on an idle machine: freeze it
    # early and often until one freeze finds leases held.
    for poll in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
        sleep 0.02
        kill -STOP "$agent_pid"
        "$STAGINGD" ctl --control "$ctl_sock" leases > "$tmp/leases.raw"
        if [ "$("$JSON_GET" "leases#" < "$tmp/leases.raw")" -gt 0 ]; then
            held=1
            break
        fi
        kill -CONT "$agent_pid"
    done
    [ "$held" -eq 1 ] && break
    wait "$job"
done
check "a job holds leases while the agent is frozen" [ "$held" -eq 1 ]
$L --timeout 300 leases > "$tmp/leases.txt"; rc=$?
check "leases exits 1 while the agent does not answer" [ "$rc" -eq 1 ]
contains "leases: the frozen agent" "$tmp/leases.txt" "DOWN: the agent at $agent_sock did not answer HELLO within 300 ms"
contains "leases: stagingd's table" "$tmp/leases.txt" "agent  lease  class   segment  offset  length   held"
contains "leases: a shard" "$tmp/leases.txt" "shard-0"
$L --timeout 300 leases --json > "$tmp/leases.json"
# The agent froze at some point of each slot's cycle: granted with work in
# flight, or with its work done and the release sent.
state=$("$JSON_GET" stagingd.leases.0.state < "$tmp/leases.json")
case $state in
held | release-wanted | releasing) pass "leases --json: a lease's state ($state)" ;;
*) fail "leases --json: state '$state'" ;;
esac
jeq "leases --json: class" "$tmp/leases.json" stagingd.leases.0.class PINNED
inflight=$("$JSON_GET" stagingd.leases.0.ops_in_flight < "$tmp/leases.json")
todo=$("$JSON_GET" stagingd.leases.0.ops_todo < "$tmp/leases.json")
check "leases --json: ops in flight ($inflight) among those without a result ($todo), at most 2" \
    [ "$inflight" -le "$todo" -a "$todo" -le 2 ]
check "leases --json: held for some time" sh -c "'$JSON_GET' stagingd.leases.0.held_s < '$tmp/leases.json' | grep -q '^[0-9]'"
kill -CONT "$agent_pid"
wait "$job"
check "the frozen job still finishes clean" grep -q "128 of 128 done: 128 clean" "$tmp/bigjob.txt"
$L leases > "$tmp/leases2.txt"
check "leases: the agent lists its leases, no 'does not offer'" sh -c "! grep -q 'does not offer' '$tmp/leases2.txt'"
contains "leases: the agent holds none now" "$tmp/leases2.txt" "no lease held on the agent"
contains "leases: nothing held now" "$tmp/leases2.txt" "no lease held (no job running"

# ---- leases: the agent's own list while a job holds some ----
listed=0
for try in 1 2 3 4 5 6 7 8; do
    "$STAGINGD" ctl --control "$ctl_sock" job "$tmp/big" both > "$tmp/bigjob2.txt" 2>&1 &
    job=$!
    # Polled early and often: the job may take less than 0.2 s.
    for poll in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
        sleep 0.02
        $L leases --json > "$tmp/alist.json"
        n=$("$JSON_GET" "agents.0.leases#" < "$tmp/alist.json" 2>/dev/null || echo 0)
        if [ "${n:-0}" -gt 0 ]; then
            # The text listing is a second round trip: the job may have
            # released its leases in between. Both must have seen some.
            $L leases > "$tmp/alist.txt"
            grep -q "lease(s) on the agent (LEASE_LIST" "$tmp/alist.txt" || continue
            listed=1
            $L segments > "$tmp/slist.txt"
            $L segments --json > "$tmp/slist.json"
            break
        fi
    done
    wait "$job"
    [ "$listed" -eq 1 ] && break
done
check "leases --json: the agent listed a job's leases" [ "$listed" -eq 1 ]
jeq "leases --json: the holder" "$tmp/alist.json" agents.0.leases.0.client stagingd
jeq "leases --json: the class" "$tmp/alist.json" agents.0.leases.0.class PINNED
len=$("$JSON_GET" agents.0.leases.0.length < "$tmp/alist.json")
check "leases --json: a lease covers a 1 MiB shard and its checksums ($len bytes)" [ "${len:-0}" -ge 1048576 ]
state=$("$JSON_GET" agents.0.leases.0.state < "$tmp/alist.json")
case $state in
held | releasing) pass "leases --json: the agent's state ($state)" ;;
*) fail "leases --json: the agent's state '$state'" ;;
esac
check "leases --json: an age" sh -c "'$JSON_GET' agents.0.leases.0.age_s < '$tmp/alist.json' | grep -q '^[0-9]'"
contains "leases: the agent's table" "$tmp/alist.txt" "client  name      lease"
contains "leases: its title" "$tmp/alist.txt" "lease(s) on the agent (LEASE_LIST"
contains "segments: the agent's table" "$tmp/slist.txt" "segment  client  name      class   size"
# the agent lists the pool's 3 and stagingd's words area (LT_CAP_WORDS)
contains "segments: its title" "$tmp/slist.txt" "4 segment(s) on the agent (SEGMENT_LIST)"
jeq "segments --json: the agent's four" "$tmp/slist.json" "agents.0.segments#" 4
jeq "segments --json: registered" "$tmp/slist.json" agents.0.segments.0.registered true
jeq "segments --json: the holder" "$tmp/slist.json" agents.0.segments.0.client stagingd

# ---- segments ----
$L segments > "$tmp/segments.txt"; rc=$?
check "segments exits 0" [ "$rc" -eq 0 ]
check "segments: the agent lists its segments, no 'does not offer'" sh -c "! grep -q 'does not offer' '$tmp/segments.txt'"
contains "segments: the agent's" "$tmp/segments.txt" "4 segment(s) on the agent (SEGMENT_LIST)"
contains "segments: stagingd's" "$tmp/segments.txt" "segment  class   size     pages  THP bytes"
$L segments --json > "$tmp/segments.json"
jeq "segments --json: stagingd's three" "$tmp/segments.json" "stagingd.segments#" 3
jeq "segments --json: accepted" "$tmp/segments.json" stagingd.agents.0.segments_accepted 3
jeq "segments --json: the agent's note" "$tmp/segments.json" agents.0.up true
jeq "segments --json: the agent's list" "$tmp/segments.json" "agents.0.segments#" 4
# the words area (4 KiB) and the pool's three, in the agent's order
pinned_seen=0
for i in 0 1 2 3; do
    [ "$("$JSON_GET" "agents.0.segments.$i.size" < "$tmp/segments.json" 2>/dev/null)" = 2097152 ] &&
        pinned_seen=1
done
check "segments --json: a PINNED one of 2 MiB" [ "$pinned_seen" -eq 1 ]

# ---- --prometheus ----
if command -v promtool > /dev/null; then
    for c in status stats leases segments doctor; do
        $L $c --prometheus > "$tmp/$c.prom"
        if promtool check metrics < "$tmp/$c.prom" > "$tmp/$c.promtool" 2>&1; then
            pass "$c --prometheus passes promtool check metrics"
        else
            fail "$c --prometheus: promtool check metrics:"; cat "$tmp/$c.promtool"
        fi
    done
    contains "stats --prometheus: a class series" "$tmp/stats.prom" "lease_agent_registered_bytes{agent=\"$agent_sock\",class=\"PINNED\"} 4194304"
    contains "stats --prometheus: a client series" "$tmp/stats.prom" "lease_agent_client_leases_granted_total{agent=\"$agent_sock\",client=\"stagingd\""
    contains "segments --prometheus: one segment's size" "$tmp/segments.prom" "lease_agent_segment_size_bytes{agent=\"$agent_sock\",client=\"stagingd\",segment="
else
    echo "SKIP: promtool not installed (scripts/install-deps.sh installs prometheus)"
fi

# ---- top ----
$L top --count 2 --interval 0.2 > "$tmp/top.txt"; rc=$?
check "top --count 2 exits 0" [ "$rc" -eq 0 ]
check "top: two frames" [ "$(grep -c '^leasectl top' "$tmp/top.txt")" -eq 2 ]
contains "top: rates in the second frame" "$tmp/top.txt" "leases/s"

# ---- doctor ----
$L doctor --backend host --store "$store" > "$tmp/doctor.txt"; rc=$?
bad=$(grep -cvE '^(OK|FIX) [a-z_]+: ' "$tmp/doctor.txt")
check "doctor: every line is OK or FIX" [ "$bad" -eq 0 ]
for n in driver device agent agent_socket memlock io_uring seccomp hugepages memfd dev_shm memory fd_limit store_odirect stagingd; do
    check "doctor checks $n" grep -qE "^(OK|FIX) $n: " "$tmp/doctor.txt"
done
fixes=$(grep -c '^FIX' "$tmp/doctor.txt")
check "doctor exits 1 exactly when a line says FIX ($fixes)" [ "$rc" -eq $([ "$fixes" -gt 0 ] && echo 1 || echo 0) ]
grep '^FIX' "$tmp/doctor.txt" | grep -v ' -> ' && fail "a FIX line without '-> what to change'"
contains "doctor: host backend needs no driver" "$tmp/doctor.txt" "OK driver: not needed: the host backend serves"
contains "doctor: the socket" "$tmp/doctor.txt" "OK agent_socket: $agent_sock mode 0600"
contains "doctor: the store" "$tmp/doctor.txt" "store_odirect: $store"
contains "doctor: placement, the real machine" "$tmp/doctor.txt" "placement: agent 0 $agent_sock"
# placement on a fake two-node machine (LEASE_SYSFS_ROOT): a second host
# agent named after GPU 0000:41:00.0, on node 1; the first has no bus id
fake=$tmp/sysfs
mkdir -p "$fake/devices/system/node/node0" "$fake/devices/system/node/node1" \
    "$fake/bus/pci/devices/0000:41:00.0" "$tmp/agent2"
chmod 0700 "$tmp/agent2"
echo "0" > "$fake/devices/system/node/node0/cpulist"
echo "1-3" > "$fake/devices/system/node/node1/cpulist"
echo "1" > "$fake/bus/pci/devices/0000:41:00.0/numa_node"
"$AGENT" --socket "$tmp/agent2/agent.sock" --pinned-budget 6M --mapped-budget 2M \
    --name "ga-host 0000:41:00.0" > "$tmp/agent2.log" 2>&1 &
agent2_pid=$!
pids="$pids $agent2_pid"
wait_for 10 test -S "$tmp/agent2/agent.sock" || fail "the second agent did not start"
LEASE_SYSFS_ROOT=$fake $LEASECTL --agent "$agent_sock" --agent "$tmp/agent2/agent.sock" \
    doctor --backend host > "$tmp/doctor3.txt"
contains "doctor: placement of a host agent" "$tmp/doctor3.txt" \
    "OK placement: agent 0 $agent_sock: host backend, no GPU: nothing to place"
contains "doctor: placement on node 1" "$tmp/doctor3.txt" \
    "OK placement: agent 1 $tmp/agent2/agent.sock \"ga-host 0000:41:00.0\": GPU 0000:41:00.0 on node 1 of 2: 3 CPU(s)"
mkdir -p "$tmp/sysfs1/devices/system/node/node0"
LEASE_SYSFS_ROOT=$tmp/sysfs1 $LEASECTL --agent "$tmp/agent2/agent.sock" doctor --backend host > "$tmp/doctor4.txt"
contains "doctor: one node" "$tmp/doctor4.txt" "one NUMA node: nothing to place"
kill "$agent2_pid"
chmod 0666 "$agent_sock"
$L doctor --backend host > "$tmp/doctor2.txt"; rc=$?
chmod 0600 "$agent_sock"
check "doctor exits 1 on a world-writable socket" [ "$rc" -eq 1 ]
contains "doctor: FIX agent_socket" "$tmp/doctor2.txt" "FIX agent_socket: $agent_sock is mode 0666: anyone may connect -> "
$L doctor --backend host --pinned-budget 1T > "$tmp/doctor3.txt"
contains "doctor: FIX memlock for budgets past RLIMIT_MEMLOCK" "$tmp/doctor3.txt" "FIX memlock: the agent's RLIMIT_MEMLOCK"
contains "doctor: memlock names the unit's key" "$tmp/doctor3.txt" "-> LimitMEMLOCK="
$L doctor --backend cuda > "$tmp/doctor4.txt"; rc=$?
if [ -e /proc/driver/nvidia/version ] || command -v nvidia-smi > /dev/null; then
    check "doctor --backend cuda ran its driver check" grep -qE '^(OK|FIX) driver: ' "$tmp/doctor4.txt"
else
    contains "doctor: no driver here, said, not a crash" "$tmp/doctor4.txt" "FIX driver: no NVIDIA driver found (/proc/driver/nvidia/version absent"
    check "doctor --backend cuda exits 1 without a driver" [ "$rc" -eq 1 ]
fi
$L doctor --json --backend host > "$tmp/doctor.json"
jeq "doctor --json" "$tmp/doctor.json" checks.0.check driver

# ---- nothing answers, usage ----
$LEASECTL --agent "$tmp/nobody.sock" status > "$tmp/none.txt"; rc=$?
check "status exits 1 when no agent answers" [ "$rc" -eq 1 ]
contains "status: no agent" "$tmp/none.txt" "DOWN: no agent answers at $tmp/nobody.sock"
$LEASECTL frobnicate > /dev/null 2>&1; rc=$?
check "an unknown command exits 2" [ "$rc" -eq 2 ]
$LEASECTL --count 0 top > /dev/null 2>&1; rc=$?
check "a bad value exits 2" [ "$rc" -eq 2 ]

# ---- leasectl disturbs no real client ----
"$STAGINGD" ctl --control "$ctl_sock" stats json > "$tmp/sd.json"
jeq "stagingd kept its first connection through every leasectl call" "$tmp/sd.json" agents.0.connection 1
jeq "stagingd's agent is still ready" "$tmp/sd.json" agents.0.state ready
finish
