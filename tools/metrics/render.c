/* The Prometheus text exposition format (0.0.4): HELP and TYPE lines, then
 * one sample line per series; histograms as cumulative _bucket{le=...}
 * lines, _sum and _count. See lease_metrics/metrics.h. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics_internal.h"

struct lm__buf {
    char *p;
    size_t len, cap;
    int failed;
};

static void lm__put(struct lm__buf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (b->len + n + 1 > cap)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void lm__puts(struct lm__buf *b, const char *s)
{
    lm__put(b, s, strlen(s));
}

/* HELP text: backslash and newline escaped. Label values: also the double
 * quote. */
static void lm__escaped(struct lm__buf *b, const char *s, int quote)
{
    for (; *s; s++) {
        if (*s == '\\')
            lm__puts(b, "\\\\");
        else if (*s == '\n')
            lm__puts(b, "\\n");
        else if (quote && *s == '"')
            lm__puts(b, "\\\"");
        else
            lm__put(b, s, 1);
    }
}

/* The shortest of %.15g..%.17g that reads back as @v; integers as such,
 * and the format's +Inf, -Inf and NaN. */
static void lm__number(struct lm__buf *b, double v)
{
    char t[40];
    if (isnan(v)) {
        lm__puts(b, "NaN");
        return;
    }
    if (isinf(v)) {
        lm__puts(b, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    if (v == floor(v) && fabs(v) < 9007199254740992.0) {
        snprintf(t, sizeof t, "%.0f", v);
    } else {
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(t, sizeof t, "%.*g", prec, v);
            if (strtod(t, NULL) == v)
                break;
        }
    }
    lm__puts(b, t);
}

/* name{l1="v1",...[,le="bound"]} */
static void lm__series_name(struct lm__buf *b, const struct lm_family *f, const struct lm_series *s,
                            const char *suffix, const char *le)
{
    lm__puts(b, f->name);
    lm__puts(b, suffix);
    if (f->nlabels == 0 && !le)
        return;
    lm__puts(b, "{");
    for (unsigned i = 0; i < f->nlabels; i++) {
        if (i)
            lm__puts(b, ",");
        lm__puts(b, f->labels[i]);
        lm__puts(b, "=\"");
        lm__escaped(b, s->values[i], 1);
        lm__puts(b, "\"");
    }
    if (le) {
        if (f->nlabels)
            lm__puts(b, ",");
        lm__puts(b, "le=\"");
        lm__puts(b, le);
        lm__puts(b, "\"");
    }
    lm__puts(b, "}");
}

static void lm__histogram(struct lm__buf *b, const struct lm_family *f, const struct lm_series *s)
{
    uint64_t cum = 0;
    for (unsigned i = 0; i <= f->nbuckets; i++) {
        cum += atomic_load_explicit(&s->buckets[i], memory_order_relaxed);
        struct lm__buf le = {0};
        if (i < f->nbuckets)
            lm__number(&le, f->bounds[i]);
        lm__series_name(b, f, s, "_bucket", i < f->nbuckets ? (le.p ? le.p : "0") : "+Inf");
        free(le.p);
        lm__puts(b, " ");
        lm__number(b, (double)cum);
        lm__puts(b, "\n");
    }
    lm__series_name(b, f, s, "_sum", NULL);
    lm__puts(b, " ");
    lm__number(b, lm_series_value(s));
    lm__puts(b, "\n");
    /* _count is the +Inf bucket, so the two always agree. */
    lm__series_name(b, f, s, "_count", NULL);
    lm__puts(b, " ");
    lm__number(b, (double)cum);
    lm__puts(b, "\n");
}

int lm_registry_render(struct lm_registry *reg, char **text_p, size_t *len_p)
{
    pthread_mutex_lock(&reg->collect_mu);
    if (reg->collect)
        reg->collect(reg->collect_ctx, reg);
    pthread_mutex_unlock(&reg->collect_mu);

    static const char *const types[] = {"", "counter", "gauge", "histogram"};
    struct lm__buf b = {0};
    lm__put(&b, "", 0); /* an empty registry renders as "" */
    pthread_mutex_lock(&reg->mu);
    for (const struct lm_family *f = reg->first; f; f = f->next) {
        lm__puts(&b, "# HELP ");
        lm__puts(&b, f->name);
        lm__puts(&b, " ");
        lm__escaped(&b, f->help, 0);
        lm__puts(&b, "\n# TYPE ");
        lm__puts(&b, f->name);
        lm__puts(&b, " ");
        lm__puts(&b, types[f->type]);
        lm__puts(&b, "\n");
        for (const struct lm_series *s = f->first; s; s = s->next) {
            if (f->type == LM_HISTOGRAM) {
                lm__histogram(&b, f, s);
                continue;
            }
            lm__series_name(&b, f, s, "", NULL);
            lm__puts(&b, " ");
            lm__number(&b, lm_series_value(s));
            lm__puts(&b, "\n");
        }
    }
    pthread_mutex_unlock(&reg->mu);
    if (b.failed) {
        free(b.p);
        return -ENOMEM;
    }
    *text_p = b.p;
    *len_p = b.len;
    return 0;
}
