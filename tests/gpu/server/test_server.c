/* The agent's socket server, end to end: a real lease-agent-host on a
 * private socket, driven by clients that speak the protocol, by broken
 * clients, by clients that die, and by signals. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "kernels/blockhash_ref.h"
#include "kernels/scan_ref.h"

#define KiB 1024ull
#define MiB (1024ull * 1024ull)

/* Clients that ask for every cap but batched release-completes keep the
 * per-lease RELEASE_COMPLETE path tested. */
#define CAPS_SINGLES (LT_CAP_CLIENT_KNOWN & ~LT_CAP_RC_BATCH)

static struct th_agent ag;

static void agent_setup(void)
{
    signal(SIGPIPE, SIG_IGN);
    th_agent_start(&ag, NULL, NULL);
}

/* Every test ends with a clean exit: status 0, which under the sanitizer
 * build also means no leak and no error report in the agent. */
static void agent_teardown(void)
{
    int st = ag.pid > 0 ? th_agent_stop(&ag) : 0;
    th_agent_cleanup(&ag);
    ck_assert_msg(st == 0, "lease-agent-host exited with status %d", st);
}

static const struct lt_msg_completion *completion_of(union lt_msg_buffer *buf)
{
    return (const void *)buf->bytes;
}

/* A 1 MiB PINNED segment: 256 KiB of seeded data, its 4 KiB-block
 * checksums right after it. */
struct data_seg {
    int fd;
    unsigned char *map;
    uint64_t size;
    uint64_t len;
    uint32_t bs;
    uint64_t *sums;
};

static void data_seg_make(struct data_seg *d, uint64_t seed)
{
    d->size = MiB;
    d->len = 256 * KiB;
    d->bs = 4096;
    void *p = NULL;
    d->fd = th_memfd(d->size, TH_GOOD_SEALS, seed, &p);
    d->map = p;
    d->sums = (uint64_t *)(void *)(d->map + d->len);
    ck_assert_int_eq(kr_block_checksums(d->map, d->len, d->bs, d->sums), 64);
}

static void checksum_submit(struct lt_msg_submit *s, struct lt_lease_id lease,
                            const struct data_seg *d)
{
    memset(s, 0, sizeof *s);
    s->lease = lease;
    s->op = LT_OP_CHECKSUM_VERIFY;
    s->args.checksum.offset = 0;
    s->args.checksum.length = d->len;
    s->args.checksum.sums_offset = d->len;
    s->args.checksum.block_size = d->bs;
}

/* A zeroed 4 KiB MAPPED segment for doorbell and done words. Without
 * F_SEAL_FUTURE_WRITE, so the agent may write its done words; taken for its
 * words only, never leased (test_server_words.c has the sealed way). */
static struct lt_segment_id bell_seg_make(int c, volatile uint64_t **words_p)
{
    void *p = NULL;
    int fd = th_memfd(4096, 0, 1, &p);
    memset(p, 0, 4096);
    ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, TH_OLD_SEALS), 0);
    struct lt_segment_id id = th_offer(c, fd, 4096, LT_CLASS_MAPPED, 0xbe11);
    close(fd);
    *words_p = p;
    return id;
}

/* ---- handshake ----------------------------------------------------------- */

START_TEST(test_hello_grants_known_caps_and_reports_limits)
{
    struct lt_msg_hello_reply r;
    union lt_msg_buffer buf;
    int c = th_hello(ag.sock, LT_CAP_DOORBELL | LT_CAP_TIMING, &r);
    ck_assert_uint_eq(r.version, 1);
    ck_assert_uint_eq(r.caps, LT_CAP_DOORBELL | LT_CAP_TIMING | LT_CAP_HOST_BACKEND);
    ck_assert_uint_ne(r.client_id, 0);
    ck_assert_uint_eq(r.max_lease_batch, LT_MAX_BATCH);
    ck_assert_uint_eq(r.class_budget[LT_CLASS_PINNED], 4 * MiB);
    ck_assert_uint_eq(r.class_budget[LT_CLASS_MAPPED], 2 * MiB);
    ck_assert_uint_eq(r.class_budget[LT_CLASS_STAGED], UINT64_MAX);
    ck_assert_str_eq(r.agent_name, "ga-host");

    /* A second HELLO is refused, and the connection keeps working. */
    struct lt_msg_hello h;
    lt_msg_init(&h, sizeof h, LT_MSG_HELLO, th_rid());
    h.version_min = h.version_max = 1;
    lt_name_set(h.name, sizeof h.name, "again");
    ck_assert_int_eq(th_send(c, &h, sizeof h, NULL, 0), 0);
    th_expect_error(c, &buf, h.hdr.request_id, LT_E_NO_HELLO);
    th_stats(c, 0, &buf);

    /* Another client gets its own id; anything before HELLO is refused. */
    int d = th_connect(ag.sock);
    struct lt_msg_stats_request s;
    lt_msg_init(&s, sizeof s, LT_MSG_STATS_REQUEST, th_rid());
    ck_assert_int_eq(th_send(d, &s, sizeof s, NULL, 0), 0);
    th_expect_error(d, &buf, s.hdr.request_id, LT_E_NO_HELLO);

    /* A client that speaks only v2 gets BAD_VERSION and is disconnected. */
    lt_msg_init(&h, sizeof h, LT_MSG_HELLO, th_rid());
    h.version_min = 2;
    h.version_max = 3;
    lt_name_set(h.name, sizeof h.name, "future");
    ck_assert_int_eq(th_send(d, &h, sizeof h, NULL, 0), 0);
    th_expect_error(d, &buf, h.hdr.request_id, LT_E_BAD_VERSION);
    ck_assert_int_eq(th_expect_eof(d), 0);
    close(d);

    struct lt_msg_hello_reply r2;
    int e = th_hello(ag.sock, 0, &r2);
    ck_assert_uint_ne(r2.client_id, r.client_id);
    ck_assert_uint_eq(r2.caps, LT_CAP_HOST_BACKEND);
    close(e);

    /* A newer client's unknown caps are not granted, and it is served. */
    struct lt_msg_hello_reply r3;
    int f = th_hello(ag.sock, LT_CAP_DOORBELL | (1u << 29), &r3);
    ck_assert_uint_eq(r3.caps, LT_CAP_DOORBELL | LT_CAP_HOST_BACKEND);
    th_stats(f, 0, &buf);
    close(f);
    close(c);
}
END_TEST

/* ---- the lease life cycle ------------------------------------------------ */

START_TEST(test_checksum_verify_reports_the_corrupted_block)
{
    union lt_msg_buffer buf;
    int c = th_hello(ag.sock, 0, NULL);
    struct data_seg d;
    data_seg_make(&d, 0x5eed01);
    struct lt_segment_id seg = th_offer(c, d.fd, d.size, LT_CLASS_PINNED, 77);
    struct lt_lease_grant_entry g = th_lease(c, seg, 0, d.size, LT_CLASS_PINNED);
    ck_assert_uint_eq(g.status, LT_OK);
    ck_assert_uint_eq(g.mem_class, LT_CLASS_PINNED);

    struct lt_msg_submit s;
    checksum_submit(&s, g.lease, &d);
    uint64_t rid = th_submit_send(c, &s);
    th_expect(c, &buf, LT_MSG_COMPLETION);
    ck_assert_uint_eq(buf.hdr.request_id, rid);
    ck_assert_uint_eq(completion_of(&buf)->status, LT_OK);
    ck_assert_uint_eq(completion_of(&buf)->result.checksum.blocks_checked, 64);
    ck_assert_uint_eq(completion_of(&buf)->result.checksum.first_bad_block, LT_BLOCK_NONE);

    /* Two corrupted blocks: the first is named, both are counted. */
    d.map[37 * 4096 + 100] ^= 0x5a;
    d.map[50 * 4096 + 7] ^= 0x01;
    uint64_t want = kr_block_checksum(d.map + 37 * 4096, 4096);
    rid = th_submit_send(c, &s);
    th_expect(c, &buf, LT_MSG_COMPLETION);
    const struct lt_msg_completion *cp = completion_of(&buf);
    ck_assert_uint_eq(buf.hdr.request_id, rid);
    ck_assert_uint_eq(cp->status, LT_E_CHECKSUM_MISMATCH);
    ck_assert_uint_eq(cp->result.checksum.first_bad_block, 37);
    ck_assert_uint_eq(cp->result.checksum.bad_blocks, 2);
    ck_assert_uint_eq(cp->result.checksum.expected, d.sums[37]);
    ck_assert_uint_eq(cp->result.checksum.actual, want);

    /* A quiet submit that fails is still answered; COPY_H2D copies. */
    s.flags = LT_SUBMIT_F_QUIET;
    rid = th_submit_send(c, &s);
    th_expect(c, &buf, LT_MSG_COMPLETION);
    ck_assert_uint_eq(buf.hdr.request_id, rid);
    d.map[37 * 4096 + 100] ^= 0x5a;
    d.map[50 * 4096 + 7] ^= 0x01;
    th_submit_send(c, &s); /* quiet and clean: no answer */
    struct lt_msg_submit cp_s = {.lease = g.lease, .op = LT_OP_COPY_H2D};
    cp_s.args.copy.offset = 4096;
    cp_s.args.copy.length = 512 * KiB;
    rid = th_submit_send(c, &cp_s);
    th_expect(c, &buf, LT_MSG_COMPLETION);
    ck_assert_uint_eq(buf.hdr.request_id, rid);
    ck_assert_uint_eq(completion_of(&buf)->status, LT_OK);
    ck_assert_uint_eq(completion_of(&buf)->result.copy.bytes_copied, 512 * KiB);

    /* VECTOR_SCAN by L2 distance has no host implementation: refused, clearly. */
    struct lt_msg_submit sc = {.lease = g.lease, .op = LT_OP_VECTOR_SCAN};
    sc.args.scan = (struct lt_op_vector_scan){.offset = 0,
                                              .length = 4096,
                                              .query_offset = 8192,
                                              .dim = 16,
                                              .elem = LT_ELEM_F32,
                                              .metric = LT_SCAN_L2};
    rid = th_submit_send(c, &sc);
    th_expect_error(c, &buf, rid, LT_E_UNSUPPORTED);
    close(c);
    close(d.fd);
}
END_TEST

START_TEST(test_release_completes_only_after_doorbell_gated_work)
{
    union lt_msg_buffer buf;
    int c = th_hello(ag.sock, CAPS_SINGLES, NULL);
    struct data_seg d;
    data_seg_make(&d, 0x5eed02);
    struct lt_segment_id seg = th_offer(c, d.fd, d.size, LT_CLASS_PINNED, 1);
    volatile uint64_t *words;
    struct lt_segment_id bseg = bell_seg_make(c, &words);
    struct lt_lease_grant_entry g = th_lease(c, seg, 0, d.size, LT_CLASS_PINNED);
    ck_assert_uint_eq(g.status, LT_OK);

    struct lt_msg_submit s;
    checksum_submit(&s, g.lease, &d);
    s.flags = LT_SUBMIT_F_WAIT_BELL | LT_SUBMIT_F_SIGNAL_DONE;
    s.bell = (struct lt_word_ref){.segment = bseg, .offset = 0};
    s.bell_seq = 7;
    s.done = (struct lt_word_ref){.segment = bseg, .offset = 64};
    s.done_seq = 99;
    uint64_t srid = th_submit_send(c, &s);
    uint64_t rrid = th_release_send(c, g.lease);

    /* Released but the work waits for its bell: nothing completes. */
    th_expect_silence(c, 150);
    ck_assert_uint_eq(words[8], 0);
    th_stats(c, 0, &buf);
    const struct lt_msg_stats_reply *st = (const void *)buf.bytes;
    ck_assert_uint_eq(st->classes[LT_CLASS_PINNED].live_leases, 1);
    /* The segment under a draining lease cannot be retired yet. */
    struct lt_msg_segment_retire rt;
    lt_msg_init(&rt, sizeof rt, LT_MSG_SEGMENT_RETIRE, th_rid());
    rt.segment = seg;
    ck_assert_int_eq(th_send(c, &rt, sizeof rt, NULL, 0), 0);
    th_expect_error(c, &buf, rt.hdr.request_id, LT_E_BUSY);
    /* Nor the bell's, while the submit holds its word. */
    rt.segment = bseg;
    rt.hdr.request_id = th_rid();
    ck_assert_int_eq(th_send(c, &rt, sizeof rt, NULL, 0), 0);
    th_expect_error(c, &buf, rt.hdr.request_id, LT_E_BUSY);

    /* A lower sequence number does not open the gate. */
    __atomic_store_n(&words[0], 6, __ATOMIC_RELEASE);
    th_expect_silence(c, 60);
    __atomic_store_n(&words[0], 7, __ATOMIC_RELEASE);
    th_expect(c, &buf, LT_MSG_COMPLETION);
    ck_assert_uint_eq(buf.hdr.request_id, srid);
    ck_assert_uint_eq(completion_of(&buf)->status, LT_OK);
    ck_assert_uint_eq(__atomic_load_n(&words[8], __ATOMIC_ACQUIRE), 99);
    th_expect(c, &buf, LT_MSG_RELEASE_COMPLETE);
    const struct lt_msg_release_complete *rc = (const void *)buf.bytes;
    ck_assert_uint_eq(buf.hdr.request_id, rrid);
    ck_assert(lt_lease_id_eq(rc->lease, g.lease));
    ck_assert_uint_eq(rc->status, LT_OK);

    /* Released: the id is stale now, for work and for a second release. */
    s.flags = 0;
    memset(&s.bell, 0, sizeof s.bell);
    memset(&s.done, 0, sizeof s.done);
    s.bell_seq = s.done_seq = 0;
    uint64_t rid = th_submit_send(c, &s);
    th_expect_error(c, &buf, rid, LT_E_STALE_ID);
    rid = th_release_send(c, g.lease);
    th_expect(c, &buf, LT_MSG_RELEASE_COMPLETE);
    ck_assert_uint_eq(buf.hdr.request_id, rid);
    ck_assert_uint_eq(((const struct lt_msg_release_complete *)(const void *)buf.bytes)->status,
                      LT_E_STALE_ID);

    /* Now both segments retire, with their cookies. */
    rt.segment = seg;
    rt.hdr.request_id = th_rid();
    ck_assert_int_eq(th_send(c, &rt, sizeof rt, NULL, 0), 0);
    th_expect(c, &buf, LT_MSG_SEGMENT_RETIRED);
    ck_assert_uint_eq(((const struct lt_msg_segment_retired *)(const void *)buf.bytes)->cookie, 1);
    rt.segment = bseg;
    rt.hdr.request_id = th_rid();
    ck_assert_int_eq(th_send(c, &rt, sizeof rt, NULL, 0), 0);
    th_expect(c, &buf, LT_MSG_SEGMENT_RETIRED);
    /* A lease on a retired segment: stale. */
    g = th_lease(c, seg, 0, 4096, LT_CLASS_PINNED);
    ck_assert_uint_eq(g.status, LT_E_STALE_ID);
    close(c);
    close(d.fd);
}
END_TEST

/* Sends one LEASE_RELEASE of @n leases; returns its request id. */
static uint64_t release_many_send(int c, const struct lt_lease_id *leases, uint32_t n)
{
    union lt_msg_buffer req;
    struct lt_msg_lease_release *r = (void *)req.bytes;
    size_t len = sizeof *r + n * sizeof r->leases[0];
    uint64_t rid = th_rid();
    ck_assert_int_eq(lt_msg_init(r, len, LT_MSG_LEASE_RELEASE, rid), LT_OK);
    r->count = n;
    memcpy(r->leases, leases, n * sizeof *leases);
    ck_assert_int_eq(th_send(c, r, len, NULL, 0), 0);
    return rid;
}

/* With LT_CAP_RC_BATCH, every lease of a release that completes inside it
 * (granted ones and refused ones) comes back in one RELEASE_COMPLETE_BATCH;
 * a lease whose work is still gated completes later in a single
 * RELEASE_COMPLETE. Without the cap, a client gets one packet per lease. */
START_TEST(test_release_batch_with_cap_singles_without)
{
    union lt_msg_buffer buf;
    struct lt_msg_hello_reply hr;
    uint64_t rng = 0x5eedba7c;
    int c = th_hello(ag.sock, LT_CAP_CLIENT_KNOWN, &hr);
    ck_assert_uint_eq(hr.caps & LT_CAP_RC_BATCH, LT_CAP_RC_BATCH);
    int o = th_hello(ag.sock, CAPS_SINGLES, &hr);
    ck_assert_uint_eq(hr.caps & LT_CAP_RC_BATCH, 0);

    struct data_seg d;
    data_seg_make(&d, 0x5eed0b);
    struct lt_segment_id seg = th_offer(c, d.fd, d.size, LT_CLASS_PINNED, 11);
    volatile uint64_t *words;
    struct lt_segment_id bseg = bell_seg_make(c, &words);

    enum { N = 37 };
    struct lt_lease_id ids[N + 2];
    for (uint32_t i = 0; i < N; i++) {
        uint64_t off = 4096 * (th_rand(&rng) % 200);
        struct lt_lease_grant_entry g = th_lease(c, seg, off, 4096, LT_CLASS_PINNED);
        ck_assert_uint_eq(g.status, LT_OK);
        ids[i] = g.lease;
    }
    /* one lease with doorbell-gated work, one already released (stale) */
    struct lt_lease_grant_entry gated = th_lease(c, seg, 0, d.size, LT_CLASS_PINNED);
    ck_assert_uint_eq(gated.status, LT_OK);
    struct lt_msg_submit s;
    checksum_submit(&s, gated.lease, &d);
    s.flags = LT_SUBMIT_F_WAIT_BELL;
    s.bell = (struct lt_word_ref){.segment = bseg, .offset = 0};
    s.bell_seq = 3;
    uint64_t srid = th_submit_send(c, &s);
    struct lt_lease_grant_entry gone = th_lease(c, seg, 4096, 4096, LT_CLASS_PINNED);
    uint64_t rid = th_release_send(c, gone.lease);
    th_expect(c, &buf, LT_MSG_RELEASE_COMPLETE_BATCH);
    ck_assert_uint_eq(buf.hdr.request_id, rid);
    ck_assert_uint_eq(
        ((const struct lt_msg_release_complete_batch *)(const void *)buf.bytes)->count, 1);
    ids[N] = gated.lease;
    ids[N + 1] = gone.lease;
    /* shuffle, so the batch's order is not the grant order */
    for (uint32_t i = N + 1; i > 0; i--) {
        uint32_t j = (uint32_t)(th_rand(&rng) % (i + 1));
        struct lt_lease_id t = ids[i];
        ids[i] = ids[j];
        ids[j] = t;
    }
    union lt_msg_buffer req;
    struct lt_msg_lease_release *rq = (void *)req.bytes;
    lt_msg_init(rq, sizeof *rq + (N + 2) * sizeof(struct lt_lease_id), LT_MSG_LEASE_RELEASE, 1);
    rq->count = N + 2;
    memcpy(rq->leases, ids, sizeof ids);
    rid = release_many_send(c, ids, N + 2);
    rq->hdr.request_id = rid;

    th_expect(c, &buf, LT_MSG_RELEASE_COMPLETE_BATCH);
    const struct lt_msg_release_complete_batch *b = (const void *)buf.bytes;
    ck_assert_uint_eq(b->hdr.request_id, rid);
    ck_assert_int_eq(lt_validate_reply_matches(rq, b), LT_OK);
    ck_assert_uint_eq(b->count, N + 1); /* all but the gated lease */
    uint32_t ok = 0, stale = 0;
    for (uint32_t k = 0; k < b->count; k++) {
        ck_assert(!lt_lease_id_eq(b->entries[k].lease, gated.lease));
        if (lt_lease_id_eq(b->entries[k].lease, gone.lease)) {
            ck_assert_uint_eq(b->entries[k].status, LT_E_STALE_ID);
            stale++;
        } else {
            ck_assert_uint_eq(b->entries[k].status, LT_OK);
            ok++;
        }
    }
    ck_assert_uint_eq(ok, N);
    ck_assert_uint_eq(stale, 1);
    th_expect_silence(c, 100);
    /* the gated lease completes after its work, on its own */
    __atomic_store_n(&words[0], 3, __ATOMIC_RELEASE);
    th_expect(c, &buf, LT_MSG_COMPLETION);
    ck_assert_uint_eq(buf.hdr.request_id, srid);
    th_expect(c, &buf, LT_MSG_RELEASE_COMPLETE);
    ck_assert_uint_eq(buf.hdr.request_id, rid);
    ck_assert(lt_lease_id_eq(
        ((const struct lt_msg_release_complete *)(const void *)buf.bytes)->lease, gated.lease));

    /* the same release from a client without the cap: one packet per lease */
    struct lt_segment_id oseg = th_offer(o, d.fd, d.size, LT_CLASS_PINNED, 12);
    enum { M = 9 };
    struct lt_lease_id oid[M];
    for (uint32_t i = 0; i < M; i++) {
        struct lt_lease_grant_entry g =
            th_lease(o, oseg, 4096 * (th_rand(&rng) % 200), 4096, LT_CLASS_PINNED);
        ck_assert_uint_eq(g.status, LT_OK);
        oid[i] = g.lease;
    }
    rid = release_many_send(o, oid, M);
    unsigned seen = 0;
    for (uint32_t i = 0; i < M; i++) {
        th_expect(o, &buf, LT_MSG_RELEASE_COMPLETE);
        const struct lt_msg_release_complete *rc = (const void *)buf.bytes;
        ck_assert_uint_eq(rc->hdr.request_id, rid);
        ck_assert_uint_eq(rc->status, LT_OK);
        for (uint32_t k = 0; k < M; k++)
            if (lt_lease_id_eq(rc->lease, oid[k]))
                seen |= 1u << k;
    }
    ck_assert_uint_eq(seen, (1u << M) - 1);
    th_expect_silence(o, 50);
    close(o);
    close(c);
    close(d.fd);
}
END_TEST

/* VECTOR_SCAN with k writes the k best records (kr_scan_topk's ranking)
 * into the lease at hits_offset before its COMPLETION; past the records
 * scanned the hits read "none"; k 0 leaves the lease alone; a hits range
 * outside the lease is refused. */
START_TEST(test_scan_writes_topk_hits_into_the_lease)
{
    union lt_msg_buffer buf;
    uint64_t rng = 0x70b4c;
    /* Hits into the lease need a lease the agent may write: without
     * F_SEAL_FUTURE_WRITE, which only --seals legacy leases (the sealed way,
     * hits into the words area, is test_server_words.c's). */
    struct th_agent la;
    const char *legacy[] = {"--seals", "legacy", NULL};
    th_agent_start(&la, NULL, legacy);
    int c = th_hello(la.sock, CAPS_SINGLES, NULL);
    void *p = NULL;
    int fd = th_memfd(MiB, TH_OLD_SEALS, 0x5eed70, &p);
    unsigned char *m = p;
    enum { DIM = 24, N = 300, QOFF = 32768, HOFF = 40960 };
    float *rec = (float *)(void *)m, *q = (float *)(void *)(m + QOFF);
    for (size_t i = 0; i < (size_t)N * DIM; i++)
        rec[i] = (float)((int64_t)(th_rand(&rng) % 2000001) - 1000000) / 1e6f;
    for (size_t i = 0; i < DIM; i++)
        q[i] = (float)((int64_t)(th_rand(&rng) % 2000001) - 1000000) / 1e6f;
    struct lt_segment_id seg = th_offer(c, fd, MiB, LT_CLASS_PINNED, 70);
    struct lt_lease_grant_entry g = th_lease(c, seg, 0, 64 * KiB, LT_CLASS_PINNED);
    ck_assert_uint_eq(g.status, LT_OK);

    const uint32_t ks[] = {17, 1, KN_SCAN_MAX_K};
    const uint64_t ns[] = {N, N, 10};
    for (size_t t = 0; t < 3; t++) {
        const uint32_t k = ks[t];
        memset(m + HOFF, 0xa5, KN_SCAN_MAX_K * sizeof(struct lt_scan_hit));
        struct lt_msg_submit sc = {.lease = g.lease, .op = LT_OP_VECTOR_SCAN};
        sc.args.scan = (struct lt_op_vector_scan){.offset = 0,
                                                  .length = ns[t] * DIM * 4,
                                                  .query_offset = QOFF,
                                                  .dim = DIM,
                                                  .elem = LT_ELEM_F32,
                                                  .metric = LT_SCAN_DOT,
                                                  .hits_offset = HOFF,
                                                  .k = k};
        uint64_t rid = th_submit_send(c, &sc);
        th_expect(c, &buf, LT_MSG_COMPLETION);
        ck_assert_uint_eq(buf.hdr.request_id, rid);
        const struct lt_msg_completion *cp = completion_of(&buf);
        ck_assert_uint_eq(cp->status, LT_OK);
        ck_assert_uint_eq(cp->result.scan.records_scanned, ns[t]);
        struct kn_scan_hit ref[KN_SCAN_MAX_K];
        long want = kr_scan_topk(rec, KN_SCAN_F32, ns[t], DIM, q, k, ref);
        ck_assert_int_eq(want, ns[t] < k ? (long)ns[t] : (long)k);
        ck_assert_uint_eq(cp->result.scan.best_index, ref[0].index);
        for (uint32_t i = 0; i < k; i++) {
            struct lt_scan_hit h;
            memcpy(&h, m + HOFF + (size_t)i * sizeof h, sizeof h);
            ck_assert_uint_eq(h.reserved, 0);
            if (i < (uint32_t)want) {
                ck_assert_uint_eq(h.index, ref[i].index);
                ck_assert(memcmp(&h.score_bits, &ref[i].score, 4) == 0);
            } else {
                ck_assert_uint_eq(h.index, LT_BLOCK_NONE);
                ck_assert_uint_eq(h.score_bits, 0);
            }
        }
        /* nothing past the k hits is touched */
        if (k < KN_SCAN_MAX_K)
            ck_assert_uint_eq(m[HOFF + (size_t)k * sizeof(struct lt_scan_hit)], 0xa5);
    }

    /* k 0: the single best only, the hits area untouched */
    memset(m + HOFF, 0xa5, 16);
    struct lt_msg_submit sc = {.lease = g.lease, .op = LT_OP_VECTOR_SCAN};
    sc.args.scan = (struct lt_op_vector_scan){.offset = 0,
                                              .length = (uint64_t)N * DIM * 4,
                                              .query_offset = QOFF,
                                              .dim = DIM,
                                              .elem = LT_ELEM_F32,
                                              .metric = LT_SCAN_DOT};
    uint64_t rid = th_submit_send(c, &sc);
    th_expect(c, &buf, LT_MSG_COMPLETION);
    ck_assert_uint_eq(buf.hdr.request_id, rid);
    ck_assert_uint_eq(completion_of(&buf)->status, LT_OK);
    ck_assert_uint_eq(m[HOFF], 0xa5);

    /* hits that would run past the lease's 64 KiB */
    sc.args.scan.k = 2;
    sc.args.scan.hits_offset = 64 * KiB - 24;
    rid = th_submit_send(c, &sc);
    th_expect_error(c, &buf, rid, LT_E_OUT_OF_RANGE);
    munmap(p, MiB);
    close(c);
    close(fd);
    ck_assert_int_eq(th_agent_stop(&la), 0);
    th_agent_cleanup(&la);
}
END_TEST

START_TEST(test_streams_and_events_order_work)
{
    union lt_msg_buffer buf;
    struct lt_event_id none = {0, 0};
    struct lt_stream_id dflt = {0, 0};
    int c = th_hello(ag.sock, CAPS_SINGLES, NULL);
    struct data_seg d;
    data_seg_make(&d, 0x5eed03);
    struct lt_segment_id seg = th_offer(c, d.fd, d.size, LT_CLASS_PINNED, 2);
    volatile uint64_t *words;
    struct lt_segment_id bseg = bell_seg_make(c, &words);
    struct lt_lease_grant_entry g = th_lease(c, seg, 0, d.size, LT_CLASS_PINNED);

    struct lt_stream_id st =
        th_ctl(c, LT_MSG_STREAM_CREATE, dflt, none, none, LT_STREAM_F_NONBLOCKING, &buf)->stream;
    ck_assert(lt_stream_id_is_issued(st));
    struct lt_event_id e1 =
        th_ctl(c, LT_MSG_EVENT_RECORD, st, none, none, LT_EVENT_F_TIMING, &buf)->event;
    struct lt_msg_submit s;
    checksum_submit(&s, g.lease, &d);
    s.stream = st;
    s.flags = LT_SUBMIT_F_WAIT_BELL;
    s.bell = (struct lt_word_ref){.segment = bseg, .offset = 128};
    s.bell_seq = 1;
    uint64_t srid = th_submit_send(c, &s);
    struct lt_event_id e2 =
        th_ctl(c, LT_MSG_EVENT_RECORD, st, none, none, LT_EVENT_F_TIMING, &buf)->event;
    ck_assert(!lt_event_id_eq(e1, e2));
    ck_assert_uint_eq(th_ctl(c, LT_MSG_EVENT_QUERY, dflt, e2, none, 0, &buf)->ready, 0);
    ck_assert_uint_eq(th_ctl(c, LT_MSG_STREAM_QUERY, st, none, none, 0, &buf)->ready, 0);
    ck_assert_uint_eq(th_ctl(c, LT_MSG_STREAM_QUERY, dflt, none, none, 0, &buf)->ready, 1);
    /* e1 must be stamped before the silence starts: a worker slowed down by
     * a loaded machine could otherwise stamp it inside the silence. */
    int e1_ready = 0;
    for (int i = 0; i < 2000 && !e1_ready; i++) {
        e1_ready = th_ctl(c, LT_MSG_EVENT_QUERY, dflt, e1, none, 0, &buf)->ready;
        if (!e1_ready)
            usleep(1000);
    }
    ck_assert_msg(e1_ready, "event e1, recorded before the gated submit, never completed");
    uint64_t sync = th_ctl_send(c, LT_MSG_EVENT_SYNCHRONIZE, dflt, e2, none, 0);
    uint64_t ssync = th_ctl_send(c, LT_MSG_STREAM_SYNCHRONIZE, st, none, none, 0);
    th_expect_silence(c, 100);

    /* Another client cannot touch these ids. */
    int o = th_hello(ag.sock, 0, NULL);
    uint64_t rid = th_ctl_send(o, LT_MSG_EVENT_QUERY, dflt, e1, none, 0);
    th_expect_error(o, &buf, rid, LT_E_NOT_OWNER);
    rid = th_ctl_send(o, LT_MSG_STREAM_QUERY, st, none, none, 0);
    th_expect_error(o, &buf, rid, LT_E_NOT_OWNER);
    close(o);

    __atomic_store_n(&words[16], 1, __ATOMIC_RELEASE);
    th_expect(c, &buf, LT_MSG_COMPLETION);
    ck_assert_uint_eq(buf.hdr.request_id, srid);
    uint64_t got[2];
    for (int i = 0; i < 2; i++) {
        th_expect(c, &buf, LT_MSG_CTL_REPLY);
        got[i] = buf.hdr.request_id;
    }
    ck_assert((got[0] == sync && got[1] == ssync) || (got[0] == ssync && got[1] == sync));
    ck_assert_uint_eq(th_ctl(c, LT_MSG_EVENT_QUERY, dflt, e2, none, 0, &buf)->ready, 1);
    float ms =
        lt_f32_from_bits(th_ctl(c, LT_MSG_EVENT_ELAPSED, dflt, e1, e2, 0, &buf)->elapsed_ms_bits);
    ck_assert(ms >= 100.0f); /* e2 waited for the bell rung after the silence */
    ck_assert(ms < 60000.0f);
    th_ctl(c, LT_MSG_DEVICE_SYNCHRONIZE, dflt, none, none, 0, &buf);
    th_ctl(c, LT_MSG_STREAM_VALIDATE, st, none, none, 0, &buf);
    th_ctl(c, LT_MSG_STREAM_DESTROY, st, none, none, 0, &buf);
    rid = th_ctl_send(c, LT_MSG_STREAM_QUERY, st, none, none, 0);
    th_expect_error(c, &buf, rid, LT_E_STALE_ID);
    th_ctl(c, LT_MSG_EVENT_DESTROY, dflt, e1, none, 0, &buf);
    rid = th_ctl_send(c, LT_MSG_EVENT_ELAPSED, dflt, e1, e2, 0);
    th_expect_error(c, &buf, rid, LT_E_STALE_ID);
    rid = th_ctl_send(c, LT_MSG_STREAM_QUERY, (struct lt_stream_id){4000, 1}, none, none, 0);
    th_expect_error(c, &buf, rid, LT_E_NOT_FOUND);
    close(c);
    close(d.fd);
}
END_TEST

START_TEST(test_all_or_nothing_grants_nothing_on_one_refusal)
{
    union lt_msg_buffer buf;
    int c = th_hello(ag.sock, 0, NULL);
    int fd = th_memfd(64 * KiB, TH_GOOD_SEALS, 3, NULL);
    struct lt_segment_id seg = th_offer(c, fd, 64 * KiB, LT_CLASS_PINNED, 3);
    union {
        uint64_t a;
        unsigned char
            b[sizeof(struct lt_msg_lease_request) + 3 * sizeof(struct lt_lease_req_entry)];
    } req;
    struct lt_msg_lease_request *r = (void *)req.b;
    lt_msg_init(r, sizeof req.b, LT_MSG_LEASE_REQUEST, th_rid());
    r->count = 3;
    r->flags = LT_LEASE_REQ_F_ALL_OR_NOTHING;
    for (int i = 0; i < 3; i++)
        r->entries[i] = (struct lt_lease_req_entry){.segment = seg,
                                                    .offset = (uint64_t)i * 8 * KiB,
                                                    .length = 8 * KiB,
                                                    .mem_class = LT_CLASS_PINNED};
    r->entries[1].offset = 60 * KiB; /* runs past the 64 KiB segment */
    ck_assert_int_eq(th_send(c, r, sizeof req.b, NULL, 0), 0);
    const struct lt_msg_error *e = th_expect_error(c, &buf, r->hdr.request_id, LT_E_OUT_OF_RANGE);
    ck_assert_uint_eq(e->index, 1);
    th_stats(c, 0, &buf);
    ck_assert_uint_eq(((const struct lt_msg_stats_reply *)(const void *)buf.bytes)
                          ->classes[LT_CLASS_PINNED]
                          .live_leases,
                      0);

    /* Without the flag each entry stands alone; a PINNED segment serves
     * a STAGED lease but not a MAPPED one. */
    r->flags = 0;
    r->entries[2].mem_class = LT_CLASS_MAPPED;
    r->entries[0].mem_class = LT_CLASS_STAGED;
    r->hdr.request_id = th_rid();
    ck_assert_int_eq(th_send(c, r, sizeof req.b, NULL, 0), 0);
    th_expect(c, &buf, LT_MSG_LEASE_GRANT);
    const struct lt_msg_lease_grant *g = (const void *)buf.bytes;
    ck_assert_uint_eq(g->count, 3);
    ck_assert_uint_eq(g->entries[0].status, LT_OK);
    ck_assert_uint_eq(g->entries[0].mem_class, LT_CLASS_STAGED);
    ck_assert_uint_eq(g->entries[1].status, LT_E_OUT_OF_RANGE);
    ck_assert_uint_eq(g->entries[2].status, LT_E_BAD_CLASS);

    /* Over the PINNED budget (4 MiB): refused with the numbers. */
    int big = th_memfd(8 * MiB, TH_GOOD_SEALS, 4, NULL);
    uint64_t rid = th_offer_send(c, &big, 1, 8 * MiB, LT_CLASS_PINNED);
    e = th_expect_error(c, &buf, rid, LT_E_BUDGET);
    ck_assert_ptr_nonnull(strstr(e->message, "4194304"));
    close(big);
    close(fd);
    close(c);
}
END_TEST

/* ---- bad input ----------------------------------------------------------- */

START_TEST(test_foreign_stale_and_out_of_range_ids_are_refused)
{
    union lt_msg_buffer buf;
    int a = th_hello(ag.sock, CAPS_SINGLES, NULL);
    int b = th_hello(ag.sock, CAPS_SINGLES, NULL);
    struct data_seg d;
    data_seg_make(&d, 0x5eed04);
    struct lt_segment_id seg = th_offer(a, d.fd, d.size, LT_CLASS_PINNED, 4);
    volatile uint64_t *words;
    struct lt_segment_id bseg = bell_seg_make(a, &words);
    struct lt_lease_grant_entry g = th_lease(a, seg, 0, d.size, LT_CLASS_PINNED);
    struct lt_msg_submit s;
    checksum_submit(&s, g.lease, &d);

    /* b names a's lease, segment and bell: refused as not its own. */
    uint64_t rid = th_submit_send(b, &s);
    th_expect_error(b, &buf, rid, LT_E_NOT_OWNER);
    rid = th_release_send(b, g.lease);
    th_expect(b, &buf, LT_MSG_RELEASE_COMPLETE);
    ck_assert_uint_eq(buf.hdr.request_id, rid);
    ck_assert_uint_eq(((const struct lt_msg_release_complete *)(const void *)buf.bytes)->status,
                      LT_E_NOT_OWNER);
    ck_assert_uint_eq(th_lease(b, seg, 0, 4096, LT_CLASS_PINNED).status, LT_E_NOT_OWNER);
    struct lt_msg_segment_retire rt;
    lt_msg_init(&rt, sizeof rt, LT_MSG_SEGMENT_RETIRE, th_rid());
    rt.segment = seg;
    ck_assert_int_eq(th_send(b, &rt, sizeof rt, NULL, 0), 0);
    th_expect_error(b, &buf, rt.hdr.request_id, LT_E_NOT_OWNER);
    int bfd = th_memfd(64 * KiB, TH_GOOD_SEALS, 5, NULL);
    struct lt_segment_id bs = th_offer(b, bfd, 64 * KiB, LT_CLASS_PINNED, 5);
    struct lt_lease_grant_entry bg = th_lease(b, bs, 0, 64 * KiB, LT_CLASS_PINNED);
    struct lt_msg_submit sb = {.lease = bg.lease, .op = LT_OP_COPY_H2D};
    sb.args.copy.length = 4096;
    sb.flags = LT_SUBMIT_F_WAIT_BELL;
    sb.bell = (struct lt_word_ref){.segment = bseg, .offset = 0};
    sb.bell_seq = 1;
    rid = th_submit_send(b, &sb);
    th_expect_error(b, &buf, rid, LT_E_NOT_OWNER);

    /* a's own bell word must lie in a MAPPED segment, inside it. */
    struct lt_msg_submit sa = s;
    sa.flags = LT_SUBMIT_F_WAIT_BELL;
    sa.bell = (struct lt_word_ref){.segment = seg, .offset = 0};
    sa.bell_seq = 1;
    rid = th_submit_send(a, &sa);
    th_expect_error(a, &buf, rid, LT_E_BAD_CLASS);
    sa.bell = (struct lt_word_ref){.segment = bseg, .offset = 4096};
    rid = th_submit_send(a, &sa);
    th_expect_error(a, &buf, rid, LT_E_OUT_OF_RANGE);
    sa.bell = (struct lt_word_ref){.segment = {9999, 1}, .offset = 0};
    rid = th_submit_send(a, &sa);
    th_expect_error(a, &buf, rid, LT_E_NOT_FOUND);

    /* Ranges outside the lease or the segment. */
    sa = s;
    sa.args.checksum.sums_offset = d.size - 8; /* 64 sums from here run past the lease */
    rid = th_submit_send(a, &sa);
    th_expect_error(a, &buf, rid, LT_E_OUT_OF_RANGE);
    struct lt_lease_grant_entry small = th_lease(a, seg, 0, 4096, LT_CLASS_PINNED);
    ck_assert_uint_eq(small.status, LT_OK);
    struct lt_msg_submit cp = {.lease = small.lease, .op = LT_OP_COPY_H2D};
    cp.args.copy.offset = 4000;
    cp.args.copy.length = 97;
    rid = th_submit_send(a, &cp);
    th_expect_error(a, &buf, rid, LT_E_OUT_OF_RANGE);
    ck_assert_uint_eq(th_lease(a, seg, d.size - 4096, 8192, LT_CLASS_PINNED).status,
                      LT_E_OUT_OF_RANGE);
    ck_assert_uint_eq(
        th_lease(a, (struct lt_segment_id){seg.slot, seg.gen + 5}, 0, 4096, LT_CLASS_PINNED).status,
        LT_E_NOT_FOUND);
    rid = th_submit_send(a, &(struct lt_msg_submit){.lease = {small.lease.slot + 1000, 1},
                                                    .op = LT_OP_COPY_H2D,
                                                    .args.copy.length = 8});
    th_expect_error(a, &buf, rid, LT_E_NOT_FOUND);

    /* Stale lease generation: release, let the slot be reused, use the old id. */
    rid = th_release_send(a, small.lease);
    th_expect(a, &buf, LT_MSG_RELEASE_COMPLETE);
    struct lt_lease_grant_entry again = th_lease(a, seg, 0, 4096, LT_CLASS_PINNED);
    ck_assert_uint_eq(again.status, LT_OK);
    cp.args.copy.offset = 0;
    cp.args.copy.length = 8;
    rid = th_submit_send(a, &cp);
    th_expect_error(a, &buf, rid, LT_E_STALE_ID);

    /* After all that, a's first lease still works. */
    rid = th_submit_send(a, &s);
    th_expect(a, &buf, LT_MSG_COMPLETION);
    ck_assert_uint_eq(buf.hdr.request_id, rid);
    ck_assert_uint_eq(completion_of(&buf)->status, LT_OK);
    close(bfd);
    close(a);
    close(b);
    close(d.fd);
}
END_TEST

START_TEST(test_wrong_fd_counts_are_refused_and_closed)
{
    union lt_msg_buffer buf;
    int c = th_hello(ag.sock, 0, NULL);
    int base = th_fd_count(ag.pid);
    int p[2];
    ck_assert_int_eq(pipe(p), 0);

    struct lt_msg_stats_request s;
    lt_msg_init(&s, sizeof s, LT_MSG_STATS_REQUEST, th_rid());
    ck_assert_int_eq(th_send(c, &s, sizeof s, &p[0], 1), 0);
    const struct lt_msg_error *e = th_expect_error(c, &buf, s.hdr.request_id, LT_E_FD_COUNT);
    ck_assert_uint_eq(e->failed_type, LT_MSG_STATS_REQUEST);

    uint64_t rid = th_offer_send(c, NULL, 0, 64 * KiB, LT_CLASS_STAGED);
    th_expect_error(c, &buf, rid, LT_E_FD_COUNT);
    int m1 = th_memfd(64 * KiB, TH_GOOD_SEALS, 6, NULL);
    int m2 = th_memfd(64 * KiB, TH_GOOD_SEALS, 7, NULL);
    int two[2] = {m1, m2};
    rid = th_offer_send(c, two, 2, 64 * KiB, LT_CLASS_STAGED);
    th_expect_error(c, &buf, rid, LT_E_FD_COUNT);
    th_stats(c, 0, &buf); /* still served */
    ck_assert_int_eq(th_fd_count(ag.pid), base);

    /* More fds than the control buffer holds: truncated, so disconnected. */
    int d = th_connect(ag.sock);
    int many[20];
    for (int i = 0; i < 20; i++)
        many[i] = p[i % 2];
    lt_msg_init(&s, sizeof s, LT_MSG_STATS_REQUEST, th_rid());
    ck_assert_int_eq(th_send(d, &s, sizeof s, many, 20), 0);
    th_expect_error(d, &buf, 0, LT_E_FD_COUNT);
    ck_assert_int_eq(th_expect_eof(d), 0);
    close(d);
    for (int i = 0; i < 500 && th_fd_count(ag.pid) != base; i++)
        usleep(10000);
    ck_assert_int_eq(th_fd_count(ag.pid), base);
    th_stats(c, 0, &buf);
    close(m1);
    close(m2);
    close(p[0]);
    close(p[1]);
    close(c);
}
END_TEST

START_TEST(test_bad_segment_fds_are_refused_with_their_reason)
{
    union lt_msg_buffer buf;
    int c = th_hello(ag.sock, 0, NULL);
    int base = th_fd_count(ag.pid);
    const uint64_t sz = 64 * KiB;
    struct fd_case {
        const char *what;
        int fd;
        uint32_t code;
        const char *needle; /* the lease service's words, passed through unchanged */
    } cases[10];
    int n = 0;
    int good = th_memfd(sz, TH_GOOD_SEALS, 8, NULL);
    char path[256];

    cases[n++] = (struct fd_case){"unsealed memfd", th_memfd(sz, 0, 9, NULL), LT_E_SEGMENT_UNSEALED,
                                  "segment fd: missing seals"};
    cases[n++] =
        (struct fd_case){"short memfd", th_memfd(sz / 2, TH_GOOD_SEALS, 10, NULL),
                         LT_E_SEGMENT_SIZE, "segment fd: claimed size 65536 bytes, found 32768"};
    cases[n++] =
        (struct fd_case){"write-sealed memfd", th_memfd(sz, TH_GOOD_SEALS | F_SEAL_WRITE, 11, NULL),
                         LT_E_SEGMENT_UNSEALED, "found a write seal"};
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    cases[n++] = (struct fd_case){"pipe", p[0], LT_E_SEGMENT_UNSEALED, "found a pipe or FIFO"};
    int sp[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
    cases[n++] = (struct fd_case){"socket", sp[0], LT_E_SEGMENT_UNSEALED, "found a socket"};
    snprintf(path, sizeof path, "%s/regular", ag.dir);
    int reg = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(reg, 0);
    ck_assert_int_eq(ftruncate(reg, (off_t)sz), 0);
    cases[n++] =
        (struct fd_case){"regular file", reg, LT_E_SEGMENT_UNSEALED, "found a regular file"};
    snprintf(path, sizeof path, "/proc/self/fd/%d", good);
    cases[n++] = (struct fd_case){"O_PATH fd", open(path, O_PATH), LT_E_SEGMENT_UNSEALED,
                                  "found an O_PATH descriptor"};
    cases[n++] = (struct fd_case){"read-only memfd", open(path, O_RDONLY), LT_E_SEGMENT_UNSEALED,
                                  "found read-only"};
    cases[n++] = (struct fd_case){"directory", open(ag.dir, O_RDONLY | O_DIRECTORY),
                                  LT_E_SEGMENT_UNSEALED, "found a directory"};
    for (int i = 0; i < n; i++) {
        ck_assert_msg(cases[i].fd >= 0, "%s: could not make the fd", cases[i].what);
        uint64_t rid = th_offer_send(c, &cases[i].fd, 1, sz, LT_CLASS_PINNED);
        th_expect(c, &buf, LT_MSG_ERROR);
        const struct lt_msg_error *e = (const void *)buf.bytes;
        ck_assert_msg(e->code == cases[i].code, "%s: expected %s, found %s: %s", cases[i].what,
                      lt_error_name(cases[i].code), lt_error_name(e->code), e->message);
        ck_assert_msg(strstr(e->message, cases[i].needle) != NULL, "%s: expected '%s' in: %s",
                      cases[i].what, cases[i].needle, e->message);
        ck_assert_uint_eq(buf.hdr.request_id, rid);
        close(cases[i].fd);
    }
    /* The agent kept none of them, and still takes a good one. */
    ck_assert_int_eq(th_fd_count(ag.pid), base);
    th_offer(c, good, sz, LT_CLASS_PINNED, 8);
    ck_assert_int_eq(th_fd_count(ag.pid), base + 1);
    close(good);
    close(p[1]);
    close(sp[1]);
    close(c);
}
END_TEST

/* One connection, one packet of garbage: an ERROR (if the bytes had a
 * header's worth) and a disconnect, or a field-level ERROR on a live link. */
START_TEST(test_random_bytes_get_errors_and_never_hurt_others)
{
    union lt_msg_buffer buf;
    int by = th_hello(ag.sock, 0, NULL);
    int base = th_fd_count(ag.pid);
    uint64_t seed = 0x9a7ba9e5ull;
    static unsigned char junk[LT_MSG_MAX_BYTES + 1024];
    for (int i = 0; i < 150; i++) {
        int c = th_connect(ag.sock);
        size_t len = (size_t)(th_rand(&seed) % sizeof junk);
        if (i % 10 == 0)
            len = 0;
        th_fill(junk, len, th_rand(&seed));
        if (i % 3 == 1 && len >= sizeof(struct lt_header)) {
            /* A plausible header over random fields reaches the validators. */
            struct lt_header h;
            lt_header_init(&h, (uint16_t)(th_rand(&seed) % 32), (uint32_t)len, th_rand(&seed) | 1);
            memcpy(junk, &h, sizeof h);
        }
        ck_assert_int_eq(th_send(c, junk, len, NULL, 0), 0);
        ssize_t n = th_recv(c, &buf, TH_TIMEOUT_MS);
        ck_assert_msg(n >= 0, "iteration %d (%zu bytes): no answer", i, len);
        if (n > 0) {
            ck_assert_uint_eq(buf.hdr.type, LT_MSG_ERROR);
            uint32_t code = ((const struct lt_msg_error *)(const void *)buf.bytes)->code;
            if (code <= LT_E_BAD_REQUEST_ID)
                ck_assert_int_eq(th_expect_eof(c), 0);
            else /* well framed; a field or the handshake refused it */
                ck_assert_msg(code >= LT_E_RESERVED_NONZERO, "code %s", lt_error_name(code));
        }
        close(c);
    }
    th_stats(by, LT_STATS_F_ALL_CLIENTS, &buf);
    for (int i = 0; i < 500 && th_fd_count(ag.pid) != base; i++)
        usleep(10000);
    ck_assert_int_eq(th_fd_count(ag.pid), base);
    close(by);
}
END_TEST

/* Valid requests with random bytes flipped past the header, on a client that
 * has a segment, a lease and a stream: every answer is a valid message, and
 * the agent keeps serving. */
START_TEST(test_mutated_requests_get_valid_answers)
{
    union lt_msg_buffer buf;
    uint64_t seed = 0x0ddba11ull;
    int c = th_hello(ag.sock, CAPS_SINGLES, NULL);
    struct data_seg d;
    data_seg_make(&d, 0x5eed05);
    struct lt_segment_id seg = th_offer(c, d.fd, d.size, LT_CLASS_PINNED, 5);
    struct lt_lease_grant_entry g = th_lease(c, seg, 0, d.size, LT_CLASS_PINNED);
    struct lt_msg_submit s;
    checksum_submit(&s, g.lease, &d);
    union {
        uint64_t a;
        unsigned char b[LT_MSG_MAX_BYTES];
    } t;
    for (int i = 0; i < 300; i++) {
        size_t len;
        switch (i % 4) {
        case 0:
            s.hdr.request_id = th_rid();
            lt_header_init(&s.hdr, LT_MSG_SUBMIT, sizeof s, th_rid());
            memcpy(t.b, &s, sizeof s);
            len = sizeof s;
            break;
        case 1: {
            struct lt_msg_event_cmd e;
            lt_msg_init(&e, sizeof e, LT_MSG_EVENT_RECORD, th_rid());
            memcpy(t.b, &e, sizeof e);
            len = sizeof e;
            break;
        }
        case 2: {
            struct lt_msg_stream_cmd e;
            lt_msg_init(&e, sizeof e, LT_MSG_STREAM_QUERY, th_rid());
            memcpy(t.b, &e, sizeof e);
            len = sizeof e;
            break;
        }
        default: {
            struct lt_msg_lease_request *r = (void *)t.b;
            len = sizeof *r + sizeof r->entries[0];
            lt_msg_init(r, len, LT_MSG_LEASE_REQUEST, th_rid());
            r->count = 1;
            r->entries[0] = (struct lt_lease_req_entry){
                .segment = seg, .offset = 8192, .length = 4096, .mem_class = LT_CLASS_STAGED};
            break;
        }
        }
        int flips = 1 + (int)(th_rand(&seed) % 3);
        for (int k = 0; k < flips; k++)
            t.b[24 + th_rand(&seed) % (len - 24)] ^= (unsigned char)(1u << (th_rand(&seed) % 8));
        ck_assert_int_eq(th_send(c, t.b, len, NULL, 0), 0);
        /* A barrier: every message before its reply must validate. */
        struct lt_msg_stats_request st;
        lt_msg_init(&st, sizeof st, LT_MSG_STATS_REQUEST, th_rid());
        if (th_send(c, &st, sizeof st, NULL, 0) < 0) {
            close(c);
            c = th_hello(ag.sock, 0, NULL);
            continue;
        }
        for (;;) {
            ssize_t n = th_recv(c, &buf, TH_TIMEOUT_MS);
            ck_assert_int_ne(n, -ETIMEDOUT);
            if (n <= 0) { /* a framing error: reconnect */
                close(c);
                c = th_hello(ag.sock, 0, NULL);
                break;
            }
            if (buf.hdr.type == LT_MSG_STATS_REPLY && buf.hdr.request_id == st.hdr.request_id)
                break;
        }
    }
    th_stats(c, 0, &buf);
    close(c);
    close(d.fd);
}
END_TEST

START_TEST(test_oversized_packet_is_refused_then_disconnected)
{
    union lt_msg_buffer buf;
    int by = th_hello(ag.sock, 0, NULL);
    int c = th_hello(ag.sock, 0, NULL);
    static unsigned char big[LT_MSG_MAX_BYTES + 100];
    struct lt_header h;
    lt_header_init(&h, LT_MSG_LEASE_REQUEST, sizeof big, th_rid());
    memcpy(big, &h, sizeof h);
    ck_assert_int_eq(th_send(c, big, sizeof big, NULL, 0), 0);
    const struct lt_msg_error *e = th_expect_error(c, &buf, 0, LT_E_BAD_LENGTH);
    ck_assert_uint_eq(e->failed_type, 0);
    ck_assert_int_eq(th_expect_eof(c), 0);
    close(c);
    th_stats(by, 0, &buf);
    close(by);
}
END_TEST

/* ---- peer death ---------------------------------------------------------- */

static void stats_classes(int fd, uint64_t out[LT_CLASS_SLOTS][3], uint32_t *clients_p)
{
    union lt_msg_buffer buf;
    th_stats(fd, LT_STATS_F_ALL_CLIENTS, &buf);
    const struct lt_msg_stats_reply *r = (const void *)buf.bytes;
    for (int k = 0; k < LT_CLASS_SLOTS; k++) {
        out[k][0] = r->classes[k].segments;
        out[k][1] = r->classes[k].live_leases;
        out[k][2] = r->classes[k].bytes_registered;
    }
    *clients_p = r->client_count;
}

START_TEST(test_killed_client_leaves_nothing_behind)
{
    int w = th_hello(ag.sock, 0, NULL);
    uint64_t base[LT_CLASS_SLOTS][3], now[LT_CLASS_SLOTS][3];
    uint32_t clients = 0;
    stats_classes(w, base, &clients);
    ck_assert_uint_eq(clients, 1);
    int base_fds = th_fd_count(ag.pid);
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        close(p[0]);
        int c = th_hello(ag.sock, CAPS_SINGLES, NULL);
        struct data_seg d;
        data_seg_make(&d, 0x5eed06);
        struct lt_segment_id seg = th_offer(c, d.fd, d.size, LT_CLASS_PINNED, 6);
        volatile uint64_t *words;
        struct lt_segment_id bseg = bell_seg_make(c, &words);
        int mfd = th_memfd(4096, TH_GOOD_SEALS, 0x5eed07, NULL);
        struct lt_segment_id mseg = th_offer(c, mfd, 4096, LT_CLASS_MAPPED, 0x3a9);
        struct lt_lease_grant_entry g = th_lease(c, seg, 0, d.size, LT_CLASS_PINNED);
        struct lt_lease_grant_entry gm = th_lease(c, mseg, 1024, 1024, LT_CLASS_MAPPED);
        if (g.status != LT_OK || gm.status != LT_OK)
            _exit(3);
        struct lt_msg_submit s;
        checksum_submit(&s, g.lease, &d);
        s.flags = LT_SUBMIT_F_WAIT_BELL;
        s.bell = (struct lt_word_ref){.segment = bseg, .offset = 0};
        s.bell_seq = 1; /* never rung */
        th_submit_send(c, &s);
        union lt_msg_buffer buf;
        struct lt_event_id none = {0, 0};
        th_ctl(c, LT_MSG_STREAM_CREATE, (struct lt_stream_id){0, 0}, none, none, 0, &buf);
        th_ctl(c, LT_MSG_EVENT_RECORD, (struct lt_stream_id){0, 0}, none, none, 0, &buf);
        if (write(p[1], "r", 1) != 1)
            _exit(4);
        for (;;)
            pause();
    }
    close(p[1]);
    struct pollfd pfd = {.fd = p[0], .events = POLLIN};
    char ch = 0;
    ck_assert_int_eq(poll(&pfd, 1, TH_TIMEOUT_MS), 1);
    ck_assert_int_eq(read(p[0], &ch, 1), 1);
    close(p[0]);
    stats_classes(w, now, &clients);
    ck_assert_uint_eq(clients, 2);
    ck_assert_uint_eq(now[LT_CLASS_PINNED][0], base[LT_CLASS_PINNED][0] + 1);
    ck_assert_uint_eq(now[LT_CLASS_PINNED][1], 1);
    ck_assert_uint_eq(now[LT_CLASS_MAPPED][1], 1);
    ck_assert_int_gt(th_fd_count(ag.pid), base_fds);

    ck_assert_int_eq(kill(child, SIGKILL), 0);
    ck_assert_int_eq(waitpid(child, NULL, 0), child);
    bool back = false;
    for (int i = 0; i < 1000 && !back; i++) {
        stats_classes(w, now, &clients);
        back =
            clients == 1 && memcmp(now, base, sizeof now) == 0 && th_fd_count(ag.pid) == base_fds;
        if (!back)
            usleep(10000);
    }
    ck_assert_msg(back,
                  "after the kill: clients %u, PINNED segments %" PRIu64 " leases %" PRIu64
                  ", MAPPED segments %" PRIu64 " leases %" PRIu64 ", fds %d (base %d)",
                  clients, now[LT_CLASS_PINNED][0], now[LT_CLASS_PINNED][1],
                  now[LT_CLASS_MAPPED][0], now[LT_CLASS_MAPPED][1], th_fd_count(ag.pid), base_fds);
    ck_assert_uint_eq(now[LT_CLASS_PINNED][2], base[LT_CLASS_PINNED][2]);
    ck_assert(th_file_wait_for(ag.log, "drained", 1000));
    close(w);
}
END_TEST

/* ---- the process --------------------------------------------------------- */

START_TEST(test_second_live_agent_on_the_path_is_refused)
{
    char log2[160], needle[256];
    snprintf(log2, sizeof log2, "%s/second.log", ag.dir);
    const char *args[] = {LEASE_AGENT_HOST,  "--socket", ag.sock, "--pinned-budget", "1M",
                          "--mapped-budget", "1M",       NULL};
    ck_assert_int_ne(th_agent_run_once(args, log2), 0);
    snprintf(needle, sizeof needle, "another lease agent (pid %ld) is serving %s", (long)ag.pid,
             ag.sock);
    ck_assert_msg(th_file_wait_for(log2, needle, 1000), "no '%s' in %s", needle, log2);
    close(th_hello(ag.sock, 0, NULL)); /* the first one still serves */
}
END_TEST

START_TEST(test_sigusr1_logs_stats)
{
    int c = th_hello(ag.sock, 0, NULL);
    ck_assert_int_eq(kill(ag.pid, SIGUSR1), 0);
    ck_assert(th_file_wait_for(ag.log, "lease stats: clients=1", TH_TIMEOUT_MS));
    ck_assert(th_file_wait_for(ag.log, "host executor: workers=2", TH_TIMEOUT_MS));
    ck_assert(th_file_wait_for(ag.log, "name 'th-client'", TH_TIMEOUT_MS));
    close(c);
}
END_TEST

START_TEST(test_sigterm_cancels_waiting_work_and_removes_files)
{
    union lt_msg_buffer buf;
    int c = th_hello(ag.sock, CAPS_SINGLES, NULL);
    struct data_seg d;
    data_seg_make(&d, 0x5eed07);
    struct lt_segment_id seg = th_offer(c, d.fd, d.size, LT_CLASS_PINNED, 7);
    volatile uint64_t *words;
    struct lt_segment_id bseg = bell_seg_make(c, &words);
    struct lt_lease_grant_entry g = th_lease(c, seg, 0, d.size, LT_CLASS_PINNED);
    struct lt_msg_submit s;
    checksum_submit(&s, g.lease, &d);
    s.flags = LT_SUBMIT_F_WAIT_BELL | LT_SUBMIT_F_SIGNAL_DONE;
    s.bell = (struct lt_word_ref){.segment = bseg, .offset = 0};
    s.bell_seq = 1;
    s.done = (struct lt_word_ref){.segment = bseg, .offset = 8};
    s.done_seq = 5;
    uint64_t rid = th_submit_send(c, &s);
    th_expect_silence(c, 50);
    ck_assert_int_eq(th_agent_stop(&ag), 0);
    th_expect(c, &buf, LT_MSG_COMPLETION);
    ck_assert_uint_eq(buf.hdr.request_id, rid);
    ck_assert_uint_eq(completion_of(&buf)->status, LT_E_SHUTTING_DOWN);
    ck_assert_uint_eq(words[1], 0); /* cancelled work never ran */
    ck_assert_int_eq(th_expect_eof(c), 0);
    struct stat st;
    char lock[160];
    snprintf(lock, sizeof lock, "%s.lock", ag.sock);
    ck_assert_int_ne(stat(ag.sock, &st), 0);
    ck_assert_int_ne(stat(lock, &st), 0);
    ck_assert(th_file_wait_for(ag.log, "stopped:", 100));
    close(c);
    close(d.fd);
}
END_TEST

/* No fixture: the socket path holds leftovers of a dead agent. */
START_TEST(test_stale_socket_is_replaced_and_other_files_are_not)
{
    struct th_agent a;
    char dir[64] = "/tmp/ga-stale-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char sock[128], lock[160], log[160];
    snprintf(sock, sizeof sock, "%s/agent.sock", dir);
    snprintf(lock, sizeof lock, "%s.lock", sock);
    snprintf(log, sizeof log, "%s/refused.log", dir);

    /* A regular file where the socket goes: refused, left alone. */
    int f = open(sock, O_WRONLY | O_CREAT, 0600);
    ck_assert_int_ge(f, 0);
    close(f);
    const char *args[] = {LEASE_AGENT_HOST,  "--socket", sock, "--pinned-budget", "1M",
                          "--mapped-budget", "1M",       NULL};
    ck_assert_int_ne(th_agent_run_once(args, log), 0);
    ck_assert(th_file_wait_for(log, "not removing it", 1000));
    struct stat st;
    ck_assert_int_eq(stat(sock, &st), 0);
    ck_assert(S_ISREG(st.st_mode));
    unlink(sock);
    unlink(log);

    /* A socket nobody listens on, and a lock file nobody holds. */
    int s = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    ck_assert_uint_lt(strlen(sock), sizeof sa.sun_path);
    memcpy(sa.sun_path, sock, strlen(sock) + 1);
    ck_assert_int_eq(bind(s, (struct sockaddr *)&sa, sizeof sa), 0);
    close(s);
    f = open(lock, O_WRONLY | O_CREAT, 0600);
    ck_assert_int_eq(write(f, "999999\n", 7), 7);
    close(f);
    th_agent_start(&a, dir, NULL);
    ck_assert(th_file_wait_for(a.log, "replaced stale socket", 1000));
    close(th_hello(a.sock, 0, NULL));
    ck_assert_int_eq(th_agent_stop(&a), 0);
    ck_assert_int_ne(stat(sock, &st), 0);
    ck_assert_int_ne(stat(lock, &st), 0);
    th_agent_cleanup(&a);
}
END_TEST

/* No fixture: an agent with a 4 KiB reply queue per client. */
START_TEST(test_client_that_does_not_read_is_disconnected)
{
    struct th_agent a;
    const char *extra[] = {"--max-queued-bytes", "4K", NULL};
    signal(SIGPIPE, SIG_IGN);
    th_agent_start(&a, NULL, extra);
    union lt_msg_buffer buf;
    int by = th_hello(a.sock, 0, NULL);
    int c = th_hello(a.sock, 0, NULL);
    int sent = 0, gone = 0;
    for (int i = 0; i < 100000 && !gone; i++) {
        struct lt_msg_stats_request s;
        lt_msg_init(&s, sizeof s, LT_MSG_STATS_REQUEST, th_rid());
        ssize_t n = send(c, &s, sizeof s, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n == (ssize_t)sizeof s) {
            sent++;
        } else if (errno == EAGAIN) {
            struct pollfd pfd = {.fd = c, .events = POLLOUT};
            poll(&pfd, 1, 10);
        } else {
            gone = 1; /* EPIPE / ECONNRESET: the agent hung up */
        }
    }
    ck_assert_msg(gone, "still connected after %d unread requests", sent);
    ck_assert(th_file_wait_for(a.log, "is not reading its replies", TH_TIMEOUT_MS));
    int queued = th_expect_eof(c);
    ck_assert_int_lt(queued, sent);
    th_stats(by, LT_STATS_F_ALL_CLIENTS, &buf);
    ck_assert_uint_eq(((const struct lt_msg_stats_reply *)(const void *)buf.bytes)->client_count,
                      1);
    close(c);
    close(by);
    ck_assert_int_eq(th_agent_stop(&a), 0);
    th_agent_cleanup(&a);
}
END_TEST

/* No fixture: an agent with room for 2 clients and 2 requests in flight each. */
START_TEST(test_client_and_inflight_limits_are_enforced)
{
    struct th_agent a;
    const char *extra[] = {"--max-clients", "2", "--max-inflight", "2", NULL};
    signal(SIGPIPE, SIG_IGN);
    th_agent_start(&a, NULL, extra);
    union lt_msg_buffer buf;
    int c1 = th_hello(a.sock, CAPS_SINGLES, NULL);
    int c2 = th_hello(a.sock, 0, NULL);
    int c3 = th_connect(a.sock);
    th_expect_error(c3, &buf, 0, LT_E_LIMIT);
    ck_assert_int_eq(th_expect_eof(c3), 0);
    close(c3);

    struct data_seg d;
    data_seg_make(&d, 0x5eed08);
    struct lt_segment_id seg = th_offer(c1, d.fd, d.size, LT_CLASS_PINNED, 8);
    volatile uint64_t *words;
    struct lt_segment_id bseg = bell_seg_make(c1, &words);
    struct lt_lease_grant_entry g = th_lease(c1, seg, 0, d.size, LT_CLASS_PINNED);
    struct lt_msg_submit s;
    checksum_submit(&s, g.lease, &d);
    s.flags = LT_SUBMIT_F_WAIT_BELL;
    s.bell = (struct lt_word_ref){.segment = bseg, .offset = 0};
    s.bell_seq = 1;
    uint64_t r1 = th_submit_send(c1, &s);
    uint64_t r2 = th_submit_send(c1, &s);
    uint64_t r3 = th_submit_send(c1, &s);
    th_expect_error(c1, &buf, r3, LT_E_LIMIT);
    __atomic_store_n(&words[0], 1, __ATOMIC_RELEASE);
    th_expect(c1, &buf, LT_MSG_COMPLETION);
    ck_assert_uint_eq(buf.hdr.request_id, r1);
    th_expect(c1, &buf, LT_MSG_COMPLETION);
    ck_assert_uint_eq(buf.hdr.request_id, r2);
    close(c2); /* room again for a new client */
    for (int i = 0; i < 200; i++) {
        int c4 = th_connect(a.sock);
        struct lt_msg_hello h;
        lt_msg_init(&h, sizeof h, LT_MSG_HELLO, th_rid());
        h.version_min = h.version_max = 1;
        lt_name_set(h.name, sizeof h.name, "late");
        ck_assert_int_eq(th_send(c4, &h, sizeof h, NULL, 0), 0);
        th_recv(c4, &buf, TH_TIMEOUT_MS);
        close(c4);
        if (buf.hdr.type == LT_MSG_HELLO_REPLY)
            break;
        ck_assert_int_lt(i, 199); /* c2's close may not have been seen yet */
        usleep(10000);
    }
    close(c1);
    close(d.fd);
    ck_assert_int_eq(th_agent_stop(&a), 0);
    th_agent_cleanup(&a);
}
END_TEST

static Suite *server_suite(void)
{
    Suite *s = suite_create("server");
    TCase *tc = tcase_create("agent");
    tcase_add_checked_fixture(tc, agent_setup, agent_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_hello_grants_known_caps_and_reports_limits);
    tcase_add_test(tc, test_checksum_verify_reports_the_corrupted_block);
    tcase_add_test(tc, test_release_completes_only_after_doorbell_gated_work);
    tcase_add_test(tc, test_release_batch_with_cap_singles_without);
    tcase_add_test(tc, test_scan_writes_topk_hits_into_the_lease);
    tcase_add_test(tc, test_streams_and_events_order_work);
    tcase_add_test(tc, test_all_or_nothing_grants_nothing_on_one_refusal);
    tcase_add_test(tc, test_foreign_stale_and_out_of_range_ids_are_refused);
    tcase_add_test(tc, test_wrong_fd_counts_are_refused_and_closed);
    tcase_add_test(tc, test_bad_segment_fds_are_refused_with_their_reason);
    tcase_add_test(tc, test_random_bytes_get_errors_and_never_hurt_others);
    tcase_add_test(tc, test_mutated_requests_get_valid_answers);
    tcase_add_test(tc, test_oversized_packet_is_refused_then_disconnected);
    tcase_add_test(tc, test_killed_client_leaves_nothing_behind);
    tcase_add_test(tc, test_second_live_agent_on_the_path_is_refused);
    tcase_add_test(tc, test_sigusr1_logs_stats);
    tcase_add_test(tc, test_sigterm_cancels_waiting_work_and_removes_files);
    suite_add_tcase(s, tc);
    TCase *solo = tcase_create("process");
    tcase_set_timeout(solo, 120);
    tcase_add_test(solo, test_stale_socket_is_replaced_and_other_files_are_not);
    tcase_add_test(solo, test_client_that_does_not_read_is_disconnected);
    tcase_add_test(solo, test_client_and_inflight_limits_are_enforced);
    suite_add_tcase(s, solo);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(server_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
