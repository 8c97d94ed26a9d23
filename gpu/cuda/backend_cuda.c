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

#include "base/sigbus.h"
#include "backend_cuda.h"
#include "base/time.h"
#include "cu_call.h"
#include "device_internal.h"
#include "kernels/checksum.h"
#include "kernels/scan.h"
#include "lease_types/validate.h"
#include "ring_internal.h"

#define CX_STREAMS_DEFAULT 64u
#define CX_EVENTS_DEFAULT 1024u
#define CX_TABLE_STREAMS_DEFAULT 4096u
#define CX_TABLE_EVENTS_DEFAULT 16384u
#define CX_TABLE_MAX (1u << 20)
#define CX_CHUNK_DEFAULT (64ull << 20)
#define CX_SLOTS_DEFAULT GA_CUDA_RESULT_SLOTS_DEFAULT
#define CX_SLOTS_MAX GA_CUDA_RESULT_SLOTS_MAX
#define CX_POOL_RELEASE_THRESHOLD (2ull << 30)
#define CX_RING_STREAMS_MAX 64u

/* ---- the backend table ------------------------------------------------------- */

static int cx_work_check(void *ctx, const struct ga_exec_work *w, struct lt_failure *why_p)
{
    struct cx *x = ctx;
    if (w->op == GA_EXEC_OP_LAUNCH)
        return cx__launch_check(x, w, why_p);
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

/* Whether @cmd's client has rung its bell (guarded: a load that faults
 * reads as unrung). */
static bool cx__bell_rung(const struct cx_cmd *cmd)
{
    uint64_t now = 0;
    return base_guard_load_u64(cmd->w.bell.host, &now) == 0 &&
           (int64_t)(now - cmd->w.bell.seq) >= 0;
}

/* Locked. The owner is gone: the waits of its bells not yet rung are
 * released by the agent (bell_poll.c), so the GPU passes them and the work
 * completes (answered as cancelled); what is queued is cancelled as the FIFO is served; the drop
 * command releases its streams and events behind everything. */
static void cx__owner_cancel(struct cx *x, struct cx_owner *o)
{
    o->dropped = true;
    for (struct cx_cmd *cmd = x->inflight; cmd; cmd = cmd->inext) {
        if (cmd->o != o || cmd->kind != CX_WORK || !cmd->w.bell.host || cmd->cancelled)
            continue;
        if (!cx__bell_held(x, cmd))
            continue; /* rung: the work runs and reports its own result */
        /* The stream waits on the agent's word: releasing it is final,
         * whatever the client writes to its own bell from now on. A bell
         * rung that the poller has not seen yet runs as rung. */
        if (!cx__bell_rung(cmd))
            cmd->cancelled = true;
        cx__bell_release(x, cmd);
    }
    cx__rings_cancel(x, o); /* its rings' words too: they are in its own segments */
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

int cx__devmem_reserve(struct cx *x, struct cx_owner *o, uint64_t need, const char *verb,
                       struct lt_failure *why)
{
    const uint64_t left_all = x->dmem_budget - x->dmem_used;
    const uint64_t left_client = x->dmem_client_max - o->dmem_reserved;
    const uint64_t left = left_all < left_client ? left_all : left_client;
    if (need > left)
        return lt_failure_set(why, LT_E_LIMIT, 0,
                              "%s: needs %" PRIu64 " MiB of device memory, %" PRIu64
                              " MiB left to %s",
                              verb, (need + (1u << 20) - 1) >> 20, left >> 20,
                              left_client < left_all ? "this client" : "all clients");
    x->dmem_used += need;
    o->dmem_reserved += need;
    return 0;
}

void cx__devmem_release(struct cx *x, struct cx_owner *o, uint64_t n)
{
    x->dmem_used -= n;
    o->dmem_reserved -= n;
}

uint32_t ga_executor_cuda_result_floor(uint32_t slots, uint32_t clients)
{
    const uint64_t share = clients ? (uint64_t)slots / 4 / clients : 0;
    return share < GA_CUDA_RESULT_FLOOR_DEFAULT ? (uint32_t)share : GA_CUDA_RESULT_FLOOR_DEFAULT;
}

/* A client past its floor takes only from the slots above the reserve, so
 * the reserve is drawn only by clients below their floor, each by at most
 * slot_floor: every one of slot_reserve / slot_floor clients finds a slot. */
int cx__slot_take(struct cx *x, struct cx_owner *o, struct cx_cmd *cmd, struct lt_failure *why)
{
    if (x->nfree == 0)
        return why ? lt_failure_set(why, LT_E_LIMIT, 0,
                                    "%" PRIu32
                                    " checksum and scan submits in flight, the agent's limit",
                                    x->nresult)
                   : -ENOSPC;
    if (o->slots_held >= x->slot_floor && x->nfree <= x->slot_reserve)
        return why ? lt_failure_set(why, LT_E_LIMIT, 0,
                                    "this client holds %" PRIu32 " result slots; %" PRIu32 " of %" PRIu32
                                    " are kept for others",
                                    o->slots_held, x->slot_reserve, x->nresult)
                   : -ENOSPC;
    cmd->slot = x->free_slots[--x->nfree];
    cmd->slot_owner = o;
    o->slots_held++;
    return 0;
}

void cx__slot_put(struct cx *x, struct cx_cmd *cmd)
{
    if (cmd->slot == UINT32_MAX)
        return;
    x->free_slots[x->nfree++] = cmd->slot;
    cmd->slot = UINT32_MAX;
    cmd->slot_owner->slots_held--;
    cmd->slot_owner = NULL;
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
    /* Bell-gated work waits on its slot's agent word (bell_poll.c). */
    if (w->op != LT_OP_COPY_H2D || w->bell.host)
        rc = cx__slot_take(x, xs->o, cmd, why_p);
    if (rc == 0 && w->op == GA_EXEC_OP_LAUNCH) {
        const uint64_t need = cx__launch_devmem(cmd);
        if ((rc = cx__devmem_reserve(x, xs->o, need, "LAUNCH", why_p)) == 0)
            cmd->dmem_reserved = need;
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
    } else {
        cx__slot_put(x, cmd);
        cx__devmem_release(x, xs->o, cmd->dmem_reserved);
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
        "/%" PRIu32 " result_floor=%" PRIu32 " result_reserve=%" PRIu32 " rings=%" PRIu64
        " ring_shards=%" PRIu64 " ring_chunks=%" PRIu64 " ring_bytes=%" PRIu64
        " ring_streams=%s ring_dispatch=%s ring_copies=%" PRIu64 " ring_join=%" PRIu32
        " ring_join_lapses=%" PRIu64 " ring_slot_waits=%" PRIu64 "\n"
        "cuda executor paths: pinned %" PRIu64 " submits %" PRIu64
        " bytes, mapped (zero-copy) %" PRIu64 " submits %" PRIu64
        " bytes, staged (slow path, bounce copies) %" PRIu64 " submits %" PRIu64 " bytes\n"
        "cuda executor streams: %" PRIu64 " CUDA streams, %" PRIu64
        " events; completions pending %" PRIu64 " run %" PRIu64 "; pool %" PRIu32
        " workers (%" PRIu32 " used), %" PRIu64 " jobs\n",
        s.bell_waits, s.done_words, slots_used, x->nresult, x->slot_floor, x->slot_reserve,
        s.rings_opened, s.ring_shards, s.ring_chunks, s.ring_bytes,
        x->nring_streams ? "shared" : "one per ring", x->ring_poll ? "poll" : "wait", s.ring_copies,
        x->ring_poll ? x->ring_join : 1u, s.ring_join_lapses, s.ring_slot_waits,
        s.path_submits[CX_PATH_PINNED], s.path_bytes[CX_PATH_PINNED],
        s.path_submits[CX_PATH_MAPPED], s.path_bytes[CX_PATH_MAPPED],
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
    cx__disp_stop(x); /* every ring is released: nothing is handed over any more */
    cx__bell_stop(x); /* every command is answered: no bell is watched */
}

static void cx__free(struct cx *x)
{
    for (struct cx_scratch *sc = x->scratch_all, *n; sc; sc = n) {
        n = sc->all_next;
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
    free(x->ring_streams);
    cx__launch_table_free(x);
    pthread_cond_destroy(&x->disp_cv);
    pthread_mutex_destroy(&x->disp_mu);
    pthread_cond_destroy(&x->bell_cv);
    pthread_mutex_destroy(&x->bell_mu);
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
    for (uint32_t i = 0; i < x->nring_streams && !x->faulted; i++)
        ga_stream_free(x->streams, x->ring_streams[i]);
    ga_streams_destroy(x->streams);
    if (ga_device_make_current(x->dev) == 0) {
        if (x->mon_stream)
            GA_CU(cuStreamDestroy(x->mon_stream));
        if (!x->faulted) {
            for (struct cx_scratch *sc = x->scratch_all; sc; sc = sc->all_next)
                GA_CU(cuMemFreeHost(sc->host));
            if (x->results)
                GA_CU(cuMemFreeHost(x->results));
            if (x->bell_words)
                GA_CU(cuMemFreeHost(x->bell_words));
        }
    }
    cx__free(x);
}

/* ---- the reaper's gate (gpu/executor_cuda.h, issue 12) ----------------------- */

/* Locked. @cmd's stream still waits for its bell: the agent word the bell
 * poller stores once the client rings is not stored yet. */
static bool cx__bell_unrung(const struct cx *x, const struct cx_cmd *cmd)
{
    if (cmd->kind != CX_WORK || !cmd->w.bell.host || cmd->cancelled || cmd->forced || cmd->state)
        return false;
    return cx__bell_held(x, cmd);
}

static uint64_t cx__retire_stalled_ns(void *arg)
{
    struct cx *x = arg;
    uint64_t now = base_now_ns(), oldest = 0;
    pthread_mutex_lock(&x->mu);
    for (struct cx_cmd *cmd = x->inflight; cmd; cmd = cmd->inext)
        if (cx__bell_unrung(x, cmd) && now - cmd->t_inflight > oldest)
            oldest = now - cmd->t_inflight;
    uint64_t rings = cx__rings_stalled_ns(x, now);
    pthread_mutex_unlock(&x->mu);
    return rings > oldest ? rings : oldest;
}

/* Releases each bell wait older than @older_ns itself, by storing the agent
 * word its stream waits on (no driver call: the driver may be blocked
 * behind that very wait, and no client store can undo it); the work runs
 * and is answered LT_E_BUSY. */
static uint32_t cx__retire_release(void *arg, uint64_t older_ns, const char *why)
{
    struct cx *x = arg;
    uint64_t now = base_now_ns();
    uint32_t n = 0;
    pthread_mutex_lock(&x->mu);
    for (struct cx_cmd *cmd = x->inflight; cmd; cmd = cmd->inext) {
        if (!cx__bell_unrung(x, cmd) || now - cmd->t_inflight < older_ns)
            continue;
        if (cx__bell_rung(cmd)) { /* rung, the poller not there yet */
            cx__bell_release(x, cmd);
            continue;
        }
        cmd->forced = true;
        n++;
        cx__bell_release(x, cmd);
        ga__err("CUDA executor: client %#" PRIx64
                ": the agent had to release its bell (seq %" PRIu64 ", unrung for %" PRIu64
                " ms): %s; its submit is answered BUSY",
                cmd->o->id, cmd->w.bell.seq, (now - cmd->t_inflight) / 1000000u, why);
    }
    n += cx__rings_force(x, now, older_ns, why);
    pthread_mutex_unlock(&x->mu);
    return n;
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
    .ring_open = cx__ring_open,
    .ring_shard = cx__ring_shard,
    .ring_close = cx__ring_close,
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
    void *words = NULL;
    GA_CU_GOTO(cuMemHostAlloc(&words, (size_t)x->nresult * 8u,
                              CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE),
               rc, out);
    x->bell_words = words;
    memset(words, 0, (size_t)x->nresult * 8u);
    GA_CU_GOTO(cuMemHostGetDevicePointer(&x->bell_words_dev, words, 0), rc, out);
out:
    return rc;
}

int ga_executor_cuda_create(struct ga_device *dev, const struct ga_executor_cuda_opts *opts,
                            struct ga_executor **ex_p)
{
    struct ga_executor_cuda_opts o = opts ? *opts : (struct ga_executor_cuda_opts){0};
    if (!dev || !ex_p || o.workers > GA_POOL_MAX_THREADS || o.chunk_bytes % 4096 != 0 ||
        o.result_slots > CX_SLOTS_MAX || o.table_streams > CX_TABLE_MAX ||
        o.table_events > CX_TABLE_MAX || o.ring_streams > CX_RING_STREAMS_MAX ||
        o.ring_join > GA_CUDA_RING_JOIN_MAX) {
        ga__err(
            "CUDA executor: expected a device, a result pointer, at most %u workers, a chunk "
            "that is a multiple of 4096, at most %u result slots and %u table entries, at "
            "most %u ring streams and a ring join of at most %u; found workers %u chunk %" PRIu64
            " slots %u streams %u events %u ring streams %u ring join %u",
            GA_POOL_MAX_THREADS, CX_SLOTS_MAX, CX_TABLE_MAX, CX_RING_STREAMS_MAX,
            GA_CUDA_RING_JOIN_MAX, o.workers, o.chunk_bytes, o.result_slots, o.table_streams,
            o.table_events, o.ring_streams, o.ring_join);
        return -EINVAL;
    }
    struct cx *x = calloc(1, sizeof(*x));
    if (!x)
        return -ENOMEM;
    x->dev = dev;
    x->chunk = o.chunk_bytes ? o.chunk_bytes : CX_CHUNK_DEFAULT;
    x->nresult = o.result_slots ? o.result_slots : CX_SLOTS_DEFAULT;
    const uint64_t reserve = (uint64_t)o.result_floor * o.result_floor_clients;
    if (reserve > x->nresult / 2) {
        ga__err("CUDA executor: expected result slots for each client's floor times the clients "
                "(%" PRIu32 " x %" PRIu32 ") to be at most half of the %" PRIu32 " result slots",
                o.result_floor, o.result_floor_clients, x->nresult);
        free(x);
        return -EINVAL;
    }
    x->slot_floor = o.result_floor;
    x->slot_reserve = (uint32_t)reserve;
    x->on_fault = o.on_fault;
    x->fault_arg = o.fault_arg;
    x->nring_streams = o.ring_streams;
    x->ring_poll = o.ring_poll;
    x->ring_join = o.ring_join ? o.ring_join : 1;
    x->dmem_budget = o.device_budget ? o.device_budget : dev->info.total_mem / 4 * 3;
    x->dmem_client_max = o.device_client_max ? o.device_client_max : x->dmem_budget / 2;
    pthread_mutex_init(&x->mu, NULL);
    pthread_mutex_init(&x->disp_mu, NULL);
    pthread_cond_init(&x->disp_cv, NULL);
    pthread_mutex_init(&x->bell_mu, NULL);
    pthread_cond_init(&x->bell_cv, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&x->mon_cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&x->idle_cv, NULL);
    int rc = -ENOMEM;
    x->free_slots = calloc(x->nresult, sizeof(*x->free_slots));
    x->ring_streams = calloc(x->nring_streams ? x->nring_streams : 1, sizeof(*x->ring_streams));
    if (!x->free_slots || !x->ring_streams)
        goto fail_free;
    for (uint32_t i = 0; i < x->nresult; i++)
        x->free_slots[i] = x->nresult - 1 - i;
    x->nfree = x->nresult;
    if ((rc = ga_device_make_current(dev)) < 0 || (rc = cx__device_setup(x)) < 0 ||
        (rc = cx__launch_table_build(x)) < 0)
        goto fail_device;
    if ((rc = ga_streams_create(dev, &x->streams)) < 0)
        goto fail_device;
    struct ga_pool_opts po = {.threads = o.workers, .log = ga__log_sink()};
    if ((rc = ga_device_pool_create(dev, &po, &x->pool)) < 0)
        goto fail_streams;
    struct ga_exec_config cfg = {
        .limits = {.max_streams = o.max_streams ? o.max_streams : CX_STREAMS_DEFAULT,
                   .max_events = o.max_events ? o.max_events : CX_EVENTS_DEFAULT,
                   .launch = o.launch},
        .table_streams = o.table_streams ? o.table_streams : CX_TABLE_STREAMS_DEFAULT,
        .table_events = o.table_events ? o.table_events : CX_TABLE_EVENTS_DEFAULT,
        /* A kept id reads as stale for as long as the table allows. */
        .reuse = BASE_IDTAB_REUSE_FIFO,
        .log = o.log,
    };
    struct ga_exec_backend be = {
        .name = "cuda",
        .caps = LT_CAP_DOORBELL | LT_CAP_DONE_WORD | LT_CAP_TIMING | LT_CAP_STREAM |
                (cx__launch_count(x) ? LT_CAP_LAUNCH : 0u),
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
    if ((rc = cx__bell_start(x)) < 0) {
        ga__err("CUDA executor: the bell poller thread could not start (%s)", strerror(-rc));
        ga_executor_destroy(x->front);
        return rc;
    }
    if (x->ring_poll && (rc = cx__disp_start(x)) < 0) {
        ga__err("CUDA executor: the rings' dispatcher thread could not start (%s)", strerror(-rc));
        ga_executor_destroy(x->front);
        return rc;
    }
    if (o.retire_gate)
        *o.retire_gate = (struct ga_cuda_retire_gate){
            .stalled_ns = cx__retire_stalled_ns, .release = cx__retire_release, .arg = x};
    ga__info("CUDA executor: device %d %s (sm_%u), %u workers, chunks of %" PRIu64
             " bytes, %u result slots, %u streams and %u events in the tables; streaming rings "
             "on %s, their copies %s (a copy gathers up to %u chunk(s), --ring-join), their "
             "images and launch copies in up to %" PRIu64 " MiB of device memory (%" PRIu64
             " MiB a client)",
             dev->info.ordinal, dev->info.name, dev->info.arch,
             po.threads ? po.threads : GA_POOL_DEFAULT_THREADS, x->chunk, x->nresult,
             cfg.table_streams, cfg.table_events,
             x->nring_streams ? "shared streams (--ring-streams)" : "a stream each",
             x->ring_poll ? "queued by a polling dispatcher (--ring-dispatch poll)"
                          : "queued ahead behind their words (--ring-dispatch wait)",
             x->ring_poll ? x->ring_join : 1u, x->dmem_budget >> 20, x->dmem_client_max >> 20);
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
    if (x->bell_words)
        GA_CU(cuMemFreeHost(x->bell_words));
fail_free:
    cx__free(x);
    return rc;
}
