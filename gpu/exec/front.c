/* The executor front (gpu/executor.h): owners in a base_u64map, stream and
 * event ids in one base_idtab each, limits, refusals, counters, and the
 * order of a drop and of shutdown, over a backend table
 * (gpu/exec_backend.h) that only runs the work.
 *
 * Locking: one mutex guards the owners, the id tables and the counters. No
 * backend op runs under it: a verb resolves what it names under the lock
 * (ids with a base_idtab hold, so a concurrent destroy cannot close what
 * the op is about to use), drops it, calls the op, and takes it again to
 * put the holds; a stream or event whose last hold goes after its id was
 * retired is closed then, outside the lock. Answers (ga_exec_job_done,
 * ga_exec_call_done) take the lock only around the counters. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/time.h"
#include "front.h"
#include "lease_types/validate.h"

int ga_exec__refuse(struct lt_failure *why, uint32_t code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = lt_failure_vset(why, code, 0, fmt, ap);
    va_end(ap);
    return rc;
}

const char *const ga_exec__names[] = {
    [GA_EXEC__STREAM_QUERY] = "STREAM_QUERY",       [GA_EXEC__STREAM_SYNC] = "STREAM_SYNCHRONIZE",
    [GA_EXEC__EVENT_RECORD] = "EVENT_RECORD",       [GA_EXEC__EVENT_WAIT] = "EVENT_WAIT",
    [GA_EXEC__EVENT_QUERY] = "EVENT_QUERY",         [GA_EXEC__EVENT_SYNC] = "EVENT_SYNCHRONIZE",
    [GA_EXEC__EVENT_ELAPSED] = "EVENT_ELAPSED",     [GA_EXEC__DEVICE_SYNC] = "DEVICE_SYNCHRONIZE",
    [GA_EXEC__WHEN_DONE] = "a stream marker",       [GA_EXEC__STREAM_CREATE] = "STREAM_CREATE",
    [GA_EXEC__STREAM_VALIDATE] = "STREAM_VALIDATE", [GA_EXEC__STREAM_DESTROY] = "STREAM_DESTROY",
    [GA_EXEC__EVENT_DESTROY] = "EVENT_DESTROY",     [GA_EXEC__RING_CLOSE] = "RING_CLOSE",
};

const char *ga_exec_call_name(const struct ga_exec_call *call)
{
    return ga_exec__names[call->verb];
}

const struct ga_executor_info *ga_executor_info(const struct ga_executor *ex)
{
    return &ex->info;
}

/* ---- owners (locked) ----------------------------------------------------- */

void ga_exec__owner_unref(struct ga_executor *ex, struct ga_exec_owner *o)
{
    if (--o->refs != 0)
        return;
    base_u64map_del(&ex->owners, o->id);
    free(o);
}

int ga_exec__owner_get(struct ga_executor *ex, uint64_t owner, struct ga_exec_owner **o_p,
                       struct lt_failure *why)
{
    if (ex->faulted)
        return ga_exec__refuse(why, LT_E_GPU_FAULT,
                               "the GPU faulted (%s): the agent must be restarted",
                               strerror(-ex->fault_err));
    if (ex->stopping)
        return ga_exec__refuse(why, LT_E_SHUTTING_DOWN, "the executor is shutting down");
    struct ga_exec_owner *o = base_u64map_get(&ex->owners, owner);
    if (!o)
        return ga_exec__refuse(why, LT_E_NOT_FOUND, "client %#" PRIx64 " is not registered", owner);
    if (o->dropped)
        return ga_exec__refuse(why, LT_E_SHUTTING_DOWN, "client %#" PRIx64 " is being dropped",
                               owner);
    *o_p = o;
    return 0;
}

/* ---- ids (locked) ------------------------------------------------------- */

/* The refusal for an id that is not live and @owner's: one wording for
 * streams and events. */
int ga_exec__id_refuse(enum base_idtab_state st, const char *what, uint64_t id,
                       const struct base_idtab_slot *slot, struct lt_failure *why)
{
    uint32_t s = base_idtab_id_slot(id), g = base_idtab_id_gen(id);
    switch (st) {
    case BASE_IDTAB_MALFORMED:
        if (g == 0)
            return ga_exec__refuse(why, LT_E_BAD_ID,
                                   "%s {%" PRIu32 ",0}: expected an issued id, found generation 0",
                                   what, s);
        return ga_exec__refuse(why, LT_E_BAD_ID,
                               "%s {0,%" PRIu32 "}: slot 0 is never issued (the default stream is "
                               "{0,0})",
                               what, g);
    case BASE_IDTAB_NEVER:
        return ga_exec__refuse(why, LT_E_NOT_FOUND, "%s {%" PRIu32 ",%" PRIu32 "} was never issued",
                               what, s, g);
    case BASE_IDTAB_STALE:
        return ga_exec__refuse(why, LT_E_STALE_ID,
                               "%s {%" PRIu32 ",%" PRIu32
                               "} is stale: slot now at generation %" PRIu32,
                               what, s, g, slot ? slot->gen : 0u);
    case BASE_IDTAB_RETIRED:
        return ga_exec__refuse(why, LT_E_STALE_ID,
                               "%s {%" PRIu32 ",%" PRIu32 "} is stale: it was destroyed", what, s,
                               g);
    case BASE_IDTAB_FOREIGN:
        return ga_exec__refuse(why, LT_E_NOT_OWNER,
                               "%s {%" PRIu32 ",%" PRIu32 "} belongs to another client", what, s,
                               g);
    case BASE_IDTAB_LIVE:
        break;
    }
    return 0;
}

/* Stream @id of @o with a hold (the default stream needs none). */
int ga_exec__stream_get(struct ga_executor *ex, struct ga_exec_owner *o, struct lt_stream_id id,
                        struct ga_exec__hold *h, struct lt_failure *why)
{
    if (lt_stream_id_is_default(id)) {
        h->s = &o->dflt;
        h->sid = 0;
        return 0;
    }
    uint64_t key = lt_stream_id_to_u64(id);
    struct base_idtab_slot *slot = NULL;
    enum base_idtab_state st = base_idtab_hold(&ex->streams, key, o->id, &slot);
    if (st != BASE_IDTAB_LIVE)
        return ga_exec__id_refuse(st, "stream", key, slot, why);
    h->s = slot->obj;
    h->sid = key;
    return 0;
}

/* Event @id of @o with a hold, into h->e[@i]. */
int ga_exec__event_get(struct ga_executor *ex, struct ga_exec_owner *o, struct lt_event_id id,
                       int i, struct ga_exec__hold *h, struct lt_failure *why)
{
    uint64_t key = lt_event_id_to_u64(id);
    struct base_idtab_slot *slot = NULL;
    enum base_idtab_state st = base_idtab_hold(&ex->events, key, o->id, &slot);
    if (st != BASE_IDTAB_LIVE)
        return ga_exec__id_refuse(st, "event", key, slot, why);
    h->e[i] = slot->obj;
    h->eid[i] = key;
    return 0;
}

/* Closes and frees what a retire or the last put handed back, unlocked. */
void ga_exec__stream_finish(struct ga_executor *ex, struct ga_exec_stream *s)
{
    if (!s)
        return;
    if (!s->gone)
        ex->be.ops->stream_close(ex->be.ctx, s->bs);
    free(s);
}

void ga_exec__event_finish(struct ga_executor *ex, struct ga_exec_event *e)
{
    if (!e)
        return;
    if (!e->gone)
        ex->be.ops->event_close(ex->be.ctx, e->bev);
    free(e);
}

static void ga_exec__hold_put(struct ga_executor *ex, struct ga_exec__hold *h,
                              struct ga_exec__gone *gone)
{
    if (h->s && h->sid)
        gone->s = base_idtab_put(&ex->streams, h->sid);
    for (int i = 0; i < 2; i++)
        if (h->e[i])
            gone->e[i] = base_idtab_put(&ex->events, h->eid[i]);
}

static void ga_exec__gone_finish(struct ga_executor *ex, struct ga_exec__gone *gone)
{
    ga_exec__stream_finish(ex, gone->s);
    ga_exec__event_finish(ex, gone->e[0]);
    ga_exec__event_finish(ex, gone->e[1]);
}

/* ---- answers -------------------------------------------------------------- */

void ga_exec_backend_fault(struct ga_executor *ex, int err)
{
    pthread_mutex_lock(&ex->mu);
    bool first = !ex->faulted;
    ex->faulted = true;
    if (first)
        ex->fault_err = err < 0 ? err : -EIO;
    pthread_mutex_unlock(&ex->mu);
    if (first)
        base_log(&ex->log, BASE_LOG_ERROR, GA_EXEC_SUBSYS,
                 "%s executor: the device faulted (%s); every new request is refused: restart "
                 "the agent",
                 ex->info.name, strerror(err < 0 ? -err : EIO));
}

/* Locked: one answer fewer in flight. */
void ga_exec__answered(struct ga_executor *ex, struct ga_exec_owner *o)
{
    ga_exec__owner_unref(ex, o);
    if (--ex->inflight == 0)
        pthread_cond_broadcast(&ex->idle_cv);
}

const struct ga_exec_work *ga_exec_job_work(const struct ga_exec_job *job)
{
    return &job->w;
}

void ga_exec_job_done(struct ga_exec_job *job, const struct ga_exec_result *res)
{
    struct ga_executor *ex = job->ex;
    struct ga_exec_result r = *res;
    r.elapsed_ns = base_now_ns() - job->w.accepted_ns;
    pthread_mutex_lock(&ex->mu);
    job->o->queued--;
    job->o->completed++;
    job->o->launches -= job->w.op == GA_EXEC_OP_LAUNCH;
    ex->completed++;
    if (job->ring)
        ga_exec__ring_shard_answered(job->ring, job->shard.chunks, r.status);
    if (r.status == LT_E_SHUTTING_DOWN)
        ex->cancelled++;
    else if (r.status != LT_OK && r.status != LT_E_CHECKSUM_MISMATCH)
        ex->failed++;
    pthread_mutex_unlock(&ex->mu);
    job->w.done_cb(job->w.arg, &r);
    pthread_mutex_lock(&ex->mu);
    ga_exec__answered(ex, job->o);
    pthread_mutex_unlock(&ex->mu);
    free(job);
}

void ga_exec_call_done(struct ga_exec_call *call, const struct ga_exec_answer *a)
{
    struct ga_executor *ex = call->ex;
    struct ga_exec_ctl_result r = {.status = a->status, .event = call->event};
    if (call->ring) {
        pthread_mutex_lock(&ex->mu);
        ga_exec__ring_answer(call->ring, &r);
        pthread_mutex_unlock(&ex->mu);
    }
    if (a->status == LT_OK) {
        r.ready = a->ready ? 1u : 0u;
        if (call->verb == GA_EXEC__EVENT_ELAPSED)
            r.elapsed_ms_bits = lt_f32_to_bits(a->elapsed_ms);
    } else {
        snprintf(r.message, sizeof r.message, "%s",
                 a->message ? a->message : lt_error_describe(a->status));
    }
    struct ga_exec_event *fresh = NULL;
    if (call->fresh && a->status != LT_OK) {
        /* The new event was never recorded: its id goes with the refusal,
         * unless a drop retired it already. */
        uint64_t key = lt_event_id_to_u64(call->event);
        struct base_idtab_slot *slot = NULL;
        pthread_mutex_lock(&ex->mu);
        if (base_idtab_lookup(&ex->events, key, &slot) == BASE_IDTAB_LIVE) {
            fresh = base_idtab_retire(&ex->events, key);
            call->o->live_events--;
        }
        pthread_mutex_unlock(&ex->mu);
        r.event = (struct lt_event_id){0, 0};
    }
    ga_exec__event_finish(ex, fresh);
    if (call->when)
        call->when(call->when_arg, a->status);
    else
        call->reply.done_cb(call->reply.arg, &r);
    pthread_mutex_lock(&ex->mu);
    ga_exec__answered(ex, call->o);
    pthread_mutex_unlock(&ex->mu);
    free(call);
}

void ga_exec_call_ok(struct ga_exec_call *call)
{
    struct ga_exec_answer a = {.status = LT_OK};
    ga_exec_call_done(call, &a);
}

/* An answer the front knows at once (no backend involved). */
void ga_exec__reply_now(const struct ga_exec_reply *reply, const struct ga_exec_ctl_result *r)
{
    reply->done_cb(reply->arg, r);
}

/* ---- the verbs' frame --------------------------------------------------- */

/* Locked on success: the owner resolved, busy counted. */
int ga_exec__begin(struct ga_executor *ex, uint64_t owner, struct ga_exec__hold *h,
                   struct lt_failure *why)
{
    memset(h, 0, sizeof *h);
    pthread_mutex_lock(&ex->mu);
    int rc = ga_exec__owner_get(ex, owner, &h->o, why);
    if (rc < 0) {
        pthread_mutex_unlock(&ex->mu);
        return rc;
    }
    h->o->busy++;
    return 0;
}

/* Locked on entry, unlocked on return: a refusal before any op ran. */
int ga_exec__abort(struct ga_executor *ex, struct ga_exec__hold *h, int rc)
{
    struct ga_exec__gone gone = {0};
    ga_exec__hold_put(ex, h, &gone);
    if (--h->o->busy == 0)
        pthread_cond_broadcast(&ex->idle_cv);
    pthread_mutex_unlock(&ex->mu);
    ga_exec__gone_finish(ex, &gone);
    return rc;
}

/* Locked on entry: counts @call as accepted (it will be answered), unlocks
 * and runs @op; then puts the holds. A refused op leaves nothing behind. */
int ga_exec__run(struct ga_executor *ex, struct ga_exec__hold *h, struct ga_exec_call *call,
                 ga_exec__op_fn op, struct lt_failure *why)
{
    call->ex = ex;
    call->o = h->o;
    h->o->refs++;
    ex->inflight++;
    ex->commands++;
    pthread_mutex_unlock(&ex->mu);
    int rc = op(ex, h, call, why);
    pthread_mutex_lock(&ex->mu);
    if (rc < 0) {
        ex->commands--;
        ga_exec__answered(ex, h->o);
    }
    ga_exec__abort(ex, h, rc); /* unlocks */
    if (rc < 0)
        free(call);
    return rc;
}

struct ga_exec_call *ga_exec__call_new(enum ga_exec__verb verb, const struct ga_exec_reply *reply,
                                       struct lt_failure *why)
{
    if (verb != GA_EXEC__WHEN_DONE && (!reply || !reply->done_cb)) {
        ga_exec__refuse(why, LT_E_BAD_VALUE, "%s: expected a reply callback", ga_exec__names[verb]);
        return NULL;
    }
    struct ga_exec_call *call = calloc(1, sizeof(*call));
    if (!call) {
        ga_exec__refuse(why, LT_E_SYSTEM, "%s: out of memory", ga_exec__names[verb]);
        return NULL;
    }
    call->verb = verb;
    if (reply)
        call->reply = *reply;
    return call;
}

/* ---- clients -------------------------------------------------------------- */

int ga_exec_client_add(struct ga_executor *ex, uint64_t owner)
{
    struct ga_exec_owner *o = calloc(1, sizeof(*o));
    if (!o)
        return -ENOMEM;
    o->id = owner;
    o->refs = 1;
    o->busy = 1;
    o->dflt.o = o;
    pthread_mutex_lock(&ex->mu);
    int rc = ex->stopping || ex->faulted ? -ESHUTDOWN : base_u64map_put(&ex->owners, owner, o);
    pthread_mutex_unlock(&ex->mu);
    if (rc < 0) {
        free(o);
        return rc;
    }
    const struct ga_exec_backend_ops *ops = ex->be.ops;
    rc = ops->owner_open(ex->be.ctx, owner, &o->bo);
    if (rc == 0 && (rc = ops->stream_open(ex->be.ctx, o->bo, 0, &o->dflt.bs)) < 0)
        ops->owner_drop(ex->be.ctx, o->bo);
    pthread_mutex_lock(&ex->mu);
    o->busy = 0;
    if (rc < 0) {
        base_u64map_del(&ex->owners, owner);
        free(o);
    }
    pthread_mutex_unlock(&ex->mu);
    return rc;
}

/* Locked: retires every id of @o in @t; the backend releases the objects
 * with the owner, so none is closed here. */
static void ga_exec__retire_owned(struct base_idtab *t, const struct ga_exec_owner *o, bool streams)
{
    uint64_t id;
    uint32_t cur = 0;
    for (struct base_idtab_slot *slot; (slot = base_idtab_next(t, &cur, &id));) {
        if (slot->owner != o->id)
            continue;
        if (streams)
            ((struct ga_exec_stream *)slot->obj)->gone = true;
        else
            ((struct ga_exec_event *)slot->obj)->gone = true;
        free(base_idtab_retire(t, id)); /* NULL while held: the last put frees it */
    }
}

void ga_exec_client_drop(struct ga_executor *ex, uint64_t owner)
{
    pthread_mutex_lock(&ex->mu);
    struct ga_exec_owner *o = base_u64map_get(&ex->owners, owner);
    if (!o || o->dropped) {
        pthread_mutex_unlock(&ex->mu);
        return;
    }
    o->dropped = true; /* new verbs naming it are refused from here */
    while (o->busy)
        pthread_cond_wait(&ex->idle_cv, &ex->mu);
    ga_exec__retire_owned(&ex->streams, o, true);
    ga_exec__retire_owned(&ex->events, o, false);
    ga_exec__rings_retire(ex, o);
    o->live_streams = 0;
    o->live_events = 0;
    o->live_rings = 0;
    o->dflt.gone = true;
    pthread_mutex_unlock(&ex->mu);
    ex->be.ops->owner_drop(ex->be.ctx, o->bo);
    pthread_mutex_lock(&ex->mu);
    ga_exec__owner_unref(ex, o); /* its registration */
    pthread_mutex_unlock(&ex->mu);
}

int ga_exec_client_stats(struct ga_executor *ex, uint64_t owner,
                         struct ga_exec_client_stats *stats_p)
{
    int rc = -ENOENT;
    pthread_mutex_lock(&ex->mu);
    struct ga_exec_owner *o = base_u64map_get(&ex->owners, owner);
    if (o && !o->dropped) {
        *stats_p = (struct ga_exec_client_stats){
            .streams = o->live_streams,
            .events = o->live_events,
            .rings = o->live_rings,
            .queued = o->queued,
            .submitted = o->submitted,
            .completed = o->completed,
        };
        rc = 0;
    }
    pthread_mutex_unlock(&ex->mu);
    return rc;
}

/* ---- work ------------------------------------------------------------------ */

int ga_exec_submit(struct ga_executor *ex, const struct ga_exec_work *w, struct lt_failure *why_p)
{
    if (!w || !w->done_cb || !w->host)
        return ga_exec__refuse(why_p, LT_E_BAD_VALUE,
                               "submit: expected a work item with bytes and a callback");
    if ((w->bell.host && w->bell.seq == 0) || (w->done.host && w->done.seq == 0))
        return ga_exec__refuse(why_p, LT_E_BAD_VALUE, "submit: a bell or done word with seq 0");
    if (w->op == GA_EXEC_OP_LAUNCH && !w->launch)
        return ga_exec__refuse(why_p, LT_E_BAD_VALUE, "launch: expected the launch's request");
    int rc = ex->be.ops->work_check(ex->be.ctx, w, why_p);
    if (rc == 0 && w->op == GA_EXEC_OP_LAUNCH)
        rc = ga_exec__launch_check(ex, w, why_p);
    if (rc < 0)
        return rc;
    struct ga_exec_job *job = calloc(1, sizeof(*job));
    if (!job)
        return ga_exec__refuse(why_p, LT_E_SYSTEM, "submit: out of memory");
    job->ex = ex;
    job->w = *w;
    struct ga_exec__hold h;
    if ((rc = ga_exec__begin(ex, w->owner, &h, why_p)) < 0) {
        free(job);
        return rc;
    }
    if ((rc = ga_exec__stream_get(ex, h.o, w->stream, &h, why_p)) < 0 ||
        (w->op == GA_EXEC_OP_LAUNCH && (rc = ga_exec__launch_admit(ex, h.o, why_p)) < 0)) {
        free(job);
        return ga_exec__abort(ex, &h, rc);
    }
    job->o = h.o;
    h.o->refs++;
    h.o->queued++;
    h.o->submitted++;
    ex->submitted++;
    ex->inflight++;
    pthread_mutex_unlock(&ex->mu);
    rc = ex->be.ops->work_enqueue(ex->be.ctx, h.s->bs, job, why_p);
    pthread_mutex_lock(&ex->mu);
    if (rc < 0) {
        h.o->queued--;
        h.o->submitted--;
        h.o->launches -= w->op == GA_EXEC_OP_LAUNCH;
        ex->submitted--;
        ga_exec__answered(ex, h.o);
        free(job);
    }
    return ga_exec__abort(ex, &h, rc);
}

/* ---- the executor ----------------------------------------------------------------- */

int ga_exec_stats_format(struct ga_executor *ex, char *buf, size_t len)
{
    uint64_t owners = 0, queued = 0;
    pthread_mutex_lock(&ex->mu);
    struct base_u64map_iter it;
    base_u64map_iter_init(&ex->owners, &it);
    for (struct base_u64map_entry *e; (e = base_u64map_iter_next(&ex->owners, &it));) {
        const struct ga_exec_owner *o = e->ptr;
        owners += !o->dropped;
        queued += o->queued;
    }
    int n = snprintf(
        buf, len,
        "%s executor: clients=%" PRIu64 " streams=%" PRIu32 " events=%" PRIu32 " queued=%" PRIu64
        " in_flight=%" PRIu64 " submitted=%" PRIu64 " completed=%" PRIu64 " cancelled=%" PRIu64
        " failed=%" PRIu64 " ctl=%" PRIu64 "%s\n",
        ex->info.name, owners, base_idtab_live(&ex->streams), base_idtab_live(&ex->events), queued,
        ex->inflight, ex->submitted, ex->completed, ex->cancelled, ex->failed, ex->commands,
        ex->faulted ? " FAULTED" : "");
    pthread_mutex_unlock(&ex->mu);
    if (n < 0)
        return n;
    size_t used = (size_t)n < len ? (size_t)n : (len ? len - 1 : 0);
    int m =
        ex->be.ops->stats_format(ex->be.ctx, buf ? buf + used : NULL, len > used ? len - used : 0);
    return m < 0 ? n : n + m;
}

void ga_exec_shutdown(struct ga_executor *ex)
{
    pthread_mutex_lock(&ex->mu);
    if (ex->shut) {
        pthread_mutex_unlock(&ex->mu);
        return;
    }
    ex->stopping = true;
    size_t n = base_u64map_len(&ex->owners), k = 0;
    uint64_t *ids = calloc(n ? n : 1, sizeof(*ids));
    struct base_u64map_iter it;
    base_u64map_iter_init(&ex->owners, &it);
    for (struct base_u64map_entry *e; ids && (e = base_u64map_iter_next(&ex->owners, &it));)
        if (!((struct ga_exec_owner *)e->ptr)->dropped)
            ids[k++] = e->key;
    pthread_mutex_unlock(&ex->mu);
    if (!ids)
        base_log(&ex->log, BASE_LOG_ERROR, GA_EXEC_SUBSYS,
                 "shutdown: out of memory listing %zu clients; their work is left to the "
                 "backend's shutdown",
                 n);
    for (size_t i = 0; i < k; i++)
        ga_exec_client_drop(ex, ids[i]);
    free(ids);
    ex->be.ops->shutdown(ex->be.ctx);
    pthread_mutex_lock(&ex->mu);
    while (ex->inflight)
        pthread_cond_wait(&ex->idle_cv, &ex->mu);
    ex->shut = true;
    pthread_mutex_unlock(&ex->mu);
}

void ga_executor_destroy(struct ga_executor *ex)
{
    if (!ex)
        return;
    ga_exec_shutdown(ex);
    ex->be.ops->destroy(ex->be.ctx);
    /* Every owner was dropped and answered: what is left is their memory. */
    void *obj;
    uint32_t cur = 0;
    struct base_idtab_slot *slot;
    while ((slot = base_idtab_next(&ex->streams, &cur, NULL)) && (obj = slot->obj))
        free(obj);
    cur = 0;
    while ((slot = base_idtab_next(&ex->events, &cur, NULL)) && (obj = slot->obj))
        free(obj);
    struct base_u64map_iter it;
    base_u64map_iter_init(&ex->owners, &it);
    for (struct base_u64map_entry *e; (e = base_u64map_iter_next(&ex->owners, &it));)
        free(e->ptr);
    base_u64map_fini(&ex->owners);
    base_idtab_fini(&ex->streams);
    base_idtab_fini(&ex->events);
    base_idtab_fini(&ex->rings); /* every ring was released: none is left to free */
    pthread_cond_destroy(&ex->idle_cv);
    pthread_mutex_destroy(&ex->mu);
    free(ex);
}

int ga_executor_create(const struct ga_exec_config *cfg, const struct ga_exec_backend *be,
                       struct ga_executor **ex_p)
{
    struct ga_exec_config c = cfg ? *cfg : (struct ga_exec_config){0};
    if (!be || !be->ops || !ex_p || c.limits.max_streams > GA_EXEC_LIMIT_MAX ||
        c.limits.max_events > GA_EXEC_LIMIT_MAX || c.table_streams > GA_EXEC_LIMIT_MAX ||
        c.table_events > GA_EXEC_LIMIT_MAX || c.limits.max_rings > GA_EXEC_LIMIT_MAX ||
        c.table_rings > GA_EXEC_LIMIT_MAX) {
        base_log(&c.log, BASE_LOG_ERROR, GA_EXEC_SUBSYS,
                 "executor: expected a backend and limits in 0..%u, found max_streams %" PRIu32
                 " max_events %" PRIu32 " table_streams %" PRIu32 " table_events %" PRIu32 "%s",
                 GA_EXEC_LIMIT_MAX, c.limits.max_streams, c.limits.max_events, c.table_streams,
                 c.table_events, !be || !be->ops || !ex_p ? " and a NULL pointer" : "");
        return -EINVAL;
    }
    struct ga_executor *ex = calloc(1, sizeof(*ex));
    if (!ex)
        return -ENOMEM;
    ex->be = *be;
    ex->log = c.log;
    ex->launch = c.limits.launch;
    ga_exec__launch_limits_init(&ex->launch);
    ex->info = (struct ga_executor_info){
        .name = be->name,
        .caps = be->caps,
        .max_streams = c.limits.max_streams ? c.limits.max_streams : GA_EXEC_STREAMS_DEFAULT,
        .max_events = c.limits.max_events ? c.limits.max_events : GA_EXEC_EVENTS_DEFAULT,
        .max_rings = c.limits.max_rings ? c.limits.max_rings : GA_EXEC_RINGS_DEFAULT,
    };
    /* Rings need all three ops; a backend without them offers no STREAM. */
    if (!be->ops->ring_open || !be->ops->ring_shard || !be->ops->ring_close) {
        ex->info.caps &= ~LT_CAP_STREAM;
        ex->info.max_rings = 0;
    }
    /* Slot 0 is never issued: {0, 0} is the default stream (and no event).
     * FIFO tables are allocated whole so no slot comes back early. */
    struct base_idtab_config sc = {
        .reuse = c.reuse,
        .max_slots = c.table_streams,
        .initial_slots = c.reuse == BASE_IDTAB_REUSE_FIFO ? c.table_streams : 0,
        .reserve_slot0 = true,
        /* Generations wrap past 0 to 1, as lt_gen_next says the wire's do. */
        .gen_wrap = true,
    };
    struct base_idtab_config ec = sc;
    ec.max_slots = c.table_events;
    ec.initial_slots = c.reuse == BASE_IDTAB_REUSE_FIFO ? c.table_events : 0;
    struct base_idtab_config rc_cfg = sc;
    rc_cfg.max_slots = c.table_rings;
    rc_cfg.initial_slots = c.reuse == BASE_IDTAB_REUSE_FIFO ? c.table_rings : 0;
    int rc = base_idtab_init(&ex->streams, &sc);
    if (rc == 0 && (rc = base_idtab_init(&ex->events, &ec)) < 0)
        base_idtab_fini(&ex->streams);
    if (rc == 0 && (rc = base_idtab_init(&ex->rings, &rc_cfg)) < 0) {
        base_idtab_fini(&ex->streams);
        base_idtab_fini(&ex->events);
    }
    if (rc < 0) {
        free(ex);
        return rc;
    }
    pthread_mutex_init(&ex->mu, NULL);
    pthread_cond_init(&ex->idle_cv, NULL);
    *ex_p = ex;
    return 0;
}
