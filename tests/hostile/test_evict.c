/* Evictions under a small pin budget while another client holds work behind
 * a doorbell it never rings (issue #12). On the CUDA backend an eviction's
 * cuMemHostUnregister waits for all the device's queued work, the unrung
 * bell's wait included: an agent that evicts on its loop thread stops
 * answering everyone. Here client B's grant needs an eviction while client
 * A's bell stands, and must be answered in bounded time: granted (PINNED on
 * the host backend, STAGED where it allows the fallback on the CUDA one,
 * whose eviction is still in flight), or refused LT_E_BUSY; B's work on its
 * other lease completes; and once A rings, the evicted segment registers
 * again (never CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED). Run against
 * lease-agent-host, and (test_hostile_evict_fakecuda) against lease-agent
 * under the fake driver. */
#include <check.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/time.h"
#include "check_main.h"
#include "hostile.h"

#define EV_SEG (64 * HS_KIB)
#define EV_DATA (32 * HS_KIB)
#define EV_BOUND_MS 3000 /* the old agent never answers: TH_TIMEOUT_MS would fail it */

/* One LEASE_REQUEST of all of @seg as @cls with @flags; its grant entry,
 * asserting it came within EV_BOUND_MS. */
static struct lt_lease_grant_entry ev_lease(int c, struct lt_segment_id seg, uint32_t cls,
                                            uint32_t flags)
{
    union {
        uint64_t a;
        unsigned char b[sizeof(struct lt_msg_lease_request) + sizeof(struct lt_lease_req_entry)];
    } req;
    struct lt_msg_lease_request *r = (void *)req.b;
    lt_msg_init(r, sizeof req.b, LT_MSG_LEASE_REQUEST, th_rid());
    r->count = 1;
    r->entries[0] = (struct lt_lease_req_entry){
        .segment = seg, .offset = 0, .length = EV_SEG, .mem_class = cls, .flags = flags};
    uint64_t t0 = base_now_ns();
    ck_assert_int_eq(th_send(c, r, sizeof req.b, NULL, 0), 0);
    union lt_msg_buffer buf;
    ssize_t n = th_recv(c, &buf, EV_BOUND_MS);
    ck_assert_msg(n > 0, "no answer to a lease request within %d ms (%zd): the agent is blocked",
                  EV_BOUND_MS, n);
    ck_assert_uint_eq(buf.hdr.type, LT_MSG_LEASE_GRANT);
    ck_assert_uint_eq(buf.hdr.request_id, r->hdr.request_id);
    ck_assert_uint_lt((base_now_ns() - t0) / 1000000, EV_BOUND_MS);
    return ((const struct lt_msg_lease_grant *)(const void *)buf.bytes)->entries[0];
}

static void ev_release(int c, struct lt_lease_id lease)
{
    union lt_msg_buffer buf;
    uint64_t rid = th_release_send(c, lease);
    th_expect(c, &buf, LT_MSG_RELEASE_COMPLETE);
    ck_assert_uint_eq(buf.hdr.request_id, rid);
}

/* Three PINNED segments of @b, each leased once and released: under the
 * 128 KiB budget two fit, so the third's offer evicted the first. */
static void ev_idle_segments(int b, struct hs_seg p[3], uint64_t seed)
{
    for (int i = 0; i < 3; i++) {
        struct lt_lease_grant_entry g = hs_offer_and_lease(b, &p[i], EV_SEG, 0, LT_CLASS_PINNED,
                                                           seed + (uint64_t)i, EV_DATA, NULL);
        ck_assert_uint_eq(g.mem_class, LT_CLASS_PINNED);
        ev_release(b, g.lease);
    }
}

/* A CHECKSUM_VERIFY of @lease, completed OK within EV_BOUND_MS. */
static void ev_checksum(int c, struct lt_lease_id lease)
{
    struct lt_msg_submit sub;
    hs_checksum_submit(&sub, lease, EV_DATA);
    uint64_t rid = th_submit_send(c, &sub);
    union lt_msg_buffer buf;
    ssize_t n = th_recv(c, &buf, EV_BOUND_MS);
    ck_assert_msg(n > 0, "no completion within %d ms (%zd)", EV_BOUND_MS, n);
    ck_assert_uint_eq(buf.hdr.type, LT_MSG_COMPLETION);
    ck_assert_uint_eq(buf.hdr.request_id, rid);
    ck_assert_uint_eq(((const struct lt_msg_completion *)(const void *)buf.bytes)->status, LT_OK);
}

START_TEST(test_an_eviction_behind_a_peers_unrung_bell_leaves_grants_answered)
{
    static const char *const extra[] = {"--pinned-budget", "128K", NULL};
    struct th_agent a;
    th_agent_start(&a, NULL, extra);
    union lt_msg_buffer buf;

    /* B: three PINNED segments, two fit the budget: the third's offer
     * evicts the first (nothing queued on the device yet). All idle. */
    int b = th_hello(a.sock, 0, NULL);
    struct hs_seg p[3];
    ev_idle_segments(b, p, 0x70);

    /* A: a submit queued behind a bell it never rings, and A stays. */
    int c = th_hello(a.sock, LT_CAP_DOORBELL, NULL);
    struct hs_seg bells, data;
    uint64_t rid = hs_unrung_bell_submit(c, &bells, &data, EV_DATA, 0x75);

    /* B: the evicted first segment, PINNED or else STAGED: registering it
     * evicts the second (least recently used). */
    struct lt_lease_grant_entry g0 = ev_lease(b, p[0].id, LT_CLASS_PINNED, LT_LEASE_F_ALLOW_STAGED);
    ck_assert_msg(g0.status == LT_OK, "the grant needing an eviction: %s",
                  lt_error_name(g0.status));
    ev_checksum(b, g0.lease);
    /* The second, evicted (its unregistration maybe still queued behind
     * A's bell), PINNED only: granted, or refused busy, never blocked. */
    struct lt_lease_grant_entry g1 = ev_lease(b, p[1].id, LT_CLASS_PINNED, 0);
    ck_assert_msg(g1.status == LT_OK || g1.status == LT_E_BUSY || g1.status == LT_E_BUDGET,
                  "a segment evicted behind a doorbell: %s", lt_error_name(g1.status));
    if (g1.status == LT_OK)
        ev_release(b, g1.lease);
    /* The third stayed registered: its work runs. */
    struct lt_lease_grant_entry g2 = ev_lease(b, p[2].id, LT_CLASS_PINNED, 0);
    ck_assert_uint_eq(g2.status, LT_OK);
    ck_assert_uint_eq(g2.mem_class, LT_CLASS_PINNED);
    ev_checksum(b, g2.lease);
    hs_assert_serving(&a);

    /* A rings; its work completes, the unregistrations behind it finish. */
    __atomic_store_n((uint64_t *)(void *)bells.map, 1, __ATOMIC_RELEASE);
    th_expect(c, &buf, LT_MSG_COMPLETION);
    ck_assert_uint_eq(buf.hdr.request_id, rid);
    ck_assert_uint_eq(((const struct lt_msg_completion *)(const void *)buf.bytes)->status, LT_OK);

    /* The second registers again, PINNED, within the bound (room made by
     * evicting the idle first one if it was registered): never a driver
     * refusal of a registration it still held. */
    ev_release(b, g0.lease);
    struct lt_lease_grant_entry again = {0};
    uint64_t t0 = base_now_ns();
    do {
        again = ev_lease(b, p[1].id, LT_CLASS_PINNED, 0);
        if (again.status == LT_E_BUSY)
            base_sleep_ns(20 * 1000 * 1000);
    } while (again.status == LT_E_BUSY && base_now_ns() - t0 < EV_BOUND_MS * 1000000ull);
    ck_assert_msg(again.status == LT_OK, "the evicted segment registered again: %s",
                  lt_error_name(again.status));
    ck_assert_uint_eq(again.mem_class, LT_CLASS_PINNED);
    ev_checksum(b, again.lease);

    close(c);
    close(b);
    for (int i = 0; i < 3; i++)
        hs_seg_close(&p[i]);
    hs_seg_close(&bells);
    hs_seg_close(&data);
    hs_agent_finish(&a);
}
END_TEST

/* Is the agent under test the CUDA one (lease-agent under the fake driver
 * or on a GPU)? Only it has a reaper, and --bell-timeout. */
static int ev_cuda_agent(void)
{
    const char *agent = getenv("TH_AGENT");
    size_t n = agent ? strlen(agent) : 0;
    return n >= 11 && strcmp(agent + n - 11, "lease-agent") == 0;
}

/* A bell left unrung while an eviction's unregistration waits is released
 * by the agent after --bell-timeout: the work behind it is answered BUSY,
 * and the evicted segment registers again, so no client holds pinned bytes
 * hostage. With @rewrite the client also keeps zeroing its bell word the
 * whole time: the GPU waits on the agent's own word, which no client can
 * write, so the release still holds (before, the agent stored the client's
 * bell, the client took it back, the GPU kept waiting, and the evicting
 * unregistration, with every one after it, waited for ever). */
static void unrung_bell_released_after_the_bell_timeout(bool rewrite)
{
    if (!ev_cuda_agent()) {
        printf("the host backend has no reaper and no --bell-timeout: nothing to test\n");
        return;
    }
    static const char *const extra[] = {"--pinned-budget", "128K", "--bell-timeout", "300", NULL};
    struct th_agent a;
    th_agent_start(&a, NULL, extra);
    union lt_msg_buffer buf;
    int b = th_hello(a.sock, 0, NULL);
    struct hs_seg p[3];
    ev_idle_segments(b, p, 0x80);
    int c = th_hello(a.sock, LT_CAP_DOORBELL, NULL);
    struct hs_seg bells, data;
    /* --bell-timeout counts from when the agent took the submit, after it
     * was sent: the release comes at least 300 ms after this. */
    const uint64_t t_sent = base_now_ns();
    uint64_t rid = hs_unrung_bell_submit(c, &bells, &data, EV_DATA, 0x85);
    struct hs_rewriter rw;
    if (rewrite)
        hs_bell_rewriter_start(&rw, bells.map);

    /* B's lease evicts a segment: its unregistration is deferred behind
     * A's bell, then the bell is released. */
    struct lt_lease_grant_entry g0 = ev_lease(b, p[0].id, LT_CLASS_PINNED, LT_LEASE_F_ALLOW_STAGED);
    ck_assert_msg(g0.status == LT_OK, "the grant needing an eviction: %s",
                  lt_error_name(g0.status));
    ssize_t n = th_recv(c, &buf, EV_BOUND_MS);
    ck_assert_msg(n > 0, "the unrung bell was not released within %d ms (%zd)", EV_BOUND_MS, n);
    ck_assert_uint_eq(buf.hdr.type, LT_MSG_COMPLETION);
    ck_assert_uint_eq(buf.hdr.request_id, rid);
    uint32_t status = ((const struct lt_msg_completion *)(const void *)buf.bytes)->status;
    ck_assert_msg(status == LT_E_BUSY, "the released bell's work: expected BUSY, found %s",
                  lt_error_name(status));
    uint64_t waited_ms = (base_now_ns() - t_sent) / 1000000u;
    ck_assert_msg(waited_ms >= 300,
                  "released %" PRIu64 " ms after the submit, before --bell-timeout 300", waited_ms);
    /* The agent released its own word: the client's bell is as the client
     * left it. */
    if (!rewrite)
        ck_assert_uint_eq(__atomic_load_n((uint64_t *)(void *)bells.map, __ATOMIC_ACQUIRE), 0);
    ev_checksum(b, g0.lease);
    ev_release(b, g0.lease);

    /* The evicted segment registers again, PINNED. */
    struct lt_lease_grant_entry again = {0};
    const uint64_t t0 = base_now_ns();
    do {
        again = ev_lease(b, p[1].id, LT_CLASS_PINNED, 0);
        if (again.status == LT_E_BUSY)
            base_sleep_ns(20 * 1000 * 1000);
    } while (again.status == LT_E_BUSY && base_now_ns() - t0 < EV_BOUND_MS * 1000000ull);
    ck_assert_msg(again.status == LT_OK, "the evicted segment registered again: %s",
                  lt_error_name(again.status));
    ck_assert_uint_eq(again.mem_class, LT_CLASS_PINNED);
    ev_checksum(b, again.lease);
    if (rewrite)
        hs_bell_rewriter_stop(&rw);
    close(c);
    close(b);
    for (int i = 0; i < 3; i++)
        hs_seg_close(&p[i]);
    hs_seg_close(&bells);
    hs_seg_close(&data);
    hs_agent_finish(&a);
}

START_TEST(test_an_unrung_bell_holding_an_unregistration_is_released_after_the_bell_timeout)
{
    unrung_bell_released_after_the_bell_timeout(false);
}
END_TEST

START_TEST(test_a_bell_its_client_keeps_zeroing_cannot_hold_an_unregistration)
{
    unrung_bell_released_after_the_bell_timeout(true);
}
END_TEST

/* A registration that fails is undone where it failed, on the thread that
 * made it, not by the reaper, so no gate is asked first: the undo's
 * cuMemHostUnregister waits in the driver behind every queued wait, another
 * client's unrung bell included, and --bell-timeout (10 minutes here) would
 * come far too late. The watchdog watches such an unregistration too, and
 * releases the bell: the failed offer is answered, the bell's work BUSY,
 * and the client offers and verifies again at once. The fake driver refuses
 * a 76 KiB MAPPED registration its device pointer
 * (FAKECUDA_DEVPTR_REFUSE_LEN); the lease service's unwind of a segment's
 * registered chunks goes through the same watched call. */
START_TEST(test_a_failed_registrations_unwind_is_not_held_by_a_peers_unrung_bell)
{
    if (!ev_cuda_agent()) {
        printf("the host backend registers no chunks on a driver: nothing to test\n");
        return;
    }
    if (!getenv("FAKECUDA")) {
        printf("only the fake driver refuses a device pointer on purpose: not tested here\n");
        return;
    }
    setenv("FAKECUDA_DEVPTR_REFUSE_LEN", "77824", 1); /* this test's process and its agent */
    static const char *const extra[] = {"--bell-timeout", "600000", NULL};
    struct th_agent a;
    th_agent_start(&a, NULL, extra);
    union lt_msg_buffer buf;
    int c = th_hello(a.sock, LT_CAP_DOORBELL, NULL);
    struct hs_seg bells, data;
    uint64_t rid = hs_unrung_bell_submit(c, &bells, &data, EV_DATA, 0x91);

    int b = th_hello(a.sock, 0, NULL);
    struct hs_seg torn;
    ck_assert_int_eq(hs_memfd(&torn, 64 * HS_KIB + 12 * HS_KIB, 0, HS_SEALS, 0x92), 0);
    uint64_t orid = th_offer_send(b, &torn.fd, 1, torn.size, LT_CLASS_MAPPED);
    ssize_t n = th_recv(b, &buf, EV_BOUND_MS);
    ck_assert_msg(n > 0,
                  "the offer whose registration failed was not answered within %d ms (%zd): its "
                  "undo waited behind the other client's unrung bell",
                  EV_BOUND_MS, n);
    ck_assert_uint_eq(buf.hdr.request_id, orid);
    ck_assert_uint_eq(buf.hdr.type, LT_MSG_ERROR);
    const struct lt_msg_error *e = (const void *)buf.bytes;
    ck_assert_msg(e->code == LT_E_MEMLOCK, "the failed registration: expected MEMLOCK, found %s: %s",
                  lt_error_name(e->code), e->message);

    n = th_recv(c, &buf, EV_BOUND_MS);
    ck_assert_msg(n > 0, "the bell the watchdog released was not answered within %d ms (%zd)",
                  EV_BOUND_MS, n);
    ck_assert_uint_eq(buf.hdr.type, LT_MSG_COMPLETION);
    ck_assert_uint_eq(buf.hdr.request_id, rid);
    uint32_t status = ((const struct lt_msg_completion *)(const void *)buf.bytes)->status;
    ck_assert_msg(status == LT_E_BUSY, "the released bell's work: expected BUSY, found %s",
                  lt_error_name(status));

    struct hs_seg good;
    struct lt_lease_grant_entry g =
        hs_offer_and_lease(b, &good, EV_SEG, 0, LT_CLASS_PINNED, 0x93, EV_DATA, NULL);
    ck_assert_uint_eq(g.mem_class, LT_CLASS_PINNED);
    ev_checksum(b, g.lease);
    ev_release(b, g.lease);
    close(c);
    close(b);
    hs_seg_close(&torn);
    hs_seg_close(&good);
    hs_seg_close(&bells);
    hs_seg_close(&data);
    hs_agent_finish(&a);
}
END_TEST

static Suite *evict_suite(void)
{
    Suite *s = suite_create("hostile_evict");
    TCase *tc = tcase_create("evict");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_an_eviction_behind_a_peers_unrung_bell_leaves_grants_answered);
    tcase_add_test(
        tc, test_an_unrung_bell_holding_an_unregistration_is_released_after_the_bell_timeout);
    tcase_add_test(tc, test_a_bell_its_client_keeps_zeroing_cannot_hold_an_unregistration);
    tcase_add_test(tc, test_a_failed_registrations_unwind_is_not_held_by_a_peers_unrung_bell);
    suite_add_tcase(s, tc);
    return s;
}

LEASE_CHECK_MAIN(evict_suite, NULL)
