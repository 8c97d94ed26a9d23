/* The agent's /metrics (docs/operations.md lists the series): the lease
 * service's and the executor's counters are read at each scrape (both lock
 * their own state); events are counted where they happen, on the loop
 * thread, lock-free. The connected clients belong to the loop thread, so a
 * scrape asks it for a snapshot through the wake eventfd and waits for it
 * (at most GA_METRICS_SNAPSHOT_WAIT_NS; a loop that has stopped leaves the
 * last snapshot in place). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpu/executor.h"
#include "lease/lease.h"
#include "lease_metrics/metrics.h"
#include "server_metrics.h"

#define GA_METRICS_SNAPSHOT_WAIT_NS 1000000000ull

/* One connected client as the loop thread saw it. */
struct ga_metrics__client {
    uint32_t id;
    char name[LT_NAME_LEN];
    long pid;
    uint64_t leases, bytes, segments, seg_bytes, leases_granted, submits;
    uint32_t inflight;
};

struct ga_server__metrics {
    struct ga_server *srv;
    struct lm_registry *reg;
    struct lm_server *http;
    char address[64];
    /* Counted at events. */
    struct lm_family *f_submits, *f_completions, *f_completed_bytes, *f_release_completes;
    struct lm_series *s_bell_waits, *s_done_signals;
    /* Read at a scrape. */
    struct lm_family *f_cls_budget, *f_cls_segments, *f_cls_seg_bytes, *f_cls_leases,
        *f_cls_lease_bytes, *f_cls_regs, *f_cls_reg_secs, *f_cls_unregs, *f_cls_evictions,
        *f_cls_refusals, *f_cls_fallbacks;
    struct lm_series *s_clients, *s_accepted, *s_refused, *s_uptime, *s_draining, *s_pending;
    struct lm_series *s_ex_inflight, *s_ex_queued, *s_ex_submitted, *s_ex_completed,
        *s_ex_cancelled, *s_ex_failed, *s_ex_streams, *s_ex_faulted;
    struct lm_family *f_cl_leases, *f_cl_bytes, *f_cl_segments, *f_cl_seg_bytes,
        *f_cl_granted, *f_cl_submits, *f_cl_inflight;
    /* The clients' snapshot: guarded by mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t want_gen, done_gen;
    struct ga_metrics__client *snap;
    size_t nsnap;
    uint32_t nconns;
    uint64_t accepted, refused;
};

static const char *ga_metrics__op(uint16_t op)
{
    return op == LT_OP_CHECKSUM_VERIFY ? "checksum_verify"
           : op == LT_OP_VECTOR_SCAN   ? "vector_scan"
           : op == LT_OP_COPY_H2D      ? "copy_h2d"
                                       : "other";
}

/* "LT_E_CHECKSUM_MISMATCH" -> "CHECKSUM_MISMATCH", "LT_OK" -> "OK". */
static const char *ga_metrics__code(uint32_t code)
{
    const char *n = lt_error_name(code);
    if (strncmp(n, "LT_E_", 5) == 0)
        return n + 5;
    return strncmp(n, "LT_", 3) == 0 ? n + 3 : n;
}

static struct ga_server__metrics *ga_metrics__get(struct ga_server *srv)
{
    return __atomic_load_n(&srv->metrics, __ATOMIC_ACQUIRE);
}

static void ga_metrics__count(struct lm_family *f, const char *const *values, double v)
{
    struct lm_series *s = NULL;
    if (f && lm_series_get(f, values, &s) == 0)
        lm_counter_add(s, v);
}

void ga_server__metrics_submit(struct ga_server *srv, struct ga_server__job *j,
                               const struct lt_msg_submit *m)
{
    struct ga_server__metrics *mt = ga_metrics__get(srv);
    if (!mt)
        return;
    const char *v[] = {ga_metrics__op(m->op), NULL};
    ga_metrics__count(mt->f_submits, v, 1);
    if (m->flags & LT_SUBMIT_F_WAIT_BELL)
        lm_counter_add(mt->s_bell_waits, 1);
    if (m->flags & LT_SUBMIT_F_SIGNAL_DONE)
        lm_counter_add(mt->s_done_signals, 1);
    (void)j;
}

void ga_server__metrics_completion(struct ga_server *srv, const struct ga_server__job *j)
{
    struct ga_server__metrics *mt = ga_metrics__get(srv);
    if (!mt)
        return;
    uint32_t st = lt_error_is_known(j->res.status) ? j->res.status : LT_E_GPU_FAULT;
    const char *v[] = {ga_metrics__op(j->op), ga_metrics__code(st), NULL};
    ga_metrics__count(mt->f_completions, v, 1);
    if (st == LT_OK) {
        const char *b[] = {ga_metrics__op(j->op), NULL};
        ga_metrics__count(mt->f_completed_bytes, b, (double)j->op_bytes);
    }
}

void ga_server__metrics_release_complete(struct ga_server *srv, uint32_t status)
{
    struct ga_server__metrics *mt = ga_metrics__get(srv);
    if (!mt)
        return;
    const char *v[] = {ga_metrics__code(status), NULL};
    ga_metrics__count(mt->f_release_completes, v, 1);
}

/* ---- the clients' snapshot (loop thread) -------------------------------- */

void ga_server__metrics_serve(struct ga_server *srv)
{
    struct ga_server__metrics *mt = ga_metrics__get(srv);
    if (!mt)
        return;
    pthread_mutex_lock(&mt->mu);
    uint64_t want = mt->want_gen;
    pthread_mutex_unlock(&mt->mu);
    if (want == mt->done_gen) /* done_gen is written by this thread only */
        return;
    size_t n = 0;
    for (struct ga_server__conn *c = srv->conns; c; c = c->next)
        n += !c->closed;
    struct ga_metrics__client *snap = n ? calloc(n, sizeof(*snap)) : NULL;
    size_t k = 0;
    for (struct ga_server__conn *c = srv->conns; snap && c && k < n; c = c->next) {
        if (c->closed)
            continue;
        struct ga_metrics__client *e = &snap[k++];
        struct lease_client_stats cs = {0};
        (void)lease_client_stats(srv->svc, c->client, &cs, NULL);
        e->id = c->id;
        memcpy(e->name, c->hello ? c->name : "", c->hello ? LT_NAME_LEN : 1);
        e->name[LT_NAME_LEN - 1] = '\0';
        e->pid = (long)c->pid;
        e->leases = cs.leases;
        e->bytes = cs.bytes;
        e->segments = c->segments;
        e->seg_bytes = c->seg_bytes_registered;
        e->leases_granted = c->leases_granted;
        e->submits = c->submits;
        e->inflight = c->inflight;
    }
    pthread_mutex_lock(&mt->mu);
    free(mt->snap);
    mt->snap = snap;
    mt->nsnap = snap ? k : 0;
    mt->nconns = srv->nconns;
    mt->accepted = srv->accepted;
    mt->refused = srv->refused;
    mt->done_gen = want;
    pthread_cond_broadcast(&mt->cv);
    pthread_mutex_unlock(&mt->mu);
}

/* Asks the loop for a snapshot and waits for it, or for the deadline. */
static void ga_metrics__snapshot_wait(struct ga_server__metrics *mt)
{
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += (time_t)(GA_METRICS_SNAPSHOT_WAIT_NS / 1000000000ull);
    pthread_mutex_lock(&mt->mu);
    uint64_t gen = ++mt->want_gen;
    pthread_mutex_unlock(&mt->mu);
    uint64_t one = 1;
    ssize_t w = write(mt->srv->wakefd, &one, sizeof one);
    (void)w; /* a full counter already wakes the loop */
    pthread_mutex_lock(&mt->mu);
    while (mt->done_gen < gen)
        if (pthread_cond_timedwait(&mt->cv, &mt->mu, &dl) == ETIMEDOUT)
            break;
}

static void ga_metrics__set(struct lm_family *f, const char *const *v, double x, int counter)
{
    struct lm_series *s = NULL;
    if (lm_series_get(f, v, &s) < 0)
        return;
    if (counter)
        lm_counter_set(s, x);
    else
        lm_gauge_set(s, x);
}

/* The rendering thread, before each render. */
static void ga_metrics__collect(void *ctx, struct lm_registry *reg)
{
    (void)reg;
    struct ga_server__metrics *mt = ctx;
    struct ga_server *srv = mt->srv;
    struct lease_stats ls;
    if (lease_service_stats(srv->svc, &ls) == 0) {
        for (uint32_t c = LT_CLASS_PINNED; c < LT_CLASS_SLOTS; c++) {
            const struct lease_class_stats *k = &ls.cls[c];
            const char *v[] = {lt_class_name(c), NULL};
            ga_metrics__set(mt->f_cls_budget, v, (double)k->budget, 0);
            ga_metrics__set(mt->f_cls_segments, v, (double)k->segments, 0);
            ga_metrics__set(mt->f_cls_seg_bytes, v, (double)k->bytes_registered, 0);
            ga_metrics__set(mt->f_cls_leases, v, (double)k->live_leases, 0);
            ga_metrics__set(mt->f_cls_lease_bytes, v, (double)k->bytes_leased, 0);
            ga_metrics__set(mt->f_cls_regs, v, (double)k->registrations, 1);
            ga_metrics__set(mt->f_cls_reg_secs, v, (double)k->registration_ns / 1e9, 1);
            ga_metrics__set(mt->f_cls_unregs, v, (double)k->unregistrations, 1);
            ga_metrics__set(mt->f_cls_evictions, v, (double)k->evictions, 1);
            ga_metrics__set(mt->f_cls_refusals, v, (double)k->budget_refusals, 1);
            ga_metrics__set(mt->f_cls_fallbacks, v, (double)k->fallbacks, 1);
        }
        lm_gauge_set(mt->s_draining, (double)ls.draining_leases);
        lm_gauge_set(mt->s_pending, (double)ls.pending_work);
    }
    struct ga_exec_stats es;
    if (ga_exec_stats(srv->ex, &es) == 0) {
        lm_gauge_set(mt->s_ex_inflight, (double)es.in_flight);
        lm_gauge_set(mt->s_ex_queued, (double)es.queued);
        lm_gauge_set(mt->s_ex_streams, (double)es.streams);
        lm_gauge_set(mt->s_ex_faulted, (double)es.faulted);
        lm_counter_set(mt->s_ex_submitted, (double)es.submitted);
        lm_counter_set(mt->s_ex_completed, (double)es.completed);
        lm_counter_set(mt->s_ex_cancelled, (double)es.cancelled);
        lm_counter_set(mt->s_ex_failed, (double)es.failed);
    }
    lm_gauge_set(mt->s_uptime, (double)(base_now_ns() - srv->start_ns) / 1e9);

    ga_metrics__snapshot_wait(mt); /* returns with mu held */
    lm_gauge_set(mt->s_clients, (double)mt->nconns);
    lm_counter_set(mt->s_accepted, (double)mt->accepted);
    lm_counter_set(mt->s_refused, (double)mt->refused);
    struct lm_family *per[] = {mt->f_cl_leases, mt->f_cl_bytes,   mt->f_cl_segments,
                               mt->f_cl_seg_bytes, mt->f_cl_granted, mt->f_cl_submits,
                               mt->f_cl_inflight};
    for (size_t i = 0; i < sizeof per / sizeof per[0]; i++)
        lm_family_clear(per[i]); /* clients come and go */
    for (size_t i = 0; i < mt->nsnap; i++) {
        const struct ga_metrics__client *e = &mt->snap[i];
        char id[16], pid[24];
        snprintf(id, sizeof id, "%" PRIu32, e->id);
        snprintf(pid, sizeof pid, "%ld", e->pid);
        const char *v[] = {id, e->name, pid, NULL};
        ga_metrics__set(mt->f_cl_leases, v, (double)e->leases, 0);
        ga_metrics__set(mt->f_cl_bytes, v, (double)e->bytes, 0);
        ga_metrics__set(mt->f_cl_segments, v, (double)e->segments, 0);
        ga_metrics__set(mt->f_cl_seg_bytes, v, (double)e->seg_bytes, 0);
        ga_metrics__set(mt->f_cl_granted, v, (double)e->leases_granted, 1);
        ga_metrics__set(mt->f_cl_submits, v, (double)e->submits, 1);
        ga_metrics__set(mt->f_cl_inflight, v, (double)e->inflight, 0);
    }
    pthread_mutex_unlock(&mt->mu);
}

/* ---- start and stop ------------------------------------------------------ */

static int ga_metrics__families(struct ga_server__metrics *mt)
{
    static const char *const op[] = {"op", NULL};
    static const char *const op_status[] = {"op", "status", NULL};
    static const char *const status[] = {"status", NULL};
    static const char *const cls[] = {"class", NULL};
    static const char *const client[] = {"client", "name", "pid", NULL};
    struct lm_registry *r = mt->reg;
    struct lm_family *f = NULL;
    int rc = 0;
#define GA_FAM(type, name, help, labels, fam_p) \
    if (rc == 0)                                \
    rc = lm_family_add(r, type, name, help, labels, NULL, 0, fam_p)
#define GA_ONE(type, name, help, s_p)                                      \
    do {                                                                   \
        GA_FAM(type, name, help, NULL, &f);                                \
        if (rc == 0)                                                       \
            rc = lm_series_get(f, NULL, s_p);                              \
    } while (0)
    GA_FAM(LM_GAUGE, "lease_agent_budget_bytes", "Registration budget, by class.", cls,
           &mt->f_cls_budget);
    GA_FAM(LM_GAUGE, "lease_agent_segments", "Segments registered now, by class.", cls,
           &mt->f_cls_segments);
    GA_FAM(LM_GAUGE, "lease_agent_registered_bytes", "Bytes of the segments registered now, by class.",
           cls, &mt->f_cls_seg_bytes);
    GA_FAM(LM_GAUGE, "lease_agent_leases", "Leases granted and not yet release-complete, by class.",
           cls, &mt->f_cls_leases);
    GA_FAM(LM_GAUGE, "lease_agent_leased_bytes", "Bytes of those leases, by class.", cls,
           &mt->f_cls_lease_bytes);
    GA_FAM(LM_COUNTER, "lease_agent_registrations_total", "Segment registrations, by class.", cls,
           &mt->f_cls_regs);
    GA_FAM(LM_COUNTER, "lease_agent_registration_seconds_total",
           "Time spent registering segments, by class.", cls, &mt->f_cls_reg_secs);
    GA_FAM(LM_COUNTER, "lease_agent_unregistrations_total", "Segment unregistrations, by class.",
           cls, &mt->f_cls_unregs);
    GA_FAM(LM_COUNTER, "lease_agent_evictions_total",
           "Unregistrations made to free budget, by class.", cls, &mt->f_cls_evictions);
    GA_FAM(LM_COUNTER, "lease_agent_budget_refusals_total",
           "Requests refused for want of budget, by class.", cls, &mt->f_cls_refusals);
    GA_FAM(LM_COUNTER, "lease_agent_fallbacks_total",
           "Requests for this class served as STAGED, by class.", cls, &mt->f_cls_fallbacks);
    GA_ONE(LM_GAUGE, "lease_agent_draining_leases", "Released leases waiting for their work.",
           &mt->s_draining);
    GA_ONE(LM_GAUGE, "lease_agent_pending_work", "Work tickets not yet done.", &mt->s_pending);
    GA_FAM(LM_COUNTER, "lease_agent_submits_total", "SUBMITs accepted, by op.", op,
           &mt->f_submits);
    GA_ONE(LM_COUNTER, "lease_agent_doorbell_waits_total",
           "Accepted SUBMITs that wait for a doorbell word.", &mt->s_bell_waits);
    GA_ONE(LM_COUNTER, "lease_agent_done_signals_total",
           "Accepted SUBMITs that store a done word when finished.", &mt->s_done_signals);
    GA_FAM(LM_COUNTER, "lease_agent_completions_total", "Work completions, by op and status.",
           op_status, &mt->f_completions);
    GA_FAM(LM_COUNTER, "lease_agent_completed_bytes_total",
           "Bytes of the leases of work that completed OK, by op.", op, &mt->f_completed_bytes);
    GA_FAM(LM_COUNTER, "lease_agent_release_completes_total", "RELEASE_COMPLETEs sent, by status.",
           status, &mt->f_release_completes);
    GA_ONE(LM_GAUGE, "lease_agent_executor_in_flight", "Executor jobs and calls not yet answered.",
           &mt->s_ex_inflight);
    GA_ONE(LM_GAUGE, "lease_agent_executor_queued", "Executor work accepted, not yet completed.",
           &mt->s_ex_queued);
    GA_ONE(LM_GAUGE, "lease_agent_executor_streams", "Live streams, every client's.",
           &mt->s_ex_streams);
    GA_ONE(LM_GAUGE, "lease_agent_executor_faulted", "1 once the backend reported a fault.",
           &mt->s_ex_faulted);
    GA_ONE(LM_COUNTER, "lease_agent_executor_submitted_total", "Executor work submitted.",
           &mt->s_ex_submitted);
    GA_ONE(LM_COUNTER, "lease_agent_executor_completed_total", "Executor work completed.",
           &mt->s_ex_completed);
    GA_ONE(LM_COUNTER, "lease_agent_executor_cancelled_total", "Executor work cancelled.",
           &mt->s_ex_cancelled);
    GA_ONE(LM_COUNTER, "lease_agent_executor_failed_total", "Executor work that failed.",
           &mt->s_ex_failed);
    GA_ONE(LM_GAUGE, "lease_agent_clients", "Clients connected now.", &mt->s_clients);
    GA_ONE(LM_COUNTER, "lease_agent_clients_accepted_total", "Connections accepted.",
           &mt->s_accepted);
    GA_ONE(LM_COUNTER, "lease_agent_clients_refused_total",
           "Connections refused (peer not allowed, too many).", &mt->s_refused);
    GA_ONE(LM_GAUGE, "lease_agent_uptime_seconds", "Seconds since the agent started.",
           &mt->s_uptime);
    GA_FAM(LM_GAUGE, "lease_agent_client_leases", "Leases a connected client holds.", client,
           &mt->f_cl_leases);
    GA_FAM(LM_GAUGE, "lease_agent_client_leased_bytes", "Bytes of the leases a client holds.",
           client, &mt->f_cl_bytes);
    GA_FAM(LM_GAUGE, "lease_agent_client_segments", "Segments a client has registered.", client,
           &mt->f_cl_segments);
    GA_FAM(LM_GAUGE, "lease_agent_client_registered_bytes",
           "Bytes of a client's PINNED and MAPPED segments.", client, &mt->f_cl_seg_bytes);
    GA_FAM(LM_COUNTER, "lease_agent_client_leases_granted_total",
           "Leases granted to a client while connected.", client, &mt->f_cl_granted);
    GA_FAM(LM_COUNTER, "lease_agent_client_submits_total", "SUBMITs a client made.", client,
           &mt->f_cl_submits);
    GA_FAM(LM_GAUGE, "lease_agent_client_in_flight", "A client's requests not yet answered.",
           client, &mt->f_cl_inflight);
#undef GA_ONE
#undef GA_FAM
    return rc;
}

static void ga_metrics__free(struct ga_server__metrics *mt)
{
    if (!mt)
        return;
    lm_server_stop(mt->http); /* the HTTP thread first: it reads the rest */
    lm_registry_destroy(mt->reg);
    free(mt->snap);
    pthread_cond_destroy(&mt->cv);
    pthread_mutex_destroy(&mt->mu);
    free(mt);
}

int ga_server_metrics_start(struct ga_server *srv, const char *listen, int allow_remote, char *err,
                            size_t errlen)
{
    if (!srv || !listen || ga_metrics__get(srv) || srv->ran) {
        snprintf(err, errlen, "metrics: already started, or the server already ran");
        return -EINVAL;
    }
    struct ga_server__metrics *mt = calloc(1, sizeof(*mt));
    if (!mt) {
        snprintf(err, errlen, "metrics: out of memory");
        return -ENOMEM;
    }
    mt->srv = srv;
    pthread_mutex_init(&mt->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&mt->cv, &ca);
    pthread_condattr_destroy(&ca);
    int rc = lm_registry_create(&mt->reg);
    if (rc == 0)
        rc = ga_metrics__families(mt);
    if (rc < 0) {
        snprintf(err, errlen, "metrics: the series: %s", strerror(-rc));
        ga_metrics__free(mt);
        return rc;
    }
    lm_registry_collect_set(mt->reg, ga_metrics__collect, mt);
    struct lm_server_config sc = {
        .listen = listen,
        .flags = allow_remote ? LM_SERVER_ALLOW_REMOTE : 0,
        .log = srv->cfg.log,
    };
    rc = lm_server_start(mt->reg, &sc, err, errlen, &mt->http);
    if (rc < 0) {
        ga_metrics__free(mt);
        return rc;
    }
    snprintf(mt->address, sizeof mt->address, "%s", lm_server_address(mt->http));
    __atomic_store_n(&srv->metrics, mt, __ATOMIC_RELEASE);
    base_log(&srv->cfg.log, BASE_LOG_INFO, "metrics", "serving http://%s/metrics", mt->address);
    return 0;
}

const char *ga_server_metrics_address(const struct ga_server *srv)
{
    const struct ga_server__metrics *mt = srv ? __atomic_load_n(&srv->metrics, __ATOMIC_ACQUIRE)
                                              : NULL;
    return mt ? mt->address : NULL;
}

void ga_server__metrics_stop(struct ga_server *srv)
{
    struct ga_server__metrics *mt = __atomic_exchange_n(&srv->metrics, NULL, __ATOMIC_ACQ_REL);
    ga_metrics__free(mt);
}
