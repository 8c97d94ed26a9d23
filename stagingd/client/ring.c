/* The lease client's streaming rings (lease/client.h, docs/streaming.md):
 * RING_OPEN over two leases the client holds, RING_SHARD, RING_CLOSE, each
 * checked against what the client knows and validated before it goes out;
 * the rings open on each connection, so a ring of an older connection is
 * refused (-ESTALE) and one being closed takes no shard (-EBUSY). The
 * chunks themselves never pass here: the caller stores sequence words with
 * leasec_client_ring and reads done words with leasec_client_done_word_read. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"

/* The ring's public values and layouts are the wire's: asserted in ctl.c. */

uint64_t leasec_ring_chunks(const struct leasec_ring *ring, uint64_t length)
{
    if (!ring || ring->slot_bytes == 0)
        return 0;
    return length / ring->slot_bytes + (length % ring->slot_bytes != 0);
}

void leasec_client__rings_free(struct base_u64map *rings)
{
    struct base_u64map_iter it;
    struct base_u64map_entry *e;
    base_u64map_iter_init(rings, &it);
    while ((e = base_u64map_iter_next(rings, &it)) != NULL)
        free(e->ptr);
    base_u64map_fini(rings);
}

/* The ring's agent, ready and granting STREAM. */
static int leasec_client__stream_agent(struct leasec_client *c, unsigned agent,
                                       struct leasec_client__agent **a_p)
{
    struct leasec_client__agent *a = leasec_client__agent_get(c, agent);
    int rc = leasec_client__need_ready(c, a, agent);
    if (rc < 0)
        return rc;
    if (!(a->hello.caps & LT_CAP_STREAM))
        return leasec_client__fail(c, -EOPNOTSUPP,
                                   "streaming ring: agent %s did not grant the STREAM capability "
                                   "(caps 0x%x)",
                                   a->path, a->hello.caps);
    *a_p = a;
    return 0;
}

int leasec_client_ring_open(struct leasec_client *c, const struct leasec_client_lease *slots,
                            const struct leasec_client_lease *words,
                            const struct leasec_ring_config *cfg, uint64_t tag,
                            uint64_t *request_id_p)
{
    if (!slots || !words || !cfg)
        return leasec_client__fail(c, -EINVAL, "ring open: expected two leases and a config");
    if (slots->agent != words->agent)
        return leasec_client__fail(c, -EINVAL,
                                   "ring open: slots on agent %u, words on agent %u: expected one",
                                   slots->agent, words->agent);
    struct leasec_client__agent *a = NULL;
    struct leasec_client__lease_rec *sr = NULL, *wr = NULL;
    int rc = leasec_client__stream_agent(c, slots->agent, &a);
    if (rc == 0)
        rc = leasec_client__lease_find(c, a, slots, &sr);
    if (rc == 0)
        rc = leasec_client__lease_find(c, a, words, &wr);
    if (rc < 0)
        return rc;
    if (sr->lease.mem_class != LT_CLASS_PINNED && sr->lease.mem_class != LT_CLASS_MAPPED)
        return leasec_client__fail(c, -EINVAL,
                                   "ring open: the slots lease was served %s; expected PINNED (a "
                                   "lease the pin budget could not cover)",
                                   lt_class_name(sr->lease.mem_class));
    if (wr->lease.mem_class != LT_CLASS_MAPPED)
        return leasec_client__fail(c, -EINVAL,
                                   "ring open: the words lease was served %s; expected MAPPED",
                                   lt_class_name(wr->lease.mem_class));
    struct lt_msg_ring_open m;
    lt_msg_init(&m, sizeof m, LT_MSG_RING_OPEN, 1);
    m.slots = sr->lease.id;
    m.words = wr->lease.id;
    m.slot_bytes = cfg->slot_bytes;
    m.seq_offset = cfg->seq_offset;
    m.done_offset = cfg->done_offset;
    m.max_shard_bytes = cfg->max_shard_bytes;
    m.nslots = cfg->slots;
    m.depth = cfg->depth;
    enum lt_error e = lt_validate_ring_open(&m, sizeof m);
    if (e != LT_OK)
        return leasec_client__fail(c, -EINVAL, "ring open refused before sending: %s (%s)",
                                   lt_error_name(e), lt_error_describe(e));
    const uint64_t ring_bytes = (uint64_t)cfg->slots * cfg->slot_bytes;
    const uint64_t nwords = 8ull * cfg->slots;
    if (ring_bytes > sr->lease.length || cfg->seq_offset + nwords > wr->lease.length ||
        cfg->done_offset + nwords > wr->lease.length)
        return leasec_client__fail(
            c, -ERANGE,
            "ring open: %u slots of %llu bytes in a %llu-byte lease, %u "
            "words at %llu and %llu in a %llu-byte lease: they do not fit",
            cfg->slots, (unsigned long long)cfg->slot_bytes, (unsigned long long)sr->lease.length,
            cfg->slots, (unsigned long long)cfg->seq_offset, (unsigned long long)cfg->done_offset,
            (unsigned long long)wr->lease.length);
    struct leasec_client__pending *p;
    if ((rc = leasec_client__request(c, a, &m, sizeof m, -1, tag, &p)) < 0)
        return rc;
    p->lease = sr->lease;
    *request_id_p = p->rid;
    return 0;
}

/* The record of @ring, open on its agent's current connection. */
static int leasec_client__ring_find(struct leasec_client *c, const struct leasec_ring *ring,
                                    struct leasec_client__agent **a_p,
                                    struct leasec_client__ring_rec **rec_p)
{
    struct leasec_client__agent *a = NULL;
    int rc = leasec_client__stream_agent(c, ring->agent, &a);
    if (rc < 0)
        return rc;
    if (ring->epoch != a->epoch)
        return leasec_client__fail(c, -ESTALE,
                                   "ring %u:%u is from connection %u to agent %s, which is now "
                                   "on connection %u",
                                   ring->id.slot, ring->id.gen, ring->epoch, a->path, a->epoch);
    struct leasec_client__ring_rec *rec = base_u64map_get(&a->rings, lt_ring_id_to_u64(ring->id));
    if (!rec)
        return leasec_client__fail(c, -ENOENT, "ring %u:%u is not open on agent %s", ring->id.slot,
                                   ring->id.gen, a->path);
    if (rec->closing)
        return leasec_client__fail(c, -EBUSY, "ring %u:%u is being closed", ring->id.slot,
                                   ring->id.gen);
    *a_p = a;
    *rec_p = rec;
    return 0;
}

int leasec_client_ring_shard(struct leasec_client *c, const struct leasec_ring *ring,
                             const struct leasec_ring_shard *shard, uint64_t tag,
                             uint64_t *request_id_p)
{
    struct leasec_client__agent *a = NULL;
    struct leasec_client__ring_rec *rec = NULL;
    if (!ring || !shard)
        return leasec_client__fail(c, -EINVAL, "ring shard: expected a ring and a shard");
    int rc = leasec_client__ring_find(c, ring, &a, &rec);
    if (rc < 0)
        return rc;
    if (shard->length > rec->ring.max_shard_bytes)
        return leasec_client__fail(
            c, -EINVAL, "ring shard of %llu bytes: the ring takes at most %llu",
            (unsigned long long)shard->length, (unsigned long long)rec->ring.max_shard_bytes);
    struct lt_msg_ring_shard m;
    lt_msg_init(&m, sizeof m, LT_MSG_RING_SHARD, 1);
    m.ring = rec->ring.id;
    m.first_seq = shard->first_seq;
    m.length = shard->length;
    m.op = shard->op;
    /* The public union is the wire union, byte for byte (asserted in ctl.c). */
    memcpy(&m.args, &shard->args, sizeof m.args);
    enum lt_error e = lt_validate_ring_shard(&m, sizeof m);
    if (e != LT_OK)
        return leasec_client__fail(c, -EINVAL,
                                   "ring shard of op %u refused before sending: %s (%s)", shard->op,
                                   lt_error_name(e), lt_error_describe(e));
    struct leasec_client__pending *p;
    if ((rc = leasec_client__request(c, a, &m, sizeof m, -1, tag, &p)) < 0)
        return rc;
    /* The completion names the slots lease, as a submit's names its lease. */
    struct leasec_client__lease_rec *lr =
        base_u64map_get(&a->leases, lt_lease_id_to_u64(rec->ring.slots_lease));
    if (lr)
        p->lease = lr->lease;
    else
        p->lease = (struct leasec_client_lease){
            .id = rec->ring.slots_lease, .agent = a->index, .epoch = a->epoch};
    *request_id_p = p->rid;
    return 0;
}

int leasec_client_ring_close(struct leasec_client *c, const struct leasec_ring *ring, uint64_t tag,
                             uint64_t *request_id_p)
{
    struct leasec_client__agent *a = NULL;
    struct leasec_client__ring_rec *rec = NULL;
    if (!ring)
        return leasec_client__fail(c, -EINVAL, "ring close: expected a ring");
    int rc = leasec_client__ring_find(c, ring, &a, &rec);
    if (rc < 0)
        return rc;
    struct lt_msg_ring_close m;
    lt_msg_init(&m, sizeof m, LT_MSG_RING_CLOSE, 1);
    m.ring = rec->ring.id;
    struct leasec_client__pending *p;
    if ((rc = leasec_client__request(c, a, &m, sizeof m, -1, tag, &p)) < 0)
        return rc;
    rec->closing = 1;
    *request_id_p = p->rid;
    return 0;
}

/* ---- answers -------------------------------------------------------------- */

void leasec_client__ring_close_refused(struct leasec_client__agent *a,
                                       const struct leasec_client__pending *p)
{
    const struct lt_msg_ring_close *q = (const struct lt_msg_ring_close *)(const void *)p->msg;
    struct leasec_client__ring_rec *rec = base_u64map_get(&a->rings, lt_ring_id_to_u64(q->ring));
    if (rec)
        rec->closing = 0;
}

void leasec_client__ring_answer(struct leasec_client *c, struct leasec_client__agent *a,
                                const struct leasec_client__pending *p, const void *msg)
{
    struct leasec_client_reply r = {
        .agent = a->index, .request_id = p->rid, .tag = p->tag, .request_type = p->type};
    if (p->type == LT_MSG_RING_OPEN) {
        const struct lt_msg_ring_open *q = (const struct lt_msg_ring_open *)(const void *)p->msg;
        const struct lt_msg_ring_opened *m = msg;
        struct leasec_client__ring_rec *rec = calloc(1, sizeof(*rec));
        r.ring = (struct leasec_ring){
            .id = m->ring,
            .agent = a->index,
            .epoch = a->epoch,
            .slots = m->nslots,
            .depth = m->depth,
            .slot_bytes = q->slot_bytes,
            .max_shard_bytes = m->max_shard_bytes,
            .slots_lease = q->slots,
            .words_lease = q->words,
        };
        int rc = rec ? base_u64map_put(&a->rings, lt_ring_id_to_u64(m->ring), rec) : -ENOMEM;
        if (rc < 0) {
            free(rec);
            leasec_client__break(
                c, a, rc == -EEXIST ? -EPROTO : rc, "RING_OPENED #%llu: ring %u:%u %s",
                (unsigned long long)p->rid, m->ring.slot, m->ring.gen,
                rc == -EEXIST ? "is already open (issued twice)" : "cannot be tracked (no memory)");
            return;
        }
        rec->ring = r.ring;
    } else { /* RING_CLOSE -> RING_CLOSED */
        const struct lt_msg_ring_closed *m = msg;
        struct leasec_client__ring_rec *rec =
            base_u64map_get(&a->rings, lt_ring_id_to_u64(m->ring));
        if (rec) {
            r.ring = rec->ring;
            base_u64map_del(&a->rings, lt_ring_id_to_u64(m->ring));
            free(rec);
        } else {
            r.ring.id = m->ring;
        }
        r.ring_shards = m->shards;
        r.ring_chunks = m->chunks;
    }
    LEASEC_CLIENT__CALL(c, on_reply, &r);
}
