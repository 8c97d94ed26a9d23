/* The staging pool: The extent hooks alone, and arenas primed with one extent per segment. */
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

/* --- the extent hooks --- */

/* The hooks alone, on a class of two 4 MiB segments mapped here, with no
 * arena: what jemalloc would be told. */
START_TEST(test_extent_hooks_carve_only_class_segments_and_keep_pages)
{
    static struct leasec_pool fake;
    static struct leasec__segment segs[2];
    memset(&fake, 0, sizeof(fake));
    fake.ctx.page = (size_t)sysconf(_SC_PAGESIZE);
    fake.segs = segs;
    fake.nsegs = 2;
    /* Adjacent in memory, as two real segments can happen to be. */
    unsigned char *area =
        mmap(NULL, 8 * MIB, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(area, MAP_FAILED);
    for (int i = 0; i < 2; i++)
        segs[i] = (struct leasec__segment){.id = (uint32_t)i + 1,
                                           .mem_class = LT_CLASS_PINNED,
                                           .fd = -1,
                                           .base = area + i * 4 * MIB,
                                           .size = 4 * MIB};
    struct leasec__class *cls = &fake.classes[LT_CLASS_PINNED];
    cls->ctx = &fake.ctx;
    cls->mem_class = LT_CLASS_PINNED;
    cls->segs = segs;
    cls->nsegs = 2;
    ck_assert_int_eq(pthread_mutex_init(&cls->carve_lock, NULL), 0);
    leasec__arena_hooks_init(cls);
    extent_hooks_t *h = &cls->hooks;
    const unsigned ind = 4242;
    struct leasec__segment *s0 = &segs[0], *s1 = &segs[1];
    uint64_t rng = SEED ^ 2;

    bool zero = false, commit = false;
    unsigned char *a = h->alloc(h, NULL, 64 * 1024, 4096, &zero, &commit, ind);
    ck_assert_ptr_eq(a, s0->base); /* both empty: the first one that fits */
    ck_assert(commit);
    ck_assert(!zero); /* no promise of zeroes unless asked */

    /* Alignment is honoured; best fit keeps using the fuller segment. */
    zero = commit = false;
    unsigned char *b = h->alloc(h, NULL, 8192, (size_t)1 << 20, &zero, &commit, ind);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq((uintptr_t)b % ((size_t)1 << 20), 0);
    ck_assert_ptr_eq(b, (unsigned char *)(((uintptr_t)s0->base + 64 * 1024 + (1 << 20) - 1) &
                                          ~(uintptr_t)((1 << 20) - 1)));

    /* new_addr: only exactly where a segment's free tail starts. */
    zero = commit = false;
    ck_assert_ptr_null(h->alloc(h, b + 3 * 4096, 4096, 4096, &zero, &commit, ind));
    ck_assert_ptr_null(h->alloc(h, a, 4096, 4096, &zero, &commit, ind));
    ck_assert(!commit); /* left alone on failure */
    unsigned char *tail = b + 8192;
    /* Asked for zeroes, gets zeroes even over a peer's scribbles. */
    for (int i = 0; i < 4096; i++)
        tail[i] = (unsigned char)(rng_next(&rng) | 1);
    zero = true;
    ck_assert_ptr_eq(h->alloc(h, tail, 4096, 4096, &zero, &commit, ind), tail);
    ck_assert(zero && commit);
    for (int i = 0; i < 4096; i++)
        ck_assert_uint_eq(tail[i], 0);

    /* Never more than a segment, never from outside the segments. */
    zero = commit = false;
    ck_assert_ptr_null(h->alloc(h, NULL, 4 * MIB + 4096, 4096, &zero, &commit, ind));
    unsigned char *whole = h->alloc(h, NULL, 4 * MIB, 4096, &zero, &commit, ind);
    ck_assert_ptr_eq(whole, s1->base); /* s0 no longer has 4 MiB */
    uint64_t left = s0->size - s0->carved;
    unsigned char *rest = s0->base + s0->carved;
    ck_assert_ptr_eq(h->alloc(h, NULL, left, 4096, &zero, &commit, ind), rest);
    ck_assert_ptr_null(h->alloc(h, NULL, 4096, 4096, &zero, &commit, ind));
    ck_assert_uint_eq(cls->carved, 8 * MIB); /* alignment gaps count as used */
    ck_assert_uint_eq(cls->extents, 5);

    /* Memory is never given back, decommitted or purged; commit succeeds. */
    ck_assert(h->dalloc(h, a, 64 * 1024, true, ind));
    ck_assert(h->decommit(h, a, 64 * 1024, 0, 4096, ind));
    ck_assert(h->purge_lazy(h, a, 64 * 1024, 0, 4096, ind));
    ck_assert(h->purge_forced(h, a, 64 * 1024, 0, 4096, ind));
    ck_assert(!h->commit(h, a, 64 * 1024, 0, 4096, ind));
    ck_assert(!h->split(h, a, 64 * 1024, 32 * 1024, 32 * 1024, true, ind));
    h->destroy(h, a, 64 * 1024, true, ind);
    a[0] = 1; /* still mapped */

    /* Merges: adjacent and within one segment only. */
    ck_assert(!h->merge(h, a, 32 * 1024, a + 32 * 1024, 32 * 1024, true, ind));
    ck_assert(h->merge(h, a, 32 * 1024, a + 64 * 1024, 32 * 1024, true, ind));
    unsigned char *end0 = s0->base + s0->size;
    ck_assert(h->merge(h, end0 - 4096, 4096, end0, 4096, true, ind));
    ck_assert(h->merge(h, s1->base - 4096, 4096, s1->base, 4096, true, ind));
    ck_assert(!h->merge(h, s1->base, 4096, s1->base + 4096, 4 * MIB - 4096, true, ind));

    /* The two segments touch: a merge across them is still refused. */
    ck_assert_ptr_eq(end0, s1->base);
    ck_assert(h->merge(h, s0->base, 4 * MIB, s1->base, 4 * MIB, true, ind));
    munmap(area, 8 * MIB);
    pthread_mutex_destroy(&cls->carve_lock);
}
END_TEST

/* jemalloc never merges extents that came from separate hook calls; the
 * pool hands each segment over in one piece, so after any churn every
 * segment can again hold the largest buffer that fits in it. */
START_TEST(test_each_segment_holds_its_largest_buffer_again_after_churn)
{
    struct leasec_pool_config c = small_config();
    struct leasec_pool *pool = create_or_fail(&c);
    /* 3.5 MiB: the largest jemalloc size class that, with its one-page pad,
     * fits a 4 MiB segment; 1.75 MiB likewise for 2 MiB. */
    const size_t big4 = 3584 * 1024, big2 = 1792 * 1024;
    struct leasec_pool_buf bufs[600];
    uint64_t rng = SEED ^ 4;
    for (int round = 0; round < 2; round++) {
        unsigned n = 0;
        for (int op = 0; op < 4000; op++) {
            if (n < 600 && (n == 0 || rng_next(&rng) % 100 < 60)) {
                enum lt_class k = (enum lt_class)(LT_CLASS_STAGED + rng_next(&rng) % 3);
                if (leasec_pool_alloc(pool, k, random_size(&rng), &bufs[n]) == 0)
                    n++;
            } else {
                unsigned i = (unsigned)(rng_next(&rng) % n);
                ck_assert_int_eq(leasec_pool_free(pool, &bufs[i]), 0);
                bufs[i] = bufs[--n];
            }
        }
        while (n)
            ck_assert_int_eq(leasec_pool_free(pool, &bufs[--n]), 0);

        unsigned used[16] = {0};
        struct leasec_pool_buf big[7];
        unsigned nbig = 0;
        /* Large segments first: jemalloc may put a small buffer anywhere. */
        for (unsigned j = 0; j < 2 * leasec_pool_segment_count(pool); j++) {
            struct leasec_pool_segment s;
            unsigned i = j % leasec_pool_segment_count(pool);
            ck_assert_int_eq(leasec_pool_segment_at(pool, i, &s), 0);
            if ((j < leasec_pool_segment_count(pool)) != (s.size == 4 * MIB))
                continue;
            size_t want = s.size == 4 * MIB ? big4 : big2;
            i = nbig++;
            int rc = leasec_pool_alloc(pool, s.mem_class, want, &big[i]);
            ck_assert_msg(rc == 0, "round %d: %s buffer of %zu after churn: %s; log:\n%s", round,
                          lt_class_name(s.mem_class), want, strerror(-rc), captured.last);
            ck_assert_uint_lt(big[i].segment_id, 16);
            ck_assert_uint_eq(used[big[i].segment_id]++, 0); /* one per segment */
        }
        ck_assert_uint_eq(nbig, leasec_pool_segment_count(pool));
        for (unsigned i = 0; i < nbig; i++)
            ck_assert_int_eq(leasec_pool_free(pool, &big[i]), 0);
    }
    for (int k = LT_CLASS_STAGED; k <= LT_CLASS_MAPPED; k++) {
        struct leasec_pool_class_stats st;
        ck_assert_int_eq(leasec_pool_stats(pool, (enum lt_class)k, &st), 0);
        ck_assert_uint_eq(st.extents, st.segments); /* the hooks were never fed again */
        ck_assert_uint_eq(st.in_use, 0);
    }
    leasec_pool_destroy(pool);
}
END_TEST

/* A short last segment whose size jemalloc would never ask for in one
 * piece (18 MiB) still gets its own extent, and no other segment is cut. */
START_TEST(test_odd_sized_last_segment_is_primed_on_its_own)
{
    struct leasec_pool_config c = small_config();
    memset(c.class_bytes, 0, sizeof(c.class_bytes));
    c.class_bytes[LT_CLASS_PINNED] = 50 * MIB;
    c.segment_bytes = 32 * MIB; /* 32 + 18 */
    struct leasec_pool *pool = create_or_fail(&c);
    ck_assert_uint_eq(captured.lines, 1); /* the 18 MiB tail notice */
    ck_assert_ptr_nonnull(strstr(captured.last, "PINNED"));
    struct leasec_pool_class_stats st;
    ck_assert_int_eq(leasec_pool_stats(pool, LT_CLASS_PINNED, &st), 0);
    ck_assert_uint_eq(st.extents, 2);
    ck_assert_uint_lt(st.carved, st.capacity);
    struct leasec_pool_buf b28, b16, small;
    ck_assert_int_eq(leasec_pool_alloc(pool, LT_CLASS_PINNED, 28 * MIB, &b28), 0);
    ck_assert_int_eq(leasec_pool_alloc(pool, LT_CLASS_PINNED, 16 * MIB, &b16), 0);
    ck_assert_uint_ne(b28.segment_id, b16.segment_id);
    /* The rest of the 18 MiB segment is carved when needed. */
    ck_assert_int_eq(leasec_pool_alloc(pool, LT_CLASS_PINNED, MIB, &small), 0);
    check_buf_placement(pool, &small, LT_CLASS_PINNED, MIB);
    ck_assert_int_eq(leasec_pool_free(pool, &small), 0);
    ck_assert_int_eq(leasec_pool_free(pool, &b16), 0);
    ck_assert_int_eq(leasec_pool_free(pool, &b28), 0);
    leasec_pool_destroy(pool);
}
END_TEST

void pool_tests_hooks(TCase *tc)
{
    tcase_add_test(tc, test_extent_hooks_carve_only_class_segments_and_keep_pages);
    tcase_add_test(tc, test_each_segment_holds_its_largest_buffer_again_after_churn);
    tcase_add_test(tc, test_odd_sized_last_segment_is_primed_on_its_own);
}
