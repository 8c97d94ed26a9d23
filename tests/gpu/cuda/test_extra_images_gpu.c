/* An extra cubin built outside kernels/ (tests/gpu/extra_kernel.cu), loaded
 * from a directory with ga_extra_images_load, opened with the embedded images
 * and launched on a real GPU. Run through gpu_gate; main exits 77 without a
 * device. No fork: a CUDA process must not fork after cuInit. */
#include <check.h>
#include <cuda.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "check_main.h"
#include "gpu_test_util.h"
#include "device_internal.h"
#include "gpu/extra_images.h"
#include "gpu/ga.h"
#include "kernels/checksum.h"
#include "kernels/images.h"

#define CU_OK(call)                                                                                \
    do {                                                                                           \
        CUresult cu_ok_rc = (call);                                                                \
        ck_assert_msg(cu_ok_rc == CUDA_SUCCESS, "%s -> CUresult %d", #call, (int)cu_ok_rc);        \
    } while (0)

static char captured[8192];

static void capture_fn(void *ctx, int level, const char *subsys, const char *line)
{
    (void)subsys;
    (void)ctx;
    size_t used = strlen(captured);
    snprintf(captured + used, sizeof(captured) - used, "[%d] %s\n", level, line);
}

static struct base_log_sink capture_sink = {.fn = capture_fn, .max_level = BASE_LOG_DEBUG};

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

START_TEST(extra_kernel_loads_and_runs_with_the_embedded_ones)
{
    char err[1024];
    struct kn_image *extra = NULL, *table = NULL;
    size_t extra_count = 0, count = 0;
    int rc = ga_extra_images_load(EXTRA_CUBIN_DIR, kn_images[0].arch, &extra, &extra_count, err,
                                  sizeof(err));
    ck_assert_msg(rc == 1, "rc %d: %s", rc, err);
    ck_assert_int_eq(ga_extra_images_combine(kn_images, kn_image_count, extra, extra_count, &table,
                                             &count, err, sizeof(err)),
                     0);
    captured[0] = '\0';
    base_log_default_set(&capture_sink);
    struct ga_device *dev = NULL;
    struct ga_device_opts opts = {.ordinal = 0, .images = table, .image_count = count};
    rc = ga_device_open(&opts, &dev);
    ck_assert_msg(rc == 0, "ga_device_open: %d\n%s", rc, captured);
    ck_assert_msg(strstr(captured, "image 'extra_kernel': kernel k_extra_fill loaded"),
                  "no load line for the extra kernel:\n%s", captured);
    ck_assert_int_eq(ga_device_make_current(dev), 0);

    CUfunction fn = NULL, other = NULL;
    ck_assert_int_eq(ga_device_kernel(dev, "extra_kernel", "k_extra_fill", &fn), 0);
    /* The embedded kernels are still there, and the extra one only in its image. */
    ck_assert_int_eq(ga_device_kernel(dev, KN_CHECKSUM_IMAGE, KN_K_BLOCK_CHECKSUM, &other), 0);
    ck_assert_int_eq(ga_device_kernel(dev, KN_CHECKSUM_IMAGE, "k_extra_fill", &other), -ENOENT);

    uint64_t s = 0x65787472ULL;
    unsigned n = 100000u + (unsigned)(rng_next(&s) % 50000u);
    const unsigned guard = 256;
    unsigned *host = malloc((n + guard) * sizeof(*host));
    unsigned *back = malloc((n + guard) * sizeof(*back));
    ck_assert(host && back);
    for (unsigned i = 0; i < n + guard; i++)
        host[i] = (unsigned)rng_next(&s);
    CUdeviceptr d = 0;
    CU_OK(cuMemAlloc(&d, (n + guard) * sizeof(*host)));
    CU_OK(cuMemcpyHtoD(d, host, (n + guard) * sizeof(*host)));
    void *args[] = {&d, &n};
    CU_OK(cuLaunchKernel(fn, (n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CU_OK(cuCtxSynchronize());
    CU_OK(cuMemcpyDtoH(back, d, (n + guard) * sizeof(*back)));
    for (unsigned i = 0; i < n; i++)
        ck_assert_msg(back[i] == ((i * 2654435761u) ^ 0x9e3779b9u), "out[%u] = %#x of %u", i,
                      back[i], n);
    for (unsigned i = n; i < n + guard; i++)
        ck_assert_msg(back[i] == host[i], "guard word %u overwritten", i - n);
    CU_OK(cuMemFree(d));
    free(back);
    free(host);
    ga_device_close(dev);
    base_log_default_set(NULL);
    free(table);
    ga_extra_images_free(extra, extra_count);
}
END_TEST

static Suite *ga_extra_images_gpu_suite(void)
{
    Suite *s = suite_create("ga_extra_images_gpu");
    TCase *tc = tcase_create("device");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, extra_kernel_loads_and_runs_with_the_embedded_ones);
    suite_add_tcase(s, tc);
    return s;
}

LEASE_CHECK_MAIN(ga_extra_images_gpu_suite, tu_cuda_probe)
