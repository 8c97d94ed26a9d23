/* gpu/cuda's own view of the driver: gpu/cu.h (GA_CU and the one CUresult
 * map) for every file that calls it. */
#ifndef GPU_CU_CALL_H
#define GPU_CU_CALL_H

#include "gpu/cu.h"

#endif /* GPU_CU_CALL_H */
