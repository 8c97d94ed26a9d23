/* `stagingd verify`: the command-line face of sd_store_verify. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/time.h"
#include "cli.h"
#include "stagingd/shard.h"

static void store_cli_usage(FILE *to)
{
    fprintf(to, "usage: stagingd verify PATH [--quiet]\n"
                "  checks a store directory (its MANIFEST and every shard) or one shard file:\n"
                "  every header field and every block checksum. Exit 0 valid, 1 invalid.\n");
}

static int store_cli_progress(void *arg, size_t index, uint64_t payload_bytes)
{
    uint64_t *bytes = arg;
    (void)index;
    *bytes += payload_bytes;
    return 0;
}

int sd_verify_cli(int argc, char **argv)
{
    static const struct option opts[] = {
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int quiet = 0, c;
    sd_cli__getopt_reset();
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        if (c == 'q') {
            quiet = 1;
        } else if (c == 'h') {
            store_cli_usage(stdout);
            return 0;
        } else {
            char why[256];
            sd_cli__getopt_error(c, argc, argv, why, sizeof(why));
            fprintf(stderr, "stagingd verify: %s\n", why);
            store_cli_usage(stderr);
            return 2;
        }
    }
    /* One PATH (getopt moved it behind the options); "-" is no path. */
    const char *path = optind < argc ? argv[optind] : NULL;
    if (optind + 1 < argc || (path && path[0] == '-')) {
        fprintf(stderr, "stagingd verify: unexpected argument '%s'\n",
                path && path[0] == '-' ? path : argv[optind + 1]);
        store_cli_usage(stderr);
        return 2;
    }
    if (!path) {
        fprintf(stderr, "stagingd verify: expected PATH, found none\n");
        store_cli_usage(stderr);
        return 2;
    }
    const double t0 = base_now_s();
    char err[SD_ERR_LEN];
    struct stat st;
    if (stat(path, &st) < 0) {
        fprintf(stderr, "stagingd verify: %s: %s\n", path, strerror(errno));
        return 1;
    }
    uint64_t bytes = 0, shards = 0;
    int rc;
    if (S_ISDIR(st.st_mode)) {
        struct sd_store *store;
        rc = sd_store_open(path, err, sizeof(err), &store);
        if (rc == 0) {
            rc = sd_store_verify(store, store_cli_progress, &bytes, err, sizeof(err), NULL);
            shards = sd_store_count(store);
            sd_store_close(store);
        }
    } else {
        struct sd_shard *s;
        rc = sd_shard_open(path, err, sizeof(err), &s);
        if (rc == 0) {
            rc = sd_shard_verify(s, err, sizeof(err), NULL);
            bytes = sd_shard_payload_len(s);
            shards = 1;
            sd_shard_close(s);
        }
    }
    if (rc < 0) {
        fprintf(stderr, "stagingd verify: %s\n", err);
        return 1;
    }
    double t = base_now_s() - t0;
    if (!quiet)
        fprintf(stderr,
                "verify: %s: OK, %" PRIu64 " shard(s), %" PRIu64 " payload bytes in %.2f s "
                "(%.0f MiB/s)\n",
                path, shards, bytes, t, t > 0 ? (double)bytes / t / 1048576.0 : 0.0);
    return 0;
}
