/* liblease-client: the CUDA-free half of the lease service, for any storage
 * daemon (docs/client-api.md). Two objects, each an opaque handle:
 *
 *   struct leasec_pool    the staging pool: sealed memfd segments of one
 *                         memory class each, carved into buffers by one
 *                         jemalloc arena per class (docs/staging-pool.md);
 *   struct leasec_client  the lease client: wire protocol v1 to one GPU agent
 *                         per GPU, segment offers, batched leases, submits,
 *                         doorbells, two-phase release, reconnects
 *                         (docs/lease-client.md).
 *
 * They do not know each other: the caller offers the pool's segments to the
 * client (leasec_pool_segment_at + leasec_client_segment_add in a loop), so a
 * daemon with its own memory can use the client alone.
 *
 * Conventions, for every call below:
 *   - int returns are 0 (or a count) on success, a negative errno on failure;
 *     each call lists its errnos. A refusal the agent made carries its code,
 *     errno and words as a struct lt_failure (lease_types/errors.h).
 *   - Output parameters end in _p and are written only on success.
 *   - Ownership: a handle belongs to the caller from create to destroy;
 *     what a call keeps or hands back is said at the call. Nothing the
 *     library returns is freed with free().
 *   - Names: leasec_ (lease client) is this library's prefix, distinct
 *     from the agent's lease_, linkcheck's lc_ and the protocol's lt_.
 *     Ids are lease-types' typed ids (struct lt_lease_id, lt_stream_id,
 *     lt_event_id); classes are enum lt_class; codes are enum lt_error.
 *
 * Threads: see each section. In short, a pool may be used from any thread;
 * a client is driven by one thread at a time, and its callbacks run there.
 *
 * The library's one header by design (issue #14): every call with its
 * ownership and errnos, hence its length (over 900 lines).
 *
 * Link with `pkg-config --cflags --libs lease-client` (shared) or
 * `pkg-config --static ...` against the archive. Either exports only the
 * leasec_ names below; jemalloc is inside and never becomes the program's
 * malloc (docs/client-api.md, "Linking"). */
#ifndef LEASE_CLIENT_H
#define LEASE_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "lease_types/classes.h" /* enum lt_class, LT_CLASS_SLOTS */
#include "lease_types/errors.h"  /* enum lt_error, struct lt_failure, lt_error_name */
#include "lease_types/ids.h"     /* struct lt_lease_id, lt_stream_id, lt_event_id */

#if defined(__GNUC__)
#define LEASEC_API __attribute__((visibility("default")))
#else
#define LEASEC_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================
 * The library
 * ====================================================================== */

/* "MAJOR.MINOR.PATCH", the project's version; the shared library's SONAME
 * is liblease-client.so.MAJOR. Static storage. */
LEASEC_API const char *leasec_version(void);

/* The CUDA boundary's start-up check (layer 4, docs/boundary.md) for the
 * calling process: judges every object mapped in (by name, SONAME, real
 * path, folder and the CUDA symbols it defines or imports), what
 * LD_PRELOAD, LD_AUDIT and /etc/ld.so.preload name, against the forbidden
 * library stems and the CUDA toolkit and driver libraries installed here.
 * A daemon that promises to stay CUDA-free calls it once at start-up,
 * before it offers memory, and refuses to start unless it returns 0; the
 * library never calls it by itself.
 * Returns 0 when nothing CUDA is mapped; -ENOTRECOVERABLE when something
 * is; another -errno when the check could not run (refuse then too).
 * Writes a one-line report naming the first offender and how it got in, or
 * what was checked, into @report (NUL-terminated when @report_len > 0; the
 * caller owns the buffer). Reads the file system, takes 15-60 ms, not
 * async-signal-safe; safe from any thread. */
LEASEC_API int leasec_selfcheck(char *report, size_t report_len);

/* Where the pool's and the client's lines go. Levels are syslog's numbers. */
enum leasec_log_level {
    LEASEC_LOG_ERROR = 3,
    LEASEC_LOG_WARN = 4,
    LEASEC_LOG_NOTICE = 5,
    LEASEC_LOG_INFO = 6,
    LEASEC_LOG_DEBUG = 7,
};

/* Receives one complete line: no trailing newline; @subsys is "pool" or
 * "client". Called on whichever thread logs, so it must be thread-safe. */
typedef void (*leasec_log_fn)(void *ctx, int level, const char *subsys, const char *line);

/* A zeroed sink (fn NULL) writes "<program>: <level>: <subsys>: <line>" to
 * standard error in one write(2). @ctx stays the caller's and must outlive
 * the pool or client that logs to it. */
struct leasec_log {
    leasec_log_fn fn;
    void *ctx;
    int max_level; /* the most verbose level delivered; 0: LEASEC_LOG_INFO */
};

/* ======================================================================
 * The staging pool
 *
 * Threads: alloc, free, locate, stats and the segment queries may be called
 * from any number of threads at once; create and destroy may not race with
 * anything on the same pool.
 * ====================================================================== */

/* Segments, class sizes and segment sizes are multiples of this. */
#define LEASEC_POOL_SEGMENT_ALIGN ((uint64_t)2 << 20)
/* Every buffer starts on a page of this size. */
#define LEASEC_POOL_BUF_ALIGN ((size_t)4096)
/* The hugetlb page size segments use when they get huge pages. */
#define LEASEC_POOL_HUGE_PAGE ((uint64_t)2 << 20)

/* Which pages back the segments (leasec_pool_config.pages). The agent maps
 * each segment afresh and builds its own page tables before it registers
 * it; on 2 MiB pages that is 512 times fewer entries and registration runs
 * at the driver's speed (docs/staging-pool.md, "Huge pages"). */
enum leasec_pool_pages {
    /* hugetlb 2 MiB pages for PINNED and MAPPED while the system has free
     * reserved ones, base pages asking for shmem THP for the rest. */
    LEASEC_POOL_PAGES_AUTO = 0,
    /* Base pages only (MADV_NOHUGEPAGE: no shmem THP either). */
    LEASEC_POOL_PAGES_SMALL = 1,
    /* hugetlb pages for every segment, or leasec_pool_create fails saying
     * how many pages it needed and found free. */
    LEASEC_POOL_PAGES_HUGE = 2,
    /* Base pages asking for shmem THP (MADV_HUGEPAGE), never hugetlb. */
    LEASEC_POOL_PAGES_THP = 3,
};

/* leasec_pool_config.flags */
enum {
    /* Pre-fault by touching one byte per page even where
     * MADV_POPULATE_WRITE works (the old-kernel path, kept testable). */
    LEASEC_POOL_PREFAULT_TOUCH = 1u << 0,
    /* Leave F_SEAL_FUTURE_WRITE off, so an agent run --seals legacy maps the
     * segments writable (kernels' write ranges, scan hits in a lease). This
     * process can then free their pages under a lease: a strict agent (the
     * default) refuses such segments. */
    LEASEC_POOL_AGENT_WRITES = 1u << 1,
    /* Leave F_SEAL_FUTURE_WRITE off the MAPPED segments only: the class a
     * strict agent takes unsealed and maps read-write, for the words it and
     * the device write (doorbells, done words, a ring's words lease). The
     * other classes stay sealed. */
    LEASEC_POOL_MAPPED_WRITABLE = 1u << 2,
};

struct leasec_pool_config {
    /* Bytes per class, indexed by enum lt_class ([0] unused); 0 leaves the
     * class out. Each a multiple of LEASEC_POOL_SEGMENT_ALIGN. */
    uint64_t class_bytes[LT_CLASS_SLOTS];
    /* Largest segment; a class is cut into segments of this size, the last
     * one shorter. Multiple of LEASEC_POOL_SEGMENT_ALIGN; bounds the
     * largest buffer. */
    uint64_t segment_bytes;
    /* Threads that pre-fault each segment (1 = the calling thread only). */
    unsigned prefault_threads;
    unsigned flags; /* LEASEC_POOL_PREFAULT_TOUCH | LEASEC_POOL_AGENT_WRITES | ..._MAPPED_WRITABLE */
    enum leasec_pool_pages pages;
    /* Errors and notices, at warning level with subsystem "pool". */
    struct leasec_log log;
};

/* One buffer handed out by the pool. The caller keeps the struct and gives
 * it back to leasec_pool_free unchanged; the bytes are the pool's memory. */
struct leasec_pool_buf {
    void *base;          /* LEASEC_POOL_BUF_ALIGN-aligned */
    size_t len;          /* the size asked for */
    uint64_t offset;     /* of base within the segment */
    uint32_t segment_id; /* as in struct leasec_pool_segment */
    enum lt_class mem_class;
};

/* What a peer needs to map and register one segment. */
struct leasec_pool_segment {
    uint32_t id; /* unique within the pool, never 0 */
    enum lt_class mem_class;
    int fd;     /* owned by the pool (closed by destroy): dup it to keep it */
    void *base; /* this process's mapping, LEASEC_POOL_SEGMENT_ALIGN-aligned */
    uint64_t size;
    uint64_t page_size; /* of the pages backing it: the base page or LEASEC_POOL_HUGE_PAGE */
    /* On base pages: bytes mapped with 2 MiB shmem folios (THP), read from
     * /proc/self/smaps after pre-faulting. 0 on hugetlb pages. */
    uint64_t thp_bytes;
};

struct leasec_pool_class_stats {
    uint64_t capacity;       /* bytes in this class's segments */
    uint64_t carved;         /* bytes the extent hooks have handed to jemalloc */
    uint64_t extents;        /* pieces they were handed in (one per segment when primed) */
    uint64_t in_use;         /* sum of the sizes asked for by live buffers */
    uint64_t high_water;     /* largest in_use seen */
    uint64_t live_buffers;   /* allocated and not yet freed */
    uint64_t alloc_failures; /* leasec_pool_alloc calls that returned -ENOMEM */
    uint32_t segments;
    uint32_t huge_segments; /* of those, backed by LEASEC_POOL_HUGE_PAGE hugetlb pages */
    uint32_t thp_segments;  /* of those, wholly mapped with 2 MiB shmem folios (THP) */
};

struct leasec_pool;

/* ---- configuration ---- */

/* Proposes sizes from this machine's memory (sysconf(_SC_PHYS_PAGES)):
 * PINNED 1/8 of RAM (at most 64 GiB), STAGED 1/16 (at most 32 GiB), MAPPED
 * 1/512 (2..256 MiB); 1 GiB segments; a pre-fault thread per core up to 8;
 * pages auto; the default log. The caller overrides fields afterwards.
 * Returns 0, or -errno when the machine's memory cannot be read. */
LEASEC_API int leasec_pool_config_default(struct leasec_pool_config *config_p);

/* "auto", "small", "huge", "thp", or "invalid". Static storage. */
LEASEC_API const char *leasec_pool_pages_name(enum leasec_pool_pages pages);
/* The value one of those names spells (case matters). Returns 0; -EINVAL
 * for any other text. */
LEASEC_API int leasec_pool_pages_parse(const char *text, enum leasec_pool_pages *pages_p);

/* ---- life cycle ---- */

/* Creates every segment of every class (memfd_create, sized, mapped,
 * pre-faulted, sealed SHRINK|GROW|SEAL) and one jemalloc arena per class
 * over them. Copies @config. Returns 0 and the pool in *@pool_p, which the
 * caller destroys with leasec_pool_destroy; -EINVAL for a bad config;
 * -ENOMEM when the classes add up to more than physical memory or a class
 * cannot be mapped; -ENOTSUP for a jemalloc without arenas_create_ext; or
 * the -errno of the step that failed (logged). On failure nothing is left
 * behind (no fd, mapping or arena). */
LEASEC_API int leasec_pool_create(const struct leasec_pool_config *config,
                                  struct leasec_pool **pool_p);

/* Destroys the arenas, unmaps and closes every segment and frees the pool.
 * Live buffers become invalid; peers that received a segment fd keep their
 * own copy of it. NULL is a no-op. */
LEASEC_API void leasec_pool_destroy(struct leasec_pool *pool);

/* ---- buffers ---- */

/* Allocates @size bytes (> 0) of class @mem_class from the class's arena.
 * Returns 0 and fills *@buf_p; -EINVAL for a bad class or size; -ENOMEM
 * when the class cannot hold the request (logged with class, request,
 * capacity and bytes in use). */
LEASEC_API int leasec_pool_alloc(struct leasec_pool *pool, enum lt_class mem_class, size_t size,
                                 struct leasec_pool_buf *buf_p);

/* Returns a buffer from leasec_pool_alloc on this pool, exactly once; the
 * bytes stay mapped (in the segment) but may be handed out again. Returns
 * 0, or -EINVAL (logged, nothing freed) when @buf does not describe a live
 * buffer of this pool. Free a buffer only once no lease covers it any more
 * (after its release completed). */
LEASEC_API int leasec_pool_free(struct leasec_pool *pool, const struct leasec_pool_buf *buf);

/* Maps [ptr, ptr + len) to its segment. Returns 0 and the segment id and
 * the offset of ptr in it; -EINVAL for len 0; -ENOENT when ptr lies in no
 * segment; -ERANGE when the range runs past the end of its segment. */
LEASEC_API int leasec_pool_locate(const struct leasec_pool *pool, const void *ptr, size_t len,
                                  uint32_t *seg_id_p, uint64_t *offset_p);

/* ---- introspection ---- */

/* Accounting of one class. Returns 0, or -EINVAL for a bad class. */
LEASEC_API int leasec_pool_stats(struct leasec_pool *pool, enum lt_class mem_class,
                                 struct leasec_pool_class_stats *stats_p);

/* Number of segments in the pool (all classes). */
LEASEC_API unsigned leasec_pool_segment_count(const struct leasec_pool *pool);

/* Segment number @index (0 <= index < count, ordered by address). Returns
 * 0, or -ERANGE. The fd stays owned by the pool. */
LEASEC_API int leasec_pool_segment_at(const struct leasec_pool *pool, unsigned index,
                                      struct leasec_pool_segment *segment_p);

/* The segment with id @seg_id. Returns 0, or -ENOENT. */
LEASEC_API int leasec_pool_segment_find(const struct leasec_pool *pool, uint32_t seg_id,
                                        struct leasec_pool_segment *segment_p);

/* ======================================================================
 * The lease client
 *
 * Threads: a client is driven by one thread at a time (the caller's event
 * loop). Callbacks run on that thread, inside leasec_client_process and the
 * blocking helpers (wait, wait_ready, ctl_call, stats_call); they may call
 * the request functions (lease_request, submit, lease_release, ctl_send,
 * stats_send, segment_add, agent_add, reconnect) but not the driving ones
 * (those answer -EDEADLK) nor destroy. leasec_client_ring and
 * leasec_client_done_word_read touch only the word they are given and are
 * safe from any thread or process.
 *
 * Every request ends in exactly one callback: on_grant, on_completion or
 * on_reply when its answer arrived, on_error when the agent refused it or
 * the connection ended first. LEASE_RELEASE is the exception: one
 * on_release per listed lease. A QUIET submit is answered only on failure;
 * it is retired silently when its lease's release completes.
 * ====================================================================== */

/* ---- protocol values the API takes (wire values of protocol v1) ---- */

/* Capabilities (leasec_client_config.caps; leasec_agent_hello.caps). */
#define LEASEC_CAP_DOORBELL (1u << 0)     /* submits may wait on a doorbell word */
#define LEASEC_CAP_DONE_WORD (1u << 1)    /* submits may signal a completion word */
#define LEASEC_CAP_TIMING (1u << 2)       /* timing events and EVENT_ELAPSED */
#define LEASEC_CAP_HOST_BACKEND (1u << 3) /* granted only: no GPU, the host backend serves */
#define LEASEC_CAP_RC_BATCH (1u << 4)     /* RELEASE_COMPLETE_BATCH may answer a release */
#define LEASEC_CAP_STREAM (1u << 5)       /* streaming rings (protocol 1.1, docs/streaming.md) */
#define LEASEC_CAP_LAUNCH (1u << 6)       /* 1.2: leasec_client_launch (granted when the agent
                                             has launchable kernels) */
/* The agent's words area (leasec_client_words): memory the agent owns and
 * writes -- done words and VECTOR_SCAN hits -- and this process can only
 * read. The pool's segments are sealed F_SEAL_FUTURE_WRITE, so the agent
 * maps them read-only and writes nothing there: with this cap, name done
 * words as {LEASEC_WORDS_KEY, offset} and put scan hits_offset in the area. */
#define LEASEC_CAP_WORDS (1u << 7)

/* The segment key of a struct leasec_client_word that names the agent's
 * words area of the lease's connection instead of one of our segments. */
#define LEASEC_WORDS_KEY UINT32_MAX

/* Per-entry lease flag: serve as STAGED when the class's pin budget is spent. */
#define LEASEC_LEASE_F_ALLOW_STAGED (1u << 0)
/* Per-request lease flag: refuse every entry if one is refused. */
#define LEASEC_LEASE_REQ_F_ALL_OR_NOTHING (1u << 0)
/* Submit flag: send a COMPLETION only on failure. */
#define LEASEC_SUBMIT_F_QUIET (1u << 2)
/* STREAM_CREATE flags. */
#define LEASEC_STREAM_F_NONBLOCKING (1u << 0)   /* no implicit sync with stream 0 */
#define LEASEC_STREAM_F_HIGH_PRIORITY (1u << 1) /* the device's greatest priority */
/* EVENT_RECORD of a new event: it can time. */
#define LEASEC_EVENT_F_TIMING (1u << 0)

#define LEASEC_NAME_LEN 32           /* client and agent names, NUL included */
#define LEASEC_MAX_BATCH 256         /* leases per request or release, at most */
#define LEASEC_INDEX_NONE UINT32_MAX /* "no batch entry" */
#define LEASEC_BLOCK_NONE UINT64_MAX /* "no bad block" / "no best record" */
#define LEASEC_SCAN_MAX_K 64u        /* hits a VECTOR_SCAN may write */
#define LEASEC_SCAN_DIM_MAX 65536u   /* elements per record, at most */
#define LEASEC_SEGMENT_ALIGN 4096u   /* segment sizes are multiples of this */
#define LEASEC_SEGMENT_SIZE_MAX (1ull << 40)

/* The operations a submit runs. */
enum leasec_op {
    LEASEC_OP_CHECKSUM_VERIFY = 1, /* per-block checksums (kernels/blockhash.h) */
    LEASEC_OP_VECTOR_SCAN = 2,     /* best match of a query over packed vector records */
    LEASEC_OP_COPY_H2D = 3,        /* plain copy of a lease range to device memory */
};
enum leasec_elem {
    LEASEC_ELEM_F32 = 1,
    LEASEC_ELEM_F16 = 2,
};
enum leasec_scan_metric {
    LEASEC_SCAN_DOT = 1, /* best = largest inner product */
    LEASEC_SCAN_L2 = 2,  /* best = smallest squared Euclidean distance */
};

/* What a request was (leasec_client_error.request_type,
 * leasec_client_reply.request_type, leasec_ctl.type): the wire message
 * types of protocol v1. */
enum leasec_request {
    LEASEC_REQ_HELLO = 1,
    LEASEC_REQ_SEGMENT_OFFER = 3,
    LEASEC_REQ_LEASE_REQUEST = 7,
    LEASEC_REQ_LEASE_RELEASE = 9,
    LEASEC_REQ_SUBMIT = 11,
    LEASEC_REQ_STREAM_CREATE = 13,
    LEASEC_REQ_STREAM_VALIDATE = 14,
    LEASEC_REQ_STREAM_QUERY = 15,
    LEASEC_REQ_STREAM_SYNCHRONIZE = 16,
    LEASEC_REQ_STREAM_DESTROY = 17,
    LEASEC_REQ_EVENT_RECORD = 18,
    LEASEC_REQ_EVENT_WAIT = 19,
    LEASEC_REQ_EVENT_QUERY = 20,
    LEASEC_REQ_EVENT_SYNCHRONIZE = 21,
    LEASEC_REQ_EVENT_DESTROY = 22,
    LEASEC_REQ_EVENT_ELAPSED = 23,
    LEASEC_REQ_DEVICE_SYNCHRONIZE = 24,
    LEASEC_REQ_STATS = 26,
    LEASEC_REQ_RING_OPEN = 30,  /* needs LEASEC_CAP_STREAM */
    LEASEC_REQ_RING_SHARD = 32, /* answered by on_completion */
    LEASEC_REQ_RING_CLOSE = 33,
};

/* "LEASE_REQUEST", "SUBMIT", ... for any message type number; "UNKNOWN"
 * for others. Static storage. */
LEASEC_API const char *leasec_request_name(unsigned type);

/* ---- op arguments and results (the wire layouts) ---- */

/* Offsets in op arguments are relative to the lease's first byte. */
struct leasec_op_checksum {
    uint64_t offset;      /* the data: multiple of 8 */
    uint64_t length;      /* nonzero */
    uint64_t sums_offset; /* ceil(length / block_size) u64 checksums, multiple of 8 */
    uint32_t block_size;  /* nonzero multiple of 8 */
    uint32_t reserved;    /* 0 */
};

struct leasec_op_scan {
    uint64_t offset;       /* records: multiple of the element size */
    uint64_t length;       /* nonzero multiple of dim * element size */
    uint64_t query_offset; /* dim elements, multiple of the element size */
    uint32_t dim;          /* 1..LEASEC_SCAN_DIM_MAX elements per record */
    uint16_t elem;         /* enum leasec_elem */
    uint16_t metric;       /* enum leasec_scan_metric */
    /* k 1..LEASEC_SCAN_MAX_K: the agent writes k struct leasec_scan_hit at
     * hits_offset (multiple of 8, inside the lease), best first, before it
     * answers; k 0: both 0, only the completion's single best. */
    uint64_t hits_offset;
    uint32_t k;
    uint32_t reserved; /* 0 */
};

struct leasec_op_copy {
    uint64_t offset;
    uint64_t length; /* nonzero */
};

/* Bytes past the op's struct must be zero (zero the union first). */
union leasec_op_args {
    struct leasec_op_checksum checksum;
    struct leasec_op_scan scan;
    struct leasec_op_copy copy;
    uint8_t bytes[64];
};

/* One VECTOR_SCAN hit as the agent writes it into the lease; hits past the
 * records scanned have index LEASEC_BLOCK_NONE and score bits 0. */
struct leasec_scan_hit {
    uint32_t score_bits; /* IEEE-754 binary32 bit pattern */
    uint32_t reserved;
    uint64_t index; /* record index within the scanned range */
};

struct leasec_checksum_result {
    uint64_t blocks_checked;
    uint64_t first_bad_block; /* LEASEC_BLOCK_NONE when all matched */
    uint64_t bad_blocks;
    uint64_t expected; /* of the first bad block; 0 when none */
    uint64_t actual;   /* of the first bad block; 0 when none */
};

struct leasec_scan_result {
    uint64_t records_scanned;
    uint64_t best_index;      /* LEASEC_BLOCK_NONE when no record was scanned */
    uint32_t best_score_bits; /* IEEE-754 binary32 bit pattern */
    uint32_t reserved;
};

struct leasec_copy_result {
    uint64_t bytes_copied;
};

union leasec_op_result {
    struct leasec_checksum_result checksum;
    struct leasec_scan_result scan;
    struct leasec_copy_result copy;
    uint8_t bytes[48];
};

/* ---- values the caller keeps and passes ---- */

/* A lease the agent granted: a value the caller keeps and passes back to
 * submit and release. It belongs to one connection (@epoch); after a
 * reconnect it is refused with -ESTALE. */
struct leasec_client_lease {
    struct lt_lease_id id;
    unsigned agent;
    uint32_t epoch;
    uint32_t segment;   /* the caller's segment key (leasec_client_segment_add) */
    uint32_t mem_class; /* enum lt_class served: the segment's, or STAGED on fallback */
    uint64_t offset;    /* within the segment */
    uint64_t length;
};

/* One entry of a lease request. */
struct leasec_client_lease_req {
    uint32_t segment;   /* a segment key */
    uint32_t mem_class; /* 0: the segment's class; or LT_CLASS_STAGED */
    uint32_t flags;     /* 0 or LEASEC_LEASE_F_ALLOW_STAGED */
    uint64_t offset;
    uint64_t length;
};

/* A 64-bit word in a MAPPED segment the agent accepted. seq 0: not used. */
struct leasec_client_word {
    uint32_t segment; /* a segment key */
    uint64_t offset;  /* multiple of 8 */
    uint64_t seq;     /* bell: the GPU waits for word >= seq; done: stored when finished */
};

/* One piece of work on a lease. Zero it, then fill what the op needs. */
struct leasec_client_work {
    uint16_t op;                    /* enum leasec_op */
    uint32_t flags;                 /* 0 or LEASEC_SUBMIT_F_QUIET; the word flags follow the seqs */
    struct lt_stream_id stream;     /* {0, 0}: the default stream */
    struct leasec_client_word bell; /* needs LEASEC_CAP_DOORBELL */
    struct leasec_client_word done; /* needs LEASEC_CAP_DONE_WORD */
    union leasec_op_args args;      /* offsets relative to the lease */
};

/* A stream, event or device command (leasec_client_ctl_send). Zero it,
 * then fill what @type uses:
 *   STREAM_CREATE:   flags (LEASEC_STREAM_F_*); the reply names the stream;
 *   STREAM_VALIDATE, _QUERY, _SYNCHRONIZE, _DESTROY: stream;
 *   EVENT_RECORD:    event {0, 0} creates one (flags may be
 *                    LEASEC_EVENT_F_TIMING) or re-records an issued one,
 *                    on stream;
 *   EVENT_WAIT:      stream waits for event;
 *   EVENT_QUERY, _SYNCHRONIZE, _DESTROY: event;
 *   EVENT_ELAPSED:   milliseconds from event to end;
 *   DEVICE_SYNCHRONIZE: nothing. */
struct leasec_ctl {
    uint16_t type; /* enum leasec_request: STREAM_CREATE .. DEVICE_SYNCHRONIZE */
    uint32_t flags;
    struct lt_stream_id stream;
    struct lt_event_id event;
    struct lt_event_id end;
};

/* ---- streaming rings (LEASEC_CAP_STREAM; docs/streaming.md) ----
 *
 * A ring is @slots slots of @slot_bytes bytes in one PINNED lease and, in
 * one MAPPED lease, a sequence word and a done word per slot. Chunk s
 * (s = 1, 2, ...) goes in slot s % slots: fill the slot, then
 * leasec_client_ring(&seq[slot], s); refill it with chunk s + slots once
 * leasec_client_done_word_read(&done[slot]) >= s. No message per chunk:
 * one leasec_client_ring_shard says which next chunks form one shard's
 * device image and what op runs on it, and its on_completion carries the
 * op's result. Both leases stay pinned by the ring until its close is
 * answered (a release of either completes only after that). */

#define LEASEC_RING_SLOTS_MAX 256u   /* slots per ring */
#define LEASEC_RING_DEPTH_MAX 64u    /* shards outstanding per ring, asked at most */
#define LEASEC_RING_SLOT_ALIGN 4096u /* slot sizes are multiples of this */

/* A ring's shape. Zero it, then fill every field. */
struct leasec_ring_config {
    uint32_t slots;           /* 1..LEASEC_RING_SLOTS_MAX */
    uint32_t depth;           /* RING_SHARDs to keep outstanding, 1..LEASEC_RING_DEPTH_MAX */
    uint64_t slot_bytes;      /* a nonzero multiple of LEASEC_RING_SLOT_ALIGN, up to 1 GiB */
    uint64_t seq_offset;      /* @slots u64 sequence words in the words lease, 8-aligned */
    uint64_t done_offset;     /* @slots u64 done words in the words lease, apart from those */
    uint64_t max_shard_bytes; /* the largest shard image */
};

/* An open ring: a value the caller keeps (from the on_reply of its
 * RING_OPEN) and passes back. It belongs to one connection (@epoch); after
 * a reconnect it is refused with -ESTALE. */
struct leasec_ring {
    struct lt_ring_id id;
    unsigned agent;
    uint32_t epoch;
    uint32_t slots;
    uint32_t depth; /* granted: RING_SHARDs that may be outstanding */
    uint64_t slot_bytes;
    uint64_t max_shard_bytes;
    struct lt_lease_id slots_lease, words_lease;
};

/* One shard on a ring. Zero it, then fill what the op needs. */
struct leasec_ring_shard {
    uint64_t first_seq; /* 1 for a ring's first shard, then the last one's + its chunks */
    uint64_t length;    /* the image's bytes; it takes leasec_ring_chunks(ring, length) chunks */
    uint16_t op;        /* enum leasec_op */
    /* Offsets relative to the image, except a VECTOR_SCAN's hits_offset:
     * an offset in the words lease (slots are reused; the hits come back
     * to host memory, before on_completion). */
    union leasec_op_args args;
};

/* ---- what callbacks receive (valid only during the callback) ---- */

struct leasec_client_grant_entry {
    int err;                          /* 0, or lt_error_errno(status) */
    uint32_t status;                  /* enum lt_error */
    struct leasec_client_lease lease; /* filled when err == 0 */
};

struct leasec_client_grant {
    unsigned agent;
    uint64_t request_id;
    uint64_t tag;
    unsigned count; /* as requested, in request order */
    const struct leasec_client_grant_entry *entries;
};

struct leasec_client_completion {
    unsigned agent;
    uint64_t request_id;
    uint64_t tag;
    struct leasec_client_lease lease;
    uint16_t op;     /* enum leasec_op */
    uint32_t status; /* enum lt_error; CHECKSUM_MISMATCH comes with the result filled */
    int err;         /* lt_error_errno(status) */
    uint32_t detail; /* backend detail (a CUresult), 0 when none */
    uint64_t elapsed_ns;
    union leasec_op_result result;
};

struct leasec_client_release {
    unsigned agent;
    uint64_t request_id; /* the release's */
    uint64_t tag;
    struct leasec_client_lease lease;
    uint32_t status; /* the agent's, or LT_OK when the client decided (err says why) */
    int err;         /* 0; lt_error_errno(status); or the connection's end (-ECONNRESET...) */
    int reusable;    /* 1 only for RELEASE_COMPLETE with LT_OK: the bytes are the caller's again */
    const char *message; /* "" when reusable */
};

struct leasec_client_error {
    unsigned agent;
    uint64_t request_id;
    uint64_t tag;
    uint16_t request_type; /* enum leasec_request of the failed request */
    int err;               /* negative errno */
    uint32_t code;         /* the agent's enum lt_error; LT_OK when the client decided */
    uint32_t index;        /* the failing batch entry, or LEASEC_INDEX_NONE */
    const char *message;   /* names the agent socket and the request; quotes the agent */
    /* The agent's ERROR as it sent it: code, its own errno (for
     * LT_E_SYSTEM the call that failed) and its words. NULL when the
     * client decided (the connection ended first). */
    const struct lt_failure *refusal;
};

/* This client's counters as the agent keeps them (STATS_REPLY). */
struct leasec_agent_client_stats {
    uint32_t client_id; /* the agent's name for this connection */
    uint32_t pid;       /* the agent saw (SO_PEERCRED) */
    char name[LEASEC_NAME_LEN];
    uint64_t segments;
    uint64_t bytes_registered;
    uint64_t live_leases;
    uint64_t bytes_leased;
    uint64_t leases_granted; /* since connect */
    uint64_t submits;        /* since connect */
    uint32_t streams;
    uint32_t events;
};

/* The agent's counters of one class, over all its clients. */
struct leasec_agent_class_stats {
    uint64_t segments;
    uint64_t bytes_registered;
    uint64_t live_leases;
    uint64_t bytes_leased;
    uint64_t registrations; /* since the agent started */
    uint64_t registration_ns;
    uint64_t unregistrations;
    uint64_t budget_refusals; /* requests refused (or served STAGED) over budget */
};

/* A stats request's flag: every client's entry, not only the caller's. */
#define LEASEC_STATS_F_ALL_CLIENTS (1u << 0)
#define LEASEC_MAX_STATS_CLIENTS 64 /* client entries a reply holds, at most */

struct leasec_agent_stats {
    uint64_t uptime_ns;
    struct leasec_agent_class_stats classes[LT_CLASS_SLOTS]; /* [0] zero */
    int have_self; /* 1 when the reply held this client's entry */
    struct leasec_agent_client_stats self;
    /* The entries the agent sent: this client's, or with
     * LEASEC_STATS_F_ALL_CLIENTS up to LEASEC_MAX_STATS_CLIENTS of them. */
    uint32_t client_count;
    struct leasec_agent_client_stats clients[LEASEC_MAX_STATS_CLIENTS];
};

/* The answer to a ctl or stats request. */
struct leasec_client_reply {
    unsigned agent;
    uint64_t request_id;
    uint64_t tag;
    uint16_t request_type;                  /* enum leasec_request */
    uint32_t ready;                         /* STREAM_QUERY / EVENT_QUERY: 1 done, 0 pending */
    struct lt_stream_id stream;             /* STREAM_CREATE: the new stream */
    struct lt_event_id event;               /* EVENT_RECORD: the recorded event */
    float elapsed_ms;                       /* EVENT_ELAPSED */
    const struct leasec_agent_stats *stats; /* STATS: the counters; else NULL */
    struct leasec_ring ring;                /* RING_OPEN: the ring; RING_CLOSE: its id */
    uint64_t ring_shards;                   /* RING_CLOSE: shards answered with a result */
    uint64_t ring_chunks;                   /* RING_CLOSE: chunks copied to the device */
};

struct leasec_client_launch_done; /* below, with leasec_client_launch */

/* Every member may be NULL. */
struct leasec_client_callbacks {
    void (*on_grant)(void *ctx, const struct leasec_client_grant *g);
    void (*on_completion)(void *ctx, const struct leasec_client_completion *c);
    void (*on_release)(void *ctx, const struct leasec_client_release *r);
    void (*on_error)(void *ctx, const struct leasec_client_error *e);
    void (*on_reply)(void *ctx, const struct leasec_client_reply *r);
    /* Handshake done and every segment offer answered: leases may be
     * requested, failed work resubmitted. @epoch numbers the connection. */
    void (*on_ready)(void *ctx, unsigned agent, uint32_t epoch);
    /* A connection that got as far as connect() ended; called before the
     * requests it carried fail. Leases of that epoch are gone. */
    void (*on_disconnect)(void *ctx, unsigned agent, int err, const char *message);
    /* A leasec_client_launch was answered (any status: see the struct). */
    void (*on_launch)(void *ctx, const struct leasec_client_launch_done *d);
};

struct leasec_client_config {
    const char *name;              /* HELLO name: 1..31 printable ASCII bytes; copied */
    uint32_t caps;                 /* LEASEC_CAP_* bits wanted (not HOST_BACKEND) */
    uint32_t backoff_min_ms;       /* first reconnect delay */
    uint32_t backoff_max_ms;       /* the delay doubles up to this; jitter takes up to half off */
    uint32_t handshake_timeout_ms; /* connect to ready */
    uint64_t seed;                 /* jitter seed; 0: from the pid and the clock */
    struct leasec_client_callbacks cb;
    void *cb_ctx; /* handed to every callback; stays the caller's */
    /* Connects, handshakes, refusals: info level, subsystem "client". */
    struct leasec_log log;
    /* With LEASEC_CAP_WORDS: the words area's size, asked for on every
     * connection before it is ready (a multiple of 4096, at most 1 MiB;
     * 0: 64 KiB). */
    uint32_t words_bytes;
};

enum leasec_client_agent_state {
    LEASEC_CLIENT_DISCONNECTED = 0, /* waiting for the next connect attempt */
    LEASEC_CLIENT_HANDSHAKE = 1,    /* HELLO sent */
    LEASEC_CLIENT_OFFERING = 2,     /* segment offers outstanding */
    LEASEC_CLIENT_READY = 3,
};

/* The limits one connection lives under (the agent's HELLO_REPLY). */
struct leasec_agent_hello {
    uint16_t version;         /* the protocol version chosen: 1 */
    uint32_t caps;            /* granted LEASEC_CAP_* bits */
    uint32_t client_id;       /* nonzero; names this client in stats */
    uint32_t max_lease_batch; /* 1..LEASEC_MAX_BATCH entries per lease request / release */
    uint32_t max_streams;     /* streams this client may create */
    uint32_t max_events;      /* events this client may hold */
    uint32_t max_segments;    /* segments this client may offer */
    uint64_t max_segment_bytes;
    uint64_t class_budget[LT_CLASS_SLOTS]; /* bytes per class; [0] 0; UINT64_MAX: unbounded */
    char agent_name[LEASEC_NAME_LEN];      /* e.g. "ga-cuda sm_90" */
};

struct leasec_client_agent_info {
    enum leasec_client_agent_state state;
    uint32_t epoch;             /* connections established so far; the current one's */
    uint64_t attempts;          /* connect() calls */
    uint64_t offers_sent;       /* SEGMENT_OFFERs, over all connections */
    unsigned segments_accepted; /* on this connection */
    unsigned in_flight;         /* requests awaiting an answer */
    unsigned leases;            /* leases held on this connection */
    uint32_t next_delay_ms;     /* when disconnected: the delay chosen before the next attempt */
    int last_err;               /* why the last connection or attempt ended; 0 if none */
    struct leasec_agent_hello hello; /* this connection's limits; zero before the handshake */
};

struct leasec_client;

/* ---- life cycle ---- */

/* Fills @config_p: name "lease-client", caps DOORBELL|DONE_WORD|RC_BATCH,
 * backoff 10 ms .. 2 s, handshake timeout 5 s, no callbacks, the default
 * log. */
LEASEC_API void leasec_client_config_default(struct leasec_client_config *config_p);

/* Creates a client with no agents and no segments. Copies @config (the
 * name too). Returns 0 and the client in *@client_p, which the caller
 * destroys with leasec_client_destroy; -EINVAL for a bad name, caps or
 * backoff (the reason is logged); -ENOMEM; -errno from epoll_create1 or
 * timerfd_create. */
LEASEC_API int leasec_client_create(const struct leasec_client_config *config,
                                    struct leasec_client **client_p);

/* Closes every connection and fd the client holds and frees it, firing no
 * callback. Never frees, writes or unmaps segment memory; leases still
 * held are left to the agents, which reclaim them when the connection
 * closes. NULL is a no-op. */
LEASEC_API void leasec_client_destroy(struct leasec_client *c);

/* Adds a segment offered to every agent (now if ready, else on the next
 * handshake). @fd is duplicated (the caller keeps its own); @base and
 * @size describe this process's mapping, which must outlive the client.
 * @key is the caller's name for it (a pool segment id, say), sent as the
 * offer's cookie and used in leases and words. The agent's refusal arrives
 * as on_error for LEASEC_REQ_SEGMENT_OFFER with @key as the tag. Returns
 * 0; -EEXIST for a key in use; -EINVAL for a bad size, class, fd or base;
 * -ENOMEM; -errno from dup. */
LEASEC_API int leasec_client_segment_add(struct leasec_client *c, uint32_t key, int fd, void *base,
                                         uint64_t size, uint32_t mem_class);

/* Adds the agent listening at @path (copied) and tries to connect at once;
 * a failed attempt is retried with backoff, for ever. Returns 0 and the
 * agent's index in *@agent_p (indices count from 0); -ENAMETOOLONG for an
 * empty path or one longer than a socket path; -ENOMEM. */
LEASEC_API int leasec_client_agent_add(struct leasec_client *c, const char *path,
                                       unsigned *agent_p);

/* Ends @agent's backoff: a disconnected agent is tried at the next
 * leasec_client_process (which the client fd wakes at once). Returns 0;
 * -ENOENT for no such agent; -EISCONN when it is connected or connecting. */
LEASEC_API int leasec_client_reconnect(struct leasec_client *c, unsigned agent);

/* ---- driving ---- */

/* A descriptor that polls readable whenever leasec_client_process has
 * work: a message from an agent, room to send, a reconnect or a timeout
 * due. Owned by the client: poll it, never read or close it. */
LEASEC_API int leasec_client_fd(const struct leasec_client *c);

/* Does all work pending now without blocking: reads and dispatches
 * messages (firing callbacks), flushes queued sends, reconnects agents
 * whose backoff expired, times out stuck handshakes. Returns the number of
 * messages handled; -EDEADLK from a callback; -errno from epoll_wait. */
LEASEC_API int leasec_client_process(struct leasec_client *c);

/* Processes until @request_id on @agent has ended (its callback fired) or
 * @timeout_ms passed (< 0: forever). Returns 0; -ETIMEDOUT; -ENOENT for an
 * id never issued; -EDEADLK from a callback; -errno from poll. */
LEASEC_API int leasec_client_wait(struct leasec_client *c, unsigned agent, uint64_t request_id,
                                  int timeout_ms);

/* Processes until @agent is ready (handshake done, every offer answered).
 * Returns 0; -ETIMEDOUT; -ENOENT; -EDEADLK; or, when a connection made
 * during the wait ends before ready, its error (e.g. -EPROTONOSUPPORT for a
 * version mismatch, message in leasec_client_last_error). Attempts that
 * find no listener keep waiting. */
LEASEC_API int leasec_client_wait_ready(struct leasec_client *c, unsigned agent, int timeout_ms);

/* The state, counters and limits of @agent. Returns 0, or -ENOENT. */
LEASEC_API int leasec_client_agent_info(const struct leasec_client *c, unsigned agent,
                                        struct leasec_client_agent_info *info_p);

/* The last error message a client function decided or a blocking call
 * received ("" if none); overwritten by the next one. Owned by the client. */
LEASEC_API const char *leasec_client_last_error(const struct leasec_client *c);

/* When the last failing blocking call (ctl_call, stats_call) failed
 * because the agent refused it: that ERROR's code, errno and words. NULL
 * otherwise. Owned by the client, valid until its next call. */
LEASEC_API const struct lt_failure *leasec_client_last_refusal(const struct leasec_client *c);

/* ---- requests (each returns 0 and its request id in *@request_id_p;
 * @tag comes back in the callback) ---- */

/* Requests @n leases (1..the agent's max_lease_batch) in one
 * LEASE_REQUEST with request flags @req_flags (LEASEC_LEASE_REQ_F_*).
 * Answered by on_grant (one entry per request entry, each granted or
 * refused) or on_error. Returns -ENOTCONN when the agent is not ready;
 * -ENOENT for no such agent or a segment the agent did not accept; -E2BIG
 * over the batch limit; -ERANGE for a range outside its segment; -EINVAL
 * for n 0, a bad class or flags; -ENOMEM; -ECONNRESET when the send finds
 * the connection gone. */
LEASEC_API int leasec_client_lease_request(struct leasec_client *c, unsigned agent,
                                           const struct leasec_client_lease_req *reqs, unsigned n,
                                           uint32_t req_flags, uint64_t tag,
                                           uint64_t *request_id_p);

/* Submits @work on @lease. Answered by on_completion or on_error (QUIET:
 * only on failure). With work->bell.seq the agent queues the work behind
 * bell >= seq (ring it with leasec_client_ring); with work->done.seq it
 * stores seq into the done word when finished. Returns -ESTALE for a lease
 * of an older connection; -ENOENT for a lease not held (or a word's
 * segment not accepted); -EBUSY for one being released; -EOPNOTSUPP for a
 * bell or done word the agent did not grant the capability for; -EINVAL
 * for a bad word, op or arguments; -ENOTCONN; -ENOMEM; -ECONNRESET. */
LEASEC_API int leasec_client_submit(struct leasec_client *c,
                                    const struct leasec_client_lease *lease,
                                    const struct leasec_client_work *work, uint64_t tag,
                                    uint64_t *request_id_p);

/* Releases @n leases (1..max_lease_batch, one agent, one epoch): the first
 * phase of two. Each lease ends in its own on_release, reusable only after
 * the agent's RELEASE_COMPLETE with LT_OK, which it sends once the lease's
 * GPU work has drained; until then the lease is "releasing" (submits and
 * second releases get -EBUSY) and its bytes are not the caller's. Errors as
 * leasec_client_submit, and -EINVAL for n 0, a lease listed twice or
 * leases of two agents; -E2BIG over the batch limit. */
LEASEC_API int leasec_client_lease_release(struct leasec_client *c,
                                           const struct leasec_client_lease *leases, unsigned n,
                                           uint64_t tag, uint64_t *request_id_p);

/* Sends a stream, event or device command. Answered by on_reply or
 * on_error. Returns -EINVAL for another type or fields the command does
 * not allow; -ENOENT for no such agent; -ENOTCONN; -ENOMEM; -ECONNRESET. */
LEASEC_API int leasec_client_ctl_send(struct leasec_client *c, unsigned agent,
                                      const struct leasec_ctl *ctl, uint64_t tag,
                                      uint64_t *request_id_p);

/* Asks the agent for its counters (STATS_REQUEST) with @flags (0 or
 * LEASEC_STATS_F_ALL_CLIENTS). Answered by on_reply with stats set, or
 * on_error. Errors as leasec_client_ctl_send, and -EINVAL for other flags. */
LEASEC_API int leasec_client_stats_send(struct leasec_client *c, unsigned agent, uint32_t flags,
                                        uint64_t tag, uint64_t *request_id_p);

/* leasec_client_ctl_send, then waits up to @timeout_ms (< 0: forever) for
 * the answer, which it writes to *@reply_p instead of calling on_reply
 * (other callbacks fire meanwhile). Returns 0; the agent's refusal as
 * lt_error_errno(code) (see leasec_client_last_refusal); the connection's
 * end (-ECONNRESET...); -ETIMEDOUT, after which a late answer goes to the
 * callbacks; -EDEADLK from a callback; the errors of ctl_send. */
LEASEC_API int leasec_client_ctl_call(struct leasec_client *c, unsigned agent,
                                      const struct leasec_ctl *ctl, int timeout_ms,
                                      struct leasec_client_reply *reply_p);

/* leasec_client_stats_send and its answer, as leasec_client_ctl_call. */
LEASEC_API int leasec_client_stats_call(struct leasec_client *c, unsigned agent, uint32_t flags,
                                        int timeout_ms, struct leasec_agent_stats *stats_p);

/* ---- streaming rings ---- */

/* Opens a ring over @slots (a PINNED lease holding cfg->slots slots) and
 * @words (a MAPPED lease with the words, all 0), both held on the ring's
 * agent and connection. Answered by on_reply (request_type
 * LEASEC_REQ_RING_OPEN, ring filled) or on_error. Returns -EOPNOTSUPP when
 * the agent did not grant LEASEC_CAP_STREAM; -ESTALE, -ENOENT, -EBUSY for
 * a lease as leasec_client_submit; -EINVAL for leases of two agents, a
 * lease of the wrong class or a bad config (the reason in last_error);
 * -ERANGE when the slots or words do not fit their leases; -ENOTCONN;
 * -ENOMEM; -ECONNRESET. */
LEASEC_API int leasec_client_ring_open(struct leasec_client *c,
                                       const struct leasec_client_lease *slots,
                                       const struct leasec_client_lease *words,
                                       const struct leasec_ring_config *cfg, uint64_t tag,
                                       uint64_t *request_id_p);

/* Sends one RING_SHARD on @ring: answered by on_completion (its lease the
 * ring's slots lease) or on_error. Returns -ESTALE for a ring of an older
 * connection; -ENOENT for a ring not open; -EBUSY for one being closed;
 * -EINVAL for a bad shard; -ENOTCONN; -ENOMEM; -ECONNRESET. */
LEASEC_API int leasec_client_ring_shard(struct leasec_client *c, const struct leasec_ring *ring,
                                        const struct leasec_ring_shard *shard, uint64_t tag,
                                        uint64_t *request_id_p);

/* Closes @ring: the caller stores no more of its sequence words. Shards
 * whose chunks were all stored are answered with their results, the rest
 * LT_E_SHUTTING_DOWN; then on_reply (request_type LEASEC_REQ_RING_CLOSE,
 * ring_shards, ring_chunks) once the ring's work has drained, or on_error.
 * Errors as leasec_client_ring_shard. */
LEASEC_API int leasec_client_ring_close(struct leasec_client *c, const struct leasec_ring *ring,
                                        uint64_t tag, uint64_t *request_id_p);

/* The chunks a shard image of @length bytes takes on @ring:
 * ceil(length / slot_bytes); 0 for length 0. */
LEASEC_API uint64_t leasec_ring_chunks(const struct leasec_ring *ring, uint64_t length);

/* ---- doorbells and done words ---- */

/* This process's address of the word @offset of segment @key, which must
 * be 8-aligned and inside the segment. Returns 0; -ENOENT for no such
 * segment; -EINVAL for a bad offset. The word lives in the caller's
 * mapping (the client only computes the address). */
LEASEC_API int leasec_client_word_ptr(const struct leasec_client *c, uint32_t key, uint64_t offset,
                                      uint64_t **word_p);

/* The words area of @agent's current connection (LEASEC_CAP_WORDS): its
 * first byte in this process, read-only (the agent writes it), and its
 * size. Done words named {LEASEC_WORDS_KEY, off} are at *@base_p + off, and
 * so are a scan's hits at hits_offset off. Valid until that connection
 * ends (on_disconnect). Returns 0; -ENOENT for no such agent or no area on
 * this connection (the agent did not grant LEASEC_CAP_WORDS, or refused the
 * area: the reason is logged). */
LEASEC_API int leasec_client_words(const struct leasec_client *c, unsigned agent,
                                   const unsigned char **base_p, uint64_t *size_p);

/* Rings a doorbell: a release store of @seq into @bell, so every write
 * before it (the buffer's bytes) is visible to whoever sees @seq. For work
 * the agent queued behind the bell this is the whole hand-off: no message. */
LEASEC_API void leasec_client_ring(uint64_t *bell, uint64_t seq);

/* An acquire load of a completion word: once it shows the done seq of a
 * submit, what the GPU wrote before it is visible. */
LEASEC_API uint64_t leasec_client_done_word_read(const uint64_t *done);

/* ---- launching a kernel the agent loaded (protocol 1.2; docs/launch.md) ----
 *
 * The agent runs a kernel it loaded at start-up and that its image's
 * descriptor (NAME.kdesc) declares, on byte ranges of this client's leases,
 * with the caller's grid, block and dynamic shared memory and an argument
 * block: the kernel's scalar parameters (u32 i32 u64 i64 f32 f64) in the
 * descriptor's order, each at the next multiple of its size, the block
 * padded with zeros to a multiple of 8. The agent fills the lease pointers
 * and lengths and the result area itself. Needs LEASEC_CAP_LAUNCH asked
 * for in leasec_client_config.caps and granted. The leases stay the
 * caller's as for a submit: a release completes only after the launches on
 * them did. */

#define LEASEC_LAUNCH_MAX_RANGES 4       /* lease ranges one launch runs on */
#define LEASEC_LAUNCH_ARGS_MAX 1024u     /* argument block bytes */
#define LEASEC_LAUNCH_RESULT_MAX 256u    /* result area bytes */
#define LEASEC_LAUNCH_RANGE_F_WRITE (1u << 0) /* the kernel may write this range */
#define LEASEC_LAUNCH_IMAGE_LEN 32       /* image names, NUL included */
#define LEASEC_LAUNCH_KERNEL_LEN 64      /* kernel names, NUL included */

/* One range of a lease held on the agent the launch goes to; range i is
 * what the descriptor's "lease=i" names. */
struct leasec_launch_range {
    struct leasec_client_lease lease;
    uint64_t offset; /* from the lease's first byte */
    uint64_t length; /* nonzero, within the lease */
    uint32_t flags;  /* LEASEC_LAUNCH_RANGE_F_WRITE when the kernel writes it */
};

/* A launch. Zero it, then fill what the kernel needs. */
struct leasec_launch {
    const char *image;  /* the image: a cubin's name without .cubin; 1..31 printable bytes */
    const char *kernel; /* 1..63 printable bytes */
    uint32_t grid[3];   /* each >= 1; 0 is taken as 1 */
    uint32_t block[3];  /* each >= 1 (0: 1), at most 1024 threads in all */
    uint32_t shared_bytes;
    uint32_t result_bytes; /* the result area: 0..LEASEC_LAUNCH_RESULT_MAX */
    struct lt_stream_id stream; /* {0, 0}: the default stream */
    unsigned nranges;           /* 1..LEASEC_LAUNCH_MAX_RANGES */
    struct leasec_launch_range ranges[LEASEC_LAUNCH_MAX_RANGES];
    const void *args; /* @arg_bytes bytes, read during the call; may be NULL for 0 */
    size_t arg_bytes; /* a multiple of 8, at most LEASEC_LAUNCH_ARGS_MAX */
};

/* What the agent answered (a copy: it holds no pointer). */
struct leasec_launch_result {
    uint32_t status;    /* enum lt_error: LT_OK; LT_E_NOT_FOUND (no such launchable kernel);
                           LT_E_BAD_VALUE / LT_E_MISALIGNED / LT_E_UNSUPPORTED (arg_index
                           names the parameter); LT_E_LIMIT; LT_E_LAUNCH_FAILED (cu_error
                           says why; the device is fine); LT_E_GPU_FAULT (the agent restarts:
                           reconnect); LT_E_SHUTTING_DOWN; the lease refusals */
    int err;            /* lt_error_errno(status) */
    uint32_t detail;    /* the CUresult, 0 when none */
    uint32_t arg_index; /* the descriptor's parameter a refusal is about, or
                           LEASEC_INDEX_NONE */
    uint64_t elapsed_ns;
    char cu_error[48];                              /* the CUresult's name, "" when none */
    char message[88];                               /* the agent's words, "" for LT_OK */
    uint32_t result_bytes;                          /* LT_OK: the launch's result_bytes */
    unsigned char result[LEASEC_LAUNCH_RESULT_MAX]; /* what the kernel left there */
};

/* on_launch's argument (valid only during the callback). */
struct leasec_client_launch_done {
    unsigned agent;
    uint64_t request_id;
    uint64_t tag;
    const struct leasec_launch_result *result;
};

/* Sends @launch to @agent. Answered by on_launch (with any status: a
 * refused or failed launch too) or by on_error (the agent refused the
 * message itself: LAUNCH not granted; or the connection ended first).
 * Returns 0 and the request id; -EOPNOTSUPP when the agent did not grant
 * LEASEC_CAP_LAUNCH; -ESTALE / -ENOENT / -EBUSY for a range's lease as
 * leasec_client_submit, and -EINVAL for a lease of another agent; -EINVAL
 * for bad names, shape, counts or argument bytes (the words in
 * leasec_client_last_error); -ENOTCONN; -ENOMEM; -ECONNRESET. */
LEASEC_API int leasec_client_launch(struct leasec_client *c, unsigned agent,
                                    const struct leasec_launch *launch, uint64_t tag,
                                    uint64_t *request_id_p);

/* leasec_client_launch, then waits up to @timeout_ms (< 0: forever) for the
 * answer, which it writes to *@result_p instead of calling on_launch. Returns
 * 0 for LT_OK; lt_error_errno(status) for a launch the agent answered with
 * another status, *@result_p then written too (its words and argument index
 * are the answer) and the words in leasec_client_last_error; the agent's
 * refusal of the message (see leasec_client_last_refusal); the connection's
 * end; -ETIMEDOUT; -EDEADLK from a callback; the errors of
 * leasec_client_launch. */
LEASEC_API int leasec_client_launch_call(struct leasec_client *c, unsigned agent,
                                         const struct leasec_launch *launch, int timeout_ms,
                                         struct leasec_launch_result *result_p);

#ifdef __cplusplus
}
#endif

#endif /* LEASE_CLIENT_H */
