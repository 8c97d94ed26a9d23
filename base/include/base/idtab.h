/* base: generation-checked id tables.
 *
 * An id is a slot index (low 32 bits) plus the generation the slot had when
 * the id was issued (high 32 bits): the layout of lt_*_id_to_u64. Each issue
 * of a slot bumps its generation (1, 2, 3, ...; never 0), so an id kept after
 * its object went names the right slot with an old generation and is told
 * apart from the live one. A lookup says which of these an id is: live,
 * retired (its object went and the slot was not issued again), stale (the
 * slot was issued again since), never issued, malformed, or, when an owner is
 * given, another owner's. Callers phrase their own errors from that.
 *
 * Free slots are reused last-freed-first (LIFO: a slot is warm in the cache)
 * or first-freed-first (FIFO: a retired id reads as retired for as long as
 * possible). An optional hold count keeps a retired id's slot and object
 * until the last user lets go (base_idtab_hold/base_idtab_put).
 *
 * Threads: none of these functions lock. The caller serializes every call on
 * one table; lookups without holds (base_idtab_lookup*, _get, _next) only
 * read and may run concurrently with each other.
 * Ownership: objects stay the caller's; the table stores the pointer only.
 * base_idtab_fini frees the table's memory, never an object. */
#ifndef BASE_IDTAB_H
#define BASE_IDTAB_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Slots a table may issue at most (two indexes stay free for bookkeeping). */
#define BASE_IDTAB_SLOTS_MAX (UINT32_MAX - 2u)

enum base_idtab_reuse {
    /* The slot freed last is issued first; fresh slots only when none is free. */
    BASE_IDTAB_REUSE_LIFO = 0,
    /* Free slots queue in the order they were freed, behind the fresh ones
     * allocated so far (in index order): a freed slot waits for every other
     * free slot. With initial_slots == max_slots no slot is reused before
     * all were issued once. */
    BASE_IDTAB_REUSE_FIFO = 1,
};

struct base_idtab_config {
    enum base_idtab_reuse reuse;
    /* Slots issued at once at most, 1..BASE_IDTAB_SLOTS_MAX; 0: the maximum. */
    uint32_t max_slots;
    /* Slots allocated by base_idtab_init (up to max_slots); 0: none until
     * the first insert. The table grows by doubling, from 64, up to max_slots. */
    uint32_t initial_slots;
    /* Slot 0 is never issued, so the all-zero id can mean "none" (or the
     * default stream); ids naming slot 0 look up as MALFORMED. */
    bool reserve_slot0;
    /* When a slot at generation UINT32_MAX is freed: false, the slot is
     * retired for good, so no id ever aliases an older one; true, its next
     * generation is 1 (lt_gen_next), and an id kept across 2^32 issues of
     * its slot aliases a newer one. */
    bool gen_wrap;
};

enum base_idtab_state {
    BASE_IDTAB_LIVE = 0,      /* issued and not retired */
    BASE_IDTAB_RETIRED = 1,   /* this generation was retired; the slot was not issued again */
    BASE_IDTAB_STALE = 2,     /* an older generation: the slot was issued again since */
    BASE_IDTAB_NEVER = 3,     /* no such slot or generation was issued yet */
    BASE_IDTAB_MALFORMED = 4, /* generation 0, or slot 0 of a table that reserves it */
    BASE_IDTAB_FOREIGN = 5,   /* live or retired, issued to another owner (the _owned lookups) */
};

/* One slot. Fields are for reading, except where a comment allows writes. */
struct base_idtab_slot {
    void *obj;      /* the object; the caller may replace it while live; NULL once free */
    uint64_t owner; /* as inserted; kept after retirement, for foreign-id checks */
    uint32_t gen;   /* the generation last issued; 0: never issued */
    uint32_t flags; /* the caller's, zeroed by each insert */
    uint32_t holds; /* base_idtab_hold calls not yet put */
    uint32_t base__next;
    uint8_t base__state;
    uint8_t base__wrapped;
};

/* Members are private: use the functions. Zeroed is not initialized. */
struct base_idtab {
    struct base_idtab_slot *base__slots;
    uint32_t base__n;     /* slots allocated */
    uint32_t base__limit; /* slots allocated at most: max_slots (+ 1 for a reserved slot 0) */
    uint32_t base__head, base__tail;
    uint32_t base__live, base__dead;
    struct base_idtab_config base__cfg;
};

static inline uint64_t base_idtab_id(uint32_t slot, uint32_t gen)
{
    return (uint64_t)gen << 32 | slot;
}

static inline uint32_t base_idtab_id_slot(uint64_t id)
{
    return (uint32_t)id;
}

static inline uint32_t base_idtab_id_gen(uint64_t id)
{
    return (uint32_t)(id >> 32);
}

/* ---- life cycle ---- */

/* Sets up @t as @cfg says (NULL: LIFO, no limit, nothing reserved, slots
 * retired at the last generation). Returns 0, -EINVAL (initial_slots above
 * max_slots, max_slots above BASE_IDTAB_SLOTS_MAX, an unknown reuse) or
 * -ENOMEM; on failure @t needs no fini. */
int base_idtab_init(struct base_idtab *t, const struct base_idtab_config *cfg);

/* Frees the slots (never the objects). Safe on a zeroed or finished table;
 * @t must be initialized again before further use. */
void base_idtab_fini(struct base_idtab *t);

/* ---- ids ---- */

/* Issues a slot holding @obj (not NULL) for @owner and writes its id.
 * Returns 0, -EINVAL (@obj NULL), -ENOSPC (max_slots issued, counting
 * retired ids still held, and slots retired for good) or -ENOMEM. */
int base_idtab_insert(struct base_idtab *t, void *obj, uint64_t owner, uint64_t *id_p);

/* Retires live @id: from now on it looks up as RETIRED, then as STALE once
 * its slot is issued again. Returns the object when the slot is free now;
 * NULL when @id is not live, or when holds remain (the last base_idtab_put
 * then frees the slot and returns the object). */
void *base_idtab_retire(struct base_idtab *t, uint64_t id);

/* What @id is. *slot_p is written for LIVE, RETIRED and STALE (the slot as
 * it is now), untouched for NEVER and MALFORMED. Never returns FOREIGN. */
enum base_idtab_state base_idtab_lookup(const struct base_idtab *t, uint64_t id,
                                        struct base_idtab_slot **slot_p);

/* As base_idtab_lookup, but a LIVE or RETIRED id issued to an owner other
 * than @owner is FOREIGN (*slot_p written: its owner and state are there). */
enum base_idtab_state base_idtab_lookup_owned(const struct base_idtab *t, uint64_t id,
                                              uint64_t owner, struct base_idtab_slot **slot_p);

/* The object of live @id, or NULL. */
void *base_idtab_get(const struct base_idtab *t, uint64_t id);

/* 1 when @s (from a lookup) is live: a FOREIGN answer may be either. */
bool base_idtab_slot_is_live(const struct base_idtab_slot *s);

/* ---- holds: a retired id's slot and object stay until the last put ---- */

/* base_idtab_lookup_owned, and on LIVE one more hold on the slot. Returns
 * the state; *slot_p as base_idtab_lookup_owned. The caller keeps a slot's
 * holds below UINT32_MAX. */
enum base_idtab_state base_idtab_hold(struct base_idtab *t, uint64_t id, uint64_t owner,
                                      struct base_idtab_slot **slot_p);

/* Drops one hold on @id (live or retired). Returns the object when that
 * was the last hold of a retired id (its slot is free now), else NULL.
 * A put with no hold taken on @id's generation is ignored (NULL). */
void *base_idtab_put(struct base_idtab *t, uint64_t id);

/* ---- counts and walks ---- */

/* Ids live now. */
uint32_t base_idtab_live(const struct base_idtab *t);
/* Slots not issuable now because of an id: live ones plus retired ones
 * still held. */
uint32_t base_idtab_used(const struct base_idtab *t);
/* The configured max_slots (resolved: never 0). */
uint32_t base_idtab_max(const struct base_idtab *t);
/* 1 when base_idtab_insert would return -ENOSPC. */
bool base_idtab_full(const struct base_idtab *t);

/* The next live slot at or after *cursor_p, in slot order, or NULL at the
 * end; writes its id to *id_p (may be NULL) and moves *cursor_p past it.
 * Start with *cursor_p = 0. Retiring the returned id (or any other) during
 * the walk is safe; an id inserted during the walk may or may not be seen. */
struct base_idtab_slot *base_idtab_next(const struct base_idtab *t, uint32_t *cursor_p,
                                        uint64_t *id_p);

/* "live", "retired", "stale", "never issued", "malformed", "foreign"; "?". */
const char *base_idtab_state_name(enum base_idtab_state state);

#ifdef __cplusplus
}
#endif

#endif /* BASE_IDTAB_H */
