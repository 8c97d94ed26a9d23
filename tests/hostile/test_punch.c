/* Issue #12, finding 2: leased bytes could be freed under a live lease, on
 * every memfd kind: fallocate(PUNCH_HOLE) and MADV_REMOVE both succeeded,
 * and the agent then read zeros (a checksum mismatch on the host backend).
 * Now the agent takes a leasable segment only when sealed with
 * F_SEAL_FUTURE_WRITE, which makes the kernel refuse both (EPERM), and the
 * checksum of a lease stays what the client put there. Built twice: on
 * shmem memfds, and (HS_PUNCH_HUGE) on hugetlb ones, which exits 77
 * (skipped) without 2 free huge pages. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check_main.h"
#include "hostile.h"

#ifdef HS_PUNCH_HUGE
#define PAGE HS_HUGE
#define HUGE 1
#else
#define PAGE (4 * HS_KIB)
#define HUGE 0
#endif
#define SEG (2 * PAGE > HS_MIB ? 2 * PAGE : HS_MIB)
#define DATA (SEG / 2)

START_TEST(test_leased_bytes_cannot_be_freed_under_a_lease)
{
    struct th_agent a;
    const char *extra[] = {"--pinned-budget", "4M", "--mapped-budget", "4M", NULL};
    th_agent_start(&a, NULL, extra);
    const uint32_t classes[] = {LT_CLASS_STAGED, LT_CLASS_PINNED, LT_CLASS_MAPPED};
    union lt_msg_buffer buf;
    for (size_t i = 0; i < 3; i++) {
        uint32_t cls = classes[i];
        int c = th_hello(a.sock, 0, NULL);
        struct hs_seg s;
        struct lt_lease_grant_entry g =
            hs_offer_and_lease(c, &s, SEG, HUGE, cls, 0x77 + i, DATA, NULL);

        /* Page 0 (data) by hole punch, the page after by MADV_REMOVE on the
         * client's own writable mapping: both must be refused. */
        int punched = fallocate(s.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t)PAGE);
        int punch_errno = errno;
        int removed = madvise(s.map + PAGE, PAGE, MADV_REMOVE);
        int remove_errno = errno;
        struct lt_msg_submit sub;
        hs_checksum_submit(&sub, g.lease, DATA);
        uint64_t rid = th_submit_send(c, &sub);
        th_expect(c, &buf, LT_MSG_COMPLETION);
        ck_assert_uint_eq(buf.hdr.request_id, rid);
        uint32_t status = ((const struct lt_msg_completion *)(const void *)buf.bytes)->status;
        ck_assert_msg(punched < 0 && punch_errno == EPERM,
                      "%s lease: fallocate(PUNCH_HOLE) freed leased bytes (checksum now %s)",
                      lt_class_name(cls), lt_error_name(status));
        ck_assert_msg(removed < 0 && remove_errno == EPERM,
                      "%s lease: MADV_REMOVE freed leased bytes (checksum now %s)",
                      lt_class_name(cls), lt_error_name(status));
        ck_assert_msg(status == LT_OK, "%s lease: checksum %s", lt_class_name(cls),
                      lt_error_name(status));
        close(c);
        hs_seg_close(&s);
    }
    hs_agent_finish(&a);
}
END_TEST

static Suite *punch_suite(void)
{
    Suite *s = suite_create(HUGE ? "hostile_punch_hugetlb" : "hostile_punch");
    TCase *tc = tcase_create("punch");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_leased_bytes_cannot_be_freed_under_a_lease);
    suite_add_tcase(s, tc);
    return s;
}

static int punch_probe(char *why, size_t len)
{
    if (!HUGE || hs_huge_free() >= 2)
        return 0;
    snprintf(why, len, "needs 2 free 2 MiB huge pages, found %ld (vm.nr_hugepages)",
             hs_huge_free());
    return LEASE_CHECK_SKIP;
}

LEASE_CHECK_MAIN(punch_suite, punch_probe)
