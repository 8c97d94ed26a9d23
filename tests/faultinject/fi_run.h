/* The loop every fault-injection suite runs: count a path's calls of one
 * set, then run it once per N failing the Nth, checking after each run what
 * fi.h promises and the suite's own invariants. */
#ifndef TESTS_FAULTINJECT_FI_RUN_H
#define TESTS_FAULTINJECT_FI_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "fi.h"

/* What one run of a path ended in. */
enum fi_outcome {
    FI_OK = 0,      /* the path completed (no failure injected, or one it absorbed) */
    FI_REFUSED = 1, /* a call of the path returned an error: the promised outcome */
};

/* One path. @setup (may be NULL) runs first, unarmed: what the path needs
 * but is not part of it (a server to talk to). @run runs the path with the
 * failure armed and returns FI_OK or FI_REFUSED, or -1 with @msg filled
 * for a broken promise; @check (may be NULL) runs after fi_disarm, before
 * the leak checks, and returns 0 or -1 with @msg filled. */
struct fi_path {
    const char *name;
    void (*setup)(void *ctx);
    int (*run)(void *ctx, char *msg, size_t len);
    int (*check)(void *ctx, char *msg, size_t len);
    void *ctx;
    int maps_slack; /* mappings a run may leave (thread stacks kept by libc) */
};

struct fi_tally {
    uint64_t calls;     /* in the counting run */
    uint64_t runs;      /* one per N */
    uint64_t refused;   /* ended in an error return */
    uint64_t absorbed;  /* the failure fired, the path completed anyway */
    uint64_t unreached; /* the Nth call did not happen in that run */
};

/* Runs @p for every N of @calls (ck_assert on any broken promise) and
 * prints one line of tallies. @max_n bounds N (0: the counted calls). */
void fi_run_all(const struct fi_path *p, unsigned calls, uint64_t max_n, struct fi_tally *t_p);

#endif /* TESTS_FAULTINJECT_FI_RUN_H */
