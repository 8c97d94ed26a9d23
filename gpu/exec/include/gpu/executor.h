/* ga executor: where the agent's GPU work runs. One front (library ga_exec,
 * CUDA-free) with typed verbs for the socket server, over a backend that
 * does only what differs between the host and the GPU (gpu/exec_backend.h:
 * gpu/host's CPU threads, gpu/cuda's device).
 *
 * The front owns what every backend shares: the clients (owners, by their
 * lease-service id), the managed stream and event ids (slot + generation,
 * one base_idtab each, owner-checked: never raw handles), the limits per
 * owner and per agent, every refusal and its words, the counters, and the
 * order of a client drop and of shutdown. The server resolves and checks
 * what a request names in the lease service (the lease, its bytes, the bell
 * and done words, the op's argument ranges) and hands the executor host
 * addresses (and device addresses, for the CUDA backend).
 *
 * Threads: every verb may be called from any thread. Verbs naming one owner
 * must not run concurrently with ga_exec_client_drop of that owner (the
 * server calls them all from its loop). Answers run on a backend thread,
 * or on the calling thread before the verb returns (an answer known at
 * once, or work cancelled by a drop or shutdown); they must not call back
 * into the executor and should only hand the result over (the server posts
 * it to its loop). Each accepted request is answered exactly once.
 *
 * Errors: functions return 0 or -errno. A refusal also fills *why_p, a
 * struct lt_failure (lease_types/errors.h: the protocol code, the errno and
 * a one-line message saying what was expected and what was found), which
 * the server copies into its ERROR; *why_p is written only on failure and a
 * refused request is never answered. */
#ifndef GPU_EXECUTOR_H
#define GPU_EXECUTOR_H

#include <stddef.h>
#include <stdint.h>

#include "lease/lease.h"
#include "lease_types/errors.h"
#include "lease_types/proto.h"

LT_EXTERN_C_BEGIN

/* ---- requests and answers ---------------------------------------------- */

/* A 64-bit word in a MAPPED segment: a doorbell to wait on or a completion
 * word to store into. */
struct ga_exec_word {
    uint64_t *host; /* the word in this process; NULL: not used */
    uint64_t dev;   /* its device address (CUDA); the host backend ignores it */
    uint64_t seq;   /* wait for *host >= seq / store seq; nonzero when used */
};

/* The outcome of one work item. */
struct ga_exec_result {
    uint32_t status;     /* enum lt_error: LT_OK, LT_E_CHECKSUM_MISMATCH (result filled),
                            LT_E_SHUTTING_DOWN (cancelled before it ran), LT_E_GPU_FAULT */
    uint32_t detail;     /* backend detail (a CUresult), 0 when none */
    uint64_t elapsed_ns; /* accepted_ns to done */
    union lt_op_result result;
};

typedef void (*ga_exec_work_done_fn)(void *arg, const struct ga_exec_result *res);

/* One SUBMIT, resolved. The op's argument offsets are relative to @host and
 * were checked by the caller against @length (and alignment) already. */
struct ga_exec_work {
    uint64_t owner;             /* the client (its lease-service id) */
    struct lt_stream_id stream; /* {0, 0}: the owner's default stream */
    uint16_t op;                /* enum lt_op */
    union lt_op_args args;
    unsigned char *host;      /* the lease's first byte in this process */
    uint64_t dev;             /* the lease's device address (MAPPED), else 0 */
    uint64_t length;          /* the lease's bytes */
    uint32_t mem_class;       /* the class the lease was served as */
    struct ga_exec_word bell; /* run only once *bell.host >= bell.seq */
    struct ga_exec_word done; /* store done.seq once the op has run */
    uint64_t accepted_ns;     /* CLOCK_MONOTONIC, when the server accepted it */
    ga_exec_work_done_fn done_cb;
    void *arg;
    /* VECTOR_SCAN with k > 0: where the k hits go in this process, in memory
     * the agent may write (the client's words area); NULL: at
     * args.scan.hits_offset in the lease, as before LT_CAP_WORDS. */
    unsigned char *hits;
    struct ga_exec_launch *launch; /* op GA_EXEC_OP_LAUNCH: the launch (below); else NULL */
};

/* The answer to a stream, event or device command. */
struct ga_exec_ctl_result {
    uint32_t status;                /* enum lt_error: LT_OK, or why it failed after it was
                                       accepted (LT_E_SHUTTING_DOWN: cancelled) */
    uint32_t ready;                 /* stream and event query: 1 done, 0 pending */
    struct lt_stream_id stream;     /* stream create */
    struct lt_event_id event;       /* event record */
    uint32_t elapsed_ms_bits;       /* event elapsed: finite binary32 */
    char message[LT_ERROR_MSG_LEN]; /* when status is not LT_OK */
    /* ring close: the ring, and what it ran (shards answered with a result,
     * their chunks) */
    struct lt_ring_id ring;
    uint64_t ring_shards, ring_chunks;
};

typedef void (*ga_exec_ctl_done_fn)(void *arg, const struct ga_exec_ctl_result *res);

/* Where a command's answer goes. */
struct ga_exec_reply {
    ga_exec_ctl_done_fn done_cb;
    void *arg;
};

/* What one owner holds, for STATS_REPLY. */
struct ga_exec_client_stats {
    uint32_t streams; /* created and not destroyed (the default stream not counted) */
    uint32_t events;
    uint32_t rings;     /* open (not yet closed) */
    uint64_t queued;    /* accepted work items not yet completed */
    uint64_t submitted; /* since client_add */
    uint64_t completed;
};

/* What LAUNCH may ask of one client (0: the default); a launch over one is
 * refused LT_E_LIMIT with the numbers. */
struct ga_exec_launch_limits {
    uint32_t max_inflight;  /* launches of one owner not yet answered; 0: 64 */
    uint32_t max_shared;    /* dynamic shared memory of one launch, bytes; 0: 48 KiB */
    uint64_t max_threads;   /* grid x block threads of one launch; 0: 2^30 */
    uint32_t max_arg_bytes; /* argument block of one launch; 0: LT_LAUNCH_ARGS_MAX */
};

/* What every executor takes from the agent's command line (0: its default). */
struct ga_exec_limits {
    uint32_t workers;     /* threads that run (host) or issue (CUDA) the work */
    uint32_t max_streams; /* per owner, besides the default stream */
    uint32_t max_events;  /* per owner */
    uint32_t max_rings;   /* streaming rings per owner (0: 64) */
    struct ga_exec_launch_limits launch;
};

struct ga_executor;

/* What an executor offers clients (valid until ga_executor_destroy). */
struct ga_executor_info {
    const char *name;     /* "host", "cuda" */
    uint32_t caps;        /* LT_CAP_* the server may grant (LT_CAP_HOST_BACKEND: no GPU) */
    uint32_t max_streams; /* per owner, besides the default stream */
    uint32_t max_events;  /* per owner */
    uint32_t max_rings;   /* streaming rings per owner; 0: none (no LT_CAP_STREAM) */
};

const struct ga_executor_info *ga_executor_info(const struct ga_executor *ex);

/* ---- clients ----------------------------------------------------------- */

/* Registers @owner with its default stream. Returns 0, -EEXIST, -ENOMEM or
 * -ESHUTDOWN. */
int ga_exec_client_add(struct ga_executor *ex, uint64_t owner);

/* Peer death: retires the owner's stream and event ids at once, cancels its
 * queued and doorbell-waiting work (each is answered LT_E_SHUTTING_DOWN,
 * possibly before this returns) and lets running work finish; the backend
 * releases the owner's streams and events once their work is done. Unknown
 * owners are ignored. */
void ga_exec_client_drop(struct ga_executor *ex, uint64_t owner);

/* Snapshot of @owner's streams, events and work. Returns 0 or -ENOENT
 * (unknown or dropped). */
int ga_exec_client_stats(struct ga_executor *ex, uint64_t owner,
                         struct ga_exec_client_stats *stats_p);

/* ---- work -------------------------------------------------------------- */

/* Queues @w on its stream. 0: w->done_cb runs exactly once later. */
int ga_exec_submit(struct ga_executor *ex, const struct ga_exec_work *w, struct lt_failure *why_p);

/* ---- streams, events, the device (the protocol's commands) ---------------
 * Each verb: 0 once accepted, then @reply runs exactly once (the answer);
 * or a refusal. Ids are checked against @owner: never issued
 * (LT_E_NOT_FOUND), generation 0 or the default stream where a created one
 * is needed (LT_E_BAD_ID), retired or reissued (LT_E_STALE_ID), another
 * owner's (LT_E_NOT_OWNER). */

/* A stream with LT_STREAM_F_* @flags; the answer carries its id. Refused
 * past max_streams of the owner, or when the agent's table is full
 * (LT_E_LIMIT). */
int ga_exec_stream_create(struct ga_executor *ex, uint64_t owner, uint32_t flags,
                          const struct ga_exec_reply *reply, struct lt_failure *why_p);
/* Answered at once when @stream is one @owner may use. */
int ga_exec_stream_validate(struct ga_executor *ex, uint64_t owner, struct lt_stream_id stream,
                            const struct ga_exec_reply *reply, struct lt_failure *why_p);
/* ready = 1 when everything submitted on @stream so far has completed. */
int ga_exec_stream_query(struct ga_executor *ex, uint64_t owner, struct lt_stream_id stream,
                         const struct ga_exec_reply *reply, struct lt_failure *why_p);
/* Answered once everything submitted on @stream so far has completed. */
int ga_exec_stream_synchronize(struct ga_executor *ex, uint64_t owner, struct lt_stream_id stream,
                               const struct ga_exec_reply *reply, struct lt_failure *why_p);
/* Retires @stream at once (the default stream cannot be); work queued on it
 * still runs, as in CUDA. */
int ga_exec_stream_destroy(struct ga_executor *ex, uint64_t owner, struct lt_stream_id stream,
                           const struct ga_exec_reply *reply, struct lt_failure *why_p);

/* Records on @stream: with @event {0, 0} a new event (LT_EVENT_F_* @flags,
 * refused past max_events of the owner), else @event again (@flags 0). The
 * answer carries the event's id. */
int ga_exec_event_record(struct ga_executor *ex, uint64_t owner, struct lt_stream_id stream,
                         struct lt_event_id event, uint32_t flags,
                         const struct ga_exec_reply *reply, struct lt_failure *why_p);
/* Work submitted on @stream from now on waits for the event's last record
 * (on the GPU, not the host); answered once that is queued. */
int ga_exec_event_wait(struct ga_executor *ex, uint64_t owner, struct lt_stream_id stream,
                       struct lt_event_id event, const struct ga_exec_reply *reply,
                       struct lt_failure *why_p);
/* ready = 1 when the work before the event's last record has completed. */
int ga_exec_event_query(struct ga_executor *ex, uint64_t owner, struct lt_event_id event,
                        const struct ga_exec_reply *reply, struct lt_failure *why_p);
/* Answered once the event's last record has completed. */
int ga_exec_event_synchronize(struct ga_executor *ex, uint64_t owner, struct lt_event_id event,
                              const struct ga_exec_reply *reply, struct lt_failure *why_p);
/* Retires @event at once; a pending record still completes, and so do
 * synchronizes waiting for it. */
int ga_exec_event_destroy(struct ga_executor *ex, uint64_t owner, struct lt_event_id event,
                          const struct ga_exec_reply *reply, struct lt_failure *why_p);
/* Milliseconds from @start to @end; both must be created with TIMING
 * (LT_E_BAD_VALUE) and recorded and complete (LT_E_BUSY). */
int ga_exec_event_elapsed(struct ga_executor *ex, uint64_t owner, struct lt_event_id start,
                          struct lt_event_id end, const struct ga_exec_reply *reply,
                          struct lt_failure *why_p);
/* Answered once every stream of @owner has passed what was submitted on it
 * so far; other owners' work is not waited for. */
int ga_exec_device_synchronize(struct ga_executor *ex, uint64_t owner,
                               const struct ga_exec_reply *reply, struct lt_failure *why_p);

/* Runs @fn(@arg, status) once the work submitted on @stream so far has
 * completed (status LT_OK), or was cancelled (LT_E_SHUTTING_DOWN, the owner
 * dropped) or failed (LT_E_GPU_FAULT). @fn runs on a backend thread or, when
 * nothing is pending, before this returns; it may call the lease service. */
int ga_exec_stream_when_done(struct ga_executor *ex, uint64_t owner, struct lt_stream_id stream,
                             void (*fn)(void *arg, uint32_t status), void *arg,
                             struct lt_failure *why_p);

/* record_allocation(stream, lease): lease_work_pin(@svc, @client, @lease)
 * now and lease_work_done once the work submitted on @stream so far has
 * completed, so a release of the lease completes only after it. Not an
 * execution dependency. The stream's owner is @client (client.value).
 * Returns 0, a stream refusal, or the lease service's refusal (-ENOENT,
 * -ESTALE, -EPERM, -EALREADY, ...) in *why_p; on error no pin is left. */
int ga_exec_record_allocation(struct ga_executor *ex, struct lt_stream_id stream,
                              struct lease_service *svc, struct lease_client_id client,
                              struct lt_lease_id lease, struct lt_failure *why_p);

/* ---- streaming rings (protocol 1.1, LT_CAP_STREAM; docs/streaming.md) ----
 *
 * A ring: @nslots slots of @slot_bytes bytes of registered host memory and
 * a sequence and a done word per slot. Chunk s (1, 2, ...) goes in slot
 * s % nslots; the backend waits for seq[slot] >= s (wrap-safe), copies the
 * slot to the chunk's place in the device image of the shard that chunk
 * belongs to, and stores s into done[slot]. A shard says once which next
 * chunks form its image and what op runs on it. The front owns the ring
 * ids (owner-checked, like streams), the limits, the sequence bookkeeping
 * and the depth; the backend the standing work. */

struct ga_exec_ring_spec {
    uint64_t owner;
    unsigned char *slots; /* nslots * slot_bytes bytes in this process, registered */
    uint64_t slot_bytes;
    uint32_t nslots;
    uint32_t depth; /* shards the client wants outstanding; the front grants at most its limit */
    uint64_t max_shard_bytes;
    uint64_t *seq; /* nslots words in this process (MAPPED) */
    uint64_t seq_dev;
    uint64_t *done;
    uint64_t done_dev;
    /* Runs exactly once, on any thread, once the ring's work has drained
     * and the backend holds nothing of the above any more: after its
     * close was answered, or after its owner was dropped. Only then may
     * the caller let the memory go (lease_work_done). */
    void (*gone_fn)(void *arg);
    void *gone_arg;
};

/* The most shards a ring may have outstanding in this executor. */
#define GA_EXEC_RING_DEPTH_MAX 8u

/* Opens a ring (no device call: the backend makes what it needs on first
 * use). Returns 0 with its id and the depth granted (1..min(spec->depth,
 * GA_EXEC_RING_DEPTH_MAX)), after which spec->gone_fn runs exactly once;
 * or a refusal (LT_E_LIMIT past max_rings; LT_E_UNSUPPORTED when the
 * backend has no rings; LT_E_BAD_VALUE for a spec it cannot serve), after
 * which it never runs. */
int ga_exec_ring_open(struct ga_executor *ex, const struct ga_exec_ring_spec *spec,
                      struct lt_ring_id *ring_p, uint32_t *depth_p, struct lt_failure *why_p);

/* One RING_SHARD, resolved: the next chunks of @ring form an image of
 * @length bytes, @op runs on it with @args (offsets relative to the image;
 * a VECTOR_SCAN's k hits go to @hits, host memory the caller checked).
 * Refused unless @first_seq continues the ring (LT_E_BAD_VALUE, with the
 * sequence expected), @length is at most the ring's max_shard_bytes
 * (LT_E_OUT_OF_RANGE) and fewer than the ring's depth are outstanding
 * (LT_E_LIMIT). 0: done_cb runs exactly once, LT_E_SHUTTING_DOWN when the
 * ring closed or its owner went before every chunk was stored. */
struct ga_exec_shard {
    uint64_t owner;
    struct lt_ring_id ring;
    uint64_t first_seq;
    uint64_t length;
    uint16_t op;
    union lt_op_args args;
    unsigned char *hits; /* VECTOR_SCAN with k > 0; else NULL */
    uint64_t accepted_ns;
    ga_exec_work_done_fn done_cb;
    void *arg;
};

int ga_exec_ring_shard(struct ga_executor *ex, const struct ga_exec_shard *s,
                       struct lt_failure *why_p);

/* RING_CLOSE: the id retires at once (later shards naming it are stale);
 * the client stores no more sequence words. Shards whose chunks were all
 * stored still run; the others are answered LT_E_SHUTTING_DOWN. @reply
 * runs once the ring's work has drained (ring, ring_shards, ring_chunks
 * filled), before spec->gone_fn. */
int ga_exec_ring_close(struct ga_executor *ex, uint64_t owner, struct lt_ring_id ring,
                       const struct ga_exec_reply *reply, struct lt_failure *why_p);

/* ---- LAUNCH (protocol 1.2, docs/launch.md) ------------------------------- */

/* ga_exec_work.op of a LAUNCH: not a wire op (those are enum lt_op). It goes
 * through ga_exec_submit like any work: the backend's work_check finds the
 * kernel and checks the launch against its descriptor, the front applies
 * the launch limits, and the backend runs it on the stream. */
#define GA_EXEC_OP_LAUNCH 0x100u

/* One lease range a launch runs on, resolved and range-checked by the
 * server (the lease is pinned for the work: record_allocation). */
struct ga_exec_launch_range {
    unsigned char *host; /* the range's first byte in this process */
    uint64_t dev;        /* its device address (a MAPPED lease), else 0 */
    uint64_t length;     /* nonzero */
    uint32_t mem_class;  /* the class the lease was served as */
    uint32_t write;      /* 1: LT_LAUNCH_LEASE_F_WRITE, the kernel may write it */
};

/* A LAUNCH as the executor runs it. The caller fills the request and keeps
 * the struct (w->launch points at it) until the work's done_cb has run; the
 * backend writes the outputs, before a refusal returns or before the answer.
 * w->host and w->length are ranges[0]'s. */
struct ga_exec_launch {
    char image[LT_LAUNCH_IMAGE_LEN]; /* a name, validated */
    char kernel[LT_LAUNCH_KERNEL_LEN];
    uint32_t grid[3], block[3];
    uint32_t shared_bytes;
    uint32_t result_bytes; /* 0..LT_LAUNCH_RESULT_MAX */
    uint32_t nranges;      /* 1..LT_LAUNCH_MAX_LEASES */
    struct ga_exec_launch_range ranges[LT_LAUNCH_MAX_LEASES];
    uint32_t arg_bytes; /* the argument block at args, a multiple of 8 */
    unsigned char args[LT_LAUNCH_ARGS_MAX];
    /* outputs */
    uint32_t arg_index;                    /* the descriptor's parameter a refusal names;
                                              the caller sets LT_INDEX_NONE first */
    char cu_error[LT_LAUNCH_CU_ERROR_LEN]; /* the name of the result's CUresult detail */
    unsigned char result[LT_LAUNCH_RESULT_MAX]; /* LT_OK: the kernel's result_bytes */
};

/* ---- the executor ------------------------------------------------------ */

/* Log lines: the front's counters, then the backend's, snprintf-style. */
int ga_exec_stats_format(struct ga_executor *ex, char *buf, size_t len);

/* The front's counters, for /metrics (stats.c). */
struct ga_exec_stats {
    uint64_t clients;   /* owners not dropped */
    uint64_t streams;   /* live, every owner's (default streams not counted) */
    uint64_t events;    /* live */
    uint64_t queued;    /* accepted work items not yet completed */
    uint64_t in_flight; /* jobs and calls not yet answered */
    uint64_t submitted; /* since start */
    uint64_t completed;
    uint64_t cancelled;
    uint64_t failed;
    uint64_t commands; /* stream, event and device commands */
    uint32_t faulted;  /* 1 once the backend reported a fault */
};

/* Snapshot under the front's lock, from any thread. Returns 0 or -EINVAL. */
int ga_exec_stats(struct ga_executor *ex, struct ga_exec_stats *stats_p);

/* Stops: refuses new requests (-ESHUTDOWN), drops every owner (their work
 * answered LT_E_SHUTTING_DOWN), waits for running work; every answer has
 * run when it returns. Idempotent. */
void ga_exec_shutdown(struct ga_executor *ex);

/* Shuts down if needed and frees the front and its backend; NULL is a
 * no-op. */
void ga_executor_destroy(struct ga_executor *ex);

LT_EXTERN_C_END

#endif /* GPU_EXECUTOR_H */
