/* The CUDA registration backend of the lease service (library ga_cuda, built
 * only with the CUDA toolkit): cuMemHostRegister for PINNED and MAPPED
 * segments. It lives with the agent's CUDA layer so lease/ stays CUDA-free. */
#ifndef GPU_LEASE_BACKEND_H
#define GPU_LEASE_BACKEND_H

#include <cuda.h>
#include <stdint.h>

#include "lease/lease.h"

LT_EXTERN_C_BEGIN

/* One cuMemHostRegister call covers at most this many bytes; the service
 * registers a larger segment chunk by chunk (each chunk its own registration
 * and, for MAPPED, its own device pointer), and no PINNED or MAPPED lease
 * spans a chunk boundary. */
#define GA_CUDA_LEASE_CHUNK_DEFAULT (64ull << 30)
#define GA_CUDA_LEASE_CHUNK_MAX (256ull << 30)

/* Fills @backend_p with a backend that makes @ctx current (cuCtxSetCurrent) on
 * whichever thread calls it, then registers PINNED memory PORTABLE and MAPPED
 * memory PORTABLE|DEVICEMAP (device pointer from cuMemHostGetDevicePointer).
 * @chunk_bytes: 0 = GA_CUDA_LEASE_CHUNK_DEFAULT; else a page multiple no larger
 * than GA_CUDA_LEASE_CHUNK_MAX. @ctx stays the caller's (the agent's retained
 * primary context) and must outlive the service. Returns 0, -EINVAL, -ENOMEM.
 * A driver refusal of register_range or unregister_range names the call and
 * cuGetErrorName in *why_p, with -errno as the agent's one CUresult map
 * gives it (ga_cu_errno, gpu/cuda/errmap.c) and the code LT_E_MEMLOCK
 * (-ENOMEM), LT_E_UNSUPPORTED (-ENOTSUP) or LT_E_GPU_FAULT (anything
 * else). */
int ga_cuda_lease_backend_init(CUcontext ctx, uint64_t chunk_bytes, struct lease_backend *backend_p,
                               struct lt_failure *why_p);

struct ga_cuda_retire_gate; /* gpu/executor_cuda.h */

/* The bound on how long a client's unsatisfied wait (an unrung bell, a
 * ring's unstored word) may defer an unregistration, by default, before
 * the agent releases it (--bell-timeout). */
#define GA_CUDA_BELL_TIMEOUT_MS_DEFAULT 5000u

/* The reaper asks @gate (a copy is kept; NULL: none, as after the executor
 * is destroyed) before each cuMemHostUnregister: while a client-controlled
 * wait has stood unsatisfied for more than a grace of a few tens of ms it
 * defers (the bytes keep counting as retiring), and a wait standing for
 * @bell_timeout_ms (0: GA_CUDA_BELL_TIMEOUT_MS_DEFAULT) is released. A
 * watchdog releases every such wait older than the grace when an
 * unregistration, the reaper's or one made in place, has been pending in the
 * driver for more than about 100 ms (a wait queued just after the check, or
 * one no gate was asked about). Waits for a reaper call in progress to end. */
void ga_cuda_lease_backend_gate(struct lease_backend *backend,
                                const struct ga_cuda_retire_gate *gate, uint32_t bell_timeout_ms);

LT_EXTERN_C_END

#endif /* GPU_LEASE_BACKEND_H */
