/* The staging pool: sealed memfd segments, one memory class each, carved into
 * shard buffers by one jemalloc arena per class (DESIGN.md, "stagingd owns the
 * memory"; docs/staging-pool.md says how and why).
 *
 * Thread safety: alloc, free, locate, stats and the segment queries may be
 * called from any number of threads at once; create and destroy may not race
 * with anything on the same pool. */
#ifndef STAGINGD_POOL_H
#define STAGINGD_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "base/log.h"
#include "base/parse.h"
#include "lease_types/classes.h" /* enum lt_class: the pool's classes are the protocol's */

/* Segments, class sizes and segment sizes are multiples of this. */
#define SD_POOL_SEGMENT_ALIGN ((uint64_t)2 << 20)
/* Every buffer starts on a page of this size. */
#define SD_POOL_BUF_ALIGN ((size_t)4096)
/* The hugetlb page size segments use when they get huge pages. */
#define SD_POOL_HUGE_PAGE ((uint64_t)2 << 20)

/* Which pages back the segments (sd_pool_config.pages). The agent maps each
 * segment afresh and builds its own page tables before it can register it:
 * with 2 MiB pages that is 512 times fewer entries, and registration runs
 * at the driver's speed (docs/staging-pool.md, "Huge pages"). Segments on
 * base pages ask for shmem THP (MADV_HUGEPAGE), which gives 2 MiB folios
 * too where the system's shmem_enabled policy is advise, always or
 * within_size. */
enum sd_pool_pages {
    /* hugetlb pages while the system has free ones reserved
     * (2 MiB ones, in /sys/kernel/mm/hugepages/hugepages-2048kB), for
     * PINNED and MAPPED; base pages (with THP if allowed) for the rest:
     * the default. */
    SD_POOL_PAGES_AUTO = 0,
    /* Base pages only (MADV_NOHUGEPAGE: no shmem THP either). */
    SD_POOL_PAGES_SMALL = 1,
    /* hugetlb pages for every segment, or sd_pool_create fails saying how
     * many pages it needed and found free. */
    SD_POOL_PAGES_HUGE = 2,
    /* Base pages asking for shmem THP, never hugetlb: for systems that
     * allow shmem THP rather than reserve huge pages. */
    SD_POOL_PAGES_THP = 3,
};

/* sd_pool_config.flags */
enum {
    /* Pre-fault by touching one byte per page even where
     * MADV_POPULATE_WRITE works (the old-kernel path, kept testable). */
    SD_POOL_PREFAULT_TOUCH = 1u << 0,
};

struct sd_pool_config {
    /* Bytes per class, indexed by enum lt_class ([0] unused); 0 leaves
     * the class out. Each a multiple of SD_POOL_SEGMENT_ALIGN. */
    uint64_t class_bytes[LT_CLASS_SLOTS];
    /* Largest segment; a class is cut into segments of this size, the last
     * one shorter. Multiple of SD_POOL_SEGMENT_ALIGN; bounds the largest buffer. */
    uint64_t segment_bytes;
    /* Threads that pre-fault each segment (1 = the calling thread only). */
    unsigned prefault_threads;
    unsigned flags;
    enum sd_pool_pages pages;
    /* Where errors and notices go, at warning level with subsystem "pool";
     * a zeroed sink is the process default (base/log.h). */
    struct base_log_sink log;
};

/* One buffer handed out by the pool. The caller keeps it and gives it back to
 * sd_pool_free unchanged. */
struct sd_pool_buf {
    void *base;          /* SD_POOL_BUF_ALIGN-aligned */
    size_t len;          /* the size asked for */
    uint64_t offset;     /* of base within the segment */
    uint32_t segment_id; /* as in struct sd_pool_segment */
    enum lt_class mem_class;
};

/* What a peer needs to map and register one segment. */
struct sd_pool_segment {
    uint32_t id; /* unique within the pool, never 0 */
    enum lt_class mem_class;
    int fd;     /* owned by the pool: dup it to keep it past sd_pool_destroy */
    void *base; /* this process's mapping, SD_POOL_SEGMENT_ALIGN-aligned */
    uint64_t size;
    uint64_t page_size; /* of the pages backing it: the base page or SD_POOL_HUGE_PAGE */
    /* On base pages: bytes this process maps with 2 MiB shmem folios (THP,
     * where the system's shmem_enabled policy allows them), read from
     * /proc/self/smaps after pre-faulting. 0 on hugetlb pages. */
    uint64_t thp_bytes;
};

struct sd_pool_class_stats {
    uint64_t capacity;       /* bytes in this class's segments */
    uint64_t carved;         /* bytes the extent hooks have handed to jemalloc */
    uint64_t extents;        /* pieces they were handed in (one per segment when primed) */
    uint64_t in_use;         /* sum of the sizes asked for by live buffers */
    uint64_t high_water;     /* largest in_use seen */
    uint64_t live_buffers;   /* allocated and not yet freed */
    uint64_t alloc_failures; /* sd_pool_alloc calls that returned -ENOMEM */
    uint32_t segments;
    uint32_t huge_segments; /* of those, backed by SD_POOL_HUGE_PAGE hugetlb pages */
    uint32_t thp_segments;  /* of those, wholly mapped with 2 MiB shmem folios (THP) */
};

struct sd_pool;

/* --- configuration --- */

/* Proposes sizes from this machine's memory (sysconf(_SC_PHYS_PAGES)):
 * PINNED 1/8 of RAM, STAGED 1/16, MAPPED 1/512, each capped; 1 GiB segments;
 * a prefault thread per core up to 8; pages auto. Callers override fields afterwards.
 * Returns 0, or -errno when the machine's memory cannot be read. */
int sd_pool_config_default(struct sd_pool_config *config_p);

/* The names, for base_parse_enum: auto, small, huge, thp. */
extern const struct base_enum sd_pool_pages_names[];

/* "auto", "small", "huge", "thp", or "invalid"; and back. Parse returns 0, or
 * -EINVAL for any other text. */
const char *sd_pool_pages_name(enum sd_pool_pages pages);
int sd_pool_pages_parse(const char *text, enum sd_pool_pages *pages_p);

/* --- life cycle --- */

/* Creates every segment of every class (memfd, sized, mapped, pre-faulted,
 * sealed) and one jemalloc arena per class over them. Returns 0 and the pool
 * in *pool_p, -EINVAL for a bad config, -ENOMEM when the classes add up to
 * more than physical memory, or the -errno of the step that failed; on
 * failure nothing is left behind (no fd, mapping or arena). */
int sd_pool_create(const struct sd_pool_config *config, struct sd_pool **pool_p);

/* Destroys the arenas, unmaps and closes every segment and frees the pool.
 * Live buffers become invalid; peers that received a segment fd keep their
 * own copy of it. NULL is accepted. */
void sd_pool_destroy(struct sd_pool *pool);

/* --- buffers --- */

/* Allocates @size bytes (> 0) of class @mem_class. Returns 0 and fills
 * *buf_p; -EINVAL for a bad class or size; -ENOMEM when the class cannot
 * hold the request (logged with class, request, capacity and in use). */
int sd_pool_alloc(struct sd_pool *pool, enum lt_class mem_class, size_t size,
                  struct sd_pool_buf *buf_p);

/* Returns a buffer from sd_pool_alloc on this pool, exactly once. Returns 0,
 * or -EINVAL (logged, nothing freed) when @buf does not describe a buffer of
 * this pool. */
int sd_pool_free(struct sd_pool *pool, const struct sd_pool_buf *buf);

/* Maps [ptr, ptr + len) to its segment. Returns 0 and the segment id and
 * the offset of ptr in it; -EINVAL for len 0, -ENOENT when ptr lies in no
 * segment, -ERANGE when the range runs past the end of its segment. */
int sd_pool_locate(const struct sd_pool *pool, const void *ptr, size_t len, uint32_t *seg_id_p,
                   uint64_t *offset_p);

/* --- introspection --- */

/* Accounting of one class. Returns 0, or -EINVAL for a bad class. */
int sd_pool_stats(struct sd_pool *pool, enum lt_class mem_class,
                  struct sd_pool_class_stats *stats_p);

/* Number of segments in the pool (all classes). */
unsigned sd_pool_segment_count(const struct sd_pool *pool);

/* Segment number @index (0 <= index < count, ordered by address). Returns 0,
 * or -ERANGE. The fd stays owned by the pool. */
int sd_pool_segment_at(const struct sd_pool *pool, unsigned index,
                       struct sd_pool_segment *segment_p);

/* The segment with id @seg_id. Returns 0, or -ENOENT. */
int sd_pool_segment_find(const struct sd_pool *pool, uint32_t seg_id,
                         struct sd_pool_segment *segment_p);

#endif /* STAGINGD_POOL_H */
