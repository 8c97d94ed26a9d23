/* The host backend's parts: backend_host.c (the table the front calls,
 * creation), queues_host.c (the streams' FIFOs, the workers, events and
 * barriers, the doorbell poller), ring_host.c (streaming rings, a thread
 * each) and ops_host.c (the C reference ops the workers run). */
#ifndef GA_HOST_INTERNAL_H
#define GA_HOST_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "gpu/exec_backend.h"

#define HX_WORKERS_DEFAULT_MAX 4u
#define HX_WORKERS_MAX 256u
#define HX_SCRATCH_DEFAULT (4ull << 20)
#define HX_SCRATCH_MAX (1ull << 30)
#define HX_BELL_SLEEP_MIN_US 2u
#define HX_BELL_SLEEP_DEFAULT_US 1000u

enum hx_kind { HX_WORK, HX_RECORD, HX_WAIT, HX_MARK };
enum hx_state { HX_IDLE, HX_READY, HX_RUNNING, HX_WAIT_BELL, HX_WAIT_EVENT };

struct hx_event;
struct hx_owner;

/* A stream or device synchronize: answered when @left markers have run. */
struct hx_barrier {
    struct hx_barrier *next; /* in a fire list */
    uint32_t left;
    uint32_t status;
    struct ga_exec_call *call;
};

struct hx_job {
    struct hx_job *next;
    enum hx_kind kind;
    struct hx_event *ev;     /* RECORD, WAIT */
    uint64_t epoch;          /* RECORD: the record's; WAIT: the one waited for */
    struct hx_barrier *bar;  /* MARK */
    struct ga_exec_job *job; /* WORK */
    struct ga_exec_result res;
    bool bell_gone; /* WORK: reading its bell faulted (the page is gone) */
};

struct hx_stream {
    struct hx_owner *owner;
    uint32_t flags;
    enum hx_state state;
    struct hx_job *head, *tail;
    struct hx_stream *next, *prev;   /* in the ready, doorbell or parked list */
    struct hx_stream *onext, *oprev; /* the owner's streams */
    struct hx_event *parked_on;
    bool closed; /* the front is done with it; freed once drained */
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
    struct hx_event *onext, *oprev; /* the owner's events */
    bool timing;
    bool closed;
    uint64_t recorded; /* records queued */
    uint64_t done;     /* the latest record completed */
    uint64_t done_ns;  /* CLOCK_MONOTONIC when record @done ran */
    uint32_t refs;     /* open, queued RECORD/WAIT jobs, sync waiters */
    struct hx_list parked;
    struct hx_waiter *waiters;
};

struct hx_ring;

struct hx_owner {
    struct hx_owner *next, *prev; /* every owner in memory */
    struct hx_stream *streams;    /* in memory, draining ones included */
    struct hx_event *events;
    struct hx_ring *rings; /* not yet released (ring_host.c) */
    uint32_t objs;         /* streams, events and rings in memory */
    bool dropped;
};

struct hx;

struct hx_worker {
    struct hx *hx;
    pthread_t thread;
    unsigned char *scratch;
};

struct hx {
    pthread_mutex_t mu;
    pthread_cond_t work_cv;
    pthread_cond_t bell_cv;
    struct hx_list ready;
    struct hx_list bell;
    uint64_t bell_changes;
    struct hx_owner *owners;
    struct hx_worker *workers;
    uint32_t nworkers;
    uint32_t started;
    pthread_t bell_thread;
    bool bell_started;
    uint64_t scratch_bytes;
    uint32_t bell_sleep_max_us;
    bool stopping;
    bool shut;
    uint64_t ran, bell_waits;
    /* streaming rings: one thread each, detached; shutdown waits for them */
    uint32_t rings_live;
    pthread_cond_t ring_cv;
    uint64_t ring_chunks, ring_shards, ring_waits;
};

/* Answers gathered under the lock, given after it is dropped, in order. */
struct hx_fire {
    struct hx_job *jobs, *jobs_tail;
    struct hx_barrier *bars, *bars_tail;
};

/* ---- queues_host.c ---- */

/* Gives every gathered answer to the front; the lock must not be held. */
void hx__fire(struct hx_fire *f);

/* Locked: frees a dropped owner with no stream, event or ring left. */
void hx__owner_maybe_free(struct hx *hx, struct hx_owner *o);

/* Locked: frees a closed stream with nothing queued or running. */
void hx__stream_maybe_free(struct hx *hx, struct hx_stream *s);

/* Locked: queues @j on @s and makes the stream ready if it was idle. */
void hx__enqueue(struct hx *hx, struct hx_stream *s, struct hx_job *j);

/* Locked: the event's id is gone; with @cancel_waiters its synchronizes
 * are answered as cancelled, else they still complete. */
void hx__event_close(struct hx *hx, struct hx_event *ev, struct hx_fire *f, bool cancel_waiters);

/* Locked: the owner is gone: everything queued is cancelled, its events
 * closed, its streams freed once drained (the last object frees it). */
void hx__owner_cancel(struct hx *hx, struct hx_owner *o, struct hx_fire *f);

/* A worker thread (arg: its struct hx_worker). */
void *hx__worker_main(void *arg);

/* The doorbell poller thread (arg: the struct hx). */
void *hx__bell_main(void *arg);

/* ---- ring_host.c ---- */

/* The backend table's ring ops. */
int hx__ring_open(void *ctx, void *bo, struct ga_exec_ring *r, const struct ga_exec_ring_spec *spec,
                  void **br_p, struct lt_failure *why_p);
int hx__ring_shard(void *ctx, void *br, struct ga_exec_job *job, struct lt_failure *why_p);
void hx__ring_close(void *ctx, void *br, struct ga_exec_call *close);
/* Locked: the owner is gone: its rings stop waiting for sequences that
 * were not stored, answer what cannot run as cancelled and release. */
void hx__rings_cancel(struct hx *hx, struct hx_owner *o);
/* Waits until every ring thread has released its ring (hx->mu not held). */
void hx__rings_wait(struct hx *hx);

/* ---- ops_host.c ---- */

/* Refuses work the C reference ops cannot run (a metric, a size, an op).
 * CUDA-free and quick: on the caller's thread. */
int hx__op_check(const struct ga_exec_work *w, struct lt_failure *why_p);

/* Runs @w's op on this thread, with @scratch (@scratch_bytes) standing in
 * for device memory, and fills @r (status and result; not elapsed_ns). */
void hx__op_run(const struct ga_exec_work *w, unsigned char *scratch, uint64_t scratch_bytes,
                struct ga_exec_result *r);

#endif /* GA_HOST_INTERNAL_H */
