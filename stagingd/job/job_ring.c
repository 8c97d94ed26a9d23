/* A ring's staging thread (docs/streaming.md). It takes its ring's tasks in
 * order; for each chunk s of a task's image it waits until the slot's done
 * word says the GPU copied chunk s - N out of it (a short spin, then sleeps
 * that double), reads the chunk's bytes of the shard file into the slot
 * with pread (the bytes land in this core's cache, where the copy engine
 * reads them moments later), copies in what the image holds past the
 * payload (the checksum table or the query), checks the chunk's blocks on
 * the CPU when asked to (cpu-verify inline: the bytes are still in cache),
 * and release-stores s into the slot's sequence word. Nothing per chunk
 * goes to the loop or the agent. A task is posted to the loop once its last
 * chunk is stored. When the loop bumps the abort generation (the agent
 * went, or the job is abandoned) the thread drops what it holds and says
 * it is idle; a read that fails still stores the task's remaining
 * sequences, so the GPU never waits for them. Once every task is handed
 * out, a thread with nothing to stage helps another ring with the chunks
 * of its current task ("helping" below). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/time.h"
#include "job_internal.h"

#define SD_JOB__SPIN 512u            /* polls of a done word before the first sleep */
#define SD_JOB__SLEEP_MIN_NS 1000L   /* then sleeps from 1 us ... */
#define SD_JOB__SLEEP_MAX_NS 100000L /* ... doubling up to 100 us (a 4 MiB copy: ~80 us) */

static inline void sd_job__relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    __asm__ volatile("" ::: "memory");
#endif
}

/* Whether the work on @r staged under @gen must stop: the loop aborted the
 * ring, or stops the thread of @self (the caller's own ring). */
static int sd_job__aborted(const struct sd_job__ring *self, const struct sd_job__ring *r,
                           uint64_t gen)
{
    return __atomic_load_n(&r->abort_gen, __ATOMIC_ACQUIRE) != gen ||
           __atomic_load_n(&r->stop, __ATOMIC_ACQUIRE) ||
           __atomic_load_n(&self->stop, __ATOMIC_ACQUIRE);
}

/* Waits until done[@slot] of @r >= @want (wrap-safe). 0, or -ECANCELED. */
static int sd_job__slot_wait(struct sd_job__ring *self, struct sd_job__ring *r, uint32_t slot,
                             uint64_t want, uint64_t gen)
{
    const uint64_t *w = &r->done[slot];
    if ((int64_t)(leasec_client_done_word_read(w) - want) >= 0)
        return 0;
    __atomic_add_fetch(&self->waits, 1, __ATOMIC_RELAXED);
    long ns = SD_JOB__SLEEP_MIN_NS;
    for (unsigned n = 0;; n++) {
        if ((int64_t)(leasec_client_done_word_read(w) - want) >= 0)
            return 0;
        if (sd_job__aborted(self, r, gen))
            return -ECANCELED;
        if (n < SD_JOB__SPIN) {
            sd_job__relax();
            continue;
        }
        __atomic_add_fetch(&self->sleeps, 1, __ATOMIC_RELAXED);
        struct timespec ts = {.tv_sec = 0, .tv_nsec = ns};
        nanosleep(&ts, NULL);
        ns = ns * 2 > SD_JOB__SLEEP_MAX_NS ? SD_JOB__SLEEP_MAX_NS : ns * 2;
    }
}

static void sd_job__fault_lock(struct sd_job__task *t)
{
    while (__atomic_exchange_n(&t->fault_lock, 1, __ATOMIC_ACQUIRE))
        sd_job__relax();
}

static void sd_job__fault_unlock(struct sd_job__task *t)
{
    __atomic_store_n(&t->fault_lock, 0, __ATOMIC_RELEASE);
}

/* Reads payload bytes [@lo, @hi) of @t into @dst; the first failure is
 * kept in the task (and later chunks of it are not read). */
static void sd_job__payload_read(struct sd_job__task *t, unsigned char *dst, uint64_t lo,
                                 uint64_t hi)
{
    uint64_t got = 0, len = hi - lo;
    while (got < len) {
        ssize_t n =
            pread(t->fd, dst + got, (size_t)(len - got), (off_t)(t->payload_off + lo + got));
        if (n > 0) {
            got += (uint64_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        const int err = n < 0 ? errno : 0;
        sd_job__fault_lock(t);
        if (t->read_rc == 0) {
            snprintf(t->read_err, sizeof t->read_err,
                     "%s: read of %" PRIu64 " bytes at offset %" PRIu64 " failed: %s",
                     sd_shard_path(t->sh), len - got, t->payload_off + lo + got,
                     err ? strerror(err) : "the file ends early (truncated while being read?)");
            __atomic_store_n(&t->read_rc, err ? -err : -ENODATA, __ATOMIC_RELAXED);
        }
        sd_job__fault_unlock(t);
        return;
    }
}

/* Fills image bytes [@lo, @hi) of @t into @slot; @self counts the bytes. */
static void sd_job__chunk_fill(struct sd_job__ring *self, struct sd_job__task *t,
                               unsigned char *slot, uint64_t lo, uint64_t hi)
{
    const uint64_t file_hi = hi < t->payload_len ? hi : t->payload_len;
    if (lo < file_hi && __atomic_load_n(&t->read_rc, __ATOMIC_RELAXED) == 0) {
        sd_job__payload_read(t, slot, lo, file_hi);
        if (__atomic_load_n(&t->read_rc, __ATOMIC_RELAXED) == 0) {
            __atomic_add_fetch(&self->bytes_read, file_hi - lo, __ATOMIC_RELAXED);
            /* Still in this core's cache: the cheapest moment to hash it.
             * The first bad block of the shard is the one kept. */
            if (t->inline_check) {
                struct sd_shard_fault f;
                int rc = sd_job__check_blocks(slot, lo, file_hi - lo, t->block_size, t->table, &f);
                if (rc != 0) {
                    sd_job__fault_lock(t);
                    if (t->cpu_rc == 0 || (rc == -EBADMSG && t->cpu_rc == -EBADMSG &&
                                           f.block < t->cpu_fault.block)) {
                        t->cpu_rc = rc;
                        t->cpu_fault = f;
                    }
                    sd_job__fault_unlock(t);
                }
            }
        }
    }
    if (hi > t->payload_len) {
        const uint64_t from = lo > t->payload_len ? lo : t->payload_len;
        memcpy(slot + (from - lo), t->tail + (from - t->payload_len), (size_t)(hi - from));
    }
}

/* Claims @t's next chunks on ring @r one at a time and stores each until
 * none is left. @self is the caller's own ring (@r, or, for a helper,
 * another), whose counters take the time and the bytes. 0, or -ECANCELED:
 * a claimed chunk may then be left unstored. */
static int sd_job__stage(struct sd_job__ring *self, struct sd_job__ring *r, struct sd_job__task *t,
                         uint64_t gen)
{
    const uint64_t C = r->slot_bytes, N = r->nslots;
    for (;;) {
        if (sd_job__aborted(self, r, gen))
            return -ECANCELED;
        const uint64_t i = __atomic_fetch_add(&t->claimed, 1, __ATOMIC_RELAXED);
        if (i >= t->chunks)
            return 0;
        const uint64_t s = t->first_seq + i;
        const uint32_t slot = (uint32_t)(s % N);
        const uint64_t t0 = base_now_ns();
        if (s > N) {
            int rc = sd_job__slot_wait(self, r, slot, s - N, gen);
            if (rc < 0)
                return rc;
        }
        const uint64_t t1 = base_now_ns();
        const uint64_t lo = i * C;
        const uint64_t hi = lo + C < t->image_len ? lo + C : t->image_len;
        sd_job__chunk_fill(self, t, (unsigned char *)r->slots_buf.base + (uint64_t)slot * C, lo,
                           hi);
        /* The release store publishes the slot's bytes with the number. */
        leasec_client_ring(&r->seq[slot], s);
        __atomic_add_fetch(&t->stored, 1, __ATOMIC_RELEASE);
        const uint64_t t2 = base_now_ns();
        __atomic_add_fetch(&self->chunks, 1, __ATOMIC_RELAXED);
        if (self != r)
            __atomic_add_fetch(&self->helped, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&self->ns_slot_wait, t1 - t0, __ATOMIC_RELAXED);
        __atomic_add_fetch(&self->ns_read, t2 - t1, __ATOMIC_RELAXED);
        if (!__atomic_load_n(&self->t_first_store, __ATOMIC_RELAXED))
            __atomic_store_n(&self->t_first_store, t2, __ATOMIC_RELAXED);
        __atomic_store_n(&self->t_last_store, t2, __ATOMIC_RELAXED);
    }
}

/* The caller is done with @t of @r: the last one out, once every chunk is
 * stored, posts the task to the loop. After this @t is not the caller's. */
static void sd_job__task_leave(struct sd_job *job, struct sd_job__ring *r, struct sd_job__task *t)
{
    if (__atomic_sub_fetch(&t->users, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    if (__atomic_load_n(&t->stored, __ATOMIC_ACQUIRE) != t->chunks)
        return; /* aborted: the loop takes it back when the ring's thread says idle */
    struct sd_job__ev ev = {.kind = SD_JOB__EV_STAGED, .ring = r->idx, .task = t};
    sd_job__ev_post(job, &ev);
}

/* ---- helping --------------------------------------------------------------------------
 * Tasks go to rings ahead (a ring holds up to its depth), so once every
 * task is handed out, some rings run out of work while others still have
 * a shard or two to stage, and the job's last milliseconds run on fewer
 * and fewer threads. A thread whose ring has nothing to stage then helps
 * the ring with the most chunks left unclaimed in its current task: it
 * claims chunks of that task as the ring's own thread does and stores
 * them in that ring's slots. Sequence words are per slot and the agent
 * copies a ring's chunks in order whoever stores them, so the protocol
 * does not change; a ring takes at most nslots - 1 helpers, as more would
 * only wait for its slots. */

/* The ring whose current task has the most unclaimed chunks (at least
 * two: its own thread takes the next), and that task joined: @*t_p, its
 * generation in @*gen_p. NULL when none needs help. */
static struct sd_job__ring *sd_job__help_join(struct sd_job__ring *self, struct sd_job__task **t_p,
                                              uint64_t *gen_p)
{
    struct sd_job__stream *st = self->job->stream;
    const unsigned n = __atomic_load_n(&st->nrings, __ATOMIC_ACQUIRE);
    for (unsigned tries = 0; tries < 2; tries++) {
        struct sd_job__ring *best = NULL;
        uint64_t most = 1;
        for (unsigned i = 0; i < n; i++) {
            struct sd_job__ring *q = &st->rings[i];
            if (q == self)
                continue;
            pthread_mutex_lock(&q->mu);
            const struct sd_job__task *t = q->cur;
            if (t && q->helpers + 1 < q->nslots) {
                const uint64_t c = __atomic_load_n(&t->claimed, __ATOMIC_RELAXED);
                if (c < t->chunks && t->chunks - c > most) {
                    most = t->chunks - c;
                    best = q;
                }
            }
            pthread_mutex_unlock(&q->mu);
        }
        if (!best)
            return NULL;
        pthread_mutex_lock(&best->mu);
        struct sd_job__task *t = best->cur;
        if (t && best->helpers + 1 < best->nslots && best->cur_gen == best->abort_gen &&
            __atomic_load_n(&t->claimed, __ATOMIC_RELAXED) + 1 < t->chunks) {
            /* The owner's reference is held while cur is @t: users > 0. */
            __atomic_add_fetch(&t->users, 1, __ATOMIC_RELAXED);
            best->helpers++;
            *t_p = t;
            *gen_p = best->cur_gen;
            pthread_mutex_unlock(&best->mu);
            return best;
        }
        pthread_mutex_unlock(&best->mu); /* it moved on meanwhile: look again */
    }
    return NULL;
}

/* Helps other rings while any needs it. */
static void sd_job__help(struct sd_job__ring *self)
{
    struct sd_job *job = self->job;
    struct sd_job__task *t;
    uint64_t gen;
    struct sd_job__ring *q;
    while (!__atomic_load_n(&self->stop, __ATOMIC_ACQUIRE) &&
           (q = sd_job__help_join(self, &t, &gen)) != NULL) {
        sd_job__stage(self, q, t, gen);
        sd_job__task_leave(job, q, t);
        pthread_mutex_lock(&q->mu);
        if (--q->helpers == 0)
            pthread_cond_broadcast(&q->cv);
        pthread_mutex_unlock(&q->mu);
    }
}

#define SD_JOB__HELP_LOOK_NS 500000ull /* an idle thread looks for work this often while draining */

void *sd_job__ring_main(void *arg)
{
    struct sd_job__ring *r = arg;
    struct sd_job *job = r->job;
    pthread_mutex_lock(&r->mu);
    uint64_t gen = r->abort_gen;
    for (;;) {
        if (!r->q_head && !r->stop && r->abort_gen == gen) {
            const uint64_t t0 = base_now_ns();
            uint64_t helping = 0; /* counted as reading and slot waits already */
            while (!r->q_head && !r->stop && r->abort_gen == gen) {
                if (!__atomic_load_n(&job->stream->drain, __ATOMIC_ACQUIRE)) {
                    pthread_cond_wait(&r->cv, &r->mu);
                    continue;
                }
                pthread_mutex_unlock(&r->mu);
                const uint64_t h0 = base_now_ns();
                sd_job__help(r);
                helping += base_now_ns() - h0;
                pthread_mutex_lock(&r->mu);
                if (r->q_head || r->stop || r->abort_gen != gen)
                    break;
                const struct timespec until = base_deadline_ns(SD_JOB__HELP_LOOK_NS);
                pthread_cond_timedwait(&r->cv, &r->mu, &until);
            }
            /* The first task's wait is the ring's set-up, not a gap. */
            if (r->t_first_store)
                __atomic_add_fetch(&r->ns_task_wait, base_now_ns() - t0 - helping,
                                   __ATOMIC_RELAXED);
        }
        if (r->stop)
            break;
        if (r->abort_gen != gen) {
            /* Drop what is queued: the loop owns those tasks again, once no
             * other thread is inside one of them. */
            gen = r->abort_gen;
            r->cur = NULL;
            while (r->helpers)
                pthread_cond_wait(&r->cv, &r->mu);
            r->q_head = r->q_tail = NULL;
            pthread_mutex_unlock(&r->mu);
            struct sd_job__ev ev = {.kind = SD_JOB__EV_IDLE, .ring = r->idx, .gen = gen};
            sd_job__ev_post(job, &ev);
            pthread_mutex_lock(&r->mu);
            continue;
        }
        struct sd_job__task *t = r->q_head;
        r->q_head = t->next;
        if (!r->q_head)
            r->q_tail = NULL;
        __atomic_store_n(&t->users, 1, __ATOMIC_RELAXED);
        r->cur = t;
        r->cur_gen = gen;
        pthread_mutex_unlock(&r->mu);
        sd_job__stage(r, r, t, gen);
        pthread_mutex_lock(&r->mu);
        r->cur = NULL; /* no helper joins it from here on */
        pthread_mutex_unlock(&r->mu);
        sd_job__task_leave(job, r, t);
        pthread_mutex_lock(&r->mu);
    }
    /* Stopping: the loop joins every thread before it frees any ring. */
    pthread_mutex_unlock(&r->mu);
    return NULL;
}
