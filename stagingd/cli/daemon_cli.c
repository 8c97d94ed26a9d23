/* `stagingd run` and `stagingd job`: the settings from --config FILE and
 * the flags (getopt_long over the daemon's key table), then the daemon. */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "stagingd/import.h"
#include "stagingd/shard.h"

/* getopt_long's values: keys of the table are SD_CLI__KEY + their index. */
enum {
    SD_CLI__CONFIG = 256,
    SD_CLI__VERBOSE,
    SD_CLI__HELP,
    SD_CLI__QUERY, /* `job` only, from here to SD_CLI__JSON */
    SD_CLI__QUERY_INDEX,
    SD_CLI__QUERY_FORMAT,
    SD_CLI__ALL,
    SD_CLI__JSON,
    SD_CLI__KEY,
};
#define SD_CLI__KEYS_MAX 64
#define SD_CLI__EXTRA 8 /* options besides the keys, the terminator included */

static void sd_cli__err(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void sd_cli__err(char *err, size_t err_len, const char *fmt, ...)
{
    if (!err || err_len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

/* The getopt_long table: every config key, then --config, -v/--verbose and
 * -h/--help, and with @job `job`'s own options. Yes/no keys take an
 * optional value (--list, --list=no), as a bare flag means yes. Returns
 * the number of keys. */
static size_t sd_cli__options(struct option *opts, struct sd_config_key_info *keys, int job)
{
    size_t n = 0;
    while (n < SD_CLI__KEYS_MAX && sd_config_key_get(n, &keys[n]) == 0) {
        opts[n] =
            (struct option){keys[n].name, keys[n].is_flag ? optional_argument : required_argument,
                            NULL, SD_CLI__KEY + (int)n};
        n++;
    }
    const size_t nkeys = n;
    opts[n++] = (struct option){"config", required_argument, NULL, SD_CLI__CONFIG};
    opts[n++] = (struct option){"verbose", no_argument, NULL, SD_CLI__VERBOSE};
    opts[n++] = (struct option){"help", no_argument, NULL, SD_CLI__HELP};
    if (job) {
        opts[n++] = (struct option){"query", required_argument, NULL, SD_CLI__QUERY};
        opts[n++] = (struct option){"query-index", required_argument, NULL, SD_CLI__QUERY_INDEX};
        opts[n++] = (struct option){"query-format", required_argument, NULL, SD_CLI__QUERY_FORMAT};
        opts[n++] = (struct option){"all", no_argument, NULL, SD_CLI__ALL};
        opts[n++] = (struct option){"json", no_argument, NULL, SD_CLI__JSON};
    }
    opts[n] = (struct option){NULL, 0, NULL, 0};
    return nkeys;
}

/* The parse of sd_cli_config_parse and sd_cli_job_parse: @jo NULL for
 * `run`, whose command line has no job options. */
static int sd_cli__parse(int argc, char **argv, struct sd_config *cfg, struct sd_cli_job_opts *jo,
                         char *err, size_t err_len, int *help_p)
{
    struct option opts[SD_CLI__KEYS_MAX + SD_CLI__EXTRA];
    struct sd_config_key_info keys[SD_CLI__KEYS_MAX];
    const size_t nkeys = sd_cli__options(opts, keys, jo != NULL);
    struct sd_cli_job_opts j = {0};
    /* "+": stop at the first word that is not an option, which is refused
     * below; ":": a missing value is told apart from an unknown option. */
    static const char shorts[] = "+:hv";
    int c, help = 0;

    /* The files first, wherever --config stands, so every flag overrides
     * them. Anything else is looked at in the second pass. */
    sd_cli__getopt_reset();
    while ((c = getopt_long(argc, argv, shorts, opts, NULL)) != -1) {
        if (c != SD_CLI__CONFIG)
            continue;
        int rc = sd_config_load(cfg, optarg, err, err_len);
        if (rc < 0)
            return rc;
    }

    sd_cli__getopt_reset();
    while ((c = getopt_long(argc, argv, shorts, opts, NULL)) != -1) {
        if (c == 'h' || c == SD_CLI__HELP) {
            help = 1;
        } else if (c == 'v' || c == SD_CLI__VERBOSE) {
            cfg->log_level = BASE_LOG_DEBUG;
        } else if (c == SD_CLI__CONFIG) {
            continue;
        } else if (c == SD_CLI__QUERY) {
            j.query = optarg;
        } else if (c == SD_CLI__QUERY_INDEX) {
            j.query_index = optarg;
        } else if (c == SD_CLI__QUERY_FORMAT) {
            j.query_format = optarg;
        } else if (c == SD_CLI__ALL) {
            j.all = 1;
        } else if (c == SD_CLI__JSON) {
            j.json = 1;
        } else if (c >= SD_CLI__KEY) {
            const struct sd_config_key_info *k = &keys[c - SD_CLI__KEY];
            /* A bare yes/no flag means yes. */
            const char *value = optarg ? optarg : "yes";
            char why[SD_CONFIG_ERR_LEN];
            int rc = sd_config_set(cfg, k->name, value, why, sizeof why);
            if (rc < 0) {
                sd_cli__err(err, err_len, "--%s", why);
                return rc;
            }
        } else if (c == ':') {
            /* optopt is the option's value: which key lacks its value. */
            if (optopt >= SD_CLI__KEY && (size_t)(optopt - SD_CLI__KEY) < nkeys)
                sd_cli__err(err, err_len, "--%s: expected %s, found nothing",
                            keys[optopt - SD_CLI__KEY].name, keys[optopt - SD_CLI__KEY].arg);
            else if (optopt == SD_CLI__QUERY)
                sd_cli__err(err, err_len, "--query: expected a file, found nothing");
            else if (optopt == SD_CLI__QUERY_INDEX)
                sd_cli__err(err, err_len, "--query-index: expected rows (0,5-9), found nothing");
            else if (optopt == SD_CLI__QUERY_FORMAT)
                sd_cli__err(err, err_len, "--query-format: expected a format, found nothing");
            else
                sd_cli__err(err, err_len, "--config: expected a file, found nothing");
            return -EINVAL;
        } else {
            sd_cli__err(err, err_len, "unknown option '%s'", argv[optind - 1]);
            return -ENOENT;
        }
    }
    if (optind < argc) {
        sd_cli__err(err, err_len, "expected an option, found '%s'", argv[optind]);
        return -EINVAL;
    }
    if (jo)
        *jo = j;
    *help_p = help;
    return 0;
}

int sd_cli_config_parse(int argc, char **argv, struct sd_config *cfg, char *err, size_t err_len,
                        int *help_p)
{
    return sd_cli__parse(argc, argv, cfg, NULL, err, err_len, help_p);
}

int sd_cli_job_parse(int argc, char **argv, struct sd_config *cfg, struct sd_cli_job_opts *jo_p,
                     char *err, size_t err_len, int *help_p)
{
    return sd_cli__parse(argc, argv, cfg, jo_p, err, err_len, help_p);
}

static void sd_cli__daemon_usage(FILE *to, enum sd_daemon_mode mode)
{
    if (mode == SD_DAEMON_RUN)
        fprintf(to, "usage: stagingd run --control SOCK [--store DIR] --agent SOCK[,SOCK...] "
                    "[options]\n"
                    "  serves jobs from the control socket (stagingd ctl --control SOCK job ...)\n"
                    "  until SIGTERM, SIGINT or 'quit'; logs to stderr.\n");
    else
        fprintf(to,
                "usage: stagingd job --store DIR --agent SOCK[,SOCK...] [--op verify|scan|both] "
                "[options]\n"
                "  runs one job over every shard of the store, prints the results and exits:\n"
                "  0 every shard clean, 3 corrupt blocks found, 1 failures, 2 usage.\n");
    fprintf(to, "options (--key VALUE or --key=VALUE; also as 'key = value' lines in --config "
                "FILE):\n");
    sd_config_usage(to);
    if (mode == SD_DAEMON_ONESHOT)
        fprintf(to,
                "job only (command line, not config keys):\n"
                "  %-32s %s\n  %-32s %s\n  %-32s %s\n  %-32s %s\n  %-32s %s\n",
                "--query FILE", "the scan's queries: rows of a .npy, .fvecs or .bvecs file",
                "--query-index LIST", "which rows: 0,5-9 (default: every row, --all)", "--all",
                "every row of the query file (at most 10000)", "--query-format FMT",
                "auto (by the name), npy, fvecs or bvecs", "--json",
                "the report as one JSON document on stdout");
    fprintf(to, "  %-32s %s\n", "-h, --help", "this text");
}

/* `job --query`: loads the queries @jo names into @q and points the job's
 * settings at them, after checking them against the store. Returns 0, or
 * -1 after saying why (a usage error). */
static int sd_cli__queries(const char *cmd, const struct sd_cli_job_opts *jo, struct sd_config *cfg,
                           struct sd_vec_queries *q)
{
    if (!jo->query) {
        const char *lone = jo->query_index    ? "--query-index"
                           : jo->all          ? "--all"
                           : jo->query_format ? "--query-format"
                                              : NULL;
        if (lone) {
            fprintf(stderr,
                    "stagingd %s: %s picks rows of a query file: expected --query FILE, "
                    "found none\n",
                    cmd, lone);
            return -1;
        }
        cfg->job.json = jo->json;
        return 0;
    }
    if (!(cfg->op & SD_JOB_SCAN)) {
        fprintf(stderr,
                "stagingd %s: --query: the queries are the scan's: expected --op scan or "
                "both, found %s\n",
                cmd, sd_job_op_name(cfg->op));
        return -1;
    }
    if (jo->all && jo->query_index) {
        fprintf(stderr, "stagingd %s: --all and --query-index '%s': pick one\n", cmd,
                jo->query_index);
        return -1;
    }
    uint32_t format = 0;
    if (jo->query_format && sd_vec_format_parse(jo->query_format, &format) < 0) {
        fprintf(stderr,
                "stagingd %s: --query-format: expected auto, npy, fvecs or bvecs, found "
                "'%s'\n",
                cmd, jo->query_format);
        return -1;
    }
    char err[SD_ERR_LEN];
    if (sd_vec_queries_load(jo->query, format, jo->all ? NULL : jo->query_index, SD_JOB_QUERIES_MAX,
                            err, sizeof err, q) < 0) {
        fprintf(stderr, "stagingd %s: --query: %s\n", cmd, err);
        return -1;
    }
    /* The dims against the store now, so a mismatch is a usage error
     * (the job checks again, and f16 ranges, when it starts). */
    struct sd_store *st = NULL;
    if (sd_store_open(cfg->store, err, sizeof err, &st) == 0) {
        for (size_t i = 0; i < sd_store_count(st); i++) {
            const struct sd_store_entry *e = sd_store_entry_get(st, i);
            if (e->dim != q->dim) {
                fprintf(stderr,
                        "stagingd %s: --query %s: queries of dim %u, but %s/%s holds records of "
                        "dim %u: a scan's query has the records' dim\n",
                        cmd, jo->query, q->dim, cfg->store, e->name, e->dim);
                sd_store_close(st);
                sd_vec_queries_free(q);
                return -1;
            }
        }
        sd_store_close(st);
    }
    cfg->job.queries = q->v;
    cfg->job.query_ids = q->ids;
    cfg->job.nqueries = (uint32_t)q->n;
    cfg->job.query_dim = q->dim;
    cfg->job.query_source = jo->query;
    cfg->job.json = jo->json;
    return 0;
}

static int sd_cli__daemon(int argc, char **argv, enum sd_daemon_mode mode)
{
    const char *cmd = argv[0];
    struct sd_config cfg;
    sd_config_default(&cfg);
    char err[SD_CONFIG_ERR_LEN];
    int help = 0;
    struct sd_cli_job_opts jo = {0};
    if ((mode == SD_DAEMON_ONESHOT
             ? sd_cli_job_parse(argc, argv, &cfg, &jo, err, sizeof err, &help)
             : sd_cli_config_parse(argc, argv, &cfg, err, sizeof err, &help)) < 0) {
        fprintf(stderr, "stagingd %s: %s\n", cmd, err);
        return 2;
    }
    if (help) {
        sd_cli__daemon_usage(stdout, mode);
        return 0;
    }
    if (mode == SD_DAEMON_ONESHOT && !cfg.store[0]) {
        fprintf(stderr, "stagingd %s: expected --store DIR, found none\n", cmd);
        sd_cli__daemon_usage(stderr, mode);
        return 2;
    }
    if (mode == SD_DAEMON_RUN && !cfg.control[0]) {
        fprintf(stderr, "stagingd %s: expected --control SOCK (jobs come from it), found none\n",
                cmd);
        sd_cli__daemon_usage(stderr, mode);
        return 2;
    }
    /* Borrowed by the job's settings until the daemon is gone. */
    struct sd_vec_queries queries = {0};
    if (sd_cli__queries(cmd, &jo, &cfg, &queries) < 0)
        return 2;
    /* One sink for the daemon and every module it makes: stderr (or the
     * log-file, which SIGHUP reopens), stamped, with the pid, coloured and
     * with a progress line on a terminal. */
    struct base_log_file *lf = NULL;
    const unsigned lflags = BASE_LOG_FILE_TIME | BASE_LOG_FILE_PID | BASE_LOG_FILE_COLOUR;
    int rc = cfg.log_path[0] ? base_log_file_open(cfg.log_path, "stagingd", lflags, &lf)
                             : base_log_file_fd(STDERR_FILENO, "stagingd", lflags, &lf);
    if (rc < 0) {
        fprintf(stderr, "stagingd %s: the log %s: %s\n", cmd,
                cfg.log_path[0] ? cfg.log_path : "on stderr", strerror(-rc));
        sd_vec_queries_free(&queries);
        return 1;
    }
    cfg.log = base_log_file_sink(lf, cfg.log_level);
    cfg.log_file = lf;
    base_log_default_set(&cfg.log);
    sd_daemon_signals_block();
    struct sd_daemon *d = NULL;
    int status = 1;
    if (sd_daemon_create(&cfg, mode, &d) < 0)
        goto out;
    if (mode == SD_DAEMON_ONESHOT && sd_daemon_job_add(d, cfg.store, cfg.op, 0) < 0) {
        sd_daemon_destroy(d);
        goto out;
    }
    status = sd_daemon_run(d);
    sd_daemon_destroy(d);
    if (mode == SD_DAEMON_RUN)
        base_log(&cfg.log, BASE_LOG_INFO, "daemon", "exiting with status %d", status);
out:
    base_log_default_set(NULL);
    base_log_file_destroy(lf);
    sd_vec_queries_free(&queries);
    return status;
}

int sd_run_cli(int argc, char **argv)
{
    return sd_cli__daemon(argc, argv, SD_DAEMON_RUN);
}

int sd_job_cli(int argc, char **argv)
{
    return sd_cli__daemon(argc, argv, SD_DAEMON_ONESHOT);
}
