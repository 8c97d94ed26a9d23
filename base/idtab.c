/* Generation-checked id tables: see base/idtab.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/idtab.h"

#define NONE UINT32_MAX
#define GROW_FIRST 64u

enum { SLOT_FREE = 0, SLOT_LIVE = 1, SLOT_DEAD = 2 /* retired, still held */ };

static void push_head(struct base_idtab *t, uint32_t i)
{
    t->base__slots[i].base__next = t->base__head;
    t->base__head = i;
    if (t->base__tail == NONE)
        t->base__tail = i;
}

static void push_tail(struct base_idtab *t, uint32_t i)
{
    t->base__slots[i].base__next = NONE;
    if (t->base__tail == NONE)
        t->base__head = i;
    else
        t->base__slots[t->base__tail].base__next = i;
    t->base__tail = i;
}

static uint32_t pop_head(struct base_idtab *t)
{
    uint32_t i = t->base__head;
    t->base__head = t->base__slots[i].base__next;
    if (t->base__head == NONE)
        t->base__tail = NONE;
    t->base__slots[i].base__next = NONE;
    return i;
}

/* Allocates slots up to @want (at most the limit) and queues the new ones in
 * index order; only called with the queue empty, so either policy issues
 * fresh slots lowest first. */
static int grow(struct base_idtab *t, uint64_t want)
{
    if (want > t->base__limit)
        want = t->base__limit;
    uint32_t n = (uint32_t)want;
    if (n <= t->base__n)
        return -ENOSPC;
    struct base_idtab_slot *s = realloc(t->base__slots, (size_t)n * sizeof(*s));
    if (!s)
        return -ENOMEM;
    memset(s + t->base__n, 0, (size_t)(n - t->base__n) * sizeof(*s));
    t->base__slots = s;
    for (uint32_t i = t->base__n; i < n; i++)
        if (!(i == 0 && t->base__cfg.reserve_slot0))
            push_tail(t, i);
    t->base__n = n;
    return 0;
}

int base_idtab_init(struct base_idtab *t, const struct base_idtab_config *cfg)
{
    struct base_idtab_config c = {0};
    if (cfg)
        c = *cfg;
    if (!t || (c.reuse != BASE_IDTAB_REUSE_LIFO && c.reuse != BASE_IDTAB_REUSE_FIFO))
        return -EINVAL;
    if (c.max_slots == 0)
        c.max_slots = BASE_IDTAB_SLOTS_MAX;
    if (c.max_slots > BASE_IDTAB_SLOTS_MAX || c.initial_slots > c.max_slots)
        return -EINVAL;
    struct base_idtab z = {
        .base__head = NONE,
        .base__tail = NONE,
        .base__limit = c.max_slots + (c.reserve_slot0 ? 1u : 0u),
        .base__cfg = c,
    };
    if (c.initial_slots) {
        int rc = grow(&z, (uint64_t)c.initial_slots + (c.reserve_slot0 ? 1u : 0u));
        if (rc < 0)
            return rc;
    }
    *t = z;
    return 0;
}

void base_idtab_fini(struct base_idtab *t)
{
    if (!t)
        return;
    free(t->base__slots);
    memset(t, 0, sizeof(*t));
    t->base__head = t->base__tail = NONE;
}

/* Frees slot @i: back on the queue unless its last generation is spent. */
static void *release(struct base_idtab *t, uint32_t i)
{
    struct base_idtab_slot *s = &t->base__slots[i];
    void *obj = s->obj;
    s->obj = NULL;
    s->base__state = SLOT_FREE;
    if (s->gen == UINT32_MAX && !t->base__cfg.gen_wrap)
        return obj;
    if (t->base__cfg.reuse == BASE_IDTAB_REUSE_FIFO)
        push_tail(t, i);
    else
        push_head(t, i);
    return obj;
}

int base_idtab_insert(struct base_idtab *t, void *obj, uint64_t owner, uint64_t *id_p)
{
    if (!t || !obj || !id_p)
        return -EINVAL;
    if (t->base__head == NONE) {
        if (t->base__n >= t->base__limit)
            return -ENOSPC;
        uint64_t want = t->base__n ? (uint64_t)t->base__n * 2 : GROW_FIRST;
        int rc = grow(t, want);
        if (rc < 0)
            return rc;
    }
    uint32_t i = pop_head(t);
    struct base_idtab_slot *s = &t->base__slots[i];
    if (s->gen == UINT32_MAX) { /* only queued in gen_wrap tables */
        s->gen = 1;
        s->base__wrapped = 1;
    } else {
        s->gen++;
    }
    s->obj = obj;
    s->owner = owner;
    s->flags = 0;
    s->holds = 0;
    s->base__state = SLOT_LIVE;
    t->base__live++;
    *id_p = base_idtab_id(i, s->gen);
    return 0;
}

enum base_idtab_state base_idtab_lookup(const struct base_idtab *t, uint64_t id,
                                        struct base_idtab_slot **slot_p)
{
    uint32_t i = base_idtab_id_slot(id);
    uint32_t gen = base_idtab_id_gen(id);
    if (gen == 0 || (i == 0 && t->base__cfg.reserve_slot0))
        return BASE_IDTAB_MALFORMED;
    if (i >= t->base__n || t->base__slots[i].gen == 0)
        return BASE_IDTAB_NEVER;
    struct base_idtab_slot *s = &t->base__slots[i];
    if (gen == s->gen) {
        *slot_p = s;
        return s->base__state == SLOT_LIVE ? BASE_IDTAB_LIVE : BASE_IDTAB_RETIRED;
    }
    /* Once a slot wrapped, a higher generation is one it issued before. */
    if (gen < s->gen || s->base__wrapped) {
        *slot_p = s;
        return BASE_IDTAB_STALE;
    }
    return BASE_IDTAB_NEVER;
}

enum base_idtab_state base_idtab_lookup_owned(const struct base_idtab *t, uint64_t id,
                                              uint64_t owner, struct base_idtab_slot **slot_p)
{
    struct base_idtab_slot *s = NULL;
    enum base_idtab_state st = base_idtab_lookup(t, id, &s);
    if ((st == BASE_IDTAB_LIVE || st == BASE_IDTAB_RETIRED) && s->owner != owner)
        st = BASE_IDTAB_FOREIGN;
    if (s)
        *slot_p = s;
    return st;
}

void *base_idtab_get(const struct base_idtab *t, uint64_t id)
{
    struct base_idtab_slot *s = NULL;
    return base_idtab_lookup(t, id, &s) == BASE_IDTAB_LIVE ? s->obj : NULL;
}

bool base_idtab_slot_is_live(const struct base_idtab_slot *s)
{
    return s && s->base__state == SLOT_LIVE;
}

void *base_idtab_retire(struct base_idtab *t, uint64_t id)
{
    struct base_idtab_slot *s = NULL;
    if (base_idtab_lookup(t, id, &s) != BASE_IDTAB_LIVE)
        return NULL;
    t->base__live--;
    if (s->holds) {
        s->base__state = SLOT_DEAD;
        t->base__dead++;
        return NULL;
    }
    return release(t, base_idtab_id_slot(id));
}

enum base_idtab_state base_idtab_hold(struct base_idtab *t, uint64_t id, uint64_t owner,
                                      struct base_idtab_slot **slot_p)
{
    struct base_idtab_slot *s = NULL;
    enum base_idtab_state st = base_idtab_lookup_owned(t, id, owner, &s);
    if (st == BASE_IDTAB_LIVE)
        s->holds++;
    if (s)
        *slot_p = s;
    return st;
}

void *base_idtab_put(struct base_idtab *t, uint64_t id)
{
    uint32_t i = base_idtab_id_slot(id);
    if (i >= t->base__n)
        return NULL;
    struct base_idtab_slot *s = &t->base__slots[i];
    if (s->gen != base_idtab_id_gen(id) || s->base__state == SLOT_FREE || s->holds == 0)
        return NULL;
    s->holds--;
    if (s->base__state != SLOT_DEAD || s->holds != 0)
        return NULL;
    t->base__dead--;
    return release(t, i);
}

uint32_t base_idtab_live(const struct base_idtab *t)
{
    return t->base__live;
}

uint32_t base_idtab_used(const struct base_idtab *t)
{
    return t->base__live + t->base__dead;
}

uint32_t base_idtab_max(const struct base_idtab *t)
{
    return t->base__cfg.max_slots;
}

bool base_idtab_full(const struct base_idtab *t)
{
    return t->base__head == NONE && t->base__n >= t->base__limit;
}

struct base_idtab_slot *base_idtab_next(const struct base_idtab *t, uint32_t *cursor_p,
                                        uint64_t *id_p)
{
    for (uint32_t i = *cursor_p; i < t->base__n; i++) {
        struct base_idtab_slot *s = &t->base__slots[i];
        if (s->base__state != SLOT_LIVE)
            continue;
        *cursor_p = i + 1;
        if (id_p)
            *id_p = base_idtab_id(i, s->gen);
        return s;
    }
    if (*cursor_p < t->base__n)
        *cursor_p = t->base__n;
    return NULL;
}

const char *base_idtab_state_name(enum base_idtab_state state)
{
    switch (state) {
    case BASE_IDTAB_LIVE:
        return "live";
    case BASE_IDTAB_RETIRED:
        return "retired";
    case BASE_IDTAB_STALE:
        return "stale";
    case BASE_IDTAB_NEVER:
        return "never issued";
    case BASE_IDTAB_MALFORMED:
        return "malformed";
    case BASE_IDTAB_FOREIGN:
        return "foreign";
    }
    return "?";
}
