/* base/u64map: puts, gets and deletes through colliding probe runs (also
 * wrapping the table's end), key 0, u64 values, growth and reserve, clear,
 * walks that delete, and randomized runs against a direct-indexed model. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/rand.h"
#include "base/u64map.h"
#include "check_main.h"

static int objs[8192];
#define OBJ(i) ((void *)&objs[(i)])

static size_t home_of(const struct base_u64map *m, uint64_t key)
{
    return (size_t)base_u64_mix(key) & (base_u64map_capacity(m) - 1);
}

/* @n distinct nonzero keys whose home slot in @m is @slot. */
static void keys_at(const struct base_u64map *m, size_t slot, uint64_t *keys, size_t n,
                    uint64_t *next)
{
    for (size_t got = 0; got < n; (*next)++)
        if (home_of(m, *next) == slot)
            keys[got++] = *next;
}

START_TEST(a_zeroed_map_is_empty_and_usable)
{
    struct base_u64map m;
    memset(&m, 0, sizeof m);
    ck_assert_uint_eq(base_u64map_len(&m), 0);
    ck_assert_ptr_null(base_u64map_get(&m, 5));
    ck_assert_ptr_null(base_u64map_del(&m, 5));
    ck_assert_ptr_null(base_u64map_find(&m, 0));
    struct base_u64map_iter it;
    base_u64map_iter_init(&m, &it);
    ck_assert_ptr_null(base_u64map_iter_next(&m, &it));
    ck_assert_int_eq(base_u64map_put(&m, 5, OBJ(5)), 0);
    ck_assert_ptr_eq(base_u64map_get(&m, 5), OBJ(5));
    ck_assert_uint_eq(base_u64map_capacity(&m), 16);
    base_u64map_fini(&m);
    ck_assert_uint_eq(base_u64map_len(&m), 0);
    ck_assert_int_eq(base_u64map_put(&m, 6, OBJ(6)), 0); /* fini leaves it usable */
    base_u64map_fini(&m);
}
END_TEST

START_TEST(put_refuses_a_present_key_and_leaves_its_value)
{
    struct base_u64map m = {0};
    ck_assert_int_eq(base_u64map_put(&m, 77, OBJ(1)), 0);
    ck_assert_int_eq(base_u64map_put(&m, 77, OBJ(2)), -EEXIST);
    ck_assert_ptr_eq(base_u64map_get(&m, 77), OBJ(1));
    ck_assert_uint_eq(base_u64map_len(&m), 1);
    /* find lets a caller replace a value in place. */
    base_u64map_find(&m, 77)->ptr = OBJ(3);
    ck_assert_ptr_eq(base_u64map_del(&m, 77), OBJ(3));
    ck_assert_ptr_null(base_u64map_del(&m, 77));
    base_u64map_fini(&m);
}
END_TEST

START_TEST(key_0_is_an_ordinary_key)
{
    struct base_u64map m = {0};
    ck_assert_ptr_null(base_u64map_get(&m, 0));
    ck_assert_int_eq(base_u64map_put(&m, 0, OBJ(0)), 0);
    ck_assert_int_eq(base_u64map_put(&m, 0, OBJ(1)), -EEXIST);
    ck_assert_int_eq(base_u64map_put(&m, 1, OBJ(1)), 0);
    ck_assert_uint_eq(base_u64map_len(&m), 2);
    ck_assert_ptr_eq(base_u64map_get(&m, 0), OBJ(0));
    int seen0 = 0, seen = 0;
    struct base_u64map_iter it;
    base_u64map_iter_init(&m, &it);
    for (struct base_u64map_entry *e; (e = base_u64map_iter_next(&m, &it)); seen++)
        seen0 += e->key == 0;
    ck_assert_int_eq(seen, 2);
    ck_assert_int_eq(seen0, 1);
    ck_assert_ptr_eq(base_u64map_del(&m, 0), OBJ(0));
    ck_assert_uint_eq(base_u64map_len(&m), 1);
    ck_assert_ptr_null(base_u64map_get(&m, 0));
    base_u64map_fini(&m);
}
END_TEST

START_TEST(u64_values_round_trip_including_0_and_the_maximum)
{
    struct base_u64map m = {0};
    ck_assert_int_eq(base_u64map_put_u64(&m, 1, 0), 0);
    ck_assert_int_eq(base_u64map_put_u64(&m, 2, UINT64_MAX), 0);
    ck_assert_int_eq(base_u64map_put_u64(&m, UINT64_MAX, 42), 0);
    uint64_t v = 9;
    ck_assert(base_u64map_get_u64(&m, 1, &v));
    ck_assert_uint_eq(v, 0);
    ck_assert(base_u64map_get_u64(&m, 2, &v));
    ck_assert_uint_eq(v, UINT64_MAX);
    ck_assert(base_u64map_get_u64(&m, UINT64_MAX, &v));
    ck_assert_uint_eq(v, 42);
    v = 9;
    ck_assert(!base_u64map_get_u64(&m, 3, &v));
    ck_assert_uint_eq(v, 9); /* untouched when absent */
    ck_assert(base_u64map_del_u64(&m, 2, &v));
    ck_assert_uint_eq(v, UINT64_MAX);
    ck_assert(base_u64map_del_u64(&m, 1, NULL));
    ck_assert(!base_u64map_del_u64(&m, 1, &v));
    ck_assert_int_eq(base_u64map_put_u64(&m, UINT64_MAX, 1), -EEXIST);
    base_u64map_fini(&m);
}
END_TEST

/* Every key of @keys[0..n) present except those with gone[i]. */
static void expect_keys(const struct base_u64map *m, const uint64_t *keys, const bool *gone,
                        size_t n)
{
    size_t live = 0;
    for (size_t i = 0; i < n; i++) {
        void *v = base_u64map_get(m, keys[i]);
        ck_assert_ptr_eq(v, gone[i] ? NULL : OBJ(i));
        live += !gone[i];
    }
    ck_assert_uint_eq(base_u64map_len(m), live);
}

START_TEST(colliding_keys_survive_deletes_in_any_order_across_the_tables_end)
{
    uint64_t rng = 11;
    for (int round = 0; round < 200; round++) {
        struct base_u64map m;
        ck_assert_int_eq(base_u64map_init(&m, 12, 80), 0);
        ck_assert_uint_eq(base_u64map_capacity(&m), 16);
        /* Runs that start near the end wrap to slot 0 and meet a run there. */
        uint64_t keys[12], next = 1;
        keys_at(&m, 14, keys, 5, &next);
        keys_at(&m, 15, keys + 5, 3, &next);
        keys_at(&m, 0, keys + 8, 2, &next);
        keys_at(&m, 1, keys + 10, 2, &next);
        bool gone[12] = {0};
        for (size_t i = 0; i < 12; i++)
            ck_assert_int_eq(base_u64map_put(&m, keys[i], OBJ(i)), 0);
        ck_assert_uint_eq(base_u64map_capacity(&m), 16); /* no growth hid a collision */
        expect_keys(&m, keys, gone, 12);
        for (size_t left = 12; left > 0; left--) {
            size_t i;
            do
                i = (size_t)(base_splitmix64(&rng) % 12);
            while (gone[i]);
            ck_assert_ptr_eq(base_u64map_del(&m, keys[i]), OBJ(i));
            gone[i] = true;
            expect_keys(&m, keys, gone, 12);
        }
        base_u64map_fini(&m);
    }
}
END_TEST

START_TEST(growth_keeps_the_load_and_reserve_prevents_it)
{
    struct base_u64map m;
    ck_assert_int_eq(base_u64map_init(&m, 0, 50), 0);
    ck_assert_uint_eq(base_u64map_capacity(&m), 0);
    for (uint64_t k = 1; k <= 1000; k++) {
        ck_assert_int_eq(base_u64map_put_u64(&m, k * 4096, k), 0);
        ck_assert_uint_le(base_u64map_len(&m) * 2, base_u64map_capacity(&m));
    }
    for (uint64_t k = 1; k <= 1000; k++) {
        uint64_t v = 0;
        ck_assert(base_u64map_get_u64(&m, k * 4096, &v));
        ck_assert_uint_eq(v, k);
    }
    base_u64map_fini(&m);

    ck_assert_int_eq(base_u64map_init(&m, 1000, 0), 0);
    size_t cap = base_u64map_capacity(&m);
    ck_assert_uint_ge(cap * 3, 1000 * 4);
    for (uint64_t k = 0; k < 1000; k++)
        ck_assert_int_eq(base_u64map_put(&m, k, OBJ(k)), 0);
    ck_assert_uint_eq(base_u64map_capacity(&m), cap);
    ck_assert_int_eq(base_u64map_reserve(&m, 10), 0); /* never shrinks */
    ck_assert_uint_eq(base_u64map_capacity(&m), cap);
    ck_assert_int_eq(base_u64map_reserve(&m, SIZE_MAX), -EOVERFLOW);
    base_u64map_fini(&m);
}
END_TEST

START_TEST(init_refuses_a_load_out_of_range)
{
    struct base_u64map m;
    ck_assert_int_eq(base_u64map_init(&m, 0, 9), -EINVAL);
    ck_assert_int_eq(base_u64map_init(&m, 0, 91), -EINVAL);
    ck_assert_int_eq(base_u64map_init(&m, 0, 10), 0);
    base_u64map_fini(&m);
    ck_assert_int_eq(base_u64map_init(&m, 0, 90), 0);
    base_u64map_fini(&m);
}
END_TEST

START_TEST(clear_empties_the_map_and_keeps_its_table)
{
    struct base_u64map m = {0};
    for (uint64_t k = 0; k < 100; k++)
        ck_assert_int_eq(base_u64map_put(&m, k, OBJ(k)), 0);
    size_t cap = base_u64map_capacity(&m);
    base_u64map_clear(&m);
    ck_assert_uint_eq(base_u64map_len(&m), 0);
    ck_assert_uint_eq(base_u64map_capacity(&m), cap);
    for (uint64_t k = 0; k < 100; k++)
        ck_assert_ptr_null(base_u64map_get(&m, k));
    struct base_u64map_iter it;
    base_u64map_iter_init(&m, &it);
    ck_assert_ptr_null(base_u64map_iter_next(&m, &it));
    ck_assert_int_eq(base_u64map_put(&m, 0, OBJ(0)), 0);
    base_u64map_fini(&m);
}
END_TEST

START_TEST(a_map_moves_by_copying_its_struct)
{
    struct base_u64map a = {0};
    for (uint64_t k = 1; k <= 50; k++)
        ck_assert_int_eq(base_u64map_put(&a, k, OBJ(k)), 0);
    struct base_u64map b = a;
    memset(&a, 0, sizeof a); /* the client's fail_all detaches its maps this way */
    ck_assert_uint_eq(base_u64map_len(&a), 0);
    for (uint64_t k = 1; k <= 50; k++)
        ck_assert_ptr_eq(base_u64map_get(&b, k), OBJ(k));
    base_u64map_fini(&b);
}
END_TEST

/* ---- randomized runs against a direct-indexed model ---- */

#define KEYS 1024 /* keys are drawn from [0, KEYS) * stride: plenty of repeats */

struct model {
    bool in[KEYS];
    uint64_t val[KEYS];
    size_t len;
};

static void model_walk_check(const struct base_u64map *m, const struct model *ref, uint64_t stride)
{
    static unsigned char seen[KEYS];
    memset(seen, 0, sizeof seen);
    size_t n = 0;
    struct base_u64map_iter it;
    base_u64map_iter_init(m, &it);
    for (struct base_u64map_entry *e; (e = base_u64map_iter_next(m, &it)); n++) {
        ck_assert_uint_eq(e->key % stride, 0);
        uint64_t k = e->key / stride;
        ck_assert_uint_lt(k, KEYS);
        ck_assert(ref->in[k]);
        ck_assert_uint_eq(e->u64, ref->val[k]);
        ck_assert_uint_eq(seen[k], 0);
        seen[k] = 1;
    }
    ck_assert_uint_eq(n, ref->len);
}

static void randomized(unsigned load, uint64_t stride, uint64_t seed)
{
    struct base_u64map m;
    ck_assert_int_eq(base_u64map_init(&m, 0, load), 0);
    struct model *ref = calloc(1, sizeof(*ref));
    ck_assert_ptr_nonnull(ref);
    uint64_t rng = seed;
    for (int step = 0; step < 60000; step++) {
        uint64_t r = base_splitmix64(&rng);
        uint64_t k = r % KEYS;
        uint64_t key = k * stride;
        switch ((r >> 20) % 4) {
        case 0:
        case 1: { /* put */
            int rc = base_u64map_put_u64(&m, key, r);
            if (ref->in[k]) {
                ck_assert_int_eq(rc, -EEXIST);
            } else {
                ck_assert_int_eq(rc, 0);
                ref->in[k] = true;
                ref->val[k] = r;
                ref->len++;
            }
            break;
        }
        case 2: { /* delete */
            uint64_t v = 0;
            bool had = base_u64map_del_u64(&m, key, &v);
            ck_assert_int_eq(had, ref->in[k]);
            if (had) {
                ck_assert_uint_eq(v, ref->val[k]);
                ref->in[k] = false;
                ref->len--;
            }
            break;
        }
        case 3: { /* get */
            uint64_t v = 0;
            ck_assert_int_eq(base_u64map_get_u64(&m, key, &v), ref->in[k]);
            if (ref->in[k])
                ck_assert_uint_eq(v, ref->val[k]);
            break;
        }
        }
        ck_assert_uint_eq(base_u64map_len(&m), ref->len);
        if (step % 1000 == 0)
            model_walk_check(&m, ref, stride);
    }
    model_walk_check(&m, ref, stride);
    base_u64map_fini(&m);
    free(ref);
}

START_TEST(randomized_runs_match_a_model_at_every_load)
{
    randomized(10, 1, 1);
    randomized(50, 1, 2);
    randomized(90, 1, 3);
    randomized(90, (uint64_t)1 << 32, 4); /* lease-id-shaped keys: generation << 32 */
    randomized(75, 4096, 5);
}
END_TEST

START_TEST(a_walk_that_deletes_returns_every_entry_exactly_once)
{
    uint64_t rng = 99;
    for (int round = 0; round < 300; round++) {
        struct base_u64map m;
        ck_assert_int_eq(base_u64map_init(&m, 0, 90), 0);
        struct model *ref = calloc(1, sizeof(*ref));
        ck_assert_ptr_nonnull(ref);
        size_t n = 1 + (size_t)(base_splitmix64(&rng) % 300);
        for (size_t i = 0; i < n; i++) {
            uint64_t k = base_splitmix64(&rng) % KEYS;
            if (!ref->in[k] && base_u64map_put_u64(&m, k, k + 1) == 0) {
                ref->in[k] = true;
                ref->val[k] = k + 1;
                ref->len++;
            }
        }
        /* Delete all, none, or a random share of what the walk meets. */
        unsigned share = (unsigned)(round % 3 == 0 ? 100 : round % 3 == 1 ? 0 : rng % 101);
        static unsigned char seen[KEYS], before[KEYS];
        memset(seen, 0, sizeof seen);
        for (size_t k = 0; k < KEYS; k++)
            before[k] = ref->in[k];
        size_t n_before = ref->len, met = 0;
        struct base_u64map_iter it;
        base_u64map_iter_init(&m, &it);
        for (struct base_u64map_entry *e; (e = base_u64map_iter_next(&m, &it)); met++) {
            ck_assert_uint_lt(e->key, KEYS);
            ck_assert_uint_eq(seen[e->key], 0);
            seen[e->key] = 1;
            ck_assert_uint_eq(e->u64, e->key + 1);
            if (base_splitmix64(&rng) % 100 < share) {
                ref->in[e->key] = false;
                ref->len--;
                base_u64map_iter_del(&m, &it);
                base_u64map_iter_del(&m, &it); /* a second call is a no-op */
            }
        }
        for (size_t k = 0; k < KEYS; k++)
            ck_assert_msg(seen[k] == before[k], "key %zu: in the map %d, met %d", k, before[k],
                          seen[k]);
        ck_assert_uint_eq(met, n_before);
        model_walk_check(&m, ref, 1);
        for (uint64_t k = 0; k < KEYS; k++)
            ck_assert_int_eq(base_u64map_find(&m, k) != NULL, ref->in[k]);
        base_u64map_fini(&m);
        free(ref);
    }
}
END_TEST

static Suite *u64map_suite(void)
{
    Suite *s = suite_create("base_u64map");
    TCase *tc = tcase_create("entries");
    tcase_add_test(tc, a_zeroed_map_is_empty_and_usable);
    tcase_add_test(tc, put_refuses_a_present_key_and_leaves_its_value);
    tcase_add_test(tc, key_0_is_an_ordinary_key);
    tcase_add_test(tc, u64_values_round_trip_including_0_and_the_maximum);
    tcase_add_test(tc, colliding_keys_survive_deletes_in_any_order_across_the_tables_end);
    suite_add_tcase(s, tc);

    tc = tcase_create("table");
    tcase_add_test(tc, growth_keeps_the_load_and_reserve_prevents_it);
    tcase_add_test(tc, init_refuses_a_load_out_of_range);
    tcase_add_test(tc, clear_empties_the_map_and_keeps_its_table);
    tcase_add_test(tc, a_map_moves_by_copying_its_struct);
    suite_add_tcase(s, tc);

    tc = tcase_create("randomized");
    tcase_add_test(tc, randomized_runs_match_a_model_at_every_load);
    tcase_add_test(tc, a_walk_that_deletes_returns_every_entry_exactly_once);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);
    return s;
}

BASE_CHECK_MAIN(u64map_suite)
