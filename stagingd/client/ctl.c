/* The lease client's typed commands: stream, event and device commands and
 * the stats request, built into lease-types messages and sent through the
 * raw path (msg.c, client.c), and the public forms of what the agent sent
 * (its limits, CTL_REPLY, STATS_REPLY). The public header keeps the wire
 * protocol's headers out of what is installed; the asserts below hold its
 * values and layouts to the protocol's, so a copy is a memcpy. */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "client_internal.h"

/* ---- the public values are the wire values ---- */

#define LEASEC__SAME(a, b) LT_STATIC_ASSERT((long long)(a) == (long long)(b), #a " == " #b)
#define LEASEC__SAME_FIELD(pub, wire, field)                                                       \
    LT_STATIC_ASSERT(offsetof(pub, field) == offsetof(wire, field) &&                              \
                         sizeof(((pub *)0)->field) == sizeof(((wire *)0)->field),                  \
                     #pub "." #field " is the wire's")

LEASEC__SAME(LEASEC_CAP_DOORBELL, LT_CAP_DOORBELL);
LEASEC__SAME(LEASEC_CAP_DONE_WORD, LT_CAP_DONE_WORD);
LEASEC__SAME(LEASEC_CAP_TIMING, LT_CAP_TIMING);
LEASEC__SAME(LEASEC_CAP_HOST_BACKEND, LT_CAP_HOST_BACKEND);
LEASEC__SAME(LEASEC_CAP_RC_BATCH, LT_CAP_RC_BATCH);
LEASEC__SAME(LEASEC_LEASE_F_ALLOW_STAGED, LT_LEASE_F_ALLOW_STAGED);
LEASEC__SAME(LEASEC_LEASE_REQ_F_ALL_OR_NOTHING, LT_LEASE_REQ_F_ALL_OR_NOTHING);
LEASEC__SAME(LEASEC_SUBMIT_F_QUIET, LT_SUBMIT_F_QUIET);
LEASEC__SAME(LEASEC_STREAM_F_NONBLOCKING, LT_STREAM_F_NONBLOCKING);
LEASEC__SAME(LEASEC_STREAM_F_HIGH_PRIORITY, LT_STREAM_F_HIGH_PRIORITY);
LEASEC__SAME(LEASEC_EVENT_F_TIMING, LT_EVENT_F_TIMING);
LEASEC__SAME(LEASEC_STATS_F_ALL_CLIENTS, LT_STATS_F_ALL_CLIENTS);
LEASEC__SAME(LEASEC_MAX_STATS_CLIENTS, LT_MAX_STATS_CLIENTS);
LEASEC__SAME(LEASEC_NAME_LEN, LT_NAME_LEN);
LEASEC__SAME(LEASEC_MAX_BATCH, LT_MAX_BATCH);
LEASEC__SAME(LEASEC_INDEX_NONE, LT_INDEX_NONE);
LEASEC__SAME(LEASEC_BLOCK_NONE, LT_BLOCK_NONE);
LEASEC__SAME(LEASEC_SCAN_MAX_K, LT_SCAN_MAX_K);
LEASEC__SAME(LEASEC_SCAN_DIM_MAX, LT_SCAN_DIM_MAX);
LEASEC__SAME(LEASEC_SEGMENT_ALIGN, LT_SEGMENT_ALIGN);
LEASEC__SAME(LEASEC_SEGMENT_SIZE_MAX, LT_SEGMENT_SIZE_MAX);
LEASEC__SAME(LEASEC_OP_CHECKSUM_VERIFY, LT_OP_CHECKSUM_VERIFY);
LEASEC__SAME(LEASEC_OP_VECTOR_SCAN, LT_OP_VECTOR_SCAN);
LEASEC__SAME(LEASEC_OP_COPY_H2D, LT_OP_COPY_H2D);
LEASEC__SAME(LEASEC_ELEM_F32, LT_ELEM_F32);
LEASEC__SAME(LEASEC_ELEM_F16, LT_ELEM_F16);
LEASEC__SAME(LEASEC_SCAN_DOT, LT_SCAN_DOT);
LEASEC__SAME(LEASEC_SCAN_L2, LT_SCAN_L2);
LEASEC__SAME(LEASEC_REQ_HELLO, LT_MSG_HELLO);
LEASEC__SAME(LEASEC_REQ_SEGMENT_OFFER, LT_MSG_SEGMENT_OFFER);
LEASEC__SAME(LEASEC_REQ_LEASE_REQUEST, LT_MSG_LEASE_REQUEST);
LEASEC__SAME(LEASEC_REQ_LEASE_RELEASE, LT_MSG_LEASE_RELEASE);
LEASEC__SAME(LEASEC_REQ_SUBMIT, LT_MSG_SUBMIT);
LEASEC__SAME(LEASEC_REQ_STREAM_CREATE, LT_MSG_STREAM_CREATE);
LEASEC__SAME(LEASEC_REQ_STREAM_VALIDATE, LT_MSG_STREAM_VALIDATE);
LEASEC__SAME(LEASEC_REQ_STREAM_QUERY, LT_MSG_STREAM_QUERY);
LEASEC__SAME(LEASEC_REQ_STREAM_SYNCHRONIZE, LT_MSG_STREAM_SYNCHRONIZE);
LEASEC__SAME(LEASEC_REQ_STREAM_DESTROY, LT_MSG_STREAM_DESTROY);
LEASEC__SAME(LEASEC_REQ_EVENT_RECORD, LT_MSG_EVENT_RECORD);
LEASEC__SAME(LEASEC_REQ_EVENT_WAIT, LT_MSG_EVENT_WAIT);
LEASEC__SAME(LEASEC_REQ_EVENT_QUERY, LT_MSG_EVENT_QUERY);
LEASEC__SAME(LEASEC_REQ_EVENT_SYNCHRONIZE, LT_MSG_EVENT_SYNCHRONIZE);
LEASEC__SAME(LEASEC_REQ_EVENT_DESTROY, LT_MSG_EVENT_DESTROY);
LEASEC__SAME(LEASEC_REQ_EVENT_ELAPSED, LT_MSG_EVENT_ELAPSED);
LEASEC__SAME(LEASEC_REQ_DEVICE_SYNCHRONIZE, LT_MSG_DEVICE_SYNCHRONIZE);
LEASEC__SAME(LEASEC_REQ_STATS, LT_MSG_STATS_REQUEST);
LEASEC__SAME(LEASEC_CAP_STREAM, LT_CAP_STREAM);
LEASEC__SAME(LEASEC_REQ_RING_OPEN, LT_MSG_RING_OPEN);
LEASEC__SAME(LEASEC_REQ_RING_SHARD, LT_MSG_RING_SHARD);
LEASEC__SAME(LEASEC_REQ_RING_CLOSE, LT_MSG_RING_CLOSE);
LEASEC__SAME(LEASEC_RING_SLOTS_MAX, LT_RING_SLOTS_MAX);
LEASEC__SAME(LEASEC_RING_DEPTH_MAX, LT_RING_DEPTH_MAX);
LEASEC__SAME(LEASEC_RING_SLOT_ALIGN, LT_RING_SLOT_ALIGN);

LEASEC__SAME(sizeof(union leasec_op_args), sizeof(union lt_op_args));
LEASEC__SAME(sizeof(union leasec_op_result), sizeof(union lt_op_result));
LEASEC__SAME(sizeof(struct leasec_op_checksum), sizeof(struct lt_op_checksum_verify));
LEASEC__SAME_FIELD(struct leasec_op_checksum, struct lt_op_checksum_verify, offset);
LEASEC__SAME_FIELD(struct leasec_op_checksum, struct lt_op_checksum_verify, length);
LEASEC__SAME_FIELD(struct leasec_op_checksum, struct lt_op_checksum_verify, sums_offset);
LEASEC__SAME_FIELD(struct leasec_op_checksum, struct lt_op_checksum_verify, block_size);
LEASEC__SAME_FIELD(struct leasec_op_checksum, struct lt_op_checksum_verify, reserved);
LEASEC__SAME(sizeof(struct leasec_op_scan), sizeof(struct lt_op_vector_scan));
LEASEC__SAME_FIELD(struct leasec_op_scan, struct lt_op_vector_scan, offset);
LEASEC__SAME_FIELD(struct leasec_op_scan, struct lt_op_vector_scan, length);
LEASEC__SAME_FIELD(struct leasec_op_scan, struct lt_op_vector_scan, query_offset);
LEASEC__SAME_FIELD(struct leasec_op_scan, struct lt_op_vector_scan, dim);
LEASEC__SAME_FIELD(struct leasec_op_scan, struct lt_op_vector_scan, elem);
LEASEC__SAME_FIELD(struct leasec_op_scan, struct lt_op_vector_scan, metric);
LEASEC__SAME_FIELD(struct leasec_op_scan, struct lt_op_vector_scan, hits_offset);
LEASEC__SAME_FIELD(struct leasec_op_scan, struct lt_op_vector_scan, k);
LEASEC__SAME_FIELD(struct leasec_op_scan, struct lt_op_vector_scan, reserved);
LEASEC__SAME(sizeof(struct leasec_op_copy), sizeof(struct lt_op_copy_h2d));
LEASEC__SAME_FIELD(struct leasec_op_copy, struct lt_op_copy_h2d, offset);
LEASEC__SAME_FIELD(struct leasec_op_copy, struct lt_op_copy_h2d, length);
LEASEC__SAME(sizeof(struct leasec_scan_hit), sizeof(struct lt_scan_hit));
LEASEC__SAME_FIELD(struct leasec_scan_hit, struct lt_scan_hit, score_bits);
LEASEC__SAME_FIELD(struct leasec_scan_hit, struct lt_scan_hit, index);
LEASEC__SAME(sizeof(struct leasec_checksum_result), sizeof(struct lt_checksum_result));
LEASEC__SAME_FIELD(struct leasec_checksum_result, struct lt_checksum_result, blocks_checked);
LEASEC__SAME_FIELD(struct leasec_checksum_result, struct lt_checksum_result, first_bad_block);
LEASEC__SAME_FIELD(struct leasec_checksum_result, struct lt_checksum_result, bad_blocks);
LEASEC__SAME_FIELD(struct leasec_checksum_result, struct lt_checksum_result, expected);
LEASEC__SAME_FIELD(struct leasec_checksum_result, struct lt_checksum_result, actual);
LEASEC__SAME(sizeof(struct leasec_scan_result), sizeof(struct lt_scan_result));
LEASEC__SAME_FIELD(struct leasec_scan_result, struct lt_scan_result, records_scanned);
LEASEC__SAME_FIELD(struct leasec_scan_result, struct lt_scan_result, best_index);
LEASEC__SAME_FIELD(struct leasec_scan_result, struct lt_scan_result, best_score_bits);
LEASEC__SAME(sizeof(struct leasec_copy_result), sizeof(struct lt_copy_result));
LEASEC__SAME_FIELD(struct leasec_copy_result, struct lt_copy_result, bytes_copied);
LEASEC__SAME(sizeof(struct leasec_agent_client_stats), sizeof(struct lt_client_stats));
LEASEC__SAME_FIELD(struct leasec_agent_client_stats, struct lt_client_stats, client_id);
LEASEC__SAME_FIELD(struct leasec_agent_client_stats, struct lt_client_stats, pid);
LEASEC__SAME_FIELD(struct leasec_agent_client_stats, struct lt_client_stats, name);
LEASEC__SAME_FIELD(struct leasec_agent_client_stats, struct lt_client_stats, segments);
LEASEC__SAME_FIELD(struct leasec_agent_client_stats, struct lt_client_stats, bytes_registered);
LEASEC__SAME_FIELD(struct leasec_agent_client_stats, struct lt_client_stats, live_leases);
LEASEC__SAME_FIELD(struct leasec_agent_client_stats, struct lt_client_stats, bytes_leased);
LEASEC__SAME_FIELD(struct leasec_agent_client_stats, struct lt_client_stats, leases_granted);
LEASEC__SAME_FIELD(struct leasec_agent_client_stats, struct lt_client_stats, submits);
LEASEC__SAME_FIELD(struct leasec_agent_client_stats, struct lt_client_stats, streams);
LEASEC__SAME_FIELD(struct leasec_agent_client_stats, struct lt_client_stats, events);
LEASEC__SAME(sizeof(struct leasec_agent_class_stats), sizeof(struct lt_class_stats));
LEASEC__SAME_FIELD(struct leasec_agent_class_stats, struct lt_class_stats, segments);
LEASEC__SAME_FIELD(struct leasec_agent_class_stats, struct lt_class_stats, bytes_registered);
LEASEC__SAME_FIELD(struct leasec_agent_class_stats, struct lt_class_stats, live_leases);
LEASEC__SAME_FIELD(struct leasec_agent_class_stats, struct lt_class_stats, bytes_leased);
LEASEC__SAME_FIELD(struct leasec_agent_class_stats, struct lt_class_stats, registrations);
LEASEC__SAME_FIELD(struct leasec_agent_class_stats, struct lt_class_stats, registration_ns);
LEASEC__SAME_FIELD(struct leasec_agent_class_stats, struct lt_class_stats, unregistrations);
LEASEC__SAME_FIELD(struct leasec_agent_class_stats, struct lt_class_stats, budget_refusals);

const char *leasec_request_name(unsigned type)
{
    return lt_msg_type_name(type);
}

/* ---- the public forms of the agent's messages ---- */

void leasec_client__hello_public(const struct lt_msg_hello_reply *m,
                                 struct leasec_agent_hello *hello_p)
{
    memset(hello_p, 0, sizeof(*hello_p));
    hello_p->version = m->version;
    hello_p->caps = m->caps;
    hello_p->client_id = m->client_id;
    hello_p->max_lease_batch = m->max_lease_batch;
    hello_p->max_streams = m->max_streams;
    hello_p->max_events = m->max_events;
    hello_p->max_segments = m->max_segments;
    hello_p->max_segment_bytes = m->max_segment_bytes;
    for (unsigned k = 0; k < LT_CLASS_SLOTS; k++)
        hello_p->class_budget[k] = m->class_budget[k];
    memcpy(hello_p->agent_name, m->agent_name, sizeof(hello_p->agent_name));
}

/* A validated STATS_REPLY, with the entry of the client the agent calls
 * @client_id. */
static void leasec_client__stats_public(const struct lt_msg_stats_reply *m, uint32_t client_id,
                                        struct leasec_agent_stats *stats_p)
{
    memset(stats_p, 0, sizeof(*stats_p));
    stats_p->uptime_ns = m->uptime_ns;
    memcpy(stats_p->classes, m->classes, sizeof(stats_p->classes));
    /* The validator bounds client_count by LT_MAX_STATS_CLIENTS. */
    stats_p->client_count = m->client_count;
    memcpy(stats_p->clients, m->clients, m->client_count * sizeof(stats_p->clients[0]));
    for (uint32_t k = 0; k < m->client_count; k++) {
        if (m->clients[k].client_id == client_id) {
            stats_p->self = stats_p->clients[k];
            stats_p->have_self = 1;
            break;
        }
    }
}

/* A validated CTL_REPLY or STATS_REPLY as the public reply; @stats holds
 * a STATS_REPLY's counters. */
static void leasec_client__reply_public(const struct leasec_client *c, unsigned agent,
                                        const void *msg, struct leasec_client_reply *reply_p,
                                        struct leasec_agent_stats *stats)
{
    const struct lt_header *h = msg;
    memset(reply_p, 0, sizeof(*reply_p));
    reply_p->agent = agent;
    reply_p->request_id = h->request_id;
    if (h->type == LT_MSG_CTL_REPLY) {
        const struct lt_msg_ctl_reply *m = msg;
        reply_p->request_type = m->request_type;
        reply_p->ready = m->ready;
        reply_p->stream = m->stream;
        reply_p->event = m->event;
        reply_p->elapsed_ms = lt_f32_from_bits(m->elapsed_ms_bits);
    } else {
        const struct leasec_client__agent *a = leasec_client__agent_get(c, agent);
        leasec_client__stats_public(msg, a ? a->hello.client_id : 0, stats);
        reply_p->request_type = LEASEC_REQ_STATS;
        reply_p->stats = stats;
    }
}

void leasec_client__reply_fire(struct leasec_client *c, unsigned agent, uint64_t request_id,
                               uint64_t tag, const void *msg)
{
    struct leasec_client_reply r;
    struct leasec_agent_stats stats;
    leasec_client__reply_public(c, agent, msg, &r, &stats);
    r.request_id = request_id;
    r.tag = tag;
    LEASEC_CLIENT__CALL(c, on_reply, &r);
}

/* ---- building the commands ---- */

/* The wire form of @ctl in @buf. Returns its length, or -EINVAL (with
 * last_error) for a type that is no command or a field it does not use. */
static int leasec_client__ctl_build(struct leasec_client *c, const struct leasec_ctl *ctl,
                                    union lt_msg_buffer *buf)
{
    const uint16_t t = ctl->type;
    const int event_ids = !lt_event_id_is_null(ctl->event) || !lt_event_id_is_null(ctl->end);
    if (!lt_msg_type_is_ctl(t))
        return leasec_client__fail(c, -EINVAL,
                                   "command type %u (%s): expected a stream, event or "
                                   "device command (%u..%u)",
                                   t, lt_msg_type_name(t), LT_MSG_STREAM_CREATE,
                                   LT_MSG_DEVICE_SYNCHRONIZE);
    if (t == LT_MSG_DEVICE_SYNCHRONIZE) {
        if (ctl->flags || event_ids || !lt_stream_id_is_null(ctl->stream))
            return leasec_client__fail(c, -EINVAL,
                                       "DEVICE_SYNCHRONIZE takes no stream, event or flags");
        lt_msg_init(buf, sizeof(struct lt_msg_device_sync), t, 1);
        return (int)sizeof(struct lt_msg_device_sync);
    }
    if (t <= LT_MSG_STREAM_DESTROY) {
        if (event_ids)
            return leasec_client__fail(c, -EINVAL, "%s takes no event", lt_msg_type_name(t));
        struct lt_msg_stream_cmd *m = (struct lt_msg_stream_cmd *)(void *)buf;
        lt_msg_init(m, sizeof(*m), t, 1);
        m->stream = ctl->stream;
        m->flags = ctl->flags;
        return (int)sizeof(*m);
    }
    struct lt_msg_event_cmd *m = (struct lt_msg_event_cmd *)(void *)buf;
    lt_msg_init(m, sizeof(*m), t, 1);
    m->event = ctl->event;
    m->end = ctl->end;
    m->stream = ctl->stream;
    m->flags = ctl->flags;
    return (int)sizeof(*m);
}

int leasec_client_ctl_send(struct leasec_client *c, unsigned agent, const struct leasec_ctl *ctl,
                           uint64_t tag, uint64_t *request_id_p)
{
    union lt_msg_buffer buf;
    int len = leasec_client__ctl_build(c, ctl, &buf);
    if (len < 0)
        return len;
    return leasec_client__msg_send(c, agent, &buf, (size_t)len, tag, request_id_p);
}

int leasec_client_stats_send(struct leasec_client *c, unsigned agent, uint32_t flags, uint64_t tag,
                             uint64_t *request_id_p)
{
    struct lt_msg_stats_request m;
    lt_msg_init(&m, sizeof(m), LT_MSG_STATS_REQUEST, 1);
    m.flags = flags; /* the validator refuses unknown bits: -EINVAL */
    return leasec_client__msg_send(c, agent, &m, sizeof(m), tag, request_id_p);
}

int leasec_client_ctl_call(struct leasec_client *c, unsigned agent, const struct leasec_ctl *ctl,
                           int timeout_ms, struct leasec_client_reply *reply_p)
{
    union lt_msg_buffer buf, reply;
    if (c->in_callback)
        return -EDEADLK;
    int len = leasec_client__ctl_build(c, ctl, &buf);
    if (len < 0)
        return len;
    int rc = leasec_client__msg_call(c, agent, &buf, (size_t)len, timeout_ms, &reply);
    if (rc < 0)
        return rc;
    struct leasec_agent_stats unused;
    leasec_client__reply_public(c, agent, &reply, reply_p, &unused);
    reply_p->stats = NULL; /* a ctl reply has none */
    return 0;
}

int leasec_client_stats_call(struct leasec_client *c, unsigned agent, uint32_t flags,
                             int timeout_ms, struct leasec_agent_stats *stats_p)
{
    struct lt_msg_stats_request m;
    union lt_msg_buffer reply;
    lt_msg_init(&m, sizeof(m), LT_MSG_STATS_REQUEST, 1);
    m.flags = flags;
    int rc = leasec_client__msg_call(c, agent, &m, sizeof(m), timeout_ms, &reply);
    if (rc < 0)
        return rc;
    const struct leasec_client__agent *a = leasec_client__agent_get(c, agent);
    leasec_client__stats_public((const struct lt_msg_stats_reply *)(void *)&reply,
                                a ? a->hello.client_id : 0, stats_p);
    return 0;
}
