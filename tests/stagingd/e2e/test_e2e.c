/* The pipeline end to end: real lease-agent-host and stagingd processes on
 * private sockets, every result checked against the CPU reference.
 *
 * argv[1]: stagingd, argv[2]: lease-agent-host. Skips (77) where the host
 * agent cannot lock the 8 MiB the tests give it (RLIMIT_MEMLOCK). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e_util.h"
#include "lease_types/lease_types.h"
#include "lease/client.h"

#define MiB (1ull << 20)
#define RUN_MS 60000

/* Asserts the report's scan rows and top-k equal the CPU's, bit for bit:
 * the true top-k of all records, not of the per-shard bests. */
static void expect_topk(const struct e2e_job *j, const struct e2e_report *r, uint64_t seed,
                        uint32_t k, size_t shards)
{
    struct kn_scan_hit want[64], per[64];
    size_t rows = e2e_cpu_topk(j->e.store, seed, k, want, per, 64);
    ck_assert_uint_eq(rows, k); /* every store here has more than k records */
    ck_assert_msg(r->ntop == rows, "top-k rows: expected %zu, found %u\n%s", rows, r->ntop,
                  j->out_text);
    for (size_t i = 0; i < rows; i++) {
        ck_assert_msg(r->top[i].shard == want[i].shard && r->top[i].index == want[i].index &&
                          memcmp(&r->top[i].score, &want[i].score, 4) == 0,
                      "top-k row %zu: expected shard %u record %llu score %.9g, found shard %u "
                      "record %llu score %.9g",
                      i + 1, want[i].shard, (unsigned long long)want[i].index,
                      (double)want[i].score, r->top[i].shard, (unsigned long long)r->top[i].index,
                      (double)r->top[i].score);
    }
    for (size_t s = 0; s < shards; s++) {
        if (!r->scan_rows[s])
            continue;
        ck_assert_uint_eq(r->scan_rows[s], 1);
        ck_assert_uint_eq(r->scan[s].index, per[s].index);
        ck_assert(memcmp(&r->scan[s].score, &per[s].score, 4) == 0);
    }
}

START_TEST(test_verify_job_matches_cpu_verification)
{
    struct e2e_job j = {0};
    e2e_env_init(&j.e);
    e2e_job_paths(&j);
    e2e_store_make(&j.e, 16, 1 * MiB, 64, 0, 0x5eed01);
    e2e_agent_start(&j.e);
    const char *argv[] = {
        e2e_stagingd, "job",    "--store",    j.e.store, "--agent",         j.e.sock, "--op",
        "verify",     "--list", "--inflight", "3",       "--agent-timeout", "20",     NULL};
    int st = e2e_run(argv, j.out, j.err, RUN_MS);
    e2e_job_read(&j);
    ck_assert_msg(st == 0, "stagingd job exited %d\nstdout:\n%s\nstderr:\n%s", st, j.out_text,
                  j.err_text);
    struct e2e_report r;
    e2e_report_parse(j.out_text, &r);
    int rc[64];
    uint64_t bad[64];
    size_t n = e2e_cpu_verify(j.e.store, rc, bad, 64);
    ck_assert_uint_eq(n, 16);
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(rc[i], 0);
        ck_assert_msg(r.verify_ok[i] == 1 && r.verify_bad[i] == 0,
                      "shard %zu: expected one 'verify ok' row, found %u ok and %u bad\n%s", i,
                      r.verify_ok[i], r.verify_bad[i], j.out_text);
    }
    ck_assert_uint_eq(r.granted, 16);
    ck_assert_uint_eq(r.released, 16);
    ck_assert(r.exactly_once);
    ck_assert_ptr_nonnull(strstr(j.out_text, "doorbell on"));
    e2e_job_done(&j);
}
END_TEST

START_TEST(test_corrupt_block_is_named_with_its_shard)
{
    struct e2e_job j = {0};
    e2e_env_init(&j.e);
    e2e_job_paths(&j);
    e2e_store_make(&j.e, 16, 1 * MiB, 64, 0, 0x5eed02);
    /* One byte of block 3 of shard 5 flipped, the table left as it was. */
    char path[256];
    snprintf(path, sizeof path, "%s/shard-000005.sds", j.e.store);
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    off_t off = 4096 + 3 * (64 << 10) + 1234;
    unsigned char b;
    ck_assert_int_eq(pread(fd, &b, 1, off), 1);
    b ^= 0x5a;
    ck_assert_int_eq(pwrite(fd, &b, 1, off), 1);
    close(fd);
    int rc[64];
    uint64_t bad[64];
    ck_assert_uint_eq(e2e_cpu_verify(j.e.store, rc, bad, 64), 16);
    ck_assert_int_eq(rc[5], -EBADMSG);
    ck_assert_uint_eq(bad[5], 3);

    e2e_agent_start(&j.e);
    const char *argv[] = {e2e_stagingd,      "job",  "--store", j.e.store,    "--agent",
                          j.e.sock,          "--op", "verify",  "--inflight", "4",
                          "--agent-timeout", "20",   NULL};
    int st = e2e_run(argv, j.out, j.err, RUN_MS);
    e2e_job_read(&j);
    ck_assert_msg(st == 3, "expected exit 3 (corrupt blocks), found %d\n%s\n%s", st, j.out_text,
                  j.err_text);
    struct e2e_report r;
    e2e_report_parse(j.out_text, &r);
    ck_assert_uint_eq(r.verify_bad[5], 1);
    ck_assert_uint_eq(r.bad_block[5], 3);
    ck_assert_ptr_nonnull(strstr(j.out_text, "shard-000005.sds   verify BAD: block 3 of 16"));
    ck_assert_ptr_nonnull(strstr(j.out_text, "1 with bad blocks"));
    for (size_t i = 0; i < 16; i++)
        if (i != 5)
            ck_assert_uint_eq(r.verify_bad[i], 0);
    e2e_job_done(&j);
}
END_TEST

START_TEST(test_scan_topk_matches_cpu_reference_and_flags_override_config)
{
    struct e2e_job j = {0};
    e2e_env_init(&j.e);
    e2e_job_paths(&j);
    e2e_store_make(&j.e, 16, 1 * MiB, 64, 0, 0x5eed03);
    e2e_agent_start(&j.e);
    char conf[256];
    snprintf(conf, sizeof conf, "%s/stagingd.conf", j.e.dir);
    FILE *f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "# the file sets op, seed and k; the command line overrides k\n"
               "op = scan\n"
               "query-seed = 7\n"
               "  k=9  \n"
               "inflight = 3\n");
    fclose(f);
    const char *argv[] = {e2e_stagingd, "job",    "--config", conf, "--store", j.e.store,
                          "--agent",    j.e.sock, "--k",      "5",  "--list",  NULL};
    int st = e2e_run(argv, j.out, j.err, RUN_MS);
    e2e_job_read(&j);
    ck_assert_msg(st == 0, "stagingd job exited %d\n%s\n%s", st, j.out_text, j.err_text);
    ck_assert_ptr_nonnull(strstr(j.out_text, "job 1: scan of"));
    struct e2e_report r;
    e2e_report_parse(j.out_text, &r);
    for (size_t i = 0; i < 16; i++)
        ck_assert_uint_eq(r.scan_rows[i], 1);
    expect_topk(&j, &r, 7, 5, 16);
    e2e_job_done(&j);
}
END_TEST

START_TEST(test_both_ops_without_doorbell_on_f16_match_cpu)
{
    struct e2e_job j = {0};
    e2e_env_init(&j.e);
    e2e_job_paths(&j);
    e2e_store_make(&j.e, 12, 1 * MiB, 128, 1, 0x5eed04);
    e2e_agent_start(&j.e);
    const char *argv[] = {e2e_stagingd, "job",  "--store",      j.e.store,    "--agent",
                          j.e.sock,     "--op", "both",         "--doorbell", "off",
                          "--k",        "4",    "--query-seed", "3",          "--list",
                          "--inflight", "2",    "--batch",      "2",          NULL};
    int st = e2e_run(argv, j.out, j.err, RUN_MS);
    e2e_job_read(&j);
    ck_assert_msg(st == 0, "stagingd job exited %d\n%s\n%s", st, j.out_text, j.err_text);
    ck_assert_ptr_nonnull(strstr(j.out_text, "doorbell off"));
    ck_assert_ptr_nonnull(strstr(j.out_text, "(0 behind the doorbell)"));
    struct e2e_report r;
    e2e_report_parse(j.out_text, &r);
    for (size_t i = 0; i < 12; i++) {
        ck_assert_uint_eq(r.verify_ok[i], 1);
        ck_assert_uint_eq(r.scan_rows[i], 1);
    }
    expect_topk(&j, &r, 3, 4, 12);
    ck_assert(r.exactly_once);
    e2e_job_done(&j);
}
END_TEST

START_TEST(test_agent_killed_midjob_every_shard_processed_once)
{
    struct e2e_job j = {0};
    e2e_env_init(&j.e);
    e2e_job_paths(&j);
    const unsigned shards = 32;
    e2e_store_make(&j.e, shards, 1 * MiB, 64, 0, 0x5eed05);
    e2e_agent_start(&j.e);
    const char *argv[] = {e2e_stagingd, "job",  "--store",    j.e.store, "--agent",
                          j.e.sock,     "--op", "both",       "--k",     "6",
                          "--list",     "-v",   "--inflight", "3",       "--agent-timeout",
                          "30",         NULL};
    pid_t sd = e2e_spawn(argv, j.out, j.err);
    /* Some shards done, then the agent freezes (requests pile up unanswered)
     * and dies mid-job; a new one comes up on the same socket. */
    ck_assert_msg(e2e_wait_count(j.err, "verify ok (", 6, 30000),
                  "stagingd never completed 6 shards");
    ck_assert_int_eq(kill(j.e.agent, SIGSTOP), 0);
    int status;
    ck_assert_msg(waitpid(sd, &status, WNOHANG) == 0,
                  "the job ended before the agent could be killed mid-job");
    e2e_sleep_ms(100);
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
    /* Each shard's verify and scan result taken once, never twice. */
    ck_assert_uint_eq(e2e_count(j.err_text, "verify ok ("), shards);
    ck_assert_uint_eq(e2e_count(j.err_text, "scan done ("), shards);
    struct e2e_report r;
    e2e_report_parse(j.out_text, &r);
    int rc[64];
    uint64_t bad[64];
    ck_assert_uint_eq(e2e_cpu_verify(j.e.store, rc, bad, 64), shards);
    for (size_t i = 0; i < shards; i++) {
        ck_assert_int_eq(rc[i], 0);
        ck_assert_uint_eq(r.verify_ok[i], 1);
        ck_assert_uint_eq(r.scan_rows[i], 1);
    }
    ck_assert(r.exactly_once);
    expect_topk(&j, &r, 1, 6, shards);
    /* Printed for the log: whether work was in flight when the agent died. */
    const char *resub = strstr(j.out_text, "exactly once");
    fprintf(stderr, "agent killed after %u of %u shards; %.*s\n", before, shards,
            resub ? (int)strcspn(resub, "\n") : 0, resub ? resub : "");
    e2e_job_done(&j);
}
END_TEST

/* Connects to a stream socket at @path within @timeout_ms; -1 on failure. */
static int connect_stream(const char *path, int timeout_ms)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof addr.sun_path)
        return -1;
    memcpy(addr.sun_path, path, strlen(path) + 1);
    for (int waited = 0; waited < timeout_ms; waited += 5) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0)
            return fd;
        if (fd >= 0)
            close(fd);
        e2e_sleep_ms(5);
    }
    return -1;
}

/* The agent's view of every client: live leases of all classes, and whether
 * a client named @name is still connected. */
static void agent_stats(const char *sock, uint64_t *live_p, int *named_p, const char *name)
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
    int named = 0;
    for (uint32_t k = 0; k < st.client_count; k++)
        named |= strncmp(st.clients[k].name, name, LT_NAME_LEN) == 0;
    *live_p = live;
    *named_p = named;
    leasec_client_destroy(c);
}

START_TEST(test_sigterm_during_a_job_exits_cleanly_and_releases_every_lease)
{
    struct e2e_job j = {0};
    e2e_env_init(&j.e);
    e2e_job_paths(&j);
    e2e_store_make(&j.e, 16, 1 * MiB, 64, 0, 0x5eed06);
    e2e_agent_start(&j.e);
    char ctl[256];
    snprintf(ctl, sizeof ctl, "%s/ctl.sock", j.e.dir);
    const char *argv[] = {e2e_stagingd,
                          "run",
                          "--control",
                          ctl,
                          "--agent",
                          j.e.sock,
                          "--pinned-pool",
                          "6MiB",
                          "--segment-size",
                          "2MiB",
                          "--inflight",
                          "3",
                          "--rate-limit",
                          "6MiB",
                          "-v",
                          NULL};
    pid_t sd = e2e_spawn(argv, j.out, j.err);
    int fd = connect_stream(ctl, 20000);
    ck_assert_msg(fd >= 0, "no control socket at %s", ctl);
    struct stat st_sock;
    ck_assert_int_eq(stat(ctl, &st_sock), 0);
    ck_assert_uint_eq(st_sock.st_mode & 0777, 0600);
    char cmd[512];
    int len = snprintf(cmd, sizeof cmd, "job %s verify\n", j.e.store);
    ck_assert_int_eq(write(fd, cmd, (size_t)len), len);
    ck_assert_msg(e2e_wait_count(j.err, "verify ok (", 2, 30000), "the job never got going");
    ck_assert_int_eq(kill(sd, SIGTERM), 0);
    int st = e2e_wait(sd, 30000);
    e2e_job_read(&j);
    ck_assert_msg(st == 0, "stagingd run exited %d after SIGTERM\n%s", st, j.err_text);
    ck_assert_msg(access(ctl, F_OK) != 0, "the control socket %s is still there", ctl);
    ck_assert_ptr_nonnull(strstr(j.err_text, "SIGTERM from pid"));
    ck_assert_ptr_nonnull(strstr(j.err_text, "stopped: every lease released"));
    ck_assert_ptr_null(strstr(j.err_text, "abandon"));

    /* The job's requester got its report: cancelled, every lease given back. */
    char reply[16384];
    size_t got = 0;
    ssize_t n;
    while (got < sizeof reply - 1 && (n = read(fd, reply + got, sizeof reply - 1 - got)) > 0)
        got += (size_t)n;
    reply[got] = '\0';
    close(fd);
    ck_assert_ptr_nonnull(strstr(reply, "queued: verify"));
    ck_assert_ptr_nonnull(strstr(reply, "stagingd is shutting down"));
    ck_assert_ptr_nonnull(strstr(reply, "error: job 1 finished with status 1"));
    struct e2e_report r;
    e2e_report_parse(reply, &r);
    ck_assert_uint_gt(r.granted, 0);
    ck_assert_uint_eq(r.granted, r.released);

    /* And the agent holds nothing of it. */
    uint64_t live = 1;
    int named = 1;
    for (int i = 0; i < 200 && (live || named); i++) {
        agent_stats(j.e.sock, &live, &named, "stagingd");
        if (live || named)
            e2e_sleep_ms(10);
    }
    ck_assert_uint_eq(live, 0);
    ck_assert_int_eq(named, 0);
    ck_assert_int_eq(kill(j.e.agent, SIGTERM), 0);
    ck_assert_int_eq(e2e_wait(j.e.agent, 10000), 0);
    j.e.agent = 0;
    e2e_job_done(&j);
}
END_TEST

/* Runs stagingd job with config file contents @text; returns its stderr. */
static char *run_with_config(struct e2e_job *j, const char *text, int *status_p)
{
    char conf[256];
    snprintf(conf, sizeof conf, "%s/bad.conf", j->e.dir);
    FILE *f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    unlink(j->err);
    const char *argv[] = {e2e_stagingd, "job", "--config", conf, "--agent", j->e.sock, NULL};
    *status_p = e2e_run(argv, NULL, j->err, RUN_MS);
    return e2e_slurp(j->err);
}

START_TEST(test_bad_config_file_is_refused_naming_file_and_line)
{
    struct e2e_job j = {0};
    e2e_env_init(&j.e);
    e2e_job_paths(&j);
    char want[512];
    int st = 0;

    char *err = run_with_config(&j, "store = /nonexistent\n# fine so far\n\ninflght = 3\n", &st);
    snprintf(want, sizeof want, "%s/bad.conf:4: unknown key 'inflght'", j.e.dir);
    ck_assert_int_eq(st, 2);
    ck_assert_msg(strstr(err, want), "expected \"%s\" in:\n%s", want, err);
    free(err);

    err = run_with_config(&j, "store = /nonexistent\ninflight = many\n", &st);
    snprintf(want, sizeof want,
             "%s/bad.conf:2: inflight: expected an integer in 1..1024, found 'many'", j.e.dir);
    ck_assert_int_eq(st, 2);
    ck_assert_msg(strstr(err, want), "expected \"%s\" in:\n%s", want, err);
    free(err);

    err = run_with_config(&j, "op verify\n", &st);
    snprintf(want, sizeof want, "%s/bad.conf:1: expected 'key = value', found 'op verify'",
             j.e.dir);
    ck_assert_int_eq(st, 2);
    ck_assert_msg(strstr(err, want), "expected \"%s\" in:\n%s", want, err);
    free(err);

    err = run_with_config(&j, "doorbell = sometimes\n", &st);
    ck_assert_int_eq(st, 2);
    ck_assert_ptr_nonnull(
        strstr(err, "bad.conf:1: doorbell: expected auto, on or off, found 'sometimes'"));
    free(err);
    e2e_job_done(&j);
}
END_TEST

static Suite *e2e_suite(void)
{
    Suite *s = suite_create("e2e");
    TCase *tc = tcase_create("pipeline");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_verify_job_matches_cpu_verification);
    tcase_add_test(tc, test_corrupt_block_is_named_with_its_shard);
    tcase_add_test(tc, test_scan_topk_matches_cpu_reference_and_flags_override_config);
    tcase_add_test(tc, test_both_ops_without_doorbell_on_f16_match_cpu);
    tcase_add_test(tc, test_agent_killed_midjob_every_shard_processed_once);
    tcase_add_test(tc, test_sigterm_during_a_job_exits_cleanly_and_releases_every_lease);
    tcase_add_test(tc, test_bad_config_file_is_refused_naming_file_and_line);
    e2e_first_run_tests(tc);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: test_e2e STAGINGD LEASE_AGENT_HOST\n");
        return 2;
    }
    e2e_stagingd = argv[1];
    e2e_agent = argv[2];
    /* The host agent checks its budgets against RLIMIT_MEMLOCK, even for
     * root: the tests give it 8 MiB. */
    struct rlimit rl;
    const rlim_t need = 8u << 20;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
        if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need) {
            rl.rlim_cur = need;
            setrlimit(RLIMIT_MEMLOCK, &rl);
        } else {
            fprintf(stderr,
                    "test_e2e: skipped: RLIMIT_MEMLOCK is %llu bytes (hard); the host "
                    "agent needs %llu\n",
                    (unsigned long long)rl.rlim_max, (unsigned long long)need);
            return 77;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    SRunner *sr = srunner_create(e2e_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
