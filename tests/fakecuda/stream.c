/* fakecuda: streams and events. Each stream is a FIFO run in order by its
 * own thread, started on the stream's first operation; the NULL stream
 * keeps the legacy rules towards blocking streams. An event record is a
 * "mark" that its stream completes; queries, synchronizes and waits hold
 * the mark that was current when they were called. After a fault nothing
 * queued runs, and every wait returns the sticky error. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/time.h"
#include "fakecuda.h"

struct fk_mark {
    unsigned int refs;
    int done;
    uint64_t ns; /* CLOCK_MONOTONIC when its stream reached it */
};

static struct fk_mark *fk_mark_new(void)
{
    struct fk_mark *m = calloc(1, sizeof(*m));
    if (m)
        m->refs = 1;
    return m;
}

static void fk_mark_put(struct fk_mark *m)
{
    if (m && --m->refs == 0)
        free(m);
}

/* Operations of @s done so far. The stream thread publishes a finished
 * operation before it takes fk.mu again, as a driver marks the stream's
 * progress the moment the work ends (a host function's caller must not see
 * the stream busy for the time the thread waits for the lock). */
static uint64_t fk_done(const struct CUstream_st *s)
{
    return __atomic_load_n(&s->completed, __ATOMIC_ACQUIRE);
}

static int fk_stopped(void)
{
    return __atomic_load_n(&fk.sticky, __ATOMIC_ACQUIRE) != CUDA_SUCCESS ||
           __atomic_load_n(&fk.ctx.stopping, __ATOMIC_ACQUIRE);
}

/* ---- operations ---- */

struct fk_op *fk__op_new(enum fk_op_kind kind)
{
    struct fk_op *op = calloc(1, sizeof(*op));
    if (op)
        op->kind = kind;
    return op;
}

/* Frees @op and what it holds. Locked. */
static void fk_op_free(struct fk_op *op)
{
    switch (op->kind) {
    case FK_OP_KERNEL:
        free(op->u.launch);
        break;
    case FK_OP_RECORD:
    case FK_OP_WAIT_MARK:
        fk_mark_put(op->u.mark);
        break;
    case FK_OP_WAIT_STREAMS:
        free(op->u.deps);
        break;
    default:
        break;
    }
    free(op);
}

static int fk_wait_value_true(uint64_t cur, uint64_t v, unsigned int flags)
{
    switch (flags & 0xfu) {
    case CU_STREAM_WAIT_VALUE_GEQ:
        return (int64_t)(cur - v) >= 0; /* wraps, as the driver compares */
    case CU_STREAM_WAIT_VALUE_EQ:
        return cur == v;
    case CU_STREAM_WAIT_VALUE_AND:
        return (cur & v) != 0;
    default: /* CU_STREAM_WAIT_VALUE_NOR */
        return ~(cur | v) != 0;
    }
}

/* Polls a host word as the GPU's front end would, with a growing pause. */
static CUresult fk_wait_value_run(const struct fk_op *op)
{
    struct fk_hold h = {.n = 0};
    unsigned char *p = NULL;
    CUresult rc = fk__mem_hold(&h, op->u.word.addr, 8, 0, "cuStreamWaitValue64", &p);
    if (rc != CUDA_SUCCESS)
        return rc;
    const uint64_t *w = (const uint64_t *)(void *)p;
    long pause_ns = 1000;
    while (!fk_wait_value_true(__atomic_load_n(w, __ATOMIC_ACQUIRE), op->u.word.value,
                               op->u.word.flags) &&
           !fk_stopped()) {
        struct timespec ts = {0, pause_ns};
        nanosleep(&ts, NULL);
        if (pause_ns < 200000)
            pause_ns *= 2;
    }
    fk__mem_release(&h);
    return CUDA_SUCCESS;
}

static CUresult fk_write_value_run(const struct fk_op *op)
{
    struct fk_hold h = {.n = 0};
    unsigned char *p = NULL;
    CUresult rc = fk__mem_hold(&h, op->u.word.addr, 8, 1, "cuStreamWriteValue64", &p);
    if (rc != CUDA_SUCCESS)
        return rc;
    /* Default flags order the stream's earlier writes before the word. */
    __atomic_store_n((uint64_t *)(void *)p, op->u.word.value, __ATOMIC_RELEASE);
    fk__mem_release(&h);
    return CUDA_SUCCESS;
}

/* Runs @op of @s (unlocked). */
static CUresult fk_op_run(struct CUstream_st *s, struct fk_op *op)
{
    CUresult rc = CUDA_SUCCESS;
    switch (op->kind) {
    case FK_OP_COPY:
        return fk__copy_run(op);
    case FK_OP_MEMSET:
        return fk__memset_run(op);
    case FK_OP_KERNEL:
        return fk__launch_run(op->u.launch);
    case FK_OP_HOSTFN:
        fk__in_hostfn = 1;
        op->u.host.fn(op->u.host.data);
        fk__in_hostfn = 0;
        if (fk.cfg.hostfn_lag_us) {
            /* A stream thread descheduled between the return and its mark. */
            struct timespec ts = {(time_t)(fk.cfg.hostfn_lag_us / 1000000u),
                                  (long)(fk.cfg.hostfn_lag_us % 1000000u) * 1000L};
            nanosleep(&ts, NULL);
        }
        return CUDA_SUCCESS;
    case FK_OP_WAIT_VALUE:
        return fk_wait_value_run(op);
    case FK_OP_WRITE_VALUE:
        return fk_write_value_run(op);
    default:
        break;
    }
    pthread_mutex_lock(&fk.mu);
    switch (op->kind) {
    case FK_OP_RECORD:
        /* The stream has passed the record by the time its event says so:
         * a query of either after the other's answer agrees. */
        __atomic_store_n(&s->completed, op->seq, __ATOMIC_RELEASE);
        op->u.mark->ns = base_now_ns();
        op->u.mark->done = 1;
        pthread_cond_broadcast(&fk.cv);
        break;
    case FK_OP_WAIT_MARK:
        while (!op->u.mark->done && !fk.sticky && !fk.ctx.stopping)
            pthread_cond_wait(&fk.cv, &fk.mu);
        break;
    case FK_OP_WAIT_STREAMS:
        for (unsigned int i = 0; i < op->u.deps->n; i++)
            while (fk_done(op->u.deps->s[i]) < op->u.deps->seq[i] && !fk.sticky &&
                   !fk.ctx.stopping)
                pthread_cond_wait(&fk.cv, &fk.mu);
        break;
    case FK_OP_FREE:
        fk__range_kill(&fk.ctx, op->u.range);
        break;
    case FK_OP_ALLOC_READY:
        op->u.range->ready = 1;
        break;
    default:
        rc = CUDA_ERROR_UNKNOWN;
    }
    pthread_mutex_unlock(&fk.mu);
    return rc;
}

/* ---- the stream threads ---- */

static void *fk_stream_main(void *arg)
{
    struct CUstream_st *s = arg;
    struct CUctx_st *ctx = &fk.ctx;
    pthread_mutex_lock(&fk.mu);
    for (;;) {
        while (!s->head && s->alive && !ctx->stopping)
            pthread_cond_wait(&s->cv, &fk.mu);
        struct fk_op *op = s->head;
        if (!op)
            break; /* destroyed and drained, or the context stops */
        if (!fk.sticky && !ctx->stopping) {
            s->in_hostfn = op->kind == FK_OP_HOSTFN;
            pthread_mutex_unlock(&fk.mu);
            CUresult rc = fk_op_run(s, op);
            if (rc == CUDA_SUCCESS)
                __atomic_store_n(&s->completed, op->seq, __ATOMIC_RELEASE);
            pthread_mutex_lock(&fk.mu);
            s->in_hostfn = 0;
            if (rc != CUDA_SUCCESS)
                fk__fault(rc);
        }
        /* After a fault (or at teardown) the rest is dropped unrun. */
        s->head = op->next;
        if (!s->head)
            s->tail = NULL;
        __atomic_store_n(&s->completed, op->seq, __ATOMIC_RELEASE);
        fk_op_free(op);
        pthread_cond_broadcast(&fk.cv);
    }
    s->thread = 0;
    ctx->workers--;
    pthread_cond_broadcast(&fk.cv);
    pthread_mutex_unlock(&fk.mu);
    return NULL;
}

static CUresult fk_stream_start(struct CUstream_st *s)
{
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    /* The stream thread (which runs host functions) inherits the caller's
     * signal mask, as the driver's threads do (measured on the H200: the
     * agent's own mask, SIGBUS not blocked). */
    int err = pthread_create(&t, &a, fk_stream_main, s);
    pthread_attr_destroy(&a);
    if (err) {
        fk__log("cannot start a stream thread: %s", strerror(err));
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    s->thread = 1;
    fk.ctx.workers++;
    return CUDA_SUCCESS;
}

static void fk_stream_append(struct CUstream_st *s, struct fk_op *op)
{
    op->seq = ++s->enqueued;
    op->next = NULL;
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
}

/* The legacy NULL stream waits for every blocking stream's earlier work,
 * and a blocking stream for the NULL stream's: as a dependency operation. */
static CUresult fk_legacy_deps(struct CUstream_st *s)
{
    struct CUctx_st *ctx = &fk.ctx;
    struct fk_op *dep = NULL;
    for (struct CUstream_st *t = fk.streams; t; t = t->next_all) {
        int relevant = s->legacy ? (!t->legacy && t->flags == 0 && t->ctx_id == ctx->id)
                                 : (t == ctx->legacy && s->flags == 0);
        if (!relevant || fk_done(t) >= t->enqueued)
            continue;
        if (!dep) {
            dep = fk__op_new(FK_OP_WAIT_STREAMS);
            if (!dep || !(dep->u.deps = calloc(1, sizeof(*dep->u.deps)))) {
                free(dep);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
        }
        if (dep->u.deps->n == FK_DEPS_MAX) {
            fk__log("the NULL stream waits for at most %d pending blocking streams; more are "
                    "pending, so its ordering is not emulated this time",
                    FK_DEPS_MAX);
            break;
        }
        dep->u.deps->s[dep->u.deps->n] = t;
        dep->u.deps->seq[dep->u.deps->n++] = t->enqueued;
    }
    if (dep)
        fk_stream_append(s, dep);
    return CUDA_SUCCESS;
}

CUresult fk__enqueue(struct CUstream_st *s, struct fk_op *op)
{
    CUresult rc = CUDA_SUCCESS;
    if (!fk.ctx.active || fk.ctx.stopping || s->ctx_id != fk.ctx.id)
        rc = CUDA_ERROR_CONTEXT_IS_DESTROYED;
    else if (!s->alive)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (!s->thread)
        rc = fk_stream_start(s);
    if (rc == CUDA_SUCCESS)
        rc = fk_legacy_deps(s);
    if (rc != CUDA_SUCCESS) {
        fk_op_free(op);
        return rc;
    }
    fk_stream_append(s, op);
    pthread_cond_signal(&s->cv);
    return CUDA_SUCCESS;
}

CUresult fk__stream_wait(struct CUstream_st *s)
{
    const uint64_t target = s->enqueued;
    const unsigned long long id = fk.ctx.id;
    while (fk_done(s) < target && !fk.sticky && fk.ctx.active && fk.ctx.id == id)
        pthread_cond_wait(&fk.cv, &fk.mu);
    if (fk.sticky)
        return fk.sticky;
    return fk.ctx.active && fk.ctx.id == id ? CUDA_SUCCESS : CUDA_ERROR_CONTEXT_IS_DESTROYED;
}

CUresult fk__ctx_wait(struct CUctx_st *ctx)
{
    /* What was queued when the call came, not what others queue meanwhile. */
    size_t n = 0;
    for (struct CUstream_st *t = fk.streams; t; t = t->next_all)
        n += t->ctx_id == ctx->id && fk_done(t) < t->enqueued;
    if (n == 0)
        return fk.sticky;
    struct {
        struct CUstream_st *s;
        uint64_t target;
    } *w = calloc(n, sizeof(*w));
    if (!w)
        return CUDA_ERROR_OUT_OF_MEMORY;
    size_t k = 0;
    for (struct CUstream_st *t = fk.streams; t && k < n; t = t->next_all)
        if (t->ctx_id == ctx->id && fk_done(t) < t->enqueued) {
            w[k].s = t;
            w[k++].target = t->enqueued;
        }
    const unsigned long long id = ctx->id;
    for (size_t i = 0; i < k; i++)
        while (fk_done(w[i].s) < w[i].target && !fk.sticky && ctx->active && ctx->id == id)
            pthread_cond_wait(&fk.cv, &fk.mu);
    free(w);
    if (fk.sticky)
        return fk.sticky;
    return ctx->active && ctx->id == id ? CUDA_SUCCESS : CUDA_ERROR_CONTEXT_IS_DESTROYED;
}

void fk__streams_stop(struct CUctx_st *ctx)
{
    /* Streams and events of the context die with it; queued work is dropped. */
    __atomic_store_n(&ctx->stopping, 1, __ATOMIC_RELEASE);
    for (struct CUstream_st *t = fk.streams; t; t = t->next_all)
        if (t->ctx_id == ctx->id)
            pthread_cond_signal(&t->cv);
    pthread_cond_broadcast(&fk.cv);
    while (ctx->workers > 0)
        pthread_cond_wait(&fk.cv, &fk.mu);
    for (struct CUstream_st *t = fk.streams; t; t = t->next_all) {
        if (t->ctx_id != ctx->id)
            continue;
        while (t->head) { /* queued on a stream whose thread never started */
            struct fk_op *op = t->head;
            t->head = op->next;
            __atomic_store_n(&t->completed, op->seq, __ATOMIC_RELEASE);
            fk_op_free(op);
        }
        t->tail = NULL;
        t->alive = 0;
    }
    for (struct CUevent_st *e = fk.events; e; e = e->next_all) {
        if (e->ctx_id != ctx->id)
            continue;
        e->alive = 0;
        fk_mark_put(e->last);
        e->last = NULL;
    }
    __atomic_store_n(&ctx->stopping, 0, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&fk.cv);
}

/* ---- stream handles ---- */

static struct CUstream_st *fk_stream_new(unsigned int flags, int legacy)
{
    struct CUstream_st *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    pthread_cond_init(&s->cv, NULL);
    s->ctx_id = fk.ctx.id;
    s->flags = flags;
    s->legacy = legacy;
    s->alive = 1;
    s->next_all = fk.streams;
    fk.streams = s;
    return s;
}

CUresult fk__stream_resolve(const char *fn, CUstream h, struct CUstream_st **s_p)
{
    if (h == NULL || h == CU_STREAM_LEGACY) {
        if (!fk__current)
            return CUDA_ERROR_INVALID_CONTEXT;
        if (!fk__current->active)
            return CUDA_ERROR_CONTEXT_IS_DESTROYED;
        if (!fk.ctx.legacy && !(fk.ctx.legacy = fk_stream_new(0, 1)))
            return CUDA_ERROR_OUT_OF_MEMORY;
        *s_p = fk.ctx.legacy;
        return CUDA_SUCCESS;
    }
    if (h == CU_STREAM_PER_THREAD)
        return fk__refuse(fn, CUDA_ERROR_NOT_SUPPORTED,
                          "the per-thread default stream is not emulated");
    if (!fk__is_stream(h))
        return fk__refuse(fn, CUDA_ERROR_INVALID_HANDLE, "%p is not a stream", (void *)h);
    if (h->ctx_id != fk.ctx.id || !fk.ctx.active)
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if (!h->alive)
        return fk__refuse(fn, CUDA_ERROR_INVALID_HANDLE,
                          "stream %p was destroyed (using it is undefined on a real GPU)",
                          (void *)h);
    *s_p = h;
    return CUDA_SUCCESS;
}

CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    CUresult rc = fk__enter("cuStreamCreate", FK_CTX | FK_LIVE | FK_ENQUEUE);
    if (rc)
        return rc;
    if (!phStream || (Flags & ~(unsigned int)CU_STREAM_NON_BLOCKING))
        return fk__leave("cuStreamCreate", CUDA_ERROR_INVALID_VALUE);
    struct CUstream_st *s = fk_stream_new(Flags, 0);
    if (!s)
        return fk__leave("cuStreamCreate", CUDA_ERROR_OUT_OF_MEMORY);
    *phStream = s;
    return fk__leave("cuStreamCreate", CUDA_SUCCESS);
}

CUresult cuStreamDestroy(CUstream hStream)
{
    CUresult rc = fk__enter("cuStreamDestroy", FK_LIVE | FK_ENQUEUE);
    if (rc)
        return rc;
    struct CUstream_st *s = NULL;
    if (!hStream || hStream == CU_STREAM_LEGACY)
        return fk__leave("cuStreamDestroy", CUDA_ERROR_INVALID_HANDLE);
    if ((rc = fk__stream_resolve("cuStreamDestroy", hStream, &s)) != CUDA_SUCCESS)
        return fk__leave("cuStreamDestroy", rc);
    /* Returns at once; queued work still runs, then the thread ends. */
    s->alive = 0;
    pthread_cond_signal(&s->cv);
    return fk__leave("cuStreamDestroy", CUDA_SUCCESS);
}

/* A host function that is running gets this long to return before another
 * thread's cuStreamQuery answers: a GPU marks one done microseconds after it
 * returns, while a stream thread here, descheduled on a loaded machine, can
 * take many milliseconds, and callers answered by the host function itself
 * (a completion) would then see their stream busy far more often than on a
 * GPU (see README.md). */
#define FK_HOSTFN_GRACE_NS 100000000L /* none with FAKECUDA_HOSTFN_LAG_US */

CUresult cuStreamQuery(CUstream hStream)
{
    CUresult rc = fk__enter("cuStreamQuery", FK_LIVE);
    if (rc)
        return rc;
    struct CUstream_st *s = NULL;
    if ((rc = fk__stream_resolve("cuStreamQuery", hStream, &s)) != CUDA_SUCCESS)
        return fk__leave("cuStreamQuery", rc);
    if (s->in_hostfn && !fk__in_hostfn && !fk.cfg.hostfn_lag_us) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += FK_HOSTFN_GRACE_NS;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (s->in_hostfn && !fk.sticky &&
               pthread_cond_timedwait(&fk.cv, &fk.mu, &until) == 0)
            ;
    }
    if (fk.sticky)
        rc = fk.sticky;
    else
        rc = fk_done(s) == s->enqueued ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
    return fk__leave("cuStreamQuery", rc);
}

CUresult cuStreamSynchronize(CUstream hStream)
{
    CUresult rc = fk__enter("cuStreamSynchronize", FK_LIVE | FK_ENQUEUE);
    if (rc)
        return rc;
    struct CUstream_st *s = NULL;
    if ((rc = fk__stream_resolve("cuStreamSynchronize", hStream, &s)) == CUDA_SUCCESS)
        rc = fk__stream_wait(s);
    return fk__leave("cuStreamSynchronize", rc);
}

CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
    CUresult rc = fk__enter("cuLaunchHostFunc", FK_LIVE | FK_ENQUEUE);
    if (rc)
        return rc;
    struct CUstream_st *s = NULL;
    if (!fn)
        return fk__leave("cuLaunchHostFunc", CUDA_ERROR_INVALID_VALUE);
    if ((rc = fk__stream_resolve("cuLaunchHostFunc", hStream, &s)) != CUDA_SUCCESS)
        return fk__leave("cuLaunchHostFunc", rc);
    struct fk_op *op = fk__op_new(FK_OP_HOSTFN);
    if (!op)
        return fk__leave("cuLaunchHostFunc", CUDA_ERROR_OUT_OF_MEMORY);
    op->u.host.fn = fn;
    op->u.host.data = userData;
    return fk__leave("cuLaunchHostFunc", fk__enqueue(s, op));
}

/* Shared checks of the 64-bit stream memory operations: an 8-byte aligned
 * word the device can reach. */
static CUresult fk_word_queue(const char *fn, CUstream h, CUdeviceptr addr, cuuint64_t value,
                              unsigned int flags, enum fk_op_kind kind)
{
    CUresult rc = fk__enter(fn, FK_LIVE | FK_ENQUEUE);
    if (rc)
        return rc;
    struct CUstream_st *s = NULL;
    if ((rc = fk__stream_resolve(fn, h, &s)) != CUDA_SUCCESS)
        return fk__leave(fn, rc);
    unsigned int allowed = kind == FK_OP_WAIT_VALUE ? 0x3u | CU_STREAM_WAIT_VALUE_FLUSH
                                                    : CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER;
    if (addr % 8 != 0 || (flags & ~allowed) || !fk__range_find(&fk.ctx, (uint64_t)addr, 8))
        return fk__leave(fn, CUDA_ERROR_INVALID_VALUE);
    struct fk_op *op = fk__op_new(kind);
    if (!op)
        return fk__leave(fn, CUDA_ERROR_OUT_OF_MEMORY);
    op->u.word.addr = (uint64_t)addr;
    op->u.word.value = (uint64_t)value;
    op->u.word.flags = flags;
    return fk__leave(fn, fk__enqueue(s, op));
}

CUresult cuStreamWaitValue64(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                             unsigned int flags)
{
    return fk_word_queue("cuStreamWaitValue64", stream, addr, value, flags, FK_OP_WAIT_VALUE);
}

CUresult cuStreamWriteValue64(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                              unsigned int flags)
{
    return fk_word_queue("cuStreamWriteValue64", stream, addr, value, flags, FK_OP_WRITE_VALUE);
}

/* ---- events ---- */

static CUresult fk_event_resolve(const char *fn, CUevent h, struct CUevent_st **e_p)
{
    if (!h || !fk__is_event(h))
        return fk__refuse(fn, CUDA_ERROR_INVALID_HANDLE, "%p is not an event", (void *)h);
    if (h->ctx_id != fk.ctx.id || !fk.ctx.active)
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if (!h->alive)
        return fk__refuse(fn, CUDA_ERROR_INVALID_HANDLE,
                          "event %p was destroyed (using it is undefined on a real GPU)",
                          (void *)h);
    *e_p = h;
    return CUDA_SUCCESS;
}

CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    CUresult rc = fk__enter("cuEventCreate", FK_CTX | FK_LIVE | FK_ENQUEUE);
    if (rc)
        return rc;
    const unsigned int known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING |
                               CU_EVENT_INTERPROCESS;
    if (!phEvent || (Flags & ~known) ||
        ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING)))
        return fk__leave("cuEventCreate", CUDA_ERROR_INVALID_VALUE);
    if (Flags & CU_EVENT_INTERPROCESS)
        return fk__leave("cuEventCreate",
                         fk__refuse("cuEventCreate", CUDA_ERROR_NOT_SUPPORTED,
                                    "interprocess events are not emulated"));
    struct CUevent_st *e = calloc(1, sizeof(*e));
    if (!e)
        return fk__leave("cuEventCreate", CUDA_ERROR_OUT_OF_MEMORY);
    e->ctx_id = fk.ctx.id;
    e->flags = Flags;
    e->alive = 1;
    e->next_all = fk.events;
    fk.events = e;
    *phEvent = e;
    return fk__leave("cuEventCreate", CUDA_SUCCESS);
}

CUresult cuEventDestroy(CUevent hEvent)
{
    CUresult rc = fk__enter("cuEventDestroy", FK_LIVE | FK_ENQUEUE);
    if (rc)
        return rc;
    struct CUevent_st *e = NULL;
    if ((rc = fk_event_resolve("cuEventDestroy", hEvent, &e)) != CUDA_SUCCESS)
        return fk__leave("cuEventDestroy", rc);
    /* A pending record still completes: its operation holds the mark. */
    e->alive = 0;
    fk_mark_put(e->last);
    e->last = NULL;
    return fk__leave("cuEventDestroy", CUDA_SUCCESS);
}

CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
    CUresult rc = fk__enter("cuEventRecord", FK_LIVE | FK_ENQUEUE);
    if (rc)
        return rc;
    struct CUevent_st *e = NULL;
    struct CUstream_st *s = NULL;
    if ((rc = fk_event_resolve("cuEventRecord", hEvent, &e)) != CUDA_SUCCESS ||
        (rc = fk__stream_resolve("cuEventRecord", hStream, &s)) != CUDA_SUCCESS)
        return fk__leave("cuEventRecord", rc);
    struct fk_mark *m = fk_mark_new();
    struct fk_op *op = m ? fk__op_new(FK_OP_RECORD) : NULL;
    if (!op) {
        free(m);
        return fk__leave("cuEventRecord", CUDA_ERROR_OUT_OF_MEMORY);
    }
    m->refs++; /* one for the event, one for the operation */
    op->u.mark = m;
    if ((rc = fk__enqueue(s, op)) != CUDA_SUCCESS) {
        fk_mark_put(m);
        return fk__leave("cuEventRecord", rc);
    }
    fk_mark_put(e->last);
    e->last = m;
    return fk__leave("cuEventRecord", CUDA_SUCCESS);
}

CUresult cuEventQuery(CUevent hEvent)
{
    CUresult rc = fk__enter("cuEventQuery", FK_LIVE);
    if (rc)
        return rc;
    struct CUevent_st *e = NULL;
    if ((rc = fk_event_resolve("cuEventQuery", hEvent, &e)) == CUDA_SUCCESS)
        rc = !e->last || e->last->done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
    return fk__leave("cuEventQuery", rc);
}

CUresult cuEventSynchronize(CUevent hEvent)
{
    CUresult rc = fk__enter("cuEventSynchronize", FK_LIVE | FK_ENQUEUE);
    if (rc)
        return rc;
    struct CUevent_st *e = NULL;
    if ((rc = fk_event_resolve("cuEventSynchronize", hEvent, &e)) != CUDA_SUCCESS)
        return fk__leave("cuEventSynchronize", rc);
    struct fk_mark *m = e->last;
    if (!m)
        return fk__leave("cuEventSynchronize", CUDA_SUCCESS);
    const unsigned long long id = fk.ctx.id;
    m->refs++;
    while (!m->done && !fk.sticky && fk.ctx.active && fk.ctx.id == id)
        pthread_cond_wait(&fk.cv, &fk.mu);
    rc = fk.sticky ? fk.sticky : m->done ? CUDA_SUCCESS : CUDA_ERROR_CONTEXT_IS_DESTROYED;
    fk_mark_put(m);
    return fk__leave("cuEventSynchronize", rc);
}

CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    CUresult rc = fk__enter("cuStreamWaitEvent", FK_LIVE | FK_ENQUEUE);
    if (rc)
        return rc;
    struct CUstream_st *s = NULL;
    struct CUevent_st *e = NULL;
    if (Flags != CU_EVENT_WAIT_DEFAULT)
        return fk__leave("cuStreamWaitEvent", Flags == CU_EVENT_WAIT_EXTERNAL
                                                  ? fk__refuse("cuStreamWaitEvent",
                                                               CUDA_ERROR_NOT_SUPPORTED,
                                                               "external waits are not emulated")
                                                  : CUDA_ERROR_INVALID_VALUE);
    if ((rc = fk__stream_resolve("cuStreamWaitEvent", hStream, &s)) != CUDA_SUCCESS ||
        (rc = fk_event_resolve("cuStreamWaitEvent", hEvent, &e)) != CUDA_SUCCESS)
        return fk__leave("cuStreamWaitEvent", rc);
    if (!e->last || e->last->done)
        return fk__leave("cuStreamWaitEvent", CUDA_SUCCESS);
    struct fk_op *op = fk__op_new(FK_OP_WAIT_MARK);
    if (!op)
        return fk__leave("cuStreamWaitEvent", CUDA_ERROR_OUT_OF_MEMORY);
    op->u.mark = e->last;
    e->last->refs++;
    return fk__leave("cuStreamWaitEvent", fk__enqueue(s, op));
}

CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    CUresult rc = fk__enter("cuEventElapsedTime", FK_LIVE);
    if (rc)
        return rc;
    struct CUevent_st *a = NULL, *b = NULL;
    if (!pMilliseconds)
        return fk__leave("cuEventElapsedTime", CUDA_ERROR_INVALID_VALUE);
    if ((rc = fk_event_resolve("cuEventElapsedTime", hStart, &a)) != CUDA_SUCCESS ||
        (rc = fk_event_resolve("cuEventElapsedTime", hEnd, &b)) != CUDA_SUCCESS)
        return fk__leave("cuEventElapsedTime", rc);
    if (((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) || !a->last || !b->last)
        return fk__leave("cuEventElapsedTime", CUDA_ERROR_INVALID_HANDLE);
    if (!a->last->done || !b->last->done)
        return fk__leave("cuEventElapsedTime", CUDA_ERROR_NOT_READY);
    int64_t ns = (int64_t)(b->last->ns - a->last->ns);
    *pMilliseconds = (float)((double)ns / 1e6);
    return fk__leave("cuEventElapsedTime", CUDA_SUCCESS);
}
