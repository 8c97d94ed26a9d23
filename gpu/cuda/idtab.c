/* Managed ids: slots with generations and owners, for streams and events.
 * Free slots are reused in FIFO order, so a retired id's slot is issued again
 * as late as possible and a kept id reads as stale for as long as possible. */
#include <errno.h>
#include <stdlib.h>

#include "exec_internal.h"
#include "ga_internal.h"
#include "lease_types/ids.h"

int ga__idtab_init(struct ga__idtab *t, const char *what, const char *limit, uint32_t cap)
{
    if (!t || cap == 0 || cap > GA_STREAMS_LIMIT) {
        ga__err("%s table: expected 1..%u slots, found %u", what ? what : "id", GA_STREAMS_LIMIT,
                cap);
        return -EINVAL;
    }
    struct ga__idtab z = {.what = what, .limit = limit, .cap = cap};
    z.slots = calloc((size_t)cap + 1, sizeof(*z.slots));
    z.free_ring = calloc(cap, sizeof(*z.free_ring));
    if (!z.slots || !z.free_ring) {
        free(z.slots);
        free(z.free_ring);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < cap; i++)
        z.free_ring[i] = i + 1;
    z.free_len = cap;
    *t = z;
    return 0;
}

void ga__idtab_fini(struct ga__idtab *t)
{
    if (!t)
        return;
    free(t->slots);
    free(t->free_ring);
    t->slots = NULL;
    t->free_ring = NULL;
    t->free_len = t->live = t->used = 0;
}

int ga__idtab_alloc(struct ga__idtab *t, uint64_t owner, void *obj, uint32_t flags,
                    uint32_t *slot_p, uint32_t *gen_p)
{
    if (t->free_len == 0) {
        ga__err("%s table full: %u of %s %u in use (%u live, %u retired with work pending); "
                "client %#llx must destroy one first",
                t->what, t->used, t->limit, t->cap, t->live, t->used - t->live,
                (unsigned long long)owner);
        return -EMFILE;
    }
    uint32_t slot = t->free_ring[t->free_head];
    t->free_head = (t->free_head + 1) % t->cap;
    t->free_len--;
    struct ga__slot *s = &t->slots[slot];
    if (s->gen == 0)
        s->gen = 1;
    s->state = GA__SLOT_LIVE;
    s->holds = 0;
    s->flags = flags;
    s->owner = owner;
    s->obj = obj;
    t->live++;
    t->used++;
    *slot_p = slot;
    *gen_p = s->gen;
    return 0;
}

int ga__idtab_lookup(struct ga__idtab *t, uint64_t owner, uint32_t slot, uint32_t gen,
                     struct ga__slot **slot_p)
{
    if (slot == 0 || gen == 0) {
        ga__err("%s %u:%u: expected an issued id (slot and generation above 0), found %s 0",
                t->what, slot, gen, slot == 0 ? "slot" : "generation");
        return -EINVAL;
    }
    if (slot > t->cap || t->slots[slot].gen == 0) {
        ga__err("%s %u:%u was never issued (the table has slots 1..%u)", t->what, slot, gen,
                t->cap);
        return -ENOENT;
    }
    struct ga__slot *s = &t->slots[slot];
    if (s->state != GA__SLOT_LIVE || s->gen != gen) {
        ga__err("%s %u:%u is stale: it was destroyed (slot %u is at generation %u, %s)", t->what,
                slot, gen, slot, s->gen, s->state == GA__SLOT_LIVE ? "reissued" : "not in use");
        return -ESTALE;
    }
    if (s->owner != owner) {
        ga__err("%s %u:%u belongs to client %#llx, not to client %#llx", t->what, slot, gen,
                (unsigned long long)s->owner, (unsigned long long)owner);
        return -EPERM;
    }
    *slot_p = s;
    return 0;
}

int ga__idtab_get(struct ga__idtab *t, uint64_t owner, uint32_t slot, uint32_t gen,
                  struct ga__slot **slot_p)
{
    struct ga__slot *s = NULL;
    int rc = ga__idtab_lookup(t, owner, slot, gen, &s);
    if (rc < 0)
        return rc;
    s->holds++;
    *slot_p = s;
    return 0;
}

/* DEAD and unheld: back to the free ring; returns the object. */
static void *ga__idtab_reclaim(struct ga__idtab *t, uint32_t slot)
{
    struct ga__slot *s = &t->slots[slot];
    void *obj = s->obj;
    s->obj = NULL;
    s->owner = 0;
    s->flags = 0;
    s->state = GA__SLOT_FREE;
    t->used--;
    t->free_ring[(t->free_head + t->free_len) % t->cap] = slot;
    t->free_len++;
    return obj;
}

void *ga__idtab_kill(struct ga__idtab *t, uint32_t slot)
{
    struct ga__slot *s = &t->slots[slot];
    if (slot == 0 || slot > t->cap || s->state != GA__SLOT_LIVE)
        return NULL;
    s->state = GA__SLOT_DEAD;
    s->gen = lt_gen_next(s->gen);
    t->live--;
    return s->holds == 0 ? ga__idtab_reclaim(t, slot) : NULL;
}

void *ga__idtab_put(struct ga__idtab *t, uint32_t slot)
{
    if (slot == 0 || slot > t->cap)
        return NULL;
    struct ga__slot *s = &t->slots[slot];
    if (s->holds == 0) {
        ga__err("%s slot %u: a hold was dropped that was never taken", t->what, slot);
        return NULL;
    }
    s->holds--;
    return s->state == GA__SLOT_DEAD && s->holds == 0 ? ga__idtab_reclaim(t, slot) : NULL;
}
