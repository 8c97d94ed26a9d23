/* The staging pool: Failure at every step and running out of fds leak nothing; bad configs
 * are refused first; destroy releases everything; defaults follow memory. */
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

#include "pool_test_util.h"

/* --- failure and teardown --- */

START_TEST(test_failed_creation_leaks_no_fd_no_mapping_at_any_step)
{
    struct leasec_pool_config c = small_config();
    int fds = count_fds();
    ck_assert_int_eq(count_pool_mappings(), 0);

    leasec__pool_fault_arm(0);
    struct leasec_pool *pool = create_or_fail(&c);
    leasec_pool_destroy(pool);
    unsigned steps = leasec__pool_fault_arm(0);
    /* Five per segment (four creating it, one priming it), two per arena. */
    ck_assert_uint_eq(steps, 7 * 5 + 3 * 2);

    for (unsigned k = 1; k <= steps; k++) {
        struct leasec_pool *untouched = (struct leasec_pool *)&c;
        leasec__pool_fault_arm(k);
        int rc = leasec_pool_create(&c, &untouched);
        leasec__pool_fault_arm(0);
        ck_assert_msg(rc == -EIO, "failure injected at step %u: expected -EIO, found %d", k, rc);
        ck_assert_ptr_eq(untouched, (struct leasec_pool *)&c);
        ck_assert_msg(count_fds() == fds, "step %u: %d fds open, expected %d", k, count_fds(), fds);
        ck_assert_msg(count_pool_mappings() == 0, "step %u: %d segment mappings left", k,
                      count_pool_mappings());
    }
    pool = create_or_fail(&c); /* still works, arena indexes recycled or not */
    struct leasec_pool_buf b;
    ck_assert_int_eq(leasec_pool_alloc(pool, LT_CLASS_MAPPED, 1000, &b), 0);
    leasec_pool_destroy(pool);
    ck_assert_int_eq(count_fds(), fds);
}
END_TEST

START_TEST(test_running_out_of_fds_halfway_leaks_nothing)
{
    struct leasec_pool_config c = small_config();
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

    struct leasec_pool *pool = NULL;
    int rc = leasec_pool_create(&c, &pool); /* needs 7 fds, gets at most 3 more */
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
    struct leasec_pool *pool = NULL;
    struct leasec_pool_config c = small_config();
    c.class_bytes[LT_CLASS_PINNED] = 16 * MIB + 4096;
    ck_assert_int_eq(leasec_pool_create(&c, &pool), -EINVAL);
    ck_assert_ptr_nonnull(strstr(captured.last, "PINNED"));
    c = small_config();
    c.segment_bytes = 3 * MIB;
    ck_assert_int_eq(leasec_pool_create(&c, &pool), -EINVAL);
    c = small_config();
    c.prefault_threads = 0;
    ck_assert_int_eq(leasec_pool_create(&c, &pool), -EINVAL);
    c = small_config();
    c.flags = 0x80;
    ck_assert_int_eq(leasec_pool_create(&c, &pool), -EINVAL);
    c = small_config();
    memset(c.class_bytes, 0, sizeof(c.class_bytes));
    ck_assert_int_eq(leasec_pool_create(&c, &pool), -EINVAL);

    /* More than the machine has. */
    c = small_config();
    uint64_t phys = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    c.class_bytes[LT_CLASS_STAGED] =
        (phys / LEASEC_POOL_SEGMENT_ALIGN + 1) * LEASEC_POOL_SEGMENT_ALIGN;
    ck_assert_int_eq(leasec_pool_create(&c, &pool), -ENOMEM);
    ck_assert_ptr_nonnull(strstr(captured.last, "physical memory"));
    ck_assert_ptr_null(pool);
    ck_assert_int_eq(count_fds(), fds);
    ck_assert_int_eq(count_pool_mappings(), 0);
}
END_TEST

START_TEST(test_destroy_with_live_buffers_releases_everything_but_dup_fds)
{
    int fds = count_fds();
    struct leasec_pool_config c = small_config();
    struct leasec_pool *pool = create_or_fail(&c);
    uint64_t rng = SEED ^ 3;
    struct leasec_pool_buf b[40];
    for (int i = 0; i < 40; i++)
        ck_assert_int_eq(leasec_pool_alloc(pool, (enum lt_class)(1 + i % 3),
                                           1 + rng_next(&rng) % (64 * 1024), &b[i]),
                         0);
    /* A peer's copy of a segment fd outlives the pool. */
    struct leasec_pool_segment s;
    ck_assert_int_eq(leasec_pool_segment_find(pool, b[0].segment_id, &s), 0);
    uint64_t v = rng_next(&rng), got = 0;
    memcpy(b[0].base, &v, sizeof(v));
    int peer = dup(s.fd);
    ck_assert_int_ge(peer, 0);
    leasec_pool_destroy(pool);
    ck_assert_int_eq(count_fds(), fds + 1);
    ck_assert_int_eq(count_pool_mappings(), 0);
    ck_assert_int_eq(pread(peer, &got, sizeof(got), (off_t)b[0].offset), sizeof(got));
    ck_assert_uint_eq(got, v);
    close(peer);
    ck_assert_int_eq(count_fds(), fds);

    /* And a new pool starts afresh. */
    pool = create_or_fail(&c);
    ck_assert_int_eq(leasec_pool_alloc(pool, LT_CLASS_PINNED, 3 * MIB, &b[0]), 0);
    check_buf_placement(pool, &b[0], LT_CLASS_PINNED, 3 * MIB);
    leasec_pool_destroy(pool);
    leasec_pool_destroy(NULL);
}
END_TEST

START_TEST(test_defaults_follow_machine_memory)
{
    struct leasec_pool_config c;
    ck_assert_int_eq(leasec_pool_config_default(&c), 0);
    uint64_t phys = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t total = 0;
    for (int k = LT_CLASS_STAGED; k <= LT_CLASS_MAPPED; k++) {
        ck_assert_uint_gt(c.class_bytes[k], 0);
        ck_assert_uint_eq(c.class_bytes[k] % LEASEC_POOL_SEGMENT_ALIGN, 0);
        total += c.class_bytes[k];
    }
    ck_assert_uint_le(c.class_bytes[LT_CLASS_PINNED], phys / 8);
    ck_assert_uint_le(c.class_bytes[LT_CLASS_STAGED], phys / 16);
    ck_assert_uint_le(c.class_bytes[LT_CLASS_MAPPED], 256 * MIB);
    ck_assert_uint_le(c.class_bytes[LT_CLASS_MAPPED], c.class_bytes[LT_CLASS_STAGED]);
    ck_assert_uint_le(total, phys / 4);
    ck_assert_uint_eq(c.segment_bytes % LEASEC_POOL_SEGMENT_ALIGN, 0);
    ck_assert_uint_ge(c.prefault_threads, 1);
    ck_assert_uint_le(c.prefault_threads, 8);
    ck_assert_ptr_null(c.log.fn); /* the process default sink */
    ck_assert_ptr_null(c.log.ctx);
    ck_assert_uint_eq(c.flags, 0);
}
END_TEST

void pool_tests_failures(TCase *tc)
{
    tcase_add_test(tc, test_failed_creation_leaks_no_fd_no_mapping_at_any_step);
    tcase_add_test(tc, test_running_out_of_fds_halfway_leaks_nothing);
    tcase_add_test(tc, test_bad_configs_are_refused_before_anything_is_created);
    tcase_add_test(tc, test_destroy_with_live_buffers_releases_everything_but_dup_fds);
    tcase_add_test(tc, test_defaults_follow_machine_memory);
}
