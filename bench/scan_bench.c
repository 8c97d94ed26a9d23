/* scan-bench: how fast a shard goes from pinned host memory through the
 * block checksum and the vector scan, against the plain copy ceiling.
 *
 * For f32 and f16 shards of several sizes, in one run:
 *   (a) copy       cuMemcpyHtoDAsync of the shard from pinned memory (the ceiling)
 *   (b) pinned     H2D in chunks double-buffered on two streams, each chunk
 *                  checksummed and scanned in device memory while the next copies
 *   (c) zc-scan    the scan alone reading the mapped host memory (zero-copy)
 *       zc-both    checksum, then scan, each over all of the mapped shard
 *       zc-chunk   checksum then scan per small chunk (two streams), so the scan
 *                  may find the chunk still in L2
 *   (d) dev-both / dev-scan / dev-cksum: the kernels alone on device-resident data
 * The host shard is a sealed-size memfd mapping registered PORTABLE|DEVICEMAP,
 * as the lease service registers a MAPPED segment. Every rate is shard bytes
 * over the median time (events around the region); every path's checksums are
 * compared with the C reference and every top-k with the f64 reference
 * (kr_scan_check) and with each other. The table comes last. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/parse.h"
#include "base/rand.h"
#include "bench_cuda.h"
#include "gpu/cu.h"
#include "gpu/ga.h"
#include "gpu/scan.h"
#include "kernels/blockhash_ref.h"
#include "kernels/checksum.h"
#include "kernels/scan.h"
#include "kernels/scan_ref.h"

#define MAX_SIZES 8
#define MAX_ROWS 256

__attribute__((format(printf, 1, 2), noreturn)) static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "scan-bench: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

#define CK(call)                                                                                   \
    do {                                                                                           \
        if (ga_cu_check((call), #call, __FILE__, __LINE__) < 0)                                    \
            die("%s failed (see the line above)", #call);                                          \
    } while (0)

/* ---- options ---- */

struct opts {
    size_t sizes[MAX_SIZES];
    int nsizes;
    uint32_t dim, k;
    size_t chunk, zc_chunk;
    uint32_t block;
    int reps; /* 0: by size */
    int types[2];
    int ntypes;
};

static size_t parse_size(const char *s)
{
    uint64_t v;
    char err[160];
    if (base_parse_size(s, &v, err, sizeof err) < 0)
        die("%s", err);
    return (size_t)v;
}

static void usage_to(FILE *f)
{
    fprintf(f, "usage: scan-bench [--sizes 16M,256M,2G] [--dim 1024] [--k 64] [--chunk 64M]\n"
               "                  [--zc-chunk 8M] [--block 256K] [--reps N] [--types f32,f16]\n");
}

static void usage(void)
{
    usage_to(stderr);
    exit(2);
}

static void opts_parse(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){
        .dim = 1024, .k = 64, .chunk = 64 << 20, .zc_chunk = 8 << 20, .block = 256 << 10};
    const char *sizes = "16M,256M,2G", *types = "f32,f16";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            usage();
        if (!strcmp(a, "--sizes"))
            sizes = v;
        else if (!strcmp(a, "--dim"))
            o->dim = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--k"))
            o->k = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--chunk"))
            o->chunk = parse_size(v);
        else if (!strcmp(a, "--zc-chunk"))
            o->zc_chunk = parse_size(v);
        else if (!strcmp(a, "--block"))
            o->block = (uint32_t)parse_size(v);
        else if (!strcmp(a, "--reps"))
            o->reps = atoi(v);
        else if (!strcmp(a, "--types"))
            types = v;
        else
            usage();
        i++;
    }
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", sizes);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (o->nsizes == MAX_SIZES)
            die("at most %d sizes", MAX_SIZES);
        o->sizes[o->nsizes++] = parse_size(t);
    }
    o->ntypes = 0;
    if (strstr(types, "f32"))
        o->types[o->ntypes++] = KN_SCAN_F32;
    if (strstr(types, "f16"))
        o->types[o->ntypes++] = KN_SCAN_F16;
    if (!o->nsizes || !o->ntypes || !o->dim || !o->k || o->k > KN_SCAN_MAX_K || !o->block ||
        o->block % 8)
        usage();
}

/* ---- CPU work on all cores ---- */

struct par {
    void (*fn)(void *ctx, int t, int nt);
    void *ctx;
    int t, nt;
};

static void *par_main(void *arg)
{
    struct par *p = arg;
    p->fn(p->ctx, p->t, p->nt);
    return NULL;
}

static void par_for(void (*fn)(void *, int, int), void *ctx)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = ncpu < 1 ? 1 : ncpu > 64 ? 64 : (int)ncpu;
    pthread_t th[64];
    struct par p[64];
    for (int t = 0; t < nt; t++) {
        p[t] = (struct par){fn, ctx, t, nt};
        if (pthread_create(&th[t], NULL, par_main, &p[t]) != 0)
            die("pthread_create failed");
    }
    for (int t = 0; t < nt; t++)
        pthread_join(th[t], NULL);
}

/* +-[0.125, 2), never zero. */
static float rng_float(uint64_t r)
{
    float mag = 0.125f + (float)(r >> 40) * (1.875f / 16777216.0f);
    return (r & 1) ? -mag : mag;
}

struct fill_ctx {
    unsigned char *p;
    size_t bytes;
    int type;
    uint64_t seed;
};

static void fill_part(void *arg, int t, int nt)
{
    struct fill_ctx *c = arg;
    const size_t elem = c->type == KN_SCAN_F32 ? 4 : 2, n = c->bytes / elem;
    size_t lo = n * (size_t)t / (size_t)nt, hi = n * (size_t)(t + 1) / (size_t)nt;
    uint64_t s = c->seed * 1000003u + (uint64_t)t;
    for (size_t i = lo; i < hi; i++) {
        uint64_t r = base_splitmix64(&s);
        if (c->type == KN_SCAN_F32) {
            float f = rng_float(r);
            memcpy(c->p + i * 4, &f, 4);
        } else {
            /* f16 +-[2^-3, 4): exponent field 12..16, any mantissa. */
            uint16_t h =
                (uint16_t)(((r & 1) << 15) | ((12 + (r >> 17) % 5) << 10) | ((r >> 1) & 0x3ff));
            memcpy(c->p + i * 2, &h, 2);
        }
    }
}

struct sums_ctx {
    const unsigned char *p;
    size_t bytes;
    uint32_t block;
    uint64_t *sums;
};

static void sums_part(void *arg, int t, int nt)
{
    struct sums_ctx *c = arg;
    size_t nb = c->bytes / c->block;
    size_t lo = nb * (size_t)t / (size_t)nt, hi = nb * (size_t)(t + 1) / (size_t)nt;
    if (hi > lo &&
        kr_block_checksums(c->p + lo * c->block, (hi - lo) * c->block, c->block, c->sums + lo) < 0)
        die("kr_block_checksums refused block size %u", c->block);
}

struct topk_ctx {
    const unsigned char *p;
    int type;
    uint64_t n;
    uint32_t dim, k;
    const float *q;
    struct kn_scan_hit *parts; /* 64 lists of k */
    size_t counts[64];
};

static void topk_part(void *arg, int t, int nt)
{
    struct topk_ctx *c = arg;
    uint64_t lo = c->n * (uint64_t)t / (uint64_t)nt, hi = c->n * (uint64_t)(t + 1) / (uint64_t)nt;
    const size_t rec = (size_t)c->dim * (c->type == KN_SCAN_F32 ? 4 : 2);
    struct kn_scan_hit *out = c->parts + (size_t)t * c->k;
    long got = kr_scan_topk(c->p + lo * rec, (uint32_t)c->type, hi - lo, c->dim, c->q, c->k, out);
    if (got < 0)
        die("kr_scan_topk: %ld", got);
    for (long i = 0; i < got; i++)
        out[i].index += lo;
    c->counts[t] = (size_t)got;
}

/* The f64 reference top-k of the first @n records, on all cores. */
static long ref_topk(const unsigned char *p, int type, uint64_t n, uint32_t dim, uint32_t k,
                     const float *q, struct kn_scan_hit *out)
{
    struct topk_ctx c = {p, type, n, dim, k, q, calloc(64 * (size_t)k, sizeof(*c.parts)), {0}};
    if (!c.parts)
        die("out of memory");
    par_for(topk_part, &c);
    const struct kn_scan_hit *lists[64];
    for (int t = 0; t < 64; t++)
        lists[t] = c.parts + (size_t)t * k;
    long m = kr_topk_merge(lists, c.counts, 64, NULL, k, out);
    free(c.parts);
    return m;
}

/* ---- the bench ---- */

struct bench {
    struct opts o;
    struct ga_device *dev;
    CUfunction k_checksum;
    CUstream st[2];
    CUevent ev_start, ev_join, ev_end;
    int memfd;
    unsigned char *host; /* max_bytes, registered PORTABLE|DEVICEMAP */
    CUdeviceptr host_d;
    size_t max_bytes;
    CUdeviceptr d_full, d_chunk[2], d_sums;
    uint64_t *ref_sums, *got_sums;
    float *q;
    struct ga_scan *scan[2];
    /* per type and size */
    int type;
    size_t unit, rec_bytes;
    struct kn_scan_hit ref[KN_SCAN_MAX_K], first_gpu[KN_SCAN_MAX_K];
    int have_first;
    long ref_count;
};

struct row {
    const char *path;
    int type;
    size_t bytes;
    double ms, gbs, ratio;
};
static struct row rows[MAX_ROWS];
static int nrows;

static size_t gcd_sz(size_t a, size_t b)
{
    while (b) {
        size_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static void checksum_launch(struct bench *b, CUdeviceptr data, size_t len, size_t sums_first,
                            CUstream st)
{
    CUdeviceptr sums = b->d_sums + sums_first * 8;
    unsigned long long len_arg = len;
    unsigned int bs = b->o.block;
    void *params[] = {&data, &len_arg, &bs, &sums};
    CK(cuLaunchKernel(b->k_checksum, (unsigned int)(len / bs), 1, 1, KN_CHECKSUM_THREADS, 1, 1, 0,
                      st, params, NULL));
}

static void scan_submit(struct bench *b, int s, CUdeviceptr data, size_t off, size_t len)
{
    if (ga_scan_submit(b->scan[s], data, len / b->rec_bytes, off / b->rec_bytes, b->st[s]) < 0)
        die("ga_scan_submit failed");
}

enum path {
    P_COPY,
    P_PINNED,
    P_ZC_SCAN,
    P_ZC_BOTH,
    P_ZC_CHUNK,
    P_DEV_BOTH,
    P_DEV_SCAN,
    P_DEV_CKSUM,
    P_COUNT
};
static const char *const path_names[P_COUNT] = {"(a) copy H2D",
                                                "(b) pinned: H2D+cksum+scan",
                                                "(c) zc: scan",
                                                "(c) zc: cksum,scan",
                                                "(c) zc: chunked cksum+scan",
                                                "(d) dev: cksum+scan",
                                                "(d) dev: scan",
                                                "(d) dev: cksum"};

static int path_checksums(enum path p)
{
    return p == P_PINNED || p == P_ZC_BOTH || p == P_ZC_CHUNK || p == P_DEV_BOTH ||
           p == P_DEV_CKSUM;
}

static int path_scans(enum path p)
{
    return p != P_COPY && p != P_DEV_CKSUM;
}

/* Queues path @p over the first @S bytes. */
static void path_enqueue(struct bench *b, enum path p, size_t S)
{
    switch (p) {
    case P_COPY:
        CK(cuMemcpyHtoDAsync(b->d_full, b->host, S, b->st[0]));
        break;
    case P_PINNED: {
        const size_t chunk = b->o.chunk / b->unit * b->unit;
        int c = 0;
        for (size_t off = 0; off < S; off += chunk, c++) {
            const size_t len = S - off < chunk ? S - off : chunk;
            const int s = c & 1;
            CK(cuMemcpyHtoDAsync(b->d_chunk[s], b->host + off, len, b->st[s]));
            checksum_launch(b, b->d_chunk[s], len, off / b->o.block, b->st[s]);
            scan_submit(b, s, b->d_chunk[s], off, len);
        }
        break;
    }
    case P_ZC_SCAN:
        scan_submit(b, 0, b->host_d, 0, S);
        break;
    case P_ZC_BOTH:
        checksum_launch(b, b->host_d, S, 0, b->st[0]);
        scan_submit(b, 0, b->host_d, 0, S);
        break;
    case P_ZC_CHUNK: {
        size_t chunk = b->o.zc_chunk / b->unit * b->unit;
        if (chunk == 0)
            chunk = b->unit;
        int c = 0;
        for (size_t off = 0; off < S; off += chunk, c++) {
            const size_t len = S - off < chunk ? S - off : chunk;
            const int s = c & 1;
            checksum_launch(b, b->host_d + off, len, off / b->o.block, b->st[s]);
            scan_submit(b, s, b->host_d + off, off, len);
        }
        break;
    }
    case P_DEV_BOTH:
        checksum_launch(b, b->d_full, S, 0, b->st[0]);
        scan_submit(b, 0, b->d_full, 0, S);
        break;
    case P_DEV_SCAN:
        scan_submit(b, 0, b->d_full, 0, S);
        break;
    case P_DEV_CKSUM:
        checksum_launch(b, b->d_full, S, 0, b->st[0]);
        break;
    default:
        break;
    }
}

/* Both scans' top-k merged, checked against the reference and the first
 * GPU result of this size. */
static void scan_results_check(struct bench *b, enum path p, size_t S, int rep)
{
    struct kn_scan_hit h[2][KN_SCAN_MAX_K], merged[KN_SCAN_MAX_K];
    size_t counts[2];
    for (int s = 0; s < 2; s++) {
        int rc = ga_scan_finish(b->scan[s], b->st[s], h[s]);
        if (rc < 0)
            die("ga_scan_finish: %d", rc);
        counts[s] = (size_t)rc;
    }
    const struct kn_scan_hit *lists[2] = {h[0], h[1]};
    long m = kr_topk_merge(lists, counts, 2, NULL, b->o.k, merged);
    const uint64_t n = S / b->rec_bytes;
    struct kr_scan_shard sh = {b->host, (uint32_t)b->type, b->o.dim, n, b->q};
    char why[1024] = "";
    double rel = 0;
    int rc = m < 0 ? (int)m
                   : kr_scan_check(&sh, b->o.k, b->ref, merged, (size_t)m, &rel, why, sizeof(why));
    if (rc != 0)
        die("%s, %zu bytes, rep %d: top-k refused by the f64 reference: %s (rc %d)", path_names[p],
            S, rep, why, rc);
    if (!b->have_first) {
        memcpy(b->first_gpu, merged, (size_t)m * sizeof(*merged));
        b->have_first = 1;
        printf("    top-k checked against f64: normwise rel err %.2e, best (%.6g, #%" PRIu64 ")\n",
               rel, (double)merged[0].score, merged[0].index);
    } else if (memcmp(b->first_gpu, merged, (size_t)m * sizeof(*merged)) != 0) {
        die("%s, %zu bytes, rep %d: top-k differs from the first GPU path's", path_names[p], S,
            rep);
    }
}

static void sums_check(struct bench *b, enum path p, size_t S)
{
    const size_t nb = S / b->o.block;
    CK(cuMemcpyDtoH(b->got_sums, b->d_sums, nb * 8));
    for (size_t i = 0; i < nb; i++)
        if (b->got_sums[i] != b->ref_sums[i])
            die("%s, %zu bytes: block %zu checksum %#" PRIx64 ", reference %#" PRIx64,
                path_names[p], S, i, b->got_sums[i], b->ref_sums[i]);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Runs path @p reps + 1 times (the first untimed), checks every result,
 * returns the median milliseconds. */
static double path_run(struct bench *b, enum path p, size_t S, int reps)
{
    double ms[64];
    if (reps > 63)
        reps = 63;
    if (path_checksums(p)) {
        CK(cuMemsetD8(b->d_sums, 0xa5, S / b->o.block * 8));
        CK(cuCtxSynchronize());
    }
    for (int r = 0; r <= reps; r++) {
        CK(cuEventRecord(b->ev_start, b->st[0]));
        CK(cuStreamWaitEvent(b->st[1], b->ev_start, 0));
        path_enqueue(b, p, S);
        CK(cuEventRecord(b->ev_join, b->st[1]));
        CK(cuStreamWaitEvent(b->st[0], b->ev_join, 0));
        CK(cuEventRecord(b->ev_end, b->st[0]));
        CK(cuEventSynchronize(b->ev_end));
        float t = 0;
        CK(cuEventElapsedTime(&t, b->ev_start, b->ev_end));
        if (r > 0)
            ms[r - 1] = t;
        if (path_scans(p))
            scan_results_check(b, p, S, r);
    }
    if (path_checksums(p))
        sums_check(b, p, S);
    qsort(ms, (size_t)reps, sizeof(double), cmp_double);
    return ms[reps / 2];
}

static void type_setup(struct bench *b, int type)
{
    b->type = type;
    b->rec_bytes = (size_t)b->o.dim * (type == KN_SCAN_F32 ? 4 : 2);
    b->unit = b->rec_bytes / gcd_sz(b->rec_bytes, b->o.block) * b->o.block;
    if (b->o.chunk < b->unit)
        die("--chunk %zu is below one unit of %zu bytes (a record and a block both divide it)",
            b->o.chunk, b->unit);
    struct fill_ctx fc = {b->host, b->max_bytes, type, 0x5ca7 + (uint64_t)type};
    par_for(fill_part, &fc);
    struct sums_ctx sc = {b->host, b->max_bytes / b->o.block * b->o.block, b->o.block, b->ref_sums};
    par_for(sums_part, &sc);
    uint64_t s = 77;
    for (uint32_t i = 0; i < b->o.dim; i++)
        b->q[i] = rng_float(base_splitmix64(&s));
    for (int i = 0; i < 2; i++)
        if (ga_scan_create(b->dev, (uint32_t)type, b->o.dim, b->q, b->o.k, &b->scan[i]) < 0)
            die("ga_scan_create failed");
    /* The device-resident copy for (d); (a) rewrites its prefix with the same bytes. */
    CK(cuMemcpyHtoD(b->d_full, b->host, b->max_bytes));
}

static void type_teardown(struct bench *b)
{
    for (int i = 0; i < 2; i++) {
        ga_scan_destroy(b->scan[i]);
        b->scan[i] = NULL;
    }
}

static void bench_open(struct bench *b)
{
    struct ga_device_opts dopts = {.ordinal = 0};
    int rc = ga_device_open(&dopts, &b->dev);
    if (rc < 0)
        die("ga_device_open: %d", rc);
    const struct ga_device_info *in = ga_device_info_get(b->dev);
    printf("device: %s, sm_%u, driver API %d\n", in->name, in->arch, in->driver_version);
    if (ga_device_kernel(b->dev, KN_CHECKSUM_IMAGE, KN_K_BLOCK_CHECKSUM, &b->k_checksum) < 0)
        die("no checksum kernel");
    for (int i = 0; i < 2; i++)
        CK(cuStreamCreate(&b->st[i], CU_STREAM_NON_BLOCKING));
    CK(cuEventCreate(&b->ev_start, CU_EVENT_DEFAULT));
    CK(cuEventCreate(&b->ev_join, CU_EVENT_DISABLE_TIMING));
    CK(cuEventCreate(&b->ev_end, CU_EVENT_DEFAULT));

    size_t max = 0;
    for (int i = 0; i < b->o.nsizes; i++)
        if (b->o.sizes[i] > max)
            max = b->o.sizes[i];
    b->max_bytes = (max + 4095) / 4096 * 4096;
    /* Shared memory as stagingd hands it over: a memfd mapping, touched
     * (filled) before it is registered, as the lease service requires. */
    b->memfd = memfd_create("scan-bench", MFD_CLOEXEC);
    if (b->memfd < 0 || ftruncate(b->memfd, (off_t)b->max_bytes) != 0)
        die("memfd of %zu bytes: %s", b->max_bytes, strerror(errno));
    b->host = mmap(NULL, b->max_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, b->memfd, 0);
    if (b->host == MAP_FAILED)
        die("mmap: %s", strerror(errno));
    struct fill_ctx fc = {b->host, b->max_bytes, KN_SCAN_F32, 1};
    par_for(fill_part, &fc);
    CK(cuMemHostRegister(b->host, b->max_bytes,
                         CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP));
    CK(cuMemHostGetDevicePointer(&b->host_d, b->host, 0));
    CK(cuMemAlloc(&b->d_full, b->max_bytes));
    for (int i = 0; i < 2; i++)
        CK(cuMemAlloc(&b->d_chunk[i], b->o.chunk));
    const size_t nb = b->max_bytes / b->o.block + 1;
    CK(cuMemAlloc(&b->d_sums, nb * 8));
    b->ref_sums = calloc(nb, 8);
    b->got_sums = calloc(nb, 8);
    b->q = calloc(b->o.dim, sizeof(float));
    if (!b->ref_sums || !b->got_sums || !b->q)
        die("out of memory");
}

static void bench_close(struct bench *b)
{
    CK(cuCtxSynchronize());
    CK(cuMemFree(b->d_sums));
    for (int i = 0; i < 2; i++)
        CK(cuMemFree(b->d_chunk[i]));
    CK(cuMemFree(b->d_full));
    CK(cuMemHostUnregister(b->host));
    munmap(b->host, b->max_bytes);
    close(b->memfd);
    CK(cuEventDestroy(b->ev_start));
    CK(cuEventDestroy(b->ev_join));
    CK(cuEventDestroy(b->ev_end));
    for (int i = 0; i < 2; i++)
        CK(cuStreamDestroy(b->st[i]));
    free(b->ref_sums);
    free(b->got_sums);
    free(b->q);
    ga_device_close(b->dev);
}

static void size_run(struct bench *b, size_t size)
{
    const size_t S = size / b->unit * b->unit;
    if (S == 0)
        die("size %zu is below one unit of %zu bytes (record and block)", size, b->unit);
    const uint64_t n = S / b->rec_bytes;
    const int reps = b->o.reps ? b->o.reps : S <= (64u << 20) ? 20 : S <= (512u << 20) ? 8 : 4;
    printf("%s, %zu MiB: %" PRIu64 " records of dim %u, k %u, %d timed reps each\n",
           b->type == KN_SCAN_F32 ? "f32" : "f16", S >> 20, n, b->o.dim, b->o.k, reps);
    b->ref_count = ref_topk(b->host, b->type, n, b->o.dim, b->o.k, b->q, b->ref);
    b->have_first = 0;
    double copy_ms = 0;
    for (int p = 0; p < P_COUNT; p++) {
        double ms = path_run(b, (enum path)p, S, reps);
        if (p == P_COPY)
            copy_ms = ms;
        double gbs = (double)S / (ms * 1e-3) / 1e9;
        printf("  %-28s %9.3f ms %9.1f GB/s  x%.2f of copy\n", path_names[p], ms, gbs,
               copy_ms / ms);
        if (nrows < MAX_ROWS)
            rows[nrows++] = (struct row){path_names[p], b->type, S, ms, gbs, copy_ms / ms};
    }
}

int main(int argc, char **argv)
{
    if (bench_help_wanted(argc, argv)) {
        usage_to(stdout);
        return 0;
    }
    struct bench b = {.memfd = -1};
    opts_parse(argc, argv, &b.o);
    bench_cuda_require("scan-bench");
    bench_open(&b);
    printf("rates are shard bytes / median time; checksum block %u bytes, pinned chunk %zu MiB "
           "(2 streams), zero-copy chunk %zu MiB\n",
           b.o.block, b.o.chunk >> 20, b.o.zc_chunk >> 20);
    for (int t = 0; t < b.o.ntypes; t++) {
        type_setup(&b, b.o.types[t]);
        for (int i = 0; i < b.o.nsizes; i++)
            size_run(&b, b.o.sizes[i]);
        type_teardown(&b);
    }
    bench_close(&b);

    printf("\n%-28s | %-4s | %9s | %9s | %10s | %s\n", "path", "type", "size", "ms", "GB/s",
           "ratio to (a)");
    for (int i = 0; i < nrows; i++)
        printf("%-28s | %-4s | %5zu MiB | %9.3f | %10.1f | %.3f\n", rows[i].path,
               rows[i].type == KN_SCAN_F32 ? "f32" : "f16", rows[i].bytes >> 20, rows[i].ms,
               rows[i].gbs, rows[i].ratio);
    printf("all checksums matched the C reference; all top-k lists passed the f64 check and "
           "agreed across paths\n");
    return 0;
}
