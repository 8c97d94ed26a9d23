/* C reference of the vector scan kernels (kernels/scan.cu), for tests and
 * the host backend. Pure C, no CUDA, no stagingd.
 *
 * Scores are accumulated in f64 and rounded to f32 once; records are ranked
 * by that f32 score with the order of kernels/scan.h (larger score first,
 * then smaller shard, then smaller index; NaN last). The GPU accumulates in
 * f32, so its scores differ by at most kn_scan_error_bound(dim) * sum|q_i x_i|
 * and its top-k may differ from this one only among records whose exact
 * scores lie that close. */
#ifndef KERNELS_SCAN_REF_H
#define KERNELS_SCAN_REF_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/scan.h"

/* The f64 dot product of record @index of @records (@type, @dim elements a
 * record, packed) with @query; writes sum |q_i x_i| to *@abs_p when it is not
 * NULL. No argument checks: the caller passes a valid record. */
double kr_scan_score(const void *records, uint32_t type, uint32_t dim, uint64_t index,
                     const float *query, double *abs_p);

/* The @k best of @n records (@type KN_SCAN_F32 or KN_SCAN_F16, @dim elements
 * each, packed, any alignment) against @query (@dim floats), best first, in
 * @out_p (room for min(n, k) hits; shard 0). Any k >= 1.
 * Returns min(n, k), or -EINVAL (bad type, dim 0, k 0, n >= KN_SCAN_MAX_RECORDS,
 * a NULL pointer with n > 0). */
long kr_scan_topk(const void *records, uint32_t type, uint64_t n, uint32_t dim, const float *query,
                  uint32_t k, struct kn_scan_hit *out_p);

/* Merges @nlists top-k lists (list i: @counts[i] hits, best first) into the
 * @k best overall, best first, in @out_p (room for min(k, sum counts)). With
 * @shard_ids (may be NULL) hit j of list i is taken as shard @shard_ids[i];
 * otherwise each hit keeps its shard field. Allocates nothing.
 * Hits equal in score, shard and index are one hit: a duplicate across lists
 * is output once. Returns the hits written, min(k, sum counts) when nothing
 * repeats, or -EINVAL (k 0, a NULL list with a count, or a list not sorted
 * strictly best first). */
long kr_topk_merge(const struct kn_scan_hit *const *lists, const size_t *counts, size_t nlists,
                   const uint32_t *shard_ids, uint32_t k, struct kn_scan_hit *out_p);

/* One shard's records and the query, for kr_scan_check. */
struct kr_scan_shard {
    const void *records; /* n x dim elements of type, packed */
    uint32_t type;       /* KN_SCAN_F32 or KN_SCAN_F16 */
    uint32_t dim;
    uint64_t n;
    const float *query; /* dim floats */
};

/* Checks that @hits (@count hits), computed in f32 by an implementation
 * such as the GPU's, is a valid top-@k of @shard within the error bound
 * b = kn_scan_error_bound(dim), given exact (f64) scores s_r and
 * A_r = sum |q_i x_i| of record r:
 *   - count == min(n, k), the hits sorted strictly best first, shard 0,
 *     distinct indices below n;
 *   - each score within b * A_r of s_r (NaN exactly where s_r is NaN);
 *   - against the reference top-k @ref (kr_scan_topk's output, or NULL to
 *     compute it here), every record r the hits miss and every record h they
 *     hold instead satisfy s_r - s_h <= b * (A_r + A_h): an f32 sum can swap
 *     them only when their exact scores are that close.
 * Writes ||score - s|| / ||s|| over the hits to *@rel_err_p (may be NULL).
 * Returns 0, -EBADMSG with the first violation in @why (may be NULL),
 * -EINVAL for bad arguments, or -ENOMEM. */
int kr_scan_check(const struct kr_scan_shard *shard, uint32_t k, const struct kn_scan_hit *ref,
                  const struct kn_scan_hit *hits, size_t count, double *rel_err_p, char *why,
                  size_t why_len);

#endif /* KERNELS_SCAN_REF_H */
