/* libshim.so: an innocent name and SONAME that defines a driver entry point
 * and calls it itself, so its user never imports one. */
#define BD_API __attribute__((visibility("default")))

BD_API int cuInit(unsigned int flags);
BD_API int bd_helper_start(void);

int cuInit(unsigned int flags)
{
    return (int)flags;
}

int bd_helper_start(void)
{
    return cuInit(0);
}
