/* Streams by managed id, record_allocation, and the device-wide synchronize.
 * Lookups take the table lock briefly and a hold on the slot; the CUDA call
 * runs outside the lock, so a synchronize never stalls other clients' calls.
 * cuStreamDestroy / cuEventDestroy return at once (the driver frees the
 * object when its work is done), so they run under the lock. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "cu_call.h"
#include "lease/lease.h"
#include "streams_internal.h"

int ga__streams_enter(struct ga_streams *s)
{
    return GA_CU(cuCtxSetCurrent(s->dev->ctx));
}

/* Destroys what a retired slot held; the context is current. */
static void ga__stream_obj_destroy(void *obj)
{
    if (obj)
        GA_CU(cuStreamDestroy((CUstream)obj));
}

int ga_streams_create(struct ga_device *dev, const struct ga_streams_opts *opts,
                      struct ga_streams **streams_p)
{
    uint32_t max_streams = opts && opts->max_streams ? opts->max_streams : GA_STREAMS_DEFAULT_MAX;
    uint32_t max_events = opts && opts->max_events ? opts->max_events : GA_EVENTS_DEFAULT_MAX;
    if (!dev || !streams_p || max_streams > GA_STREAMS_LIMIT || max_events > GA_STREAMS_LIMIT) {
        ga__err("streams: expected a device, a result pointer and at most %u streams and events, "
                "found max_streams %u, max_events %u%s",
                GA_STREAMS_LIMIT, max_streams, max_events,
                !dev || !streams_p ? " and a NULL pointer" : "");
        return -EINVAL;
    }
    struct ga_streams *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->dev = dev;
    int rc = pthread_mutex_init(&s->lock, NULL);
    if (rc) {
        free(s);
        return -rc;
    }
    if ((rc = ga__idtab_init(&s->streams, "stream", "max_streams", max_streams)) < 0)
        goto fail_lock;
    if ((rc = ga__idtab_init(&s->events, "event", "max_events", max_events)) < 0)
        goto fail_streams;
    if ((rc = ga__streams_enter(s)) < 0)
        goto fail_events;
    int mem64 = 0;
    GA_CU_GOTO(cuDeviceGetAttribute(&mem64, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
                                    dev->cu_device),
               rc, fail_events);
    s->memops = mem64 && dev->info.can_map_host_memory;
    GA_CU_GOTO(cuStreamCreate(&s->default_stream, CU_STREAM_NON_BLOCKING), rc, fail_events);
    if ((rc = ga__completer_create(&s->completer)) < 0)
        goto fail_default;
    *streams_p = s;
    return 0;

fail_default:
    GA_CU(cuStreamDestroy(s->default_stream));
fail_events:
    ga__idtab_fini(&s->events);
fail_streams:
    ga__idtab_fini(&s->streams);
fail_lock:
    pthread_mutex_destroy(&s->lock);
    free(s);
    return rc;
}

void ga_streams_destroy(struct ga_streams *s)
{
    if (!s)
        return;
    int faulted = ga__streams_enter(s) < 0;
    /* Every stream's work first: its completions must run before the
     * completion thread goes, and events may still be recorded on it. */
    for (uint32_t i = 1; i <= s->streams.cap && !faulted; i++) {
        struct ga__slot *sl = &s->streams.slots[i];
        if (sl->state == GA__SLOT_LIVE && GA_CU(cuStreamSynchronize((CUstream)sl->obj)) < 0)
            faulted = 1;
    }
    if (!faulted && GA_CU(cuStreamSynchronize(s->default_stream)) < 0)
        faulted = 1;
    if (faulted)
        ga__err("streams: the device faulted; destroying the table without waiting for the "
                "remaining work");
    /* Completions (of retired streams too) run before any id goes away: a
     * completion's function may still look ids up. */
    ga__completer_destroy(s->completer, faulted);
    for (uint32_t i = 1; i <= s->streams.cap; i++)
        ga__stream_obj_destroy(ga__idtab_kill(&s->streams, i));
    for (uint32_t i = 1; i <= s->events.cap; i++) {
        void *ev = ga__idtab_kill(&s->events, i);
        if (ev)
            GA_CU(cuEventDestroy((CUevent)ev));
    }
    GA_CU(cuStreamDestroy(s->default_stream));
    if (s->streams.used || s->events.used)
        ga__err("streams: destroyed with %u stream%s and %u event%s still held by a caller "
                "(ga_stream_get without ga_stream_put)",
                s->streams.used, s->streams.used == 1 ? "" : "s", s->events.used,
                s->events.used == 1 ? "" : "s");
    ga__idtab_fini(&s->events);
    ga__idtab_fini(&s->streams);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

int ga_stream_create(struct ga_streams *s, uint64_t owner, struct lt_stream_id *id_p)
{
    if (!s || !id_p)
        return -EINVAL;
    /* Refuse when full before the driver builds a stream to throw away;
     * under the same lock hold the allocation fails and says why. */
    pthread_mutex_lock(&s->lock);
    if (s->streams.free_len == 0) {
        uint32_t slot, gen;
        int rc = ga__idtab_alloc(&s->streams, owner, NULL, 0, &slot, &gen);
        pthread_mutex_unlock(&s->lock);
        return rc;
    }
    pthread_mutex_unlock(&s->lock);
    int rc = ga__streams_enter(s);
    if (rc < 0)
        return rc;
    CUstream st = NULL;
    if ((rc = GA_CU(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING))) < 0)
        return rc;
    uint32_t slot = 0, gen = 0;
    pthread_mutex_lock(&s->lock);
    rc = ga__idtab_alloc(&s->streams, owner, st, 0, &slot, &gen);
    pthread_mutex_unlock(&s->lock);
    if (rc < 0) {
        GA_CU(cuStreamDestroy(st));
        return rc;
    }
    *id_p = lt_stream_id_make(slot, gen);
    return 0;
}

int ga_stream_get(struct ga_streams *s, uint64_t owner, struct lt_stream_id id,
                  struct CUstream_st **stream_p)
{
    if (!s || !stream_p)
        return -EINVAL;
    int rc = ga__streams_enter(s);
    if (rc < 0)
        return rc;
    if (lt_stream_id_is_default(id)) {
        *stream_p = s->default_stream;
        return 0;
    }
    struct ga__slot *sl = NULL;
    pthread_mutex_lock(&s->lock);
    rc = ga__idtab_get(&s->streams, owner, id.slot, id.gen, &sl);
    CUstream st = rc == 0 ? (CUstream)sl->obj : NULL;
    pthread_mutex_unlock(&s->lock);
    if (rc < 0)
        return rc;
    *stream_p = st;
    return 0;
}

void ga_stream_put(struct ga_streams *s, struct lt_stream_id id)
{
    if (!s || lt_stream_id_is_default(id))
        return;
    pthread_mutex_lock(&s->lock);
    ga__stream_obj_destroy(ga__idtab_put(&s->streams, id.slot));
    pthread_mutex_unlock(&s->lock);
}

int ga_stream_validate(struct ga_streams *s, uint64_t owner, struct lt_stream_id id)
{
    if (!s)
        return -EINVAL;
    if (lt_stream_id_is_default(id))
        return 0;
    struct ga__slot *sl = NULL;
    pthread_mutex_lock(&s->lock);
    int rc = ga__idtab_lookup(&s->streams, owner, id.slot, id.gen, &sl);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int ga_stream_query(struct ga_streams *s, uint64_t owner, struct lt_stream_id id)
{
    CUstream st = NULL;
    int rc = ga_stream_get(s, owner, id, &st);
    if (rc < 0)
        return rc;
    CUresult res = cuStreamQuery(st);
    rc = res == CUDA_ERROR_NOT_READY ? 0 : res == CUDA_SUCCESS ? 1 : GA_CU(res);
    ga_stream_put(s, id);
    return rc;
}

int ga_stream_synchronize(struct ga_streams *s, uint64_t owner, struct lt_stream_id id)
{
    CUstream st = NULL;
    int rc = ga_stream_get(s, owner, id, &st);
    if (rc < 0)
        return rc;
    rc = GA_CU(cuStreamSynchronize(st));
    ga_stream_put(s, id);
    return rc;
}

int ga_stream_destroy(struct ga_streams *s, uint64_t owner, struct lt_stream_id id)
{
    if (!s)
        return -EINVAL;
    if (lt_stream_id_is_default(id)) {
        ga__err("stream 0:0 is the default stream: it belongs to the agent and cannot be "
                "destroyed (client %#llx asked)",
                (unsigned long long)owner);
        return -EINVAL;
    }
    int rc = ga__streams_enter(s);
    if (rc < 0)
        return rc;
    struct ga__slot *sl = NULL;
    pthread_mutex_lock(&s->lock);
    rc = ga__idtab_lookup(&s->streams, owner, id.slot, id.gen, &sl);
    if (rc == 0)
        ga__stream_obj_destroy(ga__idtab_kill(&s->streams, id.slot));
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int ga_streams_drop_owner(struct ga_streams *s, uint64_t owner)
{
    if (!s)
        return -EINVAL;
    int rc = ga__streams_enter(s);
    if (rc < 0)
        return rc;
    int n = 0;
    pthread_mutex_lock(&s->lock);
    for (uint32_t i = 1; i <= s->events.cap; i++) {
        struct ga__slot *sl = &s->events.slots[i];
        if (sl->state != GA__SLOT_LIVE || sl->owner != owner)
            continue;
        void *ev = ga__idtab_kill(&s->events, i);
        if (ev)
            GA_CU(cuEventDestroy((CUevent)ev));
        n++;
    }
    for (uint32_t i = 1; i <= s->streams.cap; i++) {
        struct ga__slot *sl = &s->streams.slots[i];
        if (sl->state != GA__SLOT_LIVE || sl->owner != owner)
            continue;
        ga__stream_obj_destroy(ga__idtab_kill(&s->streams, i));
        n++;
    }
    pthread_mutex_unlock(&s->lock);
    if (n)
        ga__info("streams: client %#llx dropped: %d stream and event id%s retired; queued work "
                 "still completes",
                 (unsigned long long)owner, n, n == 1 ? "" : "s");
    return n;
}

int ga_stream_when_done(struct ga_streams *s, uint64_t owner, struct lt_stream_id id,
                        void (*fn)(void *arg), void *arg)
{
    if (!s || !fn)
        return -EINVAL;
    CUstream st = NULL;
    int rc = ga_stream_get(s, owner, id, &st);
    if (rc < 0)
        return rc;
    struct ga__cnode *node = NULL;
    if ((rc = ga__completer_prepare(s->completer, fn, arg, &node)) == 0) {
        rc = GA_CU(cuLaunchHostFunc(st, ga__completer_fire, node));
        if (rc < 0)
            ga__completer_cancel(s->completer, node);
    }
    ga_stream_put(s, id);
    return rc;
}

struct ga__work_ticket {
    struct lease_service *svc;
    struct lease_ticket ticket;
    struct lease_client_id client;
    struct lt_lease_id lease;
};

/* On the completion thread: the stream's work that used the lease is done. */
static void ga__work_ticket_done(void *arg)
{
    struct ga__work_ticket *t = arg;
    struct lt_failure why;
    int rc = lease_work_done(t->svc, t->ticket, &why);
    if (rc < 0)
        ga__err("record_allocation: lease_work_done for lease {%" PRIu32 ",%" PRIu32
                "} of client %#" PRIx64 " failed (%d): %s",
                t->lease.slot, t->lease.gen, t->client.value, rc, why.message);
    free(t);
}

int ga_stream_record_allocation(struct ga_streams *s, struct lt_stream_id stream,
                                struct lease_service *svc, struct lease_client_id client,
                                struct lt_lease_id lease)
{
    if (!s || !svc)
        return -EINVAL;
    /* The stream's owner is the lease client, by its id's value. */
    int rc = ga_stream_validate(s, client.value, stream);
    if (rc < 0)
        return rc;
    struct ga__work_ticket *t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    t->svc = svc;
    t->client = client;
    t->lease = lease;
    struct lt_failure why;
    if ((rc = lease_work_pin(svc, client, lease, &t->ticket, &why)) < 0) {
        ga__err("record_allocation: stream %u:%u, lease {%" PRIu32 ",%" PRIu32
                "} of client %#" PRIx64 " refused (%d): %s",
                stream.slot, stream.gen, lease.slot, lease.gen, client.value, rc, why.message);
        free(t);
        return rc;
    }
    rc = ga_stream_when_done(s, client.value, stream, ga__work_ticket_done, t);
    if (rc < 0) {
        /* Nothing will wait for the stream: undo the pin now. */
        if (lease_work_done(svc, t->ticket, &why) < 0)
            ga__err("record_allocation: undoing the pin of lease {%" PRIu32 ",%" PRIu32
                    "} failed: %s",
                    lease.slot, lease.gen, why.message);
        free(t);
    }
    return rc;
}

int ga_streams_stats_get(struct ga_streams *s, struct ga_streams_stats *stats_p)
{
    if (!s || !stats_p)
        return -EINVAL;
    struct ga_streams_stats st = {0};
    pthread_mutex_lock(&s->lock);
    st.streams = s->streams.live;
    st.max_streams = s->streams.cap;
    st.events = s->events.live;
    st.max_events = s->events.cap;
    pthread_mutex_unlock(&s->lock);
    ga__completer_counts(s->completer, &st.completions_pending, &st.completions_run);
    *stats_p = st;
    return 0;
}

int ga_device_synchronize(struct ga_device *dev)
{
    if (!dev)
        return -EINVAL;
    int rc = ga_device_make_current(dev);
    if (rc < 0)
        return rc;
    rc = GA_CU(cuCtxSynchronize());
    if (rc == -EIO)
        ga__err("device %d: a deferred launch error (above) left the primary context unusable; "
                "the agent must restart",
                dev->info.ordinal);
    return rc;
}
