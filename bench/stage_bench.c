/* stage-bench: how fast the staging reader copies a page-cache-hot file (or
 * the payloads of a shard store) into PINNED pool memory, against the plain
 * baseline: the same chunks read with pread by the same number of threads
 * into anonymous memory. One run measures every thread count asked for and
 * prints a table of medians (docs/staging-reads.md). One file over 800 lines
 * on purpose: a benchmark read and run as a whole, with no code of its own
 * worth sharing (it uses only the pool, reader and shard public headers). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "base/parse.h"
#include "lease/client.h"
#include "stagingd/reader.h"
#include "stagingd/shard.h"

#define MIB ((uint64_t)1 << 20)
#define GIB ((uint64_t)1 << 30)
#define MAX_THREAD_COUNTS 32
#define MAX_REPEATS 101

/* One contiguous range to stage: a piece of the file, or a shard payload. */
struct extent {
    int fd;
    uint64_t off, len;
    const char *path;
    struct sd_shard *shard;     /* store mode */
    struct leasec_pool_buf buf; /* its pool buffer */
    uint64_t anon_off;          /* its place in the anonymous buffer */
};

struct bench {
    /* options */
    const char *file, *store, *csv;
    uint64_t create_size, piece, chunk;
    unsigned threads[MAX_THREAD_COUNTS], nthreads;
    unsigned repeat, qd, iowq;
    enum sd_reader_fixed fixed;
    int compare, check;
    /* state */
    int file_fd;
    struct sd_store *st;
    struct extent *ext;
    size_t next;
    uint64_t total;
    struct leasec_pool *pool;
    char *anon;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "stage-bench: %s: %s\n", what, strerror(rc < 0 ? -rc : rc));
    exit(1);
}

static void usage(FILE *to)
{
    fprintf(to,
            "usage: stage-bench (--file PATH [--size SIZE] | --store DIR) [options]\n"
            "  --file PATH       stage this file (with --size: created or rewritten with\n"
            "                    random bytes unless it already has that size)\n"
            "  --store DIR       stage every shard payload of a store ('stagingd gen')\n"
            "  --threads LIST    thread counts, e.g. 1,4,8,16 (default 1,2,4,...,cores)\n"
            "  --repeat N        timed runs per thread count and method (default 3; median)\n"
            "  --qd N            reads in flight per ring (default %u)\n"
            "  --chunk SIZE      bytes per read, both methods (default 1MiB)\n"
            "  --piece SIZE      file mode: bytes per request and pool buffer (default 64MiB)\n"
            "  --fixed on|off    our reader with or without registered buffers (default:\n"
            "                    the reader's default)\n"
            "  --iowq N|kernel   io-wq workers per ring for reads the kernel punts, e.g. on\n"
            "                    tmpfs (default: the reader's, %u; kernel: no bound)\n"
            "  --compare         also time our reader with the other --fixed setting and\n"
            "                    pread into the same pool memory\n"
            "  --csv PATH        write the table as CSV\n"
            "  --no-check        skip comparing staged bytes with the baseline's\n"
            "SIZE takes K, M, G, KiB, MiB, GiB (powers of 1024).\n",
            SD_READER_QUEUE_DEPTH_DEFAULT, SD_READER_IOWQ_WORKERS_DEFAULT);
}

static int parse_threads(struct bench *b, const char *s)
{
    b->nthreads = 0;
    while (*s) {
        char *end;
        unsigned long v = strtoul(s, &end, 10);
        if (end == s || v == 0 || v > SD_READER_THREADS_MAX || b->nthreads == MAX_THREAD_COUNTS)
            return -EINVAL;
        b->threads[b->nthreads++] = (unsigned)v;
        s = end;
        if (*s == ',')
            s++;
        else if (*s)
            return -EINVAL;
    }
    return b->nthreads ? 0 : -EINVAL;
}

static void parse_args(struct bench *b, int argc, char **argv)
{
    enum {
        O_FILE = 256,
        O_STORE,
        O_SIZE,
        O_THREADS,
        O_REPEAT,
        O_QD,
        O_CHUNK,
        O_PIECE,
        O_FIXED,
        O_COMPARE,
        O_CSV,
        O_NOCHECK,
        O_IOWQ,
        O_HELP
    };
    static const struct option opts[] = {{"file", required_argument, NULL, O_FILE},
                                         {"store", required_argument, NULL, O_STORE},
                                         {"size", required_argument, NULL, O_SIZE},
                                         {"threads", required_argument, NULL, O_THREADS},
                                         {"repeat", required_argument, NULL, O_REPEAT},
                                         {"qd", required_argument, NULL, O_QD},
                                         {"chunk", required_argument, NULL, O_CHUNK},
                                         {"piece", required_argument, NULL, O_PIECE},
                                         {"fixed", required_argument, NULL, O_FIXED},
                                         {"compare", no_argument, NULL, O_COMPARE},
                                         {"csv", required_argument, NULL, O_CSV},
                                         {"no-check", no_argument, NULL, O_NOCHECK},
                                         {"iowq", required_argument, NULL, O_IOWQ},
                                         {"help", no_argument, NULL, O_HELP},
                                         {NULL, 0, NULL, 0}};
    int o;
    uint64_t v;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case O_FILE:
            b->file = optarg;
            break;
        case O_STORE:
            b->store = optarg;
            break;
        case O_SIZE:
            if (base_parse_size_flags(optarg, BASE_PARSE_SIZE_STRICT, &b->create_size, NULL, 0) <
                    0 ||
                b->create_size == 0)
                goto bad;
            break;
        case O_THREADS:
            if (parse_threads(b, optarg) < 0)
                goto bad;
            break;
        case O_REPEAT:
            b->repeat = (unsigned)strtoul(optarg, NULL, 10);
            if (b->repeat < 1 || b->repeat > MAX_REPEATS)
                goto bad;
            break;
        case O_QD:
            b->qd = (unsigned)strtoul(optarg, NULL, 10);
            if (b->qd < 1 || b->qd > SD_READER_QUEUE_DEPTH_MAX)
                goto bad;
            break;
        case O_CHUNK:
            if (base_parse_size_flags(optarg, BASE_PARSE_SIZE_STRICT, &v, NULL, 0) < 0 || v == 0 ||
                v % SD_READER_CHUNK_ALIGN || v > SD_READER_CHUNK_MAX)
                goto bad;
            b->chunk = v;
            break;
        case O_PIECE:
            if (base_parse_size_flags(optarg, BASE_PARSE_SIZE_STRICT, &v, NULL, 0) < 0 || v == 0 ||
                v > 512 * MIB)
                goto bad;
            b->piece = v;
            break;
        case O_FIXED:
            if (strcmp(optarg, "on") == 0)
                b->fixed = SD_READER_FIXED_ON;
            else if (strcmp(optarg, "off") == 0)
                b->fixed = SD_READER_FIXED_OFF;
            else
                goto bad;
            break;
        case O_IOWQ:
            if (strcmp(optarg, "kernel") == 0) {
                b->iowq = SD_READER_IOWQ_KERNEL;
            } else {
                b->iowq = (unsigned)strtoul(optarg, NULL, 10);
                if (b->iowq < 1 || b->iowq > 1024)
                    goto bad;
            }
            break;
        case O_COMPARE:
            b->compare = 1;
            break;
        case O_CSV:
            b->csv = optarg;
            break;
        case O_NOCHECK:
            b->check = 0;
            break;
        case O_HELP:
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            exit(2);
        }
        continue;
    bad:
        fprintf(stderr, "stage-bench: bad value for --%s: '%s'\n", opts[o - O_FILE].name, optarg);
        usage(stderr);
        exit(2);
    }
    if (optind != argc || !b->file == !b->store || (b->create_size && !b->file)) {
        usage(stderr);
        exit(2);
    }
}

/* --- the data --- */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void file_create(const char *path, uint64_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        die(path, errno);
    size_t blk = 8 * MIB;
    uint64_t *buf = malloc(blk), seed = 0x57A6E5EEDull;
    if (!buf)
        die("creating the file", ENOMEM);
    double t0 = now_s();
    unsigned last = 0;
    for (uint64_t done = 0; done < size;) {
        for (size_t i = 0; i < blk / 8; i++)
            buf[i] = rng_next(&seed);
        size_t n = size - done < blk ? (size_t)(size - done) : blk;
        ssize_t w = write(fd, buf, n);
        if (w <= 0)
            die("writing the test file", w < 0 ? errno : EIO);
        done += (uint64_t)w;
        unsigned pct = (unsigned)(done * 100 / size);
        if (pct / 10 != last / 10 || done == size)
            fprintf(stderr, "\rstage-bench: writing %s: %3u%%", path, pct);
        last = pct;
    }
    fprintf(stderr, " (%.1f s)\n", now_s() - t0);
    free(buf);
    if (close(fd) < 0)
        die("closing the test file", errno);
}

static void extents_add(struct bench *b, int fd, uint64_t off, uint64_t len, const char *path,
                        struct sd_shard *shard)
{
    struct extent *e = realloc(b->ext, (b->next + 1) * sizeof(*e));
    if (!e)
        die("extents", ENOMEM);
    b->ext = e;
    e = &b->ext[b->next++];
    memset(e, 0, sizeof(*e));
    e->fd = fd;
    e->off = off;
    e->len = len;
    e->path = path;
    e->shard = shard;
    e->anon_off = b->total;
    b->total += len;
}

static void data_open(struct bench *b)
{
    char err[SD_ERR_LEN];
    if (b->file) {
        struct stat sb;
        if (b->create_size && (stat(b->file, &sb) < 0 || (uint64_t)sb.st_size != b->create_size))
            file_create(b->file, b->create_size);
        else if (b->create_size)
            fprintf(stderr, "stage-bench: %s already has %" PRIu64 " bytes; reusing it\n", b->file,
                    b->create_size);
        b->file_fd = open(b->file, O_RDONLY | O_CLOEXEC);
        if (b->file_fd < 0 || fstat(b->file_fd, &sb) < 0)
            die(b->file, errno);
        if (sb.st_size == 0)
            die(b->file, EINVAL);
        for (uint64_t off = 0; off < (uint64_t)sb.st_size; off += b->piece) {
            uint64_t len =
                (uint64_t)sb.st_size - off < b->piece ? (uint64_t)sb.st_size - off : b->piece;
            extents_add(b, b->file_fd, off, len, b->file, NULL);
        }
        return;
    }
    int rc = sd_store_open(b->store, err, sizeof(err), &b->st);
    if (rc < 0) {
        fprintf(stderr, "stage-bench: %s\n", err);
        exit(1);
    }
    for (size_t i = 0; i < sd_store_count(b->st); i++) {
        struct sd_shard *s;
        rc = sd_store_shard_open(b->st, i, err, sizeof(err), &s);
        if (rc < 0) {
            fprintf(stderr, "stage-bench: %s\n", err);
            exit(1);
        }
        extents_add(b, sd_shard_fd(s), sd_shard_payload_offset(s), sd_shard_payload_len(s),
                    sd_shard_path(s), s);
    }
    if (b->total == 0)
        die("the store holds no payload", EINVAL);
}

static const char *fs_name(int fd)
{
    struct statfs sf;
    if (fstatfs(fd, &sf) < 0)
        return "unknown";
    switch ((unsigned long)sf.f_type) {
    case 0x01021994:
        return "tmpfs";
    case 0xEF53:
        return "ext2/3/4";
    case 0x58465342:
        return "xfs";
    case 0x9123683E:
        return "btrfs";
    case 0x794C7630:
        return "overlayfs";
    default:
        return "other";
    }
}

/* Fraction of the extents' pages in the page cache. */
static double resident_fraction(const struct bench *b)
{
    long page = sysconf(_SC_PAGESIZE);
    uint64_t in = 0, all = 0;
    for (size_t i = 0; i < b->next; i++) {
        const struct extent *e = &b->ext[i];
        uint64_t start = e->off & ~((uint64_t)page - 1), len = e->off + e->len - start;
        void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, e->fd, (off_t)start);
        if (m == MAP_FAILED)
            return -1;
        size_t pages = (size_t)((len + (uint64_t)page - 1) / (uint64_t)page);
        unsigned char *vec = malloc(pages);
        if (vec && mincore(m, len, vec) == 0)
            for (size_t p = 0; p < pages; p++)
                in += vec[p] & 1;
        all += pages;
        free(vec);
        munmap(m, len);
    }
    return all ? (double)in / (double)all : 0;
}

/* --- the pool --- */

/* jemalloc's size class for a large request: 4 classes per doubling. */
static uint64_t je_usize(uint64_t s)
{
    uint64_t x = (s + 4095) & ~(uint64_t)4095;
    if (x <= 16384)
        return x;
    unsigned lg = 63 - (unsigned)__builtin_clzll(x - 1);
    uint64_t delta = (uint64_t)1 << (lg - 2);
    return (x + delta - 1) & ~(delta - 1);
}

/* PINNED bytes that hold every extent's buffer, packed first-fit into 1 GiB
 * segments as the pool's arena will (plus jemalloc's one-page pad). */
static uint64_t pool_bytes_needed(const struct bench *b, uint64_t slack)
{
    uint64_t used[4096] = {0};
    unsigned nseg = 0;
    for (size_t i = 0; i < b->next; i++) {
        uint64_t need = je_usize(b->ext[i].len) + 4096;
        unsigned k = 0;
        while (k < nseg && used[k] + need > GIB)
            k++;
        if (k == nseg) {
            if (nseg == 4096)
                die("the data is too large for this benchmark", E2BIG);
            nseg++;
        }
        used[k] += need;
    }
    /* A size jemalloc grows by (1, 1.25, 1.5 or 1.75 x 2^k) is carved as one extent. */
    uint64_t last = je_usize(used[nseg - 1] + slack);
    last = (last + 2 * MIB - 1) & ~(2 * MIB - 1);
    return (uint64_t)(nseg - 1) * GIB + last;
}

static void pool_log(void *ctx, int level, const char *subsys, const char *line)
{
    (void)level, (void)subsys;
    (void)ctx;
    fprintf(stderr, "stage-bench: pool: %s\n", line);
}

static void pool_setup(struct bench *b)
{
    for (unsigned attempt = 0; attempt < 4; attempt++) {
        struct leasec_pool_config c;
        int rc = leasec_pool_config_default(&c);
        if (rc < 0)
            die("leasec_pool_config_default", rc);
        memset(c.class_bytes, 0, sizeof(c.class_bytes));
        c.class_bytes[LT_CLASS_PINNED] = pool_bytes_needed(b, 2 * MIB + attempt * GIB);
        c.segment_bytes = GIB;
        c.log = (struct leasec_log){pool_log, NULL, LEASEC_LOG_DEBUG};
        double t0 = now_s();
        rc = leasec_pool_create(&c, &b->pool);
        if (rc < 0)
            die("creating the staging pool (PINNED class)", rc);
        size_t i = 0;
        for (; i < b->next; i++)
            if (leasec_pool_alloc(b->pool, LT_CLASS_PINNED, b->ext[i].len, &b->ext[i].buf) < 0)
                break;
        if (i == b->next) {
            fprintf(stderr,
                    "stage-bench: pool: PINNED %.2f GiB in %u segments, %zu buffers "
                    "(created and populated in %.2f s)\n",
                    (double)c.class_bytes[LT_CLASS_PINNED] / (double)GIB,
                    leasec_pool_segment_count(b->pool), b->next, now_s() - t0);
            return;
        }
        fprintf(stderr, "stage-bench: pool: buffer %zu of %zu did not fit; retrying larger\n",
                i + 1, b->next);
        leasec_pool_destroy(b->pool);
        b->pool = NULL;
    }
    die("sizing the staging pool", ENOMEM);
}

/* --- the baseline: pread on plain threads --- */

struct chunk {
    int fd;
    uint64_t off;
    uint32_t len;
    char *dst;
};

struct pread_run {
    struct chunk *chunks;
    size_t n;
    atomic_size_t next;
    atomic_int failed;
    pthread_barrier_t start;
};

static void *pread_worker(void *arg)
{
    struct pread_run *run = arg;
    pthread_barrier_wait(&run->start);
    for (;;) {
        size_t i = atomic_fetch_add_explicit(&run->next, 1, memory_order_relaxed);
        if (i >= run->n)
            break;
        const struct chunk *c = &run->chunks[i];
        uint32_t done = 0;
        while (done < c->len) {
            ssize_t got = pread(c->fd, c->dst + done, c->len - done, (off_t)(c->off + done));
            if (got <= 0) {
                if (got < 0 && errno == EINTR)
                    continue;
                atomic_store(&run->failed, got < 0 ? errno : ENODATA);
                return NULL;
            }
            done += (uint32_t)got;
        }
    }
    return NULL;
}

/* The chunk list for a destination: anonymous memory, or the pool buffers. */
static struct chunk *chunks_build(const struct bench *b, int to_pool, size_t *n_p)
{
    size_t n = 0;
    for (size_t i = 0; i < b->next; i++)
        n += (size_t)((b->ext[i].len + b->chunk - 1) / b->chunk);
    struct chunk *c = calloc(n, sizeof(*c));
    if (!c)
        die("chunk list", ENOMEM);
    size_t k = 0;
    for (size_t i = 0; i < b->next; i++) {
        const struct extent *e = &b->ext[i];
        char *base = to_pool ? (char *)e->buf.base : b->anon + e->anon_off;
        for (uint64_t rel = 0; rel < e->len; rel += b->chunk) {
            c[k].fd = e->fd;
            c[k].off = e->off + rel;
            c[k].len = (uint32_t)(e->len - rel < b->chunk ? e->len - rel : b->chunk);
            c[k].dst = base + rel;
            k++;
        }
    }
    *n_p = n;
    return c;
}

static double pread_time(struct chunk *chunks, size_t n, unsigned threads)
{
    struct pread_run run = {.chunks = chunks, .n = n};
    atomic_init(&run.next, 0);
    atomic_init(&run.failed, 0);
    pthread_barrier_init(&run.start, NULL, threads + 1);
    pthread_t *tid = calloc(threads, sizeof(*tid));
    if (!tid)
        die("threads", ENOMEM);
    for (unsigned i = 0; i < threads; i++) {
        int rc = pthread_create(&tid[i], NULL, pread_worker, &run);
        if (rc)
            die("pthread_create", rc);
    }
    double t0 = now_s();
    pthread_barrier_wait(&run.start);
    for (unsigned i = 0; i < threads; i++)
        pthread_join(tid[i], NULL);
    double t = now_s() - t0;
    free(tid);
    pthread_barrier_destroy(&run.start);
    if (atomic_load(&run.failed))
        die("baseline pread", atomic_load(&run.failed));
    return t;
}

/* --- ours --- */

struct ours_run {
    atomic_int failures;
    atomic_int first_error;
};

static void ours_done(void *arg, int result, uint64_t bytes)
{
    struct ours_run *run = arg;
    (void)bytes;
    if (result < 0) {
        int none = 0;
        atomic_compare_exchange_strong(&run->first_error, &none, result);
        atomic_fetch_add(&run->failures, 1);
    }
}

static void reader_log(void *ctx, int level, const char *subsys, const char *line)
{
    (void)level, (void)subsys;
    (void)ctx;
    fprintf(stderr, "stage-bench: reader: %s\n", line);
}

static struct sd_reader *reader_make(const struct bench *b, unsigned threads,
                                     enum sd_reader_fixed fixed, double *secs_p)
{
    struct sd_reader_config c = {
        .threads = threads,
        .queue_depth = b->qd,
        .chunk_size = (size_t)b->chunk,
        .fixed = fixed,
        .iowq_workers = b->iowq,
        .pool = b->pool,
        .log = {reader_log, NULL, BASE_LOG_DEBUG},
    };
    struct sd_reader *r;
    double t0 = now_s();
    int rc = sd_reader_create(&c, &r);
    if (rc < 0)
        die("sd_reader_create", rc);
    *secs_p = now_s() - t0;
    return r;
}

static double ours_time(const struct bench *b, struct sd_reader *r)
{
    struct ours_run run;
    atomic_init(&run.failures, 0);
    atomic_init(&run.first_error, 0);
    double t0 = now_s();
    for (size_t i = 0; i < b->next; i++) {
        const struct extent *e = &b->ext[i];
        struct sd_read_req q = {
            .fd = e->fd,
            .offset = e->off,
            .len = e->len,
            .buf = e->buf.base,
            .buf_len = e->buf.len,
            .path = e->path,
            .done = ours_done,
            .arg = &run,
        };
        int rc = sd_reader_submit(r, &q);
        if (rc < 0)
            die("sd_reader_submit", rc);
    }
    sd_reader_drain(r);
    double t = now_s() - t0;
    if (atomic_load(&run.failures))
        die("our reader failed a request", atomic_load(&run.first_error));
    return t;
}

/* The staged bytes equal the baseline's; shards also pass their checksums. */
static void check_staged(const struct bench *b)
{
    double t0 = now_s();
    for (size_t i = 0; i < b->next; i++) {
        const struct extent *e = &b->ext[i];
        if (memcmp(e->buf.base, b->anon + e->anon_off, e->len) != 0) {
            fprintf(stderr,
                    "stage-bench: CHECK FAILED: %s bytes %" PRIu64 "..%" PRIu64
                    " staged by the reader differ from pread's\n",
                    e->path, e->off, e->off + e->len);
            exit(1);
        }
        if (e->shard) {
            char err[SD_ERR_LEN];
            if (sd_shard_verify_mem(e->shard, e->buf.base, 0, e->len, err, sizeof(err), NULL) < 0) {
                fprintf(stderr, "stage-bench: CHECK FAILED: %s\n", err);
                exit(1);
            }
        }
    }
    fprintf(stderr, "stage-bench: check: staged bytes match pread's%s (%.1f s)\n",
            b->st ? " and every shard block checksum" : "", now_s() - t0);
}

/* --- the run --- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, unsigned n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct row {
    unsigned threads;
    double ours, pread, alt, pool_pread; /* GB/s medians */
    double ours_min, ours_max, pread_min, pread_max;
};

int main(int argc, char **argv)
{
    struct bench b = {.repeat = 3,
                      .qd = SD_READER_QUEUE_DEPTH_DEFAULT,
                      .chunk = SD_READER_CHUNK_DEFAULT,
                      .piece = 64 * MIB,
                      .check = 1,
                      .file_fd = -1};
    parse_args(&b, argc, argv);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (b.nthreads == 0)
        for (unsigned t = 1;
             t <= (unsigned)(cores > 0 ? cores : 1) && b.nthreads < MAX_THREAD_COUNTS; t *= 2)
            b.threads[b.nthreads++] = t;
    if (b.piece % b.chunk)
        b.piece = (b.piece + b.chunk - 1) / b.chunk * b.chunk;

    struct utsname u;
    uname(&u);
    data_open(&b);
    fprintf(stderr,
            "stage-bench: %s %s: %zu %s, %.2f GiB; chunks of %" PRIu64 " KiB, QD %u, %u repeats; "
            "%ld cores online, kernel %s; file system %s\n",
            b.file ? "file" : "store", b.file ? b.file : b.store, b.next,
            b.file ? "requests" : "shards", (double)b.total / (double)GIB, b.chunk >> 10, b.qd,
            b.repeat, cores, u.release, fs_name(b.ext[0].fd));

    b.anon = mmap(NULL, b.total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                  -1, 0);
    if (b.anon == MAP_FAILED)
        die("anonymous memory for the baseline", errno);
    pool_setup(&b);

    size_t n_anon, n_pool;
    struct chunk *c_anon = chunks_build(&b, 0, &n_anon);
    struct chunk *c_pool = chunks_build(&b, 1, &n_pool);

    /* Warm-up: bring every page into the page cache, then say how many are. */
    unsigned maxt = 1;
    for (unsigned i = 0; i < b.nthreads; i++)
        maxt = b.threads[i] > maxt ? b.threads[i] : maxt;
    double before = resident_fraction(&b);
    double tw = pread_time(c_anon, n_anon, maxt);
    double after = resident_fraction(&b);
    fprintf(stderr,
            "stage-bench: warm-up: %.2f GB/s with %u threads; page cache %.1f%% resident "
            "before, %.1f%% after\n",
            (double)b.total / tw / 1e9, maxt, before * 100, after * 100);
    if (after < 0.999)
        fprintf(stderr, "stage-bench: WARNING: the data is not fully page-cache-hot; the numbers "
                        "include storage reads\n");
    if (b.check)
        for (size_t i = 0; i < b.next; i++)
            memset(b.ext[i].buf.base, 0xA5, b.ext[i].len);

    struct row rows[MAX_THREAD_COUNTS];
    double s_ours[MAX_REPEATS], s_pread[MAX_REPEATS], s_alt[MAX_REPEATS], s_pool[MAX_REPEATS];
    const char *ours_kind = NULL, *alt_kind = NULL;
    int checked = 0;
    for (unsigned ti = 0; ti < b.nthreads; ti++) {
        unsigned t = b.threads[ti];
        double cs, cs_alt = 0;
        struct sd_reader *r = reader_make(&b, t, b.fixed, &cs), *alt = NULL;
        struct sd_reader_info info, ainfo;
        sd_reader_info_get(r, &info);
        ours_kind = !info.uring ? "pread fallback" : info.fixed ? "fixed buffers" : "plain buffers";
        if (b.compare) {
            enum sd_reader_fixed other = info.fixed ? SD_READER_FIXED_OFF : SD_READER_FIXED_ON;
            alt = reader_make(&b, t, other, &cs_alt);
            sd_reader_info_get(alt, &ainfo);
            alt_kind = !ainfo.uring  ? "pread fallback"
                       : ainfo.fixed ? "fixed buffers"
                                     : "plain buffers";
        }
        fprintf(stderr, "stage-bench: %2u threads: reader (%s, io-wq bound %s%u) ready in %.1f ms",
                t, ours_kind, info.iowq_workers ? "" : "kernel's/", info.iowq_workers, cs * 1e3);
        if (alt)
            fprintf(stderr, "; alternative (%s) in %.1f ms", alt_kind, cs_alt * 1e3);
        fprintf(stderr, "\n");

        for (unsigned rep = 0; rep < b.repeat; rep++) {
            s_ours[rep] = (double)b.total / ours_time(&b, r) / 1e9;
            s_pread[rep] = (double)b.total / pread_time(c_anon, n_anon, t) / 1e9;
            if (b.check && !checked) {
                check_staged(&b);
                checked = 1;
            }
            fprintf(stderr, "stage-bench: [%2u threads, run %u/%u] ours %.2f GB/s, pread %.2f GB/s",
                    t, rep + 1, b.repeat, s_ours[rep], s_pread[rep]);
            if (alt) {
                s_alt[rep] = (double)b.total / ours_time(&b, alt) / 1e9;
                s_pool[rep] = (double)b.total / pread_time(c_pool, n_pool, t) / 1e9;
                fprintf(stderr, ", ours (%s) %.2f GB/s, pread into pool %.2f GB/s", alt_kind,
                        s_alt[rep], s_pool[rep]);
            }
            fprintf(stderr, "\n");
        }
        struct sd_reader_stats st;
        sd_reader_stats_get(r, &st);
        if (st.failed || st.bytes != (uint64_t)b.repeat * b.total)
            die("reader statistics disagree with the bytes asked for", EIO);
        sd_reader_destroy(alt);
        sd_reader_destroy(r);

        struct row *w = &rows[ti];
        memset(w, 0, sizeof(*w));
        w->threads = t;
        w->ours = median(s_ours, b.repeat);
        w->ours_min = s_ours[0];
        w->ours_max = s_ours[b.repeat - 1];
        w->pread = median(s_pread, b.repeat);
        w->pread_min = s_pread[0];
        w->pread_max = s_pread[b.repeat - 1];
        if (alt) {
            w->alt = median(s_alt, b.repeat);
            w->pool_pread = median(s_pool, b.repeat);
        }
    }

    printf("\nstage-bench: %.2f GiB %s, median of %u; ours = staging reader (%s) into PINNED pool "
           "memory, pread = plain pread threads into anonymous memory\n",
           (double)b.total / (double)GIB, b.file ? "file" : "store payload", b.repeat, ours_kind);
    printf("threads | ours GB/s | pread GB/s | ratio");
    if (b.compare)
        printf(" | ours (%s) GB/s | pread->pool GB/s", alt_kind);
    printf("\n");
    int ratio_ok = 1, have16 = 0;
    double at16 = 0;
    for (unsigned i = 0; i < b.nthreads; i++) {
        const struct row *w = &rows[i];
        double ratio = w->ours / w->pread;
        ratio_ok &= ratio >= 0.95;
        if (w->threads == 16) {
            have16 = 1;
            at16 = w->ours;
        }
        printf("%7u | %9.2f | %10.2f | %5.3f", w->threads, w->ours, w->pread, ratio);
        if (b.compare)
            printf(" | %*.2f | %16.2f", (int)strlen(alt_kind) + 12, w->alt, w->pool_pread);
        printf("\n");
    }
    printf("goal ours >= 0.95x pread at every thread count: %s\n", ratio_ok ? "met" : "NOT met");
    if (have16)
        printf("goal ours >= 30 GB/s with 16 threads: %s (%.2f GB/s)\n",
               at16 >= 30 ? "met" : "NOT met", at16);

    if (b.csv) {
        FILE *f = fopen(b.csv, "w");
        if (!f)
            die(b.csv, errno);
        fprintf(f, "threads,ours_gbps,pread_gbps,ratio,ours_min,ours_max,pread_min,pread_max,"
                   "alt_gbps,pread_pool_gbps,ours_kind,alt_kind,bytes,repeats,chunk,qd\n");
        for (unsigned i = 0; i < b.nthreads; i++) {
            const struct row *w = &rows[i];
            fprintf(f,
                    "%u,%.3f,%.3f,%.4f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%s,%s,%" PRIu64 ",%u,%" PRIu64
                    ",%u\n",
                    w->threads, w->ours, w->pread, w->ours / w->pread, w->ours_min, w->ours_max,
                    w->pread_min, w->pread_max, w->alt, w->pool_pread, ours_kind,
                    alt_kind ? alt_kind : "", b.total, b.repeat, b.chunk, b.qd);
        }
        if (fclose(f) != 0)
            die(b.csv, errno);
        fprintf(stderr, "stage-bench: wrote %s\n", b.csv);
    }

    free(c_anon);
    free(c_pool);
    for (size_t i = 0; i < b.next; i++) {
        leasec_pool_free(b.pool, &b.ext[i].buf);
        sd_shard_close(b.ext[i].shard);
    }
    leasec_pool_destroy(b.pool);
    munmap(b.anon, b.total);
    free(b.ext);
    sd_store_close(b.st);
    if (b.file_fd >= 0)
        close(b.file_fd);
    return 0;
}
