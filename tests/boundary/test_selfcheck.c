/* Layer 4 of the CUDA boundary: stagingd's run-time self check, and the
 * forbidden-name matcher it shares with linkcheck. Each way in that issue
 * #11 lists -- a renamed or symlinked copy, dlmopen() (an LD_AUDIT module
 * lands in such a namespace too), a shim under an innocent name, LD_PRELOAD
 * and LD_AUDIT naming the family -- got past the old name match. Check runs
 * each test in its own process, so what one loads the next never sees. */
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "linkcheck/forbidden.h"
#include "stagingd/selfcheck.h"

static const char *fake_cuda_path;
static const char *fake_shim_path;
static char scratch[PATH_MAX];

/* A copy of the fake driver at @name in a fresh scratch folder. */
static const char *copy_of_fake(const char *name)
{
    snprintf(scratch, sizeof(scratch), "/tmp/selfcheck-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(scratch));
    static char path[PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/%s", scratch, name);
    FILE *in = fopen(fake_cuda_path, "rb"), *out = fopen(path, "wb");
    ck_assert_ptr_nonnull(in);
    ck_assert_ptr_nonnull(out);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
        ck_assert_uint_eq(fwrite(buf, 1, n, out), n);
    fclose(in);
    ck_assert_int_eq(fclose(out), 0);
    return path;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void teardown(void)
{
    if (scratch[0])
        nftw(scratch, remove_one, 8, FTW_DEPTH | FTW_PHYS);
    scratch[0] = '\0';
}

static void expect_refused(const char *needle)
{
    char report[1024];
    ck_assert_int_eq(sd_selfcheck_no_cuda(report, sizeof(report)), -ENOTRECOVERABLE);
    ck_assert_msg(strstr(report, needle) != NULL, "report lacks '%s': %s", needle, report);
}

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

START_TEST(renamed_copy_is_caught_by_its_soname)
{
    const char *path = copy_of_fake("libstorage_codec.so");
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(lib != NULL, "dlopen %s: %s", path, dlerror());
    expect_refused("its SONAME libcuda.so.1 matches forbidden 'libcuda*'");
    expect_refused(path);
    dlclose(lib);
}
END_TEST

START_TEST(symlinked_copy_is_caught)
{
    copy_of_fake("unused.so");
    char link[PATH_MAX + 16];
    snprintf(link, sizeof(link), "%s/libplain.so", scratch);
    char target[PATH_MAX];
    ck_assert_ptr_nonnull(realpath(fake_cuda_path, target));
    ck_assert_int_eq(symlink(target, link), 0);
    void *lib = dlopen(link, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(lib != NULL, "dlopen %s: %s", link, dlerror());
    expect_refused("libcuda");
    dlclose(lib);
}
END_TEST

START_TEST(dlmopen_namespace_is_seen_through_proc_maps)
{
#ifdef __SANITIZE_ADDRESS__
    /* A second namespace would start a second ASan runtime, which aborts;
     * the main build proves this case. */
    return;
#endif
    const char *path = copy_of_fake("libquiet.so");
    void *lib = dlmopen(LM_ID_NEWLM, path, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(lib != NULL, "dlmopen %s: %s", path, dlerror());
    expect_refused("found in /proc/self/maps, not among the objects ld.so lists");
    expect_refused(path);
}
END_TEST

START_TEST(shim_defining_driver_entry_points_is_caught)
{
    void *lib = dlopen(fake_shim_path, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(lib != NULL, "dlopen %s: %s", fake_shim_path, dlerror());
    expect_refused("the CUDA symbol cu");
    expect_refused(fake_shim_path);
    dlclose(lib);
}
END_TEST

START_TEST(library_deleted_after_loading_cannot_hide)
{
    /* The shim under an innocent name, loaded, then its file removed: the
     * file's symbols can no longer be read, so the mapping itself is refused. */
    copy_of_fake("unused.so");
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/libgone.so", scratch);
    FILE *in = fopen(fake_shim_path, "rb"), *out = fopen(path, "wb");
    ck_assert_ptr_nonnull(in);
    ck_assert_ptr_nonnull(out);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
        ck_assert_uint_eq(fwrite(buf, 1, n, out), n);
    fclose(in);
    ck_assert_int_eq(fclose(out), 0);
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(lib != NULL, "dlopen %s: %s", path, dlerror());
    ck_assert_int_eq(unlink(path), 0);
    expect_refused("mapped into stagingd from a deleted file");
    dlclose(lib);
}
END_TEST

START_TEST(ld_preload_naming_the_family_is_refused_loaded_or_not)
{
    ck_assert_int_eq(setenv("LD_PRELOAD", "/nonexistent/libcublas.so.13", 1), 0);
    expect_refused("LD_PRELOAD names a CUDA library: /nonexistent/libcublas.so.13");
    unsetenv("LD_PRELOAD");
}
END_TEST

START_TEST(ld_audit_naming_a_renamed_copy_is_refused)
{
    const char *path = copy_of_fake("libaudit_helper.so");
    ck_assert_int_eq(setenv("LD_AUDIT", path, 1), 0);
    expect_refused("LD_AUDIT names a CUDA library");
    expect_refused("its SONAME libcuda.so.1");
    unsetenv("LD_AUDIT");
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
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, clean_process_passes_and_counts_objects);
    tcase_add_test(tc, loaded_fake_driver_is_caught_and_named);
    tcase_add_test(tc, tiny_report_buffer_is_terminated);
    tcase_add_test(tc, renamed_copy_is_caught_by_its_soname);
    tcase_add_test(tc, symlinked_copy_is_caught);
    tcase_add_test(tc, dlmopen_namespace_is_seen_through_proc_maps);
    tcase_add_test(tc, shim_defining_driver_entry_points_is_caught);
    tcase_add_test(tc, library_deleted_after_loading_cannot_hide);
    tcase_add_test(tc, ld_preload_naming_the_family_is_refused_loaded_or_not);
    tcase_add_test(tc, ld_audit_naming_a_renamed_copy_is_refused);
    tcase_add_test(tc, matcher_flags_driver_runtime_and_nvidia_libraries);
    tcase_add_test(tc, matcher_spares_lookalikes_and_bare_stems);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s <fake libcuda.so.1> <fake shim library>\n", argv[0]);
        return 2;
    }
    fake_cuda_path = argv[1];
    fake_shim_path = argv[2];
    SRunner *sr = srunner_create(selfcheck_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
