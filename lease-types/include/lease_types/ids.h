/* lease-types: ids for segments, leases, streams and events.
 *
 * Every id is a slot (an index into the issuer's table) plus a generation.
 * The issuer bumps a slot's generation each time the slot is freed, so an id
 * kept after its object died names the right slot with the wrong generation
 * and is refused (LT_E_STALE_ID) instead of reaching the slot's next owner.
 * Generations start at 1 and skip 0 on wrap (lt_gen_next), so an issued id
 * is never all-zero: {0, 0} is "none", except for streams, where it is the
 * default stream. Distinct struct types keep a lease id from being passed
 * where a segment id is expected. */
#ifndef LEASE_TYPES_IDS_H
#define LEASE_TYPES_IDS_H

#include "lease_types/common.h"

LT_EXTERN_C_BEGIN

struct lt_segment_id {
    uint32_t slot;
    uint32_t gen;
};

struct lt_lease_id {
    uint32_t slot;
    uint32_t gen;
};

struct lt_stream_id {
    uint32_t slot;
    uint32_t gen;
};

struct lt_event_id {
    uint32_t slot;
    uint32_t gen;
};

/* A streaming ring (protocol 1.1, LT_CAP_STREAM): issued by the agent's
 * executor like a stream, never {0, 0}. */
struct lt_ring_id {
    uint32_t slot;
    uint32_t gen;
};

/* The generation after @gen; never 0. */
static inline uint32_t lt_gen_next(uint32_t gen)
{
    return gen == UINT32_MAX ? 1u : gen + 1u;
}

/* For each kind K in segment, lease, stream, event, ring:
 *   struct lt_K_id lt_K_id_make(slot, gen)  builds one;
 *   int lt_K_id_eq(a, b)                    1 when slot and generation match;
 *   int lt_K_id_is_null(id)                 1 for {0, 0};
 *   int lt_K_id_is_issued(id)               1 when the generation is nonzero: the
 *                                           shape of an id an issuer gave out (whether
 *                                           it is still current is the issuer's call);
 *   uint64_t lt_K_id_to_u64(id)             gen << 32 | slot, for hashing and logs;
 *   struct lt_K_id lt_K_id_from_u64(v)      the inverse. */
#define LT__ID_FUNCS(K)                                                                            \
    static inline struct lt_##K##_id lt_##K##_id_make(uint32_t slot, uint32_t gen)                 \
    {                                                                                              \
        struct lt_##K##_id id;                                                                     \
        id.slot = slot;                                                                            \
        id.gen = gen;                                                                              \
        return id;                                                                                 \
    }                                                                                              \
    static inline int lt_##K##_id_eq(struct lt_##K##_id a, struct lt_##K##_id b)                   \
    {                                                                                              \
        return a.slot == b.slot && a.gen == b.gen;                                                 \
    }                                                                                              \
    static inline int lt_##K##_id_is_null(struct lt_##K##_id id)                                   \
    {                                                                                              \
        return id.slot == 0 && id.gen == 0;                                                        \
    }                                                                                              \
    static inline int lt_##K##_id_is_issued(struct lt_##K##_id id)                                 \
    {                                                                                              \
        return id.gen != 0;                                                                        \
    }                                                                                              \
    static inline uint64_t lt_##K##_id_to_u64(struct lt_##K##_id id)                               \
    {                                                                                              \
        return (uint64_t)id.gen << 32 | id.slot;                                                   \
    }                                                                                              \
    static inline struct lt_##K##_id lt_##K##_id_from_u64(uint64_t v)                              \
    {                                                                                              \
        return lt_##K##_id_make((uint32_t)v, (uint32_t)(v >> 32));                                 \
    }

LT__ID_FUNCS(segment)
LT__ID_FUNCS(lease)
LT__ID_FUNCS(stream)
LT__ID_FUNCS(event)
LT__ID_FUNCS(ring)

/* The default stream, {0, 0}. */
static inline struct lt_stream_id lt_stream_id_default(void)
{
    return lt_stream_id_make(0, 0);
}

/* 1 for the default stream. */
static inline int lt_stream_id_is_default(struct lt_stream_id id)
{
    return lt_stream_id_is_null(id);
}

/* 1 when @id may name a stream in a request: the default stream or an
 * issued one. {slot != 0, gen 0} is neither. */
static inline int lt_stream_id_is_usable(struct lt_stream_id id)
{
    return lt_stream_id_is_default(id) || lt_stream_id_is_issued(id);
}

#define LT__ID_ASSERTS(K)                                                                          \
    LT_ASSERT_FIELD(lt_##K##_id, slot, 0);                                                         \
    LT_ASSERT_FIELD(lt_##K##_id, gen, 4);                                                          \
    LT_ASSERT_SIZE(lt_##K##_id, 8)

LT__ID_ASSERTS(segment);
LT__ID_ASSERTS(lease);
LT__ID_ASSERTS(stream);
LT__ID_ASSERTS(event);
LT__ID_ASSERTS(ring);

LT_EXTERN_C_END

#endif /* LEASE_TYPES_IDS_H */
