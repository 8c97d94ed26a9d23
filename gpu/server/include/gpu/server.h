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
#include <getopt.h>
#include <stdio.h>
#include <sys/types.h>

#include "base/log.h"
#include "gpu/executor.h"
#include "lease/lease.h"
#include "gpu/server_marks.h"

#define GA_SERVER_MAX_ALLOW_UIDS 64

/* The listening socket and its lock, handed from one agent process to the
 * next: lease-agent re-executes itself after a GPU fault and the new
 * process serves the same socket, so no connection attempt is refused in
 * between (docs/agent.md, "Faults"). */
struct ga_server_listener {
    int listen_fd; /* bound to the socket path, listening, SOCK_SEQPACKET */
    int lock_fd;   /* "<socket>.lock", its flock held */
};

/* Connections at once when the config says 0 (--max-clients). */
#define GA_SERVER_MAX_CLIENTS_DEFAULT 64u

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
    uint32_t max_clients;                /* connections at once; 0: GA_SERVER_MAX_CLIENTS_DEFAULT */
    uint32_t max_segments;               /* per client; 0: from the fd budget (below) */
    uint32_t max_inflight;               /* per client, submits and commands not yet answered;
                                            0: 4096 */
    uint64_t max_queued_bytes;           /* per client, replies the peer has not read yet; over
                                            it the client is disconnected; 0: 1 MiB */
    uint64_t max_segment_bytes;          /* largest segment offered; 0: LT_SEGMENT_SIZE_MAX */
    /* Called on the loop's thread once ga_server_run stops serving, before
     * it drains (the program's stop watchdog, gpu/server/stop_watchdog.c);
     * NULL: none. */
    void (*on_stopping)(void *arg);
    void *on_stopping_arg;
    const char *agent_name;              /* in HELLO_REPLY; NULL: "ga-<executor name>" */
    int handle_signals; /* nonzero: a signalfd in the loop takes SIGTERM and SIGINT (stop),
                           SIGUSR1 (stats to the log) and SIGHUP (log_file reopened); the
                           caller must have blocked them in every thread (pthread_sigmask
                           before any thread) */
    /* Every line of the server (subsystem "server") and of its lease service
     * ("lease"); called on any thread. Zeroed: the process default
     * (base/log.h: standard error as "<program>: <level>: <subsys>: ..."). */
    struct base_log_sink log;
    /* What one hostile client could otherwise exhaust (docs/agent.md,
     * "Budgets"). max_segments above, when 0, is derived from RLIMIT_NOFILE
     * (raised to the hard limit at create): min(1024, the segment fds /
     * max_clients). */
    uint32_t max_clients_per_uid;     /* 0: max_clients / 4 (at least 1) when more than one
                                         uid may connect, else max_clients */
    uint32_t max_inflight_per_uid;    /* unanswered requests of one uid's connections
                                         together; 0: 2 x max_inflight when more than one uid
                                         may connect, else max_inflight x max_clients */
    uint32_t seals;                   /* enum lease_seal_policy (lease/lease.h) */
    /* Nonzero: the executor's rings have the GPU wait on their client's own
     * words (lease-agent --ring-dispatch wait), which a client can hold by
     * storing them again after the agent's release, so RING_OPEN is served
     * for the agent's own uid and root only (docs/reliability.md). */
    int rings_trust_client;
    uint64_t budget_staged;           /* STAGED bytes mapped at once; 0: physical memory */
    uint64_t max_mapped_bytes;        /* every class's segments mapped at once; 0: 4x physical
                                         memory within [64 GiB, 32 TiB] */
    uint64_t max_client_mapped_bytes; /* per client; 0: half of max_mapped_bytes */
    uint64_t max_client_staged_bytes; /* per client; 0: half of budget_staged */
    /* The file the log sink writes, reopened at SIGHUP (logrotate moved
     * it); not owned. NULL: nothing to reopen. */
    struct base_log_file *log_file;
    /* Nonzero: the loop tells the service manager STOPPING=1 when it stops
     * (base/notify.h; a no-op outside a Type=notify unit). */
    int notify;
    /* Adopt these instead of binding (ga_server_create checks that they are
     * the listening socket at the path and its held lock); NULL: bind. */
    const struct ga_server_listener *inherit;
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

/* When the loop stops, keep the listening socket and the lock open (the
 * socket file stays) for ga_server_listener_take instead of closing them.
 * Thread-safe; call before ga_server_stop. */
void ga_server_listener_keep(struct ga_server *srv);

/* After ga_server_run returned: the kept listener, now the caller's
 * (ga_server_destroy no longer closes it). Returns 0, or -ENOENT when
 * nothing was kept. */
int ga_server_listener_take(struct ga_server *srv, struct ga_server_listener *listener_p);

/* Logs the lease service's, the executor's and every client's counters. */
void ga_server_stats_log(struct ga_server *srv);

/* The socket path being served (valid until ga_server_destroy). */
const char *ga_server_socket_path(const struct ga_server *srv);

/* ---- /metrics (metrics.c; docs/operations.md lists the series) --------- */

/* Serves Prometheus /metrics for @srv at @listen ("127.0.0.1:9464"; a
 * non-loopback address only with @allow_remote) on lease_metrics' HTTP
 * thread: the lease service's and the executor's counters read at each
 * scrape, the clients' from a snapshot the loop thread takes when asked,
 * events counted where they happen. Call before ga_server_run; it stops in
 * ga_server_destroy. Returns 0, or lm_server_start's -errno (-ENOTSUP:
 * built without libmicrohttpd, -EPERM: not loopback) with @err saying why. */
int ga_server_metrics_start(struct ga_server *srv, const char *listen, int allow_remote, char *err,
                            size_t errlen);

/* "127.0.0.1:9464", the address bound; NULL when /metrics is off. */
const char *ga_server_metrics_address(const struct ga_server *srv);

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
    struct ga_exec_limits exec;    /* --workers, --max-streams, --max-events */
    int ready_fd;                  /* --ready-fd: -1 when not given */
    int log_level;                 /* --log-level: BASE_LOG_*, default info */
    struct base_log_sink log_sink; /* ga_server_cli_log_setup's; cfg.log points here */
    int help;                      /* --help or -h seen: print the usage and exit 0 */
    int version;                   /* --version seen: print the version and exit 0 */
    const char *log_file;          /* --log-file: NULL: standard error */
    const char *metrics;           /* --metrics HOST:PORT: NULL or "": off */
    int metrics_remote;            /* --metrics-remote: a non-loopback --metrics allowed */
    const char *config;            /* --config FILE, read before the other options */
    char *config_text;             /* the file's bytes: its values point in (ga_server_cli_fini) */
    int in_config;                 /* applying the file's keys now */
    int allow_cmdline;             /* a command-line --allow-uid replaced the file's */
    /* After ga_server_cli_serve: the listener the server kept
     * (ga_server_listener_keep), the caller's; listen_fd -1 when none. */
    struct ga_server_listener kept;
    uint32_t stop_timeout_s; /* --stop-timeout: for the program's stop watchdog; 0: none */
};

#define GA_SERVER_CLI_STOP_TIMEOUT_DEFAULT 10u

/* The server's long options, for a program that adds its own: their val
 * fields start at GA_SERVER_CLI_OPT_BASE, so a program's own vals below it
 * never collide. Ends with a zeroed entry (not counted). */
#define GA_SERVER_CLI_OPT_BASE 0x1000
extern const struct option ga_server_cli_options[];
extern const size_t ga_server_cli_option_count;

/* Zeroes @cli and sets the defaults that are not 0. */
void ga_server_cli_init(struct ga_server_cli *cli);

/* Frees what parsing a config file kept (cli->config_text). */
void ga_server_cli_fini(struct ga_server_cli *cli);

/* ---- the config file (cli_config.c; docs/config.md, "The agent") ------- */

/* Applies one option of a program's table: @opt its val, @name its long
 * name, @val the value (NULL for a bare flag). Returns 0, -EINVAL with @err,
 * or -ENOENT when @opt is not the program's. */
typedef int (*ga_server_cli_apply_fn)(void *ctx, int opt, const char *name, const char *val,
                                      char *err, size_t errlen);

/* The long options that are no config keys: help, version, config,
 * ready-fd (NULL-terminated). A program adds its own (lease-agent: the
 * self-test's). */
extern const char *const ga_server_cli_cmdline_only[];

/* Finds --config FILE in @argv with @table (getopt_long, nothing else
 * applied); *@path_p stays NULL without one. Returns 0, or -EINVAL with
 * @err for a --config without a value. */
int ga_server_cli_config_find(int argc, char **argv, const struct option *table,
                              const char **path_p, char *err, size_t errlen);

/* Reads @path ("key = value" lines, '#' comments; docs/config.md) and hands
 * each key of @table, except those in @cmdline_only (NULL-terminated; may
 * be NULL), to @apply with cli->in_config set. The values point into
 * cli->config_text, kept until ga_server_cli_fini. Returns 0, or -errno
 * with @err as "FILE:LINE: what was expected, what was found". */
int ga_server_cli_config_load(struct ga_server_cli *cli, const char *path,
                              const struct option *table, const char *const *cmdline_only,
                              ga_server_cli_apply_fn apply, void *ctx, char *err, size_t errlen);

/* The keys a config file takes of the server's own options, in the order
 * of ga_server_cli_options: up to @max names into @keys_p. Returns how many
 * there are (for the documentation's test). */
size_t ga_server_cli_config_keys(size_t max, const char **keys_p);

/* Applies one option getopt_long returned from ga_server_cli_options (@opt
 * its val, @val its optarg, pointed to, not copied). Returns 0, -EINVAL with
 * @err saying which option expected what and what was found, or -ENOENT
 * when @opt is not one of the server's. */
int ga_server_cli_option(struct ga_server_cli *cli, int opt, const char *val, char *err,
                         size_t errlen);

/* The words for getopt_long's '?' (unknown option) or ':' (no value).
 * Returns -EINVAL. */
int ga_server_cli_getopt_error(int argc, char **argv, int opt, char *err, size_t errlen);

/* Parses @argv (argv[0] is the program) with the server's options alone
 * into *@cli_p (getopt_long; resets optind). Strings point into @argv.
 * Returns 0, or -EINVAL with @err (of @errlen bytes) saying which option
 * expected what and what was found. */
int ga_server_cli_parse(int argc, char **argv, struct ga_server_cli *cli_p, char *err,
                        size_t errlen);

/* Prints the options ga_server_cli_parse takes, for program @prog. */
void ga_server_cli_usage(FILE *f, const char *prog);

/* "<prog> <version> (lease protocol N)", the --version line. */
void ga_server_cli_version(FILE *f, const char *prog);

/* Blocks SIGTERM, SIGINT, SIGUSR1 and SIGHUP (the server's signalfd takes
 * them) and ignores SIGPIPE. Call before any thread starts. */
void ga_server_cli_signals_block(void);

/* Logs at --log-level to standard error as "<program>: <level>:
 * <subsys>: ...", or with --log-file to that file (appended, each line
 * stamped with the time and pid; SIGHUP reopens it), for the server
 * (cli->cfg.log) and as the process default; *file_p is the caller's to
 * destroy after the last line. Returns 0, -ENOMEM or open(2)'s -errno
 * (the file: the caller says so). */
int ga_server_cli_log_setup(struct ga_server_cli *cli, struct base_log_file **file_p);

/* Half the physical memory, in bytes (UINT64_MAX when unknown). */
uint64_t ga_server_cli_half_memory(void);

/* The one table of budget defaults: budgets not given on the command line
 * are 8 GiB PINNED and 1 GiB MAPPED, scaled down to 3/4 and 1/4 of @cap
 * when they would not fit, rounded down to 4 KiB; the choice is logged
 * naming @what the cap is and the options that set the budgets. */
void ga_server_cli_budgets_default(struct ga_server_cli *cli, uint64_t cap, const char *what);

/* The serve step of both agents: ga_server_create from cli->cfg (backend and
 * executor filled in; signals handled), /metrics with --metrics, the
 * "ready" line to --ready-fd and READY=1 to the service manager
 * (base/notify.h), ga_server_run (STOPPING=1 when it stops),
 * ga_server_listener_take into cli->kept, ga_server_destroy. *@running_p
 * (may be NULL) holds the server while it runs, for a thread that must stop
 * it (a GPU fault). Returns the exit status: 0, or 1 when it did not start
 * or the loop failed (logged). */
int ga_server_cli_serve(struct ga_server_cli *cli, struct ga_server **running_p);

#endif /* GPU_SERVER_H */
