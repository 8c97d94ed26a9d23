/* The job pipeline: see stagingd/job.h and docs/stagingd.md.
 *
 * Each in-flight shard sits in a slot. A slot's life:
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
 * once per (shard, op): a completion never counts twice. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/scan_ref.h"
#include "stagingd/gen.h"
#include "stagingd/job.h"
#include "stagingd/log.h"
#include "stagingd/pool.h"
#include "stagingd/reader.h"
#include "stagingd/shard.h"
#include "stagingd/store.h"

#define SD_JOB__OP_VERIFY 1u
#define SD_JOB__OP_SCAN 2u

/* Tag kinds (bits 0..3), slot (4..15), job id (16..23), seq or batch (24..63). */
enum {
    SD_JOB__TAG_LEASE = 1,
    SD_JOB__TAG_VERIFY = 2,
    SD_JOB__TAG_SCAN = 3,
    SD_JOB__TAG_RELEASE = 4,
};
#define SD_JOB__SLOTS_MAX 4096u
#define SD_JOB__WHY_LEN 320
#define SD_JOB__TOPK_SHOWN 10

enum sd_job__read { SD_JOB__READ_NONE, SD_JOB__READ_RUNNING, SD_JOB__READ_DONE };

enum sd_job__lease {
    SD_JOB__L_NONE,         /* no lease; none asked for */
    SD_JOB__L_WANT,         /* to be asked for in the next batch */
    SD_JOB__L_REQUESTED,    /* in a LEASE_REQUEST awaiting its grant */
    SD_JOB__L_HELD,         /* granted */
    SD_JOB__L_RELEASE_WANT, /* to be released in the next batch */
    SD_JOB__L_RELEASING,    /* LEASE_RELEASE sent, RELEASE_COMPLETE awaited */
};

enum sd_job__res_state {
    SD_JOB__RES_PENDING = 0,
    SD_JOB__RES_DONE,
    SD_JOB__RES_FAILED,
    SD_JOB__RES_SKIPPED,
};

struct sd_job__result {
    enum sd_job__res_state state;
    unsigned got; /* ops whose completion was taken */
    uint32_t completions;
    uint32_t duplicates;
    char *why;
    /* verify */
    uint32_t vstatus;
    struct lt_checksum_result v;
    int cpu_checked, cpu_bad;
    uint64_t cpu_block;
    /* scan */
    int has_hit;
    struct kn_scan_hit hit;
    struct kn_scan_hit *hits; /* the shard's top min(records, k), best first */
    size_t nhits;
    uint64_t records;
};

struct sd_job;

struct sd_job__slot {
    struct sd_job *job;
    unsigned idx;
    int active;
    uint64_t seq; /* this assignment: tags, and the doorbell's sequence */
    size_t shard;
    struct sd_shard *sh;
    struct sd_pool_buf buf;
    int have_buf;
    int quarantine; /* the agent did not give the bytes back: never reuse */
    uint64_t payload_len, read_len, sums_off, query_off, hits_off, lease_len;
    uint32_t k; /* scan: hits the agent writes at hits_off */
    uint32_t block_size, dim, type;
    unsigned ops_todo;     /* ops still without a result */
    unsigned ops_inflight; /* submitted and unanswered */
    int failed;
    /* the read */
    enum sd_job__read read;
    int using_bell; /* the read's completion rings the bell */
    int read_rc;    /* written by the staging thread, read after it posts */
    uint64_t read_bytes;
    char read_err[256];
    int cpu_rc;
    struct sd_shard_fault cpu_fault;
    char cpu_err[256];
    /* completions that arrived before the read was taken (doorbell path) */
    unsigned early_mask;
    uint32_t early_status[2];
    union lt_op_result early_result[2];
    /* the lease */
    enum sd_job__lease lease;
    struct sd_client_lease l;
    unsigned lease_agent;
    uint64_t lease_batch;
    unsigned lease_pos;
    uint64_t *bell, *done;
    uint64_t word_off;
};

struct sd_job__agent {
    int ready;
    uint32_t caps;
    unsigned max_batch;
    int stats_valid;
    char name[LT_NAME_LEN];
    struct lt_client_stats me;
    uint64_t uptime_ns;
};

struct sd_job {
    struct sd_job_env env;
    struct sd_config cfg;
    char store_path[SD_CONFIG_PATH_MAX];
    struct sd_store *st;
    size_t nshards;
    enum sd_job_op op;
    unsigned ops;
    int doorbell; /* pre-submit behind the bell where the agent grants it */
    int doorbell_decided;
    unsigned nslots;
    struct sd_job__slot *slots;
    struct sd_job__result *res;
    struct sd_job__agent *agents;
    unsigned rr; /* round-robin start among ready agents */
    size_t next_shard;
    unsigned active;
    int alloc_blocked;

    /* reads that landed, posted by staging threads */
    pthread_mutex_t qmu;
    unsigned *q;
    unsigned qhead, qlen;
    unsigned reads_active;
    uint64_t busy_start_ns, busy_ns;

    /* the scan's query, for the last (type, dim) */
    float *query;
    uint32_t query_dim, query_type;

    uint64_t t_start, t_end;
    uint64_t bytes_total, bytes_started, bytes_staged, bytes_done;
    uint64_t leases_granted, leases_released, leases_lost, leases_refused, leases_abandoned;
    uint64_t lease_batches, release_batches, next_batch;
    uint64_t submits, bell_submits, completions, stale, duplicates, resubmits;
    uint64_t done_words_seen, staged_fallback, bad_blocks;
    uint64_t no_agent_since;
    uint64_t last_status_ns;
    unsigned progress_quarter;
    int cancelled, abandoned, finished;
    char cancel_why[SD_JOB__WHY_LEN];
    struct kn_scan_hit *topk;
    size_t ntopk;
};

/* ---- helpers ---- */

static uint64_t sd_job__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t sd_job__round_up(uint64_t v, uint64_t a)
{
    return (v + a - 1) / a * a;
}

static void sd_job__bytes_fmt(uint64_t b, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    unsigned u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%" PRIu64 " B", b);
    else
        snprintf(buf, len, "%.1f %s", v, units[u]);
}

static uint64_t sd_job__tag(const struct sd_job *job, unsigned kind, unsigned slot, uint64_t seq)
{
    return (seq << 24) | ((uint64_t)(job->env.id & 0xffu) << 16) | ((uint64_t)slot << 4) | kind;
}

static unsigned sd_job__tag_kind(uint64_t tag)
{
    return (unsigned)(tag & SD_JOB_TAG_KIND_MASK);
}

static unsigned sd_job__tag_slot(uint64_t tag)
{
    return (unsigned)((tag >> 4) & 0xfffu);
}

static uint64_t sd_job__tag_seq(uint64_t tag)
{
    return tag >> 24;
}

static int sd_job__tag_mine(const struct sd_job *job, uint64_t tag)
{
    return ((tag >> 16) & 0xffu) == (job->env.id & 0xffu);
}

static const char *sd_job__shard_name(const struct sd_job *job, size_t idx)
{
    const struct sd_store_entry *e = sd_store_entry_get(job->st, idx);
    return e ? e->name : "?";
}

static int sd_job__transient(int rc)
{
    return rc == -ENOTCONN || rc == -ECONNRESET || rc == -EPIPE || rc == -ESTALE ||
           rc == -ETIMEDOUT || rc == -ECONNREFUSED;
}

static void sd_job__result_fail(struct sd_job *job, size_t idx, enum sd_job__res_state state,
                                const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Records why shard @idx has no (complete) result; the first reason wins. */
static void sd_job__result_fail(struct sd_job *job, size_t idx, enum sd_job__res_state state,
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
    sd_log(state == SD_JOB__RES_SKIPPED ? SD_LOG_DEBUG : SD_LOG_ERROR, "job %u: %s: %s",
           job->env.id, sd_job__shard_name(job, idx), why);
}

static void sd_job__slot_fail(struct sd_job__slot *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The slot's shard fails: no more submits; work in flight still drains. */
static void sd_job__slot_fail(struct sd_job__slot *s, const char *fmt, ...)
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

static int sd_job__query(struct sd_job *job, uint32_t type, uint32_t dim)
{
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

/* ---- life cycle ---- */

int sd_job_create(const struct sd_config *cfg, const char *store, enum sd_job_op op,
                  const struct sd_job_env *env, char *err, size_t err_len, struct sd_job **job_p)
{
    if (cfg->inflight == 0 || cfg->inflight > env->words_slots ||
        cfg->inflight > SD_JOB__SLOTS_MAX || env->nagents == 0) {
        snprintf(err, err_len,
                 "inflight %u: expected 1..%u (the doorbell words the daemon holds) and at least "
                 "one agent, found %u agent(s)",
                 cfg->inflight, env->words_slots, env->nagents);
        return -EINVAL;
    }
    struct sd_job *job = calloc(1, sizeof *job);
    if (!job) {
        snprintf(err, err_len, "out of memory");
        return -ENOMEM;
    }
    int rc;
    job->env = *env;
    job->cfg = *cfg;
    job->op = op;
    job->ops =
        (op & SD_JOB_VERIFY ? SD_JOB__OP_VERIFY : 0) | (op & SD_JOB_SCAN ? SD_JOB__OP_SCAN : 0);
    snprintf(job->store_path, sizeof job->store_path, "%s", store);
    rc = sd_store_open(store, err, err_len, &job->st);
    if (rc < 0)
        goto fail_free;
    job->nshards = sd_store_count(job->st);
    for (size_t i = 0; i < job->nshards; i++)
        job->bytes_total += sd_store_entry_get(job->st, i)->payload_len;
    job->nslots = cfg->inflight;
    job->slots = calloc(job->nslots, sizeof *job->slots);
    job->res = calloc(job->nshards, sizeof *job->res);
    job->agents = calloc(env->nagents, sizeof *job->agents);
    job->q = calloc(job->nslots, sizeof *job->q);
    if (!job->slots || !job->res || !job->agents || !job->q) {
        snprintf(err, err_len, "out of memory for %zu shards", job->nshards);
        rc = -ENOMEM;
        goto fail_store;
    }
    rc = pthread_mutex_init(&job->qmu, NULL);
    if (rc) {
        rc = -rc;
        snprintf(err, err_len, "pthread_mutex_init: %s", strerror(-rc));
        goto fail_store;
    }
    for (unsigned i = 0; i < job->nslots; i++) {
        struct sd_job__slot *s = &job->slots[i];
        s->job = job;
        s->idx = i;
        s->bell = &env->words[8 * (size_t)i];
        s->done = &env->words[8 * (size_t)i + 1];
        s->word_off = env->words_offset + 64 * (uint64_t)i;
    }
    job->t_start = sd_job__now();
    *job_p = job;
    return 0;

fail_store:
    free(job->slots);
    free(job->res);
    free(job->agents);
    free(job->q);
    sd_store_close(job->st);
fail_free:
    free(job);
    return rc;
}

void sd_job_destroy(struct sd_job *job)
{
    if (!job)
        return;
    for (unsigned i = 0; i < job->nslots; i++) {
        struct sd_job__slot *s = &job->slots[i];
        if (s->have_buf && !s->quarantine)
            sd_pool_free(job->env.pool, &s->buf);
        sd_shard_close(s->sh);
    }
    for (size_t i = 0; i < job->nshards; i++) {
        free(job->res[i].why);
        free(job->res[i].hits);
    }
    pthread_mutex_destroy(&job->qmu);
    free(job->slots);
    free(job->res);
    free(job->agents);
    free(job->q);
    free(job->query);
    free(job->topk);
    sd_store_close(job->st);
    free(job);
}

const char *sd_job_store(const struct sd_job *job)
{
    return job->store_path;
}

enum sd_job_op sd_job_op_get(const struct sd_job *job)
{
    return job->op;
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
        sd_client_ring(s->bell, s->seq);
    s->cpu_rc = 0;
    if (result == 0 && job->cfg.cpu_verify && (job->ops & SD_JOB__OP_VERIFY))
        s->cpu_rc = sd_shard_verify_mem(s->sh, s->buf.base, 0, s->payload_len, s->cpu_err,
                                        sizeof s->cpu_err, &s->cpu_fault);
    /* Once the slot is posted the loop may finish the job and free it:
     * nothing of the job is touched after the unlock. */
    const int notify_fd = job->env.notify_fd;
    pthread_mutex_lock(&job->qmu);
    job->q[(job->qhead + job->qlen) % job->nslots] = s->idx;
    job->qlen++;
    if (--job->reads_active == 0)
        job->busy_ns += sd_job__now() - job->busy_start_ns;
    pthread_mutex_unlock(&job->qmu);
    uint64_t one = 1;
    if (write(notify_fd, &one, sizeof one) < 0 && errno != EAGAIN)
        sd_log(SD_LOG_ERROR, "staging: eventfd write failed: %s", strerror(errno));
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
        job->busy_start_ns = sd_job__now();
    pthread_mutex_unlock(&job->qmu);
    int rc = sd_reader_submit(job->env.reader, &req);
    if (rc < 0) {
        pthread_mutex_lock(&job->qmu);
        if (--job->reads_active == 0)
            job->busy_ns += sd_job__now() - job->busy_start_ns;
        pthread_mutex_unlock(&job->qmu);
        s->read = SD_JOB__READ_DONE;
        s->read_rc = rc;
        /* Work queued behind the bell must not wait forever. */
        if (bell)
            sd_client_ring(s->bell, s->seq);
        sd_job__slot_fail(s, "staging read refused: %s",
                          s->read_err[0] ? s->read_err : strerror(-rc));
    }
}

static void sd_job__apply(struct sd_job__slot *s, unsigned op, uint32_t status,
                          const union lt_op_result *r);

void sd_job_staged(struct sd_job *job)
{
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
            sd_log(SD_LOG_DEBUG, "job %u: %s: staged %" PRIu64 " bytes%s", job->env.id,
                   sd_job__shard_name(job, s->shard), s->payload_len,
                   s->using_bell ? ", bell rung" : "");
            if (job->cfg.cpu_verify && (job->ops & SD_JOB__OP_VERIFY)) {
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
        for (unsigned k = 0; k < 2; k++)
            if (early & (1u << k))
                sd_job__apply(s, 1u << k, s->early_status[k], &s->early_result[k]);
    }
}

/* ---- starting shards ---- */

/* Starts shard @idx in slot @s. Returns 1 when the shard is consumed
 * (started, or failed for good), 0 when it must wait for pool room. */
static int sd_job__start(struct sd_job *job, struct sd_job__slot *s, size_t idx)
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
    const uint32_t es = sd_record_elem_size(h->record_type);
    const uint64_t read_len = sd_job__round_up(h->payload_len, SD_SHARD_ALIGN);
    const uint64_t sums_off = read_len;
    const uint64_t query_off =
        sd_job__round_up(sums_off + ((job->ops & SD_JOB__OP_VERIFY) ? 8 * nblocks : 0), 64);
    /* The agent writes the scan's top-k hits (16 bytes each) behind the query. */
    const uint32_t k = job->cfg.k < LT_SCAN_MAX_K ? (uint32_t)job->cfg.k : LT_SCAN_MAX_K;
    const uint64_t hits_off = sd_job__round_up(query_off + (uint64_t)h->dim * es, 8);
    const uint64_t lease_len = (job->ops & SD_JOB__OP_SCAN)
                                   ? hits_off + (uint64_t)k * sizeof(struct lt_scan_hit)
                                   : query_off;
    if ((job->ops & SD_JOB__OP_SCAN) && sd_job__query(job, h->record_type, h->dim) < 0) {
        sd_job__result_fail(job, idx, SD_JOB__RES_FAILED, "out of memory for a %u-element query",
                            h->dim);
        sd_shard_close(sh);
        return 1;
    }
    struct sd_pool_buf buf;
    rc = sd_pool_alloc(job->env.pool, LT_CLASS_PINNED,
                       (size_t)sd_job__round_up(lease_len, SD_POOL_BUF_ALIGN), &buf);
    if (rc == -ENOMEM && job->active > 0) {
        job->alloc_blocked = 1; /* until a slot frees its buffer */
        sd_shard_close(sh);
        return 0;
    }
    if (rc < 0) {
        struct sd_pool_class_stats ps = {0};
        sd_pool_stats(job->env.pool, LT_CLASS_PINNED, &ps);
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
        memcpy(base + sums_off, table, 8 * nblocks);
    if (job->ops & SD_JOB__OP_SCAN) {
        if (h->record_type == SD_RECORD_F16) {
            for (uint32_t i = 0; i < h->dim; i++) {
                uint16_t v = sd_f16_from_f32(job->query[i]);
                memcpy(base + query_off + 2 * (uint64_t)i, &v, 2);
            }
        } else {
            memcpy(base + query_off, job->query, (size_t)h->dim * 4);
        }
    }
    uint64_t *bell = s->bell, *done = s->done;
    uint64_t word_off = s->word_off;
    memset(s, 0, sizeof *s);
    s->job = job;
    s->idx = (unsigned)(s - job->slots);
    s->bell = bell;
    s->done = done;
    s->word_off = word_off;
    s->active = 1;
    s->seq = ++*job->env.seq;
    s->shard = idx;
    s->sh = sh;
    s->buf = buf;
    s->have_buf = 1;
    s->payload_len = h->payload_len;
    s->read_len = read_len;
    s->sums_off = sums_off;
    s->query_off = query_off;
    s->hits_off = hits_off;
    s->k = k;
    s->lease_len = lease_len;
    s->block_size = h->block_size;
    s->dim = h->dim;
    s->type = h->record_type;
    s->ops_todo = job->ops;
    s->lease = SD_JOB__L_WANT;
    job->active++;
    job->bytes_started += h->payload_len;
    sd_log(SD_LOG_DEBUG,
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
    if (s->read == SD_JOB__READ_DONE && s->read_rc == 0 && !s->failed)
        job->bytes_done += s->payload_len;
    if (s->have_buf && !s->quarantine)
        sd_pool_free(job->env.pool, &s->buf);
    if (s->quarantine)
        sd_log(SD_LOG_WARN,
               "job %u: %s: its buffer (segment %u + %" PRIu64 ") stays out of the pool: the "
               "agent did not confirm the release",
               job->env.id, sd_job__shard_name(job, s->shard), s->buf.segment_id, s->buf.offset);
    s->have_buf = 0;
    sd_shard_close(s->sh);
    s->sh = NULL;
    s->active = 0;
    job->active--;
    job->alloc_blocked = 0;
}

/* ---- results ---- */

/* Copies the top-k hits the agent wrote into slot @s's lease to @res:
 * min(records, k) real hits, indices below records, strictly falling in
 * rank, the first the completion's best. Returns 0, or -1 (the slot failed
 * with a message) when they are not that or memory runs out. */
static int sd_job__hits_take(struct sd_job__slot *s, struct sd_job__result *res,
                             const union lt_op_result *r)
{
    const uint64_t n = r->scan.records_scanned < s->k ? r->scan.records_scanned : s->k;
    const unsigned char *at = (const unsigned char *)s->buf.base + s->hits_off;
    struct kn_scan_hit *hits = calloc(n ? n : 1, sizeof *hits);
    if (!hits) {
        sd_job__slot_fail(s, "out of memory for %" PRIu64 " scan hits", n);
        return -1;
    }
    for (uint64_t i = 0; i < n; i++) {
        struct lt_scan_hit h;
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
            sd_job__slot_fail(s,
                              "the agent's top-%u hits are inconsistent: hit %" PRIu64
                              " (record %" PRIu64 " of %" PRIu64 ") out of range or order",
                              s->k, i, h.index, r->scan.records_scanned);
            return -1;
        }
    }
    free(res->hits);
    res->hits = hits;
    res->nhits = (size_t)n;
    return 0;
}

static void sd_job__apply(struct sd_job__slot *s, unsigned op, uint32_t status,
                          const union lt_op_result *r)
{
    struct sd_job *job = s->job;
    struct sd_job__result *res = &job->res[s->shard];
    s->ops_inflight &= ~op;
    s->ops_todo &= ~op;
    job->completions++;
    if (res->got & op) {
        res->duplicates++;
        job->duplicates++;
        return;
    }
    res->got |= op;
    res->completions++;
    if (s->read_rc < 0)
        return; /* the work ran on bytes that never landed: the read error is the result */
    const char *name = sd_job__shard_name(job, s->shard);
    if (op == SD_JOB__OP_VERIFY) {
        if (status == LT_OK || status == LT_E_CHECKSUM_MISMATCH) {
            res->vstatus = status;
            res->v = r->checksum;
            if (status == LT_E_CHECKSUM_MISMATCH)
                job->bad_blocks += r->checksum.bad_blocks;
            sd_log(status == LT_OK ? SD_LOG_DEBUG : SD_LOG_WARN,
                   "job %u: %s: verify %s (%" PRIu64 " blocks, %" PRIu64 " bad)", job->env.id, name,
                   status == LT_OK ? "ok" : "found corrupt blocks", r->checksum.blocks_checked,
                   r->checksum.bad_blocks);
        } else {
            sd_job__slot_fail(s, "checksum verify on the agent failed: %s (%s)",
                              lt_error_name(status), lt_error_describe(status));
        }
    } else {
        if (status == LT_OK) {
            res->records = r->scan.records_scanned;
            if (r->scan.best_index != LT_BLOCK_NONE) {
                if (sd_job__hits_take(s, res, r) < 0)
                    return;
                res->has_hit = 1;
                res->hit.score = lt_f32_from_bits(r->scan.best_score_bits);
                res->hit.index = r->scan.best_index;
                res->hit.shard = 0;
            }
            sd_log(SD_LOG_DEBUG, "job %u: %s: scan done (%" PRIu64 " records, best %" PRIu64 ")",
                   job->env.id, name, r->scan.records_scanned, r->scan.best_index);
        } else {
            sd_job__slot_fail(s, "vector scan on the agent failed: %s (%s)", lt_error_name(status),
                              lt_error_describe(status));
        }
    }
}

/* The slot a tag names, if the tag is this job's and the slot still holds
 * the assignment it was made for. */
static struct sd_job__slot *sd_job__slot_of(struct sd_job *job, uint64_t tag)
{
    if (!sd_job__tag_mine(job, tag))
        return NULL;
    unsigned i = sd_job__tag_slot(tag);
    if (i >= job->nslots)
        return NULL;
    struct sd_job__slot *s = &job->slots[i];
    return s->active && s->seq == sd_job__tag_seq(tag) ? s : NULL;
}

void sd_job_on_completion(struct sd_job *job, const struct sd_client_completion *c)
{
    unsigned kind = sd_job__tag_kind(c->tag);
    unsigned op = kind == SD_JOB__TAG_VERIFY ? SD_JOB__OP_VERIFY : SD_JOB__OP_SCAN;
    struct sd_job__slot *s = sd_job__slot_of(job, c->tag);
    if ((kind != SD_JOB__TAG_VERIFY && kind != SD_JOB__TAG_SCAN) || !s || !(s->ops_inflight & op)) {
        job->stale++;
        sd_log(SD_LOG_DEBUG, "job %u: completion #%" PRIu64 " matches no work in flight; ignored",
               job->env.id, c->request_id);
        return;
    }
    if ((job->agents[s->l.agent].caps & LT_CAP_DONE_WORD) &&
        sd_client_done_word_read(s->done) >= s->seq)
        job->done_words_seen++;
    if (s->read == SD_JOB__READ_RUNNING) {
        /* The bell rang but the staging thread has not posted the slot yet:
         * keep the result until the read is taken. */
        unsigned k = op == SD_JOB__OP_VERIFY ? 0 : 1;
        s->early_mask |= 1u << k;
        s->early_status[k] = c->status;
        s->early_result[k] = c->result;
        return;
    }
    sd_job__apply(s, op, c->status, &c->result);
}

void sd_job_on_grant(struct sd_job *job, const struct sd_client_grant *g)
{
    if (!sd_job__tag_mine(job, g->tag) || sd_job__tag_kind(g->tag) != SD_JOB__TAG_LEASE)
        return;
    uint64_t batch = sd_job__tag_seq(g->tag);
    unsigned matched = 0;
    for (unsigned i = 0; i < job->nslots; i++) {
        struct sd_job__slot *s = &job->slots[i];
        if (!s->active || s->lease != SD_JOB__L_REQUESTED || s->lease_batch != batch ||
            s->lease_pos >= g->count)
            continue;
        const struct sd_client_grant_entry *e = &g->entries[s->lease_pos];
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
                sd_client_lease_release(job->env.client, &g->entries[k].lease, 1,
                                        sd_job__tag(job, SD_JOB__TAG_RELEASE, 0, 0), &rid) == 0)
                sd_log(SD_LOG_WARN, "job %u: lease %u:%u granted to nobody; released", job->env.id,
                       g->entries[k].lease.id.slot, g->entries[k].lease.id.gen);
        }
    }
}

void sd_job_on_release(struct sd_job *job, const struct sd_client_release *r)
{
    for (unsigned i = 0; i < job->nslots; i++) {
        struct sd_job__slot *s = &job->slots[i];
        if (!s->active || s->lease != SD_JOB__L_RELEASING || s->l.agent != r->agent ||
            s->l.epoch != r->lease.epoch || !lt_lease_id_eq(s->l.id, r->lease.id))
            continue;
        s->lease = SD_JOB__L_NONE;
        sd_log(SD_LOG_DEBUG, "job %u: %s: lease %u:%u release complete%s", job->env.id,
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
            sd_log(SD_LOG_WARN, "job %u: %s", job->env.id, r->message);
        }
        return;
    }
}

void sd_job_on_error(struct sd_job *job, const struct sd_client_error *e)
{
    if (!sd_job__tag_mine(job, e->tag))
        return;
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
        struct sd_job__slot *s = sd_job__slot_of(job, e->tag);
        if (!s || !(s->ops_inflight & op))
            return;
        s->ops_inflight &= ~op;
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
            sd_log(SD_LOG_ERROR, "job %u: release refused: %s", job->env.id, e->message);
    }
}

void sd_job_on_disconnect(struct sd_job *job, unsigned agent)
{
    unsigned n = 0, ops = 0;
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
        unsigned again = s->ops_inflight;
        if (s->early_mask & 1u)
            again &= ~SD_JOB__OP_VERIFY;
        if (s->early_mask & 2u)
            again &= ~SD_JOB__OP_SCAN;
        s->ops_inflight &= ~again;
        job->resubmits += (unsigned)__builtin_popcount(again);
        ops += (unsigned)__builtin_popcount(again);
        n++;
    }
    if (n)
        sd_log(SD_LOG_WARN,
               "job %u: agent %u lost: %u shard(s) keep their staged bytes and wait for a new "
               "lease; %u op(s) will be submitted again",
               job->env.id, agent, n, ops);
}

/* ---- batching ---- */

static void sd_job__agents_refresh(struct sd_job *job, unsigned *nready_p)
{
    unsigned n = 0;
    for (unsigned a = 0; a < job->env.nagents; a++) {
        struct sd_client_agent_info info;
        struct sd_job__agent *ag = &job->agents[a];
        ag->ready = 0;
        if (sd_client_agent_info(job->env.client, a, &info) == 0 && info.state == SD_CLIENT_READY) {
            ag->ready = 1;
            ag->caps = info.hello.caps;
            ag->max_batch = info.hello.max_lease_batch ? info.hello.max_lease_batch : 1;
            n++;
        }
    }
    *nready_p = n;
}

static void sd_job__flush_leases(struct sd_job *job, unsigned nready)
{
    if (nready == 0)
        return;
    struct sd_client_lease_req reqs[LT_MAX_BATCH];
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
            reqs[n] = (struct sd_client_lease_req){
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
        int rc = sd_client_lease_request(job->env.client, a, reqs, n, 0,
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
                                  sd_client_last_error(job->env.client));
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

static void sd_job__flush_releases(struct sd_job *job)
{
    struct sd_client_lease leases[LT_MAX_BATCH];
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
        int rc = sd_client_lease_release(job->env.client, leases, n,
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
                sd_log(SD_LOG_ERROR, "job %u: release not sent: %s", job->env.id,
                       sd_client_last_error(job->env.client));
            }
        }
        if (rc == 0) {
            job->release_batches++;
            sd_log(SD_LOG_DEBUG, "job %u: released %u lease(s) in one batch", job->env.id, n);
        }
    }
}

/* ---- submits ---- */

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
        sd_client_ring(s->bell, s->seq); /* the bytes are in already */
    }
    if (s->read == SD_JOB__READ_DONE && s->read_rc < 0)
        return;
    struct lt_stream_id stream = {0, 0};
    if (job->env.stream)
        job->env.stream(job->env.stream_ctx, s->l.agent, s->idx, &stream);
    unsigned todo = s->ops_todo & ~s->ops_inflight;
    for (unsigned op = SD_JOB__OP_VERIFY; op <= SD_JOB__OP_SCAN && !s->failed; op <<= 1) {
        if (!(todo & op))
            continue;
        struct sd_client_work w = {.stream = stream};
        if (op == SD_JOB__OP_VERIFY) {
            w.op = LT_OP_CHECKSUM_VERIFY;
            w.args.checksum = (struct lt_op_checksum_verify){
                .offset = 0,
                .length = s->payload_len,
                .sums_offset = s->sums_off,
                .block_size = s->block_size,
            };
        } else {
            w.op = LT_OP_VECTOR_SCAN;
            w.args.scan = (struct lt_op_vector_scan){
                .offset = 0,
                .length = s->payload_len,
                .query_offset = s->query_off,
                .dim = s->dim,
                .elem = (uint16_t)(s->type == SD_RECORD_F16 ? LT_ELEM_F16 : LT_ELEM_F32),
                .metric = LT_SCAN_DOT,
                .hits_offset = s->hits_off,
                .k = s->k,
            };
        }
        if (bell)
            w.bell = (struct sd_client_word){job->env.words_segment, s->word_off, s->seq};
        if (ag->caps & LT_CAP_DONE_WORD)
            w.done = (struct sd_client_word){job->env.words_segment, s->word_off + 8, s->seq};
        unsigned kind = op == SD_JOB__OP_VERIFY ? SD_JOB__TAG_VERIFY : SD_JOB__TAG_SCAN;
        uint64_t rid = 0;
        int rc = sd_client_submit(job->env.client, &s->l, &w,
                                  sd_job__tag(job, kind, s->idx, s->seq), &rid);
        if (rc == 0) {
            s->ops_inflight |= op;
            job->submits++;
            if (bell)
                job->bell_submits++;
            continue;
        }
        if (sd_job__transient(rc))
            return; /* on_disconnect follows: a new lease, then this again */
        s->ops_todo &= ~op;
        sd_job__slot_fail(s, "%s not submitted: %s", op == SD_JOB__OP_VERIFY ? "verify" : "scan",
                          sd_client_last_error(job->env.client));
    }
    /* The work waits behind the bell: only now may the bytes start landing. */
    if (bell && s->read == SD_JOB__READ_NONE && s->ops_inflight)
        sd_job__read_start(s, 1);
}

/* Moves one slot as far as it can go without an answer. */
static void sd_job__advance(struct sd_job__slot *s)
{
    struct sd_job *job = s->job;
    if (!s->active)
        return;
    const int settled = (s->failed || s->ops_todo == 0) && s->ops_inflight == 0;
    const int work_left = !s->failed && (s->ops_todo & ~s->ops_inflight) != 0;
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

/* ---- the loop's entry points ---- */

static void sd_job__no_agent(struct sd_job *job)
{
    char why[SD_JOB__WHY_LEN];
    struct sd_client_agent_info info;
    int last = 0;
    if (sd_client_agent_info(job->env.client, 0, &info) == 0)
        last = info.last_err;
    snprintf(why, sizeof why, "no GPU agent ready for %u s (last error: %s)",
             job->cfg.agent_timeout_s, last ? strerror(-last) : "none");
    sd_log(SD_LOG_ERROR, "job %u: %s; failing the job", job->env.id, why);
    for (unsigned i = 0; i < job->nslots; i++) {
        struct sd_job__slot *s = &job->slots[i];
        if (s->active && (s->lease == SD_JOB__L_NONE || s->lease == SD_JOB__L_WANT)) {
            s->lease = SD_JOB__L_NONE;
            sd_job__slot_fail(s, "%s", why);
        }
    }
    sd_job_cancel(job, why);
}

void sd_job_cancel(struct sd_job *job, const char *why)
{
    if (job->cancelled)
        return;
    job->cancelled = 1;
    snprintf(job->cancel_why, sizeof job->cancel_why, "%s", why);
    for (size_t i = job->next_shard; i < job->nshards; i++)
        sd_job__result_fail(job, i, SD_JOB__RES_SKIPPED, "not run: %s", why);
    if (job->next_shard < job->nshards)
        sd_log(SD_LOG_WARN, "job %u: %zu shard(s) not started: %s", job->env.id,
               job->nshards - job->next_shard, why);
    job->next_shard = job->nshards;
}

void sd_job_abandon(struct sd_job *job, const char *why)
{
    sd_job_cancel(job, why);
    job->abandoned = 1;
    for (unsigned i = 0; i < job->nslots; i++) {
        struct sd_job__slot *s = &job->slots[i];
        if (!s->active)
            continue;
        if (s->lease != SD_JOB__L_NONE)
            job->leases_abandoned++;
        s->lease = SD_JOB__L_NONE;
        s->ops_inflight = 0;
        /* The agent may still touch the bytes until it reclaims the lease. */
        s->quarantine = 1;
        sd_job__slot_fail(s, "abandoned: %s", why);
    }
}

static void sd_job__progress_log(struct sd_job *job, uint64_t now)
{
    size_t done = 0;
    for (size_t i = 0; i < job->nshards; i++)
        done += job->res[i].state != SD_JOB__RES_PENDING;
    if (sd_log_is_tty()) {
        if (now - job->last_status_ns > 100000000ull || done == job->nshards) {
            char line[256];
            sd_job_progress(job, line, sizeof line);
            sd_log_status(line);
            job->last_status_ns = now;
        }
        return;
    }
    unsigned quarter = job->nshards ? (unsigned)(done * 4 / job->nshards) : 4;
    if (quarter > job->progress_quarter && quarter < 4) {
        job->progress_quarter = quarter;
        char line[256];
        sd_job_progress(job, line, sizeof line);
        sd_log(SD_LOG_INFO, "%s", line);
    }
}

/* AUTO: the doorbell when every agent ready at the start grants it; an
 * agent met later without it gets plain submits (sd_job__submit). */
static void sd_job__decide_doorbell(struct sd_job *job)
{
    int all = 0;
    for (unsigned a = 0; a < job->env.nagents; a++) {
        if (!job->agents[a].ready)
            continue;
        if (!(job->agents[a].caps & LT_CAP_DOORBELL)) {
            all = 0;
            break;
        }
        all = 1;
    }
    job->doorbell =
        job->cfg.doorbell == SD_DOORBELL_ON || (job->cfg.doorbell == SD_DOORBELL_AUTO && all);
    job->doorbell_decided = 1;
    job->t_start = sd_job__now(); /* the pipeline starts now; rates count from here */
    sd_log(SD_LOG_INFO, "job %u: %s of %s: %zu shard(s), doorbell %s", job->env.id,
           sd_job_op_name(job->op), job->store_path, job->nshards,
           job->doorbell ? "on: work is queued behind a bell rung when each read lands"
                         : "off: plain submits after each read");
}

int sd_job_step(struct sd_job *job, int *timeout_ms_p)
{
    int timeout = 1000;
    if (job->finished) {
        *timeout_ms_p = -1;
        return 1;
    }
    uint64_t now = sd_job__now();
    unsigned nready = 0;
    sd_job__agents_refresh(job, &nready);
    if (!job->doorbell_decided && (nready > 0 || job->cfg.doorbell != SD_DOORBELL_AUTO))
        sd_job__decide_doorbell(job);

    /* Finish what can finish first: freed slots take new shards below. */
    for (unsigned i = 0; i < job->nslots; i++)
        sd_job__advance(&job->slots[i]);

    /* Start shards while slots, pool room and the rate limit allow. */
    while (job->doorbell_decided && !job->cancelled && job->next_shard < job->nshards &&
           !job->alloc_blocked) {
        if (job->cfg.rate_limit) {
            uint64_t due = job->t_start + (uint64_t)((double)job->bytes_started * 1e9 /
                                                     (double)job->cfg.rate_limit);
            if (due > now) {
                uint64_t ms = (due - now + 999999) / 1000000;
                if (ms < (uint64_t)timeout)
                    timeout = (int)ms;
                break;
            }
        }
        struct sd_job__slot *free_slot = NULL;
        for (unsigned i = 0; i < job->nslots && !free_slot; i++)
            if (!job->slots[i].active)
                free_slot = &job->slots[i];
        if (!free_slot)
            break;
        if (!sd_job__start(job, free_slot, job->next_shard))
            break;
        job->next_shard++;
    }
    sd_job__flush_releases(job);
    sd_job__flush_leases(job, nready);

    /* No agent for too long while shards wait for leases: fail the job. */
    int waiting = !job->doorbell_decided && !job->cancelled;
    for (unsigned i = 0; i < job->nslots; i++)
        waiting |= job->slots[i].active && job->slots[i].lease == SD_JOB__L_WANT;
    if (nready == 0 && waiting && !job->abandoned) {
        if (!job->no_agent_since)
            job->no_agent_since = now;
        uint64_t limit = (uint64_t)job->cfg.agent_timeout_s * 1000000000ull;
        if (now - job->no_agent_since >= limit) {
            sd_job__no_agent(job);
            for (unsigned i = 0; i < job->nslots; i++)
                sd_job__advance(&job->slots[i]);
        } else {
            uint64_t ms = (limit - (now - job->no_agent_since)) / 1000000 + 1;
            if (ms < (uint64_t)timeout)
                timeout = (int)ms;
        }
    } else {
        job->no_agent_since = 0;
    }
    sd_job__progress_log(job, now);
    if (job->next_shard >= job->nshards && job->active == 0) {
        job->finished = 1;
        job->t_end = sd_job__now();
        sd_log_status(NULL);
        *timeout_ms_p = -1;
        return 1;
    }
    *timeout_ms_p = timeout;
    return 0;
}

/* ---- report ---- */

void sd_job_progress(const struct sd_job *job, char *buf, size_t len)
{
    size_t done = 0;
    for (size_t i = 0; i < job->nshards; i++)
        done += job->res[i].state != SD_JOB__RES_PENDING;
    uint64_t now = job->t_end ? job->t_end : sd_job__now();
    double secs = (double)(now - job->t_start) / 1e9;
    char b[32];
    sd_job__bytes_fmt(job->bytes_done, b, sizeof b);
    snprintf(buf, len, "job %u %s: %zu/%zu shards, %s, %.2f GB/s, %" PRIu64 " leases granted",
             job->env.id, sd_job_op_name(job->op), done, job->nshards, b,
             secs > 0 ? (double)job->bytes_done / secs / 1e9 : 0.0, job->leases_granted);
}

void sd_job_agent_stats(struct sd_job *job, int timeout_ms)
{
    for (unsigned a = 0; a < job->env.nagents; a++) {
        struct sd_client_agent_info info;
        struct sd_job__agent *ag = &job->agents[a];
        if (sd_client_agent_info(job->env.client, a, &info) < 0 || info.state != SD_CLIENT_READY)
            continue;
        snprintf(ag->name, sizeof ag->name, "%s", info.hello.agent_name);
        ag->caps = info.hello.caps;
        struct lt_msg_stats_request m;
        lt_msg_init(&m, sizeof m, LT_MSG_STATS_REQUEST, 1);
        union lt_msg_buffer reply;
        if (sd_client_call(job->env.client, a, &m, sizeof m, timeout_ms, &reply) < 0) {
            sd_log(SD_LOG_WARN, "job %u: agent %u stats: %s", job->env.id, a,
                   sd_client_last_error(job->env.client));
            continue;
        }
        const struct lt_msg_stats_reply *sr = (const struct lt_msg_stats_reply *)(void *)&reply;
        ag->uptime_ns = sr->uptime_ns;
        for (uint32_t k = 0; k < sr->client_count; k++) {
            if (sr->clients[k].client_id == info.hello.client_id) {
                ag->me = sr->clients[k];
                ag->stats_valid = 1;
            }
        }
    }
}

static void sd_job__merge_topk(struct sd_job *job)
{
    size_t n = 0, total = 0;
    for (size_t i = 0; i < job->nshards; i++) {
        n += job->res[i].has_hit;
        total += job->res[i].has_hit ? job->res[i].nhits : 0;
    }
    if (n == 0 || job->topk)
        return;
    const struct kn_scan_hit **lists = calloc(n, sizeof *lists);
    size_t *counts = calloc(n, sizeof *counts);
    uint32_t *ids = calloc(n, sizeof *ids);
    /* Each shard's top min(k, LT_SCAN_MAX_K): the merge is the true
     * top-k of all records for k up to LT_SCAN_MAX_K. */
    size_t k = job->cfg.k < total ? job->cfg.k : total;
    job->topk = calloc(k, sizeof *job->topk);
    if (!lists || !counts || !ids || !job->topk) {
        free(job->topk);
        job->topk = NULL;
        goto out;
    }
    size_t j = 0;
    for (size_t i = 0; i < job->nshards; i++) {
        if (!job->res[i].has_hit)
            continue;
        lists[j] = job->res[i].hits;
        counts[j] = job->res[i].nhits;
        ids[j] = (uint32_t)i;
        j++;
    }
    long got = kr_topk_merge(lists, counts, n, ids, (uint32_t)k, job->topk);
    job->ntopk = got > 0 ? (size_t)got : 0;
out:
    free(lists);
    free(counts);
    free(ids);
}

static void sd_job__row(const struct sd_job *job, size_t i, FILE *out)
{
    const struct sd_job__result *r = &job->res[i];
    const char *name = sd_job__shard_name(job, i);
    if (r->got & SD_JOB__OP_VERIFY) {
        if (r->vstatus == LT_OK) {
            fprintf(out, "  %-18s verify ok: %" PRIu64 " blocks\n", name, r->v.blocks_checked);
        } else if (r->vstatus == LT_E_CHECKSUM_MISMATCH) {
            const struct sd_store_entry *e = sd_store_entry_get(job->st, i);
            uint64_t lo = r->v.first_bad_block * e->block_size;
            uint64_t hi = lo + e->block_size < e->payload_len ? lo + e->block_size : e->payload_len;
            fprintf(out,
                    "  %-18s verify BAD: block %" PRIu64 " of %" PRIu64 " (payload bytes %" PRIu64
                    "..%" PRIu64 ") expected %016" PRIx64 ", found %016" PRIx64 "; %" PRIu64
                    " bad block(s)\n",
                    name, r->v.first_bad_block, r->v.blocks_checked, lo, hi - 1, r->v.expected,
                    r->v.actual, r->v.bad_blocks);
        }
        if (r->cpu_checked) {
            int gpu_bad = r->vstatus == LT_E_CHECKSUM_MISMATCH;
            if (gpu_bad != r->cpu_bad || (gpu_bad && r->cpu_block != r->v.first_bad_block)) {
                if (r->cpu_bad)
                    fprintf(out,
                            "  %-18s verify DISAGREES with the CPU check, which found block "
                            "%" PRIu64 " bad\n",
                            name, r->cpu_block);
                else
                    fprintf(out,
                            "  %-18s verify DISAGREES with the CPU check, which found no bad "
                            "block\n",
                            name);
            }
        }
    }
    if ((r->got & SD_JOB__OP_SCAN) && r->has_hit)
        fprintf(out, "  %-18s scan best: record %" PRIu64 " score %.9g of %" PRIu64 " records\n",
                name, r->hit.index, (double)r->hit.score, r->records);
    if (r->state == SD_JOB__RES_FAILED || r->state == SD_JOB__RES_SKIPPED)
        fprintf(out, "  %-18s %s: %s\n", name,
                r->state == SD_JOB__RES_FAILED ? "FAILED" : "NOT RUN", r->why ? r->why : "?");
}

void sd_job_report(struct sd_job *job, FILE *out)
{
    sd_job__merge_topk(job);
    size_t clean = 0, bad = 0, failed = 0, skipped = 0, exact = 0;
    for (size_t i = 0; i < job->nshards; i++) {
        const struct sd_job__result *r = &job->res[i];
        if (r->state == SD_JOB__RES_FAILED)
            failed++;
        else if (r->state == SD_JOB__RES_SKIPPED)
            skipped++;
        else if (r->vstatus == LT_E_CHECKSUM_MISMATCH)
            bad++;
        else if (r->state == SD_JOB__RES_DONE)
            clean++;
        exact += r->got == job->ops && r->completions == (unsigned)__builtin_popcount(job->ops);
    }
    char total[32];
    sd_job__bytes_fmt(job->bytes_total, total, sizeof total);
    fprintf(out, "job %u: %s of %s: %zu shard(s), %s, doorbell %s, inflight %u\n", job->env.id,
            sd_job_op_name(job->op), job->store_path, job->nshards, total,
            job->doorbell ? "on" : "off", job->nslots);
    for (size_t i = 0; i < job->nshards; i++) {
        const struct sd_job__result *r = &job->res[i];
        int notable = r->state == SD_JOB__RES_FAILED || r->state == SD_JOB__RES_SKIPPED ||
                      r->vstatus == LT_E_CHECKSUM_MISMATCH;
        if (job->cfg.list || notable)
            sd_job__row(job, i, out);
    }
    if (job->ops & SD_JOB__OP_SCAN) {
        size_t shown =
            job->cfg.list || job->ntopk <= SD_JOB__TOPK_SHOWN ? job->ntopk : SD_JOB__TOPK_SHOWN;
        fprintf(out,
                "top-%u by dot product (query seed %" PRIu64 "; each shard's top-k, "
                "merged across shards)%s\n",
                job->cfg.k, job->cfg.query_seed, shown < job->ntopk ? ", first rows" : "");
        fprintf(out, "  %-5s %-18s %-12s %s\n", "rank", "shard", "record", "score");
        for (size_t i = 0; i < shown; i++)
            fprintf(out, "  #%-4zu %-18s %-12" PRIu64 " %.9g\n", i + 1,
                    sd_job__shard_name(job, job->topk[i].shard), job->topk[i].index,
                    (double)job->topk[i].score);
    }
    uint64_t end = job->t_end ? job->t_end : sd_job__now();
    double e2e = (double)(end - job->t_start) / 1e9;
    double busy = (double)job->busy_ns / 1e9;
    char staged[32];
    sd_job__bytes_fmt(job->bytes_staged, staged, sizeof staged);
    fprintf(out, "summary\n");
    fprintf(out,
            "  %-14s %zu of %zu done: %zu clean, %zu with bad blocks, %zu failed, %zu not run\n",
            "shards", clean + bad, job->nshards, clean, bad, failed, skipped);
    fprintf(out, "  %-14s %" PRIu64 " staged (%s) of %" PRIu64 "\n", "bytes", job->bytes_staged,
            staged, job->bytes_total);
    fprintf(out, "  %-14s %.2f GB/s (%.3f s with reads in flight)\n", "staged",
            busy > 0 ? (double)job->bytes_staged / busy / 1e9 : 0.0, busy);
    fprintf(out, "  %-14s %.2f GB/s (%.3f s from start to last result)\n", "end to end",
            e2e > 0 ? (double)job->bytes_staged / e2e / 1e9 : 0.0, e2e);
    if (job->ops & SD_JOB__OP_VERIFY)
        fprintf(out, "  %-14s %" PRIu64 "\n", "bad blocks", job->bad_blocks);
    fprintf(out,
            "  %-14s %" PRIu64 " granted, %" PRIu64 " released, %" PRIu64
            " lost with an agent, %" PRIu64 " refused; %" PRIu64 " request and %" PRIu64
            " release batch(es)%s\n",
            "leases", job->leases_granted, job->leases_released, job->leases_lost,
            job->leases_refused, job->lease_batches, job->release_batches,
            job->staged_fallback ? " (some served STAGED: the pin budget was spent)" : "");
    if (job->leases_abandoned)
        fprintf(out, "  %-14s %" PRIu64 " lease(s) left to the agent at shutdown\n", "abandoned",
                job->leases_abandoned);
    fprintf(out,
            "  %-14s %" PRIu64 " submits (%" PRIu64 " behind the doorbell), %" PRIu64
            " completions, %" PRIu64 " done words seen\n",
            "work", job->submits, job->bell_submits, job->completions, job->done_words_seen);
    fprintf(out,
            "  %-14s %s: %zu of %zu shard(s) with one result per op; %" PRIu64
            " op(s) resubmitted after agent loss, %" PRIu64 " duplicate(s) ignored\n",
            "exactly once", exact == job->nshards ? "yes" : "no", exact, job->nshards,
            job->resubmits, job->duplicates + job->stale);
    for (unsigned a = 0; a < job->env.nagents; a++) {
        const struct sd_job__agent *ag = &job->agents[a];
        if (!ag->stats_valid) {
            fprintf(out, "  %-14s %u: no stats (not ready at the end)\n", "agent", a);
            continue;
        }
        char reg[32];
        sd_job__bytes_fmt(ag->me.bytes_registered, reg, sizeof reg);
        fprintf(out,
                "  %-14s %u \"%s\"%s: this client: %" PRIu64 " segment(s), %s registered, "
                "%" PRIu64 " live lease(s), %" PRIu64 " granted, %" PRIu64 " submits\n",
                "agent", a, ag->name, (ag->caps & LT_CAP_HOST_BACKEND) ? " (HOST BACKEND)" : "",
                ag->me.segments, reg, ag->me.live_leases, ag->me.leases_granted, ag->me.submits);
    }
    if (job->cancelled)
        fprintf(out, "  %-14s %s\n", "cancelled", job->cancel_why);
}

int sd_job_exit_status(const struct sd_job *job)
{
    int bad = 0;
    for (size_t i = 0; i < job->nshards; i++) {
        const struct sd_job__result *r = &job->res[i];
        if (r->state != SD_JOB__RES_DONE)
            return 1;
        bad |= r->vstatus == LT_E_CHECKSUM_MISMATCH;
    }
    return bad ? 3 : 0;
}
