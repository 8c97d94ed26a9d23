/* base/notify: sd_notify's datagram reaches a socket bound where
 * $NOTIFY_SOCKET says, path or abstract name; unset is a no-op; a value
 * that is no socket address is refused; a socket nobody bound is an errno. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/notify.h"
#include "check_main.h"

/* A datagram socket bound at @name ('@' first: abstract); returns its fd. */
static int bound(const char *name)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t n = strlen(name);
    ck_assert_uint_lt(n, sizeof a.sun_path);
    memcpy(a.sun_path, name, n);
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
    if (name[0] == '@') {
        a.sun_path[0] = '\0';
        len--;
    }
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, len), 0);
    return fd;
}

static void expect_datagram(int fd, const char *want)
{
    char buf[256];
    ssize_t n = recv(fd, buf, sizeof buf - 1, MSG_DONTWAIT);
    ck_assert_int_eq(n, (ssize_t)strlen(want));
    buf[n] = '\0';
    ck_assert_str_eq(buf, want);
}

START_TEST(a_datagram_reaches_the_socket_path)
{
    char dir[] = "/tmp/base-notify-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[96];
    snprintf(path, sizeof path, "%s/notify.sock", dir);
    int fd = bound(path);
    ck_assert_int_eq(setenv("NOTIFY_SOCKET", path, 1), 0);
    ck_assert_int_eq(base_notify("READY=1"), 1);
    expect_datagram(fd, "READY=1");
    ck_assert_int_eq(base_notify("STATUS=serving\nMAINPID=1"), 1);
    expect_datagram(fd, "STATUS=serving\nMAINPID=1");
    close(fd);
    unlink(path);
    /* Nobody bound there any more: the errno, not a crash or a hang. */
    ck_assert_int_eq(base_notify("STOPPING=1"), -ENOENT);
    rmdir(dir);
    unsetenv("NOTIFY_SOCKET");
}
END_TEST

START_TEST(a_datagram_reaches_an_abstract_name)
{
    char name[64];
    snprintf(name, sizeof name, "@base-notify-test-%ld", (long)getpid());
    int fd = bound(name);
    ck_assert_int_eq(setenv("NOTIFY_SOCKET", name, 1), 0);
    ck_assert_int_eq(base_notify("STOPPING=1"), 1);
    expect_datagram(fd, "STOPPING=1");
    close(fd);
    unsetenv("NOTIFY_SOCKET");
}
END_TEST

START_TEST(unset_is_a_no_op_and_bad_values_are_refused)
{
    unsetenv("NOTIFY_SOCKET");
    ck_assert_int_eq(base_notify("READY=1"), 0);
    setenv("NOTIFY_SOCKET", "", 1);
    ck_assert_int_eq(base_notify("READY=1"), 0);
    setenv("NOTIFY_SOCKET", "relative/notify.sock", 1);
    ck_assert_int_eq(base_notify("READY=1"), -EINVAL);
    char longp[200];
    memset(longp, 'a', sizeof longp - 1);
    longp[0] = '/';
    longp[sizeof longp - 1] = '\0';
    setenv("NOTIFY_SOCKET", longp, 1);
    ck_assert_int_eq(base_notify("READY=1"), -EINVAL);
    unsetenv("NOTIFY_SOCKET");
}
END_TEST

static Suite *notify_suite(void)
{
    Suite *s = suite_create("base_notify");
    TCase *tc = tcase_create("notify");
    tcase_add_test(tc, a_datagram_reaches_the_socket_path);
    tcase_add_test(tc, a_datagram_reaches_an_abstract_name);
    tcase_add_test(tc, unset_is_a_no_op_and_bad_values_are_refused);
    suite_add_tcase(s, tc);
    return s;
}

BASE_CHECK_MAIN(notify_suite)
