/* test_pool: the staging pool. Sealed, populated memfd segments; buffers
 * carved by the per-class jemalloc arenas stay inside their class's
 * segments, never overlap, are accounted exactly; a full class refuses
 * cleanly; nothing leaks on any path. One file per behaviour group; they
 * run in this order as one test case. */
#include <check.h>
#include <stdlib.h>

#include "pool_test_util.h"

static Suite *pool_suite(void)
{
    Suite *s = suite_create("pool");
    TCase *tc = tcase_create("pool");
    tcase_set_timeout(tc, 120);
    pool_tests_segments(tc);
    pool_tests_buffers(tc);
    pool_tests_hooks(tc);
    pool_tests_failures(tc);
    pool_tests_threads(tc);
    pool_tests_pages(tc);
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
