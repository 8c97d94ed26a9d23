/* Layer 1 of the CUDA boundary: this directory comes first on stagingd's
 * include path, so any stagingd source that includes <cudaTypedefs.h> stops here. */
#error "stagingd is CUDA-free: it may not include <cudaTypedefs.h>. Reach the GPU through lease-types only (see DESIGN.md)."
