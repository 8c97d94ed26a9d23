/* The CUDA executor (gpu/executor_cuda.h): clients, their command queues,
 * streams and events by managed id, completions and device faults.
 *
 * Threads:
 * - the caller (the server's loop): checks a request, queues it on its
 *   client's FIFO and schedules that FIFO on the pool. No CUDA call.
 * - pool workers (ga_pool, primary context current): serve one client's
 *   FIFO at a time, in order, issuing every request as asynchronous CUDA
 *   work (copies, kernels, doorbell waits, done words, event records) and a
 *   completion behind it (ga_stream_when_done). Nothing there waits for the
 *   GPU, so a doorbell nobody rings holds no thread.
 * - the driver's callback thread: the completion hops, and the bounce
 *   copies of STAGED leases (executor_cuda_ops.c).
 * - the ga_streams completion thread: reads results from the pinned arena
 *   and calls the server's callbacks; releases streams whose work is done.
 * - the monitor: while work is in flight, polls for a sticky device error
 *   every CX_MONITOR_MS and then answers everything LT_E_GPU_FAULT.
 * One FIFO per client keeps a client's requests in the order it sent them,
 * across its streams, as one host thread's CUDA calls would be. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cu_call.h"
#include "device_internal.h"
#include "executor_cuda_internal.h"
#include "kernels/checksum.h"
#include "kernels/scan.h"
#include "lease_types/validate.h"

#define CX_STREAMS_DEFAULT 64u
#define CX_EVENTS_DEFAULT 1024u
#define CX_TABLE_STREAMS_DEFAULT 4096u
#define CX_TABLE_EVENTS_DEFAULT 16384u
#define CX_CHUNK_DEFAULT (64ull << 20)
#define CX_SLOTS_DEFAULT 16384u
#define CX_SLOTS_MAX (1u << 20)
#define CX_SERVE_BATCH 64u
#define CX_MONITOR_MS 100
#define CX_POOL_RELEASE_THRESHOLD (2ull << 30)

static uint64_t cx__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cx__refuse(struct lt_failure *why, uint32_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int cx__refuse(struct lt_failure *why, uint32_t code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = lt_failure_vset(why, code, 0, fmt, ap);
    va_end(ap);
    return rc;
}

/* ---- owners and streams (locked) --------------------------------------- */

static struct cx_owner *cx__owner_find(struct cx *x, uint64_t id)
{
    for (struct cx_owner *o = x->owners; o; o = o->next)
        if (o->id == id)
            return o;
    return NULL;
}

static void cx__owner_unref(struct cx *x, struct cx_owner *o)
{
    if (--o->refs != 0)
        return;
    for (struct cx_owner **pp = &x->owners; *pp; pp = &(*pp)->next)
        if (*pp == o) {
            *pp = o->next;
            break;
        }
    free(o->drop_cmd); /* NULL once the drop was queued */
    free(o);
}

static struct cx_xs *cx__xs_new(struct cx_owner *o, bool is_default, uint32_t flags)
{
    struct cx_xs *xs = calloc(1, sizeof(*xs));
    if (!xs)
        return NULL;
    xs->o = o;
    xs->is_default = is_default;
    xs->flags = flags;
    xs->onext = o->streams;
    o->streams = xs;
    o->refs++;
    return xs;
}

static void cx__xs_unlink(struct cx *x, struct cx_xs *xs)
{
    struct cx_owner *o = xs->o;
    for (struct cx_xs **pp = &o->streams; *pp; pp = &(*pp)->onext)
        if (*pp == xs) {
            *pp = xs->onext;
            break;
        }
    if (xs->created && xs->id.slot < x->nslots && x->by_slot[xs->id.slot] == xs)
        x->by_slot[xs->id.slot] = NULL;
    cx__owner_unref(x, o);
}

/* Resolves @id for @o: the default stream, or one it created and did not
 * destroy; else the protocol's distinct refusal. */
static int cx__xs_resolve(struct cx *x, struct cx_owner *o, struct lt_stream_id id,
                          struct cx_xs **xs_p, struct lt_failure *why)
{
    if (lt_stream_id_is_default(id)) {
        *xs_p = o->dflt;
        return 0;
    }
    struct cx_xs *xs = id.slot < x->nslots ? x->by_slot[id.slot] : NULL;
    if (xs && xs->o == o && xs->id.gen == id.gen) {
        if (!xs->destroyed) {
            *xs_p = xs;
            return 0;
        }
        return cx__refuse(why, LT_E_STALE_ID,
                          "stream {%" PRIu32 ",%" PRIu32 "} is stale: it was destroyed", id.slot,
                          id.gen);
    }
    int rc = ga_stream_validate(x->streams, o->id, id);
    switch (rc) {
    case 0:
        return cx__refuse(why, LT_E_NOT_FOUND,
                          "stream {%" PRIu32 ",%" PRIu32 "} is the agent's own, not a client's",
                          id.slot, id.gen);
    case -ESTALE:
        return cx__refuse(why, LT_E_STALE_ID,
                          "stream {%" PRIu32 ",%" PRIu32 "} is stale: it was destroyed", id.slot,
                          id.gen);
    case -EPERM:
        return cx__refuse(why, LT_E_NOT_OWNER,
                          "stream {%" PRIu32 ",%" PRIu32 "} belongs to another client", id.slot,
                          id.gen);
    case -EINVAL:
        return cx__refuse(why, LT_E_BAD_ID, "stream {%" PRIu32 ",%" PRIu32 "}: generation 0",
                          id.slot, id.gen);
    default:
        return cx__refuse(why, LT_E_NOT_FOUND, "stream {%" PRIu32 ",%" PRIu32 "} was never issued",
                          id.slot, id.gen);
    }
}

static int cx__owner_get(struct cx *x, uint64_t owner, struct cx_owner **o_p,
                         struct lt_failure *why)
{
    if (x->faulted)
        return cx__refuse(why, LT_E_GPU_FAULT, "the GPU faulted (%s): the agent must be restarted",
                          strerror(-x->fault_err));
    if (x->stopping)
        return cx__refuse(why, LT_E_SHUTTING_DOWN, "the executor is shutting down");
    struct cx_owner *o = cx__owner_find(x, owner);
    if (!o)
        return cx__refuse(why, LT_E_NOT_FOUND, "client %#" PRIx64 " is not registered", owner);
    if (o->dropped)
        return cx__refuse(why, LT_E_SHUTTING_DOWN, "client %#" PRIx64 " is being dropped", owner);
    *o_p = o;
    return 0;
}

/* ---- the FIFO --------------------------------------------------------------- */

static int cx__serve(void *arg);

/* Appends @cmd to @o's FIFO and makes sure a worker serves it. Locked. */
static int cx__push(struct cx *x, struct cx_owner *o, struct cx_cmd *cmd)
{
    cmd->next = NULL;
    cmd->o = o;
    cmd->x = x;
    if (!o->scheduled) {
        int rc = ga_pool_submit(x->pool, cx__serve, o, NULL, NULL, NULL);
        if (rc < 0)
            return rc;
        o->scheduled = true;
        o->refs++; /* the serving job's */
    }
    if (o->fifo_tail)
        o->fifo_tail->next = cmd;
    else
        o->fifo_head = cmd;
    o->fifo_tail = cmd;
    o->refs++;
    return 0;
}

static void cx__inflight_add(struct cx *x, struct cx_cmd *cmd)
{
    cmd->iprev = NULL;
    cmd->inext = x->inflight;
    if (x->inflight)
        x->inflight->iprev = cmd;
    x->inflight = cmd;
}

static void cx__inflight_del(struct cx *x, struct cx_cmd *cmd)
{
    if (cmd->iprev)
        cmd->iprev->inext = cmd->inext;
    else if (x->inflight == cmd)
        x->inflight = cmd->inext;
    if (cmd->inext)
        cmd->inext->iprev = cmd->iprev;
    cmd->inext = cmd->iprev = NULL;
}

/* The accounting of an answered command. Locked. */
static void cx__cmd_account(struct cx *x, struct cx_cmd *cmd)
{
    struct cx_owner *o = cmd->o;
    if (cmd->kind == CX_WORK) {
        o->queued--;
        o->completed++;
        x->st.completed++;
    }
    x->ninflight--;
    if (x->ninflight == 0)
        pthread_cond_broadcast(&x->idle_cv);
}

/* An answered command is freed: its slot and its owner reference go. */
static void cx__cmd_free(struct cx *x, struct cx_cmd *cmd)
{
    pthread_mutex_lock(&x->mu);
    if (cmd->slot != UINT32_MAX)
        x->free_slots[x->nfree++] = cmd->slot;
    cx__owner_unref(x, cmd->o);
    pthread_mutex_unlock(&x->mu);
    free(cmd->pieces);
    free(cmd);
}

/* Answers @cmd once, with @status when it is not LT_OK (a work item's
 * result is read from its slot otherwise). Returns false when it was
 * answered already (by the fault path). */
static bool cx__cmd_answer(struct cx *x, struct cx_cmd *cmd, uint32_t status, const char *why)
{
    pthread_mutex_lock(&x->mu);
    if (cmd->state) {
        pthread_mutex_unlock(&x->mu);
        return false;
    }
    cmd->state = 1;
    cx__inflight_del(x, cmd);
    pthread_mutex_unlock(&x->mu);
    uint32_t final = status;
    if (cmd->kind == CX_WORK) {
        struct ga_exec_result res;
        if (status == LT_OK) {
            cx__op_result(x, cmd, &res);
        } else {
            memset(&res, 0, sizeof res);
            res.status = status;
        }
        res.elapsed_ns = cx__now_ns() - cmd->w.accepted_ns;
        final = res.status;
        cmd->w.done_cb(cmd->w.arg, &res);
    } else if (cmd->kind == CX_CTL) {
        if (status != LT_OK) {
            cmd->r.status = status;
            snprintf(cmd->r.message, sizeof cmd->r.message, "%s: %s", lt_msg_type_name(cmd->c.type),
                     why ? why : lt_error_describe(status));
        }
        cmd->c.done_cb(cmd->c.arg, &cmd->r);
    }
    pthread_mutex_lock(&x->mu);
    if (cmd->kind == CX_WORK && final == LT_E_SHUTTING_DOWN)
        x->st.cancelled++;
    else if (final != LT_OK && final != LT_E_CHECKSUM_MISMATCH)
        x->st.failed++;
    cx__cmd_account(x, cmd);
    pthread_mutex_unlock(&x->mu);
    return true;
}

/* ---- faults ------------------------------------------------------------------ */

/* The context is unusable: answer everything on the GPU now (nothing there
 * will complete) and tell the agent. Commands stay allocated: a completion
 * that still fired must find them. */
static void cx__fault(struct cx *x, int err)
{
    pthread_mutex_lock(&x->mu);
    if (x->faulted) {
        pthread_mutex_unlock(&x->mu);
        return;
    }
    x->faulted = true;
    x->fault_err = err ? err : -EIO;
    struct cx_cmd *list = NULL;
    while (x->inflight) {
        struct cx_cmd *cmd = x->inflight;
        cx__inflight_del(x, cmd);
        cmd->state = 1;
        cmd->inext = list;
        list = cmd;
    }
    pthread_mutex_unlock(&x->mu);
    ga__err("CUDA executor: the device faulted (%s); answering every request in flight with "
            "GPU_FAULT. The primary context is unusable: restart the agent",
            strerror(-x->fault_err));
    for (struct cx_cmd *cmd = list; cmd; cmd = cmd->inext) {
        if (cmd->kind == CX_WORK) {
            struct ga_exec_result res = {.status = LT_E_GPU_FAULT,
                                         .elapsed_ns = cx__now_ns() - cmd->w.accepted_ns};
            cmd->w.done_cb(cmd->w.arg, &res);
        } else {
            cmd->r.status = LT_E_GPU_FAULT;
            snprintf(cmd->r.message, sizeof cmd->r.message, "%s: the GPU faulted",
                     lt_msg_type_name(cmd->c.type));
            cmd->c.done_cb(cmd->c.arg, &cmd->r);
        }
        pthread_mutex_lock(&x->mu);
        cx__cmd_account(x, cmd);
        pthread_mutex_unlock(&x->mu);
    }
    if (x->on_fault)
        x->on_fault(x->fault_arg, x->fault_err);
}

static void *cx__monitor_main(void *arg)
{
    struct cx *x = arg;
    pthread_mutex_lock(&x->mu);
    while (!x->shut && !x->faulted) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)CX_MONITOR_MS * 1000000u;
        ts.tv_sec += (time_t)(ns / 1000000000u);
        ts.tv_nsec = (long)(ns % 1000000000u);
        pthread_cond_timedwait(&x->mon_cv, &x->mu, &ts);
        if (x->shut || x->ninflight == 0)
            continue;
        pthread_mutex_unlock(&x->mu);
        /* An idle stream's query reports a sticky error of the context. */
        int rc = ga_device_make_current(x->dev);
        if (rc == 0) {
            CUresult r = cuStreamQuery(x->mon_stream);
            if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY)
                rc = GA_CU(r);
        }
        if (rc == -EIO || rc == -ENODEV)
            cx__fault(x, rc);
        pthread_mutex_lock(&x->mu);
    }
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

/* ---- stream lifetimes (workers and the completion thread) ------------------ */

/* The managed id of @xs, created now for a default stream's first use. */
static int cx__xs_ensure(struct cx *x, struct cx_xs *xs)
{
    if (xs->created)
        return 0;
    struct lt_stream_id id;
    int rc = ga_stream_create(x->streams, xs->o->id, &id);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&x->mu);
    xs->id = id;
    xs->created = true;
    pthread_mutex_unlock(&x->mu);
    return 0;
}

/* Frees @xs and what the pipelines made for it once its work is done (on
 * the completion thread, or at once when nothing was queued). */
static void cx__xs_release(void *arg)
{
    struct cx_xs *xs = arg;
    struct cx *x = xs->o->x;
    if (xs->cs && ga_device_make_current(x->dev) == 0) {
        /* Both return at once; the driver frees them when their work ends. */
        GA_CU(cuStreamDestroy(xs->cs));
        CUevent evs[5] = {xs->evf, xs->cd[0], xs->cd[1], xs->kd[0], xs->kd[1]};
        for (int i = 0; i < 5; i++)
            GA_CU(cuEventDestroy(evs[i]));
    }
    pthread_mutex_lock(&x->mu);
    if (xs->scratch) {
        xs->scratch->next = x->scratch_free;
        x->scratch_free = xs->scratch;
    }
    cx__xs_unlink(x, xs);
    pthread_mutex_unlock(&x->mu);
    free(xs);
}

/* Queues @xs's release behind its work. */
static void cx__xs_retire(struct cx *x, struct cx_xs *xs)
{
    pthread_mutex_lock(&x->mu);
    bool already = xs->releasing;
    xs->releasing = true;
    pthread_mutex_unlock(&x->mu);
    if (already)
        return;
    if (!xs->created || ga_stream_when_done(x->streams, xs->o->id, xs->id, cx__xs_release, xs) < 0)
        cx__xs_release(xs); /* nothing queued, or the device is gone */
}

/* ---- issuing commands (on a worker) ----------------------------------------- */

static int cx__work_fn(void *arg, struct CUstream_st *st)
{
    struct cx_cmd *cmd = arg;
    return cx__op_queue(cmd->x, cmd, st);
}

static void cx__work_complete(void *arg)
{
    struct cx_cmd *cmd = arg;
    struct cx *x = cmd->x;
    if (cx__cmd_answer(x, cmd, LT_OK, NULL))
        cx__cmd_free(x, cmd);
}

static void cx__ctl_complete(void *arg)
{
    struct cx_cmd *cmd = arg;
    struct cx *x = cmd->x;
    if (cx__cmd_answer(x, cmd, LT_OK, NULL))
        cx__cmd_free(x, cmd);
}

/* Queues @cmd's completion behind what its stream holds; when that cannot be
 * queued the stream's state is unknown: treat it as a fault if the device
 * says so, else answer now with the error. */
static void cx__complete_behind(struct cx *x, struct cx_cmd *cmd, struct lt_stream_id id,
                                void (*fn)(void *))
{
    int rc = ga_stream_when_done(x->streams, cmd->o->id, id, fn, cmd);
    if (rc == 0)
        return;
    if (rc == -EIO || rc == -ENODEV) {
        cx__fault(x, rc);
        return;
    }
    if (cx__cmd_answer(x, cmd, LT_E_SYSTEM, "the completion could not be queued"))
        cx__cmd_free(x, cmd);
}

static void cx__work_issue(struct cx *x, struct cx_cmd *cmd)
{
    struct cx_xs *xs = cmd->xs;
    struct ga_exec_work *w = &cmd->w;
    int rc = cx__xs_ensure(x, xs);
    if (rc < 0) {
        if (cx__cmd_answer(x, cmd, lt_error_from_errno(rc) == LT_E_LIMIT ? LT_E_LIMIT : LT_E_SYSTEM,
                           "the client's default stream could not be created"))
            cx__cmd_free(x, cmd);
        return;
    }
    if (w->bell.host) {
        struct ga_doorbell_req req = {
            .bell_dev = w->bell.dev, .seq = w->bell.seq, .work = cx__work_fn, .work_arg = cmd};
        rc = ga_doorbell_queue(x->streams, cmd->o->id, xs->id, &req);
    } else {
        struct CUstream_st *st = NULL;
        rc = ga_stream_get(x->streams, cmd->o->id, xs->id, &st);
        if (rc == 0) {
            rc = cx__op_queue(x, cmd, st);
            ga_stream_put(x->streams, xs->id);
        }
    }
    if (rc == 0 && w->done.host)
        rc = ga_doorbell_signal(x->streams, cmd->o->id, xs->id, w->done.dev, w->done.seq);
    if (rc < 0)
        ga__err("CUDA executor: client %#" PRIx64 ": %s on stream %u:%u could not be queued "
                "(%s); it completes with an error once the stream passes what was queued",
                cmd->o->id,
                w->op == LT_OP_CHECKSUM_VERIFY ? "CHECKSUM_VERIFY"
                : w->op == LT_OP_VECTOR_SCAN   ? "VECTOR_SCAN"
                                               : "COPY_H2D",
                xs->id.slot, xs->id.gen, strerror(-rc));
    cmd->rc = rc;
    cx__complete_behind(x, cmd, xs->id, cx__work_complete);
}

/* The internal stream EVENT_SYNCHRONIZE and DEVICE_SYNCHRONIZE wait on. */
static int cx__sync_stream(struct cx *x, struct cx_owner *o)
{
    if (o->sync_created)
        return 0;
    struct lt_stream_id id;
    int rc = ga_stream_create(x->streams, o->id, &id);
    if (rc < 0)
        return rc;
    o->sync_id = id; /* read and written by the serving worker only */
    o->sync_created = true;
    return 0;
}

/* DEVICE_SYNCHRONIZE: the sync stream waits for every stream of the client,
 * then its completion answers. Other clients' work is not waited for. */
static int cx__device_sync(struct cx *x, struct cx_owner *o)
{
    int rc = cx__sync_stream(x, o);
    if (rc < 0)
        return rc;
    struct CUstream_st *sync = NULL;
    if ((rc = ga_stream_get(x->streams, o->id, o->sync_id, &sync)) < 0)
        return rc;
    pthread_mutex_lock(&x->mu);
    uint32_t n = 0;
    for (struct cx_xs *xs = o->streams; xs; xs = xs->onext)
        n++;
    struct cx_xs **v = calloc(n ? n : 1, sizeof(*v));
    n = 0;
    for (struct cx_xs *xs = o->streams; v && xs; xs = xs->onext)
        if (xs->created && !xs->releasing)
            v[n++] = xs;
    pthread_mutex_unlock(&x->mu);
    if (!v)
        rc = -ENOMEM;
    for (uint32_t i = 0; rc == 0 && i < n; i++) {
        struct CUstream_st *st = NULL;
        if ((rc = cx__xs_prepare(x, v[i], false)) < 0 ||
            (rc = ga_stream_get(x->streams, o->id, v[i]->id, &st)) < 0)
            break;
        rc = GA_CU(cuEventRecord(v[i]->evf, st));
        if (rc == 0)
            rc = GA_CU(cuStreamWaitEvent(sync, v[i]->evf, CU_EVENT_WAIT_DEFAULT));
        ga_stream_put(x->streams, v[i]->id);
    }
    free(v);
    ga_stream_put(x->streams, o->sync_id);
    return rc;
}

/* Words for a refused event command: which id, and what is wrong with it. */
static void cx__ctl_why(const struct ga_exec_ctl *c, int rc, char *why, size_t len)
{
    bool two = c->type == LT_MSG_EVENT_ELAPSED;
    const char *what = rc == -ENOENT   ? "was never issued"
                       : rc == -ESTALE ? "is stale: it was destroyed"
                       : rc == -EPERM  ? "belongs to another client"
                                       : NULL;
    if (what && two)
        snprintf(why, len, "event {%" PRIu32 ",%" PRIu32 "} or {%" PRIu32 ",%" PRIu32 "} %s",
                 c->event.slot, c->event.gen, c->end.slot, c->end.gen, what);
    else if (what && c->type >= LT_MSG_EVENT_RECORD && c->type <= LT_MSG_EVENT_DESTROY)
        snprintf(why, len, "event {%" PRIu32 ",%" PRIu32 "} %s", c->event.slot, c->event.gen, what);
    else
        snprintf(why, len, "%s", strerror(-rc));
}

static void cx__ctl_issue(struct cx *x, struct cx_cmd *cmd)
{
    struct cx_owner *o = cmd->o;
    const struct ga_exec_ctl *c = &cmd->c;
    struct ga_exec_ctl_result *r = &cmd->r;
    char why[LT_ERROR_MSG_LEN] = "";
    int rc = 0;
    bool behind = false; /* answered by a completion on @behind_id */
    struct lt_stream_id behind_id = {0, 0};
    float ms = 0;
    switch (c->type) {
    case LT_MSG_STREAM_CREATE: {
        struct lt_stream_id id;
        rc = ga_stream_create(x->streams, o->id, &id);
        bool made = rc == 0;
        struct cx_xs *xs = NULL;
        pthread_mutex_lock(&x->mu);
        o->pending_creates--;
        if (made && !(xs = cx__xs_new(o, false, c->flags)))
            rc = -ENOMEM;
        if (rc == 0) {
            xs->id = id;
            xs->created = true;
            if (id.slot < x->nslots)
                x->by_slot[id.slot] = xs;
            o->live_streams++;
            r->stream = id;
        }
        pthread_mutex_unlock(&x->mu);
        if (made && !xs)
            ga_stream_destroy(x->streams, o->id, id);
        if (rc == -EMFILE)
            snprintf(why, sizeof why, "the agent's stream table is full");
        break;
    }
    case LT_MSG_STREAM_QUERY:
        rc = cmd->xs->created ? ga_stream_query(x->streams, o->id, cmd->xs->id) : 1;
        if (rc >= 0) {
            r->ready = (uint32_t)rc;
            rc = 0;
        }
        break;
    case LT_MSG_STREAM_SYNCHRONIZE:
        if (cmd->xs->created) {
            behind = true;
            behind_id = cmd->xs->id;
        }
        break;
    case LT_MSG_STREAM_DESTROY:
        /* The id was retired when the command arrived; the stream goes
         * once the work queued on it before is done. */
        {
            struct lt_stream_id id = cmd->xs->id;
            cx__xs_retire(x, cmd->xs); /* queued while the id still names the stream */
            rc = ga_stream_destroy(x->streams, o->id, id);
        }
        break;
    case LT_MSG_EVENT_RECORD: {
        bool fresh = lt_event_id_is_null(c->event);
        pthread_mutex_lock(&x->mu);
        bool full = fresh && o->live_events >= x->ex.max_events;
        uint32_t live = o->live_events;
        pthread_mutex_unlock(&x->mu);
        if (full) {
            rc = -EMFILE;
            snprintf(why, sizeof why, "event limit reached (%" PRIu32 " of %" PRIu32 ")", live,
                     x->ex.max_events);
            break;
        }
        if ((rc = cx__xs_ensure(x, cmd->xs)) < 0)
            break;
        struct lt_event_id ev;
        rc = ga_event_record(x->streams, o->id, cmd->xs->id, c->event,
                             (c->flags & LT_EVENT_F_TIMING) ? GA_EVENT_TIMING : 0u, &ev);
        if (rc == 0) {
            r->event = ev;
            if (fresh) {
                pthread_mutex_lock(&x->mu);
                o->live_events++;
                pthread_mutex_unlock(&x->mu);
            }
        }
        break;
    }
    case LT_MSG_EVENT_WAIT:
        if ((rc = cx__xs_ensure(x, cmd->xs)) == 0)
            rc = ga_event_wait(x->streams, o->id, cmd->xs->id, c->event);
        break;
    case LT_MSG_EVENT_QUERY:
        rc = ga_event_query(x->streams, o->id, c->event);
        if (rc >= 0) {
            r->ready = (uint32_t)rc;
            rc = 0;
        }
        break;
    case LT_MSG_EVENT_SYNCHRONIZE:
        if ((rc = cx__sync_stream(x, o)) == 0 &&
            (rc = ga_event_wait(x->streams, o->id, o->sync_id, c->event)) == 0) {
            behind = true;
            behind_id = o->sync_id;
        }
        break;
    case LT_MSG_EVENT_DESTROY:
        rc = ga_event_destroy(x->streams, o->id, c->event);
        if (rc == 0) {
            pthread_mutex_lock(&x->mu);
            o->live_events--;
            pthread_mutex_unlock(&x->mu);
        }
        break;
    case LT_MSG_EVENT_ELAPSED:
        rc = ga_event_elapsed(x->streams, o->id, c->event, c->end, &ms);
        if (rc == 0)
            r->elapsed_ms_bits = lt_f32_to_bits(ms);
        else if (rc == -EAGAIN)
            snprintf(why, sizeof why, "expected both events complete, found one pending");
        else if (rc == -EINVAL)
            snprintf(why, sizeof why, "expected two events recorded with TIMING");
        break;
    case LT_MSG_DEVICE_SYNCHRONIZE:
        if ((rc = cx__device_sync(x, o)) == 0) {
            behind = true;
            behind_id = o->sync_id;
        }
        break;
    default: /* STREAM_VALIDATE is answered when it arrives */
        rc = -EINVAL;
        break;
    }
    if (rc < 0) {
        if (rc == -EIO)
            cx__fault(x, rc);
        if (!why[0])
            cx__ctl_why(c, rc, why, sizeof why);
        if (cx__cmd_answer(x, cmd, lt_error_from_errno(rc), why))
            cx__cmd_free(x, cmd);
        return;
    }
    if (behind) {
        cx__complete_behind(x, cmd, behind_id, cx__ctl_complete);
        return;
    }
    if (cx__cmd_answer(x, cmd, LT_OK, NULL))
        cx__cmd_free(x, cmd);
}

/* A dropped client: its streams are released behind their work, then every
 * id it held is retired (queued work still runs and completes). */
static void cx__drop_issue(struct cx *x, struct cx_owner *o)
{
    for (;;) {
        struct cx_xs *pick = NULL;
        pthread_mutex_lock(&x->mu);
        for (struct cx_xs *xs = o->streams; xs && !pick; xs = xs->onext)
            if (!xs->releasing)
                pick = xs;
        pthread_mutex_unlock(&x->mu);
        if (!pick)
            break;
        cx__xs_retire(x, pick);
    }
    ga_streams_drop_owner(x->streams, o->id);
    pthread_mutex_lock(&x->mu);
    o->live_streams = 0;
    o->live_events = 0;
    cx__owner_unref(x, o); /* the table's reference */
    pthread_mutex_unlock(&x->mu);
}

/* A pool job: issues up to CX_SERVE_BATCH commands of one client in order,
 * then hands the worker on (requeuing itself when more are waiting). */
static int cx__serve(void *arg)
{
    struct cx_owner *o = arg;
    struct cx *x = o->x;
    pthread_mutex_lock(&x->mu);
    for (uint32_t n = 0; n < CX_SERVE_BATCH && o->fifo_head; n++) {
        struct cx_cmd *cmd = o->fifo_head;
        o->fifo_head = cmd->next;
        if (!o->fifo_head)
            o->fifo_tail = NULL;
        if (cmd->kind == CX_DROP) {
            pthread_mutex_unlock(&x->mu);
            free(cmd);
            cx__drop_issue(x, o);
            pthread_mutex_lock(&x->mu);
            cx__owner_unref(x, o); /* the command's */
            continue;
        }
        bool cancel = o->dropped || x->faulted;
        uint32_t status = x->faulted ? LT_E_GPU_FAULT : LT_E_SHUTTING_DOWN;
        if (!cancel)
            cx__inflight_add(x, cmd); /* from here the drop and the fault path see it */
        pthread_mutex_unlock(&x->mu);
        if (cancel) {
            if (cx__cmd_answer(x, cmd, status, "cancelled before it reached the GPU"))
                cx__cmd_free(x, cmd);
        } else if (cmd->kind == CX_WORK) {
            cx__work_issue(x, cmd);
        } else {
            cx__ctl_issue(x, cmd);
        }
        pthread_mutex_lock(&x->mu);
    }
    bool more = o->fifo_head != NULL;
    if (more && ga_pool_submit(x->pool, cx__serve, o, NULL, NULL, NULL) == 0) {
        pthread_mutex_unlock(&x->mu);
        return 0; /* the next job keeps this one's reference */
    }
    if (more)
        ga__err("CUDA executor: client %#" PRIx64 ": the pool refused to serve %s; they wait "
                "for the next request",
                o->id, "its queued commands");
    o->scheduled = false;
    cx__owner_unref(x, o);
    pthread_mutex_unlock(&x->mu);
    return 0;
}

/* ---- the table of operations ------------------------------------------------- */

static int cx_client_add(void *ctx, uint64_t owner)
{
    struct cx *x = ctx;
    struct cx_owner *o = calloc(1, sizeof(*o));
    struct cx_cmd *drop = calloc(1, sizeof(*drop));
    if (!o || !drop) {
        free(o);
        free(drop);
        return -ENOMEM;
    }
    o->x = x;
    o->id = owner;
    o->refs = 1;
    drop->kind = CX_DROP;
    drop->slot = UINT32_MAX;
    o->drop_cmd = drop;
    pthread_mutex_lock(&x->mu);
    int rc = 0;
    if (x->stopping || x->faulted)
        rc = -ESHUTDOWN;
    else if (cx__owner_find(x, owner))
        rc = -EEXIST;
    else if (!(o->dflt = cx__xs_new(o, true, 0)))
        rc = -ENOMEM;
    if (rc == 0) {
        o->next = x->owners;
        x->owners = o;
    }
    pthread_mutex_unlock(&x->mu);
    if (rc < 0) {
        free(o->dflt);
        free(drop);
        free(o);
    }
    return rc;
}

/* Locked. The client is gone: its bells still waited for are rung by the
 * agent, so the GPU passes them and the work completes (answered as
 * cancelled); what is queued is cancelled as the FIFO is served; the drop
 * command releases its streams and events behind everything. */
static void cx__owner_cancel(struct cx *x, struct cx_owner *o)
{
    o->dropped = true;
    for (struct cx_cmd *cmd = x->inflight; cmd; cmd = cmd->inext) {
        if (cmd->o != o || cmd->kind != CX_WORK || !cmd->w.bell.host || cmd->cancelled)
            continue;
        uint64_t now = ga_doorbell_peek(cmd->w.bell.host);
        if ((int64_t)(now - cmd->w.bell.seq) >= 0)
            continue; /* rung: the work runs and reports its own result */
        cmd->cancelled = true;
        ga_doorbell_ring(cmd->w.bell.host, cmd->w.bell.seq);
    }
    struct cx_cmd *drop = o->drop_cmd;
    o->drop_cmd = NULL;
    if (cx__push(x, o, drop) < 0) {
        /* No worker will take it: release what needs no CUDA now. */
        ga__err("CUDA executor: client %#" PRIx64 ": the pool refused the drop", o->id);
        free(drop);
        cx__owner_unref(x, o);
    }
}

static void cx_client_drop(void *ctx, uint64_t owner)
{
    struct cx *x = ctx;
    pthread_mutex_lock(&x->mu);
    struct cx_owner *o = cx__owner_find(x, owner);
    if (o && !o->dropped)
        cx__owner_cancel(x, o);
    pthread_mutex_unlock(&x->mu);
}

static int cx_submit(void *ctx, const struct ga_exec_work *w, struct lt_failure *why_p)
{
    struct cx *x = ctx;
    if (!w || !w->done_cb || !w->host)
        return cx__refuse(why_p, LT_E_BAD_VALUE,
                          "submit: expected a work item with bytes and a callback");
    if ((w->bell.host && (w->bell.seq == 0 || w->bell.dev == 0)) ||
        (w->done.host && (w->done.seq == 0 || w->done.dev == 0)))
        return cx__refuse(why_p, LT_E_BAD_VALUE,
                          "submit: a bell or done word needs a nonzero seq and a registered "
                          "device address");
    struct cx_cmd *cmd = calloc(1, sizeof(*cmd));
    if (!cmd)
        return cx__refuse(why_p, LT_E_SYSTEM, "submit: out of memory");
    cmd->kind = CX_WORK;
    cmd->w = *w;
    cmd->slot = UINT32_MAX;
    uint32_t code = LT_OK;
    char msg[LT_ERROR_MSG_LEN];
    if (cx__op_plan(x, cmd, &code, msg, sizeof msg) < 0) {
        free(cmd);
        return cx__refuse(why_p, code, "%s", msg);
    }
    pthread_mutex_lock(&x->mu);
    struct cx_owner *o = NULL;
    int rc = cx__owner_get(x, w->owner, &o, why_p);
    if (rc == 0)
        rc = cx__xs_resolve(x, o, w->stream, &cmd->xs, why_p);
    if (rc == 0 && w->op != LT_OP_COPY_H2D) {
        if (x->nfree == 0)
            rc = cx__refuse(why_p, LT_E_LIMIT,
                            "%" PRIu32 " checksum and scan submits in flight, the agent's limit",
                            x->nresult);
        else
            cmd->slot = x->free_slots[--x->nfree];
    }
    if (rc == 0 && (rc = cx__push(x, o, cmd)) < 0)
        rc = cx__refuse(why_p, LT_E_SYSTEM, "submit: the worker pool refused the work (%s)",
                        strerror(-rc));
    if (rc == 0) {
        o->queued++;
        o->submitted++;
        x->ninflight++;
        x->st.submitted++;
        x->st.path_submits[cmd->path]++;
        x->st.path_bytes[cmd->path] += w->op == LT_OP_CHECKSUM_VERIFY ? w->args.checksum.length
                                       : w->op == LT_OP_VECTOR_SCAN   ? w->args.scan.length
                                                                      : w->args.copy.length;
        x->st.bell_waits += w->bell.host != NULL;
        x->st.done_words += w->done.host != NULL;
    } else if (cmd->slot != UINT32_MAX) {
        x->free_slots[x->nfree++] = cmd->slot;
    }
    pthread_mutex_unlock(&x->mu);
    if (rc < 0)
        free(cmd);
    return rc;
}

static int cx_ctl(void *ctx, const struct ga_exec_ctl *c, struct lt_failure *why_p)
{
    struct cx *x = ctx;
    if (!c || !c->done_cb)
        return cx__refuse(why_p, LT_E_BAD_VALUE, "ctl: expected a command with a callback");
    if (c->type < LT_MSG_STREAM_CREATE || c->type > LT_MSG_DEVICE_SYNCHRONIZE)
        return cx__refuse(why_p, LT_E_WRONG_TYPE,
                          "ctl: %s is not a stream, event or device "
                          "command",
                          lt_msg_type_name(c->type));
    struct cx_cmd *cmd = calloc(1, sizeof(*cmd));
    if (!cmd)
        return cx__refuse(why_p, LT_E_SYSTEM, "%s: out of memory", lt_msg_type_name(c->type));
    cmd->kind = CX_CTL;
    cmd->c = *c;
    cmd->slot = UINT32_MAX;
    cmd->r = (struct ga_exec_ctl_result){.type = c->type, .status = LT_OK};
    bool answer_now = false;
    pthread_mutex_lock(&x->mu);
    struct cx_owner *o = NULL;
    int rc = cx__owner_get(x, c->owner, &o, why_p);
    if (rc < 0)
        goto out;
    switch (c->type) {
    case LT_MSG_STREAM_CREATE:
        if (c->flags & ~LT_STREAM_F_KNOWN)
            rc =
                cx__refuse(why_p, LT_E_UNKNOWN_FLAGS, "STREAM_CREATE: unknown flags %#x", c->flags);
        else if (o->live_streams + o->pending_creates >= x->ex.max_streams)
            rc = cx__refuse(why_p, LT_E_LIMIT,
                            "STREAM_CREATE: stream limit reached (%" PRIu32 " of %" PRIu32 ")",
                            o->live_streams + o->pending_creates, x->ex.max_streams);
        else
            o->pending_creates++;
        break;
    case LT_MSG_STREAM_VALIDATE:
        rc = cx__xs_resolve(x, o, c->stream, &cmd->xs, why_p);
        answer_now = rc == 0;
        break;
    case LT_MSG_STREAM_DESTROY:
        if (lt_stream_id_is_default(c->stream)) {
            rc = cx__refuse(why_p, LT_E_BAD_ID,
                            "STREAM_DESTROY: the default stream cannot be destroyed");
            break;
        }
        rc = cx__xs_resolve(x, o, c->stream, &cmd->xs, why_p);
        if (rc == 0) {
            cmd->xs->destroyed = true; /* later requests naming it are refused as stale */
            o->live_streams--;
        }
        break;
    case LT_MSG_STREAM_QUERY:
    case LT_MSG_STREAM_SYNCHRONIZE:
    case LT_MSG_EVENT_WAIT:
        rc = cx__xs_resolve(x, o, c->stream, &cmd->xs, why_p);
        break;
    case LT_MSG_EVENT_RECORD:
        if (lt_event_id_is_null(c->event) ? (c->flags & ~LT_EVENT_F_KNOWN) != 0 : c->flags != 0) {
            rc = cx__refuse(why_p, LT_E_UNKNOWN_FLAGS,
                            "EVENT_RECORD: flags %#x (only TIMING, and only for a new event)",
                            c->flags);
            break;
        }
        rc = cx__xs_resolve(x, o, c->stream, &cmd->xs, why_p);
        break;
    default: /* events and the device: resolved in order, on the worker */
        break;
    }
    if (rc < 0 || answer_now)
        goto out;
    if ((rc = cx__push(x, o, cmd)) < 0) {
        if (c->type == LT_MSG_STREAM_CREATE)
            o->pending_creates--;
        rc = cx__refuse(why_p, LT_E_SYSTEM, "%s: the worker pool refused it",
                        lt_msg_type_name(c->type));
        goto out;
    }
    x->ninflight++;
    x->st.ctl++;
out:
    pthread_mutex_unlock(&x->mu);
    if (rc < 0 || answer_now)
        free(cmd);
    if (answer_now) {
        struct ga_exec_ctl_result r = {.type = c->type, .status = LT_OK};
        c->done_cb(c->arg, &r);
    }
    return rc;
}

static int cx_client_stats(void *ctx, uint64_t owner, struct ga_exec_client_stats *stats_p)
{
    struct cx *x = ctx;
    int rc = -ENOENT;
    pthread_mutex_lock(&x->mu);
    struct cx_owner *o = cx__owner_find(x, owner);
    if (o && !o->dropped) {
        *stats_p = (struct ga_exec_client_stats){
            .streams = o->live_streams,
            .events = o->live_events,
            .queued = o->queued,
            .submitted = o->submitted,
            .completed = o->completed,
        };
        rc = 0;
    }
    pthread_mutex_unlock(&x->mu);
    return rc;
}

static int cx_stats_format(void *ctx, char *buf, size_t len)
{
    struct cx *x = ctx;
    pthread_mutex_lock(&x->mu);
    struct cx_stats s = x->st;
    uint64_t owners = 0, inflight = x->ninflight;
    for (struct cx_owner *o = x->owners; o; o = o->next)
        owners++;
    uint32_t slots_used = x->nresult - x->nfree;
    bool faulted = x->faulted;
    pthread_mutex_unlock(&x->mu);
    struct ga_streams_stats ss = {0};
    ga_streams_stats_get(x->streams, &ss);
    struct ga_pool_stats ps = {0};
    ga_pool_stats_get(x->pool, &ps);
    return snprintf(
        buf, len,
        "cuda executor: clients=%" PRIu64 " in_flight=%" PRIu64 " submitted=%" PRIu64
        " completed=%" PRIu64 " cancelled=%" PRIu64 " failed=%" PRIu64 " ctl=%" PRIu64
        " bell_waits=%" PRIu64 " done_words=%" PRIu64 " result_slots=%" PRIu32 "/%" PRIu32 "%s\n"
        "cuda executor paths: pinned %" PRIu64 " submits %" PRIu64
        " bytes, mapped (zero-copy) %" PRIu64 " submits %" PRIu64
        " bytes, staged (slow path, bounce copies) %" PRIu64 " submits %" PRIu64 " bytes\n"
        "cuda executor streams: %" PRIu32 "/%" PRIu32 " events %" PRIu32 "/%" PRIu32
        " completions pending %" PRIu64 " run %" PRIu64 "; pool %" PRIu32 " workers (%" PRIu32
        " used), %" PRIu64 " jobs\n",
        owners, inflight, s.submitted, s.completed, s.cancelled, s.failed, s.ctl, s.bell_waits,
        s.done_words, slots_used, x->nresult, faulted ? " FAULTED" : "",
        s.path_submits[CX_PATH_PINNED], s.path_bytes[CX_PATH_PINNED],
        s.path_submits[CX_PATH_MAPPED], s.path_bytes[CX_PATH_MAPPED],
        s.path_submits[CX_PATH_STAGED], s.path_bytes[CX_PATH_STAGED], ss.streams, ss.max_streams,
        ss.events, ss.max_events, ss.completions_pending, ss.completions_run, ps.threads,
        ps.threads_used, ps.completed);
}

static void cx_shutdown(void *ctx)
{
    struct cx *x = ctx;
    pthread_mutex_lock(&x->mu);
    if (x->shut) {
        pthread_mutex_unlock(&x->mu);
        return;
    }
    x->stopping = true;
    for (struct cx_owner *o = x->owners; o; o = o->next)
        if (!o->dropped)
            cx__owner_cancel(x, o);
    /* Every command is answered: by its completion, as cancelled, or by
     * the fault path. */
    while (x->ninflight > 0)
        pthread_cond_wait(&x->idle_cv, &x->mu);
    x->shut = true;
    pthread_cond_broadcast(&x->mon_cv);
    pthread_mutex_unlock(&x->mu);
    if (x->mon_started) {
        pthread_join(x->mon, NULL);
        x->mon_started = false;
    }
}

static void cx_destroy(void *ctx)
{
    struct cx *x = ctx;
    cx_shutdown(x);
    /* Queued serving jobs (the drops) run first, then every stream's work
     * and completion (stream releases too). */
    ga_pool_destroy(x->pool);
    ga_streams_destroy(x->streams);
    if (ga_device_make_current(x->dev) == 0) {
        if (x->mon_stream)
            GA_CU(cuStreamDestroy(x->mon_stream));
        if (!x->faulted) {
            for (struct cx_scratch *sc = x->scratch_all; sc; sc = sc->next)
                GA_CU(cuMemFreeHost(sc->host));
            if (x->results)
                GA_CU(cuMemFreeHost(x->results));
        }
    }
    for (struct cx_scratch *sc = x->scratch_all, *n; sc; sc = n) {
        n = sc->next;
        free(sc);
    }
    /* After a fault, owners whose streams never drained are left here. */
    while (x->owners) {
        struct cx_owner *o = x->owners;
        x->owners = o->next;
        free(o->drop_cmd);
        free(o);
    }
    free(x->by_slot);
    free(x->free_slots);
    pthread_cond_destroy(&x->mon_cv);
    pthread_cond_destroy(&x->idle_cv);
    pthread_mutex_destroy(&x->mu);
    free(x);
}

static const struct ga_executor_ops cx_ops = {
    .client_add = cx_client_add,
    .client_drop = cx_client_drop,
    .submit = cx_submit,
    .ctl = cx_ctl,
    .client_stats = cx_client_stats,
    .stats_format = cx_stats_format,
    .shutdown = cx_shutdown,
    .destroy = cx_destroy,
};

/* ---- creation -------------------------------------------------------------- */

/* What the executor needs from the device beyond the gate: doorbells, the
 * stream-ordered allocator, and the scan kernels. */
static int cx__device_setup(struct cx *x)
{
    struct ga_device *dev = x->dev;
    int rc = ga_doorbell_check(dev);
    if (rc < 0)
        return rc;
    int pools = 0;
    GA_CU_GOTO(
        cuDeviceGetAttribute(&pools, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, dev->cu_device),
        rc, out);
    if (!pools) {
        ga__err(
            "CUDA executor: device %d (%s) reports CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED=0;"
            " the executor allocates device memory in stream order",
            dev->info.ordinal, dev->info.name);
        return -ENOTSUP;
    }
    /* Freed device memory stays with the pool up to this much, so a submit's
     * allocation is normally a reuse, not a call into the OS. */
    CUmemoryPool mp;
    cuuint64_t thr = CX_POOL_RELEASE_THRESHOLD;
    GA_CU_GOTO(cuDeviceGetDefaultMemPool(&mp, dev->cu_device), rc, out);
    GA_CU_GOTO(cuMemPoolSetAttribute(mp, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr), rc, out);
    GA_CU_GOTO(
        cuDeviceGetAttribute(&x->sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev->cu_device), rc,
        out);
    x->k_verify = dev->k_block_verify;
    if (ga__kernel_find(dev, KN_SCAN_IMAGE, KN_K_SCAN_F32, &x->k_scan[KN_SCAN_F32]) < 0 ||
        ga__kernel_find(dev, KN_SCAN_IMAGE, KN_K_SCAN_F16, &x->k_scan[KN_SCAN_F16]) < 0 ||
        ga__kernel_find(dev, KN_SCAN_IMAGE, KN_K_SCAN_REDUCE, &x->k_reduce) < 0 || !x->k_verify) {
        ga__err("CUDA executor: the loaded images lack a kernel it needs (%s, %s, %s, %s)",
                KN_K_BLOCK_VERIFY, KN_K_SCAN_F32, KN_K_SCAN_F16, KN_K_SCAN_REDUCE);
        return -ENOEXEC;
    }
    GA_CU_GOTO(cuStreamCreate(&x->mon_stream, CU_STREAM_NON_BLOCKING), rc, out);
    void *results = NULL;
    GA_CU_GOTO(cuMemHostAlloc(&results, (size_t)x->nresult * CX_RESULT_SLOT_BYTES, 0), rc, out);
    x->results = results;
out:
    return rc;
}

int ga_executor_cuda_create(struct ga_device *dev, const struct ga_executor_cuda_opts *opts,
                            struct ga_executor **ex_p)
{
    struct ga_executor_cuda_opts o = opts ? *opts : (struct ga_executor_cuda_opts){0};
    if (!dev || !ex_p || o.workers > GA_POOL_MAX_THREADS || o.chunk_bytes % 4096 != 0 ||
        o.result_slots > CX_SLOTS_MAX || o.table_streams > GA_STREAMS_LIMIT ||
        o.table_events > GA_STREAMS_LIMIT) {
        ga__err("CUDA executor: expected a device, a result pointer, at most %u workers, a chunk "
                "that is a multiple of 4096, at most %u result slots and %u table entries; found "
                "workers %u chunk %" PRIu64 " slots %u streams %u events %u",
                GA_POOL_MAX_THREADS, CX_SLOTS_MAX, GA_STREAMS_LIMIT, o.workers, o.chunk_bytes,
                o.result_slots, o.table_streams, o.table_events);
        return -EINVAL;
    }
    struct cx *x = calloc(1, sizeof(*x));
    if (!x)
        return -ENOMEM;
    x->dev = dev;
    x->ex = (struct ga_executor){
        .name = "cuda",
        .ops = &cx_ops,
        .ctx = x,
        .caps = LT_CAP_DOORBELL | LT_CAP_DONE_WORD | LT_CAP_TIMING,
        .max_streams = o.max_streams ? o.max_streams : CX_STREAMS_DEFAULT,
        .max_events = o.max_events ? o.max_events : CX_EVENTS_DEFAULT,
    };
    x->chunk = o.chunk_bytes ? o.chunk_bytes : CX_CHUNK_DEFAULT;
    x->nresult = o.result_slots ? o.result_slots : CX_SLOTS_DEFAULT;
    x->on_fault = o.on_fault;
    x->fault_arg = o.fault_arg;
    struct ga_streams_opts so = {
        .max_streams = o.table_streams ? o.table_streams : CX_TABLE_STREAMS_DEFAULT,
        .max_events = o.table_events ? o.table_events : CX_TABLE_EVENTS_DEFAULT,
    };
    x->nslots = so.max_streams + 1;

    int rc = -pthread_mutex_init(&x->mu, NULL);
    if (rc < 0)
        goto fail_free;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    rc = -pthread_cond_init(&x->mon_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc < 0)
        goto fail_mutex;
    if ((rc = -pthread_cond_init(&x->idle_cv, NULL)) < 0)
        goto fail_mon_cv;
    x->by_slot = calloc(x->nslots, sizeof(*x->by_slot));
    x->free_slots = calloc(x->nresult, sizeof(*x->free_slots));
    if (!x->by_slot || !x->free_slots) {
        rc = -ENOMEM;
        goto fail_arrays;
    }
    for (uint32_t i = 0; i < x->nresult; i++)
        x->free_slots[i] = x->nresult - 1 - i;
    x->nfree = x->nresult;
    if ((rc = ga_device_make_current(dev)) < 0 || (rc = cx__device_setup(x)) < 0)
        goto fail_device;
    if ((rc = ga_streams_create(dev, &so, &x->streams)) < 0)
        goto fail_device;
    struct ga_pool_opts po = {.threads = o.workers};
    if ((rc = ga_pool_create(dev, &po, &x->pool)) < 0)
        goto fail_streams;
    if ((rc = -pthread_create(&x->mon, NULL, cx__monitor_main, x)) < 0)
        goto fail_pool;
    x->mon_started = true;
    ga__info("CUDA executor: device %d %s (sm_%u), %u workers, chunks of %" PRIu64
             " bytes, %u result slots, %u streams and %u events in the table",
             dev->info.ordinal, dev->info.name, dev->info.arch,
             po.threads ? po.threads : GA_POOL_DEFAULT_THREADS, x->chunk, x->nresult,
             so.max_streams, so.max_events);
    *ex_p = &x->ex;
    return 0;

fail_pool:
    ga_pool_destroy(x->pool);
fail_streams:
    ga_streams_destroy(x->streams);
fail_device:
    if (x->mon_stream)
        GA_CU(cuStreamDestroy(x->mon_stream));
    if (x->results)
        GA_CU(cuMemFreeHost(x->results));
fail_arrays:
    free(x->by_slot);
    free(x->free_slots);
    pthread_cond_destroy(&x->idle_cv);
fail_mon_cv:
    pthread_cond_destroy(&x->mon_cv);
fail_mutex:
    pthread_mutex_destroy(&x->mu);
fail_free:
    free(x);
    return rc;
}
