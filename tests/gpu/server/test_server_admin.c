/* The agent's lists for leasectl (1.4, LT_CAP_INTROSPECT), end to end on a
 * real lease-agent-host: only a client granted the cap is answered; the
 * entries say who holds what, since when, with how much work in flight;
 * pages follow the cursor to the end without repeating an entry; one
 * client's or every client's, the latter for the agent's uid or root (this
 * suite runs as the agent's uid; test_server_uid.c runs as another). */
#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"

#define KiB 1024ull
#define MiB (1024ull * 1024ull)

static struct th_agent ag;

static void agent_setup(void)
{
    signal(SIGPIPE, SIG_IGN);
    th_agent_start(&ag, NULL, NULL);
}

static void agent_teardown(void)
{
    int st = ag.pid > 0 ? th_agent_stop(&ag) : 0;
    th_agent_cleanup(&ag);
    ck_assert_msg(st == 0, "lease-agent-host exited with status %d", st);
}

/* Sends a list request; returns its request id. */
static uint64_t list_send(int fd, uint16_t type, uint32_t client, uint64_t cursor)
{
    struct lt_msg_list_request q;
    lt_msg_init(&q, sizeof q, type, th_rid());
    q.client_id = client;
    q.cursor = cursor;
    ck_assert_int_eq(th_send(fd, &q, sizeof q, NULL, 0), 0);
    return q.hdr.request_id;
}

/* One page, asserted to be the reply to it. */
static void list_page(int fd, uint16_t type, uint32_t client, uint64_t cursor,
                      union lt_msg_buffer *buf)
{
    uint64_t rid = list_send(fd, type, client, cursor);
    th_expect(fd, buf, type == LT_MSG_LEASE_LIST_REQUEST ? LT_MSG_LEASE_LIST_REPLY
                                                         : LT_MSG_SEGMENT_LIST_REPLY);
    ck_assert_uint_eq(buf->hdr.request_id, rid);
}

/* A sealed memfd of @size offered as @cls with @cookie; @writable: without
 * F_SEAL_FUTURE_WRITE, for a doorbell's words (a strict agent takes it for
 * words only, mapped writable). */
static struct lt_segment_id offer_seals(int c, uint64_t size, uint32_t cls, uint64_t cookie,
                                        int writable)
{
    void *p = NULL;
    int fd = th_memfd(size, 0, 1, &p);
    memset(p, 0, size);
    munmap(p, size);
    ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, writable ? TH_OLD_SEALS : TH_GOOD_SEALS), 0);
    struct lt_segment_id id = th_offer(c, fd, size, cls, cookie);
    close(fd);
    return id;
}

static struct lt_segment_id offer(int c, uint64_t size, uint32_t cls, uint64_t cookie)
{
    return offer_seals(c, size, cls, cookie, 0);
}

START_TEST(test_lists_need_the_cap)
{
    union lt_msg_buffer buf;
    struct lt_msg_hello_reply r;
    int c = th_hello(ag.sock, 0, &r);
    ck_assert_uint_eq(r.caps & LT_CAP_INTROSPECT, 0);
    uint64_t rid = list_send(c, LT_MSG_LEASE_LIST_REQUEST, 0, 0);
    th_expect_error(c, &buf, rid, LT_E_UNKNOWN_TYPE);
    rid = list_send(c, LT_MSG_SEGMENT_LIST_REQUEST, r.client_id, 0);
    th_expect_error(c, &buf, rid, LT_E_UNKNOWN_TYPE);
    th_stats(c, 0, &buf); /* still served */
    close(c);

    int d = th_hello(ag.sock, LT_CAP_INTROSPECT, &r);
    ck_assert_uint_eq(r.caps, LT_CAP_INTROSPECT | LT_CAP_HOST_BACKEND);
    list_page(d, LT_MSG_LEASE_LIST_REQUEST, 0, 0, &buf);
    const struct lt_msg_lease_list_reply *l = (const void *)buf.bytes;
    ck_assert_uint_eq(l->count, 0);
    ck_assert_uint_eq(l->flags, 0);
    close(d);
}
END_TEST

START_TEST(test_lists_say_who_holds_what_and_since_when)
{
    union lt_msg_buffer buf;
    struct lt_msg_hello_reply hr;
    int c = th_hello(ag.sock, LT_CAP_DOORBELL, &hr);
    struct lt_segment_id pin = offer(c, 1 * MiB, LT_CLASS_PINNED, 0xc0ffee);
    struct lt_segment_id bell = offer_seals(c, 4 * KiB, LT_CLASS_MAPPED, 0xbe11, 1);
    struct lt_lease_grant_entry g1 = th_lease(c, pin, 64 * KiB, 128 * KiB, LT_CLASS_PINNED);
    struct lt_lease_grant_entry g2 = th_lease(c, pin, 0, 4 * KiB, LT_CLASS_STAGED);
    ck_assert_uint_eq(g1.status, LT_OK);
    ck_assert_uint_eq(g2.status, LT_OK);
    /* Work on g1 that waits for a doorbell never rung, then its release:
     * RELEASING, one submit in flight, the bell's word held. */
    struct lt_msg_submit s;
    memset(&s, 0, sizeof s);
    s.lease = g1.lease;
    s.op = LT_OP_COPY_H2D;
    s.args.copy.length = 4 * KiB;
    s.flags = LT_SUBMIT_F_WAIT_BELL;
    s.bell = (struct lt_word_ref){.segment = bell, .offset = 0};
    s.bell_seq = 1;
    th_submit_send(c, &s);
    th_release_send(c, g1.lease);
    th_expect_silence(c, 100);

    struct lt_msg_hello_reply ar;
    int a = th_hello(ag.sock, LT_CAP_INTROSPECT, &ar);
    usleep(20000); /* an age the list can see */
    list_page(a, LT_MSG_LEASE_LIST_REQUEST, 0, 0, &buf);
    const struct lt_msg_lease_list_reply *l = (const void *)buf.bytes;
    ck_assert_uint_eq(l->count, 2);
    ck_assert_uint_eq(l->flags, 0);
    ck_assert_uint_eq(l->next_cursor, 0);
    int seen = 0;
    for (uint32_t i = 0; i < l->count; i++) {
        const struct lt_lease_info *e = &l->entries[i];
        ck_assert_uint_eq(e->client_id, hr.client_id);
        ck_assert(lt_segment_id_eq(e->segment, pin));
        ck_assert_uint_ge(e->age_ns, 20000000ull);
        if (lt_lease_id_eq(e->lease, g1.lease)) {
            seen |= 1;
            ck_assert_uint_eq(e->mem_class, LT_CLASS_PINNED);
            ck_assert_uint_eq(e->offset, 64 * KiB);
            ck_assert_uint_eq(e->length, 128 * KiB);
            ck_assert_uint_eq(e->state, LT_LEASE_STATE_RELEASING);
            ck_assert_uint_eq(e->work_inflight, 1);
        } else if (lt_lease_id_eq(e->lease, g2.lease)) {
            seen |= 2;
            ck_assert_uint_eq(e->mem_class, LT_CLASS_STAGED);
            ck_assert_uint_eq(e->state, LT_LEASE_STATE_HELD);
            ck_assert_uint_eq(e->work_inflight, 0);
        }
    }
    ck_assert_int_eq(seen, 3);

    list_page(a, LT_MSG_SEGMENT_LIST_REQUEST, hr.client_id, 0, &buf);
    const struct lt_msg_segment_list_reply *g = (const void *)buf.bytes;
    ck_assert_uint_eq(g->count, 2);
    seen = 0;
    for (uint32_t i = 0; i < g->count; i++) {
        const struct lt_segment_info *e = &g->entries[i];
        ck_assert_uint_eq(e->client_id, hr.client_id);
        ck_assert_uint_ne(e->flags & LT_SEGMENT_INFO_F_REGISTERED, 0);
        ck_assert_uint_eq(e->flags & LT_SEGMENT_INFO_F_DRAINING, 0);
        ck_assert_uint_eq(e->page_kib, (uint32_t)(sysconf(_SC_PAGESIZE) / 1024));
        ck_assert_uint_gt(e->registration_ns, 0);
        if (lt_segment_id_eq(e->segment, pin)) {
            seen |= 1;
            ck_assert_uint_eq(e->mem_class, LT_CLASS_PINNED);
            ck_assert_uint_eq(e->size, 1 * MiB);
            ck_assert_uint_eq(e->cookie, 0xc0ffee);
            ck_assert_uint_eq(e->live_leases, 2);
        } else if (lt_segment_id_eq(e->segment, bell)) {
            seen |= 2;
            ck_assert_uint_eq(e->mem_class, LT_CLASS_MAPPED);
            ck_assert_uint_eq(e->cookie, 0xbe11);
            ck_assert_uint_eq(e->holds, 1); /* the waiting submit's doorbell word */
        }
    }
    ck_assert_int_eq(seen, 3);
    /* The lister's own client holds nothing. */
    list_page(a, LT_MSG_LEASE_LIST_REQUEST, ar.client_id, 0, &buf);
    ck_assert_uint_eq(((const struct lt_msg_lease_list_reply *)(const void *)buf.bytes)->count, 0);
    /* A client that is not connected, and a cursor the agent never gave. */
    uint64_t rid = list_send(a, LT_MSG_LEASE_LIST_REQUEST, 999999, 0);
    th_expect_error(a, &buf, rid, LT_E_NOT_FOUND);
    rid = list_send(a, LT_MSG_SEGMENT_LIST_REQUEST, 0, 1ull << 40);
    th_expect_error(a, &buf, rid, LT_E_BAD_VALUE);
    close(a);
    close(c); /* the gated work is cancelled; the agent drains at stop */
}
END_TEST

START_TEST(test_pages_follow_the_cursor_without_repeats)
{
    union lt_msg_buffer buf;
    struct lt_msg_hello_reply hr;
    int c = th_hello(ag.sock, 0, &hr);
    struct lt_segment_id seg = offer(c, 2 * MiB, LT_CLASS_STAGED, 7);
    /* 300 leases in batches of 100. */
    for (int b = 0; b < 3; b++) {
        union lt_msg_buffer req;
        struct lt_msg_lease_request *q = (void *)req.bytes;
        size_t len = sizeof *q + 100 * sizeof q->entries[0];
        ck_assert_int_eq(lt_msg_init(q, len, LT_MSG_LEASE_REQUEST, th_rid()), LT_OK);
        q->count = 100;
        for (int i = 0; i < 100; i++)
            q->entries[i] = (struct lt_lease_req_entry){.segment = seg,
                                                        .offset = (uint64_t)(b * 100 + i) * 4096,
                                                        .length = 4096,
                                                        .mem_class = LT_CLASS_STAGED};
        ck_assert_int_eq(th_send(c, q, len, NULL, 0), 0);
        th_expect(c, &buf, LT_MSG_LEASE_GRANT);
    }
    int a = th_hello(ag.sock, LT_CAP_INTROSPECT, NULL);
    uint64_t cursor = 0, ids[300];
    unsigned total = 0, pages = 0;
    do {
        list_page(a, LT_MSG_LEASE_LIST_REQUEST, 0, cursor, &buf);
        const struct lt_msg_lease_list_reply *l = (const void *)buf.bytes;
        pages++;
        ck_assert_uint_le(l->count, LT_LIST_MAX_ENTRIES);
        if (l->flags & LT_LIST_F_MORE)
            ck_assert_uint_eq(l->count, LT_LIST_MAX_ENTRIES);
        for (uint32_t i = 0; i < l->count; i++) {
            uint64_t id = lt_lease_id_to_u64(l->entries[i].lease);
            for (unsigned k = 0; k < total; k++)
                ck_assert_uint_ne(ids[k], id);
            ck_assert_uint_lt(total, 300);
            ids[total++] = id;
        }
        cursor = (l->flags & LT_LIST_F_MORE) ? l->next_cursor : 0;
    } while (cursor);
    ck_assert_uint_eq(total, 300);
    ck_assert_uint_eq(pages, 3); /* 127 + 127 + 46 */
    close(a);
    close(c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("server_admin");
    TCase *tc = tcase_create("lists");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, agent_setup, agent_teardown);
    tcase_add_test(tc, test_lists_need_the_cap);
    tcase_add_test(tc, test_lists_say_who_holds_what_and_since_when);
    tcase_add_test(tc, test_pages_follow_the_cursor_without_repeats);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
