/* Issue #12, finding 5: no per-peer fairness, so one uid could take every
 * one of --max-clients connections and lock every other uid out. Now each
 * uid may hold at most --max-clients-per-uid connections (by default a
 * quarter of --max-clients when more than one uid is allowed): the rest of
 * its connections are refused with LT_E_LIMIT and the numbers, and another
 * uid still gets in. Likewise the requests in flight: one uid's connections
 * together may have at most --max-inflight-per-uid unanswered (by default
 * two connections' --max-inflight when more than one uid is allowed), so
 * requests parked behind bells a uid never rings, spread over its
 * connections, cannot take every executor slot. Needs root to act as
 * another uid: exits 77 otherwise. */
#include <check.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hostile.h"

#define MAX_CLIENTS 8

static uid_t other_uid;
static gid_t other_gid;
static char group_name[64];

/* A child's end: writes its two numbers to @wfd, then holds what it opened
 * until @rfd closes (the parent is done), and exits 0. */
static _Noreturn void report_and_hold(int wfd, int rfd, int a, int b)
{
    const int report[2] = {a, b};
    if (write(wfd, report, sizeof report) != (ssize_t)sizeof report)
        _exit(21);
    char c;
    while (read(rfd, &c, 1) > 0)
        ;
    _exit(0);
}

/* An agent in a fresh directory that root and the other uid may use, with
 * one more option (@opt @val); its directory's path goes to @dir. */
static void two_uid_agent_start(struct th_agent *a, char dir[64], const char *opt, const char *val)
{
    snprintf(dir, 64, "/tmp/ga-fair-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ck_assert_int_eq(chmod(dir, 0711), 0);
    char run[96], uidarg[32];
    snprintf(run, sizeof run, "%s/run", dir);
    snprintf(uidarg, sizeof uidarg, "%u", (unsigned)other_uid);
    const char *extra[] = {"--group", group_name, "--allow-uid", uidarg, "--allow-uid", "0",
                           opt,       val,        NULL};
    th_agent_start(a, run, extra);
}

/* A child that becomes the other uid and opens MAX_CLIENTS connections,
 * each with a HELLO. It writes how many were answered to @wfd, then holds
 * them until @rfd closes. */
static pid_t greedy_start(const char *sock, int wfd, int rfd, int parent_end)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid != 0)
        return pid;
    close(parent_end); /* else @rfd never reads end of file */
    if (setgroups(0, NULL) < 0 || setgid(other_gid) < 0 || setuid(other_uid) < 0)
        _exit(20);
    int served = 0, limit_refusals = 0;
    for (int i = 0; i < MAX_CLIENTS; i++) {
        int fd = th_connect(sock);
        struct lt_msg_hello h;
        lt_msg_init(&h, sizeof h, LT_MSG_HELLO, 1);
        h.version_min = h.version_max = 1;
        lt_name_set(h.name, sizeof h.name, "greedy");
        th_send(fd, &h, sizeof h, NULL, 0);
        union lt_msg_buffer buf;
        ssize_t n = th_recv(fd, &buf, TH_TIMEOUT_MS);
        if (n > 0 && buf.hdr.type == LT_MSG_HELLO_REPLY)
            served++;
        else if ((n > 0 && buf.hdr.type == LT_MSG_ERROR &&
                  ((const struct lt_msg_error *)(const void *)buf.bytes)->code == LT_E_LIMIT) ||
                 n == 0)
            limit_refusals++; /* the ERROR, or the close it came with (a reset may eat it) */
        /* Keep every socket open: held connections are the point. */
    }
    report_and_hold(wfd, rfd, served, limit_refusals);
}

START_TEST(test_one_uid_cannot_take_every_connection)
{
    struct th_agent a;
    char dir[64], maxarg[16];
    snprintf(maxarg, sizeof maxarg, "%d", MAX_CLIENTS);
    two_uid_agent_start(&a, dir, "--max-clients", maxarg);

    int up[2], down[2];
    ck_assert_int_eq(pipe(up), 0);
    ck_assert_int_eq(pipe(down), 0);
    pid_t child = greedy_start(a.sock, up[1], down[0], down[1]);
    close(up[1]);
    close(down[0]);
    int report[2] = {-1, -1};
    ck_assert_int_eq(read(up[0], report, sizeof report), (ssize_t)sizeof report);
    /* The greedy uid got its share, and was told why it got no more. */
    ck_assert_int_ge(report[0], 1);
    ck_assert_msg(report[0] < MAX_CLIENTS, "uid %u holds all %d connections",
                  (unsigned)other_uid, report[0]);
    ck_assert_int_eq(report[0] + report[1], MAX_CLIENTS);
    ck_assert(th_file_wait_for(a.log, "per-uid", TH_TIMEOUT_MS));

    /* Root is still served while the greedy connections are held. */
    hs_assert_serving(&a);
    close(down[1]);
    int st;
    ck_assert_int_eq(waitpid(child, &st, 0), child);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(up[0]);
    ck_assert_int_eq(th_agent_stop(&a), 0);
    th_agent_cleanup(&a);
    rmdir(dir);
}
END_TEST

/* A child that becomes the other uid, opens two connections and parks four
 * checksum SUBMITs behind bells it never rings on each (8 in flight, each
 * connection at its own --max-inflight of 4), then offers one more segment
 * on a third connection. It writes that offer's status and whether its
 * text names the per-uid limit to @wfd, then holds everything until @rfd
 * closes. */
static pid_t parker_start(const char *sock, int wfd, int rfd, int parent_end)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid != 0)
        return pid;
    close(parent_end);
    if (setgroups(0, NULL) < 0 || setgid(other_gid) < 0 || setuid(other_uid) < 0)
        _exit(20);
    int conn[3];
    struct hs_seg bells[8], data[8], more;
    for (int k = 0; k < 2; k++) {
        conn[k] = th_hello(sock, LT_CAP_DOORBELL, NULL);
        for (int i = 0; i < 4; i++)
            hs_unrung_bell_submit(conn[k], &bells[4 * k + i], &data[4 * k + i], 32 * HS_KIB,
                                  (uint64_t)(10 + 8 * k + 2 * i));
    }
    conn[2] = th_hello(sock, LT_CAP_DOORBELL, NULL);
    char msg[128] = "";
    if (hs_memfd(&more, 64 * HS_KIB, 0, HS_SEALS, 99) < 0)
        _exit(22);
    const uint32_t code = hs_offer(conn[2], &more, LT_CLASS_PINNED, msg, sizeof msg);
    report_and_hold(wfd, rfd, (int)code, strstr(msg, "per-uid limit") != NULL);
}

START_TEST(test_one_uid_cannot_take_every_request_in_flight)
{
    struct th_agent a;
    char dir[64];
    two_uid_agent_start(&a, dir, "--max-inflight", "4");

    int up[2], down[2];
    ck_assert_int_eq(pipe(up), 0);
    ck_assert_int_eq(pipe(down), 0);
    pid_t child = parker_start(a.sock, up[1], down[0], down[1]);
    close(up[1]);
    close(down[0]);
    int report[2] = {-1, -1};
    ck_assert_int_eq(read(up[0], report, sizeof report), (ssize_t)sizeof report);
    ck_assert_msg(report[0] == LT_E_LIMIT && report[1] == 1,
                  "the parking uid's ninth request: expected LIMIT naming the per-uid limit, "
                  "found %s (%s)",
                  lt_error_name((uint32_t)report[0]), report[1] ? "names it" : "does not name it");

    /* Root's requests are still taken while the parked ones wait. */
    int c = th_hello(a.sock, 0, NULL);
    struct hs_seg seg;
    char msg[128];
    ck_assert_int_eq(hs_memfd(&seg, 64 * HS_KIB, 0, HS_SEALS, 7), 0);
    ck_assert_msg(hs_offer(c, &seg, LT_CLASS_PINNED, msg, sizeof msg) == LT_OK, "root: %s", msg);
    close(c);
    hs_seg_close(&seg);
    close(down[1]);
    int st;
    ck_assert_int_eq(waitpid(child, &st, 0), child);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(up[0]);
    hs_agent_finish(&a);
    rmdir(dir);
}
END_TEST

int main(void)
{
    if (geteuid() != 0) {
        printf("SKIP hostile_uid_fairness: needs root to act as another uid\n");
        return 77;
    }
    struct passwd *pw = getpwnam("nobody");
    struct group *gr = getgrnam("nogroup");
    if (!gr)
        gr = getgrnam("nobody");
    if (!pw || !gr) {
        printf("SKIP hostile_uid_fairness: no 'nobody' user or 'nogroup' group\n");
        return 77;
    }
    other_uid = pw->pw_uid;
    other_gid = gr->gr_gid;
    snprintf(group_name, sizeof group_name, "%s", gr->gr_name);
    signal(SIGPIPE, SIG_IGN);
    Suite *s = suite_create("hostile_uid_fairness");
    TCase *tc = tcase_create("fairness");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_one_uid_cannot_take_every_connection);
    tcase_add_test(tc, test_one_uid_cannot_take_every_request_in_flight);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
