/* leasectl: the operator's command line against a running agent and
 * stagingd (docs/operations.md). The files depend one way: main.c (options,
 * commands) over views.c (the tables and JSON documents of status, stats,
 * leases and segments, and the snapshot they show), prom.c (the same as
 * Prometheus text), lists.c (the agent's LEASE_LIST and SEGMENT_LIST in
 * each format), top.c (the refreshing view) and doctor.c (the checks); all
 * of them over agent.c (one protocol connection to an agent),
 * stagingd.c (one control-socket command) and table.c. CUDA-free: it never loads
 * libcuda (linkcheck proves it after every link); the driver is read from
 * /proc and nvidia-smi. Prefix lctl_. */
#ifndef LEASECTL_H
#define LEASECTL_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "lease_types/proto.h"

#define LCTL_PATH_MAX 108 /* sizeof(sun_path) */
#define LCTL_AGENTS_MAX 16
#define LCTL_ERR_LEN 512

/* ---- agent.c: what the protocol (v1, and 1.4's lists) lets a client see ---- */

/* One agent, as one HELLO + STATS_REQUEST(ALL_CLIENTS) saw it, and the
 * lists (LEASE_LIST, SEGMENT_LIST) when it granted LT_CAP_INTROSPECT. */
struct lctl_agent {
    char path[LCTL_PATH_MAX];
    int up;                 /* HELLO answered */
    int have_stats;         /* STATS_REPLY answered */
    char err[LCTL_ERR_LEN]; /* why not, and what to do */
    pid_t pid;              /* SO_PEERCRED of the agent */
    uid_t uid;
    double rtt_ms; /* the STATS round trip */
    struct lt_msg_hello_reply hello;
    uint64_t uptime_ns;
    struct lt_class_stats classes[4];
    uint32_t nclients;
    struct lt_client_stats clients[LT_MAX_STATS_CLIENTS];
    uint32_t self_id; /* leasectl's own connection, left out of the client lists */
    int lists;        /* the agent granted LT_CAP_INTROSPECT (1.4) */
    int have_leases;  /* every page of LEASE_LIST answered */
    int have_segments;
    char list_err[LCTL_ERR_LEN]; /* why a list asked for was not answered */
    struct lt_lease_info *leases; /* malloc'ed; lctl_agent_free */
    uint32_t nleases;
    struct lt_segment_info *segments;
    uint32_t nsegments;
};

/* Connects to @path (SOCK_SEQPACKET), says HELLO as "leasectl" asking for
 * no capability, asks STATS for every client, closes. A connection that
 * holds nothing and leaves at once: real clients are not disturbed.
 * Fills *@a (a->up / a->err tell how far it got). Returns 0 when both
 * answers came, else -errno (a->err says why). */
int lctl_agent_query(const char *path, int timeout_ms, struct lctl_agent *a);

/* As lctl_agent_query, asking for LT_CAP_INTROSPECT too and, when it is
 * granted, paging through the lists @what names (LCTL_WANT_LEASES,
 * LCTL_WANT_SEGMENTS) after STATS; a refused list leaves a->list_err. The
 * arrays are the caller's: lctl_agent_free. */
int lctl_agent_query_lists(const char *path, int timeout_ms, unsigned what, struct lctl_agent *a);

/* Frees the lists of @a (safe on one never queried, zeroed). */
void lctl_agent_free(struct lctl_agent *a);

/* What agents before 1.4 (no LT_CAP_INTROSPECT) cannot answer: "the agent
 * at PATH does not offer WHAT (protocol vN): ..." in @buf. @what: "a
 * per-lease listing" ... */
void lctl_agent_missing(const struct lctl_agent *a, const char *what, const char *request,
                        char *buf, size_t len);

/* ---- stagingd.c: the control socket ---- */

/* Sends @command to the control socket @path and reads the reply up to its
 * "ok" / "error: ..." line. A JSON reply (first line) is parsed into
 * *@reply_p (the caller's to json_decref). Returns 0; -errno with @err
 * saying why (connect failed, the daemon answered an error). */
int lctl_stagingd_json(const char *path, const char *command, int timeout_ms, json_t **reply_p,
                       char *err, size_t err_len);

/* ---- options and the document each command builds ---- */

enum lctl_format { LCTL_HUMAN = 0, LCTL_JSON = 1, LCTL_PROMETHEUS = 2 };

struct lctl_opts {
    char agents[LCTL_AGENTS_MAX][LCTL_PATH_MAX];
    unsigned nagents;
    char stagingd[LCTL_PATH_MAX]; /* "" : none */
    int stagingd_given;
    enum lctl_format format;
    int timeout_ms;
    /* top */
    double interval_s;
    unsigned count; /* 0: until interrupted */
    /* doctor */
    int device;
    int backend; /* 0: ask the agent, 1: cuda, 2: host */
    char store[4096];
    uint64_t pinned_budget, mapped_budget; /* 0: the agent's, else the defaults */
    unsigned arch;                         /* the cubins' arch (digits), LEASE_GPU_ARCH */
};

/* Everything one look at the daemons gathers. */
struct lctl_snapshot {
    struct lctl_agent agents[LCTL_AGENTS_MAX];
    unsigned nagents;
    json_t *sd_stats, *sd_leases, *sd_segments; /* NULL when not asked or not answered */
    char sd_err[LCTL_ERR_LEN];
    int sd_asked;
};

/* Queries every agent and (when asked) stagingd. @what: bits of
 * LCTL_WANT_*. Never fails: what did not answer carries its reason. */
enum { LCTL_WANT_STATS = 1, LCTL_WANT_LEASES = 2, LCTL_WANT_SEGMENTS = 4 };
void lctl_snapshot_take(const struct lctl_opts *o, unsigned what, struct lctl_snapshot *s);
void lctl_snapshot_free(struct lctl_snapshot *s);

/* views.c: each prints @s in @o->format to @out. Returns the exit status:
 * 0 when every daemon asked answered, 1 otherwise. */
int lctl_view_status(const struct lctl_opts *o, const struct lctl_snapshot *s, FILE *out);
int lctl_view_stats(const struct lctl_opts *o, const struct lctl_snapshot *s, FILE *out);
int lctl_view_leases(const struct lctl_opts *o, const struct lctl_snapshot *s, FILE *out);
int lctl_view_segments(const struct lctl_opts *o, const struct lctl_snapshot *s, FILE *out);

/* lists.c: an agent's lists (LEASE_LIST, SEGMENT_LIST) as tables, JSON
 * arrays and Prometheus samples; the "does not offer" line for an agent
 * without them. */
void lctl_lists_leases_human(const struct lctl_agent *a, FILE *out);
void lctl_lists_segments_human(const struct lctl_agent *a, FILE *out);
json_t *lctl_lists_leases_json(const struct lctl_agent *a);
json_t *lctl_lists_segments_json(const struct lctl_agent *a);
struct lm_registry;
/* Adds the lists' samples for @a to @reg; returns -1 when one could not be made. */
int lctl_lists_prometheus(struct lm_registry *reg, const struct lctl_agent *a, unsigned what);

/* prom.c: the Prometheus text of what @what asks for (LCTL_WANT_*). */
int lctl_view_prometheus(const struct lctl_opts *o, const struct lctl_snapshot *s, unsigned what,
                         FILE *out);

/* top: a refreshing status + stats with rates, every interval, @count times
 * (0: until SIGINT). Returns the exit status. */
int lctl_top(const struct lctl_opts *o, FILE *out);

/* doctor.c: every check, one line each. Returns 0 when all are OK, 1 when
 * any says FIX. */
int lctl_doctor(const struct lctl_opts *o, FILE *out);

/* ---- helpers (views.c) ---- */

/* "1.5 GiB", "12.0 MiB", "512 B". */
void lctl_bytes(uint64_t b, char *buf, size_t len);

/* Prints @doc as indented JSON and decrefs it. */
void lctl_json_print(json_t *doc, FILE *out);

#endif /* LEASECTL_H */
