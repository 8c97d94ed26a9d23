/* status, stats, leases and segments: one snapshot of the daemons, shown
 * as human tables (default) or one JSON document (--json, jansson).
 * --prometheus is prom.c. Agent facts come from HELLO_REPLY and STATS_REPLY
 * (lctl_agent), stagingd's from its JSON control replies. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "leasectl.h"
#include "table.h"

/* ---- helpers ---- */

void lctl_bytes(uint64_t b, char *buf, size_t len)
{
    if (b == UINT64_MAX)
        snprintf(buf, len, "unbounded");
    else if (b >= (1ull << 30))
        snprintf(buf, len, "%.1f GiB", (double)b / (double)(1ull << 30));
    else if (b >= (1ull << 20))
        snprintf(buf, len, "%.1f MiB", (double)b / (double)(1ull << 20));
    else if (b >= (1ull << 10))
        snprintf(buf, len, "%.1f KiB", (double)b / (double)(1ull << 10));
    else
        snprintf(buf, len, "%" PRIu64 " B", b);
}

void lctl_json_print(json_t *doc, FILE *out)
{
    if (!doc) {
        fprintf(out, "{}\n");
        return;
    }
    json_dumpf(doc, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    fputc('\n', out);
    json_decref(doc);
}

static const char *lctl__caps(uint32_t caps, char *buf, size_t len)
{
    static const struct {
        uint32_t bit;
        const char *name;
    } names[] = {{LT_CAP_DOORBELL, "DOORBELL"},
                 {LT_CAP_DONE_WORD, "DONE_WORD"},
                 {LT_CAP_TIMING, "TIMING"},
                 {LT_CAP_RC_BATCH, "RC_BATCH"},
                 {LT_CAP_INTROSPECT, "INTROSPECT"},
                 {LT_CAP_HOST_BACKEND, "HOST_BACKEND"}};
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (caps & names[i].bit)
            n += (size_t)snprintf(buf + n, n < len ? len - n : 0, "%s%s", n ? " " : "",
                                  names[i].name);
    if (!n)
        snprintf(buf, len, "none");
    return buf;
}

static const char *lctl__u64(uint64_t v, char *buf, size_t len)
{
    snprintf(buf, len, "%" PRIu64, v);
    return buf;
}

static const char *lctl__bytes_s(uint64_t v, char *buf, size_t len)
{
    lctl_bytes(v, buf, len);
    return buf;
}

/* jansson getters that never fail: 0, "" or 0.0 for a missing member. */
static json_int_t lctl__ji(json_t *o, const char *k)
{
    return json_integer_value(json_object_get(o, k));
}

static const char *lctl__js(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static double lctl__jr(json_t *o, const char *k)
{
    return json_number_value(json_object_get(o, k));
}

/* ---- the snapshot ---- */

void lctl_snapshot_take(const struct lctl_opts *o, unsigned what, struct lctl_snapshot *s)
{
    memset(s, 0, sizeof *s);
    s->nagents = o->nagents;
    for (unsigned i = 0; i < o->nagents; i++)
        lctl_agent_query_lists(o->agents[i], o->timeout_ms, what, &s->agents[i]);
    if (!o->stagingd[0]) {
        snprintf(s->sd_err, sizeof s->sd_err,
                 "no stagingd asked (pass --stagingd SOCK, its control socket)");
        return;
    }
    s->sd_asked = 1;
    char err[LCTL_ERR_LEN];
    if (lctl_stagingd_json(o->stagingd, "stats json", o->timeout_ms, &s->sd_stats, err,
                           sizeof err) < 0) {
        snprintf(s->sd_err, sizeof s->sd_err, "%s", err);
        return;
    }
    if ((what & LCTL_WANT_LEASES) && lctl_stagingd_json(o->stagingd, "leases json", o->timeout_ms,
                                                        &s->sd_leases, err, sizeof err) < 0)
        snprintf(s->sd_err, sizeof s->sd_err, "%s", err);
    if ((what & LCTL_WANT_SEGMENTS) &&
        lctl_stagingd_json(o->stagingd, "segments json", o->timeout_ms, &s->sd_segments, err,
                           sizeof err) < 0)
        snprintf(s->sd_err, sizeof s->sd_err, "%s", err);
}

void lctl_snapshot_free(struct lctl_snapshot *s)
{
    for (unsigned i = 0; i < s->nagents; i++)
        lctl_agent_free(&s->agents[i]);
    json_decref(s->sd_stats);
    json_decref(s->sd_leases);
    json_decref(s->sd_segments);
    memset(s, 0, sizeof *s);
}

/* 0 when everything asked answered. */
static int lctl__status(const struct lctl_snapshot *s)
{
    int bad = 0;
    for (unsigned i = 0; i < s->nagents; i++)
        bad |= !s->agents[i].have_stats || s->agents[i].list_err[0];
    return bad || (s->sd_asked && !s->sd_stats);
}

/* ---- JSON documents ---- */

static json_t *lctl__agent_base(const struct lctl_agent *a)
{
    json_t *o = json_pack("{ss sb}", "path", a->path, "up", a->up);
    if (!a->up || !a->have_stats) {
        json_object_set_new(o, "error", json_string(a->err));
        if (!a->up)
            return o;
    }
    char caps[128];
    const struct lt_msg_hello_reply *h = &a->hello;
    json_t *budgets = json_object();
    for (int c = LT_CLASS_STAGED; c <= LT_CLASS_MAPPED; c++)
        json_object_set_new(budgets, lt_class_name((uint32_t)c),
                            h->class_budget[c] == UINT64_MAX
                                ? json_null()
                                : json_integer((json_int_t)h->class_budget[c]));
    json_t *facts =
        json_pack("{ss si si si ss sb sf s{si si si si sI}}", "name", h->agent_name, "pid",
                  (int)a->pid, "uid", (int)a->uid, "protocol", (int)h->version, "caps",
                  lctl__caps(h->caps, caps, sizeof caps), "host_backend",
                  (h->caps & LT_CAP_HOST_BACKEND) != 0, "uptime_s", (double)a->uptime_ns / 1e9,
                  "limits", "max_lease_batch", (int)h->max_lease_batch, "max_streams",
                  (int)h->max_streams, "max_events", (int)h->max_events, "max_segments",
                  (int)h->max_segments, "max_segment_bytes", (json_int_t)h->max_segment_bytes);
    json_object_update(o, facts);
    json_decref(facts);
    json_object_set_new(o, "budgets", budgets);
    json_object_set_new(o, "clients", json_integer(a->nclients));
    json_object_set_new(o, "stats_rtt_ms", json_real(a->rtt_ms));
    return o;
}

static json_t *lctl__agent_classes(const struct lctl_agent *a)
{
    json_t *l = json_array();
    for (int c = LT_CLASS_STAGED; a->have_stats && c <= LT_CLASS_MAPPED; c++) {
        const struct lt_class_stats *k = &a->classes[c];
        json_array_append_new(
            l, json_pack("{ss sI sI sI sI sI sf sI sI}", "class", lt_class_name((uint32_t)c),
                         "segments", (json_int_t)k->segments, "bytes_registered",
                         (json_int_t)k->bytes_registered, "live_leases", (json_int_t)k->live_leases,
                         "bytes_leased", (json_int_t)k->bytes_leased, "registrations",
                         (json_int_t)k->registrations, "registration_s",
                         (double)k->registration_ns / 1e9, "unregistrations",
                         (json_int_t)k->unregistrations, "budget_refusals",
                         (json_int_t)k->budget_refusals));
    }
    return l;
}

static json_t *lctl__agent_clients(const struct lctl_agent *a)
{
    json_t *l = json_array();
    for (uint32_t i = 0; a->have_stats && i < a->nclients; i++) {
        const struct lt_client_stats *c = &a->clients[i];
        json_array_append_new(
            l, json_pack("{si si ss sI sI sI sI sI sI si si}", "client_id", (int)c->client_id,
                         "pid", (int)c->pid, "name", c->name, "segments", (json_int_t)c->segments,
                         "bytes_registered", (json_int_t)c->bytes_registered, "live_leases",
                         (json_int_t)c->live_leases, "bytes_leased", (json_int_t)c->bytes_leased,
                         "leases_granted", (json_int_t)c->leases_granted, "submits",
                         (json_int_t)c->submits, "streams", (int)c->streams, "events",
                         (int)c->events));
    }
    return l;
}

/* The document: {"agents": [...], "stagingd": {...}}; @fill adds each
 * command's parts. */
static json_t *lctl__doc(const struct lctl_snapshot *s, json_t *(*fill)(const struct lctl_agent *),
                         json_t *sd)
{
    json_t *agents = json_array();
    for (unsigned i = 0; i < s->nagents; i++)
        json_array_append_new(agents, fill(&s->agents[i]));
    json_t *st;
    if (!s->sd_asked)
        st = json_null();
    else if (sd)
        st = json_incref(sd);
    else
        st = json_pack("{sb ss}", "up", 0, "error", s->sd_err);
    return json_pack("{so so}", "agents", agents, "stagingd", st);
}

static json_t *lctl__fill_status(const struct lctl_agent *a)
{
    return lctl__agent_base(a);
}

static json_t *lctl__fill_stats(const struct lctl_agent *a)
{
    json_t *o = lctl__agent_base(a);
    if (a->up) {
        json_object_set_new(o, "classes", lctl__agent_classes(a));
        json_object_set_new(o, "per_client", lctl__agent_clients(a));
    }
    return o;
}

static json_t *lctl__fill_missing(const struct lctl_agent *a, const char *what, const char *req)
{
    json_t *o = lctl__fill_stats(a);
    char msg[LCTL_ERR_LEN];
    lctl_agent_missing(a, what, req, msg, sizeof msg);
    if (a->up)
        json_object_set_new(o, "not_offered", json_string(msg));
    return o;
}

/* The list, its refusal, or (an agent before 1.4) what it does not offer. */
static json_t *lctl__fill_list(const struct lctl_agent *a, const char *key,
                               json_t *(*list)(const struct lctl_agent *), const char *what,
                               const char *req)
{
    if (!a->lists)
        return lctl__fill_missing(a, what, req);
    json_t *o = lctl__fill_stats(a);
    if (a->list_err[0])
        json_object_set_new(o, "list_error", json_string(a->list_err));
    else
        json_object_set_new(o, key, list(a));
    return o;
}

static json_t *lctl__fill_leases(const struct lctl_agent *a)
{
    return lctl__fill_list(a, "leases", lctl_lists_leases_json, "a per-lease listing",
                           "LEASE_LIST_REQUEST");
}

static json_t *lctl__fill_segments(const struct lctl_agent *a)
{
    return lctl__fill_list(a, "segments", lctl_lists_segments_json, "a per-segment listing",
                           "SEGMENT_LIST_REQUEST");
}

/* ---- human: agents ---- */

static void lctl__agent_head(const struct lctl_agent *a, FILE *out)
{
    if (!a->up) {
        fprintf(out, "agent %s: DOWN: %s\n", a->path, a->err);
        return;
    }
    const struct lt_msg_hello_reply *h = &a->hello;
    fprintf(
        out, "agent %s: up, \"%s\"%s, protocol v%u, pid %ld uid %u, up %.1f s, %u other client(s)",
        a->path, h->agent_name, (h->caps & LT_CAP_HOST_BACKEND) ? " (HOST BACKEND: no GPU)" : "",
        h->version, (long)a->pid, (unsigned)a->uid, (double)a->uptime_ns / 1e9, a->nclients);
    if (a->have_stats)
        fprintf(out, ", STATS round trip %.2f ms\n", a->rtt_ms);
    else
        fprintf(out, "\n  STATS: %s\n", a->err);
}

static void lctl__agent_status(const struct lctl_agent *a, FILE *out)
{
    lctl__agent_head(a, out);
    if (!a->up)
        return;
    const struct lt_msg_hello_reply *h = &a->hello;
    char caps[128], seg[32], b[3][32];
    fprintf(out, "  caps %s; limits: batch %u, %u streams, %u events, %u segments of at most %s\n",
            lctl__caps(h->caps, caps, sizeof caps), h->max_lease_batch, h->max_streams,
            h->max_events, h->max_segments, lctl__bytes_s(h->max_segment_bytes, seg, sizeof seg));
    fprintf(out, "  budgets: PINNED %s, MAPPED %s, STAGED %s\n",
            lctl__bytes_s(h->class_budget[LT_CLASS_PINNED], b[0], sizeof b[0]),
            lctl__bytes_s(h->class_budget[LT_CLASS_MAPPED], b[1], sizeof b[1]),
            lctl__bytes_s(h->class_budget[LT_CLASS_STAGED], b[2], sizeof b[2]));
}

static void lctl__agent_classes_table(const struct lctl_agent *a, FILE *out)
{
    static const char *const head[] = {
        "class",         "segments", "registered",      "leases",          "leased",
        "registrations", "reg time", "unregistrations", "budget refusals", NULL};
    struct lctl_table t;
    lctl_table_init(&t, "  ", head);
    for (int c = LT_CLASS_STAGED; c <= LT_CLASS_MAPPED; c++) {
        const struct lt_class_stats *k = &a->classes[c];
        char v[8][32];
        snprintf(v[6], sizeof v[6], "%.1f ms", (double)k->registration_ns / 1e6);
        lctl_table_row(
            &t, lt_class_name((uint32_t)c), lctl__u64(k->segments, v[0], 32),
            lctl__bytes_s(k->bytes_registered, v[1], 32), lctl__u64(k->live_leases, v[2], 32),
            lctl__bytes_s(k->bytes_leased, v[3], 32), lctl__u64(k->registrations, v[4], 32), v[6],
            lctl__u64(k->unregistrations, v[5], 32), lctl__u64(k->budget_refusals, v[7], 32));
    }
    lctl_table_print(&t, out);
    lctl_table_free(&t);
}

static void lctl__agent_clients_table(const struct lctl_agent *a, FILE *out)
{
    if (a->nclients == 0) {
        fprintf(out, "  no client connected but leasectl\n");
        return;
    }
    static const char *const head[] = {"client",     "pid",     "name",   "segments",
                                       "registered", "leases",  "leased", "granted",
                                       "submits",    "streams", "events", NULL};
    struct lctl_table t;
    lctl_table_init(&t, "  ", head);
    for (uint32_t i = 0; i < a->nclients; i++) {
        const struct lt_client_stats *c = &a->clients[i];
        char v[10][32];
        lctl_table_row(
            &t, lctl__u64(c->client_id, v[0], 32), lctl__u64(c->pid, v[1], 32), c->name,
            lctl__u64(c->segments, v[2], 32), lctl__bytes_s(c->bytes_registered, v[3], 32),
            lctl__u64(c->live_leases, v[4], 32), lctl__bytes_s(c->bytes_leased, v[5], 32),
            lctl__u64(c->leases_granted, v[6], 32), lctl__u64(c->submits, v[7], 32),
            lctl__u64(c->streams, v[8], 32), lctl__u64(c->events, v[9], 32));
    }
    lctl_table_print(&t, out);
    lctl_table_free(&t);
}

/* ---- human: stagingd ---- */

static int lctl__sd_head(const struct lctl_opts *o, const struct lctl_snapshot *s, FILE *out)
{
    if (!s->sd_asked) {
        fprintf(out, "stagingd: %s\n", s->sd_err);
        return 0;
    }
    if (!s->sd_stats) {
        fprintf(out, "stagingd %s: DOWN: %s\n", o->stagingd, s->sd_err);
        return 0;
    }
    json_t *st = s->sd_stats, *jobs = json_object_get(st, "jobs"),
           *cfg = json_object_get(st, "config");
    fprintf(out, "stagingd %s: up, %s, pid %lld, up %.1f s, jobs %lld done, %s, %lld queued%s",
            o->stagingd, lctl__js(st, "version"), (long long)lctl__ji(st, "pid"),
            lctl__jr(st, "uptime_s"), (long long)lctl__ji(jobs, "done"),
            json_is_true(json_object_get(jobs, "running")) ? "1 running" : "none running",
            (long long)lctl__ji(jobs, "queued"),
            json_is_true(json_object_get(st, "stopping")) ? "; STOPPING" : "");
    const char *m = lctl__js(cfg, "metrics_bound");
    if (m[0])
        fprintf(out, "; metrics http://%s/metrics", m);
    fputc('\n', out);
    json_t *cur = json_object_get(jobs, "current");
    if (cur)
        fprintf(out, "  %s\n", lctl__js(cur, "progress"));
    return 1;
}

static void lctl__sd_agents(json_t *st, FILE *out)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(st, "agents"), i, e)
    {
        json_t *le = json_object_get(e, "last_error");
        fprintf(out,
                "  agent %lld %s: %s, connection %lld, \"%s\", %lld of %lld segment(s) accepted, "
                "%lld lease(s), %lld request(s) in flight%s%s\n",
                (long long)lctl__ji(e, "index"), lctl__js(e, "path"), lctl__js(e, "state"),
                (long long)lctl__ji(e, "connection"), lctl__js(e, "name"),
                (long long)lctl__ji(e, "segments_accepted"),
                (long long)lctl__ji(e, "segments_offered"), (long long)lctl__ji(e, "leases"),
                (long long)lctl__ji(e, "in_flight"), json_is_string(le) ? ", last error: " : "",
                json_is_string(le) ? json_string_value(le) : "");
    }
}

static void lctl__sd_stats(json_t *st, FILE *out)
{
    json_t *t = json_object_get(st, "totals"), *r = json_object_get(st, "reader");
    char staged[32];
    lctl_bytes((uint64_t)lctl__ji(t, "bytes_staged"), staged, sizeof staged);
    fprintf(out,
            "  totals: %lld shard(s) (%lld clean, %lld bad, %lld failed, %lld not run); %s "
            "staged; leases %lld granted, %lld released, %lld lost, %lld refused; %lld submits "
            "(%lld behind the doorbell), %lld completions\n",
            (long long)lctl__ji(t, "shards"), (long long)lctl__ji(t, "shards_clean"),
            (long long)lctl__ji(t, "shards_bad"), (long long)lctl__ji(t, "shards_failed"),
            (long long)lctl__ji(t, "shards_not_run"), staged,
            (long long)lctl__ji(t, "leases_granted"), (long long)lctl__ji(t, "leases_released"),
            (long long)lctl__ji(t, "leases_lost"), (long long)lctl__ji(t, "leases_refused"),
            (long long)lctl__ji(t, "submits"), (long long)lctl__ji(t, "doorbell_submits"),
            (long long)lctl__ji(t, "completions"));
    static const char *const head[] = {
        "pool",           "capacity", "in use",  "high water", "buffers",
        "alloc failures", "segments", "hugetlb", "THP",        NULL};
    struct lctl_table tb;
    lctl_table_init(&tb, "  ", head);
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(st, "pool"), i, e)
    {
        char v[8][32];
        lctl_table_row(&tb, lctl__js(e, "class"),
                       lctl__bytes_s((uint64_t)lctl__ji(e, "capacity"), v[0], 32),
                       lctl__bytes_s((uint64_t)lctl__ji(e, "in_use"), v[1], 32),
                       lctl__bytes_s((uint64_t)lctl__ji(e, "high_water"), v[2], 32),
                       lctl__u64((uint64_t)lctl__ji(e, "live_buffers"), v[3], 32),
                       lctl__u64((uint64_t)lctl__ji(e, "alloc_failures"), v[4], 32),
                       lctl__u64((uint64_t)lctl__ji(e, "segments"), v[5], 32),
                       lctl__u64((uint64_t)lctl__ji(e, "hugetlb_segments"), v[6], 32),
                       lctl__u64((uint64_t)lctl__ji(e, "thp_segments"), v[7], 32));
    }
    lctl_table_print(&tb, out);
    lctl_table_free(&tb);
    char rb[32];
    lctl_bytes((uint64_t)lctl__ji(r, "bytes"), rb, sizeof rb);
    fprintf(out,
            "  reader: %lld thread(s), %s%s; %lld request(s), %lld failed, %s, %lld read(s) "
            "(%lld fixed)\n",
            (long long)lctl__ji(r, "threads"),
            json_is_true(json_object_get(r, "io_uring")) ? "io_uring" : "pread fallback",
            json_is_true(json_object_get(r, "fixed_buffers")) ? ", fixed buffers" : "",
            (long long)lctl__ji(r, "requests"), (long long)lctl__ji(r, "failed"), rb,
            (long long)lctl__ji(r, "reads"), (long long)lctl__ji(r, "fixed_reads"));
}

/* ---- the commands ---- */

int lctl_view_status(const struct lctl_opts *o, const struct lctl_snapshot *s, FILE *out)
{
    if (o->format == LCTL_JSON) {
        lctl_json_print(lctl__doc(s, lctl__fill_status, s->sd_stats), out);
        return lctl__status(s);
    }
    for (unsigned i = 0; i < s->nagents; i++)
        lctl__agent_status(&s->agents[i], out);
    if (lctl__sd_head(o, s, out))
        lctl__sd_agents(s->sd_stats, out);
    return lctl__status(s);
}

int lctl_view_stats(const struct lctl_opts *o, const struct lctl_snapshot *s, FILE *out)
{
    if (o->format == LCTL_JSON) {
        lctl_json_print(lctl__doc(s, lctl__fill_stats, s->sd_stats), out);
        return lctl__status(s);
    }
    for (unsigned i = 0; i < s->nagents; i++) {
        const struct lctl_agent *a = &s->agents[i];
        lctl__agent_head(a, out);
        if (!a->have_stats)
            continue;
        lctl__agent_classes_table(a, out);
        lctl__agent_clients_table(a, out);
    }
    if (lctl__sd_head(o, s, out))
        lctl__sd_stats(s->sd_stats, out);
    return lctl__status(s);
}

int lctl_view_leases(const struct lctl_opts *o, const struct lctl_snapshot *s, FILE *out)
{
    if (o->format == LCTL_JSON) {
        lctl_json_print(lctl__doc(s, lctl__fill_leases, s->sd_leases), out);
        return lctl__status(s) || (s->sd_asked && !s->sd_leases);
    }
    for (unsigned i = 0; i < s->nagents; i++) {
        const struct lctl_agent *a = &s->agents[i];
        lctl__agent_head(a, out);
        if (!a->have_stats)
            continue;
        char msg[LCTL_ERR_LEN], b[3][32];
        fprintf(out,
                "  live leases: PINNED %" PRIu64 " (%s), MAPPED %" PRIu64 " (%s), STAGED %" PRIu64
                " (%s)\n",
                a->classes[LT_CLASS_PINNED].live_leases,
                lctl__bytes_s(a->classes[LT_CLASS_PINNED].bytes_leased, b[0], 32),
                a->classes[LT_CLASS_MAPPED].live_leases,
                lctl__bytes_s(a->classes[LT_CLASS_MAPPED].bytes_leased, b[1], 32),
                a->classes[LT_CLASS_STAGED].live_leases,
                lctl__bytes_s(a->classes[LT_CLASS_STAGED].bytes_leased, b[2], 32));
        lctl__agent_clients_table(a, out);
        if (a->have_leases) {
            lctl_lists_leases_human(a, out);
        } else if (a->lists) {
            fprintf(out, "  leases: %s\n", a->list_err);
        } else {
            lctl_agent_missing(a, "a per-lease listing", "LEASE_LIST_REQUEST", msg, sizeof msg);
            fprintf(out, "  %s\n", msg);
        }
    }
    if (!lctl__sd_head(o, s, out))
        return lctl__status(s);
    json_t *list = json_object_get(s->sd_leases, "leases");
    if (!s->sd_leases) {
        fprintf(out, "  leases: %s\n", s->sd_err);
        return 1;
    }
    if (json_array_size(list) == 0) {
        fprintf(out, "  no lease held (no job running, or between shards)\n");
        return lctl__status(s);
    }
    static const char *const head[] = {"agent", "lease", "class",     "segment", "offset", "length",
                                       "held",  "state", "in flight", "shard",   NULL};
    struct lctl_table t;
    lctl_table_init(&t, "  ", head);
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e)
    {
        char v[6][32];
        json_t *held = json_object_get(e, "held_s");
        if (json_is_number(held))
            snprintf(v[4], 32, "%.3f s", json_number_value(held));
        else
            snprintf(v[4], 32, "-");
        snprintf(v[5], 32, "%lld of %lld", (long long)lctl__ji(e, "ops_in_flight"),
                 (long long)lctl__ji(e, "ops_todo"));
        lctl_table_row(&t, lctl__u64((uint64_t)lctl__ji(e, "agent"), v[0], 32),
                       lctl__js(e, "lease"), lctl__js(e, "class"),
                       lctl__u64((uint64_t)lctl__ji(e, "segment"), v[1], 32),
                       lctl__u64((uint64_t)lctl__ji(e, "offset"), v[2], 32),
                       lctl__bytes_s((uint64_t)lctl__ji(e, "length"), v[3], 32), v[4],
                       lctl__js(e, "state"), v[5], lctl__js(e, "shard"));
    }
    fprintf(out,
            "  %zu lease(s) held by job %lld (in flight: ops submitted and unanswered, of "
            "those without a result)\n",
            json_array_size(list), (long long)lctl__ji(s->sd_leases, "job"));
    lctl_table_print(&t, out);
    lctl_table_free(&t);
    return lctl__status(s);
}

int lctl_view_segments(const struct lctl_opts *o, const struct lctl_snapshot *s, FILE *out)
{
    if (o->format == LCTL_JSON) {
        lctl_json_print(lctl__doc(s, lctl__fill_segments, s->sd_segments), out);
        return lctl__status(s) || (s->sd_asked && !s->sd_segments);
    }
    for (unsigned i = 0; i < s->nagents; i++) {
        const struct lctl_agent *a = &s->agents[i];
        lctl__agent_head(a, out);
        if (!a->have_stats)
            continue;
        lctl__agent_classes_table(a, out);
        lctl__agent_clients_table(a, out);
        if (a->have_segments) {
            lctl_lists_segments_human(a, out);
        } else if (a->lists) {
            fprintf(out, "  segments: %s\n", a->list_err);
        } else {
            char msg[LCTL_ERR_LEN];
            lctl_agent_missing(a, "a per-segment listing", "SEGMENT_LIST_REQUEST", msg,
                               sizeof msg);
            fprintf(out, "  %s\n", msg);
        }
    }
    if (!lctl__sd_head(o, s, out))
        return lctl__status(s);
    if (!s->sd_segments) {
        fprintf(out, "  segments: %s\n", s->sd_err);
        return 1;
    }
    static const char *const head[] = {"segment", "class", "size", "pages", "THP bytes", NULL};
    struct lctl_table t;
    lctl_table_init(&t, "  ", head);
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(s->sd_segments, "segments"), i, e)
    {
        char v[3][32];
        lctl_table_row(&t, lctl__u64((uint64_t)lctl__ji(e, "id"), v[0], 32), lctl__js(e, "class"),
                       lctl__bytes_s((uint64_t)lctl__ji(e, "size"), v[1], 32), lctl__js(e, "pages"),
                       lctl__bytes_s((uint64_t)lctl__ji(e, "thp_bytes"), v[2], 32));
    }
    lctl_table_print(&t, out);
    lctl_table_free(&t);
    json_array_foreach(json_object_get(s->sd_segments, "agents"), i, e) fprintf(
        out,
        "  offered to agent %lld %s: %lld accepted on this connection (%s), %lld offer(s) sent\n",
        (long long)lctl__ji(e, "index"), lctl__js(e, "path"),
        (long long)lctl__ji(e, "segments_accepted"), lctl__js(e, "state"),
        (long long)lctl__ji(e, "offers_sent"));
    return lctl__status(s);
}
