/* The server's life and its event loop: create, run, stop, destroy; accept,
 * receive, the bounded send queues, the completion queue from executor and
 * registrar threads, signals, and closing clients on peer death. */
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "lease_types/socket.h"

#define GA_DEFAULT_MAX_CLIENTS 64u
#define GA_DEFAULT_MAX_SEGMENTS 1024u
#define GA_DEFAULT_MAX_INFLIGHT 4096u
#define GA_DEFAULT_MAX_QUEUED (1ull << 20)
#define GA_RECV_BURST 64 /* messages read from one client before serving others */
#define GA_MAX_FDS 8     /* room for fds in one message's control data */
#define GA_EPOLL_BATCH 64
#define GA_SEND_BATCH 64 /* replies per sendmmsg */

/* ---- logging ------------------------------------------------------------ */

static void ga_server__log_stderr(void *arg, int level, const char *line)
{
    (void)arg;
    static const char *const names[] = {"error", "warning", "info"};
    fprintf(stderr, "lease-agent: %s: %s\n",
            level >= 0 && level <= GA_SERVER_LOG_INFO ? names[level] : "log", line);
}

void ga_server__log(const struct ga_server *srv, int level, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    srv->cfg.log(srv->cfg.log_arg, level, line);
}

/* The lease service's lines: may run under its lock, so only format here. */
static void ga_server__lease_log(void *arg, const char *line)
{
    ga_server__log(arg, GA_SERVER_LOG_INFO, "lease: %s", line);
}

uint64_t ga_server__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

const char *ga_server_socket_path(const struct ga_server *srv)
{
    return srv->path;
}

/* ---- sending ------------------------------------------------------------ */

static void ga_server__epoll_out(struct ga_server__conn *c, bool on)
{
    if (c->polling_out == on)
        return;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | (on ? EPOLLOUT : 0u), .data.ptr = c};
    if (epoll_ctl(c->srv->epfd, EPOLL_CTL_MOD, c->fd, &ev) == 0)
        c->polling_out = on;
    else
        ga_server__conn_kill(c, "epoll_ctl failed");
}

void ga_server__conn_kill(struct ga_server__conn *c, const char *why)
{
    if (c->dead || c->closed)
        return;
    c->dead = true;
    c->srv->dead_pending = true;
    ga_server__log(c->srv, GA_SERVER_LOG_INFO, "client %" PRIu32 " (pid %ld): disconnecting: %s",
                   c->id, (long)c->pid, why);
}

void ga_server__send(struct ga_server__conn *c, const void *msg, uint32_t len)
{
    if (c->dead || c->closed)
        return;
    if (!c->oq_head && !c->corked) {
        ssize_t n = send(c->fd, msg, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n == (ssize_t)len)
            return;
        if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
            char why[96];
            snprintf(why, sizeof why, "send failed: %s", n >= 0 ? "short send" : strerror(errno));
            ga_server__conn_kill(c, why);
            return;
        }
    }
    uint64_t limit = c->srv->cfg.max_queued_bytes;
    if (c->oq_bytes + len > limit) {
        ga_server__log(c->srv, GA_SERVER_LOG_WARN,
                       "client %" PRIu32 " (pid %ld) is not reading its replies: %" PRIu64
                       " bytes queued, a %" PRIu32 "-byte %s would pass the limit of %" PRIu64,
                       c->id, (long)c->pid, c->oq_bytes, len,
                       lt_msg_type_name(((const struct lt_header *)msg)->type), limit);
        ga_server__conn_kill(c, "outgoing queue limit reached");
        return;
    }
    struct ga_server__out *o = malloc(sizeof(*o) + len);
    if (!o) {
        ga_server__conn_kill(c, "out of memory queueing a reply");
        return;
    }
    o->next = NULL;
    o->len = len;
    memcpy(o->data, msg, len);
    if (c->oq_tail)
        c->oq_tail->next = o;
    else
        c->oq_head = o;
    c->oq_tail = o;
    c->oq_bytes += len;
    if (!c->corked)
        ga_server__epoll_out(c, true);
}

/* Sends what is queued, up to GA_SEND_BATCH messages per sendmmsg. */
static void ga_server__flush(struct ga_server__conn *c)
{
    struct mmsghdr mm[GA_SEND_BATCH];
    struct iovec iov[GA_SEND_BATCH];
    while (c->oq_head && !c->dead) {
        unsigned n = 0;
        for (struct ga_server__out *o = c->oq_head; o && n < GA_SEND_BATCH; o = o->next, n++) {
            iov[n] = (struct iovec){.iov_base = o->data, .iov_len = o->len};
            mm[n] = (struct mmsghdr){.msg_hdr = {.msg_iov = &iov[n], .msg_iovlen = 1}};
        }
        int sent = sendmmsg(c->fd, mm, n, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (sent <= 0) {
            ga_server__conn_kill(c, sent < 0 ? "send failed" : "short send");
            return;
        }
        for (int i = 0; i < sent; i++) {
            struct ga_server__out *o = c->oq_head;
            if (mm[i].msg_len != o->len) {
                ga_server__conn_kill(c, "short send");
                return;
            }
            c->oq_head = o->next;
            if (!c->oq_head)
                c->oq_tail = NULL;
            c->oq_bytes -= o->len;
            free(o);
        }
        if ((unsigned)sent < n)
            break; /* the socket is full: wait for EPOLLOUT */
    }
    if (!c->dead)
        ga_server__epoll_out(c, c->oq_head != NULL);
}

void ga_server__cork(struct ga_server__conn *c)
{
    c->corked = true;
}

void ga_server__uncork(struct ga_server__conn *c)
{
    if (!c->corked)
        return;
    c->corked = false;
    if (c->oq_head && !c->dead && !c->closed)
        ga_server__flush(c);
}

void ga_server__send_error(struct ga_server__conn *c, uint64_t request_id, uint16_t failed_type,
                           uint32_t code, int err, uint32_t index, const char *fmt, ...)
{
    struct lt_msg_error m;
    lt_msg_init(&m, sizeof m, LT_MSG_ERROR, request_id);
    m.code = lt_error_is_known(code) && code != LT_OK ? code : LT_E_SYSTEM;
    m.err = m.code == LT_E_SYSTEM && err < 0 && err >= -4095 ? err : lt_error_errno(m.code);
    if (m.err == 0)
        m.err = -EIO;
    m.failed_type = failed_type;
    m.index = index < LT_MAX_BATCH ? index : LT_INDEX_NONE;
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (lt_name_set(m.message, sizeof m.message, text) == 0)
        lt_name_set(m.message, sizeof m.message, lt_error_describe(m.code));
    ga_server__log(c->srv, GA_SERVER_LOG_INFO, "client %" PRIu32 ": ERROR %s for %s: %s", c->id,
                   lt_error_name(m.code),
                   failed_type ? lt_msg_type_name(failed_type) : "an unreadable message", text);
    ga_server__send(c, &m, sizeof m);
}

void ga_server__send_failure(struct ga_server__conn *c, uint64_t request_id, uint16_t failed_type,
                             uint32_t index, const struct lt_failure *why)
{
    ga_server__send_error(c, request_id, failed_type, why->code, why->err, index, "%s",
                          why->message);
}

/* ---- clients ------------------------------------------------------------ */

struct ga_server__conn *ga_server__conn_by_client(struct ga_server *srv,
                                                  struct lease_client_id client)
{
    for (struct ga_server__conn *c = srv->conns; c; c = c->next)
        if (lease_client_id_eq(c->client, client) && !c->closed)
            return c;
    return NULL;
}

void ga_server__seg_unref(struct ga_server__seg *seg)
{
    if (--seg->refs == 0)
        free(seg);
}

static void ga_server__conn_free(struct ga_server__conn *c)
{
    struct ga_server *srv = c->srv;
    if (c->prev)
        c->prev->next = c->next;
    else
        srv->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    ga_server__map_fini(&c->releases);
    free(c);
}

void ga_server__conn_put(struct ga_server__conn *c)
{
    if (--c->inflight == 0 && c->closed)
        ga_server__conn_free(c);
}

/* Peer gone (or told to go): its socket, queue, streams, events, leases
 * and segments. Leases with work in flight complete when that work does;
 * the lease service then unregisters and closes the segments. */
static void ga_server__conn_close(struct ga_server__conn *c)
{
    struct ga_server *srv = c->srv;
    epoll_ctl(srv->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    c->closed = true;
    c->dead = true;
    srv->nconns--;
    while (c->oq_head) {
        struct ga_server__out *o = c->oq_head;
        c->oq_head = o->next;
        free(o);
    }
    c->oq_tail = NULL;
    c->oq_bytes = 0;
    srv->ex->ops->client_drop(srv->ex->ctx, c->client.value);
    int waiting = lease_client_drop(srv->svc, c->client, NULL);
    /* Unlisted now; a record a job still points at goes with that job. */
    uint64_t *ids = c->segments ? calloc(c->segments, sizeof(*ids)) : NULL;
    uint32_t n = 0;
    for (size_t i = 0; ids && i < srv->segs.cap; i++) {
        uint64_t v;
        if (srv->segs.keys[i] == 0)
            continue;
        v = srv->segs.vals[i];
        if (((struct ga_server__seg *)(uintptr_t)v)->conn == c && n < c->segments)
            ids[n++] = srv->segs.keys[i];
    }
    for (uint32_t i = 0; i < n; i++) {
        uint64_t v;
        if (ga_server__map_del(&srv->segs, ids[i], &v))
            ga_server__seg_unref((struct ga_server__seg *)(uintptr_t)v);
    }
    if (c->segments && !ids)
        ga_server__log(srv, GA_SERVER_LOG_ERROR,
                       "client %" PRIu32 ": out of memory unlisting "
                       "%" PRIu32 " segments; their records stay until exit",
                       c->id, c->segments);
    free(ids);
    c->segments = 0;
    ga_server__map_fini(&c->releases);
    ga_server__log(srv, GA_SERVER_LOG_INFO,
                   "client %" PRIu32 " (pid %ld) closed: %d lease%s waiting for in-flight work, "
                   "%" PRIu32 " job%s in flight",
                   c->id, (long)c->pid, waiting < 0 ? 0 : waiting, waiting == 1 ? "" : "s",
                   c->inflight, c->inflight == 1 ? "" : "s");
    if (srv->accept_paused && srv->lfd >= 0) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &srv->src_listen};
        if (epoll_ctl(srv->epfd, EPOLL_CTL_MOD, srv->lfd, &ev) == 0)
            srv->accept_paused = false;
    }
    if (c->inflight == 0)
        ga_server__conn_free(c);
}

static void ga_server__sweep(struct ga_server *srv)
{
    if (!srv->dead_pending)
        return;
    srv->dead_pending = false;
    for (struct ga_server__conn *c = srv->conns, *n; c; c = n) {
        n = c->next;
        if (c->dead && !c->closed)
            ga_server__conn_close(c);
    }
}

static void ga_server__refuse_fd(struct ga_server *srv, int fd, uint32_t code, const char *text)
{
    struct lt_msg_error m;
    lt_msg_init(&m, sizeof m, LT_MSG_ERROR, 0);
    m.code = code;
    m.err = lt_error_errno(code);
    m.index = LT_INDEX_NONE;
    lt_name_set(m.message, sizeof m.message, text);
    if (send(fd, &m, sizeof m, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
        ga_server__log(srv, GA_SERVER_LOG_INFO, "refusal not delivered: %s", strerror(errno));
    close(fd);
}

static void ga_server__accept_one(struct ga_server *srv, int fd)
{
    pid_t pid = 0;
    uid_t uid = 0;
    if (!ga_server__peer_check(srv, fd, &pid, &uid)) {
        srv->refused++;
        close(fd); /* nothing was read from it */
        return;
    }
    if (srv->nconns >= srv->cfg.max_clients) {
        srv->refused++;
        ga_server__log(srv, GA_SERVER_LOG_WARN,
                       "refused peer pid %ld uid %u: %" PRIu32 " clients connected, the limit",
                       (long)pid, (unsigned)uid, srv->nconns);
        ga_server__refuse_fd(srv, fd, LT_E_LIMIT, "too many clients connected");
        return;
    }
    struct ga_server__conn *c = calloc(1, sizeof(*c));
    if (!c) {
        ga_server__refuse_fd(srv, fd, LT_E_SYSTEM, "agent out of memory");
        return;
    }
    c->src = GA_SRC_CONN;
    c->srv = srv;
    c->fd = fd;
    c->pid = pid;
    c->uid = uid;
    struct lease_client_limits lim = {.max_segments = srv->cfg.max_segments};
    int rc = lease_client_add(srv->svc, &lim, &c->client, NULL);
    if (rc < 0) {
        free(c);
        ga_server__refuse_fd(srv, fd, LT_E_SYSTEM, "agent: no client slot");
        return;
    }
    rc = srv->ex->ops->client_add(srv->ex->ctx, c->client.value);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
    if (rc == 0 && epoll_ctl(srv->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        rc = -errno;
        srv->ex->ops->client_drop(srv->ex->ctx, c->client.value);
    }
    if (rc < 0) {
        ga_server__log(srv, GA_SERVER_LOG_ERROR, "client pid %ld: setting up failed: %s", (long)pid,
                       strerror(-rc));
        lease_client_drop(srv->svc, c->client, NULL);
        free(c);
        ga_server__refuse_fd(srv, fd, LT_E_SYSTEM, "agent: client setup failed");
        return;
    }
    if (++srv->next_id == 0)
        srv->next_id = 1;
    c->id = srv->next_id;
    c->next = srv->conns;
    if (srv->conns)
        srv->conns->prev = c;
    srv->conns = c;
    srv->nconns++;
    srv->accepted++;
    ga_server__log(srv, GA_SERVER_LOG_INFO, "client %" PRIu32 " connected: pid %ld uid %u", c->id,
                   (long)pid, (unsigned)uid);
}

static void ga_server__accept(struct ga_server *srv)
{
    for (int i = 0; i < GA_EPOLL_BATCH; i++) {
        int fd = accept4(srv->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            ga_server__accept_one(srv, fd);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (errno == EMFILE || errno == ENFILE) {
            /* Level-triggered: stop polling until a client goes, or we spin. */
            ga_server__log(srv, GA_SERVER_LOG_ERROR,
                           "accept: out of file descriptors (%s); not accepting until a client "
                           "disconnects",
                           strerror(errno));
            struct epoll_event ev = {.events = 0, .data.ptr = &srv->src_listen};
            if (epoll_ctl(srv->epfd, EPOLL_CTL_MOD, srv->lfd, &ev) == 0)
                srv->accept_paused = true;
        } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
            ga_server__log(srv, GA_SERVER_LOG_ERROR, "accept failed: %s", strerror(errno));
        }
        return;
    }
}

static void ga_server__fds_close(int *fds, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

/* Reads one packet. Returns 1 when one was handled, 0 when none is waiting. */
static int ga_server__recv_one(struct ga_server__conn *c)
{
    union lt_msg_buffer buf;
    union {
        struct cmsghdr align;
        char bytes[CMSG_SPACE(sizeof(int) * GA_MAX_FDS)];
    } cbuf;
    struct iovec iov = {.iov_base = buf.bytes, .iov_len = sizeof buf.bytes};
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = cbuf.bytes,
                        .msg_controllen = sizeof cbuf.bytes};
    ssize_t n = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return 0;
        char why[96];
        snprintf(why, sizeof why, "recvmsg failed: %s", strerror(errno));
        ga_server__conn_kill(c, why);
        return 0;
    }
    int fds[GA_MAX_FDS];
    size_t nfds = 0;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
            if (nfds < GA_MAX_FDS)
                fds[nfds++] = fd;
            else
                close(fd);
        }
    }
    if (n == 0) {
        ga_server__fds_close(fds, nfds);
        ga_server__conn_kill(c, nfds ? "empty packet (with fds)" : "peer closed the connection");
        return 0;
    }
    if (mh.msg_flags & MSG_CTRUNC) {
        ga_server__fds_close(fds, nfds);
        ga_server__send_error(c, 0, 0, LT_E_FD_COUNT, 0, LT_INDEX_NONE,
                              "control data truncated: expected at most 1 fd, found more than "
                              "%d",
                              GA_MAX_FDS);
        ga_server__conn_kill(c, "truncated control data");
        return 0;
    }
    if ((mh.msg_flags & MSG_TRUNC) || (size_t)n > LT_MSG_MAX_BYTES) {
        ga_server__fds_close(fds, nfds);
        ga_server__send_error(c, 0, 0, LT_E_BAD_LENGTH, 0, LT_INDEX_NONE,
                              "message larger than the protocol maximum of %u bytes",
                              LT_MSG_MAX_BYTES);
        ga_server__conn_kill(c, "oversized message");
        return 0;
    }
    ga_server__dispatch(c, buf.bytes, (size_t)n, fds, nfds);
    return 1;
}

static void ga_server__conn_event(struct ga_server__conn *c, uint32_t events)
{
    if (c->closed || c->dead)
        return;
    if (events & EPOLLOUT)
        ga_server__flush(c);
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP))
        for (int i = 0; i < GA_RECV_BURST && !c->dead; i++)
            if (!ga_server__recv_one(c))
                break;
}

/* ---- completions from other threads ------------------------------------ */

void ga_server__post(struct ga_server *srv, struct ga_server__job *job)
{
    job->next = NULL;
    pthread_mutex_lock(&srv->mu);
    if (srv->done_tail)
        srv->done_tail->next = job;
    else
        srv->done_head = job;
    srv->done_tail = job;
    pthread_mutex_unlock(&srv->mu);
    uint64_t one = 1;
    if (write(srv->wakefd, &one, sizeof one) < 0 && errno != EAGAIN)
        ga_server__log(srv, GA_SERVER_LOG_ERROR, "eventfd write failed: %s", strerror(errno));
}

static void ga_server__drain_done(struct ga_server *srv)
{
    for (;;) {
        pthread_mutex_lock(&srv->mu);
        struct ga_server__job *j = srv->done_head;
        srv->done_head = srv->done_tail = NULL;
        pthread_mutex_unlock(&srv->mu);
        if (!j)
            return;
        while (j) {
            struct ga_server__job *n = j->next;
            ga_server__complete(srv, j);
            j = n;
        }
    }
}

static void ga_server__wake(struct ga_server *srv)
{
    uint64_t v;
    while (read(srv->wakefd, &v, sizeof v) == (ssize_t)sizeof v)
        ;
    ga_server__drain_done(srv);
    if (__atomic_load_n(&srv->stop_req, __ATOMIC_ACQUIRE))
        srv->stopping = true;
}

void ga_server_stop(struct ga_server *srv)
{
    __atomic_store_n(&srv->stop_req, 1, __ATOMIC_RELEASE);
    uint64_t one = 1;
    ssize_t n = write(srv->wakefd, &one, sizeof one);
    (void)n; /* a full counter already wakes the loop */
}

void ga_server__offer_queue(struct ga_server *srv, struct ga_server__job *job)
{
    job->next = NULL;
    pthread_mutex_lock(&srv->mu);
    if (srv->reg_tail)
        srv->reg_tail->next = job;
    else
        srv->reg_head = job;
    srv->reg_tail = job;
    pthread_cond_signal(&srv->reg_cv);
    pthread_mutex_unlock(&srv->mu);
}

/* Registering a segment takes up to seconds (pinning pages); it runs here,
 * never on the loop thread. */
static void *ga_server__registrar_main(void *arg)
{
    struct ga_server *srv = arg;
    pthread_mutex_lock(&srv->mu);
    for (;;) {
        while (!srv->reg_head && !srv->reg_stop)
            pthread_cond_wait(&srv->reg_cv, &srv->mu);
        struct ga_server__job *j = srv->reg_head;
        if (!j)
            break;
        srv->reg_head = j->next;
        if (!srv->reg_head)
            srv->reg_tail = NULL;
        pthread_mutex_unlock(&srv->mu);
        ga_server__offer_run(srv, j);
        ga_server__post(srv, j);
        pthread_mutex_lock(&srv->mu);
    }
    pthread_mutex_unlock(&srv->mu);
    return NULL;
}

static void ga_server__registrar_stop(struct ga_server *srv)
{
    pthread_mutex_lock(&srv->mu);
    struct ga_server__job *j = srv->reg_head;
    srv->reg_head = srv->reg_tail = NULL;
    srv->reg_stop = true;
    pthread_cond_signal(&srv->reg_cv);
    pthread_mutex_unlock(&srv->mu);
    while (j) {
        struct ga_server__job *n = j->next;
        close(j->fd);
        j->fd = -1;
        j->rc =
            lt_failure_set(&j->why, LT_E_SHUTTING_DOWN, -ESHUTDOWN, "the agent is shutting down");
        ga_server__post(srv, j);
        j = n;
    }
    if (srv->reg_started) {
        pthread_join(srv->reg_thread, NULL);
        srv->reg_started = false;
    }
}

/* ---- signals and stats -------------------------------------------------- */

static void ga_server__log_text(struct ga_server *srv, char *text)
{
    for (char *line = text, *nl; line && *line; line = nl) {
        nl = strchr(line, '\n');
        if (nl)
            *nl++ = '\0';
        ga_server__log(srv, GA_SERVER_LOG_INFO, "%s", line);
    }
}

void ga_server_stats_log(struct ga_server *srv)
{
    int need = lease_stats_format(srv->svc, NULL, 0);
    char *buf = need > 0 ? malloc((size_t)need + 1) : NULL;
    if (buf) {
        lease_stats_format(srv->svc, buf, (size_t)need + 1);
        ga_server__log_text(srv, buf);
        free(buf);
    }
    need = srv->ex->ops->stats_format(srv->ex->ctx, NULL, 0);
    buf = need > 0 ? malloc((size_t)need + 1) : NULL;
    if (buf) {
        srv->ex->ops->stats_format(srv->ex->ctx, buf, (size_t)need + 1);
        ga_server__log_text(srv, buf);
        free(buf);
    }
    ga_server__log(srv, GA_SERVER_LOG_INFO,
                   "server stats: socket=%s clients=%" PRIu32 " accepted=%" PRIu64
                   " refused=%" PRIu64 " segments=%zu uptime_s=%.3f",
                   srv->path, srv->nconns, srv->accepted, srv->refused, srv->segs.n,
                   (double)(ga_server__now_ns() - srv->start_ns) / 1e9);
    for (struct ga_server__conn *c = srv->conns; c; c = c->next)
        ga_server__log(srv, GA_SERVER_LOG_INFO,
                       "  client %" PRIu32 " pid %ld uid %u name '%s'%s: segments=%" PRIu32
                       " leases_granted=%" PRIu64 " submits=%" PRIu64 " inflight=%" PRIu32
                       " queued_bytes=%" PRIu64,
                       c->id, (long)c->pid, (unsigned)c->uid, c->hello ? c->name : "",
                       c->closed ? " (closed, draining)" : "", c->segments, c->leases_granted,
                       c->submits, c->inflight, c->oq_bytes);
}

static void ga_server__signal(struct ga_server *srv)
{
    struct signalfd_siginfo si;
    while (read(srv->sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGUSR1) {
            ga_server__log(srv, GA_SERVER_LOG_INFO, "SIGUSR1: stats follow");
            ga_server_stats_log(srv);
        } else {
            ga_server__log(srv, GA_SERVER_LOG_INFO, "%s from pid %u: stopping",
                           strsignal((int)si.ssi_signo), si.ssi_pid);
            srv->stopping = true;
        }
    }
}

/* ---- life ---------------------------------------------------------------- */

/* Stop accepting, finish or cancel every job, answer what can be answered,
 * close every client. Idempotent. */
static void ga_server__drain(struct ga_server *srv)
{
    ga_server__listen_close(srv);
    ga_server__registrar_stop(srv);
    if (srv->created)
        srv->ex->ops->shutdown(srv->ex->ctx);
    ga_server__drain_done(srv);
    for (struct ga_server__conn *c = srv->conns, *n; c; c = n) {
        n = c->next;
        if (c->closed)
            continue;
        ga_server__flush(c); /* best effort: cancelled work answered */
        ga_server__conn_close(c);
    }
    ga_server__drain_done(srv);
}

int ga_server_run(struct ga_server *srv)
{
    struct epoll_event evs[GA_EPOLL_BATCH];
    int rc = 0;
    srv->ran = true;
    ga_server__log(srv, GA_SERVER_LOG_INFO,
                   "serving %s (pid %ld, executor '%s'%s, budgets PINNED %" PRIu64
                   " MAPPED %" PRIu64 " bytes)",
                   srv->path, (long)getpid(), srv->ex->name,
                   (srv->ex->caps & LT_CAP_HOST_BACKEND) ? ": HOST BACKEND, no GPU" : "",
                   srv->cfg.budget_pinned, srv->cfg.budget_mapped);
    while (!srv->stopping) {
        int n = epoll_wait(srv->epfd, evs, GA_EPOLL_BATCH, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = -errno;
            ga_server__log(srv, GA_SERVER_LOG_ERROR, "epoll_wait failed: %s", strerror(-rc));
            break;
        }
        for (int i = 0; i < n; i++) {
            enum ga_server__src *src = evs[i].data.ptr;
            switch (*src) {
            case GA_SRC_LISTEN:
                ga_server__accept(srv);
                break;
            case GA_SRC_WAKE:
                ga_server__wake(srv);
                break;
            case GA_SRC_SIGNAL:
                ga_server__signal(srv);
                break;
            case GA_SRC_CONN:
                ga_server__conn_event((struct ga_server__conn *)src, evs[i].events);
                break;
            }
        }
        ga_server__sweep(srv);
    }
    ga_server__drain(srv);
    ga_server__log(srv, GA_SERVER_LOG_INFO,
                   "stopped: %" PRIu64 " clients served, %" PRIu64 " refused", srv->accepted,
                   srv->refused);
    return rc;
}

static int ga_server__epoll_add(struct ga_server *srv, int fd, enum ga_server__src *src)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = src};
    if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, fd, &ev) == 0)
        return 0;
    int rc = -errno;
    ga_server__log(srv, GA_SERVER_LOG_ERROR, "epoll_ctl(ADD) failed: %s", strerror(-rc));
    return rc;
}

static int ga_server__strings(struct ga_server *srv, const struct ga_server_config *cfg)
{
    char def[256];
    if (!cfg->socket_path && lt_socket_default(def, sizeof def) < 0)
        return -ENAMETOOLONG;
    srv->path = strdup(cfg->socket_path ? cfg->socket_path : def);
    if (!srv->path)
        return -ENOMEM;
    size_t len = strlen(srv->path);
    if (len == 0 || srv->path[len - 1] == '/') {
        ga_server__log(srv, GA_SERVER_LOG_ERROR, "socket path: expected a file name, found '%s'",
                       srv->path);
        return -EINVAL;
    }
    srv->lock_path = malloc(len + sizeof ".lock");
    char *tmp = strdup(srv->path);
    if (!srv->lock_path || !tmp) {
        free(tmp);
        return -ENOMEM;
    }
    memcpy(srv->lock_path, srv->path, len);
    memcpy(srv->lock_path + len, ".lock", sizeof ".lock");
    srv->dir = strdup(dirname(tmp));
    free(tmp);
    char name[LT_NAME_LEN + 8];
    snprintf(name, sizeof name, "ga-%s", srv->ex->name ? srv->ex->name : "agent");
    srv->agent_name = calloc(1, LT_NAME_LEN);
    if (!srv->dir || !srv->agent_name)
        return -ENOMEM;
    if (lt_name_set(srv->agent_name, LT_NAME_LEN, cfg->agent_name ? cfg->agent_name : name) == 0)
        lt_name_set(srv->agent_name, LT_NAME_LEN, "ga");
    srv->nallow = cfg->allow_count ? cfg->allow_count : 1;
    srv->allow = calloc(srv->nallow, sizeof(*srv->allow));
    if (!srv->allow)
        return -ENOMEM;
    if (cfg->allow_count)
        memcpy(srv->allow, cfg->allow_uids, cfg->allow_count * sizeof(*srv->allow));
    else
        srv->allow[0] = geteuid();
    return 0;
}

static void ga_server__free(struct ga_server *srv)
{
    ga_server__drain(srv);
    lease_service_destroy(srv->svc);
    srv->svc = NULL;
    for (size_t i = 0; i < srv->segs.cap; i++)
        if (srv->segs.keys[i])
            ga_server__seg_unref((struct ga_server__seg *)(uintptr_t)srv->segs.vals[i]);
    ga_server__map_fini(&srv->segs);
    ga_server__map_fini(&srv->seg_slots);
    ga_server__lock_release(srv);
    if (srv->sigfd >= 0)
        close(srv->sigfd);
    if (srv->wakefd >= 0)
        close(srv->wakefd);
    if (srv->epfd >= 0)
        close(srv->epfd);
    pthread_cond_destroy(&srv->reg_cv);
    pthread_mutex_destroy(&srv->mu);
    free(srv->path);
    free(srv->lock_path);
    free(srv->dir);
    free(srv->agent_name);
    free(srv->allow);
    free(srv);
}

int ga_server_create(const struct ga_server_config *cfg, struct ga_server **srv_p)
{
    if (!cfg || !cfg->backend || !cfg->executor || !cfg->executor->ops || !srv_p)
        return -EINVAL;
    struct ga_server *srv = calloc(1, sizeof(*srv));
    if (!srv)
        return -ENOMEM;
    srv->cfg = *cfg;
    if (!srv->cfg.log)
        srv->cfg.log = ga_server__log_stderr;
    srv->cfg.socket_path = NULL; /* ours are srv->path and friends */
    srv->cfg.allow_uids = NULL;
    srv->cfg.agent_name = NULL;
    if (!srv->cfg.max_clients)
        srv->cfg.max_clients = GA_DEFAULT_MAX_CLIENTS;
    if (!srv->cfg.max_segments)
        srv->cfg.max_segments = GA_DEFAULT_MAX_SEGMENTS;
    if (!srv->cfg.max_inflight)
        srv->cfg.max_inflight = GA_DEFAULT_MAX_INFLIGHT;
    if (!srv->cfg.max_queued_bytes)
        srv->cfg.max_queued_bytes = GA_DEFAULT_MAX_QUEUED;
    srv->cfg.max_segment_bytes -= srv->cfg.max_segment_bytes % LT_SEGMENT_ALIGN;
    if (!srv->cfg.max_segment_bytes || srv->cfg.max_segment_bytes > LT_SEGMENT_SIZE_MAX)
        srv->cfg.max_segment_bytes = LT_SEGMENT_SIZE_MAX;
    srv->ex = cfg->executor;
    srv->be = *cfg->backend;
    srv->epfd = srv->lfd = srv->lockfd = srv->wakefd = srv->sigfd = -1;
    srv->src_listen = GA_SRC_LISTEN;
    srv->src_wake = GA_SRC_WAKE;
    srv->src_signal = GA_SRC_SIGNAL;
    srv->start_ns = ga_server__now_ns();
    srv->stopping = true; /* nothing to drain until create completes */
    pthread_mutex_init(&srv->mu, NULL);
    pthread_cond_init(&srv->reg_cv, NULL);

    int rc = ga_server__strings(srv, cfg);
    if (rc < 0)
        goto fail;
    struct lease_service_config lc = {
        .budget_pinned = cfg->budget_pinned,
        .budget_mapped = cfg->budget_mapped,
        .default_limits = {.max_segments = srv->cfg.max_segments},
        .on_release_complete = ga_server__on_release_complete,
        .on_client_drained = ga_server__on_client_drained,
        .cb_arg = srv,
        .log = ga_server__lease_log,
        .log_arg = srv,
    };
    struct lt_failure why;
    rc = lease_service_create(&lc, &srv->be, &srv->svc, &why);
    if (rc < 0) {
        ga_server__log(srv, GA_SERVER_LOG_ERROR, "refusing to start: %s", why.message);
        goto fail;
    }
    srv->epfd = epoll_create1(EPOLL_CLOEXEC);
    srv->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (srv->epfd < 0 || srv->wakefd < 0) {
        rc = -errno;
        ga_server__log(srv, GA_SERVER_LOG_ERROR, "epoll/eventfd: %s", strerror(-rc));
        goto fail;
    }
    if (cfg->handle_signals) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGUSR1);
        srv->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
        if (srv->sigfd < 0) {
            rc = -errno;
            ga_server__log(srv, GA_SERVER_LOG_ERROR, "signalfd: %s", strerror(-rc));
            goto fail;
        }
    }
    rc = ga_server__listen_open(srv);
    if (rc < 0)
        goto fail;
    if ((rc = ga_server__epoll_add(srv, srv->lfd, &srv->src_listen)) < 0 ||
        (rc = ga_server__epoll_add(srv, srv->wakefd, &srv->src_wake)) < 0 ||
        (srv->sigfd >= 0 && (rc = ga_server__epoll_add(srv, srv->sigfd, &srv->src_signal)) < 0))
        goto fail;
    rc = -pthread_create(&srv->reg_thread, NULL, ga_server__registrar_main, srv);
    if (rc < 0) {
        ga_server__log(srv, GA_SERVER_LOG_ERROR, "pthread_create: %s", strerror(-rc));
        goto fail;
    }
    srv->reg_started = true;
    srv->stopping = false;
    srv->created = true;
    *srv_p = srv;
    return 0;

fail:
    ga_server__free(srv);
    return rc;
}

void ga_server_destroy(struct ga_server *srv)
{
    if (srv)
        ga_server__free(srv);
}
