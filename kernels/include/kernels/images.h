/* The kernels' cubins, embedded in the agent at build time (library
 * kernels_images, built only where the CUDA toolkit was found). Every image
 * was checked by cubincheck before it was embedded: a SASS-only cubin for
 * `arch`, no PTX, every name in `kernels` a kernel entry. The agent loads
 * all of them at start-up. */
#ifndef KERNELS_IMAGES_H
#define KERNELS_IMAGES_H

#include <stddef.h>

struct kn_image {
    const char *name;           /* "checksum": built from kernels/checksum.cu */
    const unsigned char *data;  /* the cubin, 64-byte aligned, static storage */
    size_t size;                /* bytes at data */
    unsigned int arch;          /* SM as digits: 90 = sm_90, 120 = sm_120 */
    const char *const *kernels; /* kernel_count entry names, then NULL */
    size_t kernel_count;
    /* Its launch descriptor (kernels/kdesc.h: which kernels a client may
     * LAUNCH and how), checked against the cubin; NULL: none may be. */
    const char *kdesc;
    size_t kdesc_len; /* bytes at kdesc, the NUL after them not counted */
};

extern const struct kn_image kn_images[];
extern const size_t kn_image_count;

#endif /* KERNELS_IMAGES_H */
