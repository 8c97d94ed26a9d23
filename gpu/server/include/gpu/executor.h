/* ga executor: where the agent's GPU work runs, behind one table of
 * operations so the socket server never knows which backend serves it.
 *
 * The server resolves and checks everything a request names that lives in
 * the lease service (the lease, its bytes, the bell and done words, the op's
 * argument ranges against the lease) and hands the executor host addresses
 * (and device addresses, for the CUDA executor). The executor owns what is
 * its own: managed stream and event ids per owner (a client), the FIFO order
 * of each stream, doorbell waits, completion words, and the ops themselves.
 *
 * Threads: every operation may be called from any thread. Completion
 * callbacks run on an executor thread, or inline on the caller's thread for
 * work cancelled by client_drop / shutdown; they must not call back into the
 * executor and should only hand the result over (the server posts it to its
 * event loop). Each accepted submit or ctl gets its callback exactly once.
 *
 * Errors: functions return 0 or -errno. A refusal also fills *why_p, a
 * struct lt_failure (lease_types/errors.h: the protocol code, the errno and
 * a one-line message saying what was expected and what was found), which
 * the server copies into its ERROR message; *why_p is written only on
 * failure and the callback never runs for a refused request. */
#ifndef GPU_EXECUTOR_H
#define GPU_EXECUTOR_H

#include <stddef.h>
#include <stdint.h>

#include "lease_types/errors.h"
#include "lease_types/proto.h"

LT_EXTERN_C_BEGIN

/* A 64-bit word in a MAPPED segment: a doorbell to wait on or a completion
 * word to store into. */
struct ga_exec_word {
    uint64_t *host; /* the word in this process; NULL: not used */
    uint64_t dev;   /* its device address (CUDA); the host executor ignores it */
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
};

/* The answer to a stream, event or device command. */
struct ga_exec_ctl_result {
    uint16_t type;                  /* the command's LT_MSG_* type */
    uint32_t status;                /* enum lt_error; LT_OK except for cancelled syncs */
    uint32_t ready;                 /* STREAM_QUERY, EVENT_QUERY: 1 done, 0 pending */
    struct lt_stream_id stream;     /* STREAM_CREATE */
    struct lt_event_id event;       /* EVENT_RECORD */
    uint32_t elapsed_ms_bits;       /* EVENT_ELAPSED: finite binary32 */
    char message[LT_ERROR_MSG_LEN]; /* when status is not LT_OK */
};

typedef void (*ga_exec_ctl_done_fn)(void *arg, const struct ga_exec_ctl_result *res);

/* A stream, event or device command (LT_MSG_STREAM_CREATE ..
 * LT_MSG_DEVICE_SYNCHRONIZE), fields as in struct lt_msg_stream_cmd and
 * struct lt_msg_event_cmd, already validated for shape. */
struct ga_exec_ctl {
    uint16_t type;
    uint64_t owner;
    struct lt_stream_id stream;
    struct lt_event_id event;
    struct lt_event_id end;
    uint32_t flags;
    ga_exec_ctl_done_fn done_cb;
    void *arg;
};

/* What one owner holds, for STATS_REPLY. */
struct ga_exec_client_stats {
    uint32_t streams; /* created and not destroyed (the default stream not counted) */
    uint32_t events;
    uint64_t queued;    /* accepted work items not yet completed */
    uint64_t submitted; /* since client_add */
    uint64_t completed;
};

struct ga_executor_ops {
    /* Registers @owner (its default stream included). -EEXIST, -ENOMEM,
     * -ESHUTDOWN. */
    int (*client_add)(void *ctx, uint64_t owner);
    /* Peer death: cancels the owner's queued and doorbell-waiting work (each
     * item's callback runs with LT_E_SHUTTING_DOWN, possibly before this
     * returns), lets running items finish, and retires its stream and event
     * ids. Unknown owners are ignored. */
    void (*client_drop)(void *ctx, uint64_t owner);
    /* Queues @w on its stream. 0: done_cb runs exactly once later. */
    int (*submit)(void *ctx, const struct ga_exec_work *w, struct lt_failure *why_p);
    /* Runs or queues a command. 0: done_cb runs exactly once (possibly on the
     * calling thread before this returns). */
    int (*ctl)(void *ctx, const struct ga_exec_ctl *c, struct lt_failure *why_p);
    /* Snapshot of @owner's streams, events and work. -ENOENT if unknown. */
    int (*client_stats)(void *ctx, uint64_t owner, struct ga_exec_client_stats *stats_p);
    /* Log lines about the executor, snprintf-style return. */
    int (*stats_format)(void *ctx, char *buf, size_t len);
    /* Stops: refuses new requests (-ESHUTDOWN), cancels queued and waiting
     * work as client_drop does, waits for running work; every callback has
     * run when it returns. Idempotent. */
    void (*shutdown)(void *ctx);
    /* Shuts down if needed and frees everything. */
    void (*destroy)(void *ctx);
};

/* An executor: a table, its context, and what it offers clients. */
struct ga_executor {
    const char *name; /* "host", "cuda" */
    const struct ga_executor_ops *ops;
    void *ctx;
    uint32_t caps;        /* LT_CAP_* the server may grant (LT_CAP_HOST_BACKEND: no GPU) */
    uint32_t max_streams; /* per owner, besides the default stream */
    uint32_t max_events;  /* per owner */
};

/* ---- the host executor: no GPU ---------------------------------------- */

struct ga_executor_host_opts {
    uint32_t workers;           /* worker threads; 0: min(4, online CPUs) */
    uint32_t max_streams;       /* per owner; 0: 64 */
    uint32_t max_events;        /* per owner; 0: 1024 */
    uint64_t scratch_bytes;     /* per-worker stand-in for device memory (COPY_H2D); 0: 4 MiB */
    uint32_t bell_sleep_max_us; /* the doorbell poller's longest sleep; 0: 1000 */
};

/* Creates the host executor: worker threads run the C reference kernels
 * (CHECKSUM_VERIFY through kr_block_verify; COPY_H2D as a memcpy into a
 * scratch buffer; VECTOR_SCAN refused with LT_E_UNSUPPORTED), each stream is
 * a FIFO served by one worker at a time, events are markers with host
 * timestamps, and one poller thread watches doorbell words with backoff.
 * @opts may be NULL. On success *ex_p is the caller's: free it with
 * ga_executor_destroy. Returns 0, -EINVAL (an option out of range: workers
 * over 256, scratch over 1 GiB), -ENOMEM, or pthread_create's error. */
int ga_executor_host_create(const struct ga_executor_host_opts *opts, struct ga_executor **ex_p);

/* Shuts the executor down and frees it; NULL is a no-op. */
void ga_executor_destroy(struct ga_executor *ex);

LT_EXTERN_C_END

#endif /* GPU_EXECUTOR_H */
