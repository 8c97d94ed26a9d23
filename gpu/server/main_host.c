/* lease-agent-host: the GPU agent's server with the host backend (mlock
 * instead of registration, the C reference kernels on CPU threads, a polling
 * doorbell). It never links or loads libcuda; it says so when it starts. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gpu/server.h"

#define HOST_PINNED_DEFAULT (8ull << 30)
#define HOST_MAPPED_DEFAULT (1ull << 30)

/* Defaults scaled to what this machine lets the agent lock: 3/4 and 1/4 of
 * the smaller of the backend's capacity and half the physical memory. */
static void host_budgets_default(const struct lease_backend *be, struct ga_server_cli *cli)
{
    uint64_t cap = UINT64_MAX;
    if (be->capacity && be->capacity(be->ctx, &cap, NULL) < 0)
        cap = 0;
    long pages = sysconf(_SC_PHYS_PAGES);
    long page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0 && (uint64_t)pages * (uint64_t)page / 2 < cap)
        cap = (uint64_t)pages * (uint64_t)page / 2;
    uint64_t pin = HOST_PINNED_DEFAULT, map = HOST_MAPPED_DEFAULT;
    if (cap < pin + map) {
        pin = cap / 4 * 3;
        map = cap / 4;
    }
    pin -= pin % 4096;
    map -= map % 4096;
    if (!cli->budget_pinned_set)
        cli->cfg.budget_pinned = pin;
    if (!cli->budget_mapped_set)
        cli->cfg.budget_mapped = map;
    if (!cli->budget_pinned_set || !cli->budget_mapped_set)
        fprintf(stderr,
                "lease-agent-host: budgets PINNED %" PRIu64 " MAPPED %" PRIu64
                " bytes (lockable: %" PRIu64 " bytes; set them with --pinned-budget and "
                "--mapped-budget)\n",
                cli->cfg.budget_pinned, cli->cfg.budget_mapped, cap);
}

int main(int argc, char **argv)
{
    struct ga_server_cli cli;
    char err[256];
    if (ga_server_cli_parse(argc, argv, &cli, err, sizeof err) < 0) {
        fprintf(stderr, "lease-agent-host: %s (see --help)\n", err);
        return 2;
    }
    if (cli.help) {
        ga_server_cli_usage(stdout, "lease-agent-host");
        return 0;
    }
    /* Blocked before any thread starts, so only the signalfd sees them. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    fprintf(stderr, "lease-agent-host: HOST BACKEND: no GPU is used. mlock stands in for "
                    "registration, the C reference kernels run on CPU threads, doorbells are "
                    "polled.\n");
    struct lease_backend be;
    struct lt_failure why;
    int rc = lease_host_backend_init(&be, &why);
    if (rc < 0) {
        fprintf(stderr, "lease-agent-host: host backend: %s\n", why.message);
        return 1;
    }
    host_budgets_default(&be, &cli);
    struct ga_executor *ex = NULL;
    rc = ga_executor_host_create(&cli.host, &ex);
    if (rc < 0) {
        fprintf(stderr, "lease-agent-host: host executor: %s\n", strerror(-rc));
        lease_backend_fini(&be);
        return 1;
    }
    cli.cfg.backend = &be;
    cli.cfg.executor = ex;
    cli.cfg.handle_signals = 1;
    struct ga_server *srv = NULL;
    rc = ga_server_create(&cli.cfg, &srv);
    if (rc < 0) {
        fprintf(stderr, "lease-agent-host: not started: %s\n", strerror(-rc));
        ga_executor_destroy(ex);
        lease_backend_fini(&be);
        return 1;
    }
    if (cli.ready_fd >= 0) {
        if (dprintf(cli.ready_fd, "ready %ld %s\n", (long)getpid(), ga_server_socket_path(srv)) < 0)
            fprintf(stderr, "lease-agent-host: --ready-fd %d: %s\n", cli.ready_fd, strerror(errno));
        close(cli.ready_fd);
    }
    rc = ga_server_run(srv);
    ga_server_destroy(srv);
    ga_executor_destroy(ex);
    lease_backend_fini(&be);
    return rc < 0 ? 1 : 0;
}
