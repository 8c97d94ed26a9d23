/* The staging pool: Page backing: small, THP, hugetlb, and auto's fallback with its reason. */
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

/* --- page backing --- */

/* Segments of @pool on hugetlb pages, checked against the file system. */
static unsigned count_huge_segments(struct leasec_pool *pool)
{
    unsigned huge = 0;
    for (unsigned i = 0; i < leasec_pool_segment_count(pool); i++) {
        struct leasec_pool_segment s;
        ck_assert_int_eq(leasec_pool_segment_at(pool, i, &s), 0);
        struct statfs sfs;
        ck_assert_int_eq(fstatfs(s.fd, &sfs), 0);
        int on_hugetlbfs = sfs.f_type == HUGETLBFS_MAGIC;
        ck_assert_uint_eq(s.page_size,
                          on_hugetlbfs ? LEASEC_POOL_HUGE_PAGE : (uint64_t)sysconf(_SC_PAGESIZE));
        huge += on_hugetlbfs;
    }
    unsigned counted = 0;
    for (int k = LT_CLASS_STAGED; k <= LT_CLASS_MAPPED; k++) {
        struct leasec_pool_class_stats st;
        ck_assert_int_eq(leasec_pool_stats(pool, (enum lt_class)k, &st), 0);
        ck_assert_uint_le(st.huge_segments, st.segments);
        counted += st.huge_segments;
    }
    ck_assert_uint_eq(counted, huge);
    return huge;
}

START_TEST(test_pages_small_never_uses_hugetlb_or_thp)
{
    struct leasec_pool_config c = small_config();
    c.pages = LEASEC_POOL_PAGES_SMALL;
    struct leasec_pool *pool = create_or_fail(&c);
    ck_assert_uint_eq(count_huge_segments(pool), 0);
    char policy[32];
    test_shmem_thp_policy(policy, sizeof(policy));
    for (unsigned i = 0; i < leasec_pool_segment_count(pool); i++) {
        struct leasec_pool_segment s;
        ck_assert_int_eq(leasec_pool_segment_at(pool, i, &s), 0);
        /* MADV_NOHUGEPAGE holds against every policy but "force". */
        if (strcmp(policy, "force") != 0)
            ck_assert_msg(s.thp_bytes == 0, "segment %u: %llu bytes on THP under '%s'", s.id,
                          (unsigned long long)s.thp_bytes, policy);
    }
    ck_assert_uint_eq(captured.lines, 0); /* nothing to report */
    leasec_pool_destroy(pool);
}
END_TEST

START_TEST(test_pages_auto_reports_the_thp_it_got)
{
    /* Base-page segments in AUTO ask for THP; what they got is read back
     * from smaps, never assumed. */
    struct leasec_pool_config c = small_config();
    c.pages = LEASEC_POOL_PAGES_AUTO;
    struct leasec_pool *pool = create_or_fail(&c);
    unsigned thp = 0;
    for (unsigned i = 0; i < leasec_pool_segment_count(pool); i++) {
        struct leasec_pool_segment s;
        ck_assert_int_eq(leasec_pool_segment_at(pool, i, &s), 0);
        ck_assert_uint_le(s.thp_bytes, s.size);
        ck_assert_uint_eq(s.thp_bytes % LEASEC_POOL_HUGE_PAGE, 0);
        if (s.page_size == LEASEC_POOL_HUGE_PAGE || !test_shmem_thp_allowed())
            ck_assert_uint_eq(s.thp_bytes, 0);
        thp += s.thp_bytes == s.size;
    }
    unsigned counted = 0;
    for (int k = LT_CLASS_STAGED; k <= LT_CLASS_MAPPED; k++) {
        struct leasec_pool_class_stats st;
        ck_assert_int_eq(leasec_pool_stats(pool, (enum lt_class)k, &st), 0);
        ck_assert_uint_le(st.thp_segments + st.huge_segments, st.segments);
        counted += st.thp_segments;
    }
    ck_assert_uint_eq(counted, thp);
    printf("test_pages_auto_reports_the_thp_it_got: %u of %u segments on THP\n", thp,
           leasec_pool_segment_count(pool));
    leasec_pool_destroy(pool);
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
    struct leasec_pool_config c = small_config();
    memset(c.class_bytes, 0, sizeof(c.class_bytes));
    c.class_bytes[LT_CLASS_PINNED] = (uint64_t)(total + 1) * LEASEC_POOL_HUGE_PAGE;
    c.segment_bytes = c.class_bytes[LT_CLASS_PINNED];
    c.pages = LEASEC_POOL_PAGES_HUGE;
    struct leasec_pool *pool = NULL;
    int rc = leasec_pool_create(&c, &pool);
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
    struct leasec_pool_config c = small_config();
    memset(c.class_bytes, 0, sizeof(c.class_bytes));
    c.class_bytes[LT_CLASS_PINNED] = (uint64_t)(total + 1) * LEASEC_POOL_HUGE_PAGE;
    c.segment_bytes = LEASEC_POOL_HUGE_PAGE;
    c.pages = LEASEC_POOL_PAGES_AUTO;
    struct leasec_pool *pool = create_or_fail(&c);
    unsigned huge = count_huge_segments(pool);
    ck_assert_uint_le(huge, (unsigned)total);
    ck_assert_uint_lt(huge, leasec_pool_segment_count(pool));
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
    struct leasec_pool_buf b[8];
    for (unsigned i = 0; i < 8; i++) {
        ck_assert_int_eq(leasec_pool_alloc(pool, LT_CLASS_PINNED, 64 * 1024, &b[i]), 0);
        check_buf_placement(pool, &b[i], LT_CLASS_PINNED, 64 * 1024);
        pattern_fill(b[i].base, b[i].len, i);
    }
    for (unsigned i = 0; i < 8; i++)
        ck_assert_int_eq(leasec_pool_free(pool, &b[i]), 0);
    leasec_pool_destroy(pool);
}
END_TEST

START_TEST(test_pages_names_parse_both_ways)
{
    static const enum leasec_pool_pages all[] = {LEASEC_POOL_PAGES_AUTO, LEASEC_POOL_PAGES_SMALL,
                                                 LEASEC_POOL_PAGES_HUGE, LEASEC_POOL_PAGES_THP};
    for (size_t i = 0; i < 4; i++) {
        enum leasec_pool_pages p = (enum leasec_pool_pages)99;
        ck_assert_int_eq(leasec_pool_pages_parse(leasec_pool_pages_name(all[i]), &p), 0);
        ck_assert_int_eq(p, all[i]);
    }
    enum leasec_pool_pages p = LEASEC_POOL_PAGES_SMALL;
    ck_assert_int_eq(leasec_pool_pages_parse("HUGE", &p), -EINVAL);
    ck_assert_int_eq(leasec_pool_pages_parse("", &p), -EINVAL);
    ck_assert_int_eq(p, LEASEC_POOL_PAGES_SMALL);
    ck_assert_str_eq(leasec_pool_pages_name((enum leasec_pool_pages)7), "invalid");
    struct leasec_pool_config c = small_config();
    c.pages = (enum leasec_pool_pages)7;
    struct leasec_pool *pool = NULL;
    ck_assert_int_eq(leasec_pool_create(&c, &pool), -EINVAL);
    ck_assert_ptr_nonnull(strstr(captured.last, "expected pages auto"));
}
END_TEST

void pool_tests_pages(TCase *tc)
{
    tcase_add_test(tc, test_pages_small_never_uses_hugetlb_or_thp);
    tcase_add_test(tc, test_pages_auto_reports_the_thp_it_got);
    tcase_add_test(tc, test_pages_huge_refuses_with_the_numbers_when_short);
    tcase_add_test(tc, test_pages_auto_falls_back_to_base_pages_and_says_why);
    tcase_add_test(tc, test_pages_names_parse_both_ways);
}
