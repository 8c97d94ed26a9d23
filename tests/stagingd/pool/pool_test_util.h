/* Helpers shared by the staging pool's suite (test_pool_*.c): log capture,
 * a small three-class config, fd and mapping counters, data patterns, a
 * sorted set of live buffers and the checks made on them. */
#ifndef POOL_TEST_UTIL_H
#define POOL_TEST_UTIL_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "pool_internal.h"
#include "lease/client.h"

#define MIB ((uint64_t)1 << 20)
#define SEED 0x5d5eed2026ull

struct log_capture {
    unsigned lines;
    char last[512];
    char all[16384];
};

struct live {
    struct leasec_pool_buf buf;
    uint64_t key;
};

/* Live buffers kept sorted by address, so an overlap shows up as a
 * neighbour that reaches past the start of the next one. */
struct live_set {
    struct live *v;
    unsigned n, cap;
};

struct random_run {
    uint64_t rng;
    struct live_set set;
    uint64_t in_use[LT_CLASS_MAPPED + 1];
    uint64_t live[LT_CLASS_MAPPED + 1];
    uint64_t high[LT_CLASS_MAPPED + 1];
    uint64_t failures[LT_CLASS_MAPPED + 1];
};

/* The pool log of the test running now (small_config points its sink here). */
extern struct log_capture captured;

uint64_t rng_next(uint64_t *s);

void capture_log(void *ctx, int level, const char *subsys, const char *line);

struct leasec_pool_config small_config(void);

struct leasec_pool *create_or_fail(const struct leasec_pool_config *c);

int count_fds(void);

int count_pool_mappings(void);

/* kB of the mapping at @base that are in this process's page tables: Rss,
 * plus the hugetlb pages smaps counts apart from it. */
long mapping_resident_kb(const void *base);

/* Fills a buffer with a pattern that depends on @key and on the position. */
void pattern_fill(void *p, size_t len, uint64_t key);

/* Index of the first wrong byte, or -1. */
long pattern_check(const void *p, size_t len, uint64_t key);

unsigned live_lower_bound(const struct live_set *s, uintptr_t addr);

void live_insert(struct live_set *s, const struct live *item);

void live_remove(struct live_set *s, unsigned i);

/* Checks one fresh buffer against the pool's segment table. */
void check_buf_placement(struct leasec_pool *pool, const struct leasec_pool_buf *b,
                         enum lt_class mem_class, size_t size);

size_t random_size(uint64_t *rng);

void check_accounting(struct leasec_pool *pool, const struct random_run *r);

void free_live(struct leasec_pool *pool, struct random_run *r, unsigned i);

/* ---- the suite's groups, in the order they run ---- */

void pool_tests_segments(TCase *tc); /* sealed, populated memfd segments */
void pool_tests_buffers(TCase *tc);  /* buffers: classes, accounting, refusals, locate */
void pool_tests_hooks(TCase *tc);    /* the extent hooks and arena priming */
void pool_tests_failures(TCase *tc); /* failure at every step, bad configs, teardown */
void pool_tests_threads(TCase *tc);  /* concurrent threads */
void pool_tests_pages(TCase *tc);    /* page backing: small, THP, hugetlb */

#endif /* POOL_TEST_UTIL_H */
