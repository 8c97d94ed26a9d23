/* base_parse_size accepts everything its strict form accepts (stagingd's
 * spellings, once sd_size_parse), with the same bytes: the two run side by
 * side on listed and random strings. (The agent's parsers are gone: it
 * parses with base_parse_size; store_parse_u64 is static: its forms are
 * listed in test_parse.c.) */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "base/parse.h"
#include "base/rand.h"
#include "check_main.h"

static int checked, accepted;

static void compare(const char *s)
{
    uint64_t base_v = 0, old_v = 0;
    int base_rc = base_parse_size(s, &base_v, NULL, 0);
    if (base_parse_size_flags(s, BASE_PARSE_SIZE_STRICT, &old_v, NULL, 0) == 0) {
        ck_assert_msg(base_rc == 0 && base_v == old_v, "'%s': the strict form gives %llu", s,
                      (unsigned long long)old_v);
        accepted++;
    }
    checked++;
}

START_TEST(every_size_the_old_parsers_accept_parses_the_same)
{
    static const char *const listed[] = {
        "0",         "1",
        "4096",      "4K",
        "4k",        "4KB",
        "4kb",       "4KiB",
        "4kib",      "1M",
        "1MiB",      "1G",
        "1GiB",      "1T",
        "1TiB",      "1B",
        "1b",        "010",
        "8GiB",      "16383T",
        "16777215T", "18446744073709551615",
        "1kIB",      "1Kb",
        "1gB",
    };
    for (size_t i = 0; i < sizeof listed / sizeof listed[0]; i++)
        compare(listed[i]);

    static const char alphabet[] = "0123456789012345678901234567890123456789kKmMgGtTbBiIxX -+.";
    uint64_t rng = 7;
    for (int n = 0; n < 300000; n++) {
        char s[12];
        uint64_t r = base_splitmix64(&rng);
        size_t len = 1 + (size_t)(r % 8);
        for (size_t i = 0; i < len; i++)
            s[i] = alphabet[base_splitmix64(&rng) % (sizeof alphabet - 1)];
        s[len] = '\0';
        compare(s);
    }
    ck_assert_int_gt(accepted, 1000); /* the corpus did reach the accepting forms */
}
END_TEST

static Suite *compat_suite(void)
{
    Suite *s = suite_create("base_parse_compat");
    TCase *tc = tcase_create("sizes");
    tcase_add_test(tc, every_size_the_old_parsers_accept_parses_the_same);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);
    return s;
}

BASE_CHECK_MAIN(compat_suite)
