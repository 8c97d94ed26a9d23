/* The kernels' exact outputs against those an H200 produced: fixed inputs
 * and launch shapes for every kernel (checksum, verify, both scans with
 * each load width and lane group, denormals, NaN and infinities, the
 * reduce, the extra test kernel, the launch test kernels), each output
 * reduced to a 64-bit digest
 * and compared with conformance.golden. On a real GPU (label gpu) this
 * checks the golden file; against tests/fakecuda it checks that the
 * emulation is bit for bit the kernel. FAKECUDA_CONFORMANCE_PRINT=1 prints
 * the digests instead, to record a golden file on a GPU machine. */
#include <check.h>
#include <cuda.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/blockhash_ref.h"
#include "kernels/checksum.h"
#include "kernels/images.h"
#include "kernels/scan.h"

#define SKIP 77
#define GOLDEN_MAX 512

static CUcontext ctx;
static CUfunction k_sum, k_verify, k_scan[3], k_reduce, k_fill, k_lsum, k_lfill;
static int print_mode;
static struct {
    char name[96];
    uint64_t digest;
} golden[GOLDEN_MAX];
static int ngolden;

#define CU_OK(call)                                                                                \
    do {                                                                                           \
        CUresult cu_ok_rc = (call);                                                                \
        ck_assert_msg(cu_ok_rc == CUDA_SUCCESS, "%s -> CUresult %d", #call, (int)cu_ok_rc);        \
    } while (0)

static uint64_t fnv(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

static uint64_t rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Compares @digest with the golden one of @name (or prints it). */
static void expect_digest(const char *name, uint64_t digest)
{
    if (print_mode) {
        printf("%s %016" PRIx64 "\n", name, digest);
        return;
    }
    for (int i = 0; i < ngolden; i++)
        if (strcmp(golden[i].name, name) == 0) {
            ck_assert_msg(golden[i].digest == digest,
                          "%s: output digest %016" PRIx64 ", the GPU's %016" PRIx64, name, digest,
                          golden[i].digest);
            return;
        }
    ck_abort_msg("%s: no golden digest in %s", name, CONFORMANCE_GOLDEN);
}

static CUdeviceptr dev_copy(const void *host, size_t n, size_t extra)
{
    CUdeviceptr d = 0;
    CU_OK(cuMemAlloc(&d, n + extra));
    CU_OK(cuMemsetD8(d, 0, n + extra));
    if (n)
        CU_OK(cuMemcpyHtoD(d, host, n));
    return d;
}

/* ---- checksum and verify ---- */

START_TEST(block_checksums_equal_the_gpus)
{
    static const size_t lens[] = {1,    7,    8,    9,    15,         16,
                                  17,   100,  4095, 4096, 4097,       3 * 65536 + 5,
                                  (1 << 20) + 13};
    static const uint32_t bss[] = {8, 24, 4096, 4104, 65536};
    const size_t max = (1 << 20) + 64;
    unsigned char *host = malloc(max);
    uint64_t s = 1;
    for (size_t i = 0; i < max; i++)
        host[i] = (unsigned char)rng(&s);
    CUdeviceptr d = dev_copy(host, max, 0);
    CUdeviceptr sums = 0;
    const size_t most = (max / 8 + 1) * 8;
    CU_OK(cuMemAlloc(&sums, most));
    uint64_t *out = malloc(most);
    for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++)
        for (size_t b = 0; b < sizeof(bss) / sizeof(bss[0]); b++)
            for (unsigned int off = 0; off <= 8; off += 8) {
                CUdeviceptr data = d + off;
                unsigned long long len = lens[l];
                unsigned int bs = bss[b];
                unsigned int grid = (unsigned int)((len + bs - 1) / bs);
                void *p[] = {&data, &len, &bs, &sums};
                CU_OK(cuLaunchKernel(k_sum, grid, 1, 1, KN_CHECKSUM_THREADS, 1, 1, 0, NULL, p,
                                     NULL));
                CU_OK(cuMemcpyDtoH(out, sums, (size_t)grid * 8));
                char name[96];
                snprintf(name, sizeof(name), "checksum/len%zu/bs%u/off%u", lens[l], bss[b], off);
                expect_digest(name, fnv(out, (size_t)grid * 8));
            }
    CU_OK(cuMemFree(sums));
    CU_OK(cuMemFree(d));
    free(out);
    free(host);
}
END_TEST

START_TEST(block_verify_results_equal_the_gpus)
{
    const size_t len = 40 * 4096 + 77;
    const unsigned int bs = 4096, grid = 41;
    unsigned char *host = malloc(len);
    uint64_t s = 2;
    for (size_t i = 0; i < len; i++)
        host[i] = (unsigned char)rng(&s);
    CUdeviceptr d = dev_copy(host, len, 0), sums = 0, res = 0;
    CU_OK(cuMemAlloc(&sums, grid * 8));
    CU_OK(cuMemAlloc(&res, KN_VERIFY_RESULT_WORDS * 8));
    unsigned long long l = len;
    unsigned int b = bs;
    void *ps[] = {&d, &l, &b, &sums};
    CU_OK(cuLaunchKernel(k_sum, grid, 1, 1, KN_CHECKSUM_THREADS, 1, 1, 0, NULL, ps, NULL));
    for (int round = 0; round < 3; round++) {
        if (round == 1) {
            host[33 * 4096 + 1000] ^= 0x10;
            host[7 * 4096 + 4095] ^= 0x01;
        } else if (round == 2) {
            host[len - 1] ^= 0x80;
        }
        CU_OK(cuMemcpyHtoD(d, host, len));
        CU_OK(cuMemsetD32Async(res, 0xffffffffu, 2, NULL));
        CU_OK(cuMemsetD32Async(res + 8, 0, 6, NULL));
        void *pv[] = {&d, &l, &b, &sums, &res};
        CU_OK(cuLaunchKernel(k_verify, grid, 1, 1, KN_CHECKSUM_THREADS, 1, 1, 0, NULL, pv, NULL));
        uint64_t r[KN_VERIFY_RESULT_WORDS];
        CU_OK(cuMemcpyDtoH(r, res, sizeof(r)));
        char name[64];
        snprintf(name, sizeof(name), "verify/round%d", round);
        /* The golden digests cover FIRST_BAD and BAD_COUNT; the sums the
         * kernel names are checked against the C reference below. */
        expect_digest(name, fnv(r, 2 * sizeof(r[0])));
    }
    CU_OK(cuMemFree(res));
    CU_OK(cuMemFree(sums));
    CU_OK(cuMemFree(d));
    free(host);
}
END_TEST

/* One verify of @len bytes in blocks of @bs against the reference sums of
 * @clean, with @host as the device's bytes: the result words must name the
 * lowest bad block, count every bad one, and give that block's table entry
 * and its bytes' checksum (kernels/checksum.h). */
static void verify_against_reference(const unsigned char *clean, const unsigned char *host,
                                     size_t len, unsigned int bs)
{
    const uint64_t grid = (len + bs - 1) / bs;
    uint64_t *table = malloc(grid * 8);
    ck_assert_ptr_nonnull(table);
    uint64_t first = KN_VERIFY_NONE, count = 0;
    for (uint64_t i = 0; i < grid; i++) {
        size_t n = len - i * bs < bs ? len - i * bs : bs;
        table[i] = kr_block_checksum(clean + i * bs, n);
        if (kr_block_checksum(host + i * bs, n) != table[i]) {
            if (first == KN_VERIFY_NONE)
                first = i;
            count++;
        }
    }
    CUdeviceptr d = dev_copy(host, len, 0), sums = dev_copy(table, grid * 8, 0), res = 0;
    CU_OK(cuMemAlloc(&res, KN_VERIFY_RESULT_WORDS * 8));
    CU_OK(cuMemsetD32Async(res, 0xffffffffu, 2, NULL));
    CU_OK(cuMemsetD32Async(res + 8, 0, 6, NULL));
    unsigned long long l = len;
    unsigned int b = bs;
    void *pv[] = {&d, &l, &b, &sums, &res};
    CU_OK(cuLaunchKernel(k_verify, (unsigned int)grid, 1, 1, KN_CHECKSUM_THREADS, 1, 1, 0, NULL, pv,
                         NULL));
    uint64_t r[KN_VERIFY_RESULT_WORDS];
    CU_OK(cuMemcpyDtoH(r, res, sizeof(r)));
    ck_assert_uint_eq(r[KN_VERIFY_FIRST_BAD], first);
    ck_assert_uint_eq(r[KN_VERIFY_BAD_COUNT], count);
    if (first == KN_VERIFY_NONE) {
        ck_assert_uint_eq(r[KN_VERIFY_BAD_EXPECTED], 0);
    } else {
        size_t n = len - first * bs < bs ? len - first * bs : bs;
        ck_assert_uint_eq(r[KN_VERIFY_BAD_EXPECTED], table[first]);
        ck_assert_uint_eq(r[KN_VERIFY_BAD_ACTUAL], kr_block_checksum(host + first * bs, n));
    }
    CU_OK(cuMemFree(res));
    CU_OK(cuMemFree(sums));
    CU_OK(cuMemFree(d));
    free(table);
}

START_TEST(block_verify_names_the_first_bad_blocks_sums)
{
    /* 41 blocks with a short tail; then 6000 blocks of 64 bytes, whose
     * last-finishing block is seldom the first bad one. */
    static const struct {
        size_t len;
        unsigned int bs;
        size_t flips[3]; /* byte offsets to flip, 0-terminated after the first */
    } cases[] = {
        {40 * 4096 + 77, 4096, {0}},
        {40 * 4096 + 77, 4096, {33 * 4096 + 1000, 7 * 4096 + 4095}},
        {40 * 4096 + 77, 4096, {40 * 4096 + 76}},
        {40 * 4096 + 77, 4096, {5}},
        {6000 * 64, 64, {0}},
        {6000 * 64, 64, {5999 * 64 + 3}},
        {6000 * 64, 64, {5999 * 64, 1}},
        {6000 * 64, 64, {3001 * 64 + 9, 3000 * 64 + 63}},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const size_t len = cases[c].len;
        unsigned char *clean = malloc(len), *host = malloc(len);
        ck_assert(clean && host);
        uint64_t s = 11 + c;
        for (size_t i = 0; i < len; i++)
            clean[i] = (unsigned char)rng(&s);
        memcpy(host, clean, len);
        const bool flip = c % 4 != 0; /* the first case of each size is clean */
        for (size_t f = 0; flip && f < 3 && (f == 0 || cases[c].flips[f]); f++)
            host[cases[c].flips[f]] ^= 0x20;
        verify_against_reference(clean, host, len, cases[c].bs);
        free(clean);
        free(host);
    }
}
END_TEST

/* ---- the scans ---- */

enum fill { FILL_RANDOM, FILL_TINY, FILL_SPECIAL };

struct scan_case {
    uint32_t type, dim, k, vec, group, grid;
    uint64_t n, index_base;
    unsigned int offset; /* bytes past an aligned address */
    enum fill fill;
};

static uint16_t f16_bits(uint64_t r)
{
    uint16_t sign = (uint16_t)((r & 1) << 15), man = (uint16_t)((r >> 1) & 0x3ff);
    if (((r >> 11) & 63) == 0)
        return (uint16_t)(sign | (man ? man : 1)); /* subnormal */
    return (uint16_t)(sign | ((12 + (r >> 17) % 5) << 10) | man);
}

static float f32_value(uint64_t r, enum fill fill)
{
    float mag = 0.125f + (float)(r >> 40) * (1.875f / 16777216.0f);
    if (fill == FILL_TINY)
        mag *= 1e-37f; /* products and sums in the subnormal range */
    if (fill == FILL_SPECIAL && (r >> 8) % 97 == 0)
        return (r >> 16) & 1 ? INFINITY : -INFINITY;
    if (fill == FILL_SPECIAL && (r >> 8) % 89 == 0)
        return -0.0f;
    return (r & 1) ? -mag : mag;
}

static void scan_run(const struct scan_case *c, const char *name)
{
    const uint32_t esz = c->type == KN_SCAN_F32 ? 4 : 2;
    const size_t rec_bytes = (size_t)c->dim * esz, bytes = c->n * rec_bytes;
    unsigned char *rec = malloc(bytes + 16);
    float *q = malloc(c->dim * sizeof(float));
    uint64_t s = c->n * 31 + c->dim * 7 + c->k + c->fill;
    for (size_t i = 0; i < c->n * c->dim; i++) {
        uint64_t r = rng(&s);
        if (c->type == KN_SCAN_F32) {
            float f = f32_value(r, c->fill);
            memcpy(rec + i * 4, &f, 4);
        } else {
            uint16_t h = f16_bits(r);
            if (c->fill == FILL_SPECIAL && (r >> 20) % 101 == 0)
                h = (r >> 30) & 1 ? 0x7c00 : 0x7e01; /* inf, NaN */
            memcpy(rec + i * 2, &h, 2);
        }
    }
    for (uint32_t i = 0; i < c->dim; i++)
        q[i] = f32_value(rng(&s), c->fill == FILL_TINY ? FILL_RANDOM : c->fill);
    CUdeviceptr d = 0, dq = 0, cand = 0;
    CU_OK(cuMemAlloc(&d, bytes + c->offset + 16));
    CU_OK(cuMemcpyHtoD(d + c->offset, rec, bytes));
    dq = dev_copy(q, c->dim * sizeof(float), 16);
    const size_t cand_bytes = (size_t)c->grid * c->k * 8;
    CU_OK(cuMemAlloc(&cand, cand_bytes));
    const uint32_t in_smem = c->dim <= KN_SCAN_SMEM_QUERY_MAX_DIM;
    struct kn_scan_args a = {.records = d + c->offset,
                             .n = c->n,
                             .index_base = c->index_base,
                             .query = dq,
                             .cand = cand,
                             .dim = c->dim,
                             .k = c->k,
                             .vec_bytes = c->vec,
                             .group = c->group,
                             .query_in_smem = in_smem};
    void *p[] = {&a};
    CU_OK(cuLaunchKernel(k_scan[c->type], c->grid, 1, 1, KN_SCAN_THREADS, 1, 1,
                         kn_scan_smem_bytes(c->dim, in_smem), NULL, p, NULL));
    uint64_t *out = malloc(cand_bytes);
    CU_OK(cuMemcpyDtoH(out, cand, cand_bytes));
    expect_digest(name, fnv(out, cand_bytes));
    CU_OK(cuMemFree(cand));
    CU_OK(cuMemFree(dq));
    CU_OK(cuMemFree(d));
    free(out);
    free(q);
    free(rec);
}

static const struct scan_case scan_cases[] = {
    /* type, dim, k, vec, group, grid, n, index_base, offset, fill */
    {KN_SCAN_F32, 1, 64, 4, 1, 3, 1000, 0, 0, FILL_RANDOM},
    {KN_SCAN_F32, 3, 10, 4, 4, 5, 10007, 12345, 0, FILL_RANDOM},
    {KN_SCAN_F32, 17, 64, 4, 32, 17, 4099, 0, 0, FILL_RANDOM},
    {KN_SCAN_F32, 128, 64, 16, 32, 264, 5000, 7, 0, FILL_RANDOM},
    {KN_SCAN_F32, 768, 32, 16, 32, 5, 3001, 0, 0, FILL_RANDOM},
    {KN_SCAN_F32, 4096, 64, 16, 32, 2, 1001, 0, 0, FILL_RANDOM},
    {KN_SCAN_F32, 9000, 16, 16, 32, 7, 300, 0, 0, FILL_RANDOM},
    {KN_SCAN_F32, 1023, 63, 4, 32, 9, 2049, 0, 0, FILL_RANDOM},
    {KN_SCAN_F32, 100, 64, 16, 32, 1, 20, 0, 0, FILL_RANDOM},
    {KN_SCAN_F32, 8, 64, 8, 1, 6, 9999, 0, 8, FILL_RANDOM},
    {KN_SCAN_F32, 8, 64, 4, 8, 6, 9999, 0, 4, FILL_RANDOM},
    {KN_SCAN_F32, 64, 64, 16, 2, 11, 3000, 0, 0, FILL_RANDOM},
    {KN_SCAN_F32, 64, 40, 4, 16, 11, 3000, 0, 0, FILL_RANDOM},
    {KN_SCAN_F32, 8, 8, 2, 1, 2, 100, 0, 0, FILL_RANDOM}, /* no matching load: empty lists */
    {KN_SCAN_F32, 96, 64, 16, 8, 13, 7001, 0, 0, FILL_TINY},
    {KN_SCAN_F32, 40, 64, 16, 16, 13, 7001, 0, 0, FILL_SPECIAL},
    {KN_SCAN_F16, 1, 64, 2, 1, 3, 999, 0, 0, FILL_RANDOM},
    {KN_SCAN_F16, 3, 10, 2, 4, 5, 10007, 0, 0, FILL_RANDOM},
    {KN_SCAN_F16, 6, 33, 4, 4, 9, 5000, 0, 0, FILL_RANDOM},
    {KN_SCAN_F16, 12, 64, 8, 4, 9, 4097, 0, 0, FILL_RANDOM},
    {KN_SCAN_F16, 1000, 64, 16, 32, 13, 3000, 0, 0, FILL_RANDOM},
    {KN_SCAN_F16, 4096, 64, 16, 32, 2, 1001, 0, 0, FILL_RANDOM},
    {KN_SCAN_F16, 9000, 16, 16, 32, 7, 300, 0, 0, FILL_RANDOM},
    {KN_SCAN_F16, 77, 50, 2, 32, 19, 33333, 0, 0, FILL_RANDOM},
    {KN_SCAN_F16, 16, 64, 8, 2, 6, 9999, 0, 8, FILL_RANDOM},
    {KN_SCAN_F16, 16, 64, 4, 4, 6, 9999, 0, 4, FILL_RANDOM},
    {KN_SCAN_F16, 16, 64, 2, 16, 6, 9999, 0, 6, FILL_RANDOM},
    {KN_SCAN_F16, 40, 64, 16, 8, 13, 7001, 0xfffe0000ull, 0, FILL_SPECIAL},
};

START_TEST(scan_candidates_equal_the_gpus)
{
    for (size_t i = 0; i < sizeof(scan_cases) / sizeof(scan_cases[0]); i++) {
        const struct scan_case *c = &scan_cases[i];
        char name[96];
        snprintf(name, sizeof(name), "scan/%s/n%" PRIu64 "/dim%u/k%u/v%u/g%u/grid%u/off%u/fill%d",
                 c->type == KN_SCAN_F32 ? "f32" : "f16", c->n, c->dim, c->k, c->vec, c->group,
                 c->grid, c->offset, (int)c->fill);
        scan_run(c, name);
    }
}
END_TEST

START_TEST(scan_reduce_equals_the_gpus)
{
    static const uint32_t counts[] = {1, 64, 1000, 265 * 64};
    static const uint32_t ks[] = {1, 10, 64};
    for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
        for (size_t ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ki++) {
            uint32_t count = counts[ci], k = ks[ki];
            size_t n = count > k ? count : k;
            uint64_t *keys = malloc(n * 8);
            uint64_t s = count * 3 + k;
            for (uint32_t i = 0; i < count; i++) {
                uint64_t r = rng(&s);
                /* Unique real keys (the index is i), and some empty ones. */
                keys[i] = r % 5 == 0 ? (uint64_t)(r % 64) + 1
                                     : ((r >> 32 | 0x00800000u) << 32) | (uint32_t)~i;
            }
            for (size_t i = count; i < n; i++)
                keys[i] = 0;
            CUdeviceptr d = dev_copy(keys, n * 8, 0);
            void *p[] = {&d, &count, &k};
            CU_OK(cuLaunchKernel(k_reduce, 1, 1, 1, KN_SCAN_REDUCE_THREADS, 1, 1, 0, NULL, p,
                                 NULL));
            CU_OK(cuMemcpyDtoH(keys, d, (size_t)k * 8));
            char name[64];
            snprintf(name, sizeof(name), "reduce/count%u/k%u", count, k);
            expect_digest(name, fnv(keys, (size_t)k * 8));
            CU_OK(cuMemFree(d));
            free(keys);
        }
}
END_TEST

START_TEST(extra_fill_equals_the_gpus)
{
    if (!k_fill) {
        printf("extra kernel not loaded (%s): case not run\n", EXTRA_CUBIN);
        return;
    }
    const unsigned int n = 100003, total = n + 300;
    CUdeviceptr d = 0;
    CU_OK(cuMemAlloc(&d, total * 4));
    CU_OK(cuMemsetD8(d, 0x11, total * 4));
    unsigned int nn = n;
    void *p[] = {&d, &nn};
    CU_OK(cuLaunchKernel(k_fill, (n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, p, NULL));
    unsigned int *out = malloc(total * 4);
    CU_OK(cuMemcpyDtoH(out, d, total * 4));
    expect_digest("extra_fill/256", fnv(out, total * 4));
    CU_OK(cuMemsetD8(d, 0x22, total * 4));
    CU_OK(cuLaunchKernel(k_fill, (n + 63) / 64, 2, 1, 64, 2, 1, 0, NULL, p, NULL));
    CU_OK(cuMemcpyDtoH(out, d, total * 4));
    expect_digest("extra_fill/64x2", fnv(out, total * 4));
    free(out);
    CU_OK(cuMemFree(d));
}
END_TEST

/* tests/gpu/cuda/launch_kernels.cu over launch shapes of every kind: its
 * output must not depend on the shape. */
START_TEST(launch_kernels_equal_the_gpus)
{
    if (!k_lsum || !k_lfill) {
        printf("launch kernels not loaded (%s): case not run\n", LAUNCH_CUBIN);
        return;
    }
    static const struct {
        unsigned g[3], b[3];
    } shapes[] = {
        {{1, 1, 1}, {1, 1, 1}},   {{7, 1, 1}, {96, 1, 1}}, {{3, 2, 2}, {32, 4, 2}},
        {{64, 1, 1}, {256, 1, 1}}, {{1, 1, 5}, {5, 1, 3}},
    };
    const size_t bytes_max = (1u << 20) + 7;
    unsigned char *host = malloc(bytes_max);
    uint64_t seed = 0x6c61756e6368ull;
    for (size_t i = 0; i < bytes_max; i++)
        host[i] = (unsigned char)rng(&seed);
    CUdeviceptr d = dev_copy(host, bytes_max, 0), out = 0;
    CU_OK(cuMemAlloc(&out, 256));
    const unsigned long long lens[] = {0, 3, 4, 4099, bytes_max};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            unsigned long long bytes = lens[li], out_len = li % 2 ? 8 : 16;
            unsigned scale = (unsigned)(si * 7919 + li * 104729 + 1);
            CU_OK(cuMemsetD8(out, 0, 256));
            void *p[] = {&d, &bytes, &scale, &out, &out_len};
            CU_OK(cuLaunchKernel(k_lsum, shapes[si].g[0], shapes[si].g[1], shapes[si].g[2],
                                 shapes[si].b[0], shapes[si].b[1], shapes[si].b[2], 0, NULL, p,
                                 NULL));
            uint64_t r[4];
            CU_OK(cuMemcpyDtoH(r, out, sizeof r));
            char name[64];
            snprintf(name, sizeof name, "launch_sum/shape%zu/len%llu", si, bytes);
            expect_digest(name, fnv(r, sizeof r));
        }
    CUdeviceptr f = 0;
    const size_t fbytes = 65536 + 12;
    CU_OK(cuMemAlloc(&f, fbytes + 4));
    unsigned char *got = malloc(fbytes + 4);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        unsigned long long bytes = fbytes - si; /* a tail that is not a whole word */
        unsigned fseed = (unsigned)(0xabcd1234u * (si + 1));
        CU_OK(cuMemsetD8(f, 0x5a, fbytes + 4));
        void *p[] = {&f, &bytes, &fseed};
        CU_OK(cuLaunchKernel(k_lfill, shapes[si].g[0], shapes[si].g[1], shapes[si].g[2],
                             shapes[si].b[0], shapes[si].b[1], shapes[si].b[2], 0, NULL, p, NULL));
        CU_OK(cuMemcpyDtoH(got, f, fbytes + 4));
        char name[64];
        snprintf(name, sizeof name, "launch_fill/shape%zu", si);
        expect_digest(name, fnv(got, fbytes + 4));
    }
    free(got);
    free(host);
    CU_OK(cuMemFree(f));
    CU_OK(cuMemFree(out));
    CU_OK(cuMemFree(d));
}
END_TEST

static void golden_read(void)
{
    FILE *f = fopen(CONFORMANCE_GOLDEN, "r");
    if (!f)
        return;
    char line[256];
    while (ngolden < GOLDEN_MAX && fgets(line, sizeof(line), f)) {
        if (line[0] == '#' || line[0] == '\n')
            continue;
        if (sscanf(line, "%95s %" SCNx64, golden[ngolden].name, &golden[ngolden].digest) == 2)
            ngolden++;
    }
    fclose(f);
}

static CUfunction image_kernel(const char *image, const char *kernel)
{
    for (size_t i = 0; i < kn_image_count; i++) {
        if (strcmp(kn_images[i].name, image) != 0)
            continue;
        CUmodule m = NULL;
        CUfunction fn = NULL;
        if (cuModuleLoadData(&m, kn_images[i].data) == CUDA_SUCCESS &&
            cuModuleGetFunction(&fn, m, kernel) == CUDA_SUCCESS)
            return fn;
    }
    return NULL;
}

static CUfunction file_kernel(const char *path, const char *kernel)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    static unsigned char image[1 << 20];
    size_t n = fread(image, 1, sizeof(image), f);
    fclose(f);
    CUmodule m = NULL;
    CUfunction fn = NULL;
    if (n < 64 || cuModuleLoadData(&m, image) != CUDA_SUCCESS ||
        cuModuleGetFunction(&fn, m, kernel) != CUDA_SUCCESS)
        return NULL;
    return fn;
}

int main(void)
{
    CUdevice dev = 0;
    int count = 0;
    CUresult rc = cuInit(0);
    if (rc == CUDA_SUCCESS)
        rc = cuDeviceGetCount(&count);
    if (rc != CUDA_SUCCESS || count < 1) {
        printf("SKIP fakecuda_conformance: no CUDA device (CUresult %d, %d devices)\n", (int)rc,
               count);
        return SKIP;
    }
    const char *pm = getenv("FAKECUDA_CONFORMANCE_PRINT");
    print_mode = pm && strcmp(pm, "1") == 0;
    golden_read();
    if (!print_mode && ngolden == 0) {
        printf("fakecuda_conformance: no digests in %s\n", CONFORMANCE_GOLDEN);
        return EXIT_FAILURE;
    }
    if (cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) {
        printf("fakecuda_conformance: cannot open device 0\n");
        return EXIT_FAILURE;
    }
    k_sum = image_kernel(KN_CHECKSUM_IMAGE, KN_K_BLOCK_CHECKSUM);
    k_verify = image_kernel(KN_CHECKSUM_IMAGE, KN_K_BLOCK_VERIFY);
    k_scan[KN_SCAN_F32] = image_kernel(KN_SCAN_IMAGE, KN_K_SCAN_F32);
    k_scan[KN_SCAN_F16] = image_kernel(KN_SCAN_IMAGE, KN_K_SCAN_F16);
    k_reduce = image_kernel(KN_SCAN_IMAGE, KN_K_SCAN_REDUCE);
    k_fill = file_kernel(EXTRA_CUBIN, "k_extra_fill");
    k_lsum = file_kernel(LAUNCH_CUBIN, "k_launch_sum_u32");
    k_lfill = file_kernel(LAUNCH_CUBIN, "k_launch_fill");
    if (!k_sum || !k_verify || !k_scan[KN_SCAN_F32] || !k_scan[KN_SCAN_F16] || !k_reduce) {
        printf("fakecuda_conformance: the embedded images did not load\n");
        return EXIT_FAILURE;
    }
    Suite *s = suite_create("fakecuda_conformance");
    TCase *tc = tcase_create("kernels");
    tcase_add_test(tc, block_checksums_equal_the_gpus);
    tcase_add_test(tc, block_verify_results_equal_the_gpus);
    tcase_add_test(tc, block_verify_names_the_first_bad_blocks_sums);
    tcase_add_test(tc, scan_candidates_equal_the_gpus);
    tcase_add_test(tc, scan_reduce_equals_the_gpus);
    tcase_add_test(tc, extra_fill_equals_the_gpus);
    tcase_add_test(tc, launch_kernels_equal_the_gpus);
    tcase_set_timeout(tc, 300);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, print_mode ? CK_SILENT : CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
