/* cuMemHostRegister as a lease registration backend. Calls may land on any
 * worker thread, so each one makes the agent's context current first. Every
 * CUresult goes through GA_CU and its one map to -errno (errmap.c).
 *
 * A segment evicted or destroyed is unregistered by the reaper thread
 * (retire_range): cuMemHostUnregister waits for every queued operation on
 * the device, and a client's doorbell wait (cuStreamWaitValue64) lasts
 * until that client rings it or goes, which the agent's loop must be free
 * to see. The service learns through each job's done callback that the
 * driver has let go of the range (and only then unmaps a destroyed one, so
 * its addresses are not reused before).
 *
 * The reaper alone is not enough: while a cuMemHostUnregister waits, every
 * other driver call in the context blocks, from any thread (measured on the
 * H200, bench/unregister_probe.c: a 1 MiB copy and a host function on
 * another stream took 1901 ms instead of 0.12 ms, released only when the
 * stalled stream's word was written). So before each unregistration the
 * reaper asks the executor's gate (gpu/executor_cuda.h) whether a wait only
 * a client can end (an unrung bell, a ring's unstored word) has stood for
 * more than CUDA_GATE_GRACE_MS; while one has, it defers (the bytes keep
 * counting as retiring, so the budget stays honest), and a wait standing
 * for --bell-timeout is released by the agent. A wait queued just after
 * the check is the watchdog's: an unregistration pending in the driver for
 * CUDA_WATCHDOG_MS gets every client wait older than the grace released,
 * by CPU stores. The
 * watchdog watches the unregistrations made in place too (a failed
 * registration's unwind, the service's fallback without a reaper), which
 * pass no gate. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/time.h"
#include "cu_call.h"
#include "ga_internal.h"
#include "gpu/executor_cuda.h"
#include "gpu/lease_backend.h"

/* A client wait unsatisfied for longer defers an unregistration: a
 * streaming job's waits are met within ms, a stalled one's are not. */
#define CUDA_GATE_GRACE_MS 30u
#define CUDA_GATE_POLL_MS 5u
/* An unregistration pending in the driver this long is stuck behind a
 * client's wait queued after the gate's check: the watchdog releases it. */
#define CUDA_WATCHDOG_MS 100u

struct cuda_ctx {
    CUcontext ctx;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct lease_retire *head, *tail; /* the reaper's queue, in order */
    bool reaper_started;
    bool stopping;
    pthread_t reaper;
    /* the gate (gate_mu: held across each call of it, so clearing it
     * waits for one in progress) */
    pthread_mutex_t gate_mu;
    struct ga_cuda_retire_gate gate;
    bool have_gate;
    uint64_t bell_timeout_ns;
    /* the watchdog (mu): unregistrations in the driver now, whoever called
     * them, and since when the first of them has waited (0: none) */
    uint32_t unreg_pending;
    uint64_t unreg_since;
    pthread_cond_t wd_cv;
    pthread_t watchdog;
    bool watchdog_started;
};

/* The protocol code for a driver refusal: no lockable memory, a capability
 * the device lacks, or the driver's own failure. */
static uint32_t cu_code(int rc)
{
    if (rc == -ENOMEM)
        return LT_E_MEMLOCK;
    if (rc == -ENOTSUP)
        return LT_E_UNSUPPORTED;
    return LT_E_GPU_FAULT;
}

/* Explains the failed call to the client in what the wire holds
 * (LT_ERROR_MSG_LEN): the driver function, the bytes and the error's name,
 * or without the bytes where those do not fit. The whole call and the
 * address are in the log line GA_CU wrote. */
static int cu_fail(struct lt_failure *why_p, const char *call, CUresult res, int rc,
                   const void *base, uint64_t length)
{
    (void)base;
    int fn = (int)strcspn(call, "(");
    int rc_set = lt_failure_set(why_p, cu_code(rc), rc, "the driver refused %.*s of %" PRIu64
                                " bytes: %s", fn, call, length, ga_cu_name(res));
    if (why_p && strlen(why_p->message) >= LT_ERROR_MSG_LEN)
        lt_failure_set(why_p, cu_code(rc), rc, "the driver refused %.*s: %s", fn, call,
                       ga_cu_name(res));
    return rc_set;
}

#define CU_TRY(why_p, call, base, length)                                                          \
    do {                                                                                           \
        CUresult res_ = CUDA_SUCCESS;                                                              \
        int rc_ = ga_cu_check(res_ = (call), #call, __FILE__, __LINE__);                           \
        if (rc_ < 0)                                                                               \
            return cu_fail(why_p, #call, res_, rc_, base, length);                                 \
    } while (0)

static int cuda_unregister_watched(struct cuda_ctx *c, void *base, uint64_t length,
                                   struct lt_failure *why_p);

/* @ro: the lease service mapped the range read-only (sealed
 * F_SEAL_FUTURE_WRITE): without READ_ONLY the pin would ask for write
 * access and fail, and with it the device can only read the pages. */
static int cuda_register_flags(void *ctx, void *base, uint64_t length, enum lt_class cls, int ro,
                               uint64_t *dev_ptr_p, struct lt_failure *why_p)
{
    struct cuda_ctx *c = ctx;
    unsigned flags = CU_MEMHOSTREGISTER_PORTABLE | (ro ? CU_MEMHOSTREGISTER_READ_ONLY : 0u);
    if (cls == LT_CLASS_MAPPED)
        flags |= CU_MEMHOSTREGISTER_DEVICEMAP;
    else if (cls != LT_CLASS_PINNED)
        return lt_failure_set(why_p, LT_E_BAD_CLASS, -EINVAL,
                              "cuda backend: expected class PINNED or MAPPED, found %s",
                              lt_class_name(cls));
    CU_TRY(why_p, cuCtxSetCurrent(c->ctx), base, length);
    CU_TRY(why_p, cuMemHostRegister(base, (size_t)length, flags), base, length);
    CUdeviceptr dev = 0;
    if (cls == LT_CLASS_MAPPED) {
        CUresult res = CUDA_SUCCESS;
        int rc = GA_CU_R(cuMemHostGetDevicePointer(&dev, base, 0), &res);
        if (rc < 0) {
            /* Undo the registration; if that fails too, its error is the one to see. */
            int urc = cuda_unregister_watched(c, base, length, why_p);
            if (urc < 0)
                return urc;
            return cu_fail(why_p, "cuMemHostGetDevicePointer(&dev, base, 0)", res, rc, base,
                           length);
        }
    }
    *dev_ptr_p = (uint64_t)dev;
    return 0;
}

static int cuda_register(void *ctx, void *base, uint64_t length, enum lt_class cls,
                         uint64_t *dev_ptr_p, struct lt_failure *why_p)
{
    return cuda_register_flags(ctx, base, length, cls, 0, dev_ptr_p, why_p);
}

static int cuda_register_ro(void *ctx, void *base, uint64_t length, enum lt_class cls,
                            uint64_t *dev_ptr_p, struct lt_failure *why_p)
{
    return cuda_register_flags(ctx, base, length, cls, 1, dev_ptr_p, why_p);
}

static void *cuda_watchdog_main(void *arg);

/* Locked (mu). Starts the watchdog on first need; false if it cannot run. */
static bool cuda_watchdog_ensure_locked(struct cuda_ctx *c)
{
    if (!c->watchdog_started && !c->stopping &&
        pthread_create(&c->watchdog, NULL, cuda_watchdog_main, c) == 0)
        c->watchdog_started = true;
    return c->watchdog_started;
}

/* cuMemHostUnregister under the watchdog, on whichever thread: the
 * reaper's, or a caller's own when a failed registration is unwound, the
 * reaper cannot start or (the service's re-registration) the service lock
 * is held. Any of them can be stuck behind a client's wait the gate never
 * saw, and the watchdog releases that wait after CUDA_WATCHDOG_MS. */
static int cuda_unregister_watched(struct cuda_ctx *c, void *base, uint64_t length,
                                   struct lt_failure *why_p)
{
    pthread_mutex_lock(&c->mu);
    bool watched = cuda_watchdog_ensure_locked(c);
    if (watched && c->unreg_pending++ == 0) {
        c->unreg_since = base_now_ns();
        pthread_cond_signal(&c->wd_cv);
    }
    pthread_mutex_unlock(&c->mu);
    CUresult res = CUDA_SUCCESS;
    int rc = GA_CU_R(cuCtxSetCurrent(c->ctx), &res);
    const char *call = "cuCtxSetCurrent(c->ctx)";
    if (rc == 0) {
        rc = GA_CU_R(cuMemHostUnregister(base), &res);
        call = "cuMemHostUnregister(base)";
    }
    if (watched) {
        pthread_mutex_lock(&c->mu);
        if (--c->unreg_pending == 0)
            c->unreg_since = 0;
        pthread_mutex_unlock(&c->mu);
    }
    return rc < 0 ? cu_fail(why_p, call, res, rc, base, length) : 0;
}

static int cuda_unregister(void *ctx, void *base, uint64_t length, enum lt_class cls,
                           struct lt_failure *why_p)
{
    (void)cls;
    return cuda_unregister_watched(ctx, base, length, why_p);
}

/* The gate's stall (ns); 0 without a gate. With @older_ns, first releases
 * the waits standing that long. */
static uint64_t cuda_gate_ask(struct cuda_ctx *c, uint64_t older_ns, const char *why)
{
    uint64_t stalled = 0;
    pthread_mutex_lock(&c->gate_mu);
    if (c->have_gate) {
        if (older_ns)
            c->gate.release(c->gate.arg, older_ns, why);
        stalled = c->gate.stalled_ns(c->gate.arg);
    }
    pthread_mutex_unlock(&c->gate_mu);
    return stalled;
}

/* Defers the unregistration of @base + @len while a client's wait has stood
 * unsatisfied past the grace; releases waits standing --bell-timeout. */
static void cuda_defer(struct cuda_ctx *c, const void *base, uint64_t len)
{
    const uint64_t grace = (uint64_t)CUDA_GATE_GRACE_MS * 1000000u;
    uint64_t t0 = base_now_ns(), stalled = cuda_gate_ask(c, 0, NULL);
    bool told = false;
    while (stalled > grace) {
        if (!told) {
            ga__info("cuda backend: unregistering %p + %" PRIu64 " bytes deferred: a client's "
                     "wait has stood unsatisfied for %" PRIu64 " ms (at most --bell-timeout "
                     "%" PRIu64 " ms)",
                     base, len, stalled / 1000000u, c->bell_timeout_ns / 1000000u);
            told = true;
        }
        bool release = stalled >= c->bell_timeout_ns;
        if (!release)
            base_sleep_ns((uint64_t)CUDA_GATE_POLL_MS * 1000000u);
        stalled = cuda_gate_ask(c, release ? c->bell_timeout_ns : 0,
                                "it deferred the unregistration of pinned memory for "
                                "--bell-timeout");
        if (release && stalled > grace)
            base_sleep_ns((uint64_t)CUDA_GATE_POLL_MS * 1000000u); /* a word that faults */
    }
    if (told)
        ga__info("cuda backend: unregistering %p + %" PRIu64 " bytes after %" PRIu64 " ms deferred",
                 base, len, (base_now_ns() - t0) / 1000000u);
}

/* Releases every client wait older than the grace while an unregistration
 * has been pending in the driver for CUDA_WATCHDOG_MS (no driver call: the
 * driver is blocked). */
static void *cuda_watchdog_main(void *arg)
{
    struct cuda_ctx *c = arg;
    const uint64_t bound = (uint64_t)CUDA_WATCHDOG_MS * 1000000u;
    const uint64_t grace = (uint64_t)CUDA_GATE_GRACE_MS * 1000000u;
    pthread_mutex_lock(&c->mu);
    while (!c->stopping || c->unreg_since) {
        if (!c->unreg_since) {
            pthread_cond_wait(&c->wd_cv, &c->mu);
            continue;
        }
        uint64_t since = c->unreg_since, now = base_now_ns();
        if (now - since < bound) {
            struct timespec until = base_deadline_ns(bound - (now - since));
            pthread_cond_timedwait(&c->wd_cv, &c->mu, &until);
            continue;
        }
        c->unreg_since = now; /* again in CUDA_WATCHDOG_MS if it still waits */
        pthread_mutex_unlock(&c->mu);
        pthread_mutex_lock(&c->gate_mu);
        /* Waits younger than the gate's grace are a streaming client's,
         * met within ms, or queued a moment ago: the next round takes them
         * if they still stand. */
        uint32_t n = c->have_gate ? c->gate.release(c->gate.arg, grace,
                                                    "an unregistration of pinned memory waited "
                                                    "behind it in the driver, which blocks every "
                                                    "client's GPU work meanwhile")
                                  : 0;
        pthread_mutex_unlock(&c->gate_mu);
        ga__err("cuda backend: an unregistration has been pending in the driver for over %u ms; "
                "%" PRIu32 " client wait(s) released",
                CUDA_WATCHDOG_MS, n);
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Unregisters each chunk of @r (failures logged), each one behind the
 * gate and under the watchdog, then hands it back. */
static void cuda_retired_release(struct cuda_ctx *c, struct lease_retire *r)
{
    char *base = r->base;
    uint64_t chunk = r->chunk_bytes ? r->chunk_bytes : r->size;
    for (uint64_t off = 0; off < r->size; off += chunk) {
        uint64_t len = r->size - off < chunk ? r->size - off : chunk;
        struct lt_failure f = {0};
        cuda_defer(c, base + off, len);
        int rc = cuda_unregister_watched(c, base + off, len, &f);
        if (rc < 0)
            ga__err("%s", f.message);
    }
    r->done(r);
}

static void *cuda_reaper_main(void *arg)
{
    struct cuda_ctx *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        struct lease_retire *r = c->head;
        if (!r) {
            if (c->stopping)
                break;
            pthread_cond_wait(&c->cv, &c->mu);
            continue;
        }
        c->head = r->next;
        if (!c->head)
            c->tail = NULL;
        pthread_mutex_unlock(&c->mu);
        cuda_retired_release(c, r);
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Queues @r for the reaper, started on first need. Without a thread it
 * declines (-EAGAIN): the service unregisters in place, as before. */
static int cuda_retire(void *ctx, struct lease_retire *r)
{
    struct cuda_ctx *c = ctx;
    int rc = 0;
    r->next = NULL;
    pthread_mutex_lock(&c->mu);
    if (!cuda_watchdog_ensure_locked(c))
        rc = EAGAIN;
    if (c->watchdog_started && !c->reaper_started && !c->stopping &&
        (rc = pthread_create(&c->reaper, NULL, cuda_reaper_main, c)) == 0)
        c->reaper_started = true;
    if (c->reaper_started) {
        if (c->tail)
            c->tail->next = r;
        else
            c->head = r;
        c->tail = r;
        pthread_cond_signal(&c->cv);
    }
    bool queued = c->reaper_started;
    pthread_mutex_unlock(&c->mu);
    if (queued)
        return 0;
    ga__err("cuda backend: no reaper thread (%s) for %p + %" PRIu64
            " bytes: unregistered on the caller's thread",
            rc ? strerror(rc) : "stopping", r->base, r->size);
    return rc ? -rc : -EAGAIN;
}

/* The reaper releases what is queued, then ends. */
static void cuda_fini(void *ctx)
{
    struct cuda_ctx *c = ctx;
    pthread_mutex_lock(&c->mu);
    c->stopping = true;
    pthread_cond_signal(&c->cv);
    bool started = c->reaper_started;
    pthread_mutex_unlock(&c->mu);
    if (started)
        pthread_join(c->reaper, NULL);
    pthread_mutex_lock(&c->mu);
    pthread_cond_signal(&c->wd_cv);
    bool wd = c->watchdog_started;
    pthread_mutex_unlock(&c->mu);
    if (wd)
        pthread_join(c->watchdog, NULL);
    pthread_cond_destroy(&c->wd_cv);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->gate_mu);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void ga_cuda_lease_backend_gate(struct lease_backend *backend,
                                const struct ga_cuda_retire_gate *gate, uint32_t bell_timeout_ms)
{
    if (!backend || backend->retire_range != cuda_retire)
        return; /* not this backend: nothing asks */
    struct cuda_ctx *c = backend->ctx;
    pthread_mutex_lock(&c->gate_mu);
    c->have_gate = gate != NULL;
    if (gate)
        c->gate = *gate;
    c->bell_timeout_ns =
        (uint64_t)(bell_timeout_ms ? bell_timeout_ms : GA_CUDA_BELL_TIMEOUT_MS_DEFAULT) * 1000000u;
    pthread_mutex_unlock(&c->gate_mu);
}

int ga_cuda_lease_backend_init(CUcontext ctx, uint64_t chunk_bytes, struct lease_backend *backend_p,
                               struct lt_failure *why_p)
{
    long page = sysconf(_SC_PAGESIZE);
    if (!ctx || !backend_p)
        return lt_failure_set(why_p, LT_E_BAD_VALUE, -EINVAL,
                              "cuda backend: expected a context and an output pointer");
    char err[512];
    if (ga_cu_load(err, sizeof err) < 0)
        return lt_failure_set(why_p, LT_E_UNSUPPORTED, -ENODEV,
                              "cuda backend: no NVIDIA driver: %s", err);
    if (chunk_bytes == 0)
        chunk_bytes = GA_CUDA_LEASE_CHUNK_DEFAULT;
    if (chunk_bytes % (uint64_t)page != 0 || chunk_bytes > GA_CUDA_LEASE_CHUNK_MAX)
        return lt_failure_set(why_p, LT_E_BAD_VALUE, -EINVAL,
                              "cuda backend: chunk size: expected a multiple of %ld bytes up to "
                              "%llu, found %" PRIu64,
                              page, GA_CUDA_LEASE_CHUNK_MAX, chunk_bytes);
    struct cuda_ctx *c = malloc(sizeof(*c));
    if (!c)
        return lt_failure_set(why_p, LT_E_SYSTEM, -ENOMEM, "cuda backend: out of memory");
    c->ctx = ctx;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->head = c->tail = NULL;
    c->reaper_started = false;
    c->stopping = false;
    pthread_mutex_init(&c->gate_mu, NULL);
    c->have_gate = false;
    c->bell_timeout_ns = (uint64_t)GA_CUDA_BELL_TIMEOUT_MS_DEFAULT * 1000000u;
    c->unreg_pending = 0;
    c->unreg_since = 0;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->wd_cv, &ca);
    pthread_condattr_destroy(&ca);
    c->watchdog_started = false;
    *backend_p = (struct lease_backend){
        .name = "cuda (cuMemHostRegister)",
        .ctx = c,
        .chunk_bytes = chunk_bytes,
        .register_range = cuda_register,
        .unregister_range = cuda_unregister,
        .capacity = NULL,
        .fini = cuda_fini,
        .register_range_ro = cuda_register_ro,
        .retire_range = cuda_retire,
    };
    return 0;
}
