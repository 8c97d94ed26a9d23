/* gpu_gate: runs a GPU test only where a GPU can run it.
 *
 * GPU test binaries link libcuda.so.1, so on a machine without the NVIDIA
 * driver they cannot even be loaded and would fail with the loader's exit
 * code. ctest runs them through this gate, which probes the driver with
 * dlopen (this program itself never links CUDA) and exits 77 -- "skipped" to
 * ctest -- when there is no driver or no device, with a line saying which.
 * Otherwise it execs the test, whose own result stands. */
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define SKIP 77

typedef int (*cu_init_fn)(unsigned int);
typedef int (*cu_count_fn)(int *);

static int probe_device_count(char *why, size_t why_len)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(why, why_len, "no NVIDIA driver: %s", dlerror());
        return -1;
    }
    cu_init_fn init = (cu_init_fn)(uintptr_t)dlsym(lib, "cuInit");
    cu_count_fn count = (cu_count_fn)(uintptr_t)dlsym(lib, "cuDeviceGetCount");
    int n = 0;
    int rc = -1;
    if (!init || !count) {
        snprintf(why, why_len, "libcuda.so.1 lacks cuInit/cuDeviceGetCount");
    } else if ((rc = init(0)) != 0) {
        snprintf(why, why_len, "cuInit failed with CUresult %d (no usable GPU)", rc);
        rc = -1;
    } else if ((rc = count(&n)) != 0 || n < 1) {
        snprintf(why, why_len, "no CUDA device (cuDeviceGetCount: rc %d, count %d)", rc, n);
        rc = -1;
    }
    /* The driver stays loaded until exec replaces this image. */
    return rc == 0 ? n : -1;
}

int main(int argc, char **argv)
{
    char why[512];
    if (argc < 2) {
        fprintf(stderr, "usage: gpu_gate <gpu-test> [args...]\n");
        return 2;
    }
    if (probe_device_count(why, sizeof(why)) < 0) {
        printf("SKIP %s: %s\n", argv[1], why);
        return SKIP;
    }
    /* By PATH too: a test may name its interpreter (`sh script`). */
    execvp(argv[1], argv + 1);
    fprintf(stderr, "gpu_gate: cannot exec %s: %s\n", argv[1], strerror(errno));
    return 2;
}
