/* linkcheck's command line on fixtures built by CMake: each rule fires on a
 * deliberately bad program with the library or symbol and the chain named,
 * the search follows ld.so's order, and the real stagingd passes. */
#include <check.h>
#include <elf.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lc_test_util.h"

/* The fixtures folder with symlinks resolved, as $ORIGIN expands. */
static char fix[PATH_MAX];

/* Strings made by S() live until the test's teardown. */
static char *pool[256];
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

/* A fixture's path. */
static const char *fx(const char *rel)
{
    return S("%s/%s", fix, rel);
}

static struct lc_test_run run_v(const char *const *args)
{
    struct lc_test_run run;
    int rc = lc_test_run(args, &run);
    ck_assert_msg(rc == 0, "could not run %s: %s", LC_TEST_LINKCHECK, strerror(-rc));
    ck_assert_msg(!lc_test_run_sanitizer_fired(&run), "sanitizer fired:\n%s", run.out);
    return run;
}

#define RUN(...) run_v((const char *const[]){__VA_ARGS__, NULL})

static void expect_status(const struct lc_test_run *run, int status)
{
    ck_assert_msg(run->status == status, "exit status %d, expected %d; output:\n%s", run->status,
                  status, run->out);
}

static void expect_has(const struct lc_test_run *run, const char *needle)
{
    ck_assert_msg(strstr(run->out, needle) != NULL, "output lacks\n  %s\noutput:\n%s", needle,
                  run->out);
}

static void expect_lacks(const struct lc_test_run *run, const char *needle)
{
    ck_assert_msg(strstr(run->out, needle) == NULL, "output has\n  %s\noutput:\n%s", needle,
                  run->out);
}

/* The report line's "at file offset 0x..." must point at @text in @path. */
static void expect_offset_holds(const struct lc_test_run *run, const char *path, const char *text)
{
    const char *at = strstr(run->out, "at file offset 0x");
    ck_assert_msg(at != NULL, "no file offset in:\n%s", run->out);
    unsigned long long off = strtoull(at + strlen("at file offset 0x"), NULL, 16);
    unsigned char *data;
    size_t size;
    ck_assert_int_eq(lc_test_read_file(path, &data, &size), 0);
    ck_assert_msg(off + strlen(text) <= size, "offset 0x%llx past the end of %s", off, path);
    ck_assert_msg(memcmp(data + off, text, strlen(text)) == 0, "offset 0x%llx of %s is not '%s'",
                  off, path, text);
    free(data);
}

static void setup(void)
{
    ck_assert_msg(realpath(LC_TEST_FIXTURES, fix) != NULL, "fixtures missing: %s",
                  LC_TEST_FIXTURES);
}

static void teardown(void)
{
    while (pool_n > 0)
        free(pool[--pool_n]);
}

START_TEST(clean_program_passes)
{
    const char *p, *line;
    p = fx("bin/clean");
    struct lc_test_run run = RUN(p);
    expect_status(&run, 0);
    line = S("linkcheck: OK %s: no forbidden library among", p);
    expect_has(&run, line);
    expect_lacks(&run, "FAIL");
    lc_test_run_free(&run);
}
END_TEST

START_TEST(direct_libcuda_needed_fails_naming_library_and_path)
{
    const char *p, *want;
    p = fx("bin/direct");
    struct lc_test_run run = RUN(p);
    expect_status(&run, 1);
    want = S("linkcheck: FAIL %s: needs forbidden library libcuda.so.1 (stem 'libcuda'), "
             "reached via direct -> libcuda.so.1 (%s/bin/../lib/libcuda.so.1)\n",
             p, fix);
    expect_has(&run, want);
    expect_has(&run, "1 finding: 1 forbidden library, 0 forbidden symbols, 0 strings");
    lc_test_run_free(&run);
}
END_TEST

START_TEST(libcuda_through_runpath_origin_library_fails_with_chain)
{
    const char *p, *want;
    p = fx("bin/indirect");
    struct lc_test_run run = RUN(p);
    expect_status(&run, 1);
    want = S("linkcheck: FAIL %s: needs forbidden library libcuda.so.1 (stem 'libcuda'), "
             "reached via indirect -> libmid.so (%s/bin/../lib/libmid.so) -> libcuda.so.1 "
             "(%s/bin/../lib/libcuda.so.1)\n",
             p, fix, fix);
    expect_has(&run, want);
    expect_lacks(&run, "reached via indirect -> libcuda.so.1");
    lc_test_run_free(&run);
}
END_TEST

START_TEST(dlopen_name_in_rodata_fails_with_string_section_and_offset)
{
    const char *p, *want;
    p = fx("bin/dlopen_ro");
    struct lc_test_run run = RUN(p);
    expect_status(&run, 1);
    want = S("linkcheck: FAIL %s: names forbidden library in string \"libcuda.so.1\" "
             "(stem 'libcuda') in section .rodata at file offset 0x",
             p);
    expect_has(&run, want);
    expect_offset_holds(&run, p, "libcuda.so.1");
    expect_lacks(&run, "needs forbidden library");
    lc_test_run_free(&run);
}
END_TEST

START_TEST(dlopen_path_in_writable_data_fails_with_string_section_and_offset)
{
    const char *p, *want;
    p = fx("bin/dlopen_data");
    struct lc_test_run run = RUN(p);
    expect_status(&run, 1);
    want = S("linkcheck: FAIL %s: names forbidden library in string "
             "\"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1\" (stem 'libnvidia-') in section "
             ".data at file offset 0x",
             p);
    expect_has(&run, want);
    expect_offset_holds(&run, p, "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1");
    lc_test_run_free(&run);
}
END_TEST

START_TEST(statically_linked_cuinit_fails_in_symtab)
{
    const char *p, *want;
    p = fx("bin/static_cuinit");
    struct lc_test_run run = RUN(p);
    expect_status(&run, 1);
    want = S("linkcheck: FAIL %s: defines forbidden symbol cuInit (pattern 'cu[A-Z]*') in "
             ".symtab\n",
             p);
    expect_has(&run, want);
    expect_lacks(&run, "needs forbidden library");
    lc_test_run_free(&run);
}
END_TEST

START_TEST(imported_driver_symbol_fails_and_recursive_adds_its_definition)
{
    const char *p, *want;
    p = fx("bin/import");
    /* --shallow: the file's own symbols only (recursive is the default). */
    struct lc_test_run run = RUN("--shallow", p);
    expect_status(&run, 1);
    want = S("linkcheck: FAIL %s: imports forbidden symbol cuDeviceGet (pattern 'cu[A-Z]*') in "
             ".dynsym\n",
             p);
    expect_has(&run, want);
    expect_lacks(&run, "defines forbidden symbol cuDeviceGet");
    lc_test_run_free(&run);

    run = RUN("--shallow", "--symbols-recursive", p);
    expect_status(&run, 1);
    expect_has(&run, want);
    want = S("linkcheck: FAIL %s: library libdrvshim.so (%s/bin/../lib/libdrvshim.so) defines "
             "forbidden symbol cuDeviceGet (pattern 'cu[A-Z]*') in .dynsym, reached via import "
             "-> libdrvshim.so (%s/bin/../lib/libdrvshim.so)\n",
             p, fix, fix);
    expect_has(&run, want);
    lc_test_run_free(&run);

    want = S("linkcheck: FAIL %s: imports forbidden symbol cuDeviceGet (pattern 'cu[A-Z]*') in "
             ".dynsym\n",
             p);
    run = RUN(p);
    expect_status(&run, 1);
    expect_has(&run, want);
    want = S("linkcheck: FAIL %s: library libdrvshim.so (%s/bin/../lib/libdrvshim.so) defines "
             "forbidden symbol cuDeviceGet (pattern 'cu[A-Z]*') in .dynsym, reached via import "
             "-> libdrvshim.so (%s/bin/../lib/libdrvshim.so)\n",
             p, fix, fix);
    expect_has(&run, want);
    lc_test_run_free(&run);
}
END_TEST

START_TEST(rpath_is_searched_before_ld_library_path)
{
    const char *p, *want, *opt, *good;
    good = fx("good");
    opt = S("--ld-library-path=%s", good);
    p = fx("bin/rpath");
    struct lc_test_run run = RUN(opt, p);
    expect_status(&run, 1);
    want = S("needs forbidden library libcuda.so.1 (stem 'libcuda'), reached via rpath -> "
             "libprec.so (%s/bin/../bad/libprec.so) -> libcuda.so.1 "
             "(%s/bin/../bad/../lib/libcuda.so.1)\n",
             fix, fix);
    expect_has(&run, want);
    lc_test_run_free(&run);
}
END_TEST

START_TEST(ld_library_path_is_searched_before_runpath)
{
    const char *p, *want, *opt, *good;
    p = fx("bin/runpath");
    good = fx("good");
    opt = S("--ld-library-path=%s", good);
    struct lc_test_run run = RUN(opt, p);
    expect_status(&run, 0);
    expect_has(&run, "linkcheck: OK");
    lc_test_run_free(&run);

    /* Without the option the RUNPATH build is the one found. */
    run = RUN(p);
    expect_status(&run, 1);
    want = S("reached via runpath -> libprec.so (%s/bin/../bad/libprec.so)", fix);
    expect_has(&run, want);
    lc_test_run_free(&run);

    /* The bare option takes the environment; the environment alone does nothing. */
    ck_assert_int_eq(setenv("LD_LIBRARY_PATH", good, 1), 0);
    run = RUN("--ld-library-path", p);
    expect_status(&run, 0);
    lc_test_run_free(&run);
    run = RUN(p);
    expect_status(&run, 1);
    lc_test_run_free(&run);
    unsetenv("LD_LIBRARY_PATH");
}
END_TEST

START_TEST(rpath_of_the_program_serves_its_libraries)
{
    const char *p, *want;
    p = fx("bin/inherit_rpath");
    struct lc_test_run run = RUN(p);
    expect_status(&run, 1);
    want = S("reached via inherit_rpath -> libwrap.so (%s/bin/../wrap/libwrap.so) -> libprec.so "
             "(%s/bin/../bad/libprec.so) -> libcuda.so.1 (%s/bin/../bad/../lib/libcuda.so.1)\n",
             fix, fix, fix);
    expect_has(&run, want);
    lc_test_run_free(&run);
}
END_TEST

START_TEST(runpath_of_the_program_does_not_serve_its_libraries)
{
    const char *p, *want;
    p = fx("bin/inherit_runpath");
    struct lc_test_run run = RUN(p);
    expect_status(&run, 0);
    want = S("linkcheck: warning %s: needs libprec.so, which was not found (", p);
    expect_has(&run, want);
    want = S("reached via inherit_runpath -> libwrap.so (%s/bin/../wrap/libwrap.so) -> "
             "libprec.so (not found)",
             fix);
    expect_has(&run, want);
    expect_has(&run, "(1 not found)");
    lc_test_run_free(&run);
}
END_TEST

/* Copies @from to @to, then sets byte @at to @value when @at >= 0. */
static void copy_patched(const char *from, const char *to, long at, unsigned char value)
{
    unsigned char *data;
    size_t size;
    ck_assert_int_eq(lc_test_read_file(from, &data, &size), 0);
    if (at >= 0)
        data[at] = value;
    ck_assert_int_eq(lc_test_write_file(to, data, size, 0755), 0);
    free(data);
}

START_TEST(candidates_of_another_class_or_machine_are_skipped)
{
    const char *p, *want, *opt, *good, *bad, *cuda;
    char *tmp = lc_test_mkdtemp();
    ck_assert_ptr_nonnull(tmp);
    char *a = lc_test_join(tmp, "a"), *b = lc_test_join(tmp, "b");
    ck_assert_int_eq(lc_test_mkdir_p(a), 0);
    ck_assert_int_eq(lc_test_mkdir_p(b), 0);
    bad = fx("bad/libprec.so");
    good = fx("good/libprec.so");
    cuda = fx("lib/libcuda.so.1");
    p = fx("bin/plainprec");
    char *a_lib = lc_test_join(a, "libprec.so"), *b_lib = lc_test_join(b, "libprec.so");
    opt = S("--ld-library-path=%s:%s", a, b);
    copy_patched(good, b_lib, -1, 0);

    /* Control: the bad build first in the path is loaded and caught. */
    copy_patched(bad, a_lib, -1, 0);
    struct lc_test_run run = RUN(opt, p);
    expect_status(&run, 1);
    want = S("reached via plainprec -> libprec.so (%s)", a_lib);
    expect_has(&run, want);
    lc_test_run_free(&run);

    /* Another machine, then another class: ld.so skips it and so do we. */
    copy_patched(bad, a_lib, offsetof(Elf64_Ehdr, e_machine), EM_AARCH64);
    run = RUN("-v", opt, p);
    expect_status(&run, 0);
    want = S("skipped %s for libprec.so: wrong ELF class or machine", a_lib);
    expect_has(&run, want);
    want = S("loads libprec.so, reached via plainprec -> libprec.so (%s)", b_lib);
    expect_has(&run, want);
    lc_test_run_free(&run);
    copy_patched(bad, a_lib, EI_CLASS, ELFCLASS32);
    run = RUN(opt, p);
    expect_status(&run, 0);
    lc_test_run_free(&run);

    /* A broken library where ld.so would load one: the check is incomplete. */
    unsigned char *lib;
    size_t lib_size;
    ck_assert_int_eq(lc_test_read_file(good, &lib, &lib_size), 0);
    ck_assert_int_eq(lc_test_write_file(a_lib, lib, lib_size / 2, 0755), 0);
    free(lib);
    run = RUN(opt, p);
    expect_status(&run, 2);
    want = S("linkcheck: error %s: library libprec.so at %s: ", p, a_lib);
    expect_has(&run, want);
    expect_has(&run, "reached via plainprec\n");
    lc_test_run_free(&run);

    /* A library found under a harmless name is still the driver by SONAME. */
    copy_patched(cuda, a_lib, -1, 0);
    run = RUN(opt, p);
    expect_status(&run, 1);
    want = S("needs library libprec.so, which is a forbidden library by its SONAME libcuda.so.1 "
             "(stem 'libcuda'), reached via plainprec -> libprec.so (%s)",
             a_lib);
    expect_has(&run, want);
    lc_test_run_free(&run);

    lc_test_rm_rf(tmp);
    free(a_lib);
    free(b_lib);
    free(a);
    free(b);
    free(tmp);
}
END_TEST

START_TEST(ld_so_conf_includes_are_followed_under_root)
{
    const char *p, *want, *opt, *bad;
    char *root = lc_test_mkdtemp();
    ck_assert_ptr_nonnull(root);
    char *etc = lc_test_join(root, "etc/ld.so.conf.d");
    char *vendor = lc_test_join(root, "opt/vendor/lib");
    char *other = lc_test_join(root, "opt/other");
    ck_assert_int_eq(lc_test_mkdir_p(etc), 0);
    ck_assert_int_eq(lc_test_mkdir_p(vendor), 0);
    ck_assert_int_eq(lc_test_mkdir_p(other), 0);
    char *conf = lc_test_join(root, "etc/ld.so.conf");
    const char *main_conf = "# the system's list\n"
                            "include ld.so.conf.d/*.conf\n"
                            "hwcap 0 nosegneg\n";
    ck_assert_int_eq(lc_test_write_file(conf, main_conf, strlen(main_conf), 0644), 0);
    char *sub = lc_test_join(etc, "10-vendor.conf");
    const char *sub_conf = "  /opt/other   # nothing useful here\n/opt/vendor/lib/\n";
    ck_assert_int_eq(lc_test_write_file(sub, sub_conf, strlen(sub_conf), 0644), 0);
    char *lib = lc_test_join(vendor, "libprec.so");
    bad = fx("bad/libprec.so");
    copy_patched(bad, lib, -1, 0);

    opt = S("--root=%s", root);
    p = fx("bin/plainprec");
    struct lc_test_run run = RUN(opt, p);
    expect_status(&run, 1);
    want = S("reached via plainprec -> libprec.so (%s/opt/vendor/lib/libprec.so) -> libcuda.so.1 "
             "(not found)",
             root);
    expect_has(&run, want);
    lc_test_run_free(&run);

    /* Without the include line nothing is found, and that is only a warning. */
    const char *bare = "hwcap 0 nosegneg\n";
    ck_assert_int_eq(lc_test_write_file(conf, bare, strlen(bare), 0644), 0);
    run = RUN(opt, p);
    expect_status(&run, 0);
    expect_has(&run, "needs libprec.so, which was not found");
    lc_test_run_free(&run);

    lc_test_rm_rf(root);
    free(lib);
    free(sub);
    free(conf);
    free(other);
    free(vendor);
    free(etc);
    free(root);
}
END_TEST

START_TEST(forbid_adds_a_stem_and_stops_the_descent)
{
    const char *p, *want;
    p = fx("bin/indirect");
    struct lc_test_run run = RUN("--forbid", "libmid", p);
    expect_status(&run, 1);
    want = S("needs forbidden library libmid.so (stem 'libmid'), reached via indirect -> "
             "libmid.so (%s/bin/../lib/libmid.so)\n",
             fix);
    expect_has(&run, want);
    expect_has(&run, "1 finding: 1 forbidden library");
    lc_test_run_free(&run);
}
END_TEST

START_TEST(no_search_checks_names_and_loads_nothing)
{
    const char *p;
    p = fx("bin/direct");
    struct lc_test_run run = RUN("--no-search", p);
    expect_status(&run, 1);
    expect_has(&run, "reached via direct -> libcuda.so.1 (not searched)");
    lc_test_run_free(&run);
    p = fx("bin/indirect");
    run = RUN("--no-search", p);
    expect_status(&run, 0);
    expect_has(&run, "no forbidden library among 0 loaded");
    lc_test_run_free(&run);
}
END_TEST

START_TEST(dependency_cycle_is_walked_once)
{
    const char *p;
    p = fx("bin/cycle");
    struct lc_test_run run = RUN("-v", p);
    expect_status(&run, 0);
    expect_has(&run, "dependency cycle, libcyca.so is already loaded: cycle -> libcyca.so (");
    expect_has(&run, "-> libcycb.so (");
    lc_test_run_free(&run);
}
END_TEST

START_TEST(real_stagingd_passes)
{
    const char *want;
    struct lc_test_run run = RUN(LC_TEST_STAGINGD);
    expect_status(&run, 0);
    want = S("linkcheck: OK %s: ", LC_TEST_STAGINGD);
    expect_has(&run, want);
    lc_test_run_free(&run);
}
END_TEST

START_TEST(usage_errors_exit_2)
{
    struct lc_test_run run = run_v((const char *const[]){NULL});
    expect_status(&run, 2);
    expect_has(&run, "expected at least one FILE, found none");
    lc_test_run_free(&run);
    run = RUN("--no-such-option", "x");
    expect_status(&run, 2);
    expect_has(&run, "usage: linkcheck");
    lc_test_run_free(&run);
    run = RUN("--forbid", "lib/cuda", "x");
    expect_status(&run, 2);
    expect_has(&run, "--forbid expects a library name stem");
    lc_test_run_free(&run);
    run = RUN("--help");
    expect_status(&run, 0);
    expect_has(&run, "--ld-library-path");
    lc_test_run_free(&run);
}
END_TEST

START_TEST(unreadable_inputs_exit_2_with_a_clear_error)
{
    const char *want, *clean, *direct;
    char *tmp = lc_test_mkdtemp();
    ck_assert_ptr_nonnull(tmp);
    char *empty = lc_test_join(tmp, "empty"), *text = lc_test_join(tmp, "script.sh");
    char *missing = lc_test_join(tmp, "missing");
    ck_assert_int_eq(lc_test_write_file(empty, "", 0, 0644), 0);
    ck_assert_int_eq(lc_test_write_file(text, "#!/bin/sh\necho hi\n", 18, 0755), 0);
    char *fifo = lc_test_join(tmp, "fifo");
    ck_assert_int_eq(mkfifo(fifo, 0644), 0);
    struct {
        const char *path;
        const char *says;
    } cases[] = {
        {missing, "cannot open: No such file or directory"},
        {tmp, "is a directory, expected an ELF file"},
        {empty, "the file is empty (expected an ELF header)"},
        {text, "not an ELF file: expected the magic 7f 45 4c 46, found 23 21 2f 62"},
        {fifo, "is not a regular file, expected an ELF file"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct lc_test_run run = RUN(cases[i].path);
        expect_status(&run, 2);
        want = S("linkcheck: error %s: %s", cases[i].path, cases[i].says);
        expect_has(&run, want);
        lc_test_run_free(&run);
    }
    /* One bad file among good ones: a finding wins, else the error. */
    clean = fx("bin/clean");
    struct lc_test_run run = RUN(clean, missing);
    expect_status(&run, 2);
    lc_test_run_free(&run);
    direct = fx("bin/direct");
    run = RUN(missing, direct, clean);
    expect_status(&run, 1);
    expect_has(&run, "linkcheck: OK");
    lc_test_run_free(&run);
    lc_test_rm_rf(tmp);
    free(empty);
    free(text);
    free(missing);
    free(fifo);
    free(tmp);
}
END_TEST

static Suite *linkcheck_cli_suite(void)
{
    Suite *s = suite_create("linkcheck_cli");
    TCase *rules = tcase_create("rules");
    tcase_add_checked_fixture(rules, setup, teardown);
    tcase_add_test(rules, clean_program_passes);
    tcase_add_test(rules, direct_libcuda_needed_fails_naming_library_and_path);
    tcase_add_test(rules, libcuda_through_runpath_origin_library_fails_with_chain);
    tcase_add_test(rules, dlopen_name_in_rodata_fails_with_string_section_and_offset);
    tcase_add_test(rules, dlopen_path_in_writable_data_fails_with_string_section_and_offset);
    tcase_add_test(rules, statically_linked_cuinit_fails_in_symtab);
    tcase_add_test(rules, imported_driver_symbol_fails_and_recursive_adds_its_definition);
    tcase_add_test(rules, real_stagingd_passes);
    suite_add_tcase(s, rules);

    TCase *search = tcase_create("search");
    tcase_add_checked_fixture(search, setup, teardown);
    tcase_add_test(search, rpath_is_searched_before_ld_library_path);
    tcase_add_test(search, ld_library_path_is_searched_before_runpath);
    tcase_add_test(search, rpath_of_the_program_serves_its_libraries);
    tcase_add_test(search, runpath_of_the_program_does_not_serve_its_libraries);
    tcase_add_test(search, candidates_of_another_class_or_machine_are_skipped);
    tcase_add_test(search, ld_so_conf_includes_are_followed_under_root);
    tcase_add_test(search, forbid_adds_a_stem_and_stops_the_descent);
    tcase_add_test(search, no_search_checks_names_and_loads_nothing);
    tcase_add_test(search, dependency_cycle_is_walked_once);
    suite_add_tcase(s, search);

    TCase *cli = tcase_create("cli");
    tcase_add_checked_fixture(cli, setup, teardown);
    tcase_add_test(cli, usage_errors_exit_2);
    tcase_add_test(cli, unreadable_inputs_exit_2_with_a_clear_error);
    suite_add_tcase(s, cli);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(linkcheck_cli_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
