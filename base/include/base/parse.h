/* base: strict parsers for numbers, sizes, booleans and names.
 *
 * Each parser takes the whole string: no blanks, no sign, nothing after the
 * value. On success it writes *v_p and returns 0; on failure *v_p is
 * untouched and it returns -EINVAL (not the expected form; NULL or empty
 * input) or -ERANGE (the right form, out of range or overflowing), and when
 * @err is not NULL it writes there what was expected and what was found,
 * such as "expected an integer in 1..256, found '300'", for the caller to
 * prefix with the key or option it was parsing.
 *
 * Numbers are decimal, or hexadecimal after "0x" or "0X". A leading 0 is
 * decimal, never octal: "010" is ten.
 *
 * Threads: reentrant; no state. Ownership: the tables and strings stay the
 * caller's; nothing is kept. */
#ifndef BASE_PARSE_H
#define BASE_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An unsigned integer in [@min, @max]. */
int base_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *v_p, char *err,
                   size_t err_len);
int base_parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *v_p, char *err,
                   size_t err_len);

/* A byte count: a number, then optionally a binary unit: "B", or one of
 * K M G T P E (either case, powers of 1024) alone or followed by "B" or
 * "iB" (any case). So 4096, 4K, 4k, 4KB, 4KiB and 0x1000 are one size.
 * -ERANGE: the bytes do not fit in 64 bits. */
int base_parse_size(const char *s, uint64_t *v_p, char *err, size_t err_len);

/* base_parse_size's flags. STRICT: stagingd's spellings only (its config
 * and command lines, docs/shard-format.md): decimal digits, then nothing, B,
 * K, KiB, M, MiB, G, GiB, T or TiB, in that case. */
#define BASE_PARSE_SIZE_STRICT 0x1u

/* base_parse_size with @flags (0: as base_parse_size). */
int base_parse_size_flags(const char *s, unsigned int flags, uint64_t *v_p, char *err,
                          size_t err_len);

/* yes/no, true/false, on/off, 1/0, in any case. */
int base_parse_bool(const char *s, bool *v_p, char *err, size_t err_len);

/* One name of an enumeration. A table is an array ended by {NULL, 0}; a
 * value may have several names (the first is its canonical one). */
struct base_enum {
    const char *name;
    int value;
};

/* The value named exactly (case matters) by @s in @table. The refusal lists
 * every name: "expected verify, scan or both, found 'x'". */
int base_parse_enum(const char *s, const struct base_enum *table, int *v_p, char *err,
                    size_t err_len);

/* The first name of @value in @table, or NULL. */
const char *base_enum_name(const struct base_enum *table, int value);

#ifdef __cplusplus
}
#endif

#endif /* BASE_PARSE_H */
