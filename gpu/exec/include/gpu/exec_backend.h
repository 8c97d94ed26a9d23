/* ga executor, the backend side: the narrow table of what differs between
 * running the agent's work on CPU threads (gpu/host) and on the GPU
 * (gpu/cuda). Everything else (owners, managed ids, limits, refusals,
 * counters, drop and shutdown order) is the front's (gpu/executor.h).
 *
 * The front hands the backend its own objects, never ids: an owner (bo),
 * streams (bs) and events (bev), each made by the backend's *_open and
 * given back by *_close (or, for all of an owner's, by owner_drop). It
 * calls no op with its lock held and never names an object after closing
 * it or after owner_drop of its owner.
 *
 * Asynchronous ops take a job (work) or a call (a command) and return 0 once
 * accepted; the backend then completes it exactly once with ga_exec_job_done
 * or ga_exec_call_done, from any thread, holding none of its own locks (the
 * front calls the server's callback from there), and possibly before the op
 * returns. An op that refuses returns -errno with *why_p filled and never
 * completes the job or call.
 *
 * How later work fits (docs/gpu-exec.md, "The backend table"): a LAUNCH op
 * is one more op code that work_check and work_enqueue accept. STREAMING
 * rings (docs/streaming.md) are ring_open / ring_shard / ring_close at the
 * end of the table: the front owns their ids, limits and sequences, the
 * backend the per-chunk work queued behind their sequence words. */
#ifndef GPU_EXEC_BACKEND_H
#define GPU_EXEC_BACKEND_H

#include "base/idtab.h"
#include "base/log.h"
#include "gpu/executor.h"

LT_EXTERN_C_BEGIN

/* One accepted work item. */
struct ga_exec_job;
/* One accepted command (or a ga_exec_stream_when_done marker). */
struct ga_exec_call;

/* The work item @job carries (valid until it is done). For a ring's shard
 * it holds the owner, op, args, image length (length), accepted_ns and the
 * answer; host is NULL. */
const struct ga_exec_work *ga_exec_job_work(const struct ga_exec_job *job);

/* One streaming ring, the front's handle (gpu/executor.h). */
struct ga_exec_ring;

/* What a ring's shard is, beyond its work item. */
struct ga_exec_shard_info {
    uint64_t first_seq;  /* chunk i has sequence first_seq + i, in slot (first_seq + i) % nslots */
    uint64_t chunks;     /* ceil(length / slot_bytes) */
    unsigned char *hits; /* VECTOR_SCAN with k: where the hits go, else NULL */
};

/* The shard @job is, or NULL for a SUBMIT's job. */
const struct ga_exec_shard_info *ga_exec_job_shard(const struct ga_exec_job *job);

/* The backend let go of ring @r (its work drained, nothing of its spec
 * held): after ring_close (@close the call it was given) or its owner's
 * drop (@close NULL). Exactly once per ring_open that succeeded; any
 * thread, no backend lock held. Answers the close, runs the spec's
 * gone_fn, frees @r. */
void ga_exec_ring_released(struct ga_exec_ring *r, struct ga_exec_call *close);

/* Completes @job with @res; the front sets elapsed_ns and answers the
 * server. */
void ga_exec_job_done(struct ga_exec_job *job, const struct ga_exec_result *res);

/* A command's outcome, as the backend knows it. */
struct ga_exec_answer {
    uint32_t status;     /* LT_OK, or the code it failed with */
    uint32_t ready;      /* queries */
    float elapsed_ms;    /* event elapsed */
    const char *message; /* status != LT_OK: the words (NULL: the code's) */
};

/* Completes @call. */
void ga_exec_call_done(struct ga_exec_call *call, const struct ga_exec_answer *a);

/* Completes @call with LT_OK and nothing else to say. */
void ga_exec_call_ok(struct ga_exec_call *call);

/* The protocol name of @call's command ("STREAM_SYNCHRONIZE"), for words. */
const char *ga_exec_call_name(const struct ga_exec_call *call);

/* The device is unusable (a sticky fault): from now on every request is
 * refused with LT_E_GPU_FAULT and @err's text. The backend answers what it
 * holds itself. Any thread; idempotent. */
void ga_exec_backend_fault(struct ga_executor *ex, int err);

struct ga_exec_backend_ops {
    /* ---- synchronous, on the caller's thread, no device call ---- */

    /* Refuses work this backend cannot run (an op, a metric, a size, a
     * missing device address), with the words. */
    int (*work_check)(void *be, const struct ga_exec_work *w, struct lt_failure *why_p);
    /* A new owner's state, and its default stream through stream_open. */
    int (*owner_open)(void *be, uint64_t owner, void **bo_p);
    /* The owner is gone: cancel what has not started (every job and call
     * answered LT_E_SHUTTING_DOWN), let running work finish, release every
     * stream and event of the owner once its work is done, then the owner.
     * The front names none of them again. */
    void (*owner_drop)(void *be, void *bo);
    /* A stream of @bo with LT_STREAM_F_* @flags (0 for the default one). */
    int (*stream_open)(void *be, void *bo, uint32_t flags, void **bs_p);
    /* Its id is retired: work queued on it still runs; free it after. */
    void (*stream_close)(void *be, void *bs);
    /* An event of @bo (LT_EVENT_F_TIMING in @flags: it can time). */
    int (*event_open)(void *be, void *bo, uint32_t flags, void **bev_p);
    /* Its id is retired: a pending record still completes, and so do the
     * synchronizes waiting for it. */
    void (*event_close)(void *be, void *bev);

    /* ---- asynchronous: queued behind what @bs already holds ---- */

    int (*work_enqueue)(void *be, void *bs, struct ga_exec_job *job, struct lt_failure *why_p);
    /* ready = 1 when nothing queued on @bs is left. */
    int (*stream_query)(void *be, void *bs, struct ga_exec_call *call, struct lt_failure *why_p);
    /* Done once what @bs holds now has completed. */
    int (*stream_sync)(void *be, void *bs, struct ga_exec_call *call, struct lt_failure *why_p);
    int (*event_record)(void *be, void *bs, void *bev, struct ga_exec_call *call,
                        struct lt_failure *why_p);
    int (*event_wait)(void *be, void *bs, void *bev, struct ga_exec_call *call,
                      struct lt_failure *why_p);
    int (*event_query)(void *be, void *bev, struct ga_exec_call *call, struct lt_failure *why_p);
    int (*event_sync)(void *be, void *bev, struct ga_exec_call *call, struct lt_failure *why_p);
    /* Both events were created with TIMING (the front checked). */
    int (*event_elapsed)(void *be, void *start, void *end, struct ga_exec_call *call,
                         struct lt_failure *why_p);
    /* Done once every stream of @bo has passed what it holds now. */
    int (*device_sync)(void *be, void *bo, struct ga_exec_call *call, struct lt_failure *why_p);

    /* ---- the backend ---- */

    /* Its own log lines (after the front's), snprintf-style. */
    int (*stats_format)(void *be, char *buf, size_t len);
    /* Every owner was dropped: wait for running work and stop the threads;
     * every job and call is done when it returns. Idempotent. */
    void (*shutdown)(void *be);
    /* Frees the backend (after shutdown). */
    void (*destroy)(void *be);

    /* ---- streaming rings: NULL when the backend has none (no LT_CAP_STREAM) ---- */

    /* A ring of @bo over @spec (copied; sync, no device call: what the
     * device needs is made on first use). @r is the front's handle for
     * ga_exec_ring_released. Its owner_drop releases it too. */
    int (*ring_open)(void *be, void *bo, struct ga_exec_ring *r,
                     const struct ga_exec_ring_spec *spec, void **br_p, struct lt_failure *why_p);
    /* Queues @job's chunks and op behind what @br holds (async; completed
     * with ga_exec_job_done). The front checked the sequence and depth. */
    int (*ring_shard)(void *be, void *br, struct ga_exec_job *job, struct lt_failure *why_p);
    /* The client stores no more sequence words: shards not wholly stored
     * are answered LT_E_SHUTTING_DOWN, the rest run; once drained the
     * backend frees the ring and calls ga_exec_ring_released(r, @close).
     * Never fails. */
    void (*ring_close)(void *be, void *br, struct ga_exec_call *close);
};

/* A backend: its table, its context and what it offers. */
struct ga_exec_backend {
    const char *name; /* "host", "cuda" */
    uint32_t caps;    /* LT_CAP_* */
    const struct ga_exec_backend_ops *ops;
    void *ctx;
};

struct ga_exec_config {
    struct ga_exec_limits limits; /* max_streams (0: 64), max_events (0: 1024), max_rings
                                     (0: 64) per owner */
    uint32_t table_streams;       /* ids of all owners at once; 0: no limit */
    uint32_t table_events;
    uint32_t table_rings;
    /* LIFO: a destroyed stream's slot is reused first (warm); FIFO with
     * the whole table allocated up front: a kept id reads as stale for as
     * long as possible. */
    enum base_idtab_reuse reuse;
    struct base_log_sink log; /* subsystem "exec"; zeroed: the process default */
};

/* Creates the front over @be. On success the front owns the backend
 * (ga_executor_destroy destroys it); on failure the caller still does.
 * Returns 0, -EINVAL (a limit over 2^20, no table) or -ENOMEM. */
int ga_executor_create(const struct ga_exec_config *cfg, const struct ga_exec_backend *be,
                       struct ga_executor **ex_p);

LT_EXTERN_C_END

#endif /* GPU_EXEC_BACKEND_H */
