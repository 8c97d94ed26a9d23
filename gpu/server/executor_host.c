/* The host executor: the agent's work on CPU threads, for machines without
 * a GPU (DESIGN.md, "The GPU agent", host backend).
 *
 * Each stream is a FIFO of jobs (work, event records, event waits, sync
 * markers). A stream with jobs sits in exactly one place: the ready list
 * (a worker will take it), a worker (running its head), the doorbell list
 * (its head waits for a bell word) or an event's parked list (its head waits
 * for an event). A worker takes a ready stream, runs its head jobs, and puts
 * it back at the tail after one work item, so streams share the workers
 * fairly and each stream keeps its order. Doorbells are polled by one thread
 * with exponential backoff, so a bell that never rings costs no worker. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpu/executor.h"
#include "kernels/blockhash_ref.h"
#include "kernels/scan_ref.h"
#include "lease_types/validate.h"

#define HX_WORKERS_DEFAULT_MAX 4u
#define HX_WORKERS_MAX 256u
#define HX_STREAMS_DEFAULT 64u
#define HX_EVENTS_DEFAULT 1024u
#define HX_SCRATCH_DEFAULT (4ull << 20)
#define HX_SCRATCH_MAX (1ull << 30)
#define HX_BELL_SLEEP_MIN_US 2u
#define HX_BELL_SLEEP_DEFAULT_US 1000u

enum hx_kind { HX_WORK, HX_RECORD, HX_WAIT, HX_MARK };
enum hx_state { HX_IDLE, HX_READY, HX_RUNNING, HX_WAIT_BELL, HX_WAIT_EVENT };

struct hx_event;

/* A stream sync or device sync: answered when @left markers have run. */
struct hx_barrier {
    struct hx_barrier *next; /* in a fire list */
    uint32_t left;
    uint32_t status;
    uint16_t type;
    ga_exec_ctl_done_fn cb;
    void *arg;
};

struct hx_job {
    struct hx_job *next;
    enum hx_kind kind;
    struct hx_event *ev;    /* RECORD, WAIT */
    uint64_t epoch;         /* RECORD: the record's; WAIT: the one waited for */
    struct hx_barrier *bar; /* MARK */
    struct ga_exec_work w;  /* WORK */
    struct ga_exec_result res;
};

struct hx_owner;

struct hx_stream {
    struct hx_owner *owner;
    struct lt_stream_id id; /* {0, 0}: the owner's default stream */
    uint32_t flags;
    enum hx_state state;
    struct hx_job *head, *tail;
    struct hx_stream *next, *prev;   /* in the ready, doorbell or parked list */
    struct hx_stream *onext, *oprev; /* the owner's streams */
    struct hx_event *parked_on;
    bool destroyed; /* id retired; freed once drained */
};

struct hx_list {
    struct hx_stream *head, *tail;
    uint64_t n;
};

/* An EVENT_SYNCHRONIZE waiting for epoch @epoch. */
struct hx_waiter {
    struct hx_waiter *next;
    uint64_t epoch;
    struct hx_barrier *bar;
};

struct hx_event {
    struct hx_owner *owner;
    struct lt_event_id id;
    bool timing;
    bool destroyed;
    uint64_t recorded; /* records issued */
    uint64_t done;     /* the latest record completed */
    uint64_t done_ns;  /* CLOCK_MONOTONIC when record @done ran */
    uint32_t refs;     /* the id while live, queued RECORD/WAIT jobs, sync waiters */
    struct hx_list parked;
    struct hx_waiter *waiters;
};

struct hx_owner {
    struct hx_owner *next;
    uint64_t id;
    struct hx_stream *dflt;
    struct hx_stream *streams; /* every stream in memory, draining ones included */
    uint32_t live_streams;     /* created, not destroyed; the default not counted */
    uint32_t live_events;
    uint32_t objs; /* streams and events still in memory */
    uint64_t queued, submitted, completed;
    bool dropped;
};

struct hx_slot {
    uint32_t gen;
    uint32_t next_free;
    uint64_t owner;
    void *obj; /* NULL when free */
};

/* Generation-checked ids; slot 0 is never issued. */
struct hx_ids {
    struct hx_slot *s;
    uint32_t n, cap;
    uint32_t free_head; /* 0: none */
};

enum hx_lookup { HX_LIVE, HX_FREED, HX_STALE, HX_NEVER };

struct hx;

struct hx_worker {
    struct hx *hx;
    pthread_t thread;
    unsigned char *scratch;
};

struct hx {
    struct ga_executor ex;
    pthread_mutex_t mu;
    pthread_cond_t work_cv;
    pthread_cond_t bell_cv;
    struct hx_list ready;
    struct hx_list bell;
    uint64_t bell_changes;
    struct hx_owner *owners;
    struct hx_ids streams;
    struct hx_ids events;
    struct hx_worker *workers;
    uint32_t nworkers;
    uint32_t started;
    pthread_t bell_thread;
    bool bell_started;
    uint64_t scratch_bytes;
    uint32_t bell_sleep_max_us;
    bool stopping;
    bool shut;
    uint64_t submitted, completed, cancelled, bell_waits;
};

/* Callbacks gathered under the lock, run after it is dropped, in order. */
struct hx_fire {
    struct hx_job *jobs, *jobs_tail;
    struct hx_barrier *bars, *bars_tail;
};

static uint64_t hx__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int hx__refuse(struct lt_failure *why, uint32_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int hx__refuse(struct lt_failure *why, uint32_t code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = lt_failure_vset(why, code, 0, fmt, ap);
    va_end(ap);
    return rc;
}

/* ---- ids ---------------------------------------------------------------- */

static int hx__ids_insert(struct hx_ids *t, void *obj, uint64_t owner, uint32_t *slot_p,
                          uint32_t *gen_p)
{
    uint32_t i = t->free_head;
    if (i != 0) {
        t->free_head = t->s[i].next_free;
    } else {
        if (t->n == 0)
            t->n = 1; /* slot 0 stays unused */
        if (t->n >= t->cap) {
            uint32_t cap = t->cap ? t->cap * 2 : 64;
            if (cap <= t->cap)
                return -ENOSPC;
            struct hx_slot *s = realloc(t->s, (size_t)cap * sizeof(*s));
            if (!s)
                return -ENOMEM;
            memset(s + t->cap, 0, (size_t)(cap - t->cap) * sizeof(*s));
            t->s = s;
            t->cap = cap;
        }
        i = t->n++;
    }
    struct hx_slot *s = &t->s[i];
    s->gen = lt_gen_next(s->gen);
    s->owner = owner;
    s->obj = obj;
    s->next_free = 0;
    *slot_p = i;
    *gen_p = s->gen;
    return 0;
}

static void hx__ids_remove(struct hx_ids *t, uint32_t slot)
{
    t->s[slot].obj = NULL;
    t->s[slot].next_free = t->free_head;
    t->free_head = slot;
}

static enum hx_lookup hx__ids_lookup(const struct hx_ids *t, uint32_t slot, uint32_t gen,
                                     struct hx_slot **s_p)
{
    if (slot == 0 || slot >= t->n || t->s[slot].gen == 0)
        return HX_NEVER;
    struct hx_slot *s = &t->s[slot];
    *s_p = s;
    if (gen == s->gen)
        return s->obj ? HX_LIVE : HX_FREED;
    return gen < s->gen ? HX_STALE : HX_NEVER;
}

/* Resolves an id of @owner with the protocol's distinct refusals. */
static int hx__ids_get(const struct hx_ids *t, const char *what, uint32_t slot, uint32_t gen,
                       uint64_t owner, void **obj_p, struct lt_failure *why)
{
    struct hx_slot *s = NULL;
    switch (hx__ids_lookup(t, slot, gen, &s)) {
    case HX_NEVER:
        return hx__refuse(why, LT_E_NOT_FOUND, "%s {%" PRIu32 ",%" PRIu32 "} was never issued",
                          what, slot, gen);
    case HX_STALE:
        return hx__refuse(why, LT_E_STALE_ID,
                          "%s {%" PRIu32 ",%" PRIu32 "} is stale: slot now at generation %" PRIu32,
                          what, slot, gen, s->gen);
    case HX_FREED:
        if (s->owner != owner)
            break;
        return hx__refuse(why, LT_E_STALE_ID,
                          "%s {%" PRIu32 ",%" PRIu32 "} is stale: it was destroyed", what, slot,
                          gen);
    case HX_LIVE:
        break;
    }
    if (s->owner != owner)
        return hx__refuse(why, LT_E_NOT_OWNER,
                          "%s {%" PRIu32 ",%" PRIu32 "} belongs to another client", what, slot,
                          gen);
    *obj_p = s->obj;
    return 0;
}

/* ---- lists -------------------------------------------------------------- */

static void hx__list_push(struct hx_list *l, struct hx_stream *s, bool front)
{
    s->prev = s->next = NULL;
    if (!l->head) {
        l->head = l->tail = s;
    } else if (front) {
        s->next = l->head;
        l->head->prev = s;
        l->head = s;
    } else {
        s->prev = l->tail;
        l->tail->next = s;
        l->tail = s;
    }
    l->n++;
}

static void hx__list_remove(struct hx_list *l, struct hx_stream *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        l->head = s->next;
    if (s->next)
        s->next->prev = s->prev;
    else
        l->tail = s->prev;
    s->prev = s->next = NULL;
    l->n--;
}

static void hx__fire_job(struct hx_fire *f, struct hx_job *j)
{
    j->next = NULL;
    if (f->jobs_tail)
        f->jobs_tail->next = j;
    else
        f->jobs = j;
    f->jobs_tail = j;
}

static void hx__bar_arrive(struct hx_barrier *b, uint32_t status, struct hx_fire *f)
{
    if (status != LT_OK)
        b->status = status;
    if (--b->left != 0)
        return;
    b->next = NULL;
    if (f->bars_tail)
        f->bars_tail->next = b;
    else
        f->bars = b;
    f->bars_tail = b;
}

/* Runs every gathered callback; the lock must not be held. */
static void hx__fire(struct hx_fire *f)
{
    for (struct hx_job *j = f->jobs, *n; j; j = n) {
        n = j->next;
        j->w.done_cb(j->w.arg, &j->res);
        free(j);
    }
    for (struct hx_barrier *b = f->bars, *n; b; b = n) {
        n = b->next;
        struct ga_exec_ctl_result r = {.type = b->type, .status = b->status};
        if (b->status != LT_OK)
            snprintf(r.message, sizeof r.message, "%s: work cancelled (%s)",
                     lt_msg_type_name(b->type), lt_error_describe(b->status));
        b->cb(b->arg, &r);
        free(b);
    }
    f->jobs = f->jobs_tail = NULL;
    f->bars = f->bars_tail = NULL;
}

/* ---- objects ------------------------------------------------------------ */

static struct hx_owner *hx__owner_find(struct hx *hx, uint64_t id)
{
    for (struct hx_owner *o = hx->owners; o; o = o->next)
        if (o->id == id)
            return o;
    return NULL;
}

static void hx__owner_maybe_free(struct hx *hx, struct hx_owner *o)
{
    if (!o->dropped || o->objs != 0)
        return;
    for (struct hx_owner **pp = &hx->owners; *pp; pp = &(*pp)->next)
        if (*pp == o) {
            *pp = o->next;
            break;
        }
    free(o);
}

static void hx__stream_maybe_free(struct hx *hx, struct hx_stream *s)
{
    if (!s->destroyed || s->head || s->state != HX_IDLE)
        return;
    struct hx_owner *o = s->owner;
    if (s->oprev)
        s->oprev->onext = s->onext;
    else
        o->streams = s->onext;
    if (s->onext)
        s->onext->oprev = s->oprev;
    if (o->dflt == s)
        o->dflt = NULL;
    free(s);
    o->objs--;
    hx__owner_maybe_free(hx, o);
}

static struct hx_stream *hx__stream_new(struct hx_owner *o, uint32_t flags)
{
    struct hx_stream *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->owner = o;
    s->flags = flags;
    s->state = HX_IDLE;
    s->onext = o->streams;
    if (o->streams)
        o->streams->oprev = s;
    o->streams = s;
    o->objs++;
    return s;
}

static void hx__event_unref(struct hx *hx, struct hx_event *ev)
{
    if (--ev->refs != 0)
        return;
    struct hx_owner *o = ev->owner;
    free(ev);
    o->objs--;
    hx__owner_maybe_free(hx, o);
}

/* Makes an idle stream with jobs ready. Locked. */
static void hx__stream_kick(struct hx *hx, struct hx_stream *s)
{
    if (s->state != HX_IDLE || !s->head)
        return;
    s->state = HX_READY;
    hx__list_push(&hx->ready, s, (s->flags & LT_STREAM_F_HIGH_PRIORITY) != 0);
    pthread_cond_signal(&hx->work_cv);
}

static void hx__enqueue(struct hx *hx, struct hx_stream *s, struct hx_job *j)
{
    j->next = NULL;
    if (s->tail)
        s->tail->next = j;
    else
        s->head = j;
    s->tail = j;
    hx__stream_kick(hx, s);
}

static struct hx_job *hx__pop(struct hx_stream *s)
{
    struct hx_job *j = s->head;
    s->head = j->next;
    if (!s->head)
        s->tail = NULL;
    return j;
}

/* An event's record @epoch ran: wake what waited for it. Locked. */
static void hx__event_reached(struct hx *hx, struct hx_event *ev, uint64_t epoch, struct hx_fire *f)
{
    if (epoch <= ev->done)
        return; /* a later record already completed: the event reflects that one */
    ev->done = epoch;
    ev->done_ns = hx__now_ns();
    for (struct hx_stream *s = ev->parked.head, *n; s; s = n) {
        n = s->next;
        if (s->head && s->head->kind == HX_WAIT && s->head->epoch > ev->done)
            continue;
        hx__list_remove(&ev->parked, s);
        s->parked_on = NULL;
        s->state = HX_IDLE;
        hx__stream_kick(hx, s);
    }
    for (struct hx_waiter **pp = &ev->waiters; *pp;) {
        struct hx_waiter *w = *pp;
        if (w->epoch > ev->done) {
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        hx__bar_arrive(w->bar, LT_OK, f);
        free(w);
        hx__event_unref(hx, ev);
    }
}

/* Takes every queued job off @s (callbacks with LT_E_SHUTTING_DOWN) and out
 * of whatever list it waits in; a running head finishes. Locked. */
static void hx__stream_cancel(struct hx *hx, struct hx_stream *s, struct hx_fire *f)
{
    switch (s->state) {
    case HX_READY:
        hx__list_remove(&hx->ready, s);
        s->state = HX_IDLE;
        break;
    case HX_WAIT_BELL:
        hx__list_remove(&hx->bell, s);
        hx->bell_changes++;
        s->state = HX_IDLE;
        break;
    case HX_WAIT_EVENT:
        hx__list_remove(&s->parked_on->parked, s);
        s->parked_on = NULL;
        s->state = HX_IDLE;
        break;
    case HX_IDLE:
    case HX_RUNNING:
        break;
    }
    while (s->head) {
        struct hx_job *j = hx__pop(s);
        switch (j->kind) {
        case HX_WORK:
            memset(&j->res, 0, sizeof j->res);
            j->res.status = LT_E_SHUTTING_DOWN;
            j->res.elapsed_ns = hx__now_ns() - j->w.accepted_ns;
            s->owner->queued--;
            s->owner->completed++;
            hx->cancelled++;
            hx__fire_job(f, j);
            continue;
        case HX_RECORD:
        case HX_WAIT:
            hx__event_unref(hx, j->ev);
            break;
        case HX_MARK:
            hx__bar_arrive(j->bar, LT_E_SHUTTING_DOWN, f);
            break;
        }
        free(j);
    }
}

/* Retires an event id: its syncs are answered as cancelled. Locked. */
static void hx__event_destroy(struct hx *hx, struct hx_event *ev, struct hx_fire *f,
                              bool cancel_waiters)
{
    hx__ids_remove(&hx->events, ev->id.slot);
    ev->destroyed = true;
    ev->owner->live_events--;
    while (cancel_waiters && ev->waiters) {
        struct hx_waiter *w = ev->waiters;
        ev->waiters = w->next;
        hx__bar_arrive(w->bar, LT_E_SHUTTING_DOWN, f);
        free(w);
        ev->refs--; /* the id's reference below keeps ev alive */
    }
    hx__event_unref(hx, ev);
}

static void hx__owner_cancel(struct hx *hx, struct hx_owner *o, struct hx_fire *f)
{
    o->dropped = true;
    for (struct hx_stream *s = o->streams; s; s = s->onext)
        hx__stream_cancel(hx, s, f);
    for (uint32_t i = 1; i < hx->events.n; i++) {
        struct hx_event *ev = hx->events.s[i].obj;
        if (ev && ev->owner == o)
            hx__event_destroy(hx, ev, f, true);
    }
    for (struct hx_stream *s = o->streams, *n; s; s = n) {
        n = s->onext;
        if (!s->destroyed) {
            if (!lt_stream_id_is_default(s->id)) {
                hx__ids_remove(&hx->streams, s->id.slot);
                o->live_streams--;
            }
            s->destroyed = true;
        }
        hx__stream_maybe_free(hx, s); /* the last object out frees o */
    }
}

/* ---- the work ----------------------------------------------------------- */

static void hx__checksum(const struct ga_exec_work *w, struct ga_exec_result *r)
{
    const struct lt_op_checksum_verify *a = &w->args.checksum;
    const unsigned char *data = w->host + a->offset;
    /* The server checked that the sums are 8-aligned in this process. */
    const uint64_t *sums = (const uint64_t *)(const void *)(w->host + a->sums_offset);
    struct lt_checksum_result *c = &r->result.checksum;
    c->blocks_checked = kr_block_count((size_t)a->length, a->block_size);
    c->first_bad_block = LT_BLOCK_NONE;
    long first = kr_block_verify(data, (size_t)a->length, a->block_size, sums);
    if (first == -1) {
        r->status = LT_OK;
        return;
    }
    if (first < 0) {
        r->status = LT_E_BAD_VALUE;
        return;
    }
    uint64_t b = (uint64_t)first;
    uint64_t off = b * a->block_size;
    size_t len = (size_t)(a->length - off < a->block_size ? a->length - off : a->block_size);
    c->first_bad_block = b;
    c->expected = sums[b];
    c->actual = kr_block_checksum(data + off, len);
    c->bad_blocks = 1;
    for (b++, off += a->block_size; off < a->length; b++, off += a->block_size) {
        len = (size_t)(a->length - off < a->block_size ? a->length - off : a->block_size);
        if (kr_block_checksum(data + off, len) != sums[b])
            c->bad_blocks++;
    }
    r->status = LT_E_CHECKSUM_MISMATCH;
}

LT_STATIC_ASSERT(LT_SCAN_MAX_K == KN_SCAN_MAX_K, "the protocol's top-k limit is the kernels'");

/* The best records by dot product, from the C reference (kr_scan_topk with
 * the op's k, 1 when 0): the same ranking as the GPU's scan kernels. The
 * query is stored in the records' element type; it is widened to floats
 * first. With k > 0 the k hits go to the lease at hits_offset (the server
 * checked the range and alignment) before the result is returned. */
static void hx__scan(const struct ga_exec_work *w, struct ga_exec_result *r)
{
    const struct lt_op_vector_scan *a = &w->args.scan;
    struct lt_scan_result *s = &r->result.scan;
    const uint32_t es = a->elem == LT_ELEM_F16 ? 2u : 4u;
    const uint64_t n = a->length / ((uint64_t)a->dim * es);
    float *q = malloc((size_t)a->dim * sizeof(float));
    if (!q) {
        r->status = LT_E_SYSTEM;
        return;
    }
    const unsigned char *qb = w->host + a->query_offset;
    for (uint32_t i = 0; i < a->dim; i++) {
        if (a->elem == LT_ELEM_F16) {
            uint16_t h;
            memcpy(&h, qb + 2 * (size_t)i, 2);
            q[i] = kn_f16_to_f32(h);
        } else {
            memcpy(&q[i], qb + 4 * (size_t)i, 4);
        }
    }
    const uint32_t k = a->k ? a->k : 1;
    struct kn_scan_hit hits[KN_SCAN_MAX_K];
    long got = n ? kr_scan_topk(w->host + a->offset, a->elem, n, a->dim, q, k, hits) : 0;
    free(q);
    if (got < 0) {
        r->status = LT_E_BAD_VALUE;
        return;
    }
    s->records_scanned = n;
    s->best_index = LT_BLOCK_NONE;
    if (got >= 1) {
        s->best_index = hits[0].index;
        memcpy(&s->best_score_bits, &hits[0].score, 4);
    }
    for (uint32_t i = 0; a->k && i < a->k; i++) {
        struct lt_scan_hit h = {.index = LT_BLOCK_NONE};
        if (i < (uint64_t)got) {
            memcpy(&h.score_bits, &hits[i].score, 4);
            h.index = hits[i].index;
        }
        memcpy(w->host + a->hits_offset + (size_t)i * sizeof h, &h, sizeof h);
    }
    r->status = LT_OK;
}

static void hx__copy(const struct ga_exec_work *w, struct hx_worker *wk, uint64_t scratch,
                     struct ga_exec_result *r)
{
    const struct lt_op_copy_h2d *a = &w->args.copy;
    for (uint64_t done = 0; done < a->length;) {
        uint64_t n = a->length - done < scratch ? a->length - done : scratch;
        memcpy(wk->scratch, w->host + a->offset + done, (size_t)n);
        done += n;
    }
    r->result.copy.bytes_copied = a->length;
    r->status = LT_OK;
}

static void hx__run(struct hx_worker *wk, struct hx_job *j)
{
    struct ga_exec_work *w = &j->w;
    struct ga_exec_result *r = &j->res;
    memset(r, 0, sizeof *r);
    switch (w->op) {
    case LT_OP_CHECKSUM_VERIFY:
        hx__checksum(w, r);
        break;
    case LT_OP_COPY_H2D:
        hx__copy(w, wk, wk->hx->scratch_bytes, r);
        break;
    case LT_OP_VECTOR_SCAN:
        hx__scan(w, r);
        break;
    default:
        r->status = LT_E_UNSUPPORTED; /* refused at submit; kept for safety */
        break;
    }
    /* As cuStreamWriteValue64 after the op: the done word says "ran". */
    if (w->done.host)
        __atomic_store_n(w->done.host, w->done.seq, __ATOMIC_RELEASE);
    r->elapsed_ns = hx__now_ns() - w->accepted_ns;
}

static bool hx__bell_rung(const struct hx_job *j)
{
    return !j->w.bell.host || __atomic_load_n(j->w.bell.host, __ATOMIC_ACQUIRE) >= j->w.bell.seq;
}

/* Works through @s's head until it runs one work item, empties, or waits.
 * Locked on entry and exit; drops the lock around the work itself. */
static void hx__stream_serve(struct hx_worker *wk, struct hx_stream *s, struct hx_fire *f)
{
    struct hx *hx = wk->hx;
    s->state = HX_RUNNING;
    while (s->head) {
        struct hx_job *j = s->head;
        switch (j->kind) {
        case HX_RECORD:
            hx__pop(s);
            hx__event_reached(hx, j->ev, j->epoch, f);
            hx__event_unref(hx, j->ev);
            free(j);
            continue;
        case HX_WAIT:
            if (j->ev->done < j->epoch) {
                s->state = HX_WAIT_EVENT;
                s->parked_on = j->ev;
                hx__list_push(&j->ev->parked, s, false);
                return;
            }
            hx__pop(s);
            hx__event_unref(hx, j->ev);
            free(j);
            continue;
        case HX_MARK:
            hx__pop(s);
            hx__bar_arrive(j->bar, LT_OK, f);
            free(j);
            continue;
        case HX_WORK:
            break;
        }
        if (!hx__bell_rung(j)) {
            s->state = HX_WAIT_BELL;
            hx__list_push(&hx->bell, s, false);
            hx->bell_changes++;
            hx->bell_waits++;
            pthread_cond_signal(&hx->bell_cv);
            return;
        }
        hx__pop(s);
        pthread_mutex_unlock(&hx->mu);
        /* Answer what this stream finished so far, then the work itself,
         * before the stream is handed on: its answers keep stream order. */
        hx__fire(f);
        hx__run(wk, j);
        j->w.done_cb(j->w.arg, &j->res);
        free(j);
        pthread_mutex_lock(&hx->mu);
        s->owner->queued--;
        s->owner->completed++;
        hx->completed++;
        break; /* one work item per turn: other streams get the worker too */
    }
    s->state = HX_IDLE;
    if (s->head)
        hx__stream_kick(hx, s);
    else
        hx__stream_maybe_free(hx, s);
}

static void *hx__worker_main(void *arg)
{
    struct hx_worker *wk = arg;
    struct hx *hx = wk->hx;
    struct hx_fire f = {0};
    pthread_mutex_lock(&hx->mu);
    for (;;) {
        while (!hx->ready.head && !hx->stopping)
            pthread_cond_wait(&hx->work_cv, &hx->mu);
        if (!hx->ready.head)
            break;
        struct hx_stream *s = hx->ready.head;
        hx__list_remove(&hx->ready, s);
        hx__stream_serve(wk, s, &f);
        if (f.jobs || f.bars) {
            pthread_mutex_unlock(&hx->mu);
            hx__fire(&f);
            pthread_mutex_lock(&hx->mu);
        }
    }
    pthread_mutex_unlock(&hx->mu);
    return NULL;
}

/* The doorbell poller: a polling stand-in for cuStreamWaitValue64. It sleeps
 * with exponential backoff while nothing rings and starts over whenever a
 * bell rings or the set of waiting streams changes. */
static void *hx__bell_main(void *arg)
{
    struct hx *hx = arg;
    uint32_t sleep_us = HX_BELL_SLEEP_MIN_US;
    uint64_t seen = 0;
    pthread_mutex_lock(&hx->mu);
    while (!hx->stopping) {
        if (!hx->bell.head) {
            pthread_cond_wait(&hx->bell_cv, &hx->mu);
            sleep_us = HX_BELL_SLEEP_MIN_US;
            continue;
        }
        bool rang = false;
        for (struct hx_stream *s = hx->bell.head, *n; s; s = n) {
            n = s->next;
            if (!hx__bell_rung(s->head))
                continue;
            hx__list_remove(&hx->bell, s);
            s->state = HX_IDLE;
            hx__stream_kick(hx, s);
            rang = true;
        }
        if (rang || seen != hx->bell_changes) {
            seen = hx->bell_changes;
            sleep_us = HX_BELL_SLEEP_MIN_US;
            if (rang)
                continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)sleep_us * 1000u;
        ts.tv_sec += (time_t)(ns / 1000000000u);
        ts.tv_nsec = (long)(ns % 1000000000u);
        pthread_cond_timedwait(&hx->bell_cv, &hx->mu, &ts);
        sleep_us = sleep_us * 2 > hx->bell_sleep_max_us ? hx->bell_sleep_max_us : sleep_us * 2;
    }
    pthread_mutex_unlock(&hx->mu);
    return NULL;
}

/* ---- operations --------------------------------------------------------- */

static int hx__owner_get(struct hx *hx, uint64_t owner, struct hx_owner **o_p,
                         struct lt_failure *why)
{
    if (hx->stopping)
        return hx__refuse(why, LT_E_SHUTTING_DOWN, "the executor is shutting down");
    struct hx_owner *o = hx__owner_find(hx, owner);
    if (!o)
        return hx__refuse(why, LT_E_NOT_FOUND, "client %#" PRIx64 " is not registered", owner);
    if (o->dropped)
        return hx__refuse(why, LT_E_SHUTTING_DOWN, "client %#" PRIx64 " is being dropped", owner);
    *o_p = o;
    return 0;
}

static int hx__stream_get(struct hx *hx, struct hx_owner *o, struct lt_stream_id id,
                          struct hx_stream **s_p, struct lt_failure *why)
{
    if (lt_stream_id_is_default(id)) {
        *s_p = o->dflt;
        return 0;
    }
    void *obj = NULL;
    int rc = hx__ids_get(&hx->streams, "stream", id.slot, id.gen, o->id, &obj, why);
    if (rc == 0)
        *s_p = obj;
    return rc;
}

static int hx__event_get(struct hx *hx, struct hx_owner *o, struct lt_event_id id,
                         struct hx_event **ev_p, struct lt_failure *why)
{
    void *obj = NULL;
    int rc = hx__ids_get(&hx->events, "event", id.slot, id.gen, o->id, &obj, why);
    if (rc == 0)
        *ev_p = obj;
    return rc;
}

static int hx_client_add(void *ctx, uint64_t owner)
{
    struct hx *hx = ctx;
    struct hx_owner *o = calloc(1, sizeof(*o));
    if (!o)
        return -ENOMEM;
    o->id = owner;
    pthread_mutex_lock(&hx->mu);
    int rc = 0;
    if (hx->stopping)
        rc = -ESHUTDOWN;
    else if (hx__owner_find(hx, owner))
        rc = -EEXIST;
    else if (!(o->dflt = hx__stream_new(o, 0)))
        rc = -ENOMEM;
    if (rc == 0) {
        o->next = hx->owners;
        hx->owners = o;
    }
    pthread_mutex_unlock(&hx->mu);
    if (rc < 0)
        free(o);
    return rc;
}

static void hx_client_drop(void *ctx, uint64_t owner)
{
    struct hx *hx = ctx;
    struct hx_fire f = {0};
    pthread_mutex_lock(&hx->mu);
    struct hx_owner *o = hx__owner_find(hx, owner);
    if (o && !o->dropped)
        hx__owner_cancel(hx, o, &f);
    pthread_mutex_unlock(&hx->mu);
    hx__fire(&f);
}

static int hx_submit(void *ctx, const struct ga_exec_work *w, struct lt_failure *why_p)
{
    struct hx *hx = ctx;
    if (!w || !w->done_cb || !w->host)
        return hx__refuse(why_p, LT_E_BAD_VALUE,
                          "submit: expected a work item with bytes and a callback");
    /* The C reference ranks by dot product only, as the GPU kernels do. */
    if (w->op == LT_OP_VECTOR_SCAN && w->args.scan.metric != LT_SCAN_DOT)
        return hx__refuse(why_p, LT_E_UNSUPPORTED,
                          "VECTOR_SCAN: metric %u: the host executor scores by dot product "
                          "(LT_SCAN_DOT = %u) only",
                          (unsigned)w->args.scan.metric, (unsigned)LT_SCAN_DOT);
    if (w->op == LT_OP_VECTOR_SCAN && (w->args.scan.dim == 0 || (w->args.scan.elem != LT_ELEM_F32 &&
                                                                 w->args.scan.elem != LT_ELEM_F16)))
        return hx__refuse(why_p, LT_E_BAD_VALUE,
                          "VECTOR_SCAN: expected dim >= 1 and elem f32 or f16, found dim %u "
                          "elem %u",
                          (unsigned)w->args.scan.dim, (unsigned)w->args.scan.elem);
    if (w->op != LT_OP_CHECKSUM_VERIFY && w->op != LT_OP_COPY_H2D && w->op != LT_OP_VECTOR_SCAN)
        return hx__refuse(why_p, LT_E_BAD_OP, "submit: op %u is not defined", (unsigned)w->op);
    if ((w->bell.host && w->bell.seq == 0) || (w->done.host && w->done.seq == 0))
        return hx__refuse(why_p, LT_E_BAD_VALUE, "submit: a bell or done word with seq 0");
    struct hx_job *j = calloc(1, sizeof(*j));
    if (!j)
        return hx__refuse(why_p, LT_E_SYSTEM, "submit: out of memory");
    j->kind = HX_WORK;
    j->w = *w;
    pthread_mutex_lock(&hx->mu);
    struct hx_owner *o = NULL;
    struct hx_stream *s = NULL;
    int rc = hx__owner_get(hx, w->owner, &o, why_p);
    if (rc == 0)
        rc = hx__stream_get(hx, o, w->stream, &s, why_p);
    if (rc == 0) {
        o->queued++;
        o->submitted++;
        hx->submitted++;
        hx__enqueue(hx, s, j);
    }
    pthread_mutex_unlock(&hx->mu);
    if (rc < 0)
        free(j);
    return rc;
}

/* Queues one sync marker on each of @n streams, answered when all ran. */
static int hx__barrier(struct hx *hx, const struct ga_exec_ctl *c, struct hx_stream **streams,
                       uint32_t n, struct lt_failure *why)
{
    struct hx_barrier *b = calloc(1, sizeof(*b));
    struct hx_job **jobs = calloc(n ? n : 1, sizeof(*jobs));
    bool ok = b && jobs;
    for (uint32_t i = 0; ok && i < n; i++)
        ok = (jobs[i] = calloc(1, sizeof(**jobs))) != NULL;
    if (!ok) {
        for (uint32_t i = 0; jobs && i < n; i++)
            free(jobs[i]);
        free(jobs);
        free(b);
        return hx__refuse(why, LT_E_SYSTEM, "%s: out of memory", lt_msg_type_name(c->type));
    }
    b->left = n;
    b->type = c->type;
    b->cb = c->done_cb;
    b->arg = c->arg;
    for (uint32_t i = 0; i < n; i++) {
        jobs[i]->kind = HX_MARK;
        jobs[i]->bar = b;
        hx__enqueue(hx, streams[i], jobs[i]);
    }
    free(jobs);
    return 0;
}

static int hx__device_sync(struct hx *hx, struct hx_owner *o, const struct ga_exec_ctl *c,
                           struct lt_failure *why)
{
    uint32_t n = 0;
    for (struct hx_stream *s = o->streams; s; s = s->onext)
        n++;
    struct hx_stream **v = calloc(n ? n : 1, sizeof(*v));
    if (!v)
        return hx__refuse(why, LT_E_SYSTEM, "DEVICE_SYNCHRONIZE: out of memory");
    n = 0;
    for (struct hx_stream *s = o->streams; s; s = s->onext)
        v[n++] = s;
    int rc = hx__barrier(hx, c, v, n, why);
    free(v);
    return rc;
}

static int hx__event_record(struct hx *hx, struct hx_owner *o, const struct ga_exec_ctl *c,
                            struct ga_exec_ctl_result *r, struct lt_failure *why)
{
    struct hx_stream *s = NULL;
    struct hx_event *ev = NULL;
    int rc = hx__stream_get(hx, o, c->stream, &s, why);
    if (rc < 0)
        return rc;
    struct hx_job *j = calloc(1, sizeof(*j));
    if (!j)
        return hx__refuse(why, LT_E_SYSTEM, "EVENT_RECORD: out of memory");
    if (lt_event_id_is_null(c->event)) {
        if (c->flags & ~LT_EVENT_F_KNOWN) {
            free(j);
            return hx__refuse(why, LT_E_UNKNOWN_FLAGS, "EVENT_RECORD: unknown flags %#x", c->flags);
        }
        if (o->live_events >= hx->ex.max_events) {
            free(j);
            return hx__refuse(why, LT_E_LIMIT,
                              "EVENT_RECORD: event limit reached (%" PRIu32 " of %" PRIu32 ")",
                              o->live_events, hx->ex.max_events);
        }
        ev = calloc(1, sizeof(*ev));
        if (!ev || hx__ids_insert(&hx->events, ev, o->id, &ev->id.slot, &ev->id.gen) < 0) {
            free(ev);
            free(j);
            return hx__refuse(why, LT_E_SYSTEM, "EVENT_RECORD: out of memory");
        }
        ev->owner = o;
        ev->timing = (c->flags & LT_EVENT_F_TIMING) != 0;
        ev->refs = 1;
        o->live_events++;
        o->objs++;
    } else {
        rc = c->flags ? hx__refuse(why, LT_E_UNKNOWN_FLAGS,
                                   "EVENT_RECORD: flags are for a new event, found %#x on a "
                                   "re-record",
                                   c->flags)
                      : hx__event_get(hx, o, c->event, &ev, why);
        if (rc < 0) {
            free(j);
            return rc;
        }
    }
    j->kind = HX_RECORD;
    j->ev = ev;
    j->epoch = ++ev->recorded;
    ev->refs++;
    hx__enqueue(hx, s, j);
    r->event = ev->id;
    return 0;
}

static int hx__event_wait(struct hx *hx, struct hx_owner *o, const struct ga_exec_ctl *c,
                          struct lt_failure *why)
{
    struct hx_stream *s = NULL;
    struct hx_event *ev = NULL;
    int rc = hx__stream_get(hx, o, c->stream, &s, why);
    if (rc == 0)
        rc = hx__event_get(hx, o, c->event, &ev, why);
    if (rc < 0 || ev->done >= ev->recorded)
        return rc; /* nothing pending: waiting is a no-op, as in CUDA */
    struct hx_job *j = calloc(1, sizeof(*j));
    if (!j)
        return hx__refuse(why, LT_E_SYSTEM, "EVENT_WAIT: out of memory");
    j->kind = HX_WAIT;
    j->ev = ev;
    j->epoch = ev->recorded;
    ev->refs++;
    hx__enqueue(hx, s, j);
    return 0;
}

static int hx__event_sync(struct hx_event *ev, const struct ga_exec_ctl *c, bool *queued_p,
                          struct lt_failure *why)
{
    if (ev->done >= ev->recorded)
        return 0;
    struct hx_waiter *w = calloc(1, sizeof(*w));
    struct hx_barrier *b = calloc(1, sizeof(*b));
    if (!w || !b) {
        free(w);
        free(b);
        return hx__refuse(why, LT_E_SYSTEM, "EVENT_SYNCHRONIZE: out of memory");
    }
    b->left = 1;
    b->type = c->type;
    b->cb = c->done_cb;
    b->arg = c->arg;
    w->bar = b;
    w->epoch = ev->recorded;
    w->next = ev->waiters;
    ev->waiters = w;
    ev->refs++;
    *queued_p = true;
    return 0;
}

static int hx__event_elapsed(struct hx *hx, struct hx_owner *o, const struct ga_exec_ctl *c,
                             struct ga_exec_ctl_result *r, struct lt_failure *why)
{
    struct hx_event *a = NULL, *b = NULL;
    int rc = hx__event_get(hx, o, c->event, &a, why);
    if (rc == 0)
        rc = hx__event_get(hx, o, c->end, &b, why);
    if (rc < 0)
        return rc;
    if (!a->timing || !b->timing)
        return hx__refuse(why, LT_E_BAD_VALUE,
                          "EVENT_ELAPSED: expected two events created with TIMING, found "
                          "%s without",
                          !a->timing ? "the start" : "the end");
    if (a->recorded == 0 || b->recorded == 0 || a->done < a->recorded || b->done < b->recorded)
        return hx__refuse(why, LT_E_BUSY,
                          "EVENT_ELAPSED: expected both events recorded and complete, found "
                          "the %s %s",
                          a->done < a->recorded || a->recorded == 0 ? "start" : "end",
                          (a->recorded == 0 || b->recorded == 0) ? "never recorded" : "pending");
    double ms = ((double)b->done_ns - (double)a->done_ns) / 1e6;
    r->elapsed_ms_bits = lt_f32_to_bits((float)ms);
    return 0;
}

static int hx_ctl(void *ctx, const struct ga_exec_ctl *c, struct lt_failure *why_p)
{
    struct hx *hx = ctx;
    if (!c || !c->done_cb)
        return hx__refuse(why_p, LT_E_BAD_VALUE, "ctl: expected a command with a callback");
    struct ga_exec_ctl_result r = {.type = c->type, .status = LT_OK};
    struct hx_fire f = {0};
    struct hx_owner *o = NULL;
    struct hx_stream *s = NULL;
    struct hx_event *ev = NULL;
    bool queued = false;
    pthread_mutex_lock(&hx->mu);
    int rc = hx__owner_get(hx, c->owner, &o, why_p);
    if (rc < 0)
        goto out;
    switch (c->type) {
    case LT_MSG_STREAM_CREATE:
        if (c->flags & ~LT_STREAM_F_KNOWN) {
            rc =
                hx__refuse(why_p, LT_E_UNKNOWN_FLAGS, "STREAM_CREATE: unknown flags %#x", c->flags);
            break;
        }
        if (o->live_streams >= hx->ex.max_streams) {
            rc = hx__refuse(why_p, LT_E_LIMIT,
                            "STREAM_CREATE: stream limit reached (%" PRIu32 " of %" PRIu32 ")",
                            o->live_streams, hx->ex.max_streams);
            break;
        }
        s = hx__stream_new(o, c->flags);
        if (!s || hx__ids_insert(&hx->streams, s, o->id, &s->id.slot, &s->id.gen) < 0) {
            if (s) {
                s->destroyed = true;
                hx__stream_maybe_free(hx, s);
            }
            rc = hx__refuse(why_p, LT_E_SYSTEM, "STREAM_CREATE: out of memory");
            break;
        }
        o->live_streams++;
        r.stream = s->id;
        break;
    case LT_MSG_STREAM_VALIDATE:
        rc = hx__stream_get(hx, o, c->stream, &s, why_p);
        break;
    case LT_MSG_STREAM_QUERY:
        rc = hx__stream_get(hx, o, c->stream, &s, why_p);
        if (rc == 0)
            r.ready = !s->head && s->state != HX_RUNNING;
        break;
    case LT_MSG_STREAM_SYNCHRONIZE:
        rc = hx__stream_get(hx, o, c->stream, &s, why_p);
        if (rc == 0 && (rc = hx__barrier(hx, c, &s, 1, why_p)) == 0)
            queued = true;
        break;
    case LT_MSG_STREAM_DESTROY:
        if (lt_stream_id_is_default(c->stream)) {
            rc = hx__refuse(why_p, LT_E_BAD_ID,
                            "STREAM_DESTROY: the default stream cannot be "
                            "destroyed");
            break;
        }
        rc = hx__stream_get(hx, o, c->stream, &s, why_p);
        if (rc == 0) {
            hx__ids_remove(&hx->streams, s->id.slot);
            o->live_streams--;
            s->destroyed = true; /* queued work still runs, as in CUDA */
            hx__stream_maybe_free(hx, s);
        }
        break;
    case LT_MSG_EVENT_RECORD:
        rc = hx__event_record(hx, o, c, &r, why_p);
        break;
    case LT_MSG_EVENT_WAIT:
        rc = hx__event_wait(hx, o, c, why_p);
        break;
    case LT_MSG_EVENT_QUERY:
        rc = hx__event_get(hx, o, c->event, &ev, why_p);
        if (rc == 0)
            r.ready = ev->done >= ev->recorded;
        break;
    case LT_MSG_EVENT_SYNCHRONIZE:
        rc = hx__event_get(hx, o, c->event, &ev, why_p);
        if (rc == 0)
            rc = hx__event_sync(ev, c, &queued, why_p);
        break;
    case LT_MSG_EVENT_DESTROY:
        rc = hx__event_get(hx, o, c->event, &ev, why_p);
        if (rc == 0)
            hx__event_destroy(hx, ev, &f, false); /* pending syncs still complete */
        break;
    case LT_MSG_EVENT_ELAPSED:
        rc = hx__event_elapsed(hx, o, c, &r, why_p);
        break;
    case LT_MSG_DEVICE_SYNCHRONIZE:
        rc = hx__device_sync(hx, o, c, why_p);
        if (rc == 0)
            queued = true;
        break;
    default:
        rc = hx__refuse(why_p, LT_E_WRONG_TYPE,
                        "ctl: %s is not a stream, event or device "
                        "command",
                        lt_msg_type_name(c->type));
        break;
    }
out:
    pthread_mutex_unlock(&hx->mu);
    hx__fire(&f);
    if (rc == 0 && !queued)
        c->done_cb(c->arg, &r);
    return rc;
}

static int hx_client_stats(void *ctx, uint64_t owner, struct ga_exec_client_stats *stats_p)
{
    struct hx *hx = ctx;
    int rc = -ENOENT;
    pthread_mutex_lock(&hx->mu);
    struct hx_owner *o = hx__owner_find(hx, owner);
    if (o && !o->dropped) {
        *stats_p = (struct ga_exec_client_stats){
            .streams = o->live_streams,
            .events = o->live_events,
            .queued = o->queued,
            .submitted = o->submitted,
            .completed = o->completed,
        };
        rc = 0;
    }
    pthread_mutex_unlock(&hx->mu);
    return rc;
}

static int hx_stats_format(void *ctx, char *buf, size_t len)
{
    struct hx *hx = ctx;
    uint64_t owners = 0, streams = 0, events = 0, queued = 0;
    pthread_mutex_lock(&hx->mu);
    for (struct hx_owner *o = hx->owners; o; o = o->next) {
        owners++;
        streams += o->live_streams;
        events += o->live_events;
        queued += o->queued;
    }
    int n = snprintf(buf, len,
                     "host executor: workers=%" PRIu32 " clients=%" PRIu64 " streams=%" PRIu64
                     " events=%" PRIu64 " queued=%" PRIu64 " ready=%" PRIu64
                     " bell_waiting=%" PRIu64 " submitted=%" PRIu64 " completed=%" PRIu64
                     " cancelled=%" PRIu64 " bell_waits=%" PRIu64 "\n",
                     hx->nworkers, owners, streams, events, queued, hx->ready.n, hx->bell.n,
                     hx->submitted, hx->completed, hx->cancelled, hx->bell_waits);
    pthread_mutex_unlock(&hx->mu);
    return n;
}

static void hx_shutdown(void *ctx)
{
    struct hx *hx = ctx;
    struct hx_fire f = {0};
    pthread_mutex_lock(&hx->mu);
    if (hx->shut) {
        pthread_mutex_unlock(&hx->mu);
        return;
    }
    hx->stopping = true;
    for (struct hx_owner *o = hx->owners, *n; o; o = n) {
        n = o->next;
        if (!o->dropped)
            hx__owner_cancel(hx, o, &f);
    }
    pthread_cond_broadcast(&hx->work_cv);
    pthread_cond_broadcast(&hx->bell_cv);
    pthread_mutex_unlock(&hx->mu);
    hx__fire(&f);
    for (uint32_t i = 0; i < hx->started; i++)
        pthread_join(hx->workers[i].thread, NULL);
    if (hx->bell_started)
        pthread_join(hx->bell_thread, NULL);
    pthread_mutex_lock(&hx->mu);
    hx->started = 0;
    hx->bell_started = false;
    hx->shut = true;
    pthread_mutex_unlock(&hx->mu);
}

static void hx_destroy(void *ctx)
{
    struct hx *hx = ctx;
    hx_shutdown(hx);
    /* Every owner was cancelled and every worker joined: what is left is
     * owners whose running streams finished after the cancel. */
    while (hx->owners) {
        struct hx_owner *o = hx->owners;
        hx->owners = o->next;
        for (struct hx_stream *s = o->streams, *n; s; s = n) {
            n = s->onext;
            free(s);
        }
        free(o);
    }
    for (uint32_t i = 1; i < hx->events.n; i++)
        free(hx->events.s[i].obj);
    free(hx->streams.s);
    free(hx->events.s);
    for (uint32_t i = 0; i < hx->nworkers; i++)
        free(hx->workers[i].scratch);
    free(hx->workers);
    pthread_cond_destroy(&hx->work_cv);
    pthread_cond_destroy(&hx->bell_cv);
    pthread_mutex_destroy(&hx->mu);
    free(hx);
}

static const struct ga_executor_ops hx_ops = {
    .client_add = hx_client_add,
    .client_drop = hx_client_drop,
    .submit = hx_submit,
    .ctl = hx_ctl,
    .client_stats = hx_client_stats,
    .stats_format = hx_stats_format,
    .shutdown = hx_shutdown,
    .destroy = hx_destroy,
};

int ga_executor_host_create(const struct ga_executor_host_opts *opts, struct ga_executor **ex_p)
{
    struct ga_executor_host_opts o = opts ? *opts : (struct ga_executor_host_opts){0};
    if (!ex_p || o.workers > HX_WORKERS_MAX || o.scratch_bytes > HX_SCRATCH_MAX)
        return -EINVAL;
    if (o.workers == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        o.workers = cpus < 1                        ? 1u
                    : cpus > HX_WORKERS_DEFAULT_MAX ? HX_WORKERS_DEFAULT_MAX
                                                    : (uint32_t)cpus;
    }
    struct hx *hx = calloc(1, sizeof(*hx));
    if (!hx)
        return -ENOMEM;
    hx->ex = (struct ga_executor){
        .name = "host",
        .ops = &hx_ops,
        .ctx = hx,
        .caps = LT_CAP_DOORBELL | LT_CAP_DONE_WORD | LT_CAP_TIMING | LT_CAP_HOST_BACKEND,
        .max_streams = o.max_streams ? o.max_streams : HX_STREAMS_DEFAULT,
        .max_events = o.max_events ? o.max_events : HX_EVENTS_DEFAULT,
    };
    hx->scratch_bytes = o.scratch_bytes ? o.scratch_bytes : HX_SCRATCH_DEFAULT;
    hx->bell_sleep_max_us = o.bell_sleep_max_us ? o.bell_sleep_max_us : HX_BELL_SLEEP_DEFAULT_US;
    if (hx->bell_sleep_max_us < HX_BELL_SLEEP_MIN_US)
        hx->bell_sleep_max_us = HX_BELL_SLEEP_MIN_US;
    hx->nworkers = o.workers;

    int rc = -pthread_mutex_init(&hx->mu, NULL);
    if (rc < 0)
        goto fail_free;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    rc = -pthread_cond_init(&hx->bell_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc < 0)
        goto fail_mutex;
    rc = -pthread_cond_init(&hx->work_cv, NULL);
    if (rc < 0)
        goto fail_bell_cv;
    hx->workers = calloc(hx->nworkers, sizeof(*hx->workers));
    if (!hx->workers) {
        rc = -ENOMEM;
        goto fail_work_cv;
    }
    for (uint32_t i = 0; i < hx->nworkers; i++) {
        hx->workers[i].hx = hx;
        hx->workers[i].scratch = malloc((size_t)hx->scratch_bytes);
        if (!hx->workers[i].scratch) {
            rc = -ENOMEM;
            goto fail_threads;
        }
    }
    for (; hx->started < hx->nworkers; hx->started++) {
        rc = -pthread_create(&hx->workers[hx->started].thread, NULL, hx__worker_main,
                             &hx->workers[hx->started]);
        if (rc < 0)
            goto fail_threads;
    }
    rc = -pthread_create(&hx->bell_thread, NULL, hx__bell_main, hx);
    if (rc < 0)
        goto fail_threads;
    hx->bell_started = true;
    *ex_p = &hx->ex;
    return 0;

fail_threads:
    pthread_mutex_lock(&hx->mu);
    hx->stopping = true;
    pthread_cond_broadcast(&hx->work_cv);
    pthread_mutex_unlock(&hx->mu);
    for (uint32_t i = 0; i < hx->started; i++)
        pthread_join(hx->workers[i].thread, NULL);
    for (uint32_t i = 0; i < hx->nworkers; i++)
        free(hx->workers[i].scratch);
    free(hx->workers);
fail_work_cv:
    pthread_cond_destroy(&hx->work_cv);
fail_bell_cv:
    pthread_cond_destroy(&hx->bell_cv);
fail_mutex:
    pthread_mutex_destroy(&hx->mu);
fail_free:
    free(hx);
    return rc;
}

void ga_executor_destroy(struct ga_executor *ex)
{
    if (ex)
        ex->ops->destroy(ex->ctx);
}
