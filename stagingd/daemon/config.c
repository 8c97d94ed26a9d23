/* stagingd's settings: the key table and the config file. The command
 * line's parser (stagingd/cli/daemon_cli.c) builds its options from the
 * table through sd_config_key_get. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/parse.h"
#include "lease_metrics/metrics.h"
#include "lease_types/socket.h"
#include "stagingd/daemon.h"

enum sd_config__type {
    SD_CFG_PATH,      /* char[SD_CONFIG_PATH_MAX] */
    SD_CFG_SOCK,      /* char[SD_CONFIG_SOCK_MAX], "" allowed */
    SD_CFG_AGENTS,    /* comma-separated socket paths */
    SD_CFG_UINT,      /* unsigned within [min, max] */
    SD_CFG_U64,       /* uint64_t */
    SD_CFG_SIZE,      /* uint64_t bytes with K/M/G/T suffixes */
    SD_CFG_BOOL,      /* int: yes/no/true/false/on/off/1/0; a bare flag is yes */
    SD_CFG_OP,        /* enum sd_job_op */
    SD_CFG_DOORBELL,  /* enum sd_doorbell_mode */
    SD_CFG_LEVEL,     /* int: BASE_LOG_* */
    SD_CFG_PAGES,     /* enum leasec_pool_pages */
    SD_CFG_ADDR,      /* char[SD_CONFIG_ADDR_MAX]: HOST:PORT, or "" / "off" for none */
    SD_CFG_PATH_MODE, /* enum sd_job_path */
};

struct sd_config__key {
    const char *name;
    enum sd_config__type type;
    size_t off;
    unsigned min, max;
    const char *arg;
    const char *help;
};

#define SD_OFF(field) offsetof(struct sd_config, field)

static const struct sd_config__key sd_config__keys[] = {
    {"store", SD_CFG_PATH, SD_OFF(store), 0, 0, "DIR",
     "the shard store (a directory with a MANIFEST)"},
    {"agent", SD_CFG_AGENTS, 0, 0, 0, "SOCK[,SOCK]", "GPU agent socket(s); default: lease-agent's"},
    {"control", SD_CFG_SOCK, SD_OFF(control), 0, 0, "SOCK",
     "control socket (run: stats, job, quit)"},
    {"threads", SD_CFG_UINT, SD_OFF(threads), 0, 1024, "N", "staging threads (0: three quarters of the cores)"},
    {"pinned-pool", SD_CFG_SIZE, SD_OFF(pinned_pool), 0, 0, "SIZE",
     "PINNED staging pool (0: inflight x the largest shard)"},
    {"mapped-pool", SD_CFG_SIZE, SD_OFF(mapped_pool), 0, 0, "SIZE",
     "MAPPED pool for doorbell and done words (2MiB)"},
    {"segment-size", SD_CFG_SIZE, SD_OFF(segment_size), 0, 0, "SIZE",
     "largest pool segment (0: fits the largest shard)"},
    {"pages", SD_CFG_PAGES, SD_OFF(pages), 0, 0, "auto|small|huge|thp",
     "pool pages: hugetlb while reserved ones are free, then shmem THP where allowed (auto)"},
    {"batch", SD_CFG_UINT, SD_OFF(job.batch), 1, 256, "N",
     "leases per request or release at most (16)"},
    {"inflight", SD_CFG_UINT, SD_OFF(job.inflight), 1, 1024, "N",
     "shards staged, leased or worked on at once (4)"},
    {"op", SD_CFG_OP, SD_OFF(op), 0, 0, "verify|scan|both", "the work on every shard (verify)"},
    {"query-seed", SD_CFG_U64, SD_OFF(job.query_seed), 0, 0, "N",
     "seed of the scan's query vector (1)"},
    {"k", SD_CFG_UINT, SD_OFF(job.k), 1, 4096, "K", "rows of the merged top-k (10)"},
    {"cpu-verify", SD_CFG_BOOL, SD_OFF(job.cpu_verify), 0, 0, "[yes|no]",
     "also verify checksums on the CPU after each read"},
    {"doorbell", SD_CFG_DOORBELL, SD_OFF(job.doorbell), 0, 0, "auto|on|off",
     "queue work behind a doorbell rung by the read (auto)"},
    {"rate-limit", SD_CFG_SIZE, SD_OFF(job.rate_limit), 0, 0, "SIZE",
     "staged bytes per second at most (0: unbounded)"},
    {"drain-timeout", SD_CFG_UINT, SD_OFF(drain_timeout_s), 0, 3600, "SECONDS",
     "on shutdown, wait this long for in-flight work and releases (10)"},
    {"agent-timeout", SD_CFG_UINT, SD_OFF(job.agent_timeout_s), 1, 86400, "SECONDS",
     "fail a job when no agent is ready for this long (30)"},
    {"log-level", SD_CFG_LEVEL, SD_OFF(log_level), 0, 0, "error|warn|info|debug",
     "the most verbose lines logged (info)"},
    {"list", SD_CFG_BOOL, SD_OFF(job.list), 0, 0, "[yes|no]", "print a result row for every shard"},
    {"log-file", SD_CFG_PATH, SD_OFF(log_path), 0, 0, "FILE",
     "append log lines to FILE, reopened on SIGHUP (default: stderr)"},
    {"metrics", SD_CFG_ADDR, SD_OFF(metrics), 0, 0, "HOST:PORT",
     "serve Prometheus /metrics there, e.g. 127.0.0.1:9464 (default: off)"},
    {"metrics-remote", SD_CFG_BOOL, SD_OFF(metrics_remote), 0, 0, "[yes|no]",
     "let --metrics bind an address that is not loopback (no)"},
    {"path", SD_CFG_PATH_MODE, SD_OFF(job.path), 0, 0, "auto|stream|whole",
     "stream chunks through rings of pinned slots, or stage whole shards (auto: stream when "
     "the agent grants it, for verify or scan)"},
    {"chunk-size", SD_CFG_SIZE, SD_OFF(job.chunk_size), 0, 0, "SIZE",
     "stream: bytes per ring slot, a multiple of 4KiB (2MiB)"},
    {"ring-slots", SD_CFG_UINT, SD_OFF(job.ring_slots), 1, 256, "N",
     "stream: slots per ring, one ring per staging thread (4)"},
    {"ring-depth", SD_CFG_UINT, SD_OFF(job.ring_depth), 1, 64, "N",
     "stream: shards each ring has queued on the agent ahead (2)"},
    {"cpu-verify-threads", SD_CFG_UINT, SD_OFF(job.cpu_verify_threads), 0, 1024, "N",
     "cpu-verify on N check threads off the staging path (0, the default: on the staging threads, per chunk while it is in cache)"},
};
#define SD_CONFIG__NKEYS (sizeof sd_config__keys / sizeof sd_config__keys[0])

static void sd_config__err(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void sd_config__err(char *err, size_t err_len, const char *fmt, ...)
{
    if (!err || err_len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

void sd_config_default(struct sd_config *cfg_p)
{
    memset(cfg_p, 0, sizeof *cfg_p);
    if (lt_socket_default(cfg_p->agents[0], sizeof cfg_p->agents[0]) == 0)
        cfg_p->nagents = 1;
    cfg_p->mapped_pool = 2u << 20;
    cfg_p->op = SD_JOB_VERIFY;
    cfg_p->job.batch = 16;
    cfg_p->job.inflight = 4;
    cfg_p->job.query_seed = 1;
    cfg_p->job.k = 10;
    cfg_p->job.doorbell = SD_DOORBELL_AUTO;
    cfg_p->job.agent_timeout_s = 30;
    cfg_p->job.path = SD_JOB_PATH_AUTO;
    cfg_p->job.chunk_size = SD_JOB_CHUNK_DEFAULT;
    cfg_p->job.ring_slots = SD_JOB_RING_SLOTS_DEFAULT;
    cfg_p->job.ring_depth = SD_JOB_RING_DEPTH_DEFAULT;
    /* 0: on the H200, streamed verify with --cpu-verify ran 30.5 GB/s checking
     * on the staging threads against 7.9 (2) to 16.3 (8) on check threads,
     * which read every shard again (bench/stream-sweep.sh, docs/streaming.md). */
    cfg_p->job.cpu_verify_threads = 0;
    cfg_p->drain_timeout_s = 10;
    cfg_p->log_level = BASE_LOG_INFO;
}

/* The log levels a config names: a subset of base_log_levels, so the
 * refusal lists exactly these four. */
static const struct base_enum sd_config__levels[] = {
    {"error", BASE_LOG_ERROR},
    {"warn", BASE_LOG_WARN},
    {"info", BASE_LOG_INFO},
    {"debug", BASE_LOG_DEBUG},
    {NULL, 0},
};

/* The pool's page settings, spelled as leasec_pool_pages_name spells them
 * (test_config parses each), so a refusal lists them. */
static const struct base_enum sd_config__pages[] = {
    {"auto", LEASEC_POOL_PAGES_AUTO},
    {"small", LEASEC_POOL_PAGES_SMALL},
    {"huge", LEASEC_POOL_PAGES_HUGE},
    {"thp", LEASEC_POOL_PAGES_THP},
    {NULL, 0},
};

static int sd_config__agents(struct sd_config *cfg, const char *s, char *err, size_t err_len)
{
    char tmp[SD_CONFIG_AGENTS_MAX][SD_CONFIG_SOCK_MAX];
    unsigned n = 0;
    const char *p = s;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == 0) {
            sd_config__err(err, err_len, "expected a socket path between commas, found '%s'", s);
            return -EINVAL;
        }
        if (len >= SD_CONFIG_SOCK_MAX) {
            sd_config__err(err, err_len, "socket path of %zu bytes: expected at most %d", len,
                           SD_CONFIG_SOCK_MAX - 1);
            return -EINVAL;
        }
        if (n == SD_CONFIG_AGENTS_MAX) {
            sd_config__err(err, err_len, "expected at most %d agents", SD_CONFIG_AGENTS_MAX);
            return -EINVAL;
        }
        memcpy(tmp[n], p, len);
        tmp[n][len] = '\0';
        n++;
        if (!comma)
            break;
        p = comma + 1;
    }
    memcpy(cfg->agents, tmp, sizeof tmp);
    cfg->nagents = n;
    return 0;
}

static const struct sd_config__key *sd_config__find(const char *name)
{
    for (size_t i = 0; i < SD_CONFIG__NKEYS; i++)
        if (strcmp(sd_config__keys[i].name, name) == 0)
            return &sd_config__keys[i];
    return NULL;
}

int sd_config_set(struct sd_config *cfg, const char *key, const char *value, char *err,
                  size_t err_len)
{
    const struct sd_config__key *k = sd_config__find(key);
    if (!k) {
        sd_config__err(err, err_len, "unknown key '%s' (see 'stagingd run --help')", key);
        return -ENOENT;
    }
    unsigned char *field = (unsigned char *)cfg + k->off;
    uint64_t v = 0;
    int rc = 0;
    switch (k->type) {
    case SD_CFG_PATH:
    case SD_CFG_SOCK: {
        size_t cap = k->type == SD_CFG_PATH ? SD_CONFIG_PATH_MAX : SD_CONFIG_SOCK_MAX;
        size_t len = strlen(value);
        if (len >= cap || (k->type == SD_CFG_PATH && len == 0)) {
            sd_config__err(err, err_len, "%s: expected a path of 1..%zu bytes, found %zu bytes",
                           key, cap - 1, len);
            return -EINVAL;
        }
        memcpy(field, value, len + 1);
        return 0;
    }
    case SD_CFG_ADDR: {
        if (value[0] == '\0' || strcmp(value, "off") == 0) {
            *(char *)field = '\0';
            return 0;
        }
        struct sockaddr_storage ss;
        size_t alen;
        char why[256];
        /* The form only: whether a remote address is allowed is decided at
         * start, once metrics-remote is known wherever it stands. */
        int prc =
            lm_listen_parse(value, LM_SERVER_ALLOW_REMOTE, &ss, sizeof ss, &alen, why, sizeof why);
        if (prc == 0 && strlen(value) >= SD_CONFIG_ADDR_MAX) {
            snprintf(why, sizeof why, "expected at most %d bytes, found %zu",
                     SD_CONFIG_ADDR_MAX - 1, strlen(value));
            prc = -EINVAL;
        }
        if (prc < 0) {
            sd_config__err(err, err_len, "%s: %s", key, why);
            return -EINVAL;
        }
        memcpy(field, value, strlen(value) + 1);
        return 0;
    }
    case SD_CFG_AGENTS: {
        char why[256];
        rc = sd_config__agents(cfg, value, why, sizeof why);
        if (rc < 0)
            sd_config__err(err, err_len, "%s: %s", key, why);
        return rc;
    }
    case SD_CFG_UINT:
        if (base_parse_u64(value, k->min, k->max, &v, NULL, 0) < 0) {
            sd_config__err(err, err_len, "%s: expected an integer in %u..%u, found '%s'", key,
                           k->min, k->max, value);
            return -EINVAL;
        }
        *(unsigned *)(void *)field = (unsigned)v;
        return 0;
    case SD_CFG_U64:
        if (base_parse_u64(value, 0, UINT64_MAX, &v, NULL, 0) < 0) {
            sd_config__err(err, err_len, "%s: expected an unsigned integer, found '%s'", key,
                           value);
            return -EINVAL;
        }
        *(uint64_t *)(void *)field = v;
        return 0;
    case SD_CFG_SIZE:
        if (base_parse_size_flags(value, BASE_PARSE_SIZE_STRICT, &v, NULL, 0) < 0) {
            sd_config__err(err, err_len,
                           "%s: expected a size such as 512MiB (suffixes K, M, G, T), found '%s'",
                           key, value);
            return -EINVAL;
        }
        *(uint64_t *)(void *)field = v;
        return 0;
    case SD_CFG_BOOL: {
        bool b = false;
        if (base_parse_bool(value, &b, NULL, 0) < 0) {
            sd_config__err(err, err_len, "%s: expected yes or no, found '%s'", key, value);
            return -EINVAL;
        }
        *(int *)(void *)field = b;
        return 0;
    }
    case SD_CFG_OP:
    case SD_CFG_DOORBELL:
    case SD_CFG_PAGES:
    case SD_CFG_PATH_MODE:
    case SD_CFG_LEVEL: {
        const struct base_enum *names = k->type == SD_CFG_OP          ? sd_job_op_names
                                        : k->type == SD_CFG_DOORBELL  ? sd_job_doorbell_names
                                        : k->type == SD_CFG_PAGES     ? sd_config__pages
                                        : k->type == SD_CFG_PATH_MODE ? sd_job_path_names
                                                                      : sd_config__levels;
        char why[SD_CONFIG_ERR_LEN - 64];
        int e = 0;
        if (base_parse_enum(value, names, &e, why, sizeof why) < 0) {
            sd_config__err(err, err_len, "%s: %s", key, why);
            return -EINVAL;
        }
        if (k->type == SD_CFG_OP)
            *(enum sd_job_op *)(void *)field = (enum sd_job_op)e;
        else if (k->type == SD_CFG_DOORBELL)
            *(enum sd_doorbell_mode *)(void *)field = (enum sd_doorbell_mode)e;
        else if (k->type == SD_CFG_PAGES)
            *(enum leasec_pool_pages *)(void *)field = (enum leasec_pool_pages)e;
        else if (k->type == SD_CFG_PATH_MODE)
            *(enum sd_job_path *)(void *)field = (enum sd_job_path)e;
        else
            *(int *)(void *)field = e;
        return 0;
    }
    }
    return -EINVAL;
}

/* Trims blanks at both ends in place; returns the start. */
static char *sd_config__trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

int sd_config_load(struct sd_config *cfg, const char *path, char *err, size_t err_len)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        int rc = -errno;
        sd_config__err(err, err_len, "%s: cannot open the config file: %s", path, strerror(-rc));
        return rc;
    }
    char line[SD_CONFIG_PATH_MAX + 128];
    unsigned lineno = 0;
    int rc = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        size_t n = strlen(line);
        if (n == sizeof line - 1 && line[n - 1] != '\n') {
            sd_config__err(err, err_len, "%s:%u: line longer than %zu bytes", path, lineno,
                           sizeof line - 2);
            rc = -EINVAL;
            break;
        }
        if (n > 0 && line[n - 1] == '\n')
            line[n - 1] = '\0';
        char *s = sd_config__trim(line);
        if (s[0] == '\0' || s[0] == '#')
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            sd_config__err(err, err_len, "%s:%u: expected 'key = value', found '%s'", path, lineno,
                           s);
            rc = -EINVAL;
            break;
        }
        *eq = '\0';
        char *key = sd_config__trim(s);
        char *value = sd_config__trim(eq + 1);
        char why[SD_CONFIG_ERR_LEN];
        if (strcmp(key, "config") == 0) {
            sd_config__err(err, err_len, "%s:%u: 'config' is a command-line option only", path,
                           lineno);
            rc = -EINVAL;
            break;
        }
        rc = sd_config_set(cfg, key, value, why, sizeof why);
        if (rc < 0) {
            sd_config__err(err, err_len, "%s:%u: %s", path, lineno, why);
            break;
        }
    }
    if (rc == 0 && ferror(f)) {
        rc = -EIO;
        sd_config__err(err, err_len, "%s: read error after line %u", path, lineno);
    }
    fclose(f);
    return rc;
}

int sd_config_key_get(size_t index, struct sd_config_key_info *info_p)
{
    if (index >= SD_CONFIG__NKEYS)
        return -ENOENT;
    const struct sd_config__key *k = &sd_config__keys[index];
    *info_p = (struct sd_config_key_info){
        .name = k->name, .arg = k->arg, .help = k->help, .is_flag = k->type == SD_CFG_BOOL};
    return 0;
}

void sd_config_usage(FILE *to)
{
    for (size_t i = 0; i < SD_CONFIG__NKEYS; i++) {
        const struct sd_config__key *k = &sd_config__keys[i];
        char lhs[64];
        snprintf(lhs, sizeof lhs, "--%s %s", k->name, k->arg);
        fprintf(to, "  %-32s %s\n", lhs, k->help);
    }
    fprintf(to, "  %-32s %s\n", "--config FILE",
            "'key = value' lines, same keys as these options; flags win");
    fprintf(to, "  %-32s %s\n", "-v, --verbose", "log every shard (log-level debug)");
}
