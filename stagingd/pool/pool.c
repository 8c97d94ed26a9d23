/* The staging pool: configuration, life cycle, buffers and accounting. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "leasec/log.h"
#include "pool_internal.h"

#define SD_GIB ((uint64_t)1 << 30)
#define SD_MIB ((uint64_t)1 << 20)
#define LEASEC_POOL_MAX_PREFAULT_THREADS 64u

/* No thread cache: a freed buffer goes straight back to its arena, and
 * destroying the arena finds nothing cached elsewhere. */
#define SD_BUF_LG_ALIGN 12
_Static_assert(((size_t)1 << SD_BUF_LG_ALIGN) == LEASEC_POOL_BUF_ALIGN, "SD_BUF_LG_ALIGN");
#define SD_BUF_FLAGS (MALLOCX_TCACHE_NONE | MALLOCX_LG_ALIGN(SD_BUF_LG_ALIGN))

/* --- fault injection --- */

static atomic_uint sd_fault_armed;  /* 0: disarmed */
static atomic_uint sd_fault_passed; /* checkpoints reached since the last arm */

unsigned leasec__pool_fault_arm(unsigned nth)
{
    unsigned passed = atomic_exchange(&sd_fault_passed, 0);
    atomic_store(&sd_fault_armed, nth);
    return passed;
}

static int leasec__pool_fault_hit(void)
{
    unsigned n = atomic_fetch_add(&sd_fault_passed, 1) + 1;
    unsigned armed = atomic_load(&sd_fault_armed);
    return armed != 0 && n == armed;
}

/* --- configuration --- */

static const struct base_enum leasec__pool_pages_names[] = {
    {"auto", LEASEC_POOL_PAGES_AUTO},
    {"small", LEASEC_POOL_PAGES_SMALL},
    {"huge", LEASEC_POOL_PAGES_HUGE},
    {"thp", LEASEC_POOL_PAGES_THP},
    {NULL, 0},
};

const char *leasec_pool_pages_name(enum leasec_pool_pages pages)
{
    const char *name = base_enum_name(leasec__pool_pages_names, (int)pages);
    return name ? name : "invalid";
}

int leasec_pool_pages_parse(const char *text, enum leasec_pool_pages *pages_p)
{
    int v = 0;
    int rc = base_parse_enum(text, leasec__pool_pages_names, &v, NULL, 0);
    if (rc == 0)
        *pages_p = (enum leasec_pool_pages)v;
    return rc;
}

static int leasec__class_valid(enum lt_class mem_class)
{
    return lt_class_is_valid((uint32_t)mem_class);
}

static uint64_t leasec__clamp_align(uint64_t v, uint64_t lo, uint64_t hi)
{
    if (v > hi)
        v = hi;
    v &= ~(LEASEC_POOL_SEGMENT_ALIGN - 1);
    return v < lo ? lo : v;
}

static int leasec__phys_bytes(uint64_t *bytes_p)
{
    long pages = sysconf(_SC_PHYS_PAGES);
    long page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0)
        return errno ? -errno : -EINVAL;
    *bytes_p = (uint64_t)pages * (uint64_t)page;
    return 0;
}

int leasec_pool_config_default(struct leasec_pool_config *config_p)
{
    uint64_t phys = 0;
    int rc = leasec__phys_bytes(&phys);
    if (rc < 0)
        return rc;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    struct leasec_pool_config c = {0};
    /* Pinned memory is what the GPU copies from at full speed, but every
     * byte of it is locked away from the rest of the machine. */
    c.class_bytes[LT_CLASS_PINNED] =
        leasec__clamp_align(phys / 8, LEASEC_POOL_SEGMENT_ALIGN, 64 * SD_GIB);
    c.class_bytes[LT_CLASS_STAGED] =
        leasec__clamp_align(phys / 16, LEASEC_POOL_SEGMENT_ALIGN, 32 * SD_GIB);
    /* Zero-copy is for doorbells and single-pass scans: small. */
    c.class_bytes[LT_CLASS_MAPPED] =
        leasec__clamp_align(phys / 512, LEASEC_POOL_SEGMENT_ALIGN, 256 * SD_MIB);
    c.segment_bytes = SD_GIB;
    c.prefault_threads = cores < 1 ? 1 : cores > 8 ? 8 : (unsigned)cores;
    *config_p = c;
    return 0;
}

static int leasec__config_check(const struct leasec_pool_config *c)
{
    const struct leasec__pool_ctx log_only = {.log = leasec__log_sink(&c->log)};
    const struct leasec__pool_ctx *ctx = &log_only;
    if (c->segment_bytes == 0 || c->segment_bytes % LEASEC_POOL_SEGMENT_ALIGN) {
        leasec__ctx_log(
            ctx, "config: expected segment_bytes a positive multiple of %llu, found %llu",
            (unsigned long long)LEASEC_POOL_SEGMENT_ALIGN, (unsigned long long)c->segment_bytes);
        return -EINVAL;
    }
    if (c->prefault_threads == 0 || c->prefault_threads > LEASEC_POOL_MAX_PREFAULT_THREADS) {
        leasec__ctx_log(ctx, "config: expected prefault_threads in 1..%u, found %u",
                        LEASEC_POOL_MAX_PREFAULT_THREADS, c->prefault_threads);
        return -EINVAL;
    }
    if (c->flags & ~(unsigned)(LEASEC_POOL_PREFAULT_TOUCH | LEASEC_POOL_AGENT_WRITES |
                               LEASEC_POOL_MAPPED_WRITABLE)) {
        leasec__ctx_log(ctx, "config: unknown flags 0x%x", c->flags);
        return -EINVAL;
    }
    if (c->pages != LEASEC_POOL_PAGES_AUTO && c->pages != LEASEC_POOL_PAGES_SMALL &&
        c->pages != LEASEC_POOL_PAGES_HUGE && c->pages != LEASEC_POOL_PAGES_THP) {
        leasec__ctx_log(ctx,
                        "config: expected pages auto (0), small (1), huge (2) or thp (3), found %d",
                        (int)c->pages);
        return -EINVAL;
    }
    uint64_t total = 0;
    for (int k = LT_CLASS_STAGED; k <= LT_CLASS_MAX; k++) {
        uint64_t bytes = c->class_bytes[k];
        if (bytes % LEASEC_POOL_SEGMENT_ALIGN) {
            leasec__ctx_log(ctx, "config: expected %s bytes a multiple of %llu, found %llu",
                            lt_class_name((uint32_t)k),
                            (unsigned long long)LEASEC_POOL_SEGMENT_ALIGN,
                            (unsigned long long)bytes);
            return -EINVAL;
        }
        if (total + bytes < total) {
            leasec__ctx_log(ctx, "config: class sizes overflow 64 bits");
            return -EINVAL;
        }
        total += bytes;
    }
    if (total == 0) {
        leasec__ctx_log(ctx, "config: expected at least one class with bytes, found none");
        return -EINVAL;
    }
    uint64_t phys = 0;
    int rc = leasec__phys_bytes(&phys);
    if (rc < 0) {
        leasec__ctx_log(ctx, "config: cannot read physical memory size: %s", strerror(-rc));
        return rc;
    }
    /* Every byte is populated up front; more than the machine has would
     * end in the OOM killer, not in an error. */
    if (total > phys) {
        leasec__ctx_log(
            ctx,
            "config: classes add up to %llu bytes (STAGED %llu, PINNED %llu, MAPPED %llu), "
            "more than the %llu bytes of physical memory",
            (unsigned long long)total, (unsigned long long)c->class_bytes[LT_CLASS_STAGED],
            (unsigned long long)c->class_bytes[LT_CLASS_PINNED],
            (unsigned long long)c->class_bytes[LT_CLASS_MAPPED], (unsigned long long)phys);
        return -ENOMEM;
    }
    return 0;
}

/* --- life cycle --- */

static int leasec__seg_cmp(const void *a, const void *b)
{
    const struct leasec__segment *x = *(struct leasec__segment *const *)a;
    const struct leasec__segment *y = *(struct leasec__segment *const *)b;
    return (x->base > y->base) - (x->base < y->base);
}

/* Undoes whatever leasec_pool_create got to: arenas first (their destruction
 * runs the hooks over the segments), then segments, then memory. */
static void leasec__pool_teardown(struct leasec_pool *pool)
{
    for (int k = LT_CLASS_STAGED; k <= LT_CLASS_MAX; k++)
        leasec__arena_destroy(&pool->classes[k]);
    for (unsigned i = 0; pool->segs && i < pool->nsegs; i++)
        leasec__segment_destroy(&pool->segs[i]);
    for (int k = LT_CLASS_STAGED; k < pool->locks_ready; k++) {
        pthread_mutex_destroy(&pool->classes[k].carve_lock);
        pthread_mutex_destroy(&pool->classes[k].stats_lock);
    }
    free(pool->by_addr);
    free(pool->segs);
    free(pool);
}

int leasec_pool_create(const struct leasec_pool_config *config, struct leasec_pool **pool_p)
{
    if (!config || !pool_p)
        return -EINVAL;
    int rc = leasec__config_check(config);
    if (rc < 0)
        return rc;

    struct leasec_pool *pool = calloc(1, sizeof(*pool));
    if (!pool) {
        const struct leasec__pool_ctx log_only = {.log = leasec__log_sink(&config->log)};
        leasec__ctx_log(&log_only, "creating pool: out of memory");
        return -ENOMEM;
    }
    pool->ctx = (struct leasec__pool_ctx){
        .page = (size_t)sysconf(_SC_PAGESIZE),
        .prefault_threads = config->prefault_threads,
        .flags = config->flags,
        .pages = config->pages,
        .log = leasec__log_sink(&config->log),
        .fault_hit = leasec__pool_fault_hit,
    };
    pool->locks_ready = LT_CLASS_STAGED;

    rc = -ENOMEM;
    unsigned nsegs = 0;
    for (int k = LT_CLASS_STAGED; k <= LT_CLASS_MAX; k++) {
        struct leasec__class *cls = &pool->classes[k];
        cls->ctx = &pool->ctx;
        cls->mem_class = (enum lt_class)k;
        cls->capacity = config->class_bytes[k];
        cls->first_seg = nsegs;
        cls->nsegs =
            (unsigned)((cls->capacity + config->segment_bytes - 1) / config->segment_bytes);
        nsegs += cls->nsegs;
        if (pthread_mutex_init(&cls->carve_lock, NULL) != 0) {
            leasec__ctx_log(&pool->ctx, "creating pool: pthread_mutex_init failed");
            goto fail;
        }
        if (pthread_mutex_init(&cls->stats_lock, NULL) != 0) {
            pthread_mutex_destroy(&cls->carve_lock);
            leasec__ctx_log(&pool->ctx, "creating pool: pthread_mutex_init failed");
            goto fail;
        }
        pool->locks_ready = k + 1;
    }
    pool->segs = calloc(nsegs, sizeof(*pool->segs));
    pool->by_addr = calloc(nsegs, sizeof(*pool->by_addr));
    if (!pool->segs || !pool->by_addr) {
        leasec__ctx_log(&pool->ctx, "creating pool: out of memory for %u segment records", nsegs);
        goto fail;
    }
    pool->nsegs = nsegs;
    for (unsigned i = 0; i < nsegs; i++)
        pool->segs[i].fd = -1;
    for (int k = LT_CLASS_STAGED; k <= LT_CLASS_MAX; k++)
        pool->classes[k].segs = pool->segs + pool->classes[k].first_seg;

    /* The classes the agent registers first: they get the hugetlb pages
     * while there are any. */
    static const enum lt_class creation_order[] = {LT_CLASS_PINNED, LT_CLASS_MAPPED,
                                                   LT_CLASS_STAGED};
    uint32_t id = 1;
    for (size_t o = 0; o < sizeof(creation_order) / sizeof(creation_order[0]); o++) {
        struct leasec__class *cls = &pool->classes[creation_order[o]];
        uint64_t left = cls->capacity;
        for (unsigned i = 0; i < cls->nsegs; i++) {
            uint64_t size = left < config->segment_bytes ? left : config->segment_bytes;
            rc = leasec__segment_create(&pool->ctx, &cls->segs[i], id++, cls->mem_class, size);
            if (rc < 0)
                goto fail;
            left -= size;
        }
    }
    for (unsigned i = 0; i < nsegs; i++)
        pool->by_addr[i] = &pool->segs[i];
    qsort(pool->by_addr, nsegs, sizeof(*pool->by_addr), leasec__seg_cmp);

    for (int k = LT_CLASS_STAGED; k <= LT_CLASS_MAX; k++) {
        if (pool->classes[k].nsegs == 0)
            continue;
        rc = leasec__arena_create(&pool->classes[k]);
        if (rc < 0)
            goto fail;
    }
    *pool_p = pool;
    return 0;

fail:
    leasec__pool_teardown(pool);
    return rc;
}

void leasec_pool_destroy(struct leasec_pool *pool)
{
    if (pool)
        leasec__pool_teardown(pool);
}

/* --- buffers --- */

static const struct leasec__segment *leasec__pool_find(const struct leasec_pool *pool,
                                                       uintptr_t addr)
{
    unsigned lo = 0, hi = pool->nsegs;
    while (lo < hi) { /* first segment whose base is above addr */
        unsigned mid = lo + (hi - lo) / 2;
        if ((uintptr_t)pool->by_addr[mid]->base <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    const struct leasec__segment *seg = pool->by_addr[lo - 1];
    return addr - (uintptr_t)seg->base < seg->size ? seg : NULL;
}

static int leasec__pool_locate_seg(const struct leasec_pool *pool, const void *ptr, size_t len,
                                   const struct leasec__segment **seg_p)
{
    if (len == 0)
        return -EINVAL;
    uintptr_t addr = (uintptr_t)ptr;
    const struct leasec__segment *seg = leasec__pool_find(pool, addr);
    if (!seg)
        return -ENOENT;
    if (len > seg->size - (addr - (uintptr_t)seg->base))
        return -ERANGE;
    *seg_p = seg;
    return 0;
}

int leasec_pool_locate(const struct leasec_pool *pool, const void *ptr, size_t len,
                       uint32_t *seg_id_p, uint64_t *offset_p)
{
    const struct leasec__segment *seg;
    int rc = leasec__pool_locate_seg(pool, ptr, len, &seg);
    if (rc < 0)
        return rc;
    *seg_id_p = seg->id;
    *offset_p = (uintptr_t)ptr - (uintptr_t)seg->base;
    return 0;
}

static void leasec__log_enomem(struct leasec__class *cls, size_t size, const char *why)
{
    pthread_mutex_lock(&cls->stats_lock);
    cls->alloc_failures++;
    uint64_t in_use = cls->in_use, live = cls->live_buffers;
    pthread_mutex_unlock(&cls->stats_lock);
    pthread_mutex_lock(&cls->carve_lock);
    uint64_t carved = cls->carved;
    pthread_mutex_unlock(&cls->carve_lock);
    leasec__ctx_log(cls->ctx,
                    "%s: cannot allocate %zu bytes: capacity %llu, in use %llu in %llu buffers, "
                    "carved %llu (%s)",
                    lt_class_name(cls->mem_class), size, (unsigned long long)cls->capacity,
                    (unsigned long long)in_use, (unsigned long long)live,
                    (unsigned long long)carved, why);
}

int leasec_pool_alloc(struct leasec_pool *pool, enum lt_class mem_class, size_t size,
                      struct leasec_pool_buf *buf_p)
{
    if (!pool || !buf_p || !leasec__class_valid(mem_class) || size == 0)
        return -EINVAL;
    struct leasec__class *cls = &pool->classes[mem_class];
    if (!cls->has_arena) {
        leasec__log_enomem(cls, size, "class not configured");
        return -ENOMEM;
    }
    void *p = mallocx(size, MALLOCX_ARENA(cls->arena_ind) | SD_BUF_FLAGS);
    if (!p && leasec__arena_consolidate(cls) == 0) {
        /* Free ranges sit in jemalloc's dirty set and its retained set,
         * which never coalesce with each other; the purge (refused by the
         * hooks, so the pages stay) moves all into one and merges them. */
        p = mallocx(size, MALLOCX_ARENA(cls->arena_ind) | SD_BUF_FLAGS);
    }
    if (!p) {
        leasec__log_enomem(cls, size, "no free range large enough in its segments");
        return -ENOMEM;
    }
    const struct leasec__segment *seg;
    if (leasec__pool_locate_seg(pool, p, size, &seg) < 0 || seg->mem_class != mem_class) {
        /* Only the hooks feed this arena, so this is a broken invariant. */
        leasec__ctx_log(&pool->ctx,
                        "%s: jemalloc returned %p (%zu bytes), expected memory of this class's "
                        "segments",
                        lt_class_name(mem_class), p, size);
        dallocx(p, SD_BUF_FLAGS);
        return -ENOTRECOVERABLE;
    }

    pthread_mutex_lock(&cls->stats_lock);
    cls->in_use += size;
    cls->live_buffers++;
    if (cls->in_use > cls->high_water)
        cls->high_water = cls->in_use;
    pthread_mutex_unlock(&cls->stats_lock);

    *buf_p = (struct leasec_pool_buf){
        .base = p,
        .len = size,
        .offset = (uintptr_t)p - (uintptr_t)seg->base,
        .segment_id = seg->id,
        .mem_class = mem_class,
    };
    return 0;
}

int leasec_pool_free(struct leasec_pool *pool, const struct leasec_pool_buf *buf)
{
    if (!pool || !buf)
        return -EINVAL;
    const struct leasec__segment *seg = NULL;
    const char *why = NULL;
    int rc = buf->base ? leasec__pool_locate_seg(pool, buf->base, buf->len, &seg) : -ENOENT;
    if (rc == -ENOENT || rc == -EINVAL)
        why = "not in any segment";
    else if (rc == -ERANGE)
        why = "runs past the end of its segment";
    else if (seg->id != buf->segment_id || seg->mem_class != buf->mem_class ||
             (uintptr_t)buf->base - (uintptr_t)seg->base != buf->offset)
        why = "segment, offset or class does not match";
    /* jemalloc knows the size class it handed out; a len of another size
     * class means a corrupt or foreign descriptor. */
    else if (sallocx(buf->base, 0) != nallocx(buf->len, SD_BUF_FLAGS))
        why = "size does not match the allocation";
    if (why) {
        leasec__ctx_log(&pool->ctx,
                        "free: expected a buffer of this pool, found %p len %zu segment %u offset "
                        "%llu class %s: %s",
                        buf->base, buf->len, buf->segment_id, (unsigned long long)buf->offset,
                        lt_class_name(buf->mem_class), why);
        return -EINVAL;
    }

    struct leasec__class *cls = &pool->classes[buf->mem_class];
    dallocx(buf->base, SD_BUF_FLAGS);
    pthread_mutex_lock(&cls->stats_lock);
    cls->in_use -= buf->len;
    cls->live_buffers--;
    pthread_mutex_unlock(&cls->stats_lock);
    return 0;
}

/* --- introspection --- */

int leasec_pool_stats(struct leasec_pool *pool, enum lt_class mem_class,
                      struct leasec_pool_class_stats *stats_p)
{
    if (!pool || !stats_p || !leasec__class_valid(mem_class))
        return -EINVAL;
    struct leasec__class *cls = &pool->classes[mem_class];
    struct leasec_pool_class_stats s = {.capacity = cls->capacity, .segments = cls->nsegs};
    for (unsigned i = 0; i < cls->nsegs; i++) { /* fixed since leasec_pool_create */
        const struct leasec__segment *seg = &cls->segs[i];
        s.huge_segments += seg->page_size == LEASEC_POOL_HUGE_PAGE;
        s.thp_segments += seg->thp_bytes == seg->size;
    }
    pthread_mutex_lock(&cls->stats_lock);
    s.in_use = cls->in_use;
    s.high_water = cls->high_water;
    s.live_buffers = cls->live_buffers;
    s.alloc_failures = cls->alloc_failures;
    pthread_mutex_unlock(&cls->stats_lock);
    pthread_mutex_lock(&cls->carve_lock);
    s.carved = cls->carved;
    s.extents = cls->extents;
    pthread_mutex_unlock(&cls->carve_lock);
    *stats_p = s;
    return 0;
}

unsigned leasec_pool_segment_count(const struct leasec_pool *pool)
{
    return pool ? pool->nsegs : 0;
}

static void leasec__segment_export(const struct leasec__segment *seg,
                                   struct leasec_pool_segment *out)
{
    *out = (struct leasec_pool_segment){.id = seg->id,
                                        .mem_class = seg->mem_class,
                                        .fd = seg->fd,
                                        .base = seg->base,
                                        .size = seg->size,
                                        .page_size = seg->page_size,
                                        .thp_bytes = seg->thp_bytes};
}

int leasec_pool_segment_at(const struct leasec_pool *pool, unsigned index,
                           struct leasec_pool_segment *segment_p)
{
    if (!pool || !segment_p)
        return -EINVAL;
    if (index >= pool->nsegs)
        return -ERANGE;
    leasec__segment_export(pool->by_addr[index], segment_p);
    return 0;
}

int leasec_pool_segment_find(const struct leasec_pool *pool, uint32_t seg_id,
                             struct leasec_pool_segment *segment_p)
{
    if (!pool || !segment_p)
        return -EINVAL;
    for (unsigned i = 0; i < pool->nsegs; i++) {
        if (pool->segs[i].id == seg_id) {
            leasec__segment_export(&pool->segs[i], segment_p);
            return 0;
        }
    }
    return -ENOENT;
}
