/* The streaming path on the loop (docs/streaming.md): one ring per staging
 * thread, each a small PINNED buffer of slots plus a MAPPED buffer of
 * words, two leases, one RING_OPEN. The loop hands each ring its next
 * (shard, op) task, sends the task's one RING_SHARD, and takes its
 * COMPLETION; the ring's thread (job_ring.c) moves the bytes. Per chunk
 * nothing passes through here: no message, no lease call, no registration.
 * When the agent goes, each ring's thread is told to stop (an abort
 * generation), the rings' words buffers are left alone (the old GPU work
 * may still write them), and every task without a completion is streamed
 * again on a ring opened on the next connection; a result is recorded once
 * per (shard, op). Just over 800 lines: a ring's life on the loop (open,
 * feed, answer, loss) reads in one place; a task's own code is in
 * job_stream_task.c. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "job_internal.h"
#include "stagingd/reader.h"

#define SD_JOB__WORDS_ALIGN 4096u

/* ---- events ---------------------------------------------------------------- */

int sd_job__events_reserve(struct sd_job *job, size_t more)
{
    pthread_mutex_lock(&job->qmu);
    size_t want = job->ev_cap + more;
    struct sd_job__ev *q = calloc(want ? want : 1, sizeof(*q));
    int rc = q ? 0 : -ENOMEM;
    if (q) {
        for (size_t i = 0; i < job->ev_len; i++)
            q[i] = job->evq[(job->ev_head + i) % job->ev_cap];
        free(job->evq);
        job->evq = q;
        job->ev_head = 0;
        job->ev_cap = want;
    }
    pthread_mutex_unlock(&job->qmu);
    return rc;
}

void sd_job__ev_post(struct sd_job *job, const struct sd_job__ev *ev)
{
    const int notify_fd = job->env.notify_fd;
    pthread_mutex_lock(&job->qmu);
    /* Room was reserved for every event that can be outstanding. */
    if (job->ev_len < job->ev_cap) {
        job->evq[(job->ev_head + job->ev_len) % job->ev_cap] = *ev;
        job->ev_len++;
    }
    pthread_mutex_unlock(&job->qmu);
    uint64_t one = 1;
    if (write(notify_fd, &one, sizeof one) < 0 && errno != EAGAIN)
        base_log(&job->env.log, BASE_LOG_ERROR, "", "staging: eventfd write failed: %s",
                 strerror(errno));
}

static void sd_job__stream_staged(struct sd_job *job, const struct sd_job__ev *ev);
static void sd_job__stream_idle(struct sd_job *job, const struct sd_job__ev *ev);
static void sd_job__ring_close(struct sd_job *job, struct sd_job__ring *r);

void sd_job__events_take(struct sd_job *job)
{
    for (;;) {
        pthread_mutex_lock(&job->qmu);
        if (job->ev_len == 0) {
            pthread_mutex_unlock(&job->qmu);
            return;
        }
        struct sd_job__ev ev = job->evq[job->ev_head];
        job->ev_head = (job->ev_head + 1) % job->ev_cap;
        job->ev_len--;
        pthread_mutex_unlock(&job->qmu);
        switch (ev.kind) {
        case SD_JOB__EV_STAGED:
            sd_job__stream_staged(job, &ev);
            break;
        case SD_JOB__EV_IDLE:
            sd_job__stream_idle(job, &ev);
            break;
        case SD_JOB__EV_CHECKED:
            sd_job__check_take(job, &ev);
            break;
        }
    }
}

/* ---- setup ------------------------------------------------------------------ */

/* The largest image any (shard, op) of the store makes. */
static uint64_t sd_job__image_max(const struct sd_job *job)
{
    uint64_t most = 0;
    for (size_t i = 0; i < job->nshards; i++) {
        const struct sd_store_entry *e = sd_store_entry_get(job->st, i);
        uint64_t v = sd_job__round_up(e->payload_len, 8) + 8 * e->blocks;
        uint64_t s = sd_job__round_up(e->payload_len, 64) + 4ull * e->dim;
        if ((job->ops & SD_JOB__OP_VERIFY) && v > most)
            most = v;
        if ((job->ops & SD_JOB__OP_SCAN) && s > most)
            most = s;
    }
    return most;
}

int sd_job__stream_setup(struct sd_job *job)
{
    struct sd_job__stream *st = calloc(1, sizeof(*st));
    if (!st)
        return -ENOMEM;
    st->chunk = job->cfg.chunk_size ? job->cfg.chunk_size : SD_JOB_CHUNK_DEFAULT;
    st->slots = job->cfg.ring_slots ? job->cfg.ring_slots : SD_JOB_RING_SLOTS_DEFAULT;
    st->depth = job->cfg.ring_depth ? job->cfg.ring_depth : SD_JOB_RING_DEPTH_DEFAULT;
    if (st->slots > LT_RING_SLOTS_MAX)
        st->slots = LT_RING_SLOTS_MAX;
    if (st->depth > LT_RING_DEPTH_MAX)
        st->depth = LT_RING_DEPTH_MAX;
    if (st->chunk % LT_RING_SLOT_ALIGN != 0 || st->chunk > LT_RING_SLOT_BYTES_MAX) {
        sd_job__log(job, BASE_LOG_ERROR,
                    "job %u: chunk-size %" PRIu64 ": expected a multiple of 4096 up to 1 GiB",
                    job->env.id, st->chunk);
        free(st);
        return -EINVAL;
    }
    unsigned want = job->cfg.rings;
    if (want == 0) {
        struct sd_reader_info ri;
        sd_reader_info_get(job->env.reader, &ri);
        want = ri.threads ? ri.threads : 1;
    }
    if (want < job->env.nagents)
        want = job->env.nagents; /* a ring on each agent at least */
    if (want > SD_JOB__SLOTS_MAX)
        want = SD_JOB__SLOTS_MAX;
    st->rings = calloc(want, sizeof(*st->rings));
    st->nunits = job->nshards * sd_job__nops(job);
    if (!st->rings || sd_job__events_reserve(job, (size_t)want * (LT_RING_DEPTH_MAX + 4)) < 0) {
        free(st->rings);
        free(st);
        return -ENOMEM;
    }
    job->stream = st;
    const uint64_t words = sd_job__round_up(16ull * st->slots, 64);
    const uint64_t hits = (uint64_t)sd_job__scan_k(job) * sizeof(struct leasec_scan_hit);
    for (unsigned i = 0; i < want; i++) {
        struct sd_job__ring *r = &st->rings[i];
        r->job = job;
        r->idx = i;
        r->nslots = st->slots;
        r->slot_bytes = st->chunk;
        r->seq_off = 0;
        r->done_off = 8ull * st->slots;
        r->hits_off = words;
        r->hits_stride = sd_job__round_up(hits ? hits : 16, 64);
        int rc = leasec_pool_alloc(job->env.pool, LT_CLASS_PINNED, (size_t)(st->slots * st->chunk),
                                   &r->slots_buf);
        if (rc < 0)
            break;
        r->have_slots = 1;
        pthread_mutex_init(&r->mu, NULL);
        base_cond_init_monotonic(&r->cv); /* job_ring.c's timed waits */
        if (pthread_create(&r->thread, NULL, sd_job__ring_main, r) != 0) {
            pthread_cond_destroy(&r->cv);
            pthread_mutex_destroy(&r->mu);
            leasec_pool_free(job->env.pool, &r->slots_buf);
            r->have_slots = 0;
            break;
        }
        r->thread_started = 1;
        __atomic_store_n(&st->nrings, st->nrings + 1, __ATOMIC_RELEASE); /* helpers look */
    }
    if (st->nrings == 0) {
        sd_job__log(job, BASE_LOG_ERROR,
                    "job %u: no ring of %u x %" PRIu64 " bytes fits the PINNED pool (raise "
                    "pinned-pool, or lower ring-slots / chunk-size)",
                    job->env.id, st->slots, st->chunk);
        sd_job__stream_free(job);
        return -ENOMEM;
    }
    if (st->nrings < want)
        sd_job__log(job, BASE_LOG_WARN,
                    "job %u: %u of %u ring(s): the PINNED pool holds no more %u x %" PRIu64
                    "-byte rings",
                    job->env.id, st->nrings, want, st->slots, st->chunk);
    /* Inline checks need chunks that hold whole blocks; other shards go to
     * a check thread. */
    int any_split = 0;
    for (size_t i = 0; i < job->nshards; i++)
        any_split |= st->chunk % sd_store_entry_get(job->st, i)->block_size != 0;
    if (job->cfg.cpu_verify && (job->ops & SD_JOB__OP_VERIFY) && !job->check &&
        (job->cfg.cpu_verify_threads || any_split)) {
        unsigned n = job->cfg.cpu_verify_threads ? job->cfg.cpu_verify_threads : 1;
        if (sd_job__events_reserve(job, job->nshards) < 0 || sd_job__check_start(job, n) < 0)
            sd_job__log(job, BASE_LOG_WARN,
                        "job %u: no CPU check threads; cpu-verify checks on the staging threads",
                        job->env.id);
    }
    sd_job__log(job, BASE_LOG_INFO,
                "job %u: streaming: %u ring(s) of %u x %" PRIu64 "-byte slots, depth %u, images up "
                "to %" PRIu64 " bytes%s",
                job->env.id, st->nrings, st->slots, st->chunk, st->depth, sd_job__image_max(job),
                job->cfg.cpu_verify ? (job->check ? ", CPU check on its own threads"
                                                  : ", CPU check per chunk on the staging threads")
                                    : "");
    (void)words;
    return 0;
}

static struct sd_job__task *sd_job__task_find(struct sd_job__ring *r, uint64_t id)
{
    for (unsigned i = 0; i < r->nout; i++)
        if (r->out[i]->id == id)
            return r->out[i];
    return NULL;
}

static void sd_job__stream_staged(struct sd_job *job, const struct sd_job__ev *ev)
{
    struct sd_job__ring *r = &job->stream->rings[ev->ring];
    struct sd_job__task *t = ev->task;
    t->staged = 1;
    if (!t->orphan && t->completed)
        sd_job__task_finish(job, r, t);
}

/* ---- the rings' life -------------------------------------------------------------- */

/* Tells @r's thread to drop everything; its tasks become orphans, streamed
 * again once it says it is idle (a completed task still finishes). */
static void sd_job__ring_abort(struct sd_job__ring *r)
{
    pthread_mutex_lock(&r->mu);
    __atomic_store_n(&r->abort_gen, r->abort_gen + 1, __ATOMIC_RELEASE);
    r->abort_sent = r->abort_gen;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    for (unsigned i = 0; i < r->nout; i++)
        if (!r->out[i]->completed)
            r->out[i]->orphan = 1;
}

static void sd_job__stream_idle(struct sd_job *job, const struct sd_job__ev *ev)
{
    struct sd_job__stream *st = job->stream;
    struct sd_job__ring *r = &st->rings[ev->ring];
    if (ev->gen != r->abort_sent)
        return; /* an older abort's */
    unsigned again = 0;
    while (r->nout) {
        struct sd_job__task *t = r->out[0];
        size_t unit = t->shard * sd_job__nops(job) +
                      (sd_job__nops(job) == 2 && t->op == SD_JOB__OP_SCAN ? 1 : 0);
        sd_job__task_unlink(r, t);
        if (t->refused)
            ;
        else if (!job->abandoned && !(job->res[t->shard].got & t->op) &&
                 sd_job__unit_redo(job, unit) == 0)
            again++;
        else if (!(job->res[t->shard].got & t->op))
            sd_job__result_fail(job, t->shard, SD_JOB__RES_FAILED, "%s",
                                job->abandoned ? "abandoned" : "out of memory to stream it again");
        sd_job__task_free(t);
    }
    job->resubmits += again;
    if (r->agent < job->env.nagents)
        job->agents[r->agent].moved += again;
    r->abort_sent = 0;
    r->hits_busy = 0;
    if (r->state == SD_JOB__R_LOST)
        r->state = r->broken || job->abandoned ? SD_JOB__R_DONE : SD_JOB__R_IDLE;
    else if (r->state == SD_JOB__R_OPEN && r->broken)
        sd_job__ring_close(job, r); /* the thread stores no more of its words now */
    if (again)
        sd_job__log(job, BASE_LOG_INFO, "job %u: ring %u: %u task(s) to stream again", job->env.id,
                    r->idx, again);
}

/* A fresh, zeroed words buffer for the ring's next connection. */
static int sd_job__words_new(struct sd_job *job, struct sd_job__ring *r)
{
    const uint64_t need = sd_job__round_up(
        r->hits_off + (uint64_t)job->stream->depth * r->hits_stride, SD_JOB__WORDS_ALIGN);
    int rc = leasec_pool_alloc(job->env.pool, LT_CLASS_MAPPED, (size_t)need, &r->words_buf);
    if (rc < 0)
        return rc;
    memset(r->words_buf.base, 0, r->words_buf.len);
    r->have_words = 1;
    r->seq = (uint64_t *)r->words_buf.base;
    r->done = r->seq + r->nslots;
    return 0;
}

/* An agent for a new ring: of those ready with STREAM, the one with the
 * fewest rings (then the fewest bytes out, then round robin), so each
 * agent gets its share of the staging threads (job_agents.c feeds them). */
static int sd_job__ring_agent(struct sd_job *job, unsigned *agent_p)
{
    const unsigned n = job->env.nagents;
    uint64_t *load = calloc(n, sizeof *load);
    if (!load)
        return -ENOMEM;
    sd_job__agent_load_rings(job, load);
    /* rings weigh more than any bytes: the count in the top bits */
    for (unsigned a = 0; a < n; a++)
        load[a] = load[a] >> 16 > UINT32_MAX ? UINT32_MAX : load[a] >> 16;
    const struct sd_job__stream *st = job->stream;
    for (unsigned i = 0; i < st->nrings; i++) {
        const struct sd_job__ring *r = &st->rings[i];
        if (r->agent < n && r->state >= SD_JOB__R_LEASING && r->state <= SD_JOB__R_RELEASING)
            load[r->agent] += 1ull << 32;
    }
    int a = sd_job__agent_pick(job, load, LT_CAP_STREAM);
    free(load);
    if (a < 0)
        return a;
    *agent_p = (unsigned)a;
    return 0;
}

static void sd_job__ring_lease(struct sd_job *job, struct sd_job__ring *r)
{
    struct sd_job__stream *st = job->stream;
    unsigned agent;
    if (sd_job__ring_agent(job, &agent) < 0)
        return;
    sd_job__ring_place(job, r, agent);
    if (!r->have_words && sd_job__words_new(job, r) < 0) {
        sd_job__log(job, BASE_LOG_ERROR, "job %u: ring %u: no MAPPED room for its words",
                    job->env.id, r->idx);
        r->broken = 1;
        r->state = SD_JOB__R_DONE;
        return;
    }
    const struct leasec_client_lease_req req[2] = {
        {.segment = r->slots_buf.segment_id,
         .offset = r->slots_buf.offset,
         .length = r->slots_buf.len},
        {.segment = r->words_buf.segment_id,
         .offset = r->words_buf.offset,
         .length = r->words_buf.len},
    };
    uint64_t rid;
    r->epoch++;
    int rc = leasec_client_lease_request(
        job->env.client, agent, req, 2, LEASEC_LEASE_REQ_F_ALL_OR_NOTHING,
        sd_job__tag(job, SD_JOB__TAG_RING_LEASE, r->idx, r->epoch), &rid);
    if (rc < 0) {
        if (!sd_job__transient(rc)) {
            sd_job__log(job, BASE_LOG_ERROR, "job %u: ring %u: leases not asked for: %s",
                        job->env.id, r->idx, leasec_client_last_error(job->env.client));
            r->broken = 1;
            r->state = SD_JOB__R_DONE;
        }
        return;
    }
    r->agent = agent;
    r->state = SD_JOB__R_LEASING;
    st->lease_reqs++;
    job->lease_batches++;
}

static void sd_job__ring_release(struct sd_job *job, struct sd_job__ring *r)
{
    const struct leasec_client_lease l[2] = {r->slots_lease, r->words_lease};
    uint64_t rid;
    int rc = leasec_client_lease_release(
        job->env.client, l, 2, sd_job__tag(job, SD_JOB__TAG_RING_RELEASE, r->idx, r->epoch), &rid);
    if (rc < 0) {
        if (sd_job__transient(rc))
            return; /* on_disconnect forgets them */
        sd_job__log(job, BASE_LOG_WARN, "job %u: ring %u: release not sent: %s", job->env.id,
                    r->idx, leasec_client_last_error(job->env.client));
        r->have_leases = 0;
        r->have_words = 0; /* never confirmed: stays out of the pool */
        r->state = SD_JOB__R_DONE;
        return;
    }
    r->releases_due = 2;
    r->state = SD_JOB__R_RELEASING;
    job->stream->lease_rels++;
    job->release_batches++;
}

static void sd_job__ring_close(struct sd_job *job, struct sd_job__ring *r)
{
    uint64_t rid;
    int rc =
        leasec_client_ring_close(job->env.client, &r->ring,
                                 sd_job__tag(job, SD_JOB__TAG_RING_CLOSE, r->idx, r->epoch), &rid);
    if (rc < 0) {
        if (!sd_job__transient(rc))
            r->state = SD_JOB__R_RELEASE_WANT;
        return;
    }
    r->state = SD_JOB__R_CLOSING;
    job->stream->close_msgs++;
}

static int sd_job__units_left(const struct sd_job *job)
{
    const struct sd_job__stream *st = job->stream;
    return st->nredo > 0 || (!job->cancelled && st->next_unit < st->nunits);
}

/* Fails every unit still to stream (the job cannot go on). */
static void sd_job__units_fail(struct sd_job *job, const char *why)
{
    struct sd_job__stream *st = job->stream;
    while (st->nredo) {
        size_t u = st->redo[--st->nredo];
        sd_job__result_fail(job, u / sd_job__nops(job), SD_JOB__RES_FAILED, "%s", why);
    }
    sd_job_cancel(job, why);
}

/* 1 while the rate limit holds the next task back (*@timeout_ms lowered to
 * when it may go). */
static int sd_job__rate_wait(const struct sd_job *job, uint64_t now, int *timeout_ms)
{
    if (!job->cfg.rate_limit || job->stream->nredo)
        return 0;
    uint64_t due =
        job->t_start + (uint64_t)((double)job->bytes_started * 1e9 / (double)job->cfg.rate_limit);
    if (due <= now)
        return 0;
    uint64_t ms = (due - now + 999999) / 1000000;
    if (ms < (uint64_t)*timeout_ms)
        *timeout_ms = (int)ms;
    return 1;
}

static int sd_job__may_feed(const struct sd_job *job, uint64_t now, int *timeout_ms)
{
    return !sd_job__rate_wait(job, now, timeout_ms);
}

int sd_job__stream_step(struct sd_job *job, int *timeout_ms_p)
{
    struct sd_job__stream *st = job->stream;
    const uint64_t now = base_now_ns();
    int timeout = 1000;
    int usable = 0, busy = 0;
    sd_job__rings_feed(job, sd_job__may_feed, now, &timeout);
    for (unsigned i = 0; i < st->nrings; i++) {
        struct sd_job__ring *r = &st->rings[i];
        switch (r->state) {
        case SD_JOB__R_IDLE:
            if (!job->abandoned && sd_job__units_left(job))
                r->state = SD_JOB__R_LEASE_WANT;
            else
                r->state = SD_JOB__R_DONE;
            if (r->state != SD_JOB__R_LEASE_WANT)
                break;
            /* fall through */
        case SD_JOB__R_LEASE_WANT:
            sd_job__ring_lease(job, r);
            break;
        case SD_JOB__R_OPEN:
            if (r->broken)
                break; /* closed once its thread is idle */
            /* fed above, by load across the agents */
            if (r->nout == 0 && !sd_job__units_left(job))
                sd_job__ring_close(job, r);
            break;
        case SD_JOB__R_RELEASE_WANT:
            sd_job__ring_release(job, r);
            break;
        default:
            break;
        }
        usable += r->state != SD_JOB__R_DONE && !r->broken;
        busy += r->state != SD_JOB__R_DONE && r->state != SD_JOB__R_IDLE;
    }
    if (usable == 0 && sd_job__units_left(job))
        sd_job__units_fail(job, "no streaming ring could be set up (see the log)");

    /* No agent for too long while work waits: fail the job. */
    unsigned nready = 0;
    for (unsigned a = 0; a < job->env.nagents; a++)
        nready += job->agents[a].ready;
    int waiting = 0;
    for (unsigned i = 0; i < st->nrings; i++)
        waiting |= st->rings[i].state == SD_JOB__R_LEASE_WANT;
    if (nready == 0 && waiting && !job->abandoned) {
        if (!job->no_agent_since)
            job->no_agent_since = now;
        uint64_t limit = (uint64_t)job->cfg.agent_timeout_s * 1000000000ull;
        if (now - job->no_agent_since >= limit) {
            char why[SD_JOB__WHY_LEN];
            snprintf(why, sizeof why, "no GPU agent ready for %u s", job->cfg.agent_timeout_s);
            sd_job__log(job, BASE_LOG_ERROR, "job %u: %s; failing the job", job->env.id, why);
            sd_job__units_fail(job, why);
            for (unsigned i = 0; i < st->nrings; i++)
                if (st->rings[i].state == SD_JOB__R_LEASE_WANT)
                    st->rings[i].state = SD_JOB__R_DONE;
        } else {
            uint64_t ms = (limit - (now - job->no_agent_since)) / 1000000 + 1;
            if (ms < (uint64_t)timeout)
                timeout = (int)ms;
        }
    } else {
        job->no_agent_since = 0;
    }
    if (!busy && !sd_job__units_left(job) && st->inflight_tasks == 0 && job->checks_pending == 0) {
        sd_job__fail_repeats_log(job);
        for (size_t i = 0; i < job->nshards; i++)
            if (job->res[i].state == SD_JOB__RES_PENDING)
                sd_job__result_fail(job, i, SD_JOB__RES_FAILED, "no result for %s",
                                    (job->ops & ~job->res[i].got) == SD_JOB__OP_SCAN ? "scan"
                                                                                     : "verify");
        job->finished = 1;
        job->t_end = base_now_ns();
        base_log_file_status(job->env.status, NULL);
        *timeout_ms_p = -1;
        return 1;
    }
    *timeout_ms_p = timeout;
    return 0;
}

/* ---- the agent's answers ------------------------------------------------------------ */

static struct sd_job__ring *sd_job__ring_of(struct sd_job *job, uint64_t tag)
{
    struct sd_job__stream *st = job->stream;
    if (!st || !sd_job__tag_mine(job, tag))
        return NULL;
    unsigned i = sd_job__tag_slot(tag);
    return i < st->nrings ? &st->rings[i] : NULL;
}

void sd_job__stream_on_grant(struct sd_job *job, const struct leasec_client_grant *g)
{
    struct sd_job__ring *r = sd_job__ring_of(job, g->tag);
    if (!r || r->state != SD_JOB__R_LEASING ||
        sd_job__tag_seq(g->tag) != (r->epoch & 0xffffffffffull))
        return;
    if (g->count == 2 && g->entries[0].err == 0 && g->entries[1].err == 0) {
        r->slots_lease = g->entries[0].lease;
        r->words_lease = g->entries[1].lease;
        r->have_leases = 1;
        job->leases_granted += 2;
        const struct leasec_ring_config cfg = {
            .slots = r->nslots,
            .depth = job->stream->depth,
            .slot_bytes = r->slot_bytes,
            .seq_offset = r->seq_off,
            .done_offset = r->done_off,
            .max_shard_bytes = sd_job__image_max(job),
        };
        uint64_t rid;
        int rc = leasec_client_ring_open(job->env.client, &r->slots_lease, &r->words_lease, &cfg,
                                         sd_job__tag(job, SD_JOB__TAG_RING_OPEN, r->idx, r->epoch),
                                         &rid);
        if (rc == 0) {
            r->state = SD_JOB__R_OPENING;
            job->stream->open_msgs++;
            return;
        }
        if (sd_job__transient(rc))
            return; /* on_disconnect follows */
        sd_job__log(job, BASE_LOG_ERROR, "job %u: ring %u: RING_OPEN not sent: %s", job->env.id,
                    r->idx, leasec_client_last_error(job->env.client));
        r->broken = 1;
        r->state = SD_JOB__R_RELEASE_WANT;
        return;
    }
    job->leases_refused += 2;
    uint32_t why = g->entries[0].err ? g->entries[0].status : g->entries[g->count - 1].status;
    sd_job__log(job, BASE_LOG_ERROR,
                "job %u: ring %u: its leases (%zu + %zu bytes) were refused: %s (%s)", job->env.id,
                r->idx, r->slots_buf.len, r->words_buf.len, lt_error_name(why),
                lt_error_describe(why));
    r->broken = 1;
    r->state = SD_JOB__R_DONE;
}

void sd_job__stream_on_reply(struct sd_job *job, const struct leasec_client_reply *rp)
{
    struct sd_job__ring *r = sd_job__ring_of(job, rp->tag);
    if (!r)
        return;
    unsigned kind = sd_job__tag_kind(rp->tag);
    if (kind == SD_JOB__TAG_RING_OPEN && r->state == SD_JOB__R_OPENING) {
        r->ring = rp->ring;
        r->next_seq = 1;
        r->state = SD_JOB__R_OPEN;
        job->stream->opens++;
        sd_job__log(job, BASE_LOG_DEBUG, "job %u: ring %u open on agent %u (depth %u)", job->env.id,
                    r->idx, r->agent, rp->ring.depth);
    } else if (kind == SD_JOB__TAG_RING_CLOSE && r->state == SD_JOB__R_CLOSING) {
        r->ring_shards += rp->ring_shards;
        r->ring_chunks += rp->ring_chunks;
        r->state = SD_JOB__R_RELEASE_WANT;
    }
}

void sd_job__stream_on_completion(struct sd_job *job, const struct leasec_client_completion *c)
{
    struct sd_job__ring *r = sd_job__ring_of(job, c->tag);
    struct sd_job__task *t = r ? sd_job__task_find(r, sd_job__tag_seq(c->tag)) : NULL;
    if (!t || t->completed || t->orphan) {
        job->stale++;
        return;
    }
    t->completed = 1;
    t->status = c->status;
    t->result = c->result;
    if (t->staged)
        sd_job__task_finish(job, r, t);
}

void sd_job__stream_on_release(struct sd_job *job, const struct leasec_client_release *rl)
{
    struct sd_job__ring *r = sd_job__ring_of(job, rl->tag);
    if (!r || r->state != SD_JOB__R_RELEASING)
        return;
    if (rl->reusable)
        job->leases_released++;
    else
        job->leases_lost++;
    if (!rl->reusable && lt_lease_id_eq(rl->lease.id, r->words_lease.id))
        r->have_words = 0; /* not confirmed: the buffer stays out of the pool */
    if (--r->releases_due)
        return;
    r->have_leases = 0;
    if (r->have_words) {
        leasec_pool_free(job->env.pool, &r->words_buf);
        r->have_words = 0;
    }
    r->state = r->broken || !sd_job__units_left(job) ? SD_JOB__R_DONE : SD_JOB__R_IDLE;
}

void sd_job__stream_on_error(struct sd_job *job, const struct leasec_client_error *e)
{
    struct sd_job__ring *r = sd_job__ring_of(job, e->tag);
    if (!r)
        return;
    const int lost = e->code == LT_OK; /* the connection ended: on_disconnect handles it */
    unsigned kind = sd_job__tag_kind(e->tag);
    if (lost)
        return;
    sd_job__log(job, BASE_LOG_ERROR, "job %u: ring %u: %s", job->env.id, r->idx, e->message);
    switch (kind) {
    case SD_JOB__TAG_RING_LEASE:
        if (r->state == SD_JOB__R_LEASING) {
            job->leases_refused += 2;
            r->broken = 1;
            r->state = SD_JOB__R_DONE;
        }
        break;
    case SD_JOB__TAG_RING_OPEN:
        if (r->state == SD_JOB__R_OPENING) {
            r->broken = 1;
            r->state = SD_JOB__R_RELEASE_WANT;
        }
        break;
    case SD_JOB__TAG_RING_SHARD: {
        /* The agent queued nothing for it: its chunks would wait for ever.
         * Fail it, stop the thread, stream the ring's other tasks again on
         * the rings left, and close this one. */
        struct sd_job__task *t = sd_job__task_find(r, sd_job__tag_seq(e->tag));
        if (t) {
            if (!(job->res[t->shard].got & t->op))
                sd_job__result_fail(job, t->shard, SD_JOB__RES_FAILED,
                                    "%s refused by the agent: %s",
                                    t->op == SD_JOB__OP_VERIFY ? "verify" : "scan", e->message);
            t->refused = 1; /* its verdict is in: not streamed again */
        }
        if (r->state == SD_JOB__R_OPEN && !r->broken) {
            r->broken = 1;
            sd_job__ring_abort(r); /* closed once the thread stores no more words */
        }
        break;
    }
    case SD_JOB__TAG_RING_CLOSE:
        if (r->state == SD_JOB__R_CLOSING)
            r->state = SD_JOB__R_RELEASE_WANT;
        break;
    default:
        break;
    }
}

void sd_job__stream_on_disconnect(struct sd_job *job, unsigned agent)
{
    struct sd_job__stream *st = job->stream;
    if (!st)
        return;
    unsigned n = 0;
    for (unsigned i = 0; i < st->nrings; i++) {
        struct sd_job__ring *r = &st->rings[i];
        if (r->agent != agent || r->state < SD_JOB__R_LEASING || r->state > SD_JOB__R_RELEASING)
            continue;
        if (r->have_leases)
            job->leases_lost += 2;
        r->have_leases = 0;
        /* The dead connection's GPU work may still write these words. */
        r->have_words = 0;
        sd_job__ring_abort(r);
        r->state = SD_JOB__R_LOST;
        n++;
    }
    if (n)
        sd_job__log(job, BASE_LOG_WARN,
                    "job %u: agent %u lost: %u ring(s) stop; their shards without a result are "
                    "streamed again on new rings",
                    job->env.id, agent, n);
}

void sd_job__stream_abandon(struct sd_job *job, const char *why)
{
    struct sd_job__stream *st = job->stream;
    (void)why;
    for (unsigned i = 0; i < st->nrings; i++) {
        struct sd_job__ring *r = &st->rings[i];
        if (r->have_leases)
            job->leases_abandoned += 2;
        r->have_leases = 0;
        /* The agent may still read the slots and write the words. */
        r->have_words = 0;
        r->have_slots = 0;
        if (r->state != SD_JOB__R_DONE && r->state != SD_JOB__R_IDLE) {
            sd_job__ring_abort(r);
            r->state = SD_JOB__R_LOST;
        } else {
            r->state = SD_JOB__R_DONE;
        }
    }
    while (st->nredo) {
        size_t u = st->redo[--st->nredo];
        sd_job__result_fail(job, u / sd_job__nops(job), SD_JOB__RES_FAILED, "abandoned: %s", why);
    }
}

void sd_job__stream_free(struct sd_job *job)
{
    struct sd_job__stream *st = job->stream;
    if (!st)
        return;
    /* Every thread stops before any ring goes: a thread may be helping
     * another ring (job_ring.c). */
    for (unsigned i = 0; i < st->nrings; i++) {
        struct sd_job__ring *r = &st->rings[i];
        if (r->thread_started) {
            pthread_mutex_lock(&r->mu);
            __atomic_store_n(&r->stop, 1, __ATOMIC_RELEASE);
            pthread_cond_signal(&r->cv);
            pthread_mutex_unlock(&r->mu);
        }
    }
    for (unsigned i = 0; i < st->nrings; i++) {
        struct sd_job__ring *r = &st->rings[i];
        if (r->thread_started) {
            pthread_join(r->thread, NULL);
            pthread_cond_destroy(&r->cv);
            pthread_mutex_destroy(&r->mu);
            r->thread_started = 0;
        }
    }
    for (unsigned i = 0; i < st->nrings; i++) {
        struct sd_job__ring *r = &st->rings[i];
        for (unsigned k = 0; k < r->nout; k++)
            sd_job__task_free(r->out[k]);
        r->nout = 0;
        /* Only what the agent gave back goes back to the pool. */
        if (r->have_words && !r->have_leases)
            leasec_pool_free(job->env.pool, &r->words_buf);
        if (r->have_slots && !r->have_leases && r->state != SD_JOB__R_LOST)
            leasec_pool_free(job->env.pool, &r->slots_buf);
    }
    free(st->rings);
    free(st->redo);
    free(st);
    job->stream = NULL;
}

/* ---- the report ------------------------------------------------------------------------ */

void sd_job__stream_report(const struct sd_job *job, FILE *out)
{
    const struct sd_job__stream *st = job->stream;
    uint64_t chunks = 0, waits = 0, sleeps = 0, agent_chunks = 0, helped = 0;
    for (unsigned i = 0; i < st->nrings; i++) {
        chunks += __atomic_load_n(&st->rings[i].chunks, __ATOMIC_RELAXED);
        helped += __atomic_load_n(&st->rings[i].helped, __ATOMIC_RELAXED);
        waits += __atomic_load_n(&st->rings[i].waits, __ATOMIC_RELAXED);
        sleeps += __atomic_load_n(&st->rings[i].sleeps, __ATOMIC_RELAXED);
        agent_chunks += st->rings[i].ring_chunks;
    }
    fprintf(out,
            "  %-14s %u ring(s) of %u x %" PRIu64 "-byte slots, depth %u; %" PRIu64
            " chunk(s) stored (%" PRIu64 " copied by the agent); %" PRIu64 " slot wait(s), %" PRIu64
            " sleep(s); %" PRIu64 " chunk(s) by threads helping another ring\n",
            "streaming", st->nrings, st->slots, st->chunk, st->depth, chunks, agent_chunks, waits,
            sleeps, helped);
    sd_job__staging_report(job, out);
    /* What crossed the socket: per shard one RING_SHARD (and its
     * COMPLETION), per ring one open, one close, a lease request and a
     * release of two leases; per chunk nothing. */
    fprintf(out,
            "  %-14s %" PRIu64 " RING_SHARD for %" PRIu64 " task(s); %" PRIu64
            " RING_OPEN, %" PRIu64 " RING_CLOSE, %" PRIu64 " lease request(s), %" PRIu64
            " release(s); per chunk 0 "
            "messages, 0 lease calls (%" PRIu64 " chunks)\n",
            "messages", st->shard_msgs, st->next_task, st->open_msgs, st->close_msgs,
            st->lease_reqs, st->lease_rels, chunks);
    if (st->reg_start_valid && st->reg_end_valid)
        fprintf(out, "  %-14s %" PRIu64 " during the job (the agent's, every class)\n",
                "registrations", st->reg_end - st->reg_start);
    else
        fprintf(out, "  %-14s unknown (no agent stats at the start and the end)\n",
                "registrations");
    /* The agent's own count: every request it took from this client during
     * the job, less the one RING_SHARD per task; a chunk that cost a message
     * would show here. */
    if (st->req_start_valid && st->req_end_valid && st->req_end >= st->req_start) {
        const uint64_t seen = st->req_end - st->req_start;
        const uint64_t extra = seen > st->shard_msgs ? seen - st->shard_msgs : 0;
        fprintf(out,
                "  %-14s the agent took %" PRIu64 " request(s) for %" PRIu64 " RING_SHARD: %" PRIu64
                " more, %.3f per chunk\n",
                "agent count", seen, st->shard_msgs, extra,
                chunks ? (double)extra / (double)chunks : 0.0);
    } else {
        fprintf(out, "  %-14s unknown (no agent stats at the start and the end)\n", "agent count");
    }
    const uint64_t end = st->t_gpu_end ? st->t_gpu_end : base_now_ns();
    const double secs = (double)(end - job->t_start) / 1e9;
    fprintf(out, "  %-14s %.2f GB/s (%.3f s from start to the last GPU result)\n", "gpu path",
            secs > 0 ? (double)job->bytes_staged / secs / 1e9 : 0.0, secs);
}
