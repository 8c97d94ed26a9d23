/* base/log: levels, the sink contract, cut lines that end in "...", the
 * default sink, the file sink's line format, whole lines from many threads,
 * reopening for log rotation (requested from a signal handler, and failing),
 * fd sinks, and the terminal's status line. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include "base/log.h"
#include "check_main.h"

/* ---- a sink that records ---- */

#define CAP_LINES 16

struct cap {
    int n;
    int level[CAP_LINES];
    char subsys[CAP_LINES][64];
    char line[CAP_LINES][BASE_LOG_LINE_MAX + 64];
};

static struct cap cap;

static void cap_fn(void *ctx, int level, const char *subsys, const char *line)
{
    struct cap *c = ctx;
    ck_assert_ptr_nonnull(subsys);
    if (c->n == CAP_LINES)
        return;
    c->level[c->n] = level;
    snprintf(c->subsys[c->n], sizeof c->subsys[0], "%s", subsys);
    snprintf(c->line[c->n], sizeof c->line[0], "%s", line);
    c->n++;
}

static struct base_log_sink cap_sink(int max_level)
{
    memset(&cap, 0, sizeof cap);
    return (struct base_log_sink){cap_fn, &cap, max_level};
}

START_TEST(a_sink_gets_the_level_the_subsys_and_one_line_without_its_newline)
{
    struct base_log_sink s = cap_sink(0);
    base_log(&s, BASE_LOG_WARN, "pool", "segment %d: %s\n", 3, "short");
    base_log(&s, BASE_LOG_ERROR, NULL, "no subsys");
    base_log(&s, BASE_LOG_INFO, "", "two\n\n"); /* only one newline goes */
    ck_assert_int_eq(cap.n, 3);
    ck_assert_int_eq(cap.level[0], BASE_LOG_WARN);
    ck_assert_str_eq(cap.subsys[0], "pool");
    ck_assert_str_eq(cap.line[0], "segment 3: short");
    ck_assert_str_eq(cap.subsys[1], "");
    ck_assert_str_eq(cap.line[1], "no subsys");
    ck_assert_str_eq(cap.line[2], "two\n");
}
END_TEST

START_TEST(lines_above_the_sinks_level_are_dropped)
{
    struct base_log_sink s = cap_sink(0); /* 0: info */
    base_log(&s, BASE_LOG_DEBUG, "x", "dropped");
    base_log(&s, BASE_LOG_INFO, "x", "kept");
    ck_assert_int_eq(cap.n, 1);
    ck_assert(base_log_enabled(&s, BASE_LOG_INFO));
    ck_assert(!base_log_enabled(&s, BASE_LOG_DEBUG));

    s = cap_sink(BASE_LOG_DEBUG);
    base_log(&s, BASE_LOG_DEBUG, "x", "kept");
    ck_assert_int_eq(cap.n, 1);

    s = cap_sink(BASE_LOG_ERROR);
    base_log(&s, BASE_LOG_WARN, "x", "dropped");
    base_log(&s, BASE_LOG_NOTICE, "x", "dropped");
    base_log(&s, BASE_LOG_ERROR, "x", "kept");
    ck_assert_int_eq(cap.n, 1);
    ck_assert_str_eq(cap.line[0], "kept");
}
END_TEST

START_TEST(a_long_message_is_cut_at_a_word_and_ends_in_an_ellipsis)
{
    char msg[3 * BASE_LOG_LINE_MAX] = "";
    size_t len = 0;
    for (int i = 0; len + 16 < sizeof msg; i++)
        len += (size_t)snprintf(msg + len, sizeof msg - len, "word%04d ", i);
    struct base_log_sink s = cap_sink(0);
    base_log(&s, BASE_LOG_INFO, "x", "%s", msg);
    ck_assert_int_eq(cap.n, 1);
    size_t n = strlen(cap.line[0]);
    ck_assert_uint_lt(n, BASE_LOG_LINE_MAX);
    ck_assert_uint_gt(n, BASE_LOG_LINE_MAX - 40);
    ck_assert_str_eq(cap.line[0] + n - 4, " ...");
    ck_assert_int_eq(strncmp(cap.line[0], msg, n - 3), 0); /* whole words before it */
}
END_TEST

START_TEST(a_null_sink_or_a_null_fn_means_the_default)
{
    struct base_log_sink s = cap_sink(BASE_LOG_DEBUG);
    base_log_default_set(&s);
    struct base_log_sink empty = {0};
    base_log(NULL, BASE_LOG_DEBUG, "a", "one");
    base_log(&empty, BASE_LOG_INFO, "b", "two"); /* fn NULL: the default, level too */
    ck_assert(base_log_enabled(NULL, BASE_LOG_DEBUG));
    base_log_default_set(NULL);
    ck_assert(!base_log_enabled(NULL, BASE_LOG_DEBUG)); /* standard error: info */
    ck_assert_int_eq(cap.n, 2);
    ck_assert_str_eq(cap.line[0], "one");
    ck_assert_str_eq(cap.subsys[1], "b");
}
END_TEST

/* Everything readable on @fd now (it must be nonblocking or have data). */
static size_t drain(int fd, char *buf, size_t len, int wait_ms)
{
    size_t got = 0;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (got + 1 < len && poll(&p, 1, wait_ms) == 1) {
        ssize_t n = read(fd, buf + got, len - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        wait_ms = 50;
    }
    buf[got] = '\0';
    return got;
}

START_TEST(the_built_in_default_writes_program_level_and_subsys_to_stderr)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    int saved = dup(STDERR_FILENO);
    ck_assert_int_ge(saved, 0);
    ck_assert_int_eq(dup2(p[1], STDERR_FILENO), STDERR_FILENO);
    base_log(NULL, BASE_LOG_WARN, "pool", "low on %s", "memory");
    base_log(NULL, BASE_LOG_INFO, NULL, "plain");
    base_log(NULL, BASE_LOG_DEBUG, NULL, "dropped");
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(p[1]);
    char buf[512];
    drain(p[0], buf, sizeof buf, 1000);
    close(p[0]);
    ck_assert_str_eq(buf, "test_base_log: warning: pool: low on memory\n"
                          "test_base_log: info: plain\n");
}
END_TEST

/* ---- the file sink ---- */

static char dir[64];

static void tmpdir_make(void)
{
    snprintf(dir, sizeof dir, "/tmp/base-log-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

/* Removes the files in dir (one level: the tests make no deeper ones). */
static void tmpdir_remove(void)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    char path[384];
    for (struct dirent *e; (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

static size_t slurp(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ck_assert_msg(fd >= 0, "%s: %s", path, strerror(errno));
    size_t got = 0;
    ssize_t n;
    while (got + 1 < len && (n = read(fd, buf + got, len - 1 - got)) > 0)
        got += (size_t)n;
    buf[got] = '\0';
    close(fd);
    return got;
}

START_TEST(the_file_sink_writes_program_level_subsys_and_message)
{
    tmpdir_make();
    char path[128], buf[4096];
    snprintf(path, sizeof path, "%s/plain.log", dir);
    struct base_log_file *f = NULL;
    ck_assert_int_eq(base_log_file_open(path, "prog", 0, &f), 0);
    ck_assert(!base_log_file_is_tty(f));
    struct base_log_sink s = base_log_file_sink(f, BASE_LOG_DEBUG);
    base_log(&s, BASE_LOG_ERROR, "pool", "out of %s", "memory");
    base_log(&s, BASE_LOG_DEBUG, NULL, "no subsys");
    base_log(&s, 2, "x", "odd level"); /* syslog LOG_CRIT: above error, unnamed */
    base_log_file_destroy(f);
    slurp(path, buf, sizeof buf);
    ck_assert_str_eq(buf, "prog: error: pool: out of memory\n"
                          "prog: debug: no subsys\n"
                          "prog: log: x: odd level\n");
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0640);

    snprintf(path, sizeof path, "%s/stamped.log", dir);
    ck_assert_int_eq(base_log_file_open(path, "prog", BASE_LOG_FILE_TIME | BASE_LOG_FILE_PID, &f),
                     0);
    s = base_log_file_sink(f, 0);
    base_log(&s, BASE_LOG_INFO, "job", "done");
    base_log_file_destroy(f);
    slurp(path, buf, sizeof buf);
    int y, mo, d, h, mi, sec, ms, consumed = 0;
    char sign;
    ck_assert_int_eq(sscanf(buf, "%4d-%2d-%2dT%2d:%2d:%2d.%3d%c%*4d %n", &y, &mo, &d, &h, &mi, &sec,
                            &ms, &sign, &consumed),
                     8);
    ck_assert_msg(sign == '+' || sign == '-', "%s", buf);
    ck_assert_int_gt(consumed, 0);
    char want[128];
    snprintf(want, sizeof want, "prog[%ld]: info: job: done\n", (long)getpid());
    ck_assert_str_eq(buf + consumed, want);
    tmpdir_remove();
}
END_TEST

#define THREADS 4
#define PER_THREAD 2000

struct writer {
    struct base_log_sink sink;
    int index;
};

static void *writer_main(void *arg)
{
    const struct writer *w = arg;
    for (int i = 0; i < PER_THREAD; i++)
        base_log(&w->sink, BASE_LOG_INFO, "t", "writer %d line %d %s", w->index, i,
                 "................................................................");
    return NULL;
}

START_TEST(lines_from_many_threads_never_interleave)
{
    tmpdir_make();
    char path[128];
    snprintf(path, sizeof path, "%s/threads.log", dir);
    struct base_log_file *f = NULL;
    ck_assert_int_eq(base_log_file_open(path, "p", 0, &f), 0);
    pthread_t th[THREADS];
    struct writer w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct writer){base_log_file_sink(f, 0), i};
        ck_assert_int_eq(pthread_create(&th[i], NULL, writer_main, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    base_log_file_destroy(f);

    FILE *in = fopen(path, "re");
    ck_assert_ptr_nonnull(in);
    char line[256];
    int next[THREADS] = {0}, lines = 0;
    while (fgets(line, sizeof line, in)) {
        int who = -1, i = -1, end = 0;
        int got = sscanf(line, "p: info: t: writer %d line %d %*[.]\n%n", &who, &i, &end);
        ck_assert_msg(got == 2 && end == (int)strlen(line), "mixed line: %s", line);
        ck_assert(who >= 0 && who < THREADS);
        ck_assert_int_eq(i, next[who]); /* each thread's lines in its order */
        next[who]++;
        lines++;
    }
    fclose(in);
    ck_assert_int_eq(lines, THREADS * PER_THREAD);
    tmpdir_remove();
}
END_TEST

static struct base_log_file *hup_file;

static void on_hup(int sig)
{
    (void)sig;
    base_log_file_request_reopen(hup_file);
}

START_TEST(a_reopen_requested_by_sighup_moves_to_the_new_file_after_rotation)
{
    tmpdir_make();
    char path[128], rotated[140], buf[1024];
    snprintf(path, sizeof path, "%s/d.log", dir);
    snprintf(rotated, sizeof rotated, "%s.1", path);
    ck_assert_int_eq(base_log_file_open(path, "d", 0, &hup_file), 0);
    struct base_log_sink s = base_log_file_sink(hup_file, 0);
    base_log(&s, BASE_LOG_INFO, NULL, "before");
    ck_assert_int_eq(rename(path, rotated), 0); /* what logrotate does */
    base_log(&s, BASE_LOG_INFO, NULL, "still the old file");
    struct sigaction sa = {.sa_handler = on_hup};
    sigemptyset(&sa.sa_mask);
    ck_assert_int_eq(sigaction(SIGHUP, &sa, NULL), 0);
    ck_assert_int_eq(raise(SIGHUP), 0);
    base_log(&s, BASE_LOG_INFO, NULL, "after");
    slurp(rotated, buf, sizeof buf);
    ck_assert_str_eq(buf, "d: info: before\nd: info: still the old file\n");
    slurp(path, buf, sizeof buf);
    ck_assert_str_eq(buf, "d: info: after\n");

    /* And reopened directly, as an event loop would. */
    ck_assert_int_eq(rename(path, rotated), 0);
    ck_assert_int_eq(base_log_file_reopen(hup_file), 0);
    base_log(&s, BASE_LOG_INFO, NULL, "third");
    slurp(path, buf, sizeof buf);
    ck_assert_str_eq(buf, "d: info: third\n");
    base_log_file_destroy(hup_file);
    hup_file = NULL;
    tmpdir_remove();
}
END_TEST

START_TEST(a_failed_reopen_keeps_the_old_file_and_says_why_there)
{
    tmpdir_make();
    char sub[96], path[128], moved[128], buf[2048];
    snprintf(sub, sizeof sub, "%s/gone", dir);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    snprintf(path, sizeof path, "%s/x.log", sub);
    snprintf(moved, sizeof moved, "%s/x.log.1", dir);
    struct base_log_file *f = NULL;
    ck_assert_int_eq(base_log_file_open(path, "x", 0, &f), 0);
    ck_assert_int_eq(rename(path, moved), 0);
    ck_assert_int_eq(rmdir(sub), 0); /* nowhere to create the new file */
    ck_assert_int_eq(base_log_file_reopen(f), -ENOENT);
    struct base_log_sink s = base_log_file_sink(f, 0);
    base_log(&s, BASE_LOG_INFO, NULL, "carries on");
    base_log_file_destroy(f);
    slurp(moved, buf, sizeof buf);
    char want[512];
    snprintf(want, sizeof want,
             "x: error: log: cannot reopen %s: No such file or directory; still writing to the "
             "file open before\nx: info: carries on\n",
             path);
    ck_assert_str_eq(buf, want);
    tmpdir_remove();
}
END_TEST

START_TEST(an_fd_sink_never_closes_or_reopens_the_callers_fd)
{
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
    struct base_log_file *f = NULL;
    ck_assert_int_eq(base_log_file_fd(p[1], "f", 0, &f), 0);
    ck_assert_int_eq(base_log_file_reopen(f), 0);
    base_log_file_request_reopen(f);
    struct base_log_sink s = base_log_file_sink(f, 0);
    base_log(&s, BASE_LOG_NOTICE, "n", "through the pipe");
    base_log_file_status(f, "not a terminal: not drawn");
    base_log_file_destroy(f);
    ck_assert_int_ne(fcntl(p[1], F_GETFD), -1);
    char buf[256];
    drain(p[0], buf, sizeof buf, 1000);
    ck_assert_str_eq(buf, "f: notice: n: through the pipe\n");
    close(p[0]);
    close(p[1]);

    ck_assert_int_eq(base_log_file_fd(-1, "f", 0, &f), -EINVAL);
    ck_assert_int_eq(base_log_file_open(NULL, "f", 0, &f), -EINVAL);
    ck_assert_int_eq(base_log_file_open("/nonexistent-dir/x.log", "f", 0, &f), -ENOENT);
}
END_TEST

START_TEST(the_status_line_is_drawn_cleared_and_redrawn_on_a_terminal)
{
    int master = -1, slave = -1;
    if (openpty(&master, &slave, NULL, NULL, NULL) < 0) {
        fprintf(stderr, "no pseudo-terminal here (%s): status line not checked\n", strerror(errno));
        return;
    }
    struct termios raw;
    ck_assert_int_eq(tcgetattr(slave, &raw), 0);
    cfmakeraw(&raw);
    ck_assert_int_eq(tcsetattr(slave, TCSANOW, &raw), 0);
    struct base_log_file *f = NULL;
    ck_assert_int_eq(base_log_file_fd(slave, "t", BASE_LOG_FILE_COLOUR, &f), 0);
    ck_assert(base_log_file_is_tty(f));
    struct base_log_sink s = base_log_file_sink(f, 0);
    char buf[512];

    base_log_file_status(f, "50%");
    drain(master, buf, sizeof buf, 1000);
    ck_assert_str_eq(buf, "\r\033[K50%");
    base_log(&s, BASE_LOG_WARN, "job", "slow");
    drain(master, buf, sizeof buf, 1000);
    ck_assert_str_eq(buf, "\r\033[Kt: \033[1;33mwarning\033[0m: job: slow\n50%");
    base_log_file_status(f, NULL);
    drain(master, buf, sizeof buf, 1000);
    ck_assert_str_eq(buf, "\r\033[K");
    base_log(&s, BASE_LOG_INFO, NULL, "done");
    drain(master, buf, sizeof buf, 1000);
    ck_assert_str_eq(buf, "\r\033[Kt: \033[32minfo\033[0m: done\n");
    base_log_file_destroy(f);
    close(slave);
    close(master);
}
END_TEST

START_TEST(level_names_and_the_parse_table_agree)
{
    ck_assert_str_eq(base_log_level_name(BASE_LOG_ERROR), "error");
    ck_assert_str_eq(base_log_level_name(BASE_LOG_WARN), "warning");
    ck_assert_str_eq(base_log_level_name(BASE_LOG_NOTICE), "notice");
    ck_assert_str_eq(base_log_level_name(BASE_LOG_INFO), "info");
    ck_assert_str_eq(base_log_level_name(BASE_LOG_DEBUG), "debug");
    ck_assert_str_eq(base_log_level_name(0), "log");
    static const struct {
        const char *name;
        int level;
    } names[] = {{"error", BASE_LOG_ERROR},   {"warn", BASE_LOG_WARN}, {"warning", BASE_LOG_WARN},
                 {"notice", BASE_LOG_NOTICE}, {"info", BASE_LOG_INFO}, {"debug", BASE_LOG_DEBUG}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int v = 0;
        ck_assert_int_eq(base_parse_enum(names[i].name, base_log_levels, &v, NULL, 0), 0);
        ck_assert_int_eq(v, names[i].level);
    }
    char err[128];
    int v;
    ck_assert_int_eq(base_parse_enum("verbose", base_log_levels, &v, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "expected error, warn, warning, notice, info or debug, found 'verbose'");
}
END_TEST

static Suite *log_suite(void)
{
    Suite *s = suite_create("base_log");
    TCase *tc = tcase_create("front_end");
    tcase_add_test(tc, a_sink_gets_the_level_the_subsys_and_one_line_without_its_newline);
    tcase_add_test(tc, lines_above_the_sinks_level_are_dropped);
    tcase_add_test(tc, a_long_message_is_cut_at_a_word_and_ends_in_an_ellipsis);
    tcase_add_test(tc, a_null_sink_or_a_null_fn_means_the_default);
    tcase_add_test(tc, the_built_in_default_writes_program_level_and_subsys_to_stderr);
    tcase_add_test(tc, level_names_and_the_parse_table_agree);
    suite_add_tcase(s, tc);

    tc = tcase_create("file_sink");
    tcase_add_test(tc, the_file_sink_writes_program_level_subsys_and_message);
    tcase_add_test(tc, lines_from_many_threads_never_interleave);
    tcase_add_test(tc, a_reopen_requested_by_sighup_moves_to_the_new_file_after_rotation);
    tcase_add_test(tc, a_failed_reopen_keeps_the_old_file_and_says_why_there);
    tcase_add_test(tc, an_fd_sink_never_closes_or_reopens_the_callers_fd);
    tcase_add_test(tc, the_status_line_is_drawn_cleared_and_redrawn_on_a_terminal);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}

BASE_CHECK_MAIN(log_suite)
