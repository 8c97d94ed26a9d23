/* Helpers shared by the shard module's files (shard.c, shard_write.c,
 * store.c, gen.c; defined in shard_util.c unless inline); not part of the
 * API. */
#ifndef STAGINGD_SHARD_INTERNAL_H
#define STAGINGD_SHARD_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "base/err.h" /* base_errf: every error site formats @err with it */
#include "base/io.h"  /* base_pread_full */

/* pwrite all @len bytes, retrying EINTR and short writes. 0 or -errno. */
int sd__pwrite_full(int fd, const void *buf, size_t len, uint64_t off);

/* sd_shard_header_init, naming the shard @name in messages. */
struct sd_shard_header;
int sd__shard_header_build(const char *name, uint32_t type, uint32_t dim, uint64_t records,
                           uint32_t block_size, char *err, size_t err_len,
                           struct sd_shard_header *h_p);

/* @v rounded up to a multiple of @align (a power of two); 0 on overflow
 * (callers pass nonzero @v). */
static inline uint64_t sd__align_up(uint64_t v, uint64_t align)
{
    if (v > UINT64_MAX - (align - 1))
        return 0;
    return (v + align - 1) & ~(align - 1);
}

/* @m shifted right by @shift (1..31) bits, rounded to nearest, ties to
 * even, without a data-dependent branch: adding half - 1 plus the kept lsb
 * carries exactly when the dropped bits exceed half, or equal it with an
 * odd lsb. @m < 2^31 so nothing overflows. */
static inline uint32_t sd__round_shift(uint32_t m, unsigned shift)
{
    return (m + ((1u << (shift - 1)) - 1) + ((m >> shift) & 1)) >> shift;
}

/* sd_f16_from_f32, inline for the generator's inner loop. */
static inline uint16_t sd__f16_from_f32(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t exp = (x >> 23) & 0xff;
    uint32_t man = x & 0x7fffff;

    if (exp == 0xff) /* infinity, or NaN kept quiet with its top payload bits */
        return (uint16_t)(sign | 0x7c00 | (man ? 0x200 | (man >> 13) : 0));
    int e = (int)exp - 127 + 15;
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00);
    if (e <= 0) {
        /* A binary16 subnormal counts units of 2^-24; the value is
         * (man | implicit bit) * 2^(e - 14) of them. */
        unsigned shift = (unsigned)(14 - e);
        if (exp == 0 || shift > 24) /* f32 subnormals are < 2^-126: zero */
            return sign;
        return (uint16_t)(sign | sd__round_shift(man | 0x800000, shift));
    }
    /* A carry out of the mantissa correctly bumps the exponent, up to
     * infinity (0x7bff + 1 = 0x7c00). */
    return (uint16_t)(sign | (((uint32_t)e << 10) + sd__round_shift(man, 13)));
}

#endif /* STAGINGD_SHARD_INTERNAL_H */
