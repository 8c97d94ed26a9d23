/* The vector scan on the GPU: dot products of a query with every record and
 * the k best kept; the contract is in include/kernels/scan.h, the C
 * reference in ref/scan_ref.c.
 *
 * A group of G lanes scores one record: each lane loads every G-th vector of
 * vec_bytes (16 where the alignment allows) and runs one f32 fma chain, and
 * the group adds its lanes with shuffles. Each warp handles U records per
 * group per step, so U independent loads are in flight per lane; the grid
 * strides over the records. Every warp keeps its k best ranking keys, sorted,
 * in shared memory; a lane's key enters a small buffer only when it beats the
 * list's last, so after the first few thousand records almost nothing does.
 * Keys are unique (they carry the index), so a merge places each key by
 * counting the keys above it, with no tie cases. */
#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels/scan.h"

#define KN_FULL 0xffffffffu
#define KN_U 4 /* records per group per step */
/* Blocks a multiprocessor must hold: this caps registers at 128 a thread.
 * Without the hint ptxas capped k_scan_f32 at 64 registers and spilled. */
#define KN_MIN_BLOCKS 2

static_assert(sizeof(struct kn_scan_args) == 64, "kn_scan_args layout is shared with C");
static_assert(sizeof(struct kn_scan_hit) == 16, "kn_scan_hit layout is shared with C");
static_assert(KN_SCAN_MAX_K % 32 == 0 && KN_SCAN_MAX_K <= 64, "the merge holds 2 list keys a lane");
static_assert(KN_SCAN_THREADS % 32 == 0 && KN_SCAN_REDUCE_THREADS % 32 == 0, "whole warps");

/* One warp's k best keys, best first, and the keys waiting to enter. */
struct kn_topk {
    unsigned long long list[KN_SCAN_MAX_K];
    unsigned long long buf[32];
};

/* Empties the buffer (@cnt keys) into the list; returns the new threshold
 * (the list's last key). Called by all lanes of the warp. */
static __device__ __forceinline__ unsigned long long kn_topk_merge(struct kn_topk *t,
                                                                   unsigned int cnt, unsigned int k)
{
    const unsigned int lane = threadIdx.x % 32;
    __syncwarp();
    const unsigned long long b = lane < cnt ? t->buf[lane] : 0ULL;
    const unsigned long long x0 = lane < k ? t->list[lane] : 0ULL;
    const unsigned long long x1 = lane + 32 < k ? t->list[lane + 32] : 0ULL;
    unsigned int r0 = lane, r1 = lane + 32, rb = 0;
    /* How many list keys beat b: the list is sorted, best first. */
    unsigned int lo = 0, hi = k;
    while (lo < hi) {
        const unsigned int mid = (lo + hi) / 2;
        if (t->list[mid] > b)
            lo = mid + 1;
        else
            hi = mid;
    }
    rb = lo;
    for (unsigned int j = 0; j < cnt; j++) {
        const unsigned long long bj = __shfl_sync(KN_FULL, b, j);
        r0 += bj > x0;
        r1 += bj > x1;
        rb += bj > b;
    }
    __syncwarp();
    if (lane < k && r0 < k)
        t->list[r0] = x0;
    if (lane + 32 < k && r1 < k)
        t->list[r1] = x1;
    if (lane < cnt && rb < k)
        t->list[rb] = b;
    __syncwarp();
    return t->list[k - 1];
}

/* Offers each lane's @key (0: none) to the warp's list. Called by all lanes
 * with warp-uniform @cnt and @thr, which it updates. */
static __device__ __forceinline__ void kn_topk_offer(struct kn_topk *t, unsigned long long key,
                                                     unsigned int k, unsigned int &cnt,
                                                     unsigned long long &thr)
{
    /* Empty keys never enter: they repeat across lists. */
    const bool hit = key > thr && key >= KN_SCAN_KEY_REAL_MIN;
    const unsigned int m = __ballot_sync(KN_FULL, hit);
    if (m == 0)
        return;
    const unsigned int h = __popc(m);
    if (cnt + h > 32) {
        thr = kn_topk_merge(t, cnt, k);
        cnt = 0;
    }
    const unsigned int lane = threadIdx.x % 32;
    if (hit)
        t->buf[cnt + __popc(m & ((1u << lane) - 1u))] = key;
    cnt += h;
}

static __device__ __forceinline__ void kn_topk_init(struct kn_topk *t, unsigned int k)
{
    const unsigned int lane = threadIdx.x % 32;
    /* Distinct empty keys k..1, sorted like real ones and below them all. */
    for (unsigned int i = lane; i < k; i += 32)
        t->list[i] = k - i;
    __syncwarp();
}

/* Warp 0 takes every other warp's list into its own; the block's k best end
 * in lists[0]. Called by all threads of the block. */
static __device__ void kn_topk_block_merge(struct kn_topk *lists, unsigned int nwarps,
                                           unsigned int k)
{
    __syncthreads();
    if (threadIdx.x >= 32)
        return;
    const unsigned int lane = threadIdx.x;
    unsigned int cnt = 0;
    unsigned long long thr = lists[0].list[k - 1];
    for (unsigned int w = 1; w < nwarps; w++)
        for (unsigned int i = 0; i < k; i += 32)
            kn_topk_offer(&lists[0], i + lane < k ? lists[w].list[i + lane] : 0ULL, k, cnt, thr);
    if (cnt)
        kn_topk_merge(&lists[0], cnt, k);
}

/* ---- loads: one vector of E elements as floats ---- */

template <typename T, int V> struct kn_vec;

template <> struct kn_vec<float, 16> {
    static constexpr int E = 4;
    static __device__ __forceinline__ void load(const unsigned char *p, float *x)
    {
        const float4 v = __ldg((const float4 *)p);
        x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
    }
};
template <> struct kn_vec<float, 8> {
    static constexpr int E = 2;
    static __device__ __forceinline__ void load(const unsigned char *p, float *x)
    {
        const float2 v = __ldg((const float2 *)p);
        x[0] = v.x, x[1] = v.y;
    }
};
template <> struct kn_vec<float, 4> {
    static constexpr int E = 1;
    static __device__ __forceinline__ void load(const unsigned char *p, float *x)
    {
        x[0] = __ldg((const float *)p);
    }
};

static __device__ __forceinline__ void kn_half2_unpack(unsigned int w, float *x)
{
    __half2 h;
    memcpy(&h, &w, 4);
    const float2 f = __half22float2(h);
    x[0] = f.x, x[1] = f.y;
}
template <> struct kn_vec<__half, 16> {
    static constexpr int E = 8;
    static __device__ __forceinline__ void load(const unsigned char *p, float *x)
    {
        const uint4 v = __ldg((const uint4 *)p);
        kn_half2_unpack(v.x, x), kn_half2_unpack(v.y, x + 2);
        kn_half2_unpack(v.z, x + 4), kn_half2_unpack(v.w, x + 6);
    }
};
template <> struct kn_vec<__half, 8> {
    static constexpr int E = 4;
    static __device__ __forceinline__ void load(const unsigned char *p, float *x)
    {
        const uint2 v = __ldg((const uint2 *)p);
        kn_half2_unpack(v.x, x), kn_half2_unpack(v.y, x + 2);
    }
};
template <> struct kn_vec<__half, 4> {
    static constexpr int E = 2;
    static __device__ __forceinline__ void load(const unsigned char *p, float *x)
    {
        kn_half2_unpack(__ldg((const unsigned int *)p), x);
    }
};
template <> struct kn_vec<__half, 2> {
    static constexpr int E = 1;
    static __device__ __forceinline__ void load(const unsigned char *p, float *x)
    {
        x[0] = __half2float(__ldg((const __half *)p));
    }
};

/* E query floats from element @e on (@e a multiple of E; q 16-byte aligned). */
template <int E> static __device__ __forceinline__ void kn_query_load(const float *q, float *y)
{
    if constexpr (E % 4 == 0) {
#pragma unroll
        for (int i = 0; i < E; i += 4) {
            const float4 v = *(const float4 *)(q + i);
            y[i] = v.x, y[i + 1] = v.y, y[i + 2] = v.z, y[i + 3] = v.w;
        }
    } else if constexpr (E == 2) {
        const float2 v = *(const float2 *)q;
        y[0] = v.x, y[1] = v.y;
    } else {
        y[0] = q[0];
    }
}

/* Scores this warp's records and offers them to its list. */
template <typename T, int V>
static __device__ __forceinline__ void kn_scan_records(const struct kn_scan_args &a, const float *q,
                                                       struct kn_topk *t)
{
    constexpr int E = kn_vec<T, V>::E;
    const unsigned int lane = threadIdx.x % 32;
    const unsigned int G = a.group;
    const unsigned int l = lane & (G - 1);
    const unsigned int g = lane / G;
    const unsigned int per_warp = 32 / G;
    const unsigned int nvec = a.dim / E;
    const uint64_t rec_bytes = (uint64_t)a.dim * sizeof(T);
    const uint64_t step_records = (uint64_t)per_warp * KN_U;
    const uint64_t warp_id = (uint64_t)blockIdx.x * KN_SCAN_WARPS + threadIdx.x / 32;
    const uint64_t warps = (uint64_t)gridDim.x * KN_SCAN_WARPS;
    const unsigned char *base = (const unsigned char *)a.records;
    unsigned int cnt = 0;
    unsigned long long thr = t->list[a.k - 1];

    for (uint64_t first = warp_id * step_records; first < a.n; first += warps * step_records) {
        float acc[KN_U];
        const unsigned char *p[KN_U];
        bool valid[KN_U];
#pragma unroll
        for (int u = 0; u < KN_U; u++) {
            const uint64_t r = first + (uint64_t)u * per_warp + g;
            valid[u] = r < a.n;
            p[u] = base + (valid[u] ? r : 0) * rec_bytes;
            acc[u] = 0.0f;
        }
#pragma unroll 2
        for (unsigned int v = l; v < nvec; v += G) {
            float y[E], x[KN_U][E];
            kn_query_load<E>(q + (size_t)v * E, y);
#pragma unroll
            for (int u = 0; u < KN_U; u++)
                if (valid[u])
                    kn_vec<T, V>::load(p[u] + (size_t)v * V, x[u]);
#pragma unroll
            for (int u = 0; u < KN_U; u++)
                if (valid[u]) {
#pragma unroll
                    for (int e = 0; e < E; e++)
                        acc[u] = fmaf(x[u][e], y[e], acc[u]);
                }
        }
#pragma unroll
        for (int u = 0; u < KN_U; u++) {
            for (unsigned int off = G / 2; off > 0; off /= 2)
                acc[u] += __shfl_xor_sync(KN_FULL, acc[u], off);
            const uint64_t r = first + (uint64_t)u * per_warp + g;
            const unsigned long long key =
                valid[u] && l == 0 ? kn_scan_key(acc[u], a.index_base + r) : 0ULL;
            kn_topk_offer(t, key, a.k, cnt, thr);
        }
    }
    if (cnt)
        kn_topk_merge(t, cnt, a.k);
}

template <typename T> static __device__ __forceinline__ void kn_scan(const struct kn_scan_args &a)
{
    extern __shared__ float4 kn_smem_query[];
    __shared__ struct kn_topk lists[KN_SCAN_WARPS];
    const float *q = (const float *)a.query;
    if (a.query_in_smem) {
        float *s = (float *)kn_smem_query;
        for (unsigned int i = threadIdx.x; i < a.dim; i += KN_SCAN_THREADS)
            s[i] = q[i];
        q = s;
    }
    struct kn_topk *t = &lists[threadIdx.x / 32];
    kn_topk_init(t, a.k);
    __syncthreads();

    switch (a.vec_bytes) {
    case 16:
        kn_scan_records<T, 16>(a, q, t);
        break;
    case 8:
        kn_scan_records<T, 8>(a, q, t);
        break;
    case 4:
        kn_scan_records<T, 4>(a, q, t);
        break;
    default:
        if constexpr (sizeof(T) == 2)
            kn_scan_records<T, 2>(a, q, t);
        break;
    }

    kn_topk_block_merge(lists, KN_SCAN_WARPS, a.k);
    if (threadIdx.x < 32) {
        unsigned long long *out = (unsigned long long *)a.cand + (uint64_t)blockIdx.x * a.k;
        for (unsigned int i = threadIdx.x; i < a.k; i += 32)
            out[i] = lists[0].list[i];
    }
}

extern "C" __global__ void __launch_bounds__(KN_SCAN_THREADS, KN_MIN_BLOCKS)
    k_scan_f32(const struct kn_scan_args a)
{
    kn_scan<float>(a);
}

extern "C" __global__ void __launch_bounds__(KN_SCAN_THREADS, KN_MIN_BLOCKS)
    k_scan_f16(const struct kn_scan_args a)
{
    kn_scan<__half>(a);
}

extern "C" __global__ void __launch_bounds__(KN_SCAN_REDUCE_THREADS)
    k_scan_reduce(unsigned long long *cand, unsigned int count, unsigned int k)
{
    constexpr unsigned int nwarps = KN_SCAN_REDUCE_THREADS / 32;
    __shared__ struct kn_topk lists[nwarps];
    const unsigned int warp = threadIdx.x / 32;
    struct kn_topk *t = &lists[warp];
    kn_topk_init(t, k);
    unsigned int cnt = 0;
    unsigned long long thr = t->list[k - 1];
    /* Whole warps step together: the offer needs all 32 lanes. */
    for (unsigned int i0 = warp * 32; i0 < count; i0 += KN_SCAN_REDUCE_THREADS) {
        const unsigned int i = i0 + threadIdx.x % 32;
        kn_topk_offer(t, i < count ? cand[i] : 0ULL, k, cnt, thr);
    }
    if (cnt)
        kn_topk_merge(t, cnt, k);
    kn_topk_block_merge(lists, nwarps, k);
    if (threadIdx.x >= 32)
        return;
    /* All of cand was read before the block merge's barrier. */
    for (unsigned int i = threadIdx.x; i < k; i += 32)
        cand[i] = lists[0].list[i];
}
