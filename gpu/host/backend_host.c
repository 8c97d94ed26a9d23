/* The host backend (gpu/executor_host.h): the agent's work on CPU threads,
 * for machines without a GPU (DESIGN.md, "The GPU agent", host backend),
 * behind the executor front's backend table (gpu/exec_backend.h).
 *
 * Each stream is a FIFO of jobs (work, event records, event waits, sync
 * markers). A stream with jobs sits in exactly one place: the ready list
 * (a worker will take it), a worker (running its head), the doorbell list
 * (its head waits for a bell word) or an event's parked list (its head waits
 * for an event). A worker takes a ready stream, runs its head jobs, and puts
 * it back at the tail after one work item, so streams share the workers
 * fairly and each stream keeps its order. Doorbells are polled by one thread
 * with exponential backoff, so a bell that never rings costs no worker.
 * This file is the table the front calls and the creation; the queues,
 * workers and poller are queues_host.c's, the ops ops_host.c's. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/time.h"
#include "gpu/executor_host.h"
#include "host_internal.h"
#include "lease_types/validate.h"

/* ---- the backend table ---------------------------------------------------- */

static int hx_work_check(void *ctx, const struct ga_exec_work *w, struct lt_failure *why_p)
{
    (void)ctx;
    return hx__op_check(w, why_p);
}

static int hx_owner_open(void *ctx, uint64_t owner, void **bo_p)
{
    struct hx *hx = ctx;
    (void)owner;
    struct hx_owner *o = calloc(1, sizeof(*o));
    if (!o)
        return -ENOMEM;
    pthread_mutex_lock(&hx->mu);
    o->next = hx->owners;
    if (hx->owners)
        hx->owners->prev = o;
    hx->owners = o;
    pthread_mutex_unlock(&hx->mu);
    *bo_p = o;
    return 0;
}

static void hx_owner_drop(void *ctx, void *bo)
{
    struct hx *hx = ctx;
    struct hx_fire f = {0};
    pthread_mutex_lock(&hx->mu);
    hx__rings_cancel(hx, bo);
    hx__owner_cancel(hx, bo, &f);
    pthread_mutex_unlock(&hx->mu);
    hx__fire(&f);
}

static int hx_stream_open(void *ctx, void *bo, uint32_t flags, void **bs_p)
{
    struct hx *hx = ctx;
    struct hx_owner *o = bo;
    struct hx_stream *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->owner = o;
    s->flags = flags;
    s->state = HX_IDLE;
    pthread_mutex_lock(&hx->mu);
    s->onext = o->streams;
    if (o->streams)
        o->streams->oprev = s;
    o->streams = s;
    o->objs++;
    pthread_mutex_unlock(&hx->mu);
    *bs_p = s;
    return 0;
}

static void hx_stream_close(void *ctx, void *bs)
{
    struct hx *hx = ctx;
    struct hx_stream *s = bs;
    pthread_mutex_lock(&hx->mu);
    s->closed = true; /* queued work still runs, as in CUDA */
    hx__stream_maybe_free(hx, s);
    pthread_mutex_unlock(&hx->mu);
}

static int hx_event_open(void *ctx, void *bo, uint32_t flags, void **bev_p)
{
    struct hx *hx = ctx;
    struct hx_owner *o = bo;
    struct hx_event *ev = calloc(1, sizeof(*ev));
    if (!ev)
        return -ENOMEM;
    ev->owner = o;
    ev->timing = (flags & LT_EVENT_F_TIMING) != 0;
    ev->refs = 1;
    pthread_mutex_lock(&hx->mu);
    ev->onext = o->events;
    if (o->events)
        o->events->oprev = ev;
    o->events = ev;
    o->objs++;
    pthread_mutex_unlock(&hx->mu);
    *bev_p = ev;
    return 0;
}

static void hx_event_close(void *ctx, void *bev)
{
    struct hx *hx = ctx;
    struct hx_fire f = {0};
    pthread_mutex_lock(&hx->mu);
    hx__event_close(hx, bev, &f, false); /* pending synchronizes still complete */
    pthread_mutex_unlock(&hx->mu);
    hx__fire(&f);
}

static struct hx_job *hx__job_new(enum hx_kind kind, struct lt_failure *why, const char *what)
{
    struct hx_job *j = calloc(1, sizeof(*j));
    if (!j)
        lt_failure_set(why, LT_E_SYSTEM, 0, "%s: out of memory", what);
    else
        j->kind = kind;
    return j;
}

static int hx_work_enqueue(void *ctx, void *bs, struct ga_exec_job *job, struct lt_failure *why_p)
{
    struct hx *hx = ctx;
    struct hx_job *j = hx__job_new(HX_WORK, why_p, "submit");
    if (!j)
        return -ENOMEM;
    j->job = job;
    pthread_mutex_lock(&hx->mu);
    hx__enqueue(hx, bs, j);
    pthread_mutex_unlock(&hx->mu);
    return 0;
}

static int hx_stream_query(void *ctx, void *bs, struct ga_exec_call *call, struct lt_failure *why)
{
    struct hx *hx = ctx;
    struct hx_stream *s = bs;
    (void)why;
    pthread_mutex_lock(&hx->mu);
    struct ga_exec_answer a = {.status = LT_OK, .ready = !s->head && s->state != HX_RUNNING};
    pthread_mutex_unlock(&hx->mu);
    ga_exec_call_done(call, &a);
    return 0;
}

/* One sync marker on each of @n streams; @call is answered when all ran. */
static int hx__barrier(struct hx *hx, struct ga_exec_call *call, struct hx_stream **streams,
                       uint32_t n, struct lt_failure *why)
{
    struct hx_barrier *b = calloc(1, sizeof(*b));
    struct hx_job **jobs = calloc(n ? n : 1, sizeof(*jobs));
    bool ok = b && jobs;
    for (uint32_t i = 0; ok && i < n; i++)
        ok = (jobs[i] = calloc(1, sizeof(**jobs))) != NULL;
    if (!ok) {
        for (uint32_t i = 0; jobs && i < n; i++)
            free(jobs[i]);
        free(jobs);
        free(b);
        return lt_failure_set(why, LT_E_SYSTEM, 0, "%s: out of memory", ga_exec_call_name(call));
    }
    b->left = n;
    b->call = call;
    for (uint32_t i = 0; i < n; i++) {
        jobs[i]->kind = HX_MARK;
        jobs[i]->bar = b;
        hx__enqueue(hx, streams[i], jobs[i]);
    }
    free(jobs);
    return 0;
}

static int hx_stream_sync(void *ctx, void *bs, struct ga_exec_call *call, struct lt_failure *why)
{
    struct hx *hx = ctx;
    struct hx_stream *s = bs;
    pthread_mutex_lock(&hx->mu);
    int rc = hx__barrier(hx, call, &s, 1, why);
    pthread_mutex_unlock(&hx->mu);
    return rc;
}

static int hx_device_sync(void *ctx, void *bo, struct ga_exec_call *call, struct lt_failure *why)
{
    struct hx *hx = ctx;
    struct hx_owner *o = bo;
    pthread_mutex_lock(&hx->mu);
    uint32_t n = 0;
    for (struct hx_stream *s = o->streams; s; s = s->onext)
        n++;
    struct hx_stream **v = calloc(n ? n : 1, sizeof(*v));
    int rc = v ? 0 : lt_failure_set(why, LT_E_SYSTEM, 0, "DEVICE_SYNCHRONIZE: out of memory");
    n = 0;
    for (struct hx_stream *s = o->streams; v && s; s = s->onext)
        v[n++] = s;
    if (rc == 0)
        rc = hx__barrier(hx, call, v, n, why);
    pthread_mutex_unlock(&hx->mu);
    free(v);
    return rc;
}

static int hx_event_record(void *ctx, void *bs, void *bev, struct ga_exec_call *call,
                           struct lt_failure *why)
{
    struct hx *hx = ctx;
    struct hx_event *ev = bev;
    struct hx_job *j = hx__job_new(HX_RECORD, why, "EVENT_RECORD");
    if (!j)
        return -ENOMEM;
    pthread_mutex_lock(&hx->mu);
    j->ev = ev;
    j->epoch = ++ev->recorded;
    ev->refs++;
    hx__enqueue(hx, bs, j);
    pthread_mutex_unlock(&hx->mu);
    ga_exec_call_ok(call);
    return 0;
}

static int hx_event_wait(void *ctx, void *bs, void *bev, struct ga_exec_call *call,
                         struct lt_failure *why)
{
    struct hx *hx = ctx;
    struct hx_event *ev = bev;
    struct hx_job *j = hx__job_new(HX_WAIT, why, "EVENT_WAIT");
    if (!j)
        return -ENOMEM;
    pthread_mutex_lock(&hx->mu);
    if (ev->done >= ev->recorded) {
        free(j); /* nothing pending: waiting is a no-op, as in CUDA */
    } else {
        j->ev = ev;
        j->epoch = ev->recorded;
        ev->refs++;
        hx__enqueue(hx, bs, j);
    }
    pthread_mutex_unlock(&hx->mu);
    ga_exec_call_ok(call);
    return 0;
}

static int hx_event_query(void *ctx, void *bev, struct ga_exec_call *call, struct lt_failure *why)
{
    struct hx *hx = ctx;
    struct hx_event *ev = bev;
    (void)why;
    pthread_mutex_lock(&hx->mu);
    struct ga_exec_answer a = {.status = LT_OK, .ready = ev->done >= ev->recorded};
    pthread_mutex_unlock(&hx->mu);
    ga_exec_call_done(call, &a);
    return 0;
}

static int hx_event_sync(void *ctx, void *bev, struct ga_exec_call *call, struct lt_failure *why)
{
    struct hx *hx = ctx;
    struct hx_event *ev = bev;
    struct hx_waiter *w = calloc(1, sizeof(*w));
    struct hx_barrier *b = calloc(1, sizeof(*b));
    if (!w || !b) {
        free(w);
        free(b);
        return lt_failure_set(why, LT_E_SYSTEM, 0, "EVENT_SYNCHRONIZE: out of memory");
    }
    pthread_mutex_lock(&hx->mu);
    bool now = ev->done >= ev->recorded;
    if (!now) {
        b->left = 1;
        b->call = call;
        w->bar = b;
        w->epoch = ev->recorded;
        w->next = ev->waiters;
        ev->waiters = w;
        ev->refs++;
    }
    pthread_mutex_unlock(&hx->mu);
    if (now) {
        free(w);
        free(b);
        ga_exec_call_ok(call);
    }
    return 0;
}

static int hx_event_elapsed(void *ctx, void *start, void *end, struct ga_exec_call *call,
                            struct lt_failure *why)
{
    struct hx *hx = ctx;
    struct hx_event *a = start, *b = end;
    pthread_mutex_lock(&hx->mu);
    bool a_pending = a->recorded == 0 || a->done < a->recorded;
    bool b_pending = b->recorded == 0 || b->done < b->recorded;
    bool never = a->recorded == 0 || b->recorded == 0;
    double ms = ((double)b->done_ns - (double)a->done_ns) / 1e6;
    pthread_mutex_unlock(&hx->mu);
    if (a_pending || b_pending)
        return lt_failure_set(why, LT_E_BUSY, 0,
                              "EVENT_ELAPSED: expected both events recorded and complete, found "
                              "the %s %s",
                              a_pending ? "start" : "end", never ? "never recorded" : "pending");
    struct ga_exec_answer ans = {.status = LT_OK, .elapsed_ms = (float)ms};
    ga_exec_call_done(call, &ans);
    return 0;
}

static int hx_stats_format(void *ctx, char *buf, size_t len)
{
    struct hx *hx = ctx;
    pthread_mutex_lock(&hx->mu);
    int n = snprintf(buf, len,
                     "host executor: workers=%" PRIu32 " ready=%" PRIu64 " bell_waiting=%" PRIu64
                     " ran=%" PRIu64 " bell_waits=%" PRIu64 " rings=%" PRIu32
                     " ring_shards=%" PRIu64 " ring_chunks=%" PRIu64 " ring_waits=%" PRIu64 "\n",
                     hx->nworkers, hx->ready.n, hx->bell.n, hx->ran, hx->bell_waits, hx->rings_live,
                     hx->ring_shards, hx->ring_chunks, hx->ring_waits);
    pthread_mutex_unlock(&hx->mu);
    return n;
}

/* Stops the threads (every owner was dropped, so nothing is queued). */
static void hx__threads_stop(struct hx *hx)
{
    struct hx_fire f = {0};
    pthread_mutex_lock(&hx->mu);
    hx->stopping = true;
    for (struct hx_owner *o = hx->owners, *n; o; o = n) {
        n = o->next;
        if (!o->dropped) {
            hx__rings_cancel(hx, o);
            hx__owner_cancel(hx, o, &f);
        }
    }
    pthread_cond_broadcast(&hx->work_cv);
    pthread_cond_broadcast(&hx->bell_cv);
    pthread_mutex_unlock(&hx->mu);
    hx__fire(&f);
    hx__rings_wait(hx);
    for (uint32_t i = 0; i < hx->started; i++)
        pthread_join(hx->workers[i].thread, NULL);
    if (hx->bell_started)
        pthread_join(hx->bell_thread, NULL);
    hx->started = 0;
    hx->bell_started = false;
}

static void hx_shutdown(void *ctx)
{
    struct hx *hx = ctx;
    if (hx->shut)
        return;
    hx__threads_stop(hx);
    hx->shut = true;
}

static void hx__free(struct hx *hx)
{
    /* What running work left behind after its owner was cancelled. */
    while (hx->owners) {
        struct hx_owner *o = hx->owners;
        hx->owners = o->next;
        for (struct hx_stream *s = o->streams, *n; s; s = n) {
            n = s->onext;
            free(s);
        }
        for (struct hx_event *ev = o->events, *n; ev; ev = n) {
            n = ev->onext;
            free(ev);
        }
        free(o);
    }
    for (uint32_t i = 0; hx->workers && i < hx->nworkers; i++)
        free(hx->workers[i].scratch);
    free(hx->workers);
    pthread_cond_destroy(&hx->work_cv);
    pthread_cond_destroy(&hx->bell_cv);
    pthread_cond_destroy(&hx->ring_cv);
    pthread_mutex_destroy(&hx->mu);
    free(hx);
}

static void hx_destroy(void *ctx)
{
    struct hx *hx = ctx;
    hx_shutdown(hx);
    hx__free(hx);
}

static const struct ga_exec_backend_ops hx_ops = {
    .work_check = hx_work_check,
    .owner_open = hx_owner_open,
    .owner_drop = hx_owner_drop,
    .stream_open = hx_stream_open,
    .stream_close = hx_stream_close,
    .event_open = hx_event_open,
    .event_close = hx_event_close,
    .work_enqueue = hx_work_enqueue,
    .stream_query = hx_stream_query,
    .stream_sync = hx_stream_sync,
    .event_record = hx_event_record,
    .event_wait = hx_event_wait,
    .event_query = hx_event_query,
    .event_sync = hx_event_sync,
    .event_elapsed = hx_event_elapsed,
    .device_sync = hx_device_sync,
    .stats_format = hx_stats_format,
    .shutdown = hx_shutdown,
    .destroy = hx_destroy,
    .ring_open = hx__ring_open,
    .ring_shard = hx__ring_shard,
    .ring_close = hx__ring_close,
};

/* ---- creation -------------------------------------------------------------- */

static int hx__threads_start(struct hx *hx)
{
    for (uint32_t i = 0; i < hx->nworkers; i++) {
        hx->workers[i].hx = hx;
        hx->workers[i].scratch = malloc((size_t)hx->scratch_bytes);
        if (!hx->workers[i].scratch)
            return -ENOMEM;
    }
    for (; hx->started < hx->nworkers; hx->started++) {
        int rc = -pthread_create(&hx->workers[hx->started].thread, NULL, hx__worker_main,
                                 &hx->workers[hx->started]);
        if (rc < 0)
            return rc;
    }
    int rc = -pthread_create(&hx->bell_thread, NULL, hx__bell_main, hx);
    if (rc == 0)
        hx->bell_started = true;
    return rc;
}

int ga_executor_host_create(const struct ga_executor_host_opts *opts, struct ga_executor **ex_p)
{
    struct ga_executor_host_opts o = opts ? *opts : (struct ga_executor_host_opts){0};
    if (!ex_p || o.workers > HX_WORKERS_MAX || o.scratch_bytes > HX_SCRATCH_MAX)
        return -EINVAL;
    if (o.workers == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        o.workers = cpus < 1                        ? 1u
                    : cpus > HX_WORKERS_DEFAULT_MAX ? HX_WORKERS_DEFAULT_MAX
                                                    : (uint32_t)cpus;
    }
    struct hx *hx = calloc(1, sizeof(*hx));
    if (!hx)
        return -ENOMEM;
    hx->scratch_bytes = o.scratch_bytes ? o.scratch_bytes : HX_SCRATCH_DEFAULT;
    hx->bell_sleep_max_us = o.bell_sleep_max_us ? o.bell_sleep_max_us : HX_BELL_SLEEP_DEFAULT_US;
    if (hx->bell_sleep_max_us < HX_BELL_SLEEP_MIN_US)
        hx->bell_sleep_max_us = HX_BELL_SLEEP_MIN_US;
    hx->nworkers = o.workers;
    pthread_mutex_init(&hx->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&hx->bell_cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&hx->work_cv, NULL);
    pthread_cond_init(&hx->ring_cv, NULL);
    hx->workers = calloc(hx->nworkers, sizeof(*hx->workers));
    int rc = hx->workers ? hx__threads_start(hx) : -ENOMEM;
    if (rc < 0)
        goto fail;
    struct ga_exec_config cfg = {
        .limits = {.max_streams = o.max_streams, .max_events = o.max_events},
        .reuse = BASE_IDTAB_REUSE_LIFO,
        .log = o.log,
    };
    struct ga_exec_backend be = {
        .name = "host",
        .caps = LT_CAP_DOORBELL | LT_CAP_DONE_WORD | LT_CAP_TIMING | LT_CAP_HOST_BACKEND |
                LT_CAP_STREAM,
        .ops = &hx_ops,
        .ctx = hx,
    };
    if ((rc = ga_executor_create(&cfg, &be, ex_p)) < 0)
        goto fail;
    return 0;

fail:
    hx__threads_stop(hx);
    hx__free(hx);
    return rc;
}
