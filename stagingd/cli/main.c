/* stagingd: the CUDA-free storage daemon.
 *
 * Every subcommand, and --self-check, proves the CUDA boundary first (the
 * run-time self check, layer 4): a CUDA library mapped in is refused before
 * any work. Printing the usage or the version does no work and skips it.
 *   run   the daemon: serves jobs from its control socket until SIGTERM
 *   job   one job over a store (stage, lease, GPU work, release), report, exit
 *   ctl   a command to a running daemon's control socket
 *   gen / verify   write and check shard stores
 *   import         write a store from .npy / .fvecs / .bvecs files
 * docs/stagingd.md tells how to run it. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include <liburing.h>

#include "cli.h"
#include "stagingd/selfcheck.h"

static void usage(FILE *to)
{
    fprintf(to, "usage: stagingd [--self-check] [--version] [-h|--help]\n"
                "       stagingd run --control SOCK --agent SOCK [options]   the daemon\n"
                "       stagingd job --store DIR --agent SOCK [options]      one job, then exit\n"
                "       stagingd ctl --control SOCK stats|job ...|quit       talk to a daemon\n"
                "       stagingd gen --out DIR [options]   write a synthetic shard store\n"
                "       stagingd verify PATH [--quiet]     verify a store or one shard on the CPU\n"
                "       stagingd import --out DIR FILE...  a store from .npy/.fvecs/.bvecs files\n"
                "  --self-check  verify no CUDA library is mapped, probe io_uring, exit\n"
                "  'stagingd COMMAND --help' lists a command's options\n");
}

static int probe_io_uring(void)
{
    struct io_uring ring;
    int rc = io_uring_queue_init(8, &ring, 0);
    if (rc < 0) {
        fprintf(stderr, "stagingd: io_uring unavailable: io_uring_queue_init: %s\n", strerror(-rc));
        return rc;
    }
    struct io_uring_probe *probe = io_uring_get_probe_ring(&ring);
    int has_read = probe && io_uring_opcode_supported(probe, IORING_OP_READ);
    if (probe)
        io_uring_free_probe(probe);
    io_uring_queue_exit(&ring);
    fprintf(stderr, "stagingd: io_uring ready (IORING_OP_READ %s)\n", has_read ? "yes" : "no");
    return 0;
}

/* The boundary self check: a CUDA library mapped in is refused before work. */
static int boundary_self_check(void)
{
    char report[512];
    if (sd_selfcheck_no_cuda(report, sizeof(report)) < 0) {
        fprintf(stderr, "stagingd: refusing to start: %s\n", report);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = {
        {"run", sd_run_cli}, {"job", sd_job_cli},       {"ctl", sd_ctl_cli},
        {"gen", sd_gen_cli}, {"verify", sd_verify_cli}, {"import", sd_import_cli},
    };
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        if (strcmp(argv[1], cmds[i].name) == 0) {
            if (boundary_self_check() < 0)
                return 1;
            return cmds[i].fn(argc - 1, argv + 1);
        }
    }
    enum { O_SELF_CHECK = 256, O_VERSION };
    static const struct option opts[] = {
        {"self-check", no_argument, NULL, O_SELF_CHECK},
        {"version", no_argument, NULL, O_VERSION},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int self_check_only = 0, c;
    sd_cli__getopt_reset();
    while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        if (c == O_SELF_CHECK) {
            self_check_only = 1;
        } else if (c == O_VERSION) {
            printf("stagingd %s\n", STAGINGD_VERSION);
            return 0;
        } else if (c == 'h') {
            usage(stdout);
            return 0;
        } else {
            char why[256];
            sd_cli__getopt_error(c, argc, argv, why, sizeof why);
            fprintf(stderr, "stagingd: %s\n", why);
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc || !self_check_only) {
        if (optind < argc)
            fprintf(stderr, "stagingd: unknown command '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }

    if (boundary_self_check() < 0)
        return 1;
    char report[512];
    sd_selfcheck_no_cuda(report, sizeof(report));
    fprintf(stderr, "stagingd: boundary self check passed: %s\n", report);
    return probe_io_uring() < 0 ? 1 : 0;
}
