/* The device's CUDA events as objects (gpu/exec_cuda.h): made, recorded,
 * waited for on the GPU, queried, synchronized, timed and freed.
 * cuEventDestroy returns at once; a pending record still completes. */
#include <errno.h>

#include "cu_call.h"
#include "streams_internal.h"

int ga_event_new(struct ga_streams *s, unsigned int flags, struct CUevent_st **event_p)
{
    if (!s || !event_p || (flags & ~GA_EVENT_TIMING)) {
        ga__err("event: expected a table, a result pointer and flags within %#x, found flags %#x%s",
                GA_EVENT_TIMING, flags, !s || !event_p ? " and a NULL pointer" : "");
        return -EINVAL;
    }
    int rc = ga__streams_enter(s);
    CUevent ev = NULL;
    unsigned int cu_flags = flags & GA_EVENT_TIMING ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING;
    if (rc == 0 && (rc = GA_CU(cuEventCreate(&ev, cu_flags))) == 0) {
        __atomic_add_fetch(&s->events, 1, __ATOMIC_RELAXED);
        *event_p = ev;
    }
    return rc;
}

void ga_event_free(struct ga_streams *s, struct CUevent_st *event)
{
    if (!s || !event)
        return;
    if (ga__streams_enter(s) == 0)
        GA_CU(cuEventDestroy(event));
    __atomic_sub_fetch(&s->events, 1, __ATOMIC_RELAXED);
}

int ga_event_record(struct ga_streams *s, struct CUevent_st *event, struct CUstream_st *stream)
{
    int rc = s && event && stream ? ga__streams_enter(s) : -EINVAL;
    return rc < 0 ? rc : GA_CU(cuEventRecord(event, stream));
}

int ga_event_wait(struct ga_streams *s, struct CUstream_st *stream, struct CUevent_st *event)
{
    int rc = s && event && stream ? ga__streams_enter(s) : -EINVAL;
    return rc < 0 ? rc : GA_CU(cuStreamWaitEvent(stream, event, CU_EVENT_WAIT_DEFAULT));
}

int ga_event_query(struct ga_streams *s, struct CUevent_st *event)
{
    int rc = s && event ? ga__streams_enter(s) : -EINVAL;
    if (rc < 0)
        return rc;
    CUresult res = cuEventQuery(event);
    return res == CUDA_ERROR_NOT_READY ? 0 : res == CUDA_SUCCESS ? 1 : GA_CU(res);
}

int ga_event_synchronize(struct ga_streams *s, struct CUevent_st *event)
{
    int rc = s && event ? ga__streams_enter(s) : -EINVAL;
    return rc < 0 ? rc : GA_CU(cuEventSynchronize(event));
}

/* -EAGAIN, with the event named, when @ev has not completed. */
static int ga__event_complete(CUevent ev, const char *which)
{
    CUresult res = cuEventQuery(ev);
    if (res == CUDA_ERROR_NOT_READY) {
        ga__err("elapsed time: the %s event has not completed yet; synchronize it first", which);
        return -EAGAIN;
    }
    return res == CUDA_SUCCESS ? 0 : GA_CU(res);
}

int ga_event_elapsed(struct ga_streams *s, struct CUevent_st *start, struct CUevent_st *end,
                     float *ms_p)
{
    int rc = s && start && end && ms_p ? ga__streams_enter(s) : -EINVAL;
    if (rc < 0 || (rc = ga__event_complete(start, "start")) < 0 ||
        (rc = ga__event_complete(end, "end")) < 0)
        return rc;
    float ms = 0;
    if ((rc = GA_CU(cuEventElapsedTime(&ms, start, end))) == 0)
        *ms_p = ms;
    return rc;
}
