/* The CUDA Driver API as the agent calls it (library ga_cuda), for its own
 * files and for CUDA-side programs beside it (benchmarks, tests).
 *
 * The driver is loaded lazily: nothing here links libcuda. ga_cu_load
 * dlopens libcuda.so.1 and takes every entry point the agent uses
 * (gpu/cu_fns.h) by its ABI name, the versioned symbol cuda.h's macros
 * name, so a call binds exactly as a linked one would; a program that
 * defines GA_CU_LAZY before including this header calls the driver through
 * that table by the usual names (cuMemAlloc(...)). Without a driver the
 * agent still starts, prints --help, and serves with the host backend.
 *
 * Every call goes through GA_CU: on failure it logs the call's text,
 * cuGetErrorName and cuGetErrorString, the raw CUresult and file:line
 * (subsystem "cuda"), and yields the CUresult mapped to a negative errno by
 * the agent's one map (ga_cu_errno). This header includes cuda.h: only
 * CUDA-side code includes it. */
#ifndef GPU_CU_H
#define GPU_CU_H

#include <cuda.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ga_device;

/* ---- the driver, loaded on first need ---- */

/* One pointer per entry point, as cuda.h declares it. */
struct ga_cu_fns {
#define GA__CU_FN(name) __typeof__(name) *p_##name;
#include "gpu/cu_fns.h"
#undef GA__CU_FN
};

/* The table: filled by ga_cu_load, read by every call. */
extern struct ga_cu_fns ga_cu_fns;

/* Loads the driver once per process (thread-safe; later calls return the
 * first one's result): dlopen("libcuda.so.1", or the library the
 * environment's LEASE_CUDA_DRIVER names) and every entry point. On
 * failure writes the reason to @err (dlerror's words, or the missing
 * symbol) and returns -ENOENT (no driver) or -ENOSYS (a driver without an
 * entry point the agent needs: older than CUDA 13). Makes no driver call. */
int ga_cu_load(char *err, size_t err_len);

/* 1 once ga_cu_load succeeded. */
int ga_cu_loaded(void);

/* The negative errno for @rc (0 for CUDA_SUCCESS). Pure: no driver call. */
int ga_cu_errno(CUresult rc);

/* cuGetErrorName of @rc, or "unknown CUresult". */
const char *ga_cu_name(CUresult rc);

/* Logs @rc when it is not CUDA_SUCCESS (see above); returns ga_cu_errno(rc). */
int ga_cu_check(CUresult rc, const char *call, const char *file, int line);

/* 0, or a negative errno after logging the failed call. */
#define GA_CU(call) ga_cu_check((call), #call, __FILE__, __LINE__)

/* GA_CU that also stores the raw CUresult in *@res_p, for a caller that
 * explains the failure in its own words too. */
#define GA_CU_R(call, res_p) ga_cu_check(*(res_p) = (call), #call, __FILE__, __LINE__)

/* Stores GA_CU(call) in @rc and jumps to @label when it failed. (A macro
 * wrapping GA_CU stringizes @call itself: its argument would arrive
 * expanded, table redirects and all.) */
#define GA_CU_GOTO(call, rc, label)                                                                \
    do {                                                                                           \
        (rc) = ga_cu_check((call), #call, __FILE__, __LINE__);                                     \
        if ((rc) < 0)                                                                              \
            goto label;                                                                            \
    } while (0)

/* The device's retained primary context (valid until ga_device_close). */
CUcontext ga_device_context(const struct ga_device *dev);

/* The loaded @kernel of image @image. Returns 0 or -ENOENT. */
int ga_device_kernel(const struct ga_device *dev, const char *image, const char *kernel,
                     CUfunction *fn_p);

#ifdef __cplusplus
}
#endif

#ifdef GA_CU_LAZY
/* Calls by the usual names go through the table. */
#undef cuCtxGetCurrent
#define cuCtxGetCurrent (*ga_cu_fns.p_cuCtxGetCurrent)
#undef cuCtxSetCurrent
#define cuCtxSetCurrent (*ga_cu_fns.p_cuCtxSetCurrent)
#undef cuCtxSynchronize
#define cuCtxSynchronize (*ga_cu_fns.p_cuCtxSynchronize)
#undef cuDeviceGet
#define cuDeviceGet (*ga_cu_fns.p_cuDeviceGet)
#undef cuDeviceGetAttribute
#define cuDeviceGetAttribute (*ga_cu_fns.p_cuDeviceGetAttribute)
#undef cuDeviceGetCount
#define cuDeviceGetCount (*ga_cu_fns.p_cuDeviceGetCount)
#undef cuDeviceGetDefaultMemPool
#define cuDeviceGetDefaultMemPool (*ga_cu_fns.p_cuDeviceGetDefaultMemPool)
#undef cuDeviceGetName
#define cuDeviceGetName (*ga_cu_fns.p_cuDeviceGetName)
#undef cuDeviceGetPCIBusId
#define cuDeviceGetPCIBusId (*ga_cu_fns.p_cuDeviceGetPCIBusId)
#undef cuDeviceGetUuid
#define cuDeviceGetUuid (*ga_cu_fns.p_cuDeviceGetUuid)
#undef cuDevicePrimaryCtxRelease
#define cuDevicePrimaryCtxRelease (*ga_cu_fns.p_cuDevicePrimaryCtxRelease)
#undef cuDevicePrimaryCtxRetain
#define cuDevicePrimaryCtxRetain (*ga_cu_fns.p_cuDevicePrimaryCtxRetain)
#undef cuDeviceTotalMem
#define cuDeviceTotalMem (*ga_cu_fns.p_cuDeviceTotalMem)
#undef cuDriverGetVersion
#define cuDriverGetVersion (*ga_cu_fns.p_cuDriverGetVersion)
#undef cuEventCreate
#define cuEventCreate (*ga_cu_fns.p_cuEventCreate)
#undef cuEventDestroy
#define cuEventDestroy (*ga_cu_fns.p_cuEventDestroy)
#undef cuEventElapsedTime
#define cuEventElapsedTime (*ga_cu_fns.p_cuEventElapsedTime)
#undef cuEventQuery
#define cuEventQuery (*ga_cu_fns.p_cuEventQuery)
#undef cuEventRecord
#define cuEventRecord (*ga_cu_fns.p_cuEventRecord)
#undef cuEventSynchronize
#define cuEventSynchronize (*ga_cu_fns.p_cuEventSynchronize)
#undef cuFuncGetAttribute
#define cuFuncGetAttribute (*ga_cu_fns.p_cuFuncGetAttribute)
#undef cuFuncIsLoaded
#define cuFuncIsLoaded (*ga_cu_fns.p_cuFuncIsLoaded)
#undef cuFuncLoad
#define cuFuncLoad (*ga_cu_fns.p_cuFuncLoad)
#undef cuGetErrorName
#define cuGetErrorName (*ga_cu_fns.p_cuGetErrorName)
#undef cuGetErrorString
#define cuGetErrorString (*ga_cu_fns.p_cuGetErrorString)
#undef cuInit
#define cuInit (*ga_cu_fns.p_cuInit)
#undef cuLaunchHostFunc
#define cuLaunchHostFunc (*ga_cu_fns.p_cuLaunchHostFunc)
#undef cuLaunchKernel
#define cuLaunchKernel (*ga_cu_fns.p_cuLaunchKernel)
#undef cuMemAlloc
#define cuMemAlloc (*ga_cu_fns.p_cuMemAlloc)
#undef cuMemAllocAsync
#define cuMemAllocAsync (*ga_cu_fns.p_cuMemAllocAsync)
#undef cuMemFree
#define cuMemFree (*ga_cu_fns.p_cuMemFree)
#undef cuMemFreeAsync
#define cuMemFreeAsync (*ga_cu_fns.p_cuMemFreeAsync)
#undef cuMemFreeHost
#define cuMemFreeHost (*ga_cu_fns.p_cuMemFreeHost)
#undef cuMemHostAlloc
#define cuMemHostAlloc (*ga_cu_fns.p_cuMemHostAlloc)
#undef cuMemHostGetDevicePointer
#define cuMemHostGetDevicePointer (*ga_cu_fns.p_cuMemHostGetDevicePointer)
#undef cuMemHostRegister
#define cuMemHostRegister (*ga_cu_fns.p_cuMemHostRegister)
#undef cuMemHostUnregister
#define cuMemHostUnregister (*ga_cu_fns.p_cuMemHostUnregister)
#undef cuMemPoolSetAttribute
#define cuMemPoolSetAttribute (*ga_cu_fns.p_cuMemPoolSetAttribute)
#undef cuMemcpyDtoH
#define cuMemcpyDtoH (*ga_cu_fns.p_cuMemcpyDtoH)
#undef cuMemcpyDtoHAsync
#define cuMemcpyDtoHAsync (*ga_cu_fns.p_cuMemcpyDtoHAsync)
#undef cuMemcpyHtoD
#define cuMemcpyHtoD (*ga_cu_fns.p_cuMemcpyHtoD)
#undef cuMemcpyHtoDAsync
#define cuMemcpyHtoDAsync (*ga_cu_fns.p_cuMemcpyHtoDAsync)
#undef cuMemsetD2D32Async
#define cuMemsetD2D32Async (*ga_cu_fns.p_cuMemsetD2D32Async)
#undef cuMemsetD32Async
#define cuMemsetD32Async (*ga_cu_fns.p_cuMemsetD32Async)
#undef cuMemsetD8
#define cuMemsetD8 (*ga_cu_fns.p_cuMemsetD8)
#undef cuModuleGetFunction
#define cuModuleGetFunction (*ga_cu_fns.p_cuModuleGetFunction)
#undef cuModuleGetLoadingMode
#define cuModuleGetLoadingMode (*ga_cu_fns.p_cuModuleGetLoadingMode)
#undef cuModuleLoadDataEx
#define cuModuleLoadDataEx (*ga_cu_fns.p_cuModuleLoadDataEx)
#undef cuModuleUnload
#define cuModuleUnload (*ga_cu_fns.p_cuModuleUnload)
#undef cuOccupancyMaxActiveBlocksPerMultiprocessor
#define cuOccupancyMaxActiveBlocksPerMultiprocessor                                                \
    (*ga_cu_fns.p_cuOccupancyMaxActiveBlocksPerMultiprocessor)
#undef cuStreamCreate
#define cuStreamCreate (*ga_cu_fns.p_cuStreamCreate)
#undef cuStreamDestroy
#define cuStreamDestroy (*ga_cu_fns.p_cuStreamDestroy)
#undef cuStreamQuery
#define cuStreamQuery (*ga_cu_fns.p_cuStreamQuery)
#undef cuStreamSynchronize
#define cuStreamSynchronize (*ga_cu_fns.p_cuStreamSynchronize)
#undef cuStreamWaitEvent
#define cuStreamWaitEvent (*ga_cu_fns.p_cuStreamWaitEvent)
#undef cuStreamWaitValue64
#define cuStreamWaitValue64 (*ga_cu_fns.p_cuStreamWaitValue64)
#undef cuStreamWriteValue64
#define cuStreamWriteValue64 (*ga_cu_fns.p_cuStreamWriteValue64)
#endif /* GA_CU_LAZY */

#endif /* GPU_CU_H */
