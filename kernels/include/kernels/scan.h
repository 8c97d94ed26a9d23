/* The vector scan: dot-product similarity of one query against every record
 * of a shard, keeping the k best. The launch contract of kernels/scan.cu,
 * the ranking key shared by the kernels, the C reference and the host code,
 * and the f16 decode. Plain C99 over <stdint.h>; also compiles under nvcc,
 * where the functions become __host__ __device__.
 *
 * Ranking: a larger score ranks first; equal scores rank by the smaller
 * (shard, index). -0 equals +0. NaN ranks below every number (NaNs among
 * themselves by index). The order is a total order on (score, shard,
 * index), so every top-k is unique and deterministic.
 *
 *   k_scan_f32(struct kn_scan_args a) / k_scan_f16(struct kn_scan_args a)
 *     grid  = any number of blocks of KN_SCAN_THREADS threads;
 *     dynamic shared memory = kn_scan_smem_bytes(a.dim, a.query_in_smem);
 *     scores records [0, n) (n x dim elements, row-major, at a.records, in
 *     device memory or mapped host memory) against a.query (dim floats,
 *     device memory), score = dot product accumulated in f32 (f16 elements
 *     converted exactly to f32), and writes each block's k best as ranking
 *     keys of record index_base + i to a.cand[blockIdx.x * k + 0 .. k-1],
 *     best first; slots past the block's record count hold keys that are
 *     < KN_SCAN_KEY_REAL_MIN.
 *
 *   k_scan_reduce(unsigned long long *cand, unsigned int count, unsigned int k)
 *     grid = 1 block of KN_SCAN_REDUCE_THREADS; the k best keys among
 *     cand[0 .. count) (count >= k) are written back to cand[0 .. k), best
 *     first. The host decodes them with kn_scan_key_score / kn_scan_key_index.
 *
 * The host validates every argument; see gpu/include/gpu/scan.h. */
#ifndef KERNELS_SCAN_H
#define KERNELS_SCAN_H

#include <stdint.h>

#if defined(__CUDACC__)
#define KN_SCAN_FN static __host__ __device__ __forceinline__
#else
#define KN_SCAN_FN static inline
#endif

#define KN_SCAN_IMAGE "scan"
#define KN_K_SCAN_F32 "k_scan_f32"
#define KN_K_SCAN_F16 "k_scan_f16"
#define KN_K_SCAN_REDUCE "k_scan_reduce"

/* The record types; the values are stagingd's sd_record_type (shard.h). */
enum kn_scan_type {
    KN_SCAN_F32 = 1,
    KN_SCAN_F16 = 2,
};

/* Threads per block of the scan kernels (compiled with this launch bound). */
#define KN_SCAN_THREADS 256
#define KN_SCAN_WARPS (KN_SCAN_THREADS / 32)
#define KN_SCAN_REDUCE_THREADS 1024
/* k: 1 .. KN_SCAN_MAX_K. Each warp keeps a sorted list of this many keys. */
#define KN_SCAN_MAX_K 64
/* Records per launch: indices live in 32 bits of the key, one value is
 * reserved, so index_base + n <= KN_SCAN_MAX_RECORDS. */
#define KN_SCAN_MAX_RECORDS 0xffffffffULL
/* The query goes to shared memory up to this many elements (32 KiB);
 * beyond it the kernel reads it through the caches. */
#define KN_SCAN_SMEM_QUERY_MAX_DIM 8192u

/* One result: a record's score and where the record is. */
struct kn_scan_hit {
    float score;
    uint32_t shard; /* 0 from a scan; set by kr_topk_merge from its shard ids */
    uint64_t index; /* record index within the shard */
};

/* The scan kernels' one parameter, passed by value. Addresses are device
 * addresses (a CUdeviceptr or a mapped host pointer's device address). */
struct kn_scan_args {
    uint64_t records;    /* n x dim elements; aligned to vec_bytes */
    uint64_t n;          /* records in this launch */
    uint64_t index_base; /* index of the first record; index_base + n <= MAX_RECORDS */
    uint64_t query;      /* dim floats, 16-byte aligned */
    uint64_t cand;       /* gridDim.x * k keys out */
    uint32_t dim;        /* >= 1 */
    uint32_t k;          /* 1 .. KN_SCAN_MAX_K */
    uint32_t vec_bytes;  /* bytes per load: 16, 8, 4 (or 2 for f16); divides dim * elem size */
    uint32_t group;      /* lanes per record: 1, 2, 4, 8, 16 or 32 */
    uint32_t query_in_smem;
    uint32_t reserved;
};

/* ---- ranking keys ----
 * A key is (score key << 32) | ~index: a larger key ranks first. Score keys
 * of numbers are >= 0x007fffff, NaN's is 1; keys below KN_SCAN_KEY_REAL_MIN
 * mark empty slots. */
#define KN_SCAN_KEY_NAN 1u
#define KN_SCAN_KEY_REAL_MIN (1ULL << 32)

/* The order-preserving 32-bit key of a score (see the ranking above). */
KN_SCAN_FN uint32_t kn_scan_score_key(float score)
{
    union {
        float f;
        uint32_t u;
    } v;
    v.f = score + 0.0f; /* -0 + +0 is +0 in round-to-nearest */
    if ((v.u & 0x7fffffffu) > 0x7f800000u)
        return KN_SCAN_KEY_NAN;
    return (v.u & 0x80000000u) ? ~v.u : (v.u | 0x80000000u);
}

/* The score a score key stands for (NaN for KN_SCAN_KEY_NAN). */
KN_SCAN_FN float kn_scan_key_score(uint32_t key)
{
    union {
        float f;
        uint32_t u;
    } v;
    if (key == KN_SCAN_KEY_NAN)
        v.u = 0x7fc00000u;
    else
        v.u = (key & 0x80000000u) ? (key & 0x7fffffffu) : ~key;
    return v.f;
}

/* The ranking key of record @index (< KN_SCAN_MAX_RECORDS) with @score. */
KN_SCAN_FN uint64_t kn_scan_key(float score, uint64_t index)
{
    return ((uint64_t)kn_scan_score_key(score) << 32) | (uint32_t) ~(uint32_t)index;
}

/* The record index of a key >= KN_SCAN_KEY_REAL_MIN. */
KN_SCAN_FN uint64_t kn_scan_key_index(uint64_t key)
{
    return (uint32_t) ~(uint32_t)key;
}

/* Whether hit @a ranks strictly before hit @b (the order above). */
KN_SCAN_FN int kn_scan_hit_before(const struct kn_scan_hit *a, const struct kn_scan_hit *b)
{
    uint32_t ka = kn_scan_score_key(a->score), kb = kn_scan_score_key(b->score);
    if (ka != kb)
        return ka > kb;
    if (a->shard != b->shard)
        return a->shard < b->shard;
    return a->index < b->index;
}

/* ---- f16 ---- */

/* IEEE binary16 to binary32, exact (subnormals, infinities, NaN payloads). */
KN_SCAN_FN float kn_f16_to_f32(uint16_t h)
{
    union {
        float f;
        uint32_t u;
    } v;
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) {
        v.u = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        v.u = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        v.u = sign;
    } else {
        /* Subnormal: man * 2^-24, normalised. */
        exp = 113u;
        while (!(man & 0x400u)) {
            man <<= 1;
            exp--;
        }
        v.u = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
    return v.f;
}

/* ---- sizes and error bound ---- */

/* Bytes per element of @type: 4, 2, or 0 for an unknown type. */
KN_SCAN_FN uint32_t kn_scan_elem_size(uint32_t type)
{
    return type == KN_SCAN_F32 ? 4u : type == KN_SCAN_F16 ? 2u : 0u;
}

/* Dynamic shared memory of one scan block: the query when it is there. */
KN_SCAN_FN uint32_t kn_scan_smem_bytes(uint32_t dim, uint32_t query_in_smem)
{
    return query_in_smem ? (dim + 3u) / 4u * 16u : 0u;
}

/* The most roundings on any path from a product to a score: a lane of a
 * group of G lanes runs ceil(nvec / G) loads of e elements through one fma
 * chain (nvec * e = dim), then log2(G) shuffle adds. G < 32 only when
 * nvec <= G, so the chain is at most dim / 32 + e + 5 with e <= 8. */
KN_SCAN_FN uint32_t kn_scan_rounding_depth(uint32_t dim)
{
    return (dim + 31u) / 32u + 8u + 5u;
}

/* The bound the kernels' scores keep: |score - exact| <= bound * sum |q_i x_i|,
 * bound = gamma_L = L u / (1 - L u), u = 2^-24, L = kn_scan_rounding_depth
 * (standard forward error of a sum of products with L roundings per path;
 * the inputs are exact in f32, f16 included). 8.4e-6 at dim 4096. */
KN_SCAN_FN double kn_scan_error_bound(uint32_t dim)
{
    const double lu = (double)kn_scan_rounding_depth(dim) * (1.0 / 16777216.0);
    return lu / (1.0 - lu);
}

#endif /* KERNELS_SCAN_H */
