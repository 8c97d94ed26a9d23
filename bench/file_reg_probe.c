/* file-reg-probe: how fast page-cache-hot shard files reach the GPU when the
 * page cache itself is registered, against the pinned copy ceiling, in one
 * run (issue #10: the staging copy is what holds the streaming path).
 *
 * T threads take files from a shared counter. For each file a thread opens
 * it, maps it PROT_READ, MAP_SHARED, registers the mapping with
 * cuMemHostRegister(READ_ONLY) and (modes "copy") queues one H2D copy of
 * it on the thread's own stream; it keeps two files in flight (registers
 * the next while the copy of the one before runs), then unregisters and
 * unmaps. Modes:
 *
 *   reg        register and unregister only: the pin rate
 *   copy       register, copy, unregister
 *   copy+pop   the same with MAP_POPULATE (page tables built by mmap)
 *   h2d        one thread, one stream, back-to-back 64 MiB copies from a
 *              cuMemHostAlloc buffer: the ceiling
 *
 * Each copy mode's bytes are checked on one file (copied back, compared).
 * Prints one table last. Every CUresult is checked. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_clock.h"
#include "bench_cuda.h"

#define CK(call) BENCH_CK("file-reg-probe", call)

static void die(const char *what)
{
    fprintf(stderr, "file-reg-probe: %s: %s\n", what, strerror(errno));
    exit(1);
}

enum mode { M_REG, M_COPY, M_COPY_POP, M_COUNT };
static const char *const mode_names[M_COUNT] = {"reg", "copy", "copy+pop"};

static struct {
    const char *dir;
    unsigned files;
    uint64_t file_bytes;
    CUcontext ctx;
} cfg;

struct worker {
    pthread_t tid;
    enum mode mode;
    CUstream st;
    CUdeviceptr img[2];
    uint64_t reg_ns;
    unsigned done;
};

static atomic_uint next_file;

static void file_path(unsigned i, char *buf, size_t len)
{
    snprintf(buf, len, "%s/f%05u", cfg.dir, i);
}

struct inflight {
    int fd;
    void *map;
    CUevent ev;
    int busy;
};

static void inflight_end(struct inflight *f)
{
    if (!f->busy)
        return;
    CK(cuEventSynchronize(f->ev));
    CK(cuMemHostUnregister(f->map));
    if (munmap(f->map, cfg.file_bytes) < 0)
        die("munmap");
    close(f->fd);
    f->busy = 0;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    CK(cuCtxSetCurrent(cfg.ctx));
    struct inflight fl[2] = {{.fd = -1}, {.fd = -1}};
    CK(cuEventCreate(&fl[0].ev, CU_EVENT_DISABLE_TIMING));
    CK(cuEventCreate(&fl[1].ev, CU_EVENT_DISABLE_TIMING));
    for (unsigned k = 0;; k++) {
        unsigned i = atomic_fetch_add(&next_file, 1);
        if (i >= cfg.files)
            break;
        struct inflight *f = &fl[k % 2];
        inflight_end(f);
        char path[512];
        file_path(i, path, sizeof path);
        f->fd = open(path, O_RDONLY | O_CLOEXEC);
        if (f->fd < 0)
            die(path);
        int flags = MAP_SHARED | (w->mode == M_COPY_POP ? MAP_POPULATE : 0);
        f->map = mmap(NULL, cfg.file_bytes, PROT_READ, flags, f->fd, 0);
        if (f->map == MAP_FAILED)
            die("mmap");
        uint64_t t0 = bench_now_ns();
        CK(cuMemHostRegister(f->map, cfg.file_bytes,
                             CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_READ_ONLY));
        w->reg_ns += bench_now_ns() - t0;
        if (w->mode != M_REG)
            CK(cuMemcpyHtoDAsync(w->img[k % 2], f->map, cfg.file_bytes, w->st));
        CK(cuEventRecord(f->ev, w->st));
        f->busy = 1;
        w->done++;
    }
    inflight_end(&fl[0]);
    inflight_end(&fl[1]);
    CK(cuEventDestroy(fl[0].ev));
    CK(cuEventDestroy(fl[1].ev));
    return NULL;
}

/* Copies @img back and compares it with file @i. */
static void check_file(CUdeviceptr img, unsigned i, const char *what)
{
    char path[512];
    file_path(i, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        die(path);
    void *want = mmap(NULL, cfg.file_bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (want == MAP_FAILED)
        die("mmap");
    void *got = malloc(cfg.file_bytes);
    if (!got)
        die("malloc");
    CK(cuMemcpyDtoH(got, img, cfg.file_bytes));
    if (memcmp(got, want, cfg.file_bytes) != 0) {
        fprintf(stderr, "file-reg-probe: %s: the GPU's bytes of %s differ from the file\n", what,
                path);
        exit(1);
    }
    free(got);
    munmap(want, cfg.file_bytes);
    close(fd);
}

struct result {
    double gbs, reg_gbs, cpu_per_gb;
};

static struct result run_mode(enum mode mode, unsigned threads)
{
    struct worker *w = calloc(threads, sizeof(*w));
    if (!w)
        die("calloc");
    for (unsigned t = 0; t < threads; t++) {
        w[t].mode = mode;
        CK(cuStreamCreate(&w[t].st, CU_STREAM_NON_BLOCKING));
        CK(cuMemAlloc(&w[t].img[0], cfg.file_bytes));
        CK(cuMemAlloc(&w[t].img[1], cfg.file_bytes));
    }
    atomic_store(&next_file, 0);
    double c0 = bench_cpu_seconds();
    uint64_t t0 = bench_now_ns();
    for (unsigned t = 0; t < threads; t++)
        if (pthread_create(&w[t].tid, NULL, worker_main, &w[t]) != 0)
            die("pthread_create");
    uint64_t reg_ns = 0;
    for (unsigned t = 0; t < threads; t++) {
        pthread_join(w[t].tid, NULL);
        reg_ns += w[t].reg_ns;
    }
    uint64_t ns = bench_now_ns() - t0;
    double c1 = bench_cpu_seconds();
    double gb = (double)cfg.files * (double)cfg.file_bytes / 1e9;
    struct result r = {gb / (ns / 1e9), gb / (reg_ns / 1e9), (c1 - c0) / gb};
    if (mode != M_REG) {
        /* Which file landed in which image depends on the race for the
         * counter, so the check sends one known file through the same path
         * again, alone, into worker 0's first image. */
        atomic_store(&next_file, cfg.files - 1);
        w[0].done = 0;
        worker_main(&w[0]);
        check_file(w[0].img[0], cfg.files - 1, mode_names[mode]);
    }
    for (unsigned t = 0; t < threads; t++) {
        CK(cuMemFree(w[t].img[0]));
        CK(cuMemFree(w[t].img[1]));
        CK(cuStreamDestroy(w[t].st));
    }
    free(w);
    return r;
}

static double h2d_ceiling(void)
{
    void *host;
    CUdeviceptr dev;
    CUstream st;
    CK(cuMemHostAlloc(&host, cfg.file_bytes, 0));
    memset(host, 0x5a, cfg.file_bytes);
    CK(cuMemAlloc(&dev, cfg.file_bytes));
    CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    CK(cuMemcpyHtoDAsync(dev, host, cfg.file_bytes, st));
    CK(cuStreamSynchronize(st));
    unsigned n = 64;
    uint64_t t0 = bench_now_ns();
    for (unsigned i = 0; i < n; i++)
        CK(cuMemcpyHtoDAsync(dev, host, cfg.file_bytes, st));
    CK(cuStreamSynchronize(st));
    uint64_t ns = bench_now_ns() - t0;
    CK(cuStreamDestroy(st));
    CK(cuMemFree(dev));
    CK(cuMemFreeHost(host));
    return (double)n * (double)cfg.file_bytes / 1e9 / (ns / 1e9);
}

static void files_make(void)
{
    if (mkdir(cfg.dir, 0700) < 0 && errno != EEXIST)
        die(cfg.dir);
    uint64_t *buf = malloc(cfg.file_bytes);
    if (!buf)
        die("malloc");
    for (unsigned i = 0; i < cfg.files; i++) {
        for (uint64_t j = 0; j < cfg.file_bytes / 8; j++)
            buf[j] = ((uint64_t)i << 40) ^ (j * 0x9e3779b97f4a7c15ull);
        char path[512];
        file_path(i, path, sizeof path);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
            die(path);
        if (write(fd, buf, cfg.file_bytes) != (ssize_t)cfg.file_bytes)
            die("write");
        close(fd);
    }
    free(buf);
}

static void files_remove(void)
{
    for (unsigned i = 0; i < cfg.files; i++) {
        char path[512];
        file_path(i, path, sizeof path);
        unlink(path);
    }
    rmdir(cfg.dir);
}

int main(int argc, char **argv)
{
    if (bench_help_wanted(argc, argv)) {
        printf("usage: file-reg-probe [--dir DIR] [--gib N] [--threads 1,2,4,8] [--repeat N]\n");
        return 0;
    }
    cfg.dir = "/dev/shm/file-reg-probe";
    cfg.file_bytes = 64ull << 20;
    uint64_t gib = 8;
    unsigned repeat = 2;
    const char *threads_list = "1,2,4,8";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--dir") == 0)
            cfg.dir = argv[i + 1];
        else if (strcmp(argv[i], "--gib") == 0)
            gib = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--threads") == 0)
            threads_list = argv[i + 1];
        else if (strcmp(argv[i], "--repeat") == 0)
            repeat = (unsigned)strtoul(argv[i + 1], NULL, 10);
        else {
            fprintf(stderr, "file-reg-probe: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    cfg.files = (unsigned)((gib << 30) / cfg.file_bytes);
    setvbuf(stdout, NULL, _IOLBF, 0);
    bench_cuda_require("file-reg-probe");
    CUdevice dev;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&cfg.ctx, dev));
    CK(cuCtxSetCurrent(cfg.ctx));
    int ro = 0;
    CK(cuDeviceGetAttribute(&ro, CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED, dev));
    printf("read-only host register supported: %d\n", ro);
    files_make();
    printf("%u files of %" PRIu64 " MiB in %s\n", cfg.files, cfg.file_bytes >> 20, cfg.dir);
    char table[8192];
    size_t tl = 0;
    tl += (size_t)snprintf(table + tl, sizeof table - tl, "%-10s %7s %5s %9s %9s %9s\n", "mode",
                           "threads", "pass", "GB/s", "reg GB/s", "CPU-s/GB");
    for (unsigned p = 0; p < repeat; p++) {
        double c = h2d_ceiling();
        tl += (size_t)snprintf(table + tl, sizeof table - tl, "%-10s %7u %5u %9.2f %9s %9s\n",
                               "h2d", 1u, p, c, "-", "-");
        char list[128];
        snprintf(list, sizeof list, "%s", threads_list);
        for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok;
             tok = strtok_r(NULL, ",", &save)) {
            unsigned t = (unsigned)strtoul(tok, NULL, 10);
            for (int m = 0; m < M_COUNT; m++) {
                struct result r = run_mode((enum mode)m, t);
                printf("%s t=%u pass %u: %.2f GB/s (register %.2f GB/s a thread), %.3f CPU-s/GB\n",
                       mode_names[m], t, p, r.gbs, r.reg_gbs, r.cpu_per_gb);
                tl += (size_t)snprintf(table + tl, sizeof table - tl,
                                       "%-10s %7u %5u %9.2f %9.2f %9.3f\n", mode_names[m], t, p,
                                       r.gbs, r.reg_gbs, r.cpu_per_gb);
            }
        }
    }
    files_remove();
    printf("\n%s", table);
    return 0;
}
