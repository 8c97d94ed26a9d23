/* The agents' stop watchdog: gpu/stop_watchdog.h says why. */
#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

#include "base/log.h"
#include "base/time.h"
#include "gpu/stop_watchdog.h"

static void *ga_stop__watch(void *arg)
{
    const struct ga_server_cli *cli = arg;
    base_sleep_ns((uint64_t)cli->stop_timeout_s * BASE_NS_PER_S);
    base_log(&cli->cfg.log, BASE_LOG_ERROR, "server",
             "the stop did not finish in %u s (--stop-timeout): work on the device still waits, "
             "most likely on a word a client keeps taking back (its bell, or a ring's sequence "
             "word with --ring-dispatch wait); exiting 1 without it (the driver frees the device "
             "context with the process)",
             cli->stop_timeout_s);
    _exit(1);
}

void ga_stop_watchdog_arm(void *arg)
{
    const struct ga_server_cli *cli = arg;
    if (!cli->stop_timeout_s)
        return;
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &at, ga_stop__watch, (void *)cli) != 0)
        base_log(&cli->cfg.log, BASE_LOG_WARN, "server",
                 "the stop watchdog could not start: the drain is not bounded (--stop-timeout)");
    pthread_attr_destroy(&at);
}
