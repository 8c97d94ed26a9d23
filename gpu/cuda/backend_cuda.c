/* The CUDA backend (gpu/executor_cuda.h): the agent's work on a real device,
 * behind the executor front's backend table (gpu/exec_backend.h;
 * docs/agent.md, "The CUDA executor"). The front owns the ids, limits and
 * refusals; this file owns the CUDA objects behind them, each owner's
 * command queue, completions and device faults.
 *
 * Threads:
 * - the caller (the server's loop, through the front): checks a request,
 *   queues it on its owner's FIFO and schedules that FIFO on the pool. No
 *   CUDA call.
 * - pool workers (ga_pool, primary context current): serve one owner's
 *   FIFO at a time, in order, issuing every request as asynchronous CUDA
 *   work (copies, kernels, doorbell waits, done words, event records) and a
 *   completion behind it (ga_stream_when_done). Nothing there waits for the
 *   GPU, so a doorbell nobody rings holds no thread. Streams and events are
 *   made here, on first need.
 * - the driver's callback thread: the completion hops, and the bounce
 *   copies of STAGED leases (ops_cuda.c).
 * - the ga_streams completion thread: reads results from the pinned arena
 *   and answers the front; releases streams whose work is done.
 * - the monitor: while work is in flight, polls for a sticky device error
 *   every CX_MONITOR_MS and then answers everything LT_E_GPU_FAULT.
 * One FIFO per owner keeps an owner's requests in the order it sent them,
 * across its streams, as one host thread's CUDA calls would be; a stream's
 * or event's close and the owner's drop travel the same FIFO, so they run
 * after every request that named them. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cuda.h"
#include "base/time.h"
#include "cu_call.h"
#include "device_internal.h"
#include "kernels/checksum.h"
#include "kernels/scan.h"
#include "lease_types/validate.h"

#define CX_STREAMS_DEFAULT 64u
#define CX_EVENTS_DEFAULT 1024u
#define CX_TABLE_STREAMS_DEFAULT 4096u
#define CX_TABLE_EVENTS_DEFAULT 16384u
#define CX_TABLE_MAX (1u << 20)
#define CX_CHUNK_DEFAULT (64ull << 20)
#define CX_SLOTS_DEFAULT 16384u
#define CX_SLOTS_MAX (1u << 20)
#define CX_SERVE_BATCH 64u
#define CX_MONITOR_MS 100
#define CX_POOL_RELEASE_THRESHOLD (2ull << 30)

static const char *const cx__ctl_names[] = {
    [CX_STREAM_QUERY] = "STREAM_QUERY",   [CX_STREAM_SYNC] = "STREAM_SYNCHRONIZE",
    [CX_EVENT_RECORD] = "EVENT_RECORD",   [CX_EVENT_WAIT] = "EVENT_WAIT",
    [CX_EVENT_QUERY] = "EVENT_QUERY",     [CX_EVENT_SYNC] = "EVENT_SYNCHRONIZE",
    [CX_EVENT_ELAPSED] = "EVENT_ELAPSED", [CX_DEVICE_SYNC] = "DEVICE_SYNCHRONIZE",
};

/* ---- owners (locked) -------------------------------------------------------- */

static void cx__owner_unref(struct cx *x, struct cx_owner *o)
{
    if (--o->refs != 0)
        return;
    if (o->prev)
        o->prev->next = o->next;
    else
        x->owners = o->next;
    if (o->next)
        o->next->prev = o->prev;
    free(o->drop_cmd); /* NULL once the drop was queued */
    free(o);
}

/* ---- the FIFO ---------------------------------------------------------------- */

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

/* One answer fewer to wait for. Locked. */
static void cx__answered(struct cx *x)
{
    if (--x->ninflight == 0)
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
 * result is read from its slot otherwise). For a command, @a (may be NULL)
 * holds what it found. Returns false when it was answered already (by the
 * fault path). */
static bool cx__cmd_answer(struct cx *x, struct cx_cmd *cmd, uint32_t status, const char *why,
                           const struct ga_exec_answer *a)
{
    pthread_mutex_lock(&x->mu);
    if (cmd->state) {
        pthread_mutex_unlock(&x->mu);
        return false;
    }
    cmd->state = 1;
    cx__inflight_del(x, cmd);
    pthread_mutex_unlock(&x->mu);
    if (cmd->kind == CX_WORK) {
        struct ga_exec_result res;
        if (status == LT_OK) {
            cx__op_result(x, cmd, &res);
        } else {
            memset(&res, 0, sizeof res);
            res.status = status;
        }
        ga_exec_job_done(cmd->job, &res);
    } else {
        char words[LT_ERROR_MSG_LEN];
        struct ga_exec_answer ans = a ? *a : (struct ga_exec_answer){0};
        ans.status = status;
        if (status != LT_OK) {
            snprintf(words, sizeof words, "%s: %s", cx__ctl_names[cmd->ctl],
                     why ? why : lt_error_describe(status));
            ans.message = words;
        }
        ga_exec_call_done(cmd->call, &ans);
    }
    pthread_mutex_lock(&x->mu);
    cx__answered(x);
    pthread_mutex_unlock(&x->mu);
    return true;
}

/* ---- faults ------------------------------------------------------------------ */

/* The context is unusable: answer everything on the GPU now (nothing there
 * will complete) and tell the front and the agent. Commands stay allocated:
 * a completion that still fired must find them. */
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
    ga_exec_backend_fault(x->front, x->fault_err);
    for (struct cx_cmd *cmd = list; cmd; cmd = cmd->inext) {
        if (cmd->kind == CX_WORK) {
            struct ga_exec_result res = {.status = LT_E_GPU_FAULT};
            ga_exec_job_done(cmd->job, &res);
        } else {
            char words[LT_ERROR_MSG_LEN];
            snprintf(words, sizeof words, "%s: the GPU faulted", cx__ctl_names[cmd->ctl]);
            struct ga_exec_answer a = {.status = LT_E_GPU_FAULT, .message = words};
            ga_exec_call_done(cmd->call, &a);
        }
        pthread_mutex_lock(&x->mu);
        cx__answered(x);
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
        struct timespec until = base_deadline_ns((uint64_t)CX_MONITOR_MS * 1000000u);
        pthread_cond_timedwait(&x->mon_cv, &x->mu, &until);
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

/* ---- CUDA objects (on a worker) ------------------------------------------------ */

/* The CUDA stream behind @xs, made on its first use. */
static int cx__xs_ensure(struct cx *x, struct cx_xs *xs)
{
    return xs->st ? 0 : ga_stream_new(x->streams, &xs->st);
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
    ga_stream_free(x->streams, xs->st);
    pthread_mutex_lock(&x->mu);
    if (xs->scratch) {
        xs->scratch->next = x->scratch_free;
        x->scratch_free = xs->scratch;
    }
    struct cx_owner *o = xs->o;
    for (struct cx_xs **pp = &o->streams; *pp; pp = &(*pp)->onext)
        if (*pp == xs) {
            *pp = xs->onext;
            break;
        }
    cx__owner_unref(x, o);
    pthread_mutex_unlock(&x->mu);
    free(xs->close_cmd); /* NULL once the close was queued */
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
    if (!xs->st || ga_stream_when_done(x->streams, xs->st, cx__xs_release, xs) < 0)
        cx__xs_release(xs); /* nothing queued, or the device is gone */
}

/* The CUDA event behind @ev, made at its first record. */
static int cx__ev_ensure(struct cx *x, struct cx_ev *ev)
{
    return ev->ev ? 0
                  : ga_event_new(x->streams, (ev->flags & LT_EVENT_F_TIMING) ? GA_EVENT_TIMING : 0u,
                                 &ev->ev);
}

/* The front retired @ev (or its owner went): its record still completes. */
static void cx__ev_free(struct cx *x, struct cx_ev *ev)
{
    struct cx_owner *o = ev->o;
    pthread_mutex_lock(&x->mu);
    for (struct cx_ev **pp = &o->events; *pp; pp = &(*pp)->onext)
        if (*pp == ev) {
            *pp = ev->onext;
            break;
        }
    pthread_mutex_unlock(&x->mu);
    ga_event_free(x->streams, ev->ev);
    free(ev->close_cmd);
    free(ev);
}

/* ---- issuing commands (on a worker) ------------------------------------------- */

static int cx__work_fn(void *arg, struct CUstream_st *st)
{
    struct cx_cmd *cmd = arg;
    return cx__op_queue(cmd->x, cmd, st);
}

/* On the completion thread: the GPU passed the command. */
static void cx__complete(void *arg)
{
    struct cx_cmd *cmd = arg;
    struct cx *x = cmd->x;
    if (cx__cmd_answer(x, cmd, LT_OK, NULL, NULL))
        cx__cmd_free(x, cmd);
}

/* Queues @cmd's completion behind what @st holds; when that cannot be
 * queued the stream's state is unknown: treat it as a fault if the device
 * says so, else answer now with the error. */
static void cx__complete_behind(struct cx *x, struct cx_cmd *cmd, CUstream st)
{
    int rc = ga_stream_when_done(x->streams, st, cx__complete, cmd);
    if (rc == 0)
        return;
    if (rc == -EIO || rc == -ENODEV) {
        cx__fault(x, rc);
        return;
    }
    if (cx__cmd_answer(x, cmd, LT_E_SYSTEM, "the completion could not be queued", NULL))
        cx__cmd_free(x, cmd);
}

static void cx__work_issue(struct cx *x, struct cx_cmd *cmd)
{
    struct cx_xs *xs = cmd->xs;
    struct ga_exec_work *w = &cmd->w;
    int rc = cx__xs_ensure(x, xs);
    if (rc < 0) {
        if (cx__cmd_answer(x, cmd, LT_E_SYSTEM, "the stream could not be created", NULL))
            cx__cmd_free(x, cmd);
        return;
    }
    if (w->bell.host) {
        struct ga_doorbell_req req = {
            .bell_dev = w->bell.dev, .seq = w->bell.seq, .work = cx__work_fn, .work_arg = cmd};
        rc = ga_doorbell_queue(x->streams, xs->st, &req);
    } else {
        rc = cx__op_queue(x, cmd, xs->st);
    }
    if (rc == 0 && w->done.host)
        rc = ga_doorbell_signal(x->streams, xs->st, w->done.dev, w->done.seq);
    if (rc < 0)
        ga__err("CUDA executor: client %#" PRIx64 ": %s could not be queued (%s); it completes "
                "with an error once the stream passes what was queued",
                cmd->o->id,
                w->op == LT_OP_CHECKSUM_VERIFY ? "CHECKSUM_VERIFY"
                : w->op == LT_OP_VECTOR_SCAN   ? "VECTOR_SCAN"
                                               : "COPY_H2D",
                strerror(-rc));
    cmd->rc = rc;
    cx__complete_behind(x, cmd, xs->st);
}

/* The internal stream EVENT_SYNCHRONIZE and DEVICE_SYNCHRONIZE wait on;
 * read and written by the serving worker only. */
static int cx__sync_stream(struct cx *x, struct cx_owner *o)
{
    return o->sync ? 0 : ga_stream_new(x->streams, &o->sync);
}

/* DEVICE_SYNCHRONIZE: the sync stream waits for every stream of the owner,
 * then its completion answers. Other owners' work is not waited for. */
static int cx__device_sync(struct cx *x, struct cx_owner *o)
{
    int rc = cx__sync_stream(x, o);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&x->mu);
    uint32_t n = 0;
    for (struct cx_xs *xs = o->streams; xs; xs = xs->onext)
        n++;
    struct cx_xs **v = calloc(n ? n : 1, sizeof(*v));
    n = 0;
    for (struct cx_xs *xs = o->streams; v && xs; xs = xs->onext)
        if (xs->st && !xs->releasing)
            v[n++] = xs;
    pthread_mutex_unlock(&x->mu);
    if (!v)
        rc = -ENOMEM;
    for (uint32_t i = 0; rc == 0 && i < n; i++) {
        if ((rc = cx__xs_prepare(x, v[i], false)) < 0)
            break;
        rc = GA_CU(cuEventRecord(v[i]->evf, v[i]->st));
        if (rc == 0)
            rc = GA_CU(cuStreamWaitEvent(o->sync, v[i]->evf, CU_EVENT_WAIT_DEFAULT));
    }
    free(v);
    return rc;
}

static void cx__ctl_issue(struct cx *x, struct cx_cmd *cmd)
{
    struct cx_owner *o = cmd->o;
    struct ga_exec_answer a = {.status = LT_OK};
    char why[LT_ERROR_MSG_LEN] = "";
    uint32_t code = 0;
    int rc = 0;
    CUstream behind = NULL; /* answered by a completion behind this stream */
    switch (cmd->ctl) {
    case CX_STREAM_QUERY:
        rc = cmd->xs->st ? ga_stream_query(x->streams, cmd->xs->st) : 1;
        if (rc >= 0) {
            a.ready = (uint32_t)rc;
            rc = 0;
        }
        break;
    case CX_STREAM_SYNC:
        behind = cmd->xs->st;
        break;
    case CX_EVENT_RECORD:
        if ((rc = cx__xs_ensure(x, cmd->xs)) == 0 && (rc = cx__ev_ensure(x, cmd->ev)) == 0)
            rc = ga_event_record(x->streams, cmd->ev->ev, cmd->xs->st);
        break;
    case CX_EVENT_WAIT:
        /* An event never recorded is complete: waiting for it is a no-op. */
        if (cmd->ev->ev && (rc = cx__xs_ensure(x, cmd->xs)) == 0)
            rc = ga_event_wait(x->streams, cmd->xs->st, cmd->ev->ev);
        break;
    case CX_EVENT_QUERY:
        rc = cmd->ev->ev ? ga_event_query(x->streams, cmd->ev->ev) : 1;
        if (rc >= 0) {
            a.ready = (uint32_t)rc;
            rc = 0;
        }
        break;
    case CX_EVENT_SYNC:
        if (cmd->ev->ev && (rc = cx__sync_stream(x, o)) == 0 &&
            (rc = ga_event_wait(x->streams, o->sync, cmd->ev->ev)) == 0)
            behind = o->sync;
        break;
    case CX_EVENT_ELAPSED:
        if (!cmd->ev->ev || !cmd->ev2->ev) {
            code = LT_E_BUSY;
            snprintf(why, sizeof why, "expected both events recorded, found the %s never recorded",
                     !cmd->ev->ev ? "start" : "end");
            break;
        }
        rc = ga_event_elapsed(x->streams, cmd->ev->ev, cmd->ev2->ev, &a.elapsed_ms);
        if (rc == -EAGAIN) {
            code = LT_E_BUSY;
            snprintf(why, sizeof why, "expected both events complete, found one pending");
        }
        break;
    case CX_DEVICE_SYNC:
        if ((rc = cx__device_sync(x, o)) == 0)
            behind = o->sync;
        break;
    }
    if (rc < 0 || code) {
        if (rc == -EIO)
            cx__fault(x, rc);
        if (!why[0])
            snprintf(why, sizeof why, "%s", strerror(-rc));
        if (cx__cmd_answer(x, cmd, code ? code : lt_error_from_errno(rc), why, NULL))
            cx__cmd_free(x, cmd);
        return;
    }
    if (behind) {
        cx__complete_behind(x, cmd, behind);
        return;
    }
    if (cx__cmd_answer(x, cmd, LT_OK, NULL, &a))
        cx__cmd_free(x, cmd);
}

/* A dropped owner: its streams are released behind their work, its events
 * freed (a pending record still completes), then the front's reference. */
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
    while (o->events)
        cx__ev_free(x, o->events);
    ga_stream_free(x->streams, o->sync);
    o->sync = NULL;
    pthread_mutex_lock(&x->mu);
    cx__owner_unref(x, o); /* the front's reference */
    pthread_mutex_unlock(&x->mu);
}

/* A pool job: issues up to CX_SERVE_BATCH commands of one owner in order,
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
        if (cmd->kind == CX_DROP || cmd->kind == CX_STREAM_CLOSE || cmd->kind == CX_EVENT_CLOSE) {
            pthread_mutex_unlock(&x->mu);
            if (cmd->kind == CX_DROP) {
                free(cmd);
                cx__drop_issue(x, o);
            } else if (cmd->kind == CX_STREAM_CLOSE) {
                cmd->xs->close_cmd = NULL;
                cx__xs_retire(x, cmd->xs);
                free(cmd);
            } else {
                cmd->ev->close_cmd = NULL;
                cx__ev_free(x, cmd->ev);
                free(cmd);
            }
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
            if (cx__cmd_answer(x, cmd, status, "cancelled before it reached the GPU", NULL))
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

/* ---- the backend table ------------------------------------------------------- */

static int cx_work_check(void *ctx, const struct ga_exec_work *w, struct lt_failure *why_p)
{
    struct cx *x = ctx;
    if ((w->bell.host && w->bell.dev == 0) || (w->done.host && w->done.dev == 0))
        return lt_failure_set(why_p, LT_E_BAD_VALUE, 0,
                              "submit: a bell or done word needs a registered device address");
    struct cx_cmd probe = {.w = *w};
    uint32_t code = LT_OK;
    char msg[LT_ERROR_MSG_LEN];
    if (cx__op_plan(x, &probe, &code, msg, sizeof msg) < 0)
        return lt_failure_set(why_p, code, 0, "%s", msg);
    return 0;
}

static int cx_owner_open(void *ctx, uint64_t owner, void **bo_p)
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
    o->refs = 1; /* the front's, until the drop has run */
    drop->kind = CX_DROP;
    drop->slot = UINT32_MAX;
    o->drop_cmd = drop;
    pthread_mutex_lock(&x->mu);
    o->next = x->owners;
    if (x->owners)
        x->owners->prev = o;
    x->owners = o;
    pthread_mutex_unlock(&x->mu);
    *bo_p = o;
    return 0;
}

/* Locked. The owner is gone: its bells still waited for are rung by the
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
        /* No worker will take it: what is left goes at destroy. */
        ga__err("CUDA executor: client %#" PRIx64 ": the pool refused the drop", o->id);
        free(drop);
    }
}

static void cx_owner_drop(void *ctx, void *bo)
{
    struct cx *x = ctx;
    pthread_mutex_lock(&x->mu);
    cx__owner_cancel(x, bo);
    pthread_mutex_unlock(&x->mu);
}

static int cx_stream_open(void *ctx, void *bo, uint32_t flags, void **bs_p)
{
    struct cx *x = ctx;
    struct cx_owner *o = bo;
    struct cx_xs *xs = calloc(1, sizeof(*xs));
    struct cx_cmd *close = calloc(1, sizeof(*close));
    if (!xs || !close) {
        free(xs);
        free(close);
        return -ENOMEM;
    }
    close->kind = CX_STREAM_CLOSE;
    close->slot = UINT32_MAX;
    close->xs = xs;
    xs->o = o;
    xs->flags = flags;
    xs->close_cmd = close;
    pthread_mutex_lock(&x->mu);
    xs->onext = o->streams;
    o->streams = xs;
    o->refs++;
    pthread_mutex_unlock(&x->mu);
    *bs_p = xs;
    return 0;
}

static void cx_stream_close(void *ctx, void *bs)
{
    struct cx *x = ctx;
    struct cx_xs *xs = bs;
    pthread_mutex_lock(&x->mu);
    struct cx_cmd *close = xs->close_cmd;
    int rc = cx__push(x, xs->o, close);
    pthread_mutex_unlock(&x->mu);
    if (rc < 0)
        ga__err("CUDA executor: client %#" PRIx64 ": the pool refused a stream's release; it "
                "goes with the client",
                xs->o->id);
}

static int cx_event_open(void *ctx, void *bo, uint32_t flags, void **bev_p)
{
    struct cx *x = ctx;
    struct cx_owner *o = bo;
    struct cx_ev *ev = calloc(1, sizeof(*ev));
    struct cx_cmd *close = calloc(1, sizeof(*close));
    if (!ev || !close) {
        free(ev);
        free(close);
        return -ENOMEM;
    }
    close->kind = CX_EVENT_CLOSE;
    close->slot = UINT32_MAX;
    close->ev = ev;
    ev->o = o;
    ev->flags = flags;
    ev->close_cmd = close;
    pthread_mutex_lock(&x->mu);
    ev->onext = o->events;
    o->events = ev;
    pthread_mutex_unlock(&x->mu);
    *bev_p = ev;
    return 0;
}

static void cx_event_close(void *ctx, void *bev)
{
    struct cx *x = ctx;
    struct cx_ev *ev = bev;
    pthread_mutex_lock(&x->mu);
    int rc = cx__push(x, ev->o, ev->close_cmd);
    pthread_mutex_unlock(&x->mu);
    if (rc < 0)
        ga__err("CUDA executor: client %#" PRIx64 ": the pool refused an event's release; it "
                "goes with the client",
                ev->o->id);
}

static int cx_work_enqueue(void *ctx, void *bs, struct ga_exec_job *job, struct lt_failure *why_p)
{
    struct cx *x = ctx;
    struct cx_xs *xs = bs;
    const struct ga_exec_work *w = ga_exec_job_work(job);
    struct cx_cmd *cmd = calloc(1, sizeof(*cmd));
    if (!cmd)
        return lt_failure_set(why_p, LT_E_SYSTEM, 0, "submit: out of memory");
    cmd->kind = CX_WORK;
    cmd->job = job;
    cmd->w = *w;
    cmd->xs = xs;
    cmd->slot = UINT32_MAX;
    uint32_t code = LT_OK;
    char msg[LT_ERROR_MSG_LEN];
    if (cx__op_plan(x, cmd, &code, msg, sizeof msg) < 0) {
        free(cmd);
        return lt_failure_set(why_p, code, 0, "%s", msg);
    }
    int rc = 0;
    pthread_mutex_lock(&x->mu);
    if (w->op != LT_OP_COPY_H2D) {
        if (x->nfree == 0)
            rc = lt_failure_set(
                why_p, LT_E_LIMIT, 0,
                "%" PRIu32 " checksum and scan submits in flight, the agent's limit", x->nresult);
        else
            cmd->slot = x->free_slots[--x->nfree];
    }
    if (rc == 0 && (rc = cx__push(x, xs->o, cmd)) < 0)
        rc = lt_failure_set(why_p, LT_E_SYSTEM, 0, "submit: the worker pool refused the work (%s)",
                            strerror(-rc));
    if (rc == 0) {
        x->ninflight++;
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

/* Queues a command of @o, answered once the worker has issued it. */
static int cx__ctl_push(struct cx *x, struct cx_owner *o, enum cx_ctl ctl, struct cx_xs *xs,
                        struct cx_ev *ev, struct cx_ev *ev2, struct ga_exec_call *call,
                        struct lt_failure *why)
{
    struct cx_cmd *cmd = calloc(1, sizeof(*cmd));
    if (!cmd)
        return lt_failure_set(why, LT_E_SYSTEM, 0, "%s: out of memory", cx__ctl_names[ctl]);
    cmd->kind = CX_CTL;
    cmd->ctl = ctl;
    cmd->slot = UINT32_MAX;
    cmd->xs = xs;
    cmd->ev = ev;
    cmd->ev2 = ev2;
    cmd->call = call;
    pthread_mutex_lock(&x->mu);
    int rc = cx__push(x, o, cmd);
    if (rc == 0)
        x->ninflight++;
    pthread_mutex_unlock(&x->mu);
    if (rc < 0) {
        free(cmd);
        return lt_failure_set(why, LT_E_SYSTEM, 0, "%s: the worker pool refused it",
                              cx__ctl_names[ctl]);
    }
    return 0;
}

static int cx_stream_query(void *ctx, void *bs, struct ga_exec_call *call, struct lt_failure *why)
{
    struct cx_xs *xs = bs;
    return cx__ctl_push(ctx, xs->o, CX_STREAM_QUERY, xs, NULL, NULL, call, why);
}

static int cx_stream_sync(void *ctx, void *bs, struct ga_exec_call *call, struct lt_failure *why)
{
    struct cx_xs *xs = bs;
    return cx__ctl_push(ctx, xs->o, CX_STREAM_SYNC, xs, NULL, NULL, call, why);
}

static int cx_event_record(void *ctx, void *bs, void *bev, struct ga_exec_call *call,
                           struct lt_failure *why)
{
    struct cx_xs *xs = bs;
    return cx__ctl_push(ctx, xs->o, CX_EVENT_RECORD, xs, bev, NULL, call, why);
}

static int cx_event_wait(void *ctx, void *bs, void *bev, struct ga_exec_call *call,
                         struct lt_failure *why)
{
    struct cx_xs *xs = bs;
    return cx__ctl_push(ctx, xs->o, CX_EVENT_WAIT, xs, bev, NULL, call, why);
}

static int cx_event_query(void *ctx, void *bev, struct ga_exec_call *call, struct lt_failure *why)
{
    struct cx_ev *ev = bev;
    return cx__ctl_push(ctx, ev->o, CX_EVENT_QUERY, NULL, ev, NULL, call, why);
}

static int cx_event_sync(void *ctx, void *bev, struct ga_exec_call *call, struct lt_failure *why)
{
    struct cx_ev *ev = bev;
    return cx__ctl_push(ctx, ev->o, CX_EVENT_SYNC, NULL, ev, NULL, call, why);
}

static int cx_event_elapsed(void *ctx, void *start, void *end, struct ga_exec_call *call,
                            struct lt_failure *why)
{
    struct cx_ev *a = start;
    return cx__ctl_push(ctx, a->o, CX_EVENT_ELAPSED, NULL, a, end, call, why);
}

static int cx_device_sync(void *ctx, void *bo, struct ga_exec_call *call, struct lt_failure *why)
{
    return cx__ctl_push(ctx, bo, CX_DEVICE_SYNC, NULL, NULL, NULL, call, why);
}

static int cx_stats_format(void *ctx, char *buf, size_t len)
{
    struct cx *x = ctx;
    pthread_mutex_lock(&x->mu);
    struct cx_stats s = x->st;
    uint32_t slots_used = x->nresult - x->nfree;
    pthread_mutex_unlock(&x->mu);
    struct ga_streams_stats ss = {0};
    ga_streams_stats_get(x->streams, &ss);
    struct ga_pool_stats ps = {0};
    ga_pool_stats_get(x->pool, &ps);
    return snprintf(
        buf, len,
        "cuda executor: bell_waits=%" PRIu64 " done_words=%" PRIu64 " result_slots=%" PRIu32
        "/%" PRIu32 "\n"
        "cuda executor paths: pinned %" PRIu64 " submits %" PRIu64
        " bytes, mapped (zero-copy) %" PRIu64 " submits %" PRIu64
        " bytes, staged (slow path, bounce copies) %" PRIu64 " submits %" PRIu64 " bytes\n"
        "cuda executor streams: %" PRIu64 " CUDA streams, %" PRIu64
        " events; completions pending %" PRIu64 " run %" PRIu64 "; pool %" PRIu32
        " workers (%" PRIu32 " used), %" PRIu64 " jobs\n",
        s.bell_waits, s.done_words, slots_used, x->nresult, s.path_submits[CX_PATH_PINNED],
        s.path_bytes[CX_PATH_PINNED], s.path_submits[CX_PATH_MAPPED], s.path_bytes[CX_PATH_MAPPED],
        s.path_submits[CX_PATH_STAGED], s.path_bytes[CX_PATH_STAGED], ss.streams, ss.events,
        ss.completions_pending, ss.completions_run, ps.threads, ps.threads_used, ps.completed);
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
    /* The front dropped every owner: every command is answered by its
     * completion, as cancelled, or by the fault path. */
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

static void cx__free(struct cx *x)
{
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
    free(x->free_slots);
    pthread_cond_destroy(&x->mon_cv);
    pthread_cond_destroy(&x->idle_cv);
    pthread_mutex_destroy(&x->mu);
    free(x);
}

static void cx_destroy(void *ctx)
{
    struct cx *x = ctx;
    cx_shutdown(x);
    /* Queued serving jobs (the drops, the closes) run first, then every
     * stream's work and completion (stream releases too). */
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
    cx__free(x);
}

static const struct ga_exec_backend_ops cx_ops = {
    .work_check = cx_work_check,
    .owner_open = cx_owner_open,
    .owner_drop = cx_owner_drop,
    .stream_open = cx_stream_open,
    .stream_close = cx_stream_close,
    .event_open = cx_event_open,
    .event_close = cx_event_close,
    .work_enqueue = cx_work_enqueue,
    .stream_query = cx_stream_query,
    .stream_sync = cx_stream_sync,
    .event_record = cx_event_record,
    .event_wait = cx_event_wait,
    .event_query = cx_event_query,
    .event_sync = cx_event_sync,
    .event_elapsed = cx_event_elapsed,
    .device_sync = cx_device_sync,
    .stats_format = cx_stats_format,
    .shutdown = cx_shutdown,
    .destroy = cx_destroy,
};

/* ---- creation ------------------------------------------------------------------ */

/* What the backend needs from the device beyond the gate: doorbells, the
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
    if (ga_device_kernel(dev, KN_SCAN_IMAGE, KN_K_SCAN_F32, &x->k_scan[KN_SCAN_F32]) < 0 ||
        ga_device_kernel(dev, KN_SCAN_IMAGE, KN_K_SCAN_F16, &x->k_scan[KN_SCAN_F16]) < 0 ||
        ga_device_kernel(dev, KN_SCAN_IMAGE, KN_K_SCAN_REDUCE, &x->k_reduce) < 0 || !x->k_verify) {
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
        o.result_slots > CX_SLOTS_MAX || o.table_streams > CX_TABLE_MAX ||
        o.table_events > CX_TABLE_MAX) {
        ga__err("CUDA executor: expected a device, a result pointer, at most %u workers, a chunk "
                "that is a multiple of 4096, at most %u result slots and %u table entries; found "
                "workers %u chunk %" PRIu64 " slots %u streams %u events %u",
                GA_POOL_MAX_THREADS, CX_SLOTS_MAX, CX_TABLE_MAX, o.workers, o.chunk_bytes,
                o.result_slots, o.table_streams, o.table_events);
        return -EINVAL;
    }
    struct cx *x = calloc(1, sizeof(*x));
    if (!x)
        return -ENOMEM;
    x->dev = dev;
    x->chunk = o.chunk_bytes ? o.chunk_bytes : CX_CHUNK_DEFAULT;
    x->nresult = o.result_slots ? o.result_slots : CX_SLOTS_DEFAULT;
    x->on_fault = o.on_fault;
    x->fault_arg = o.fault_arg;
    pthread_mutex_init(&x->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&x->mon_cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&x->idle_cv, NULL);
    int rc = -ENOMEM;
    x->free_slots = calloc(x->nresult, sizeof(*x->free_slots));
    if (!x->free_slots)
        goto fail_free;
    for (uint32_t i = 0; i < x->nresult; i++)
        x->free_slots[i] = x->nresult - 1 - i;
    x->nfree = x->nresult;
    if ((rc = ga_device_make_current(dev)) < 0 || (rc = cx__device_setup(x)) < 0)
        goto fail_device;
    if ((rc = ga_streams_create(dev, &x->streams)) < 0)
        goto fail_device;
    struct ga_pool_opts po = {.threads = o.workers, .log = ga__log_sink()};
    if ((rc = ga_device_pool_create(dev, &po, &x->pool)) < 0)
        goto fail_streams;
    struct ga_exec_config cfg = {
        .limits = {.max_streams = o.max_streams ? o.max_streams : CX_STREAMS_DEFAULT,
                   .max_events = o.max_events ? o.max_events : CX_EVENTS_DEFAULT},
        .table_streams = o.table_streams ? o.table_streams : CX_TABLE_STREAMS_DEFAULT,
        .table_events = o.table_events ? o.table_events : CX_TABLE_EVENTS_DEFAULT,
        /* A kept id reads as stale for as long as the table allows. */
        .reuse = BASE_IDTAB_REUSE_FIFO,
        .log = o.log,
    };
    struct ga_exec_backend be = {
        .name = "cuda",
        .caps = LT_CAP_DOORBELL | LT_CAP_DONE_WORD | LT_CAP_TIMING,
        .ops = &cx_ops,
        .ctx = x,
    };
    if ((rc = ga_executor_create(&cfg, &be, &x->front)) < 0)
        goto fail_pool;
    if ((rc = -pthread_create(&x->mon, NULL, cx__monitor_main, x)) < 0) {
        /* The front owns the backend now: destroying it frees x too. */
        ga_executor_destroy(x->front);
        return rc;
    }
    x->mon_started = true;
    ga__info("CUDA executor: device %d %s (sm_%u), %u workers, chunks of %" PRIu64
             " bytes, %u result slots, %u streams and %u events in the tables",
             dev->info.ordinal, dev->info.name, dev->info.arch,
             po.threads ? po.threads : GA_POOL_DEFAULT_THREADS, x->chunk, x->nresult,
             cfg.table_streams, cfg.table_events);
    *ex_p = x->front;
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
fail_free:
    cx__free(x);
    return rc;
}
