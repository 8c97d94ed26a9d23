/* stagingd: the CUDA-free storage daemon.
 *
 * Every path proves the CUDA boundary at start-up first. Then:
 *   run   the daemon: serves jobs from its control socket until SIGTERM
 *   job   one job over a store (stage, lease, GPU work, release), report, exit
 *   ctl   a command to a running daemon's control socket
 *   gen / verify   write and check shard stores
 * docs/stagingd.md tells how to run it. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <liburing.h>

#include "stagingd/control.h"
#include "stagingd/daemon.h"
#include "stagingd/gen.h"
#include "stagingd/selfcheck.h"
#include "stagingd/store.h"

static void usage(FILE *to)
{
    fprintf(to, "usage: stagingd [--self-check] [--version] [--help]\n"
                "       stagingd run --control SOCK --agent SOCK [options]   the daemon\n"
                "       stagingd job --store DIR --agent SOCK [options]      one job, then exit\n"
                "       stagingd ctl --control SOCK stats|job ...|quit       talk to a daemon\n"
                "       stagingd gen --out DIR [options]   write a synthetic shard store\n"
                "       stagingd verify PATH [--quiet]     verify a store or one shard on the CPU\n"
                "  --self-check  verify no CUDA library is mapped, probe io_uring, exit\n"
                "  'stagingd run --help', 'stagingd job --help' and 'stagingd gen --help' list\n"
                "  their options\n");
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

/* Every path through stagingd, subcommands included, starts with the
 * boundary self check: a CUDA library mapped in is refused before work. */
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
        {"gen", sd_gen_cli}, {"verify", sd_verify_cli},
    };
    for (size_t i = 0; argc > 1 && i < sizeof cmds / sizeof cmds[0]; i++) {
        if (strcmp(argv[1], cmds[i].name) == 0) {
            if (boundary_self_check() < 0)
                return 1;
            return cmds[i].fn(argc - 1, argv + 1);
        }
    }
    int self_check_only = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--self-check") == 0) {
            self_check_only = 1;
        } else if (strcmp(argv[i], "--version") == 0) {
            printf("stagingd %s\n", STAGINGD_VERSION);
            return 0;
        } else if (strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "stagingd: unknown argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }

    if (boundary_self_check() < 0)
        return 1;
    char report[512];
    sd_selfcheck_no_cuda(report, sizeof(report));
    fprintf(stderr, "stagingd: boundary self check passed: %s\n", report);
    if (probe_io_uring() < 0 && self_check_only)
        return 1;
    if (self_check_only)
        return 0;
    usage(stderr);
    return 2;
}
