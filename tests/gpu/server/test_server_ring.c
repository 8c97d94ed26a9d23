/* Streaming rings on the socket (protocol 1.1, docs/streaming.md), end to
 * end against a real agent: lease-agent-host, or lease-agent under the
 * fake CUDA driver (the _cuda build of this file). The test is the client:
 * it fills the slots, stores the sequence words and waits for the done
 * words itself, as stagingd's staging threads do. Covered: a shard of each
 * op through a ring (a bad block named, hits written into the words lease),
 * every RING_OPEN and RING_SHARD refusal (the words in a sealed segment
 * among them), the depth, a close with work queued (stored shards
 * answered, the rest cancelled, then RING_CLOSED), a lease release held by
 * an open ring, a client that dies with a ring
 * waiting for words it will never store, and a shard's copies that do not
 * wait for the shard before's completion (a host function the fake driver
 * holds its stream for, FAKECUDA_HOSTFN_LAG_US, as a busy host does); then
 * the hostile cases (a client rewriting its words after its drop or while
 * its ring closes, the rings' device-memory budget, a wait-shape ring that
 * another uid may not open) and --ring-join.
 *
 * One file of about 1400 lines on purpose: every variant (host agent,
 * _cuda, _shared, _wait, _nojoin) is this file built with other agent
 * options, so a case added once runs against every dispatch shape; the
 * sections are marked with "----" rules. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "kernels/blockhash_ref.h"
#include "kernels/scan_ref.h"

#define KiB 1024ull
#define MiB (1024ull * 1024ull)
#define CAPS (LT_CAP_DOORBELL | LT_CAP_DONE_WORD | LT_CAP_STREAM)
#define SLOTS 4u
#define SLOT_BYTES (64 * KiB)
#define WORDS_BYTES 4096u
#define SEQ_OFF 0u
#define DONE_OFF (8u * SLOTS)
#define HITS_OFF 1024u

static struct th_agent ag;

/* The agent options of this build's variant: rings sharing one stream, the
 * wait shape, each stored chunk copied at once, or none (the polling
 * dispatcher, with copies that wait to join two chunks: the agent's
 * default). */
#if defined(RING_TEST_SHARED_STREAMS)
#define RING_VARIANT_ARGS "--ring-streams", "1",
#elif defined(RING_TEST_WAIT)
#define RING_VARIANT_ARGS "--ring-dispatch", "wait",
#elif defined(RING_TEST_NOJOIN)
#define RING_VARIANT_ARGS "--ring-join", "1",
#else
#define RING_VARIANT_ARGS
#endif

/* Starts the agent with the variant's options and one more (@opt NULL: none). */
static void agent_start_with(const char *opt, const char *val)
{
    signal(SIGPIPE, SIG_IGN);
    const char *const extra[] = {RING_VARIANT_ARGS opt, val, NULL};
    th_agent_start(&ag, NULL, extra);
}

static void agent_setup(void)
{
    agent_start_with(NULL, NULL);
}

/* A host function holds its stream this long after it returns (the fake
 * driver's knob; the real driver and the host agent ignore it). */
#define LAG_MS 1200

static void agent_setup_lagged(void)
{
    char v[32];
    snprintf(v, sizeof v, "%d", LAG_MS * 1000);
    ck_assert_int_eq(setenv("FAKECUDA_HOSTFN_LAG_US", v, 1), 0);
    agent_setup();
}

/* A pinned budget that holds one client's 1 MiB slots segment and two of
 * another's 64 KiB segments: a third of those evicts one. */
#define EV_SEG (64 * KiB)
#ifndef RING_TEST_WAIT
static void agent_setup_small_budget(void)
{
    agent_start_with("--pinned-budget", "1152K");
}
#else
/* The same budget, and unrung words forced after 300 ms, not 5 s. */
static void agent_setup_small_budget_short_timeout(void)
{
    signal(SIGPIPE, SIG_IGN);
    const char *const extra[] = {RING_VARIANT_ARGS "--pinned-budget", "1152K", "--bell-timeout",
                                 "300", NULL};
    th_agent_start(&ag, NULL, extra);
}
#endif

#if defined(RING_TEST_CUDA) && !defined(RING_TEST_WAIT)
static void agent_setup_join(void)
{
    agent_start_with("--ring-join", "2");
}

static void agent_setup_join3(void)
{
    agent_start_with("--ring-join", "3");
}

static void agent_setup_one_result_slot(void)
{
    agent_start_with("--result-slots", "1");
}
#endif

#ifdef RING_TEST_CUDA
/* The fake driver faults the second launch of the verify kernel (sticky
 * CUDA_ERROR_ILLEGAL_ADDRESS); the agent answers what is in flight and,
 * with --on-fault exit, stops. */
static void agent_setup_fault(void)
{
    ck_assert_int_eq(setenv("FAKECUDA_FAULT_KERNEL", "k_block_verify:2", 1), 0);
    agent_start_with("--on-fault", "exit");
}

static void agent_teardown_fault(void)
{
    int st = ag.pid > 0 ? th_agent_stop(&ag) : 0;
    th_agent_cleanup(&ag);
    unsetenv("FAKECUDA_FAULT_KERNEL");
    ck_assert_msg(st == 1, "the agent exited with status %d after the fault, expected 1", st);
}
#endif

static void agent_teardown(void)
{
    int st = ag.pid > 0 ? th_agent_stop(&ag) : 0;
    th_agent_cleanup(&ag);
    ck_assert_msg(st == 0, "the agent exited with status %d", st);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* One client with a slots segment and a words segment, leased. */
struct rc {
    int c;
    unsigned char *slots;
    volatile uint64_t *words;
    struct lt_segment_id slots_seg, words_seg;
    struct lt_lease_id slots_lease, words_lease;
};

static void rc_make(struct rc *r, uint32_t caps)
{
    memset(r, 0, sizeof *r);
    r->c = th_hello(ag.sock, caps, NULL);
    void *p = NULL;
    int fd = th_memfd(MiB, TH_GOOD_SEALS, 5, &p);
    r->slots = p;
    r->slots_seg = th_offer(r->c, fd, MiB, LT_CLASS_PINNED, 1);
    close(fd);
    fd = th_memfd(WORDS_BYTES, 0, 1, &p);
    memset(p, 0, WORDS_BYTES);
    /* The words lease the agent (and the GPU) writes: MAPPED, without
     * F_SEAL_FUTURE_WRITE, so the agent maps it writable; a strict agent
     * leases such a segment only to a client granted LT_CAP_STREAM (a
     * client without it gets a sealed one, to be refused the ring). */
    ck_assert_int_eq(
        fcntl(fd, F_ADD_SEALS, (caps & LT_CAP_STREAM) ? TH_OLD_SEALS : TH_GOOD_SEALS), 0);
    r->words = p;
    r->words_seg = th_offer(r->c, fd, WORDS_BYTES, LT_CLASS_MAPPED, 2);
    close(fd);
    struct lt_lease_grant_entry g =
        th_lease(r->c, r->slots_seg, 0, SLOTS * SLOT_BYTES, LT_CLASS_PINNED);
    ck_assert_uint_eq(g.status, LT_OK);
    r->slots_lease = g.lease;
    g = th_lease(r->c, r->words_seg, 0, WORDS_BYTES, LT_CLASS_MAPPED);
    ck_assert_uint_eq(g.status, LT_OK);
    r->words_lease = g.lease;
}

static void rc_done(struct rc *r)
{
    munmap(r->slots, MiB);
    munmap((void *)r->words, WORDS_BYTES);
    close(r->c);
}

static void ring_open_msg(const struct rc *r, struct lt_msg_ring_open *m, uint32_t depth,
                          uint64_t max_shard)
{
    lt_msg_init(m, sizeof *m, LT_MSG_RING_OPEN, th_rid());
    m->slots = r->slots_lease;
    m->words = r->words_lease;
    m->slot_bytes = SLOT_BYTES;
    m->seq_offset = SEQ_OFF;
    m->done_offset = DONE_OFF;
    m->max_shard_bytes = max_shard;
    m->nslots = SLOTS;
    m->depth = depth;
}

static struct lt_ring_id ring_open(const struct rc *r, uint32_t depth, uint32_t *granted_p)
{
    struct lt_msg_ring_open m;
    union lt_msg_buffer buf;
    ring_open_msg(r, &m, depth, 512 * KiB);
    ck_assert_int_eq(th_send(r->c, &m, sizeof m, NULL, 0), 0);
    th_expect(r->c, &buf, LT_MSG_RING_OPENED);
    const struct lt_msg_ring_opened *a = (const void *)buf.bytes;
    ck_assert_int_eq(lt_validate_reply_matches(&m, a), LT_OK);
    ck_assert_uint_eq(a->nslots, SLOTS);
    ck_assert_uint_ge(a->depth, 1);
    ck_assert_uint_le(a->depth, depth);
    if (granted_p)
        *granted_p = a->depth;
    return a->ring;
}

/* An image: @len bytes of data (seeded) then its 16 KiB-block checksums at
 * an 8-aligned offset; returns its length and the table's offset. */
static uint64_t image_verify(unsigned char *img, uint64_t len, uint64_t seed, uint64_t *sums_off_p)
{
    th_fill(img, len, seed);
    uint64_t so = (len + 7) / 8 * 8;
    memset(img + len, 0, so - len);
    long n = kr_block_checksums(img, len, 16 * KiB, (uint64_t *)(void *)(img + so));
    ck_assert_int_gt(n, 0);
    *sums_off_p = so;
    return so + 8ull * (uint64_t)n;
}

static uint64_t shard_send(const struct rc *r, struct lt_ring_id ring, uint64_t first, uint64_t len,
                           uint16_t op, const union lt_op_args *args)
{
    struct lt_msg_ring_shard m;
    lt_msg_init(&m, sizeof m, LT_MSG_RING_SHARD, th_rid());
    m.ring = ring;
    m.first_seq = first;
    m.length = len;
    m.op = op;
    m.args = *args;
    ck_assert_int_eq(th_send(r->c, &m, sizeof m, NULL, 0), 0);
    return m.hdr.request_id;
}

static uint64_t chunks_of(uint64_t len)
{
    return (len + SLOT_BYTES - 1) / SLOT_BYTES;
}

/* Stores chunks [@from, @to) of @img (whose first chunk is sequence @first)
 * as a staging thread would: wait for the slot, fill it, store the word. */
static void chunks_store(struct rc *r, const unsigned char *img, uint64_t len, uint64_t first,
                         uint64_t from, uint64_t to)
{
    for (uint64_t i = from; i < to; i++) {
        uint64_t s = first + i;
        uint32_t slot = (uint32_t)(s % SLOTS);
        for (int t = 0; s > SLOTS && __atomic_load_n(&r->words[DONE_OFF / 8 + slot],
                                                     __ATOMIC_ACQUIRE) < s - SLOTS;
             t++) {
            ck_assert_msg(t < 10000, "slot %u: chunk %" PRIu64 " was never copied out", slot,
                          s - SLOTS);
            sleep_ms(1);
        }
        uint64_t n = len - i * SLOT_BYTES < SLOT_BYTES ? len - i * SLOT_BYTES : SLOT_BYTES;
        memcpy(r->slots + (uint64_t)slot * SLOT_BYTES, img + i * SLOT_BYTES, (size_t)n);
        __atomic_store_n(&r->words[SEQ_OFF / 8 + slot], s, __ATOMIC_RELEASE);
    }
}

static const struct lt_msg_completion *completion_expect(struct rc *r, union lt_msg_buffer *buf,
                                                         uint64_t rid)
{
    th_expect(r->c, buf, LT_MSG_COMPLETION);
    const struct lt_msg_completion *m = (const void *)buf->bytes;
    ck_assert_uint_eq(m->hdr.request_id, rid);
    ck_assert(lt_lease_id_eq(m->lease, r->slots_lease));
    return m;
}

static const struct lt_msg_ring_closed *ring_close(struct rc *r, struct lt_ring_id ring,
                                                   union lt_msg_buffer *buf)
{
    struct lt_msg_ring_close m;
    lt_msg_init(&m, sizeof m, LT_MSG_RING_CLOSE, th_rid());
    m.ring = ring;
    ck_assert_int_eq(th_send(r->c, &m, sizeof m, NULL, 0), 0);
    th_expect(r->c, buf, LT_MSG_RING_CLOSED);
    const struct lt_msg_ring_closed *a = (const void *)buf->bytes;
    ck_assert_int_eq(lt_validate_reply_matches(&m, a), LT_OK);
    return a;
}

/* ---- each op through a ring ------------------------------------------------- */

START_TEST(test_ring_runs_each_op_on_its_image)
{
    struct rc r;
    union lt_msg_buffer buf;
    rc_make(&r, CAPS);
    struct lt_ring_id ring = ring_open(&r, 2, NULL);
    unsigned char *img = malloc(512 * KiB);
    ck_assert_ptr_nonnull(img);
    uint64_t seq = 1;

    /* verify: clean, then one bit flipped in block 5 (shards of 7 chunks:
     * the slots go round more than once) */
    for (int bad = 0; bad < 2; bad++) {
        uint64_t so = 0, len = image_verify(img, 400 * KiB, 77, &so);
        if (bad)
            img[5 * 16 * KiB + 3] ^= 0x10;
        union lt_op_args a = {
            .checksum = {
                .offset = 0, .length = 400 * KiB, .sums_offset = so, .block_size = 16 * KiB}};
        uint64_t rid = shard_send(&r, ring, seq, len, LT_OP_CHECKSUM_VERIFY, &a);
        chunks_store(&r, img, len, seq, 0, chunks_of(len));
        seq += chunks_of(len);
        const struct lt_msg_completion *c = completion_expect(&r, &buf, rid);
        ck_assert_uint_eq(c->result.checksum.blocks_checked, 25);
        if (!bad) {
            ck_assert_uint_eq(c->status, LT_OK);
            continue;
        }
        ck_assert_uint_eq(c->status, LT_E_CHECKSUM_MISMATCH);
        ck_assert_uint_eq(c->result.checksum.first_bad_block, 5);
        ck_assert_uint_eq(c->result.checksum.bad_blocks, 1);
        const uint64_t *sums = (const uint64_t *)(const void *)(img + so);
        ck_assert_uint_eq(c->result.checksum.expected, sums[5]);
        ck_assert_uint_eq(c->result.checksum.actual,
                          kr_block_checksum(img + 5 * 16 * KiB, 16 * KiB));
    }

    /* scan: f32 records of dim 64, the query behind them, 8 hits into the
     * words lease */
    const uint32_t dim = 64, nrec = 1500;
    const uint64_t rec_bytes = (uint64_t)nrec * dim * 4, qo = (rec_bytes + 63) / 64 * 64;
    float *f = (float *)(void *)img;
    uint64_t s = 99;
    for (uint64_t i = 0; i < (uint64_t)nrec * dim + dim; i++)
        f[i < (uint64_t)nrec * dim ? i : qo / 4 + (i - (uint64_t)nrec * dim)] =
            (float)((int64_t)(th_rand(&s) % 2001) - 1000) / 1000.0f;
    const uint64_t slen = qo + dim * 4;
    union lt_op_args a = {.scan = {.offset = 0,
                                   .length = rec_bytes,
                                   .query_offset = qo,
                                   .dim = dim,
                                   .elem = LT_ELEM_F32,
                                   .metric = LT_SCAN_DOT,
                                   .hits_offset = HITS_OFF,
                                   .k = 8}};
    uint64_t rid = shard_send(&r, ring, seq, slen, LT_OP_VECTOR_SCAN, &a);
    chunks_store(&r, img, slen, seq, 0, chunks_of(slen));
    seq += chunks_of(slen);
    const struct lt_msg_completion *c = completion_expect(&r, &buf, rid);
    ck_assert_uint_eq(c->status, LT_OK);
    ck_assert_uint_eq(c->result.scan.records_scanned, nrec);
    struct kn_scan_hit want[8];
    ck_assert_int_eq(kr_scan_topk(img, LT_ELEM_F32, nrec, dim, f + qo / 4, 8, want), 8);
    const struct lt_scan_hit *hits = (const void *)((const unsigned char *)r.words + HITS_OFF);
    /* The host backend ranks with the C reference bit for bit; the GPU's
     * kernels sum in their own order, so their scores agree to rounding. */
    for (int i = 0; i < 8; i++) {
        ck_assert_uint_eq(hits[i].index, want[i].index);
        float got = lt_f32_from_bits(hits[i].score_bits);
        ck_assert_msg(got - want[i].score < 1e-3f && want[i].score - got < 1e-3f,
                      "hit %d: score %.9g, the reference's %.9g", i, (double)got,
                      (double)want[i].score);
    }
    ck_assert_uint_eq(c->result.scan.best_index, want[0].index);

    /* copy: the chunks' copies are the op */
    a = (union lt_op_args){.copy = {.offset = 0, .length = 130 * KiB}};
    rid = shard_send(&r, ring, seq, 130 * KiB, LT_OP_COPY_H2D, &a);
    chunks_store(&r, img, 130 * KiB, seq, 0, chunks_of(130 * KiB));
    seq += chunks_of(130 * KiB);
    c = completion_expect(&r, &buf, rid);
    ck_assert_uint_eq(c->status, LT_OK);
    ck_assert_uint_eq(c->result.copy.bytes_copied, 130 * KiB);

    const struct lt_msg_ring_closed *cl = ring_close(&r, ring, &buf);
    ck_assert_uint_eq(cl->shards, 4);
    ck_assert_uint_eq(cl->chunks, seq - 1);
    free(img);
    rc_done(&r);
}
END_TEST

/* ---- refusals ------------------------------------------------------------------ */

START_TEST(test_ring_refusals_say_what_was_wrong)
{
    struct rc r;
    union lt_msg_buffer buf;
    struct lt_msg_ring_open m;

    /* without the capability */
    rc_make(&r, LT_CAP_DOORBELL | LT_CAP_DONE_WORD);
    ring_open_msg(&r, &m, 2, 512 * KiB);
    ck_assert_int_eq(th_send(r.c, &m, sizeof m, NULL, 0), 0);
    th_expect_error(r.c, &buf, m.hdr.request_id, LT_E_UNSUPPORTED);
    rc_done(&r);

    rc_make(&r, CAPS);
    /* more slots than the slots lease holds */
    ring_open_msg(&r, &m, 2, 512 * KiB);
    m.nslots = SLOTS + 1;
    m.done_offset = 8u * (SLOTS + 1);
    ck_assert_int_eq(th_send(r.c, &m, sizeof m, NULL, 0), 0);
    th_expect_error(r.c, &buf, m.hdr.request_id, LT_E_OUT_OF_RANGE);
    /* the words in a PINNED lease: the GPU cannot reach them */
    ring_open_msg(&r, &m, 2, 512 * KiB);
    m.words = th_lease(r.c, r.slots_seg, SLOTS * SLOT_BYTES, 4096, LT_CLASS_PINNED).lease;
    ck_assert_int_eq(th_send(r.c, &m, sizeof m, NULL, 0), 0);
    th_expect_error(r.c, &buf, m.hdr.request_id, LT_E_BAD_CLASS);
    /* the slots served STAGED */
    ring_open_msg(&r, &m, 2, 512 * KiB);
    m.slots = th_lease(r.c, r.slots_seg, 512 * KiB, SLOTS * SLOT_BYTES, LT_CLASS_STAGED).lease;
    ck_assert_int_eq(th_send(r.c, &m, sizeof m, NULL, 0), 0);
    th_expect_error(r.c, &buf, m.hdr.request_id, LT_E_BAD_CLASS);
    /* the words in a sealed MAPPED segment: read-only to the agent, and the
     * GPU writes the done words */
    void *sealed = NULL;
    int sfd = th_memfd(WORDS_BYTES, TH_GOOD_SEALS, 0, &sealed);
    struct lt_segment_id sseg = th_offer(r.c, sfd, WORDS_BYTES, LT_CLASS_MAPPED, 3);
    close(sfd);
    struct lt_lease_grant_entry sg = th_lease(r.c, sseg, 0, WORDS_BYTES, LT_CLASS_MAPPED);
    ck_assert_uint_eq(sg.status, LT_OK);
    ring_open_msg(&r, &m, 2, 512 * KiB);
    m.words = sg.lease;
    ck_assert_int_eq(th_send(r.c, &m, sizeof m, NULL, 0), 0);
    const struct lt_msg_error *se = th_expect_error(r.c, &buf, m.hdr.request_id, LT_E_UNSUPPORTED);
    ck_assert_msg(strstr(se->message, "ring words lease") &&
                      strstr(se->message, "F_SEAL_FUTURE_WRITE") &&
                      strstr(se->message, "use an unsealed MAPPED segment"),
                  "the refusal names not the words lease, its seal and the remedy: %s",
                  se->message);
    munmap(sealed, WORDS_BYTES);
    /* words not zero */
    r.words[DONE_OFF / 8 + 2] = 7;
    ring_open_msg(&r, &m, 2, 512 * KiB);
    ck_assert_int_eq(th_send(r.c, &m, sizeof m, NULL, 0), 0);
    const struct lt_msg_error *e = th_expect_error(r.c, &buf, m.hdr.request_id, LT_E_BAD_VALUE);
    ck_assert_ptr_nonnull(strstr(e->message, "slot 2"));
    r.words[DONE_OFF / 8 + 2] = 0;

    uint32_t depth = 0;
    struct lt_ring_id ring = ring_open(&r, 2, &depth);
    ck_assert_uint_eq(depth, 2);
    union lt_op_args a = {.copy = {.offset = 0, .length = 4096}};
    /* the first shard must start at sequence 1 */
    uint64_t rid = shard_send(&r, ring, 2, 4096, LT_OP_COPY_H2D, &a);
    e = th_expect_error(r.c, &buf, rid, LT_E_BAD_VALUE);
    ck_assert_ptr_nonnull(strstr(e->message, "expected 1"));
    /* larger than the ring's images */
    union lt_op_args big = {.copy = {.offset = 0, .length = 4096}};
    rid = shard_send(&r, ring, 1, 512 * KiB + 1, LT_OP_COPY_H2D, &big);
    th_expect_error(r.c, &buf, rid, LT_E_OUT_OF_RANGE);
    /* an op range past the image */
    union lt_op_args past = {.copy = {.offset = 4096, .length = 4096}};
    rid = shard_send(&r, ring, 1, 4096, LT_OP_COPY_H2D, &past);
    th_expect_error(r.c, &buf, rid, LT_E_OUT_OF_RANGE);
    /* hits over the ring's own words */
    union lt_op_args sc = {.scan = {.offset = 0,
                                    .length = 4096,
                                    .query_offset = 4096,
                                    .dim = 16,
                                    .elem = LT_ELEM_F32,
                                    .metric = LT_SCAN_DOT,
                                    .hits_offset = DONE_OFF,
                                    .k = 2}};
    rid = shard_send(&r, ring, 1, 4096 + 64, LT_OP_VECTOR_SCAN, &sc);
    th_expect_error(r.c, &buf, rid, LT_E_BAD_VALUE);
    /* the depth: two outstanding, the third refused (none stored yet) */
    uint64_t r1 = shard_send(&r, ring, 1, 4096, LT_OP_COPY_H2D, &a);
    uint64_t r2 = shard_send(&r, ring, 2, 4096, LT_OP_COPY_H2D, &a);
    rid = shard_send(&r, ring, 3, 4096, LT_OP_COPY_H2D, &a);
    th_expect_error(r.c, &buf, rid, LT_E_LIMIT);
    /* a ring never issued */
    struct lt_ring_id never = {ring.slot + 100, 1};
    rid = shard_send(&r, never, 1, 4096, LT_OP_COPY_H2D, &a);
    th_expect_error(r.c, &buf, rid, LT_E_NOT_FOUND);
    unsigned char page[4096];
    memset(page, 0x5a, sizeof page);
    chunks_store(&r, page, 4096, 1, 0, 1);
    chunks_store(&r, page, 4096, 2, 0, 1);
    ck_assert_uint_eq(completion_expect(&r, &buf, r1)->status, LT_OK);
    ck_assert_uint_eq(completion_expect(&r, &buf, r2)->status, LT_OK);
    ring_close(&r, ring, &buf);
    /* a closed ring's id is stale */
    rid = shard_send(&r, ring, 3, 4096, LT_OP_COPY_H2D, &a);
    th_expect_error(r.c, &buf, rid, LT_E_STALE_ID);

    /* another client's ring is not this one's */
    struct rc o;
    rc_make(&o, CAPS);
    struct lt_ring_id theirs = ring_open(&o, 1, NULL);
    rid = shard_send(&r, theirs, 1, 4096, LT_OP_COPY_H2D, &a);
    th_expect_error(r.c, &buf, rid, LT_E_NOT_OWNER);
    ring_close(&o, theirs, &buf);
    rc_done(&o);
    rc_done(&r);
}
END_TEST

/* ---- close, release, death ------------------------------------------------------- */

START_TEST(test_ring_close_answers_stored_shards_and_cancels_the_rest)
{
    struct rc r;
    union lt_msg_buffer buf;
    rc_make(&r, CAPS);
    struct lt_ring_id ring = ring_open(&r, 3, NULL);
    unsigned char *img = malloc(256 * KiB);
    ck_assert_ptr_nonnull(img);
    uint64_t so = 0, len = image_verify(img, 150 * KiB, 3, &so); /* 3 chunks */
    union lt_op_args a = {
        .checksum = {.offset = 0, .length = 150 * KiB, .sums_offset = so, .block_size = 16 * KiB}};
    const uint64_t k = chunks_of(len);
    uint64_t r1 = shard_send(&r, ring, 1, len, LT_OP_CHECKSUM_VERIFY, &a);
    uint64_t r2 = shard_send(&r, ring, 1 + k, len, LT_OP_CHECKSUM_VERIFY, &a);
    uint64_t r3 = shard_send(&r, ring, 1 + 2 * k, len, LT_OP_CHECKSUM_VERIFY, &a);
    chunks_store(&r, img, len, 1, 0, k);
    chunks_store(&r, img, len, 1 + k, 0, 1); /* the second shard only begun */
    ck_assert_uint_eq(completion_expect(&r, &buf, r1)->status, LT_OK);
    th_expect_silence(r.c, 100);
    struct lt_msg_ring_close m;
    lt_msg_init(&m, sizeof m, LT_MSG_RING_CLOSE, th_rid());
    m.ring = ring;
    ck_assert_int_eq(th_send(r.c, &m, sizeof m, NULL, 0), 0);
    ck_assert_uint_eq(completion_expect(&r, &buf, r2)->status, LT_E_SHUTTING_DOWN);
    ck_assert_uint_eq(completion_expect(&r, &buf, r3)->status, LT_E_SHUTTING_DOWN);
    th_expect(r.c, &buf, LT_MSG_RING_CLOSED);
    const struct lt_msg_ring_closed *cl = (const void *)buf.bytes;
    ck_assert_uint_eq(cl->shards, 1);
    ck_assert_uint_eq(cl->chunks, k);
    free(img);
    rc_done(&r);
}
END_TEST

START_TEST(test_ring_holds_its_leases_until_it_is_closed)
{
    struct rc r;
    union lt_msg_buffer buf;
    rc_make(&r, CAPS);
    struct lt_ring_id ring = ring_open(&r, 1, NULL);
    uint64_t rel = th_release_send(r.c, r.slots_lease);
    th_expect_silence(r.c, 200); /* pinned by the ring */
    struct lt_msg_ring_close m;
    lt_msg_init(&m, sizeof m, LT_MSG_RING_CLOSE, th_rid());
    m.ring = ring;
    ck_assert_int_eq(th_send(r.c, &m, sizeof m, NULL, 0), 0);
    th_expect(r.c, &buf, LT_MSG_RING_CLOSED);
    th_expect(r.c, &buf, LT_MSG_RELEASE_COMPLETE);
    const struct lt_msg_release_complete *rc = (const void *)buf.bytes;
    ck_assert_uint_eq(rc->hdr.request_id, rel);
    ck_assert_uint_eq(rc->status, LT_OK);
    rc_done(&r);
}
END_TEST

START_TEST(test_client_dying_with_a_ring_open_is_drained)
{
    struct rc r;
    union lt_msg_buffer buf;
    rc_make(&r, CAPS);
    struct lt_ring_id ring = ring_open(&r, 2, NULL);
    unsigned char page[8192];
    memset(page, 1, sizeof page);
    union lt_op_args a = {.copy = {.offset = 0, .length = 8192}};
    uint64_t r1 = shard_send(&r, ring, 1, 8192, LT_OP_COPY_H2D, &a);
    chunks_store(&r, page, 8192, 1, 0, 1);
    ck_assert_uint_eq(completion_expect(&r, &buf, r1)->status, LT_OK);
    shard_send(&r, ring, 2, 8192, LT_OP_COPY_H2D, &a); /* waits for a word never stored */
    shard_send(&r, ring, 3, 8192, LT_OP_COPY_H2D, &a);
    rc_done(&r); /* dies with both shards queued */

    /* The agent drains it: no client and no lease of it remain, and a new
     * client streams as before. */
    struct rc n;
    rc_make(&n, CAPS);
    int gone = 0;
    for (int t = 0; t < 1000 && !gone; t++) {
        th_stats(n.c, LT_STATS_F_ALL_CLIENTS, &buf);
        const struct lt_msg_stats_reply *s = (const void *)buf.bytes;
        gone = s->client_count == 1 && s->classes[LT_CLASS_PINNED].live_leases == 1 &&
               s->classes[LT_CLASS_MAPPED].live_leases == 1;
        if (!gone)
            sleep_ms(10);
    }
    ck_assert_msg(gone, "the dead client's ring was not drained");
    struct lt_ring_id ring2 = ring_open(&n, 1, NULL);
    uint64_t r2 = shard_send(&n, ring2, 1, 8192, LT_OP_COPY_H2D, &a);
    chunks_store(&n, page, 8192, 1, 0, 1);
    ck_assert_uint_eq(completion_expect(&n, &buf, r2)->status, LT_OK);
    ring_close(&n, ring2, &buf);
    rc_done(&n);
}
END_TEST

/* ---- a completion's host function --------------------------------------------------- */

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

START_TEST(test_ring_copies_do_not_wait_for_the_shard_befores_completion)
{
    struct rc r;
    union lt_msg_buffer buf;
    rc_make(&r, CAPS);
    struct lt_ring_id ring = ring_open(&r, 2, NULL);
    unsigned char img[2 * SLOT_BYTES];
    th_fill(img, sizeof img, 41);
    union lt_op_args a = {.copy = {.offset = 0, .length = sizeof img}};
    /* Two shards of two chunks: all four slots stored at once. */
    uint64_t r1 = shard_send(&r, ring, 1, sizeof img, LT_OP_COPY_H2D, &a);
    uint64_t r2 = shard_send(&r, ring, 3, sizeof img, LT_OP_COPY_H2D, &a);
    chunks_store(&r, img, sizeof img, 1, 0, 2);
    const uint64_t t0 = now_ms();
    chunks_store(&r, img, sizeof img, 3, 0, 2);
    /* The second shard's last chunk (sequence 4, slot 0) copied out: its
     * done word. Behind the first shard's completion on the ring's own
     * stream it would come LAG_MS after that completion ran. */
    volatile uint64_t *done4 = &r.words[DONE_OFF / 8 + 4 % SLOTS];
    while (__atomic_load_n(done4, __ATOMIC_ACQUIRE) < 4 && now_ms() - t0 < 4 * LAG_MS)
        sleep_ms(1);
    const uint64_t took = now_ms() - t0;
    ck_assert_msg(__atomic_load_n(done4, __ATOMIC_ACQUIRE) >= 4,
                  "the second shard's last chunk was never copied out (%" PRIu64 " ms)", took);
    ck_assert_msg(took < LAG_MS / 2,
                  "the second shard's chunks were copied %" PRIu64
                  " ms after they were stored: they waited for the first shard's completion, "
                  "whose host function holds its stream %d ms",
                  took, LAG_MS);
    ck_assert_uint_eq(completion_expect(&r, &buf, r1)->status, LT_OK);
    ck_assert_uint_eq(completion_expect(&r, &buf, r2)->status, LT_OK);
    const struct lt_msg_ring_closed *cl = ring_close(&r, ring, &buf);
    ck_assert_uint_eq(cl->shards, 2);
    ck_assert_uint_eq(cl->chunks, 4);
    rc_done(&r);
}
END_TEST

/* The polling dispatcher queues only stored chunks, so a shard whose words
 * its client leaves unstored puts nothing on the GPU, and the reaper's gate
 * (docs/reliability.md) has no ring wait to defer an unregistration for. In
 * the wait shape the shard's copies wait on the GPU, the gate defers every
 * eviction until --bell-timeout (5 s by default), and the grants below come
 * back BUSY: that build leaves this test out. */
#ifndef RING_TEST_WAIT
START_TEST(test_a_ring_waiting_for_its_words_defers_no_eviction)
{
    struct rc r;
    union lt_msg_buffer buf;
    rc_make(&r, CAPS);
    struct lt_ring_id ring = ring_open(&r, 2, NULL);
    unsigned char img[2 * SLOT_BYTES];
    th_fill(img, sizeof img, 43);
    union lt_op_args a = {.copy = {.offset = 0, .length = sizeof img}};
    const uint64_t rid = shard_send(&r, ring, 1, sizeof img, LT_OP_COPY_H2D, &a);
    sleep_ms(100); /* queued on the agent, its words unstored for longer than the gate's 30 ms */

    /* B: three segments, two fit beside A's slots, then each of the first
     * two again: every lease from the third on evicts another. */
    int b = th_hello(ag.sock, 0, NULL);
    struct lt_segment_id seg[3];
    void *map[3];
    for (int i = 0; i < 3; i++) {
        int fd = th_memfd(EV_SEG, TH_GOOD_SEALS, 0x70 + (uint64_t)i, &map[i]);
        seg[i] = th_offer(b, fd, EV_SEG, LT_CLASS_PINNED, 10 + (uint64_t)i);
        close(fd);
    }
    for (int k = 0; k < 5; k++) {
        const int i = k < 3 ? k : k - 3;
        const uint64_t t0 = now_ms();
        struct lt_lease_grant_entry g = th_lease(b, seg[i], 0, EV_SEG, LT_CLASS_PINNED);
        const uint64_t took = now_ms() - t0;
        ck_assert_msg(g.status == LT_OK && g.mem_class == LT_CLASS_PINNED,
                      "lease %d of B's segment %d, needing an eviction from the third on, "
                      "while A's shard waits for its words: %s (class %u) after %" PRIu64 " ms",
                      k, i, lt_error_name(g.status), g.mem_class, took);
        ck_assert_msg(took < 3000, "lease %d took %" PRIu64 " ms: the eviction waited for A's ring",
                      k, took);
        uint64_t rel = th_release_send(b, g.lease);
        th_expect(b, &buf, LT_MSG_RELEASE_COMPLETE);
        ck_assert_uint_eq(buf.hdr.request_id, rel);
    }
    /* A's shard was neither forced nor answered: it runs once stored. */
    th_expect_silence(r.c, 50);
    chunks_store(&r, img, sizeof img, 1, 0, 2);
    ck_assert_uint_eq(completion_expect(&r, &buf, rid)->status, LT_OK);
    const struct lt_msg_ring_closed *cl = ring_close(&r, ring, &buf);
    ck_assert_uint_eq(cl->shards, 1);
    for (int i = 0; i < 3; i++)
        munmap(map[i], EV_SEG);
    close(b);
    rc_done(&r);
}
END_TEST
#endif

#ifdef RING_TEST_WAIT
/* In the wait shape a shard whose client never stores its words holds the
 * GPU, and an eviction behind it, until --bell-timeout; then the agent
 * stores the words the shard awaits and answers it BUSY, and the eviction
 * goes on. The shard has 6 chunks on 4 slots, so two slots' words must rise
 * past their first chunk to the shard's last there (one store a slot:
 * gpu/cuda/ring_words.h); a word left at its first chunk holds the stream,
 * the eviction and the answer. */
START_TEST(test_a_stalled_wait_shape_ring_is_forced_after_the_bell_timeout)
{
    struct rc r;
    union lt_msg_buffer buf;
    rc_make(&r, CAPS);
    struct lt_ring_id ring = ring_open(&r, 2, NULL);
    const uint64_t len = 6 * SLOT_BYTES;
    union lt_op_args a = {.copy = {.offset = 0, .length = len}};
    const uint64_t rid = shard_send(&r, ring, 1, len, LT_OP_COPY_H2D, &a);
    sleep_ms(100);

    /* Offers that need room wait (BUSY, retry) while the stalled ring
     * holds the unregistrations back, until the agent forces it. */
    int b = th_hello(ag.sock, 0, NULL);
    struct lt_segment_id seg[3];
    void *map[3];
    for (int i = 0; i < 3; i++) {
        int fd = th_memfd(EV_SEG, TH_GOOD_SEALS, 0x90 + (uint64_t)i, &map[i]);
        for (int t = 0;; t++) {
            const uint64_t orid = th_offer_send(b, &fd, 1, EV_SEG, LT_CLASS_PINNED);
            ck_assert_int_gt(th_recv(b, &buf, TH_TIMEOUT_MS), 0);
            ck_assert_uint_eq(buf.hdr.request_id, orid);
            if (buf.hdr.type == LT_MSG_SEGMENT_ACCEPT) {
                seg[i] = ((const struct lt_msg_segment_accept *)(const void *)buf.bytes)->segment;
                break;
            }
            const struct lt_msg_error *e = (const void *)buf.bytes;
            ck_assert_msg(buf.hdr.type == LT_MSG_ERROR && e->code == LT_E_BUSY && t < 100,
                          "offer %d, try %d: expected ACCEPT or BUSY (retry), found %s", i, t,
                          buf.hdr.type == LT_MSG_ERROR ? e->message : "another message");
            sleep_ms(50);
        }
        close(fd);
    }
    for (int k = 0; k < 4; k++) {
        const int i = k < 3 ? k : k - 3;
        struct lt_lease_grant_entry g = th_lease(b, seg[i], 0, EV_SEG, LT_CLASS_PINNED);
        ck_assert_msg(g.status == LT_OK && g.mem_class == LT_CLASS_PINNED,
                      "lease %d of the other client's segment %d (an eviction from the third "
                      "on, behind the stalled ring until --bell-timeout): %s (class %u)",
                      k, i, lt_error_name(g.status), g.mem_class);
        uint64_t rel = th_release_send(b, g.lease);
        th_expect(b, &buf, LT_MSG_RELEASE_COMPLETE);
        ck_assert_uint_eq(buf.hdr.request_id, rel);
    }
    const struct lt_msg_completion *c = completion_expect(&r, &buf, rid);
    ck_assert_msg(c->status == LT_E_BUSY, "the forced shard: expected BUSY, found %s",
                  lt_error_name(c->status));
    ck_assert(th_file_wait_for(ag.log, "had to store its ring's chunk words", TH_TIMEOUT_MS));
    /* Each slot's word holds the shard's last sequence there. */
    for (uint32_t j = 0; j < SLOTS; j++) {
        const uint64_t want = j == 0 ? 4 : j <= 2 ? j + 4 : 3;
        ck_assert_uint_eq(__atomic_load_n(&r.words[SEQ_OFF / 8 + j], __ATOMIC_ACQUIRE), want);
    }
    ring_close(&r, ring, &buf);
    for (int i = 0; i < 3; i++)
        munmap(map[i], EV_SEG);
    close(b);
    rc_done(&r);
}
END_TEST
#endif

#ifdef RING_TEST_CUDA
/* A GPU fault while a ring streams (the fake driver's, see
 * agent_setup_fault): the shard whose kernel faulted and the one queued
 * behind it are answered GPU_FAULT, nothing hangs, and the agent (its ring
 * dispatcher with it) stops with status 1 and closes the connection. */
START_TEST(test_a_fault_mid_ring_answers_its_shards_and_stops_the_agent)
{
    struct rc r;
    union lt_msg_buffer buf;
    rc_make(&r, CAPS);
    struct lt_ring_id ring = ring_open(&r, 2, NULL);
    unsigned char *img = malloc(200 * KiB);
    ck_assert_ptr_nonnull(img);
    uint64_t so = 0, len = image_verify(img, 160 * KiB, 21, &so);
    union lt_op_args a = {
        .checksum = {.offset = 0, .length = 160 * KiB, .sums_offset = so, .block_size = 16 * KiB}};
    const uint64_t n = chunks_of(len);
    /* The first shard's kernel runs; the second's faults. */
    uint64_t r1 = shard_send(&r, ring, 1, len, LT_OP_CHECKSUM_VERIFY, &a);
    chunks_store(&r, img, len, 1, 0, n);
    ck_assert_uint_eq(completion_expect(&r, &buf, r1)->status, LT_OK);
    uint64_t r2 = shard_send(&r, ring, 1 + n, len, LT_OP_CHECKSUM_VERIFY, &a);
    uint64_t r3 = shard_send(&r, ring, 1 + 2 * n, len, LT_OP_CHECKSUM_VERIFY, &a);
    chunks_store(&r, img, len, 1 + n, 0, n);
    ck_assert_uint_eq(completion_expect(&r, &buf, r2)->status, LT_E_GPU_FAULT);
    /* The third, never stored: answered by the fault path, not left waiting. */
    ck_assert_uint_eq(completion_expect(&r, &buf, r3)->status, LT_E_GPU_FAULT);
    ck_assert_int_eq(th_expect_eof(r.c), 0);
    free(img);
    rc_done(&r);
}
END_TEST
#endif

/* A client that stores its sequence words far ahead without waiting for its
 * done words (every chunk of a 64-chunk shard at once): the agent copies
 * whatever the slots hold, in steps (the polling dispatcher's gate), and
 * the shard completes; the ring still counts every chunk. */
START_TEST(test_a_ring_stored_far_ahead_runs_through)
{
    struct rc r;
    union lt_msg_buffer buf;
    rc_make(&r, CAPS);
    struct lt_msg_ring_open m;
    const uint64_t len = 64 * SLOT_BYTES;
    ring_open_msg(&r, &m, 1, len);
    ck_assert_int_eq(th_send(r.c, &m, sizeof m, NULL, 0), 0);
    th_expect(r.c, &buf, LT_MSG_RING_OPENED);
    const struct lt_ring_id ring = ((const struct lt_msg_ring_opened *)(const void *)buf.bytes)->ring;
    union lt_op_args a = {.copy = {.offset = 0, .length = len}};
    const uint64_t rid = shard_send(&r, ring, 1, len, LT_OP_COPY_H2D, &a);
    for (uint32_t k = 0; k < SLOTS; k++)
        __atomic_store_n(&r.words[SEQ_OFF / 8 + k], 1ull << 40, __ATOMIC_RELEASE);
    ck_assert_uint_eq(completion_expect(&r, &buf, rid)->status, LT_OK);
    const struct lt_msg_ring_closed *cl = ring_close(&r, ring, &buf);
    ck_assert_uint_eq(cl->shards, 1);
    ck_assert_uint_eq(cl->chunks, 64);
    rc_done(&r);
}
END_TEST

/* ---- a client that rewrites its words after its close or drop -------------------- */

/* In the poll shape (and the host agent) the agent loads no more of a
 * ring's words once it is closed or its owner dropped: the client's
 * memory stays mapped in the client, which may go on zeroing its words.
 * In the wait shape the GPU's waits read the words themselves, and such a
 * client holds its ring (docs/reliability.md): that build leaves these
 * tests out. */
#ifndef RING_TEST_WAIT
#ifdef RING_TEST_CUDA
static void ring_counters(uint64_t chunks, uint64_t *copies_p, uint64_t *lapses_p);
#endif

struct zeroer {
    volatile uint64_t *words;
    int stop;
    pthread_t t;
};

static void *zeroer_main(void *arg)
{
    struct zeroer *z = arg;
    while (!__atomic_load_n(&z->stop, __ATOMIC_ACQUIRE))
        for (uint32_t k = 0; k < SLOTS; k++)
            __atomic_store_n(&z->words[SEQ_OFF / 8 + k], 0, __ATOMIC_RELAXED);
    return NULL;
}

static void zeroer_start(struct zeroer *z, volatile uint64_t *words)
{
    z->words = words;
    z->stop = 0;
    ck_assert_int_eq(pthread_create(&z->t, NULL, zeroer_main, z), 0);
}

static void zeroer_stop(struct zeroer *z)
{
    __atomic_store_n(&z->stop, 1, __ATOMIC_RELEASE);
    pthread_join(z->t, NULL);
}

/* Whether the agent holds only @n's own client and leases, within @ms. */
static bool only_client_left(const struct rc *n, int ms)
{
    union lt_msg_buffer buf;
    for (int t = 0; t <= ms / 10; t++) {
        th_stats(n->c, LT_STATS_F_ALL_CLIENTS, &buf);
        const struct lt_msg_stats_reply *s = (const void *)buf.bytes;
        if (s->client_count == 1 && s->classes[LT_CLASS_PINNED].live_leases == 1 &&
            s->classes[LT_CLASS_MAPPED].live_leases == 1)
            return true;
        sleep_ms(10);
    }
    return false;
}

START_TEST(test_a_dropped_client_rewriting_its_words_is_drained)
{
    struct rc r, n;
    rc_make(&r, CAPS);
    struct lt_ring_id ring = ring_open(&r, 2, NULL);
    union lt_op_args a = {.copy = {.offset = 0, .length = 3 * SLOT_BYTES}};
    shard_send(&r, ring, 1, 3 * SLOT_BYTES, LT_OP_COPY_H2D, &a); /* never stored */
    sleep_ms(50);
    struct zeroer z;
    zeroer_start(&z, r.words);
    close(r.c); /* its memory stays mapped here, its words zeroed again and again */
    r.c = -1;
    rc_make(&n, CAPS);
    const bool drained = only_client_left(&n, 3000);
    zeroer_stop(&z);
    ck_assert_msg(drained, "the dropped client's ring was not drained in 3 s while it rewrote its "
                           "words: its leases and ring are held");
    rc_done(&n);
    munmap(r.slots, MiB);
    munmap((void *)r.words, WORDS_BYTES);
}
END_TEST

START_TEST(test_a_ring_closed_while_its_words_are_rewritten_closes)
{
    struct rc r;
    union lt_msg_buffer buf;
    rc_make(&r, CAPS);
    struct lt_ring_id ring = ring_open(&r, 2, NULL);
    unsigned char img[2 * SLOT_BYTES];
    th_fill(img, sizeof img, 53);
    union lt_op_args a = {.copy = {.offset = 0, .length = sizeof img}};
    const uint64_t r1 = shard_send(&r, ring, 1, sizeof img, LT_OP_COPY_H2D, &a);
    const uint64_t r2 = shard_send(&r, ring, 3, sizeof img, LT_OP_COPY_H2D, &a); /* never stored */
    chunks_store(&r, img, sizeof img, 1, 0, 2);
    ck_assert_uint_eq(completion_expect(&r, &buf, r1)->status, LT_OK);
    struct zeroer z;
    zeroer_start(&z, r.words);
    struct lt_msg_ring_close m;
    lt_msg_init(&m, sizeof m, LT_MSG_RING_CLOSE, th_rid());
    m.ring = ring;
    ck_assert_int_eq(th_send(r.c, &m, sizeof m, NULL, 0), 0);
    /* The unstored shard is answered cancelled, then the ring closes. */
    ck_assert_uint_eq(completion_expect(&r, &buf, r2)->status, LT_E_SHUTTING_DOWN);
    th_expect(r.c, &buf, LT_MSG_RING_CLOSED);
    zeroer_stop(&z);
    const struct lt_msg_ring_closed *cl = (const void *)buf.bytes;
    ck_assert_int_eq(lt_validate_reply_matches(&m, cl), LT_OK);
    ck_assert_uint_eq(cl->shards, 1);
    ck_assert_uint_eq(cl->chunks, 2);
#ifdef RING_TEST_CUDA
    /* The cancelled shard's chunks were never copied: the first shard's
     * two chunks took one or two copies, and that is all. */
    uint64_t copies = 0, lapses = 0;
    ring_counters(4, &copies, &lapses);
    ck_assert_msg(copies <= 2, "%" PRIu64 " copies: the cancelled shard's chunks were copied",
                  copies);
#endif
    rc_done(&r);
}
END_TEST
#endif

#ifdef RING_TEST_CUDA
/* ---- the rings' device memory ------------------------------------------------------ */

/* A ring here reserves 2 images of 512 KiB (its largest shard) + 256 KiB
 * (room for a widened query): 1.5 MiB. */
static void agent_setup_device_budget(void)
{
    signal(SIGPIPE, SIG_IGN);
    const char *const extra[] = {RING_VARIANT_ARGS "--device-budget", "6M",
                                 "--max-client-device", "4M", NULL};
    th_agent_start(&ag, NULL, extra);
}

/* Ring @k of a client, its words at their own offsets in the words lease
 * (ring 0's where chunks_store writes them): LT_OK with the ring's id, or the refusal's code with its message. */
static uint32_t ring_open_nth(const struct rc *r, int k, struct lt_ring_id *ring_p, char *msg,
                              size_t msglen)
{
    struct lt_msg_ring_open m;
    union lt_msg_buffer buf;
    ring_open_msg(r, &m, 2, 512 * KiB);
    if (k > 0) { /* ring 0 where chunks_store writes */
        m.seq_offset = 2048 + 64u * (uint32_t)k;
        m.done_offset = m.seq_offset + 8u * SLOTS;
    }
    ck_assert_int_eq(th_send(r->c, &m, sizeof m, NULL, 0), 0);
    ck_assert_int_gt(th_recv(r->c, &buf, TH_TIMEOUT_MS), 0);
    ck_assert_uint_eq(buf.hdr.request_id, m.hdr.request_id);
    if (buf.hdr.type == LT_MSG_ERROR) {
        const struct lt_msg_error *e = (const void *)buf.bytes;
        snprintf(msg, msglen, "%s", e->message);
        return e->code;
    }
    ck_assert_uint_eq(buf.hdr.type, LT_MSG_RING_OPENED);
    *ring_p = ((const struct lt_msg_ring_opened *)(const void *)buf.bytes)->ring;
    return LT_OK;
}

/* Under a budget of 6 MiB, 4 MiB a client: A gets two rings and is
 * refused the third (its own bound), B gets two and is refused the third
 * (all rings' bound); once A closed one, B is refused by its own bound and
 * A opens one again. */
START_TEST(test_rings_device_memory_is_budgeted_per_client_and_in_all)
{
    struct rc a, b;
    union lt_msg_buffer buf;
    struct lt_ring_id ra[2], rb[2];
    char msg[LT_ERROR_MSG_LEN];
    rc_make(&a, CAPS);
    rc_make(&b, CAPS);
    for (int k = 0; k < 2; k++)
        ck_assert_uint_eq(ring_open_nth(&a, k, &ra[k], msg, sizeof msg), LT_OK);
    struct lt_ring_id no;
    ck_assert_uint_eq(ring_open_nth(&a, 2, &no, msg, sizeof msg), LT_E_LIMIT);
    ck_assert_msg(strstr(msg, "needs 2 MiB of device memory, 1 MiB left to this client"),
                  "A's third ring refused with '%s'", msg);
    for (int k = 0; k < 2; k++)
        ck_assert_uint_eq(ring_open_nth(&b, k, &rb[k], msg, sizeof msg), LT_OK);
    ck_assert_uint_eq(ring_open_nth(&b, 2, &no, msg, sizeof msg), LT_E_LIMIT);
    ck_assert_msg(strstr(msg, "needs 2 MiB of device memory, 0 MiB left to all clients"),
                  "B's third ring refused with '%s'", msg);
    /* A ring that ran a shard gives its memory back when it is released. */
    unsigned char img[SLOT_BYTES];
    th_fill(img, sizeof img, 59);
    union lt_op_args op = {.copy = {.offset = 0, .length = sizeof img}};
    const uint64_t rid = shard_send(&a, ra[0], 1, sizeof img, LT_OP_COPY_H2D, &op);
    chunks_store(&a, img, sizeof img, 1, 0, 1);
    ck_assert_uint_eq(completion_expect(&a, &buf, rid)->status, LT_OK);
    ck_assert_uint_eq(ring_close(&a, ra[0], &buf)->shards, 1);
    /* 1.5 MiB free in all now: still not B's (1 MiB left to it), A's again. */
    ck_assert_uint_eq(ring_open_nth(&b, 2, &no, msg, sizeof msg), LT_E_LIMIT);
    ck_assert_msg(strstr(msg, "1 MiB left to this client"), "B's third ring: '%s'", msg);
    ck_assert_uint_eq(ring_open_nth(&a, 3, &ra[0], msg, sizeof msg), LT_OK);
    rc_done(&b);
    rc_done(&a);
}
END_TEST
#endif

#if defined(RING_TEST_CUDA) && !defined(RING_TEST_WAIT)
/* ---- copies that wait to join (--ring-join 2) ---------------------------------- */

/* The dispatcher's counters of released rings, from the stats line the
 * agent logs on SIGUSR1, once they count @chunks ring chunks. */
static void ring_counters(uint64_t chunks, uint64_t *copies_p, uint64_t *lapses_p)
{
    char needle[64];
    snprintf(needle, sizeof needle, "ring_chunks=%" PRIu64 " ", chunks);
    ck_assert_int_eq(kill(ag.pid, SIGUSR1), 0);
    ck_assert_msg(th_file_wait_for(ag.log, needle, TH_TIMEOUT_MS), "no '%s' in %s", needle,
                  ag.log);
    FILE *f = fopen(ag.log, "r");
    ck_assert_ptr_nonnull(f);
    char line[1024];
    bool found = false;
    while (fgets(line, sizeof line, f)) {
        const char *c = strstr(line, needle), *k = c ? strstr(c, "ring_copies=") : NULL;
        const char *l = k ? strstr(k, "ring_join_lapses=") : NULL;
        if (!l)
            continue;
        ck_assert_int_eq(sscanf(k, "ring_copies=%" SCNu64, copies_p), 1);
        ck_assert_int_eq(sscanf(l, "ring_join_lapses=%" SCNu64, lapses_p), 1);
        found = true;
    }
    fclose(f);
    ck_assert_msg(found, "no ring_copies= and ring_join_lapses= after '%s' in %s", needle, ag.log);
}

/* Stores chunks [0, chunks_of(@len)) of @img one by one, @gap_us apart:
 * a staging thread whose next chunk takes that long to read. */
static void chunks_store_spaced(struct rc *r, const unsigned char *img, uint64_t len,
                                uint64_t first, unsigned gap_us)
{
    for (uint64_t i = 0; i < chunks_of(len); i++) {
        if (i > 0)
            usleep(gap_us);
        chunks_store(r, img, len, first, i, i + 1);
    }
}

/* Streams nine verify shards (35 chunks) through a ring of SLOTS slots,
 * the chunks stored 300 us apart, slower than the dispatcher sweeps; every
 * shard verifies (joined copies put every byte at its place in the
 * image). Shard 1 is sequences 1-3 in slots 1, 2, 3, then 8 shards of 4
 * chunks in slots 0-3 each. Returns the chunks; the agent's counters of
 * the ring in @copies_p and @lapses_p. */
static uint64_t nine_shards_stored_apart(uint64_t *copies_p, uint64_t *lapses_p)
{
    struct rc r;
    union lt_msg_buffer buf;
    rc_make(&r, CAPS);
    struct lt_ring_id ring = ring_open(&r, 2, NULL);
    unsigned char *img = malloc(4 * SLOT_BYTES);
    ck_assert_ptr_nonnull(img);
    uint64_t seq = 1, chunks = 0;
    for (int k = 0; k < 9; k++) {
        const uint64_t data = k == 0 ? 180 * KiB : 240 * KiB;
        uint64_t so = 0, len = image_verify(img, data, 90 + (uint64_t)k, &so);
        ck_assert_uint_eq(chunks_of(len), k == 0 ? 3 : 4);
        union lt_op_args a = {
            .checksum = {.offset = 0, .length = data, .sums_offset = so, .block_size = 16 * KiB}};
        const uint64_t rid = shard_send(&r, ring, seq, len, LT_OP_CHECKSUM_VERIFY, &a);
        chunks_store_spaced(&r, img, len, seq, 300);
        const struct lt_msg_completion *c = completion_expect(&r, &buf, rid);
        ck_assert_msg(c->status == LT_OK, "shard %d: %s", k, lt_error_name(c->status));
        seq += chunks_of(len);
        chunks += chunks_of(len);
    }
    ck_assert_uint_eq(ring_close(&r, ring, &buf)->chunks, chunks);
    ring_counters(chunks, copies_p, lapses_p);
    free(img);
    rc_done(&r);
    return chunks;
}

/* Streams one 2-chunk copy shard, its first chunk stored alone: waits for
 * that chunk's done word (how long it took in @took_ms_p), then stores the
 * second and expects the completion. The agent's counters of the ring in
 * @copies_p and @lapses_p. */
static void first_chunk_stored_alone(uint64_t *took_ms_p, uint64_t *copies_p, uint64_t *lapses_p)
{
    struct rc r;
    union lt_msg_buffer buf;
    rc_make(&r, CAPS);
    struct lt_ring_id ring = ring_open(&r, 2, NULL);
    unsigned char img[2 * SLOT_BYTES];
    th_fill(img, sizeof img, 47);
    union lt_op_args a = {.copy = {.offset = 0, .length = sizeof img}};
    /* Sequences 1 and 2, slots 1 and 2: the first may wait for the second. */
    const uint64_t rid = shard_send(&r, ring, 1, sizeof img, LT_OP_COPY_H2D, &a);
    chunks_store(&r, img, sizeof img, 1, 0, 1);
    const uint64_t t0 = now_ms();
    volatile uint64_t *done1 = &r.words[DONE_OFF / 8 + 1];
    while (__atomic_load_n(done1, __ATOMIC_ACQUIRE) < 1 && now_ms() - t0 < TH_TIMEOUT_MS)
        sleep_ms(1);
    *took_ms_p = now_ms() - t0;
    ck_assert_msg(__atomic_load_n(done1, __ATOMIC_ACQUIRE) >= 1,
                  "the first chunk, its neighbour not stored, was not copied in %" PRIu64 " ms",
                  *took_ms_p);
    th_expect_silence(r.c, 20); /* the shard waits for its second chunk */
    chunks_store(&r, img, sizeof img, 1, 1, 2);
    ck_assert_uint_eq(completion_expect(&r, &buf, rid)->status, LT_OK);
    ck_assert_uint_eq(ring_close(&r, ring, &buf)->chunks, 2);
    ring_counters(2, copies_p, lapses_p);
    rc_done(&r);
}

/* With --ring-join 2, each chunk whose neighbour is the shard's and in the
 * next slot waits for it, so the copies are pairs (shard 1: 1+2, 3; the
 * others: 0+1, 2+3: 18 in all), against 35 without the join. */
START_TEST(test_chunks_stored_apart_are_copied_in_pairs)
{
    uint64_t copies = 0, lapses = 0;
    const uint64_t chunks = nine_shards_stored_apart(&copies, &lapses);
    /* A few pairs may lapse where this thread was not scheduled for 1 ms;
     * fewer copies are the dispatcher's idle sleep (up to 1 ms) before a
     * shard's first chunk, which lets more chunks meet. */
    ck_assert_msg(copies <= 22,
                  "%" PRIu64 " chunks stored 300 us apart went in %" PRIu64
                  " copies (%" PRIu64 " lapsed waits); expected about 18 (pairs), at most 22",
                  chunks, copies, lapses);
}
END_TEST

/* With --ring-join 3 a ring of 4 slots has no room for two copies of 3
 * chunks (its thread would hold every slot and wait for the very copy
 * that waits for it), so no chunk waits for its neighbours: a shard's
 * first chunk, stored alone, is copied without waiting, and no lapse is
 * counted (with the wait it lapses after 1 ms: one lapse). Counted, not
 * timed, so a loaded machine does not change the answer. */
START_TEST(test_a_ring_too_small_for_two_joined_copies_never_waits)
{
    uint64_t took = 0, copies = 0, lapses = 0;
    first_chunk_stored_alone(&took, &copies, &lapses);
    ck_assert_msg(lapses == 0,
                  "a chunk of a %u-slot ring waited for its neighbours under --ring-join 3 "
                  "(%" PRIu64 " lapse(s), %" PRIu64 " copies); expected no wait: a ring needs "
                  "2 x 3 slots for that",
                  SLOTS, lapses, copies);
    ck_assert_uint_eq(copies, 2);
}
END_TEST

/* ---- result slots (--result-slots 1) ------------------------------------------------ */

/* One result slot for every client: a client whose ring holds shards it
 * never stores holds none of it (a shard takes its slot once its chunks
 * are on the device), so another client's shards still run; two of them
 * stored back to back take the slot in turn; and the first client's
 * shards run once it stores them. Before, the unstored shards took the
 * slot at RING_SHARD and the other client was refused LIMIT. */
START_TEST(test_unstored_ring_shards_hold_no_result_slot)
{
    struct rc a, b;
    union lt_msg_buffer buf;
    rc_make(&a, CAPS);
    rc_make(&b, CAPS);
    const struct lt_ring_id ra = ring_open(&a, 2, NULL), rb = ring_open(&b, 2, NULL);
    unsigned char *img = malloc(4 * SLOT_BYTES);
    ck_assert_ptr_nonnull(img);
    uint64_t so = 0;
    const uint64_t data = 180 * KiB, len = image_verify(img, data, 77, &so);
    ck_assert_uint_eq(chunks_of(len), 3);
    const union lt_op_args v = {
        .checksum = {.offset = 0, .length = data, .sums_offset = so, .block_size = 16 * KiB}};
    const uint64_t a1 = shard_send(&a, ra, 1, len, LT_OP_CHECKSUM_VERIFY, &v);
    const uint64_t a2 = shard_send(&a, ra, 4, len, LT_OP_CHECKSUM_VERIFY, &v);
    th_expect_silence(a.c, 50); /* neither refused */
    const uint64_t b1 = shard_send(&b, rb, 1, len, LT_OP_CHECKSUM_VERIFY, &v);
    const uint64_t b2 = shard_send(&b, rb, 4, len, LT_OP_CHECKSUM_VERIFY, &v);
    chunks_store(&b, img, len, 1, 0, 3);
    chunks_store(&b, img, len, 4, 0, 3);
    const struct lt_msg_completion *c = completion_expect(&b, &buf, b1);
    ck_assert_msg(c->status == LT_OK, "the other client's first shard: %s (expected OK: the "
                  "unstored shards must hold no result slot)", lt_error_name(c->status));
    ck_assert_uint_eq(c->result.checksum.bad_blocks, 0);
    c = completion_expect(&b, &buf, b2);
    ck_assert_msg(c->status == LT_OK, "its second shard: %s", lt_error_name(c->status));
    chunks_store(&a, img, len, 1, 0, 3);
    chunks_store(&a, img, len, 4, 0, 3);
    ck_assert_uint_eq(completion_expect(&a, &buf, a1)->status, LT_OK);
    ck_assert_uint_eq(completion_expect(&a, &buf, a2)->status, LT_OK);
    ck_assert_uint_eq(ring_close(&a, ra, &buf)->chunks, 6);
    ck_assert_uint_eq(ring_close(&b, rb, &buf)->chunks, 6);
    free(img);
    rc_done(&a);
    rc_done(&b);
}
END_TEST

/* A chunk whose neighbour never comes waits a bounded time, then goes
 * alone: the client that does not store its next word slows only itself. */
START_TEST(test_a_join_waits_a_bounded_time_for_the_neighbour)
{
    uint64_t took = 0, copies = 0, lapses = 0;
    first_chunk_stored_alone(&took, &copies, &lapses);
    ck_assert_msg(took < 1000, "the first chunk waited %" PRIu64 " ms for its neighbour", took);
    ck_assert_uint_eq(copies, 2);
    ck_assert_uint_eq(lapses, 1);
}
END_TEST
#endif

#ifdef RING_TEST_WAIT
/* In the wait shape the GPU waits on the client's own words, and a client
 * that stores them again after the agent's release holds the stream (and
 * every unregistration behind it): such a ring trusts its client, so only
 * the agent's uid and root may open one. A client of another uid (nobody,
 * through --group and --allow-uid) is refused UNSUPPORTED before anything
 * is queued; root's ring opens on the same agent. Needs root to become
 * another uid. */
START_TEST(test_a_wait_shape_ring_is_refused_to_another_uid)
{
    struct passwd *pw = getpwnam("nobody");
    struct group *gr = pw ? getgrgid(pw->pw_gid) : NULL;
    if (geteuid() != 0 || !pw || !gr || pw->pw_uid == 0) {
        printf("needs root and a user nobody to act as another uid: not tested here\n");
        return;
    }
    char dir[64] = "/tmp/ga-ringuid-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ck_assert_int_eq(chmod(dir, 0711), 0); /* others may traverse to run/ */
    char run[96], uidarg[32];
    snprintf(run, sizeof run, "%s/run", dir);
    snprintf(uidarg, sizeof uidarg, "%u", (unsigned)pw->pw_uid);
    signal(SIGPIPE, SIG_IGN);
    const char *const extra[] = {RING_VARIANT_ARGS "--group", gr->gr_name, "--allow-uid", uidarg,
                                 "--allow-uid", "0", NULL};
    th_agent_start(&ag, run, extra);

    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (setgroups(0, NULL) < 0 || setgid(pw->pw_gid) < 0 || setuid(pw->pw_uid) < 0)
            _exit(20);
        struct rc r;
        rc_make(&r, CAPS);
        struct lt_msg_ring_open m;
        ring_open_msg(&r, &m, 2, 512 * KiB);
        if (th_send(r.c, &m, sizeof m, NULL, 0) != 0)
            _exit(21);
        union lt_msg_buffer buf;
        ssize_t n = th_recv(r.c, &buf, TH_TIMEOUT_MS);
        if (n <= 0)
            _exit(22);
        if (buf.hdr.type != LT_MSG_ERROR)
            _exit(23); /* opened */
        const struct lt_msg_error *e = (const void *)buf.bytes;
        _exit(e->code == LT_E_UNSUPPORTED && strstr(e->message, uidarg) ? 0 : 24);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st));
    ck_assert_msg(WEXITSTATUS(st) == 0,
                  "uid %s's RING_OPEN on a wait-shape agent: expected UNSUPPORTED naming the uid, "
                  "found exit %d (20 setup, 22 no answer, 23 opened, 24 another refusal)",
                  uidarg, WEXITSTATUS(st));

    struct rc r;
    rc_make(&r, CAPS);
    ring_open(&r, 2, NULL);
    rc_done(&r);
    agent_teardown();
    rmdir(dir);
}
END_TEST
#endif

static Suite *ring_suite(void)
{
    Suite *s = suite_create("server_ring");
    TCase *tc = tcase_create("rings");
    tcase_add_checked_fixture(tc, agent_setup, agent_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_ring_runs_each_op_on_its_image);
    tcase_add_test(tc, test_ring_refusals_say_what_was_wrong);
    tcase_add_test(tc, test_ring_close_answers_stored_shards_and_cancels_the_rest);
    tcase_add_test(tc, test_ring_holds_its_leases_until_it_is_closed);
    tcase_add_test(tc, test_client_dying_with_a_ring_open_is_drained);
    tcase_add_test(tc, test_a_ring_stored_far_ahead_runs_through);
#ifndef RING_TEST_WAIT
    tcase_add_test(tc, test_a_dropped_client_rewriting_its_words_is_drained);
    tcase_add_test(tc, test_a_ring_closed_while_its_words_are_rewritten_closes);
#endif
    suite_add_tcase(s, tc);
    tc = tcase_create("lagged host functions");
    tcase_add_checked_fixture(tc, agent_setup_lagged, agent_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_ring_copies_do_not_wait_for_the_shard_befores_completion);
    suite_add_tcase(s, tc);
#ifdef RING_TEST_CUDA
    if (getenv("FAKECUDA")) { /* only the fake driver faults on request */
        tc = tcase_create("a device fault");
        tcase_add_checked_fixture(tc, agent_setup_fault, agent_teardown_fault);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_a_fault_mid_ring_answers_its_shards_and_stops_the_agent);
        suite_add_tcase(s, tc);
    }
#endif
#ifdef RING_TEST_CUDA
    tc = tcase_create("the rings' device memory");
    tcase_add_checked_fixture(tc, agent_setup_device_budget, agent_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_rings_device_memory_is_budgeted_per_client_and_in_all);
    suite_add_tcase(s, tc);
#endif
#if defined(RING_TEST_CUDA) && !defined(RING_TEST_WAIT)
    tc = tcase_create("copies that wait to join");
    tcase_add_checked_fixture(tc, agent_setup_join, agent_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_chunks_stored_apart_are_copied_in_pairs);
    tcase_add_test(tc, test_a_join_waits_a_bounded_time_for_the_neighbour);
    suite_add_tcase(s, tc);
    tc = tcase_create("one result slot");
    tcase_add_checked_fixture(tc, agent_setup_one_result_slot, agent_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_unstored_ring_shards_hold_no_result_slot);
    suite_add_tcase(s, tc);
    tc = tcase_create("a join larger than half the ring");
    tcase_add_checked_fixture(tc, agent_setup_join3, agent_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_a_ring_too_small_for_two_joined_copies_never_waits);
    suite_add_tcase(s, tc);
#endif
    tc = tcase_create("a stalled ring and evictions");
#ifndef RING_TEST_WAIT
    tcase_add_checked_fixture(tc, agent_setup_small_budget, agent_teardown);
    tcase_add_test(tc, test_a_ring_waiting_for_its_words_defers_no_eviction);
#else
    tcase_add_checked_fixture(tc, agent_setup_small_budget_short_timeout, agent_teardown);
    tcase_add_test(tc, test_a_stalled_wait_shape_ring_is_forced_after_the_bell_timeout);
#endif
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
#ifdef RING_TEST_WAIT
    tc = tcase_create("a ring of another uid");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_a_wait_shape_ring_is_refused_to_another_uid);
    suite_add_tcase(s, tc);
#endif
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(ring_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
