/* ring-probe: the streaming path's GPU side in two shapes, side by side on
 * the same page-cache-hot files (issue #10, docs/streaming.md, "Where the
 * streaming path's time goes").
 *
 * Both shapes have the staging side of stagingd's rings: T threads, each
 * with a ring of N pinned slots of C bytes, read their files chunk by
 * chunk into the slots with pread, release-store each chunk's sequence
 * number into the slot's sequence word and, before reusing a slot, wait
 * for its done word (a short spin, then sleeps). They differ in who
 * queues the copies:
 *
 *   wait   the agent's shape today: every chunk's work is queued ahead on
 *          the ring's own stream, cuStreamWaitValue64 on the sequence word,
 *          the copy, cuStreamWriteValue64 of the done word; a ring's next
 *          file is queued once its thread starts the file before (depth 2).
 *   cpu    one dispatcher thread polls the rings' sequence words and
 *          queues each chunk's copy (and done word) as soon as it is
 *          stored, on K shared streams, joining up to G consecutive stored
 *          chunks of a file whose slots are adjacent into one copy: the GPU
 *          never waits on a word, and copies reach it in the order the
 *          chunks were read.
 *
 * The wait shape also runs with a host function (what the agent's answer to
 * a shard is) after each file's copies: on the ring's stream, where the
 * stream waits for a driver thread to run it before the next file's
 * copies, or on a side stream behind an event, where nothing waits for it.
 *
 * Beside them: "noread" variants (the threads store the sequence without
 * reading, so the protocol alone is timed), and the ceilings: one stream of
 * back-to-back copies from a pinned buffer, whole files and chunk-sized.
 * Each row's bytes on the GPU are checked on one file (copied back and
 * compared with the file). Prints one table last. Every CUresult is
 * checked. Needs a GPU; the files go under --dir (tmpfs, so they are in
 * the page cache) and are removed at the end. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_clock.h"
#include "bench_cuda.h"

#define CK(call) BENCH_CK("ring-probe", call)

static void die(const char *what)
{
    fprintf(stderr, "ring-probe: %s: %s\n", what, strerror(errno));
    exit(1);
}

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* ---- set-up ----------------------------------------------------------------- */

static struct {
    const char *dir;
    unsigned threads, slots, files;
    uint64_t chunk, file_bytes;
} cfg = {.dir = "/dev/shm/ring-probe", .threads = 16, .slots = 4, .chunk = 2u << 20,
         .file_bytes = 64u << 20};

static int *fds;
static uint64_t cpf; /* chunks per file */

struct ring {
    unsigned idx;
    unsigned char *slots; /* pinned, slots x chunk */
    uint64_t *seq, *done; /* host view of the mapped words */
    CUdeviceptr seq_dev, done_dev;
    CUdeviceptr img[2]; /* a file's image, two in turn */
    CUstream st;
    CUstream cst; /* the completions' side stream (--hostfn side) */
    CUevent ev;
    uint64_t nfiles;
    /* per run */
    bool read;
    uint64_t started;      /* files the thread began (the wait shape's queuer reads it) */
    uint64_t ns_wait, ns_read;
    uint64_t next_copy;    /* the cpu shape: the next sequence to copy */
};

static struct ring *rings;
static uint64_t rings_copies; /* the wait shape's copies in a run */
static uint64_t hostfns_run;  /* the completions that ran in a run */

/* Where the wait shape puts a completion (a host function, as the agent's
 * answer to a shard) after each file's copies: nowhere, on the ring's
 * stream, or on a side stream behind an event recorded on the ring's. */
enum hostfn { HOSTFN_NONE, HOSTFN_RING, HOSTFN_SIDE };

static void hostfn_count(void *arg)
{
    (void)arg;
    __atomic_add_fetch(&hostfns_run, 1, __ATOMIC_RELAXED);
}

static void files_make(void)
{
    if (mkdir(cfg.dir, 0700) < 0 && errno != EEXIST)
        die(cfg.dir);
    fds = calloc(cfg.files, sizeof(*fds));
    uint64_t *buf = malloc(4u << 20);
    if (!fds || !buf)
        die("out of memory");
    printf("writing %u file(s) of %" PRIu64 " MiB under %s ...\n", cfg.files, cfg.file_bytes >> 20,
           cfg.dir);
    for (unsigned f = 0; f < cfg.files; f++) {
        char path[512];
        snprintf(path, sizeof path, "%s/f%04u", cfg.dir, f);
        fds[f] = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fds[f] < 0)
            die(path);
        unlink(path); /* gone when the probe ends, however it ends */
        for (uint64_t off = 0; off < cfg.file_bytes; off += 4u << 20) {
            for (uint64_t i = 0; i < (4u << 20) / 8; i++)
                buf[i] = ((uint64_t)f << 40) ^ (off / 8 + i) * 0x9E3779B97F4A7C15ull;
            if (pwrite(fds[f], buf, 4u << 20, (off_t)off) != 4u << 20)
                die("writing a file");
        }
    }
    free(buf);
}

/* ---- the staging threads ----------------------------------------------------- */

static void slot_wait(const uint64_t *w, uint64_t want, uint64_t *ns)
{
    if ((int64_t)(__atomic_load_n(w, __ATOMIC_ACQUIRE) - want) >= 0)
        return;
    const uint64_t t0 = bench_now_ns();
    long sleep_ns = 1000;
    for (unsigned n = 0; (int64_t)(__atomic_load_n(w, __ATOMIC_ACQUIRE) - want) < 0; n++) {
        if (n < 512) {
            relax();
            continue;
        }
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        sleep_ns = sleep_ns * 2 > 100000 ? 100000 : sleep_ns * 2;
    }
    *ns += bench_now_ns() - t0;
}

static void *stage_main(void *arg)
{
    struct ring *r = arg;
    const uint64_t C = cfg.chunk, N = cfg.slots;
    uint64_t s = 0;
    for (uint64_t k = 0; k < r->nfiles; k++) {
        const int fd = fds[r->idx + k * cfg.threads];
        __atomic_store_n(&r->started, k + 1, __ATOMIC_RELEASE);
        for (uint64_t j = 0; j < cpf; j++) {
            s++;
            const uint64_t slot = s % N;
            if (s > N)
                slot_wait(&r->done[slot], s - N, &r->ns_wait);
            if (r->read) {
                const uint64_t t0 = bench_now_ns();
                if (pread(fd, r->slots + slot * C, C, (off_t)(j * C)) != (ssize_t)C)
                    die("pread");
                r->ns_read += bench_now_ns() - t0;
            }
            __atomic_store_n(&r->seq[slot], s, __ATOMIC_RELEASE);
        }
    }
    return NULL;
}

/* ---- the two shapes of the GPU side -------------------------------------------- */

/* wait: a ring's file k queued once its thread has begun file k - 1; with
 * @join > 1, runs of up to @join chunks whose slots are adjacent are one
 * copy behind the run's last word (one thread stores a ring's words in
 * order, so the last stored means all are). */
static void queue_waits(unsigned join, enum hostfn hf)
{
    const uint64_t C = cfg.chunk, N = cfg.slots;
    const uint64_t most = rings[0].nfiles;
    for (uint64_t k = 0; k < most; k++)
        for (unsigned t = 0; t < cfg.threads; t++) {
            struct ring *r = &rings[t];
            if (k >= r->nfiles)
                continue;
            while (k > 0 && __atomic_load_n(&r->started, __ATOMIC_ACQUIRE) < k)
                usleep(20);
            for (uint64_t j = 0; j < cpf;) {
                const uint64_t s = k * cpf + j + 1, slot = s % N;
                uint64_t n = 1;
                while (n < join && j + n < cpf && (s + n) % N != 0)
                    n++;
                const uint64_t last = s + n - 1;
                CK(cuStreamWaitValue64(r->st, r->seq_dev + 8 * (last % N), last,
                                       CU_STREAM_WAIT_VALUE_GEQ));
                CK(cuMemcpyHtoDAsync(r->img[k % 2] + j * C, r->slots + slot * C, n * C, r->st));
                for (uint64_t i = 0; i < n; i++)
                    CK(cuStreamWriteValue64(r->st, r->done_dev + 8 * ((s + i) % N), s + i, 0));
                rings_copies++;
                j += n;
            }
            if (hf == HOSTFN_RING) {
                CK(cuLaunchHostFunc(r->st, hostfn_count, NULL));
            } else if (hf == HOSTFN_SIDE) {
                CK(cuEventRecord(r->ev, r->st));
                CK(cuStreamWaitEvent(r->cst, r->ev, CU_EVENT_WAIT_DEFAULT));
                CK(cuLaunchHostFunc(r->cst, hostfn_count, NULL));
            }
        }
}

/* cpu: polls every ring, queues what is stored, joined up to @join chunks. */
static void dispatch(CUstream *sts, unsigned nst, unsigned join, uint64_t *copies_p)
{
    const uint64_t C = cfg.chunk, N = cfg.slots;
    unsigned left = cfg.threads, rr = 0;
    uint64_t copies = 0;
    while (left) {
        bool any = false;
        for (unsigned t = 0; t < cfg.threads; t++) {
            struct ring *r = &rings[t];
            const uint64_t total = r->nfiles * cpf, s = r->next_copy;
            if (s > total)
                continue;
            uint64_t n = 0;
            while (n < join && s + n <= total) {
                const uint64_t q = s + n, slot = q % N;
                if (n > 0 && (slot == 0 || (q - 1) % cpf == 0))
                    break; /* the slots wrap, or a new file begins */
                if ((int64_t)(__atomic_load_n(&r->seq[slot], __ATOMIC_ACQUIRE) - q) < 0)
                    break;
                n++;
            }
            if (!n)
                continue;
            any = true;
            CUstream st = sts[rr++ % nst];
            const uint64_t k = (s - 1) / cpf, j = (s - 1) % cpf, slot = s % N;
            CK(cuMemcpyHtoDAsync(r->img[k % 2] + j * C, r->slots + slot * C, n * C, st));
            for (uint64_t i = 0; i < n; i++)
                CK(cuStreamWriteValue64(st, r->done_dev + 8 * ((s + i) % N), s + i, 0));
            copies++;
            r->next_copy = s + n;
            if (r->next_copy > total)
                left--;
        }
        if (!any)
            relax();
    }
    *copies_p = copies;
}

/* ---- runs ------------------------------------------------------------------------- */

struct row {
    char name[48];
    double gbs, cpu_per_gb, read_pct, wait_pct;
    uint64_t copies;
    const char *bytes; /* "ok", "WRONG", or "-" (nothing was read) */
};

#define ROWS_PER_REPEAT 15
static struct row rows[3 * ROWS_PER_REPEAT];
static unsigned nrows;
static unsigned char *check_host;

/* Ring 0's last file, copied back and compared with the file. */
static bool check_ring0(void)
{
    struct ring *r = &rings[0];
    const uint64_t k = r->nfiles - 1;
    CK(cuMemcpyDtoH(check_host, r->img[k % 2], cfg.file_bytes));
    unsigned char *want = malloc(cfg.file_bytes);
    if (!want)
        die("out of memory");
    if (pread(fds[r->idx + k * cfg.threads], want, cfg.file_bytes, 0) != (ssize_t)cfg.file_bytes)
        die("pread");
    bool ok = memcmp(want, check_host, cfg.file_bytes) == 0;
    free(want);
    return ok;
}

static void words_reset(void)
{
    CK(cuCtxSynchronize());
    for (unsigned t = 0; t < cfg.threads; t++) {
        struct ring *r = &rings[t];
        memset(r->seq, 0, 8 * cfg.slots);
        memset(r->done, 0, 8 * cfg.slots);
        r->started = r->ns_wait = r->ns_read = 0;
        r->next_copy = 1;
    }
    CK(cuMemsetD8(rings[0].img[0], 0, cfg.file_bytes));
    CK(cuMemsetD8(rings[0].img[1], 0, cfg.file_bytes));
    CK(cuCtxSynchronize());
}

static void run_ring(const char *name, bool cpu_shape, bool read, unsigned nst, unsigned join,
                     enum hostfn hf)
{
    rings_copies = 0;
    hostfns_run = 0;
    static CUstream shared[8];
    for (unsigned i = 0; i < nst; i++)
        if (!shared[i])
            CK(cuStreamCreate(&shared[i], CU_STREAM_NON_BLOCKING));
    words_reset();
    pthread_t th[256];
    const double c0 = bench_cpu_seconds();
    const uint64_t t0 = bench_now_ns();
    for (unsigned t = 0; t < cfg.threads; t++) {
        rings[t].read = read;
        if (pthread_create(&th[t], NULL, stage_main, &rings[t]) != 0)
            die("pthread_create");
    }
    uint64_t copies = 0;
    if (cpu_shape)
        dispatch(shared, nst, join, &copies);
    else
        queue_waits(join, hf);
    for (unsigned t = 0; t < cfg.threads; t++)
        pthread_join(th[t], NULL);
    CK(cuCtxSynchronize());
    const double secs = (double)(bench_now_ns() - t0) / 1e9, cpu = bench_cpu_seconds() - c0;
    if (!cpu_shape)
        copies = rings_copies;
    struct row *w = &rows[nrows++];
    const double bytes = (double)cfg.files * (double)cfg.file_bytes;
    snprintf(w->name, sizeof w->name, "%s", name);
    w->gbs = bytes / secs / 1e9;
    w->cpu_per_gb = cpu / (bytes / 1e9);
    w->copies = copies;
    uint64_t rd = 0, wt = 0;
    for (unsigned t = 0; t < cfg.threads; t++) {
        rd += rings[t].ns_read;
        wt += rings[t].ns_wait;
    }
    w->read_pct = 100.0 * (double)rd / 1e9 / (secs * cfg.threads);
    w->wait_pct = 100.0 * (double)wt / 1e9 / (secs * cfg.threads);
    w->bytes = !read ? "-" : check_ring0() ? "ok" : "WRONG";
    if (hf != HOSTFN_NONE && __atomic_load_n(&hostfns_run, __ATOMIC_RELAXED) != cfg.files)
        w->bytes = "WRONG (completions)";
    printf("  %-32s %7.2f GB/s  reading %4.1f%%  waiting for slots %4.1f%%  bytes %s\n", w->name,
           w->gbs, w->read_pct, w->wait_pct, w->bytes);
}

/* One stream, back to back, from a pinned buffer holding ring 0's last file. */
static void run_h2d(const char *name, uint64_t piece)
{
    struct ring *r = &rings[0];
    words_reset();
    const uint64_t k = r->nfiles - 1;
    if (pread(fds[r->idx + k * cfg.threads], check_host, cfg.file_bytes, 0) !=
        (ssize_t)cfg.file_bytes)
        die("pread");
    const double c0 = bench_cpu_seconds();
    const uint64_t t0 = bench_now_ns();
    for (unsigned f = 0; f < cfg.files; f++)
        for (uint64_t off = 0; off < cfg.file_bytes; off += piece)
            CK(cuMemcpyHtoDAsync(r->img[k % 2] + off, check_host + off, piece, r->st));
    CK(cuCtxSynchronize());
    const double secs = (double)(bench_now_ns() - t0) / 1e9;
    struct row *w = &rows[nrows++];
    const double bytes = (double)cfg.files * (double)cfg.file_bytes;
    snprintf(w->name, sizeof w->name, "%s", name);
    w->gbs = bytes / secs / 1e9;
    w->cpu_per_gb = (bench_cpu_seconds() - c0) / (bytes / 1e9);
    w->copies = cfg.files * (cfg.file_bytes / piece);
    w->bytes = check_ring0() ? "ok" : "WRONG";
    printf("  %-32s %7.2f GB/s  bytes %s\n", w->name, w->gbs, w->bytes);
}

static uint64_t arg_u64(const char *flag, const char *v)
{
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno || end == v || *end || n == 0) {
        fprintf(stderr, "ring-probe: %s wants a positive integer, got '%s'\n", flag, v);
        exit(2);
    }
    return n;
}

int main(int argc, char **argv)
{
    if (bench_help_wanted(argc, argv)) {
        printf("usage: ring-probe [--gib G (4)] [--threads T (16)] [--slots N (4)] [--chunk-mib C "
               "(2)] [--dir D (/dev/shm/ring-probe)] [--repeat R (1)]\n"
               "  needs a GPU; docs/streaming.md says what the rows mean\n");
        return 0;
    }
    uint64_t gib = 4, repeat = 1; /* at most 3 */
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--gib"))
            gib = arg_u64(argv[i], argv[i + 1]);
        else if (!strcmp(argv[i], "--threads"))
            cfg.threads = (unsigned)arg_u64(argv[i], argv[i + 1]);
        else if (!strcmp(argv[i], "--slots"))
            cfg.slots = (unsigned)arg_u64(argv[i], argv[i + 1]);
        else if (!strcmp(argv[i], "--chunk-mib"))
            cfg.chunk = arg_u64(argv[i], argv[i + 1]) << 20;
        else if (!strcmp(argv[i], "--dir"))
            cfg.dir = argv[i + 1];
        else if (!strcmp(argv[i], "--repeat"))
            repeat = arg_u64(argv[i], argv[i + 1]);
        else {
            fprintf(stderr, "ring-probe: unknown option '%s' (--help)\n", argv[i]);
            return 2;
        }
    }
    if (cfg.threads > 256 || cfg.file_bytes % cfg.chunk || cfg.slots < 2 || repeat > 3) {
        fprintf(stderr, "ring-probe: want at most 256 threads, at least 2 slots, a chunk that "
                        "divides 64 MiB and at most 3 repeats\n");
        return 2;
    }
    cfg.files = (unsigned)((gib << 30) / cfg.file_bytes);
    cfg.files -= cfg.files % cfg.threads;
    if (cfg.files < cfg.threads) {
        fprintf(stderr, "ring-probe: %" PRIu64 " GiB is less than a file per thread\n", gib);
        return 2;
    }
    cpf = cfg.file_bytes / cfg.chunk;
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* As the agent does (device.c): streams waiting on words keep their own
     * hardware queues. */
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    bench_cuda_require("ring-probe");
    CUdevice dev;
    CUcontext ctx;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    files_make();
    rings = calloc(cfg.threads, sizeof(*rings));
    if (!rings)
        die("out of memory");
    uint64_t *words;
    CK(cuMemHostAlloc((void **)&words, 16ull * cfg.slots * cfg.threads, CU_MEMHOSTALLOC_DEVICEMAP));
    CUdeviceptr words_dev;
    CK(cuMemHostGetDevicePointer(&words_dev, words, 0));
    for (unsigned t = 0; t < cfg.threads; t++) {
        struct ring *r = &rings[t];
        r->idx = t;
        r->nfiles = cfg.files / cfg.threads;
        CK(cuMemHostAlloc((void **)&r->slots, cfg.slots * cfg.chunk, 0));
        r->seq = words + 2ull * cfg.slots * t;
        r->done = r->seq + cfg.slots;
        r->seq_dev = words_dev + 16ull * cfg.slots * t;
        r->done_dev = r->seq_dev + 8ull * cfg.slots;
        CK(cuMemAlloc(&r->img[0], cfg.file_bytes));
        CK(cuMemAlloc(&r->img[1], cfg.file_bytes));
        CK(cuStreamCreate(&r->st, CU_STREAM_NON_BLOCKING));
        CK(cuStreamCreate(&r->cst, CU_STREAM_NON_BLOCKING));
        CK(cuEventCreate(&r->ev, CU_EVENT_DISABLE_TIMING));
    }
    CK(cuMemHostAlloc((void **)&check_host, cfg.file_bytes, 0));
    printf("%u thread(s), %u slot(s) of %" PRIu64 " MiB each, %u file(s), %.1f GiB a run\n",
           cfg.threads, cfg.slots, cfg.chunk >> 20, cfg.files,
           (double)cfg.files * (double)cfg.file_bytes / (1u << 30));
    char name[48];
    for (uint64_t rep = 0; rep < repeat; rep++) {
        run_h2d("h2d 64 MiB copies", cfg.file_bytes);
        snprintf(name, sizeof name, "h2d %" PRIu64 " MiB copies", cfg.chunk >> 20);
        run_h2d(name, cfg.chunk);
        run_ring("wait (a stream a ring)", false, true, 0, 1, HOSTFN_NONE);
        run_ring("wait, host fn a file on it", false, true, 0, 1, HOSTFN_RING);
        run_ring("wait, host fn a file aside", false, true, 0, 1, HOSTFN_SIDE);
        run_ring("wait, noread", false, false, 0, 1, HOSTFN_NONE);
        run_ring("wait, join 2", false, true, 0, 2, HOSTFN_NONE);
        if (cfg.slots >= 8)
            run_ring("wait, join 4", false, true, 0, 4, HOSTFN_NONE);
        static const unsigned shapes[][2] = {{1, 1}, {2, 1}, {2, 2}, {4, 2}, {2, 4}, {4, 4}};
        for (unsigned i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            if (shapes[i][1] > cfg.slots / 2 && shapes[i][1] > 1)
                continue;
            snprintf(name, sizeof name, "cpu %u stream(s), join %u", shapes[i][0], shapes[i][1]);
            run_ring(name, true, true, shapes[i][0], shapes[i][1], HOSTFN_NONE);
        }
        run_ring("cpu 2 stream(s), join 2, noread", true, false, 2, 2, HOSTFN_NONE);
    }
    const double ceiling = rows[0].gbs;
    printf("\n| path | GB/s | x h2d 64 MiB | copies | CPU-s/GB | staging reading / waiting | "
           "bytes |\n| --- | --- | --- | --- | --- | --- | --- |\n");
    for (unsigned i = 0; i < nrows; i++)
        printf("| %s | %.2f | %.3f | %" PRIu64 " | %.3f | %.0f%% / %.0f%% | %s |\n", rows[i].name,
               rows[i].gbs, rows[i].gbs / ceiling, rows[i].copies, rows[i].cpu_per_gb,
               rows[i].read_pct, rows[i].wait_pct, rows[i].bytes);
    bool bad = false;
    for (unsigned i = 0; i < nrows; i++)
        bad |= !strcmp(rows[i].bytes, "WRONG");
    return bad ? 1 : 0;
}
