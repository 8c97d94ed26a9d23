/* stagingd's control socket: see control.h. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "control.h"

#define SD_CTL_CONNS_MAX 32

/* Logs one line through the daemon's sink the socket was made with. */
#define sd_ctl__log(ctl, level, ...) base_log(&(ctl)->log, (level), "control", __VA_ARGS__)

struct sd_ctl__conn {
    uint64_t id; /* 0: the slot is free */
    int fd;
    size_t len;
    char buf[SD_CTL_LINE_MAX];
};

struct sd_ctl {
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    struct base_log_sink log;
    int lfd;
    int epfd;
    uint64_t next_id;
    sd_ctl_command_fn fn;
    void *ctx;
    struct sd_ctl__conn conns[SD_CTL_CONNS_MAX];
};

static int sd_ctl__addr(const char *path, struct sockaddr_un *addr)
{
    memset(addr, 0, sizeof *addr);
    addr->sun_family = AF_UNIX;
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof addr->sun_path)
        return -ENAMETOOLONG;
    memcpy(addr->sun_path, path, n);
    return 0;
}

/* Whether something answers at @path (a live daemon). */
static int sd_ctl__alive(const struct sockaddr_un *addr)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    int alive = connect(fd, (const struct sockaddr *)addr, sizeof *addr) == 0;
    close(fd);
    return alive;
}

int sd_ctl_create(const char *path, sd_ctl_command_fn fn, void *ctx,
                  const struct base_log_sink *log, struct sd_ctl **ctl_p)
{
    struct sockaddr_un addr;
    int rc = sd_ctl__addr(path, &addr);
    if (rc < 0) {
        base_log(log, BASE_LOG_ERROR, "control",
                 "control socket '%s': expected a path of 1..%zu bytes", path,
                 sizeof addr.sun_path - 1);
        return rc;
    }
    struct sd_ctl *ctl = calloc(1, sizeof *ctl);
    if (!ctl)
        return -ENOMEM;
    ctl->log = *log;
    ctl->lfd = -1;
    ctl->epfd = -1;
    ctl->fn = fn;
    ctl->ctx = ctx;
    snprintf(ctl->path, sizeof ctl->path, "%s", path);

    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            sd_ctl__log(ctl, BASE_LOG_ERROR,
                        "control socket %s: expected a socket or nothing there, found "
                        "another kind of file; left alone",
                        path);
            rc = -EEXIST;
            goto fail;
        }
        if (sd_ctl__alive(&addr)) {
            sd_ctl__log(ctl, BASE_LOG_ERROR, "control socket %s: another process serves it", path);
            rc = -EADDRINUSE;
            goto fail;
        }
        unlink(path); /* stale: its daemon is gone */
    }
    ctl->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (ctl->lfd < 0) {
        rc = -errno;
        goto fail_log;
    }
    /* 0600 from birth: no window in which others may connect. */
    mode_t old = umask(0177);
    rc = bind(ctl->lfd, (struct sockaddr *)&addr, sizeof addr) < 0 ? -errno : 0;
    umask(old);
    if (rc < 0)
        goto fail_log;
    if (listen(ctl->lfd, 16) < 0) {
        rc = -errno;
        unlink(path);
        goto fail_log;
    }
    ctl->epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0};
    if (ctl->epfd < 0 || epoll_ctl(ctl->epfd, EPOLL_CTL_ADD, ctl->lfd, &ev) < 0) {
        rc = -errno;
        unlink(path);
        goto fail_log;
    }
    *ctl_p = ctl;
    return 0;

fail_log:
    sd_ctl__log(ctl, BASE_LOG_ERROR, "control socket %s: %s", path, strerror(-rc));
fail:
    if (ctl->epfd >= 0)
        close(ctl->epfd);
    if (ctl->lfd >= 0)
        close(ctl->lfd);
    free(ctl);
    return rc;
}

static void sd_ctl__close(struct sd_ctl *ctl, struct sd_ctl__conn *c)
{
    epoll_ctl(ctl->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    c->id = 0;
    c->len = 0;
}

void sd_ctl_destroy(struct sd_ctl *ctl)
{
    if (!ctl)
        return;
    for (unsigned i = 0; i < SD_CTL_CONNS_MAX; i++)
        if (ctl->conns[i].id)
            sd_ctl__close(ctl, &ctl->conns[i]);
    if (ctl->lfd >= 0) {
        close(ctl->lfd);
        unlink(ctl->path);
    }
    close(ctl->epfd);
    free(ctl);
}

int sd_ctl_fd(const struct sd_ctl *ctl)
{
    return ctl->epfd;
}

void sd_ctl_stop_accepting(struct sd_ctl *ctl)
{
    if (ctl->lfd < 0)
        return;
    epoll_ctl(ctl->epfd, EPOLL_CTL_DEL, ctl->lfd, NULL);
    close(ctl->lfd);
    ctl->lfd = -1;
    unlink(ctl->path);
}

static void sd_ctl__accept(struct sd_ctl *ctl)
{
    for (;;) {
        int fd = accept4(ctl->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EINTR)
                sd_ctl__log(ctl, BASE_LOG_WARN, "control: accept failed: %s", strerror(errno));
            return;
        }
        struct ucred cred;
        socklen_t clen = sizeof cred;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0 ||
            (cred.uid != geteuid() && cred.uid != 0)) {
            sd_ctl__log(ctl, BASE_LOG_WARN,
                        "control: refused pid %ld uid %u: only uid %u may control stagingd",
                        (long)cred.pid, (unsigned)cred.uid, (unsigned)geteuid());
            close(fd);
            continue;
        }
        struct sd_ctl__conn *c = NULL;
        for (unsigned i = 0; i < SD_CTL_CONNS_MAX && !c; i++)
            if (!ctl->conns[i].id)
                c = &ctl->conns[i];
        if (!c) {
            static const char busy[] = "error: too many control connections\n";
            if (send(fd, busy, sizeof busy - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
                (void)0;
            close(fd);
            continue;
        }
        struct timeval tv = {.tv_sec = 1};
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u64 = ++ctl->next_id};
        if (epoll_ctl(ctl->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
            close(fd);
            continue;
        }
        c->id = ev.data.u64;
        c->fd = fd;
        c->len = 0;
        sd_ctl__log(ctl, BASE_LOG_DEBUG, "control: connection %llu from pid %ld",
                    (unsigned long long)c->id, (long)cred.pid);
    }
}

static struct sd_ctl__conn *sd_ctl__find(struct sd_ctl *ctl, uint64_t id)
{
    for (unsigned i = 0; i < SD_CTL_CONNS_MAX; i++)
        if (id && ctl->conns[i].id == id)
            return &ctl->conns[i];
    return NULL;
}

/* Reads what @c sent and runs each complete line. */
static void sd_ctl__read(struct sd_ctl *ctl, struct sd_ctl__conn *c)
{
    uint64_t id = c->id;
    for (;;) {
        ssize_t n = recv(c->fd, c->buf + c->len, sizeof c->buf - c->len, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0) {
            sd_ctl__close(ctl, c);
            return;
        }
        c->len += (size_t)n;
        char *nl;
        while ((nl = memchr(c->buf, '\n', c->len)) != NULL) {
            char line[SD_CTL_LINE_MAX];
            size_t llen = (size_t)(nl - c->buf);
            memcpy(line, c->buf, llen);
            line[llen] = '\0';
            if (llen && line[llen - 1] == '\r')
                line[llen - 1] = '\0';
            c->len -= llen + 1;
            memmove(c->buf, nl + 1, c->len);
            ctl->fn(ctl->ctx, id, line);
            /* The command may have closed it (quit, a failed send). */
            if (sd_ctl__find(ctl, id) != c)
                return;
        }
        if (c->len == sizeof c->buf) {
            sd_ctl_send(ctl, id, "error: command line longer than 4095 bytes\n");
            if (sd_ctl__find(ctl, id) == c)
                sd_ctl__close(ctl, c);
            return;
        }
    }
}

void sd_ctl_process(struct sd_ctl *ctl)
{
    struct epoll_event evs[16];
    int n = epoll_wait(ctl->epfd, evs, 16, 0);
    for (int i = 0; i < n; i++) {
        if (evs[i].data.u64 == 0) {
            if (ctl->lfd >= 0)
                sd_ctl__accept(ctl);
            continue;
        }
        struct sd_ctl__conn *c = sd_ctl__find(ctl, evs[i].data.u64);
        if (c)
            sd_ctl__read(ctl, c);
    }
}

int sd_ctl_send(struct sd_ctl *ctl, uint64_t conn, const char *text)
{
    struct sd_ctl__conn *c = sd_ctl__find(ctl, conn);
    if (!c)
        return -ENOENT;
    size_t len = strlen(text), off = 0;
    while (off < len) {
        /* Blocking with SO_SNDTIMEO: replies are small and local. */
        int fl = fcntl(c->fd, F_GETFL);
        fcntl(c->fd, F_SETFL, fl & ~O_NONBLOCK);
        ssize_t n = send(c->fd, text + off, len - off, MSG_NOSIGNAL);
        fcntl(c->fd, F_SETFL, fl);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int rc = n < 0 ? -errno : -EPIPE;
            sd_ctl__log(ctl, BASE_LOG_WARN, "control: connection %llu: reply not delivered: %s",
                        (unsigned long long)conn, strerror(-rc));
            sd_ctl__close(ctl, c);
            return rc;
        }
        off += (size_t)n;
    }
    return 0;
}
