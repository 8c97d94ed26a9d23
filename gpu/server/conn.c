/* One client connection: the bounded send queue (sendmmsg, corking), ERROR
 * messages, the client's segments and jobs, and closing it on peer death.
 * Below dispatch.c and server.c: it calls into nothing of theirs. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/err.h"
#include "conn.h"

#define GA_SEND_BATCH 64 /* replies per sendmmsg */

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

bool ga_server__inflight_room(const struct ga_server__conn *c, char *why, size_t len)
{
    const struct ga_server *srv = c->srv;
    if (c->inflight >= srv->cfg.max_inflight) {
        snprintf(why, len, "%" PRIu32 " requests in flight, the limit", c->inflight);
        return false;
    }
    uint64_t uid_total = 0;
    for (const struct ga_server__conn *o = srv->conns; o; o = o->next)
        if (o->uid == c->uid)
            uid_total += o->inflight;
    if (uid_total >= srv->cfg.max_inflight_per_uid) {
        snprintf(why, len, "uid %u has %" PRIu64 " requests in flight, the per-uid limit",
                 (unsigned)c->uid, uid_total);
        return false;
    }
    return true;
}

void ga_server__conn_kill(struct ga_server__conn *c, const char *why)
{
    if (c->dead || c->closed)
        return;
    c->dead = true;
    c->srv->dead_pending = true;
    base_log(&c->srv->cfg.log, BASE_LOG_INFO, GA_SERVER__SUBSYS,
             "client %" PRIu32 " (pid %ld): disconnecting: %s", c->id, (long)c->pid, why);
}

/* The control message carrying one fd. */
union ga_server__fd_cmsg {
    struct cmsghdr align;
    char bytes[CMSG_SPACE(sizeof(int))];
};

static void ga_server__fd_attach(struct msghdr *mh, union ga_server__fd_cmsg *cm, int fd)
{
    memset(cm, 0, sizeof *cm);
    mh->msg_control = cm->bytes;
    mh->msg_controllen = sizeof cm->bytes;
    struct cmsghdr *h = CMSG_FIRSTHDR(mh);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(h), &fd, sizeof fd);
}

/* Queues @msg (with a dup of @fd when >= 0, the queue's to close). */
static void ga_server__enqueue(struct ga_server__conn *c, const void *msg, uint32_t len, int fd);

void ga_server__send(struct ga_server__conn *c, const void *msg, uint32_t len)
{
    ga_server__send_fd(c, msg, len, -1);
}

void ga_server__send_fd(struct ga_server__conn *c, const void *msg, uint32_t len, int fd)
{
    if (c->dead || c->closed)
        return;
    if (!c->oq_head && !c->corked) {
        struct iovec iov = {.iov_base = (void *)msg, .iov_len = len};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
        union ga_server__fd_cmsg cm;
        if (fd >= 0)
            ga_server__fd_attach(&mh, &cm, fd);
        ssize_t n = sendmsg(c->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n == (ssize_t)len)
            return;
        if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
            char why[96];
            snprintf(why, sizeof why, "send failed: %s", n >= 0 ? "short send" : strerror(errno));
            ga_server__conn_kill(c, why);
            return;
        }
    }
    ga_server__enqueue(c, msg, len, fd);
}

static void ga_server__enqueue(struct ga_server__conn *c, const void *msg, uint32_t len, int fd)
{
    uint64_t limit = c->srv->cfg.max_queued_bytes;
    if (c->oq_bytes + len > limit) {
        base_log(&c->srv->cfg.log, BASE_LOG_WARN, GA_SERVER__SUBSYS,
                 "client %" PRIu32 " (pid %ld) is not reading its replies: %" PRIu64
                 " bytes queued, a %" PRIu32 "-byte %s would pass the limit of %" PRIu64,
                 c->id, (long)c->pid, c->oq_bytes, len,
                 lt_msg_type_name(((const struct lt_header *)msg)->type), limit);
        ga_server__conn_kill(c, "outgoing queue limit reached");
        return;
    }
    struct ga_server__out *o = malloc(sizeof(*o) + len);
    int dup_fd = fd >= 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;
    if (!o || (fd >= 0 && dup_fd < 0)) {
        free(o);
        if (dup_fd >= 0)
            close(dup_fd);
        ga_server__conn_kill(c, "out of memory queueing a reply");
        return;
    }
    o->next = NULL;
    o->len = len;
    o->fd = dup_fd;
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
void ga_server__flush(struct ga_server__conn *c)
{
    struct mmsghdr mm[GA_SEND_BATCH];
    struct iovec iov[GA_SEND_BATCH];
    union ga_server__fd_cmsg cm[GA_SEND_BATCH];
    while (c->oq_head && !c->dead) {
        unsigned n = 0;
        for (struct ga_server__out *o = c->oq_head; o && n < GA_SEND_BATCH; o = o->next, n++) {
            iov[n] = (struct iovec){.iov_base = o->data, .iov_len = o->len};
            mm[n] = (struct mmsghdr){.msg_hdr = {.msg_iov = &iov[n], .msg_iovlen = 1}};
            if (o->fd >= 0)
                ga_server__fd_attach(&mm[n].msg_hdr, &cm[n], o->fd);
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
            if (o->fd >= 0) {
                close(o->fd);
                ga_server__fd_freed(c->srv);
            }
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
    char text[LT_FAILURE_MSG_LEN + 128];
    va_list ap;
    va_start(ap, fmt);
    base_vfmt(text, sizeof text, fmt, ap);
    va_end(ap);
    /* The wire has LT_ERROR_MSG_LEN bytes: cut at a word, marked "...". */
    char wire[LT_ERROR_MSG_LEN];
    const size_t sent = base_fmt(wire, sizeof wire, "%s", text);
    if (lt_name_set(m.message, sizeof m.message, wire) == 0)
        lt_name_set(m.message, sizeof m.message, lt_error_describe(m.code));
    /* A text the wire cut is a defect of the text: the log says so, and the
     * tests' harnesses fail on the mark (docs/reliability.md). */
    if (sent < strlen(text)) {
        char mark[64];
        base_fmt(mark, sizeof mark, " [" GA_SERVER_CUT_MARK " after %zu bytes]", sent);
        size_t n = strlen(text);
        base_fmt(text + n, sizeof text - n, "%s", mark);
    }
    const char *what = failed_type ? lt_msg_type_name(failed_type) : "an unreadable message";
    struct ga_server *srv = c->srv;
    if (m.code == LT_E_BUDGET)
        base_log(&srv->cfg.log, BASE_LOG_WARN, GA_SERVER__SUBSYS,
                 "client %" PRIu32 ": ERROR %s for %s: %s; the agent's budgets are PINNED %" PRIu64
                 " and MAPPED %" PRIu64 " bytes: raise them with --pinned-budget and "
                 "--mapped-budget",
                 c->id, lt_error_name(m.code), what, text, srv->cfg.budget_pinned,
                 srv->cfg.budget_mapped);
    else if (m.code == LT_E_MEMLOCK)
        base_log(&srv->cfg.log, BASE_LOG_WARN, GA_SERVER__SUBSYS,
                 "client %" PRIu32 ": ERROR %s for %s: %s; raise the agent's RLIMIT_MEMLOCK "
                 "(ulimit -l, or LimitMEMLOCK= in its unit)",
                 c->id, lt_error_name(m.code), what, text);
    else
        base_log(&srv->cfg.log, BASE_LOG_INFO, GA_SERVER__SUBSYS,
                 "client %" PRIu32 ": ERROR %s for %s: %s", c->id, lt_error_name(m.code), what,
                 text);
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
    base_u64map_fini(&c->releases);
    base_u64map_fini(&c->rings); /* every ring's gone job ran before the last put */
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
void ga_server__conn_close(struct ga_server__conn *c)
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
        if (o->fd >= 0)
            close(o->fd);
        free(o);
    }
    c->oq_tail = NULL;
    c->oq_bytes = 0;
    ga_exec_client_drop(srv->ex, c->client.value);
    int waiting = lease_client_drop(srv->svc, c->client, NULL);
    /* Unlisted now; a record a job still points at goes with that job. */
    struct base_u64map_iter it;
    base_u64map_iter_init(&srv->segs, &it);
    for (struct base_u64map_entry *e; (e = base_u64map_iter_next(&srv->segs, &it));) {
        struct ga_server__seg *seg = e->ptr;
        if (seg->conn != c)
            continue;
        base_u64map_iter_del(&srv->segs, &it);
        ga_server__seg_unref(seg);
    }
    c->segments = 0;
    base_u64map_fini(&c->releases);
    base_log(&srv->cfg.log, BASE_LOG_INFO, GA_SERVER__SUBSYS,
             "client %" PRIu32 " (pid %ld) closed: %d lease%s waiting for in-flight work, "
             "%" PRIu32 " job%s in flight",
             c->id, (long)c->pid, waiting < 0 ? 0 : waiting, waiting == 1 ? "" : "s", c->inflight,
             c->inflight == 1 ? "" : "s");
    ga_server__fd_freed(srv);
    if (c->inflight == 0)
        ga_server__conn_free(c);
}

void ga_server__fd_freed(struct ga_server *srv)
{
    srv->fds_freed = true;
}

void ga_server__accept_resume(struct ga_server *srv)
{
    if (!srv->accept_paused || !srv->fds_freed || srv->lfd < 0)
        return;
    srv->fds_freed = false;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &srv->src_listen};
    if (epoll_ctl(srv->epfd, EPOLL_CTL_MOD, srv->lfd, &ev) == 0) {
        srv->accept_paused = false;
        base_log(&srv->cfg.log, BASE_LOG_INFO, GA_SERVER__SUBSYS,
                 "accepting again: file descriptors were freed");
    }
}

void ga_server__sweep(struct ga_server *srv)
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
