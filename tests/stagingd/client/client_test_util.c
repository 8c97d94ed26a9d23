/* Helpers shared by the lease client's suite: see client_test_util.h. */
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

#include "client_test_util.h"

uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

char g_dir[64];
char g_path[128];

void tmp_setup(void)
{
    snprintf(g_dir, sizeof(g_dir), "/tmp/sdcl-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(g_dir));
    snprintf(g_path, sizeof(g_path), "%s/agent.sock", g_dir);
}

void tmp_teardown(void)
{
    unlink(g_path);
    rmdir(g_dir);
}

/* A shared memfd segment of @size bytes mapped here. */
void *memfd_seg(uint64_t size, int *fd_p)
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
int offer_pool(struct leasec_client *c, const struct leasec_pool *pool)
{
    unsigned n = leasec_pool_segment_count(pool);
    for (unsigned i = 0; i < n; i++) {
        struct leasec_pool_segment seg;
        int rc = leasec_pool_segment_at(pool, i, &seg);
        if (rc == 0)
            rc = leasec_client_segment_add(c, seg.id, seg.fd, seg.base, seg.size,
                                           (uint32_t)seg.mem_class);
        if (rc < 0)
            return rc;
    }
    return (int)n;
}

/* ---- recording callbacks ---- */

struct ev evs[512];
unsigned nev;
struct leasec_client *g_client;
char g_log[8192];

static struct ev *ev_new(int kind)
{
    ck_assert_uint_lt(nev, 512);
    struct ev *e = &evs[nev++];
    memset(e, 0, sizeof(*e));
    e->kind = kind;
    return e;
}

static void on_grant(void *ctx, const struct leasec_client_grant *g)
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

static void on_completion(void *ctx, const struct leasec_client_completion *c)
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

static void on_release(void *ctx, const struct leasec_client_release *r)
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

static void on_error(void *ctx, const struct leasec_client_error *x)
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
    if (x->refusal) {
        e->refused = 1;
        e->refusal = *x->refusal;
    }
}

static void on_reply(void *ctx, const struct leasec_client_reply *r)
{
    (void)ctx;
    struct ev *e = ev_new(EV_REPLY);
    e->agent = r->agent;
    e->rid = r->request_id;
    e->tag = r->tag;
    e->type = r->request_type;
    e->stream = r->stream;
    e->event = r->event;
    e->ready = r->ready;
    e->elapsed_ms = r->elapsed_ms;
    if (r->stats) {
        e->has_stats = 1;
        e->stats_clients = r->stats->client_count;
        e->stats_have_self = (uint32_t)r->stats->have_self;
        e->stats_self_id = r->stats->self.client_id;
        e->stats_uptime_ns = r->stats->uptime_ns;
        e->stats_self_submits = r->stats->self.submits;
    }
}

static void on_ready(void *ctx, unsigned agent, uint32_t epoch)
{
    (void)ctx;
    struct ev *e = ev_new(EV_READY);
    e->agent = agent;
    e->epoch = epoch;
    /* the driving functions refuse to nest inside a callback */
    e->nested_rc = leasec_client_process(g_client);
}

static void on_disconnect(void *ctx, unsigned agent, int err, const char *message)
{
    (void)ctx;
    struct ev *e = ev_new(EV_DISCONNECT);
    e->agent = agent;
    e->err = err;
    snprintf(e->msg, sizeof(e->msg), "%s", message);
}

static void on_launch(void *ctx, const struct leasec_client_launch_done *d)
{
    (void)ctx;
    struct ev *e = ev_new(EV_LAUNCH);
    e->agent = d->agent;
    e->rid = d->request_id;
    e->tag = d->tag;
    e->status = d->result->status;
    e->err = d->result->err;
    e->index = d->result->arg_index;
    e->launch = *d->result;
}

void capture_log(void *ctx, int level, const char *subsys, const char *line)
{
    (void)level, (void)subsys;
    (void)ctx;
    size_t used = strlen(g_log);
    if (used + strlen(line) + 2 >= sizeof(g_log))
        used = 0; /* keep the latest lines */
    snprintf(g_log + used, sizeof(g_log) - used, "%s\n", line);
}

uint32_t g_handshake_ms; /* 0: the default */
uint32_t g_extra_caps;   /* asked for besides the default caps */

struct leasec_client *client_new(uint32_t backoff_min, uint32_t backoff_max)
{
    struct leasec_client_config cfg;
    leasec_client_config_default(&cfg);
    if (g_handshake_ms)
        cfg.handshake_timeout_ms = g_handshake_ms;
    cfg.name = "test-client";
    cfg.backoff_min_ms = backoff_min;
    cfg.backoff_max_ms = backoff_max;
    cfg.seed = SEED;
    cfg.caps |= g_extra_caps;
    cfg.cb = (struct leasec_client_callbacks){on_grant, on_completion, on_release, on_error,
                                              on_reply, on_ready,      on_disconnect, on_launch};
    cfg.log = (struct leasec_log){capture_log, NULL, LEASEC_LOG_DEBUG};
    nev = 0;
    g_log[0] = '\0';
    struct leasec_client *c = NULL;
    ck_assert_int_eq(leasec_client_create(&cfg, &c), 0);
    g_client = c;
    return c;
}

void pump_for(struct leasec_client *c, int ms)
{
    uint64_t end = now_ms() + (uint64_t)ms;
    while (now_ms() < end) {
        struct pollfd p = {.fd = leasec_client_fd(c), .events = POLLIN};
        poll(&p, 1, 2);
        ck_assert_int_ge(leasec_client_process(c), 0);
    }
}

void pump_until(struct leasec_client *c, unsigned want)
{
    uint64_t end = now_ms() + WAIT_MS;
    while (nev < want) {
        ck_assert_msg(now_ms() < end, "waited for %u callbacks, saw %u; log:\n%s", want, nev,
                      g_log);
        struct pollfd p = {.fd = leasec_client_fd(c), .events = POLLIN};
        poll(&p, 1, 10);
        ck_assert_int_ge(leasec_client_process(c), 0);
    }
}

int ev_find(int kind, uint64_t rid)
{
    for (unsigned i = 0; i < nev; i++)
        if (evs[i].kind == kind && (rid == 0 || evs[i].rid == rid))
            return (int)i;
    return -1;
}

unsigned ev_count(int kind)
{
    unsigned n = 0;
    for (unsigned i = 0; i < nev; i++)
        n += evs[i].kind == kind;
    return n;
}

/* Receives the next client message on the fake side, processing the
 * client meanwhile (it sends offers only while processing a reply). */
ssize_t recv_pumped(struct fake *f, struct leasec_client *c, union lt_msg_buffer *b, int *fds,
                    unsigned *nfds)
{
    uint64_t end = now_ms() + WAIT_MS;
    while (now_ms() < end) {
        ssize_t n = fake_recv(f, b, 2, fds, nfds);
        if (n >= 0)
            return n;
        ck_assert_int_ge(leasec_client_process(c), 0);
    }
    ck_abort_msg("fake agent: nothing from the client within %d ms; log:\n%s", WAIT_MS, g_log);
    return -1;
}

/* Receives one message and checks it is a valid @type from a client. */
size_t recv_type(struct fake *f, struct leasec_client *c, union lt_msg_buffer *b, uint16_t type)
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
void accept_pumped(struct fake *f, struct leasec_client *c)
{
    uint64_t end = now_ms() + WAIT_MS;
    while (now_ms() < end) {
        struct pollfd p = {.fd = f->lfd, .events = POLLIN};
        if (poll(&p, 1, 2) == 1) {
            fake_accept(f);
            return;
        }
        ck_assert_int_ge(leasec_client_process(c), 0);
    }
    ck_abort_msg("fake agent: the client did not connect within %d ms; log:\n%s", WAIT_MS, g_log);
}

/* The agent's id for the k-th accepted segment of a handshake: distinct
 * from the client's keys, so a mapping mix-up shows. */
struct lt_segment_id agent_seg_id(unsigned k)
{
    return lt_segment_id_make(100 + k, 3 + k);
}

/* Accepts a connection, answers HELLO and every offer (with agent_seg_id),
 * and pumps the client until ready. Returns the number of offers seen;
 * their cookies go to @cookies_p (room for 8) when not NULL. */
unsigned handshake(struct fake *f, struct leasec_client *c, uint32_t caps, uint32_t batch,
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
void lease_all(struct fake *f, struct leasec_client *c, const struct leasec_client_lease_req *reqs,
               unsigned n, uint32_t first_slot, struct leasec_client_lease *leases_p)
{
    union lt_msg_buffer b;
    uint64_t rid;
    ck_assert_int_eq(leasec_client_lease_request(c, 0, reqs, n, 0, 0, &rid), 0);
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

struct leasec_client_work checksum_work(uint64_t offset, uint64_t length, uint64_t sums)
{
    struct leasec_client_work w;
    memset(&w, 0, sizeof(w));
    w.op = LT_OP_CHECKSUM_VERIFY;
    w.args.checksum.offset = offset;
    w.args.checksum.length = length;
    w.args.checksum.sums_offset = sums;
    w.args.checksum.block_size = 4096;
    return w;
}

void completion_send(struct fake *f, uint64_t rid, struct lt_lease_id lease, uint64_t blocks)
{
    struct lt_msg_completion m;
    lt_msg_init(&m, sizeof(m), LT_MSG_COMPLETION, rid);
    m.lease = lease;
    m.op = LT_OP_CHECKSUM_VERIFY;
    m.result.checksum.blocks_checked = blocks;
    m.result.checksum.first_bad_block = LT_BLOCK_NONE;
    fake_send(f, &m, sizeof(m), -1);
}

void release_complete_send(struct fake *f, uint64_t rid, struct lt_lease_id lease, uint32_t status)
{
    struct lt_msg_release_complete m;
    lt_msg_init(&m, sizeof(m), LT_MSG_RELEASE_COMPLETE, rid);
    m.lease = lease;
    m.status = status;
    fake_send(f, &m, sizeof(m), -1);
}

/* A RELEASE_COMPLETE_BATCH answering release @rid: @n leases, @st their statuses. */
void release_batch_send(struct fake *f, uint64_t rid, const struct lt_lease_id *leases,
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
