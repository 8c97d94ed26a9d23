/* populate-bench: why the agent populates a segment's page tables by read
 * before registering it (lease/segment.c, lease__populate).
 *
 * A memfd of --size-gib GiB on 4 KiB pages is pre-faulted through one
 * mapping, as stagingd does; each row maps it afresh, as the agent does, and
 * times cuMemHostRegister(PORTABLE) after:
 *
 *   none            nothing: the pin faults every page in itself
 *   read, N thr     MADV_POPULATE_READ over N slices
 *   write, N thr    MADV_POPULATE_WRITE over N slices
 *   read, N thr, overlapped
 *                   MADV_POPULATE_READ by N threads taking 32 MiB stripes in
 *                   address order, started just before cuMemHostRegister and
 *                   running alongside it, so the pin walks in behind them
 *
 * and, as the ceiling, the register of the mapping that pre-faulted it.
 * Medians of --repeat runs, the order rotated each run. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "base/time.h"
#include "bench_cuda.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

static int cu_ok(CUresult r, const char *what)
{
    if (r == CUDA_SUCCESS)
        return 1;
    const char *name = NULL;
    cuGetErrorName(r, &name);
    fprintf(stderr, "populate-bench: %s failed: %s (%d)\n", what, name ? name : "?", (int)r);
    return 0;
}

struct slice {
    char *base;
    size_t len;
    int advice;
    int err;
    pthread_t thread;
    unsigned index, count; /* striped: this thread's number, and how many */
};

#define STRIPE ((size_t)32 << 20)

/* Stripes index, index + count, ... of [base, base + len): together the
 * threads advance front to back. */
static void *populate_striped(void *arg)
{
    struct slice *s = arg;
    for (size_t off = (size_t)s->index * STRIPE; off < s->len; off += (size_t)s->count * STRIPE) {
        size_t n = s->len - off < STRIPE ? s->len - off : STRIPE;
        if (madvise(s->base + off, n, s->advice) != 0 && !s->err)
            s->err = errno;
    }
    return NULL;
}

static void *populate_slice(void *arg)
{
    struct slice *s = arg;
    s->err = madvise(s->base, s->len, s->advice) == 0 ? 0 : errno;
    return NULL;
}

/* Populates [base, base+size) with @advice over @threads slices. */
static int populate(char *base, size_t size, int advice, unsigned threads)
{
    struct slice s[16];
    size_t step = (size / threads) & ~(size_t)((2u << 20) - 1);
    for (unsigned i = 0; i < threads; i++) {
        size_t off = step * i;
        s[i] = (struct slice){
            .base = base + off, .len = i + 1 == threads ? size - off : step, .advice = advice};
        if (pthread_create(&s[i].thread, NULL, populate_slice, &s[i]) != 0)
            return -EAGAIN;
    }
    int err = 0;
    for (unsigned i = 0; i < threads; i++) {
        pthread_join(s[i].thread, NULL);
        if (s[i].err && !err)
            err = -s[i].err;
    }
    return err;
}

struct variant {
    const char *name;
    int advice; /* 0: none; -1: the pre-faulting mapping itself */
    unsigned threads;
    int overlapped; /* striped threads run alongside the register */
};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (bench_help_wanted(argc, argv)) {
        printf("usage: populate-bench [--size-gib N] [--repeat N]\n");
        return 0;
    }
    size_t size = 4ull << 30;
    int repeat = 3;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--size-gib") == 0 && i + 1 < argc)
            size = (size_t)strtoull(argv[++i], NULL, 10) << 30;
        else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc)
            repeat = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: populate-bench [--size-gib N] [--repeat N]\n");
            return 2;
        }
    }
    if (size == 0 || repeat < 1 || repeat > 32) {
        fprintf(stderr, "populate-bench: expected a size > 0 and 1..32 repeats\n");
        return 2;
    }
    bench_cuda_require("populate-bench");
    CUdevice dev;
    CUcontext ctx;
    if (!cu_ok(cuInit(0), "cuInit") || !cu_ok(cuDeviceGet(&dev, 0), "cuDeviceGet") ||
        !cu_ok(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain") ||
        !cu_ok(cuCtxSetCurrent(ctx), "cuCtxSetCurrent"))
        return 1;

    int fd = memfd_create("populate-bench", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
        perror("populate-bench: memfd");
        return 1;
    }
    char *daemon = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (daemon == MAP_FAILED || madvise(daemon, size, MADV_POPULATE_WRITE) != 0) {
        perror("populate-bench: pre-faulting");
        return 1;
    }

    static const struct variant v[] = {
        {"same mapping (ceiling)", -1, 0, 0},
        {"fresh map: none", 0, 0, 0},
        {"fresh map: read, 1 thr", MADV_POPULATE_READ, 1, 0},
        {"fresh map: read, 4 thr", MADV_POPULATE_READ, 4, 0},
        {"fresh map: write, 1 thr", MADV_POPULATE_WRITE, 1, 0},
        {"fresh map: write, 4 thr", MADV_POPULATE_WRITE, 4, 0},
        {"fresh map: read, 4 thr, overlapped", MADV_POPULATE_READ, 4, 1},
        {"fresh map: read, 8 thr, overlapped", MADV_POPULATE_READ, 8, 1},
    };
    enum { NV = sizeof(v) / sizeof(v[0]) };
    double pop[NV][32], reg[NV][32];
    for (int r = 0; r < repeat; r++) {
        for (int k = 0; k < NV; k++) {
            int i = (k + r) % NV;
            char *p = daemon;
            if (v[i].advice != -1) {
                p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
                if (p == MAP_FAILED) {
                    perror("populate-bench: mmap");
                    return 1;
                }
            }
            double t0 = base_now_s();
            struct slice st[16];
            if (v[i].overlapped) {
                for (unsigned t = 0; t < v[i].threads; t++) {
                    st[t] = (struct slice){.base = p,
                                           .len = size,
                                           .advice = v[i].advice,
                                           .index = t,
                                           .count = v[i].threads};
                    if (pthread_create(&st[t].thread, NULL, populate_striped, &st[t]) != 0) {
                        fprintf(stderr, "populate-bench: pthread_create failed\n");
                        return 1;
                    }
                }
            } else if (v[i].advice > 0 && populate(p, size, v[i].advice, v[i].threads) != 0) {
                fprintf(stderr, "populate-bench: %s: madvise failed\n", v[i].name);
                return 1;
            }
            double t1 = base_now_s();
            if (!cu_ok(cuMemHostRegister(p, size, CU_MEMHOSTREGISTER_PORTABLE),
                       "cuMemHostRegister"))
                return 1;
            if (v[i].overlapped) {
                for (unsigned t = 0; t < v[i].threads; t++) {
                    pthread_join(st[t].thread, NULL);
                    if (st[t].err) {
                        fprintf(stderr, "populate-bench: %s: madvise: %s\n", v[i].name,
                                strerror(st[t].err));
                        return 1;
                    }
                }
            }
            double t2 = base_now_s();
            if (!cu_ok(cuMemHostUnregister(p), "cuMemHostUnregister"))
                return 1;
            if (p != daemon)
                munmap(p, size);
            pop[i][r] = t1 - t0;
            reg[i][r] = t2 - t1;
        }
    }
    double gb = (double)size / 1e9;
    printf("%-36s | populate ms  register ms  total ms | GB/s  vs ceiling\n",
           "4 KiB pages, medians");
    double ceiling = 0;
    for (int i = 0; i < NV; i++) {
        double tot[32];
        for (int r = 0; r < repeat; r++)
            tot[r] = pop[i][r] + reg[i][r];
        qsort(pop[i], (size_t)repeat, sizeof(double), cmp_double);
        qsort(reg[i], (size_t)repeat, sizeof(double), cmp_double);
        qsort(tot, (size_t)repeat, sizeof(double), cmp_double);
        double t = tot[repeat / 2];
        if (i == 0)
            ceiling = gb / t;
        printf("%-36s | %11.1f %12.1f %9.1f | %5.1f %8.2fx\n", v[i].name, pop[i][repeat / 2] * 1e3,
               reg[i][repeat / 2] * 1e3, t * 1e3, gb / t, gb / t / ceiling);
    }
    munmap(daemon, size);
    close(fd);
    cuDevicePrimaryCtxRelease(dev);
    return 0;
}
