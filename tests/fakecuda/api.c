/* fakecuda: initialisation, the device, the primary context, the checks
 * every call starts with, and cuGetProcAddress. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fakecuda.h"

#ifndef FAKECUDA_DEFAULT_ARCH
#define FAKECUDA_DEFAULT_ARCH 120
#endif

struct fk_global fk = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .cv = PTHREAD_COND_INITIALIZER,
};
__thread struct CUctx_st *fk__current;
__thread int fk__in_hostfn;

static pthread_once_t fk_config_once = PTHREAD_ONCE_INIT;

void fk__log(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "fakecuda: %s\n", line);
}

CUresult fk__refuse(const char *fn, CUresult rc, const char *fmt, ...)
{
    char why[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    fk__log("%s: %s -> %s", fn, why, fk__error_name(rc));
    return rc;
}

void fk__fault(CUresult rc)
{
    if (!fk.sticky) {
        fk.sticky = rc;
        fk__log("the context is now unusable: every later call returns %s, as after a real "
                "device fault",
                fk__error_name(rc));
    }
    pthread_cond_broadcast(&fk.cv);
}

/* ---- configuration ---- */

static uint64_t fk_env_u64(const char *name, uint64_t dflt)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 0);
    uint64_t mul = 1;
    if (end && (*end == 'K' || *end == 'k'))
        mul = 1ull << 10;
    else if (end && (*end == 'M' || *end == 'm'))
        mul = 1ull << 20;
    else if (end && (*end == 'G' || *end == 'g'))
        mul = 1ull << 30;
    if (errno || end == v || (mul == 1 && *end) || (mul != 1 && end[1])) {
        fk__log("ignoring %s=%s: expected a number (K, M or G suffix allowed)", name, v);
        return dflt;
    }
    return (uint64_t)x * mul;
}

static void fk_config_load(void)
{
    struct fk_config *c = &fk.cfg;
    c->arch = (unsigned int)fk_env_u64("FAKECUDA_ARCH", FAKECUDA_DEFAULT_ARCH);
    if (c->arch < 10 || c->arch > 999) {
        fk__log("FAKECUDA_ARCH=%u: expected digits such as 90 or 120; using %d", c->arch,
                FAKECUDA_DEFAULT_ARCH);
        c->arch = FAKECUDA_DEFAULT_ARCH;
    }
    c->driver_version = (int)fk_env_u64("FAKECUDA_DRIVER_VERSION", 13000);
    c->devices = fk_env_u64("FAKECUDA_DEVICES", 1) ? 1 : 0;
    int sms = c->arch == 90 ? 132 : c->arch == 120 ? 170 : c->arch == 100 ? 148 : 108;
    c->sms = (int)fk_env_u64("FAKECUDA_SMS", (uint64_t)sms);
    if (c->sms < 1 || c->sms > 1024)
        c->sms = sms;
    long pages = sysconf(_SC_PHYS_PAGES);
    uint64_t half = pages > 0 ? (uint64_t)pages * FK_PAGE / 2 : 8ull << 30;
    c->total_mem = fk_env_u64("FAKECUDA_TOTAL_MEM", half);
    c->register_limit = fk_env_u64("FAKECUDA_REGISTER_LIMIT", 0);
    c->devptr_refuse_len = fk_env_u64("FAKECUDA_DEVPTR_REFUSE_LEN", 0);
    c->trace = fk_env_u64("FAKECUDA_TRACE", 0) != 0;
    c->hostfn_lag_us = fk_env_u64("FAKECUDA_HOSTFN_LAG_US", 0);
    const char *lm = getenv("CUDA_MODULE_LOADING");
    c->eager = lm && strcmp(lm, "EAGER") == 0;
    const char *jit = getenv("CUDA_DISABLE_PTX_JIT");
    c->ptx_jit_disabled = jit && strcmp(jit, "1") == 0;
    const char *fault = getenv("FAKECUDA_FAULT_KERNEL");
    if (fault && *fault) {
        snprintf(c->fault_kernel, sizeof(c->fault_kernel), "%s", fault);
        char *colon = strchr(c->fault_kernel, ':');
        c->fault_nth = 1;
        if (colon) {
            *colon = '\0';
            c->fault_nth = (unsigned int)strtoul(colon + 1, NULL, 10);
            if (c->fault_nth == 0)
                c->fault_nth = 1;
        }
    }
}

static void fk_atfork_prepare(void)
{
    pthread_mutex_lock(&fk.mu);
}

static void fk_atfork_parent(void)
{
    pthread_mutex_unlock(&fk.mu);
}

/* A CUDA process must not fork: in the child, as with the real driver,
 * nothing works (the stream threads did not come along). */
static void fk_atfork_child(void)
{
    if (fk.initialized)
        fk.forked = 1;
    pthread_mutex_unlock(&fk.mu);
}

/* ---- every call's checks ---- */

static void fk_trace(const char *fn, CUresult rc)
{
    if (fk.cfg.trace)
        fprintf(stderr, "fakecuda: trace: %s -> %s\n", fn, fk__error_name(rc));
}

CUresult fk__enter(const char *fn, unsigned int need)
{
    CUresult rc = CUDA_SUCCESS;
    if (fk.forked) {
        rc = fk__refuse(fn, CUDA_ERROR_NOT_INITIALIZED,
                        "called in a process forked after cuInit (CUDA does not survive fork)");
        fk_trace(fn, rc);
        return rc;
    }
    if (!__atomic_load_n(&fk.initialized, __ATOMIC_ACQUIRE)) {
        fk_trace(fn, CUDA_ERROR_NOT_INITIALIZED);
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    if ((need & FK_ENQUEUE) && fk__in_hostfn) {
        rc = fk__refuse(fn, CUDA_ERROR_NOT_PERMITTED,
                        "called from a stream host function, where CUDA calls are forbidden");
        fk_trace(fn, rc);
        return rc;
    }
    pthread_mutex_lock(&fk.mu);
    /* A pending cuMemHostUnregister (cuMemFree, cuMemFreeHost) holds the
     * context: measured on the H200 (bench/unregister_probe.c), while one
     * waited behind a stream stalled on an unwritten word, a 1 MiB copy and
     * a host function on another stream, from another thread, took 1901 ms
     * instead of 0.12 ms, released only when the word was written. The
     * device keeps running: the stream threads never come through here. */
    if (need & FK_ENQUEUE)
        while (fk.freeing)
            pthread_cond_wait(&fk.cv, &fk.mu);
    if (need & FK_CTX) {
        if (!fk__current)
            rc = CUDA_ERROR_INVALID_CONTEXT;
        else if (!fk__current->active)
            rc = CUDA_ERROR_CONTEXT_IS_DESTROYED;
    }
    if (rc == CUDA_SUCCESS && (need & FK_LIVE) && fk.sticky)
        rc = fk.sticky;
    if (rc != CUDA_SUCCESS) {
        pthread_mutex_unlock(&fk.mu);
        fk_trace(fn, rc);
    }
    return rc;
}

CUresult fk__leave(const char *fn, CUresult rc)
{
    pthread_mutex_unlock(&fk.mu);
    fk_trace(fn, rc);
    return rc;
}

/* ---- handles: every one ever made stays on its list ---- */

int fk__is_stream(const struct CUstream_st *s)
{
    for (const struct CUstream_st *x = fk.streams; x; x = x->next_all)
        if (x == s)
            return 1;
    return 0;
}

int fk__is_event(const struct CUevent_st *e)
{
    for (const struct CUevent_st *x = fk.events; x; x = x->next_all)
        if (x == e)
            return 1;
    return 0;
}

int fk__is_module(const struct CUmod_st *m)
{
    for (const struct CUmod_st *x = fk.modules; x; x = x->next_all)
        if (x == m)
            return 1;
    return 0;
}

int fk__is_function(const struct CUfunc_st *f)
{
    for (const struct CUmod_st *m = fk.modules; m; m = m->next_all)
        for (size_t i = 0; i < m->nfuncs; i++)
            if (m->funcs[i] == f)
                return 1;
    return 0;
}

/* ---- initialisation and the device ---- */

CUresult cuInit(unsigned int Flags)
{
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (fk.forked)
        return fk__enter("cuInit", 0);
    pthread_once(&fk_config_once, fk_config_load);
    pthread_mutex_lock(&fk.mu);
    CUresult rc = CUDA_SUCCESS;
    if (fk.cfg.devices == 0) {
        rc = CUDA_ERROR_NO_DEVICE;
    } else if (!fk.initialized) {
        pthread_atfork(fk_atfork_prepare, fk_atfork_parent, fk_atfork_child);
        __atomic_store_n(&fk.initialized, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&fk.mu);
    fk_trace("cuInit", rc);
    return rc;
}

CUresult cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_once(&fk_config_once, fk_config_load);
    *driverVersion = fk.cfg.driver_version;
    return CUDA_SUCCESS;
}

/* Device calls: no context needed, they work after a fault too. */
static CUresult fk_device_enter(const char *fn, CUdevice dev)
{
    CUresult rc = fk__enter(fn, 0);
    if (rc == CUDA_SUCCESS && dev != 0) {
        fk__leave(fn, CUDA_ERROR_INVALID_DEVICE);
        return CUDA_ERROR_INVALID_DEVICE;
    }
    return rc;
}

CUresult cuDeviceGetCount(int *count)
{
    CUresult rc = fk__enter("cuDeviceGetCount", 0);
    if (rc)
        return rc;
    if (!count)
        return fk__leave("cuDeviceGetCount", CUDA_ERROR_INVALID_VALUE);
    *count = fk.cfg.devices;
    return fk__leave("cuDeviceGetCount", CUDA_SUCCESS);
}

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    CUresult rc = fk__enter("cuDeviceGet", 0);
    if (rc)
        return rc;
    if (!device)
        return fk__leave("cuDeviceGet", CUDA_ERROR_INVALID_VALUE);
    if (ordinal != 0)
        return fk__leave("cuDeviceGet", CUDA_ERROR_INVALID_DEVICE);
    *device = 0;
    return fk__leave("cuDeviceGet", CUDA_SUCCESS);
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    CUresult rc = fk_device_enter("cuDeviceGetName", dev);
    if (rc)
        return rc;
    if (!name || len <= 0)
        return fk__leave("cuDeviceGetName", CUDA_ERROR_INVALID_VALUE);
    snprintf(name, (size_t)len, "fakecuda sm_%u (CPU emulation)", fk.cfg.arch);
    return fk__leave("cuDeviceGetName", CUDA_SUCCESS);
}

CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    CUresult rc = fk_device_enter("cuDeviceGetPCIBusId", dev);
    if (rc)
        return rc;
    if (!pciBusId || len <= 0)
        return fk__leave("cuDeviceGetPCIBusId", CUDA_ERROR_INVALID_VALUE);
    snprintf(pciBusId, (size_t)len, "0000:fa:00.0");
    return fk__leave("cuDeviceGetPCIBusId", CUDA_SUCCESS);
}

CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    CUresult rc = fk_device_enter("cuDeviceGetUuid", dev);
    if (rc)
        return rc;
    if (!uuid)
        return fk__leave("cuDeviceGetUuid", CUDA_ERROR_INVALID_VALUE);
    static const char bytes[16] = "fakecuda-device";
    memcpy(uuid->bytes, bytes, sizeof(uuid->bytes));
    uuid->bytes[15] = (char)fk.cfg.arch;
    return fk__leave("cuDeviceGetUuid", CUDA_SUCCESS);
}

CUresult cuDeviceTotalMem(size_t *bytes, CUdevice dev)
{
    CUresult rc = fk_device_enter("cuDeviceTotalMem", dev);
    if (rc)
        return rc;
    if (!bytes)
        return fk__leave("cuDeviceTotalMem", CUDA_ERROR_INVALID_VALUE);
    *bytes = (size_t)fk.cfg.total_mem;
    return fk__leave("cuDeviceTotalMem", CUDA_SUCCESS);
}

/* Per-arch limits: Hopper (sm_90/100) and consumer Blackwell (sm_120). */
int fk__sm_threads(void)
{
    return fk.cfg.arch == 120 || fk.cfg.arch == 86 || fk.cfg.arch == 89 ? 1536 : 2048;
}

int fk__sm_smem(void)
{
    return fk.cfg.arch == 120 || fk.cfg.arch == 86 || fk.cfg.arch == 89
               ? 102400
               : fk.cfg.arch == 80 ? 167936 : 233472;
}

CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    CUresult rc = fk_device_enter("cuDeviceGetAttribute", dev);
    if (rc)
        return rc;
    if (!pi)
        return fk__leave("cuDeviceGetAttribute", CUDA_ERROR_INVALID_VALUE);
    int v;
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
        v = (int)fk.cfg.arch / 10;
        break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
        v = (int)fk.cfg.arch % 10;
        break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
        v = fk.cfg.sms;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
        v = 1024;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
        v = 64;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
        v = 2147483647;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
        v = 65535;
        break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
        v = 32;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
        v = 49152;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
        v = fk__sm_smem() - 1024;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
        v = fk__sm_smem();
        break;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK:
        v = 1024;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
        v = fk__sm_threads();
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
        v = 32;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
        v = 65536;
        break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
        v = 65536;
        break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
        v = 1980000;
        break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
        v = 0xfa;
        break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
        v = 2;
        break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR:
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED:
    case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT:
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE:
        v = 0;
        break;
    default:
        rc = fk__refuse("cuDeviceGetAttribute", CUDA_ERROR_NOT_SUPPORTED,
                        "attribute %d is not emulated (add it to tests/fakecuda/api.c)",
                        (int)attrib);
        return fk__leave("cuDeviceGetAttribute", rc);
    }
    *pi = v;
    return fk__leave("cuDeviceGetAttribute", CUDA_SUCCESS);
}

/* ---- the primary context ---- */

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    /* After a fault the device cannot be retained again in this process. */
    CUresult rc = fk__enter("cuDevicePrimaryCtxRetain", FK_LIVE | FK_ENQUEUE);
    if (rc)
        return rc;
    if (dev != 0)
        return fk__leave("cuDevicePrimaryCtxRetain", CUDA_ERROR_INVALID_DEVICE);
    if (!pctx)
        return fk__leave("cuDevicePrimaryCtxRetain", CUDA_ERROR_INVALID_VALUE);
    struct CUctx_st *ctx = &fk.ctx;
    if (ctx->refs == 0) {
        ctx->id = ++fk.next_ctx_id;
        ctx->active = 1;
        ctx->stopping = 0;
        ctx->pool.release_threshold = 0;
    }
    ctx->refs++;
    *pctx = ctx;
    return fk__leave("cuDevicePrimaryCtxRetain", CUDA_SUCCESS);
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    CUresult rc = fk__enter("cuDevicePrimaryCtxRelease", FK_ENQUEUE);
    if (rc)
        return rc;
    if (dev != 0)
        return fk__leave("cuDevicePrimaryCtxRelease", CUDA_ERROR_INVALID_DEVICE);
    struct CUctx_st *ctx = &fk.ctx;
    if (ctx->refs == 0)
        return fk__leave("cuDevicePrimaryCtxRelease", CUDA_ERROR_INVALID_CONTEXT);
    if (--ctx->refs == 0)
        fk__ctx_teardown(ctx);
    return fk__leave("cuDevicePrimaryCtxRelease", CUDA_SUCCESS);
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    CUresult rc = fk_device_enter("cuDevicePrimaryCtxGetState", dev);
    if (rc)
        return rc;
    if (!flags || !active)
        return fk__leave("cuDevicePrimaryCtxGetState", CUDA_ERROR_INVALID_VALUE);
    *flags = 0;
    *active = fk.ctx.active;
    return fk__leave("cuDevicePrimaryCtxGetState", CUDA_SUCCESS);
}

void fk__ctx_teardown(struct CUctx_st *ctx)
{
    /* What the driver frees with the context: queued work is dropped. */
    fk__streams_stop(ctx);
    fk__modules_teardown(ctx);
    fk__ranges_teardown(ctx);
    ctx->active = 0;
    ctx->legacy = NULL;
    ctx->device_bytes = ctx->registered_bytes = 0;
}

/* Both are refused inside a stream host function (measured). */
CUresult cuCtxSetCurrent(CUcontext ctx)
{
    CUresult rc = fk__enter("cuCtxSetCurrent", FK_ENQUEUE);
    if (rc)
        return rc;
    if (ctx && ctx != &fk.ctx)
        return fk__leave("cuCtxSetCurrent", CUDA_ERROR_INVALID_CONTEXT);
    fk__current = ctx;
    return fk__leave("cuCtxSetCurrent", CUDA_SUCCESS);
}

CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    CUresult rc = fk__enter("cuCtxGetCurrent", FK_ENQUEUE);
    if (rc)
        return rc;
    if (!pctx)
        return fk__leave("cuCtxGetCurrent", CUDA_ERROR_INVALID_VALUE);
    *pctx = fk__current;
    return fk__leave("cuCtxGetCurrent", CUDA_SUCCESS);
}

CUresult cuCtxGetDevice(CUdevice *device)
{
    CUresult rc = fk__enter("cuCtxGetDevice", FK_CTX);
    if (rc)
        return rc;
    if (!device)
        return fk__leave("cuCtxGetDevice", CUDA_ERROR_INVALID_VALUE);
    *device = 0;
    return fk__leave("cuCtxGetDevice", CUDA_SUCCESS);
}

CUresult cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
    CUresult rc = fk__enter("cuCtxGetId", ctx ? 0 : FK_CTX);
    if (rc)
        return rc;
    if (!ctxId)
        return fk__leave("cuCtxGetId", CUDA_ERROR_INVALID_VALUE);
    struct CUctx_st *c = ctx ? ctx : fk__current;
    if (c != &fk.ctx)
        return fk__leave("cuCtxGetId", CUDA_ERROR_INVALID_CONTEXT);
    if (!c->active)
        return fk__leave("cuCtxGetId", CUDA_ERROR_CONTEXT_IS_DESTROYED);
    *ctxId = c->id;
    return fk__leave("cuCtxGetId", CUDA_SUCCESS);
}

CUresult cuCtxSynchronize(void)
{
    CUresult rc = fk__enter("cuCtxSynchronize", FK_CTX | FK_LIVE | FK_ENQUEUE);
    if (rc)
        return rc;
    return fk__leave("cuCtxSynchronize", fk__ctx_wait(fk__current));
}

/* ---- errors ---- */

CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    const char *n = fk__error_name(error);
    *pStr = n;
    return n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* cuGetErrorString is in errors.c beside the descriptions. */

/* ---- cuGetProcAddress: the entry points this library has ---- */

struct fk_proc {
    const char *name; /* the unversioned name callers ask for */
    void *fn;
};

/* &cuMemAlloc is &cuMemAlloc_v2 through cuda.h's macros: the current ABI. */
static const struct fk_proc fk_procs[] = {
    {"cuInit", (void *)(uintptr_t)&cuInit},
    {"cuDriverGetVersion", (void *)(uintptr_t)&cuDriverGetVersion},
    {"cuDeviceGet", (void *)(uintptr_t)&cuDeviceGet},
    {"cuDeviceGetCount", (void *)(uintptr_t)&cuDeviceGetCount},
    {"cuDeviceGetName", (void *)(uintptr_t)&cuDeviceGetName},
    {"cuDeviceGetPCIBusId", (void *)(uintptr_t)&cuDeviceGetPCIBusId},
    {"cuDeviceGetUuid", (void *)(uintptr_t)&cuDeviceGetUuid},
    {"cuDeviceTotalMem", (void *)(uintptr_t)&cuDeviceTotalMem},
    {"cuDeviceGetAttribute", (void *)(uintptr_t)&cuDeviceGetAttribute},
    {"cuDeviceGetDefaultMemPool", (void *)(uintptr_t)&cuDeviceGetDefaultMemPool},
    {"cuDevicePrimaryCtxRetain", (void *)(uintptr_t)&cuDevicePrimaryCtxRetain},
    {"cuDevicePrimaryCtxRelease", (void *)(uintptr_t)&cuDevicePrimaryCtxRelease},
    {"cuDevicePrimaryCtxGetState", (void *)(uintptr_t)&cuDevicePrimaryCtxGetState},
    {"cuCtxSetCurrent", (void *)(uintptr_t)&cuCtxSetCurrent},
    {"cuCtxGetCurrent", (void *)(uintptr_t)&cuCtxGetCurrent},
    {"cuCtxGetDevice", (void *)(uintptr_t)&cuCtxGetDevice},
    {"cuCtxGetId", (void *)(uintptr_t)&cuCtxGetId},
    {"cuCtxSynchronize", (void *)(uintptr_t)&cuCtxSynchronize},
    {"cuGetErrorName", (void *)(uintptr_t)&cuGetErrorName},
    {"cuGetErrorString", (void *)(uintptr_t)&cuGetErrorString},
    {"cuGetProcAddress", (void *)(uintptr_t)&cuGetProcAddress},
    {"cuMemAlloc", (void *)(uintptr_t)&cuMemAlloc},
    {"cuMemFree", (void *)(uintptr_t)&cuMemFree},
    {"cuMemAllocAsync", (void *)(uintptr_t)&cuMemAllocAsync},
    {"cuMemFreeAsync", (void *)(uintptr_t)&cuMemFreeAsync},
    {"cuMemPoolSetAttribute", (void *)(uintptr_t)&cuMemPoolSetAttribute},
    {"cuMemHostAlloc", (void *)(uintptr_t)&cuMemHostAlloc},
    {"cuMemFreeHost", (void *)(uintptr_t)&cuMemFreeHost},
    {"cuMemHostRegister", (void *)(uintptr_t)&cuMemHostRegister},
    {"cuMemHostUnregister", (void *)(uintptr_t)&cuMemHostUnregister},
    {"cuMemHostGetDevicePointer", (void *)(uintptr_t)&cuMemHostGetDevicePointer},
    {"cuPointerGetAttribute", (void *)(uintptr_t)&cuPointerGetAttribute},
    {"cuMemcpyHtoD", (void *)(uintptr_t)&cuMemcpyHtoD},
    {"cuMemcpyDtoH", (void *)(uintptr_t)&cuMemcpyDtoH},
    {"cuMemcpyDtoD", (void *)(uintptr_t)&cuMemcpyDtoD},
    {"cuMemcpyHtoDAsync", (void *)(uintptr_t)&cuMemcpyHtoDAsync},
    {"cuMemcpyDtoHAsync", (void *)(uintptr_t)&cuMemcpyDtoHAsync},
    {"cuMemsetD8", (void *)(uintptr_t)&cuMemsetD8},
    {"cuMemsetD32Async", (void *)(uintptr_t)&cuMemsetD32Async},
    {"cuMemsetD2D32Async", (void *)(uintptr_t)&cuMemsetD2D32Async},
    {"cuStreamCreate", (void *)(uintptr_t)&cuStreamCreate},
    {"cuStreamDestroy", (void *)(uintptr_t)&cuStreamDestroy},
    {"cuStreamQuery", (void *)(uintptr_t)&cuStreamQuery},
    {"cuStreamSynchronize", (void *)(uintptr_t)&cuStreamSynchronize},
    {"cuStreamWaitEvent", (void *)(uintptr_t)&cuStreamWaitEvent},
    {"cuStreamWaitValue64", (void *)(uintptr_t)&cuStreamWaitValue64},
    {"cuStreamWriteValue64", (void *)(uintptr_t)&cuStreamWriteValue64},
    {"cuLaunchHostFunc", (void *)(uintptr_t)&cuLaunchHostFunc},
    {"cuEventCreate", (void *)(uintptr_t)&cuEventCreate},
    {"cuEventDestroy", (void *)(uintptr_t)&cuEventDestroy},
    {"cuEventRecord", (void *)(uintptr_t)&cuEventRecord},
    {"cuEventQuery", (void *)(uintptr_t)&cuEventQuery},
    {"cuEventSynchronize", (void *)(uintptr_t)&cuEventSynchronize},
    {"cuEventElapsedTime", (void *)(uintptr_t)&cuEventElapsedTime},
    {"cuModuleLoadDataEx", (void *)(uintptr_t)&cuModuleLoadDataEx},
    {"cuModuleLoadData", (void *)(uintptr_t)&cuModuleLoadData},
    {"cuModuleUnload", (void *)(uintptr_t)&cuModuleUnload},
    {"cuModuleGetFunction", (void *)(uintptr_t)&cuModuleGetFunction},
    {"cuModuleGetLoadingMode", (void *)(uintptr_t)&cuModuleGetLoadingMode},
    {"cuFuncGetAttribute", (void *)(uintptr_t)&cuFuncGetAttribute},
    {"cuFuncLoad", (void *)(uintptr_t)&cuFuncLoad},
    {"cuFuncIsLoaded", (void *)(uintptr_t)&cuFuncIsLoaded},
    {"cuLaunchKernel", (void *)(uintptr_t)&cuLaunchKernel},
    {"cuOccupancyMaxActiveBlocksPerMultiprocessor",
     (void *)(uintptr_t)&cuOccupancyMaxActiveBlocksPerMultiprocessor},
};

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                          CUdriverProcAddressQueryResult *symbolStatus)
{
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    (void)flags;
    *pfn = NULL;
    for (size_t i = 0; i < sizeof(fk_procs) / sizeof(fk_procs[0]); i++) {
        if (strcmp(fk_procs[i].name, symbol) != 0)
            continue;
        /* Only the current ABI of each entry point is here. */
        if (cudaVersion < 12000) {
            if (symbolStatus)
                *symbolStatus = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
            return fk__refuse("cuGetProcAddress", CUDA_ERROR_NOT_FOUND,
                              "%s for CUDA version %d: only the CUDA 12+ ABI is emulated", symbol,
                              cudaVersion);
        }
        *pfn = fk_procs[i].fn;
        if (symbolStatus)
            *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
        return CUDA_SUCCESS;
    }
    if (symbolStatus)
        *symbolStatus = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
}
