/* The staging reader's internals, shared by reader.c (API, set-up, O_DIRECT
 * checks) and reader_thread.c (the staging threads), and the fault-injection
 * hooks tests/reader reaches. */
#ifndef STAGINGD_READER_INTERNAL_H
#define STAGINGD_READER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/uio.h>

#include <liburing.h>

#include "stagingd/reader.h"

/* One accepted request. Fields above the line are fixed at submit; the
 * cursor is guarded by the reader's lock; the rest are atomics the staging
 * threads update as chunks finish. */
struct sd_reader__req {
    struct sd_read_req r;
    int fd;     /* what reads use: r.fd, or own_fd */
    int own_fd; /* an O_DIRECT reopen owned by this request, or -1 */
    uint64_t chunks;
    /* ---- */
    uint64_t next_chunk;               /* next chunk index to hand out (lock) */
    struct sd_reader__req *queue_next; /* (lock) */
    atomic_uint_fast64_t chunks_left;  /* the thread that takes it to 0 completes */
    atomic_uint_fast64_t bytes_done;
    atomic_int result;           /* first error, 0 while none */
    uint64_t err_offset;         /* written by whoever set result */
    uint32_t err_len;            /* bytes the failed read asked for */
    atomic_uint_fast64_t eof_at; /* lowest offset where a read saw EOF */
};

/* One chunk being read, on one thread. */
struct sd_reader__slot {
    struct sd_reader__req *req;
    uint64_t off; /* file offset of what is still missing */
    char *dst;
    uint32_t len;  /* bytes still missing */
    uint32_t done; /* bytes landed */
    unsigned retries;
    int buf_index; /* registered buffer, or -1 */
    int next_free; /* free-list link */
};

struct sd_reader__counters {
    atomic_uint_fast64_t requests, failed, bytes, reads, fixed_reads, short_reads, retries;
};

struct sd_reader__thread {
    struct sd_reader *reader;
    unsigned index;
    pthread_t tid;
    int started;
    int uring;      /* this thread reads through ring */
    int ring_ready; /* ring was created (and must be exited) */
    int fixed;      /* ring has the pool's buffers registered */
    int enable;     /* ring was created disabled; the thread enables it */
    int iowq_ok;    /* the io-wq bound took */
    struct io_uring ring;
    struct sd_reader__slot *slots;
    int *taken; /* slot indices handed out by one take */
    int free_head;
    unsigned inflight;
};

struct sd_reader {
    unsigned threads;
    unsigned queue_depth;
    size_t chunk_size;
    unsigned max_retries;
    unsigned iowq_workers;
    unsigned iowq_applied; /* every ring took the bound (checked after start-up) */
    unsigned flags;
    int uring; /* every thread uses io_uring */
    int fixed; /* every ring has the regions registered */
    struct base_log_sink log;

    /* Registered regions, sorted by address; index == buffer index. */
    struct iovec *regions;
    unsigned nregions;

    pthread_mutex_t lock;
    pthread_cond_t work_cv; /* a request was queued, or stop */
    pthread_cond_t idle_cv; /* pending reached 0 */
    struct sd_reader__req *queue_head, *queue_tail;
    uint64_t pending; /* accepted, callback not yet returned */
    unsigned idle;    /* threads waiting on work_cv */
    unsigned ready;   /* threads past start-up (idle_cv is signalled) */
    int stop;

    atomic_int dio_align_logged;
    struct sd_reader__counters counters;
    struct sd_reader__thread *thr;
};

/* Test hooks (NULL in production). Called on staging threads.
 * before_read: before each read of a chunk is issued (file offset, length).
 * on_result: sees every read's result and may replace it (a result larger
 * than the kernel's is clamped). */
struct sd_reader__hooks {
    void (*before_read)(void *ctx, int fd, uint64_t off, uint32_t len);
    int (*on_result)(void *ctx, uint64_t off, uint32_t len, int res);
    void *ctx;
};
extern struct sd_reader__hooks sd_reader__hooks;

/* Logs one line through the reader's sink: every reader line is a warning. */
#define sd_reader__log(r, ...) base_log(&(r)->log, BASE_LOG_WARN, "reader", __VA_ARGS__)

/* reader.c */
/* The registered buffer holding [p, p + len), or -1. */
int sd_reader__region_find(const struct sd_reader *r, const void *p, size_t len);

/* reader_thread.c */
void *sd_reader__thread_main(void *arg);
/* The reader whose staging thread this is (NULL elsewhere). */
extern _Thread_local const struct sd_reader *sd_reader__self;

#endif /* STAGINGD_READER_INTERNAL_H */
