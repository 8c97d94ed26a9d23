/* The lease client's id tables: request id -> request, lease id -> lease.
 * Linear probing with backward-shift deletion, so no tombstones pile up
 * while ids churn. */
#include <errno.h>
#include <stdlib.h>

#include "client_internal.h"

static size_t sd_client__slot(uint64_t key, size_t cap)
{
    return (size_t)((key * 0x9e3779b97f4a7c15ull) >> 17) & (cap - 1);
}

static int sd_client__map_grow(struct sd_client__map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    uint64_t *keys = calloc(cap, sizeof(*keys));
    void **vals = calloc(cap, sizeof(*vals));
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return -ENOMEM;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (m->keys[i] == 0)
            continue;
        size_t s = sd_client__slot(m->keys[i], cap);
        while (keys[s] != 0)
            s = (s + 1) & (cap - 1);
        keys[s] = m->keys[i];
        vals[s] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
    return 0;
}

int sd_client__map_put(struct sd_client__map *m, uint64_t key, void *val)
{
    if (key == 0)
        return -EINVAL;
    if ((m->len + 1) * 2 > m->cap) {
        int rc = sd_client__map_grow(m);
        if (rc < 0)
            return rc;
    }
    size_t s = sd_client__slot(key, m->cap);
    while (m->keys[s] != 0) {
        if (m->keys[s] == key)
            return -EEXIST;
        s = (s + 1) & (m->cap - 1);
    }
    m->keys[s] = key;
    m->vals[s] = val;
    m->len++;
    return 0;
}

static size_t sd_client__map_find(const struct sd_client__map *m, uint64_t key)
{
    if (m->cap == 0 || key == 0)
        return SIZE_MAX;
    size_t s = sd_client__slot(key, m->cap);
    while (m->keys[s] != 0) {
        if (m->keys[s] == key)
            return s;
        s = (s + 1) & (m->cap - 1);
    }
    return SIZE_MAX;
}

void *sd_client__map_get(const struct sd_client__map *m, uint64_t key)
{
    size_t s = sd_client__map_find(m, key);
    return s == SIZE_MAX ? NULL : m->vals[s];
}

void *sd_client__map_del(struct sd_client__map *m, uint64_t key)
{
    size_t s = sd_client__map_find(m, key);
    if (s == SIZE_MAX)
        return NULL;
    void *val = m->vals[s];
    size_t mask = m->cap - 1;
    /* Backward shift: pull later members of the probe run into the hole
     * unless their home slot lies cyclically after it. */
    size_t hole = s;
    size_t i = (s + 1) & mask;
    while (m->keys[i] != 0) {
        size_t home = sd_client__slot(m->keys[i], m->cap);
        if (((i - home) & mask) >= ((i - hole) & mask)) {
            m->keys[hole] = m->keys[i];
            m->vals[hole] = m->vals[i];
            hole = i;
        }
        i = (i + 1) & mask;
    }
    m->keys[hole] = 0;
    m->vals[hole] = NULL;
    m->len--;
    return val;
}

void sd_client__map_free(struct sd_client__map *m)
{
    free(m->keys);
    free(m->vals);
    m->keys = NULL;
    m->vals = NULL;
    m->cap = 0;
    m->len = 0;
}
