/* The host-backend agent's start: what lease-agent-host's main and
 * lease-agent --backend host share (gpu/agent_host.h). */
#include <stdint.h>
#include <string.h>

#include "gpu/agent_host.h"
#include "gpu/executor_host.h"

#define GA_AGENT_HOST_SUBSYS "agent"

int ga_agent_host_serve(struct ga_server_cli *cli, const char *how)
{
    const struct base_log_sink *log = &cli->cfg.log;
    base_log(log, BASE_LOG_NOTICE, GA_AGENT_HOST_SUBSYS,
             "HOST BACKEND (%s): no GPU is used. mlock stands in for registration, the C "
             "reference kernels run on CPU threads, doorbells are polled.",
             how);
    struct lease_backend be;
    struct lt_failure why;
    int rc = lease_host_backend_init(&be, &why);
    if (rc < 0) {
        base_log(log, BASE_LOG_ERROR, GA_AGENT_HOST_SUBSYS, "host backend: %s", why.message);
        return 1;
    }
    uint64_t cap = UINT64_MAX;
    if (be.capacity && be.capacity(be.ctx, &cap, NULL) < 0)
        cap = 0;
    uint64_t half = ga_server_cli_half_memory();
    ga_server_cli_budgets_default(cli, cap < half ? cap : half, "lockable");
    struct ga_executor *ex = NULL;
    struct ga_executor_host_opts ho = {
        .workers = cli->exec.workers,
        .max_streams = cli->exec.max_streams,
        .max_events = cli->exec.max_events,
        .log = cli->cfg.log,
    };
    rc = ga_executor_host_create(&ho, &ex);
    if (rc < 0) {
        base_log(log, BASE_LOG_ERROR, GA_AGENT_HOST_SUBSYS, "host executor: %s", strerror(-rc));
        lease_backend_fini(&be);
        return 1;
    }
    cli->cfg.backend = &be;
    cli->cfg.executor = ex;
    int status = ga_server_cli_serve(cli, NULL);
    cli->cfg.backend = NULL;
    cli->cfg.executor = NULL;
    ga_executor_destroy(ex);
    lease_backend_fini(&be);
    return status;
}
