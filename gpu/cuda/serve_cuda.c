/* The CUDA backend's worker side: each owner's FIFO served on the pool in
 * order, every command issued as asynchronous CUDA work with a completion
 * behind it, the answers given to the front, the CUDA objects made on first
 * need and released behind their work, and device faults (the monitor and
 * the path that answers everything in flight). The table the front calls
 * and the creation are backend_cuda.c's. */
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

#define CX_SERVE_BATCH 64u
#define CX_MONITOR_MS 100

const char *const cx__ctl_names[] = {
    [CX_STREAM_QUERY] = "STREAM_QUERY",   [CX_STREAM_SYNC] = "STREAM_SYNCHRONIZE",
    [CX_EVENT_RECORD] = "EVENT_RECORD",   [CX_EVENT_WAIT] = "EVENT_WAIT",
    [CX_EVENT_QUERY] = "EVENT_QUERY",     [CX_EVENT_SYNC] = "EVENT_SYNCHRONIZE",
    [CX_EVENT_ELAPSED] = "EVENT_ELAPSED", [CX_DEVICE_SYNC] = "DEVICE_SYNCHRONIZE",
};

/* ---- owners (locked) -------------------------------------------------------- */

void cx__owner_unref(struct cx *x, struct cx_owner *o)
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
int cx__push(struct cx *x, struct cx_owner *o, struct cx_cmd *cmd)
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
void cx__cmd_free(struct cx *x, struct cx_cmd *cmd)
{
    /* Watched no more, before its slot is reused; not under x->mu, which
     * every client's requests take, while the poller may hold bell_mu. */
    if (cmd->w.bell.host && cmd->kind == CX_WORK)
        cx__bell_release(x, cmd);
    pthread_mutex_lock(&x->mu);
    cx__slot_put(x, cmd);
    cx__devmem_release(x, cmd->o, cmd->dmem_reserved);
    cx__owner_unref(x, cmd->o);
    pthread_mutex_unlock(&x->mu);
    free(cmd->pieces);
    free(cmd);
}

/* Answers @cmd once, with @status when it is not LT_OK (a work item's
 * result is read from its slot otherwise). For a command, @a (may be NULL)
 * holds what it found. Returns false when it was answered already (by the
 * fault path). */
bool cx__cmd_answer(struct cx *x, struct cx_cmd *cmd, uint32_t status, const char *why,
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
    /* Before the answer, which lets the bell's segment go: the poller must
     * not read a bell whose page may be unmapped (cx__cmd_free does it
     * again, harmlessly). */
    if (cmd->kind == CX_WORK && cmd->w.bell.host)
        cx__bell_release(x, cmd);
    if (cmd->kind == CX_WORK || cmd->kind == CX_RING_SHARD) {
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
void cx__fault(struct cx *x, int err)
{
    pthread_mutex_lock(&x->mu);
    if (x->faulted) {
        pthread_mutex_unlock(&x->mu);
        return;
    }
    /* Atomic as well: the ring dispatcher reads it on every sweep, unlocked. */
    __atomic_store_n(&x->faulted, true, __ATOMIC_RELEASE);
    x->fault_err = err ? err : -EIO;
    CUresult sticky = x->fault_cu;
    struct cx_cmd *list = NULL;
    while (x->inflight) {
        struct cx_cmd *cmd = x->inflight;
        cx__inflight_del(x, cmd);
        cmd->state = 1;
        cmd->inext = list;
        list = cmd;
    }
    pthread_mutex_unlock(&x->mu);
    /* Before the answers: they let the bells' segments go. */
    cx__bell_release_all(x);
    /* The sticky error names the fault: an idle stream's query returns it. */
    if (sticky == CUDA_SUCCESS && ga_device_make_current(x->dev) == 0) {
        CUresult r = cuStreamQuery(x->mon_stream);
        if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY)
            sticky = r;
    }
    ga__err("CUDA executor: the device faulted (%s, %s); answering every request in flight "
            "with GPU_FAULT. The primary context is unusable for the rest of this process",
            strerror(-x->fault_err), sticky ? ga_cu_name(sticky) : "no CUresult");
    ga_exec_backend_fault(x->front, x->fault_err);
    for (struct cx_cmd *cmd = list; cmd; cmd = cmd->inext) {
        if (cmd->kind == CX_WORK || cmd->kind == CX_RING_SHARD) {
            struct ga_exec_result res = {.status = LT_E_GPU_FAULT, .detail = (uint32_t)sticky};
            cx__launch_fault_note(cmd, sticky);
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
    cx__rings_fault(x);
    if (x->on_fault)
        x->on_fault(x->fault_arg, x->fault_err);
}

void *cx__monitor_main(void *arg)
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
            if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY) {
                rc = GA_CU(r);
                pthread_mutex_lock(&x->mu);
                if (!x->faulted && (rc == -EIO || rc == -ENODEV))
                    x->fault_cu = r; /* named in the launches the fault answers */
                pthread_mutex_unlock(&x->mu);
            }
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
    /* Before the answer, so the client's next STREAM_QUERY sees it. An
     * answered command (the fault path) may have outlived its stream. */
    pthread_mutex_lock(&x->mu);
    if (cmd->covers_xs && !cmd->state && cmd->covers > cmd->xs->passed)
        cmd->xs->passed = cmd->covers;
    pthread_mutex_unlock(&x->mu);
    if (cx__cmd_answer(x, cmd, LT_OK, NULL, NULL))
        cx__cmd_free(x, cmd);
}

/* Queues @cmd's completion behind what @st holds; when that cannot be
 * queued the stream's state is unknown: treat it as a fault if the device
 * says so, else answer now with the error. */
static void cx__complete_behind(struct cx *x, struct cx_cmd *cmd, CUstream st)
{
    if (cmd->xs && st == cmd->xs->st) {
        cmd->covers_xs = true;
        cmd->covers = cmd->xs->issued;
    }
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
    /* The stream's helpers (its copy side, events, pinned bounce buffer)
     * are made before the bell's wait is queued: a first cuMemHostAlloc
     * or cuStreamCreate made behind a wait only the client can end would
     * hold this worker if the driver waits for queued work there, as its
     * unregistration does (measured: bench/unregister-probe; for these
     * calls suspected from an H200 run, docs/reliability.md). */
    if (w->bell.host && (rc = cx__op_prepare(x, cmd)) < 0) {
        if (cx__cmd_answer(x, cmd, LT_E_SYSTEM, "the stream's buffers could not be made", NULL))
            cx__cmd_free(x, cmd);
        return;
    }
    xs->issued++;
    if (w->bell.host) {
        /* The stream waits on the agent's word, which the bell poller
         * stores once the client's bell is rung: never on the client's. */
        struct ga_doorbell_req req = {
            .bell_dev = cx__bell_word_dev(x, cmd), .seq = 1, .work = cx__work_fn, .work_arg = cmd};
        cx__bell_watch(x, cmd);
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
                : w->op == GA_EXEC_OP_LAUNCH   ? "LAUNCH"
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
        v[i]->want_cs = true; /* its fork event */
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
        if (rc == 0) {
            /* Busy with nothing but our own completions' host functions. */
            pthread_mutex_lock(&x->mu);
            rc = cmd->xs->passed == cmd->xs->issued;
            pthread_mutex_unlock(&x->mu);
        }
        if (rc >= 0) {
            a.ready = (uint32_t)rc;
            rc = 0;
        }
        break;
    case CX_STREAM_SYNC:
        behind = cmd->xs->st;
        break;
    case CX_EVENT_RECORD:
        if ((rc = cx__xs_ensure(x, cmd->xs)) == 0 && (rc = cx__ev_ensure(x, cmd->ev)) == 0) {
            cmd->xs->issued++;
            rc = ga_event_record(x->streams, cmd->ev->ev, cmd->xs->st);
        }
        break;
    case CX_EVENT_WAIT:
        /* An event never recorded is complete: waiting for it is a no-op. */
        if (cmd->ev->ev && (rc = cx__xs_ensure(x, cmd->xs)) == 0) {
            cmd->xs->issued++;
            rc = ga_event_wait(x->streams, cmd->xs->st, cmd->ev->ev);
        }
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
    cx__rings_release(x, o);
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
        if (cmd->kind == CX_DROP || cmd->kind == CX_STREAM_CLOSE || cmd->kind == CX_EVENT_CLOSE ||
            cmd->kind == CX_RING_CLOSE) {
            pthread_mutex_unlock(&x->mu);
            if (cmd->kind == CX_DROP) {
                free(cmd);
                cx__drop_issue(x, o);
            } else if (cmd->kind == CX_RING_CLOSE) {
                cx__ring_close_issue(x, cmd->ring);
                free(cmd);
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
        if (!cancel) {
            cx__inflight_add(x, cmd);        /* from here the drop and the fault path see it */
            cmd->t_inflight = base_now_ns(); /* and the reaper's gate */
            if (cmd->kind == CX_WORK && cmd->w.bell.host)
                cx__bell_arm(x, cmd);
            if (cmd->kind == CX_RING_SHARD)
                cx__ring_pending_add(x, cmd); /* and the ring's close and drop */
        }
        pthread_mutex_unlock(&x->mu);
        if (cancel) {
            if (cx__cmd_answer(x, cmd, status, "cancelled before it reached the GPU", NULL))
                cx__cmd_free(x, cmd);
        } else if (cmd->kind == CX_WORK) {
            cx__work_issue(x, cmd);
        } else if (cmd->kind == CX_RING_SHARD) {
            cx__ring_shard_issue(x, cmd);
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
