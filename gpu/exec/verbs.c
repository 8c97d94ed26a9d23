/* The executor front's commands (gpu/executor.h): stream create, validate,
 * query, synchronize and destroy; event record, wait, query, synchronize,
 * destroy and elapsed; device synchronize; stream markers and
 * record_allocation. Each resolves and checks what it names under the lock
 * (front.c's frame) and hands the backend its objects. */
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

/* ---- streams ----------------------------------------------------------------- */

int ga_exec_stream_create(struct ga_executor *ex, uint64_t owner, uint32_t flags,
                          const struct ga_exec_reply *reply, struct lt_failure *why_p)
{
    if (!reply || !reply->done_cb)
        return ga_exec__refuse(why_p, LT_E_BAD_VALUE, "STREAM_CREATE: expected a reply callback");
    if (flags & ~LT_STREAM_F_KNOWN)
        return ga_exec__refuse(why_p, LT_E_UNKNOWN_FLAGS, "STREAM_CREATE: unknown flags %#x",
                               flags);
    struct ga_exec_stream *s = calloc(1, sizeof(*s));
    if (!s)
        return ga_exec__refuse(why_p, LT_E_SYSTEM, "STREAM_CREATE: out of memory");
    struct ga_exec__hold h;
    int rc = ga_exec__begin(ex, owner, &h, why_p);
    if (rc < 0) {
        free(s);
        return rc;
    }
    struct ga_exec_owner *o = h.o;
    if (o->live_streams >= ex->info.max_streams) {
        free(s);
        return ga_exec__abort(ex, &h,
                              ga_exec__refuse(why_p, LT_E_LIMIT,
                                              "STREAM_CREATE: stream limit reached (%" PRIu32
                                              " of %" PRIu32 ")",
                                              o->live_streams, ex->info.max_streams));
    }
    if (base_idtab_full(&ex->streams)) {
        free(s);
        return ga_exec__abort(ex, &h,
                              ga_exec__refuse(why_p, LT_E_LIMIT,
                                              "STREAM_CREATE: the agent's stream table is full: "
                                              "%" PRIu32 " of %" PRIu32 " in use",
                                              base_idtab_used(&ex->streams),
                                              base_idtab_max(&ex->streams)));
    }
    o->live_streams++; /* reserved while the backend makes it */
    pthread_mutex_unlock(&ex->mu);
    rc = ex->be.ops->stream_open(ex->be.ctx, o->bo, flags, &s->bs);
    pthread_mutex_lock(&ex->mu);
    uint64_t id = 0;
    s->o = o;
    if (rc == 0 && (rc = base_idtab_insert(&ex->streams, s, o->id, &id)) < 0) {
        pthread_mutex_unlock(&ex->mu);
        ex->be.ops->stream_close(ex->be.ctx, s->bs);
        pthread_mutex_lock(&ex->mu);
    }
    if (rc < 0) {
        o->live_streams--;
        free(s);
        rc = ga_exec__abort(
            ex, &h,
            ga_exec__refuse(why_p, rc == -ENOSPC ? LT_E_LIMIT : LT_E_SYSTEM, "STREAM_CREATE: %s",
                            rc == -ENOSPC ? "the agent's stream table is full" : strerror(-rc)));
        return rc;
    }
    ga_exec__abort(ex, &h, 0);
    struct ga_exec_ctl_result r = {.status = LT_OK, .stream = lt_stream_id_from_u64(id)};
    ga_exec__reply_now(reply, &r);
    return 0;
}

int ga_exec_stream_validate(struct ga_executor *ex, uint64_t owner, struct lt_stream_id stream,
                            const struct ga_exec_reply *reply, struct lt_failure *why_p)
{
    if (!reply || !reply->done_cb)
        return ga_exec__refuse(why_p, LT_E_BAD_VALUE, "STREAM_VALIDATE: expected a reply callback");
    struct ga_exec__hold h;
    int rc = ga_exec__begin(ex, owner, &h, why_p);
    if (rc == 0)
        rc = ga_exec__stream_get(ex, h.o, stream, &h, why_p);
    if (rc < 0 && !h.o)
        return rc;
    ga_exec__abort(ex, &h, rc);
    if (rc == 0) {
        struct ga_exec_ctl_result r = {.status = LT_OK};
        ga_exec__reply_now(reply, &r);
    }
    return rc;
}

static int ga_exec__op_stream_query(struct ga_executor *ex, const struct ga_exec__hold *h,
                                    struct ga_exec_call *call, struct lt_failure *why)
{
    return ex->be.ops->stream_query(ex->be.ctx, h->s->bs, call, why);
}

static int ga_exec__op_stream_sync(struct ga_executor *ex, const struct ga_exec__hold *h,
                                   struct ga_exec_call *call, struct lt_failure *why)
{
    return ex->be.ops->stream_sync(ex->be.ctx, h->s->bs, call, why);
}

/* A command on one stream: resolve, accept, run @op. */
static int ga_exec__on_stream(struct ga_executor *ex, uint64_t owner, struct lt_stream_id stream,
                              struct ga_exec_call *call, ga_exec__op_fn op,
                              struct lt_failure *why_p)
{
    if (!call)
        return why_p ? lt_error_errno(why_p->code) : -ENOMEM;
    struct ga_exec__hold h;
    int rc = ga_exec__begin(ex, owner, &h, why_p);
    if (rc == 0 && (rc = ga_exec__stream_get(ex, h.o, stream, &h, why_p)) < 0)
        ga_exec__abort(ex, &h, rc);
    if (rc < 0) {
        free(call);
        return rc;
    }
    return ga_exec__run(ex, &h, call, op, why_p);
}

int ga_exec_stream_query(struct ga_executor *ex, uint64_t owner, struct lt_stream_id stream,
                         const struct ga_exec_reply *reply, struct lt_failure *why_p)
{
    struct ga_exec_call *call = ga_exec__call_new(GA_EXEC__STREAM_QUERY, reply, why_p);
    return ga_exec__on_stream(ex, owner, stream, call, ga_exec__op_stream_query, why_p);
}

int ga_exec_stream_synchronize(struct ga_executor *ex, uint64_t owner, struct lt_stream_id stream,
                               const struct ga_exec_reply *reply, struct lt_failure *why_p)
{
    struct ga_exec_call *call = ga_exec__call_new(GA_EXEC__STREAM_SYNC, reply, why_p);
    return ga_exec__on_stream(ex, owner, stream, call, ga_exec__op_stream_sync, why_p);
}

int ga_exec_stream_when_done(struct ga_executor *ex, uint64_t owner, struct lt_stream_id stream,
                             void (*fn)(void *arg, uint32_t status), void *arg,
                             struct lt_failure *why_p)
{
    if (!fn)
        return ga_exec__refuse(why_p, LT_E_BAD_VALUE, "stream marker: expected a function");
    struct ga_exec_call *call = ga_exec__call_new(GA_EXEC__WHEN_DONE, NULL, why_p);
    if (call) {
        call->when = fn;
        call->when_arg = arg;
    }
    return ga_exec__on_stream(ex, owner, stream, call, ga_exec__op_stream_sync, why_p);
}

int ga_exec_stream_destroy(struct ga_executor *ex, uint64_t owner, struct lt_stream_id stream,
                           const struct ga_exec_reply *reply, struct lt_failure *why_p)
{
    if (!reply || !reply->done_cb)
        return ga_exec__refuse(why_p, LT_E_BAD_VALUE, "STREAM_DESTROY: expected a reply callback");
    struct ga_exec__hold h;
    int rc = ga_exec__begin(ex, owner, &h, why_p);
    if (rc < 0)
        return rc;
    if (lt_stream_id_is_default(stream))
        return ga_exec__abort(
            ex, &h,
            ga_exec__refuse(why_p, LT_E_BAD_ID,
                            "STREAM_DESTROY: the default stream cannot be destroyed"));
    if ((rc = ga_exec__stream_get(ex, h.o, stream, &h, why_p)) < 0)
        return ga_exec__abort(ex, &h, rc);
    /* Retired now, closed when the hold just taken is put: queued work on
     * it still runs, as in CUDA. */
    base_idtab_retire(&ex->streams, h.sid);
    h.o->live_streams--;
    ga_exec__abort(ex, &h, 0);
    struct ga_exec_ctl_result r = {.status = LT_OK};
    ga_exec__reply_now(reply, &r);
    return 0;
}

/* ---- events ------------------------------------------------------------------- */

static int ga_exec__op_event_record(struct ga_executor *ex, const struct ga_exec__hold *h,
                                    struct ga_exec_call *call, struct lt_failure *why)
{
    return ex->be.ops->event_record(ex->be.ctx, h->s->bs, h->e[0]->bev, call, why);
}

static int ga_exec__op_event_wait(struct ga_executor *ex, const struct ga_exec__hold *h,
                                  struct ga_exec_call *call, struct lt_failure *why)
{
    return ex->be.ops->event_wait(ex->be.ctx, h->s->bs, h->e[0]->bev, call, why);
}

static int ga_exec__op_event_query(struct ga_executor *ex, const struct ga_exec__hold *h,
                                   struct ga_exec_call *call, struct lt_failure *why)
{
    return ex->be.ops->event_query(ex->be.ctx, h->e[0]->bev, call, why);
}

static int ga_exec__op_event_sync(struct ga_executor *ex, const struct ga_exec__hold *h,
                                  struct ga_exec_call *call, struct lt_failure *why)
{
    return ex->be.ops->event_sync(ex->be.ctx, h->e[0]->bev, call, why);
}

static int ga_exec__op_event_elapsed(struct ga_executor *ex, const struct ga_exec__hold *h,
                                     struct ga_exec_call *call, struct lt_failure *why)
{
    return ex->be.ops->event_elapsed(ex->be.ctx, h->e[0]->bev, h->e[1]->bev, call, why);
}

/* A new event for @h->o, given an id and held in h->e[0]. Locked on entry
 * and return (dropped around event_open). */
static int ga_exec__event_new(struct ga_executor *ex, struct ga_exec__hold *h, uint32_t flags,
                              struct lt_failure *why)
{
    struct ga_exec_owner *o = h->o;
    if (flags & ~LT_EVENT_F_KNOWN)
        return ga_exec__refuse(why, LT_E_UNKNOWN_FLAGS, "EVENT_RECORD: unknown flags %#x", flags);
    if (o->live_events >= ex->info.max_events)
        return ga_exec__refuse(why, LT_E_LIMIT,
                               "EVENT_RECORD: event limit reached (%" PRIu32 " of %" PRIu32 ")",
                               o->live_events, ex->info.max_events);
    if (base_idtab_full(&ex->events))
        return ga_exec__refuse(why, LT_E_LIMIT,
                               "EVENT_RECORD: the agent's event table is full: %" PRIu32
                               " of %" PRIu32 " in use",
                               base_idtab_used(&ex->events), base_idtab_max(&ex->events));
    struct ga_exec_event *e = calloc(1, sizeof(*e));
    if (!e)
        return ga_exec__refuse(why, LT_E_SYSTEM, "EVENT_RECORD: out of memory");
    e->o = o;
    e->flags = flags;
    o->live_events++; /* reserved while the backend makes it */
    pthread_mutex_unlock(&ex->mu);
    int rc = ex->be.ops->event_open(ex->be.ctx, o->bo, flags, &e->bev);
    pthread_mutex_lock(&ex->mu);
    uint64_t id = 0;
    struct base_idtab_slot *slot = NULL;
    if (rc == 0 && (rc = base_idtab_insert(&ex->events, e, o->id, &id)) < 0) {
        pthread_mutex_unlock(&ex->mu);
        ex->be.ops->event_close(ex->be.ctx, e->bev);
        pthread_mutex_lock(&ex->mu);
    }
    if (rc < 0) {
        o->live_events--;
        free(e);
        return ga_exec__refuse(why, rc == -ENOSPC ? LT_E_LIMIT : LT_E_SYSTEM, "EVENT_RECORD: %s",
                               rc == -ENOSPC ? "the agent's event table is full" : strerror(-rc));
    }
    base_idtab_hold(&ex->events, id, o->id, &slot);
    h->e[0] = e;
    h->eid[0] = id;
    return 0;
}

int ga_exec_event_record(struct ga_executor *ex, uint64_t owner, struct lt_stream_id stream,
                         struct lt_event_id event, uint32_t flags,
                         const struct ga_exec_reply *reply, struct lt_failure *why_p)
{
    struct ga_exec_call *call = ga_exec__call_new(GA_EXEC__EVENT_RECORD, reply, why_p);
    if (!call)
        return lt_error_errno(why_p ? why_p->code : LT_E_SYSTEM);
    bool fresh = lt_event_id_is_null(event);
    if (!fresh && flags) {
        free(call);
        return ga_exec__refuse(why_p, LT_E_UNKNOWN_FLAGS,
                               "EVENT_RECORD: flags are for a new event, found %#x on a "
                               "re-record",
                               flags);
    }
    struct ga_exec__hold h;
    int rc = ga_exec__begin(ex, owner, &h, why_p);
    if (rc == 0 && (rc = ga_exec__stream_get(ex, h.o, stream, &h, why_p)) == 0)
        rc = fresh ? ga_exec__event_new(ex, &h, flags, why_p)
                   : ga_exec__event_get(ex, h.o, event, 0, &h, why_p);
    if (rc < 0) {
        free(call);
        return h.o ? ga_exec__abort(ex, &h, rc) : rc;
    }
    call->event = lt_event_id_from_u64(h.eid[0]);
    call->fresh = fresh;
    rc = ga_exec__run(ex, &h, call, ga_exec__op_event_record, why_p);
    if (rc < 0 && fresh) {
        /* Refused at once: the new id goes, as if it had never been. */
        pthread_mutex_lock(&ex->mu);
        struct ga_exec_event *e = base_idtab_retire(&ex->events, h.eid[0]);
        if (h.o->live_events)
            h.o->live_events--;
        pthread_mutex_unlock(&ex->mu);
        ga_exec__event_finish(ex, e);
    }
    return rc;
}

/* A command on events (and a stream): resolve, accept, run @op. */
static int ga_exec__on_events(struct ga_executor *ex, uint64_t owner,
                              const struct lt_stream_id *stream, struct lt_event_id a,
                              const struct lt_event_id *b, struct ga_exec_call *call,
                              ga_exec__op_fn op, struct lt_failure *why_p)
{
    if (!call)
        return lt_error_errno(why_p ? why_p->code : LT_E_SYSTEM);
    struct ga_exec__hold h;
    int rc = ga_exec__begin(ex, owner, &h, why_p);
    if (rc == 0 && stream)
        rc = ga_exec__stream_get(ex, h.o, *stream, &h, why_p);
    if (rc == 0)
        rc = ga_exec__event_get(ex, h.o, a, 0, &h, why_p);
    if (rc == 0 && b)
        rc = ga_exec__event_get(ex, h.o, *b, 1, &h, why_p);
    if (rc == 0 && b &&
        (!(h.e[0]->flags & LT_EVENT_F_TIMING) || !(h.e[1]->flags & LT_EVENT_F_TIMING)))
        rc = ga_exec__refuse(why_p, LT_E_BAD_VALUE,
                             "EVENT_ELAPSED: expected two events created with TIMING, found %s "
                             "without",
                             !(h.e[0]->flags & LT_EVENT_F_TIMING) ? "the start" : "the end");
    if (rc < 0) {
        free(call);
        return h.o ? ga_exec__abort(ex, &h, rc) : rc;
    }
    return ga_exec__run(ex, &h, call, op, why_p);
}

int ga_exec_event_wait(struct ga_executor *ex, uint64_t owner, struct lt_stream_id stream,
                       struct lt_event_id event, const struct ga_exec_reply *reply,
                       struct lt_failure *why_p)
{
    struct ga_exec_call *call = ga_exec__call_new(GA_EXEC__EVENT_WAIT, reply, why_p);
    return ga_exec__on_events(ex, owner, &stream, event, NULL, call, ga_exec__op_event_wait, why_p);
}

int ga_exec_event_query(struct ga_executor *ex, uint64_t owner, struct lt_event_id event,
                        const struct ga_exec_reply *reply, struct lt_failure *why_p)
{
    struct ga_exec_call *call = ga_exec__call_new(GA_EXEC__EVENT_QUERY, reply, why_p);
    return ga_exec__on_events(ex, owner, NULL, event, NULL, call, ga_exec__op_event_query, why_p);
}

int ga_exec_event_synchronize(struct ga_executor *ex, uint64_t owner, struct lt_event_id event,
                              const struct ga_exec_reply *reply, struct lt_failure *why_p)
{
    struct ga_exec_call *call = ga_exec__call_new(GA_EXEC__EVENT_SYNC, reply, why_p);
    return ga_exec__on_events(ex, owner, NULL, event, NULL, call, ga_exec__op_event_sync, why_p);
}

int ga_exec_event_elapsed(struct ga_executor *ex, uint64_t owner, struct lt_event_id start,
                          struct lt_event_id end, const struct ga_exec_reply *reply,
                          struct lt_failure *why_p)
{
    struct ga_exec_call *call = ga_exec__call_new(GA_EXEC__EVENT_ELAPSED, reply, why_p);
    return ga_exec__on_events(ex, owner, NULL, start, &end, call, ga_exec__op_event_elapsed, why_p);
}

int ga_exec_event_destroy(struct ga_executor *ex, uint64_t owner, struct lt_event_id event,
                          const struct ga_exec_reply *reply, struct lt_failure *why_p)
{
    if (!reply || !reply->done_cb)
        return ga_exec__refuse(why_p, LT_E_BAD_VALUE, "EVENT_DESTROY: expected a reply callback");
    struct ga_exec__hold h;
    int rc = ga_exec__begin(ex, owner, &h, why_p);
    if (rc < 0)
        return rc;
    if ((rc = ga_exec__event_get(ex, h.o, event, 0, &h, why_p)) < 0)
        return ga_exec__abort(ex, &h, rc);
    base_idtab_retire(&ex->events, h.eid[0]); /* closed when the hold is put */
    h.o->live_events--;
    ga_exec__abort(ex, &h, 0);
    struct ga_exec_ctl_result r = {.status = LT_OK};
    ga_exec__reply_now(reply, &r);
    return 0;
}

/* ---- the device --------------------------------------------------------------- */

static int ga_exec__op_device_sync(struct ga_executor *ex, const struct ga_exec__hold *h,
                                   struct ga_exec_call *call, struct lt_failure *why)
{
    return ex->be.ops->device_sync(ex->be.ctx, h->o->bo, call, why);
}

int ga_exec_device_synchronize(struct ga_executor *ex, uint64_t owner,
                               const struct ga_exec_reply *reply, struct lt_failure *why_p)
{
    struct ga_exec_call *call = ga_exec__call_new(GA_EXEC__DEVICE_SYNC, reply, why_p);
    if (!call)
        return lt_error_errno(why_p ? why_p->code : LT_E_SYSTEM);
    struct ga_exec__hold h;
    int rc = ga_exec__begin(ex, owner, &h, why_p);
    if (rc < 0) {
        free(call);
        return rc;
    }
    return ga_exec__run(ex, &h, call, ga_exec__op_device_sync, why_p);
}

/* ---- record_allocation --------------------------------------------------------- */

struct ga_exec__ticket {
    struct lease_service *svc;
    struct lease_ticket ticket;
    struct lt_lease_id lease;
    const struct base_log_sink *log;
};

/* The work submitted before the marker is done (or cancelled: the work will
 * not touch the lease any more either way). */
static void ga_exec__ticket_done(void *arg, uint32_t status)
{
    struct ga_exec__ticket *t = arg;
    (void)status;
    struct lt_failure why;
    if (lease_work_done(t->svc, t->ticket, &why) < 0)
        base_log(t->log, BASE_LOG_ERROR, GA_EXEC_SUBSYS,
                 "record_allocation: lease_work_done for lease {%" PRIu32 ",%" PRIu32
                 "} failed: %s",
                 t->lease.slot, t->lease.gen, why.message);
    free(t);
}

int ga_exec_record_allocation(struct ga_executor *ex, struct lt_stream_id stream,
                              struct lease_service *svc, struct lease_client_id client,
                              struct lt_lease_id lease, struct lt_failure *why_p)
{
    if (!svc)
        return ga_exec__refuse(why_p, LT_E_BAD_VALUE, "record_allocation: expected a service");
    struct ga_exec__ticket *t = calloc(1, sizeof(*t));
    struct ga_exec_call *call = t ? ga_exec__call_new(GA_EXEC__WHEN_DONE, NULL, why_p) : NULL;
    if (!call) {
        free(t);
        return ga_exec__refuse(why_p, LT_E_SYSTEM, "record_allocation: out of memory");
    }
    t->svc = svc;
    t->lease = lease;
    t->log = &ex->log;
    call->when = ga_exec__ticket_done;
    call->when_arg = t;
    /* The stream first: it names the owner the lease must belong to. */
    struct ga_exec__hold h;
    struct lt_failure why;
    int rc = ga_exec__begin(ex, client.value, &h, &why);
    if (rc == 0 && (rc = ga_exec__stream_get(ex, h.o, stream, &h, &why)) < 0)
        ga_exec__abort(ex, &h, rc);
    if (rc == 0) {
        pthread_mutex_unlock(&ex->mu);
        rc = lease_work_pin(svc, client, lease, &t->ticket, &why);
        pthread_mutex_lock(&ex->mu);
        if (rc < 0)
            ga_exec__abort(ex, &h, rc);
    }
    if (rc < 0) {
        base_log(&ex->log, BASE_LOG_INFO, GA_EXEC_SUBSYS,
                 "record_allocation: stream {%" PRIu32 ",%" PRIu32 "}, lease {%" PRIu32 ",%" PRIu32
                 "} of client %#" PRIx64 " refused: %s",
                 stream.slot, stream.gen, lease.slot, lease.gen, client.value, why.message);
        if (why_p)
            *why_p = why;
        free(call);
        free(t);
        return rc;
    }
    rc = ga_exec__run(ex, &h, call, ga_exec__op_stream_sync, why_p);
    if (rc < 0) {
        /* Nothing will wait for the stream: undo the pin now. */
        lease_work_done(svc, t->ticket, NULL);
        free(t);
    }
    return rc;
}
