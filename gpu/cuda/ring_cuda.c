/* The CUDA backend's streaming rings (gpu/exec_backend.h, docs/streaming.md).
 *
 * A ring's work is queued ahead on one CUDA stream, its own (the default)
 * or one of --ring-streams shared ones: for each chunk s of a shard,
 * cuStreamWaitValue64(seq[slot] >= s), cuMemcpyHtoDAsync of the slot to
 * the chunk's place in the shard's device image, cuStreamWriteValue64(done
 * [slot], s) (ga_doorbell_queue: wait, work, word); then the op's kernels
 * on the image, read in place as the MAPPED path reads a lease, and a
 * completion. The client's thread refills a slot when its done word says
 * so; nothing per chunk reaches the agent's threads. A shard's completion
 * (a host function) runs on the ring's second stream, behind an event
 * recorded after the kernels: a host function blocks the stream it is on
 * until a driver thread has run it, and on the ring's own stream that
 * held the next shard's copies, and so the client's slots, for as long as
 * the host took to get to it. The images live in
 * device memory allocated once per ring, on its first shard (depth images,
 * reused in turn: the stream orders a reuse after the kernels that read
 * it), and freed in stream order when the ring is released. A shard of
 * ring A stalls only A's stream (or the rings sharing it); the agent raises
 * CUDA_DEVICE_MAX_CONNECTIONS so streams waiting on words keep their own
 * hardware queues (device.c).
 *
 * That is the wait shape (--ring-dispatch wait). In the poll shape (the
 * agent's default) the worker prepares a shard (stream, image) and hands
 * it to the polling dispatcher (ring_poll.c), which queues each chunk's
 * copy and done word only once its word is stored, then the kernels and
 * the completion as here: no stream waits on a client's word, so a ring
 * never holds back an unregistration and the reaper's gate has nothing of
 * the rings to force.
 *
 * Closing: the client stores no more words, so the chunks still awaited
 * are rung here (the GPU copies whatever the slots hold) and their shards,
 * from the first chunk never stored on, are answered cancelled. A drop
 * does the same for every shard. The release runs behind the ring's
 * stream; the fault path releases what is left. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sigbus.h"
#include "base/time.h"
#include "cu_call.h"
#include "device_internal.h"
#include "kernels/scan.h"
#include "lease_types/validate.h"
#include "ring_internal.h"
#include "ring_words.h"

/* ---- the table's ops (the caller's thread, no CUDA) ------------------------- */

int cx__ring_open(void *ctx, void *bo, struct ga_exec_ring *r, const struct ga_exec_ring_spec *spec,
                  void **br_p, struct lt_failure *why_p)
{
    struct cx *x = ctx;
    struct cx_owner *o = bo;
    if (spec->seq_dev == 0 || spec->done_dev == 0 || spec->seq_dev % 8 || spec->done_dev % 8)
        return lt_failure_set(why_p, LT_E_BAD_VALUE, 0,
                              "RING_OPEN: the words need 8-aligned device addresses (MAPPED)");
    const uint64_t image = CX_RING_ALIGN(spec->max_shard_bytes) + CX_QUERY_BYTES_MAX;
    if (image > CX_RING_DMEM_MAX / spec->depth)
        return lt_failure_set(why_p, LT_E_LIMIT, 0,
                              "RING_OPEN: %" PRIu32 " images of %" PRIu64
                              " bytes: at most %llu bytes of device memory per ring",
                              spec->depth, image, (unsigned long long)CX_RING_DMEM_MAX);
    struct cx_ring *rg = calloc(1, sizeof(*rg));
    struct cx_cmd *close = calloc(1, sizeof(*close));
    if (!rg || !close) {
        free(rg);
        free(close);
        return lt_failure_set(why_p, LT_E_SYSTEM, 0, "RING_OPEN: out of memory");
    }
    /* Its images' device memory, reserved now and allocated on the first
     * shard: a client cannot take the device from the others. */
    const uint64_t need = image * spec->depth;
    pthread_mutex_lock(&x->mu);
    int rc = cx__devmem_reserve(x, o, need, "RING_OPEN", why_p);
    pthread_mutex_unlock(&x->mu);
    if (rc < 0) {
        free(rg);
        free(close);
        return rc;
    }
    rg->dmem_reserved = need;
    rg->x = x;
    rg->o = o;
    rg->r = r;
    rg->spec = *spec;
    rg->image_bytes = image;
    rg->t_open = base_now_ns();
    close->kind = CX_RING_CLOSE;
    close->slot = UINT32_MAX;
    close->ring = rg;
    rg->close_cmd = close;
    pthread_mutex_lock(&x->mu);
    rg->idx = x->ring_rr++;
    rg->onext = o->rings;
    o->rings = rg;
    rg->xnext = x->rings;
    if (x->rings)
        x->rings->xprev = rg;
    x->rings = rg;
    o->refs++;
    x->ninflight++; /* until released: shutdown waits for it */
    x->st.rings_opened++;
    pthread_mutex_unlock(&x->mu);
    *br_p = rg;
    return 0;
}

int cx__ring_shard(void *ctx, void *br, struct ga_exec_job *job, struct lt_failure *why_p)
{
    struct cx *x = ctx;
    struct cx_ring *rg = br;
    const struct ga_exec_shard_info *sh = ga_exec_job_shard(job);
    struct cx_cmd *cmd = calloc(1, sizeof(*cmd));
    if (!cmd)
        return lt_failure_set(why_p, LT_E_SYSTEM, 0, "RING_SHARD: out of memory");
    cmd->kind = CX_RING_SHARD;
    cmd->job = job;
    cmd->w = *ga_exec_job_work(job);
    cmd->ring = rg;
    cmd->first_seq = sh->first_seq;
    cmd->nseq = sh->chunks;
    cmd->hits_host = sh->hits;
    cmd->image = true;
    cmd->slot = UINT32_MAX;
    /* Planned as the MAPPED path (the kernels read the image in place);
     * its address is known once the image is: an aligned stand-in now. */
    cmd->w.mem_class = LT_CLASS_MAPPED;
    cmd->w.dev = 256;
    uint32_t code = LT_OK;
    char msg[LT_ERROR_MSG_LEN];
    if (cx__op_plan(x, cmd, &code, msg, sizeof msg) < 0) {
        free(cmd);
        return lt_failure_set(why_p, code, 0, "%s", msg);
    }
    int rc = 0;
    pthread_mutex_lock(&x->mu);
    /* Under the polling dispatcher a shard takes its result slot once its
     * chunks are all on the device (cx__disp_slot_take): a shard whose
     * client never stores its words holds none, so no client's unstored
     * rings can take every client's slots. The wait shape queues the
     * kernels with the copies and needs it now. */
    if (cmd->w.op != LT_OP_COPY_H2D && !x->ring_poll)
        rc = cx__slot_take(x, rg->o, cmd, why_p);
    if (rc == 0 && (rc = cx__push(x, rg->o, cmd)) < 0)
        rc = lt_failure_set(why_p, LT_E_SYSTEM, 0,
                            "RING_SHARD: the worker pool refused the work (%s)", strerror(-rc));
    if (rc == 0) {
        x->ninflight++;
        x->st.ring_shards++;
        x->st.ring_chunks += cmd->nseq;
        x->st.ring_bytes += cmd->w.length;
    } else {
        cx__slot_put(x, cmd);
    }
    pthread_mutex_unlock(&x->mu);
    if (rc < 0)
        free(cmd);
    return rc;
}

void cx__ring_close(void *ctx, void *br, struct ga_exec_call *close)
{
    struct cx *x = ctx;
    struct cx_ring *rg = br;
    pthread_mutex_lock(&x->mu);
    rg->close_call = close;
    struct cx_cmd *cmd = rg->close_cmd;
    rg->close_cmd = NULL;
    int rc = cx__push(x, rg->o, cmd);
    if (rc < 0)
        rg->close_cmd = cmd;
    pthread_mutex_unlock(&x->mu);
    if (rc < 0)
        ga__err("CUDA executor: client %#" PRIx64 ": the pool refused a ring's close; it goes "
                "with the client",
                rg->o->id);
}

/* ---- words -------------------------------------------------------------------- */

void cx__ring_pending_add(struct cx *x, struct cx_cmd *cmd)
{
    (void)x;
    struct cx_ring *rg = cmd->ring;
    cmd->rnext = NULL;
    if (rg->pend_tail)
        rg->pend_tail->rnext = cmd;
    else
        rg->pend_head = cmd;
    rg->pend_tail = cmd;
}

static void cx__ring_pending_del(struct cx_ring *rg, struct cx_cmd *cmd)
{
    for (struct cx_cmd **pp = &rg->pend_head; *pp; pp = &(*pp)->rnext) {
        if (*pp != cmd)
            continue;
        *pp = cmd->rnext;
        if (rg->pend_tail == cmd) {
            struct cx_cmd *t = rg->pend_head;
            while (t && t->rnext)
                t = t->rnext;
            rg->pend_tail = t;
        }
        cmd->rnext = NULL;
        return;
    }
}

/* Locked: nobody stores @rg's words any more. From the first shard with a
 * chunk not stored on, shards are cancelled (@all: every one). In the wait
 * shape every chunk they wait for is rung, so the stream runs through.
 * Every pending shard is marked words_out: the polling dispatcher then
 * loads none of its words, queues no copy of a cancelled shard's chunks
 * (their bytes are never used) and counts a stored shard's as stored, so
 * a client that goes on writing its words after its close or drop cannot
 * hold the ring (the wait shape's GPU waits read the words themselves:
 * docs/reliability.md). */
/* The ring's words are its client's memory (an unsealed MAPPED segment,
 * which RING_OPEN demands): every load and store guarded against SIGBUS; a
 * word that faults reads as not rung and takes no store. */
/* Whether some chunk of @cmd is not stored (a word that faults counts as
 * not stored); if so the first such sequence in *@seq_p. One load a slot
 * (ring_words.h): a client choosing 4 KiB slots for a 1 GiB shard does not
 * buy 262144 loads under the executor's lock at each close or watchdog tick. */
static bool cx__shard_first_unstored(const struct cx_ring *rg, const struct cx_cmd *cmd,
                                     uint64_t *seq_p)
{
    const uint64_t n = rg->spec.nslots, end = cmd->first_seq + cmd->nseq;
    const uint64_t slots = cmd->nseq < n ? cmd->nseq : n;
    bool found = false;
    uint64_t first = 0;
    for (uint64_t i = 0; i < slots; i++) {
        const uint64_t s0 = cmd->first_seq + i;
        uint64_t v = 0, s = 0;
        const bool loaded = base_guard_load_u64(&rg->spec.seq[s0 % n], &v) == 0;
        if (cx_slot_first_unstored(v, loaded, s0, end, n, &s) && (!found || s < first)) {
            first = s;
            found = true;
        }
    }
    if (found)
        *seq_p = first;
    return found;
}

/* The wait shape's GPU waits for each chunk's word to reach its sequence:
 * raising each slot's word to the shard's last sequence in that slot rings
 * every wait of the shard there. */
static void cx__shard_ring_words(const struct cx_ring *rg, const struct cx_cmd *cmd)
{
    const uint64_t n = rg->spec.nslots, end = cmd->first_seq + cmd->nseq;
    const uint64_t slots = cmd->nseq < n ? cmd->nseq : n;
    for (uint64_t i = 0; i < slots; i++) {
        const uint64_t s0 = cmd->first_seq + i, last = cx_slot_last_seq(s0, end, n);
        uint64_t *w = &rg->spec.seq[s0 % n], v = 0;
        if (base_guard_load_u64(w, &v) == 0 && (int64_t)(v - last) < 0)
            (void)base_guard_store_u64(w, last);
    }
}

static void cx__ring_ring_out(struct cx_ring *rg, bool all)
{
    const bool gpu_waits = !rg->x->ring_poll; /* the wait shape's GPU reads the words */
    bool cancel = all;
    for (struct cx_cmd *cmd = rg->pend_head; cmd; cmd = cmd->rnext) {
        uint64_t s = 0;
        if (!cancel && cx__shard_first_unstored(rg, cmd, &s))
            cancel = true;
        if (cancel)
            cmd->cancelled = true;
        if (cancel && gpu_waits)
            cx__shard_ring_words(rg, cmd);
        /* After cancelled: the dispatcher reads that once it sees this. */
        __atomic_store_n(&cmd->words_out, true, __ATOMIC_RELEASE);
    }
}

/* Locked. The sequence of the first chunk @rg's pending shards await
 * whose word is not stored (a load that faults counts as not stored), and
 * its shard; false when none. */
static bool cx__ring_first_unstored(struct cx_ring *rg, uint64_t *seq_p, struct cx_cmd **cmd_p)
{
    for (struct cx_cmd *cmd = rg->pend_head; cmd; cmd = cmd->rnext) {
        if (cmd->cancelled || cmd->forced)
            continue;
        if (cx__shard_first_unstored(rg, cmd, seq_p)) {
            *cmd_p = cmd;
            return true;
        }
    }
    return false;
}

/* A ring streaming well stores its words within ms of the GPU's need, so
 * the stall is measured from when its first unstored word last changed:
 * a ring making progress never looks stalled for long. */
uint64_t cx__rings_stalled_ns(struct cx *x, uint64_t now)
{
    uint64_t oldest = 0;
    if (x->ring_poll)
        return 0; /* only stored chunks reach the GPU: no ring waits there on a word */
    for (struct cx_ring *rg = x->rings; rg; rg = rg->xnext) {
        uint64_t s = 0;
        struct cx_cmd *cmd = NULL;
        if (rg->released || !cx__ring_first_unstored(rg, &s, &cmd)) {
            rg->stall_since = 0;
            continue;
        }
        if (!rg->stall_since || rg->stall_seq != s) {
            rg->stall_seq = s;
            rg->stall_since = now;
        }
        if (now - rg->stall_since > oldest)
            oldest = now - rg->stall_since;
    }
    return oldest;
}

uint32_t cx__rings_force(struct cx *x, uint64_t now, uint64_t older_ns, const char *why)
{
    uint32_t n = 0;
    if (x->ring_poll)
        return 0; /* nothing of a ring waits on the GPU: an unregistration never waits for one */
    for (struct cx_ring *rg = x->rings; rg; rg = rg->xnext) {
        uint64_t s = 0;
        struct cx_cmd *first = NULL;
        if (rg->released || !rg->stall_since || now - rg->stall_since < older_ns ||
            !cx__ring_first_unstored(rg, &s, &first))
            continue;
        /* From the stalled shard on, every shard waits for it: all forced. */
        uint64_t age_ms = (now - rg->stall_since) / 1000000u;
        uint32_t shards = 0;
        for (struct cx_cmd *cmd = first; cmd; cmd = cmd->rnext) {
            if (cmd->cancelled || cmd->forced)
                continue;
            cmd->forced = true;
            shards++;
            cx__shard_ring_words(rg, cmd);
        }
        rg->stall_since = 0;
        n += shards;
        ga__err("CUDA executor: client %#" PRIx64 ": the agent had to store its ring's chunk "
                "words from seq %" PRIu64 " (unstored for %" PRIu64 " ms): %s; %" PRIu32
                " shard(s) answered BUSY",
                rg->o->id, s, age_ms, why, shards);
    }
    return n;
}

void cx__rings_cancel(struct cx *x, struct cx_owner *o)
{
    (void)x;
    for (struct cx_ring *rg = o->rings; rg; rg = rg->onext)
        cx__ring_ring_out(rg, true);
}

/* ---- issuing (a worker, the context current) ------------------------------------ */

static int cx__ring_stream(struct cx *x, struct cx_ring *rg)
{
    if (rg->st)
        return 0;
    /* The completions' stream and event first: st set means all three are. */
    int rc = rg->cst ? 0 : ga_stream_new(x->streams, &rg->cst);
    if (rc == 0 && !rg->done_ev)
        rc = ga_event_new(x->streams, 0, &rg->done_ev);
    if (rc == 0 && x->ring_poll && !rg->gate_ev)
        rc = ga_event_new(x->streams, 0, &rg->gate_ev);
    if (rc < 0)
        return rc; /* what was made goes with the ring */
    if (x->nring_streams == 0) {
        rc = ga_stream_new(x->streams, &rg->st);
        if (rc == 0)
            rg->own_stream = true;
        return rc;
    }
    /* Shared streams are made on first need by whichever worker gets there. */
    uint32_t k = rg->idx % x->nring_streams;
    pthread_mutex_lock(&x->mu);
    CUstream st = x->ring_streams[k];
    pthread_mutex_unlock(&x->mu);
    if (!st) {
        CUstream made = NULL;
        rc = ga_stream_new(x->streams, &made);
        if (rc < 0)
            return rc;
        pthread_mutex_lock(&x->mu);
        if (!x->ring_streams[k]) {
            x->ring_streams[k] = made;
            made = NULL;
        }
        st = x->ring_streams[k];
        pthread_mutex_unlock(&x->mu);
        /* Another worker was first. Freed after the lock: a driver call can
         * wait behind a pending unregistration, whose watchdog needs x->mu. */
        if (made)
            ga_stream_free(x->streams, made);
    }
    rg->st = st;
    return 0;
}

/* @fn(@arg) on the completion thread once @rg's stream has passed what is
 * queued on it now: on the ring's completions' stream, so the ring's own
 * stream goes on at once to what is queued after. */
static int cx__ring_when_done(struct cx *x, struct cx_ring *rg, void (*fn)(void *), void *arg)
{
    int rc = ga_event_record(x->streams, rg->done_ev, rg->st);
    if (rc == 0)
        rc = ga_event_wait(x->streams, rg->cst, rg->done_ev);
    if (rc == 0)
        rc = ga_stream_when_done(x->streams, rg->cst, fn, arg);
    return rc;
}

static int cx__ring_copy(void *arg, struct CUstream_st *stream)
{
    const struct cx_ring_copy *c = arg;
    return GA_CU(cuMemcpyHtoDAsync(c->dst, c->src, (size_t)c->len, stream));
}

/* A stream host function: the f16 query, copied back from the image into
 * the ring's pinned scratch, widened to f32 behind it (no CUDA here). */
static void cx__ring_widen(void *arg)
{
    const struct cx_piece *p = arg;
    float *out = p->dst;
    const unsigned char *in = p->src;
    for (uint64_t i = 0; i < p->len / 2; i++) {
        uint16_t h;
        memcpy(&h, in + 2 * i, 2);
        out[i] = kn_f16_to_f32(h);
    }
}

/* The f16 query at @img + query_offset as f32 at @to, through the scratch. */
static int cx__ring_query_f16(struct cx *x, struct cx_ring *rg, struct cx_cmd *cmd, CUdeviceptr img,
                              CUdeviceptr to)
{
    const struct lt_op_vector_scan *a = &cmd->w.args.scan;
    if (!rg->scratch) {
        pthread_mutex_lock(&x->mu);
        struct cx_scratch *sc = x->scratch_free;
        if (sc)
            x->scratch_free = sc->next;
        pthread_mutex_unlock(&x->mu);
        if (!sc) {
            sc = calloc(1, sizeof(*sc));
            if (!sc)
                return -ENOMEM;
            int rc = GA_CU(cuMemHostAlloc(&sc->host, CX_SCRATCH_BYTES, 0));
            if (rc < 0) {
                free(sc);
                return rc;
            }
            pthread_mutex_lock(&x->mu);
            sc->all_next = x->scratch_all; /* freed at destroy */
            x->scratch_all = sc;
            pthread_mutex_unlock(&x->mu);
        }
        rg->scratch = sc;
    }
    cmd->pieces = calloc(1, sizeof(*cmd->pieces));
    if (!cmd->pieces)
        return -ENOMEM;
    cmd->piece_cap = cmd->npieces = 1;
    unsigned char *h16 = rg->scratch->host;
    float *h32 = (float *)(void *)(h16 + CX_QUERY_BYTES_MAX / 2);
    const uint64_t n16 = (uint64_t)a->dim * 2;
    *cmd->pieces = (struct cx_piece){.dst = h32, .src = h16, .len = n16, .f16 = 1};
    int rc = GA_CU(cuMemcpyDtoHAsync(h16, img + a->query_offset, (size_t)n16, rg->st));
    if (rc == 0)
        rc = GA_CU(cuLaunchHostFunc(rg->st, cx__ring_widen, cmd->pieces));
    if (rc == 0)
        rc = GA_CU(cuMemcpyHtoDAsync(to, h32, (size_t)n16 * 2, rg->st));
    return rc;
}

/* The chunks' copies into the image at @img, each behind its word. */
static int cx__ring_chunks(struct cx *x, struct cx_ring *rg, const struct cx_cmd *cmd,
                           CUdeviceptr img)
{
    const uint64_t C = rg->spec.slot_bytes;
    for (uint64_t i = 0; i < cmd->nseq; i++) {
        const uint64_t s = cmd->first_seq + i;
        const uint32_t slot = (uint32_t)(s % rg->spec.nslots);
        const uint64_t n = cmd->w.length - i * C < C ? cmd->w.length - i * C : C;
        struct cx_ring_copy c = {
            .dst = img + i * C, .src = rg->spec.slots + (uint64_t)slot * C, .len = n};
        struct ga_doorbell_req req = {
            .bell_dev = rg->spec.seq_dev + 8ull * slot,
            .seq = s,
            .work = cx__ring_copy,
            .work_arg = &c,
            .done_dev = rg->spec.done_dev + 8ull * slot,
        };
        int rc = ga_doorbell_queue(x->streams, rg->st, &req);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* On the completion thread: the stream passed the shard. */
static void cx__ring_shard_done(void *arg)
{
    struct cx_cmd *cmd = arg;
    struct cx *x = cmd->x;
    pthread_mutex_lock(&x->mu);
    cx__ring_pending_del(cmd->ring, cmd);
    pthread_mutex_unlock(&x->mu);
    if (cx__cmd_answer(x, cmd, LT_OK, NULL, NULL))
        cx__cmd_free(x, cmd);
}

static void cx__ring_shard_queue(struct cx *x, struct cx_cmd *cmd);

void cx__ring_shard_issue(struct cx *x, struct cx_cmd *cmd)
{
    struct cx_ring *rg = cmd->ring;
    const uint64_t t0 = base_now_ns();
    cx__ring_shard_queue(x, cmd);
    /* @cmd may be answered and freed by now; the ring is the worker's. */
    const uint64_t t1 = base_now_ns();
    rg->issue_ns += t1 - t0;
    if (!rg->t_first_issued)
        rg->t_first_issued = t1;
}

/* Queues @cmd's chunks, kernels and completion on its ring's stream; in
 * the poll shape the dispatcher queues the chunks, and then the rest. */
static void cx__ring_shard_queue(struct cx *x, struct cx_cmd *cmd)
{
    struct cx_ring *rg = cmd->ring;
    int rc = cx__ring_stream(x, rg);
    if (rc == 0 && !rg->dmem)
        rc = GA_CU(cuMemAllocAsync(&rg->dmem, (size_t)(rg->image_bytes * rg->spec.depth), rg->st));
    if (rc < 0) {
        /* Nothing was queued: no chunk is copied and no done word written,
         * so the client's thread waits for a slot; the job sees the error
         * and closes the ring, which rings the words. */
        ga__err("CUDA executor: client %#" PRIx64 ": a ring's %s could not be made (%s)",
                cmd->o->id, rg->st ? "device memory" : "stream", strerror(-rc));
        pthread_mutex_lock(&x->mu);
        cx__ring_pending_del(rg, cmd);
        pthread_mutex_unlock(&x->mu);
        if (cx__cmd_answer(x, cmd, LT_E_SYSTEM, "the ring's stream or memory", NULL))
            cx__cmd_free(x, cmd);
        return;
    }
    const CUdeviceptr img = rg->dmem + (rg->shards_issued++ % rg->spec.depth) * rg->image_bytes;
    cmd->w.dev = img;
    rg->chunks_issued += cmd->nseq;
    if (x->ring_poll) {
        cx__disp_shard(x, cmd);
        return;
    }
    cx__ring_shard_finish(x, cmd, cx__ring_chunks(x, rg, cmd, img));
}

void cx__ring_shard_finish(struct cx *x, struct cx_cmd *cmd, int rc)
{
    struct cx_ring *rg = cmd->ring;
    const CUdeviceptr img = cmd->w.dev;
    /* A cancelled shard under the polling dispatcher took no result slot
     * (cx__disp_slot_take): its kernels do not run; it is answered
     * cancelled. */
    const bool run = cmd->w.op == LT_OP_COPY_H2D || cmd->slot != UINT32_MAX;
    if (rc == 0 && run && cmd->w.op == LT_OP_VECTOR_SCAN) {
        if (cmd->w.args.scan.elem == LT_ELEM_F32) {
            cmd->query_dev = img + cmd->w.args.scan.query_offset;
        } else {
            cmd->query_dev = img + CX_RING_ALIGN(rg->spec.max_shard_bytes);
            rc = cx__ring_query_f16(x, rg, cmd, img, cmd->query_dev);
        }
    }
    if (rc == 0 && run)
        rc = cx__op_queue_device(x, cmd, rg->st);
    if (rc < 0)
        ga__err("CUDA executor: client %#" PRIx64 ": a ring's shard could not be queued (%s); it "
                "completes with an error once the stream passes what was queued",
                cmd->o->id, strerror(-rc));
    cmd->rc = rc;
    rc = cx__ring_when_done(x, rg, cx__ring_shard_done, cmd);
    if (rc == 0)
        return;
    if (rc == -EIO || rc == -ENODEV) {
        cx__fault(x, rc);
        return;
    }
    pthread_mutex_lock(&x->mu);
    cx__ring_pending_del(rg, cmd);
    pthread_mutex_unlock(&x->mu);
    if (cx__cmd_answer(x, cmd, LT_E_SYSTEM, "the completion could not be queued", NULL))
        cx__cmd_free(x, cmd);
}

/* ---- release ---------------------------------------------------------------------- */

/* The ring's work is done: it goes (the completion thread or a worker; the
 * fault path keeps the memory, which a late completion may still read). */
static void cx__ring_let_go(struct cx_ring *rg, bool free_it)
{
    struct cx *x = rg->x;
    struct cx_owner *o = rg->o;
    pthread_mutex_lock(&x->mu);
    if (rg->released) {
        pthread_mutex_unlock(&x->mu);
        return;
    }
    rg->released = true;
    cx__devmem_release(x, o, rg->dmem_reserved);
    x->st.ring_copies += rg->copies;
    x->st.ring_join_lapses += rg->join_lapses;
    for (struct cx_ring **pp = &o->rings; *pp; pp = &(*pp)->onext)
        if (*pp == rg) {
            *pp = rg->onext;
            break;
        }
    if (rg->xprev)
        rg->xprev->xnext = rg->xnext;
    else
        x->rings = rg->xnext;
    if (rg->xnext)
        rg->xnext->xprev = rg->xprev;
    if (rg->scratch) {
        rg->scratch->next = x->scratch_free;
        x->scratch_free = rg->scratch;
    }
    struct ga_exec_call *close = rg->close_call;
    pthread_mutex_unlock(&x->mu);
    if (!x->faulted) {
        if (rg->own_stream)
            ga_stream_free(x->streams, rg->st);
        ga_stream_free(x->streams, rg->cst);
        ga_event_free(x->streams, rg->done_ev);
        if (rg->gate_ev)
            ga_event_free(x->streams, rg->gate_ev);
    }
    if (rg->shards_issued)
        ga__debug("CUDA executor: client %#" PRIx64 ": ring released: %" PRIu64
                  " shard(s), %" PRIu64
                  " chunk(s) queued in %.3f ms of worker time (%.1f us a shard), %" PRIu64
                  " copies by the dispatcher; the first queued %.3f ms after the open",
                  o->id, rg->shards_issued, rg->chunks_issued, (double)rg->issue_ns / 1e6,
                  (double)rg->issue_ns / 1e3 / (double)rg->shards_issued, rg->copies,
                  (double)(rg->t_first_issued - rg->t_open) / 1e6);
    ga_exec_ring_released(rg->r, close);
    pthread_mutex_lock(&x->mu);
    cx__owner_unref(x, o);
    if (--x->ninflight == 0)
        pthread_cond_broadcast(&x->idle_cv);
    pthread_mutex_unlock(&x->mu);
    if (!free_it)
        return;
    free(rg->close_cmd); /* never queued: a drop released the ring */
    free(rg);
}

static void cx__ring_released(void *arg)
{
    cx__ring_let_go(arg, true);
}

/* Queues @rg's release behind its work (a worker). */
static void cx__ring_release_queue(struct cx *x, struct cx_ring *rg)
{
    pthread_mutex_lock(&x->mu);
    bool already = rg->releasing || rg->released;
    rg->releasing = true;
    pthread_mutex_unlock(&x->mu);
    if (already)
        return;
    if (!rg->st) {
        cx__ring_released(rg); /* it never queued anything */
        return;
    }
    if (x->ring_poll)
        cx__disp_release(x, rg); /* behind the chunks the dispatcher has yet to queue */
    else
        cx__ring_release_now(x, rg);
}

void cx__ring_release_now(struct cx *x, struct cx_ring *rg)
{
    if (rg->dmem)
        GA_CU(cuMemFreeAsync(rg->dmem, rg->st));
    /* Behind every completion as well: they use the ring. */
    if (cx__ring_when_done(x, rg, cx__ring_released, rg) < 0)
        cx__ring_released(rg); /* the device is gone: nothing will run behind it */
}

void cx__ring_close_issue(struct cx *x, struct cx_ring *rg)
{
    pthread_mutex_lock(&x->mu);
    cx__ring_ring_out(rg, false);
    pthread_mutex_unlock(&x->mu);
    cx__ring_release_queue(x, rg);
}

void cx__rings_release(struct cx *x, struct cx_owner *o)
{
    for (;;) {
        struct cx_ring *pick = NULL;
        pthread_mutex_lock(&x->mu);
        for (struct cx_ring *rg = o->rings; rg && !pick; rg = rg->onext)
            if (!rg->releasing && !rg->released)
                pick = rg;
        pthread_mutex_unlock(&x->mu);
        if (!pick)
            return;
        cx__ring_release_queue(x, pick);
    }
}

void cx__rings_fault(struct cx *x)
{
    for (;;) {
        pthread_mutex_lock(&x->mu);
        struct cx_ring *rg = x->rings;
        pthread_mutex_unlock(&x->mu);
        if (!rg)
            return;
        /* The context is gone: its stream will run nothing more. */
        cx__ring_let_go(rg, false);
    }
}
