/* ga exec on CUDA (library ga_cuda): the device's worker pool, its CUDA
 * streams and events, completions, record_allocation, doorbells
 * (DESIGN.md, "The GPU agent", "The doorbell").
 *
 * These are CUDA objects, not ids: the managed stream and event ids clients
 * use are the executor front's (gpu/executor.h); the CUDA backend keeps one
 * of these behind each. Streams are non-blocking (they never synchronise
 * with the legacy NULL stream, so one client's work never stalls another's).
 *
 * Every call may run on any thread and makes the device's primary context
 * current itself (on a pool worker that costs nothing more). Functions
 * return 0 (or a count) on success and a negative errno on failure (the one
 * CUresult map, gpu/cu.h); the function that decides an error logs it once,
 * saying what was expected and what was found. This header does not include
 * cuda.h: a CUstream is `struct CUstream_st *`, a CUevent `struct
 * CUevent_st *`, device addresses are uint64_t. */
#ifndef GPU_EXEC_CUDA_H
#define GPU_EXEC_CUDA_H

#include <stdint.h>

#include "gpu/ga.h"
#include "gpu/pool.h"
#include "lease_types/ids.h"

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st; /* cuda.h: typedef struct CUstream_st *CUstream */
struct CUevent_st;  /* cuda.h: typedef struct CUevent_st *CUevent */
/* lease/lease.h, which callers of ga_stream_record_allocation include. */
struct lease_service;
struct lease_client_id;

/* ---- the worker pool (gpu/pool.h) on a device ---- */

/* ga_pool_create with the enter hook that makes @dev's primary context
 * current before every job. The pool borrows @dev, which must outlive it.
 * Returns as ga_pool_create, or -EINVAL for a NULL device. */
int ga_device_pool_create(struct ga_device *dev, const struct ga_pool_opts *opts,
                          struct ga_pool **pool_p);

/* ---- streams, events and completions ---- */

/* The device's stream layer: its completion thread and what the device can
 * do (64-bit stream memory operations for doorbells). */
struct ga_streams;

/* For @dev, which must outlive it. *streams_p is the caller's: free it with
 * ga_streams_destroy. Returns 0, -EINVAL, -ENOMEM or a CUDA errno. */
int ga_streams_create(struct ga_device *dev, struct ga_streams **streams_p);

/* Runs every pending completion (lease_work_done included) and frees the
 * layer; the caller synchronised or freed its streams first. After a device
 * fault the completions that can no longer run are reported and their state
 * is left allocated. NULL: no-op. */
void ga_streams_destroy(struct ga_streams *s);

/* A new non-blocking stream. Returns 0 or the errno of cuStreamCreate. */
int ga_stream_new(struct ga_streams *s, struct CUstream_st **stream_p);

/* Returns at once: the driver frees the stream once its work is done, and
 * completions queued on it still run. */
void ga_stream_free(struct ga_streams *s, struct CUstream_st *stream);

/* 1 when every piece of work submitted on @stream has completed, 0 when some
 * has not, or the errno of a failed query (a deferred fault: -EIO). */
int ga_stream_query(struct ga_streams *s, struct CUstream_st *stream);

/* Blocks until the work submitted on @stream has completed. Returns 0 or the
 * errno of the failed work. */
int ga_stream_synchronize(struct ga_streams *s, struct CUstream_st *stream);

/* Runs @fn(@arg) on the layer's completion thread once the work submitted on
 * @stream so far has completed (cuLaunchHostFunc queues a CUDA-free hop to
 * that thread, so @fn may call CUDA or the lease service; it should not block
 * for long). Later work on the stream waits only for that hop, never for @fn.
 * Returns 0, -ENOMEM or the errno of cuLaunchHostFunc; on error @fn never
 * runs. */
int ga_stream_when_done(struct ga_streams *s, struct CUstream_st *stream, void (*fn)(void *arg),
                        void *arg);

/* record_allocation(stream, lease) on a CUDA stream: lease_work_pin(@svc,
 * @client, @lease) now, lease_work_done on the completion thread once the
 * work submitted on @stream so far has completed. Not an execution
 * dependency. Returns 0, the lease service's refusal (-ENOENT, -ESTALE,
 * -EPERM, -EALREADY, ..., logged with its words) or -ENOMEM; on error the
 * lease holds no new pin. (By managed id: ga_exec_record_allocation.) */
int ga_stream_record_allocation(struct ga_streams *s, struct CUstream_st *stream,
                                struct lease_service *svc, struct lease_client_id client,
                                struct lt_lease_id lease);

/* Events are made without timing (CU_EVENT_DISABLE_TIMING) unless this flag
 * asks for it. */
#define GA_EVENT_TIMING 0x1u

/* A new event. Returns 0, -EINVAL (unknown @flags) or a CUDA errno. */
int ga_event_new(struct ga_streams *s, unsigned int flags, struct CUevent_st **event_p);

/* Returns at once; a pending record still completes. */
void ga_event_free(struct ga_streams *s, struct CUevent_st *event);

/* Records @event on @stream (cuEventRecord). */
int ga_event_record(struct ga_streams *s, struct CUevent_st *event, struct CUstream_st *stream);

/* Makes the work submitted on @stream from now on wait, on the GPU, for the
 * last record of @event (cuStreamWaitEvent); the host does not wait. */
int ga_event_wait(struct ga_streams *s, struct CUstream_st *stream, struct CUevent_st *event);

/* 1 when the work before the event's last record has completed, 0 when not. */
int ga_event_query(struct ga_streams *s, struct CUevent_st *event);

/* Blocks until the event's last record has completed. */
int ga_event_synchronize(struct ga_streams *s, struct CUevent_st *event);

/* Milliseconds from @start to @end (cuEventElapsedTime). Returns 0, -EAGAIN
 * when either has not completed (logged naming which), or a CUDA errno
 * (-EBADF for an event made without GA_EVENT_TIMING). */
int ga_event_elapsed(struct ga_streams *s, struct CUevent_st *start, struct CUevent_st *end,
                     float *ms_p);

struct ga_streams_stats {
    uint64_t streams, events;     /* made by this layer and not freed */
    uint64_t completions_pending; /* when_done / record_allocation not yet run */
    uint64_t completions_run;
};

/* A snapshot of @s's counters. Returns 0 or -EINVAL. */
int ga_streams_stats_get(struct ga_streams *s, struct ga_streams_stats *stats_p);

/* Waits for all work on @dev's primary context (cuCtxSynchronize) and reports
 * a deferred error, such as a faulting kernel's: the log names the CUresult;
 * -EIO means the context is unusable from now on. Returns 0 or that errno. */
int ga_device_synchronize(struct ga_device *dev);

/* ---- doorbells ----
 *
 * The bell and the completion word are 8-byte aligned words of host memory
 * the GPU maps (MAPPED leases, or cuMemHostAlloc(DEVICEMAP)): @bell_dev and
 * @done_dev are their device addresses (cuMemHostGetDevicePointer). */

/* 0 when @dev can wait on and write 64-bit words from a stream; else -ENOTSUP
 * with a message naming the missing device attribute. */
int ga_doorbell_check(struct ga_device *dev);

/* Work queued between the wait and the completion write; it must only queue
 * (launches, copies) on @stream, never wait for it. Returns 0 or -errno. */
typedef int (*ga_stream_work_fn)(void *arg, struct CUstream_st *stream);

struct ga_doorbell_req {
    uint64_t bell_dev; /* the stream waits until (int64_t)(*bell - seq) >= 0 */
    uint64_t seq;
    ga_stream_work_fn work; /* NULL: none */
    void *work_arg;
    uint64_t done_dev; /* 0: none; else seq is written here after the work */
};

/* Queues on @stream: cuStreamWaitValue64(bell, seq, GEQ), the work, and
 * cuStreamWriteValue64(done, seq). Returns 0, -ENOTSUP (no stream memory
 * operations), -EINVAL (an address 0 or unaligned), the work's error or the
 * errno of a failed CUDA call; on error the stream may hold a part of the
 * sequence (free it, or ring the bell). */
int ga_doorbell_queue(struct ga_streams *s, struct CUstream_st *stream,
                      const struct ga_doorbell_req *req);

/* Queues cuStreamWriteValue64(@done_dev, @value) on @stream: the host sees
 * @value once the work before it has completed. Errors as ga_doorbell_queue. */
int ga_doorbell_signal(struct ga_streams *s, struct CUstream_st *stream, uint64_t done_dev,
                       uint64_t value);

/* Host side (no CUDA): rings @bell with @seq. The release store orders every
 * earlier store of this thread (the data) before the bell, for the GPU too. */
static inline void ga_doorbell_ring(uint64_t *bell, uint64_t seq)
{
    __atomic_store_n(bell, seq, __ATOMIC_RELEASE);
}

/* Host side: reads a completion word the GPU writes; later reads of the data
 * the work produced see at least what it wrote before the word. */
static inline uint64_t ga_doorbell_peek(const uint64_t *word)
{
    return __atomic_load_n(word, __ATOMIC_ACQUIRE);
}

#ifdef __cplusplus
}
#endif

#endif /* GPU_EXEC_CUDA_H */
