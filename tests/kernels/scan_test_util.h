/* Seeded random records and queries for the scan tests: never zero, mixed
 * signs, and for f16 a few subnormals so that the exact decode is exercised.
 * Header-only so the CPU and GPU tests share it. */
#ifndef TESTS_SCAN_TEST_UTIL_H
#define TESTS_SCAN_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/scan.h"

static inline uint64_t st_rng_next(uint64_t *s)
{
    /* splitmix64: any seed, 0 included, gives a full-period stream. */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* A float in +-[0.125, 2), never zero. */
static inline float st_rng_float(uint64_t *s)
{
    uint64_t r = st_rng_next(s);
    float mag = 0.125f + (float)(r >> 40) * (1.875f / 16777216.0f);
    return (r & 1) ? -mag : mag;
}

/* f16 bits of a nonzero value: mostly +-[2^-3, 4), one in 64 subnormal. */
static inline uint16_t st_rng_f16(uint64_t *s)
{
    uint64_t r = st_rng_next(s);
    uint16_t sign = (uint16_t)((r & 1) << 15);
    uint16_t man = (uint16_t)((r >> 1) & 0x3ff);
    if (((r >> 11) & 63) == 0)
        return (uint16_t)(sign | (man ? man : 1)); /* subnormal, exponent field 0 */
    uint16_t exp = (uint16_t)(12 + (r >> 17) % 5); /* 2^-3 .. 2^1 */
    return (uint16_t)(sign | (exp << 10) | man);
}

/* @n records of @dim elements of @type at @p (any alignment). */
static inline void st_fill_records(void *p, uint32_t type, uint64_t n, uint32_t dim, uint64_t seed)
{
    unsigned char *b = p;
    uint64_t s = seed;
    for (uint64_t i = 0; i < n * dim; i++) {
        if (type == KN_SCAN_F32) {
            float f = st_rng_float(&s);
            memcpy(b + i * 4, &f, 4);
        } else {
            uint16_t h = st_rng_f16(&s);
            memcpy(b + i * 2, &h, 2);
        }
    }
}

static inline void st_fill_query(float *q, uint32_t dim, uint64_t seed)
{
    uint64_t s = seed ^ 0x5157455259ULL;
    for (uint32_t i = 0; i < dim; i++)
        q[i] = st_rng_float(&s);
}

#endif /* TESTS_SCAN_TEST_UTIL_H */
