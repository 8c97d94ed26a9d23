/* The staging pool's private structures, shared by pool.c, segment.c and
 * arena.c (and by tests/pool, which call the extent hooks directly). */
#ifndef STAGINGD_POOL_INTERNAL_H
#define STAGINGD_POOL_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include <jemalloc/jemalloc.h>

#include "stagingd/pool.h"

struct sd__segment {
    uint32_t id;
    enum sd_mem_class mem_class;
    int fd;
    unsigned char *base;
    uint64_t size;
    uint64_t page_size; /* pool->page, or SD_POOL_HUGE_PAGE for a hugetlb memfd */
    uint64_t thp_bytes; /* base pages: bytes mapped with 2 MiB shmem folios */
    uint64_t carved;    /* bump offset of the extent hooks; guarded by carve_lock */
};

/* One memory class: its jemalloc arena and the segments the arena carves. */
struct sd__class {
    /* First member: jemalloc hands this pointer back to every hook, which
     * finds its class by casting it. */
    extent_hooks_t hooks;
    struct sd_pool *pool;
    enum sd_mem_class mem_class;
    unsigned first_seg; /* this class's segments are pool->segs[first_seg, +nsegs) */
    unsigned nsegs;
    unsigned arena_ind;
    int has_arena;
    uint64_t capacity;

    pthread_mutex_t carve_lock; /* segment bump offsets and carved; taken inside jemalloc */
    uint64_t carved;
    uint64_t extents;                 /* successful alloc hook calls */
    struct sd__segment *prime_target; /* while priming: the only segment to carve from */

    pthread_mutex_t stats_lock; /* never held across a jemalloc call */
    uint64_t in_use;
    uint64_t high_water;
    uint64_t live_buffers;
    uint64_t alloc_failures;
};

struct sd_pool {
    struct sd__class classes[SD_CLASS_MAX + 1]; /* [0] unused */
    int locks_ready;
    struct sd__segment *segs; /* by class, then in creation order */
    unsigned nsegs;
    struct sd__segment **by_addr; /* the same segments sorted by base */
    size_t page;
    unsigned prefault_threads;
    unsigned flags;
    int touch_noted; /* the touch fallback has been logged */
    enum sd_pool_pages pages;
    int huge_given_up; /* AUTO: a hugetlb segment failed; the rest use base pages */
    int thp_noted;     /* THP: the policy was checked (and a refusal logged) once */
    sd_pool_log_fn log;
    void *log_ctx;
};

/* Logs one line through @fn (stderr when NULL). */
void sd__log(sd_pool_log_fn fn, void *ctx, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define sd__pool_log(pool, ...) sd__log((pool)->log, (pool)->log_ctx, __VA_ARGS__)

/* segment.c: fills @seg (whose fd must be -1 and base NULL on entry) with a
 * sized, mapped, pre-faulted and sealed memfd. Returns 0 or -errno (logged);
 * on failure @seg holds nothing. */
int sd__segment_create(struct sd_pool *pool, struct sd__segment *seg, uint32_t id,
                       enum sd_mem_class mem_class, uint64_t size);
/* Unmaps and closes; safe on a segment that holds nothing. */
void sd__segment_destroy(struct sd__segment *seg);
/* Pre-faults [base, base + len) with pool->prefault_threads threads. */
int sd__segment_prefault(struct sd_pool *pool, int fd, unsigned char *base, uint64_t len);

/* arena.c: creates the class's arena over its segments and hands each
 * segment to it as one extent (has_arena set on success). Returns 0 or
 * -errno (logged). */
int sd__arena_create(struct sd__class *cls);
/* Fills cls->hooks (done by sd__arena_create; tests call the hooks alone). */
void sd__arena_hooks_init(struct sd__class *cls);
/* Moves the arena's free extents into jemalloc's retained set, where
 * neighbours in one segment coalesce. Returns 0 or -errno (logged). */
int sd__arena_consolidate(struct sd__class *cls);
/* Destroys the arena if there is one; the segments must still be mapped. */
void sd__arena_destroy(struct sd__class *cls);

/* Fault injection for tests: the @nth checkpoint reached from now on fails
 * with -EIO (1 = the next one); 0 disarms. Returns how many checkpoints were
 * passed since the last arm. */
unsigned sd__pool_fault_arm(unsigned nth);
/* A checkpoint: nonzero when the armed failure is due here. */
int sd__pool_fault_hit(void);

#endif /* STAGINGD_POOL_INTERNAL_H */
