/* Issue #12, finding 1: a client offers a hugetlb memfd, punches a hole in
 * it and takes every free huge page; the agent's next read of the segment
 * used to die with SIGBUS, for every class. Now the agent either refuses a
 * segment that can be punched (it wants F_SEAL_FUTURE_WRITE, and the punch
 * is then refused by the kernel), or, where it was told to accept one
 * (--seals legacy), survives the fault: that request fails with
 * LT_E_SEGMENT_GONE, that client is dropped, and everyone else is served.
 * Needs a free huge page: exits 77 (skipped) without one. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check_main.h"
#include "hostile.h"

#ifndef MAP_HUGETLB
#define MAP_HUGETLB 0x40000
#endif

#define HOG_MAX 8192

/* Takes every free huge page, one 2 MiB private mapping each. */
static size_t hog_take(void **pages)
{
    size_t n = 0;
    while (n < HOG_MAX) {
        void *p = mmap(NULL, HS_HUGE, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
        if (p == MAP_FAILED)
            break;
        memset(p, 1, 64);
        pages[n++] = p;
    }
    return n;
}

static void hog_give_back(void **pages, size_t n)
{
    for (size_t i = 0; i < n; i++)
        munmap(pages[i], HS_HUGE);
}

static void *hog[HOG_MAX];

/* One round of the attack on a new client with a segment of @cls. Returns
 * 1 when the hole could be punched (the agent took a punchable segment). */
static int attack(struct th_agent *a, uint32_t cls, int legacy)
{
    union lt_msg_buffer buf;
    int c = th_hello(a->sock, 0, NULL);
    struct hs_seg s;
    int old = 0;
    struct lt_lease_grant_entry g =
        hs_offer_and_lease(c, &s, HS_HUGE, 1, cls, 0x5b, HS_HUGE / 2, &old);
    ck_assert_msg(!legacy || old, "--seals legacy refused the old seals");

    /* The attack: free the page, then leave none to fault back in. */
    int punched = fallocate(s.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t)s.size);
    int punch_errno = errno;
    int removed = madvise(s.map, s.size, MADV_REMOVE);
    size_t taken = hog_take(hog);

    struct lt_msg_submit sub;
    hs_checksum_submit(&sub, g.lease, HS_HUGE / 2);
    uint64_t rid = th_submit_send(c, &sub);
    ssize_t n = th_recv(c, &buf, TH_TIMEOUT_MS);
    hog_give_back(hog, taken);
    if (punched == 0 || removed == 0) {
        /* A punchable segment: the read faulted; this request failed and
         * the client was dropped, nothing else. Or, for a registered class
         * on a GPU, no CPU read at all: the device reads the pages pinned at
         * registration, which the punch cannot free, so the bytes it checks
         * are still the ones leased (checked on the H200: LT_OK). */
        ck_assert_msg(n > 0, "the agent answered nothing (%s) after the hole punch; its log: %s",
                      n == 0 ? "end of stream: did it die?" : "timeout", a->log);
        ck_assert_uint_eq(buf.hdr.request_id, rid);
        uint32_t status = buf.hdr.type == LT_MSG_COMPLETION
                              ? ((const struct lt_msg_completion *)(const void *)buf.bytes)->status
                              : ((const struct lt_msg_error *)(const void *)buf.bytes)->code;
        const int pinned_read = status == LT_OK && cls != LT_CLASS_STAGED;
        ck_assert_msg(status == LT_E_SEGMENT_GONE || pinned_read,
                      "%s submit on a punched segment: %s (log %s)", lt_class_name(cls),
                      lt_error_name(status), a->log);
        if (!pinned_read)
            th_expect_eof(c);
    } else {
        ck_assert_int_eq(punch_errno, EPERM);
        ck_assert_msg(n > 0 && buf.hdr.type == LT_MSG_COMPLETION, "no COMPLETION; log %s", a->log);
        ck_assert_uint_eq(((const struct lt_msg_completion *)(const void *)buf.bytes)->status,
                          LT_OK);
    }
    close(c);
    hs_seg_close(&s);
    hs_assert_serving(a);
    return punched == 0 || removed == 0;
}

START_TEST(test_punched_hugetlb_segment_cannot_kill_the_agent)
{
    struct th_agent a;
    th_agent_start(&a, NULL, NULL);
    const uint32_t classes[] = {LT_CLASS_STAGED, LT_CLASS_PINNED, LT_CLASS_MAPPED};
    for (size_t i = 0; i < 3; i++)
        attack(&a, classes[i], 0);
    ck_assert_int_eq(th_agent_stop(&a), 0);
    th_agent_cleanup(&a);
}
END_TEST

START_TEST(test_agent_survives_sigbus_on_a_segment_it_was_told_to_take)
{
    struct th_agent a;
    const char *extra[] = {"--seals", "legacy", NULL};
    th_agent_start(&a, NULL, extra);
    const uint32_t classes[] = {LT_CLASS_STAGED, LT_CLASS_PINNED, LT_CLASS_MAPPED};
    /* Every class: the agent reads a punchable lease's pages once, guarded,
     * before it queues the op, so neither the driver's own CPU reads (the
     * H200) nor the fake driver's CPU "DMA" ever meet a punched page. */
    for (size_t i = 0; i < 3; i++)
        ck_assert_msg(attack(&a, classes[i], 1), "--seals legacy: the hole was not punched");
    ck_assert(th_file_wait_for(a.log, "SIGBUS", TH_TIMEOUT_MS));
    ck_assert_int_eq(th_agent_stop(&a), 0);
    th_agent_cleanup(&a);
}
END_TEST

/* A MAPPED segment without F_SEAL_FUTURE_WRITE is taken for its words only;
 * its bell page punched and the huge pages gone, the agent's read of the
 * bell faults: that submit fails, that client goes, nobody else notices.
 * On the CUDA backend only the GPU waits on a bell, on the page pinned
 * before the punch, so no CPU read would ever fault: the agent reads the
 * words once when it takes a SUBMIT, for every backend. */
START_TEST(test_a_bell_in_a_punched_word_segment_fails_only_its_client)
{
    struct th_agent a;
    th_agent_start(&a, NULL, NULL);
    union lt_msg_buffer buf;
    char msg[128];
    int c = th_hello(a.sock, LT_CAP_DOORBELL, NULL);
    struct hs_seg words;
    ck_assert_int_eq(hs_memfd(&words, HS_HUGE, 1, HS_OLD_SEALS, 0x6c), 0);
    memset(words.map, 0, 64);
    ck_assert_uint_eq(hs_offer(c, &words, LT_CLASS_MAPPED, msg, sizeof msg), LT_OK);
    struct hs_seg data;
    struct lt_lease_grant_entry g =
        hs_offer_and_lease(c, &data, 64 * HS_KIB, 0, LT_CLASS_STAGED, 0x6d, 32 * HS_KIB, NULL);
    int punched = fallocate(words.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, HS_HUGE);
    size_t taken = hog_take(hog);
    struct lt_msg_submit sub;
    hs_checksum_submit(&sub, g.lease, 32 * HS_KIB);
    sub.flags = LT_SUBMIT_F_WAIT_BELL;
    sub.bell = (struct lt_word_ref){.segment = words.id, .offset = 0};
    sub.bell_seq = 1;
    uint64_t rid = th_submit_send(c, &sub);
    ssize_t n = th_recv(c, &buf, TH_TIMEOUT_MS);
    hog_give_back(hog, taken);
    ck_assert_int_eq(punched, 0);
    /* Refused at the request (the agent reads the bell once when it takes
     * the SUBMIT: every backend), or failed at the bell's read (the host
     * backend, had the page gone later): SEGMENT_GONE either way. */
    ck_assert_msg(n > 0 && (buf.hdr.type == LT_MSG_COMPLETION || buf.hdr.type == LT_MSG_ERROR),
                  "no COMPLETION or ERROR (%zd); log %s", n, a.log);
    ck_assert_uint_eq(buf.hdr.request_id, rid);
    uint32_t status = buf.hdr.type == LT_MSG_COMPLETION
                          ? ((const struct lt_msg_completion *)(const void *)buf.bytes)->status
                          : ((const struct lt_msg_error *)(const void *)buf.bytes)->code;
    ck_assert_msg(status == LT_E_SEGMENT_GONE, "a bell in a punched page: %s, log %s",
                  lt_error_name(status), a.log);
    th_expect_eof(c);
    close(c);
    hs_seg_close(&words);
    hs_seg_close(&data);
    hs_agent_finish(&a);
}
END_TEST

/* LAUNCH reads a punchable lease's pages once, guarded, as SUBMIT does:
 * under --seals legacy a punched hugetlb lease and no huge page left, the
 * copies to the device (the driver's CPU reads, or the fake driver's) would
 * fault outside any guard and kill the agent. That launch fails
 * SEGMENT_GONE, that client goes, everyone else is served. Runs where the
 * agent grants LAUNCH (lease-agent with the launch test kernels,
 * HS_CUBIN_DIR: test_hostile_sigbus_fakecuda); the host agent grants none. */
START_TEST(test_a_launch_on_a_punched_lease_fails_only_its_client)
{
    struct th_agent a;
    const char *dir = getenv("HS_CUBIN_DIR");
    const char *extra[] = {"--seals", "legacy", "--cubin-dir", dir, NULL};
    if (!dir || !*dir)
        extra[2] = NULL;
    th_agent_start(&a, NULL, extra);
    struct lt_msg_hello_reply hr;
    int c = th_hello(a.sock, LT_CAP_LAUNCH, &hr);
    if (!(hr.caps & LT_CAP_LAUNCH)) {
        ck_assert_msg(!dir || !*dir, "lease-agent with --cubin-dir %s granted no LAUNCH", dir);
        fprintf(stderr, "LAUNCH case skipped: this agent grants no LAUNCH (the host backend); "
                        "test_hostile_sigbus_fakecuda runs it\n");
        close(c);
        hs_agent_finish(&a);
        return;
    }
    struct hs_seg s;
    int old = 0;
    struct lt_lease_grant_entry g =
        hs_offer_and_lease(c, &s, HS_HUGE, 1, LT_CLASS_PINNED, 0x6e, HS_HUGE / 2, &old);
    ck_assert_msg(old, "--seals legacy refused the old seals");
    ck_assert_int_eq(fallocate(s.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t)s.size),
                     0);
    size_t taken = hog_take(hog);
    const uint64_t rid = hs_launch_send(c, g.lease, 0, "k_launch_sum_u32");
    union lt_msg_buffer buf;
    ssize_t n = th_recv(c, &buf, TH_TIMEOUT_MS);
    hog_give_back(hog, taken);
    ck_assert_msg(n > 0, "the agent answered nothing (%s) to a LAUNCH on a punched lease; log %s",
                  n == 0 ? "end of stream: did it die?" : "timeout", a.log);
    ck_assert_uint_eq(buf.hdr.type, LT_MSG_LAUNCH_COMPLETION);
    ck_assert_uint_eq(buf.hdr.request_id, rid);
    const struct lt_msg_launch_completion *lc = (const void *)buf.bytes;
    ck_assert_msg(lc->status == LT_E_SEGMENT_GONE, "a LAUNCH on a punched lease: %s: %s (log %s)",
                  lt_error_name(lc->status), lc->message, a.log);
    th_expect_eof(c);
    close(c);
    hs_seg_close(&s);
    hs_agent_finish(&a);
}
END_TEST

static Suite *sigbus_suite(void)
{
    Suite *s = suite_create("hostile_sigbus");
    TCase *tc = tcase_create("sigbus");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_punched_hugetlb_segment_cannot_kill_the_agent);
    tcase_add_test(tc, test_agent_survives_sigbus_on_a_segment_it_was_told_to_take);
    tcase_add_test(tc, test_a_bell_in_a_punched_word_segment_fails_only_its_client);
    tcase_add_test(tc, test_a_launch_on_a_punched_lease_fails_only_its_client);
    suite_add_tcase(s, tc);
    return s;
}

static int huge_probe(char *why, size_t len)
{
    long free_pages = hs_huge_free();
    if (free_pages >= 1)
        return 0;
    snprintf(why, len, "needs a free 2 MiB huge page, found %ld (vm.nr_hugepages)", free_pages);
    return LEASE_CHECK_SKIP;
}

LEASE_CHECK_MAIN(sigbus_suite, huge_probe)
