/* A deliberately faulting launch: it returns success, and the device
 * synchronize afterwards reports the deferred error (-EIO, the CUresult named
 * in the log); the stream layer then tears down without hanging. A fault
 * leaves the context unusable, so this binary does nothing else. */
#include <check.h>
#include <cuda.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "check_main.h"
#include "gpu/cu.h"
#include "gpu/exec_cuda.h"
#include "gpu_test_util.h"
#include "kernels/checksum.h"

static struct ga_device *dev;

START_TEST(device_synchronize_reports_a_faulting_launch)
{
    CUfunction k = NULL;
    ck_assert_int_eq(ga_device_kernel(dev, KN_CHECKSUM_IMAGE, KN_K_BLOCK_CHECKSUM, &k), 0);
    struct ga_streams *s = NULL;
    ck_assert_int_eq(ga_streams_create(dev, &s), 0);
    CUstream a = NULL;
    ck_assert_int_eq(ga_stream_new(s, &a), 0);
    ck_assert_int_eq(ga_device_synchronize(dev), 0); /* healthy so far */
    CUdeviceptr sums = 0;
    CU_OK(cuMemAlloc(&sums, 4096));
    /* An address nothing is mapped at: the kernel faults on its first load. */
    CUdeviceptr bad = (CUdeviceptr)0x7a5a00000000ull;
    unsigned long long len = 1 << 20;
    unsigned int block = 65536;
    void *params[] = {&bad, &len, &block, &sums};
    CUresult launch = cuLaunchKernel(k, 16, 1, 1, KN_CHECKSUM_THREADS, 1, 1, 0, a, params, NULL);
    ck_assert_int_eq(launch, CUDA_SUCCESS); /* the error is deferred */
    tu_capture_clear();
    int rc = ga_device_synchronize(dev);
    printf("device synchronize after the faulting launch: %d\n%s", rc, tu_captured);
    ck_assert_int_eq(rc, -EIO);
    ck_assert_msg(tu_logged("cuCtxSynchronize() failed: CUDA_ERROR_"), "%s", tu_captured);
    ck_assert_msg(tu_logged("unusable"), "%s", tu_captured);
    /* The stream reports the fault too, and the layer still tears down. */
    ck_assert_int_lt(ga_stream_query(s, a), 0);
    ga_stream_free(s, a);
    ga_streams_destroy(s);
}
END_TEST

static int open_device(char *why, size_t len)
{
    base_log_default_set(&tu_capture_sink);
    struct ga_device_opts opts = {.ordinal = 0};
    int rc = ga_device_open(&opts, &dev);
    if (rc == -ENODEV) {
        snprintf(why, len, "no usable CUDA device\n%s", tu_captured);
        return LEASE_CHECK_SKIP;
    }
    if (rc < 0) {
        snprintf(why, len, "ga_device_open failed: %d\n%s", rc, tu_captured);
        return -1;
    }
    return 0;
}

static void close_device(int failed)
{
    (void)failed;
    ga_device_close(dev); /* on a faulted context its calls fail and log; it still frees */
}

static Suite *ga_fault_suite(void)
{
    Suite *s = suite_create("ga_fault_gpu");
    TCase *tc = tcase_create("fault");
    tcase_add_test(tc, device_synchronize_reports_a_faulting_launch);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}

LEASE_CHECK_MAIN_DONE(ga_fault_suite, open_device, close_device)
