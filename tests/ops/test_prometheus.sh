#!/bin/bash
# A real Prometheus scrapes stagingd and the agent (lease-agent-host, the
# same server code as lease-agent): each serves /metrics on loopback,
# Debian's prometheus server scrapes both every second, and its HTTP API
# (promtool query instant) must return our series with the job's values;
# `promtool check metrics` must pass on what each serves. bash: the
# scrape of our own endpoint is a /dev/tcp request, so no curl is needed.
# usage: test_prometheus.sh STAGINGD AGENT JSON_GET
STAGINGD=$1 AGENT=$2 JSON_GET=$3
LEASECTL=/nonexistent
if ! command -v prometheus > /dev/null || ! command -v promtool > /dev/null; then
    # scripts/install-deps.sh installs the prometheus package; CI runs it first.
    echo "SKIP: prometheus and promtool are not installed (apt-get install prometheus)"
    exit 77
fi
. "$(dirname "$0")/lib.sh"

start_agent --metrics 127.0.0.1:0
agent_addr=$(sed -n 's|.*metrics: serving http://\([0-9.:]*\)/metrics.*|\1|p' "$tmp/agent.log" | head -1)
check "the agent says where /metrics is ($agent_addr)" [ -n "$agent_addr" ]
start_stagingd --metrics 127.0.0.1:0 --log-file "$tmp/sd.log"
addr=$(sed -n 's|.*metrics: serving http://\([0-9.:]*\)/metrics.*|\1|p' "$tmp/sd.log" | head -1)
check "stagingd says where /metrics is ($addr)" [ -n "$addr" ]
"$STAGINGD" ctl --control "$ctl_sock" job > "$tmp/job.txt" 2>&1
check "a job ran" grep -q "4 of 4 done: 4 clean" "$tmp/job.txt"

# GET /metrics of ${1:-$addr} over a bash /dev/tcp socket; the body after
# the blank line.
scrape() {
    a=${1:-$addr}
    exec 3<> "/dev/tcp/${a%:*}/${a##*:}" || return 1
    printf 'GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n' "$a" >&3
    cat <&3 > "$tmp/http.txt"
    exec 3<&-
    sed '1,/^\r$/d' "$tmp/http.txt" > "$tmp/metrics.txt"
}
# Counters are published every half second: wait for the job's.
scraped_job() { scrape && grep -q '^stagingd_staged_bytes_total 4194304' "$tmp/metrics.txt"; }
check "stagingd's /metrics shows the job" wait_for 5 scraped_job
scrape
contains "HTTP 200" "$tmp/http.txt" "200 OK"
contains "the exposition content type" "$tmp/http.txt" "Content-Type: text/plain; version=0.0.4; charset=utf-8"
if promtool check metrics < "$tmp/metrics.txt" > "$tmp/promtool.txt" 2>&1; then
    pass "promtool check metrics passes on stagingd's /metrics"
else
    fail "promtool check metrics:"; cat "$tmp/promtool.txt"
fi
for s in 'stagingd_leases_granted_total{agent="'"$agent_sock"'",class="PINNED"} 4' \
         'stagingd_completions_total{op="checksum_verify",status="OK"} 4' \
         'stagingd_doorbell_submits_total 4' 'stagingd_jobs_total{op="verify",result="ok"} 1' \
         'stagingd_shards_total{result="clean"} 4' 'stagingd_agent_ready{agent="'"$agent_sock"'"} 1' \
         'stagingd_lease_hold_seconds_count 4' 'stagingd_pool_capacity_bytes{class="PINNED"} 4194304'; do
    contains "series: $s" "$tmp/metrics.txt" "$s"
done

# The agent's /metrics after the job: what stagingd registered and ran.
scrape "$agent_addr"
contains "the agent: HTTP 200" "$tmp/http.txt" "200 OK"
if promtool check metrics < "$tmp/metrics.txt" > "$tmp/promtool.txt" 2>&1; then
    pass "promtool check metrics passes on the agent's /metrics"
else
    fail "promtool check metrics (agent):"; cat "$tmp/promtool.txt"
fi
for s in 'lease_agent_registrations_total{class="PINNED"} 2' \
         'lease_agent_registrations_total{class="MAPPED"} 2' \
         'lease_agent_segments{class="PINNED"} 2' 'lease_agent_budget_bytes{class="PINNED"} 6291456' \
         'lease_agent_budget_refusals_total{class="PINNED"} 0' \
         'lease_agent_submits_total{op="checksum_verify"} 4' \
         'lease_agent_completions_total{op="checksum_verify",status="OK"} 4' \
         'lease_agent_release_completes_total{status="OK"} 4' \
         'lease_agent_doorbell_waits_total ' 'lease_agent_clients 1' \
         'lease_agent_client_registered_bytes{client="1",' 'lease_agent_client_leases_granted_total{client="1",'; do
    contains "agent series: $s" "$tmp/metrics.txt" "$s"
done
# The leases cover the shards' data and their checksum tables: more than 4 MiB.
check "agent: bytes of completed work counted" grep -qE '^lease_agent_completed_bytes_total\{op="checksum_verify"\} 419[0-9]{4}$' "$tmp/metrics.txt"
check "agent: registration time counted" grep -qE '^lease_agent_registration_seconds_total\{class="PINNED"\} [0-9.e-]+$' "$tmp/metrics.txt"

# A free loopback port for Prometheus's own API.
port=0
for p in $(shuf -i 20000-60000 -n 20); do
    if ! (exec 4<> "/dev/tcp/127.0.0.1/$p") 2> /dev/null; then port=$p; break; fi
done
check "a free port for prometheus ($port)" [ "$port" -ne 0 ]
cat > "$tmp/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: stagingd
    static_configs:
      - targets: ['$addr']
  - job_name: lease-agent
    static_configs:
      - targets: ['$agent_addr']
YML
check "promtool check config" promtool check config "$tmp/prometheus.yml"
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
    --web.listen-address="127.0.0.1:$port" --log.level=warn > "$tmp/prometheus.log" 2>&1 &
pids="$pids $!"
api=http://127.0.0.1:$port
query() { promtool query instant "$api" "$1" 2> /dev/null; }
scraped_up() { query 'up{job="stagingd"}' | grep -q '=> 1 @'; }
check "Prometheus scraped stagingd: up == 1" wait_for 20 scraped_up
query 'stagingd_staged_bytes_total' > "$tmp/q1.txt"
contains "the API returns bytes staged" "$tmp/q1.txt" "=> 4194304 @"
query 'sum(stagingd_leases_granted_total)' > "$tmp/q2.txt"
contains "the API returns leases granted" "$tmp/q2.txt" "=> 4 @"
query 'stagingd_pool_capacity_bytes{class="PINNED"}' > "$tmp/q3.txt"
contains "the API returns a labelled gauge" "$tmp/q3.txt" "=> 4194304 @"
scraped_agent() { query 'up{job="lease-agent"}' | grep -q '=> 1 @'; }
check "Prometheus scraped the agent: up == 1" wait_for 20 scraped_agent
query 'sum(lease_agent_completions_total{status="OK"})' > "$tmp/q4.txt"
contains "the API returns the agent's completions" "$tmp/q4.txt" "=> 4 @"
query 'lease_agent_registrations_total{class="PINNED"}' > "$tmp/q5.txt"
contains "the API returns the agent's registrations" "$tmp/q5.txt" "=> 2 @"
[ "$failed" -eq 0 ] || { echo "prometheus log:"; tail -20 "$tmp/prometheus.log"; cat "$tmp/metrics.txt" | grep -v "^#"; }
finish
