/* Opening the device: the hardware gate, the one retained primary context,
 * and the eager load of every embedded image. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu_call.h"
#include "device_internal.h"
#include "kernels/checksum.h"
#include "kernels/images.h"

/* Devices open in this process: the primary context is retained once. */
static pthread_mutex_t ga__open_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t ga__open_mask;

static int ga__open_claim(int ordinal)
{
    int rc = 0;
    pthread_mutex_lock(&ga__open_lock);
    if (ga__open_mask & (UINT64_C(1) << ordinal))
        rc = -EBUSY;
    else
        ga__open_mask |= UINT64_C(1) << ordinal;
    pthread_mutex_unlock(&ga__open_lock);
    return rc;
}

static void ga__open_release(int ordinal)
{
    pthread_mutex_lock(&ga__open_lock);
    ga__open_mask &= ~(UINT64_C(1) << ordinal);
    pthread_mutex_unlock(&ga__open_lock);
}

#define GA__MAX_CONNECTIONS "32"

/* Both variables are read by the driver at cuInit only: lazy loading would
 * defer a broken kernel to its first launch, and JIT would let PTX in. */
static void ga__env_force(void)
{
    static const char *const vars[][2] = {
        {"CUDA_MODULE_LOADING", "EAGER"},
        {"CUDA_DISABLE_PTX_JIT", "1"},
    };
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *old = getenv(vars[i][0]);
        if (old && strcmp(old, vars[i][1]) != 0)
            ga__warn("overriding %s=%s with %s", vars[i][0], old, vars[i][1]);
        if (setenv(vars[i][0], vars[i][1], 1) != 0)
            ga__warn("cannot set %s=%s in the environment", vars[i][0], vars[i][1]);
    }
    /* A stream waiting in cuStreamWaitValue64 (a doorbell, a ring's word)
     * blocks the hardware queue it is mapped to; with more streams than
     * queues (the default is 8) a waiting stream stalls unrelated ones that
     * share its queue. 32 is the most the driver takes. A value the user
     * set is left alone. */
    if (!getenv("CUDA_DEVICE_MAX_CONNECTIONS") &&
        setenv("CUDA_DEVICE_MAX_CONNECTIONS", GA__MAX_CONNECTIONS, 0) != 0)
        ga__warn("cannot set CUDA_DEVICE_MAX_CONNECTIONS=%s in the environment",
                 GA__MAX_CONNECTIONS);
}

/* The driver half of the gate: CUDA 13 driver API and an r580+ module. */
static int ga__driver_check(struct ga_device_info *info)
{
    int rc = GA_CU(cuDriverGetVersion(&info->driver_version));
    if (rc < 0)
        return rc;
    if (info->driver_version < GA_DRIVER_API_MIN) {
        ga__err("NVIDIA driver too old: found driver API %d.%d (cuDriverGetVersion %d), "
                "required %d.%d or newer (driver %d or newer); update the NVIDIA driver",
                info->driver_version / 1000, info->driver_version % 1000 / 10, info->driver_version,
                GA_DRIVER_API_MIN / 1000, GA_DRIVER_API_MIN % 1000 / 10, GA_KMD_MAJOR_MIN);
        return -ENOTSUP;
    }
    rc = ga__kmd_version_read(GA_KMD_VERSION_PATH, &info->kmd_major, &info->kmd_minor);
    if (rc < 0) {
        /* cuInit already refuses a kernel module that does not match the
         * user-space driver, which is 13.0+ here, i.e. r580+. */
        info->kmd_major = info->kmd_minor = -1;
        ga__warn("cannot read the kernel module version from %s (%s); relying on "
                 "cuDriverGetVersion %d",
                 GA_KMD_VERSION_PATH, strerror(-rc), info->driver_version);
        return 0;
    }
    if (info->kmd_major < GA_KMD_MAJOR_MIN) {
        ga__err("NVIDIA kernel module too old: found %d.%d in %s, required %d or newer; "
                "update the NVIDIA driver",
                info->kmd_major, info->kmd_minor, GA_KMD_VERSION_PATH, GA_KMD_MAJOR_MIN);
        return -ENOTSUP;
    }
    return 0;
}

static void ga__uuid_format(const CUuuid *u, char *out, size_t len)
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

/* Fills @info for device @ordinal. */
static int ga__device_describe(int ordinal, CUdevice *cu_p, struct ga_device_info *info)
{
    int count = 0;
    int rc = GA_CU(cuDeviceGetCount(&count));
    if (rc < 0)
        return rc;
    if (ordinal >= count) {
        ga__err("CUDA device %d requested, found %d device%s", ordinal, count,
                count == 1 ? "" : "s");
        return -ENODEV;
    }
    CUdevice cu;
    CUuuid uuid;
    int major = 0, minor = 0;
    if ((rc = GA_CU(cuDeviceGet(&cu, ordinal))) < 0 ||
        (rc = GA_CU(cuDeviceGetName(info->name, (int)sizeof(info->name), cu))) < 0 ||
        (rc = GA_CU(cuDeviceGetPCIBusId(info->pci_bus_id, (int)sizeof(info->pci_bus_id), cu))) <
            0 ||
        (rc = GA_CU(cuDeviceGetUuid(&uuid, cu))) < 0 ||
        (rc = GA_CU(
             cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, cu))) < 0 ||
        (rc = GA_CU(
             cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, cu))) < 0 ||
        (rc = GA_CU(cuDeviceGetAttribute(&info->can_map_host_memory,
                                         CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, cu))) < 0 ||
        (rc = GA_CU(cuDeviceTotalMem(&info->total_mem, cu))) < 0)
        return rc;
    ga__uuid_format(&uuid, info->uuid, sizeof(info->uuid));
    info->ordinal = ordinal;
    info->arch = (unsigned int)(major * 10 + minor);
    *cu_p = cu;
    return 0;
}

static int ga__kernels_bind(struct ga_device *dev)
{
    int rc = ga_device_kernel(dev, KN_CHECKSUM_IMAGE, KN_K_BLOCK_CHECKSUM, &dev->k_block_checksum);
    if (rc == 0)
        rc = ga_device_kernel(dev, KN_CHECKSUM_IMAGE, KN_K_BLOCK_VERIFY, &dev->k_block_verify);
    if (rc < 0) {
        ga__err("the images lack image '%s' with kernels %s and %s, which the agent needs",
                KN_CHECKSUM_IMAGE, KN_K_BLOCK_CHECKSUM, KN_K_BLOCK_VERIFY);
        return -ENOEXEC;
    }
    return 0;
}

int ga_device_open(const struct ga_device_opts *opts, struct ga_device **dev_p)
{
    if (!opts || !dev_p || opts->ordinal < 0 || opts->ordinal >= GA_MAX_DEVICES ||
        (opts->images && !opts->image_count)) {
        ga__err("ga_device_open: expected options with a device ordinal in 0..%d and a "
                "non-empty image table, found %s",
                GA_MAX_DEVICES - 1,
                !opts || !dev_p ? "a NULL pointer" : "an ordinal or image table out of range");
        return -EINVAL;
    }
    const struct kn_image *images = opts->images ? opts->images : kn_images;
    size_t image_count = opts->images ? opts->image_count : kn_image_count;
    unsigned int required = opts->required_arch ? opts->required_arch : images[0].arch;

    if (opts->log)
        ga__log_sink_set(opts->log);
    char no_driver[512];
    if (ga_cu_load(no_driver, sizeof no_driver) < 0) {
        ga__err("no NVIDIA driver: %s", no_driver);
        return -ENODEV;
    }
    struct ga_device *dev = calloc(1, sizeof(*dev));
    if (!dev)
        return -ENOMEM;
    ga__env_force();
    int rc = GA_CU(cuInit(0));
    if (rc < 0) {
        ga__err("no usable NVIDIA driver or GPU (cuInit failed)");
        goto fail_free;
    }
    if ((rc = ga__driver_check(&dev->info)) < 0 ||
        (rc = ga__device_describe(opts->ordinal, &dev->cu_device, &dev->info)) < 0)
        goto fail_free;
    struct ga_device_info *in = &dev->info;
    ga__info("device %d: %s, PCI %s, %s, sm_%u, %zu MiB, driver API %d, kernel module %d.%d",
             in->ordinal, in->name, in->pci_bus_id, in->uuid, in->arch, in->total_mem >> 20,
             in->driver_version, in->kmd_major, in->kmd_minor);
    if (in->arch != required) {
        char why[1024];
        ga__arch_refusal_format(why, sizeof(why), in, required);
        ga__err("refusing the GPU: %s", why);
        rc = -ENOEXEC;
        goto fail_free;
    }
    if ((rc = ga__open_claim(opts->ordinal)) < 0) {
        ga__err("device %d is already open in this process; its primary context is "
                "retained once: share that handle",
                opts->ordinal);
        goto fail_free;
    }
    GA_CU_GOTO(cuDevicePrimaryCtxRetain(&dev->ctx, dev->cu_device), rc, fail_claim);
    GA_CU_GOTO(cuCtxSetCurrent(dev->ctx), rc, fail_ctx);
    GA_CU_GOTO(cuStreamCreate(&dev->stream, CU_STREAM_NON_BLOCKING), rc, fail_ctx);
    if ((rc = ga__modules_load(dev, images, image_count)) < 0)
        goto fail_stream;
    if ((rc = ga__kernels_bind(dev)) < 0)
        goto fail_modules;
    *dev_p = dev;
    return 0;

fail_modules:
    ga__modules_unload(dev);
fail_stream:
    GA_CU(cuStreamDestroy(dev->stream));
fail_ctx:
    GA_CU(cuCtxSetCurrent(NULL));
    GA_CU(cuDevicePrimaryCtxRelease(dev->cu_device));
fail_claim:
    ga__open_release(opts->ordinal);
fail_free:
    free(dev);
    return rc;
}

void ga_device_close(struct ga_device *dev)
{
    if (!dev)
        return;
    GA_CU(cuCtxSetCurrent(dev->ctx));
    GA_CU(cuStreamSynchronize(dev->stream));
    ga__modules_unload(dev);
    GA_CU(cuStreamDestroy(dev->stream));
    GA_CU(cuCtxSetCurrent(NULL));
    GA_CU(cuDevicePrimaryCtxRelease(dev->cu_device));
    ga__open_release(dev->info.ordinal);
    free(dev);
}

const struct ga_device_info *ga_device_info_get(const struct ga_device *dev)
{
    return &dev->info;
}

CUcontext ga_device_context(const struct ga_device *dev)
{
    return dev->ctx;
}

int ga_device_make_current(struct ga_device *dev)
{
    if (!dev)
        return -EINVAL;
    return GA_CU(cuCtxSetCurrent(dev->ctx));
}
