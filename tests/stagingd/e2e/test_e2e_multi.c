/* Several agents end to end (docs/multi-gpu.md): `stagingd job --agent
 * A,B` against two lease-agent-host processes, each on its own socket as
 * one agent per GPU would be. The work spreads over both (each gets
 * shards), an agent SIGKILLed mid-job hands its shards to the other, and
 * in every case each shard's result comes once and equals a one-agent run
 * on the same store. Both paths: whole shards and streaming rings.
 *
 * argv[1]: stagingd, argv[2]: the agent. Skips (77) where the agents
 * cannot lock the 8 MiB each needs (RLIMIT_MEMLOCK). */
#include <check.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e_util.h"

#define MiB (1ull << 20)
#define RUN_MS 120000

/* Two agents: a's directory also holds the store and the job's output. */
struct multi {
    struct e2e_env a, b;
    char both[400];
    char out[256], err[256];
    char *out_text, *err_text;
};

static void multi_init(struct multi *m, unsigned shards, uint64_t seed)
{
    e2e_env_init(&m->a);
    e2e_env_init(&m->b);
    snprintf(m->out, sizeof m->out, "%s/out.txt", m->a.dir);
    snprintf(m->err, sizeof m->err, "%s/err.txt", m->a.dir);
    snprintf(m->both, sizeof m->both, "%s,%s", m->a.sock, m->b.sock);
    e2e_store_make(&m->a, shards, 1 * MiB, 64, 0, seed);
    e2e_agent_start(&m->a);
    e2e_agent_start(&m->b);
}

static void multi_read(struct multi *m)
{
    free(m->out_text);
    free(m->err_text);
    m->out_text = e2e_slurp(m->out);
    m->err_text = e2e_slurp(m->err);
}

static void multi_done(struct multi *m)
{
    free(m->out_text);
    free(m->err_text);
    e2e_env_cleanup(&m->b);
    e2e_env_cleanup(&m->a);
}

/* The argv of `stagingd job` on @agents with @args after the common ones. */
static void multi_argv(struct multi *m, const char *agents, const char *const *args,
                       const char **argv, size_t cap)
{
    const char *common[] = {e2e_stagingd, "job",
                            m->a.store,   "--agent",
                            agents,       "--threads",
                            "2",          "--agent-timeout",
                            "30",         "--chunk-size",
                            "256K",       "--pinned-pool",
                            "4M",         "--segment-size",
                            "2M",         "--list",
                            "-v"};
    size_t n = 0;
    for (size_t i = 0; i < sizeof common / sizeof common[0]; i++) {
        argv[n++] = common[i];
        if (i == 1)
            argv[n++] = "--store"; /* before the store's path */
    }
    for (size_t i = 0; args[i] && n < cap - 1; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
}

/* The job's output on stderr (check's messages are short) and @ok. */
static int multi_ok(const struct multi *m, int ok)
{
    if (!ok)
        fprintf(stderr, "---- stdout\n%s\n---- stderr\n%s\n", m->out_text, m->err_text);
    return ok;
}

static int multi_run(struct multi *m, const char *agents, const char *const *args)
{
    const char *argv[48];
    multi_argv(m, agents, args, argv, 48);
    unlink(m->out);
    unlink(m->err);
    int st = e2e_run(argv, m->out, m->err, RUN_MS);
    multi_read(m);
    return st;
}

/* The summary's "per agent" line of agent @a: its shards, and those it had in flight when lost
 * (moved). */
static int per_agent(const char *text, unsigned a, uint64_t *shards_p, uint64_t *moved_p)
{
    char key[32];
    snprintf(key, sizeof key, "per agent      %u: ", a);
    const char *p = strstr(text, key);
    if (!p)
        return -1;
    p += strlen(key);
    if (sscanf(p, "%" SCNu64 " shard(s)", shards_p) != 1)
        return -1;
    const char *q = strstr(p, " GB/s over the job, ");
    if (!q || sscanf(q, " GB/s over the job, %" SCNu64 " in flight", moved_p) != 1)
        return -1;
    return 0;
}

static void expect_same(const struct e2e_report *x, const struct e2e_report *y, size_t shards,
                        int verify)
{
    for (size_t i = 0; i < shards; i++) {
        ck_assert_uint_eq(x->verify_ok[i], verify ? 1 : 0);
        ck_assert_uint_eq(y->verify_ok[i], verify ? 1 : 0);
        ck_assert_uint_eq(x->verify_bad[i], y->verify_bad[i]);
        ck_assert_uint_eq(x->scan_rows[i], y->scan_rows[i]);
        ck_assert_uint_eq(x->scan[i].index, y->scan[i].index);
        ck_assert(x->scan[i].score == y->scan[i].score);
    }
    ck_assert_uint_eq(x->ntop, y->ntop);
    for (unsigned i = 0; i < x->ntop; i++) {
        ck_assert_uint_eq(x->top[i].shard, y->top[i].shard);
        ck_assert_uint_eq(x->top[i].index, y->top[i].index);
        ck_assert(x->top[i].score == y->top[i].score);
    }
    ck_assert(x->exactly_once);
    ck_assert(y->exactly_once);
}

/* Both agents take shards; the results equal one agent's; --json has both. */
static void spread(const char *path, const char *op)
{
    struct multi m = {0};
    const unsigned shards = 16;
    multi_init(&m, shards, 0x2a9e01);
    const char *args[] = {"--op", op, "--path", path, "--k", "4", NULL};
    int st = multi_run(&m, m.a.sock, args);
    ck_assert_msg(multi_ok(&m, st == 0), "one agent: exit %d", st);
    struct e2e_report one, two;
    e2e_report_parse(m.out_text, &one);
    st = multi_run(&m, m.both, args);
    ck_assert_msg(multi_ok(&m, st == 0), "two agents: exit %d", st);
    e2e_report_parse(m.out_text, &two);
    expect_same(&one, &two, shards, strcmp(op, "scan") != 0);
    uint64_t s0 = 0, s1 = 0, r0 = 0, r1 = 0;
    ck_assert_msg(multi_ok(&m, per_agent(m.out_text, 0, &s0, &r0) == 0 &&
                                   per_agent(m.out_text, 1, &s1, &r1) == 0),
                  "no per-agent lines");
    ck_assert_msg(multi_ok(&m, s0 > 0 && s1 > 0),
                  "one agent idle: %" PRIu64 " and %" PRIu64 " shards", s0, s1);
    ck_assert_uint_eq(s0 + s1, shards);
    ck_assert_uint_eq(r0 + r1, 0);
    fprintf(stderr, "%s/%s: agent 0 %" PRIu64 " shards, agent 1 %" PRIu64 "\n", path, op, s0, s1);
    const char *json[] = {"--op", op, "--path", path, "--k", "4", "--json", NULL};
    st = multi_run(&m, m.both, json);
    ck_assert_msg(multi_ok(&m, st == 0), "--json: exit %d", st);
    ck_assert_ptr_nonnull(strstr(m.out_text, "\"agents\""));
    ck_assert_uint_eq(e2e_count(m.out_text, "\"gb_per_s\""), 2);
    multi_done(&m);
}

START_TEST(test_two_agents_whole_shards_spread_and_match_one)
{
    spread("whole", "both");
}
END_TEST

START_TEST(test_two_agents_streaming_spread_and_match_one)
{
    spread("stream", "verify");
    spread("stream", "scan");
}
END_TEST

/* Agent 1 frozen, then SIGKILLed mid-job: its shards finish on agent 0,
 * each once, with one agent's results. */
static void failover(const char *path)
{
    struct multi m = {0};
    const unsigned shards = 32;
    multi_init(&m, shards, 0x2a9e02);
    const char *args[] = {"--op", "verify",     "--path", path, "--rate-limit",
                          "8M",   "--inflight", "4",      NULL};
    const char *argv[48];
    multi_argv(&m, m.both, args, argv, 48);
    unlink(m.out);
    unlink(m.err);
    pid_t sd = e2e_spawn(argv, m.out, m.err);
    ck_assert_msg(e2e_wait_count(m.err, "verify ok (", 4, 60000),
                  "stagingd never completed 4 shards");
    ck_assert_int_eq(kill(m.b.agent, SIGSTOP), 0);
    int status;
    ck_assert_msg(waitpid(sd, &status, WNOHANG) == 0,
                  "the job ended before the agent could be killed mid-job");
    /* Frozen long enough for work to be sent to it and wait there. */
    e2e_sleep_ms(500);
    ck_assert_int_eq(kill(m.b.agent, SIGKILL), 0);
    ck_assert_int_eq(e2e_wait(m.b.agent, 5000), 128 + SIGKILL);
    m.b.agent = 0;
    int st = e2e_wait(sd, RUN_MS);
    multi_read(&m);
    ck_assert_msg(multi_ok(&m, st == 0), "stagingd job exited %d", st);
    ck_assert_msg(multi_ok(&m, strstr(m.err_text, "agent 1 lost") != NULL), "no loss logged");
    /* Each shard's result taken once, never twice. */
    ck_assert_uint_eq(e2e_count(m.err_text, "verify ok ("), shards);
    struct e2e_report two, one;
    e2e_report_parse(m.out_text, &two);
    uint64_t s0 = 0, s1 = 0, r0 = 0, r1 = 0;
    ck_assert_msg(multi_ok(&m, per_agent(m.out_text, 0, &s0, &r0) == 0 &&
                                   per_agent(m.out_text, 1, &s1, &r1) == 0),
                  "no per-agent lines");
    ck_assert_uint_eq(s0 + s1, shards);
    ck_assert_msg(multi_ok(&m, r1 > 0), "nothing was in flight on agent 1 when it died");
    ck_assert_uint_eq(r0, 0);
    fprintf(stderr,
            "%s failover: agent 0 %" PRIu64 " shards, agent 1 %" PRIu64 " (%" PRIu64 " moved)\n",
            path, s0, s1, r1);
    /* The same store on agent 0 alone. */
    const char *again[] = {"--op", "verify", "--path", path, NULL};
    st = multi_run(&m, m.a.sock, again);
    ck_assert_msg(multi_ok(&m, st == 0), "one agent: exit %d", st);
    e2e_report_parse(m.out_text, &one);
    expect_same(&one, &two, shards, 1);
    multi_done(&m);
}

START_TEST(test_agent_killed_streaming_moves_to_the_other)
{
    failover("stream");
}
END_TEST

START_TEST(test_agent_killed_whole_shards_moves_to_the_other)
{
    failover("whole");
}
END_TEST

static void put(const char *root, const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = '\0';
        mkdir(path, 0755);
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* A fake two-node sysfs (LEASE_SYSFS_ROOT): agent 1 names GPU 0000:41:00.0,
 * on node 1, whose CPUs are this process's first; agent 0 names none. The
 * job places agent 1's ring, says agent 0's is not placed, and its results
 * are the same. */
START_TEST(test_numa_placement_from_a_fake_two_node_sysfs)
{
    struct multi m = {0};
    const unsigned shards = 8;
    e2e_env_init(&m.a);
    e2e_env_init(&m.b);
    snprintf(m.out, sizeof m.out, "%s/out.txt", m.a.dir);
    snprintf(m.err, sizeof m.err, "%s/err.txt", m.a.dir);
    snprintf(m.both, sizeof m.both, "%s,%s", m.a.sock, m.b.sock);
    e2e_store_make(&m.a, shards, 1 * MiB, 64, 0, 0x2a9e03);
    e2e_agent_start(&m.a);
    const char *argv_b[] = {
        e2e_agent,   "--socket", m.b.sock, "--pinned-budget",      "6M", "--mapped-budget", "2M",
        "--workers", "2",        "--name", "ga-host 0000:41:00.0", NULL};
    m.b.agent = e2e_spawn(argv_b, m.b.agent_log, m.b.agent_log);
    for (int i = 0; i < 200 && access(m.b.sock, F_OK) != 0; i++)
        e2e_sleep_ms(50);
    ck_assert_int_eq(access(m.b.sock, F_OK), 0);

    cpu_set_t mine;
    ck_assert_int_eq(sched_getaffinity(0, sizeof mine, &mine), 0);
    int cpu = 0;
    while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &mine))
        cpu++;
    char root[300], list[16];
    snprintf(root, sizeof root, "%s/sysfs", m.a.dir);
    ck_assert_int_eq(mkdir(root, 0755), 0);
    snprintf(list, sizeof list, "%d\n", cpu);
    put(root, "devices/system/node/node0/cpulist", list);
    put(root, "devices/system/node/node1/cpulist", list);
    put(root, "bus/pci/devices/0000:41:00.0/numa_node", "1\n");
    setenv("LEASE_SYSFS_ROOT", root, 1);
    const char *args[] = {"--op", "verify", "--path", "stream", NULL};
    int st = multi_run(&m, m.both, args);
    unsetenv("LEASE_SYSFS_ROOT");
    ck_assert_msg(multi_ok(&m, st == 0), "exit %d", st);
    ck_assert_msg(
        multi_ok(&m, strstr(m.err_text, "agent 1: GPU 0000:41:00.0 on node 1 of 2: 1 "
                                        "CPU(s): its rings' threads and slots go there") != NULL),
        "agent 1 not placed");
    ck_assert_msg(multi_ok(&m, strstr(m.err_text, "agent 0: 2 NUMA nodes, but the agent's name "
                                                  "carries no PCI bus id: not placed") != NULL),
                  "agent 0's reason not logged");
    ck_assert_ptr_null(strstr(m.err_text, "not bound to node"));
    struct e2e_report two, one;
    e2e_report_parse(m.out_text, &two);
    /* one node (the real sysfs, or none here): nothing said about placing */
    st = multi_run(&m, m.a.sock, args);
    ck_assert_msg(multi_ok(&m, st == 0), "exit %d", st);
    e2e_report_parse(m.out_text, &one);
    expect_same(&one, &two, shards, 1);
    multi_done(&m);
}
END_TEST

static Suite *multi_suite(void)
{
    Suite *s = suite_create("e2e_multi");
    TCase *tc = tcase_create("multi");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_two_agents_whole_shards_spread_and_match_one);
    tcase_add_test(tc, test_two_agents_streaming_spread_and_match_one);
    tcase_add_test(tc, test_agent_killed_streaming_moves_to_the_other);
    tcase_add_test(tc, test_agent_killed_whole_shards_moves_to_the_other);
    tcase_add_test(tc, test_numa_placement_from_a_fake_two_node_sysfs);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s STAGINGD AGENT\n", argv[0]);
        return 2;
    }
    e2e_stagingd = argv[1];
    e2e_agent = argv[2];
    struct rlimit rl;
    const rlim_t need = 8u << 20;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
        if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need) {
            rl.rlim_cur = need;
            setrlimit(RLIMIT_MEMLOCK, &rl);
        } else {
            printf("SKIP e2e_multi: RLIMIT_MEMLOCK is %llu bytes (hard), the agents need %llu\n",
                   (unsigned long long)rl.rlim_max, (unsigned long long)need);
            return 77;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    SRunner *sr = srunner_create(multi_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
