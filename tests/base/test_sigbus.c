/* base/sigbus: a SIGBUS inside an armed range ends only that guarded call
 * (-EFAULT), again and again, on any thread and nested; every other SIGBUS
 * still kills the process, as it would without the guard. The fault is made
 * the portable way: a memfd mapped for two pages and truncated to one. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/sigbus.h"
#include "check_main.h"

struct gone {
    int fd;
    unsigned char *map; /* page 0 is backed, page 1 is past the end of the file */
    size_t page;
};

static void gone_make(struct gone *g)
{
    g->page = (size_t)sysconf(_SC_PAGESIZE);
    g->fd = memfd_create("sigbus-test", MFD_CLOEXEC);
    ck_assert_int_ge(g->fd, 0);
    ck_assert_int_eq(ftruncate(g->fd, (off_t)(2 * g->page)), 0);
    g->map = mmap(NULL, 2 * g->page, PROT_READ | PROT_WRITE, MAP_SHARED, g->fd, 0);
    ck_assert_ptr_ne(g->map, MAP_FAILED);
    memset(g->map, 0x5a, 2 * g->page);
    ck_assert_int_eq(ftruncate(g->fd, (off_t)g->page), 0);
}

static void gone_free(struct gone *g)
{
    munmap(g->map, 2 * g->page);
    close(g->fd);
}

START_TEST(a_fault_inside_the_armed_range_fails_only_that_call)
{
    struct gone g;
    gone_make(&g);
    unsigned char buf[64];
    uint64_t faults = base_guard_faults();
    for (int i = 0; i < 1000; i++) {
        ck_assert_int_eq(base_guard_copy(buf, g.map + g.page + 8, sizeof buf), -EFAULT);
        ck_assert_int_eq(base_guard_copy(buf, g.map, sizeof buf), 0);
        ck_assert_uint_eq(buf[0], 0x5a);
    }
    uint64_t v = 7;
    ck_assert_int_eq(base_guard_load_u64((const uint64_t *)(void *)(g.map + g.page), &v), -EFAULT);
    ck_assert_uint_eq(v, 7); /* untouched on failure */
    ck_assert_int_eq(base_guard_store_u64((uint64_t *)(void *)(g.map + g.page), 1), -EFAULT);
    ck_assert_int_eq(base_guard_copy(g.map + g.page, buf, 8), -EFAULT); /* a destination too */
    ck_assert_int_eq(base_guard_store_u64((uint64_t *)(void *)g.map, 0x1122334455667788ull), 0);
    ck_assert_int_eq(base_guard_load_u64((const uint64_t *)(void *)g.map, &v), 0);
    ck_assert_uint_eq(v, 0x1122334455667788ull);
    ck_assert_uint_eq(base_guard_faults() - faults, 1003);
    gone_free(&g);
}
END_TEST

struct nest {
    struct gone *g;
    int inner_rc;
    int reached_end;
};

static void nest_inner(void *arg)
{
    struct nest *n = arg;
    volatile unsigned char c = n->g->map[n->g->page]; /* faults */
    (void)c;
}

static void nest_outer(void *arg)
{
    struct nest *n = arg;
    /* The inner guard arms page 0 only: the fault on page 1 is the outer's. */
    n->inner_rc = base_guard_run(n->g->map, n->g->page, nest_inner, n);
    n->reached_end = 1;
}

START_TEST(nested_guards_the_innermost_owner_catches_the_fault)
{
    struct gone g;
    gone_make(&g);
    struct nest n = {.g = &g, .inner_rc = 99};
    ck_assert_int_eq(base_guard_run(g.map, 2 * g.page, nest_outer, &n), -EFAULT);
    ck_assert_int_eq(n.inner_rc, 99); /* abandoned with the outer call */
    ck_assert_int_eq(n.reached_end, 0);
    /* Both frames are gone: a guarded call afterwards works as usual. */
    unsigned char b;
    ck_assert_int_eq(base_guard_copy(&b, g.map, 1), 0);
    gone_free(&g);
}
END_TEST

/* In a child: a guarded read of @read (@by_kill: a SIGBUS sent with
 * kill() instead, with the handler installed). Returns how the child ended:
 * its exit status, or 128 + the signal. */
static int child_reads(const volatile unsigned char *read, int by_kill)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (by_kill) {
            if (base_guard_install() < 0)
                _exit(3);
            kill(getpid(), SIGBUS);
            _exit(0);
        }
        unsigned char b;
        int rc = base_guard_copy(&b, (const void *)read, 1);
        _exit(rc == -EFAULT ? 1 : 2);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
}

struct outside {
    const volatile unsigned char *read;
};

static void read_elsewhere(void *arg)
{
    const struct outside *o = arg;
    volatile unsigned char c = *o->read;
    (void)c;
}

START_TEST(a_fault_outside_every_armed_range_still_kills)
{
    struct gone g;
    gone_make(&g);
    /* Guarded, but the fault is not in the armed range: the default action. */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        struct outside o = {g.map + g.page};
        int rc = base_guard_run(g.map, g.page, read_elsewhere, &o);
        _exit(rc == -EFAULT ? 1 : 2);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS, "child ended with status %#x", st);
    /* Not guarded at all, with the handler installed: the same. */
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (base_guard_install() < 0)
            _exit(3);
        volatile unsigned char c = g.map[g.page];
        (void)c;
        _exit(0);
    }
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS, "child ended with status %#x", st);
    /* A sent SIGBUS is never swallowed either; a guarded fault is caught. */
    ck_assert_int_eq(child_reads(g.map + g.page, 1), 128 + SIGBUS);
    ck_assert_int_eq(child_reads(g.map + g.page, 0), 1);
    gone_free(&g);
}
END_TEST

struct worker {
    struct gone *g;
    int bad; /* 1: fault every time; 0: never */
    int wrong;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    unsigned char buf[32];
    for (int i = 0; i < 20000; i++) {
        int rc = base_guard_copy(buf, w->g->map + (w->bad ? w->g->page : 0), sizeof buf);
        if (rc != (w->bad ? -EFAULT : 0) || (!w->bad && buf[5] != 0x5a))
            w->wrong++;
    }
    return NULL;
}

START_TEST(threads_fault_independently)
{
    struct gone g;
    gone_make(&g);
    struct worker w[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (struct worker){.g = &g, .bad = i % 2};
        ck_assert_int_eq(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(w[i].wrong, 0);
    }
    gone_free(&g);
}
END_TEST

/* A library's thread (the CUDA driver's, running a stream host function)
 * may block every signal; a synchronous SIGBUS blocked there would kill
 * the process whatever the handler. The guard unblocks it for its call. */
static void *blocked_main(void *arg)
{
    struct worker *w = arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    unsigned char buf[16];
    for (int i = 0; i < 100; i++)
        if (base_guard_copy(buf, w->g->map + w->g->page, sizeof buf) != -EFAULT)
            w->wrong++;
    return NULL;
}

START_TEST(a_thread_that_blocks_every_signal_is_guarded_too)
{
    struct gone g;
    gone_make(&g);
    /* In a child: before the fix, the process died of the first fault. */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        struct worker w = {.g = &g, .bad = 1};
        pthread_t th;
        if (pthread_create(&th, NULL, blocked_main, &w) != 0)
            _exit(3);
        pthread_join(th, NULL);
        _exit(w.wrong == 0 ? 0 : 2);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "child ended with status %#x (killed by signal %d?)", st,
                  WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    gone_free(&g);
}
END_TEST

static Suite *sigbus_suite(void)
{
    Suite *s = suite_create("base_sigbus");
    TCase *tc = tcase_create("guard");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, a_fault_inside_the_armed_range_fails_only_that_call);
    tcase_add_test(tc, nested_guards_the_innermost_owner_catches_the_fault);
    tcase_add_test(tc, a_fault_outside_every_armed_range_still_kills);
    tcase_add_test(tc, threads_fault_independently);
    tcase_add_test(tc, a_thread_that_blocks_every_signal_is_guarded_too);
    suite_add_tcase(s, tc);
    return s;
}

BASE_CHECK_MAIN(sigbus_suite)
