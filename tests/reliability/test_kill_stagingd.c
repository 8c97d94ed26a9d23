/* stagingd killed at random points (docs/reliability.md): a lease-agent-host
 * serves a small store; `stagingd job --op both` starts again and again and
 * is SIGKILLed after a random delay (seeded, printed) anywhere from its
 * start-up to its last release, 200 times (1000 with
 * LEASE_RELIABILITY_LONG=1, `make soak`). After each kill the agent must
 * reclaim everything of the dead client (no client, lease or segment left:
 * its own STATS), every 50 kills and at the end a job runs to completion
 * with every shard verified and scanned exactly once, and over the whole
 * loop the agent's fd count does not move and its RSS stays flat.
 *
 * argv[1]: stagingd, argv[2]: lease-agent-host. */
#include <check.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "e2e_util.h"
#include "rel_util.h"

#define KIB (1ull << 10)
#define SHARDS 8

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void job_argv(const struct e2e_env *e, const char **argv)
{
    const char *a[] = {e2e_stagingd, "job",         "--store",         e->store,
                       "--agent",    e->sock,       "--op",            "both",
                       "--inflight", "3",           "--agent-timeout", "10",
                       "--pages",    "small",       "--list",          NULL};
    memcpy(argv, a, sizeof a);
}

/* A whole job: exit 0, every shard verified and scanned once. */
static void full_job(struct e2e_env *e, const char *out, const char *err)
{
    const char *argv[32];
    job_argv(e, argv);
    unlink(out);
    unlink(err);
    int st = e2e_run(argv, out, err, 60000);
    char *text = e2e_slurp(out), *etext = e2e_slurp(err);
    ck_assert_msg(st == 0, "a job after the kills exited %d\n%s\n%s", st, text, etext);
    struct e2e_report r;
    e2e_report_parse(text, &r);
    for (int i = 0; i < SHARDS; i++)
        ck_assert_msg(r.verify_ok[i] == 1 && r.scan_rows[i] == 1,
                      "shard %d: %u verify rows, %u scan rows\n%s", i, r.verify_ok[i],
                      r.scan_rows[i], text);
    ck_assert(r.exactly_once);
    ck_assert_uint_eq(r.granted, SHARDS);
    ck_assert_uint_eq(r.released, SHARDS);
    free(text);
    free(etext);
}

START_TEST(stagingd_killed_anywhere_leaves_the_agent_clean_and_the_next_job_runs)
{
    const unsigned kills = rel_long() ? 1000 : 200;
    uint64_t seed = rel_seed("stagingd kill loop");
    struct e2e_env e;
    e2e_env_init(&e);
    e2e_store_make(&e, SHARDS, 128 * KIB, 16, 0, 0x5eedu);
    e2e_agent_start(&e);
    char out[256], err[256], msg[512];
    snprintf(out, sizeof out, "%s/out.txt", e.dir);
    snprintf(err, sizeof err, "%s/err.txt", e.dir);

    /* A first whole job: how long one takes, and the agent's resting state. */
    uint64_t t0 = now_us();
    full_job(&e, out, err);
    uint64_t span_us = now_us() - t0;
    ck_assert_int_eq(rel_agent_wait_clean(e.sock, "stagingd", 5000, msg, sizeof msg), 0);
    int fds0 = rel_proc_fds_settled(e.agent);
    long rss0 = rel_proc_rss_kb(e.agent), rss_max = rss0;
    fprintf(stderr, "a whole job takes %.1f ms; agent at rest: %d fds, %ld KiB RSS\n",
            (double)span_us / 1000.0, fds0, rss0);

    const char *argv[32];
    job_argv(&e, argv);
    unsigned finished = 0; /* jobs that ended before their kill */
    uint64_t max_delay = span_us + span_us / 4;
    for (unsigned i = 1; i <= kills; i++) {
        uint64_t delay = rel_rand(&seed) % (max_delay + 1);
        pid_t pid = e2e_spawn(argv, NULL, NULL);
        struct timespec d = {(time_t)(delay / 1000000u), (long)(delay % 1000000u) * 1000};
        nanosleep(&d, NULL);
        kill(pid, SIGKILL);
        int st = e2e_wait(pid, 10000);
        ck_assert_msg(st == 128 + SIGKILL || st == 0,
                      "kill %u after %" PRIu64 " us: stagingd ended with %d", i, delay, st);
        finished += st == 0;
        ck_assert_msg(kill(e.agent, 0) == 0, "kill %u: the agent died", i);
        ck_assert_msg(rel_agent_wait_clean(e.sock, "stagingd", 10000, msg, sizeof msg) == 0,
                      "kill %u after %" PRIu64 " us: %s", i, delay, msg);
        long rss = rel_proc_rss_kb(e.agent);
        if (rss > rss_max)
            rss_max = rss;
        if (i % 50 == 0)
            full_job(&e, out, err);
    }
    full_job(&e, out, err);
    ck_assert_int_eq(rel_agent_wait_clean(e.sock, "stagingd", 5000, msg, sizeof msg), 0);
    int fds1 = rel_proc_fds_settled(e.agent);
    long rss1 = rel_proc_rss_kb(e.agent);
    fprintf(stderr,
            "%u kills (delays 0..%.1f ms; %u jobs finished before their kill): agent %d -> %d "
            "fds, RSS %ld -> %ld KiB (peak %ld)\n",
            kills, (double)max_delay / 1000.0, finished, fds0, fds1, rss0, rss1, rss_max);
    ck_assert_int_eq(fds1, fds0);
    /* The allocator keeps what it grew to; flat means bounded, not shrinking. */
    ck_assert_msg(rss1 <= rss0 + 16 * 1024, "the agent's RSS grew from %ld to %ld KiB", rss0,
                  rss1);
    ck_assert_msg(finished < kills, "no kill landed while a job ran");
    e2e_env_cleanup(&e);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s STAGINGD LEASE_AGENT_HOST\n", argv[0]);
        return 2;
    }
    e2e_stagingd = argv[1];
    e2e_agent = argv[2];
    Suite *s = suite_create("kill_stagingd");
    TCase *tc = tcase_create("loop");
    tcase_set_timeout(tc, rel_long() ? 3600 : 600);
    tcase_add_test(tc, stagingd_killed_anywhere_leaves_the_agent_clean_and_the_next_job_runs);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
