/* The shard block checksum, one definition for the CUDA kernel, the C
 * reference and stagingd's shard writer.
 *
 * A block is read as little-endian 64-bit words (a short tail is padded with
 * zero bytes). Each word is keyed by its index and mixed through a bijective
 * 64-bit finalizer; the block's checksum is the finalized wrapping sum of the
 * terms. A sum, unlike CRC32C's running state, has no order: thousands of GPU
 * threads can each add their words and reduce, and the result is exact and
 * deterministic. Keying by index makes reordered words change the sum, and
 * mixing in the block length tells "ab" from "ab\0".
 *
 * This header is plain C99 and also compiles under nvcc, where the functions
 * become __host__ __device__. It includes nothing but <stdint.h>. */
#ifndef KERNELS_BLOCKHASH_H
#define KERNELS_BLOCKHASH_H

#include <stdint.h>

#if defined(__CUDACC__)
#define KN_FN static __host__ __device__ __forceinline__
#else
#define KN_FN static inline
#endif

#define KN_SEED 0x6c656173655f7631ULL /* "lease_v1" */
#define KN_INDEX_KEY 0x9e3779b97f4a7c15ULL

/* The 64-bit finalizer of MurmurHash3: a bijection with full avalanche. */
KN_FN uint64_t kn_fmix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

/* What the word at @index (counted in words from the block's start) adds. */
KN_FN uint64_t kn_word_term(uint64_t word, uint64_t index)
{
    return kn_fmix64(word ^ (KN_SEED + index * KN_INDEX_KEY));
}

/* The checksum of a block of @block_len bytes whose word terms sum to @sum. */
KN_FN uint64_t kn_finish(uint64_t sum, uint64_t block_len)
{
    return kn_fmix64(sum ^ kn_fmix64(block_len + KN_SEED));
}

#endif /* KERNELS_BLOCKHASH_H */
