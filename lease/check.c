/* lease_service_check: recomputes every counter of the service from the
 * objects in its four id tables and follows every link between them
 * (lease -> segment -> client, ticket -> lease). Self-contained on purpose:
 * it reads internal.h and changes nothing, so service.c stays as it is. */
#include "lease/check.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "internal.h"

static bool reg_class(enum lt_class cls)
{
    return cls == LT_CLASS_PINNED || cls == LT_CLASS_MAPPED;
}

__attribute__((format(printf, 3, 4))) static int check__fail(char *msg, size_t len,
                                                             const char *fmt, ...)
{
    if (msg && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, len, fmt, ap);
        va_end(ap);
    }
    return -EUCLEAN;
}

/* What the objects add up to, per class and per client id. */
struct check__sums {
    uint64_t segments[LT_CLASS_SLOTS];
    uint64_t huge[LT_CLASS_SLOTS];
    uint64_t registered[LT_CLASS_SLOTS];
    uint64_t live_leases[LT_CLASS_SLOTS];
    uint64_t bytes_leased[LT_CLASS_SLOTS];
    uint64_t draining;
    uint64_t tickets;
};

/* Locked. Each lease against its segment and client; per class sums in @s. */
static int check__leases(struct lease_service *svc, struct check__sums *s, char *msg, size_t len)
{
    struct base_idtab_slot *slot;
    uint64_t id;
    for (uint32_t cur = 0; (slot = base_idtab_next(&svc->leases, &cur, &id));) {
        const struct lease__lease *l = slot->obj;
        if (!l || l->id != id)
            return check__fail(msg, len, "lease %#" PRIx64 ": slot holds %s", id,
                               l ? "another id" : "no object");
        if (slot->owner != l->client)
            return check__fail(msg, len, "lease %#" PRIx64 ": table owner %#" PRIx64
                               ", lease says client %#" PRIx64, id, slot->owner, l->client);
        if (!lt_class_is_valid(l->cls))
            return check__fail(msg, len, "lease %#" PRIx64 ": class %d", id, (int)l->cls);
        const struct lease__segment *seg = l->seg;
        if (!seg || base_idtab_get(&svc->segs, seg->id) != seg)
            return check__fail(msg, len, "lease %#" PRIx64 ": its segment is not live", id);
        if (seg->client != l->client)
            return check__fail(msg, len, "lease %#" PRIx64 " of client %#" PRIx64
                               " lies in segment %#" PRIx64 " of client %#" PRIx64,
                               id, l->client, seg->id, seg->client);
        if (l->length == 0 || l->offset > seg->size || l->length > seg->size - l->offset)
            return check__fail(msg, len, "lease %#" PRIx64 ": [%" PRIu64 ", +%" PRIu64
                               ") outside its %" PRIu64 "-byte segment",
                               id, l->offset, l->length, seg->size);
        if (l->cls > seg->cls)
            return check__fail(msg, len, "lease %#" PRIx64 ": class %s above its segment's %s",
                               id, lt_class_name(l->cls), lt_class_name(seg->cls));
        if (reg_class(l->cls) && !seg->registered)
            return check__fail(msg, len, "lease %#" PRIx64 ": %s on an unregistered segment", id,
                               lt_class_name(l->cls));
        if (l->released && l->pending == 0)
            return check__fail(msg, len, "lease %#" PRIx64 ": released with no work pending, "
                               "yet not complete", id);
        if (!base_idtab_get(&svc->clients, l->client))
            return check__fail(msg, len, "lease %#" PRIx64 ": client %#" PRIx64 " is not live",
                               id, l->client);
        s->live_leases[l->cls]++;
        s->bytes_leased[l->cls] += l->length;
        if (l->released)
            s->draining++;
    }
    return 0;
}

/* Locked. Per segment: its leases, registration, client; per class sums. */
static int check__segments(struct lease_service *svc, struct check__sums *s, char *msg, size_t len)
{
    struct base_idtab_slot *slot;
    uint64_t id;
    for (uint32_t cur = 0; (slot = base_idtab_next(&svc->segs, &cur, &id));) {
        const struct lease__segment *seg = slot->obj;
        if (!seg || seg->id != id)
            return check__fail(msg, len, "segment %#" PRIx64 ": slot holds %s", id,
                               seg ? "another id" : "no object");
        if (slot->owner != seg->client || !base_idtab_get(&svc->clients, seg->client))
            return check__fail(msg, len, "segment %#" PRIx64 ": client %#" PRIx64
                               " (table owner %#" PRIx64 ") is not live",
                               id, seg->client, slot->owner);
        if (!lt_class_is_valid(seg->cls) || seg->size == 0 || !seg->base || seg->fd < 0)
            return check__fail(msg, len, "segment %#" PRIx64 ": class %d size %" PRIu64
                               " base %p fd %d", id, (int)seg->cls, seg->size, seg->base, seg->fd);
        if (!reg_class(seg->cls) && seg->registered)
            return check__fail(msg, len, "segment %#" PRIx64 ": STAGED yet registered", id);
        if (reg_class(seg->cls) && (seg->reg_leases || seg->holds) && !seg->registered)
            return check__fail(msg, len, "segment %#" PRIx64 ": %" PRIu64 " registered leases, %"
                               PRIu64 " holds, yet not registered", id, seg->reg_leases, seg->holds);
        uint64_t leases = 0, reg_leases = 0;
        struct base_idtab_slot *ls;
        for (uint32_t lc = 0; (ls = base_idtab_next(&svc->leases, &lc, NULL));) {
            const struct lease__lease *l = ls->obj;
            if (l && l->seg == seg) {
                leases++;
                reg_leases += reg_class(l->cls);
            }
        }
        if (leases != seg->leases || reg_leases != seg->reg_leases)
            return check__fail(msg, len, "segment %#" PRIx64 ": counts %" PRIu64 " leases (%"
                               PRIu64 " registered), found %" PRIu64 " (%" PRIu64 ")",
                               id, seg->leases, seg->reg_leases, leases, reg_leases);
        s->segments[seg->cls]++;
        if (seg->page_size > (uint64_t)sysconf(_SC_PAGESIZE))
            s->huge[seg->cls]++;
        if (seg->registered)
            s->registered[seg->cls] += seg->size;
    }
    return 0;
}

/* Locked. Per client: its leases, bytes, segments and holds. */
static int check__clients(struct lease_service *svc, char *msg, size_t len)
{
    struct base_idtab_slot *slot;
    uint64_t id;
    for (uint32_t cur = 0; (slot = base_idtab_next(&svc->clients, &cur, &id));) {
        const struct lease__client *c = slot->obj;
        if (!c || c->id != id)
            return check__fail(msg, len, "client %#" PRIx64 ": slot holds %s", id,
                               c ? "another id" : "no object");
        uint64_t leases = 0, bytes = 0, segments = 0, holds = 0;
        struct base_idtab_slot *o;
        for (uint32_t k = 0; (o = base_idtab_next(&svc->leases, &k, NULL));) {
            const struct lease__lease *l = o->obj;
            if (l && l->client == id) {
                leases++;
                bytes += l->length;
                if (c->dropping && !l->released)
                    return check__fail(msg, len, "client %#" PRIx64 " is dropping, yet its "
                                       "lease %#" PRIx64 " is not released", id, l->id);
            }
        }
        for (uint32_t k = 0; (o = base_idtab_next(&svc->segs, &k, NULL));) {
            const struct lease__segment *seg = o->obj;
            if (seg && seg->client == id) {
                segments++;
                holds += seg->holds;
            }
        }
        /* A segment being registered outside the lock is counted before it
         * is in the table (c->busy of them). */
        if (leases != c->leases || bytes != c->bytes || holds != c->holds ||
            segments > c->segments || c->segments - segments > c->busy)
            return check__fail(msg, len, "client %#" PRIx64 ": counts %" PRIu64 " leases, %"
                               PRIu64 " bytes, %" PRIu64 " segments (%" PRIu32 " busy), %" PRIu64
                               " holds; found %" PRIu64 ", %" PRIu64 ", %" PRIu64 ", %" PRIu64,
                               id, c->leases, c->bytes, c->segments, c->busy, c->holds, leases,
                               bytes, segments, holds);
        if (c->leases > c->lim.max_leases || c->segments > c->lim.max_segments ||
            c->bytes > c->lim.max_bytes)
            return check__fail(msg, len, "client %#" PRIx64 ": over its limits", id);
    }
    return 0;
}

/* Locked. Tickets point at live leases and add up to each lease's pending. */
static int check__tickets(struct lease_service *svc, struct check__sums *s, char *msg, size_t len)
{
    struct base_idtab_slot *slot;
    uint64_t id;
    for (uint32_t cur = 0; (slot = base_idtab_next(&svc->tickets, &cur, &id));) {
        const struct lease__lease *l = slot->obj;
        if (!l || base_idtab_get(&svc->leases, l->id) != l)
            return check__fail(msg, len, "ticket %#" PRIx64 ": its lease is not live", id);
        s->tickets++;
    }
    struct base_idtab_slot *ls;
    for (uint32_t cur = 0; (ls = base_idtab_next(&svc->leases, &cur, NULL));) {
        const struct lease__lease *l = ls->obj;
        uint64_t pending = 0;
        for (uint32_t k = 0; (slot = base_idtab_next(&svc->tickets, &k, NULL));)
            pending += slot->obj == l;
        if (pending != l->pending)
            return check__fail(msg, len, "lease %#" PRIx64 ": counts %" PRIu64
                               " pending work items, %" PRIu64 " tickets name it",
                               l->id, l->pending, pending);
    }
    return 0;
}

/* Locked. The service's own counters and budgets against the sums. */
static int check__totals(struct lease_service *svc, const struct check__sums *s, char *msg,
                         size_t len)
{
    if (s->draining != svc->st.draining_leases || s->tickets != svc->st.pending_work)
        return check__fail(msg, len, "service counts %" PRIu64 " draining leases and %" PRIu64
                           " pending work items, found %" PRIu64 " and %" PRIu64,
                           svc->st.draining_leases, svc->st.pending_work, s->draining, s->tickets);
    for (int k = LT_CLASS_STAGED; k <= LT_CLASS_MAX; k++) {
        const struct lease_class_stats *st = &svc->st.cls[k];
        const char *name = lt_class_name((enum lt_class)k);
        if (st->segments != s->segments[k] || st->huge_segments != s->huge[k])
            return check__fail(msg, len, "%s: counts %" PRIu64 " segments (%" PRIu64
                               " huge), found %" PRIu64 " (%" PRIu64 ")",
                               name, st->segments, st->huge_segments, s->segments[k], s->huge[k]);
        if (st->bytes_registered != s->registered[k] ||
            svc->acct[k].registered != s->registered[k])
            return check__fail(msg, len, "%s: counts %" PRIu64 " bytes registered (budget "
                               "account %" PRIu64 "), found %" PRIu64,
                               name, st->bytes_registered, svc->acct[k].registered,
                               s->registered[k]);
        if (st->live_leases != s->live_leases[k] || st->bytes_leased != s->bytes_leased[k])
            return check__fail(msg, len, "%s: counts %" PRIu64 " live leases of %" PRIu64
                               " bytes, found %" PRIu64 " of %" PRIu64,
                               name, st->live_leases, st->bytes_leased, s->live_leases[k],
                               s->bytes_leased[k]);
        if (reg_class((enum lt_class)k)) {
            uint64_t budget = lease__budget(svc, (enum lt_class)k);
            /* Bytes still being unregistered by the backend's thread count too. */
            uint64_t used = svc->acct[k].registered + svc->acct[k].reserved;
            uint64_t all = used + svc->acct[k].retiring;
            if (used < svc->acct[k].registered || all < used || all > budget)
                return check__fail(msg, len, "%s: %" PRIu64 " bytes registered, %" PRIu64
                                   " reserved and %" PRIu64 " retiring pass the budget of %" PRIu64,
                                   name, svc->acct[k].registered, svc->acct[k].reserved,
                                   svc->acct[k].retiring, budget);
            if (st->bytes_retiring != svc->acct[k].retiring)
                return check__fail(msg, len, "%s: counts %" PRIu64 " bytes retiring, the budget "
                                   "account %" PRIu64, name, st->bytes_retiring,
                                   svc->acct[k].retiring);
        } else if (svc->acct[k].registered || svc->acct[k].reserved || svc->acct[k].retiring) {
            return check__fail(msg, len, "%s: has registered or reserved bytes", name);
        }
    }
    return 0;
}

int lease_service_check(struct lease_service *svc, char *msg, size_t len)
{
    if (!svc)
        return -EINVAL;
    if (msg && len)
        msg[0] = '\0';
    struct check__sums s = {0};
    pthread_mutex_lock(&svc->mu);
    int rc = check__leases(svc, &s, msg, len);
    if (rc == 0)
        rc = check__segments(svc, &s, msg, len);
    if (rc == 0)
        rc = check__clients(svc, msg, len);
    if (rc == 0)
        rc = check__tickets(svc, &s, msg, len);
    if (rc == 0)
        rc = check__totals(svc, &s, msg, len);
    pthread_mutex_unlock(&svc->mu);
    return rc;
}
