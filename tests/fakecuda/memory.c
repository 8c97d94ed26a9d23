/* fakecuda: memory. Device memory is host memory mapped by the fake; host
 * allocations and registrations are ranges of the same table, sorted and
 * disjoint, that every copy, memset and kernel checks its accesses against.
 * The argument checks and error codes follow what a CUDA 13 driver on an
 * H200 returned for the same calls (README.md, "Measured"). */
#include <errno.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/vfs.h>

#include "fakecuda.h"

/* Device memory up to this size is filled with a poison pattern, larger
 * allocations at both ends, so that reading what was never written shows. */
#define FK_POISON_FULL (64ull << 20)
#define FK_POISON_EDGE (4ull << 20)
#define FK_POISON_BYTE 0xa5

static unsigned long long fk_next_buffer_id = 1;

/* ---- the range table (locked) ---- */

/* Index of the first range whose end lies above @addr. */
static size_t fk_range_lower(const struct CUctx_st *ctx, uint64_t addr)
{
    size_t lo = 0, hi = ctx->nranges;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct fk_range *r = ctx->ranges[mid];
        if (r->base + r->size <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

struct fk_range *fk__range_find(const struct CUctx_st *ctx, uint64_t addr, uint64_t len)
{
    size_t i = fk_range_lower(ctx, addr);
    if (i == ctx->nranges)
        return NULL;
    struct fk_range *r = ctx->ranges[i];
    uint64_t n = len ? len : 1;
    if (addr < r->base || n > r->size || addr - r->base > r->size - n)
        return NULL;
    return r;
}

/* The first range intersecting [addr, addr + len), or NULL. */
static struct fk_range *fk_range_overlap(const struct CUctx_st *ctx, uint64_t addr, uint64_t len)
{
    size_t i = fk_range_lower(ctx, addr);
    if (i == ctx->nranges)
        return NULL;
    struct fk_range *r = ctx->ranges[i];
    return r->base < addr + len ? r : NULL;
}

static CUresult fk_range_insert(struct CUctx_st *ctx, struct fk_range *r)
{
    if (ctx->nranges == ctx->cap) {
        size_t cap = ctx->cap ? ctx->cap * 2 : 64;
        struct fk_range **n = realloc(ctx->ranges, cap * sizeof(*n));
        if (!n)
            return CUDA_ERROR_OUT_OF_MEMORY;
        ctx->ranges = n;
        ctx->cap = cap;
    }
    size_t i = fk_range_lower(ctx, r->base);
    memmove(&ctx->ranges[i + 1], &ctx->ranges[i], (ctx->nranges - i) * sizeof(*ctx->ranges));
    ctx->ranges[i] = r;
    ctx->nranges++;
    r->id = fk_next_buffer_id++;
    return CUDA_SUCCESS;
}

static void fk_range_free(struct fk_range *r)
{
    if (r->map)
        munmap(r->map, r->map_len);
    free(r);
}

void fk__range_kill(struct CUctx_st *ctx, struct fk_range *r)
{
    for (size_t i = 0; i < ctx->nranges; i++) {
        if (ctx->ranges[i] != r)
            continue;
        memmove(&ctx->ranges[i], &ctx->ranges[i + 1],
                (ctx->nranges - i - 1) * sizeof(*ctx->ranges));
        ctx->nranges--;
        break;
    }
    if (r->kind == FK_R_DEVICE)
        ctx->device_bytes -= r->size;
    else if (r->kind == FK_R_REGISTERED)
        ctx->registered_bytes -= r->size;
    r->dead = 1;
    if (r->holds == 0)
        fk_range_free(r);
}

void fk__ranges_teardown(struct CUctx_st *ctx)
{
    while (ctx->nranges)
        fk__range_kill(ctx, ctx->ranges[ctx->nranges - 1]);
    free(ctx->ranges);
    ctx->ranges = NULL;
    ctx->cap = 0;
}

/* ---- holds taken by running operations (unlocked callers) ---- */

CUresult fk__mem_hold(struct fk_hold *h, uint64_t addr, uint64_t len, int write, const char *who,
                      unsigned char **host_p)
{
    if (len == 0) {
        *host_p = (unsigned char *)(uintptr_t)addr;
        return CUDA_SUCCESS;
    }
    pthread_mutex_lock(&fk.mu);
    const char *why = NULL;
    unsigned int first = h->n;
    uint64_t at = addr, end = addr + len;
    if (end < addr)
        why = "wraps around the address space";
    /* Adjoining ranges (registrations of neighbouring chunks) serve as one. */
    while (!why && at < end) {
        struct fk_range *r = fk__range_find(&fk.ctx, at, 1);
        if (!r)
            why = "lies outside every allocation and registration";
        else if (!r->ready)
            why = "is stream-ordered memory its allocating stream has not reached yet";
        else if (write && (r->flags & CU_MEMHOSTREGISTER_READ_ONLY) && r->kind == FK_R_REGISTERED)
            why = "is host memory registered read-only";
        else if (h->n == FK_HOLD_MAX)
            why = "spans more ranges than the fake follows";
        if (why)
            break;
        r->holds++;
        h->r[h->n++] = r;
        at = r->base + r->size;
    }
    if (why) {
        while (h->n > first) { /* give back what this call took */
            struct fk_range *r = h->r[--h->n];
            if (--r->holds == 0 && r->dead)
                fk_range_free(r);
        }
        pthread_mutex_unlock(&fk.mu);
        fk__log("%s: %s [%#" PRIx64 ", +%" PRIu64 ") %s (at %#" PRIx64
                "): CUDA_ERROR_ILLEGAL_ADDRESS",
                who, write ? "writes" : "reads", addr, len, why, at);
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    pthread_mutex_unlock(&fk.mu);
    *host_p = (unsigned char *)(uintptr_t)addr;
    return CUDA_SUCCESS;
}

void fk__mem_release(struct fk_hold *h)
{
    if (!h->n)
        return;
    pthread_mutex_lock(&fk.mu);
    for (unsigned int i = 0; i < h->n; i++) {
        struct fk_range *r = h->r[i];
        if (--r->holds == 0 && r->dead)
            fk_range_free(r);
    }
    h->n = 0;
    pthread_mutex_unlock(&fk.mu);
}

/* ---- our own mappings ---- */

static void fk_poison(unsigned char *p, uint64_t size)
{
    if (size <= FK_POISON_FULL) {
        memset(p, FK_POISON_BYTE, (size_t)size);
        return;
    }
    memset(p, FK_POISON_BYTE, (size_t)FK_POISON_EDGE);
    memset(p + size - FK_POISON_EDGE, FK_POISON_BYTE, (size_t)FK_POISON_EDGE);
}

/* A new range of our own memory (device or host allocation). Locked. */
static CUresult fk_own_alloc(struct CUctx_st *ctx, uint64_t size, enum fk_range_kind kind,
                             unsigned int flags, int ready, struct fk_range **r_p)
{
    if (size == 0 || size > (1ull << 46))
        return CUDA_ERROR_INVALID_VALUE;
    if (kind == FK_R_DEVICE && ctx->device_bytes + size > fk.cfg.total_mem)
        return CUDA_ERROR_OUT_OF_MEMORY;
    size_t map_len = (size_t)((size + FK_PAGE - 1) / FK_PAGE * FK_PAGE);
    void *m = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct fk_range *r = calloc(1, sizeof(*r));
    if (!r) {
        munmap(m, map_len);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *r = (struct fk_range){.base = (uint64_t)(uintptr_t)m,
                           .size = size,
                           .kind = kind,
                           .flags = flags,
                           .ready = ready,
                           .map = m,
                           .map_len = map_len};
    if (kind == FK_R_DEVICE) {
        /* Nobody can see the range yet: poison it without holding up other calls. */
        pthread_mutex_unlock(&fk.mu);
        fk_poison(m, size);
        pthread_mutex_lock(&fk.mu);
    }
    if (fk_range_insert(ctx, r) != CUDA_SUCCESS) {
        fk_range_free(r);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (kind == FK_R_DEVICE)
        ctx->device_bytes += size;
    *r_p = r;
    return CUDA_SUCCESS;
}

CUresult cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)
{
    CUresult rc = fk__enter("cuMemAlloc", FK_CTX | FK_LIVE | FK_ENQUEUE);
    if (rc)
        return rc;
    struct fk_range *r = NULL;
    if (!dptr)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if ((rc = fk_own_alloc(fk__current, bytesize, FK_R_DEVICE, 0, 1, &r)) == CUDA_SUCCESS)
        *dptr = (CUdeviceptr)r->base;
    return fk__leave("cuMemAlloc", rc);
}

/* The range a free names: its exact base, of @kind. */
static CUresult fk_free_target(struct CUctx_st *ctx, uint64_t p, enum fk_range_kind kind,
                               struct fk_range **r_p)
{
    struct fk_range *r = fk__range_find(ctx, p, 1);
    if (!r || r->kind != kind || r->base != p || r->free_queued)
        return CUDA_ERROR_INVALID_VALUE;
    *r_p = r;
    return CUDA_SUCCESS;
}

/* cuMemFree, cuMemFreeHost and cuMemHostUnregister wait for the device's
 * queued work first, as the driver does (measured), and while they wait
 * every other thread's call that queues or waits blocks (fk.freeing, see
 * fk__enter: 1.9 s for a 1 MiB copy on another stream, on the H200). */
static CUresult fk_free_sync(const char *fn, uint64_t p, enum fk_range_kind kind)
{
    CUresult rc = fk__enter(fn, FK_LIVE | FK_ENQUEUE);
    if (rc)
        return rc;
    struct fk_range *r = NULL;
    if (!fk.ctx.active)
        return fk__leave(fn, CUDA_ERROR_INVALID_VALUE);
    if ((rc = fk_free_target(&fk.ctx, p, kind, &r)) != CUDA_SUCCESS)
        return fk__leave(fn, rc);
    fk.freeing++;
    rc = fk__ctx_wait(&fk.ctx);
    fk.freeing--;
    pthread_cond_broadcast(&fk.cv);
    if (rc != CUDA_SUCCESS)
        return fk__leave(fn, rc);
    /* Another thread may have freed it while this one waited. */
    if ((rc = fk_free_target(&fk.ctx, p, kind, &r)) == CUDA_SUCCESS)
        fk__range_kill(&fk.ctx, r);
    return fk__leave(fn, rc);
}

CUresult cuMemFree(CUdeviceptr dptr)
{
    if (dptr == 0) {
        CUresult rc = fk__enter("cuMemFree", FK_LIVE | FK_ENQUEUE);
        return rc ? rc : fk__leave("cuMemFree", CUDA_SUCCESS);
    }
    return fk_free_sync("cuMemFree", (uint64_t)dptr, FK_R_DEVICE);
}

CUresult cuMemFreeHost(void *p)
{
    return fk_free_sync("cuMemFreeHost", (uint64_t)(uintptr_t)p, FK_R_HOST_ALLOC);
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    CUresult rc = fk__enter("cuMemAllocAsync", FK_LIVE | FK_ENQUEUE);
    if (rc)
        return rc;
    struct CUstream_st *s = NULL;
    struct fk_range *r = NULL;
    if (!dptr)
        return fk__leave("cuMemAllocAsync", CUDA_ERROR_INVALID_VALUE);
    if ((rc = fk__stream_resolve("cuMemAllocAsync", hStream, &s)) != CUDA_SUCCESS ||
        (rc = fk_own_alloc(&fk.ctx, bytesize, FK_R_DEVICE, 0, 0, &r)) != CUDA_SUCCESS)
        return fk__leave("cuMemAllocAsync", rc);
    struct fk_op *op = fk__op_new(FK_OP_ALLOC_READY);
    if (!op) {
        fk__range_kill(&fk.ctx, r);
        return fk__leave("cuMemAllocAsync", CUDA_ERROR_OUT_OF_MEMORY);
    }
    op->u.range = r;
    if ((rc = fk__enqueue(s, op)) != CUDA_SUCCESS) {
        fk__range_kill(&fk.ctx, r);
        return fk__leave("cuMemAllocAsync", rc);
    }
    *dptr = (CUdeviceptr)r->base;
    return fk__leave("cuMemAllocAsync", CUDA_SUCCESS);
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    CUresult rc = fk__enter("cuMemFreeAsync", FK_LIVE | FK_ENQUEUE);
    if (rc)
        return rc;
    struct CUstream_st *s = NULL;
    struct fk_range *r = NULL;
    if ((rc = fk__stream_resolve("cuMemFreeAsync", hStream, &s)) != CUDA_SUCCESS ||
        (rc = fk_free_target(&fk.ctx, (uint64_t)dptr, FK_R_DEVICE, &r)) != CUDA_SUCCESS)
        return fk__leave("cuMemFreeAsync", rc);
    struct fk_op *op = fk__op_new(FK_OP_FREE);
    if (!op)
        return fk__leave("cuMemFreeAsync", CUDA_ERROR_OUT_OF_MEMORY);
    op->u.range = r;
    r->free_queued = 1;
    return fk__leave("cuMemFreeAsync", fk__enqueue(s, op));
}

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    CUresult rc = fk__enter("cuDeviceGetDefaultMemPool", FK_LIVE);
    if (rc)
        return rc;
    if (!pool_out)
        return fk__leave("cuDeviceGetDefaultMemPool", CUDA_ERROR_INVALID_VALUE);
    if (dev != 0)
        return fk__leave("cuDeviceGetDefaultMemPool", CUDA_ERROR_INVALID_DEVICE);
    *pool_out = &fk.ctx.pool;
    return fk__leave("cuDeviceGetDefaultMemPool", CUDA_SUCCESS);
}

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    CUresult rc = fk__enter("cuMemPoolSetAttribute", FK_LIVE);
    if (rc)
        return rc;
    if (pool != &fk.ctx.pool || !value)
        return fk__leave("cuMemPoolSetAttribute", CUDA_ERROR_INVALID_VALUE);
    switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        pool->release_threshold = *(const cuuint64_t *)value;
        break;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        break; /* the fake never reuses pool memory */
    default:
        rc = fk__refuse("cuMemPoolSetAttribute", CUDA_ERROR_NOT_SUPPORTED,
                        "pool attribute %d is not emulated", (int)attr);
    }
    return fk__leave("cuMemPoolSetAttribute", rc);
}

/* ---- host allocations and registrations ---- */

CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    CUresult rc = fk__enter("cuMemHostAlloc", FK_CTX | FK_LIVE | FK_ENQUEUE);
    if (rc)
        return rc;
    const unsigned int known =
        CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
    struct fk_range *r = NULL;
    if (!pp || (Flags & ~known))
        rc = CUDA_ERROR_INVALID_VALUE;
    else if ((rc = fk_own_alloc(fk__current, bytesize, FK_R_HOST_ALLOC, Flags, 1, &r)) ==
             CUDA_SUCCESS)
        *pp = r->map;
    return fk__leave("cuMemHostAlloc", rc);
}

/* Whether the file system of @path (a mapping's name) is shmem or hugetlbfs,
 * whose pages the kernel pins for long; a deleted file is judged by its
 * directory. */
static int fk_path_pinnable(const char *path)
{
    static const char *const shmem[] = {"/memfd:", "/dev/shm/", "/SYSV", "/dev/zero",
                                        "/anon_hugepage", "/dev/hugepages/"};
    for (size_t i = 0; i < sizeof(shmem) / sizeof(shmem[0]); i++)
        if (strncmp(path, shmem[i], strlen(shmem[i])) == 0)
            return 1;
    char p[4096];
    snprintf(p, sizeof(p), "%s", path);
    char *del = strstr(p, " (deleted)");
    if (del)
        *del = '\0';
    struct statfs sf;
    int rc = statfs(p, &sf);
    if (rc != 0) {
        char *slash = strrchr(p, '/');
        if (slash && slash != p) {
            *slash = '\0';
            rc = statfs(p, &sf);
        }
    }
    return rc == 0 && (sf.f_type == TMPFS_MAGIC || sf.f_type == HUGETLBFS_MAGIC);
}

/* What cuMemHostRegister checks of the mappings under [base, base + len):
 * all mapped, readable, writable unless @read_only, and no writable shared
 * mapping of a page-cache file (the kernel refuses a long-term pin of
 * those). Returns NULL or why not. */
static const char *fk_maps_check(uint64_t base, uint64_t len, int read_only, char *why,
                                 size_t why_len)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return NULL; /* cannot tell: accept */
    uint64_t at = base, end = base + len;
    char line[4352];
    const char *bad = NULL;
    while (at < end && fgets(line, sizeof(line), f)) {
        unsigned long long lo = 0, hi = 0;
        char perms[8] = "";
        int path_at = 0;
        if (sscanf(line, "%llx-%llx %7s %*s %*s %*s %n", &lo, &hi, perms, &path_at) < 3)
            continue;
        if (hi <= at)
            continue;
        if (lo > at)
            break; /* a hole */
        char *path = line + path_at;
        path[strcspn(path, "\n")] = '\0';
        if (perms[0] != 'r') {
            snprintf(why, why_len, "[%#llx, %#llx) is not readable (%s)", lo, hi, perms);
            bad = why;
        } else if (!read_only && perms[1] != 'w') {
            snprintf(why, why_len,
                     "[%#llx, %#llx) is read-only (%s) and CU_MEMHOSTREGISTER_READ_ONLY was "
                     "not given",
                     lo, hi, perms);
            bad = why;
        } else if (perms[3] == 's' && perms[1] == 'w' && path[0] == '/' &&
                   !fk_path_pinnable(path)) {
            snprintf(why, why_len,
                     "[%#llx, %#llx) is a writable shared mapping of the page-cache file %s, "
                     "which the kernel will not pin long-term",
                     lo, hi, path);
            bad = why;
        }
        if (bad)
            break;
        at = hi;
    }
    fclose(f);
    if (!bad && at < end) {
        snprintf(why, why_len, "[%#" PRIx64 ", %#" PRIx64 ") is not mapped", at, end);
        bad = why;
    }
    return bad;
}

CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
    static const char fn[] = "cuMemHostRegister";
    CUresult rc = fk__enter(fn, FK_CTX | FK_LIVE | FK_ENQUEUE);
    if (rc)
        return rc;
    const unsigned int known = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                               CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;
    uint64_t base = (uint64_t)(uintptr_t)p;
    if (!p || bytesize == 0 || (Flags & ~known) || base + bytesize < base)
        return fk__leave(fn, CUDA_ERROR_INVALID_VALUE);
    if (Flags & CU_MEMHOSTREGISTER_IOMEMORY)
        return fk__leave(fn, fk__refuse(fn, CUDA_ERROR_NOT_SUPPORTED,
                                        "CU_MEMHOSTREGISTER_IOMEMORY is not emulated"));
    struct CUctx_st *ctx = fk__current;
    struct fk_range *o = fk_range_overlap(ctx, base, bytesize);
    if (o)
        return fk__leave(fn, o->kind == FK_R_REGISTERED ? CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
                                                        : CUDA_ERROR_INVALID_VALUE);
    char why[4608];
    if (fk_maps_check(base, bytesize, !!(Flags & CU_MEMHOSTREGISTER_READ_ONLY), why,
                      sizeof(why))) {
        fk__log("%s(%p, %zu): %s: CUDA_ERROR_INVALID_VALUE", fn, p, bytesize, why);
        return fk__leave(fn, CUDA_ERROR_INVALID_VALUE);
    }
    if (fk.cfg.register_limit && ctx->registered_bytes + bytesize > fk.cfg.register_limit)
        return fk__leave(fn, fk__refuse(fn, CUDA_ERROR_OUT_OF_MEMORY,
                                        "%zu bytes more would pass FAKECUDA_REGISTER_LIMIT=%" PRIu64
                                        " (%" PRIu64 " registered)",
                                        bytesize, fk.cfg.register_limit, ctx->registered_bytes));
    struct fk_range *r = calloc(1, sizeof(*r));
    if (!r)
        return fk__leave(fn, CUDA_ERROR_OUT_OF_MEMORY);
    *r = (struct fk_range){
        .base = base, .size = bytesize, .kind = FK_R_REGISTERED, .flags = Flags, .ready = 1};
    if ((rc = fk_range_insert(ctx, r)) != CUDA_SUCCESS) {
        free(r);
        return fk__leave(fn, rc);
    }
    ctx->registered_bytes += bytesize;
    return fk__leave(fn, CUDA_SUCCESS);
}

CUresult cuMemHostUnregister(void *p)
{
    static const char fn[] = "cuMemHostUnregister";
    CUresult rc = fk__enter(fn, FK_LIVE | FK_ENQUEUE);
    if (rc)
        return rc;
    uint64_t base = (uint64_t)(uintptr_t)p;
    struct fk_range *r = fk.ctx.active ? fk__range_find(&fk.ctx, base, 1) : NULL;
    if (!r || r->kind != FK_R_REGISTERED)
        return fk__leave(fn, CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    if (r->base != base)
        return fk__leave(fn, CUDA_ERROR_INVALID_VALUE); /* inside a registration */
    fk__leave(fn, CUDA_SUCCESS);
    rc = fk_free_sync(fn, base, FK_R_REGISTERED);
    return rc == CUDA_ERROR_INVALID_VALUE ? CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED : rc;
}

CUresult cuMemHostGetDevicePointer(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    CUresult rc = fk__enter("cuMemHostGetDevicePointer", FK_CTX | FK_LIVE);
    if (rc)
        return rc;
    /* The driver maps every registration and host allocation, DEVICEMAP or
     * not, at the host address (measured). */
    struct fk_range *r =
        fk.ctx.active ? fk__range_find(&fk.ctx, (uint64_t)(uintptr_t)p, 1) : NULL;
    if (!pdptr || Flags != 0 || !r || r->kind == FK_R_DEVICE)
        return fk__leave("cuMemHostGetDevicePointer", CUDA_ERROR_INVALID_VALUE);
    if (fk.cfg.devptr_refuse_len && r->size == fk.cfg.devptr_refuse_len)
        return fk__leave("cuMemHostGetDevicePointer",
                         fk__refuse("cuMemHostGetDevicePointer", CUDA_ERROR_OUT_OF_MEMORY,
                                    "a registration of %" PRIu64
                                    " bytes is refused its device pointer on purpose "
                                    "(FAKECUDA_DEVPTR_REFUSE_LEN)",
                                    r->size));
    *pdptr = (CUdeviceptr)(uintptr_t)p;
    return fk__leave("cuMemHostGetDevicePointer", CUDA_SUCCESS);
}

CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    static const char fn[] = "cuPointerGetAttribute";
    CUresult rc = fk__enter(fn, 0);
    if (rc)
        return rc;
    struct fk_range *r = fk.ctx.active ? fk__range_find(&fk.ctx, (uint64_t)ptr, 1) : NULL;
    if (!data || !r)
        return fk__leave(fn, CUDA_ERROR_INVALID_VALUE);
    int host = r->kind != FK_R_DEVICE;
    switch (attribute) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr *)data = ptr;
        break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (!host)
            return fk__leave(fn, CUDA_ERROR_INVALID_VALUE);
        *(void **)data = (void *)(uintptr_t)ptr;
        break;
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = &fk.ctx;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = 0;
        break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(unsigned int *)data = 0;
        break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        *(unsigned long long *)data = r->id;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = (CUdeviceptr)r->base;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = (size_t)r->size;
        break;
    default:
        rc = fk__refuse(fn, CUDA_ERROR_NOT_SUPPORTED, "pointer attribute %d is not emulated",
                        (int)attribute);
    }
    return fk__leave(fn, rc);
}

/* ---- copies and memsets ---- */

/* Queues a copy of @len bytes; @dst_dev/@src_dev say which side is a device
 * address. A host side inside a registration or host allocation is pinned
 * and read when the copy runs; any other host memory is pageable, and then
 * the call waits for the copy, as the driver does for pageable memory.
 * @sync: the synchronous API (always waits). Locked. */
static CUresult fk_copy_queue(struct CUstream_st *s, uint64_t dst, int dst_dev, uint64_t src,
                              int src_dev, uint64_t len, int sync)
{
    if (len == 0)
        return CUDA_SUCCESS;
    struct CUctx_st *ctx = &fk.ctx;
    int pageable = 0;
    if (dst_dev && !fk__range_find(ctx, dst, len))
        return CUDA_ERROR_INVALID_VALUE;
    if (src_dev && !fk__range_find(ctx, src, len))
        return CUDA_ERROR_INVALID_VALUE;
    struct fk_range *hd = dst_dev ? NULL : fk__range_find(ctx, dst, len);
    struct fk_range *hs = src_dev ? NULL : fk__range_find(ctx, src, len);
    /* A host pointer into device memory works here only because the fake's
     * device memory is host memory: refuse it as a real driver would. */
    if ((hd && hd->kind == FK_R_DEVICE) || (hs && hs->kind == FK_R_DEVICE))
        return CUDA_ERROR_INVALID_VALUE;
    if ((!dst_dev && !hd) || (!src_dev && !hs))
        pageable = 1;
    if ((!dst_dev && !dst) || (!src_dev && !src))
        return CUDA_ERROR_INVALID_VALUE;
    struct fk_op *op = fk__op_new(FK_OP_COPY);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.copy.dst = dst;
    op->u.copy.src = src;
    op->u.copy.len = len;
    op->u.copy.dst_table = dst_dev || hd != NULL;
    op->u.copy.src_table = src_dev || hs != NULL;
    CUresult rc = fk__enqueue(s, op);
    if (rc == CUDA_SUCCESS && (sync || pageable))
        rc = fk__stream_wait(s);
    return rc;
}

/* The shared body of the copy entry points. */
static CUresult fk_copy_api(const char *fn, CUstream h, int async, uint64_t dst, int dst_dev,
                            uint64_t src, int src_dev, uint64_t len)
{
    unsigned int need = FK_LIVE | FK_ENQUEUE | (async && h ? 0 : FK_CTX);
    CUresult rc = fk__enter(fn, need);
    if (rc)
        return rc;
    struct CUstream_st *s = NULL;
    if ((rc = fk__stream_resolve(fn, async ? h : NULL, &s)) == CUDA_SUCCESS)
        rc = fk_copy_queue(s, dst, dst_dev, src, src_dev, len, !async);
    return fk__leave(fn, rc);
}

CUresult cuMemcpyHtoD(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    return fk_copy_api("cuMemcpyHtoD", NULL, 0, dstDevice, 1, (uint64_t)(uintptr_t)srcHost, 0,
                       ByteCount);
}

CUresult cuMemcpyDtoH(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return fk_copy_api("cuMemcpyDtoH", NULL, 0, (uint64_t)(uintptr_t)dstHost, 0, srcDevice, 1,
                       ByteCount);
}

/* Asynchronous for the driver; the fake completes it before returning,
 * which no correct program can tell apart. */
CUresult cuMemcpyDtoD(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    return fk_copy_api("cuMemcpyDtoD", NULL, 0, dstDevice, 1, srcDevice, 1, ByteCount);
}

CUresult cuMemcpyHtoDAsync(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                           CUstream hStream)
{
    return fk_copy_api("cuMemcpyHtoDAsync", hStream, 1, dstDevice, 1,
                       (uint64_t)(uintptr_t)srcHost, 0, ByteCount);
}

CUresult cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                           CUstream hStream)
{
    return fk_copy_api("cuMemcpyDtoHAsync", hStream, 1, (uint64_t)(uintptr_t)dstHost, 0,
                       srcDevice, 1, ByteCount);
}

/* Queues a 2D memset of @height rows of @width elements of @elem bytes,
 * @pitch bytes apart. Locked. */
static CUresult fk_memset_queue(struct CUstream_st *s, uint64_t dst, uint64_t pitch,
                                uint32_t value, unsigned int elem, uint64_t width,
                                uint64_t height, int sync)
{
    if (width == 0 || height == 0)
        return CUDA_SUCCESS;
    if (dst % elem != 0 || (height > 1 && (pitch < width * elem || pitch % elem != 0)))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t span = pitch * (height - 1) + width * elem;
    if (!fk__range_find(&fk.ctx, dst, span))
        return CUDA_ERROR_INVALID_VALUE;
    struct fk_op *op = fk__op_new(FK_OP_MEMSET);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.set.dst = dst;
    op->u.set.pitch = pitch;
    op->u.set.width = width;
    op->u.set.height = height;
    op->u.set.value = value;
    op->u.set.elem = elem;
    CUresult rc = fk__enqueue(s, op);
    if (rc == CUDA_SUCCESS && sync)
        rc = fk__stream_wait(s);
    return rc;
}

static CUresult fk_memset_api(const char *fn, CUstream h, int async, uint64_t dst, uint64_t pitch,
                              uint32_t value, unsigned int elem, uint64_t width, uint64_t height)
{
    unsigned int need = FK_LIVE | FK_ENQUEUE | (async && h ? 0 : FK_CTX);
    CUresult rc = fk__enter(fn, need);
    if (rc)
        return rc;
    struct CUstream_st *s = NULL;
    if ((rc = fk__stream_resolve(fn, async ? h : NULL, &s)) == CUDA_SUCCESS)
        rc = fk_memset_queue(s, dst, pitch, value, elem, width, height, !async);
    return fk__leave(fn, rc);
}

/* Asynchronous for the driver on device memory; completed before return. */
CUresult cuMemsetD8(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    return fk_memset_api("cuMemsetD8", NULL, 0, dstDevice, N, uc, 1, N, 1);
}

CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
    return fk_memset_api("cuMemsetD32Async", hStream, 1, dstDevice, (uint64_t)N * 4, ui, 4, N, 1);
}

CUresult cuMemsetD2D32Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width,
                            size_t Height, CUstream hStream)
{
    return fk_memset_api("cuMemsetD2D32Async", hStream, 1, dstDevice, dstPitch, ui, 4, Width,
                         Height);
}

/* ---- run by the stream threads (unlocked) ---- */

CUresult fk__copy_run(const struct fk_op *op)
{
    struct fk_hold h = {.n = 0};
    unsigned char *dst = (unsigned char *)(uintptr_t)op->u.copy.dst;
    unsigned char *src = (unsigned char *)(uintptr_t)op->u.copy.src;
    uint64_t len = op->u.copy.len;
    CUresult rc = CUDA_SUCCESS;
    if (op->u.copy.dst_table)
        rc = fk__mem_hold(&h, op->u.copy.dst, len, 1, "copy", &dst);
    if (rc == CUDA_SUCCESS && op->u.copy.src_table)
        rc = fk__mem_hold(&h, op->u.copy.src, len, 0, "copy", &src);
    if (rc == CUDA_SUCCESS)
        memmove(dst, src, (size_t)len);
    fk__mem_release(&h);
    return rc;
}

/* @len bytes at @q of the @elem low bytes of @value repeated (little-endian),
 * by doubling what is already written. */
static void fk_fill(unsigned char *q, uint64_t len, uint32_t value, unsigned int elem)
{
    uint64_t done = len < elem ? len : elem;
    memcpy(q, &value, (size_t)done);
    while (done < len) {
        uint64_t n = len - done < done ? len - done : done;
        memcpy(q + done, q, (size_t)n);
        done += n;
    }
}

CUresult fk__memset_run(const struct fk_op *op)
{
    struct fk_hold h = {.n = 0};
    unsigned char *p = NULL;
    const unsigned int elem = op->u.set.elem;
    uint64_t span = op->u.set.pitch * (op->u.set.height - 1) + op->u.set.width * elem;
    CUresult rc = fk__mem_hold(&h, op->u.set.dst, span, 1, "memset", &p);
    if (rc != CUDA_SUCCESS)
        return rc;
    for (uint64_t row = 0; row < op->u.set.height; row++) {
        unsigned char *q = p + row * op->u.set.pitch;
        if (elem == 1)
            memset(q, (int)(op->u.set.value & 0xff), (size_t)op->u.set.width);
        else
            fk_fill(q, op->u.set.width * elem, op->u.set.value, elem);
    }
    fk__mem_release(&h);
    return CUDA_SUCCESS;
}
