/* A job: one op (verify, scan or both) over every shard of a store, pushed
 * through the pipeline DESIGN.md draws: pool buffer -> io_uring read ->
 * lease -> GPU work (behind a doorbell where the agent has one) -> release
 * -> buffer reused only after RELEASE_COMPLETE. At most `inflight` shards
 * are in the pipeline at once, so staging, GPU work and releases overlap.
 *
 * A job owns no thread and no resource of the daemon's: it is driven by the
 * daemon's event loop (sd_job_step, sd_job_staged and the client callbacks
 * forwarded to it), uses the daemon's pool, reader and client, and frees
 * only what it allocated. docs/stagingd.md tells the story; this header is
 * the contract. */
#ifndef STAGINGD_JOB_H
#define STAGINGD_JOB_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/log.h"
#include "base/parse.h"
#include "kernels/scan.h"
#include "lease_types/lease_types.h"
#include "lease/client.h"

struct leasec_pool;
struct sd_reader;
struct sd_job;

/* What a job runs on every shard. */
enum sd_job_op {
    SD_JOB_VERIFY = 1, /* block checksums against the shard's table */
    SD_JOB_SCAN = 2,   /* best match of the query; top-k merged across shards */
    SD_JOB_BOTH = 3,
};

/* The ops' names, for base_parse_enum: verify, scan, both. */
extern const struct base_enum sd_job_op_names[];

/* "verify", "scan", "both", or "?". */
const char *sd_job_op_name(enum sd_job_op op);

/* Parses "verify", "scan" or "both". Returns 0 or -EINVAL. */
int sd_job_op_parse(const char *s, enum sd_job_op *op_p);

/* Whether work waits for a doorbell rung when the shard's read lands. */
enum sd_doorbell_mode {
    SD_DOORBELL_AUTO = 0, /* when the agent grants LT_CAP_DOORBELL */
    SD_DOORBELL_ON = 1,   /* required: a job on an agent without it fails */
    SD_DOORBELL_OFF = 2,  /* plain submits after each read */
};

/* The modes' names, for base_parse_enum: auto, on, off. */
extern const struct base_enum sd_job_doorbell_names[];

/* How a shard's bytes reach the GPU (docs/streaming.md). */
enum sd_job_path {
    /* stream where every agent ready at the start grants LT_CAP_STREAM and
     * the op is verify or scan (each shard crosses the ring once); whole
     * otherwise */
    SD_JOB_PATH_AUTO = 0,
    /* each staging thread reads its shards chunk by chunk into a small ring
     * of pinned slots the GPU copies out behind sequence words */
    SD_JOB_PATH_STREAM = 1,
    /* each shard whole into a pool buffer, one lease and submit per op */
    SD_JOB_PATH_WHOLE = 2,
};

/* The paths' names, for base_parse_enum: auto, stream, whole. */
extern const struct base_enum sd_job_path_names[];

/* Streaming defaults (docs/streaming.md says why). */
#define SD_JOB_CHUNK_DEFAULT (2ull << 20)
#define SD_JOB_RING_SLOTS_DEFAULT 4u
#define SD_JOB_RING_DEPTH_DEFAULT 2u

/* A job's settings (the daemon's config holds one: docs/stagingd.md lists
 * the keys). */
struct sd_job_config {
    unsigned inflight; /* shards staged, leased or worked on at once */
    unsigned batch;    /* leases per LEASE_REQUEST / LEASE_RELEASE at most */
    enum sd_doorbell_mode doorbell;
    int cpu_verify; /* also verify checksums on the CPU after each read */
    uint64_t query_seed;
    unsigned k;
    uint64_t rate_limit; /* staged bytes per second at most; 0: unbounded */
    unsigned agent_timeout_s;
    int list; /* a result row per shard, not only for failures */
    /* streaming (appended; 0 is each one's default) */
    enum sd_job_path path;
    uint64_t chunk_size; /* bytes per ring slot (a multiple of 4 KiB) */
    unsigned ring_slots; /* slots per ring */
    unsigned ring_depth; /* shards each ring has queued on the agent at once */
    unsigned rings;      /* rings (one staging thread each); 0: the reader's thread count */
    /* --cpu-verify: 0 checks each chunk on the staging thread that read it
     * (stream) or each shard after its read (whole); N > 0 hands every
     * shard to N check threads, off the staging path */
    unsigned cpu_verify_threads;
    /* The scan's queries from a file (`stagingd job --query`), borrowed:
     * they outlive the job. nqueries 0: the one query query_seed makes.
     * Each shard is staged once and scanned once per query. */
    const float *queries;      /* nqueries x query_dim floats */
    const uint64_t *query_ids; /* each query's row in its file, for the report; NULL: 0, 1, ... */
    const char *query_source;  /* the file, for the report; may be NULL */
    uint32_t nqueries;         /* 0..SD_JOB_QUERIES_MAX */
    uint32_t query_dim;        /* every shard's dim must be this */
    int json;                  /* sd_job_report writes one JSON document */
};

/* Queries one job takes at most (each one a scan submit per shard). */
#define SD_JOB_QUERIES_MAX 10000u

/* Tags a job puts on its client requests carry this kind in bits 0..3;
 * the daemon keeps SD_JOB_TAG_DAEMON for its own requests. */
#define SD_JOB_TAG_KIND_MASK 0xfull
#define SD_JOB_TAG_DAEMON 0xfull

/* Finds the stream a slot's work goes on for @agent: 0 and the stream, or
 * -ENOENT for the default stream. */
typedef int (*sd_job_stream_fn)(void *ctx, unsigned agent, unsigned slot,
                                struct lt_stream_id *stream_p);

/* What the daemon lends a job. Everything is borrowed and outlives the job. */
/* Slot i's part of an agent's words area (LEASEC_CAP_WORDS): its done word
 * at SD_JOB_WORDS_STRIDE * i, its scan hits 64 bytes further (up to
 * LT_SCAN_MAX_K of 16 bytes). The daemon asks each agent for this times its
 * slots, rounded up to 4 KiB. */
#define SD_JOB_WORDS_STRIDE 1088u
#define SD_JOB_WORDS_HITS 64u

struct sd_job_env {
    unsigned id; /* the job's number, for logs and tags (1..255, wrapping) */
    struct leasec_pool *pool;
    struct sd_reader *reader;
    struct leasec_client *client;
    unsigned nagents;
    const char *const *agent_paths; /* [nagents], for messages; may be NULL */
    /* Doorbell and done words: slot i's bell at words[8 * i], its done word
     * at words[8 * i + 1] (one 64-byte line per slot), in the MAPPED segment
     * with client key @words_segment at @words_offset. The done word (and a
     * scan's hits) go to the agent's words area instead where it gave one
     * (SD_JOB_WORDS_STRIDE): the pool's segments are read-only to it. */
    uint64_t *words;
    uint32_t words_segment;
    uint64_t words_offset;
    unsigned words_slots; /* >= the job's inflight */
    uint64_t *seq;        /* the daemon's doorbell sequence, increasing across jobs */
    int notify_fd;        /* an eventfd the job's read completions write to */
    sd_job_stream_fn stream;
    void *stream_ctx;
    struct base_log_sink log;     /* where the job's lines go (no subsystem) */
    struct base_log_file *status; /* the terminal's status line for progress; NULL: none */
};

/* Opens the store at @store and prepares a job of @op over it with the
 * settings of @cfg (copied). Nothing is read or requested yet.
 * Returns 0 and *@job_p; -EINVAL (bad settings, or a store whose shards the
 * pool cannot hold), the codes of sd_store_open, -ENOMEM; @err says why. */
int sd_job_create(const struct sd_job_config *cfg, const char *store, enum sd_job_op op,
                  const struct sd_job_env *env, char *err, size_t err_len, struct sd_job **job_p);

/* Frees the job. It must have finished (sd_job_step returned 1); buffers
 * the agent never gave back stay out of the pool. NULL is a no-op. */
void sd_job_destroy(struct sd_job *job);

/* ---- driving (the daemon's loop thread only) ---- */

/* Does what can be done now: starts shards, sends batched lease requests,
 * submits, batched releases, finishes shards. Returns 1 once every shard
 * has a result and no slot is busy, else 0; *@timeout_ms_p is the longest
 * the loop should sleep before calling again (-1: until an event). */
int sd_job_step(struct sd_job *job, int *timeout_ms_p);

/* Takes the reads that landed (after notify_fd fired). */
void sd_job_staged(struct sd_job *job);

/* Stops starting shards; those not started end as "not run: @why". In-flight
 * shards finish and release their leases. Idempotent. */
void sd_job_cancel(struct sd_job *job, const char *why);

/* Shutdown after the drain timeout: cancels, fails every in-flight shard and
 * forgets its lease and work (the agent reclaims them when the connection
 * closes). The job finishes as soon as its reads have landed. */
void sd_job_abandon(struct sd_job *job, const char *why);

/* The client's callbacks, forwarded by the daemon for tags that are not its
 * own (tag kind != SD_JOB_TAG_DAEMON). */
void sd_job_on_grant(struct sd_job *job, const struct leasec_client_grant *g);
void sd_job_on_completion(struct sd_job *job, const struct leasec_client_completion *c);
void sd_job_on_release(struct sd_job *job, const struct leasec_client_release *r);
void sd_job_on_error(struct sd_job *job, const struct leasec_client_error *e);
void sd_job_on_disconnect(struct sd_job *job, unsigned agent);
/* Replies to the job's ring requests (RING_OPEN, RING_CLOSE). */
void sd_job_on_reply(struct sd_job *job, const struct leasec_client_reply *r);

/* ---- results ---- */

/* Asks every ready agent for its stats (STATS_REQUEST, blocking up to
 * @timeout_ms each) for the report. Call once the job has finished. */
void sd_job_agent_stats(struct sd_job *job, int timeout_ms);

/* Prints the result rows to @out: failures always, one line for all the
 * shards not run (count, first names and why), every shard with `list`;
 * then the merged top-k of each query (its rows named by their global row
 * number in the store: manifest order, then record order) and the summary.
 * With cfg.json, one JSON document instead (docs/stagingd.md). */
void sd_job_report(struct sd_job *job, FILE *out);

/* One line of progress: "job 1 verify: 5/16 shards, ...". */
void sd_job_progress(const struct sd_job *job, char *buf, size_t len);

/* The last line of a finished job, saying its verdict first: "job 1
 * verify: OK: ...", "... CORRUPT: ..." or "... FAILED: N of M shards done,
 * F failed, S not run (why); exit status 1". */
void sd_job_outcome(const struct sd_job *job, char *buf, size_t len);

/* 0: every shard done and clean; 3: done, but corrupt blocks were found;
 * 1: some shard failed or was not run. */
int sd_job_exit_status(const struct sd_job *job);

/* The store path and op the job was created with. */
const char *sd_job_store(const struct sd_job *job);
enum sd_job_op sd_job_op_get(const struct sd_job *job);

/* The staging buffer a shard of @e needs in a job of @op with @cfg: its
 * payload (rounded up to 4 KiB), its checksum table (verify), and for the
 * scan every query and the hits the agent writes for each. The daemon
 * sizes its pool segments by the largest. */
struct sd_store_entry;
uint64_t sd_job_buffer_size(const struct sd_job_config *cfg, enum sd_job_op op,
                            const struct sd_store_entry *e);

/* ---- introspection (the daemon's control commands and metrics) ---- */

/* The job's counters so far (shards by result: those without one yet are
 * in none of the four). */
struct sd_job_counters {
    uint64_t shards, shards_clean, shards_bad, shards_failed, shards_not_run;
    uint64_t bytes_total, bytes_staged;
    uint64_t leases_granted, leases_released, leases_lost, leases_refused;
    uint64_t lease_batches, release_batches;
    uint64_t submits, bell_submits, completions, resubmits, staged_fallback, bad_blocks;
};
void sd_job_counters_get(const struct sd_job *job, struct sd_job_counters *c_p);

/* The job's work on agent @agent so far (docs/multi-gpu.md): shards whose
 * result came from it, their payload bytes, the rate over the job's time
 * so far, and what it had in flight when lost, sent to the others.
 * Returns 0, or -ENOENT for an agent the job does not have. */
struct sd_job_agent_figures {
    uint64_t shards, bytes, moved;
    double gb_per_s;
};
int sd_job_agent_figures_get(const struct sd_job *job, unsigned agent,
                             struct sd_job_agent_figures *f_p);

/* One slot of the pipeline. Strings are static or the job's, valid until
 * the next step. */
struct sd_job_slot_info {
    int active;        /* holds a shard */
    const char *shard; /* its file name; NULL when idle */
    /* "none", "wanted", "requested", "held", "release-wanted", "releasing" */
    const char *lease_state;
    int has_lease; /* @lease is valid: held or being released */
    struct leasec_client_lease lease;
    const char *read;      /* "none", "running", "done" */
    unsigned ops_todo;     /* ops (verify, scan) still without a result: 0..2 */
    unsigned ops_inflight; /* of those, submitted and unanswered */
};

/* The number of slots (the job's inflight). */
unsigned sd_job_slot_count(const struct sd_job *job);

/* Slot @slot. Returns 0, or -ENOENT past the last. */
int sd_job_slot_get(const struct sd_job *job, unsigned slot, struct sd_job_slot_info *info_p);

/* ---- the query (shared with tests computing the reference) ---- */

/* The scan's query for records of @dim elements: @dim floats drawn like a
 * generated record (sd_gen_records) keyed by (@seed, UINT64_MAX), rounded
 * to f16 and back when @type is f16, so the agent and a CPU reference see
 * the same values. */
void sd_job_query_make(uint64_t seed, uint32_t type, uint32_t dim, float *query_p);

#endif /* STAGINGD_JOB_H */
