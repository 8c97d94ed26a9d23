/* hash-bench: the block checksum on one core, each implementation of
 * kernels/ref (kernels/include/kernels/blockhash_ref.h) against the scalar
 * reference, the way stagingd's --cpu-verify runs it: kr_block_verify over a
 * buffer of shard blocks.
 *
 *   hash-bench [--runs N] [--block BYTES] [--small-mib N] [--big-mib N]
 *
 * Two buffers: --small-mib (default 1 MiB, in cache) and --big-mib (default
 * 64 MiB, from DRAM). GB/s per core is bytes over the thread's CPU time, so
 * time spent waiting for a core on a loaded machine does not count; the
 * median of --runs runs (default 9) is printed, with the wall-clock median
 * beside it. Each run is checked: every block must verify. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/parse.h"
#include "kernels/blockhash_ref.h"

#define HB_MAX_RUNS 101
#define HB_MIN_RUN_BYTES (256ull << 20) /* per run: a 1 MiB buffer is hashed 256 times */

struct hb_opts {
    unsigned int runs;
    uint32_t block;
    size_t small_mib, big_mib;
};

struct hb_result {
    double cpu_gbps, wall_gbps; /* medians */
};

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, unsigned int n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Runs kr_block_verify over @buf with @impl forced; 0, or -1 (said why). */
static int bench_impl(const struct hb_opts *o, enum kr_block_impl impl, const unsigned char *buf,
                      size_t len, const uint64_t *sums, struct hb_result *res_p)
{
    if (kr_block_impl_set(impl) < 0) {
        fprintf(stderr, "hash-bench: %s: not supported here\n", kr_block_impl_name(impl));
        return -1;
    }
    const unsigned int passes =
        len >= HB_MIN_RUN_BYTES ? 1 : (unsigned int)(HB_MIN_RUN_BYTES / len);
    double cpu[HB_MAX_RUNS], wall[HB_MAX_RUNS];
    /* One untimed pass first: page faults and the first dispatch. */
    for (unsigned int r = 0; r <= o->runs; r++) {
        const double c0 = clock_s(CLOCK_THREAD_CPUTIME_ID), w0 = clock_s(CLOCK_MONOTONIC);
        for (unsigned int p = 0; p < passes; p++) {
            long bad = kr_block_verify(buf, len, o->block, sums);
            if (bad != -1) {
                fprintf(stderr, "hash-bench: %s: block %ld does not verify\n",
                        kr_block_impl_name(impl), bad);
                return -1;
            }
        }
        const double c = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0, w = clock_s(CLOCK_MONOTONIC) - w0;
        if (r == 0)
            continue;
        cpu[r - 1] = (double)len * passes / c / 1e9;
        wall[r - 1] = (double)len * passes / w / 1e9;
        fprintf(stderr, "hash-bench: [%zu MiB, %s, run %u/%u] %.2f GB/s per core (wall %.2f)\n",
                len >> 20, kr_block_impl_name(impl), r, o->runs, cpu[r - 1], wall[r - 1]);
    }
    res_p->cpu_gbps = median(cpu, o->runs);
    res_p->wall_gbps = median(wall, o->runs);
    return 0;
}

/* The CPU's model name and the flags the dispatch looks at, for the table. */
static void print_cpu(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[8192], model[256] = "?", flags[128] = "";
    if (f) {
        while (fgets(line, sizeof(line), f)) {
            char *colon = strchr(line, ':');
            if (!colon)
                continue;
            if (strncmp(line, "model name", 10) == 0 && model[0] == '?')
                snprintf(model, sizeof(model), "%.*s", (int)strcspn(colon + 2, "\n"), colon + 2);
            if (strncmp(line, "flags", 5) != 0)
                continue;
            const char *want[] = {"sse2", "avx2", "avx512f", "avx512dq"};
            for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
                char *hit = strstr(colon, want[i]);
                size_t n = strlen(want[i]);
                if (hit && (hit[n] == ' ' || hit[n] == '\n') && hit[-1] == ' ')
                    snprintf(flags + strlen(flags), sizeof(flags) - strlen(flags), " %s", want[i]);
            }
            break;
        }
        fclose(f);
    }
    printf("cpu: %s; flags:%s\n", model, flags[0] ? flags : " (none of sse2 avx2 avx512f/dq)");
}

/* A count in 1..@max. */
static int parse_count(const char *s, size_t max, size_t *v_p)
{
    uint64_t v;
    int rc = base_parse_u64(s, 1, max, &v, NULL, 0);
    if (rc == 0)
        *v_p = (size_t)v;
    return rc < 0 ? -EINVAL : 0;
}

static void usage(FILE *to)
{
    fprintf(to,
            "usage: hash-bench [--runs N (1..%d, default 9)] [--block BYTES (multiple of 8, "
            "default 262144)]\n"
            "                  [--small-mib N (default 1)] [--big-mib N (default 64)]\n",
            HB_MAX_RUNS);
}

static int parse_opts(int argc, char **argv, struct hb_opts *o)
{
    static const struct option longs[] = {{"runs", required_argument, NULL, 'r'},
                                          {"block", required_argument, NULL, 'b'},
                                          {"small-mib", required_argument, NULL, 's'},
                                          {"big-mib", required_argument, NULL, 'g'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    /* The shard format's default block (SD_SHARD_BLOCK_DEFAULT). */
    *o = (struct hb_opts){.runs = 9, .block = 256u << 10, .small_mib = 1, .big_mib = 64};
    int c, idx = 0;
    while ((c = getopt_long(argc, argv, "h", longs, &idx)) != -1) {
        size_t v = 0;
        int rc = 0;
        switch (c) {
        case 'r':
            rc = parse_count(optarg, HB_MAX_RUNS, &v);
            o->runs = (unsigned int)v;
            break;
        case 'b':
            rc = parse_count(optarg, UINT32_MAX, &v);
            if (rc == 0 && v % 8)
                rc = -EINVAL;
            o->block = (uint32_t)v;
            break;
        case 's':
            rc = parse_count(optarg, 1 << 16, &o->small_mib);
            break;
        case 'g':
            rc = parse_count(optarg, 1 << 16, &o->big_mib);
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return -EINVAL;
        }
        if (rc < 0) {
            fprintf(stderr, "hash-bench: bad value for --%s: '%s'\n", longs[idx].name, optarg);
            return rc;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return -EINVAL;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct hb_opts o;
    if (parse_opts(argc, argv, &o) < 0)
        return 2;
    const enum kr_block_impl chosen = kr_block_impl_get();
    const size_t lens[2] = {o.small_mib << 20, o.big_mib << 20};
    struct hb_result res[2][KR_BLOCK_IMPL__COUNT];
    int ran[KR_BLOCK_IMPL__COUNT] = {0};
    for (int b = 0; b < 2; b++) {
        unsigned char *buf = malloc(lens[b]);
        uint64_t *sums = malloc(kr_block_count(lens[b], o.block) * sizeof(*sums));
        if (!buf || !sums) {
            fprintf(stderr, "hash-bench: out of memory for %zu MiB\n", lens[b] >> 20);
            free(buf);
            free(sums);
            return 1;
        }
        uint64_t s = 0x9e3779b97f4a7c15ULL; /* xorshift64 words: every page written */
        for (size_t i = 0; i + 8 <= lens[b]; i += 8) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            memcpy(buf + i, &s, 8);
        }
        kr_block_impl_set(KR_BLOCK_IMPL_SCALAR);
        kr_block_checksums(buf, lens[b], o.block, sums);
        int rc = 0;
        for (int m = KR_BLOCK_IMPL_SCALAR; m < KR_BLOCK_IMPL__COUNT && rc == 0; m++) {
            ran[m] = kr_block_impl_supported((enum kr_block_impl)m);
            if (ran[m])
                rc = bench_impl(&o, (enum kr_block_impl)m, buf, lens[b], sums, &res[b][m]);
        }
        free(sums);
        free(buf);
        if (rc < 0)
            return 1;
    }
    kr_block_impl_set(KR_BLOCK_IMPL_AUTO);

    printf("\nhash-bench: kr_block_verify, %u-byte blocks, one thread, median of %u runs; "
           "GB/s per core = bytes / thread CPU time (wall-clock GB/s in brackets)\n",
           o.block, o.runs);
    print_cpu();
    printf("dispatch (auto) chooses: %s\n", kr_block_impl_name(chosen));
    printf("impl    | %5zu MiB GB/s  (wall) | x scalar | %5zu MiB GB/s  (wall) | x scalar\n",
           o.small_mib, o.big_mib);
    for (int m = KR_BLOCK_IMPL_SCALAR; m < KR_BLOCK_IMPL__COUNT; m++) {
        if (!ran[m]) {
            printf("%-7s | not supported on this CPU\n", kr_block_impl_name((enum kr_block_impl)m));
            continue;
        }
        printf("%-7s", kr_block_impl_name((enum kr_block_impl)m));
        for (int b = 0; b < 2; b++)
            printf(" | %12.2f (%7.2f) | %7.2fx", res[b][m].cpu_gbps, res[b][m].wall_gbps,
                   res[b][m].cpu_gbps / res[b][KR_BLOCK_IMPL_SCALAR].cpu_gbps);
        printf("%s\n", m == (int)chosen ? "  <- auto" : "");
    }
    return 0;
}
