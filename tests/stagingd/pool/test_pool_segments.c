/* The staging pool: Segments are sealed memfds of one class, populated by madvise or by
 * touching. */
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

/* --- segments --- */

START_TEST(test_segments_are_sealed_memfds_of_one_class)
{
    struct leasec_pool_config c = small_config();
    struct leasec_pool *pool = create_or_fail(&c);
    ck_assert_uint_eq(leasec_pool_segment_count(pool), 7);

    uint64_t rng = SEED;
    uint64_t per_class[LT_CLASS_MAPPED + 1] = {0};
    unsigned segs_per_class[LT_CLASS_MAPPED + 1] = {0};
    uintptr_t prev_end = 0;
    for (unsigned i = 0; i < leasec_pool_segment_count(pool); i++) {
        struct leasec_pool_segment s;
        ck_assert_int_eq(leasec_pool_segment_at(pool, i, &s), 0);
        ck_assert_uint_ne(s.id, 0);
        ck_assert_uint_ge((uintptr_t)s.base, prev_end); /* ordered and disjoint */
        prev_end = (uintptr_t)s.base + s.size;
        ck_assert_uint_eq(s.size % LEASEC_POOL_SEGMENT_ALIGN, 0);
        ck_assert_uint_eq((uintptr_t)s.base % LEASEC_POOL_SEGMENT_ALIGN, 0);
        per_class[s.mem_class] += s.size;
        segs_per_class[s.mem_class]++;

        /* A memfd named after its class. */
        char path[64], target[256], want[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%d", s.fd);
        ssize_t n = readlink(path, target, sizeof(target) - 1);
        ck_assert_int_gt(n, 0);
        target[n] = 0;
        int len =
            snprintf(want, sizeof(want), "/memfd:sd-pool-%s-%u", lt_class_name(s.mem_class), s.id);
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
        ck_assert_msg((s.page_size == LEASEC_POOL_HUGE_PAGE) == (sfs.f_type == HUGETLBFS_MAGIC),
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

        struct leasec_pool_segment again;
        ck_assert_int_eq(leasec_pool_segment_find(pool, s.id, &again), 0);
        ck_assert_int_eq(again.fd, s.fd);
        ck_assert_ptr_eq(again.base, s.base);
    }
    ck_assert_int_eq(leasec_pool_segment_at(pool, 7, &(struct leasec_pool_segment){0}), -ERANGE);
    ck_assert_int_eq(leasec_pool_segment_find(pool, 9999, &(struct leasec_pool_segment){0}),
                     -ENOENT);
    for (int k = LT_CLASS_STAGED; k <= LT_CLASS_MAPPED; k++) {
        struct leasec_pool_class_stats st;
        ck_assert_int_eq(leasec_pool_stats(pool, (enum lt_class)k, &st), 0);
        ck_assert_uint_eq(per_class[k], c.class_bytes[k]);
        ck_assert_uint_eq(st.capacity, c.class_bytes[k]);
        ck_assert_uint_eq(st.segments, segs_per_class[k]);
        /* Each segment went to jemalloc whole, in one piece, and nothing
         * else did: its own metadata stays out of the segments. */
        ck_assert_uint_eq(st.carved, st.capacity);
        ck_assert_uint_eq(st.extents, st.segments);
        ck_assert_uint_eq(st.in_use, 0);
    }
    leasec_pool_destroy(pool);
}
END_TEST

static void check_populated(unsigned flags)
{
    struct leasec_pool_config c = small_config();
    c.flags = flags;
    c.prefault_threads = 3;
    struct leasec_pool *pool = create_or_fail(&c);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    for (unsigned i = 0; i < leasec_pool_segment_count(pool); i++) {
        struct leasec_pool_segment s;
        ck_assert_int_eq(leasec_pool_segment_at(pool, i, &s), 0);
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
    leasec_pool_destroy(pool);
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
    check_populated(LEASEC_POOL_PREFAULT_TOUCH);
    ck_assert_uint_eq(captured.lines, 0);
}
END_TEST

void pool_tests_segments(TCase *tc)
{
    tcase_add_test(tc, test_segments_are_sealed_memfds_of_one_class);
    tcase_add_test(tc, test_segments_are_populated_by_madvise);
    tcase_add_test(tc, test_segments_are_populated_by_touching);
}
