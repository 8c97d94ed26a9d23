/* The staging pool: Concurrent threads get disjoint buffers. */
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

/* --- threads --- */

struct worker {
    struct leasec_pool *pool;
    uint64_t seed;
    struct live_set set;
    int failed_frees;
};

static void *worker_run(void *arg)
{
    struct worker *w = arg;
    uint64_t rng = w->seed;
    for (int op = 0; op < 3000; op++) {
        if (w->set.n < w->set.cap && (w->set.n == 0 || rng_next(&rng) % 100 < 55)) {
            enum lt_class k = rng_next(&rng) % 2 ? LT_CLASS_PINNED : LT_CLASS_STAGED;
            size_t size = 1 + (size_t)(rng_next(&rng) % (96 * 1024));
            struct live l = {.key = rng_next(&rng)};
            if (leasec_pool_alloc(w->pool, k, size, &l.buf) != 0)
                continue;
            pattern_fill(l.buf.base, size, l.key);
            w->set.v[w->set.n++] = l;
        } else {
            unsigned i = (unsigned)(rng_next(&rng) % w->set.n);
            struct live *l = &w->set.v[i];
            if (pattern_check(l->buf.base, l->buf.len, l->key) >= 0 ||
                leasec_pool_free(w->pool, &l->buf) != 0)
                w->failed_frees++;
            w->set.v[i] = w->set.v[--w->set.n];
        }
    }
    return NULL;
}

START_TEST(test_concurrent_threads_get_disjoint_buffers)
{
    struct leasec_pool_config c = small_config();
    struct leasec_pool *pool = create_or_fail(&c);
    struct worker w[2];
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        w[i] = (struct worker){.pool = pool, .seed = SEED + (uint64_t)i * 7919};
        w[i].set.cap = 256;
        w[i].set.v = calloc(w[i].set.cap, sizeof(struct live));
        ck_assert_ptr_nonnull(w[i].set.v);
        ck_assert_int_eq(pthread_create(&t[i], NULL, worker_run, &w[i]), 0);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    /* Both threads' survivors together are still pairwise disjoint. */
    struct live_set all = {.cap = 512};
    all.v = calloc(all.cap, sizeof(*all.v));
    ck_assert_ptr_nonnull(all.v);
    uint64_t sum[LT_CLASS_MAPPED + 1] = {0};
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(w[i].failed_frees, 0);
        for (unsigned j = 0; j < w[i].set.n; j++) {
            live_insert(&all, &w[i].set.v[j]);
            sum[w[i].set.v[j].buf.mem_class] += w[i].set.v[j].buf.len;
        }
    }
    for (int k = LT_CLASS_STAGED; k <= LT_CLASS_MAPPED; k++) {
        struct leasec_pool_class_stats st;
        ck_assert_int_eq(leasec_pool_stats(pool, (enum lt_class)k, &st), 0);
        ck_assert_uint_eq(st.in_use, sum[k]);
    }
    for (unsigned j = 0; j < all.n; j++) {
        ck_assert_int_lt(pattern_check(all.v[j].buf.base, all.v[j].buf.len, all.v[j].key), 0);
        ck_assert_int_eq(leasec_pool_free(pool, &all.v[j].buf), 0);
    }
    free(all.v);
    free(w[0].set.v);
    free(w[1].set.v);
    leasec_pool_destroy(pool);
}
END_TEST

void pool_tests_threads(TCase *tc)
{
    tcase_add_test(tc, test_concurrent_threads_get_disjoint_buffers);
}
