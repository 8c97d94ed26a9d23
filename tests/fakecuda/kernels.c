/* fakecuda: the project's kernels in C, bit for bit. Each reads its
 * parameters at the offsets of its .cu source (checked against the cubin
 * when the module loads), checks every address it would touch against the
 * fake's memory (a bad one is the GPU's fault, sticky), and computes what
 * the kernel writes:
 *
 * - k_block_checksum / k_block_verify (kernels/checksum.cu): one CUDA block
 *   per shard block; the terms are a wrapping sum, so one pass over a block
 *   (kn_thread_terms with one "thread") is exactly what 256 threads reduce.
 * - k_scan_f32 / k_scan_f16 (kernels/scan.cu): the same grid-stride split of
 *   records over warps and blocks, each record's lanes' fma chains in their
 *   order and the shuffle butterfly, then each block's k best keys followed
 *   by the empty keys the warp lists start with.
 * - k_scan_reduce: the k best real keys of cand[0, count), then empty keys.
 * - k_extra_fill (tests/gpu/extra_kernel.cu).
 * - k_launch_sum_u32, k_launch_fill, k_launch_fault (tests/gpu/cuda/
 *   launch_kernels.cu): grid-stride loops over every thread of any shape,
 *   so what they compute does not depend on the shape; the sum's atomic
 *   adds wrap, so their order does not matter either.
 *
 * Launch shapes outside a kernel's contract are refused at launch with a
 * line saying so: there a GPU computes garbage, which the fake cannot copy. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"
#include "kernels/blockhash.h"
#include "kernels/checksum.h"
#include "kernels/checksum_part.h"
#include "kernels/scan.h"

static uint64_t fk_p64(const struct fk_launch *l, unsigned int off)
{
    uint64_t v;
    memcpy(&v, l->params + off, 8);
    return v;
}

static uint32_t fk_p32(const struct fk_launch *l, unsigned int off)
{
    uint32_t v;
    memcpy(&v, l->params + off, 4);
    return v;
}

static CUresult fk_shape(const struct fk_launch *l, unsigned int x, unsigned int grid_x)
{
    if (l->block[0] == x && l->block[1] == 1 && l->block[2] == 1 &&
        (grid_x == 0 || (l->grid[0] == grid_x && l->grid[1] == 1 && l->grid[2] == 1)))
        return CUDA_SUCCESS;
    return fk__refuse("cuLaunchKernel", CUDA_ERROR_NOT_SUPPORTED,
                      "%s launched with grid (%u,%u,%u) and block (%u,%u,%u): its contract is "
                      "%s%u blocks of (%u,1,1) threads, other shapes are not emulated",
                      l->fn->name, l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1],
                      l->block[2], grid_x ? "" : "any number of ", grid_x ? grid_x : 0, x);
}

static CUresult fk_misaligned(const char *kernel, const char *what, uint64_t addr,
                              unsigned int align)
{
    fk__log("%s: %s at %#" PRIx64 " is not %u-byte aligned for its loads: "
            "CUDA_ERROR_MISALIGNED_ADDRESS",
            kernel, what, addr, align);
    return CUDA_ERROR_MISALIGNED_ADDRESS;
}

/* ---- kernels/checksum.cu ---- */

static CUresult fk_checksum_check(const struct fk_launch *l)
{
    return fk_shape(l, KN_CHECKSUM_THREADS, 0);
}

/* Block b's offset and length, with the kernel's unsigned arithmetic. */
static void fk_block_extent(uint64_t len, uint32_t bs, uint64_t b, uint64_t *off_p,
                            uint64_t *n_p)
{
    uint64_t off = b * bs;
    *off_p = off;
    *n_p = len - off < bs ? len - off : bs;
}

/* The bytes the first @grid blocks read: [0, end). Offsets grow with the
 * block index and at most one block (offset == len) reads nothing, so the
 * last two blocks decide. */
static uint64_t fk_blocks_end(uint64_t len, uint32_t bs, uint64_t grid)
{
    uint64_t end = 0;
    for (uint64_t b = grid > 2 ? grid - 2 : 0; b < grid; b++) {
        uint64_t off, n;
        fk_block_extent(len, bs, b, &off, &n);
        if (n && off + n > end)
            end = off + n;
    }
    return end;
}

/* Hashes the grid's blocks into @out (one checksum each); a fault code if a
 * block's loads are misaligned. */
static CUresult fk_hash_blocks(const struct fk_launch *l, const unsigned char *data,
                               uint64_t addr, uint64_t *out)
{
    const uint64_t len = fk_p64(l, 8);
    const uint32_t bs = fk_p32(l, 16);
    for (uint64_t b = 0; b < l->grid[0]; b++) {
        uint64_t off, n;
        fk_block_extent(len, bs, b, &off, &n);
        if (n >= 8 && (addr + off) % 8 != 0)
            return fk_misaligned(l->fn->name, "the block", addr + off, 8);
        out[b] = kn_finish(kn_thread_terms(data + off, n, 0, 1), n);
    }
    return CUDA_SUCCESS;
}

static CUresult fk_checksum_run(const struct fk_launch *l)
{
    const char *name = l->fn->name;
    const uint64_t addr = fk_p64(l, 0), len = fk_p64(l, 8), sums = fk_p64(l, 24);
    const uint32_t bs = fk_p32(l, 16);
    const uint64_t grid = l->grid[0];
    struct fk_hold h = {.n = 0};
    unsigned char *data = NULL, *out = NULL;
    CUresult rc = fk__mem_hold(&h, addr, fk_blocks_end(len, bs, grid), 0, name, &data);
    if (rc == CUDA_SUCCESS)
        rc = fk__mem_hold(&h, sums, grid * 8, 1, name, &out);
    if (rc == CUDA_SUCCESS && sums % 8 != 0)
        rc = fk_misaligned(name, "sums", sums, 8);
    uint64_t *hashes = rc == CUDA_SUCCESS ? malloc((size_t)grid * sizeof(*hashes)) : NULL;
    if (rc == CUDA_SUCCESS && !hashes)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS && (rc = fk_hash_blocks(l, data, addr, hashes)) == CUDA_SUCCESS)
        memcpy(out, hashes, (size_t)grid * 8);
    free(hashes);
    fk__mem_release(&h);
    return rc;
}

static CUresult fk_verify_run(const struct fk_launch *l)
{
    const char *name = l->fn->name;
    const uint64_t addr = fk_p64(l, 0), len = fk_p64(l, 8);
    const uint64_t expected = fk_p64(l, 24), result = fk_p64(l, 32);
    const uint32_t bs = fk_p32(l, 16);
    const uint64_t grid = l->grid[0];
    /* blockIdx.y and .z are not read: every such copy of a block counts. */
    const uint64_t copies = (uint64_t)l->grid[1] * l->grid[2];
    struct fk_hold h = {.n = 0};
    unsigned char *data = NULL, *exp = NULL, *res = NULL;
    CUresult rc = fk__mem_hold(&h, addr, fk_blocks_end(len, bs, grid), 0, name, &data);
    if (rc == CUDA_SUCCESS)
        rc = fk__mem_hold(&h, expected, grid * 8, 0, name, &exp);
    if (rc == CUDA_SUCCESS)
        rc = fk__mem_hold(&h, result, KN_VERIFY_RESULT_WORDS * 8, 1, name, &res);
    if (rc == CUDA_SUCCESS && (expected % 8 != 0 || result % 8 != 0))
        rc = fk_misaligned(name, expected % 8 ? "expected" : "result",
                           expected % 8 ? expected : result, 8);
    uint64_t *hashes = rc == CUDA_SUCCESS ? malloc((size_t)grid * sizeof(*hashes)) : NULL;
    if (rc == CUDA_SUCCESS && !hashes)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS && (rc = fk_hash_blocks(l, data, addr, hashes)) == CUDA_SUCCESS) {
        uint64_t first = UINT64_MAX, bad = 0;
        for (uint64_t b = 0; b < grid; b++) {
            uint64_t want;
            memcpy(&want, exp + b * 8, 8);
            if (hashes[b] != want) {
                if (b < first)
                    first = b;
                bad += copies;
            }
        }
        /* The whole grid runs here at once, so "the last block" is this
         * call: it names the first bad block's sums as the kernel does. */
        uint64_t *words = (uint64_t *)(void *)res;
        if (bad) {
            uint64_t cur = __atomic_load_n(&words[KN_VERIFY_FIRST_BAD], __ATOMIC_RELAXED);
            while (first < cur && !__atomic_compare_exchange_n(&words[KN_VERIFY_FIRST_BAD], &cur,
                                                               first, 0, __ATOMIC_RELAXED,
                                                               __ATOMIC_RELAXED))
                ;
            __atomic_add_fetch(&words[KN_VERIFY_BAD_COUNT], bad, __ATOMIC_RELAXED);
        }
        const uint64_t named = __atomic_load_n(&words[KN_VERIFY_FIRST_BAD], __ATOMIC_RELAXED);
        if (named >= grid) {
            __atomic_store_n(&words[KN_VERIFY_BAD_EXPECTED], 0, __ATOMIC_RELAXED);
        } else {
            uint64_t want;
            memcpy(&want, exp + named * 8, 8);
            __atomic_store_n(&words[KN_VERIFY_BAD_ACTUAL], hashes[named], __ATOMIC_RELAXED);
            __atomic_store_n(&words[KN_VERIFY_BAD_EXPECTED], want, __ATOMIC_RELAXED);
        }
    }
    free(hashes);
    fk__mem_release(&h);
    return rc;
}

/* ---- kernels/scan.cu ---- */

#define FK_SCAN_U 4 /* KN_U: records per lane group per step */

static CUresult fk_scan_check(const struct fk_launch *l)
{
    CUresult rc = fk_shape(l, KN_SCAN_THREADS, 0);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct kn_scan_args a;
    memcpy(&a, l->params, sizeof(a));
    if (a.k == 0 || a.k > KN_SCAN_MAX_K || a.dim == 0 || a.group == 0 || a.group > 32 ||
        (a.group & (a.group - 1)))
        return fk__refuse("cuLaunchKernel", CUDA_ERROR_NOT_SUPPORTED,
                          "%s with k %u, dim %u, group %u: outside the contract of "
                          "kernels/scan.h (k 1..%d, dim >= 1, group a power of two up to 32); "
                          "a GPU computes garbage there",
                          l->fn->name, a.k, a.dim, a.group, KN_SCAN_MAX_K);
    return CUDA_SUCCESS;
}

/* The k best keys seen, best first (keys are unique). */
struct fk_topk {
    uint64_t key[KN_SCAN_MAX_K];
    unsigned int n, k;
};

static void fk_topk_offer(struct fk_topk *t, uint64_t key)
{
    if (t->n == t->k && key <= t->key[t->k - 1])
        return;
    unsigned int i = t->n < t->k ? t->n++ : t->k - 1;
    while (i > 0 && t->key[i - 1] < key) {
        t->key[i] = t->key[i - 1];
        i--;
    }
    t->key[i] = key;
}

/* The list a kernel writes: the real keys, then the distinct empty keys
 * k, k-1, ... that every warp's list starts with (kn_topk_init). */
static void fk_topk_write(const struct fk_topk *t, unsigned char *out)
{
    for (unsigned int i = 0; i < t->k; i++) {
        uint64_t key = i < t->n ? t->key[i] : (uint64_t)(t->k - (i - t->n));
        memcpy(out + (size_t)i * 8, &key, 8);
    }
}

struct fk_scan {
    const struct kn_scan_args *a;
    int f16;
    unsigned int e;  /* elements per load */
    unsigned int v;  /* bytes per load */
    uint32_t nvec;   /* loads per record */
    const unsigned char *records;
    const float *q;  /* the query, copied */
    uint64_t rec_bytes;
};

static float fk_elem(const struct fk_scan *s, const unsigned char *rec, uint32_t i)
{
    if (s->f16) {
        uint16_t h;
        memcpy(&h, rec + (size_t)i * 2, 2);
        return kn_f16_to_f32(h);
    }
    float f;
    memcpy(&f, rec + (size_t)i * 4, 4);
    return f;
}

/* Record @r's score exactly as a group of a->group lanes computes it: one
 * fma chain per lane over every group-th load, then the xor butterfly. */
static float fk_score(const struct fk_scan *s, uint64_t r)
{
    const unsigned int g = s->a->group;
    const unsigned char *rec = s->records + r * s->rec_bytes;
    float lane[32], next[32];
    for (unsigned int l = 0; l < g; l++) {
        float acc = 0.0f;
        for (uint32_t v = l; v < s->nvec; v += g)
            for (unsigned int e = 0; e < s->e; e++) {
                uint32_t i = v * s->e + e;
                acc = fmaf(fk_elem(s, rec, i), s->q[i], acc);
            }
        lane[l] = acc;
    }
    for (unsigned int off = g / 2; off > 0; off /= 2) {
        for (unsigned int l = 0; l < g; l++)
            next[l] = lane[l] + lane[l ^ off];
        memcpy(lane, next, g * sizeof(lane[0]));
    }
    return lane[0];
}

/* The load width the kernel's switch picks for @vec_bytes, in elements;
 * 0: an f32 scan with no matching case, which scores nothing. */
static unsigned int fk_scan_elems(int f16, uint32_t vec_bytes, unsigned int *v_p)
{
    if (vec_bytes == 16 || vec_bytes == 8 || vec_bytes == 4) {
        *v_p = vec_bytes;
        return vec_bytes / (f16 ? 2 : 4);
    }
    *v_p = 2;
    return f16 ? 1 : 0;
}

static CUresult fk_scan_run(const struct fk_launch *l)
{
    const char *name = l->fn->name;
    struct kn_scan_args a;
    memcpy(&a, l->params, sizeof(a));
    struct fk_scan s = {.a = &a, .f16 = strcmp(name, KN_K_SCAN_F16) == 0};
    const unsigned int esz = s.f16 ? 2 : 4;
    s.e = fk_scan_elems(s.f16, a.vec_bytes, &s.v);
    s.nvec = s.e ? a.dim / s.e : 0;
    s.rec_bytes = (uint64_t)a.dim * esz;
    const uint64_t grid = l->grid[0];
    struct fk_hold h = {.n = 0};
    unsigned char *qp = NULL, *rp = NULL, *cp = NULL;
    float *q = NULL;
    CUresult rc = CUDA_SUCCESS;
    /* The query: copied to shared memory whole, or loaded in place. */
    uint64_t qbytes = a.query_in_smem ? (uint64_t)a.dim * 4 : (uint64_t)s.nvec * s.e * 4;
    unsigned int qalign = a.query_in_smem || s.e < 2 ? 4 : s.e == 2 ? 8 : 16;
    if (a.query_in_smem && l->smem < a.dim * 4u) {
        fk__log("%s: the query (%u floats) is copied to %u bytes of dynamic shared memory: "
                "out of bounds: CUDA_ERROR_ILLEGAL_ADDRESS",
                name, a.dim, l->smem);
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    if (qbytes && a.query % qalign != 0)
        return fk_misaligned(name, "the query", a.query, qalign);
    const int scans = s.e && a.n > 0;
    if (scans && (a.records % s.v != 0 || (a.n > 1 && s.rec_bytes % s.v != 0)))
        return fk_misaligned(name, "a record", a.records, s.v);
    if ((rc = fk__mem_hold(&h, a.query, qbytes, 0, name, &qp)) == CUDA_SUCCESS && scans)
        rc = fk__mem_hold(&h, a.records, (a.n - 1) * s.rec_bytes + (uint64_t)s.nvec * s.v, 0, name,
                          &rp);
    if (rc == CUDA_SUCCESS)
        rc = fk__mem_hold(&h, a.cand, grid * a.k * 8, 1, name, &cp);
    if (rc == CUDA_SUCCESS && a.cand % 8 != 0)
        rc = fk_misaligned(name, "cand", a.cand, 8);
    if (rc == CUDA_SUCCESS && !(q = calloc(a.dim, sizeof(*q))))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc != CUDA_SUCCESS) {
        fk__mem_release(&h);
        return rc;
    }
    memcpy(q, qp, (size_t)qbytes);
    s.q = q;
    s.records = rp;
    /* Warp w of block b takes steps of per_warp * KN_U records from record
     * (b * WARPS + w) * step, striding over every warp of the grid. */
    const uint64_t per_warp = 32 / a.group, step = per_warp * FK_SCAN_U;
    const uint64_t stride = grid * KN_SCAN_WARPS * step;
    for (uint64_t b = 0; b < grid; b++) {
        struct fk_topk t = {.n = 0, .k = a.k};
        for (uint64_t w = 0; scans && w < KN_SCAN_WARPS; w++)
            for (uint64_t first = (b * KN_SCAN_WARPS + w) * step; first < a.n; first += stride)
                for (uint64_t r = first; r < first + step && r < a.n; r++)
                    fk_topk_offer(&t, kn_scan_key(fk_score(&s, r), a.index_base + r));
        fk_topk_write(&t, cp + b * a.k * 8);
    }
    free(q);
    fk__mem_release(&h);
    return CUDA_SUCCESS;
}

static CUresult fk_reduce_check(const struct fk_launch *l)
{
    CUresult rc = fk_shape(l, KN_SCAN_REDUCE_THREADS, 1);
    uint32_t k = fk_p32(l, 12);
    if (rc == CUDA_SUCCESS && (k == 0 || k > KN_SCAN_MAX_K))
        rc = fk__refuse("cuLaunchKernel", CUDA_ERROR_NOT_SUPPORTED,
                        "%s with k %u: outside the contract of kernels/scan.h (k 1..%d)",
                        l->fn->name, k, KN_SCAN_MAX_K);
    return rc;
}

static CUresult fk_reduce_run(const struct fk_launch *l)
{
    const char *name = l->fn->name;
    const uint64_t cand = fk_p64(l, 0);
    const uint32_t count = fk_p32(l, 8), k = fk_p32(l, 12);
    struct fk_hold h = {.n = 0};
    unsigned char *p = NULL;
    uint64_t span = (uint64_t)(count > k ? count : k) * 8;
    CUresult rc = fk__mem_hold(&h, cand, span, 1, name, &p);
    if (rc == CUDA_SUCCESS && cand % 8 != 0)
        rc = fk_misaligned(name, "cand", cand, 8);
    if (rc != CUDA_SUCCESS) {
        fk__mem_release(&h);
        return rc;
    }
    struct fk_topk t = {.n = 0, .k = k};
    for (uint32_t i = 0; i < count; i++) {
        uint64_t key;
        memcpy(&key, p + (size_t)i * 8, 8);
        if (key < KN_SCAN_KEY_REAL_MIN)
            continue; /* empty keys never enter */
        for (unsigned int j = 0; j < t.n; j++)
            if (t.key[j] == key)
                fk__log("%s: key %#" PRIx64 " appears twice in cand: the kernel assumes unique "
                        "keys and its merge is undefined then (the fake keeps one)",
                        name, key);
        fk_topk_offer(&t, key);
    }
    fk_topk_write(&t, p);
    fk__mem_release(&h);
    return CUDA_SUCCESS;
}

/* ---- tests/gpu/extra_kernel.cu ---- */

static CUresult fk_extra_fill_run(const struct fk_launch *l)
{
    const uint64_t out = fk_p64(l, 0);
    const uint32_t n = fk_p32(l, 8);
    uint64_t threads = (uint64_t)l->grid[0] * l->block[0];
    uint64_t count = threads < n ? threads : n;
    struct fk_hold h = {.n = 0};
    unsigned char *p = NULL;
    CUresult rc = fk__mem_hold(&h, out, count * 4, 1, l->fn->name, &p);
    if (rc == CUDA_SUCCESS && count && out % 4 != 0)
        rc = fk_misaligned(l->fn->name, "out", out, 4);
    for (uint32_t i = 0; rc == CUDA_SUCCESS && i < count; i++) {
        uint32_t v = (i * 2654435761u) ^ 0x9e3779b9u;
        memcpy(p + (size_t)i * 4, &v, 4);
    }
    fk__mem_release(&h);
    return rc;
}

/* ---- tests/gpu/cuda/launch_kernels.cu ---- */

static uint64_t fk_threads(const struct fk_launch *l)
{
    return (uint64_t)l->grid[0] * l->grid[1] * l->grid[2] * l->block[0] * l->block[1] *
           l->block[2];
}

static CUresult fk_launch_sum_run(const struct fk_launch *l)
{
    const uint64_t data = fk_p64(l, 0), bytes = fk_p64(l, 8);
    const uint32_t scale = fk_p32(l, 16);
    const uint64_t out = fk_p64(l, 24), out_len = fk_p64(l, 32);
    const uint64_t words = bytes / 4;
    if (words == 0 || fk_threads(l) == 0)
        return CUDA_SUCCESS; /* no thread counted a word: nothing is written */
    struct fk_hold h = {.n = 0};
    unsigned char *p = NULL, *o = NULL;
    uint64_t out_bytes = out_len >= 16 ? 16 : out_len >= 8 ? 8 : 0;
    CUresult rc = fk__mem_hold(&h, data, words * 4, 0, l->fn->name, &p);
    if (rc == CUDA_SUCCESS && data % 4 != 0)
        rc = fk_misaligned(l->fn->name, "data", data, 4);
    if (rc == CUDA_SUCCESS && out_bytes)
        rc = fk__mem_hold(&h, out, out_bytes, 1, l->fn->name, &o);
    if (rc == CUDA_SUCCESS && out_bytes && out % 8 != 0)
        rc = fk_misaligned(l->fn->name, "out", out, 8);
    if (rc == CUDA_SUCCESS) {
        uint64_t sum = 0, v[2];
        for (uint64_t i = 0; i < words; i++) {
            uint32_t w;
            memcpy(&w, p + i * 4, 4);
            sum += (uint64_t)w * scale;
        }
        if (out_bytes) {
            memcpy(v, o, out_bytes);
            v[0] += sum;
            if (out_bytes == 16)
                v[1] += words;
            memcpy(o, v, out_bytes);
        }
    }
    fk__mem_release(&h);
    return rc;
}

static CUresult fk_launch_fill_run(const struct fk_launch *l)
{
    const uint64_t data = fk_p64(l, 0), words = fk_p64(l, 8) / 4;
    const uint32_t seed = fk_p32(l, 16);
    if (words == 0 || fk_threads(l) == 0)
        return CUDA_SUCCESS;
    struct fk_hold h = {.n = 0};
    unsigned char *p = NULL;
    CUresult rc = fk__mem_hold(&h, data, words * 4, 1, l->fn->name, &p);
    if (rc == CUDA_SUCCESS && data % 4 != 0)
        rc = fk_misaligned(l->fn->name, "data", data, 4);
    for (uint64_t i = 0; rc == CUDA_SUCCESS && i < words; i++) {
        uint32_t v = (uint32_t)i * 0x9e3779b1u ^ seed;
        v ^= v >> 15;
        v *= 0x2c1b3c6du;
        v ^= v >> 12;
        memcpy(p + i * 4, &v, 4);
    }
    fk__mem_release(&h);
    return rc;
}

static CUresult fk_launch_fault_run(const struct fk_launch *l)
{
    const uint64_t where = fk_p64(l, 16);
    struct fk_hold h = {.n = 0};
    unsigned char *p = NULL;
    CUresult rc = fk__mem_hold(&h, where, 4, 1, l->fn->name, &p);
    if (rc == CUDA_SUCCESS && where % 4 != 0)
        rc = fk_misaligned(l->fn->name, "where", where, 4);
    if (rc == CUDA_SUCCESS) {
        uint32_t v = 0xfa17u;
        memcpy(p, &v, 4);
    }
    fk__mem_release(&h);
    return rc;
}

/* ---- the table ---- */

static const struct fk_kernel fk_kernels[] = {
    {KN_K_BLOCK_CHECKSUM, 4, {{0, 0, 8}, {1, 8, 8}, {2, 16, 4}, {3, 24, 8}}, fk_checksum_check,
     fk_checksum_run},
    {KN_K_BLOCK_VERIFY, 5, {{0, 0, 8}, {1, 8, 8}, {2, 16, 4}, {3, 24, 8}, {4, 32, 8}},
     fk_checksum_check, fk_verify_run},
    {KN_K_SCAN_F32, 1, {{0, 0, sizeof(struct kn_scan_args)}}, fk_scan_check, fk_scan_run},
    {KN_K_SCAN_F16, 1, {{0, 0, sizeof(struct kn_scan_args)}}, fk_scan_check, fk_scan_run},
    {KN_K_SCAN_REDUCE, 3, {{0, 0, 8}, {1, 8, 4}, {2, 12, 4}}, fk_reduce_check, fk_reduce_run},
    {"k_extra_fill", 2, {{0, 0, 8}, {1, 8, 4}}, NULL, fk_extra_fill_run},
    {"k_launch_sum_u32", 5, {{0, 0, 8}, {1, 8, 8}, {2, 16, 4}, {3, 24, 8}, {4, 32, 8}}, NULL,
     fk_launch_sum_run},
    {"k_launch_fill", 3, {{0, 0, 8}, {1, 8, 8}, {2, 16, 4}}, NULL, fk_launch_fill_run},
    {"k_launch_fault", 3, {{0, 0, 8}, {1, 8, 8}, {2, 16, 8}}, NULL, fk_launch_fault_run},
};

const struct fk_kernel *fk__kernel_find(const char *name)
{
    for (size_t i = 0; i < sizeof(fk_kernels) / sizeof(fk_kernels[0]); i++)
        if (strcmp(fk_kernels[i].name, name) == 0)
            return &fk_kernels[i];
    return NULL;
}
