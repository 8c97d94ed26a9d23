/* Handing the listening socket from one agent process to the next (a
 * lease-agent that faulted re-executes itself, docs/agent.md "Faults"):
 * the old server keeps the socket and its lock open instead of closing
 * them, and the new one adopts them after checking that they are what the
 * path says, so the socket file never disappears and connections made in
 * between wait in its backlog. Depends on internal.h; used by server.c and
 * listen.c. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "listen.h"

void ga_server_listener_keep(struct ga_server *srv)
{
    __atomic_store_n(&srv->keep_req, 1, __ATOMIC_RELEASE);
}

int ga_server_listener_take(struct ga_server *srv, struct ga_server_listener *listener_p)
{
    if (!srv->kept || srv->lfd < 0 || srv->lockfd < 0)
        return -ENOENT;
    *listener_p = (struct ga_server_listener){.listen_fd = srv->lfd, .lock_fd = srv->lockfd};
    srv->lfd = srv->lockfd = -1;
    return 0;
}

/* A refusal of an inherited fd: what was expected, what was found. */
static int ga_handover__refuse(struct ga_server *srv, int rc, const char *what, const char *found)
{
    base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS,
             "inherited %s: expected %s, found %s", what,
             strcmp(what, "lock") == 0 ? "the held lock file of the socket path"
                                       : "the socket listening at the socket path",
             found);
    return rc;
}

static int ga_handover__socket(struct ga_server *srv, int fd)
{
    int v = 0;
    socklen_t len = sizeof v;
    char found[160];
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &len) < 0 || v != AF_UNIX) {
        snprintf(found, sizeof found, "fd %d, not a Unix socket", fd);
        return ga_handover__refuse(srv, -ENOTSOCK, "socket", found);
    }
    len = sizeof v;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &len) < 0 || v != SOCK_SEQPACKET) {
        snprintf(found, sizeof found, "fd %d of socket type %d", fd, v);
        return ga_handover__refuse(srv, -EPROTOTYPE, "socket", found);
    }
    len = sizeof v;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &len) < 0 || v != 1) {
        snprintf(found, sizeof found, "fd %d, not listening", fd);
        return ga_handover__refuse(srv, -EINVAL, "socket", found);
    }
    struct sockaddr_un sa;
    len = sizeof sa;
    memset(&sa, 0, sizeof sa);
    if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0 ||
        strncmp(sa.sun_path, srv->path, sizeof sa.sun_path) != 0) {
        snprintf(found, sizeof found, "fd %d bound to '%.100s'", fd, sa.sun_path);
        return ga_handover__refuse(srv, -EADDRNOTAVAIL, "socket", found);
    }
    struct stat st;
    if (lstat(srv->path, &st) < 0 || !S_ISSOCK(st.st_mode)) {
        snprintf(found, sizeof found, "no socket file at %.120s", srv->path);
        return ga_handover__refuse(srv, -ENOENT, "socket", found);
    }
    return 0;
}

static int ga_handover__lock(struct ga_server *srv, int fd)
{
    struct stat a, b;
    char found[160];
    if (fstat(fd, &a) < 0 || !S_ISREG(a.st_mode) || stat(srv->lock_path, &b) < 0 ||
        a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
        snprintf(found, sizeof found, "fd %d, not the file at %.120s", fd, srv->lock_path);
        return ga_handover__refuse(srv, -EBADF, "lock", found);
    }
    /* Held by this open file already, so this succeeds at once; any other
     * holder would make it fail. */
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        snprintf(found, sizeof found, "fd %d, whose lock another process holds", fd);
        return ga_handover__refuse(srv, -EADDRINUSE, "lock", found);
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)n, 0) != n)
        base_log(&srv->cfg.log, BASE_LOG_WARN, GA_SERVER__SUBSYS,
                 "lock file %s: rewriting our pid failed: %s", srv->lock_path, strerror(errno));
    return 0;
}

int ga_server__listen_adopt(struct ga_server *srv, const struct ga_server_listener *l)
{
    int rc = ga_handover__lock(srv, l->lock_fd);
    if (rc == 0)
        rc = ga_handover__socket(srv, l->listen_fd);
    if (rc < 0)
        return rc;
    int fl = fcntl(l->listen_fd, F_GETFL);
    if (fl < 0 || fcntl(l->listen_fd, F_SETFL, fl | O_NONBLOCK) < 0 ||
        fcntl(l->listen_fd, F_SETFD, FD_CLOEXEC) < 0 ||
        fcntl(l->lock_fd, F_SETFD, FD_CLOEXEC) < 0) {
        rc = -errno;
        base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS,
                 "inherited socket: fcntl failed: %s", strerror(-rc));
        return rc;
    }
    srv->lockfd = l->lock_fd;
    srv->lfd = l->listen_fd;
    srv->listening = true; /* the path is ours to remove at a normal stop */
    base_log(&srv->cfg.log, BASE_LOG_NOTICE, GA_SERVER__SUBSYS,
             "took over the listening socket %s (fd %d) and its lock (fd %d) from the agent "
             "process before this one",
             srv->path, l->listen_fd, l->lock_fd);
    return 0;
}
