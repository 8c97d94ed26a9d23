/* A library that only pretends to be one of the CUDA family; CMake builds it
 * under the family's names (libcublas.so.13, a libfoo.so whose SONAME is
 * libcufft.so.12, a "libcuda" without .so). Nothing in it is CUDA-like. */
#define BD_API __attribute__((visibility("default")))

BD_API int bd_family_marker(void);

int bd_family_marker(void)
{
    return 13;
}
