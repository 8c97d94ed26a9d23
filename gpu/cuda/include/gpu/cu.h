/* The CUDA Driver API as the agent calls it (library ga_cuda), for its own
 * files and for CUDA-side programs beside it (benchmarks, tests).
 *
 * Every call goes through GA_CU: on failure it logs the call's text,
 * cuGetErrorName and cuGetErrorString, the raw CUresult and file:line
 * (subsystem "cuda"), and yields the CUresult mapped to a negative errno by
 * the agent's one map (ga_cu_errno). This header includes cuda.h: only
 * CUDA-side code includes it. */
#ifndef GPU_CU_H
#define GPU_CU_H

#include <cuda.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ga_device;

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

/* Stores GA_CU(call) in @rc and jumps to @label when it failed. */
#define GA_CU_GOTO(call, rc, label)                                                                \
    do {                                                                                           \
        (rc) = GA_CU(call);                                                                        \
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

#endif /* GPU_CU_H */
