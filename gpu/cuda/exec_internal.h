/* The managed-id table of the CUDA stream layer (idtab.c, driver-free). */
#ifndef GPU_EXEC_INTERNAL_H
#define GPU_EXEC_INTERNAL_H

#include <stdint.h>

#include "gpu/completer.h"
#include "gpu/exec.h"

/* ---- id table (idtab.c) ----
 * Not locked: the caller serialises. Slot 0 is never issued; slots 1..cap
 * are. A slot's generation starts at 1 on first issue and moves on when the
 * slot's id is retired, so a kept id then reads as stale. */

enum ga__slot_state {
    GA__SLOT_FREE = 0, /* issuable */
    GA__SLOT_LIVE = 1, /* its id is current */
    GA__SLOT_DEAD = 2, /* id retired, object kept until the last hold goes */
};

struct ga__slot {
    uint32_t gen;    /* 0: never issued */
    uint32_t state;  /* enum ga__slot_state */
    uint32_t holds;  /* calls using obj now */
    uint32_t flags;  /* the user's */
    uint64_t owner;
    void *obj;
};

struct ga__idtab {
    const char *what;  /* "stream", "event": for messages */
    const char *limit; /* "max_streams": for messages */
    uint32_t cap;
    uint32_t live;                /* LIVE slots */
    uint32_t used;                /* LIVE + DEAD slots */
    struct ga__slot *slots;       /* cap + 1; [0] unused */
    uint32_t *free_ring;          /* FIFO of free slots: a freed slot is reused last */
    uint32_t free_head, free_len; /* into free_ring */
};

/* Sets up @t with @cap slots (1..GA_STREAMS_LIMIT). Returns 0, -EINVAL, -ENOMEM. */
int ga__idtab_init(struct ga__idtab *t, const char *what, const char *limit, uint32_t cap);

/* Frees @t's arrays; the objects are the caller's. Safe on a zeroed table. */
void ga__idtab_fini(struct ga__idtab *t);

/* Issues a slot to @owner holding @obj with @flags; writes its slot and
 * generation. Returns 0 or -EMFILE (all @cap in use, logged with numbers). */
int ga__idtab_alloc(struct ga__idtab *t, uint64_t owner, void *obj, uint32_t flags,
                    uint32_t *slot_p, uint32_t *gen_p);

/* The live slot for (@slot, @gen) if @owner may use it. Returns 0, -EINVAL
 * (slot 0 or generation 0), -ENOENT (out of range or never issued), -ESTALE
 * (retired), -EPERM (another owner's); every refusal is logged. */
int ga__idtab_lookup(struct ga__idtab *t, uint64_t owner, uint32_t slot, uint32_t gen,
                     struct ga__slot **slot_p);

/* ga__idtab_lookup, then one more hold on the slot. */
int ga__idtab_get(struct ga__idtab *t, uint64_t owner, uint32_t slot, uint32_t gen,
                  struct ga__slot **slot_p);

/* Retires the id of LIVE @slot (its generation moves on). Returns the object
 * when no hold remains and the slot is free again (the caller destroys it),
 * else NULL (the last ga__idtab_put returns it). */
void *ga__idtab_kill(struct ga__idtab *t, uint32_t slot);

/* Drops one hold on @slot; returns the object when that freed a retired
 * slot (the caller destroys it), else NULL. */
void *ga__idtab_put(struct ga__idtab *t, uint32_t slot);

#endif /* GPU_EXEC_INTERNAL_H */
