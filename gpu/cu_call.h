/* Every CUDA Driver API call in gpu/ goes through GA_CU: on failure it logs
 * the call's text, cuGetErrorName and cuGetErrorString, the raw CUresult and
 * file:line, and yields the CUresult mapped to a negative errno. */
#ifndef GPU_CU_CALL_H
#define GPU_CU_CALL_H

#include <cuda.h>

/* The negative errno for @rc (0 for CUDA_SUCCESS). Pure: no driver call. */
int ga__cu_errno(CUresult rc);

/* Logs @rc when it is not CUDA_SUCCESS (see above); returns ga__cu_errno(rc). */
int ga__cu_check(CUresult rc, const char *call, const char *file, int line);

/* 0, or a negative errno after logging the failed call. */
#define GA_CU(call) ga__cu_check((call), #call, __FILE__, __LINE__)

/* Stores GA_CU(call) in @rc and jumps to @label when it failed. */
#define GA_CU_GOTO(call, rc, label)                                                                \
    do {                                                                                           \
        (rc) = GA_CU(call);                                                                        \
        if ((rc) < 0)                                                                              \
            goto label;                                                                            \
    } while (0)

#endif /* GPU_CU_CALL_H */
