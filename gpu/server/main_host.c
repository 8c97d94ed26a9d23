/* lease-agent-host: the GPU agent's server with the host backend (mlock
 * instead of registration, the C reference kernels on CPU threads, a polling
 * doorbell). It never links or loads libcuda (linkcheck proves it on every
 * build). lease-agent --backend host serves through the same code: the one
 * option table of gpu/server/cli.c, its budget defaults and
 * ga_agent_host_serve. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "gpu/agent_host.h"
#include "gpu/server.h"
#include "gpu/stop_watchdog.h"

int main(int argc, char **argv)
{
    const char *prog = program_invocation_short_name;
    struct ga_server_cli cli;
    char err[256];
    if (ga_server_cli_parse(argc, argv, &cli, err, sizeof err) < 0) {
        fprintf(stderr, "%s: %s (see --help)\n", prog, err);
        ga_server_cli_fini(&cli);
        return 2;
    }
    if (cli.help || cli.version) {
        if (cli.help)
            ga_server_cli_usage(stdout, prog);
        else
            ga_server_cli_version(stdout, prog);
        ga_server_cli_fini(&cli);
        return 0;
    }
    /* Before any thread starts, so only the server's signalfd sees them. */
    ga_server_cli_signals_block();
    struct base_log_file *logf = NULL;
    int lrc = ga_server_cli_log_setup(&cli, &logf);
    if (lrc < 0) {
        fprintf(stderr, "%s: --log-file %s: %s\n", prog, cli.log_file ? cli.log_file : "-",
                strerror(-lrc));
        ga_server_cli_fini(&cli);
        return 1;
    }
    ga_stop_watchdog_install(&cli);
    int status = ga_agent_host_serve(&cli, prog);
    base_log_default_set(NULL);
    base_log_file_destroy(logf);
    ga_server_cli_fini(&cli);
    return status;
}
