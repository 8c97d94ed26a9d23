/* The server's life and its event loop: create, run, stop, destroy; accept,
 * receive, hand each message to dispatch.c, drain the jobs finished off the
 * loop (jobs.c) back to it, signals and stats. The top of gpu/server: it
 * calls down into dispatch.c, conn.c, jobs.c and listen.c, none calls it. */
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
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/fdpass.h"
#include "base/notify.h"
#include "base/sigbus.h"
#include "conn.h"
#include "dispatch.h"
#include "jobs.h"
#include "listen.h"
#include "server_metrics.h"
#include "lease_types/socket.h"

#define GA_DEFAULT_MAX_SEGMENTS 1024u
/* Fds the agent keeps for itself (stdio, log, lock, sockets, epoll,
 * eventfd, signalfd, the driver's); each client also holds its connection
 * and its words area, and the rest is for segments. */
#define GA_FD_RESERVE 128u
#define GA_FDS_PER_CLIENT 2u
#define GA_DEFAULT_MAX_INFLIGHT 4096u
#define GA_DEFAULT_MAX_QUEUED (1ull << 20)
#define GA_RECV_BURST 64 /* messages read from one client before serving others */
#define GA_MAX_FDS 8     /* fds kept from one message; more is a broken peer */
#define GA_EPOLL_BATCH 64

const char *ga_server_socket_path(const struct ga_server *srv)
{
    return srv->path;
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
        base_log(&srv->cfg.log, BASE_LOG_INFO, GA_SERVER__SUBSYS, "refusal not delivered: %s",
                 strerror(errno));
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
        base_log(&srv->cfg.log, BASE_LOG_WARN, GA_SERVER__SUBSYS,
                 "refused peer pid %ld uid %u: %" PRIu32 " clients connected, the limit", (long)pid,
                 (unsigned)uid, srv->nconns);
        ga_server__refuse_fd(srv, fd, LT_E_LIMIT, "too many clients connected");
        return;
    }
    uint32_t same_uid = 0;
    for (struct ga_server__conn *o = srv->conns; o; o = o->next)
        same_uid += !o->closed && o->uid == uid;
    if (same_uid >= srv->cfg.max_clients_per_uid) {
        char text[LT_ERROR_MSG_LEN];
        srv->refused++;
        base_log(&srv->cfg.log, BASE_LOG_WARN, GA_SERVER__SUBSYS,
                 "refused peer pid %ld uid %u: it holds %" PRIu32 " of %" PRIu32
                 " connections, the per-uid limit (--max-clients-per-uid)",
                 (long)pid, (unsigned)uid, same_uid, srv->cfg.max_clients_per_uid);
        snprintf(text, sizeof text, "uid %u holds %" PRIu32 " connections, the per-uid limit",
                 (unsigned)uid, same_uid);
        ga_server__refuse_fd(srv, fd, LT_E_LIMIT, text);
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
    rc = ga_exec_client_add(srv->ex, c->client.value);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
    if (rc == 0 && epoll_ctl(srv->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        rc = -errno;
        ga_exec_client_drop(srv->ex, c->client.value);
    }
    if (rc < 0) {
        base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS,
                 "client pid %ld: setting up failed: %s", (long)pid, strerror(-rc));
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
    base_log(&srv->cfg.log, BASE_LOG_INFO, GA_SERVER__SUBSYS,
             "client %" PRIu32 " connected: pid %ld uid %u", c->id, (long)pid, (unsigned)uid);
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
            /* Level-triggered: stop polling until an fd frees, or we spin. */
            base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS,
                     "accept: out of file descriptors (%s, RLIMIT_NOFILE %" PRIu64
                     "); not accepting until one is freed",
                     strerror(errno), srv->nofile);
            struct epoll_event ev = {.events = 0, .data.ptr = &srv->src_listen};
            if (epoll_ctl(srv->epfd, EPOLL_CTL_MOD, srv->lfd, &ev) == 0) {
                srv->accept_paused = true;
                srv->fds_freed = false;
            }
        } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
            base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS, "accept failed: %s",
                     strerror(errno));
        }
        return;
    }
}

static void ga_server__fds_close(struct ga_server *srv, int *fds, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    if (n)
        ga_server__fd_freed(srv);
}

/* A packet whose fds the kernel could not install (MSG_CTRUNC): this
 * process is out of file descriptors, which is not the peer's doing. A
 * SEGMENT_OFFER is refused with LT_E_LIMIT and the numbers, the connection
 * kept; anything else is served with what arrived. Returns 1 when answered. */
static int ga_server__fds_dropped(struct ga_server__conn *c, const void *buf, size_t len)
{
    struct ga_server *srv = c->srv;
    uint16_t type = 0;
    if (lt_validate_from_client(buf, len, &type) != LT_OK || type != LT_MSG_SEGMENT_OFFER)
        return 0;
    struct lease_stats st = {0};
    lease_service_stats(srv->svc, &st);
    base_log(&srv->cfg.log, BASE_LOG_WARN, GA_SERVER__SUBSYS,
             "client %" PRIu32 ": the fd of its SEGMENT_OFFER could not be received: out of file "
             "descriptors (RLIMIT_NOFILE %" PRIu64 ", %" PRIu64 " segments held); answered "
             "LT_E_LIMIT",
             c->id, srv->nofile, st.segments);
    ga_server__send_error(c, ((const struct lt_header *)buf)->request_id, LT_MSG_SEGMENT_OFFER,
                          LT_E_LIMIT, 0, LT_INDEX_NONE,
                          "agent out of file descriptors (limit %" PRIu64 ", %" PRIu64
                          " segments held): retire one or retry",
                          srv->nofile, st.segments);
    return 1;
}

/* Reads one packet. Returns 1 when one was handled, 0 when none is waiting. */
static int ga_server__recv_one(struct ga_server__conn *c)
{
    union lt_msg_buffer buf;
    int fds[GA_MAX_FDS];
    struct base_recv_info info;
    ssize_t n =
        base_recv_fds(c->fd, buf.bytes, sizeof buf.bytes, fds, GA_MAX_FDS, MSG_DONTWAIT, &info);
    if (n < 0) {
        if (n == -EAGAIN || n == -EWOULDBLOCK)
            return 0;
        char why[96];
        snprintf(why, sizeof why, "recvmsg failed: %s", strerror((int)-n));
        ga_server__conn_kill(c, why);
        return 0;
    }
    size_t nfds = info.nfds;
    if (n == 0) {
        ga_server__fds_close(c->srv, fds, nfds);
        ga_server__conn_kill(c, nfds || info.nfds_closed ? "empty packet (with fds)"
                                                         : "peer closed the connection");
        return 0;
    }
    /* Fds the kernel had to drop: our fd table is full, not the peer's fault. */
    if ((info.flags & BASE_RECV_CTRUNC) && !(info.flags & BASE_RECV_EXTRA_FDS) &&
        !(info.flags & BASE_RECV_TRUNC) && (size_t)n <= LT_MSG_MAX_BYTES) {
        if (ga_server__fds_dropped(c, buf.bytes, (size_t)n)) {
            ga_server__fds_close(c->srv, fds, nfds);
            return 1;
        }
    }
    /* More fds than any message carries: the peer is broken. */
    if (info.flags & BASE_RECV_EXTRA_FDS) {
        ga_server__fds_close(c->srv, fds, nfds);
        ga_server__send_error(c, 0, 0, LT_E_FD_COUNT, 0, LT_INDEX_NONE,
                              "control data truncated: expected at most 1 fd, found more than "
                              "%d",
                              GA_MAX_FDS);
        ga_server__conn_kill(c, "truncated control data");
        return 0;
    }
    if ((info.flags & BASE_RECV_TRUNC) || (size_t)n > LT_MSG_MAX_BYTES) {
        ga_server__fds_close(c->srv, fds, nfds);
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

static void ga_server__drain_done(struct ga_server *srv)
{
    for (struct ga_server__job *j; (j = ga_server__jobs_take(srv));) {
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
    ga_server__metrics_serve(srv);
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

/* ---- signals and stats -------------------------------------------------- */

static void ga_server__log_text(struct ga_server *srv, char *text)
{
    for (char *line = text, *nl; line && *line; line = nl) {
        nl = strchr(line, '\n');
        if (nl)
            *nl++ = '\0';
        base_log(&srv->cfg.log, BASE_LOG_INFO, GA_SERVER__SUBSYS, "%s", line);
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
    need = ga_exec_stats_format(srv->ex, NULL, 0);
    buf = need > 0 ? malloc((size_t)need + 1) : NULL;
    if (buf) {
        ga_exec_stats_format(srv->ex, buf, (size_t)need + 1);
        ga_server__log_text(srv, buf);
        free(buf);
    }
    base_log(&srv->cfg.log, BASE_LOG_INFO, GA_SERVER__SUBSYS,
             "server stats: socket=%s clients=%" PRIu32 " accepted=%" PRIu64 " refused=%" PRIu64
             " segments=%zu uptime_s=%.3f",
             srv->path, srv->nconns, srv->accepted, srv->refused, base_u64map_len(&srv->segs),
             (double)(base_now_ns() - srv->start_ns) / 1e9);
    for (struct ga_server__conn *c = srv->conns; c; c = c->next)
        base_log(&srv->cfg.log, BASE_LOG_INFO, GA_SERVER__SUBSYS,
                 "  client %" PRIu32 " pid %ld uid %u name '%s'%s: segments=%" PRIu32
                 " leases_granted=%" PRIu64 " submits=%" PRIu64 " inflight=%" PRIu32
                 " queued_bytes=%" PRIu64,
                 c->id, (long)c->pid, (unsigned)c->uid, c->hello ? c->name : "",
                 c->closed ? " (closed, draining)" : "", c->segments, c->leases_granted, c->submits,
                 c->inflight, c->oq_bytes);
}

static void ga_server__signal(struct ga_server *srv)
{
    struct signalfd_siginfo si;
    while (read(srv->sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGUSR1) {
            base_log(&srv->cfg.log, BASE_LOG_INFO, GA_SERVER__SUBSYS, "SIGUSR1: stats follow");
            ga_server_stats_log(srv);
        } else if (si.ssi_signo == SIGHUP) {
            /* logrotate moved the file: lines go to a new one at the path,
             * this one the first */
            int rc = srv->cfg.log_file ? base_log_file_reopen(srv->cfg.log_file) : 0;
            if (rc < 0)
                base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS,
                         "SIGHUP from pid %u: log file not reopened: %s (lines go to the old "
                         "one)",
                         si.ssi_pid, strerror(-rc));
            else
                base_log(&srv->cfg.log, BASE_LOG_INFO, GA_SERVER__SUBSYS,
                         "SIGHUP from pid %u: %s", si.ssi_pid,
                         srv->cfg.log_file ? "log file reopened" : "no log file to reopen");
        } else {
            base_log(&srv->cfg.log, BASE_LOG_INFO, GA_SERVER__SUBSYS, "%s from pid %u: stopping",
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
        ga_exec_shutdown(srv->ex);
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
    base_log(&srv->cfg.log, BASE_LOG_INFO, GA_SERVER__SUBSYS,
             "serving %s (pid %ld, executor '%s'%s, budgets PINNED %" PRIu64 " MAPPED %" PRIu64
             " bytes)",
             srv->path, (long)getpid(), ga_executor_info(srv->ex)->name,
             (ga_executor_info(srv->ex)->caps & LT_CAP_HOST_BACKEND) ? ": HOST BACKEND, no GPU"
                                                                     : "",
             srv->cfg.budget_pinned, srv->cfg.budget_mapped);
    while (!srv->stopping) {
        int n = epoll_wait(srv->epfd, evs, GA_EPOLL_BATCH, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = -errno;
            base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS, "epoll_wait failed: %s",
                     strerror(-rc));
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
        ga_server__accept_resume(srv);
    }
    if (srv->cfg.notify)
        (void)base_notify("STOPPING=1"); /* outside a Type=notify unit: nothing */
    if (srv->cfg.on_stopping)
        srv->cfg.on_stopping(srv->cfg.on_stopping_arg);
    ga_server__drain(srv);
    base_log(&srv->cfg.log, BASE_LOG_INFO, GA_SERVER__SUBSYS,
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
    base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS, "epoll_ctl(ADD) failed: %s",
             strerror(-rc));
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
        base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS,
                 "socket path: expected a file name, found '%s'", srv->path);
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
    const char *exname = ga_executor_info(srv->ex)->name;
    snprintf(name, sizeof name, "ga-%s", exname ? exname : "agent");
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
    ga_server__metrics_stop(srv); /* its HTTP thread reads the service */
    ga_server__drain(srv);
    lease_service_destroy(srv->svc);
    srv->svc = NULL;
    struct base_u64map_iter it;
    base_u64map_iter_init(&srv->segs, &it);
    for (struct base_u64map_entry *e; (e = base_u64map_iter_next(&srv->segs, &it));)
        ga_server__seg_unref(e->ptr);
    base_u64map_fini(&srv->segs);
    base_u64map_fini(&srv->seg_slots);
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
    free(srv->grant_reqs);
    free(srv->grant_res);
    free(srv->release_res);
    free(srv->release_mine);
    free(srv);
}

/* Raises RLIMIT_NOFILE's soft limit to the hard one and splits what it
 * allows: GA_FD_RESERVE for the agent, GA_FDS_PER_CLIENT per connection,
 * the rest for segments; a per-client segment limit not given is that
 * share, at most GA_DEFAULT_MAX_SEGMENTS. Refuses (with the numbers) a
 * limit too small for max_clients. */
static int ga_server__fds_plan(struct ga_server *srv)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0) {
        int rc = -errno;
        base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS,
                 "getrlimit(RLIMIT_NOFILE) failed: %s", strerror(-rc));
        return rc;
    }
    rlim_t was = rl.rlim_cur;
    if (rl.rlim_cur != rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
            base_log(&srv->cfg.log, BASE_LOG_WARN, GA_SERVER__SUBSYS,
                     "raising RLIMIT_NOFILE from %llu to %llu failed: %s",
                     (unsigned long long)was, (unsigned long long)rl.rlim_max, strerror(errno));
            rl.rlim_cur = was;
        }
    }
    /* RLIM_INFINITY cannot be: the kernel caps it at fs.nr_open. */
    srv->nofile = rl.rlim_cur == RLIM_INFINITY ? (1ull << 20) : (uint64_t)rl.rlim_cur;
    uint64_t clients = srv->cfg.max_clients;
    uint64_t need = GA_FD_RESERVE + (GA_FDS_PER_CLIENT + 1) * clients;
    if (srv->nofile < need) {
        base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS,
                 "RLIMIT_NOFILE %" PRIu64 " is too small for --max-clients %" PRIu64
                 ": expected at least %" PRIu64 " (%u for the agent, %u per client and a "
                 "segment each); raise the hard limit (ulimit -Hn, LimitNOFILE=) or lower "
                 "--max-clients",
                 srv->nofile, clients, need, GA_FD_RESERVE, GA_FDS_PER_CLIENT);
        return -EMFILE;
    }
    srv->segment_fds = srv->nofile - GA_FD_RESERVE - GA_FDS_PER_CLIENT * clients;
    if (!srv->cfg.max_segments) {
        uint64_t share = srv->segment_fds / clients;
        srv->cfg.max_segments =
            (uint32_t)(share < GA_DEFAULT_MAX_SEGMENTS ? share : GA_DEFAULT_MAX_SEGMENTS);
    }
    base_log(&srv->cfg.log, BASE_LOG_INFO, GA_SERVER__SUBSYS,
             "file descriptors: RLIMIT_NOFILE %" PRIu64 " (soft limit was %llu): %u for the "
             "agent, %u per client for %" PRIu64 " clients, %" PRIu64
             " for segments; segments per client %" PRIu32 " (--max-segments), clients per uid "
             "%" PRIu32 " (--max-clients-per-uid)",
             srv->nofile, (unsigned long long)was, GA_FD_RESERVE, GA_FDS_PER_CLIENT, clients,
             srv->segment_fds, srv->cfg.max_segments, srv->cfg.max_clients_per_uid);
    return 0;
}

int ga_server_create(const struct ga_server_config *cfg, struct ga_server **srv_p)
{
    if (!cfg || !cfg->backend || !cfg->executor || !srv_p)
        return -EINVAL;
    struct ga_server *srv = calloc(1, sizeof(*srv));
    if (!srv)
        return -ENOMEM;
    srv->cfg = *cfg;
    srv->cfg.socket_path = NULL; /* ours are srv->path and friends */
    srv->cfg.allow_uids = NULL;
    srv->cfg.agent_name = NULL;
    if (!srv->cfg.max_clients)
        srv->cfg.max_clients = GA_SERVER_MAX_CLIENTS_DEFAULT;
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
    srv->start_ns = base_now_ns();
    srv->stopping = true; /* nothing to drain until create completes */
    pthread_mutex_init(&srv->mu, NULL);
    pthread_cond_init(&srv->reg_cv, NULL);

    int rc = ga_server__strings(srv, cfg);
    if (rc < 0)
        goto fail;
    if (!srv->cfg.max_clients_per_uid || srv->cfg.max_clients_per_uid > srv->cfg.max_clients)
        srv->cfg.max_clients_per_uid =
            cfg->max_clients_per_uid ? srv->cfg.max_clients
            : srv->nallow > 1        ? (srv->cfg.max_clients / 4 ? srv->cfg.max_clients / 4 : 1)
                                     : srv->cfg.max_clients;
    /* Several uids: two connections' worth, so a daemon and a job of one uid
     * both run full, and one uid holds at most half of the CUDA executor's
     * result slots at the defaults (2 x 4096 of 16384). */
    if (!srv->cfg.max_inflight_per_uid) {
        const uint64_t all = (uint64_t)srv->cfg.max_inflight * srv->cfg.max_clients;
        const uint64_t want = srv->nallow > 1 ? 2ull * srv->cfg.max_inflight : all;
        srv->cfg.max_inflight_per_uid = want > UINT32_MAX ? UINT32_MAX : (uint32_t)want;
    }
    rc = ga_server__fds_plan(srv);
    if (rc < 0)
        goto fail;
    /* A client's memory vanishing under a read must fail that client, not
     * kill the agent (base/sigbus.h). */
    rc = base_guard_install();
    if (rc < 0) {
        base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS,
                 "installing the SIGBUS guard failed: %s", strerror(-rc));
        goto fail;
    }
    srv->grant_reqs = calloc(LT_MAX_BATCH, sizeof(*srv->grant_reqs));
    srv->grant_res = calloc(LT_MAX_BATCH, sizeof(*srv->grant_res));
    srv->release_res = calloc(LT_MAX_BATCH, sizeof(*srv->release_res));
    srv->release_mine = calloc(LT_MAX_BATCH, 1);
    if (!srv->grant_reqs || !srv->grant_res || !srv->release_res || !srv->release_mine) {
        rc = -ENOMEM;
        goto fail;
    }
    struct lease_service_config lc = {
        .budget_pinned = cfg->budget_pinned,
        .budget_mapped = cfg->budget_mapped,
        .default_limits = {.max_segments = srv->cfg.max_segments,
                           .max_mapped_bytes = cfg->max_client_mapped_bytes,
                           .max_staged_bytes = cfg->max_client_staged_bytes},
        .on_release_complete = ga_server__on_release_complete,
        .on_client_drained = ga_server__on_client_drained,
        .cb_arg = srv,
        .log = srv->cfg.log, /* the service names itself: subsystem "lease" */
        .budget_staged = cfg->budget_staged,
        .max_mapped_bytes = cfg->max_mapped_bytes,
        .max_segments_total = srv->segment_fds,
        .seals = cfg->seals,
    };
    struct lt_failure why;
    rc = lease_service_create(&lc, &srv->be, &srv->svc, &why);
    if (rc < 0) {
        base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS, "refusing to start: %s",
                 why.message);
        goto fail;
    }
    srv->epfd = epoll_create1(EPOLL_CLOEXEC);
    srv->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (srv->epfd < 0 || srv->wakefd < 0) {
        rc = -errno;
        base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS, "epoll/eventfd: %s",
                 strerror(-rc));
        goto fail;
    }
    if (cfg->handle_signals) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGUSR1);
        sigaddset(&set, SIGHUP);
        srv->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
        if (srv->sigfd < 0) {
            rc = -errno;
            base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS, "signalfd: %s",
                     strerror(-rc));
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
    rc = ga_server__registrar_start(srv);
    if (rc < 0) {
        base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS, "pthread_create: %s",
                 strerror(-rc));
        goto fail;
    }
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
