/* The executor front's streaming rings (gpu/executor.h, docs/streaming.md):
 * ids in their own base_idtab (owner-checked, like streams), the limits, a
 * ring's sequence bookkeeping and depth, and the ring's life: open (the
 * backend makes its object), shards (jobs the backend completes with
 * ga_exec_job_done), close (the id retires at once, the answer comes when
 * the backend released the ring) and the owner's drop (the backend
 * releases its rings with it). A ring's memory is the front's from open to
 * ga_exec_ring_released, whatever its id does meanwhile. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "front.h"
#include "lease_types/validate.h"

static uint64_t ga_exec__div_up(uint64_t a, uint64_t b)
{
    return a / b + (a % b != 0);
}

/* ---- open --------------------------------------------------------------- */

static int ga_exec__spec_check(const struct ga_exec_ring_spec *sp, struct lt_failure *why)
{
    if (!sp || !sp->slots || !sp->seq || !sp->done || !sp->gone_fn)
        return ga_exec__refuse(why, LT_E_BAD_VALUE,
                               "ring open: expected slots, sequence and done words and a gone "
                               "callback");
    if (sp->nslots == 0 || sp->nslots > LT_RING_SLOTS_MAX || sp->slot_bytes == 0 ||
        sp->slot_bytes > LT_RING_SLOT_BYTES_MAX || sp->depth == 0 || sp->max_shard_bytes == 0)
        return ga_exec__refuse(why, LT_E_BAD_VALUE,
                               "ring open: expected 1..%u slots of 1..%llu bytes, depth >= 1 and "
                               "a shard size; found %" PRIu32 " slots of %" PRIu64
                               " bytes, depth %" PRIu32 ", shards up to %" PRIu64 " bytes",
                               LT_RING_SLOTS_MAX, (unsigned long long)LT_RING_SLOT_BYTES_MAX,
                               sp->nslots, sp->slot_bytes, sp->depth, sp->max_shard_bytes);
    return 0;
}

int ga_exec_ring_open(struct ga_executor *ex, const struct ga_exec_ring_spec *spec,
                      struct lt_ring_id *ring_p, uint32_t *depth_p, struct lt_failure *why_p)
{
    int rc = ga_exec__spec_check(spec, why_p);
    if (rc < 0)
        return rc;
    const struct ga_exec_backend_ops *ops = ex->be.ops;
    if (!ops->ring_open || ex->info.max_rings == 0)
        return ga_exec__refuse(why_p, LT_E_UNSUPPORTED,
                               "RING_OPEN: the %s executor has no streaming rings", ex->info.name);
    struct ga_exec_ring *r = calloc(1, sizeof(*r));
    if (!r)
        return ga_exec__refuse(why_p, LT_E_SYSTEM, "RING_OPEN: out of memory");
    r->ex = ex;
    r->spec = *spec;
    r->depth = spec->depth < GA_EXEC_RING_DEPTH_MAX ? spec->depth : GA_EXEC_RING_DEPTH_MAX;
    r->spec.depth = r->depth;
    r->next_seq = 1;
    struct ga_exec__hold h;
    if ((rc = ga_exec__begin(ex, spec->owner, &h, why_p)) < 0) {
        free(r);
        return rc;
    }
    struct ga_exec_owner *o = h.o;
    if (o->live_rings >= ex->info.max_rings)
        rc = ga_exec__refuse(why_p, LT_E_LIMIT,
                             "RING_OPEN: ring limit reached (%" PRIu32 " of %" PRIu32 ")",
                             o->live_rings, ex->info.max_rings);
    else if ((rc = base_idtab_insert(&ex->rings, r, o->id, &r->id)) < 0)
        rc = ga_exec__refuse(why_p, rc == -ENOSPC ? LT_E_LIMIT : LT_E_SYSTEM, "RING_OPEN: %s",
                             rc == -ENOSPC ? "the agent's ring table is full" : strerror(-rc));
    if (rc < 0) {
        free(r);
        return ga_exec__abort(ex, &h, rc);
    }
    /* The id is reserved while the backend makes the ring; nothing names
     * it before this returns (the owner's verbs come from one thread). */
    r->o = o;
    o->live_rings++;
    pthread_mutex_unlock(&ex->mu);
    /* The backend sizes the ring (its images) for the depth granted. */
    rc = ops->ring_open(ex->be.ctx, o->bo, r, &r->spec, &r->br, why_p);
    pthread_mutex_lock(&ex->mu);
    if (rc < 0) {
        base_idtab_retire(&ex->rings, r->id);
        o->live_rings--;
        free(r);
        return ga_exec__abort(ex, &h, rc);
    }
    o->refs++; /* until ga_exec_ring_released */
    ex->inflight++;
    struct lt_ring_id id = lt_ring_id_from_u64(r->id);
    uint32_t depth = r->depth;
    ga_exec__abort(ex, &h, 0);
    *ring_p = id;
    *depth_p = depth;
    return 0;
}

/* ---- shards --------------------------------------------------------------- */

/* Locked: ring @id of @o with a hold (put with base_idtab_put). */
static int ga_exec__ring_get(struct ga_executor *ex, struct ga_exec_owner *o, struct lt_ring_id id,
                             struct ga_exec_ring **r_p, struct lt_failure *why)
{
    uint64_t key = lt_ring_id_to_u64(id);
    struct base_idtab_slot *slot = NULL;
    enum base_idtab_state st = base_idtab_hold(&ex->rings, key, o->id, &slot);
    if (st != BASE_IDTAB_LIVE)
        return ga_exec__id_refuse(st, "ring", key, slot, why);
    *r_p = slot->obj;
    return 0;
}

const struct ga_exec_shard_info *ga_exec_job_shard(const struct ga_exec_job *job)
{
    return job->ring ? &job->shard : NULL;
}

/* Locked: what is checked against the ring before a shard is accepted. */
static int ga_exec__shard_check(const struct ga_exec_ring *r, const struct ga_exec_shard *s,
                                struct lt_failure *why)
{
    if (s->length > r->spec.max_shard_bytes)
        return ga_exec__refuse(why, LT_E_OUT_OF_RANGE,
                               "RING_SHARD of %" PRIu64 " bytes: the ring takes shards of at most "
                               "%" PRIu64,
                               s->length, r->spec.max_shard_bytes);
    if (s->first_seq != r->next_seq)
        return ga_exec__refuse(why, LT_E_BAD_VALUE,
                               "RING_SHARD first_seq %" PRIu64 ": expected %" PRIu64
                               " (the ring's next chunk)",
                               s->first_seq, r->next_seq);
    if (r->outstanding >= r->depth)
        return ga_exec__refuse(why, LT_E_LIMIT,
                               "RING_SHARD: %" PRIu32 " shards outstanding on the ring, its depth",
                               r->outstanding);
    return 0;
}

int ga_exec_ring_shard(struct ga_executor *ex, const struct ga_exec_shard *s,
                       struct lt_failure *why_p)
{
    if (!s || !s->done_cb || s->length == 0)
        return ga_exec__refuse(why_p, LT_E_BAD_VALUE,
                               "RING_SHARD: expected a nonempty shard and a callback");
    struct ga_exec_job *job = calloc(1, sizeof(*job));
    if (!job)
        return ga_exec__refuse(why_p, LT_E_SYSTEM, "RING_SHARD: out of memory");
    job->ex = ex;
    job->w = (struct ga_exec_work){
        .owner = s->owner,
        .op = s->op,
        .args = s->args,
        .length = s->length,
        .accepted_ns = s->accepted_ns,
        .done_cb = s->done_cb,
        .arg = s->arg,
    };
    struct ga_exec__hold h;
    int rc = ga_exec__begin(ex, s->owner, &h, why_p);
    if (rc < 0) {
        free(job);
        return rc;
    }
    struct ga_exec_ring *r = NULL;
    if ((rc = ga_exec__ring_get(ex, h.o, s->ring, &r, why_p)) < 0) {
        free(job);
        return ga_exec__abort(ex, &h, rc);
    }
    const uint64_t key = r->id;
    if ((rc = ga_exec__shard_check(r, s, why_p)) < 0) {
        base_idtab_put(&ex->rings, key);
        free(job);
        return ga_exec__abort(ex, &h, rc);
    }
    const uint64_t chunks = ga_exec__div_up(s->length, r->spec.slot_bytes);
    job->ring = r;
    job->o = h.o;
    job->shard =
        (struct ga_exec_shard_info){.first_seq = s->first_seq, .chunks = chunks, .hits = s->hits};
    r->next_seq += chunks;
    r->outstanding++;
    h.o->refs++;
    h.o->queued++;
    h.o->submitted++;
    ex->submitted++;
    ex->inflight++;
    pthread_mutex_unlock(&ex->mu);
    rc = ex->be.ops->ring_shard(ex->be.ctx, r->br, job, why_p);
    pthread_mutex_lock(&ex->mu);
    if (rc < 0) {
        /* Nothing was queued: the sequences are the next shard's again. */
        r->next_seq -= chunks;
        r->outstanding--;
        h.o->queued--;
        h.o->submitted--;
        ex->submitted--;
        ga_exec__answered(ex, h.o);
        free(job);
    }
    base_idtab_put(&ex->rings, key);
    return ga_exec__abort(ex, &h, rc);
}

void ga_exec__ring_shard_answered(struct ga_exec_ring *r, uint64_t chunks, uint32_t status)
{
    r->outstanding--;
    if (status == LT_OK || status == LT_E_CHECKSUM_MISMATCH) {
        r->shards_done++;
        r->chunks_done += chunks;
    }
}

/* ---- close, drop, release --------------------------------------------------- */

void ga_exec__ring_answer(const struct ga_exec_ring *r, struct ga_exec_ctl_result *res)
{
    res->ring = lt_ring_id_from_u64(r->id);
    res->ring_shards = r->shards_done;
    res->ring_chunks = r->chunks_done;
}

int ga_exec_ring_close(struct ga_executor *ex, uint64_t owner, struct lt_ring_id ring,
                       const struct ga_exec_reply *reply, struct lt_failure *why_p)
{
    struct ga_exec_call *call = ga_exec__call_new(GA_EXEC__RING_CLOSE, reply, why_p);
    if (!call)
        return lt_error_errno(why_p ? why_p->code : LT_E_SYSTEM);
    struct ga_exec__hold h;
    int rc = ga_exec__begin(ex, owner, &h, why_p);
    if (rc < 0) {
        free(call);
        return rc;
    }
    struct ga_exec_ring *r = NULL;
    if ((rc = ga_exec__ring_get(ex, h.o, ring, &r, why_p)) < 0) {
        free(call);
        return ga_exec__abort(ex, &h, rc);
    }
    base_idtab_put(&ex->rings, r->id);
    base_idtab_retire(&ex->rings, r->id); /* the ring's memory is ours, not the table's */
    r->retired = true;
    h.o->live_rings--;
    call->ex = ex;
    call->o = h.o;
    call->ring = r;
    h.o->refs++;
    ex->inflight++;
    ex->commands++;
    void *br = r->br;
    ga_exec__abort(ex, &h, 0);
    ex->be.ops->ring_close(ex->be.ctx, br, call);
    return 0;
}

void ga_exec__rings_retire(struct ga_executor *ex, struct ga_exec_owner *o)
{
    uint64_t id;
    uint32_t cur = 0;
    for (struct base_idtab_slot *slot; (slot = base_idtab_next(&ex->rings, &cur, &id));) {
        if (slot->owner != o->id)
            continue;
        ((struct ga_exec_ring *)slot->obj)->retired = true;
        base_idtab_retire(&ex->rings, id);
    }
}

void ga_exec_ring_released(struct ga_exec_ring *r, struct ga_exec_call *close)
{
    struct ga_executor *ex = r->ex;
    if (close) {
        struct ga_exec_answer a = {.status = LT_OK};
        ga_exec_call_done(close, &a);
    }
    r->spec.gone_fn(r->spec.gone_arg);
    pthread_mutex_lock(&ex->mu);
    if (!r->retired) {
        /* Released without a close or a drop (a device fault): the id goes now. */
        base_idtab_retire(&ex->rings, r->id);
        r->retired = true;
        if (r->o->live_rings)
            r->o->live_rings--;
    }
    ga_exec__answered(ex, r->o);
    pthread_mutex_unlock(&ex->mu);
    free(r);
}
