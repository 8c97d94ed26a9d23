/* The CUDA registration backend (library lease_cuda, built only with the CUDA
 * toolkit): cuMemHostRegister for PINNED and MAPPED segments. */
#ifndef LEASE_CUDA_BACKEND_H
#define LEASE_CUDA_BACKEND_H

#include <cuda.h>
#include <stdint.h>

#include "lease/lease.h"

LT_EXTERN_C_BEGIN

/* One cuMemHostRegister call covers at most this many bytes; the service
 * registers a larger segment chunk by chunk (each chunk its own registration
 * and, for MAPPED, its own device pointer), and no PINNED or MAPPED lease
 * spans a chunk boundary. */
#define LEASE_CUDA_DEFAULT_CHUNK (64ull << 30)
#define LEASE_CUDA_MAX_CHUNK (256ull << 30)

/* Fills @backend_p with a backend that makes @ctx current (cuCtxSetCurrent) on
 * whichever thread calls it, then registers PINNED memory PORTABLE and MAPPED
 * memory PORTABLE|DEVICEMAP (device pointer from cuMemHostGetDevicePointer).
 * @chunk_bytes: 0 = LEASE_CUDA_DEFAULT_CHUNK; else a page multiple no larger
 * than LEASE_CUDA_MAX_CHUNK. @ctx stays the caller's (the agent's retained
 * primary context) and must outlive the service. Returns 0, -EINVAL, -ENOMEM.
 * A driver refusal of register_range or unregister_range names the call and
 * cuGetErrorName in *why_p, with -errno as lease_cuda_errno maps the
 * CUresult and the code LT_E_MEMLOCK (-ENOMEM), LT_E_UNSUPPORTED (-ENOTSUP)
 * or LT_E_GPU_FAULT (anything else). */
int lease_cuda_backend_init(CUcontext ctx, uint64_t chunk_bytes, struct lease_backend *backend_p,
                            struct lt_failure *why_p);

/* The -errno for a CUresult, as this backend maps it. */
int lease_cuda_errno(CUresult res);

LT_EXTERN_C_END

#endif /* LEASE_CUDA_BACKEND_H */
