/* Events by managed id: record (new or again), GPU-side wait, query,
 * synchronize, destroy, elapsed time. Same locking as streams.c. */
#include <errno.h>
#include <stdlib.h>

#include "cu_call.h"
#include "streams_internal.h"

/* Holds event @id; writes its CUevent and flags. */
static int ga__event_get(struct ga_streams *s, uint64_t owner, struct lt_event_id id,
                         CUevent *ev_p, uint32_t *flags_p)
{
    struct ga__slot *sl = NULL;
    pthread_mutex_lock(&s->lock);
    int rc = ga__idtab_get(&s->events, owner, id.slot, id.gen, &sl);
    if (rc == 0) {
        *ev_p = (CUevent)sl->obj;
        if (flags_p)
            *flags_p = sl->flags;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* Drops the hold of ga__event_get; destroys a retired event it was the last
 * hold of. The context is current. */
static void ga__event_put(struct ga_streams *s, struct lt_event_id id)
{
    pthread_mutex_lock(&s->lock);
    void *ev = ga__idtab_put(&s->events, id.slot);
    if (ev)
        GA_CU(cuEventDestroy((CUevent)ev));
    pthread_mutex_unlock(&s->lock);
}

/* A new event recorded on @st, then given an id. */
static int ga__event_record_new(struct ga_streams *s, uint64_t owner, CUstream st,
                                unsigned int flags, struct lt_event_id *event_p)
{
    pthread_mutex_lock(&s->lock);
    if (s->events.free_len == 0) { /* refused with the numbers, before cuEventCreate */
        uint32_t slot, gen;
        int rc = ga__idtab_alloc(&s->events, owner, NULL, 0, &slot, &gen);
        pthread_mutex_unlock(&s->lock);
        return rc;
    }
    pthread_mutex_unlock(&s->lock);
    CUevent ev = NULL;
    unsigned int cu_flags = flags & GA_EVENT_TIMING ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING;
    int rc = GA_CU(cuEventCreate(&ev, cu_flags));
    if (rc < 0)
        return rc;
    if ((rc = GA_CU(cuEventRecord(ev, st))) < 0)
        goto fail;
    uint32_t slot = 0, gen = 0;
    pthread_mutex_lock(&s->lock);
    rc = ga__idtab_alloc(&s->events, owner, ev, flags & GA_EVENT_TIMING, &slot, &gen);
    pthread_mutex_unlock(&s->lock);
    if (rc < 0)
        goto fail;
    *event_p = lt_event_id_make(slot, gen);
    return 0;
fail:
    GA_CU(cuEventDestroy(ev));
    return rc;
}

int ga_event_record(struct ga_streams *s, uint64_t owner, struct lt_stream_id stream,
                    struct lt_event_id event, unsigned int flags, struct lt_event_id *event_p)
{
    if (!s || !event_p || (flags & ~GA_EVENT_TIMING)) {
        ga__err("event record: expected a table, a result pointer and flags within %#x, "
                "found flags %#x%s",
                GA_EVENT_TIMING, flags, !s || !event_p ? " and a NULL pointer" : "");
        return -EINVAL;
    }
    CUstream st = NULL;
    int rc = ga_stream_get(s, owner, stream, &st);
    if (rc < 0)
        return rc;
    if (lt_event_id_is_null(event)) {
        rc = ga__event_record_new(s, owner, st, flags, event_p);
        goto out;
    }
    CUevent ev = NULL;
    uint32_t ev_flags = 0;
    if ((rc = ga__event_get(s, owner, event, &ev, &ev_flags)) < 0)
        goto out;
    if ((flags & GA_EVENT_TIMING) && !(ev_flags & GA_EVENT_TIMING)) {
        ga__err("event %u:%u was created without timing; record a new event with "
                "GA_EVENT_TIMING to time a region",
                event.slot, event.gen);
        rc = -EINVAL;
    } else if ((rc = GA_CU(cuEventRecord(ev, st))) == 0) {
        *event_p = event;
    }
    ga__event_put(s, event);
out:
    ga_stream_put(s, stream);
    return rc;
}

int ga_event_wait(struct ga_streams *s, uint64_t owner, struct lt_stream_id stream,
                  struct lt_event_id event)
{
    CUstream st = NULL;
    int rc = ga_stream_get(s, owner, stream, &st);
    if (rc < 0)
        return rc;
    CUevent ev = NULL;
    if ((rc = ga__event_get(s, owner, event, &ev, NULL)) == 0) {
        rc = GA_CU(cuStreamWaitEvent(st, ev, CU_EVENT_WAIT_DEFAULT));
        ga__event_put(s, event);
    }
    ga_stream_put(s, stream);
    return rc;
}

int ga_event_query(struct ga_streams *s, uint64_t owner, struct lt_event_id event)
{
    if (!s)
        return -EINVAL;
    int rc = ga__streams_enter(s);
    CUevent ev = NULL;
    if (rc < 0 || (rc = ga__event_get(s, owner, event, &ev, NULL)) < 0)
        return rc;
    CUresult res = cuEventQuery(ev);
    rc = res == CUDA_ERROR_NOT_READY ? 0 : res == CUDA_SUCCESS ? 1 : GA_CU(res);
    ga__event_put(s, event);
    return rc;
}

int ga_event_synchronize(struct ga_streams *s, uint64_t owner, struct lt_event_id event)
{
    if (!s)
        return -EINVAL;
    int rc = ga__streams_enter(s);
    CUevent ev = NULL;
    if (rc < 0 || (rc = ga__event_get(s, owner, event, &ev, NULL)) < 0)
        return rc;
    rc = GA_CU(cuEventSynchronize(ev));
    ga__event_put(s, event);
    return rc;
}

int ga_event_destroy(struct ga_streams *s, uint64_t owner, struct lt_event_id event)
{
    if (!s)
        return -EINVAL;
    int rc = ga__streams_enter(s);
    if (rc < 0)
        return rc;
    struct ga__slot *sl = NULL;
    pthread_mutex_lock(&s->lock);
    if ((rc = ga__idtab_lookup(&s->events, owner, event.slot, event.gen, &sl)) == 0) {
        void *ev = ga__idtab_kill(&s->events, event.slot);
        if (ev)
            GA_CU(cuEventDestroy((CUevent)ev));
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* -EAGAIN, with the event named, when @ev has not completed. */
static int ga__event_complete(CUevent ev, struct lt_event_id id)
{
    CUresult res = cuEventQuery(ev);
    if (res == CUDA_ERROR_NOT_READY) {
        ga__err("elapsed time: event %u:%u has not completed yet; synchronize it first", id.slot,
                id.gen);
        return -EAGAIN;
    }
    return res == CUDA_SUCCESS ? 0 : GA_CU(res);
}

int ga_event_elapsed(struct ga_streams *s, uint64_t owner, struct lt_event_id start,
                     struct lt_event_id end, float *ms_p)
{
    if (!s || !ms_p)
        return -EINVAL;
    int rc = ga__streams_enter(s);
    CUevent a = NULL, b = NULL;
    uint32_t fa = 0, fb = 0;
    if (rc < 0 || (rc = ga__event_get(s, owner, start, &a, &fa)) < 0)
        return rc;
    if ((rc = ga__event_get(s, owner, end, &b, &fb)) < 0)
        goto out_start;
    if (!(fa & GA_EVENT_TIMING) || !(fb & GA_EVENT_TIMING)) {
        struct lt_event_id bad = !(fa & GA_EVENT_TIMING) ? start : end;
        ga__err("elapsed time needs two timing events; event %u:%u was recorded without "
                "GA_EVENT_TIMING",
                bad.slot, bad.gen);
        rc = -EINVAL;
        goto out;
    }
    if ((rc = ga__event_complete(a, start)) < 0 || (rc = ga__event_complete(b, end)) < 0)
        goto out;
    float ms = 0;
    if ((rc = GA_CU(cuEventElapsedTime(&ms, a, b))) == 0)
        *ms_p = ms;
out:
    ga__event_put(s, end);
out_start:
    ga__event_put(s, start);
    return rc;
}
