/* A job's report (stagingd/job/job_report.c): the top-k merged across
 * shards against a brute-force reference, the tally and exit status of a
 * set of results, and the report and verdict lines of a job whose results
 * are set here (over a real generated store, with no agent, pool or reader
 * behind it): rows for failures and bad blocks, one line for the shards
 * not run and one per reason shared by many failures, every row with list;
 * file queries: each query's top-k named by global row, as a table and as
 * JSON, and the settings a job refuses for them. */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

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

/* A job over the store with @cfg's settings on top of the defaults here. */
static int job_make(struct sd_job_config *cfg, enum sd_job_op op, char *e, size_t elen,
                    struct sd_job **job_p)
{
    static uint64_t seq;
    struct sd_job_env env = {
        .id = 7, .nagents = 1, .words = words, .words_slots = 16, .seq = &seq, .notify_fd = -1};
    cfg->inflight = 4;
    cfg->batch = 16;
    cfg->agent_timeout_s = 30;
    char path[96];
    snprintf(path, sizeof path, "%s/s", store_dir);
    return sd_job_create(cfg, path, op, &env, e, elen, job_p);
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

/* Query @q's results on every shard: five hits each, records 0..4 scored
 * from @rng. */
static void scan_results_set(struct sd_job *job, uint64_t *rng)
{
    for (size_t s = 0; s < SHARDS; s++) {
        struct sd_job__result *r = &job->res[s];
        r->state = SD_JOB__RES_DONE;
        r->got = job->ops;
        r->completions = 1;
        r->records = 64;
        r->scans_got = job->nq;
        for (uint32_t q = 0; q < job->nq; q++) {
            struct sd_job__scan *sc = &r->scan[q];
            sc->got = 1;
            sc->nhits = 5;
            sc->hits = calloc(5, sizeof *sc->hits);
            ck_assert_ptr_nonnull(sc->hits);
            for (size_t i = 0; i < 5; i++) {
                sc->hits[i].score = (float)(rng_next(rng) % 100000) / 7.0f;
                sc->hits[i].index = 10 * i + q;
            }
            qsort(sc->hits, 5, sizeof *sc->hits, key_desc);
            sc->has_hit = 1;
            sc->hit = sc->hits[0];
        }
    }
    job->next_shard = SHARDS;
}

START_TEST(file_queries_report_each_querys_top_k_by_global_row)
{
    /* The store has 8 shards of 256 records of dim 16. */
    float queries[3 * 16] = {0};
    const uint64_t ids[3] = {4, 9, 2};
    struct sd_job_config cfg = {.k = 5,
                                .queries = queries,
                                .query_ids = ids,
                                .nqueries = 3,
                                .query_dim = 16,
                                .query_source = "q.npy"};
    struct sd_job *job = NULL;
    char e[SD_ERR_LEN];
    ck_assert_msg(job_make(&cfg, SD_JOB_SCAN, e, sizeof e, &job) == 0, "%s", e);
    ck_assert_uint_eq(job->nq, 3);
    ck_assert_uint_eq(job->rows, SHARDS * 256);
    for (size_t s = 0; s < SHARDS; s++)
        ck_assert_uint_eq(job->row_base[s], s * 256);
    uint64_t rng = 17;
    scan_results_set(job, &rng);
    char *text = report_of(job);
    ck_assert_ptr_nonnull(strstr(text, "top-5 by dot product for 3 queries from q.npy"));
    /* Every row of every query: 15, each naming its global row. */
    unsigned rows = 0;
    char *copy = strdup(text), *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        uint64_t qid, rank, row, rec;
        unsigned shard;
        float score;
        if (sscanf(line, " %" SCNu64 " %" SCNu64 " %" SCNu64 " shard-%6u.sds %" SCNu64 " %f", &qid,
                   &rank, &row, &shard, &rec, &score) != 6)
            continue;
        ck_assert(qid == 4 || qid == 9 || qid == 2);
        const uint32_t q = qid == 4 ? 0 : qid == 9 ? 1 : 2;
        ck_assert_uint_eq(row, shard * 256ull + rec);
        ck_assert_uint_eq(rec % 10, q);
        ck_assert(score == job->topk[q][rank - 1].score);
        rows++;
    }
    free(copy);
    ck_assert_msg(rows == 15, "%u rows\n%s", rows, text);
    free(text);

    /* The same as JSON, with a failed shard among the problems. */
    free(job->res[3].why);
    job->res[3].why = strdup("staging read failed: EIO");
    job->res[3].state = SD_JOB__RES_FAILED;
    job->cfg.json = 1;
    free(job->topk[0]);
    free(job->topk[1]);
    free(job->topk[2]);
    free(job->topk);
    free(job->ntopk);
    job->topk = NULL;
    job->ntopk = NULL;
    text = report_of(job);
    json_error_t je;
    json_t *root = json_loads(text, 0, &je);
    ck_assert_msg(root, "%s: %s", je.text, text);
    ck_assert_int_eq(json_integer_value(json_object_get(root, "status")), 1);
    ck_assert_str_eq(json_string_value(json_object_get(root, "query_source")), "q.npy");
    ck_assert_int_eq(json_integer_value(json_object_get(root, "rows")), SHARDS * 256);
    json_t *qs = json_object_get(root, "queries");
    ck_assert_uint_eq(json_array_size(qs), 3);
    for (uint32_t q = 0; q < 3; q++) {
        json_t *qo = json_array_get(qs, q);
        ck_assert_int_eq(json_integer_value(json_object_get(qo, "query")), (json_int_t)ids[q]);
        json_t *hits = json_object_get(qo, "hits");
        ck_assert_uint_eq(json_array_size(hits), 5);
        for (size_t i = 0; i < 5; i++) {
            json_t *h = json_array_get(hits, i);
            const struct kn_scan_hit *want = &job->topk[q][i];
            ck_assert_int_eq(json_integer_value(json_object_get(h, "row")),
                             (json_int_t)(want->shard * 256ull + want->index));
            const float score = (float)json_real_value(json_object_get(h, "score"));
            ck_assert(memcmp(&score, &want->score, 4) == 0);
        }
    }
    json_t *pr = json_object_get(root, "problems");
    ck_assert_uint_eq(json_array_size(pr), 1);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(pr, 0), "state")), "failed");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(pr, 0), "why")),
                     "staging read failed: EIO");
    json_decref(root);
    free(text);
    sd_job_destroy(job);
}
END_TEST

START_TEST(file_queries_of_another_dim_are_refused_and_buffers_hold_every_query)
{
    float queries[2 * 8] = {0};
    struct sd_job_config cfg = {
        .k = 5, .queries = queries, .nqueries = 2, .query_dim = 8, .query_source = "q.fvecs"};
    struct sd_job *job = NULL;
    char e[SD_ERR_LEN];
    ck_assert_int_eq(job_make(&cfg, SD_JOB_SCAN, e, sizeof e, &job), -EINVAL);
    ck_assert_msg(strstr(e, "q.fvecs: queries of dim 8") && strstr(e, "records of dim 16"), "%s",
                  e);
    cfg.nqueries = SD_JOB_QUERIES_MAX + 1;
    cfg.query_dim = 16;
    ck_assert_int_eq(job_make(&cfg, SD_JOB_SCAN, e, sizeof e, &job), -EINVAL);

    /* A shard's buffer: the payload, the table (verify), then each query
     * on 64 bytes and k hits of 16 bytes for each. */
    struct sd_store_entry ent = {.record_type = SD_RECORD_F32,
                                 .dim = 16,
                                 .records = 256,
                                 .payload_len = 16 * 1024,
                                 .blocks = 4,
                                 .block_size = 4096};
    struct sd_job_config one = {.k = 5};
    struct sd_job_config three = {.k = 5, .nqueries = 3};
    const uint64_t base = 16 * 1024 + 64; /* payload, then the table rounded to 64 */
    ck_assert_uint_eq(sd_job_buffer_size(&one, SD_JOB_BOTH, &ent),
                      (base + 64 + 5 * 16 + LEASEC_POOL_BUF_ALIGN - 1) / LEASEC_POOL_BUF_ALIGN *
                          LEASEC_POOL_BUF_ALIGN);
    ck_assert_uint_eq(sd_job_buffer_size(&three, SD_JOB_BOTH, &ent),
                      (base + 3 * 64 + 3 * 5 * 16 + LEASEC_POOL_BUF_ALIGN - 1) /
                          LEASEC_POOL_BUF_ALIGN * LEASEC_POOL_BUF_ALIGN);
    struct sd_job_config many = {.k = 64, .nqueries = 1000};
    ck_assert_uint_ge(sd_job_buffer_size(&many, SD_JOB_SCAN, &ent),
                      16 * 1024 + 1000 * (64 + 64 * 16));
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
    tcase_add_test(rep, file_queries_report_each_querys_top_k_by_global_row);
    tcase_add_test(rep, file_queries_of_another_dim_are_refused_and_buffers_hold_every_query);
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
