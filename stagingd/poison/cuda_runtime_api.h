/* Layer 1 of the CUDA boundary: this directory comes first on stagingd's
 * include path, so any stagingd source that includes <cuda_runtime_api.h> stops here. */
#error "stagingd is CUDA-free: it may not include <cuda_runtime_api.h>. Reach the GPU through lease-types only (see DESIGN.md)."
