/* The registry, its families and series, and lock-free updates: see
 * lease_metrics/metrics.h. Rendering is render.c. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "metrics_internal.h"

/* ---- names ---- */

static int lm__name_ok(const char *s, int metric)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n >= LM_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int alpha =
            (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (metric && c == ':');
        int digit = c >= '0' && c <= '9';
        if (!alpha && !(digit && i > 0))
            return 0;
    }
    return 1;
}

static char *lm__strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* ---- the registry ---- */

int lm_registry_create(struct lm_registry **reg_p)
{
    struct lm_registry *reg = calloc(1, sizeof *reg);
    if (!reg)
        return -ENOMEM;
    pthread_mutex_init(&reg->mu, NULL);
    pthread_mutex_init(&reg->collect_mu, NULL);
    *reg_p = reg;
    return 0;
}

static void lm__series_free(struct lm_series *s)
{
    for (unsigned i = 0; i < LM_LABELS_MAX; i++)
        free(s->values[i]);
    free(s->buckets);
    free(s);
}

void lm_registry_destroy(struct lm_registry *reg)
{
    if (!reg)
        return;
    struct lm_family *f = reg->first;
    while (f) {
        struct lm_family *next = f->next;
        struct lm_series *s = f->first;
        while (s) {
            struct lm_series *sn = s->next;
            lm__series_free(s);
            s = sn;
        }
        for (unsigned i = 0; i < f->nlabels; i++)
            free(f->labels[i]);
        free(f->name);
        free(f->help);
        free(f);
        f = next;
    }
    pthread_mutex_destroy(&reg->mu);
    pthread_mutex_destroy(&reg->collect_mu);
    free(reg);
}

int lm_family_clear(struct lm_family *fam)
{
    if (!fam || fam->nlabels == 0)
        return -EINVAL;
    pthread_mutex_lock(&fam->reg->mu);
    struct lm_series *s = fam->first;
    fam->first = fam->last = NULL;
    fam->nseries = 0;
    pthread_mutex_unlock(&fam->reg->mu);
    while (s) {
        struct lm_series *next = s->next;
        lm__series_free(s);
        s = next;
    }
    return 0;
}

int lm_registry_collect_set(struct lm_registry *reg, lm_collect_fn fn, void *ctx)
{
    pthread_mutex_lock(&reg->collect_mu);
    reg->collect = fn;
    reg->collect_ctx = ctx;
    pthread_mutex_unlock(&reg->collect_mu);
    return 0;
}

/* Makes a series of @f (the registry's lock held). */
static int lm__series_new(struct lm_family *f, const char *const *values, struct lm_series **s_p)
{
    if (f->nseries >= LM_SERIES_MAX)
        return -ENOSPC;
    struct lm_series *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->fam = f;
    for (unsigned i = 0; i < f->nlabels; i++) {
        s->values[i] = lm__strdup(values[i]);
        if (!s->values[i]) {
            lm__series_free(s);
            return -ENOMEM;
        }
    }
    if (f->type == LM_HISTOGRAM) {
        s->buckets = calloc(f->nbuckets + 1, sizeof *s->buckets);
        if (!s->buckets) {
            lm__series_free(s);
            return -ENOMEM;
        }
    }
    if (f->last)
        f->last->next = s;
    else
        f->first = s;
    f->last = s;
    f->nseries++;
    *s_p = s;
    return 0;
}

int lm_family_add(struct lm_registry *reg, enum lm_type type, const char *name, const char *help,
                  const char *const *labels, const double *buckets, size_t nbuckets,
                  struct lm_family **fam_p)
{
    if (type != LM_COUNTER && type != LM_GAUGE && type != LM_HISTOGRAM)
        return -EINVAL;
    if (!lm__name_ok(name, 1) || !help || !help[0] || strlen(help) >= LM_HELP_MAX)
        return -EINVAL;
    unsigned nlabels = 0;
    for (; labels && labels[nlabels]; nlabels++) {
        const char *l = labels[nlabels];
        if (nlabels == LM_LABELS_MAX || !lm__name_ok(l, 0) || strncmp(l, "__", 2) == 0 ||
            (type == LM_HISTOGRAM && strcmp(l, "le") == 0))
            return -EINVAL;
        for (unsigned j = 0; j < nlabels; j++)
            if (strcmp(labels[j], l) == 0)
                return -EINVAL;
    }
    if (type == LM_HISTOGRAM) {
        if (!buckets || nbuckets == 0 || nbuckets > LM_BUCKETS_MAX)
            return -EINVAL;
        for (size_t i = 0; i < nbuckets; i++)
            if (!isfinite(buckets[i]) || (i > 0 && buckets[i] <= buckets[i - 1]))
                return -EINVAL;
    } else if (nbuckets != 0) {
        return -EINVAL;
    }

    struct lm_family *f = calloc(1, sizeof *f);
    if (!f)
        return -ENOMEM;
    f->type = type;
    f->name = lm__strdup(name);
    f->help = lm__strdup(help);
    f->nlabels = nlabels;
    f->nbuckets = type == LM_HISTOGRAM ? (unsigned)nbuckets : 0;
    for (size_t i = 0; i < f->nbuckets; i++)
        f->bounds[i] = buckets[i];
    int rc = f->name && f->help ? 0 : -ENOMEM;
    for (unsigned i = 0; rc == 0 && i < nlabels; i++)
        if (!(f->labels[i] = lm__strdup(labels[i])))
            rc = -ENOMEM;
    pthread_mutex_lock(&reg->mu);
    for (struct lm_family *o = reg->first; rc == 0 && o; o = o->next)
        if (strcmp(o->name, name) == 0)
            rc = -EEXIST;
    struct lm_series *only = NULL;
    if (rc == 0 && nlabels == 0)
        rc = lm__series_new(f, NULL, &only);
    if (rc == 0) {
        f->reg = reg;
        if (reg->last)
            reg->last->next = f;
        else
            reg->first = f;
        reg->last = f;
    }
    pthread_mutex_unlock(&reg->mu);
    if (rc < 0) {
        if (only)
            lm__series_free(only);
        for (unsigned i = 0; i < nlabels; i++)
            free(f->labels[i]);
        free(f->name);
        free(f->help);
        free(f);
        return rc;
    }
    *fam_p = f;
    return 0;
}

struct lm_family *lm_family_find(struct lm_registry *reg, const char *name)
{
    pthread_mutex_lock(&reg->mu);
    struct lm_family *f = reg->first;
    while (f && strcmp(f->name, name) != 0)
        f = f->next;
    pthread_mutex_unlock(&reg->mu);
    return f;
}

int lm_series_get(struct lm_family *f, const char *const *values, struct lm_series **s_p)
{
    if (f->nlabels == 0 && values && values[0])
        return -EINVAL;
    for (unsigned i = 0; i < f->nlabels; i++)
        if (!values || !values[i] || strlen(values[i]) >= LM_VALUE_MAX)
            return -EINVAL;
    pthread_mutex_lock(&f->reg->mu);
    struct lm_series *s;
    for (s = f->first; s; s = s->next) {
        unsigned i = 0;
        while (i < f->nlabels && strcmp(s->values[i], values[i]) == 0)
            i++;
        if (i == f->nlabels)
            break;
    }
    int rc = s ? 0 : lm__series_new(f, values, &s);
    pthread_mutex_unlock(&f->reg->mu);
    if (rc == 0)
        *s_p = s;
    return rc;
}

/* ---- updates ---- */

static uint64_t lm__bits(double v)
{
    uint64_t b;
    memcpy(&b, &v, sizeof b);
    return b;
}

static double lm__double(uint64_t b)
{
    double v;
    memcpy(&v, &b, sizeof v);
    return v;
}

static void lm__atomic_add(_Atomic uint64_t *cell, double v)
{
    uint64_t old = atomic_load_explicit(cell, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(cell, &old, lm__bits(lm__double(old) + v),
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
}

void lm_counter_add(struct lm_series *s, double v)
{
    if (!(v >= 0)) /* negative or NaN */
        return;
    lm__atomic_add(&s->value, v);
}

void lm_counter_set(struct lm_series *s, double total)
{
    uint64_t old = atomic_load_explicit(&s->value, memory_order_relaxed);
    while (total > lm__double(old))
        if (atomic_compare_exchange_weak_explicit(&s->value, &old, lm__bits(total),
                                                  memory_order_relaxed, memory_order_relaxed))
            break;
}

void lm_gauge_set(struct lm_series *s, double v)
{
    atomic_store_explicit(&s->value, lm__bits(v), memory_order_relaxed);
}

void lm_gauge_add(struct lm_series *s, double v)
{
    lm__atomic_add(&s->value, v);
}

void lm_histogram_observe(struct lm_series *s, double v)
{
    const struct lm_family *f = s->fam;
    if (f->type != LM_HISTOGRAM || isnan(v))
        return;
    unsigned i = 0;
    while (i < f->nbuckets && v > f->bounds[i])
        i++;
    atomic_fetch_add_explicit(&s->buckets[i], 1, memory_order_relaxed);
    lm__atomic_add(&s->value, v);
}

double lm_series_value(const struct lm_series *s)
{
    return lm__double(atomic_load_explicit(&((struct lm_series *)s)->value, memory_order_relaxed));
}
