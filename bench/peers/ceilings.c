/* peers-ceilings: the ceilings and the naive path of the peer benchmark
 * (bench/peers/README.md), each run as its own process by
 * scripts/device-peers.sh:
 *
 *   h2d           one pinned buffer copied to the GPU with cuMemcpyHtoD
 *   pread-reused  T threads pread the store into a small buffer each, reused (no GPU)
 *   pread-fresh   T threads pread the store into fresh, untouched store-sized memory (no GPU)
 *   naive         per file: malloc, pread, cuMemcpyHtoD into its device buffer, free
 *
 * Every timed run is followed, untimed, by its check: the GPU's bytes are
 * copied back and compared with the source byte for byte (h2d, naive); the
 * fresh memory is compared with the files (pread-fresh). The result is one
 * JSON line on stdout (and appended to --json FILE), the same fields the
 * Python peers write (peerlib.py). Every CUresult is checked.
 *
 * One file of about 830 lines, past the usual 800, so that a benchmark
 * program's four modes share one store reader, one thread harness and one
 * result writer with no header between them. */
#include <cuda.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "base/parse.h"

#define PC_MAX_RUNS 16
#define PC_MAX_THREADS 256

struct pc_file {
    char name[256];
    int fd;
    uint64_t size;
};

struct pc_opts {
    const char *mode, *store, *json, *id, *label;
    uint64_t size, buf;
    unsigned threads, repeat;
};

struct pc_run {
    double s, cpu_s;
};

struct pc_result {
    uint64_t bytes;
    unsigned files, nruns;
    struct pc_run runs[PC_MAX_RUNS];
    const char *group, *checked, *check;
    char settings[256];
};

static char pc_err[512];

static void pc_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void pc_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pc_err, sizeof pc_err, fmt, ap);
    va_end(ap);
    fprintf(stderr, "peers-ceilings: %s\n", pc_err);
}

/* Every driver call goes through here: the call's text and the error's
 * name are the message; the caller unwinds. */
static int pc_cu(CUresult r, const char *what)
{
    if (r == CUDA_SUCCESS)
        return 0;
    const char *name = NULL;
    cuGetErrorName(r, &name);
    pc_fail("%s: %s (%d)", what, name ? name : "?", (int)r);
    return -EIO;
}
#define CU(call) pc_cu((call), #call)

static double pc_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double pc_cpu(void)
{
    struct rusage self, kids;
    getrusage(RUSAGE_SELF, &self);
    getrusage(RUSAGE_CHILDREN, &kids);
    return (double)(self.ru_utime.tv_sec + self.ru_stime.tv_sec + kids.ru_utime.tv_sec +
                    kids.ru_stime.tv_sec) +
           (double)(self.ru_utime.tv_usec + self.ru_stime.tv_usec + kids.ru_utime.tv_usec +
                    kids.ru_stime.tv_usec) /
               1e6;
}

static int pc_pread_full(int fd, uint8_t *dst, uint64_t len, uint64_t off)
{
    uint64_t done = 0;
    while (done < len) {
        ssize_t got = pread(fd, dst + done, len - done, (off_t)(off + done));
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return got < 0 ? -errno : -EIO;
        done += (uint64_t)got;
    }
    return 0;
}

/* ---- the store: MANIFEST's shard names, opened */

static void pc_store_close(struct pc_file *files, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (files[i].fd >= 0)
            close(files[i].fd);
    free(files);
}

static int pc_store_open(const char *dir, struct pc_file **files_p, unsigned *n_p)
{
    char path[4096], line[1024];
    snprintf(path, sizeof path, "%s/MANIFEST", dir);
    FILE *m = fopen(path, "re");
    if (!m) {
        pc_fail("%s: %s", path, strerror(errno));
        return -errno;
    }
    struct pc_file *files = NULL;
    unsigned n = 0, cap = 0;
    int rc = 0, first = 1;
    while (fgets(line, sizeof line, m)) {
        line[strcspn(line, "\n")] = 0;
        if (first) {
            first = 0;
            if (strcmp(line, "stagingd-store 1") != 0) {
                pc_fail("%s: not a stagingd store (line 1: '%s')", path, line);
                rc = -EPROTO;
                break;
            }
            continue;
        }
        if (!line[0] || line[0] == '#')
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 256;
            struct pc_file *more = realloc(files, cap * sizeof *files);
            if (!more) {
                rc = -ENOMEM;
                break;
            }
            files = more;
        }
        struct pc_file *f = &files[n];
        f->fd = -1;
        if (sscanf(line, "%255s", f->name) != 1 || strchr(f->name, '/')) {
            pc_fail("%s: bad line '%s'", path, line);
            rc = -EPROTO;
            break;
        }
        n++;
        snprintf(path, sizeof path, "%s/%s", dir, f->name);
        f->fd = open(path, O_RDONLY | O_CLOEXEC);
        off_t end = f->fd >= 0 ? lseek(f->fd, 0, SEEK_END) : -1;
        if (end < 0) {
            pc_fail("%s: %s", path, strerror(errno));
            rc = -errno;
            break;
        }
        f->size = (uint64_t)end;
        snprintf(path, sizeof path, "%s/MANIFEST", dir);
    }
    fclose(m);
    if (rc == 0 && n == 0) {
        pc_fail("%s/MANIFEST lists no shards", dir);
        rc = -EPROTO;
    }
    if (rc) {
        pc_store_close(files, n);
        return rc;
    }
    *files_p = files;
    *n_p = n;
    return 0;
}

/* ---- T threads over pieces of the store */

enum pc_work { PC_READ_REUSED, PC_READ_INTO, PC_COMPARE };

struct pc_piece {
    int fd;
    uint64_t off, len, dst; /* dst: where in the region (READ_INTO, COMPARE) */
};

struct pc_pool {
    enum pc_work work;
    struct pc_piece *pieces;
    size_t npieces;
    uint8_t *region;
    uint64_t buf;
    atomic_size_t next;
    atomic_int err;
    atomic_uint_fast64_t bytes, mismatches;
    /* the gate: workers set up, then wait for `go` so the run is timed from one moment */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned ready;
    int go;
};

/* A worker that has set up says so, then waits for the gate to open. */
static void pc_gate_wait(struct pc_pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->ready++;
    pthread_cond_broadcast(&p->cv);
    while (!p->go)
        pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

/* Waits until `workers` have set up. */
static void pc_gate_ready(struct pc_pool *p, unsigned workers)
{
    pthread_mutex_lock(&p->mu);
    while (p->ready < workers)
        pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

static void pc_gate_open(struct pc_pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->go = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

static void *pc_worker(void *arg)
{
    struct pc_pool *p = arg;
    uint8_t *buf = NULL;
    if (p->work != PC_READ_INTO) {
        buf = aligned_alloc(4096, (p->buf + 4095) & ~(uint64_t)4095);
        if (buf)
            memset(buf, 0, p->buf); /* touched: a reused buffer stays in memory */
        else
            atomic_store(&p->err, -ENOMEM);
    }
    pc_gate_wait(p);
    for (;;) {
        size_t i = atomic_fetch_add(&p->next, 1);
        if (i >= p->npieces || atomic_load(&p->err))
            break;
        struct pc_piece *pc = &p->pieces[i];
        uint8_t *dst = p->work == PC_READ_INTO ? p->region + pc->dst : buf;
        int rc = pc_pread_full(pc->fd, dst, pc->len, pc->off);
        if (rc) {
            atomic_store(&p->err, rc);
            break;
        }
        if (p->work == PC_COMPARE && memcmp(buf, p->region + pc->dst, pc->len) != 0)
            atomic_fetch_add(&p->mismatches, 1);
        atomic_fetch_add(&p->bytes, pc->len);
    }
    free(buf);
    return NULL;
}

/* Cuts every file into pieces of at most `piece` bytes, laid end to end in
 * the region (file order). */
static int pc_pieces_make(const struct pc_file *files, unsigned n, uint64_t piece,
                          struct pc_piece **pieces_p, size_t *n_p)
{
    size_t count = 0;
    for (unsigned i = 0; i < n; i++)
        count += (files[i].size + piece - 1) / piece;
    struct pc_piece *pcs = calloc(count ? count : 1, sizeof *pcs);
    if (!pcs)
        return -ENOMEM;
    size_t k = 0;
    uint64_t dst = 0;
    for (unsigned i = 0; i < n; i++)
        for (uint64_t off = 0; off < files[i].size; off += piece) {
            uint64_t len = files[i].size - off < piece ? files[i].size - off : piece;
            pcs[k++] = (struct pc_piece){.fd = files[i].fd, .off = off, .len = len, .dst = dst};
            dst += len;
        }
    *pieces_p = pcs;
    *n_p = count;
    return 0;
}

/* Runs the pool's work on `threads` threads; the time and CPU from the
 * moment they are let go to the last one's end. */
static int pc_pool_run(struct pc_pool *p, unsigned threads, struct pc_run *run_p)
{
    pthread_t tids[PC_MAX_THREADS];
    unsigned started = 0;
    atomic_store(&p->next, 0);
    atomic_store(&p->err, 0);
    atomic_store(&p->bytes, 0);
    atomic_store(&p->mismatches, 0);
    p->go = 0;
    p->ready = 0;
    if (pthread_mutex_init(&p->mu, NULL) != 0)
        return -EAGAIN;
    if (pthread_cond_init(&p->cv, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        return -EAGAIN;
    }
    for (; started < threads; started++)
        if (pthread_create(&tids[started], NULL, pc_worker, p) != 0)
            break;
    if (started < threads) {
        pc_fail("pthread_create: only %u of %u threads", started, threads);
        atomic_store(&p->err, -EAGAIN); /* the started ones stop at once */
    }
    pc_gate_ready(p, started); /* every worker's buffer is set up: the clock starts now */
    double c0 = pc_cpu(), t0 = pc_now();
    pc_gate_open(p);
    for (unsigned i = 0; i < started; i++)
        pthread_join(tids[i], NULL);
    double t1 = pc_now(), c1 = pc_cpu();
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    int rc = atomic_load(&p->err);
    if (rc) {
        if (!pc_err[0])
            pc_fail("a read failed: %s", strerror(-rc));
        return rc;
    }
    *run_p = (struct pc_run){.s = t1 - t0, .cpu_s = c1 - c0};
    return 0;
}

/* PEERS_CORRUPT_TEST=1 spoils one byte of each run's result before its
 * check, so the self-test can see the check fail (bench/peers/selftest.sh). */
static int pc_corrupt_wanted(void)
{
    const char *v = getenv("PEERS_CORRUPT_TEST");
    return v && !strcmp(v, "1");
}

/* ---- the CUDA side */

static CUcontext pc_ctx;

static int pc_cuda_init(char *name, size_t len)
{
    CUdevice dev;
    if (CU(cuInit(0)) || CU(cuDeviceGet(&dev, 0)) || CU(cuDevicePrimaryCtxRetain(&pc_ctx, dev)) ||
        CU(cuCtxSetCurrent(pc_ctx)) || CU(cuDeviceGetName(name, (int)len, dev)))
        return -EIO;
    return 0;
}

static void pc_cuda_fini(void)
{
    CUdevice dev;
    if (pc_ctx && cuDeviceGet(&dev, 0) == CUDA_SUCCESS)
        cuDevicePrimaryCtxRelease(dev);
    pc_ctx = NULL;
}

/* Copies `len` bytes of device memory back through a pinned bounce buffer
 * and compares them with `want` (host memory); counts differing pieces. */
static int pc_compare_device(CUdeviceptr src, const uint8_t *want, uint64_t len, uint8_t *bounce,
                             uint64_t bounce_len, uint64_t *mismatches_p)
{
    for (uint64_t off = 0; off < len; off += bounce_len) {
        uint64_t n = len - off < bounce_len ? len - off : bounce_len;
        if (CU(cuMemcpyDtoH(bounce, src + off, n)))
            return -EIO;
        if (memcmp(bounce, want + off, n) != 0)
            (*mismatches_p)++;
    }
    return 0;
}

/* ---- the modes */

static int pc_h2d(const struct pc_opts *o, struct pc_result *res)
{
    char name[128];
    int rc = pc_cuda_init(name, sizeof name);
    uint8_t *host = NULL, *back = NULL;
    CUdeviceptr dev = 0;
    const uint64_t bounce = 64 << 20;
    if (rc)
        goto out;
    if ((rc = CU(cuMemHostAlloc((void **)&host, o->size, 0))) ||
        (rc = CU(cuMemHostAlloc((void **)&back, bounce, 0))) ||
        (rc = CU(cuMemAlloc(&dev, o->size))))
        goto out;
    for (uint64_t i = 0; i < o->size / 8; i++)
        ((uint64_t *)host)[i] = (i + 1) * 0x9E3779B97F4A7C15ull;
    if ((rc = CU(cuMemcpyHtoD(dev, host, o->size))) || (rc = CU(cuCtxSynchronize())))
        goto out; /* one untimed copy first */
    for (unsigned r = 0; r < o->repeat; r++) {
        if ((rc = CU(cuMemsetD8(dev, 0, o->size))) || (rc = CU(cuCtxSynchronize())))
            goto out;
        double c0 = pc_cpu(), t0 = pc_now();
        if ((rc = CU(cuMemcpyHtoD(dev, host, o->size))) || (rc = CU(cuCtxSynchronize())))
            goto out;
        res->runs[res->nruns++] = (struct pc_run){.s = pc_now() - t0, .cpu_s = pc_cpu() - c0};
        if (pc_corrupt_wanted() && (rc = CU(cuMemsetD8(dev + o->size / 3, 0xA5, 1))))
            goto out;
        uint64_t bad = 0;
        if ((rc = pc_compare_device(dev, host, o->size, back, bounce, &bad)))
            goto out;
        if (bad) {
            pc_fail("run %u: %" PRIu64 " piece(s) on the GPU differ from the pinned source", r + 1,
                    bad);
            rc = -EBADMSG;
            goto out;
        }
    }
    res->bytes = o->size;
    res->group = "ceiling";
    res->checked = "yes";
    res->check = "every byte copied back and compared with the source, each run";
    snprintf(res->settings, sizeof res->settings, "{\"size\": %" PRIu64 ", \"gpu\": \"%.80s\"}",
             o->size, name);
out:
    if (dev)
        cuMemFree(dev);
    if (back)
        cuMemFreeHost(back);
    if (host)
        cuMemFreeHost(host);
    pc_cuda_fini();
    return rc;
}

static int pc_pread(const struct pc_opts *o, struct pc_result *res, int fresh)
{
    struct pc_file *files = NULL;
    struct pc_piece *pieces = NULL;
    unsigned n = 0;
    size_t np = 0;
    int rc = pc_store_open(o->store, &files, &n);
    if (rc)
        return rc;
    if ((rc = pc_pieces_make(files, n, o->buf, &pieces, &np)))
        goto out;
    uint64_t total = 0;
    for (unsigned i = 0; i < n; i++)
        total += files[i].size;
    struct pc_pool pool = {.pieces = pieces, .npieces = np, .buf = o->buf};
    for (unsigned r = 0; r < o->repeat; r++) {
        uint8_t *region = NULL;
        if (fresh) {
            /* untouched anonymous memory: its page faults are part of the run */
            region = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (region == MAP_FAILED) {
                pc_fail("mmap of %" PRIu64 " bytes: %s", total, strerror(errno));
                rc = -ENOMEM;
                goto out;
            }
        }
        pool.work = fresh ? PC_READ_INTO : PC_READ_REUSED;
        pool.region = region;
        struct pc_run run;
        rc = pc_pool_run(&pool, o->threads, &run);
        if (rc == 0 && atomic_load(&pool.bytes) != total) {
            pc_fail("run %u read %" PRIu64 " of %" PRIu64 " bytes", r + 1,
                    (uint64_t)atomic_load(&pool.bytes), total);
            rc = -EIO;
        }
        if (rc == 0 && fresh) {
            struct pc_run unused;
            if (pc_corrupt_wanted())
                region[total / 3] ^= 0x5A;
            pool.work = PC_COMPARE;
            rc = pc_pool_run(&pool, o->threads, &unused);
            if (rc == 0 && atomic_load(&pool.mismatches)) {
                pc_fail("run %u: %" PRIu64 " piece(s) differ from the files", r + 1,
                        (uint64_t)atomic_load(&pool.mismatches));
                rc = -EBADMSG;
            }
        }
        if (region)
            munmap(region, total);
        if (rc)
            goto out;
        res->runs[res->nruns++] = run;
    }
    res->bytes = total;
    res->files = n;
    res->group = "ceiling";
    res->checked = fresh ? "host" : "n/a";
    res->check = fresh ? "no GPU: the memory compared with the files after each run"
                       : "no GPU, nothing kept: byte counts only";
    snprintf(res->settings, sizeof res->settings,
             "{\"threads\": %u, \"piece\": %" PRIu64 ", \"memory\": \"%s\"}", o->threads, o->buf,
             fresh ? "fresh mmap per run" : "one reused buffer per thread");
out:
    free(pieces);
    pc_store_close(files, n);
    return rc;
}

/* After a naive run: every device buffer copied back and compared with its
 * file, on T threads (each its own pinned bounce buffer and host buffer). */
struct pc_naive_check {
    const struct pc_file *files;
    const CUdeviceptr *dev;
    unsigned n;
    atomic_uint next;
    atomic_int err;
    atomic_uint_fast64_t mismatches;
    uint64_t max;
};

static void *pc_naive_check_worker(void *arg)
{
    struct pc_naive_check *c = arg;
    uint8_t *bounce = NULL, *want = malloc(c->max ? c->max : 1);
    uint64_t bad = 0;
    int rc = want ? 0 : -ENOMEM;
    if (rc == 0)
        rc = CU(cuCtxSetCurrent(pc_ctx));
    if (rc == 0)
        rc = CU(cuMemHostAlloc((void **)&bounce, 16 << 20, 0));
    while (rc == 0) {
        unsigned i = atomic_fetch_add(&c->next, 1);
        if (i >= c->n)
            break;
        rc = pc_pread_full(c->files[i].fd, want, c->files[i].size, 0);
        if (rc == 0)
            rc = pc_compare_device(c->dev[i], want, c->files[i].size, bounce, 16 << 20, &bad);
    }
    if (rc)
        atomic_store(&c->err, rc);
    atomic_fetch_add(&c->mismatches, bad);
    if (bounce)
        cuMemFreeHost(bounce);
    free(want);
    return NULL;
}

static int pc_naive_check_run(const struct pc_file *files, const CUdeviceptr *dev, unsigned n,
                              uint64_t max, unsigned threads, uint64_t *mismatches_p)
{
    struct pc_naive_check c = {.files = files, .dev = dev, .n = n, .max = max};
    pthread_t tids[PC_MAX_THREADS];
    unsigned started = 0;
    for (; started < threads; started++)
        if (pthread_create(&tids[started], NULL, pc_naive_check_worker, &c) != 0)
            break;
    for (unsigned i = 0; i < started; i++)
        pthread_join(tids[i], NULL);
    if (started == 0)
        return -EAGAIN;
    *mismatches_p = atomic_load(&c.mismatches);
    return atomic_load(&c.err);
}

static int pc_naive(const struct pc_opts *o, struct pc_result *res)
{
    struct pc_file *files = NULL;
    CUdeviceptr *dev = NULL;
    unsigned n = 0;
    char name[128];
    int rc = pc_store_open(o->store, &files, &n);
    if (rc)
        return rc;
    if ((rc = pc_cuda_init(name, sizeof name)))
        goto out;
    dev = calloc(n, sizeof *dev);
    if (!dev) {
        rc = -ENOMEM;
        goto out;
    }
    uint64_t total = 0, max = 0;
    for (unsigned i = 0; i < n; i++) {
        if ((rc = CU(cuMemAlloc(&dev[i], files[i].size))))
            goto out;
        total += files[i].size;
        max = files[i].size > max ? files[i].size : max;
    }
    for (unsigned r = 0; r < o->repeat; r++) {
        for (unsigned i = 0; i < n; i++)
            if ((rc = CU(cuMemsetD8(dev[i], 0, files[i].size))))
                goto out;
        if ((rc = CU(cuCtxSynchronize())))
            goto out;
        double c0 = pc_cpu(), t0 = pc_now();
        for (unsigned i = 0; i < n; i++) {
            uint8_t *buf = malloc(files[i].size);
            if (!buf) {
                rc = -ENOMEM;
                goto out;
            }
            rc = pc_pread_full(files[i].fd, buf, files[i].size, 0);
            if (rc == 0)
                rc = CU(cuMemcpyHtoD(dev[i], buf, files[i].size));
            free(buf);
            if (rc) {
                if (!pc_err[0])
                    pc_fail("%s: read: %s", files[i].name, strerror(-rc));
                goto out;
            }
        }
        if ((rc = CU(cuCtxSynchronize())))
            goto out;
        res->runs[res->nruns++] = (struct pc_run){.s = pc_now() - t0, .cpu_s = pc_cpu() - c0};
        if (pc_corrupt_wanted() &&
            (rc = CU(cuMemsetD8(dev[n / 2] + files[n / 2].size / 3, 0xA5, 1))))
            goto out;
        uint64_t bad = 0;
        if ((rc = pc_naive_check_run(files, dev, n, max, o->threads, &bad)))
            goto out;
        if (bad) {
            pc_fail("run %u: %" PRIu64 " piece(s) on the GPU differ from the files", r + 1, bad);
            rc = -EBADMSG;
            goto out;
        }
    }
    res->bytes = total;
    res->files = n;
    res->group = "naive";
    res->checked = "yes";
    res->check = "every device buffer copied back and compared with its file, each run";
    snprintf(res->settings, sizeof res->settings,
             "{\"memory\": \"malloc per file (pageable)\", \"gpu\": \"%.80s\"}", name);
out:
    if (dev) {
        for (unsigned i = 0; i < n; i++)
            if (dev[i])
                cuMemFree(dev[i]);
        free(dev);
    }
    pc_cuda_fini();
    pc_store_close(files, n);
    return rc;
}

/* ---- the result line */

static void pc_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", *s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

static int pc_rate_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void pc_json_write(FILE *f, const struct pc_opts *o, const struct pc_result *res, int rc)
{
    fputs("{\"id\": ", f);
    pc_json_str(f, o->id);
    fputs(", \"label\": ", f);
    pc_json_str(f, o->label);
    fputs(", \"group\": ", f);
    pc_json_str(f, res->group ? res->group : (strcmp(o->mode, "naive") ? "ceiling" : "naive"));
    if (rc) {
        fputs(", \"ok\": false, \"error\": ", f);
        pc_json_str(f, pc_err[0] ? pc_err : strerror(-rc));
        if (rc == -EBADMSG)
            fputs(", \"checked\": \"MISMATCH\"", f);
        fputs("}\n", f);
        return;
    }
    double rates[PC_MAX_RUNS], best = 0, best_cpu = 0;
    fprintf(f, ", \"ok\": true, \"bytes\": %" PRIu64 ", \"files\": %u, \"checked\": ", res->bytes,
            res->files);
    pc_json_str(f, res->checked);
    fputs(", \"check\": ", f);
    pc_json_str(f, res->check);
    fprintf(f, ", \"settings\": %s, \"runs\": [", res->settings);
    for (unsigned i = 0; i < res->nruns; i++) {
        const struct pc_run *r = &res->runs[i];
        rates[i] = r->s > 0 ? (double)res->bytes / r->s / 1e9 : 0;
        if (rates[i] > best) {
            best = rates[i];
            best_cpu = r->cpu_s;
        }
        fprintf(f, "%s{\"s\": %.6f, \"gbps\": %.3f, \"cpu_s\": %.4f}", i ? ", " : "", r->s,
                rates[i], r->cpu_s);
    }
    qsort(rates, res->nruns, sizeof rates[0], pc_rate_cmp);
    unsigned mid = res->nruns / 2;
    double median = res->nruns % 2 ? rates[mid] : (rates[mid - 1] + rates[mid]) / 2;
    fprintf(f, "], \"gbps\": %.3f, \"gbps_median\": %.3f, \"cpu_s_per_gb\": %.4f}\n", best, median,
            best_cpu / ((double)res->bytes / 1e9));
}

/* ---- the command line */

static void pc_usage(FILE *f)
{
    fputs(
        "usage: peers-ceilings h2d|pread-reused|pread-fresh|naive --id ID --label TEXT\n"
        "         [--store DIR] [--size 1G] [--threads 16] [--buf 4M] [--repeat 3] [--json FILE]\n"
        "  h2d           pinned host buffer of --size to the GPU (cuMemcpyHtoD)\n"
        "  pread-reused  --threads threads pread the store in --buf pieces into one reused\n"
        "                buffer each (no GPU)\n"
        "  pread-fresh   the same into fresh, untouched store-sized memory (no GPU)\n"
        "  naive         per file: malloc, pread, cuMemcpyHtoD, free (one thread; --threads\n"
        "                threads check the GPU's bytes after each run)\n"
        "Prints one JSON result line (also appended to --json FILE); exit 0, or 1 on failure.\n",
        f);
}

static int pc_opts_parse(int argc, char **argv, struct pc_opts *o)
{
    *o = (struct pc_opts){.size = 1ull << 30, .buf = 4 << 20, .threads = 16, .repeat = 3};
    if (argc < 2)
        return -EINVAL;
    o->mode = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return -EINVAL;
        i++;
        uint64_t n = 0;
        if (!strcmp(k, "--store"))
            o->store = v;
        else if (!strcmp(k, "--json"))
            o->json = v;
        else if (!strcmp(k, "--id"))
            o->id = v;
        else if (!strcmp(k, "--label"))
            o->label = v;
        else if (!strcmp(k, "--size") && base_parse_size(v, &n, NULL, 0) == 0 && n > 0)
            o->size = n;
        else if (!strcmp(k, "--buf") && base_parse_size(v, &n, NULL, 0) == 0 && n > 0)
            o->buf = n;
        else if (!strcmp(k, "--threads") && base_parse_u64(v, 1, PC_MAX_THREADS, &n, NULL, 0) == 0)
            o->threads = (unsigned)n;
        else if (!strcmp(k, "--repeat") && base_parse_u64(v, 1, PC_MAX_RUNS, &n, NULL, 0) == 0)
            o->repeat = (unsigned)n;
        else
            return -EINVAL;
    }
    if (!o->id || !o->label)
        return -EINVAL;
    if (strcmp(o->mode, "h2d") != 0 && !o->store)
        return -EINVAL;
    return 0;
}

int main(int argc, char **argv)
{
    struct pc_opts o;
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        pc_usage(stdout);
        return 0;
    }
    if (pc_opts_parse(argc, argv, &o)) {
        pc_usage(stderr);
        return 2;
    }
    struct pc_result res = {0};
    int rc;
    if (!strcmp(o.mode, "h2d"))
        rc = pc_h2d(&o, &res);
    else if (!strcmp(o.mode, "pread-reused"))
        rc = pc_pread(&o, &res, 0);
    else if (!strcmp(o.mode, "pread-fresh"))
        rc = pc_pread(&o, &res, 1);
    else if (!strcmp(o.mode, "naive"))
        rc = pc_naive(&o, &res);
    else {
        pc_usage(stderr);
        return 2;
    }
    if (rc == 0 && res.nruns == 0) {
        pc_fail("no run");
        rc = -EINVAL;
    }
    pc_json_write(stdout, &o, &res, rc);
    fflush(stdout);
    if (o.json) {
        FILE *f = fopen(o.json, "ae");
        if (f) {
            pc_json_write(f, &o, &res, rc);
            fclose(f);
        } else {
            fprintf(stderr, "peers-ceilings: %s: %s\n", o.json, strerror(errno));
        }
    }
    return rc ? 1 : 0;
}
