/* One jemalloc arena per memory class whose extent hooks hand out only that
 * class's segment memory (docs/staging-pool.md). jemalloc 5.3 API. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "pool_internal.h"

static struct leasec__class *leasec__class_of(extent_hooks_t *hooks)
{
    return (struct leasec__class *)hooks;
}

/* The class segment holding [addr, addr + size), or NULL. */
static struct leasec__segment *leasec__class_segment_of(struct leasec__class *cls, uintptr_t addr,
                                                        size_t size)
{
    struct leasec__segment *segs = cls->segs;
    for (unsigned i = 0; i < cls->nsegs; i++) {
        uintptr_t base = (uintptr_t)segs[i].base;
        if (addr >= base && addr - base < segs[i].size && size <= segs[i].size - (addr - base))
            return &segs[i];
    }
    return NULL;
}

/* Carves @size bytes aligned to @alignment (or exactly at @new_addr) from
 * the segment of the class with the least room that still fits (best fit
 * keeps large tails for large requests). Never maps anything: a full class
 * answers NULL. Carved memory is never taken back (dalloc opts out), so a
 * bump offset per segment is all the state there is. */
static void *leasec__hook_alloc(extent_hooks_t *hooks, void *new_addr, size_t size,
                                size_t alignment, bool *zero, bool *commit, unsigned arena_ind)
{
    struct leasec__class *cls = leasec__class_of(hooks);
    (void)arena_ind;
    if (size == 0 || alignment == 0 || (alignment & (alignment - 1)) != 0)
        return NULL;
    if (alignment < cls->ctx->page)
        alignment = cls->ctx->page;

    pthread_mutex_lock(&cls->carve_lock);
    struct leasec__segment *segs = cls->segs;
    struct leasec__segment *best = NULL;
    uintptr_t best_start = 0;
    uint64_t best_room = 0;
    for (unsigned i = 0; i < cls->nsegs; i++) {
        struct leasec__segment *seg = &segs[i];
        if (cls->prime_target && seg != cls->prime_target)
            continue;
        uintptr_t base = (uintptr_t)seg->base;
        uintptr_t next = base + seg->carved;
        uintptr_t start;
        if (new_addr) {
            start = (uintptr_t)new_addr;
            if (start != next || (start & (alignment - 1)) != 0)
                continue;
        } else {
            start = (next + alignment - 1) & ~(uintptr_t)(alignment - 1);
            if (start < next)
                continue;
        }
        uint64_t offset = start - base;
        if (offset > seg->size || size > seg->size - offset)
            continue;
        uint64_t room = seg->size - offset;
        if (!best || room < best_room) {
            best = seg;
            best_start = start;
            best_room = room;
        }
    }
    if (best) {
        cls->carved += best_start - ((uintptr_t)best->base + best->carved) + size;
        cls->extents++;
        best->carved = best_start - (uintptr_t)best->base + size;
    }
    pthread_mutex_unlock(&cls->carve_lock);
    if (!best)
        return NULL;

    unsigned char *found = (unsigned char *)best_start;
    /* Fresh segment memory is zero, but a peer holding the fd could have
     * written it; zero it whenever jemalloc needs zeroes and promise
     * nothing otherwise. */
    if (*zero)
        memset(found, 0, size);
    *commit = true; /* pre-faulted and never decommitted */
    return found;
}

/* Opt out: the extent stays with jemalloc (retained) and is reused; segment
 * memory is never given back to the system while the pool lives. */
static bool leasec__hook_dalloc(extent_hooks_t *hooks, void *addr, size_t size, bool committed,
                                unsigned arena_ind)
{
    (void)hooks, (void)addr, (void)size, (void)committed, (void)arena_ind;
    return true;
}

/* Called for every retained extent when the arena is destroyed; the
 * segments are unmapped by the pool afterwards, as a whole. */
static void leasec__hook_destroy(extent_hooks_t *hooks, void *addr, size_t size, bool committed,
                                 unsigned arena_ind)
{
    (void)hooks, (void)addr, (void)size, (void)committed, (void)arena_ind;
}

/* Segment memory is always committed. */
static bool leasec__hook_commit(extent_hooks_t *hooks, void *addr, size_t size, size_t offset,
                                size_t length, unsigned arena_ind)
{
    (void)hooks, (void)addr, (void)size, (void)offset, (void)length, (void)arena_ind;
    return false;
}

/* Opt out of decommit and both purges: the pages must stay populated (and,
 * in the agent, registered); a purge would make the next use fault and a
 * peer's view of the segment go stale. */
static bool leasec__hook_keep_pages(extent_hooks_t *hooks, void *addr, size_t size, size_t offset,
                                    size_t length, unsigned arena_ind)
{
    (void)hooks, (void)addr, (void)size, (void)offset, (void)length, (void)arena_ind;
    return true;
}

static bool leasec__hook_split(extent_hooks_t *hooks, void *addr, size_t size, size_t size_a,
                               size_t size_b, bool committed, unsigned arena_ind)
{
    (void)hooks, (void)addr, (void)size, (void)size_a, (void)size_b, (void)committed,
        (void)arena_ind;
    return false;
}

/* Merges only adjacent extents of one segment: a buffer must map to one
 * (segment, offset), even where two segments happen to be adjacent in
 * memory. */
static bool leasec__hook_merge(extent_hooks_t *hooks, void *addr_a, size_t size_a, void *addr_b,
                               size_t size_b, bool committed, unsigned arena_ind)
{
    struct leasec__class *cls = leasec__class_of(hooks);
    (void)committed, (void)arena_ind;
    uintptr_t a = (uintptr_t)addr_a, b = (uintptr_t)addr_b;
    if (a + size_a != b || a + size_a < a)
        return true;
    return leasec__class_segment_of(cls, a, size_a + size_b) == NULL;
}

/* jemalloc 5.3's arena_config_t, the argument of the experimental
 * "experimental.arenas_create_ext" mallctl; it is not in the public header. */
struct leasec__je_arena_config {
    extent_hooks_t *extent_hooks;
    bool metadata_use_hooks;
};

static int leasec__arena_ctl(struct leasec__class *cls, const char *what, void *value, size_t len)
{
    char name[96];
    snprintf(name, sizeof(name), "arena.%u.%s", cls->arena_ind, what);
    int err = mallctl(name, NULL, NULL, value, len);
    if (err) {
        leasec__ctx_log(cls->ctx, "%s arena %u: mallctl(\"%s\"): %s", lt_class_name(cls->mem_class),
                        cls->arena_ind, name, strerror(err));
        return -err;
    }
    return 0;
}

/* The largest large size class whose extent (with jemalloc's one-page pad
 * where cache-oblivious placement is on) fits in @room, or 0. */
static size_t leasec__largest_fitting_class(size_t room, size_t page)
{
    bool oblivious = true;
    size_t len = sizeof(oblivious);
    if (mallctl("opt.cache_oblivious", &oblivious, &len, NULL, 0) != 0)
        oblivious = true;
    size_t pad = oblivious ? page : 0;
    unsigned n = 0;
    len = sizeof(n);
    size_t mib[4], miblen = 4, best = 0;
    if (mallctl("arenas.nlextents", &n, &len, NULL, 0) != 0 ||
        mallctlnametomib("arenas.lextent.0.size", mib, &miblen) != 0)
        return 0;
    for (unsigned i = 0; i < n; i++) {
        size_t size = 0;
        len = sizeof(size);
        mib[2] = i;
        if (mallctlbymib(mib, miblen, &size, &len, NULL, 0) != 0 || size + pad > room)
            break;
        best = size;
    }
    return best;
}

static int leasec__seg_size_cmp(const void *a, const void *b)
{
    const struct leasec__segment *x = *(struct leasec__segment *const *)a;
    const struct leasec__segment *y = *(struct leasec__segment *const *)b;
    return (x->size > y->size) - (x->size < y->size);
}

/* Hands every segment to jemalloc as one extent. jemalloc never merges two
 * extents that came from separate alloc calls, so letting it grow piecemeal
 * (2 MiB, 2.5 MiB, ...) would cut segments into pieces for good and large
 * buffers would fail after churn. One large allocation per segment, with
 * the grow limit at the segment size, makes jemalloc ask for exactly the
 * segment (smallest segments first, so the grow sizes keep up); freeing
 * them and purging (which our hooks refuse, so it only moves the extents
 * into jemalloc's retained set) leaves one whole extent per segment. */
static int leasec__arena_prime(struct leasec__class *cls)
{
    struct leasec__segment *segs = cls->segs;
    struct leasec__segment **order = calloc(cls->nsegs, sizeof(*order));
    void **held = calloc(cls->nsegs, sizeof(*held));
    int rc = -ENOMEM;
    if (!order || !held) {
        leasec__ctx_log(cls->ctx, "%s: priming the arena: out of memory",
                        lt_class_name(cls->mem_class));
        goto out;
    }
    for (unsigned i = 0; i < cls->nsegs; i++)
        order[i] = &segs[i];
    qsort(order, cls->nsegs, sizeof(*order), leasec__seg_size_cmp);
    for (unsigned i = 0; i < cls->nsegs; i++) {
        size_t size = leasec__largest_fitting_class(order[i]->size, cls->ctx->page);
        /* Whatever size jemalloc asks for, it lands in this segment. */
        pthread_mutex_lock(&cls->carve_lock);
        cls->prime_target = order[i];
        pthread_mutex_unlock(&cls->carve_lock);
        held[i] = size ? mallocx(size, MALLOCX_ARENA(cls->arena_ind) | MALLOCX_TCACHE_NONE) : NULL;
        pthread_mutex_lock(&cls->carve_lock);
        cls->prime_target = NULL;
        pthread_mutex_unlock(&cls->carve_lock);
        if (!held[i]) {
            leasec__ctx_log(cls->ctx,
                            "%s: priming the arena: expected jemalloc to take %zu bytes of segment "
                            "%u (%llu bytes), it failed",
                            lt_class_name(cls->mem_class), size, order[i]->id,
                            (unsigned long long)order[i]->size);
            goto out;
        }
        if (leasec__ctx_fault(cls->ctx)) {
            leasec__ctx_log(cls->ctx, "%s: priming segment %u: injected failure",
                            lt_class_name(cls->mem_class), order[i]->id);
            rc = -EIO;
            goto out;
        }
    }
    rc = 0;
out:
    for (unsigned i = 0; held && i < cls->nsegs; i++)
        if (held[i])
            dallocx(held[i], MALLOCX_TCACHE_NONE);
    free(held);
    free(order);
    if (rc == 0)
        rc = leasec__arena_consolidate(cls);
    if (rc == 0 && (cls->extents != cls->nsegs || cls->carved != cls->capacity))
        leasec__ctx_log(cls->ctx,
                        "%s: jemalloc took %llu of %llu bytes in %llu extents for %u segments "
                        "(segment sizes that are not a power of two times 1, 1.25, 1.5 or 1.75 "
                        "leave a tail); the tails are carved later, as separate extents",
                        lt_class_name(cls->mem_class), (unsigned long long)cls->carved,
                        (unsigned long long)cls->capacity, (unsigned long long)cls->extents,
                        cls->nsegs);
    return rc;
}

int leasec__arena_consolidate(struct leasec__class *cls)
{
    return leasec__arena_ctl(cls, "purge", NULL, 0);
}

void leasec__arena_hooks_init(struct leasec__class *cls)
{
    cls->hooks = (extent_hooks_t){
        .alloc = leasec__hook_alloc,
        .dalloc = leasec__hook_dalloc,
        .destroy = leasec__hook_destroy,
        .commit = leasec__hook_commit,
        .decommit = leasec__hook_keep_pages,
        .purge_lazy = leasec__hook_keep_pages,
        .purge_forced = leasec__hook_keep_pages,
        .split = leasec__hook_split,
        .merge = leasec__hook_merge,
    };
}

int leasec__arena_create(struct leasec__class *cls)
{
    leasec__arena_hooks_init(cls);
    if (leasec__ctx_fault(cls->ctx)) {
        leasec__ctx_log(cls->ctx, "%s: creating arena: injected failure",
                        lt_class_name(cls->mem_class));
        return -EIO;
    }

    /* jemalloc's own metadata for the arena must not live in the segments:
     * it would eat capacity and sit in memory a peer can write. Only the
     * _ext form of arena creation can say so. */
    struct leasec__je_arena_config config = {.extent_hooks = &cls->hooks,
                                             .metadata_use_hooks = false};
    unsigned ind = 0;
    size_t ind_len = sizeof(ind);
    int err = mallctl("experimental.arenas_create_ext", &ind, &ind_len, &config, sizeof(config));
    if (err) {
        const char *version = "unknown";
        size_t version_len = sizeof(version);
        mallctl("version", &version, &version_len, NULL, 0);
        leasec__ctx_log(cls->ctx,
                        "%s: creating arena: mallctl(\"experimental.arenas_create_ext\"): %s; "
                        "expected jemalloc 5.3 (arena_config_t of %zu bytes), found %s",
                        lt_class_name(cls->mem_class), strerror(err), sizeof(config), version);
        return err == ENOENT || err == EINVAL ? -ENOTSUP : -err;
    }
    cls->arena_ind = ind;
    cls->has_arena = 1;

    int rc = -EIO;
    if (leasec__ctx_fault(cls->ctx)) {
        leasec__ctx_log(cls->ctx, "%s arena %u: settings: injected failure",
                        lt_class_name(cls->mem_class), ind);
        goto fail_arena;
    }
    /* Never purge on a timer: the pages must stay populated. */
    ssize_t never = -1;
    rc = leasec__arena_ctl(cls, "dirty_decay_ms", &never, sizeof(never));
    if (rc < 0)
        goto fail_arena;
    rc = leasec__arena_ctl(cls, "muzzy_decay_ms", &never, sizeof(never));
    if (rc < 0)
        goto fail_arena;
    size_t largest = 0;
    for (unsigned i = 0; i < cls->nsegs; i++)
        if (cls->segs[i].size > largest)
            largest = cls->segs[i].size;
    rc = leasec__arena_ctl(cls, "retain_grow_limit", &largest, sizeof(largest));
    if (rc < 0)
        goto fail_arena;
    rc = leasec__arena_prime(cls);
    if (rc < 0)
        goto fail_arena;
    return 0;

fail_arena:
    leasec__arena_destroy(cls);
    return rc;
}

void leasec__arena_destroy(struct leasec__class *cls)
{
    if (!cls->has_arena)
        return;
    /* Destruction frees every live allocation, runs the hooks on them
     * (dalloc, decommit and purges are refused, so they are retained) and
     * then calls destroy on each retained extent: all hooks touch only the
     * segment table, which is why the segments go after the arena. */
    char name[64];
    snprintf(name, sizeof(name), "arena.%u.destroy", cls->arena_ind);
    int err = mallctl(name, NULL, NULL, NULL, 0);
    if (err)
        leasec__ctx_log(cls->ctx, "%s arena %u: %s: mallctl: %s (its metadata leaks)",
                        lt_class_name(cls->mem_class), cls->arena_ind, name, strerror(err));
    cls->has_arena = 0;
}
