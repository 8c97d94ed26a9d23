/* --prometheus: the snapshot in the text exposition format, through the
 * same lease_metrics registry the daemons serve, so `leasectl stats
 * --prometheus` can feed a textfile collector and passes `promtool check
 * metrics`. The agent's series are named lease_agent_*: the names its own
 * /metrics will use (docs/operations.md). stagingd's are read from its
 * control socket and named as on its /metrics. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lease_metrics/metrics.h"
#include "leasectl.h"

struct lctl__prom {
    struct lm_registry *reg;
    int failed;
};

/* Sets one sample; families are declared on first use. */
static void lctl__sample(struct lctl__prom *p, enum lm_type type, const char *name,
                         const char *help, const char *const *labels, const char *const *values,
                         double v)
{
    struct lm_family *f = lm_family_find(p->reg, name);
    if (!f && lm_family_add(p->reg, type, name, help, labels, NULL, 0, &f) < 0) {
        p->failed = 1;
        return;
    }
    struct lm_series *s;
    if (lm_series_get(f, values, &s) < 0) {
        p->failed = 1;
        return;
    }
    if (type == LM_COUNTER)
        lm_counter_set(s, v);
    else
        lm_gauge_set(s, v);
}

#define G(name, help, labels, values, v) lctl__sample(p, LM_GAUGE, name, help, labels, values, v)
#define C(name, help, labels, values, v) lctl__sample(p, LM_COUNTER, name, help, labels, values, v)

static void lctl__prom_agent(struct lctl__prom *p, const struct lctl_agent *a, unsigned what)
{
    const char *const al[] = {"agent", NULL}, *const av[] = {a->path, NULL};
    G("lease_agent_up", "1 when the agent answered HELLO and STATS.", al, av, a->have_stats);
    if (!a->up)
        return;
    const struct lt_msg_hello_reply *h = &a->hello;
    const char *const il[] = {"agent", "name", "backend", NULL};
    const char *const iv[] = {a->path, h->agent_name,
                              (h->caps & LT_CAP_HOST_BACKEND) ? "host" : "cuda", NULL};
    G("lease_agent_info", "The agent's name and backend (value 1).", il, iv, 1);
    const char *const cl[] = {"agent", "class", NULL};
    for (int c = LT_CLASS_STAGED; c <= LT_CLASS_MAPPED; c++) {
        const char *const cv[] = {a->path, lt_class_name((uint32_t)c), NULL};
        if (h->class_budget[c] != UINT64_MAX)
            G("lease_agent_budget_bytes", "The pin budget of a class (HELLO_REPLY).", cl, cv,
              (double)h->class_budget[c]);
    }
    if (!a->have_stats)
        return;
    G("lease_agent_uptime_seconds", "Seconds since the agent started.", al, av,
      (double)a->uptime_ns / 1e9);
    G("lease_agent_clients", "Clients connected, leasectl's own connection left out.", al, av,
      a->nclients);
    for (int c = LT_CLASS_STAGED; c <= LT_CLASS_MAPPED; c++) {
        const struct lt_class_stats *k = &a->classes[c];
        const char *const cv[] = {a->path, lt_class_name((uint32_t)c), NULL};
        G("lease_agent_segments", "Segments registered, by class.", cl, cv, (double)k->segments);
        G("lease_agent_registered_bytes", "Bytes registered (pinned), by class.", cl, cv,
          (double)k->bytes_registered);
        G("lease_agent_leases", "Live leases, by class.", cl, cv, (double)k->live_leases);
        G("lease_agent_leased_bytes", "Bytes under live leases, by class.", cl, cv,
          (double)k->bytes_leased);
        if (what & LCTL_WANT_SEGMENTS)
            continue;
        C("lease_agent_registrations_total", "Segment registrations, by class.", cl, cv,
          (double)k->registrations);
        C("lease_agent_registration_seconds_total", "Time spent registering, by class.", cl, cv,
          (double)k->registration_ns / 1e9);
        C("lease_agent_unregistrations_total", "Segment unregistrations, by class.", cl, cv,
          (double)k->unregistrations);
        C("lease_agent_budget_refusals_total", "Registrations refused for a pin budget, by class.",
          cl, cv, (double)k->budget_refusals);
    }
    const char *const kl[] = {"agent", "client", "pid", NULL};
    for (uint32_t i = 0; i < a->nclients; i++) {
        const struct lt_client_stats *k = &a->clients[i];
        char pid[16];
        snprintf(pid, sizeof pid, "%" PRIu32, k->pid);
        const char *const kv[] = {a->path, k->name, pid, NULL};
        G("lease_agent_client_segments", "Segments a client registered.", kl, kv,
          (double)k->segments);
        G("lease_agent_client_registered_bytes", "Bytes a client registered.", kl, kv,
          (double)k->bytes_registered);
        G("lease_agent_client_leases", "A client's live leases.", kl, kv, (double)k->live_leases);
        G("lease_agent_client_leased_bytes", "Bytes under a client's live leases.", kl, kv,
          (double)k->bytes_leased);
        if (what & (LCTL_WANT_SEGMENTS | LCTL_WANT_LEASES))
            continue;
        C("lease_agent_client_leases_granted_total", "Leases granted to a client.", kl, kv,
          (double)k->leases_granted);
        C("lease_agent_client_submits_total", "Work a client submitted.", kl, kv,
          (double)k->submits);
        G("lease_agent_client_streams", "A client's streams.", kl, kv, k->streams);
        G("lease_agent_client_events", "A client's events.", kl, kv, k->events);
    }
}

static double lctl__jn(json_t *o, const char *k)
{
    return json_number_value(json_object_get(o, k));
}

static void lctl__prom_stagingd(struct lctl__prom *p, const struct lctl_opts *o,
                                const struct lctl_snapshot *s, unsigned what)
{
    const char *const ul[] = {"control", NULL}, *const uv[] = {o->stagingd, NULL};
    G("stagingd_up", "1 when stagingd answered on its control socket.", ul, uv,
      s->sd_stats != NULL);
    if (!s->sd_stats)
        return;
    json_t *st = s->sd_stats, *t = json_object_get(st, "totals"),
           *jobs = json_object_get(st, "jobs"), *r = json_object_get(st, "reader");
    G("stagingd_uptime_seconds", "Seconds since stagingd started.", NULL, NULL,
      lctl__jn(st, "uptime_s"));
    G("stagingd_jobs_running", "Jobs running (0 or 1).", NULL, NULL,
      json_is_true(json_object_get(jobs, "running")));
    G("stagingd_jobs_queued", "Jobs waiting behind the running one.", NULL, NULL,
      lctl__jn(jobs, "queued"));
    C("stagingd_staged_bytes_total", "Shard bytes the staging reader landed in pool memory.", NULL,
      NULL, lctl__jn(r, "bytes"));
    C("stagingd_submits_total", "Work submitted to agents.", NULL, NULL, lctl__jn(t, "submits"));
    C("stagingd_doorbell_submits_total", "Submits queued behind a doorbell.", NULL, NULL,
      lctl__jn(t, "doorbell_submits"));
    size_t i;
    json_t *e;
    const char *const cl[] = {"class", NULL};
    json_array_foreach(json_object_get(st, "pool"), i, e)
    {
        const char *const cv[] = {json_string_value(json_object_get(e, "class")), NULL};
        if (!cv[0])
            continue;
        G("stagingd_pool_capacity_bytes", "Bytes in the pool's segments, by class.", cl, cv,
          lctl__jn(e, "capacity"));
        G("stagingd_pool_in_use_bytes", "Pool bytes held by live buffers, by class.", cl, cv,
          lctl__jn(e, "in_use"));
    }
    const char *const al[] = {"agent", NULL};
    json_array_foreach(json_object_get(st, "agents"), i, e)
    {
        const char *const av[] = {json_string_value(json_object_get(e, "path")), NULL};
        if (!av[0])
            continue;
        G("stagingd_agent_ready", "1 while the agent is connected with every segment answered.", al,
          av,
          json_is_string(json_object_get(e, "state")) &&
              strcmp(json_string_value(json_object_get(e, "state")), "ready") == 0);
        G("stagingd_agent_leases_held", "Leases held on the agent's current connection.", al, av,
          lctl__jn(e, "leases"));
    }
    if ((what & LCTL_WANT_LEASES) && s->sd_leases) {
        const char *const ll[] = {"agent", "lease", "class", "shard", NULL};
        json_array_foreach(json_object_get(s->sd_leases, "leases"), i, e)
        {
            const char *const lv[] = {json_string_value(json_object_get(e, "agent_path")),
                                      json_string_value(json_object_get(e, "lease")),
                                      json_string_value(json_object_get(e, "class")),
                                      json_string_value(json_object_get(e, "shard")), NULL};
            if (!lv[0] || !lv[1] || !lv[2] || !lv[3])
                continue;
            G("stagingd_lease_length_bytes", "Bytes under one lease stagingd holds.", ll, lv,
              lctl__jn(e, "length"));
            G("stagingd_lease_held_seconds", "How long ago one lease was granted.", ll, lv,
              lctl__jn(e, "held_s"));
        }
    }
    if ((what & LCTL_WANT_SEGMENTS) && s->sd_segments) {
        const char *const sl[] = {"segment", "class", "pages", NULL};
        json_array_foreach(json_object_get(s->sd_segments, "segments"), i, e)
        {
            char id[24];
            snprintf(id, sizeof id, "%.0f", lctl__jn(e, "id"));
            const char *const sv[] = {id, json_string_value(json_object_get(e, "class")),
                                      json_string_value(json_object_get(e, "pages")), NULL};
            if (!sv[1] || !sv[2])
                continue;
            G("stagingd_pool_segment_bytes", "The size of one pool segment.", sl, sv,
              lctl__jn(e, "size"));
        }
    }
}

int lctl_view_prometheus(const struct lctl_opts *o, const struct lctl_snapshot *s, unsigned what,
                         FILE *out)
{
    struct lctl__prom p = {0};
    if (lm_registry_create(&p.reg) < 0)
        return 1;
    for (unsigned i = 0; i < s->nagents; i++) {
        lctl__prom_agent(&p, &s->agents[i], what);
        if (lctl_lists_prometheus(p.reg, &s->agents[i], what) < 0)
            p.failed = 1;
    }
    if (s->sd_asked)
        lctl__prom_stagingd(&p, o, s, what);
    char *text = NULL;
    size_t len = 0;
    int rc = lm_registry_render(p.reg, &text, &len);
    if (rc == 0)
        fwrite(text, 1, len, out);
    free(text);
    lm_registry_destroy(p.reg);
    int bad = 0;
    for (unsigned i = 0; i < s->nagents; i++)
        bad |= !s->agents[i].have_stats;
    return rc < 0 || p.failed || bad || (s->sd_asked && !s->sd_stats);
}
