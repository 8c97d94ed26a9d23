/* libstorage_helpers.so: an innocent name and SONAME, but it defines driver
 * entry points, as an interposing shim would. */
#define BD_API __attribute__((visibility("default")))

BD_API int cuInit(unsigned int flags);
BD_API int cuDriverGetVersion(int *version);

int cuInit(unsigned int flags)
{
    return (int)flags;
}

int cuDriverGetVersion(int *version)
{
    *version = 13000;
    return 0;
}
