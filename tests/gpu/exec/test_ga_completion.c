/* The completion thread (gpu/completion.c): nodes fired from any thread, in
 * any order, each run exactly once on the completion thread; cancel; and
 * destroy waiting for the nodes still to fire. Driver-free. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/completer.h"

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

struct rec {
    int runs;
    pthread_t ran_on;
};

static void rec_fn(void *arg)
{
    struct rec *r = arg;
    __atomic_add_fetch(&r->runs, 1, __ATOMIC_RELAXED);
    r->ran_on = pthread_self();
}

enum { NODES = 6000, FIRERS = 3 };

struct firer {
    struct ga_cnode **nodes;
    size_t *order; /* a seeded permutation of 0..NODES-1 */
    int index;
    pthread_t self;
};

/* Firer i fires the nodes at positions i, i + FIRERS, ... of the order. */
static void *fire_some(void *arg)
{
    struct firer *f = arg;
    f->self = pthread_self();
    for (size_t k = (size_t)f->index; k < NODES; k += FIRERS)
        ga_completer_fire(f->nodes[f->order[k]]);
    return NULL;
}

START_TEST(fired_nodes_run_once_each_on_the_completion_thread)
{
    struct ga_completer *c = NULL;
    ck_assert_int_eq(ga_completer_create(NULL, &c), 0);
    struct rec *recs = calloc(NODES, sizeof(*recs));
    struct ga_cnode **nodes = calloc(NODES, sizeof(*nodes));
    size_t *order = calloc(NODES, sizeof(*order));
    ck_assert(recs && nodes && order);
    for (size_t i = 0; i < NODES; i++) {
        ck_assert_int_eq(ga_completer_prepare(c, rec_fn, &recs[i], &nodes[i]), 0);
        order[i] = i;
    }
    uint64_t pending = 0, run = 0;
    ga_completer_counts(c, &pending, &run);
    ck_assert_uint_eq(pending, NODES);
    ck_assert_uint_eq(run, 0);
    uint64_t rng = 0xc0ffee77ULL;
    for (size_t i = NODES - 1; i > 0; i--) {
        size_t j = rng_next(&rng) % (i + 1);
        size_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    struct firer f[FIRERS];
    for (int i = 0; i < FIRERS; i++) {
        f[i] = (struct firer){.nodes = nodes, .order = order, .index = i};
        ck_assert_int_eq(pthread_create(&f[i].self, NULL, fire_some, &f[i]), 0);
    }
    for (int i = 0; i < FIRERS; i++)
        pthread_join(f[i].self, NULL);
    ck_assert_uint_eq(ga_completer_destroy(c, 0), 0); /* waits for every node */
    for (size_t i = 0; i < NODES; i++) {
        ck_assert_int_eq(recs[i].runs, 1);
        ck_assert(!pthread_equal(recs[i].ran_on, pthread_self()));
        for (int k = 0; k < FIRERS; k++)
            ck_assert(!pthread_equal(recs[i].ran_on, f[k].self));
        ck_assert(pthread_equal(recs[i].ran_on, recs[0].ran_on));
    }
    free(order);
    free(nodes);
    free(recs);
}
END_TEST

struct late {
    struct ga_cnode *node;
    int fired;
};

static void *fire_late(void *arg)
{
    struct late *l = arg;
    usleep(150 * 1000);
    __atomic_store_n(&l->fired, 1, __ATOMIC_RELEASE);
    ga_completer_fire(l->node);
    return NULL;
}

START_TEST(destroy_waits_for_a_node_fired_later_and_cancel_uncounts)
{
    struct ga_completer *c = NULL;
    ck_assert_int_eq(ga_completer_create(NULL, &c), 0);
    struct rec r = {0}, never = {0};
    struct late l = {0};
    struct ga_cnode *cancelled = NULL;
    ck_assert_int_eq(ga_completer_prepare(c, rec_fn, &never, &cancelled), 0);
    ck_assert_int_eq(ga_completer_prepare(c, rec_fn, &r, &l.node), 0);
    ga_completer_cancel(c, cancelled);
    uint64_t pending = 0, run = 0;
    ga_completer_counts(c, &pending, &run);
    ck_assert_uint_eq(pending, 1);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, fire_late, &l), 0);
    ck_assert_uint_eq(ga_completer_destroy(c, 0), 0);
    /* Destroy returned only after the late node was fired and had run. */
    ck_assert_int_eq(__atomic_load_n(&l.fired, __ATOMIC_ACQUIRE), 1);
    ck_assert_int_eq(r.runs, 1);
    ck_assert_int_eq(never.runs, 0);
    pthread_join(t, NULL);
    ck_assert_uint_eq(ga_completer_destroy(NULL, 0), 0);
}
END_TEST

static Suite *completion_suite(void)
{
    Suite *s = suite_create("ga_completion");
    TCase *tc = tcase_create("completion");
    tcase_add_test(tc, fired_nodes_run_once_each_on_the_completion_thread);
    tcase_add_test(tc, destroy_waits_for_a_node_fired_later_and_cancel_uncounts);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(completion_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
