/* libhelper.so: an innocent name that loads the driver itself at run time,
 * as cuBLAS and its kin do; it does not list libcuda as a dependency. */
#include <dlfcn.h>

#define BD_API __attribute__((visibility("default")))

BD_API int bd_helper_start(void);

int bd_helper_start(void)
{
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    return driver ? 0 : -1;
}
