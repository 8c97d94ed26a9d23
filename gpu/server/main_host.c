/* lease-agent-host: the GPU agent's server with the host backend (mlock
 * instead of registration, the C reference kernels on CPU threads, a polling
 * doorbell). It never links or loads libcuda; it says so when it starts.
 * lease-agent --backend host serves the same way: both parse the one option
 * table of gpu/server/cli.c and share its budget defaults. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "gpu/executor_host.h"
#include "gpu/server.h"

#define HOST_SUBSYS "agent"

int main(int argc, char **argv)
{
    struct ga_server_cli cli;
    char err[256];
    if (ga_server_cli_parse(argc, argv, &cli, err, sizeof err) < 0) {
        fprintf(stderr, "%s: %s (see --help)\n", program_invocation_short_name, err);
        return 2;
    }
    if (cli.help) {
        ga_server_cli_usage(stdout, program_invocation_short_name);
        return 0;
    }
    struct base_log_file *logf = NULL;
    if (ga_server_cli_log_setup(&cli, &logf) < 0)
        return 1;
    /* Blocked before any thread starts, so only the signalfd sees them. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    base_log(&cli.cfg.log, BASE_LOG_NOTICE, HOST_SUBSYS,
             "HOST BACKEND: no GPU is used. mlock stands in for registration, the C reference "
             "kernels run on CPU threads, doorbells are polled.");
    int status = 1;
    struct lease_backend be;
    struct lt_failure why;
    int rc = lease_host_backend_init(&be, &why);
    if (rc < 0) {
        base_log(&cli.cfg.log, BASE_LOG_ERROR, HOST_SUBSYS, "host backend: %s", why.message);
        goto out;
    }
    uint64_t cap = UINT64_MAX;
    if (be.capacity && be.capacity(be.ctx, &cap, NULL) < 0)
        cap = 0;
    uint64_t half = ga_server_cli_half_memory();
    ga_server_cli_budgets_default(&cli, cap < half ? cap : half, "lockable");
    struct ga_executor *ex = NULL;
    struct ga_executor_host_opts ho = {
        .workers = cli.exec.workers,
        .max_streams = cli.exec.max_streams,
        .max_events = cli.exec.max_events,
    };
    rc = ga_executor_host_create(&ho, &ex);
    if (rc < 0) {
        base_log(&cli.cfg.log, BASE_LOG_ERROR, HOST_SUBSYS, "host executor: %s", strerror(-rc));
        lease_backend_fini(&be);
        goto out;
    }
    cli.cfg.backend = &be;
    cli.cfg.executor = ex;
    status = ga_server_cli_serve(&cli, NULL);
    ga_executor_destroy(ex);
    lease_backend_fini(&be);
out:
    base_log_default_set(NULL);
    base_log_file_destroy(logf);
    return status;
}
