/* base/parse: every form each parser accepts, every form it refuses (empty,
 * NULL, signs, blanks, trailing garbage, overflow, out of range), the
 * errno it refuses with and the message that says what was expected. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/parse.h"
#include "check_main.h"

#define SENTINEL 0x5a5a5a5a5a5a5a5aull

/* ---- sizes ---- */

static const struct {
    const char *text;
    uint64_t bytes;
} sizes_ok[] = {
    {"0", 0},
    {"4096", 4096},
    {"4K", 4096},
    {"4k", 4096},
    {"4KB", 4096},
    {"4kb", 4096},
    {"4KiB", 4096},
    {"4kib", 4096},
    {"4KIB", 4096},
    {"1M", 1ull << 20},
    {"512MiB", 512ull << 20},
    {"2m", 2ull << 20},
    {"1G", 1ull << 30},
    {"8GiB", 8ull << 30},
    {"3g", 3ull << 30},
    {"1T", 1ull << 40},
    {"2TiB", 2ull << 40},
    {"1P", 1ull << 50},
    {"1PiB", 1ull << 50},
    {"15E", 15ull << 60},
    {"15EiB", 15ull << 60},
    {"16383P", 16383ull << 50},
    {"1B", 1},
    {"7b", 7},
    {"0x1000", 4096},
    {"0X1000", 4096},
    {"0x10K", 16384},
    {"0x1b", 27}, /* after 0x, b is a digit */
    {"010", 10},  /* decimal, never octal */
    {"00", 0},
    {"18446744073709551615", UINT64_MAX},
    {"0xffffffffffffffff", UINT64_MAX},
    {"17179869183G", 17179869183ull << 30},
};

static const char *const sizes_invalid[] = {
    "",   "K",   "-1",  "+1",  " 1",  "1 ",    "1.5G", "1KK", "1Kx",  "1iB",    "1KiBx",
    "0x", "0xg", "1Ki", "abc", "1 K", "1KiB ", "1Z",   "1e3", "1KBB", "1kiB\n",
};

static const char *const sizes_range[] = {
    "16E",
    "16EiB",
    "18446744073709551616",
    "17179869184G",
    "0x10000000000000000",
    "99999999999999999999999K",
};

START_TEST(sizes_take_digits_hex_and_every_binary_unit_spelling)
{
    for (size_t i = 0; i < sizeof sizes_ok / sizeof sizes_ok[0]; i++) {
        uint64_t v = SENTINEL;
        char err[128] = "";
        ck_assert_msg(base_parse_size(sizes_ok[i].text, &v, err, sizeof err) == 0, "'%s': %s",
                      sizes_ok[i].text, err);
        ck_assert_msg(v == sizes_ok[i].bytes, "'%s' gave %llu", sizes_ok[i].text,
                      (unsigned long long)v);
        ck_assert_str_eq(err, ""); /* untouched on success */
    }
}
END_TEST

START_TEST(sizes_refuse_other_forms_with_einval_and_say_what_was_expected)
{
    for (size_t i = 0; i < sizeof sizes_invalid / sizeof sizes_invalid[0]; i++) {
        uint64_t v = SENTINEL;
        char err[256] = "";
        ck_assert_msg(base_parse_size(sizes_invalid[i], &v, err, sizeof err) == -EINVAL, "'%s'",
                      sizes_invalid[i]);
        ck_assert_uint_eq(v, SENTINEL);
        ck_assert_msg(strncmp(err, "expected a size such as", 23) == 0, "%s", err);
    }
    uint64_t v = SENTINEL;
    char err[256];
    ck_assert_int_eq(base_parse_size(NULL, &v, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "found nothing"));
    ck_assert_int_eq(base_parse_size("12X", &v, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, ", found '12X'"));
    ck_assert_int_eq(base_parse_size("12X", &v, NULL, 0), -EINVAL); /* no message wanted */
    ck_assert_uint_eq(v, SENTINEL);
}
END_TEST

START_TEST(sizes_past_64_bits_are_erange)
{
    for (size_t i = 0; i < sizeof sizes_range / sizeof sizes_range[0]; i++) {
        uint64_t v = SENTINEL;
        char err[256] = "";
        ck_assert_msg(base_parse_size(sizes_range[i], &v, err, sizeof err) == -ERANGE, "'%s'",
                      sizes_range[i]);
        ck_assert_uint_eq(v, SENTINEL);
        ck_assert_ptr_nonnull(strstr(err, "below 16 EiB"));
    }
    /* Overflowing digits with garbage after them: the form is wrong first. */
    uint64_t v;
    ck_assert_int_eq(base_parse_size("99999999999999999999999Q", &v, NULL, 0), -EINVAL);
}
END_TEST

/* ---- integers ---- */

START_TEST(u64_takes_decimal_and_hex_and_checks_the_range)
{
    static const struct {
        const char *text;
        uint64_t v;
    } ok[] = {
        {"0", 0},
        {"42", 42},
        {"0x2a", 42},
        {"0X2A", 42},
        {"007", 7},
        {"18446744073709551615", UINT64_MAX},
        {"0xFFFFFFFFFFFFFFFF", UINT64_MAX},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint64_t v = SENTINEL;
        ck_assert_int_eq(base_parse_u64(ok[i].text, 0, UINT64_MAX, &v, NULL, 0), 0);
        ck_assert_uint_eq(v, ok[i].v);
    }
    uint64_t v = SENTINEL;
    ck_assert_int_eq(base_parse_u64("1", 1, 256, &v, NULL, 0), 0);
    ck_assert_uint_eq(v, 1);
    ck_assert_int_eq(base_parse_u64("256", 1, 256, &v, NULL, 0), 0);
    ck_assert_uint_eq(v, 256);
}
END_TEST

START_TEST(u64_refuses_signs_blanks_garbage_and_overflow)
{
    static const char *const bad[] = {"",   "-1",  "+1", " 1",  "1 ",    "1a",
                                      "0x", "1e3", "1K", "0b1", "1_000", "٣"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v = SENTINEL;
        char err[128] = "";
        ck_assert_msg(base_parse_u64(bad[i], 0, UINT64_MAX, &v, err, sizeof err) == -EINVAL, "'%s'",
                      bad[i]);
        ck_assert_uint_eq(v, SENTINEL);
        ck_assert_msg(strncmp(err, "expected an unsigned integer, found", 35) == 0, "%s", err);
    }
    uint64_t v = SENTINEL;
    char err[128];
    ck_assert_int_eq(base_parse_u64("18446744073709551616", 0, UINT64_MAX, &v, err, sizeof err),
                     -ERANGE);
    ck_assert_str_eq(err, "expected an unsigned integer up to 18446744073709551615, found "
                          "'18446744073709551616'");
    ck_assert_int_eq(base_parse_u64("0x1ffffffffffffffff", 0, UINT64_MAX, &v, NULL, 0), -ERANGE);
    ck_assert_uint_eq(v, SENTINEL);
}
END_TEST

START_TEST(u64_out_of_its_range_is_erange_with_the_range_in_the_message)
{
    uint64_t v = SENTINEL;
    char err[128];
    ck_assert_int_eq(base_parse_u64("257", 1, 256, &v, err, sizeof err), -ERANGE);
    ck_assert_str_eq(err, "expected an integer in 1..256, found '257'");
    ck_assert_int_eq(base_parse_u64("0", 1, 256, &v, err, sizeof err), -ERANGE);
    ck_assert_str_eq(err, "expected an integer in 1..256, found '0'");
    ck_assert_int_eq(base_parse_u64("x", 1, 256, &v, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "expected an integer in 1..256, found 'x'");
    ck_assert_int_eq(base_parse_u64(NULL, 1, 256, &v, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "expected an integer in 1..256, found nothing");
    ck_assert_uint_eq(v, SENTINEL);

    uint32_t w = 7;
    ck_assert_int_eq(base_parse_u32("4294967295", 0, UINT32_MAX, &w, NULL, 0), 0);
    ck_assert_uint_eq(w, UINT32_MAX);
    w = 7;
    ck_assert_int_eq(base_parse_u32("4294967296", 0, UINT32_MAX, &w, err, sizeof err), -ERANGE);
    ck_assert_str_eq(err, "expected an integer in 0..4294967295, found '4294967296'");
    ck_assert_uint_eq(w, 7);
}
END_TEST

START_TEST(found_text_is_cut_and_control_bytes_masked_in_messages)
{
    char in[200], err[256];
    memset(in, '9', sizeof in - 1);
    in[sizeof in - 1] = '\0';
    in[150] = 'x';
    uint64_t v;
    ck_assert_int_eq(base_parse_u64(in, 0, UINT64_MAX, &v, err, sizeof err), -EINVAL);
    char want[128];
    snprintf(want, sizeof want, "found '%.64s...'", in);
    ck_assert_ptr_nonnull(strstr(err, want));
    ck_assert_int_eq(base_parse_u64("1\n2\033", 0, UINT64_MAX, &v, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "found '1?2?'"));
    /* A buffer too small for the message still ends in "..." within it. */
    char tiny[24];
    ck_assert_int_eq(base_parse_u64("x", 1, 256, &v, tiny, sizeof tiny), -EINVAL);
    ck_assert_uint_lt(strlen(tiny), sizeof tiny);
    ck_assert_ptr_nonnull(strstr(tiny, "..."));
}
END_TEST

/* ---- booleans and names ---- */

START_TEST(bools_take_four_spellings_of_each_in_any_case)
{
    static const char *const yes[] = {"yes", "YES", "Yes", "true", "TRUE", "on", "On", "1"};
    static const char *const no[] = {"no", "NO", "false", "False", "off", "OFF", "0"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        bool b = false;
        ck_assert_int_eq(base_parse_bool(yes[i], &b, NULL, 0), 0);
        ck_assert(b);
    }
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        bool b = true;
        ck_assert_int_eq(base_parse_bool(no[i], &b, NULL, 0), 0);
        ck_assert(!b);
    }
    static const char *const bad[] = {"", "2", "yess", "y", "n", "nope", " yes", "yes ", "01"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        bool b = true;
        char err[128];
        ck_assert_int_eq(base_parse_bool(bad[i], &b, err, sizeof err), -EINVAL);
        ck_assert(b);
        ck_assert_msg(strncmp(err, "expected yes or no", 18) == 0, "%s", err);
    }
    bool b;
    char err[128];
    ck_assert_int_eq(base_parse_bool(NULL, &b, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "found nothing"));
}
END_TEST

static const struct base_enum ops[] = {
    {"verify", 0},
    {"scan", 1},
    {"both", 2},
    {NULL, 0},
};

START_TEST(enums_match_names_exactly_and_list_them_when_refusing)
{
    int v = -1;
    ck_assert_int_eq(base_parse_enum("scan", ops, &v, NULL, 0), 0);
    ck_assert_int_eq(v, 1);
    ck_assert_int_eq(base_parse_enum("both", ops, &v, NULL, 0), 0);
    ck_assert_int_eq(v, 2);
    v = -1;
    char err[128];
    ck_assert_int_eq(base_parse_enum("Scan", ops, &v, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "expected verify, scan or both, found 'Scan'");
    ck_assert_int_eq(base_parse_enum("", ops, &v, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "expected verify, scan or both, found nothing");
    ck_assert_int_eq(base_parse_enum(NULL, ops, &v, err, sizeof err), -EINVAL);
    ck_assert_int_eq(base_parse_enum("scan ", ops, &v, NULL, 0), -EINVAL);
    ck_assert_int_eq(v, -1);

    static const struct base_enum two[] = {{"on", 1}, {"off", 0}, {NULL, 0}};
    ck_assert_int_eq(base_parse_enum("x", two, &v, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "expected on or off, found 'x'");
    static const struct base_enum one[] = {{"only", 3}, {NULL, 0}};
    ck_assert_int_eq(base_parse_enum("x", one, &v, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "expected only, found 'x'");
    static const struct base_enum none[] = {{NULL, 0}};
    ck_assert_int_eq(base_parse_enum("x", none, &v, err, sizeof err), -EINVAL);
    ck_assert_int_eq(base_parse_enum("x", NULL, &v, err, sizeof err), -EINVAL);
}
END_TEST

START_TEST(enum_names_come_back_by_value_first_alias_first)
{
    static const struct base_enum levels[] = {
        {"warn", 4},
        {"warning", 4},
        {"info", 6},
        {NULL, 0},
    };
    int v = 0;
    ck_assert_int_eq(base_parse_enum("warning", levels, &v, NULL, 0), 0);
    ck_assert_int_eq(v, 4);
    ck_assert_str_eq(base_enum_name(levels, 4), "warn");
    ck_assert_str_eq(base_enum_name(ops, 0), "verify");
    ck_assert_ptr_null(base_enum_name(ops, 7));
    ck_assert_ptr_null(base_enum_name(NULL, 0));
}
END_TEST

static Suite *parse_suite(void)
{
    Suite *s = suite_create("base_parse");
    TCase *tc = tcase_create("sizes");
    tcase_add_test(tc, sizes_take_digits_hex_and_every_binary_unit_spelling);
    tcase_add_test(tc, sizes_refuse_other_forms_with_einval_and_say_what_was_expected);
    tcase_add_test(tc, sizes_past_64_bits_are_erange);
    suite_add_tcase(s, tc);

    tc = tcase_create("integers");
    tcase_add_test(tc, u64_takes_decimal_and_hex_and_checks_the_range);
    tcase_add_test(tc, u64_refuses_signs_blanks_garbage_and_overflow);
    tcase_add_test(tc, u64_out_of_its_range_is_erange_with_the_range_in_the_message);
    tcase_add_test(tc, found_text_is_cut_and_control_bytes_masked_in_messages);
    suite_add_tcase(s, tc);

    tc = tcase_create("bools_and_names");
    tcase_add_test(tc, bools_take_four_spellings_of_each_in_any_case);
    tcase_add_test(tc, enums_match_names_exactly_and_list_them_when_refusing);
    tcase_add_test(tc, enum_names_come_back_by_value_first_alias_first);
    suite_add_tcase(s, tc);
    return s;
}

BASE_CHECK_MAIN(parse_suite)
