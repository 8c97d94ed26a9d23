/* The host backend: mlock stands in for cuMemHostRegister on machines without
 * a GPU, with RLIMIT_MEMLOCK checked up front so a refusal carries numbers. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "internal.h"

struct host_ctx {
    pthread_mutex_t mu;
    uint64_t locked;
};

/* The soft limit, UINT64_MAX when unlimited. */
static int memlock_limit(uint64_t *limit_p, struct lt_failure *why_p)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) < 0)
        return lt_failure_set(why_p, LT_E_SYSTEM, -errno, "getrlimit(RLIMIT_MEMLOCK) failed: %s",
                              strerror(errno));
    *limit_p = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
    return 0;
}

/* This process's locked memory as the kernel counts it (VmLck), 0 when
 * unreadable. */
static uint64_t vmlck_bytes(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[128];
    uint64_t kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmLck: %" SCNu64 " kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb * 1024;
}

static int host_register(void *ctx, void *base, uint64_t length, enum lt_class cls,
                         uint64_t *dev_ptr_p, struct lt_failure *why_p)
{
    struct host_ctx *h = ctx;
    uint64_t limit = UINT64_MAX;
    int rc = memlock_limit(&limit, why_p);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&h->mu);
    /* Checked here even for root (CAP_IPC_LOCK ignores the limit) so the host
     * backend behaves the same for every user. */
    if (limit != UINT64_MAX && (length > limit || h->locked > limit - length)) {
        uint64_t locked = h->locked;
        pthread_mutex_unlock(&h->mu);
        return lt_failure_set(why_p, LT_E_MEMLOCK, -ENOMEM,
                              "host backend: %" PRIu64 " more %s bytes exceed RLIMIT_MEMLOCK "
                              "%" PRIu64 " (%" PRIu64 " locked)",
                              length, lt_class_name(cls), limit, locked);
    }
    if (mlock(base, (size_t)length) < 0) {
        rc = -errno;
        uint64_t locked = h->locked;
        pthread_mutex_unlock(&h->mu);
        /* ENOMEM is RLIMIT_MEMLOCK only when the process's locked memory
         * (VmLck) really would pass it; otherwise the range could not be
         * faulted in or the mappings split (vm.max_map_count). */
        uint64_t vmlck = vmlck_bytes();
        bool memlock = rc == -ENOMEM && limit != UINT64_MAX && vmlck + length > limit;
        return lt_failure_set(why_p, memlock ? LT_E_MEMLOCK : LT_E_SYSTEM, rc,
                              "host backend: mlock of %" PRIu64 " bytes failed: %s "
                              "(%" PRIu64 " locked here, VmLck %" PRIu64 ", RLIMIT_MEMLOCK %" PRIu64
                              ")%s",
                              length, strerror(-rc), locked, vmlck, limit,
                              rc == -ENOMEM && !memlock
                                  ? ": not the lock limit: pages that cannot be faulted in, "
                                    "or vm.max_map_count"
                                  : "");
    }
    h->locked += length;
    pthread_mutex_unlock(&h->mu);
    /* Host memory is what the CPU reference kernels dereference. */
    *dev_ptr_p = cls == LT_CLASS_MAPPED ? (uint64_t)(uintptr_t)base : 0;
    return 0;
}

static int host_unregister(void *ctx, void *base, uint64_t length, enum lt_class cls,
                           struct lt_failure *why_p)
{
    struct host_ctx *h = ctx;
    (void)cls;
    if (munlock(base, (size_t)length) < 0)
        return lt_failure_set(why_p, LT_E_SYSTEM, -errno,
                              "host backend: munlock of %" PRIu64 " bytes failed: %s", length,
                              strerror(errno));
    pthread_mutex_lock(&h->mu);
    h->locked -= length;
    pthread_mutex_unlock(&h->mu);
    return 0;
}

static int host_capacity(void *ctx, uint64_t *bytes_p, struct lt_failure *why_p)
{
    (void)ctx;
    return memlock_limit(bytes_p, why_p);
}

static void host_fini(void *ctx)
{
    struct host_ctx *h = ctx;
    pthread_mutex_destroy(&h->mu);
    free(h);
}

int lease_host_backend_init(struct lease_backend *backend_p, struct lt_failure *why_p)
{
    struct host_ctx *h = calloc(1, sizeof(*h));
    if (!h)
        return lt_failure_set(why_p, LT_E_SYSTEM, -ENOMEM, "host backend: out of memory");
    pthread_mutex_init(&h->mu, NULL);
    *backend_p = (struct lease_backend){
        .name = "host (mlock)",
        .ctx = h,
        .chunk_bytes = 0,
        .register_range = host_register,
        .unregister_range = host_unregister,
        .capacity = host_capacity,
        .fini = host_fini,
        .words_unregistered = 1, /* the CPU writes words areas through its own mapping */
    };
    return 0;
}

uint64_t lease_host_backend_locked(const struct lease_backend *backend)
{
    if (!backend || backend->register_range != host_register || !backend->ctx)
        return 0;
    struct host_ctx *h = backend->ctx;
    pthread_mutex_lock(&h->mu);
    uint64_t n = h->locked;
    pthread_mutex_unlock(&h->mu);
    return n;
}

void lease_backend_fini(struct lease_backend *backend)
{
    if (backend && backend->fini && backend->ctx)
        backend->fini(backend->ctx);
    if (backend)
        backend->ctx = NULL;
}
