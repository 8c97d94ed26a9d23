/* The managed-id table behind streams and events (gpu/idtab.c): issue,
 * refusals (never issued, stale, foreign, malformed), the limit with its
 * numbers, holds that keep a retired object, and FIFO reuse; then a seeded
 * random run against a model. Driver-free: runs on every machine. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_internal.h"

static char captured[4096];

static void capture_sink(void *ctx, int level, const char *line)
{
    (void)ctx;
    size_t used = strlen(captured);
    snprintf(captured + used, sizeof(captured) - used, "[%d] %s\n", level, line);
}

static void log_capture(void)
{
    captured[0] = '\0';
    ga_log_set_sink(capture_sink, NULL);
}

static void log_restore(void)
{
    ga_log_set_sink(NULL, NULL);
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

/* Distinct fake objects to store in slots. */
static char objs[64];

START_TEST(issued_ids_start_at_generation_one_and_look_up_for_their_owner)
{
    struct ga__idtab t;
    ck_assert_int_eq(ga__idtab_init(&t, "stream", "max_streams", 8), 0);
    uint32_t slots[8], gens[8];
    for (int i = 0; i < 8; i++) {
        ck_assert_int_eq(ga__idtab_alloc(&t, 100 + i, &objs[i], (uint32_t)i, &slots[i], &gens[i]),
                         0);
        ck_assert_uint_ge(slots[i], 1);
        ck_assert_uint_le(slots[i], 8);
        ck_assert_uint_eq(gens[i], 1);
        for (int j = 0; j < i; j++)
            ck_assert_uint_ne(slots[i], slots[j]);
    }
    ck_assert_uint_eq(t.live, 8);
    for (int i = 0; i < 8; i++) {
        struct ga__slot *s = NULL;
        ck_assert_int_eq(ga__idtab_lookup(&t, 100 + i, slots[i], gens[i], &s), 0);
        ck_assert_ptr_eq(s->obj, &objs[i]);
        ck_assert_uint_eq(s->flags, (uint32_t)i);
    }
    ga__idtab_fini(&t);
}
END_TEST

START_TEST(table_full_is_emfile_with_both_numbers)
{
    struct ga__idtab t;
    ck_assert_int_eq(ga__idtab_init(&t, "stream", "max_streams", 4), 0);
    uint32_t slot, gen;
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(ga__idtab_alloc(&t, 7, &objs[i], 0, &slot, &gen), 0);
    log_capture();
    uint32_t keep_slot = 99, keep_gen = 99;
    ck_assert_int_eq(ga__idtab_alloc(&t, 7, &objs[5], 0, &keep_slot, &keep_gen), -EMFILE);
    log_restore();
    ck_assert_uint_eq(keep_slot, 99); /* outputs untouched on failure */
    ck_assert_uint_eq(keep_gen, 99);
    ck_assert_msg(strstr(captured, "stream table full: 4 of max_streams 4 in use"), "%s",
                  captured);
    /* One retired slot makes room again. */
    ck_assert_ptr_eq(ga__idtab_kill(&t, slot), &objs[3]);
    ck_assert_int_eq(ga__idtab_alloc(&t, 7, &objs[6], 0, &keep_slot, &keep_gen), 0);
    ck_assert_uint_eq(keep_slot, slot);
    ck_assert_uint_eq(keep_gen, gen + 1);
    ga__idtab_fini(&t);
}
END_TEST

START_TEST(malformed_unknown_stale_and_foreign_ids_are_refused_distinctly)
{
    struct ga__idtab t;
    ck_assert_int_eq(ga__idtab_init(&t, "event", "max_events", 16), 0);
    uint32_t slot, gen;
    ck_assert_int_eq(ga__idtab_alloc(&t, 0xc1, &objs[0], 0, &slot, &gen), 0);
    struct ga__slot *s = NULL;
    log_capture();
    ck_assert_int_eq(ga__idtab_lookup(&t, 0xc1, slot, 0, &s), -EINVAL);
    ck_assert_int_eq(ga__idtab_lookup(&t, 0xc1, 0, 1, &s), -EINVAL);
    ck_assert_int_eq(ga__idtab_lookup(&t, 0xc1, 17, 1, &s), -ENOENT);
    ck_assert_int_eq(ga__idtab_lookup(&t, 0xc1, UINT32_MAX, 1, &s), -ENOENT);
    uint32_t other = slot == 16 ? 15 : 16; /* FIFO: the first issue took slot 1 */
    ck_assert_int_eq(ga__idtab_lookup(&t, 0xc1, other, 1, &s), -ENOENT);
    ck_assert_msg(strstr(captured, "never issued"), "%s", captured);
    ck_assert_int_eq(ga__idtab_lookup(&t, 0xc2, slot, gen, &s), -EPERM);
    ck_assert_msg(strstr(captured, "belongs to client 0xc1, not to client 0xc2"), "%s", captured);
    ck_assert_int_eq(ga__idtab_lookup(&t, 0xc1, slot, gen + 1, &s), -ESTALE);
    ck_assert_ptr_null(s); /* no refusal wrote it */
    ck_assert_ptr_eq(ga__idtab_kill(&t, slot), &objs[0]);
    ck_assert_int_eq(ga__idtab_lookup(&t, 0xc1, slot, gen, &s), -ESTALE);
    ck_assert_msg(strstr(captured, "is stale"), "%s", captured);
    log_restore();
    ga__idtab_fini(&t);
}
END_TEST

START_TEST(held_slot_keeps_its_object_until_the_last_put)
{
    struct ga__idtab t;
    ck_assert_int_eq(ga__idtab_init(&t, "stream", "max_streams", 2), 0);
    uint32_t a, ga, b, gb;
    ck_assert_int_eq(ga__idtab_alloc(&t, 1, &objs[10], 0, &a, &ga), 0);
    ck_assert_int_eq(ga__idtab_alloc(&t, 1, &objs[11], 0, &b, &gb), 0);
    struct ga__slot *s = NULL;
    ck_assert_int_eq(ga__idtab_get(&t, 1, a, ga, &s), 0);
    ck_assert_int_eq(ga__idtab_get(&t, 1, a, ga, &s), 0);
    ck_assert_ptr_null(ga__idtab_kill(&t, a)); /* held twice: kept */
    ck_assert_uint_eq(t.live, 1);
    ck_assert_uint_eq(t.used, 2);
    log_capture();
    ck_assert_int_eq(ga__idtab_lookup(&t, 1, a, ga, &s), -ESTALE); /* retired at once */
    uint32_t c, gc;
    ck_assert_int_eq(ga__idtab_alloc(&t, 1, &objs[12], 0, &c, &gc), -EMFILE);
    ck_assert_msg(strstr(captured, "1 retired with work pending"), "%s", captured);
    log_restore();
    ck_assert_ptr_null(ga__idtab_put(&t, a));
    ck_assert_ptr_eq(ga__idtab_put(&t, a), &objs[10]); /* last hold: freed */
    ck_assert_uint_eq(t.used, 1);
    ck_assert_int_eq(ga__idtab_alloc(&t, 1, &objs[12], 0, &c, &gc), 0);
    ck_assert_uint_eq(c, a);
    ck_assert_uint_eq(gc, ga + 1);
    /* A put on a live slot only drops the hold. */
    ck_assert_int_eq(ga__idtab_get(&t, 1, b, gb, &s), 0);
    ck_assert_ptr_null(ga__idtab_put(&t, b));
    ck_assert_int_eq(ga__idtab_lookup(&t, 1, b, gb, &s), 0);
    log_capture();
    ck_assert_ptr_null(ga__idtab_put(&t, b)); /* never taken: refused, logged */
    ck_assert_msg(strstr(captured, "never taken"), "%s", captured);
    log_restore();
    ga__idtab_fini(&t);
}
END_TEST

START_TEST(freed_slots_are_reissued_in_fifo_order)
{
    struct ga__idtab t;
    ck_assert_int_eq(ga__idtab_init(&t, "stream", "max_streams", 5), 0);
    uint32_t slot[5], gen[5];
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(ga__idtab_alloc(&t, 1, &objs[i], 0, &slot[i], &gen[i]), 0);
    ga__idtab_kill(&t, slot[3]);
    ga__idtab_kill(&t, slot[1]);
    ga__idtab_kill(&t, slot[4]);
    uint32_t s, g;
    ck_assert_int_eq(ga__idtab_alloc(&t, 1, &objs[5], 0, &s, &g), 0);
    ck_assert_uint_eq(s, slot[3]);
    ck_assert_int_eq(ga__idtab_alloc(&t, 1, &objs[6], 0, &s, &g), 0);
    ck_assert_uint_eq(s, slot[1]);
    ck_assert_int_eq(ga__idtab_alloc(&t, 1, &objs[7], 0, &s, &g), 0);
    ck_assert_uint_eq(s, slot[4]);
    ga__idtab_fini(&t);
}
END_TEST

START_TEST(generation_wraps_past_zero)
{
    struct ga__idtab t;
    ck_assert_int_eq(ga__idtab_init(&t, "stream", "max_streams", 1), 0);
    uint32_t s, g;
    ck_assert_int_eq(ga__idtab_alloc(&t, 1, &objs[0], 0, &s, &g), 0);
    t.slots[s].gen = UINT32_MAX; /* as if issued 2^32 - 1 times */
    ga__idtab_kill(&t, s);
    ck_assert_int_eq(ga__idtab_alloc(&t, 1, &objs[0], 0, &s, &g), 0);
    ck_assert_uint_eq(g, 1);
    ga__idtab_fini(&t);
}
END_TEST

/* The model: per slot, the generation issued and the owner, or none. */
struct model_id {
    uint32_t slot, gen;
    uint64_t owner;
    int live;
};

START_TEST(random_operations_agree_with_a_model)
{
    enum { CAP = 37, IDS = 4000, STEPS = 200000 };
    struct ga__idtab t;
    ck_assert_int_eq(ga__idtab_init(&t, "stream", "max_streams", CAP), 0);
    struct model_id *ids = calloc(IDS, sizeof(*ids));
    ck_assert_ptr_nonnull(ids);
    size_t n = 0;
    uint32_t live = 0;
    uint64_t rng = 0x1d7ab5eedULL;
    log_capture(); /* refusals are expected; keep stderr quiet */
    for (int step = 0; step < STEPS; step++) {
        uint64_t r = rng_next(&rng);
        int op = (int)(r % 3);
        if (op == 0 && n < IDS) { /* issue */
            uint32_t s, g;
            uint64_t owner = 1 + (r >> 8) % 4;
            int rc = ga__idtab_alloc(&t, owner, &objs[(r >> 16) % 64], 0, &s, &g);
            if (live == CAP) {
                ck_assert_int_eq(rc, -EMFILE);
            } else {
                ck_assert_int_eq(rc, 0);
                ids[n++] = (struct model_id){s, g, owner, 1};
                live++;
            }
        } else if (op == 1 && n) { /* look up any id ever issued, as any owner */
            struct model_id *m = &ids[(r >> 8) % n];
            uint64_t as = 1 + (r >> 40) % 4;
            struct ga__slot *sl = NULL;
            int rc = ga__idtab_lookup(&t, as, m->slot, m->gen, &sl);
            int want = !m->live ? -ESTALE : as != m->owner ? -EPERM : 0;
            ck_assert_int_eq(rc, want);
        } else if (op == 2 && n) { /* retire a live id */
            struct model_id *m = &ids[(r >> 8) % n];
            if (m->live) {
                ck_assert_ptr_nonnull(ga__idtab_kill(&t, m->slot));
                m->live = 0;
                live--;
            }
        }
        if (captured[0] && strlen(captured) > sizeof(captured) / 2)
            captured[0] = '\0';
        ck_assert_uint_eq(t.live, live);
        ck_assert_uint_eq(t.used, live);
    }
    log_restore();
    ck_assert_uint_gt(n, 1000); /* the run did exercise reuse */
    free(ids);
    ga__idtab_fini(&t);
}
END_TEST

START_TEST(bad_table_sizes_are_refused)
{
    struct ga__idtab t;
    log_capture();
    ck_assert_int_eq(ga__idtab_init(&t, "stream", "max_streams", 0), -EINVAL);
    ck_assert_int_eq(ga__idtab_init(&t, "stream", "max_streams", GA_STREAMS_LIMIT + 1), -EINVAL);
    log_restore();
    ck_assert_msg(strstr(captured, "expected 1..1048576 slots, found 1048577"), "%s", captured);
}
END_TEST

static Suite *idtab_suite(void)
{
    Suite *s = suite_create("ga_idtab");
    TCase *tc = tcase_create("ids");
    tcase_add_test(tc, issued_ids_start_at_generation_one_and_look_up_for_their_owner);
    tcase_add_test(tc, table_full_is_emfile_with_both_numbers);
    tcase_add_test(tc, malformed_unknown_stale_and_foreign_ids_are_refused_distinctly);
    tcase_add_test(tc, held_slot_keeps_its_object_until_the_last_put);
    tcase_add_test(tc, freed_slots_are_reissued_in_fifo_order);
    tcase_add_test(tc, generation_wraps_past_zero);
    tcase_add_test(tc, random_operations_agree_with_a_model);
    tcase_add_test(tc, bad_table_sizes_are_refused);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(idtab_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
