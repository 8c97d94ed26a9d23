/* Issue #12, finding 3: every accepted segment holds an fd in the agent,
 * and the default of 1024 segments per client equalled the usual soft fd
 * limit, which the agent never raised. Once its table was full, new clients
 * hung even after segments were retired (accept was re-armed only when a
 * connection closed), and a client whose offer's fd the kernel could not
 * hand over was blamed and disconnected. Now segments have an fd budget
 * derived from RLIMIT_NOFILE (raised to the hard limit at start): past it an
 * offer is refused with LT_E_LIMIT and the numbers, the connection kept; an
 * offer whose fd was dropped (MSG_CTRUNC) is refused the same way; and
 * accepting resumes as soon as any fd frees. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "check_main.h"
#include "hostile.h"

/* The seals this agent takes for a small STAGED segment (see hostile.h). */
static int seals_for(int c)
{
    struct hs_seg s;
    char msg[128];
    ck_assert_int_eq(hs_memfd(&s, 4096, 0, HS_OLD_SEALS, 1), 0);
    uint32_t code = hs_offer(c, &s, LT_CLASS_STAGED, msg, sizeof msg);
    hs_seg_close(&s);
    if (code == LT_OK) {
        struct lt_msg_segment_retire r;
        lt_msg_init(&r, sizeof r, LT_MSG_SEGMENT_RETIRE, th_rid());
        r.segment = s.id;
        ck_assert_int_eq(th_send(c, &r, sizeof r, NULL, 0), 0);
        union lt_msg_buffer buf;
        th_expect(c, &buf, LT_MSG_SEGMENT_RETIRED);
        return HS_OLD_SEALS;
    }
    ck_assert_uint_eq(code, LT_E_SEGMENT_UNSEALED);
    return HS_SEALS;
}

/* Offers one 4 KiB STAGED segment: its answer's code, the id in *id_p. */
static uint32_t offer_small(int c, int seals, struct lt_segment_id *id_p, char *msg, size_t len)
{
    int fd = memfd_create("hs-fd", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, 4096), 0);
    ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, seals), 0);
    struct hs_seg s = {.fd = fd, .size = 4096};
    uint32_t code = hs_offer(c, &s, LT_CLASS_STAGED, msg, len);
    close(fd);
    *id_p = s.id;
    return code;
}

static void retire(int c, struct lt_segment_id id)
{
    struct lt_msg_segment_retire r;
    lt_msg_init(&r, sizeof r, LT_MSG_SEGMENT_RETIRE, th_rid());
    r.segment = id;
    ck_assert_int_eq(th_send(c, &r, sizeof r, NULL, 0), 0);
    union lt_msg_buffer buf;
    th_expect(c, &buf, LT_MSG_SEGMENT_RETIRED);
}

START_TEST(test_segments_past_the_fd_budget_are_refused_and_others_still_connect)
{
    struct th_agent a;
    th_agent_nofile = 256;
    const char *extra[] = {"--max-clients", "4", NULL};
    th_agent_start(&a, NULL, extra);
    th_agent_nofile = 0;
    int x = th_hello(a.sock, 0, NULL);
    int seals = seals_for(x);
    struct lt_segment_id first = {0, 0};
    char msg[128];
    unsigned accepted = 0, refused = 0;
    for (int i = 0; i < 300; i++) {
        struct lt_segment_id id;
        uint32_t code = offer_small(x, seals, &id, msg, sizeof msg);
        if (code == LT_OK) {
            if (accepted++ == 0)
                first = id;
            continue;
        }
        ck_assert_msg(code == LT_E_LIMIT, "offer %d: %s: %s", i, lt_error_name(code), msg);
        ck_assert_msg(strpbrk(msg, "0123456789"), "the refusal gives no numbers: %s", msg);
        refused++;
    }
    ck_assert_uint_gt(accepted, 0);
    ck_assert_uint_gt(refused, 0);
    /* Another client gets its own share, and X gets room back by retiring. */
    int y = th_hello(a.sock, 0, NULL);
    struct lt_segment_id yid;
    ck_assert_uint_eq(offer_small(y, seals, &yid, msg, sizeof msg), LT_OK);
    retire(x, first);
    struct lt_segment_id again;
    ck_assert_uint_eq(offer_small(x, seals, &again, msg, sizeof msg), LT_OK);
    close(y);
    close(x);
    hs_agent_finish(&a);
}
END_TEST

/* The smallest RLIMIT_NOFILE that leaves @pid exactly @k free fd numbers
 * (fds it holds above the limit stay open, so only those below count). */
static rlim_t limit_leaving(pid_t pid, int k)
{
    static unsigned char open_fd[65536];
    memset(open_fd, 0, sizeof open_fd);
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/fd", (long)pid);
    DIR *d = opendir(path);
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e; (e = readdir(d));) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] != '.' && fd >= 0 && fd < (int)sizeof open_fd)
            open_fd[fd] = 1;
    }
    closedir(d);
    int free_below = 0;
    for (int l = 0; l < (int)sizeof open_fd; l++) {
        if (free_below == k)
            return (rlim_t)l;
        free_below += !open_fd[l];
    }
    ck_abort_msg("no limit leaves %d free fds", k);
    return 0;
}

/* The soft limit only: lowering the hard one could not be undone without
 * CAP_SYS_RESOURCE, and the kernel allocates fds against the soft one. */
static void set_nofile(pid_t pid, rlim_t n)
{
    struct rlimit rl;
    ck_assert_int_eq(prlimit(pid, RLIMIT_NOFILE, NULL, &rl), 0);
    rl.rlim_cur = n;
    ck_assert_msg(prlimit(pid, RLIMIT_NOFILE, &rl, NULL) == 0, "prlimit(%ld, NOFILE, %llu): %s",
                  (long)pid, (unsigned long long)n, strerror(errno));
}

START_TEST(test_an_offer_whose_fd_was_dropped_is_refused_and_accept_resumes_when_fds_free)
{
    struct th_agent a;
    th_agent_start(&a, NULL, NULL);
    struct rlimit was;
    ck_assert_int_eq(prlimit(a.pid, RLIMIT_NOFILE, NULL, &was), 0);
    int x = th_hello(a.sock, 0, NULL);
    int seals = seals_for(x);
    /* Room for one more fd, no further. */
    set_nofile(a.pid, limit_leaving(a.pid, 1));
    char msg[128];
    struct lt_segment_id ids[64];
    unsigned n = 0;
    uint32_t code = LT_OK;
    while (n < 64 && (code = offer_small(x, seals, &ids[n], msg, sizeof msg)) == LT_OK)
        n++;
    ck_assert_msg(code == LT_E_LIMIT, "offer with no fd left: %s: %s", lt_error_name(code), msg);
    ck_assert_msg(strstr(msg, "descriptor"), "the refusal does not say why: %s", msg);
    ck_assert_uint_gt(n, 0);
    union lt_msg_buffer buf;
    th_stats(x, 0, &buf); /* still connected, still served */

    /* A newcomer waits while no fd is free ... */
    int y = th_connect(a.sock);
    struct lt_msg_hello h;
    lt_msg_init(&h, sizeof h, LT_MSG_HELLO, th_rid());
    h.version_min = h.version_max = 1;
    lt_name_set(h.name, sizeof h.name, "newcomer");
    ck_assert_int_eq(th_send(y, &h, sizeof h, NULL, 0), 0);
    th_expect_silence(y, 300);
    /* ... and is served once a retire frees one, no disconnect needed. */
    retire(x, ids[0]);
    th_expect(y, &buf, LT_MSG_HELLO_REPLY);
    set_nofile(a.pid, was.rlim_cur);
    close(y);
    close(x);
    hs_agent_finish(&a);
}
END_TEST

static Suite *fds_suite(void)
{
    Suite *s = suite_create("hostile_fds");
    TCase *tc = tcase_create("fds");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_segments_past_the_fd_budget_are_refused_and_others_still_connect);
    tcase_add_test(tc,
                   test_an_offer_whose_fd_was_dropped_is_refused_and_accept_resumes_when_fds_free);
    suite_add_tcase(s, tc);
    return s;
}

LEASE_CHECK_MAIN(fds_suite, NULL)
