/* Doorbells under the seal rule (docs/reliability.md): a bell must lie in a
 * mapping the agent holds writable (the rule dates from when the CUDA
 * backend rang a gone client's bell; its streams now wait on the agent's
 * own word).
 * A bell, or a done word, in a segment sealed F_SEAL_FUTURE_WRITE
 * (read-only to the agent) is refused at SUBMIT, naming the word and the
 * seal, never a fault at the write, and so are a scan's hits in a sealed
 * lease; a client that goes with bell-gated work queued leaves an agent
 * that serves the next client. Run against lease-agent-host, and (by
 * hand, TH_AGENT) against lease-agent under the fake driver. */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "hostile.h"

/* A checksum of the 32 KiB in @lease (with its table behind them) on
 * connection @c: answered LT_OK. */
static void checksum_runs(int c, struct lt_lease_id lease)
{
    struct lt_msg_submit sub;
    union lt_msg_buffer buf;
    hs_checksum_submit(&sub, lease, 32 * HS_KIB);
    uint64_t rid = th_submit_send(c, &sub);
    th_expect(c, &buf, LT_MSG_COMPLETION);
    ck_assert_uint_eq(buf.hdr.request_id, rid);
    ck_assert_uint_eq(((const struct lt_msg_completion *)(const void *)buf.bytes)->status, LT_OK);
}

/* A SUBMIT naming a word (@flag: its bell or its done word) in a segment
 * sealed F_SEAL_FUTURE_WRITE is refused, naming the word and the seal, and
 * the same work without the word then runs on the same connection. */
static void sealed_word_refused(uint32_t caps, uint32_t flag, const char *what, const char *remedy)
{
    struct th_agent a;
    th_agent_start(&a, NULL, NULL);
    union lt_msg_buffer buf;
    char msg[128];
    int c = th_hello(a.sock, caps, NULL);
    struct hs_seg words;
    ck_assert_int_eq(hs_memfd(&words, 64 * HS_KIB, 0, HS_SEALS, 0x61), 0);
    ck_assert_uint_eq(hs_offer(c, &words, LT_CLASS_MAPPED, msg, sizeof msg), LT_OK);
    struct hs_seg data;
    struct lt_lease_grant_entry g =
        hs_offer_and_lease(c, &data, 64 * HS_KIB, 0, LT_CLASS_STAGED, 0x62, 32 * HS_KIB, NULL);
    struct lt_msg_submit sub;
    hs_checksum_submit(&sub, g.lease, 32 * HS_KIB);
    sub.flags = flag;
    const struct lt_word_ref w = {.segment = words.id, .offset = 0};
    if (flag == LT_SUBMIT_F_WAIT_BELL) {
        sub.bell = w;
        sub.bell_seq = 1;
    } else {
        sub.done = w;
        sub.done_seq = 1;
    }
    uint64_t rid = th_submit_send(c, &sub);
    const struct lt_msg_error *e = th_expect_error(c, &buf, rid, LT_E_UNSUPPORTED);
    /* The whole text reaches the client, the remedy too (the wire holds
     * LT_ERROR_MSG_LEN bytes and cuts a longer one at a word). */
    ck_assert_msg(strstr(e->message, what) && strstr(e->message, "F_SEAL_FUTURE_WRITE") &&
                      strstr(e->message, remedy),
                  "the refusal names not the %s, the seal and '%s': %s", what, remedy, e->message);
    /* The connection stays: the same work without the word runs. */
    checksum_runs(c, g.lease);
    close(c);
    hs_seg_close(&words);
    hs_seg_close(&data);
    hs_agent_finish(&a);
}

START_TEST(test_a_bell_in_a_sealed_segment_is_refused_at_submit)
{
    sealed_word_refused(LT_CAP_DOORBELL, LT_SUBMIT_F_WAIT_BELL, "bell word",
                        "use an unsealed MAPPED segment");
}
END_TEST

/* The agent (or the GPU) writes a done word: the same rule. */
START_TEST(test_a_done_word_in_a_sealed_segment_is_refused_at_submit)
{
    sealed_word_refused(LT_CAP_DONE_WORD, LT_SUBMIT_F_SIGNAL_DONE, "done word",
                        "use words area or unsealed MAPPED");
}
END_TEST

/* A scan's top-k hits in its own lease (a client without LT_CAP_WORDS):
 * the agent writes them, so a lease it holds read-only is refused. */
START_TEST(test_scan_hits_in_a_sealed_lease_are_refused_at_submit)
{
    struct th_agent a;
    th_agent_start(&a, NULL, NULL);
    union lt_msg_buffer buf;
    int c = th_hello(a.sock, 0, NULL);
    struct hs_seg data;
    struct lt_lease_grant_entry g =
        hs_offer_and_lease(c, &data, 64 * HS_KIB, 0, LT_CLASS_STAGED, 0x63, 32 * HS_KIB, NULL);
    struct lt_msg_submit sub;
    memset(&sub, 0, sizeof sub);
    sub.lease = g.lease;
    sub.op = LT_OP_VECTOR_SCAN;
    sub.args.scan = (struct lt_op_vector_scan){.offset = 0,
                                               .length = 16 * HS_KIB,
                                               .query_offset = 16 * HS_KIB,
                                               .dim = 16,
                                               .elem = LT_ELEM_F32,
                                               .metric = LT_SCAN_DOT,
                                               .hits_offset = 20 * HS_KIB,
                                               .k = 4};
    uint64_t rid = th_submit_send(c, &sub);
    const struct lt_msg_error *e = th_expect_error(c, &buf, rid, LT_E_UNSUPPORTED);
    ck_assert_msg(strstr(e->message, "hits") && strstr(e->message, "F_SEAL_FUTURE_WRITE") &&
                      strstr(e->message, "LT_CAP_WORDS"),
                  "the refusal names not the hits, the seal and the words area: %s", e->message);
    /* The connection stays: other work on the same lease runs. */
    checksum_runs(c, g.lease);
    close(c);
    hs_seg_close(&data);
    hs_agent_finish(&a);
}
END_TEST

START_TEST(test_a_client_gone_with_bell_gated_work_leaves_others_served)
{
    struct th_agent a;
    th_agent_start(&a, NULL, NULL);
    char msg[128];
    for (int round = 0; round < 3; round++) {
        int c = th_hello(a.sock, LT_CAP_DOORBELL, NULL);
        struct hs_seg bells;
        /* Unsealed MAPPED: taken for its words, mapped writable. */
        ck_assert_int_eq(hs_memfd(&bells, 64 * HS_KIB, 0, HS_OLD_SEALS, 0x63), 0);
        memset(bells.map, 0, 64);
        ck_assert_uint_eq(hs_offer(c, &bells, LT_CLASS_MAPPED, msg, sizeof msg), LT_OK);
        struct hs_seg data;
        struct lt_lease_grant_entry g =
            hs_offer_and_lease(c, &data, 64 * HS_KIB, 0, LT_CLASS_STAGED, 0x64, 32 * HS_KIB, NULL);
        for (uint32_t k = 0; k < 4; k++) {
            struct lt_msg_submit sub;
            hs_checksum_submit(&sub, g.lease, 32 * HS_KIB);
            sub.flags = LT_SUBMIT_F_WAIT_BELL;
            sub.bell = (struct lt_word_ref){.segment = bells.id, .offset = 8 * k};
            sub.bell_seq = 1; /* never rung */
            th_submit_send(c, &sub);
        }
        th_expect_silence(c, 50);
        close(c); /* gone with four submits waiting on their bells */
        hs_seg_close(&bells);
        hs_seg_close(&data);
        hs_assert_serving(&a);
    }
    ck_assert_int_eq(th_agent_stop(&a), 0);
    th_agent_cleanup(&a);
}
END_TEST

/* A client that holds bell-gated work and stays: another client's segment
 * is released meanwhile (on the CUDA backend cuMemHostUnregister waits for
 * the device's queued work, the unrung bell's wait included), and the agent
 * still answers a third client before the bell is rung. */
START_TEST(test_a_client_holding_unrung_bells_leaves_others_served)
{
    struct th_agent a;
    th_agent_start(&a, NULL, NULL);
    union lt_msg_buffer buf;
    int c = th_hello(a.sock, LT_CAP_DOORBELL, NULL);
    struct hs_seg bells, data;
    uint64_t rid = hs_unrung_bell_submit(c, &bells, &data, 32 * HS_KIB, 0x65);
    /* Another client's registered segment, released as that client goes. */
    int c2 = th_hello(a.sock, 0, NULL);
    struct hs_seg other;
    hs_offer_and_lease(c2, &other, 64 * HS_KIB, 0, LT_CLASS_MAPPED, 0x67, 0, NULL);
    close(c2);
    hs_seg_close(&other);
    hs_assert_serving(&a);
    /* The bell rung, the held work completes. */
    __atomic_store_n((uint64_t *)(void *)bells.map, 1, __ATOMIC_RELEASE);
    th_expect(c, &buf, LT_MSG_COMPLETION);
    ck_assert_uint_eq(buf.hdr.request_id, rid);
    ck_assert_uint_eq(((const struct lt_msg_completion *)(const void *)buf.bytes)->status, LT_OK);
    close(c);
    hs_seg_close(&bells);
    hs_seg_close(&data);
    hs_agent_finish(&a);
}
END_TEST

/* A client with bell-gated work that keeps zeroing its bell word while the
 * agent stops: the stop releases the wait and the agent drains and exits 0.
 * On the CUDA backend the stream waits on the agent's own word, which the
 * client cannot write (before, it waited on the client's, the drain waited
 * for ever, and only --stop-timeout ended the agent, with status 1); the
 * host backend's wait is its own. */
START_TEST(test_a_bell_rewritten_after_the_stop_cannot_hold_it)
{
    struct th_agent a;
    const char *const extra[] = {"--stop-timeout", "2", NULL};
    th_agent_start(&a, NULL, extra);
    int c = th_hello(a.sock, LT_CAP_DOORBELL, NULL);
    struct hs_seg bells, data;
    hs_unrung_bell_submit(c, &bells, &data, 32 * HS_KIB, 0x69);
    struct hs_rewriter rw;
    hs_bell_rewriter_start(&rw, bells.map);
    const int st = th_agent_stop(&a);
    hs_bell_rewriter_stop(&rw);
    ck_assert_msg(st >= 0, "the agent did not stop in %d ms while a client rewrote its bell; "
                  "its log: %s", TH_TIMEOUT_MS, a.log);
    ck_assert_msg(st == 0, "the agent exited %d; expected 0 (drained); its log: %s", st, a.log);
    close(c);
    hs_seg_close(&bells);
    hs_seg_close(&data);
    th_agent_cleanup(&a);
}
END_TEST

static Suite *bells_suite(void)
{
    Suite *s = suite_create("hostile_bells");
    TCase *tc = tcase_create("bells");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_a_bell_in_a_sealed_segment_is_refused_at_submit);
    tcase_add_test(tc, test_a_done_word_in_a_sealed_segment_is_refused_at_submit);
    tcase_add_test(tc, test_scan_hits_in_a_sealed_lease_are_refused_at_submit);
    tcase_add_test(tc, test_a_client_gone_with_bell_gated_work_leaves_others_served);
    tcase_add_test(tc, test_a_client_holding_unrung_bells_leaves_others_served);
    tcase_add_test(tc, test_a_bell_rewritten_after_the_stop_cannot_hold_it);
    suite_add_tcase(s, tc);
    return s;
}

LEASE_CHECK_MAIN(bells_suite, NULL)
