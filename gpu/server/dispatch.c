/* The protocol handlers: every message validated with lease-types before a
 * field is read, answered from the lease service or handed to work.c (the
 * executor's requests), refusals turned into ERROR messages with the request
 * id, and the answers of jobs that finished off the loop thread. Lease-types values go to the
 * lease service as they arrived; its refusals come back as struct
 * lt_failure, code and words decided there, and go out unchanged. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conn.h"
#include "dispatch.h"
#include "dispatch_admin.h"
#include "dispatch_launch.h"
#include "jobs.h"
#include "ring.h"
#include "server_metrics.h"
#include "words.h"
#include "work.h"

static uint64_t ga_dispatch__rid(const void *buf)
{
    return ((const struct lt_header *)buf)->request_id;
}

/* What the validator's verdict means for these bytes, in words. */
static void ga_dispatch__explain(const void *buf, size_t len, enum lt_error e, char *out, size_t n)
{
    const struct lt_header *h = buf;
    const char *tn = len >= 8 ? lt_msg_type_name(h->type) : "message";
    switch (e) {
    case LT_E_TRUNCATED:
        snprintf(out, n, "expected at least %zu bytes, received %zu", sizeof *h, len);
        break;
    case LT_E_BAD_MAGIC:
        snprintf(out, n, "expected magic %#x, found %#x", LT_MAGIC, h->magic);
        break;
    case LT_E_BAD_VERSION:
        if (h->version != LT_PROTO_VERSION) {
            snprintf(out, n, "expected protocol version %u, found %u", LT_PROTO_VERSION,
                     h->version);
        } else {
            const struct lt_msg_hello *m = buf;
            snprintf(out, n, "HELLO offers versions %u..%u; this agent speaks %u only",
                     m->version_min, m->version_max, LT_PROTO_VERSION);
        }
        break;
    case LT_E_LENGTH_MISMATCH:
        snprintf(out, n, "header says %u bytes, received %zu", h->length, len);
        break;
    case LT_E_UNKNOWN_TYPE:
        snprintf(out, n, "message type %u is not defined in protocol v1", h->type);
        break;
    case LT_E_WRONG_DIRECTION:
        snprintf(out, n, "%s is sent by the agent, not to it", tn);
        break;
    case LT_E_BAD_LENGTH:
        snprintf(out, n, "%s of %zu bytes: not the length its type and count require", tn, len);
        break;
    case LT_E_BAD_REQUEST_ID:
        snprintf(out, n, "%s with request id 0: expected a nonzero id", tn);
        break;
    default:
        snprintf(out, n, "%s: %s", tn, lt_error_describe(e));
        break;
    }
}

/* ---- handshake ---------------------------------------------------------- */

static void ga_dispatch__hello(struct ga_server__conn *c, const struct lt_msg_hello *m)
{
    struct ga_server *srv = c->srv;
    struct lt_msg_hello_reply r;
    lt_msg_init(&r, sizeof r, LT_MSG_HELLO_REPLY, m->hdr.request_id);
    r.version = LT_PROTO_VERSION;
    /* Batched release-completes and the lists are the server's own,
     * whatever the executor. */
    const struct ga_executor_info *ex = ga_executor_info(srv->ex);
    r.caps = (m->caps & ex->caps & LT_CAP_CLIENT_KNOWN) |
             (m->caps & (LT_CAP_RC_BATCH | LT_CAP_WORDS | LT_CAP_INTROSPECT)) |
             (ex->caps & LT_CAP_HOST_BACKEND);
    r.client_id = c->id;
    r.max_lease_batch = LT_MAX_BATCH;
    r.max_streams = ex->max_streams;
    r.max_events = ex->max_events;
    r.max_segments = srv->cfg.max_segments;
    r.max_segment_bytes = srv->cfg.max_segment_bytes;
    r.class_budget[LT_CLASS_STAGED] = UINT64_MAX;
    r.class_budget[LT_CLASS_PINNED] = srv->cfg.budget_pinned;
    r.class_budget[LT_CLASS_MAPPED] = srv->cfg.budget_mapped;
    lt_name_set(r.agent_name, sizeof r.agent_name, srv->agent_name);
    c->hello = true;
    c->caps = r.caps;
    memcpy(c->name, m->name, sizeof c->name);
    base_log(&srv->cfg.log, BASE_LOG_INFO, GA_SERVER__SUBSYS,
             "client %" PRIu32 ": HELLO from '%s' (pid %ld), caps asked %#x granted %#x", c->id,
             c->name, (long)c->pid, m->caps, r.caps);
    ga_server__send(c, &r, sizeof r);
}

/* ---- segments ----------------------------------------------------------- */

static void ga_dispatch__offer(struct ga_server__conn *c, const struct lt_msg_segment_offer *m,
                               int *fds)
{
    struct ga_server *srv = c->srv;
    if (m->size > srv->cfg.max_segment_bytes) {
        ga_server__send_error(c, m->hdr.request_id, LT_MSG_SEGMENT_OFFER, LT_E_OUT_OF_RANGE, 0,
                              LT_INDEX_NONE,
                              "segment of %" PRIu64 " bytes: expected at most %" PRIu64, m->size,
                              srv->cfg.max_segment_bytes);
        return;
    }
    char full[LT_ERROR_MSG_LEN];
    if (!ga_server__inflight_room(c, full, sizeof full)) {
        ga_server__send_error(c, m->hdr.request_id, LT_MSG_SEGMENT_OFFER, LT_E_LIMIT, 0,
                              LT_INDEX_NONE, "%s", full);
        return;
    }
    struct ga_server__job *j = calloc(1, sizeof(*j));
    if (!j) {
        ga_server__send_error(c, m->hdr.request_id, LT_MSG_SEGMENT_OFFER, LT_E_SYSTEM, -ENOMEM,
                              LT_INDEX_NONE, "agent out of memory");
        return;
    }
    j->kind = GA_JOB_OFFER;
    j->conn = c;
    j->request_id = m->hdr.request_id;
    j->offer = *m;
    j->fd = fds[0];
    fds[0] = -1; /* the job's now */
    c->inflight++;
    ga_server__offer_queue(srv, j);
}

static void ga_dispatch__offer_done(struct ga_server__conn *c, struct ga_server__job *j)
{
    struct ga_server *srv = c->srv;
    if (j->rc < 0)
        ga_server__fd_freed(srv); /* the registrar closed the refused fd */
    struct lease_segment_info info = {0};
    if (j->rc == 0 && !c->closed)
        lease_segment_query(srv->svc, c->client, j->seg_id, 0, &info, NULL);
    if (j->rc == 0 && !c->closed) {
        struct ga_server__seg *seg = calloc(1, sizeof(*seg));
        uint64_t key = lt_segment_id_to_u64(j->seg_id);
        int rc = seg ? base_u64map_put(&srv->segs, key, seg) : -ENOMEM;
        if (rc < 0) {
            free(seg);
            lease_segment_remove(srv->svc, c->client, j->seg_id, NULL);
            j->rc = lt_failure_set(&j->why, LT_E_SYSTEM, rc, "agent out of memory");
        } else {
            *seg = (struct ga_server__seg){.id = j->seg_id,
                                           .conn = c,
                                           .cookie = j->offer.cookie,
                                           .size = j->offer.size,
                                           .mem_class = j->offer.mem_class,
                                           .refs = 1,
                                           .writable = info.writable != 0};
            struct base_u64map_entry *e = base_u64map_find(&srv->seg_slots, j->seg_id.slot);
            if (e)
                e->u64 = key;
            else /* on -ENOMEM a stale word reads as not found: still refused */
                base_u64map_put_u64(&srv->seg_slots, j->seg_id.slot, key);
            c->segments++;
            if (seg->mem_class != LT_CLASS_STAGED)
                c->seg_bytes_registered += seg->size;
            struct lt_msg_segment_accept a;
            lt_msg_init(&a, sizeof a, LT_MSG_SEGMENT_ACCEPT, j->request_id);
            a.cookie = j->offer.cookie;
            a.segment = j->seg_id;
            a.size = j->offer.size;
            a.mem_class = j->offer.mem_class;
            ga_server__send(c, &a, sizeof a);
        }
    }
    if (j->rc < 0 && !c->closed)
        ga_server__send_failure(c, j->request_id, LT_MSG_SEGMENT_OFFER, LT_INDEX_NONE, &j->why);
}

static void ga_dispatch__retire(struct ga_server__conn *c, const struct lt_msg_segment_retire *m)
{
    struct ga_server *srv = c->srv;
    uint64_t id = lt_segment_id_to_u64(m->segment);
    struct ga_server__seg *seg = base_u64map_get(&srv->segs, id);
    if (seg && seg->conn == c && seg->refs > 1) {
        ga_server__send_error(c, m->hdr.request_id, LT_MSG_SEGMENT_RETIRE, LT_E_BUSY, 0,
                              LT_INDEX_NONE,
                              "segment {%" PRIu32 ",%" PRIu32 "} holds the doorbell or done word "
                              "of %" PRIu32 " submits in flight",
                              m->segment.slot, m->segment.gen, seg->refs - 1);
        return;
    }
    struct lt_failure why;
    if (lease_segment_remove(srv->svc, c->client, m->segment, &why) < 0) {
        ga_server__send_failure(c, m->hdr.request_id, LT_MSG_SEGMENT_RETIRE, LT_INDEX_NONE, &why);
        return;
    }
    struct lt_msg_segment_retired r;
    lt_msg_init(&r, sizeof r, LT_MSG_SEGMENT_RETIRED, m->hdr.request_id);
    r.segment = m->segment;
    if (seg && base_u64map_del(&srv->segs, id)) {
        r.cookie = seg->cookie;
        c->segments--;
        if (seg->mem_class != LT_CLASS_STAGED)
            c->seg_bytes_registered -= seg->size;
        if (c->words == seg)
            c->words = NULL;
        ga_server__seg_unref(seg);
    }
    ga_server__fd_freed(srv); /* the segment's fd is closed */
    ga_server__send(c, &r, sizeof r);
}

/* ---- leases ------------------------------------------------------------- */

static void ga_dispatch__lease_request(struct ga_server__conn *c,
                                       const struct lt_msg_lease_request *m)
{
    struct ga_server *srv = c->srv;
    uint32_t n = m->count;
    /* The loop's own scratch (the validator bounds n by LT_MAX_BATCH):
     * lease_grant writes every result, and each carries a 264-byte struct
     * lt_failure filled only on refusal, so neither array is zeroed. */
    struct lease_grant_req *reqs = srv->grant_reqs;
    struct lease_grant_result *res = srv->grant_res;
    union {
        uint64_t align;
        unsigned char bytes[LT_MSG_MAX_BYTES];
    } out;
    for (uint32_t i = 0; i < n; i++) {
        const struct lt_lease_req_entry *e = &m->entries[i];
        reqs[i] = (struct lease_grant_req){
            .segment = e->segment,
            .offset = e->offset,
            .length = e->length,
            .cls = e->mem_class,
            .flags = ((e->flags & LT_LEASE_F_ALLOW_STAGED) ? LEASE_GRANT_ALLOW_STAGED : 0u) |
                     /* a ring's words lease: in an unsealed MAPPED segment */
                     ((c->caps & LT_CAP_STREAM) ? LEASE_GRANT_ALLOW_WORDS : 0u),
        };
    }
    int granted;
    struct lt_failure why;
    if (m->flags & LT_LEASE_REQ_F_ALL_OR_NOTHING) {
        /* One at a time: nothing past the first refusal is granted. */
        uint32_t i;
        for (i = 0; i < n; i++) {
            int rc = lease_grant(srv->svc, c->client, 1, &reqs[i], &res[i], &why);
            if (rc < 0) {
                res[i].rc = rc;
                res[i].why = why;
            }
            if (res[i].rc < 0)
                break;
        }
        if (i < n) {
            struct lt_lease_id *ids = calloc(i ? i : 1, sizeof(*ids));
            struct lease_release_result *rr = calloc(i ? i : 1, sizeof(*rr));
            for (uint32_t k = 0; ids && rr && k < i; k++)
                ids[k] = res[k].lease;
            /* Not in c->releases: released silently, no RELEASE_COMPLETE. */
            if (i && ids && rr)
                lease_release(srv->svc, c->client, i, ids, rr, NULL);
            free(ids);
            free(rr);
            const struct lt_failure *w = &res[i].why;
            ga_server__send_error(c, m->hdr.request_id, LT_MSG_LEASE_REQUEST, w->code, w->err, i,
                                  "entry %" PRIu32 ": %s", i, w->message);
            return;
        }
        granted = (int)n;
    } else {
        granted = lease_grant(srv->svc, c->client, n, reqs, res, &why);
        if (granted < 0) {
            ga_server__send_failure(c, m->hdr.request_id, LT_MSG_LEASE_REQUEST, LT_INDEX_NONE,
                                    &why);
            return;
        }
    }
    size_t len = sizeof(struct lt_msg_lease_grant) + n * sizeof(struct lt_lease_grant_entry);
    struct lt_msg_lease_grant *g = (struct lt_msg_lease_grant *)(void *)out.bytes;
    lt_msg_init(g, len, LT_MSG_LEASE_GRANT, m->hdr.request_id);
    g->count = n;
    for (uint32_t i = 0; i < n; i++) {
        if (res[i].rc == 0) {
            g->entries[i].lease = res[i].lease;
            g->entries[i].mem_class = res[i].cls;
            g->entries[i].status = LT_OK;
        } else {
            g->entries[i].status = res[i].why.code;
        }
    }
    c->leases_granted += (uint64_t)granted;
    ga_server__send(c, g, (uint32_t)len);
}

static void ga_dispatch__release_complete(struct ga_server__conn *c, uint64_t rid,
                                          struct lt_lease_id lease, uint32_t status)
{
    ga_server__metrics_release_complete(c->srv, status);
    struct lt_msg_release_complete_batch *b = c->rcb;
    if (b && b->hdr.request_id == rid && b->count < LT_MAX_BATCH) {
        b->entries[b->count].lease = lease;
        b->entries[b->count].status = status;
        b->entries[b->count].reserved = 0;
        b->count++;
        return;
    }
    struct lt_msg_release_complete r;
    lt_msg_init(&r, sizeof r, LT_MSG_RELEASE_COMPLETE, rid);
    r.lease = lease;
    r.status = status;
    ga_server__send(c, &r, sizeof r);
}

void ga_server__on_release_complete(void *arg, struct lease_client_id client,
                                    struct lt_lease_id lease)
{
    struct ga_server__conn *c = ga_server__conn_by_client(arg, client);
    uint64_t rid;
    /* No entry: a lease the agent released itself (ALL_OR_NOTHING undo). */
    if (c && base_u64map_del_u64(&c->releases, lt_lease_id_to_u64(lease), &rid))
        ga_dispatch__release_complete(c, rid, lease, LT_OK);
}

void ga_server__on_client_drained(void *arg, struct lease_client_id client)
{
    struct ga_server *srv = arg;
    ga_server__fd_freed(srv); /* its segments' fds are closed */
    base_log(&srv->cfg.log, BASE_LOG_INFO, GA_SERVER__SUBSYS,
             "lease client %#" PRIx64 " drained: its leases are complete and its segments "
             "unregistered, unmapped and closed",
             client.value);
}

static void ga_dispatch__lease_release(struct ga_server__conn *c,
                                       const struct lt_msg_lease_release *m)
{
    struct ga_server *srv = c->srv;
    uint32_t n = m->count;
    uint64_t rid = m->hdr.request_id;
    /* The loop's scratch: every entry is written by lease_release. */
    struct lease_release_result *res = srv->release_res;
    unsigned char *mine = srv->release_mine;
    memset(mine, 0, n);
    struct lt_failure why;
    int rc = 0;
    /* Record the request id first: a lease with no work completes inside
     * lease_release, whose callback looks it up. */
    for (uint32_t i = 0; rc == 0 && i < n; i++) {
        rc = base_u64map_put_u64(&c->releases, lt_lease_id_to_u64(m->leases[i]), rid);
        if (rc == 0)
            mine[i] = 1;
        else if (rc == -EEXIST)
            rc = 0; /* already draining: lease_release says -EALREADY */
        else        /* -ENOMEM */
            lt_failure_set(&why, LT_E_SYSTEM, rc, "agent out of memory");
    }
    /* The RELEASE_COMPLETEs of leases with no work pending go out together:
     * one RELEASE_COMPLETE_BATCH when the client has LT_CAP_RC_BATCH, else
     * one packet each in a sendmmsg. Leases whose work is still running
     * complete later, each in its own RELEASE_COMPLETE. */
    union {
        uint64_t align;
        unsigned char bytes[LT_MSG_MAX_BYTES];
    } bb;
    if (c->caps & LT_CAP_RC_BATCH) {
        c->rcb = (struct lt_msg_release_complete_batch *)(void *)bb.bytes;
        lt_msg_init(c->rcb, sizeof(*c->rcb), LT_MSG_RELEASE_COMPLETE_BATCH, rid);
    }
    ga_server__cork(c);
    if (rc == 0)
        rc = lease_release(srv->svc, c->client, n, m->leases, res, &why);
    if (rc < 0) {
        for (uint32_t i = 0; mine && i < n; i++)
            if (mine[i])
                base_u64map_del_u64(&c->releases, lt_lease_id_to_u64(m->leases[i]), NULL);
        ga_server__send_failure(c, rid, LT_MSG_LEASE_RELEASE, LT_INDEX_NONE, &why);
    } else {
        for (uint32_t i = 0; i < n; i++) {
            if (res[i].rc == 0)
                continue;
            if (mine[i])
                base_u64map_del_u64(&c->releases, lt_lease_id_to_u64(m->leases[i]), NULL);
            ga_dispatch__release_complete(c, rid, m->leases[i], res[i].why.code);
        }
    }
    if (c->rcb) {
        struct lt_msg_release_complete_batch *b = c->rcb;
        c->rcb = NULL;
        if (b->count > 0) {
            b->hdr.length = (uint32_t)(sizeof(*b) + b->count * sizeof(b->entries[0]));
            ga_server__send(c, b, b->hdr.length);
        }
    }
    ga_server__uncork(c);
}

/* ---- stats -------------------------------------------------------------- */

static void ga_dispatch__client_stats(struct ga_server__conn *c, struct lt_client_stats *s)
{
    struct ga_server *srv = c->srv;
    struct lease_client_stats ls = {0};
    struct ga_exec_client_stats xs = {0};
    lease_client_stats(srv->svc, c->client, &ls, NULL);
    ga_exec_client_stats(srv->ex, c->client.value, &xs);
    s->client_id = c->id;
    s->pid = (uint32_t)c->pid;
    if (c->hello) {
        memcpy(s->name, c->name, sizeof s->name);
    } else {
        char name[LT_NAME_LEN];
        snprintf(name, sizeof name, "pid-%ld", (long)c->pid);
        lt_name_set(s->name, sizeof s->name, name);
    }
    s->segments = c->segments;
    s->bytes_registered = c->seg_bytes_registered;
    s->live_leases = ls.leases;
    s->bytes_leased = ls.bytes;
    s->leases_granted = c->leases_granted;
    s->submits = c->submits;
    s->streams = xs.streams;
    s->events = xs.events;
}

static void ga_dispatch__stats(struct ga_server__conn *c, const struct lt_msg_stats_request *m)
{
    struct ga_server *srv = c->srv;
    union {
        uint64_t align;
        unsigned char bytes[LT_MSG_MAX_BYTES];
    } out;
    struct lease_stats st;
    int rc = lease_service_stats(srv->svc, &st);
    if (rc < 0) {
        ga_server__send_error(c, m->hdr.request_id, LT_MSG_STATS_REQUEST, LT_E_SYSTEM, rc,
                              LT_INDEX_NONE, "the lease service's counters could not be read");
        return;
    }
    uint32_t n = 0;
    struct lt_msg_stats_reply *r = (struct lt_msg_stats_reply *)(void *)out.bytes;
    memset(out.bytes, 0, sizeof out.bytes);
    if (m->flags & LT_STATS_F_ALL_CLIENTS) {
        for (struct ga_server__conn *o = srv->conns; o && n < LT_MAX_STATS_CLIENTS; o = o->next)
            if (!o->closed)
                ga_dispatch__client_stats(o, &r->clients[n++]);
    } else {
        ga_dispatch__client_stats(c, &r->clients[n++]);
    }
    size_t len = sizeof *r + n * sizeof(struct lt_client_stats);
    /* lt_msg_init would zero the clients just written: header by hand. */
    lt_header_init(&r->hdr, LT_MSG_STATS_REPLY, (uint32_t)len, m->hdr.request_id);
    r->client_count = n;
    r->uptime_ns = base_now_ns() - srv->start_ns;
    for (int k = LT_CLASS_STAGED; k <= LT_CLASS_MAPPED; k++) {
        const struct lease_class_stats *s = &st.cls[k];
        r->classes[k] = (struct lt_class_stats){
            .segments = s->segments,
            .bytes_registered = s->bytes_registered,
            .live_leases = s->live_leases,
            .bytes_leased = s->bytes_leased,
            .registrations = s->registrations,
            .registration_ns = s->registration_ns,
            .unregistrations = s->unregistrations,
            .budget_refusals = s->budget_refusals,
        };
    }
    ga_server__send(c, r, (uint32_t)len);
}

/* ---- entry points ------------------------------------------------------- */

void ga_server__dispatch(struct ga_server__conn *c, const void *buf, size_t len, int *fds,
                         size_t nfds)
{
    uint16_t type = 0;
    char msg[160];
    struct ga_server *srv = c->srv;
    if (nfds)
        ga_server__fd_freed(srv); /* whatever is not kept below is closed */
    enum lt_error e = lt_validate_from_client(buf, len, &type);
    if (e != LT_OK) {
        const struct lt_header *h = buf;
        bool readable = len >= sizeof *h && h->magic == LT_MAGIC && h->version == LT_PROTO_VERSION;
        for (size_t i = 0; i < nfds; i++)
            close(fds[i]);
        ga_dispatch__explain(buf, len, e, msg, sizeof msg);
        ga_server__send_error(c, readable ? h->request_id : 0, len >= 8 ? h->type : 0, e, 0,
                              LT_INDEX_NONE, "%s", msg);
        /* Framing errors: the peer does not speak the protocol; stop reading it. */
        if (e >= LT_E_TRUNCATED && e <= LT_E_BAD_REQUEST_ID)
            ga_server__conn_kill(c, lt_error_name(e));
        return;
    }
    uint64_t rid = ga_dispatch__rid(buf);
    if (type == LT_MSG_ERROR) {
        /* A peer that refuses the conversation (or does not speak it) has
         * nothing more to ask: say so in the log and close it. */
        const struct lt_msg_error *em = buf;
        for (size_t i = 0; i < nfds; i++)
            close(fds[i]);
        base_log(&srv->cfg.log, BASE_LOG_INFO, GA_SERVER__SUBSYS,
                 "client %" PRIu32 " (pid %ld) sent an ERROR (%s for %s: %s): disconnecting", c->id,
                 (long)c->pid, lt_error_name(em->code), lt_msg_type_name(em->failed_type),
                 em->message);
        ga_server__conn_kill(c, "it sent an ERROR");
        return;
    }
    if (lt_validate_fd_count(type, nfds) != LT_OK) {
        for (size_t i = 0; i < nfds; i++)
            close(fds[i]);
        ga_server__send_error(c, rid, type, LT_E_FD_COUNT, 0, LT_INDEX_NONE,
                              "%s carries %u fd%s, found %zu", lt_msg_type_name(type),
                              lt_msg_info(type).fds, lt_msg_info(type).fds == 1 ? "" : "s", nfds);
        return;
    }
    if (type == LT_MSG_HELLO ? c->hello : !c->hello) {
        for (size_t i = 0; i < nfds; i++)
            close(fds[i]);
        ga_server__send_error(c, rid, type, LT_E_NO_HELLO, 0, LT_INDEX_NONE,
                              c->hello ? "HELLO again: expected it once, first"
                                       : "expected HELLO first, found %s",
                              lt_msg_type_name(type));
        return;
    }
    switch (type) {
    case LT_MSG_HELLO:
        ga_dispatch__hello(c, buf);
        break;
    case LT_MSG_SEGMENT_OFFER:
        ga_dispatch__offer(c, buf, fds);
        break;
    case LT_MSG_SEGMENT_RETIRE:
        ga_dispatch__retire(c, buf);
        break;
    case LT_MSG_LEASE_REQUEST:
        ga_dispatch__lease_request(c, buf);
        break;
    case LT_MSG_LEASE_RELEASE:
        ga_dispatch__lease_release(c, buf);
        break;
    case LT_MSG_SUBMIT:
        ga_server__submit(c, buf);
        break;
    case LT_MSG_STATS_REQUEST:
        ga_dispatch__stats(c, buf);
        break;
    case LT_MSG_WORDS_REQUEST:
        ga_server__words_request(c, buf);
        break;
    case LT_MSG_LEASE_LIST_REQUEST:
    case LT_MSG_SEGMENT_LIST_REQUEST:
        ga_server__list(c, buf, type);
        break;
    case LT_MSG_RING_OPEN:
        ga_server__ring_open(c, buf);
        break;
    case LT_MSG_RING_SHARD:
        ga_server__ring_shard(c, buf);
        break;
    case LT_MSG_RING_CLOSE:
        ga_server__ring_close(c, buf);
        break;
    case LT_MSG_LAUNCH:
        ga_server__launch(c, buf);
        break;
    default:
        if (lt_msg_type_is_ctl(type))
            ga_server__ctl(c, buf, type);
        else /* unreachable: the validator admits only client types */
            ga_server__send_error(c, rid, type, LT_E_WRONG_DIRECTION, 0, LT_INDEX_NONE,
                                  "%s is not a request", lt_msg_type_name(type));
        break;
    }
    for (size_t i = 0; i < nfds; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

void ga_server__complete(struct ga_server *srv, struct ga_server__job *j)
{
    struct ga_server__conn *c = j->conn;
    switch (j->kind) {
    case GA_JOB_WORK:
    case GA_JOB_CTL:
        ga_server__work_complete(srv, j);
        break;
    case GA_JOB_OFFER:
        ga_dispatch__offer_done(c, j);
        break;
    case GA_JOB_SHARD:
    case GA_JOB_RING_GONE:
        ga_server__ring_complete(srv, j);
        break;
    case GA_JOB_LAUNCH:
        ga_server__launch_complete(srv, j);
        break;
    }
    free(j);
    ga_server__conn_put(c);
}
