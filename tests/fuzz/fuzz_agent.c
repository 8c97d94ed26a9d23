/* Fuzz target "agent": the agent's receive path, from the bytes of a packet
 * on: ga_server__dispatch (lease-types' validator, the fd-count rule, the
 * HELLO rule, every handler) on a real server over the lease service, the
 * host backend and the host executor, with no listening loop: the harness
 * plays the loop's part (one connection per input, the jobs finished off
 * the loop drained back to it) and reads every reply.
 *
 * Input: two bytes, then records.
 *   byte 0, bit 0: send a valid HELLO first (byte 1: its caps)
 *   record: ctl u8, length u16 (little-endian), that many message bytes
 *     ctl bits 0-1: fds sent with it (0..3); bits 2-3: the first fd's kind,
 *     bits 4-5: the others' (0 a sealed 64 KiB memfd, 1 a sealed 8 KiB one,
 *     2 an unsealed 64 KiB one, 3 /dev/null); bit 6: fix the framing
 *     (magic, version, length = the record's, request id nonzero), so the
 *     fuzzer spends its time past the header; bit 7: symbolic ids: an id
 *     field (segment, lease, stream, event) with generation 0xffffffff
 *     stands for the slot-th id of its kind the agent issued in this input
 *     (SEGMENT_ACCEPT, LEASE_GRANT, CTL_REPLY), so conversations replay the
 *     same way however many inputs ran before.
 * Promises checked: every reply validates as a message from the agent; no
 * crash, leak or hang (a connection drains within 10 s of closing); once
 * the connection is gone the lease service's tables are consistent
 * (lease_service_check) and hold nothing: no client, segment or lease. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "conn.h"
#include "dispatch.h"
#include "fuzz.h"
#include "gpu/executor_host.h"
#include "jobs.h"
#include "lease/check.h"

const char fz_name[] = "agent";

#define AGENT_SEG_BYTES (64u << 10)
#define AGENT_SMALL_BYTES (8u << 10)
#define AGENT_RECORDS_MAX 32

static struct {
    int ready;
    char dir[64];
    char sock[128];
    struct lease_backend be;
    struct ga_executor *ex;
    struct ga_server *srv;
    int memfd[3];   /* sealed 64 KiB, sealed 8 KiB, unsealed 64 KiB */
    uint8_t *seg;   /* the first one, mapped: what the harness writes and rings */
    uint8_t *small; /* the second one, mapped */
    uint8_t *pattern; /* what the first one holds when an input starts */
    int trace;      /* FZ_TRACE set: each reply is printed (seeing what a seed reaches) */
} ag;

#define AGENT_IDS_MAX 64
#define AGENT_SYMBOLIC UINT32_MAX

/* Ids the agent issued during one input, in order (symbolic ids). */
static struct {
    struct lt_segment_id seg[AGENT_IDS_MAX];
    struct lt_lease_id lease[AGENT_IDS_MAX];
    struct lt_stream_id stream[AGENT_IDS_MAX];
    struct lt_event_id event[AGENT_IDS_MAX];
    unsigned nseg, nlease, nstream, nevent;
} ids;

static void agent__quiet(void *ctx, int level, const char *subsys, const char *line)
{
    (void)ctx;
    (void)level;
    (void)subsys;
    (void)line;
}

static int agent__memfd(uint64_t size, int seals)
{
    int fd = memfd_create("fuzz-agent", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, (off_t)size) < 0)
        fz_fail("setup: memfd: %s", strerror(errno));
    if (seals && fcntl(fd, F_ADD_SEALS, seals) < 0)
        fz_fail("setup: seals: %s", strerror(errno));
    return fd;
}

static void agent__cleanup(void)
{
    if (!ag.ready)
        return;
    ga_server_destroy(ag.srv);
    ga_executor_destroy(ag.ex);
    lease_backend_fini(&ag.be);
    munmap(ag.seg, AGENT_SEG_BYTES);
    munmap(ag.small, AGENT_SMALL_BYTES);
    free(ag.pattern);
    for (int i = 0; i < 3; i++)
        close(ag.memfd[i]);
    unlink(ag.sock);
    char lock[160];
    snprintf(lock, sizeof lock, "%s.lock", ag.sock);
    unlink(lock);
    rmdir(ag.dir);
    ag.ready = 0;
}

static void agent__setup(void)
{
    if (ag.ready)
        return;
    snprintf(ag.dir, sizeof ag.dir, "/tmp/fuzz-agent-XXXXXX");
    if (!mkdtemp(ag.dir))
        fz_fail("setup: mkdtemp: %s", strerror(errno));
    snprintf(ag.sock, sizeof ag.sock, "%s/agent.sock", ag.dir);
    struct lt_failure why;
    if (lease_host_backend_init(&ag.be, &why) < 0)
        fz_fail("setup: host backend: %s", why.message);
    struct ga_executor_host_opts ho = {.workers = 1, .max_streams = 8, .max_events = 8,
                                       .scratch_bytes = 1u << 16, .bell_sleep_max_us = 100,
                                       .log = {.fn = agent__quiet, .max_level = BASE_LOG_ERROR}};
    if (ga_executor_host_create(&ho, &ag.ex) < 0)
        fz_fail("setup: host executor");
    struct ga_server_config cfg = {
        .socket_path = ag.sock,
        .budget_pinned = 1u << 20,
        .budget_mapped = 1u << 20,
        .backend = &ag.be,
        .executor = ag.ex,
        .max_segments = 8,
        .max_inflight = 64,
        .log = {.fn = agent__quiet, .max_level = BASE_LOG_ERROR},
    };
    if (ga_server_create(&cfg, &ag.srv) < 0)
        fz_fail("setup: ga_server_create");
    const int good = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
    ag.memfd[0] = agent__memfd(AGENT_SEG_BYTES, good);
    ag.memfd[1] = agent__memfd(AGENT_SMALL_BYTES, good);
    ag.memfd[2] = agent__memfd(AGENT_SEG_BYTES, 0);
    ag.seg = mmap(NULL, AGENT_SEG_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, ag.memfd[0], 0);
    ag.small = mmap(NULL, AGENT_SMALL_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, ag.memfd[1], 0);
    if (ag.seg == MAP_FAILED || ag.small == MAP_FAILED)
        fz_fail("setup: mmap: %s", strerror(errno));
    ag.pattern = malloc(AGENT_SEG_BYTES);
    if (!ag.pattern)
        abort();
    for (size_t i = 0; i < AGENT_SEG_BYTES; i += 8) {
        uint64_t w = 0x9e3779b97f4a7c15ull * (i / 8 + 1);
        memcpy(ag.pattern + i, &w, 8);
    }
    ag.trace = getenv("FZ_TRACE") != NULL;
    ag.ready = 1;
    atexit(agent__cleanup);
}

/* The loop's accept, without the socket: a connection on @fd. */
static struct ga_server__conn *agent__conn_new(int fd)
{
    struct ga_server *srv = ag.srv;
    struct ga_server__conn *c = calloc(1, sizeof *c);
    if (!c)
        abort();
    c->src = GA_SRC_CONN;
    c->srv = srv;
    c->fd = fd;
    c->pid = getpid();
    c->uid = getuid();
    struct lease_client_limits lim = {.max_segments = srv->cfg.max_segments};
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
    if (lease_client_add(srv->svc, &lim, &c->client, NULL) < 0 ||
        ga_exec_client_add(srv->ex, c->client.value) < 0 ||
        epoll_ctl(srv->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
        fz_fail("setup: a connection");
    if (++srv->next_id == 0)
        srv->next_id = 1;
    c->id = srv->next_id;
    c->next = srv->conns;
    if (srv->conns)
        srv->conns->prev = c;
    srv->conns = c;
    srv->nconns++;
    srv->accepted++;
    return c;
}

/* Keeps the ids a validated reply issues, for symbolic ids. */
static void agent__note_ids(const void *m, uint16_t type)
{
    if (type == LT_MSG_SEGMENT_ACCEPT && ids.nseg < AGENT_IDS_MAX) {
        ids.seg[ids.nseg++] = ((const struct lt_msg_segment_accept *)m)->segment;
    } else if (type == LT_MSG_LEASE_GRANT) {
        const struct lt_msg_lease_grant *g = m;
        for (uint32_t i = 0; i < g->count && ids.nlease < AGENT_IDS_MAX; i++)
            if (g->entries[i].status == LT_OK)
                ids.lease[ids.nlease++] = g->entries[i].lease;
    } else if (type == LT_MSG_CTL_REPLY) {
        const struct lt_msg_ctl_reply *r = m;
        if (r->request_type == LT_MSG_STREAM_CREATE && ids.nstream < AGENT_IDS_MAX)
            ids.stream[ids.nstream++] = r->stream;
        if (r->request_type == LT_MSG_EVENT_RECORD && ids.nevent < AGENT_IDS_MAX)
            ids.event[ids.nevent++] = r->event;
    }
}

static void agent__trace(const void *m, uint16_t type)
{
    const struct lt_header *h = m;
    if (type == LT_MSG_ERROR) {
        const struct lt_msg_error *e = m;
        fprintf(stderr, "  <- ERROR rid %llu for %s: %s: %s\n", (unsigned long long)h->request_id,
                lt_msg_type_name(e->failed_type), lt_error_name(e->code), e->message);
    } else if (type == LT_MSG_COMPLETION) {
        const struct lt_msg_completion *c = m;
        fprintf(stderr, "  <- COMPLETION rid %llu op %u: %s\n", (unsigned long long)h->request_id,
                c->op, lt_error_name(c->status));
    } else {
        fprintf(stderr, "  <- %s rid %llu\n", lt_msg_type_name(type),
                (unsigned long long)h->request_id);
    }
}

/* Symbolic ids: {k, 0xffffffff} becomes the k-th issued id of its kind. */
#define AGENT_RESOLVE(field, list, count)                                                          \
    do {                                                                                           \
        if ((field).gen == AGENT_SYMBOLIC && (field).slot < (count))                              \
            (field) = (list)[(field).slot];                                                        \
    } while (0)

static void agent__resolve(void *m, size_t len)
{
    const struct lt_header *h = m;
    if (len < sizeof *h)
        return;
    switch (h->type) {
    case LT_MSG_SEGMENT_RETIRE:
        if (len >= sizeof(struct lt_msg_segment_retire))
            AGENT_RESOLVE(((struct lt_msg_segment_retire *)m)->segment, ids.seg, ids.nseg);
        break;
    case LT_MSG_LEASE_REQUEST: {
        struct lt_msg_lease_request *r = m;
        for (size_t i = 0; sizeof *r + (i + 1) * sizeof r->entries[0] <= len; i++)
            AGENT_RESOLVE(r->entries[i].segment, ids.seg, ids.nseg);
        break;
    }
    case LT_MSG_LEASE_RELEASE: {
        struct lt_msg_lease_release *r = m;
        for (size_t i = 0; sizeof *r + (i + 1) * sizeof r->leases[0] <= len; i++)
            AGENT_RESOLVE(r->leases[i], ids.lease, ids.nlease);
        break;
    }
    case LT_MSG_SUBMIT:
        if (len >= sizeof(struct lt_msg_submit)) {
            struct lt_msg_submit *s = m;
            AGENT_RESOLVE(s->lease, ids.lease, ids.nlease);
            AGENT_RESOLVE(s->stream, ids.stream, ids.nstream);
            AGENT_RESOLVE(s->bell.segment, ids.seg, ids.nseg);
            AGENT_RESOLVE(s->done.segment, ids.seg, ids.nseg);
        }
        break;
    default:
        if (lt_msg_type_is_ctl(h->type) && h->type <= LT_MSG_STREAM_DESTROY &&
            len >= sizeof(struct lt_msg_stream_cmd)) {
            AGENT_RESOLVE(((struct lt_msg_stream_cmd *)m)->stream, ids.stream, ids.nstream);
        } else if (lt_msg_type_is_ctl(h->type) && h->type <= LT_MSG_EVENT_ELAPSED &&
                   len >= sizeof(struct lt_msg_event_cmd)) {
            struct lt_msg_event_cmd *e = m;
            AGENT_RESOLVE(e->event, ids.event, ids.nevent);
            AGENT_RESOLVE(e->end, ids.event, ids.nevent);
            AGENT_RESOLVE(e->stream, ids.stream, ids.nstream);
        }
        break;
    }
}

/* Reads every reply waiting at the peer end; each must validate. */
static void agent__read_replies(int peer)
{
    union lt_msg_buffer buf;
    for (;;) {
        ssize_t n = recv(peer, buf.bytes, sizeof buf.bytes, MSG_DONTWAIT);
        if (n <= 0)
            return;
        uint16_t type = 0;
        enum lt_error e = lt_validate_from_agent(buf.bytes, (size_t)n, &type);
        if (e != LT_OK)
            fz_fail("the agent sent a %zd-byte message of type %u that fails its own "
                    "validator: %s",
                    n, ((struct lt_header *)buf.bytes)->type, lt_error_name(e));
        agent__note_ids(buf.bytes, type);
        if (ag.trace)
            agent__trace(buf.bytes, type);
    }
}

/* The loop's wake-up: answers the jobs finished so far, flushes and reads.
 * Waits up to @ms for one to finish when none has. Returns 1 when a job
 * was answered. */
static int agent__pump(int peer, int ms)
{
    struct ga_server *srv = ag.srv;
    struct pollfd p = {.fd = srv->wakefd, .events = POLLIN};
    int answered = 0;
    if (poll(&p, 1, ms) == 1) {
        uint64_t v;
        while (read(srv->wakefd, &v, sizeof v) == (ssize_t)sizeof v)
            ;
    }
    for (struct ga_server__job *j; (j = ga_server__jobs_take(srv));) {
        while (j) {
            struct ga_server__job *n = j->next;
            ga_server__complete(srv, j);
            answered = 1;
            j = n;
        }
    }
    agent__read_replies(peer);
    for (struct ga_server__conn *c = srv->conns; c; c = c->next)
        if (!c->closed && c->oq_head)
            ga_server__flush(c);
    agent__read_replies(peer);
    return answered;
}

static int agent__fd(unsigned kind)
{
    int fd = kind < 3 ? fcntl(ag.memfd[kind], F_DUPFD_CLOEXEC, 3)
                      : open("/dev/null", O_RDWR | O_CLOEXEC);
    if (fd < 0)
        fz_fail("an fd to send: %s", strerror(errno));
    return fd;
}

static uint64_t agent__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The peer goes away: everything of the connection must drain and the
 * service must be back to empty and consistent. */
static void agent__finish(struct ga_server__conn *c, int peer)
{
    struct ga_server *srv = ag.srv;
    /* Rings every bell the input may have named, then lets work finish. */
    memset(ag.seg, 0xff, AGENT_SEG_BYTES);
    memset(ag.small, 0xff, AGENT_SMALL_BYTES);
    if (!c->closed && !c->dead)
        for (int i = 0; i < 50 && c->inflight > 0 && agent__pump(peer, 2); i++)
            ;
    if (!c->closed) {
        if (!c->dead)
            ga_server__conn_kill(c, "fuzz input done");
        ga_server__sweep(srv);
    }
    close(peer);
    uint64_t end = agent__now_ms() + 10000;
    while (srv->conns) {
        if (agent__now_ms() > end)
            fz_fail("a closed connection did not drain within 10 s (%u jobs in flight)",
                    srv->conns->inflight);
        agent__pump(-1, 5);
    }
    char msg[512];
    if (lease_service_check(srv->svc, msg, sizeof msg) < 0)
        fz_fail("lease_service_check: %s", msg);
    struct lease_stats st;
    lease_service_stats(srv->svc, &st);
    uint64_t segs = 0, leases = 0;
    for (int k = LT_CLASS_STAGED; k <= LT_CLASS_MAX; k++) {
        segs += st.cls[k].segments;
        leases += st.cls[k].live_leases;
    }
    if (st.clients || segs || leases || st.pending_work || base_u64map_len(&srv->segs))
        fz_fail("after the client left: %llu clients, %llu segments, %llu leases, %llu work "
                "items, %zu server segments",
                (unsigned long long)st.clients, (unsigned long long)segs,
                (unsigned long long)leases, (unsigned long long)st.pending_work,
                base_u64map_len(&srv->segs));
}

int fz_one(const uint8_t *data, size_t size)
{
    agent__setup();
    if (size < 2)
        return 1;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
        fz_fail("socketpair: %s", strerror(errno));
    /* Each input starts from the same segment bytes and no ids. */
    memcpy(ag.seg, ag.pattern, AGENT_SEG_BYTES);
    memset(ag.small, 0, AGENT_SMALL_BYTES);
    memset(&ids, 0, sizeof ids);
    struct ga_server__conn *c = agent__conn_new(sv[0]);
    int records = 0;
    if (data[0] & 1) {
        struct lt_msg_hello h;
        lt_msg_init(&h, sizeof h, LT_MSG_HELLO, 1);
        h.version_min = h.version_max = LT_PROTO_VERSION;
        h.caps = data[1] & LT_CAP_CLIENT_KNOWN;
        lt_name_set(h.name, sizeof h.name, "fuzz");
        ga_server__dispatch(c, &h, sizeof h, NULL, 0);
        agent__pump(sv[1], 0);
    }
    for (size_t at = 2; at + 3 <= size && records < AGENT_RECORDS_MAX && !c->dead && !c->closed;
         records++) {
        uint8_t ctl = data[at];
        size_t len = (size_t)data[at + 1] | (size_t)data[at + 2] << 8;
        at += 3;
        if (len > size - at)
            len = size - at;
        if (len > LT_MSG_MAX_BYTES) /* refused by the receive loop before dispatch */
            len = LT_MSG_MAX_BYTES;
        uint8_t *msg = malloc(len ? len : 1);
        if (!msg)
            abort();
        memcpy(msg, data + at, len);
        at += len;
        struct lt_header *h = (struct lt_header *)msg;
        if ((ctl & 0x40) && len >= sizeof *h) {
            h->magic = LT_MAGIC;
            h->version = LT_PROTO_VERSION;
            h->length = (uint32_t)len;
            if (h->request_id == 0)
                h->request_id = (uint64_t)records + 2;
        }
        if (ctl & 0x80)
            agent__resolve(msg, len);
        int fds[3];
        size_t nfds = ctl & 3u;
        for (size_t i = 0; i < nfds; i++)
            fds[i] = agent__fd(i == 0 ? (ctl >> 2) & 3u : (ctl >> 4) & 3u);
        uint32_t before = c->inflight;
        int offer = len >= sizeof *h && h->type == LT_MSG_SEGMENT_OFFER;
        ga_server__dispatch(c, msg, len, fds, nfds);
        free(msg);
        /* An offer is answered by the registrar thread: wait for it, so the
         * next record sees the segment. Other work gets a short look. */
        for (int i = 0; offer && i < 1000 && !c->dead && c->inflight > before; i++)
            agent__pump(sv[1], 5);
        while (!c->dead && c->inflight > 0 && agent__pump(sv[1], 1))
            ;
        agent__pump(sv[1], 0);
    }
    agent__finish(c, sv[1]);
    return records > 0 ? 0 : 1;
}

/* ---- seeds: conversations a real client has ---- */

struct agent__seed {
    uint8_t bytes[16384];
    size_t n;
};

static void agent__rec(struct agent__seed *s, uint8_t ctl, const void *msg, size_t len)
{
    s->bytes[s->n++] = ctl | 0xc0;
    s->bytes[s->n++] = (uint8_t)len;
    s->bytes[s->n++] = (uint8_t)(len >> 8);
    memcpy(s->bytes + s->n, msg, len);
    s->n += len;
}

static void agent__offer(struct agent__seed *s, uint64_t rid, uint32_t cls, uint64_t size,
                         unsigned kind)
{
    struct lt_msg_segment_offer o;
    lt_msg_init(&o, sizeof o, LT_MSG_SEGMENT_OFFER, rid);
    o.cookie = rid;
    o.size = size;
    o.mem_class = cls;
    agent__rec(s, (uint8_t)(1u | kind << 2), &o, sizeof o);
}

static void agent__lease(struct agent__seed *s, uint64_t rid, struct lt_segment_id seg,
                         uint32_t cls, uint64_t off, uint64_t len, uint32_t flags)
{
    union lt_msg_buffer b;
    struct lt_msg_lease_request *r = (void *)b.bytes;
    size_t n = sizeof *r + sizeof r->entries[0];
    lt_msg_init(r, n, LT_MSG_LEASE_REQUEST, rid);
    r->count = 1;
    r->flags = flags;
    r->entries[0].segment = seg;
    r->entries[0].offset = off;
    r->entries[0].length = len;
    r->entries[0].mem_class = cls;
    r->entries[0].flags = LT_LEASE_F_ALLOW_STAGED;
    agent__rec(s, 0, r, n);
}

static void agent__release(struct agent__seed *s, uint64_t rid, struct lt_lease_id lease)
{
    union lt_msg_buffer b;
    struct lt_msg_lease_release *r = (void *)b.bytes;
    size_t n = sizeof *r + sizeof r->leases[0];
    lt_msg_init(r, n, LT_MSG_LEASE_RELEASE, rid);
    r->count = 1;
    r->leases[0] = lease;
    agent__rec(s, 0, r, n);
}

static int agent__emit(const char *dir, const char *name, const struct agent__seed *s)
{
    return fz_write_file(dir, name, s->bytes, s->n);
}

int fz_seeds(const char *dir)
{
    /* Symbolic ids: the first and second segment accepted, the first lease. */
    struct lt_segment_id seg0 = lt_segment_id_make(0, AGENT_SYMBOLIC),
                         seg1 = lt_segment_id_make(1, AGENT_SYMBOLIC);
    struct lt_lease_id l0 = lt_lease_id_make(0, AGENT_SYMBOLIC);
    struct agent__seed s;
    int rc, n = 0;

    /* Offer, lease, checksum, release, retire. */
    memset(&s, 0, sizeof s);
    s.bytes[s.n++] = 1;
    s.bytes[s.n++] = LT_CAP_RC_BATCH;
    agent__offer(&s, 2, LT_CLASS_PINNED, AGENT_SEG_BYTES, 0);
    agent__lease(&s, 3, seg0, LT_CLASS_PINNED, 0, 16384, 0);
    struct lt_msg_submit sub;
    lt_msg_init(&sub, sizeof sub, LT_MSG_SUBMIT, 4);
    sub.lease = l0;
    sub.op = LT_OP_CHECKSUM_VERIFY;
    sub.args.checksum.length = 8192;
    sub.args.checksum.sums_offset = 8192;
    sub.args.checksum.block_size = 4096;
    agent__rec(&s, 0, &sub, sizeof sub);
    agent__release(&s, 5, l0);
    struct lt_msg_segment_retire rt;
    lt_msg_init(&rt, sizeof rt, LT_MSG_SEGMENT_RETIRE, 6);
    rt.segment = seg0;
    agent__rec(&s, 0, &rt, sizeof rt);
    if ((rc = agent__emit(dir, "seed-checksum", &s)) < 0)
        return rc;
    n++;

    /* A MAPPED bell and done word, a scan behind the bell, a stats request. */
    memset(&s, 0, sizeof s);
    s.bytes[s.n++] = 1;
    s.bytes[s.n++] = LT_CAP_DOORBELL | LT_CAP_DONE_WORD;
    agent__offer(&s, 2, LT_CLASS_PINNED, AGENT_SEG_BYTES, 0);
    agent__offer(&s, 3, LT_CLASS_MAPPED, AGENT_SMALL_BYTES, 1);
    agent__lease(&s, 4, seg0, LT_CLASS_PINNED, 0, 32768, 0);
    lt_msg_init(&sub, sizeof sub, LT_MSG_SUBMIT, 5);
    sub.lease = l0;
    sub.op = LT_OP_VECTOR_SCAN;
    sub.flags = LT_SUBMIT_F_WAIT_BELL | LT_SUBMIT_F_SIGNAL_DONE;
    sub.bell.segment = seg1;
    sub.bell_seq = 1;
    sub.done.segment = seg1;
    sub.done.offset = 8;
    sub.done_seq = 1;
    sub.args.scan.length = 16384;
    sub.args.scan.query_offset = 16384;
    sub.args.scan.dim = 16;
    sub.args.scan.elem = 1;
    sub.args.scan.metric = 1;
    sub.args.scan.hits_offset = 20480;
    sub.args.scan.k = 4;
    agent__rec(&s, 0, &sub, sizeof sub);
    struct lt_msg_stats_request sr;
    lt_msg_init(&sr, sizeof sr, LT_MSG_STATS_REQUEST, 6);
    sr.flags = LT_STATS_F_ALL_CLIENTS;
    agent__rec(&s, 0, &sr, sizeof sr);
    agent__release(&s, 7, l0);
    if ((rc = agent__emit(dir, "seed-doorbell", &s)) < 0)
        return rc;
    n++;

    /* Streams and events; a copy on a stream. */
    memset(&s, 0, sizeof s);
    s.bytes[s.n++] = 1;
    s.bytes[s.n++] = LT_CAP_TIMING;
    struct lt_msg_stream_cmd sc;
    lt_msg_init(&sc, sizeof sc, LT_MSG_STREAM_CREATE, 2);
    agent__rec(&s, 0, &sc, sizeof sc);
    struct lt_msg_event_cmd ec;
    lt_msg_init(&ec, sizeof ec, LT_MSG_EVENT_RECORD, 3);
    ec.stream = lt_stream_id_make(0, AGENT_SYMBOLIC);
    ec.flags = LT_EVENT_F_TIMING;
    agent__rec(&s, 0, &ec, sizeof ec);
    agent__offer(&s, 4, LT_CLASS_STAGED, AGENT_SEG_BYTES, 0);
    agent__lease(&s, 5, seg0, LT_CLASS_STAGED, 4096, 4096, LT_LEASE_REQ_F_ALL_OR_NOTHING);
    lt_msg_init(&sub, sizeof sub, LT_MSG_SUBMIT, 6);
    sub.lease = l0;
    sub.stream = lt_stream_id_make(0, AGENT_SYMBOLIC);
    sub.op = LT_OP_COPY_H2D;
    sub.args.copy.length = 4096;
    agent__rec(&s, 0, &sub, sizeof sub);
    lt_msg_init(&ec, sizeof ec, LT_MSG_EVENT_SYNCHRONIZE, 7);
    ec.event = lt_event_id_make(0, AGENT_SYMBOLIC);
    agent__rec(&s, 0, &ec, sizeof ec);
    struct lt_header ds;
    lt_msg_init(&ds, sizeof ds, LT_MSG_DEVICE_SYNCHRONIZE, 8);
    agent__rec(&s, 0, &ds, sizeof ds);
    agent__release(&s, 9, l0);
    lt_msg_init(&sc, sizeof sc, LT_MSG_STREAM_DESTROY, 10);
    sc.stream = lt_stream_id_make(0, AGENT_SYMBOLIC);
    agent__rec(&s, 0, &sc, sizeof sc);
    if ((rc = agent__emit(dir, "seed-streams", &s)) < 0)
        return rc;
    n++;

    /* Refusals: no HELLO first, an unsealed memfd with three fds, /dev/null. */
    memset(&s, 0, sizeof s);
    s.bytes[s.n++] = 0;
    s.bytes[s.n++] = 0;
    agent__offer(&s, 2, LT_CLASS_PINNED, AGENT_SEG_BYTES, 0);
    struct lt_msg_hello h;
    lt_msg_init(&h, sizeof h, LT_MSG_HELLO, 3);
    h.version_min = h.version_max = 1;
    lt_name_set(h.name, sizeof h.name, "seed");
    agent__rec(&s, 0, &h, sizeof h);
    agent__offer(&s, 4, LT_CLASS_PINNED, AGENT_SEG_BYTES, 2);
    s.bytes[s.n - sizeof(struct lt_msg_segment_offer) - 3] |= 2; /* three fds */
    agent__offer(&s, 5, LT_CLASS_MAPPED, AGENT_SEG_BYTES, 3);
    if ((rc = agent__emit(dir, "seed-refusals", &s)) < 0)
        return rc;
    n++;
    return n;
}
