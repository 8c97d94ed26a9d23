/* ga exec: how the GPU agent runs work (DESIGN.md, "The GPU agent", "The doorbell").
 *
 * - A worker pool whose threads take jobs in submission order, whichever is
 *   free, and make the device's one retained primary context current before
 *   each job: CUDA calls hop between threads; no other context is created.
 * - Streams and events named by managed ids (slot + generation, lease-types'
 *   lt_stream_id / lt_event_id), each owned by one client; never raw handles.
 * - record_allocation: keep a lease alive until the work already submitted on
 *   a stream completes (lease_work_pin now, lease_work_done afterwards).
 * - Doorbells: the GPU waits on a mapped host word that a CUDA-free process
 *   stores to, and can write a mapped completion word back.
 *
 * Functions return 0 (or a count) on success and a negative errno on failure;
 * the function that decides an error logs it once (ga_log_set_sink), saying
 * what was expected and what was found. This header does not include cuda.h:
 * a CUstream is `struct CUstream_st *`, device addresses are uint64_t. */
#ifndef GPU_EXEC_H
#define GPU_EXEC_H

#include <stdint.h>

#include "gpu/ga.h"
#include "lease_types/ids.h"

struct CUstream_st; /* cuda.h: typedef struct CUstream_st *CUstream */
/* lease/lease.h, which callers of ga_stream_record_allocation include. */
struct lease_service;
struct lease_client_id;

/* ---- the worker pool ---- */

struct ga_pool;
struct ga_job;

/* A job: runs on a worker with the primary context current; returns 0 or a
 * negative errno, which becomes the job's result. */
typedef int (*ga_job_fn)(void *arg);
/* Runs on the same worker right after the job, with its result. */
typedef void (*ga_job_done_fn)(void *arg, int rc);

#define GA_POOL_DEFAULT_THREADS 4
#define GA_POOL_MAX_THREADS 256

struct ga_pool_opts {
    unsigned int threads; /* workers; 0: GA_POOL_DEFAULT_THREADS */
};

/* Starts @opts->threads workers for @dev (NULL opts: defaults). The pool
 * borrows @dev, which must outlive it. *pool_p is the caller's: free it with
 * ga_pool_destroy. Returns 0, -EINVAL (threads above GA_POOL_MAX_THREADS),
 * -ENOMEM or the errno of pthread_create. */
int ga_pool_create(struct ga_device *dev, const struct ga_pool_opts *opts,
                   struct ga_pool **pool_p);

/* Refuses new jobs, runs every job already queued, joins the workers and
 * frees the pool. Handles from ga_pool_submit must still be waited for, but
 * before this call: a job must not outlive the pool. NULL is a no-op. */
void ga_pool_destroy(struct ga_pool *pool);

/* Queues @fn(@arg). Before it runs, the worker makes the primary context
 * current; if that fails @fn is skipped and the failure is the result.
 * @done(@done_arg, result), when not NULL, then runs on that worker; it may
 * submit further jobs. With @job_p, *job_p is a handle the caller must pass
 * to ga_job_wait exactly once; without it the pool frees the job itself.
 * A job must not wait for another job (the workers could all be waiting).
 * Returns 0, -EINVAL, -ENOMEM, -ESHUTDOWN (ga_pool_destroy has begun). */
int ga_pool_submit(struct ga_pool *pool, ga_job_fn fn, void *arg, ga_job_done_fn done,
                   void *done_arg, struct ga_job **job_p);

/* Waits until @job (from ga_pool_submit) and its done callback have run,
 * frees it and returns the job's result (0 or a negative errno). */
int ga_job_wait(struct ga_job *job);

/* ga_pool_submit without a callback, then ga_job_wait: the job's result, or
 * the submission's error. */
int ga_pool_run(struct ga_pool *pool, ga_job_fn fn, void *arg);

/* The calling thread's index among its pool's workers, or -1 when it is not a
 * worker. */
int ga_pool_worker_index(void);

struct ga_pool_stats {
    uint64_t submitted;
    uint64_t completed;
    uint32_t threads;
    uint32_t threads_used; /* workers that have run at least one job */
};

/* A snapshot of @pool's counters. Returns 0 or -EINVAL. */
int ga_pool_stats_get(struct ga_pool *pool, struct ga_pool_stats *stats_p);

/* ---- streams and events by managed id ----
 *
 * Every call below may run on any thread (it makes the primary context
 * current itself; on a pool worker that costs nothing more) and concurrently
 * with any other, except ga_streams_destroy. @owner is the caller's client id
 * (the lease service's). Id errors: -EINVAL (a slot with generation 0),
 * -ENOENT (never issued), -ESTALE (destroyed: an older generation), -EPERM
 * (another owner's). Stream {0, 0} is the default stream: a non-blocking
 * stream of the table's own that every owner may use and none may destroy
 * (it does not synchronise with other streams, unlike CUDA's legacy NULL
 * stream, so one client's default-stream work never stalls another's). */

struct ga_streams;

#define GA_STREAMS_DEFAULT_MAX 1024
#define GA_EVENTS_DEFAULT_MAX 4096
#define GA_STREAMS_LIMIT (1u << 20)

struct ga_streams_opts {
    uint32_t max_streams; /* created streams at once, default stream excluded; 0: default */
    uint32_t max_events;  /* 0: GA_EVENTS_DEFAULT_MAX */
};

/* Creates the id tables, the default stream and the completion thread for
 * @dev, which must outlive the table. Also reads whether the device can do
 * 64-bit stream memory operations (doorbells). *streams_p is the caller's:
 * free it with ga_streams_destroy. Returns 0, -EINVAL (a maximum above
 * GA_STREAMS_LIMIT), -ENOMEM or the errno of a failed CUDA call. */
int ga_streams_create(struct ga_device *dev, const struct ga_streams_opts *opts,
                      struct ga_streams **streams_p);

/* Waits for the work of every stream, runs every pending completion
 * (lease_work_done included), destroys every stream and event and frees the
 * table. A stream waiting on a doorbell nobody rings blocks this forever:
 * ring or abandon those first. After a device fault the completions that can
 * no longer run are reported and their state is left allocated. NULL: no-op. */
void ga_streams_destroy(struct ga_streams *s);

/* Creates a non-blocking stream owned by @owner and writes its id. Returns 0,
 * -EMFILE when max_streams are in use (the message gives both numbers), or
 * the errno of cuStreamCreate. */
int ga_stream_create(struct ga_streams *s, uint64_t owner, struct lt_stream_id *id_p);

/* 0 when @id names a live stream @owner may use (or the default stream). */
int ga_stream_validate(struct ga_streams *s, uint64_t owner, struct lt_stream_id id);

/* 1 when every piece of work submitted on @id has completed, 0 when some has
 * not, or an id error / the errno of a failed query (a deferred fault: -EIO). */
int ga_stream_query(struct ga_streams *s, uint64_t owner, struct lt_stream_id id);

/* Blocks until the work submitted on @id has completed. Returns 0, an id
 * error or the errno of the failed work. */
int ga_stream_synchronize(struct ga_streams *s, uint64_t owner, struct lt_stream_id id);

/* Retires @id at once (later use: -ESTALE). Work already queued still runs,
 * and its completions still fire: the driver frees the stream when it is
 * done. The default stream is refused with -EINVAL. */
int ga_stream_destroy(struct ga_streams *s, uint64_t owner, struct lt_stream_id id);

/* Retires every stream and event of @owner (a dead client) as the two destroy
 * calls do, without waiting. Returns how many ids it retired. */
int ga_streams_drop_owner(struct ga_streams *s, uint64_t owner);

/* The CUstream behind @id, for agent code that launches on it. Holds the id:
 * the handle stays valid (even across ga_stream_destroy) until
 * ga_stream_put(@s, @id). Returns 0 or an id error. */
int ga_stream_get(struct ga_streams *s, uint64_t owner, struct lt_stream_id id,
                  struct CUstream_st **stream_p);

/* Drops the hold a successful ga_stream_get(@id) took, exactly once. */
void ga_stream_put(struct ga_streams *s, struct lt_stream_id id);

/* Runs @fn(@arg) on the table's completion thread once the work submitted on
 * @id so far has completed (cuLaunchHostFunc queues a CUDA-free hop to that
 * thread, so @fn may call CUDA or the lease service; it should not block for
 * long). Later work on the stream waits only for that hop, never for @fn.
 * Returns 0, an id error, -ENOMEM or the errno of cuLaunchHostFunc; on error
 * @fn never runs. */
int ga_stream_when_done(struct ga_streams *s, uint64_t owner, struct lt_stream_id id,
                        void (*fn)(void *arg), void *arg);

/* record_allocation(stream, lease): lease_work_pin(@svc, @client, @lease)
 * now, lease_work_done on the completion thread once the work submitted on
 * @stream so far has completed, so a release of the lease completes only
 * after it. Not an execution dependency. @client owns the stream too (as
 * owner client.value). Returns 0, an id error, the lease service's refusal
 * (-ENOENT, -ESTALE, -EPERM, -EALREADY, ..., logged with its words) or
 * -ENOMEM; on error the lease holds no new pin. */
int ga_stream_record_allocation(struct ga_streams *s, struct lt_stream_id stream,
                                struct lease_service *svc, struct lease_client_id client,
                                struct lt_lease_id lease);

/* Events are recorded without timing (CU_EVENT_DISABLE_TIMING) unless this
 * flag asks for it. */
#define GA_EVENT_TIMING 0x1u

/* Records an event on @stream. With @event {0, 0}: creates one with @flags,
 * owned by @owner, and writes its id to *event_p. Otherwise re-records @event
 * (@flags 0 or its own; asking a non-timing event for timing is -EINVAL) and
 * writes @event back. Returns 0, -EMFILE (max_events in use), -EINVAL, an id
 * error or the errno of a failed CUDA call. */
int ga_event_record(struct ga_streams *s, uint64_t owner, struct lt_stream_id stream,
                    struct lt_event_id event, unsigned int flags, struct lt_event_id *event_p);

/* Makes the work submitted on @stream from now on wait, on the GPU, for the
 * last recording of @event (cuStreamWaitEvent); the host does not wait. */
int ga_event_wait(struct ga_streams *s, uint64_t owner, struct lt_stream_id stream,
                  struct lt_event_id event);

/* 1 when the work before the event's last recording has completed, 0 when not. */
int ga_event_query(struct ga_streams *s, uint64_t owner, struct lt_event_id event);

/* Blocks until the event's last recording has completed. */
int ga_event_synchronize(struct ga_streams *s, uint64_t owner, struct lt_event_id event);

/* Retires @event at once; a pending recording still completes. */
int ga_event_destroy(struct ga_streams *s, uint64_t owner, struct lt_event_id event);

/* Milliseconds from @start to @end (cuEventElapsedTime). Returns 0, -EINVAL
 * when either was created without GA_EVENT_TIMING, -EAGAIN when either has
 * not completed, or an id error. */
int ga_event_elapsed(struct ga_streams *s, uint64_t owner, struct lt_event_id start,
                     struct lt_event_id end, float *ms_p);

struct ga_streams_stats {
    uint32_t streams, max_streams; /* live created streams */
    uint32_t events, max_events;
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
    uint64_t bell_dev;      /* the stream waits until (int64_t)(*bell - seq) >= 0 */
    uint64_t seq;
    ga_stream_work_fn work; /* NULL: none */
    void *work_arg;
    uint64_t done_dev; /* 0: none; else seq is written here after the work */
};

/* Queues on @stream: cuStreamWaitValue64(bell, seq, GEQ), the work, and
 * cuStreamWriteValue64(done, seq). Returns 0, -ENOTSUP (no stream memory
 * operations), -EINVAL (an address 0 or unaligned), an id error, the work's
 * error or the errno of a failed CUDA call; on error the stream may hold a
 * part of the sequence (destroy it, or ring the bell). */
int ga_doorbell_queue(struct ga_streams *s, uint64_t owner, struct lt_stream_id stream,
                      const struct ga_doorbell_req *req);

/* Queues cuStreamWriteValue64(@done_dev, @value) on @stream: the host sees
 * @value once the work before it has completed. Errors as ga_doorbell_queue. */
int ga_doorbell_signal(struct ga_streams *s, uint64_t owner, struct lt_stream_id stream,
                       uint64_t done_dev, uint64_t value);

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

#endif /* GPU_EXEC_H */
