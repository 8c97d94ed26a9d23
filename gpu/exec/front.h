/* The executor front's internals, shared by front.c (owners, ids, answers,
 * the frame every verb runs in, clients, work, the executor's life),
 * verbs.c (the stream, event and device commands, record_allocation) and
 * ring.c (streaming rings). */
#ifndef GA_EXEC_FRONT_H
#define GA_EXEC_FRONT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/u64map.h"
#include "gpu/exec_backend.h"

#define GA_EXEC_SUBSYS "exec"
#define GA_EXEC_STREAMS_DEFAULT 64u
#define GA_EXEC_EVENTS_DEFAULT 1024u
#define GA_EXEC_RINGS_DEFAULT 64u
#define GA_EXEC_LIMIT_MAX (1u << 20)

enum ga_exec__verb {
    GA_EXEC__STREAM_QUERY,
    GA_EXEC__STREAM_SYNC,
    GA_EXEC__EVENT_RECORD,
    GA_EXEC__EVENT_WAIT,
    GA_EXEC__EVENT_QUERY,
    GA_EXEC__EVENT_SYNC,
    GA_EXEC__EVENT_ELAPSED,
    GA_EXEC__DEVICE_SYNC,
    GA_EXEC__WHEN_DONE,
    GA_EXEC__STREAM_CREATE, /* answered by the front */
    GA_EXEC__STREAM_VALIDATE,
    GA_EXEC__STREAM_DESTROY,
    GA_EXEC__EVENT_DESTROY,
    GA_EXEC__RING_CLOSE, /* answered by ga_exec_ring_released */
};

struct ga_exec_owner;

struct ga_exec_stream {
    struct ga_exec_owner *o;
    void *bs;
    bool gone; /* the backend released it with its owner: never close it */
};

struct ga_exec_event {
    struct ga_exec_owner *o;
    void *bev;
    uint32_t flags; /* LT_EVENT_F_* */
    bool gone;
};

/* A streaming ring (ring.c). Lives from ga_exec_ring_open until the
 * backend releases it (ga_exec_ring_released), whatever its id does. */
struct ga_exec_ring {
    struct ga_executor *ex;
    struct ga_exec_owner *o;
    void *br;
    uint64_t id;
    struct ga_exec_ring_spec spec;
    uint32_t depth;
    /* locked */
    uint64_t next_seq;
    uint32_t outstanding;
    uint64_t shards_done, chunks_done;
    bool retired; /* its id is gone (closed, or the owner dropped) */
};

struct ga_exec_owner {
    uint64_t id;
    void *bo;
    struct ga_exec_stream dflt; /* {0, 0}: not in the table */
    uint32_t live_streams, live_events, live_rings;
    uint64_t queued, submitted, completed;
    bool dropped;
    uint32_t refs; /* its registration, and each job and call not yet answered */
    uint32_t busy; /* verbs naming it running outside the lock */
    uint32_t launches; /* LAUNCH jobs not yet answered */
};

struct ga_exec_job {
    struct ga_executor *ex;
    struct ga_exec_owner *o;
    struct ga_exec_work w;
    struct ga_exec_ring *ring; /* a ring's shard (ring.c), else NULL */
    struct ga_exec_shard_info shard;
};

struct ga_exec_call {
    struct ga_executor *ex;
    struct ga_exec_owner *o;
    enum ga_exec__verb verb;
    struct ga_exec_reply reply;
    void (*when)(void *arg, uint32_t status); /* GA_EXEC__WHEN_DONE, instead of @reply */
    void *when_arg;
    struct lt_event_id event;  /* EVENT_RECORD's answer */
    bool fresh;                /* a new event's first record: its id goes if it fails */
    struct ga_exec_ring *ring; /* RING_CLOSE: the ring, whose counters the answer carries */
};

struct ga_executor {
    struct ga_executor_info info;
    struct ga_exec_backend be;
    struct base_log_sink log;
    pthread_mutex_t mu;
    pthread_cond_t idle_cv; /* inflight reached 0, or an owner's busy did */
    struct base_u64map owners;
    struct base_idtab streams;
    struct base_idtab events;
    struct base_idtab rings;
    uint64_t inflight; /* jobs and calls not yet answered, rings not yet released */
    uint64_t submitted, completed, cancelled, failed, commands;
    bool stopping, shut, faulted;
    int fault_err;
    struct ga_exec_launch_limits launch; /* defaults filled in */
};

/* What a verb resolved and holds: its owner, a stream, up to two events. */
struct ga_exec__hold {
    struct ga_exec_owner *o;
    struct ga_exec_stream *s;
    uint64_t sid; /* 0: the default stream, or none */
    struct ga_exec_event *e[2];
    uint64_t eid[2];
};

/* What must be closed once a verb put its holds. */
struct ga_exec__gone {
    struct ga_exec_stream *s;
    struct ga_exec_event *e[2];
};

/* An op a verb runs once accepted (see ga_exec__run). */
typedef int (*ga_exec__op_fn)(struct ga_executor *ex, const struct ga_exec__hold *h,
                              struct ga_exec_call *call, struct lt_failure *why);

extern const char *const ga_exec__names[];

/* ---- front.c: helpers (those marked locked run with ex->mu held) ---- */

int ga_exec__refuse(struct lt_failure *why, uint32_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Locked: the owner for a request, or a refusal. */
int ga_exec__owner_get(struct ga_executor *ex, uint64_t owner, struct ga_exec_owner **o_p,
                       struct lt_failure *why);
void ga_exec__owner_unref(struct ga_executor *ex, struct ga_exec_owner *o);
/* Locked: stream @id of the owner with a hold (the default stream needs none). */
int ga_exec__stream_get(struct ga_executor *ex, struct ga_exec_owner *o, struct lt_stream_id id,
                        struct ga_exec__hold *h, struct lt_failure *why);
/* Locked: event @id of the owner with a hold, into h->e[@i]. */
int ga_exec__event_get(struct ga_executor *ex, struct ga_exec_owner *o, struct lt_event_id id,
                       int i, struct ga_exec__hold *h, struct lt_failure *why);
/* Unlocked: closes (unless its owner took it) and frees a stream or event. */
void ga_exec__stream_finish(struct ga_executor *ex, struct ga_exec_stream *s);
void ga_exec__event_finish(struct ga_executor *ex, struct ga_exec_event *e);
/* Locked: one answer fewer in flight. */
void ga_exec__answered(struct ga_executor *ex, struct ga_exec_owner *o);
/* An answer the front knows at once. */
void ga_exec__reply_now(const struct ga_exec_reply *reply, const struct ga_exec_ctl_result *r);
/* The frame: begin resolves the owner and returns locked; abort puts the
 * holds and unlocks, returning @rc; run (locked on entry) accepts @call,
 * runs @op unlocked and aborts. */
int ga_exec__begin(struct ga_executor *ex, uint64_t owner, struct ga_exec__hold *h,
                   struct lt_failure *why);
int ga_exec__abort(struct ga_executor *ex, struct ga_exec__hold *h, int rc);
int ga_exec__run(struct ga_executor *ex, struct ga_exec__hold *h, struct ga_exec_call *call,
                 ga_exec__op_fn op, struct lt_failure *why);
struct ga_exec_call *ga_exec__call_new(enum ga_exec__verb verb, const struct ga_exec_reply *reply,
                                       struct lt_failure *why);
/* The refusal for an id that is not live and the owner's ("stream", "event",
 * "ring"). */
int ga_exec__id_refuse(enum base_idtab_state st, const char *what, uint64_t id,
                       const struct base_idtab_slot *slot, struct lt_failure *why);

/* ---- ring.c ---- */

/* Locked: a ring's shard of @chunks chunks was answered (ga_exec_job_done). */
void ga_exec__ring_shard_answered(struct ga_exec_ring *r, uint64_t chunks, uint32_t status);
/* Locked: what a ring close's answer says about its ring. */
void ga_exec__ring_answer(const struct ga_exec_ring *r, struct ga_exec_ctl_result *res);
/* Locked: retires every ring id of @o (the backend releases them with it). */
void ga_exec__rings_retire(struct ga_executor *ex, struct ga_exec_owner *o);

/* ---- launch.c: LAUNCH's limits ---- */

/* Fills the defaults of @l. */
void ga_exec__launch_limits_init(struct ga_exec_launch_limits *l);
/* Unlocked: a launch over the per-launch limits, refused with the numbers. */
int ga_exec__launch_check(const struct ga_executor *ex, const struct ga_exec_work *w,
                          struct lt_failure *why);
/* Locked: one more launch of @o in flight, or LT_E_LIMIT. */
int ga_exec__launch_admit(struct ga_executor *ex, struct ga_exec_owner *o, struct lt_failure *why);

#endif /* GA_EXEC_FRONT_H */
