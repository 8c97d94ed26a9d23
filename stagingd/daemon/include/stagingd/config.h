/* stagingd's settings: one table of keys shared by the command line
 * (`--key value`, `--key=value`) and the config file (`key = value` lines,
 * `#` comments). Flags override the file. docs/stagingd.md lists the keys. */
#ifndef STAGINGD_CONFIG_H
#define STAGINGD_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "stagingd/log.h"
#include "stagingd/pool.h"

#define SD_CONFIG_AGENTS_MAX 16
#define SD_CONFIG_SOCK_MAX 108 /* sizeof(sun_path) */
#define SD_CONFIG_PATH_MAX 4096
#define SD_CONFIG_ERR_LEN 512

/* What a job runs on every shard. */
enum sd_job_op {
    SD_JOB_VERIFY = 1, /* block checksums against the shard's table */
    SD_JOB_SCAN = 2,   /* best match of the query; top-k merged across shards */
    SD_JOB_BOTH = 3,
};

/* Whether work waits for a doorbell rung when the shard's read lands. */
enum sd_doorbell_mode {
    SD_DOORBELL_AUTO = 0, /* when the agent grants LT_CAP_DOORBELL */
    SD_DOORBELL_ON = 1,   /* required: a job on an agent without it fails */
    SD_DOORBELL_OFF = 2,  /* plain submits after each read */
};

struct sd_config {
    char store[SD_CONFIG_PATH_MAX];
    char agents[SD_CONFIG_AGENTS_MAX][SD_CONFIG_SOCK_MAX];
    unsigned nagents;
    char control[SD_CONFIG_SOCK_MAX]; /* "" : no control socket */
    unsigned threads;                 /* staging threads; 0: one per core */
    uint64_t pinned_pool;             /* bytes; 0: sized to the store (job) */
    uint64_t mapped_pool;
    uint64_t segment_size; /* largest pool segment; 0: sized to the largest shard */
    enum sd_pool_pages pages;
    unsigned batch;    /* leases per LEASE_REQUEST / LEASE_RELEASE at most */
    unsigned inflight; /* shards staged, leased or worked on at once */
    enum sd_job_op op;
    uint64_t query_seed;
    unsigned k;
    int cpu_verify; /* also verify checksums on the CPU after each read */
    enum sd_doorbell_mode doorbell;
    uint64_t rate_limit; /* staged bytes per second at most; 0: unbounded */
    unsigned drain_timeout_s;
    unsigned agent_timeout_s;
    enum sd_log_level log_level;
    int list; /* a result row per shard, not only for failures */
};

/* Fills @cfg_p with the defaults: no store, the agent's default socket,
 * pages auto, inflight 4, batch 16, op verify, k 10, query seed 1, MAPPED 2 MiB,
 * doorbell auto, drain 10 s, agent timeout 30 s, log level info. */
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

/* Parses the options of `stagingd run` / `stagingd job` (argv[0] is the
 * subcommand) into @cfg: --config FILE first, then every other flag over
 * it. On success *@help_p says whether --help was given. Returns 0, or
 * -EINVAL/-ENOENT/-errno with @err saying which option or file line is
 * wrong. */
int sd_config_parse_args(int argc, char **argv, struct sd_config *cfg, char *err, size_t err_len,
                         int *help_p);

/* The option list for usage texts. */
void sd_config_usage(FILE *to);

/* "verify", "scan", "both", or "?". */
const char *sd_job_op_name(enum sd_job_op op);

/* Parses "verify", "scan" or "both". Returns 0 or -EINVAL. */
int sd_job_op_parse(const char *s, enum sd_job_op *op_p);

/* The agent's default socket, as lease-agent computes it:
 * $XDG_RUNTIME_DIR/lease-agent/agent.sock, else /run/lease-agent/agent.sock
 * for root, else /tmp/lease-agent-<uid>/agent.sock. 0 or -ENAMETOOLONG. */
int sd_config_agent_default(char *buf, size_t len);

#endif /* STAGINGD_CONFIG_H */
