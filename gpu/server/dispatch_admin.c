/* LEASE_LIST and SEGMENT_LIST (docs/operations.md, "Agent queries"): the
 * lease service's lists (lease/list.c) turned into wire entries, with the
 * holders' wire client ids and the segments' cookies, which only the
 * server knows. Who may see what: a client granted LT_CAP_INTROSPECT sees
 * its own entries; every client's (client_id 0, or another id) only when
 * its uid is the agent's own or root, because peers allowed by
 * --allow-uid may be other users, whose leases are not theirs to read. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conn.h"
#include "dispatch_admin.h"

int ga_server__peer_privileged(const struct ga_server__conn *c)
{
    return c->uid == 0 || c->uid == geteuid();
}

/* The wire id of lease-service client @client, closed connections that
 * still drain included; 0 when none is known. */
static uint32_t ga_admin__wire_id(const struct ga_server *srv, struct lease_client_id client)
{
    for (const struct ga_server__conn *c = srv->conns; c; c = c->next)
        if (lease_client_id_eq(c->client, client))
            return c->id;
    return 0;
}

/* Which lease-service client @m names for @c: *filter_p, {0} for all.
 * Returns 0, or sends the ERROR and returns -1. */
static int ga_admin__filter(struct ga_server__conn *c, const struct lt_msg_list_request *m,
                            uint16_t type, struct lease_client_id *filter_p)
{
    if (m->client_id == c->id) {
        *filter_p = c->client;
        return 0;
    }
    if (!ga_server__peer_privileged(c)) {
        ga_server__send_error(c, m->hdr.request_id, type, LT_E_NOT_OWNER, 0, LT_INDEX_NONE,
                              "uid %u may list its own client (%" PRIu32 ") only; others need "
                              "uid %u or root",
                              (unsigned)c->uid, c->id, (unsigned)geteuid());
        return -1;
    }
    if (m->client_id == 0) {
        *filter_p = (struct lease_client_id){0};
        return 0;
    }
    for (const struct ga_server__conn *o = c->srv->conns; o; o = o->next)
        if (o->id == m->client_id) {
            *filter_p = o->client;
            return 0;
        }
    ga_server__send_error(c, m->hdr.request_id, type, LT_E_NOT_FOUND, 0, LT_INDEX_NONE,
                          "no client %" PRIu32 " is connected", m->client_id);
    return -1;
}

static uint32_t ga_admin__u32(uint64_t v)
{
    return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

/* A page of leases into @r; returns the count or the service's -errno. */
static int ga_admin__leases(struct ga_server *srv, struct lease_client_id filter, uint64_t cursor,
                            struct lt_msg_lease_list_reply *r, uint64_t *next_p)
{
    struct lease_list_lease *l = calloc(LT_LIST_MAX_ENTRIES, sizeof *l);
    if (!l)
        return -ENOMEM;
    int n = lease_service_leases_list(srv->svc, filter, cursor, l, LT_LIST_MAX_ENTRIES, next_p);
    uint64_t now = base_now_ns();
    uint32_t k = 0;
    for (int i = 0; i < n; i++) {
        uint32_t id = ga_admin__wire_id(srv, l[i].client);
        if (id == 0)
            continue; /* a holder the server no longer knows: nothing to name it by */
        r->entries[k++] = (struct lt_lease_info){
            .lease = l[i].lease,
            .segment = l[i].segment,
            .client_id = id,
            .mem_class = (uint32_t)l[i].cls,
            .offset = l[i].offset,
            .length = l[i].length,
            .age_ns = now > l[i].granted_ns ? now - l[i].granted_ns : 0,
            .work_inflight = ga_admin__u32(l[i].pending_work),
            .state = l[i].released ? LT_LEASE_STATE_RELEASING : LT_LEASE_STATE_HELD,
        };
    }
    free(l);
    return n < 0 ? n : (int)k;
}

/* The page size in KiB as the wire wants it: a power of two, at least 4. */
static uint32_t ga_admin__page_kib(uint64_t page)
{
    uint64_t kib = page / 1024;
    if (kib < 4 || (kib & (kib - 1)) != 0 || kib > UINT32_MAX)
        return 4;
    return (uint32_t)kib;
}

static int ga_admin__segments(struct ga_server *srv, struct lease_client_id filter,
                              uint64_t cursor, struct lt_msg_segment_list_reply *r,
                              uint64_t *next_p)
{
    struct lease_list_segment *g = calloc(LT_LIST_MAX_ENTRIES, sizeof *g);
    if (!g)
        return -ENOMEM;
    int n = lease_service_segments_list(srv->svc, filter, cursor, g, LT_LIST_MAX_ENTRIES, next_p);
    uint64_t now = base_now_ns();
    uint32_t k = 0;
    for (int i = 0; i < n; i++) {
        uint32_t id = ga_admin__wire_id(srv, g[i].client);
        if (id == 0)
            continue;
        const struct ga_server__seg *s =
            base_u64map_get(&srv->segs, lt_segment_id_to_u64(g[i].segment));
        uint32_t flags = (g[i].registered ? LT_SEGMENT_INFO_F_REGISTERED : 0u) |
                         (g[i].dropping ? LT_SEGMENT_INFO_F_DRAINING : 0u) |
                         (g[i].page_size > 4096 ? LT_SEGMENT_INFO_F_HUGE : 0u);
        r->entries[k++] = (struct lt_segment_info){
            .segment = g[i].segment,
            .client_id = id,
            .mem_class = (uint32_t)g[i].cls,
            .size = g[i].size,
            .cookie = s ? s->cookie : 0,
            .age_ns = now > g[i].added_ns ? now - g[i].added_ns : 0,
            .registration_ns = g[i].registration_ns,
            .live_leases = ga_admin__u32(g[i].leases),
            .holds = ga_admin__u32(g[i].holds),
            .flags = flags,
            .page_kib = ga_admin__page_kib(g[i].page_size),
        };
    }
    free(g);
    return n < 0 ? n : (int)k;
}

void ga_server__list(struct ga_server__conn *c, const struct lt_msg_list_request *m,
                     uint16_t type)
{
    uint64_t rid = m->hdr.request_id;
    if (!(c->caps & LT_CAP_INTROSPECT)) {
        ga_server__send_error(c, rid, type, LT_E_UNKNOWN_TYPE, 0, LT_INDEX_NONE,
                              "%s needs LT_CAP_INTROSPECT, not granted at HELLO",
                              lt_msg_type_name(type));
        return;
    }
    struct lease_client_id filter;
    if (ga_admin__filter(c, m, type, &filter) < 0)
        return;
    union {
        uint64_t align;
        unsigned char bytes[LT_MSG_MAX_BYTES];
    } out;
    memset(out.bytes, 0, sizeof out.bytes);
    uint64_t next = 0;
    int n;
    size_t entry;
    uint16_t rtype;
    if (type == LT_MSG_LEASE_LIST_REQUEST) {
        n = ga_admin__leases(c->srv, filter, m->cursor, (void *)out.bytes, &next);
        entry = sizeof(struct lt_lease_info);
        rtype = LT_MSG_LEASE_LIST_REPLY;
    } else {
        n = ga_admin__segments(c->srv, filter, m->cursor, (void *)out.bytes, &next);
        entry = sizeof(struct lt_segment_info);
        rtype = LT_MSG_SEGMENT_LIST_REPLY;
    }
    if (n == -EINVAL) {
        ga_server__send_error(c, rid, type, LT_E_BAD_VALUE, 0, LT_INDEX_NONE,
                              "cursor %" PRIu64 ": not one this agent gave", m->cursor);
        return;
    }
    if (n < 0) {
        ga_server__send_error(c, rid, type, LT_E_SYSTEM, n, LT_INDEX_NONE,
                              "agent out of memory");
        return;
    }
    /* Both replies share the fixed part; lt_msg_init would zero the entries. */
    struct lt_msg_lease_list_reply *r = (void *)out.bytes;
    size_t len = sizeof *r + (size_t)n * entry;
    lt_header_init(&r->hdr, rtype, (uint32_t)len, rid);
    r->count = (uint32_t)n;
    r->flags = next ? LT_LIST_F_MORE : 0u;
    r->next_cursor = next;
    ga_server__send(c, r, (uint32_t)len);
}
