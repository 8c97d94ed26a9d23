/* stagingd's control socket: a Unix stream socket (mode 0600, peers of the
 * daemon's own uid only) that takes one text command per line and answers
 * with lines of text ending in "ok" or "error: ...". The daemon decides
 * what commands mean (docs/stagingd.md lists them); this module accepts,
 * reads, splits lines and writes replies. Driven by one thread. Private to
 * the daemon module; `stagingd ctl` (stagingd/cli/ctl_cli.c) is its client. */
#ifndef STAGINGD_CONTROL_H
#define STAGINGD_CONTROL_H

#include <stddef.h>
#include <stdint.h>

#include "base/log.h"
#include "stagingd/daemon.h" /* SD_CTL_LINE_MAX */

struct sd_ctl;

/* Called for each complete command line (no newline) from connection
 * @conn; the line may be modified. Runs inside sd_ctl_process. */
typedef void (*sd_ctl_command_fn)(void *ctx, uint64_t conn, char *line);

/* Binds and listens on @path, logging through @log (copied): refuses a path where another process
 * answers
 * (-EADDRINUSE), replaces a stale socket, refuses any other file (-EEXIST).
 * Returns 0 and *@ctl_p, or -errno; the reason is logged. */
int sd_ctl_create(const char *path, sd_ctl_command_fn fn, void *ctx,
                  const struct base_log_sink *log, struct sd_ctl **ctl_p);

/* Closes every connection and the listening socket and removes the socket
 * file. NULL is a no-op. */
void sd_ctl_destroy(struct sd_ctl *ctl);

/* A descriptor that polls readable when sd_ctl_process has work. */
int sd_ctl_fd(const struct sd_ctl *ctl);

/* Accepts new connections, reads what arrived and calls the command
 * function for each complete line; closes connections that ended. */
void sd_ctl_process(struct sd_ctl *ctl);

/* Writes @text to connection @conn (blocking up to a second). Returns 0,
 * -ENOENT for a connection that is gone, or -errno (the connection is
 * then closed). */
int sd_ctl_send(struct sd_ctl *ctl, uint64_t conn, const char *text);

/* Stops accepting connections (shutdown); existing ones stay. */
void sd_ctl_stop_accepting(struct sd_ctl *ctl);

#endif /* STAGINGD_CONTROL_H */
