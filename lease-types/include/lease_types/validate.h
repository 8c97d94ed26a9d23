/* lease-types: validators for every v1 message.
 *
 * Each takes the bytes exactly as received and their count. It trusts
 * nothing inside: the header's length must equal @len, a batch's count is
 * checked against the protocol maximum before the length it implies, and no
 * byte at or past @len is ever read. Every field is checked: enums in range,
 * reserved and unused fields zero, flags only known bits, names terminated
 * inside their array and zero after, ranges nonempty and free of overflow.
 * The first problem found is returned as a precise enum lt_error (LT_OK when
 * none); map it to -errno with lt_error_errno() at an API edge.
 *
 * @buf must be 8-byte aligned (LT_E_UNALIGNED otherwise); union lt_msg_buffer
 * and malloc both are. What a validator cannot know (does the segment exist,
 * is the range inside it, does this client own the lease) is the agent's to
 * check, with the service codes of errors.h. */
#ifndef LEASE_TYPES_VALIDATE_H
#define LEASE_TYPES_VALIDATE_H

#include "lease_types/proto.h"

LT_EXTERN_C_BEGIN

/* ---- Field checks, shared with the agent's own range checks ---- */

/* LT_OK when [offset, offset + length) is nonempty and ends at or before
 * @limit; LT_E_ZERO_LENGTH, LT_E_RANGE_OVERFLOW (the sum wraps) or
 * LT_E_OUT_OF_RANGE otherwise. */
static inline enum lt_error lt_range_check(uint64_t offset, uint64_t length, uint64_t limit)
{
    uint64_t end;
    if (length == 0)
        return LT_E_ZERO_LENGTH;
    if (lt_u64_add_checked(offset, length, &end) != 0)
        return LT_E_RANGE_OVERFLOW;
    if (end > limit)
        return LT_E_OUT_OF_RANGE;
    return LT_OK;
}

/* LT_OK when the @cap-byte array @name holds 1..cap-1 printable ASCII bytes,
 * a NUL, and zeros to the end; LT_E_NAME_BAD_CHAR, LT_E_NAME_UNTERMINATED,
 * LT_E_NAME_EMPTY or LT_E_NAME_PADDING otherwise. Reads only name[0..cap). */
static inline enum lt_error lt_name_check(const char *name, size_t cap)
{
    const unsigned char *p = (const unsigned char *)name;
    size_t n = 0;
    while (n < cap && p[n] != 0) {
        if (p[n] < 0x20 || p[n] > 0x7e)
            return LT_E_NAME_BAD_CHAR;
        n++;
    }
    if (n == cap)
        return LT_E_NAME_UNTERMINATED;
    if (n == 0)
        return LT_E_NAME_EMPTY;
    if (!lt_bytes_all_zero(p + n + 1, cap - n - 1))
        return LT_E_NAME_PADDING;
    return LT_OK;
}

/* LT_OK when @count keys of @key_size (4 or 8) bytes, @stride bytes apart
 * from @base, are pairwise distinct and nonzero (the callers check nonzero
 * first); LT_E_DUPLICATE_ID otherwise. At most LT_MAX_BATCH keys. Open
 * addressing on the stack keeps it linear for a full batch. */
static inline enum lt_error lt__keys_unique(const void *base, size_t stride, size_t key_size,
                                            uint32_t count)
{
    uint64_t table[2 * LT_MAX_BATCH]; /* 0 = empty slot */
    const unsigned char *p = (const unsigned char *)base;
    if (count > LT_MAX_BATCH)
        return LT_E_BATCH_TOO_LARGE;
    for (size_t s = 0; s < 2 * LT_MAX_BATCH; s++)
        table[s] = 0;
    for (uint32_t k = 0; k < count; k++) {
        const unsigned char *at = p + (size_t)k * stride;
        uint64_t key = key_size == 4 ? *(const uint32_t *)(const void *)at
                                     : *(const uint64_t *)(const void *)at;
        size_t s = (size_t)((key * 0x9e3779b97f4a7c15ull) >> 55); /* 9 bits: 512 slots */
        while (table[s] != 0) {
            if (table[s] == key)
                return LT_E_DUPLICATE_ID;
            s = (s + 1) % (2 * LT_MAX_BATCH);
        }
        table[s] = key;
    }
    return LT_OK;
}
LT_STATIC_ASSERT(2 * LT_MAX_BATCH == 512, "lt__keys_unique hashes to 9 bits");

/* ---- Framing ---- */

/* What every message shares: at least a header, an aligned buffer, magic,
 * version, header length equal to @len, a type defined in v1, no header
 * flags, zero reserved, and a nonzero request id (ERROR may carry 0). */
static inline enum lt_error lt_validate_header(const void *buf, size_t len)
{
    const struct lt_header *h;
    if (len < sizeof(struct lt_header))
        return LT_E_TRUNCATED;
    if ((uintptr_t)buf % LT_MSG_ALIGN != 0)
        return LT_E_UNALIGNED;
    h = (const struct lt_header *)buf;
    if (h->magic != LT_MAGIC)
        return LT_E_BAD_MAGIC;
    if (h->version != LT_PROTO_VERSION)
        return LT_E_BAD_VERSION;
    if (h->length != len)
        return LT_E_LENGTH_MISMATCH;
    if (!lt_msg_type_is_known(h->type))
        return LT_E_UNKNOWN_TYPE;
    if ((h->flags & ~LT_HDR_FLAGS_KNOWN) != 0)
        return LT_E_UNKNOWN_FLAGS;
    if (h->reserved != 0)
        return LT_E_RESERVED_NONZERO;
    if (h->request_id == 0 && h->type != LT_MSG_ERROR)
        return LT_E_BAD_REQUEST_ID;
    return LT_OK;
}

/* The header, a type within [@lo, @hi], and @len exactly what the type and
 * (for batches) its count require. */
static inline enum lt_error lt__frame(const void *buf, size_t len, uint32_t lo, uint32_t hi)
{
    enum lt_error e = lt_validate_header(buf, len);
    const struct lt_header *h = (const struct lt_header *)buf;
    struct lt_msg_info i;
    uint32_t count;
    size_t body;
    if (e != LT_OK)
        return e;
    if (h->type < lo || h->type > hi)
        return LT_E_WRONG_TYPE;
    i = lt_msg_info(h->type);
    if (len < i.fixed)
        return LT_E_BAD_LENGTH;
    if (i.entry == 0)
        return len == i.fixed ? LT_OK : LT_E_BAD_LENGTH;
    count = *(const uint32_t *)(const void *)((const unsigned char *)buf + 24);
    if (count > i.max_count)
        return LT_E_BATCH_TOO_LARGE;
    if (count < i.min_count)
        return LT_E_BATCH_EMPTY;
    if (lt_size_mul_checked(count, i.entry, &body) != 0 || body != len - i.fixed)
        return LT_E_BAD_LENGTH;
    return LT_OK;
}
LT_STATIC_ASSERT(offsetof(struct lt_msg_lease_request, count) == 24 &&
                     offsetof(struct lt_msg_lease_grant, count) == 24 &&
                     offsetof(struct lt_msg_lease_release, count) == 24 &&
                     offsetof(struct lt_msg_stats_reply, client_count) == 24 &&
                     offsetof(struct lt_msg_release_complete_batch, count) == 24 &&
                     offsetof(struct lt_msg_lease_list_reply, count) == 24 &&
                     offsetof(struct lt_msg_segment_list_reply, count) == 24,
                 "every batch keeps its count at offset 24");

/* ---- The words area (LT_CAP_WORDS) ---- */

/* WORDS_REQUEST: bytes a nonzero multiple of 4096 up to LT_WORDS_MAX_BYTES. */
static inline enum lt_error lt_validate_words_request(const void *buf, size_t len)
{
    const struct lt_msg_words_request *m = (const struct lt_msg_words_request *)buf;
    enum lt_error e = lt__frame(buf, len, LT_MSG_WORDS_REQUEST, LT_MSG_WORDS_REQUEST);
    if (e != LT_OK)
        return e;
    if (m->reserved != 0)
        return LT_E_RESERVED_NONZERO;
    if (m->bytes == 0)
        return LT_E_ZERO_LENGTH;
    if (m->bytes % 4096u != 0)
        return LT_E_MISALIGNED;
    if (m->bytes > LT_WORDS_MAX_BYTES)
        return LT_E_OUT_OF_RANGE;
    return LT_OK;
}

/* WORDS_GRANT: an issued segment id, a size a WORDS_REQUEST may ask. */
static inline enum lt_error lt_validate_words_grant(const void *buf, size_t len)
{
    const struct lt_msg_words_grant *m = (const struct lt_msg_words_grant *)buf;
    enum lt_error e = lt__frame(buf, len, LT_MSG_WORDS_GRANT, LT_MSG_WORDS_GRANT);
    if (e != LT_OK)
        return e;
    if (m->reserved != 0)
        return LT_E_RESERVED_NONZERO;
    if (m->segment.gen == 0)
        return LT_E_BAD_ID;
    if (m->size == 0)
        return LT_E_ZERO_LENGTH;
    if (m->size % 4096u != 0)
        return LT_E_MISALIGNED;
    if (m->size > LT_WORDS_MAX_BYTES)
        return LT_E_OUT_OF_RANGE;
    return LT_OK;
}

/* ---- Handshake ---- */

/* HELLO: versions 1 <= min <= max with min <= LT_PROTO_VERSION (BAD_VERSION),
 * no agent-only cap (bits this version does not know are allowed: they are
 * never granted), a valid name. */
static inline enum lt_error lt_validate_hello(const void *buf, size_t len)
{
    const struct lt_msg_hello *m = (const struct lt_msg_hello *)buf;
    enum lt_error e = lt__frame(buf, len, LT_MSG_HELLO, LT_MSG_HELLO);
    if (e != LT_OK)
        return e;
    if (m->version_min == 0 || m->version_min > m->version_max || m->version_min > LT_PROTO_VERSION)
        return LT_E_BAD_VERSION;
    if ((m->caps & LT_CAP_AGENT_ONLY) != 0)
        return LT_E_UNKNOWN_FLAGS;
    return lt_name_check(m->name, LT_NAME_LEN);
}

/* HELLO_REPLY: version LT_PROTO_VERSION, caps within LT_CAP_AGENT_KNOWN,
 * nonzero client id, max_lease_batch 1..LT_MAX_BATCH, max_segment_bytes a
 * nonzero page multiple within LT_SEGMENT_SIZE_MAX, class_budget[0] zero. */
static inline enum lt_error lt_validate_hello_reply(const void *buf, size_t len)
{
    const struct lt_msg_hello_reply *m = (const struct lt_msg_hello_reply *)buf;
    enum lt_error e = lt__frame(buf, len, LT_MSG_HELLO_REPLY, LT_MSG_HELLO_REPLY);
    if (e != LT_OK)
        return e;
    if (m->version != LT_PROTO_VERSION)
        return LT_E_BAD_VERSION;
    if (m->reserved0 != 0 || m->reserved1 != 0)
        return LT_E_RESERVED_NONZERO;
    if ((m->caps & ~LT_CAP_AGENT_KNOWN) != 0)
        return LT_E_UNKNOWN_FLAGS;
    if (m->client_id == 0)
        return LT_E_BAD_ID;
    if (m->max_lease_batch == 0 || m->max_lease_batch > LT_MAX_BATCH)
        return LT_E_BAD_VALUE;
    if (m->max_segment_bytes == 0)
        return LT_E_ZERO_LENGTH;
    if (m->max_segment_bytes % LT_SEGMENT_ALIGN != 0)
        return LT_E_MISALIGNED;
    if (m->max_segment_bytes > LT_SEGMENT_SIZE_MAX)
        return LT_E_OUT_OF_RANGE;
    if (m->class_budget[LT_CLASS_INVALID] != 0)
        return LT_E_RESERVED_NONZERO;
    return lt_name_check(m->agent_name, LT_NAME_LEN);
}

/* ---- Segments ---- */

/* A segment size: nonzero, an LT_SEGMENT_ALIGN multiple, <= LT_SEGMENT_SIZE_MAX. */
static inline enum lt_error lt_segment_size_check(uint64_t size)
{
    if (size == 0)
        return LT_E_ZERO_LENGTH;
    if (size % LT_SEGMENT_ALIGN != 0)
        return LT_E_MISALIGNED;
    if (size > LT_SEGMENT_SIZE_MAX)
        return LT_E_OUT_OF_RANGE;
    return LT_OK;
}

/* SEGMENT_OFFER: a valid size and class, reserved zero. The fd is checked
 * with lt_validate_fd_count() and by the agent (seals, size). */
static inline enum lt_error lt_validate_segment_offer(const void *buf, size_t len)
{
    const struct lt_msg_segment_offer *m = (const struct lt_msg_segment_offer *)buf;
    enum lt_error e = lt__frame(buf, len, LT_MSG_SEGMENT_OFFER, LT_MSG_SEGMENT_OFFER);
    if (e != LT_OK)
        return e;
    if ((e = lt_segment_size_check(m->size)) != LT_OK)
        return e;
    if (!lt_class_is_valid(m->mem_class))
        return LT_E_BAD_CLASS;
    if (m->reserved != 0)
        return LT_E_RESERVED_NONZERO;
    return LT_OK;
}

/* SEGMENT_ACCEPT: an issued segment id, a valid size and class, reserved zero. */
static inline enum lt_error lt_validate_segment_accept(const void *buf, size_t len)
{
    const struct lt_msg_segment_accept *m = (const struct lt_msg_segment_accept *)buf;
    enum lt_error e = lt__frame(buf, len, LT_MSG_SEGMENT_ACCEPT, LT_MSG_SEGMENT_ACCEPT);
    if (e != LT_OK)
        return e;
    if (!lt_segment_id_is_issued(m->segment))
        return LT_E_BAD_ID;
    if ((e = lt_segment_size_check(m->size)) != LT_OK)
        return e;
    if (!lt_class_is_valid(m->mem_class))
        return LT_E_BAD_CLASS;
    if (m->reserved != 0)
        return LT_E_RESERVED_NONZERO;
    return LT_OK;
}

/* SEGMENT_RETIRE: an issued segment id. */
static inline enum lt_error lt_validate_segment_retire(const void *buf, size_t len)
{
    const struct lt_msg_segment_retire *m = (const struct lt_msg_segment_retire *)buf;
    enum lt_error e = lt__frame(buf, len, LT_MSG_SEGMENT_RETIRE, LT_MSG_SEGMENT_RETIRE);
    if (e != LT_OK)
        return e;
    return lt_segment_id_is_issued(m->segment) ? LT_OK : LT_E_BAD_ID;
}

/* SEGMENT_RETIRED: an issued segment id; the cookie is any value. */
static inline enum lt_error lt_validate_segment_retired(const void *buf, size_t len)
{
    const struct lt_msg_segment_retired *m = (const struct lt_msg_segment_retired *)buf;
    enum lt_error e = lt__frame(buf, len, LT_MSG_SEGMENT_RETIRED, LT_MSG_SEGMENT_RETIRED);
    if (e != LT_OK)
        return e;
    return lt_segment_id_is_issued(m->segment) ? LT_OK : LT_E_BAD_ID;
}

/* ---- Leases ---- */

/* LEASE_REQUEST: count 1..LT_MAX_BATCH matching the length, known request
 * flags; per entry an issued segment id, a valid class, known flags, a
 * nonzero non-wrapping range within LT_SEGMENT_SIZE_MAX. */
static inline enum lt_error lt_validate_lease_request(const void *buf, size_t len)
{
    const struct lt_msg_lease_request *m = (const struct lt_msg_lease_request *)buf;
    enum lt_error e = lt__frame(buf, len, LT_MSG_LEASE_REQUEST, LT_MSG_LEASE_REQUEST);
    if (e != LT_OK)
        return e;
    if ((m->flags & ~LT_LEASE_REQ_F_KNOWN) != 0)
        return LT_E_UNKNOWN_FLAGS;
    for (uint32_t k = 0; k < m->count; k++) {
        const struct lt_lease_req_entry *en = &m->entries[k];
        if (!lt_segment_id_is_issued(en->segment))
            return LT_E_BAD_ID;
        if ((e = lt_range_check(en->offset, en->length, LT_SEGMENT_SIZE_MAX)) != LT_OK)
            return e;
        if (!lt_class_is_valid(en->mem_class))
            return LT_E_BAD_CLASS;
        if ((en->flags & ~LT_LEASE_F_KNOWN) != 0)
            return LT_E_UNKNOWN_FLAGS;
    }
    return LT_OK;
}

/* LEASE_GRANT: count 1..LT_MAX_BATCH matching the length, reserved zero; per
 * entry a known status; LT_OK entries carry an issued lease id and a valid
 * class, refused ones a zero id and class. */
static inline enum lt_error lt_validate_lease_grant(const void *buf, size_t len)
{
    const struct lt_msg_lease_grant *m = (const struct lt_msg_lease_grant *)buf;
    enum lt_error e = lt__frame(buf, len, LT_MSG_LEASE_GRANT, LT_MSG_LEASE_GRANT);
    if (e != LT_OK)
        return e;
    if (m->reserved != 0)
        return LT_E_RESERVED_NONZERO;
    for (uint32_t k = 0; k < m->count; k++) {
        const struct lt_lease_grant_entry *en = &m->entries[k];
        if (!lt_error_is_known(en->status))
            return LT_E_BAD_VALUE;
        if (en->status == LT_OK) {
            if (!lt_lease_id_is_issued(en->lease))
                return LT_E_BAD_ID;
            if (!lt_class_is_valid(en->mem_class))
                return LT_E_BAD_CLASS;
        } else if (!lt_lease_id_is_null(en->lease) || en->mem_class != 0) {
            return LT_E_RESERVED_NONZERO;
        }
    }
    return LT_OK;
}

/* LEASE_RELEASE: count 1..LT_MAX_BATCH matching the length, reserved zero,
 * every id issued, no id twice. */
static inline enum lt_error lt_validate_lease_release(const void *buf, size_t len)
{
    const struct lt_msg_lease_release *m = (const struct lt_msg_lease_release *)buf;
    enum lt_error e = lt__frame(buf, len, LT_MSG_LEASE_RELEASE, LT_MSG_LEASE_RELEASE);
    if (e != LT_OK)
        return e;
    if (m->reserved != 0)
        return LT_E_RESERVED_NONZERO;
    for (uint32_t k = 0; k < m->count; k++)
        if (!lt_lease_id_is_issued(m->leases[k]))
            return LT_E_BAD_ID;
    return lt__keys_unique(m->leases, sizeof(struct lt_lease_id), 8, m->count);
}

/* RELEASE_COMPLETE: an issued lease id, a known status, reserved zero. */
static inline enum lt_error lt_validate_release_complete(const void *buf, size_t len)
{
    const struct lt_msg_release_complete *m = (const struct lt_msg_release_complete *)buf;
    enum lt_error e = lt__frame(buf, len, LT_MSG_RELEASE_COMPLETE, LT_MSG_RELEASE_COMPLETE);
    if (e != LT_OK)
        return e;
    if (!lt_lease_id_is_issued(m->lease))
        return LT_E_BAD_ID;
    if (!lt_error_is_known(m->status))
        return LT_E_BAD_VALUE;
    if (m->reserved != 0)
        return LT_E_RESERVED_NONZERO;
    return LT_OK;
}

/* RELEASE_COMPLETE_BATCH: count 1..LT_MAX_BATCH matching the length,
 * reserved zero; per entry an issued lease id, a known status, reserved
 * zero; no lease twice. */
static inline enum lt_error lt_validate_release_complete_batch(const void *buf, size_t len)
{
    const struct lt_msg_release_complete_batch *m =
        (const struct lt_msg_release_complete_batch *)buf;
    enum lt_error e =
        lt__frame(buf, len, LT_MSG_RELEASE_COMPLETE_BATCH, LT_MSG_RELEASE_COMPLETE_BATCH);
    if (e != LT_OK)
        return e;
    if (m->reserved != 0)
        return LT_E_RESERVED_NONZERO;
    for (uint32_t k = 0; k < m->count; k++) {
        const struct lt_release_complete_entry *en = &m->entries[k];
        if (!lt_lease_id_is_issued(en->lease))
            return LT_E_BAD_ID;
        if (!lt_error_is_known(en->status))
            return LT_E_BAD_VALUE;
        if (en->reserved != 0)
            return LT_E_RESERVED_NONZERO;
    }
    return lt__keys_unique(m->entries, sizeof(struct lt_release_complete_entry), 8, m->count);
}

/* ---- Work ---- */

/* A doorbell or completion word: when @used, an issued segment, an 8-aligned
 * offset whose word fits below LT_SEGMENT_SIZE_MAX, and a nonzero @seq
 * (words start at 0, so 0 would never wait); when not, all zero. */
static inline enum lt_error lt__word_check(const struct lt_word_ref *w, uint64_t seq, int used)
{
    enum lt_error e;
    if (!used)
        return lt_bytes_all_zero(w, sizeof *w) && seq == 0 ? LT_OK : LT_E_RESERVED_NONZERO;
    if (!lt_segment_id_is_issued(w->segment))
        return LT_E_BAD_ID;
    if ((e = lt_range_check(w->offset, 8, LT_SEGMENT_SIZE_MAX)) != LT_OK)
        return e;
    if (w->offset % 8 != 0)
        return LT_E_MISALIGNED;
    if (seq == 0)
        return LT_E_BAD_VALUE;
    return LT_OK;
}

/* Element bytes of enum lt_elem @elem, 0 when undefined. */
static inline uint32_t lt_elem_size(uint32_t elem)
{
    return elem == LT_ELEM_F32 ? 4u : elem == LT_ELEM_F16 ? 2u : 0u;
}

/* The arguments of @op: LT_E_BAD_OP for an undefined op; bytes past the
 * op's struct and its reserved fields zero; ranges as each op documents in
 * proto.h, checked for overflow before alignment. */
static inline enum lt_error lt_validate_op_args(uint32_t op, const union lt_op_args *a)
{
    enum lt_error e;
    switch (op) {
    case LT_OP_CHECKSUM_VERIFY: {
        const struct lt_op_checksum_verify *c = &a->checksum;
        uint64_t blocks;
        if (!lt_bytes_all_zero(a->bytes + sizeof *c, sizeof *a - sizeof *c) || c->reserved != 0)
            return LT_E_RESERVED_NONZERO;
        if ((e = lt_range_check(c->offset, c->length, LT_SEGMENT_SIZE_MAX)) != LT_OK)
            return e;
        if (c->offset % 8 != 0)
            return LT_E_MISALIGNED;
        if (c->block_size == 0)
            return LT_E_BAD_VALUE;
        if (c->block_size % 8 != 0)
            return LT_E_MISALIGNED;
        /* length <= 2^40 here, so the table's byte count cannot wrap */
        blocks = c->length / c->block_size + (c->length % c->block_size != 0);
        if ((e = lt_range_check(c->sums_offset, blocks * 8, LT_SEGMENT_SIZE_MAX)) != LT_OK)
            return e;
        if (c->sums_offset % 8 != 0)
            return LT_E_MISALIGNED;
        return LT_OK;
    }
    case LT_OP_VECTOR_SCAN: {
        const struct lt_op_vector_scan *s = &a->scan;
        uint32_t es = lt_elem_size(s->elem);
        uint64_t rec;
        if (!lt_bytes_all_zero(a->bytes + sizeof *s, sizeof *a - sizeof *s) || s->reserved != 0)
            return LT_E_RESERVED_NONZERO;
        if (s->k == 0 && s->hits_offset != 0)
            return LT_E_RESERVED_NONZERO;
        if (s->k > LT_SCAN_MAX_K)
            return LT_E_BAD_VALUE;
        if (es == 0 || s->dim == 0 || s->dim > LT_SCAN_DIM_MAX)
            return LT_E_BAD_VALUE;
        if (s->metric != LT_SCAN_DOT && s->metric != LT_SCAN_L2)
            return LT_E_BAD_VALUE;
        rec = (uint64_t)s->dim * es;
        if ((e = lt_range_check(s->offset, s->length, LT_SEGMENT_SIZE_MAX)) != LT_OK)
            return e;
        if (s->offset % es != 0 || s->length % rec != 0)
            return LT_E_MISALIGNED;
        if ((e = lt_range_check(s->query_offset, rec, LT_SEGMENT_SIZE_MAX)) != LT_OK)
            return e;
        if (s->query_offset % es != 0)
            return LT_E_MISALIGNED;
        if (s->k != 0) {
            e = lt_range_check(s->hits_offset, (uint64_t)s->k * sizeof(struct lt_scan_hit),
                               LT_SEGMENT_SIZE_MAX);
            if (e != LT_OK)
                return e;
            if (s->hits_offset % 8 != 0)
                return LT_E_MISALIGNED;
        }
        return LT_OK;
    }
    case LT_OP_COPY_H2D: {
        const struct lt_op_copy_h2d *c = &a->copy;
        if (!lt_bytes_all_zero(a->bytes + sizeof *c, sizeof *a - sizeof *c))
            return LT_E_RESERVED_NONZERO;
        return lt_range_check(c->offset, c->length, LT_SEGMENT_SIZE_MAX);
    }
    default:
        return LT_E_BAD_OP;
    }
}

/* The results of @op, as the agent fills them: bytes past the op's struct
 * and reserved fields zero, indices consistent with their counts. */
static inline enum lt_error lt_validate_op_result(uint32_t op, const union lt_op_result *r)
{
    switch (op) {
    case LT_OP_CHECKSUM_VERIFY: {
        const struct lt_checksum_result *c = &r->checksum;
        if (!lt_bytes_all_zero(r->bytes + sizeof *c, sizeof *r - sizeof *c))
            return LT_E_RESERVED_NONZERO;
        if (c->first_bad_block == LT_BLOCK_NONE) {
            if (c->bad_blocks != 0)
                return LT_E_BAD_VALUE;
            if (c->expected != 0 || c->actual != 0)
                return LT_E_RESERVED_NONZERO;
        } else if (c->first_bad_block >= c->blocks_checked || c->bad_blocks == 0 ||
                   c->bad_blocks > c->blocks_checked) {
            return LT_E_BAD_VALUE;
        }
        return LT_OK;
    }
    case LT_OP_VECTOR_SCAN: {
        const struct lt_scan_result *s = &r->scan;
        if (!lt_bytes_all_zero(r->bytes + sizeof *s, sizeof *r - sizeof *s) || s->reserved != 0)
            return LT_E_RESERVED_NONZERO;
        if (s->records_scanned == 0) {
            if (s->best_index != LT_BLOCK_NONE)
                return LT_E_BAD_VALUE;
            if (s->best_score_bits != 0)
                return LT_E_RESERVED_NONZERO;
        } else if (s->best_index >= s->records_scanned) {
            return LT_E_BAD_VALUE;
        }
        return LT_OK;
    }
    case LT_OP_COPY_H2D: {
        const struct lt_copy_result *c = &r->copy;
        if (!lt_bytes_all_zero(r->bytes + sizeof *c, sizeof *r - sizeof *c))
            return LT_E_RESERVED_NONZERO;
        return LT_OK;
    }
    default:
        return LT_E_BAD_OP;
    }
}

/* SUBMIT: an issued lease, a usable stream, a defined op, known flags,
 * reserved zero, the bell and done words as their flags say, valid args. */
static inline enum lt_error lt_validate_submit(const void *buf, size_t len)
{
    const struct lt_msg_submit *m = (const struct lt_msg_submit *)buf;
    enum lt_error e = lt__frame(buf, len, LT_MSG_SUBMIT, LT_MSG_SUBMIT);
    if (e != LT_OK)
        return e;
    if (!lt_lease_id_is_issued(m->lease) || !lt_stream_id_is_usable(m->stream))
        return LT_E_BAD_ID;
    if (m->op < LT_OP_FIRST || m->op > LT_OP_LAST)
        return LT_E_BAD_OP;
    if (m->reserved0 != 0)
        return LT_E_RESERVED_NONZERO;
    if ((m->flags & ~LT_SUBMIT_F_KNOWN) != 0)
        return LT_E_UNKNOWN_FLAGS;
    if ((e = lt__word_check(&m->bell, m->bell_seq, (m->flags & LT_SUBMIT_F_WAIT_BELL) != 0)) !=
        LT_OK)
        return e;
    if ((e = lt__word_check(&m->done, m->done_seq, (m->flags & LT_SUBMIT_F_SIGNAL_DONE) != 0)) !=
        LT_OK)
        return e;
    return lt_validate_op_args(m->op, &m->args);
}

/* COMPLETION: an issued lease, a defined op, a known status, reserved zero,
 * results valid for the op. detail and elapsed_ns are any value. */
static inline enum lt_error lt_validate_completion(const void *buf, size_t len)
{
    const struct lt_msg_completion *m = (const struct lt_msg_completion *)buf;
    enum lt_error e = lt__frame(buf, len, LT_MSG_COMPLETION, LT_MSG_COMPLETION);
    if (e != LT_OK)
        return e;
    if (!lt_lease_id_is_issued(m->lease))
        return LT_E_BAD_ID;
    if (m->op < LT_OP_FIRST || m->op > LT_OP_LAST)
        return LT_E_BAD_OP;
    if (m->reserved0 != 0 || m->reserved1 != 0)
        return LT_E_RESERVED_NONZERO;
    if (!lt_error_is_known(m->status))
        return LT_E_BAD_VALUE;
    return lt_validate_op_result(m->op, &m->result);
}

/* ---- Streaming rings (1.1, LT_CAP_STREAM) ---- */

/* @count u64 words at @offset: 8-aligned, inside LT_SEGMENT_SIZE_MAX. */
static inline enum lt_error lt__words_check(uint64_t offset, uint32_t count)
{
    enum lt_error e = lt_range_check(offset, 8ull * count, LT_SEGMENT_SIZE_MAX);
    if (e != LT_OK)
        return e;
    return offset % 8 == 0 ? LT_OK : LT_E_MISALIGNED;
}

/* RING_OPEN: two issued leases, not the same one (DUPLICATE_ID); known
 * flags, reserved zero; slot_bytes a nonzero LT_RING_SLOT_ALIGN multiple
 * up to LT_RING_SLOT_BYTES_MAX; nslots 1..LT_RING_SLOTS_MAX and depth
 * 1..LT_RING_DEPTH_MAX (BAD_VALUE); the sequence and done arrays of nslots
 * words each 8-aligned, inside LT_SEGMENT_SIZE_MAX and not overlapping
 * (BAD_VALUE); max_shard_bytes nonzero, at most LT_SEGMENT_SIZE_MAX. */
static inline enum lt_error lt_validate_ring_open(const void *buf, size_t len)
{
    const struct lt_msg_ring_open *m = (const struct lt_msg_ring_open *)buf;
    enum lt_error e = lt__frame(buf, len, LT_MSG_RING_OPEN, LT_MSG_RING_OPEN);
    if (e != LT_OK)
        return e;
    if (!lt_lease_id_is_issued(m->slots) || !lt_lease_id_is_issued(m->words))
        return LT_E_BAD_ID;
    if (lt_lease_id_eq(m->slots, m->words))
        return LT_E_DUPLICATE_ID;
    if ((m->flags & ~LT_RING_OPEN_F_KNOWN) != 0)
        return LT_E_UNKNOWN_FLAGS;
    if (m->reserved != 0)
        return LT_E_RESERVED_NONZERO;
    if (m->slot_bytes == 0)
        return LT_E_ZERO_LENGTH;
    if (m->slot_bytes % LT_RING_SLOT_ALIGN != 0)
        return LT_E_MISALIGNED;
    if (m->slot_bytes > LT_RING_SLOT_BYTES_MAX)
        return LT_E_OUT_OF_RANGE;
    if (m->nslots == 0 || m->nslots > LT_RING_SLOTS_MAX || m->depth == 0 ||
        m->depth > LT_RING_DEPTH_MAX)
        return LT_E_BAD_VALUE;
    if ((e = lt__words_check(m->seq_offset, m->nslots)) != LT_OK ||
        (e = lt__words_check(m->done_offset, m->nslots)) != LT_OK)
        return e;
    /* both arrays end below 2^40 (checked above): the sums cannot wrap */
    if (m->seq_offset < m->done_offset + 8ull * m->nslots &&
        m->done_offset < m->seq_offset + 8ull * m->nslots)
        return LT_E_BAD_VALUE;
    if (m->max_shard_bytes == 0)
        return LT_E_ZERO_LENGTH;
    if (m->max_shard_bytes > LT_SEGMENT_SIZE_MAX)
        return LT_E_OUT_OF_RANGE;
    return LT_OK;
}

/* RING_OPENED: an issued ring; depth 1..LT_RING_DEPTH_MAX and nslots
 * 1..LT_RING_SLOTS_MAX (BAD_VALUE); max_shard_bytes nonzero, at most
 * LT_SEGMENT_SIZE_MAX. */
static inline enum lt_error lt_validate_ring_opened(const void *buf, size_t len)
{
    const struct lt_msg_ring_opened *m = (const struct lt_msg_ring_opened *)buf;
    enum lt_error e = lt__frame(buf, len, LT_MSG_RING_OPENED, LT_MSG_RING_OPENED);
    if (e != LT_OK)
        return e;
    if (!lt_ring_id_is_issued(m->ring))
        return LT_E_BAD_ID;
    if (m->depth == 0 || m->depth > LT_RING_DEPTH_MAX || m->nslots == 0 ||
        m->nslots > LT_RING_SLOTS_MAX)
        return LT_E_BAD_VALUE;
    if (m->max_shard_bytes == 0)
        return LT_E_ZERO_LENGTH;
    if (m->max_shard_bytes > LT_SEGMENT_SIZE_MAX)
        return LT_E_OUT_OF_RANGE;
    return LT_OK;
}

/* RING_SHARD: an issued ring, a nonzero first_seq (BAD_VALUE), a nonzero
 * length within LT_SEGMENT_SIZE_MAX, a defined op, reserved zero, known
 * flags, valid args (as a SUBMIT's, lt_validate_op_args). What the ring
 * knows (the chunk size, the next sequence, the depth, max_shard_bytes,
 * the ranges inside the image and the words lease) is the agent's to
 * check. */
static inline enum lt_error lt_validate_ring_shard(const void *buf, size_t len)
{
    const struct lt_msg_ring_shard *m = (const struct lt_msg_ring_shard *)buf;
    enum lt_error e = lt__frame(buf, len, LT_MSG_RING_SHARD, LT_MSG_RING_SHARD);
    if (e != LT_OK)
        return e;
    if (!lt_ring_id_is_issued(m->ring))
        return LT_E_BAD_ID;
    if (m->first_seq == 0)
        return LT_E_BAD_VALUE;
    if (m->length == 0)
        return LT_E_ZERO_LENGTH;
    if (m->length > LT_SEGMENT_SIZE_MAX)
        return LT_E_OUT_OF_RANGE;
    if (m->op < LT_OP_FIRST || m->op > LT_OP_LAST)
        return LT_E_BAD_OP;
    if (m->reserved0 != 0)
        return LT_E_RESERVED_NONZERO;
    if ((m->flags & ~LT_RING_SHARD_F_KNOWN) != 0)
        return LT_E_UNKNOWN_FLAGS;
    return lt_validate_op_args(m->op, &m->args);
}

/* RING_CLOSE: an issued ring. */
static inline enum lt_error lt_validate_ring_close(const void *buf, size_t len)
{
    const struct lt_msg_ring_close *m = (const struct lt_msg_ring_close *)buf;
    enum lt_error e = lt__frame(buf, len, LT_MSG_RING_CLOSE, LT_MSG_RING_CLOSE);
    if (e != LT_OK)
        return e;
    return lt_ring_id_is_issued(m->ring) ? LT_OK : LT_E_BAD_ID;
}

/* RING_CLOSED: an issued ring; the counters are any value. */
static inline enum lt_error lt_validate_ring_closed(const void *buf, size_t len)
{
    const struct lt_msg_ring_closed *m = (const struct lt_msg_ring_closed *)buf;
    enum lt_error e = lt__frame(buf, len, LT_MSG_RING_CLOSED, LT_MSG_RING_CLOSED);
    if (e != LT_OK)
        return e;
    return lt_ring_id_is_issued(m->ring) ? LT_OK : LT_E_BAD_ID;
}

/* ---- Streams, events, device ---- */

/* STREAM_CREATE .. STREAM_DESTROY: flags known on CREATE and 0 elsewhere,
 * reserved zero; the stream {0, 0} on CREATE, issued on DESTROY (the default
 * stream cannot be destroyed), usable otherwise. */
static inline enum lt_error lt_validate_stream_cmd(const void *buf, size_t len)
{
    const struct lt_msg_stream_cmd *m = (const struct lt_msg_stream_cmd *)buf;
    enum lt_error e = lt__frame(buf, len, LT_MSG_STREAM_CREATE, LT_MSG_STREAM_DESTROY);
    uint16_t t;
    int ok;
    if (e != LT_OK)
        return e;
    t = m->hdr.type;
    if ((m->flags & ~(t == LT_MSG_STREAM_CREATE ? LT_STREAM_F_KNOWN : 0u)) != 0)
        return LT_E_UNKNOWN_FLAGS;
    if (m->reserved != 0)
        return LT_E_RESERVED_NONZERO;
    if (t == LT_MSG_STREAM_CREATE)
        ok = lt_stream_id_is_null(m->stream);
    else if (t == LT_MSG_STREAM_DESTROY)
        ok = lt_stream_id_is_issued(m->stream); /* the default stream cannot be destroyed */
    else
        ok = lt_stream_id_is_usable(m->stream);
    return ok ? LT_OK : LT_E_BAD_ID;
}

/* EVENT_RECORD .. EVENT_ELAPSED, per the table at struct lt_msg_event_cmd:
 * used ids well formed (BAD_ID), unused ids zero (RESERVED_NONZERO), flags
 * only TIMING and only on a RECORD that creates (UNKNOWN_FLAGS). */
static inline enum lt_error lt_validate_event_cmd(const void *buf, size_t len)
{
    const struct lt_msg_event_cmd *m = (const struct lt_msg_event_cmd *)buf;
    enum lt_error e = lt__frame(buf, len, LT_MSG_EVENT_RECORD, LT_MSG_EVENT_ELAPSED);
    uint16_t t;
    uint32_t allowed = 0;
    if (e != LT_OK)
        return e;
    t = m->hdr.type;
    if (t == LT_MSG_EVENT_RECORD && lt_event_id_is_null(m->event))
        allowed = LT_EVENT_F_KNOWN;
    if ((m->flags & ~allowed) != 0)
        return LT_E_UNKNOWN_FLAGS;
    if (m->reserved != 0)
        return LT_E_RESERVED_NONZERO;
    /* RECORD takes {0, 0} (create) or an issued event; the others an issued one */
    if (!lt_event_id_is_issued(m->event) &&
        !(t == LT_MSG_EVENT_RECORD && lt_event_id_is_null(m->event)))
        return LT_E_BAD_ID;
    if (t == LT_MSG_EVENT_ELAPSED) {
        if (!lt_event_id_is_issued(m->end))
            return LT_E_BAD_ID;
    } else if (!lt_event_id_is_null(m->end)) {
        return LT_E_RESERVED_NONZERO;
    }
    if (t == LT_MSG_EVENT_RECORD || t == LT_MSG_EVENT_WAIT) {
        if (!lt_stream_id_is_usable(m->stream))
            return LT_E_BAD_ID;
    } else if (!lt_stream_id_is_null(m->stream)) {
        return LT_E_RESERVED_NONZERO;
    }
    return LT_OK;
}

/* DEVICE_SYNCHRONIZE: the header alone. */
static inline enum lt_error lt_validate_device_sync(const void *buf, size_t len)
{
    return lt__frame(buf, len, LT_MSG_DEVICE_SYNCHRONIZE, LT_MSG_DEVICE_SYNCHRONIZE);
}

/* 1 when @type is a stream, event or device command (answered by CTL_REPLY). */
static inline int lt_msg_type_is_ctl(uint32_t type)
{
    return type >= LT_MSG_STREAM_CREATE && type <= LT_MSG_DEVICE_SYNCHRONIZE;
}

/* CTL_REPLY: request_type a stream, event or device command (BAD_VALUE);
 * ready 0/1 on the queries (BAD_VALUE) and 0 elsewhere; an issued stream on
 * STREAM_CREATE and an issued event on EVENT_RECORD (BAD_ID), zero elsewhere;
 * finite elapsed bits on EVENT_ELAPSED (BAD_VALUE), zero elsewhere; reserved
 * zero. Unused fields give RESERVED_NONZERO. */
static inline enum lt_error lt_validate_ctl_reply(const void *buf, size_t len)
{
    const struct lt_msg_ctl_reply *m = (const struct lt_msg_ctl_reply *)buf;
    enum lt_error e = lt__frame(buf, len, LT_MSG_CTL_REPLY, LT_MSG_CTL_REPLY);
    uint16_t rt;
    if (e != LT_OK)
        return e;
    rt = m->request_type;
    if (!lt_msg_type_is_ctl(rt))
        return LT_E_BAD_VALUE;
    if (m->reserved0 != 0 || m->reserved1 != 0)
        return LT_E_RESERVED_NONZERO;
    if (rt == LT_MSG_STREAM_QUERY || rt == LT_MSG_EVENT_QUERY) {
        if (m->ready > 1)
            return LT_E_BAD_VALUE;
    } else if (m->ready != 0) {
        return LT_E_RESERVED_NONZERO;
    }
    if (rt == LT_MSG_STREAM_CREATE) {
        if (!lt_stream_id_is_issued(m->stream))
            return LT_E_BAD_ID;
    } else if (!lt_stream_id_is_null(m->stream)) {
        return LT_E_RESERVED_NONZERO;
    }
    if (rt == LT_MSG_EVENT_RECORD) {
        if (!lt_event_id_is_issued(m->event))
            return LT_E_BAD_ID;
    } else if (!lt_event_id_is_null(m->event)) {
        return LT_E_RESERVED_NONZERO;
    }
    if (rt == LT_MSG_EVENT_ELAPSED) {
        if (!lt_f32_bits_finite(m->elapsed_ms_bits))
            return LT_E_BAD_VALUE;
    } else if (m->elapsed_ms_bits != 0) {
        return LT_E_RESERVED_NONZERO;
    }
    return LT_OK;
}

/* ---- Stats ---- */

/* STATS_REQUEST: known flags, reserved zero. */
static inline enum lt_error lt_validate_stats_request(const void *buf, size_t len)
{
    const struct lt_msg_stats_request *m = (const struct lt_msg_stats_request *)buf;
    enum lt_error e = lt__frame(buf, len, LT_MSG_STATS_REQUEST, LT_MSG_STATS_REQUEST);
    if (e != LT_OK)
        return e;
    if ((m->flags & ~LT_STATS_F_KNOWN) != 0)
        return LT_E_UNKNOWN_FLAGS;
    if (m->reserved != 0)
        return LT_E_RESERVED_NONZERO;
    return LT_OK;
}

/* STATS_REPLY: client_count 0..LT_MAX_STATS_CLIENTS matching the length,
 * reserved and classes[0] zero; per client a nonzero id (no id twice) and a
 * valid name. Counters are any value. */
static inline enum lt_error lt_validate_stats_reply(const void *buf, size_t len)
{
    const struct lt_msg_stats_reply *m = (const struct lt_msg_stats_reply *)buf;
    enum lt_error e = lt__frame(buf, len, LT_MSG_STATS_REPLY, LT_MSG_STATS_REPLY);
    if (e != LT_OK)
        return e;
    if (m->reserved != 0 || !lt_bytes_all_zero(&m->classes[0], sizeof m->classes[0]))
        return LT_E_RESERVED_NONZERO;
    for (uint32_t k = 0; k < m->client_count; k++) {
        if (m->clients[k].client_id == 0)
            return LT_E_BAD_ID;
        if ((e = lt_name_check(m->clients[k].name, LT_NAME_LEN)) != LT_OK)
            return e;
    }
    return lt__keys_unique(m->clients, sizeof(struct lt_client_stats), 4, m->client_count);
}

/* ---- Introspection (1.4) ---- */

/* LEASE_LIST_REQUEST, SEGMENT_LIST_REQUEST: known flags (none); the client
 * id (0: every client) and the cursor are any value. */
static inline enum lt_error lt_validate_list_request(const void *buf, size_t len)
{
    const struct lt_msg_list_request *m = (const struct lt_msg_list_request *)buf;
    enum lt_error e = lt_validate_header(buf, len);
    uint16_t t;
    if (e != LT_OK)
        return e;
    /* Two types, not a range: the reply between them is not this one's. */
    t = m->hdr.type == LT_MSG_SEGMENT_LIST_REQUEST ? LT_MSG_SEGMENT_LIST_REQUEST
                                                   : LT_MSG_LEASE_LIST_REQUEST;
    if ((e = lt__frame(buf, len, t, t)) != LT_OK)
        return e;
    if ((m->flags & ~LT_LIST_F_KNOWN) != 0)
        return LT_E_UNKNOWN_FLAGS;
    return LT_OK;
}

/* The fixed part both list replies share: known flags, and a next cursor
 * that is nonzero exactly when MORE is set. */
static inline enum lt_error lt__list_reply_check(uint32_t flags, uint64_t next_cursor)
{
    if ((flags & ~LT_LIST_REPLY_F_KNOWN) != 0)
        return LT_E_UNKNOWN_FLAGS;
    if ((flags & LT_LIST_F_MORE) && next_cursor == 0)
        return LT_E_BAD_VALUE;
    if (!(flags & LT_LIST_F_MORE) && next_cursor != 0)
        return LT_E_RESERVED_NONZERO;
    return LT_OK;
}

/* LEASE_LIST_REPLY: count 0..LT_LIST_MAX_ENTRIES matching the length, the
 * fixed part as above; per entry issued lease and segment ids, a nonzero
 * client id, a valid class, a nonzero non-wrapping range within
 * LT_SEGMENT_SIZE_MAX, a known state, reserved zero; no lease twice. */
static inline enum lt_error lt_validate_lease_list_reply(const void *buf, size_t len)
{
    const struct lt_msg_lease_list_reply *m = (const struct lt_msg_lease_list_reply *)buf;
    enum lt_error e = lt__frame(buf, len, LT_MSG_LEASE_LIST_REPLY, LT_MSG_LEASE_LIST_REPLY);
    if (e != LT_OK)
        return e;
    if ((e = lt__list_reply_check(m->flags, m->next_cursor)) != LT_OK)
        return e;
    for (uint32_t k = 0; k < m->count; k++) {
        const struct lt_lease_info *en = &m->entries[k];
        if (!lt_lease_id_is_issued(en->lease) || !lt_segment_id_is_issued(en->segment) ||
            en->client_id == 0)
            return LT_E_BAD_ID;
        if (!lt_class_is_valid(en->mem_class))
            return LT_E_BAD_CLASS;
        if ((e = lt_range_check(en->offset, en->length, LT_SEGMENT_SIZE_MAX)) != LT_OK)
            return e;
        if (en->state != LT_LEASE_STATE_HELD && en->state != LT_LEASE_STATE_RELEASING)
            return LT_E_BAD_VALUE;
        if (en->reserved != 0)
            return LT_E_RESERVED_NONZERO;
    }
    return lt__keys_unique(m->entries, sizeof(struct lt_lease_info), 8, m->count);
}

/* SEGMENT_LIST_REPLY: count 0..LT_LIST_MAX_ENTRIES matching the length,
 * the fixed part as above; per entry an issued segment id, a nonzero
 * client id, a valid class, a valid segment size, known flags, page_kib a
 * power of two of at least 4; no segment twice. */
static inline enum lt_error lt_validate_segment_list_reply(const void *buf, size_t len)
{
    const struct lt_msg_segment_list_reply *m = (const struct lt_msg_segment_list_reply *)buf;
    enum lt_error e = lt__frame(buf, len, LT_MSG_SEGMENT_LIST_REPLY, LT_MSG_SEGMENT_LIST_REPLY);
    if (e != LT_OK)
        return e;
    if ((e = lt__list_reply_check(m->flags, m->next_cursor)) != LT_OK)
        return e;
    for (uint32_t k = 0; k < m->count; k++) {
        const struct lt_segment_info *en = &m->entries[k];
        if (!lt_segment_id_is_issued(en->segment) || en->client_id == 0)
            return LT_E_BAD_ID;
        if (!lt_class_is_valid(en->mem_class))
            return LT_E_BAD_CLASS;
        if ((e = lt_segment_size_check(en->size)) != LT_OK)
            return e;
        if ((en->flags & ~LT_SEGMENT_INFO_F_KNOWN) != 0)
            return LT_E_UNKNOWN_FLAGS;
        if (en->page_kib < 4 || (en->page_kib & (en->page_kib - 1)) != 0)
            return LT_E_BAD_VALUE;
    }
    return lt__keys_unique(m->entries, sizeof(struct lt_segment_info), 8, m->count);
}

/* ---- Errors ---- */

/* ERROR: a known code other than LT_OK, err in -4095..-1, reserved zero,
 * index below LT_MAX_BATCH or LT_INDEX_NONE, a valid message. failed_type
 * is any value (it echoes what arrived). */
static inline enum lt_error lt_validate_error(const void *buf, size_t len)
{
    const struct lt_msg_error *m = (const struct lt_msg_error *)buf;
    enum lt_error e = lt__frame(buf, len, LT_MSG_ERROR, LT_MSG_ERROR);
    if (e != LT_OK)
        return e;
    if (m->code == LT_OK || !lt_error_is_known(m->code))
        return LT_E_BAD_VALUE;
    if (m->err >= 0 || m->err < -4095)
        return LT_E_BAD_VALUE;
    if (m->reserved != 0)
        return LT_E_RESERVED_NONZERO;
    if (m->index != LT_INDEX_NONE && m->index >= LT_MAX_BATCH)
        return LT_E_BAD_VALUE;
    return lt_name_check(m->message, LT_ERROR_MSG_LEN);
}

/* ---- LAUNCH (1.2) ---- */

#include "lease_types/validate_launch.h"

/* ---- Any message ---- */

/* Validates a message of any v1 type with the validator its header names.
 * Returns what that validator returns; on LT_OK writes the type to *@type_p
 * (may be NULL). */
static inline enum lt_error lt_validate(const void *buf, size_t len, uint16_t *type_p)
{
    enum lt_error e = lt_validate_header(buf, len);
    uint16_t t;
    if (e != LT_OK)
        return e;
    t = ((const struct lt_header *)buf)->type;
    switch (t) {
    case LT_MSG_HELLO:
        e = lt_validate_hello(buf, len);
        break;
    case LT_MSG_HELLO_REPLY:
        e = lt_validate_hello_reply(buf, len);
        break;
    case LT_MSG_SEGMENT_OFFER:
        e = lt_validate_segment_offer(buf, len);
        break;
    case LT_MSG_SEGMENT_ACCEPT:
        e = lt_validate_segment_accept(buf, len);
        break;
    case LT_MSG_SEGMENT_RETIRE:
        e = lt_validate_segment_retire(buf, len);
        break;
    case LT_MSG_SEGMENT_RETIRED:
        e = lt_validate_segment_retired(buf, len);
        break;
    case LT_MSG_LEASE_REQUEST:
        e = lt_validate_lease_request(buf, len);
        break;
    case LT_MSG_LEASE_GRANT:
        e = lt_validate_lease_grant(buf, len);
        break;
    case LT_MSG_LEASE_RELEASE:
        e = lt_validate_lease_release(buf, len);
        break;
    case LT_MSG_RELEASE_COMPLETE:
        e = lt_validate_release_complete(buf, len);
        break;
    case LT_MSG_SUBMIT:
        e = lt_validate_submit(buf, len);
        break;
    case LT_MSG_COMPLETION:
        e = lt_validate_completion(buf, len);
        break;
    case LT_MSG_STREAM_CREATE:
    case LT_MSG_STREAM_VALIDATE:
    case LT_MSG_STREAM_QUERY:
    case LT_MSG_STREAM_SYNCHRONIZE:
    case LT_MSG_STREAM_DESTROY:
        e = lt_validate_stream_cmd(buf, len);
        break;
    case LT_MSG_EVENT_RECORD:
    case LT_MSG_EVENT_WAIT:
    case LT_MSG_EVENT_QUERY:
    case LT_MSG_EVENT_SYNCHRONIZE:
    case LT_MSG_EVENT_DESTROY:
    case LT_MSG_EVENT_ELAPSED:
        e = lt_validate_event_cmd(buf, len);
        break;
    case LT_MSG_DEVICE_SYNCHRONIZE:
        e = lt_validate_device_sync(buf, len);
        break;
    case LT_MSG_CTL_REPLY:
        e = lt_validate_ctl_reply(buf, len);
        break;
    case LT_MSG_STATS_REQUEST:
        e = lt_validate_stats_request(buf, len);
        break;
    case LT_MSG_STATS_REPLY:
        e = lt_validate_stats_reply(buf, len);
        break;
    case LT_MSG_ERROR:
        e = lt_validate_error(buf, len);
        break;
    case LT_MSG_RELEASE_COMPLETE_BATCH:
        e = lt_validate_release_complete_batch(buf, len);
        break;
    case LT_MSG_WORDS_REQUEST:
        e = lt_validate_words_request(buf, len);
        break;
    case LT_MSG_WORDS_GRANT:
        e = lt_validate_words_grant(buf, len);
        break;
    case LT_MSG_LEASE_LIST_REQUEST:
    case LT_MSG_SEGMENT_LIST_REQUEST:
        e = lt_validate_list_request(buf, len);
        break;
    case LT_MSG_LEASE_LIST_REPLY:
        e = lt_validate_lease_list_reply(buf, len);
        break;
    case LT_MSG_SEGMENT_LIST_REPLY:
        e = lt_validate_segment_list_reply(buf, len);
        break;
    case LT_MSG_RING_OPEN:
        e = lt_validate_ring_open(buf, len);
        break;
    case LT_MSG_RING_OPENED:
        e = lt_validate_ring_opened(buf, len);
        break;
    case LT_MSG_RING_SHARD:
        e = lt_validate_ring_shard(buf, len);
        break;
    case LT_MSG_RING_CLOSE:
        e = lt_validate_ring_close(buf, len);
        break;
    case LT_MSG_RING_CLOSED:
        e = lt_validate_ring_closed(buf, len);
        break;
    case LT_MSG_LAUNCH:
        e = lt_validate_launch(buf, len);
        break;
    case LT_MSG_LAUNCH_COMPLETION:
        e = lt_validate_launch_completion(buf, len);
        break;
    default:
        return LT_E_UNKNOWN_TYPE; /* unreachable: the header check knows the types */
    }
    if (e == LT_OK && type_p)
        *type_p = t;
    return e;
}

/* As lt_validate, also refusing (LT_E_WRONG_DIRECTION) types not in @dir. */
static inline enum lt_error lt__validate_dir(const void *buf, size_t len, uint16_t dir,
                                             uint16_t *type_p)
{
    enum lt_error e = lt_validate_header(buf, len);
    if (e != LT_OK)
        return e;
    if ((lt_msg_info(((const struct lt_header *)buf)->type).dir & dir) == 0)
        return LT_E_WRONG_DIRECTION;
    return lt_validate(buf, len, type_p);
}

/* For the agent: lt_validate, refusing what only the agent may send. */
static inline enum lt_error lt_validate_from_client(const void *buf, size_t len, uint16_t *type_p)
{
    return lt__validate_dir(buf, len, LT_DIR_TO_AGENT, type_p);
}

/* For a client: lt_validate, refusing what only a client may send. */
static inline enum lt_error lt_validate_from_agent(const void *buf, size_t len, uint16_t *type_p)
{
    return lt__validate_dir(buf, len, LT_DIR_TO_CLIENT, type_p);
}

/* The fd rule: exactly one fd with SEGMENT_OFFER and WORDS_GRANT, none with
 * anything else (an unknown type included). LT_OK or LT_E_FD_COUNT. The receiver closes
 * every fd it got on any failure. */
static inline enum lt_error lt_validate_fd_count(uint32_t type, size_t nfds)
{
    return nfds == lt_msg_info(type).fds ? LT_OK : LT_E_FD_COUNT;
}

/* For a client holding the request it sent: does the validated @reply
 * answer validated @req? Same request id (BAD_REQUEST_ID); type the
 * request's reply type or ERROR (WRONG_TYPE); an ERROR names the request's
 * type; echoed fields agree (BAD_VALUE), a grant's count equals the
 * request's (BAD_LENGTH), a release-complete names a released lease, and
 * so does every entry of a RELEASE_COMPLETE_BATCH (which answers a release
 * too, for a client granted LT_CAP_RC_BATCH), a list asked for one client
 * holds that client's entries only, a RING_OPENED echoes the slots and
 * max_shard_bytes and grants at most the depth asked for, a RING_SHARD's
 * COMPLETION its op and a RING_CLOSED its ring. */
static inline enum lt_error lt_validate_reply_matches(const void *req, const void *reply)
{
    const struct lt_header *q = (const struct lt_header *)req;
    const struct lt_header *r = (const struct lt_header *)reply;
    if (r->request_id != q->request_id)
        return LT_E_BAD_REQUEST_ID;
    if (r->type == LT_MSG_ERROR)
        return ((const struct lt_msg_error *)reply)->failed_type == q->type ? LT_OK
                                                                            : LT_E_BAD_VALUE;
    if (q->type == LT_MSG_LEASE_RELEASE && r->type == LT_MSG_RELEASE_COMPLETE_BATCH) {
        const struct lt_msg_lease_release *o = (const struct lt_msg_lease_release *)req;
        const struct lt_msg_release_complete_batch *a =
            (const struct lt_msg_release_complete_batch *)reply;
        for (uint32_t j = 0; j < a->count; j++) {
            uint32_t k = 0;
            while (k < o->count && !lt_lease_id_eq(o->leases[k], a->entries[j].lease))
                k++;
            if (k == o->count)
                return LT_E_BAD_VALUE;
        }
        return LT_OK;
    }
    if (r->type != lt_msg_info(q->type).reply || r->type == 0)
        return LT_E_WRONG_TYPE;
    switch (r->type) {
    case LT_MSG_HELLO_REPLY: {
        const struct lt_msg_hello *o = (const struct lt_msg_hello *)req;
        const struct lt_msg_hello_reply *a = (const struct lt_msg_hello_reply *)reply;
        return (a->caps & ~(o->caps | LT_CAP_AGENT_ONLY)) == 0 ? LT_OK : LT_E_UNKNOWN_FLAGS;
    }
    case LT_MSG_SEGMENT_ACCEPT: {
        const struct lt_msg_segment_offer *o = (const struct lt_msg_segment_offer *)req;
        const struct lt_msg_segment_accept *a = (const struct lt_msg_segment_accept *)reply;
        return a->cookie == o->cookie && a->size == o->size && a->mem_class == o->mem_class
                   ? LT_OK
                   : LT_E_BAD_VALUE;
    }
    case LT_MSG_SEGMENT_RETIRED: {
        const struct lt_msg_segment_retire *o = (const struct lt_msg_segment_retire *)req;
        const struct lt_msg_segment_retired *a = (const struct lt_msg_segment_retired *)reply;
        return lt_segment_id_eq(a->segment, o->segment) ? LT_OK : LT_E_BAD_VALUE;
    }
    case LT_MSG_LEASE_GRANT: {
        const struct lt_msg_lease_request *o = (const struct lt_msg_lease_request *)req;
        const struct lt_msg_lease_grant *a = (const struct lt_msg_lease_grant *)reply;
        if (a->count != o->count)
            return LT_E_BAD_LENGTH;
        for (uint32_t k = 0; k < a->count; k++) {
            uint32_t got = a->entries[k].mem_class;
            if (a->entries[k].status == LT_OK && got != o->entries[k].mem_class &&
                !(got == LT_CLASS_STAGED && (o->entries[k].flags & LT_LEASE_F_ALLOW_STAGED)))
                return LT_E_BAD_VALUE;
        }
        return LT_OK;
    }
    case LT_MSG_RELEASE_COMPLETE: {
        const struct lt_msg_lease_release *o = (const struct lt_msg_lease_release *)req;
        const struct lt_msg_release_complete *a = (const struct lt_msg_release_complete *)reply;
        for (uint32_t k = 0; k < o->count; k++)
            if (lt_lease_id_eq(o->leases[k], a->lease))
                return LT_OK;
        return LT_E_BAD_VALUE;
    }
    case LT_MSG_COMPLETION: {
        const struct lt_msg_completion *a = (const struct lt_msg_completion *)reply;
        if (q->type == LT_MSG_RING_SHARD) /* its lease is the ring's, which the client knows */
            return a->op == ((const struct lt_msg_ring_shard *)req)->op ? LT_OK : LT_E_BAD_VALUE;
        const struct lt_msg_submit *o = (const struct lt_msg_submit *)req;
        return lt_lease_id_eq(a->lease, o->lease) && a->op == o->op ? LT_OK : LT_E_BAD_VALUE;
    }
    case LT_MSG_RING_OPENED: {
        const struct lt_msg_ring_open *o = (const struct lt_msg_ring_open *)req;
        const struct lt_msg_ring_opened *a = (const struct lt_msg_ring_opened *)reply;
        return a->nslots == o->nslots && a->max_shard_bytes == o->max_shard_bytes &&
                       a->depth <= o->depth
                   ? LT_OK
                   : LT_E_BAD_VALUE;
    }
    case LT_MSG_RING_CLOSED: {
        const struct lt_msg_ring_close *o = (const struct lt_msg_ring_close *)req;
        const struct lt_msg_ring_closed *a = (const struct lt_msg_ring_closed *)reply;
        return lt_ring_id_eq(a->ring, o->ring) ? LT_OK : LT_E_BAD_VALUE;
    }
    case LT_MSG_CTL_REPLY:
        return ((const struct lt_msg_ctl_reply *)reply)->request_type == q->type ? LT_OK
                                                                                 : LT_E_BAD_VALUE;
    case LT_MSG_WORDS_GRANT:
        return ((const struct lt_msg_words_grant *)reply)->size ==
                       ((const struct lt_msg_words_request *)req)->bytes
                   ? LT_OK
                   : LT_E_BAD_VALUE;
    case LT_MSG_LEASE_LIST_REPLY:
    case LT_MSG_SEGMENT_LIST_REPLY: {
        /* A list of one client names only that client. */
        uint32_t want = ((const struct lt_msg_list_request *)req)->client_id;
        const struct lt_msg_lease_list_reply *a = (const struct lt_msg_lease_list_reply *)reply;
        const struct lt_msg_segment_list_reply *b =
            (const struct lt_msg_segment_list_reply *)reply;
        for (uint32_t k = 0; want != 0 && k < a->count; k++) {
            uint32_t got = r->type == LT_MSG_LEASE_LIST_REPLY ? a->entries[k].client_id
                                                              : b->entries[k].client_id;
            if (got != want)
                return LT_E_BAD_VALUE;
        }
        return LT_OK;
    }
        break;
    case LT_MSG_LAUNCH_COMPLETION: /* no more result than the area asked for */
        return ((const struct lt_msg_launch_completion *)reply)->result_bytes <=
                       ((const struct lt_msg_launch *)req)->result_bytes
                   ? LT_OK
                   : LT_E_BAD_VALUE;
    default: /* STATS_REPLY: nothing echoed */
        return LT_OK;
    }
}

LT_EXTERN_C_END

#endif /* LEASE_TYPES_VALIDATE_H */
