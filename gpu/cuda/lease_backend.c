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
 * its addresses are not reused before). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cu_call.h"
#include "ga_internal.h"
#include "gpu/lease_backend.h"

struct cuda_ctx {
    CUcontext ctx;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct lease_retire *head, *tail; /* the reaper's queue, in order */
    bool reaper_started;
    bool stopping;
    pthread_t reaper;
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

/* Explains the failed call: its text, the driver's error name and the range. */
static int cu_fail(struct lt_failure *why_p, const char *call, CUresult res, int rc,
                   const void *base, uint64_t length)
{
    return lt_failure_set(why_p, cu_code(rc), rc,
                          "cuda backend: %s on %p + %" PRIu64 " bytes failed: %s (%d)", call, base,
                          length, ga_cu_name(res), (int)res);
}

#define CU_TRY(why_p, call, base, length)                                                          \
    do {                                                                                           \
        CUresult res_ = CUDA_SUCCESS;                                                              \
        int rc_ = ga_cu_check(res_ = (call), #call, __FILE__, __LINE__);                           \
        if (rc_ < 0)                                                                               \
            return cu_fail(why_p, #call, res_, rc_, base, length);                                 \
    } while (0)

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
            CU_TRY(why_p, cuMemHostUnregister(base), base, length);
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

static int cuda_unregister(void *ctx, void *base, uint64_t length, enum lt_class cls,
                           struct lt_failure *why_p)
{
    struct cuda_ctx *c = ctx;
    (void)cls;
    CU_TRY(why_p, cuCtxSetCurrent(c->ctx), base, length);
    CU_TRY(why_p, cuMemHostUnregister(base), base, length);
    return 0;
}

/* Unregisters each chunk of @r (failures logged), then hands it back. */
static void cuda_retired_release(struct cuda_ctx *c, struct lease_retire *r)
{
    char *base = r->base;
    uint64_t chunk = r->chunk_bytes ? r->chunk_bytes : r->size;
    for (uint64_t off = 0; off < r->size; off += chunk) {
        uint64_t len = r->size - off < chunk ? r->size - off : chunk;
        struct lt_failure f = {0};
        if (cuda_unregister(c, base + off, len, r->cls, &f) < 0)
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
    if (!c->reaper_started && !c->stopping &&
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
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
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
