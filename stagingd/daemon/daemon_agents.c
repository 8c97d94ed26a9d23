/* The daemon's side of the lease client: its callbacks (job tags go to the
 * job, the daemon's own to it), the streams made per agent connection,
 * offering the pool's segments, and what the daemon says about agents: a
 * socket nobody answers at, a job left waiting, a segment refused for a
 * budget. daemon.c opens the client through sd_daemon__client_open. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "daemon_internal.h"
#include "lease/client.h"
#include "stagingd/job.h"

/* While a job waits for an agent, say so this often. */
#define SD_DAEMON__WAIT_NOTE_NS (5ull * 1000000000ull)

/* ---- client callbacks ---- */

static int sd_daemon__mine(uint64_t tag)
{
    return (tag & SD_JOB_TAG_KIND_MASK) == SD_JOB_TAG_DAEMON;
}

/* Grants and releases are also noted here, for `leases` (since when) and
 * the metrics, before the job sees them. */
static void sd_daemon__on_grant(void *ctx, const struct leasec_client_grant *g)
{
    struct sd_daemon *d = ctx;
    if (sd_daemon__mine(g->tag))
        return;
    uint64_t now = base_now_ns();
    for (unsigned i = 0; i < g->count; i++) {
        const struct leasec_client_grant_entry *e = &g->entries[i];
        if (e->err == 0 && g->agent < d->cfg.nagents)
            /* Out of memory only loses the lease's age. */
            (void)base_u64map_put_u64(&d->lease_since[g->agent], lt_lease_id_to_u64(e->lease.id),
                                      now);
        sd_daemon__metrics_grant(d, g->agent, e);
    }
    if (d->job)
        sd_job_on_grant(d->job, g);
}

static void sd_daemon__on_completion(void *ctx, const struct leasec_client_completion *c)
{
    struct sd_daemon *d = ctx;
    if (sd_daemon__mine(c->tag))
        return;
    sd_daemon__metrics_completion(d, c->op, c->status);
    if (d->job)
        sd_job_on_completion(d->job, c);
}

static void sd_daemon__on_release(void *ctx, const struct leasec_client_release *r)
{
    struct sd_daemon *d = ctx;
    if (sd_daemon__mine(r->tag))
        return;
    uint64_t since = 0;
    if (r->agent < d->cfg.nagents &&
        base_u64map_del_u64(&d->lease_since[r->agent], lt_lease_id_to_u64(r->lease.id), &since) &&
        r->reusable)
        sd_daemon__metrics_release(d, r->agent, base_now_ns() - since);
    if (d->job)
        sd_job_on_release(d->job, r);
}

static void sd_daemon__offer_refused(struct sd_daemon *d, const struct leasec_client_error *e);

static void sd_daemon__on_error(void *ctx, const struct leasec_client_error *e)
{
    struct sd_daemon *d = ctx;
    if (e->request_type == LT_MSG_SEGMENT_OFFER) {
        /* The daemon offered it (tag: the pool segment id), not a job. */
        sd_daemon__offer_refused(d, e);
        return;
    }
    if (sd_daemon__mine(e->tag)) {
        /* A stream the agent would not create: that slot uses the default one. */
        sd_daemon__log(d, BASE_LOG_DEBUG, "agent %u: %s refused: %s", e->agent,
                       lt_msg_type_name(e->request_type), e->message);
        return;
    }
    if (d->job)
        sd_job_on_error(d->job, e);
}

static void sd_daemon__on_reply(void *ctx, const struct leasec_client_reply *r)
{
    struct sd_daemon *d = ctx;
    if (!sd_daemon__mine(r->tag)) {
        if (d->job) /* a streaming job's ring answers */
            sd_job_on_reply(d->job, r);
        return;
    }
    if (r->agent >= d->cfg.nagents)
        return;
    if (r->request_type != LEASEC_REQ_STREAM_CREATE)
        return;
    struct sd_daemon__streams *st = &d->streams[r->agent];
    unsigned slot = (unsigned)((r->tag >> 4) & 0xfffu);
    uint32_t epoch = (uint32_t)(r->tag >> 24);
    if (epoch == st->epoch && slot < d->words_slots) {
        st->ids[slot] = r->stream;
        st->valid[slot] = 1;
    }
}

static void sd_daemon__on_ready(void *ctx, unsigned agent, uint32_t epoch)
{
    struct sd_daemon *d = ctx;
    struct leasec_client_agent_info info;
    if (leasec_client_agent_info(d->client, agent, &info) < 0)
        return;
    const unsigned offered = leasec_pool_segment_count(d->pool);
    sd_daemon__log(d, info.segments_accepted < offered ? BASE_LOG_WARN : BASE_LOG_INFO,
                   "agent %u %s ready: \"%s\"%s, connection %u, %u of %u segment(s) accepted",
                   agent, d->cfg.agents[agent], info.hello.agent_name,
                   (info.hello.caps & LT_CAP_HOST_BACKEND) ? " (HOST BACKEND: no GPU)" : "", epoch,
                   info.segments_accepted, offered);
    /* One stream per slot, so one shard's work never queues behind another's. */
    struct sd_daemon__streams *st = &d->streams[agent];
    st->epoch = epoch;
    memset(st->valid, 0, d->words_slots);
    unsigned n = d->words_slots < info.hello.max_streams ? d->words_slots : info.hello.max_streams;
    for (unsigned i = 0; i < n; i++) {
        const struct leasec_ctl m = {.type = LEASEC_REQ_STREAM_CREATE,
                                     .flags = LEASEC_STREAM_F_NONBLOCKING};
        uint64_t rid, tag = ((uint64_t)epoch << 24) | ((uint64_t)agent << 16) | ((uint64_t)i << 4) |
                            SD_JOB_TAG_DAEMON;
        if (leasec_client_ctl_send(d->client, agent, &m, tag, &rid) < 0)
            break;
    }
}

static void sd_daemon__on_disconnect(void *ctx, unsigned agent, int err, const char *message)
{
    struct sd_daemon *d = ctx;
    sd_daemon__log(d, BASE_LOG_WARN, "agent %u lost (%s): %s; reconnecting with backoff", agent,
                   strerror(-err), message);
    if (agent < d->cfg.nagents) {
        base_u64map_clear(&d->lease_since[agent]); /* that connection's leases are gone */
        memset(d->streams[agent].valid, 0, d->words_slots);
        d->budget_noted[agent] = 0; /* the next connection's offers are new */
    }
    if (d->job)
        sd_job_on_disconnect(d->job, agent);
}

/* An agent refused one of the pool's segments. For a budget, the first
 * refusal of a class on a connection says which budget, with the agent's
 * numbers and ours, and what to change; on_ready counts the rest. */
static void sd_daemon__offer_refused(struct sd_daemon *d, const struct leasec_client_error *e)
{
    struct leasec_pool_segment seg;
    struct leasec_pool_class_stats ps = {0};
    const char *path = e->agent < d->cfg.nagents ? d->cfg.agents[e->agent] : "?";
    if (e->agent >= d->cfg.nagents ||
        leasec_pool_segment_find(d->pool, (uint32_t)e->tag, &seg) < 0 ||
        leasec_pool_stats(d->pool, seg.mem_class, &ps) < 0) {
        sd_daemon__log(d, BASE_LOG_WARN, "agent %u %s refused segment %" PRIu64 ": %s", e->agent,
                       path, e->tag, e->message);
        return;
    }
    sd_daemon__metrics_segment_refused(d, e->agent, (uint32_t)seg.mem_class, e->code);
    const int budget = e->code == LT_E_BUDGET || e->code == LT_E_MEMLOCK;
    const unsigned bit = 1u << seg.mem_class;
    if (budget && (d->budget_noted[e->agent] & bit))
        return;
    const int mapped = seg.mem_class == LT_CLASS_MAPPED;
    const char *cls = mapped ? "MAPPED" : "PINNED", *opt = mapped ? "mapped" : "pinned";
    char size[32], cap[32];
    sd_daemon__bytes(seg.size, size, sizeof size);
    sd_daemon__bytes(ps.capacity, cap, sizeof cap);
    if (e->code == LT_E_BUDGET) {
        d->budget_noted[e->agent] |= bit;
        sd_daemon__log(
            d, BASE_LOG_ERROR,
            "agent %u %s refused %s segment %u (%s) for its %s pin budget: start the agent "
            "with --%s-budget %s (stagingd's whole %s pool, %u segment(s); at least %s, one "
            "segment), or give stagingd a smaller pool or segments (--%s-pool, "
            "--segment-size); leases on refused segments fail. %s",
            e->agent, path, cls, seg.id, size, cls, opt, cap, cls, ps.segments, size, opt,
            e->message);
    } else if (e->code == LT_E_MEMLOCK) {
        d->budget_noted[e->agent] |= bit;
        sd_daemon__log(
            d, BASE_LOG_ERROR,
            "agent %u %s refused %s segment %u (%s): the agent may not lock that much memory "
            "(RLIMIT_MEMLOCK) for stagingd's %s pool of %s: raise the agent's limit (ulimit "
            "-l, or LimitMEMLOCK= under systemd) or give stagingd a smaller pool (--%s-pool); "
            "leases on refused segments fail. %s",
            e->agent, path, cls, seg.id, size, cls, cap, opt, e->message);
    } else {
        sd_daemon__log(d, BASE_LOG_WARN, "agent %u %s refused %s segment %u (%s): %s", e->agent,
                       path, cls, seg.id, size, e->message);
    }
}

int sd_daemon__stream(void *ctx, unsigned agent, unsigned slot, struct lt_stream_id *id_p)
{
    struct sd_daemon *d = ctx;
    if (agent >= d->cfg.nagents || slot >= d->words_slots || !d->streams[agent].valid[slot])
        return -ENOENT;
    *id_p = d->streams[agent].ids[slot];
    return 0;
}

/* ---- agents nobody answers for ---- */

/* Says once per agent that nothing answers at its socket (it never
 * connected) and how to get one there; then, while a job waits for any
 * agent, how long it has waited. */
void sd_daemon__agents_watch(struct sd_daemon *d)
{
    uint64_t now = base_now_ns();
    unsigned ready = 0;
    struct leasec_client_agent_info first = {0};
    for (unsigned a = 0; a < d->cfg.nagents; a++) {
        struct leasec_client_agent_info info;
        if (leasec_client_agent_info(d->client, a, &info) < 0)
            continue;
        if (a == 0)
            first = info;
        if (info.state == LEASEC_CLIENT_READY) {
            ready++;
            continue;
        }
        if (d->hinted[a] || info.epoch != 0 || info.attempts == 0 || info.last_err == 0)
            continue;
        d->hinted[a] = 1;
        const char *path = d->cfg.agents[a];
        char wait[64] = "";
        if (d->mode == SD_DAEMON_ONESHOT)
            snprintf(wait, sizeof wait, " for up to %u s (--agent-timeout)",
                     d->cfg.job.agent_timeout_s);
        sd_daemon__log(
            d, BASE_LOG_ERROR,
            "no GPU agent answers at %s (%s): start one there (lease-agent-host --socket %s, "
            "or lease-agent --socket %s on a GPU machine) or pass --agent PATH; retrying%s",
            path, strerror(-info.last_err), path, path, wait);
    }
    if (ready || !d->job || d->stopping) {
        d->wait_since_ns = 0;
        return;
    }
    if (!d->wait_since_ns) {
        d->wait_since_ns = now;
        d->wait_note_ns = now + SD_DAEMON__WAIT_NOTE_NS;
    } else if (now >= d->wait_note_ns) {
        d->wait_note_ns += SD_DAEMON__WAIT_NOTE_NS;
        sd_daemon__log(d, BASE_LOG_WARN,
                       "job %u: still no GPU agent after %.0f of %u s (--agent-timeout): %" PRIu64
                       " connect attempt(s) to %s, last error: %s",
                       d->job_id, (double)(now - d->wait_since_ns) / 1e9,
                       d->cfg.job.agent_timeout_s, first.attempts, d->cfg.agents[0],
                       first.last_err ? strerror(-first.last_err) : "none");
    }
}

/* Offers every pool segment to every agent, keyed by its pool segment id
 * (the key job buffers name in lease requests). Returns 0 or the first
 * error of leasec_client_segment_add. */
static int sd_daemon__offer_pool(struct sd_daemon *d)
{
    unsigned n = leasec_pool_segment_count(d->pool);
    for (unsigned i = 0; i < n; i++) {
        struct leasec_pool_segment seg;
        int rc = leasec_pool_segment_at(d->pool, i, &seg);
        if (rc == 0)
            rc = leasec_client_segment_add(d->client, seg.id, seg.fd, seg.base, seg.size,
                                           (uint32_t)seg.mem_class);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int sd_daemon__client_open(struct sd_daemon *d)
{
    const struct sd_config *cfg = &d->cfg;
    int rc;
    struct leasec_client_config ccfg;
    leasec_client_config_default(&ccfg);
    ccfg.cb = (struct leasec_client_callbacks){
        .on_grant = sd_daemon__on_grant,
        .on_completion = sd_daemon__on_completion,
        .on_release = sd_daemon__on_release,
        .on_error = sd_daemon__on_error,
        .on_reply = sd_daemon__on_reply,
        .on_ready = sd_daemon__on_ready,
        .on_disconnect = sd_daemon__on_disconnect,
    };
    ccfg.name = "stagingd";
    /* Done words and scan hits in each agent's words area: the pool's
     * segments are sealed F_SEAL_FUTURE_WRITE, read-only to the agent. */
    ccfg.caps |= LEASEC_CAP_WORDS;
    uint64_t words = (uint64_t)d->words_slots * SD_JOB_WORDS_STRIDE;
    words = (words + 4095) / 4096 * 4096;
    ccfg.words_bytes = (uint32_t)(words < LT_WORDS_MAX_BYTES ? words : LT_WORDS_MAX_BYTES);
    /* Streaming rings where the agent has them (path auto or stream). */
    if (cfg->job.path != SD_JOB_PATH_WHOLE)
        ccfg.caps |= LEASEC_CAP_STREAM;
    ccfg.cb_ctx = d;
    ccfg.log = sd_daemon__leasec_log(&d->cfg.log);
    rc = leasec_client_create(&ccfg, &d->client);
    if (rc < 0) {
        sd_daemon__log(d, BASE_LOG_ERROR, "lease client: %s", strerror(-rc));
        return rc;
    }
    rc = sd_daemon__offer_pool(d);
    if (rc < 0) {
        sd_daemon__log(d, BASE_LOG_ERROR, "offering the pool's segments: %s",
                       leasec_client_last_error(d->client));
        return rc;
    }
    for (unsigned a = 0; a < cfg->nagents; a++) {
        unsigned idx;
        rc = leasec_client_agent_add(d->client, cfg->agents[a], &idx);
        if (rc < 0) {
            sd_daemon__log(d, BASE_LOG_ERROR, "agent %s: %s", cfg->agents[a], strerror(-rc));
            return rc;
        }
    }
    return 0;
}
