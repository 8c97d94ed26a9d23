/* base/idtab: generations, the lookup's six answers, LIFO and FIFO reuse,
 * limits, slot 0, the last generation, holds, walks, and a randomized run
 * against a model. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/idtab.h"
#include "base/rand.h"
#include "check_main.h"

static int objs[4096]; /* distinct non-NULL pointers to store */
#define OBJ(i) ((void *)&objs[(i)])

static struct base_idtab make(enum base_idtab_reuse reuse, uint32_t max, uint32_t initial,
                              bool reserve0, bool wrap)
{
    struct base_idtab t;
    struct base_idtab_config c = {
        .reuse = reuse,
        .max_slots = max,
        .initial_slots = initial,
        .reserve_slot0 = reserve0,
        .gen_wrap = wrap,
    };
    ck_assert_int_eq(base_idtab_init(&t, &c), 0);
    return t;
}

static uint64_t insert(struct base_idtab *t, void *obj, uint64_t owner)
{
    uint64_t id = 0;
    ck_assert_int_eq(base_idtab_insert(t, obj, owner, &id), 0);
    return id;
}

static enum base_idtab_state state_of(const struct base_idtab *t, uint64_t id)
{
    struct base_idtab_slot *s = NULL;
    return base_idtab_lookup(t, id, &s);
}

START_TEST(first_ids_are_generation_1_of_slots_in_order)
{
    struct base_idtab t;
    ck_assert_int_eq(base_idtab_init(&t, NULL), 0);
    for (uint32_t i = 0; i < 3; i++) {
        uint64_t id = insert(&t, OBJ(i), 7);
        ck_assert_uint_eq(base_idtab_id_slot(id), i);
        ck_assert_uint_eq(base_idtab_id_gen(id), 1);
        ck_assert_uint_eq(id, (uint64_t)1 << 32 | i); /* lt_*_id_to_u64's layout */
        ck_assert_ptr_eq(base_idtab_get(&t, id), OBJ(i));
    }
    ck_assert_uint_eq(base_idtab_live(&t), 3);
    ck_assert_uint_eq(base_idtab_max(&t), BASE_IDTAB_SLOTS_MAX);
    base_idtab_fini(&t);
}
END_TEST

START_TEST(a_retired_id_reads_retired_then_stale_once_its_slot_is_reissued)
{
    struct base_idtab t = make(BASE_IDTAB_REUSE_LIFO, 0, 0, false, false);
    uint64_t a = insert(&t, OBJ(1), 7);
    ck_assert_ptr_eq(base_idtab_retire(&t, a), OBJ(1));
    struct base_idtab_slot *s = NULL;
    ck_assert_int_eq(base_idtab_lookup(&t, a, &s), BASE_IDTAB_RETIRED);
    ck_assert_ptr_null(s->obj);
    ck_assert_uint_eq(s->owner, 7); /* kept for foreign-id checks */
    ck_assert_ptr_null(base_idtab_get(&t, a));
    ck_assert_ptr_null(base_idtab_retire(&t, a)); /* twice: not live */

    uint64_t b = insert(&t, OBJ(2), 8);
    ck_assert_uint_eq(base_idtab_id_slot(b), base_idtab_id_slot(a));
    ck_assert_uint_eq(base_idtab_id_gen(b), 2);
    s = NULL;
    ck_assert_int_eq(base_idtab_lookup(&t, a, &s), BASE_IDTAB_STALE);
    ck_assert_uint_eq(s->gen, 2); /* a caller can say "slot now at generation 2" */
    ck_assert_int_eq(state_of(&t, b), BASE_IDTAB_LIVE);
    ck_assert_ptr_eq(base_idtab_get(&t, b), OBJ(2));
    ck_assert_uint_eq(base_idtab_live(&t), 1);
    base_idtab_fini(&t);
}
END_TEST

START_TEST(ids_never_issued_and_malformed_ids_are_told_apart)
{
    struct base_idtab t = make(BASE_IDTAB_REUSE_LIFO, 0, 0, true, false);
    struct base_idtab_slot *s = NULL;
    /* An empty table issued nothing. */
    ck_assert_int_eq(base_idtab_lookup(&t, base_idtab_id(1, 1), &s), BASE_IDTAB_NEVER);
    uint64_t a = insert(&t, OBJ(1), 1);
    ck_assert_uint_eq(base_idtab_id_slot(a), 1);
    ck_assert_int_eq(state_of(&t, base_idtab_id(1, 2)), BASE_IDTAB_NEVER); /* future gen */
    ck_assert_int_eq(state_of(&t, base_idtab_id(2, 1)), BASE_IDTAB_NEVER); /* allocated, unissued */
    ck_assert_int_eq(state_of(&t, base_idtab_id(99999, 1)), BASE_IDTAB_NEVER); /* beyond */
    ck_assert_int_eq(state_of(&t, base_idtab_id(1, 0)), BASE_IDTAB_MALFORMED);
    ck_assert_int_eq(state_of(&t, base_idtab_id(0, 1)), BASE_IDTAB_MALFORMED); /* reserved */
    ck_assert_int_eq(state_of(&t, 0), BASE_IDTAB_MALFORMED);
    ck_assert_ptr_null(s); /* untouched for NEVER and MALFORMED */
    base_idtab_fini(&t);

    /* Without the reservation slot 0 is a slot like any other. */
    t = make(BASE_IDTAB_REUSE_LIFO, 0, 0, false, false);
    ck_assert_int_eq(state_of(&t, base_idtab_id(0, 1)), BASE_IDTAB_NEVER);
    a = insert(&t, OBJ(1), 1);
    ck_assert_uint_eq(base_idtab_id_slot(a), 0);
    ck_assert_int_eq(state_of(&t, a), BASE_IDTAB_LIVE);
    ck_assert_int_eq(state_of(&t, base_idtab_id(0, 0)), BASE_IDTAB_MALFORMED);
    base_idtab_fini(&t);
}
END_TEST

START_TEST(another_owners_live_or_retired_id_is_foreign_and_a_stale_one_stale)
{
    struct base_idtab t = make(BASE_IDTAB_REUSE_LIFO, 0, 0, false, false);
    uint64_t a = insert(&t, OBJ(1), 100);
    struct base_idtab_slot *s = NULL;
    ck_assert_int_eq(base_idtab_lookup_owned(&t, a, 100, &s), BASE_IDTAB_LIVE);
    s = NULL;
    ck_assert_int_eq(base_idtab_lookup_owned(&t, a, 200, &s), BASE_IDTAB_FOREIGN);
    ck_assert_uint_eq(s->owner, 100);
    ck_assert(base_idtab_slot_is_live(s));

    base_idtab_retire(&t, a);
    ck_assert_int_eq(base_idtab_lookup_owned(&t, a, 100, &s), BASE_IDTAB_RETIRED);
    ck_assert_int_eq(base_idtab_lookup_owned(&t, a, 200, &s), BASE_IDTAB_FOREIGN);
    ck_assert(!base_idtab_slot_is_live(s)); /* a caller may still call it retired */

    insert(&t, OBJ(2), 200); /* the slot goes to the other owner */
    ck_assert_int_eq(base_idtab_lookup_owned(&t, a, 100, &s), BASE_IDTAB_STALE);
    ck_assert_int_eq(base_idtab_lookup_owned(&t, a, 200, &s), BASE_IDTAB_STALE);
    s = NULL;
    ck_assert_int_eq(base_idtab_lookup_owned(&t, base_idtab_id(5, 1), 100, &s), BASE_IDTAB_NEVER);
    ck_assert_ptr_null(s);
    base_idtab_fini(&t);
}
END_TEST

START_TEST(lifo_issues_the_slot_freed_last_first)
{
    struct base_idtab t = make(BASE_IDTAB_REUSE_LIFO, 0, 0, false, false);
    uint64_t id[4];
    for (int i = 0; i < 4; i++)
        id[i] = insert(&t, OBJ(i), 0);
    base_idtab_retire(&t, id[0]);
    base_idtab_retire(&t, id[2]);
    ck_assert_uint_eq(base_idtab_id_slot(insert(&t, OBJ(5), 0)), 2);
    ck_assert_uint_eq(base_idtab_id_slot(insert(&t, OBJ(6), 0)), 0);
    ck_assert_uint_eq(base_idtab_id_slot(insert(&t, OBJ(7), 0)), 4); /* then fresh ones */
    base_idtab_fini(&t);
}
END_TEST

START_TEST(fifo_issues_every_other_free_slot_before_a_freed_one_again)
{
    /* gpu/idtab's shape: a fixed table of 4, slot 0 reserved. */
    struct base_idtab t = make(BASE_IDTAB_REUSE_FIFO, 4, 4, true, true);
    uint64_t id[4];
    for (uint32_t i = 0; i < 4; i++) {
        id[i] = insert(&t, OBJ(i), 0);
        ck_assert_uint_eq(base_idtab_id_slot(id[i]), i + 1);
    }
    ck_assert(base_idtab_full(&t));
    uint64_t extra;
    ck_assert_int_eq(base_idtab_insert(&t, OBJ(9), 0, &extra), -ENOSPC);
    base_idtab_retire(&t, id[1]); /* slot 2 */
    base_idtab_retire(&t, id[0]); /* slot 1 */
    base_idtab_retire(&t, id[3]); /* slot 4 */
    ck_assert(!base_idtab_full(&t));
    ck_assert_uint_eq(base_idtab_id_slot(insert(&t, OBJ(5), 0)), 2);
    ck_assert_uint_eq(base_idtab_id_slot(insert(&t, OBJ(6), 0)), 1);
    uint64_t last = insert(&t, OBJ(7), 0);
    ck_assert_uint_eq(base_idtab_id_slot(last), 4);
    ck_assert_uint_eq(base_idtab_id_gen(last), 2);
    base_idtab_fini(&t);

    /* Growing: a freed slot waits behind every allocated fresh one. */
    t = make(BASE_IDTAB_REUSE_FIFO, 0, 0, false, false);
    uint64_t first = insert(&t, OBJ(0), 0);
    base_idtab_retire(&t, first);
    for (uint32_t i = 1; i < 64; i++)
        ck_assert_uint_eq(base_idtab_id_slot(insert(&t, OBJ(i), 0)), i);
    ck_assert_uint_eq(base_idtab_id_slot(insert(&t, OBJ(64), 0)), 0); /* before growing */
    ck_assert_uint_eq(base_idtab_id_slot(insert(&t, OBJ(65), 0)), 64);
    base_idtab_fini(&t);
}
END_TEST

START_TEST(growth_stops_at_max_slots_with_enospc)
{
    struct base_idtab t = make(BASE_IDTAB_REUSE_LIFO, 100, 0, false, false);
    uint64_t id[100], extra;
    for (int i = 0; i < 100; i++)
        id[i] = insert(&t, OBJ(i), 0);
    ck_assert(base_idtab_full(&t));
    ck_assert_int_eq(base_idtab_insert(&t, OBJ(100), 0, &extra), -ENOSPC);
    ck_assert_uint_eq(base_idtab_live(&t), 100);
    base_idtab_retire(&t, id[50]);
    ck_assert(!base_idtab_full(&t));
    ck_assert_uint_eq(base_idtab_id_slot(insert(&t, OBJ(100), 0)), 50);
    base_idtab_fini(&t);

    /* With slot 0 reserved, max_slots still counts issuable slots. */
    t = make(BASE_IDTAB_REUSE_LIFO, 3, 0, true, false);
    for (uint32_t i = 1; i <= 3; i++)
        ck_assert_uint_eq(base_idtab_id_slot(insert(&t, OBJ(i), 0)), i);
    ck_assert_int_eq(base_idtab_insert(&t, OBJ(9), 0, &extra), -ENOSPC);
    base_idtab_fini(&t);
}
END_TEST

START_TEST(a_reserved_slot_0_is_never_issued)
{
    struct base_idtab t = make(BASE_IDTAB_REUSE_LIFO, 0, 0, true, false);
    uint64_t id[200];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 200; i++) {
            id[i] = insert(&t, OBJ(i), 0);
            ck_assert_uint_ne(base_idtab_id_slot(id[i]), 0);
            ck_assert_uint_ne(id[i], 0);
        }
        for (int i = 0; i < 200; i++)
            base_idtab_retire(&t, id[i]);
    }
    base_idtab_fini(&t);
}
END_TEST

/* Jumps a free slot to generation @gen: 2^32 issues would take too long. */
static void jump_gen(struct base_idtab *t, uint64_t retired_id, uint32_t gen)
{
    struct base_idtab_slot *s = NULL;
    ck_assert_int_eq(base_idtab_lookup(t, retired_id, &s), BASE_IDTAB_RETIRED);
    s->gen = gen;
}

START_TEST(a_slot_at_its_last_generation_is_retired_for_good)
{
    struct base_idtab t = make(BASE_IDTAB_REUSE_LIFO, 2, 0, false, false);
    uint64_t a = insert(&t, OBJ(1), 0);
    base_idtab_retire(&t, a);
    jump_gen(&t, a, UINT32_MAX - 1);
    uint64_t last = insert(&t, OBJ(2), 0);
    ck_assert_uint_eq(base_idtab_id_slot(last), 0);
    ck_assert_uint_eq(base_idtab_id_gen(last), UINT32_MAX);
    ck_assert_ptr_eq(base_idtab_retire(&t, last), OBJ(2));
    /* Slot 0 never comes back: the next id is slot 1, then the table is full. */
    ck_assert_uint_eq(base_idtab_id_slot(insert(&t, OBJ(3), 0)), 1);
    uint64_t extra;
    ck_assert_int_eq(base_idtab_insert(&t, OBJ(4), 0, &extra), -ENOSPC);
    ck_assert(base_idtab_full(&t));
    ck_assert_int_eq(state_of(&t, last), BASE_IDTAB_RETIRED);
    ck_assert_int_eq(state_of(&t, base_idtab_id(0, 5)), BASE_IDTAB_STALE);
    base_idtab_fini(&t);
}
END_TEST

START_TEST(gen_wrap_goes_on_at_generation_1_and_reads_older_ids_as_stale)
{
    struct base_idtab t = make(BASE_IDTAB_REUSE_LIFO, 1, 0, true, true);
    uint64_t a = insert(&t, OBJ(1), 0);
    base_idtab_retire(&t, a);
    jump_gen(&t, a, UINT32_MAX - 1);
    uint64_t last = insert(&t, OBJ(2), 0);
    ck_assert_uint_eq(base_idtab_id_gen(last), UINT32_MAX);
    base_idtab_retire(&t, last);
    uint64_t wrapped = insert(&t, OBJ(3), 0);
    ck_assert_uint_eq(base_idtab_id_slot(wrapped), base_idtab_id_slot(last));
    ck_assert_uint_eq(base_idtab_id_gen(wrapped), 1); /* never 0 (lt_gen_next) */
    ck_assert_int_eq(state_of(&t, last), BASE_IDTAB_STALE);
    ck_assert_int_eq(state_of(&t, base_idtab_id(1, 7)), BASE_IDTAB_STALE);
    ck_assert_int_eq(state_of(&t, wrapped), BASE_IDTAB_LIVE);
    base_idtab_fini(&t);
}
END_TEST

START_TEST(holds_keep_a_retired_slot_and_its_object_until_the_last_put)
{
    struct base_idtab t = make(BASE_IDTAB_REUSE_LIFO, 1, 0, false, false);
    uint64_t a = insert(&t, OBJ(1), 10);
    struct base_idtab_slot *s = NULL;
    ck_assert_int_eq(base_idtab_hold(&t, a, 10, &s), BASE_IDTAB_LIVE);
    ck_assert_int_eq(base_idtab_hold(&t, a, 10, &s), BASE_IDTAB_LIVE);
    ck_assert_uint_eq(s->holds, 2);
    ck_assert_int_eq(base_idtab_hold(&t, a, 11, &s), BASE_IDTAB_FOREIGN);
    ck_assert_uint_eq(s->holds, 2); /* no hold for another owner */

    ck_assert_ptr_null(base_idtab_retire(&t, a)); /* held: kept */
    ck_assert_int_eq(state_of(&t, a), BASE_IDTAB_RETIRED);
    ck_assert_ptr_eq(s->obj, OBJ(1));
    ck_assert_uint_eq(base_idtab_live(&t), 0);
    ck_assert_uint_eq(base_idtab_used(&t), 1);
    ck_assert(base_idtab_full(&t));
    uint64_t extra;
    ck_assert_int_eq(base_idtab_insert(&t, OBJ(2), 10, &extra), -ENOSPC);
    ck_assert_int_eq(base_idtab_hold(&t, a, 10, &s), BASE_IDTAB_RETIRED); /* no new holds */

    ck_assert_ptr_null(base_idtab_put(&t, a));
    ck_assert_ptr_eq(base_idtab_put(&t, a), OBJ(1)); /* the last one frees it */
    ck_assert_uint_eq(base_idtab_used(&t), 0);
    ck_assert_ptr_null(base_idtab_put(&t, a)); /* no hold left: ignored */
    uint64_t b = insert(&t, OBJ(2), 10);
    ck_assert_ptr_null(base_idtab_put(&t, a)); /* an older generation's put: ignored */
    ck_assert_int_eq(state_of(&t, b), BASE_IDTAB_LIVE);

    /* A hold on a live id just comes back off. */
    ck_assert_int_eq(base_idtab_hold(&t, b, 10, &s), BASE_IDTAB_LIVE);
    ck_assert_ptr_null(base_idtab_put(&t, b));
    ck_assert_uint_eq(s->holds, 0);
    ck_assert_ptr_eq(base_idtab_retire(&t, b), OBJ(2)); /* unheld: freed at once */
    base_idtab_fini(&t);
}
END_TEST

START_TEST(a_walk_visits_live_slots_in_order_and_survives_retiring)
{
    struct base_idtab t = make(BASE_IDTAB_REUSE_LIFO, 0, 0, true, false);
    uint64_t id[10];
    for (int i = 0; i < 10; i++)
        id[i] = insert(&t, OBJ(i), (uint64_t)i % 2);
    for (int i = 0; i < 10; i += 2)
        base_idtab_retire(&t, id[i]);
    uint32_t cursor = 0;
    uint64_t got;
    int seen = 0;
    for (struct base_idtab_slot *s; (s = base_idtab_next(&t, &cursor, &got));) {
        int i = 1 + 2 * seen;
        ck_assert_uint_eq(got, id[i]);
        ck_assert_ptr_eq(s->obj, OBJ(i));
        ck_assert_uint_eq(s->owner, 1);
        seen++;
    }
    ck_assert_int_eq(seen, 5);
    /* Retiring each one as it comes, as an owner's drop does. */
    cursor = 0;
    seen = 0;
    for (struct base_idtab_slot *s; (s = base_idtab_next(&t, &cursor, &got));) {
        ck_assert_ptr_eq(s->obj, OBJ(1 + 2 * seen));
        ck_assert_ptr_eq(base_idtab_retire(&t, got), OBJ(1 + 2 * seen));
        seen++;
    }
    ck_assert_int_eq(seen, 5);
    ck_assert_uint_eq(base_idtab_live(&t), 0);
    cursor = 0;
    ck_assert_ptr_null(base_idtab_next(&t, &cursor, NULL));
    base_idtab_fini(&t);
}
END_TEST

START_TEST(init_and_insert_refuse_bad_arguments)
{
    struct base_idtab t;
    struct base_idtab_config c = {.max_slots = 4, .initial_slots = 5};
    ck_assert_int_eq(base_idtab_init(&t, &c), -EINVAL);
    c = (struct base_idtab_config){.max_slots = BASE_IDTAB_SLOTS_MAX + 1u};
    ck_assert_int_eq(base_idtab_init(&t, &c), -EINVAL);
    c = (struct base_idtab_config){.reuse = (enum base_idtab_reuse)7};
    ck_assert_int_eq(base_idtab_init(&t, &c), -EINVAL);
    ck_assert_int_eq(base_idtab_init(&t, NULL), 0);
    uint64_t id = 42;
    ck_assert_int_eq(base_idtab_insert(&t, NULL, 0, &id), -EINVAL);
    ck_assert_uint_eq(id, 42);
    base_idtab_fini(&t);
    base_idtab_fini(&t); /* twice is harmless */
    struct base_idtab zero;
    memset(&zero, 0, sizeof zero);
    base_idtab_fini(&zero);
    ck_assert_str_eq(base_idtab_state_name(BASE_IDTAB_NEVER), "never issued");
    ck_assert_str_eq(base_idtab_state_name(BASE_IDTAB_FOREIGN), "foreign");
    ck_assert_str_eq(base_idtab_state_name((enum base_idtab_state)99), "?");
}
END_TEST

/* ---- a randomized run against a model ---- */

#define MODEL_SLOTS 48

struct model {
    bool reserve0, fifo;
    uint32_t gen[MODEL_SLOTS + 1];
    bool live[MODEL_SLOTS + 1];
    uint64_t owner[MODEL_SLOTS + 1];
    void *obj[MODEL_SLOTS + 1];
    uint32_t queue[4 * MODEL_SLOTS]; /* free slots, next issued first */
    uint32_t qlen;
    uint32_t n; /* slots allocated */
};

/* The model's checks assert only when they fail: a passing Check assertion
 * costs a write(2), and the randomized runs make hundreds of thousands (a
 * timeout on a loaded machine). Each argument is evaluated once or, on a
 * failure, again by the assertion that reports it: pass side-effect-free
 * expressions. */
#define QUIET_INT_EQ(a, b)                                                                         \
    do {                                                                                           \
        if ((intmax_t)(a) != (intmax_t)(b))                                                        \
            ck_assert_int_eq(a, b);                                                                \
    } while (0)
#define QUIET_PTR_EQ(a, b)                                                                         \
    do {                                                                                           \
        if ((const void *)(a) != (const void *)(b))                                                \
            ck_assert_ptr_eq(a, b);                                                                \
    } while (0)

static void model_check(const struct model *m, const struct base_idtab *t, uint64_t owner)
{
    uint32_t live = 0;
    for (uint32_t i = 0; i < m->n; i++) {
        if (m->reserve0 && i == 0)
            continue;
        live += m->live[i];
        if (m->gen[i] == 0) {
            QUIET_INT_EQ(state_of(t, base_idtab_id(i, 1)), BASE_IDTAB_NEVER);
            continue;
        }
        uint64_t id = base_idtab_id(i, m->gen[i]);
        struct base_idtab_slot *s = NULL;
        enum base_idtab_state st = base_idtab_lookup_owned(t, id, owner, &s);
        enum base_idtab_state want = m->live[i] ? BASE_IDTAB_LIVE : BASE_IDTAB_RETIRED;
        if (m->owner[i] != owner)
            want = BASE_IDTAB_FOREIGN;
        QUIET_INT_EQ(st, want);
        QUIET_PTR_EQ(base_idtab_get(t, id), m->live[i] ? m->obj[i] : NULL);
        if (m->gen[i] > 1)
            QUIET_INT_EQ(state_of(t, base_idtab_id(i, m->gen[i] - 1)), BASE_IDTAB_STALE);
        QUIET_INT_EQ(state_of(t, base_idtab_id(i, m->gen[i] + 1)), BASE_IDTAB_NEVER);
    }
    ck_assert_uint_eq(base_idtab_live(t), live);
}

static void randomized(enum base_idtab_reuse reuse, bool reserve0, uint64_t seed)
{
    struct model m = {.reserve0 = reserve0, .fifo = reuse == BASE_IDTAB_REUSE_FIFO};
    uint32_t max = reserve0 ? MODEL_SLOTS - 1 : MODEL_SLOTS;
    /* Everything allocated up front, so the model's queue starts in order. */
    struct base_idtab t = make(reuse, max, max, reserve0, false);
    m.n = MODEL_SLOTS;
    for (uint32_t i = reserve0 ? 1 : 0; i < MODEL_SLOTS; i++)
        m.queue[m.qlen++] = i;
    uint64_t rng = seed;
    for (int step = 0; step < 20000; step++) {
        uint64_t r = base_splitmix64(&rng);
        uint64_t owner = r >> 62;
        if (r % 3 != 0) { /* insert */
            uint64_t id = 0;
            void *obj = OBJ(step % 4096);
            int rc = base_idtab_insert(&t, obj, owner, &id);
            if (m.qlen == 0) {
                QUIET_INT_EQ(rc, -ENOSPC);
                continue;
            }
            QUIET_INT_EQ(rc, 0);
            uint32_t i = m.queue[0];
            memmove(m.queue, m.queue + 1, --m.qlen * sizeof(m.queue[0]));
            QUIET_INT_EQ(base_idtab_id_slot(id), i);
            m.gen[i]++;
            QUIET_INT_EQ(base_idtab_id_gen(id), m.gen[i]);
            m.live[i] = true;
            m.owner[i] = owner;
            m.obj[i] = obj;
        } else { /* retire a random live one, if any */
            uint32_t i = (uint32_t)((r >> 8) % MODEL_SLOTS);
            if (!m.live[i]) {
                void *none = base_idtab_retire(&t, base_idtab_id(i, m.gen[i]));
                QUIET_PTR_EQ(none, NULL);
                continue;
            }
            void *gone = base_idtab_retire(&t, base_idtab_id(i, m.gen[i]));
            QUIET_PTR_EQ(gone, m.obj[i]);
            m.live[i] = false;
            if (m.fifo) {
                m.queue[m.qlen++] = i;
            } else {
                memmove(m.queue + 1, m.queue, m.qlen++ * sizeof(m.queue[0]));
                m.queue[0] = i;
            }
        }
        if (step % 97 == 0)
            model_check(&m, &t, owner);
    }
    model_check(&m, &t, 0);
    base_idtab_fini(&t);
}

START_TEST(randomized_lifo_and_fifo_runs_match_a_model)
{
    randomized(BASE_IDTAB_REUSE_LIFO, false, 1);
    randomized(BASE_IDTAB_REUSE_LIFO, true, 2);
    randomized(BASE_IDTAB_REUSE_FIFO, false, 3);
    randomized(BASE_IDTAB_REUSE_FIFO, true, 4);
}
END_TEST

static Suite *idtab_suite(void)
{
    Suite *s = suite_create("base_idtab");
    TCase *tc = tcase_create("ids");
    tcase_add_test(tc, first_ids_are_generation_1_of_slots_in_order);
    tcase_add_test(tc, a_retired_id_reads_retired_then_stale_once_its_slot_is_reissued);
    tcase_add_test(tc, ids_never_issued_and_malformed_ids_are_told_apart);
    tcase_add_test(tc, another_owners_live_or_retired_id_is_foreign_and_a_stale_one_stale);
    tcase_add_test(tc, init_and_insert_refuse_bad_arguments);
    suite_add_tcase(s, tc);

    tc = tcase_create("reuse_and_limits");
    tcase_add_test(tc, lifo_issues_the_slot_freed_last_first);
    tcase_add_test(tc, fifo_issues_every_other_free_slot_before_a_freed_one_again);
    tcase_add_test(tc, growth_stops_at_max_slots_with_enospc);
    tcase_add_test(tc, a_reserved_slot_0_is_never_issued);
    tcase_add_test(tc, a_slot_at_its_last_generation_is_retired_for_good);
    tcase_add_test(tc, gen_wrap_goes_on_at_generation_1_and_reads_older_ids_as_stale);
    suite_add_tcase(s, tc);

    tc = tcase_create("holds_and_walks");
    tcase_add_test(tc, holds_keep_a_retired_slot_and_its_object_until_the_last_put);
    tcase_add_test(tc, a_walk_visits_live_slots_in_order_and_survives_retiring);
    tcase_add_test(tc, randomized_lifo_and_fifo_runs_match_a_model);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}

BASE_CHECK_MAIN(idtab_suite)
