/* The staging reader: configuration, rings and registered buffers, request
 * admission (O_DIRECT checks included), drain and teardown. The staging
 * threads' loops are in reader_thread.c; docs/staging-reads.md explains. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/fs.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "reader_internal.h"
#include "lease/client.h"

#ifndef STATX_DIOALIGN
#define STATX_DIOALIGN 0x00002000U
#endif

/* Measured on the 16-core GPU machine (docs/staging-reads.md): READ_FIXED
 * copied page-cache-hot data 2-10% faster than plain reads at 1-2 threads and
 * matched or beat them at 16, for a one-off ~0.1 s registration of a 4 GiB
 * pool (cloned, not re-pinned, across rings). */
#define SD_READER_FIXED_BY_DEFAULT 1

/* One registered buffer may not exceed 1 GiB (the kernel's limit). */
#define SD_READER_REGION_MAX ((uint64_t)1 << 30)

/* Kernel 6.12+: share one ring's registered buffers with another ring
 * (pins and accounting are not repeated). liburing 2.3 predates it. */
#define SD_READER_REGISTER_CLONE_BUFFERS 30u
struct sd_reader__clone_arg {
    uint32_t src_fd;
    uint32_t flags;
    uint32_t pad[6];
};

struct sd_reader__hooks sd_reader__hooks;

/* --- registered buffers --- */

int sd_reader__region_find(const struct sd_reader *r, const void *p, size_t len)
{
    uintptr_t a = (uintptr_t)p;
    unsigned lo = 0, hi = r->nregions;
    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;
        uintptr_t base = (uintptr_t)r->regions[mid].iov_base;
        if (a < base)
            hi = mid;
        else if (a - base >= r->regions[mid].iov_len)
            lo = mid + 1;
        else
            return a - base + len <= r->regions[mid].iov_len ? (int)mid : -1;
    }
    return -1;
}

/* The pool's segments as registrable regions, in address order. */
static int sd_reader__regions_build(struct sd_reader *r, struct leasec_pool *pool)
{
    unsigned nseg = leasec_pool_segment_count(pool);
    unsigned n = 0;
    for (unsigned i = 0; i < nseg; i++) {
        struct leasec_pool_segment seg;
        if (leasec_pool_segment_at(pool, i, &seg) == 0)
            n += (unsigned)((seg.size + SD_READER_REGION_MAX - 1) / SD_READER_REGION_MAX);
    }
    if (n == 0)
        return 0;
    r->regions = calloc(n, sizeof(*r->regions));
    if (!r->regions)
        return -ENOMEM;
    for (unsigned i = 0; i < nseg; i++) {
        struct leasec_pool_segment seg;
        if (leasec_pool_segment_at(pool, i, &seg) != 0)
            continue;
        for (uint64_t off = 0; off < seg.size && r->nregions < n; off += SD_READER_REGION_MAX) {
            uint64_t len = seg.size - off;
            r->regions[r->nregions].iov_base = (char *)seg.base + off;
            r->regions[r->nregions].iov_len =
                len < SD_READER_REGION_MAX ? len : SD_READER_REGION_MAX;
            r->nregions++;
        }
    }
    return 0;
}

static int sd_reader__clone_buffers(struct io_uring *dst, const struct io_uring *src)
{
    struct sd_reader__clone_arg arg = {.src_fd = (uint32_t)src->ring_fd};
    long rc =
        syscall(__NR_io_uring_register, dst->ring_fd, SD_READER_REGISTER_CLONE_BUFFERS, &arg, 1);
    return rc < 0 ? -errno : 0;
}

/* Registers the regions with every ring: once with ring 0, then cloned where
 * the kernel can. All or nothing. */
static int sd_reader__fixed_register(struct sd_reader *r)
{
    uint64_t bytes = 0;
    for (unsigned i = 0; i < r->nregions; i++)
        bytes += r->regions[i].iov_len;
    unsigned done = 0;
    int rc = 0;
    for (; done < r->threads; done++) {
        struct sd_reader__thread *t = &r->thr[done];
        rc = -EINVAL;
        if (done > 0)
            rc = sd_reader__clone_buffers(&t->ring, &r->thr[0].ring);
        if (rc < 0)
            rc = io_uring_register_buffers(&t->ring, r->regions, r->nregions);
        if (rc < 0)
            break;
    }
    if (rc < 0) {
        sd_reader__log(r,
                       "fixed buffers off: registering %u pool regions (%" PRIu64
                       " bytes) with ring %u of %u failed: %s; reading without them",
                       r->nregions, bytes, done, r->threads, strerror(-rc));
        for (unsigned i = 0; i < done; i++)
            io_uring_unregister_buffers(&r->thr[i].ring);
        return rc;
    }
    for (unsigned i = 0; i < r->threads; i++)
        r->thr[i].fixed = 1;
    return 0;
}

/* --- rings --- */

static void sd_reader__rings_exit(struct sd_reader *r)
{
    for (unsigned i = 0; i < r->threads; i++) {
        struct sd_reader__thread *t = &r->thr[i];
        if (t->ring_ready)
            io_uring_queue_exit(&t->ring);
        t->ring_ready = 0;
        t->uring = 0;
        t->fixed = 0;
    }
}

/* Creates one ring per thread. Rings start disabled and single-issuer, so the
 * thread that enables one becomes its only submitter; kernels without those
 * flags (before 6.1) get plain rings. Returns 0 or the failing -errno, with
 * no ring left behind. */
static int sd_reader__rings_init(struct sd_reader *r)
{
    unsigned flags =
        IORING_SETUP_R_DISABLED | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
    for (unsigned i = 0; i < r->threads; i++) {
        struct sd_reader__thread *t = &r->thr[i];
        struct io_uring_params p;
        memset(&p, 0, sizeof(p));
        p.flags = flags;
        int rc = io_uring_queue_init_params(r->queue_depth, &t->ring, &p);
        if (rc == -EINVAL && flags) {
            flags = 0;
            memset(&p, 0, sizeof(p));
            rc = io_uring_queue_init_params(r->queue_depth, &t->ring, &p);
        }
        if (rc < 0) {
            sd_reader__log(r,
                           "io_uring unavailable (io_uring_queue_init for ring %u of %u: %s); "
                           "staging threads read with pread",
                           i, r->threads, strerror(-rc));
            sd_reader__rings_exit(r);
            return rc;
        }
        t->ring_ready = 1;
        t->uring = 1;
        t->enable = (flags & IORING_SETUP_R_DISABLED) != 0;
    }
    struct io_uring_probe *probe = io_uring_get_probe_ring(&r->thr[0].ring);
    int has_read = probe && io_uring_opcode_supported(probe, IORING_OP_READ);
    if (probe)
        io_uring_free_probe(probe);
    if (!has_read) {
        sd_reader__log(r, "io_uring lacks IORING_OP_READ (kernel before 5.6); staging threads "
                          "read with pread");
        sd_reader__rings_exit(r);
        return -EOPNOTSUPP;
    }
    return 0;
}

/* --- life cycle --- */

unsigned sd_reader_threads_default(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 2)
        return 1;
    return (unsigned)(cores - cores / 4);
}

static int sd_reader__config_check(struct sd_reader *r, const struct sd_reader_config *c)
{
    r->threads = c->threads ? c->threads : sd_reader_threads_default();
    if (r->threads > SD_READER_THREADS_MAX) {
        sd_reader__log(r, "config: expected threads in 1..%u, found %u", SD_READER_THREADS_MAX,
                       r->threads);
        return -EINVAL;
    }
    r->queue_depth = c->queue_depth ? c->queue_depth : SD_READER_QUEUE_DEPTH_DEFAULT;
    if (r->queue_depth > SD_READER_QUEUE_DEPTH_MAX) {
        sd_reader__log(r, "config: expected queue_depth in 1..%u, found %u",
                       SD_READER_QUEUE_DEPTH_MAX, r->queue_depth);
        return -EINVAL;
    }
    r->chunk_size = c->chunk_size ? c->chunk_size : SD_READER_CHUNK_DEFAULT;
    if (r->chunk_size % SD_READER_CHUNK_ALIGN || r->chunk_size > SD_READER_CHUNK_MAX) {
        sd_reader__log(r, "config: expected chunk_size a multiple of %zu up to %zu, found %zu",
                       SD_READER_CHUNK_ALIGN, SD_READER_CHUNK_MAX, r->chunk_size);
        return -EINVAL;
    }
    r->max_retries = c->max_retries ? c->max_retries : SD_READER_RETRIES_DEFAULT;
    r->iowq_workers = c->iowq_workers ? c->iowq_workers : SD_READER_IOWQ_WORKERS_DEFAULT;
    if (c->flags & ~(unsigned)(SD_READER_FORCE_PREAD | SD_READER_DIRECT)) {
        sd_reader__log(r, "config: unknown flags 0x%x", c->flags);
        return -EINVAL;
    }
    if (c->fixed != SD_READER_FIXED_DEFAULT && c->fixed != SD_READER_FIXED_ON &&
        c->fixed != SD_READER_FIXED_OFF) {
        sd_reader__log(r, "config: expected fixed 0 (default), 1 (on) or 2 (off), found %d",
                       (int)c->fixed);
        return -EINVAL;
    }
    r->flags = c->flags;
    return 0;
}

/* Frees everything create made; the threads must have been joined. */
static void sd_reader__free(struct sd_reader *r)
{
    if (r->thr) {
        sd_reader__rings_exit(r);
        for (unsigned i = 0; i < r->threads; i++) {
            free(r->thr[i].slots);
            free(r->thr[i].taken);
        }
        free(r->thr);
    }
    free(r->regions);
    pthread_cond_destroy(&r->idle_cv);
    pthread_cond_destroy(&r->work_cv);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

static void sd_reader__stop_join(struct sd_reader *r)
{
    pthread_mutex_lock(&r->lock);
    r->stop = 1;
    pthread_cond_broadcast(&r->work_cv);
    pthread_mutex_unlock(&r->lock);
    for (unsigned i = 0; i < r->threads; i++)
        if (r->thr[i].started)
            pthread_join(r->thr[i].tid, NULL);
}

static int sd_reader__threads_start(struct sd_reader *r)
{
    /* Staging threads take no signals: the process's handlers run elsewhere
     * and the threads' blocking calls are never interrupted. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = 0;
    unsigned started = 0;
    for (; started < r->threads; started++) {
        struct sd_reader__thread *t = &r->thr[started];
        rc = -pthread_create(&t->tid, NULL, sd_reader__thread_main, t);
        if (rc < 0)
            break;
        t->started = 1;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc < 0) {
        sd_reader__log(r, "starting staging thread %u of %u: pthread_create: %s", started,
                       r->threads, strerror(-rc));
        return rc;
    }
    /* Wait until each thread has enabled its ring, so info is final. */
    pthread_mutex_lock(&r->lock);
    while (r->ready < r->threads)
        pthread_cond_wait(&r->idle_cv, &r->lock);
    pthread_mutex_unlock(&r->lock);
    return 0;
}

int sd_reader_create(const struct sd_reader_config *config, struct sd_reader **reader_p)
{
    struct sd_reader_config c;
    if (config)
        c = *config;
    else
        memset(&c, 0, sizeof(c));
    struct sd_reader *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->log = c.log;
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->work_cv, NULL);
    pthread_cond_init(&r->idle_cv, NULL);

    int rc = sd_reader__config_check(r, &c);
    if (rc < 0)
        goto fail;
    rc = -ENOMEM;
    r->thr = calloc(r->threads, sizeof(*r->thr));
    if (!r->thr)
        goto fail_nomem;
    for (unsigned i = 0; i < r->threads; i++) {
        struct sd_reader__thread *t = &r->thr[i];
        t->reader = r;
        t->index = i;
        t->slots = calloc(r->queue_depth, sizeof(*t->slots));
        t->taken = calloc(r->queue_depth, sizeof(*t->taken));
        if (!t->slots || !t->taken)
            goto fail_nomem;
        for (unsigned k = 0; k < r->queue_depth; k++)
            t->slots[k].next_free = k + 1 < r->queue_depth ? (int)k + 1 : -1;
        t->free_head = 0;
    }

    if (!(r->flags & SD_READER_FORCE_PREAD))
        sd_reader__rings_init(r); /* failure logged: the threads use pread */

    int want_fixed = c.fixed == SD_READER_FIXED_ON ||
                     (c.fixed == SD_READER_FIXED_DEFAULT && SD_READER_FIXED_BY_DEFAULT);
    if (want_fixed && c.pool && r->thr[0].uring) {
        rc = sd_reader__regions_build(r, c.pool);
        if (rc < 0)
            goto fail_nomem;
        if (r->nregions)
            sd_reader__fixed_register(r); /* failure logged: plain reads */
    }

    rc = sd_reader__threads_start(r);
    if (rc < 0)
        goto fail_threads;
    r->uring = 1;
    r->fixed = r->nregions > 0;
    r->iowq_applied = 1;
    for (unsigned i = 0; i < r->threads; i++) {
        r->uring &= r->thr[i].uring;
        r->fixed &= r->thr[i].uring && r->thr[i].fixed;
        r->iowq_applied &= r->thr[i].iowq_ok;
    }
    *reader_p = r;
    return 0;

fail_nomem:
    sd_reader__log(r, "creating reader: out of memory");
    rc = -ENOMEM;
    goto fail;
fail_threads:
    sd_reader__stop_join(r);
fail:
    sd_reader__free(r);
    return rc;
}

void sd_reader_destroy(struct sd_reader *reader)
{
    if (!reader)
        return;
    sd_reader_drain(reader);
    sd_reader__stop_join(reader);
    sd_reader__free(reader);
}

int sd_reader_drain(struct sd_reader *reader)
{
    if (sd_reader__self == reader)
        return -EDEADLK;
    pthread_mutex_lock(&reader->lock);
    while (reader->pending)
        pthread_cond_wait(&reader->idle_cv, &reader->lock);
    pthread_mutex_unlock(&reader->lock);
    return 0;
}

/* --- requests --- */

static const char *sd_reader__name(const struct sd_read_req *req, char *buf, size_t len)
{
    if (req->path)
        return req->path;
    snprintf(buf, len, "fd %d", req->fd);
    return buf;
}

/* Logs a refusal and copies it to the request's err buffer. */
static int sd_reader__refuse(struct sd_reader *r, const struct sd_read_req *req, int rc,
                             const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int sd_reader__refuse(struct sd_reader *r, const struct sd_read_req *req, int rc,
                             const char *fmt, ...)
{
    char line[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    sd_reader__log(r, "%s", line);
    if (req && req->err && req->err_len)
        snprintf(req->err, req->err_len, "%s", line);
    return rc;
}

/* The file's direct-I/O alignment: statx where the kernel reports it (6.1+),
 * the device's logical block size for a block device, else 4096 (logged once
 * per reader). Returns 0, or -EOPNOTSUPP when the file has no direct I/O. */
static int sd_reader__dio_align(struct sd_reader *r, const struct sd_read_req *req, int fd,
                                uint32_t *off_align_p, uint32_t *mem_align_p)
{
    char nbuf[32];
    const char *name = sd_reader__name(req, nbuf, sizeof(nbuf));
    struct statx sx;
    memset(&sx, 0, sizeof(sx));
    int rc = statx(fd, "", AT_EMPTY_PATH, STATX_TYPE | STATX_DIOALIGN, &sx);
    if (rc == 0 && (sx.stx_mask & STATX_DIOALIGN)) {
        if (sx.stx_dio_offset_align == 0 || sx.stx_dio_mem_align == 0)
            return sd_reader__refuse(r, req, -EOPNOTSUPP,
                                     "%s: O_DIRECT read refused: the file system reports no "
                                     "direct I/O for this file (statx dio alignment 0)",
                                     name);
        *off_align_p = sx.stx_dio_offset_align;
        *mem_align_p = sx.stx_dio_mem_align;
        return 0;
    }
    if (rc == 0 && S_ISBLK(sx.stx_mode)) {
        int lbs = 0;
        if (ioctl(fd, BLKSSZGET, &lbs) == 0 && lbs > 0) {
            *off_align_p = (uint32_t)lbs;
            *mem_align_p = (uint32_t)lbs;
            return 0;
        }
    }
    if (atomic_exchange(&r->dio_align_logged, 1) == 0)
        sd_reader__log(r,
                       "%s: statx reports no direct-I/O alignment (kernel before 6.1, or the "
                       "file system does not say); assuming 4096 for offsets, lengths and "
                       "buffers",
                       name);
    *off_align_p = 4096;
    *mem_align_p = 4096;
    return 0;
}

/* Gets an O_DIRECT descriptor for @q and checks @q against its alignment. */
static int sd_reader__direct_prepare(struct sd_reader *r, struct sd_reader__req *q)
{
    const struct sd_read_req *req = &q->r;
    char nbuf[32];
    const char *name = sd_reader__name(req, nbuf, sizeof(nbuf));
    int fl = fcntl(req->fd, F_GETFL);
    if (fl < 0)
        return sd_reader__refuse(r, req, -errno, "%s: fcntl(F_GETFL): %s", name, strerror(errno));
    if (!(fl & O_DIRECT)) {
        char proc[64];
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", req->fd);
        int fd = open(proc, O_RDONLY | O_DIRECT | O_CLOEXEC);
        if (fd < 0)
            return sd_reader__refuse(r, req, -errno,
                                     "%s: O_DIRECT read refused: reopening %s with O_DIRECT: %s",
                                     name, proc, strerror(errno));
        q->own_fd = fd;
        q->fd = fd;
    }
    uint32_t oa = 0, ma = 0;
    int rc = sd_reader__dio_align(r, req, q->fd, &oa, &ma);
    if (rc < 0)
        return rc;
    uint64_t off_rem = req->offset % oa, len_rem = req->len % oa;
    uint64_t buf_rem = (uintptr_t)req->buf % ma;
    if (off_rem || len_rem || buf_rem)
        return sd_reader__refuse(
            r, req, -EINVAL,
            "%s: O_DIRECT read refused: expected offset and length multiples "
            "of %" PRIu32 " and a buffer address multiple of %" PRIu32 ", found offset %" PRIu64
            " (remainder %" PRIu64 "), length %" PRIu64 " (remainder %" PRIu64
            "), buffer %p (remainder %" PRIu64 ")",
            name, oa, ma, req->offset, off_rem, req->len, len_rem, req->buf, buf_rem);
    if (r->chunk_size % oa || r->chunk_size % ma)
        return sd_reader__refuse(r, req, -EINVAL,
                                 "%s: O_DIRECT read refused: the reader's chunk size %zu is not "
                                 "a multiple of the file's alignment (offset %" PRIu32
                                 ", memory %" PRIu32 ")",
                                 name, r->chunk_size, oa, ma);
    return 0;
}

int sd_reader_submit(struct sd_reader *reader, const struct sd_read_req *req)
{
    if (!req)
        return sd_reader__refuse(reader, NULL, -EINVAL, "submit: expected a request, found NULL");
    char nbuf[32];
    const char *name = sd_reader__name(req, nbuf, sizeof(nbuf));
    if (!req->done)
        return sd_reader__refuse(reader, req, -EINVAL,
                                 "%s: submit: expected a completion callback, found NULL", name);
    if (req->fd < 0)
        return sd_reader__refuse(reader, req, -EINVAL,
                                 "%s: submit: expected a file descriptor, found %d", name, req->fd);
    if (req->len && !req->buf)
        return sd_reader__refuse(reader, req, -EINVAL,
                                 "%s: submit: expected a buffer for %" PRIu64 " bytes, found NULL",
                                 name, req->len);
    if (req->buf_len < req->len)
        return sd_reader__refuse(reader, req, -EINVAL,
                                 "%s: submit: expected a buffer of at least %" PRIu64
                                 " bytes, found %zu",
                                 name, req->len, req->buf_len);
    if (req->offset > (uint64_t)INT64_MAX || req->len > (uint64_t)INT64_MAX - req->offset)
        return sd_reader__refuse(reader, req, -EINVAL,
                                 "%s: submit: offset %" PRIu64 " + length %" PRIu64
                                 " exceeds the largest file offset",
                                 name, req->offset, req->len);
    if (req->flags & ~(unsigned)SD_READ_DIRECT)
        return sd_reader__refuse(reader, req, -EINVAL, "%s: submit: unknown flags 0x%x", name,
                                 req->flags);

    struct sd_reader__req *q = calloc(1, sizeof(*q));
    if (!q)
        return sd_reader__refuse(reader, req, -ENOMEM, "%s: submit: out of memory", name);
    q->r = *req;
    q->fd = req->fd;
    q->own_fd = -1;
    q->chunks = (req->len + reader->chunk_size - 1) / reader->chunk_size;
    atomic_init(&q->chunks_left, q->chunks);
    atomic_init(&q->bytes_done, 0);
    atomic_init(&q->result, 0);
    atomic_init(&q->eof_at, UINT64_MAX);
    if ((req->flags & SD_READ_DIRECT) || (reader->flags & SD_READER_DIRECT)) {
        int rc = sd_reader__direct_prepare(reader, q);
        if (rc < 0) {
            if (q->own_fd >= 0)
                close(q->own_fd);
            free(q);
            return rc;
        }
    }

    pthread_mutex_lock(&reader->lock);
    if (reader->queue_tail)
        reader->queue_tail->queue_next = q;
    else
        reader->queue_head = q;
    reader->queue_tail = q;
    reader->pending++;
    if (reader->idle) {
        if (q->chunks > 1)
            pthread_cond_broadcast(&reader->work_cv);
        else
            pthread_cond_signal(&reader->work_cv);
    }
    pthread_mutex_unlock(&reader->lock);
    return 0;
}

/* --- introspection --- */

void sd_reader_info_get(const struct sd_reader *reader, struct sd_reader_info *info_p)
{
    memset(info_p, 0, sizeof(*info_p));
    info_p->threads = reader->threads;
    info_p->queue_depth = reader->queue_depth;
    info_p->chunk_size = reader->chunk_size;
    info_p->uring = reader->uring;
    info_p->iowq_workers =
        reader->uring && reader->iowq_applied && reader->iowq_workers != SD_READER_IOWQ_KERNEL
            ? reader->iowq_workers
            : 0;
    info_p->fixed = reader->fixed;
    info_p->regions = reader->fixed ? reader->nregions : 0;
}

void sd_reader_stats_get(const struct sd_reader *reader, struct sd_reader_stats *stats_p)
{
    const struct sd_reader__counters *c = &reader->counters;
    stats_p->requests = atomic_load(&c->requests);
    stats_p->failed = atomic_load(&c->failed);
    stats_p->bytes = atomic_load(&c->bytes);
    stats_p->reads = atomic_load(&c->reads);
    stats_p->fixed_reads = atomic_load(&c->fixed_reads);
    stats_p->short_reads = atomic_load(&c->short_reads);
    stats_p->retries = atomic_load(&c->retries);
}
