/* Layer 3 of the CUDA boundary against issue #11's link-time classes: each
 * fixture (elf/fixtures.cmake) got through linkcheck's default run before,
 * and the real linkcheck must now refuse it, naming the culprit and how it
 * was reached. */
#include <check.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lc_test_util.h"

static char fix[PATH_MAX];
static char *pool[64];
static size_t pool_n;

__attribute__((format(printf, 1, 2))) static const char *S(const char *fmt, ...)
{
    char *s = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    ck_assert_int_ge(n, 0);
    ck_assert_uint_lt(pool_n, sizeof(pool) / sizeof(pool[0]));
    pool[pool_n++] = s;
    return s;
}

static const char *fx(const char *rel)
{
    return S("%s/%s", fix, rel);
}

static struct lc_test_run run_v(const char *const *args)
{
    struct lc_test_run run;
    ck_assert_int_eq(lc_test_run(args, &run), 0);
    ck_assert_msg(!lc_test_run_sanitizer_fired(&run), "sanitizer fired:\n%s", run.out);
    return run;
}

#define RUN(...) run_v((const char *const[]){__VA_ARGS__, NULL})

/* linkcheck @args must exit @status with every needle in its output. */
#define EXPECT(want_, needles_, ...)                                                              \
    do {                                                                                          \
        struct lc_test_run run_ = RUN(__VA_ARGS__);                                               \
        ck_assert_msg(run_.status == (want_), "exit %d, expected %d:\n%s", run_.status, (want_), \
                      run_.out);                                                                  \
        for (const char *const *n_ = (needles_); *n_; n_++)                                       \
            ck_assert_msg(strstr(run_.out, *n_) != NULL, "output lacks\n  %s\noutput:\n%s", *n_,  \
                          run_.out);                                                              \
        lc_test_run_free(&run_);                                                                  \
    } while (0)

#define HAS(...) ((const char *const[]){__VA_ARGS__, NULL})

static void setup(void)
{
    ck_assert_msg(realpath(BD_ELF, fix) != NULL, "fixtures missing: %s", BD_ELF);
}

static void teardown(void)
{
    while (pool_n > 0)
        free(pool[--pool_n]);
}

/* ---- the family, by name, SONAME and inside dependencies ---------------- */

START_TEST(toolkit_library_outside_the_old_four_stems_is_refused)
{
    const char *p = fx("bin/family");
    EXPECT(1,
           HAS(S("needs forbidden library libcublas.so.13 (stem 'libcublas'), reached via family "
                 "-> libcublas.so.13 (%s/bin/../fam/libcublas.so.13)",
                 fix)),
           p);
}
END_TEST

START_TEST(renamed_file_is_refused_by_its_soname)
{
    const char *p = fx("bin/renamed");
    EXPECT(1,
           HAS(S("needs library libfoo.so, which is a forbidden library by its SONAME "
                 "libcufft.so.12 (stem 'libcufft'), reached via renamed -> libfoo.so "
                 "(%s/bin/../renamed/libfoo.so)",
                 fix)),
           p);
}
END_TEST

START_TEST(dependency_named_without_so_is_refused)
{
    const char *p = fx("bin/noso");
    EXPECT(1, HAS("needs forbidden library libcuda (stem 'libcuda'), reached via noso -> libcuda ("),
           p);
}
END_TEST

START_TEST(dependency_that_dlopens_the_driver_is_refused_by_default)
{
    const char *p = fx("bin/helper_dep");
    EXPECT(1,
           HAS(S("library libhelper.so (%s/bin/../helper/libhelper.so) names forbidden library in "
                 "string \"libcuda.so.1\" (stem 'libcuda') in section .rodata",
                 fix),
               S("reached via helper_dep -> libhelper.so (%s/bin/../helper/libhelper.so)", fix)),
           p);
}
END_TEST

START_TEST(dependency_that_defines_a_driver_entry_point_is_refused_by_default)
{
    const char *p = fx("bin/shim_dep");
    EXPECT(1,
           HAS(S("library libshim.so (%s/bin/../shim/libshim.so) defines forbidden symbol cuInit "
                 "(pattern 'cu[A-Z]*') in .dynsym, reached via shim_dep -> libshim.so",
                 fix)),
           p);
}
END_TEST

/* ---- the loader's search on every CPU ------------------------------------ */

START_TEST(glibc_hwcaps_folder_that_only_some_cpus_search_is_checked)
{
    const char *p = fx("bin/hwcaps");
    EXPECT(1,
           HAS(S("needs forbidden library libcuda.so.1 (stem 'libcuda'), reached via hwcaps -> "
                 "libprec.so (%s/bin/../hw/glibc-hwcaps/x86-64-v3/libprec.so) -> libcuda.so.1",
                 fix)),
           p);
}
END_TEST

START_TEST(legacy_tls_folder_is_checked)
{
    const char *p = fx("bin/tls");
    EXPECT(1, HAS(S("reached via tls -> libprec.so (%s/bin/../tlsd/tls/libprec.so) -> libcuda.so.1",
                    fix)),
           p);
}
END_TEST

START_TEST(legacy_x86_64_folder_is_checked)
{
    const char *p = fx("bin/legacy");
    EXPECT(1,
           HAS(S("reached via legacy -> libprec.so (%s/bin/../x86d/x86_64/libprec.so) -> "
                 "libcuda.so.1",
                 fix)),
           p);
}
END_TEST

START_TEST(every_platform_is_expanded)
{
    const char *p = fx("bin/platform");
    EXPECT(1,
           HAS(S("reached via platform -> libprec.so (%s/bin/../plat/haswell/libprec.so) -> "
                 "libcuda.so.1",
                 fix)),
           p);
}
END_TEST

/* ---- names where the old scan did not look -------------------------------- */

START_TEST(name_in_dynstr_is_refused)
{
    const char *p = fx("lib/libdynstr.so");
    EXPECT(1,
           HAS("libcuda.so.1\" (stem 'libcuda') in section .dynstr at file offset 0x"),
           p);
}
END_TEST

START_TEST(audit_and_depaudit_entries_are_followed)
{
    EXPECT(1, HAS("needs forbidden library libcuda.so.1 (stem 'libcuda'), reached via audit -> "
                  "libcuda.so.1 ("),
           fx("bin/audit"));
    EXPECT(1, HAS("needs forbidden library libnvidia-ml.so.1 (stem 'libnvidia-'), reached via "
                  "libdepaudit.so -> libnvidia-ml.so.1 ("),
           fx("lib/libdepaudit.so"));
}
END_TEST

START_TEST(name_in_a_note_is_refused)
{
    EXPECT(1,
           HAS("names forbidden library in string \"libcuda.so.1\" (stem 'libcuda') in section "
               ".note.lease.bypass"),
           fx("bin/note"));
}
END_TEST

START_TEST(name_in_code_is_refused)
{
    EXPECT(1,
           HAS("libcuda.so.1\" (stem 'libcuda') in section .text at file offset 0x"),
           fx("bin/text"));
}
END_TEST

START_TEST(wide_names_are_refused_in_each_encoding)
{
    EXPECT(1,
           HAS("names forbidden library in UTF-16LE string \"libcuda.so.1\" (stem 'libcuda') in "
               "section .rodata"),
           fx("bin/utf16"));
    EXPECT(1, HAS("names forbidden library in UTF-32LE string \"libcuda.so.1\" (stem 'libcuda')"),
           fx("bin/utf32"));
    EXPECT(1, HAS("names forbidden library in UTF-16BE string \"libcuda.so.1\" (stem 'libcuda')"),
           fx("bin/utf16be"));
}
END_TEST

/* ---- the loader as a way in ---------------------------------------------- */

START_TEST(dlsym_of_a_driver_entry_point_is_refused)
{
    EXPECT(1,
           HAS("names CUDA entry point in string \"cuInit\" (pattern 'cu[A-Z]*', what dlsym() "
               "would be asked for) in section .rodata"),
           fx("bin/dlsym"));
}
END_TEST

START_TEST(dlopen_and_dlmopen_are_not_among_stagingds_allowed_imports)
{
    const char *list = S("--allowed-imports=%s", BD_IMPORTS);
    const char *p = fx("bin/dlopen_built");
    /* Nothing names CUDA, so only the allow-list can refuse it. */
    EXPECT(0, HAS("linkcheck: OK"), p);
    EXPECT(1, HAS(S("imports dlopen, which is not in its allowed imports (%s)", BD_IMPORTS)), list,
           p);
    EXPECT(1, HAS(S("imports dlmopen, which is not in its allowed imports (%s)", BD_IMPORTS)), list,
           fx("bin/dlmopen_built"));
}
END_TEST

START_TEST(statically_linked_dlopen_is_refused_by_the_allow_list)
{
    if (!BD_HAVE_STATIC)
        return; /* no static libc here, or a sanitizer build */
    const char *list = S("--allowed-imports=%s", BD_IMPORTS);
    EXPECT(1,
           HAS(S("links in the loader's dlopen (defined in .symtab, statically), which is not in "
                 "its allowed imports (%s)",
                 BD_IMPORTS)),
           list, fx("bin/static_dlopen"));
}
END_TEST

START_TEST(strict_refuses_a_dependency_it_cannot_find)
{
    char *tmp = lc_test_mkdtemp();
    ck_assert_ptr_nonnull(tmp);
    unsigned char *data;
    size_t size;
    ck_assert_int_eq(lc_test_read_file(fx("bin/helper_dep"), &data, &size), 0);
    char *copy = lc_test_join(tmp, "helper_dep");
    ck_assert_int_eq(lc_test_write_file(copy, data, size, 0755), 0);
    free(data);
    EXPECT(0, HAS("needs libhelper.so, which was not found"), copy);
    EXPECT(1, HAS("needs libhelper.so, which was not found", "at run time it could be anything"),
           "--strict", copy);
    lc_test_rm_rf(tmp);
    free(copy);
    free(tmp);
}
END_TEST

static Suite *boundary_linkcheck_suite(void)
{
    Suite *s = suite_create("boundary_linkcheck");
    TCase *family = tcase_create("family");
    tcase_add_checked_fixture(family, setup, teardown);
    tcase_add_test(family, toolkit_library_outside_the_old_four_stems_is_refused);
    tcase_add_test(family, renamed_file_is_refused_by_its_soname);
    tcase_add_test(family, dependency_named_without_so_is_refused);
    tcase_add_test(family, dependency_that_dlopens_the_driver_is_refused_by_default);
    tcase_add_test(family, dependency_that_defines_a_driver_entry_point_is_refused_by_default);
    suite_add_tcase(s, family);

    TCase *search = tcase_create("search");
    tcase_add_checked_fixture(search, setup, teardown);
    tcase_add_test(search, glibc_hwcaps_folder_that_only_some_cpus_search_is_checked);
    tcase_add_test(search, legacy_tls_folder_is_checked);
    tcase_add_test(search, legacy_x86_64_folder_is_checked);
    tcase_add_test(search, every_platform_is_expanded);
    suite_add_tcase(s, search);

    TCase *names = tcase_create("names");
    tcase_add_checked_fixture(names, setup, teardown);
    tcase_add_test(names, name_in_dynstr_is_refused);
    tcase_add_test(names, audit_and_depaudit_entries_are_followed);
    tcase_add_test(names, name_in_a_note_is_refused);
    tcase_add_test(names, name_in_code_is_refused);
    tcase_add_test(names, wide_names_are_refused_in_each_encoding);
    suite_add_tcase(s, names);

    TCase *loader = tcase_create("loader");
    tcase_add_checked_fixture(loader, setup, teardown);
    tcase_add_test(loader, dlsym_of_a_driver_entry_point_is_refused);
    tcase_add_test(loader, dlopen_and_dlmopen_are_not_among_stagingds_allowed_imports);
    tcase_add_test(loader, statically_linked_dlopen_is_refused_by_the_allow_list);
    tcase_add_test(loader, strict_refuses_a_dependency_it_cannot_find);
    suite_add_tcase(s, loader);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(boundary_linkcheck_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
