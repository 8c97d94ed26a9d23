/* A job's slots (see stagingd/job.h and docs/stagingd.md). Each in-flight
 * shard sits in a slot. A slot's life:
 *
 *   start: open the shard, allocate a PINNED pool buffer, copy the checksum
 *          table (verify) and the query (scan) behind where the payload
 *          will land, ask for a lease on the buffer (batched);
 *   plain: the io_uring read starts at once; the work is submitted when
 *          both the grant and the read are in;
 *   bell:  the work is submitted as soon as the lease is granted, queued
 *          by the agent behind the slot's doorbell word; only then does the
 *          read start, and its completion (on a staging thread) rings the
 *          bell: the agent runs the work with no message from us;
 *   then:  each COMPLETION is the shard's result for that op; the lease is
 *          released (batched) and the buffer goes back to the pool only on
 *          RELEASE_COMPLETE.
 *
 * Agent loss: the client fails what was in flight; the slot keeps its
 * staged bytes, forgets the lease, and asks again once an agent is ready,
 * resubmitting only the ops that had no completion. Results are recorded
 * once per (shard, op): a completion never counts twice. Just over 800
 * lines: a slot's whole life above, one state machine, reads in one place. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "job_internal.h"
#include "stagingd/reader.h"

static void sd_job__apply(struct sd_job__slot *s, unsigned op, uint32_t q, uint32_t status,
                          const union leasec_op_result *r);

/* ---- failures ---- */

void sd_job__result_fail(struct sd_job *job, size_t idx, enum sd_job__res_state state,
                         const char *fmt, ...)
{
    struct sd_job__result *r = &job->res[idx];
    if (r->state == SD_JOB__RES_PENDING || r->state == SD_JOB__RES_DONE)
        r->state = state;
    if (r->why)
        return;
    char why[SD_JOB__WHY_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    r->why = strdup(why);
    if (state == SD_JOB__RES_SKIPPED) {
        sd_job__log(job, BASE_LOG_DEBUG, "job %u: %s: not run: %s", job->env.id,
                    sd_job__shard_name(job, idx), why);
        return;
    }
    /* A reason shared by shard after shard (a refused segment, a dead
     * agent) is logged once; the report groups those shards in one line. */
    if (strcmp(why, job->fail_last) == 0) {
        job->fail_repeats++;
        sd_job__log(job, BASE_LOG_DEBUG, "job %u: %s: %s", job->env.id,
                    sd_job__shard_name(job, idx), why);
        return;
    }
    sd_job__fail_repeats_log(job);
    snprintf(job->fail_last, sizeof job->fail_last, "%s", why);
    sd_job__log(job, BASE_LOG_ERROR, "job %u: %s: %s", job->env.id, sd_job__shard_name(job, idx),
                why);
}

void sd_job__fail_repeats_log(struct sd_job *job)
{
    if (job->fail_repeats)
        sd_job__log(job, BASE_LOG_ERROR,
                    "job %u: %" PRIu64 " more shard(s) failed the same way: %s", job->env.id,
                    job->fail_repeats, job->fail_last);
    job->fail_repeats = 0;
}

void sd_job__slot_fail(struct sd_job__slot *s, const char *fmt, ...)
{
    char why[SD_JOB__WHY_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    s->failed = 1;
    sd_job__result_fail(s->job, s->shard, SD_JOB__RES_FAILED, "%s", why);
}

/* ---- the query ---- */

void sd_job_query_make(uint64_t seed, uint32_t type, uint32_t dim, float *query_p)
{
    uint64_t state[4];
    sd_gen_seed(seed, UINT64_MAX, state);
    sd_gen_records(state, SD_RECORD_F32, dim, 1, query_p);
    if (type == SD_RECORD_F16)
        for (uint32_t i = 0; i < dim; i++)
            query_p[i] = sd_f16_to_f32(sd_f16_from_f32(query_p[i]));
}

int sd_job__query(struct sd_job *job, uint32_t type, uint32_t dim)
{
    if (job->cfg.nqueries)
        return 0; /* the file's, checked against every shard at create */
    if (job->query && job->query_dim == dim && job->query_type == type)
        return 0;
    float *q = realloc(job->query, (size_t)dim * sizeof(float));
    if (!q)
        return -ENOMEM;
    job->query = q;
    job->query_dim = dim;
    job->query_type = type;
    sd_job_query_make(job->cfg.query_seed, type, dim, q);
    return 0;
}

const float *sd_job__query_at(const struct sd_job *job, uint32_t q)
{
    return job->cfg.nqueries ? job->cfg.queries + (size_t)q * job->cfg.query_dim : job->query;
}

/* ---- the buffer's layout ---- */

/* A shard's staging buffer, all offsets from its start: the payload, the
 * checksum table (verify), then (scan) each query on a 64-byte stride and
 * the k hits the agent writes for each. */
struct sd_job__layout {
    uint64_t read_len, sums_off, query_off, query_stride, hits_off, lease_len;
    uint32_t k;
};

static void sd_job__layout_of(const struct sd_job_config *cfg, unsigned ops, uint32_t type,
                              uint32_t dim, uint64_t payload_len, uint64_t nblocks,
                              struct sd_job__layout *l)
{
    const uint32_t es = sd_record_elem_size(type);
    const uint64_t nq = cfg->nqueries ? cfg->nqueries : 1;
    l->read_len = sd_job__round_up(payload_len, SD_SHARD_ALIGN);
    l->sums_off = l->read_len;
    l->query_off =
        sd_job__round_up(l->sums_off + ((ops & SD_JOB__OP_VERIFY) ? 8 * nblocks : 0), 64);
    l->query_stride = sd_job__round_up((uint64_t)dim * es, 64);
    l->k = cfg->k < LT_SCAN_MAX_K ? (uint32_t)cfg->k : LT_SCAN_MAX_K;
    l->hits_off = l->query_off + nq * l->query_stride;
    l->lease_len = (ops & SD_JOB__OP_SCAN)
                       ? l->hits_off + nq * l->k * (uint64_t)sizeof(struct leasec_scan_hit)
                       : l->query_off;
}

uint64_t sd_job_buffer_size(const struct sd_job_config *cfg, enum sd_job_op op,
                            const struct sd_store_entry *e)
{
    const unsigned ops =
        (op & SD_JOB_VERIFY ? SD_JOB__OP_VERIFY : 0) | (op & SD_JOB_SCAN ? SD_JOB__OP_SCAN : 0);
    struct sd_job__layout l;
    sd_job__layout_of(cfg, ops, e->record_type, e->dim, e->payload_len, e->blocks, &l);
    return sd_job__round_up(l.lease_len, LEASEC_POOL_BUF_ALIGN);
}

/* ---- reads ---- */

/* On a staging thread: ring first (the GPU waits for nothing else), then
 * the optional CPU check, then hand the slot to the loop. */
static void sd_job__read_done(void *arg, int result, uint64_t bytes)
{
    struct sd_job__slot *s = arg;
    struct sd_job *job = s->job;
    s->read_rc = result;
    s->read_bytes = bytes;
    if (s->using_bell)
        leasec_client_ring(s->bell, s->seq);
    s->cpu_rc = 0;
    /* Without check threads the staging thread checks the bytes it read. */
    if (result == 0 && job->cfg.cpu_verify && (job->ops & SD_JOB__OP_VERIFY) && !job->check) {
        const uint64_t *table = NULL;
        uint64_t nblocks = 0;
        s->cpu_rc = sd_shard_table(s->sh, s->cpu_err, sizeof s->cpu_err, &table, &nblocks);
        if (s->cpu_rc == 0)
            s->cpu_rc = sd_job__check_blocks(s->buf.base, 0, s->payload_len, s->block_size, table,
                                             &s->cpu_fault);
        if (s->cpu_rc == -EBADMSG)
            snprintf(s->cpu_err, sizeof s->cpu_err, "block %" PRIu64 " bad", s->cpu_fault.block);
    }
    /* Once the slot is posted the loop may finish the job and free it:
     * nothing of the job is touched after the unlock. */
    const int notify_fd = job->env.notify_fd;
    const struct base_log_sink log = job->env.log; /* the sink (and its ctx) outlive the job */
    pthread_mutex_lock(&job->qmu);
    job->q[(job->qhead + job->qlen) % job->nslots] = s->idx;
    job->qlen++;
    if (--job->reads_active == 0)
        job->busy_ns += base_now_ns() - job->busy_start_ns;
    pthread_mutex_unlock(&job->qmu);
    uint64_t one = 1;
    if (write(notify_fd, &one, sizeof one) < 0 && errno != EAGAIN)
        base_log(&log, BASE_LOG_ERROR, "job", "staging: eventfd write failed: %s", strerror(errno));
}

static void sd_job__read_start(struct sd_job__slot *s, int bell)
{
    struct sd_job *job = s->job;
    s->using_bell = bell;
    s->read = SD_JOB__READ_RUNNING;
    s->read_err[0] = '\0';
    struct sd_read_req req = {
        .fd = sd_shard_fd(s->sh),
        .offset = sd_shard_payload_offset(s->sh),
        .len = s->read_len,
        .buf = s->buf.base,
        .buf_len = s->buf.len,
        .path = sd_shard_path(s->sh),
        .err = s->read_err,
        .err_len = sizeof s->read_err,
        .done = sd_job__read_done,
        .arg = s,
    };
    pthread_mutex_lock(&job->qmu);
    if (job->reads_active++ == 0)
        job->busy_start_ns = base_now_ns();
    pthread_mutex_unlock(&job->qmu);
    int rc = sd_reader_submit(job->env.reader, &req);
    if (rc < 0) {
        pthread_mutex_lock(&job->qmu);
        if (--job->reads_active == 0)
            job->busy_ns += base_now_ns() - job->busy_start_ns;
        pthread_mutex_unlock(&job->qmu);
        s->read = SD_JOB__READ_DONE;
        s->read_rc = rc;
        /* Work queued behind the bell must not wait forever. */
        if (bell)
            leasec_client_ring(s->bell, s->seq);
        sd_job__slot_fail(s, "staging read refused: %s",
                          s->read_err[0] ? s->read_err : strerror(-rc));
    }
}

void sd_job_staged(struct sd_job *job)
{
    sd_job__events_take(job);
    for (;;) {
        pthread_mutex_lock(&job->qmu);
        if (job->qlen == 0) {
            pthread_mutex_unlock(&job->qmu);
            return;
        }
        unsigned i = job->q[job->qhead];
        job->qhead = (job->qhead + 1) % job->nslots;
        job->qlen--;
        pthread_mutex_unlock(&job->qmu);
        struct sd_job__slot *s = &job->slots[i];
        struct sd_job__result *res = &job->res[s->shard];
        s->read = SD_JOB__READ_DONE;
        if (s->read_rc < 0) {
            sd_job__slot_fail(s, "staging read failed: %s",
                              s->read_err[0] ? s->read_err : strerror(-s->read_rc));
        } else {
            job->bytes_staged += s->payload_len;
            sd_job__log(job, BASE_LOG_DEBUG, "job %u: %s: staged %" PRIu64 " bytes%s", job->env.id,
                        sd_job__shard_name(job, s->shard), s->payload_len,
                        s->using_bell ? ", bell rung" : "");
            if (job->cfg.cpu_verify && (job->ops & SD_JOB__OP_VERIFY) && job->check) {
                if (!res->cpu_queued && sd_job__check_queue(job, s->shard) == 0)
                    res->cpu_queued = 1;
            } else if (job->cfg.cpu_verify && (job->ops & SD_JOB__OP_VERIFY)) {
                res->cpu_checked = 1;
                if (s->cpu_rc == -EBADMSG) {
                    res->cpu_bad = 1;
                    res->cpu_block = s->cpu_fault.block;
                } else if (s->cpu_rc < 0) {
                    sd_job__slot_fail(s, "CPU verify: %s", s->cpu_err);
                }
            }
        }
        unsigned early = s->early_mask;
        s->early_mask = 0;
        if (early & 1u)
            sd_job__apply(s, SD_JOB__OP_VERIFY, 0, s->early_status[0], &s->early_result[0]);
        for (uint32_t q = 0; (early & 2u) && q < job->nq; q++)
            if (s->qstate[q] == SD_JOB__Q_EARLY)
                sd_job__apply(s, SD_JOB__OP_SCAN, q, s->qearly[q].status, &s->qearly[q].result);
    }
}

/* ---- starting and finishing shards ---- */

int sd_job__start(struct sd_job *job, struct sd_job__slot *s, size_t idx)
{
    char err[SD_ERR_LEN];
    struct sd_shard *sh = NULL;
    int rc = sd_store_shard_open(job->st, idx, err, sizeof err, &sh);
    if (rc < 0) {
        sd_job__result_fail(job, idx, SD_JOB__RES_FAILED, "%s", err);
        return 1;
    }
    const struct sd_shard_header *h = sd_shard_header_get(sh);
    const uint64_t *table = NULL;
    uint64_t nblocks = 0;
    if (job->ops & SD_JOB__OP_VERIFY) {
        rc = sd_shard_table(sh, err, sizeof err, &table, &nblocks);
        if (rc < 0) {
            sd_job__result_fail(job, idx, SD_JOB__RES_FAILED,
                                "checksum table corrupt, no block can be trusted: %s", err);
            sd_shard_close(sh);
            return 1;
        }
    }
    /* The agent writes each query's top-k hits (16 bytes each) behind the queries. */
    struct sd_job__layout lay;
    sd_job__layout_of(&job->cfg, job->ops, h->record_type, h->dim, h->payload_len, nblocks, &lay);
    const uint64_t lease_len = lay.lease_len;
    if ((job->ops & SD_JOB__OP_SCAN) && sd_job__query(job, h->record_type, h->dim) < 0) {
        sd_job__result_fail(job, idx, SD_JOB__RES_FAILED, "out of memory for a %u-element query",
                            h->dim);
        sd_shard_close(sh);
        return 1;
    }
    const uint64_t want = sd_job__round_up(lease_len, LEASEC_POOL_BUF_ALIGN);
    if (job->active > 0 && job->bytes_held + want > SD_JOB__HELD_MAX) {
        if (!job->held_bounded) {
            char held[32];
            sd_job__bytes_fmt(job->bytes_held, held, sizeof held);
            sd_job__log(job, BASE_LOG_INFO,
                        "job %u: %u shard(s) in flight hold %s of staging buffers: more wait "
                        "(at most 256 MiB held; inflight %u is a bound, not a target)",
                        job->env.id, job->active, held, job->cfg.inflight);
            job->held_bounded = 1;
        }
        job->alloc_blocked = 1; /* until a slot frees its buffer */
        sd_shard_close(sh);
        return 0;
    }
    struct leasec_pool_buf buf;
    rc = leasec_pool_alloc(job->env.pool, LT_CLASS_PINNED,
                           (size_t)sd_job__round_up(lease_len, LEASEC_POOL_BUF_ALIGN), &buf);
    if (rc == -ENOMEM && job->active > 0) {
        job->alloc_blocked = 1; /* until a slot frees its buffer */
        sd_shard_close(sh);
        return 0;
    }
    if (rc < 0) {
        struct leasec_pool_class_stats ps = {0};
        leasec_pool_stats(job->env.pool, LT_CLASS_PINNED, &ps);
        char need[32], cap[32];
        sd_job__bytes_fmt(lease_len, need, sizeof need);
        sd_job__bytes_fmt(ps.capacity, cap, sizeof cap);
        sd_job__result_fail(job, idx, SD_JOB__RES_FAILED,
                            "needs a %s staging buffer; the PINNED pool (%s in %u segment(s)) "
                            "cannot hold one (raise pinned-pool / segment-size): %s",
                            need, cap, ps.segments, strerror(-rc));
        sd_shard_close(sh);
        return 1;
    }
    unsigned char *base = buf.base;
    if (table)
        memcpy(base + lay.sums_off, table, 8 * nblocks);
    for (uint32_t q = 0; (job->ops & SD_JOB__OP_SCAN) && q < job->nq; q++) {
        const float *query = sd_job__query_at(job, q);
        unsigned char *at = base + lay.query_off + q * lay.query_stride;
        if (h->record_type == SD_RECORD_F16) {
            for (uint32_t i = 0; i < h->dim; i++) {
                uint16_t v = sd_f16_from_f32(query[i]);
                memcpy(at + 2 * (uint64_t)i, &v, 2);
            }
        } else {
            memcpy(at, query, (size_t)h->dim * 4);
        }
    }
    uint64_t *bell = s->bell, *done = s->done;
    uint64_t word_off = s->word_off;
    unsigned char *qstate = s->qstate;
    struct sd_job__early *qearly = s->qearly;
    memset(s, 0, sizeof *s);
    s->job = job;
    s->idx = (unsigned)(s - job->slots);
    s->bell = bell;
    s->done = done;
    s->word_off = word_off;
    s->qstate = qstate;
    s->qearly = qearly;
    memset(qstate, SD_JOB__Q_TODO, job->nq);
    if (job->ops & SD_JOB__OP_SCAN)
        s->scan_todo = s->scan_left = job->nq;
    s->active = 1;
    s->seq = ++*job->env.seq;
    s->shard = idx;
    s->sh = sh;
    s->buf = buf;
    s->have_buf = 1;
    s->held = want;
    job->bytes_held += want;
    s->payload_len = h->payload_len;
    s->read_len = lay.read_len;
    s->sums_off = lay.sums_off;
    s->query_off = lay.query_off;
    s->query_stride = lay.query_stride;
    s->hits_off = lay.hits_off;
    s->k = lay.k;
    s->lease_len = lease_len;
    s->block_size = h->block_size;
    s->dim = h->dim;
    s->type = h->record_type;
    s->ops_todo = job->ops;
    s->lease = SD_JOB__L_WANT;
    job->active++;
    job->bytes_started += h->payload_len;
    sd_job__log(job, BASE_LOG_DEBUG,
                "job %u: %s: started in slot %u (seq %" PRIu64
                ", buffer %zu bytes at segment %u + %" PRIu64 ")",
                job->env.id, sd_job__shard_name(job, idx), s->idx, s->seq, buf.len, buf.segment_id,
                buf.offset);
    /* Without the doorbell the read overlaps the lease round trip. */
    if (!job->doorbell)
        sd_job__read_start(s, 0);
    return 1;
}

/* The slot is done with its shard: give the buffer back (its lease is
 * gone), close the shard, free the slot. */
static void sd_job__finish_slot(struct sd_job__slot *s)
{
    struct sd_job *job = s->job;
    struct sd_job__result *r = &job->res[s->shard];
    if (r->state == SD_JOB__RES_PENDING) {
        if (r->got == job->ops && !s->failed)
            r->state = SD_JOB__RES_DONE;
        else
            sd_job__result_fail(job, s->shard, SD_JOB__RES_FAILED, "no result for %s",
                                (job->ops & ~r->got) == SD_JOB__OP_SCAN ? "scan" : "verify");
    }
    if (s->read == SD_JOB__READ_DONE && s->read_rc == 0 && !s->failed) {
        job->bytes_done += s->payload_len;
        if (r->state == SD_JOB__RES_DONE)
            sd_job__agent_done(job, s->l.agent, s->payload_len);
    }
    if (s->have_buf && !s->quarantine)
        leasec_pool_free(job->env.pool, &s->buf);
    job->bytes_held -= s->held;
    s->held = 0;
    if (s->quarantine)
        sd_job__log(job, BASE_LOG_WARN,
                    "job %u: %s: its buffer (segment %u + %" PRIu64 ") stays out of the pool: the "
                    "agent did not confirm the release",
                    job->env.id, sd_job__shard_name(job, s->shard), s->buf.segment_id,
                    s->buf.offset);
    s->have_buf = 0;
    sd_shard_close(s->sh);
    s->sh = NULL;
    s->active = 0;
    job->active--;
    job->alloc_blocked = 0;
}

/* ---- results ---- */

/* Slot @s's part of its agent's words area (the lease's connection), or
 * NULL when that agent gave none or it is too small for the slot. */
static const unsigned char *sd_job__words_of(const struct sd_job__slot *s)
{
    const unsigned char *base = NULL;
    uint64_t size = 0;
    if (leasec_client_words(s->job->env.client, s->l.agent, &base, &size) < 0 ||
        (uint64_t)(s->idx + 1) * SD_JOB_WORDS_STRIDE > size)
        return NULL;
    return base + (uint64_t)s->idx * SD_JOB_WORDS_STRIDE;
}

/* Copies the top-k hits the agent wrote for query @q of slot @s (into the
 * lease, or the slot's part of the words area, which holds one query's at a
 * time) to @sc: min(records, k) real hits, indices below records, strictly
 * falling in rank, the first the completion's best. Returns 0, or -1 (the
 * slot failed with a message) when they are not that or memory runs out. */
static int sd_job__hits_take(struct sd_job__slot *s, uint32_t q, struct sd_job__scan *sc,
                             const union leasec_op_result *r)
{
    const uint64_t n = r->scan.records_scanned < s->k ? r->scan.records_scanned : s->k;
    const unsigned char *area = s->words_area ? sd_job__words_of(s) : NULL;
    if (s->words_area && !area) {
        sd_job__slot_fail(s, "the agent's words area is gone: no hits to read");
        return -1;
    }
    const unsigned char *at = area ? area + SD_JOB_WORDS_HITS
                                   : (const unsigned char *)s->buf.base + s->hits_off +
                                         (uint64_t)q * s->k * sizeof(struct leasec_scan_hit);
    struct kn_scan_hit *hits = calloc(n ? n : 1, sizeof *hits);
    if (!hits) {
        sd_job__slot_fail(s, "out of memory for %" PRIu64 " scan hits", n);
        return -1;
    }
    for (uint64_t i = 0; i < n; i++) {
        struct leasec_scan_hit h;
        memcpy(&h, at + i * sizeof h, sizeof h);
        hits[i].score = lt_f32_from_bits(h.score_bits);
        hits[i].index = h.index;
        hits[i].shard = 0;
        int ok = h.index < r->scan.records_scanned && h.reserved == 0;
        if (ok && i == 0)
            ok = h.index == r->scan.best_index && h.score_bits == r->scan.best_score_bits;
        else if (ok)
            ok = kn_scan_key(hits[i].score, h.index) <
                 kn_scan_key(hits[i - 1].score, hits[i - 1].index);
        if (!ok) {
            free(hits);
            sd_job__slot_fail(
                s,
                "the agent's top-%u hits for query %" PRIu64 " are inconsistent: hit %" PRIu64
                " (record %" PRIu64 " of %" PRIu64 ") out of range or order",
                s->k, sd_job__query_id(s->job, q), i, h.index, r->scan.records_scanned);
            return -1;
        }
    }
    free(sc->hits);
    sc->hits = hits;
    sc->nhits = (size_t)n;
    return 0;
}

/* The counts follow the state; the scan op is in flight while any query
 * is (or waits, answered, in EARLY), and done once every query is. */
void sd_job__query_move(struct sd_job__slot *s, uint32_t q, enum sd_job__qstate to)
{
    const unsigned char from = s->qstate[q];
    s->scan_todo -= from == SD_JOB__Q_TODO;
    s->scan_busy -= from == SD_JOB__Q_INFLIGHT || from == SD_JOB__Q_EARLY;
    s->scan_left -= from != SD_JOB__Q_DONE;
    s->qstate[q] = (unsigned char)to;
    s->scan_todo += to == SD_JOB__Q_TODO;
    s->scan_busy += to == SD_JOB__Q_INFLIGHT || to == SD_JOB__Q_EARLY;
    s->scan_left += to != SD_JOB__Q_DONE;
    if (s->scan_busy)
        s->ops_inflight |= SD_JOB__OP_SCAN;
    else
        s->ops_inflight &= ~SD_JOB__OP_SCAN;
    if (!s->scan_left)
        s->ops_todo &= ~SD_JOB__OP_SCAN;
}

static void sd_job__apply(struct sd_job__slot *s, unsigned op, uint32_t q, uint32_t status,
                          const union leasec_op_result *r)
{
    struct sd_job *job = s->job;
    struct sd_job__result *res = &job->res[s->shard];
    struct sd_job__scan *sc = op == SD_JOB__OP_SCAN ? &res->scan[q] : NULL;
    if (sc) {
        sd_job__query_move(s, q, SD_JOB__Q_DONE);
    } else {
        s->ops_inflight &= ~op;
        s->ops_todo &= ~op;
    }
    job->completions++;
    if (sc ? sc->got : (res->got & op) != 0) {
        res->duplicates++;
        job->duplicates++;
        return;
    }
    if (sc) {
        sc->got = 1;
        /* The scan is one op of the shard: in once every query is. */
        if (++res->scans_got == job->nq) {
            res->got |= op;
            res->completions++;
        }
    } else {
        res->got |= op;
        res->completions++;
    }
    if (s->read_rc < 0)
        return; /* the work ran on bytes that never landed: the read error is the result */
    const char *name = sd_job__shard_name(job, s->shard);
    if (op == SD_JOB__OP_VERIFY) {
        if (status == LT_OK || status == LT_E_CHECKSUM_MISMATCH) {
            res->vstatus = status;
            res->v = r->checksum;
            if (status == LT_E_CHECKSUM_MISMATCH)
                job->bad_blocks += r->checksum.bad_blocks;
            sd_job__log(job, status == LT_OK ? BASE_LOG_DEBUG : BASE_LOG_WARN,
                        "job %u: %s: verify %s (%" PRIu64 " blocks, %" PRIu64 " bad)", job->env.id,
                        name, status == LT_OK ? "ok" : "found corrupt blocks",
                        r->checksum.blocks_checked, r->checksum.bad_blocks);
        } else {
            sd_job__slot_fail(s, "checksum verify on the agent failed: %s (%s)",
                              lt_error_name(status), lt_error_describe(status));
        }
    } else {
        if (status == LT_OK) {
            res->records = r->scan.records_scanned;
            if (r->scan.best_index != LT_BLOCK_NONE) {
                if (sd_job__hits_take(s, q, sc, r) < 0)
                    return;
                sc->has_hit = 1;
                sc->hit.score = lt_f32_from_bits(r->scan.best_score_bits);
                sc->hit.index = r->scan.best_index;
                sc->hit.shard = 0;
            }
            if (job->nq == 1)
                sd_job__log(job, BASE_LOG_DEBUG,
                            "job %u: %s: scan done (%" PRIu64 " records, best %" PRIu64 ")",
                            job->env.id, name, r->scan.records_scanned, r->scan.best_index);
            else if (res->scans_got == job->nq)
                sd_job__log(job, BASE_LOG_DEBUG,
                            "job %u: %s: scan done (%u queries over %" PRIu64 " records)",
                            job->env.id, name, job->nq, r->scan.records_scanned);
        } else {
            sd_job__slot_fail(s, "vector scan of query %" PRIu64 " on the agent failed: %s (%s)",
                              sd_job__query_id(job, q), lt_error_name(status),
                              lt_error_describe(status));
        }
    }
}

struct sd_job__slot *sd_job__slot_of(struct sd_job *job, uint64_t tag)
{
    if (!sd_job__tag_mine(job, tag))
        return NULL;
    unsigned i = sd_job__tag_slot(tag);
    if (i >= job->nslots)
        return NULL;
    struct sd_job__slot *s = &job->slots[i];
    const uint64_t seq = sd_job__tag_seq(tag) >> SD_JOB__TAG_QUERY_BITS;
    return s->active && (s->seq & SD_JOB__TAG_WORK_SEQ_MASK) == seq ? s : NULL;
}

void sd_job_on_completion(struct sd_job *job, const struct leasec_client_completion *c)
{
    unsigned kind = sd_job__tag_kind(c->tag);
    if (kind == SD_JOB__TAG_RING_SHARD) {
        sd_job__stream_on_completion(job, c);
        return;
    }
    unsigned op = kind == SD_JOB__TAG_VERIFY ? SD_JOB__OP_VERIFY : SD_JOB__OP_SCAN;
    const uint32_t q = sd_job__tag_query(c->tag);
    struct sd_job__slot *s = sd_job__slot_of(job, c->tag);
    const int waited =
        s && (op == SD_JOB__OP_VERIFY ? (s->ops_inflight & op) != 0 && q == 0
                                      : q < job->nq && s->qstate[q] == SD_JOB__Q_INFLIGHT);
    if ((kind != SD_JOB__TAG_VERIFY && kind != SD_JOB__TAG_SCAN) || !waited) {
        job->stale++;
        sd_job__log(job, BASE_LOG_DEBUG,
                    "job %u: completion #%" PRIu64 " matches no work in flight; ignored",
                    job->env.id, c->request_id);
        return;
    }
    const unsigned char *area = s->words_area ? sd_job__words_of(s) : NULL;
    const uint64_t *done = area ? (const uint64_t *)(const void *)area : s->done;
    if ((job->agents[s->l.agent].caps & LT_CAP_DONE_WORD) && (!s->words_area || area) &&
        leasec_client_done_word_read(done) >= s->seq)
        job->done_words_seen++;
    if (s->read == SD_JOB__READ_RUNNING) {
        /* The bell rang but the staging thread has not posted the slot yet:
         * keep the result until the read is taken. */
        if (op == SD_JOB__OP_VERIFY) {
            s->early_mask |= 1u;
            s->early_status[0] = c->status;
            s->early_result[0] = c->result;
        } else {
            s->early_mask |= 2u;
            s->qearly[q].status = c->status;
            s->qearly[q].result = c->result;
            sd_job__query_move(s, q, SD_JOB__Q_EARLY);
        }
        return;
    }
    sd_job__apply(s, op, q, c->status, &c->result);
}

/* ---- submits ---- */

/* Submits @op (query @q's scan) on the slot's lease. Returns 0 (submitted,
 * or refused for good: the slot failed), or -1 on a transient error. */
static int sd_job__submit_one(struct sd_job__slot *s, unsigned op, uint32_t q,
                              const struct lt_stream_id *stream, int bell)
{
    struct sd_job *job = s->job;
    const struct sd_job__agent *ag = &job->agents[s->l.agent];
    struct leasec_client_work w = {.stream = *stream};
    const uint64_t area_off = (uint64_t)s->idx * SD_JOB_WORDS_STRIDE;
    if (op == SD_JOB__OP_VERIFY) {
        w.op = LT_OP_CHECKSUM_VERIFY;
        w.args.checksum = (struct leasec_op_checksum){
            .offset = 0,
            .length = s->payload_len,
            .sums_offset = s->sums_off,
            .block_size = s->block_size,
        };
    } else {
        w.op = LT_OP_VECTOR_SCAN;
        w.args.scan = (struct leasec_op_scan){
            .offset = 0,
            .length = s->payload_len,
            .query_offset = s->query_off + q * s->query_stride,
            .dim = s->dim,
            .elem = (uint16_t)(s->type == SD_RECORD_F16 ? LT_ELEM_F16 : LT_ELEM_F32),
            .metric = LT_SCAN_DOT,
            .hits_offset = s->words_area ? area_off + SD_JOB_WORDS_HITS
                                         : s->hits_off + (uint64_t)q * s->k *
                                                             sizeof(struct leasec_scan_hit),
            .k = s->k,
        };
    }
    if (bell)
        w.bell = (struct leasec_client_word){job->env.words_segment, s->word_off, s->seq};
    if ((ag->caps & LT_CAP_DONE_WORD) && s->words_area)
        w.done = (struct leasec_client_word){LEASEC_WORDS_KEY, area_off, s->seq};
    else if (ag->caps & LT_CAP_DONE_WORD)
        w.done = (struct leasec_client_word){job->env.words_segment, s->word_off + 8, s->seq};
    unsigned kind = op == SD_JOB__OP_VERIFY ? SD_JOB__TAG_VERIFY : SD_JOB__TAG_SCAN;
    uint64_t rid = 0;
    int rc = leasec_client_submit(job->env.client, &s->l, &w,
                                  sd_job__work_tag(job, kind, s->idx, s->seq, q), &rid);
    if (rc == 0) {
        if (op == SD_JOB__OP_SCAN)
            sd_job__query_move(s, q, SD_JOB__Q_INFLIGHT);
        else
            s->ops_inflight |= op;
        job->submits++;
        if (bell)
            job->bell_submits++;
        return 0;
    }
    if (sd_job__transient(rc))
        return -1;
    s->ops_todo &= ~op;
    sd_job__slot_fail(s, "%s not submitted: %s", op == SD_JOB__OP_VERIFY ? "verify" : "scan",
                      leasec_client_last_error(job->env.client));
    return 0;
}

static void sd_job__submit(struct sd_job__slot *s)
{
    struct sd_job *job = s->job;
    const struct sd_job__agent *ag = &job->agents[s->l.agent];
    const int bell = job->doorbell && (ag->caps & LT_CAP_DOORBELL);
    if (job->cfg.doorbell == SD_DOORBELL_ON && !(ag->caps & LT_CAP_DOORBELL)) {
        sd_job__slot_fail(s,
                          "doorbell on, but agent %u did not grant the DOORBELL capability "
                          "(caps 0x%x)",
                          s->l.agent, ag->caps);
        return;
    }
    if (!bell) {
        if (s->read == SD_JOB__READ_NONE)
            sd_job__read_start(s, 0);
        if (s->read != SD_JOB__READ_DONE)
            return; /* a plain submit goes once the bytes are in */
    } else if (s->read == SD_JOB__READ_RUNNING && !s->using_bell) {
        return; /* a plain read is landing (agent switched): submit after it */
    } else if (s->read == SD_JOB__READ_DONE) {
        leasec_client_ring(s->bell, s->seq); /* the bytes are in already */
    }
    if (s->read == SD_JOB__READ_DONE && s->read_rc < 0)
        return;
    struct lt_stream_id stream = {0, 0};
    if (job->env.stream)
        job->env.stream(job->env.stream_ctx, s->l.agent, s->idx, &stream);
    /* Where the agent writes for this slot: its words area when it gave one
     * (the pool's segments are read-only to it), else our MAPPED words. */
    s->words_area = sd_job__words_of(s) != NULL;
    /* The verify, then each query's scan still to do, with at most
     * SD_JOB__SCAN_WINDOW of them in flight (one with the words area: the
     * slot's part of it holds one query's hits): completions let more go. */
    const uint32_t window = s->words_area ? 1u : SD_JOB__SCAN_WINDOW;
    for (unsigned op = SD_JOB__OP_VERIFY; op <= SD_JOB__OP_SCAN && !s->failed; op <<= 1) {
        const int scan = op == SD_JOB__OP_SCAN;
        if (!scan && !(s->ops_todo & ~s->ops_inflight & op))
            continue;
        for (uint32_t q = scan ? s->scan_next : 0; q < (scan ? job->nq : 1) && !s->failed; q++) {
            if (scan && s->qstate[q] != SD_JOB__Q_TODO) {
                s->scan_next += s->scan_next == q;
                continue;
            }
            if (scan && (s->scan_todo == 0 || s->scan_busy >= window))
                break;
            if (sd_job__submit_one(s, op, q, &stream, bell) < 0)
                return; /* transient: on_disconnect follows, a new lease, then this again */
            if (scan)
                s->scan_next += s->scan_next == q;
        }
    }
    /* The work waits behind the bell: only now may the bytes start landing. */
    if (bell && s->read == SD_JOB__READ_NONE && s->ops_inflight)
        sd_job__read_start(s, 1);
}

void sd_job__advance(struct sd_job__slot *s)
{
    struct sd_job *job = s->job;
    if (!s->active)
        return;
    const int settled = (s->failed || s->ops_todo == 0) && s->ops_inflight == 0;
    const int work_left = sd_job__work_left(s);
    switch (s->lease) {
    case SD_JOB__L_NONE:
    case SD_JOB__L_WANT:
        if (job->abandoned) {
            s->lease = SD_JOB__L_NONE;
            s->ops_inflight = 0;
        }
        if (settled || job->abandoned) {
            /* A read still landing writes into the buffer: wait for it. */
            s->lease = SD_JOB__L_NONE;
            if (s->read != SD_JOB__READ_RUNNING)
                sd_job__finish_slot(s);
            return;
        }
        if (work_left)
            s->lease = SD_JOB__L_WANT;
        return;
    case SD_JOB__L_HELD:
        if (settled) {
            s->lease = SD_JOB__L_RELEASE_WANT;
            return;
        }
        if (work_left)
            sd_job__submit(s);
        if ((s->failed || s->ops_todo == 0) && s->ops_inflight == 0)
            s->lease = SD_JOB__L_RELEASE_WANT;
        return;
    default:
        return;
    }
}
