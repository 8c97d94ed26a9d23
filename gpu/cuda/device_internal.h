/* The device object, shared by device.c, modules.c and checksum.c. */
#ifndef GPU_DEVICE_INTERNAL_H
#define GPU_DEVICE_INTERNAL_H

#include "cu_call.h"
#include "ga_internal.h"

struct kn_image;

struct ga_module {
    const struct kn_image *image;
    CUmodule module;
    CUfunction *functions; /* one per image->kernels[] */
};

struct ga_device {
    struct ga_device_info info;
    CUdevice cu_device;
    CUcontext ctx;   /* the primary context, retained once */
    CUstream stream; /* non-blocking; used by the checksum calls */
    struct ga_module *modules;
    size_t module_count;
    CUfunction k_block_checksum;
    CUfunction k_block_verify;
};

/* Checks, loads and eagerly loads every kernel of @count images into the
 * current (primary) context. On failure everything loaded is unloaded.
 * Returns 0, -ENOEXEC (an image refused) or the errno of a failed call. */
int ga__modules_load(struct ga_device *dev, const struct kn_image *images, size_t count);

/* Unloads what ga__modules_load loaded; safe on a partial or empty set. */
void ga__modules_unload(struct ga_device *dev);

#endif /* GPU_DEVICE_INTERNAL_H */
