/* Where the agent listens and who may talk to it: the runtime directory,
 * the lock file that makes one agent per socket path, the socket itself,
 * and SO_PEERCRED checks on every accepted peer. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "listen.h"

#define GA_LISTEN_BACKLOG 64

static int ga_listen__group(struct ga_server *srv)
{
    if (!srv->cfg.group)
        return 0;
    struct group gr, *res = NULL;
    char buf[4096];
    int rc = getgrnam_r(srv->cfg.group, &gr, buf, sizeof buf, &res);
    if (rc != 0 || !res) {
        base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS,
                 "--group: expected an existing group, found no "
                 "group named '%s'%s%s",
                 srv->cfg.group, rc ? ": " : "", rc ? strerror(rc) : "");
        return rc ? -rc : -ENOENT;
    }
    srv->gid = gr.gr_gid;
    srv->has_group = true;
    return 0;
}

/* Creates the runtime directory, or accepts an existing one only when it is
 * a real directory of ours that nobody else may write to. */
static int ga_listen__dir(struct ga_server *srv)
{
    mode_t mode = srv->has_group ? 0710 : 0700;
    if (mkdir(srv->dir, mode) == 0) {
        /* The umask may have cleared bits we asked for; set them exactly. */
        if (chmod(srv->dir, mode) < 0 ||
            (srv->has_group && chown(srv->dir, (uid_t)-1, srv->gid) < 0)) {
            int e = errno;
            base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS,
                     "runtime directory %s: setting mode %04o%s failed: %s", srv->dir,
                     (unsigned)mode, srv->has_group ? " and group" : "", strerror(e));
            return -e;
        }
        base_log(&srv->cfg.log, BASE_LOG_INFO, GA_SERVER__SUBSYS,
                 "created runtime directory %s (mode %04o)", srv->dir, (unsigned)mode);
        return 0;
    }
    if (errno != EEXIST) {
        int e = errno;
        base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS,
                 "runtime directory %s: mkdir failed: %s", srv->dir, strerror(e));
        return -e;
    }
    struct stat st;
    if (lstat(srv->dir, &st) < 0) {
        int e = errno;
        base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS,
                 "runtime directory %s: lstat failed: %s", srv->dir, strerror(e));
        return -e;
    }
    if (!S_ISDIR(st.st_mode)) {
        base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS,
                 "runtime directory %s: expected a directory, found %s", srv->dir,
                 S_ISLNK(st.st_mode) ? "a symbolic link" : "another kind of file");
        return -ENOTDIR;
    }
    if (st.st_uid != geteuid() || (st.st_mode & 022) != 0) {
        base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS,
                 "runtime directory %s: expected a directory owned by uid %u and writable "
                 "by nobody else, found owner uid %u mode %04o",
                 srv->dir, (unsigned)geteuid(), (unsigned)st.st_uid,
                 (unsigned)(st.st_mode & 07777));
        return -EPERM;
    }
    return 0;
}

/* Reads the pid an agent wrote into its lock file; 0 when unreadable. */
static long ga_listen__holder(int fd)
{
    char buf[32] = {0};
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return 0;
    long pid = strtol(buf, NULL, 10);
    return pid > 0 ? pid : 0;
}

/* Takes "<socket>.lock". A lock file opened just before its previous owner
 * removed it would lock a file nobody else can see: check that the path
 * still names the file we locked, and retry when it does not. */
static int ga_listen__lock(struct ga_server *srv)
{
    for (int attempt = 0; attempt < 8; attempt++) {
        int fd = open(srv->lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
            int e = errno;
            base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS,
                     "lock file %s: open failed: %s", srv->lock_path, strerror(e));
            return -e;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
            int e = errno;
            long pid = ga_listen__holder(fd);
            close(fd);
            if (e == EWOULDBLOCK) {
                base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS,
                         "another lease agent (pid %ld) is serving %s: its lock %s is "
                         "held; stop it first or pass another --socket",
                         pid, srv->path, srv->lock_path);
                return -EADDRINUSE;
            }
            base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS,
                     "lock file %s: flock failed: %s", srv->lock_path, strerror(e));
            return -e;
        }
        struct stat a, b;
        if (fstat(fd, &a) == 0 && stat(srv->lock_path, &b) == 0 && a.st_ino == b.st_ino &&
            a.st_dev == b.st_dev) {
            char pid[32];
            int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
            if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
                int e = errno ? errno : EIO;
                close(fd);
                base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS,
                         "lock file %s: writing our pid "
                         "failed: %s",
                         srv->lock_path, strerror(e));
                return -e;
            }
            srv->lockfd = fd;
            return 0;
        }
        close(fd); /* removed or replaced while we locked it: take the new one */
    }
    base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS,
             "lock file %s: kept changing while being locked", srv->lock_path);
    return -EAGAIN;
}

/* With the lock held, whatever sits at the socket path is a dead agent's. */
static int ga_listen__stale(struct ga_server *srv)
{
    struct stat st;
    if (lstat(srv->path, &st) < 0) {
        if (errno == ENOENT)
            return 0;
        int e = errno;
        base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS,
                 "socket path %s: lstat failed: %s", srv->path, strerror(e));
        return -e;
    }
    if (!S_ISSOCK(st.st_mode)) {
        base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS,
                 "socket path %s: expected nothing or a stale socket, found another kind "
                 "of file; not removing it",
                 srv->path);
        return -EEXIST;
    }
    if (unlink(srv->path) < 0) {
        int e = errno;
        base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS,
                 "stale socket %s: unlink failed: %s", srv->path, strerror(e));
        return -e;
    }
    base_log(&srv->cfg.log, BASE_LOG_WARN, GA_SERVER__SUBSYS,
             "replaced stale socket %s left by an agent that is gone (lock was free)", srv->path);
    return 0;
}

int ga_server__listen_open(struct ga_server *srv)
{
    if (srv->cfg.inherit)
        return ga_server__listen_adopt(srv, srv->cfg.inherit);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(srv->path) >= sizeof sa.sun_path) {
        base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS,
                 "socket path: expected at most %zu bytes, found %zu ('%s')",
                 sizeof sa.sun_path - 1, strlen(srv->path), srv->path);
        return -ENAMETOOLONG;
    }
    memcpy(sa.sun_path, srv->path, strlen(srv->path) + 1);
    int rc = ga_listen__group(srv);
    if (rc == 0)
        rc = ga_listen__dir(srv);
    if (rc == 0)
        rc = ga_listen__lock(srv);
    if (rc == 0)
        rc = ga_listen__stale(srv);
    if (rc < 0)
        return rc;
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        rc = -errno;
        base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS,
                 "socket(AF_UNIX, SOCK_SEQPACKET) failed: %s", strerror(-rc));
        return rc;
    }
    mode_t mode = srv->has_group ? 0660 : 0600;
    const char *step = "bind";
    if (bind(fd, (const struct sockaddr *)&sa, sizeof sa) < 0)
        goto fail;
    srv->listening = true; /* the path is ours to remove from here on */
    step = "chmod";
    if (chmod(srv->path, mode) < 0)
        goto fail;
    step = "chown";
    if (srv->has_group && chown(srv->path, (uid_t)-1, srv->gid) < 0)
        goto fail;
    step = "listen";
    if (listen(fd, GA_LISTEN_BACKLOG) < 0)
        goto fail;
    srv->lfd = fd;
    return 0;

fail:
    rc = -errno;
    base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS, "socket %s: %s failed: %s",
             srv->path, step, strerror(-rc));
    close(fd);
    if (srv->listening)
        unlink(srv->path);
    srv->listening = false;
    return rc;
}

void ga_server__listen_close(struct ga_server *srv)
{
    if (srv->lfd >= 0 && __atomic_load_n(&srv->keep_req, __ATOMIC_ACQUIRE)) {
        /* Handed on: out of the loop, but open and still at its path. */
        epoll_ctl(srv->epfd, EPOLL_CTL_DEL, srv->lfd, NULL);
        srv->kept = true;
        srv->listening = false;
        return;
    }
    if (srv->kept)
        return;
    if (srv->lfd >= 0) {
        close(srv->lfd);
        srv->lfd = -1;
    }
    if (srv->listening) {
        unlink(srv->path);
        srv->listening = false;
    }
}

void ga_server__lock_release(struct ga_server *srv)
{
    if (srv->lockfd < 0 || srv->kept)
        return;
    /* Unlinked while still locked, so no newcomer locks a file about to go. */
    unlink(srv->lock_path);
    close(srv->lockfd);
    srv->lockfd = -1;
}

int ga_server__peer_check(struct ga_server *srv, int fd, pid_t *pid_p, uid_t *uid_p)
{
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0 || len != sizeof cr) {
        base_log(&srv->cfg.log, BASE_LOG_WARN, GA_SERVER__SUBSYS,
                 "refused a peer: SO_PEERCRED failed: %s", strerror(errno));
        return 0;
    }
    *pid_p = cr.pid;
    *uid_p = cr.uid;
    for (size_t i = 0; i < srv->nallow; i++)
        if (srv->allow[i] == cr.uid)
            return 1;
    base_log(&srv->cfg.log, BASE_LOG_WARN, GA_SERVER__SUBSYS,
             "refused peer pid %ld uid %u gid %u: uid not in the allow list (%zu uid%s, "
             "--allow-uid adds one)",
             (long)cr.pid, (unsigned)cr.uid, (unsigned)cr.gid, srv->nallow,
             srv->nallow == 1 ? "" : "s");
    return 0;
}
