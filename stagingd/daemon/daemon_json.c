/* The control socket's machine-readable replies, built with jansson: `stats
 * json`, `leases json` and `segments json` each answer one line of JSON,
 * then "ok". leasectl reads them; docs/operations.md lists the fields.
 * Numbers are bytes, counts and seconds; strings are the daemon's own. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon_internal.h"
#include "lease/client.h"
#include "stagingd/reader.h"

#ifndef STAGINGD_VERSION
#define STAGINGD_VERSION "?"
#endif

void sd_daemon__totals(const struct sd_daemon *d, struct sd_job_counters *c_p)
{
    struct sd_job_counters t = d->done, j;
    if (d->job) {
        sd_job_counters_get(d->job, &j);
        const uint64_t *src = (const uint64_t *)(const void *)&j;
        uint64_t *dst = (uint64_t *)(void *)&t;
        for (size_t i = 0; i < sizeof t / sizeof(uint64_t); i++)
            dst[i] += src[i];
    }
    *c_p = t;
}

static const char *const sd_daemon__states[] = {"disconnected", "handshake", "offering segments",
                                                "ready"};

/* Sets @key of @o to @v, taking @v over in every case (json_object_set_new
 * drops it on failure too): after an earlier failure (@rc < 0) @v is
 * dropped and @rc returned, so a chain of puts never leaks and never
 * answers half a reply. Returns 0 or -ENOMEM. */
static int sd_daemon__put(json_t *o, const char *key, json_t *v, int rc)
{
    if (rc < 0) {
        json_decref(v);
        return rc;
    }
    if (!v)
        return -ENOMEM;
    return json_object_set_new(o, key, v) == 0 ? 0 : -ENOMEM;
}

/* Appends @v to @a on the same terms. */
static int sd_daemon__append(json_t *a, json_t *v, int rc)
{
    if (rc < 0) {
        json_decref(v);
        return rc;
    }
    if (!v)
        return -ENOMEM;
    return json_array_append_new(a, v) == 0 ? 0 : -ENOMEM;
}

static json_t *sd_daemon__json_totals(const struct sd_daemon *d)
{
    struct sd_job_counters t;
    sd_daemon__totals(d, &t);
    return json_pack(
        "{sI sI sI sI sI sI sI sI sI sI sI sI sI sI sI sI sI sI}", "shards", (json_int_t)t.shards,
        "shards_clean", (json_int_t)t.shards_clean, "shards_bad", (json_int_t)t.shards_bad,
        "shards_failed", (json_int_t)t.shards_failed, "shards_not_run",
        (json_int_t)t.shards_not_run, "bytes_staged", (json_int_t)t.bytes_staged, "leases_granted",
        (json_int_t)t.leases_granted, "leases_released", (json_int_t)t.leases_released,
        "leases_lost", (json_int_t)t.leases_lost, "leases_refused", (json_int_t)t.leases_refused,
        "lease_batches", (json_int_t)t.lease_batches, "release_batches",
        (json_int_t)t.release_batches, "submits", (json_int_t)t.submits, "doorbell_submits",
        (json_int_t)t.bell_submits, "completions", (json_int_t)t.completions, "resubmits",
        (json_int_t)t.resubmits, "staged_fallback", (json_int_t)t.staged_fallback, "bad_blocks",
        (json_int_t)t.bad_blocks);
}

static json_t *sd_daemon__json_jobs(struct sd_daemon *d)
{
    json_t *jobs = json_pack("{sI sb sI}", "done", (json_int_t)d->jobs_done, "running",
                             d->job != NULL, "queued", (json_int_t)d->queued);
    if (!jobs || !d->job)
        return jobs;
    char line[256];
    sd_job_progress(d->job, line, sizeof line);
    json_t *cur = json_pack("{si ss ss ss}", "id", (int)d->job_id, "op",
                            sd_job_op_name(sd_job_op_get(d->job)), "store", sd_job_store(d->job),
                            "progress", line);
    if (sd_daemon__put(jobs, "current", cur, 0) < 0) {
        json_decref(jobs);
        return NULL;
    }
    return jobs;
}

static json_t *sd_daemon__json_pool(struct sd_daemon *d)
{
    json_t *pool = json_array();
    int rc = pool ? 0 : -ENOMEM;
    for (int c = LT_CLASS_PINNED; rc == 0 && c <= LT_CLASS_MAPPED; c++) {
        struct leasec_pool_class_stats ps;
        if (leasec_pool_stats(d->pool, (enum lt_class)c, &ps) < 0 || ps.capacity == 0)
            continue;
        rc = sd_daemon__append(
            pool,
            json_pack("{ss sI sI sI sI sI sI si si si}", "class", lt_class_name((uint32_t)c),
                      "capacity", (json_int_t)ps.capacity, "in_use", (json_int_t)ps.in_use,
                      "high_water", (json_int_t)ps.high_water, "live_buffers",
                      (json_int_t)ps.live_buffers, "alloc_failures", (json_int_t)ps.alloc_failures,
                      "carved", (json_int_t)ps.carved, "segments", (int)ps.segments,
                      "hugetlb_segments", (int)ps.huge_segments, "thp_segments",
                      (int)ps.thp_segments),
            rc);
    }
    if (rc < 0) {
        json_decref(pool);
        return NULL;
    }
    return pool;
}

static json_t *sd_daemon__json_agent(struct sd_daemon *d, unsigned a)
{
    struct leasec_client_agent_info info;
    if (leasec_client_agent_info(d->client, a, &info) < 0)
        return json_null();
    json_t *e = json_pack(
        "{si ss ss sI ss sb sI sI sI sI sI sI}", "index", (int)a, "path", d->cfg.agents[a], "state",
        sd_daemon__states[info.state], "connection", (json_int_t)info.epoch, "name",
        info.hello.agent_name, "host_backend", (info.hello.caps & LT_CAP_HOST_BACKEND) != 0,
        "leases", (json_int_t)info.leases, "in_flight", (json_int_t)info.in_flight, "attempts",
        (json_int_t)info.attempts, "offers_sent", (json_int_t)info.offers_sent, "segments_accepted",
        (json_int_t)info.segments_accepted, "segments_offered",
        (json_int_t)leasec_pool_segment_count(d->pool));
    if (sd_daemon__put(e, "last_error",
                       info.last_err ? json_string(strerror(-info.last_err)) : json_null(),
                       e ? 0 : -ENOMEM) < 0) {
        json_decref(e);
        return NULL;
    }
    return e;
}

static json_t *sd_daemon__json_agents(struct sd_daemon *d)
{
    json_t *agents = json_array();
    int rc = agents ? 0 : -ENOMEM;
    for (unsigned a = 0; rc == 0 && a < d->cfg.nagents; a++)
        rc = sd_daemon__append(agents, sd_daemon__json_agent(d, a), rc);
    if (rc < 0) {
        json_decref(agents);
        return NULL;
    }
    return agents;
}

static json_t *sd_daemon__json_stats(struct sd_daemon *d)
{
    json_t *o = json_object();
    int rc = o ? 0 : -ENOMEM;
    struct sd_reader_info ri;
    struct sd_reader_stats rs;
    sd_reader_info_get(d->reader, &ri);
    sd_reader_stats_get(d->reader, &rs);
    rc = sd_daemon__put(o, "version", json_string(STAGINGD_VERSION), rc);
    rc = sd_daemon__put(o, "pid", json_integer(getpid()), rc);
    rc =
        sd_daemon__put(o, "uptime_s", json_real((double)(base_now_ns() - d->t_start_ns) / 1e9), rc);
    rc = sd_daemon__put(o, "stopping", json_boolean(d->stopping), rc);
    rc = sd_daemon__put(o, "config",
                        json_pack("{ss ss ss ss ss si}", "store", d->cfg.store, "control",
                                  d->cfg.control, "metrics", d->cfg.metrics, "metrics_bound",
                                  sd_daemon__metrics_address(d), "log_file", d->cfg.log_path,
                                  "inflight", (int)d->cfg.job.inflight),
                        rc);
    rc = sd_daemon__put(o, "jobs", sd_daemon__json_jobs(d), rc);
    rc = sd_daemon__put(o, "totals", sd_daemon__json_totals(d), rc);
    rc = sd_daemon__put(o, "pool", sd_daemon__json_pool(d), rc);
    rc = sd_daemon__put(o, "reader",
                        json_pack("{si sb sb sI sI sI sI sI sI sI}", "threads", (int)ri.threads,
                                  "io_uring", ri.uring, "fixed_buffers", ri.fixed, "requests",
                                  (json_int_t)rs.requests, "failed", (json_int_t)rs.failed, "bytes",
                                  (json_int_t)rs.bytes, "reads", (json_int_t)rs.reads,
                                  "fixed_reads", (json_int_t)rs.fixed_reads, "short_reads",
                                  (json_int_t)rs.short_reads, "retries", (json_int_t)rs.retries),
                        rc);
    rc = sd_daemon__put(o, "agents", sd_daemon__json_agents(d), rc);
    if (rc < 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* One lease a slot of the running job holds (or is releasing), with the
 * shard it is for and how long ago it was granted. */
static json_t *sd_daemon__json_lease(struct sd_daemon *d, const struct sd_job_slot_info *si,
                                     uint64_t now)
{
    const struct leasec_client_lease *l = &si->lease;
    uint64_t since = 0;
    if (l->agent < d->cfg.nagents)
        base_u64map_get_u64(&d->lease_since[l->agent], lt_lease_id_to_u64(l->id), &since);
    char id[32];
    snprintf(id, sizeof id, "%" PRIu32 ":%" PRIu32, l->id.slot, l->id.gen);
    json_t *e = json_pack("{si ss si ss ss sI sI sI ss ss si si}", "agent", (int)l->agent,
                          "agent_path", l->agent < d->cfg.nagents ? d->cfg.agents[l->agent] : "?",
                          "connection", (int)l->epoch, "lease", id, "class",
                          lt_class_name(l->mem_class), "segment", (json_int_t)l->segment, "offset",
                          (json_int_t)l->offset, "length", (json_int_t)l->length, "shard",
                          si->shard ? si->shard : "", "state", si->lease_state, "ops_todo",
                          (int)si->ops_todo, "ops_in_flight", (int)si->ops_inflight);
    if (sd_daemon__put(e, "held_s", since ? json_real((double)(now - since) / 1e9) : json_null(),
                       e ? 0 : -ENOMEM) < 0) {
        json_decref(e);
        return NULL;
    }
    return e;
}

static json_t *sd_daemon__json_leases(struct sd_daemon *d)
{
    json_t *o = json_object(), *list = json_array();
    int rc = sd_daemon__put(o, "leases", list, o ? 0 : -ENOMEM);
    uint64_t now = base_now_ns();
    for (unsigned i = 0; d->job && rc == 0 && i < sd_job_slot_count(d->job); i++) {
        struct sd_job_slot_info si;
        if (sd_job_slot_get(d->job, i, &si) == 0 && si.has_lease)
            rc = sd_daemon__append(list, sd_daemon__json_lease(d, &si, now), rc);
    }
    rc = sd_daemon__put(o, "job", d->job ? json_integer((json_int_t)d->job_id) : json_null(), rc);
    if (rc < 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* The pool's segments, and how many of them each agent accepted. */
static json_t *sd_daemon__json_segments(struct sd_daemon *d)
{
    json_t *o = json_object(), *list = json_array();
    int rc = sd_daemon__put(o, "segments", list, o ? 0 : -ENOMEM);
    unsigned n = leasec_pool_segment_count(d->pool);
    for (unsigned i = 0; rc == 0 && i < n; i++) {
        struct leasec_pool_segment seg;
        if (leasec_pool_segment_at(d->pool, i, &seg) < 0)
            continue;
        const char *pages = seg.page_size > 4096        ? "hugetlb"
                            : seg.thp_bytes == seg.size ? "thp"
                            : seg.thp_bytes             ? "thp-partial"
                                                        : "small";
        rc = sd_daemon__append(list,
                               json_pack("{sI ss sI sI ss sI}", "id", (json_int_t)seg.id, "class",
                                         lt_class_name((uint32_t)seg.mem_class), "size",
                                         (json_int_t)seg.size, "page_size",
                                         (json_int_t)seg.page_size, "pages", pages, "thp_bytes",
                                         (json_int_t)seg.thp_bytes),
                               rc);
    }
    rc = sd_daemon__put(o, "agents", sd_daemon__json_agents(d), rc);
    if (rc < 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int sd_daemon__json(struct sd_daemon *d, const char *what, char **text_p)
{
    json_t *o;
    if (strcmp(what, "stats") == 0)
        o = sd_daemon__json_stats(d);
    else if (strcmp(what, "leases") == 0)
        o = sd_daemon__json_leases(d);
    else if (strcmp(what, "segments") == 0)
        o = sd_daemon__json_segments(d);
    else
        return -ENOENT;
    if (!o)
        return -ENOMEM;
    /* Compact: the reply is one line; strings with newlines are escaped. */
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s)
        return -ENOMEM;
    size_t n = strlen(s);
    char *line = malloc(n + 2);
    if (line) {
        memcpy(line, s, n);
        line[n] = '\n';
        line[n + 1] = '\0';
    }
    free(s);
    if (!line)
        return -ENOMEM;
    *text_p = line;
    return 0;
}
