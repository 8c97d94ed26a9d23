/* A job's report as one JSON document (`stagingd job --json`; the layout
 * is in docs/stagingd.md): the verdict, the shards' tally, every query's
 * merged top-k with global row numbers, the shards that failed, were not
 * run or have bad blocks, and the summary's counters. Built with jansson;
 * a value it cannot allocate is left out. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include <jansson.h>

#include "job_internal.h"

static json_t *sd_job__json_u64(uint64_t v)
{
    return json_integer((json_int_t)v);
}

/* A hit: its rank, global row, shard and record, and its score (null
 * when not a number JSON can hold, with the text beside it). */
static json_t *sd_job__json_hit(const struct sd_job *job, const struct kn_scan_hit *h, size_t rank)
{
    json_t *o = json_object();
    json_object_set_new(o, "rank", sd_job__json_u64(rank));
    json_object_set_new(o, "row", sd_job__json_u64(job->row_base[h->shard] + h->index));
    json_object_set_new(o, "shard", json_string(sd_job__shard_name(job, h->shard)));
    json_object_set_new(o, "shard_index", sd_job__json_u64(h->shard));
    json_object_set_new(o, "record", sd_job__json_u64(h->index));
    if (isfinite(h->score)) {
        json_object_set_new(o, "score", json_real((double)h->score));
    } else {
        json_object_set_new(o, "score", json_null());
        json_object_set_new(o, "score_text",
                            json_string(isnan(h->score) ? "nan"
                                        : h->score > 0  ? "inf"
                                                        : "-inf"));
    }
    return o;
}

static json_t *sd_job__json_queries(const struct sd_job *job)
{
    json_t *a = json_array();
    for (uint32_t q = 0; q < job->nq; q++) {
        json_t *o = json_object();
        json_object_set_new(o, "query", sd_job__json_u64(sd_job__query_id(job, q)));
        json_t *hits = json_array();
        const size_t n = job->ntopk ? job->ntopk[q] : 0;
        for (size_t i = 0; i < n; i++)
            json_array_append_new(hits, sd_job__json_hit(job, &job->topk[q][i], i + 1));
        json_object_set_new(o, "hits", hits);
        json_array_append_new(a, o);
    }
    return a;
}

/* The shards with something to say: failed, not run, or with bad blocks. */
static json_t *sd_job__json_problems(const struct sd_job *job)
{
    json_t *a = json_array();
    for (size_t i = 0; i < job->nshards; i++) {
        const struct sd_job__result *r = &job->res[i];
        const char *state = r->state == SD_JOB__RES_FAILED         ? "failed"
                            : r->state == SD_JOB__RES_SKIPPED      ? "not run"
                            : r->vstatus == LT_E_CHECKSUM_MISMATCH ? "bad blocks"
                                                                   : NULL;
        if (!state)
            continue;
        json_t *o = json_object();
        json_object_set_new(o, "shard", json_string(sd_job__shard_name(job, i)));
        json_object_set_new(o, "shard_index", sd_job__json_u64(i));
        json_object_set_new(o, "state", json_string(state));
        if (r->why)
            json_object_set_new(o, "why", json_string(r->why));
        if (r->vstatus == LT_E_CHECKSUM_MISMATCH) {
            json_object_set_new(o, "first_bad_block", sd_job__json_u64(r->v.first_bad_block));
            json_object_set_new(o, "bad_blocks", sd_job__json_u64(r->v.bad_blocks));
        }
        json_array_append_new(a, o);
    }
    return a;
}

static json_t *sd_job__json_summary(const struct sd_job *job, const struct sd_job__tally *t)
{
    const uint64_t end = job->t_end ? job->t_end : base_now_ns();
    json_t *o = json_object();
    json_object_set_new(o, "bytes", sd_job__json_u64(job->bytes_total));
    json_object_set_new(o, "bytes_staged", sd_job__json_u64(job->bytes_staged));
    json_object_set_new(o, "seconds", json_real((double)(end - job->t_start) / 1e9));
    json_object_set_new(o, "seconds_reading", json_real((double)job->busy_ns / 1e9));
    json_object_set_new(o, "bad_blocks", sd_job__json_u64(job->bad_blocks));
    json_object_set_new(o, "leases_granted", sd_job__json_u64(job->leases_granted));
    json_object_set_new(o, "leases_released", sd_job__json_u64(job->leases_released));
    json_object_set_new(o, "leases_lost", sd_job__json_u64(job->leases_lost));
    json_object_set_new(o, "leases_refused", sd_job__json_u64(job->leases_refused));
    json_object_set_new(o, "submits", sd_job__json_u64(job->submits));
    json_object_set_new(o, "submits_behind_doorbell", sd_job__json_u64(job->bell_submits));
    json_object_set_new(o, "completions", sd_job__json_u64(job->completions));
    json_object_set_new(o, "resubmits", sd_job__json_u64(job->resubmits));
    json_object_set_new(o, "exactly_once", json_boolean(t->exact == job->nshards));
    return o;
}

void sd_job__report_json(struct sd_job *job, FILE *out)
{
    struct sd_job__tally t;
    sd_job__tally(job->res, job->nshards, job->ops, &t);
    char outcome[SD_JOB__WHY_LEN * 2];
    sd_job_outcome(job, outcome, sizeof outcome);
    json_t *root = json_object();
    json_object_set_new(root, "job", sd_job__json_u64(job->env.id));
    json_object_set_new(root, "op", json_string(sd_job_op_name(job->op)));
    json_object_set_new(root, "store", json_string(job->store_path));
    json_object_set_new(root, "status", json_integer(sd_job_exit_status(job)));
    json_object_set_new(root, "outcome", json_string(outcome));
    json_object_set_new(root, "doorbell", json_boolean(job->doorbell));
    json_object_set_new(root, "rows", sd_job__json_u64(job->rows));
    json_t *sh = json_object();
    json_object_set_new(sh, "total", sd_job__json_u64(job->nshards));
    json_object_set_new(sh, "clean", sd_job__json_u64(t.clean));
    json_object_set_new(sh, "bad", sd_job__json_u64(t.bad));
    json_object_set_new(sh, "failed", sd_job__json_u64(t.failed));
    json_object_set_new(sh, "not_run", sd_job__json_u64(t.skipped));
    json_object_set_new(root, "shards", sh);
    if (job->ops & SD_JOB__OP_SCAN) {
        json_object_set_new(root, "metric", json_string("dot"));
        json_object_set_new(root, "k", sd_job__json_u64(job->cfg.k));
        if (job->cfg.nqueries) {
            json_object_set_new(root, "query_source",
                                job->cfg.query_source ? json_string(job->cfg.query_source)
                                                      : json_null());
        } else {
            json_object_set_new(root, "query_seed", sd_job__json_u64(job->cfg.query_seed));
        }
        json_object_set_new(root, "queries", sd_job__json_queries(job));
    }
    json_object_set_new(root, "problems", sd_job__json_problems(job));
    json_object_set_new(root, "summary", sd_job__json_summary(job, &t));
    /* Nine significant digits give back every float32 score exactly. */
    if (!root || json_dumpf(root, out, JSON_INDENT(2) | JSON_REAL_PRECISION(9)) < 0)
        fprintf(out, "{\"error\": \"out of memory for the JSON report\"}");
    fputc('\n', out);
    json_decref(root);
}
