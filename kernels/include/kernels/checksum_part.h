/* How k_block_checksum splits one shard block among the threads of a CUDA
 * block. It lives in a header that also compiles as C so that the CPU tests
 * can run every thread's share of the work and prove the shares add up to
 * the C reference, covering alignment, odd word counts and byte tails,
 * without a GPU. Includes only <stdint.h> and blockhash.h. */
#ifndef KERNELS_CHECKSUM_PART_H
#define KERNELS_CHECKSUM_PART_H

#include <stdint.h>

#include "kernels/blockhash.h"

#if defined(__CUDACC__)
/* One 16-byte load of two consecutive words (16-byte aligned). */
#define KN__LOAD_PAIR(q, lo, hi)                                                                   \
    do {                                                                                           \
        const ulonglong2 kn__v = *(const ulonglong2 *)(q);                                         \
        (lo) = kn__v.x;                                                                            \
        (hi) = kn__v.y;                                                                            \
    } while (0)
#define KN__LOAD_WORD(q) (*(const uint64_t *)(q))
#define KN__RESTRICT __restrict__
#else
#include <string.h>
static inline uint64_t kn__load_word(const unsigned char *q)
{
    uint64_t w;
    memcpy(&w, q, 8); /* little-endian hosts only, as the reference */
    return w;
}
#define KN__LOAD_PAIR(q, lo, hi)                                                                   \
    do {                                                                                           \
        (lo) = kn__load_word(q);                                                                   \
        (hi) = kn__load_word((q) + 8);                                                             \
    } while (0)
#define KN__LOAD_WORD(q) kn__load_word(q)
#define KN__RESTRICT restrict
#endif

/* The sum of the word terms thread @tid of @nthreads adds for a block of
 * @len bytes at @p (8-byte aligned). The shares of threads 0..nthreads-1 sum
 * to the block's full term sum, for any @nthreads >= 1. */
KN_FN uint64_t kn_thread_terms(const unsigned char *KN__RESTRICT p, uint64_t len, unsigned int tid,
                               unsigned int nthreads)
{
    const uint64_t words = len / 8;
    uint64_t sum = 0;

    /* 16-byte loads need a 16-byte aligned start: when the block starts on an
     * odd word, word 0 is taken alone and the pairs begin at word 1. */
    const uint64_t first = ((uintptr_t)p & 8u) ? 1 : 0;
    if (first && words > 0 && tid == 0)
        sum += kn_word_term(KN__LOAD_WORD(p), 0);
    const uint64_t pair_words = words > first ? words - first : 0;
    const uint64_t pairs = pair_words / 2;
    const unsigned char *KN__RESTRICT q = p + first * 8;
#if defined(__CUDACC__)
#pragma unroll 4
#endif
    for (uint64_t i = tid; i < pairs; i += nthreads) {
        uint64_t lo, hi;
        KN__LOAD_PAIR(q + 16 * i, lo, hi);
        sum += kn_word_term(lo, first + 2 * i);
        sum += kn_word_term(hi, first + 2 * i + 1);
    }
    /* The odd word after the pairs, on another thread than word 0's. */
    if ((pair_words & 1) && tid == nthreads - 1)
        sum += kn_word_term(KN__LOAD_WORD(p + (words - 1) * 8), words - 1);
    /* A tail of 1..7 bytes is a word padded with zero bytes, read bytewise
     * because it may end at the very last byte of the buffer. */
    const unsigned int tail = (unsigned int)(len % 8);
    if (tail && tid == nthreads / 2) {
        const unsigned char *t = p + words * 8;
        uint64_t w = 0;
        for (unsigned int i = 0; i < tail; i++)
            w |= (uint64_t)t[i] << (8 * i);
        sum += kn_word_term(w, words);
    }
    return sum;
}

#endif /* KERNELS_CHECKSUM_PART_H */
