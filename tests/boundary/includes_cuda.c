/* Must not compile with stagingd's flags: layer 1 of the boundary. */
#include <cuda.h>
int boundary_uses_cuda(void);
int boundary_uses_cuda(void)
{
    return (int)sizeof(CUdeviceptr);
}
