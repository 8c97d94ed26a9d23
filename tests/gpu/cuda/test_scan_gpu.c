/* The vector scan kernels on a real GPU against the f64 C reference: f32
 * and f16 records, odd dimensions, unaligned records, device, mapped and
 * registered host memory (zero-copy), ties, NaN, chunked submissions and
 * the merge across shards. Every output array is poisoned first and checked
 * to be written exactly where it should. Run through gpu_gate; main exits 77
 * without a device. No fork: a CUDA process must not fork after cuInit. */
#include <check.h>
#include <cuda.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "check_main.h"
#include "gpu_test_util.h"
#include "gpu/ga.h"
#include "gpu/scan.h"
#include "kernels/scan.h"
#include "kernels/scan_ref.h"
#include "scan_test_util.h"

/* Normwise relative error of the scores against f64 (METHOD.md): f32 sums
 * of exact f32 products land far below this. */
#define REL_ERR_MAX 1e-5

static struct ga_device *dev;
static char captured[16384];
static double worst_rel_err;

#define CU_OK(call)                                                                                \
    do {                                                                                           \
        CUresult cu_ok_rc = (call);                                                                \
        ck_assert_msg(cu_ok_rc == CUDA_SUCCESS, "%s -> CUresult %d", #call, (int)cu_ok_rc);        \
    } while (0)

static void capture_fn(void *ctx, int level, const char *subsys, const char *line)
{
    (void)subsys;
    (void)ctx;
    size_t used = strlen(captured);
    if (used + 1 < sizeof(captured))
        snprintf(captured + used, sizeof(captured) - used, "[%d] %s\n", level, line);
}

static struct base_log_sink capture_sink = {.fn = capture_fn, .max_level = BASE_LOG_DEBUG};

static void device_open(void)
{
    captured[0] = '\0';
    base_log_default_set(&capture_sink);
    struct ga_device_opts opts = {.ordinal = 0};
    int rc = ga_device_open(&opts, &dev);
    ck_assert_msg(rc == 0, "ga_device_open: %d\n%s", rc, captured);
    ck_assert_int_eq(ga_device_make_current(dev), 0);
}

static void device_close(void)
{
    ga_device_close(dev);
    dev = NULL;
    base_log_default_set(NULL);
}

enum mem { MEM_DEVICE, MEM_MAPPED, MEM_REGISTERED };
static const char *const mem_names[] = {"device", "mapped", "registered"};

/* Host records and where the GPU reads them. */
struct buf {
    enum mem mem;
    unsigned char *host; /* the records, at host + offset */
    size_t bytes;        /* allocated, offset included */
    CUdeviceptr dptr;    /* device memory, or the host buffer's device address */
};

static void buf_alloc(struct buf *b, enum mem mem, size_t bytes)
{
    b->mem = mem;
    b->bytes = (bytes + 4095) / 4096 * 4096;
    b->dptr = 0;
    if (mem == MEM_MAPPED) {
        void *p = NULL;
        CU_OK(cuMemHostAlloc(&p, b->bytes, CU_MEMHOSTALLOC_DEVICEMAP));
        b->host = p;
        CU_OK(cuMemHostGetDevicePointer(&b->dptr, p, 0));
        return;
    }
    b->host = aligned_alloc(4096, b->bytes);
    ck_assert_ptr_nonnull(b->host);
    memset(b->host, 0x7f, b->bytes); /* NaN patterns in any padding */
    if (mem == MEM_REGISTERED) {
        CU_OK(cuMemHostRegister(b->host, b->bytes,
                                CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE));
        CU_OK(cuMemHostGetDevicePointer(&b->dptr, b->host, 0));
    } else {
        CU_OK(cuMemAlloc(&b->dptr, b->bytes));
    }
}

/* Makes what the host wrote visible to the GPU. */
static void buf_sync(struct buf *b)
{
    if (b->mem == MEM_DEVICE)
        CU_OK(cuMemcpyHtoD(b->dptr, b->host, b->bytes));
}

static void buf_free(struct buf *b)
{
    if (b->mem == MEM_MAPPED) {
        CU_OK(cuMemFreeHost(b->host));
        return;
    }
    if (b->mem == MEM_REGISTERED)
        CU_OK(cuMemHostUnregister(b->host));
    else
        CU_OK(cuMemFree(b->dptr));
    free(b->host);
}

struct scan_case {
    uint32_t type;
    uint64_t n;
    uint32_t dim;
    uint32_t k;
};

static const char *type_name(uint32_t type)
{
    return type == KN_SCAN_F32 ? "f32" : "f16";
}

/* Poisoned hits: k + 1 entries of 0xa5 bytes. */
static struct kn_scan_hit *hits_poisoned(uint32_t k)
{
    struct kn_scan_hit *h = malloc((k + 1) * sizeof(*h));
    ck_assert_ptr_nonnull(h);
    memset(h, 0xa5, (k + 1) * sizeof(*h));
    return h;
}

static int hit_is_poison(const struct kn_scan_hit *h)
{
    static unsigned char poison[sizeof(struct kn_scan_hit)];
    memset(poison, 0xa5, sizeof(poison));
    return memcmp(h, poison, sizeof(poison)) == 0;
}

/* The GPU's top-k of @c's records at @b (+@offset) against the reference:
 * the count, every entry written and nothing past it, and kr_scan_check. */
static void expect_gpu_topk_valid(const struct scan_case *c, struct buf *b, size_t offset,
                                  const float *q, void *stream, const char *what)
{
    struct kn_scan_hit *hits = hits_poisoned(c->k);
    captured[0] = '\0';
    int rc = ga_scan_topk(dev, b->dptr + offset, c->type, c->n, c->dim, q, c->k, stream, hits);
    const uint64_t want = c->n < c->k ? c->n : c->k;
    ck_assert_msg(rc == (int)want, "%s: rc %d, expected %llu\n%s", what, rc,
                  (unsigned long long)want, captured);
    for (uint32_t i = 0; i <= c->k; i++)
        ck_assert_msg(hit_is_poison(&hits[i]) == (i >= want), "%s: hit %u %s", what, i,
                      i < want ? "not written" : "written past min(n, k)");
    struct kr_scan_shard sh = {b->host + offset, c->type, c->dim, c->n, q};
    char why[1024] = "";
    double rel = -1;
    rc = kr_scan_check(&sh, c->k, NULL, hits, (size_t)want, &rel, why, sizeof(why));
    ck_assert_msg(rc == 0, "%s: %s", what, why);
    ck_assert_msg(rel <= REL_ERR_MAX, "%s: relative error %.3g over %.1g", what, rel, REL_ERR_MAX);
    if (rel > worst_rel_err)
        worst_rel_err = rel;
    printf("  %-40s rel err %.2e (bound per score %.2e * sum|qx|)\n", what, rel,
           kn_scan_error_bound(c->dim));
    free(hits);
}

static void run_case(const struct scan_case *c, enum mem mem, size_t offset, uint64_t seed,
                     void *stream)
{
    const size_t bytes = (size_t)c->n * c->dim * kn_scan_elem_size(c->type);
    struct buf b;
    buf_alloc(&b, mem, bytes + offset);
    st_fill_records(b.host + offset, c->type, c->n, c->dim, seed);
    buf_sync(&b);
    float *q = malloc(c->dim * sizeof(float));
    ck_assert_ptr_nonnull(q);
    st_fill_query(q, c->dim, seed);
    char what[128];
    snprintf(what, sizeof(what), "%s n=%llu dim=%u k=%u %s+%zu", type_name(c->type),
             (unsigned long long)c->n, c->dim, c->k, mem_names[mem], offset);
    expect_gpu_topk_valid(c, &b, offset, q, stream, what);
    free(q);
    buf_free(&b);
}

/* n not a multiple of any tile, dims from 1 to past the shared-memory query
 * (8192), k from 1 to 64, n < k and n == k. */
static const struct scan_case f32_cases[] = {
    {KN_SCAN_F32, 1, 1, 1},        {KN_SCAN_F32, 1000, 1, 64},     {KN_SCAN_F32, 10007, 3, 10},
    {KN_SCAN_F32, 777, 5, 1},      {KN_SCAN_F32, 4099, 17, 64},    {KN_SCAN_F32, 50001, 128, 64},
    {KN_SCAN_F32, 3001, 768, 32},  {KN_SCAN_F32, 1001, 4096, 64},  {KN_SCAN_F32, 20, 100, 64},
    {KN_SCAN_F32, 64, 64, 64},     {KN_SCAN_F32, 1 << 20, 16, 64}, {KN_SCAN_F32, 1500, 9000, 16},
    {KN_SCAN_F32, 2049, 1023, 63},
};
static const struct scan_case f16_cases[] = {
    {KN_SCAN_F16, 1, 1, 1},        {KN_SCAN_F16, 999, 1, 64},     {KN_SCAN_F16, 10007, 3, 10},
    {KN_SCAN_F16, 5000, 6, 33},    {KN_SCAN_F16, 4097, 12, 64},   {KN_SCAN_F16, 3000, 1000, 64},
    {KN_SCAN_F16, 1001, 4096, 64}, {KN_SCAN_F16, 20, 100, 64},    {KN_SCAN_F16, 64, 64, 64},
    {KN_SCAN_F16, 1 << 20, 8, 64}, {KN_SCAN_F16, 1500, 9000, 16}, {KN_SCAN_F16, 33333, 77, 50},
};
#define NCASES(a) (sizeof(a) / sizeof(a[0]))

START_TEST(f32_topk_matches_reference_in_device_memory)
{
    for (size_t i = 0; i < NCASES(f32_cases); i++)
        run_case(&f32_cases[i], MEM_DEVICE, 0, 100 + i, NULL);
}
END_TEST

START_TEST(f16_topk_matches_reference_in_device_memory)
{
    for (size_t i = 0; i < NCASES(f16_cases); i++)
        run_case(&f16_cases[i], MEM_DEVICE, 0, 200 + i, NULL);
}
END_TEST

START_TEST(topk_matches_reference_in_mapped_host_memory)
{
    for (size_t i = 0; i < NCASES(f32_cases); i += 2)
        run_case(&f32_cases[i], MEM_MAPPED, 0, 300 + i, NULL);
    for (size_t i = 1; i < NCASES(f16_cases); i += 2)
        run_case(&f16_cases[i], MEM_MAPPED, 0, 400 + i, NULL);
}
END_TEST

START_TEST(topk_matches_reference_in_registered_host_memory)
{
    const struct scan_case c32 = {KN_SCAN_F32, 70001, 96, 64};
    const struct scan_case c16 = {KN_SCAN_F16, 70001, 200, 40};
    run_case(&c32, MEM_REGISTERED, 0, 500, NULL);
    run_case(&c16, MEM_REGISTERED, 0, 501, NULL);
}
END_TEST

START_TEST(unaligned_records_take_narrower_loads)
{
    /* 32-byte rows at offsets that allow only 8-, 4- or 2-byte loads. */
    const struct scan_case c32 = {KN_SCAN_F32, 9999, 8, 64};
    const struct scan_case c16 = {KN_SCAN_F16, 9999, 16, 64};
    run_case(&c32, MEM_DEVICE, 4, 600, NULL);
    run_case(&c32, MEM_DEVICE, 8, 601, NULL);
    run_case(&c32, MEM_MAPPED, 12, 602, NULL);
    run_case(&c16, MEM_DEVICE, 2, 603, NULL);
    run_case(&c16, MEM_DEVICE, 4, 604, NULL);
    run_case(&c16, MEM_MAPPED, 6, 605, NULL);
    run_case(&c16, MEM_DEVICE, 8, 606, NULL);
}
END_TEST

START_TEST(user_stream_gives_the_same_result)
{
    CUstream st = NULL;
    CU_OK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    const struct scan_case c = {KN_SCAN_F16, 123457, 40, 64};
    run_case(&c, MEM_DEVICE, 0, 700, st);
    run_case(&c, MEM_MAPPED, 0, 700, st);
    CU_OK(cuStreamDestroy(st));
}
END_TEST

/* Many copies of 5 rows spread over the whole grid: copies score
 * bit-identically, so the top 64 are the best row's first 64 copies. */
static void expect_ties_by_index(uint32_t type)
{
    const uint64_t n = 200003;
    const uint32_t dim = 24, elem = kn_scan_elem_size(type), k = 64;
    unsigned char rows[5 * 24 * 4]; /* 5 packed records */
    float q[24];
    st_fill_records(rows, type, 5, dim, 800 + type);
    st_fill_query(q, dim, 801);
    struct buf b;
    buf_alloc(&b, MEM_DEVICE, n * dim * elem);
    unsigned char *row_of = malloc(n);
    ck_assert_ptr_nonnull(row_of);
    uint64_t s = 802;
    for (uint64_t r = 0; r < n; r++) {
        row_of[r] = (unsigned char)(st_rng_next(&s) % 5);
        memcpy(b.host + r * dim * elem, rows + row_of[r] * dim * elem, dim * elem);
    }
    buf_sync(&b);
    int best = 0;
    for (int i = 1; i < 5; i++)
        if (kr_scan_score(rows, type, dim, i, q, NULL) >
            kr_scan_score(rows, type, dim, best, q, NULL))
            best = i;
    struct kn_scan_hit *hits = hits_poisoned(k);
    int rc = ga_scan_topk(dev, b.dptr, type, n, dim, q, k, NULL, hits);
    ck_assert_msg(rc == (int)k, "rc %d\n%s", rc, captured);
    uint64_t r = 0;
    for (uint32_t i = 0; i < k; i++, r++) {
        while (row_of[r] != best)
            r++;
        ck_assert_msg(hits[i].index == r, "%s tie %u: index %llu, expected %llu", type_name(type),
                      i, (unsigned long long)hits[i].index, (unsigned long long)r);
        ck_assert_uint_eq(memcmp(&hits[i].score, &hits[0].score, 4), 0);
    }
    ck_assert(hit_is_poison(&hits[k]));
    free(hits);
    free(row_of);
    buf_free(&b);
}

START_TEST(equal_scores_rank_by_smaller_index_across_blocks)
{
    expect_ties_by_index(KN_SCAN_F32);
    expect_ties_by_index(KN_SCAN_F16);
}
END_TEST

START_TEST(nan_records_rank_last)
{
    for (uint32_t type = KN_SCAN_F32; type <= KN_SCAN_F16; type++) {
        const struct scan_case c = {type, 100, 8, 64};
        const uint32_t elem = kn_scan_elem_size(type);
        struct buf b;
        buf_alloc(&b, MEM_DEVICE, c.n * c.dim * elem);
        st_fill_records(b.host, type, c.n, c.dim, 900);
        for (uint64_t r = 0; r < c.n; r += 2) { /* 50 NaN records: 0, 2, 4, ... */
            unsigned char *e = b.host + (r * c.dim + 3) * elem;
            if (type == KN_SCAN_F32) {
                float nan = NAN;
                memcpy(e, &nan, 4);
            } else {
                uint16_t nan = 0x7e00;
                memcpy(e, &nan, 2);
            }
        }
        buf_sync(&b);
        float q[8];
        st_fill_query(q, c.dim, 901);
        expect_gpu_topk_valid(&c, &b, 0, q, NULL, type == KN_SCAN_F32 ? "f32 NaN" : "f16 NaN");
        struct kn_scan_hit hits[64];
        ck_assert_int_eq(ga_scan_topk(dev, b.dptr, type, c.n, c.dim, q, 64, NULL, hits), 64);
        for (int i = 0; i < 50; i++)
            ck_assert(!isnan(hits[i].score) && hits[i].index % 2 == 1);
        for (int i = 50; i < 64; i++) {
            ck_assert(isnan(hits[i].score));
            ck_assert_uint_eq(hits[i].index, (uint64_t)(i - 50) * 2);
        }
        buf_free(&b);
    }
}
END_TEST

/* Scores that rise (or fall) with the index: every record beats the list
 * (or almost none does), the two extremes of the merge path. */
START_TEST(monotone_scores_stress_the_list_merges)
{
    const uint64_t n = (1 << 20) + 3;
    const uint32_t dim = 16;
    float q[16];
    st_fill_query(q, dim, 1000);
    for (int dir = 0; dir < 2; dir++) {
        struct buf b;
        buf_alloc(&b, MEM_DEVICE, n * dim * 4);
        float *rec = (float *)b.host;
        for (uint64_t r = 0; r < n; r++) {
            uint64_t t = dir ? n - 1 - r : r;
            float c = 0.5f + (float)t / (float)(2 * n);
            for (uint32_t i = 0; i < dim; i++)
                rec[r * dim + i] = q[i] > 0 ? c : -c;
        }
        buf_sync(&b);
        const struct scan_case cs = {KN_SCAN_F32, n, dim, 64};
        expect_gpu_topk_valid(&cs, &b, 0, q, NULL, dir ? "descending scores" : "ascending scores");
        buf_free(&b);
    }
}
END_TEST

START_TEST(chunked_submissions_equal_one_scan)
{
    const struct scan_case c = {KN_SCAN_F32, 300007, 100, 64};
    struct buf b;
    buf_alloc(&b, MEM_DEVICE, c.n * c.dim * 4);
    st_fill_records(b.host, c.type, c.n, c.dim, 1100);
    buf_sync(&b);
    float q[100];
    st_fill_query(q, c.dim, 1101);
    struct kn_scan_hit whole[64], first[64];
    ck_assert_int_eq(ga_scan_topk(dev, b.dptr, c.type, c.n, c.dim, q, 64, NULL, whole), 64);
    ck_assert_int_eq(ga_scan_topk(dev, b.dptr, c.type, 1000, c.dim, q, 64, NULL, first), 64);

    CUstream st = NULL;
    CU_OK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    struct ga_scan *scan = NULL;
    ck_assert_int_eq(ga_scan_create(dev, c.type, c.dim, q, 64, &scan), 0);
    /* Uneven chunks, numbered by their first record. */
    static const uint64_t cuts[] = {0, 1, 1000, 1001, 77777, 200000, 300007};
    for (size_t i = 0; i + 1 < sizeof(cuts) / sizeof(cuts[0]); i++)
        ck_assert_int_eq(
            ga_scan_submit(scan, b.dptr + cuts[i] * c.dim * 4, cuts[i + 1] - cuts[i], cuts[i], st),
            0);
    struct kn_scan_hit *got = hits_poisoned(64);
    ck_assert_int_eq(ga_scan_finish(scan, st, got), 64);
    ck_assert_int_eq(memcmp(got, whole, sizeof(whole)), 0);
    /* finish started a new top-k: only what comes after counts. */
    memset(got, 0xa5, 65 * sizeof(*got));
    /* Submissions on two streams, ordered by the caller. */
    ck_assert_int_eq(ga_scan_submit(scan, b.dptr, 600, 0, st), 0);
    CU_OK(cuStreamSynchronize(st));
    ck_assert_int_eq(ga_scan_submit(scan, b.dptr + 600 * c.dim * 4, 400, 600, NULL), 0);
    ck_assert_int_eq(ga_scan_finish(scan, NULL, got), 64);
    ck_assert_int_eq(memcmp(got, first, sizeof(first)), 0);
    /* Fewer records than k. */
    memset(got, 0xa5, 65 * sizeof(*got));
    ck_assert_int_eq(ga_scan_submit(scan, b.dptr + 5 * c.dim * 4, 10, 5, st), 0);
    ck_assert_int_eq(ga_scan_finish(scan, st, got), 10);
    ck_assert(hit_is_poison(&got[10]));
    for (int i = 0; i < 10; i++)
        ck_assert(got[i].index >= 5 && got[i].index < 15);
    ck_assert_int_eq(ga_scan_finish(scan, st, got), 0);
    ga_scan_destroy(scan);
    CU_OK(cuStreamDestroy(st));
    free(got);
    buf_free(&b);
}
END_TEST

START_TEST(shards_merge_to_the_top_of_their_union)
{
    enum { SHARDS = 3, K = 50 };
    static const uint64_t ns[SHARDS] = {40000, 17, 123457};
    const uint32_t dim = 33, type = KN_SCAN_F16, elem = 2;
    float q[33];
    st_fill_query(q, dim, 1200);
    const uint64_t total = ns[0] + ns[1] + ns[2];
    unsigned char *all = malloc(total * dim * elem);
    ck_assert_ptr_nonnull(all);
    struct kn_scan_hit lists[SHARDS][K];
    const struct kn_scan_hit *lp[SHARDS];
    size_t counts[SHARDS];
    const uint32_t ids[SHARDS] = {0, 1, 2};
    uint64_t base[SHARDS];
    uint64_t at = 0;
    for (int s = 0; s < SHARDS; s++) {
        struct buf b;
        buf_alloc(&b, s == 1 ? MEM_MAPPED : MEM_DEVICE, ns[s] * dim * elem);
        st_fill_records(b.host, type, ns[s], dim, 1201 + s);
        buf_sync(&b);
        memcpy(all + at * dim * elem, b.host, ns[s] * dim * elem);
        base[s] = at;
        at += ns[s];
        int rc = ga_scan_topk(dev, b.dptr, type, ns[s], dim, q, K, NULL, lists[s]);
        ck_assert_int_eq(rc, (int)(ns[s] < K ? ns[s] : K));
        counts[s] = (size_t)rc;
        lp[s] = lists[s];
        buf_free(&b);
    }
    struct kn_scan_hit merged[K];
    ck_assert_int_eq(kr_topk_merge(lp, counts, SHARDS, ids, K, merged), K);
    /* As hits of the union: shard s's record i is record base[s] + i. */
    struct kn_scan_hit as_union[K];
    for (int i = 0; i < K; i++) {
        ck_assert_uint_lt(merged[i].shard, SHARDS);
        as_union[i] = merged[i];
        as_union[i].index = base[merged[i].shard] + merged[i].index;
        as_union[i].shard = 0;
    }
    /* Order by score then global index equals order by score then (shard,
     * index): the shards are laid out in id order. */
    struct kr_scan_shard sh = {all, type, dim, total, q};
    char why[1024] = "";
    ck_assert_msg(kr_scan_check(&sh, K, NULL, as_union, K, NULL, why, sizeof(why)) == 0, "%s", why);
    free(all);
}
END_TEST

START_TEST(bad_arguments_are_refused_before_any_launch)
{
    CUdeviceptr d = 0;
    CU_OK(cuMemAlloc(&d, 1 << 16));
    float q[16];
    st_fill_query(q, 16, 1);
    struct kn_scan_hit hits[KN_SCAN_MAX_K + 2];
    memset(hits, 0x5a, sizeof(hits));
    ck_assert_int_eq(ga_scan_topk(dev, d, 3, 10, 16, q, 4, NULL, hits), -EINVAL);
    ck_assert_int_eq(ga_scan_topk(dev, d, KN_SCAN_F32, 10, 0, q, 4, NULL, hits), -EINVAL);
    ck_assert_int_eq(ga_scan_topk(dev, d, KN_SCAN_F32, 10, 16, q, 0, NULL, hits), -EINVAL);
    ck_assert_int_eq(ga_scan_topk(dev, d, KN_SCAN_F32, 10, 16, q, KN_SCAN_MAX_K + 1, NULL, hits),
                     -EINVAL);
    ck_assert_int_eq(ga_scan_topk(dev, d, KN_SCAN_F32, 10, 16, NULL, 4, NULL, hits), -EINVAL);
    ck_assert_int_eq(ga_scan_topk(dev, d, KN_SCAN_F32, 10, 16, q, 4, NULL, NULL), -EINVAL);
    ck_assert_int_eq(ga_scan_topk(NULL, d, KN_SCAN_F32, 10, 16, q, 4, NULL, hits), -EINVAL);
    ck_assert_int_eq(ga_scan_topk(dev, 0, KN_SCAN_F32, 10, 16, q, 4, NULL, hits), -EINVAL);
    ck_assert_int_eq(ga_scan_topk(dev, d + 2, KN_SCAN_F32, 10, 16, q, 4, NULL, hits), -EINVAL);
    ck_assert_int_eq(ga_scan_topk(dev, d + 1, KN_SCAN_F16, 10, 16, q, 4, NULL, hits), -EINVAL);
    ck_assert_int_eq(ga_scan_topk(dev, d, KN_SCAN_F32, KN_SCAN_MAX_RECORDS, 16, q, 4, NULL, hits),
                     -EINVAL);
    ck_assert_msg(strstr(captured, "expected k in 1..64, found 65"), "%s", captured);
    ck_assert_msg(strstr(captured, "4-byte aligned device address"), "%s", captured);
    for (size_t i = 0; i < sizeof(hits) / sizeof(hits[0]); i++)
        ck_assert_uint_eq(hits[i].shard, 0x5a5a5a5a);
    /* No records: no launch, no hits. */
    ck_assert_int_eq(ga_scan_topk(dev, d, KN_SCAN_F32, 0, 16, q, 4, NULL, hits), 0);
    ck_assert_uint_eq(hits[0].shard, 0x5a5a5a5a);

    struct ga_scan *scan = NULL;
    ck_assert_int_eq(ga_scan_create(dev, KN_SCAN_F16, 16, q, 65, &scan), -EINVAL);
    ck_assert_ptr_null(scan);
    ck_assert_int_eq(ga_scan_create(dev, KN_SCAN_F16, 16, q, 8, &scan), 0);
    ck_assert_int_eq(ga_scan_submit(scan, d, 10, KN_SCAN_MAX_RECORDS - 5, NULL), -EINVAL);
    ck_assert_int_eq(ga_scan_submit(scan, d + 1, 10, 0, NULL), -EINVAL);
    ck_assert_int_eq(ga_scan_submit(NULL, d, 10, 0, NULL), -EINVAL);
    ck_assert_int_eq(ga_scan_finish(scan, NULL, NULL), -EINVAL);
    ck_assert_int_eq(ga_scan_finish(scan, NULL, hits), 0); /* nothing submitted */
    ga_scan_destroy(scan);
    ga_scan_destroy(NULL);
    CU_OK(cuMemFree(d));
}
END_TEST

START_TEST(scan_kernels_are_loaded_at_open)
{
    ck_assert_msg(strstr(captured, "kernel k_scan_f32 loaded") &&
                      strstr(captured, "kernel k_scan_f16 loaded") &&
                      strstr(captured, "kernel k_scan_reduce loaded"),
                  "%s", captured);
}
END_TEST

static Suite *ga_scan_suite(void)
{
    Suite *s = suite_create("ga_scan");
    TCase *tc = tcase_create("scan");
    tcase_add_checked_fixture(tc, device_open, device_close);
    tcase_add_test(tc, scan_kernels_are_loaded_at_open);
    tcase_add_test(tc, f32_topk_matches_reference_in_device_memory);
    tcase_add_test(tc, f16_topk_matches_reference_in_device_memory);
    tcase_add_test(tc, topk_matches_reference_in_mapped_host_memory);
    tcase_add_test(tc, topk_matches_reference_in_registered_host_memory);
    tcase_add_test(tc, unaligned_records_take_narrower_loads);
    tcase_add_test(tc, user_stream_gives_the_same_result);
    tcase_add_test(tc, equal_scores_rank_by_smaller_index_across_blocks);
    tcase_add_test(tc, nan_records_rank_last);
    tcase_add_test(tc, monotone_scores_stress_the_list_merges);
    tcase_add_test(tc, chunked_submissions_equal_one_scan);
    tcase_add_test(tc, shards_merge_to_the_top_of_their_union);
    tcase_add_test(tc, bad_arguments_are_refused_before_any_launch);
    tcase_set_timeout(tc, 300);
    suite_add_tcase(s, tc);
    return s;
}

static void report(int failed)
{
    (void)failed;
    printf("ga_scan: worst normwise relative error of the scores %.3g (limit %.0e)\n",
           worst_rel_err, REL_ERR_MAX);
}

LEASE_CHECK_MAIN_DONE(ga_scan_suite, tu_cuda_probe, report)
