/* The staging pool's private structures, shared by pool.c, segment.c and
 * arena.c (and by tests/stagingd/pool, which call the extent hooks directly).
 *
 * Dependencies run one way: pool.c calls segment.c and arena.c, which never
 * call back into pool.c. What they need from the pool (the page size, the
 * pre-fault settings, where lines go, the fault-injection checkpoint) comes
 * in a struct leasec__pool_ctx. */
#ifndef STAGINGD_POOL_INTERNAL_H
#define STAGINGD_POOL_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include <jemalloc/jemalloc.h>

#include "base/log.h"
#include "lease/client.h" /* the public API: struct leasec_pool and its calls */

/* The context segment.c and arena.c work in; the pool owns one. */
struct leasec__pool_ctx {
    size_t page; /* the base page size */
    unsigned prefault_threads;
    unsigned flags; /* LEASEC_POOL_PREFAULT_TOUCH */
    enum leasec_pool_pages pages;
    struct base_log_sink log;
    /* A fault-injection checkpoint: nonzero when a failure is due here.
     * NULL: never. */
    int (*fault_hit)(void);
    /* Notes made once per pool, as segments are created. */
    int touch_noted;   /* the touch fallback has been logged */
    int huge_given_up; /* AUTO: a hugetlb segment failed; the rest use base pages */
    int thp_noted;     /* THP: the policy was checked (and a refusal logged) once */
};

/* Logs one line through @ctx's sink: every pool line is a warning. */
#define leasec__ctx_log(ctx, ...) base_log(&(ctx)->log, BASE_LOG_WARN, "pool", __VA_ARGS__)

/* A fault-injection checkpoint. */
static inline int leasec__ctx_fault(const struct leasec__pool_ctx *ctx)
{
    return ctx->fault_hit && ctx->fault_hit();
}

struct leasec__segment {
    uint32_t id;
    enum lt_class mem_class;
    int fd;
    unsigned char *base;
    uint64_t size;
    uint64_t page_size; /* ctx->page, or LEASEC_POOL_HUGE_PAGE for a hugetlb memfd */
    uint64_t thp_bytes; /* base pages: bytes mapped with 2 MiB shmem folios */
    uint64_t carved;    /* bump offset of the extent hooks; guarded by carve_lock */
};

/* One memory class: its jemalloc arena and the segments the arena carves. */
struct leasec__class {
    /* First member: jemalloc hands this pointer back to every hook, which
     * finds its class by casting it. */
    extent_hooks_t hooks;
    struct leasec__pool_ctx *ctx;
    enum lt_class mem_class;
    struct leasec__segment *segs; /* this class's segments: pool->segs[first_seg, +nsegs) */
    unsigned first_seg;
    unsigned nsegs;
    unsigned arena_ind;
    int has_arena;
    uint64_t capacity;

    pthread_mutex_t carve_lock; /* segment bump offsets and carved; taken inside jemalloc */
    uint64_t carved;
    uint64_t extents;                     /* successful alloc hook calls */
    struct leasec__segment *prime_target; /* while priming: the only segment to carve from */

    pthread_mutex_t stats_lock; /* never held across a jemalloc call */
    uint64_t in_use;
    uint64_t high_water;
    uint64_t live_buffers;
    uint64_t alloc_failures;
};

struct leasec_pool {
    struct leasec__pool_ctx ctx;
    struct leasec__class classes[LT_CLASS_SLOTS]; /* [0] unused */
    int locks_ready;
    struct leasec__segment *segs; /* by class, then in creation order */
    unsigned nsegs;
    struct leasec__segment **by_addr; /* the same segments sorted by base */
};

/* segment.c: fills @seg (whose fd must be -1 and base NULL on entry) with a
 * sized, mapped, pre-faulted and sealed memfd. Returns 0 or -errno (logged);
 * on failure @seg holds nothing. */
int leasec__segment_create(struct leasec__pool_ctx *ctx, struct leasec__segment *seg, uint32_t id,
                           enum lt_class mem_class, uint64_t size);
/* Unmaps and closes; safe on a segment that holds nothing. */
void leasec__segment_destroy(struct leasec__segment *seg);
/* Pre-faults [base, base + len) with ctx->prefault_threads threads. */
int leasec__segment_prefault(struct leasec__pool_ctx *ctx, int fd, unsigned char *base,
                             uint64_t len);

/* arena.c: creates the class's arena over its segments and hands each
 * segment to it as one extent (has_arena set on success). Returns 0 or
 * -errno (logged). */
int leasec__arena_create(struct leasec__class *cls);
/* Fills cls->hooks (done by leasec__arena_create; tests call the hooks alone). */
void leasec__arena_hooks_init(struct leasec__class *cls);
/* Moves the arena's free extents into jemalloc's retained set, where
 * neighbours in one segment coalesce. Returns 0 or -errno (logged). */
int leasec__arena_consolidate(struct leasec__class *cls);
/* Destroys the arena if there is one; the segments must still be mapped. */
void leasec__arena_destroy(struct leasec__class *cls);

/* pool.c: fault injection for tests. The @nth checkpoint reached from now
 * on fails with -EIO (1 = the next one); 0 disarms. Returns how many
 * checkpoints were passed since the last arm. Every pool's ctx.fault_hit
 * counts against it. */
unsigned leasec__pool_fault_arm(unsigned nth);

#endif /* STAGINGD_POOL_INTERNAL_H */
