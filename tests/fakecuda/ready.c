/* fakecuda_ready: the fixture every <test>_fakecuda needs. It proves that
 * the libcuda.so.1 this process loads is the fake (its device is named
 * "fakecuda ...") and that it starts, so that a missing or broken fake fails
 * loudly instead of letting the GPU tests skip themselves (exit 77) for want
 * of a device. */
#include <cuda.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    int count = 0;
    char name[128] = "";
    CUresult rc = cuInit(0);
    if (rc == CUDA_SUCCESS)
        rc = cuDeviceGetCount(&count);
    /* Through cuGetProcAddress, as a lazily loading agent would call it. */
    CUresult (*get_name)(char *, int, CUdevice) = NULL;
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (rc == CUDA_SUCCESS && count > 0)
        rc = cuGetProcAddress("cuDeviceGetName", (void **)&get_name, CUDA_VERSION,
                              CU_GET_PROC_ADDRESS_DEFAULT, &found);
    if (rc == CUDA_SUCCESS && found == CU_GET_PROC_ADDRESS_SUCCESS && get_name)
        rc = get_name(name, (int)sizeof(name), 0);
    if (rc != CUDA_SUCCESS || count < 1 || strncmp(name, "fakecuda", 8) != 0) {
        fprintf(stderr,
                "fakecuda_ready: expected the fake driver (tests/fakecuda) with one device, "
                "found CUresult %d, %d devices, device 0 named '%s'\n",
                (int)rc, count, name);
        return 1;
    }
    printf("fakecuda_ready: %s\n", name);
    return 0;
}
