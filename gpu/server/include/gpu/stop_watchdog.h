/* The agents' stop watchdog (program code, compiled into lease-agent and
 * lease-agent-host, not into the ga_server library: it ends the process).
 *
 * After SIGTERM the server drains: it cancels waiting work and waits for the
 * work already on the device. On the CUDA backend a stream waiting on a word
 * in a client's memory (a bell, a ring's sequence word in the wait shape)
 * passes only once the word holds its value, and a client that keeps taking
 * back the value the agent stored there would hold the drain for ever
 * (docs/reliability.md, "Known gaps"). The watchdog bounds it: armed when the
 * server stops serving, it logs why and exits 1 once --stop-timeout seconds
 * have passed; the driver frees the device context with the process. */
#ifndef GPU_STOP_WATCHDOG_H
#define GPU_STOP_WATCHDOG_H

#include "gpu/server.h"

/* Arms the watchdog for @cli's --stop-timeout (0: nothing). A
 * ga_server_config on_stopping callback: @arg is the struct ga_server_cli. */
void ga_stop_watchdog_arm(void *arg);

/* Sets @cli up to arm it when its server stops serving. */
static inline void ga_stop_watchdog_install(struct ga_server_cli *cli)
{
    cli->cfg.on_stopping = ga_stop_watchdog_arm;
    cli->cfg.on_stopping_arg = cli;
}

#endif /* GPU_STOP_WATCHDOG_H */
