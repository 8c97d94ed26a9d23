/* A small u64 -> u64 hash map: linear probing, deletion by backward shift
 * (no tombstones), so a long-lived map of churning ids never degrades. */
#include <errno.h>
#include <stdlib.h>

#include "internal.h"

static size_t ga_map__hash(uint64_t key, size_t cap)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (size_t)key & (cap - 1);
}

static int ga_map__grow(struct ga_server__map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 16;
    uint64_t *keys = calloc(cap, sizeof(*keys));
    uint64_t *vals = calloc(cap, sizeof(*vals));
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return -ENOMEM;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (m->keys[i] == 0)
            continue;
        size_t j = ga_map__hash(m->keys[i], cap);
        while (keys[j] != 0)
            j = (j + 1) & (cap - 1);
        keys[j] = m->keys[i];
        vals[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
    return 0;
}

int ga_server__map_put(struct ga_server__map *m, uint64_t key, uint64_t val)
{
    if (key == 0)
        return -EINVAL;
    if ((m->n + 1) * 4 > m->cap * 3) {
        int rc = ga_map__grow(m);
        if (rc < 0)
            return rc;
    }
    size_t i = ga_map__hash(key, m->cap);
    while (m->keys[i] != 0) {
        if (m->keys[i] == key)
            return -EEXIST;
        i = (i + 1) & (m->cap - 1);
    }
    m->keys[i] = key;
    m->vals[i] = val;
    m->n++;
    return 0;
}

int ga_server__map_get(const struct ga_server__map *m, uint64_t key, uint64_t *val_p)
{
    if (key == 0 || m->cap == 0)
        return 0;
    for (size_t i = ga_map__hash(key, m->cap); m->keys[i] != 0; i = (i + 1) & (m->cap - 1))
        if (m->keys[i] == key) {
            *val_p = m->vals[i];
            return 1;
        }
    return 0;
}

int ga_server__map_del(struct ga_server__map *m, uint64_t key, uint64_t *val_p)
{
    if (key == 0 || m->cap == 0)
        return 0;
    size_t mask = m->cap - 1;
    size_t i = ga_map__hash(key, m->cap);
    while (m->keys[i] != key) {
        if (m->keys[i] == 0)
            return 0;
        i = (i + 1) & mask;
    }
    if (val_p)
        *val_p = m->vals[i];
    m->keys[i] = 0;
    m->n--;
    /* Pull back every later entry of the run that may sit in the hole. */
    for (size_t j = (i + 1) & mask; m->keys[j] != 0; j = (j + 1) & mask) {
        size_t home = ga_map__hash(m->keys[j], m->cap);
        /* j's entry may move to i when i lies cyclically in [home, j). */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            m->keys[i] = m->keys[j];
            m->vals[i] = m->vals[j];
            m->keys[j] = 0;
            i = j;
        }
    }
    return 1;
}

void ga_server__map_fini(struct ga_server__map *m)
{
    free(m->keys);
    free(m->vals);
    *m = (struct ga_server__map){0};
}
