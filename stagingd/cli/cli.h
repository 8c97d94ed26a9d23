/* stagingd's command lines: `stagingd run | job | ctl | gen | verify | import`. Each
 * takes argv with argv[0] the subcommand's name and returns the process
 * exit status (2 for a usage error). Options are parsed with getopt_long:
 * `--opt V` and `--opt=V` both work, and -h / --help prints the usage on
 * stdout and returns 0. The functions may be called again in one process
 * (the tests do): each resets getopt. */
#ifndef STAGINGD_CLI_H
#define STAGINGD_CLI_H

#include <getopt.h>
#include <stdio.h>

#include "stagingd/daemon.h"

/* `stagingd run --control SOCK ...`: the daemon, until SIGTERM or quit. */
int sd_run_cli(int argc, char **argv);

/* `stagingd job --store DIR ...`: one job, its report, exit 0 (clean),
 * 3 (corrupt blocks found) or 1 (failures). */
int sd_job_cli(int argc, char **argv);

/* `stagingd ctl --control SOCK COMMAND...`: sends the words as one command
 * line, prints the reply, exits 0 on "ok", 1 on "error". */
int sd_ctl_cli(int argc, char **argv);

/* `stagingd gen --out DIR [options]`: prints a progress bar (stderr a tty,
 * or --progress) and a summary line to stderr; 0 success, 1 failure. */
int sd_gen_cli(int argc, char **argv);

/* `stagingd verify PATH [--quiet]`: verifies a store directory or a single
 * shard file and prints a summary to stderr; 0 valid, 1 invalid or
 * unreadable. */
int sd_verify_cli(int argc, char **argv);

/* `stagingd import --out DIR [options] FILE...`: writes a store from
 * vector files (docs/import.md), a progress line and a summary on stderr;
 * 0 success, 1 failure (nothing written), 2 usage. */
int sd_import_cli(int argc, char **argv);

/* Parses the options of `stagingd run` / `stagingd job` (argv[0] is the
 * subcommand) into @cfg: every --config FILE first, then every other flag
 * over it, so flags win. On success *@help_p says whether -h / --help was
 * given. Returns 0, or -EINVAL / -ENOENT / -errno with @err saying which
 * option or file line is wrong. */
int sd_cli_config_parse(int argc, char **argv, struct sd_config *cfg, char *err, size_t err_len,
                        int *help_p);

/* `stagingd job`'s own options: command line only, not config keys. The
 * strings point into argv. */
struct sd_cli_job_opts {
    const char *query;        /* --query FILE: the scan's queries */
    const char *query_index;  /* --query-index LIST: which rows of it */
    const char *query_format; /* --query-format FMT */
    int all;                  /* --all: every row */
    int json;                 /* --json: the report as JSON */
};

/* As sd_cli_config_parse, for `stagingd job`: also takes the job's own
 * options into *@jo_p (written on success). */
int sd_cli_job_parse(int argc, char **argv, struct sd_config *cfg, struct sd_cli_job_opts *jo_p,
                     char *err, size_t err_len, int *help_p);

/* ---- helpers shared by the command lines (cli_opt.c) ---- */

/* Resets getopt for a fresh parse of another argv (GNU getopt: optind 0)
 * and silences its own messages: the callers say what was wrong. */
void sd_cli__getopt_reset(void);

/* The message for getopt_long's '?' or ':' at argv[optind - 1]: "unknown
 * argument 'X'" or "X: expected a value, found none", written to @buf. */
void sd_cli__getopt_error(int c, int argc, char **argv, char *buf, size_t len);

#endif /* STAGINGD_CLI_H */
