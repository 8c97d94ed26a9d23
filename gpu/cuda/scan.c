/* Launching the vector scan kernels (kernels/scan.cu): argument checks, the
 * load width and lanes per record, the grid, and the running top-k that the
 * reduce kernel keeps in the first k slots of the candidate buffer. */
#include "gpu/scan.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cu_call.h"
#include "device_internal.h"

_Static_assert(sizeof(struct kn_scan_args) == 64, "kn_scan_args layout is shared with CUDA");
_Static_assert(sizeof(struct kn_scan_hit) == 16, "kn_scan_hit layout is shared with CUDA");

#define GA_SCAN_U 4 /* records per group per step: KN_U in scan.cu */

struct ga_scan {
    struct ga_device *dev;
    CUfunction k_scan;
    CUfunction k_reduce;
    uint32_t type;
    uint32_t dim;
    uint32_t k;
    uint32_t smem; /* dynamic shared memory of a scan block */
    uint32_t max_grid;
    uint64_t submitted; /* records since the last finish */
    CUdeviceptr query;
    CUdeviceptr cand; /* k running keys, then max_grid * k per launch */
    uint64_t *keys;   /* host copy of the k running keys */
};

static CUstream ga__scan_stream(const struct ga_device *dev, void *stream)
{
    return stream ? (CUstream)stream : dev->stream;
}

static int ga__scan_params_check(const struct ga_device *dev, uint32_t type, uint32_t dim,
                                 const float *query, uint32_t k)
{
    if (!dev || !query) {
        ga__err("scan: expected a device and a host query, found NULL");
        return -EINVAL;
    }
    if (kn_scan_elem_size(type) == 0) {
        ga__err("scan: expected record type %d (f32) or %d (f16), found %u", KN_SCAN_F32,
                KN_SCAN_F16, type);
        return -EINVAL;
    }
    if (dim == 0) {
        ga__err("scan: expected a dimension >= 1, found 0");
        return -EINVAL;
    }
    if (k == 0 || k > KN_SCAN_MAX_K) {
        ga__err("scan: expected k in 1..%d, found %u", KN_SCAN_MAX_K, k);
        return -EINVAL;
    }
    return 0;
}

int ga_scan_create(struct ga_device *dev, uint32_t type, uint32_t dim, const float *query_host,
                   uint32_t k, struct ga_scan **scan_p)
{
    int rc = ga__scan_params_check(dev, type, dim, query_host, k);
    if (rc < 0)
        return rc;
    if (!scan_p) {
        ga__err("scan: expected a result pointer, found NULL");
        return -EINVAL;
    }
    struct ga_scan *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->dev = dev;
    s->type = type;
    s->dim = dim;
    s->k = k;
    s->keys = calloc(k, sizeof(*s->keys));
    if (!s->keys) {
        rc = -ENOMEM;
        goto fail_free;
    }
    const char *name = type == KN_SCAN_F32 ? KN_K_SCAN_F32 : KN_K_SCAN_F16;
    if (ga_device_kernel(dev, KN_SCAN_IMAGE, name, &s->k_scan) < 0 ||
        ga_device_kernel(dev, KN_SCAN_IMAGE, KN_K_SCAN_REDUCE, &s->k_reduce) < 0) {
        ga__err("scan: the loaded images lack image '%s' with kernels %s and %s", KN_SCAN_IMAGE,
                name, KN_K_SCAN_REDUCE);
        rc = -ENOEXEC;
        goto fail_free;
    }
    if ((rc = ga_device_make_current(dev)) < 0)
        goto fail_free;

    /* The grid never needs more blocks than fit on the device at once: each
     * block strides over the records. */
    const uint32_t in_smem = dim <= KN_SCAN_SMEM_QUERY_MAX_DIM;
    s->smem = kn_scan_smem_bytes(dim, in_smem);
    int per_sm = 0, sms = 0;
    GA_CU_GOTO(
        cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, s->k_scan, KN_SCAN_THREADS, s->smem),
        rc, fail_free);
    GA_CU_GOTO(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev->cu_device),
               rc, fail_free);
    if (per_sm < 1 || sms < 1) {
        ga__err("scan: expected room for a %d-thread block with %u bytes of shared memory, "
                "found %d blocks per multiprocessor on %d multiprocessors",
                KN_SCAN_THREADS, s->smem, per_sm, sms);
        rc = -ENOEXEC;
        goto fail_free;
    }
    s->max_grid = (uint32_t)per_sm * (uint32_t)sms;

    const size_t query_bytes = (size_t)dim * sizeof(float);
    const size_t cand_bytes = ((size_t)s->max_grid + 1) * k * sizeof(uint64_t);
    CUstream st = dev->stream;
    GA_CU_GOTO(cuMemAlloc(&s->query, query_bytes), rc, fail_free);
    GA_CU_GOTO(cuMemAlloc(&s->cand, cand_bytes), rc, fail_query);
    GA_CU_GOTO(cuMemcpyHtoDAsync(s->query, query_host, query_bytes, st), rc, fail_sync);
    GA_CU_GOTO(cuMemsetD32Async(s->cand, 0, (size_t)k * 2, st), rc, fail_sync);
    /* After this the query is on the device whatever stream submits use. */
    GA_CU_GOTO(cuStreamSynchronize(st), rc, fail_cand);
    *scan_p = s;
    return 0;

fail_sync:
    GA_CU(cuStreamSynchronize(st));
fail_cand:
    GA_CU(cuMemFree(s->cand));
fail_query:
    GA_CU(cuMemFree(s->query));
fail_free:
    free(s->keys);
    free(s);
    return rc;
}

void ga_scan_destroy(struct ga_scan *s)
{
    if (!s)
        return;
    if (ga_device_make_current(s->dev) == 0) {
        GA_CU(cuMemFree(s->cand));
        GA_CU(cuMemFree(s->query));
    }
    free(s->keys);
    free(s);
}

/* The widest load (16, 8, 4 or 2 bytes) that both the records' address and
 * the record size are multiples of, and the lanes per record. */
static void ga__scan_shape(uint32_t elem, uint32_t dim, uint64_t records, uint32_t *vec_p,
                           uint32_t *group_p)
{
    const uint64_t rec_bytes = (uint64_t)dim * elem;
    uint32_t vec = 16;
    while (vec > elem && (records % vec != 0 || rec_bytes % vec != 0))
        vec /= 2;
    const uint32_t nvec = dim / (vec / elem);
    uint32_t group = 1;
    while (group < 32 && group < nvec)
        group *= 2;
    *vec_p = vec;
    *group_p = group;
}

int ga_scan_submit(struct ga_scan *s, uint64_t records, uint64_t n, uint64_t index_base,
                   void *stream)
{
    if (!s) {
        ga__err("scan submit: expected a scan, found NULL");
        return -EINVAL;
    }
    if (n == 0)
        return 0;
    const uint32_t elem = kn_scan_elem_size(s->type);
    if (records == 0 || records % elem != 0) {
        ga__err("scan submit: expected a %u-byte aligned device address for %s records, found "
                "%#llx",
                elem, s->type == KN_SCAN_F32 ? "f32" : "f16", (unsigned long long)records);
        return -EINVAL;
    }
    if (index_base > KN_SCAN_MAX_RECORDS || n > KN_SCAN_MAX_RECORDS - index_base) {
        ga__err("scan submit: expected index_base + n <= %llu, found %llu + %llu",
                (unsigned long long)KN_SCAN_MAX_RECORDS, (unsigned long long)index_base,
                (unsigned long long)n);
        return -EINVAL;
    }
    int rc = ga_device_make_current(s->dev);
    if (rc < 0)
        return rc;
    struct kn_scan_args a = {
        .records = records,
        .n = n,
        .index_base = index_base,
        .query = (uint64_t)s->query,
        .cand = (uint64_t)s->cand + (uint64_t)s->k * sizeof(uint64_t),
        .dim = s->dim,
        .k = s->k,
        .query_in_smem = s->smem != 0,
    };
    ga__scan_shape(elem, s->dim, records, &a.vec_bytes, &a.group);
    const uint64_t per_block = (uint64_t)KN_SCAN_WARPS * (32 / a.group) * GA_SCAN_U;
    const uint64_t want = (n + per_block - 1) / per_block;
    const uint32_t grid = want < s->max_grid ? (uint32_t)want : s->max_grid;
    const CUstream st = ga__scan_stream(s->dev, stream);
    void *scan_params[] = {&a};
    GA_CU_GOTO(cuLaunchKernel(s->k_scan, grid, 1, 1, KN_SCAN_THREADS, 1, 1, s->smem, st,
                              scan_params, NULL),
               rc, fail);
    /* The running k keys and this launch's grid * k, reduced in place. */
    CUdeviceptr cand = s->cand;
    unsigned int count = (grid + 1) * s->k, k = s->k;
    void *reduce_params[] = {&cand, &count, &k};
    GA_CU_GOTO(cuLaunchKernel(s->k_reduce, 1, 1, 1, KN_SCAN_REDUCE_THREADS, 1, 1, 0, st,
                              reduce_params, NULL),
               rc, fail);
    s->submitted += n;
    return 0;
fail:
    ga__err("scan submit: %llu records of dim %u could not be queued", (unsigned long long)n,
            s->dim);
    return rc;
}

int ga_scan_finish(struct ga_scan *s, void *stream, struct kn_scan_hit *hits_p)
{
    if (!s || !hits_p) {
        ga__err("scan finish: expected a scan and a result array, found NULL");
        return -EINVAL;
    }
    int rc = ga_device_make_current(s->dev);
    if (rc < 0)
        return rc;
    const CUstream st = ga__scan_stream(s->dev, stream);
    const uint64_t submitted = s->submitted;
    const uint32_t count = submitted < s->k ? (uint32_t)submitted : s->k;
    /* The next top-k starts empty whatever happens to this one. */
    s->submitted = 0;
    GA_CU_GOTO(cuMemcpyDtoHAsync(s->keys, s->cand, (size_t)s->k * sizeof(uint64_t), st), rc,
               fail_sync);
    GA_CU_GOTO(cuMemsetD32Async(s->cand, 0, (size_t)s->k * 2, st), rc, fail_sync);
    GA_CU_GOTO(cuStreamSynchronize(st), rc, fail);

    /* The first count keys are real, strictly descending, and name
     * records that were submitted; the rest are empty. */
    for (uint32_t i = 0; i < s->k; i++) {
        const uint64_t key = s->keys[i];
        const int real = key >= KN_SCAN_KEY_REAL_MIN;
        if (real != (i < count) || (i > 0 && real && key >= s->keys[i - 1])) {
            ga__err("scan finish: inconsistent result from the GPU: key %u of %u is %#llx "
                    "(previous %#llx) after %llu records",
                    i, s->k, (unsigned long long)key, (unsigned long long)(i ? s->keys[i - 1] : 0),
                    (unsigned long long)submitted);
            return -EIO;
        }
    }
    for (uint32_t i = 0; i < count; i++) {
        hits_p[i].score = kn_scan_key_score((uint32_t)(s->keys[i] >> 32));
        hits_p[i].shard = 0;
        hits_p[i].index = kn_scan_key_index(s->keys[i]);
    }
    return (int)count;

fail_sync:
    GA_CU(cuStreamSynchronize(st));
fail:
    return rc;
}

int ga_scan_topk(struct ga_device *dev, uint64_t records, uint32_t type, uint64_t n, uint32_t dim,
                 const float *query_host, uint32_t k, void *stream, struct kn_scan_hit *hits_p)
{
    int rc = ga__scan_params_check(dev, type, dim, query_host, k);
    if (rc < 0)
        return rc;
    if (!hits_p) {
        ga__err("scan: expected a result array, found NULL");
        return -EINVAL;
    }
    if (n >= KN_SCAN_MAX_RECORDS) {
        ga__err("scan: expected fewer than %llu records, found %llu",
                (unsigned long long)KN_SCAN_MAX_RECORDS, (unsigned long long)n);
        return -EINVAL;
    }
    if (n == 0)
        return 0;
    const uint32_t elem = kn_scan_elem_size(type);
    if (records == 0 || records % elem != 0) {
        ga__err("scan: expected a %u-byte aligned device address, found %#llx", elem,
                (unsigned long long)records);
        return -EINVAL;
    }
    struct ga_scan *s = NULL;
    if ((rc = ga_scan_create(dev, type, dim, query_host, k, &s)) < 0)
        return rc;
    if ((rc = ga_scan_submit(s, records, n, 0, stream)) == 0)
        rc = ga_scan_finish(s, stream, hits_p);
    else
        GA_CU(cuStreamSynchronize(ga__scan_stream(dev, stream))); /* nothing may still use s */
    ga_scan_destroy(s);
    return rc;
}
