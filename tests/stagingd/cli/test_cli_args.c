/* stagingd's command lines, in-process (stagingd/cli/): the run/job options
 * taken as `--opt V` and `--opt=V`, yes/no flags bare or with a value,
 * --config read first and overridden by flags, -v, -h; and what a bad
 * option, a missing value or a stray word is told; `job`'s own options
 * (--query, --query-index, --all, --json), which `run` does not take. Then
 * -h / --help of every subcommand prints its usage and succeeds, and
 * `import` takes its options and refuses what it cannot use. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "stagingd/shard.h"

static char err[SD_CONFIG_ERR_LEN];

/* Parses the NULL-terminated @args after "job" into a default config. */
static int parse(struct sd_config *cfg, int *help_p, const char *const *args)
{
    char *argv[64];
    int argc = 0;
    argv[argc++] = (char *)"job";
    for (; *args; args++)
        argv[argc++] = (char *)*args;
    argv[argc] = NULL;
    sd_config_default(cfg);
    err[0] = '\0';
    *help_p = -1;
    return sd_cli_config_parse(argc, argv, cfg, err, sizeof err, help_p);
}

START_TEST(options_take_their_value_after_a_space_or_an_equals_sign)
{
    struct sd_config a, b;
    int help;
    const char *spaced[] = {"--store", "/s",      "--inflight",   "6",   "--op",
                            "both",    "--agent", "/a,/b",        "--k", "3",
                            "--pages", "small",   "--rate-limit", "1M",  NULL};
    const char *joined[] = {"--store=/s", "--inflight=6",  "--op=both",       "--agent=/a,/b",
                            "--k=3",      "--pages=small", "--rate-limit=1M", NULL};
    ck_assert_msg(parse(&a, &help, spaced) == 0, "%s", err);
    ck_assert_int_eq(help, 0);
    ck_assert_msg(parse(&b, &help, joined) == 0, "%s", err);
    ck_assert_int_eq(help, 0);
    ck_assert_str_eq(a.store, b.store);
    ck_assert_uint_eq(a.job.inflight, b.job.inflight);
    ck_assert_int_eq(a.op, b.op);
    ck_assert_uint_eq(a.nagents, b.nagents);
    for (unsigned i = 0; i < a.nagents; i++)
        ck_assert_str_eq(a.agents[i], b.agents[i]);
    ck_assert_uint_eq(a.job.k, b.job.k);
    ck_assert_int_eq(a.pages, b.pages);
    ck_assert_uint_eq(a.job.rate_limit, b.job.rate_limit);
    ck_assert_str_eq(a.store, "/s");
    ck_assert_uint_eq(a.job.inflight, 6);
    ck_assert_int_eq(a.op, SD_JOB_BOTH);
    ck_assert_uint_eq(a.nagents, 2);
    ck_assert_str_eq(a.agents[0], "/a");
    ck_assert_str_eq(a.agents[1], "/b");
    ck_assert_uint_eq(a.job.k, 3);
    ck_assert_int_eq(a.pages, LEASEC_POOL_PAGES_SMALL);
    ck_assert_uint_eq(a.job.rate_limit, 1u << 20);
}
END_TEST

START_TEST(yes_no_flags_are_bare_or_take_an_equals_value)
{
    struct sd_config c;
    int help;
    const char *bare[] = {"--cpu-verify", "--list", NULL};
    ck_assert_int_eq(parse(&c, &help, bare), 0);
    ck_assert_int_eq(c.job.cpu_verify, 1);
    ck_assert_int_eq(c.job.list, 1);
    const char *valued[] = {"--cpu-verify", "--cpu-verify=no", "--list=off", NULL};
    ck_assert_int_eq(parse(&c, &help, valued), 0);
    ck_assert_int_eq(c.job.cpu_verify, 0);
    ck_assert_int_eq(c.job.list, 0);
    /* As before getopt: a yes/no flag never takes the next word. */
    const char *spaced[] = {"--cpu-verify", "no", NULL};
    ck_assert_int_eq(parse(&c, &help, spaced), -EINVAL);
    ck_assert_str_eq(err, "expected an option, found 'no'");
    const char *bad[] = {"--list=perhaps", NULL};
    ck_assert_int_eq(parse(&c, &help, bad), -EINVAL);
    ck_assert_str_eq(err, "--list: expected yes or no, found 'perhaps'");
}
END_TEST

START_TEST(config_file_is_read_first_and_flags_override_it)
{
    char path[] = "/tmp/sdcli-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    static const char text[] = "inflight = 9\nk = 5\nop = scan\n";
    ck_assert_int_eq(write(fd, text, sizeof text - 1), (ssize_t)sizeof text - 1);
    close(fd);
    struct sd_config c;
    int help;
    /* The flag stands before --config and still wins. */
    const char *args[] = {"--k", "7", "--config", path, NULL};
    ck_assert_msg(parse(&c, &help, args) == 0, "%s", err);
    ck_assert_uint_eq(c.job.inflight, 9);
    ck_assert_uint_eq(c.job.k, 7);
    ck_assert_int_eq(c.op, SD_JOB_SCAN);
    const char *joined[] = {"--config=", NULL};
    ck_assert_int_eq(parse(&c, &help, joined), -ENOENT);
    char eq[64];
    snprintf(eq, sizeof eq, "--config=%s", path);
    const char *args2[] = {eq, "--op", "verify", NULL};
    ck_assert_int_eq(parse(&c, &help, args2), 0);
    ck_assert_uint_eq(c.job.inflight, 9);
    ck_assert_int_eq(c.op, SD_JOB_VERIFY);
    unlink(path);
    const char *missing[] = {"--config", "/nonexistent/x.conf", NULL};
    ck_assert_int_eq(parse(&c, &help, missing), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/x.conf: cannot open the config file"));
}
END_TEST

START_TEST(verbose_and_help_are_short_or_long)
{
    struct sd_config c;
    int help;
    const char *v[] = {"-v", NULL};
    ck_assert_int_eq(parse(&c, &help, v), 0);
    ck_assert_int_eq(c.log_level, BASE_LOG_DEBUG);
    const char *verbose[] = {"--verbose", "--log-level", "warn", NULL};
    ck_assert_int_eq(parse(&c, &help, verbose), 0);
    ck_assert_int_eq(c.log_level, BASE_LOG_WARN); /* flags apply in order */
    const char *h[] = {"-h", NULL};
    ck_assert_int_eq(parse(&c, &help, h), 0);
    ck_assert_int_eq(help, 1);
    const char *hl[] = {"--store", "/s", "--help", NULL};
    ck_assert_int_eq(parse(&c, &help, hl), 0);
    ck_assert_int_eq(help, 1);
}
END_TEST

START_TEST(bad_options_missing_values_and_stray_words_are_named)
{
    struct sd_config c;
    int help;
    const char *unknown[] = {"--store", "/s", "--inflght", "3", NULL};
    ck_assert_int_eq(parse(&c, &help, unknown), -ENOENT);
    ck_assert_str_eq(err, "unknown option '--inflght'");
    const char *missing[] = {"--store", "/s", "--inflight", NULL};
    ck_assert_int_eq(parse(&c, &help, missing), -EINVAL);
    ck_assert_str_eq(err, "--inflight: expected N, found nothing");
    const char *no_file[] = {"--config", NULL};
    ck_assert_int_eq(parse(&c, &help, no_file), -EINVAL);
    ck_assert_str_eq(err, "--config: expected a file, found nothing");
    const char *value[] = {"--inflight", "0", NULL};
    ck_assert_int_eq(parse(&c, &help, value), -EINVAL);
    ck_assert_str_eq(err, "--inflight: expected an integer in 1..1024, found '0'");
    const char *stray[] = {"--store", "/s", "verify", NULL};
    ck_assert_int_eq(parse(&c, &help, stray), -EINVAL);
    ck_assert_str_eq(err, "expected an option, found 'verify'");
    const char *short_opt[] = {"-x", NULL};
    ck_assert_int_eq(parse(&c, &help, short_opt), -ENOENT);
    ck_assert_str_eq(err, "unknown option '-x'");
}
END_TEST

START_TEST(job_takes_query_and_json_options_run_does_not)
{
    struct sd_config c;
    struct sd_cli_job_opts jo;
    int help;
    char *argv[] = {(char *)"job",
                    (char *)"--query",
                    (char *)"/q.fvecs",
                    (char *)"--query-index=1,4-6",
                    (char *)"--json",
                    (char *)"--all",
                    (char *)"--query-format",
                    (char *)"fvecs",
                    (char *)"--op",
                    (char *)"scan",
                    NULL};
    sd_config_default(&c);
    ck_assert_msg(sd_cli_job_parse(10, argv, &c, &jo, err, sizeof err, &help) == 0, "%s", err);
    ck_assert_str_eq(jo.query, "/q.fvecs");
    ck_assert_str_eq(jo.query_index, "1,4-6");
    ck_assert_str_eq(jo.query_format, "fvecs");
    ck_assert_int_eq(jo.all, 1);
    ck_assert_int_eq(jo.json, 1);
    ck_assert_int_eq(c.op, SD_JOB_SCAN);
    /* `run` has no query: the option is unknown there. */
    char *run[] = {(char *)"run", (char *)"--json", NULL};
    sd_config_default(&c);
    ck_assert_int_eq(sd_cli_config_parse(2, run, &c, err, sizeof err, &help), -ENOENT);
    ck_assert_str_eq(err, "unknown option '--json'");
    char *missing[] = {(char *)"job", (char *)"--query", NULL};
    ck_assert_int_eq(sd_cli_job_parse(2, missing, &c, &jo, err, sizeof err, &help), -EINVAL);
    ck_assert_str_eq(err, "--query: expected a file, found nothing");
    /* --query-seed is still its own key, not a prefix of --query. */
    char *seed[] = {(char *)"job", (char *)"--query-seed", (char *)"9", NULL};
    sd_config_default(&c);
    ck_assert_int_eq(sd_cli_job_parse(3, seed, &c, &jo, err, sizeof err, &help), 0);
    ck_assert_uint_eq(c.job.query_seed, 9);
    ck_assert_ptr_null(jo.query);
}
END_TEST

/* Runs @fn(@argv) with stdout in a file and returns what it printed. */
static char *capture_stdout(int (*fn)(int, char **), int argc, char **argv, int *status_p)
{
    char path[] = "/tmp/sdcli-out-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    fflush(stdout);
    int saved = dup(STDOUT_FILENO);
    ck_assert_int_ge(saved, 0);
    ck_assert_int_ge(dup2(fd, STDOUT_FILENO), 0);
    *status_p = fn(argc, argv);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    off_t len = lseek(fd, 0, SEEK_END);
    char *text = calloc(1, (size_t)len + 1);
    ck_assert_ptr_nonnull(text);
    ck_assert_int_eq(pread(fd, text, (size_t)len, 0), len);
    close(fd);
    unlink(path);
    return text;
}

START_TEST(every_subcommand_prints_its_usage_for_h_and_help)
{
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = {{"run", sd_run_cli}, {"job", sd_job_cli},       {"ctl", sd_ctl_cli},
                {"gen", sd_gen_cli}, {"verify", sd_verify_cli}, {"import", sd_import_cli}};
    static const char *const flags[] = {"-h", "--help"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        for (size_t f = 0; f < 2; f++) {
            char *argv[] = {(char *)cmds[i].name, (char *)flags[f], NULL};
            int st = -1;
            char *out = capture_stdout(cmds[i].fn, 2, argv, &st);
            char want[64];
            snprintf(want, sizeof want, "usage: stagingd %s", cmds[i].name);
            ck_assert_msg(st == 0, "stagingd %s %s exited %d", cmds[i].name, flags[f], st);
            ck_assert_msg(strncmp(out, want, strlen(want)) == 0, "stagingd %s %s printed: %s",
                          cmds[i].name, flags[f], out);
            free(out);
        }
    }
}
END_TEST

START_TEST(ctl_and_gen_take_their_options_either_way)
{
    /* No control socket there: ctl gets as far as connecting (1), not usage (2). */
    char *spaced[] = {(char *)"ctl", (char *)"--control", (char *)"/nonexistent/ctl.sock",
                      (char *)"stats", NULL};
    ck_assert_int_eq(sd_ctl_cli(4, spaced), 1);
    char *joined[] = {(char *)"ctl", (char *)"stats", (char *)"--control=/nonexistent/ctl.sock",
                      NULL};
    ck_assert_int_eq(sd_ctl_cli(3, joined), 1);
    char *no_command[] = {(char *)"ctl", (char *)"--control=/x", NULL};
    ck_assert_int_eq(sd_ctl_cli(2, no_command), 2);
    char *unknown[] = {(char *)"ctl", (char *)"--socket", (char *)"/x", (char *)"stats", NULL};
    ck_assert_int_eq(sd_ctl_cli(4, unknown), 2);

    char dir[] = "/tmp/sdcli-gen-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char out[64];
    snprintf(out, sizeof out, "--out=%s/s", dir);
    char *gen[] = {
        (char *)"gen",     out, (char *)"--size=64K", (char *)"--shard-size", (char *)"32K",
        (char *)"--quiet", NULL};
    ck_assert_int_eq(sd_gen_cli(6, gen), 0);
    char store[64];
    snprintf(store, sizeof store, "%s/s", dir);
    char *verify[] = {(char *)"verify", (char *)"--quiet", store, NULL};
    ck_assert_int_eq(sd_verify_cli(3, verify), 0);
    char *two_paths[] = {(char *)"verify", store, store, NULL};
    ck_assert_int_eq(sd_verify_cli(3, two_paths), 2);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(import_takes_its_options_and_refuses_what_it_cannot_use)
{
    char dir[] = "/tmp/sdcli-imp-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char file[64], gt[64], out[96], store[64];
    snprintf(file, sizeof file, "%s/a.fvecs", dir);
    snprintf(gt, sizeof gt, "%s/g.ivecs", dir);
    snprintf(store, sizeof store, "%s/s", dir);
    snprintf(out, sizeof out, "--out=%s", store);
    FILE *f = fopen(file, "wb");
    ck_assert_ptr_nonnull(f);
    for (int r = 0; r < 20; r++) {
        int32_t dim = 4;
        float v[4] = {(float)r, 1, 2, 3};
        fwrite(&dim, 4, 1, f);
        fwrite(v, 4, 4, f);
    }
    fclose(f);
    f = fopen(gt, "wb");
    ck_assert_ptr_nonnull(f);
    const int32_t ids[3] = {2, 0, 1};
    fwrite(ids, 4, 3, f);
    fclose(f);
    char *no_file[] = {(char *)"import", out, NULL};
    ck_assert_int_eq(sd_import_cli(2, no_file), 2);
    char *no_out[] = {(char *)"import", file, NULL};
    ck_assert_int_eq(sd_import_cli(2, no_out), 2);
    char *both[] = {(char *)"import", (char *)"--check", out, file, NULL};
    ck_assert_int_eq(sd_import_cli(4, both), 2);
    char *type[] = {(char *)"import", out, (char *)"--type", (char *)"f64", file, NULL};
    ck_assert_int_eq(sd_import_cli(5, type), 2);
    char *size[] = {(char *)"import", out, (char *)"--shard-size=1KB", file, NULL};
    ck_assert_int_eq(sd_import_cli(4, size), 2);
    char *fmt[] = {(char *)"import", out, (char *)"--format", (char *)"csv", file, NULL};
    ck_assert_int_eq(sd_import_cli(5, fmt), 2);
    /* Ground truth is refused as data (1, nothing written), checked with --check. */
    char *as_data[] = {(char *)"import", out, (char *)"--quiet", gt, NULL};
    ck_assert_int_eq(sd_import_cli(4, as_data), 1);
    char *check[] = {(char *)"import", (char *)"--check", (char *)"--quiet", gt, file, NULL};
    ck_assert_int_eq(sd_import_cli(5, check), 0);
    /* Options either way, files anywhere among them. */
    char *good[] = {(char *)"import",
                    file,
                    (char *)"--shard-size",
                    (char *)"128",
                    (char *)"--type=f16",
                    out,
                    (char *)"--no-fsync",
                    (char *)"--quiet",
                    NULL};
    ck_assert_int_eq(sd_import_cli(8, good), 0);
    char e[SD_ERR_LEN];
    struct sd_store *st = NULL;
    ck_assert_msg(sd_store_open(store, e, sizeof e, &st) == 0, "%s", e);
    ck_assert_uint_eq(sd_store_count(st), 2); /* 20 rows of 8 bytes, 16 a shard */
    ck_assert_uint_eq(sd_store_entry_get(st, 0)->record_type, SD_RECORD_F16);
    sd_store_close(st);
    char *again[] = {(char *)"import", out, (char *)"--quiet", file, NULL};
    ck_assert_int_eq(sd_import_cli(4, again), 1); /* not empty, no --force */
    char *force[] = {(char *)"import", out, (char *)"--force", (char *)"--quiet", file, NULL};
    ck_assert_int_eq(sd_import_cli(5, force), 0);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

static Suite *cli_suite(void)
{
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("cli");
    tcase_add_test(tc, options_take_their_value_after_a_space_or_an_equals_sign);
    tcase_add_test(tc, yes_no_flags_are_bare_or_take_an_equals_value);
    tcase_add_test(tc, config_file_is_read_first_and_flags_override_it);
    tcase_add_test(tc, verbose_and_help_are_short_or_long);
    tcase_add_test(tc, bad_options_missing_values_and_stray_words_are_named);
    tcase_add_test(tc, every_subcommand_prints_its_usage_for_h_and_help);
    tcase_add_test(tc, ctl_and_gen_take_their_options_either_way);
    tcase_add_test(tc, job_takes_query_and_json_options_run_does_not);
    tcase_add_test(tc, import_takes_its_options_and_refuses_what_it_cannot_use);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(cli_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
