/* The job's private structures and the functions its files share. The
 * files depend one way, top to bottom:
 *   job.c         life cycle, the step the loop calls, cancel and abandon
 *   job_batch.c   leases: batched requests and releases, and the agent's
 *                 answers to them (grants, release completions, errors,
 *                 a lost agent)
 *   job_slot.c    a slot's state machine: start, read, submit, results,
 *                 finish (the comment at its top draws it)
 *   job_report.c  progress, the report and its top-k merge, the verdict
 * and, for the streaming path (docs/streaming.md), beside them:
 *   job_stream.c  rings on the loop: leases, RING_OPEN, shards, answers, loss
 *   job_stream_task.c  a streamed (shard, op): image layout, RING_SHARD, result
 *   job_ring.c    a ring's staging thread: chunks into slots, sequence words
 *   job_check.c   the CPU check pool for cpu-verify, and the block check
 * tests/stagingd/job reaches the report's pure functions through here. */
#ifndef STAGINGD_JOB_INTERNAL_H
#define STAGINGD_JOB_INTERNAL_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "base/numa.h"
#include "base/time.h"
#include "stagingd/job.h"
#include "lease/client.h"
#include "stagingd/shard.h"

#define SD_JOB__OP_VERIFY 1u
#define SD_JOB__OP_SCAN 2u

/* Tag kinds (bits 0..3), slot (4..15), job id (16..23), seq or batch (24..63).
 * Work tags (verify, scan) split the last field: the query (24..37) and the
 * slot's assignment seq cut to 26 bits (38..63), enough to tell an
 * assignment from the slot's recent ones. */
enum {
    SD_JOB__TAG_LEASE = 1,
    SD_JOB__TAG_VERIFY = 2,
    SD_JOB__TAG_SCAN = 3,
    SD_JOB__TAG_RELEASE = 4,
    /* the streaming path (job_stream.c): slot = the ring, seq = its epoch or the task */
    SD_JOB__TAG_RING_LEASE = 5,
    SD_JOB__TAG_RING_OPEN = 6,
    SD_JOB__TAG_RING_SHARD = 7,
    SD_JOB__TAG_RING_CLOSE = 8,
    SD_JOB__TAG_RING_RELEASE = 9,
};
#define SD_JOB__TAG_RING_FIRST SD_JOB__TAG_RING_LEASE
#define SD_JOB__TAG_RING_LAST SD_JOB__TAG_RING_RELEASE
#define SD_JOB__SLOTS_MAX 4096u
/* Whole shards: staging buffers the job holds at once, at most (unless one
 * shard alone is larger). --inflight counts shards; past this many bytes a
 * slot waits for another to finish. Measured (H200, 64 MiB shards, issue
 * 10): inflight 4 (256 MiB) 35.6 GB/s, 16 (1 GiB) 29.0. Which of two
 * suspects costs it is not isolated yet: a wider DRAM working set for each
 * byte to cross, or more shards' copies on the agent's streams at once (the
 * shape its copy probe measured slow). Either way 256 MiB already keeps the
 * readers and the GPU busy; small shards keep their many in flight.
 * docs/streaming.md, "In flight". */
#define SD_JOB__HELD_MAX (256ull << 20)
#define SD_JOB__TAG_QUERY_BITS 14u
#define SD_JOB__TAG_WORK_SEQ_MASK ((1ull << (40 - SD_JOB__TAG_QUERY_BITS)) - 1)
_Static_assert(SD_JOB_QUERIES_MAX <= (1u << SD_JOB__TAG_QUERY_BITS), "a query fits its tag bits");
/* Scan submits a slot keeps in flight at most: the agent bounds a client's
 * requests in flight (4096 by default), and a job has up to 1024 slots. */
#define SD_JOB__SCAN_WINDOW 32u
/* Scan results a job keeps at most (shards x queries x hits). */
#define SD_JOB__RESULTS_MAX (1ull << 30)
#define SD_JOB__WHY_LEN 320
#define SD_JOB__TOPK_SHOWN 10
#define SD_JOB__NOT_RUN_SHOWN 3 /* names in the one line for shards not run */
#define SD_JOB__PATH_MAX 4096

enum sd_job__read { SD_JOB__READ_NONE, SD_JOB__READ_RUNNING, SD_JOB__READ_DONE };

enum sd_job__lease {
    SD_JOB__L_NONE,         /* no lease; none asked for */
    SD_JOB__L_WANT,         /* to be asked for in the next batch */
    SD_JOB__L_REQUESTED,    /* in a LEASE_REQUEST awaiting its grant */
    SD_JOB__L_HELD,         /* granted */
    SD_JOB__L_RELEASE_WANT, /* to be released in the next batch */
    SD_JOB__L_RELEASING,    /* LEASE_RELEASE sent, RELEASE_COMPLETE awaited */
};

enum sd_job__res_state {
    SD_JOB__RES_PENDING = 0,
    SD_JOB__RES_DONE,
    SD_JOB__RES_FAILED,
    SD_JOB__RES_SKIPPED,
};

/* One query's scan result on one shard. */
struct sd_job__scan {
    int got; /* its completion was taken */
    int has_hit;
    struct kn_scan_hit hit;   /* the best */
    struct kn_scan_hit *hits; /* the shard's top min(records, k), best first */
    size_t nhits;
};

struct sd_job__result {
    enum sd_job__res_state state;
    unsigned got; /* ops whose completion was taken */
    uint32_t completions;
    uint32_t duplicates;
    char *why;
    /* verify */
    uint32_t vstatus;
    struct leasec_checksum_result v;
    int cpu_checked, cpu_bad;
    uint64_t cpu_block;
    int cpu_queued; /* handed to the check pool (once per shard) */
    /* scan: one entry per query (job->nq); got has the scan op once all are in */
    struct sd_job__scan *scan;
    uint32_t scans_got;
    uint64_t records;
};

/* Where a slot's scan of one query stands. */
enum sd_job__qstate {
    SD_JOB__Q_TODO = 0, /* to be submitted */
    SD_JOB__Q_INFLIGHT, /* submitted, unanswered */
    SD_JOB__Q_EARLY,    /* answered before the read was taken: the answer waits in early */
    SD_JOB__Q_DONE,
};

/* A scan answer that came before the slot's read was taken. */
struct sd_job__early {
    uint32_t status;
    union leasec_op_result result;
};

struct sd_job;

struct sd_job__slot {
    struct sd_job *job;
    unsigned idx;
    int active;
    uint64_t seq; /* this assignment: tags, and the doorbell's sequence */
    size_t shard;
    struct sd_shard *sh;
    struct leasec_pool_buf buf;
    int have_buf;
    uint64_t held;  /* bytes of the buffer counted in job->bytes_held */
    int quarantine; /* the agent did not give the bytes back: never reuse */
    uint64_t payload_len, read_len, sums_off, query_off, hits_off, lease_len;
    uint64_t query_stride; /* bytes from one query to the next at query_off */
    uint32_t k;            /* scan: hits the agent writes for each query, from hits_off on */
    uint32_t block_size, dim, type;
    unsigned ops_todo;     /* ops still without a result */
    unsigned ops_inflight; /* submitted and unanswered */
    int failed;
    /* the read */
    enum sd_job__read read;
    int using_bell; /* the read's completion rings the bell */
    int read_rc;    /* written by the staging thread, read after it posts */
    uint64_t read_bytes;
    char read_err[256];
    int cpu_rc;
    struct sd_shard_fault cpu_fault;
    char cpu_err[256];
    /* completions that arrived before the read was taken (doorbell path):
     * verify's in early_status/result[0], each scan's in qearly */
    unsigned early_mask;
    uint32_t early_status[2];
    union leasec_op_result early_result[2];
    /* each query's scan (job->nq entries, the job's memory, kept across
     * assignments); the counts are of qstate's states */
    unsigned char *qstate;
    struct sd_job__early *qearly;
    uint32_t scan_todo, scan_busy, scan_left;
    uint32_t scan_next; /* no query below it is TODO */
    /* the lease */
    enum sd_job__lease lease;
    struct leasec_client_lease l;
    unsigned lease_agent;
    uint64_t lease_batch;
    unsigned lease_pos;
    uint64_t *bell, *done;
    uint64_t word_off;
    int words_area; /* the submits went with the done word and hits in the agent's
                       words area (SD_JOB_WORDS_STRIDE); 0: in our segments */
};

/* ---- the streaming path (job_stream.c, job_ring.c, job_check.c) ---- */

/* One (shard, op) streamed through a ring: its image is the payload, zeros
 * up to tail_off, then the tail (the checksum table or the query). */
struct sd_job__task {
    struct sd_job__task *next; /* the ring thread's queue */
    uint64_t id;               /* job-wide, for tags */
    size_t shard;
    unsigned op; /* SD_JOB__OP_VERIFY or SD_JOB__OP_SCAN */
    struct sd_shard *sh;
    int fd;
    uint64_t payload_off, payload_len, tail_off, image_len;
    unsigned char *tail;   /* image bytes [payload_len, image_len) */
    const uint64_t *table; /* verify: the shard's checksum table (sh's) */
    uint32_t block_size;
    uint64_t first_seq, chunks;
    unsigned hits_idx; /* scan with k: which hits area of the words buffer */
    int inline_check;  /* the staging thread checks each chunk's blocks */
    /* the staging threads': the ring's own claims chunks in order, and a
     * thread whose ring has nothing left to stage may claim the rest with it
     * (job_ring.c, "helping"); whoever leaves it last with every chunk
     * stored posts it (users counts the threads inside) */
    uint64_t claimed, stored;
    unsigned users;
    int fault_lock; /* guards read_err and cpu_fault while they are written */
    /* written by the staging threads before the task is posted: the first
     * failure of each kind */
    int read_rc;
    char read_err[256];
    int cpu_rc;
    struct sd_shard_fault cpu_fault;
    /* the loop's */
    int staged, completed, orphan, refused;
    uint32_t status;
    union leasec_op_result result;
};

enum sd_job__ring_state {
    SD_JOB__R_IDLE = 0,     /* nothing on an agent (before setup, or after a loss once idle) */
    SD_JOB__R_LEASE_WANT,   /* its two leases go in the next turn */
    SD_JOB__R_LEASING,      /* LEASE_REQUEST sent */
    SD_JOB__R_OPENING,      /* RING_OPEN sent */
    SD_JOB__R_OPEN,         /* taking shards */
    SD_JOB__R_CLOSING,      /* RING_CLOSE sent */
    SD_JOB__R_RELEASE_WANT, /* its leases go back in the next turn */
    SD_JOB__R_RELEASING,    /* LEASE_RELEASE sent */
    SD_JOB__R_DONE,         /* finished for this job */
    SD_JOB__R_LOST,         /* its agent went: waiting for the thread to stop, then again */
};

/* What a staging thread posts to the loop. */
enum sd_job__ev_kind { SD_JOB__EV_STAGED = 1, SD_JOB__EV_IDLE, SD_JOB__EV_CHECKED };

struct sd_job__ev {
    enum sd_job__ev_kind kind;
    unsigned ring;
    struct sd_job__task *task; /* STAGED */
    uint64_t gen;              /* IDLE: the abort generation it acknowledges */
    size_t shard;              /* CHECKED */
    int rc;                    /* CHECKED: 0, -EBADMSG (cpu_fault), or another failure */
    struct sd_shard_fault fault;
};

struct sd_job__ring {
    struct sd_job *job;
    unsigned idx;
    /* memory: the slots stay for the job; a words buffer is used by one
     * connection only (a dead connection's GPU may still write it) */
    struct leasec_pool_buf slots_buf, words_buf;
    int have_slots, have_words;
    uint64_t *seq, *done;
    uint64_t seq_off, done_off, hits_off, hits_stride;
    uint32_t nslots;
    uint64_t slot_bytes;
    /* the loop's */
    enum sd_job__ring_state state;
    unsigned agent;
    uint64_t epoch; /* this ring's incarnation, for tags */
    struct leasec_client_lease slots_lease, words_lease;
    int have_leases;
    unsigned releases_due;
    struct leasec_ring ring;
    uint64_t next_seq;
    struct sd_job__task *out[LT_RING_DEPTH_MAX]; /* RING_SHARD sent, not finished, in order */
    unsigned nout;
    uint64_t hits_busy;  /* bit i: hits area i is some task's */
    uint64_t abort_sent; /* the abort generation the loop waits to see acknowledged */
    int broken;          /* refused a shard: closed, not used again */
    int feed_full;       /* job_agents.c: took no task this turn */
    /* shared with the staging thread (mu) */
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct sd_job__task *q_head, *q_tail;
    uint64_t abort_gen; /* bumped by the loop: drop everything, then say idle */
    int stop;
    /* the task the thread stages now, and the abort generation it stages it
     * under: other rings' threads may help with it (job_ring.c); helpers:
     * how many are inside this ring's tasks (the thread says idle only once
     * none is) */
    struct sd_job__task *cur;
    uint64_t cur_gen;
    unsigned helpers;
    /* the thread's counters (read by the loop after join or under mu) */
    uint64_t chunks, waits, sleeps, bytes_read;
    uint64_t helped; /* of chunks: those stored in another ring's slots */
    /* where the thread's time went (ns): reading chunks into slots, waiting
     * for a slot's done word, waiting for a task; and when it stored its
     * first and its latest chunk (base_now_ns, 0: none yet) */
    uint64_t ns_read, ns_slot_wait, ns_task_wait, t_first_store, t_last_store;
    uint64_t ring_shards, ring_chunks; /* the agent's RING_CLOSED */
};

struct sd_job__stream {
    struct sd_job__ring *rings;
    unsigned nrings;
    uint64_t chunk;
    unsigned slots, depth;
    size_t next_unit, nunits; /* units: shard * ops + op index */
    size_t *redo;             /* units to stream again after an agent loss */
    int drain;                /* every unit is handed out: idle threads help (atomic) */
    size_t nredo, redo_cap;
    uint64_t next_task;
    unsigned inflight_tasks;
    /* counters */
    uint64_t shard_msgs, open_msgs, close_msgs, lease_reqs, lease_rels, opens;
    uint64_t reg_start, reg_end;
    int reg_start_valid, reg_end_valid;
    /* the agents' count of this client's requests (RING_SHARD, SUBMIT,
     * LAUNCH: STATS_REPLY's submits) at the start and the end */
    uint64_t req_start, req_end;
    int req_start_valid, req_end_valid;
    uint64_t t_gpu_end;
    int closing;
};

/* The CPU check pool (job_check.c). */
struct sd_job__check;

struct sd_job__agent {
    int ready;
    uint32_t caps;
    unsigned max_batch;
    int stats_valid;
    char name[LT_NAME_LEN];
    struct leasec_agent_client_stats me;
    uint64_t uptime_ns;
    /* this job's work on it (job_agents.c): shards whose last result came
     * from it, their payload bytes, and the shards (streamed: tasks) it
     * had in flight when it was lost, sent again to the others */
    uint64_t shards_done, bytes_done, moved;
    /* job_agents.c: where its GPU's staging work goes (decided once) */
    int placed;
    struct base_numa_place place;
};

struct sd_job {
    struct sd_job_env env;
    struct sd_job_config cfg;
    char store_path[SD_JOB__PATH_MAX];
    struct sd_store *st;
    size_t nshards;
    enum sd_job_op op;
    unsigned ops;
    int doorbell; /* pre-submit behind the bell where the agent grants it */
    int doorbell_decided;
    unsigned nslots;
    struct sd_job__slot *slots;
    struct sd_job__result *res;
    struct sd_job__agent *agents;
    unsigned rr; /* round-robin start among ready agents */
    size_t next_shard;
    unsigned active;
    int alloc_blocked;
    uint64_t bytes_held; /* staging buffers of the active slots (SD_JOB__HELD_MAX) */
    int held_bounded;    /* SD_JOB__HELD_MAX held a shard back (logged once) */

    /* reads that landed, posted by staging threads */
    pthread_mutex_t qmu;
    unsigned *q;
    unsigned qhead, qlen;
    unsigned reads_active;
    uint64_t busy_start_ns, busy_ns;

    /* the scan's queries: nq of them; the generated one is made for the
     * last (type, dim), file queries are cfg.queries */
    uint32_t nq;
    float *query;
    uint32_t query_dim, query_type;
    uint64_t *row_base; /* each shard's first global row: the records before it */
    uint64_t rows;      /* every shard's records */

    uint64_t t_start, t_end;
    uint64_t bytes_total, bytes_started, bytes_staged, bytes_done;
    uint64_t leases_granted, leases_released, leases_lost, leases_refused, leases_abandoned;
    uint64_t lease_batches, release_batches, next_batch;
    uint64_t submits, bell_submits, completions, stale, duplicates, resubmits;
    uint64_t done_words_seen, staged_fallback, bad_blocks;
    uint64_t no_agent_since;
    uint64_t last_status_ns;
    unsigned progress_quarter;
    int cancelled, abandoned, finished;
    char fail_last[SD_JOB__WHY_LEN]; /* the last failure reason logged */
    uint64_t fail_repeats;           /* shards failed for it since, not logged one by one */
    char cancel_why[SD_JOB__WHY_LEN];
    /* the merged top-k of each query (nq lists), made by the report */
    struct kn_scan_hit **topk;
    size_t *ntopk;
    /* the streaming path, once decided (NULL: whole shards) */
    struct sd_job__stream *stream;
    int path_decided;
    /* the CPU check pool (cpu-verify with cpu_verify_threads > 0), and the
     * shards it still has to answer */
    struct sd_job__check *check;
    size_t checks_pending;
    uint64_t check_bytes, t_check_end;
    /* events from the ring and check threads, under qmu (job_stream.c) */
    struct sd_job__ev *evq;
    size_t ev_head, ev_len, ev_cap;
    /* job_agents.c: when the first of several agents was ready */
    uint64_t first_ready_ns;
};

/* Logs one line through the sink the daemon lent, subsystem "job". */
#define sd_job__log(job, level, ...) base_log(&(job)->env.log, (level), "job", __VA_ARGS__)

/* ---- helpers ---- */

static inline uint64_t sd_job__round_up(uint64_t v, uint64_t a)
{
    return (v + a - 1) / a * a;
}

static inline uint64_t sd_job__tag(const struct sd_job *job, unsigned kind, unsigned slot,
                                   uint64_t seq)
{
    return (seq << 24) | ((uint64_t)(job->env.id & 0xffu) << 16) | ((uint64_t)slot << 4) | kind;
}

static inline unsigned sd_job__tag_kind(uint64_t tag)
{
    return (unsigned)(tag & SD_JOB_TAG_KIND_MASK);
}

static inline unsigned sd_job__tag_slot(uint64_t tag)
{
    return (unsigned)((tag >> 4) & 0xfffu);
}

static inline uint64_t sd_job__tag_seq(uint64_t tag)
{
    return tag >> 24;
}

/* The tag of a verify or scan submit of query @q for assignment @seq. */
static inline uint64_t sd_job__work_tag(const struct sd_job *job, unsigned kind, unsigned slot,
                                        uint64_t seq, uint32_t q)
{
    return sd_job__tag(job, kind, slot,
                       ((seq & SD_JOB__TAG_WORK_SEQ_MASK) << SD_JOB__TAG_QUERY_BITS) | q);
}

static inline uint32_t sd_job__tag_query(uint64_t tag)
{
    return (uint32_t)(sd_job__tag_seq(tag) & ((1u << SD_JOB__TAG_QUERY_BITS) - 1));
}

static inline int sd_job__tag_mine(const struct sd_job *job, uint64_t tag)
{
    return ((tag >> 16) & 0xffu) == (job->env.id & 0xffu);
}

static inline const char *sd_job__shard_name(const struct sd_job *job, size_t idx)
{
    const struct sd_store_entry *e = sd_store_entry_get(job->st, idx);
    return e ? e->name : "?";
}

static inline int sd_job__transient(int rc)
{
    return rc == -ENOTCONN || rc == -ECONNRESET || rc == -EPIPE || rc == -ESTALE ||
           rc == -ETIMEDOUT || rc == -ECONNREFUSED;
}

/* ---- job_slot.c ---- */

/* Records why shard @idx has no (complete) result; the first reason wins. */
void sd_job__result_fail(struct sd_job *job, size_t idx, enum sd_job__res_state state,
                         const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Logs how many shards failed for the last reason logged since it was
 * (result_fail logs a repeated reason once). */
void sd_job__fail_repeats_log(struct sd_job *job);
/* The slot's shard fails: no more submits; work in flight still drains. */
void sd_job__slot_fail(struct sd_job__slot *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Starts shard @idx in slot @s. Returns 1 when the shard is consumed
 * (started, or failed for good), 0 when it must wait for pool room. */
int sd_job__start(struct sd_job *job, struct sd_job__slot *s, size_t idx);
/* Moves one slot as far as it can go without an answer. */
void sd_job__advance(struct sd_job__slot *s);
/* The scan's generated query for (@type, @dim) in job->query (nothing to do
 * with a --query file's). Returns 0 or -ENOMEM. */
int sd_job__query(struct sd_job *job, uint32_t type, uint32_t dim);
/* Query @q (its f32 elements), the generated one or the file's. */
const float *sd_job__query_at(const struct sd_job *job, uint32_t q);
/* Query @q of slot @s moves to state @to (enum sd_job__qstate); the
 * slot's counts and its scan op bits follow. */
void sd_job__query_move(struct sd_job__slot *s, uint32_t q, enum sd_job__qstate to);
/* Whether the slot has work it could submit now: the verify, or a scan
 * to do with room in the window. */
static inline int sd_job__work_left(const struct sd_job__slot *s)
{
    return !s->failed && ((s->ops_todo & ~s->ops_inflight & SD_JOB__OP_VERIFY) != 0 ||
                          (s->scan_todo > 0 && s->scan_busy < SD_JOB__SCAN_WINDOW));
}
/* The slot a work tag (sd_job__work_tag) names, if the tag is this job's
 * and the slot still holds the assignment it was made for; else NULL. */
struct sd_job__slot *sd_job__slot_of(struct sd_job *job, uint64_t tag);

/* ---- job_batch.c ---- */

/* Refreshes which agents are ready (and their caps and batch limits). */
void sd_job__agents_refresh(struct sd_job *job, unsigned *nready_p);
/* Sends the wanted leases and releases in as few requests as the batch
 * limits allow. */
void sd_job__flush_leases(struct sd_job *job, unsigned nready);
void sd_job__flush_releases(struct sd_job *job);

/* ---- job_stream_task.c (a streamed (shard, op) on the loop) ---- */

static inline uint64_t sd_job__div_up(uint64_t a, uint64_t b)
{
    return a / b + (a % b != 0);
}

static inline unsigned sd_job__nops(const struct sd_job *job)
{
    return (unsigned)__builtin_popcount(job->ops);
}

/* The op of unit @u (units: (shard, op) in shard order). */
static inline unsigned sd_job__unit_op(const struct sd_job *job, size_t u)
{
    if (sd_job__nops(job) == 2)
        return u % 2 == 0 ? SD_JOB__OP_VERIFY : SD_JOB__OP_SCAN;
    return job->ops;
}

static inline unsigned sd_job__scan_k(const struct sd_job *job)
{
    return job->cfg.k < LT_SCAN_MAX_K ? job->cfg.k : LT_SCAN_MAX_K;
}

void sd_job__task_free(struct sd_job__task *t);
/* Removes @t from @r's outstanding list and frees its hits area. */
void sd_job__task_unlink(struct sd_job__ring *r, struct sd_job__task *t);
/* Queues unit @u to be streamed again (after an agent loss). */
int sd_job__unit_redo(struct sd_job *job, size_t u);
void sd_job__drain_set(struct sd_job *job, int on);
/* Hands @r one more task. Returns 1 when a unit was taken (streamed, or
 * failed for good), 0 when there is nothing to take or the send must wait. */
int sd_job__ring_feed(struct sd_job *job, struct sd_job__ring *r);
/* @t has its completion and every chunk stored: its result counts. */
void sd_job__task_finish(struct sd_job *job, struct sd_job__ring *r, struct sd_job__task *t);

/* ---- job_stream.c (the loop's side of the streaming path) ---- */

/* Sets up the rings (buffers, threads) when the job streams. Returns 0, or
 * -errno with the reason logged (the job then stages whole shards). */
int sd_job__stream_setup(struct sd_job *job);
/* The streaming step (sd_job_step after the path was decided). */
int sd_job__stream_step(struct sd_job *job, int *timeout_ms_p);
/* Takes the events the ring and check threads posted (from sd_job_staged). */
void sd_job__events_take(struct sd_job *job);
/* Room for @more events in the queue (loop thread). Returns 0 or -ENOMEM. */
int sd_job__events_reserve(struct sd_job *job, size_t more);
/* The client's callbacks for ring tags. */
void sd_job__stream_on_grant(struct sd_job *job, const struct leasec_client_grant *g);
void sd_job__stream_on_completion(struct sd_job *job, const struct leasec_client_completion *c);
void sd_job__stream_on_release(struct sd_job *job, const struct leasec_client_release *r);
void sd_job__stream_on_error(struct sd_job *job, const struct leasec_client_error *e);
void sd_job__stream_on_reply(struct sd_job *job, const struct leasec_client_reply *r);
void sd_job__stream_on_disconnect(struct sd_job *job, unsigned agent);
/* Abandon: the threads stop, every buffer stays out of the pool. */
void sd_job__stream_abandon(struct sd_job *job, const char *why);
/* Stops and joins the threads and frees what the path holds. */
void sd_job__stream_free(struct sd_job *job);
/* The summary's streaming lines. */
void sd_job__stream_report(const struct sd_job *job, FILE *out);
/* Its "staging" line (job_report.c): where the staging threads' time went,
 * and how long the rings took to start. */
void sd_job__staging_report(const struct sd_job *job, FILE *out);
/* Posts an event for the loop (any thread) and wakes it. */
void sd_job__ev_post(struct sd_job *job, const struct sd_job__ev *ev);

/* ---- job_ring.c (a staging thread) ---- */

/* The thread of ring @arg (struct sd_job__ring *). */
void *sd_job__ring_main(void *arg);

/* ---- job_check.c (the CPU check pool) ---- */

/* Starts @threads check threads. Returns 0 or -errno. */
int sd_job__check_start(struct sd_job *job, unsigned threads);
/* Queues shard @idx for a CPU check; its result comes as SD_JOB__EV_CHECKED. */
int sd_job__check_queue(struct sd_job *job, size_t idx);
/* An EV_CHECKED event: records the shard's CPU verdict. */
void sd_job__check_take(struct sd_job *job, const struct sd_job__ev *ev);
/* Stops and joins the threads (their queue dropped). NULL-safe. */
void sd_job__check_stop(struct sd_job *job);
/* Checks @len payload bytes at @buf (payload offset @off, a block
 * multiple) against @table: 0, or -EBADMSG with @fault. The one place the
 * block hash is called for --cpu-verify: a faster bit-identical hash
 * replaces kr_block_verify here. */
int sd_job__check_blocks(const unsigned char *buf, uint64_t off, uint64_t len, uint32_t block_size,
                         const uint64_t *table, struct sd_shard_fault *fault);

/* ---- job_agents.c (spreading work over several agents) ---- */

/* The ready agent with @caps (0: any) that has the fewest of @load's bytes
 * (one entry per agent); ties go round robin from job->rr, which moves
 * past the one picked. Returns its index, or -ENOTCONN with none ready. */
int sd_job__agent_pick(struct sd_job *job, const uint64_t *load, uint32_t caps);
/* Each agent's bytes in flight on the whole-shard path into @load (nagents
 * entries): the leases asked for or held of shards not finished. */
void sd_job__agent_load_slots(const struct sd_job *job, uint64_t *load);
/* The same on the streaming path: the images of the tasks each agent's
 * rings have out. */
void sd_job__agent_load_rings(const struct sd_job *job, uint64_t *load);
/* Shard work finished on agent @a: @bytes of payload with a result. */
void sd_job__agent_done(struct sd_job *job, unsigned a, uint64_t bytes);
/* Feeds the open rings one task at a time, each to a ring of the agent
 * with the fewest bytes in flight; @may_feed says whether the rate limit
 * lets the next task go (it lowers *@timeout_ms_p). */
void sd_job__rings_feed(struct sd_job *job, int (*may_feed)(const struct sd_job *, uint64_t, int *),
                        uint64_t now, int *timeout_ms_p);
/* How long a job with several agents waits, once one is ready, for the
 * others before it sets out (rings are placed once, at the start). */
#define SD_JOB__AGENTS_GRACE_NS 1000000000ull
/* ... and for one still in its handshake or segment offers. */
#define SD_JOB__AGENTS_COMING_NS 10000000000ull
/* Whether the job may set out: one agent, all ready, none ready (the
 * no-agent rules apply), or the grace spent (the longer one while an agent
 * is connecting); else 0 with *@timeout_ms_p lowered to the grace's end. */
int sd_job__agents_settled(struct sd_job *job, unsigned nready, uint64_t now, int *timeout_ms_p);
/* Puts ring @r's staging thread on the CPUs, and asks for its slots'
 * pages on the node, of agent @a's GPU where the machine has more than one
 * NUMA node (base/numa.h); the decision is made and logged once per agent.
 * Best effort: a failure is logged, the ring runs where it is. */
void sd_job__ring_place(struct sd_job *job, struct sd_job__ring *r, unsigned a);
/* The summary's per-agent lines, one per agent. */
void sd_job__agents_report(const struct sd_job *job, FILE *out);
/* The same as a JSON array (a new reference; NULL out of memory). */
struct json_t;
struct json_t *sd_job__agents_json(const struct sd_job *job);

/* ---- job_report.c ---- */

/* @b as "12.3 MiB". */
void sd_job__bytes_fmt(uint64_t b, char *buf, size_t len);

/* How the results add up. */
struct sd_job__tally {
    size_t clean, bad, failed, skipped, pending;
    size_t exact; /* shards with exactly one result per op */
};
void sd_job__tally(const struct sd_job__result *res, size_t n, unsigned ops,
                   struct sd_job__tally *t_p);

/* The exit status of results @res[0, n): as sd_job_exit_status. */
int sd_job__status(const struct sd_job__result *res, size_t n);

/* The top @k of every shard's hits for query @q (res[i].scan[q]), merged:
 * writes up to @k hits (their shard field the result's index) to a new
 * array in *@hits_p and their number in *@n_p. Returns 0 (an empty result
 * with no hits: *@hits_p NULL) or -ENOMEM. The caller frees *@hits_p. */
int sd_job__topk_merge(const struct sd_job__result *res, size_t n, uint32_t q, size_t k,
                       struct kn_scan_hit **hits_p, size_t *n_p);

/* The JSON report (job_json.c): as sd_job_report with cfg.json. */
void sd_job__report_json(struct sd_job *job, FILE *out);

/* Merges every query's top-k into job->topk once (out of memory: no rows). */
void sd_job__merge_all(struct sd_job *job);

/* Query @q's number in its file (cfg.query_ids), or @q. */
static inline uint64_t sd_job__query_id(const struct sd_job *job, uint32_t q)
{
    return job->cfg.query_ids ? job->cfg.query_ids[q] : q;
}

#endif /* STAGINGD_JOB_INTERNAL_H */
