/* `stagingd gen`: the command-line face of sd_gen_store, with a progress
 * bar and a summary line. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/parse.h"
#include "base/time.h"
#include "cli.h"
#include "stagingd/shard.h"

static void gen_usage(FILE *to)
{
    fprintf(to, "usage: stagingd gen --out DIR [--size 1GiB] [--shard-size 64MiB] [--dim 128]\n"
                "                    [--type f32|f16] [--block-size 256KiB] [--seed N]\n"
                "                    [--force] [--fsync] [--progress] [--quiet]\n"
                "  writes a reproducible store of random vectors (elements in [-1, 1)) to DIR:\n"
                "  shard-NNNNNN.sds files and a MANIFEST. Sizes take K/M/G/T or KiB/MiB/GiB/TiB\n"
                "  (powers of 1024). The same options and seed give byte-identical files.\n"
                "  --force       write into a non-empty DIR (replaces the store there)\n"
                "  --fsync       fsync every shard, the MANIFEST and DIR\n"
                "  --progress    draw the progress bar even when stderr is not a terminal\n"
                "  --quiet       no progress bar and no summary; errors only\n");
}

struct gen_bar {
    double start; /* base_now_s() */
    double last;  /* seconds since start of the last redraw */
    int drawn;
};

static double gen_since(double t0)
{
    return base_now_s() - t0;
}

static void gen_human(uint64_t bytes, char *out, size_t out_len)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    size_t u = 0;
    while (v >= 1024.0 && u + 1 < sizeof(unit) / sizeof(unit[0])) {
        v /= 1024.0;
        u++;
    }
    snprintf(out, out_len, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
}

static void gen_bar_draw(void *arg, uint64_t done, uint64_t total)
{
    struct gen_bar *bar = arg;
    double t = gen_since(bar->start);
    /* At most ~10 redraws a second, and always the last one. */
    if (done < total && bar->drawn && t - bar->last < 0.1)
        return;
    bar->last = t;
    bar->drawn = 1;
    char d[32], tot[32], rate[32];
    gen_human(done, d, sizeof(d));
    gen_human(total, tot, sizeof(tot));
    gen_human(t > 0 ? (uint64_t)((double)done / t) : 0, rate, sizeof(rate));
    enum { WIDTH = 30 };
    int fill = total ? (int)((double)done / (double)total * WIDTH) : WIDTH;
    char bars[WIDTH + 1];
    for (int i = 0; i < WIDTH; i++)
        bars[i] = i < fill ? '#' : '.';
    bars[WIDTH] = '\0';
    fprintf(stderr, "\rgen: [%s] %s / %s %3.0f%%  %s/s   ", bars, d, tot,
            total ? 100.0 * (double)done / (double)total : 100.0, rate);
    fflush(stderr);
}

static int gen_parse_u32(const char *s, uint32_t *v_p)
{
    uint64_t v;
    if (base_parse_size_flags(s, BASE_PARSE_SIZE_STRICT, &v, NULL, 0) < 0 || v > UINT32_MAX)
        return -EINVAL;
    *v_p = (uint32_t)v;
    return 0;
}

static int gen_parse_seed(const char *s, uint64_t *v_p)
{
    if (!*s || *s == '-' || *s == '+' || *s == ' ')
        return -EINVAL;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || *end)
        return -EINVAL;
    *v_p = (uint64_t)v;
    return 0;
}

int sd_gen_cli(int argc, char **argv)
{
    enum {
        O_OUT = 256,
        O_SIZE,
        O_SHARD_SIZE,
        O_DIM,
        O_TYPE,
        O_BLOCK_SIZE,
        O_SEED,
        O_FORCE,
        O_FSYNC,
        O_QUIET,
        O_PROGRESS
    };
    static const struct option opts[] = {
        {"out", required_argument, NULL, O_OUT},
        {"size", required_argument, NULL, O_SIZE},
        {"shard-size", required_argument, NULL, O_SHARD_SIZE},
        {"dim", required_argument, NULL, O_DIM},
        {"type", required_argument, NULL, O_TYPE},
        {"block-size", required_argument, NULL, O_BLOCK_SIZE},
        {"seed", required_argument, NULL, O_SEED},
        {"force", no_argument, NULL, O_FORCE},
        {"fsync", no_argument, NULL, O_FSYNC},
        {"quiet", no_argument, NULL, O_QUIET},
        {"progress", no_argument, NULL, O_PROGRESS},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct sd_gen_opts o;
    sd_gen_opts_default(&o);
    int quiet = 0, progress = 0, c, li = 0;
    sd_cli__getopt_reset();
    while ((c = getopt_long(argc, argv, ":h", opts, &li)) != -1) {
        int bad = 0;
        switch (c) {
        case 'h':
            gen_usage(stdout);
            return 0;
        case O_FORCE:
            o.force = 1;
            break;
        case O_FSYNC:
            o.do_fsync = 1;
            break;
        case O_QUIET:
            quiet = 1;
            break;
        case O_PROGRESS:
            progress = 1;
            break;
        case O_OUT:
            o.out_dir = optarg;
            break;
        case O_SIZE:
            bad = base_parse_size_flags(optarg, BASE_PARSE_SIZE_STRICT, &o.size, NULL, 0) < 0;
            break;
        case O_SHARD_SIZE:
            bad = base_parse_size_flags(optarg, BASE_PARSE_SIZE_STRICT, &o.shard_size, NULL, 0) < 0;
            break;
        case O_DIM:
            bad = gen_parse_u32(optarg, &o.dim) < 0;
            break;
        case O_TYPE:
            bad = sd_record_type_parse(optarg, &o.record_type) < 0;
            break;
        case O_BLOCK_SIZE:
            bad = gen_parse_u32(optarg, &o.block_size) < 0;
            break;
        case O_SEED:
            bad = gen_parse_seed(optarg, &o.seed) < 0;
            break;
        default: {
            char why[256];
            sd_cli__getopt_error(c, argc, argv, why, sizeof(why));
            fprintf(stderr, "stagingd gen: %s\n", why);
            if (c != ':')
                gen_usage(stderr);
            return 2;
        }
        }
        if (bad) {
            fprintf(stderr,
                    "stagingd gen: --%s: cannot parse '%s' (sizes: digits with K, M, G, "
                    "KiB, MiB or GiB; type: f32 or f16; seed: an unsigned integer)\n",
                    opts[li].name, optarg);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "stagingd gen: unknown argument '%s'\n", argv[optind]);
        gen_usage(stderr);
        return 2;
    }
    if (!o.out_dir) {
        fprintf(stderr, "stagingd gen: expected --out DIR, found none\n");
        gen_usage(stderr);
        return 2;
    }
    struct gen_bar bar = {0, 0, 0};
    bar.start = base_now_s();
    if (!quiet && (progress || isatty(STDERR_FILENO))) {
        o.progress = gen_bar_draw;
        o.progress_arg = &bar;
    }
    char err[SD_ERR_LEN];
    struct sd_gen_result res;
    int rc = sd_gen_store(&o, err, sizeof(err), &res);
    if (bar.drawn)
        fputc('\n', stderr);
    if (rc < 0) {
        fprintf(stderr, "stagingd gen: %s\n", err);
        return 1;
    }
    if (!quiet) {
        double t = gen_since(bar.start);
        char pay[32], rate[32];
        gen_human(res.payload_bytes, pay, sizeof(pay));
        gen_human(t > 0 ? (uint64_t)((double)res.payload_bytes / t) : 0, rate, sizeof(rate));
        fprintf(stderr,
                "gen: wrote %" PRIu64 " shards to %s: %" PRIu64 " records of %u x %s, %s payload "
                "in %" PRIu64 " blocks of %u bytes, seed %" PRIu64 ", in %.2f s (%s/s)\n",
                res.shards, o.out_dir, res.records, o.dim, sd_record_type_name(o.record_type), pay,
                res.blocks, o.block_size, o.seed, t, rate);
    }
    return 0;
}
