/* kn_kdesc: see include/kernels/kdesc.h. A line-at-a-time parser over a
 * bounded buffer (the text need not be NUL-terminated), the check of a
 * descriptor against its cubin's parameter tables, and the check of a
 * launch's argument block. */
#include "kernels/kdesc.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cubin.h"

__attribute__((format(printf, 4, 5))) static int kn__kfail(char *err, size_t err_len, int rc,
                                                           const char *fmt, ...)
{
    if (err && err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return rc;
}

static const struct {
    const char *name;
    enum kn_kdesc_type type;
    uint32_t size;
} kn__types[] = {
    {"lease_ptr", KN_KDESC_LEASE_PTR, 8},
    {"lease_len", KN_KDESC_LEASE_LEN, 8},
    {"result_ptr", KN_KDESC_RESULT_PTR, 8},
    {"result_len", KN_KDESC_RESULT_LEN, 8},
    {"u32", KN_KDESC_U32, 4},
    {"i32", KN_KDESC_I32, 4},
    {"u64", KN_KDESC_U64, 8},
    {"i64", KN_KDESC_I64, 8},
    {"f32", KN_KDESC_F32, 4},
    {"f64", KN_KDESC_F64, 8},
};
#define KN__NTYPES (sizeof kn__types / sizeof kn__types[0])

const char *kn_kdesc_type_name(enum kn_kdesc_type t)
{
    for (size_t i = 0; i < KN__NTYPES; i++)
        if (kn__types[i].type == t)
            return kn__types[i].name;
    return "?";
}

static int kn__is_scalar(enum kn_kdesc_type t)
{
    return t >= KN_KDESC_U32;
}

static int kn__is_integer(enum kn_kdesc_type t)
{
    return t >= KN_KDESC_U32 && t <= KN_KDESC_I64;
}

/* ---- tokens ---------------------------------------------------------------- */

#define KN__MAX_TOKENS 16
#define KN__TOKEN_LEN 96

struct kn__line {
    unsigned no;
    int n;
    char tok[KN__MAX_TOKENS][KN__TOKEN_LEN];
};

/* Splits one line (comments dropped) into tokens. */
static int kn__tokenize(const char *p, size_t len, struct kn__line *l, char *err, size_t err_len)
{
    l->n = 0;
    size_t i = 0;
    while (i < len) {
        unsigned char c = (unsigned char)p[i];
        if (c == '#')
            break;
        if (c == ' ' || c == '\t' || c == '\r') {
            i++;
            continue;
        }
        if (c < 0x21 || c > 0x7e)
            return kn__kfail(err, err_len, -EINVAL,
                             "line %u: expected printable ASCII, found byte 0x%02x", l->no, c);
        size_t start = i;
        while (i < len && p[i] != ' ' && p[i] != '\t' && p[i] != '\r' && p[i] != '#') {
            unsigned char d = (unsigned char)p[i];
            if (d < 0x21 || d > 0x7e)
                return kn__kfail(err, err_len, -EINVAL,
                                 "line %u: expected printable ASCII, found byte 0x%02x", l->no, d);
            i++;
        }
        if (l->n == KN__MAX_TOKENS)
            return kn__kfail(err, err_len, -EINVAL, "line %u: expected at most %d words", l->no,
                             KN__MAX_TOKENS);
        if (i - start >= KN__TOKEN_LEN)
            return kn__kfail(err, err_len, -EINVAL,
                             "line %u: expected words of at most %d bytes, found one of %zu", l->no,
                             KN__TOKEN_LEN - 1, i - start);
        memcpy(l->tok[l->n], p + start, i - start);
        l->tok[l->n][i - start] = '\0';
        l->n++;
    }
    return 0;
}

/* A C identifier shorter than @cap. */
static int kn__ident(const struct kn__line *l, const char *what, const char *s, size_t cap,
                     char *err, size_t err_len)
{
    size_t n = strlen(s);
    int ok = n > 0 && n < cap && !(s[0] >= '0' && s[0] <= '9');
    for (size_t i = 0; ok && i < n; i++)
        ok = (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
             (s[i] >= '0' && s[i] <= '9') || s[i] == '_';
    if (ok)
        return 0;
    return kn__kfail(err, err_len, -EINVAL,
                     "line %u: expected a %s name (a C identifier of 1..%zu bytes), found '%s'",
                     l->no, what, cap - 1, s);
}

static int kn__u64(const char *s, uint64_t *v_p)
{
    if (!*s || *s == '-' || *s == '+' || *s == ' ')
        return -1;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || *end)
        return -1;
    *v_p = v;
    return 0;
}

static int kn__i64(const char *s, int64_t *v_p)
{
    if (!*s || *s == '+' || *s == ' ')
        return -1;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 0);
    if (errno || *end)
        return -1;
    *v_p = v;
    return 0;
}

/* key=value at token @i: the key in @key (a buffer of KN__TOKEN_LEN) and
 * a pointer to the value. */
static int kn__kv(const struct kn__line *l, int i, char *key, const char **val_p, char *err,
                  size_t err_len)
{
    const char *t = l->tok[i];
    const char *eq = strchr(t, '=');
    if (!eq || eq == t || !eq[1])
        return kn__kfail(err, err_len, -EINVAL, "line %u: expected key=value, found '%s'", l->no,
                         t);
    memcpy(key, t, (size_t)(eq - t));
    key[eq - t] = '\0';
    *val_p = eq + 1;
    return 0;
}

/* ---- the lines ---------------------------------------------------------------- */

static int kn__kernel_line(const struct kn__line *l, struct kn_kdesc *d, char *err, size_t err_len)
{
    if (l->n < 2)
        return kn__kfail(err, err_len, -EINVAL, "line %u: expected 'kernel NAME [key=value...]'",
                         l->no);
    int rc = kn__ident(l, "kernel", l->tok[1], KN_KDESC_KERNEL_LEN, err, err_len);
    if (rc < 0)
        return rc;
    if (kn_kdesc_find(d, l->tok[1]))
        return kn__kfail(err, err_len, -EINVAL,
                         "line %u: kernel %s declared twice: expected each kernel once", l->no,
                         l->tok[1]);
    if (d->count == KN_KDESC_MAX_KERNELS)
        return kn__kfail(err, err_len, -E2BIG, "line %u: expected at most %d kernels", l->no,
                         KN_KDESC_MAX_KERNELS);
    struct kn_kdesc_kernel *k = &d->kernels[d->count];
    memset(k, 0, sizeof *k);
    memcpy(k->name, l->tok[1], strlen(l->tok[1]) + 1); /* kn__ident bounded it */
    k->block_max = KN_KDESC_BLOCK_MAX;
    for (int i = 2; i < l->n; i++) {
        char key[KN__TOKEN_LEN];
        const char *val;
        uint64_t v;
        if ((rc = kn__kv(l, i, key, &val, err, err_len)) < 0)
            return rc;
        int block = strcmp(key, "block_max") == 0, shared = strcmp(key, "shared_max") == 0,
            result = strcmp(key, "result_max") == 0;
        if ((block || shared || result) && kn__u64(val, &v) < 0)
            return kn__kfail(err, err_len, -EINVAL, "line %u: %s: expected a number, found '%s'",
                             l->no, key, val);
        if (block && v >= 1 && v <= KN_KDESC_BLOCK_MAX)
            k->block_max = (uint32_t)v;
        else if (shared && v <= (1u << 30))
            k->shared_max = (uint32_t)v;
        else if (result && v <= KN_KDESC_RESULT_MAX)
            k->result_max = (uint32_t)v;
        else
            return kn__kfail(err, err_len, -EINVAL,
                             "line %u: expected block_max=1..%u, shared_max=0..%u or "
                             "result_max=0..%u, found '%s'",
                             l->no, KN_KDESC_BLOCK_MAX, 1u << 30, KN_KDESC_RESULT_MAX, l->tok[i]);
    }
    d->count++;
    return 0;
}

/* The bounds of @p from min=/max= values, checked against its type. */
static int kn__range_set(const struct kn__line *l, struct kn_kdesc_param *p, const char *key,
                         const char *val, char *err, size_t err_len)
{
    int is_min = strcmp(key, "min") == 0;
    if (p->type == KN_KDESC_I32 || p->type == KN_KDESC_I64) {
        int64_t v;
        int64_t lo = p->type == KN_KDESC_I32 ? INT32_MIN : INT64_MIN;
        int64_t hi = p->type == KN_KDESC_I32 ? INT32_MAX : INT64_MAX;
        if (kn__i64(val, &v) < 0 || v < lo || v > hi)
            return kn__kfail(err, err_len, -EINVAL, "line %u: %s: expected a %s value, found '%s'",
                             l->no, key, kn_kdesc_type_name(p->type), val);
        *(is_min ? &p->imin : &p->imax) = v;
    } else {
        uint64_t v;
        uint64_t hi = p->type == KN_KDESC_U32 ? UINT32_MAX : UINT64_MAX;
        if (kn__u64(val, &v) < 0 || v > hi)
            return kn__kfail(err, err_len, -EINVAL, "line %u: %s: expected a %s value, found '%s'",
                             l->no, key, kn_kdesc_type_name(p->type), val);
        *(is_min ? &p->umin : &p->umax) = v;
    }
    p->ranged = 1;
    return 0;
}

static int kn__arg_line(const struct kn__line *l, struct kn_kdesc *d, char *err, size_t err_len)
{
    if (d->count == 0)
        return kn__kfail(err, err_len, -EINVAL,
                         "line %u: expected a 'kernel' line before its arguments", l->no);
    struct kn_kdesc_kernel *k = &d->kernels[d->count - 1];
    if (l->n < 3)
        return kn__kfail(err, err_len, -EINVAL, "line %u: expected 'arg NAME TYPE [key=value...]'",
                         l->no);
    int rc = kn__ident(l, "argument", l->tok[1], KN_KDESC_ARG_LEN, err, err_len);
    if (rc < 0)
        return rc;
    for (uint32_t i = 0; i < k->nparams; i++)
        if (strcmp(k->params[i].name, l->tok[1]) == 0)
            return kn__kfail(err, err_len, -EINVAL, "line %u: argument %s of %s declared twice",
                             l->no, l->tok[1], k->name);
    if (k->nparams == KN_KDESC_MAX_PARAMS)
        return kn__kfail(err, err_len, -E2BIG, "line %u: %s: expected at most %d arguments", l->no,
                         k->name, KN_KDESC_MAX_PARAMS);
    struct kn_kdesc_param *p = &k->params[k->nparams];
    memset(p, 0, sizeof *p);
    memcpy(p->name, l->tok[1], strlen(l->tok[1]) + 1); /* kn__ident bounded it */
    for (size_t t = 0; t < KN__NTYPES && !p->type; t++)
        if (strcmp(kn__types[t].name, l->tok[2]) == 0) {
            p->type = kn__types[t].type;
            p->size = kn__types[t].size;
        }
    if (!p->type)
        return kn__kfail(err, err_len, -EINVAL,
                         "line %u: expected a type (lease_ptr, lease_len, result_ptr, "
                         "result_len, u32, i32, u64, i64, f32, f64), found '%s'",
                         l->no, l->tok[2]);
    int have_lease = 0;
    p->imin = p->type == KN_KDESC_I32 ? INT32_MIN : INT64_MIN;
    p->imax = p->type == KN_KDESC_I32 ? INT32_MAX : INT64_MAX;
    p->umax = p->type == KN_KDESC_U32 ? UINT32_MAX : UINT64_MAX;
    p->align = 1;
    for (int i = 3; i < l->n; i++) {
        char key[KN__TOKEN_LEN];
        const char *val;
        uint64_t v;
        if ((rc = kn__kv(l, i, key, &val, err, err_len)) < 0)
            return rc;
        int leasey = p->type == KN_KDESC_LEASE_PTR || p->type == KN_KDESC_LEASE_LEN;
        if (strcmp(key, "lease") == 0 && leasey) {
            if (kn__u64(val, &v) < 0 || v >= KN_KDESC_MAX_LEASES)
                return kn__kfail(err, err_len, -EINVAL,
                                 "line %u: lease: expected 0..%d, found '%s'", l->no,
                                 KN_KDESC_MAX_LEASES - 1, val);
            p->lease = (uint32_t)v;
            have_lease = 1;
        } else if (strcmp(key, "align") == 0 && p->type == KN_KDESC_LEASE_PTR) {
            if (kn__u64(val, &v) < 0 || v == 0 || v > 4096 || (v & (v - 1)) != 0)
                return kn__kfail(err, err_len, -EINVAL,
                                 "line %u: align: expected a power of two 1..4096, found '%s'",
                                 l->no, val);
            p->align = (uint32_t)v;
        } else if (strcmp(key, "access") == 0 && p->type == KN_KDESC_LEASE_PTR) {
            if (strcmp(val, "read") != 0 && strcmp(val, "write") != 0)
                return kn__kfail(err, err_len, -EINVAL,
                                 "line %u: access: expected read or write, found '%s'", l->no, val);
            p->write = strcmp(val, "write") == 0;
        } else if ((strcmp(key, "min") == 0 || strcmp(key, "max") == 0) &&
                   kn__is_integer(p->type)) {
            if ((rc = kn__range_set(l, p, key, val, err, err_len)) < 0)
                return rc;
        } else {
            return kn__kfail(err, err_len, -EINVAL,
                             "line %u: '%s' does not apply to a %s argument (lease=, access= "
                             "and align= go with lease_ptr, lease= with lease_len, min= and "
                             "max= with integers)",
                             l->no, l->tok[i], l->tok[2]);
        }
    }
    if ((p->type == KN_KDESC_LEASE_PTR || p->type == KN_KDESC_LEASE_LEN) && !have_lease)
        return kn__kfail(err, err_len, -EINVAL, "line %u: %s %s: expected lease=N", l->no,
                         l->tok[2], p->name);
    if (p->ranged && ((p->type == KN_KDESC_I32 || p->type == KN_KDESC_I64) ? p->imin > p->imax
                                                                           : p->umin > p->umax))
        return kn__kfail(err, err_len, -EINVAL, "line %u: %s: expected min <= max", l->no, p->name);
    k->nparams++;
    return 0;
}

/* What a kernel's lines together must say. */
static int kn__kernel_finish(struct kn_kdesc_kernel *k, char *err, size_t err_len)
{
    uint32_t used = 0, off = 0;
    int result = 0;
    for (uint32_t i = 0; i < k->nparams; i++) {
        struct kn_kdesc_param *p = &k->params[i];
        if (p->type == KN_KDESC_LEASE_PTR || p->type == KN_KDESC_LEASE_LEN)
            used |= 1u << p->lease;
        if (p->type == KN_KDESC_LEASE_PTR && p->write)
            k->writes |= 1u << p->lease;
        result |= p->type == KN_KDESC_RESULT_PTR;
        if (kn__is_scalar(p->type)) {
            off = (off + p->size - 1) / p->size * p->size;
            p->arg_offset = off;
            off += p->size;
        }
    }
    k->arg_bytes = (off + 7) / 8 * 8;
    int ptr = 0;
    for (uint32_t i = 0; i < k->nparams; i++)
        ptr |= k->params[i].type == KN_KDESC_LEASE_PTR;
    if (!ptr)
        return kn__kfail(err, err_len, -EINVAL,
                         "kernel %s: expected a lease_ptr argument (a launch runs on a lease)",
                         k->name);
    k->leases = 0;
    while (k->leases < KN_KDESC_MAX_LEASES && (used & (1u << k->leases)))
        k->leases++;
    if (used != (1u << k->leases) - 1)
        return kn__kfail(err, err_len, -EINVAL,
                         "kernel %s: expected lease indices 0..n-1 without gaps, found the "
                         "set 0x%x",
                         k->name, used);
    if (result && k->result_max == 0)
        return kn__kfail(err, err_len, -EINVAL,
                         "kernel %s: a result_ptr argument needs result_max=1..%u", k->name,
                         KN_KDESC_RESULT_MAX);
    if (k->arg_bytes > KN_KDESC_ARGS_MAX)
        return kn__kfail(err, err_len, -E2BIG,
                         "kernel %s: its scalars take %u bytes, expected at most %u", k->name,
                         k->arg_bytes, KN_KDESC_ARGS_MAX);
    return 0;
}

int kn_kdesc_parse(const char *text, size_t len, struct kn_kdesc *desc_p, char *err, size_t err_len)
{
    if (err && err_len)
        err[0] = '\0';
    if ((!text && len) || !desc_p)
        return kn__kfail(err, err_len, -EINVAL, "no text or no result: expected both");
    if (len > KN_KDESC_MAX_BYTES)
        return kn__kfail(err, err_len, -EFBIG, "expected at most %u bytes, found %zu",
                         KN_KDESC_MAX_BYTES, len);
    struct kn_kdesc d = {.count = 0};
    d.kernels = calloc(KN_KDESC_MAX_KERNELS, sizeof *d.kernels);
    struct kn__line *l = malloc(sizeof *l);
    int rc = 0, versioned = 0;
    if (!d.kernels || !l) {
        rc = kn__kfail(err, err_len, -ENOMEM, "out of memory");
        goto out;
    }
    l->no = 0;
    for (size_t at = 0; at < len && rc == 0;) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) : len;
        l->no++;
        if ((rc = kn__tokenize(text + at, end - at, l, err, err_len)) < 0)
            break;
        at = end + 1;
        if (l->n == 0)
            continue;
        if (!versioned) {
            if (l->n != 2 || strcmp(l->tok[0], "kdesc") != 0 || strcmp(l->tok[1], "1") != 0) {
                rc = kn__kfail(err, err_len, -EINVAL,
                               "line %u: expected 'kdesc %d' first, found '%s%s%s'", l->no,
                               KN_KDESC_VERSION, l->tok[0], l->n > 1 ? " " : "",
                               l->n > 1 ? l->tok[1] : "");
                break;
            }
            versioned = 1;
        } else if (strcmp(l->tok[0], "kernel") == 0) {
            if (d.count && (rc = kn__kernel_finish(&d.kernels[d.count - 1], err, err_len)) < 0)
                break;
            rc = kn__kernel_line(l, &d, err, err_len);
        } else if (strcmp(l->tok[0], "arg") == 0) {
            rc = kn__arg_line(l, &d, err, err_len);
        } else {
            rc = kn__kfail(err, err_len, -EINVAL, "line %u: expected 'kernel' or 'arg', found '%s'",
                           l->no, l->tok[0]);
        }
    }
    if (rc == 0 && !versioned)
        rc = kn__kfail(err, err_len, -EINVAL, "expected 'kdesc %d' first, found no line",
                       KN_KDESC_VERSION);
    if (rc == 0 && d.count == 0)
        rc = kn__kfail(err, err_len, -EINVAL, "expected at least one kernel, found none");
    if (rc == 0)
        rc = kn__kernel_finish(&d.kernels[d.count - 1], err, err_len);
out:
    free(l);
    if (rc < 0) {
        kn_kdesc_free(&d);
        return rc;
    }
    *desc_p = d;
    return 0;
}

void kn_kdesc_free(struct kn_kdesc *desc)
{
    if (!desc)
        return;
    free(desc->kernels);
    desc->kernels = NULL;
    desc->count = 0;
}

const struct kn_kdesc_kernel *kn_kdesc_find(const struct kn_kdesc *desc, const char *name)
{
    for (size_t i = 0; desc && name && i < desc->count; i++)
        if (strcmp(desc->kernels[i].name, name) == 0)
            return &desc->kernels[i];
    return NULL;
}

/* ---- against the cubin ------------------------------------------------------ */

int kn_kdesc_check_cubin(const struct kn_kdesc *desc, const void *cubin, size_t size, char *err,
                         size_t err_len)
{
    if (err && err_len)
        err[0] = '\0';
    if (!desc || (!cubin && size))
        return kn__kfail(err, err_len, -EINVAL, "no descriptor or no cubin: expected both");
    struct kn_cubin_kernel_info *info = malloc(sizeof *info);
    if (!info)
        return kn__kfail(err, err_len, -ENOMEM, "out of memory");
    int rc = 0;
    for (size_t i = 0; i < desc->count && rc == 0; i++) {
        const struct kn_kdesc_kernel *k = &desc->kernels[i];
        char why[512];
        rc = kn_cubin_kernel_info(cubin, size, k->name, info, why, sizeof why);
        if (rc < 0) {
            kn__kfail(err, err_len, rc, "kernel %s: %s", k->name, why);
            break;
        }
        if (info->nparams != k->nparams) {
            rc = kn__kfail(err, err_len, -EPROTO,
                           "kernel %s: the descriptor declares %u parameters, the cubin's "
                           "parameter table has %zu",
                           k->name, k->nparams, info->nparams);
            break;
        }
        for (uint32_t p = 0; p < k->nparams; p++)
            if (info->params[p].size != k->params[p].size) {
                rc = kn__kfail(err, err_len, -EPROTO,
                               "kernel %s: parameter %u (%s, %s) is %u bytes in the "
                               "descriptor, %u in the cubin",
                               k->name, p, k->params[p].name, kn_kdesc_type_name(k->params[p].type),
                               k->params[p].size, info->params[p].size);
                break;
            }
        if (rc == 0 && info->max_threads && k->block_max > info->max_threads)
            rc = kn__kfail(err, err_len, -EPROTO,
                           "kernel %s: block_max=%u, but the cubin's launch bound is %u "
                           "threads",
                           k->name, k->block_max, info->max_threads);
    }
    free(info);
    return rc;
}

/* ---- a launch's arguments --------------------------------------------------- */

int kn_kdesc_args_check(const struct kn_kdesc_kernel *k, const void *args, size_t len,
                        uint32_t *index_p, char *err, size_t err_len)
{
    const unsigned char *b = args;
    uint32_t at = 0;
    *index_p = UINT32_MAX;
    for (uint32_t i = 0; i < k->nparams; i++) {
        const struct kn_kdesc_param *p = &k->params[i];
        if (!kn__is_scalar(p->type))
            continue;
        if (p->arg_offset + p->size > len) {
            *index_p = i;
            return kn__kfail(err, err_len, -EINVAL,
                             "argument %u (%s %s) at byte %u: the block has %zu bytes, "
                             "expected %u",
                             i, kn_kdesc_type_name(p->type), p->name, p->arg_offset, len,
                             k->arg_bytes);
        }
        for (uint32_t z = at; z < p->arg_offset; z++)
            if (b[z]) {
                *index_p = i;
                return kn__kfail(err, err_len, -EINVAL,
                                 "argument %u (%s): padding byte %u before it is not zero", i,
                                 p->name, z);
            }
        at = p->arg_offset + p->size;
        if (!p->ranged)
            continue;
        if (p->type == KN_KDESC_U32 || p->type == KN_KDESC_U64) {
            uint64_t v = 0;
            if (p->type == KN_KDESC_U32) {
                uint32_t v32;
                memcpy(&v32, b + p->arg_offset, 4);
                v = v32;
            } else {
                memcpy(&v, b + p->arg_offset, 8);
            }
            if (v < p->umin || v > p->umax) {
                *index_p = i;
                return kn__kfail(err, err_len, -EINVAL,
                                 "argument %u (%s %s): expected %" PRIu64 "..%" PRIu64
                                 ", found %" PRIu64,
                                 i, kn_kdesc_type_name(p->type), p->name, p->umin, p->umax, v);
            }
        } else {
            int64_t v = 0;
            if (p->type == KN_KDESC_I32) {
                int32_t v32;
                memcpy(&v32, b + p->arg_offset, 4);
                v = v32;
            } else {
                memcpy(&v, b + p->arg_offset, 8);
            }
            if (v < p->imin || v > p->imax) {
                *index_p = i;
                return kn__kfail(err, err_len, -EINVAL,
                                 "argument %u (%s %s): expected %" PRId64 "..%" PRId64
                                 ", found %" PRId64,
                                 i, kn_kdesc_type_name(p->type), p->name, p->imin, p->imax, v);
            }
        }
    }
    if (len != k->arg_bytes)
        return kn__kfail(err, err_len, -EINVAL,
                         "the argument block has %zu bytes, kernel %s takes %u", len, k->name,
                         k->arg_bytes);
    for (uint32_t z = at; z < len; z++)
        if (b[z])
            return kn__kfail(err, err_len, -EINVAL,
                             "the argument block's trailing padding byte %u is not zero", z);
    return 0;
}
