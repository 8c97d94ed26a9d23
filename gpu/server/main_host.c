/* lease-agent-host: the GPU agent's server with the host backend (mlock
 * instead of registration, the C reference kernels on CPU threads, a polling
 * doorbell). It never links or loads libcuda (linkcheck proves it on every
 * build). lease-agent --backend host serves through the same code: the one
 * option table of gpu/server/cli.c, its budget defaults and
 * ga_agent_host_serve. */
#include <errno.h>
#include <stdio.h>

#include "gpu/agent_host.h"
#include "gpu/server.h"

int main(int argc, char **argv)
{
    const char *prog = program_invocation_short_name;
    struct ga_server_cli cli;
    char err[256];
    if (ga_server_cli_parse(argc, argv, &cli, err, sizeof err) < 0) {
        fprintf(stderr, "%s: %s (see --help)\n", prog, err);
        return 2;
    }
    if (cli.help) {
        ga_server_cli_usage(stdout, prog);
        return 0;
    }
    if (cli.version) {
        ga_server_cli_version(stdout, prog);
        return 0;
    }
    /* Before any thread starts, so only the server's signalfd sees them. */
    ga_server_cli_signals_block();
    struct base_log_file *logf = NULL;
    if (ga_server_cli_log_setup(&cli, &logf) < 0)
        return 1;
    int status = ga_agent_host_serve(&cli, prog);
    base_log_default_set(NULL);
    base_log_file_destroy(logf);
    return status;
}
