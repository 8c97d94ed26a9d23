/* The host backend's streaming rings (gpu/exec_backend.h, docs/streaming.md):
 * a thread per ring stands in for the GPU stream the CUDA backend queues a
 * ring's work on. It takes the ring's shards in order; for each chunk it
 * polls the slot's sequence word (a short spin, then sleeps that double up
 * to the backend's doorbell bound), copies the slot into the shard's image
 * (a scratch buffer standing in for device memory) and release-stores the
 * chunk's sequence into the slot's done word; once the image is whole it
 * runs the op with the C reference kernels. A close or the owner's drop
 * ends the waiting: a chunk whose sequence was not stored by then never
 * will be, so its shard and every later one are answered cancelled. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "host_internal.h"
#include "lease_types/validate.h"

#define HX_RING_SPIN 256u /* polls of a sequence word before the first sleep */

struct hx_rjob {
    struct hx_rjob *next;
    struct ga_exec_job *job;
};

struct hx_ring {
    struct hx *hx;
    struct hx_owner *owner;
    struct hx_ring *onext; /* the owner's rings (hx->mu) */
    struct ga_exec_ring *r;
    struct ga_exec_ring_spec spec;
    pthread_mutex_t mu; /* the queue and the flags below */
    pthread_cond_t cv;
    struct hx_rjob *head, *tail;
    bool closing;               /* no more sequence words will be stored */
    struct ga_exec_call *close; /* the close to answer at release (NULL: a drop) */
    unsigned char *image;       /* the device image stand-in, made on first use */
    uint64_t image_cap;
};

static uint64_t hx__div_up(uint64_t a, uint64_t b)
{
    return a / b + (a % b != 0);
}

static bool hx__ring_closing(struct hx_ring *rg)
{
    pthread_mutex_lock(&rg->mu);
    bool c = rg->closing;
    pthread_mutex_unlock(&rg->mu);
    return c;
}

/* Waits until slot @slot's sequence word reaches @seq (wrap-safe, as
 * cuStreamWaitValue64 GEQ). False when the ring closes first and the word
 * is still short: it will never be stored. */
static bool hx__ring_wait(struct hx_ring *rg, uint32_t slot, uint64_t seq)
{
    const uint64_t *w = &rg->spec.seq[slot];
    uint32_t sleep_us = HX_BELL_SLEEP_MIN_US;
    for (uint32_t n = 0;; n++) {
        if ((int64_t)(__atomic_load_n(w, __ATOMIC_ACQUIRE) - seq) >= 0)
            return true;
        if (n < HX_RING_SPIN)
            continue;
        /* Read after the close was seen: a store made before RING_CLOSE
         * was sent is visible by then. */
        if (hx__ring_closing(rg))
            return (int64_t)(__atomic_load_n(w, __ATOMIC_ACQUIRE) - seq) >= 0;
        if (n == HX_RING_SPIN)
            __atomic_add_fetch(&rg->hx->ring_waits, 1, __ATOMIC_RELAXED);
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)sleep_us * 1000L};
        nanosleep(&ts, NULL);
        sleep_us =
            sleep_us * 2 > rg->hx->bell_sleep_max_us ? rg->hx->bell_sleep_max_us : sleep_us * 2;
    }
}

/* The image buffer for @len bytes plus room for the scan's hits behind it. */
static unsigned char *hx__ring_image(struct hx_ring *rg, uint64_t len)
{
    uint64_t need = (len + 7) / 8 * 8 + LT_SCAN_MAX_K * sizeof(struct lt_scan_hit);
    if (need > rg->image_cap) {
        unsigned char *p = realloc(rg->image, (size_t)need);
        if (!p)
            return NULL;
        rg->image = p;
        rg->image_cap = need;
    }
    return rg->image;
}

/* Stages @job's chunks and runs its op; fills @res. */
static void hx__ring_run(struct hx_ring *rg, struct ga_exec_job *job, struct ga_exec_result *res)
{
    const struct ga_exec_work *w = ga_exec_job_work(job);
    const struct ga_exec_shard_info *sh = ga_exec_job_shard(job);
    const uint64_t C = rg->spec.slot_bytes;
    memset(res, 0, sizeof *res);
    unsigned char *img = hx__ring_image(rg, w->length);
    for (uint64_t i = 0; i < sh->chunks; i++) {
        const uint64_t seq = sh->first_seq + i;
        const uint32_t slot = (uint32_t)(seq % rg->spec.nslots);
        if (!hx__ring_wait(rg, slot, seq)) {
            res->status = LT_E_SHUTTING_DOWN;
            return;
        }
        const uint64_t n = w->length - i * C < C ? w->length - i * C : C;
        if (img)
            memcpy(img + i * C, rg->spec.slots + (uint64_t)slot * C, (size_t)n);
        /* As cuStreamWriteValue64 after the copy: the slot may be refilled. */
        __atomic_store_n(&rg->spec.done[slot], seq, __ATOMIC_RELEASE);
        __atomic_add_fetch(&rg->hx->ring_chunks, 1, __ATOMIC_RELAXED);
    }
    if (!img) {
        res->status = LT_E_SYSTEM;
        return;
    }
    if (w->op == LT_OP_COPY_H2D) { /* the chunks' copies were the op */
        res->result.copy.bytes_copied = w->args.copy.length;
        res->status = LT_OK;
        return;
    }
    struct ga_exec_work ow = *w;
    ow.host = img;
    ow.mem_class = LT_CLASS_PINNED;
    ow.bell = (struct ga_exec_word){0};
    ow.done = (struct ga_exec_word){0};
    const uint64_t hits_at = (w->length + 7) / 8 * 8;
    if (w->op == LT_OP_VECTOR_SCAN && w->args.scan.k)
        ow.args.scan.hits_offset = hits_at; /* behind the image, then to the client's words */
    hx__op_run(&ow, NULL, 0, res);
    if (w->op == LT_OP_VECTOR_SCAN && w->args.scan.k && sh->hits && res->status == LT_OK)
        memcpy(sh->hits, img + hits_at, (size_t)w->args.scan.k * sizeof(struct lt_scan_hit));
    __atomic_add_fetch(&rg->hx->ring_shards, 1, __ATOMIC_RELAXED);
}

/* Frees @rg once its thread is done with it (hx->mu not held). */
static void hx__ring_release(struct hx_ring *rg)
{
    struct hx *hx = rg->hx;
    struct ga_exec_ring *r = rg->r;
    struct ga_exec_call *close = rg->close;
    pthread_mutex_lock(&hx->mu);
    struct hx_owner *o = rg->owner;
    for (struct hx_ring **pp = &o->rings; *pp; pp = &(*pp)->onext)
        if (*pp == rg) {
            *pp = rg->onext;
            break;
        }
    o->objs--;
    hx__owner_maybe_free(hx, o);
    pthread_mutex_unlock(&hx->mu);
    free(rg->image);
    pthread_cond_destroy(&rg->cv);
    pthread_mutex_destroy(&rg->mu);
    free(rg);
    ga_exec_ring_released(r, close);
    pthread_mutex_lock(&hx->mu);
    hx->rings_live--;
    pthread_cond_broadcast(&hx->ring_cv);
    pthread_mutex_unlock(&hx->mu);
}

static void *hx__ring_main(void *arg)
{
    struct hx_ring *rg = arg;
    bool cancel = false; /* a chunk was never stored: every later shard too */
    pthread_mutex_lock(&rg->mu);
    for (;;) {
        while (!rg->head && !rg->closing)
            pthread_cond_wait(&rg->cv, &rg->mu);
        struct hx_rjob *q = rg->head;
        if (!q)
            break; /* closing, and drained */
        rg->head = q->next;
        if (!rg->head)
            rg->tail = NULL;
        pthread_mutex_unlock(&rg->mu);
        struct ga_exec_result res = {.status = LT_E_SHUTTING_DOWN};
        if (!cancel)
            hx__ring_run(rg, q->job, &res);
        cancel = cancel || res.status == LT_E_SHUTTING_DOWN;
        ga_exec_job_done(q->job, &res);
        free(q);
        pthread_mutex_lock(&rg->mu);
    }
    pthread_mutex_unlock(&rg->mu);
    hx__ring_release(rg);
    return NULL;
}

int hx__ring_open(void *ctx, void *bo, struct ga_exec_ring *r, const struct ga_exec_ring_spec *spec,
                  void **br_p, struct lt_failure *why_p)
{
    struct hx *hx = ctx;
    struct hx_owner *o = bo;
    struct hx_ring *rg = calloc(1, sizeof(*rg));
    if (!rg)
        return lt_failure_set(why_p, LT_E_SYSTEM, 0, "RING_OPEN: out of memory");
    rg->hx = hx;
    rg->owner = o;
    rg->r = r;
    rg->spec = *spec;
    pthread_mutex_init(&rg->mu, NULL);
    pthread_cond_init(&rg->cv, NULL);
    pthread_mutex_lock(&hx->mu);
    int rc = hx->stopping || o->dropped ? -ESHUTDOWN : 0;
    if (rc == 0) {
        rg->onext = o->rings;
        o->rings = rg;
        o->objs++;
        hx->rings_live++;
    }
    pthread_mutex_unlock(&hx->mu);
    pthread_attr_t at;
    pthread_t t;
    if (rc == 0) {
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        rc = -pthread_create(&t, &at, hx__ring_main, rg);
        pthread_attr_destroy(&at);
        if (rc < 0) {
            pthread_mutex_lock(&hx->mu);
            o->rings = rg->onext;
            o->objs--;
            hx->rings_live--;
            pthread_mutex_unlock(&hx->mu);
        }
    }
    if (rc < 0) {
        pthread_cond_destroy(&rg->cv);
        pthread_mutex_destroy(&rg->mu);
        free(rg);
        return lt_failure_set(
            why_p, rc == -ESHUTDOWN ? LT_E_SHUTTING_DOWN : LT_E_SYSTEM, 0, "RING_OPEN: %s",
            rc == -ESHUTDOWN ? "the executor is stopping" : "no thread for the ring");
    }
    *br_p = rg;
    return 0;
}

int hx__ring_shard(void *ctx, void *br, struct ga_exec_job *job, struct lt_failure *why_p)
{
    (void)ctx;
    struct hx_ring *rg = br;
    const struct ga_exec_work *w = ga_exec_job_work(job);
    struct ga_exec_work probe = *w;
    int rc = hx__op_check(&probe, why_p);
    if (rc < 0)
        return rc;
    if (hx__div_up(w->length, rg->spec.slot_bytes) != ga_exec_job_shard(job)->chunks)
        return lt_failure_set(why_p, LT_E_BAD_VALUE, 0, "RING_SHARD: chunk count mismatch");
    struct hx_rjob *q = calloc(1, sizeof(*q));
    if (!q)
        return lt_failure_set(why_p, LT_E_SYSTEM, 0, "RING_SHARD: out of memory");
    q->job = job;
    pthread_mutex_lock(&rg->mu);
    if (rg->closing) {
        pthread_mutex_unlock(&rg->mu);
        free(q);
        return lt_failure_set(why_p, LT_E_SHUTTING_DOWN, 0, "RING_SHARD: the ring is closing");
    }
    if (rg->tail)
        rg->tail->next = q;
    else
        rg->head = q;
    rg->tail = q;
    pthread_cond_signal(&rg->cv);
    pthread_mutex_unlock(&rg->mu);
    return 0;
}

/* Stops @rg waiting for sequences nobody will store; @close (may be NULL)
 * is answered when it is released. */
static void hx__ring_stop(struct hx_ring *rg, struct ga_exec_call *close)
{
    pthread_mutex_lock(&rg->mu);
    if (!rg->closing) {
        rg->closing = true;
        rg->close = close;
    } else if (close) {
        /* Closed after its owner went: the drop releases it; answer with it. */
        if (!rg->close)
            rg->close = close;
    }
    pthread_cond_signal(&rg->cv);
    pthread_mutex_unlock(&rg->mu);
}

void hx__ring_close(void *ctx, void *br, struct ga_exec_call *close)
{
    (void)ctx;
    hx__ring_stop(br, close);
}

void hx__rings_cancel(struct hx *hx, struct hx_owner *o)
{
    (void)hx;
    for (struct hx_ring *rg = o->rings; rg; rg = rg->onext)
        hx__ring_stop(rg, NULL);
}

void hx__rings_wait(struct hx *hx)
{
    pthread_mutex_lock(&hx->mu);
    while (hx->rings_live)
        pthread_cond_wait(&hx->ring_cv, &hx->mu);
    pthread_mutex_unlock(&hx->mu);
}
