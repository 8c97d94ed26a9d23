/* An LD_AUDIT module that only pretends to be the driver: its file name is
 * innocent, its SONAME is libcuda.so.1. ld.so loads audit modules into a
 * namespace of their own, which dl_iterate_phdr() does not list. */
#include <link.h>

#define BD_API __attribute__((visibility("default")))

BD_API unsigned int la_version(unsigned int version);

unsigned int la_version(unsigned int version)
{
    return version < LAV_CURRENT ? version : LAV_CURRENT;
}
