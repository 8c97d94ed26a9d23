/* Formatting into text buffers: see base/err.h. */
#include <stdio.h>
#include <string.h>

#include "base/err.h"

/* How far back a cut looks for a blank before it splits a word instead. */
#define WORD_BACK 32

size_t base_text_ellipsize(char *buf, size_t len)
{
    if (!buf || len == 0)
        return 0;
    size_t have = strnlen(buf, len - 1);
    buf[have] = '\0';
    if (len < 4)
        return have;
    size_t p = len - 4; /* where "..." starts when the cut is here */
    if (p > have)
        p = have;
    /* Keep the blank before a dropped word: "in use 0 ..." reads as cut. */
    if (p > 0 && p < have && buf[p] != ' ' && buf[p] != '\t' && buf[p - 1] != ' ' &&
        buf[p - 1] != '\t') {
        size_t q = p;
        while (q > 0 && p - q < WORD_BACK && buf[q - 1] != ' ' && buf[q - 1] != '\t')
            q--;
        if (q > 0 && p - q < WORD_BACK)
            p = q;
    }
    /* Never leave half a UTF-8 character: back off continuation bytes. */
    while (p > 0 && ((unsigned char)buf[p] & 0xc0) == 0x80)
        p--;
    memcpy(buf + p, "...", 4);
    return p + 3;
}

size_t base_vfmt(char *buf, size_t len, const char *fmt, va_list ap)
{
    if (!buf || len == 0)
        return 0;
    int n = vsnprintf(buf, len, fmt, ap);
    if (n < 0) {
        buf[0] = '\0';
        return 0;
    }
    if ((size_t)n < len)
        return (size_t)n;
    return base_text_ellipsize(buf, len);
}

size_t base_fmt(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t n = base_vfmt(buf, len, fmt, ap);
    va_end(ap);
    return n;
}

int base_verrf(char *err, size_t err_len, int rc, const char *fmt, va_list ap)
{
    base_vfmt(err, err_len, fmt, ap);
    return rc;
}

int base_errf(char *err, size_t err_len, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    base_verrf(err, err_len, rc, fmt, ap);
    va_end(ap);
    return rc;
}
