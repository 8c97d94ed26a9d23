/* base/err: error one-liners and text that never ends cut silently: a cut
 * ends in "...", at a word boundary when one is near, and never inside a
 * UTF-8 character. */
#include <check.h>
#include <errno.h>
#include <string.h>

#include "base/err.h"
#include "check_main.h"

START_TEST(errf_formats_the_message_and_returns_the_code)
{
    char err[64];
    ck_assert_int_eq(base_errf(err, sizeof err, -EINVAL, "expected %d, found %s", 4, "five"),
                     -EINVAL);
    ck_assert_str_eq(err, "expected 4, found five");
    ck_assert_int_eq(base_errf(NULL, 0, -ENOENT, "nobody reads %s", "this"), -ENOENT);
    ck_assert_int_eq(base_errf(err, 0, -EIO, "not written"), -EIO);
    ck_assert_str_eq(err, "expected 4, found five");
}
END_TEST

START_TEST(text_that_fits_is_never_marked)
{
    char buf[16];
    ck_assert_uint_eq(base_fmt(buf, sizeof buf, "%s", "exactly 15 char"), 15);
    ck_assert_str_eq(buf, "exactly 15 char");
    ck_assert_uint_eq(base_fmt(buf, sizeof buf, "%s", ""), 0);
    ck_assert_str_eq(buf, "");
}
END_TEST

START_TEST(a_cut_keeps_whole_words_and_ends_in_an_ellipsis)
{
    /* The line a pool report once cut as "in use 0 byt". */
    char buf[32];
    size_t n = base_fmt(buf, sizeof buf, "pool: %u segments in use %u bytes free", 12u, 0u);
    ck_assert_uint_eq(n, strlen(buf));
    ck_assert_uint_lt(n, sizeof buf);
    ck_assert_str_eq(buf, "pool: 12 segments in use 0 ...");

    /* The cut lands right after a blank: nothing more to take back. */
    ck_assert_str_eq((base_fmt(buf, 12, "%s", "abcdefg hijklmn"), buf), "abcdefg ...");
    /* ...or right on one. */
    ck_assert_str_eq((base_fmt(buf, 11, "%s", "abcdefg hijklmn"), buf), "abcdefg...");
}
END_TEST

START_TEST(a_word_longer_than_the_lookback_is_cut_inside_with_an_ellipsis)
{
    char buf[48];
    char word[100];
    memset(word, 'x', sizeof word - 1);
    word[sizeof word - 1] = '\0';
    base_fmt(buf, sizeof buf, "short %s", word);
    ck_assert_uint_eq(strlen(buf), sizeof buf - 1);
    ck_assert_str_eq(buf + sizeof buf - 4, "...");
    ck_assert_int_eq(strncmp(buf, "short xxxx", 10), 0);
}
END_TEST

START_TEST(a_cut_never_splits_a_utf8_character)
{
    /* "é" is two bytes; 40 of them leave no blank to cut at. */
    char text[200] = "";
    for (int i = 0; i < 40; i++)
        strcat(text, "\xc3\xa9");
    for (size_t len = 4; len < 40; len++) {
        char buf[64];
        size_t n = base_fmt(buf, len, "%s", text);
        ck_assert_uint_lt(n, len);
        ck_assert_str_eq(buf + n - 3, "...");
        ck_assert_msg((n - 3) % 2 == 0, "len %zu kept %zu bytes of characters", len, n - 3);
    }
}
END_TEST

START_TEST(tiny_and_missing_buffers_are_safe)
{
    char buf[4];
    ck_assert_uint_eq(base_fmt(buf, 4, "%s", "abcdef"), 3);
    ck_assert_str_eq(buf, "...");
    ck_assert_uint_eq(base_fmt(buf, 3, "%s", "abcdef"), 2);
    ck_assert_str_eq(buf, "ab"); /* no room for the mark at all */
    ck_assert_uint_eq(base_fmt(buf, 1, "%s", "abcdef"), 0);
    ck_assert_str_eq(buf, "");
    ck_assert_uint_eq(base_fmt(NULL, 10, "%s", "abc"), 0);
    ck_assert_uint_eq(base_text_ellipsize(NULL, 10), 0);
}
END_TEST

static Suite *err_suite(void)
{
    Suite *s = suite_create("base_err");
    TCase *tc = tcase_create("text");
    tcase_add_test(tc, errf_formats_the_message_and_returns_the_code);
    tcase_add_test(tc, text_that_fits_is_never_marked);
    tcase_add_test(tc, a_cut_keeps_whole_words_and_ends_in_an_ellipsis);
    tcase_add_test(tc, a_word_longer_than_the_lookback_is_cut_inside_with_an_ellipsis);
    tcase_add_test(tc, a_cut_never_splits_a_utf8_character);
    tcase_add_test(tc, tiny_and_missing_buffers_are_safe);
    suite_add_tcase(s, tc);
    return s;
}

BASE_CHECK_MAIN(err_suite)
