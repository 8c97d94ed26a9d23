/* What one SUBMIT queues on the GPU, per op and per memory path, and how its
 * result comes back.
 *
 * - PINNED: the lease's bytes are copied to device memory chunk by chunk on
 *   the stream's copy side (cs) into two buffers in turn, while the kernels
 *   run on the main stream: copy i+1 overlaps kernel i, and copy i+2 waits
 *   for kernel i to be done with its buffer (events cd / kd).
 * - MAPPED: the kernels read the lease through its device address.
 * - STAGED: as PINNED, but each copy is a stream host function filling a
 *   pinned bounce buffer from the pageable lease (a CPU memcpy, the slow
 *   path), then a copy of that buffer.
 * Device memory comes from the stream-ordered allocator (cuMemAllocAsync and
 * cuMemFreeAsync on the main stream), so nothing here ever waits. Results
 * land in the submit's slot of a pinned arena by cuMemcpyDtoHAsync; the
 * completion reads them once the stream has passed that point. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sigbus.h"
#include "cu_call.h"
#include "device_internal.h"
#include "backend_cuda.h"
#include "kernels/checksum.h"
#include "kernels/scan.h"
#include "lease_types/validate.h"

#define CX_ALIGN(v) (((v) + 255u) & ~(uint64_t)255u)
#define CX_CHUNK_MAX (1ull << 30) /* a pipeline chunk grows up to this for big leases */
#define CX_SCAN_U 4               /* records per lane group per step, as kernels/scan.cu */

static uint64_t cx__div_up(uint64_t a, uint64_t b)
{
    return a / b + (a % b != 0);
}

/* ---- planning (CUDA-free, on the caller's thread) ------------------------ */

/* The chunk for @len bytes: at least the configured size, large enough that
 * at most @max_chunks are needed, and a multiple of @unit. */
static uint64_t cx__chunk_for(const struct cx *x, uint64_t len, uint64_t unit, uint64_t max_chunks)
{
    uint64_t want = x->chunk;
    uint64_t spread = cx__div_up(len, max_chunks);
    if (spread > want)
        want = spread;
    return cx__div_up(want, unit) * unit;
}

int cx__op_plan(const struct cx *x, struct cx_cmd *cmd, uint32_t *code_p, char *msg, size_t len)
{
    const struct ga_exec_work *w = &cmd->w;
    if (w->op == GA_EXEC_OP_LAUNCH)
        return cx__launch_plan(x, cmd, code_p, msg, len);
    switch (w->mem_class) {
    case LT_CLASS_PINNED:
        cmd->path = CX_PATH_PINNED;
        break;
    case LT_CLASS_MAPPED:
        cmd->path = CX_PATH_MAPPED;
        if (w->dev == 0) {
            *code_p = LT_E_SYSTEM;
            snprintf(msg, len, "MAPPED lease without a device address: not registered DEVICEMAP");
            return -EINVAL;
        }
        break;
    case LT_CLASS_STAGED:
        cmd->path = CX_PATH_STAGED;
        break;
    default:
        *code_p = LT_E_BAD_CLASS;
        snprintf(msg, len, "lease served as class %u: expected 1, 2 or 3", w->mem_class);
        return -EINVAL;
    }
    uint64_t bytes = 0;
    switch (w->op) {
    case LT_OP_CHECKSUM_VERIFY: {
        const struct lt_op_checksum_verify *a = &w->args.checksum;
        bytes = a->length;
        cmd->chunk = cx__chunk_for(x, a->length, a->block_size, CX_VERIFY_MAX_CHUNKS);
        break;
    }
    case LT_OP_VECTOR_SCAN: {
        const struct lt_op_vector_scan *a = &w->args.scan;
        uint32_t esz = kn_scan_elem_size(a->elem);
        if (a->metric != LT_SCAN_DOT) {
            *code_p = LT_E_UNSUPPORTED;
            snprintf(msg, len,
                     "VECTOR_SCAN metric %u: the scan kernels rank by dot product (1) "
                     "only",
                     a->metric);
            return -EOPNOTSUPP;
        }
        if (esz == 0 || a->dim == 0) {
            *code_p = LT_E_BAD_VALUE;
            snprintf(msg, len,
                     "VECTOR_SCAN: expected elem 1 (f32) or 2 (f16) and dim >= 1, "
                     "found elem %u dim %u",
                     a->elem, a->dim);
            return -EINVAL;
        }
        if (cmd->path == CX_PATH_MAPPED && (w->dev + a->offset) % esz != 0) {
            *code_p = LT_E_MISALIGNED;
            snprintf(msg, len,
                     "VECTOR_SCAN: zero-copy records must be %u-byte aligned in "
                     "memory; they start at lease offset %" PRIu64,
                     esz, a->offset);
            return -EINVAL;
        }
        uint64_t rec = (uint64_t)a->dim * esz;
        cmd->records = a->length / rec;
        if (cmd->records >= KN_SCAN_MAX_RECORDS) {
            *code_p = LT_E_UNSUPPORTED;
            snprintf(msg, len, "VECTOR_SCAN of %" PRIu64 " records: at most %llu per submit",
                     cmd->records, KN_SCAN_MAX_RECORDS - 1);
            return -EOPNOTSUPP;
        }
        bytes = a->length;
        cmd->chunk = cx__chunk_for(x, a->length, rec, CX_MAX_CHUNKS);
        break;
    }
    case LT_OP_COPY_H2D:
        bytes = w->args.copy.length;
        cmd->chunk = bytes < x->chunk ? bytes : x->chunk;
        break;
    default:
        *code_p = LT_E_BAD_OP;
        snprintf(msg, len, "submit: op %u is not defined", (unsigned)w->op);
        return -EINVAL;
    }
    /* Two chunk buffers live in device memory; MAPPED reads in place. */
    uint64_t chunk_max = cmd->path == CX_PATH_MAPPED ? 4 * CX_CHUNK_MAX : CX_CHUNK_MAX;
    if (cmd->chunk == 0 || cmd->chunk > chunk_max) {
        static const char *const names[] = {"", "CHECKSUM_VERIFY", "VECTOR_SCAN", "COPY_H2D"};
        *code_p = LT_E_UNSUPPORTED;
        snprintf(msg, len,
                 "%s over %" PRIu64 " bytes needs %" PRIu64 "-byte chunks, at most %" PRIu64,
                 names[w->op], bytes, cmd->chunk, chunk_max);
        return -EOPNOTSUPP;
    }
    cmd->nchunks = (uint32_t)cx__div_up(bytes, cmd->chunk);
    return 0;
}

/* ---- building blocks ------------------------------------------------------ */

/* The copy itself, under the SIGBUS guard: the source is client memory. */
static void cx__piece_copy(void *arg)
{
    const struct cx_piece *p = arg;
    if (!p->f16) {
        memcpy(p->dst, p->src, (size_t)p->len);
        return;
    }
    float *out = p->dst;
    const unsigned char *in = p->src;
    for (uint64_t i = 0; i < p->len / 2; i++) {
        uint16_t h;
        memcpy(&h, in + 2 * i, 2);
        out[i] = kn_f16_to_f32(h);
    }
}

/* A stream host function: the CPU half of a bounce copy. A fault on the
 * client's pages ends the copy inside base_guard_run, never across this
 * function (no jump may leave a CUDA host function): the piece is marked
 * and the op answered LT_E_SEGMENT_GONE. */
static void cx__piece_run(void *arg)
{
    struct cx_piece *p = arg;
    if (base_guard_run(p->src, (size_t)p->len, cx__piece_copy, p) == -EFAULT)
        __atomic_store_n(&p->gone, 1, __ATOMIC_RELEASE);
}

/* Whether a bounce copy of @cmd met a vanished page. */
static bool cx__pieces_gone(const struct cx_cmd *cmd)
{
    for (uint32_t i = 0; i < cmd->npieces; i++)
        if (__atomic_load_n(&cmd->pieces[i].gone, __ATOMIC_ACQUIRE))
            return true;
    return false;
}

static int cx__piece_add(struct cx_cmd *cmd, void *dst, const void *src, uint64_t len, int f16,
                         struct cx_piece **p_p)
{
    /* Queued host functions point into the array: it never moves, and
     * cx__pieces_reserve sized it for every piece of the op. */
    if (cmd->npieces == cmd->piece_cap) {
        ga__err("bounce copy: %u pieces reserved, one more asked for", cmd->piece_cap);
        return -ENOSPC;
    }
    struct cx_piece *p = &cmd->pieces[cmd->npieces++];
    *p = (struct cx_piece){.dst = dst, .src = src, .len = len, .f16 = (uint32_t)f16};
    *p_p = p;
    return 0;
}

/* Sizes the bounce-copy descriptors once, so host functions never see the
 * array move: every piece is at most CX_SCRATCH_BYTES of input. */
static int cx__pieces_reserve(struct cx_cmd *cmd, uint64_t bytes, uint32_t extra)
{
    uint64_t n = bytes / CX_SCRATCH_BYTES + (uint64_t)cmd->nchunks + extra + 2;
    if (n > UINT32_MAX / 2)
        return -EINVAL;
    free(cmd->pieces);
    cmd->pieces = calloc((size_t)n, sizeof(*cmd->pieces));
    if (!cmd->pieces)
        return -ENOMEM;
    cmd->piece_cap = (uint32_t)n;
    cmd->npieces = 0;
    return 0;
}

/* Queues on @s a copy of @len bytes at host @src to device @dst: straight
 * from registered memory, or (STAGED lease, or an f16 query to widen)
 * through the stream's pinned bounce buffer, one host function per piece.
 * With @f16, @len is the f16 bytes read; twice as many are written. */
static int cx__fill(struct cx_cmd *cmd, CUdeviceptr dst, const unsigned char *src, uint64_t len,
                    CUstream s, int f16)
{
    if (cmd->path != CX_PATH_STAGED && !f16)
        return GA_CU(cuMemcpyHtoDAsync(dst, src, (size_t)len, s));
    void *bounce = cmd->xs->scratch->host;
    uint64_t step = f16 ? CX_SCRATCH_BYTES / 2 : CX_SCRATCH_BYTES;
    for (uint64_t off = 0; off < len; off += step) {
        uint64_t n = len - off < step ? len - off : step;
        struct cx_piece *p = NULL;
        int rc = cx__piece_add(cmd, bounce, src + off, n, f16, &p);
        if (rc < 0)
            return rc;
        if ((rc = GA_CU(cuLaunchHostFunc(s, cx__piece_run, p))) < 0)
            return rc;
        uint64_t out = f16 ? 2 * n : n;
        if ((rc = GA_CU(cuMemcpyHtoDAsync(dst + (f16 ? 2 * off : off), bounce, (size_t)out, s))) <
            0)
            return rc;
    }
    return 0;
}

/* Whether @cmd's chunks go through the copy side: more than one chunk to
 * overlap with the kernels. A shard of one chunk is copied on the main
 * stream, so a slot holds one CUDA stream (one hardware queue), not two. */
static bool cx__pipelined(const struct cx_cmd *cmd)
{
    return cmd->path != CX_PATH_MAPPED && cmd->nchunks > 1;
}

int cx__xs_prepare(struct cx *x, struct cx_xs *xs, bool scratch)
{
    int rc = 0;
    if (!xs->cs && xs->want_cs) {
        CUstream cs = NULL;
        CUevent ev[5] = {0};
        int n = 0;
        GA_CU_GOTO(cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING), rc, fail);
        for (; n < 5; n++)
            GA_CU_GOTO(cuEventCreate(&ev[n], CU_EVENT_DISABLE_TIMING), rc, fail);
        xs->cs = cs;
        xs->evf = ev[0];
        xs->cd[0] = ev[1];
        xs->cd[1] = ev[2];
        xs->kd[0] = ev[3];
        xs->kd[1] = ev[4];
        goto made;
    fail:
        while (n-- > 0)
            GA_CU(cuEventDestroy(ev[n]));
        if (cs)
            GA_CU(cuStreamDestroy(cs));
        return rc;
    }
made:
    if (scratch && !xs->scratch) {
        pthread_mutex_lock(&x->mu);
        struct cx_scratch *sc = x->scratch_free;
        if (sc)
            x->scratch_free = sc->next;
        pthread_mutex_unlock(&x->mu);
        if (!sc) {
            sc = calloc(1, sizeof(*sc));
            if (!sc)
                return -ENOMEM;
            if ((rc = GA_CU(cuMemHostAlloc(&sc->host, CX_SCRATCH_BYTES, 0))) < 0) {
                free(sc);
                return rc;
            }
            pthread_mutex_lock(&x->mu);
            sc->all_next = x->scratch_all; /* freed at destroy */
            x->scratch_all = sc;
            pthread_mutex_unlock(&x->mu);
        }
        xs->scratch = sc;
    }
    return 0;
}

/* Device memory for one op, freed on @st after its last use there. */
struct cx_dmem {
    CUdeviceptr base;
    bool forked; /* cs has work that @st has not joined yet */
};

static int cx__dmem_alloc(struct cx_dmem *d, uint64_t bytes, CUstream st)
{
    return GA_CU(cuMemAllocAsync(&d->base, (size_t)bytes, st));
}

/* On the way out, also after an error: @st waits for the copy side, then
 * the memory is released in stream order. */
static int cx__dmem_release(struct cx_dmem *d, const struct cx_xs *xs, CUstream st)
{
    int rc = 0;
    if (d->forked && (rc = GA_CU(cuEventRecord(xs->evf, xs->cs))) == 0)
        rc = GA_CU(cuStreamWaitEvent(st, xs->evf, CU_EVENT_WAIT_DEFAULT));
    if (d->base) {
        int r2 = GA_CU(cuMemFreeAsync(d->base, st));
        if (rc == 0)
            rc = r2;
    }
    return rc;
}

static int cx__fork(struct cx_dmem *d, const struct cx_xs *xs, CUstream st)
{
    int rc = GA_CU(cuEventRecord(xs->evf, st));
    if (rc == 0)
        rc = GA_CU(cuStreamWaitEvent(xs->cs, xs->evf, CU_EVENT_WAIT_DEFAULT));
    if (rc == 0)
        d->forked = true;
    return rc;
}

/* Chunk @i of a pipeline: with buffers, copy it into buffer i % 2 on the
 * copy side and make @st wait; returns in *data_p the device address the
 * kernel reads. */
static int cx__chunk_in(struct cx_cmd *cmd, CUstream st, const CUdeviceptr *bufs, uint32_t i,
                        const unsigned char *host, uint64_t dev, uint64_t off, uint64_t n,
                        CUdeviceptr *data_p)
{
    struct cx_xs *xs = cmd->xs;
    if (cmd->path == CX_PATH_MAPPED) {
        *data_p = (CUdeviceptr)(dev + off);
        return 0;
    }
    if (!cx__pipelined(cmd)) {
        *data_p = bufs[0];
        return cx__fill(cmd, bufs[0], host + off, n, st, 0);
    }
    uint32_t b = i & 1u;
    int rc = 0;
    if (i >= 2)
        GA_CU_GOTO(cuStreamWaitEvent(xs->cs, xs->kd[b], CU_EVENT_WAIT_DEFAULT), rc, out);
    if ((rc = cx__fill(cmd, bufs[b], host + off, n, xs->cs, 0)) < 0)
        goto out;
    GA_CU_GOTO(cuEventRecord(xs->cd[b], xs->cs), rc, out);
    GA_CU_GOTO(cuStreamWaitEvent(st, xs->cd[b], CU_EVENT_WAIT_DEFAULT), rc, out);
    *data_p = bufs[b];
out:
    return rc;
}

static int cx__chunk_out(const struct cx_cmd *cmd, CUstream st, uint32_t i)
{
    if (!cx__pipelined(cmd))
        return 0;
    return GA_CU(cuEventRecord(cmd->xs->kd[i & 1u], st));
}

/* ---- the ops ---------------------------------------------------------------- */

static int cx__checksum_queue(struct cx *x, struct cx_cmd *cmd, CUstream st)
{
    const struct ga_exec_work *w = &cmd->w;
    const struct lt_op_checksum_verify *a = &w->args.checksum;
    const uint64_t bs = a->block_size;
    const uint64_t nblocks = cx__div_up(a->length, bs);
    const uint64_t sums_bytes = nblocks * 8;
    const uint64_t res_bytes = (uint64_t)cmd->nchunks * CX_VERIFY_RESULT_BYTES;
    const bool bufs_needed = cmd->path != CX_PATH_MAPPED;
    const uint64_t off_sums = CX_ALIGN(res_bytes);
    const uint64_t off_buf0 = CX_ALIGN(off_sums + (bufs_needed ? sums_bytes : 0));
    const uint64_t total =
        bufs_needed ? off_buf0 + (cx__pipelined(cmd) ? 2 : 1) * CX_ALIGN(cmd->chunk) : off_buf0;
    struct cx_dmem d = {0};
    int rc = 0;
    if (cmd->path == CX_PATH_STAGED &&
        (rc = cx__pieces_reserve(cmd, a->length + sums_bytes, 1)) < 0)
        return rc;
    if ((rc = cx__dmem_alloc(&d, total, st)) < 0)
        return rc;
    /* Each chunk's result starts as "no bad block", then zeros
     * (kernels/checksum.h). */
    GA_CU_GOTO(cuMemsetD2D32Async(d.base, CX_VERIFY_RESULT_BYTES, 0xffffffffu, 2, cmd->nchunks, st),
               rc, out);
    GA_CU_GOTO(cuMemsetD2D32Async(d.base + 8, CX_VERIFY_RESULT_BYTES, 0,
                                  (CX_VERIFY_RESULT_BYTES - 8) / 4, cmd->nchunks, st),
               rc, out);
    CUdeviceptr sums;
    if (cmd->path == CX_PATH_MAPPED) {
        sums = (CUdeviceptr)(w->dev + a->sums_offset);
    } else {
        sums = d.base + off_sums;
        if ((rc = cx__fill(cmd, sums, w->host + a->sums_offset, sums_bytes, st, 0)) < 0)
            goto out;
    }
    CUdeviceptr bufs[2] = {d.base + off_buf0, d.base + off_buf0 + CX_ALIGN(cmd->chunk)};
    if (cx__pipelined(cmd) && (rc = cx__fork(&d, cmd->xs, st)) < 0)
        goto out;
    for (uint32_t i = 0; i < cmd->nchunks; i++) {
        uint64_t off = (uint64_t)i * cmd->chunk;
        uint64_t n = a->length - off < cmd->chunk ? a->length - off : cmd->chunk;
        CUdeviceptr data = 0;
        /* A ring's shard has no host bytes (w->host NULL): only dev is read. */
        const unsigned char *hb = w->host ? w->host + a->offset : NULL;
        if ((rc = cx__chunk_in(cmd, st, bufs, i, hb, w->dev + a->offset, off, n, &data)) < 0)
            goto out;
        CUdeviceptr expected = sums + (off / bs) * 8;
        CUdeviceptr result = d.base + (CUdeviceptr)i * CX_VERIFY_RESULT_BYTES;
        unsigned long long len_arg = n;
        unsigned int bs_arg = (unsigned int)bs;
        void *params[] = {&data, &len_arg, &bs_arg, &expected, &result};
        GA_CU_GOTO(cuLaunchKernel(x->k_verify, (unsigned int)cx__div_up(n, bs), 1, 1,
                                  KN_CHECKSUM_THREADS, 1, 1, 0, st, params, NULL),
                   rc, out);
        if ((rc = cx__chunk_out(cmd, st, i)) < 0)
            goto out;
    }
    GA_CU_GOTO(cuMemcpyDtoHAsync(x->results + (size_t)cmd->slot * CX_RESULT_SLOT_BYTES, d.base,
                                 (size_t)res_bytes, st),
               rc, out);
out:;
    int r2 = cx__dmem_release(&d, cmd->xs, st);
    return rc < 0 ? rc : r2;
}

/* The widest load (16, 8, 4 or 2 bytes) that the records' address and the
 * record size are multiples of, and the lanes per record: the shape the
 * scan kernels take (kernels/scan.h), as gpu/scan.c computes it. */
static void cx__scan_shape(uint32_t esz, uint32_t dim, uint64_t records, uint32_t *vec_p,
                           uint32_t *group_p)
{
    const uint64_t rec_bytes = (uint64_t)dim * esz;
    uint32_t vec = 16;
    while (vec > esz && (records % vec != 0 || rec_bytes % vec != 0))
        vec /= 2;
    const uint32_t nvec = dim / (vec / esz);
    uint32_t group = 1;
    while (group < 32 && group < nvec)
        group *= 2;
    *vec_p = vec;
    *group_p = group;
}

static int cx__scan_queue(struct cx *x, struct cx_cmd *cmd, CUstream st)
{
    const struct ga_exec_work *w = &cmd->w;
    const struct lt_op_vector_scan *a = &w->args.scan;
    const uint32_t type = a->elem; /* LT_ELEM_* == KN_SCAN_* */
    const uint32_t esz = kn_scan_elem_size(type);
    const uint64_t rec = (uint64_t)a->dim * esz;
    const uint32_t in_smem = a->dim <= KN_SCAN_SMEM_QUERY_MAX_DIM;
    const uint32_t smem = kn_scan_smem_bytes(a->dim, in_smem);
    CUfunction fn = x->k_scan[type];
    int per_sm = 0;
    int rc = GA_CU(cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, KN_SCAN_THREADS, smem));
    if (rc < 0)
        return rc;
    if (per_sm < 1) {
        ga__err("scan: no room for a %d-thread block with %u bytes of shared memory",
                KN_SCAN_THREADS, smem);
        return -ENOEXEC;
    }
    const uint32_t max_grid = (uint32_t)per_sm * (uint32_t)x->sms;
    const bool bufs_needed = cmd->path != CX_PATH_MAPPED;
    /* A ring's shard brought its query to the device with its image. */
    const bool bounce_query =
        !cmd->query_dev && (type == KN_SCAN_F16 || cmd->path == CX_PATH_STAGED);
    /* The running k keys, then each launch's grid * k candidates. */
    const uint32_t k = a->k ? a->k : 1;
    const uint64_t off_q = CX_ALIGN(((uint64_t)max_grid + 1) * k * 8);
    const uint64_t off_buf0 = CX_ALIGN(off_q + (uint64_t)a->dim * 4);
    const uint64_t total =
        bufs_needed ? off_buf0 + (cx__pipelined(cmd) ? 2 : 1) * CX_ALIGN(cmd->chunk) : off_buf0;
    struct cx_dmem d = {0};
    if ((bounce_query || cmd->path == CX_PATH_STAGED) &&
        (rc = cx__pieces_reserve(cmd, cmd->path == CX_PATH_STAGED ? a->length : 0, 2)) < 0)
        return rc;
    if ((rc = cx__dmem_alloc(&d, total, st)) < 0)
        return rc;
    const CUdeviceptr query = cmd->query_dev ? cmd->query_dev : d.base + off_q;
    if (cmd->query_dev)
        rc = 0;
    else if (type == KN_SCAN_F16)
        rc = cx__fill(cmd, query, w->host + a->query_offset, (uint64_t)a->dim * 2, st, 1);
    else
        rc = cx__fill(cmd, query, w->host + a->query_offset, (uint64_t)a->dim * 4, st, 0);
    if (rc < 0)
        goto out;
    /* The running best keys start empty. */
    GA_CU_GOTO(cuMemsetD32Async(d.base, 0, (size_t)k * 2, st), rc, out);
    CUdeviceptr bufs[2] = {d.base + off_buf0, d.base + off_buf0 + CX_ALIGN(cmd->chunk)};
    if (cx__pipelined(cmd) && (rc = cx__fork(&d, cmd->xs, st)) < 0)
        goto out;
    for (uint32_t i = 0; i < cmd->nchunks; i++) {
        uint64_t off = (uint64_t)i * cmd->chunk;
        uint64_t nbytes = a->length - off < cmd->chunk ? a->length - off : cmd->chunk;
        uint64_t n = nbytes / rec;
        if (n == 0)
            break; /* a trailing partial record is not a record */
        CUdeviceptr data = 0;
        const unsigned char *hb = w->host ? w->host + a->offset : NULL;
        if ((rc = cx__chunk_in(cmd, st, bufs, i, hb, w->dev + a->offset, off, n * rec, &data)) < 0)
            goto out;
        struct kn_scan_args sa = {
            .records = data,
            .n = n,
            .index_base = off / rec,
            .query = query,
            .cand = d.base + (uint64_t)k * 8, /* after the k running keys */
            .dim = a->dim,
            .k = k,
            .query_in_smem = smem != 0,
        };
        cx__scan_shape(esz, a->dim, data, &sa.vec_bytes, &sa.group);
        const uint64_t per_block = (uint64_t)KN_SCAN_WARPS * (32 / sa.group) * CX_SCAN_U;
        const uint64_t want = cx__div_up(n, per_block);
        const uint32_t grid = want < max_grid ? (uint32_t)want : max_grid;
        void *scan_params[] = {&sa};
        GA_CU_GOTO(
            cuLaunchKernel(fn, grid, 1, 1, KN_SCAN_THREADS, 1, 1, smem, st, scan_params, NULL), rc,
            out);
        CUdeviceptr cand = d.base;
        unsigned int count = (grid + 1) * k, rk = k;
        void *reduce_params[] = {&cand, &count, &rk};
        GA_CU_GOTO(cuLaunchKernel(x->k_reduce, 1, 1, 1, KN_SCAN_REDUCE_THREADS, 1, 1, 0, st,
                                  reduce_params, NULL),
                   rc, out);
        if ((rc = cx__chunk_out(cmd, st, i)) < 0)
            goto out;
    }
    GA_CU_GOTO(cuMemcpyDtoHAsync(x->results + (size_t)cmd->slot * CX_RESULT_SLOT_BYTES, d.base,
                                 (size_t)k * 8, st),
               rc, out);
out:;
    int r2 = cx__dmem_release(&d, cmd->xs, st);
    return rc < 0 ? rc : r2;
}

static int cx__copy_queue(struct cx_cmd *cmd, CUstream st)
{
    const struct lt_op_copy_h2d *a = &cmd->w.args.copy;
    struct cx_dmem d = {0};
    int rc = 0;
    if (cmd->path == CX_PATH_STAGED && (rc = cx__pieces_reserve(cmd, a->length, 0)) < 0)
        return rc;
    if ((rc = cx__dmem_alloc(&d, cmd->chunk, st)) < 0)
        return rc;
    /* The device copy is the op: each part lands over the one before. */
    for (uint64_t off = 0; off < a->length && rc == 0; off += cmd->chunk) {
        uint64_t n = a->length - off < cmd->chunk ? a->length - off : cmd->chunk;
        rc = cx__fill(cmd, d.base, cmd->w.host + a->offset + off, n, st, 0);
    }
    int r2 = cx__dmem_release(&d, cmd->xs, st);
    return rc < 0 ? rc : r2;
}

int cx__op_prepare(struct cx *x, struct cx_cmd *cmd)
{
    if (cmd->w.op == GA_EXEC_OP_LAUNCH)
        return 0;
    bool scratch = cmd->path == CX_PATH_STAGED ||
                   (cmd->w.op == LT_OP_VECTOR_SCAN && cmd->w.args.scan.elem == LT_ELEM_F16);
    if (cx__pipelined(cmd))
        cmd->xs->want_cs = true;
    return cx__xs_prepare(x, cmd->xs, scratch);
}

int cx__op_queue(struct cx *x, struct cx_cmd *cmd, CUstream st)
{
    if (cmd->w.op == GA_EXEC_OP_LAUNCH)
        return cx__launch_queue(x, cmd, st);
    int rc = cx__op_prepare(x, cmd);
    if (rc < 0)
        return rc;
    switch (cmd->w.op) {
    case LT_OP_CHECKSUM_VERIFY:
        return cx__checksum_queue(x, cmd, st);
    case LT_OP_VECTOR_SCAN:
        return cx__scan_queue(x, cmd, st);
    case LT_OP_COPY_H2D:
        return cx__copy_queue(cmd, st);
    default:
        return -EINVAL; /* refused by cx__op_plan */
    }
}

int cx__op_queue_device(struct cx *x, struct cx_cmd *cmd, CUstream st)
{
    switch (cmd->w.op) {
    case LT_OP_CHECKSUM_VERIFY:
        return cx__checksum_queue(x, cmd, st);
    case LT_OP_VECTOR_SCAN:
        return cx__scan_queue(x, cmd, st);
    case LT_OP_COPY_H2D:
        return 0;
    default:
        return -EINVAL;
    }
}

/* ---- results ------------------------------------------------------------ */

_Static_assert(KN_VERIFY_RESULT_WORDS * 8 == CX_VERIFY_RESULT_BYTES, "a verify chunk's result");

/* The GPU names the first bad block's sums itself (kernels/checksum.h): no
 * block is read back or hashed here, on the thread every client's results
 * share, whatever the block size a client chose. */
static void cx__checksum_result(const struct cx *x, const struct cx_cmd *cmd,
                                struct ga_exec_result *res)
{
    const struct ga_exec_work *w = &cmd->w;
    const struct lt_op_checksum_verify *a = &w->args.checksum;
    const uint64_t bs = a->block_size;
    const uint64_t *words =
        (const uint64_t *)(const void *)(x->results + (size_t)cmd->slot * CX_RESULT_SLOT_BYTES);
    struct lt_checksum_result *c = &res->result.checksum;
    c->blocks_checked = cx__div_up(a->length, bs);
    c->first_bad_block = LT_BLOCK_NONE;
    uint64_t first = LT_BLOCK_NONE, bad = 0;
    for (uint32_t i = 0; i < cmd->nchunks; i++) {
        const uint64_t *r = words + (size_t)i * KN_VERIFY_RESULT_WORDS;
        uint64_t off = (uint64_t)i * cmd->chunk;
        uint64_t n = a->length - off < cmd->chunk ? a->length - off : cmd->chunk;
        uint64_t blocks = cx__div_up(n, bs);
        uint64_t f = r[KN_VERIFY_FIRST_BAD], k = r[KN_VERIFY_BAD_COUNT];
        if ((f == KN_VERIFY_NONE) != (k == 0) || k > blocks ||
            (f != KN_VERIFY_NONE && f >= blocks) ||
            (f == KN_VERIFY_NONE && r[KN_VERIFY_BAD_EXPECTED] != 0)) {
            ga__err("checksum verify: inconsistent result from the GPU in chunk %u: first bad "
                    "block %" PRIu64 ", %" PRIu64 " bad of %" PRIu64 ", expected word %" PRIu64,
                    i, f, k, blocks, r[KN_VERIFY_BAD_EXPECTED]);
            res->status = LT_E_GPU_FAULT;
            return;
        }
        /* Chunks are in order: the first one with a bad block has the first. */
        if (f != KN_VERIFY_NONE && first == LT_BLOCK_NONE) {
            first = off / bs + f;
            c->expected = r[KN_VERIFY_BAD_EXPECTED];
            c->actual = r[KN_VERIFY_BAD_ACTUAL];
        }
        bad += k;
    }
    if (bad == 0) {
        res->status = LT_OK;
        return;
    }
    c->first_bad_block = first;
    c->bad_blocks = bad;
    res->status = LT_E_CHECKSUM_MISMATCH;
}

_Static_assert(KN_SCAN_MAX_K * 8 <= CX_RESULT_SLOT_BYTES, "k scan keys fit a result slot");
_Static_assert(LT_SCAN_MAX_K == KN_SCAN_MAX_K, "the protocol's top-k limit is the kernels'");

static void cx__scan_result(const struct cx *x, const struct cx_cmd *cmd,
                            struct ga_exec_result *res)
{
    const struct lt_op_vector_scan *a = &cmd->w.args.scan;
    struct lt_scan_result *s = &res->result.scan;
    struct lt_scan_hit hits[KN_SCAN_MAX_K];
    const uint32_t k = a->k ? a->k : 1;
    const uint64_t real = cmd->records < k ? cmd->records : k;
    s->records_scanned = cmd->records;
    s->best_index = LT_BLOCK_NONE;
    /* The reduce kernel leaves the k best keys, best first; the first
     * min(records, k) must be real, distinct records, strictly falling. */
    for (uint32_t i = 0; i < k; i++) {
        uint64_t key;
        memcpy(&key, x->results + (size_t)cmd->slot * CX_RESULT_SLOT_BYTES + (size_t)i * 8, 8);
        hits[i] = (struct lt_scan_hit){.index = LT_BLOCK_NONE};
        if (i >= real)
            continue;
        uint64_t prev = 0;
        if (i > 0)
            memcpy(&prev,
                   x->results + (size_t)cmd->slot * CX_RESULT_SLOT_BYTES + (size_t)(i - 1) * 8, 8);
        uint64_t index = kn_scan_key_index(key);
        if (key < KN_SCAN_KEY_REAL_MIN || index >= cmd->records || (i > 0 && key >= prev)) {
            ga__err("scan: inconsistent result from the GPU: key %u of %u is %#" PRIx64
                    " after %" PRIu64 " records",
                    i, k, key, cmd->records);
            res->status = LT_E_GPU_FAULT;
            return;
        }
        hits[i].index = index;
        hits[i].score_bits = lt_f32_to_bits(kn_scan_key_score((uint32_t)(key >> 32)));
    }
    if (real > 0) {
        s->best_index = hits[0].index;
        s->best_score_bits = hits[0].score_bits;
    }
    /* Through the lease's host mapping (PINNED, MAPPED and STAGED alike),
     * before the result goes to the server, which only then sends the
     * COMPLETION. */
    /* Into the client's words area (cmd->w.hits: the agent's own memory), a
     * ring's words lease (hits_host) or, before LT_CAP_WORDS, the lease; the
     * last two are a peer's memory, which the server admitted only where the
     * agent maps it writable (docs/reliability.md): guarded against SIGBUS. */
    unsigned char *to = cmd->hits_host ? cmd->hits_host
                        : cmd->w.hits  ? cmd->w.hits
                        : cmd->w.host  ? cmd->w.host + a->hits_offset
                                       : NULL;
    if (a->k && to && base_guard_copy(to, hits, (size_t)a->k * sizeof hits[0]) < 0) {
        memset(&res->result, 0, sizeof res->result);
        res->status = LT_E_SEGMENT_GONE;
        return;
    }
    res->status = LT_OK;
}

void cx__op_result(const struct cx *x, const struct cx_cmd *cmd, struct ga_exec_result *res)
{
    if (cmd->w.op == GA_EXEC_OP_LAUNCH) {
        cx__launch_result(x, cmd, res);
        return;
    }
    memset(res, 0, sizeof *res);
    if (cmd->cancelled) {
        res->status = LT_E_SHUTTING_DOWN;
        return;
    }
    if (cmd->forced) {
        res->status = LT_E_BUSY; /* the agent released its wait (cx__retire_release) */
        return;
    }
    if (cmd->rc < 0) {
        res->status = cmd->rc == -EIO ? LT_E_GPU_FAULT : LT_E_SYSTEM;
        return;
    }
    if (cx__pieces_gone(cmd)) {
        res->status = LT_E_SEGMENT_GONE;
        return;
    }
    switch (cmd->w.op) {
    case LT_OP_CHECKSUM_VERIFY:
        cx__checksum_result(x, cmd, res);
        break;
    case LT_OP_VECTOR_SCAN:
        cx__scan_result(x, cmd, res);
        break;
    case LT_OP_COPY_H2D:
        res->result.copy.bytes_copied = cmd->w.args.copy.length;
        res->status = LT_OK;
        break;
    default:
        res->status = LT_E_BAD_OP;
        break;
    }
}
