/* Internals of the CUDA executor, shared by executor_cuda.c (clients, their
 * command queues, streams and events, completions, faults) and
 * executor_cuda_ops.c (what one op queues on the GPU, and its result). */
#ifndef GPU_EXECUTOR_CUDA_INTERNAL_H
#define GPU_EXECUTOR_CUDA_INTERNAL_H

#include <cuda.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "gpu/exec.h"
#include "gpu/executor_cuda.h"

#define CX_RESULT_SLOT_BYTES 1024u                 /* pinned result bytes per submit */
#define CX_MAX_CHUNKS (CX_RESULT_SLOT_BYTES / 16u) /* a checksum chunk's result: 2 words */
#define CX_SCRATCH_BYTES (8ull << 20)              /* pinned bounce buffer per stream */
#define CX_QUERY_BYTES_MAX (4ull * 65536ull)       /* dim <= 65536 floats */

enum cx_path { CX_PATH_PINNED = 0, CX_PATH_MAPPED = 1, CX_PATH_STAGED = 2, CX_PATHS = 3 };

enum cx_kind {
    CX_WORK = 1, /* a SUBMIT */
    CX_CTL,      /* a stream, event or device command */
    CX_DROP,     /* the client is gone: release its streams and events */
};

/* A pinned bounce buffer for STAGED bytes and f16 queries. Kept for reuse
 * (freeing pinned memory can synchronise the device), freed at destroy. */
struct cx_scratch {
    struct cx_scratch *next;
    void *host;
};

struct cx_owner;

/* One of a client's streams: the managed id and what the pipelines add. */
struct cx_xs {
    struct cx_owner *o;
    struct cx_xs *onext;
    struct lt_stream_id id; /* the managed id; {0,0} until created (default stream) */
    bool created;
    bool destroyed; /* retired by STREAM_DESTROY or the drop: no new requests */
    bool is_default;
    bool releasing; /* its release is queued behind its work */
    uint32_t flags;
    /* Made on first need by the worker that serves the owner. */
    CUstream cs;          /* the copy side of a double-buffered pipeline */
    CUevent evf;          /* fork: cs waits for the main stream's work so far */
    CUevent cd[2], kd[2]; /* copy into buffer b done; kernel reading buffer b done */
    struct cx_scratch *scratch;
};

/* A bounce copy a stream host function makes (no CUDA there). */
struct cx_piece {
    void *dst;
    const void *src;
    uint64_t len;
    uint32_t f16; /* 1: convert @len bytes of f16 into f32 at dst */
};

struct cx;

/* One request of a client: queued in its FIFO, then (work, syncs) in flight
 * on the GPU until its completion runs. */
struct cx_cmd {
    struct cx_cmd *next;          /* FIFO */
    struct cx_cmd *inext, *iprev; /* the executor's in-flight list */
    enum cx_kind kind;
    struct cx *x;
    struct cx_owner *o;
    int state; /* 0 pending, 1 answered (exactly once) */
    /* CX_WORK */
    struct ga_exec_work w;
    struct cx_xs *xs;
    enum cx_path path;
    uint32_t slot;  /* result slot index, UINT32_MAX: none */
    uint64_t chunk; /* bytes per chunk */
    uint32_t nchunks;
    uint64_t records; /* scan: records in the range */
    int rc;           /* enqueue error (the op still completes behind it) */
    bool cancelled;   /* the client went: its bell was rung by the agent */
    struct cx_piece *pieces;
    uint32_t npieces, piece_cap;
    /* CX_CTL */
    struct ga_exec_ctl c;
    struct ga_exec_ctl_result r;
};

struct cx_owner {
    struct cx_owner *next;
    struct cx *x;
    uint64_t id;
    struct cx_cmd *drop_cmd; /* allocated up front: dropping never fails */
    struct cx_xs *dflt;
    struct cx_xs *streams;       /* every stream still in memory, the default one too */
    struct lt_stream_id sync_id; /* internal stream for EVENT_SYNCHRONIZE / DEVICE_SYNC */
    bool sync_created;
    uint32_t live_streams;    /* created and not destroyed, default excluded */
    uint32_t pending_creates; /* STREAM_CREATE queued */
    uint32_t live_events;
    struct cx_cmd *fifo_head, *fifo_tail;
    bool scheduled; /* a pool job is serving the FIFO */
    bool dropped;
    uint32_t refs; /* the table's, one per command, one per stream in memory */
    uint64_t queued, submitted, completed;
};

struct cx_stats {
    uint64_t submitted, completed, cancelled, failed;
    uint64_t path_submits[CX_PATHS];
    uint64_t path_bytes[CX_PATHS];
    uint64_t bell_waits, done_words, ctl;
};

struct cx {
    struct ga_executor ex;
    struct ga_device *dev;
    struct ga_pool *pool;
    struct ga_streams *streams;
    CUfunction k_verify, k_scan[3], k_reduce; /* k_scan indexed by KN_SCAN_F32 / F16 */
    int sms;
    uint64_t chunk;
    pthread_mutex_t mu;
    pthread_cond_t idle_cv; /* inflight reached 0 */
    struct cx_owner *owners;
    struct cx_xs **by_slot; /* created streams by managed slot; [0] unused */
    uint32_t nslots;
    /* pinned results */
    unsigned char *results;
    uint32_t *free_slots;
    uint32_t nfree, nresult;
    struct cx_scratch *scratch_free, *scratch_all;
    struct cx_cmd *inflight; /* work and syncs on the GPU, not yet answered */
    uint64_t ninflight;      /* commands not yet answered, queued ones too */
    struct cx_stats st;
    bool stopping, shut, faulted;
    int fault_err;
    void (*on_fault)(void *arg, int err);
    void *fault_arg;
    /* the fault monitor */
    CUstream mon_stream;
    pthread_t mon;
    bool mon_started;
    pthread_cond_t mon_cv;
};

/* ---- executor_cuda_ops.c ---- */

/* Checks @w's op for what this executor can run and sizes it in @cmd
 * (path, chunks, records). Returns 0 or a refusal (lt code in *code_p and a
 * message in @msg). CUDA-free. */
int cx__op_plan(const struct cx *x, struct cx_cmd *cmd, uint32_t *code_p, char *msg, size_t len);

/* Queues @cmd's op on @st (the main stream of its cx_xs, held by the
 * caller), with the context current: the copies, kernels, the result copy
 * into the pinned slot and the device memory's free. On error what was
 * queued stays queued (the caller still queues the completion behind it). */
int cx__op_queue(struct cx *x, struct cx_cmd *cmd, CUstream st);

/* Fills @res from @cmd's pinned result once the GPU is done with it. */
void cx__op_result(const struct cx *x, const struct cx_cmd *cmd, struct ga_exec_result *res);

/* Makes @xs's copy stream, events (and with @scratch its bounce buffer)
 * exist. On a worker, context current. */
int cx__xs_prepare(struct cx *x, struct cx_xs *xs, bool scratch);

#endif /* GPU_EXECUTOR_CUDA_INTERNAL_H */
