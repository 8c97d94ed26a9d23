/* Loading the driver (gpu/cu.h): dlopen libcuda.so.1 once and take every
 * entry point by the ABI name cuda.h's macros give it. Nothing else in the
 * agent links or names the library, so a machine without the NVIDIA driver
 * still runs lease-agent --help, --version and --backend host. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Here the names must stay cuda.h's (the ABI names to look up), not the
 * table's redirects: the target builds with GA_CU_LAZY for every other file. */
#undef GA_CU_LAZY
#include "gpu/cu.h"

#define GA__DRIVER "libcuda.so.1"
#define GA__STR(x) GA__STR2(x)
#define GA__STR2(x) #x

struct ga_cu_fns ga_cu_fns;

static pthread_mutex_t ga__load_lock = PTHREAD_MUTEX_INITIALIZER;
static int ga__load_rc = 1; /* 1: not tried yet */
static char ga__load_err[512];
static int ga__loaded;

static int ga__load(void)
{
    /* LEASE_CUDA_DRIVER names another library (a test's missing path, the
     * CPU fake of tests/fakecuda); it changes nothing LD_LIBRARY_PATH could
     * not. */
    const char *lib_name = getenv("LEASE_CUDA_DRIVER");
    if (!lib_name || !*lib_name)
        lib_name = GA__DRIVER;
    dlerror();
    void *lib = dlopen(lib_name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        if (e)
            snprintf(ga__load_err, sizeof ga__load_err, "%s", e);
        else
            snprintf(ga__load_err, sizeof ga__load_err, "%s: not found", lib_name);
        return -ENOENT;
    }
    struct ga_cu_fns t;
    memset(&t, 0, sizeof t);
    /* The name cuda.h maps each call to (cuMemAlloc -> cuMemAlloc_v2): the
     * symbol a linked program would bind. */
#define GA__CU_FN(name)                                                                            \
    do {                                                                                           \
        void *sym = dlsym(lib, GA__STR(name));                                                     \
        if (!sym) {                                                                                \
            snprintf(ga__load_err, sizeof ga__load_err,                                            \
                     "%s lacks %s, which the agent needs (a driver older than CUDA 13?)",          \
                     lib_name, GA__STR(name));                                                     \
            return -ENOSYS;                                                                        \
        }                                                                                          \
        t.p_##name = (__typeof__(t.p_##name))(uintptr_t)sym;                                       \
    } while (0);
#include "gpu/cu_fns.h"
#undef GA__CU_FN
    ga_cu_fns = t;
    return 0; /* the library stays loaded for the process's life */
}

int ga_cu_load(char *err, size_t err_len)
{
    pthread_mutex_lock(&ga__load_lock);
    if (ga__load_rc == 1) {
        ga__load_rc = ga__load();
        __atomic_store_n(&ga__loaded, ga__load_rc == 0, __ATOMIC_RELEASE);
    }
    int rc = ga__load_rc;
    if (rc < 0 && err && err_len)
        snprintf(err, err_len, "%s", ga__load_err);
    pthread_mutex_unlock(&ga__load_lock);
    return rc;
}

int ga_cu_loaded(void)
{
    return __atomic_load_n(&ga__loaded, __ATOMIC_ACQUIRE);
}
