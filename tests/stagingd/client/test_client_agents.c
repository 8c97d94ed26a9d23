/* The lease client against a fake agent: Agent death with reconnect, backoff and re-offer; two
 * agents as independent connections; sends queued in order while the socket is full; a stuck
 * handshake timing out. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernels/blockhash_ref.h"
#include "client_test_util.h"

/* ---- agent death, backoff, reconnect ---- */

START_TEST(test_agent_death_fails_in_flight_then_reconnects_reoffers_and_resubmits)
{
    const uint32_t bmin = 4, bmax = 32;
    struct leasec_client *c = client_new(bmin, bmax);
    int fd1, fd2;
    void *b1 = memfd_seg(MIB, &fd1), *b2 = memfd_seg(64 << 10, &fd2);
    ck_assert_int_eq(leasec_client_segment_add(c, 1, fd1, b1, MIB, LT_CLASS_PINNED), 0);
    ck_assert_int_eq(leasec_client_segment_add(c, 2, fd2, b2, 64 << 10, LT_CLASS_MAPPED), 0);
    uint64_t rng = SEED;
    for (size_t i = 0; i < MIB / 8; i++)
        ((uint64_t *)b1)[i] = rng_next(&rng);
    unsigned char *copy = malloc(MIB);
    memcpy(copy, b1, MIB);

    struct fake f;
    union lt_msg_buffer b;
    unsigned agent;
    fake_listen(&f, g_path);
    ck_assert_int_eq(leasec_client_agent_add(c, g_path, &agent), 0);
    ck_assert_uint_eq(handshake(&f, c, 0, 8, 2, NULL), 2);
    struct leasec_client_lease_req r[2] = {{.segment = 1, .offset = 0, .length = 65536 + 4096},
                                           {.segment = 1, .offset = 131072, .length = 4096}};
    struct leasec_client_lease l[2];
    lease_all(&f, c, r, 2, 1, l);
    uint64_t rids[3], rel;
    for (unsigned k = 0; k < 3; k++) {
        struct leasec_client_work w = checksum_work(0, 65536, 65536);
        ck_assert_int_eq(leasec_client_submit(c, &l[0], &w, 1 + k, &rids[k]), 0);
        recv_type(&f, c, &b, LT_MSG_SUBMIT);
    }
    ck_assert_int_eq(leasec_client_lease_release(c, &l[1], 1, 9, &rel), 0);
    recv_type(&f, c, &b, LT_MSG_LEASE_RELEASE);

    /* the agent dies with three submits and a release in flight */
    unsigned base = nev;
    fake_close(&f);
    pump_until(c, base + 5);
    ck_assert_int_eq(evs[base].kind, EV_DISCONNECT);
    ck_assert_int_eq(evs[base].err, -ECONNRESET);
    ck_assert_msg(strstr(evs[base].msg, g_path) && strstr(evs[base].msg, "connection lost") &&
                      strstr(evs[base].msg, "EOF"),
                  "message: %s", evs[base].msg);
    for (unsigned k = 0; k < 3; k++) {
        struct ev *e = &evs[base + 1 + k];
        ck_assert_int_eq(e->kind, EV_ERROR);
        ck_assert_uint_eq(e->rid, rids[k]);
        ck_assert_uint_eq(e->tag, 1 + k);
        ck_assert_int_eq(e->err, -ECONNRESET);
        ck_assert_uint_eq(e->code, LT_OK);
        ck_assert_msg(strstr(e->msg, g_path) && strstr(e->msg, "SUBMIT"), "message: %s", e->msg);
    }
    struct ev *e = &evs[base + 4];
    ck_assert_int_eq(e->kind, EV_RELEASE);
    ck_assert_int_eq(e->err, -ECONNRESET);
    ck_assert_int_eq(e->reusable, 0);
    ck_assert(lt_lease_id_eq(e->lease.id, l[1].id));
    struct leasec_client_agent_info info;
    ck_assert_int_eq(leasec_client_agent_info(c, 0, &info), 0);
    ck_assert_int_eq(info.state, LEASEC_CLIENT_DISCONNECTED);
    ck_assert_uint_eq(info.in_flight, 0);
    ck_assert_uint_eq(info.leases, 0);
    uint64_t rid;
    struct leasec_client_work w = checksum_work(0, 65536, 65536);
    ck_assert_int_eq(leasec_client_submit(c, &l[0], &w, 0, &rid), -ENOTCONN);

    /* nobody listens: attempts back off exponentially, with jitter, capped */
    uint64_t attempts0 = info.attempts, last = info.attempts;
    unsigned streak = 1;
    ck_assert_uint_eq(info.next_delay_ms, bmin);
    /* At least 300 ms, and on until 4 attempts were seen: a loaded machine
     * may not run this loop for most of the 300 ms. */
    uint64_t start = now_ms(), end = start + 300, cap = start + 20000;
    while (now_ms() < end || (last - attempts0 < 4 && now_ms() < cap)) {
        /* One process call per look: pump_for may make two when descheduled. */
        struct pollfd p = {.fd = leasec_client_fd(c), .events = POLLIN};
        poll(&p, 1, 1);
        ck_assert_int_ge(leasec_client_process(c), 0);
        ck_assert_int_eq(leasec_client_agent_info(c, 0, &info), 0);
        if (info.attempts == last)
            continue;
        ck_assert_uint_eq(info.attempts, last + 1);
        last = info.attempts;
        streak++;
        uint64_t d = bmin;
        for (unsigned k = 1; k < streak && d < bmax; k++)
            d *= 2;
        d = d > bmax ? bmax : d;
        uint64_t lo = d / 2 > bmin ? d / 2 : bmin;
        ck_assert_msg(info.next_delay_ms >= lo && info.next_delay_ms <= d,
                      "failure %u: delay %u ms outside [%llu, %llu]", streak, info.next_delay_ms,
                      (unsigned long long)lo, (unsigned long long)d);
        ck_assert(info.last_err == -ENOENT || info.last_err == -ECONNREFUSED);
    }
    uint64_t elapsed = now_ms() - start;
    ck_assert_uint_ge(last - attempts0, 4);
    ck_assert_uint_le(last - attempts0, elapsed / (bmin / 2) + 1);

    /* a new agent on the same path: re-handshake, the same segments offered again */
    fake_listen(&f, g_path);
    base = nev;
    ck_assert_uint_eq(handshake(&f, c, 0, 8, 2, NULL), 2);
    ck_assert_int_eq(evs[base].kind, EV_READY);
    ck_assert_uint_eq(evs[base].epoch, 2);
    ck_assert_int_eq(leasec_client_agent_info(c, 0, &info), 0);
    ck_assert_uint_eq(info.offers_sent, 4);
    ck_assert_uint_eq(info.epoch, 2);
    ck_assert_uint_eq(info.next_delay_ms, 0);

    /* the old lease is refused, a fresh one with the very same agent id works */
    ck_assert_int_eq(leasec_client_submit(c, &l[0], &w, 0, &rid), -ESTALE);
    ck_assert_ptr_nonnull(strstr(leasec_client_last_error(c), "connection 1"));
    struct leasec_client_lease nl;
    lease_all(&f, c, &r[0], 1, 1, &nl);
    ck_assert(lt_lease_id_eq(nl.id, l[0].id));
    ck_assert_uint_eq(nl.epoch, 2);
    ck_assert_int_eq(leasec_client_submit(c, &nl, &w, 1, &rid), 0);
    ck_assert_uint_gt(rid, rids[2]); /* request ids never repeat on an agent */
    recv_type(&f, c, &b, LT_MSG_SUBMIT);
    completion_send(&f, rid, nl.id, 16);
    base = nev;
    pump_until(c, base + 1);
    ck_assert_int_eq(evs[base].kind, EV_COMPLETION);
    ck_assert_uint_eq(evs[base].tag, 1);
    ck_assert_int_eq(memcmp(copy, b1, MIB), 0); /* nothing staged was touched */

    leasec_client_destroy(c);
    fake_close(&f);
    free(copy);
    munmap(b1, MIB);
    munmap(b2, 64 << 10);
    close(fd1);
    close(fd2);
}
END_TEST

START_TEST(test_two_agents_are_independent_connections)
{
    struct leasec_client *c = client_new(5, 50);
    int fd1;
    void *b1 = memfd_seg(MIB, &fd1);
    ck_assert_int_eq(leasec_client_segment_add(c, 1, fd1, b1, MIB, LT_CLASS_PINNED), 0);
    char path_b[160];
    snprintf(path_b, sizeof(path_b), "%s/agent-b.sock", g_dir);
    struct fake fa, fb;
    union lt_msg_buffer b;
    unsigned ia, ib;
    fake_listen(&fa, g_path);
    fake_listen(&fb, path_b);
    ck_assert_int_eq(leasec_client_agent_add(c, g_path, &ia), 0);
    ck_assert_int_eq(leasec_client_agent_add(c, path_b, &ib), 0);
    ck_assert_uint_eq(ib, ia + 1);
    handshake(&fa, c, 0, 8, 1, NULL); /* each agent gets its own offer */
    handshake(&fb, c, 0, 8, 1, NULL);

    /* the same lease id from both agents names two different leases */
    struct leasec_client_lease_req r = {.segment = 1, .offset = 0, .length = 65536 + 4096};
    struct leasec_client_lease la, lb;
    uint64_t ra, rb;
    ck_assert_int_eq(leasec_client_lease_request(c, ia, &r, 1, 0, 0, &ra), 0);
    ck_assert_int_eq(leasec_client_lease_request(c, ib, &r, 1, 0, 0, &rb), 0);
    ck_assert_uint_eq(ra, rb); /* request ids are per connection */
    struct fake *fs[2] = {&fa, &fb};
    for (int k = 0; k < 2; k++) {
        recv_type(fs[k], c, &b, LT_MSG_LEASE_REQUEST);
        union lt_msg_buffer out;
        size_t len = sizeof(struct lt_msg_lease_grant) + sizeof(struct lt_lease_grant_entry);
        lt_msg_init(&out, len, LT_MSG_LEASE_GRANT, b.hdr.request_id);
        struct lt_msg_lease_grant *g = (void *)&out;
        g->count = 1;
        g->entries[0] =
            (struct lt_lease_grant_entry){lt_lease_id_make(1, 1), LT_CLASS_PINNED, LT_OK};
        fake_send(fs[k], &out, len, -1);
    }
    unsigned base = nev;
    pump_until(c, base + 2);
    la = evs[base].agent == ia ? evs[base].ents[0].lease : evs[base + 1].ents[0].lease;
    lb = evs[base].agent == ib ? evs[base].ents[0].lease : evs[base + 1].ents[0].lease;
    ck_assert_uint_eq(la.agent, ia);
    ck_assert_uint_eq(lb.agent, ib);

    struct leasec_client_work w = checksum_work(0, 65536, 65536);
    uint64_t sa, sb;
    ck_assert_int_eq(leasec_client_submit(c, &la, &w, 1, &sa), 0);
    ck_assert_int_eq(leasec_client_submit(c, &lb, &w, 2, &sb), 0);
    recv_type(&fa, c, &b, LT_MSG_SUBMIT);
    recv_type(&fb, c, &b, LT_MSG_SUBMIT);

    /* agent A dies; B's work goes on */
    base = nev;
    fake_close(&fa);
    pump_until(c, base + 2);
    ck_assert_int_eq(evs[base].kind, EV_DISCONNECT);
    ck_assert_uint_eq(evs[base].agent, ia);
    ck_assert_int_eq(evs[base + 1].kind, EV_ERROR);
    ck_assert_uint_eq(evs[base + 1].agent, ia);
    ck_assert_uint_eq(evs[base + 1].tag, 1);
    completion_send(&fb, sb, lb.id, 16);
    pump_until(c, base + 3);
    ck_assert_int_eq(evs[base + 2].kind, EV_COMPLETION);
    ck_assert_uint_eq(evs[base + 2].agent, ib);
    ck_assert_uint_eq(evs[base + 2].tag, 2);
    struct leasec_client_agent_info info;
    ck_assert_int_eq(leasec_client_agent_info(c, ib, &info), 0);
    ck_assert_int_eq(info.state, LEASEC_CLIENT_READY);
    ck_assert_uint_eq(info.epoch, 1);
    ck_assert_uint_eq(info.leases, 1);
    ck_assert_int_eq(leasec_client_agent_info(c, ia, &info), 0);
    ck_assert_int_ne(info.state, LEASEC_CLIENT_READY);
    ck_assert_uint_eq(info.leases, 0);

    leasec_client_destroy(c);
    fake_close(&fb);
    unlink(path_b);
    munmap(b1, MIB);
    close(fd1);
}
END_TEST

START_TEST(test_sends_queue_in_order_while_the_socket_is_full)
{
    enum { N = 3000 };
    struct leasec_client *c = client_new(5, 50);
    int fd1;
    void *b1 = memfd_seg(MIB, &fd1);
    ck_assert_int_eq(leasec_client_segment_add(c, 1, fd1, b1, MIB, LT_CLASS_PINNED), 0);
    struct fake f;
    union lt_msg_buffer b;
    unsigned agent;
    fake_listen(&f, g_path);
    ck_assert_int_eq(leasec_client_agent_add(c, g_path, &agent), 0);
    handshake(&f, c, 0, 8, 1, NULL);
    struct leasec_client_lease_req r = {.segment = 1, .offset = 0, .length = 65536 + 4096};
    struct leasec_client_lease l;
    lease_all(&f, c, &r, 1, 1, &l);

    uint64_t first = 0, rid;
    for (unsigned k = 0; k < N; k++) {
        struct leasec_client_work w = checksum_work(0, 4096 * (1 + k % 16), 65536);
        ck_assert_int_eq(leasec_client_submit(c, &l, &w, k, &rid), 0);
        if (k == 0)
            first = rid;
    }
    /* without processing, only what fit in the socket buffer has left */
    unsigned got = 0;
    while (fake_recv(&f, &b, 0, NULL, NULL) >= 0) {
        ck_assert_uint_eq(b.hdr.request_id, first + got);
        got++;
    }
    ck_assert_uint_gt(got, 0);
    ck_assert_uint_lt(got, N);
    /* processing flushes the rest, in order */
    while (got < N) {
        ssize_t n = recv_pumped(&f, c, &b, NULL, NULL);
        ck_assert_int_eq(lt_validate_from_client(b.bytes, (size_t)n, NULL), LT_OK);
        ck_assert_uint_eq(b.hdr.request_id, first + got);
        ck_assert_uint_eq(((struct lt_msg_submit *)(void *)&b)->args.checksum.length,
                          4096 * (1 + got % 16));
        got++;
    }
    struct leasec_client_agent_info info;
    ck_assert_int_eq(leasec_client_agent_info(c, 0, &info), 0);
    ck_assert_uint_eq(info.in_flight, N);
    leasec_client_destroy(c);
    fake_close(&f);
    munmap(b1, MIB);
    close(fd1);
}
END_TEST

START_TEST(test_stuck_handshake_times_out_and_retries)
{
    g_handshake_ms = 40;
    struct leasec_client *c = client_new(2, 10);
    g_handshake_ms = 0;
    struct fake f;
    union lt_msg_buffer b;
    unsigned agent;
    fake_listen(&f, g_path);
    ck_assert_int_eq(leasec_client_agent_add(c, g_path, &agent), 0);
    fake_accept(&f);
    recv_type(&f, c, &b, LT_MSG_HELLO); /* and never answer it */
    uint64_t t0 = now_ms();
    ck_assert_int_eq(leasec_client_wait_ready(c, 0, WAIT_MS), -ETIMEDOUT);
    uint64_t took = now_ms() - t0;
    ck_assert_msg(took >= 30 && took < 2000, "the 40 ms handshake timeout fired after %llu ms",
                  (unsigned long long)took);
    ck_assert_msg(strstr(leasec_client_last_error(c), "no HELLO_REPLY"), "message: %s",
                  leasec_client_last_error(c));
    int d = ev_find(EV_DISCONNECT, 0);
    ck_assert_int_ge(d, 0);
    ck_assert_int_eq(evs[d].err, -ETIMEDOUT);
    fake_drop(&f);
    handshake(&f, c, 0, 8, 0, NULL); /* the retry succeeds */
    struct leasec_client_agent_info info;
    ck_assert_int_eq(leasec_client_agent_info(c, 0, &info), 0);
    ck_assert_uint_eq(info.epoch, 2);
    leasec_client_destroy(c);
    fake_close(&f);
}
END_TEST

void client_tests_agents(TCase *tc)
{
    tcase_add_test(tc, test_agent_death_fails_in_flight_then_reconnects_reoffers_and_resubmits);
    tcase_add_test(tc, test_two_agents_are_independent_connections);
    tcase_add_test(tc, test_sends_queue_in_order_while_the_socket_is_full);
    tcase_add_test(tc, test_stuck_handshake_times_out_and_retries);
}
