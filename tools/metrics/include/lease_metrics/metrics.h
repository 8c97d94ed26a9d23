/* lease_metrics: counters, gauges and histograms a Prometheus server
 * scrapes, in its text exposition format (version 0.0.4), served over HTTP
 * by libmicrohttpd on a background thread. Both daemons use it; it is not
 * part of base/ (which is libc only) because the server needs the library.
 *
 * A registry holds families (one metric name, its HELP and TYPE, its label
 * names); a family holds series (one set of label values, one value). A
 * program declares its families once at start, keeps the series pointers it
 * updates often, and starts the server:
 *
 *     struct lm_registry *reg;  struct lm_family *f;  struct lm_series *s;
 *     lm_registry_create(&reg);
 *     lm_family_add(reg, LM_COUNTER, "app_bytes_total", "Bytes moved.", NULL, NULL, 0, &f);
 *     lm_series_get(f, NULL, &s);               // a family without labels: its one series
 *     lm_counter_add(s, 4096);                  // from any thread
 *     struct lm_server_config sc = {.listen = "127.0.0.1:9464"};
 *     lm_server_start(reg, &sc, err, sizeof err, &srv);   // GET /metrics
 *
 * Threads: every call is safe from any thread. Updates are lock-free
 * (atomic); declaring families and making series take the registry's lock,
 * as does rendering. A collect callback (lm_registry_collect_set) runs on
 * the rendering thread before each render, for values cheaper to read at
 * scrape time than to keep current.
 *
 * Ownership: families and series belong to the registry and live until
 * lm_registry_destroy; the server borrows the registry, which must outlive
 * it. Strings passed in are copied. */
#ifndef LEASE_METRICS_METRICS_H
#define LEASE_METRICS_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "base/log.h"

#ifdef __cplusplus
extern "C" {
#endif

enum lm_type {
    LM_COUNTER = 1,   /* only goes up; its name should end in _total */
    LM_GAUGE = 2,     /* goes up and down */
    LM_HISTOGRAM = 3, /* observations counted into buckets, with their sum and count */
};

#define LM_LABELS_MAX 4    /* label names per family */
#define LM_BUCKETS_MAX 32  /* histogram bounds, +Inf not counted */
#define LM_SERIES_MAX 4096 /* series per family */
#define LM_NAME_MAX 128    /* bytes of a metric or label name, NUL included */
#define LM_VALUE_MAX 256   /* bytes of a label value, NUL included */
#define LM_HELP_MAX 512    /* bytes of a HELP text, NUL included */

struct lm_registry;
struct lm_family;
struct lm_series;

/* ---- the registry ---- */

/* Returns 0 and *@reg_p, or -ENOMEM. */
int lm_registry_create(struct lm_registry **reg_p);

/* Frees every family and series. No server may still use it. NULL: no-op. */
void lm_registry_destroy(struct lm_registry *reg);

/* Declares a family. @name: [a-zA-Z_:][a-zA-Z0-9_:]*; @help: 1..LM_HELP_MAX-1
 * bytes of UTF-8 (escaped on output); @labels: a NULL-terminated list of
 * at most LM_LABELS_MAX names [a-zA-Z_][a-zA-Z0-9_]* not starting "__" (and
 * not "le" for a histogram), or NULL for none. A histogram takes @nbuckets
 * (1..LM_BUCKETS_MAX) finite upper bounds in @buckets, strictly
 * increasing; +Inf is implied. A family without labels gets its one series
 * at once, so it is rendered (as 0) before its first update.
 * Returns 0 and *@fam_p; -EINVAL for a bad name, help, label or bucket
 * list; -EEXIST for a name already declared; -ENOMEM. */
int lm_family_add(struct lm_registry *reg, enum lm_type type, const char *name, const char *help,
                  const char *const *labels, const double *buckets, size_t nbuckets,
                  struct lm_family **fam_p);

/* The family declared as @name, or NULL. */
struct lm_family *lm_family_find(struct lm_registry *reg, const char *name);

/* The series of @fam with @values (one per label name, any UTF-8 up to
 * LM_VALUE_MAX-1 bytes; NULL for a family without labels), made on first
 * use. Keep the pointer: it is valid until lm_registry_destroy.
 * Returns 0 and *@s_p; -EINVAL (a NULL or too long value, values for a
 * family without labels); -ENOSPC past LM_SERIES_MAX; -ENOMEM. */
int lm_series_get(struct lm_family *fam, const char *const *values, struct lm_series **s_p);

/* Drops every series of @fam, a family with labels, for series that mirror
 * a set that changes (connected clients), remade at each collect: pointers
 * to its series become invalid, so only the collect callback should hold
 * them. Returns 0, or -EINVAL for a family without labels (its one series
 * stays). */
int lm_family_clear(struct lm_family *fam);

/* Called before each render on the rendering thread (a scrape), with no
 * lock of the registry's held: it may update and make series. One at a
 * time; NULL @fn removes it. Returns 0. */
typedef void (*lm_collect_fn)(void *ctx, struct lm_registry *reg);
int lm_registry_collect_set(struct lm_registry *reg, lm_collect_fn fn, void *ctx);

/* ---- updates (any thread, lock-free) ---- */

/* Adds @v (>= 0; a negative or NaN @v is ignored) to a counter. */
void lm_counter_add(struct lm_series *s, double v);

/* Mirrors a counter kept elsewhere: sets the series to @total unless that
 * would take it down (a counter never goes down; a smaller @total is
 * ignored). */
void lm_counter_set(struct lm_series *s, double total);

void lm_gauge_set(struct lm_series *s, double v);
void lm_gauge_add(struct lm_series *s, double v);

/* Counts @v into the first bucket whose bound is >= @v (or +Inf) and adds
 * it to the sum. */
void lm_histogram_observe(struct lm_series *s, double v);

/* A counter's or gauge's value; a histogram's sum. */
double lm_series_value(const struct lm_series *s);

/* ---- the text exposition format ---- */

/* Runs the collect callback, then renders every family (in the order
 * declared) and series (in the order made) as "# HELP", "# TYPE" and
 * sample lines. *@text_p (NUL-terminated, @len_p bytes without the NUL) is
 * the caller's to free(). Returns 0 or -ENOMEM. */
int lm_registry_render(struct lm_registry *reg, char **text_p, size_t *len_p);

/* The Content-Type of that text. */
#define LM_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* ---- the HTTP endpoint ---- */

struct lm_server;

enum {
    /* Bind an address that is not loopback (127.0.0.0/8, ::1). Without it
     * such an address is refused: metrics stay on the machine unless the
     * operator asks. */
    LM_SERVER_ALLOW_REMOTE = 1u << 0,
};

struct lm_server_config {
    const char *listen; /* "127.0.0.1:9464", "[::1]:9464", "localhost:9464", "0.0.0.0:9464"; port 0:
                           any free port */
    unsigned flags;     /* LM_SERVER_* */
    struct base_log_sink log; /* the server's notices, subsystem "metrics"; zeroed: the default */
};

/* Parses "HOST:PORT" (HOST an IPv4 address, "[IPv6]" or "localhost"; no
 * name lookups) and checks it against @flags. Returns 0 and fills
 * *@addr_p (a struct sockaddr_in or _in6, @addr_len bytes at least 28) and
 * *@addr_len_p; -EINVAL for a malformed address; -EPERM for an address that
 * is not loopback without LM_SERVER_ALLOW_REMOTE. @err (may be NULL) says
 * what was expected and found. */
int lm_listen_parse(const char *text, unsigned flags, void *addr_p, size_t addr_len,
                    size_t *addr_len_p, char *err, size_t err_len);

/* Binds @cfg->listen and serves @reg on one background thread: GET or HEAD
 * /metrics renders it, / says where the metrics are, anything else is 404
 * (405 for other methods). At most 16 connections, 10 s idle timeout.
 * Returns 0 and *@srv_p; lm_listen_parse's codes; -ENOTSUP when built
 * without libmicrohttpd; bind(2)'s -errno (-EADDRINUSE ...); -ENOMEM.
 * @err says why. */
int lm_server_start(struct lm_registry *reg, const struct lm_server_config *cfg, char *err,
                    size_t err_len, struct lm_server **srv_p);

/* The port bound (the one chosen for port 0). */
uint16_t lm_server_port(const struct lm_server *srv);

/* "127.0.0.1:9464": the address bound, for log lines. */
const char *lm_server_address(const struct lm_server *srv);

/* Stops the thread, closes every connection and the socket, frees @srv.
 * NULL: no-op. */
void lm_server_stop(struct lm_server *srv);

/* 1 when this build serves HTTP (libmicrohttpd was found), else 0. */
int lm_server_available(void);

#ifdef __cplusplus
}
#endif

#endif /* LEASE_METRICS_METRICS_H */
