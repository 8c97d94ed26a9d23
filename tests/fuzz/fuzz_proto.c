/* Fuzz target "proto": lease-types' decoders and validators, both ways.
 *
 * Input: a control byte (bits 0-1: the fd count the message came with), a
 * split byte, then two messages: the first (split/256 of the rest) as a
 * request, the rest as its reply. Each is copied to a buffer of exactly its
 * size (so ASan sees a read past the end) and run through
 * lt_validate_from_client, lt_validate_from_agent and lt_validate_fd_count;
 * a request and reply that both validate go through
 * lt_validate_reply_matches. Promises checked: a validator that accepts a
 * message reports its type, the type is one of the direction's, and the
 * header's length equals the bytes received. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "lease_types/validate.h"

const char fz_name[] = "proto";

/* Validates @m both ways; returns its type when it passes as @dir's. */
static uint16_t proto__check(const void *m, size_t len, unsigned nfds, uint16_t dir)
{
    uint16_t t_client = 0, t_agent = 0;
    enum lt_error ec = lt_validate_from_client(m, len, &t_client);
    enum lt_error ea = lt_validate_from_agent(m, len, &t_agent);
    if (!lt_error_is_known(ec) || !lt_error_is_known(ea))
        fz_fail("a validator returned an unknown code (%u, %u)", ec, ea);
    const struct lt_header *h = m;
    if (ec == LT_OK) {
        if (len < sizeof *h || h->length != len || t_client != h->type ||
            !(lt_msg_info(t_client).dir & LT_DIR_TO_AGENT))
            fz_fail("accepted from a client: type %u, %zu bytes", t_client, len);
        (void)lt_validate_fd_count(t_client, nfds);
        (void)lt_msg_type_name(t_client);
    }
    if (ea == LT_OK) {
        if (len < sizeof *h || h->length != len || t_agent != h->type ||
            !(lt_msg_info(t_agent).dir & LT_DIR_TO_CLIENT))
            fz_fail("accepted from the agent: type %u, %zu bytes", t_agent, len);
        if (t_agent == LT_MSG_ERROR) {
            const struct lt_msg_error *e = m;
            (void)lt_error_describe(e->code);
            if (strnlen(e->message, sizeof e->message) >= sizeof e->message)
                fz_fail("an accepted ERROR's message is not terminated");
        }
    }
    if (dir == LT_DIR_TO_AGENT)
        return ec == LT_OK ? t_client : 0;
    return ea == LT_OK ? t_agent : 0;
}

int fz_one(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 1;
    unsigned nfds = data[0] & 3u;
    size_t rest = size - 2;
    size_t alen = rest * data[1] / 256;
    const uint8_t *a = data + 2, *b = a + alen;
    size_t blen = rest - alen;
    /* Exactly sized copies; malloc aligns them for every field. */
    void *qa = malloc(alen ? alen : 1), *qb = malloc(blen ? blen : 1);
    if (!qa || !qb)
        abort();
    memcpy(qa, a, alen);
    memcpy(qb, b, blen);
    uint16_t tq = proto__check(qa, alen, nfds, LT_DIR_TO_AGENT);
    uint16_t tr = proto__check(qb, blen, nfds, LT_DIR_TO_CLIENT);
    int taken = 1;
    if (tq && tr) {
        enum lt_error e = lt_validate_reply_matches(qa, qb);
        if (!lt_error_is_known(e))
            fz_fail("lt_validate_reply_matches returned an unknown code %u", e);
        taken = 0;
    }
    free(qa);
    free(qb);
    return taken;
}

/* ---- seeds: a request and its reply, as the agent would pair them ---- */

struct proto__pair {
    union lt_msg_buffer q, r;
    size_t qlen, rlen;
};

static int proto__emit(const char *dir, const char *name, const struct proto__pair *p)
{
    uint8_t out[2 + 2 * sizeof(union lt_msg_buffer)];
    size_t rest = p->qlen + p->rlen;
    out[0] = 0;
    /* The split byte rounds down: pick the smallest that yields qlen. */
    unsigned split = 0;
    while (split < 255 && rest * split / 256 < p->qlen)
        split++;
    if (rest * split / 256 != p->qlen)
        return -EINVAL;
    out[1] = (uint8_t)split;
    memcpy(out + 2, p->q.bytes, p->qlen);
    memcpy(out + 2 + p->qlen, p->r.bytes, p->rlen);
    return fz_write_file(dir, name, out, 2 + rest);
}

int fz_seeds(const char *dir)
{
    struct proto__pair p;
    int n = 0, rc;

    memset(&p, 0, sizeof p);
    struct lt_msg_hello *h = (void *)p.q.bytes;
    lt_msg_init(h, sizeof *h, LT_MSG_HELLO, 1);
    h->version_min = h->version_max = 1;
    h->caps = LT_CAP_DOORBELL | LT_CAP_RC_BATCH;
    lt_name_set(h->name, sizeof h->name, "seed");
    struct lt_msg_hello_reply *hr = (void *)p.r.bytes;
    lt_msg_init(hr, sizeof *hr, LT_MSG_HELLO_REPLY, 1);
    hr->version = 1;
    hr->caps = LT_CAP_DOORBELL | LT_CAP_RC_BATCH | LT_CAP_HOST_BACKEND;
    hr->client_id = 1;
    hr->max_lease_batch = LT_MAX_BATCH;
    hr->max_streams = hr->max_events = hr->max_segments = 16;
    hr->max_segment_bytes = 1u << 30;
    hr->class_budget[1] = UINT64_MAX;
    hr->class_budget[2] = hr->class_budget[3] = 1u << 20;
    lt_name_set(hr->agent_name, sizeof hr->agent_name, "ga-host");
    p.qlen = sizeof *h;
    p.rlen = sizeof *hr;
    if ((rc = proto__emit(dir, "seed-hello", &p)) < 0)
        return rc;
    n++;

    memset(&p, 0, sizeof p);
    struct lt_msg_segment_offer *o = (void *)p.q.bytes;
    lt_msg_init(o, sizeof *o, LT_MSG_SEGMENT_OFFER, 2);
    o->cookie = 7;
    o->size = 1u << 21;
    o->mem_class = LT_CLASS_PINNED;
    struct lt_msg_segment_accept *sa = (void *)p.r.bytes;
    lt_msg_init(sa, sizeof *sa, LT_MSG_SEGMENT_ACCEPT, 2);
    sa->cookie = 7;
    sa->segment = lt_segment_id_make(0, 1);
    sa->size = 1u << 21;
    sa->mem_class = LT_CLASS_PINNED;
    p.qlen = sizeof *o;
    p.rlen = sizeof *sa;
    if ((rc = proto__emit(dir, "seed-offer", &p)) < 0)
        return rc;
    n++;

    memset(&p, 0, sizeof p);
    struct lt_msg_lease_request *lr = (void *)p.q.bytes;
    size_t lrlen = sizeof *lr + 2 * sizeof lr->entries[0];
    lt_msg_init(lr, lrlen, LT_MSG_LEASE_REQUEST, 3);
    lr->count = 2;
    for (int i = 0; i < 2; i++) {
        lr->entries[i].segment = lt_segment_id_make(0, 1);
        lr->entries[i].offset = (uint64_t)i << 12;
        lr->entries[i].length = 4096;
        lr->entries[i].mem_class = LT_CLASS_PINNED;
        lr->entries[i].flags = LT_LEASE_F_ALLOW_STAGED;
    }
    struct lt_msg_lease_grant *g = (void *)p.r.bytes;
    size_t glen = sizeof *g + 2 * sizeof g->entries[0];
    lt_msg_init(g, glen, LT_MSG_LEASE_GRANT, 3);
    g->count = 2;
    g->entries[0].lease = lt_lease_id_make(0, 1);
    g->entries[0].mem_class = LT_CLASS_PINNED;
    g->entries[1].lease = lt_lease_id_make(1, 1);
    g->entries[1].mem_class = LT_CLASS_STAGED;
    p.qlen = lrlen;
    p.rlen = glen;
    if ((rc = proto__emit(dir, "seed-lease", &p)) < 0)
        return rc;
    n++;

    memset(&p, 0, sizeof p);
    struct lt_msg_lease_release *rl = (void *)p.q.bytes;
    size_t rllen = sizeof *rl + 2 * sizeof rl->leases[0];
    lt_msg_init(rl, rllen, LT_MSG_LEASE_RELEASE, 4);
    rl->count = 2;
    rl->leases[0] = lt_lease_id_make(0, 1);
    rl->leases[1] = lt_lease_id_make(1, 1);
    struct lt_msg_release_complete_batch *rb = (void *)p.r.bytes;
    size_t rblen = sizeof *rb + 2 * sizeof rb->entries[0];
    lt_msg_init(rb, rblen, LT_MSG_RELEASE_COMPLETE_BATCH, 4);
    rb->count = 2;
    rb->entries[0].lease = lt_lease_id_make(0, 1);
    rb->entries[1].lease = lt_lease_id_make(1, 1);
    p.qlen = rllen;
    p.rlen = rblen;
    if ((rc = proto__emit(dir, "seed-release", &p)) < 0)
        return rc;
    n++;

    memset(&p, 0, sizeof p);
    struct lt_msg_submit *s = (void *)p.q.bytes;
    lt_msg_init(s, sizeof *s, LT_MSG_SUBMIT, 5);
    s->lease = lt_lease_id_make(0, 1);
    s->op = LT_OP_CHECKSUM_VERIFY;
    s->flags = LT_SUBMIT_F_WAIT_BELL | LT_SUBMIT_F_SIGNAL_DONE;
    s->bell.segment = lt_segment_id_make(1, 1);
    s->bell_seq = 1;
    s->done.segment = lt_segment_id_make(1, 1);
    s->done.offset = 8;
    s->done_seq = 1;
    s->args.checksum.length = 8192;
    s->args.checksum.sums_offset = 8192;
    s->args.checksum.block_size = 4096;
    struct lt_msg_completion *c = (void *)p.r.bytes;
    lt_msg_init(c, sizeof *c, LT_MSG_COMPLETION, 5);
    c->lease = s->lease;
    c->op = LT_OP_CHECKSUM_VERIFY;
    c->status = LT_E_CHECKSUM_MISMATCH;
    c->result.checksum.blocks_checked = 2;
    c->result.checksum.first_bad_block = 1;
    c->result.checksum.bad_blocks = 1;
    p.qlen = sizeof *s;
    p.rlen = sizeof *c;
    if ((rc = proto__emit(dir, "seed-submit", &p)) < 0)
        return rc;
    n++;

    memset(&p, 0, sizeof p);
    struct lt_msg_stats_request *sr = (void *)p.q.bytes;
    lt_msg_init(sr, sizeof *sr, LT_MSG_STATS_REQUEST, 6);
    sr->flags = LT_STATS_F_ALL_CLIENTS;
    struct lt_msg_error *e = (void *)p.r.bytes;
    lt_msg_init(e, sizeof *e, LT_MSG_ERROR, 6);
    e->code = LT_E_LIMIT;
    e->err = lt_error_errno(LT_E_LIMIT);
    e->failed_type = LT_MSG_STATS_REQUEST;
    e->index = LT_INDEX_NONE;
    lt_name_set(e->message, sizeof e->message, "seed refusal");
    p.qlen = sizeof *sr;
    p.rlen = sizeof *e;
    if ((rc = proto__emit(dir, "seed-error", &p)) < 0)
        return rc;
    n++;

    memset(&p, 0, sizeof p);
    struct lt_msg_event_cmd *ev = (void *)p.q.bytes;
    lt_msg_init(ev, sizeof *ev, LT_MSG_EVENT_RECORD, 7);
    ev->flags = 1;
    struct lt_msg_ctl_reply *cr = (void *)p.r.bytes;
    lt_msg_init(cr, sizeof *cr, LT_MSG_CTL_REPLY, 7);
    cr->request_type = LT_MSG_EVENT_RECORD;
    cr->event = lt_event_id_make(0, 1);
    p.qlen = sizeof *ev;
    p.rlen = sizeof *cr;
    if ((rc = proto__emit(dir, "seed-ctl", &p)) < 0)
        return rc;
    n++;
    return n;
}
