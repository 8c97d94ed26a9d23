/* What the daemon's files share. They depend one way: daemon.c (resources,
 * the event loop, jobs, control commands, shutdown) calls daemon_agents.c
 * (the lease client's callbacks and the agent notices) and daemon_pool.c
 * (sizing the pool); neither calls back. */
#ifndef STAGINGD_DAEMON_INTERNAL_H
#define STAGINGD_DAEMON_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/time.h"
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
};

/* Logs one line through the daemon's sink: no subsystem. */
#define sd_daemon__log(d, level, ...) base_log(&(d)->cfg.log, (level), "", __VA_ARGS__)

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

#endif /* STAGINGD_DAEMON_INTERNAL_H */
