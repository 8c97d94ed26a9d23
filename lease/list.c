/* Lists of leases and segments, a page at a time, for the agent's
 * LEASE_LIST and SEGMENT_LIST (leasectl): copies under the service's lock,
 * never a pointer out. The cursor is the id table slot to resume at
 * (base_idtab_next's), 0 the start; a returned one is never 0, because an
 * entry before it was copied. */
#include <errno.h>

#include "internal.h"

/* The client filter: 0 matches every client. */
static int lease_list__match(uint64_t want, uint64_t client)
{
    return want == 0 || want == client;
}

static int lease_list__client_dropping(const struct lease_service *svc, uint64_t client)
{
    struct base_idtab_slot *s = NULL;
    if (lease__id_lookup(&svc->clients, client, &s) != LEASE__ID_LIVE)
        return 1;
    return ((const struct lease__client *)s->obj)->dropping;
}

int lease_service_leases_list(struct lease_service *svc, struct lease_client_id client,
                              uint64_t cursor, struct lease_list_lease *out_p, size_t max,
                              uint64_t *next_cursor_p)
{
    if (!svc || !out_p || max == 0 || !next_cursor_p || cursor > UINT32_MAX)
        return -EINVAL;
    uint32_t cur = (uint32_t)cursor, at = cur;
    size_t n = 0;
    uint64_t next = 0;
    pthread_mutex_lock(&svc->mu);
    for (const struct lease__lease *l; (l = lease__next(&svc->leases, &cur)); at = cur) {
        if (!lease_list__match(client.value, l->client))
            continue;
        if (n == max) {
            next = (uint64_t)at; /* resumes at this one; never 0 once one was copied */
            break;
        }
        out_p[n++] = (struct lease_list_lease){
            .lease = lt_lease_id_from_u64(l->id),
            .client = {l->client},
            .segment = lt_segment_id_from_u64(l->seg->id),
            .offset = l->offset,
            .length = l->length,
            .cls = l->cls,
            .released = l->released,
            .pending_work = l->pending,
            .granted_ns = l->granted_ns,
        };
    }
    pthread_mutex_unlock(&svc->mu);
    *next_cursor_p = next;
    return (int)n;
}

int lease_service_segments_list(struct lease_service *svc, struct lease_client_id client,
                                uint64_t cursor, struct lease_list_segment *out_p, size_t max,
                                uint64_t *next_cursor_p)
{
    if (!svc || !out_p || max == 0 || !next_cursor_p || cursor > UINT32_MAX)
        return -EINVAL;
    uint32_t cur = (uint32_t)cursor, at = cur;
    size_t n = 0;
    uint64_t next = 0;
    pthread_mutex_lock(&svc->mu);
    for (const struct lease__segment *g; (g = lease__next(&svc->segs, &cur)); at = cur) {
        if (!lease_list__match(client.value, g->client))
            continue;
        if (n == max) {
            next = (uint64_t)at;
            break;
        }
        out_p[n++] = (struct lease_list_segment){
            .segment = lt_segment_id_from_u64(g->id),
            .client = {g->client},
            .cls = g->cls,
            .size = g->size,
            .page_size = g->page_size,
            .registered = g->registered,
            .dropping = (uint32_t)lease_list__client_dropping(svc, g->client),
            .leases = g->leases,
            .holds = g->holds,
            .added_ns = g->added_ns,
            .registration_ns = g->registration_ns,
        };
    }
    pthread_mutex_unlock(&svc->mu);
    *next_cursor_p = next;
    return (int)n;
}
