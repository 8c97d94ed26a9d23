/* A job's leases (see job_internal.h): slots that want a lease are asked
 * for in batches, one LEASE_REQUEST per ready agent in turn; slots done
 * with theirs are released in batches per agent connection; and the
 * agent's answers (grants, release completions, refusals, a lost agent)
 * move the slots' lease states. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "job_internal.h"

/* ---- batching ---- */

void sd_job__agents_refresh(struct sd_job *job, unsigned *nready_p)
{
    unsigned n = 0;
    for (unsigned a = 0; a < job->env.nagents; a++) {
        struct leasec_client_agent_info info;
        struct sd_job__agent *ag = &job->agents[a];
        ag->ready = 0;
        if (leasec_client_agent_info(job->env.client, a, &info) == 0 &&
            info.state == LEASEC_CLIENT_READY) {
            ag->ready = 1;
            ag->caps = info.hello.caps;
            ag->max_batch = info.hello.max_lease_batch ? info.hello.max_lease_batch : 1;
            n++;
        }
    }
    *nready_p = n;
}

void sd_job__flush_leases(struct sd_job *job, unsigned nready)
{
    if (nready == 0)
        return;
    struct leasec_client_lease_req reqs[LT_MAX_BATCH];
    unsigned idx[LT_MAX_BATCH];
    unsigned i = 0;
    for (;;) {
        /* The next ready agent, round robin. */
        unsigned a = job->rr % job->env.nagents;
        for (unsigned k = 0; k < job->env.nagents && !job->agents[a].ready; k++)
            a = (a + 1) % job->env.nagents;
        job->rr = a + 1;
        unsigned cap =
            job->agents[a].max_batch < job->cfg.batch ? job->agents[a].max_batch : job->cfg.batch;
        if (cap > LT_MAX_BATCH)
            cap = LT_MAX_BATCH;
        unsigned n = 0;
        for (; i < job->nslots && n < cap; i++) {
            struct sd_job__slot *s = &job->slots[i];
            if (!s->active || s->lease != SD_JOB__L_WANT)
                continue;
            reqs[n] = (struct leasec_client_lease_req){
                .segment = s->buf.segment_id,
                .mem_class = 0,
                .flags = LT_LEASE_F_ALLOW_STAGED,
                .offset = s->buf.offset,
                .length = s->lease_len,
            };
            idx[n++] = i;
        }
        if (n == 0)
            return;
        uint64_t batch = ++job->next_batch, rid = 0;
        int rc = leasec_client_lease_request(job->env.client, a, reqs, n, 0,
                                             sd_job__tag(job, SD_JOB__TAG_LEASE, 0, batch), &rid);
        if (rc < 0 && sd_job__transient(rc)) {
            job->agents[a].ready = 0;
            return; /* on_disconnect follows; the slots stay wanting */
        }
        for (unsigned k = 0; k < n; k++) {
            struct sd_job__slot *s = &job->slots[idx[k]];
            if (rc < 0) {
                s->lease = SD_JOB__L_NONE;
                sd_job__slot_fail(s, "lease request not sent: %s",
                                  leasec_client_last_error(job->env.client));
                continue;
            }
            s->lease = SD_JOB__L_REQUESTED;
            s->lease_agent = a;
            s->lease_batch = batch;
            s->lease_pos = k;
        }
        if (rc == 0)
            job->lease_batches++;
    }
}

void sd_job__flush_releases(struct sd_job *job)
{
    struct leasec_client_lease leases[LT_MAX_BATCH];
    unsigned idx[LT_MAX_BATCH];
    for (;;) {
        /* One batch: the first wanting slot's agent and connection. */
        struct sd_job__slot *first = NULL;
        for (unsigned i = 0; i < job->nslots && !first; i++)
            if (job->slots[i].active && job->slots[i].lease == SD_JOB__L_RELEASE_WANT)
                first = &job->slots[i];
        if (!first)
            return;
        unsigned a = first->l.agent;
        unsigned cap = job->agents[a].max_batch && job->agents[a].max_batch < job->cfg.batch
                           ? job->agents[a].max_batch
                           : job->cfg.batch;
        if (cap > LT_MAX_BATCH)
            cap = LT_MAX_BATCH;
        unsigned n = 0;
        for (unsigned i = 0; i < job->nslots && n < cap; i++) {
            struct sd_job__slot *s = &job->slots[i];
            if (s->active && s->lease == SD_JOB__L_RELEASE_WANT && s->l.agent == a &&
                s->l.epoch == first->l.epoch) {
                leases[n] = s->l;
                idx[n++] = i;
            }
        }
        uint64_t batch = ++job->next_batch, rid = 0;
        int rc = leasec_client_lease_release(job->env.client, leases, n,
                                             sd_job__tag(job, SD_JOB__TAG_RELEASE, 0, batch), &rid);
        if (rc < 0 && (rc == -ENOTCONN || rc == -ECONNRESET || rc == -EPIPE))
            return; /* on_disconnect follows and forgets these leases */
        for (unsigned k = 0; k < n; k++) {
            struct sd_job__slot *s = &job->slots[idx[k]];
            if (rc == 0) {
                s->lease = SD_JOB__L_RELEASING;
                s->lease_batch = batch;
            } else if (rc == -ESTALE || rc == -ENOENT) {
                s->lease = SD_JOB__L_NONE; /* from a connection that is gone */
                job->leases_lost++;
            } else {
                s->lease = SD_JOB__L_NONE;
                s->quarantine = 1;
                sd_job__log(job, BASE_LOG_ERROR, "job %u: release not sent: %s", job->env.id,
                            leasec_client_last_error(job->env.client));
            }
        }
        if (rc == 0) {
            job->release_batches++;
            sd_job__log(job, BASE_LOG_DEBUG, "job %u: released %u lease(s) in one batch",
                        job->env.id, n);
        }
    }
}

/* ---- the agent's answers ---- */

/* 1 when @tag is one of the streaming path's (job_stream.c). */
static int sd_job__ring_tag(const struct sd_job *job, uint64_t tag)
{
    unsigned k = sd_job__tag_kind(tag);
    return sd_job__tag_mine(job, tag) && k >= SD_JOB__TAG_RING_FIRST && k <= SD_JOB__TAG_RING_LAST;
}

void sd_job_on_grant(struct sd_job *job, const struct leasec_client_grant *g)
{
    if (sd_job__ring_tag(job, g->tag)) {
        sd_job__stream_on_grant(job, g);
        return;
    }
    if (!sd_job__tag_mine(job, g->tag) || sd_job__tag_kind(g->tag) != SD_JOB__TAG_LEASE)
        return;
    uint64_t batch = sd_job__tag_seq(g->tag);
    unsigned matched = 0;
    for (unsigned i = 0; i < job->nslots; i++) {
        struct sd_job__slot *s = &job->slots[i];
        if (!s->active || s->lease != SD_JOB__L_REQUESTED || s->lease_batch != batch ||
            s->lease_pos >= g->count)
            continue;
        const struct leasec_client_grant_entry *e = &g->entries[s->lease_pos];
        matched++;
        if (e->err == 0) {
            s->lease = SD_JOB__L_HELD;
            s->l = e->lease;
            job->leases_granted++;
            if (e->lease.mem_class == LT_CLASS_STAGED)
                job->staged_fallback++;
        } else {
            s->lease = SD_JOB__L_NONE;
            job->leases_refused++;
            sd_job__slot_fail(s, "lease of %" PRIu64 " bytes refused by the agent: %s (%s)",
                              s->lease_len, lt_error_name(e->status), lt_error_describe(e->status));
        }
    }
    /* Entries no slot waits for (cannot happen while slots keep their
     * requests) would be leaked leases: give them back at once. */
    if (matched < g->count) {
        for (unsigned k = 0; k < g->count; k++) {
            int used = 0;
            for (unsigned i = 0; i < job->nslots && !used; i++)
                used = job->slots[i].active && job->slots[i].lease == SD_JOB__L_HELD &&
                       lt_lease_id_eq(job->slots[i].l.id, g->entries[k].lease.id) &&
                       job->slots[i].l.epoch == g->entries[k].lease.epoch;
            uint64_t rid;
            if (!used && g->entries[k].err == 0 &&
                leasec_client_lease_release(job->env.client, &g->entries[k].lease, 1,
                                            sd_job__tag(job, SD_JOB__TAG_RELEASE, 0, 0), &rid) == 0)
                sd_job__log(job, BASE_LOG_WARN, "job %u: lease %u:%u granted to nobody; released",
                            job->env.id, g->entries[k].lease.id.slot, g->entries[k].lease.id.gen);
        }
    }
}

void sd_job_on_release(struct sd_job *job, const struct leasec_client_release *r)
{
    if (sd_job__ring_tag(job, r->tag)) {
        sd_job__stream_on_release(job, r);
        return;
    }
    for (unsigned i = 0; i < job->nslots; i++) {
        struct sd_job__slot *s = &job->slots[i];
        if (!s->active || s->lease != SD_JOB__L_RELEASING || s->l.agent != r->agent ||
            s->l.epoch != r->lease.epoch || !lt_lease_id_eq(s->l.id, r->lease.id))
            continue;
        s->lease = SD_JOB__L_NONE;
        sd_job__log(job, BASE_LOG_DEBUG, "job %u: %s: lease %u:%u release complete%s", job->env.id,
                    sd_job__shard_name(job, s->shard), r->lease.id.slot, r->lease.id.gen,
                    r->reusable ? "" : " (not reusable)");
        if (r->reusable) {
            job->leases_released++;
        } else if (r->err && r->status == LT_OK) {
            /* The connection ended first. Every op on the lease had been
             * answered before we released it, so no GPU work reads the bytes. */
            job->leases_lost++;
        } else {
            s->quarantine = 1;
            sd_job__log(job, BASE_LOG_WARN, "job %u: %s", job->env.id, r->message);
        }
        return;
    }
}

void sd_job_on_error(struct sd_job *job, const struct leasec_client_error *e)
{
    if (!sd_job__tag_mine(job, e->tag))
        return;
    if (sd_job__ring_tag(job, e->tag)) {
        sd_job__stream_on_error(job, e);
        return;
    }
    unsigned kind = sd_job__tag_kind(e->tag);
    const int lost = e->code == LT_OK; /* the client decided: the connection ended */
    if (kind == SD_JOB__TAG_LEASE) {
        uint64_t batch = sd_job__tag_seq(e->tag);
        for (unsigned i = 0; i < job->nslots; i++) {
            struct sd_job__slot *s = &job->slots[i];
            if (!s->active || s->lease != SD_JOB__L_REQUESTED || s->lease_batch != batch)
                continue;
            s->lease = SD_JOB__L_NONE;
            if (!lost) {
                job->leases_refused++;
                sd_job__slot_fail(s, "lease request refused: %s", e->message);
            }
        }
        return;
    }
    if (kind == SD_JOB__TAG_VERIFY || kind == SD_JOB__TAG_SCAN) {
        unsigned op = kind == SD_JOB__TAG_VERIFY ? SD_JOB__OP_VERIFY : SD_JOB__OP_SCAN;
        const uint32_t q = sd_job__tag_query(e->tag);
        struct sd_job__slot *s = sd_job__slot_of(job, e->tag);
        if (!s)
            return;
        if (op == SD_JOB__OP_SCAN) {
            if (q >= job->nq || s->qstate[q] != SD_JOB__Q_INFLIGHT)
                return;
            /* Lost: submitted again on a new lease. Refused: the shard fails. */
            sd_job__query_move(s, q, lost ? SD_JOB__Q_TODO : SD_JOB__Q_DONE);
            if (lost && q < s->scan_next)
                s->scan_next = q;
        } else {
            if (!(s->ops_inflight & op))
                return;
            s->ops_inflight &= ~op;
        }
        if (lost) {
            job->resubmits++;
            return;
        }
        s->ops_todo &= ~op;
        sd_job__slot_fail(s, "%s refused by the agent: %s",
                          op == SD_JOB__OP_VERIFY ? "verify" : "scan", e->message);
        return;
    }
    if (kind == SD_JOB__TAG_RELEASE) {
        /* Refused as a whole: the agent says we do not hold these leases.
         * Nothing more can be done with them; keep the bytes out of use. */
        for (unsigned i = 0; i < job->nslots; i++) {
            struct sd_job__slot *s = &job->slots[i];
            if (s->active && s->lease == SD_JOB__L_RELEASING &&
                s->lease_batch == sd_job__tag_seq(e->tag)) {
                s->lease = SD_JOB__L_NONE;
                if (!lost)
                    s->quarantine = 1;
                else
                    job->leases_lost++;
            }
        }
        if (!lost)
            sd_job__log(job, BASE_LOG_ERROR, "job %u: release refused: %s", job->env.id,
                        e->message);
    }
}

void sd_job_on_reply(struct sd_job *job, const struct leasec_client_reply *r)
{
    if (sd_job__ring_tag(job, r->tag))
        sd_job__stream_on_reply(job, r);
}

void sd_job_on_disconnect(struct sd_job *job, unsigned agent)
{
    unsigned n = 0, ops = 0;
    sd_job__stream_on_disconnect(job, agent);
    for (unsigned i = 0; i < job->nslots; i++) {
        struct sd_job__slot *s = &job->slots[i];
        if (!s->active)
            continue;
        int ours = (s->lease == SD_JOB__L_REQUESTED && s->lease_agent == agent) ||
                   ((s->lease == SD_JOB__L_HELD || s->lease == SD_JOB__L_RELEASE_WANT ||
                     s->lease == SD_JOB__L_RELEASING) &&
                    s->l.agent == agent);
        if (!ours)
            continue;
        if (s->lease != SD_JOB__L_REQUESTED)
            job->leases_lost++;
        s->lease = SD_JOB__L_NONE;
        /* Work answered before the loss stays answered (early results
         * included); the rest is submitted again on a new lease. */
        unsigned again = 0;
        if ((s->ops_inflight & SD_JOB__OP_VERIFY) && !(s->early_mask & 1u)) {
            s->ops_inflight &= ~SD_JOB__OP_VERIFY;
            again++;
        }
        for (uint32_t q = 0; s->scan_busy > 0 && q < job->nq; q++) {
            if (s->qstate[q] != SD_JOB__Q_INFLIGHT)
                continue;
            sd_job__query_move(s, q, SD_JOB__Q_TODO);
            if (q < s->scan_next)
                s->scan_next = q;
            again++;
        }
        job->resubmits += again;
        ops += again;
        n++;
    }
    if (n)
        sd_job__log(job, BASE_LOG_WARN,
                    "job %u: agent %u lost: %u shard(s) keep their staged bytes and wait for a new "
                    "lease; %u op(s) will be submitted again",
                    job->env.id, agent, n, ops);
}
