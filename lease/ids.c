/* Generation-checked id tables: the one place ids are minted and resolved. */
#include <errno.h>
#include <stdlib.h>

#include "internal.h"

#define NO_SLOT UINT32_MAX
/* Slot indexes stop short of NO_SLOT so the free-list sentinel stays unique. */
#define MAX_SLOTS (UINT32_MAX - 1u)

static uint64_t make_id(uint32_t gen, uint32_t idx)
{
    return ((uint64_t)gen << 32) | idx;
}

void lease__table_init(struct lease__table *t)
{
    t->slots = NULL;
    t->n = 0;
    t->cap = 0;
    t->free_head = NO_SLOT;
    t->live = 0;
}

void lease__table_fini(struct lease__table *t)
{
    free(t->slots);
    lease__table_init(t);
}

int lease__table_insert(struct lease__table *t, void *obj, uint64_t owner, uint64_t *id_p)
{
    uint32_t idx;
    if (t->free_head != NO_SLOT) {
        idx = t->free_head;
        t->free_head = t->slots[idx].next_free;
    } else {
        if (t->n == MAX_SLOTS)
            return -ENOSPC;
        if (t->n == t->cap) {
            uint32_t cap = t->cap ? t->cap : 64;
            cap = cap > MAX_SLOTS / 2 ? MAX_SLOTS : cap * 2;
            struct lease__slot *s = realloc(t->slots, (size_t)cap * sizeof(*s));
            if (!s)
                return -ENOMEM;
            t->slots = s;
            t->cap = cap;
        }
        idx = t->n++;
        t->slots[idx].gen = 0;
    }
    struct lease__slot *s = &t->slots[idx];
    s->gen++;
    s->next_free = NO_SLOT;
    s->owner = owner;
    s->obj = obj;
    t->live++;
    *id_p = make_id(s->gen, idx);
    return 0;
}

void lease__table_remove(struct lease__table *t, uint64_t id)
{
    uint32_t idx = (uint32_t)id;
    struct lease__slot *s = &t->slots[idx];
    s->obj = NULL;
    t->live--;
    /* A slot whose generation would wrap is retired, so no id ever aliases. */
    if (s->gen == UINT32_MAX)
        return;
    s->next_free = t->free_head;
    t->free_head = idx;
}

enum lease__lookup lease__table_lookup(const struct lease__table *t, uint64_t id,
                                       struct lease__slot **slot_p)
{
    uint32_t idx = (uint32_t)id;
    uint32_t gen = (uint32_t)(id >> 32);
    if (gen == 0 || idx >= t->n)
        return LEASE__ID_NEVER;
    struct lease__slot *s = &t->slots[idx];
    if (gen > s->gen)
        return LEASE__ID_NEVER;
    *slot_p = s;
    if (gen < s->gen)
        return LEASE__ID_STALE;
    return s->obj ? LEASE__ID_LIVE : LEASE__ID_FREED;
}
