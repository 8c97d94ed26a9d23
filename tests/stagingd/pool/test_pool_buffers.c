/* The staging pool: Buffers stay in their class, never overlap and add up; a full class
 * refuses with ENOMEM and recovers; free refuses what is not a pool
 * buffer; locate maps ranges within one segment only. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "pool_test_util.h"

/* --- buffers --- */

START_TEST(test_random_buffers_stay_in_their_class_never_overlap_and_add_up)
{
    struct leasec_pool_config c = small_config();
    struct leasec_pool *pool = create_or_fail(&c);
    struct random_run r = {.rng = SEED};
    r.set.cap = 8192;
    r.set.v = calloc(r.set.cap, sizeof(*r.set.v));
    ck_assert_ptr_nonnull(r.set.v);

    unsigned allocs = 0, frees = 0;
    for (unsigned op = 0; op < 12000; op++) {
        if (r.set.n == 0 || rng_next(&r.rng) % 100 < 55) {
            enum lt_class k = (enum lt_class)(LT_CLASS_STAGED + rng_next(&r.rng) % 3);
            size_t size = random_size(&r.rng);
            struct leasec_pool_buf b;
            unsigned lines = captured.lines;
            int rc = leasec_pool_alloc(pool, k, size, &b);
            if (rc == -ENOMEM) {
                r.failures[k]++;
                ck_assert_uint_eq(captured.lines, lines + 1);
                ck_assert_ptr_nonnull(strstr(captured.last, lt_class_name(k)));
                continue;
            }
            ck_assert_msg(rc == 0, "alloc %zu %s: %s", size, lt_class_name(k), strerror(-rc));
            check_buf_placement(pool, &b, k, size);
            struct live l = {.buf = b, .key = rng_next(&r.rng)};
            pattern_fill(b.base, size, l.key);
            live_insert(&r.set, &l);
            r.in_use[k] += size;
            r.live[k]++;
            if (r.in_use[k] > r.high[k])
                r.high[k] = r.in_use[k];
            allocs++;
        } else {
            free_live(pool, &r, (unsigned)(rng_next(&r.rng) % r.set.n));
            frees++;
        }
        if (op % 500 == 0) {
            for (unsigned i = 0; i < r.set.n; i++)
                ck_assert_int_lt(
                    pattern_check(r.set.v[i].buf.base, r.set.v[i].buf.len, r.set.v[i].key), 0);
            check_accounting(pool, &r);
        }
    }
    check_accounting(pool, &r);
    /* The run must exercise the pool, including its limits. */
    ck_assert_uint_gt(allocs, 4000);
    ck_assert_uint_gt(r.failures[LT_CLASS_MAPPED], 0);
    while (r.set.n)
        free_live(pool, &r, (unsigned)(rng_next(&r.rng) % r.set.n));
    check_accounting(pool, &r);
    for (int k = LT_CLASS_STAGED; k <= LT_CLASS_MAPPED; k++)
        ck_assert_uint_eq(r.in_use[k], 0);
    free(r.set.v);
    leasec_pool_destroy(pool);
}
END_TEST

START_TEST(test_full_class_refuses_with_enomem_and_recovers_after_frees)
{
    struct leasec_pool_config c = small_config();
    c.class_bytes[LT_CLASS_STAGED] = 0;
    c.class_bytes[LT_CLASS_MAPPED] = 0;
    c.class_bytes[LT_CLASS_PINNED] = 8 * MIB; /* two 4 MiB segments */
    struct leasec_pool *pool = create_or_fail(&c);
    const size_t chunk = 512 * 1024;
    struct leasec_pool_buf bufs[64];
    unsigned n1 = 0, failures = 0;
    int rc;
    while ((rc = leasec_pool_alloc(pool, LT_CLASS_PINNED, chunk, &bufs[n1])) == 0) {
        check_buf_placement(pool, &bufs[n1], LT_CLASS_PINNED, chunk);
        ck_assert_uint_lt(++n1, 64);
    }
    failures++;
    ck_assert_int_eq(rc, -ENOMEM);
    ck_assert_uint_le(n1 * chunk, 8 * MIB);
    ck_assert_uint_ge(n1, 8); /* at least half the class was usable */

    /* The message gives class, request, capacity and what is in use. */
    char want[128];
    ck_assert_ptr_nonnull(strstr(captured.last, "PINNED"));
    ck_assert_ptr_nonnull(strstr(captured.last, "524288 bytes"));
    ck_assert_ptr_nonnull(strstr(captured.last, "capacity 8388608"));
    snprintf(want, sizeof(want), "in use %zu", n1 * chunk);
    ck_assert_msg(strstr(captured.last, want), "'%s' lacks '%s'", captured.last, want);

    /* Larger than the class, larger than any segment: refused, no crash. */
    struct leasec_pool_buf big;
    ck_assert_int_eq(leasec_pool_alloc(pool, LT_CLASS_PINNED, 16 * MIB, &big), -ENOMEM);
    ck_assert_int_eq(leasec_pool_alloc(pool, LT_CLASS_PINNED, SIZE_MAX / 2, &big), -ENOMEM);
    failures += 2;
    /* A class the config left out has nothing to give. */
    ck_assert_int_eq(leasec_pool_alloc(pool, LT_CLASS_STAGED, 4096, &big), -ENOMEM);
    ck_assert_ptr_nonnull(strstr(captured.last, "STAGED"));
    ck_assert_ptr_nonnull(strstr(captured.last, "capacity 0"));

    /* One free makes room for exactly that buffer again. */
    ck_assert_int_eq(leasec_pool_free(pool, &bufs[n1 - 1]), 0);
    ck_assert_int_eq(leasec_pool_alloc(pool, LT_CLASS_PINNED, chunk, &bufs[n1 - 1]), 0);

    for (unsigned i = 0; i < n1; i++)
        ck_assert_int_eq(leasec_pool_free(pool, &bufs[i]), 0);
    struct leasec_pool_class_stats st;
    ck_assert_int_eq(leasec_pool_stats(pool, LT_CLASS_PINNED, &st), 0);
    ck_assert_uint_eq(st.in_use, 0);
    ck_assert_uint_eq(st.live_buffers, 0);
    ck_assert_uint_eq(st.high_water, n1 * chunk);
    ck_assert_uint_eq(st.alloc_failures, failures);

    /* Nothing was purged or returned, so the same load fits again. */
    ck_assert_int_eq(leasec_pool_alloc(pool, LT_CLASS_PINNED, 6 * MIB, &big), -ENOMEM);
    unsigned n2 = 0;
    while (n2 < 64 && leasec_pool_alloc(pool, LT_CLASS_PINNED, chunk, &bufs[n2]) == 0)
        n2++;
    ck_assert_uint_ge(n2, n1);
    ck_assert_int_eq(leasec_pool_stats(pool, LT_CLASS_PINNED, &st), 0);
    ck_assert_uint_le(st.carved, 8 * MIB);
    for (unsigned i = 0; i < n2; i++)
        ck_assert_int_eq(leasec_pool_free(pool, &bufs[i]), 0);
    leasec_pool_destroy(pool);
}
END_TEST

START_TEST(test_free_rejects_descriptors_that_are_not_pool_buffers)
{
    struct leasec_pool_config c = small_config();
    struct leasec_pool *pool = create_or_fail(&c);
    struct leasec_pool_buf b;
    ck_assert_int_eq(leasec_pool_alloc(pool, LT_CLASS_STAGED, 100000, &b), 0);
    struct leasec_pool_buf bad = b;
    bad.segment_id++;
    ck_assert_int_eq(leasec_pool_free(pool, &bad), -EINVAL);
    bad = b;
    bad.mem_class = LT_CLASS_PINNED;
    ck_assert_int_eq(leasec_pool_free(pool, &bad), -EINVAL);
    bad = b;
    bad.len = 3 * 100000; /* another size class */
    ck_assert_int_eq(leasec_pool_free(pool, &bad), -EINVAL);
    int local;
    bad.base = &local;
    ck_assert_int_eq(leasec_pool_free(pool, &bad), -EINVAL);
    ck_assert_ptr_nonnull(strstr(captured.last, "not in any segment"));
    ck_assert_int_eq(leasec_pool_alloc(pool, (enum lt_class)0, 10, &bad), -EINVAL);
    ck_assert_int_eq(leasec_pool_alloc(pool, (enum lt_class)4, 10, &bad), -EINVAL);
    ck_assert_int_eq(leasec_pool_alloc(pool, LT_CLASS_STAGED, 0, &bad), -EINVAL);

    struct leasec_pool_class_stats st;
    ck_assert_int_eq(leasec_pool_stats(pool, LT_CLASS_STAGED, &st), 0);
    ck_assert_uint_eq(st.in_use, 100000); /* the rejected frees changed nothing */
    ck_assert_int_eq(leasec_pool_free(pool, &b), 0);
    ck_assert_int_eq(leasec_pool_stats(pool, LT_CLASS_STAGED, &st), 0);
    ck_assert_uint_eq(st.in_use, 0);
    leasec_pool_destroy(pool);
}
END_TEST

START_TEST(test_locate_maps_ranges_within_one_segment_only)
{
    struct leasec_pool_config c = small_config();
    struct leasec_pool *pool = create_or_fail(&c);
    uint64_t rng = SEED ^ 1;
    for (unsigned i = 0; i < leasec_pool_segment_count(pool); i++) {
        struct leasec_pool_segment s;
        ck_assert_int_eq(leasec_pool_segment_at(pool, i, &s), 0);
        unsigned char *base = s.base;
        uint32_t id;
        uint64_t off;
        for (int k = 0; k < 200; k++) {
            uint64_t o = rng_next(&rng) % s.size;
            uint64_t len = 1 + rng_next(&rng) % (s.size - o);
            ck_assert_int_eq(leasec_pool_locate(pool, base + o, len, &id, &off), 0);
            ck_assert_uint_eq(id, s.id);
            ck_assert_uint_eq(off, o);
            /* One byte too long crosses the end, whatever lies beyond it. */
            ck_assert_int_eq(leasec_pool_locate(pool, base + o, s.size - o + 1, &id, &off),
                             -ERANGE);
        }
        ck_assert_int_eq(leasec_pool_locate(pool, base, s.size, &id, &off), 0);
        ck_assert_int_eq(leasec_pool_locate(pool, base + s.size - 1, 1, &id, &off), 0);
        ck_assert_uint_eq(off, s.size - 1);
        ck_assert_int_eq(leasec_pool_locate(pool, base, 0, &id, &off), -EINVAL);
        if (leasec_pool_locate(pool, base - 1, 1, &id, &off) == 0)
            ck_assert_uint_ne(id, s.id); /* the previous segment, not this one */
        else
            ck_assert_int_eq(leasec_pool_locate(pool, base - 1, 1, &id, &off), -ENOENT);
    }
    int local = 0;
    uint32_t id = 77;
    uint64_t off = 77;
    ck_assert_int_eq(leasec_pool_locate(pool, &local, sizeof(local), &id, &off), -ENOENT);
    ck_assert_int_eq(leasec_pool_locate(pool, NULL, 1, &id, &off), -ENOENT);
    ck_assert_uint_eq(id, 77); /* outputs untouched on failure */
    ck_assert_uint_eq(off, 77);
    leasec_pool_destroy(pool);
}
END_TEST

void pool_tests_buffers(TCase *tc)
{
    tcase_add_test(tc, test_random_buffers_stay_in_their_class_never_overlap_and_add_up);
    tcase_add_test(tc, test_full_class_refuses_with_enomem_and_recovers_after_frees);
    tcase_add_test(tc, test_free_rejects_descriptors_that_are_not_pool_buffers);
    tcase_add_test(tc, test_locate_maps_ranges_within_one_segment_only);
}
