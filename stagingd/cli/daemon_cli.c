/* `stagingd run` and `stagingd job`: the settings from --config FILE and
 * the flags (getopt_long over the daemon's key table), then the daemon. */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* getopt_long's values: keys of the table are SD_CLI__KEY + their index. */
enum {
    SD_CLI__CONFIG = 256,
    SD_CLI__VERBOSE,
    SD_CLI__HELP,
    SD_CLI__KEY,
};
#define SD_CLI__KEYS_MAX 64

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
 * -h/--help. Yes/no keys take an optional value (--list, --list=no), as a
 * bare flag means yes. */
/* Returns the number of options (keys + 3). */
static size_t sd_cli__options(struct option *opts, struct sd_config_key_info *keys)
{
    size_t n = 0;
    while (n < SD_CLI__KEYS_MAX && sd_config_key_get(n, &keys[n]) == 0) {
        opts[n] =
            (struct option){keys[n].name, keys[n].is_flag ? optional_argument : required_argument,
                            NULL, SD_CLI__KEY + (int)n};
        n++;
    }
    opts[n++] = (struct option){"config", required_argument, NULL, SD_CLI__CONFIG};
    opts[n++] = (struct option){"verbose", no_argument, NULL, SD_CLI__VERBOSE};
    opts[n++] = (struct option){"help", no_argument, NULL, SD_CLI__HELP};
    opts[n] = (struct option){NULL, 0, NULL, 0};
    return n;
}

int sd_cli_config_parse(int argc, char **argv, struct sd_config *cfg, char *err, size_t err_len,
                        int *help_p)
{
    struct option opts[SD_CLI__KEYS_MAX + 4];
    struct sd_config_key_info keys[SD_CLI__KEYS_MAX];
    const size_t nkeys = sd_cli__options(opts, keys) - 3;
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
    *help_p = help;
    return 0;
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
    fprintf(to, "  %-32s %s\n", "-h, --help", "this text");
}

static int sd_cli__daemon(int argc, char **argv, enum sd_daemon_mode mode)
{
    const char *cmd = argv[0];
    struct sd_config cfg;
    sd_config_default(&cfg);
    char err[SD_CONFIG_ERR_LEN];
    int help = 0;
    if (sd_cli_config_parse(argc, argv, &cfg, err, sizeof err, &help) < 0) {
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
