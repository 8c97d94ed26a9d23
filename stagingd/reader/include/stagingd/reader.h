/* The staging reader: copies byte ranges of files into memory (staging
 * buffers) on a set of staging threads, one io_uring per thread, with a
 * bounded queue depth per ring (docs/staging-reads.md says how and why).
 *
 * A request is cut into chunk-size reads that every staging thread may take,
 * so one large request is spread over all threads. The request's callback
 * runs once, on a staging thread, after its last chunk has landed or failed.
 *
 * Thread safety: submit and drain may be called from any number of threads
 * at once (submit also from a callback); create and destroy may not race with
 * anything on the same reader. */
#ifndef STAGINGD_READER_H
#define STAGINGD_READER_H

#include <stddef.h>
#include <stdint.h>

#include "base/log.h"

struct leasec_pool;

#define SD_READER_QUEUE_DEPTH_DEFAULT 16u
#define SD_READER_QUEUE_DEPTH_MAX 4096u
#define SD_READER_CHUNK_DEFAULT ((size_t)1 << 20)
/* Chunks are multiples of this (so O_DIRECT chunks stay aligned) and at most
 * 1 GiB (one SQE's length, one registered buffer's size). */
#define SD_READER_CHUNK_ALIGN ((size_t)4096)
#define SD_READER_CHUNK_MAX ((size_t)1 << 30)
#define SD_READER_THREADS_MAX 1024u
/* Retries of one chunk that returned -EAGAIN or -EINTR before it fails. */
#define SD_READER_RETRIES_DEFAULT 16u
/* Kernel worker threads (io-wq) per ring for reads the kernel cannot finish
 * inline (tmpfs files, for one): 1 keeps one copying core per staging thread. */
#define SD_READER_IOWQ_WORKERS_DEFAULT 1u
/* As iowq_workers: leave the kernel's bound (min(QD, 4 x cores)) alone. */
#define SD_READER_IOWQ_KERNEL (~0u)

/* A request's completion: @result is 0 or the first negative errno of the
 * request (-ENODATA: the file ended before offset + len); @bytes is how many
 * bytes landed (== len on success; on failure not necessarily a prefix). */
typedef void (*sd_read_done_fn)(void *arg, int result, uint64_t bytes);

/* sd_reader_config.flags */
enum {
    /* Never use io_uring: staging threads copy with pread (the path a kernel
     * without io_uring takes; kept testable). */
    SD_READER_FORCE_PREAD = 1u << 0,
    /* Every request is read with O_DIRECT, as if it had SD_READ_DIRECT. */
    SD_READER_DIRECT = 1u << 1,
};

/* Whether chunks that land in the pool's segments use registered buffers
 * (IORING_OP_READ_FIXED). DEFAULT is the measured choice, on (see
 * docs/staging-reads.md); it needs config.pool. */
enum sd_reader_fixed {
    SD_READER_FIXED_DEFAULT = 0,
    SD_READER_FIXED_ON = 1,
    SD_READER_FIXED_OFF = 2,
};

struct sd_reader_config {
    unsigned threads;     /* staging threads; 0: sd_reader_threads_default() */
    unsigned queue_depth; /* reads in flight per ring; 0: SD_READER_QUEUE_DEPTH_DEFAULT */
    size_t chunk_size;    /* bytes per read; 0: SD_READER_CHUNK_DEFAULT */
    unsigned max_retries; /* per chunk, for -EAGAIN/-EINTR; 0: SD_READER_RETRIES_DEFAULT */
    unsigned
        iowq_workers; /* per ring; 0: SD_READER_IOWQ_WORKERS_DEFAULT, or SD_READER_IOWQ_KERNEL */
    unsigned flags;
    enum sd_reader_fixed fixed;
    /* Optional, borrowed, must outlive the reader: its segments are
     * registered as fixed buffers with every ring when fixed buffers are on. */
    struct leasec_pool *pool;
    /* Where errors and notices go, at warning level with subsystem
     * "reader"; a zeroed sink is the process default (base/log.h). */
    struct base_log_sink log;
};

/* sd_read_req.flags */
enum {
    /* Read with O_DIRECT. offset and len must be multiples of the file's
     * direct-I/O offset alignment and buf of its memory alignment (statx
     * STATX_DIOALIGN; 4096 where the kernel does not say), else the request
     * is refused. A descriptor opened without O_DIRECT is reopened (through
     * /proc/self/fd) with it for this request; the caller's is untouched. */
    SD_READ_DIRECT = 1u << 0,
};

/* One read. sd_reader_submit copies the struct; the pointers in it are
 * borrowed until @done has run. */
struct sd_read_req {
    int fd;           /* a regular file (or block device), open for reading */
    uint64_t offset;  /* file offset of the first byte */
    uint64_t len;     /* bytes to read; 0 completes at once */
    void *buf;        /* destination, at least len bytes */
    size_t buf_len;   /* size of buf, >= len */
    unsigned flags;   /* SD_READ_* */
    const char *path; /* names the file in messages (NULL: "fd N") */
    char *err;        /* optional: receives the failure's message line */
    size_t err_len;
    sd_read_done_fn done; /* required */
    void *arg;
};

/* Counters since create, summed over the staging threads. */
struct sd_reader_stats {
    uint64_t requests;    /* completed (callback returned) */
    uint64_t failed;      /* of which with result < 0 */
    uint64_t bytes;       /* landed */
    uint64_t reads;       /* read operations issued, resubmissions included */
    uint64_t fixed_reads; /* of which READ_FIXED */
    uint64_t short_reads; /* reads that returned less than asked and were resumed */
    uint64_t retries;     /* -EAGAIN/-EINTR resubmissions */
};

/* What a reader ended up with after create. */
struct sd_reader_info {
    unsigned threads;
    unsigned queue_depth;
    size_t chunk_size;
    int uring;             /* 1: io_uring, 0: pread fallback */
    unsigned iowq_workers; /* the io-wq bound each ring runs with (0: kernel default) */
    int fixed;             /* 1: pool segments registered as fixed buffers on every ring */
    unsigned regions;      /* registered buffers per ring */
};

struct sd_reader;

/* --- life cycle --- */

/* The staging threads when none are asked for: three quarters of the online cores
 * (at least one), leaving the rest to the GPU agent's dispatcher and the
 * driver's threads, which share the machine with them (on the H200's 16
 * cores, 12 staging threads beat 16 in every measured run:
 * docs/streaming.md, "How many staging threads"). */
unsigned sd_reader_threads_default(void);

/* Starts the staging threads, each with its own ring (created, and buffers
 * registered, before this returns). A kernel that refuses io_uring makes the
 * reader fall back to pread, logged once; so does a failed buffer registration
 * fall back to plain reads. Returns 0 and *@reader_p, -EINVAL for a bad config
 * (logged), -ENOMEM, or the -errno of pthread_create; nothing is left behind on
 * failure. @config may be NULL for all defaults. */
int sd_reader_create(const struct sd_reader_config *config, struct sd_reader **reader_p);

/* Waits for every submitted request to complete, stops and joins the threads,
 * closes the rings and frees @reader. NULL is a no-op. Must not be called from
 * a callback. */
void sd_reader_destroy(struct sd_reader *reader);

/* --- reads --- */

/* Queues @req. Returns 0: @req->done will run exactly once, on a staging
 * thread. Returns -EINVAL for a malformed request or a misaligned O_DIRECT
 * request, -EOPNOTSUPP/-errno when O_DIRECT cannot be had, -ENOMEM; each is
 * logged (and copied to @req->err), and @req->done is not called. */
int sd_reader_submit(struct sd_reader *reader, const struct sd_read_req *req);

/* Blocks until every request submitted so far (and any submitted meanwhile)
 * has completed and its callback has returned. Returns 0, or -EDEADLK when
 * called from a staging thread (a callback). */
int sd_reader_drain(struct sd_reader *reader);

/* --- introspection --- */

/* Fills *@info_p with the shape the reader ended up with after create. */
void sd_reader_info_get(const struct sd_reader *reader, struct sd_reader_info *info_p);

/* Fills *@stats_p with the counters so far (exact once drained). */
void sd_reader_stats_get(const struct sd_reader *reader, struct sd_reader_stats *stats_p);

#endif /* STAGINGD_READER_H */
