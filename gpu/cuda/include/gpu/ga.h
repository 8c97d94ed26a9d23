/* ga: the GPU agent's CUDA backend (Driver API only).
 *
 * A device is opened once per process: the hardware gate (driver >= 13.0
 * and kernel module >= 580, compute capability == the embedded cubins'
 * arch), the device's primary context retained once, every embedded cubin
 * loaded and every kernel resolved and loaded eagerly. No other context is
 * ever created and nothing is JIT-compiled. Functions return 0 (or a count)
 * on success and a negative errno on failure; the function that decides an
 * error logs it once (base_log, subsystem "cuda"), with the CUDA call and
 * its CUresult where there is one.
 *
 * This header does not include cuda.h: device addresses travel as uint64_t
 * (a CUdeviceptr, or a mapped host pointer's device address). */
#ifndef GPU_GA_H
#define GPU_GA_H

#include <stddef.h>
#include <stdint.h>

struct base_log_sink;
struct kn_image;

/* ---- the device ---- */

struct ga_device;

struct ga_device_opts {
    int ordinal;                   /* CUDA device index (after CUDA_VISIBLE_DEVICES) */
    unsigned int required_arch;    /* digits (90 = sm_90); 0: the embedded images' arch */
    const struct kn_image *images; /* NULL: the embedded kn_images table */
    size_t image_count;
    /* Every line of the CUDA layer (subsystem "cuda"), from this call on:
     * kept by pointer, it must outlive the device. NULL: the process
     * default (base/log.h). */
    const struct base_log_sink *log;
};

struct ga_device_info {
    int ordinal;
    char name[256];
    char pci_bus_id[32];      /* "0000:41:00.0" */
    char uuid[48];            /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
    unsigned int arch;        /* compute capability as digits: 9.0 -> 90 */
    int driver_version;       /* cuDriverGetVersion: 13000 for CUDA 13.0 */
    int kmd_major, kmd_minor; /* kernel module, e.g. 580 and 159; -1 when unreadable */
    size_t total_mem;         /* bytes */
    int can_map_host_memory;
};

/* Opens device @opts->ordinal through the hardware gate and loads every
 * image (see the top of this file). Sets CUDA_MODULE_LOADING=EAGER and
 * CUDA_DISABLE_PTX_JIT=1 in the environment first (effective when this is
 * the process's first cuInit). On success *dev_p is owned by the caller:
 * release it with ga_device_close. Returns 0, or -ENODEV (no driver or no
 * such device), -ENOTSUP (driver too old), -ENOEXEC (compute capability
 * differs from the images' arch, or an image is corrupt or lacks a kernel),
 * -EBUSY (this device is already open in this process), -EINVAL, or the
 * errno of a failed CUDA call. */
int ga_device_open(const struct ga_device_opts *opts, struct ga_device **dev_p);

/* Unloads the modules and releases the primary context; NULL is a no-op.
 * The caller must have no work of its own left on the context. */
void ga_device_close(struct ga_device *dev);

/* What the gate read about @dev; valid until ga_device_close. */
const struct ga_device_info *ga_device_info_get(const struct ga_device *dev);

/* Makes @dev's primary context current on the calling thread, for callers
 * that use the Driver API on it directly. Returns 0 or a negative errno. */
int ga_device_make_current(struct ga_device *dev);

/* ---- the block checksum (kernels/checksum.cu) ---- */

/* Checksums of the consecutive @block_size-byte blocks of the @len bytes at
 * device address @data (device memory or mapped host memory, 8-byte
 * aligned); the last block may be short. Writes kr_block_count(len,
 * block_size) values to host array @sums_p, equal to kr_block_checksums.
 * Synchronous. Returns that count, or -EINVAL (block_size 0 or not a
 * multiple of 8, data unaligned or 0, more than INT32_MAX blocks) or the
 * errno of a failed CUDA call or launch. */
int ga_checksum_compute(struct ga_device *dev, uint64_t data, size_t len, uint32_t block_size,
                        uint64_t *sums_p);

/* Verifies the blocks of @data (as above) against host array @expected.
 * Writes the index of the first block that differs to *first_bad_p (-1: all
 * match) and the number of differing blocks to *bad_count_p. Synchronous.
 * Returns 0 or a negative errno as ga_checksum_compute. */
int ga_checksum_verify(struct ga_device *dev, uint64_t data, size_t len, uint32_t block_size,
                       const uint64_t *expected, int64_t *first_bad_p, uint64_t *bad_count_p);

#endif /* GPU_GA_H */
