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
 * sequences, so the GPU never waits for them. */
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

static int sd_job__aborted(const struct sd_job__ring *r, uint64_t gen)
{
    return __atomic_load_n(&r->abort_gen, __ATOMIC_ACQUIRE) != gen ||
           __atomic_load_n(&r->stop, __ATOMIC_ACQUIRE);
}

/* Waits until done[@slot] >= @want (wrap-safe). 0, or -ECANCELED. */
static int sd_job__slot_wait(struct sd_job__ring *r, uint32_t slot, uint64_t want, uint64_t gen)
{
    const uint64_t *w = &r->done[slot];
    if ((int64_t)(leasec_client_done_word_read(w) - want) >= 0)
        return 0;
    __atomic_add_fetch(&r->waits, 1, __ATOMIC_RELAXED);
    long ns = SD_JOB__SLEEP_MIN_NS;
    for (unsigned n = 0;; n++) {
        if ((int64_t)(leasec_client_done_word_read(w) - want) >= 0)
            return 0;
        if (sd_job__aborted(r, gen))
            return -ECANCELED;
        if (n < SD_JOB__SPIN) {
            sd_job__relax();
            continue;
        }
        __atomic_add_fetch(&r->sleeps, 1, __ATOMIC_RELAXED);
        struct timespec ts = {.tv_sec = 0, .tv_nsec = ns};
        nanosleep(&ts, NULL);
        ns = ns * 2 > SD_JOB__SLEEP_MAX_NS ? SD_JOB__SLEEP_MAX_NS : ns * 2;
    }
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
        t->read_rc = n < 0 ? -errno : -ENODATA;
        snprintf(t->read_err, sizeof t->read_err,
                 "%s: read of %" PRIu64 " bytes at offset %" PRIu64 " failed: %s",
                 sd_shard_path(t->sh), len - got, t->payload_off + lo + got,
                 n < 0 ? strerror(errno) : "the file ends early (truncated while being read?)");
        return;
    }
}

/* Fills image bytes [@lo, @hi) of @t into @slot. */
static void sd_job__chunk_fill(struct sd_job__ring *r, struct sd_job__task *t, unsigned char *slot,
                               uint64_t lo, uint64_t hi)
{
    const uint64_t file_hi = hi < t->payload_len ? hi : t->payload_len;
    if (lo < file_hi && t->read_rc == 0) {
        sd_job__payload_read(t, slot, lo, file_hi);
        if (t->read_rc == 0)
            __atomic_add_fetch(&r->bytes_read, file_hi - lo, __ATOMIC_RELAXED);
        /* Still in this core's cache: the cheapest moment to hash it. */
        if (t->read_rc == 0 && t->inline_check && t->cpu_rc == 0)
            t->cpu_rc = sd_job__check_blocks(slot, lo, file_hi - lo, t->block_size, t->table,
                                             &t->cpu_fault);
    }
    if (hi > t->payload_len) {
        const uint64_t from = lo > t->payload_len ? lo : t->payload_len;
        memcpy(slot + (from - lo), t->tail + (from - t->payload_len), (size_t)(hi - from));
    }
}

/* Streams @t's chunks. 0 once every sequence is stored; -ECANCELED. */
static int sd_job__stage(struct sd_job__ring *r, struct sd_job__task *t, uint64_t gen)
{
    const uint64_t C = r->slot_bytes, N = r->nslots;
    for (uint64_t i = 0; i < t->chunks; i++) {
        const uint64_t s = t->first_seq + i;
        const uint32_t slot = (uint32_t)(s % N);
        const uint64_t t0 = base_now_ns();
        if (s > N) {
            int rc = sd_job__slot_wait(r, slot, s - N, gen);
            if (rc < 0)
                return rc;
        } else if (sd_job__aborted(r, gen)) {
            return -ECANCELED;
        }
        const uint64_t t1 = base_now_ns();
        const uint64_t lo = i * C;
        const uint64_t hi = lo + C < t->image_len ? lo + C : t->image_len;
        sd_job__chunk_fill(r, t, (unsigned char *)r->slots_buf.base + (uint64_t)slot * C, lo, hi);
        /* The release store publishes the slot's bytes with the number. */
        leasec_client_ring(&r->seq[slot], s);
        const uint64_t t2 = base_now_ns();
        __atomic_add_fetch(&r->chunks, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&r->ns_slot_wait, t1 - t0, __ATOMIC_RELAXED);
        __atomic_add_fetch(&r->ns_read, t2 - t1, __ATOMIC_RELAXED);
        if (!__atomic_load_n(&r->t_first_store, __ATOMIC_RELAXED))
            __atomic_store_n(&r->t_first_store, t2, __ATOMIC_RELAXED);
    }
    return 0;
}

void *sd_job__ring_main(void *arg)
{
    struct sd_job__ring *r = arg;
    struct sd_job *job = r->job;
    pthread_mutex_lock(&r->mu);
    uint64_t gen = r->abort_gen;
    for (;;) {
        if (!r->q_head && !r->stop && r->abort_gen == gen) {
            const uint64_t t0 = base_now_ns();
            while (!r->q_head && !r->stop && r->abort_gen == gen)
                pthread_cond_wait(&r->cv, &r->mu);
            /* The first task's wait is the ring's set-up, not a gap. */
            if (r->t_first_store)
                __atomic_add_fetch(&r->ns_task_wait, base_now_ns() - t0, __ATOMIC_RELAXED);
        }
        if (r->stop)
            break;
        if (r->abort_gen != gen) {
            /* Drop what is queued: the loop owns those tasks again. */
            gen = r->abort_gen;
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
        pthread_mutex_unlock(&r->mu);
        if (sd_job__stage(r, t, gen) == 0) {
            struct sd_job__ev ev = {.kind = SD_JOB__EV_STAGED, .ring = r->idx, .task = t};
            sd_job__ev_post(job, &ev);
        }
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}
