/* The lease client against a fake agent: handshake and version refusal,
 * segment offers carrying the very memfd, batched leases mapped to the
 * agent's ids, submits matched by request id in any order, agent errors
 * with their text, release-complete gating, agent death with reconnect,
 * backoff and re-offer, malformed replies, doorbells across processes, and
 * an end-to-end run where the agent is killed and restarted mid-run. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fake_agent.h"
#include "kernels/blockhash_ref.h"
#include "stagingd/client.h"
#include "stagingd/pool.h"

#define MIB ((uint64_t)1 << 20)
#define SEED 0xc11e47ull
#define WAIT_MS 5000

/* ---- helpers ---- */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

static char g_dir[64];
static char g_path[128];

static void tmp_setup(void)
{
    snprintf(g_dir, sizeof(g_dir), "/tmp/sdcl-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(g_dir));
    snprintf(g_path, sizeof(g_path), "%s/agent.sock", g_dir);
}

static void tmp_teardown(void)
{
    unlink(g_path);
    rmdir(g_dir);
}

/* A shared memfd segment of @size bytes mapped here. */
static void *memfd_seg(uint64_t size, int *fd_p)
{
    int fd = memfd_create("sdcl-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    *fd_p = fd;
    return p;
}

/* Offers every segment of @pool, keyed by the pool's segment ids, as the
 * daemon does. Returns the number offered, or the first error. */
static int offer_pool(struct sd_client *c, const struct sd_pool *pool)
{
    unsigned n = sd_pool_segment_count(pool);
    for (unsigned i = 0; i < n; i++) {
        struct sd_pool_segment seg;
        int rc = sd_pool_segment_at(pool, i, &seg);
        if (rc == 0)
            rc = sd_client_segment_add(c, seg.id, seg.fd, seg.base, seg.size,
                                       (uint32_t)seg.mem_class);
        if (rc < 0)
            return rc;
    }
    return (int)n;
}

/* ---- recording callbacks ---- */

enum { EV_GRANT = 1, EV_COMPLETION, EV_RELEASE, EV_ERROR, EV_REPLY, EV_READY, EV_DISCONNECT };

struct ev {
    int kind;
    unsigned agent;
    uint64_t rid, tag;
    int err;
    uint32_t code, status, index, epoch;
    uint16_t type;
    int reusable;
    char msg[1024];
    struct sd_client_lease lease;
    union lt_op_result result;
    unsigned count;
    struct sd_client_grant_entry ents[8];
    int nested_rc;
};

static struct ev evs[512];
static unsigned nev;
static struct sd_client *g_client;
static char g_log[8192];

static struct ev *ev_new(int kind)
{
    ck_assert_uint_lt(nev, 512);
    struct ev *e = &evs[nev++];
    memset(e, 0, sizeof(*e));
    e->kind = kind;
    return e;
}

static void on_grant(void *ctx, const struct sd_client_grant *g)
{
    (void)ctx;
    struct ev *e = ev_new(EV_GRANT);
    e->agent = g->agent;
    e->rid = g->request_id;
    e->tag = g->tag;
    e->count = g->count;
    for (unsigned k = 0; k < g->count && k < 8; k++)
        e->ents[k] = g->entries[k];
}

static void on_completion(void *ctx, const struct sd_client_completion *c)
{
    (void)ctx;
    struct ev *e = ev_new(EV_COMPLETION);
    e->agent = c->agent;
    e->rid = c->request_id;
    e->tag = c->tag;
    e->status = c->status;
    e->err = c->err;
    e->lease = c->lease;
    e->result = c->result;
}

static void on_release(void *ctx, const struct sd_client_release *r)
{
    (void)ctx;
    struct ev *e = ev_new(EV_RELEASE);
    e->agent = r->agent;
    e->rid = r->request_id;
    e->tag = r->tag;
    e->status = r->status;
    e->err = r->err;
    e->reusable = r->reusable;
    e->lease = r->lease;
    snprintf(e->msg, sizeof(e->msg), "%s", r->message ? r->message : "");
}

static void on_error(void *ctx, const struct sd_client_error *x)
{
    (void)ctx;
    struct ev *e = ev_new(EV_ERROR);
    e->agent = x->agent;
    e->rid = x->request_id;
    e->tag = x->tag;
    e->type = x->request_type;
    e->err = x->err;
    e->code = x->code;
    e->index = x->index;
    snprintf(e->msg, sizeof(e->msg), "%s", x->message);
}

static void on_reply(void *ctx, const struct sd_client_reply *r)
{
    (void)ctx;
    struct ev *e = ev_new(EV_REPLY);
    e->agent = r->agent;
    e->rid = r->request_id;
    e->tag = r->tag;
}

static void on_ready(void *ctx, unsigned agent, uint32_t epoch)
{
    (void)ctx;
    struct ev *e = ev_new(EV_READY);
    e->agent = agent;
    e->epoch = epoch;
    /* the driving functions refuse to nest inside a callback */
    e->nested_rc = sd_client_process(g_client);
}

static void on_disconnect(void *ctx, unsigned agent, int err, const char *message)
{
    (void)ctx;
    struct ev *e = ev_new(EV_DISCONNECT);
    e->agent = agent;
    e->err = err;
    snprintf(e->msg, sizeof(e->msg), "%s", message);
}

static void capture_log(void *ctx, const char *line)
{
    (void)ctx;
    size_t used = strlen(g_log);
    if (used + strlen(line) + 2 >= sizeof(g_log))
        used = 0; /* keep the latest lines */
    snprintf(g_log + used, sizeof(g_log) - used, "%s\n", line);
}

static uint32_t g_handshake_ms; /* 0: the default */

static struct sd_client *client_new(uint32_t backoff_min, uint32_t backoff_max)
{
    struct sd_client_config cfg;
    sd_client_config_default(&cfg);
    if (g_handshake_ms)
        cfg.handshake_timeout_ms = g_handshake_ms;
    cfg.name = "test-client";
    cfg.backoff_min_ms = backoff_min;
    cfg.backoff_max_ms = backoff_max;
    cfg.seed = SEED;
    cfg.cb = (struct sd_client_callbacks){on_grant, on_completion, on_release,   on_error,
                                          on_reply, on_ready,      on_disconnect};
    cfg.log = capture_log;
    nev = 0;
    g_log[0] = '\0';
    struct sd_client *c = NULL;
    ck_assert_int_eq(sd_client_create(&cfg, &c), 0);
    g_client = c;
    return c;
}

static void pump_for(struct sd_client *c, int ms)
{
    uint64_t end = now_ms() + (uint64_t)ms;
    while (now_ms() < end) {
        struct pollfd p = {.fd = sd_client_fd(c), .events = POLLIN};
        poll(&p, 1, 2);
        ck_assert_int_ge(sd_client_process(c), 0);
    }
}

static void pump_until(struct sd_client *c, unsigned want)
{
    uint64_t end = now_ms() + WAIT_MS;
    while (nev < want) {
        ck_assert_msg(now_ms() < end, "waited for %u callbacks, saw %u; log:\n%s", want, nev,
                      g_log);
        struct pollfd p = {.fd = sd_client_fd(c), .events = POLLIN};
        poll(&p, 1, 10);
        ck_assert_int_ge(sd_client_process(c), 0);
    }
}

static int ev_find(int kind, uint64_t rid)
{
    for (unsigned i = 0; i < nev; i++)
        if (evs[i].kind == kind && (rid == 0 || evs[i].rid == rid))
            return (int)i;
    return -1;
}

static unsigned ev_count(int kind)
{
    unsigned n = 0;
    for (unsigned i = 0; i < nev; i++)
        n += evs[i].kind == kind;
    return n;
}

/* Receives the next client message on the fake side, processing the
 * client meanwhile (it sends offers only while processing a reply). */
static ssize_t recv_pumped(struct fake *f, struct sd_client *c, union lt_msg_buffer *b, int *fds,
                           unsigned *nfds)
{
    uint64_t end = now_ms() + WAIT_MS;
    while (now_ms() < end) {
        ssize_t n = fake_recv(f, b, 2, fds, nfds);
        if (n >= 0)
            return n;
        ck_assert_int_ge(sd_client_process(c), 0);
    }
    ck_abort_msg("fake agent: nothing from the client within %d ms; log:\n%s", WAIT_MS, g_log);
    return -1;
}

/* Receives one message and checks it is a valid @type from a client. */
static size_t recv_type(struct fake *f, struct sd_client *c, union lt_msg_buffer *b, uint16_t type)
{
    ssize_t n = recv_pumped(f, c, b, NULL, NULL);
    uint16_t got = 0;
    enum lt_error e = lt_validate_from_client(b->bytes, (size_t)n, &got);
    ck_assert_msg(e == LT_OK, "client sent an invalid message: %s", lt_error_describe(e));
    ck_assert_msg(got == type, "expected %s, client sent %s", lt_msg_type_name(type),
                  lt_msg_type_name(got));
    return (size_t)n;
}

/* Accepts the client's connection, processing the client meanwhile (it
 * reconnects only while processing). */
static void accept_pumped(struct fake *f, struct sd_client *c)
{
    uint64_t end = now_ms() + WAIT_MS;
    while (now_ms() < end) {
        struct pollfd p = {.fd = f->lfd, .events = POLLIN};
        if (poll(&p, 1, 2) == 1) {
            fake_accept(f);
            return;
        }
        ck_assert_int_ge(sd_client_process(c), 0);
    }
    ck_abort_msg("fake agent: the client did not connect within %d ms; log:\n%s", WAIT_MS, g_log);
}

/* The agent's id for the k-th accepted segment of a handshake: distinct
 * from the client's keys, so a mapping mix-up shows. */
static struct lt_segment_id agent_seg_id(unsigned k)
{
    return lt_segment_id_make(100 + k, 3 + k);
}

/* Accepts a connection, answers HELLO and every offer (with agent_seg_id),
 * and pumps the client until ready. Returns the number of offers seen;
 * their cookies go to @cookies_p (room for 8) when not NULL. */
static unsigned handshake(struct fake *f, struct sd_client *c, uint32_t caps, uint32_t batch,
                          unsigned nsegs, uint64_t *cookies_p)
{
    union lt_msg_buffer b;
    accept_pumped(f, c);
    recv_type(f, c, &b, LT_MSG_HELLO);
    struct lt_msg_hello_reply hr;
    fake_hello_reply(&hr, b.hdr.request_id, caps, batch);
    fake_send(f, &hr, sizeof(hr), -1);
    unsigned want = nev + 1;
    for (unsigned k = 0; k < nsegs; k++) {
        int fds[4];
        unsigned nfds;
        ssize_t n = recv_pumped(f, c, &b, fds, &nfds);
        ck_assert_int_eq(lt_validate_from_client(b.bytes, (size_t)n, NULL), LT_OK);
        ck_assert_uint_eq(b.hdr.type, LT_MSG_SEGMENT_OFFER);
        ck_assert_uint_eq(nfds, 1);
        close(fds[0]);
        const struct lt_msg_segment_offer *o = (const void *)&b;
        if (cookies_p)
            cookies_p[k] = o->cookie;
        struct lt_msg_segment_accept a;
        lt_msg_init(&a, sizeof(a), LT_MSG_SEGMENT_ACCEPT, b.hdr.request_id);
        a.cookie = o->cookie;
        a.segment = agent_seg_id(k);
        a.size = o->size;
        a.mem_class = o->mem_class;
        fake_send(f, &a, sizeof(a), -1);
    }
    pump_until(c, want);
    ck_assert_int_eq(evs[want - 1].kind, EV_READY);
    return nsegs;
}

/* Requests one lease per entry of @reqs and grants them all with lease
 * ids {first_slot + k, 1}. */
static void lease_all(struct fake *f, struct sd_client *c, const struct sd_client_lease_req *reqs,
                      unsigned n, uint32_t first_slot, struct sd_client_lease *leases_p)
{
    union lt_msg_buffer b;
    uint64_t rid;
    ck_assert_int_eq(sd_client_lease_request(c, 0, reqs, n, 0, 0, &rid), 0);
    recv_type(f, c, &b, LT_MSG_LEASE_REQUEST);
    const struct lt_msg_lease_request *q = (const void *)&b;
    union lt_msg_buffer out;
    size_t len = sizeof(struct lt_msg_lease_grant) + n * sizeof(struct lt_lease_grant_entry);
    lt_msg_init(&out, len, LT_MSG_LEASE_GRANT, rid);
    struct lt_msg_lease_grant *g = (void *)&out;
    g->count = n;
    for (unsigned k = 0; k < n; k++) {
        g->entries[k].lease = lt_lease_id_make(first_slot + k, 1);
        g->entries[k].mem_class = q->entries[k].mem_class;
    }
    fake_send(f, &out, len, -1);
    unsigned want = nev + 1;
    pump_until(c, want);
    struct ev *e = &evs[want - 1];
    ck_assert_int_eq(e->kind, EV_GRANT);
    ck_assert_uint_eq(e->rid, rid);
    for (unsigned k = 0; k < n; k++) {
        ck_assert_int_eq(e->ents[k].err, 0);
        leases_p[k] = e->ents[k].lease;
    }
}

static struct sd_client_work checksum_work(uint64_t offset, uint64_t length, uint64_t sums)
{
    struct sd_client_work w;
    memset(&w, 0, sizeof(w));
    w.op = LT_OP_CHECKSUM_VERIFY;
    w.args.checksum.offset = offset;
    w.args.checksum.length = length;
    w.args.checksum.sums_offset = sums;
    w.args.checksum.block_size = 4096;
    return w;
}

static void completion_send(struct fake *f, uint64_t rid, struct lt_lease_id lease, uint64_t blocks)
{
    struct lt_msg_completion m;
    lt_msg_init(&m, sizeof(m), LT_MSG_COMPLETION, rid);
    m.lease = lease;
    m.op = LT_OP_CHECKSUM_VERIFY;
    m.result.checksum.blocks_checked = blocks;
    m.result.checksum.first_bad_block = LT_BLOCK_NONE;
    fake_send(f, &m, sizeof(m), -1);
}

static void release_complete_send(struct fake *f, uint64_t rid, struct lt_lease_id lease,
                                  uint32_t status)
{
    struct lt_msg_release_complete m;
    lt_msg_init(&m, sizeof(m), LT_MSG_RELEASE_COMPLETE, rid);
    m.lease = lease;
    m.status = status;
    fake_send(f, &m, sizeof(m), -1);
}

/* A RELEASE_COMPLETE_BATCH answering release @rid: @n leases, @st their statuses. */
static void release_batch_send(struct fake *f, uint64_t rid, const struct lt_lease_id *leases,
                               const uint32_t *st, uint32_t n)
{
    union lt_msg_buffer m;
    struct lt_msg_release_complete_batch *b = (void *)&m;
    size_t len = sizeof(*b) + n * sizeof(b->entries[0]);
    ck_assert_int_eq(lt_msg_init(b, len, LT_MSG_RELEASE_COMPLETE_BATCH, rid), LT_OK);
    b->count = n;
    for (uint32_t k = 0; k < n; k++) {
        b->entries[k].lease = leases[k];
        b->entries[k].status = st[k];
    }
    ck_assert_int_eq(lt_validate(b, len, NULL), LT_OK);
    fake_send(f, b, len, -1);
}

/* ---- handshake ---- */

START_TEST(test_handshake_sends_hello_and_adopts_agent_limits)
{
    struct sd_client *c = client_new(5, 50);
    struct fake f;
    union lt_msg_buffer b;
    unsigned agent = 99;
    fake_listen(&f, g_path);
    ck_assert_int_eq(sd_client_agent_add(c, g_path, &agent), 0);
    ck_assert_uint_eq(agent, 0);

    struct sd_client_agent_info info;
    ck_assert_int_eq(sd_client_agent_info(c, 0, &info), 0);
    ck_assert_int_eq(info.state, SD_CLIENT_HANDSHAKE);
    ck_assert_uint_eq(info.epoch, 1);
    struct sd_client_lease_req r = {.segment = 1, .length = 4096};
    uint64_t rid;
    ck_assert_int_eq(sd_client_lease_request(c, 0, &r, 1, 0, 0, &rid), -ENOTCONN);

    fake_accept(&f);
    recv_type(&f, c, &b, LT_MSG_HELLO);
    const struct lt_msg_hello *h = (const void *)&b;
    ck_assert_uint_eq(h->version_min, 1);
    ck_assert_uint_eq(h->version_max, 1);
    ck_assert_uint_eq(h->caps, LT_CAP_DOORBELL | LT_CAP_DONE_WORD | LT_CAP_RC_BATCH);
    ck_assert_str_eq(h->name, "test-client");

    struct lt_msg_hello_reply hr;
    fake_hello_reply(&hr, h->hdr.request_id, LT_CAP_DOORBELL | LT_CAP_HOST_BACKEND, 4);
    fake_send(&f, &hr, sizeof(hr), -1);
    pump_until(c, 1);
    ck_assert_int_eq(evs[0].kind, EV_READY);
    ck_assert_uint_eq(evs[0].epoch, 1);
    ck_assert_int_eq(evs[0].nested_rc, -EDEADLK);
    ck_assert_int_eq(sd_client_wait_ready(c, 0, 0), 0);

    ck_assert_int_eq(sd_client_agent_info(c, 0, &info), 0);
    ck_assert_int_eq(info.state, SD_CLIENT_READY);
    ck_assert_uint_eq(info.hello.client_id, 7);
    ck_assert_uint_eq(info.hello.max_lease_batch, 4);
    ck_assert_uint_eq(info.hello.caps, LT_CAP_DOORBELL | LT_CAP_HOST_BACKEND);
    ck_assert_str_eq(info.hello.agent_name, "fake-agent");
    ck_assert_uint_eq(info.in_flight, 0);
    ck_assert_int_eq(sd_client_agent_info(c, 1, &info), -ENOENT);

    sd_client_destroy(c);
    fake_close(&f);
}
END_TEST

START_TEST(test_version_mismatch_is_refused_with_a_message)
{
    struct sd_client *c = client_new(2, 10);
    struct fake f;
    union lt_msg_buffer b;
    unsigned agent;
    fake_listen(&f, g_path);
    ck_assert_int_eq(sd_client_agent_add(c, g_path, &agent), 0);

    /* 1: the agent refuses our HELLO */
    fake_accept(&f);
    recv_type(&f, c, &b, LT_MSG_HELLO);
    struct lt_msg_error em;
    fake_error(&em, b.hdr.request_id, LT_MSG_HELLO, LT_E_BAD_VERSION, LT_INDEX_NONE,
               "this agent speaks only v2");
    fake_send(&f, &em, sizeof(em), -1);
    ck_assert_int_eq(sd_client_wait_ready(c, 0, WAIT_MS), -EPROTONOSUPPORT);
    const char *msg = sd_client_last_error(c);
    ck_assert_msg(strstr(msg, "this agent speaks only v2") && strstr(msg, g_path) &&
                      strstr(msg, "LT_E_BAD_VERSION"),
                  "message: %s", msg);
    int d = ev_find(EV_DISCONNECT, 0);
    ck_assert_int_ge(d, 0);
    ck_assert_int_eq(evs[d].err, -EPROTONOSUPPORT);
    ck_assert_int_eq(ev_find(EV_READY, 0), -1);
    fake_drop(&f);

    /* 2: the reply's header is version 2; 3: the reply chooses version 2 */
    for (int round = 0; round < 2; round++) {
        accept_pumped(&f, c);
        recv_type(&f, c, &b, LT_MSG_HELLO);
        struct lt_msg_hello_reply hr;
        fake_hello_reply(&hr, b.hdr.request_id, 0, 4);
        if (round == 0)
            hr.hdr.version = 2;
        else
            hr.version = 2;
        fake_send(&f, &hr, sizeof(hr), -1);
        ck_assert_int_eq(sd_client_wait_ready(c, 0, WAIT_MS), -EPROTONOSUPPORT);
        msg = sd_client_last_error(c);
        ck_assert_msg(strstr(msg, "version mismatch") && strstr(msg, "version 2") &&
                          strstr(msg, g_path),
                      "message: %s", msg);
        fake_drop(&f);
    }
    struct sd_client_agent_info info;
    ck_assert_int_eq(sd_client_agent_info(c, 0, &info), 0);
    ck_assert_int_ne(info.state, SD_CLIENT_READY);
    ck_assert_int_eq(info.last_err, -EPROTONOSUPPORT);
    ck_assert_int_eq(ev_find(EV_READY, 0), -1);
    sd_client_destroy(c);
    fake_close(&f);
}
END_TEST

/* ---- segments ---- */

START_TEST(test_segment_offer_passes_exactly_one_fd_of_the_same_memfd)
{
    struct sd_pool_config pc = {0};
    pc.class_bytes[LT_CLASS_STAGED] = 2 * MIB;
    pc.class_bytes[LT_CLASS_PINNED] = 4 * MIB;
    pc.class_bytes[LT_CLASS_MAPPED] = 2 * MIB;
    pc.segment_bytes = 2 * MIB;
    pc.prefault_threads = 1;
    pc.pages = SD_POOL_PAGES_SMALL; /* leaves reserved huge pages to test_hugepages */
    pc.log = capture_log;
    struct sd_pool *pool = NULL;
    ck_assert_int_eq(sd_pool_create(&pc, &pool), 0);
    unsigned nseg = sd_pool_segment_count(pool);
    ck_assert_uint_eq(nseg, 4);

    struct sd_client *c = client_new(5, 50);
    ck_assert_int_eq(offer_pool(c, pool), 4);
    struct fake f;
    union lt_msg_buffer b;
    unsigned agent;
    uint64_t rng = SEED;
    fake_listen(&f, g_path);
    ck_assert_int_eq(sd_client_agent_add(c, g_path, &agent), 0);
    fake_accept(&f);
    int fds[4];
    unsigned nfds;
    ssize_t n = recv_pumped(&f, c, &b, fds, &nfds);
    ck_assert_uint_eq(b.hdr.type, LT_MSG_HELLO);
    ck_assert_uint_eq(nfds, 0); /* only offers carry an fd */
    struct lt_msg_hello_reply hr;
    fake_hello_reply(&hr, b.hdr.request_id, 0, 8);
    fake_send(&f, &hr, sizeof(hr), -1);

    unsigned seen = 0;
    for (unsigned k = 0; k < nseg; k++) {
        n = recv_pumped(&f, c, &b, fds, &nfds);
        ck_assert_int_eq(lt_validate_from_client(b.bytes, (size_t)n, NULL), LT_OK);
        ck_assert_uint_eq(b.hdr.type, LT_MSG_SEGMENT_OFFER);
        ck_assert_uint_eq(nfds, 1);
        const struct lt_msg_segment_offer *o = (const void *)&b;
        struct sd_pool_segment seg;
        ck_assert_int_eq(sd_pool_segment_find(pool, (uint32_t)o->cookie, &seg), 0);
        ck_assert_uint_eq(o->size, seg.size);
        ck_assert_uint_eq(o->mem_class, (uint32_t)seg.mem_class);
        struct stat mine, theirs;
        ck_assert_int_eq(fstat(seg.fd, &mine), 0);
        ck_assert_int_eq(fstat(fds[0], &theirs), 0);
        ck_assert_uint_eq(theirs.st_ino, mine.st_ino);
        ck_assert_uint_eq(theirs.st_dev, mine.st_dev);
        ck_assert_int_ne(fds[0], seg.fd);
        int seals = fcntl(fds[0], F_GET_SEALS);
        ck_assert_int_eq(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
                         F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
        /* the same bytes, both ways */
        uint64_t *theirs_map = mmap(NULL, seg.size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
        ck_assert_ptr_ne(theirs_map, MAP_FAILED);
        uint64_t *mine_map = seg.base;
        for (int i = 0; i < 64; i++) {
            size_t at = (size_t)(rng_next(&rng) % (seg.size / 8));
            uint64_t v = rng_next(&rng);
            mine_map[at] = v;
            ck_assert_uint_eq(theirs_map[at], v);
            theirs_map[at] = ~v;
            ck_assert_uint_eq(mine_map[at], ~v);
        }
        munmap(theirs_map, seg.size);
        close(fds[0]);
        seen |= 1u << k;
        struct lt_msg_segment_accept a;
        lt_msg_init(&a, sizeof(a), LT_MSG_SEGMENT_ACCEPT, b.hdr.request_id);
        a.cookie = o->cookie;
        a.segment = agent_seg_id(k);
        a.size = o->size;
        a.mem_class = o->mem_class;
        fake_send(&f, &a, sizeof(a), -1);
    }
    ck_assert_int_eq(sd_client_wait_ready(c, 0, WAIT_MS), 0);
    ck_assert_int_eq(fake_recv(&f, &b, 20, fds, &nfds), -1); /* offered once, no more */
    struct sd_client_agent_info info;
    ck_assert_int_eq(sd_client_agent_info(c, 0, &info), 0);
    ck_assert_uint_eq(info.offers_sent, 4);
    ck_assert_uint_eq(info.segments_accepted, 4);
    sd_client_destroy(c);
    sd_pool_destroy(pool);
    fake_close(&f);
}
END_TEST

/* ---- leases ---- */

START_TEST(test_lease_batch_maps_segments_and_grant_entries)
{
    struct sd_client *c = client_new(5, 50);
    int fd1, fd2;
    void *b1 = memfd_seg(MIB, &fd1), *b2 = memfd_seg(64 << 10, &fd2);
    ck_assert_int_eq(sd_client_segment_add(c, 11, fd1, b1, MIB, LT_CLASS_PINNED), 0);
    ck_assert_int_eq(sd_client_segment_add(c, 22, fd2, b2, 64 << 10, LT_CLASS_MAPPED), 0);
    ck_assert_int_eq(sd_client_segment_add(c, 22, fd2, b2, 64 << 10, LT_CLASS_MAPPED), -EEXIST);
    ck_assert_int_eq(sd_client_segment_add(c, 23, fd2, b2, 1000, LT_CLASS_MAPPED), -EINVAL);
    struct fake f;
    union lt_msg_buffer b;
    unsigned agent;
    uint64_t cookies[8];
    fake_listen(&f, g_path);
    ck_assert_int_eq(sd_client_agent_add(c, g_path, &agent), 0);
    handshake(&f, c, 0, 4, 2, cookies);

    struct sd_client_lease_req reqs[5] = {
        {.segment = 11, .offset = 0, .length = 4096},
        {.segment = 22, .offset = 4096, .length = 8192},
        {.segment = 11, .offset = 65536, .length = 65536, .flags = LT_LEASE_F_ALLOW_STAGED},
        {.segment = 11, .offset = 8192, .length = 4096},
        {.segment = 11, .offset = 0, .length = 4096},
    };
    uint64_t rid;
    ck_assert_int_eq(sd_client_lease_request(c, 0, reqs, 5, 0, 0, &rid), -E2BIG);
    struct sd_client_lease_req bad = {.segment = 11, .offset = MIB - 4096, .length = 8192};
    ck_assert_int_eq(sd_client_lease_request(c, 0, &bad, 1, 0, 0, &rid), -ERANGE);
    bad = (struct sd_client_lease_req){.segment = 33, .length = 4096};
    ck_assert_int_eq(sd_client_lease_request(c, 0, &bad, 1, 0, 0, &rid), -ENOENT);
    ck_assert_int_eq(fake_recv(&f, &b, 20, NULL, NULL), -1); /* refused locally: nothing sent */

    ck_assert_int_eq(sd_client_lease_request(c, 0, reqs, 4, 0, 555, &rid), 0);
    recv_type(&f, c, &b, LT_MSG_LEASE_REQUEST);
    const struct lt_msg_lease_request *q = (const void *)&b;
    ck_assert_uint_eq(q->hdr.request_id, rid);
    ck_assert_uint_eq(q->count, 4);
    for (unsigned k = 0; k < 4; k++) {
        unsigned si = reqs[k].segment == cookies[0] ? 0 : 1;
        ck_assert(lt_segment_id_eq(q->entries[k].segment, agent_seg_id(si)));
        ck_assert_uint_eq(q->entries[k].offset, reqs[k].offset);
        ck_assert_uint_eq(q->entries[k].length, reqs[k].length);
        ck_assert_uint_eq(q->entries[k].mem_class,
                          reqs[k].segment == 11 ? LT_CLASS_PINNED : LT_CLASS_MAPPED);
        ck_assert_uint_eq(q->entries[k].flags, reqs[k].flags);
    }
    union lt_msg_buffer out;
    size_t len = sizeof(struct lt_msg_lease_grant) + 4 * sizeof(struct lt_lease_grant_entry);
    lt_msg_init(&out, len, LT_MSG_LEASE_GRANT, rid);
    struct lt_msg_lease_grant *g = (void *)&out;
    g->count = 4;
    g->entries[0] = (struct lt_lease_grant_entry){lt_lease_id_make(40, 2), LT_CLASS_PINNED, LT_OK};
    g->entries[1] = (struct lt_lease_grant_entry){lt_lease_id_make(41, 9), LT_CLASS_MAPPED, LT_OK};
    g->entries[2] = (struct lt_lease_grant_entry){lt_lease_id_make(42, 1), LT_CLASS_STAGED, LT_OK};
    g->entries[3] = (struct lt_lease_grant_entry){lt_lease_id_make(0, 0), 0, LT_E_BUDGET};
    fake_send(&f, &out, len, -1);
    unsigned want = nev + 1;
    pump_until(c, want);
    struct ev *e = &evs[want - 1];
    ck_assert_int_eq(e->kind, EV_GRANT);
    ck_assert_uint_eq(e->rid, rid);
    ck_assert_uint_eq(e->tag, 555);
    ck_assert_uint_eq(e->count, 4);
    for (unsigned k = 0; k < 3; k++) {
        ck_assert_int_eq(e->ents[k].err, 0);
        ck_assert(lt_lease_id_eq(e->ents[k].lease.id, g->entries[k].lease));
        ck_assert_uint_eq(e->ents[k].lease.segment, reqs[k].segment);
        ck_assert_uint_eq(e->ents[k].lease.offset, reqs[k].offset);
        ck_assert_uint_eq(e->ents[k].lease.length, reqs[k].length);
        ck_assert_uint_eq(e->ents[k].lease.mem_class, g->entries[k].mem_class);
        ck_assert_uint_eq(e->ents[k].lease.epoch, 1);
        ck_assert_uint_eq(e->ents[k].lease.agent, 0);
    }
    ck_assert_int_eq(e->ents[3].err, -ENOSPC);
    ck_assert_uint_eq(e->ents[3].status, LT_E_BUDGET);
    struct sd_client_agent_info info;
    ck_assert_int_eq(sd_client_agent_info(c, 0, &info), 0);
    ck_assert_uint_eq(info.leases, 3);
    ck_assert_uint_eq(info.in_flight, 0);

    sd_client_destroy(c);
    fake_close(&f);
    munmap(b1, MIB);
    munmap(b2, 64 << 10);
    close(fd1);
    close(fd2);
}
END_TEST

/* ---- submits ---- */

START_TEST(test_submit_replies_out_of_order_match_by_request_id)
{
    struct sd_client *c = client_new(5, 50);
    int fd1, fd2;
    void *b1 = memfd_seg(MIB, &fd1), *b2 = memfd_seg(64 << 10, &fd2);
    ck_assert_int_eq(sd_client_segment_add(c, 1, fd1, b1, MIB, LT_CLASS_PINNED), 0);
    ck_assert_int_eq(sd_client_segment_add(c, 2, fd2, b2, 64 << 10, LT_CLASS_MAPPED), 0);
    struct fake f;
    union lt_msg_buffer b;
    unsigned agent;
    fake_listen(&f, g_path);
    ck_assert_int_eq(sd_client_agent_add(c, g_path, &agent), 0);
    handshake(&f, c, LT_CAP_DOORBELL | LT_CAP_DONE_WORD, 8, 2, NULL);
    struct sd_client_lease_req r = {.segment = 1, .offset = 0, .length = 65536 + 4096};
    struct sd_client_lease lease;
    lease_all(&f, c, &r, 1, 1, &lease);

    uint64_t rids[3];
    for (unsigned k = 0; k < 3; k++) {
        struct sd_client_work w = checksum_work(0, 4096 * (k + 1), 65536);
        w.bell = (struct sd_client_word){.segment = 2, .offset = 8 * k, .seq = k + 1};
        w.done = (struct sd_client_word){.segment = 2, .offset = 512 + 8 * k, .seq = 100 + k};
        ck_assert_int_eq(sd_client_submit(c, &lease, &w, 1000 + k, &rids[k]), 0);
    }
    ck_assert(rids[0] < rids[1] && rids[1] < rids[2]);
    struct sd_client_work bad = checksum_work(0, 4096, 65536);
    bad.bell = (struct sd_client_word){.segment = 1, .offset = 0, .seq = 1};
    uint64_t rid;
    ck_assert_int_eq(sd_client_submit(c, &lease, &bad, 0, &rid), -EINVAL); /* PINNED bell */
    bad.bell = (struct sd_client_word){.segment = 2, .offset = 4, .seq = 1};
    ck_assert_int_eq(sd_client_submit(c, &lease, &bad, 0, &rid), -EINVAL); /* misaligned */

    for (unsigned k = 0; k < 3; k++) {
        recv_type(&f, c, &b, LT_MSG_SUBMIT);
        const struct lt_msg_submit *s = (const void *)&b;
        ck_assert_uint_eq(s->hdr.request_id, rids[k]);
        ck_assert(lt_lease_id_eq(s->lease, lease.id));
        ck_assert_uint_eq(s->flags, LT_SUBMIT_F_WAIT_BELL | LT_SUBMIT_F_SIGNAL_DONE);
        ck_assert(lt_segment_id_eq(s->bell.segment, agent_seg_id(1)));
        ck_assert_uint_eq(s->bell.offset, 8 * k);
        ck_assert_uint_eq(s->bell_seq, k + 1);
        ck_assert(lt_segment_id_eq(s->done.segment, agent_seg_id(1)));
        ck_assert_uint_eq(s->done.offset, 512 + 8 * k);
        ck_assert_uint_eq(s->done_seq, 100 + k);
        ck_assert_uint_eq(s->args.checksum.length, 4096 * (k + 1));
    }
    /* answer 3, 1, 2 */
    const unsigned order[3] = {2, 0, 1};
    unsigned base = nev;
    for (unsigned i = 0; i < 3; i++)
        completion_send(&f, rids[order[i]], lease.id, 10 + order[i]);
    pump_until(c, base + 3);
    for (unsigned i = 0; i < 3; i++) {
        struct ev *e = &evs[base + i];
        unsigned k = order[i];
        ck_assert_int_eq(e->kind, EV_COMPLETION);
        ck_assert_uint_eq(e->rid, rids[k]);
        ck_assert_uint_eq(e->tag, 1000 + k);
        ck_assert_uint_eq(e->result.checksum.blocks_checked, 10 + k);
        ck_assert(lt_lease_id_eq(e->lease.id, lease.id));
        ck_assert_int_eq(e->err, 0);
    }
    struct sd_client_agent_info info;
    ck_assert_int_eq(sd_client_agent_info(c, 0, &info), 0);
    ck_assert_uint_eq(info.in_flight, 0);
    sd_client_destroy(c);
    fake_close(&f);
    munmap(b1, MIB);
    munmap(b2, 64 << 10);
    close(fd1);
    close(fd2);
}
END_TEST

struct responder {
    struct fake *f;
    int mode; /* 0: CTL_REPLY with a new stream; 1: ERROR */
};

static void *respond_once(void *arg)
{
    struct responder *r = arg;
    union lt_msg_buffer b;
    if (fake_recv(r->f, &b, WAIT_MS, NULL, NULL) < 0)
        return NULL;
    if (r->mode == 0) {
        struct lt_msg_ctl_reply m;
        lt_msg_init(&m, sizeof(m), LT_MSG_CTL_REPLY, b.hdr.request_id);
        m.request_type = b.hdr.type;
        m.stream = lt_stream_id_make(3, 1);
        fake_send(r->f, &m, sizeof(m), -1);
    } else {
        struct lt_msg_error m;
        fake_error(&m, b.hdr.request_id, b.hdr.type, LT_E_LIMIT, LT_INDEX_NONE,
                   "stream limit 16 reached");
        fake_send(r->f, &m, sizeof(m), -1);
    }
    return NULL;
}

START_TEST(test_agent_errors_surface_with_the_agents_message)
{
    struct sd_client *c = client_new(5, 50);
    int fd1, fd2;
    void *b1 = memfd_seg(MIB, &fd1), *b2 = memfd_seg(64 << 10, &fd2);
    ck_assert_int_eq(sd_client_segment_add(c, 1, fd1, b1, MIB, LT_CLASS_PINNED), 0);
    ck_assert_int_eq(sd_client_segment_add(c, 2, fd2, b2, 64 << 10, LT_CLASS_MAPPED), 0);
    struct fake f;
    union lt_msg_buffer b;
    unsigned agent;
    fake_listen(&f, g_path);
    ck_assert_int_eq(sd_client_agent_add(c, g_path, &agent), 0);
    handshake(&f, c, 0, 8, 2, NULL); /* no doorbell capability granted */
    struct sd_client_lease_req r = {.segment = 1, .offset = 0, .length = 65536 + 4096};
    struct sd_client_lease lease;
    lease_all(&f, c, &r, 1, 1, &lease);

    struct sd_client_work w = checksum_work(0, 65536, 65536);
    uint64_t rid;
    w.bell = (struct sd_client_word){.segment = 2, .offset = 0, .seq = 1};
    ck_assert_int_eq(sd_client_submit(c, &lease, &w, 0, &rid), -EOPNOTSUPP);
    ck_assert_ptr_nonnull(strstr(sd_client_last_error(c), "capability"));
    w.bell.seq = 0;
    ck_assert_int_eq(sd_client_submit(c, &lease, &w, 31, &rid), 0);
    recv_type(&f, c, &b, LT_MSG_SUBMIT);
    struct lt_msg_error em;
    fake_error(&em, rid, LT_MSG_SUBMIT, LT_E_NOT_FOUND, LT_INDEX_NONE,
               "lease 1:1 is not known here");
    fake_send(&f, &em, sizeof(em), -1);
    unsigned want = nev + 1;
    pump_until(c, want);
    struct ev *e = &evs[want - 1];
    ck_assert_int_eq(e->kind, EV_ERROR);
    ck_assert_uint_eq(e->rid, rid);
    ck_assert_uint_eq(e->tag, 31);
    ck_assert_uint_eq(e->type, LT_MSG_SUBMIT);
    ck_assert_uint_eq(e->code, LT_E_NOT_FOUND);
    ck_assert_int_eq(e->err, -ENOENT);
    ck_assert_msg(strstr(e->msg, "lease 1:1 is not known here") && strstr(e->msg, g_path) &&
                      strstr(e->msg, "LT_E_NOT_FOUND"),
                  "message: %s", e->msg);

    /* a batch refused at one entry */
    struct sd_client_lease_req two[2] = {{.segment = 1, .length = 4096},
                                         {.segment = 1, .offset = 4096, .length = 4096}};
    ck_assert_int_eq(sd_client_lease_request(c, 0, two, 2, LT_LEASE_REQ_F_ALL_OR_NOTHING, 32, &rid),
                     0);
    recv_type(&f, c, &b, LT_MSG_LEASE_REQUEST);
    fake_error(&em, rid, LT_MSG_LEASE_REQUEST, LT_E_LIMIT, 1, "lease limit 1 reached");
    fake_send(&f, &em, sizeof(em), -1);
    pump_until(c, ++want);
    e = &evs[want - 1];
    ck_assert_int_eq(e->kind, EV_ERROR);
    ck_assert_uint_eq(e->index, 1);
    ck_assert_int_eq(e->err, -EMFILE);
    ck_assert_ptr_nonnull(strstr(e->msg, "lease limit 1 reached"));

    /* the blocking call: a reply, then an ERROR */
    struct lt_msg_stream_cmd sc;
    lt_msg_init(&sc, sizeof(sc), LT_MSG_STREAM_CREATE, 1);
    struct responder rs = {.f = &f, .mode = 0};
    pthread_t th;
    union lt_msg_buffer reply;
    ck_assert_int_eq(pthread_create(&th, NULL, respond_once, &rs), 0);
    ck_assert_int_eq(sd_client_call(c, 0, &sc, sizeof(sc), WAIT_MS, &reply), 0);
    pthread_join(th, NULL);
    ck_assert_uint_eq(reply.hdr.type, LT_MSG_CTL_REPLY);
    ck_assert(lt_stream_id_eq(((struct lt_msg_ctl_reply *)(void *)&reply)->stream,
                              lt_stream_id_make(3, 1)));
    rs.mode = 1;
    ck_assert_int_eq(pthread_create(&th, NULL, respond_once, &rs), 0);
    ck_assert_int_eq(sd_client_call(c, 0, &sc, sizeof(sc), WAIT_MS, &reply), -EMFILE);
    pthread_join(th, NULL);
    ck_assert_ptr_nonnull(strstr(sd_client_last_error(c), "stream limit 16 reached"));
    ck_assert_int_eq(ev_count(EV_REPLY), 0); /* blocking answers bypass on_reply */
    struct lt_msg_submit not_ctl;
    lt_msg_init(&not_ctl, sizeof(not_ctl), LT_MSG_SUBMIT, 1);
    ck_assert_int_eq(sd_client_send(c, 0, &not_ctl, sizeof(not_ctl), 0, &rid), -EINVAL);

    sd_client_destroy(c);
    fake_close(&f);
    munmap(b1, MIB);
    munmap(b2, 64 << 10);
    close(fd1);
    close(fd2);
}
END_TEST

/* ---- release ---- */

START_TEST(test_buffer_reusable_only_after_its_release_complete)
{
    struct sd_client *c = client_new(5, 50);
    int fd1;
    void *b1 = memfd_seg(MIB, &fd1);
    ck_assert_int_eq(sd_client_segment_add(c, 1, fd1, b1, MIB, LT_CLASS_PINNED), 0);
    struct fake f;
    union lt_msg_buffer b;
    unsigned agent;
    fake_listen(&f, g_path);
    ck_assert_int_eq(sd_client_agent_add(c, g_path, &agent), 0);
    handshake(&f, c, 0, 8, 1, NULL);
    struct sd_client_lease_req r[3] = {{.segment = 1, .offset = 0, .length = 65536 + 4096},
                                       {.segment = 1, .offset = 131072, .length = 4096},
                                       {.segment = 1, .offset = 262144, .length = 4096}};
    struct sd_client_lease l[3];
    lease_all(&f, c, r, 3, 1, l);

    uint64_t quiet_rid, rid, rel;
    struct sd_client_work w = checksum_work(0, 65536, 65536);
    w.flags = LT_SUBMIT_F_QUIET;
    ck_assert_int_eq(sd_client_submit(c, &l[0], &w, 77, &quiet_rid), 0);
    recv_type(&f, c, &b, LT_MSG_SUBMIT);
    ck_assert_uint_eq(((struct lt_msg_submit *)(void *)&b)->flags, LT_SUBMIT_F_QUIET);

    ck_assert_int_eq(sd_client_lease_release(c, l, 2, 88, &rel), 0);
    ck_assert_int_eq(sd_client_submit(c, &l[0], &w, 0, &rid), -EBUSY);
    ck_assert_int_eq(sd_client_lease_release(c, l, 1, 0, &rid), -EBUSY);
    struct sd_client_lease dup[2] = {l[2], l[2]};
    ck_assert_int_eq(sd_client_lease_release(c, dup, 2, 0, &rid), -EINVAL);
    recv_type(&f, c, &b, LT_MSG_LEASE_RELEASE);
    const struct lt_msg_lease_release *q = (const void *)&b;
    ck_assert_uint_eq(q->count, 2);
    ck_assert(lt_lease_id_eq(q->leases[0], l[0].id));
    ck_assert(lt_lease_id_eq(q->leases[1], l[1].id));

    /* the second lease drains first; the first is still busy on the GPU */
    unsigned base = nev;
    release_complete_send(&f, rel, l[1].id, LT_OK);
    pump_until(c, base + 1);
    pump_for(c, 30);
    ck_assert_uint_eq(nev, base + 1);
    ck_assert_int_eq(evs[base].kind, EV_RELEASE);
    ck_assert(lt_lease_id_eq(evs[base].lease.id, l[1].id));
    ck_assert_uint_eq(evs[base].lease.offset, 131072);
    ck_assert_int_eq(evs[base].reusable, 1);
    ck_assert_uint_eq(evs[base].tag, 88);
    struct sd_client_agent_info info;
    ck_assert_int_eq(sd_client_agent_info(c, 0, &info), 0);
    ck_assert_uint_eq(info.in_flight, 2); /* the release and the quiet submit */

    release_complete_send(&f, rel, l[0].id, LT_OK);
    pump_until(c, base + 2);
    ck_assert_int_eq(evs[base + 1].kind, EV_RELEASE);
    ck_assert(lt_lease_id_eq(evs[base + 1].lease.id, l[0].id));
    ck_assert_int_eq(evs[base + 1].reusable, 1);
    ck_assert_int_eq(sd_client_agent_info(c, 0, &info), 0);
    ck_assert_uint_eq(info.in_flight, 0); /* the quiet submit retired with its lease */
    ck_assert_uint_eq(info.leases, 1);
    ck_assert_int_eq(sd_client_wait(c, 0, quiet_rid, 0), 0);

    /* a release that completes with an error is not a reuse permit */
    ck_assert_int_eq(sd_client_lease_release(c, &l[2], 1, 0, &rel), 0);
    recv_type(&f, c, &b, LT_MSG_LEASE_RELEASE);
    release_complete_send(&f, rel, l[2].id, LT_E_GPU_FAULT);
    pump_until(c, base + 3);
    ck_assert_int_eq(evs[base + 2].kind, EV_RELEASE);
    ck_assert_int_eq(evs[base + 2].reusable, 0);
    ck_assert_int_eq(evs[base + 2].err, -EIO);
    ck_assert_ptr_nonnull(strstr(evs[base + 2].msg, "LT_E_GPU_FAULT"));
    ck_assert_int_eq(sd_client_agent_info(c, 0, &info), 0);
    ck_assert_uint_eq(info.leases, 0);

    sd_client_destroy(c);
    fake_close(&f);
    munmap(b1, MIB);
    close(fd1);
}
END_TEST

/* Release @rel delivered nothing before the disconnect at event @d: its
 * leases come back only as failures (no reuse permit) after it. */
static void release_fails_after(int d, uint64_t rel)
{
    unsigned n = 0;
    for (unsigned i = 0; i < nev; i++) {
        if (evs[i].kind != EV_RELEASE || evs[i].rid != rel)
            continue;
        ck_assert_int_gt((int)i, d);
        ck_assert_int_eq(evs[i].reusable, 0);
        ck_assert_int_lt(evs[i].err, 0);
        n++;
    }
    ck_assert_uint_eq(n, 2);
}

/* A RELEASE_COMPLETE_BATCH is delivered exactly as its entries would be as
 * single RELEASE_COMPLETEs (same callbacks, order, tags, reuse permits),
 * mixes with singles for the same release, and retires the release's quiet
 * submits; a batch naming a lease its release does not hold, or sent
 * without the cap granted, breaks the connection and delivers nothing. */
START_TEST(test_release_batch_acts_as_single_completes)
{
    struct sd_client *c = client_new(5, 50);
    int fd1;
    void *b1 = memfd_seg(MIB, &fd1);
    ck_assert_int_eq(sd_client_segment_add(c, 1, fd1, b1, MIB, LT_CLASS_PINNED), 0);
    struct fake f;
    union lt_msg_buffer b;
    unsigned agent;
    uint64_t rng = SEED ^ 0xba7c;
    fake_listen(&f, g_path);
    ck_assert_int_eq(sd_client_agent_add(c, g_path, &agent), 0);
    handshake(&f, c, LT_CAP_RC_BATCH, 8, 1, NULL);

    enum { N = 5 };
    struct sd_client_lease_req r[N];
    for (unsigned k = 0; k < N; k++)
        r[k] = (struct sd_client_lease_req){
            .segment = 1, .offset = 65536 * k + 4096 * (rng_next(&rng) % 8), .length = 4096};
    struct sd_client_lease l[N];
    lease_all(&f, c, r, N, 1, l);
    uint64_t quiet_rid, rel;
    struct sd_client_work w = checksum_work(0, 2048, 2048);
    w.flags = LT_SUBMIT_F_QUIET;
    ck_assert_int_eq(sd_client_submit(c, &l[0], &w, 5, &quiet_rid), 0);
    recv_type(&f, c, &b, LT_MSG_SUBMIT);
    ck_assert_int_eq(sd_client_lease_release(c, l, N, 91, &rel), 0);
    recv_type(&f, c, &b, LT_MSG_LEASE_RELEASE);

    /* two in one batch, out of request order, one failed */
    unsigned base = nev;
    struct lt_lease_id ids[2] = {l[3].id, l[1].id};
    uint32_t st[2] = {LT_OK, LT_E_GPU_FAULT};
    release_batch_send(&f, rel, ids, st, 2);
    pump_until(c, base + 2);
    pump_for(c, 20);
    ck_assert_uint_eq(nev, base + 2);
    for (unsigned k = 0; k < 2; k++) {
        ck_assert_int_eq(evs[base + k].kind, EV_RELEASE);
        ck_assert_uint_eq(evs[base + k].rid, rel);
        ck_assert_uint_eq(evs[base + k].tag, 91);
        ck_assert(lt_lease_id_eq(evs[base + k].lease.id, ids[k]));
    }
    ck_assert_uint_eq(evs[base].lease.offset, r[3].offset);
    ck_assert_int_eq(evs[base].reusable, 1);
    ck_assert_int_eq(evs[base + 1].reusable, 0);
    ck_assert_int_eq(evs[base + 1].err, -EIO);
    ck_assert_ptr_nonnull(strstr(evs[base + 1].msg, "LT_E_GPU_FAULT"));
    struct sd_client_agent_info info;
    ck_assert_int_eq(sd_client_agent_info(c, 0, &info), 0);
    ck_assert_uint_eq(info.in_flight, 2); /* the release and the quiet submit */
    ck_assert_uint_eq(info.leases, 3);

    /* a single for the same release, then a batch with the rest */
    release_complete_send(&f, rel, l[4].id, LT_OK);
    pump_until(c, base + 3);
    ck_assert(lt_lease_id_eq(evs[base + 2].lease.id, l[4].id));
    struct lt_lease_id rest[2] = {l[2].id, l[0].id};
    uint32_t ok2[2] = {LT_OK, LT_OK};
    release_batch_send(&f, rel, rest, ok2, 2);
    pump_until(c, base + 5);
    ck_assert(lt_lease_id_eq(evs[base + 3].lease.id, l[2].id));
    ck_assert(lt_lease_id_eq(evs[base + 4].lease.id, l[0].id));
    ck_assert_int_eq(evs[base + 4].reusable, 1);
    ck_assert_int_eq(sd_client_agent_info(c, 0, &info), 0);
    ck_assert_uint_eq(info.in_flight, 0); /* the quiet submit retired with its lease */
    ck_assert_uint_eq(info.leases, 0);
    ck_assert_int_eq(sd_client_wait(c, 0, quiet_rid, 0), 0);

    /* a batch naming one held lease and one of an earlier release: nothing delivered */
    struct sd_client_lease m[2];
    lease_all(&f, c, r, 2, 10, m);
    ck_assert_int_eq(sd_client_lease_release(c, m, 2, 92, &rel), 0);
    recv_type(&f, c, &b, LT_MSG_LEASE_RELEASE);
    base = nev;
    struct lt_lease_id bad[2] = {m[0].id, l[3].id};
    release_batch_send(&f, rel, bad, ok2, 2);
    pump_until(c, base + 1);
    pump_for(c, 20);
    int d = ev_find(EV_DISCONNECT, 0);
    ck_assert_int_ge(d, (int)base);
    ck_assert_msg(strstr(evs[d].msg, "RELEASE_COMPLETE_BATCH") &&
                      strstr(evs[d].msg, "does not answer"),
                  "message: %s", evs[d].msg);
    release_fails_after(d, rel);
    fake_drop(&f);

    /* reconnected without the cap granted: a batch is a protocol error */
    handshake(&f, c, 0, 8, 1, NULL);
    lease_all(&f, c, r, 2, 20, m);
    ck_assert_int_eq(sd_client_lease_release(c, m, 2, 93, &rel), 0);
    recv_type(&f, c, &b, LT_MSG_LEASE_RELEASE);
    base = nev;
    struct lt_lease_id good[2] = {m[1].id, m[0].id};
    release_batch_send(&f, rel, good, ok2, 2);
    pump_until(c, base + 1);
    pump_for(c, 20);
    d = -1;
    for (unsigned i = base; i < nev; i++)
        if (evs[i].kind == EV_DISCONNECT && d < 0)
            d = (int)i;
    ck_assert_int_ge(d, 0);
    ck_assert_msg(strstr(evs[d].msg, "did not grant"), "message: %s", evs[d].msg);
    release_fails_after(d, rel);

    sd_client_destroy(c);
    fake_close(&f);
    munmap(b1, MIB);
    close(fd1);
}
END_TEST

/* ---- agent death, backoff, reconnect ---- */

START_TEST(test_agent_death_fails_in_flight_then_reconnects_reoffers_and_resubmits)
{
    const uint32_t bmin = 4, bmax = 32;
    struct sd_client *c = client_new(bmin, bmax);
    int fd1, fd2;
    void *b1 = memfd_seg(MIB, &fd1), *b2 = memfd_seg(64 << 10, &fd2);
    ck_assert_int_eq(sd_client_segment_add(c, 1, fd1, b1, MIB, LT_CLASS_PINNED), 0);
    ck_assert_int_eq(sd_client_segment_add(c, 2, fd2, b2, 64 << 10, LT_CLASS_MAPPED), 0);
    uint64_t rng = SEED;
    for (size_t i = 0; i < MIB / 8; i++)
        ((uint64_t *)b1)[i] = rng_next(&rng);
    unsigned char *copy = malloc(MIB);
    memcpy(copy, b1, MIB);

    struct fake f;
    union lt_msg_buffer b;
    unsigned agent;
    fake_listen(&f, g_path);
    ck_assert_int_eq(sd_client_agent_add(c, g_path, &agent), 0);
    ck_assert_uint_eq(handshake(&f, c, 0, 8, 2, NULL), 2);
    struct sd_client_lease_req r[2] = {{.segment = 1, .offset = 0, .length = 65536 + 4096},
                                       {.segment = 1, .offset = 131072, .length = 4096}};
    struct sd_client_lease l[2];
    lease_all(&f, c, r, 2, 1, l);
    uint64_t rids[3], rel;
    for (unsigned k = 0; k < 3; k++) {
        struct sd_client_work w = checksum_work(0, 65536, 65536);
        ck_assert_int_eq(sd_client_submit(c, &l[0], &w, 1 + k, &rids[k]), 0);
        recv_type(&f, c, &b, LT_MSG_SUBMIT);
    }
    ck_assert_int_eq(sd_client_lease_release(c, &l[1], 1, 9, &rel), 0);
    recv_type(&f, c, &b, LT_MSG_LEASE_RELEASE);

    /* the agent dies with three submits and a release in flight */
    unsigned base = nev;
    fake_close(&f);
    pump_until(c, base + 5);
    ck_assert_int_eq(evs[base].kind, EV_DISCONNECT);
    ck_assert_int_eq(evs[base].err, -ECONNRESET);
    ck_assert_msg(strstr(evs[base].msg, g_path) && strstr(evs[base].msg, "connection lost") &&
                      strstr(evs[base].msg, "EOF"),
                  "message: %s", evs[base].msg);
    for (unsigned k = 0; k < 3; k++) {
        struct ev *e = &evs[base + 1 + k];
        ck_assert_int_eq(e->kind, EV_ERROR);
        ck_assert_uint_eq(e->rid, rids[k]);
        ck_assert_uint_eq(e->tag, 1 + k);
        ck_assert_int_eq(e->err, -ECONNRESET);
        ck_assert_uint_eq(e->code, LT_OK);
        ck_assert_msg(strstr(e->msg, g_path) && strstr(e->msg, "SUBMIT"), "message: %s", e->msg);
    }
    struct ev *e = &evs[base + 4];
    ck_assert_int_eq(e->kind, EV_RELEASE);
    ck_assert_int_eq(e->err, -ECONNRESET);
    ck_assert_int_eq(e->reusable, 0);
    ck_assert(lt_lease_id_eq(e->lease.id, l[1].id));
    struct sd_client_agent_info info;
    ck_assert_int_eq(sd_client_agent_info(c, 0, &info), 0);
    ck_assert_int_eq(info.state, SD_CLIENT_DISCONNECTED);
    ck_assert_uint_eq(info.in_flight, 0);
    ck_assert_uint_eq(info.leases, 0);
    uint64_t rid;
    struct sd_client_work w = checksum_work(0, 65536, 65536);
    ck_assert_int_eq(sd_client_submit(c, &l[0], &w, 0, &rid), -ENOTCONN);

    /* nobody listens: attempts back off exponentially, with jitter, capped */
    uint64_t attempts0 = info.attempts, last = info.attempts;
    unsigned streak = 1;
    ck_assert_uint_eq(info.next_delay_ms, bmin);
    uint64_t end = now_ms() + 300;
    while (now_ms() < end) {
        pump_for(c, 1);
        ck_assert_int_eq(sd_client_agent_info(c, 0, &info), 0);
        if (info.attempts == last)
            continue;
        ck_assert_uint_eq(info.attempts, last + 1);
        last = info.attempts;
        streak++;
        uint64_t d = bmin;
        for (unsigned k = 1; k < streak && d < bmax; k++)
            d *= 2;
        d = d > bmax ? bmax : d;
        uint64_t lo = d / 2 > bmin ? d / 2 : bmin;
        ck_assert_msg(info.next_delay_ms >= lo && info.next_delay_ms <= d,
                      "failure %u: delay %u ms outside [%llu, %llu]", streak, info.next_delay_ms,
                      (unsigned long long)lo, (unsigned long long)d);
        ck_assert(info.last_err == -ENOENT || info.last_err == -ECONNREFUSED);
    }
    ck_assert_uint_ge(last - attempts0, 4);
    ck_assert_uint_le(last - attempts0, 300 / (bmin / 2) + 1);

    /* a new agent on the same path: re-handshake, the same segments offered again */
    fake_listen(&f, g_path);
    base = nev;
    ck_assert_uint_eq(handshake(&f, c, 0, 8, 2, NULL), 2);
    ck_assert_int_eq(evs[base].kind, EV_READY);
    ck_assert_uint_eq(evs[base].epoch, 2);
    ck_assert_int_eq(sd_client_agent_info(c, 0, &info), 0);
    ck_assert_uint_eq(info.offers_sent, 4);
    ck_assert_uint_eq(info.epoch, 2);
    ck_assert_uint_eq(info.next_delay_ms, 0);

    /* the old lease is refused, a fresh one with the very same agent id works */
    ck_assert_int_eq(sd_client_submit(c, &l[0], &w, 0, &rid), -ESTALE);
    ck_assert_ptr_nonnull(strstr(sd_client_last_error(c), "connection 1"));
    struct sd_client_lease nl;
    lease_all(&f, c, &r[0], 1, 1, &nl);
    ck_assert(lt_lease_id_eq(nl.id, l[0].id));
    ck_assert_uint_eq(nl.epoch, 2);
    ck_assert_int_eq(sd_client_submit(c, &nl, &w, 1, &rid), 0);
    ck_assert_uint_gt(rid, rids[2]); /* request ids never repeat on an agent */
    recv_type(&f, c, &b, LT_MSG_SUBMIT);
    completion_send(&f, rid, nl.id, 16);
    base = nev;
    pump_until(c, base + 1);
    ck_assert_int_eq(evs[base].kind, EV_COMPLETION);
    ck_assert_uint_eq(evs[base].tag, 1);
    ck_assert_int_eq(memcmp(copy, b1, MIB), 0); /* nothing staged was touched */

    sd_client_destroy(c);
    fake_close(&f);
    free(copy);
    munmap(b1, MIB);
    munmap(b2, 64 << 10);
    close(fd1);
    close(fd2);
}
END_TEST

START_TEST(test_two_agents_are_independent_connections)
{
    struct sd_client *c = client_new(5, 50);
    int fd1;
    void *b1 = memfd_seg(MIB, &fd1);
    ck_assert_int_eq(sd_client_segment_add(c, 1, fd1, b1, MIB, LT_CLASS_PINNED), 0);
    char path_b[160];
    snprintf(path_b, sizeof(path_b), "%s/agent-b.sock", g_dir);
    struct fake fa, fb;
    union lt_msg_buffer b;
    unsigned ia, ib;
    fake_listen(&fa, g_path);
    fake_listen(&fb, path_b);
    ck_assert_int_eq(sd_client_agent_add(c, g_path, &ia), 0);
    ck_assert_int_eq(sd_client_agent_add(c, path_b, &ib), 0);
    ck_assert_uint_eq(ib, ia + 1);
    handshake(&fa, c, 0, 8, 1, NULL); /* each agent gets its own offer */
    handshake(&fb, c, 0, 8, 1, NULL);

    /* the same lease id from both agents names two different leases */
    struct sd_client_lease_req r = {.segment = 1, .offset = 0, .length = 65536 + 4096};
    struct sd_client_lease la, lb;
    uint64_t ra, rb;
    ck_assert_int_eq(sd_client_lease_request(c, ia, &r, 1, 0, 0, &ra), 0);
    ck_assert_int_eq(sd_client_lease_request(c, ib, &r, 1, 0, 0, &rb), 0);
    ck_assert_uint_eq(ra, rb); /* request ids are per connection */
    struct fake *fs[2] = {&fa, &fb};
    for (int k = 0; k < 2; k++) {
        recv_type(fs[k], c, &b, LT_MSG_LEASE_REQUEST);
        union lt_msg_buffer out;
        size_t len = sizeof(struct lt_msg_lease_grant) + sizeof(struct lt_lease_grant_entry);
        lt_msg_init(&out, len, LT_MSG_LEASE_GRANT, b.hdr.request_id);
        struct lt_msg_lease_grant *g = (void *)&out;
        g->count = 1;
        g->entries[0] =
            (struct lt_lease_grant_entry){lt_lease_id_make(1, 1), LT_CLASS_PINNED, LT_OK};
        fake_send(fs[k], &out, len, -1);
    }
    unsigned base = nev;
    pump_until(c, base + 2);
    la = evs[base].agent == ia ? evs[base].ents[0].lease : evs[base + 1].ents[0].lease;
    lb = evs[base].agent == ib ? evs[base].ents[0].lease : evs[base + 1].ents[0].lease;
    ck_assert_uint_eq(la.agent, ia);
    ck_assert_uint_eq(lb.agent, ib);

    struct sd_client_work w = checksum_work(0, 65536, 65536);
    uint64_t sa, sb;
    ck_assert_int_eq(sd_client_submit(c, &la, &w, 1, &sa), 0);
    ck_assert_int_eq(sd_client_submit(c, &lb, &w, 2, &sb), 0);
    recv_type(&fa, c, &b, LT_MSG_SUBMIT);
    recv_type(&fb, c, &b, LT_MSG_SUBMIT);

    /* agent A dies; B's work goes on */
    base = nev;
    fake_close(&fa);
    pump_until(c, base + 2);
    ck_assert_int_eq(evs[base].kind, EV_DISCONNECT);
    ck_assert_uint_eq(evs[base].agent, ia);
    ck_assert_int_eq(evs[base + 1].kind, EV_ERROR);
    ck_assert_uint_eq(evs[base + 1].agent, ia);
    ck_assert_uint_eq(evs[base + 1].tag, 1);
    completion_send(&fb, sb, lb.id, 16);
    pump_until(c, base + 3);
    ck_assert_int_eq(evs[base + 2].kind, EV_COMPLETION);
    ck_assert_uint_eq(evs[base + 2].agent, ib);
    ck_assert_uint_eq(evs[base + 2].tag, 2);
    struct sd_client_agent_info info;
    ck_assert_int_eq(sd_client_agent_info(c, ib, &info), 0);
    ck_assert_int_eq(info.state, SD_CLIENT_READY);
    ck_assert_uint_eq(info.epoch, 1);
    ck_assert_uint_eq(info.leases, 1);
    ck_assert_int_eq(sd_client_agent_info(c, ia, &info), 0);
    ck_assert_int_ne(info.state, SD_CLIENT_READY);
    ck_assert_uint_eq(info.leases, 0);

    sd_client_destroy(c);
    fake_close(&fb);
    unlink(path_b);
    munmap(b1, MIB);
    close(fd1);
}
END_TEST

START_TEST(test_sends_queue_in_order_while_the_socket_is_full)
{
    enum { N = 3000 };
    struct sd_client *c = client_new(5, 50);
    int fd1;
    void *b1 = memfd_seg(MIB, &fd1);
    ck_assert_int_eq(sd_client_segment_add(c, 1, fd1, b1, MIB, LT_CLASS_PINNED), 0);
    struct fake f;
    union lt_msg_buffer b;
    unsigned agent;
    fake_listen(&f, g_path);
    ck_assert_int_eq(sd_client_agent_add(c, g_path, &agent), 0);
    handshake(&f, c, 0, 8, 1, NULL);
    struct sd_client_lease_req r = {.segment = 1, .offset = 0, .length = 65536 + 4096};
    struct sd_client_lease l;
    lease_all(&f, c, &r, 1, 1, &l);

    uint64_t first = 0, rid;
    for (unsigned k = 0; k < N; k++) {
        struct sd_client_work w = checksum_work(0, 4096 * (1 + k % 16), 65536);
        ck_assert_int_eq(sd_client_submit(c, &l, &w, k, &rid), 0);
        if (k == 0)
            first = rid;
    }
    /* without processing, only what fit in the socket buffer has left */
    unsigned got = 0;
    while (fake_recv(&f, &b, 0, NULL, NULL) >= 0) {
        ck_assert_uint_eq(b.hdr.request_id, first + got);
        got++;
    }
    ck_assert_uint_gt(got, 0);
    ck_assert_uint_lt(got, N);
    /* processing flushes the rest, in order */
    while (got < N) {
        ssize_t n = recv_pumped(&f, c, &b, NULL, NULL);
        ck_assert_int_eq(lt_validate_from_client(b.bytes, (size_t)n, NULL), LT_OK);
        ck_assert_uint_eq(b.hdr.request_id, first + got);
        ck_assert_uint_eq(((struct lt_msg_submit *)(void *)&b)->args.checksum.length,
                          4096 * (1 + got % 16));
        got++;
    }
    struct sd_client_agent_info info;
    ck_assert_int_eq(sd_client_agent_info(c, 0, &info), 0);
    ck_assert_uint_eq(info.in_flight, N);
    sd_client_destroy(c);
    fake_close(&f);
    munmap(b1, MIB);
    close(fd1);
}
END_TEST

START_TEST(test_stuck_handshake_times_out_and_retries)
{
    g_handshake_ms = 40;
    struct sd_client *c = client_new(2, 10);
    g_handshake_ms = 0;
    struct fake f;
    union lt_msg_buffer b;
    unsigned agent;
    fake_listen(&f, g_path);
    ck_assert_int_eq(sd_client_agent_add(c, g_path, &agent), 0);
    fake_accept(&f);
    recv_type(&f, c, &b, LT_MSG_HELLO); /* and never answer it */
    uint64_t t0 = now_ms();
    ck_assert_int_eq(sd_client_wait_ready(c, 0, WAIT_MS), -ETIMEDOUT);
    uint64_t took = now_ms() - t0;
    ck_assert_msg(took >= 30 && took < 2000, "the 40 ms handshake timeout fired after %llu ms",
                  (unsigned long long)took);
    ck_assert_msg(strstr(sd_client_last_error(c), "no HELLO_REPLY"), "message: %s",
                  sd_client_last_error(c));
    int d = ev_find(EV_DISCONNECT, 0);
    ck_assert_int_ge(d, 0);
    ck_assert_int_eq(evs[d].err, -ETIMEDOUT);
    fake_drop(&f);
    handshake(&f, c, 0, 8, 0, NULL); /* the retry succeeds */
    struct sd_client_agent_info info;
    ck_assert_int_eq(sd_client_agent_info(c, 0, &info), 0);
    ck_assert_uint_eq(info.epoch, 2);
    sd_client_destroy(c);
    fake_close(&f);
}
END_TEST

/* ---- malformed replies ---- */

enum {
    BAD_MAGIC,
    BAD_WRONG_TYPE,
    BAD_WRONG_DIRECTION,
    BAD_TRUNCATED,
    BAD_LENGTH_MISMATCH,
    BAD_OVERSIZED,
    BAD_UNKNOWN_ID,
    BAD_GRANT_COUNT,
    BAD_GRANT_DUP_LEASE,
    BAD_WITH_FD,
    BAD_ERROR_ID_ZERO,
    BAD_EMPTY,
    BAD_RELEASE_TWICE,
    BAD_RANDOM, /* the rest: seeded random bytes */
    BAD_CASES = BAD_RANDOM + 40
};

/* Sends malformed case @k in answer to lease request @rid (two entries).
 * Returns the error expected, 0 for "any", and what the message names. */
static int malformed_send(struct fake *f, struct sd_client *c, int k, uint64_t rid, uint64_t *rng,
                          const char **needle_p)
{
    union lt_msg_buffer m;
    size_t len = sizeof(struct lt_msg_lease_grant) + 2 * sizeof(struct lt_lease_grant_entry);
    lt_msg_init(&m, len, LT_MSG_LEASE_GRANT, rid);
    struct lt_msg_lease_grant *g = (void *)&m;
    g->count = 2;
    g->entries[0] = (struct lt_lease_grant_entry){lt_lease_id_make(1, 1), LT_CLASS_PINNED, LT_OK};
    g->entries[1] = (struct lt_lease_grant_entry){lt_lease_id_make(2, 1), LT_CLASS_PINNED, LT_OK};
    *needle_p = "";
    switch (k) {
    case BAD_MAGIC:
        m.hdr.magic = 0xdeadbeef;
        *needle_p = "LT_E_BAD_MAGIC";
        break;
    case BAD_WRONG_TYPE: {
        struct lt_msg_segment_accept *a = (void *)&m;
        len = sizeof(*a);
        lt_msg_init(a, len, LT_MSG_SEGMENT_ACCEPT, rid);
        a->cookie = 1;
        a->segment = lt_segment_id_make(1, 1);
        a->size = MIB;
        a->mem_class = LT_CLASS_PINNED;
        *needle_p = "LT_E_WRONG_TYPE";
        break;
    }
    case BAD_WRONG_DIRECTION: {
        struct lt_msg_hello *h = (void *)&m;
        len = sizeof(*h);
        lt_msg_init(h, len, LT_MSG_HELLO, rid);
        h->version_min = h->version_max = 1;
        lt_name_set(h->name, sizeof(h->name), "evil");
        *needle_p = "LT_E_WRONG_DIRECTION";
        break;
    }
    case BAD_TRUNCATED:
        len = 10;
        *needle_p = "LT_E_TRUNCATED";
        break;
    case BAD_LENGTH_MISMATCH:
        m.hdr.length += 8;
        *needle_p = "LT_E_LENGTH_MISMATCH";
        break;
    case BAD_OVERSIZED: {
        static uint64_t big[(LT_MSG_MAX_BYTES + 104) / 8];
        memcpy(big, &m, len);
        fake_send(f, big, sizeof(big), -1);
        *needle_p = "larger than";
        return -EPROTO;
    }
    case BAD_UNKNOWN_ID:
        m.hdr.request_id = rid + 1000;
        *needle_p = "not in flight";
        break;
    case BAD_GRANT_COUNT:
        g->count = 1;
        len = sizeof(struct lt_msg_lease_grant) + sizeof(struct lt_lease_grant_entry);
        m.hdr.length = (uint32_t)len;
        *needle_p = "LT_E_BAD_LENGTH";
        break;
    case BAD_GRANT_DUP_LEASE:
        g->entries[1].lease = g->entries[0].lease;
        *needle_p = "granted twice";
        break;
    case BAD_WITH_FD: {
        int efd = eventfd(0, EFD_CLOEXEC);
        ck_assert_int_ge(efd, 0);
        fake_send(f, &m, len, efd);
        close(efd);
        *needle_p = "fd";
        return -EPROTO;
    }
    case BAD_ERROR_ID_ZERO: {
        struct lt_msg_error *x = (void *)&m;
        len = sizeof(*x);
        fake_error(x, 0, LT_MSG_LEASE_REQUEST, LT_E_BAD_MAGIC, LT_INDEX_NONE,
                   "your message had no magic");
        *needle_p = "your message had no magic";
        break;
    }
    case BAD_EMPTY:
        len = 0;
        *needle_p = "EOF";
        fake_send(f, &m, 0, -1);
        return -ECONNRESET;
    case BAD_RELEASE_TWICE: {
        /* grant properly, release both, complete the first one twice */
        fake_send(f, &m, len, -1);
        unsigned want = nev + 1;
        pump_until(c, want);
        ck_assert_int_eq(evs[want - 1].kind, EV_GRANT);
        struct sd_client_lease l[2] = {evs[want - 1].ents[0].lease, evs[want - 1].ents[1].lease};
        uint64_t rel;
        union lt_msg_buffer b;
        ck_assert_int_eq(sd_client_lease_release(c, l, 2, 0, &rel), 0);
        recv_type(f, c, &b, LT_MSG_LEASE_RELEASE);
        release_complete_send(f, rel, l[0].id, LT_OK);
        release_complete_send(f, rel, l[0].id, LT_OK);
        *needle_p = "does not hold";
        return -EPROTO;
    }
    default:
        len = 1 + (size_t)(rng_next(rng) % 200);
        for (size_t i = 0; i < len; i++)
            m.bytes[i] = (unsigned char)rng_next(rng);
        if (len >= sizeof(struct lt_header) && (k & 1)) {
            /* a plausible header over random bytes */
            m.hdr.magic = LT_MAGIC;
            m.hdr.version = LT_PROTO_VERSION;
            m.hdr.type = (uint16_t)(1 + rng_next(rng) % LT_MSG_TYPE_LAST);
            m.hdr.length = (uint32_t)len;
            m.hdr.request_id = rid;
        }
        fake_send(f, &m, len, -1);
        return 0;
    }
    fake_send(f, &m, len, -1);
    return k == BAD_ERROR_ID_ZERO ? lt_error_errno(LT_E_BAD_MAGIC) : -EPROTO;
}

START_TEST(test_malformed_replies_disconnect_with_an_error_never_a_crash)
{
    struct sd_client *c = client_new(1, 4);
    int fd1;
    void *b1 = memfd_seg(MIB, &fd1);
    ck_assert_int_eq(sd_client_segment_add(c, 1, fd1, b1, MIB, LT_CLASS_PINNED), 0);
    struct fake f;
    union lt_msg_buffer b;
    unsigned agent;
    uint64_t rng = SEED;
    fake_listen(&f, g_path);
    ck_assert_int_eq(sd_client_agent_add(c, g_path, &agent), 0);
    int fds_before = -1;
    for (int k = 0; k < BAD_CASES; k++) {
        handshake(&f, c, 0, 8, 1, NULL);
        if (fds_before < 0)
            fds_before = count_fds();
        ck_assert_int_eq(count_fds(), fds_before);
        struct sd_client_lease_req r[2] = {{.segment = 1, .offset = 0, .length = 4096},
                                           {.segment = 1, .offset = 8192, .length = 4096}};
        uint64_t rid;
        ck_assert_int_eq(sd_client_lease_request(c, 0, r, 2, 0, 100 + (uint64_t)k, &rid), 0);
        recv_type(&f, c, &b, LT_MSG_LEASE_REQUEST);
        unsigned base = nev;
        const char *needle;
        int want_err = malformed_send(&f, c, k, rid, &rng, &needle);
        /* the disconnect, then the lease request (or release) failing */
        int d = -1;
        uint64_t end = now_ms() + WAIT_MS;
        while (d < 0) {
            ck_assert_msg(now_ms() < end, "case %d: no disconnect; log:\n%s", k, g_log);
            pump_for(c, 2);
            for (unsigned i = base; i < nev; i++)
                if (evs[i].kind == EV_DISCONNECT)
                    d = (int)i;
        }
        struct ev *e = &evs[d];
        ck_assert_int_lt(e->err, 0);
        if (want_err)
            ck_assert_msg(e->err == want_err, "case %d: err %d, expected %d (%s)", k, e->err,
                          want_err, e->msg);
        ck_assert_msg(strstr(e->msg, g_path) && strstr(e->msg, needle),
                      "case %d: message \"%s\" lacks \"%s\"", k, e->msg, needle);
        if (k != BAD_RELEASE_TWICE) {
            int x = ev_find(EV_ERROR, rid);
            ck_assert_msg(x > d, "case %d: the lease request did not fail after the disconnect", k);
            ck_assert_int_eq(evs[x].err, e->err);
            ck_assert_uint_eq(evs[x].tag, 100 + (uint64_t)k);
        }
        struct sd_client_agent_info info;
        ck_assert_int_eq(sd_client_agent_info(c, 0, &info), 0);
        /* nothing left but, if it reconnected already, its new HELLO */
        ck_assert_uint_eq(info.in_flight, info.state == SD_CLIENT_DISCONNECTED ? 0u : 1u);
        ck_assert_uint_eq(info.leases, 0);
        fake_drop(&f);
        nev = 0;
    }
    sd_client_destroy(c);
    fake_close(&f);
    munmap(b1, MIB);
    close(fd1);
}
END_TEST

/* ---- doorbells ---- */

START_TEST(test_doorbell_ring_and_done_word_cross_processes)
{
    enum { ROUNDS = 2000, SLOTS = 64 };
    int fd;
    uint64_t *w = memfd_seg(4096, &fd);
    uint64_t *bell = &w[0], *done = &w[1], *result = &w[2], *data = &w[8];
    memset(w, 0, 4096);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        /* the "GPU": waits for each ring, reads the staged words, answers */
        for (uint64_t seq = 1; seq <= ROUNDS; seq++) {
            uint64_t spins = 0;
            while (__atomic_load_n(bell, __ATOMIC_ACQUIRE) < seq)
                if (++spins % 64 == 0) {
                    sched_yield();
                    if (spins > (1ull << 30))
                        _exit(2);
                }
            uint64_t sum = seq;
            for (int i = 0; i < SLOTS; i++)
                sum = sum * 31 + data[i];
            *result = sum;
            __atomic_store_n(done, seq, __ATOMIC_RELEASE);
        }
        _exit(0);
    }
    uint64_t rng = SEED;
    for (uint64_t seq = 1; seq <= ROUNDS; seq++) {
        uint64_t expect = seq;
        for (int i = 0; i < SLOTS; i++) {
            data[i] = rng_next(&rng);
            expect = expect * 31 + data[i];
        }
        sd_client_ring(bell, seq);
        uint64_t spins = 0;
        while (sd_client_done_word_read(done) < seq) {
            if (++spins % 64 == 0)
                sched_yield();
            ck_assert_msg(spins < (1ull << 30), "round %llu: no answer", (unsigned long long)seq);
        }
        ck_assert_uint_eq(sd_client_done_word_read(done), seq);
        ck_assert_uint_eq(*result, expect);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    /* the words a client resolves are the segment's own */
    struct sd_client *c = client_new(5, 50);
    ck_assert_int_eq(sd_client_segment_add(c, 5, fd, w, 4096, LT_CLASS_MAPPED), 0);
    uint64_t *p;
    ck_assert_int_eq(sd_client_word_ptr(c, 5, 8, &p), 0);
    ck_assert_ptr_eq(p, done);
    ck_assert_int_eq(sd_client_word_ptr(c, 5, 4092, &p), -EINVAL);
    ck_assert_int_eq(sd_client_word_ptr(c, 5, 4096, &p), -EINVAL);
    ck_assert_int_eq(sd_client_word_ptr(c, 6, 0, &p), -ENOENT);
    sd_client_destroy(c);
    munmap(w, 4096);
    close(fd);
}
END_TEST

/* ---- end to end: the agent is killed and restarted mid-run ---- */

#define E2E_SHARDS 48
#define E2E_DATA (64u << 10)
#define E2E_BLOCK 4096u
#define E2E_BLOCKS (E2E_DATA / E2E_BLOCK)
#define E2E_BUF (E2E_DATA + E2E_BLOCKS * 8)
#define E2E_WINDOW 8
#define E2E_DIE_AFTER 20

enum { S_TODO, S_LEASING, S_SUBMITTED, S_RELEASING, S_FREED, S_LOST };

struct e2e_shard {
    int state;
    struct sd_pool_buf buf;
    unsigned char *copy; /* the staged bytes, to prove nothing was lost */
    struct lt_checksum_result expect;
    uint64_t lease_rid;
    struct sd_client_lease lease;
    uint64_t seq;
    unsigned completions;
};

struct e2e {
    struct sd_client *c;
    struct sd_pool *pool;
    uint32_t mapped_seg;
    uint64_t *mapped_base;
    struct e2e_shard s[E2E_SHARDS];
    uint64_t seq;
    unsigned disconnects, conn_failures, lost_releases, done;
    int ready;
    char first_failure[1024];
};

static struct e2e g_e2e;

static void e2e_drive(struct e2e *x)
{
    if (!x->ready)
        return;
    unsigned busy = 0;
    for (unsigned i = 0; i < E2E_SHARDS; i++)
        busy += x->s[i].state == S_LEASING || x->s[i].state == S_SUBMITTED;
    struct sd_client_agent_info info;
    ck_assert_int_eq(sd_client_agent_info(x->c, 0, &info), 0);
    struct sd_client_lease_req reqs[E2E_WINDOW];
    unsigned idx[E2E_WINDOW], n = 0;
    for (unsigned i = 0; i < E2E_SHARDS && busy + n < E2E_WINDOW && n < info.hello.max_lease_batch;
         i++) {
        if (x->s[i].state != S_TODO)
            continue;
        reqs[n] = (struct sd_client_lease_req){
            .segment = x->s[i].buf.segment_id, .offset = x->s[i].buf.offset, .length = E2E_BUF};
        idx[n++] = i;
    }
    if (n == 0)
        return;
    uint64_t rid;
    int rc = sd_client_lease_request(x->c, 0, reqs, n, 0, 0, &rid);
    if (rc == -ENOTCONN || rc == -ECONNRESET)
        return; /* on_ready drives again */
    ck_assert_msg(rc == 0, "lease request: %s", sd_client_last_error(x->c));
    for (unsigned k = 0; k < n; k++) {
        x->s[idx[k]].state = S_LEASING;
        x->s[idx[k]].lease_rid = rid;
    }
}

static void e2e_on_grant(void *ctx, const struct sd_client_grant *g)
{
    struct e2e *x = ctx;
    unsigned k = 0;
    for (unsigned i = 0; i < E2E_SHARDS && k < g->count; i++) {
        struct e2e_shard *s = &x->s[i];
        if (s->state != S_LEASING || s->lease_rid != g->request_id)
            continue;
        const struct sd_client_grant_entry *en = &g->entries[k++];
        ck_assert_int_eq(en->err, 0);
        ck_assert_uint_eq(en->lease.offset, s->buf.offset);
        s->lease = en->lease;
        s->seq = ++x->seq;
        /* queued behind its doorbell before the "read" lands, as the
         * daemon does; completion comes back through the done word too */
        struct sd_client_work w = checksum_work(0, E2E_DATA, E2E_DATA);
        w.bell = (struct sd_client_word){.segment = x->mapped_seg, .offset = 8 * i, .seq = s->seq};
        w.done = (struct sd_client_word){
            .segment = x->mapped_seg, .offset = 4096 + 8 * i, .seq = s->seq};
        uint64_t rid;
        int rc = sd_client_submit(x->c, &s->lease, &w, i, &rid);
        if (rc < 0) {
            ck_assert_msg(rc == -ECONNRESET || rc == -ENOTCONN, "submit: %s",
                          sd_client_last_error(x->c));
            s->state = S_TODO;
            continue;
        }
        s->state = S_SUBMITTED;
        sd_client_ring(&x->mapped_base[i], s->seq); /* the read landed */
    }
    ck_assert_uint_eq(k, g->count);
}

static void e2e_on_completion(void *ctx, const struct sd_client_completion *cp)
{
    struct e2e *x = ctx;
    struct e2e_shard *s = &x->s[cp->tag];
    ck_assert_int_eq(s->state, S_SUBMITTED);
    ck_assert(lt_lease_id_eq(cp->lease.id, s->lease.id));
    ck_assert_uint_eq(++s->completions, 1); /* exactly once */
    ck_assert_uint_eq(sd_client_done_word_read(&x->mapped_base[512 + cp->tag]), s->seq);
    const struct lt_checksum_result *r = &cp->result.checksum;
    ck_assert_uint_eq(cp->status, s->expect.bad_blocks ? LT_E_CHECKSUM_MISMATCH : (uint32_t)LT_OK);
    ck_assert_uint_eq(r->blocks_checked, s->expect.blocks_checked);
    ck_assert_uint_eq(r->first_bad_block, s->expect.first_bad_block);
    ck_assert_uint_eq(r->bad_blocks, s->expect.bad_blocks);
    ck_assert_uint_eq(r->expected, s->expect.expected);
    ck_assert_uint_eq(r->actual, s->expect.actual);
    x->done++;
    uint64_t rid;
    int rc = sd_client_lease_release(x->c, &s->lease, 1, cp->tag, &rid);
    if (rc == 0) {
        s->state = S_RELEASING;
    } else {
        ck_assert(rc == -ECONNRESET || rc == -ENOTCONN);
        s->state = S_LOST;
    }
}

static void e2e_on_release(void *ctx, const struct sd_client_release *r)
{
    struct e2e *x = ctx;
    struct e2e_shard *s = &x->s[r->tag];
    ck_assert_int_eq(s->state, S_RELEASING);
    if (r->reusable) {
        ck_assert_int_eq(memcmp(s->buf.base, s->copy, E2E_BUF), 0);
        ck_assert_int_eq(sd_pool_free(x->pool, &s->buf), 0);
        s->state = S_FREED;
    } else {
        /* the lease died with the connection: the bytes stay ours, untouched */
        ck_assert_int_eq(r->err, -ECONNRESET);
        x->lost_releases++;
        s->state = S_LOST;
    }
}

static void e2e_on_error(void *ctx, const struct sd_client_error *e)
{
    struct e2e *x = ctx;
    ck_assert_msg(e->err == -ECONNRESET, "unexpected failure: %s", e->message);
    ck_assert_ptr_nonnull(strstr(e->message, g_path));
    if (!x->conn_failures++)
        snprintf(x->first_failure, sizeof(x->first_failure), "%s", e->message);
    if (e->request_type == LT_MSG_SUBMIT)
        x->s[e->tag].state = S_TODO; /* resubmitted after the reconnect */
    else
        for (unsigned i = 0; i < E2E_SHARDS; i++)
            if (x->s[i].state == S_LEASING && x->s[i].lease_rid == e->request_id)
                x->s[i].state = S_TODO;
}

static void e2e_on_ready(void *ctx, unsigned agent, uint32_t epoch)
{
    struct e2e *x = ctx;
    (void)agent;
    (void)epoch;
    x->ready = 1;
    e2e_drive(x);
}

static void e2e_on_disconnect(void *ctx, unsigned agent, int err, const char *message)
{
    struct e2e *x = ctx;
    (void)agent;
    (void)message;
    ck_assert_int_eq(err, -ECONNRESET);
    x->ready = 0;
    x->disconnects++;
}

START_TEST(test_agent_killed_and_restarted_mid_run_every_shard_once_and_correct)
{
    struct e2e *x = &g_e2e;
    memset(x, 0, sizeof(*x));
    struct sd_pool_config pc = {0};
    pc.class_bytes[LT_CLASS_PINNED] = 8 * MIB;
    pc.class_bytes[LT_CLASS_MAPPED] = 2 * MIB;
    pc.segment_bytes = 2 * MIB;
    pc.prefault_threads = 1;
    pc.pages = SD_POOL_PAGES_SMALL; /* leaves reserved huge pages to test_hugepages */
    pc.log = capture_log;
    ck_assert_int_eq(sd_pool_create(&pc, &x->pool), 0);

    /* stage the shards: random data, its checksum table, and a bad block in some */
    uint64_t rng = SEED;
    for (unsigned i = 0; i < E2E_SHARDS; i++) {
        struct e2e_shard *s = &x->s[i];
        ck_assert_int_eq(sd_pool_alloc(x->pool, LT_CLASS_PINNED, E2E_BUF, &s->buf), 0);
        uint64_t *words = s->buf.base;
        for (size_t k = 0; k < E2E_DATA / 8; k++)
            words[k] = rng_next(&rng);
        uint64_t *sums = (uint64_t *)(void *)((unsigned char *)s->buf.base + E2E_DATA);
        ck_assert_int_eq(kr_block_checksums(s->buf.base, E2E_DATA, E2E_BLOCK, sums), E2E_BLOCKS);
        if (i % 5 == 2) {
            unsigned bad = (unsigned)(rng_next(&rng) % E2E_BLOCKS);
            ((unsigned char *)s->buf.base)[bad * E2E_BLOCK + rng_next(&rng) % E2E_BLOCK] ^= 0x5a;
        }
        /* the CPU's answer */
        s->expect.blocks_checked = E2E_BLOCKS;
        s->expect.first_bad_block = LT_BLOCK_NONE;
        for (unsigned blk = 0; blk < E2E_BLOCKS; blk++) {
            uint64_t got =
                kr_block_checksum((unsigned char *)s->buf.base + blk * E2E_BLOCK, E2E_BLOCK);
            if (got == sums[blk])
                continue;
            if (!s->expect.bad_blocks++) {
                s->expect.first_bad_block = blk;
                s->expect.expected = sums[blk];
                s->expect.actual = got;
            }
        }
        s->copy = malloc(E2E_BUF);
        memcpy(s->copy, s->buf.base, E2E_BUF);
    }
    unsigned nseg = sd_pool_segment_count(x->pool);
    for (unsigned i = 0; i < nseg; i++) {
        struct sd_pool_segment seg;
        ck_assert_int_eq(sd_pool_segment_at(x->pool, i, &seg), 0);
        if (seg.mem_class == LT_CLASS_MAPPED) {
            x->mapped_seg = seg.id;
            x->mapped_base = seg.base;
        }
    }
    ck_assert_ptr_nonnull(x->mapped_base);

    pid_t first = auto_agent_start(g_path, E2E_DIE_AFTER, 4);
    struct sd_client_config cfg;
    sd_client_config_default(&cfg);
    cfg.name = "stagingd-e2e";
    cfg.backoff_min_ms = 2;
    cfg.backoff_max_ms = 50;
    cfg.seed = SEED;
    cfg.cb.on_grant = e2e_on_grant;
    cfg.cb.on_completion = e2e_on_completion;
    cfg.cb.on_release = e2e_on_release;
    cfg.cb.on_error = e2e_on_error;
    cfg.cb.on_ready = e2e_on_ready;
    cfg.cb.on_disconnect = e2e_on_disconnect;
    cfg.cb_ctx = x;
    cfg.log = capture_log;
    ck_assert_int_eq(sd_client_create(&cfg, &x->c), 0);
    ck_assert_int_eq(offer_pool(x->c, x->pool), (int)nseg);
    unsigned agent;
    ck_assert_int_eq(sd_client_agent_add(x->c, g_path, &agent), 0);

    pid_t second = -1;
    uint64_t end = now_ms() + 30000;
    for (;;) {
        unsigned settled = 0;
        for (unsigned i = 0; i < E2E_SHARDS; i++)
            settled += x->s[i].state == S_FREED || x->s[i].state == S_LOST;
        if (settled == E2E_SHARDS)
            break;
        ck_assert_msg(now_ms() < end, "run stuck: %u of %u shards settled, %u done; log:\n%s",
                      settled, E2E_SHARDS, x->done, g_log);
        struct pollfd p = {.fd = sd_client_fd(x->c), .events = POLLIN};
        poll(&p, 1, 20);
        ck_assert_int_ge(sd_client_process(x->c), 0);
        e2e_drive(x);
        if (x->disconnects == 1 && second < 0) {
            int status;
            ck_assert_int_eq(waitpid(first, &status, 0), first);
            ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
                          "the first agent was meant to be killed, status 0x%x", status);
            second = auto_agent_start(g_path, -1, 4);
        }
    }
    ck_assert_uint_eq(x->disconnects, 1);
    ck_assert_uint_ge(x->conn_failures, 1);
    /* an EOF, a reset or a failed send, depending on what the client was doing */
    ck_assert_msg(strstr(x->first_failure, "connection lost"), "failure message: %s",
                  x->first_failure);
    ck_assert_uint_eq(x->done, E2E_SHARDS);
    for (unsigned i = 0; i < E2E_SHARDS; i++) {
        ck_assert_uint_eq(x->s[i].completions, 1);
        ck_assert_int_eq(memcmp(x->s[i].buf.base, x->s[i].copy, E2E_BUF), 0);
    }
    struct sd_client_agent_info info;
    ck_assert_int_eq(sd_client_agent_info(x->c, 0, &info), 0);
    ck_assert_uint_eq(info.epoch, 2);
    ck_assert_uint_eq(info.offers_sent, 2 * nseg); /* once per connection */
    ck_assert_uint_eq(info.in_flight, 0);

    sd_client_destroy(x->c);
    kill(second, SIGKILL);
    waitpid(second, NULL, 0);
    for (unsigned i = 0; i < E2E_SHARDS; i++) {
        if (x->s[i].state == S_LOST)
            ck_assert_int_eq(sd_pool_free(x->pool, &x->s[i].buf), 0);
        free(x->s[i].copy);
    }
    sd_pool_destroy(x->pool);
}
END_TEST

static Suite *client_suite(void)
{
    Suite *s = suite_create("client");
    TCase *tc = tcase_create("client");
    tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_handshake_sends_hello_and_adopts_agent_limits);
    tcase_add_test(tc, test_version_mismatch_is_refused_with_a_message);
    tcase_add_test(tc, test_segment_offer_passes_exactly_one_fd_of_the_same_memfd);
    tcase_add_test(tc, test_lease_batch_maps_segments_and_grant_entries);
    tcase_add_test(tc, test_submit_replies_out_of_order_match_by_request_id);
    tcase_add_test(tc, test_agent_errors_surface_with_the_agents_message);
    tcase_add_test(tc, test_buffer_reusable_only_after_its_release_complete);
    tcase_add_test(tc, test_release_batch_acts_as_single_completes);
    tcase_add_test(tc, test_agent_death_fails_in_flight_then_reconnects_reoffers_and_resubmits);
    tcase_add_test(tc, test_two_agents_are_independent_connections);
    tcase_add_test(tc, test_sends_queue_in_order_while_the_socket_is_full);
    tcase_add_test(tc, test_stuck_handshake_times_out_and_retries);
    tcase_add_test(tc, test_malformed_replies_disconnect_with_an_error_never_a_crash);
    tcase_add_test(tc, test_doorbell_ring_and_done_word_cross_processes);
    tcase_add_test(tc, test_agent_killed_and_restarted_mid_run_every_shard_once_and_correct);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(client_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
