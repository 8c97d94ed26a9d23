/* The launch contract of kernels/checksum.cu, shared by the kernel and the
 * host code that launches it. Plain C; also compiles under nvcc.
 *
 *   k_block_checksum(const unsigned char *data, unsigned long long len,
 *                    unsigned int block_size, unsigned long long *sums)
 *     grid  = ceil(len / block_size) blocks of KN_CHECKSUM_THREADS threads;
 *     writes sums[b] = kr_block_checksum(data + b * block_size, this block's length).
 *
 *   k_block_verify(const unsigned char *data, unsigned long long len,
 *                  unsigned int block_size, const unsigned long long *expected,
 *                  unsigned long long *result)
 *     same grid; result holds KN_VERIFY_RESULT_WORDS words:
 *     FIRST_BAD must start as KN_VERIFY_NONE and BAD_COUNT and BAD_EXPECTED
 *     as 0. A block whose checksum differs from expected[b] lowers FIRST_BAD
 *     to b (atomicMin) and counts itself in BAD_COUNT. While the blocks run,
 *     BAD_EXPECTED counts the blocks done; the last one leaves there
 *     expected[FIRST_BAD] and in BAD_ACTUAL block FIRST_BAD's checksum as
 *     found, or 0 in BAD_EXPECTED (and BAD_ACTUAL as it was) when no block
 *     is bad.
 *
 * data must be 8-byte aligned and block_size a non-zero multiple of 8 (the
 * host validates both); data may be device memory or mapped host memory. */
#ifndef KERNELS_CHECKSUM_H
#define KERNELS_CHECKSUM_H

#define KN_CHECKSUM_IMAGE "checksum"
#define KN_K_BLOCK_CHECKSUM "k_block_checksum"
#define KN_K_BLOCK_VERIFY "k_block_verify"

/* Threads per CUDA block; the kernels are compiled with this launch bound. */
#define KN_CHECKSUM_THREADS 256

#define KN_VERIFY_FIRST_BAD 0
#define KN_VERIFY_BAD_COUNT 1
#define KN_VERIFY_BAD_ACTUAL 2
#define KN_VERIFY_BAD_EXPECTED 3
#define KN_VERIFY_RESULT_WORDS 4
#define KN_VERIFY_NONE 0xffffffffffffffffULL

#endif /* KERNELS_CHECKSUM_H */
