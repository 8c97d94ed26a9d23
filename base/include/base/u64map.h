/* base: a u64 -> value hash map.
 *
 * Open addressing with linear probing; deletion shifts the rest of a probe
 * run back (no tombstones), so a long-lived map of churning ids never
 * degrades. Every key is allowed, 0 included. A value is a pointer or a
 * uint64_t: use one kind per map (the _u64 calls for numbers), since a value
 * stored as one kind and read as the other is reinterpreted.
 *
 * A zeroed struct base_u64map is an empty map (first table: 16 slots, grown
 * by doubling past 3/4 full); base_u64map_init picks another size or load.
 * A map may be moved by copying the struct, after which only the copy is used.
 *
 * Threads: no locking; the caller serializes writers. Calls taking a const
 * map only read and may run concurrently with each other.
 * Ownership: values are the caller's; the map frees only its own table. */
#ifndef BASE_U64MAP_H
#define BASE_U64MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct base_u64map_entry {
    uint64_t key;
    union {
        void *ptr;
        uint64_t u64;
    };
};

/* Members are private: use the functions. */
struct base_u64map {
    struct base_u64map_entry *base__tab; /* key 0 marks an empty slot here */
    size_t base__cap;                    /* a power of two, or 0 */
    size_t base__used;                   /* entries in base__tab */
    unsigned base__load_pct;             /* 0: 75 */
    bool base__has_zero;                 /* key 0 lives outside the table */
    struct base_u64map_entry base__zero;
};

/* Walk state: see base_u64map_iter_init. Members are private. */
struct base_u64map_iter {
    size_t base__start, base__k, base__last;
    bool base__zero;
};

/* The map's mixing function (a bijection on 64 bits), for callers hashing
 * ids elsewhere; an entry's home slot is base_u64_mix(key) & (capacity - 1). */
static inline uint64_t base_u64_mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* ---- life cycle ---- */

/* An empty map with room for @expect entries before it grows, which grows
 * once more than @max_load_pct percent (10..90; 0: 75) of its slots are in
 * use. Returns 0, -EINVAL (load out of range) or -ENOMEM (@m stays zeroed). */
int base_u64map_init(struct base_u64map *m, size_t expect, unsigned max_load_pct);

/* Frees the table (not the values) and leaves @m zeroed: empty, usable. */
void base_u64map_fini(struct base_u64map *m);

/* Removes every entry, keeping the table's memory. */
void base_u64map_clear(struct base_u64map *m);

/* Makes room for @n entries in all without growing. Returns 0, -ENOMEM or
 * -EOVERFLOW. */
int base_u64map_reserve(struct base_u64map *m, size_t n);

size_t base_u64map_len(const struct base_u64map *m);

/* Slots in the table now (0 or a power of two). */
size_t base_u64map_capacity(const struct base_u64map *m);

/* ---- entries ---- */

/* Adds @key -> @val. Returns 0, -EEXIST (@key present, left as it was) or
 * -ENOMEM. */
int base_u64map_put(struct base_u64map *m, uint64_t key, void *val);
int base_u64map_put_u64(struct base_u64map *m, uint64_t key, uint64_t val);

/* @key's entry, or NULL; its value may be changed in place. Valid until
 * the next put or delete. */
struct base_u64map_entry *base_u64map_find(const struct base_u64map *m, uint64_t key);

/* @key's pointer, or NULL when absent. */
void *base_u64map_get(const struct base_u64map *m, uint64_t key);
/* 1 and *val_p when @key is present, else 0 (*val_p untouched). */
bool base_u64map_get_u64(const struct base_u64map *m, uint64_t key, uint64_t *val_p);

/* Removes @key; returns its pointer, or NULL when absent. */
void *base_u64map_del(struct base_u64map *m, uint64_t key);
/* Removes @key; 1 and *val_p (may be NULL) when it was present, else 0. */
bool base_u64map_del_u64(struct base_u64map *m, uint64_t key, uint64_t *val_p);

/* ---- walks ---- */

/* Starts a walk over every entry, in no particular order. During a walk
 * values may be changed in place and the entry just returned may be
 * removed with base_u64map_iter_del; any other put or delete ends the walk
 * (start again). */
void base_u64map_iter_init(const struct base_u64map *m, struct base_u64map_iter *it);

/* The next entry, or NULL when every entry was returned once. */
struct base_u64map_entry *base_u64map_iter_next(const struct base_u64map *m,
                                                struct base_u64map_iter *it);

/* Removes the entry base_u64map_iter_next returned last; the walk goes on
 * with every other entry still returned exactly once. A second call for
 * the same entry is a no-op. */
void base_u64map_iter_del(struct base_u64map *m, struct base_u64map_iter *it);

#ifdef __cplusplus
}
#endif

#endif /* BASE_U64MAP_H */
