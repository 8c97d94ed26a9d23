/* Peer authentication by SO_PEERCRED: a process of another uid that can
 * reach the socket (through --group) is refused before a byte is read,
 * unless --allow-uid names it; then it lists its own leases and segments
 * only (LT_CAP_INTROSPECT). Needs root to become another uid: exits 77
 * (skipped) otherwise. */
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

#include "harness.h"

static uid_t other_uid;
static gid_t other_gid;
static char group_name[64];

/* In a child that becomes @other_uid: connect, HELLO, and report by exit
 * status: 0 answered, 10 closed without an answer, 20 setup failed. */
static int probe_as_other(const char *sock)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (setgroups(0, NULL) < 0 || setgid(other_gid) < 0 || setuid(other_uid) < 0)
            _exit(20);
        int fd = th_connect(sock);
        struct lt_msg_hello h;
        lt_msg_init(&h, sizeof h, LT_MSG_HELLO, 1);
        h.version_min = h.version_max = 1;
        lt_name_set(h.name, sizeof h.name, "other-uid");
        th_send(fd, &h, sizeof h, NULL, 0); /* may fail: already closed */
        union lt_msg_buffer buf;
        ssize_t n = th_recv(fd, &buf, TH_TIMEOUT_MS);
        _exit(n > 0 && buf.hdr.type == LT_MSG_HELLO_REPLY ? 0
              : n <= 0 && n != -ETIMEDOUT                 ? 10
                                                          : 30);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st));
    return WEXITSTATUS(st);
}

START_TEST(test_other_uid_is_refused_unless_allowed)
{
    struct th_agent a;
    char dir[64] = "/tmp/ga-uid-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ck_assert_int_eq(chmod(dir, 0711), 0); /* others may traverse to run/ */
    char run[96];
    snprintf(run, sizeof run, "%s/run", dir);
    const char *extra[] = {"--group", group_name, NULL};
    th_agent_start(&a, run, extra);

    /* The agent made run/ 0710 and the socket 0660, both of the group. */
    struct stat st;
    ck_assert_int_eq(stat(run, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0710);
    ck_assert_uint_eq(st.st_gid, other_gid);
    ck_assert_int_eq(stat(a.sock, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0660);
    ck_assert_uint_eq(st.st_gid, other_gid);

    ck_assert_int_eq(probe_as_other(a.sock), 10);
    char needle[96];
    snprintf(needle, sizeof needle, "uid %u", (unsigned)other_uid);
    ck_assert(th_file_wait_for(a.log, "refused peer pid", TH_TIMEOUT_MS));
    ck_assert(th_file_wait_for(a.log, needle, TH_TIMEOUT_MS));
    close(th_hello(a.sock, 0, NULL)); /* our own uid is still served */
    ck_assert_int_eq(th_agent_stop(&a), 0);

    /* With --allow-uid the same peer is served (and root no longer is). */
    char uidarg[32];
    snprintf(uidarg, sizeof uidarg, "%u", (unsigned)other_uid);
    const char *extra2[] = {"--group", group_name, "--allow-uid", uidarg, NULL};
    th_agent_start(&a, run, extra2);
    ck_assert_int_eq(probe_as_other(a.sock), 0);
    int fd = th_connect(a.sock);
    ck_assert_int_eq(th_expect_eof(fd), 0);
    close(fd);
    ck_assert_int_eq(th_agent_stop(&a), 0);
    th_agent_cleanup(&a);
    rmdir(dir);
}
END_TEST

/* In a child that becomes @other_uid: HELLO with LT_CAP_INTROSPECT, then a
 * lease list of every client and one of its own. Exit status: 0 when the
 * first is refused NOT_OWNER and the second answered, 1..9 otherwise. */
static int list_as_other(const char *sock)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (setgroups(0, NULL) < 0 || setgid(other_gid) < 0 || setuid(other_uid) < 0)
            _exit(20);
        int fd = th_connect(sock);
        struct lt_msg_hello h;
        lt_msg_init(&h, sizeof h, LT_MSG_HELLO, 1);
        h.version_min = h.version_max = 1;
        h.caps = LT_CAP_INTROSPECT;
        lt_name_set(h.name, sizeof h.name, "other-uid");
        union lt_msg_buffer buf;
        if (th_send(fd, &h, sizeof h, NULL, 0) < 0 || th_recv(fd, &buf, TH_TIMEOUT_MS) <= 0 ||
            buf.hdr.type != LT_MSG_HELLO_REPLY)
            _exit(1);
        const struct lt_msg_hello_reply *r = (const void *)buf.bytes;
        uint32_t self = r->client_id;
        if (!(r->caps & LT_CAP_INTROSPECT))
            _exit(2);
        struct lt_msg_list_request q;
        lt_msg_init(&q, sizeof q, LT_MSG_LEASE_LIST_REQUEST, 2);
        if (th_send(fd, &q, sizeof q, NULL, 0) < 0 || th_recv(fd, &buf, TH_TIMEOUT_MS) <= 0)
            _exit(3);
        if (buf.hdr.type != LT_MSG_ERROR ||
            ((const struct lt_msg_error *)(const void *)buf.bytes)->code != LT_E_NOT_OWNER)
            _exit(4);
        lt_msg_init(&q, sizeof q, LT_MSG_SEGMENT_LIST_REQUEST, 3);
        q.client_id = self;
        if (th_send(fd, &q, sizeof q, NULL, 0) < 0 || th_recv(fd, &buf, TH_TIMEOUT_MS) <= 0)
            _exit(5);
        _exit(buf.hdr.type == LT_MSG_SEGMENT_LIST_REPLY ? 0 : 6);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st));
    return WEXITSTATUS(st);
}

/* A peer of another uid that --allow-uid lets in lists its own entries
 * only: every client's needs the agent's uid or root. */
START_TEST(test_other_uid_lists_only_its_own)
{
    struct th_agent a;
    char dir[64] = "/tmp/ga-uid-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ck_assert_int_eq(chmod(dir, 0711), 0);
    char run[96], uidarg[32];
    snprintf(run, sizeof run, "%s/run", dir);
    snprintf(uidarg, sizeof uidarg, "%u", (unsigned)other_uid);
    const char *extra[] = {"--group", group_name, "--allow-uid", uidarg, "--allow-uid", "0", NULL};
    th_agent_start(&a, run, extra);
    ck_assert_int_eq(list_as_other(a.sock), 0);
    /* root, the agent's uid here, lists every client's. */
    int fd = th_hello(a.sock, LT_CAP_INTROSPECT, NULL);
    struct lt_msg_list_request q;
    lt_msg_init(&q, sizeof q, LT_MSG_LEASE_LIST_REQUEST, th_rid());
    ck_assert_int_eq(th_send(fd, &q, sizeof q, NULL, 0), 0);
    union lt_msg_buffer buf;
    th_expect(fd, &buf, LT_MSG_LEASE_LIST_REPLY);
    close(fd);
    ck_assert_int_eq(th_agent_stop(&a), 0);
    th_agent_cleanup(&a);
    rmdir(dir);
}
END_TEST

int main(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "test_ga_server_uid: needs root to act as another uid; skipped\n");
        return 77;
    }
    struct passwd *pw = getpwnam("nobody");
    struct group *gr = getgrnam("nogroup");
    if (!gr)
        gr = getgrnam("nobody");
    if (!pw || !gr) {
        fprintf(stderr, "test_ga_server_uid: no 'nobody' user or 'nogroup' group; skipped\n");
        return 77;
    }
    other_uid = pw->pw_uid;
    other_gid = gr->gr_gid;
    snprintf(group_name, sizeof group_name, "%s", gr->gr_name);
    signal(SIGPIPE, SIG_IGN);
    Suite *s = suite_create("server_uid");
    TCase *tc = tcase_create("peercred");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_other_uid_is_refused_unless_allowed);
    tcase_add_test(tc, test_other_uid_lists_only_its_own);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
