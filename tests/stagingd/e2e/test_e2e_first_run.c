/* What a first run of stagingd meets (issue #13), with the real binary:
 * usage and help that do no work, a job with no agent that says so at once
 * and ends with a clear FAILED, and a segment refused for a pin budget
 * that names the budget, the numbers and the option to change. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "e2e_util.h"

#define RUN_MS 60000

struct first_run {
    struct e2e_env e;
    char out[256], err[256];
};

static void first_run_init(struct first_run *f)
{
    e2e_env_init(&f->e);
    snprintf(f->out, sizeof f->out, "%s/out.txt", f->e.dir);
    snprintf(f->err, sizeof f->err, "%s/err.txt", f->e.dir);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* e2e_run into fresh output files (e2e_spawn appends). */
static int run_fresh(struct first_run *f, const char *const *argv)
{
    unlink(f->out);
    unlink(f->err);
    return e2e_run(argv, f->out, f->err, RUN_MS);
}

/* The last line of @text (static storage). */
static const char *last_line(const char *text)
{
    static char line[2048];
    size_t n = strlen(text);
    while (n && text[n - 1] == '\n')
        n--;
    size_t start = n;
    while (start && text[start - 1] != '\n')
        start--;
    snprintf(line, sizeof line, "%.*s", (int)(n - start), text + start);
    return line;
}

START_TEST(test_usage_and_help_do_no_work_and_exit_as_documented)
{
    struct first_run f;
    first_run_init(&f);
    const char *bare[] = {e2e_stagingd, NULL};
    ck_assert_int_eq(run_fresh(&f, bare), 2);
    char *err = e2e_slurp(f.err);
    ck_assert_msg(strncmp(err, "usage: stagingd", 15) == 0, "stderr: %s", err);
    ck_assert_msg(strstr(err, "self check") == NULL, "the self check ran: %s", err);
    free(err);

    static const char *const helps[] = {"-h", "--help"};
    for (int h = 0; h < 2; h++) {
        const char *argv[] = {e2e_stagingd, helps[h], NULL};
        ck_assert_int_eq(run_fresh(&f, argv), 0);
        char *out = e2e_slurp(f.out);
        ck_assert_msg(strncmp(out, "usage: stagingd", 15) == 0, "%s: %s", helps[h], out);
        free(out);
        static const char *const cmds[] = {"run", "job", "ctl", "gen", "verify"};
        for (int c = 0; c < 5; c++) {
            const char *sub[] = {e2e_stagingd, cmds[c], helps[h], NULL};
            ck_assert_int_eq(run_fresh(&f, sub), 0);
            out = e2e_slurp(f.out);
            char want[64];
            snprintf(want, sizeof want, "usage: stagingd %s", cmds[c]);
            ck_assert_msg(strncmp(out, want, strlen(want)) == 0, "%s %s: %s", cmds[c], helps[h],
                          out);
            free(out);
        }
    }
    const char *unknown[] = {e2e_stagingd, "jb", NULL};
    ck_assert_int_eq(run_fresh(&f, unknown), 2);
    err = e2e_slurp(f.err);
    ck_assert_ptr_nonnull(strstr(err, "unknown command 'jb'"));
    free(err);
    e2e_env_cleanup(&f.e);
}
END_TEST

START_TEST(test_job_without_an_agent_says_so_at_once_and_ends_failed)
{
    struct first_run f;
    first_run_init(&f);
    e2e_store_make(&f.e, 8, 64 * 1024, 16, 0, 0xf125);
    /* No agent is started on f.e.sock. Options both ways: --opt=V, --opt V. */
    char store_opt[256];
    snprintf(store_opt, sizeof store_opt, "--store=%s", f.e.store);
    const char *argv[] = {e2e_stagingd,      "job", store_opt, "--pages=small", "--agent", f.e.sock,
                          "--agent-timeout", "8",   NULL};
    uint64_t t0 = now_ms();
    pid_t pid = e2e_spawn(argv, f.out, f.err);
    char want[320];
    snprintf(want, sizeof want, "no GPU agent answers at %s", f.e.sock);
    ck_assert_msg(e2e_wait_count(f.err, want, 1, 2000), "no word about the agent within 2 s");
    ck_assert_uint_lt(now_ms() - t0, 2500);
    int st = e2e_wait(pid, RUN_MS);
    char *err = e2e_slurp(f.err), *out = e2e_slurp(f.out);
    ck_assert_msg(st == 1, "exit %d\n%s", st, err);
    snprintf(want, sizeof want, "lease-agent-host --socket %s", f.e.sock);
    ck_assert_msg(strstr(err, want), "no hint how to start an agent:\n%s", err);
    ck_assert_ptr_nonnull(strstr(err, "--agent PATH"));
    ck_assert_uint_eq(e2e_count(err, "no GPU agent answers at"), 1); /* said once */
    ck_assert_msg(strstr(err, "still no GPU agent after"), "no word while waiting:\n%s", err);
    const char *last = last_line(err);
    ck_assert_msg(strstr(last, "FAILED: 0 of 8 shard(s) done, 0 failed, 8 not run") &&
                      strstr(last, "exit status 1"),
                  "last line: %s", last);
    /* The eight shards not run are one line of the report. */
    ck_assert_uint_eq(e2e_count(out, "NOT RUN"), 1);
    ck_assert_ptr_nonnull(strstr(out, "  NOT RUN: 8 shard(s) (shard-000000.sds, shard-000001.sds, "
                                      "shard-000002.sds and 5 more): no GPU agent ready at"));
    free(err);
    free(out);
    e2e_env_cleanup(&f.e);
}
END_TEST

START_TEST(test_segment_refused_for_the_pin_budget_names_budget_numbers_and_option)
{
    struct first_run f;
    first_run_init(&f);
    e2e_store_make(&f.e, 8, 64 * 1024, 16, 0, 0xf126);
    e2e_agent_start_budgets(&f.e, "1M", "2M");
    /* Two 2 MiB PINNED segments, each more than the agent's 1 MiB. */
    const char *argv[] = {e2e_stagingd,
                          "job",
                          "--store",
                          f.e.store,
                          "--agent",
                          f.e.sock,
                          "--pinned-pool",
                          "4MiB",
                          "--segment-size=2MiB",
                          "--pages",
                          "small",
                          "--agent-timeout",
                          "20",
                          NULL};
    uint64_t t0 = now_ms();
    int st = run_fresh(&f, argv);
    char *err = e2e_slurp(f.err), *out = e2e_slurp(f.out);
    ck_assert_msg(st == 1, "exit %d\n%s", st, err);
    ck_assert_uint_lt(now_ms() - t0, 15000); /* fails fast, not shard by shard */
    ck_assert_uint_eq(e2e_count(err, "for its PINNED pin budget"), 1); /* once per class */
    ck_assert_msg(strstr(err, "start the agent with --pinned-budget 4.0 MiB"), "%s", err);
    ck_assert_ptr_nonnull(strstr(err, "at least 2.0 MiB"));
    ck_assert_ptr_nonnull(strstr(err, "--pinned-pool, --segment-size"));
    ck_assert_ptr_nonnull(strstr(err, "of 1048576 in use")); /* the agent's own numbers */
    ck_assert_ptr_nonnull(strstr(last_line(err), "FAILED: 0 of 8 shard(s) done, 8 failed"));
    ck_assert_ptr_nonnull(strstr(out, "  FAILED: 8 shard(s) (shard-000000.sds"));
    free(err);
    free(out);
    e2e_env_cleanup(&f.e);
}
END_TEST

void e2e_first_run_tests(TCase *tc)
{
    tcase_add_test(tc, test_usage_and_help_do_no_work_and_exit_as_documented);
    tcase_add_test(tc, test_job_without_an_agent_says_so_at_once_and_ends_failed);
    tcase_add_test(tc, test_segment_refused_for_the_pin_budget_names_budget_numbers_and_option);
}
