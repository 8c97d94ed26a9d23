/* lease-bench: what a lease costs over the agent's socket, against the
 * socket itself, in one run.
 *
 *   (a) ping-pong  two processes bounce messages of the lease messages'
 *                  sizes over a bare SOCK_SEQPACKET pair (a forked echo
 *                  child): request 64 B -> reply 48 B, then 40 B -> 40 B,
 *                  i.e. the two round trips of (b) with no agent behind them
 *   (b) single     one LEASE_REQUEST (1 entry) -> LEASE_GRANT, one
 *                  LEASE_RELEASE -> RELEASE_COMPLETE; p50 / p99
 *
 *   It asks for LT_CAP_RC_BATCH, so a release's completions come back in
 *   one RELEASE_COMPLETE_BATCH; --singles asks for one packet per lease.
 *   (c) batched    64 leases per LEASE_REQUEST and per LEASE_RELEASE,
 *                  several batches in flight: leases granted and released
 *                  per second
 *   (d) cycles     grant + SUBMIT (COPY_H2D of the lease, QUIET) + release,
 *                  100k times on a segment registered once; the agent's
 *                  registration counters (STATS) before and after
 *
 *   lease-bench SOCKET [options]                  an agent already running
 *   lease-bench --spawn AGENT [options] [-- ARG...]  starts AGENT --socket
 *                  <private dir>/agent.sock --ready-fd 3 ARG... as a child
 *
 * CUDA-free: it speaks the wire protocol only (lease-types). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010 /* Linux 5.1 */
#endif

#include "base/fdpass.h"
#include "base/time.h"
#include "lease_types/validate.h"

#define LB_BATCH 64
#define LB_MAX_WINDOW 64
#define LB_LEASE_BYTES ((uint64_t)4096)
#define LB_RECV_BATCH 64

struct lb_opts {
    const char *socket;
    const char *spawn;
    char **agent_args;
    int nagent_args;
    uint32_t iters;        /* (a) and (b) */
    uint32_t batch_rounds; /* (c): batches of LB_BATCH */
    uint32_t cycles;       /* (d) */
    uint32_t window;       /* (c), (d): requests in flight */
    uint64_t segment_bytes;
    uint32_t mem_class;
    bool singles; /* do not ask for LT_CAP_RC_BATCH */
};

static int lb_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The @pct percentile of @n samples (sorted in place). */
static double lb_pct(uint64_t *v, size_t n, double pct)
{
    qsort(v, n, sizeof(*v), lb_cmp_u64);
    size_t i = (size_t)((double)(n - 1) * pct / 100.0 + 0.5);
    return (double)v[i];
}

static pid_t lb_agent_pid; /* a spawned agent, stopped on the way out */

static void lb_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void lb_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "lease-bench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    if (lb_agent_pid > 0) {
        kill(lb_agent_pid, SIGTERM);
        waitpid(lb_agent_pid, NULL, 0);
    }
    exit(1);
}

/* ---- the wire -------------------------------------------------------------------- */

struct lb_conn {
    int fd;
    union lt_msg_buffer rx[LB_RECV_BATCH];
    struct mmsghdr mh[LB_RECV_BATCH];
    struct iovec iov[LB_RECV_BATCH];
    uint64_t next_rid;
    uint64_t recv_calls, recv_msgs; /* how well replies arrive together */
};

static void lb_send(struct lb_conn *c, const void *msg, size_t len, int fd_pass)
{
    int rc = base_send_fds(c->fd, msg, len, &fd_pass, fd_pass >= 0 ? 1u : 0u, 0);
    if (rc < 0)
        lb_die("send of %zu bytes: %s", len, strerror(-rc));
}

/* Receives at least one message (blocking); returns how many, each
 * validated as coming from the agent. */
static int lb_recv(struct lb_conn *c)
{
    for (int i = 0; i < LB_RECV_BATCH; i++) {
        c->iov[i] = (struct iovec){.iov_base = c->rx[i].bytes, .iov_len = sizeof c->rx[i].bytes};
        c->mh[i] = (struct mmsghdr){.msg_hdr = {.msg_iov = &c->iov[i], .msg_iovlen = 1}};
    }
    int n = recvmmsg(c->fd, c->mh, LB_RECV_BATCH, MSG_WAITFORONE, NULL);
    if (n <= 0)
        lb_die("receive: %s", n == 0 ? "the agent closed the connection" : strerror(errno));
    c->recv_calls++;
    c->recv_msgs += (uint64_t)n;
    for (int i = 0; i < n; i++) {
        enum lt_error e = lt_validate_from_agent(c->rx[i].bytes, c->mh[i].msg_len, NULL);
        if (e != LT_OK)
            lb_die("the agent sent an invalid %u-byte message: %s", c->mh[i].msg_len,
                   lt_error_name(e));
        if (c->rx[i].hdr.type == LT_MSG_ERROR) {
            const struct lt_msg_error *m = (const void *)c->rx[i].bytes;
            lb_die("ERROR %s for %s (request %" PRIu64 "): %s", lt_error_name(m->code),
                   lt_msg_type_name(m->failed_type), m->hdr.request_id, m->message);
        }
        if (c->rx[i].hdr.type == LT_MSG_COMPLETION) {
            const struct lt_msg_completion *m = (const void *)c->rx[i].bytes;
            if (m->status != LT_OK)
                lb_die("a submit failed: %s", lt_error_name(m->status));
        }
    }
    return n;
}

/* One reply of @type (the next message must be it). */
static const union lt_msg_buffer *lb_expect(struct lb_conn *c, uint16_t type)
{
    if (lb_recv(c) != 1 || c->rx[0].hdr.type != type)
        lb_die("expected one %s, found %s", lt_msg_type_name(type),
               lt_msg_type_name(c->rx[0].hdr.type));
    return &c->rx[0];
}

static void lb_connect(struct lb_conn *c, const char *path, uint32_t caps)
{
    c->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&sa, sizeof sa) < 0)
        lb_die("connect %s: %s", path, strerror(errno));
    c->next_rid = 1;
    struct lt_msg_hello h;
    lt_msg_init(&h, sizeof h, LT_MSG_HELLO, c->next_rid++);
    h.version_min = h.version_max = LT_PROTO_VERSION;
    h.caps = caps;
    lt_name_set(h.name, sizeof h.name, "lease-bench");
    lb_send(c, &h, sizeof h, -1);
    const struct lt_msg_hello_reply *r = (const void *)lb_expect(c, LT_MSG_HELLO_REPLY)->bytes;
    fprintf(stderr, "lease-bench: connected to '%s'%s, release completes %s\n", r->agent_name,
            (r->caps & LT_CAP_HOST_BACKEND) ? " (HOST BACKEND: no GPU)" : "",
            (r->caps & LT_CAP_RC_BATCH) ? "batched" : "one per lease");
}

/* How many leases a RELEASE_COMPLETE or RELEASE_COMPLETE_BATCH @m completes;
 * dies on any status but LT_OK, or on another type. */
static uint32_t lb_released(const union lt_msg_buffer *m)
{
    if (m->hdr.type == LT_MSG_RELEASE_COMPLETE) {
        const struct lt_msg_release_complete *r = (const void *)m->bytes;
        if (r->status != LT_OK)
            lb_die("release: %s", lt_error_name(r->status));
        return 1;
    }
    if (m->hdr.type != LT_MSG_RELEASE_COMPLETE_BATCH)
        lb_die("expected a release completion, found %s", lt_msg_type_name(m->hdr.type));
    const struct lt_msg_release_complete_batch *b = (const void *)m->bytes;
    for (uint32_t k = 0; k < b->count; k++)
        if (b->entries[k].status != LT_OK)
            lb_die("release: %s", lt_error_name(b->entries[k].status));
    return b->count;
}

/* A sealed, pre-faulted memfd offered as @cls; returns the segment id. */
static struct lt_segment_id lb_offer(struct lb_conn *c, uint64_t size, uint32_t cls)
{
    int fd = memfd_create("lease-bench", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, (off_t)size) < 0)
        lb_die("memfd of %" PRIu64 " bytes: %s", size, strerror(errno));
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        lb_die("mmap: %s", strerror(errno));
    memset(p, 0x5a, size);
    munmap(p, size);
    /* FUTURE_WRITE as well (a strict agent wants it; a kernel before 5.1
     * refuses it, EINVAL), SEAL last. LB_OLD_SEALS=1 leaves it off, for an
     * agent from before issue #12, which refuses it. */
    const char *old_seals = getenv("LB_OLD_SEALS");
    const int fw = !(old_seals && old_seals[0] == '1');
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0 ||
        (fw && fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) < 0 && errno != EINVAL) ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL) < 0)
        lb_die("seal: %s", strerror(errno));
    struct lt_msg_segment_offer o;
    lt_msg_init(&o, sizeof o, LT_MSG_SEGMENT_OFFER, c->next_rid++);
    o.size = size;
    o.mem_class = cls;
    lb_send(c, &o, sizeof o, fd);
    close(fd);
    const struct lt_msg_segment_accept *a =
        (const void *)lb_expect(c, LT_MSG_SEGMENT_ACCEPT)->bytes;
    return a->segment;
}

static struct lt_class_stats lb_stats(struct lb_conn *c, uint32_t cls)
{
    struct lt_msg_stats_request s;
    lt_msg_init(&s, sizeof s, LT_MSG_STATS_REQUEST, c->next_rid++);
    lb_send(c, &s, sizeof s, -1);
    const struct lt_msg_stats_reply *r = (const void *)lb_expect(c, LT_MSG_STATS_REPLY)->bytes;
    return r->classes[cls];
}

/* ---- messages of one to 64 leases ---------------------------------------------- */

union lb_out {
    uint64_t align;
    unsigned char bytes[LT_MSG_MAX_BYTES];
};

static size_t lb_request(union lb_out *o, uint64_t rid, struct lt_segment_id seg, uint32_t cls,
                         uint64_t first_page, uint32_t n)
{
    size_t len = sizeof(struct lt_msg_lease_request) + n * sizeof(struct lt_lease_req_entry);
    struct lt_msg_lease_request *r = (void *)o->bytes;
    lt_msg_init(r, len, LT_MSG_LEASE_REQUEST, rid);
    r->count = n;
    for (uint32_t i = 0; i < n; i++)
        r->entries[i] = (struct lt_lease_req_entry){.segment = seg,
                                                    .offset = (first_page + i) * LB_LEASE_BYTES,
                                                    .length = LB_LEASE_BYTES,
                                                    .mem_class = cls};
    return len;
}

static size_t lb_release(union lb_out *o, uint64_t rid, const struct lt_msg_lease_grant *g)
{
    size_t len = sizeof(struct lt_msg_lease_release) + g->count * sizeof(struct lt_lease_id);
    struct lt_msg_lease_release *r = (void *)o->bytes;
    lt_msg_init(r, len, LT_MSG_LEASE_RELEASE, rid);
    r->count = g->count;
    for (uint32_t i = 0; i < g->count; i++) {
        if (g->entries[i].status != LT_OK)
            lb_die("lease %u of a batch refused: %s", i, lt_error_name(g->entries[i].status));
        r->leases[i] = g->entries[i].lease;
    }
    return len;
}

/* ---- (a) ping-pong ---------------------------------------------------------------- */

/* The echo child: answers each message with one of the size the agent's
 * reply would have (LEASE_GRANT 48 for a 64-byte request, else the same). */
static void lb_echo_child(int fd)
{
    unsigned char buf[LT_MSG_MAX_BYTES + 8];
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n <= 0)
            _exit(0);
        size_t out = n == 64 ? 48 : (size_t)n;
        if (send(fd, buf, out, MSG_NOSIGNAL) != (ssize_t)out)
            _exit(1);
    }
}

static void lb_pingpong(const struct lb_opts *o, double *p50_p, double *p99_p)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        lb_die("socketpair: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0)
        lb_die("fork: %s", strerror(errno));
    if (pid == 0) {
        close(sv[0]);
        lb_echo_child(sv[1]);
    }
    close(sv[1]);
    unsigned char req[64] = {1}, rel[40] = {2}, in[LT_MSG_MAX_BYTES + 8];
    uint64_t *t = calloc(o->iters, sizeof(*t));
    if (!t)
        lb_die("out of memory");
    for (uint32_t i = 0; i < o->iters + o->iters / 10; i++) {
        uint64_t t0 = base_now_ns();
        if (send(sv[0], req, sizeof req, 0) != sizeof req || recv(sv[0], in, sizeof in, 0) != 48 ||
            send(sv[0], rel, sizeof rel, 0) != sizeof rel || recv(sv[0], in, sizeof in, 0) != 40)
            lb_die("ping-pong: %s", strerror(errno));
        if (i >= o->iters / 10) /* the first tenth warms up */
            t[i - o->iters / 10] = base_now_ns() - t0;
    }
    close(sv[0]);
    waitpid(pid, NULL, 0);
    *p50_p = lb_pct(t, o->iters, 50) / 1e3;
    *p99_p = lb_pct(t, o->iters, 99) / 1e3;
    free(t);
}

/* ---- (b) one lease at a time ------------------------------------------------------- */

static void lb_single(struct lb_conn *c, const struct lb_opts *o, struct lt_segment_id seg,
                      double *p50_p, double *p99_p)
{
    uint64_t pages = o->segment_bytes / LB_LEASE_BYTES;
    uint64_t *t = calloc(o->iters, sizeof(*t));
    if (!t)
        lb_die("out of memory");
    union lb_out out;
    for (uint32_t i = 0; i < o->iters + o->iters / 10; i++) {
        uint64_t t0 = base_now_ns();
        size_t len = lb_request(&out, c->next_rid++, seg, o->mem_class, i % pages, 1);
        lb_send(c, out.bytes, len, -1);
        const struct lt_msg_lease_grant *g = (const void *)lb_expect(c, LT_MSG_LEASE_GRANT)->bytes;
        len = lb_release(&out, c->next_rid++, g);
        lb_send(c, out.bytes, len, -1);
        if (lb_recv(c) != 1 || lb_released(&c->rx[0]) != 1)
            lb_die("expected one release completion for one lease");
        if (i >= o->iters / 10)
            t[i - o->iters / 10] = base_now_ns() - t0;
    }
    *p50_p = lb_pct(t, o->iters, 50) / 1e3;
    *p99_p = lb_pct(t, o->iters, 99) / 1e3;
    free(t);
}

/* ---- (c) batches and (d) cycles: several in flight ------------------------------------ */

/* Request ids: round << 16 | step << 8 | slot (step 0 grant, 1 release, 2 submit). */
static uint64_t lb_rid(uint64_t round, unsigned step, unsigned slot)
{
    return (round << 16) | ((uint64_t)step << 8) | slot;
}

struct lb_slot {
    uint64_t round;
    uint32_t left; /* RELEASE_COMPLETEs still to come */
};

/* Runs @rounds requests of @per leases through @window slots: grant,
 * (with @submit a QUIET COPY_H2D of each lease), release, wait for every
 * RELEASE_COMPLETE. Returns the seconds it took. */
static double lb_pipeline(struct lb_conn *c, const struct lb_opts *o, struct lt_segment_id seg,
                          uint32_t per, uint64_t rounds, uint32_t window, bool submit)
{
    uint64_t pages = o->segment_bytes / LB_LEASE_BYTES;
    if ((uint64_t)window * per > pages)
        lb_die("%u x %u leases in flight need %" PRIu64 " bytes of segment, have %" PRIu64, window,
               per, (uint64_t)window * per * (uint64_t)LB_LEASE_BYTES, o->segment_bytes);
    struct lb_slot slots[LB_MAX_WINDOW] = {{0}};
    union lb_out out;
    uint64_t started = 0, done = 0;
    uint64_t t0 = base_now_ns();
    for (uint32_t s = 0; s < window && started < rounds; s++) {
        slots[s].round = ++started;
        size_t len = lb_request(&out, lb_rid(slots[s].round, 0, s), seg, o->mem_class,
                                (uint64_t)s * per, per);
        lb_send(c, out.bytes, len, -1);
    }
    while (done < rounds) {
        int n = lb_recv(c);
        for (int i = 0; i < n; i++) {
            const union lt_msg_buffer *m = &c->rx[i];
            unsigned s = (unsigned)(m->hdr.request_id & 0xff);
            if (s >= window || slots[s].round != m->hdr.request_id >> 16)
                lb_die("a reply for request %#" PRIx64 " nobody is waiting for", m->hdr.request_id);
            if (m->hdr.type == LT_MSG_LEASE_GRANT) {
                const struct lt_msg_lease_grant *g = (const void *)m->bytes;
                if (submit) {
                    for (uint32_t k = 0; k < g->count; k++) {
                        struct lt_msg_submit sm;
                        lt_msg_init(&sm, sizeof sm, LT_MSG_SUBMIT, lb_rid(slots[s].round, 2, s));
                        sm.lease = g->entries[k].lease;
                        sm.op = LT_OP_COPY_H2D;
                        sm.flags = LT_SUBMIT_F_QUIET;
                        sm.args.copy =
                            (struct lt_op_copy_h2d){.offset = 0, .length = LB_LEASE_BYTES};
                        lb_send(c, &sm, sizeof sm, -1);
                    }
                }
                size_t len = lb_release(&out, lb_rid(slots[s].round, 1, s), g);
                slots[s].left = g->count;
                lb_send(c, out.bytes, len, -1);
            } else if (m->hdr.type == LT_MSG_RELEASE_COMPLETE ||
                       m->hdr.type == LT_MSG_RELEASE_COMPLETE_BATCH) {
                uint32_t got = lb_released(m);
                if (got > slots[s].left)
                    lb_die("%u release completions for %u leases", got, slots[s].left);
                slots[s].left -= got;
                if (slots[s].left != 0)
                    continue;
                done++;
                if (started < rounds) {
                    slots[s].round = ++started;
                    size_t len = lb_request(&out, lb_rid(slots[s].round, 0, s), seg, o->mem_class,
                                            (uint64_t)s * per, per);
                    lb_send(c, out.bytes, len, -1);
                }
            } else {
                lb_die("unexpected %s", lt_msg_type_name(m->hdr.type));
            }
        }
    }
    return (double)(base_now_ns() - t0) / 1e9;
}

/* ---- the agent as a child ------------------------------------------------------------ */

static pid_t lb_spawn(const struct lb_opts *o, char *dir, size_t dirlen, char *sock, size_t socklen)
{
    snprintf(dir, dirlen, "/tmp/lease-bench-XXXXXX");
    if (!mkdtemp(dir))
        lb_die("mkdtemp: %s", strerror(errno));
    snprintf(sock, socklen, "%s/agent.sock", dir);
    int p[2];
    if (pipe(p) < 0)
        lb_die("pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0)
        lb_die("fork: %s", strerror(errno));
    if (pid == 0) {
        char **argv = calloc((size_t)o->nagent_args + 6, sizeof(*argv));
        int n = 0;
        argv[n++] = (char *)o->spawn;
        argv[n++] = "--socket";
        argv[n++] = sock;
        argv[n++] = "--ready-fd";
        argv[n++] = "3";
        for (int i = 0; i < o->nagent_args; i++)
            argv[n++] = o->agent_args[i];
        close(p[0]);
        if (dup2(p[1], 3) < 0)
            _exit(126);
        execv(o->spawn, argv);
        fprintf(stderr, "lease-bench: exec %s: %s\n", o->spawn, strerror(errno));
        _exit(127);
    }
    close(p[1]);
    struct pollfd pfd = {.fd = p[0], .events = POLLIN};
    char line[256] = {0};
    ssize_t got = poll(&pfd, 1, 30000) == 1 ? read(p[0], line, sizeof line - 1) : -1;
    close(p[0]);
    if (got <= 0 || strncmp(line, "ready ", 6) != 0)
        lb_die("%s did not report ready within 30 s (its stderr is above)", o->spawn);
    return pid;
}

static void lb_reap(pid_t pid, const char *dir)
{
    kill(pid, SIGTERM);
    int st = 0;
    waitpid(pid, &st, 0);
    char p[256];
    snprintf(p, sizeof p, "%s/agent.sock.lock", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/agent.sock", dir);
    unlink(p);
    rmdir(dir);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fprintf(stderr, "lease-bench: the agent exited with status %d\n",
                WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
}

/* ---- main ------------------------------------------------------------------------ */

static void lb_usage(FILE *f)
{
    fprintf(f,
            "usage: lease-bench SOCKET [options]\n"
            "       lease-bench --spawn AGENT [options] [-- AGENT-ARGS...]\n"
            "  --iters N          ping-pong and single grant+release round trips (default 20000)\n"
            "  --batch-rounds N   batches of %d leases (default 20000)\n"
            "  --cycles N         grant+submit+release cycles (default 100000)\n"
            "  --window N         batches / cycles in flight, 1..%d (default 4)\n"
            "  --segment-bytes N  the segment offered, a multiple of 4096 (default 2097152)\n"
            "  --class pinned|mapped  the segment's and the leases' class (default pinned)\n"
            "  --singles          one RELEASE_COMPLETE per lease (no LT_CAP_RC_BATCH)\n",
            LB_BATCH, LB_MAX_WINDOW);
}

static uint32_t lb_u32(const char *s, const char *opt)
{
    char *end = NULL;
    unsigned long v = strtoul(s ? s : "", &end, 10);
    if (!s || !*s || *end || v == 0 || v > UINT32_MAX)
        lb_die("%s: expected a positive number, found '%s'", opt, s ? s : "nothing");
    return (uint32_t)v;
}

static void lb_args(int argc, char **argv, struct lb_opts *o)
{
    *o = (struct lb_opts){.iters = 20000,
                          .batch_rounds = 20000,
                          .cycles = 100000,
                          .window = 4,
                          .segment_bytes = 2ull << 20,
                          .mem_class = LT_CLASS_PINNED};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--") == 0) {
            o->agent_args = argv + i + 1;
            o->nagent_args = argc - i - 1;
            break;
        } else if (strcmp(a, "--singles") == 0) {
            o->singles = true;
            continue;
        } else if (strcmp(a, "--help") == 0) {
            lb_usage(stdout);
            exit(0);
        } else if (strcmp(a, "--spawn") == 0 && v) {
            o->spawn = v;
        } else if (strcmp(a, "--iters") == 0) {
            o->iters = lb_u32(v, a);
        } else if (strcmp(a, "--batch-rounds") == 0) {
            o->batch_rounds = lb_u32(v, a);
        } else if (strcmp(a, "--cycles") == 0) {
            o->cycles = lb_u32(v, a);
        } else if (strcmp(a, "--window") == 0) {
            o->window = lb_u32(v, a);
            if (o->window > LB_MAX_WINDOW)
                lb_die("--window: expected at most %d", LB_MAX_WINDOW);
        } else if (strcmp(a, "--segment-bytes") == 0) {
            o->segment_bytes = lb_u32(v, a);
            if (o->segment_bytes % 4096)
                lb_die("--segment-bytes: expected a multiple of 4096");
        } else if (strcmp(a, "--class") == 0 && v) {
            if (strcmp(v, "pinned") == 0)
                o->mem_class = LT_CLASS_PINNED;
            else if (strcmp(v, "mapped") == 0)
                o->mem_class = LT_CLASS_MAPPED;
            else
                lb_die("--class: expected pinned or mapped, found '%s'", v);
        } else if (a[0] != '-' && !o->socket) {
            o->socket = a;
            continue;
        } else {
            lb_usage(stderr);
            lb_die("unknown option or missing value: '%s'", a);
        }
        i++;
    }
    if (!o->socket == !o->spawn)
        lb_die("expected a SOCKET or --spawn AGENT (one of them)");
    if ((uint64_t)o->window * LB_BATCH * LB_LEASE_BYTES > o->segment_bytes)
        lb_die("--window %u: %u batches of %d leases of 4 KiB need a segment of %" PRIu64
               " bytes (--segment-bytes), found %" PRIu64,
               o->window, o->window, LB_BATCH, (uint64_t)o->window * LB_BATCH * LB_LEASE_BYTES,
               o->segment_bytes);
}

int main(int argc, char **argv)
{
    struct lb_opts o;
    lb_args(argc, argv, &o);
    signal(SIGPIPE, SIG_IGN);
    char dir[64] = "", sock[128] = "";
    pid_t agent = 0;
    if (o.spawn) {
        agent = lb_spawn(&o, dir, sizeof dir, sock, sizeof sock);
        lb_agent_pid = agent;
        o.socket = sock;
    }
    struct lb_conn *c = calloc(1, sizeof(*c));
    if (!c)
        lb_die("out of memory");
    lb_connect(c, o.socket, o.singles ? 0u : LT_CAP_RC_BATCH);
    struct lt_segment_id seg = lb_offer(c, o.segment_bytes, o.mem_class);

    double pp50, pp99, gr50, gr99;
    lb_pingpong(&o, &pp50, &pp99);
    printf("(a) ping-pong, 64->48 + 40->40 bytes, %u x: p50 %.2f us, p99 %.2f us\n", o.iters, pp50,
           pp99);
    lb_single(c, &o, seg, &gr50, &gr99);
    printf("(b) grant + release, 1 lease, %u x: p50 %.2f us, p99 %.2f us\n", o.iters, gr50, gr99);
    c->recv_calls = c->recv_msgs = 0;
    double tb = lb_pipeline(c, &o, seg, LB_BATCH, o.batch_rounds, o.window, false);
    double batched = (double)o.batch_rounds * LB_BATCH / tb;
    printf("(c) batched, %d leases per message, %u in flight: %.0f leases granted and released "
           "per second (%.3f s; %.1f replies per receive call)\n",
           LB_BATCH, o.window, batched, tb, (double)c->recv_msgs / (double)c->recv_calls);
    struct lt_class_stats before = lb_stats(c, o.mem_class);
    double tc = lb_pipeline(c, &o, seg, 1, o.cycles,
                            o.window * 4 > LB_MAX_WINDOW ? LB_MAX_WINDOW : o.window * 4, true);
    struct lt_class_stats after = lb_stats(c, o.mem_class);
    printf("(d) %u cycles of grant + QUIET COPY_H2D of 4 KiB + release: %.0f cycles/s (%.3f s); "
           "%s registrations %" PRIu64 " -> %" PRIu64 ", unregistrations %" PRIu64 " -> %" PRIu64
           "\n",
           o.cycles, (double)o.cycles / tc, tc, lt_class_name(o.mem_class), before.registrations,
           after.registrations, before.unregistrations, after.unregistrations);
    close(c->fd);
    free(c);
    if (agent)
        lb_reap(agent, dir);

    bool unchanged = before.registrations == after.registrations &&
                     before.unregistrations == after.unregistrations;
    double per_lease_us = 1e6 / batched;
    printf("\n%-44s | %-16s | %s\n", "metric", "value", "ratio to ping-pong p50");
    printf("%-44s | %12.2f us | %.2f\n", "(a) ping-pong p50 (2 round trips)", pp50, 1.0);
    printf("%-44s | %12.2f us | %.2f\n", "(a) ping-pong p99", pp99, pp99 / pp50);
    printf("%-44s | %12.2f us | %.2f\n", "(b) grant + release p50", gr50, gr50 / pp50);
    printf("%-44s | %12.2f us | %.2f\n", "(b) grant + release p99", gr99, gr99 / pp50);
    printf("%-44s | %10.0f /s  | %.3f (per lease)\n", "(c) batched leases (64 per message)",
           batched, per_lease_us / pp50);
    printf("%-44s | %10.0f /s  | %.3f (per cycle)\n", "(d) grant+submit+release cycles",
           (double)o.cycles / tc, 1e6 / ((double)o.cycles / tc) / pp50);
    printf("%-44s | %5" PRIu64 " -> %-5" PRIu64 " | %s\n", "(d) registrations before -> after",
           before.registrations, after.registrations, unchanged ? "unchanged" : "MOVED");
    printf("goals: p50 <= 1.5x ping-pong: %s; batched >= 1M leases/s: %s; registrations "
           "unchanged: %s\n",
           gr50 <= 1.5 * pp50 ? "met" : "NOT MET", batched >= 1e6 ? "met" : "NOT MET",
           unchanged ? "met" : "NOT MET");
    return unchanged ? 0 : 1;
}
