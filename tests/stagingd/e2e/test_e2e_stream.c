/* The streaming path end to end (docs/streaming.md): `stagingd job --path
 * stream` against a real agent, every result against the CPU reference and
 * against the whole-shard path. Run with lease-agent-host (test_e2e_stream)
 * and with lease-agent under the fake CUDA driver
 * (test_e2e_stream_cuda_fakecuda), so the CUDA ring path runs on the CPU.
 *
 * argv[1]: stagingd, argv[2]: the agent. Skips (77) where the agent cannot
 * lock the 8 MiB the tests give it (RLIMIT_MEMLOCK). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e_util.h"
#include "lease/client.h"
#include "lease_types/lease_types.h"

#define MiB (1ull << 20)
#define RUN_MS 120000

/* Runs `stagingd job` on the store with @args after the common ones
 * (NULL-terminated); returns its exit status. Output in j->out_text. */
static int job_run(struct e2e_job *j, const char *const *args)
{
    const char *argv[48] = {
        e2e_stagingd,    "job", "--store",         j->e.store, "--agent",      j->e.sock,
        "--threads",     "2",   "--agent-timeout", "30",       "--chunk-size", "256K",
        "--pinned-pool", "4M",  "--segment-size",  "2M",       "--list"};
    size_t n = 17;
    for (size_t i = 0; args[i] && n < 47; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    unlink(j->out);
    unlink(j->err);
    int st = e2e_run(argv, j->out, j->err, RUN_MS);
    e2e_job_read(j);
    return st;
}

/* The counters that prove the hot path: a RING_SHARD per task and nothing
 * per chunk, no registration during the job. */
static void expect_stream_counters(const struct e2e_job *j, unsigned tasks)
{
    char want[96];
    ck_assert_msg(strstr(j->out_text, "path streaming, 2 ring(s)"), "%s", j->out_text);
    snprintf(want, sizeof want, "%u RING_SHARD for %u task(s)", tasks, tasks);
    ck_assert_msg(strstr(j->out_text, want), "expected '%s' in\n%s", want, j->out_text);
    ck_assert_ptr_nonnull(strstr(j->out_text, "per chunk 0 messages, 0 lease calls"));
    ck_assert_ptr_nonnull(strstr(j->out_text, "registrations  0 during the job"));
    /* the agent's own count agrees: one request per task, none per chunk */
    snprintf(want, sizeof want,
             "the agent took %u request(s) for %u RING_SHARD: 0 more, 0.000 per chunk", tasks,
             tasks);
    ck_assert_msg(strstr(j->out_text, want), "expected '%s' in\n%s", want, j->out_text);
    ck_assert_ptr_nonnull(strstr(j->out_text, "gpu path"));
}

/* The report's verify rows and verdict equal between two runs. */
static void expect_same_verify(const struct e2e_report *a, const struct e2e_report *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        ck_assert_uint_eq(a->verify_ok[i], b->verify_ok[i]);
        ck_assert_uint_eq(a->verify_bad[i], b->verify_bad[i]);
        if (a->verify_bad[i])
            ck_assert_uint_eq(a->bad_block[i], b->bad_block[i]);
    }
}

/* The merged top-k equals the CPU's: indices exactly, scores to the
 * rounding a GPU's own summation order allows (the host backend's are the
 * C reference's, bit for bit). */
static void expect_topk(const struct e2e_job *j, const struct e2e_report *r, uint64_t seed,
                        uint32_t k, size_t shards)
{
    struct kn_scan_hit want[64], per[64];
    size_t rows = e2e_cpu_topk(j->e.store, seed, k, want, per, 64);
    ck_assert_msg(r->ntop == rows, "top-k rows: expected %zu, found %u\n%s", rows, r->ntop,
                  j->out_text);
    for (size_t i = 0; i < rows; i++) {
        ck_assert_uint_eq(r->top[i].shard, want[i].shard);
        ck_assert_uint_eq(r->top[i].index, want[i].index);
        float d = r->top[i].score - want[i].score;
        ck_assert_msg(d < 1e-3f && d > -1e-3f, "top-k row %zu: score %.9g, the CPU's %.9g", i,
                      (double)r->top[i].score, (double)want[i].score);
    }
    for (size_t s = 0; s < shards; s++)
        ck_assert_uint_eq(r->scan[s].index, per[s].index);
}

static void flip_byte(const struct e2e_job *j, unsigned shard, uint64_t payload_off)
{
    char path[256];
    snprintf(path, sizeof path, "%s/shard-%06u.sds", j->e.store, shard);
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    unsigned char b;
    ck_assert_int_eq(pread(fd, &b, 1, (off_t)(4096 + payload_off)), 1);
    b ^= 0x5a;
    ck_assert_int_eq(pwrite(fd, &b, 1, (off_t)(4096 + payload_off)), 1);
    close(fd);
}

START_TEST(test_stream_verify_matches_whole_path_and_cpu)
{
    struct e2e_job j = {0};
    e2e_env_init(&j.e);
    e2e_job_paths(&j);
    e2e_store_make(&j.e, 12, 1 * MiB, 64, 0, 0x57ea01);
    e2e_agent_start(&j.e);
    const char *whole[] = {"--op", "verify", "--path", "whole", "--inflight", "2", NULL};
    /* the whole path's pool is its own: 1 MiB shards need 2 MiB segments */
    int st = job_run(&j, whole);
    ck_assert_msg(st == 0, "whole: exit %d\n%s\n%s", st, j.out_text, j.err_text);
    struct e2e_report rw;
    e2e_report_parse(j.out_text, &rw);
    const char *stream[] = {"--op", "verify", "--path", "stream", NULL};
    st = job_run(&j, stream);
    ck_assert_msg(st == 0, "stream: exit %d\n%s\n%s", st, j.out_text, j.err_text);
    struct e2e_report rs;
    e2e_report_parse(j.out_text, &rs);
    expect_same_verify(&rw, &rs, 12);
    int rc[64];
    uint64_t bad[64];
    ck_assert_uint_eq(e2e_cpu_verify(j.e.store, rc, bad, 64), 12);
    for (size_t i = 0; i < 12; i++)
        ck_assert_msg(rc[i] == 0 && rs.verify_ok[i] == 1, "shard %zu\n%s", i, j.out_text);
    ck_assert(rs.exactly_once);
    ck_assert_uint_eq(rs.granted, 4); /* two per ring: no lease per shard or chunk */
    ck_assert_uint_eq(rs.released, 4);
    expect_stream_counters(&j, 12);
    e2e_job_done(&j);
}
END_TEST

START_TEST(test_stream_scan_f32_and_f16_match_cpu_topk)
{
    for (int f16 = 0; f16 < 2; f16++) {
        struct e2e_job j = {0};
        e2e_env_init(&j.e);
        e2e_job_paths(&j);
        e2e_store_make(&j.e, 10, 1 * MiB, f16 ? 128 : 64, f16, 0x57ea02 + (uint64_t)f16);
        e2e_agent_start(&j.e);
        const char *args[] = {"--op", "scan",         "--path", "stream", "--k",
                              "7",    "--query-seed", "5",      NULL};
        int st = job_run(&j, args);
        ck_assert_msg(st == 0, "exit %d\n%s\n%s", st, j.out_text, j.err_text);
        struct e2e_report r;
        e2e_report_parse(j.out_text, &r);
        for (size_t i = 0; i < 10; i++)
            ck_assert_uint_eq(r.scan_rows[i], 1);
        expect_topk(&j, &r, 5, 7, 10);
        ck_assert(r.exactly_once);
        expect_stream_counters(&j, 10);
        e2e_job_done(&j);
    }
}
END_TEST

START_TEST(test_stream_both_ops_stream_each_once_and_auto_chooses)
{
    struct e2e_job j = {0};
    e2e_env_init(&j.e);
    e2e_job_paths(&j);
    e2e_store_make(&j.e, 8, 1 * MiB, 64, 0, 0x57ea03);
    e2e_agent_start(&j.e);
    const char *both[] = {"--op", "both", "--path", "stream", "--k", "4", NULL};
    int st = job_run(&j, both);
    ck_assert_msg(st == 0, "exit %d\n%s\n%s", st, j.out_text, j.err_text);
    struct e2e_report r;
    e2e_report_parse(j.out_text, &r);
    for (size_t i = 0; i < 8; i++) {
        ck_assert_uint_eq(r.verify_ok[i], 1);
        ck_assert_uint_eq(r.scan_rows[i], 1);
    }
    expect_topk(&j, &r, 1, 4, 8);
    ck_assert(r.exactly_once);
    expect_stream_counters(&j, 16); /* a task per (shard, op) */
    /* auto: streaming for one op, whole shards for both (each shard would
     * cross the ring twice) */
    const char *auto_one[] = {"--op", "verify", NULL};
    st = job_run(&j, auto_one);
    ck_assert_msg(st == 0, "exit %d\n%s\n%s", st, j.out_text, j.err_text);
    ck_assert_ptr_nonnull(strstr(j.out_text, "path streaming"));
    const char *auto_both[] = {"--op", "both", "--inflight", "2", NULL};
    st = job_run(&j, auto_both);
    ck_assert_msg(st == 0, "exit %d\n%s\n%s", st, j.out_text, j.err_text);
    ck_assert_ptr_nonnull(strstr(j.out_text, "path whole shards"));
    e2e_job_done(&j);
}
END_TEST

START_TEST(test_stream_names_the_bad_block_and_the_cpu_check_agrees)
{
    struct e2e_job j = {0};
    e2e_env_init(&j.e);
    e2e_job_paths(&j);
    e2e_store_make(&j.e, 10, 1 * MiB, 64, 0, 0x57ea04);
    flip_byte(&j, 6, 9 * (64 << 10) + 77); /* block 9 of shard 6 */
    e2e_agent_start(&j.e);
    const char *modes[][2] = {
        {"--cpu-verify=no", "2"}, {"--cpu-verify", "0"}, {"--cpu-verify", "2"}};
    for (int m = 0; m < 3; m++) {
        const char *args[] = {"--op",      "verify",    "--path",
                              "stream",    modes[m][0], "--cpu-verify-threads",
                              modes[m][1], NULL};
        int st = job_run(&j, args);
        ck_assert_msg(st == 3, "mode %d: expected exit 3, found %d\n%s\n%s", m, st, j.out_text,
                      j.err_text);
        struct e2e_report r;
        e2e_report_parse(j.out_text, &r);
        ck_assert_uint_eq(r.verify_bad[6], 1);
        ck_assert_uint_eq(r.bad_block[6], 9);
        ck_assert_ptr_nonnull(strstr(j.out_text, "shard-000006.sds   verify BAD: block 9 of 16"));
        ck_assert_ptr_null(strstr(j.out_text, "DISAGREES"));
        for (size_t i = 0; i < 10; i++)
            if (i != 6)
                ck_assert_uint_eq(r.verify_ok[i], 1);
        if (m > 0)
            ck_assert_ptr_nonnull(strstr(j.out_text, "cpu check"));
    }
    e2e_job_done(&j);
}
END_TEST

/* The chunks stored by threads helping another ring, from the summary's
 * streaming line; -1 when the line does not say. */
static long helped_chunks(const char *out)
{
    const char *p = strstr(out, " chunk(s) by threads helping another ring");
    if (!p)
        return -1;
    const char *q = p;
    while (q > out && q[-1] >= '0' && q[-1] <= '9')
        q--;
    return q == p ? -1 : strtol(q, NULL, 10);
}

/* One shard of 64 chunks and two rings: the ring without a task helps the
 * other one with its chunks (job_ring.c), the GPU's and the inline CPU
 * check's verdicts still agree, and the bad block named is the first. The
 * shard is long enough (its chunks wait for the agent's copies) that the
 * idle thread gets scheduled in time on a loaded machine. */
START_TEST(test_an_idle_ring_thread_helps_stage_the_last_shard)
{
    struct e2e_job j = {0};
    e2e_env_init(&j.e);
    e2e_job_paths(&j);
    e2e_store_make(&j.e, 1, 16 * MiB, 64, 0, 0x57ea07);
    e2e_agent_start(&j.e);
    const char *args[] = {"--op", "verify", "--path", "stream", "--cpu-verify",
                          "--cpu-verify-threads", "0", NULL};
    int st = job_run(&j, args);
    ck_assert_msg(st == 0, "exit %d\n%s\n%s", st, j.out_text, j.err_text);
    struct e2e_report r;
    e2e_report_parse(j.out_text, &r);
    ck_assert_msg(r.verify_ok[0] == 1, "%s", j.out_text);
    expect_stream_counters(&j, 1);
    long helped = helped_chunks(j.out_text);
    ck_assert_msg(helped > 0 && helped < 64,
                  "expected 1..63 chunks stored by the idle ring, found %ld\n%s", helped,
                  j.out_text);
    /* Two bad blocks, in chunks far apart: the first is the one named,
     * whichever thread met it. */
    flip_byte(&j, 0, 100 * (64 << 10) + 77);
    flip_byte(&j, 0, 30 * (64 << 10) + 5);
    st = job_run(&j, args);
    ck_assert_msg(st == 3, "expected exit 3, found %d\n%s\n%s", st, j.out_text, j.err_text);
    e2e_report_parse(j.out_text, &r);
    ck_assert_uint_eq(r.verify_bad[0], 1);
    ck_assert_uint_eq(r.bad_block[0], 30);
    ck_assert_ptr_null(strstr(j.out_text, "DISAGREES"));
    ck_assert_msg(helped_chunks(j.out_text) > 0, "%s", j.out_text);
    e2e_job_done(&j);
}
END_TEST

START_TEST(test_agent_killed_midstream_every_shard_once)
{
    struct e2e_job j = {0};
    e2e_env_init(&j.e);
    e2e_job_paths(&j);
    const unsigned shards = 32;
    e2e_store_make(&j.e, shards, 1 * MiB, 64, 0, 0x57ea05);
    e2e_agent_start(&j.e);
    const char *argv[] = {e2e_stagingd,
                          "job",
                          "--store",
                          j.e.store,
                          "--agent",
                          j.e.sock,
                          "--threads",
                          "2",
                          "--chunk-size",
                          "256K",
                          "--pinned-pool",
                          "4M",
                          "--segment-size",
                          "2M",
                          "--list",
                          "-v",
                          "--op",
                          "verify",
                          "--path",
                          "stream",
                          "--rate-limit",
                          "8M",
                          "--agent-timeout",
                          "30",
                          NULL};
    pid_t sd = e2e_spawn(argv, j.out, j.err);
    ck_assert_msg(e2e_wait_count(j.err, "verify ok (", 4, 60000),
                  "stagingd never completed 4 shards");
    ck_assert_int_eq(kill(j.e.agent, SIGSTOP), 0);
    int status;
    ck_assert_msg(waitpid(sd, &status, WNOHANG) == 0,
                  "the job ended before the agent could be killed mid-job");
    /* Frozen long enough for the rate limit to let more shards go: their
     * RING_SHARDs and chunks wait on the frozen agent when it dies. */
    e2e_sleep_ms(500);
    ck_assert_int_eq(kill(j.e.agent, SIGKILL), 0);
    ck_assert_int_eq(e2e_wait(j.e.agent, 5000), 128 + SIGKILL);
    j.e.agent = 0;
    e2e_job_read(&j);
    unsigned before = e2e_count(j.err_text, "verify ok (");
    ck_assert_uint_lt(before, shards);
    e2e_agent_start(&j.e);
    int st = e2e_wait(sd, RUN_MS);
    e2e_job_read(&j);
    ck_assert_msg(st == 0, "stagingd job exited %d\n%s\n%s", st, j.out_text, j.err_text);
    ck_assert_ptr_nonnull(strstr(j.err_text, "agent 0 lost"));
    ck_assert_ptr_nonnull(strstr(j.err_text, "ring(s) stop"));
    ck_assert_msg(strstr(j.err_text, "task(s) to stream again"),
                  "no shard was in flight when the agent died\n%s", j.err_text);
    /* Each shard's result taken once, never twice. */
    ck_assert_uint_eq(e2e_count(j.err_text, "verify ok ("), shards);
    struct e2e_report r;
    e2e_report_parse(j.out_text, &r);
    for (size_t i = 0; i < shards; i++)
        ck_assert_uint_eq(r.verify_ok[i], 1);
    ck_assert(r.exactly_once);
    ck_assert_ptr_nonnull(strstr(j.out_text, "per chunk 0 messages"));
    const char *resub = strstr(j.out_text, "exactly once");
    fprintf(stderr, "agent killed after %u of %u shards; %.*s\n", before, shards,
            resub ? (int)strcspn(resub, "\n") : 0, resub ? resub : "");
    e2e_job_done(&j);
}
END_TEST

/* Live leases the agent holds for every client, by a probe of its own. */
static uint64_t agent_live_leases(const char *sock, uint32_t *clients_p)
{
    struct leasec_client_config cc;
    leasec_client_config_default(&cc);
    cc.name = "e2e-probe";
    cc.caps = 0;
    struct leasec_client *c = NULL;
    unsigned a;
    ck_assert_int_eq(leasec_client_create(&cc, &c), 0);
    ck_assert_int_eq(leasec_client_agent_add(c, sock, &a), 0);
    ck_assert_int_eq(leasec_client_wait_ready(c, a, 5000), 0);
    struct leasec_agent_stats st;
    ck_assert_msg(leasec_client_stats_call(c, a, LEASEC_STATS_F_ALL_CLIENTS, 5000, &st) == 0, "%s",
                  leasec_client_last_error(c));
    uint64_t live = 0;
    for (int cls = 1; cls < LT_CLASS_SLOTS; cls++)
        live += st.classes[cls].live_leases;
    *clients_p = st.client_count;
    leasec_client_destroy(c);
    return live;
}

START_TEST(test_stagingd_killed_with_rings_open_is_drained_by_the_agent)
{
    struct e2e_job j = {0};
    e2e_env_init(&j.e);
    e2e_job_paths(&j);
    e2e_store_make(&j.e, 32, 1 * MiB, 64, 0, 0x57ea06);
    e2e_agent_start(&j.e);
    const char *argv[] = {e2e_stagingd,
                          "job",
                          "--store",
                          j.e.store,
                          "--agent",
                          j.e.sock,
                          "--threads",
                          "2",
                          "--chunk-size",
                          "256K",
                          "--pinned-pool",
                          "4M",
                          "--segment-size",
                          "2M",
                          "-v",
                          "--op",
                          "verify",
                          "--path",
                          "stream",
                          "--rate-limit",
                          "8M",
                          NULL};
    pid_t sd = e2e_spawn(argv, j.out, j.err);
    ck_assert(e2e_wait_count(j.err, "verify ok (", 2, 60000));
    /* The staging threads freeze between chunks: the rings wait for words. */
    ck_assert_int_eq(kill(sd, SIGSTOP), 0);
    e2e_sleep_ms(50);
    ck_assert_int_eq(kill(sd, SIGKILL), 0);
    ck_assert_int_eq(e2e_wait(sd, 5000), 128 + SIGKILL);
    uint64_t live = 1;
    uint32_t clients = 1;
    for (int t = 0; t < 500 && (live || clients > 1); t++) {
        live = agent_live_leases(j.e.sock, &clients);
        if (live || clients > 1)
            e2e_sleep_ms(10);
    }
    ck_assert_msg(live == 0 && clients == 1,
                  "the dead stagingd's rings were not drained: %llu live leases, %u clients",
                  (unsigned long long)live, clients);
    /* And the agent serves the next job as before. */
    const char *args[] = {"--op", "verify", "--path", "stream", NULL};
    int st = job_run(&j, args);
    ck_assert_msg(st == 0, "exit %d\n%s\n%s", st, j.out_text, j.err_text);
    e2e_job_done(&j);
}
END_TEST

static Suite *stream_suite(void)
{
    Suite *s = suite_create("e2e_stream");
    TCase *tc = tcase_create("stream");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_stream_verify_matches_whole_path_and_cpu);
    tcase_add_test(tc, test_stream_scan_f32_and_f16_match_cpu_topk);
    tcase_add_test(tc, test_stream_both_ops_stream_each_once_and_auto_chooses);
    tcase_add_test(tc, test_stream_names_the_bad_block_and_the_cpu_check_agrees);
    tcase_add_test(tc, test_an_idle_ring_thread_helps_stage_the_last_shard);
    tcase_add_test(tc, test_agent_killed_midstream_every_shard_once);
    tcase_add_test(tc, test_stagingd_killed_with_rings_open_is_drained_by_the_agent);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s STAGINGD AGENT [AGENT OPTION]...\n", argv[0]);
        return 2;
    }
    e2e_stagingd = argv[1];
    e2e_agent = argv[2];
    e2e_agent_extra = (const char *const *)argv + 3; /* argv[argc] is NULL */
    /* The agents check their budgets against RLIMIT_MEMLOCK: 8 MiB here. */
    struct rlimit rl;
    const rlim_t need = 8u << 20;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
        if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need) {
            rl.rlim_cur = need;
            setrlimit(RLIMIT_MEMLOCK, &rl);
        } else {
            printf("SKIP e2e_stream: RLIMIT_MEMLOCK is %llu bytes (hard), the agent needs %llu\n",
                   (unsigned long long)rl.rlim_max, (unsigned long long)need);
            return 77;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    SRunner *sr = srunner_create(stream_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
