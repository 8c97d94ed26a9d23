/* The staging pool: sealed, populated memfd segments; buffers carved by the
 * per-class jemalloc arenas stay inside their class's segments, never
 * overlap, are accounted exactly; a full class refuses cleanly; nothing
 * leaks on any path. */
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
#include "pool_internal.h"

#include "stagingd/pool.h"

#define MIB ((uint64_t)1 << 20)
#define SEED 0x5d5eed2026ull

/* --- helpers --- */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

struct log_capture {
    unsigned lines;
    char last[512];
    char all[16384];
};
static struct log_capture captured;

static void capture_log(void *ctx, const char *line)
{
    struct log_capture *c = ctx;
    c->lines++;
    snprintf(c->last, sizeof(c->last), "%s", line);
    size_t used = strlen(c->all);
    snprintf(c->all + used, sizeof(c->all) - used, "%s\n", line);
}

static struct sd_pool_config small_config(void)
{
    struct sd_pool_config c = {0};
    c.class_bytes[LT_CLASS_STAGED] = 6 * MIB; /* a 4 MiB and a 2 MiB segment */
    c.class_bytes[LT_CLASS_PINNED] = 16 * MIB;
    c.class_bytes[LT_CLASS_MAPPED] = 4 * MIB;
    c.segment_bytes = 4 * MIB; /* 2 + 4 + 1 segments */
    c.prefault_threads = 2;
    /* Base pages: the same segments whether or not this machine has huge
     * pages reserved (the page-backing tests below choose their own). */
    c.pages = SD_POOL_PAGES_SMALL;
    memset(&captured, 0, sizeof(captured));
    c.log = capture_log;
    c.log_ctx = &captured;
    return c;
}

static struct sd_pool *create_or_fail(const struct sd_pool_config *c)
{
    struct sd_pool *pool = NULL;
    int rc = sd_pool_create(c, &pool);
    ck_assert_msg(rc == 0, "sd_pool_create: %s; log:\n%s", strerror(-rc), captured.all);
    ck_assert_ptr_nonnull(pool);
    return pool;
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

static int count_pool_mappings(void)
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
static long mapping_resident_kb(const void *base)
{
    long rss = test_smaps_kb(base, "Rss:");
    if (rss < 0)
        return -1;
    return rss + test_smaps_kb(base, "Shared_Hugetlb:") + test_smaps_kb(base, "Private_Hugetlb:");
}

/* Fills a buffer with a pattern that depends on @key and on the position. */
static void pattern_fill(void *p, size_t len, uint64_t key)
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
static long pattern_check(const void *p, size_t len, uint64_t key)
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

struct live {
    struct sd_pool_buf buf;
    uint64_t key;
};

/* Live buffers kept sorted by address, so an overlap shows up as a
 * neighbour that reaches past the start of the next one. */
struct live_set {
    struct live *v;
    unsigned n, cap;
};

static unsigned live_lower_bound(const struct live_set *s, uintptr_t addr)
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

static void live_insert(struct live_set *s, const struct live *item)
{
    ck_assert_uint_lt(s->n, s->cap);
    uintptr_t a = (uintptr_t)item->buf.base;
    unsigned i = live_lower_bound(s, a);
    if (i > 0) {
        const struct sd_pool_buf *prev = &s->v[i - 1].buf;
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

static void live_remove(struct live_set *s, unsigned i)
{
    memmove(&s->v[i], &s->v[i + 1], (s->n - i - 1) * sizeof(*s->v));
    s->n--;
}

/* Checks one fresh buffer against the pool's segment table. */
static void check_buf_placement(struct sd_pool *pool, const struct sd_pool_buf *b,
                                enum lt_class mem_class, size_t size)
{
    ck_assert_ptr_nonnull(b->base);
    ck_assert_uint_eq(b->len, size);
    ck_assert_int_eq(b->mem_class, mem_class);
    ck_assert_uint_eq((uintptr_t)b->base % SD_POOL_BUF_ALIGN, 0);
    uint32_t id = 0;
    uint64_t off = 0;
    ck_assert_int_eq(sd_pool_locate(pool, b->base, b->len, &id, &off), 0);
    ck_assert_uint_eq(id, b->segment_id);
    ck_assert_uint_eq(off, b->offset);
    struct sd_pool_segment seg;
    ck_assert_int_eq(sd_pool_segment_find(pool, id, &seg), 0);
    ck_assert_msg(seg.mem_class == mem_class, "%s buffer placed in a %s segment",
                  sd__class_label(mem_class).s, sd__class_label(seg.mem_class).s);
    ck_assert_uint_le(off + size, seg.size);
    ck_assert_ptr_eq((unsigned char *)seg.base + off, b->base);
}

/* --- segments --- */

START_TEST(test_segments_are_sealed_memfds_of_one_class)
{
    struct sd_pool_config c = small_config();
    struct sd_pool *pool = create_or_fail(&c);
    ck_assert_uint_eq(sd_pool_segment_count(pool), 7);

    uint64_t rng = SEED;
    uint64_t per_class[LT_CLASS_MAPPED + 1] = {0};
    unsigned segs_per_class[LT_CLASS_MAPPED + 1] = {0};
    uintptr_t prev_end = 0;
    for (unsigned i = 0; i < sd_pool_segment_count(pool); i++) {
        struct sd_pool_segment s;
        ck_assert_int_eq(sd_pool_segment_at(pool, i, &s), 0);
        ck_assert_uint_ne(s.id, 0);
        ck_assert_uint_ge((uintptr_t)s.base, prev_end); /* ordered and disjoint */
        prev_end = (uintptr_t)s.base + s.size;
        ck_assert_uint_eq(s.size % SD_POOL_SEGMENT_ALIGN, 0);
        ck_assert_uint_eq((uintptr_t)s.base % SD_POOL_SEGMENT_ALIGN, 0);
        per_class[s.mem_class] += s.size;
        segs_per_class[s.mem_class]++;

        /* A memfd named after its class. */
        char path[64], target[256], want[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%d", s.fd);
        ssize_t n = readlink(path, target, sizeof(target) - 1);
        ck_assert_int_gt(n, 0);
        target[n] = 0;
        int len = snprintf(want, sizeof(want), "/memfd:sd-pool-%s-%u",
                           sd__class_label(s.mem_class).s, s.id);
        for (int j = 15; j < len; j++) /* STAGED -> staged */
            if (want[j] >= 'A' && want[j] <= 'Z')
                want[j] = (char)(want[j] | 0x20);
        ck_assert_msg(strncmp(target, want, strlen(want)) == 0, "fd %d is '%s', expected '%s'",
                      s.fd, target, want);
        ck_assert_int_ne(fcntl(s.fd, F_GETFD) & FD_CLOEXEC, 0);

        struct stat st;
        ck_assert_int_eq(fstat(s.fd, &st), 0);
        ck_assert_int_eq(st.st_size, (off_t)s.size);

        /* Sealed: no shrink, no grow, no further seals. */
        int seals = fcntl(s.fd, F_GET_SEALS);
        ck_assert_int_eq(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
                         F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
        ck_assert_int_eq(seals & F_SEAL_WRITE, 0);
        /* hugetlb files only take whole-page sizes: shrink by one page. */
        struct statfs sfs;
        ck_assert_int_eq(fstatfs(s.fd, &sfs), 0);
        ck_assert_msg((s.page_size == SD_POOL_HUGE_PAGE) == (sfs.f_type == HUGETLBFS_MAGIC),
                      "segment %u: page size %llu, file system magic %#lx", s.id,
                      (unsigned long long)s.page_size, (unsigned long)sfs.f_type);
        errno = 0;
        ck_assert_int_eq(ftruncate(s.fd, (off_t)(s.size - s.page_size)), -1);
        ck_assert_int_eq(errno, EPERM);
        errno = 0;
        ck_assert_int_eq(ftruncate(s.fd, (off_t)s.size * 2), -1);
        ck_assert_int_eq(errno, EPERM);
        errno = 0;
        ck_assert_int_eq(fcntl(s.fd, F_ADD_SEALS, F_SEAL_WRITE), -1);
        ck_assert_int_eq(errno, EPERM);

        /* The mapping is the fd's memory: what the pool writes, a peer
         * reading the fd sees. */
        for (int k = 0; k < 16; k++) {
            uint64_t off = rng_next(&rng) % (s.size - 8);
            uint64_t v = rng_next(&rng), got = 0;
            memcpy((unsigned char *)s.base + off, &v, 8);
            ck_assert_int_eq(pread(s.fd, &got, 8, (off_t)off), 8);
            ck_assert_uint_eq(got, v);
        }

        struct sd_pool_segment again;
        ck_assert_int_eq(sd_pool_segment_find(pool, s.id, &again), 0);
        ck_assert_int_eq(again.fd, s.fd);
        ck_assert_ptr_eq(again.base, s.base);
    }
    ck_assert_int_eq(sd_pool_segment_at(pool, 7, &(struct sd_pool_segment){0}), -ERANGE);
    ck_assert_int_eq(sd_pool_segment_find(pool, 9999, &(struct sd_pool_segment){0}), -ENOENT);
    for (int k = LT_CLASS_STAGED; k <= LT_CLASS_MAPPED; k++) {
        struct sd_pool_class_stats st;
        ck_assert_int_eq(sd_pool_stats(pool, (enum lt_class)k, &st), 0);
        ck_assert_uint_eq(per_class[k], c.class_bytes[k]);
        ck_assert_uint_eq(st.capacity, c.class_bytes[k]);
        ck_assert_uint_eq(st.segments, segs_per_class[k]);
        /* Each segment went to jemalloc whole, in one piece, and nothing
         * else did: its own metadata stays out of the segments. */
        ck_assert_uint_eq(st.carved, st.capacity);
        ck_assert_uint_eq(st.extents, st.segments);
        ck_assert_uint_eq(st.in_use, 0);
    }
    sd_pool_destroy(pool);
}
END_TEST

static void check_populated(unsigned flags)
{
    struct sd_pool_config c = small_config();
    c.flags = flags;
    c.prefault_threads = 3;
    struct sd_pool *pool = create_or_fail(&c);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    for (unsigned i = 0; i < sd_pool_segment_count(pool); i++) {
        struct sd_pool_segment s;
        ck_assert_int_eq(sd_pool_segment_at(pool, i, &s), 0);
        size_t pages = s.size / page;
        unsigned char *vec = malloc(pages);
        ck_assert_ptr_nonnull(vec);
        ck_assert_int_eq(mincore(s.base, s.size, vec), 0);
        size_t resident = 0;
        for (size_t p = 0; p < pages; p++)
            resident += vec[p] & 1;
        free(vec);
        ck_assert_msg(resident == pages, "segment %u: %zu of %zu pages resident", s.id, resident,
                      pages);
        /* Mapped in this process's page tables, not only in the page cache. */
        long rss = mapping_resident_kb(s.base);
        ck_assert_msg(rss == (long)(s.size / 1024),
                      "segment %u: Rss + Hugetlb %ld kB, expected %llu kB", s.id, rss,
                      (unsigned long long)(s.size / 1024));
    }
    sd_pool_destroy(pool);
}

START_TEST(test_segments_are_populated_by_madvise)
{
    check_populated(0);
    /* On this kernel (5.14+) populate works and says nothing. */
    if (strstr(captured.all, "MADV_POPULATE_WRITE not supported"))
        ck_assert_uint_eq(captured.lines, 1);
    else
        ck_assert_uint_eq(captured.lines, 0);
}
END_TEST

START_TEST(test_segments_are_populated_by_touching)
{
    check_populated(SD_POOL_PREFAULT_TOUCH);
    ck_assert_uint_eq(captured.lines, 0);
}
END_TEST

/* --- buffers --- */

struct random_run {
    uint64_t rng;
    struct live_set set;
    uint64_t in_use[LT_CLASS_MAPPED + 1];
    uint64_t live[LT_CLASS_MAPPED + 1];
    uint64_t high[LT_CLASS_MAPPED + 1];
    uint64_t failures[LT_CLASS_MAPPED + 1];
};

static size_t random_size(uint64_t *rng)
{
    uint64_t r = rng_next(rng);
    if (r % 64 == 0) /* now and then a large one, up to 3 MiB */
        return 1 + (size_t)(rng_next(rng) % (3 * MIB));
    unsigned bits = (unsigned)(rng_next(rng) % 18); /* 1 B .. 256 KiB, log-uniform */
    return 1 + (size_t)(rng_next(rng) % ((uint64_t)1 << bits));
}

static void check_accounting(struct sd_pool *pool, const struct random_run *r)
{
    for (int k = LT_CLASS_STAGED; k <= LT_CLASS_MAPPED; k++) {
        struct sd_pool_class_stats st;
        ck_assert_int_eq(sd_pool_stats(pool, (enum lt_class)k, &st), 0);
        ck_assert_uint_eq(st.in_use, r->in_use[k]);
        ck_assert_uint_eq(st.live_buffers, r->live[k]);
        ck_assert_uint_eq(st.high_water, r->high[k]);
        ck_assert_uint_eq(st.alloc_failures, r->failures[k]);
        ck_assert_uint_le(st.carved, st.capacity);
        ck_assert_uint_le(st.in_use, st.carved);
    }
}

static void free_live(struct sd_pool *pool, struct random_run *r, unsigned i)
{
    struct live *l = &r->set.v[i];
    long bad = pattern_check(l->buf.base, l->buf.len, l->key);
    ck_assert_msg(bad < 0,
                  "buffer %p+%zu (%s) lost its pattern at byte %ld: another buffer "
                  "overlapped it (seed 0x%llx)",
                  l->buf.base, l->buf.len, sd__class_label(l->buf.mem_class).s, bad,
                  (unsigned long long)SEED);
    ck_assert_int_eq(sd_pool_free(pool, &l->buf), 0);
    r->in_use[l->buf.mem_class] -= l->buf.len;
    r->live[l->buf.mem_class]--;
    live_remove(&r->set, i);
}

START_TEST(test_random_buffers_stay_in_their_class_never_overlap_and_add_up)
{
    struct sd_pool_config c = small_config();
    struct sd_pool *pool = create_or_fail(&c);
    struct random_run r = {.rng = SEED};
    r.set.cap = 8192;
    r.set.v = calloc(r.set.cap, sizeof(*r.set.v));
    ck_assert_ptr_nonnull(r.set.v);

    unsigned allocs = 0, frees = 0;
    for (unsigned op = 0; op < 12000; op++) {
        if (r.set.n == 0 || rng_next(&r.rng) % 100 < 55) {
            enum lt_class k = (enum lt_class)(LT_CLASS_STAGED + rng_next(&r.rng) % 3);
            size_t size = random_size(&r.rng);
            struct sd_pool_buf b;
            unsigned lines = captured.lines;
            int rc = sd_pool_alloc(pool, k, size, &b);
            if (rc == -ENOMEM) {
                r.failures[k]++;
                ck_assert_uint_eq(captured.lines, lines + 1);
                ck_assert_ptr_nonnull(strstr(captured.last, sd__class_label(k).s));
                continue;
            }
            ck_assert_msg(rc == 0, "alloc %zu %s: %s", size, sd__class_label(k).s, strerror(-rc));
            check_buf_placement(pool, &b, k, size);
            struct live l = {.buf = b, .key = rng_next(&r.rng)};
            pattern_fill(b.base, size, l.key);
            live_insert(&r.set, &l);
            r.in_use[k] += size;
            r.live[k]++;
            if (r.in_use[k] > r.high[k])
                r.high[k] = r.in_use[k];
            allocs++;
        } else {
            free_live(pool, &r, (unsigned)(rng_next(&r.rng) % r.set.n));
            frees++;
        }
        if (op % 500 == 0) {
            for (unsigned i = 0; i < r.set.n; i++)
                ck_assert_int_lt(
                    pattern_check(r.set.v[i].buf.base, r.set.v[i].buf.len, r.set.v[i].key), 0);
            check_accounting(pool, &r);
        }
    }
    check_accounting(pool, &r);
    /* The run must exercise the pool, including its limits. */
    ck_assert_uint_gt(allocs, 4000);
    ck_assert_uint_gt(r.failures[LT_CLASS_MAPPED], 0);
    while (r.set.n)
        free_live(pool, &r, (unsigned)(rng_next(&r.rng) % r.set.n));
    check_accounting(pool, &r);
    for (int k = LT_CLASS_STAGED; k <= LT_CLASS_MAPPED; k++)
        ck_assert_uint_eq(r.in_use[k], 0);
    free(r.set.v);
    sd_pool_destroy(pool);
}
END_TEST

START_TEST(test_full_class_refuses_with_enomem_and_recovers_after_frees)
{
    struct sd_pool_config c = small_config();
    c.class_bytes[LT_CLASS_STAGED] = 0;
    c.class_bytes[LT_CLASS_MAPPED] = 0;
    c.class_bytes[LT_CLASS_PINNED] = 8 * MIB; /* two 4 MiB segments */
    struct sd_pool *pool = create_or_fail(&c);
    const size_t chunk = 512 * 1024;
    struct sd_pool_buf bufs[64];
    unsigned n1 = 0, failures = 0;
    int rc;
    while ((rc = sd_pool_alloc(pool, LT_CLASS_PINNED, chunk, &bufs[n1])) == 0) {
        check_buf_placement(pool, &bufs[n1], LT_CLASS_PINNED, chunk);
        ck_assert_uint_lt(++n1, 64);
    }
    failures++;
    ck_assert_int_eq(rc, -ENOMEM);
    ck_assert_uint_le(n1 * chunk, 8 * MIB);
    ck_assert_uint_ge(n1, 8); /* at least half the class was usable */

    /* The message gives class, request, capacity and what is in use. */
    char want[128];
    ck_assert_ptr_nonnull(strstr(captured.last, "PINNED"));
    ck_assert_ptr_nonnull(strstr(captured.last, "524288 bytes"));
    ck_assert_ptr_nonnull(strstr(captured.last, "capacity 8388608"));
    snprintf(want, sizeof(want), "in use %zu", n1 * chunk);
    ck_assert_msg(strstr(captured.last, want), "'%s' lacks '%s'", captured.last, want);

    /* Larger than the class, larger than any segment: refused, no crash. */
    struct sd_pool_buf big;
    ck_assert_int_eq(sd_pool_alloc(pool, LT_CLASS_PINNED, 16 * MIB, &big), -ENOMEM);
    ck_assert_int_eq(sd_pool_alloc(pool, LT_CLASS_PINNED, SIZE_MAX / 2, &big), -ENOMEM);
    failures += 2;
    /* A class the config left out has nothing to give. */
    ck_assert_int_eq(sd_pool_alloc(pool, LT_CLASS_STAGED, 4096, &big), -ENOMEM);
    ck_assert_ptr_nonnull(strstr(captured.last, "STAGED"));
    ck_assert_ptr_nonnull(strstr(captured.last, "capacity 0"));

    /* One free makes room for exactly that buffer again. */
    ck_assert_int_eq(sd_pool_free(pool, &bufs[n1 - 1]), 0);
    ck_assert_int_eq(sd_pool_alloc(pool, LT_CLASS_PINNED, chunk, &bufs[n1 - 1]), 0);

    for (unsigned i = 0; i < n1; i++)
        ck_assert_int_eq(sd_pool_free(pool, &bufs[i]), 0);
    struct sd_pool_class_stats st;
    ck_assert_int_eq(sd_pool_stats(pool, LT_CLASS_PINNED, &st), 0);
    ck_assert_uint_eq(st.in_use, 0);
    ck_assert_uint_eq(st.live_buffers, 0);
    ck_assert_uint_eq(st.high_water, n1 * chunk);
    ck_assert_uint_eq(st.alloc_failures, failures);

    /* Nothing was purged or returned, so the same load fits again. */
    ck_assert_int_eq(sd_pool_alloc(pool, LT_CLASS_PINNED, 6 * MIB, &big), -ENOMEM);
    unsigned n2 = 0;
    while (n2 < 64 && sd_pool_alloc(pool, LT_CLASS_PINNED, chunk, &bufs[n2]) == 0)
        n2++;
    ck_assert_uint_ge(n2, n1);
    ck_assert_int_eq(sd_pool_stats(pool, LT_CLASS_PINNED, &st), 0);
    ck_assert_uint_le(st.carved, 8 * MIB);
    for (unsigned i = 0; i < n2; i++)
        ck_assert_int_eq(sd_pool_free(pool, &bufs[i]), 0);
    sd_pool_destroy(pool);
}
END_TEST

START_TEST(test_free_rejects_descriptors_that_are_not_pool_buffers)
{
    struct sd_pool_config c = small_config();
    struct sd_pool *pool = create_or_fail(&c);
    struct sd_pool_buf b;
    ck_assert_int_eq(sd_pool_alloc(pool, LT_CLASS_STAGED, 100000, &b), 0);
    struct sd_pool_buf bad = b;
    bad.segment_id++;
    ck_assert_int_eq(sd_pool_free(pool, &bad), -EINVAL);
    bad = b;
    bad.mem_class = LT_CLASS_PINNED;
    ck_assert_int_eq(sd_pool_free(pool, &bad), -EINVAL);
    bad = b;
    bad.len = 3 * 100000; /* another size class */
    ck_assert_int_eq(sd_pool_free(pool, &bad), -EINVAL);
    int local;
    bad.base = &local;
    ck_assert_int_eq(sd_pool_free(pool, &bad), -EINVAL);
    ck_assert_ptr_nonnull(strstr(captured.last, "not in any segment"));
    ck_assert_int_eq(sd_pool_alloc(pool, (enum lt_class)0, 10, &bad), -EINVAL);
    ck_assert_int_eq(sd_pool_alloc(pool, (enum lt_class)4, 10, &bad), -EINVAL);
    ck_assert_int_eq(sd_pool_alloc(pool, LT_CLASS_STAGED, 0, &bad), -EINVAL);

    struct sd_pool_class_stats st;
    ck_assert_int_eq(sd_pool_stats(pool, LT_CLASS_STAGED, &st), 0);
    ck_assert_uint_eq(st.in_use, 100000); /* the rejected frees changed nothing */
    ck_assert_int_eq(sd_pool_free(pool, &b), 0);
    ck_assert_int_eq(sd_pool_stats(pool, LT_CLASS_STAGED, &st), 0);
    ck_assert_uint_eq(st.in_use, 0);
    sd_pool_destroy(pool);
}
END_TEST

START_TEST(test_locate_maps_ranges_within_one_segment_only)
{
    struct sd_pool_config c = small_config();
    struct sd_pool *pool = create_or_fail(&c);
    uint64_t rng = SEED ^ 1;
    for (unsigned i = 0; i < sd_pool_segment_count(pool); i++) {
        struct sd_pool_segment s;
        ck_assert_int_eq(sd_pool_segment_at(pool, i, &s), 0);
        unsigned char *base = s.base;
        uint32_t id;
        uint64_t off;
        for (int k = 0; k < 200; k++) {
            uint64_t o = rng_next(&rng) % s.size;
            uint64_t len = 1 + rng_next(&rng) % (s.size - o);
            ck_assert_int_eq(sd_pool_locate(pool, base + o, len, &id, &off), 0);
            ck_assert_uint_eq(id, s.id);
            ck_assert_uint_eq(off, o);
            /* One byte too long crosses the end, whatever lies beyond it. */
            ck_assert_int_eq(sd_pool_locate(pool, base + o, s.size - o + 1, &id, &off), -ERANGE);
        }
        ck_assert_int_eq(sd_pool_locate(pool, base, s.size, &id, &off), 0);
        ck_assert_int_eq(sd_pool_locate(pool, base + s.size - 1, 1, &id, &off), 0);
        ck_assert_uint_eq(off, s.size - 1);
        ck_assert_int_eq(sd_pool_locate(pool, base, 0, &id, &off), -EINVAL);
        if (sd_pool_locate(pool, base - 1, 1, &id, &off) == 0)
            ck_assert_uint_ne(id, s.id); /* the previous segment, not this one */
        else
            ck_assert_int_eq(sd_pool_locate(pool, base - 1, 1, &id, &off), -ENOENT);
    }
    int local = 0;
    uint32_t id = 77;
    uint64_t off = 77;
    ck_assert_int_eq(sd_pool_locate(pool, &local, sizeof(local), &id, &off), -ENOENT);
    ck_assert_int_eq(sd_pool_locate(pool, NULL, 1, &id, &off), -ENOENT);
    ck_assert_uint_eq(id, 77); /* outputs untouched on failure */
    ck_assert_uint_eq(off, 77);
    sd_pool_destroy(pool);
}
END_TEST

/* --- the extent hooks --- */

/* The hooks alone, on a class of two 4 MiB segments mapped here, with no
 * arena: what jemalloc would be told. */
START_TEST(test_extent_hooks_carve_only_class_segments_and_keep_pages)
{
    static struct sd_pool fake;
    static struct sd__segment segs[2];
    memset(&fake, 0, sizeof(fake));
    fake.ctx.page = (size_t)sysconf(_SC_PAGESIZE);
    fake.segs = segs;
    fake.nsegs = 2;
    /* Adjacent in memory, as two real segments can happen to be. */
    unsigned char *area =
        mmap(NULL, 8 * MIB, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(area, MAP_FAILED);
    for (int i = 0; i < 2; i++)
        segs[i] = (struct sd__segment){.id = (uint32_t)i + 1,
                                       .mem_class = LT_CLASS_PINNED,
                                       .fd = -1,
                                       .base = area + i * 4 * MIB,
                                       .size = 4 * MIB};
    struct sd__class *cls = &fake.classes[LT_CLASS_PINNED];
    cls->ctx = &fake.ctx;
    cls->mem_class = LT_CLASS_PINNED;
    cls->segs = segs;
    cls->nsegs = 2;
    ck_assert_int_eq(pthread_mutex_init(&cls->carve_lock, NULL), 0);
    sd__arena_hooks_init(cls);
    extent_hooks_t *h = &cls->hooks;
    const unsigned ind = 4242;
    struct sd__segment *s0 = &segs[0], *s1 = &segs[1];
    uint64_t rng = SEED ^ 2;

    bool zero = false, commit = false;
    unsigned char *a = h->alloc(h, NULL, 64 * 1024, 4096, &zero, &commit, ind);
    ck_assert_ptr_eq(a, s0->base); /* both empty: the first one that fits */
    ck_assert(commit);
    ck_assert(!zero); /* no promise of zeroes unless asked */

    /* Alignment is honoured; best fit keeps using the fuller segment. */
    zero = commit = false;
    unsigned char *b = h->alloc(h, NULL, 8192, (size_t)1 << 20, &zero, &commit, ind);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq((uintptr_t)b % ((size_t)1 << 20), 0);
    ck_assert_ptr_eq(b, (unsigned char *)(((uintptr_t)s0->base + 64 * 1024 + (1 << 20) - 1) &
                                          ~(uintptr_t)((1 << 20) - 1)));

    /* new_addr: only exactly where a segment's free tail starts. */
    zero = commit = false;
    ck_assert_ptr_null(h->alloc(h, b + 3 * 4096, 4096, 4096, &zero, &commit, ind));
    ck_assert_ptr_null(h->alloc(h, a, 4096, 4096, &zero, &commit, ind));
    ck_assert(!commit); /* left alone on failure */
    unsigned char *tail = b + 8192;
    /* Asked for zeroes, gets zeroes even over a peer's scribbles. */
    for (int i = 0; i < 4096; i++)
        tail[i] = (unsigned char)(rng_next(&rng) | 1);
    zero = true;
    ck_assert_ptr_eq(h->alloc(h, tail, 4096, 4096, &zero, &commit, ind), tail);
    ck_assert(zero && commit);
    for (int i = 0; i < 4096; i++)
        ck_assert_uint_eq(tail[i], 0);

    /* Never more than a segment, never from outside the segments. */
    zero = commit = false;
    ck_assert_ptr_null(h->alloc(h, NULL, 4 * MIB + 4096, 4096, &zero, &commit, ind));
    unsigned char *whole = h->alloc(h, NULL, 4 * MIB, 4096, &zero, &commit, ind);
    ck_assert_ptr_eq(whole, s1->base); /* s0 no longer has 4 MiB */
    uint64_t left = s0->size - s0->carved;
    unsigned char *rest = s0->base + s0->carved;
    ck_assert_ptr_eq(h->alloc(h, NULL, left, 4096, &zero, &commit, ind), rest);
    ck_assert_ptr_null(h->alloc(h, NULL, 4096, 4096, &zero, &commit, ind));
    ck_assert_uint_eq(cls->carved, 8 * MIB); /* alignment gaps count as used */
    ck_assert_uint_eq(cls->extents, 5);

    /* Memory is never given back, decommitted or purged; commit succeeds. */
    ck_assert(h->dalloc(h, a, 64 * 1024, true, ind));
    ck_assert(h->decommit(h, a, 64 * 1024, 0, 4096, ind));
    ck_assert(h->purge_lazy(h, a, 64 * 1024, 0, 4096, ind));
    ck_assert(h->purge_forced(h, a, 64 * 1024, 0, 4096, ind));
    ck_assert(!h->commit(h, a, 64 * 1024, 0, 4096, ind));
    ck_assert(!h->split(h, a, 64 * 1024, 32 * 1024, 32 * 1024, true, ind));
    h->destroy(h, a, 64 * 1024, true, ind);
    a[0] = 1; /* still mapped */

    /* Merges: adjacent and within one segment only. */
    ck_assert(!h->merge(h, a, 32 * 1024, a + 32 * 1024, 32 * 1024, true, ind));
    ck_assert(h->merge(h, a, 32 * 1024, a + 64 * 1024, 32 * 1024, true, ind));
    unsigned char *end0 = s0->base + s0->size;
    ck_assert(h->merge(h, end0 - 4096, 4096, end0, 4096, true, ind));
    ck_assert(h->merge(h, s1->base - 4096, 4096, s1->base, 4096, true, ind));
    ck_assert(!h->merge(h, s1->base, 4096, s1->base + 4096, 4 * MIB - 4096, true, ind));

    /* The two segments touch: a merge across them is still refused. */
    ck_assert_ptr_eq(end0, s1->base);
    ck_assert(h->merge(h, s0->base, 4 * MIB, s1->base, 4 * MIB, true, ind));
    munmap(area, 8 * MIB);
    pthread_mutex_destroy(&cls->carve_lock);
}
END_TEST

/* jemalloc never merges extents that came from separate hook calls; the
 * pool hands each segment over in one piece, so after any churn every
 * segment can again hold the largest buffer that fits in it. */
START_TEST(test_each_segment_holds_its_largest_buffer_again_after_churn)
{
    struct sd_pool_config c = small_config();
    struct sd_pool *pool = create_or_fail(&c);
    /* 3.5 MiB: the largest jemalloc size class that, with its one-page pad,
     * fits a 4 MiB segment; 1.75 MiB likewise for 2 MiB. */
    const size_t big4 = 3584 * 1024, big2 = 1792 * 1024;
    struct sd_pool_buf bufs[600];
    uint64_t rng = SEED ^ 4;
    for (int round = 0; round < 2; round++) {
        unsigned n = 0;
        for (int op = 0; op < 4000; op++) {
            if (n < 600 && (n == 0 || rng_next(&rng) % 100 < 60)) {
                enum lt_class k = (enum lt_class)(LT_CLASS_STAGED + rng_next(&rng) % 3);
                if (sd_pool_alloc(pool, k, random_size(&rng), &bufs[n]) == 0)
                    n++;
            } else {
                unsigned i = (unsigned)(rng_next(&rng) % n);
                ck_assert_int_eq(sd_pool_free(pool, &bufs[i]), 0);
                bufs[i] = bufs[--n];
            }
        }
        while (n)
            ck_assert_int_eq(sd_pool_free(pool, &bufs[--n]), 0);

        unsigned used[16] = {0};
        struct sd_pool_buf big[7];
        unsigned nbig = 0;
        /* Large segments first: jemalloc may put a small buffer anywhere. */
        for (unsigned j = 0; j < 2 * sd_pool_segment_count(pool); j++) {
            struct sd_pool_segment s;
            unsigned i = j % sd_pool_segment_count(pool);
            ck_assert_int_eq(sd_pool_segment_at(pool, i, &s), 0);
            if ((j < sd_pool_segment_count(pool)) != (s.size == 4 * MIB))
                continue;
            size_t want = s.size == 4 * MIB ? big4 : big2;
            i = nbig++;
            int rc = sd_pool_alloc(pool, s.mem_class, want, &big[i]);
            ck_assert_msg(rc == 0, "round %d: %s buffer of %zu after churn: %s; log:\n%s", round,
                          sd__class_label(s.mem_class).s, want, strerror(-rc), captured.last);
            ck_assert_uint_lt(big[i].segment_id, 16);
            ck_assert_uint_eq(used[big[i].segment_id]++, 0); /* one per segment */
        }
        ck_assert_uint_eq(nbig, sd_pool_segment_count(pool));
        for (unsigned i = 0; i < nbig; i++)
            ck_assert_int_eq(sd_pool_free(pool, &big[i]), 0);
    }
    for (int k = LT_CLASS_STAGED; k <= LT_CLASS_MAPPED; k++) {
        struct sd_pool_class_stats st;
        ck_assert_int_eq(sd_pool_stats(pool, (enum lt_class)k, &st), 0);
        ck_assert_uint_eq(st.extents, st.segments); /* the hooks were never fed again */
        ck_assert_uint_eq(st.in_use, 0);
    }
    sd_pool_destroy(pool);
}
END_TEST

/* A short last segment whose size jemalloc would never ask for in one
 * piece (18 MiB) still gets its own extent, and no other segment is cut. */
START_TEST(test_odd_sized_last_segment_is_primed_on_its_own)
{
    struct sd_pool_config c = small_config();
    memset(c.class_bytes, 0, sizeof(c.class_bytes));
    c.class_bytes[LT_CLASS_PINNED] = 50 * MIB;
    c.segment_bytes = 32 * MIB; /* 32 + 18 */
    struct sd_pool *pool = create_or_fail(&c);
    ck_assert_uint_eq(captured.lines, 1); /* the 18 MiB tail notice */
    ck_assert_ptr_nonnull(strstr(captured.last, "PINNED"));
    struct sd_pool_class_stats st;
    ck_assert_int_eq(sd_pool_stats(pool, LT_CLASS_PINNED, &st), 0);
    ck_assert_uint_eq(st.extents, 2);
    ck_assert_uint_lt(st.carved, st.capacity);
    struct sd_pool_buf b28, b16, small;
    ck_assert_int_eq(sd_pool_alloc(pool, LT_CLASS_PINNED, 28 * MIB, &b28), 0);
    ck_assert_int_eq(sd_pool_alloc(pool, LT_CLASS_PINNED, 16 * MIB, &b16), 0);
    ck_assert_uint_ne(b28.segment_id, b16.segment_id);
    /* The rest of the 18 MiB segment is carved when needed. */
    ck_assert_int_eq(sd_pool_alloc(pool, LT_CLASS_PINNED, MIB, &small), 0);
    check_buf_placement(pool, &small, LT_CLASS_PINNED, MIB);
    ck_assert_int_eq(sd_pool_free(pool, &small), 0);
    ck_assert_int_eq(sd_pool_free(pool, &b16), 0);
    ck_assert_int_eq(sd_pool_free(pool, &b28), 0);
    sd_pool_destroy(pool);
}
END_TEST

/* --- failure and teardown --- */

START_TEST(test_failed_creation_leaks_no_fd_no_mapping_at_any_step)
{
    struct sd_pool_config c = small_config();
    int fds = count_fds();
    ck_assert_int_eq(count_pool_mappings(), 0);

    sd__pool_fault_arm(0);
    struct sd_pool *pool = create_or_fail(&c);
    sd_pool_destroy(pool);
    unsigned steps = sd__pool_fault_arm(0);
    /* Five per segment (four creating it, one priming it), two per arena. */
    ck_assert_uint_eq(steps, 7 * 5 + 3 * 2);

    for (unsigned k = 1; k <= steps; k++) {
        struct sd_pool *untouched = (struct sd_pool *)&c;
        sd__pool_fault_arm(k);
        int rc = sd_pool_create(&c, &untouched);
        sd__pool_fault_arm(0);
        ck_assert_msg(rc == -EIO, "failure injected at step %u: expected -EIO, found %d", k, rc);
        ck_assert_ptr_eq(untouched, (struct sd_pool *)&c);
        ck_assert_msg(count_fds() == fds, "step %u: %d fds open, expected %d", k, count_fds(), fds);
        ck_assert_msg(count_pool_mappings() == 0, "step %u: %d segment mappings left", k,
                      count_pool_mappings());
    }
    pool = create_or_fail(&c); /* still works, arena indexes recycled or not */
    struct sd_pool_buf b;
    ck_assert_int_eq(sd_pool_alloc(pool, LT_CLASS_MAPPED, 1000, &b), 0);
    sd_pool_destroy(pool);
    ck_assert_int_eq(count_fds(), fds);
}
END_TEST

START_TEST(test_running_out_of_fds_halfway_leaks_nothing)
{
    struct sd_pool_config c = small_config();
    int fds = count_fds();
    /* New fds take the lowest free numbers: allow exactly three of them. */
    static char open_fd[1 << 16];
    memset(open_fd, 0, sizeof(open_fd));
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' && atoi(e->d_name) < (int)sizeof(open_fd))
            open_fd[atoi(e->d_name)] = 1;
    closedir(d);
    int limit = 0;
    for (int free_slots = 0; free_slots < 3; limit++)
        free_slots += !open_fd[limit];
    struct rlimit old;
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
    struct rlimit tight = {.rlim_cur = (rlim_t)limit, .rlim_max = old.rlim_max};
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &tight), 0);

    struct sd_pool *pool = NULL;
    int rc = sd_pool_create(&c, &pool); /* needs 7 fds, gets at most 3 more */
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
    ck_assert_int_eq(rc, -EMFILE);
    ck_assert_ptr_null(pool);
    ck_assert_ptr_nonnull(strstr(captured.last, "memfd_create"));
    ck_assert_int_eq(count_fds(), fds);
    ck_assert_int_eq(count_pool_mappings(), 0);
}
END_TEST

START_TEST(test_bad_configs_are_refused_before_anything_is_created)
{
    int fds = count_fds();
    struct sd_pool *pool = NULL;
    struct sd_pool_config c = small_config();
    c.class_bytes[LT_CLASS_PINNED] = 16 * MIB + 4096;
    ck_assert_int_eq(sd_pool_create(&c, &pool), -EINVAL);
    ck_assert_ptr_nonnull(strstr(captured.last, "PINNED"));
    c = small_config();
    c.segment_bytes = 3 * MIB;
    ck_assert_int_eq(sd_pool_create(&c, &pool), -EINVAL);
    c = small_config();
    c.prefault_threads = 0;
    ck_assert_int_eq(sd_pool_create(&c, &pool), -EINVAL);
    c = small_config();
    c.flags = 0x80;
    ck_assert_int_eq(sd_pool_create(&c, &pool), -EINVAL);
    c = small_config();
    memset(c.class_bytes, 0, sizeof(c.class_bytes));
    ck_assert_int_eq(sd_pool_create(&c, &pool), -EINVAL);

    /* More than the machine has. */
    c = small_config();
    uint64_t phys = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    c.class_bytes[LT_CLASS_STAGED] = (phys / SD_POOL_SEGMENT_ALIGN + 1) * SD_POOL_SEGMENT_ALIGN;
    ck_assert_int_eq(sd_pool_create(&c, &pool), -ENOMEM);
    ck_assert_ptr_nonnull(strstr(captured.last, "physical memory"));
    ck_assert_ptr_null(pool);
    ck_assert_int_eq(count_fds(), fds);
    ck_assert_int_eq(count_pool_mappings(), 0);
}
END_TEST

START_TEST(test_destroy_with_live_buffers_releases_everything_but_dup_fds)
{
    int fds = count_fds();
    struct sd_pool_config c = small_config();
    struct sd_pool *pool = create_or_fail(&c);
    uint64_t rng = SEED ^ 3;
    struct sd_pool_buf b[40];
    for (int i = 0; i < 40; i++)
        ck_assert_int_eq(sd_pool_alloc(pool, (enum lt_class)(1 + i % 3),
                                       1 + rng_next(&rng) % (64 * 1024), &b[i]),
                         0);
    /* A peer's copy of a segment fd outlives the pool. */
    struct sd_pool_segment s;
    ck_assert_int_eq(sd_pool_segment_find(pool, b[0].segment_id, &s), 0);
    uint64_t v = rng_next(&rng), got = 0;
    memcpy(b[0].base, &v, sizeof(v));
    int peer = dup(s.fd);
    ck_assert_int_ge(peer, 0);
    sd_pool_destroy(pool);
    ck_assert_int_eq(count_fds(), fds + 1);
    ck_assert_int_eq(count_pool_mappings(), 0);
    ck_assert_int_eq(pread(peer, &got, sizeof(got), (off_t)b[0].offset), sizeof(got));
    ck_assert_uint_eq(got, v);
    close(peer);
    ck_assert_int_eq(count_fds(), fds);

    /* And a new pool starts afresh. */
    pool = create_or_fail(&c);
    ck_assert_int_eq(sd_pool_alloc(pool, LT_CLASS_PINNED, 3 * MIB, &b[0]), 0);
    check_buf_placement(pool, &b[0], LT_CLASS_PINNED, 3 * MIB);
    sd_pool_destroy(pool);
    sd_pool_destroy(NULL);
}
END_TEST

START_TEST(test_defaults_follow_machine_memory)
{
    struct sd_pool_config c;
    ck_assert_int_eq(sd_pool_config_default(&c), 0);
    uint64_t phys = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t total = 0;
    for (int k = LT_CLASS_STAGED; k <= LT_CLASS_MAPPED; k++) {
        ck_assert_uint_gt(c.class_bytes[k], 0);
        ck_assert_uint_eq(c.class_bytes[k] % SD_POOL_SEGMENT_ALIGN, 0);
        total += c.class_bytes[k];
    }
    ck_assert_uint_le(c.class_bytes[LT_CLASS_PINNED], phys / 8);
    ck_assert_uint_le(c.class_bytes[LT_CLASS_STAGED], phys / 16);
    ck_assert_uint_le(c.class_bytes[LT_CLASS_MAPPED], 256 * MIB);
    ck_assert_uint_le(c.class_bytes[LT_CLASS_MAPPED], c.class_bytes[LT_CLASS_STAGED]);
    ck_assert_uint_le(total, phys / 4);
    ck_assert_uint_eq(c.segment_bytes % SD_POOL_SEGMENT_ALIGN, 0);
    ck_assert_uint_ge(c.prefault_threads, 1);
    ck_assert_uint_le(c.prefault_threads, 8);
    ck_assert_ptr_null(c.log);
    ck_assert_uint_eq(c.flags, 0);
}
END_TEST

/* --- threads --- */

struct worker {
    struct sd_pool *pool;
    uint64_t seed;
    struct live_set set;
    int failed_frees;
};

static void *worker_run(void *arg)
{
    struct worker *w = arg;
    uint64_t rng = w->seed;
    for (int op = 0; op < 3000; op++) {
        if (w->set.n < w->set.cap && (w->set.n == 0 || rng_next(&rng) % 100 < 55)) {
            enum lt_class k = rng_next(&rng) % 2 ? LT_CLASS_PINNED : LT_CLASS_STAGED;
            size_t size = 1 + (size_t)(rng_next(&rng) % (96 * 1024));
            struct live l = {.key = rng_next(&rng)};
            if (sd_pool_alloc(w->pool, k, size, &l.buf) != 0)
                continue;
            pattern_fill(l.buf.base, size, l.key);
            w->set.v[w->set.n++] = l;
        } else {
            unsigned i = (unsigned)(rng_next(&rng) % w->set.n);
            struct live *l = &w->set.v[i];
            if (pattern_check(l->buf.base, l->buf.len, l->key) >= 0 ||
                sd_pool_free(w->pool, &l->buf) != 0)
                w->failed_frees++;
            w->set.v[i] = w->set.v[--w->set.n];
        }
    }
    return NULL;
}

START_TEST(test_concurrent_threads_get_disjoint_buffers)
{
    struct sd_pool_config c = small_config();
    struct sd_pool *pool = create_or_fail(&c);
    struct worker w[2];
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        w[i] = (struct worker){.pool = pool, .seed = SEED + (uint64_t)i * 7919};
        w[i].set.cap = 256;
        w[i].set.v = calloc(w[i].set.cap, sizeof(struct live));
        ck_assert_ptr_nonnull(w[i].set.v);
        ck_assert_int_eq(pthread_create(&t[i], NULL, worker_run, &w[i]), 0);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    /* Both threads' survivors together are still pairwise disjoint. */
    struct live_set all = {.cap = 512};
    all.v = calloc(all.cap, sizeof(*all.v));
    ck_assert_ptr_nonnull(all.v);
    uint64_t sum[LT_CLASS_MAPPED + 1] = {0};
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(w[i].failed_frees, 0);
        for (unsigned j = 0; j < w[i].set.n; j++) {
            live_insert(&all, &w[i].set.v[j]);
            sum[w[i].set.v[j].buf.mem_class] += w[i].set.v[j].buf.len;
        }
    }
    for (int k = LT_CLASS_STAGED; k <= LT_CLASS_MAPPED; k++) {
        struct sd_pool_class_stats st;
        ck_assert_int_eq(sd_pool_stats(pool, (enum lt_class)k, &st), 0);
        ck_assert_uint_eq(st.in_use, sum[k]);
    }
    for (unsigned j = 0; j < all.n; j++) {
        ck_assert_int_lt(pattern_check(all.v[j].buf.base, all.v[j].buf.len, all.v[j].key), 0);
        ck_assert_int_eq(sd_pool_free(pool, &all.v[j].buf), 0);
    }
    free(all.v);
    free(w[0].set.v);
    free(w[1].set.v);
    sd_pool_destroy(pool);
}
END_TEST

/* --- page backing --- */

/* Segments of @pool on hugetlb pages, checked against the file system. */
static unsigned count_huge_segments(struct sd_pool *pool)
{
    unsigned huge = 0;
    for (unsigned i = 0; i < sd_pool_segment_count(pool); i++) {
        struct sd_pool_segment s;
        ck_assert_int_eq(sd_pool_segment_at(pool, i, &s), 0);
        struct statfs sfs;
        ck_assert_int_eq(fstatfs(s.fd, &sfs), 0);
        int on_hugetlbfs = sfs.f_type == HUGETLBFS_MAGIC;
        ck_assert_uint_eq(s.page_size,
                          on_hugetlbfs ? SD_POOL_HUGE_PAGE : (uint64_t)sysconf(_SC_PAGESIZE));
        huge += on_hugetlbfs;
    }
    unsigned counted = 0;
    for (int k = LT_CLASS_STAGED; k <= LT_CLASS_MAPPED; k++) {
        struct sd_pool_class_stats st;
        ck_assert_int_eq(sd_pool_stats(pool, (enum lt_class)k, &st), 0);
        ck_assert_uint_le(st.huge_segments, st.segments);
        counted += st.huge_segments;
    }
    ck_assert_uint_eq(counted, huge);
    return huge;
}

START_TEST(test_pages_small_never_uses_hugetlb_or_thp)
{
    struct sd_pool_config c = small_config();
    c.pages = SD_POOL_PAGES_SMALL;
    struct sd_pool *pool = create_or_fail(&c);
    ck_assert_uint_eq(count_huge_segments(pool), 0);
    char policy[32];
    test_shmem_thp_policy(policy, sizeof(policy));
    for (unsigned i = 0; i < sd_pool_segment_count(pool); i++) {
        struct sd_pool_segment s;
        ck_assert_int_eq(sd_pool_segment_at(pool, i, &s), 0);
        /* MADV_NOHUGEPAGE holds against every policy but "force". */
        if (strcmp(policy, "force") != 0)
            ck_assert_msg(s.thp_bytes == 0, "segment %u: %llu bytes on THP under '%s'", s.id,
                          (unsigned long long)s.thp_bytes, policy);
    }
    ck_assert_uint_eq(captured.lines, 0); /* nothing to report */
    sd_pool_destroy(pool);
}
END_TEST

START_TEST(test_pages_auto_reports_the_thp_it_got)
{
    /* Base-page segments in AUTO ask for THP; what they got is read back
     * from smaps, never assumed. */
    struct sd_pool_config c = small_config();
    c.pages = SD_POOL_PAGES_AUTO;
    struct sd_pool *pool = create_or_fail(&c);
    unsigned thp = 0;
    for (unsigned i = 0; i < sd_pool_segment_count(pool); i++) {
        struct sd_pool_segment s;
        ck_assert_int_eq(sd_pool_segment_at(pool, i, &s), 0);
        ck_assert_uint_le(s.thp_bytes, s.size);
        ck_assert_uint_eq(s.thp_bytes % SD_POOL_HUGE_PAGE, 0);
        if (s.page_size == SD_POOL_HUGE_PAGE || !test_shmem_thp_allowed())
            ck_assert_uint_eq(s.thp_bytes, 0);
        thp += s.thp_bytes == s.size;
    }
    unsigned counted = 0;
    for (int k = LT_CLASS_STAGED; k <= LT_CLASS_MAPPED; k++) {
        struct sd_pool_class_stats st;
        ck_assert_int_eq(sd_pool_stats(pool, (enum lt_class)k, &st), 0);
        ck_assert_uint_le(st.thp_segments + st.huge_segments, st.segments);
        counted += st.thp_segments;
    }
    ck_assert_uint_eq(counted, thp);
    printf("test_pages_auto_reports_the_thp_it_got: %u of %u segments on THP\n", thp,
           sd_pool_segment_count(pool));
    sd_pool_destroy(pool);
}
END_TEST

START_TEST(test_pages_huge_refuses_with_the_numbers_when_short)
{
    /* One page more than the machine has reserved in all: short however
     * many other tests hold at the moment. */
    long total = test_huge_pages_total();
    if (total > 1024 || test_huge_pages_overcommit() > 0) {
        /* Asking for more would cost this test GiBs, or surplus pages would
         * serve it. */
        printf("test_pages_huge_refuses...: %ld huge pages reserved, %ld overcommit: shortage "
               "not tried\n",
               total, test_huge_pages_overcommit());
        return;
    }
    int fds = count_fds();
    struct sd_pool_config c = small_config();
    memset(c.class_bytes, 0, sizeof(c.class_bytes));
    c.class_bytes[LT_CLASS_PINNED] = (uint64_t)(total + 1) * SD_POOL_HUGE_PAGE;
    c.segment_bytes = c.class_bytes[LT_CLASS_PINNED];
    c.pages = SD_POOL_PAGES_HUGE;
    struct sd_pool *pool = NULL;
    int rc = sd_pool_create(&c, &pool);
    ck_assert_msg(rc == -ENOMEM || rc == -EINVAL,
                  "expected -ENOMEM (or -EINVAL without hugetlbfs), "
                  "found %d; log:\n%s",
                  rc, captured.all);
    ck_assert_ptr_null(pool);
    ck_assert_msg(strstr(captured.all, "pages = huge") && strstr(captured.all, "nr_hugepages"),
                  "log does not say why: %s", captured.all);
    if (rc == -ENOMEM) {
        char want[96];
        snprintf(want, sizeof(want), "expected %ld available 2 MiB huge pages", total + 1);
        ck_assert_msg(strstr(captured.all, want), "log lacks '%s': %s", want, captured.all);
    }
    ck_assert_int_eq(count_fds(), fds);
    ck_assert_int_eq(count_pool_mappings(), 0);
}
END_TEST

START_TEST(test_pages_auto_falls_back_to_base_pages_and_says_why)
{
    long total = test_huge_pages_total();
    if (total > 1024 || test_huge_pages_overcommit() > 0) {
        printf("test_pages_auto_falls_back...: %ld huge pages reserved, %ld overcommit: "
               "shortage not tried\n",
               total, test_huge_pages_overcommit());
        return;
    }
    /* One 2 MiB segment more than all the reserved huge pages can hold, in
     * a class the agent registers (STAGED never asks for hugetlb). */
    struct sd_pool_config c = small_config();
    memset(c.class_bytes, 0, sizeof(c.class_bytes));
    c.class_bytes[LT_CLASS_PINNED] = (uint64_t)(total + 1) * SD_POOL_HUGE_PAGE;
    c.segment_bytes = SD_POOL_HUGE_PAGE;
    c.pages = SD_POOL_PAGES_AUTO;
    struct sd_pool *pool = create_or_fail(&c);
    unsigned huge = count_huge_segments(pool);
    ck_assert_uint_le(huge, (unsigned)total);
    ck_assert_uint_lt(huge, sd_pool_segment_count(pool));
    /* Said once, with the reason, however many segments fell back; what
     * it costs depends on whether shmem THP can stand in. */
    ck_assert_uint_eq(captured.lines, 1);
    ck_assert_msg(strstr(captured.last, "huge pages, found") ||
                      strstr(captured.last, "hugetlb memfd"),
                  "no reason given: %s", captured.last);
    if (test_shmem_thp_allowed())
        ck_assert_ptr_nonnull(strstr(captured.last, "MADV_HUGEPAGE instead"));
    else
        ck_assert_ptr_nonnull(strstr(captured.last, "registers several times slower"));
    /* Buffers come from the mixed class as from any other. */
    struct sd_pool_buf b[8];
    for (unsigned i = 0; i < 8; i++) {
        ck_assert_int_eq(sd_pool_alloc(pool, LT_CLASS_PINNED, 64 * 1024, &b[i]), 0);
        check_buf_placement(pool, &b[i], LT_CLASS_PINNED, 64 * 1024);
        pattern_fill(b[i].base, b[i].len, i);
    }
    for (unsigned i = 0; i < 8; i++)
        ck_assert_int_eq(sd_pool_free(pool, &b[i]), 0);
    sd_pool_destroy(pool);
}
END_TEST

START_TEST(test_pages_names_parse_both_ways)
{
    static const enum sd_pool_pages all[] = {SD_POOL_PAGES_AUTO, SD_POOL_PAGES_SMALL,
                                             SD_POOL_PAGES_HUGE, SD_POOL_PAGES_THP};
    for (size_t i = 0; i < 4; i++) {
        enum sd_pool_pages p = (enum sd_pool_pages)99;
        ck_assert_int_eq(sd_pool_pages_parse(sd_pool_pages_name(all[i]), &p), 0);
        ck_assert_int_eq(p, all[i]);
    }
    enum sd_pool_pages p = SD_POOL_PAGES_SMALL;
    ck_assert_int_eq(sd_pool_pages_parse("HUGE", &p), -EINVAL);
    ck_assert_int_eq(sd_pool_pages_parse("", &p), -EINVAL);
    ck_assert_int_eq(p, SD_POOL_PAGES_SMALL);
    ck_assert_str_eq(sd_pool_pages_name((enum sd_pool_pages)7), "invalid");
    struct sd_pool_config c = small_config();
    c.pages = (enum sd_pool_pages)7;
    struct sd_pool *pool = NULL;
    ck_assert_int_eq(sd_pool_create(&c, &pool), -EINVAL);
    ck_assert_ptr_nonnull(strstr(captured.last, "expected pages auto"));
}
END_TEST

static Suite *pool_suite(void)
{
    Suite *s = suite_create("pool");
    TCase *tc = tcase_create("pool");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_segments_are_sealed_memfds_of_one_class);
    tcase_add_test(tc, test_segments_are_populated_by_madvise);
    tcase_add_test(tc, test_segments_are_populated_by_touching);
    tcase_add_test(tc, test_random_buffers_stay_in_their_class_never_overlap_and_add_up);
    tcase_add_test(tc, test_full_class_refuses_with_enomem_and_recovers_after_frees);
    tcase_add_test(tc, test_free_rejects_descriptors_that_are_not_pool_buffers);
    tcase_add_test(tc, test_locate_maps_ranges_within_one_segment_only);
    tcase_add_test(tc, test_extent_hooks_carve_only_class_segments_and_keep_pages);
    tcase_add_test(tc, test_each_segment_holds_its_largest_buffer_again_after_churn);
    tcase_add_test(tc, test_odd_sized_last_segment_is_primed_on_its_own);
    tcase_add_test(tc, test_failed_creation_leaks_no_fd_no_mapping_at_any_step);
    tcase_add_test(tc, test_running_out_of_fds_halfway_leaks_nothing);
    tcase_add_test(tc, test_bad_configs_are_refused_before_anything_is_created);
    tcase_add_test(tc, test_destroy_with_live_buffers_releases_everything_but_dup_fds);
    tcase_add_test(tc, test_defaults_follow_machine_memory);
    tcase_add_test(tc, test_concurrent_threads_get_disjoint_buffers);
    tcase_add_test(tc, test_pages_small_never_uses_hugetlb_or_thp);
    tcase_add_test(tc, test_pages_auto_reports_the_thp_it_got);
    tcase_add_test(tc, test_pages_huge_refuses_with_the_numbers_when_short);
    tcase_add_test(tc, test_pages_auto_falls_back_to_base_pages_and_says_why);
    tcase_add_test(tc, test_pages_names_parse_both_ways);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(pool_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
