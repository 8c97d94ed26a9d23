/* The vector scan's C reference (kernels/ref/scan_ref.c) and shared header
 * (kernels/include/kernels/scan.h): ranking keys, the f16 decode against
 * stagingd's, kr_scan_topk against a brute-force full sort, kr_topk_merge,
 * and kr_scan_check accepting what it must and refusing what it must. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/scan.h"
#include "kernels/scan_ref.h"
#include "scan_test_util.h"
#include "stagingd/shard.h"

_Static_assert((int)KN_SCAN_F32 == (int)SD_RECORD_F32 && (int)KN_SCAN_F16 == (int)SD_RECORD_F16,
               "the scan's record types are stagingd's");

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- ranking keys and f16 ---- */

START_TEST(f16_decode_matches_stagingd_for_every_pattern)
{
    /* Each check asserts only when it fails: a passing Check assertion costs
     * a write(2), which made these loops time out on a loaded machine. */
    for (uint32_t h = 0; h < 65536; h++) {
        float mine = kn_f16_to_f32((uint16_t)h), theirs = sd_f16_to_f32((uint16_t)h);
        if (f32_bits(mine) != f32_bits(theirs))
            ck_abort_msg("f16 %#06x: %#010x vs stagingd %#010x", h, f32_bits(mine),
                         f32_bits(theirs));
        if (!isnan(mine) && sd_f16_from_f32(mine) != h)
            ck_assert_uint_eq(sd_f16_from_f32(mine), h); /* exact: encodes back */
    }
    ck_assert_float_eq(kn_f16_to_f32(0x0001), ldexpf(1.0f, -24));
    ck_assert_float_eq(kn_f16_to_f32(0x3c00), 1.0f);
    ck_assert_float_eq(kn_f16_to_f32(0xc000), -2.0f);
}
END_TEST

START_TEST(score_keys_order_like_the_scores)
{
    uint64_t s = 42;
    for (int i = 0; i < 200000; i++) {
        float a = f32_from_bits((uint32_t)st_rng_next(&s)),
              b = f32_from_bits((uint32_t)st_rng_next(&s));
        if (isnan(a) || isnan(b))
            continue;
        uint32_t ka = kn_scan_score_key(a), kb = kn_scan_score_key(b);
        /* Asserted only on failure, as above. */
        if (!((a > b) == (ka > kb) && (a == b) == (ka == kb)))
            ck_abort_msg("%a vs %a: keys %#x %#x", a, b, ka, kb);
        if (f32_bits(kn_scan_key_score(ka)) != f32_bits(a == 0 ? 0.0f : a))
            ck_assert_uint_eq(f32_bits(kn_scan_key_score(ka)), f32_bits(a == 0 ? 0.0f : a));
        if (ka < 0x007fffffu)
            ck_assert_uint_ge(ka, 0x007fffffu);
    }
    ck_assert_uint_eq(kn_scan_score_key(-0.0f), kn_scan_score_key(0.0f));
    ck_assert_uint_eq(kn_scan_score_key(NAN), KN_SCAN_KEY_NAN);
    ck_assert_uint_eq(kn_scan_score_key(-NAN), KN_SCAN_KEY_NAN);
    ck_assert_uint_lt(kn_scan_score_key(NAN), kn_scan_score_key(-INFINITY));
    ck_assert(isnan(kn_scan_key_score(KN_SCAN_KEY_NAN)));
    /* Equal scores: the smaller index has the larger key. */
    ck_assert_uint_gt(kn_scan_key(1.5f, 7), kn_scan_key(1.5f, 8));
    ck_assert_uint_gt(kn_scan_key(1.5f, 0xfffffffeULL), kn_scan_key(1.25f, 0));
    ck_assert_uint_ge(kn_scan_key(NAN, 0xfffffffeULL), KN_SCAN_KEY_REAL_MIN);
    ck_assert_uint_eq(kn_scan_key_index(kn_scan_key(-3.0f, 123456789)), 123456789);
}
END_TEST

START_TEST(error_bound_grows_with_dim_and_stays_under_1e5_to_4096)
{
    double prev = 0;
    for (uint32_t dim = 1; dim <= 65536; dim = dim * 2 + 1) {
        double b = kn_scan_error_bound(dim);
        ck_assert(b >= prev);
        prev = b;
    }
    ck_assert(kn_scan_error_bound(4096) < 1e-5);
    ck_assert(kn_scan_error_bound(1) < 1e-6);
    /* L = ceil(4096 / 32) + 13 = 141 roundings. */
    ck_assert_uint_eq(kn_scan_rounding_depth(4096), 141);
}
END_TEST

/* ---- kr_scan_topk against a full sort ---- */

static int hit_cmp(const void *a, const void *b)
{
    const struct kn_scan_hit *x = a, *y = b;
    return kn_scan_hit_before(x, y) ? -1 : kn_scan_hit_before(y, x) ? 1 : 0;
}

/* Every record scored and sorted: the definition kr_scan_topk must meet. */
static struct kn_scan_hit *brute_force(const void *rec, uint32_t type, uint64_t n, uint32_t dim,
                                       const float *q)
{
    struct kn_scan_hit *all = malloc((n ? n : 1) * sizeof(*all));
    ck_assert_ptr_nonnull(all);
    for (uint64_t r = 0; r < n; r++) {
        all[r].score = (float)kr_scan_score(rec, type, dim, r, q, NULL);
        all[r].shard = 0;
        all[r].index = r;
    }
    qsort(all, n, sizeof(*all), hit_cmp);
    return all;
}

static void expect_topk_is_sorted_prefix(const void *rec, uint32_t type, uint64_t n, uint32_t dim,
                                         const float *q, uint32_t k)
{
    struct kn_scan_hit *all = brute_force(rec, type, n, dim, q);
    size_t want = n < k ? n : k;
    struct kn_scan_hit *got = calloc(want + 1, sizeof(*got));
    ck_assert_ptr_nonnull(got);
    memset(&got[want], 0xa5, sizeof(*got));
    ck_assert_int_eq(kr_scan_topk(rec, type, n, dim, q, k, got), (long)want);
    for (size_t i = 0; i < want; i++)
        ck_assert_msg(got[i].index == all[i].index &&
                          f32_bits(got[i].score) == f32_bits(all[i].score) && got[i].shard == 0,
                      "type %u n %llu dim %u k %u: hit %zu is (%g, %llu), the sort says (%g, %llu)",
                      type, (unsigned long long)n, dim, k, i, (double)got[i].score,
                      (unsigned long long)got[i].index, (double)all[i].score,
                      (unsigned long long)all[i].index);
    unsigned char poison[sizeof(*got)];
    memset(poison, 0xa5, sizeof(poison));
    ck_assert(memcmp(&got[want], poison, sizeof(poison)) == 0); /* nothing past min(n, k) */
    free(got);
    free(all);
}

START_TEST(topk_matches_full_sort_on_random_records)
{
    static const uint32_t types[] = {KN_SCAN_F32, KN_SCAN_F16};
    static const struct {
        uint64_t n;
        uint32_t dim;
    } shapes[] = {{1, 1}, {2, 3}, {100, 1}, {257, 7}, {1000, 16}, {333, 100}, {64, 512}};
    static const uint32_t ks[] = {1, 2, 7, 64, 65, 1000};
    for (size_t t = 0; t < 2; t++)
        for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
            uint64_t n = shapes[s].n;
            uint32_t dim = shapes[s].dim;
            void *rec = malloc(n * dim * 4);
            float *q = malloc(dim * sizeof(float));
            ck_assert(rec && q);
            st_fill_records(rec, types[t], n, dim, 1000 + s);
            st_fill_query(q, dim, 2000 + s);
            for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++)
                expect_topk_is_sorted_prefix(rec, types[t], n, dim, q, ks[i]);
            expect_topk_is_sorted_prefix(rec, types[t], n, dim, q, (uint32_t)n);     /* k = n */
            expect_topk_is_sorted_prefix(rec, types[t], n, dim, q, (uint32_t)n + 5); /* n < k */
            free(q);
            free(rec);
        }
}
END_TEST

START_TEST(topk_reads_unaligned_records)
{
    const uint64_t n = 300;
    const uint32_t dim = 5;
    unsigned char *buf = malloc(n * dim * 4 + 3);
    float q[5];
    ck_assert_ptr_nonnull(buf);
    st_fill_query(q, dim, 7);
    for (uint32_t t = KN_SCAN_F32; t <= KN_SCAN_F16; t++) {
        st_fill_records(buf + 1, t, n, dim, 77);
        expect_topk_is_sorted_prefix(buf + 1, t, n, dim, q, 10);
    }
    free(buf);
}
END_TEST

START_TEST(equal_scores_rank_by_smaller_index)
{
    /* 500 records, each a copy of one of 5 rows: scores tie in groups. */
    const uint64_t n = 500;
    const uint32_t dim = 9;
    float rows[5][9], q[9];
    float *rec = malloc(n * dim * sizeof(float));
    ck_assert_ptr_nonnull(rec);
    st_fill_records(rows, KN_SCAN_F32, 5, dim, 5);
    st_fill_query(q, dim, 6);
    uint64_t s = 99;
    for (uint64_t r = 0; r < n; r++)
        memcpy(rec + r * dim, rows[st_rng_next(&s) % 5], sizeof(rows[0]));
    struct kn_scan_hit hits[150];
    ck_assert_int_eq(kr_scan_topk(rec, KN_SCAN_F32, n, dim, q, 150, hits), 150);
    for (int i = 1; i < 150; i++) {
        ck_assert(hits[i - 1].score >= hits[i].score);
        if (hits[i - 1].score == hits[i].score)
            ck_assert_uint_lt(hits[i - 1].index, hits[i].index);
    }
    /* The best row's copies come first, all of them, in index order. */
    const float best = hits[0].score;
    int i = 0;
    for (uint64_t r = 0; r < n; r++)
        if ((float)kr_scan_score(rec, KN_SCAN_F32, dim, r, q, NULL) == best)
            ck_assert_uint_eq(hits[i++].index, r);
    ck_assert_int_gt(i, 50);
    ck_assert_int_lt(i, 150);
    ck_assert(hits[i].score < best);
    expect_topk_is_sorted_prefix(rec, KN_SCAN_F32, n, dim, q, 150);
    free(rec);
}
END_TEST

START_TEST(nan_scores_rank_last_by_index)
{
    const uint64_t n = 40;
    const uint32_t dim = 4;
    float rec[40 * 4], q[4];
    st_fill_records(rec, KN_SCAN_F32, n, dim, 11);
    st_fill_query(q, dim, 12);
    for (uint64_t r = 0; r < n; r += 3)
        rec[r * dim + 2] = NAN; /* 14 NaN records: 0, 3, ..., 39 */
    struct kn_scan_hit hits[40];
    ck_assert_int_eq(kr_scan_topk(rec, KN_SCAN_F32, n, dim, q, 40, hits), 40);
    for (int i = 0; i < 26; i++)
        ck_assert(!isnan(hits[i].score) && hits[i].index % 3 != 0);
    for (int i = 26; i < 40; i++) {
        ck_assert(isnan(hits[i].score));
        ck_assert_uint_eq(hits[i].index, (uint64_t)(i - 26) * 3);
    }
    expect_topk_is_sorted_prefix(rec, KN_SCAN_F32, n, dim, q, 40);
}
END_TEST

START_TEST(topk_refuses_bad_arguments)
{
    float rec[8] = {1, 2, 3, 4, 5, 6, 7, 8}, q[2] = {1, 1};
    struct kn_scan_hit out[2];
    memset(out, 0x5a, sizeof(out));
    ck_assert_int_eq(kr_scan_topk(rec, 3, 4, 2, q, 2, out), -EINVAL);
    ck_assert_int_eq(kr_scan_topk(rec, KN_SCAN_F32, 4, 0, q, 2, out), -EINVAL);
    ck_assert_int_eq(kr_scan_topk(rec, KN_SCAN_F32, 4, 2, q, 0, out), -EINVAL);
    ck_assert_int_eq(kr_scan_topk(NULL, KN_SCAN_F32, 4, 2, q, 2, out), -EINVAL);
    ck_assert_int_eq(kr_scan_topk(rec, KN_SCAN_F32, 4, 2, NULL, 2, out), -EINVAL);
    ck_assert_int_eq(kr_scan_topk(rec, KN_SCAN_F32, KN_SCAN_MAX_RECORDS, 2, q, 2, out), -EINVAL);
    ck_assert_uint_eq(out[0].shard, 0x5a5a5a5a);
    ck_assert_int_eq(kr_scan_topk(rec, KN_SCAN_F32, 0, 2, q, 2, out), 0);
    ck_assert_int_eq(kr_scan_topk(rec, KN_SCAN_F32, 4, 2, q, 2, out), 2);
    ck_assert_uint_eq(out[0].index, 3); /* 7 + 8 */
    ck_assert_uint_eq(out[1].index, 2);
}
END_TEST

/* ---- kr_topk_merge ---- */

START_TEST(merge_equals_sort_of_all_shards)
{
    enum { SHARDS = 5, K = 20 };
    static const uint64_t ns[SHARDS] = {100, 7, 0, 64, 1000};
    const uint32_t dim = 6;
    const uint32_t ids[SHARDS] = {40, 3, 9, 17, 2};
    float q[6];
    st_fill_query(q, dim, 3);
    struct kn_scan_hit lists[SHARDS][K];
    const struct kn_scan_hit *lp[SHARDS];
    size_t counts[SHARDS];
    struct kn_scan_hit *all = malloc(1171 * sizeof(*all));
    size_t total = 0;
    float *rec0 = NULL;
    ck_assert_ptr_nonnull(all);
    for (int s = 0; s < SHARDS; s++) {
        float *rec = malloc((ns[s] ? ns[s] : 1) * dim * sizeof(float));
        ck_assert_ptr_nonnull(rec);
        st_fill_records(rec, KN_SCAN_F32, ns[s], dim, 500 + s);
        /* Shard 1 holds copies of shard 0's best rows: equal scores across
         * shards. */
        if (s == 1)
            for (uint64_t r = 0; r < ns[s]; r++)
                memcpy(rec + r * dim, rec0 + lists[0][r].index * dim, dim * sizeof(float));
        long c = kr_scan_topk(rec, KN_SCAN_F32, ns[s], dim, q, K, lists[s]);
        ck_assert_int_ge(c, 0);
        counts[s] = (size_t)c;
        lp[s] = lists[s];
        for (uint64_t r = 0; r < ns[s]; r++) {
            all[total].score = (float)kr_scan_score(rec, KN_SCAN_F32, dim, r, q, NULL);
            all[total].shard = ids[s];
            all[total++].index = r;
        }
        if (s == 0)
            rec0 = rec;
        else
            free(rec);
    }
    free(rec0);
    qsort(all, total, sizeof(*all), hit_cmp);
    struct kn_scan_hit out[K + 1];
    memset(out, 0xa5, sizeof(out));
    ck_assert_int_eq(kr_topk_merge(lp, counts, SHARDS, ids, K, out), K);
    for (int i = 0; i < K; i++)
        ck_assert_msg(out[i].shard == all[i].shard && out[i].index == all[i].index &&
                          out[i].score == all[i].score,
                      "merged %d: shard %u index %llu, sort says shard %u index %llu", i,
                      out[i].shard, (unsigned long long)out[i].index, all[i].shard,
                      (unsigned long long)all[i].index);
    ck_assert_uint_eq(out[K].shard, 0xa5a5a5a5);
    /* Ties across shards: shard 1 (id 3) holds copies of shard 0's (id 40)
     * best 7 rows: each tied pair comes id 3 first. */
    int pairs = 0;
    for (int i = 1; i < K; i++)
        if (out[i].score == out[i - 1].score) {
            ck_assert_uint_eq(out[i - 1].shard, 3);
            ck_assert_uint_eq(out[i].shard, 40);
            pairs++;
        }
    ck_assert_int_ge(pairs, 1);

    /* k above everything there is: all of it. */
    struct kn_scan_hit *big = malloc(200 * sizeof(*big));
    ck_assert_ptr_nonnull(big);
    size_t sum = counts[0] + counts[1] + counts[2] + counts[3] + counts[4];
    ck_assert_int_eq(kr_topk_merge(lp, counts, SHARDS, ids, 200, big), (long)sum);
    ck_assert_int_eq(kr_topk_merge(lp, counts, 0, ids, 5, big), 0);
    free(big);
    free(all);
}
END_TEST

START_TEST(merge_keeps_shard_fields_and_collapses_duplicates)
{
    struct kn_scan_hit a[3] = {{5.0f, 1, 10}, {4.0f, 1, 11}, {-1.0f, 1, 12}};
    struct kn_scan_hit b[2] = {{5.0f, 0, 99}, {4.0f, 1, 11}}; /* (4, 1, 11) is in both */
    const struct kn_scan_hit *lp[2] = {a, b};
    size_t counts[2] = {3, 2};
    struct kn_scan_hit out[5];
    ck_assert_int_eq(kr_topk_merge(lp, counts, 2, NULL, 5, out), 4);
    ck_assert(out[0].shard == 0 && out[0].index == 99);
    ck_assert(out[1].shard == 1 && out[1].index == 10);
    ck_assert(out[2].shard == 1 && out[2].index == 11);
    ck_assert(out[3].shard == 1 && out[3].index == 12);
}
END_TEST

START_TEST(merge_refuses_unsorted_lists_and_bad_arguments)
{
    struct kn_scan_hit a[2] = {{1.0f, 0, 1}, {2.0f, 0, 2}};
    struct kn_scan_hit same[2] = {{2.0f, 0, 2}, {2.0f, 0, 2}};
    const struct kn_scan_hit *lp[1] = {a};
    size_t counts[1] = {2};
    struct kn_scan_hit out[2];
    memset(out, 0x5a, sizeof(out));
    ck_assert_int_eq(kr_topk_merge(lp, counts, 1, NULL, 2, out), -EINVAL);
    lp[0] = same;
    ck_assert_int_eq(kr_topk_merge(lp, counts, 1, NULL, 2, out), -EINVAL);
    ck_assert_int_eq(kr_topk_merge(lp, counts, 1, NULL, 0, out), -EINVAL);
    const struct kn_scan_hit *nul[1] = {NULL};
    ck_assert_int_eq(kr_topk_merge(nul, counts, 1, NULL, 2, out), -EINVAL);
    ck_assert_uint_eq(out[0].shard, 0x5a5a5a5a);
}
END_TEST

/* ---- kr_scan_check ---- */

struct check_case {
    void *rec;
    float *q;
    struct kr_scan_shard sh;
    struct kn_scan_hit hits[64];
    long count;
};

static void check_case_init(struct check_case *c, uint32_t type, uint64_t n, uint32_t dim,
                            uint32_t k, uint64_t seed)
{
    c->rec = malloc(n * dim * 4);
    c->q = malloc(dim * sizeof(float));
    ck_assert(c->rec && c->q);
    st_fill_records(c->rec, type, n, dim, seed);
    st_fill_query(c->q, dim, seed + 1);
    c->sh = (struct kr_scan_shard){c->rec, type, dim, n, c->q};
    c->count = kr_scan_topk(c->rec, type, n, dim, c->q, k, c->hits);
    ck_assert_int_eq(c->count, (long)(n < k ? n : k));
}

START_TEST(check_accepts_the_reference_and_refuses_wrong_lists)
{
    char why[512];
    double rel = -1;
    for (uint32_t type = KN_SCAN_F32; type <= KN_SCAN_F16; type++) {
        struct check_case c;
        check_case_init(&c, type, 2000, 33, 16, 60 + type);
        ck_assert_int_eq(kr_scan_check(&c.sh, 16, NULL, c.hits, 16, &rel, why, sizeof(why)), 0);
        ck_assert(rel >= 0 && rel < 1e-7); /* the f64 sum rounded once */
        ck_assert_int_eq(kr_scan_check(&c.sh, 16, c.hits, c.hits, 16, NULL, why, sizeof(why)), 0);

        struct kn_scan_hit bad[16];
        memcpy(bad, c.hits, sizeof(bad));
        bad[3] = c.hits[4], bad[4] = c.hits[3];
        ck_assert_int_eq(kr_scan_check(&c.sh, 16, NULL, bad, 16, NULL, why, sizeof(why)), -EBADMSG);
        ck_assert_msg(strstr(why, "out of order"), "%s", why);

        /* The 16th best replaced by a record far below: a real miss. */
        struct kn_scan_hit worst;
        struct kn_scan_hit *all = malloc(2000 * sizeof(*all));
        ck_assert_ptr_nonnull(all);
        ck_assert_int_eq(kr_scan_topk(c.rec, type, 2000, 33, c.q, 2000, all), 2000);
        worst = all[1999];
        free(all);
        memcpy(bad, c.hits, sizeof(bad));
        bad[15] = worst;
        ck_assert_int_eq(kr_scan_check(&c.sh, 16, NULL, bad, 16, NULL, why, sizeof(why)), -EBADMSG);
        ck_assert_msg(strstr(why, "missing"), "%s", why);

        /* A score off by more than the bound allows. */
        memcpy(bad, c.hits, sizeof(bad));
        bad[0].score = nextafterf(bad[0].score, INFINITY) * (1.0f + 1e-4f);
        ck_assert_int_eq(kr_scan_check(&c.sh, 16, NULL, bad, 16, NULL, why, sizeof(why)), -EBADMSG);
        ck_assert_msg(strstr(why, "over the bound"), "%s", why);

        /* Too few, a duplicate, an index past n, a shard id. */
        ck_assert_int_eq(kr_scan_check(&c.sh, 16, NULL, c.hits, 15, NULL, why, sizeof(why)),
                         -EBADMSG);
        memcpy(bad, c.hits, sizeof(bad));
        bad[15].index = 2000;
        ck_assert_int_eq(kr_scan_check(&c.sh, 16, NULL, bad, 16, NULL, why, sizeof(why)), -EBADMSG);
        memcpy(bad, c.hits, sizeof(bad));
        bad[2].shard = 1;
        ck_assert_int_eq(kr_scan_check(&c.sh, 16, NULL, bad, 16, NULL, why, sizeof(why)), -EBADMSG);
        free(c.rec);
        free(c.q);
    }
}
END_TEST

START_TEST(check_accepts_a_swap_within_f32_rounding)
{
    /* Two records whose exact scores differ far below f32 rounding: either
     * may be the top-1 of an f32 sum. */
    enum { DIM = 64 };
    float rec[2 * DIM], q[DIM];
    st_fill_records(rec, KN_SCAN_F32, 1, DIM, 8);
    st_fill_query(q, DIM, 9);
    memcpy(rec + DIM, rec, DIM * sizeof(float));
    rec[DIM + 5] = nextafterf(rec[5], q[5] > 0 ? INFINITY : -INFINITY); /* record 1 higher */
    double s0 = kr_scan_score(rec, KN_SCAN_F32, DIM, 0, q, NULL);
    double s1 = kr_scan_score(rec, KN_SCAN_F32, DIM, 1, q, NULL);
    ck_assert(s1 > s0);
    struct kr_scan_shard sh = {rec, KN_SCAN_F32, DIM, 2, q};
    struct kn_scan_hit wrong_but_close = {(float)s0, 0, 0};
    char why[512] = "";
    ck_assert_msg(kr_scan_check(&sh, 1, NULL, &wrong_but_close, 1, NULL, why, sizeof(why)) == 0,
                  "%s", why);
    /* The same swap with the records far apart is refused. */
    rec[DIM + 5] = rec[5] + (q[5] > 0 ? 1.0f : -1.0f);
    ck_assert_int_eq(kr_scan_check(&sh, 1, NULL, &wrong_but_close, 1, NULL, why, sizeof(why)),
                     -EBADMSG);
}
END_TEST

static Suite *scan_ref_suite(void)
{
    Suite *s = suite_create("kernels_scan_ref");
    TCase *keys = tcase_create("keys");
    tcase_add_test(keys, f16_decode_matches_stagingd_for_every_pattern);
    tcase_add_test(keys, score_keys_order_like_the_scores);
    tcase_add_test(keys, error_bound_grows_with_dim_and_stays_under_1e5_to_4096);
    tcase_set_timeout(keys, 60); /* 200k-key loops: seconds on a loaded CI machine, not 4 */
    suite_add_tcase(s, keys);
    TCase *topk = tcase_create("topk");
    tcase_add_test(topk, topk_matches_full_sort_on_random_records);
    tcase_add_test(topk, topk_reads_unaligned_records);
    tcase_add_test(topk, equal_scores_rank_by_smaller_index);
    tcase_add_test(topk, nan_scores_rank_last_by_index);
    tcase_add_test(topk, topk_refuses_bad_arguments);
    tcase_set_timeout(topk, 120);
    suite_add_tcase(s, topk);
    TCase *merge = tcase_create("merge");
    tcase_add_test(merge, merge_equals_sort_of_all_shards);
    tcase_add_test(merge, merge_keeps_shard_fields_and_collapses_duplicates);
    tcase_add_test(merge, merge_refuses_unsorted_lists_and_bad_arguments);
    suite_add_tcase(s, merge);
    TCase *check = tcase_create("check");
    tcase_add_test(check, check_accepts_the_reference_and_refuses_wrong_lists);
    tcase_add_test(check, check_accepts_a_swap_within_f32_rounding);
    suite_add_tcase(s, check);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(scan_ref_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
