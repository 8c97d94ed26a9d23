/* The block checksum kernel (kernels/checksum.cu) on the CPU, used by tests,
 * the host backend and stagingd (its shard writer and --cpu-verify). Pure C,
 * no CUDA.
 *
 * kr_block_checksum_scalar is the reference: the definition of blockhash.h
 * word by word. kr_block_checksum, kr_block_checksums and kr_block_verify give
 * the same value for every input, through the fastest implementation this
 * CPU has (SSE2, AVX2 or AVX-512 lanes on x86-64, chosen by CPUID at the first
 * call). All are thread-safe; the implementation choice is their only state. */
#ifndef KERNELS_BLOCKHASH_REF_H
#define KERNELS_BLOCKHASH_REF_H

#include <stddef.h>
#include <stdint.h>

/* The checksum of one block of @len bytes at @data (any alignment). */
uint64_t kr_block_checksum(const void *data, size_t len);

/* The same, one word at a time: the reference the others are tested against. */
uint64_t kr_block_checksum_scalar(const void *data, size_t len);

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

/* The implementations behind kr_block_checksum, _checksums and _verify.
 * Appended to, never renumbered. */
enum kr_block_impl {
    KR_BLOCK_IMPL_AUTO = 0, /* the fastest one this CPU supports (the default) */
    KR_BLOCK_IMPL_SCALAR,   /* kr_block_checksum_scalar's loop, any CPU */
    KR_BLOCK_IMPL_SSE2,     /* 2 x 2 lanes; 64-bit multiplies from 32x32-bit ones */
    KR_BLOCK_IMPL_AVX2,     /* 2 x 4 lanes; likewise */
    KR_BLOCK_IMPL_AVX512,   /* 2 x 8 lanes; vpmullq (AVX-512F and AVX-512DQ) */
    KR_BLOCK_IMPL__COUNT
};

/* 1 when this build and CPU can run @impl (AUTO always), 0 when not. */
int kr_block_impl_supported(enum kr_block_impl impl);

/* The implementation in use now, never AUTO: the first call chooses it. */
enum kr_block_impl kr_block_impl_get(void);

/* For tests and benchmarks: use @impl from now on, process-wide (AUTO: the
 * fastest again). Calls running meanwhile finish with either; all give the
 * same sums. Returns 0, -ENOTSUP when this build or CPU lacks @impl, or
 * -EINVAL for a value outside the enum; on failure nothing changes. */
int kr_block_impl_set(enum kr_block_impl impl);

/* A short static name ("scalar", "avx2", ...), NULL outside the enum. */
const char *kr_block_impl_name(enum kr_block_impl impl);

#endif /* KERNELS_BLOCKHASH_REF_H */
