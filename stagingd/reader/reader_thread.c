/* The staging threads: take chunks from the shared queue, read them through
 * the thread's ring (or pread), resume short reads, retry -EAGAIN/-EINTR, and
 * complete a request when its last chunk is done. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "reader_internal.h"

_Thread_local const struct sd_reader *sd_reader__self;

/* --- requests --- */

static void sd_reader__fail(struct sd_reader__req *q, int err, uint64_t off, uint32_t len)
{
    int none = 0;
    if (atomic_compare_exchange_strong(&q->result, &none, err)) {
        q->err_offset = off;
        q->err_len = len;
    }
}

static void sd_reader__eof(struct sd_reader__req *q, uint64_t off)
{
    uint_fast64_t cur = atomic_load(&q->eof_at);
    while (off < cur && !atomic_compare_exchange_weak(&q->eof_at, &cur, off))
        ;
    sd_reader__fail(q, -ENODATA, off, 0);
}

/* Reports a failed request: one log line, copied to its err buffer. */
static void sd_reader__report(struct sd_reader *r, struct sd_reader__req *q, int res)
{
    const struct sd_read_req *req = &q->r;
    char nbuf[32], line[640];
    const char *name = req->path;
    if (!name) {
        snprintf(nbuf, sizeof(nbuf), "fd %d", req->fd);
        name = nbuf;
    }
    uint64_t end = req->offset + req->len;
    if (res == -ENODATA) {
        uint64_t eof = atomic_load(&q->eof_at);
        snprintf(line, sizeof(line),
                 "%s: file ends at offset %" PRIu64 ": expected %" PRIu64
                 " bytes from offset %" PRIu64 ", %" PRIu64
                 " bytes missing (truncated while being read?)",
                 name, eof, req->len, req->offset, end - eof);
    } else if (res == -EAGAIN || res == -EINTR) {
        snprintf(line, sizeof(line),
                 "%s: read of %" PRIu32 " bytes at offset %" PRIu64 " failed after %u retries: %s"
                 " (request: %" PRIu64 " bytes from offset %" PRIu64 ")",
                 name, q->err_len, q->err_offset, r->max_retries, strerror(-res), req->len,
                 req->offset);
    } else {
        snprintf(line, sizeof(line),
                 "%s: read of %" PRIu32 " bytes at offset %" PRIu64 " failed: %s"
                 " (request: %" PRIu64 " bytes from offset %" PRIu64 ")",
                 name, q->err_len, q->err_offset, strerror(-res), req->len, req->offset);
    }
    sd_reader__log(r, "%s", line);
    if (req->err && req->err_len)
        snprintf(req->err, req->err_len, "%s", line);
}

/* Runs the callback and retires the request. */
static void sd_reader__complete(struct sd_reader *r, struct sd_reader__req *q)
{
    int res = atomic_load(&q->result);
    uint64_t bytes = atomic_load(&q->bytes_done);
    if (res < 0)
        sd_reader__report(r, q, res);
    if (q->own_fd >= 0)
        close(q->own_fd);
    q->r.done(q->r.arg, res, bytes);
    free(q);
    atomic_fetch_add_explicit(&r->counters.requests, 1, memory_order_relaxed);
    if (res < 0)
        atomic_fetch_add_explicit(&r->counters.failed, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->counters.bytes, bytes, memory_order_relaxed);
    pthread_mutex_lock(&r->lock);
    if (--r->pending == 0)
        pthread_cond_broadcast(&r->idle_cv);
    pthread_mutex_unlock(&r->lock);
}

/* --- taking work --- */

static void sd_reader__pop(struct sd_reader *r)
{
    r->queue_head = r->queue_head->queue_next;
    if (!r->queue_head)
        r->queue_tail = NULL;
}

/* Moves up to @max chunks from the queue into free slots of @t (their indices
 * in t->taken). With @wait, first blocks until there is work or the reader
 * stops. Requests that failed lose the chunks not yet handed out. Returns the
 * number taken, or -1 when the reader stops and nothing is queued. */
static int sd_reader__take(struct sd_reader__thread *t, unsigned max, int wait)
{
    struct sd_reader *r = t->reader;
    struct sd_reader__req *finished = NULL;
    unsigned n = 0;
    pthread_mutex_lock(&r->lock);
    while (wait && !r->queue_head && !r->stop) {
        r->idle++;
        pthread_cond_wait(&r->work_cv, &r->lock);
        r->idle--;
    }
    while (n < max && r->queue_head) {
        struct sd_reader__req *q = r->queue_head;
        uint64_t left = q->chunks - q->next_chunk;
        if (left == 0 || atomic_load(&q->result) != 0) {
            sd_reader__pop(r);
            q->next_chunk = q->chunks;
            /* A request of 0 bytes, or the unread chunks of a failed one:
             * whoever drops the count to 0 completes it. */
            if (atomic_fetch_sub(&q->chunks_left, left) == left) {
                q->queue_next = finished;
                finished = q;
            }
            continue;
        }
        uint64_t rel = q->next_chunk * r->chunk_size;
        if (++q->next_chunk == q->chunks)
            sd_reader__pop(r);
        int k = t->free_head;
        struct sd_reader__slot *s = &t->slots[k];
        t->free_head = s->next_free;
        uint64_t clen = q->r.len - rel < r->chunk_size ? q->r.len - rel : r->chunk_size;
        s->req = q;
        s->off = q->r.offset + rel;
        s->dst = (char *)q->r.buf + rel;
        s->len = (uint32_t)clen;
        s->done = 0;
        s->retries = 0;
        s->buf_index = -1;
        t->taken[n++] = k;
    }
    int stopped = r->stop && !r->queue_head;
    if (r->queue_head && r->idle)
        pthread_cond_signal(&r->work_cv);
    pthread_mutex_unlock(&r->lock);
    while (finished) {
        struct sd_reader__req *q = finished;
        finished = q->queue_next;
        sd_reader__complete(r, q);
    }
    if (t->fixed)
        for (unsigned i = 0; i < n; i++) {
            struct sd_reader__slot *s = &t->slots[t->taken[i]];
            s->buf_index = sd_reader__region_find(r, s->dst, s->len);
        }
    return n == 0 && stopped ? -1 : (int)n;
}

/* Returns a slot to the free list and counts its chunk done. */
static void sd_reader__slot_finish(struct sd_reader__thread *t, struct sd_reader__slot *s)
{
    struct sd_reader__req *q = s->req;
    atomic_fetch_add(&q->bytes_done, s->done);
    s->req = NULL;
    s->next_free = t->free_head;
    t->free_head = (int)(s - t->slots);
    if (atomic_fetch_sub(&q->chunks_left, 1) == 1)
        sd_reader__complete(t->reader, q);
}

/* Accounts one read's result @res on @s. Returns 1 when the rest of the
 * chunk must be read again (short read, retry), 0 when the chunk is done
 * (landed whole, or its request has recorded the error). */
static int sd_reader__result(struct sd_reader__thread *t, struct sd_reader__slot *s, int res)
{
    struct sd_reader *r = t->reader;
    if (sd_reader__hooks.on_result) {
        int h = sd_reader__hooks.on_result(sd_reader__hooks.ctx, s->off, s->len, res);
        res = h >= 0 && res >= 0 && h > res ? res : h;
    }
    if (res > 0) {
        uint32_t got = (uint32_t)res < s->len ? (uint32_t)res : s->len;
        s->done += got;
        s->off += got;
        s->dst += got;
        s->len -= got;
        if (s->len == 0)
            return 0;
        atomic_fetch_add_explicit(&r->counters.short_reads, 1, memory_order_relaxed);
        return 1;
    }
    if (res == 0) {
        sd_reader__eof(s->req, s->off);
        return 0;
    }
    if ((res == -EAGAIN || res == -EINTR) && s->retries < r->max_retries) {
        s->retries++;
        atomic_fetch_add_explicit(&r->counters.retries, 1, memory_order_relaxed);
        return 1;
    }
    sd_reader__fail(s->req, res, s->off, s->len);
    return 0;
}

static void sd_reader__before_read(struct sd_reader *r, struct sd_reader__slot *s)
{
    if (sd_reader__hooks.before_read)
        sd_reader__hooks.before_read(sd_reader__hooks.ctx, s->req->fd, s->off, s->len);
    atomic_fetch_add_explicit(&r->counters.reads, 1, memory_order_relaxed);
}

/* --- the io_uring loop --- */

static void sd_reader__prep(struct sd_reader__thread *t, struct sd_reader__slot *s)
{
    struct sd_reader *r = t->reader;
    sd_reader__before_read(r, s);
    struct io_uring_sqe *sqe = io_uring_get_sqe(&t->ring);
    if (!sqe) {
        /* Never expected (one SQE per slot at most), but submitting makes room. */
        io_uring_submit(&t->ring);
        sqe = io_uring_get_sqe(&t->ring);
    }
    if (!sqe) {
        sd_reader__fail(s->req, -EBUSY, s->off, s->len);
        s->len = 0;
        sd_reader__slot_finish(t, s);
        t->inflight--;
        return;
    }
    if (s->buf_index >= 0) {
        io_uring_prep_read_fixed(sqe, s->req->fd, s->dst, s->len, s->off, s->buf_index);
        atomic_fetch_add_explicit(&r->counters.fixed_reads, 1, memory_order_relaxed);
    } else {
        io_uring_prep_read(sqe, s->req->fd, s->dst, s->len, s->off);
    }
    io_uring_sqe_set_data(sqe, s);
}

static void sd_reader__uring_loop(struct sd_reader__thread *t)
{
    struct sd_reader *r = t->reader;
    unsigned enter_errors = 0;
    /* Take a quarter of the queue depth at a time: page-cache hits complete
     * inside the submit, so a thread holding all QD chunks would finish a
     * large request alone while the others idle; reads that do wait fill the
     * ring within a few completions anyway. */
    unsigned batch = r->queue_depth >= 4 ? r->queue_depth / 4 : 1;
    for (;;) {
        unsigned room = r->queue_depth - t->inflight;
        if (room > batch)
            room = batch;
        if (room) {
            /* Block for work only with nothing in flight; otherwise the
             * completions below are what this thread waits for. */
            int n = sd_reader__take(t, room, t->inflight == 0);
            if (n < 0 && t->inflight == 0)
                break;
            if (n < 0)
                n = 0;
            t->inflight += (unsigned)n;
            for (int i = 0; i < n; i++)
                sd_reader__prep(t, &t->slots[t->taken[i]]);
        }
        if (t->inflight == 0)
            continue;
        int rc = io_uring_submit_and_wait(&t->ring, 1);
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
            /* Unsubmitted SQEs stay queued and go with the next call; pause
             * instead of spinning on a persistent failure. */
            if (enter_errors++ == 0)
                sd_reader__log(r, "staging thread %u: io_uring_enter: %s; retrying", t->index,
                               strerror(-rc));
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
        }
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&t->ring, head, cqe)
        {
            struct sd_reader__slot *s = io_uring_cqe_get_data(cqe);
            seen++;
            if (sd_reader__result(t, s, cqe->res)) {
                sd_reader__prep(t, s);
            } else {
                t->inflight--;
                sd_reader__slot_finish(t, s);
            }
        }
        io_uring_cq_advance(&t->ring, seen);
    }
}

/* --- the pread loop (no io_uring) --- */

static void sd_reader__pread_loop(struct sd_reader__thread *t)
{
    struct sd_reader *r = t->reader;
    for (;;) {
        int n = sd_reader__take(t, 1, 1);
        if (n < 0)
            break;
        if (n == 0)
            continue;
        struct sd_reader__slot *s = &t->slots[t->taken[0]];
        int again;
        do {
            sd_reader__before_read(r, s);
            ssize_t got = pread(s->req->fd, s->dst, s->len, (off_t)s->off);
            again = sd_reader__result(t, s, got < 0 ? -errno : (int)got);
        } while (again);
        sd_reader__slot_finish(t, s);
    }
}

void *sd_reader__thread_main(void *arg)
{
    struct sd_reader__thread *t = arg;
    struct sd_reader *r = t->reader;
    sd_reader__self = r;
    if (t->uring && t->enable) {
        int rc = io_uring_enable_rings(&t->ring);
        if (rc < 0) {
            sd_reader__log(r, "staging thread %u: enabling its ring: %s; it reads with pread",
                           t->index, strerror(-rc));
            t->uring = 0;
        }
    }
    t->iowq_ok = 1;
    if (t->uring && r->iowq_workers != SD_READER_IOWQ_KERNEL) {
        /* io-wq belongs to the submitting task, so the bound is set here.
         * Without it a ring whose reads the kernel punts (tmpfs) would copy
         * on up to min(QD, 4 x cores) kernel threads. */
        unsigned vals[2] = {r->iowq_workers, 0};
        int rc = io_uring_register_iowq_max_workers(&t->ring, vals);
        t->iowq_ok = rc == 0;
        if (rc < 0 && t->index == 0)
            sd_reader__log(r,
                           "io-wq worker bound not set (kernel before 5.15?): %s; reads the "
                           "kernel cannot finish inline may use more threads",
                           strerror(-rc));
    }
    pthread_mutex_lock(&r->lock);
    r->ready++;
    pthread_cond_broadcast(&r->idle_cv);
    pthread_mutex_unlock(&r->lock);
    if (t->uring)
        sd_reader__uring_loop(t);
    else
        sd_reader__pread_loop(t);
    return NULL;
}
