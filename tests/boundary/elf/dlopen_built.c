/* Loads a library whose name is built at run time, so no string names it:
 * only the import of the loader's entry point gives it away. BD_DLMOPEN
 * uses dlmopen() instead. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    char name[64];
    snprintf(name, sizeof(name), "lib%s.so.%d", argc > 1 ? argv[1] : "x", argc);
#ifdef BD_DLMOPEN
    void *lib = dlmopen(LM_ID_NEWLM, name, RTLD_NOW);
#else
    void *lib = dlopen(name, RTLD_NOW);
#endif
    printf("%p\n", lib);
    return 0;
}
