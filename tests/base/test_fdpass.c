/* base/fdpass: messages with none, one, several and the most fds over
 * SOCK_SEQPACKET; extra fds closed and counted; fds the kernel dropped at
 * the receiver's fd limit (MSG_CTRUNC); truncated messages; EOF, EAGAIN,
 * EPIPE without SIGPIPE, bad arguments, and EINTR retried. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/fdpass.h"
#include "check_main.h"

static void pair(int sv[2])
{
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
}

static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own fd */
}

static ino_t ino_of(int fd)
{
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    return st.st_ino;
}

START_TEST(a_message_without_fds_arrives_whole)
{
    int sv[2];
    pair(sv);
    ck_assert_int_eq(base_send_fds(sv[0], "hello", 5, NULL, 0, 0), 0);
    char buf[16];
    int fds[2] = {-1, -1};
    struct base_recv_info info = {.flags = 99};
    ck_assert_int_eq(base_recv_fds(sv[1], buf, sizeof buf, fds, 2, 0, &info), 5);
    ck_assert_int_eq(memcmp(buf, "hello", 5), 0);
    ck_assert_uint_eq(info.flags, 0);
    ck_assert_uint_eq(info.nfds, 0);
    ck_assert_uint_eq(info.nfds_closed, 0);
    ck_assert_int_eq(fds[0], -1);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

START_TEST(several_fds_arrive_in_order_and_close_on_exec)
{
    int sv[2];
    pair(sv);
    int mine[3];
    for (int i = 0; i < 3; i++) {
        mine[i] = memfd_create("fdpass", MFD_CLOEXEC);
        ck_assert_int_ge(mine[i], 0);
    }
    ck_assert_int_eq(base_send_fds(sv[0], "x", 1, mine, 3, MSG_DONTWAIT), 0);
    for (int i = 0; i < 3; i++)
        ck_assert_int_ne(fcntl(mine[i], F_GETFD), -1); /* the sender's stay open */
    char buf[4];
    int got[3] = {-1, -1, -1};
    struct base_recv_info info;
    ck_assert_int_eq(base_recv_fds(sv[1], buf, sizeof buf, got, 3, 0, &info), 1);
    ck_assert_uint_eq(info.nfds, 3);
    ck_assert_uint_eq(info.flags, 0);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_ne(got[i], mine[i]);
        ck_assert_uint_eq(ino_of(got[i]), ino_of(mine[i]));
        ck_assert_int_eq(fcntl(got[i], F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
        close(got[i]);
        close(mine[i]);
    }
    close(sv[0]);
    close(sv[1]);
}
END_TEST

START_TEST(the_most_fds_one_message_can_carry_all_arrive)
{
    int sv[2];
    pair(sv);
    int one = memfd_create("many", MFD_CLOEXEC);
    ck_assert_int_ge(one, 0);
    int fds[BASE_FDS_MAX];
    for (unsigned i = 0; i < BASE_FDS_MAX; i++)
        fds[i] = one;
    ck_assert_int_eq(base_send_fds(sv[0], "m", 1, fds, BASE_FDS_MAX, 0), 0);
    ck_assert_int_eq(base_send_fds(sv[0], "m", 1, fds, BASE_FDS_MAX + 1, 0), -EINVAL);
    int got[BASE_FDS_MAX];
    struct base_recv_info info;
    char c;
    ck_assert_int_eq(base_recv_fds(sv[1], &c, 1, got, BASE_FDS_MAX, 0, &info), 1);
    ck_assert_uint_eq(info.nfds, BASE_FDS_MAX);
    ck_assert_uint_eq(info.flags, 0);
    for (unsigned i = 0; i < BASE_FDS_MAX; i++) {
        ck_assert_uint_eq(ino_of(got[i]), ino_of(one));
        close(got[i]);
    }
    close(one);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

START_TEST(fds_beyond_the_callers_array_are_closed_and_counted)
{
    int sv[2];
    pair(sv);
    int mine[5];
    for (int i = 0; i < 5; i++)
        mine[i] = memfd_create("extra", MFD_CLOEXEC);
    ck_assert_int_eq(base_send_fds(sv[0], "y", 1, mine, 5, 0), 0);
    ck_assert_int_eq(base_send_fds(sv[0], "z", 1, mine, 2, 0), 0);
    int before = open_fds();
    int got[2];
    struct base_recv_info info;
    char c;
    ck_assert_int_eq(base_recv_fds(sv[1], &c, 1, got, 2, 0, &info), 1);
    ck_assert_uint_eq(info.nfds, 2);
    ck_assert_uint_eq(info.nfds_closed, 3);
    ck_assert_uint_eq(info.flags, BASE_RECV_EXTRA_FDS);
    ck_assert_int_eq(open_fds(), before + 2);
    ck_assert_uint_eq(ino_of(got[0]), ino_of(mine[0]));
    ck_assert_uint_eq(ino_of(got[1]), ino_of(mine[1]));
    close(got[0]);
    close(got[1]);

    /* No info wanted: every fd that came is closed unseen. */
    ck_assert_int_eq(base_recv_fds(sv[1], &c, 1, NULL, 0, 0, NULL), 1);
    ck_assert_int_eq(c, 'z');
    ck_assert_int_eq(open_fds(), before);
    for (int i = 0; i < 5; i++)
        close(mine[i]);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

START_TEST(fds_the_kernel_dropped_at_the_fd_limit_are_reported_as_ctrunc)
{
    /* In a child: the limit stays there. */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
            _exit(10);
        int mine[3];
        for (int i = 0; i < 3; i++)
            mine[i] = memfd_create("limit", MFD_CLOEXEC);
        if (base_send_fds(sv[0], "l", 1, mine, 3, 0) < 0)
            _exit(11);
        int lowest = dup(0); /* the one fd number left below the new limit */
        if (lowest < 0)
            _exit(12);
        close(lowest);
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
            _exit(12);
        rl.rlim_cur = (rlim_t)lowest + 1;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
            _exit(13);
        int got[3] = {-1, -1, -1};
        struct base_recv_info info;
        char c;
        ssize_t n = base_recv_fds(sv[1], &c, 1, got, 3, 0, &info);
        if (n != 1)
            _exit(14);
        if (!(info.flags & BASE_RECV_CTRUNC))
            _exit(15);
        if (info.nfds != 1 || got[0] != lowest || info.nfds_closed != 0)
            _exit(16);
        _exit(0);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: status %d", status);
}
END_TEST

START_TEST(a_message_longer_than_the_buffer_is_reported_as_trunc)
{
    int sv[2];
    pair(sv);
    char big[100];
    memset(big, 'b', sizeof big);
    int fd = memfd_create("trunc", MFD_CLOEXEC);
    ck_assert_int_eq(base_send_fds(sv[0], big, sizeof big, &fd, 1, 0), 0);
    char small[10];
    int got = -1;
    struct base_recv_info info;
    ck_assert_int_eq(base_recv_fds(sv[1], small, sizeof small, &got, 1, 0, &info), 10);
    ck_assert_uint_eq(info.flags, BASE_RECV_TRUNC);
    ck_assert_uint_eq(info.nfds, 1); /* the fd still came: the caller closes it */
    close(got);
    close(fd);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

START_TEST(eof_is_zero_and_an_empty_nonblocking_socket_eagain)
{
    int sv[2];
    pair(sv);
    char c;
    struct base_recv_info info;
    ck_assert_int_eq(base_recv_fds(sv[1], &c, 1, NULL, 0, MSG_DONTWAIT, &info), -EAGAIN);
    close(sv[0]);
    ck_assert_int_eq(base_recv_fds(sv[1], &c, 1, NULL, 0, 0, &info), 0);
    ck_assert_uint_eq(info.nfds, 0);
    close(sv[1]);
}
END_TEST

START_TEST(sending_to_a_closed_peer_is_epipe_not_sigpipe)
{
    int sv[2];
    pair(sv);
    close(sv[1]);
    ck_assert_int_eq(base_send_fds(sv[0], "p", 1, NULL, 0, 0), -EPIPE); /* still alive */
    close(sv[0]);
}
END_TEST

START_TEST(bad_arguments_and_bad_fds_are_refused)
{
    int sv[2];
    pair(sv);
    ck_assert_int_eq(base_send_fds(sv[0], "a", 1, NULL, 1, 0), -EINVAL);
    ck_assert_int_eq(base_send_fds(sv[0], NULL, 1, NULL, 0, 0), -EINVAL);
    int bad = 1000000;
    ck_assert_int_eq(base_send_fds(sv[0], "a", 1, &bad, 1, 0), -EBADF);
    char c;
    ck_assert_int_eq(base_recv_fds(sv[1], &c, 1, NULL, 1, 0, NULL), -EINVAL);
    ck_assert_int_eq(base_send_fds(-1, "a", 1, NULL, 0, 0), -EBADF);
    ck_assert_int_eq(base_recv_fds(-1, &c, 1, NULL, 0, 0, NULL), -EBADF);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

static void on_alarm(int sig)
{
    (void)sig;
}

struct late {
    int fd;
};

static void *send_late(void *arg)
{
    const struct late *l = arg;
    usleep(300 * 1000);
    base_send_fds(l->fd, "late", 4, NULL, 0, 0);
    return NULL;
}

START_TEST(a_receive_interrupted_by_a_signal_goes_on_waiting)
{
    int sv[2];
    pair(sv);
    struct sigaction sa = {.sa_handler = on_alarm}; /* no SA_RESTART: recvmsg sees EINTR */
    sigemptyset(&sa.sa_mask);
    ck_assert_int_eq(sigaction(SIGALRM, &sa, NULL), 0);
    struct itimerval it = {.it_interval = {0, 50000}, .it_value = {0, 50000}};
    ck_assert_int_eq(setitimer(ITIMER_REAL, &it, NULL), 0);
    struct late l = {sv[0]};
    pthread_t th;
    /* The sender must not take the signal instead of the receiver. */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGALRM);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    ck_assert_int_eq(pthread_create(&th, NULL, send_late, &l), 0);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    char buf[8];
    struct base_recv_info info;
    ck_assert_int_eq(base_recv_fds(sv[1], buf, sizeof buf, NULL, 0, 0, &info), 4);
    ck_assert_int_eq(memcmp(buf, "late", 4), 0);
    struct itimerval off = {0};
    setitimer(ITIMER_REAL, &off, NULL);
    pthread_join(th, NULL);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

static Suite *fdpass_suite(void)
{
    Suite *s = suite_create("base_fdpass");
    TCase *tc = tcase_create("fds");
    tcase_add_test(tc, a_message_without_fds_arrives_whole);
    tcase_add_test(tc, several_fds_arrive_in_order_and_close_on_exec);
    tcase_add_test(tc, the_most_fds_one_message_can_carry_all_arrive);
    tcase_add_test(tc, fds_beyond_the_callers_array_are_closed_and_counted);
    tcase_add_test(tc, fds_the_kernel_dropped_at_the_fd_limit_are_reported_as_ctrunc);
    suite_add_tcase(s, tc);

    tc = tcase_create("edges");
    tcase_add_test(tc, a_message_longer_than_the_buffer_is_reported_as_trunc);
    tcase_add_test(tc, eof_is_zero_and_an_empty_nonblocking_socket_eagain);
    tcase_add_test(tc, sending_to_a_closed_peer_is_epipe_not_sigpipe);
    tcase_add_test(tc, bad_arguments_and_bad_fds_are_refused);
    tcase_add_test(tc, a_receive_interrupted_by_a_signal_goes_on_waiting);
    suite_add_tcase(s, tc);
    return s;
}

BASE_CHECK_MAIN(fdpass_suite)
