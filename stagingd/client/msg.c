/* The lease client's requests: the pending table (every request is tracked
 * before it is sent), HELLO and segment offers, lease requests, submits,
 * releases and control messages. Each is checked against what the agent
 * granted and validated with lease-types before it goes out through the
 * transport (conn.c). Answers are dispatch.c's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "client_internal.h"

/* ---- the pending table ---- */

struct leasec_client__pending *leasec_client__pending_new(const void *msg, size_t len, uint64_t tag)
{
    struct leasec_client__pending *p = calloc(1, sizeof(*p) + (len + 7) / 8 * 8);
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

int leasec_client__pending_add(struct leasec_client__agent *a, struct leasec_client__pending *p)
{
    int rc = base_u64map_put(&a->pending, p->rid, p);
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

void leasec_client__pending_unlink(struct leasec_client__agent *a, struct leasec_client__pending *p)
{
    base_u64map_del(&a->pending, p->rid);
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

void leasec_client__pending_free(struct leasec_client__pending *p)
{
    free(p);
}

void leasec_client__leases_free(struct base_u64map *leases)
{
    struct base_u64map_iter it;
    struct base_u64map_entry *e;
    base_u64map_iter_init(leases, &it);
    while ((e = base_u64map_iter_next(leases, &it)) != NULL)
        free(e->ptr);
    base_u64map_fini(leases);
}

static int leasec_client__seg_find(const struct leasec_client *c, uint32_t key)
{
    for (unsigned s = 0; s < c->nsegs; s++)
        if (c->segs[s].key == key)
            return (int)s;
    return -1;
}

static const char *leasec_client__seg_state_name(int state)
{
    switch (state) {
    case LEASEC_CLIENT__SEG_OFFERED:
        return "offered, not yet accepted";
    case LEASEC_CLIENT__SEG_ACCEPTED:
        return "accepted";
    case LEASEC_CLIENT__SEG_REFUSED:
        return "refused";
    default:
        return "not offered";
    }
}

/* Stamps a request id on @msg, records it as pending and sends it. */
int leasec_client__request(struct leasec_client *c, struct leasec_client__agent *a, void *msg,
                           size_t len, int fd, uint64_t tag, struct leasec_client__pending **p_p)
{
    struct lt_header *h = msg;
    h->request_id = a->next_rid++;
    struct leasec_client__pending *p = leasec_client__pending_new(msg, len, tag);
    if (!p)
        return leasec_client__fail(c, -ENOMEM, "no memory to track a %s",
                                   lt_msg_type_name(h->type));
    /* Tracked before it is sent, so an answer can never find it missing. */
    int rc = leasec_client__pending_add(a, p);
    if (rc < 0) {
        leasec_client__pending_free(p);
        return leasec_client__fail(c, rc, "no memory to track a %s", lt_msg_type_name(h->type));
    }
    rc = leasec_client__send(c, a, msg, len, fd);
    if (rc < 0) {
        leasec_client__pending_unlink(a, p);
        leasec_client__pending_free(p);
        return leasec_client__fail(c, rc, "agent %s: %s not sent: %s", a->path,
                                   lt_msg_type_name(h->type),
                                   a->broken_err ? a->broken_msg : strerror(-rc));
    }
    *p_p = p;
    return 0;
}

int leasec_client__need_ready(struct leasec_client *c, struct leasec_client__agent *a,
                              unsigned agent)
{
    static const char *const names[] = {"disconnected", "in handshake", "offering segments",
                                        "ready"};
    if (!a)
        return leasec_client__fail(c, -ENOENT, "no agent %u", agent);
    if (a->state != LEASEC_CLIENT_READY || a->broken_err)
        return leasec_client__fail(c, -ENOTCONN, "agent %s is %s", a->path,
                                   a->broken_err ? "disconnecting" : names[a->state]);
    return 0;
}

/* ---- handshake and segments ---- */

int leasec_client__hello_send(struct leasec_client *c, struct leasec_client__agent *a)
{
    struct lt_msg_hello m;
    struct leasec_client__pending *p;
    lt_msg_init(&m, sizeof(m), LT_MSG_HELLO, 1);
    m.version_min = LT_PROTO_VERSION;
    m.version_max = LT_PROTO_VERSION;
    m.caps = c->caps;
    memcpy(m.name, c->name, sizeof(m.name));
    return leasec_client__request(c, a, &m, sizeof(m), -1, 0, &p);
}

int leasec_client__offer_send(struct leasec_client *c, struct leasec_client__agent *a, unsigned seg)
{
    const struct leasec_client__segment *s = &c->segs[seg];
    struct lt_msg_segment_offer m;
    struct leasec_client__pending *p;
    if (s->size > a->hello.max_segment_bytes) {
        a->segs[seg].state = LEASEC_CLIENT__SEG_REFUSED;
        leasec_client__log(c,
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
    int rc = leasec_client__request(c, a, &m, sizeof(m), s->fd, s->key, &p);
    if (rc < 0)
        return rc;
    p->seg = seg;
    a->segs[seg].state = LEASEC_CLIENT__SEG_OFFERED;
    a->offers_out++;
    a->offers_sent++;
    return 0;
}

int leasec_client__words_send(struct leasec_client *c, struct leasec_client__agent *a)
{
    struct lt_msg_words_request m;
    struct leasec_client__pending *p;
    lt_msg_init(&m, sizeof(m), LT_MSG_WORDS_REQUEST, 1);
    m.bytes = c->words_bytes;
    int rc = leasec_client__request(c, a, &m, sizeof(m), -1, 0, &p);
    if (rc == 0)
        a->words_out = 1;
    return rc;
}

void leasec_client__words_drop(struct leasec_client__agent *a)
{
    if (a->words_base)
        munmap(a->words_base, (size_t)a->words_size);
    a->words_base = NULL;
    a->words_size = 0;
    a->words_out = 0;
    a->words_id = (struct lt_segment_id){0, 0};
}

/* ---- requests ---- */

int leasec_client_lease_request(struct leasec_client *c, unsigned agent,
                                const struct leasec_client_lease_req *reqs, unsigned n,
                                uint32_t req_flags, uint64_t tag, uint64_t *request_id_p)
{
    struct leasec_client__agent *a = leasec_client__agent_get(c, agent);
    union lt_msg_buffer buf;
    struct leasec_client__pending *p;
    int rc = leasec_client__need_ready(c, a, agent);
    if (rc < 0)
        return rc;
    if (n == 0 || n > a->hello.max_lease_batch)
        return leasec_client__fail(c, n ? -E2BIG : -EINVAL,
                                   "lease request of %u entries: agent %s "
                                   "takes 1..%u per request",
                                   n, a->path, a->hello.max_lease_batch);
    if (req_flags & ~LT_LEASE_REQ_F_KNOWN)
        return leasec_client__fail(c, -EINVAL, "lease request flags 0x%x: expected only 0x%x",
                                   req_flags, LT_LEASE_REQ_F_KNOWN);
    size_t len = sizeof(struct lt_msg_lease_request) + n * sizeof(struct lt_lease_req_entry);
    lt_msg_init(&buf, len, LT_MSG_LEASE_REQUEST, 1);
    struct lt_msg_lease_request *m = (struct lt_msg_lease_request *)(void *)&buf;
    m->count = n;
    m->flags = req_flags;
    for (unsigned k = 0; k < n; k++) {
        const struct leasec_client_lease_req *r = &reqs[k];
        int s = leasec_client__seg_find(c, r->segment);
        if (s < 0)
            return leasec_client__fail(c, -ENOENT, "lease entry %u: no segment %u", k, r->segment);
        if (a->segs[s].state != LEASEC_CLIENT__SEG_ACCEPTED)
            return leasec_client__fail(c, -ENOENT, "lease entry %u: segment %u is %s on agent %s",
                                       k, r->segment,
                                       leasec_client__seg_state_name(a->segs[s].state), a->path);
        uint32_t cls = r->mem_class ? r->mem_class : c->segs[s].mem_class;
        if (cls != c->segs[s].mem_class && cls != LT_CLASS_STAGED)
            return leasec_client__fail(c, -EINVAL,
                                       "lease entry %u: class %s on a %s segment: "
                                       "expected the segment's class or STAGED",
                                       k, lt_class_name(cls), lt_class_name(c->segs[s].mem_class));
        enum lt_error e = lt_range_check(r->offset, r->length, c->segs[s].size);
        if (e != LT_OK)
            return leasec_client__fail(
                c, e == LT_E_ZERO_LENGTH ? -EINVAL : -ERANGE,
                "lease entry %u: [%llu, +%llu) in segment %u of %llu bytes: %s", k,
                (unsigned long long)r->offset, (unsigned long long)r->length, r->segment,
                (unsigned long long)c->segs[s].size, lt_error_describe(e));
        if (r->flags & ~LT_LEASE_F_KNOWN)
            return leasec_client__fail(c, -EINVAL, "lease entry %u: flags 0x%x: expected only 0x%x",
                                       k, r->flags, LT_LEASE_F_KNOWN);
        m->entries[k].segment = a->segs[s].id;
        m->entries[k].offset = r->offset;
        m->entries[k].length = r->length;
        m->entries[k].mem_class = cls;
        m->entries[k].flags = r->flags;
    }
    enum lt_error e = lt_validate_lease_request(&buf, len);
    if (e != LT_OK)
        return leasec_client__fail(c, lt_error_errno(e), "lease request refused before sending: %s",
                                   lt_error_describe(e));
    rc = leasec_client__request(c, a, &buf, len, -1, tag, &p);
    if (rc < 0)
        return rc;
    *request_id_p = p->rid;
    return 0;
}

/* The lease record behind @lease, checked to be current and not releasing. */
int leasec_client__lease_find(struct leasec_client *c, struct leasec_client__agent *a,
                              const struct leasec_client_lease *lease,
                              struct leasec_client__lease_rec **rec_p)
{
    if (lease->epoch != a->epoch)
        return leasec_client__fail(c, -ESTALE,
                                   "lease %u:%u is from connection %u to agent %s, "
                                   "which is now on connection %u",
                                   lease->id.slot, lease->id.gen, lease->epoch, a->path, a->epoch);
    struct leasec_client__lease_rec *rec =
        base_u64map_get(&a->leases, lt_lease_id_to_u64(lease->id));
    if (!rec)
        return leasec_client__fail(c, -ENOENT, "lease %u:%u is not held on agent %s",
                                   lease->id.slot, lease->id.gen, a->path);
    if (rec->releasing)
        return leasec_client__fail(c, -EBUSY, "lease %u:%u is being released (#%llu)",
                                   lease->id.slot, lease->id.gen,
                                   (unsigned long long)rec->release_rid);
    *rec_p = rec;
    return 0;
}

/* Fills the wire form of a doorbell or completion word. */
static int leasec_client__word(struct leasec_client *c, struct leasec_client__agent *a,
                               const struct leasec_client_word *w, uint32_t cap, const char *what,
                               struct lt_word_ref *ref_p)
{
    if (!(a->hello.caps & cap))
        return leasec_client__fail(c, -EOPNOTSUPP,
                                   "%s word: agent %s did not grant the capability "
                                   "(caps 0x%x)",
                                   what, a->path, a->hello.caps);
    if (w->segment == LEASEC_WORDS_KEY) {
        if (!a->words_base)
            return leasec_client__fail(c, -ENOENT,
                                       "%s word: agent %s gave this connection no words area",
                                       what, a->path);
        if (w->offset % 8 != 0 || w->offset > a->words_size - 8)
            return leasec_client__fail(c, -EINVAL,
                                       "%s word: offset %llu: expected a multiple of 8 below "
                                       "%llu (the words area)",
                                       what, (unsigned long long)w->offset,
                                       (unsigned long long)a->words_size - 7);
        ref_p->segment = a->words_id;
        ref_p->offset = w->offset;
        return 0;
    }
    int s = leasec_client__seg_find(c, w->segment);
    if (s < 0)
        return leasec_client__fail(c, -ENOENT, "%s word: no segment %u", what, w->segment);
    if (c->segs[s].mem_class != LT_CLASS_MAPPED)
        return leasec_client__fail(c, -EINVAL,
                                   "%s word: segment %u is %s; the GPU reaches words "
                                   "only in MAPPED segments",
                                   what, w->segment, lt_class_name(c->segs[s].mem_class));
    if (a->segs[s].state != LEASEC_CLIENT__SEG_ACCEPTED)
        return leasec_client__fail(c, -ENOENT, "%s word: segment %u is %s on agent %s", what,
                                   w->segment, leasec_client__seg_state_name(a->segs[s].state),
                                   a->path);
    if (w->offset % 8 != 0 || w->offset > c->segs[s].size - 8)
        return leasec_client__fail(c, -EINVAL,
                                   "%s word: offset %llu: expected a multiple of 8 "
                                   "below %llu",
                                   what, (unsigned long long)w->offset,
                                   (unsigned long long)c->segs[s].size - 7);
    ref_p->segment = a->segs[s].id;
    ref_p->offset = w->offset;
    return 0;
}

int leasec_client_submit(struct leasec_client *c, const struct leasec_client_lease *lease,
                         const struct leasec_client_work *work, uint64_t tag,
                         uint64_t *request_id_p)
{
    struct leasec_client__agent *a = leasec_client__agent_get(c, lease->agent);
    struct leasec_client__lease_rec *rec = NULL;
    struct leasec_client__pending *p;
    struct lt_msg_submit m;
    int rc = leasec_client__need_ready(c, a, lease->agent);
    if (rc == 0)
        rc = leasec_client__lease_find(c, a, lease, &rec);
    if (rc < 0)
        return rc;
    if (work->flags & ~LT_SUBMIT_F_QUIET)
        return leasec_client__fail(c, -EINVAL,
                                   "submit flags 0x%x: expected 0 or QUIET (0x%x); the "
                                   "word flags follow bell.seq and done.seq",
                                   work->flags, LT_SUBMIT_F_QUIET);
    lt_msg_init(&m, sizeof(m), LT_MSG_SUBMIT, 1);
    m.lease = rec->lease.id;
    m.stream = work->stream;
    m.op = work->op;
    m.flags = work->flags;
    /* The public union is the wire union, byte for byte (asserted in ctl.c). */
    memcpy(&m.args, &work->args, sizeof(m.args));
    if (work->bell.seq) {
        rc = leasec_client__word(c, a, &work->bell, LT_CAP_DOORBELL, "bell", &m.bell);
        if (rc < 0)
            return rc;
        m.bell_seq = work->bell.seq;
        m.flags |= LT_SUBMIT_F_WAIT_BELL;
    }
    if (work->done.seq) {
        rc = leasec_client__word(c, a, &work->done, LT_CAP_DONE_WORD, "done", &m.done);
        if (rc < 0)
            return rc;
        m.done_seq = work->done.seq;
        m.flags |= LT_SUBMIT_F_SIGNAL_DONE;
    }
    enum lt_error e = lt_validate_submit(&m, sizeof(m));
    if (e != LT_OK)
        return leasec_client__fail(c, lt_error_errno(e),
                                   "submit of op %u refused before sending: "
                                   "%s (%s)",
                                   work->op, lt_error_name(e), lt_error_describe(e));
    rc = leasec_client__request(c, a, &m, sizeof(m), -1, tag, &p);
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

int leasec_client_lease_release(struct leasec_client *c, const struct leasec_client_lease *leases,
                                unsigned n, uint64_t tag, uint64_t *request_id_p)
{
    if (n == 0)
        return leasec_client__fail(c, -EINVAL, "release of 0 leases");
    unsigned agent = leases[0].agent;
    struct leasec_client__agent *a = leasec_client__agent_get(c, agent);
    union lt_msg_buffer buf;
    struct leasec_client__pending *p;
    int rc = leasec_client__need_ready(c, a, agent);
    if (rc < 0)
        return rc;
    if (n > a->hello.max_lease_batch)
        return leasec_client__fail(c, -E2BIG,
                                   "release of %u leases: agent %s takes 1..%u per "
                                   "request",
                                   n, a->path, a->hello.max_lease_batch);
    size_t len = sizeof(struct lt_msg_lease_release) + n * sizeof(struct lt_lease_id);
    lt_msg_init(&buf, len, LT_MSG_LEASE_RELEASE, 1);
    struct lt_msg_lease_release *m = (struct lt_msg_lease_release *)(void *)&buf;
    m->count = n;
    for (unsigned k = 0; k < n; k++) {
        struct leasec_client__lease_rec *rec = NULL;
        if (leases[k].agent != agent)
            return leasec_client__fail(c, -EINVAL,
                                       "release entry %u: lease of agent %u in a "
                                       "release to agent %u",
                                       k, leases[k].agent, agent);
        rc = leasec_client__lease_find(c, a, &leases[k], &rec);
        if (rc < 0)
            return rc;
        m->leases[k] = rec->lease.id;
    }
    enum lt_error e = lt_validate_lease_release(&buf, len);
    if (e != LT_OK)
        return leasec_client__fail(c, -EINVAL, "release refused before sending: %s (%s)",
                                   lt_error_name(e), lt_error_describe(e));
    rc = leasec_client__request(c, a, &buf, len, -1, tag, &p);
    if (rc < 0)
        return rc;
    p->remaining = n;
    for (unsigned k = 0; k < n; k++) {
        struct leasec_client__lease_rec *rec =
            base_u64map_get(&a->leases, lt_lease_id_to_u64(m->leases[k]));
        rec->releasing = 1;
        rec->release_rid = p->rid;
    }
    *request_id_p = p->rid;
    return 0;
}

int leasec_client__msg_send(struct leasec_client *c, unsigned agent, const void *msg, size_t len,
                            uint64_t tag, uint64_t *request_id_p)
{
    struct leasec_client__agent *a = leasec_client__agent_get(c, agent);
    union lt_msg_buffer buf;
    struct leasec_client__pending *p;
    int rc = leasec_client__need_ready(c, a, agent);
    if (rc < 0)
        return rc;
    if (len < sizeof(struct lt_header) || len > LT_MSG_MAX_BYTES)
        return leasec_client__fail(c, -EINVAL, "message of %zu bytes: expected %zu..%u", len,
                                   sizeof(struct lt_header), LT_MSG_MAX_BYTES);
    memcpy(buf.bytes, msg, len);
    uint16_t type = buf.hdr.type;
    if (!lt_msg_type_is_ctl(type) && type != LT_MSG_STATS_REQUEST && type != LT_MSG_LAUNCH)
        return leasec_client__fail(c, -EINVAL,
                                   "a raw send takes stream, event, device, stats and launch "
                                   "requests, not %s (type %u)",
                                   lt_msg_type_name(type), type);
    buf.hdr.request_id = a->next_rid; /* the validator wants a nonzero id */
    enum lt_error e = lt_validate_from_client(buf.bytes, len, NULL);
    if (e != LT_OK)
        return leasec_client__fail(c, lt_error_errno(e), "%s refused before sending: %s (%s)",
                                   lt_msg_type_name(type), lt_error_name(e), lt_error_describe(e));
    rc = leasec_client__request(c, a, buf.bytes, len, -1, tag, &p);
    if (rc < 0)
        return rc;
    *request_id_p = p->rid;
    return 0;
}
