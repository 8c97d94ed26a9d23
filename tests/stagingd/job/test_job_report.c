/* A job's report (stagingd/job/job_report.c): the top-k merged across
 * shards against a brute-force reference, the tally and exit status of a
 * set of results, and the report and verdict lines of a job whose results
 * are set here (over a real generated store, with no agent, pool or reader
 * behind it): rows for failures and bad blocks, one line for the shards
 * not run and one per reason shared by many failures, every row with list. */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "job_internal.h"
#include "kernels/scan.h"

#define SHARDS 8

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int key_desc(const void *a, const void *b)
{
    const struct kn_scan_hit *x = a, *y = b;
    uint64_t kx = kn_scan_key(x->score, x->index), ky = kn_scan_key(y->score, y->index);
    return (kx < ky) - (kx > ky);
}

/* ---- a job over a generated store, with results set by the test ---- */

static char store_dir[64];
static uint64_t words[8 * 16];

static void store_setup(void)
{
    snprintf(store_dir, sizeof store_dir, "/tmp/sdjob-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(store_dir));
    struct sd_gen_opts o;
    sd_gen_opts_default(&o);
    char out[96];
    snprintf(out, sizeof out, "%s/s", store_dir);
    o.out_dir = out;
    o.size = SHARDS * 16 * 1024;
    o.shard_size = 16 * 1024;
    o.dim = 16;
    o.block_size = 4096;
    char err[SD_ERR_LEN];
    ck_assert_msg(sd_gen_store(&o, err, sizeof err, NULL) == 0, "%s", err);
}

static void store_teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", store_dir);
    ck_assert_int_eq(system(cmd), 0);
}

static struct sd_job *job_new(enum sd_job_op op, int list)
{
    struct sd_job_config cfg = {
        .inflight = 4, .batch = 16, .query_seed = 1, .k = 5, .agent_timeout_s = 30, .list = list};
    static uint64_t seq;
    struct sd_job_env env = {
        .id = 7, .nagents = 1, .words = words, .words_slots = 16, .seq = &seq, .notify_fd = -1};
    char path[96], err[SD_ERR_LEN];
    snprintf(path, sizeof path, "%s/s", store_dir);
    struct sd_job *job = NULL;
    ck_assert_msg(sd_job_create(&cfg, path, op, &env, err, sizeof err, &job) == 0, "%s", err);
    ck_assert_uint_eq(job->nshards, SHARDS);
    return job;
}

static void result_ok(struct sd_job *job, size_t i)
{
    struct sd_job__result *r = &job->res[i];
    r->state = SD_JOB__RES_DONE;
    r->got = job->ops;
    r->completions = (unsigned)__builtin_popcount(job->ops);
    r->vstatus = LT_OK;
    r->v.blocks_checked = 4;
}

static void result_bad(struct sd_job *job, size_t i, uint64_t block)
{
    result_ok(job, i);
    struct sd_job__result *r = &job->res[i];
    r->vstatus = LT_E_CHECKSUM_MISMATCH;
    r->v.first_bad_block = block;
    r->v.bad_blocks = 1;
    r->v.expected = 0x1111;
    r->v.actual = 0x2222;
    job->bad_blocks++;
}

static char *report_of(struct sd_job *job)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(f);
    sd_job_report(job, f);
    fclose(f);
    return text;
}

static unsigned count(const char *hay, const char *needle)
{
    unsigned n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* ---- pure functions ---- */

START_TEST(topk_merge_is_the_true_top_k_of_every_shards_hits)
{
    uint64_t rng = 0x70b4;
    for (int round = 0; round < 50; round++) {
        struct sd_job__result res[6];
        struct sd_job__scan scans[6];
        memset(res, 0, sizeof res);
        memset(scans, 0, sizeof scans);
        for (size_t s = 0; s < 6; s++)
            res[s].scan = &scans[s];
        struct kn_scan_hit all[6 * 12];
        size_t nall = 0;
        for (size_t s = 0; s < 6; s++) {
            if (rng_next(&rng) % 4 == 0)
                continue; /* a shard with no scan result */
            size_t n = 1 + rng_next(&rng) % 12;
            struct kn_scan_hit *h = calloc(n, sizeof *h);
            ck_assert_ptr_nonnull(h);
            for (size_t i = 0; i < n; i++) {
                /* Distinct scores: the reference needs no tie rule. */
                h[i].score = (float)(rng_next(&rng) % 1000000) / 1000.0f + (float)s * 1e-4f;
                h[i].index = i;
            }
            qsort(h, n, sizeof *h, key_desc);
            for (size_t i = 0; i < n; i++) {
                all[nall] = h[i];
                all[nall].shard = (uint32_t)s;
                nall++;
            }
            scans[s].has_hit = 1;
            scans[s].hits = h;
            scans[s].nhits = n;
        }
        qsort(all, nall, sizeof *all, key_desc);
        size_t k = 1 + rng_next(&rng) % 20;
        struct kn_scan_hit *got = NULL;
        size_t ngot = 99;
        ck_assert_int_eq(sd_job__topk_merge(res, 6, 0, k, &got, &ngot), 0);
        size_t want = k < nall ? k : nall;
        ck_assert_uint_eq(ngot, want);
        for (size_t i = 0; i < want; i++) {
            ck_assert_uint_eq(got[i].shard, all[i].shard);
            ck_assert_uint_eq(got[i].index, all[i].index);
            ck_assert(memcmp(&got[i].score, &all[i].score, sizeof(float)) == 0);
        }
        free(got);
        for (size_t s = 0; s < 6; s++)
            free(scans[s].hits);
    }
    struct sd_job__result none[3];
    struct sd_job__scan none_scans[3];
    memset(none, 0, sizeof none);
    memset(none_scans, 0, sizeof none_scans);
    for (size_t s = 0; s < 3; s++)
        none[s].scan = &none_scans[s];
    struct kn_scan_hit *got = (struct kn_scan_hit *)none;
    size_t ngot = 99;
    ck_assert_int_eq(sd_job__topk_merge(none, 3, 0, 10, &got, &ngot), 0);
    ck_assert_ptr_null(got);
    ck_assert_uint_eq(ngot, 0);
}
END_TEST

START_TEST(tally_and_status_count_every_state)
{
    struct sd_job__result res[6];
    memset(res, 0, sizeof res);
    const unsigned ops = 1; /* verify */
    for (int i = 0; i < 6; i++) {
        res[i].state = SD_JOB__RES_DONE;
        res[i].got = ops;
        res[i].completions = 1;
    }
    struct sd_job__tally t;
    sd_job__tally(res, 6, ops, &t);
    ck_assert_uint_eq(t.clean, 6);
    ck_assert_uint_eq(t.exact, 6);
    ck_assert_int_eq(sd_job__status(res, 6), 0);

    res[1].vstatus = LT_E_CHECKSUM_MISMATCH;
    ck_assert_int_eq(sd_job__status(res, 6), 3);
    res[2].completions = 2; /* a duplicate counted: not exactly once */
    res[3].state = SD_JOB__RES_FAILED;
    res[4].state = SD_JOB__RES_SKIPPED;
    res[4].got = 0;
    res[4].completions = 0;
    res[5].state = SD_JOB__RES_PENDING;
    res[5].got = 0;
    sd_job__tally(res, 6, ops, &t);
    ck_assert_uint_eq(t.clean, 2); /* 0 and 2 */
    ck_assert_uint_eq(t.bad, 1);
    ck_assert_uint_eq(t.failed, 1);
    ck_assert_uint_eq(t.skipped, 1);
    ck_assert_uint_eq(t.pending, 1);
    ck_assert_uint_eq(t.exact, 3); /* 0, 1 and the failed 3 had one result each */
    ck_assert_int_eq(sd_job__status(res, 6), 1);
}
END_TEST

/* ---- the report ---- */

START_TEST(shards_not_run_are_one_line_with_their_count_names_and_reason)
{
    struct sd_job *job = job_new(SD_JOB_VERIFY, 0);
    result_ok(job, 0);
    result_bad(job, 1, 2);
    job->next_shard = 2;
    sd_job_cancel(job, "no GPU agent ready at /x.sock for 30 s");
    char *text = report_of(job);
    ck_assert_msg(count(text, "NOT RUN") == 1, "%s", text);
    ck_assert_ptr_nonnull(strstr(text,
                                 "  NOT RUN: 6 shard(s) (shard-000002.sds, shard-000003.sds, "
                                 "shard-000004.sds and 3 more): no GPU agent ready at /x.sock "
                                 "for 30 s\n"));
    ck_assert_ptr_nonnull(strstr(text, "shard-000001.sds   verify BAD: block 2 of 4"));
    ck_assert_ptr_null(strstr(text, "shard-000000.sds")); /* clean: no row without list */
    ck_assert_ptr_nonnull(
        strstr(text, "2 of 8 done: 1 clean, 1 with bad blocks, 0 failed, 6 not run"));
    ck_assert_ptr_nonnull(strstr(text, "cancelled      no GPU agent ready at /x.sock for 30 s"));
    free(text);

    char line[512];
    sd_job_outcome(job, line, sizeof line);
    ck_assert_str_eq(line, "job 7 verify: FAILED: 2 of 8 shard(s) done, 0 failed, 6 not run: no "
                           "GPU agent ready at /x.sock for 30 s; exit status 1");
    ck_assert_int_eq(sd_job_exit_status(job), 1);

    /* With list, every shard has its row again. */
    job->cfg.list = 1;
    text = report_of(job);
    ck_assert_uint_eq(count(text, "NOT RUN: no GPU agent ready"), 6);
    ck_assert_ptr_nonnull(strstr(text, "shard-000007.sds   NOT RUN: no GPU agent ready"));
    ck_assert_ptr_nonnull(strstr(text, "shard-000000.sds   verify ok: 4 blocks"));
    free(text);
    sd_job_destroy(job);
}
END_TEST

START_TEST(failures_sharing_a_reason_are_grouped_others_keep_their_rows)
{
    struct sd_job *job = job_new(SD_JOB_VERIFY, 0);
    for (size_t i = 0; i < 5; i++)
        sd_job__result_fail(job, i, SD_JOB__RES_FAILED,
                            "lease request not sent: segment 1 refused");
    sd_job__result_fail(job, 5, SD_JOB__RES_FAILED, "staging read failed: EIO");
    sd_job__result_fail(job, 6, SD_JOB__RES_FAILED, "staging read failed: EIO");
    result_ok(job, 7);
    job->next_shard = SHARDS;
    char *text = report_of(job);
    ck_assert_ptr_nonnull(strstr(text, "  FAILED: 5 shard(s) (shard-000000.sds, shard-000001.sds, "
                                       "shard-000002.sds and 2 more): lease request not sent: "
                                       "segment 1 refused\n"));
    ck_assert_ptr_null(strstr(text, "shard-000003.sds"));
    /* Two are few enough for their own rows. */
    ck_assert_ptr_nonnull(strstr(text, "shard-000005.sds   FAILED: staging read failed: EIO"));
    ck_assert_ptr_nonnull(strstr(text, "shard-000006.sds   FAILED: staging read failed: EIO"));
    ck_assert_ptr_nonnull(strstr(text, "1 of 8 done: 1 clean, 0 with bad blocks, 7 failed"));
    free(text);
    char line[512];
    sd_job_outcome(job, line, sizeof line);
    ck_assert_str_eq(
        line, "job 7 verify: FAILED: 1 of 8 shard(s) done, 7 failed, 0 not run; exit status 1");
    sd_job_destroy(job);
}
END_TEST

START_TEST(verdict_says_ok_or_corrupt_first)
{
    struct sd_job *job = job_new(SD_JOB_VERIFY, 0);
    for (size_t i = 0; i < SHARDS; i++)
        result_ok(job, i);
    job->next_shard = SHARDS;
    char line[512];
    sd_job_outcome(job, line, sizeof line);
    ck_assert_msg(strncmp(line, "job 7 verify: OK: 8 of 8 shard(s) clean", 39) == 0, "%s", line);
    ck_assert_int_eq(sd_job_exit_status(job), 0);
    result_bad(job, 3, 1);
    sd_job_outcome(job, line, sizeof line);
    ck_assert_str_eq(line, "job 7 verify: CORRUPT: 1 of 8 shard(s) with bad blocks (1 bad "
                           "block(s)), 7 clean; exit status 3");
    ck_assert_int_eq(sd_job_exit_status(job), 3);
    sd_job_destroy(job);
}
END_TEST

START_TEST(scan_report_lists_the_merged_top_k)
{
    struct sd_job *job = job_new(SD_JOB_SCAN, 0);
    uint64_t rng = 5;
    for (size_t s = 0; s < SHARDS; s++) {
        struct sd_job__result *r = &job->res[s];
        r->state = SD_JOB__RES_DONE;
        r->got = job->ops;
        r->completions = 1;
        r->records = 64;
        r->scans_got = 1;
        struct sd_job__scan *sc = &r->scan[0];
        sc->got = 1;
        sc->nhits = 5;
        sc->hits = calloc(5, sizeof *sc->hits);
        ck_assert_ptr_nonnull(sc->hits);
        for (size_t i = 0; i < 5; i++) {
            sc->hits[i].score = (float)(rng_next(&rng) % 100000) / 7.0f;
            sc->hits[i].index = i;
        }
        qsort(sc->hits, 5, sizeof *sc->hits, key_desc);
        sc->has_hit = 1;
        sc->hit = sc->hits[0];
    }
    job->next_shard = SHARDS;
    char *text = report_of(job);
    ck_assert_ptr_nonnull(strstr(text, "top-5 by dot product (query seed 1"));
    ck_assert_uint_eq(count(text, "\n  #"), 5);
    ck_assert_uint_eq(job->ntopk[0], 5);
    for (size_t i = 1; i < job->ntopk[0]; i++) /* best first */
        ck_assert(job->topk[0][i].score <= job->topk[0][i - 1].score);
    free(text);
    sd_job_destroy(job);
}
END_TEST

static Suite *job_report_suite(void)
{
    Suite *s = suite_create("job_report");
    TCase *pure = tcase_create("pure");
    tcase_add_test(pure, topk_merge_is_the_true_top_k_of_every_shards_hits);
    tcase_add_test(pure, tally_and_status_count_every_state);
    suite_add_tcase(s, pure);
    TCase *rep = tcase_create("report");
    tcase_add_unchecked_fixture(rep, store_setup, store_teardown);
    tcase_add_test(rep, shards_not_run_are_one_line_with_their_count_names_and_reason);
    tcase_add_test(rep, failures_sharing_a_reason_are_grouped_others_keep_their_rows);
    tcase_add_test(rep, verdict_says_ok_or_corrupt_first);
    tcase_add_test(rep, scan_report_lists_the_merged_top_k);
    suite_add_tcase(s, rep);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(job_report_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
