/* The agent killed at random points while a job runs (docs/reliability.md):
 * `stagingd job --op both` over a store of 64 shards of 1 MiB (4 MiB long;
 * it keeps the agent busy: leases, submits and releases are in flight at
 * any moment); lease-agent-host is frozen (SIGSTOP) after a random delay,
 * SIGKILLed a random moment later (seeded, printed; each kill waits until
 * the job has verified a shard on the current agent, so requests are in
 * flight when it dies) and a new one started on the same socket, again and
 * again: 4 times (20 with LEASE_RELIABILITY_LONG=1). stagingd must reconnect, re-offer
 * its segments, resubmit what had no answer and finish with every shard
 * verified and scanned exactly once (the report's per-shard rows and its
 * "exactly once" line), the results equal to the CPU's.
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

START_TEST(agent_killed_anywhere_every_shard_is_processed_exactly_once)
{
    /* 64 shards: what e2e_report_parse follows. */
    const unsigned shards = 64, kills = rel_long() ? 20 : 4;
    const uint64_t shard_bytes = (rel_long() ? 4096 : 1024) * KIB;
    uint64_t seed = rel_seed("agent kill loop");
    struct e2e_env e;
    e2e_env_init(&e);
    e2e_store_make(&e, shards, shard_bytes, 32, 0, 0x5eed7u);
    e2e_agent_start(&e);
    char out[256], err[256];
    snprintf(out, sizeof out, "%s/out.txt", e.dir);
    snprintf(err, sizeof err, "%s/err.txt", e.dir);
    const char *argv[] = {e2e_stagingd, "job",         "--store",         e.store,
                          "--agent",    e.sock,        "--op",            "both",
                          "--k",        "8",           "--inflight",      "3",
                          "--list",     "-v",          "--agent-timeout", "30",
                          "--pages",    "small",       NULL};
    pid_t sd = e2e_spawn(argv, out, err);
    unsigned done = 0;
    int status;
    for (; done < kills; done++) {
        /* Only while the job works on this agent: once it has verified one
         * more shard on it, with others leased and in flight. A kill before
         * stagingd (re)connects or after its last lease meets no lease and
         * proves nothing (under load that was every kill, now and then). */
        char *now = e2e_slurp(err);
        unsigned verified = e2e_count(now, "verify ok (");
        free(now);
        if (verified + 8 >= shards || !e2e_wait_count(err, "verify ok (", verified + 1, 60000))
            break;
        uint64_t delay_ms = rel_rand(&seed) % 20;
        e2e_sleep_ms((int)delay_ms);
        if (waitpid(sd, &status, WNOHANG) != 0)
            break; /* the job ended first */
        /* Frozen first for a moment, so requests are in flight when it dies. */
        ck_assert_int_eq(kill(e.agent, SIGSTOP), 0);
        uint64_t frozen_ms = 1 + rel_rand(&seed) % 30;
        e2e_sleep_ms((int)frozen_ms);
        ck_assert_int_eq(kill(e.agent, SIGKILL), 0);
        ck_assert_int_eq(e2e_wait(e.agent, 5000), 128 + SIGKILL);
        e.agent = 0;
        e2e_sleep_ms((int)(rel_rand(&seed) % 50));
        e2e_agent_start(&e);
        fprintf(stderr, "agent kill %u after %" PRIu64 " ms, frozen for %" PRIu64 " ms\n",
                done + 1, delay_ms, frozen_ms);
    }
    int st = e2e_wait(sd, 120000);
    char *text = e2e_slurp(out), *etext = e2e_slurp(err);
    ck_assert_msg(st == 0, "stagingd job exited %d\n%s\n%s", st, text, etext);
    ck_assert_msg(done >= 2, "only %u kills landed before the job ended", done);
    size_t elen = strlen(etext);
    ck_assert_msg(e2e_count(etext, "agent 0 lost") >= 1,
                  "stagingd never saw the agent go; its log's end:\n%s",
                  etext + (elen > 3000 ? elen - 3000 : 0)); /* Check's message limit */
    /* Each shard's verify and scan taken once, never twice. */
    ck_assert_uint_eq(e2e_count(etext, "verify ok ("), shards);
    ck_assert_uint_eq(e2e_count(etext, "scan done ("), shards);
    struct e2e_report r;
    e2e_report_parse(text, &r);
    int rc[64];
    uint64_t bad[64];
    ck_assert_uint_eq(e2e_cpu_verify(e.store, rc, bad, 64), shards);
    for (size_t i = 0; i < shards; i++) {
        ck_assert_int_eq(rc[i], 0);
        ck_assert_msg(r.verify_ok[i] == 1 && r.verify_bad[i] == 0 && r.scan_rows[i] == 1,
                      "shard %zu: %u ok, %u bad, %u scan rows\n%s", i, r.verify_ok[i],
                      r.verify_bad[i], r.scan_rows[i], text);
    }
    ck_assert(r.exactly_once);
    struct kn_scan_hit want[64], per[64];
    size_t rows = e2e_cpu_topk(e.store, 1, 8, want, per, 64);
    ck_assert_uint_eq(r.ntop, rows);
    for (size_t i = 0; i < rows; i++)
        ck_assert_msg(r.top[i].shard == want[i].shard && r.top[i].index == want[i].index,
                      "top-k row %zu: expected shard %u record %llu, found shard %u record %llu",
                      i + 1, want[i].shard, (unsigned long long)want[i].index, r.top[i].shard,
                      (unsigned long long)r.top[i].index);
    for (size_t s = 0; s < shards; s++)
        ck_assert_uint_eq(r.scan[s].index, per[s].index);
    const char *once = strstr(text, "exactly once");
    fprintf(stderr, "%u agent kills; %.*s\n", done, once ? (int)strcspn(once, "\n") : 0,
            once ? once : "");
    free(text);
    free(etext);
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
    Suite *s = suite_create("kill_agent");
    TCase *tc = tcase_create("loop");
    tcase_set_timeout(tc, rel_long() ? 1800 : 300);
    tcase_add_test(tc, agent_killed_anywhere_every_shard_is_processed_exactly_once);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
