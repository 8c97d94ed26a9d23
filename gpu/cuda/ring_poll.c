/* The polling dispatcher of the CUDA backend's rings (lease-agent
 * --ring-dispatch poll; docs/streaming.md, "Who queues the copies").
 *
 * In the wait shape every chunk's copy is queued ahead behind a
 * cuStreamWaitValue64 on its sequence word, so the GPU polls the client's
 * words and each ring's stream stands still until its next chunk is
 * stored. Here one agent thread polls them instead: a worker prepares a
 * shard (the ring's stream and image) and hands it over; the thread loads
 * the sequence words of the chunk each handed-over shard waits for next,
 * and once chunks are stored it queues their copy (stored chunks whose
 * slots and places in the image are adjacent joined into one, up to
 * CX_DISP_JOIN_MAX) and their done words on the ring's stream. After a
 * shard's last chunk it queues the shard's finish (kernels, completion)
 * as the worker would have. Only stored chunks reach the GPU, so no stream
 * ever waits on a word a client controls.
 *
 * A thread stores its next chunk long after the one before (the time a
 * chunk's read takes), and the thread sweeps far more often, so stored
 * chunks rarely meet and nearly every copy would be one chunk. With
 * x->ring_join > 1 (--ring-join) a stored chunk waits for its neighbour,
 * up to GA_CUDA_RING_JOIN_WAIT_NS, where the neighbour belongs to the same
 * shard in the next slot; the copies are then that many chunks long,
 * which the copy engine moves faster (docs/streaming.md, "Joining
 * copies"). The wait is bounded, so a client that never stores its next
 * word only slows itself, by at most that wait per chunk.
 *
 * A client that stores its words without waiting for its done words would
 * have the thread queue every chunk of its shards at once, and a shard may
 * have millions of 4 KiB chunks: the driver's queue of the ring's (shared)
 * stream would fill and the thread block behind it, every other ring with
 * it. So each ring has a gate, an event recorded after a copy: while it
 * has not completed, no chunk more than two rings' worth of slots past it
 * is queued. A client that waits for its done words never meets the gate
 * closed (its copies are done before it stores further), and it costs an
 * event record and query per two rings' worth of chunks.
 *
 * The words are the client's memory (an unsealed MAPPED segment): every
 * load is guarded, and one that faults reads as not stored. Once the ring
 * is closed or its owner dropped, its shards are marked words_out and the
 * dispatcher loads none of their words: it copies whatever the slots hold
 * and the shards run through, even while a client gone from the socket
 * keeps rewriting its words. A ring's release waits here until every shard
 * handed over before it is queued.
 *
 * The thread sleeps on a condition variable while no shard is handed
 * over. While one waits for its words it spins for CX_DISP_SPIN_NS after
 * its last progress, then sleeps 2, 4 ... CX_DISP_SLEEP_MAX_NS (its timer
 * slack set to 1 us, so a sleep is about as long as asked), and once no
 * chunk came for CX_DISP_IDLE_NS, up to CX_DISP_IDLE_SLEEP_NS: a client
 * that leaves a shard unstored costs the agent about a thousand wake-ups
 * a second, and a ring that starts streaming again waits at most that.
 * A ring whose next chunk has not come for CX_DISP_RING_IDLE_NS is looked
 * at once every CX_DISP_RING_LOOK_NS only, so rings left waiting by their
 * clients cost the rings that stream little: a sweep skips them without
 * a load, and looks at a ring with nothing stored without dropping the
 * lock. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "base/sigbus.h"
#include "base/time.h"
#include "cu_call.h"
#include "ga_internal.h"
#include "ring_internal.h"

#define CX_DISP_JOIN_MAX 4u            /* stored chunks joined into one copy */
#define CX_DISP_SPIN_NS 20000u         /* spinning after the last progress */
#define CX_DISP_SLEEP_MAX_NS 100000u   /* the longest sleep while rings stream */
#define CX_DISP_IDLE_NS 10000000u      /* no chunk for this long: idle */
#define CX_DISP_IDLE_SLEEP_NS 1000000u /* the longest sleep when idle */
#define CX_DISP_TIMER_SLACK_NS 1000ul  /* this thread's */
#define CX_DISP_RING_IDLE_NS 10000000u /* a ring's next chunk not stored this long: */
#define CX_DISP_RING_LOOK_NS 1000000u  /* looked at this often */

static inline void cx__disp_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* How many chunks of @cmd from index @i on are stored and may go in one
 * copy: adjacent slots (the ring does not wrap between them), at most
 * CX_DISP_JOIN_MAX. A word reads as stored once it is at or past the
 * chunk's sequence, as cuStreamWaitValue64's GEQ compares (wrapping). */
static uint64_t cx__disp_stored(const struct cx_ring *rg, const struct cx_cmd *cmd, uint64_t i)
{
    const uint64_t N = rg->spec.nslots;
    const bool out = __atomic_load_n(&cmd->words_out, __ATOMIC_ACQUIRE);
    uint64_t n = 0;
    while (n < CX_DISP_JOIN_MAX && i + n < cmd->nseq) {
        const uint64_t s = cmd->first_seq + i + n;
        if (n > 0 && s % N == 0)
            break; /* the next slot is the ring's first: not adjacent */
        uint64_t v = 0;
        if (!out && (base_guard_load_u64(&rg->spec.seq[s % N], &v) < 0 || (int64_t)(v - s) < 0))
            break;
        n++;
    }
    return n;
}

/* Whether chunk @s of @rg may be queued: the gate is not armed, @s is
 * within two rings' worth of slots past it, or its event has completed
 * (which disarms it; an error too: the copies' own calls then report). */
static bool cx__disp_gate_open(struct cx_ring *rg, uint64_t s)
{
    if (!rg->gate_armed || s - rg->gate_seq <= 2ull * rg->spec.nslots)
        return true;
    if (cuEventQuery(rg->gate_ev) == CUDA_ERROR_NOT_READY)
        return false;
    rg->gate_armed = false;
    return true;
}

/* Whether the @n stored chunks of @cmd from index @i on wait for their
 * neighbour to join them (x->ring_join): fewer than the join asks for,
 * the ring has slots for two joined copies (else its thread, with every
 * slot held, would wait for the very copy that waits for it), the next
 * chunk is the shard's and sits in the next slot, and the first has not
 * waited GA_CUDA_RING_JOIN_WAIT_NS yet. The wait only holds a chunk whose
 * thread is reading the next one; while the copy side is the limit, the
 * copy would have waited in the engine's queue that long. */
static bool cx__disp_join_waits(struct cx *x, struct cx_ring *rg, const struct cx_cmd *cmd,
                                uint64_t i, uint64_t n, uint64_t now)
{
    const uint64_t s = cmd->first_seq + i;
    if (n >= x->ring_join || rg->spec.nslots < 2ull * x->ring_join || i + n >= cmd->nseq ||
        (s + n) % rg->spec.nslots == 0 ||
        __atomic_load_n(&cmd->words_out, __ATOMIC_ACQUIRE))
        return false;
    if (rg->join_seq != s) {
        rg->join_seq = s;
        rg->join_since = now;
        return true;
    }
    if (now - rg->join_since < GA_CUDA_RING_JOIN_WAIT_NS)
        return true;
    rg->join_lapses++;
    return false;
}

/* The result slot @cmd's kernels write to, taken now that its chunks are
 * all on the device; a cancelled shard runs none and needs none. Returns
 * whether @cmd may go on (false: every slot is taken; try again). */
static bool cx__disp_slot_take(struct cx *x, struct cx_cmd *cmd)
{
    if (cmd->w.op == LT_OP_COPY_H2D || cmd->slot != UINT32_MAX ||
        (__atomic_load_n(&cmd->words_out, __ATOMIC_ACQUIRE) && cmd->cancelled))
        return true;
    pthread_mutex_lock(&x->mu);
    const bool got = cx__slot_take(x, cmd->o, cmd, NULL) == 0;
    if (!got && !cmd->slot_waited) {
        cmd->slot_waited = true;
        x->st.ring_slot_waits++;
    }
    pthread_mutex_unlock(&x->mu);
    return got;
}

/* Queues the chunks of @cmd that are stored, from the first not yet queued
 * on, at most a ring's worth (a client that stores words ahead of its
 * done words gets no more of a sweep than one that streams). Returns how
 * many it queued; *rc_p: a call's error (the shard is then finished with
 * it, its remaining chunks not copied). */
static uint64_t cx__disp_chunks(struct cx *x, struct cx_ring *rg, struct cx_cmd *cmd, uint64_t now,
                                int *rc_p)
{
    const uint64_t C = rg->spec.slot_bytes, N = rg->spec.nslots;
    if (__atomic_load_n(&cmd->words_out, __ATOMIC_ACQUIRE) && cmd->cancelled) {
        /* Closed or dropped before it was all stored: answered cancelled,
         * so its remaining chunks are not copied at all. */
        const uint64_t left = cmd->nseq - cmd->dq_next;
        cmd->dq_next = cmd->nseq;
        return left;
    }
    uint64_t queued = 0, n;
    while (queued < N && cmd->dq_next < cmd->nseq &&
           cx__disp_gate_open(rg, cmd->first_seq + cmd->dq_next) &&
           (n = cx__disp_stored(rg, cmd, cmd->dq_next)) > 0 &&
           !cx__disp_join_waits(x, rg, cmd, cmd->dq_next, n, now)) {
        const uint64_t i = cmd->dq_next, s = cmd->first_seq + i, slot = s % N;
        const uint64_t left = cmd->w.length - i * C, len = left < n * C ? left : n * C;
        int rc = GA_CU(
            cuMemcpyHtoDAsync(cmd->w.dev + i * C, rg->spec.slots + slot * C, (size_t)len, rg->st));
        /* The default write flushes the copy's memory writes before the word. */
        for (uint64_t k = 0; k < n && rc == 0; k++)
            rc = GA_CU(cuStreamWriteValue64(rg->st, rg->spec.done_dev + 8 * (slot + k), s + k,
                                            CU_STREAM_WRITE_VALUE_DEFAULT));
        if (rc == 0 && !rg->gate_armed && (rc = GA_CU(cuEventRecord(rg->gate_ev, rg->st))) == 0) {
            rg->gate_armed = true;
            rg->gate_seq = s + n - 1;
        }
        if (rc < 0) {
            *rc_p = rc;
            cmd->dq_next = cmd->nseq;
            return queued;
        }
        rg->copies++;
        cmd->dq_next += n;
        queued += n;
    }
    return queued;
}

/* One sweep over the rings with shards handed over: what is stored is
 * queued, finished shards are finished, drained rings released. Locked
 * (disp_mu) on entry and return; unlocked around the CUDA calls. Returns
 * whether any chunk was queued. */
static bool cx__disp_sweep(struct cx *x, uint64_t now)
{
    bool progress = false;
    struct cx_ring **pp = &x->disp_rings;
    while (*pp) {
        struct cx_ring *rg = *pp;
        struct cx_cmd *cmd = rg->dq_head;
        if (!cmd) {
            /* Drained: off the list (a new shard puts it back), released
             * when its close or drop asked for that. */
            *pp = rg->dnext;
            rg->dlisted = false;
            const bool release = rg->drelease;
            rg->drelease = false;
            if (release) {
                pthread_mutex_unlock(&x->disp_mu);
                cx__ring_release_now(x, rg);
                pthread_mutex_lock(&x->disp_mu);
            }
            continue;
        }
        if (rg->dlook_at > now) {
            pp = &rg->dnext; /* quiet for long: not yet */
            continue;
        }
        if (cmd->dq_next < cmd->nseq && cx__disp_stored(rg, cmd, cmd->dq_next) == 0) {
            if (!rg->dquiet_since)
                rg->dquiet_since = now;
            else if (now - rg->dquiet_since > CX_DISP_RING_IDLE_NS)
                rg->dlook_at = now + CX_DISP_RING_LOOK_NS;
            pp = &rg->dnext;
            continue;
        }
        rg->dquiet_since = rg->dlook_at = 0;
        /* Only this thread takes shards off a ring or rings off the list,
         * so @rg and @cmd stay while the lock is dropped. */
        pthread_mutex_unlock(&x->disp_mu);
        int rc = 0;
        if (cx__disp_chunks(x, rg, cmd, now, &rc) > 0)
            progress = true;
        const bool all = cmd->dq_next == cmd->nseq;
        /* A shard without its result slot waits on the ring, its chunks on
         * the device, until another shard's answer frees one. */
        const bool slot_wait = all && rc == 0 && !cx__disp_slot_take(x, cmd);
        pthread_mutex_lock(&x->disp_mu);
        if (!all || slot_wait) {
            pp = &rg->dnext;
            continue;
        }
        rg->dq_head = cmd->dnext;
        if (!rg->dq_head)
            rg->dq_tail = NULL;
        pthread_mutex_unlock(&x->disp_mu);
        /* @cmd may be answered and freed once this returns. */
        cx__ring_shard_finish(x, cmd, rc);
        pthread_mutex_lock(&x->disp_mu);
        /* The ring stays at *pp: its next shard, or its drained state,
         * is looked at on this same pass. */
    }
    return progress;
}

/* After a fault nothing is queued any more: the fault path answered the
 * shards and let the rings go (their memory stays). */
static void cx__disp_forget(struct cx *x)
{
    for (struct cx_ring *rg = x->disp_rings, *n; rg; rg = n) {
        n = rg->dnext;
        rg->dq_head = rg->dq_tail = NULL;
        rg->dlisted = rg->drelease = false;
        rg->dnext = NULL;
    }
    x->disp_rings = NULL;
}

/* Read on every sweep: without x->mu, which the completions take. */
static bool cx__disp_faulted(struct cx *x)
{
    return __atomic_load_n(&x->faulted, __ATOMIC_ACQUIRE);
}

static void *cx__disp_main(void *arg)
{
    struct cx *x = arg;
    (void)prctl(PR_SET_TIMERSLACK, CX_DISP_TIMER_SLACK_NS, 0, 0, 0);
    int rc = ga_device_make_current(x->dev);
    if (rc < 0)
        ga__err("CUDA executor: the ring dispatcher could not make the context current (%s); "
                "its calls will fail and the shards be answered with the error",
                strerror(-rc));
    uint64_t last_progress = base_now_ns(), sleep_ns = 0;
    pthread_mutex_lock(&x->disp_mu);
    for (;;) {
        while (!x->disp_rings && !x->disp_stop)
            pthread_cond_wait(&x->disp_cv, &x->disp_mu);
        if (!x->disp_rings)
            break; /* stopping, and nothing is left */
        if (cx__disp_faulted(x)) {
            cx__disp_forget(x);
            continue;
        }
        if (cx__disp_sweep(x, base_now_ns())) {
            last_progress = base_now_ns();
            sleep_ns = 0;
            continue;
        }
        if (!x->disp_rings)
            continue;
        pthread_mutex_unlock(&x->disp_mu);
        const uint64_t quiet = base_now_ns() - last_progress;
        if (quiet < CX_DISP_SPIN_NS) {
            for (int i = 0; i < 32; i++)
                cx__disp_relax();
        } else {
            const uint64_t most =
                quiet < CX_DISP_IDLE_NS ? CX_DISP_SLEEP_MAX_NS : CX_DISP_IDLE_SLEEP_NS;
            sleep_ns = sleep_ns ? sleep_ns * 2 : 2000;
            if (sleep_ns > most)
                sleep_ns = most;
            struct timespec ts = {0, (long)sleep_ns};
            nanosleep(&ts, NULL);
        }
        pthread_mutex_lock(&x->disp_mu);
    }
    pthread_mutex_unlock(&x->disp_mu);
    return NULL;
}

int cx__disp_start(struct cx *x)
{
    int rc = -pthread_create(&x->disp, NULL, cx__disp_main, x);
    if (rc == 0)
        x->disp_started = true;
    return rc;
}

void cx__disp_stop(struct cx *x)
{
    if (!x->disp_started)
        return;
    pthread_mutex_lock(&x->disp_mu);
    x->disp_stop = true;
    pthread_cond_signal(&x->disp_cv);
    pthread_mutex_unlock(&x->disp_mu);
    pthread_join(x->disp, NULL);
    x->disp_started = false;
}

/* Locked (disp_mu): @rg on the list, the thread woken. */
static void cx__disp_list(struct cx *x, struct cx_ring *rg)
{
    if (!rg->dlisted) {
        rg->dlisted = true;
        rg->dnext = x->disp_rings;
        x->disp_rings = rg;
    }
    pthread_cond_signal(&x->disp_cv);
}

void cx__disp_shard(struct cx *x, struct cx_cmd *cmd)
{
    struct cx_ring *rg = cmd->ring;
    cmd->dq_next = 0;
    cmd->dnext = NULL;
    pthread_mutex_lock(&x->disp_mu);
    if (rg->dq_tail)
        rg->dq_tail->dnext = cmd;
    else
        rg->dq_head = cmd;
    rg->dq_tail = cmd;
    rg->dquiet_since = rg->dlook_at = 0;
    cx__disp_list(x, rg);
    pthread_mutex_unlock(&x->disp_mu);
}

void cx__disp_release(struct cx *x, struct cx_ring *rg)
{
    pthread_mutex_lock(&x->disp_mu);
    rg->drelease = true;
    cx__disp_list(x, rg);
    pthread_mutex_unlock(&x->disp_mu);
}
