/* Strict parsers: see base/parse.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/err.h"
#include "base/parse.h"

#define QUOTE_MAX 64

/* @s for a message: at most QUOTE_MAX bytes, control bytes as '?', and
 * "..." when cut. */
static const char *quote(const char *s, char out[QUOTE_MAX + 4])
{
    size_t i = 0;
    for (; s[i] && i < QUOTE_MAX; i++)
        out[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
    if (s[i]) {
        memcpy(out + i, "...", 3);
        i += 3;
    }
    out[i] = '\0';
    return out;
}

static int digit(char c, unsigned base)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (base == 16 && c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (base == 16 && c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The number at the start of @s. Returns 0 (*v_p, *end_p past it), -EINVAL
 * (no digits) or -ERANGE (digits that overflow; *end_p still past them). */
static int number(const char *s, uint64_t *v_p, const char **end_p)
{
    unsigned base = 10;
    const char *p = s;
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
        base = 16;
        p += 2;
    }
    const char *first = p;
    uint64_t v = 0;
    int rc = 0;
    for (int d; (d = digit(*p, base)) >= 0; p++)
        if (__builtin_mul_overflow(v, (uint64_t)base, &v) ||
            __builtin_add_overflow(v, (uint64_t)d, &v))
            rc = -ERANGE;
    if (p == first)
        return -EINVAL;
    *end_p = p;
    *v_p = v;
    return rc;
}

int base_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *v_p, char *err,
                   size_t err_len)
{
    char q[QUOTE_MAX + 4];
    char want[96];
    if (min == 0 && max == UINT64_MAX)
        snprintf(want, sizeof want, "an unsigned integer");
    else
        snprintf(want, sizeof want, "an integer in %" PRIu64 "..%" PRIu64, min, max);
    if (!s || !*s)
        return base_errf(err, err_len, -EINVAL, "expected %s, found nothing", want);
    uint64_t v = 0;
    const char *end = s;
    int rc = number(s, &v, &end);
    if (rc == -EINVAL || *end != '\0')
        return base_errf(err, err_len, -EINVAL, "expected %s, found '%s'", want, quote(s, q));
    if (rc == -ERANGE && min == 0 && max == UINT64_MAX)
        return base_errf(err, err_len, -ERANGE,
                         "expected an unsigned integer up to %" PRIu64 ", found '%s'", max,
                         quote(s, q));
    if (rc == -ERANGE || v < min || v > max)
        return base_errf(err, err_len, -ERANGE, "expected %s, found '%s'", want, quote(s, q));
    *v_p = v;
    return 0;
}

int base_parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *v_p, char *err,
                   size_t err_len)
{
    uint64_t v = 0;
    int rc = base_parse_u64(s, min, max, &v, err, err_len);
    if (rc == 0)
        *v_p = (uint32_t)v;
    return rc;
}

/* The unit after a size's number: its shift, or -1 when it is none. */
static int unit_shift(const char *u)
{
    static const char letters[] = "KMGTPE";
    if (u[0] == '\0')
        return 0;
    if ((u[0] == 'b' || u[0] == 'B') && u[1] == '\0')
        return 0;
    int shift = -1;
    for (int i = 0; letters[i]; i++)
        if (u[0] == letters[i] || u[0] == letters[i] + ('a' - 'A'))
            shift = 10 * (i + 1);
    const char *rest = u + 1;
    if (shift > 0 && (rest[0] == '\0' || strcasecmp(rest, "b") == 0 || strcasecmp(rest, "ib") == 0))
        return shift;
    return -1;
}

/* BASE_PARSE_SIZE_STRICT's forms: digits, then one of these units. */
static bool strict_size(const char *s)
{
    static const char *const units[] = {"", "B", "K", "KiB", "M", "MiB", "G", "GiB", "T", "TiB"};
    size_t digits = strspn(s, "0123456789");
    if (digits == 0)
        return false;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(s + digits, units[i]) == 0)
            return true;
    return false;
}

int base_parse_size(const char *s, uint64_t *v_p, char *err, size_t err_len)
{
    return base_parse_size_flags(s, 0, v_p, err, err_len);
}

int base_parse_size_flags(const char *s, unsigned int flags, uint64_t *v_p, char *err,
                          size_t err_len)
{
    const char *want = flags & BASE_PARSE_SIZE_STRICT
                           ? "a size such as 4096, 64K or 512MiB (digits, then B, K, KiB, M, "
                             "MiB, G, GiB, T or TiB; binary)"
                           : "a size such as 4096, 64K or 512MiB (units B, K, M, G, T, P, E; "
                             "binary)";
    char q[QUOTE_MAX + 4];
    if (!s || !*s)
        return base_errf(err, err_len, -EINVAL, "expected %s, found nothing", want);
    if ((flags & BASE_PARSE_SIZE_STRICT) && !strict_size(s))
        return base_errf(err, err_len, -EINVAL, "expected %s, found '%s'", want, quote(s, q));
    uint64_t v = 0;
    const char *end = s;
    int rc = number(s, &v, &end);
    int shift = rc == -EINVAL ? -1 : unit_shift(end);
    if (shift < 0)
        return base_errf(err, err_len, -EINVAL, "expected %s, found '%s'", want, quote(s, q));
    if (rc == -ERANGE || v > (UINT64_MAX >> shift))
        return base_errf(err, err_len, -ERANGE, "expected a size below 16 EiB, found '%s'",
                         quote(s, q));
    *v_p = v << shift;
    return 0;
}

int base_parse_bool(const char *s, bool *v_p, char *err, size_t err_len)
{
    static const char *const yes[] = {"yes", "true", "on", "1"};
    static const char *const no[] = {"no", "false", "off", "0"};
    static const char want[] = "yes or no (or true/false, on/off, 1/0)";
    char q[QUOTE_MAX + 4];
    if (!s || !*s)
        return base_errf(err, err_len, -EINVAL, "expected %s, found nothing", want);
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *v_p = true;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *v_p = false;
            return 0;
        }
    }
    return base_errf(err, err_len, -EINVAL, "expected %s, found '%s'", want, quote(s, q));
}

int base_parse_enum(const char *s, const struct base_enum *table, int *v_p, char *err,
                    size_t err_len)
{
    if (!table)
        return base_errf(err, err_len, -EINVAL, "expected a table of names, found none");
    for (const struct base_enum *e = table; s && e->name; e++) {
        if (strcmp(s, e->name) == 0) {
            *v_p = e->value;
            return 0;
        }
    }
    if (!err || err_len == 0)
        return -EINVAL;
    /* "a, b or c": every name, so the message is the documentation. */
    char list[512];
    size_t n = 0, count = 0;
    while (table[count].name)
        count++;
    list[0] = '\0';
    for (size_t i = 0; i < count && n < sizeof list; i++) {
        const char *sep = i == 0 ? "" : i + 1 == count ? " or " : ", ";
        int k = snprintf(list + n, sizeof list - n, "%s%s", sep, table[i].name);
        if (k < 0)
            break;
        n += (size_t)k;
    }
    if (n >= sizeof list)
        base_text_ellipsize(list, sizeof list);
    char q[QUOTE_MAX + 4];
    if (!s || !*s)
        return base_errf(err, err_len, -EINVAL, "expected %s, found nothing",
                         count ? list : "(no names)");
    return base_errf(err, err_len, -EINVAL, "expected %s, found '%s'", count ? list : "(no names)",
                     quote(s, q));
}

const char *base_enum_name(const struct base_enum *table, int value)
{
    for (const struct base_enum *e = table; e && e->name; e++)
        if (e->value == value)
            return e->name;
    return NULL;
}
