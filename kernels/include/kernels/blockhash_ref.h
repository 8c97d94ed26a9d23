/* C reference of the block checksum kernel (kernels/checksum.cu), used by
 * tests, the host backend and stagingd's shard writer. Pure C, no CUDA. */
#ifndef KERNELS_BLOCKHASH_REF_H
#define KERNELS_BLOCKHASH_REF_H

#include <stddef.h>
#include <stdint.h>

/* The checksum of one block of @len bytes at @data (any alignment). */
uint64_t kr_block_checksum(const void *data, size_t len);

/* The number of @block_size-byte blocks (the last may be short) in @len
 * bytes: ceil(len / block_size); 0 when @block_size is 0. */
size_t kr_block_count(size_t len, uint32_t block_size);

/* Checksums of consecutive @block_size-byte blocks of @data; the last block
 * may be short. Writes ceil(len / block_size) values to @sums.
 * Returns that count, or -EINVAL when @block_size is 0 or not a multiple of 8. */
long kr_block_checksums(const void *data, size_t len, uint32_t block_size, uint64_t *sums);

/* Index of the first block whose checksum differs from @expected, or -1 when
 * all match; -EINVAL as above. */
long kr_block_verify(const void *data, size_t len, uint32_t block_size, const uint64_t *expected);

#endif /* KERNELS_BLOCKHASH_REF_H */
