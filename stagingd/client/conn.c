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

#include "client_internal.h"

#define SD_CLIENT_RX_FDS 8 /* fds a recvmsg can take in (all refused) */

/* ---- log and error text ---- */

void sd_client__log(struct sd_client *c, const char *fmt, ...)
{
    char line[2 * SD_CLIENT_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (c->log)
        c->log(c->log_ctx, line);
    else
        fprintf(stderr, "stagingd: client: %s\n", line);
}

int sd_client__fail(struct sd_client *c, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof(c->err), fmt, ap);
    va_end(ap);
    return err;
}

void sd_client__out_free(struct sd_client__agent *a)
{
    while (a->out_head) {
        struct sd_client__out *o = a->out_head;
        a->out_head = o->next;
        free(o);
    }
    a->out_tail = NULL;
}

/* ---- sending ---- */

static int sd_client__sendmsg(int fd, const void *msg, size_t len, int pass_fd)
{
    struct iovec iov = {.iov_base = (void *)msg, .iov_len = len};
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (pass_fd >= 0) {
        memset(&ctl, 0, sizeof(ctl));
        mh.msg_control = ctl.buf;
        mh.msg_controllen = sizeof(ctl.buf);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
    }
    for (;;) {
        /* MSG_NOSIGNAL: a dead agent is an EPIPE to handle, not a SIGPIPE to die of */
        ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n >= 0)
            return (size_t)n == len ? 0 : -EMSGSIZE; /* SEQPACKET sends whole packets */
        if (errno != EINTR)
            return -errno;
    }
}

static void sd_client__epoll_out(struct sd_client *c, struct sd_client__agent *a, int on)
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
static void sd_client__wake(struct sd_client *c)
{
    struct itimerspec its = {.it_value = {.tv_sec = 0, .tv_nsec = 1}};
    if (timerfd_settime(c->tfd, TFD_TIMER_ABSTIME, &its, NULL) < 0)
        sd_client__log(c, "timerfd_settime failed: %s; reconnects wait for the next message",
                       strerror(errno));
}

void sd_client__break(struct sd_client *c, struct sd_client__agent *a, int err, const char *fmt,
                      ...)
{
    if (a->broken_err)
        return; /* the first cause is the one worth reporting */
    char why[SD_CLIENT_MSG_LEN / 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    a->broken_err = err < 0 ? err : -EPROTO;
    snprintf(a->broken_msg, sizeof(a->broken_msg), "agent %s (connection %u): %s", a->path,
             a->epoch, why);
    sd_client__wake(c);
}

/* ---- the send queue ---- */

int sd_client__send(struct sd_client *c, struct sd_client__agent *a, const void *msg, size_t len,
                    int fd)
{
    if (a->fd < 0 || a->state == SD_CLIENT_DISCONNECTED)
        return -ENOTCONN;
    if (a->broken_err)
        return a->broken_err;
    if (!a->out_head) {
        int rc = sd_client__sendmsg(a->fd, msg, len, fd);
        if (rc == 0)
            return 0;
        if (rc != -EAGAIN) {
            sd_client__break(c, a, rc == -EPIPE ? -ECONNRESET : rc, "%ssending %s failed: %s",
                             rc == -EPIPE || rc == -ECONNRESET ? "connection lost: " : "",
                             lt_msg_type_name(((const struct lt_header *)msg)->type),
                             strerror(-rc));
            return a->broken_err;
        }
    }
    /* The socket buffer is full: keep the order, send when it drains. */
    struct sd_client__out *o = malloc(sizeof(*o) + (len + 7) / 8 * 8);
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
    sd_client__epoll_out(c, a, 1);
    return 0;
}

void sd_client__flush(struct sd_client *c, struct sd_client__agent *a)
{
    while (a->out_head && !a->broken_err) {
        struct sd_client__out *o = a->out_head;
        int rc = sd_client__sendmsg(a->fd, o->msg, o->len, o->fd);
        if (rc == -EAGAIN)
            return;
        if (rc < 0) {
            sd_client__break(c, a, rc == -EPIPE ? -ECONNRESET : rc, "%ssending %s failed: %s",
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
        sd_client__epoll_out(c, a, 0);
}

/* ---- receiving ---- */

int sd_client__recv(struct sd_client *c, struct sd_client__agent *a)
{
    for (;;) {
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(SD_CLIENT_RX_FDS * sizeof(int))];
        } ctl;
        struct iovec iov = {.iov_base = c->rx.bytes, .iov_len = sizeof(c->rx.bytes)};
        struct msghdr mh = {.msg_iov = &iov,
                            .msg_iovlen = 1,
                            .msg_control = ctl.buf,
                            .msg_controllen = sizeof(ctl.buf)};
        ssize_t n = recvmsg(a->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == ECONNRESET)
                sd_client__break(c, a, -ECONNRESET,
                                 "connection lost: reset by the agent (it "
                                 "closed with messages of ours unread)");
            else if (errno != EAGAIN)
                sd_client__break(c, a, -errno, "receive failed: %s", strerror(errno));
            return 0;
        }
        /* The agent never sends fds: close any that came, then refuse. */
        unsigned nfds = 0;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
            if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                continue;
            size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < k; i++) {
                int fd;
                memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
                close(fd);
                nfds++;
            }
        }
        if (nfds || (mh.msg_flags & MSG_CTRUNC)) {
            sd_client__break(c, a, -EPROTO,
                             "a %zd-byte message came with %u fd(s)%s; agents send none to "
                             "clients (all closed)",
                             n, nfds, (mh.msg_flags & MSG_CTRUNC) ? " and more cut off" : "");
            return 0;
        }
        if (n == 0) {
            sd_client__break(c, a, -ECONNRESET, "connection lost: the agent closed it (EOF)");
            return 0;
        }
        if (mh.msg_flags & MSG_TRUNC) {
            sd_client__break(c, a, -EPROTO, "packet larger than the largest message (%u bytes)",
                             LT_MSG_MAX_BYTES);
            return 0;
        }
        return (int)n;
    }
}
