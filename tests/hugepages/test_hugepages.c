/* Segments on 2 MiB pages, from stagingd's pool to the agent's lease service
 * (host backend). hugetlb: the pool makes, populates and seals them; the
 * service accepts them, maps them on a 2 MiB boundary, counts them as huge
 * and leases bytes that both sides see. Shmem THP: the pool's segments get
 * 2 MiB folios and the agent's own mapping maps them with PMD entries, one
 * per 2 MiB. Each part runs where the system offers it (free reserved huge
 * pages; a shmem_enabled policy of advise or more); with neither, the test
 * exits 77 (skipped). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "huge_pages.h"
#include "lease/lease.h"
#include "lease/client.h"

#define MIB ((uint64_t)1 << 20)
/* PINNED 4 MiB + MAPPED 2 MiB: within an 8 MiB RLIMIT_MEMLOCK. */
#define PINNED_BYTES (4 * MIB)
#define MAPPED_BYTES (2 * MIB)
#define PAGES_NEEDED ((PINNED_BYTES + MAPPED_BYTES) / LEASEC_POOL_HUGE_PAGE)
/* One 4 MiB PINNED segment (two huge pages, so a boundary inside it) and
 * one 2 MiB MAPPED segment. */
#define SEGMENTS 2

static char pool_log[8192];

static void capture(void *ctx, int level, const char *subsys, const char *line)
{
    (void)level, (void)subsys;
    (void)ctx;
    size_t used = strlen(pool_log);
    snprintf(pool_log + used, sizeof(pool_log) - used, "%s\n", line);
}

static struct leasec_pool *paged_pool(enum leasec_pool_pages pages)
{
    struct leasec_pool_config c = {0};
    c.class_bytes[LT_CLASS_PINNED] = PINNED_BYTES;
    c.class_bytes[LT_CLASS_MAPPED] = MAPPED_BYTES;
    c.segment_bytes = 4 * MIB;
    c.prefault_threads = 2;
    c.pages = pages;
    c.log = (struct leasec_log){capture, NULL, LEASEC_LOG_DEBUG};
    pool_log[0] = '\0';
    struct leasec_pool *pool = NULL;
    int rc = leasec_pool_create(&c, &pool);
    ck_assert_msg(rc == 0, "leasec_pool_create(pages = %s): %s; log:\n%s",
                  leasec_pool_pages_name(pages), strerror(-rc), pool_log);
    return pool;
}

static struct leasec_pool *huge_pool(void)
{
    return paged_pool(LEASEC_POOL_PAGES_HUGE);
}

START_TEST(test_thp_segments_are_pmd_mapped_by_the_pool_and_the_agent)
{
    struct leasec_pool *pool = paged_pool(LEASEC_POOL_PAGES_THP);
    struct lease_backend be;
    ck_assert_int_eq(lease_host_backend_init(&be, NULL), 0);
    struct lease_service_config cfg = {.budget_pinned = PINNED_BYTES,
                                       .budget_mapped = MAPPED_BYTES};
    struct lease_service *svc = NULL;
    struct lt_failure why = {0};
    ck_assert_msg(lease_service_create(&cfg, &be, &svc, &why) == 0, "%s", why.message);
    struct lease_client_id client = {0};
    ck_assert_int_eq(lease_client_add(svc, NULL, &client, NULL), 0);
    for (unsigned i = 0; i < leasec_pool_segment_count(pool); i++) {
        struct leasec_pool_segment s;
        ck_assert_int_eq(leasec_pool_segment_at(pool, i, &s), 0);
        ck_assert_uint_eq(s.page_size, (uint64_t)sysconf(_SC_PAGESIZE));
        ck_assert_msg(s.thp_bytes == s.size, "segment %u: %llu of %llu bytes on THP", s.id,
                      (unsigned long long)s.thp_bytes, (unsigned long long)s.size);
        int fd = fcntl(s.fd, F_DUPFD_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        enum lt_class cls = s.mem_class == LT_CLASS_MAPPED ? LT_CLASS_MAPPED : LT_CLASS_PINNED;
        struct lt_segment_id id = {0, 0};
        ck_assert_msg(lease_segment_add(svc, client, fd, s.size, cls, &id, &why) == 0, "%s",
                      why.message);
        struct lease_segment_info info;
        ck_assert_int_eq(lease_segment_query(svc, client, id, 0, &info, NULL), 0);
        /* The agent's fresh mapping, aligned and populated, maps the same
         * folios with one entry per 2 MiB: nothing 4 KiB left to build. */
        ck_assert_uint_eq((uintptr_t)info.host_base % LEASEC_POOL_HUGE_PAGE, 0);
        ck_assert_int_eq(test_smaps_kb(info.host_base, "ShmemPmdMapped:"), (long)(s.size / 1024));
    }
    ck_assert_int_eq(lease_client_drop(svc, client, NULL), 0);
    lease_service_destroy(svc);
    lease_backend_fini(&be);
    leasec_pool_destroy(pool);
}
END_TEST

START_TEST(test_pool_segments_are_sealed_populated_hugetlb_memfds)
{
    struct leasec_pool *pool = huge_pool();
    ck_assert_uint_eq(leasec_pool_segment_count(pool), SEGMENTS);
    for (unsigned i = 0; i < leasec_pool_segment_count(pool); i++) {
        struct leasec_pool_segment s;
        ck_assert_int_eq(leasec_pool_segment_at(pool, i, &s), 0);
        ck_assert_uint_eq(s.page_size, LEASEC_POOL_HUGE_PAGE);
        struct statfs sfs;
        ck_assert_int_eq(fstatfs(s.fd, &sfs), 0);
        ck_assert_uint_eq((unsigned long)sfs.f_type, HUGETLBFS_MAGIC);
        ck_assert_uint_eq((uint64_t)sfs.f_bsize, LEASEC_POOL_HUGE_PAGE);
        int seals = fcntl(s.fd, F_GET_SEALS);
        ck_assert_int_eq(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
                         F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
        /* Populated: every huge page is resident in the pool's mapping. */
        uint64_t pages = s.size / (uint64_t)sysconf(_SC_PAGESIZE);
        unsigned char *vec = malloc(pages);
        ck_assert_ptr_nonnull(vec);
        ck_assert_int_eq(mincore(s.base, s.size, vec), 0);
        for (uint64_t p = 0; p < pages; p++)
            ck_assert_msg(vec[p] & 1, "segment %u: page %" PRIu64 " not resident", s.id, p);
        free(vec);
    }
    for (int k = LT_CLASS_PINNED; k <= LT_CLASS_MAPPED; k++) {
        struct leasec_pool_class_stats st;
        ck_assert_int_eq(leasec_pool_stats(pool, (enum lt_class)k, &st), 0);
        ck_assert_uint_eq(st.huge_segments, st.segments);
    }
    ck_assert_str_eq(pool_log, ""); /* nothing fell back */
    leasec_pool_destroy(pool);
}
END_TEST

START_TEST(test_agent_accepts_leases_and_counts_hugetlb_segments)
{
    struct leasec_pool *pool = huge_pool();
    struct lease_backend be;
    ck_assert_int_eq(lease_host_backend_init(&be, NULL), 0);
    struct lease_service_config cfg = {.budget_pinned = PINNED_BYTES,
                                       .budget_mapped = MAPPED_BYTES};
    struct lease_service *svc = NULL;
    struct lt_failure why = {0};
    ck_assert_msg(lease_service_create(&cfg, &be, &svc, &why) == 0, "%s", why.message);
    struct lease_client_id client = {0};
    ck_assert_int_eq(lease_client_add(svc, NULL, &client, NULL), 0);

    struct lt_segment_id ids[SEGMENTS];
    struct leasec_pool_segment segs[SEGMENTS];
    for (unsigned i = 0; i < SEGMENTS; i++) {
        ck_assert_int_eq(leasec_pool_segment_at(pool, i, &segs[i]), 0);
        /* The agent takes over a copy of the fd, as SCM_RIGHTS would give it. */
        int fd = fcntl(segs[i].fd, F_DUPFD_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        enum lt_class cls =
            segs[i].mem_class == LT_CLASS_MAPPED ? LT_CLASS_MAPPED : LT_CLASS_PINNED;
        int rc = lease_segment_add(svc, client, fd, segs[i].size, cls, &ids[i], &why);
        ck_assert_msg(rc == 0, "segment %u: %s", segs[i].id, why.message);
    }
    struct lease_stats st;
    ck_assert_int_eq(lease_service_stats(svc, &st), 0);
    ck_assert_uint_eq(st.cls[LT_CLASS_PINNED].huge_segments, 1);
    ck_assert_uint_eq(st.cls[LT_CLASS_MAPPED].huge_segments, 1);
    ck_assert_uint_eq(st.cls[LT_CLASS_PINNED].bytes_registered, PINNED_BYTES);
    ck_assert_uint_eq(lease_host_backend_locked(&be), PINNED_BYTES + MAPPED_BYTES);
    char text[2048];
    ck_assert_int_gt(lease_stats_format(svc, text, sizeof(text)), 0);
    ck_assert_msg(strstr(text, "PINNED: segments=1 (huge 1)"), "stats text: %s", text);

    for (unsigned i = 0; i < SEGMENTS; i++) {
        struct lease_segment_info info;
        ck_assert_int_eq(lease_segment_query(svc, client, ids[i], 0, &info, NULL), 0);
        ck_assert_uint_eq(info.registered, 1);
        /* One page-table entry per huge page needs a 2 MiB-aligned mapping. */
        ck_assert_uint_eq((uintptr_t)info.host_base % LEASEC_POOL_HUGE_PAGE, 0);
        /* A lease across the boundary between the PINNED segment's two huge
         * pages (within the MAPPED one's only page): what the pool writes,
         * the agent reads. */
        uint64_t mid =
            segs[i].size > LEASEC_POOL_HUGE_PAGE ? LEASEC_POOL_HUGE_PAGE : segs[i].size / 2;
        struct lease_grant_req q = {
            ids[i], mid - 4096, 2 * 4096,
            segs[i].mem_class == LT_CLASS_MAPPED ? LT_CLASS_MAPPED : LT_CLASS_PINNED, 0};
        struct lease_grant_result r;
        ck_assert_int_eq(lease_grant(svc, client, 1, &q, &r, NULL), 1);
        ck_assert_msg(r.rc == 0, "grant: %s", r.why.message);
        unsigned char *daemon_view = (unsigned char *)segs[i].base + q.offset;
        for (unsigned b = 0; b < q.length; b++)
            daemon_view[b] = (unsigned char)(b * 7 + i);
        /* The agent maps a sealed (leasable) segment read-only: it sees
         * what the pool writes, and writes nothing back (docs/reliability.md). */
        ck_assert_int_eq(memcmp(r.host_addr, daemon_view, q.length), 0);
        struct lease_release_result rr = {.rc = 1};
        ck_assert_int_eq(lease_release(svc, client, 1, &r.lease, &rr, NULL), 1);
        ck_assert_int_eq(rr.rc, 0);
    }
    ck_assert_int_eq(lease_client_drop(svc, client, NULL), 0);
    ck_assert_int_eq(lease_service_stats(svc, &st), 0);
    ck_assert_uint_eq(st.cls[LT_CLASS_PINNED].huge_segments, 0);
    ck_assert_uint_eq(st.cls[LT_CLASS_MAPPED].huge_segments, 0);
    ck_assert_uint_eq(lease_host_backend_locked(&be), 0);
    lease_service_destroy(svc);
    lease_backend_fini(&be);
    leasec_pool_destroy(pool);
}
END_TEST

int main(void)
{
    long free_pages = test_huge_pages_free();
    int hugetlb = free_pages >= (long)PAGES_NEEDED;
    int thp = test_shmem_thp_allowed();
    char policy[32];
    test_shmem_thp_policy(policy, sizeof(policy));
    if (!hugetlb)
        printf("hugetlb part not run: %ld free 2 MiB huge pages, %llu needed (reserve them with "
               "`echo %llu > " TEST_HUGE_SYSFS "/nr_hugepages`)\n",
               free_pages, (unsigned long long)PAGES_NEEDED, (unsigned long long)PAGES_NEEDED);
    if (!thp)
        printf("shmem THP part not run: shmem_enabled is '%s' (`echo advise > "
               "/sys/kernel/mm/transparent_hugepage/shmem_enabled` allows it)\n",
               policy);
    if (!hugetlb && !thp)
        return 77;
    Suite *s = suite_create("hugepages");
    /* A test case made but not added to the suite is never freed: LeakSanitizer
     * then fails every forked test of the sanitizer build. */
    if (hugetlb) {
        TCase *tc = tcase_create("hugetlb");
        tcase_add_test(tc, test_pool_segments_are_sealed_populated_hugetlb_memfds);
        tcase_add_test(tc, test_agent_accepts_leases_and_counts_hugetlb_segments);
        suite_add_tcase(s, tc);
    }
    if (thp) {
        TCase *tt = tcase_create("thp");
        tcase_add_test(tt, test_thp_segments_are_pmd_mapped_by_the_pool_and_the_agent);
        suite_add_tcase(s, tt);
    }
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
