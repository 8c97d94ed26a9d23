/* A streaming ring of the CUDA backend, shared by ring_cuda.c (the table's
 * ops, the words, issuing in the wait shape, closing and release) and
 * ring_poll.c (the polling dispatcher, --ring-dispatch poll). */
#ifndef GPU_RING_INTERNAL_H
#define GPU_RING_INTERNAL_H

#include "backend_cuda.h"

#define CX_RING_ALIGN(v) (((v) + 255u) & ~(uint64_t)255u)
#define CX_RING_DMEM_MAX (64ull << 30) /* device memory one ring may hold */

struct cx_ring {
    struct cx *x;
    struct cx_owner *o;
    struct cx_ring *onext;         /* the owner's rings (x->mu) */
    struct cx_ring *xnext, *xprev; /* every ring of the backend (x->mu) */
    struct ga_exec_ring *r;
    struct ga_exec_ring_spec spec; /* depth: the granted one */
    uint32_t idx;                  /* for picking a shared stream */
    /* on the serving worker */
    CUstream st;
    bool own_stream;
    /* the ring's own: its completions' stream, and the event each waits
     * for there (recorded on st after a shard's kernels, or the release) */
    CUstream cst;
    CUevent done_ev;
    CUdeviceptr dmem;
    uint64_t dmem_reserved; /* of x->dmem_used and o->dmem, until released */
    uint64_t image_bytes; /* per image: the largest shard, then room for an f32 query */
    uint64_t shards_issued;
    /* what queueing the ring's work cost its worker (ns), and when the
     * ring opened and its first shard was queued (base_now_ns): logged at
     * debug level when the ring goes */
    uint64_t issue_ns, t_open, t_first_issued, chunks_issued;
    struct cx_scratch *scratch; /* f16 queries are widened through it */
    /* x->mu */
    struct cx_cmd *pend_head, *pend_tail; /* issued shards not answered, in order */
    struct cx_cmd *close_cmd;             /* allocated at open: closing never fails */
    struct ga_exec_call *close_call;
    bool releasing, released;
    /* the reaper's gate: the first awaited chunk not stored on, and since
     * when it has been (0: none) */
    uint64_t stall_seq, stall_since;
    /* The polling dispatcher's (x->disp_mu): the shards prepared on the
     * worker whose chunks it has not all queued, oldest first; the ring is
     * on x->disp_rings while it has any, or its release waits for them. */
    struct cx_cmd *dq_head, *dq_tail;
    struct cx_ring *dnext;
    bool dlisted, drelease;
    /* since when its next chunk has not been stored, and (once that is
     * long) when it is looked at next (base_now_ns; 0: none) */
    uint64_t dquiet_since, dlook_at;
    uint64_t copies; /* the dispatcher's alone: copies queued, chunks joined */
    /* The dispatcher's alone (x->ring_join > 1): the chunk held back for
     * its neighbour and since when (0: none), and how many were queued
     * alone once the wait ran out. */
    uint64_t join_seq, join_since, join_lapses;
    /* The dispatcher's gate (ring_poll.c): an event recorded on st after
     * the copy of chunk gate_seq; while armed, no chunk past gate_seq + 2
     * slots' worth is queued before it has completed. Made with st. */
    CUevent gate_ev;
    bool gate_armed;
    uint64_t gate_seq;
};

/* One copy queued behind a word: a slot's bytes to their place in an image. */
struct cx_ring_copy {
    CUdeviceptr dst;
    const unsigned char *src;
    uint64_t len;
};

/* ---- ring_cuda.c ---- */

/* What follows a shard's chunk copies on its ring's stream: the f16
 * query's widening, the op's kernels and the completion (the worker in the
 * wait shape, the dispatcher in the poll shape; context current). @rc is
 * the chunks' queueing error, which the shard is answered with. */
void cx__ring_shard_finish(struct cx *x, struct cx_cmd *cmd, int rc);
/* Queues @rg's release on its stream behind everything queued there. */
void cx__ring_release_now(struct cx *x, struct cx_ring *rg);

/* ---- ring_poll.c: the polling dispatcher ----
 *
 * One agent thread per executor that polls the sequence words of every
 * ring with a prepared shard (guarded loads: the words are the client's
 * memory) and queues each stored chunk's copy and done word on the ring's
 * stream, joining stored chunks whose slots and places are adjacent, then
 * the shard's finish once its last chunk is queued. The GPU never waits on
 * a word the client controls. */

/* Starts the thread (context made current on it). Returns 0 or -errno. */
int cx__disp_start(struct cx *x);
/* Once nothing is in flight: stops the thread and joins it. */
void cx__disp_stop(struct cx *x);
/* A worker hands over a prepared shard (its ring's stream and image made,
 * cmd->w.dev set): the dispatcher queues it from here on. */
void cx__disp_shard(struct cx *x, struct cx_cmd *cmd);
/* The ring's release, queued by the dispatcher once it has queued every
 * shard handed over before (at once when there are none). */
void cx__disp_release(struct cx *x, struct cx_ring *rg);

#endif /* GPU_RING_INTERNAL_H */
