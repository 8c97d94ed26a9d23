/* The lease client's transport: one SOCK_SEQPACKET connection per agent.
 * Sends (with an fd attached for segment offers), the queue that keeps their
 * order while the socket buffer is full, receiving one message, marking a
 * connection broken, and the log and error text. It calls nothing of the
 * rest of the client: msg.c and dispatch.c build on it, client.c drives it. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "base/fdpass.h"
#include "client_internal.h"

/* ---- error text ---- */

int leasec_client__fail(struct leasec_client *c, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof(c->err), fmt, ap);
    va_end(ap);
    return err;
}

void leasec_client__out_free(struct leasec_client__agent *a)
{
    while (a->out_head) {
        struct leasec_client__out *o = a->out_head;
        a->out_head = o->next;
        free(o);
    }
    a->out_tail = NULL;
}

/* ---- sending ---- */

/* One whole packet, with @pass_fd attached when >= 0, without blocking. */
static int leasec_client__sendmsg(int fd, const void *msg, size_t len, int pass_fd)
{
    return base_send_fds(fd, msg, len, &pass_fd, pass_fd >= 0 ? 1 : 0, MSG_DONTWAIT);
}

static void leasec_client__epoll_out(struct leasec_client *c, struct leasec_client__agent *a,
                                     int on)
{
    if (a->epoll_out == on || a->fd < 0)
        return;
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.u64 = a->index + 1u};
    if (epoll_ctl(c->epfd, EPOLL_CTL_MOD, a->fd, &ev) == 0)
        a->epoll_out = on;
}

/* ---- broken connections ---- */

/* Makes the client fd readable at once, so the event loop reaches its next
 * safe point (where a broken connection is torn down) without waiting for
 * another deadline. */
static void leasec_client__wake(struct leasec_client *c)
{
    struct itimerspec its = {.it_value = {.tv_sec = 0, .tv_nsec = 1}};
    if (timerfd_settime(c->tfd, TFD_TIMER_ABSTIME, &its, NULL) < 0)
        leasec_client__log(c, "timerfd_settime failed: %s; reconnects wait for the next message",
                           strerror(errno));
}

void leasec_client__break(struct leasec_client *c, struct leasec_client__agent *a, int err,
                          const char *fmt, ...)
{
    if (a->broken_err)
        return; /* the first cause is the one worth reporting */
    char why[LEASEC_CLIENT_MSG_LEN / 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    a->broken_err = err < 0 ? err : -EPROTO;
    snprintf(a->broken_msg, sizeof(a->broken_msg), "agent %s (connection %u): %s", a->path,
             a->epoch, why);
    leasec_client__wake(c);
}

/* ---- the send queue ---- */

int leasec_client__send(struct leasec_client *c, struct leasec_client__agent *a, const void *msg,
                        size_t len, int fd)
{
    if (a->fd < 0 || a->state == LEASEC_CLIENT_DISCONNECTED)
        return -ENOTCONN;
    if (a->broken_err)
        return a->broken_err;
    if (!a->out_head) {
        int rc = leasec_client__sendmsg(a->fd, msg, len, fd);
        if (rc == 0)
            return 0;
        if (rc != -EAGAIN) {
            leasec_client__break(c, a, rc == -EPIPE ? -ECONNRESET : rc, "%ssending %s failed: %s",
                                 rc == -EPIPE || rc == -ECONNRESET ? "connection lost: " : "",
                                 lt_msg_type_name(((const struct lt_header *)msg)->type),
                                 strerror(-rc));
            return a->broken_err;
        }
    }
    /* The socket buffer is full: keep the order, send when it drains. */
    struct leasec_client__out *o = malloc(sizeof(*o) + (len + 7) / 8 * 8);
    if (!o)
        return -ENOMEM;
    o->next = NULL;
    o->fd = fd;
    o->len = len;
    memcpy(o->msg, msg, len);
    if (a->out_tail)
        a->out_tail->next = o;
    else
        a->out_head = o;
    a->out_tail = o;
    leasec_client__epoll_out(c, a, 1);
    return 0;
}

void leasec_client__flush(struct leasec_client *c, struct leasec_client__agent *a)
{
    while (a->out_head && !a->broken_err) {
        struct leasec_client__out *o = a->out_head;
        int rc = leasec_client__sendmsg(a->fd, o->msg, o->len, o->fd);
        if (rc == -EAGAIN)
            return;
        if (rc < 0) {
            leasec_client__break(c, a, rc == -EPIPE ? -ECONNRESET : rc, "%ssending %s failed: %s",
                                 rc == -EPIPE || rc == -ECONNRESET ? "connection lost: " : "",
                                 lt_msg_type_name(((const struct lt_header *)o->msg)->type),
                                 strerror(-rc));
            return;
        }
        a->out_head = o->next;
        if (!a->out_head)
            a->out_tail = NULL;
        free(o);
    }
    if (!a->out_head)
        leasec_client__epoll_out(c, a, 0);
}

/* ---- receiving ---- */

int leasec_client__recv(struct leasec_client *c, struct leasec_client__agent *a)
{
    struct base_recv_info info;
    /* The agent sends one fd, with WORDS_GRANT only: the dispatcher checks
     * which message it came with; base_recv_fds closes any beyond it. */
    int fd = -1;
    ssize_t n = base_recv_fds(a->fd, c->rx.bytes, sizeof(c->rx.bytes), &fd, 1, MSG_DONTWAIT, &info);
    if (n >= 0 && info.nfds == 1 && (info.nfds_closed || (info.flags & BASE_RECV_CTRUNC) ||
                                     n == 0 || (info.flags & BASE_RECV_TRUNC))) {
        close(fd); /* refused below with the message */
        info.nfds = 0;
    }
    if (n < 0) {
        if (n == -ECONNRESET)
            leasec_client__break(c, a, -ECONNRESET,
                                 "connection lost: reset by the agent (it "
                                 "closed with messages of ours unread)");
        else if (n != -EAGAIN)
            leasec_client__break(c, a, (int)n, "receive failed: %s", strerror((int)-n));
        return 0;
    }
    if (info.nfds_closed || (info.flags & BASE_RECV_CTRUNC)) {
        leasec_client__break(c, a, -EPROTO,
                             "a %zd-byte message came with %u fd(s) too many%s; agents send one "
                             "at most (all closed)",
                             n, info.nfds_closed,
                             (info.flags & BASE_RECV_CTRUNC) ? " and more cut off" : "");
        return 0;
    }
    if (n == 0) {
        leasec_client__break(c, a, -ECONNRESET, "connection lost: the agent closed it (EOF)");
        return 0;
    }
    if (info.flags & BASE_RECV_TRUNC) {
        leasec_client__break(c, a, -EPROTO, "packet larger than the largest message (%u bytes)",
                             LT_MSG_MAX_BYTES);
        return 0;
    }
    c->rx_fd = info.nfds == 1 ? fd : -1;
    return (int)n;
}
