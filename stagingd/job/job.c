/* A job's life (see stagingd/job.h): create and destroy, the step the
 * daemon's loop calls, cancel and abandon. Its slots are job_slot.c's,
 * its leases job_batch.c's, its report job_report.c's. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job_internal.h"

/* ---- names ---- */

const struct base_enum sd_job_op_names[] = {
    {"verify", SD_JOB_VERIFY},
    {"scan", SD_JOB_SCAN},
    {"both", SD_JOB_BOTH},
    {NULL, 0},
};

const struct base_enum sd_job_doorbell_names[] = {
    {"auto", SD_DOORBELL_AUTO},
    {"on", SD_DOORBELL_ON},
    {"off", SD_DOORBELL_OFF},
    {NULL, 0},
};

const struct base_enum sd_job_path_names[] = {
    {"auto", SD_JOB_PATH_AUTO},
    {"stream", SD_JOB_PATH_STREAM},
    {"whole", SD_JOB_PATH_WHOLE},
    {NULL, 0},
};

const char *sd_job_op_name(enum sd_job_op op)
{
    const char *name = base_enum_name(sd_job_op_names, (int)op);
    return name ? name : "?";
}

int sd_job_op_parse(const char *s, enum sd_job_op *op_p)
{
    int v = 0;
    int rc = base_parse_enum(s, sd_job_op_names, &v, NULL, 0);
    if (rc == 0)
        *op_p = (enum sd_job_op)v;
    return rc;
}

/* ---- life cycle ---- */

/* File queries against the store: every shard has their dim, and an f16
 * store can hold every element (the agent gets the queries in the records'
 * type). Returns 0 or -EINVAL with @err saying which. */
static int sd_job__queries_check(const struct sd_job *job, char *err, size_t err_len)
{
    const struct sd_job_config *cfg = &job->cfg;
    const char *src = cfg->query_source ? cfg->query_source : "the queries";
    if (cfg->nqueries > SD_JOB_QUERIES_MAX || (cfg->nqueries && !cfg->queries)) {
        snprintf(err, err_len, "%u queries: expected 1..%u", cfg->nqueries, SD_JOB_QUERIES_MAX);
        return -EINVAL;
    }
    if (!cfg->nqueries)
        return 0;
    int f16 = 0;
    for (size_t i = 0; i < job->nshards; i++) {
        const struct sd_store_entry *e = sd_store_entry_get(job->st, i);
        f16 |= e->record_type == SD_RECORD_F16;
        if (e->dim != cfg->query_dim) {
            snprintf(err, err_len,
                     "%s: queries of dim %u, but %s/%s holds records of dim %u: a scan's query "
                     "has the records' dim",
                     src, cfg->query_dim, job->store_path, e->name, e->dim);
            return -EINVAL;
        }
    }
    for (size_t j = 0; f16 && j < (size_t)cfg->nqueries * cfg->query_dim; j++) {
        const float v = cfg->queries[j];
        const uint16_t h = sd_f16_from_f32(v);
        if ((h & 0x7fffu) == 0x7c00u && v == v && v - v == 0.0f) {
            snprintf(err, err_len,
                     "%s: query %" PRIu64 " element %zu is %g: over f16's largest finite value "
                     "65504, and the store holds f16 records (the scan takes its query in the "
                     "records' type)",
                     src, sd_job__query_id(job, (uint32_t)(j / cfg->query_dim)), j % cfg->query_dim,
                     (double)v);
            return -EINVAL;
        }
    }
    return 0;
}

/* The per-shard and per-slot arrays of every query. */
static int sd_job__arrays(struct sd_job *job, char *err, size_t err_len)
{
    const size_t nq = job->nq;
    const uint32_t k = job->cfg.k < LT_SCAN_MAX_K ? job->cfg.k : LT_SCAN_MAX_K;
    if ((job->ops & SD_JOB__OP_SCAN) &&
        (double)job->nshards * (double)nq *
                (double)(sizeof(struct sd_job__scan) + k * sizeof(struct kn_scan_hit)) >
            (double)SD_JOB__RESULTS_MAX) {
        snprintf(err, err_len,
                 "%zu shard(s) x %zu queries x top-%u keep over %llu MiB of results: fewer "
                 "queries per job (--query-index) or larger shards",
                 job->nshards, nq, k, SD_JOB__RESULTS_MAX >> 20);
        return -E2BIG;
    }
    job->row_base = calloc(job->nshards ? job->nshards : 1, sizeof *job->row_base);
    const size_t nscans = job->nshards * nq;
    struct sd_job__scan *scans = calloc(nscans ? nscans : 1, sizeof *scans);
    unsigned char *qstate = calloc((size_t)job->nslots * nq, 1);
    struct sd_job__early *qearly = calloc((size_t)job->nslots * nq, sizeof *qearly);
    if (!job->row_base || !scans || !qstate || !qearly) {
        free(scans);
        free(qstate);
        free(qearly);
        snprintf(err, err_len, "out of memory for %zu shards x %zu queries", job->nshards, nq);
        return -ENOMEM;
    }
    for (size_t i = 0; i < job->nshards; i++) {
        job->res[i].scan = scans + i * nq;
        job->row_base[i] = job->rows;
        job->rows += sd_store_entry_get(job->st, i)->records;
    }
    for (unsigned i = 0; i < job->nslots; i++) {
        job->slots[i].qstate = qstate + (size_t)i * nq;
        job->slots[i].qearly = qearly + (size_t)i * nq;
    }
    if (job->nshards == 0)
        free(scans);
    return 0;
}

int sd_job_create(const struct sd_job_config *cfg, const char *store, enum sd_job_op op,
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
    job->nq = cfg->nqueries ? cfg->nqueries : 1;
    if ((rc = sd_job__queries_check(job, err, err_len)) < 0 ||
        (rc = sd_job__arrays(job, err, err_len)) < 0)
        goto fail_store;
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
    job->t_start = base_now_ns();
    *job_p = job;
    return 0;

fail_store:
    if (job->nshards && job->res)
        free(job->res[0].scan);
    if (job->slots) {
        free(job->slots[0].qstate);
        free(job->slots[0].qearly);
    }
    free(job->row_base);
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
    sd_job__stream_free(job);
    sd_job__check_stop(job);
    free(job->evq);
    for (unsigned i = 0; i < job->nslots; i++) {
        struct sd_job__slot *s = &job->slots[i];
        if (s->have_buf && !s->quarantine)
            leasec_pool_free(job->env.pool, &s->buf);
        sd_shard_close(s->sh);
    }
    for (size_t i = 0; i < job->nshards; i++) {
        free(job->res[i].why);
        for (uint32_t q = 0; q < job->nq; q++)
            free(job->res[i].scan[q].hits);
    }
    if (job->nshards)
        free(job->res[0].scan);
    free(job->slots[0].qstate);
    free(job->slots[0].qearly);
    if (job->topk)
        for (uint32_t q = 0; q < job->nq; q++)
            free(job->topk[q]);
    free(job->topk);
    free(job->ntopk);
    free(job->row_base);
    pthread_mutex_destroy(&job->qmu);
    free(job->slots);
    free(job->res);
    free(job->agents);
    free(job->q);
    free(job->query);
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

/* ---- the loop's entry points ---- */

static void sd_job__no_agent(struct sd_job *job)
{
    char why[SD_JOB__WHY_LEN];
    struct leasec_client_agent_info info;
    int last = 0;
    if (leasec_client_agent_info(job->env.client, 0, &info) == 0)
        last = info.last_err;
    const char *where = job->env.agent_paths ? job->env.agent_paths[0] : NULL;
    snprintf(why, sizeof why, "no GPU agent ready%s%s%s for %u s (last error: %s)",
             where ? " at " : "", where ? where : "",
             job->env.nagents > 1 ? " or the other agents" : "", job->cfg.agent_timeout_s,
             last ? strerror(-last) : "none");
    sd_job__log(job, BASE_LOG_ERROR, "job %u: %s; failing the job", job->env.id, why);
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
        sd_job__result_fail(job, i, SD_JOB__RES_SKIPPED, "%s", why);
    if (job->next_shard < job->nshards)
        sd_job__log(job, BASE_LOG_WARN, "job %u: %zu shard(s) not started: %s", job->env.id,
                    job->nshards - job->next_shard, why);
    job->next_shard = job->nshards;
}

void sd_job_abandon(struct sd_job *job, const char *why)
{
    sd_job_cancel(job, why);
    job->abandoned = 1;
    if (job->stream)
        sd_job__stream_abandon(job, why);
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
    if (base_log_file_is_tty(job->env.status)) {
        if (now - job->last_status_ns > 100000000ull || done == job->nshards) {
            char line[256];
            sd_job_progress(job, line, sizeof line);
            base_log_file_status(job->env.status, line);
            job->last_status_ns = now;
        }
        return;
    }
    unsigned quarter = job->nshards ? (unsigned)(done * 4 / job->nshards) : 4;
    if (quarter > job->progress_quarter && quarter < 4) {
        job->progress_quarter = quarter;
        char line[256];
        sd_job_progress(job, line, sizeof line);
        sd_job__log(job, BASE_LOG_INFO, "%s", line);
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
    job->t_start = base_now_ns(); /* the pipeline starts now; rates count from here */
    sd_job__log(job, BASE_LOG_INFO, "job %u: %s of %s: %zu shard(s), doorbell %s", job->env.id,
                sd_job_op_name(job->op), job->store_path, job->nshards,
                job->doorbell ? "on: work is queued behind a bell rung when each read lands"
                              : "off: plain submits after each read");
}

/* The agents' registrations so far, summed over classes, into *@sum_p. */
static int sd_job__registrations(struct sd_job *job, uint64_t *sum_p, uint64_t *req_p,
                                 int *req_valid_p)
{
    uint64_t sum = 0, req = 0;
    int any = 0, req_valid = 1;
    for (unsigned a = 0; a < job->env.nagents; a++) {
        if (!job->agents[a].ready)
            continue;
        struct leasec_agent_stats st;
        if (leasec_client_stats_call(job->env.client, a, 0, 2000, &st) < 0)
            return -EIO;
        for (unsigned c = 0; c < LT_CLASS_SLOTS; c++)
            sum += st.classes[c].registrations;
        if (st.have_self)
            req += st.self.submits;
        else
            req_valid = 0;
        any = 1;
    }
    if (!any)
        return -ENOTCONN;
    *sum_p = sum;
    *req_p = req;
    *req_valid_p = req_valid;
    return 0;
}

/* Whole shards or streaming (docs/streaming.md), once an agent is ready
 * (or at once for path whole): AUTO streams when every ready agent grants
 * LT_CAP_STREAM and each shard crosses a ring once (verify or scan). */
static void sd_job__decide_path(struct sd_job *job, unsigned nready)
{
    if (job->cfg.path != SD_JOB_PATH_WHOLE && nready == 0)
        return;
    int all = nready > 0;
    for (unsigned a = 0; a < job->env.nagents; a++)
        if (job->agents[a].ready && !(job->agents[a].caps & LT_CAP_STREAM))
            all = 0;
    /* A ring carries one query per shard: several (--query) take whole shards,
     * where each staged shard is scanned once per query. */
    const int stream =
        job->cfg.path == SD_JOB_PATH_STREAM ||
        (job->cfg.path == SD_JOB_PATH_AUTO && all && job->op != SD_JOB_BOTH && job->nq == 1);
    job->path_decided = 1;
    if (stream && job->nq > 1) {
        char why[SD_JOB__WHY_LEN];
        snprintf(why, sizeof why, "path stream takes one query, %u given: use --path whole or auto",
                 job->nq);
        sd_job__log(job, BASE_LOG_ERROR, "job %u: %s", job->env.id, why);
        sd_job_cancel(job, why);
        return;
    }
    if (stream && !all) {
        char why[SD_JOB__WHY_LEN];
        snprintf(why, sizeof why,
                 "path stream, but an agent ready did not grant the STREAM capability (an older "
                 "agent, or one without rings): use --path whole or auto");
        sd_job__log(job, BASE_LOG_ERROR, "job %u: %s", job->env.id, why);
        sd_job_cancel(job, why);
        return;
    }
    if (stream) {
        uint64_t reg = 0, req = 0;
        int req_valid = 0;
        int have_reg = sd_job__registrations(job, &reg, &req, &req_valid) == 0;
        if (sd_job__stream_setup(job) == 0) {
            job->stream->reg_start = reg;
            job->stream->reg_start_valid = have_reg;
            job->stream->req_start = req;
            job->stream->req_start_valid = have_reg && req_valid;
        } else if (job->cfg.path == SD_JOB_PATH_STREAM) {
            sd_job_cancel(job, "the streaming rings could not be set up (see the log)");
            return;
        } else {
            sd_job__log(job, BASE_LOG_WARN, "job %u: streaming not set up: whole shards instead",
                        job->env.id);
        }
    }
    /* The whole path's CPU check threads (the streaming path starts its own). */
    if (!job->stream && job->cfg.cpu_verify && job->cfg.cpu_verify_threads &&
        (job->ops & SD_JOB__OP_VERIFY) &&
        (sd_job__events_reserve(job, job->nshards) < 0 ||
         sd_job__check_start(job, job->cfg.cpu_verify_threads) < 0))
        sd_job__log(job, BASE_LOG_WARN,
                    "job %u: no CPU check threads; cpu-verify checks on the staging threads",
                    job->env.id);
}

int sd_job_step(struct sd_job *job, int *timeout_ms_p)
{
    int timeout = 1000;
    if (job->finished) {
        *timeout_ms_p = -1;
        return 1;
    }
    uint64_t now = base_now_ns();
    unsigned nready = 0;
    sd_job__agents_refresh(job, &nready);
    if (!job->doorbell_decided && (nready > 0 || job->cfg.doorbell != SD_DOORBELL_AUTO))
        sd_job__decide_doorbell(job);
    if (!job->path_decided)
        sd_job__decide_path(job, nready);
    if (job->stream) {
        int done = sd_job__stream_step(job, timeout_ms_p);
        if (!done)
            sd_job__progress_log(job, now);
        return done;
    }

    /* Finish what can finish first: freed slots take new shards below. */
    for (unsigned i = 0; i < job->nslots; i++)
        sd_job__advance(&job->slots[i]);

    /* Start shards while slots, pool room and the rate limit allow. */
    while (job->doorbell_decided && job->path_decided && !job->cancelled &&
           job->next_shard < job->nshards && !job->alloc_blocked) {
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
    /* A slot that failed in the flushes (a refused request) can finish and
     * take the next shard now, not after the loop's next wake-up. */
    for (unsigned i = 0; i < job->nslots; i++) {
        const struct sd_job__slot *s = &job->slots[i];
        if (s->active && s->failed && s->lease == SD_JOB__L_NONE && s->ops_inflight == 0 &&
            s->read != SD_JOB__READ_RUNNING)
            timeout = 0;
    }

    /* No agent for too long while shards wait for leases: fail the job. */
    int waiting = (!job->doorbell_decided || !job->path_decided) && !job->cancelled;
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
    if (job->next_shard >= job->nshards && job->active == 0 && job->checks_pending == 0) {
        sd_job__fail_repeats_log(job);
        job->finished = 1;
        job->t_end = base_now_ns();
        base_log_file_status(job->env.status, NULL);
        *timeout_ms_p = -1;
        return 1;
    }
    *timeout_ms_p = timeout;
    return 0;
}
