/* The bell poller: no GPU stream waits on a word a client can write. A
 * bell-gated command's stream waits (cuStreamWaitValue64 >= 1) on the
 * agent's own word for its result slot in x->bell_words, pinned and mapped;
 * this thread loads each watched client's bell (guarded: it is client
 * memory) and, once it is rung, stores the agent word. A drop, a
 * --bell-timeout release and the stop store it too, and nothing a client
 * writes afterwards can take the release back (a client that zeroed its
 * bell again after the agent stored it there used to keep the GPU waiting,
 * and every unregistration behind it: docs/reliability.md).
 *
 * The thread sleeps on a condition variable while nothing is watched.
 * While something is, it spins for BELL_SPIN_NS after its last release,
 * then sleeps 2, 4 ... BELL_SLEEP_MAX_NS (its timer slack set to 1 us), so
 * a rung bell is seen within about that, against the GPU's own polling of a
 * mapped word (MEASURED.md: 5 us mean). */
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "backend_cuda.h"
#include "base/sigbus.h"
#include "base/time.h"

#define BELL_SPIN_NS 20000u      /* spinning after the last release */
#define BELL_SLEEP_MAX_NS 20000u /* the longest sleep while bells are watched */
#define BELL_TIMER_SLACK_NS 1000u
#define BELL_BATCH 128u /* bells looked at under one hold of bell_mu */

CUdeviceptr cx__bell_word_dev(const struct cx *x, const struct cx_cmd *cmd)
{
    return x->bell_words_dev + (CUdeviceptr)cmd->slot * 8u;
}

bool cx__bell_held(const struct cx *x, const struct cx_cmd *cmd)
{
    return cmd->slot != UINT32_MAX &&
           __atomic_load_n(&x->bell_words[cmd->slot], __ATOMIC_ACQUIRE) == 0;
}

/* Locked (bell_mu). */
static void cx__bell_unlink(struct cx *x, struct cx_cmd *cmd)
{
    if (!cmd->bell_watched)
        return;
    if (cmd->bprev)
        cmd->bprev->bnext = cmd->bnext;
    else
        x->bell_head = cmd->bnext;
    if (cmd->bnext)
        cmd->bnext->bprev = cmd->bprev;
    else
        x->bell_tail = cmd->bprev;
    cmd->bnext = cmd->bprev = NULL;
    cmd->bell_watched = false;
    x->bell_n--;
}

/* Locked (bell_mu). */
static void cx__bell_append(struct cx *x, struct cx_cmd *cmd)
{
    cmd->bnext = NULL;
    cmd->bprev = x->bell_tail;
    if (x->bell_tail)
        x->bell_tail->bnext = cmd;
    else
        x->bell_head = cmd;
    x->bell_tail = cmd;
    cmd->bell_watched = true;
    x->bell_n++;
}

void cx__bell_arm(struct cx *x, struct cx_cmd *cmd)
{
    __atomic_store_n(&x->bell_words[cmd->slot], 0, __ATOMIC_RELEASE);
}

void cx__bell_watch(struct cx *x, struct cx_cmd *cmd)
{
    pthread_mutex_lock(&x->bell_mu);
    if (__atomic_load_n(&x->faulted, __ATOMIC_ACQUIRE)) {
        /* The fault answered it: its bell's segment may go at any time. */
        __atomic_store_n(&x->bell_words[cmd->slot], 1, __ATOMIC_RELEASE);
    } else if (__atomic_load_n(&x->bell_words[cmd->slot], __ATOMIC_ACQUIRE) == 0) {
        /* (not released already by a drop between arming and here) */
        cx__bell_append(x, cmd);
        pthread_cond_signal(&x->bell_cv);
    }
    pthread_mutex_unlock(&x->bell_mu);
}

void cx__bell_release(struct cx *x, struct cx_cmd *cmd)
{
    if (cmd->slot == UINT32_MAX)
        return;
    pthread_mutex_lock(&x->bell_mu);
    cx__bell_unlink(x, cmd);
    __atomic_store_n(&x->bell_words[cmd->slot], 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&x->bell_mu);
}

/* Locked (bell_mu). Looks at up to BELL_BATCH watched commands from the
 * head: each whose client's bell is rung is released, each other goes to
 * the tail, so the lock is held for a bounded time however many bells a
 * client parks, and the next batch goes on where this one stopped.
 * Returns how many it released; *@seen_p: how many it looked at. A bell
 * that faults reads as unrung: its wait lasts until a drop or
 * --bell-timeout releases it. */
static uint32_t cx__bell_sweep(struct cx *x, uint32_t *seen_p)
{
    uint32_t n = 0, seen = 0;
    const uint32_t batch = x->bell_n < BELL_BATCH ? x->bell_n : BELL_BATCH;
    for (; seen < batch && x->bell_head; seen++) {
        struct cx_cmd *cmd = x->bell_head;
        cx__bell_unlink(x, cmd);
        uint64_t now = 0;
        if (base_guard_load_u64(cmd->w.bell.host, &now) < 0 ||
            (int64_t)(now - cmd->w.bell.seq) < 0) {
            cx__bell_append(x, cmd);
            continue;
        }
        __atomic_store_n(&x->bell_words[cmd->slot], 1, __ATOMIC_RELEASE);
        n++;
    }
    *seen_p = seen;
    return n;
}

static void *cx__bell_main(void *arg)
{
    struct cx *x = arg;
    (void)prctl(PR_SET_TIMERSLACK, BELL_TIMER_SLACK_NS, 0, 0, 0);
    uint64_t last = base_now_ns(), sleep_ns = 0, idle_seen = 0;
    pthread_mutex_lock(&x->bell_mu);
    for (;;) {
        while (!x->bell_head && !x->bell_stop)
            pthread_cond_wait(&x->bell_cv, &x->bell_mu);
        if (x->bell_stop)
            break;
        uint32_t seen = 0;
        if (cx__bell_sweep(x, &seen)) {
            last = base_now_ns();
            sleep_ns = idle_seen = 0;
        } else {
            idle_seen += seen;
        }
        /* The lock is let go between batches; the thread waits only once a
         * whole pass over the watched bells found none rung. */
        const bool pass_done = idle_seen >= x->bell_n;
        pthread_mutex_unlock(&x->bell_mu);
        if (!pass_done) {
            pthread_mutex_lock(&x->bell_mu);
            continue;
        }
        idle_seen = 0;
        if (base_now_ns() - last < BELL_SPIN_NS) {
            sched_yield();
        } else {
            sleep_ns = sleep_ns ? sleep_ns * 2 : 2000;
            if (sleep_ns > BELL_SLEEP_MAX_NS)
                sleep_ns = BELL_SLEEP_MAX_NS;
            struct timespec ts = {0, (long)sleep_ns};
            nanosleep(&ts, NULL);
        }
        pthread_mutex_lock(&x->bell_mu);
    }
    pthread_mutex_unlock(&x->bell_mu);
    /* Stopping: every command was answered, so nothing should be left; a
     * wait that is, is released rather than left to hold its stream. */
    cx__bell_release_all(x);
    return NULL;
}

void cx__bell_release_all(struct cx *x)
{
    pthread_mutex_lock(&x->bell_mu);
    while (x->bell_head) {
        struct cx_cmd *cmd = x->bell_head;
        cx__bell_unlink(x, cmd);
        __atomic_store_n(&x->bell_words[cmd->slot], 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&x->bell_mu);
}

int cx__bell_start(struct cx *x)
{
    int rc = -pthread_create(&x->bell, NULL, cx__bell_main, x);
    if (rc == 0)
        x->bell_started = true;
    return rc;
}

void cx__bell_stop(struct cx *x)
{
    if (!x->bell_started)
        return;
    pthread_mutex_lock(&x->bell_mu);
    x->bell_stop = true;
    pthread_cond_signal(&x->bell_cv);
    pthread_mutex_unlock(&x->bell_mu);
    pthread_join(x->bell, NULL);
    x->bell_started = false;
}
