/* The logging half of GA_CU; asks the driver (when loaded) for the words. */
#include "cu_call.h"
#include "ga_internal.h"

const char *ga_cu_name(CUresult rc)
{
    const char *name = NULL;
    if (!ga_cu_loaded() || cuGetErrorName(rc, &name) != CUDA_SUCCESS || !name)
        name = "unknown CUresult";
    return name;
}

int ga_cu_check(CUresult rc, const char *call, const char *file, int line)
{
    if (rc == CUDA_SUCCESS)
        return 0;
    const char *name = ga_cu_name(rc), *text = NULL;
    if (!ga_cu_loaded() || cuGetErrorString(rc, &text) != CUDA_SUCCESS || !text)
        text = "no description";
    ga__err("%s failed: %s (CUresult %d): %s [%s:%d]", call, name, (int)rc, text, file, line);
    return ga_cu_errno(rc);
}
