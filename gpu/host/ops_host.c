/* The host backend's ops: the C reference kernels (kernels/ref) run on the
 * calling worker thread, with a scratch buffer standing in for device
 * memory. They rank and checksum exactly as the GPU kernels do. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/sigbus.h"
#include "host_internal.h"
#include "kernels/blockhash_ref.h"
#include "kernels/scan_ref.h"
#include "lease_types/validate.h"

int hx__op_check(const struct ga_exec_work *w, struct lt_failure *why_p)
{
    /* No kernels here, and no C stand-ins for shipped ones: LT_CAP_LAUNCH is
     * never granted, so only a client that ignored HELLO_REPLY gets here. */
    if (w->op == GA_EXEC_OP_LAUNCH)
        return lt_failure_set(why_p, LT_E_UNSUPPORTED, 0,
                              "LAUNCH: the host backend runs no kernels (it offers no "
                              "LT_CAP_LAUNCH); launch on lease-agent's CUDA backend");
    /* The C reference ranks by dot product only, as the GPU kernels do. */
    if (w->op == LT_OP_VECTOR_SCAN && w->args.scan.metric != LT_SCAN_DOT)
        return lt_failure_set(why_p, LT_E_UNSUPPORTED, 0,
                              "VECTOR_SCAN: metric %u: the host executor scores by dot product "
                              "(LT_SCAN_DOT = %u) only",
                              (unsigned)w->args.scan.metric, (unsigned)LT_SCAN_DOT);
    if (w->op == LT_OP_VECTOR_SCAN && (w->args.scan.dim == 0 || (w->args.scan.elem != LT_ELEM_F32 &&
                                                                 w->args.scan.elem != LT_ELEM_F16)))
        return lt_failure_set(why_p, LT_E_BAD_VALUE, 0,
                              "VECTOR_SCAN: expected dim >= 1 and elem f32 or f16, found dim %u "
                              "elem %u",
                              (unsigned)w->args.scan.dim, (unsigned)w->args.scan.elem);
    if (w->op != LT_OP_CHECKSUM_VERIFY && w->op != LT_OP_COPY_H2D && w->op != LT_OP_VECTOR_SCAN)
        return lt_failure_set(why_p, LT_E_BAD_OP, 0, "submit: op %u is not defined",
                              (unsigned)w->op);
    return 0;
}

static void hx__checksum(const struct ga_exec_work *w, struct ga_exec_result *r)
{
    const struct lt_op_checksum_verify *a = &w->args.checksum;
    const unsigned char *data = w->host + a->offset;
    /* The server checked that the sums are 8-aligned in this process. */
    const uint64_t *sums = (const uint64_t *)(const void *)(w->host + a->sums_offset);
    struct lt_checksum_result *c = &r->result.checksum;
    c->blocks_checked = kr_block_count((size_t)a->length, a->block_size);
    c->first_bad_block = LT_BLOCK_NONE;
    long first = kr_block_verify(data, (size_t)a->length, a->block_size, sums);
    if (first == -1) {
        r->status = LT_OK;
        return;
    }
    if (first < 0) {
        r->status = LT_E_BAD_VALUE;
        return;
    }
    uint64_t b = (uint64_t)first;
    uint64_t off = b * a->block_size;
    size_t len = (size_t)(a->length - off < a->block_size ? a->length - off : a->block_size);
    c->first_bad_block = b;
    c->expected = sums[b];
    c->actual = kr_block_checksum(data + off, len);
    c->bad_blocks = 1;
    for (b++, off += a->block_size; off < a->length; b++, off += a->block_size) {
        len = (size_t)(a->length - off < a->block_size ? a->length - off : a->block_size);
        if (kr_block_checksum(data + off, len) != sums[b])
            c->bad_blocks++;
    }
    r->status = LT_E_CHECKSUM_MISMATCH;
}

LT_STATIC_ASSERT(LT_SCAN_MAX_K == KN_SCAN_MAX_K, "the protocol's top-k limit is the kernels'");

/* The best records by dot product, from the C reference (kr_scan_topk with
 * the op's k, 1 when 0): the same ranking as the GPU's scan kernels. The
 * query is stored in the records' element type; it is widened into @q
 * (dim floats) first. With k > 0 the k hits go to w->hits, or to the lease
 * at hits_offset (the server checked the range and alignment), before the
 * result is returned. */
static void hx__scan(const struct ga_exec_work *w, float *q, struct ga_exec_result *r)
{
    const struct lt_op_vector_scan *a = &w->args.scan;
    struct lt_scan_result *s = &r->result.scan;
    const uint32_t es = a->elem == LT_ELEM_F16 ? 2u : 4u;
    const uint64_t n = a->length / ((uint64_t)a->dim * es);
    const unsigned char *qb = w->host + a->query_offset;
    for (uint32_t i = 0; i < a->dim; i++) {
        if (a->elem == LT_ELEM_F16) {
            uint16_t h;
            memcpy(&h, qb + 2 * (size_t)i, 2);
            q[i] = kn_f16_to_f32(h);
        } else {
            memcpy(&q[i], qb + 4 * (size_t)i, 4);
        }
    }
    const uint32_t k = a->k ? a->k : 1;
    struct kn_scan_hit hits[KN_SCAN_MAX_K];
    long got = n ? kr_scan_topk(w->host + a->offset, a->elem, n, a->dim, q, k, hits) : 0;
    if (got < 0) {
        r->status = LT_E_BAD_VALUE;
        return;
    }
    s->records_scanned = n;
    s->best_index = LT_BLOCK_NONE;
    if (got >= 1) {
        s->best_index = hits[0].index;
        memcpy(&s->best_score_bits, &hits[0].score, 4);
    }
    for (uint32_t i = 0; a->k && i < a->k; i++) {
        struct lt_scan_hit h = {.index = LT_BLOCK_NONE};
        if (i < (uint64_t)got) {
            memcpy(&h.score_bits, &hits[i].score, 4);
            h.index = hits[i].index;
        }
        memcpy((w->hits ? w->hits : w->host + a->hits_offset) + (size_t)i * sizeof h, &h,
               sizeof h);
    }
    r->status = LT_OK;
}

/* COPY_H2D: the bytes go through the scratch buffer, as a copy to device
 * memory would, in scratch-sized parts. */
static void hx__copy(const struct ga_exec_work *w, unsigned char *scratch, uint64_t scratch_bytes,
                     struct ga_exec_result *r)
{
    const struct lt_op_copy_h2d *a = &w->args.copy;
    for (uint64_t done = 0; done < a->length;) {
        uint64_t n = a->length - done < scratch_bytes ? a->length - done : scratch_bytes;
        memcpy(scratch, w->host + a->offset + done, (size_t)n);
        done += n;
    }
    r->result.copy.bytes_copied = a->length;
    r->status = LT_OK;
}

struct hx__op {
    const struct ga_exec_work *w;
    unsigned char *scratch;
    uint64_t scratch_bytes;
    float *q;
    struct ga_exec_result *r;
};

/* The op itself, run under the SIGBUS guard: it only reads and writes
 * memory, so abandoning it half-way leaves nothing behind. */
static void hx__op_guarded(void *arg)
{
    struct hx__op *o = arg;
    switch (o->w->op) {
    case LT_OP_CHECKSUM_VERIFY:
        hx__checksum(o->w, o->r);
        break;
    case LT_OP_COPY_H2D:
        hx__copy(o->w, o->scratch, o->scratch_bytes, o->r);
        break;
    case LT_OP_VECTOR_SCAN:
        hx__scan(o->w, o->q, o->r);
        break;
    default:
        o->r->status = LT_E_UNSUPPORTED; /* refused by hx__op_check; kept for safety */
        break;
    }
}

void hx__op_run(const struct ga_exec_work *w, unsigned char *scratch, uint64_t scratch_bytes,
                struct ga_exec_result *r)
{
    memset(r, 0, sizeof *r);
    struct hx__op o = {.w = w, .scratch = scratch, .scratch_bytes = scratch_bytes, .r = r};
    if (w->op == LT_OP_VECTOR_SCAN) {
        o.q = malloc((size_t)w->args.scan.dim * sizeof(float));
        if (!o.q) {
            r->status = LT_E_SYSTEM;
            return;
        }
    }
    /* The lease is the client's memory: if its pages went (a hole punched
     * in a segment that could be punched), this op fails, not the agent. */
    if (base_guard_run(w->host, (size_t)w->length, hx__op_guarded, &o) == -EFAULT) {
        memset(r, 0, sizeof *r);
        r->status = LT_E_SEGMENT_GONE;
    }
    free(o.q);
    /* As cuStreamWriteValue64 after the op: the done word says "ran". */
    if (w->done.host && base_guard_store_u64(w->done.host, w->done.seq) < 0)
        r->status = LT_E_SEGMENT_GONE;
}
