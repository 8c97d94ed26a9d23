/* The protocol handlers: every message validated with lease-types before a
 * field is read, answered from the lease service or handed to the executor,
 * refusals turned into ERROR messages with the request id, and the answers
 * of jobs that finished off the loop thread. Lease-types values go to the
 * lease service as they arrived; its refusals come back as struct
 * lt_failure, code and words decided there, and go out unchanged. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

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
    /* Batched release-completes are the server's own, whatever the executor. */
    r.caps = (m->caps & srv->ex->caps & LT_CAP_CLIENT_KNOWN) | (m->caps & LT_CAP_RC_BATCH) |
             (srv->ex->caps & LT_CAP_HOST_BACKEND);
    r.client_id = c->id;
    r.max_lease_batch = LT_MAX_BATCH;
    r.max_streams = srv->ex->max_streams;
    r.max_events = srv->ex->max_events;
    r.max_segments = srv->cfg.max_segments;
    r.max_segment_bytes = srv->cfg.max_segment_bytes;
    r.class_budget[LT_CLASS_STAGED] = UINT64_MAX;
    r.class_budget[LT_CLASS_PINNED] = srv->cfg.budget_pinned;
    r.class_budget[LT_CLASS_MAPPED] = srv->cfg.budget_mapped;
    lt_name_set(r.agent_name, sizeof r.agent_name, srv->agent_name);
    c->hello = true;
    c->caps = r.caps;
    memcpy(c->name, m->name, sizeof c->name);
    ga_server__log(srv, GA_SERVER_LOG_INFO,
                   "client %" PRIu32 ": HELLO from '%s' (pid %ld), caps asked %#x granted %#x",
                   c->id, c->name, (long)c->pid, m->caps, r.caps);
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
    if (c->inflight >= srv->cfg.max_inflight) {
        ga_server__send_error(c, m->hdr.request_id, LT_MSG_SEGMENT_OFFER, LT_E_LIMIT, 0,
                              LT_INDEX_NONE, "%" PRIu32 " requests in flight, the limit",
                              c->inflight);
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

void ga_server__offer_run(struct ga_server *srv, struct ga_server__job *j)
{
    const struct lt_msg_segment_offer *m = &j->offer;
    j->rc = lease_segment_add(srv->svc, j->conn->client, j->fd, m->size, m->mem_class, &j->seg_id,
                              &j->why);
    if (j->rc < 0)
        close(j->fd); /* refused: still ours (lease.h) */
    j->fd = -1;       /* accepted: the lease service's */
}

static void ga_dispatch__offer_done(struct ga_server__conn *c, struct ga_server__job *j)
{
    struct ga_server *srv = c->srv;
    if (j->rc == 0 && !c->closed) {
        struct ga_server__seg *seg = calloc(1, sizeof(*seg));
        uint64_t key = lt_segment_id_to_u64(j->seg_id);
        int rc = seg ? ga_server__map_put(&srv->segs, key, (uint64_t)(uintptr_t)seg) : -ENOMEM;
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
                                           .refs = 1};
            uint64_t slot_key = (uint64_t)j->seg_id.slot + 1;
            ga_server__map_del(&srv->seg_slots, slot_key, NULL);
            ga_server__map_put(&srv->seg_slots, slot_key, key);
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
    uint64_t v = 0;
    struct ga_server__seg *seg = NULL;
    if (ga_server__map_get(&srv->segs, id, &v))
        seg = (struct ga_server__seg *)(uintptr_t)v;
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
    if (seg && ga_server__map_del(&srv->segs, id, NULL)) {
        r.cookie = seg->cookie;
        c->segments--;
        if (seg->mem_class != LT_CLASS_STAGED)
            c->seg_bytes_registered -= seg->size;
        ga_server__seg_unref(seg);
    }
    ga_server__send(c, &r, sizeof r);
}

/* ---- leases ------------------------------------------------------------- */

static void ga_dispatch__lease_request(struct ga_server__conn *c,
                                       const struct lt_msg_lease_request *m)
{
    struct ga_server *srv = c->srv;
    uint32_t n = m->count;
    struct lease_grant_req *reqs = calloc(n, sizeof(*reqs));
    struct lease_grant_result *res = calloc(n, sizeof(*res));
    union {
        uint64_t align;
        unsigned char bytes[LT_MSG_MAX_BYTES];
    } out;
    if (!reqs || !res) {
        ga_server__send_error(c, m->hdr.request_id, LT_MSG_LEASE_REQUEST, LT_E_SYSTEM, -ENOMEM,
                              LT_INDEX_NONE, "agent out of memory");
        goto out;
    }
    for (uint32_t i = 0; i < n; i++) {
        const struct lt_lease_req_entry *e = &m->entries[i];
        reqs[i] = (struct lease_grant_req){
            .segment = e->segment,
            .offset = e->offset,
            .length = e->length,
            .cls = e->mem_class,
            .flags = (e->flags & LT_LEASE_F_ALLOW_STAGED) ? LEASE_GRANT_ALLOW_STAGED : 0u,
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
                                  "entry %" PRIu32 " refused, none granted: %s", i, w->message);
            goto out;
        }
        granted = (int)n;
    } else {
        granted = lease_grant(srv->svc, c->client, n, reqs, res, &why);
        if (granted < 0) {
            ga_server__send_failure(c, m->hdr.request_id, LT_MSG_LEASE_REQUEST, LT_INDEX_NONE,
                                    &why);
            goto out;
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
out:
    free(reqs);
    free(res);
}

static void ga_dispatch__release_complete(struct ga_server__conn *c, uint64_t rid,
                                          struct lt_lease_id lease, uint32_t status)
{
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
    if (c && ga_server__map_del(&c->releases, lt_lease_id_to_u64(lease), &rid))
        ga_dispatch__release_complete(c, rid, lease, LT_OK);
}

void ga_server__on_client_drained(void *arg, struct lease_client_id client)
{
    ga_server__log(arg, GA_SERVER_LOG_INFO,
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
    /* Every entry is written by lease_release: no need to zero them. */
    struct lease_release_result *res = malloc(n * sizeof(*res));
    unsigned char *mine = calloc(n, 1);
    struct lt_failure why;
    int rc = res && mine ? 0 : lt_failure_set(&why, LT_E_SYSTEM, -ENOMEM, "agent out of memory");
    /* Record the request id first: a lease with no work completes inside
     * lease_release, whose callback looks it up. */
    for (uint32_t i = 0; rc == 0 && i < n; i++) {
        rc = ga_server__map_put(&c->releases, lt_lease_id_to_u64(m->leases[i]), rid);
        if (rc == 0)
            mine[i] = 1;
        else if (rc == -EEXIST)
            rc = 0; /* already draining: lease_release says -EALREADY */
        else if (rc == -ENOMEM)
            lt_failure_set(&why, LT_E_SYSTEM, rc, "agent out of memory");
        else /* -EINVAL: key 0, the id {0, 0}, which the validator already refuses */
            lt_failure_set(&why, lt_error_from_errno(rc), rc,
                           "lease {%" PRIu32 ",%" PRIu32 "} is not a lease id", m->leases[i].slot,
                           m->leases[i].gen);
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
                ga_server__map_del(&c->releases, lt_lease_id_to_u64(m->leases[i]), NULL);
        ga_server__send_failure(c, rid, LT_MSG_LEASE_RELEASE, LT_INDEX_NONE, &why);
    } else {
        for (uint32_t i = 0; i < n; i++) {
            if (res[i].rc == 0)
                continue;
            if (mine[i])
                ga_server__map_del(&c->releases, lt_lease_id_to_u64(m->leases[i]), NULL);
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
    free(res);
    free(mine);
}

/* ---- work --------------------------------------------------------------- */

/* Undoes the job's holds on its bell and done segments. */
static void ga_dispatch__unhold(struct ga_server *srv, struct ga_server__job *j)
{
    if (!lt_segment_id_is_null(j->bell_hold))
        lease_segment_unhold(srv->svc, j->bell_hold, NULL);
    if (!lt_segment_id_is_null(j->done_hold))
        lease_segment_unhold(srv->svc, j->done_hold, NULL);
}

static void ga_dispatch__work_done(void *arg, const struct ga_exec_result *res)
{
    struct ga_server__job *j = arg;
    j->res = *res;
    ga_server__post(j->conn->srv, j);
}

static void ga_dispatch__ctl_done(void *arg, const struct ga_exec_ctl_result *res)
{
    struct ga_server__job *j = arg;
    j->ctl = *res;
    ga_server__post(j->conn->srv, j);
}

/* Resolves a bell or done word to one of @c's MAPPED segments. */
static int ga_dispatch__word(struct ga_server__conn *c, const char *what,
                             const struct lt_word_ref *w, struct ga_server__seg **seg_p,
                             uint32_t *code_p, char *msg, size_t msglen)
{
    struct ga_server *srv = c->srv;
    uint64_t id = lt_segment_id_to_u64(w->segment);
    uint64_t v = 0;
    if (!ga_server__map_get(&srv->segs, id, &v)) {
        uint64_t cur = 0;
        bool stale = ga_server__map_get(&srv->seg_slots, (uint64_t)w->segment.slot + 1, &cur) &&
                     (uint32_t)(cur >> 32) > w->segment.gen;
        *code_p = stale ? LT_E_STALE_ID : LT_E_NOT_FOUND;
        snprintf(msg, msglen, "%s segment {%" PRIu32 ",%" PRIu32 "} %s", what, w->segment.slot,
                 w->segment.gen, stale ? "is stale: it was retired" : "is not a live segment");
        return -1;
    }
    struct ga_server__seg *seg = (struct ga_server__seg *)(uintptr_t)v;
    if (seg->conn != c) {
        *code_p = LT_E_NOT_OWNER;
        snprintf(msg, msglen, "%s segment {%" PRIu32 ",%" PRIu32 "} belongs to another client",
                 what, w->segment.slot, w->segment.gen);
        return -1;
    }
    if (seg->mem_class != LT_CLASS_MAPPED) {
        *code_p = LT_E_BAD_CLASS;
        snprintf(msg, msglen, "%s word: expected a MAPPED segment, found %s", what,
                 lt_class_name(seg->mem_class));
        return -1;
    }
    if (w->offset > seg->size - 8) {
        *code_p = LT_E_OUT_OF_RANGE;
        snprintf(msg, msglen,
                 "%s word at %" PRIu64 ": expected at most %" PRIu64 " (segment of %" PRIu64
                 " bytes)",
                 what, w->offset, seg->size - 8, seg->size);
        return -1;
    }
    *seg_p = seg;
    return 0;
}

/* The op's ranges against the lease and the alignment the kernels need. */
static int ga_dispatch__args(const struct lt_msg_submit *m, const struct lease_info *li,
                             uint32_t *code_p, char *msg, size_t msglen)
{
    uint64_t len = li->length;
    uintptr_t base = (uintptr_t)li->host_addr;
    enum lt_error e = LT_OK;
    const char *what = "range";
    switch (m->op) {
    case LT_OP_CHECKSUM_VERIFY: {
        const struct lt_op_checksum_verify *a = &m->args.checksum;
        uint64_t blocks = a->length / a->block_size + (a->length % a->block_size != 0);
        e = lt_range_check(a->offset, a->length, len);
        if (e == LT_OK) {
            what = "checksum table";
            e = lt_range_check(a->sums_offset, blocks * 8, len);
        }
        if (e == LT_OK && ((base + a->offset) % 8 != 0 || (base + a->sums_offset) % 8 != 0)) {
            *code_p = LT_E_MISALIGNED;
            snprintf(msg, msglen,
                     "CHECKSUM_VERIFY: data and sums must be 8-aligned in memory; "
                     "the lease starts at segment offset %" PRIu64,
                     li->offset);
            return -1;
        }
        break;
    }
    case LT_OP_VECTOR_SCAN: {
        const struct lt_op_vector_scan *a = &m->args.scan;
        e = lt_range_check(a->offset, a->length, len);
        if (e == LT_OK) {
            what = "query";
            e = lt_range_check(a->query_offset, (uint64_t)a->dim * lt_elem_size(a->elem), len);
        }
        if (e == LT_OK && a->k != 0) {
            what = "top-k hits";
            e = lt_range_check(a->hits_offset, (uint64_t)a->k * sizeof(struct lt_scan_hit), len);
            if (e == LT_OK && (base + a->hits_offset) % 8 != 0) {
                *code_p = LT_E_MISALIGNED;
                snprintf(msg, msglen,
                         "VECTOR_SCAN: hits must be 8-aligned in memory; "
                         "the lease starts at segment offset %" PRIu64,
                         li->offset);
                return -1;
            }
        }
        break;
    }
    case LT_OP_COPY_H2D:
        e = lt_range_check(m->args.copy.offset, m->args.copy.length, len);
        break;
    }
    if (e == LT_OK)
        return 0;
    *code_p = e;
    snprintf(msg, msglen, "%s %s: expected it within the lease's %" PRIu64 " bytes",
             lt_msg_type_name(LT_MSG_SUBMIT), what, len);
    return -1;
}

static void ga_dispatch__submit(struct ga_server__conn *c, const struct lt_msg_submit *m)
{
    struct ga_server *srv = c->srv;
    uint64_t rid = m->hdr.request_id;
    uint32_t code = LT_OK;
    char msg[160];
    struct ga_server__seg *bell = NULL, *done = NULL;
    struct lease_info li;
    struct lt_failure why;

    if (c->inflight >= srv->cfg.max_inflight) {
        ga_server__send_error(c, rid, LT_MSG_SUBMIT, LT_E_LIMIT, 0, LT_INDEX_NONE,
                              "%" PRIu32 " requests in flight, the limit", c->inflight);
        return;
    }
    if (((m->flags & LT_SUBMIT_F_WAIT_BELL) && !(c->caps & LT_CAP_DOORBELL)) ||
        ((m->flags & LT_SUBMIT_F_SIGNAL_DONE) && !(c->caps & LT_CAP_DONE_WORD))) {
        ga_server__send_error(c, rid, LT_MSG_SUBMIT, LT_E_UNSUPPORTED, 0, LT_INDEX_NONE,
                              "%s needs the %s capability, not granted at HELLO",
                              (m->flags & LT_SUBMIT_F_WAIT_BELL) ? "WAIT_BELL" : "SIGNAL_DONE",
                              (m->flags & LT_SUBMIT_F_WAIT_BELL) ? "DOORBELL" : "DONE_WORD");
        return;
    }
    int rc = lease_query(srv->svc, c->client, m->lease, &li, &why);
    if (rc < 0) {
        ga_server__send_failure(c, rid, LT_MSG_SUBMIT, LT_INDEX_NONE, &why);
        return;
    }
    if (li.released) {
        ga_server__send_error(c, rid, LT_MSG_SUBMIT, LT_E_STALE_ID, 0, LT_INDEX_NONE,
                              "lease {%" PRIu32 ",%" PRIu32 "} was released; no new work on it",
                              m->lease.slot, m->lease.gen);
        return;
    }
    if (ga_dispatch__args(m, &li, &code, msg, sizeof msg) < 0 ||
        ((m->flags & LT_SUBMIT_F_WAIT_BELL) &&
         ga_dispatch__word(c, "bell", &m->bell, &bell, &code, msg, sizeof msg) < 0) ||
        ((m->flags & LT_SUBMIT_F_SIGNAL_DONE) &&
         ga_dispatch__word(c, "done", &m->done, &done, &code, msg, sizeof msg) < 0)) {
        ga_server__send_error(c, rid, LT_MSG_SUBMIT, code, 0, LT_INDEX_NONE, "%s", msg);
        return;
    }
    struct ga_server__job *j = calloc(1, sizeof(*j));
    if (!j) {
        ga_server__send_error(c, rid, LT_MSG_SUBMIT, LT_E_SYSTEM, -ENOMEM, LT_INDEX_NONE,
                              "agent out of memory");
        return;
    }
    /* The GPU waits on and writes the words through the lease service's
     * mapping and registration: hold them (no eviction, no removal, no
     * drain) until the work is done, and take the host and device addresses
     * of the words from it. */
    struct lease_segment_info bell_info = {0}, done_info = {0};
    if (bell) {
        rc = lease_segment_hold(srv->svc, c->client, bell->id, m->bell.offset, 8, &bell_info, &why);
        if (rc == 0)
            j->bell_hold = bell->id;
    }
    if (rc == 0 && done) {
        rc = lease_segment_hold(srv->svc, c->client, done->id, m->done.offset, 8, &done_info, &why);
        if (rc == 0)
            j->done_hold = done->id;
    }
    /* record_allocation: the lease cannot complete its release until this
     * work is done (lease_work_done in ga_server__complete). */
    if (rc == 0)
        rc = lease_work_pin(srv->svc, c->client, m->lease, &j->ticket, &why);
    if (rc < 0) {
        ga_server__send_failure(c, rid, LT_MSG_SUBMIT, LT_INDEX_NONE, &why);
        ga_dispatch__unhold(srv, j);
        free(j);
        return;
    }
    j->kind = GA_JOB_WORK;
    j->conn = c;
    j->request_id = rid;
    j->lease = m->lease;
    j->op = m->op;
    j->flags = m->flags;
    j->bell_seg = bell;
    j->done_seg = done;
    struct ga_exec_work w = {
        .owner = c->client.value,
        .stream = m->stream,
        .op = m->op,
        .args = m->args,
        .host = li.host_addr,
        .dev = li.dev_ptr,
        .length = li.length,
        .mem_class = li.cls,
        .accepted_ns = ga_server__now_ns(),
        .done_cb = ga_dispatch__work_done,
        .arg = j,
    };
    if (bell) {
        w.bell.host = (uint64_t *)(void *)((unsigned char *)bell_info.host_base + m->bell.offset);
        w.bell.dev = bell_info.dev_ptr;
        w.bell.seq = m->bell_seq;
        bell->refs++;
    }
    if (done) {
        w.done.host = (uint64_t *)(void *)((unsigned char *)done_info.host_base + m->done.offset);
        w.done.dev = done_info.dev_ptr;
        w.done.seq = m->done_seq;
        done->refs++;
    }
    c->inflight++;
    why = (struct lt_failure){0};
    rc = srv->ex->ops->submit(srv->ex->ctx, &w, &why);
    if (rc < 0) {
        c->inflight--;
        if (bell)
            ga_server__seg_unref(bell);
        if (done)
            ga_server__seg_unref(done);
        lease_work_done(srv->svc, j->ticket, NULL);
        ga_dispatch__unhold(srv, j);
        free(j);
        ga_server__send_failure(c, rid, LT_MSG_SUBMIT, LT_INDEX_NONE, &why);
        return;
    }
    c->submits++;
}

static void ga_dispatch__ctl(struct ga_server__conn *c, const void *buf, uint16_t type)
{
    struct ga_server *srv = c->srv;
    uint64_t rid = ga_dispatch__rid(buf);
    if (c->inflight >= srv->cfg.max_inflight) {
        ga_server__send_error(c, rid, type, LT_E_LIMIT, 0, LT_INDEX_NONE,
                              "%" PRIu32 " requests in flight, the limit", c->inflight);
        return;
    }
    struct ga_server__job *j = calloc(1, sizeof(*j));
    if (!j) {
        ga_server__send_error(c, rid, type, LT_E_SYSTEM, -ENOMEM, LT_INDEX_NONE,
                              "agent out of memory");
        return;
    }
    j->kind = GA_JOB_CTL;
    j->conn = c;
    j->request_id = rid;
    struct ga_exec_ctl x = {
        .type = type, .owner = c->client.value, .done_cb = ga_dispatch__ctl_done, .arg = j};
    if (type >= LT_MSG_STREAM_CREATE && type <= LT_MSG_STREAM_DESTROY) {
        const struct lt_msg_stream_cmd *m = buf;
        x.stream = m->stream;
        x.flags = m->flags;
    } else if (type >= LT_MSG_EVENT_RECORD && type <= LT_MSG_EVENT_ELAPSED) {
        const struct lt_msg_event_cmd *m = buf;
        x.event = m->event;
        x.end = m->end;
        x.stream = m->stream;
        x.flags = m->flags;
    }
    c->inflight++; /* before: the answer may be posted before ctl returns */
    struct lt_failure why = {0};
    int rc = srv->ex->ops->ctl(srv->ex->ctx, &x, &why);
    if (rc < 0) {
        c->inflight--;
        free(j);
        ga_server__send_failure(c, rid, type, LT_INDEX_NONE, &why);
    }
}

/* ---- stats -------------------------------------------------------------- */

static void ga_dispatch__client_stats(struct ga_server__conn *c, struct lt_client_stats *s)
{
    struct ga_server *srv = c->srv;
    struct lease_client_stats ls = {0};
    struct ga_exec_client_stats xs = {0};
    lease_client_stats(srv->svc, c->client, &ls, NULL);
    srv->ex->ops->client_stats(srv->ex->ctx, c->client.value, &xs);
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
    r->uptime_ns = ga_server__now_ns() - srv->start_ns;
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
        ga_dispatch__submit(c, buf);
        break;
    case LT_MSG_STATS_REQUEST:
        ga_dispatch__stats(c, buf);
        break;
    default:
        if (lt_msg_type_is_ctl(type))
            ga_dispatch__ctl(c, buf, type);
        else /* unreachable: the validator admits only client types */
            ga_server__send_error(c, rid, type, LT_E_WRONG_DIRECTION, 0, LT_INDEX_NONE,
                                  "%s is not a request", lt_msg_type_name(type));
        break;
    }
    for (size_t i = 0; i < nfds; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

static void ga_dispatch__completion(struct ga_server__conn *c, struct ga_server__job *j)
{
    struct lt_msg_completion r;
    lt_msg_init(&r, sizeof r, LT_MSG_COMPLETION, j->request_id);
    r.lease = j->lease;
    r.op = j->op;
    r.status = lt_error_is_known(j->res.status) ? j->res.status : LT_E_GPU_FAULT;
    r.detail = j->res.detail;
    r.elapsed_ns = j->res.elapsed_ns;
    if (r.status == LT_OK || r.status == LT_E_CHECKSUM_MISMATCH)
        r.result = j->res.result;
    /* Results the op never produced still have to read as "none". */
    if (lt_validate_op_result(r.op, &r.result) != LT_OK) {
        memset(&r.result, 0, sizeof r.result);
        if (r.op == LT_OP_CHECKSUM_VERIFY)
            r.result.checksum.first_bad_block = LT_BLOCK_NONE;
        else if (r.op == LT_OP_VECTOR_SCAN)
            r.result.scan.best_index = LT_BLOCK_NONE;
        if (r.status == LT_OK)
            r.status = LT_E_GPU_FAULT;
    }
    if (r.status != LT_OK || !(j->flags & LT_SUBMIT_F_QUIET))
        ga_server__send(c, &r, sizeof r);
}

static void ga_dispatch__ctl_reply(struct ga_server__conn *c, struct ga_server__job *j)
{
    const struct ga_exec_ctl_result *x = &j->ctl;
    if (x->status != LT_OK) {
        ga_server__send_error(c, j->request_id, x->type, x->status, 0, LT_INDEX_NONE, "%s",
                              x->message[0] ? x->message : lt_error_describe(x->status));
        return;
    }
    struct lt_msg_ctl_reply r;
    lt_msg_init(&r, sizeof r, LT_MSG_CTL_REPLY, j->request_id);
    r.request_type = x->type;
    if (x->type == LT_MSG_STREAM_QUERY || x->type == LT_MSG_EVENT_QUERY)
        r.ready = x->ready ? 1u : 0u;
    if (x->type == LT_MSG_STREAM_CREATE)
        r.stream = x->stream;
    if (x->type == LT_MSG_EVENT_RECORD)
        r.event = x->event;
    if (x->type == LT_MSG_EVENT_ELAPSED)
        r.elapsed_ms_bits = lt_f32_bits_finite(x->elapsed_ms_bits) ? x->elapsed_ms_bits : 0u;
    ga_server__send(c, &r, sizeof r);
}

void ga_server__complete(struct ga_server *srv, struct ga_server__job *j)
{
    struct ga_server__conn *c = j->conn;
    switch (j->kind) {
    case GA_JOB_WORK:
        if (!c->closed)
            ga_dispatch__completion(c, j);
        /* After the COMPLETION: a release waiting on this work completes now
         * and its RELEASE_COMPLETE follows on the wire. */
        lease_work_done(srv->svc, j->ticket, NULL);
        if (j->bell_seg)
            ga_server__seg_unref(j->bell_seg);
        if (j->done_seg)
            ga_server__seg_unref(j->done_seg);
        /* Last: the final hold of a dropped client lets its drain finish,
         * and the words' mapping goes only after the work that used it. */
        ga_dispatch__unhold(srv, j);
        break;
    case GA_JOB_CTL:
        if (!c->closed)
            ga_dispatch__ctl_reply(c, j);
        break;
    case GA_JOB_OFFER:
        ga_dispatch__offer_done(c, j);
        break;
    }
    free(j);
    ga_server__conn_put(c);
}
