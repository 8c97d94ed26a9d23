/* The device's CUDA streams as objects (gpu/exec_cuda.h): made and freed
 * here, their completions run on one completion thread, record_allocation,
 * and the device-wide synchronize. No ids: the executor front has those.
 * cuStreamDestroy returns at once (the driver frees the stream when its
 * work is done), so freeing never waits. */
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

int ga_streams_create(struct ga_device *dev, struct ga_streams **streams_p)
{
    if (!dev || !streams_p) {
        ga__err("streams: expected a device and a result pointer, found NULL");
        return -EINVAL;
    }
    struct ga_streams *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->dev = dev;
    int rc = ga__streams_enter(s);
    if (rc < 0)
        goto fail;
    int mem64 = 0;
    GA_CU_GOTO(cuDeviceGetAttribute(&mem64, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
                                    dev->cu_device),
               rc, fail);
    s->memops = mem64 && dev->info.can_map_host_memory;
    if ((rc = ga_completer_create(ga__log_sink(), &s->completer)) < 0)
        goto fail;
    *streams_p = s;
    return 0;
fail:
    free(s);
    return rc;
}

void ga_streams_destroy(struct ga_streams *s)
{
    if (!s)
        return;
    /* A device that cannot make its context current any more faulted: the
     * completions still pending may never fire. */
    int faulted = ga__streams_enter(s) < 0 || GA_CU(cuCtxSynchronize()) == -EIO;
    if (faulted)
        ga__err("streams: the device faulted; not waiting for the completions still pending");
    ga_completer_destroy(s->completer, faulted);
    uint64_t left_s = __atomic_load_n(&s->streams, __ATOMIC_RELAXED);
    uint64_t left_e = __atomic_load_n(&s->events, __ATOMIC_RELAXED);
    if (left_s || left_e)
        ga__warn("streams: destroyed with %" PRIu64 " stream%s and %" PRIu64
                 " event%s not freed by their owner",
                 left_s, left_s == 1 ? "" : "s", left_e, left_e == 1 ? "" : "s");
    free(s);
}

int ga_stream_new(struct ga_streams *s, struct CUstream_st **stream_p)
{
    if (!s || !stream_p)
        return -EINVAL;
    int rc = ga__streams_enter(s);
    CUstream st = NULL;
    if (rc == 0 && (rc = GA_CU(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING))) == 0) {
        __atomic_add_fetch(&s->streams, 1, __ATOMIC_RELAXED);
        *stream_p = st;
    }
    return rc;
}

void ga_stream_free(struct ga_streams *s, struct CUstream_st *stream)
{
    if (!s || !stream)
        return;
    if (ga__streams_enter(s) == 0)
        GA_CU(cuStreamDestroy(stream));
    __atomic_sub_fetch(&s->streams, 1, __ATOMIC_RELAXED);
}

int ga_stream_query(struct ga_streams *s, struct CUstream_st *stream)
{
    int rc = s && stream ? ga__streams_enter(s) : -EINVAL;
    if (rc < 0)
        return rc;
    CUresult res = cuStreamQuery(stream);
    return res == CUDA_ERROR_NOT_READY ? 0 : res == CUDA_SUCCESS ? 1 : GA_CU(res);
}

int ga_stream_synchronize(struct ga_streams *s, struct CUstream_st *stream)
{
    int rc = s && stream ? ga__streams_enter(s) : -EINVAL;
    return rc < 0 ? rc : GA_CU(cuStreamSynchronize(stream));
}

int ga_stream_when_done(struct ga_streams *s, struct CUstream_st *stream, void (*fn)(void *arg),
                        void *arg)
{
    if (!s || !stream || !fn)
        return -EINVAL;
    int rc = ga__streams_enter(s);
    struct ga_cnode *node = NULL;
    if (rc == 0 && (rc = ga_completer_prepare(s->completer, fn, arg, &node)) == 0) {
        rc = GA_CU(cuLaunchHostFunc(stream, ga_completer_fire, node));
        if (rc < 0)
            ga_completer_cancel(s->completer, node);
    }
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

int ga_stream_record_allocation(struct ga_streams *s, struct CUstream_st *stream,
                                struct lease_service *svc, struct lease_client_id client,
                                struct lt_lease_id lease)
{
    if (!s || !stream || !svc)
        return -EINVAL;
    struct ga__work_ticket *t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    t->svc = svc;
    t->client = client;
    t->lease = lease;
    struct lt_failure why;
    int rc = lease_work_pin(svc, client, lease, &t->ticket, &why);
    if (rc < 0) {
        ga__err("record_allocation: lease {%" PRIu32 ",%" PRIu32 "} of client %#" PRIx64
                " refused (%d): %s",
                lease.slot, lease.gen, client.value, rc, why.message);
        free(t);
        return rc;
    }
    rc = ga_stream_when_done(s, stream, ga__work_ticket_done, t);
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
    struct ga_streams_stats st = {
        .streams = __atomic_load_n(&s->streams, __ATOMIC_RELAXED),
        .events = __atomic_load_n(&s->events, __ATOMIC_RELAXED),
    };
    ga_completer_counts(s->completer, &st.completions_pending, &st.completions_run);
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
