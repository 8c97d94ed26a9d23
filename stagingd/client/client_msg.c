/* The lease client's requests (hello, offers, leases, submits, releases,
 * control messages) and the dispatch of what the agent answers. Every
 * received message is validated (lt_validate_from_agent) and matched to
 * the request it answers (lt_validate_reply_matches) before a field is
 * used; anything else breaks the connection. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"

/* ---- the pending table ---- */

struct sd_client__pending *sd_client__pending_new(const void *msg, size_t len, uint64_t tag)
{
    struct sd_client__pending *p = calloc(1, sizeof(*p) + (len + 7) / 8 * 8);
    if (!p)
        return NULL;
    const struct lt_header *h = msg;
    p->rid = h->request_id;
    p->type = h->type;
    p->tag = tag;
    p->len = len;
    memcpy(p->msg, msg, len);
    return p;
}

int sd_client__pending_add(struct sd_client__agent *a, struct sd_client__pending *p)
{
    int rc = sd_client__map_put(&a->pending, p->rid, p);
    if (rc < 0)
        return rc;
    p->prev = a->tail;
    p->next = NULL;
    if (a->tail)
        a->tail->next = p;
    else
        a->head = p;
    a->tail = p;
    a->in_flight++;
    return 0;
}

void sd_client__pending_unlink(struct sd_client__agent *a, struct sd_client__pending *p)
{
    sd_client__map_del(&a->pending, p->rid);
    if (p->prev)
        p->prev->next = p->next;
    else
        a->head = p->next;
    if (p->next)
        p->next->prev = p->prev;
    else
        a->tail = p->prev;
    p->prev = p->next = NULL;
    a->in_flight--;
}

void sd_client__pending_free(struct sd_client__pending *p)
{
    free(p);
}

static int sd_client__seg_find(const struct sd_client *c, uint32_t key)
{
    for (unsigned s = 0; s < c->nsegs; s++)
        if (c->segs[s].key == key)
            return (int)s;
    return -1;
}

static const char *sd_client__seg_state_name(int state)
{
    switch (state) {
    case SD_CLIENT__SEG_OFFERED:
        return "offered, not yet accepted";
    case SD_CLIENT__SEG_ACCEPTED:
        return "accepted";
    case SD_CLIENT__SEG_REFUSED:
        return "refused";
    default:
        return "not offered";
    }
}

/* Stamps a request id on @msg, records it as pending and sends it. */
static int sd_client__request(struct sd_client *c, struct sd_client__agent *a, void *msg,
                              size_t len, int fd, uint64_t tag, struct sd_client__pending **p_p)
{
    struct lt_header *h = msg;
    h->request_id = a->next_rid++;
    struct sd_client__pending *p = sd_client__pending_new(msg, len, tag);
    if (!p)
        return sd_client__fail(c, -ENOMEM, "no memory to track a %s", lt_msg_type_name(h->type));
    /* Tracked before it is sent, so an answer can never find it missing. */
    int rc = sd_client__pending_add(a, p);
    if (rc < 0) {
        sd_client__pending_free(p);
        return sd_client__fail(c, rc, "no memory to track a %s", lt_msg_type_name(h->type));
    }
    rc = sd_client__send(c, a, msg, len, fd);
    if (rc < 0) {
        sd_client__pending_unlink(a, p);
        sd_client__pending_free(p);
        return sd_client__fail(c, rc, "agent %s: %s not sent: %s", a->path,
                               lt_msg_type_name(h->type),
                               a->broken_err ? a->broken_msg : strerror(-rc));
    }
    *p_p = p;
    return 0;
}

static int sd_client__need_ready(struct sd_client *c, struct sd_client__agent *a, unsigned agent)
{
    static const char *const names[] = {"disconnected", "in handshake", "offering segments",
                                        "ready"};
    if (!a)
        return sd_client__fail(c, -ENOENT, "no agent %u", agent);
    if (a->state != SD_CLIENT_READY || a->broken_err)
        return sd_client__fail(c, -ENOTCONN, "agent %s is %s", a->path,
                               a->broken_err ? "disconnecting" : names[a->state]);
    return 0;
}

/* ---- handshake and segments ---- */

int sd_client__hello_send(struct sd_client *c, struct sd_client__agent *a)
{
    struct lt_msg_hello m;
    struct sd_client__pending *p;
    lt_msg_init(&m, sizeof(m), LT_MSG_HELLO, 1);
    m.version_min = LT_PROTO_VERSION;
    m.version_max = LT_PROTO_VERSION;
    m.caps = c->caps;
    memcpy(m.name, c->name, sizeof(m.name));
    return sd_client__request(c, a, &m, sizeof(m), -1, 0, &p);
}

int sd_client__offer_send(struct sd_client *c, struct sd_client__agent *a, unsigned seg)
{
    const struct sd_client__segment *s = &c->segs[seg];
    struct lt_msg_segment_offer m;
    struct sd_client__pending *p;
    if (s->size > a->hello.max_segment_bytes) {
        a->segs[seg].state = SD_CLIENT__SEG_REFUSED;
        sd_client__log(c,
                       "agent %s: segment %u (%llu bytes) not offered: the agent takes at "
                       "most %llu bytes per segment",
                       a->path, s->key, (unsigned long long)s->size,
                       (unsigned long long)a->hello.max_segment_bytes);
        return -EFBIG;
    }
    lt_msg_init(&m, sizeof(m), LT_MSG_SEGMENT_OFFER, 1);
    m.cookie = s->key;
    m.size = s->size;
    m.mem_class = s->mem_class;
    int rc = sd_client__request(c, a, &m, sizeof(m), s->fd, s->key, &p);
    if (rc < 0)
        return rc;
    p->seg = seg;
    a->segs[seg].state = SD_CLIENT__SEG_OFFERED;
    a->offers_out++;
    a->offers_sent++;
    return 0;
}

static void sd_client__hello_reply(struct sd_client *c, struct sd_client__agent *a,
                                   const struct lt_msg_hello_reply *m)
{
    uint32_t allowed = c->caps | LT_CAP_HOST_BACKEND;
    if (m->caps & ~allowed) {
        sd_client__break(c, a, -EPROTO, "HELLO_REPLY grants caps 0x%x beyond the 0x%x asked for",
                         m->caps, c->caps);
        return;
    }
    a->hello = *m;
    a->state = SD_CLIENT_OFFERING;
    sd_client__log(c, "agent %s: \"%s\" speaks v%u, caps 0x%x, client id %u, batch %u%s", a->path,
                   m->agent_name, m->version, m->caps, m->client_id, m->max_lease_batch,
                   (m->caps & LT_CAP_HOST_BACKEND) ? " (host backend: no GPU)" : "");
    for (unsigned s = 0; s < c->nsegs && !a->broken_err; s++)
        sd_client__offer_send(c, a, s);
    if (!a->broken_err && a->offers_out == 0)
        sd_client__ready(c, a);
}

static void sd_client__accept(struct sd_client *c, struct sd_client__agent *a,
                              struct sd_client__pending *p, const struct lt_msg_segment_accept *m)
{
    for (unsigned s = 0; s < c->nsegs; s++) {
        if (s != p->seg && a->segs[s].state == SD_CLIENT__SEG_ACCEPTED &&
            lt_segment_id_eq(a->segs[s].id, m->segment)) {
            sd_client__break(c, a, -EPROTO,
                             "SEGMENT_ACCEPT gives segment %u id %u:%u, already "
                             "the id of segment %u",
                             c->segs[p->seg].key, m->segment.slot, m->segment.gen, c->segs[s].key);
            return;
        }
    }
    a->segs[p->seg].state = SD_CLIENT__SEG_ACCEPTED;
    a->segs[p->seg].id = m->segment;
    a->accepted++;
}

/* ---- answers ---- */

static void sd_client__error_fire(struct sd_client *c, struct sd_client__agent *a,
                                  struct sd_client__pending *p, const struct lt_msg_error *m)
{
    char msg[SD_CLIENT_MSG_LEN];
    char where[32] = "";
    if (m->index != LT_INDEX_NONE)
        snprintf(where, sizeof(where), " at entry %u", m->index);
    snprintf(msg, sizeof(msg), "agent %s refused %s #%llu%s: %s (%s): \"%s\"", a->path,
             lt_msg_type_name(p->type), (unsigned long long)p->rid, where, lt_error_name(m->code),
             lt_error_describe(m->code), m->message);
    if (p->sync) {
        p->sync->err = lt_error_errno(m->code);
        p->sync->done = 1;
        snprintf(c->err, sizeof(c->err), "%s", msg);
        return;
    }
    struct sd_client_error e = {
        .agent = a->index,
        .request_id = p->rid,
        .tag = p->tag,
        .request_type = p->type,
        .err = lt_error_errno(m->code),
        .code = m->code,
        .index = m->index,
        .message = msg,
    };
    SD_CLIENT__CALL(c, on_error, &e);
}

/* Ends @p (already unlinked) with an error the client decided. */
static void sd_client__error_local(struct sd_client *c, struct sd_client__agent *a,
                                   struct sd_client__pending *p, int err, const char *msg)
{
    if (p->sync) {
        p->sync->err = err;
        p->sync->done = 1;
        snprintf(c->err, sizeof(c->err), "%s", msg);
        return;
    }
    struct sd_client_error e = {.agent = a->index,
                                .request_id = p->rid,
                                .tag = p->tag,
                                .request_type = p->type,
                                .err = err,
                                .code = LT_OK,
                                .index = LT_INDEX_NONE,
                                .message = msg};
    SD_CLIENT__CALL(c, on_error, &e);
}

/* The answer to @p turned out to break the connection: put @p back, so it
 * fails with the rest after on_disconnect. */
static void sd_client__requeue(struct sd_client *c, struct sd_client__agent *a,
                               struct sd_client__pending *p)
{
    if (sd_client__pending_add(a, p) < 0) {
        sd_client__error_local(c, a, p, a->broken_err, a->broken_msg);
        sd_client__pending_free(p);
    }
}

/* Returns 0, or -1 when the grant broke the connection (@p requeued). */
static int sd_client__grant(struct sd_client *c, struct sd_client__agent *a,
                            struct sd_client__pending *p, const struct lt_msg_lease_grant *m)
{
    const struct lt_msg_lease_request *q = (const struct lt_msg_lease_request *)p->msg;
    struct sd_client_grant_entry *ents = calloc(m->count, sizeof(*ents));
    if (!ents) {
        sd_client__break(c, a, -ENOMEM, "no memory for a grant of %u leases", m->count);
        sd_client__requeue(c, a, p);
        return -1;
    }
    for (uint32_t k = 0; k < m->count; k++) {
        const struct lt_lease_grant_entry *g = &m->entries[k];
        const struct lt_lease_req_entry *r = &q->entries[k];
        ents[k].status = g->status;
        ents[k].err = lt_error_errno(g->status);
        if (g->status != LT_OK)
            continue;
        uint32_t key = 0;
        for (unsigned s = 0; s < c->nsegs; s++)
            if (a->segs[s].state == SD_CLIENT__SEG_ACCEPTED &&
                lt_segment_id_eq(a->segs[s].id, r->segment))
                key = c->segs[s].key;
        struct sd_client__lease_rec *rec = calloc(1, sizeof(*rec));
        if (!rec) {
            sd_client__break(c, a, -ENOMEM, "no memory to track lease %u:%u", g->lease.slot,
                             g->lease.gen);
            free(ents);
            sd_client__requeue(c, a, p);
            return -1;
        }
        rec->lease = (struct sd_client_lease){
            .id = g->lease,
            .agent = a->index,
            .epoch = a->epoch,
            .segment = key,
            .mem_class = g->mem_class,
            .offset = r->offset,
            .length = r->length,
        };
        int rc = sd_client__map_put(&a->leases, lt_lease_id_to_u64(g->lease), rec);
        if (rc < 0) {
            free(rec);
            sd_client__break(c, a, rc == -EEXIST ? -EPROTO : rc,
                             "LEASE_GRANT #%llu entry %u: lease %u:%u %s",
                             (unsigned long long)p->rid, k, g->lease.slot, g->lease.gen,
                             rc == -EEXIST ? "is already held (granted twice)"
                                           : "cannot be tracked (no memory)");
            free(ents);
            sd_client__requeue(c, a, p);
            return -1;
        }
        ents[k].lease = rec->lease;
    }
    struct sd_client_grant gr = {
        .agent = a->index, .request_id = p->rid, .tag = p->tag, .count = m->count, .entries = ents};
    SD_CLIENT__CALL(c, on_grant, &gr);
    free(ents);
    return 0;
}

/* The release completed: QUIET submits on the lease succeeded, since the
 * agent answers a release only after the lease's GPU work has drained. */
static void sd_client__quiet_retire(struct sd_client__agent *a, struct lt_lease_id lease)
{
    struct sd_client__pending *p = a->head;
    while (p) {
        struct sd_client__pending *next = p->next;
        if (p->type == LT_MSG_SUBMIT && p->quiet && lt_lease_id_eq(p->lease.id, lease)) {
            sd_client__pending_unlink(a, p);
            sd_client__pending_free(p);
        }
        p = next;
    }
}

/* The lease record @lease holds for release @p, or NULL (after breaking
 * the connection) when that release does not hold it. */
static struct sd_client__lease_rec *
sd_client__released_rec(struct sd_client *c, struct sd_client__agent *a,
                        struct sd_client__pending *p, struct lt_lease_id lease, const char *what)
{
    struct sd_client__lease_rec *rec = sd_client__map_get(&a->leases, lt_lease_id_to_u64(lease));
    if (!rec || !rec->releasing || rec->release_rid != p->rid) {
        sd_client__break(c, a, -EPROTO,
                         "%s #%llu for lease %u:%u, which that "
                         "release does not hold (already completed?)",
                         what, (unsigned long long)p->rid, lease.slot, lease.gen);
        return NULL;
    }
    return rec;
}

/* One lease of release @p completed with @status (held: checked by the
 * caller); @p is freed when it was the release's last lease. */
static void sd_client__release_done(struct sd_client *c, struct sd_client__agent *a,
                                    struct sd_client__pending *p, struct sd_client__lease_rec *rec,
                                    struct lt_lease_id lease, uint32_t status)
{
    sd_client__map_del(&a->leases, lt_lease_id_to_u64(lease));
    if (rec->quiet)
        sd_client__quiet_retire(a, lease);
    char msg[SD_CLIENT_MSG_LEN] = "";
    if (status != LT_OK)
        snprintf(msg, sizeof(msg),
                 "agent %s: release of lease %u:%u completed with %s (%s); "
                 "the bytes are not reusable on its word",
                 a->path, lease.slot, lease.gen, lt_error_name(status), lt_error_describe(status));
    struct sd_client_release r = {
        .agent = a->index,
        .request_id = p->rid,
        .tag = p->tag,
        .lease = rec->lease,
        .status = status,
        .err = lt_error_errno(status),
        .reusable = status == LT_OK,
        .message = msg,
    };
    free(rec);
    int last = --p->remaining == 0;
    if (last)
        sd_client__pending_unlink(a, p);
    SD_CLIENT__CALL(c, on_release, &r);
    if (last)
        sd_client__pending_free(p);
}

static void sd_client__release_complete(struct sd_client *c, struct sd_client__agent *a,
                                        struct sd_client__pending *p,
                                        const struct lt_msg_release_complete *m)
{
    struct sd_client__lease_rec *rec =
        sd_client__released_rec(c, a, p, m->lease, "RELEASE_COMPLETE");
    if (rec)
        sd_client__release_done(c, a, p, rec, m->lease, m->status);
}

/* A RELEASE_COMPLETE_BATCH: exactly its entries as single RELEASE_COMPLETEs,
 * in order. Every entry is checked first, so a bad batch delivers nothing. */
static void sd_client__release_complete_batch(struct sd_client *c, struct sd_client__agent *a,
                                              struct sd_client__pending *p,
                                              const struct lt_msg_release_complete_batch *m)
{
    if (!(a->hello.caps & LT_CAP_RC_BATCH)) {
        sd_client__break(c, a, -EPROTO,
                         "RELEASE_COMPLETE_BATCH #%llu, but the agent did not grant "
                         "LT_CAP_RC_BATCH (caps 0x%x)",
                         (unsigned long long)p->rid, a->hello.caps);
        return;
    }
    if (m->count > p->remaining) {
        sd_client__break(c, a, -EPROTO,
                         "RELEASE_COMPLETE_BATCH #%llu of %u leases: expected at most the %u "
                         "the release still holds",
                         (unsigned long long)p->rid, m->count, p->remaining);
        return;
    }
    for (uint32_t k = 0; k < m->count; k++)
        if (!sd_client__released_rec(c, a, p, m->entries[k].lease, "RELEASE_COMPLETE_BATCH"))
            return;
    /* The validator refused duplicates, so @p lives until the last entry. */
    for (uint32_t k = 0; k < m->count; k++) {
        struct lt_lease_id lease = m->entries[k].lease;
        struct sd_client__lease_rec *rec =
            sd_client__map_get(&a->leases, lt_lease_id_to_u64(lease));
        sd_client__release_done(c, a, p, rec, lease, m->entries[k].status);
    }
}

/* The release was refused as a whole: its leases are held again. */
static void sd_client__release_refused(struct sd_client__agent *a, struct sd_client__pending *p)
{
    const struct lt_msg_lease_release *q = (const struct lt_msg_lease_release *)p->msg;
    for (uint32_t k = 0; k < q->count; k++) {
        struct sd_client__lease_rec *rec =
            sd_client__map_get(&a->leases, lt_lease_id_to_u64(q->leases[k]));
        if (rec && rec->releasing && rec->release_rid == p->rid)
            rec->releasing = 0;
    }
}

static void sd_client__completion(struct sd_client *c, struct sd_client__agent *a,
                                  struct sd_client__pending *p, const struct lt_msg_completion *m)
{
    struct sd_client_completion cp = {
        .agent = a->index,
        .request_id = p->rid,
        .tag = p->tag,
        .lease = p->lease,
        .op = m->op,
        .status = m->status,
        .err = lt_error_errno(m->status),
        .detail = m->detail,
        .elapsed_ns = m->elapsed_ns,
        .result = m->result,
    };
    SD_CLIENT__CALL(c, on_completion, &cp);
}

void sd_client__dispatch(struct sd_client *c, struct sd_client__agent *a, size_t len)
{
    const void *buf = c->rx.bytes;
    const struct lt_header *h = buf;
    uint16_t type = 0;
    enum lt_error e = lt_validate_from_agent(buf, len, &type);
    if (e != LT_OK) {
        if (e == LT_E_BAD_VERSION && len >= sizeof(*h) && h->magic == LT_MAGIC) {
            /* the header's version, or the one a HELLO_REPLY chose */
            unsigned v = h->version;
            if (v == LT_PROTO_VERSION && h->type == LT_MSG_HELLO_REPLY &&
                len >= sizeof(struct lt_msg_hello_reply))
                v = ((const struct lt_msg_hello_reply *)buf)->version;
            sd_client__break(c, a, -EPROTONOSUPPORT,
                             "protocol version mismatch: the agent "
                             "speaks version %u in a %s, this client speaks %u..%u",
                             v, lt_msg_type_name(h->type), LT_PROTO_VERSION, LT_PROTO_VERSION);
        } else
            sd_client__break(c, a, -EPROTO, "refused a %zu-byte message%s%s: %s (%s)", len,
                             len >= sizeof(*h) ? " claiming type " : "",
                             len >= sizeof(*h) ? lt_msg_type_name(h->type) : "", lt_error_name(e),
                             lt_error_describe(e));
        return;
    }
    if (h->request_id == 0) {
        /* Only an ERROR about a message the agent could not read has no id. */
        const struct lt_msg_error *m = buf;
        sd_client__break(c, a, lt_error_errno(m->code),
                         "the agent could not read a message of "
                         "ours (%s): %s (%s): \"%s\"",
                         lt_msg_type_name(m->failed_type), lt_error_name(m->code),
                         lt_error_describe(m->code), m->message);
        return;
    }
    struct sd_client__pending *p = sd_client__map_get(&a->pending, h->request_id);
    if (!p) {
        sd_client__break(c, a, -EPROTO, "%s answers request #%llu, which is not in flight",
                         lt_msg_type_name(type), (unsigned long long)h->request_id);
        return;
    }
    e = lt_validate_reply_matches(p->msg, buf);
    if (e != LT_OK) {
        sd_client__break(c, a, -EPROTO, "%s does not answer %s #%llu: %s (%s)",
                         lt_msg_type_name(type), lt_msg_type_name(p->type),
                         (unsigned long long)p->rid, lt_error_name(e), lt_error_describe(e));
        return;
    }
    const struct lt_msg_error *err_msg = type == LT_MSG_ERROR ? buf : NULL;

    if (p->type == LT_MSG_HELLO) {
        sd_client__pending_unlink(a, p);
        sd_client__pending_free(p);
        if (err_msg)
            sd_client__break(c, a, lt_error_errno(err_msg->code),
                             "HELLO (versions %u..%u) "
                             "refused: %s (%s): \"%s\"",
                             LT_PROTO_VERSION, LT_PROTO_VERSION, lt_error_name(err_msg->code),
                             lt_error_describe(err_msg->code), err_msg->message);
        else
            sd_client__hello_reply(c, a, buf);
        return;
    }
    if (p->type == LT_MSG_LEASE_RELEASE) {
        if (type == LT_MSG_RELEASE_COMPLETE_BATCH) {
            sd_client__release_complete_batch(c, a, p, buf);
            return;
        }
        if (!err_msg) {
            sd_client__release_complete(c, a, p, buf);
            return;
        }
        sd_client__release_refused(a, p);
    }
    if (p->type == LT_MSG_SUBMIT && p->quiet) {
        struct sd_client__lease_rec *rec =
            sd_client__map_get(&a->leases, lt_lease_id_to_u64(p->lease.id));
        if (rec && rec->quiet)
            rec->quiet--;
    }
    sd_client__pending_unlink(a, p);
    if (err_msg) {
        if (p->type == LT_MSG_SEGMENT_OFFER) {
            a->segs[p->seg].state = SD_CLIENT__SEG_REFUSED;
            a->offers_out--;
            sd_client__log(c, "agent %s refused segment %u: %s: \"%s\"", a->path,
                           c->segs[p->seg].key, lt_error_name(err_msg->code), err_msg->message);
        }
        sd_client__error_fire(c, a, p, err_msg);
    } else {
        switch (p->type) {
        case LT_MSG_SEGMENT_OFFER:
            a->offers_out--;
            sd_client__accept(c, a, p, buf);
            break;
        case LT_MSG_LEASE_REQUEST:
            if (sd_client__grant(c, a, p, buf) < 0)
                return; /* requeued */
            break;
        case LT_MSG_SUBMIT:
            sd_client__completion(c, a, p, buf);
            break;
        default:
            if (p->sync) {
                memcpy(p->sync->reply->bytes, buf, len);
                p->sync->err = 0;
                p->sync->done = 1;
            } else {
                struct sd_client_reply r = {
                    .agent = a->index, .request_id = p->rid, .tag = p->tag, .msg = buf, .len = len};
                SD_CLIENT__CALL(c, on_reply, &r);
            }
            break;
        }
    }
    if (p->type == LT_MSG_SEGMENT_OFFER && a->state == SD_CLIENT_OFFERING && a->offers_out == 0 &&
        !a->broken_err)
        sd_client__ready(c, a);
    sd_client__pending_free(p);
}

/* ---- the connection's end ---- */

void sd_client__fail_all(struct sd_client *c, struct sd_client__agent *a, int err, const char *why)
{
    /* Detach first: callbacks may issue requests, which the disconnected
     * agent refuses without touching these lists. */
    struct sd_client__pending *p = a->head;
    struct sd_client__map leases = a->leases;
    a->head = a->tail = NULL;
    sd_client__map_free(&a->pending);
    a->in_flight = 0;
    memset(&a->leases, 0, sizeof(a->leases));

    while (p) {
        struct sd_client__pending *next = p->next;
        char msg[SD_CLIENT_ERR_LEN];
        snprintf(msg, sizeof(msg), "%s; %s #%llu was in flight", why, lt_msg_type_name(p->type),
                 (unsigned long long)p->rid);
        if (p->type == LT_MSG_LEASE_RELEASE) {
            const struct lt_msg_lease_release *q = (const struct lt_msg_lease_release *)p->msg;
            for (uint32_t k = 0; k < q->count; k++) {
                struct sd_client__lease_rec *rec =
                    sd_client__map_get(&leases, lt_lease_id_to_u64(q->leases[k]));
                if (!rec || !rec->releasing || rec->release_rid != p->rid)
                    continue;
                struct sd_client_release r = {.agent = a->index,
                                              .request_id = p->rid,
                                              .tag = p->tag,
                                              .lease = rec->lease,
                                              .status = LT_OK,
                                              .err = err,
                                              .reusable = 0,
                                              .message = msg};
                SD_CLIENT__CALL(c, on_release, &r);
            }
        } else if (p->type != LT_MSG_HELLO && p->type != LT_MSG_SEGMENT_OFFER) {
            sd_client__error_local(c, a, p, err, msg);
        }
        sd_client__pending_free(p);
        p = next;
    }
    for (size_t i = 0; i < leases.cap; i++)
        if (leases.keys[i])
            free(leases.vals[i]);
    sd_client__map_free(&leases);
}

/* ---- requests ---- */

int sd_client_lease_request(struct sd_client *c, unsigned agent,
                            const struct sd_client_lease_req *reqs, unsigned n, uint32_t req_flags,
                            uint64_t tag, uint64_t *request_id_p)
{
    struct sd_client__agent *a = sd_client__agent_get(c, agent);
    union lt_msg_buffer buf;
    struct sd_client__pending *p;
    int rc = sd_client__need_ready(c, a, agent);
    if (rc < 0)
        return rc;
    if (n == 0 || n > a->hello.max_lease_batch)
        return sd_client__fail(c, n ? -E2BIG : -EINVAL,
                               "lease request of %u entries: agent %s "
                               "takes 1..%u per request",
                               n, a->path, a->hello.max_lease_batch);
    if (req_flags & ~LT_LEASE_REQ_F_KNOWN)
        return sd_client__fail(c, -EINVAL, "lease request flags 0x%x: expected only 0x%x",
                               req_flags, LT_LEASE_REQ_F_KNOWN);
    size_t len = sizeof(struct lt_msg_lease_request) + n * sizeof(struct lt_lease_req_entry);
    lt_msg_init(&buf, len, LT_MSG_LEASE_REQUEST, 1);
    struct lt_msg_lease_request *m = (struct lt_msg_lease_request *)(void *)&buf;
    m->count = n;
    m->flags = req_flags;
    for (unsigned k = 0; k < n; k++) {
        const struct sd_client_lease_req *r = &reqs[k];
        int s = sd_client__seg_find(c, r->segment);
        if (s < 0)
            return sd_client__fail(c, -ENOENT, "lease entry %u: no segment %u", k, r->segment);
        if (a->segs[s].state != SD_CLIENT__SEG_ACCEPTED)
            return sd_client__fail(c, -ENOENT, "lease entry %u: segment %u is %s on agent %s", k,
                                   r->segment, sd_client__seg_state_name(a->segs[s].state),
                                   a->path);
        uint32_t cls = r->mem_class ? r->mem_class : c->segs[s].mem_class;
        if (cls != c->segs[s].mem_class && cls != LT_CLASS_STAGED)
            return sd_client__fail(c, -EINVAL,
                                   "lease entry %u: class %s on a %s segment: "
                                   "expected the segment's class or STAGED",
                                   k, lt_class_name(cls), lt_class_name(c->segs[s].mem_class));
        enum lt_error e = lt_range_check(r->offset, r->length, c->segs[s].size);
        if (e != LT_OK)
            return sd_client__fail(c, e == LT_E_ZERO_LENGTH ? -EINVAL : -ERANGE,
                                   "lease entry %u: [%llu, +%llu) in segment %u of %llu bytes: %s",
                                   k, (unsigned long long)r->offset, (unsigned long long)r->length,
                                   r->segment, (unsigned long long)c->segs[s].size,
                                   lt_error_describe(e));
        if (r->flags & ~LT_LEASE_F_KNOWN)
            return sd_client__fail(c, -EINVAL, "lease entry %u: flags 0x%x: expected only 0x%x", k,
                                   r->flags, LT_LEASE_F_KNOWN);
        m->entries[k].segment = a->segs[s].id;
        m->entries[k].offset = r->offset;
        m->entries[k].length = r->length;
        m->entries[k].mem_class = cls;
        m->entries[k].flags = r->flags;
    }
    enum lt_error e = lt_validate_lease_request(&buf, len);
    if (e != LT_OK)
        return sd_client__fail(c, lt_error_errno(e), "lease request refused before sending: %s",
                               lt_error_describe(e));
    rc = sd_client__request(c, a, &buf, len, -1, tag, &p);
    if (rc < 0)
        return rc;
    *request_id_p = p->rid;
    return 0;
}

/* The lease record behind @lease, checked to be current and not releasing. */
static int sd_client__lease_find(struct sd_client *c, struct sd_client__agent *a,
                                 const struct sd_client_lease *lease,
                                 struct sd_client__lease_rec **rec_p)
{
    if (lease->epoch != a->epoch)
        return sd_client__fail(c, -ESTALE,
                               "lease %u:%u is from connection %u to agent %s, "
                               "which is now on connection %u",
                               lease->id.slot, lease->id.gen, lease->epoch, a->path, a->epoch);
    struct sd_client__lease_rec *rec =
        sd_client__map_get(&a->leases, lt_lease_id_to_u64(lease->id));
    if (!rec)
        return sd_client__fail(c, -ENOENT, "lease %u:%u is not held on agent %s", lease->id.slot,
                               lease->id.gen, a->path);
    if (rec->releasing)
        return sd_client__fail(c, -EBUSY, "lease %u:%u is being released (#%llu)", lease->id.slot,
                               lease->id.gen, (unsigned long long)rec->release_rid);
    *rec_p = rec;
    return 0;
}

/* Fills the wire form of a doorbell or completion word. */
static int sd_client__word(struct sd_client *c, struct sd_client__agent *a,
                           const struct sd_client_word *w, uint32_t cap, const char *what,
                           struct lt_word_ref *ref_p)
{
    if (!(a->hello.caps & cap))
        return sd_client__fail(c, -EOPNOTSUPP,
                               "%s word: agent %s did not grant the capability "
                               "(caps 0x%x)",
                               what, a->path, a->hello.caps);
    int s = sd_client__seg_find(c, w->segment);
    if (s < 0)
        return sd_client__fail(c, -ENOENT, "%s word: no segment %u", what, w->segment);
    if (c->segs[s].mem_class != LT_CLASS_MAPPED)
        return sd_client__fail(c, -EINVAL,
                               "%s word: segment %u is %s; the GPU reaches words "
                               "only in MAPPED segments",
                               what, w->segment, lt_class_name(c->segs[s].mem_class));
    if (a->segs[s].state != SD_CLIENT__SEG_ACCEPTED)
        return sd_client__fail(c, -ENOENT, "%s word: segment %u is %s on agent %s", what,
                               w->segment, sd_client__seg_state_name(a->segs[s].state), a->path);
    if (w->offset % 8 != 0 || w->offset > c->segs[s].size - 8)
        return sd_client__fail(c, -EINVAL,
                               "%s word: offset %llu: expected a multiple of 8 "
                               "below %llu",
                               what, (unsigned long long)w->offset,
                               (unsigned long long)c->segs[s].size - 7);
    ref_p->segment = a->segs[s].id;
    ref_p->offset = w->offset;
    return 0;
}

int sd_client_submit(struct sd_client *c, const struct sd_client_lease *lease,
                     const struct sd_client_work *work, uint64_t tag, uint64_t *request_id_p)
{
    struct sd_client__agent *a = sd_client__agent_get(c, lease->agent);
    struct sd_client__lease_rec *rec = NULL;
    struct sd_client__pending *p;
    struct lt_msg_submit m;
    int rc = sd_client__need_ready(c, a, lease->agent);
    if (rc == 0)
        rc = sd_client__lease_find(c, a, lease, &rec);
    if (rc < 0)
        return rc;
    if (work->flags & ~LT_SUBMIT_F_QUIET)
        return sd_client__fail(c, -EINVAL,
                               "submit flags 0x%x: expected 0 or QUIET (0x%x); the "
                               "word flags follow bell.seq and done.seq",
                               work->flags, LT_SUBMIT_F_QUIET);
    lt_msg_init(&m, sizeof(m), LT_MSG_SUBMIT, 1);
    m.lease = rec->lease.id;
    m.stream = work->stream;
    m.op = work->op;
    m.flags = work->flags;
    m.args = work->args;
    if (work->bell.seq) {
        rc = sd_client__word(c, a, &work->bell, LT_CAP_DOORBELL, "bell", &m.bell);
        if (rc < 0)
            return rc;
        m.bell_seq = work->bell.seq;
        m.flags |= LT_SUBMIT_F_WAIT_BELL;
    }
    if (work->done.seq) {
        rc = sd_client__word(c, a, &work->done, LT_CAP_DONE_WORD, "done", &m.done);
        if (rc < 0)
            return rc;
        m.done_seq = work->done.seq;
        m.flags |= LT_SUBMIT_F_SIGNAL_DONE;
    }
    enum lt_error e = lt_validate_submit(&m, sizeof(m));
    if (e != LT_OK)
        return sd_client__fail(c, lt_error_errno(e),
                               "submit of op %u refused before sending: "
                               "%s (%s)",
                               work->op, lt_error_name(e), lt_error_describe(e));
    rc = sd_client__request(c, a, &m, sizeof(m), -1, tag, &p);
    if (rc < 0)
        return rc;
    p->lease = rec->lease;
    if (work->flags & LT_SUBMIT_F_QUIET) {
        p->quiet = 1;
        rec->quiet++;
    }
    *request_id_p = p->rid;
    return 0;
}

int sd_client_lease_release(struct sd_client *c, const struct sd_client_lease *leases, unsigned n,
                            uint64_t tag, uint64_t *request_id_p)
{
    if (n == 0)
        return sd_client__fail(c, -EINVAL, "release of 0 leases");
    unsigned agent = leases[0].agent;
    struct sd_client__agent *a = sd_client__agent_get(c, agent);
    union lt_msg_buffer buf;
    struct sd_client__pending *p;
    int rc = sd_client__need_ready(c, a, agent);
    if (rc < 0)
        return rc;
    if (n > a->hello.max_lease_batch)
        return sd_client__fail(c, -E2BIG,
                               "release of %u leases: agent %s takes 1..%u per "
                               "request",
                               n, a->path, a->hello.max_lease_batch);
    size_t len = sizeof(struct lt_msg_lease_release) + n * sizeof(struct lt_lease_id);
    lt_msg_init(&buf, len, LT_MSG_LEASE_RELEASE, 1);
    struct lt_msg_lease_release *m = (struct lt_msg_lease_release *)(void *)&buf;
    m->count = n;
    for (unsigned k = 0; k < n; k++) {
        struct sd_client__lease_rec *rec = NULL;
        if (leases[k].agent != agent)
            return sd_client__fail(c, -EINVAL,
                                   "release entry %u: lease of agent %u in a "
                                   "release to agent %u",
                                   k, leases[k].agent, agent);
        rc = sd_client__lease_find(c, a, &leases[k], &rec);
        if (rc < 0)
            return rc;
        m->leases[k] = rec->lease.id;
    }
    enum lt_error e = lt_validate_lease_release(&buf, len);
    if (e != LT_OK)
        return sd_client__fail(c, -EINVAL, "release refused before sending: %s (%s)",
                               lt_error_name(e), lt_error_describe(e));
    rc = sd_client__request(c, a, &buf, len, -1, tag, &p);
    if (rc < 0)
        return rc;
    p->remaining = n;
    for (unsigned k = 0; k < n; k++) {
        struct sd_client__lease_rec *rec =
            sd_client__map_get(&a->leases, lt_lease_id_to_u64(m->leases[k]));
        rec->releasing = 1;
        rec->release_rid = p->rid;
    }
    *request_id_p = p->rid;
    return 0;
}

int sd_client_send(struct sd_client *c, unsigned agent, const void *msg, size_t len, uint64_t tag,
                   uint64_t *request_id_p)
{
    struct sd_client__agent *a = sd_client__agent_get(c, agent);
    union lt_msg_buffer buf;
    struct sd_client__pending *p;
    int rc = sd_client__need_ready(c, a, agent);
    if (rc < 0)
        return rc;
    if (len < sizeof(struct lt_header) || len > LT_MSG_MAX_BYTES)
        return sd_client__fail(c, -EINVAL, "message of %zu bytes: expected %zu..%u", len,
                               sizeof(struct lt_header), LT_MSG_MAX_BYTES);
    memcpy(buf.bytes, msg, len);
    uint16_t type = buf.hdr.type;
    if (!lt_msg_type_is_ctl(type) && type != LT_MSG_STATS_REQUEST)
        return sd_client__fail(c, -EINVAL,
                               "sd_client_send takes stream, event, device and stats "
                               "requests, not %s (type %u)",
                               lt_msg_type_name(type), type);
    buf.hdr.request_id = a->next_rid; /* the validator wants a nonzero id */
    enum lt_error e = lt_validate_from_client(buf.bytes, len, NULL);
    if (e != LT_OK)
        return sd_client__fail(c, lt_error_errno(e), "%s refused before sending: %s (%s)",
                               lt_msg_type_name(type), lt_error_name(e), lt_error_describe(e));
    rc = sd_client__request(c, a, buf.bytes, len, -1, tag, &p);
    if (rc < 0)
        return rc;
    *request_id_p = p->rid;
    return 0;
}
