/* base: formatting into caller-owned text buffers.
 *
 * Every function here writes a NUL-terminated string that fits its buffer.
 * Text too long for the buffer is cut at a word boundary (or, in a word
 * longer than 32 bytes, at a UTF-8 character boundary) and ends in "...",
 * so a cut is never silent and never splits a character.
 *
 * Threads: reentrant; no state. Ownership: the buffers are the caller's. */
#ifndef BASE_ERR_H
#define BASE_ERR_H

#include <stdarg.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Formats into @buf of @len bytes (nothing when @buf is NULL or @len is 0).
 * Returns the length written (excluding the NUL). */
size_t base_fmt(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
size_t base_vfmt(char *buf, size_t len, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* An error site's one-liner: formats the message into @err (skipped when
 * @err is NULL or @err_len is 0) and returns @rc, so a refusal reads
 * `return base_errf(err, err_len, -EINVAL, "expected ..., found ...");`. */
int base_errf(char *err, size_t err_len, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int base_verrf(char *err, size_t err_len, int rc, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

/* Cuts the string in @buf (of @len bytes, @len >= 4) so it ends in "..."
 * within @len, as described above. Returns its new length. */
size_t base_text_ellipsize(char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* BASE_ERR_H */
