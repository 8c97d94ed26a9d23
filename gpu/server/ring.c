/* Streaming rings on the socket (protocol 1.1, LT_CAP_STREAM;
 * docs/streaming.md). RING_OPEN: both leases resolved in the lease service
 * (slots PINNED or MAPPED and large enough, words MAPPED, 8-aligned, zero)
 * and pinned by the ring (lease_work_pin) until the executor says the
 * ring's work has drained, so a release of either completes only after it;
 * then the executor's ring. RING_SHARD: the op's ranges checked against
 * the shard's image and the words lease, handed to the executor, answered
 * by a COMPLETION naming the slots lease. RING_CLOSE: answered by
 * RING_CLOSED once the ring drained. Per chunk nothing passes here. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/sigbus.h"
#include "conn.h"
#include "jobs.h"
#include "ring.h"
#include "work.h"

/* What the server keeps of one open ring, from RING_OPEN until its gone
 * job ran on the loop. */
struct ga_server__ring {
    struct ga_server__conn *conn;
    struct lt_ring_id id;
    struct lt_lease_id slots, words;
    struct lease_ticket slots_ticket, words_ticket;
    unsigned char *words_host;
    uint64_t words_len;
    uint64_t seq_offset, done_offset;
    uint32_t nslots;
    struct ga_server__job *gone; /* allocated at open: the release never fails */
    bool listed;                 /* in conn->rings */
};

static int ga_ring__cap(struct ga_server__conn *c, uint64_t rid, uint16_t type)
{
    if (!(c->caps & LT_CAP_STREAM)) {
        ga_server__send_error(c, rid, type, LT_E_UNSUPPORTED, 0, LT_INDEX_NONE,
                              "%s needs the STREAM capability, not granted at HELLO",
                              lt_msg_type_name(type));
        return -1;
    }
    char full[LT_ERROR_MSG_LEN];
    if (!ga_server__inflight_room(c, full, sizeof full)) {
        ga_server__send_error(c, rid, type, LT_E_LIMIT, 0, LT_INDEX_NONE, "%s", full);
        return -1;
    }
    return 0;
}

/* On a backend thread: the ring's work drained; its leases go on the loop. */
static void ga_ring__gone(void *arg)
{
    struct ga_server__ring *rec = arg;
    ga_server__post(rec->conn->srv, rec->gone);
}

/* The answer to a close nobody asked for (a ring the server could not track). */
static void ga_ring__ignore(void *arg, const struct ga_exec_ctl_result *res)
{
    (void)arg;
    (void)res;
}

/* ---- RING_OPEN ----------------------------------------------------------- */

/* Resolves both leases of @m into *@s and *@w; 0, or -1 after an ERROR. */
static int ga_ring__leases(struct ga_server__conn *c, const struct lt_msg_ring_open *m,
                           struct lease_info *s, struct lease_info *w)
{
    struct ga_server *srv = c->srv;
    const uint64_t rid = m->hdr.request_id;
    struct lt_failure why;
    const struct lt_lease_id ids[2] = {m->slots, m->words};
    struct lease_info *out[2] = {s, w};
    for (int k = 0; k < 2; k++) {
        /* The slots are the data the GPU copies: never in a words-only
         * lease; the words lease is what ALLOW_WORDS is for. */
        int rc = lease_query(srv->svc, c->client, ids[k], out[k], &why);
        if (rc == 0 && k == 0) {
            char what[48];
            snprintf(what, sizeof what, "slots lease {%" PRIu32 ",%" PRIu32 "}", ids[k].slot,
                     ids[k].gen);
            rc = ga_server__lease_as_data(what, out[k], &why);
        }
        if (rc < 0) {
            ga_server__send_failure(c, rid, LT_MSG_RING_OPEN, LT_INDEX_NONE, &why);
            return -1;
        }
        if (out[k]->released) {
            ga_server__send_error(c, rid, LT_MSG_RING_OPEN, LT_E_STALE_ID, 0, LT_INDEX_NONE,
                                  "%s lease {%" PRIu32 ",%" PRIu32 "} was released",
                                  k ? "words" : "slots", ids[k].slot, ids[k].gen);
            return -1;
        }
    }
    const uint64_t ring_bytes = (uint64_t)m->nslots * m->slot_bytes; /* <= 2^38: validated */
    const uint64_t words = 8ull * m->nslots;
    uint32_t code = LT_OK;
    char msg[160];
    if (s->cls != LT_CLASS_PINNED && s->cls != LT_CLASS_MAPPED) {
        code = LT_E_BAD_CLASS;
        snprintf(msg, sizeof msg,
                 "ring slots: expected a PINNED or MAPPED lease, found %s (the pin budget was "
                 "spent)",
                 lt_class_name(s->cls));
    } else if (ring_bytes > s->length) {
        code = LT_E_OUT_OF_RANGE;
        snprintf(msg, sizeof msg,
                 "ring slots: %" PRIu32 " of %" PRIu64 " bytes need %" PRIu64
                 " bytes; the lease has %" PRIu64,
                 m->nslots, m->slot_bytes, ring_bytes, s->length);
    } else if (w->cls != LT_CLASS_MAPPED || w->dev_ptr == 0) {
        code = LT_E_BAD_CLASS;
        snprintf(msg, sizeof msg, "ring words: expected a MAPPED lease, found %s",
                 lt_class_name(w->cls));
    } else if (!w->writable) {
        /* The GPU writes the done words (and a scan's hits), the agent
         * reads them: never into a mapping it holds read-only. */
        code = LT_E_UNSUPPORTED;
        /* Short enough for the wire's LT_ERROR_MSG_LEN, remedy included. */
        snprintf(msg, sizeof msg,
                 "ring words lease {%" PRIu32 ",%" PRIu32 "} sealed F_SEAL_FUTURE_WRITE; use an "
                 "unsealed MAPPED segment",
                 m->words.slot, m->words.gen);
    } else if (lt_range_check(m->seq_offset, words, w->length) != LT_OK ||
               lt_range_check(m->done_offset, words, w->length) != LT_OK) {
        code = LT_E_OUT_OF_RANGE;
        snprintf(msg, sizeof msg,
                 "ring words: %" PRIu32 " sequence words at %" PRIu64 " and done words at %" PRIu64
                 ": expected them within the words lease's %" PRIu64 " bytes",
                 m->nslots, m->seq_offset, m->done_offset, w->length);
    } else if (((uintptr_t)w->host_addr + m->seq_offset) % 8 != 0 ||
               ((uintptr_t)w->host_addr + m->done_offset) % 8 != 0) {
        code = LT_E_MISALIGNED;
        snprintf(msg, sizeof msg,
                 "ring words must be 8-aligned in memory; the words lease starts at segment "
                 "offset %" PRIu64,
                 w->offset);
    }
    if (code == LT_OK) {
        const uint64_t *seq =
            (const uint64_t *)(const void *)((unsigned char *)w->host_addr + m->seq_offset);
        const uint64_t *done =
            (const uint64_t *)(const void *)((unsigned char *)w->host_addr + m->done_offset);
        for (uint32_t i = 0; i < m->nslots && code == LT_OK; i++) {
            uint64_t a = 0, b = 0;
            if (base_guard_load_u64(&seq[i], &a) < 0 || base_guard_load_u64(&done[i], &b) < 0) {
                code = LT_E_SEGMENT_GONE;
                snprintf(msg, sizeof msg, "ring words: slot %" PRIu32 "'s words could not be read",
                         i);
            } else if (a != 0 || b != 0) {
                code = LT_E_BAD_VALUE;
                snprintf(msg, sizeof msg,
                         "ring words: expected all 0 at open (chunks count from 1), found slot "
                         "%" PRIu32 " seq %" PRIu64 " done %" PRIu64,
                         i, a, b);
            }
        }
    }
    if (code != LT_OK) {
        ga_server__send_error(c, rid, LT_MSG_RING_OPEN, code, 0, LT_INDEX_NONE, "%s", msg);
        return -1;
    }
    return 0;
}

static void ga_ring__unpin(struct ga_server *srv, struct ga_server__ring *rec, int pins)
{
    if (pins > 0)
        lease_work_done(srv->svc, rec->slots_ticket, NULL);
    if (pins > 1)
        lease_work_done(srv->svc, rec->words_ticket, NULL);
}

void ga_server__ring_open(struct ga_server__conn *c, const struct lt_msg_ring_open *m)
{
    struct ga_server *srv = c->srv;
    const uint64_t rid = m->hdr.request_id;
    if (ga_ring__cap(c, rid, LT_MSG_RING_OPEN) < 0)
        return;
    if (srv->cfg.rings_trust_client && c->uid != 0 && c->uid != geteuid()) {
        ga_server__send_error(c, rid, LT_MSG_RING_OPEN, LT_E_UNSUPPORTED, 0, LT_INDEX_NONE,
                              "rings here (--ring-dispatch wait) trust their client: uid %u is "
                              "not the agent's",
                              (unsigned)c->uid);
        return;
    }
    struct lease_info s, w;
    if (ga_ring__leases(c, m, &s, &w) < 0)
        return;
    struct ga_server__ring *rec = calloc(1, sizeof(*rec));
    struct ga_server__job *gone = calloc(1, sizeof(*gone));
    if (!rec || !gone) {
        free(rec);
        free(gone);
        ga_server__send_error(c, rid, LT_MSG_RING_OPEN, LT_E_SYSTEM, -ENOMEM, LT_INDEX_NONE,
                              "agent out of memory");
        return;
    }
    rec->conn = c;
    rec->slots = m->slots;
    rec->words = m->words;
    rec->words_host = w.host_addr;
    rec->words_len = w.length;
    rec->seq_offset = m->seq_offset;
    rec->done_offset = m->done_offset;
    rec->nslots = m->nslots;
    rec->gone = gone;
    gone->kind = GA_JOB_RING_GONE;
    gone->conn = c;
    gone->ring = rec;
    struct lt_failure why = {0};
    int pins = 0;
    int rc = lease_work_pin(srv->svc, c->client, m->slots, &rec->slots_ticket, &why);
    if (rc == 0 && ++pins &&
        (rc = lease_work_pin(srv->svc, c->client, m->words, &rec->words_ticket, &why)) == 0)
        pins++;
    struct lt_ring_id id = {0, 0};
    uint32_t depth = 0;
    if (rc == 0) {
        struct ga_exec_ring_spec spec = {
            .owner = c->client.value,
            .slots = s.host_addr,
            .slot_bytes = m->slot_bytes,
            .nslots = m->nslots,
            .depth = m->depth,
            .max_shard_bytes = m->max_shard_bytes,
            .seq = (uint64_t *)(void *)((unsigned char *)w.host_addr + m->seq_offset),
            .seq_dev = w.dev_ptr + m->seq_offset,
            .done = (uint64_t *)(void *)((unsigned char *)w.host_addr + m->done_offset),
            .done_dev = w.dev_ptr + m->done_offset,
            .gone_fn = ga_ring__gone,
            .gone_arg = rec,
        };
        rc = ga_exec_ring_open(srv->ex, &spec, &id, &depth, &why);
    }
    if (rc < 0) {
        ga_ring__unpin(srv, rec, pins);
        free(gone);
        free(rec);
        ga_server__send_failure(c, rid, LT_MSG_RING_OPEN, LT_INDEX_NONE, &why);
        return;
    }
    rec->id = id;
    c->inflight++; /* the gone job's, posted once the ring drained */
    if (base_u64map_put(&c->rings, lt_ring_id_to_u64(id), rec) < 0) {
        /* Untracked, the ring could carry no shard: close it at once. */
        struct lt_failure ignored;
        const struct ga_exec_reply none = {.done_cb = ga_ring__ignore};
        ga_exec_ring_close(srv->ex, c->client.value, id, &none, &ignored);
        ga_server__send_error(c, rid, LT_MSG_RING_OPEN, LT_E_SYSTEM, -ENOMEM, LT_INDEX_NONE,
                              "agent out of memory");
        return;
    }
    rec->listed = true;
    struct lt_msg_ring_opened r;
    lt_msg_init(&r, sizeof r, LT_MSG_RING_OPENED, rid);
    r.ring = id;
    r.depth = depth;
    r.nslots = m->nslots;
    r.max_shard_bytes = m->max_shard_bytes;
    base_log(&srv->cfg.log, BASE_LOG_DEBUG, GA_SERVER__SUBSYS,
             "client %" PRIu32 ": ring {%" PRIu32 ",%" PRIu32 "}: %" PRIu32 " slots of %" PRIu64
             " bytes, depth %" PRIu32,
             c->id, id.slot, id.gen, m->nslots, m->slot_bytes, depth);
    ga_server__send(c, &r, sizeof r);
}

/* ---- RING_SHARD ---------------------------------------------------------- */

static void ga_ring__shard_done(void *arg, const struct ga_exec_result *res)
{
    struct ga_server__job *j = arg;
    j->res = *res;
    ga_server__post(j->conn->srv, j);
}

/* The op's ranges: inside the image of @m->length bytes, and a scan's hits
 * inside the words lease, 8-aligned, clear of the ring's own words. */
static int ga_ring__args(const struct lt_msg_ring_shard *m, const struct ga_server__ring *rec,
                         uint32_t *code_p, char *msg, size_t len)
{
    const uint64_t L = m->length;
    enum lt_error e = LT_OK;
    const char *what = "range";
    switch (m->op) {
    case LT_OP_CHECKSUM_VERIFY: {
        const struct lt_op_checksum_verify *a = &m->args.checksum;
        uint64_t blocks = a->length / a->block_size + (a->length % a->block_size != 0);
        e = lt_range_check(a->offset, a->length, L);
        if (e == LT_OK) {
            what = "checksum table";
            e = lt_range_check(a->sums_offset, blocks * 8, L);
        }
        break;
    }
    case LT_OP_VECTOR_SCAN: {
        const struct lt_op_vector_scan *a = &m->args.scan;
        e = lt_range_check(a->offset, a->length, L);
        if (e == LT_OK) {
            what = "query";
            e = lt_range_check(a->query_offset, (uint64_t)a->dim * lt_elem_size(a->elem), L);
        }
        if (e == LT_OK && a->k != 0 && rec) {
            const uint64_t hb = (uint64_t)a->k * sizeof(struct lt_scan_hit);
            const uint64_t words = 8ull * rec->nslots;
            what = "top-k hits (in the words lease)";
            e = lt_range_check(a->hits_offset, hb, rec->words_len);
            if (e == LT_OK && ((uintptr_t)rec->words_host + a->hits_offset) % 8 != 0)
                e = LT_E_MISALIGNED;
            if (e == LT_OK && ((a->hits_offset < rec->seq_offset + words &&
                                rec->seq_offset < a->hits_offset + hb) ||
                               (a->hits_offset < rec->done_offset + words &&
                                rec->done_offset < a->hits_offset + hb))) {
                *code_p = LT_E_BAD_VALUE;
                snprintf(msg, len,
                         "RING_SHARD top-k hits at %" PRIu64 " (+%" PRIu64
                         ") overlap the ring's sequence or done words",
                         a->hits_offset, hb);
                return -1;
            }
        }
        break;
    }
    case LT_OP_COPY_H2D:
        e = lt_range_check(m->args.copy.offset, m->args.copy.length, L);
        break;
    }
    if (e == LT_OK)
        return 0;
    *code_p = e;
    snprintf(msg, len, "RING_SHARD %s: expected it within the shard's %" PRIu64 " bytes%s", what, L,
             e == LT_E_MISALIGNED ? " and 8-aligned" : "");
    return -1;
}

void ga_server__ring_shard(struct ga_server__conn *c, const struct lt_msg_ring_shard *m)
{
    struct ga_server *srv = c->srv;
    const uint64_t rid = m->hdr.request_id;
    if (ga_ring__cap(c, rid, LT_MSG_RING_SHARD) < 0)
        return;
    /* Not listed: the executor refuses the id with the words it deserves. */
    struct ga_server__ring *rec = base_u64map_get(&c->rings, lt_ring_id_to_u64(m->ring));
    uint32_t code = LT_OK;
    char msg[160];
    if (ga_ring__args(m, rec, &code, msg, sizeof msg) < 0) {
        ga_server__send_error(c, rid, LT_MSG_RING_SHARD, code, 0, LT_INDEX_NONE, "%s", msg);
        return;
    }
    struct ga_server__job *j = calloc(1, sizeof(*j));
    if (!j) {
        ga_server__send_error(c, rid, LT_MSG_RING_SHARD, LT_E_SYSTEM, -ENOMEM, LT_INDEX_NONE,
                              "agent out of memory");
        return;
    }
    j->kind = GA_JOB_SHARD;
    j->conn = c;
    j->request_id = rid;
    j->ring = rec;
    j->op = m->op;
    j->lease = rec ? rec->slots : (struct lt_lease_id){0, 0};
    struct ga_exec_shard sh = {
        .owner = c->client.value,
        .ring = m->ring,
        .first_seq = m->first_seq,
        .length = m->length,
        .op = m->op,
        .args = m->args,
        .hits = rec && m->op == LT_OP_VECTOR_SCAN && m->args.scan.k
                    ? rec->words_host + m->args.scan.hits_offset
                    : NULL,
        .accepted_ns = base_now_ns(),
        .done_cb = ga_ring__shard_done,
        .arg = j,
    };
    c->inflight++; /* before: the answer may be posted before the verb returns */
    struct lt_failure why = {0};
    /* Every live ring of this client is listed, so an unlisted one is
     * refused by the executor (never issued, stale, another client's). */
    int rc = ga_exec_ring_shard(srv->ex, &sh, &why);
    if (rc < 0) {
        c->inflight--;
        free(j);
        ga_server__send_failure(c, rid, LT_MSG_RING_SHARD, LT_INDEX_NONE, &why);
        return;
    }
    c->submits++;
}

/* ---- RING_CLOSE ------------------------------------------------------------ */

static void ga_ring__close_done(void *arg, const struct ga_exec_ctl_result *res)
{
    struct ga_server__job *j = arg;
    j->ctl = *res;
    ga_server__post(j->conn->srv, j);
}

void ga_server__ring_close(struct ga_server__conn *c, const struct lt_msg_ring_close *m)
{
    struct ga_server *srv = c->srv;
    const uint64_t rid = m->hdr.request_id;
    if (ga_ring__cap(c, rid, LT_MSG_RING_CLOSE) < 0)
        return;
    struct ga_server__job *j = calloc(1, sizeof(*j));
    if (!j) {
        ga_server__send_error(c, rid, LT_MSG_RING_CLOSE, LT_E_SYSTEM, -ENOMEM, LT_INDEX_NONE,
                              "agent out of memory");
        return;
    }
    j->kind = GA_JOB_CTL;
    j->conn = c;
    j->request_id = rid;
    j->ctl_type = LT_MSG_RING_CLOSE;
    j->ring = base_u64map_get(&c->rings, lt_ring_id_to_u64(m->ring));
    c->inflight++;
    const struct ga_exec_reply reply = {.done_cb = ga_ring__close_done, .arg = j};
    struct lt_failure why = {0};
    if (ga_exec_ring_close(srv->ex, c->client.value, m->ring, &reply, &why) < 0) {
        c->inflight--;
        free(j);
        ga_server__send_failure(c, rid, LT_MSG_RING_CLOSE, LT_INDEX_NONE, &why);
    }
}

void ga_server__ring_closed_reply(struct ga_server__conn *c, struct ga_server__job *j)
{
    const struct ga_exec_ctl_result *x = &j->ctl;
    if (x->status != LT_OK) {
        ga_server__send_error(c, j->request_id, LT_MSG_RING_CLOSE, x->status, 0, LT_INDEX_NONE,
                              "%s", x->message[0] ? x->message : lt_error_describe(x->status));
        return;
    }
    struct lt_msg_ring_closed r;
    lt_msg_init(&r, sizeof r, LT_MSG_RING_CLOSED, j->request_id);
    r.ring = x->ring;
    r.shards = x->ring_shards;
    r.chunks = x->ring_chunks;
    ga_server__send(c, &r, sizeof r);
}

/* ---- answers on the loop ----------------------------------------------------- */

static void ga_ring__completion(struct ga_server__conn *c, struct ga_server__job *j)
{
    struct lt_msg_completion r;
    ga_server__completion_build(j, &r);
    ga_server__send(c, &r, sizeof r);
}

void ga_server__ring_complete(struct ga_server *srv, struct ga_server__job *j)
{
    struct ga_server__conn *c = j->conn;
    if (j->kind == GA_JOB_SHARD) {
        if (!c->closed)
            ga_ring__completion(c, j);
        return;
    }
    /* GA_JOB_RING_GONE: the ring holds nothing any more; its leases may
     * complete their releases now. */
    struct ga_server__ring *rec = j->ring;
    if (rec->listed)
        base_u64map_del(&c->rings, lt_ring_id_to_u64(rec->id));
    ga_ring__unpin(srv, rec, 2);
    free(rec); /* its gone job is @j, which the caller frees */
}
