/* The .npy header: magic, version, header length, and the header itself, a
 * Python dict literal parsed strictly here (no evaluation): exactly the
 * keys 'descr', 'fortran_order' and 'shape', string, True/False and tuple
 * values, optional trailing comma, then spaces and a final '\n'. The
 * dtypes taken are '<f4', '<f2' and '|u1' (or '<u1'), C order, shape
 * (rows, dim) or (dim,), and the data must fill the file exactly. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "import_internal.h"
#include "stagingd/shard.h"

/* The most dimensions a refused shape is read to (numpy allows 64). */
#define NPY_DIMS_MAX 64

struct npy_parser {
    const char *path;
    const char *s; /* the header text, NUL-terminated */
    size_t n;
    size_t pos;
    uint64_t base; /* the file offset of s[0] */
    char *err;
    size_t err_len;
};

/* A quoted string or other token of the header: where it starts and its text. */
struct npy_token {
    size_t at;
    size_t len;
    const char *text;
};

static int npy_fail(struct npy_parser *p, size_t at, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int npy_fail(struct npy_parser *p, size_t at, int rc, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    base_vfmt(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sd_vec__errf(p->path, p->base + at, p->err, p->err_len, rc, "%s", msg);
}

/* What stands at @at, for messages: a printable excerpt or the byte in hex. */
static void npy_found(const struct npy_parser *p, size_t at, char *buf, size_t len)
{
    if (at >= p->n) {
        snprintf(buf, len, "the header's end");
        return;
    }
    unsigned char c = (unsigned char)p->s[at];
    if (c < 0x20 || c >= 0x7f) {
        snprintf(buf, len, "byte 0x%02x", c);
        return;
    }
    size_t k = 0;
    while (at + k < p->n && k < 16 && p->s[at + k] >= 0x20 && p->s[at + k] < 0x7f)
        k++;
    while (k > 1 && p->s[at + k - 1] == ' ')
        k--; /* the padding says nothing */
    snprintf(buf, len, "'%.*s'", (int)k, p->s + at);
}

static void npy_ws(struct npy_parser *p)
{
    while (p->pos < p->n && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t'))
        p->pos++;
}

static int npy_expect(struct npy_parser *p, char c, const char *what)
{
    npy_ws(p);
    if (p->pos < p->n && p->s[p->pos] == c) {
        p->pos++;
        return 0;
    }
    char found[64];
    npy_found(p, p->pos, found, sizeof found);
    return npy_fail(p, p->pos, -EPROTO, "bad .npy header: expected %s, found %s", what, found);
}

/* A string literal, '...' or "...", without escapes. */
static int npy_string(struct npy_parser *p, struct npy_token *t)
{
    npy_ws(p);
    size_t at = p->pos;
    if (at >= p->n || (p->s[at] != '\'' && p->s[at] != '"')) {
        char found[64];
        npy_found(p, at, found, sizeof found);
        return npy_fail(p, at, -EPROTO, "bad .npy header: expected a quoted string, found %s",
                        found);
    }
    char q = p->s[at];
    size_t i = at + 1;
    while (i < p->n && p->s[i] != q) {
        if (p->s[i] == '\\')
            return npy_fail(p, i, -EPROTO,
                            "bad .npy header: escape sequences in strings are not taken");
        if (p->s[i] == '\n')
            break;
        i++;
    }
    if (i >= p->n || p->s[i] != q)
        return npy_fail(p, at, -EPROTO, "bad .npy header: string not closed");
    t->at = at;
    t->text = p->s + at + 1;
    t->len = i - at - 1;
    p->pos = i + 1;
    return 0;
}

static int npy_token_is(const struct npy_token *t, const char *word)
{
    return t->len == strlen(word) && memcmp(t->text, word, t->len) == 0;
}

/* An unsigned decimal integer (Python's int literal without '_' or a sign). */
static int npy_uint(struct npy_parser *p, uint64_t *v_p)
{
    npy_ws(p);
    size_t at = p->pos;
    uint64_t v = 0;
    while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        unsigned d = (unsigned)(p->s[p->pos] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return npy_fail(p, at, -EOVERFLOW, "bad .npy header: a shape entry over 2^64");
        v = v * 10 + d;
        p->pos++;
    }
    if (p->pos == at) {
        char found[64];
        npy_found(p, at, found, sizeof found);
        return npy_fail(p, at, -EPROTO,
                        "bad .npy header: expected a shape entry (an integer), "
                        "found %s",
                        found);
    }
    *v_p = v;
    return 0;
}

/* A tuple of integers: (), (a,), (a, b), (a, b,) ... @dims_p gets the first
 * NPY_DIMS_MAX entries, @ndims_p their count. */
static int npy_shape(struct npy_parser *p, uint64_t *dims_p, unsigned *ndims_p, size_t *end_p)
{
    int rc = npy_expect(p, '(', "a shape tuple '('");
    if (rc < 0)
        return rc;
    unsigned nd = 0;
    int comma = 0;
    for (;;) {
        npy_ws(p);
        if (p->pos < p->n && p->s[p->pos] == ')') {
            p->pos++;
            break;
        }
        if (nd > 0 && !comma) {
            char found[64];
            npy_found(p, p->pos, found, sizeof found);
            return npy_fail(p, p->pos, -EPROTO,
                            "bad .npy header: expected ',' or ')' in the shape, found %s", found);
        }
        uint64_t v = 0;
        if ((rc = npy_uint(p, &v)) < 0)
            return rc;
        if (nd >= NPY_DIMS_MAX)
            return npy_fail(p, p->pos, -EINVAL,
                            "bad .npy header: a shape of more than %d dimensions", NPY_DIMS_MAX);
        dims_p[nd++] = v;
        npy_ws(p);
        comma = p->pos < p->n && p->s[p->pos] == ',';
        if (comma)
            p->pos++;
        else if (nd == 1 && p->pos < p->n && p->s[p->pos] == ')')
            /* "(5)" is the integer 5 to Python, not a tuple. */
            return npy_fail(
                p, p->pos, -EPROTO,
                "bad .npy header: a one-entry shape is written '(%" PRIu64 ",)', found no ','", v);
    }
    *ndims_p = nd;
    *end_p = p->pos;
    return 0;
}

/* The element type of a descr string: 0 and *@elem_p, or the refusal. */
static int npy_descr(struct npy_parser *p, const struct npy_token *t, uint32_t *elem_p)
{
    if (npy_token_is(t, "<f4")) {
        *elem_p = SD_VEC_F32;
        return 0;
    }
    if (npy_token_is(t, "<f2")) {
        *elem_p = SD_VEC_F16;
        return 0;
    }
    if (npy_token_is(t, "|u1") || npy_token_is(t, "<u1")) {
        *elem_p = SD_VEC_U8;
        return 0;
    }
    const char *why = "an unsupported dtype";
    const char *hint = "";
    if (t->len > 0 && memchr(t->text, 'O', t->len)) {
        why = "an object array (pickled Python objects, never unpickled here)";
    } else if (t->len > 0 && t->text[0] == '>') {
        why = "big-endian";
        hint = "; write it as little-endian first (a.astype(a.dtype.newbyteorder('<')))";
    } else if (t->len > 0 && memchr(t->text, 'V', t->len)) {
        why = "a structured or void dtype";
    } else if (npy_token_is(t, "<f8")) {
        why = "float64";
        hint = "; convert it first (a.astype('<f4'))";
    }
    return npy_fail(p, t->at, -EINVAL,
                    "descr '%.*s' is %s: expected '<f4' (float32), '<f2' (float16) or '|u1' "
                    "(uint8)%s",
                    (int)t->len, t->text, why, hint);
}

/* The three values of the dict, and where each stood. */
struct npy_dict {
    int have_descr, have_order, have_shape;
    struct npy_token descr;
    int descr_is_list;
    size_t descr_at, order_at, shape_at, shape_end;
    int fortran;
    uint64_t dims[NPY_DIMS_MAX];
    unsigned ndims;
};

static int npy_value(struct npy_parser *p, const struct npy_token *key, struct npy_dict *d)
{
    npy_ws(p);
    size_t at = p->pos;
    if (npy_token_is(key, "descr")) {
        d->have_descr = 1;
        d->descr_at = at;
        if (at < p->n && p->s[at] == '[') {
            /* A structured dtype: refused once the dict is read; skip the
             * list to its matching bracket. */
            d->descr_is_list = 1;
            int depth = 0;
            for (; p->pos < p->n; p->pos++) {
                char c = p->s[p->pos];
                depth += c == '[' || c == '(';
                depth -= c == ']' || c == ')';
                if (depth == 0) {
                    p->pos++;
                    return 0;
                }
            }
            return npy_fail(p, at, -EPROTO, "bad .npy header: descr list not closed");
        }
        return npy_string(p, &d->descr);
    }
    if (npy_token_is(key, "fortran_order")) {
        d->have_order = 1;
        d->order_at = at;
        if (p->n - at >= 4 && memcmp(p->s + at, "True", 4) == 0) {
            d->fortran = 1;
            p->pos += 4;
        } else if (p->n - at >= 5 && memcmp(p->s + at, "False", 5) == 0) {
            d->fortran = 0;
            p->pos += 5;
        } else {
            char found[64];
            npy_found(p, at, found, sizeof found);
            return npy_fail(p, at, -EPROTO,
                            "bad .npy header: fortran_order: expected True or False, found %s",
                            found);
        }
        return 0;
    }
    d->have_shape = 1;
    d->shape_at = at;
    return npy_shape(p, d->dims, &d->ndims, &d->shape_end);
}

static int npy_dict_parse(struct npy_parser *p, struct npy_dict *d)
{
    int rc = npy_expect(p, '{', "'{' (the header is a Python dict)");
    if (rc < 0)
        return rc;
    for (;;) {
        npy_ws(p);
        if (p->pos < p->n && p->s[p->pos] == '}') {
            p->pos++;
            break;
        }
        struct npy_token key;
        if ((rc = npy_string(p, &key)) < 0)
            return rc;
        int *seen = npy_token_is(&key, "descr")           ? &d->have_descr
                    : npy_token_is(&key, "fortran_order") ? &d->have_order
                    : npy_token_is(&key, "shape")         ? &d->have_shape
                                                          : NULL;
        if (!seen)
            return npy_fail(p, key.at, -EPROTO,
                            "bad .npy header: unknown key '%.*s': expected 'descr', "
                            "'fortran_order' and 'shape'",
                            (int)key.len, key.text);
        if (*seen)
            return npy_fail(p, key.at, -EPROTO, "bad .npy header: key '%.*s' given twice",
                            (int)key.len, key.text);
        if ((rc = npy_expect(p, ':', "':' after the key")) < 0 || (rc = npy_value(p, &key, d)) < 0)
            return rc;
        npy_ws(p);
        if (p->pos < p->n && p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if ((rc = npy_expect(p, '}', "',' or '}'")) < 0)
            return rc;
        break;
    }
    /* Then only the padding: spaces, and the '\n' that ends the header. */
    size_t tail = p->pos;
    while (tail < p->n - 1 && p->s[tail] == ' ')
        tail++;
    if (tail != p->n - 1 || p->s[p->n - 1] != '\n') {
        char found[64];
        npy_found(p, tail, found, sizeof found);
        return npy_fail(p, tail, -EPROTO,
                        "bad .npy header: expected spaces and a final '\\n' after the dict, "
                        "found %s",
                        found);
    }
    const char *missing = !d->have_descr   ? "descr"
                          : !d->have_order ? "fortran_order"
                          : !d->have_shape ? "shape"
                                           : NULL;
    if (missing)
        return npy_fail(p, 0, -EPROTO, "bad .npy header: no '%s' key", missing);
    return 0;
}

/* The header's fields against what this reader takes, into f->info. */
static int npy_check(struct npy_parser *p, const struct npy_dict *d, struct sd_vec_info *info)
{
    if (d->descr_is_list)
        return npy_fail(p, d->descr_at, -EINVAL,
                        "descr is a list: a structured dtype (named fields): expected '<f4', "
                        "'<f2' or '|u1' (a plain array of vectors)");
    int rc = npy_descr(p, &d->descr, &info->elem);
    if (rc < 0)
        return rc;
    if (d->fortran)
        return npy_fail(p, d->order_at, -EINVAL,
                        "fortran_order is True (column-major): expected False (C order, one "
                        "vector after another); write it with np.ascontiguousarray(a)");
    const int shape_len = (int)(d->shape_end - d->shape_at);
    const char *shape = p->s + d->shape_at;
    if (d->ndims == 0 || d->ndims > 2)
        return npy_fail(p, d->shape_at, -EINVAL,
                        "shape %.*s has %u dimensions: expected (rows, dim) or (dim,) (one "
                        "vector)%s",
                        shape_len, shape, d->ndims,
                        d->ndims > 2 ? "; reshape it first (a.reshape(len(a), -1))" : "");
    const uint64_t rows = d->ndims == 2 ? d->dims[0] : 1;
    const uint64_t dim = d->dims[d->ndims - 1];
    if (dim == 0 || dim > SD_SHARD_DIM_MAX)
        return npy_fail(p, d->shape_at, -EINVAL,
                        "shape %.*s: dim %" PRIu64 ": expected 1..%u (the scan's maximum)",
                        shape_len, shape, dim, SD_SHARD_DIM_MAX);
    if (rows == 0)
        return npy_fail(p, d->shape_at, -ENODATA, "shape %.*s holds no vectors", shape_len, shape);
    const uint64_t es = sd_vec__elem_size(info->elem);
    if (rows > UINT64_MAX / (dim * es))
        return npy_fail(p, d->shape_at, -EOVERFLOW, "shape %.*s: the data would be over 2^64 bytes",
                        shape_len, shape);
    info->rows = rows;
    info->dim = (uint32_t)dim;
    info->dim_offset = p->base + d->shape_at;
    info->row_bytes = dim * es;
    return 0;
}

int sd_vec__npy_parse(struct sd_vec_file *f, char *err, size_t err_len)
{
    const uint64_t size = f->info.file_size;
    unsigned char pre[12] = {0};
    ssize_t got = base_pread_full(f->fd, pre, sizeof pre, 0);
    if (got < 0)
        return sd_vec__errf(f->path, 0, err, err_len, (int)got, "read: %s", strerror((int)-got));
    const size_t have = (size_t)got;
    const size_t cmp = have < SD_VEC__NPY_MAGIC_LEN ? have : SD_VEC__NPY_MAGIC_LEN;
    if (have == 0 || memcmp(pre, SD_VEC__NPY_MAGIC, cmp) != 0) {
        char found[64] = "";
        size_t used = 0;
        for (size_t i = 0; i < cmp && used + 4 < sizeof found; i++)
            used +=
                (size_t)snprintf(found + used, sizeof found - used, "%s%02x", i ? " " : "", pre[i]);
        return sd_vec__errf(f->path, 0, err, err_len, -EPROTO,
                            "not a .npy file: expected the magic \\x93NUMPY (93 4e 55 4d 50 59), "
                            "found %s",
                            have ? found : "an empty file");
    }
    if (have < 8)
        return sd_vec__errf(f->path, have, err, err_len, -EIO,
                            "truncated header: the file ends at byte %zu, before the version "
                            "(bytes 6..7)",
                            have);
    const unsigned major = pre[6], minor = pre[7];
    if (major < 1 || major > 3 || minor != 0)
        return sd_vec__errf(f->path, 6, err, err_len, -EPROTO,
                            "unknown .npy version %u.%u: expected 1.0, 2.0 or 3.0", major, minor);
    const size_t len_bytes = major == 1 ? 2 : 4;
    const size_t hstart = 8 + len_bytes;
    if (have < hstart)
        return sd_vec__errf(f->path, have, err, err_len, -EIO,
                            "truncated header: the file ends at byte %zu, before the %zu-byte "
                            "header length at byte 8",
                            have, len_bytes);
    uint64_t hlen = (uint64_t)pre[8] | (uint64_t)pre[9] << 8;
    if (major > 1)
        hlen |= (uint64_t)pre[10] << 16 | (uint64_t)pre[11] << 24;
    if (hlen == 0 || hlen > SD_VEC__NPY_HEADER_MAX)
        return sd_vec__errf(f->path, 8, err, err_len, -EPROTO,
                            "header length %" PRIu64 ": expected 1..%u bytes", hlen,
                            SD_VEC__NPY_HEADER_MAX);
    const uint64_t hend = hstart + hlen;
    if (hend > size)
        return sd_vec__errf(f->path, size, err, err_len, -EIO,
                            "truncated header: declared as %" PRIu64 " bytes (bytes %zu..%" PRIu64
                            "), the file ends at byte %" PRIu64,
                            hlen, hstart, hend - 1, size);
    char *text = malloc((size_t)hlen + 1);
    if (!text)
        return sd_vec__errf(f->path, hstart, err, err_len, -ENOMEM,
                            "out of memory for a %" PRIu64 "-byte header", hlen);
    got = base_pread_full(f->fd, text, (size_t)hlen, hstart);
    if (got != (ssize_t)hlen) {
        free(text);
        return sd_vec__errf(f->path, hstart, err, err_len, got < 0 ? (int)got : -EIO,
                            "reading the header: %s",
                            got < 0 ? strerror((int)-got) : "the file shrank");
    }
    text[hlen] = '\0';
    struct npy_parser p = {
        .path = f->path,
        .s = text,
        .n = (size_t)hlen,
        .base = hstart,
        .err = err,
        .err_len = err_len,
    };
    struct npy_dict d;
    memset(&d, 0, sizeof d);
    int rc = npy_dict_parse(&p, &d);
    if (rc == 0)
        rc = npy_check(&p, &d, &f->info);
    free(text);
    if (rc < 0)
        return rc;
    f->info.format = SD_VEC_NPY;
    f->info.npy_version = major;
    f->info.data_offset = hend;
    const uint64_t want = f->info.rows * f->info.row_bytes;
    const uint64_t data = size - hend;
    if (data < want)
        return sd_vec__errf(f->path, size, err, err_len, -EIO,
                            "truncated data: %" PRIu64 " rows of %u x %s need %" PRIu64
                            " bytes from byte %" PRIu64 ", the file ends after %" PRIu64
                            " of them (row %" PRIu64 " is cut short)",
                            f->info.rows, f->info.dim, sd_vec_elem_name(f->info.elem), want, hend,
                            data, data / f->info.row_bytes);
    if (data > want)
        return sd_vec__errf(f->path, hend + want, err, err_len, -EIO,
                            "%" PRIu64 " bytes after the data (%" PRIu64 " rows of %u x %s end "
                            "here): expected the file to end",
                            data - want, f->info.rows, f->info.dim, sd_vec_elem_name(f->info.elem));
    return 0;
}
