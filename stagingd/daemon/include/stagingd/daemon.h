/* stagingd the daemon: owns the staging pool, the staging reader, the lease
 * client and (in `run`) the control socket, and drives jobs (job.h) from one
 * event loop. docs/stagingd.md describes running it.
 *
 * Threads: the loop's thread does all protocol work; the reader's staging
 * threads copy shard bytes and ring doorbells; nothing else. */
#ifndef STAGINGD_DAEMON_H
#define STAGINGD_DAEMON_H

#include <stdint.h>

#include "stagingd/config.h"

enum sd_daemon_mode {
    SD_DAEMON_RUN = 0,     /* serve jobs from the control socket until SIGTERM / quit */
    SD_DAEMON_ONESHOT = 1, /* run the queued job(s), print the report, exit */
};

struct sd_daemon;

/* Creates the pool (sized from @cfg; in ONESHOT with pinned-pool 0, from
 * the store @cfg->store names), the reader, the client (every pool segment
 * offered to every agent of @cfg) and, in RUN with a control path, the
 * control socket. SIGTERM, SIGINT and SIGHUP must already be blocked in
 * every thread (sd_daemon_signals_block before any thread starts). Returns
 * 0 and *@d_p, or -errno; the reason is logged. */
int sd_daemon_create(const struct sd_config *cfg, enum sd_daemon_mode mode, struct sd_daemon **d_p);

/* Closes the control socket (removing its file), the client (the agent
 * reclaims what is left), the reader and the pool. NULL is a no-op. */
void sd_daemon_destroy(struct sd_daemon *d);

/* Queues a job of @op on @store; its report goes to stdout (@conn 0) or to
 * control connection @conn. Returns 0, -ESHUTDOWN while stopping, or
 * -EBUSY when the queue is full. */
int sd_daemon_job_add(struct sd_daemon *d, const char *store, enum sd_job_op op, uint64_t conn);

/* Runs the loop: until the queue is empty (ONESHOT) or until SIGTERM,
 * SIGINT or `quit`, then drains (in-flight shards finish and their leases
 * are released, bounded by drain-timeout). Returns the process exit status:
 * ONESHOT the last job's (0 clean, 3 corrupt blocks, 1 failures); RUN 0
 * after a clean shutdown, 1 when the loop failed. */
int sd_daemon_run(struct sd_daemon *d);

/* Blocks SIGTERM, SIGINT and SIGHUP in the calling thread (and so in every
 * thread started after) and ignores SIGPIPE. Call first thing. */
void sd_daemon_signals_block(void);

/* `stagingd run ...` and `stagingd job ...`: argv[0] is the subcommand.
 * Return the process exit status (2 for usage errors). */
int sd_run_cli(int argc, char **argv);
int sd_job_cli(int argc, char **argv);

#endif /* STAGINGD_DAEMON_H */
