/* Asks the loader for a driver entry point by name: no CUDA symbol is
 * imported or defined, only the string says it. */
#include <dlfcn.h>
#include <stdio.h>

int main(void)
{
    void *init = dlsym(RTLD_DEFAULT, "cuInit");
    printf("%p\n", init);
    return 0;
}
