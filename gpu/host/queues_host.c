/* The host backend's queues: each stream a FIFO of jobs (work, event
 * records, event waits, sync markers) that sits in exactly one place: the
 * ready list, a worker, the doorbell list or an event's parked list (see
 * backend_host.c). The workers serve ready streams one work item per turn;
 * one poller thread watches doorbell words with exponential backoff.
 * Answers are gathered under the lock and given to the front after it is
 * dropped, in order. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sigbus.h"
#include "base/time.h"
#include "host_internal.h"
#include "lease_types/validate.h"

/* ---- lists and answers ------------------------------------------------- */

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

/* Gives every gathered answer to the front; the lock must not be held. */
void hx__fire(struct hx_fire *f)
{
    for (struct hx_job *j = f->jobs, *n; j; j = n) {
        n = j->next;
        ga_exec_job_done(j->job, &j->res);
        free(j);
    }
    for (struct hx_barrier *b = f->bars, *n; b; b = n) {
        n = b->next;
        char words[LT_ERROR_MSG_LEN];
        struct ga_exec_answer a = {.status = b->status};
        if (b->status != LT_OK) {
            snprintf(words, sizeof words, "%s: work cancelled (%s)", ga_exec_call_name(b->call),
                     lt_error_describe(b->status));
            a.message = words;
        }
        ga_exec_call_done(b->call, &a);
        free(b);
    }
    f->jobs = f->jobs_tail = NULL;
    f->bars = f->bars_tail = NULL;
}

/* ---- objects (locked) --------------------------------------------------- */

void hx__owner_maybe_free(struct hx *hx, struct hx_owner *o)
{
    if (!o->dropped || o->objs != 0)
        return;
    if (o->prev)
        o->prev->next = o->next;
    else
        hx->owners = o->next;
    if (o->next)
        o->next->prev = o->prev;
    free(o);
}

void hx__stream_maybe_free(struct hx *hx, struct hx_stream *s)
{
    if (!s->closed || s->head || s->state != HX_IDLE)
        return;
    struct hx_owner *o = s->owner;
    if (s->oprev)
        s->oprev->onext = s->onext;
    else
        o->streams = s->onext;
    if (s->onext)
        s->onext->oprev = s->oprev;
    free(s);
    o->objs--;
    hx__owner_maybe_free(hx, o);
}

static void hx__event_unref(struct hx *hx, struct hx_event *ev)
{
    if (--ev->refs != 0)
        return;
    struct hx_owner *o = ev->owner;
    if (ev->oprev)
        ev->oprev->onext = ev->onext;
    else
        o->events = ev->onext;
    if (ev->onext)
        ev->onext->oprev = ev->oprev;
    free(ev);
    o->objs--;
    hx__owner_maybe_free(hx, o);
}

/* Makes an idle stream with jobs ready. */
static void hx__stream_kick(struct hx *hx, struct hx_stream *s)
{
    if (s->state != HX_IDLE || !s->head)
        return;
    s->state = HX_READY;
    hx__list_push(&hx->ready, s, (s->flags & LT_STREAM_F_HIGH_PRIORITY) != 0);
    pthread_cond_signal(&hx->work_cv);
}

void hx__enqueue(struct hx *hx, struct hx_stream *s, struct hx_job *j)
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

/* An event's record @epoch ran: wake what waited for it. */
static void hx__event_reached(struct hx *hx, struct hx_event *ev, uint64_t epoch, struct hx_fire *f)
{
    if (epoch <= ev->done)
        return; /* a later record already completed: the event reflects that one */
    ev->done = epoch;
    ev->done_ns = base_now_ns();
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

/* Takes every queued job off @s (answered LT_E_SHUTTING_DOWN) and out of
 * whatever list it waits in; a running head finishes. */
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

/* The event's id is gone: with @cancel_waiters its synchronizes are
 * answered as cancelled, else they still complete. */
void hx__event_close(struct hx *hx, struct hx_event *ev, struct hx_fire *f, bool cancel_waiters)
{
    ev->closed = true;
    while (cancel_waiters && ev->waiters) {
        struct hx_waiter *w = ev->waiters;
        ev->waiters = w->next;
        hx__bar_arrive(w->bar, LT_E_SHUTTING_DOWN, f);
        free(w);
        ev->refs--; /* the open reference below keeps ev alive */
    }
    hx__event_unref(hx, ev);
}

void hx__owner_cancel(struct hx *hx, struct hx_owner *o, struct hx_fire *f)
{
    o->dropped = true;
    if (o->objs == 0) { /* its default stream was never opened */
        hx__owner_maybe_free(hx, o);
        return;
    }
    for (struct hx_stream *s = o->streams; s; s = s->onext)
        hx__stream_cancel(hx, s, f);
    for (struct hx_event *ev = o->events, *n; ev; ev = n) {
        n = ev->onext;
        if (!ev->closed)
            hx__event_close(hx, ev, f, true);
    }
    for (struct hx_stream *s = o->streams, *n; s; s = n) {
        n = s->onext;
        s->closed = true;
        hx__stream_maybe_free(hx, s); /* the last object out frees o */
    }
}

/* ---- the workers and the doorbell poller ---------------------------------- */

/* The bell is the client's word: a read that faults (its page gone) counts
 * as rung, and the work then fails with LT_E_SEGMENT_GONE instead of
 * running. */
static bool hx__bell_rung(struct hx_job *j)
{
    const struct ga_exec_word *b = &ga_exec_job_work(j->job)->bell;
    uint64_t v = 0;
    if (!b->host)
        return true;
    if (base_guard_load_u64(b->host, &v) < 0) {
        j->bell_gone = true;
        return true;
    }
    return v >= b->seq;
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
        if (j->bell_gone)
            j->res = (struct ga_exec_result){.status = LT_E_SEGMENT_GONE};
        else
            hx__op_run(ga_exec_job_work(j->job), wk->scratch, hx->scratch_bytes, &j->res);
        ga_exec_job_done(j->job, &j->res);
        free(j);
        pthread_mutex_lock(&hx->mu);
        hx->ran++;
        break; /* one work item per turn: other streams get the worker too */
    }
    s->state = HX_IDLE;
    if (s->head)
        hx__stream_kick(hx, s);
    else
        hx__stream_maybe_free(hx, s);
}

void *hx__worker_main(void *arg)
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
void *hx__bell_main(void *arg)
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
        struct timespec until = base_deadline_ns((uint64_t)sleep_us * 1000u);
        pthread_cond_timedwait(&hx->bell_cv, &hx->mu, &until);
        sleep_us = sleep_us * 2 > hx->bell_sleep_max_us ? hx->bell_sleep_max_us : sleep_us * 2;
    }
    pthread_mutex_unlock(&hx->mu);
    return NULL;
}
