/* Issue #12: nothing a client does can change or pull away leased bytes.
 * A strict agent leases only segments sealed F_SEAL_FUTURE_WRITE, except
 * that a client granted LT_CAP_STREAM may lease an unsealed MAPPED segment
 * for a streaming ring's words (LEASE_GRANT_ALLOW_WORDS). Such a lease is
 * words-only: its client can punch a hole in it or MADV_REMOVE it under the
 * lease (the agent would read zeros, the GPU stale pinned pages, a hugetlb
 * hole SIGBUS), so the agent refuses it as data -- in every SUBMIT op, as a
 * LAUNCH range, as a ring's slots -- with LT_E_SEGMENT_UNSEALED, naming the
 * lease, the segment and the seal. The ring's words lease still works, the
 * client's connection stays, the agent stays up, and another client's work
 * runs meanwhile. Before the fix every such use was accepted.
 *
 * Runs against lease-agent-host, which grants no LAUNCH (the LAUNCH case is
 * then skipped, said so on stderr), and as test_hostile_words_data_fakecuda
 * against lease-agent under the fake driver with the launch test kernels
 * (HS_CUBIN_DIR), where the LAUNCH case runs too. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check_main.h"
#include "hostile.h"

#define CAPS (LT_CAP_DOORBELL | LT_CAP_DONE_WORD | LT_CAP_STREAM | LT_CAP_LAUNCH)
#define SEG (64 * HS_KIB)
#define DATA (32 * HS_KIB)
#define SLOTS 4u
#define SLOT_BYTES (4 * HS_KIB)
#define WORDS_BYTES 4096u

/* The agent, with the launch test kernels where the environment names them. */
static void agent_start(struct th_agent *a)
{
    const char *dir = getenv("HS_CUBIN_DIR");
    const char *extra[] = {"--cubin-dir", dir, NULL};
    th_agent_start(a, NULL, dir && *dir ? extra : NULL);
}

/* A STREAM client's words-only lease: all of an unsealed MAPPED segment
 * (sealed SHRINK|GROW|SEAL only), filled with checksummed data. */
static struct lt_lease_grant_entry words_only_lease(int c, struct hs_seg *s, uint64_t seed)
{
    char msg[128];
    ck_assert_int_eq(hs_memfd(s, SEG, 0, 0, seed), 0);
    hs_checksum_fill(s->map, DATA, seed);
    ck_assert_int_eq(fcntl(s->fd, F_ADD_SEALS, HS_OLD_SEALS), 0);
    s->seals = HS_OLD_SEALS;
    uint32_t code = hs_offer(c, s, LT_CLASS_MAPPED, msg, sizeof msg);
    ck_assert_msg(code == LT_OK, "unsealed MAPPED offer refused: %s: %s", lt_error_name(code), msg);
    struct lt_lease_grant_entry g = th_lease(c, s->id, 0, SEG, LT_CLASS_MAPPED);
    ck_assert_msg(g.status == LT_OK, "a STREAM client's lease of an unsealed MAPPED segment: %s",
                  lt_error_name(g.status));
    return g;
}

/* The refusal's words: the lease, its segment, the seal and what it is for. */
static void assert_words_only_message(const char *m)
{
    ck_assert_msg(strstr(m, "lacks F_SEAL_FUTURE_WRITE") && strstr(m, "ring words only") &&
                      strstr(m, "not data") && strstr(m, "segment {"),
                  "the refusal does not say what was expected and found: %s", m);
}

/* A second client's sealed lease checksummed while the first is refused. */
static void assert_other_client_served(struct th_agent *a)
{
    union lt_msg_buffer buf;
    int o = th_hello(a->sock, 0, NULL);
    struct hs_seg s;
    struct lt_lease_grant_entry g =
        hs_offer_and_lease(o, &s, SEG, 0, LT_CLASS_PINNED, 0x5a, DATA, NULL);
    struct lt_msg_submit sub;
    hs_checksum_submit(&sub, g.lease, DATA);
    uint64_t rid = th_submit_send(o, &sub);
    th_expect(o, &buf, LT_MSG_COMPLETION);
    ck_assert_uint_eq(buf.hdr.request_id, rid);
    ck_assert_uint_eq(((const struct lt_msg_completion *)(const void *)buf.bytes)->status, LT_OK);
    close(o);
    hs_seg_close(&s);
}

START_TEST(test_a_words_only_lease_is_refused_as_submit_data)
{
    struct th_agent a;
    agent_start(&a);
    union lt_msg_buffer buf;
    int c = th_hello(a.sock, CAPS, NULL);
    struct hs_seg w;
    struct lt_lease_grant_entry g = words_only_lease(c, &w, 0x71);
    struct lt_msg_submit subs[3];
    hs_checksum_submit(&subs[0], g.lease, DATA);
    subs[1] = (struct lt_msg_submit){.lease = g.lease, .op = LT_OP_COPY_H2D};
    subs[1].args.copy = (struct lt_op_copy_h2d){.offset = 0, .length = DATA};
    subs[2] = (struct lt_msg_submit){.lease = g.lease, .op = LT_OP_VECTOR_SCAN};
    subs[2].args.scan = (struct lt_op_vector_scan){.offset = 0,
                                                   .length = 16 * 64 * 4,
                                                   .query_offset = DATA,
                                                   .dim = 64,
                                                   .elem = LT_ELEM_F32,
                                                   .metric = LT_SCAN_DOT};
    for (int k = 0; k < 3; k++) {
        uint64_t rid = th_submit_send(c, &subs[k]);
        const struct lt_msg_error *e = th_expect_error(c, &buf, rid, LT_E_SEGMENT_UNSEALED);
        ck_assert_uint_eq(e->failed_type, LT_MSG_SUBMIT);
        assert_words_only_message(e->message);
        ck_assert_msg(strstr(e->message, "lease {"), "%s", e->message);
    }
    /* What the refusal guards against: the client frees its leased pages. */
    ck_assert_int_eq(fallocate(w.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096), 0);
    ck_assert_int_eq(madvise(w.map + 4096, 4096, MADV_REMOVE), 0);
    uint64_t rid = th_submit_send(c, &subs[0]);
    th_expect_error(c, &buf, rid, LT_E_SEGMENT_UNSEALED);
    assert_other_client_served(&a);
    /* The connection stays: it is still answered. */
    th_stats(c, 0, &buf);
    close(c);
    hs_seg_close(&w);
    hs_agent_finish(&a);
}
END_TEST

START_TEST(test_a_words_only_lease_is_refused_as_launch_data)
{
    struct th_agent a;
    agent_start(&a);
    struct lt_msg_hello_reply hr;
    int c = th_hello(a.sock, CAPS, &hr);
    if (!(hr.caps & LT_CAP_LAUNCH)) {
        fprintf(stderr, "LAUNCH case skipped: this agent grants no LAUNCH (the host backend); "
                        "test_hostile_words_data_fakecuda runs it\n");
        close(c);
        ck_assert_int_eq(th_agent_stop(&a), 0);
        th_agent_cleanup(&a);
        return;
    }
    struct hs_seg w;
    struct lt_lease_grant_entry g = words_only_lease(c, &w, 0x72);
    unsigned char *before = malloc(SEG);
    ck_assert_ptr_nonnull(before);
    memcpy(before, w.map, SEG);
    /* A kernel reading the range, and one writing it (the agent maps an
     * unsealed segment writable, so only the words-only mark stops it). */
    const struct {
        uint32_t flags;
        const char *kernel;
    } cases[] = {{0, "k_launch_sum_u32"}, {LT_LAUNCH_LEASE_F_WRITE, "k_launch_fill"}};
    for (int k = 0; k < 2; k++) {
        struct lt_msg_launch_completion lc =
            hs_launch_wait(c, hs_launch_send(c, g.lease, cases[k].flags, cases[k].kernel));
        ck_assert_msg(lc.status == LT_E_SEGMENT_UNSEALED, "%s: expected %s, found %s: %s",
                      cases[k].kernel, lt_error_name(LT_E_SEGMENT_UNSEALED),
                      lt_error_name(lc.status), lc.message);
        assert_words_only_message(lc.message);
        ck_assert_msg(strstr(lc.message, "lease range 0"), "%s", lc.message);
    }
    ck_assert(memcmp(before, w.map, SEG) == 0);
    free(before);
    /* A sealed lease still launches on the same connection. */
    struct hs_seg s;
    struct lt_lease_grant_entry sg =
        hs_offer_and_lease(c, &s, SEG, 0, LT_CLASS_PINNED, 0x73, 0, NULL);
    struct lt_msg_launch_completion lc =
        hs_launch_wait(c, hs_launch_send(c, sg.lease, 0, "k_launch_sum_u32"));
    ck_assert_msg(lc.status == LT_OK, "%s: %s", lt_error_name(lc.status), lc.message);
    assert_other_client_served(&a);
    close(c);
    hs_seg_close(&w);
    hs_seg_close(&s);
    hs_agent_finish(&a);
}
END_TEST

static uint64_t ring_open_send(int c, struct lt_lease_id slots, struct lt_lease_id words)
{
    struct lt_msg_ring_open m;
    lt_msg_init(&m, sizeof m, LT_MSG_RING_OPEN, th_rid());
    m.slots = slots;
    m.words = words;
    m.slot_bytes = SLOT_BYTES;
    m.seq_offset = 0;
    m.done_offset = 8 * SLOTS;
    m.max_shard_bytes = SLOTS * SLOT_BYTES;
    m.nslots = SLOTS;
    m.depth = 1;
    ck_assert_int_eq(th_send(c, &m, sizeof m, NULL, 0), 0);
    return m.hdr.request_id;
}

START_TEST(test_a_words_only_lease_is_refused_as_ring_slots_and_serves_as_ring_words)
{
    struct th_agent a;
    agent_start(&a);
    union lt_msg_buffer buf;
    int c = th_hello(a.sock, CAPS, NULL);
    /* The words: an unsealed MAPPED segment, every word 0, as a ring wants. */
    struct hs_seg words;
    ck_assert_int_eq(hs_memfd(&words, WORDS_BYTES, 0, HS_OLD_SEALS, 0x74), 0);
    memset(words.map, 0, WORDS_BYTES);
    char msg[128];
    ck_assert_uint_eq(hs_offer(c, &words, LT_CLASS_MAPPED, msg, sizeof msg), LT_OK);
    struct lt_lease_grant_entry wg = th_lease(c, words.id, 0, WORDS_BYTES, LT_CLASS_MAPPED);
    ck_assert_uint_eq(wg.status, LT_OK);
    /* Slots in another words-only lease: the GPU would copy pages the
     * client can free. */
    struct hs_seg bad;
    struct lt_lease_grant_entry bg = words_only_lease(c, &bad, 0x75);
    uint64_t rid = ring_open_send(c, bg.lease, wg.lease);
    const struct lt_msg_error *e = th_expect_error(c, &buf, rid, LT_E_SEGMENT_UNSEALED);
    ck_assert_uint_eq(e->failed_type, LT_MSG_RING_OPEN);
    assert_words_only_message(e->message);
    ck_assert_msg(strstr(e->message, "slots lease {"), "%s", e->message);
    assert_other_client_served(&a);
    /* Slots from a sealed segment with the same words lease: opened. */
    struct hs_seg slots;
    struct lt_lease_grant_entry sg =
        hs_offer_and_lease(c, &slots, SEG, 0, LT_CLASS_PINNED, 0x76, 0, NULL);
    rid = ring_open_send(c, sg.lease, wg.lease);
    th_expect(c, &buf, LT_MSG_RING_OPENED);
    ck_assert_uint_eq(buf.hdr.request_id, rid);
    close(c);
    hs_seg_close(&words);
    hs_seg_close(&bad);
    hs_seg_close(&slots);
    hs_agent_finish(&a);
}
END_TEST

static Suite *words_data_suite(void)
{
    Suite *s = suite_create("hostile_words_data");
    TCase *tc = tcase_create("words_data");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_a_words_only_lease_is_refused_as_submit_data);
    tcase_add_test(tc, test_a_words_only_lease_is_refused_as_launch_data);
    tcase_add_test(tc, test_a_words_only_lease_is_refused_as_ring_slots_and_serves_as_ring_words);
    suite_add_tcase(s, tc);
    return s;
}

LEASE_CHECK_MAIN(words_data_suite, NULL)
