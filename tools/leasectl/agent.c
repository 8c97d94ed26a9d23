/* leasectl's agent connection: HELLO, one STATS_REQUEST for every client,
 * the lists when the agent offers them (1.4), close. Every answer passes
 * lt_validate_from_agent and lt_validate_reply_matches before a field is
 * read, as in any client. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "leasectl.h"
#include "lease_types/validate.h"

static double lctl__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Sends @req and receives the validated answer to it into @buf. Returns 0
 * (the answer may be an ERROR), or -errno with @a->err set. */
static int lctl__call(struct lctl_agent *a, int fd, const void *req, size_t len,
                      union lt_msg_buffer *buf, int timeout_ms)
{
    const struct lt_header *q = req;
    if (send(fd, req, len, MSG_NOSIGNAL) != (ssize_t)len) {
        int rc = -errno;
        snprintf(a->err, sizeof a->err, "the agent at %s closed the connection before %s: %s",
                 a->path, lt_msg_type_name(q->type), strerror(-rc));
        return rc;
    }
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int n = poll(&p, 1, timeout_ms);
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0) {
            snprintf(a->err, sizeof a->err, "the agent at %s did not answer %s within %d ms",
                     a->path, lt_msg_type_name(q->type), timeout_ms);
            return -ETIMEDOUT;
        }
        ssize_t got = recv(fd, buf->bytes, sizeof buf->bytes, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            /* The agent closes a peer it does not allow before reading. */
            snprintf(a->err, sizeof a->err,
                     "the agent at %s closed the connection before answering %s (%s): is uid %u "
                     "allowed? (lease-agent --allow-uid %u)",
                     a->path, lt_msg_type_name(q->type), got < 0 ? strerror(errno) : "EOF",
                     (unsigned)geteuid(), (unsigned)geteuid());
            return got < 0 ? -errno : -ECONNRESET;
        }
        uint16_t type = 0;
        enum lt_error e = lt_validate_from_agent(buf->bytes, (size_t)got, &type);
        if (e == LT_OK)
            e = lt_validate_reply_matches(req, buf->bytes);
        if (e != LT_OK) {
            snprintf(a->err, sizeof a->err,
                     "the agent at %s answered %s with a message refused: %s", a->path,
                     lt_msg_type_name(q->type), lt_error_name(e));
            return -EPROTO;
        }
        return 0;
    }
}

static int lctl__refused(struct lctl_agent *a, const union lt_msg_buffer *buf, const char *what)
{
    const struct lt_msg_error *m = (const struct lt_msg_error *)(const void *)buf->bytes;
    snprintf(a->err, sizeof a->err, "the agent at %s refused %s: %s: \"%s\"", a->path, what,
             lt_error_name(m->code), m->message);
    return m->err < 0 ? m->err : -EPROTO;
}

/* Bounds a list, so a misbehaving agent's cursor cannot keep leasectl
 * paging forever. */
#define LCTL__LIST_MAX (1u << 20)

/* Pages through one list (@type: LEASE_LIST_REQUEST or SEGMENT_LIST_REQUEST)
 * of every client into a malloc'ed array. Returns 0, or -errno with
 * a->list_err saying why. */
static int lctl__list(struct lctl_agent *a, int fd, uint16_t type, int timeout_ms, void **items_p,
                      uint32_t *n_p)
{
    size_t esz = type == LT_MSG_LEASE_LIST_REQUEST ? sizeof(struct lt_lease_info)
                                                   : sizeof(struct lt_segment_info);
    unsigned char *items = NULL;
    uint32_t n = 0;
    uint64_t cursor = 0, rid = 100;
    union lt_msg_buffer buf;
    int rc = 0;
    do {
        struct lt_msg_list_request q;
        lt_msg_init(&q, sizeof q, type, ++rid);
        q.cursor = cursor;
        rc = lctl__call(a, fd, &q, sizeof q, &buf, timeout_ms);
        if (rc < 0) {
            snprintf(a->list_err, sizeof a->list_err, "%s", a->err);
            break;
        }
        if (buf.hdr.type == LT_MSG_ERROR) {
            char what[64];
            snprintf(what, sizeof what, "%s", lt_msg_type_name(type));
            rc = lctl__refused(a, &buf, what);
            snprintf(a->list_err, sizeof a->list_err, "%s", a->err);
            a->err[0] = '\0';
            break;
        }
        /* Both replies share the fixed part. */
        const struct lt_msg_lease_list_reply *r = (const void *)buf.bytes;
        if (n + r->count > LCTL__LIST_MAX) {
            snprintf(a->list_err, sizeof a->list_err,
                     "the agent at %s lists more than %u entries: stopped there", a->path,
                     LCTL__LIST_MAX);
            rc = -E2BIG;
            break;
        }
        unsigned char *more = realloc(items, ((size_t)n + r->count + 1) * esz);
        if (!more) {
            snprintf(a->list_err, sizeof a->list_err, "out of memory");
            rc = -ENOMEM;
            break;
        }
        items = more;
        memcpy(items + (size_t)n * esz, buf.bytes + sizeof *r, (size_t)r->count * esz);
        n += r->count;
        cursor = (r->flags & LT_LIST_F_MORE) ? r->next_cursor : 0;
    } while (cursor);
    if (rc < 0) {
        free(items);
        return rc;
    }
    *items_p = items;
    *n_p = n;
    return 0;
}

void lctl_agent_free(struct lctl_agent *a)
{
    free(a->leases);
    free(a->segments);
    a->leases = NULL;
    a->segments = NULL;
    a->nleases = a->nsegments = 0;
}

int lctl_agent_query(const char *path, int timeout_ms, struct lctl_agent *a)
{
    return lctl_agent_query_lists(path, timeout_ms, 0, a);
}

int lctl_agent_query_lists(const char *path, int timeout_ms, unsigned what, struct lctl_agent *a)
{
    memset(a, 0, sizeof *a);
    snprintf(a->path, sizeof a->path, "%s", path);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) == 0 || strlen(path) >= sizeof addr.sun_path) {
        snprintf(a->err, sizeof a->err, "agent socket '%s': expected a path of 1..%zu bytes", path,
                 sizeof addr.sun_path - 1);
        return -ENAMETOOLONG;
    }
    memcpy(addr.sun_path, path, strlen(path));
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(a->err, sizeof a->err, "socket: %s", strerror(errno));
        return -errno;
    }
    int rc = 0;
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        rc = -errno;
        snprintf(a->err, sizeof a->err,
                 "no agent answers at %s (%s): start one (lease-agent --socket %s, or "
                 "lease-agent-host on a machine without a GPU) or pass --agent PATH",
                 path, strerror(-rc), path);
        goto out;
    }
    struct ucred cred;
    socklen_t clen = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) == 0) {
        a->pid = cred.pid;
        a->uid = cred.uid;
    }

    union lt_msg_buffer buf;
    struct lt_msg_hello hello;
    lt_msg_init(&hello, sizeof hello, LT_MSG_HELLO, 1);
    hello.version_min = 1;
    hello.version_max = LT_PROTO_VERSION;
    /* Asks for the lists only: no doorbell, no batches. An agent before
     * 1.4 does not know the bit and grants nothing. */
    hello.caps = LT_CAP_INTROSPECT;
    lt_name_set(hello.name, sizeof hello.name, "leasectl");
    rc = lctl__call(a, fd, &hello, sizeof hello, &buf, timeout_ms);
    if (rc < 0)
        goto out;
    if (buf.hdr.type == LT_MSG_ERROR) {
        rc = lctl__refused(a, &buf, "HELLO");
        goto out;
    }
    memcpy(&a->hello, buf.bytes, sizeof a->hello);
    a->self_id = a->hello.client_id;
    a->up = 1;
    a->lists = (a->hello.caps & LT_CAP_INTROSPECT) != 0;

    struct lt_msg_stats_request sreq;
    lt_msg_init(&sreq, sizeof sreq, LT_MSG_STATS_REQUEST, 2);
    sreq.flags = LT_STATS_F_ALL_CLIENTS;
    double t0 = lctl__now_ms();
    rc = lctl__call(a, fd, &sreq, sizeof sreq, &buf, timeout_ms);
    a->rtt_ms = lctl__now_ms() - t0;
    if (rc < 0)
        goto out;
    if (buf.hdr.type == LT_MSG_ERROR) {
        rc = lctl__refused(a, &buf, "STATS_REQUEST");
        goto out;
    }
    const struct lt_msg_stats_reply *r = (const struct lt_msg_stats_reply *)(const void *)buf.bytes;
    a->uptime_ns = r->uptime_ns;
    memcpy(a->classes, r->classes, sizeof a->classes);
    for (uint32_t i = 0; i < r->client_count && i < LT_MAX_STATS_CLIENTS; i++)
        if (r->clients[i].client_id != a->self_id)
            a->clients[a->nclients++] = r->clients[i];
    a->have_stats = 1;
    /* A refused list is said in list_err; the STATS answer stands. */
    if (a->lists && (what & LCTL_WANT_LEASES) &&
        lctl__list(a, fd, LT_MSG_LEASE_LIST_REQUEST, timeout_ms, (void **)&a->leases,
                   &a->nleases) == 0)
        a->have_leases = 1;
    if (a->lists && (what & LCTL_WANT_SEGMENTS) && !a->list_err[0] &&
        lctl__list(a, fd, LT_MSG_SEGMENT_LIST_REQUEST, timeout_ms, (void **)&a->segments,
                   &a->nsegments) == 0)
        a->have_segments = 1;
out:
    close(fd);
    return rc;
}

void lctl_agent_missing(const struct lctl_agent *a, const char *what, const char *request,
                        char *buf, size_t len)
{
    snprintf(buf, len,
             "the agent at %s does not offer %s (protocol v%u, no LT_CAP_INTROSPECT): it needs "
             "%s (docs/operations.md, \"Agent queries\"); shown: what STATS_REPLY counts",
             a->path, what, a->up ? (unsigned)a->hello.version : (unsigned)LT_PROTO_VERSION,
             request);
}
