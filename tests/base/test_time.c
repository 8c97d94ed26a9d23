/* base/time: the monotonic clock in nanoseconds, conversions, deadlines and
 * sleeps that never come back early. */
#include <check.h>
#include <stdint.h>

#include "base/time.h"
#include "check_main.h"

START_TEST(the_clock_never_goes_back_and_agrees_with_clock_monotonic)
{
    uint64_t prev = base_now_ns();
    for (int i = 0; i < 100000; i++) {
        uint64_t now = base_now_ns();
        ck_assert_uint_ge(now, prev);
        prev = now;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t direct = base_timespec_ns(&ts);
    uint64_t ours = base_now_ns();
    ck_assert_uint_ge(ours, direct);
    ck_assert_uint_lt(ours - direct, BASE_NS_PER_S); /* the same clock, not another */
    double s = base_now_s();
    ck_assert(s >= (double)ours * 1e-9 && s < (double)ours * 1e-9 + 1.0);
}
END_TEST

START_TEST(timespecs_and_nanoseconds_convert_both_ways)
{
    static const uint64_t values[] = {0, 1, 999999999, 1000000000, 1234567890123456789ull};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        struct timespec ts = base_ns_timespec(values[i]);
        ck_assert_int_lt(ts.tv_nsec, 1000000000L);
        ck_assert_int_ge(ts.tv_nsec, 0);
        ck_assert_uint_eq(base_timespec_ns(&ts), values[i]);
    }
    struct timespec ts = base_ns_timespec(2500000000ull);
    ck_assert_int_eq(ts.tv_sec, 2);
    ck_assert_int_eq(ts.tv_nsec, 500000000L);
}
END_TEST

START_TEST(deadlines_lie_ahead_and_sleeps_last_at_least_as_long)
{
    uint64_t before = base_now_ns();
    struct timespec d = base_deadline_ns(50000000);
    ck_assert_uint_ge(base_timespec_ns(&d), before + 50000000);
    base_sleep_ns(20000000);
    ck_assert_uint_ge(base_now_ns() - before, 20000000);
    base_sleep_ns(0);
}
END_TEST

static Suite *time_suite(void)
{
    Suite *s = suite_create("base_time");
    TCase *tc = tcase_create("clock");
    tcase_add_test(tc, the_clock_never_goes_back_and_agrees_with_clock_monotonic);
    tcase_add_test(tc, timespecs_and_nanoseconds_convert_both_ways);
    tcase_add_test(tc, deadlines_lie_ahead_and_sleeps_last_at_least_as_long);
    suite_add_tcase(s, tc);
    return s;
}

BASE_CHECK_MAIN(time_suite)
