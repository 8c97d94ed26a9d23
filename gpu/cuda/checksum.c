/* Launching the block checksum kernels (kernels/checksum.cu) and bringing
 * their results back to the host. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cu_call.h"
#include "device_internal.h"
#include "kernels/blockhash_ref.h"
#include "kernels/checksum.h"

/* Validates a request and returns its block count in *n_p. */
static int ga__checksum_args(const struct ga_device *dev, uint64_t data, size_t len,
                             uint32_t block_size, const void *array, size_t *n_p)
{
    if (!dev || !array) {
        ga__err("checksum: expected a device and a host array, found NULL");
        return -EINVAL;
    }
    if (block_size == 0 || block_size % 8 != 0) {
        ga__err("checksum: expected a block size that is a non-zero multiple of 8, found %u",
                block_size);
        return -EINVAL;
    }
    if (len && (data == 0 || data % 8 != 0)) {
        ga__err("checksum: expected an 8-byte aligned device address, found %#llx",
                (unsigned long long)data);
        return -EINVAL;
    }
    size_t n = kr_block_count(len, block_size);
    if (n > INT32_MAX) {
        ga__err("checksum: %zu bytes in %u-byte blocks make %zu blocks, at most %d fit one "
                "launch",
                len, block_size, n, INT32_MAX);
        return -EINVAL;
    }
    *n_p = n;
    return 0;
}

/* One launch of @fn over @n blocks with @params on the device's stream.
 * Launch-time errors come from cuLaunchKernel, faults from the sync that
 * the callers do after copying the results. */
static int ga__launch(struct ga_device *dev, CUfunction fn, size_t n, void **params)
{
    return GA_CU(cuLaunchKernel(fn, (unsigned int)n, 1, 1, KN_CHECKSUM_THREADS, 1, 1, 0,
                                dev->stream, params, NULL));
}

int ga_checksum_compute(struct ga_device *dev, uint64_t data, size_t len, uint32_t block_size,
                        uint64_t *sums_p)
{
    size_t n = 0;
    int rc = ga__checksum_args(dev, data, len, block_size, sums_p, &n);
    if (rc < 0 || n == 0)
        return rc;
    /* Staged so that *sums_p is written only on success. */
    uint64_t *sums = malloc(n * sizeof(*sums));
    if (!sums)
        return -ENOMEM;
    CUdeviceptr d_sums = 0;
    if ((rc = ga_device_make_current(dev)) < 0)
        goto fail_host;
    GA_CU_GOTO(cuMemAlloc(&d_sums, n * sizeof(*sums)), rc, fail_host);
    CUdeviceptr d_data = (CUdeviceptr)data;
    unsigned long long len_arg = len;
    unsigned int bs_arg = block_size;
    void *params[] = {&d_data, &len_arg, &bs_arg, &d_sums};
    if ((rc = ga__launch(dev, dev->k_block_checksum, n, params)) < 0)
        goto fail_dev;
    GA_CU_GOTO(cuMemcpyDtoHAsync(sums, d_sums, n * sizeof(*sums), dev->stream), rc, fail_sync);
    GA_CU_GOTO(cuStreamSynchronize(dev->stream), rc, fail_dev);
    GA_CU_GOTO(cuMemFree(d_sums), rc, fail_host);
    memcpy(sums_p, sums, n * sizeof(*sums));
    free(sums);
    return (int)n;

fail_sync:
    GA_CU(cuStreamSynchronize(dev->stream)); /* nothing may still use d_sums */
fail_dev:
    GA_CU(cuMemFree(d_sums));
fail_host:
    free(sums);
    return rc;
}

int ga_checksum_verify(struct ga_device *dev, uint64_t data, size_t len, uint32_t block_size,
                       const uint64_t *expected, int64_t *first_bad_p, uint64_t *bad_count_p)
{
    size_t n = 0;
    int rc = ga__checksum_args(dev, data, len, block_size, expected, &n);
    if (rc < 0)
        return rc;
    if (!first_bad_p || !bad_count_p) {
        ga__err("checksum verify: expected result pointers, found NULL");
        return -EINVAL;
    }
    if (n == 0) {
        *first_bad_p = -1;
        *bad_count_p = 0;
        return 0;
    }
    if ((rc = ga_device_make_current(dev)) < 0)
        return rc;
    CUdeviceptr d_expected = 0, d_result = 0;
    unsigned long long result[KN_VERIFY_RESULT_WORDS] = {0};
    const size_t result_bytes = sizeof(result);
    GA_CU_GOTO(cuMemAlloc(&d_expected, n * sizeof(*expected)), rc, fail);
    GA_CU_GOTO(cuMemAlloc(&d_result, result_bytes), rc, fail_expected);
    GA_CU_GOTO(cuMemcpyHtoDAsync(d_expected, expected, n * sizeof(*expected), dev->stream), rc,
               fail_sync);
    /* FIRST_BAD starts as "none" (all ones), the other words as 0. */
    _Static_assert(KN_VERIFY_FIRST_BAD == 0, "FIRST_BAD is the result's first word");
    GA_CU_GOTO(cuMemsetD32Async(d_result, 0xffffffffu, 2, dev->stream), rc, fail_sync);
    GA_CU_GOTO(cuMemsetD32Async(d_result + 8, 0, (result_bytes - 8) / 4, dev->stream), rc,
               fail_sync);
    CUdeviceptr d_data = (CUdeviceptr)data;
    unsigned long long len_arg = len;
    unsigned int bs_arg = block_size;
    void *params[] = {&d_data, &len_arg, &bs_arg, &d_expected, &d_result};
    if ((rc = ga__launch(dev, dev->k_block_verify, n, params)) < 0)
        goto fail_sync;
    GA_CU_GOTO(cuMemcpyDtoHAsync(result, d_result, result_bytes, dev->stream), rc, fail_sync);
    GA_CU_GOTO(cuStreamSynchronize(dev->stream), rc, fail_result);
    GA_CU_GOTO(cuMemFree(d_result), rc, fail_expected);
    d_result = 0;
    GA_CU_GOTO(cuMemFree(d_expected), rc, fail);

    unsigned long long first = result[KN_VERIFY_FIRST_BAD], count = result[KN_VERIFY_BAD_COUNT];
    if ((first == KN_VERIFY_NONE) != (count == 0) || count > n ||
        (first != KN_VERIFY_NONE && first >= n)) {
        ga__err("checksum verify: inconsistent result from the GPU: first bad block %llu, %llu "
                "bad of %zu",
                first, count, n);
        return -EIO;
    }
    *first_bad_p = first == KN_VERIFY_NONE ? -1 : (int64_t)first;
    *bad_count_p = count;
    return 0;

fail_sync:
    GA_CU(cuStreamSynchronize(dev->stream));
fail_result:
    GA_CU(cuMemFree(d_result));
fail_expected:
    GA_CU(cuMemFree(d_expected));
fail:
    return rc;
}
