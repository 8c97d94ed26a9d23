/* Fork after pinning (docs/reliability.md):
 *   - in-process: the lease service (host backend) has registered and
 *     leased a segment; a forked child does not have the pinned range
 *     mapped (MADV_DONTFORK) and dies touching it, while the parent keeps it;
 *   - lease-agent-host serving a client with PINNED and MAPPED segments, a
 *     lease held: every fd it holds is O_CLOEXEC (/proc/PID/fdinfo), and
 *     each segment mapping is VM_DONTCOPY ("dc" in /proc/PID/smaps);
 *   - stagingd running a daemon against it: every fd O_CLOEXEC;
 *   - where the CUDA agent is built, lease-agent under the fake driver
 *     (tests/fakecuda): the same two checks. The agent never forks or execs
 *     (no fork, exec, popen or system call in gpu/, lease/ or base/), so no
 *     child of it can touch CUDA; a child another program forks from a
 *     library user does not inherit the pinned ranges (above).
 *
 * argv[1]: stagingd, argv[2]: lease-agent-host; optional argv[3]: lease-agent
 * and argv[4]: the fake driver's folder, or "-" for the real driver (the GPU
 * variant: run by hand on a machine with the GPU, docs/reliability.md). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e_util.h"
#include "lease/lease.h"
#include "rel_util.h"

#define SEG_BYTES (64u << 10)
#define MIB (1ull << 20)

static const char *cuda_agent, *fake_dir;

/* 1 when some mapping of this process covers @addr. */
static int mapped(const void *addr)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return -1;
    char line[512];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && (uintptr_t)addr >= lo && (uintptr_t)addr < hi)
            found = 1;
    }
    fclose(f);
    return found;
}

static void quiet(void *ctx, int level, const char *subsys, const char *line)
{
    (void)ctx;
    (void)level;
    (void)subsys;
    (void)line;
}

START_TEST(a_forked_child_does_not_inherit_pinned_ranges)
{
    struct lease_backend be;
    struct lt_failure why;
    ck_assert_int_eq(lease_host_backend_init(&be, &why), 0);
    /* Legacy seals: the test writes through the service's own mapping of
     * a PINNED segment, which a strict service maps read-only. */
    struct lease_service_config cfg = {.budget_pinned = 1u << 20,
                                       .budget_mapped = 1u << 20,
                                       .seals = LEASE_SEALS_LEGACY,
                                       .log = {.fn = quiet}};
    struct lease_service *svc = NULL;
    ck_assert_int_eq(lease_service_create(&cfg, &be, &svc, &why), 0);
    struct lease_client_id c;
    ck_assert_int_eq(lease_client_add(svc, NULL, &c, NULL), 0);
    int fd = memfd_create("fork-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, SEG_BYTES), 0);
    ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
    struct lt_segment_id seg;
    ck_assert_int_eq(lease_segment_add(svc, c, fd, SEG_BYTES, LT_CLASS_PINNED, &seg, &why), 0);
    struct lease_grant_req req = {.segment = seg, .length = SEG_BYTES, .cls = LT_CLASS_PINNED};
    struct lease_grant_result res;
    ck_assert_int_eq(lease_grant(svc, c, 1, &req, &res, NULL), 1);
    volatile unsigned char *pinned = res.host_addr;
    pinned[0] = 0x5a;
    ck_assert_int_eq(mapped(res.host_addr), 1);

    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        _exit(mapped(res.host_addr) == 0 ? 0 : 1);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "the child has the pinned range mapped (status %#x)", st);
    /* And touching it there is a fault, not another process's bytes. */
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);
        _exit(pinned[0] == 0x5a ? 2 : 3);
    }
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV,
                  "a child touching the pinned range: expected SIGSEGV, found status %#x", st);
    ck_assert_uint_eq(pinned[0], 0x5a); /* the parent's is intact */
    lease_service_destroy(svc);
    lease_backend_fini(&be);
}
END_TEST

/* Every memfd mapping of @pid is VM_DONTCOPY; returns how many there are. */
static int segments_dontfork(pid_t pid, char *msg, size_t len)
{
    char path[64], line[512], cur[512] = "";
    snprintf(path, sizeof path, "/proc/%ld/smaps", (long)pid);
    FILE *f = fopen(path, "re");
    ck_assert_ptr_nonnull(f);
    int segs = 0, bad = 0, in_memfd = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in_memfd = strstr(line, "/memfd:") != NULL;
            snprintf(cur, sizeof cur, "%s", line);
            continue;
        }
        if (in_memfd && strncmp(line, "VmFlags:", 8) == 0) {
            segs++;
            if (!strstr(line, " dc")) {
                bad = 1;
                snprintf(msg, len, "pid %ld maps a segment without MADV_DONTFORK: %.200s%.200s",
                         (long)pid, cur, line);
                break;
            }
        }
    }
    fclose(f);
    return bad ? -1 : segs;
}

/* A client of the agent at @sock holding PINNED and MAPPED segments and a
 * lease; the caller checks the agent, then destroys it. */
struct held {
    struct leasec_pool *pool;
    struct leasec_client *c;
};

static void on_grant(void *ctx, const struct leasec_client_grant *g)
{
    *(int *)ctx = g->entries[0].err == 0 ? 1 : -1;
}

static void hold_leases(const char *sock, struct held *h)
{
    struct leasec_pool_config pc;
    ck_assert_int_eq(leasec_pool_config_default(&pc), 0);
    memset(pc.class_bytes, 0, sizeof pc.class_bytes);
    pc.class_bytes[LT_CLASS_PINNED] = 2 * MIB;
    pc.class_bytes[LT_CLASS_MAPPED] = 2 * MIB;
    pc.segment_bytes = 2 * MIB;
    pc.prefault_threads = 1;
    pc.pages = LEASEC_POOL_PAGES_SMALL;
    pc.log.fn = quiet;
    ck_assert_int_eq(leasec_pool_create(&pc, &h->pool), 0);
    static int granted;
    granted = 0;
    struct leasec_client_config cc;
    leasec_client_config_default(&cc);
    cc.name = "fork-test";
    cc.cb.on_grant = on_grant;
    cc.cb_ctx = &granted;
    cc.log.fn = quiet;
    ck_assert_int_eq(leasec_client_create(&cc, &h->c), 0);
    struct leasec_pool_segment seg;
    for (unsigned i = 0; i < leasec_pool_segment_count(h->pool); i++) {
        ck_assert_int_eq(leasec_pool_segment_at(h->pool, i, &seg), 0);
        ck_assert_int_eq(
            leasec_client_segment_add(h->c, seg.id, seg.fd, seg.base, seg.size, seg.mem_class), 0);
    }
    unsigned a;
    ck_assert_int_eq(leasec_client_agent_add(h->c, sock, &a), 0);
    ck_assert_int_eq(leasec_client_wait_ready(h->c, a, 10000), 0);
    ck_assert_int_eq(leasec_pool_segment_at(h->pool, 0, &seg), 0);
    struct leasec_client_lease_req req = {.segment = seg.id, .length = 65536};
    uint64_t rid;
    ck_assert_int_eq(leasec_client_lease_request(h->c, a, &req, 1, 0, 0, &rid), 0);
    ck_assert_int_eq(leasec_client_wait(h->c, a, rid, 10000), 0);
    ck_assert_int_eq(granted, 1);
}

static void release_held(struct held *h)
{
    leasec_client_destroy(h->c);
    leasec_pool_destroy(h->pool);
}

/* The agent's fds and segment mappings while it serves @h's leases. */
static void check_agent(pid_t agent, const char *what)
{
    char msg[512];
    int fds = rel_proc_all_cloexec(agent, msg, sizeof msg);
    ck_assert_msg(fds >= 0, "%s: %s", what, msg);
    int segs = segments_dontfork(agent, msg, sizeof msg);
    ck_assert_msg(segs >= 0, "%s: %s", what, msg);
    ck_assert_msg(segs >= 2, "%s: expected the client's 2 segments mapped, found %d", what, segs);
    fprintf(stderr, "%s (pid %ld): %d fds, every one O_CLOEXEC; %d segment mappings, every one "
                    "MADV_DONTFORK\n",
            what, (long)agent, fds, segs);
}

START_TEST(every_fd_of_the_agent_is_cloexec_and_its_segments_dontfork)
{
    struct e2e_env e;
    e2e_env_init(&e);
    e2e_agent_start(&e);
    struct held h;
    hold_leases(e.sock, &h);
    check_agent(e.agent, "lease-agent-host");
    release_held(&h);
    e2e_env_cleanup(&e);
}
END_TEST

START_TEST(every_fd_of_stagingd_is_cloexec)
{
    struct e2e_env e;
    e2e_env_init(&e);
    e2e_agent_start(&e);
    char ctl[256], log[256], msg[512];
    snprintf(ctl, sizeof ctl, "%s/ctl.sock", e.dir);
    snprintf(log, sizeof log, "%s/stagingd.log", e.dir);
    const char *argv[] = {e2e_stagingd, "run",     "--control",      ctl,    "--agent",
                          e.sock,       "--pages", "small",          "--pinned-pool", "4MiB",
                          "--segment-size", "2MiB", NULL};
    pid_t sd = e2e_spawn(argv, log, log);
    ck_assert_msg(e2e_wait_count(log, "ready (connection 1", 1, 20000),
                  "stagingd never became ready; see %s", log);
    int fds = rel_proc_all_cloexec(sd, msg, sizeof msg);
    ck_assert_msg(fds >= 0, "stagingd: %s", msg);
    fprintf(stderr, "stagingd (pid %ld): %d fds, every one O_CLOEXEC\n", (long)sd, fds);
    ck_assert_int_eq(kill(sd, SIGTERM), 0);
    ck_assert_int_eq(e2e_wait(sd, 20000), 0);
    e2e_env_cleanup(&e);
}
END_TEST

START_TEST(the_cuda_agent_under_the_fake_driver_too)
{
    if (!cuda_agent) {
        fprintf(stderr, "no CUDA agent in this build: skipped\n");
        return;
    }
    /* "-": the real driver (the GPU variant, on a machine with one). */
    int fake = strcmp(fake_dir, "-") != 0;
    if (fake) {
        const char *old = getenv("LD_LIBRARY_PATH");
        char path[1024];
        snprintf(path, sizeof path, "%s%s%s", fake_dir, old ? ":" : "", old ? old : "");
        setenv("LD_LIBRARY_PATH", path, 1);
        setenv("FAKECUDA", "1", 1);
    }
    struct e2e_env e;
    e2e_env_init(&e);
    const char *host = e2e_agent;
    e2e_agent = cuda_agent;
    e2e_agent_start(&e);
    e2e_agent = host;
    struct held h;
    hold_leases(e.sock, &h);
    check_agent(e.agent, fake ? "lease-agent (CUDA backend, fake driver)"
                              : "lease-agent (CUDA backend, the real driver)");
    release_held(&h);
    e2e_env_cleanup(&e);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 5) {
        fprintf(stderr, "usage: %s STAGINGD LEASE_AGENT_HOST [LEASE_AGENT FAKECUDA_DIR]\n",
                argv[0]);
        return 2;
    }
    e2e_stagingd = argv[1];
    e2e_agent = argv[2];
    if (argc == 5) {
        cuda_agent = argv[3];
        fake_dir = argv[4];
    }
    Suite *s = suite_create("fork");
    TCase *tc = tcase_create("fork");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, a_forked_child_does_not_inherit_pinned_ranges);
    tcase_add_test(tc, every_fd_of_the_agent_is_cloexec_and_its_segments_dontfork);
    tcase_add_test(tc, every_fd_of_stagingd_is_cloexec);
    tcase_add_test(tc, the_cuda_agent_under_the_fake_driver_too);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
