/* lease-types: what every other lease-types header builds on. Byte helpers
 * written as loops (the headers include <stdint.h>, <stddef.h> and <errno.h>,
 * no <string.h>; only errors.h adds <stdarg.h> and <stdio.h> for
 * lt_failure_set, and socket.h, outside the umbrella header, <stdlib.h> and
 * <unistd.h>), checked arithmetic, and the float/bit-pattern conversion the
 * wire uses for the one float it carries. */
#ifndef LEASE_TYPES_COMMON_H
#define LEASE_TYPES_COMMON_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define LT_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#define LT_ALIGNOF(type) alignof(type)
#define LT_EXTERN_C_BEGIN extern "C" {
#define LT_EXTERN_C_END }
#else
#define LT_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#define LT_ALIGNOF(type) _Alignof(type)
#define LT_EXTERN_C_BEGIN
#define LT_EXTERN_C_END
#endif

/* Asserts the offset of one field of a wire struct. */
#define LT_ASSERT_FIELD(stype, field, off)                                                         \
    LT_STATIC_ASSERT(offsetof(struct stype, field) == (off), #stype "." #field " at offset " #off)
/* Asserts the size of a wire struct and that it keeps 8-byte steps. */
#define LT_ASSERT_SIZE(stype, size)                                                                \
    LT_STATIC_ASSERT(sizeof(struct stype) == (size) && (size) % LT_ALIGNOF(struct stype) == 0,     \
                     "sizeof(struct " #stype ") == " #size)

LT_EXTERN_C_BEGIN

LT_STATIC_ASSERT(sizeof(float) == 4, "float must be IEEE-754 binary32");
LT_STATIC_ASSERT(sizeof(char) == 1 && (unsigned char)-1 == 255, "8-bit bytes");

/* Writes @sum_p = a + b. Returns 0, or -EOVERFLOW (nothing written) when it wraps. */
static inline int lt_u64_add_checked(uint64_t a, uint64_t b, uint64_t *sum_p)
{
    if (b > UINT64_MAX - a)
        return -EOVERFLOW;
    *sum_p = a + b;
    return 0;
}

/* Writes @prod_p = a * b. Returns 0, or -EOVERFLOW (nothing written) when it wraps. */
static inline int lt_size_mul_checked(size_t a, size_t b, size_t *prod_p)
{
    if (a != 0 && b > SIZE_MAX / a)
        return -EOVERFLOW;
    *prod_p = a * b;
    return 0;
}

/* Sets @n bytes at @p to zero. */
static inline void lt_bytes_zero(void *p, size_t n)
{
    unsigned char *b = (unsigned char *)p;
    for (size_t i = 0; i < n; i++)
        b[i] = 0;
}

/* Copies @n bytes from @src to @dst; the ranges must not overlap. */
static inline void lt_bytes_copy(void *dst, const void *src, size_t n)
{
    unsigned char *d = (unsigned char *)dst;
    const unsigned char *s = (const unsigned char *)src;
    for (size_t i = 0; i < n; i++)
        d[i] = s[i];
}

/* 1 when all @n bytes at @p are zero (also for n == 0), else 0. */
static inline int lt_bytes_all_zero(const void *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    unsigned char acc = 0;
    for (size_t i = 0; i < n; i++)
        acc |= b[i];
    return acc == 0;
}

/* The IEEE-754 binary32 bit pattern of @f. */
static inline uint32_t lt_f32_to_bits(float f)
{
#ifdef __cplusplus
    uint32_t u;
    __builtin_memcpy(&u, &f, sizeof u);
    return u;
#else
    union {
        float f;
        uint32_t u;
    } v; /* reading the other member of a union is defined in C11 */
    v.f = f;
    return v.u;
#endif
}

/* The float whose IEEE-754 binary32 bit pattern is @bits. */
static inline float lt_f32_from_bits(uint32_t bits)
{
#ifdef __cplusplus
    float f;
    __builtin_memcpy(&f, &bits, sizeof f);
    return f;
#else
    union {
        uint32_t u;
        float f;
    } v;
    v.u = bits;
    return v.f;
#endif
}

/* 1 when @bits is a finite binary32 (not NaN, not an infinity), else 0;
 * integer-only, so validators never touch floating point. */
static inline int lt_f32_bits_finite(uint32_t bits)
{
    return (bits & 0x7f800000u) != 0x7f800000u;
}

LT_EXTERN_C_END

#endif /* LEASE_TYPES_COMMON_H */
