/* The streaming path's tasks (docs/streaming.md): a (shard, op) made into
 * an image layout (payload, then the checksum table or the query), its one
 * RING_SHARD, and its result once the COMPLETION came and every chunk was
 * stored. On the loop's thread; job_stream.c has the rings' life. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job_internal.h"

/* ---- tasks ------------------------------------------------------------------- */

void sd_job__task_free(struct sd_job__task *t)
{
    if (!t)
        return;
    sd_shard_close(t->sh);
    free(t->tail);
    free(t);
}

/* Removes @t from @r's outstanding list and frees its hits area. */
void sd_job__task_unlink(struct sd_job__ring *r, struct sd_job__task *t)
{
    for (unsigned i = 0; i < r->nout; i++) {
        if (r->out[i] != t)
            continue;
        memmove(&r->out[i], &r->out[i + 1], (r->nout - i - 1) * sizeof(r->out[0]));
        r->nout--;
        break;
    }
    if (t->op == SD_JOB__OP_SCAN && sd_job__scan_k(r->job))
        r->hits_busy &= ~(1ull << t->hits_idx);
    r->job->stream->inflight_tasks--;
}

/* The unit to stream next, or SIZE_MAX. */
static size_t sd_job__unit_next(struct sd_job *job)
{
    struct sd_job__stream *st = job->stream;
    if (st->nredo)
        return st->redo[--st->nredo];
    if (job->cancelled || st->next_unit >= st->nunits) {
        sd_job__drain_set(job, 1);
        return SIZE_MAX;
    }
    size_t u = st->next_unit++;
    size_t shards = sd_job__div_up(st->next_unit, sd_job__nops(job));
    if (shards > job->next_shard)
        job->next_shard = shards;
    return u;
}

int sd_job__unit_redo(struct sd_job *job, size_t u)
{
    struct sd_job__stream *st = job->stream;
    if (st->nredo == st->redo_cap) {
        size_t cap = st->redo_cap ? 2 * st->redo_cap : 64;
        size_t *n = realloc(st->redo, cap * sizeof(*n));
        if (!n)
            return -ENOMEM;
        st->redo = n;
        st->redo_cap = cap;
    }
    st->redo[st->nredo++] = u;
    sd_job__drain_set(job, 0);
    return 0;
}

/* Whether every unit is handed out, so that a staging thread with nothing
 * to stage helps another ring (job_ring.c); the idle threads are woken to
 * look when it becomes so. */
void sd_job__drain_set(struct sd_job *job, int on)
{
    struct sd_job__stream *st = job->stream;
    if (__atomic_load_n(&st->drain, __ATOMIC_RELAXED) == on)
        return;
    __atomic_store_n(&st->drain, on, __ATOMIC_RELEASE);
    if (!on)
        return;
    for (unsigned i = 0; i < st->nrings; i++) {
        struct sd_job__ring *r = &st->rings[i];
        pthread_mutex_lock(&r->mu);
        pthread_cond_signal(&r->cv);
        pthread_mutex_unlock(&r->mu);
    }
}

/* Builds the task for unit @u: the shard open, its image's layout and
 * tail. NULL when the shard failed for good (its result says why). */
static struct sd_job__task *sd_job__task_make(struct sd_job *job, size_t u)
{
    struct sd_job__stream *st = job->stream;
    const size_t idx = u / sd_job__nops(job);
    const unsigned op = sd_job__unit_op(job, u);
    char err[SD_ERR_LEN];
    struct sd_job__task *t = calloc(1, sizeof(*t));
    if (!t) {
        sd_job__result_fail(job, idx, SD_JOB__RES_FAILED, "out of memory for a streaming task");
        return NULL;
    }
    t->id = ++st->next_task;
    t->shard = idx;
    t->op = op;
    if (sd_store_shard_open(job->st, idx, err, sizeof err, &t->sh) < 0) {
        sd_job__result_fail(job, idx, SD_JOB__RES_FAILED, "%s", err);
        free(t);
        return NULL;
    }
    const struct sd_shard_header *h = sd_shard_header_get(t->sh);
    t->fd = sd_shard_fd(t->sh);
    t->payload_off = sd_shard_payload_offset(t->sh);
    t->payload_len = h->payload_len;
    t->block_size = h->block_size;
    if (op == SD_JOB__OP_VERIFY) {
        uint64_t nblocks = 0;
        if (sd_shard_table(t->sh, err, sizeof err, &t->table, &nblocks) < 0) {
            sd_job__result_fail(job, idx, SD_JOB__RES_FAILED,
                                "checksum table corrupt, no block can be trusted: %s", err);
            sd_job__task_free(t);
            return NULL;
        }
        t->tail_off = sd_job__round_up(t->payload_len, 8);
        t->image_len = t->tail_off + 8 * nblocks;
    } else {
        const uint32_t es = sd_record_elem_size(h->record_type);
        if (sd_job__query(job, h->record_type, h->dim) < 0) {
            sd_job__result_fail(job, idx, SD_JOB__RES_FAILED,
                                "out of memory for a %u-element query", h->dim);
            sd_job__task_free(t);
            return NULL;
        }
        t->tail_off = sd_job__round_up(t->payload_len, 64);
        t->image_len = t->tail_off + (uint64_t)h->dim * es;
    }
    t->tail = calloc(1, (size_t)(t->image_len - t->payload_len));
    if (!t->tail) {
        sd_job__result_fail(job, idx, SD_JOB__RES_FAILED, "out of memory for a shard's tail");
        sd_job__task_free(t);
        return NULL;
    }
    unsigned char *tail = t->tail + (t->tail_off - t->payload_len);
    const float *query = sd_job__query_at(job, 0); /* the path streams one query */
    if (op == SD_JOB__OP_VERIFY) {
        memcpy(tail, t->table, (size_t)(t->image_len - t->tail_off));
    } else if (h->record_type == SD_RECORD_F16) {
        for (uint32_t i = 0; i < h->dim; i++) {
            uint16_t v = sd_f16_from_f32(query[i]);
            memcpy(tail + 2 * (uint64_t)i, &v, 2);
        }
    } else {
        memcpy(tail, query, (size_t)h->dim * 4);
    }
    t->inline_check = op == SD_JOB__OP_VERIFY && job->cfg.cpu_verify && !job->check &&
                      st->chunk % t->block_size == 0;
    return t;
}

/* The wire form of @t's op. */
static void sd_job__task_shard(const struct sd_job *job, const struct sd_job__ring *r,
                               const struct sd_job__task *t, struct leasec_ring_shard *sh)
{
    memset(sh, 0, sizeof *sh);
    sh->first_seq = t->first_seq;
    sh->length = t->image_len;
    if (t->op == SD_JOB__OP_VERIFY) {
        sh->op = LEASEC_OP_CHECKSUM_VERIFY;
        sh->args.checksum = (struct leasec_op_checksum){
            .offset = 0,
            .length = t->payload_len,
            .sums_offset = t->tail_off,
            .block_size = t->block_size,
        };
        return;
    }
    const struct sd_shard_header *h = sd_shard_header_get(t->sh);
    const uint32_t k = sd_job__scan_k(job);
    sh->op = LEASEC_OP_VECTOR_SCAN;
    sh->args.scan = (struct leasec_op_scan){
        .offset = 0,
        .length = t->payload_len,
        .query_offset = t->tail_off,
        .dim = h->dim,
        .elem = (uint16_t)(h->record_type == SD_RECORD_F16 ? LEASEC_ELEM_F16 : LEASEC_ELEM_F32),
        .metric = LEASEC_SCAN_DOT,
        .hits_offset = k ? r->hits_off + (uint64_t)t->hits_idx * r->hits_stride : 0,
        .k = k,
    };
}

/* Hands @r one more task. Returns 1 when a unit was taken (streamed, or
 * failed for good), 0 when there is nothing to take or the send must wait. */
int sd_job__ring_feed(struct sd_job *job, struct sd_job__ring *r)
{
    struct sd_job__stream *st = job->stream;
    size_t u = sd_job__unit_next(job);
    if (u == SIZE_MAX)
        return 0;
    struct sd_job__task *t = sd_job__task_make(job, u);
    if (!t)
        return 1;
    if (t->op == SD_JOB__OP_SCAN && sd_job__scan_k(job)) {
        while (t->hits_idx < r->ring.depth && (r->hits_busy & (1ull << t->hits_idx)))
            t->hits_idx++;
        r->hits_busy |= 1ull << t->hits_idx;
    }
    t->first_seq = r->next_seq;
    t->chunks = leasec_ring_chunks(&r->ring, t->image_len);
    struct leasec_ring_shard sh;
    sd_job__task_shard(job, r, t, &sh);
    uint64_t rid = 0;
    int rc =
        leasec_client_ring_shard(job->env.client, &r->ring, &sh,
                                 sd_job__tag(job, SD_JOB__TAG_RING_SHARD, r->idx, t->id), &rid);
    if (rc < 0) {
        if (t->op == SD_JOB__OP_SCAN && sd_job__scan_k(job))
            r->hits_busy &= ~(1ull << t->hits_idx);
        if (sd_job__transient(rc)) {
            sd_job__unit_redo(job, u); /* on_disconnect follows: a new ring, then this */
            sd_job__task_free(t);
            return 0;
        }
        sd_job__result_fail(job, t->shard, SD_JOB__RES_FAILED, "%s not sent: %s",
                            t->op == SD_JOB__OP_VERIFY ? "verify" : "scan",
                            leasec_client_last_error(job->env.client));
        sd_job__task_free(t);
        return 1;
    }
    r->next_seq += t->chunks;
    st->shard_msgs++;
    st->inflight_tasks++;
    r->out[r->nout++] = t;
    job->submits++;
    if (t->op == SD_JOB__OP_VERIFY && job->cfg.cpu_verify && job->check &&
        !job->res[t->shard].cpu_queued) {
        if (sd_job__check_queue(job, t->shard) == 0)
            job->res[t->shard].cpu_queued = 1;
    }
    if (u % sd_job__nops(job) == 0)
        job->bytes_started += t->payload_len;
    sd_job__log(job, BASE_LOG_DEBUG,
                "job %u: %s: %s streamed on ring %u: chunks %" PRIu64 "..%" PRIu64 " (%" PRIu64
                " bytes)",
                job->env.id, sd_job__shard_name(job, t->shard),
                t->op == SD_JOB__OP_VERIFY ? "verify" : "scan", r->idx, t->first_seq,
                t->first_seq + t->chunks - 1, t->image_len);
    pthread_mutex_lock(&r->mu);
    t->next = NULL;
    if (r->q_tail)
        r->q_tail->next = t;
    else
        r->q_head = t;
    r->q_tail = t;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return 1;
}

/* ---- results -------------------------------------------------------------------- */

/* Copies the top-k hits the agent wrote into the ring's words buffer. */
static int sd_job__task_hits(struct sd_job *job, const struct sd_job__ring *r,
                             const struct sd_job__task *t, struct sd_job__result *res,
                             const union leasec_op_result *rr)
{
    const uint32_t k = sd_job__scan_k(job);
    const uint64_t n = rr->scan.records_scanned < k ? rr->scan.records_scanned : k;
    const unsigned char *at = (const unsigned char *)r->words_buf.base + r->hits_off +
                              (uint64_t)t->hits_idx * r->hits_stride;
    struct kn_scan_hit *hits = calloc(n ? n : 1, sizeof *hits);
    if (!hits) {
        sd_job__result_fail(job, t->shard, SD_JOB__RES_FAILED, "out of memory for scan hits");
        return -1;
    }
    for (uint64_t i = 0; i < n; i++) {
        struct leasec_scan_hit h;
        memcpy(&h, at + i * sizeof h, sizeof h);
        hits[i].score = lt_f32_from_bits(h.score_bits);
        hits[i].index = h.index;
        int ok = h.index < rr->scan.records_scanned && h.reserved == 0;
        if (ok && i == 0)
            ok = h.index == rr->scan.best_index && h.score_bits == rr->scan.best_score_bits;
        else if (ok)
            ok = kn_scan_key(hits[i].score, h.index) <
                 kn_scan_key(hits[i - 1].score, hits[i - 1].index);
        if (!ok) {
            free(hits);
            sd_job__result_fail(job, t->shard, SD_JOB__RES_FAILED,
                                "the agent's top-%u hits are inconsistent: hit %" PRIu64
                                " (record %" PRIu64 " of %" PRIu64 ") out of range or order",
                                k, i, h.index, rr->scan.records_scanned);
            return -1;
        }
    }
    free(res->scan[0].hits);
    res->scan[0].hits = hits;
    res->scan[0].nhits = (size_t)n;
    return 0;
}

/* @t has its completion and every chunk stored: its result counts. */
void sd_job__task_finish(struct sd_job *job, struct sd_job__ring *r, struct sd_job__task *t)
{
    struct sd_job__result *res = &job->res[t->shard];
    const char *name = sd_job__shard_name(job, t->shard);
    sd_job__task_unlink(r, t);
    job->stream->t_gpu_end = base_now_ns();
    job->completions++;
    if (res->got & t->op) {
        res->duplicates++;
        job->duplicates++;
        sd_job__task_free(t);
        return;
    }
    res->got |= t->op;
    res->completions++;
    const int first_op = t->op == SD_JOB__OP_VERIFY || !(job->ops & SD_JOB__OP_VERIFY);
    if (t->read_rc < 0) {
        sd_job__result_fail(job, t->shard, SD_JOB__RES_FAILED, "staging read failed: %s",
                            t->read_err[0] ? t->read_err : strerror(-t->read_rc));
    } else if (t->op == SD_JOB__OP_VERIFY) {
        if (first_op)
            job->bytes_staged += t->payload_len;
        if (t->inline_check) {
            res->cpu_checked = 1;
            if (t->cpu_rc == -EBADMSG) {
                res->cpu_bad = 1;
                res->cpu_block = t->cpu_fault.block;
            }
        }
        if (t->status == LT_OK || t->status == LT_E_CHECKSUM_MISMATCH) {
            res->vstatus = t->status;
            res->v = t->result.checksum;
            if (t->status == LT_E_CHECKSUM_MISMATCH)
                job->bad_blocks += t->result.checksum.bad_blocks;
            sd_job__log(job, t->status == LT_OK ? BASE_LOG_DEBUG : BASE_LOG_WARN,
                        "job %u: %s: verify %s (%" PRIu64 " blocks, %" PRIu64 " bad)", job->env.id,
                        name, t->status == LT_OK ? "ok" : "found corrupt blocks",
                        t->result.checksum.blocks_checked, t->result.checksum.bad_blocks);
        } else {
            sd_job__result_fail(job, t->shard, SD_JOB__RES_FAILED,
                                "checksum verify on the agent failed: %s (%s)",
                                lt_error_name(t->status), lt_error_describe(t->status));
        }
    } else {
        if (first_op)
            job->bytes_staged += t->payload_len;
        if (t->status == LT_OK) {
            struct sd_job__scan *sc = &res->scan[0];
            res->records = t->result.scan.records_scanned;
            sc->got = 1;
            res->scans_got = 1;
            if (t->result.scan.best_index != LT_BLOCK_NONE &&
                sd_job__task_hits(job, r, t, res, &t->result) == 0) {
                sc->has_hit = 1;
                sc->hit.score = lt_f32_from_bits(t->result.scan.best_score_bits);
                sc->hit.index = t->result.scan.best_index;
                sc->hit.shard = 0;
            }
        } else {
            sd_job__result_fail(job, t->shard, SD_JOB__RES_FAILED,
                                "vector scan on the agent failed: %s (%s)",
                                lt_error_name(t->status), lt_error_describe(t->status));
        }
    }
    if (res->got == job->ops && res->state == SD_JOB__RES_PENDING) {
        res->state = SD_JOB__RES_DONE;
        job->bytes_done += t->payload_len;
        sd_job__agent_done(job, r->agent, t->payload_len);
    }
    sd_job__task_free(t);
}
