/* Counters for logs and tests: per class, per client. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

/* Locked. */
static void snapshot(const struct lease_service *svc, struct lease_stats *st)
{
    *st = svc->st;
    st->clients = base_idtab_live(&svc->clients);
    st->bytes_mapped = svc->mapped;
    st->max_mapped_bytes = svc->cfg.max_mapped_bytes;
    st->staged_mapped = svc->staged;
    st->budget_staged = svc->cfg.budget_staged;
    st->segments = svc->segments;
    st->max_segments = svc->cfg.max_segments_total;
    for (int cls = LT_CLASS_STAGED; cls <= LT_CLASS_MAX; cls++)
        st->cls[cls].budget = lease__budget(svc, (enum lt_class)cls);
}

int lease_service_stats(struct lease_service *svc, struct lease_stats *stats_p)
{
    if (!svc || !stats_p)
        return -EINVAL;
    struct lease_stats st;
    pthread_mutex_lock(&svc->mu);
    snapshot(svc, &st);
    pthread_mutex_unlock(&svc->mu);
    *stats_p = st;
    return 0;
}

int lease_client_stats(struct lease_service *svc, struct lease_client_id client,
                       struct lease_client_stats *stats_p, struct lt_failure *why_p)
{
    if (!svc || !stats_p)
        return lt_failure_set(why_p, LT_E_BAD_VALUE, -EINVAL,
                              "lease_client_stats: expected service and output");
    struct base_idtab_slot *s = NULL;
    int rc = 0;
    struct lease_client_stats st = {0};
    pthread_mutex_lock(&svc->mu);
    switch (lease__id_lookup(&svc->clients, client.value, &s)) {
    case LEASE__ID_NEVER:
        rc = lease__fail(svc, why_p, LT_E_NOT_FOUND, -ENOENT,
                         "client id %#" PRIx64 " was never issued", client.value);
        break;
    case LEASE__ID_STALE:
    case LEASE__ID_FREED:
        rc = lease__fail(svc, why_p, LT_E_STALE_ID, -ESTALE,
                         "client id %#" PRIx64 " is stale: that client was dropped", client.value);
        break;
    case LEASE__ID_LIVE: {
        const struct lease__client *c = s->obj;
        st.leases = c->leases;
        st.bytes = c->bytes;
        st.segments = c->segments;
        st.dropping = c->dropping;
        st.mapped = c->mapped;
        st.staged = c->staged;
        break;
    }
    }
    pthread_mutex_unlock(&svc->mu);
    if (rc == 0)
        *stats_p = st;
    return rc;
}

struct out {
    char *buf;
    size_t len;
    size_t need;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(struct out *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = o->need < o->len ? o->len - o->need : 0;
    int w = vsnprintf(room ? o->buf + o->need : NULL, room, fmt, ap);
    va_end(ap);
    if (w > 0)
        o->need += (size_t)w;
}

int lease_stats_format(struct lease_service *svc, char *buf, size_t len)
{
    if (!svc || (len && !buf))
        return -EINVAL;
    struct out o = {buf, len, 0};
    if (len)
        buf[0] = '\0';
    pthread_mutex_lock(&svc->mu);
    struct lease_stats st;
    snapshot(svc, &st);
    put(&o,
        "lease stats: clients=%" PRIu64 " draining_leases=%" PRIu64 " pending_work=%" PRIu64
        " segments=%" PRIu64 " mapped=%" PRIu64 "/%" PRIu64 "B staged_mapped=%" PRIu64 "/%" PRIu64
        "B\n",
        st.clients, st.draining_leases, st.pending_work, st.segments, st.bytes_mapped,
        st.max_mapped_bytes, st.staged_mapped, st.budget_staged);
    for (int cls = LT_CLASS_STAGED; cls <= LT_CLASS_MAX; cls++) {
        const struct lease_class_stats *c = &st.cls[cls];
        put(&o,
            "  %s: segments=%" PRIu64 " (huge %" PRIu64 ") registered=%" PRIu64 "/%" PRIu64
            "B leases=%" PRIu64 " leased=%" PRIu64 "B registrations=%" PRIu64
            " (%.3f ms) unregistrations=%" PRIu64 " evictions=%" PRIu64 " budget_refusals=%" PRIu64
            " fallbacks=%" PRIu64 " retiring=%" PRIu64 "B\n",
            lt_class_name((uint32_t)cls), c->segments, c->huge_segments, c->bytes_registered,
            c->budget, c->live_leases, c->bytes_leased, c->registrations,
            (double)c->registration_ns / 1e6, c->unregistrations, c->evictions, c->budget_refusals,
            c->fallbacks, c->bytes_retiring);
    }
    const struct lease__client *c;
    for (uint32_t cur = 0; (c = lease__next(&svc->clients, &cur));) {
        if (!c)
            continue;
        put(&o,
            "  client %#" PRIx64 ": leases=%" PRIu64 " bytes=%" PRIu64 " segments=%" PRIu64
            " mapped=%" PRIu64 "B staged=%" PRIu64 "B%s\n",
            c->id, c->leases, c->bytes, c->segments, c->mapped, c->staged,
            c->dropping ? " (dropping)" : "");
    }
    pthread_mutex_unlock(&svc->mu);
    /* vsnprintf with a partial room already terminated; a zero room did not. */
    if (len && o.need >= len)
        buf[len - 1] = '\0';
    return o.need > INT32_MAX ? INT32_MAX : (int)o.need;
}
