/* The lease client's answers: every message an agent sends is validated
 * (lt_validate_from_agent) and matched to the request it answers
 * (lt_validate_reply_matches) before a field is used; anything else breaks
 * the connection. Grants, completions, release completions, errors and
 * replies end their requests in exactly one callback; a connection's end
 * fails what it carried (leasec_client__fail_all). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client_internal.h"

/* ---- the handshake ---- */

static void leasec_client__ready(struct leasec_client *c, struct leasec_client__agent *a)
{
    a->state = LEASEC_CLIENT_READY;
    a->deadline_ns = 0;
    a->fail_streak = 0;
    a->next_delay_ms = 0;
    leasec_client__log(c, "agent %s: ready (connection %u, \"%s\", %u of %u segment(s) accepted)",
                       a->path, a->epoch, a->hello.agent_name, a->accepted, c->nsegs);
    LEASEC_CLIENT__CALL(c, on_ready, a->index, a->epoch);
}

static void leasec_client__hello_reply(struct leasec_client *c, struct leasec_client__agent *a,
                                       const struct lt_msg_hello_reply *m)
{
    uint32_t allowed = c->caps | LT_CAP_HOST_BACKEND;
    if (m->caps & ~allowed) {
        leasec_client__break(c, a, -EPROTO,
                             "HELLO_REPLY grants caps 0x%x beyond the 0x%x asked for", m->caps,
                             c->caps);
        return;
    }
    a->hello = *m;
    a->state = LEASEC_CLIENT_OFFERING;
    leasec_client__log(c, "agent %s: \"%s\" speaks v%u, caps 0x%x, client id %u, batch %u%s",
                       a->path, m->agent_name, m->version, m->caps, m->client_id,
                       m->max_lease_batch,
                       (m->caps & LT_CAP_HOST_BACKEND) ? " (host backend: no GPU)" : "");
    for (unsigned s = 0; s < c->nsegs && !a->broken_err; s++)
        leasec_client__offer_send(c, a, s);
    if (!a->broken_err && (m->caps & LT_CAP_WORDS) && c->words_bytes)
        leasec_client__words_send(c, a);
    if (!a->broken_err && a->offers_out == 0 && !a->words_out)
        leasec_client__ready(c, a);
}

/* WORDS_GRANT (with its fd in @fd, closed here) or the refusal of a words
 * area: a connection without one still works, with what needs none. */
static void leasec_client__words(struct leasec_client *c, struct leasec_client__agent *a,
                                 const struct lt_msg_words_grant *m, const struct lt_msg_error *e,
                                 int fd)
{
    a->words_out = 0;
    if (e) {
        leasec_client__log(c, "agent %s refused a words area: %s: \"%s\"", a->path,
                           lt_error_name(e->code), e->message);
        return;
    }
    /* Read-only: the agent sealed it F_SEAL_FUTURE_WRITE; it writes, we read. */
    void *p = mmap(NULL, (size_t)m->size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        leasec_client__log(c, "agent %s: mapping its %llu-byte words area failed: %s", a->path,
                           (unsigned long long)m->size, strerror(errno));
        return;
    }
    a->words_base = p;
    a->words_size = m->size;
    a->words_id = m->segment;
    leasec_client__log(c, "agent %s: words area %u:%u of %llu bytes", a->path, m->segment.slot,
                       m->segment.gen, (unsigned long long)m->size);
}

static void leasec_client__accept(struct leasec_client *c, struct leasec_client__agent *a,
                                  struct leasec_client__pending *p,
                                  const struct lt_msg_segment_accept *m)
{
    for (unsigned s = 0; s < c->nsegs; s++) {
        if (s != p->seg && a->segs[s].state == LEASEC_CLIENT__SEG_ACCEPTED &&
            lt_segment_id_eq(a->segs[s].id, m->segment)) {
            leasec_client__break(c, a, -EPROTO,
                                 "SEGMENT_ACCEPT gives segment %u id %u:%u, already "
                                 "the id of segment %u",
                                 c->segs[p->seg].key, m->segment.slot, m->segment.gen,
                                 c->segs[s].key);
            return;
        }
    }
    a->segs[p->seg].state = LEASEC_CLIENT__SEG_ACCEPTED;
    a->segs[p->seg].id = m->segment;
    a->accepted++;
}

/* ---- answers ---- */

static void leasec_client__error_fire(struct leasec_client *c, struct leasec_client__agent *a,
                                      struct leasec_client__pending *p,
                                      const struct lt_msg_error *m)
{
    char msg[LEASEC_CLIENT_MSG_LEN];
    char where[32] = "";
    if (m->index != LT_INDEX_NONE)
        snprintf(where, sizeof(where), " at entry %u", m->index);
    snprintf(msg, sizeof(msg), "agent %s refused %s #%llu%s: %s (%s): \"%s\"", a->path,
             lt_msg_type_name(p->type), (unsigned long long)p->rid, where, lt_error_name(m->code),
             lt_error_describe(m->code), m->message);
    /* The agent's own words, as it sent them (the validator checked the
     * text is terminated and printable). */
    struct lt_failure refusal;
    lt_failure_set(&refusal, m->code, m->err, "%s", m->message);
    if (p->sync) {
        p->sync->err = lt_error_errno(m->code);
        p->sync->done = 1;
        if (p->sync->refusal) {
            *p->sync->refusal = refusal;
            p->sync->refused = 1;
        }
        snprintf(c->err, sizeof(c->err), "%s", msg);
        return;
    }
    struct leasec_client_error e = {
        .agent = a->index,
        .request_id = p->rid,
        .tag = p->tag,
        .request_type = p->type,
        .err = lt_error_errno(m->code),
        .code = m->code,
        .index = m->index,
        .message = msg,
        .refusal = &refusal,
    };
    LEASEC_CLIENT__CALL(c, on_error, &e);
}

/* Ends @p (already unlinked) with an error the client decided. */
static void leasec_client__error_local(struct leasec_client *c, struct leasec_client__agent *a,
                                       struct leasec_client__pending *p, int err, const char *msg)
{
    if (p->sync) {
        p->sync->err = err;
        p->sync->done = 1;
        snprintf(c->err, sizeof(c->err), "%s", msg);
        return;
    }
    struct leasec_client_error e = {.agent = a->index,
                                    .request_id = p->rid,
                                    .tag = p->tag,
                                    .request_type = p->type,
                                    .err = err,
                                    .code = LT_OK,
                                    .index = LT_INDEX_NONE,
                                    .message = msg,
                                    .refusal = NULL};
    LEASEC_CLIENT__CALL(c, on_error, &e);
}

/* The answer to @p turned out to break the connection: put @p back, so it
 * fails with the rest after on_disconnect. */
static void leasec_client__requeue(struct leasec_client *c, struct leasec_client__agent *a,
                                   struct leasec_client__pending *p)
{
    if (leasec_client__pending_add(a, p) < 0) {
        leasec_client__error_local(c, a, p, a->broken_err, a->broken_msg);
        leasec_client__pending_free(p);
    }
}

/* Returns 0, or -1 when the grant broke the connection (@p requeued). */
static int leasec_client__grant(struct leasec_client *c, struct leasec_client__agent *a,
                                struct leasec_client__pending *p,
                                const struct lt_msg_lease_grant *m)
{
    const struct lt_msg_lease_request *q = (const struct lt_msg_lease_request *)p->msg;
    struct leasec_client_grant_entry *ents = calloc(m->count, sizeof(*ents));
    if (!ents) {
        leasec_client__break(c, a, -ENOMEM, "no memory for a grant of %u leases", m->count);
        leasec_client__requeue(c, a, p);
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
            if (a->segs[s].state == LEASEC_CLIENT__SEG_ACCEPTED &&
                lt_segment_id_eq(a->segs[s].id, r->segment))
                key = c->segs[s].key;
        struct leasec_client__lease_rec *rec = calloc(1, sizeof(*rec));
        if (!rec) {
            leasec_client__break(c, a, -ENOMEM, "no memory to track lease %u:%u", g->lease.slot,
                                 g->lease.gen);
            free(ents);
            leasec_client__requeue(c, a, p);
            return -1;
        }
        rec->lease = (struct leasec_client_lease){
            .id = g->lease,
            .agent = a->index,
            .epoch = a->epoch,
            .segment = key,
            .mem_class = g->mem_class,
            .offset = r->offset,
            .length = r->length,
        };
        int rc = base_u64map_put(&a->leases, lt_lease_id_to_u64(g->lease), rec);
        if (rc < 0) {
            free(rec);
            leasec_client__break(c, a, rc == -EEXIST ? -EPROTO : rc,
                                 "LEASE_GRANT #%llu entry %u: lease %u:%u %s",
                                 (unsigned long long)p->rid, k, g->lease.slot, g->lease.gen,
                                 rc == -EEXIST ? "is already held (granted twice)"
                                               : "cannot be tracked (no memory)");
            free(ents);
            leasec_client__requeue(c, a, p);
            return -1;
        }
        ents[k].lease = rec->lease;
    }
    struct leasec_client_grant gr = {
        .agent = a->index, .request_id = p->rid, .tag = p->tag, .count = m->count, .entries = ents};
    LEASEC_CLIENT__CALL(c, on_grant, &gr);
    free(ents);
    return 0;
}

/* The release completed: QUIET submits on the lease succeeded, since the
 * agent answers a release only after the lease's GPU work has drained. */
static void leasec_client__quiet_retire(struct leasec_client__agent *a, struct lt_lease_id lease)
{
    struct leasec_client__pending *p = a->head;
    while (p) {
        struct leasec_client__pending *next = p->next;
        if (p->type == LT_MSG_SUBMIT && p->quiet && lt_lease_id_eq(p->lease.id, lease)) {
            leasec_client__pending_unlink(a, p);
            leasec_client__pending_free(p);
        }
        p = next;
    }
}

/* The lease record @lease holds for release @p, or NULL (after breaking
 * the connection) when that release does not hold it. */
static struct leasec_client__lease_rec *
leasec_client__released_rec(struct leasec_client *c, struct leasec_client__agent *a,
                            struct leasec_client__pending *p, struct lt_lease_id lease,
                            const char *what)
{
    struct leasec_client__lease_rec *rec = base_u64map_get(&a->leases, lt_lease_id_to_u64(lease));
    if (!rec || !rec->releasing || rec->release_rid != p->rid) {
        leasec_client__break(c, a, -EPROTO,
                             "%s #%llu for lease %u:%u, which that "
                             "release does not hold (already completed?)",
                             what, (unsigned long long)p->rid, lease.slot, lease.gen);
        return NULL;
    }
    return rec;
}

/* One lease of release @p completed with @status (held: checked by the
 * caller); @p is freed when it was the release's last lease. */
static void leasec_client__release_done(struct leasec_client *c, struct leasec_client__agent *a,
                                        struct leasec_client__pending *p,
                                        struct leasec_client__lease_rec *rec,
                                        struct lt_lease_id lease, uint32_t status)
{
    base_u64map_del(&a->leases, lt_lease_id_to_u64(lease));
    if (rec->quiet)
        leasec_client__quiet_retire(a, lease);
    char msg[LEASEC_CLIENT_MSG_LEN] = "";
    if (status != LT_OK)
        snprintf(msg, sizeof(msg),
                 "agent %s: release of lease %u:%u completed with %s (%s); "
                 "the bytes are not reusable on its word",
                 a->path, lease.slot, lease.gen, lt_error_name(status), lt_error_describe(status));
    struct leasec_client_release r = {
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
        leasec_client__pending_unlink(a, p);
    LEASEC_CLIENT__CALL(c, on_release, &r);
    if (last)
        leasec_client__pending_free(p);
}

static void leasec_client__release_complete(struct leasec_client *c, struct leasec_client__agent *a,
                                            struct leasec_client__pending *p,
                                            const struct lt_msg_release_complete *m)
{
    struct leasec_client__lease_rec *rec =
        leasec_client__released_rec(c, a, p, m->lease, "RELEASE_COMPLETE");
    if (rec)
        leasec_client__release_done(c, a, p, rec, m->lease, m->status);
}

/* A RELEASE_COMPLETE_BATCH: exactly its entries as single RELEASE_COMPLETEs,
 * in order. Every entry is checked first, so a bad batch delivers nothing. */
static void leasec_client__release_complete_batch(struct leasec_client *c,
                                                  struct leasec_client__agent *a,
                                                  struct leasec_client__pending *p,
                                                  const struct lt_msg_release_complete_batch *m)
{
    if (!(a->hello.caps & LT_CAP_RC_BATCH)) {
        leasec_client__break(c, a, -EPROTO,
                             "RELEASE_COMPLETE_BATCH #%llu, but the agent did not grant "
                             "LT_CAP_RC_BATCH (caps 0x%x)",
                             (unsigned long long)p->rid, a->hello.caps);
        return;
    }
    if (m->count > p->remaining) {
        leasec_client__break(c, a, -EPROTO,
                             "RELEASE_COMPLETE_BATCH #%llu of %u leases: expected at most the %u "
                             "the release still holds",
                             (unsigned long long)p->rid, m->count, p->remaining);
        return;
    }
    for (uint32_t k = 0; k < m->count; k++)
        if (!leasec_client__released_rec(c, a, p, m->entries[k].lease, "RELEASE_COMPLETE_BATCH"))
            return;
    /* The validator refused duplicates, so @p lives until the last entry. */
    for (uint32_t k = 0; k < m->count; k++) {
        struct lt_lease_id lease = m->entries[k].lease;
        struct leasec_client__lease_rec *rec =
            base_u64map_get(&a->leases, lt_lease_id_to_u64(lease));
        leasec_client__release_done(c, a, p, rec, lease, m->entries[k].status);
    }
}

/* The release was refused as a whole: its leases are held again. */
static void leasec_client__release_refused(struct leasec_client__agent *a,
                                           struct leasec_client__pending *p)
{
    const struct lt_msg_lease_release *q = (const struct lt_msg_lease_release *)p->msg;
    for (uint32_t k = 0; k < q->count; k++) {
        struct leasec_client__lease_rec *rec =
            base_u64map_get(&a->leases, lt_lease_id_to_u64(q->leases[k]));
        if (rec && rec->releasing && rec->release_rid == p->rid)
            rec->releasing = 0;
    }
}

static void leasec_client__completion(struct leasec_client *c, struct leasec_client__agent *a,
                                      struct leasec_client__pending *p,
                                      const struct lt_msg_completion *m)
{
    struct leasec_client_completion cp = {
        .agent = a->index,
        .request_id = p->rid,
        .tag = p->tag,
        .lease = p->lease,
        .op = m->op,
        .status = m->status,
        .err = lt_error_errno(m->status),
        .detail = m->detail,
        .elapsed_ns = m->elapsed_ns,
    };
    /* The public union is the wire union, byte for byte (asserted in ctl.c). */
    memcpy(&cp.result, &m->result, sizeof(cp.result));
    LEASEC_CLIENT__CALL(c, on_completion, &cp);
}

void leasec_client__dispatch(struct leasec_client *c, struct leasec_client__agent *a, size_t len)
{
    const void *buf = c->rx.bytes;
    const struct lt_header *h = buf;
    uint16_t type = 0;
    int fd = c->rx_fd; /* ours from here: used below, or closed */
    c->rx_fd = -1;
    enum lt_error e = lt_validate_from_agent(buf, len, &type);
    if (e == LT_OK && lt_validate_fd_count(type, fd >= 0) != LT_OK) {
        leasec_client__break(c, a, -EPROTO, "a %s came with %d fd(s); expected %u", lt_msg_type_name(type),
                             fd >= 0, lt_msg_info(type).fds);
        if (fd >= 0)
            close(fd);
        return;
    }
    if (e != LT_OK && fd >= 0)
        close(fd);
    if (e != LT_OK) {
        if (e == LT_E_BAD_VERSION && len >= sizeof(*h) && h->magic == LT_MAGIC) {
            /* the header's version, or the one a HELLO_REPLY chose */
            unsigned v = h->version;
            if (v == LT_PROTO_VERSION && h->type == LT_MSG_HELLO_REPLY &&
                len >= sizeof(struct lt_msg_hello_reply))
                v = ((const struct lt_msg_hello_reply *)buf)->version;
            leasec_client__break(c, a, -EPROTONOSUPPORT,
                                 "protocol version mismatch: the agent "
                                 "speaks version %u in a %s, this client speaks %u..%u",
                                 v, lt_msg_type_name(h->type), LT_PROTO_VERSION, LT_PROTO_VERSION);
        } else
            leasec_client__break(c, a, -EPROTO, "refused a %zu-byte message%s%s: %s (%s)", len,
                                 len >= sizeof(*h) ? " claiming type " : "",
                                 len >= sizeof(*h) ? lt_msg_type_name(h->type) : "",
                                 lt_error_name(e), lt_error_describe(e));
        return;
    }
    if (h->request_id == 0) {
        /* Only an ERROR about a message the agent could not read has no id. */
        const struct lt_msg_error *m = buf;
        leasec_client__break(c, a, lt_error_errno(m->code),
                             "the agent could not read a message of "
                             "ours (%s): %s (%s): \"%s\"",
                             lt_msg_type_name(m->failed_type), lt_error_name(m->code),
                             lt_error_describe(m->code), m->message);
        return;
    }
    struct leasec_client__pending *p = base_u64map_get(&a->pending, h->request_id);
    if (!p) {
        leasec_client__break(c, a, -EPROTO, "%s answers request #%llu, which is not in flight",
                             lt_msg_type_name(type), (unsigned long long)h->request_id);
        return;
    }
    e = lt_validate_reply_matches(p->msg, buf);
    if (e != LT_OK) {
        leasec_client__break(c, a, -EPROTO, "%s does not answer %s #%llu: %s (%s)",
                             lt_msg_type_name(type), lt_msg_type_name(p->type),
                             (unsigned long long)p->rid, lt_error_name(e), lt_error_describe(e));
        return;
    }
    const struct lt_msg_error *err_msg = type == LT_MSG_ERROR ? buf : NULL;

    if (p->type == LT_MSG_WORDS_REQUEST) {
        leasec_client__pending_unlink(a, p);
        leasec_client__pending_free(p);
        leasec_client__words(c, a, err_msg ? NULL : buf, err_msg, fd);
        if (a->state == LEASEC_CLIENT_OFFERING && a->offers_out == 0 && !a->broken_err)
            leasec_client__ready(c, a);
        return;
    }
    if (p->type == LT_MSG_HELLO) {
        leasec_client__pending_unlink(a, p);
        leasec_client__pending_free(p);
        if (err_msg)
            leasec_client__break(c, a, lt_error_errno(err_msg->code),
                                 "HELLO (versions %u..%u) "
                                 "refused: %s (%s): \"%s\"",
                                 LT_PROTO_VERSION, LT_PROTO_VERSION, lt_error_name(err_msg->code),
                                 lt_error_describe(err_msg->code), err_msg->message);
        else
            leasec_client__hello_reply(c, a, buf);
        return;
    }
    if (p->type == LT_MSG_LEASE_RELEASE) {
        if (type == LT_MSG_RELEASE_COMPLETE_BATCH) {
            leasec_client__release_complete_batch(c, a, p, buf);
            return;
        }
        if (!err_msg) {
            leasec_client__release_complete(c, a, p, buf);
            return;
        }
        leasec_client__release_refused(a, p);
    }
    if (p->type == LT_MSG_SUBMIT && p->quiet) {
        struct leasec_client__lease_rec *rec =
            base_u64map_get(&a->leases, lt_lease_id_to_u64(p->lease.id));
        if (rec && rec->quiet)
            rec->quiet--;
    }
    leasec_client__pending_unlink(a, p);
    if (err_msg) {
        if (p->type == LT_MSG_RING_CLOSE)
            leasec_client__ring_close_refused(a, p);
        if (p->type == LT_MSG_SEGMENT_OFFER) {
            a->segs[p->seg].state = LEASEC_CLIENT__SEG_REFUSED;
            a->offers_out--;
            leasec_client__log(c, "agent %s refused segment %u: %s: \"%s\"", a->path,
                               c->segs[p->seg].key, lt_error_name(err_msg->code), err_msg->message);
        }
        leasec_client__error_fire(c, a, p, err_msg);
    } else {
        switch (p->type) {
        case LT_MSG_SEGMENT_OFFER:
            a->offers_out--;
            leasec_client__accept(c, a, p, buf);
            break;
        case LT_MSG_LEASE_REQUEST:
            if (leasec_client__grant(c, a, p, buf) < 0)
                return; /* requeued */
            break;
        case LT_MSG_SUBMIT:
        case LT_MSG_RING_SHARD:
            leasec_client__completion(c, a, p, buf);
            break;
        case LT_MSG_RING_OPEN:
        case LT_MSG_RING_CLOSE:
            leasec_client__ring_answer(c, a, p, buf);
        break;
        case LT_MSG_LAUNCH:
            if (p->sync) {
                memcpy(p->sync->reply->bytes, buf, len);
                p->sync->err = 0;
                p->sync->done = 1;
            } else {
                leasec_client__launch_fire(c, a->index, p->rid, p->tag, buf);
            }
            break;
        default:
            if (p->sync) {
                memcpy(p->sync->reply->bytes, buf, len);
                p->sync->err = 0;
                p->sync->done = 1;
            } else {
                leasec_client__reply_fire(c, a->index, p->rid, p->tag, buf);
            }
            break;
        }
    }
    if (p->type == LT_MSG_SEGMENT_OFFER && a->state == LEASEC_CLIENT_OFFERING &&
        a->offers_out == 0 && !a->words_out && !a->broken_err)
        leasec_client__ready(c, a);
    leasec_client__pending_free(p);
}

/* ---- the connection's end ---- */

void leasec_client__fail_all(struct leasec_client *c, struct leasec_client__agent *a, int err,
                             const char *why)
{
    /* Detach first: callbacks may issue requests, which the disconnected
     * agent refuses without touching these lists. */
    struct leasec_client__pending *p = a->head;
    struct base_u64map leases = a->leases; /* moved: a->leases starts empty */
    a->head = a->tail = NULL;
    base_u64map_fini(&a->pending);
    a->in_flight = 0;
    memset(&a->leases, 0, sizeof(a->leases));
    leasec_client__rings_free(&a->rings); /* the agent closes them with the connection */

    while (p) {
        struct leasec_client__pending *next = p->next;
        char msg[LEASEC_CLIENT_ERR_LEN];
        snprintf(msg, sizeof(msg), "%s; %s #%llu was in flight", why, lt_msg_type_name(p->type),
                 (unsigned long long)p->rid);
        if (p->type == LT_MSG_LEASE_RELEASE) {
            const struct lt_msg_lease_release *q = (const struct lt_msg_lease_release *)p->msg;
            for (uint32_t k = 0; k < q->count; k++) {
                struct leasec_client__lease_rec *rec =
                    base_u64map_get(&leases, lt_lease_id_to_u64(q->leases[k]));
                if (!rec || !rec->releasing || rec->release_rid != p->rid)
                    continue;
                struct leasec_client_release r = {.agent = a->index,
                                                  .request_id = p->rid,
                                                  .tag = p->tag,
                                                  .lease = rec->lease,
                                                  .status = LT_OK,
                                                  .err = err,
                                                  .reusable = 0,
                                                  .message = msg};
                LEASEC_CLIENT__CALL(c, on_release, &r);
            }
        } else if (p->type != LT_MSG_HELLO && p->type != LT_MSG_SEGMENT_OFFER &&
                   p->type != LT_MSG_WORDS_REQUEST) {
            leasec_client__error_local(c, a, p, err, msg);
        }
        leasec_client__pending_free(p);
        p = next;
    }
    leasec_client__leases_free(&leases);
}
