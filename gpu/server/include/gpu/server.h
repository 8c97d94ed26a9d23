/* ga server: the GPU agent's socket server (docs/agent.md, docs/protocol.md).
 *
 * One Unix SOCK_SEQPACKET socket in a private runtime directory, guarded by
 * a lock file so one agent serves a path; peers authenticated by SO_PEERCRED
 * against a uid allow list before a byte is read; one epoll loop that
 * validates every message with lease-types, answers it from the lease
 * service (lease/lease.h) or hands it to an executor (gpu/executor.h), and
 * sends with a bounded per-client queue. Work never runs on the loop
 * thread: executor completions and segment registrations come back through
 * an eventfd. CUDA-free: the CUDA agent plugs its own executor and backend
 * into the same server.
 *
 * Functions return 0 on success and -errno on failure; the function that
 * decides a failure logs one line saying what was expected and what was
 * found. */
#ifndef GPU_SERVER_H
#define GPU_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "gpu/executor.h"
#include "lease/lease.h"

enum ga_server_log_level {
    GA_SERVER_LOG_ERROR = 0,
    GA_SERVER_LOG_WARN = 1,
    GA_SERVER_LOG_INFO = 2
};

/* Receives one complete line (no trailing newline). May run on any thread. */
typedef void (*ga_server_log_fn)(void *arg, int level, const char *line);

#define GA_SERVER_MAX_ALLOW_UIDS 64

struct ga_server_config {
    const char *socket_path; /* NULL: lt_socket_default() (lease_types/socket.h) */
    const char *group;       /* NULL: socket 0600 in a 0700 directory; a group name:
                                socket 0660 and directory 0710, both of that group */
    const uid_t *allow_uids; /* peers allowed by uid; none: only the agent's euid */
    size_t allow_count;
    uint64_t budget_pinned;              /* bytes of PINNED segments registered at once */
    uint64_t budget_mapped;              /* bytes of MAPPED segments registered at once */
    const struct lease_backend *backend; /* copied; the caller calls lease_backend_fini
                                            after ga_server_destroy */
    struct ga_executor *executor;        /* not owned: ga_server_destroy shuts it down, the
                                            caller frees it afterwards */
    uint32_t max_clients;                /* connections at once; 0: 64 */
    uint32_t max_segments;               /* per client; 0: 1024 */
    uint32_t max_inflight;               /* per client, submits and commands not yet answered;
                                            0: 4096 */
    uint64_t max_queued_bytes;           /* per client, replies the peer has not read yet; over
                                            it the client is disconnected; 0: 1 MiB */
    uint64_t max_segment_bytes;          /* largest segment offered; 0: LT_SEGMENT_SIZE_MAX */
    const char *agent_name;              /* in HELLO_REPLY; NULL: "ga-<executor name>" */
    int handle_signals;   /* nonzero: a signalfd in the loop takes SIGTERM and SIGINT (stop)
                             and SIGUSR1 (stats to the log); the caller must have blocked
                             them in every thread (pthread_sigmask before any thread) */
    ga_server_log_fn log; /* NULL: stderr, "lease-agent: <level>: <line>" */
    void *log_arg;
};

struct ga_server;

/* Creates the lease service over cfg->backend with the budgets (refusing an
 * impossible configuration with the numbers), creates the runtime directory
 * (mode 0700, or 0710 with a group) or checks an existing one (a directory
 * owned by the agent's euid, not writable by others), takes the lock file
 * "<socket>.lock" (-EADDRINUSE when a live agent holds it: the message names
 * the path and its pid), replaces a stale socket, binds and listens. Nothing
 * is served until ga_server_run. On success *srv_p is the caller's. */
int ga_server_create(const struct ga_server_config *cfg, struct ga_server **srv_p);

/* Serves on the calling thread until ga_server_stop or, with handle_signals,
 * SIGTERM / SIGINT. Then stops accepting, removes the socket, shuts the
 * executor down (cancelled work is answered LT_E_SHUTTING_DOWN), answers what
 * completed and closes every client. Returns 0 or -errno (epoll failed). */
int ga_server_run(struct ga_server *srv);

/* Asks a running loop to stop. Thread-safe and async-signal-safe. */
void ga_server_stop(struct ga_server *srv);

/* Logs the lease service's, the executor's and every client's counters. */
void ga_server_stats_log(struct ga_server *srv);

/* The socket path being served (valid until ga_server_destroy). */
const char *ga_server_socket_path(const struct ga_server *srv);

/* Stops what ga_server_run did not, destroys the lease service (which
 * unregisters and closes every segment), removes the socket and the lock
 * file. NULL is a no-op. Must not run concurrently with ga_server_run. */
void ga_server_destroy(struct ga_server *srv);

/* ---- the command line shared by lease-agent-host and lease-agent ------- */

struct ga_server_cli {
    struct ga_server_config cfg; /* ready for ga_server_create once backend and
                                    executor are filled in */
    uid_t allow[GA_SERVER_MAX_ALLOW_UIDS];
    int budget_pinned_set; /* 1 when --pinned-budget was given */
    int budget_mapped_set;
    struct ga_executor_host_opts host; /* --workers, --max-streams, --max-events */
    int ready_fd;                      /* --ready-fd: -1 when not given */
    int help;                          /* --help seen: print the usage and exit 0 */
};

/* Parses @argv (argv[0] is the program) into *@cli_p. Strings point into
 * @argv. Returns 0, or -EINVAL with @err (of @errlen bytes) saying which
 * option expected what and what was found. */
int ga_server_cli_parse(int argc, char **argv, struct ga_server_cli *cli_p, char *err,
                        size_t errlen);

/* Prints the options ga_server_cli_parse takes, for program @prog. */
void ga_server_cli_usage(FILE *f, const char *prog);

/* Parses a byte count: digits with an optional K, M, G or T suffix (binary,
 * "KiB" / "K" / "k" alike). Returns 0 or -EINVAL (garbage, overflow). */
int ga_server_size_parse(const char *s, uint64_t *bytes_p);

#endif /* GPU_SERVER_H */
