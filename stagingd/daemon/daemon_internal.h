/* What the daemon's files share. They depend one way: daemon.c (resources,
 * the event loop, jobs, control commands, shutdown) calls daemon_agents.c
 * (the lease client's callbacks and the agent notices), daemon_pool.c
 * (sizing the pool), daemon_json.c (the machine-readable control replies),
 * and daemon_metrics.c (the /metrics endpoint, which daemon_agents.c feeds
 * too); none calls back into daemon.c. systemd's readiness protocol is
 * base/notify.h, shared with the agent. */
#ifndef STAGINGD_DAEMON_INTERNAL_H
#define STAGINGD_DAEMON_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/time.h"
#include "base/u64map.h"
#include "stagingd/daemon.h"
#include "lease/client.h"

/* The streams the daemon made on one agent connection, one per slot. */
struct sd_daemon__streams {
    uint32_t epoch;
    struct lt_stream_id *ids;
    unsigned char *valid;
};

struct sd_daemon__req {
    struct sd_daemon__req *next;
    char store[SD_CONFIG_PATH_MAX];
    enum sd_job_op op;
    uint64_t conn;
};

struct sd_daemon {
    struct sd_config cfg;
    enum sd_daemon_mode mode;
    struct leasec_pool *pool;
    struct sd_reader *reader;
    struct leasec_client *client;
    struct sd_ctl *ctl;
    int epfd, sigfd, evfd;
    struct leasec_pool_buf words;
    int have_words;
    unsigned words_slots;
    uint64_t seq;
    struct sd_daemon__streams *streams;
    struct sd_job *job;
    struct sd_daemon__req *job_req;
    unsigned job_id;
    struct sd_daemon__req *qhead, *qtail;
    unsigned queued;
    unsigned next_id;
    uint64_t jobs_done;
    int stopping, abandoned;
    uint64_t drain_deadline_ns;
    int last_status;
    uint64_t t_start_ns;
    const char *agent_paths[SD_CONFIG_AGENTS_MAX]; /* into cfg.agents, for jobs' messages */
    unsigned char hinted[SD_CONFIG_AGENTS_MAX];    /* "no agent answers" said for it */
    unsigned budget_noted[SD_CONFIG_AGENTS_MAX];   /* classes (bits) refused for a budget */
    uint64_t wait_since_ns, wait_note_ns;          /* a job waits for any agent */
    /* Per agent: lease id (lt_lease_id_to_u64) -> when it was granted
     * (base_now_ns), for `leases` and the hold-time histogram. */
    struct base_u64map lease_since[SD_CONFIG_AGENTS_MAX];
    struct sd_job_counters done;        /* summed over the jobs that finished */
    struct sd_daemon__metrics *metrics; /* NULL: no /metrics endpoint */
};

/* Logs one line through the daemon's sink, subsystem "daemon". */
#define sd_daemon__log(d, level, ...) base_log(&(d)->cfg.log, (level), "daemon", __VA_ARGS__)

static inline uint64_t sd_daemon__round_up(uint64_t v, uint64_t a)
{
    return (v + a - 1) / a * a;
}

/* @b as "1.5 GiB" or "12.0 MiB". */
/* The daemon's sink as liblease-client takes it (the same three fields). */
static inline struct leasec_log sd_daemon__leasec_log(const struct base_log_sink *sink)
{
    return (struct leasec_log){.fn = sink->fn, .ctx = sink->ctx, .max_level = sink->max_level};
}

static inline void sd_daemon__bytes(uint64_t b, char *buf, size_t len)
{
    if (b >= (1ull << 30))
        snprintf(buf, len, "%.1f GiB", (double)b / (double)(1ull << 30));
    else
        snprintf(buf, len, "%.1f MiB", (double)b / (double)(1ull << 20));
}

/* ---- daemon_agents.c ---- */

/* Creates the lease client with the daemon's callbacks, offers it every
 * pool segment and adds every agent of the config (each tries to connect
 * at once). Returns 0 or -errno (logged). */
int sd_daemon__client_open(struct sd_daemon *d);

/* The stream for @slot's work on @agent (struct sd_job_env.stream). */
int sd_daemon__stream(void *ctx, unsigned agent, unsigned slot, struct lt_stream_id *stream_p);

/* Says once per agent that nothing answers at its socket and how to get
 * one there; then, while a job waits for any agent, how long it has
 * waited. Called on every turn of the loop. */
void sd_daemon__agents_watch(struct sd_daemon *d);

/* ---- daemon_pool.c ---- */

/* The largest staging buffer any shard of @store needs in a job of @op
 * with @job (sd_job_buffer_size), or 0 after logging why not. */
uint64_t sd_daemon__largest_buffer(const char *store, const struct sd_job_config *job,
                                   enum sd_job_op op, const struct base_log_sink *log);

/* Creates the pool for @cfg in @mode, with MAPPED room for @words_slots
 * doorbell slots. With @largest known, segments are sized so one segment
 * holds the largest buffer (checked by allocating one) and a one-shot pool
 * holds inflight of them. Returns 0 and *@pool_p, or -errno (logged). */
int sd_daemon__pool_create(const struct sd_config *cfg, enum sd_daemon_mode mode,
                           unsigned words_slots, uint64_t largest, struct leasec_pool **pool_p);

/* ---- daemon_json.c ---- */

/* The one-line JSON reply of `stats json`, `leases json` or `segments
 * json` (@what: "stats", "leases", "segments") into *@text_p (malloc'd,
 * newline-terminated). Returns 0, -ENOENT for another @what, -ENOMEM. */
int sd_daemon__json(struct sd_daemon *d, const char *what, char **text_p);

/* The job counters of every finished job plus the running one's. */
void sd_daemon__totals(const struct sd_daemon *d, struct sd_job_counters *c_p);

/* ---- daemon_metrics.c ---- */

struct sd_daemon__metrics;

/* Starts the endpoint of cfg.metrics (nothing when ""). Returns 0 or
 * -errno (logged: what was wrong and what to change). */
int sd_daemon__metrics_start(struct sd_daemon *d);
void sd_daemon__metrics_stop(struct sd_daemon *d);

/* Copies the daemon's state into the registry when due (every
 * SD_DAEMON__PUBLISH_MS) or when @force. The loop thread only. */
void sd_daemon__metrics_publish(struct sd_daemon *d, int force);

/* The address bound ("127.0.0.1:9464"); "" without metrics. */
const char *sd_daemon__metrics_address(const struct sd_daemon *d);

/* Milliseconds until the next publish is due; -1 without metrics. */
int sd_daemon__metrics_timeout(const struct sd_daemon *d);

/* Events the callbacks see (no-ops without metrics). */
void sd_daemon__metrics_grant(struct sd_daemon *d, unsigned agent,
                              const struct leasec_client_grant_entry *e);
void sd_daemon__metrics_release(struct sd_daemon *d, unsigned agent, uint64_t held_ns);
void sd_daemon__metrics_completion(struct sd_daemon *d, uint16_t op, uint32_t status);
void sd_daemon__metrics_segment_refused(struct sd_daemon *d, unsigned agent, uint32_t mem_class,
                                        uint32_t code);
void sd_daemon__metrics_job_end(struct sd_daemon *d, enum sd_job_op op, int status);

#endif /* STAGINGD_DAEMON_INTERNAL_H */
