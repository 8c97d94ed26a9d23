/* Layer 4 of the CUDA boundary: stagingd's run-time self check, and the
 * forbidden-name matcher it shares with linkcheck. */
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "linkcheck/forbidden.h"
#include "stagingd/selfcheck.h"

static const char *fake_cuda_path;

START_TEST(clean_process_passes_and_counts_objects)
{
    char report[256];
    ck_assert_int_eq(sd_selfcheck_no_cuda(report, sizeof(report)), 0);
    ck_assert_msg(strstr(report, "no CUDA library among") != NULL, "report: %s", report);
}
END_TEST

START_TEST(loaded_fake_driver_is_caught_and_named)
{
    void *lib = dlopen(fake_cuda_path, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(lib != NULL, "dlopen %s: %s", fake_cuda_path, dlerror());
    char report[512];
    ck_assert_int_eq(sd_selfcheck_no_cuda(report, sizeof(report)), -ENOTRECOVERABLE);
    ck_assert_msg(strstr(report, fake_cuda_path) != NULL, "report lacks the path: %s", report);
    ck_assert_msg(strstr(report, "'libcuda*'") != NULL, "report lacks the stem: %s", report);
    dlclose(lib);
}
END_TEST

START_TEST(tiny_report_buffer_is_terminated)
{
    void *lib = dlopen(fake_cuda_path, RTLD_NOW | RTLD_LOCAL);
    ck_assert_ptr_nonnull(lib);
    char report[8];
    memset(report, 'x', sizeof(report));
    ck_assert_int_eq(sd_selfcheck_no_cuda(report, sizeof(report)), -ENOTRECOVERABLE);
    ck_assert_uint_eq(strlen(report), sizeof(report) - 1);
    ck_assert_int_eq(sd_selfcheck_no_cuda(NULL, 0), -ENOTRECOVERABLE);
    dlclose(lib);
}
END_TEST

START_TEST(matcher_flags_driver_runtime_and_nvidia_libraries)
{
    ck_assert_str_eq(lc_forbidden_stem_of("libcuda.so.1"), "libcuda");
    ck_assert_str_eq(lc_forbidden_stem_of("/usr/lib/x86_64-linux-gnu/libcuda.so"), "libcuda");
    ck_assert_str_eq(lc_forbidden_stem_of("libcudart.so.13"), "libcuda");
    ck_assert_str_eq(lc_forbidden_stem_of("libnvrtc-builtins.so.13.0"), "libnvrtc");
    ck_assert_str_eq(lc_forbidden_stem_of("libnvidia-ml.so.580.159.04"), "libnvidia-");
    ck_assert_str_eq(lc_forbidden_stem_of("libnvJitLink.so.13"), "libnvJitLink");
    /* Issue #11: the whole toolkit family, not the driver's four stems. */
    ck_assert_str_eq(lc_forbidden_stem_of("libcudnn.so.9"), "libcudnn");
    ck_assert_str_eq(lc_forbidden_stem_of("libcublasLt.so.13"), "libcublas");
    ck_assert_str_eq(lc_forbidden_stem_of("libOpenCL.so.1"), "libOpenCL");
}
END_TEST

START_TEST(matcher_spares_lookalikes_and_bare_stems)
{
    ck_assert_ptr_null(lc_forbidden_stem_of("liburing.so.2"));
    ck_assert_ptr_null(lc_forbidden_stem_of("libcuda"));
    ck_assert_ptr_null(lc_forbidden_stem_of("libnvidia-"));
    ck_assert_ptr_null(lc_forbidden_stem_of("/opt/libcuda.so.1/liburing.so"));
    ck_assert_ptr_null(lc_forbidden_stem_of("mylibcuda.so"));
    ck_assert_ptr_null(lc_forbidden_stem_of(""));
}
END_TEST

static Suite *selfcheck_suite(void)
{
    Suite *s = suite_create("boundary_selfcheck");
    TCase *tc = tcase_create("selfcheck");
    tcase_add_test(tc, clean_process_passes_and_counts_objects);
    tcase_add_test(tc, loaded_fake_driver_is_caught_and_named);
    tcase_add_test(tc, tiny_report_buffer_is_terminated);
    tcase_add_test(tc, matcher_flags_driver_runtime_and_nvidia_libraries);
    tcase_add_test(tc, matcher_spares_lookalikes_and_bare_stems);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s <path to fake libcuda.so.1>\n", argv[0]);
        return 2;
    }
    fake_cuda_path = argv[1];
    SRunner *sr = srunner_create(selfcheck_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
