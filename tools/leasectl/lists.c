/* An agent's lists (1.4, LT_CAP_INTROSPECT): LEASE_LIST and SEGMENT_LIST as
 * agent.c fetched them, shown as human tables, JSON arrays and Prometheus
 * samples. Holders are named by the client table of the same STATS_REPLY. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "lease_metrics/metrics.h"
#include "leasectl.h"
#include "table.h"

/* The name STATS_REPLY gives client @id, or "". */
static const char *lctl__client_name(const struct lctl_agent *a, uint32_t id)
{
    for (uint32_t i = 0; i < a->nclients; i++)
        if (a->clients[i].client_id == id)
            return a->clients[i].name;
    return "";
}

static const char *lctl__id(uint32_t slot, uint32_t gen, char *buf, size_t len)
{
    snprintf(buf, len, "%" PRIu32 ":%" PRIu32, slot, gen);
    return buf;
}

static const char *lctl__state(uint32_t state)
{
    return state == LT_LEASE_STATE_RELEASING ? "releasing" : "held";
}

/* "registered", "registered,huge", "draining", "-". */
static const char *lctl__seg_flags(uint32_t f, char *buf, size_t len)
{
    snprintf(buf, len, "%s%s%s%s%s", (f & LT_SEGMENT_INFO_F_REGISTERED) ? "registered" : "",
             (f & LT_SEGMENT_INFO_F_REGISTERED) && (f & LT_SEGMENT_INFO_F_DRAINING) ? "," : "",
             (f & LT_SEGMENT_INFO_F_DRAINING) ? "draining" : "",
             (f & (LT_SEGMENT_INFO_F_REGISTERED | LT_SEGMENT_INFO_F_DRAINING)) &&
                     (f & LT_SEGMENT_INFO_F_HUGE)
                 ? ","
                 : "",
             (f & LT_SEGMENT_INFO_F_HUGE) ? "huge" : "");
    if (!buf[0])
        snprintf(buf, len, "-");
    return buf;
}

/* ---- human ---- */

void lctl_lists_leases_human(const struct lctl_agent *a, FILE *out)
{
    if (a->nleases == 0) {
        fprintf(out, "  no lease held on the agent\n");
        return;
    }
    static const char *const head[] = {"client", "name",   "lease", "class", "segment",
                                       "offset", "length", "age",   "state", "work in flight",
                                       NULL};
    struct lctl_table t;
    lctl_table_init(&t, "  ", head);
    for (uint32_t i = 0; i < a->nleases; i++) {
        const struct lt_lease_info *e = &a->leases[i];
        char v[8][32];
        snprintf(v[0], 32, "%" PRIu32, e->client_id);
        snprintf(v[3], 32, "%" PRIu64, e->offset);
        lctl_bytes(e->length, v[4], 32);
        snprintf(v[5], 32, "%.3f s", (double)e->age_ns / 1e9);
        snprintf(v[6], 32, "%" PRIu32, e->work_inflight);
        lctl_table_row(&t, v[0], lctl__client_name(a, e->client_id),
                       lctl__id(e->lease.slot, e->lease.gen, v[1], 32), lt_class_name(e->mem_class),
                       lctl__id(e->segment.slot, e->segment.gen, v[2], 32), v[3], v[4], v[5],
                       lctl__state(e->state), v[6]);
    }
    fprintf(out, "  %" PRIu32 " lease(s) on the agent (LEASE_LIST; work in flight: submits "
                 "without their COMPLETION)\n",
            a->nleases);
    lctl_table_print(&t, out);
    lctl_table_free(&t);
}

void lctl_lists_segments_human(const struct lctl_agent *a, FILE *out)
{
    if (a->nsegments == 0) {
        fprintf(out, "  no segment registered on the agent\n");
        return;
    }
    static const char *const head[] = {"segment", "client", "name",   "class", "size",
                                       "pages",   "age",    "reg time", "leases", "holds",
                                       "flags",   NULL};
    struct lctl_table t;
    lctl_table_init(&t, "  ", head);
    for (uint32_t i = 0; i < a->nsegments; i++) {
        const struct lt_segment_info *e = &a->segments[i];
        char v[9][48];
        snprintf(v[1], 48, "%" PRIu32, e->client_id);
        lctl_bytes(e->size, v[2], 48);
        lctl_bytes((uint64_t)e->page_kib * 1024, v[3], 48);
        snprintf(v[4], 48, "%.1f s", (double)e->age_ns / 1e9);
        snprintf(v[5], 48, "%.2f ms", (double)e->registration_ns / 1e6);
        snprintf(v[6], 48, "%" PRIu32, e->live_leases);
        snprintf(v[7], 48, "%" PRIu32, e->holds);
        lctl_table_row(&t, lctl__id(e->segment.slot, e->segment.gen, v[0], 48), v[1],
                       lctl__client_name(a, e->client_id), lt_class_name(e->mem_class), v[2], v[3],
                       v[4], v[5], v[6], v[7], lctl__seg_flags(e->flags, v[8], 48));
    }
    fprintf(out, "  %" PRIu32 " segment(s) on the agent (SEGMENT_LIST)\n", a->nsegments);
    lctl_table_print(&t, out);
    lctl_table_free(&t);
}

/* ---- JSON ---- */

json_t *lctl_lists_leases_json(const struct lctl_agent *a)
{
    json_t *l = json_array();
    for (uint32_t i = 0; i < a->nleases; i++) {
        const struct lt_lease_info *e = &a->leases[i];
        char lease[32], seg[32];
        json_array_append_new(
            l, json_pack("{si ss ss ss ss sI sI sf ss si}", "client_id", (int)e->client_id,
                         "client", lctl__client_name(a, e->client_id), "lease",
                         lctl__id(e->lease.slot, e->lease.gen, lease, sizeof lease), "class",
                         lt_class_name(e->mem_class), "segment",
                         lctl__id(e->segment.slot, e->segment.gen, seg, sizeof seg), "offset",
                         (json_int_t)e->offset, "length", (json_int_t)e->length, "age_s",
                         (double)e->age_ns / 1e9, "state", lctl__state(e->state),
                         "work_inflight", (int)e->work_inflight));
    }
    return l;
}

json_t *lctl_lists_segments_json(const struct lctl_agent *a)
{
    json_t *l = json_array();
    for (uint32_t i = 0; i < a->nsegments; i++) {
        const struct lt_segment_info *e = &a->segments[i];
        char seg[32];
        json_array_append_new(
            l,
            json_pack("{ss si ss ss sI sI sI sf sf si si sb sb sb}", "segment",
                      lctl__id(e->segment.slot, e->segment.gen, seg, sizeof seg), "client_id",
                      (int)e->client_id, "client", lctl__client_name(a, e->client_id), "class",
                      lt_class_name(e->mem_class), "size", (json_int_t)e->size, "cookie",
                      (json_int_t)e->cookie, "page_size", (json_int_t)e->page_kib * 1024,
                      "age_s", (double)e->age_ns / 1e9, "registration_s",
                      (double)e->registration_ns / 1e9, "live_leases", (int)e->live_leases,
                      "holds", (int)e->holds, "registered",
                      (e->flags & LT_SEGMENT_INFO_F_REGISTERED) != 0, "draining",
                      (e->flags & LT_SEGMENT_INFO_F_DRAINING) != 0, "huge",
                      (e->flags & LT_SEGMENT_INFO_F_HUGE) != 0));
    }
    return l;
}

/* ---- Prometheus ---- */

static int lctl__gauge(struct lm_registry *reg, const char *name, const char *help,
                       const char *const *labels, const char *const *values, double v)
{
    struct lm_family *f = lm_family_find(reg, name);
    struct lm_series *s;
    if (!f && lm_family_add(reg, LM_GAUGE, name, help, labels, NULL, 0, &f) < 0)
        return -1;
    if (lm_series_get(f, values, &s) < 0)
        return -1;
    lm_gauge_set(s, v);
    return 0;
}

int lctl_lists_prometheus(struct lm_registry *reg, const struct lctl_agent *a, unsigned what)
{
    int rc = 0;
    const char *const ll[] = {"agent", "client", "lease", "class", NULL};
    for (uint32_t i = 0; (what & LCTL_WANT_LEASES) && i < a->nleases; i++) {
        const struct lt_lease_info *e = &a->leases[i];
        char id[32];
        const char *const lv[] = {a->path, lctl__client_name(a, e->client_id),
                                  lctl__id(e->lease.slot, e->lease.gen, id, sizeof id),
                                  lt_class_name(e->mem_class), NULL};
        rc |= lctl__gauge(reg, "lease_agent_lease_age_seconds",
                          "Seconds since the agent granted one lease (LEASE_LIST).", ll, lv,
                          (double)e->age_ns / 1e9);
        rc |= lctl__gauge(reg, "lease_agent_lease_work_inflight",
                          "Submits on one lease without their COMPLETION.", ll, lv,
                          e->work_inflight);
    }
    const char *const sl[] = {"agent", "client", "segment", "class", NULL};
    for (uint32_t i = 0; (what & LCTL_WANT_SEGMENTS) && i < a->nsegments; i++) {
        const struct lt_segment_info *e = &a->segments[i];
        char id[32];
        const char *const sv[] = {a->path, lctl__client_name(a, e->client_id),
                                  lctl__id(e->segment.slot, e->segment.gen, id, sizeof id),
                                  lt_class_name(e->mem_class), NULL};
        rc |= lctl__gauge(reg, "lease_agent_segment_size_bytes",
                          "The size of one segment the agent holds (SEGMENT_LIST).", sl, sv,
                          (double)e->size);
        rc |= lctl__gauge(reg, "lease_agent_segment_registration_seconds",
                          "How long registering one segment took.", sl, sv,
                          (double)e->registration_ns / 1e9);
    }
    return rc ? -1 : 0;
}
