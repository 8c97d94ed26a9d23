/* stagingd's /metrics (docs/operations.md lists every series): the
 * lease_metrics registry, fed two ways. Events the client's callbacks see
 * (grants, refusals, releases, completions, segment refusals) are counted
 * as they happen; state the daemon already keeps (pool, reader, agents,
 * job counters) is copied in by the loop thread every SD_DAEMON__PUBLISH_MS,
 * so the HTTP thread never reads the daemon's structures. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon_internal.h"
#include "lease/client.h"
#include "lease_metrics/metrics.h"
#include "stagingd/reader.h"

#ifndef STAGINGD_VERSION
#define STAGINGD_VERSION "?"
#endif

#define SD_DAEMON__PUBLISH_MS 500
#define SD_DAEMON__RATE_NS 1000000000ull /* the staging rate's window */
#define SD_NCLASS 4                      /* lt_class values 0..3 */

struct sd_daemon__metrics {
    struct lm_registry *reg;
    struct lm_server *srv;
    uint64_t next_ns;
    uint64_t rate_t_ns, rate_bytes;
    /* counted at events */
    struct lm_family *f_granted, *f_refused, *f_released, *f_completions, *f_seg_refused, *f_jobs;
    struct lm_series *granted[SD_CONFIG_AGENTS_MAX][SD_NCLASS];
    struct lm_series *released[SD_CONFIG_AGENTS_MAX];
    struct lm_series *hold;
    /* copied in by publish */
    struct lm_series *staged_bytes, *reads, *read_failures, *rate, *running, *queued, *done;
    struct lm_series *pool_capacity[SD_NCLASS], *pool_in_use[SD_NCLASS], *pool_high[SD_NCLASS],
        *pool_segments[SD_NCLASS], *pool_huge[SD_NCLASS], *pool_failures[SD_NCLASS];
    struct lm_series *ready[SD_CONFIG_AGENTS_MAX], *attempts[SD_CONFIG_AGENTS_MAX],
        *connections[SD_CONFIG_AGENTS_MAX], *held[SD_CONFIG_AGENTS_MAX],
        *in_flight[SD_CONFIG_AGENTS_MAX], *accepted[SD_CONFIG_AGENTS_MAX];
    struct lm_series *shards[4], *submits, *bell_submits, *resubmits, *lost, *fallback, *bad_blocks;
};

static const char *const sd_daemon__results[4] = {"clean", "bad", "failed", "not_run"};

/* A protocol code as a label value: "OK", "BUDGET" (lt_error_name without
 * its "LT_E_" / "LT_" prefix). */
static const char *sd_daemon__code(uint32_t code)
{
    const char *n = lt_error_name(code);
    if (strncmp(n, "LT_E_", 5) == 0)
        return n + 5;
    return strncmp(n, "LT_", 3) == 0 ? n + 3 : n;
}

/* One family, and its series for @values (NULL: the family's only one). */
static int sd_daemon__family(struct lm_registry *reg, enum lm_type type, const char *name,
                             const char *help, const char *const *labels, struct lm_family **f_p)
{
    static const double hold_buckets[] = {0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05,
                                          0.1,    0.5,    1,     5,     30};
    size_t nb = type == LM_HISTOGRAM ? sizeof hold_buckets / sizeof hold_buckets[0] : 0;
    return lm_family_add(reg, type, name, help, labels, nb ? hold_buckets : NULL, nb, f_p);
}

static struct lm_series *sd_daemon__series(struct lm_family *f, const char *const *values)
{
    struct lm_series *s = NULL;
    if (f && lm_series_get(f, values, &s) < 0)
        return NULL;
    return s;
}

/* The families without per-event labels, and their series. */
static int sd_daemon__declare(struct sd_daemon *d, struct sd_daemon__metrics *m)
{
    struct lm_registry *reg = m->reg;
    struct lm_family *f;
    int rc = 0;
    const char *const agent_l[] = {"agent", NULL}, *const class_l[] = {"class", NULL};
    const char *const version_l[] = {"version", NULL}, *const result_l[] = {"result", NULL};
#define ONE(type, name, help, dst)                                                                 \
    do {                                                                                           \
        if (rc == 0 && (rc = sd_daemon__family(reg, type, name, help, NULL, &f)) == 0)             \
            (dst) = sd_daemon__series(f, NULL);                                                    \
    } while (0)
#define FAM(type, name, help, labels, dst)                                                         \
    do {                                                                                           \
        if (rc == 0)                                                                               \
            rc = sd_daemon__family(reg, type, name, help, labels, &(dst));                         \
    } while (0)

    FAM(LM_GAUGE, "stagingd_info", "The running stagingd's version (value 1).", version_l, f);
    if (rc == 0) {
        const char *v[] = {STAGINGD_VERSION, NULL};
        lm_gauge_set(sd_daemon__series(f, v), 1);
    }
    struct lm_series *start = NULL;
    ONE(LM_GAUGE, "stagingd_start_time_seconds", "When stagingd started, seconds since the epoch.",
        start);
    if (start)
        lm_gauge_set(start, (double)time(NULL));
    ONE(LM_COUNTER, "stagingd_staged_bytes_total",
        "Shard bytes the staging reader landed in pool memory.", m->staged_bytes);
    ONE(LM_COUNTER, "stagingd_reads_total", "Read operations the staging reader issued.", m->reads);
    ONE(LM_COUNTER, "stagingd_read_failures_total", "Staging reads that failed.", m->read_failures);
    ONE(LM_GAUGE, "stagingd_staging_rate_bytes_per_second",
        "Bytes staged per second over the last second (GB/s x 1e9).", m->rate);
    ONE(LM_GAUGE, "stagingd_jobs_running", "Jobs running (0 or 1).", m->running);
    ONE(LM_GAUGE, "stagingd_jobs_queued", "Jobs waiting behind the running one.", m->queued);
    FAM(LM_COUNTER, "stagingd_jobs_total", "Jobs finished, by op and result.",
        ((const char *const[]){"op", "result", NULL}), m->f_jobs);

    struct lm_family *cap, *use, *high, *segs, *huge, *fail;
    FAM(LM_GAUGE, "stagingd_pool_capacity_bytes", "Bytes in the pool's segments, by class.",
        class_l, cap);
    FAM(LM_GAUGE, "stagingd_pool_in_use_bytes", "Pool bytes held by live buffers, by class.",
        class_l, use);
    FAM(LM_GAUGE, "stagingd_pool_high_water_bytes", "Most pool bytes in use at once, by class.",
        class_l, high);
    FAM(LM_GAUGE, "stagingd_pool_segments", "Pool segments, by class.", class_l, segs);
    FAM(LM_GAUGE, "stagingd_pool_huge_segments",
        "Pool segments on 2 MiB pages (hugetlb or shmem THP), by class.", class_l, huge);
    FAM(LM_COUNTER, "stagingd_pool_alloc_failures_total",
        "Buffer allocations the pool could not satisfy, by class.", class_l, fail);
    for (int c = LT_CLASS_PINNED; rc == 0 && c <= LT_CLASS_MAPPED; c++) {
        const char *v[] = {lt_class_name((uint32_t)c), NULL};
        m->pool_capacity[c] = sd_daemon__series(cap, v);
        m->pool_in_use[c] = sd_daemon__series(use, v);
        m->pool_high[c] = sd_daemon__series(high, v);
        m->pool_segments[c] = sd_daemon__series(segs, v);
        m->pool_huge[c] = sd_daemon__series(huge, v);
        m->pool_failures[c] = sd_daemon__series(fail, v);
    }

    struct lm_family *ready, *att, *conn, *held, *infl, *acc;
    FAM(LM_GAUGE, "stagingd_agent_ready",
        "1 while the agent is connected with every segment answered.", agent_l, ready);
    FAM(LM_COUNTER, "stagingd_agent_connect_attempts_total", "connect() calls to the agent.",
        agent_l, att);
    FAM(LM_COUNTER, "stagingd_agent_connections_total", "Connections to the agent established.",
        agent_l, conn);
    FAM(LM_GAUGE, "stagingd_agent_leases_held", "Leases held on the agent's current connection.",
        agent_l, held);
    FAM(LM_GAUGE, "stagingd_agent_requests_in_flight", "Requests awaiting the agent's answer.",
        agent_l, infl);
    FAM(LM_GAUGE, "stagingd_agent_segments_accepted",
        "Pool segments the agent accepted (registered) on this connection.", agent_l, acc);
    FAM(LM_COUNTER, "stagingd_leases_granted_total",
        "Leases granted, by agent and the class served (STAGED: the pin budget's fallback).",
        ((const char *const[]){"agent", "class", NULL}), m->f_granted);
    FAM(LM_COUNTER, "stagingd_leases_refused_total", "Lease entries refused, by agent and code.",
        ((const char *const[]){"agent", "code", NULL}), m->f_refused);
    FAM(LM_COUNTER, "stagingd_leases_released_total",
        "Leases released (RELEASE_COMPLETE received), by agent.", agent_l, m->f_released);
    FAM(LM_COUNTER, "stagingd_segment_refusals_total",
        "Segment offers the agent refused, by agent, class and code (BUDGET, MEMLOCK: budgets).",
        ((const char *const[]){"agent", "class", "code", NULL}), m->f_seg_refused);
    FAM(LM_COUNTER, "stagingd_completions_total", "Work completions received, by op and status.",
        ((const char *const[]){"op", "status", NULL}), m->f_completions);
    struct lm_family *hold = NULL;
    FAM(LM_HISTOGRAM, "stagingd_lease_hold_seconds",
        "Time from a lease's grant to its RELEASE_COMPLETE.", NULL, hold);
    m->hold = sd_daemon__series(hold, NULL);
    for (unsigned a = 0; rc == 0 && a < d->cfg.nagents; a++) {
        const char *v[] = {d->cfg.agents[a], NULL};
        m->ready[a] = sd_daemon__series(ready, v);
        m->attempts[a] = sd_daemon__series(att, v);
        m->connections[a] = sd_daemon__series(conn, v);
        m->held[a] = sd_daemon__series(held, v);
        m->in_flight[a] = sd_daemon__series(infl, v);
        m->accepted[a] = sd_daemon__series(acc, v);
        m->released[a] = sd_daemon__series(m->f_released, v);
        for (int c = LT_CLASS_STAGED; c <= LT_CLASS_MAPPED; c++) {
            const char *vc[] = {d->cfg.agents[a], lt_class_name((uint32_t)c), NULL};
            m->granted[a][c] = sd_daemon__series(m->f_granted, vc);
        }
    }

    struct lm_family *shards;
    FAM(LM_COUNTER, "stagingd_shards_total", "Shards with a result, by result.", result_l, shards);
    for (int i = 0; rc == 0 && i < 4; i++) {
        const char *v[] = {sd_daemon__results[i], NULL};
        m->shards[i] = sd_daemon__series(shards, v);
    }
    ONE(LM_COUNTER, "stagingd_submits_total", "Work submitted to agents.", m->submits);
    ONE(LM_COUNTER, "stagingd_doorbell_submits_total",
        "Submits queued behind a doorbell the shard's read rings.", m->bell_submits);
    ONE(LM_COUNTER, "stagingd_resubmits_total", "Work submitted again after an agent was lost.",
        m->resubmits);
    ONE(LM_COUNTER, "stagingd_leases_lost_total", "Leases lost with their agent's connection.",
        m->lost);
    ONE(LM_COUNTER, "stagingd_leases_staged_fallback_total",
        "Leases asked as PINNED and served as STAGED (the pin budget was short).", m->fallback);
    ONE(LM_COUNTER, "stagingd_bad_blocks_total", "Blocks whose checksum did not match.",
        m->bad_blocks);
#undef ONE
#undef FAM
    return rc;
}

int sd_daemon__metrics_start(struct sd_daemon *d)
{
    if (!d->cfg.metrics[0])
        return 0;
    struct sd_daemon__metrics *m = calloc(1, sizeof *m);
    if (!m)
        return -ENOMEM;
    int rc = lm_registry_create(&m->reg);
    if (rc == 0)
        rc = sd_daemon__declare(d, m);
    if (rc < 0) {
        sd_daemon__log(d, BASE_LOG_ERROR, "metrics: declaring the series: %s", strerror(-rc));
        goto fail;
    }
    struct lm_server_config sc = {
        .listen = d->cfg.metrics,
        .flags = d->cfg.metrics_remote ? LM_SERVER_ALLOW_REMOTE : 0,
        .log = d->cfg.log,
    };
    char err[512];
    rc = lm_server_start(m->reg, &sc, err, sizeof err, &m->srv);
    if (rc < 0) {
        sd_daemon__log(d, BASE_LOG_ERROR, "%s%s", err,
                       rc == -EPERM ? " (metrics-remote = yes allows it)"
                       : rc == -EADDRINUSE
                           ? "; choose another port (metrics = 127.0.0.1:PORT) or stop what "
                             "listens there"
                           : "");
        goto fail;
    }
    d->metrics = m;
    sd_daemon__log(d, BASE_LOG_INFO, "metrics: serving http://%s/metrics",
                   lm_server_address(m->srv));
    sd_daemon__metrics_publish(d, 1);
    return 0;
fail:
    lm_registry_destroy(m->reg);
    free(m);
    return rc < 0 ? rc : -EINVAL;
}

void sd_daemon__metrics_stop(struct sd_daemon *d)
{
    struct sd_daemon__metrics *m = d->metrics;
    if (!m)
        return;
    lm_server_stop(m->srv);
    lm_registry_destroy(m->reg);
    free(m);
    d->metrics = NULL;
}

const char *sd_daemon__metrics_address(const struct sd_daemon *d)
{
    return d->metrics ? lm_server_address(d->metrics->srv) : "";
}

int sd_daemon__metrics_timeout(const struct sd_daemon *d)
{
    if (!d->metrics)
        return -1;
    uint64_t now = base_now_ns();
    return now >= d->metrics->next_ns ? 0 : (int)((d->metrics->next_ns - now) / 1000000) + 1;
}

/* Sets @s when it exists (a failed lm_series_get left it NULL). */
static void sd_daemon__set(struct lm_series *s, double v, int counter)
{
    if (!s)
        return;
    if (counter)
        lm_counter_set(s, v);
    else
        lm_gauge_set(s, v);
}

void sd_daemon__metrics_publish(struct sd_daemon *d, int force)
{
    struct sd_daemon__metrics *m = d->metrics;
    if (!m)
        return;
    uint64_t now = base_now_ns();
    if (!force && now < m->next_ns)
        return;
    m->next_ns = now + SD_DAEMON__PUBLISH_MS * 1000000ull;

    struct sd_reader_stats rs;
    sd_reader_stats_get(d->reader, &rs);
    sd_daemon__set(m->staged_bytes, (double)rs.bytes, 1);
    sd_daemon__set(m->reads, (double)rs.reads, 1);
    sd_daemon__set(m->read_failures, (double)rs.failed, 1);
    if (!m->rate_t_ns) {
        m->rate_t_ns = now;
        m->rate_bytes = rs.bytes;
    } else if (now - m->rate_t_ns >= SD_DAEMON__RATE_NS) {
        sd_daemon__set(m->rate,
                       (double)(rs.bytes - m->rate_bytes) * 1e9 / (double)(now - m->rate_t_ns), 0);
        m->rate_t_ns = now;
        m->rate_bytes = rs.bytes;
    }
    sd_daemon__set(m->running, d->job != NULL, 0);
    sd_daemon__set(m->queued, d->queued, 0);

    for (int c = LT_CLASS_PINNED; c <= LT_CLASS_MAPPED; c++) {
        struct leasec_pool_class_stats ps;
        if (leasec_pool_stats(d->pool, (enum lt_class)c, &ps) < 0)
            continue;
        sd_daemon__set(m->pool_capacity[c], (double)ps.capacity, 0);
        sd_daemon__set(m->pool_in_use[c], (double)ps.in_use, 0);
        sd_daemon__set(m->pool_high[c], (double)ps.high_water, 0);
        sd_daemon__set(m->pool_segments[c], ps.segments, 0);
        sd_daemon__set(m->pool_huge[c], (double)ps.huge_segments + ps.thp_segments, 0);
        sd_daemon__set(m->pool_failures[c], (double)ps.alloc_failures, 1);
    }
    for (unsigned a = 0; a < d->cfg.nagents; a++) {
        struct leasec_client_agent_info info;
        if (leasec_client_agent_info(d->client, a, &info) < 0)
            continue;
        sd_daemon__set(m->ready[a], info.state == LEASEC_CLIENT_READY, 0);
        sd_daemon__set(m->attempts[a], (double)info.attempts, 1);
        sd_daemon__set(m->connections[a], info.epoch, 1);
        sd_daemon__set(m->held[a], info.leases, 0);
        sd_daemon__set(m->in_flight[a], info.in_flight, 0);
        sd_daemon__set(m->accepted[a], info.segments_accepted, 0);
    }
    struct sd_job_counters t;
    sd_daemon__totals(d, &t);
    const uint64_t by_result[4] = {t.shards_clean, t.shards_bad, t.shards_failed, t.shards_not_run};
    for (int i = 0; i < 4; i++)
        sd_daemon__set(m->shards[i], (double)by_result[i], 1);
    sd_daemon__set(m->submits, (double)t.submits, 1);
    sd_daemon__set(m->bell_submits, (double)t.bell_submits, 1);
    sd_daemon__set(m->resubmits, (double)t.resubmits, 1);
    sd_daemon__set(m->lost, (double)t.leases_lost, 1);
    sd_daemon__set(m->fallback, (double)t.staged_fallback, 1);
    sd_daemon__set(m->bad_blocks, (double)t.bad_blocks, 1);
}

/* ---- events ---- */

void sd_daemon__metrics_grant(struct sd_daemon *d, unsigned agent,
                              const struct leasec_client_grant_entry *e)
{
    struct sd_daemon__metrics *m = d->metrics;
    if (!m || agent >= d->cfg.nagents)
        return;
    if (e->err == 0) {
        uint32_t c = e->lease.mem_class;
        if (c < SD_NCLASS && m->granted[agent][c])
            lm_counter_add(m->granted[agent][c], 1);
        return;
    }
    const char *v[] = {d->cfg.agents[agent], sd_daemon__code(e->status), NULL};
    struct lm_series *s = sd_daemon__series(m->f_refused, v);
    if (s)
        lm_counter_add(s, 1);
}

void sd_daemon__metrics_release(struct sd_daemon *d, unsigned agent, uint64_t held_ns)
{
    struct sd_daemon__metrics *m = d->metrics;
    if (!m || agent >= d->cfg.nagents)
        return;
    if (m->released[agent])
        lm_counter_add(m->released[agent], 1);
    if (m->hold && held_ns)
        lm_histogram_observe(m->hold, (double)held_ns / 1e9);
}

void sd_daemon__metrics_completion(struct sd_daemon *d, uint16_t op, uint32_t status)
{
    struct sd_daemon__metrics *m = d->metrics;
    if (!m)
        return;
    const char *name = op == LT_OP_CHECKSUM_VERIFY ? "checksum_verify"
                       : op == LT_OP_VECTOR_SCAN   ? "vector_scan"
                       : op == LT_OP_COPY_H2D      ? "copy_h2d"
                                                   : "other";
    const char *v[] = {name, sd_daemon__code(status), NULL};
    struct lm_series *s = sd_daemon__series(m->f_completions, v);
    if (s)
        lm_counter_add(s, 1);
}

void sd_daemon__metrics_segment_refused(struct sd_daemon *d, unsigned agent, uint32_t mem_class,
                                        uint32_t code)
{
    struct sd_daemon__metrics *m = d->metrics;
    if (!m || agent >= d->cfg.nagents)
        return;
    const char *v[] = {d->cfg.agents[agent], lt_class_name(mem_class), sd_daemon__code(code), NULL};
    struct lm_series *s = sd_daemon__series(m->f_seg_refused, v);
    if (s)
        lm_counter_add(s, 1);
}

void sd_daemon__metrics_job_end(struct sd_daemon *d, enum sd_job_op op, int status)
{
    struct sd_daemon__metrics *m = d->metrics;
    if (!m)
        return;
    const char *v[] = {sd_job_op_name(op),
                       status == 0   ? "ok"
                       : status == 3 ? "corrupt"
                                     : "failed",
                       NULL};
    struct lm_series *s = sd_daemon__series(m->f_jobs, v);
    if (s)
        lm_counter_add(s, 1);
    sd_daemon__metrics_publish(d, 1);
}
