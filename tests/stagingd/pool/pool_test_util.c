/* Helpers shared by the staging pool's suite: see pool_test_util.h. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "huge_pages.h"
#include "pool_test_util.h"

uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

struct log_capture captured;

void capture_log(void *ctx, int level, const char *subsys, const char *line)
{
    (void)level, (void)subsys;
    struct log_capture *c = ctx;
    c->lines++;
    snprintf(c->last, sizeof(c->last), "%s", line);
    size_t used = strlen(c->all);
    snprintf(c->all + used, sizeof(c->all) - used, "%s\n", line);
}

struct leasec_pool_config small_config(void)
{
    struct leasec_pool_config c = {0};
    c.class_bytes[LT_CLASS_STAGED] = 6 * MIB; /* a 4 MiB and a 2 MiB segment */
    c.class_bytes[LT_CLASS_PINNED] = 16 * MIB;
    c.class_bytes[LT_CLASS_MAPPED] = 4 * MIB;
    c.segment_bytes = 4 * MIB; /* 2 + 4 + 1 segments */
    c.prefault_threads = 2;
    /* Base pages: the same segments whether or not this machine has huge
     * pages reserved (the page-backing tests below choose their own). */
    c.pages = LEASEC_POOL_PAGES_SMALL;
    memset(&captured, 0, sizeof(captured));
    c.log = (struct leasec_log){capture_log, &captured, LEASEC_LOG_DEBUG};
    return c;
}

struct leasec_pool *create_or_fail(const struct leasec_pool_config *c)
{
    struct leasec_pool *pool = NULL;
    int rc = leasec_pool_create(c, &pool);
    ck_assert_msg(rc == 0, "leasec_pool_create: %s; log:\n%s", strerror(-rc), captured.all);
    ck_assert_ptr_nonnull(pool);
    return pool;
}

int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

int count_pool_mappings(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    ck_assert_ptr_nonnull(f);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof(line), f))
        if (strstr(line, "memfd:sd-pool-"))
            n++;
    fclose(f);
    return n;
}

/* kB of the mapping at @base that are in this process's page tables: Rss,
 * plus the hugetlb pages smaps counts apart from it. */
long mapping_resident_kb(const void *base)
{
    long rss = test_smaps_kb(base, "Rss:");
    if (rss < 0)
        return -1;
    return rss + test_smaps_kb(base, "Shared_Hugetlb:") + test_smaps_kb(base, "Private_Hugetlb:");
}

/* Fills a buffer with a pattern that depends on @key and on the position. */
void pattern_fill(void *p, size_t len, uint64_t key)
{
    uint64_t *w = p;
    size_t words = len / 8;
    for (size_t i = 0; i < words; i++)
        w[i] = key ^ (i * 0x9E3779B97F4A7C15ull);
    unsigned char *b = p;
    for (size_t i = words * 8; i < len; i++)
        b[i] = (unsigned char)(key >> ((i % 8) * 8)) ^ 0x5a;
}

/* Index of the first wrong byte, or -1. */
long pattern_check(const void *p, size_t len, uint64_t key)
{
    const uint64_t *w = p;
    size_t words = len / 8;
    for (size_t i = 0; i < words; i++)
        if (w[i] != (key ^ (i * 0x9E3779B97F4A7C15ull)))
            return (long)(i * 8);
    const unsigned char *b = p;
    for (size_t i = words * 8; i < len; i++)
        if (b[i] != ((unsigned char)(key >> ((i % 8) * 8)) ^ 0x5a))
            return (long)i;
    return -1;
}

unsigned live_lower_bound(const struct live_set *s, uintptr_t addr)
{
    unsigned lo = 0, hi = s->n;
    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;
        if ((uintptr_t)s->v[mid].buf.base < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void live_insert(struct live_set *s, const struct live *item)
{
    ck_assert_uint_lt(s->n, s->cap);
    uintptr_t a = (uintptr_t)item->buf.base;
    unsigned i = live_lower_bound(s, a);
    if (i > 0) {
        const struct leasec_pool_buf *prev = &s->v[i - 1].buf;
        ck_assert_msg((uintptr_t)prev->base + prev->len <= a,
                      "buffer %p+%zu overlaps the live buffer %p+%zu before it", item->buf.base,
                      item->buf.len, prev->base, prev->len);
    }
    if (i < s->n)
        ck_assert_msg(a + item->buf.len <= (uintptr_t)s->v[i].buf.base,
                      "buffer %p+%zu overlaps the live buffer %p+%zu after it", item->buf.base,
                      item->buf.len, s->v[i].buf.base, s->v[i].buf.len);
    memmove(&s->v[i + 1], &s->v[i], (s->n - i) * sizeof(*s->v));
    s->v[i] = *item;
    s->n++;
}

void live_remove(struct live_set *s, unsigned i)
{
    memmove(&s->v[i], &s->v[i + 1], (s->n - i - 1) * sizeof(*s->v));
    s->n--;
}

/* Checks one fresh buffer against the pool's segment table. */
void check_buf_placement(struct leasec_pool *pool, const struct leasec_pool_buf *b,
                         enum lt_class mem_class, size_t size)
{
    ck_assert_ptr_nonnull(b->base);
    ck_assert_uint_eq(b->len, size);
    ck_assert_int_eq(b->mem_class, mem_class);
    ck_assert_uint_eq((uintptr_t)b->base % LEASEC_POOL_BUF_ALIGN, 0);
    uint32_t id = 0;
    uint64_t off = 0;
    ck_assert_int_eq(leasec_pool_locate(pool, b->base, b->len, &id, &off), 0);
    ck_assert_uint_eq(id, b->segment_id);
    ck_assert_uint_eq(off, b->offset);
    struct leasec_pool_segment seg;
    ck_assert_int_eq(leasec_pool_segment_find(pool, id, &seg), 0);
    ck_assert_msg(seg.mem_class == mem_class, "%s buffer placed in a %s segment",
                  lt_class_name(mem_class), lt_class_name(seg.mem_class));
    ck_assert_uint_le(off + size, seg.size);
    ck_assert_ptr_eq((unsigned char *)seg.base + off, b->base);
}

size_t random_size(uint64_t *rng)
{
    uint64_t r = rng_next(rng);
    if (r % 64 == 0) /* now and then a large one, up to 3 MiB */
        return 1 + (size_t)(rng_next(rng) % (3 * MIB));
    unsigned bits = (unsigned)(rng_next(rng) % 18); /* 1 B .. 256 KiB, log-uniform */
    return 1 + (size_t)(rng_next(rng) % ((uint64_t)1 << bits));
}

void check_accounting(struct leasec_pool *pool, const struct random_run *r)
{
    for (int k = LT_CLASS_STAGED; k <= LT_CLASS_MAPPED; k++) {
        struct leasec_pool_class_stats st;
        ck_assert_int_eq(leasec_pool_stats(pool, (enum lt_class)k, &st), 0);
        ck_assert_uint_eq(st.in_use, r->in_use[k]);
        ck_assert_uint_eq(st.live_buffers, r->live[k]);
        ck_assert_uint_eq(st.high_water, r->high[k]);
        ck_assert_uint_eq(st.alloc_failures, r->failures[k]);
        ck_assert_uint_le(st.carved, st.capacity);
        ck_assert_uint_le(st.in_use, st.carved);
    }
}

void free_live(struct leasec_pool *pool, struct random_run *r, unsigned i)
{
    struct live *l = &r->set.v[i];
    long bad = pattern_check(l->buf.base, l->buf.len, l->key);
    ck_assert_msg(bad < 0,
                  "buffer %p+%zu (%s) lost its pattern at byte %ld: another buffer "
                  "overlapped it (seed 0x%llx)",
                  l->buf.base, l->buf.len, lt_class_name(l->buf.mem_class), bad,
                  (unsigned long long)SEED);
    ck_assert_int_eq(leasec_pool_free(pool, &l->buf), 0);
    r->in_use[l->buf.mem_class] -= l->buf.len;
    r->live[l->buf.mem_class]--;
    live_remove(&r->set, i);
}