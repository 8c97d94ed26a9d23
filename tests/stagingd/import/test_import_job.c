/* Real vectors in, real answers out: vector files written here are imported
 * by `stagingd import`, scanned by `stagingd job --query` against a real
 * lease-agent-host, and every rank of every query's top-k is compared with
 * a brute-force reference computed here from the files' own numbers, not
 * from the store and not with the job's code: each score the exact sum of
 * the products in double precision, rounded once to float (what the host
 * backend's reference scan returns), ties broken by the lower row as the
 * scan's ranking does. The data holds exact duplicates across shards so
 * the ties are really there.
 *
 * argv[1]: stagingd, argv[2]: lease-agent-host. Skips (77) where the host
 * agent cannot lock what the tests give it (RLIMIT_MEMLOCK). */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "../e2e/e2e_util.h"
#include "import_test_util.h"
#include "stagingd/shard.h"

#define ROWS 2400u
#define DIM 40u
#define K 12u
#define NQ 6u
#define RUN_MS 60000
/* The agent-loss test's larger store and query set. */
#define BIG_ROWS 24000u
#define BIG_NQ 400u

struct ref_hit {
    float score;
    uint64_t row;
};

/* Descending score, then ascending row: the scan's order for numbers. */
static int ref_cmp(const void *a, const void *b)
{
    const struct ref_hit *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return (x->row > y->row) - (x->row < y->row);
}

/* The top K of @data (@rows x DIM floats) against @q. */
static void reference_topk(const float *data, uint64_t rows, const float *q, struct ref_hit *top_p)
{
    static struct ref_hit all[BIG_ROWS];
    ck_assert_uint_le(rows, BIG_ROWS);
    for (uint64_t r = 0; r < rows; r++) {
        double sum = 0.0;
        for (uint32_t i = 0; i < DIM; i++)
            sum += (double)data[r * DIM + i] * (double)q[i];
        all[r].score = (float)sum;
        all[r].row = r;
    }
    qsort(all, rows, sizeof all[0], ref_cmp);
    memcpy(top_p, all, K * sizeof *top_p);
}

/* The base data: random rows, with row 100 scaled up and copied to rows
 * 1000 and 2300 (three shards), and row 50 copied to row 450. */
static float *base_make(void)
{
    float *v = it_random_f32((size_t)ROWS * DIM, 0x1a2b);
    for (uint32_t i = 0; i < DIM; i++) {
        v[100 * DIM + i] *= 4.0f;
        v[1000 * DIM + i] = v[100 * DIM + i];
        v[2300 * DIM + i] = v[100 * DIM + i];
        v[450 * DIM + i] = v[50 * DIM + i];
    }
    return v;
}

/* The queries: row 100 (a three-way tie at the top), row 50 (a two-way
 * one), and four random ones. */
static float *queries_make(const float *base)
{
    float *q = it_random_f32((size_t)NQ * DIM, 0x9e37);
    memcpy(q, base + 100 * DIM, DIM * sizeof(float));
    memcpy(q + DIM, base + 50 * DIM, DIM * sizeof(float));
    return q;
}

struct run {
    struct e2e_env e;
    char out[256], err[256];
    char *out_text, *err_text;
};

static void run_free(struct run *r)
{
    free(r->out_text);
    free(r->err_text);
    r->out_text = r->err_text = NULL;
}

/* Runs stagingd with @args after the binary; its exit status. */
static int run_stagingd(struct run *r, const char *const *args)
{
    const char *argv[40];
    size_t n = 0;
    argv[n++] = e2e_stagingd;
    for (; *args && n < 39; args++)
        argv[n++] = *args;
    argv[n] = NULL;
    unlink(r->out);
    unlink(r->err);
    int st = e2e_run(argv, r->out, r->err, RUN_MS);
    run_free(r);
    r->out_text = e2e_slurp(r->out);
    r->err_text = e2e_slurp(r->err);
    return st;
}

static void import_store(struct run *r, const char *store, const char *file, const char *type)
{
    const char *args[] = {"import", "--out",  store, "--shard-size", "64000", "--block-size",
                          "4096",   "--type", type,  "--no-fsync",   file,    NULL};
    int st = run_stagingd(r, args);
    ck_assert_msg(st == 0, "stagingd import exited %d\n%s", st, r->err_text);
    ck_assert_msg(strstr(r->err_text, "wrote 6 shard(s)"), "%s", r->err_text);
}

/* Each of @nq queries' reference for a store of @base (@rows rows) with
 * queries @q, rounded to f16 (as the job sends them to an f16 store) when
 * @f16. */
static void references(const float *base, uint64_t rows, const float *q, uint32_t nq, int f16,
                       struct ref_hit (*ref)[K])
{
    float qq[DIM];
    for (uint32_t j = 0; j < nq; j++) {
        for (uint32_t i = 0; i < DIM; i++)
            qq[i] = f16 ? sd_f16_to_f32(sd_f16_from_f32(q[j * DIM + i])) : q[j * DIM + i];
        reference_topk(base, rows, qq, ref[j]);
    }
}

/* The JSON report of a clean job over @rows rows holds, for the queries
 * @ids (rows of the query file), exactly the reference's top-K, rank by
 * rank, score bit for bit. Shards hold 400 rows. */
static void expect_json(const struct run *r, uint64_t rows, const struct ref_hit (*ref)[K],
                        const uint32_t *ids, size_t nids)
{
    json_error_t jerr;
    json_t *root = json_loads(r->out_text, 0, &jerr);
    ck_assert_msg(root, "the report is not JSON: %s (line %d)\n%s", jerr.text, jerr.line,
                  r->out_text);
    ck_assert_int_eq(json_integer_value(json_object_get(root, "status")), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(root, "rows")), (json_int_t)rows);
    ck_assert_int_eq(json_integer_value(json_object_get(root, "k")), K);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(root, "shards"), "clean")),
                     (json_int_t)(rows / 400));
    ck_assert(json_is_true(json_object_get(json_object_get(root, "summary"), "exactly_once")));
    json_t *qs = json_object_get(root, "queries");
    ck_assert_uint_eq(json_array_size(qs), nids);
    for (size_t j = 0; j < nids; j++) {
        json_t *qo = json_array_get(qs, j);
        ck_assert_int_eq(json_integer_value(json_object_get(qo, "query")), ids[j]);
        json_t *hits = json_object_get(qo, "hits");
        ck_assert_uint_eq(json_array_size(hits), K);
        for (size_t i = 0; i < K; i++) {
            json_t *h = json_array_get(hits, i);
            const struct ref_hit *want = &ref[ids[j]][i];
            const uint64_t row = (uint64_t)json_integer_value(json_object_get(h, "row"));
            const float score = (float)json_real_value(json_object_get(h, "score"));
            ck_assert_msg(row == want->row && memcmp(&score, &want->score, 4) == 0,
                          "query %u rank %zu: expected row %" PRIu64 " score %.9g, found row "
                          "%" PRIu64 " score %.9g",
                          ids[j], i + 1, want->row, (double)want->score, row, (double)score);
            /* The row is the shard's record counted from the shard's first row. */
            const uint64_t shard = (uint64_t)json_integer_value(json_object_get(h, "shard_index"));
            const uint64_t rec = (uint64_t)json_integer_value(json_object_get(h, "record"));
            ck_assert_uint_eq(shard * 400 + rec, row);
            ck_assert_int_eq(json_integer_value(json_object_get(h, "rank")), (json_int_t)i + 1);
        }
    }
    json_decref(root);
}

static void env_start(struct run *r)
{
    e2e_env_init(&r->e);
    snprintf(r->out, sizeof r->out, "%s/out.txt", r->e.dir);
    snprintf(r->err, sizeof r->err, "%s/err.txt", r->e.dir);
    e2e_agent_start(&r->e);
}

static void env_stop(struct run *r)
{
    run_free(r);
    e2e_env_cleanup(&r->e);
}

START_TEST(imported_npy_f32_gives_the_references_top_k_for_every_query)
{
    struct run r = {0};
    env_start(&r);
    float *base = base_make();
    float *q = queries_make(base);
    char file[256], qfile[256], store[256];
    snprintf(file, sizeof file, "%s/base.npy", r.e.dir);
    snprintf(qfile, sizeof qfile, "%s/queries.npy", r.e.dir);
    snprintf(store, sizeof store, "%s/store", r.e.dir);
    char dict[128];
    snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%u, %u), }",
             ROWS, DIM);
    it_npy_write(file, 1, dict, base, (size_t)ROWS * DIM * 4);
    snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%u, %u), }", NQ,
             DIM);
    it_npy_write(qfile, 3, dict, q, (size_t)NQ * DIM * 4);
    import_store(&r, store, file, "f32");

    static struct ref_hit ref[NQ][K];
    references(base, ROWS, q, NQ, 0, ref);
    /* The tie rule, spelled out: equal scores, lower row first. */
    ck_assert(ref[0][0].score == ref[0][1].score && ref[0][1].score == ref[0][2].score);
    ck_assert_uint_eq(ref[0][0].row, 100);
    ck_assert_uint_eq(ref[0][1].row, 1000);
    ck_assert_uint_eq(ref[0][2].row, 2300);

    const char *args[] = {"job",    "--store",    store, "--agent",         r.e.sock, "--op",
                          "both",   "--query",    qfile, "--all",           "--k",    "12",
                          "--json", "--inflight", "3",   "--agent-timeout", "20",     NULL};
    int st = run_stagingd(&r, args);
    ck_assert_msg(st == 0, "stagingd job exited %d\n%s\n%s", st, r.out_text, r.err_text);
    const uint32_t ids[NQ] = {0, 1, 2, 3, 4, 5};
    expect_json(&r, ROWS, (const struct ref_hit(*)[K])ref, ids, NQ);
    free(q);
    free(base);
    env_stop(&r);
}
END_TEST

START_TEST(imported_npy_f16_gives_the_references_top_k_with_queries_rounded_to_f16)
{
    struct run r = {0};
    env_start(&r);
    float *base = base_make();
    float *q = queries_make(base);
    /* The file holds f16; the reference uses its values exactly. */
    uint16_t *h = malloc((size_t)ROWS * DIM * 2);
    ck_assert_ptr_nonnull(h);
    for (size_t i = 0; i < (size_t)ROWS * DIM; i++) {
        h[i] = sd_f16_from_f32(base[i]);
        base[i] = sd_f16_to_f32(h[i]);
    }
    char file[256], qfile[256], store[256];
    snprintf(file, sizeof file, "%s/base16.npy", r.e.dir);
    snprintf(qfile, sizeof qfile, "%s/queries.fvecs", r.e.dir);
    snprintf(store, sizeof store, "%s/store16", r.e.dir);
    char dict[128];
    snprintf(dict, sizeof dict, "{'descr': '<f2', 'fortran_order': False, 'shape': (%u, %u), }",
             ROWS, DIM);
    it_npy_write(file, 2, dict, h, (size_t)ROWS * DIM * 2);
    it_xvecs_write(qfile, NQ, DIM, q, 4);
    /* 32000-byte shards of f16 rows hold 400 rows each, as the f32 stores'. */
    const char *iargs[] = {"import",       "--out", store,        "--shard-size", "32000",
                           "--block-size", "4096",  "--no-fsync", file,           NULL};
    int st = run_stagingd(&r, iargs);
    ck_assert_msg(st == 0, "stagingd import exited %d\n%s", st, r.err_text);
    ck_assert_msg(strstr(r.err_text, "wrote 6 shard(s)") && strstr(r.err_text, "x f16"), "%s",
                  r.err_text);

    static struct ref_hit ref[NQ][K];
    references(base, ROWS, q, NQ, 1, ref);
    const char *args[] = {"job",     "--store",    store,     "--agent", r.e.sock,
                          "--op",    "scan",       "--query", qfile,     "--query-index",
                          "0-1,3,5", "--k",        "12",      "--json",  "--inflight",
                          "3",       "--doorbell", "off",     NULL};
    st = run_stagingd(&r, args);
    ck_assert_msg(st == 0, "stagingd job exited %d\n%s\n%s", st, r.out_text, r.err_text);
    const uint32_t ids[] = {0, 1, 3, 5};
    expect_json(&r, ROWS, (const struct ref_hit(*)[K])ref, ids, 4);
    free(h);
    free(q);
    free(base);
    env_stop(&r);
}
END_TEST

START_TEST(imported_fvecs_gives_the_references_top_k_in_the_table)
{
    struct run r = {0};
    env_start(&r);
    float *base = base_make();
    float *q = queries_make(base);
    char file[256], qfile[256], store[256];
    snprintf(file, sizeof file, "%s/base.fvecs", r.e.dir);
    snprintf(qfile, sizeof qfile, "%s/queries.fvecs", r.e.dir);
    snprintf(store, sizeof store, "%s/store", r.e.dir);
    it_xvecs_write(file, ROWS, DIM, base, 4);
    it_xvecs_write(qfile, NQ, DIM, q, 4);
    import_store(&r, store, file, "f32");

    static struct ref_hit ref[NQ][K];
    references(base, ROWS, q, NQ, 0, ref);
    const char *args[] = {"job",  "--store", store, "--agent", r.e.sock, "--op",
                          "scan", "--query", qfile, "--k",     "12",     "--inflight",
                          "3",    "--batch", "2",   NULL};
    int st = run_stagingd(&r, args);
    ck_assert_msg(st == 0, "stagingd job exited %d\n%s\n%s", st, r.out_text, r.err_text);
    ck_assert_ptr_nonnull(strstr(r.out_text, "top-12 by dot product for 6 queries from"));
    unsigned seen[NQ] = {0};
    char *copy = strdup(r.out_text), *save = NULL;
    ck_assert_ptr_nonnull(copy);
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        uint64_t qid, rank, row, rec;
        char shard[64];
        float score;
        if (sscanf(line, " %" SCNu64 " %" SCNu64 " %" SCNu64 " %63s %" SCNu64 " %f", &qid, &rank,
                   &row, shard, &rec, &score) != 6)
            continue;
        ck_assert_uint_lt(qid, NQ);
        ck_assert_uint_ge(rank, 1);
        ck_assert_uint_le(rank, K);
        const struct ref_hit *want = &ref[qid][rank - 1];
        ck_assert_msg(row == want->row && memcmp(&score, &want->score, 4) == 0,
                      "query %" PRIu64 " rank %" PRIu64 ": expected row %" PRIu64
                      " score %.9g, found row %" PRIu64 " score %.9g",
                      qid, rank, want->row, (double)want->score, row, (double)score);
        char name[32];
        snprintf(name, sizeof name, "shard-%06" PRIu64 ".sds", row / 400);
        ck_assert_str_eq(shard, name);
        ck_assert_uint_eq(rec, row % 400);
        seen[qid]++;
    }
    free(copy);
    for (uint32_t j = 0; j < NQ; j++)
        ck_assert_msg(seen[j] == K, "query %u: %u rows in the table\n%s", j, seen[j], r.out_text);
    free(q);
    free(base);
    env_stop(&r);
}
END_TEST

START_TEST(agent_killed_mid_job_every_query_of_every_shard_counts_once)
{
    struct run r = {0};
    env_start(&r);
    float *base = it_random_f32((size_t)BIG_ROWS * DIM, 0x5a5a);
    for (uint32_t i = 0; i < DIM; i++) {
        base[100 * DIM + i] *= 4.0f;
        base[23000 * DIM + i] = base[100 * DIM + i];
    }
    /* Far more queries than a shard keeps in flight (32), the first a tie:
     * each shard's scans keep the agent busy longer than the rate limit
     * takes to start the next shard, so scans are in flight when it dies. */
    float *q = it_random_f32((size_t)BIG_NQ * DIM, 0x77);
    memcpy(q, base + 100 * DIM, DIM * sizeof(float));
    char file[256], qfile[256], store[256];
    snprintf(file, sizeof file, "%s/big.fvecs", r.e.dir);
    snprintf(qfile, sizeof qfile, "%s/q.fvecs", r.e.dir);
    snprintf(store, sizeof store, "%s/store", r.e.dir);
    it_xvecs_write(file, BIG_ROWS, DIM, base, 4);
    it_xvecs_write(qfile, BIG_NQ, DIM, q, 4);
    const char *iargs[] = {"import",  "--out",        store,  "--shard-size",
                           "64000",   "--block-size", "4096", "--no-fsync",
                           "--quiet", file,           NULL};
    ck_assert_int_eq(run_stagingd(&r, iargs), 0);
    static struct ref_hit ref[BIG_NQ][K];
    references(base, BIG_ROWS, q, BIG_NQ, 0, ref);
    ck_assert(ref[0][0].row == 100 && ref[0][1].row == 23000);

    /* Rate-limited, so the agent can die with shards half scanned. */
    const char *argv[] = {e2e_stagingd,
                          "job",
                          "--store",
                          store,
                          "--agent",
                          r.e.sock,
                          "--op",
                          "scan",
                          "--query",
                          qfile,
                          "--k",
                          "12",
                          "--json",
                          "-v",
                          "--inflight",
                          "3",
                          "--rate-limit",
                          "8M",
                          "--agent-timeout",
                          "30",
                          NULL};
    unlink(r.out);
    unlink(r.err);
    pid_t sd = e2e_spawn(argv, r.out, r.err);
    const char *done = "scan done (400 queries over 400 records)";
    ck_assert_msg(e2e_wait_count(r.err, done, 6, 30000), "stagingd never scanned 6 shards");
    ck_assert_int_eq(kill(r.e.agent, SIGSTOP), 0);
    int status;
    ck_assert_msg(waitpid(sd, &status, WNOHANG) == 0, "the job ended before the agent died");
    e2e_sleep_ms(100);
    ck_assert_int_eq(kill(r.e.agent, SIGKILL), 0);
    ck_assert_int_eq(e2e_wait(r.e.agent, 5000), 128 + SIGKILL);
    r.e.agent = 0;
    e2e_agent_start(&r.e);
    int st = e2e_wait(sd, RUN_MS);
    run_free(&r);
    r.out_text = e2e_slurp(r.out);
    r.err_text = e2e_slurp(r.err);
    ck_assert_msg(st == 0, "stagingd job exited %d\n%s\n%s", st, r.out_text, r.err_text);
    ck_assert_ptr_nonnull(strstr(r.err_text, "agent 0 lost"));
    /* Every shard's scan taken once: all 400 queries of it, never twice. */
    ck_assert_uint_eq(e2e_count(r.err_text, done), BIG_ROWS / 400);
    uint32_t ids[BIG_NQ];
    for (uint32_t j = 0; j < BIG_NQ; j++)
        ids[j] = j;
    expect_json(&r, BIG_ROWS, (const struct ref_hit(*)[K])ref, ids, BIG_NQ);
    /* For the log: how much was in flight when the agent died. */
    const char *resub = strstr(r.out_text, "\"resubmits\"");
    fprintf(stderr, "agent killed mid-job; %.*s\n", resub ? (int)strcspn(resub, ",\n") : 0,
            resub ? resub : "");
    free(q);
    free(base);
    env_stop(&r);
}
END_TEST

START_TEST(job_query_mistakes_are_usage_errors_that_name_the_file)
{
    struct run r = {0};
    e2e_env_init(&r.e);
    snprintf(r.out, sizeof r.out, "%s/out.txt", r.e.dir);
    snprintf(r.err, sizeof r.err, "%s/err.txt", r.e.dir);
    float *base = base_make();
    char file[256], qfile[256], store[256];
    snprintf(file, sizeof file, "%s/base.fvecs", r.e.dir);
    snprintf(qfile, sizeof qfile, "%s/q.fvecs", r.e.dir);
    snprintf(store, sizeof store, "%s/store", r.e.dir);
    it_xvecs_write(file, ROWS, DIM, base, 4);
    import_store(&r, store, file, "f32");
    /* Queries of another dim. */
    it_xvecs_write(qfile, 2, DIM / 2, base, 4);
    const char *dims[] = {"job",  "--store", store,     "--agent", r.e.sock,
                          "--op", "scan",    "--query", qfile,     NULL};
    ck_assert_int_eq(run_stagingd(&r, dims), 2);
    ck_assert_msg(strstr(r.err_text, "queries of dim 20") && strstr(r.err_text, "dim 40"), "%s",
                  r.err_text);
    /* A query file cut short. */
    it_xvecs_write(qfile, 3, DIM, base, 4);
    truncate(qfile, 2 * (4 + DIM * 4) + 7);
    ck_assert_int_eq(run_stagingd(&r, dims), 2);
    ck_assert_msg(strstr(r.err_text, "q.fvecs: byte 328: truncated"), "%s", r.err_text);
    /* --query with --op verify; --query-index without --query; rows past the end. */
    it_xvecs_write(qfile, 3, DIM, base, 4);
    const char *verify[] = {"job", "--store", store, "--agent", r.e.sock, "--query", qfile, NULL};
    ck_assert_int_eq(run_stagingd(&r, verify), 2);
    ck_assert_msg(strstr(r.err_text, "expected --op scan or both"), "%s", r.err_text);
    const char *lone[] = {"job", "--store", store, "--op", "scan", "--query-index", "1", NULL};
    ck_assert_int_eq(run_stagingd(&r, lone), 2);
    ck_assert_msg(strstr(r.err_text, "expected --query FILE"), "%s", r.err_text);
    const char *past[] = {"job",     "--store", store,           "--op", "scan",
                          "--query", qfile,     "--query-index", "2-3",  NULL};
    ck_assert_int_eq(run_stagingd(&r, past), 2);
    ck_assert_msg(strstr(r.err_text, "row 3 is past the end"), "%s", r.err_text);
    free(base);
    run_free(&r);
    e2e_env_cleanup(&r.e);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s STAGINGD LEASE_AGENT_HOST\n", argv[0]);
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
                    "test_import_job: skipped: RLIMIT_MEMLOCK is %llu bytes (hard); the host "
                    "agent needs %llu\n",
                    (unsigned long long)rl.rlim_max, (unsigned long long)need);
            return 77;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    Suite *s = suite_create("import_job");
    TCase *tc = tcase_create("import_job");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, imported_npy_f32_gives_the_references_top_k_for_every_query);
    tcase_add_test(tc, imported_npy_f16_gives_the_references_top_k_with_queries_rounded_to_f16);
    tcase_add_test(tc, imported_fvecs_gives_the_references_top_k_in_the_table);
    tcase_add_test(tc, agent_killed_mid_job_every_query_of_every_shard_counts_once);
    tcase_add_test(tc, job_query_mistakes_are_usage_errors_that_name_the_file);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
