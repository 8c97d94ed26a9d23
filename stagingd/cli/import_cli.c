/* `stagingd import`: the command-line face of sd_import_store, with a
 * progress line (a status line on a terminal, a line at each quarter
 * otherwise) and a summary. SIGINT and SIGTERM stop it cleanly: what was
 * written is removed. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/parse.h"
#include "base/time.h"
#include "cli.h"
#include "stagingd/import.h"
#include "stagingd/shard.h"

static void import_usage(FILE *to)
{
    fprintf(to,
            "usage: stagingd import --out DIR [options] FILE...\n"
            "  writes a shard store from vector files, their rows one after another in the\n"
            "  order given (store row r is row r of the files taken together):\n"
            "    .npy    NumPy arrays, versions 1-3: '<f4' (float32), '<f2' (float16) or '|u1'\n"
            "            (uint8), C order, shape (rows, dim) or (dim,)\n"
            "    .fvecs  each vector an int32 dim, then dim float32 (SIFT, GIST)\n"
            "    .bvecs  each vector an int32 dim, then dim uint8 (stored as f32 or f16)\n"
            "    .ivecs  int32 ground-truth neighbour ids: refused as data; --check validates it\n"
            "  The store is written next to DIR and renamed into place at the end: on any\n"
            "  error nothing is left behind. Sizes take K/M/G/T or KiB/MiB/GiB/TiB.\n"
            "  --out DIR           the store to write: missing or an empty directory\n"
            "  --force             replace the store in DIR (only a store: MANIFEST, *.sds)\n"
            "  --type f32|f16      record type (default: f16 when every input is f16, else f32)\n"
            "  --shard-size SIZE   payload bytes per shard at most, whole records (64MiB)\n"
            "  --block-size SIZE   checksum block size (256KiB)\n"
            "  --format FMT        auto (by each FILE's name), npy, fvecs, bvecs or ivecs\n"
            "  --no-fsync          skip the fsyncs (scratch data)\n"
            "  --check             read and validate every FILE, write nothing\n"
            "  --quiet             no progress and no summary; errors only\n");
}

/* ---- progress ---- */

static volatile sig_atomic_t import_stop;

static void import_on_signal(int sig)
{
    import_stop = sig;
}

struct import_bar {
    struct base_log_file *lf;
    struct base_log_sink log;
    double start, last;
    unsigned quarter;
    const char *verb;
};

static int import_bar_draw(void *arg, uint64_t done, uint64_t total)
{
    struct import_bar *b = arg;
    if (import_stop)
        return 1;
    if (!b->lf)
        return 0;
    const double t = base_now_s() - b->start;
    const double pct = total ? 100.0 * (double)done / (double)total : 100.0;
    const double rate = t > 0 ? (double)done / t : 0.0;
    if (base_log_file_is_tty(b->lf)) {
        if (done < total && t - b->last < 0.1)
            return 0;
        b->last = t;
        enum { WIDTH = 30 };
        char bars[WIDTH + 1];
        int fill = total ? (int)((double)done / (double)total * WIDTH) : WIDTH;
        for (int i = 0; i < WIDTH; i++)
            bars[i] = i < fill ? '#' : '.';
        bars[WIDTH] = '\0';
        char line[160];
        snprintf(line, sizeof line,
                 "import: %s [%s] %" PRIu64 " / %" PRIu64 " rows %3.0f%%  %.0f rows/s", b->verb,
                 bars, done, total, pct, rate);
        base_log_file_status(b->lf, line);
        return 0;
    }
    unsigned quarter = total ? (unsigned)(done * 4 / total) : 4;
    if (quarter > b->quarter && quarter < 4) {
        b->quarter = quarter;
        base_log(&b->log, BASE_LOG_INFO, "",
                 "import: %s %" PRIu64 " of %" PRIu64 " rows (%.0f%%), "
                 "%.0f rows/s",
                 b->verb, done, total, pct, rate);
    }
    return 0;
}

/* ---- the command ---- */

static int import_parse_u32(const char *s, uint32_t *v_p)
{
    uint64_t v;
    if (base_parse_size_flags(s, BASE_PARSE_SIZE_STRICT, &v, NULL, 0) < 0 || v > UINT32_MAX)
        return -EINVAL;
    *v_p = (uint32_t)v;
    return 0;
}

static void import_summary(const struct sd_import_opts *o, const struct sd_import_input *in,
                           const struct sd_import_result *res, double secs)
{
    if (o->check_only) {
        fprintf(stderr, "import: checked %zu file(s): %" PRIu64 " rows, valid; nothing written\n",
                o->ninputs, res->rows);
    } else {
        fprintf(stderr,
                "import: wrote %" PRIu64 " shard(s) to %s: %" PRIu64 " rows of %u x %s, %" PRIu64
                " payload bytes, from %zu file(s) in %.2f s\n",
                res->shards, o->out_dir, res->rows, res->dim, sd_record_type_name(res->record_type),
                res->payload_bytes, o->ninputs, secs);
    }
    for (size_t i = 0; i < o->ninputs; i++) {
        const struct sd_vec_info *v = &in[i].info;
        char ver[16] = "";
        if (v->format == SD_VEC_NPY)
            snprintf(ver, sizeof ver, " v%u", v->npy_version);
        fprintf(stderr, "  %s: .%s%s, %" PRIu64 " x %u %s%s", o->inputs[i],
                sd_vec_format_name(v->format), ver, v->rows, v->dim, sd_vec_elem_name(v->elem),
                v->elem == SD_VEC_I32 ? "" : ", store rows ");
        if (v->elem == SD_VEC_I32)
            fprintf(stderr, ", neighbour ids %" PRId64 "..%" PRId64 "\n", res->ivecs_min,
                    res->ivecs_max);
        else
            fprintf(stderr, "%" PRIu64 "..%" PRIu64 "\n", in[i].first_row,
                    in[i].first_row + v->rows - 1);
    }
}

int sd_import_cli(int argc, char **argv)
{
    enum {
        O_OUT = 256,
        O_TYPE,
        O_SHARD_SIZE,
        O_BLOCK_SIZE,
        O_FORMAT,
        O_FORCE,
        O_NO_FSYNC,
        O_CHECK,
        O_QUIET,
    };
    static const struct option opts[] = {
        {"out", required_argument, NULL, O_OUT},
        {"type", required_argument, NULL, O_TYPE},
        {"shard-size", required_argument, NULL, O_SHARD_SIZE},
        {"block-size", required_argument, NULL, O_BLOCK_SIZE},
        {"format", required_argument, NULL, O_FORMAT},
        {"force", no_argument, NULL, O_FORCE},
        {"no-fsync", no_argument, NULL, O_NO_FSYNC},
        {"check", no_argument, NULL, O_CHECK},
        {"quiet", no_argument, NULL, O_QUIET},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct sd_import_opts o;
    sd_import_opts_default(&o);
    int quiet = 0, c, li = 0;
    sd_cli__getopt_reset();
    while ((c = getopt_long(argc, argv, ":h", opts, &li)) != -1) {
        const char *expect = NULL;
        switch (c) {
        case 'h':
            import_usage(stdout);
            return 0;
        case O_OUT:
            o.out_dir = optarg;
            break;
        case O_TYPE:
            if (sd_record_type_parse(optarg, &o.record_type) < 0)
                expect = "f32 or f16";
            break;
        case O_SHARD_SIZE:
            if (base_parse_size_flags(optarg, BASE_PARSE_SIZE_STRICT, &o.shard_size, NULL, 0) < 0 ||
                o.shard_size == 0)
                expect = "a size above 0 (digits with K, M, G, T or KiB, MiB, GiB, TiB)";
            break;
        case O_BLOCK_SIZE:
            if (import_parse_u32(optarg, &o.block_size) < 0)
                expect = "a size (digits with K, M or KiB, MiB)";
            break;
        case O_FORMAT:
            if (sd_vec_format_parse(optarg, &o.format) < 0)
                expect = "auto, npy, fvecs, bvecs or ivecs";
            break;
        case O_FORCE:
            o.force = 1;
            break;
        case O_NO_FSYNC:
            o.do_fsync = 0;
            break;
        case O_CHECK:
            o.check_only = 1;
            break;
        case O_QUIET:
            quiet = 1;
            break;
        default: {
            char why[256];
            sd_cli__getopt_error(c, argc, argv, why, sizeof why);
            fprintf(stderr, "stagingd import: %s\n", why);
            if (c != ':')
                import_usage(stderr);
            return 2;
        }
        }
        if (expect) {
            fprintf(stderr, "stagingd import: --%s: expected %s, found '%s'\n", opts[li].name,
                    expect, optarg);
            return 2;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "stagingd import: expected at least one FILE, found none\n");
        import_usage(stderr);
        return 2;
    }
    if (!o.out_dir && !o.check_only) {
        fprintf(stderr, "stagingd import: expected --out DIR (or --check), found neither\n");
        import_usage(stderr);
        return 2;
    }
    if (o.out_dir && o.check_only) {
        fprintf(stderr, "stagingd import: --check writes nothing: drop --out or --check\n");
        return 2;
    }
    o.inputs = (const char *const *)(argv + optind);
    o.ninputs = (size_t)(argc - optind);

    struct sd_import_input *in = calloc(o.ninputs, sizeof *in);
    if (!in) {
        fprintf(stderr, "stagingd import: out of memory\n");
        return 1;
    }
    struct import_bar bar = {.start = base_now_s(), .verb = o.check_only ? "checking" : "writing"};
    if (!quiet && base_log_file_fd(STDERR_FILENO, "stagingd", BASE_LOG_FILE_COLOUR, &bar.lf) == 0)
        bar.log = base_log_file_sink(bar.lf, BASE_LOG_INFO);
    o.progress = import_bar_draw;
    o.progress_arg = &bar;

    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = import_on_signal;
    sigemptyset(&sa.sa_mask);
    import_stop = 0;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);

    char err[SD_ERR_LEN];
    struct sd_import_result res;
    int rc = sd_import_store(&o, err, sizeof err, in, &res);
    const int sig = import_stop;
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (bar.lf)
        base_log_file_status(bar.lf, NULL);
    if (rc < 0) {
        if (rc == -ECANCELED && sig)
            fprintf(stderr, "stagingd import: stopped by %s; nothing written\n",
                    sig == SIGINT ? "SIGINT" : "SIGTERM");
        else
            fprintf(stderr, "stagingd import: %s\n", err);
    } else if (!quiet) {
        import_summary(&o, in, &res, base_now_s() - bar.start);
    }
    base_log_file_destroy(bar.lf);
    free(in);
    return rc < 0 ? 1 : 0;
}
