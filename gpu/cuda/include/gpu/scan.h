/* ga_scan: the vector scan kernels (kernels/scan.cu) on a ga_device.
 *
 * The k best records of a shard by dot product with a query: records are
 * n x dim elements of type KN_SCAN_F32 or KN_SCAN_F16, row-major, at a device
 * address (device memory, or mapped host memory for zero-copy), aligned to
 * their element size. Scores are accumulated in f32; the result is the
 * shard's top-k, best first, ranked as kernels/scan.h says (larger score,
 * then smaller index; NaN last); shard ids are 0 (kr_topk_merge assigns
 * them when lists of several shards are merged). Compared with the f64
 * reference (kernels/scan_ref.h) every score is within
 * kn_scan_error_bound(dim) * sum |q_i x_i|.
 *
 * @stream arguments are a CUstream passed as void * (the header does not
 * include cuda.h); NULL means the device's own stream. Functions return 0
 * or a count on success and a negative errno on failure, logging the
 * failure once. A ga_scan is used by one thread at a time. */
#ifndef GPU_SCAN_H
#define GPU_SCAN_H

#include <stdint.h>

#include "kernels/scan.h"

struct ga_device;
struct ga_scan;

/* The @k best of @n records at device address @records against the @dim
 * floats at host pointer @query_host, written best first to @hits_p (room
 * for min(n, k) hits). Runs on @stream and waits for it. Returns min(n, k)
 * (0 for n == 0, nothing launched), or -EINVAL (bad type, dim 0, k not in
 * 1..KN_SCAN_MAX_K, n over KN_SCAN_MAX_RECORDS - 1, records unaligned or 0,
 * a NULL pointer), -ENOMEM, -EIO (an inconsistent result), or the errno of
 * a failed CUDA call or launch. @hits_p is written only on success. */
int ga_scan_topk(struct ga_device *dev, uint64_t records, uint32_t type, uint64_t n, uint32_t dim,
                 const float *query_host, uint32_t k, void *stream, struct kn_scan_hit *hits_p);

/* ---- a scan over several submissions (chunks of one shard) ---- */

/* Prepares scans of @type records of @dim elements against @query_host
 * (copied to the device now) keeping the @k best: the device buffers are
 * allocated once here. *@scan_p is owned by the caller: ga_scan_destroy.
 * Returns 0, -EINVAL as ga_scan_topk, -ENOMEM, -ENOEXEC (the scan kernels
 * are not loaded) or a CUDA errno. */
int ga_scan_create(struct ga_device *dev, uint32_t type, uint32_t dim, const float *query_host,
                   uint32_t k, struct ga_scan **scan_p);

/* Queues on @stream the scan of @n records at @records, numbered
 * @index_base.. (index_base + n <= KN_SCAN_MAX_RECORDS), and their merge
 * into the running top-k. Asynchronous: @records must stay readable until
 * the stream passes this point. Submissions of one scan share its buffers:
 * put them on one stream, or order them. Returns 0 or -EINVAL, or the errno
 * of a failed launch. */
int ga_scan_submit(struct ga_scan *scan, uint64_t records, uint64_t n, uint64_t index_base,
                   void *stream);

/* Waits for @stream, writes the running top-k of everything submitted so far
 * to @hits_p (room for min(submitted records, k)) and starts a new empty
 * top-k. Returns the count written, -EIO (an inconsistent result) or a CUDA
 * errno. */
int ga_scan_finish(struct ga_scan *scan, void *stream, struct kn_scan_hit *hits_p);

/* Frees the scan's device buffers; NULL is a no-op. Work submitted on it
 * must have completed (ga_scan_finish, or a synchronised stream). */
void ga_scan_destroy(struct ga_scan *scan);

#endif /* GPU_SCAN_H */
