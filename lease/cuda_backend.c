/* cuMemHostRegister as a lease registration backend. Calls may land on any
 * worker thread, so each one makes the agent's context current first. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <unistd.h>

#include "lease/cuda_backend.h"

struct cuda_ctx {
    CUcontext ctx;
};

int lease_cuda_errno(CUresult res)
{
    switch (res) {
    case CUDA_SUCCESS:
        return 0;
    case CUDA_ERROR_INVALID_VALUE:
        return -EINVAL;
    case CUDA_ERROR_OUT_OF_MEMORY:
        return -ENOMEM;
    case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:
        return -EEXIST;
    case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED:
        return -ENOENT;
    case CUDA_ERROR_NOT_PERMITTED:
        return -EPERM;
    case CUDA_ERROR_NOT_SUPPORTED:
        return -ENOTSUP;
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_CONTEXT:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
        return -ENODEV;
    default:
        return -EIO;
    }
}

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
static int cu_fail(struct lt_failure *why_p, const char *call, CUresult res, const void *base,
                   uint64_t length)
{
    const char *name = NULL;
    if (cuGetErrorName(res, &name) != CUDA_SUCCESS || !name)
        name = "unknown CUresult";
    int rc = lease_cuda_errno(res);
    return lt_failure_set(why_p, cu_code(rc), rc,
                          "cuda backend: %s on %p + %" PRIu64 " bytes failed: %s (%d)", call, base,
                          length, name, (int)res);
}

#define CU_TRY(why_p, call, base, length)                                                          \
    do {                                                                                           \
        CUresult res_ = (call);                                                                    \
        if (res_ != CUDA_SUCCESS)                                                                  \
            return cu_fail(why_p, #call, res_, base, length);                                      \
    } while (0)

static int cuda_register(void *ctx, void *base, uint64_t length, enum lt_class cls,
                         uint64_t *dev_ptr_p, struct lt_failure *why_p)
{
    struct cuda_ctx *c = ctx;
    unsigned flags = CU_MEMHOSTREGISTER_PORTABLE;
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
        CUresult res = cuMemHostGetDevicePointer(&dev, base, 0);
        if (res != CUDA_SUCCESS) {
            /* Undo the registration; if that fails too, its error is the one to see. */
            CU_TRY(why_p, cuMemHostUnregister(base), base, length);
            return cu_fail(why_p, "cuMemHostGetDevicePointer(&dev, base, 0)", res, base, length);
        }
    }
    *dev_ptr_p = (uint64_t)dev;
    return 0;
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

static void cuda_fini(void *ctx)
{
    free(ctx);
}

int lease_cuda_backend_init(CUcontext ctx, uint64_t chunk_bytes, struct lease_backend *backend_p,
                            struct lt_failure *why_p)
{
    long page = sysconf(_SC_PAGESIZE);
    if (!ctx || !backend_p)
        return lt_failure_set(why_p, LT_E_BAD_VALUE, -EINVAL,
                              "cuda backend: expected a context and an output pointer");
    if (chunk_bytes == 0)
        chunk_bytes = LEASE_CUDA_DEFAULT_CHUNK;
    if (chunk_bytes % (uint64_t)page != 0 || chunk_bytes > LEASE_CUDA_MAX_CHUNK)
        return lt_failure_set(why_p, LT_E_BAD_VALUE, -EINVAL,
                              "cuda backend: chunk size: expected a multiple of %ld bytes up to "
                              "%llu, found %" PRIu64,
                              page, LEASE_CUDA_MAX_CHUNK, chunk_bytes);
    struct cuda_ctx *c = malloc(sizeof(*c));
    if (!c)
        return lt_failure_set(why_p, LT_E_SYSTEM, -ENOMEM, "cuda backend: out of memory");
    c->ctx = ctx;
    *backend_p = (struct lease_backend){
        .name = "cuda (cuMemHostRegister)",
        .ctx = c,
        .chunk_bytes = chunk_bytes,
        .register_range = cuda_register,
        .unregister_range = cuda_unregister,
        .capacity = NULL,
        .fini = cuda_fini,
    };
    return 0;
}
