/* stagingd the daemon: its settings, and the daemon itself, which owns the
 * staging pool, the staging reader, the lease client and (in `run`) the
 * control socket, and drives jobs (stagingd/job.h) from one event loop.
 * docs/stagingd.md describes running it.
 *
 * Threads: the loop's thread does all protocol work; the reader's staging
 * threads copy shard bytes and ring doorbells; nothing else. */
#ifndef STAGINGD_DAEMON_H
#define STAGINGD_DAEMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/log.h"
#include "stagingd/job.h"
#include "lease/client.h"

/* ---- settings ---- */

/* One table of keys is shared by the command line (`--key value`,
 * `--key=value`) and the config file (`key = value` lines, `#` comments);
 * flags override the file. docs/stagingd.md lists the keys. */

#define SD_CONFIG_AGENTS_MAX 16
#define SD_CONFIG_SOCK_MAX 108 /* sizeof(sun_path) */
#define SD_CONFIG_PATH_MAX 4096
#define SD_CONFIG_ERR_LEN 512
#define SD_CONFIG_ADDR_MAX 64 /* "[IPv6]:port" */

struct sd_config {
    char store[SD_CONFIG_PATH_MAX];
    char agents[SD_CONFIG_AGENTS_MAX][SD_CONFIG_SOCK_MAX];
    unsigned nagents;
    char control[SD_CONFIG_SOCK_MAX]; /* "" : no control socket */
    unsigned threads;                 /* staging threads; 0: three quarters of the cores */
    uint64_t pinned_pool;             /* bytes; 0: sized to the store (job) */
    uint64_t mapped_pool;
    uint64_t segment_size; /* largest pool segment; 0: sized to the largest shard */
    enum leasec_pool_pages pages;
    enum sd_job_op op;
    struct sd_job_config job; /* inflight, batch, doorbell, cpu-verify, query-seed, k, ... */
    unsigned drain_timeout_s;
    int log_level; /* BASE_LOG_ERROR, _WARN, _INFO or _DEBUG: the most verbose lines logged */
    char log_path[SD_CONFIG_PATH_MAX]; /* log-file ("": stderr), reopened on SIGHUP */
    char metrics[SD_CONFIG_ADDR_MAX];  /* "": no /metrics endpoint; else HOST:PORT */
    int metrics_remote;                /* the endpoint may bind an address that is not loopback */
    /* Not keys: where the daemon and every module it makes log (the
     * command line points them at its stderr sink), and the file sink
     * behind it for a job's terminal status line (NULL: none). */
    struct base_log_sink log;
    struct base_log_file *log_file;
};

/* Fills @cfg_p with the defaults: no store, the agent's default socket
 * (lt_socket_default), pages auto, inflight 4, batch 16, op verify, k 10,
 * query seed 1, MAPPED 2 MiB, doorbell auto, drain 10 s, agent timeout 30 s,
 * log level info, the process's default log sink and no status line. */
void sd_config_default(struct sd_config *cfg_p);

/* Sets @key (a long option name without "--") to @value. Returns 0;
 * -ENOENT for an unknown key; -EINVAL for a bad value. @err (may be NULL)
 * gets what was expected and found. */
int sd_config_set(struct sd_config *cfg, const char *key, const char *value, char *err,
                  size_t err_len);

/* Applies the `key = value` lines of file @path. Returns 0, or -errno /
 * -ENOENT / -EINVAL with @err naming "path:line" and the problem; keys
 * before the bad line stay applied. */
int sd_config_load(struct sd_config *cfg, const char *path, char *err, size_t err_len);

/* One key of the table, for a command line to build its options from. */
struct sd_config_key_info {
    const char *name; /* the long option: "inflight" */
    const char *arg;  /* what the value looks like: "N" */
    const char *help;
    int is_flag; /* a yes/no key: a bare --name means yes */
};

/* Key @index of the table (0, 1, ... in usage order). Returns 0, or
 * -ENOENT past the last. */
int sd_config_key_get(size_t index, struct sd_config_key_info *info_p);

/* The option list for usage texts. */
void sd_config_usage(FILE *to);

/* ---- the daemon ---- */

/* The control socket's longest command line (and reply line). */
#define SD_CTL_LINE_MAX 4096

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

#endif /* STAGINGD_DAEMON_H */
