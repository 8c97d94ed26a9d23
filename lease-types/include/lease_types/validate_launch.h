/* lease-types: the validators of LAUNCH and LAUNCH_COMPLETION (protocol
 * 1.2, proto_launch.h). Same rules as every validator in validate.h, which
 * includes this (include validate.h, not this): nothing trusted, every
 * field checked, no byte at or past @len read. What only the agent can know
 * (the lease, its length, the kernel and its descriptor) is the agent's. */
#ifndef LEASE_TYPES_VALIDATE_LAUNCH_H
#define LEASE_TYPES_VALIDATE_LAUNCH_H

#ifndef LEASE_TYPES_VALIDATE_H
#error "include lease_types/validate.h"
#endif

LT_STATIC_ASSERT(offsetof(struct lt_msg_launch, arg_words) == 24,
                 "LAUNCH keeps its argument word count where batches keep their count");

/* 1 when [a, a + al) and [b, b + bl) overlap (no sum wraps: validated ranges). */
static inline int lt__ranges_overlap(uint64_t a, uint64_t al, uint64_t b, uint64_t bl)
{
    return a < b + bl && b < a + al;
}

/* LAUNCH: arg_words 0..128 matching the length, known flags, reserved zero,
 * image and kernel valid names, grid and block dimensions nonzero with at
 * most LT_LAUNCH_BLOCK_THREADS threads a block (BAD_VALUE), result_bytes
 * within LT_LAUNCH_RESULT_MAX (BAD_VALUE), a usable stream (BAD_ID),
 * lease_count 1..LT_LAUNCH_MAX_LEASES (BAD_VALUE); per used range an issued
 * lease (BAD_ID), a nonzero non-wrapping range within LT_SEGMENT_SIZE_MAX,
 * known flags, reserved zero; unused ranges all zero (RESERVED_NONZERO); a
 * writable range overlapping another range of the same lease (BAD_VALUE:
 * its copy-back would race the other). The argument block is any bytes:
 * its layout is the kernel's descriptor's, checked by the agent. */
static inline enum lt_error lt_validate_launch(const void *buf, size_t len)
{
    const struct lt_msg_launch *m = (const struct lt_msg_launch *)buf;
    enum lt_error e = lt__frame(buf, len, LT_MSG_LAUNCH, LT_MSG_LAUNCH);
    uint64_t threads = 1;
    if (e != LT_OK)
        return e;
    if ((m->flags & ~LT_LAUNCH_F_KNOWN) != 0)
        return LT_E_UNKNOWN_FLAGS;
    if (m->reserved != 0)
        return LT_E_RESERVED_NONZERO;
    if ((e = lt_name_check(m->image, LT_LAUNCH_IMAGE_LEN)) != LT_OK ||
        (e = lt_name_check(m->kernel, LT_LAUNCH_KERNEL_LEN)) != LT_OK)
        return e;
    for (int d = 0; d < 3; d++) {
        if (m->grid[d] == 0 || m->block[d] == 0)
            return LT_E_BAD_VALUE;
        threads *= m->block[d];
    }
    if (threads > LT_LAUNCH_BLOCK_THREADS || m->result_bytes > LT_LAUNCH_RESULT_MAX)
        return LT_E_BAD_VALUE;
    if (!lt_stream_id_is_usable(m->stream))
        return LT_E_BAD_ID;
    if (m->lease_count == 0 || m->lease_count > LT_LAUNCH_MAX_LEASES)
        return LT_E_BAD_VALUE;
    for (uint32_t k = 0; k < LT_LAUNCH_MAX_LEASES; k++) {
        const struct lt_launch_lease *l = &m->leases[k];
        if (k >= m->lease_count) {
            if (!lt_bytes_all_zero(l, sizeof *l))
                return LT_E_RESERVED_NONZERO;
            continue;
        }
        if (!lt_lease_id_is_issued(l->lease))
            return LT_E_BAD_ID;
        if ((e = lt_range_check(l->offset, l->length, LT_SEGMENT_SIZE_MAX)) != LT_OK)
            return e;
        if ((l->flags & ~LT_LAUNCH_LEASE_F_KNOWN) != 0)
            return LT_E_UNKNOWN_FLAGS;
        if (l->reserved != 0)
            return LT_E_RESERVED_NONZERO;
    }
    for (uint32_t k = 0; k < m->lease_count; k++)
        for (uint32_t j = 0; j < k; j++) {
            const struct lt_launch_lease *a = &m->leases[j], *b = &m->leases[k];
            if (lt_lease_id_eq(a->lease, b->lease) &&
                ((a->flags | b->flags) & LT_LAUNCH_LEASE_F_WRITE) &&
                lt__ranges_overlap(a->offset, a->length, b->offset, b->length))
                return LT_E_BAD_VALUE;
        }
    return LT_OK;
}

/* LAUNCH_COMPLETION: a known status, result_bytes within
 * LT_LAUNCH_RESULT_MAX and zero unless LT_OK, the result zero past
 * result_bytes (RESERVED_NONZERO); with LT_OK the message all zero and
 * arg_index LT_INDEX_NONE, else a valid message; arg_index LT_INDEX_NONE
 * or below LT_LAUNCH_PARAMS_MAX (BAD_VALUE); cu_error all zero when detail
 * is 0, else a valid name. elapsed_ns is any value. */
static inline enum lt_error lt_validate_launch_completion(const void *buf, size_t len)
{
    const struct lt_msg_launch_completion *m = (const struct lt_msg_launch_completion *)buf;
    enum lt_error e = lt__frame(buf, len, LT_MSG_LAUNCH_COMPLETION, LT_MSG_LAUNCH_COMPLETION);
    if (e != LT_OK)
        return e;
    if (!lt_error_is_known(m->status))
        return LT_E_BAD_VALUE;
    if (m->result_bytes > LT_LAUNCH_RESULT_MAX ||
        (m->arg_index != LT_INDEX_NONE && m->arg_index >= LT_LAUNCH_PARAMS_MAX))
        return LT_E_BAD_VALUE;
    if (!lt_bytes_all_zero(m->result + m->result_bytes, LT_LAUNCH_RESULT_MAX - m->result_bytes))
        return LT_E_RESERVED_NONZERO;
    if (m->status == LT_OK) {
        if (m->arg_index != LT_INDEX_NONE)
            return LT_E_BAD_VALUE;
        if (!lt_bytes_all_zero(m->message, sizeof m->message))
            return LT_E_RESERVED_NONZERO;
    } else {
        if (m->result_bytes != 0)
            return LT_E_RESERVED_NONZERO;
        if ((e = lt_name_check(m->message, LT_ERROR_MSG_LEN)) != LT_OK)
            return e;
    }
    if (m->detail == 0)
        return lt_bytes_all_zero(m->cu_error, sizeof m->cu_error) ? LT_OK : LT_E_RESERVED_NONZERO;
    return lt_name_check(m->cu_error, LT_LAUNCH_CU_ERROR_LEN);
}

#endif /* LEASE_TYPES_VALIDATE_LAUNCH_H */
