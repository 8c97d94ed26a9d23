/* The shard block checksum on the GPU; the definition is in
 * include/kernels/blockhash.h and the C reference in ref/blockhash_ref.c.
 * One CUDA block hashes one shard block; the terms are summed, so the order
 * in which threads add them does not matter and the result is exact. */
#include <stdint.h>

#include "kernels/blockhash.h"
#include "kernels/checksum.h"
#include "kernels/checksum_part.h"

#define KN_WARPS (KN_CHECKSUM_THREADS / 32)
/* The reduction keeps one partial sum per warp and folds them in warp 0. */
static_assert(KN_CHECKSUM_THREADS % 32 == 0 && KN_WARPS <= 32, "whole warps, at most 32");

/* The block's wrapping sum of every thread's @sum, valid in thread 0. */
static __device__ __forceinline__ uint64_t kn_block_reduce(uint64_t sum)
{
    __shared__ uint64_t warp_sums[KN_WARPS];
    const unsigned int lane = threadIdx.x % 32;
    const unsigned int warp = threadIdx.x / 32;

    for (int offset = 16; offset > 0; offset /= 2)
        sum += __shfl_down_sync(0xffffffffu, sum, offset);
    if (lane == 0)
        warp_sums[warp] = sum;
    __syncthreads();
    sum = 0;
    if (warp == 0) {
        if (lane < KN_WARPS)
            sum = warp_sums[lane];
        for (int offset = 16; offset > 0; offset /= 2)
            sum += __shfl_down_sync(0xffffffffu, sum, offset);
    }
    return sum;
}

/* The checksum of shard block @b, valid in thread 0. */
static __device__ __forceinline__ uint64_t kn_block_hash(const unsigned char *__restrict__ data,
                                                         uint64_t len, unsigned int block_size,
                                                         uint64_t b)
{
    const uint64_t off = b * block_size;
    const uint64_t this_len = len - off < block_size ? len - off : block_size;
    const uint64_t sum =
        kn_block_reduce(kn_thread_terms(data + off, this_len, threadIdx.x, KN_CHECKSUM_THREADS));
    return kn_finish(sum, this_len);
}

extern "C" __global__ void __launch_bounds__(KN_CHECKSUM_THREADS)
    k_block_checksum(const unsigned char *__restrict__ data, unsigned long long len,
                     unsigned int block_size, unsigned long long *__restrict__ sums)
{
    const uint64_t h = kn_block_hash(data, len, block_size, blockIdx.x);
    if (threadIdx.x == 0)
        sums[blockIdx.x] = h;
}

/* The last block to finish names the first bad block's sums, so that the
 * host never reads a block back to say what was found (a block may be as
 * large as the shard). It hashes that block again rather than have every bad
 * block store its sum: only the atomicMin's final winner is known, and only
 * once every block has counted itself. */
extern "C" __global__ void __launch_bounds__(KN_CHECKSUM_THREADS)
    k_block_verify(const unsigned char *__restrict__ data, unsigned long long len,
                   unsigned int block_size, const unsigned long long *__restrict__ expected,
                   unsigned long long *result)
{
    __shared__ unsigned long long first;
    __shared__ bool last;
    const uint64_t h = kn_block_hash(data, len, block_size, blockIdx.x);
    if (threadIdx.x == 0) {
        if (h != expected[blockIdx.x]) {
            atomicMin(&result[KN_VERIFY_FIRST_BAD], (unsigned long long)blockIdx.x);
            atomicAdd(&result[KN_VERIFY_BAD_COUNT], 1ULL);
        }
        /* This block's atomics are seen by whichever block counts last. */
        __threadfence();
        const unsigned long long blocks = (unsigned long long)gridDim.x * gridDim.y * gridDim.z;
        last = atomicAdd(&result[KN_VERIFY_BAD_EXPECTED], 1ULL) == blocks - 1;
        if (last) {
            __threadfence();
            first = atomicAdd(&result[KN_VERIFY_FIRST_BAD], 0ULL);
        }
    }
    __syncthreads();
    if (!last)
        return;
    if (first >= gridDim.x) { /* none (a FIRST_BAD that began lower is the launcher's error) */
        if (threadIdx.x == 0)
            result[KN_VERIFY_BAD_EXPECTED] = 0;
        return;
    }
    const uint64_t bad = kn_block_hash(data, len, block_size, first);
    if (threadIdx.x == 0) {
        result[KN_VERIFY_BAD_ACTUAL] = bad;
        result[KN_VERIFY_BAD_EXPECTED] = expected[first];
    }
}
