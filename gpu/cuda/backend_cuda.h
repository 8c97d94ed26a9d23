/* Internals of the CUDA backend, shared by backend_cuda.c (the table the
 * front calls, creation), serve_cuda.c (owners' command queues served on
 * the pool, the CUDA objects behind the front's streams and events,
 * completions, faults) and ops_cuda.c (what one op queues on the GPU, and
 * its result). */
#ifndef GPU_BACKEND_CUDA_H
#define GPU_BACKEND_CUDA_H

#include <cuda.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "gpu/exec_backend.h"
#include "gpu/exec_cuda.h"
#include "gpu/executor_cuda.h"

#define CX_RESULT_SLOT_BYTES 1024u                 /* pinned result bytes per submit */
#define CX_MAX_CHUNKS 64u                          /* pipeline chunks of one submit */
#define CX_VERIFY_RESULT_BYTES 32u                 /* a verify chunk's result: 4 words */
#define CX_VERIFY_MAX_CHUNKS (CX_RESULT_SLOT_BYTES / CX_VERIFY_RESULT_BYTES)
#define CX_SCRATCH_BYTES (8ull << 20)              /* pinned bounce buffer per stream */
#define CX_QUERY_BYTES_MAX (4ull * 65536ull)       /* dim <= 65536 floats */

enum cx_path { CX_PATH_PINNED = 0, CX_PATH_MAPPED = 1, CX_PATH_STAGED = 2, CX_PATHS = 3 };

enum cx_kind {
    CX_WORK = 1,     /* a SUBMIT */
    CX_CTL,          /* a stream, event or device command */
    CX_STREAM_CLOSE, /* the front retired a stream: release it behind its work */
    CX_EVENT_CLOSE,  /* the front retired an event */
    CX_DROP,         /* the owner is gone: release its streams and events */
    CX_RING_SHARD,   /* a ring's shard: its chunks' copies behind their words, then its op */
    CX_RING_CLOSE,   /* the front closed a ring: drain it, then release it */
};

/* The command a CX_CTL carries. */
enum cx_ctl {
    CX_STREAM_QUERY,
    CX_STREAM_SYNC,
    CX_EVENT_RECORD,
    CX_EVENT_WAIT,
    CX_EVENT_QUERY,
    CX_EVENT_SYNC,
    CX_EVENT_ELAPSED,
    CX_DEVICE_SYNC,
};

/* A pinned bounce buffer for STAGED bytes and f16 queries. Kept for reuse
 * (freeing pinned memory can synchronise the device), freed at destroy. */
struct cx_scratch {
    struct cx_scratch *next; /* in scratch_free */
    void *host;
    struct cx_scratch *all_next; /* in scratch_all: a link of its own, the free list's changes */
};

struct cx_owner;
struct cx_cmd;
struct cx_ring; /* ring_cuda.c */

/* The CUDA side of one of the front's streams (the default one too). */
struct cx_xs {
    struct cx_owner *o;
    struct cx_xs *onext;
    uint32_t flags;
    bool releasing;           /* its release is queued behind its work */
    bool want_cs;             /* a pipelined op or a device sync needs the copy side */
    struct cx_cmd *close_cmd; /* allocated up front: closing never fails */
    /* Made on first need by the worker that serves the owner. */
    CUstream st;          /* the stream itself */
    CUstream cs;          /* the copy side of a double-buffered pipeline */
    CUevent evf;          /* fork: cs waits for the main stream's work so far */
    CUevent cd[2], kd[2]; /* copy into buffer b done; kernel reading buffer b done */
    struct cx_scratch *scratch;
    /* The client's operations queued on st (submits, event records and
     * waits; the serving worker's count) and how many of them a completion
     * behind st has seen pass (under cx.mu). The completion that answers a
     * SUBMIT or a STREAM_SYNCHRONIZE runs inside its stream host function,
     * which the driver counts as pending until it returns: a STREAM_QUERY
     * sent right after that answer must not see the stream busy. */
    uint64_t issued, passed;
};

/* The CUDA side of one of the front's events. */
struct cx_ev {
    struct cx_owner *o;
    struct cx_ev *onext;
    uint32_t flags;           /* LT_EVENT_F_* */
    struct cx_cmd *close_cmd; /* allocated up front */
    CUevent ev;               /* made at its first record, on the worker */
};

/* A bounce copy a stream host function makes (no CUDA there). */
struct cx_piece {
    void *dst;
    const void *src;
    uint64_t len;
    uint32_t f16;  /* 1: convert @len bytes of f16 into f32 at dst */
    uint32_t gone; /* set (atomically) when reading @src faulted: the client's pages went */
};

struct cx;

/* One request of an owner: queued in its FIFO, then (work, syncs) in flight
 * on the GPU until its completion runs. */
struct cx_cmd {
    struct cx_cmd *next;          /* FIFO */
    struct cx_cmd *inext, *iprev; /* the backend's in-flight list */
    enum cx_kind kind;
    struct cx *x;
    struct cx_owner *o;
    int state; /* 0 pending, 1 answered (exactly once) */
    struct cx_xs *xs;
    /* CX_WORK */
    struct ga_exec_job *job;
    struct ga_exec_work w; /* the job's, copied */
    enum cx_path path;
    uint32_t slot;  /* result slot index, UINT32_MAX: none */
    struct cx_owner *slot_owner; /* who the slot counts against (x->mu) */
    uint64_t chunk; /* bytes per chunk */
    uint32_t nchunks;
    uint64_t records; /* scan: records in the range */
    int rc;           /* enqueue error (the op still completes behind it) */
    bool cancelled;   /* the owner went: the agent released its bell's wait */
    /* The agent released its bell's wait (or stored its shard's chunk words)
     * itself so an unregistration could proceed (cx__retire_release):
     * answered LT_E_BUSY. */
    bool forced;
    /* Bell-gated work: the stream waits on x->bell_words[slot], which the
     * bell poller stores once the client's bell is rung (bell_poll.c). */
    struct cx_cmd *bnext, *bprev; /* the poller's list (x->bell_mu) */
    bool bell_watched;            /* on that list (x->bell_mu) */
    uint64_t dmem_reserved; /* a LAUNCH's device copies, until it is freed (x->mu) */
    uint64_t t_inflight; /* base_now_ns when it joined the in-flight list */
    /* A completion behind xs->st: it proves xs's first @covers operations done. */
    bool covers_xs;
    uint64_t covers;
    struct cx_piece *pieces;
    uint32_t npieces, piece_cap;
    /* CX_CTL (and CX_EVENT_CLOSE: ev) */
    enum cx_ctl ctl;
    struct ga_exec_call *call;
    struct cx_ev *ev, *ev2;
    /* CX_RING_SHARD (and CX_RING_CLOSE: ring) */
    struct cx_ring *ring;
    struct cx_cmd *rnext;     /* the ring's issued shards, oldest first (x->mu) */
    uint64_t first_seq, nseq; /* its chunks' sequences */
    struct cx_cmd *dnext;     /* the poll dispatcher's queue of its ring (x->disp_mu) */
    uint64_t dq_next;         /* the poll dispatcher's: its first chunk not queued */
    /* The ring was closed or its owner dropped (cx__ring_ring_out, x->mu;
     * atomic): the dispatcher counts every chunk as stored and loads no
     * more of the client's words, which a client gone from the socket may
     * still be rewriting. */
    bool words_out;
    bool slot_waited; /* ring, poll: counted once in ring_slot_waits (x->mu) */
    bool image;               /* the op's bytes are already on the device, at w.dev */
    CUdeviceptr query_dev;    /* scan: the query as f32 on the device; 0: copy it from the host */
    unsigned char *hits_host; /* scan: where the hits go; NULL: w.host + hits_offset */
    /* CX_WORK of GA_EXEC_OP_LAUNCH (launch_cuda.c) */
    const struct cx_lk *lk; /* the kernel */
    CUresult cu_rc;         /* the first failed call's CUresult */
    bool launch_refused;    /* cuLaunchKernel refused it (not a fault) */
};

struct cx_owner {
    struct cx_owner *next, *prev; /* every owner in memory */
    struct cx *x;
    uint64_t id;
    struct cx_cmd *drop_cmd; /* allocated up front: dropping never fails */
    struct cx_xs *streams;   /* every stream in memory */
    struct cx_ev *events;    /* every event not closed */
    struct cx_ring *rings;   /* every ring not yet released */
    CUstream sync;           /* internal: EVENT_SYNCHRONIZE and DEVICE_SYNC wait here */
    struct cx_cmd *fifo_head, *fifo_tail;
    bool scheduled; /* a pool job is serving the FIFO */
    bool dropped;
    uint32_t refs;      /* the front's, one per command, one per stream, the serving job */
    uint64_t dmem_reserved; /* device memory its rings and launches reserve (x->mu) */
    uint32_t slots_held;    /* result slots its work holds (x->mu) */
};

struct cx_stats {
    uint64_t path_submits[CX_PATHS];
    uint64_t path_bytes[CX_PATHS];
    uint64_t bell_waits, done_words;
    uint64_t ring_shards, ring_chunks, ring_bytes, rings_opened;
    uint64_t ring_copies; /* the poll dispatcher's copies of released rings (chunks joined) */
    uint64_t ring_join_lapses; /* of released rings: chunks queued alone after a join's wait ran out */
    uint64_t ring_slot_waits;  /* ring shards, all stored, that waited for a result slot (poll) */
};

struct cx {
    struct ga_executor *front;
    struct ga_device *dev;
    struct ga_pool *pool;
    struct ga_streams *streams;
    CUfunction k_verify, k_scan[3], k_reduce; /* k_scan indexed by KN_SCAN_F32 / F16 */
    int sms;
    uint64_t chunk;
    pthread_mutex_t mu;
    pthread_cond_t idle_cv; /* ninflight reached 0 */
    struct cx_owner *owners;
    /* pinned results */
    unsigned char *results;
    uint32_t *free_slots;
    uint32_t nfree, nresult;
    uint32_t slot_floor;   /* slots each client is sure of (opts.result_floor) */
    uint32_t slot_reserve; /* kept back from clients holding slot_floor or more */
    struct cx_scratch *scratch_free, *scratch_all;
    struct cx_cmd *inflight; /* work and syncs on the GPU, not yet answered */
    uint64_t ninflight;      /* work and commands not yet answered, queued ones too */
    struct cx_stats st;
    bool stopping, shut, faulted;
    int fault_err;
    void (*on_fault)(void *arg, int err);
    void *fault_arg;
    CUresult fault_cu;              /* the sticky error, when known */
    struct cx_launch_table *launch; /* launchable kernels (launch_cuda.c) */
    /* the fault monitor */
    CUstream mon_stream;
    pthread_t mon;
    bool mon_started;
    pthread_cond_t mon_cv;
    /* streaming rings (ring_cuda.c) */
    struct cx_ring *rings;  /* every ring not yet released */
    CUstream *ring_streams; /* shared by the rings when nring_streams > 0 */
    uint32_t nring_streams, ring_rr;
    /* the rings' polling dispatcher (ring_poll.c), when ring_poll */
    bool ring_poll;
    uint32_t ring_join; /* chunks a copy waits to gather (1: none), under ring_poll */
    /* Device memory for clients' work: all clients', one client's, and what
     * open rings' images and queued launches' copies reserve (x->mu). */
    uint64_t dmem_budget, dmem_client_max, dmem_used;
    pthread_t disp;
    bool disp_started, disp_stop; /* disp_stop: disp_mu */
    pthread_mutex_t disp_mu;      /* may be held taking x->mu, never taken under it */
    pthread_cond_t disp_cv;       /* a shard or a release was handed over, or stop */
    struct cx_ring *disp_rings;   /* rings with shards or a release handed over */
    /* The bell poller (bell_poll.c): one agent word a result slot, pinned and
     * mapped, that bell-gated streams wait on instead of the client's bell. */
    uint64_t *bell_words;
    CUdeviceptr bell_words_dev;
    pthread_t bell;
    bool bell_started, bell_stop; /* bell_stop: bell_mu */
    pthread_mutex_t bell_mu;      /* taken under x->mu, never the other way */
    pthread_cond_t bell_cv;       /* a bell to watch was added, or stop */
    struct cx_cmd *bell_head, *bell_tail; /* watched commands, in sweep order (bell_mu) */
    uint32_t bell_n;                      /* how many (bell_mu) */
};

/* ---- bell_poll.c ---- */

/* Starts and stops the bell poller thread (stop: after every command is
 * answered; anything still watched is released first). */
int cx__bell_start(struct cx *x);
void cx__bell_stop(struct cx *x);
/* The device address @cmd's stream waits on (for a value >= 1) in place of
 * the client's bell; @cmd holds a result slot. */
CUdeviceptr cx__bell_word_dev(const struct cx *x, const struct cx_cmd *cmd);
/* Locked (x->mu). Arms @cmd's agent word (0: the wait holds) as @cmd
 * becomes visible to a drop and the reaper's gate. */
void cx__bell_arm(struct cx *x, struct cx_cmd *cmd);
/* Watches @cmd's client's bell, unless its wait was released already:
 * once it is rung, the poller stores the agent word. Before the wait is
 * queued. */
void cx__bell_watch(struct cx *x, struct cx_cmd *cmd);
/* Releases @cmd's wait now (the agent word stored) and stops watching it;
 * for a drop, a --bell-timeout release, and as @cmd is freed. */
void cx__bell_release(struct cx *x, struct cx_cmd *cmd);
/* Releases every watched wait and watches none: at the stop, and at a
 * device fault, whose answers let the bells' segments go (the poller must
 * load none of them after that). */
void cx__bell_release_all(struct cx *x);
/* Whether @cmd's wait is still held (its agent word not stored). */
bool cx__bell_held(const struct cx *x, const struct cx_cmd *cmd);

/* ---- serve_cuda.c ---- */

/* The protocol names of enum cx_ctl, for words. */
extern const char *const cx__ctl_names[];

/* Locked. Appends @cmd to @o's FIFO (one owner reference for it) and makes
 * sure a pool job serves it. Returns 0 or the pool's refusal. */
int cx__push(struct cx *x, struct cx_owner *o, struct cx_cmd *cmd);

/* Locked. Drops a reference; the last frees the owner. */
void cx__owner_unref(struct cx *x, struct cx_owner *o);

/* The fault monitor thread (arg: the struct cx). */
void *cx__monitor_main(void *arg);

/* Answers @cmd once (see serve_cuda.c); false when the fault path did. */
bool cx__cmd_answer(struct cx *x, struct cx_cmd *cmd, uint32_t status, const char *why,
                    const struct ga_exec_answer *a);
/* Frees an answered command: its result slot and its owner reference. */
void cx__cmd_free(struct cx *x, struct cx_cmd *cmd);
/* The context is unusable: answer everything in flight (serve_cuda.c). */
void cx__fault(struct cx *x, int err);

/* ---- ring_cuda.c ---- */

int cx__ring_open(void *ctx, void *bo, struct ga_exec_ring *r, const struct ga_exec_ring_spec *spec,
                  void **br_p, struct lt_failure *why_p);
int cx__ring_shard(void *ctx, void *br, struct ga_exec_job *job, struct lt_failure *why_p);
void cx__ring_close(void *ctx, void *br, struct ga_exec_call *close);
/* Locked: an issued shard joins its ring's list (before any CUDA call). */
void cx__ring_pending_add(struct cx *x, struct cx_cmd *cmd);
/* Locked (x->mu). Reserves @need bytes of device memory for @o's work (a
 * ring's images, a launch's copies) within --device-budget and
 * --max-client-device. Returns 0, or -ENOSPC with LT_E_LIMIT and the
 * numbers in *@why (@verb: the request, as its refusal names it). */
int cx__devmem_reserve(struct cx *x, struct cx_owner *o, uint64_t need, const char *verb,
                     struct lt_failure *why);
/* Locked (x->mu). Gives back what cx__devmem_reserve took. */
void cx__devmem_release(struct cx *x, struct cx_owner *o, uint64_t n);
/* Locked (x->mu). Takes a result slot for @cmd of @o: any free one while @o
 * holds fewer than x->slot_floor, else only while more than x->slot_reserve
 * are free. Returns 0, or -ENOSPC (with LT_E_LIMIT and the numbers in *@why,
 * when @why is not NULL). */
int cx__slot_take(struct cx *x, struct cx_owner *o, struct cx_cmd *cmd, struct lt_failure *why);
/* Locked (x->mu). Gives @cmd's result slot back, if it holds one. */
void cx__slot_put(struct cx *x, struct cx_cmd *cmd);
/* On a worker: the shard's copies, op and completion on its ring's stream. */
void cx__ring_shard_issue(struct cx *x, struct cx_cmd *cmd);
/* On a worker: the ring's close (words nobody will store rung, shards
 * not wholly stored cancelled), then its release behind its work. */
void cx__ring_close_issue(struct cx *x, struct cx_ring *rg);
/* Locked: the owner went: every chunk its rings wait for is rung and their
 * shards are answered cancelled. */
void cx__rings_cancel(struct cx *x, struct cx_owner *o);
/* On a worker (the owner's drop): each ring of @o released behind its work. */
void cx__rings_release(struct cx *x, struct cx_owner *o);
/* Locked: how long (ns, at @now) the ring whose first unstored awaited
 * chunk word has stayed the same the longest has waited; 0: none waits. */
uint64_t cx__rings_stalled_ns(struct cx *x, uint64_t now);
/* Locked: each ring stalled for at least @older_ns (as above): every chunk
 * word its pending shards await is stored (guarded, no CUDA) and those
 * shards are answered LT_E_BUSY. Returns how many shards it forced. */
uint32_t cx__rings_force(struct cx *x, uint64_t now, uint64_t older_ns, const char *why);
/* The device faulted: every ring not yet released is released now. */
void cx__rings_fault(struct cx *x);

/* ---- ops_cuda.c ---- */

/* Checks @cmd->w's op for what this backend can run and sizes it in @cmd
 * (path, chunks, records). Returns 0 or a refusal (lt code in *code_p and a
 * message in @msg). CUDA-free. */
int cx__op_plan(const struct cx *x, struct cx_cmd *cmd, uint32_t *code_p, char *msg, size_t len);

/* Queues @cmd's op on @st (the main stream of its cx_xs), with the context
 * current: the copies, kernels, the result copy into the pinned slot and the
 * device memory's free. On error what was queued stays queued (the caller
 * still queues the completion behind it). */
int cx__op_queue(struct cx *x, struct cx_cmd *cmd, CUstream st);
/* Makes what @cmd's op needs on its stream (copy side, events, bounce
 * buffer) without queuing anything; cx__op_queue does it too. */
int cx__op_prepare(struct cx *x, struct cx_cmd *cmd);

/* Queues the op of @cmd whose bytes are already in device memory (a ring's
 * shard image at cmd->w.dev, read as the MAPPED path reads in place): the
 * kernels and the result copy; COPY_H2D queues nothing (the chunks' copies
 * were the op). */
int cx__op_queue_device(struct cx *x, struct cx_cmd *cmd, CUstream st);

/* Fills @res from @cmd's pinned result once the GPU is done with it. */
void cx__op_result(const struct cx *x, const struct cx_cmd *cmd, struct ga_exec_result *res);

/* Makes @xs's copy stream, events (and with @scratch its bounce buffer)
 * exist. On a worker, context current. */
int cx__xs_prepare(struct cx *x, struct cx_xs *xs, bool scratch);

/* ---- launch_cuda.c: LAUNCH ---- */

struct cx_lk;
struct cx_launch_table;

/* The launchable kernels: every kernel the loaded images' descriptors
 * declare, each parsed and checked against its cubin and its function's
 * limits. At creation, context current; -ENOEXEC (logged) when a
 * descriptor disagrees. */
int cx__launch_table_build(struct cx *x);
void cx__launch_table_free(struct cx *x);
/* How many kernels may be launched (0: LT_CAP_LAUNCH is not offered). */
size_t cx__launch_count(const struct cx *x);
/* work_check of a launch: its kernel, ranges, shape and arguments against
 * the descriptor and the device; a refusal sets w->launch->arg_index. */
int cx__launch_check(const struct cx *x, const struct ga_exec_work *w, struct lt_failure *why);
/* cx__op_plan of a launch. */
int cx__launch_plan(const struct cx *x, struct cx_cmd *cmd, uint32_t *code_p, char *msg,
                    size_t len);
/* cx__op_queue of a launch. */
int cx__launch_queue(struct cx *x, struct cx_cmd *cmd, CUstream st);
/* The device memory a planned LAUNCH's copies take while it is queued: the
 * PINNED ranges a pointer parameter names, and the result area. */
uint64_t cx__launch_devmem(const struct cx_cmd *cmd);
/* cx__op_result of a launch: the result area into the launch, the status. */
void cx__launch_result(const struct cx *x, const struct cx_cmd *cmd, struct ga_exec_result *res);
/* The fault path answers @cmd: names the sticky error @r in a launch. */
void cx__launch_fault_note(struct cx_cmd *cmd, CUresult r);

#endif /* GPU_BACKEND_CUDA_H */
