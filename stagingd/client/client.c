/* The lease client: life cycle, segments, agents and their connections
 * (connect, backoff, handshake deadline, teardown), the event loop and the
 * blocking waits. It drives the transport (conn.c), the requests (msg.c)
 * and the dispatch of answers (dispatch.c); none of them calls back here. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "base/rand.h"
#include "base/time.h"
#include "client_internal.h"
#include "leasec/log.h"

#define LEASEC_CLIENT_RX_BATCH 64 /* messages read from one agent per process call */

/* ---- the timer: earliest reconnect, handshake deadline or deferred teardown ---- */

static void leasec_client__timer_arm(struct leasec_client *c)
{
    uint64_t due = 0;
    for (unsigned i = 0; i < c->nagents; i++) {
        struct leasec_client__agent *a = c->agents[i];
        uint64_t t = 0;
        if (a->broken_err)
            t = 1; /* at once */
        else if (a->state == LEASEC_CLIENT_DISCONNECTED)
            t = a->next_attempt_ns;
        else if (a->state != LEASEC_CLIENT_READY)
            t = a->deadline_ns;
        if (t && (!due || t < due))
            due = t;
    }
    struct itimerspec its = {0};
    if (due) {
        its.it_value.tv_sec = (time_t)(due / 1000000000ull);
        its.it_value.tv_nsec = (long)(due % 1000000000ull);
    }
    if (timerfd_settime(c->tfd, TFD_TIMER_ABSTIME, &its, NULL) < 0)
        leasec_client__log(c, "timerfd_settime failed: %s; reconnects wait for the next message",
                           strerror(errno));
}

/* ---- connections ---- */

/* delay_k = min(max, min * 2^(k-1)) for the k-th failure in a row, then a
 * uniform pick in [max(min, delay_k / 2), delay_k], so agents restarted
 * together are not hit by every client in the same millisecond. */
static uint32_t leasec_client__backoff(struct leasec_client *c, unsigned streak)
{
    uint64_t d = c->backoff_min_ms;
    for (unsigned k = 1; k < streak && d < c->backoff_max_ms; k++)
        d *= 2;
    if (d > c->backoff_max_ms)
        d = c->backoff_max_ms;
    uint64_t lo = d / 2 > c->backoff_min_ms ? d / 2 : c->backoff_min_ms;
    return (uint32_t)(lo + base_splitmix64(&c->rng) % (d - lo + 1));
}

static void leasec_client__schedule(struct leasec_client *c, struct leasec_client__agent *a)
{
    a->fail_streak++;
    a->next_delay_ms = leasec_client__backoff(c, a->fail_streak);
    a->next_attempt_ns = base_now_ns() + (uint64_t)a->next_delay_ms * 1000000ull;
}

static void leasec_client__attempt(struct leasec_client *c, struct leasec_client__agent *a)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    int fd = -1;
    int err;

    a->attempts++;
    memcpy(addr.sun_path, a->path, strlen(a->path));
    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        err = -errno;
        goto fail;
    }
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        err = -errno;
        goto fail_close;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = a->index + 1u};
    if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        err = -errno;
        goto fail_close;
    }
    a->fd = fd;
    a->epoll_out = 0;
    a->epoch++;
    a->state = LEASEC_CLIENT_HANDSHAKE;
    a->deadline_ns = base_now_ns() + (uint64_t)c->handshake_timeout_ms * 1000000ull;
    a->accepted = 0;
    a->offers_out = 0;
    leasec_client__words_drop(a);
    memset(&a->hello, 0, sizeof(a->hello));
    for (unsigned s = 0; s < c->nsegs; s++)
        a->segs[s].state = LEASEC_CLIENT__SEG_NONE;
    leasec_client__log(c, "agent %s: connected (connection %u, attempt %llu)", a->path, a->epoch,
                       (unsigned long long)a->attempts);
    err = leasec_client__hello_send(c, a);
    if (err < 0 && !a->broken_err)
        leasec_client__break(c, a, err, "sending HELLO failed: %s", strerror(-err));
    return;

fail_close:
    close(fd);
fail:
    a->last_err = err;
    leasec_client__schedule(c, a);
    if (a->fail_streak == 1)
        leasec_client__log(c, "agent %s: connect failed: %s; retrying with backoff (%u .. %u ms)",
                           a->path, strerror(-err), c->backoff_min_ms, c->backoff_max_ms);
}

/* Closes the connection and fails what it carried. Runs only where no
 * caller is iterating the agent's state: the event loop's safe points. */
static void leasec_client__teardown(struct leasec_client *c, struct leasec_client__agent *a)
{
    int err = a->broken_err ? a->broken_err : -ECONNRESET;
    char msg[LEASEC_CLIENT_MSG_LEN];
    snprintf(msg, sizeof(msg), "%s", a->broken_err ? a->broken_msg : "connection closed");

    if (a->fd >= 0) {
        epoll_ctl(c->epfd, EPOLL_CTL_DEL, a->fd, NULL);
        close(a->fd);
    }
    a->fd = -1;
    a->epoll_out = 0;
    leasec_client__out_free(a);
    a->state = LEASEC_CLIENT_DISCONNECTED;
    a->broken_err = 0;
    a->last_err = err;
    a->accepted = 0;
    a->offers_out = 0;
    memset(&a->hello, 0, sizeof(a->hello));
    for (unsigned s = 0; s < c->nsegs; s++)
        a->segs[s].state = LEASEC_CLIENT__SEG_NONE;
    leasec_client__schedule(c, a);
    leasec_client__log(
        c, "%s; %u request(s) in flight fail, %u lease(s) forgotten; reconnecting in %u ms", msg,
        a->in_flight, (unsigned)base_u64map_len(&a->leases), a->next_delay_ms);
    if (c->ready_watch == a && !c->ready_fail) {
        c->ready_fail = err;
        snprintf(c->err, sizeof(c->err), "%s", msg);
    }
    LEASEC_CLIENT__CALL(c, on_disconnect, a->index, err, msg);
    leasec_client__fail_all(c, a, err, msg);
}

/* Reads what the agent sent, up to a batch, dispatching each message. */
static int leasec_client__read(struct leasec_client *c, struct leasec_client__agent *a)
{
    int handled = 0;
    while (handled < LEASEC_CLIENT_RX_BATCH && a->fd >= 0 && !a->broken_err) {
        int n = leasec_client__recv(c, a);
        if (n <= 0)
            break;
        leasec_client__dispatch(c, a, (size_t)n);
        handled++;
    }
    return handled;
}

/* ---- life cycle ---- */

void leasec_client_config_default(struct leasec_client_config *config_p)
{
    memset(config_p, 0, sizeof(*config_p));
    config_p->name = "lease-client";
    config_p->caps = LT_CAP_DOORBELL | LT_CAP_DONE_WORD | LT_CAP_RC_BATCH;
    config_p->backoff_min_ms = 10;
    config_p->backoff_max_ms = 2000;
    config_p->handshake_timeout_ms = 5000;
}

int leasec_client_create(const struct leasec_client_config *config, struct leasec_client **client_p)
{
    struct leasec_client *c = calloc(1, sizeof(*c));
    int rc;
    if (!c)
        return -ENOMEM;
    c->epfd = -1;
    c->tfd = -1;
    c->cb = config->cb;
    c->cb_ctx = config->cb_ctx;
    c->log = leasec__log_sink(&config->log);
    c->caps = config->caps;
    c->words_bytes = (c->caps & LT_CAP_WORDS) ? (config->words_bytes ? config->words_bytes : 65536u)
                                              : 0;
    c->rx_fd = -1;
    c->backoff_min_ms = config->backoff_min_ms;
    c->backoff_max_ms = config->backoff_max_ms;
    c->handshake_timeout_ms = config->handshake_timeout_ms;

    const char *name = config->name ? config->name : "";
    if (lt_name_set(c->name, sizeof(c->name), name) != strlen(name) ||
        lt_name_check(c->name, sizeof(c->name)) != LT_OK) {
        leasec_client__log(c, "client name \"%s\": expected 1..%d printable ASCII bytes", name,
                           LT_NAME_LEN - 1);
        rc = -EINVAL;
        goto fail_free;
    }
    if (c->caps & ~LT_CAP_CLIENT_KNOWN) {
        leasec_client__log(c, "caps 0x%x: expected only bits of 0x%x", c->caps,
                           LT_CAP_CLIENT_KNOWN);
        rc = -EINVAL;
        goto fail_free;
    }
    if (c->words_bytes % 4096u != 0 || c->words_bytes > LT_WORDS_MAX_BYTES) {
        leasec_client__log(c, "words area of %u bytes: expected a multiple of 4096 up to %u",
                           c->words_bytes, LT_WORDS_MAX_BYTES);
        rc = -EINVAL;
        goto fail_free;
    }
    if (c->backoff_min_ms == 0 || c->backoff_max_ms < c->backoff_min_ms ||
        c->handshake_timeout_ms == 0) {
        leasec_client__log(c,
                           "backoff %u .. %u ms, handshake timeout %u ms: expected 0 < min <= max "
                           "and a nonzero timeout",
                           c->backoff_min_ms, c->backoff_max_ms, c->handshake_timeout_ms);
        rc = -EINVAL;
        goto fail_free;
    }
    c->rng = config->seed ? config->seed : base_now_ns() ^ ((uint64_t)getpid() << 32);

    c->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (c->epfd < 0) {
        rc = -errno;
        goto fail_free;
    }
    c->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    if (c->tfd < 0) {
        rc = -errno;
        goto fail_epoll;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0};
    if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->tfd, &ev) < 0) {
        rc = -errno;
        goto fail_timer;
    }
    *client_p = c;
    return 0;

fail_timer:
    close(c->tfd);
fail_epoll:
    close(c->epfd);
fail_free:
    free(c);
    return rc;
}

static void leasec_client__agent_free(struct leasec_client__agent *a)
{
    if (a->fd >= 0)
        close(a->fd);
    leasec_client__words_drop(a);
    struct leasec_client__pending *p = a->head;
    while (p) {
        struct leasec_client__pending *next = p->next;
        leasec_client__pending_free(p);
        p = next;
    }
    base_u64map_fini(&a->pending);
    leasec_client__leases_free(&a->leases);
    leasec_client__rings_free(&a->rings);
    leasec_client__out_free(a);
    free(a->segs);
    free(a);
}

void leasec_client_destroy(struct leasec_client *c)
{
    if (!c)
        return;
    for (unsigned i = 0; i < c->nagents; i++)
        leasec_client__agent_free(c->agents[i]);
    free(c->agents);
    for (unsigned s = 0; s < c->nsegs; s++)
        close(c->segs[s].fd);
    free(c->segs);
    close(c->tfd);
    close(c->epfd);
    free(c);
}

/* ---- segments ---- */

int leasec_client_segment_add(struct leasec_client *c, uint32_t key, int fd, void *base,
                              uint64_t size, uint32_t mem_class)
{
    enum lt_error e = lt_segment_size_check(size);
    if (e != LT_OK)
        return leasec_client__fail(c, -EINVAL,
                                   "segment %u: size %llu: expected a nonzero multiple of %u up to "
                                   "%llu (%s)",
                                   key, (unsigned long long)size, LT_SEGMENT_ALIGN,
                                   (unsigned long long)LT_SEGMENT_SIZE_MAX, lt_error_describe(e));
    if (!lt_class_is_valid(mem_class))
        return leasec_client__fail(c, -EINVAL,
                                   "segment %u: class %u: expected 1 (STAGED), 2 "
                                   "(PINNED) or 3 (MAPPED)",
                                   key, mem_class);
    if (!base || fd < 0)
        return leasec_client__fail(c, -EINVAL,
                                   "segment %u: expected a mapping and an fd, found "
                                   "base %p fd %d",
                                   key, base, fd);
    if (key == LEASEC_WORDS_KEY)
        return leasec_client__fail(c, -EINVAL,
                                   "segment key %u is LEASEC_WORDS_KEY, the agents' words areas",
                                   key);
    for (unsigned s = 0; s < c->nsegs; s++)
        if (c->segs[s].key == key)
            return leasec_client__fail(c, -EEXIST, "segment %u: key already added", key);

    if (c->nsegs == c->segs_cap) {
        unsigned cap = c->segs_cap ? c->segs_cap * 2 : 8;
        struct leasec_client__segment *segs = realloc(c->segs, cap * sizeof(*segs));
        if (!segs)
            return -ENOMEM;
        c->segs = segs;
        for (unsigned i = 0; i < c->nagents; i++) {
            struct leasec_client__agent *a = c->agents[i];
            struct leasec_client__agent_seg *as = realloc(a->segs, cap * sizeof(*as));
            if (!as)
                return -ENOMEM; /* arrays already grown stay valid: only capacity changed */
            memset(as + c->segs_cap, 0, (cap - c->segs_cap) * sizeof(*as));
            a->segs = as;
        }
        c->segs_cap = cap;
    }
    int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (dfd < 0)
        return leasec_client__fail(c, -errno, "segment %u: dup of fd %d failed: %s", key, fd,
                                   strerror(errno));
    unsigned s = c->nsegs++;
    c->segs[s] = (struct leasec_client__segment){
        .key = key, .mem_class = mem_class, .fd = dfd, .base = base, .size = size};
    for (unsigned i = 0; i < c->nagents; i++) {
        struct leasec_client__agent *a = c->agents[i];
        a->segs[s].state = LEASEC_CLIENT__SEG_NONE;
        if (a->state == LEASEC_CLIENT_OFFERING || a->state == LEASEC_CLIENT_READY)
            leasec_client__offer_send(c, a, s); /* a failure breaks the connection; it re-offers */
    }
    return 0;
}

int leasec_client_words(const struct leasec_client *c, unsigned agent,
                        const unsigned char **base_p, uint64_t *size_p)
{
    const struct leasec_client__agent *a = leasec_client__agent_get(c, agent);
    if (!a || !a->words_base)
        return -ENOENT;
    *base_p = a->words_base;
    *size_p = a->words_size;
    return 0;
}

int leasec_client_word_ptr(const struct leasec_client *c, uint32_t key, uint64_t offset,
                           uint64_t **word_p)
{
    for (unsigned s = 0; s < c->nsegs; s++) {
        if (c->segs[s].key != key)
            continue;
        if (offset % 8 != 0 || offset > c->segs[s].size - 8)
            return -EINVAL;
        *word_p = (uint64_t *)(void *)(c->segs[s].base + offset);
        return 0;
    }
    return -ENOENT;
}

/* ---- agents ---- */

int leasec_client_agent_add(struct leasec_client *c, const char *path, unsigned *agent_p)
{
    struct leasec_client__agent *a;
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof(a->path))
        return leasec_client__fail(c, -ENAMETOOLONG,
                                   "agent socket path \"%s\": expected 1..%zu "
                                   "bytes",
                                   path, sizeof(a->path) - 1);
    a = calloc(1, sizeof(*a));
    if (!a)
        return -ENOMEM;
    struct leasec_client__agent **agents = realloc(c->agents, (c->nagents + 1) * sizeof(*agents));
    if (!agents) {
        free(a);
        return -ENOMEM;
    }
    c->agents = agents;
    if (c->segs_cap) {
        a->segs = calloc(c->segs_cap, sizeof(*a->segs));
        if (!a->segs) {
            free(a);
            return -ENOMEM;
        }
    }
    memcpy(a->path, path, len + 1);
    a->index = c->nagents;
    a->fd = -1;
    a->next_rid = 1;
    c->agents[c->nagents++] = a;
    leasec_client__attempt(c, a);
    leasec_client__timer_arm(c);
    *agent_p = a->index;
    return 0;
}

int leasec_client_agent_info(const struct leasec_client *c, unsigned agent,
                             struct leasec_client_agent_info *info_p)
{
    const struct leasec_client__agent *a = leasec_client__agent_get(c, agent);
    if (!a)
        return -ENOENT;
    memset(info_p, 0, sizeof(*info_p));
    info_p->state = a->state;
    info_p->epoch = a->epoch;
    info_p->attempts = a->attempts;
    info_p->offers_sent = a->offers_sent;
    info_p->segments_accepted = a->accepted;
    info_p->in_flight = a->in_flight;
    info_p->leases = (unsigned)base_u64map_len(&a->leases);
    info_p->next_delay_ms = a->next_delay_ms;
    info_p->last_err = a->last_err;
    leasec_client__hello_public(&a->hello, &info_p->hello);
    return 0;
}

const char *leasec_client_last_error(const struct leasec_client *c)
{
    return c->err;
}

const struct lt_failure *leasec_client_last_refusal(const struct leasec_client *c)
{
    return c->have_refusal ? &c->refusal : NULL;
}

int leasec_client_reconnect(struct leasec_client *c, unsigned agent)
{
    struct leasec_client__agent *a = leasec_client__agent_get(c, agent);
    if (!a)
        return -ENOENT;
    if (a->state != LEASEC_CLIENT_DISCONNECTED || a->fd >= 0)
        return -EISCONN;
    a->next_attempt_ns = base_now_ns();
    leasec_client__timer_arm(c); /* due now: the client fd polls readable */
    return 0;
}

/* ---- driving ---- */

int leasec_client_fd(const struct leasec_client *c)
{
    return c->epfd;
}

int leasec_client_process(struct leasec_client *c)
{
    struct epoll_event evs[16];
    int handled = 0;
    uint64_t expirations;

    if (c->in_callback)
        return -EDEADLK;
    if (read(c->tfd, &expirations, sizeof(expirations)) < 0 && errno != EAGAIN)
        leasec_client__log(c, "timerfd read failed: %s", strerror(errno));
    int n = epoll_wait(c->epfd, evs, 16, 0);
    if (n < 0 && errno != EINTR)
        return -errno;
    for (int i = 0; i < n; i++) {
        if (evs[i].data.u64 == 0)
            continue; /* the timer: deadlines are checked below */
        struct leasec_client__agent *a =
            leasec_client__agent_get(c, (unsigned)(evs[i].data.u64 - 1));
        if (!a || a->fd < 0)
            continue;
        if (evs[i].events & EPOLLOUT)
            leasec_client__flush(c, a);
        if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
            handled += leasec_client__read(c, a);
        if (a->broken_err)
            leasec_client__teardown(c, a);
    }
    uint64_t now = base_now_ns();
    for (unsigned i = 0; i < c->nagents; i++) {
        struct leasec_client__agent *a = c->agents[i];
        if (a->broken_err) {
            leasec_client__teardown(c, a);
        } else if (a->state == LEASEC_CLIENT_DISCONNECTED) {
            if (now >= a->next_attempt_ns)
                leasec_client__attempt(c, a);
        } else if (a->state != LEASEC_CLIENT_READY && now >= a->deadline_ns) {
            leasec_client__break(c, a, -ETIMEDOUT, "handshake not finished within %u ms (%s)",
                                 c->handshake_timeout_ms,
                                 a->state == LEASEC_CLIENT_HANDSHAKE ? "no HELLO_REPLY"
                                                                     : "segment offers unanswered");
            leasec_client__teardown(c, a);
        }
        /* a connect can fail at once (no listener): its error is the wait's business */
    }
    leasec_client__timer_arm(c);
    return handled;
}

/* Waits for the client fd up to @deadline_ns (0: forever), then processes.
 * Returns -ETIMEDOUT once the deadline has passed. */
static int leasec_client__step(struct leasec_client *c, uint64_t deadline_ns)
{
    int wait_ms = -1;
    if (deadline_ns) {
        uint64_t now = base_now_ns();
        if (now >= deadline_ns)
            return -ETIMEDOUT;
        wait_ms = (int)((deadline_ns - now + 999999) / 1000000);
    }
    struct pollfd pfd = {.fd = c->epfd, .events = POLLIN};
    if (poll(&pfd, 1, wait_ms) < 0 && errno != EINTR)
        return -errno;
    int rc = leasec_client_process(c);
    return rc < 0 ? rc : 0;
}

static uint64_t leasec_client__deadline(int timeout_ms)
{
    return timeout_ms < 0 ? 0 : base_now_ns() + (uint64_t)timeout_ms * 1000000ull + 1;
}

int leasec_client_wait(struct leasec_client *c, unsigned agent, uint64_t request_id, int timeout_ms)
{
    struct leasec_client__agent *a = leasec_client__agent_get(c, agent);
    if (c->in_callback)
        return -EDEADLK;
    if (!a || request_id == 0 || request_id >= a->next_rid)
        return -ENOENT;
    uint64_t deadline = leasec_client__deadline(timeout_ms);
    while (base_u64map_get(&a->pending, request_id)) {
        int rc = leasec_client__step(c, deadline);
        if (rc < 0)
            return rc == -ETIMEDOUT
                       ? leasec_client__fail(c, rc,
                                             "request #%llu on agent %s not "
                                             "answered within %d ms",
                                             (unsigned long long)request_id, a->path, timeout_ms)
                       : rc;
    }
    return 0;
}

int leasec_client_wait_ready(struct leasec_client *c, unsigned agent, int timeout_ms)
{
    struct leasec_client__agent *a = leasec_client__agent_get(c, agent);
    int rc = 0;
    if (c->in_callback)
        return -EDEADLK;
    if (!a)
        return -ENOENT;
    uint64_t deadline = leasec_client__deadline(timeout_ms);
    c->ready_watch = a;
    c->ready_fail = 0;
    while (a->state != LEASEC_CLIENT_READY) {
        if (c->ready_fail) {
            rc = c->ready_fail; /* c->err holds the message */
            break;
        }
        rc = leasec_client__step(c, deadline);
        if (rc == -ETIMEDOUT) {
            leasec_client__fail(c, rc, "agent %s not ready within %d ms (last error: %s)", a->path,
                                timeout_ms, a->last_err ? strerror(-a->last_err) : "none");
            break;
        }
        if (rc < 0)
            break;
    }
    c->ready_watch = NULL;
    return a->state == LEASEC_CLIENT_READY ? 0 : rc;
}

int leasec_client__msg_call(struct leasec_client *c, unsigned agent, const void *msg, size_t len,
                            int timeout_ms, union lt_msg_buffer *reply_p)
{
    struct leasec_client__sync sync = {.reply = reply_p, .refusal = &c->refusal};
    uint64_t rid;
    if (c->in_callback)
        return -EDEADLK;
    c->have_refusal = 0;
    int rc = leasec_client__msg_send(c, agent, msg, len, 0, &rid);
    if (rc < 0)
        return rc;
    struct leasec_client__agent *a = leasec_client__agent_get(c, agent);
    struct leasec_client__pending *p = base_u64map_get(&a->pending, rid);
    p->sync = &sync;
    uint64_t deadline = leasec_client__deadline(timeout_ms);
    while (!sync.done) {
        rc = leasec_client__step(c, deadline);
        if (rc < 0) {
            p = base_u64map_get(&a->pending, rid);
            if (p)
                p->sync = NULL; /* a late answer goes to the callbacks */
            if (rc == -ETIMEDOUT)
                leasec_client__fail(c, rc, "%s #%llu to agent %s not answered within %d ms",
                                    lt_msg_type_name(((const struct lt_header *)msg)->type),
                                    (unsigned long long)rid, a->path, timeout_ms);
            return rc;
        }
    }
    c->have_refusal = sync.refused;
    return sync.err;
}

/* ---- doorbells ---- */

void leasec_client_ring(uint64_t *bell, uint64_t seq)
{
    __atomic_store_n(bell, seq, __ATOMIC_RELEASE);
}

uint64_t leasec_client_done_word_read(const uint64_t *done)
{
    return __atomic_load_n(done, __ATOMIC_ACQUIRE);
}
