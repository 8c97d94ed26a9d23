/* linkcheck's pieces on their own: dynamic string tokens, ld.so.conf, the
 * string and symbol matchers, and the checker's argument checks. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "lc_test_util.h"
#include "linkcheck/forbidden.h"
#include "linkcheck/linkcheck.h"

static uint64_t rng_state = 0x5eedf00dULL;

static uint64_t rng_next(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}

static char *expand(const char *entry, const char *origin, int *uses_origin, int *rc_p)
{
    struct lc__dst dst = {origin, "lib/x86_64-linux-gnu", "x86_64"};
    char *out = NULL;
    *rc_p = lc__dst_expand(entry, &dst, &out, uses_origin);
    return out;
}

START_TEST(tokens_expand_like_ld_so)
{
    static const struct {
        const char *in, *out;
        int uses_origin;
    } cases[] = {
        {"$ORIGIN/../lib", "/a/b/../lib", 1},
        {"${ORIGIN}/x", "/a/b/x", 1},
        {"/x$ORIGIN", "/x/a/b", 1},
        {"$ORIGINAL/x", "$ORIGINAL/x", 0},
        {"$ORIGIN_x", "$ORIGIN_x", 0},
        {"${ORIGIN", "${ORIGIN", 0},
        {"/opt/$LIB/x", "/opt/lib/x86_64-linux-gnu/x", 0},
        {"/p/${PLATFORM}/q", "/p/x86_64/q", 0},
        {"$FOO/bar", "$FOO/bar", 0},
        {"a$", "a$", 0},
        {"", "", 0},
        {"$$ORIGIN", "$/a/b", 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int uses = -1, rc;
        char *out = expand(cases[i].in, "/a/b", &uses, &rc);
        ck_assert_msg(rc == 0, "'%s': rc %d", cases[i].in, rc);
        ck_assert_msg(strcmp(out, cases[i].out) == 0, "'%s' expanded to '%s', expected '%s'",
                      cases[i].in, out, cases[i].out);
        ck_assert_int_eq(uses, cases[i].uses_origin);
        free(out);
    }
    int uses, rc;
    ck_assert_ptr_null(expand("$ORIGIN/lib", NULL, &uses, &rc));
    ck_assert_int_eq(rc, -ENOENT);
    char *out = expand("/usr/$LIB", NULL, &uses, &rc);
    ck_assert_int_eq(rc, 0);
    ck_assert_str_eq(out, "/usr/lib/x86_64-linux-gnu");
    free(out);
}
END_TEST

START_TEST(random_entries_without_tokens_are_unchanged)
{
    static const char alphabet[] = "${}ORIGNLBPATFM/_.a";
    for (int iter = 0; iter < 5000; iter++) {
        char in[40];
        size_t len = (size_t)(rng_next() % (sizeof(in) - 1));
        for (size_t k = 0; k < len; k++)
            in[k] = alphabet[rng_next() % (sizeof(alphabet) - 1)];
        in[len] = '\0';
        int uses, rc;
        char *out = expand(in, "/o", &uses, &rc);
        ck_assert_int_eq(rc, 0);
        if (!strchr(in, '$'))
            ck_assert_str_eq(out, in);
        if (!uses && !strstr(in, "LIB") && !strstr(in, "PLATFORM"))
            ck_assert_str_eq(out, in);
        free(out);
    }
}
END_TEST

/* The obvious quadratic search, as an oracle for the real one. */
static int naive_find(const char *s, size_t len, const char *const *stems, size_t n, size_t *pos)
{
    for (size_t p = 0; p < len; p++) {
        for (size_t i = 0; i < n; i++) {
            size_t sl = strlen(stems[i]);
            if (p + sl > len || memcmp(s + p, stems[i], sl) != 0)
                continue;
            for (size_t q = p + sl; q + 3 <= len; q++) {
                if (memcmp(s + q, ".so", 3) == 0) {
                    *pos = p;
                    return (int)i;
                }
            }
        }
    }
    return -1;
}

START_TEST(string_matcher_agrees_with_a_brute_force_oracle)
{
    const char *const *stems = lc_forbidden_stems;
    size_t n = LC_FORBIDDEN_STEM_COUNT;
    static const char *pieces[] = {"libcuda", "libnvrtc", "libnvidia-", "libnvJitLink",
                                   ".so",     ".s",       "lib",        "cuda",
                                   "/",       ".1",       "x",          "libcud"};
    for (int iter = 0; iter < 20000; iter++) {
        char s[128];
        size_t len = 0;
        int npieces = (int)(rng_next() % 6);
        for (int k = 0; k < npieces; k++) {
            const char *piece = pieces[rng_next() % (sizeof(pieces) / sizeof(pieces[0]))];
            size_t pl = strlen(piece);
            if (len + pl >= sizeof(s))
                break;
            memcpy(s + len, piece, pl);
            len += pl;
        }
        size_t want_pos = 0, got_pos = 0;
        int want = naive_find(s, len, stems, n, &want_pos);
        int got = lc__string_find_stem(s, len, stems, n, &got_pos);
        ck_assert_msg((want < 0) == (got < 0), "'%.*s': oracle %d, matcher %d", (int)len, s, want,
                      got);
        if (want >= 0)
            ck_assert_msg(want_pos == got_pos, "'%.*s': oracle at %zu, matcher at %zu", (int)len, s,
                          want_pos, got_pos);
    }
    size_t pos;
    ck_assert_int_eq(lc__string_find_stem("dlopen(libcuda.so.1)", 20, stems, n, &pos), 0);
    ck_assert_uint_eq(pos, 7);
    ck_assert_int_eq(lc__string_find_stem("libcuda", 7, stems, n, &pos), -1);
    ck_assert_int_eq(lc__string_find_stem(".so libcuda", 11, stems, n, &pos), -1);
    ck_assert_int_eq(lc__string_find_stem("/x/libnvidia-ml.so.580", 22, stems, n, &pos), 2);
    ck_assert_uint_eq(pos, 3);
}
END_TEST

START_TEST(symbol_patterns_match_cuda_names_only)
{
    ck_assert_str_eq(lc__symbol_pattern_of("cuInit"), "cu[A-Z]*");
    ck_assert_str_eq(lc__symbol_pattern_of("cuMemHostRegister_v2"), "cu[A-Z]*");
    ck_assert_str_eq(lc__symbol_pattern_of("cudaMalloc"), "cuda*");
    ck_assert_str_eq(lc__symbol_pattern_of("cuda"), "cuda*");
    ck_assert_str_eq(lc__symbol_pattern_of("__cudaRegisterFatBinary"), "__cuda*");
    ck_assert_str_eq(lc__symbol_pattern_of("nvrtcCompileProgram"), "nvrtc*");
    const char *allowed[] = {
        "",     "c",    "cu",    "cuckoo_insert", "cu_init",         "cursor",
        "CUDA", "nvrt", "_cuda", "xcuInit",       "io_uring_submit", "je_malloc"};
    for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
        ck_assert_msg(lc__symbol_pattern_of(allowed[i]) == NULL, "'%s' matched", allowed[i]);
}
END_TEST

START_TEST(ld_so_conf_parsing_follows_includes_in_order)
{
    char *root = lc_test_mkdtemp();
    ck_assert_ptr_nonnull(root);
    char *etc = lc_test_join(root, "etc"), *d = lc_test_join(root, "etc/ld.so.conf.d");
    char *abs = lc_test_join(root, "abs");
    ck_assert_int_eq(lc_test_mkdir_p(d), 0);
    ck_assert_int_eq(lc_test_mkdir_p(abs), 0);
    struct {
        const char *name, *text;
    } files[] = {
        {"etc/ld.so.conf", "# comment only\n\n/first\ninclude ld.so.conf.d/*.conf\n"
                           "hwcap 0 nosegneg\nHWCAP 1 x\n/usr/local/lib=libc6\n"
                           "include /abs/*.conf /etc/ld.so.conf\n/opt/x///\n"},
        {"etc/ld.so.conf.d/b.conf", "   /from-b   # trailing comment\n"},
        {"etc/ld.so.conf.d/a.conf", "/from-a\n\t\n"},
        {"etc/ld.so.conf.d/skip.txt", "/never\n"},
        {"abs/z.conf", "/from-abs\n"},
    };
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        char *path = lc_test_join(root, files[i].name);
        ck_assert_int_eq(lc_test_write_file(path, files[i].text, strlen(files[i].text), 0644), 0);
        free(path);
    }
    struct lc__strv dirs = {0};
    ck_assert_int_eq(lc__ldconf_load(root, &dirs), 0);
    /* The self-include repeats the list until the depth bound stops it. */
    static const char *const head[] = {"/first",         "/from-a",   "/from-b",
                                       "/usr/local/lib", "/from-abs", "/first"};
    ck_assert_uint_gt(dirs.n, sizeof(head) / sizeof(head[0]));
    for (size_t i = 0; i < sizeof(head) / sizeof(head[0]); i++)
        ck_assert_str_eq(dirs.v[i], head[i]);
    ck_assert_str_eq(dirs.v[dirs.n - 1], "/opt/x");
    for (size_t i = 0; i < dirs.n; i++)
        ck_assert_msg(strcmp(dirs.v[i], "/never") != 0 && strncmp(dirs.v[i], "hwcap", 5) != 0 &&
                          strncmp(dirs.v[i], "HWCAP", 5) != 0,
                      "unexpected entry %s", dirs.v[i]);
    ck_assert_uint_lt(dirs.n, 200);
    lc__strv_free(&dirs);

    /* No file: no directories, no error. */
    char *none = lc_test_join(root, "nothing-here");
    ck_assert_int_eq(lc__ldconf_load(none, &dirs), 0);
    ck_assert_uint_eq(dirs.n, 0);
    free(none);

    lc_test_rm_rf(root);
    free(abs);
    free(d);
    free(etc);
    free(root);
}
END_TEST

START_TEST(checker_rejects_bad_settings)
{
    struct lc_checker *c;
    ck_assert_int_eq(lc_checker_create(&c), 0);
    ck_assert_int_eq(lc_checker_forbid(c, ""), -EINVAL);
    ck_assert_int_eq(lc_checker_forbid(c, "lib/x"), -EINVAL);
    ck_assert_int_eq(lc_checker_forbid(c, "libfoo"), 0);
    ck_assert_int_eq(lc_checker_set_root(c, ""), -EINVAL);
    ck_assert_int_eq(lc_checker_set_root(c, "/"), 0);
    ck_assert_int_eq(lc_checker_set_root(c, NULL), 0);
    ck_assert_int_eq(lc_checker_set_ld_library_path(c, ""), 0);
    ck_assert_int_eq(lc_checker_set_ld_library_path(c, "/a:/b"), 0);
    ck_assert_int_eq(lc_checker_set_ld_library_path(c, NULL), 0);
    lc_checker_destroy(c);
    lc_checker_destroy(NULL);
}
END_TEST

static Suite *linkcheck_unit_suite(void)
{
    Suite *s = suite_create("linkcheck_unit");
    TCase *tc = tcase_create("unit");
    tcase_add_test(tc, tokens_expand_like_ld_so);
    tcase_add_test(tc, random_entries_without_tokens_are_unchanged);
    tcase_add_test(tc, string_matcher_agrees_with_a_brute_force_oracle);
    tcase_add_test(tc, symbol_patterns_match_cuda_names_only);
    tcase_add_test(tc, ld_so_conf_parsing_follows_includes_in_order);
    tcase_add_test(tc, checker_rejects_bad_settings);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(linkcheck_unit_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
