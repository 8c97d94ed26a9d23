/* A job's results (see job_internal.h): progress lines, the agents' stats,
 * the report with its rows and the top-k merged across shards, the
 * verdict line and the exit status. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job_internal.h"
#include "kernels/scan_ref.h"

void sd_job__bytes_fmt(uint64_t b, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    unsigned u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%" PRIu64 " B", b);
    else
        snprintf(buf, len, "%.1f %s", v, units[u]);
}

void sd_job_progress(const struct sd_job *job, char *buf, size_t len)
{
    size_t done = 0;
    for (size_t i = 0; i < job->nshards; i++)
        done += job->res[i].state != SD_JOB__RES_PENDING;
    uint64_t now = job->t_end ? job->t_end : base_now_ns();
    double secs = (double)(now - job->t_start) / 1e9;
    char b[32];
    sd_job__bytes_fmt(job->bytes_done, b, sizeof b);
    snprintf(buf, len, "job %u %s: %zu/%zu shards, %s, %.2f GB/s, %" PRIu64 " leases granted",
             job->env.id, sd_job_op_name(job->op), done, job->nshards, b,
             secs > 0 ? (double)job->bytes_done / secs / 1e9 : 0.0, job->leases_granted);
}

void sd_job_agent_stats(struct sd_job *job, int timeout_ms)
{
    if (job->stream) { /* sums over the agents, of this call alone */
        job->stream->reg_end = job->stream->req_end = 0;
        job->stream->reg_end_valid = job->stream->req_end_valid = 0;
    }
    for (unsigned a = 0; a < job->env.nagents; a++) {
        struct leasec_client_agent_info info;
        struct sd_job__agent *ag = &job->agents[a];
        if (leasec_client_agent_info(job->env.client, a, &info) < 0 ||
            info.state != LEASEC_CLIENT_READY)
            continue;
        snprintf(ag->name, sizeof ag->name, "%s", info.hello.agent_name);
        ag->caps = info.hello.caps;
        struct leasec_agent_stats st;
        if (leasec_client_stats_call(job->env.client, a, 0, timeout_ms, &st) < 0) {
            sd_job__log(job, BASE_LOG_WARN, "job %u: agent %u stats: %s", job->env.id, a,
                        leasec_client_last_error(job->env.client));
            continue;
        }
        ag->uptime_ns = st.uptime_ns;
        if (job->stream) {
            uint64_t reg = 0;
            for (unsigned c = 0; c < LT_CLASS_SLOTS; c++)
                reg += st.classes[c].registrations;
            job->stream->reg_end += reg;
            job->stream->reg_end_valid = 1;
        }
        if (st.have_self) {
            ag->me = st.self;
            ag->stats_valid = 1;
        }
        if (job->stream && st.have_self) {
            job->stream->req_end += st.self.submits;
            job->stream->req_end_valid = 1;
        }
    }
}

/* ---- pure functions over results ---- */

/* A shard's scan hits for query @q go into the merge unless its verify
 * found corrupt blocks: a job that checked the bytes never passes on records
 * it knows to be bad (the row still shows the shard's own best, marked). */
static int sd_job__mergeable(const struct sd_job__result *r, uint32_t q)
{
    return r->scan[q].has_hit && r->vstatus != LT_E_CHECKSUM_MISMATCH;
}

int sd_job__topk_merge(const struct sd_job__result *res, size_t nres, uint32_t q, size_t k,
                       struct kn_scan_hit **hits_p, size_t *n_p)
{
    size_t n = 0, total = 0;
    for (size_t i = 0; i < nres; i++) {
        n += sd_job__mergeable(&res[i], q);
        total += sd_job__mergeable(&res[i], q) ? res[i].scan[q].nhits : 0;
    }
    /* Each shard's top min(k, LT_SCAN_MAX_K): the merge is the true
     * top-k of all records for k up to LT_SCAN_MAX_K. */
    if (k > total)
        k = total;
    if (n == 0 || k == 0) {
        *hits_p = NULL;
        *n_p = 0;
        return 0;
    }
    const struct kn_scan_hit **lists = calloc(n, sizeof *lists);
    size_t *counts = calloc(n, sizeof *counts);
    uint32_t *ids = calloc(n, sizeof *ids);
    struct kn_scan_hit *hits = calloc(k, sizeof *hits);
    int rc = -ENOMEM;
    if (!lists || !counts || !ids || !hits) {
        free(hits);
        goto out;
    }
    size_t j = 0;
    for (size_t i = 0; i < nres; i++) {
        if (!sd_job__mergeable(&res[i], q))
            continue;
        lists[j] = res[i].scan[q].hits;
        counts[j] = res[i].scan[q].nhits;
        ids[j] = (uint32_t)i;
        j++;
    }
    long got = kr_topk_merge(lists, counts, n, ids, (uint32_t)k, hits);
    *hits_p = hits;
    *n_p = got > 0 ? (size_t)got : 0;
    rc = 0;
out:
    free(lists);
    free(counts);
    free(ids);
    return rc;
}

void sd_job__tally(const struct sd_job__result *res, size_t n, unsigned ops,
                   struct sd_job__tally *t_p)
{
    struct sd_job__tally t = {0};
    for (size_t i = 0; i < n; i++) {
        const struct sd_job__result *r = &res[i];
        if (r->state == SD_JOB__RES_FAILED)
            t.failed++;
        else if (r->state == SD_JOB__RES_SKIPPED)
            t.skipped++;
        else if (r->vstatus == LT_E_CHECKSUM_MISMATCH || r->cpu_bad)
            t.bad++; /* the CPU check's bad block counts too: never passed as clean */
        else if (r->state == SD_JOB__RES_DONE)
            t.clean++;
        else
            t.pending++;
        t.exact += r->got == ops && r->completions == (unsigned)__builtin_popcount(ops);
    }
    *t_p = t;
}

int sd_job__status(const struct sd_job__result *res, size_t n)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (res[i].state != SD_JOB__RES_DONE)
            return 1;
        bad |= res[i].vstatus == LT_E_CHECKSUM_MISMATCH || res[i].cpu_bad;
    }
    return bad ? 3 : 0;
}

/* ---- the report ---- */

void sd_job__merge_all(struct sd_job *job)
{
    if (job->topk)
        return;
    job->topk = calloc(job->nq, sizeof *job->topk);
    job->ntopk = calloc(job->nq, sizeof *job->ntopk);
    if (!job->topk || !job->ntopk) {
        free(job->topk);
        free(job->ntopk);
        job->topk = NULL;
        job->ntopk = NULL;
        return;
    }
    /* Out of memory: the report shows no merged rows for that query. */
    for (uint32_t q = 0; q < job->nq; q++)
        if (sd_job__topk_merge(job->res, job->nshards, q, job->cfg.k, &job->topk[q],
                               &job->ntopk[q]) < 0)
            job->ntopk[q] = 0;
}

/* The merged top-k: the generated query's table (first rows unless
 * `list`), or every row of every file query. */
static void sd_job__topk_print(const struct sd_job *job, FILE *out)
{
    if (!job->cfg.nqueries) {
        const size_t n = job->ntopk ? job->ntopk[0] : 0;
        size_t shown = job->cfg.list || n <= SD_JOB__TOPK_SHOWN ? n : SD_JOB__TOPK_SHOWN;
        fprintf(out,
                "top-%u by dot product (query seed %" PRIu64 "; each shard's top-k, "
                "merged across shards)%s\n",
                job->cfg.k, job->cfg.query_seed, shown < n ? ", first rows" : "");
        fprintf(out, "  %-5s %-18s %-12s %-16s %s\n", "rank", "shard", "record", "score", "row");
        for (size_t i = 0; i < shown; i++) {
            const struct kn_scan_hit *h = &job->topk[0][i];
            fprintf(out, "  #%-4zu %-18s %-12" PRIu64 " %-16.9g %" PRIu64 "\n", i + 1,
                    sd_job__shard_name(job, h->shard), h->index, (double)h->score,
                    job->row_base[h->shard] + h->index);
        }
        return;
    }
    fprintf(out,
            "top-%u by dot product for %u quer%s from %s (each shard's top-k merged across "
            "shards; row: the store's row, in manifest order)\n",
            job->cfg.k, job->nq, job->nq == 1 ? "y" : "ies",
            job->cfg.query_source ? job->cfg.query_source : "a file");
    fprintf(out, "  %-8s %-5s %-12s %-18s %-12s %s\n", "query", "rank", "row", "shard", "record",
            "score");
    for (uint32_t q = 0; q < job->nq; q++) {
        const size_t n = job->ntopk ? job->ntopk[q] : 0;
        if (n == 0)
            fprintf(out, "  %-8" PRIu64 " (no hits)\n", sd_job__query_id(job, q));
        for (size_t i = 0; i < n; i++) {
            const struct kn_scan_hit *h = &job->topk[q][i];
            fprintf(out, "  %-8" PRIu64 " %-5zu %-12" PRIu64 " %-18s %-12" PRIu64 " %.9g\n",
                    sd_job__query_id(job, q), i + 1, job->row_base[h->shard] + h->index,
                    sd_job__shard_name(job, h->shard), h->index, (double)h->score);
        }
    }
}

static void sd_job__row(const struct sd_job *job, size_t i, FILE *out)
{
    const struct sd_job__result *r = &job->res[i];
    const char *name = sd_job__shard_name(job, i);
    if (r->got & SD_JOB__OP_VERIFY) {
        if (r->vstatus == LT_OK) {
            fprintf(out, "  %-18s verify ok: %" PRIu64 " blocks\n", name, r->v.blocks_checked);
        } else if (r->vstatus == LT_E_CHECKSUM_MISMATCH) {
            const struct sd_store_entry *e = sd_store_entry_get(job->st, i);
            uint64_t lo = r->v.first_bad_block * e->block_size;
            uint64_t hi = lo + e->block_size < e->payload_len ? lo + e->block_size : e->payload_len;
            fprintf(out,
                    "  %-18s verify BAD: block %" PRIu64 " of %" PRIu64 " (payload bytes %" PRIu64
                    "..%" PRIu64 ") expected %016" PRIx64 ", found %016" PRIx64 "; %" PRIu64
                    " bad block(s)\n",
                    name, r->v.first_bad_block, r->v.blocks_checked, lo, hi - 1, r->v.expected,
                    r->v.actual, r->v.bad_blocks);
        }
        if (r->cpu_checked) {
            int gpu_bad = r->vstatus == LT_E_CHECKSUM_MISMATCH;
            if (gpu_bad != r->cpu_bad || (gpu_bad && r->cpu_block != r->v.first_bad_block)) {
                if (r->cpu_bad)
                    fprintf(out,
                            "  %-18s verify DISAGREES with the CPU check, which found block "
                            "%" PRIu64 " bad\n",
                            name, r->cpu_block);
                else
                    fprintf(out,
                            "  %-18s verify DISAGREES with the CPU check, which found no bad "
                            "block\n",
                            name);
            }
        }
    }
    if ((r->got & SD_JOB__OP_SCAN) && job->nq == 1 && r->scan[0].has_hit)
        fprintf(out, "  %-18s scan best: record %" PRIu64 " score %.9g of %" PRIu64 " records%s\n",
                name, r->scan[0].hit.index, (double)r->scan[0].hit.score, r->records,
                r->vstatus == LT_E_CHECKSUM_MISMATCH ? "; not in the top-k: corrupt blocks" : "");
    else if ((r->got & SD_JOB__OP_SCAN) && job->nq > 1)
        fprintf(out, "  %-18s scan: %u queries over %" PRIu64 " records%s\n", name, job->nq,
                r->records,
                r->vstatus == LT_E_CHECKSUM_MISMATCH ? "; not in the top-k: corrupt blocks" : "");
    if (r->state == SD_JOB__RES_FAILED || r->state == SD_JOB__RES_SKIPPED)
        fprintf(out, "  %-18s %s: %s\n", name,
                r->state == SD_JOB__RES_FAILED ? "FAILED" : "NOT RUN", r->why ? r->why : "?");
}

/* ---- shards that share a reason ---- */

struct sd_job__member {
    const char *why;
    size_t idx;
    int skipped;
};

static int sd_job__member_cmp(const void *a, const void *b)
{
    const struct sd_job__member *x = a, *y = b;
    if (x->skipped != y->skipped)
        return y->skipped - x->skipped; /* NOT RUN first */
    int c = strcmp(x->why, y->why);
    if (c)
        return c;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

/* One line for @n shards @m[0, n) that share a reason: the count, the
 * first few names (in shard order) and the reason. */
static void sd_job__group_line(const struct sd_job *job, const struct sd_job__member *m, size_t n,
                               FILE *out)
{
    char names[SD_JOB__NOT_RUN_SHOWN * (SD_STORE_NAME_MAX + 2)] = "";
    size_t used = 0, shown = n < SD_JOB__NOT_RUN_SHOWN ? n : SD_JOB__NOT_RUN_SHOWN;
    for (size_t i = 0; i < shown; i++) {
        int w = snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "",
                         sd_job__shard_name(job, m[i].idx));
        if (w > 0 && (size_t)w < sizeof names - used)
            used += (size_t)w;
    }
    char more[48] = "";
    if (n > shown)
        snprintf(more, sizeof more, " and %zu more", n - shown);
    fprintf(out, "  %s: %zu shard(s) (%s%s): %s\n", m[0].skipped ? "NOT RUN" : "FAILED", n, names,
            more, m[0].why);
}

/* Finds the shards not run, and those that failed with no result where
 * more than SD_JOB__NOT_RUN_SHOWN share a reason: marks them in @grouped
 * (their rows are left out) and, when @out is not NULL, prints one line per
 * reason. Returns 0, or -ENOMEM (nothing printed or marked). */
static int sd_job__groups(const struct sd_job *job, unsigned char *grouped, FILE *out)
{
    size_t n = 0;
    for (size_t i = 0; i < job->nshards; i++) {
        const struct sd_job__result *r = &job->res[i];
        n += r->why &&
             (r->state == SD_JOB__RES_SKIPPED || (r->state == SD_JOB__RES_FAILED && r->got == 0));
    }
    if (n == 0)
        return 0;
    struct sd_job__member *m = calloc(n, sizeof *m);
    if (!m)
        return -ENOMEM;
    n = 0;
    for (size_t i = 0; i < job->nshards; i++) {
        const struct sd_job__result *r = &job->res[i];
        int skipped = r->state == SD_JOB__RES_SKIPPED;
        if (r->why && (skipped || (r->state == SD_JOB__RES_FAILED && r->got == 0)))
            m[n++] = (struct sd_job__member){r->why, i, skipped};
    }
    qsort(m, n, sizeof *m, sd_job__member_cmp);
    for (size_t i = 0, j; i < n; i = j) {
        for (j = i + 1; j < n && m[j].skipped == m[i].skipped && strcmp(m[j].why, m[i].why) == 0;
             j++)
            ;
        if (!m[i].skipped && j - i <= SD_JOB__NOT_RUN_SHOWN)
            continue; /* a few failures: their own rows */
        if (out)
            sd_job__group_line(job, m + i, j - i, out);
        for (size_t k = i; k < j; k++)
            grouped[m[k].idx] = 1;
    }
    free(m);
    return 0;
}

void sd_job_report(struct sd_job *job, FILE *out)
{
    sd_job__merge_all(job);
    if (job->cfg.json) {
        sd_job__report_json(job, out);
        return;
    }
    struct sd_job__tally t;
    sd_job__tally(job->res, job->nshards, job->ops, &t);
    const size_t clean = t.clean, bad = t.bad, failed = t.failed, skipped = t.skipped,
                 exact = t.exact;
    char total[32];
    sd_job__bytes_fmt(job->bytes_total, total, sizeof total);
    char path[96] = "whole shards";
    if (job->stream)
        snprintf(path, sizeof path, "streaming, %u ring(s) of %u x %" PRIu64 " bytes",
                 job->stream->nrings, job->stream->slots, job->stream->chunk);
    fprintf(out, "job %u: %s of %s: %zu shard(s), %s, doorbell %s, inflight %u, path %s\n",
            job->env.id, sd_job_op_name(job->op), job->store_path, job->nshards, total,
            job->doorbell ? "on" : "off", job->nslots, path);
    /* Shards that share a reason for having no result get one line per
     * reason, unless every row was asked for. */
    unsigned char *grouped = job->cfg.list ? NULL : calloc(job->nshards ? job->nshards : 1, 1);
    if (grouped && sd_job__groups(job, grouped, NULL) < 0) {
        free(grouped);
        grouped = NULL;
    }
    for (size_t i = 0; i < job->nshards; i++) {
        const struct sd_job__result *r = &job->res[i];
        int notable = r->state == SD_JOB__RES_FAILED || r->state == SD_JOB__RES_SKIPPED ||
                      r->vstatus == LT_E_CHECKSUM_MISMATCH || r->cpu_bad;
        if ((job->cfg.list || notable) && !(grouped && grouped[i]))
            sd_job__row(job, i, out);
    }
    if (grouped)
        sd_job__groups(job, grouped, out);
    free(grouped);
    if (job->ops & SD_JOB__OP_SCAN)
        sd_job__topk_print(job, out);
    uint64_t end = job->t_end ? job->t_end : base_now_ns();
    if (job->stream && job->stream->t_gpu_end) /* the last result, not the rings' teardown */
        end = job->stream->t_gpu_end > job->t_check_end ? job->stream->t_gpu_end : job->t_check_end;
    double e2e = (double)(end - job->t_start) / 1e9;
    double busy = (double)job->busy_ns / 1e9;
    char staged[32];
    sd_job__bytes_fmt(job->bytes_staged, staged, sizeof staged);
    fprintf(out, "summary\n");
    fprintf(out,
            "  %-14s %zu of %zu done: %zu clean, %zu with bad blocks, %zu failed, %zu not run\n",
            "shards", clean + bad, job->nshards, clean, bad, failed, skipped);
    fprintf(out, "  %-14s %" PRIu64 " staged (%s) of %" PRIu64 "\n", "bytes", job->bytes_staged,
            staged, job->bytes_total);
    if (!job->stream)
        fprintf(out, "  %-14s %.2f GB/s (%.3f s with reads in flight)\n", "staged",
                busy > 0 ? (double)job->bytes_staged / busy / 1e9 : 0.0, busy);
    fprintf(out, "  %-14s %.2f GB/s (%.3f s from start to last result)\n", "end to end",
            e2e > 0 ? (double)job->bytes_staged / e2e / 1e9 : 0.0, e2e);
    if (job->stream)
        sd_job__stream_report(job, out);
    if (job->cfg.cpu_verify && (job->ops & SD_JOB__OP_VERIFY)) {
        /* Its own figure: the GPU path's above does not wait for it. */
        double cs =
            job->t_check_end > job->t_start ? (double)(job->t_check_end - job->t_start) / 1e9 : 0.0;
        uint64_t checked = job->check ? job->check_bytes : job->bytes_staged;
        if (!job->check)
            cs = e2e;
        fprintf(out, "  %-14s %.2f GB/s (%" PRIu64 " bytes in %.3f s, %s)\n", "cpu check",
                cs > 0 ? (double)checked / cs / 1e9 : 0.0, checked, cs,
                job->check ? "on its own threads" : "on the staging threads, per read");
    }
    if (job->ops & SD_JOB__OP_VERIFY)
        fprintf(out, "  %-14s %" PRIu64 "\n", "bad blocks", job->bad_blocks);
    fprintf(out,
            "  %-14s %" PRIu64 " granted, %" PRIu64 " released, %" PRIu64
            " lost with an agent, %" PRIu64 " refused; %" PRIu64 " request and %" PRIu64
            " release batch(es)%s\n",
            "leases", job->leases_granted, job->leases_released, job->leases_lost,
            job->leases_refused, job->lease_batches, job->release_batches,
            job->staged_fallback ? " (some served STAGED: the pin budget was spent)" : "");
    if (job->leases_abandoned)
        fprintf(out, "  %-14s %" PRIu64 " lease(s) left to the agent at shutdown\n", "abandoned",
                job->leases_abandoned);
    fprintf(out,
            "  %-14s %" PRIu64 " submits (%" PRIu64 " behind the doorbell), %" PRIu64
            " completions, %" PRIu64 " done words seen\n",
            "work", job->submits, job->bell_submits, job->completions, job->done_words_seen);
    fprintf(out,
            "  %-14s %s: %zu of %zu shard(s) with one result per op; %" PRIu64
            " op(s) resubmitted after agent loss, %" PRIu64 " duplicate(s) ignored\n",
            "exactly once", exact == job->nshards ? "yes" : "no", exact, job->nshards,
            job->resubmits, job->duplicates + job->stale);
    sd_job__agents_report(job, out);
    for (unsigned a = 0; a < job->env.nagents; a++) {
        const struct sd_job__agent *ag = &job->agents[a];
        if (!ag->stats_valid) {
            fprintf(out, "  %-14s %u: no stats (not ready at the end)\n", "agent", a);
            continue;
        }
        char reg[32];
        sd_job__bytes_fmt(ag->me.bytes_registered, reg, sizeof reg);
        fprintf(out,
                "  %-14s %u \"%s\"%s: this client: %" PRIu64 " segment(s), %s registered, "
                "%" PRIu64 " live lease(s), %" PRIu64 " granted, %" PRIu64 " submits\n",
                "agent", a, ag->name, (ag->caps & LT_CAP_HOST_BACKEND) ? " (HOST BACKEND)" : "",
                ag->me.segments, reg, ag->me.live_leases, ag->me.leases_granted, ag->me.submits);
    }
    if (job->cancelled)
        fprintf(out, "  %-14s %s\n", "cancelled", job->cancel_why);
}

int sd_job_exit_status(const struct sd_job *job)
{
    return sd_job__status(job->res, job->nshards);
}

/* The reason the first shard not run was given (they share one: the
 * cancel's), or NULL. */
static const char *sd_job__not_run_why(const struct sd_job *job)
{
    for (size_t i = 0; i < job->nshards; i++)
        if (job->res[i].state == SD_JOB__RES_SKIPPED)
            return job->res[i].why;
    return NULL;
}

void sd_job_outcome(const struct sd_job *job, char *buf, size_t len)
{
    struct sd_job__tally t;
    sd_job__tally(job->res, job->nshards, job->ops, &t);
    const int status = sd_job__status(job->res, job->nshards);
    char bytes[32];
    sd_job__bytes_fmt(job->bytes_done, bytes, sizeof bytes);
    uint64_t end = job->t_end ? job->t_end : base_now_ns();
    double secs = (double)(end - job->t_start) / 1e9;
    double rate = secs > 0 ? (double)job->bytes_done / secs / 1e9 : 0.0;
    const char *op = sd_job_op_name(job->op);
    if (status == 0) {
        snprintf(buf, len, "job %u %s: OK: %zu of %zu shard(s) clean, %s, %.2f GB/s", job->env.id,
                 op, t.clean, job->nshards, bytes, rate);
    } else if (status == 3) {
        snprintf(buf, len,
                 "job %u %s: CORRUPT: %zu of %zu shard(s) with bad blocks (%" PRIu64
                 " bad block(s)), %zu clean; exit status 3",
                 job->env.id, op, t.bad, job->nshards, job->bad_blocks, t.clean);
    } else {
        const char *why = t.skipped ? sd_job__not_run_why(job) : NULL;
        snprintf(buf, len,
                 "job %u %s: FAILED: %zu of %zu shard(s) done, %zu failed, %zu not run%s%s; exit "
                 "status 1",
                 job->env.id, op, t.clean + t.bad, job->nshards, t.failed, t.skipped,
                 why ? ": " : "", why ? why : "");
    }
}

/* ---- a streamed job's staging threads (job_stream.c prints it) ---- */

static int sd_job__u64_cmp(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Where the staging threads' time went, and how long the rings took to
 * start: the two things to look at when a streamed job is slower than the
 * copies could go (docs/streaming.md, "Reading the summary"). */
void sd_job__staging_report(const struct sd_job *job, FILE *out)
{
    const struct sd_job__stream *st = job->stream;
    uint64_t rd = 0, sw = 0, tw = 0, bytes = 0, firsts[256], lasts[256];
    unsigned nf = 0, nl = 0;
    for (unsigned i = 0; i < st->nrings; i++) {
        const struct sd_job__ring *r = &st->rings[i];
        rd += __atomic_load_n(&r->ns_read, __ATOMIC_RELAXED);
        sw += __atomic_load_n(&r->ns_slot_wait, __ATOMIC_RELAXED);
        tw += __atomic_load_n(&r->ns_task_wait, __ATOMIC_RELAXED);
        bytes += __atomic_load_n(&r->bytes_read, __ATOMIC_RELAXED);
        const uint64_t f = __atomic_load_n(&r->t_first_store, __ATOMIC_RELAXED);
        if (f > job->t_start && nf < sizeof firsts / sizeof firsts[0])
            firsts[nf++] = f - job->t_start;
        const uint64_t l = __atomic_load_n(&r->t_last_store, __ATOMIC_RELAXED);
        if (l > job->t_start && nl < sizeof lasts / sizeof lasts[0])
            lasts[nl++] = l - job->t_start;
    }
    const double all = (double)(rd + sw + tw);
    if (all <= 0)
        return;
    qsort(firsts, nf, sizeof firsts[0], sd_job__u64_cmp);
    qsort(lasts, nl, sizeof lasts[0], sd_job__u64_cmp);
    fprintf(out,
            "  %-14s %u thread(s): reading %.0f%% (%.2f GB/s a thread while reading), waiting for "
            "slots %.0f%%, for shards %.0f%%; first chunk stored %.1f ms (median ring), %.1f ms "
            "(last) after the start\n",
            "staging", st->nrings, 100.0 * (double)rd / all, rd ? (double)bytes / (double)rd : 0.0,
            100.0 * (double)sw / all, 100.0 * (double)tw / all,
            nf ? (double)firsts[nf / 2] / 1e6 : 0.0, nf ? (double)firsts[nf - 1] / 1e6 : 0.0);
    /* The job's tail: from the first ring out of work to the last one, and
     * from there to the last GPU result (docs/streaming.md, "The tail"). */
    if (nl && st->t_gpu_end > job->t_start)
        fprintf(out,
                "  %-14s last chunk stored %.1f ms (first ring done), %.1f ms (median), %.1f ms "
                "(last ring); last GPU result %.1f ms after the start\n",
                "tail", (double)lasts[0] / 1e6, (double)lasts[nl / 2] / 1e6,
                (double)lasts[nl - 1] / 1e6, (double)(st->t_gpu_end - job->t_start) / 1e6);
}
