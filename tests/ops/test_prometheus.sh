#!/bin/bash
# A real Prometheus scrapes stagingd: stagingd serves /metrics on loopback,
# Debian's prometheus server scrapes it every second, and its HTTP API
# (promtool query instant) must return our series with the job's values;
# `promtool check metrics` must pass on what stagingd serves. bash: the
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

start_agent
start_stagingd --metrics 127.0.0.1:0 --log-file "$tmp/sd.log"
addr=$(sed -n 's|.*metrics: serving http://\([0-9.:]*\)/metrics.*|\1|p' "$tmp/sd.log" | head -1)
check "stagingd says where /metrics is ($addr)" [ -n "$addr" ]
"$STAGINGD" ctl --control "$ctl_sock" job > "$tmp/job.txt" 2>&1
check "a job ran" grep -q "4 of 4 done: 4 clean" "$tmp/job.txt"

# GET /metrics over a bash /dev/tcp socket; the body after the blank line.
scrape() {
    exec 3<> "/dev/tcp/${addr%:*}/${addr##*:}" || return 1
    printf 'GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n' "$addr" >&3
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
[ "$failed" -eq 0 ] || { echo "prometheus log:"; tail -20 "$tmp/prometheus.log"; }
finish
