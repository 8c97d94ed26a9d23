#include "kernels/scan_ref.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float scan_elem(const unsigned char *p, uint32_t type, uint64_t i)
{
    if (type == KN_SCAN_F32) {
        float f;
        memcpy(&f, p + i * 4, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + i * 2, 2);
    return kn_f16_to_f32(h);
}

double kr_scan_score(const void *records, uint32_t type, uint32_t dim, uint64_t index,
                     const float *query, double *abs_p)
{
    const unsigned char *p = records;
    const uint64_t first = index * dim;
    double sum = 0.0, abs_sum = 0.0;
    for (uint32_t i = 0; i < dim; i++) {
        double t = (double)scan_elem(p, type, first + i) * (double)query[i];
        sum += t;
        abs_sum += t < 0 ? -t : t;
    }
    if (abs_p)
        *abs_p = abs_sum;
    return sum;
}

/* out[0..m) as a heap whose root ranks last, so the root is what a better
 * hit replaces. */
static void heap_sift_down(struct kn_scan_hit *h, size_t m, size_t i)
{
    for (;;) {
        size_t worst = i, l = 2 * i + 1, r = l + 1;
        if (l < m && kn_scan_hit_before(&h[worst], &h[l]))
            worst = l;
        if (r < m && kn_scan_hit_before(&h[worst], &h[r]))
            worst = r;
        if (worst == i)
            return;
        struct kn_scan_hit t = h[i];
        h[i] = h[worst];
        h[worst] = t;
        i = worst;
    }
}

static void heap_sift_up(struct kn_scan_hit *h, size_t i)
{
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!kn_scan_hit_before(&h[parent], &h[i]))
            return;
        struct kn_scan_hit t = h[i];
        h[i] = h[parent];
        h[parent] = t;
        i = parent;
    }
}

long kr_scan_topk(const void *records, uint32_t type, uint64_t n, uint32_t dim, const float *query,
                  uint32_t k, struct kn_scan_hit *out_p)
{
    if (kn_scan_elem_size(type) == 0 || dim == 0 || k == 0 || n >= KN_SCAN_MAX_RECORDS ||
        (n > 0 && (!records || !query || !out_p)))
        return -EINVAL;
    size_t m = 0;
    for (uint64_t r = 0; r < n; r++) {
        struct kn_scan_hit hit = {
            .score = (float)kr_scan_score(records, type, dim, r, query, NULL),
            .shard = 0,
            .index = r,
        };
        if (m < k) {
            out_p[m] = hit;
            heap_sift_up(out_p, m++);
        } else if (kn_scan_hit_before(&hit, &out_p[0])) {
            out_p[0] = hit;
            heap_sift_down(out_p, m, 0);
        }
    }
    /* Heap sort: the last-ranked goes to the end each round. */
    for (size_t end = m; end > 1; end--) {
        struct kn_scan_hit t = out_p[0];
        out_p[0] = out_p[end - 1];
        out_p[end - 1] = t;
        heap_sift_down(out_p, end - 1, 0);
    }
    return (long)m;
}

static struct kn_scan_hit merge_hit(const struct kn_scan_hit *const *lists,
                                    const uint32_t *shard_ids, size_t i, size_t j)
{
    struct kn_scan_hit h = lists[i][j];
    if (shard_ids)
        h.shard = shard_ids[i];
    return h;
}

long kr_topk_merge(const struct kn_scan_hit *const *lists, const size_t *counts, size_t nlists,
                   const uint32_t *shard_ids, uint32_t k, struct kn_scan_hit *out_p)
{
    if (k == 0 || (nlists > 0 && (!lists || !counts)))
        return -EINVAL;
    size_t total = 0;
    for (size_t i = 0; i < nlists; i++) {
        if (counts[i] > 0 && !lists[i])
            return -EINVAL;
        for (size_t j = 1; j < counts[i]; j++) {
            struct kn_scan_hit a = merge_hit(lists, shard_ids, i, j - 1);
            struct kn_scan_hit b = merge_hit(lists, shard_ids, i, j);
            if (!kn_scan_hit_before(&a, &b))
                return -EINVAL;
        }
        total += counts[i];
    }
    const size_t m = total < k ? total : k;
    if (m > 0 && !out_p)
        return -EINVAL;
    /* Output o is the best hit of any list that ranks after output o-1; in a
     * sorted list the hits after it are a suffix, found by bisection. */
    size_t o = 0;
    for (; o < m; o++) {
        int found = 0;
        struct kn_scan_hit best = {0};
        for (size_t i = 0; i < nlists; i++) {
            size_t lo = 0, hi = counts[i];
            while (o > 0 && lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                struct kn_scan_hit h = merge_hit(lists, shard_ids, i, mid);
                if (kn_scan_hit_before(&out_p[o - 1], &h))
                    hi = mid;
                else
                    lo = mid + 1;
            }
            if (lo == counts[i])
                continue;
            struct kn_scan_hit h = merge_hit(lists, shard_ids, i, lo);
            if (!found || kn_scan_hit_before(&h, &best)) {
                best = h;
                found = 1;
            }
        }
        if (!found)
            break; /* the rest were duplicates of hits already out */
        out_p[o] = best;
    }
    return (long)o;
}

__attribute__((format(printf, 3, 4))) static int check_fail(char *why, size_t why_len,
                                                            const char *fmt, ...)
{
    if (why && why_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, why_len, fmt, ap);
        va_end(ap);
    }
    return -EBADMSG;
}

static int hits_hold(const struct kn_scan_hit *hits, size_t count, uint64_t index)
{
    for (size_t i = 0; i < count; i++)
        if (hits[i].index == index)
            return 1;
    return 0;
}

/* Everything but the set comparison. */
static int check_hits(const struct kr_scan_shard *sh, const struct kn_scan_hit *hits, size_t count,
                      double bound, double *rel_err_p, char *why, size_t why_len)
{
    double diff2 = 0.0, ref2 = 0.0;
    for (size_t i = 0; i < count; i++) {
        const struct kn_scan_hit *h = &hits[i];
        if (h->shard != 0 || h->index >= sh->n)
            return check_fail(why, why_len,
                              "hit %zu: expected shard 0 and an index below %llu, found shard "
                              "%u index %llu",
                              i, (unsigned long long)sh->n, h->shard, (unsigned long long)h->index);
        if (i > 0 && !kn_scan_hit_before(&hits[i - 1], h))
            return check_fail(
                why, why_len, "hits %zu and %zu out of order: (%.9g, %llu) then (%.9g, %llu)",
                i - 1, i, (double)hits[i - 1].score, (unsigned long long)hits[i - 1].index,
                (double)h->score, (unsigned long long)h->index);
        for (size_t j = 0; j < i; j++)
            if (hits[j].index == h->index)
                return check_fail(why, why_len, "hits %zu and %zu both name record %llu", j, i,
                                  (unsigned long long)h->index);
        double abs_sum = 0.0;
        const double s =
            kr_scan_score(sh->records, sh->type, sh->dim, h->index, sh->query, &abs_sum);
        if (isnan(s) || isnan(h->score)) {
            if (isnan(s) != isnan(h->score))
                return check_fail(why, why_len,
                                  "hit %zu (record %llu): score %.9g, exact score %.17g", i,
                                  (unsigned long long)h->index, (double)h->score, s);
            continue;
        }
        const double err = fabs((double)h->score - s);
        if (!(err <= bound * abs_sum))
            return check_fail(why, why_len,
                              "hit %zu (record %llu): score %.9g, exact %.17g: error %.3g over "
                              "the bound %.3g = %.3g * sum|q x| (%.6g)",
                              i, (unsigned long long)h->index, (double)h->score, s, err,
                              bound * abs_sum, bound, abs_sum);
        diff2 += err * err;
        ref2 += s * s;
    }
    if (rel_err_p)
        *rel_err_p = ref2 > 0 ? sqrt(diff2 / ref2) : sqrt(diff2);
    return 0;
}

int kr_scan_check(const struct kr_scan_shard *sh, uint32_t k, const struct kn_scan_hit *ref,
                  const struct kn_scan_hit *hits, size_t count, double *rel_err_p, char *why,
                  size_t why_len)
{
    if (!sh || kn_scan_elem_size(sh->type) == 0 || sh->dim == 0 || k == 0 ||
        sh->n >= KN_SCAN_MAX_RECORDS ||
        (sh->n > 0 && (!sh->records || !sh->query || (!hits && count > 0))))
        return -EINVAL;
    const size_t want = sh->n < k ? (size_t)sh->n : k;
    if (count != want)
        return check_fail(why, why_len, "expected min(n %llu, k %u) = %zu hits, found %zu",
                          (unsigned long long)sh->n, k, want, count);
    const double bound = kn_scan_error_bound(sh->dim);
    int rc = check_hits(sh, hits, count, bound, rel_err_p, why, why_len);
    if (rc < 0 || count == 0)
        return rc;

    struct kn_scan_hit *own = NULL;
    if (!ref) {
        own = malloc(want * sizeof(*own));
        if (!own)
            return -ENOMEM;
        long got = kr_scan_topk(sh->records, sh->type, sh->n, sh->dim, sh->query, k, own);
        if (got != (long)want) {
            free(own);
            return got < 0 ? (int)got : -EINVAL;
        }
        ref = own;
    }
    /* Each record the hits miss against each one they hold instead. */
    for (size_t i = 0; i < want && rc == 0; i++) {
        if (hits_hold(hits, count, ref[i].index))
            continue;
        double a_r = 0.0;
        const double s_r =
            kr_scan_score(sh->records, sh->type, sh->dim, ref[i].index, sh->query, &a_r);
        for (size_t j = 0; j < count; j++) {
            if (hits_hold(ref, want, hits[j].index))
                continue;
            double a_h = 0.0;
            const double s_h =
                kr_scan_score(sh->records, sh->type, sh->dim, hits[j].index, sh->query, &a_h);
            if (!(s_r - s_h <= bound * (a_r + a_h))) {
                rc = check_fail(why, why_len,
                                "record %llu (exact %.17g) is in the reference top-%u but "
                                "missing, while record %llu (exact %.17g) is in: %.3g apart, "
                                "beyond the f32 tolerance %.3g",
                                (unsigned long long)ref[i].index, s_r, k,
                                (unsigned long long)hits[j].index, s_h, s_r - s_h,
                                bound * (a_r + a_h));
                break;
            }
        }
    }
    free(own);
    return rc;
}
