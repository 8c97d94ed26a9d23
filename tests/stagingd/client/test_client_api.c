/* The library's typed calls (liblease-client, lease/client.h): stream and
 * event commands and stats, async through on_reply and blocking; the
 * agent's refusal as a struct lt_failure; reconnect ending a backoff; the
 * library's own names. Against the scripted fake agent. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#include "client_test_util.h"

/* A STATS_REPLY answering @rid: @n clients, ids 7 (the fake's HELLO_REPLY
 * names this client 7) and up, with @submits on each. */
static size_t stats_reply(union lt_msg_buffer *b, uint64_t rid, uint32_t n, uint64_t submits)
{
    size_t len = sizeof(struct lt_msg_stats_reply) + n * sizeof(struct lt_client_stats);
    ck_assert_int_eq(lt_msg_init(b, len, LT_MSG_STATS_REPLY, rid), LT_OK);
    struct lt_msg_stats_reply *m = (struct lt_msg_stats_reply *)(void *)b;
    m->client_count = n;
    m->uptime_ns = 123456789;
    m->classes[LT_CLASS_PINNED].live_leases = 3;
    for (uint32_t k = 0; k < n; k++) {
        m->clients[k].client_id = 7 + k;
        m->clients[k].pid = 100 + k;
        lt_name_set(m->clients[k].name, sizeof(m->clients[k].name), k ? "other" : "test-client");
        m->clients[k].submits = submits + k;
    }
    return len;
}

struct stats_responder {
    struct fake *f;
    uint32_t want_flags;
    int seen_flags;
};

static void *respond_stats(void *arg)
{
    struct stats_responder *r = arg;
    union lt_msg_buffer b, out;
    if (fake_recv(r->f, &b, WAIT_MS, NULL, NULL) < 0)
        return NULL;
    if (b.hdr.type == LT_MSG_STATS_REQUEST)
        r->seen_flags = (int)((const struct lt_msg_stats_request *)(void *)&b)->flags;
    size_t len = stats_reply(&out, b.hdr.request_id, 2, 40);
    fake_send(r->f, &out, len, -1);
    return NULL;
}

START_TEST(test_typed_commands_and_stats_answer_through_on_reply)
{
    struct leasec_client *c = client_new(5, 50);
    struct fake f;
    union lt_msg_buffer b;
    unsigned agent;
    fake_listen(&f, g_path);
    ck_assert_int_eq(leasec_client_agent_add(c, g_path, &agent), 0);
    handshake(&f, c, 0, 8, 0, NULL);

    /* EVENT_RECORD of a new timing event on a stream: the wire fields. */
    const struct leasec_ctl rec = {.type = LEASEC_REQ_EVENT_RECORD,
                                   .flags = LEASEC_EVENT_F_TIMING,
                                   .stream = lt_stream_id_make(2, 1)};
    uint64_t rid;
    ck_assert_int_eq(leasec_client_ctl_send(c, agent, &rec, 41, &rid), 0);
    recv_type(&f, c, &b, LT_MSG_EVENT_RECORD);
    const struct lt_msg_event_cmd *ec = (const struct lt_msg_event_cmd *)(void *)&b;
    ck_assert_uint_eq(ec->flags, LT_EVENT_F_TIMING);
    ck_assert(lt_stream_id_eq(ec->stream, lt_stream_id_make(2, 1)));
    ck_assert(lt_event_id_is_null(ec->event));
    struct lt_msg_ctl_reply m;
    lt_msg_init(&m, sizeof(m), LT_MSG_CTL_REPLY, rid);
    m.request_type = LT_MSG_EVENT_RECORD;
    m.event = lt_event_id_make(4, 1);
    fake_send(&f, &m, sizeof(m), -1);
    unsigned want = nev + 1;
    pump_until(c, want);
    struct ev *e = &evs[want - 1];
    ck_assert_int_eq(e->kind, EV_REPLY);
    ck_assert_uint_eq(e->rid, rid);
    ck_assert_uint_eq(e->tag, 41);
    ck_assert_uint_eq(e->type, LEASEC_REQ_EVENT_RECORD);
    ck_assert(lt_event_id_eq(e->event, lt_event_id_make(4, 1)));
    ck_assert_int_eq(e->has_stats, 0);

    /* EVENT_ELAPSED: the float comes out of its bit pattern. */
    const struct leasec_ctl el = {.type = LEASEC_REQ_EVENT_ELAPSED,
                                  .event = lt_event_id_make(4, 1),
                                  .end = lt_event_id_make(5, 1)};
    ck_assert_int_eq(leasec_client_ctl_send(c, agent, &el, 42, &rid), 0);
    recv_type(&f, c, &b, LT_MSG_EVENT_ELAPSED);
    ec = (const struct lt_msg_event_cmd *)(void *)&b;
    ck_assert(lt_event_id_eq(ec->end, lt_event_id_make(5, 1)));
    lt_msg_init(&m, sizeof(m), LT_MSG_CTL_REPLY, rid);
    m.request_type = LT_MSG_EVENT_ELAPSED;
    m.elapsed_ms_bits = lt_f32_to_bits(2.5f);
    fake_send(&f, &m, sizeof(m), -1);
    pump_until(c, ++want);
    e = &evs[want - 1];
    ck_assert_uint_eq(e->type, LEASEC_REQ_EVENT_ELAPSED);
    ck_assert(e->elapsed_ms == 2.5f);

    /* A stream command with an event named is refused before sending. */
    const struct leasec_ctl bad = {.type = LEASEC_REQ_STREAM_QUERY, .event = {1, 1}};
    ck_assert_int_eq(leasec_client_ctl_send(c, agent, &bad, 0, &rid), -EINVAL);

    /* Stats, async: every client's entry, this one's picked out. */
    ck_assert_int_eq(leasec_client_stats_send(c, agent, LEASEC_STATS_F_ALL_CLIENTS, 43, &rid), 0);
    recv_type(&f, c, &b, LT_MSG_STATS_REQUEST);
    ck_assert_uint_eq(((const struct lt_msg_stats_request *)(void *)&b)->flags,
                      LT_STATS_F_ALL_CLIENTS);
    union lt_msg_buffer out;
    size_t len = stats_reply(&out, rid, 2, 40);
    fake_send(&f, &out, len, -1);
    pump_until(c, ++want);
    e = &evs[want - 1];
    ck_assert_int_eq(e->kind, EV_REPLY);
    ck_assert_uint_eq(e->tag, 43);
    ck_assert_uint_eq(e->type, LEASEC_REQ_STATS);
    ck_assert_int_eq(e->has_stats, 1);
    ck_assert_uint_eq(e->stats_clients, 2);
    ck_assert_uint_eq(e->stats_have_self, 1);
    ck_assert_uint_eq(e->stats_self_id, 7);
    ck_assert_uint_eq(e->stats_self_submits, 40);
    ck_assert_uint_eq(e->stats_uptime_ns, 123456789);
    ck_assert_int_eq(leasec_client_stats_send(c, agent, 0x80, 0, &rid), -EINVAL);

    /* Stats, blocking. */
    struct stats_responder rs = {.f = &f, .seen_flags = -1};
    pthread_t th;
    struct leasec_agent_stats st;
    memset(&st, 0xa5, sizeof(st));
    ck_assert_int_eq(pthread_create(&th, NULL, respond_stats, &rs), 0);
    ck_assert_int_eq(leasec_client_stats_call(c, agent, 0, WAIT_MS, &st), 0);
    pthread_join(th, NULL);
    ck_assert_int_eq(rs.seen_flags, 0);
    ck_assert_int_eq(st.have_self, 1);
    ck_assert_uint_eq(st.self.client_id, 7);
    ck_assert_str_eq(st.self.name, "test-client");
    ck_assert_uint_eq(st.self.pid, 100);
    ck_assert_uint_eq(st.client_count, 2);
    ck_assert_uint_eq(st.clients[1].client_id, 8);
    ck_assert_uint_eq(st.classes[LT_CLASS_PINNED].live_leases, 3);
    ck_assert_uint_eq(st.classes[0].live_leases, 0);
    ck_assert_int_eq(ev_count(EV_REPLY), 3); /* the blocking answer bypassed on_reply */

    leasec_client_destroy(c);
    fake_close(&f);
}
END_TEST

START_TEST(test_a_refusal_carries_the_agents_failure)
{
    struct leasec_client *c = client_new(5, 50);
    int fd;
    void *base = memfd_seg(MIB, &fd);
    ck_assert_int_eq(leasec_client_segment_add(c, 1, fd, base, MIB, LT_CLASS_PINNED), 0);
    struct fake f;
    union lt_msg_buffer b;
    unsigned agent;
    fake_listen(&f, g_path);
    ck_assert_int_eq(leasec_client_agent_add(c, g_path, &agent), 0);
    handshake(&f, c, 0, 8, 1, NULL);
    const struct leasec_client_lease_req r = {.segment = 1, .length = 4096};
    uint64_t rid;
    ck_assert_int_eq(leasec_client_lease_request(c, agent, &r, 1, 0, 51, &rid), 0);
    recv_type(&f, c, &b, LT_MSG_LEASE_REQUEST);
    struct lt_msg_error em;
    fake_error(&em, rid, LT_MSG_LEASE_REQUEST, LT_E_SYSTEM, 0, "mmap of segment 1 failed");
    em.err = -EACCES; /* LT_E_SYSTEM carries the call's own errno */
    fake_send(&f, &em, sizeof(em), -1);
    unsigned want = nev + 1;
    pump_until(c, want);
    struct ev *e = &evs[want - 1];
    ck_assert_int_eq(e->kind, EV_ERROR);
    ck_assert_uint_eq(e->type, LEASEC_REQ_LEASE_REQUEST);
    ck_assert_uint_eq(e->code, LT_E_SYSTEM);
    ck_assert_int_eq(e->err, lt_error_errno(LT_E_SYSTEM));
    ck_assert_int_eq(e->refused, 1);
    ck_assert_uint_eq(e->refusal.code, LT_E_SYSTEM);
    ck_assert_int_eq(e->refusal.err, -EACCES);
    ck_assert_str_eq(e->refusal.message, "mmap of segment 1 failed");
    ck_assert_ptr_nonnull(strstr(e->msg, "mmap of segment 1 failed"));

    /* A request the connection's end failed: the client decided, no refusal. */
    ck_assert_int_eq(leasec_client_lease_request(c, agent, &r, 1, 0, 52, &rid), 0);
    recv_type(&f, c, &b, LT_MSG_LEASE_REQUEST);
    fake_drop(&f);
    int at = -1;
    for (uint64_t end = now_ms() + WAIT_MS; at < 0 && now_ms() < end;) {
        pump_for(c, 10);
        at = ev_find(EV_ERROR, rid);
    }
    ck_assert_int_ge(at, 0);
    ck_assert_int_eq(evs[at].refused, 0);
    ck_assert_int_eq(evs[at].err, -ECONNRESET);

    leasec_client_destroy(c);
    fake_close(&f);
    munmap(base, MIB);
}
END_TEST

START_TEST(test_reconnect_ends_the_backoff)
{
    /* A minute of backoff: only reconnect brings the agent back in time. */
    struct leasec_client *c = client_new(60000, 60000);
    unsigned agent;
    ck_assert_int_eq(leasec_client_reconnect(c, 0), -ENOENT);
    ck_assert_int_eq(leasec_client_agent_add(c, g_path, &agent), 0); /* nobody listens */
    struct leasec_client_agent_info info;
    ck_assert_int_eq(leasec_client_agent_info(c, agent, &info), 0);
    ck_assert_int_eq(info.state, LEASEC_CLIENT_DISCONNECTED);
    ck_assert_uint_ge(info.next_delay_ms, 30000);
    ck_assert_uint_eq(info.attempts, 1);

    struct fake f;
    fake_listen(&f, g_path);
    pump_for(c, 50);
    ck_assert_int_eq(leasec_client_agent_info(c, agent, &info), 0);
    ck_assert_uint_eq(info.attempts, 1); /* still backing off */
    ck_assert_int_eq(leasec_client_reconnect(c, agent), 0);
    handshake(&f, c, 0, 8, 0, NULL);
    ck_assert_int_eq(leasec_client_agent_info(c, agent, &info), 0);
    ck_assert_int_eq(info.state, LEASEC_CLIENT_READY);
    ck_assert_uint_eq(info.attempts, 2);
    ck_assert_str_eq(info.hello.agent_name, "fake-agent");
    ck_assert_uint_eq(info.hello.version, LT_PROTO_VERSION);
    ck_assert_uint_eq(info.hello.max_streams, 16);
    ck_assert_int_eq(leasec_client_reconnect(c, agent), -EISCONN);

    leasec_client_destroy(c);
    fake_close(&f);
}
END_TEST

START_TEST(test_the_librarys_names)
{
    const char *v = leasec_version();
    ck_assert_ptr_nonnull(v);
    ck_assert_ptr_nonnull(strchr(v, '.'));
    ck_assert_str_eq(leasec_request_name(LEASEC_REQ_LEASE_REQUEST), "LEASE_REQUEST");
    ck_assert_str_eq(leasec_request_name(LEASEC_REQ_STATS), "STATS_REQUEST");
    ck_assert_str_eq(leasec_request_name(999), "UNKNOWN");
    struct leasec_client_config cfg;
    leasec_client_config_default(&cfg);
    ck_assert_str_eq(cfg.name, "lease-client");
    ck_assert_uint_eq(cfg.caps, LEASEC_CAP_DOORBELL | LEASEC_CAP_DONE_WORD | LEASEC_CAP_RC_BATCH);
    /* HOST_BACKEND is the agent's to grant, not the client's to ask. */
    cfg.caps |= LEASEC_CAP_HOST_BACKEND;
    struct leasec_client *c = NULL;
    ck_assert_int_eq(leasec_client_create(&cfg, &c), -EINVAL);
}
END_TEST

void client_tests_api(TCase *tc)
{
    tcase_add_test(tc, test_typed_commands_and_stats_answer_through_on_reply);
    tcase_add_test(tc, test_a_refusal_carries_the_agents_failure);
    tcase_add_test(tc, test_reconnect_ends_the_backoff);
    tcase_add_test(tc, test_the_librarys_names);
}
