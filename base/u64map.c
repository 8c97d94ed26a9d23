/* The u64 map: see base/u64map.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/u64map.h"

#define FIRST_CAP 16u
#define DEFAULT_LOAD 75u
#define NOPOS SIZE_MAX
#define ZEROPOS (SIZE_MAX - 1)

static unsigned load_of(const struct base_u64map *m)
{
    return m->base__load_pct ? m->base__load_pct : DEFAULT_LOAD;
}

static size_t home(const struct base_u64map *m, uint64_t key)
{
    return (size_t)base_u64_mix(key) & (m->base__cap - 1);
}

/* The smallest power-of-two table that holds @n entries within @load. */
static int cap_for(size_t n, unsigned load, size_t *cap_p)
{
    size_t cap = FIRST_CAP;
    for (;;) {
        size_t room;
        if (__builtin_mul_overflow(cap, (size_t)load, &room))
            return -EOVERFLOW;
        if (n <= room / 100)
            break;
        if (cap > SIZE_MAX / 2 / sizeof(struct base_u64map_entry))
            return -EOVERFLOW;
        cap *= 2;
    }
    *cap_p = cap;
    return 0;
}

static int rehash(struct base_u64map *m, size_t cap)
{
    struct base_u64map_entry *tab = calloc(cap, sizeof(*tab));
    if (!tab)
        return -ENOMEM;
    struct base_u64map_entry *old = m->base__tab;
    size_t old_cap = m->base__cap;
    m->base__tab = tab;
    m->base__cap = cap;
    for (size_t i = 0; i < old_cap; i++) {
        if (old[i].key == 0)
            continue;
        size_t j = home(m, old[i].key);
        while (tab[j].key != 0)
            j = (j + 1) & (cap - 1);
        tab[j] = old[i];
    }
    free(old);
    return 0;
}

int base_u64map_reserve(struct base_u64map *m, size_t n)
{
    size_t cap = 0;
    int rc = cap_for(n, load_of(m), &cap);
    if (rc < 0)
        return rc;
    return cap > m->base__cap ? rehash(m, cap) : 0;
}

int base_u64map_init(struct base_u64map *m, size_t expect, unsigned max_load_pct)
{
    if (!m || (max_load_pct != 0 && (max_load_pct < 10 || max_load_pct > 90)))
        return -EINVAL;
    memset(m, 0, sizeof(*m));
    m->base__load_pct = max_load_pct;
    if (expect == 0)
        return 0;
    int rc = base_u64map_reserve(m, expect);
    if (rc < 0)
        memset(m, 0, sizeof(*m));
    return rc;
}

void base_u64map_fini(struct base_u64map *m)
{
    if (!m)
        return;
    free(m->base__tab);
    memset(m, 0, sizeof(*m));
}

void base_u64map_clear(struct base_u64map *m)
{
    if (m->base__tab)
        memset(m->base__tab, 0, m->base__cap * sizeof(*m->base__tab));
    m->base__used = 0;
    m->base__has_zero = false;
}

size_t base_u64map_len(const struct base_u64map *m)
{
    return m->base__used + (m->base__has_zero ? 1u : 0u);
}

size_t base_u64map_capacity(const struct base_u64map *m)
{
    return m->base__cap;
}

struct base_u64map_entry *base_u64map_find(const struct base_u64map *m, uint64_t key)
{
    if (key == 0)
        return m->base__has_zero ? (struct base_u64map_entry *)&m->base__zero : NULL;
    if (m->base__cap == 0)
        return NULL;
    for (size_t i = home(m, key); m->base__tab[i].key != 0; i = (i + 1) & (m->base__cap - 1))
        if (m->base__tab[i].key == key)
            return &m->base__tab[i];
    return NULL;
}

static int put(struct base_u64map *m, struct base_u64map_entry e)
{
    if (base_u64map_find(m, e.key))
        return -EEXIST;
    if (e.key == 0) {
        m->base__zero = e;
        m->base__has_zero = true;
        return 0;
    }
    size_t room;
    if (__builtin_mul_overflow(m->base__cap, (size_t)load_of(m), &room))
        return -EOVERFLOW;
    if (m->base__used + 1 > room / 100) {
        int rc = base_u64map_reserve(m, m->base__used + 1);
        if (rc < 0)
            return rc;
    }
    size_t i = home(m, e.key);
    while (m->base__tab[i].key != 0)
        i = (i + 1) & (m->base__cap - 1);
    m->base__tab[i] = e;
    m->base__used++;
    return 0;
}

int base_u64map_put(struct base_u64map *m, uint64_t key, void *val)
{
    return put(m, (struct base_u64map_entry){.key = key, .ptr = val});
}

int base_u64map_put_u64(struct base_u64map *m, uint64_t key, uint64_t val)
{
    return put(m, (struct base_u64map_entry){.key = key, .u64 = val});
}

void *base_u64map_get(const struct base_u64map *m, uint64_t key)
{
    const struct base_u64map_entry *e = base_u64map_find(m, key);
    return e ? e->ptr : NULL;
}

bool base_u64map_get_u64(const struct base_u64map *m, uint64_t key, uint64_t *val_p)
{
    const struct base_u64map_entry *e = base_u64map_find(m, key);
    if (!e)
        return false;
    *val_p = e->u64;
    return true;
}

/* Empties slot @i, pulling back each later member of its probe run whose
 * home lies cyclically at or before the hole. */
static void del_at(struct base_u64map *m, size_t i)
{
    size_t mask = m->base__cap - 1;
    size_t hole = i;
    for (size_t j = (i + 1) & mask; m->base__tab[j].key != 0; j = (j + 1) & mask) {
        size_t h = home(m, m->base__tab[j].key);
        if (((j - h) & mask) >= ((j - hole) & mask)) {
            m->base__tab[hole] = m->base__tab[j];
            hole = j;
        }
    }
    m->base__tab[hole] = (struct base_u64map_entry){0};
    m->base__used--;
}

static bool del(struct base_u64map *m, uint64_t key, struct base_u64map_entry *e_p)
{
    struct base_u64map_entry *e = base_u64map_find(m, key);
    if (!e)
        return false;
    *e_p = *e;
    if (key == 0)
        m->base__has_zero = false;
    else
        del_at(m, (size_t)(e - m->base__tab));
    return true;
}

void *base_u64map_del(struct base_u64map *m, uint64_t key)
{
    struct base_u64map_entry e;
    return del(m, key, &e) ? e.ptr : NULL;
}

bool base_u64map_del_u64(struct base_u64map *m, uint64_t key, uint64_t *val_p)
{
    struct base_u64map_entry e;
    if (!del(m, key, &e))
        return false;
    if (val_p)
        *val_p = e.u64;
    return true;
}

/* A walk starts just after an empty slot and goes once round the table, so
 * it meets each probe run from its first member on: a deletion shifts only
 * members of the same run, from positions not yet visited into the hole. */
void base_u64map_iter_init(const struct base_u64map *m, struct base_u64map_iter *it)
{
    size_t start = 0;
    while (start < m->base__cap && m->base__tab[start].key != 0)
        start++;
    *it = (struct base_u64map_iter){
        .base__start = start,
        .base__k = 0,
        .base__last = NOPOS,
        .base__zero = m->base__has_zero,
    };
}

struct base_u64map_entry *base_u64map_iter_next(const struct base_u64map *m,
                                                struct base_u64map_iter *it)
{
    if (it->base__zero) {
        it->base__zero = false;
        if (m->base__has_zero) {
            it->base__last = ZEROPOS;
            return (struct base_u64map_entry *)&m->base__zero;
        }
    }
    while (it->base__k < m->base__cap) {
        size_t i = (it->base__start + 1 + it->base__k) & (m->base__cap - 1);
        it->base__k++;
        if (m->base__tab[i].key != 0) {
            it->base__last = i;
            return &m->base__tab[i];
        }
    }
    it->base__last = NOPOS;
    return NULL;
}

void base_u64map_iter_del(struct base_u64map *m, struct base_u64map_iter *it)
{
    size_t i = it->base__last;
    it->base__last = NOPOS;
    if (i == ZEROPOS) {
        m->base__has_zero = false;
        return;
    }
    if (i == NOPOS)
        return;
    del_at(m, i);
    if (m->base__tab[i].key != 0)
        it->base__k--; /* a later member moved in: visit this slot again */
}
