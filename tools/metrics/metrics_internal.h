/* What the metrics library's files share: registry.c (families, series,
 * updates) is under render.c (the text format) and server.c (HTTP); the
 * registry's lock guards the lists, never the values, which are atomic. */
#ifndef LEASE_METRICS_INTERNAL_H
#define LEASE_METRICS_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "lease_metrics/metrics.h"

struct lm_series {
    struct lm_series *next;
    struct lm_family *fam;
    char *values[LM_LABELS_MAX];
    _Atomic uint64_t value; /* a double's bits: the value, or a histogram's sum */
    _Atomic uint64_t
        *buckets; /* histogram: nbuckets + 1 counts (the last is +Inf), not cumulative */
};

struct lm_family {
    struct lm_family *next;
    struct lm_registry *reg;
    enum lm_type type;
    char *name;
    char *help;
    char *labels[LM_LABELS_MAX];
    unsigned nlabels;
    double bounds[LM_BUCKETS_MAX];
    unsigned nbuckets;
    struct lm_series *first, *last;
    unsigned nseries;
};

struct lm_registry {
    pthread_mutex_t mu; /* the family and series lists */
    struct lm_family *first, *last;
    pthread_mutex_t collect_mu; /* one collect at a time; never held with mu */
    lm_collect_fn collect;
    void *collect_ctx;
};

#endif /* LEASE_METRICS_INTERNAL_H */
