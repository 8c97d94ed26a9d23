/* Fault injection into the agent's server, in-process (docs/reliability.md):
 * a real ga_server over the lease service, the host backend and the host
 * executor runs its loop on a thread; the test's own protocol client (its
 * calls exempt) goes through HELLO, two SEGMENT_OFFERs (PINNED, MAPPED:
 * sendmsg with the fd), a LEASE_REQUEST, a SUBMIT signalling a done word
 * and the LEASE_RELEASE. For every N the server's Nth allocation, mmap,
 * fcntl, or sendmsg/recvmsg/send/sendmmsg fails; so does each N of creating
 * the server. Promises: every request is answered or the connection is
 * closed (never silence: a 10 s wait fails the test), the agent then holds
 * nothing of the client, a new client runs the same conversation to the
 * end, the lease service's tables are consistent when the server stops,
 * and nothing leaks (fds, mappings, heap under LeakSanitizer). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/fdpass.h"
#include "fi.h"
#include "fi_run.h"
#include "gpu/executor_host.h"
#include "internal.h" /* gpu/server's: srv->svc for the consistency check */
#include "lease/check.h"

#define SEG_BYTES (64u << 10)
#define WAIT_MS 10000
#define GOOD_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

static void quiet(void *ctx, int level, const char *subsys, const char *line)
{
    (void)ctx;
    (void)level;
    (void)subsys;
    (void)line;
}

static const struct base_log_sink quiet_sink = {.fn = quiet, .max_level = BASE_LOG_ERROR};

struct agent {
    char dir[64], sock[128];
    struct lease_backend be;
    struct ga_executor *ex;
    struct ga_server *srv;
    pthread_t loop;
    int running;
    int memfd[3]; /* PINNED, MAPPED (leased), MAPPED (the done word) */
};

static void agent_fs_init(struct agent *a)
{
    snprintf(a->dir, sizeof a->dir, "/tmp/fi-agent-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(a->dir));
    snprintf(a->sock, sizeof a->sock, "%s/agent.sock", a->dir);
    for (int i = 0; i < 3; i++) {
        a->memfd[i] = memfd_create("fi-agent", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        ck_assert_int_ge(a->memfd[i], 0);
        ck_assert_int_eq(ftruncate(a->memfd[i], SEG_BYTES), 0);
        /* The leased ones sealed as a strict agent wants; the done word's,
         * which the agent writes, left writable (taken for words only). */
        ck_assert_int_eq(
            fcntl(a->memfd[i], F_ADD_SEALS, GOOD_SEALS | (i < 2 ? F_SEAL_FUTURE_WRITE : 0)), 0);
    }
}

static void agent_fs_fini(struct agent *a)
{
    for (int i = 0; i < 3; i++)
        close(a->memfd[i]);
    char p[160];
    snprintf(p, sizeof p, "%s.lock", a->sock);
    unlink(p);
    unlink(a->sock);
    rmdir(a->dir);
}

/* Backend, executor, server; 0 or the first error (everything undone). */
static int agent_create(struct agent *a)
{
    a->srv = NULL;
    a->ex = NULL;
    memset(&a->be, 0, sizeof a->be);
    struct lt_failure why;
    int rc = lease_host_backend_init(&a->be, &why);
    if (rc < 0)
        return rc;
    struct ga_executor_host_opts ho = {.workers = 1, .scratch_bytes = 1u << 16,
                                       .bell_sleep_max_us = 200, .log = quiet_sink};
    rc = ga_executor_host_create(&ho, &a->ex);
    if (rc < 0) {
        lease_backend_fini(&a->be);
        return rc;
    }
    struct ga_server_config cfg = {.socket_path = a->sock,
                                   .budget_pinned = 1u << 20,
                                   .budget_mapped = 1u << 20,
                                   .backend = &a->be,
                                   .executor = a->ex,
                                   .log = quiet_sink};
    rc = ga_server_create(&cfg, &a->srv);
    if (rc < 0) {
        a->srv = NULL;
        ga_executor_destroy(a->ex);
        a->ex = NULL;
        lease_backend_fini(&a->be);
    }
    return rc;
}

static void *agent_loop(void *arg)
{
    struct agent *a = arg;
    ga_server_run(a->srv);
    return NULL;
}

/* Stops the loop; checks the service's tables; frees everything. */
static int agent_destroy(struct agent *a, char *msg, size_t len)
{
    int rc = 0;
    if (a->running) {
        ga_server_stop(a->srv);
        pthread_join(a->loop, NULL);
        a->running = 0;
    }
    if (a->srv && lease_service_check(a->srv->svc, msg, len) < 0)
        rc = -1;
    ga_server_destroy(a->srv);
    ga_executor_destroy(a->ex);
    lease_backend_fini(&a->be);
    a->srv = NULL;
    a->ex = NULL;
    return rc;
}

/* ---- the test's protocol client (exempt from faults) ---- */

static uint64_t next_rid = 1;

static int client_connect(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* The next message: its length, 0 at the end of the stream, or -ETIMEDOUT
 * after WAIT_MS of silence. Every message must validate. */
static ssize_t client_recv(int fd, union lt_msg_buffer *b)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, WAIT_MS) != 1)
        return -ETIMEDOUT;
    ssize_t n = recv(fd, b->bytes, sizeof b->bytes, 0);
    if (n <= 0)
        return n < 0 && errno != ECONNRESET ? -errno : 0;
    uint16_t t;
    ck_assert_msg(lt_validate_from_agent(b->bytes, (size_t)n, &t) == LT_OK,
                  "the agent sent a message its validator refuses");
    return n;
}

/* Sends @m and waits for its answer of @want type: FI_OK, FI_REFUSED (an
 * ERROR for it, or the connection closed), or -1 (silence: a hang). */
static int client_call(int fd, void *m, size_t len, const int *fds, unsigned nfds, uint16_t want,
                       union lt_msg_buffer *b, char *msg, size_t mlen)
{
    struct lt_header *h = m;
    h->request_id = next_rid++;
    if (base_send_fds(fd, m, len, fds, nfds, 0) < 0)
        return FI_REFUSED; /* the agent closed the connection already */
    for (;;) {
        ssize_t n = client_recv(fd, b);
        if (n == -ETIMEDOUT) {
            snprintf(msg, mlen, "%s went unanswered for %d ms", lt_msg_type_name(h->type),
                     WAIT_MS);
            return -1;
        }
        if (n <= 0) {
            snprintf(msg, mlen, "%s: the agent closed the connection", lt_msg_type_name(h->type));
            return FI_REFUSED;
        }
        const struct lt_header *r = (const void *)b->bytes;
        if (r->request_id != h->request_id)
            continue;
        if (r->type == LT_MSG_ERROR) {
            snprintf(msg, mlen, "%s refused: %s", lt_msg_type_name(h->type),
                     ((const struct lt_msg_error *)(const void *)b->bytes)->message);
            return FI_REFUSED;
        }
        ck_assert_uint_eq(r->type, want);
        return FI_OK;
    }
}

/* A release of @rl's leases: each answered once, by a batch entry or a
 * RELEASE_COMPLETE; FI_REFUSED for an ERROR or the connection's end. */
static int client_release(int fd, struct lt_msg_lease_release *rl, size_t len, char *msg,
                          size_t mlen)
{
    rl->hdr.request_id = next_rid++;
    if (base_send_fds(fd, rl, len, NULL, 0, 0) < 0)
        return FI_REFUSED;
    unsigned answered = 0;
    union lt_msg_buffer b;
    while (answered < rl->count) {
        ssize_t n = client_recv(fd, &b);
        if (n == -ETIMEDOUT) {
            snprintf(msg, mlen, "LEASE_RELEASE: %u of %u leases answered after %d ms", answered,
                     rl->count, WAIT_MS);
            return -1;
        }
        if (n <= 0) {
            snprintf(msg, mlen, "LEASE_RELEASE: the agent closed the connection");
            return FI_REFUSED;
        }
        const struct lt_header *r = (const void *)b.bytes;
        if (r->request_id != rl->hdr.request_id)
            continue;
        if (r->type == LT_MSG_ERROR) {
            snprintf(msg, mlen, "LEASE_RELEASE refused: %s",
                     ((const struct lt_msg_error *)(const void *)b.bytes)->message);
            return FI_REFUSED;
        }
        ck_assert_msg(lt_validate_reply_matches(rl, b.bytes) == LT_OK,
                      "a release answer that does not match its release");
        if (r->type == LT_MSG_RELEASE_COMPLETE_BATCH)
            answered += ((const struct lt_msg_release_complete_batch *)(const void *)b.bytes)->count;
        else
            answered++;
    }
    ck_assert_uint_eq(answered, rl->count);
    return FI_OK;
}

/* HELLO, two offers, a lease batch, a submit with a done word, the release. */
static int conversation(struct agent *a, char *msg, size_t mlen)
{
    int fd = client_connect(a->sock);
    if (fd < 0) {
        snprintf(msg, mlen, "connect: %s", strerror(errno));
        return FI_REFUSED;
    }
    union lt_msg_buffer b, q;
    int rc;
    struct lt_msg_hello h;
    lt_msg_init(&h, sizeof h, LT_MSG_HELLO, 1);
    h.version_min = h.version_max = LT_PROTO_VERSION;
    h.caps = LT_CAP_DONE_WORD | LT_CAP_RC_BATCH;
    lt_name_set(h.name, sizeof h.name, "fi-agent");
    if ((rc = client_call(fd, &h, sizeof h, NULL, 0, LT_MSG_HELLO_REPLY, &b, msg, mlen)) != FI_OK)
        goto out;
    struct lt_segment_id seg[3];
    static const uint32_t cls[3] = {LT_CLASS_PINNED, LT_CLASS_MAPPED, LT_CLASS_MAPPED};
    for (int i = 0; i < 3; i++) {
        struct lt_msg_segment_offer o;
        lt_msg_init(&o, sizeof o, LT_MSG_SEGMENT_OFFER, 1);
        o.cookie = (uint64_t)i + 1;
        o.size = SEG_BYTES;
        o.mem_class = cls[i];
        if ((rc = client_call(fd, &o, sizeof o, &a->memfd[i], 1, LT_MSG_SEGMENT_ACCEPT, &b, msg,
                              mlen)) != FI_OK)
            goto out;
        seg[i] = ((struct lt_msg_segment_accept *)(void *)b.bytes)->segment;
    }
    struct lt_msg_lease_request *lr = (void *)q.bytes;
    size_t lrlen = sizeof *lr + 2 * sizeof lr->entries[0];
    lt_msg_init(lr, lrlen, LT_MSG_LEASE_REQUEST, 1);
    lr->count = 2;
    for (int i = 0; i < 2; i++) {
        lr->entries[i].segment = seg[i];
        lr->entries[i].offset = 8192;
        lr->entries[i].length = 16384;
        lr->entries[i].mem_class = cls[i];
    }
    if ((rc = client_call(fd, lr, lrlen, NULL, 0, LT_MSG_LEASE_GRANT, &b, msg, mlen)) != FI_OK)
        goto out;
    struct lt_msg_lease_grant *g = (void *)b.bytes;
    struct lt_lease_id lease[2];
    for (int i = 0; i < 2; i++) {
        if (g->entries[i].status != LT_OK) {
            snprintf(msg, mlen, "lease %d refused: %s", i, lt_error_name(g->entries[i].status));
            rc = FI_REFUSED;
            goto out;
        }
        lease[i] = g->entries[i].lease;
    }
    struct lt_msg_submit s;
    lt_msg_init(&s, sizeof s, LT_MSG_SUBMIT, 1);
    s.lease = lease[0];
    s.op = LT_OP_CHECKSUM_VERIFY;
    s.flags = LT_SUBMIT_F_SIGNAL_DONE;
    s.done.segment = seg[2];
    s.done_seq = 1;
    s.args.checksum.length = 8192;
    s.args.checksum.sums_offset = 8192;
    s.args.checksum.block_size = 4096;
    if ((rc = client_call(fd, &s, sizeof s, NULL, 0, LT_MSG_COMPLETION, &b, msg, mlen)) != FI_OK)
        goto out;
    struct lt_msg_lease_release *rl = (void *)q.bytes;
    size_t rllen = sizeof *rl + 2 * sizeof rl->leases[0];
    lt_msg_init(rl, rllen, LT_MSG_LEASE_RELEASE, 1);
    rl->count = 2;
    rl->leases[0] = lease[0];
    rl->leases[1] = lease[1];
    rc = client_release(fd, rl, rllen, msg, mlen);
out:
    close(fd);
    return rc;
}

/* Until the agent lists no client but the asking one and no lease. */
static int agent_idle(struct agent *a, char *msg, size_t mlen)
{
    union lt_msg_buffer b;
    for (int i = 0; i < 500; i++) {
        int fd = client_connect(a->sock);
        if (fd < 0) {
            snprintf(msg, mlen, "the agent stopped accepting: %s", strerror(errno));
            return -1;
        }
        struct lt_msg_hello h;
        lt_msg_init(&h, sizeof h, LT_MSG_HELLO, 1);
        h.version_min = h.version_max = LT_PROTO_VERSION;
        lt_name_set(h.name, sizeof h.name, "fi-probe");
        struct lt_msg_stats_request sr;
        lt_msg_init(&sr, sizeof sr, LT_MSG_STATS_REQUEST, 1);
        sr.flags = LT_STATS_F_ALL_CLIENTS;
        int ok = client_call(fd, &h, sizeof h, NULL, 0, LT_MSG_HELLO_REPLY, &b, msg, mlen) ==
                     FI_OK &&
                 client_call(fd, &sr, sizeof sr, NULL, 0, LT_MSG_STATS_REPLY, &b, msg, mlen) ==
                     FI_OK;
        close(fd);
        if (!ok)
            return -1;
        const struct lt_msg_stats_reply *r = (const void *)b.bytes;
        uint64_t live = 0, segs = 0;
        for (int k = 1; k < LT_CLASS_SLOTS; k++) {
            live += r->classes[k].live_leases;
            segs += r->classes[k].segments;
        }
        if (r->client_count == 1 && live == 0 && segs == 0)
            return 0;
        usleep(10000);
    }
    snprintf(msg, mlen, "the agent still holds a departed client's leases or segments after 5 s");
    return -1;
}

/* ---- the paths ---- */

static struct agent A;

static int serve_check(void *arg, char *msg, size_t len)
{
    struct agent *a = arg;
    int rc = agent_idle(a, msg, len);
    if (rc == 0 && conversation(a, msg, len) != FI_OK)
        rc = -1;
    if (rc == 0)
        rc = agent_idle(a, msg, len);
    char why[512];
    if (agent_destroy(a, why, sizeof why) < 0 && rc == 0) {
        snprintf(msg, len, "lease_service_check: %s", why);
        rc = -1;
    }
    return rc;
}

/* Creating the server (backend, executor, socket, registrar) and destroying it. */
static int create_run(void *arg, char *msg, size_t len)
{
    struct agent *a = arg;
    int rc = agent_create(a);
    if (rc < 0) {
        snprintf(msg, len, "create refused: %s", strerror(-rc));
        return FI_REFUSED;
    }
    return FI_OK;
}

static int create_check(void *arg, char *msg, size_t len)
{
    return agent_destroy(arg, msg, len);
}

/* Serving: the server starts before the failure is armed; the path is the
 * conversation alone. */
static void serve_setup(void *arg)
{
    struct agent *a = arg;
    ck_assert_int_eq(agent_create(a), 0);
    ck_assert_int_eq(pthread_create(&a->loop, NULL, agent_loop, a), 0);
    a->running = 1;
}

static int serve_run(void *arg, char *msg, size_t len)
{
    return conversation(arg, msg, len);
}

static void serve_set(unsigned calls)
{
    fi_exempt(true); /* the test's client; the server's threads are counted */
    agent_fs_init(&A);
    struct fi_path p = {.name = "agent server",
                        .setup = serve_setup,
                        .run = serve_run,
                        .check = serve_check,
                        .ctx = &A,
                        .maps_slack = 8};
    struct fi_tally t;
    fi_run_all(&p, calls, 0, &t);
    ck_assert_uint_gt(t.calls, 0);
    agent_fs_fini(&A);
}

static void create_set(unsigned calls)
{
    agent_fs_init(&A);
    struct fi_path p = {.name = "agent server start", .run = create_run, .check = create_check,
                        .ctx = &A, .maps_slack = 8};
    fi_run_all(&p, calls, 0, NULL);
    agent_fs_fini(&A);
}

START_TEST(every_allocation_of_the_servers_conversation_fails_cleanly)
{
    serve_set(FI_ALLOC);
}
END_TEST

START_TEST(every_mmap_and_fcntl_of_the_servers_conversation_fails_cleanly)
{
    serve_set(FI_MMAP);
    serve_set(FI_FCNTL);
}
END_TEST

START_TEST(every_sendmsg_and_recvmsg_of_the_server_fails_cleanly)
{
    serve_set(FI_MSG);
}
END_TEST

START_TEST(every_allocation_mmap_and_fcntl_of_starting_the_server_fails_cleanly)
{
    create_set(FI_ALLOC);
    create_set(FI_MMAP);
    create_set(FI_FCNTL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fi_agent");
    TCase *tc = tcase_create("server");
    tcase_set_timeout(tc, 280);
    tcase_add_test(tc, every_allocation_of_the_servers_conversation_fails_cleanly);
    tcase_add_test(tc, every_mmap_and_fcntl_of_the_servers_conversation_fails_cleanly);
    tcase_add_test(tc, every_sendmsg_and_recvmsg_of_the_server_fails_cleanly);
    tcase_add_test(tc, every_allocation_mmap_and_fcntl_of_starting_the_server_fails_cleanly);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
