/* lease-agent with the CUDA backend, over its socket: a real agent process
 * per test on a private socket (tests/gpu/server/harness.c), sealed memfd
 * segments written by the test, and every op on every memory path checked
 * against the C references, then the lifetimes (bells, releases, a killed
 * client, the result-slot floor, the bell poller) and control requests.
 * Needs an NVIDIA GPU: run through gpu_gate, skipped (77) elsewhere; the
 * _fakecuda variant runs it against tests/fakecuda. One file of about 900
 * lines: every case drives one agent through the same segment, submit and
 * message helpers, which lead the file. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/time.h"
#include "harness.h"
#include "kernels/blockhash_ref.h"
#include "kernels/scan_ref.h"

#define KiB 1024ull
#define MiB (1024ull * KiB)
#define GiB (1024ull * MiB)
#define CAPS (LT_CAP_DOORBELL | LT_CAP_DONE_WORD | LT_CAP_TIMING)

/* Small pipeline chunks, so a few MiB already take several double-buffered
 * steps; budgets large enough for the 1 GiB segment. */
static const char *const agent_args[] = {"--pinned-budget", "3G", "--mapped-budget", "256M",
                                         "--chunk-bytes",   "1M", "--seals",         "legacy",
                                         NULL};

/* ---- a segment the test writes --------------------------------------------- */

struct seg {
    struct lt_segment_id id;
    unsigned char *map;
    uint64_t size;
};

static struct seg seg_offer(int fd, uint64_t size, uint32_t cls, uint64_t seed)
{
    struct seg s = {.size = size};
    void *map = NULL;
    /* Old seals, --seals legacy: words and hits in these segments, as
     * before the words area (tests/hostile covers the sealed way). */
    int mfd = th_memfd(size, TH_OLD_SEALS, seed, &map);
    s.map = map;
    s.id = th_offer(fd, mfd, size, cls, seed);
    close(mfd); /* the agent holds its own copy of the fd */
    return s;
}

static struct lt_lease_id lease_ok(int fd, struct seg *s, uint64_t off, uint64_t len, uint32_t cls)
{
    struct lt_lease_grant_entry g = th_lease(fd, s->id, off, len, cls);
    ck_assert_msg(g.status == LT_OK, "lease of %" PRIu64 " bytes as %s refused: %s", len,
                  lt_class_name(cls), lt_error_name(g.status));
    ck_assert_uint_eq(g.mem_class, cls);
    return g.lease;
}

/* ---- messages in any order ------------------------------------------------ */

static void expect_any(int fd, union lt_msg_buffer *b)
{
    ssize_t n = th_recv(fd, b, TH_TIMEOUT_MS);
    ck_assert_msg(n > 0, "expected a message, found %s",
                  n == 0 ? "end of stream" : strerror((int)-n));
}

#define STASH 32
static union lt_msg_buffer stash[STASH];
static int nstash;

/* The next message answering @rid with @type; others that arrive first are
 * kept for later calls. Returns the message in @out. */
static void wait_for(int fd, uint64_t rid, uint16_t type, union lt_msg_buffer *out)
{
    for (int i = 0; i < nstash; i++) {
        if (stash[i].hdr.request_id == rid && stash[i].hdr.type == type) {
            *out = stash[i];
            stash[i] = stash[--nstash];
            return;
        }
    }
    for (;;) {
        expect_any(fd, out);
        if (out->hdr.request_id == rid && out->hdr.type == type)
            return;
        if (out->hdr.type == LT_MSG_ERROR && out->hdr.request_id == rid) {
            const struct lt_msg_error *e = (const void *)out->bytes;
            ck_abort_msg("expected %s for request %" PRIu64 ", found ERROR %s: %s",
                         lt_msg_type_name(type), rid, lt_error_name(e->code), e->message);
        }
        ck_assert_msg(nstash < STASH, "too many unexpected messages");
        stash[nstash++] = *out;
    }
}

static void expect_error_for(int fd, uint64_t rid, uint32_t code)
{
    union lt_msg_buffer b;
    wait_for(fd, rid, LT_MSG_ERROR, &b);
    const struct lt_msg_error *e = (const void *)b.bytes;
    ck_assert_msg(e->code == code, "expected ERROR %s, found %s: %s", lt_error_name(code),
                  lt_error_name(e->code), e->message);
}

/* ---- submits ------------------------------------------------------------------ */

struct words {
    struct seg *seg; /* MAPPED segment holding both words, or NULL */
    uint64_t bell_off, bell_seq;
    uint64_t done_off, done_seq;
};

static uint64_t submit(int fd, struct lt_lease_id lease, struct lt_stream_id stream, uint16_t op,
                       const union lt_op_args *args, uint32_t flags, const struct words *w)
{
    struct lt_msg_submit m;
    memset(&m, 0, sizeof m);
    m.lease = lease;
    m.stream = stream;
    m.op = op;
    m.flags = flags;
    m.args = *args;
    if (w && w->bell_seq) {
        m.flags |= LT_SUBMIT_F_WAIT_BELL;
        m.bell = (struct lt_word_ref){.segment = w->seg->id, .offset = w->bell_off};
        m.bell_seq = w->bell_seq;
    }
    if (w && w->done_seq) {
        m.flags |= LT_SUBMIT_F_SIGNAL_DONE;
        m.done = (struct lt_word_ref){.segment = w->seg->id, .offset = w->done_off};
        m.done_seq = w->done_seq;
    }
    return th_submit_send(fd, &m);
}

static struct lt_msg_completion completion_of(int fd, uint64_t rid)
{
    union lt_msg_buffer b;
    wait_for(fd, rid, LT_MSG_COMPLETION, &b);
    struct lt_msg_completion c;
    memcpy(&c, b.bytes, sizeof c);
    return c;
}

static union lt_op_args checksum_args(uint64_t off, uint64_t len, uint64_t sums_off, uint32_t bs)
{
    union lt_op_args a;
    memset(&a, 0, sizeof a);
    a.checksum = (struct lt_op_checksum_verify){
        .offset = off, .length = len, .sums_offset = sums_off, .block_size = bs};
    return a;
}

static union lt_op_args copy_args(uint64_t off, uint64_t len)
{
    union lt_op_args a;
    memset(&a, 0, sizeof a);
    a.copy = (struct lt_op_copy_h2d){.offset = off, .length = len};
    return a;
}

static const struct lt_stream_id S0 = {0, 0};

static void release_ok(int fd, struct lt_lease_id lease)
{
    uint64_t rid = th_release_send(fd, lease);
    union lt_msg_buffer b;
    wait_for(fd, rid, LT_MSG_RELEASE_COMPLETE, &b);
    ck_assert_uint_eq(((const struct lt_msg_release_complete *)(const void *)b.bytes)->status,
                      LT_OK);
}

/* A MAPPED page for a SUBMIT's words: the bell at offset 64 and the done
 * word at 128 (struct words' offsets in the tests below), both zero. */
static struct seg bells_offer(int fd, uint64_t seed, uint64_t **bell_p, uint64_t **done_p)
{
    struct seg bells = seg_offer(fd, 4096, LT_CLASS_MAPPED, seed);
    *bell_p = (uint64_t *)(void *)(bells.map + 64);
    *done_p = (uint64_t *)(void *)(bells.map + 128);
    __atomic_store_n(*bell_p, 0, __ATOMIC_RELEASE);
    __atomic_store_n(*done_p, 0, __ATOMIC_RELEASE);
    return bells;
}

/* ---- tests ------------------------------------------------------------------------ */

START_TEST(handshake_grants_the_gpu_capabilities_and_no_host_backend)
{
    struct th_agent a;
    th_agent_start(&a, NULL, agent_args);
    struct lt_msg_hello_reply r;
    int fd = th_hello(a.sock, CAPS, &r);
    ck_assert_uint_eq(r.caps, CAPS);
    ck_assert_uint_eq(r.caps & LT_CAP_HOST_BACKEND, 0);
    ck_assert_str_eq(r.agent_name, "ga-cuda");
    ck_assert_uint_eq(r.class_budget[LT_CLASS_PINNED], 3 * GiB);
    ck_assert_uint_eq(r.class_budget[LT_CLASS_MAPPED], 256 * MiB);
    close(fd);
    ck_assert_int_eq(th_agent_stop(&a), 0);
    ck_assert(th_file_wait_for(a.log, "CUDA backend on device", 0));
    th_agent_cleanup(&a);
}
END_TEST

/* Data, then its block sums, in one segment: returns the sums' offset. */
static uint64_t write_sums(struct seg *s, uint64_t len, uint32_t bs, uint64_t **sums_p)
{
    uint64_t sums_off = (len + 7) / 8 * 8;
    size_t n = kr_block_count((size_t)len, bs);
    ck_assert_uint_le(sums_off + n * 8, s->size);
    uint64_t *sums = (uint64_t *)(void *)(s->map + sums_off);
    ck_assert_int_eq(kr_block_checksums(s->map, (size_t)len, bs, sums), (long)n);
    *sums_p = sums;
    return sums_off;
}

/* Verifies the data of @s through a lease of @cls: clean, then with two
 * blocks corrupted (the first one is named, both are counted). */
static void checksum_roundtrip(int fd, struct seg *s, uint32_t cls, uint64_t len, uint32_t bs,
                               uint64_t seed)
{
    uint64_t *sums = NULL;
    uint64_t sums_off = write_sums(s, len, bs, &sums);
    uint64_t nblocks = kr_block_count((size_t)len, bs);
    struct lt_lease_id lease = lease_ok(fd, s, 0, s->size, cls);
    union lt_op_args args = checksum_args(0, len, sums_off, bs);

    struct lt_msg_completion c =
        completion_of(fd, submit(fd, lease, S0, LT_OP_CHECKSUM_VERIFY, &args, 0, NULL));
    ck_assert_msg(c.status == LT_OK, "%s: clean data: %s", lt_class_name(cls),
                  lt_error_name(c.status));
    ck_assert_uint_eq(c.result.checksum.blocks_checked, nblocks);
    ck_assert_uint_eq(c.result.checksum.first_bad_block, LT_BLOCK_NONE);
    ck_assert_uint_eq(c.result.checksum.bad_blocks, 0);
    ck_assert_uint_gt(c.elapsed_ns, 0);

    uint64_t st = seed;
    uint64_t b1 = 1 + th_rand(&st) % (nblocks / 2), b2 = nblocks - 1; /* b2: the short tail */
    uint64_t p1 = b1 * bs + th_rand(&st) % bs, p2 = b2 * bs + th_rand(&st) % (len - b2 * bs);
    unsigned char bit = (unsigned char)(1u << (th_rand(&st) % 8));
    s->map[p1] ^= bit;
    s->map[p2] ^= bit;
    c = completion_of(fd, submit(fd, lease, S0, LT_OP_CHECKSUM_VERIFY, &args, 0, NULL));
    ck_assert_msg(c.status == LT_E_CHECKSUM_MISMATCH, "%s: corrupted data: %s", lt_class_name(cls),
                  lt_error_name(c.status));
    ck_assert_uint_eq(c.result.checksum.blocks_checked, nblocks);
    ck_assert_uint_eq(c.result.checksum.first_bad_block, b1);
    ck_assert_uint_eq(c.result.checksum.bad_blocks, 2);
    ck_assert_uint_eq(c.result.checksum.expected, sums[b1]);
    ck_assert_uint_eq(c.result.checksum.actual, kr_block_checksum(s->map + b1 * bs, bs));
    s->map[p1] ^= bit;
    s->map[p2] ^= bit;
    release_ok(fd, lease);
}

START_TEST(checksum_verify_names_the_corrupted_block_on_every_path)
{
    struct th_agent a;
    th_agent_start(&a, NULL, agent_args);
    int fd = th_hello(a.sock, CAPS, NULL);
    /* 9 pipeline chunks of 1 MiB, a short last block. */
    const uint64_t len = 8 * MiB + 4000;
    const uint32_t bs = 64 * KiB;
    struct seg p = seg_offer(fd, 12 * MiB, LT_CLASS_PINNED, 11);
    struct seg m = seg_offer(fd, 12 * MiB, LT_CLASS_MAPPED, 12);
    checksum_roundtrip(fd, &p, LT_CLASS_PINNED, len, bs, 13);
    checksum_roundtrip(fd, &m, LT_CLASS_MAPPED, len, bs, 14);
    /* A STAGED lease of a PINNED segment takes the pageable (bounce) path. */
    checksum_roundtrip(fd, &p, LT_CLASS_STAGED, len, bs, 15);
    /* Blocks larger than a pipeline chunk: the chunk grows to whole blocks. */
    checksum_roundtrip(fd, &p, LT_CLASS_PINNED, 6 * MiB + 8, 2 * MiB + 8, 16);
    close(fd);
    ck_assert_int_eq(th_agent_stop(&a), 0);
    th_agent_cleanup(&a);
}
END_TEST

/* Random finite f16: sign, exponent 2^-6 .. 2^1, any mantissa. */
static uint16_t rand_f16(uint64_t *s)
{
    uint64_t r = th_rand(s);
    uint16_t sign = (uint16_t)((r & 1) << 15);
    uint16_t exp = (uint16_t)(9 + (r >> 1) % 8);
    uint16_t man = (uint16_t)((r >> 8) & 0x3ff);
    return (uint16_t)(sign | (exp << 10) | man);
}

static float rand_f32(uint64_t *s)
{
    return (float)((double)(th_rand(s) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Writes @n records of @dim elements of @type then the query into @s;
 * returns the query's offset and the f32 query in @q_p (dim floats). */
static uint64_t write_vectors(struct seg *s, uint32_t type, uint64_t n, uint32_t dim, uint64_t seed,
                              float **q_p)
{
    uint64_t st = seed;
    uint32_t esz = type == KN_SCAN_F32 ? 4 : 2;
    uint64_t rec_bytes = n * dim * esz;
    ck_assert_uint_le(rec_bytes + (uint64_t)dim * esz, s->size);
    float *q = malloc((size_t)dim * sizeof(*q));
    ck_assert_ptr_nonnull(q);
    for (uint64_t i = 0; i < n * dim; i++) {
        if (type == KN_SCAN_F32) {
            float f = rand_f32(&st);
            memcpy(s->map + 4 * i, &f, 4);
        } else {
            uint16_t h = rand_f16(&st);
            memcpy(s->map + 2 * i, &h, 2);
        }
    }
    for (uint32_t i = 0; i < dim; i++) {
        if (type == KN_SCAN_F32) {
            q[i] = rand_f32(&st);
            memcpy(s->map + rec_bytes + 4 * i, &q[i], 4);
        } else {
            uint16_t h = rand_f16(&st);
            memcpy(s->map + rec_bytes + 2 * i, &h, 2);
            q[i] = kn_f16_to_f32(h);
        }
    }
    *q_p = q;
    return rec_bytes;
}

static void scan_check(int fd, struct seg *s, uint32_t cls, uint32_t type, uint64_t n, uint32_t dim,
                       uint64_t seed)
{
    float *q = NULL;
    uint64_t q_off = write_vectors(s, type, n, dim, seed, &q);
    uint32_t esz = type == KN_SCAN_F32 ? 4 : 2;
    struct kn_scan_hit ref;
    ck_assert_int_eq(kr_scan_topk(s->map, type, n, dim, q, 1, &ref), 1);
    struct lt_lease_id lease = lease_ok(fd, s, 0, s->size, cls);
    union lt_op_args args;
    memset(&args, 0, sizeof args);
    args.scan = (struct lt_op_vector_scan){.offset = 0,
                                           .length = n * dim * esz,
                                           .query_offset = q_off,
                                           .dim = dim,
                                           .elem = (uint16_t)type,
                                           .metric = LT_SCAN_DOT};
    struct lt_msg_completion c =
        completion_of(fd, submit(fd, lease, S0, LT_OP_VECTOR_SCAN, &args, 0, NULL));
    ck_assert_msg(c.status == LT_OK, "scan %s type %u: %s", lt_class_name(cls), type,
                  lt_error_name(c.status));
    ck_assert_uint_eq(c.result.scan.records_scanned, n);
    struct kn_scan_hit hit = {.score = lt_f32_from_bits(c.result.scan.best_score_bits),
                              .shard = 0,
                              .index = c.result.scan.best_index};
    struct kr_scan_shard shard = {.records = s->map, .type = type, .dim = dim, .n = n, .query = q};
    char why[256] = "";
    double rel = 0;
    int rc = kr_scan_check(&shard, 1, &ref, &hit, 1, &rel, why, sizeof why);
    ck_assert_msg(rc == 0,
                  "%s scan (type %u, n %" PRIu64 ", dim %u): GPU best %" PRIu64 " (%g), reference "
                  "%" PRIu64 " (%g): %s",
                  lt_class_name(cls), type, n, dim, hit.index, (double)hit.score, ref.index,
                  (double)ref.score, why);
    /* A unique best by a clear margin is found exactly. */
    release_ok(fd, lease);
    free(q);
}

START_TEST(vector_scan_matches_the_reference_on_every_path)
{
    struct th_agent a;
    th_agent_start(&a, NULL, agent_args);
    int fd = th_hello(a.sock, CAPS, NULL);
    struct seg p = seg_offer(fd, 16 * MiB, LT_CLASS_PINNED, 21);
    struct seg m = seg_offer(fd, 16 * MiB, LT_CLASS_MAPPED, 22);
    /* f32, dim 96: 11.5 MB over 12 chunks; f16 with an f16 query; odd dims. */
    scan_check(fd, &p, LT_CLASS_PINNED, KN_SCAN_F32, 30011, 96, 23);
    scan_check(fd, &m, LT_CLASS_MAPPED, KN_SCAN_F32, 30011, 96, 24);
    scan_check(fd, &p, LT_CLASS_STAGED, KN_SCAN_F32, 30011, 96, 25);
    scan_check(fd, &p, LT_CLASS_PINNED, KN_SCAN_F16, 50021, 64, 26);
    scan_check(fd, &m, LT_CLASS_MAPPED, KN_SCAN_F16, 50021, 64, 27);
    scan_check(fd, &p, LT_CLASS_STAGED, KN_SCAN_F16, 50021, 64, 28);
    scan_check(fd, &m, LT_CLASS_MAPPED, KN_SCAN_F32, 7777, 131, 29);
    scan_check(fd, &p, LT_CLASS_PINNED, KN_SCAN_F16, 3001, 1027, 30);
    /* L2 is not a kernel this agent has: refused up front. */
    struct lt_lease_id lease = lease_ok(fd, &p, 0, 1 * MiB, LT_CLASS_PINNED);
    union lt_op_args args;
    memset(&args, 0, sizeof args);
    args.scan = (struct lt_op_vector_scan){
        .offset = 0, .length = 4096, .query_offset = 4096, .dim = 8, .elem = 1, .metric = 2};
    expect_error_for(fd, submit(fd, lease, S0, LT_OP_VECTOR_SCAN, &args, 0, NULL),
                     LT_E_UNSUPPORTED);
    release_ok(fd, lease);
    close(fd);
    ck_assert_int_eq(th_agent_stop(&a), 0);
    th_agent_cleanup(&a);
}
END_TEST

START_TEST(copies_complete_and_quiet_submits_answer_only_through_the_release)
{
    struct th_agent a;
    th_agent_start(&a, NULL, agent_args);
    int fd = th_hello(a.sock, CAPS, NULL);
    struct seg p = seg_offer(fd, 8 * MiB, LT_CLASS_PINNED, 31);
    struct seg m = seg_offer(fd, 8 * MiB, LT_CLASS_MAPPED, 32);
    const uint32_t classes[] = {LT_CLASS_PINNED, LT_CLASS_MAPPED, LT_CLASS_STAGED};
    for (int i = 0; i < 3; i++) {
        struct seg *s = classes[i] == LT_CLASS_MAPPED ? &m : &p;
        struct lt_lease_id lease = lease_ok(fd, s, 4096, 5 * MiB + 4096, classes[i]);
        union lt_op_args args = copy_args(100, 5 * MiB + 3);
        struct lt_msg_completion c =
            completion_of(fd, submit(fd, lease, S0, LT_OP_COPY_H2D, &args, 0, NULL));
        ck_assert_msg(c.status == LT_OK, "copy %s: %s", lt_class_name(classes[i]),
                      lt_error_name(c.status));
        ck_assert_uint_eq(c.result.copy.bytes_copied, 5 * MiB + 3);
        /* QUIET: no COMPLETION on success; the release still waits for it. */
        for (int k = 0; k < 20; k++)
            submit(fd, lease, S0, LT_OP_COPY_H2D, &args, LT_SUBMIT_F_QUIET, NULL);
        release_ok(fd, lease);
        th_expect_silence(fd, 50);
    }
    close(fd);
    ck_assert_int_eq(th_agent_stop(&a), 0);
    th_agent_cleanup(&a);
}
END_TEST

START_TEST(release_waits_for_a_doorbell_gated_submit)
{
    struct th_agent a;
    th_agent_start(&a, NULL, agent_args);
    int fd = th_hello(a.sock, CAPS, NULL);
    uint64_t *bell, *done;
    struct seg bells = bells_offer(fd, 41, &bell, &done);
    struct seg p = seg_offer(fd, 12 * MiB, LT_CLASS_PINNED, 42);
    const uint64_t len = 8 * MiB;
    const uint32_t bs = 64 * KiB;
    uint64_t *sums = NULL;
    uint64_t sums_off = write_sums(&p, len, bs, &sums);
    struct lt_lease_id lease = lease_ok(fd, &p, 0, p.size, LT_CLASS_PINNED);
    union lt_op_args args = checksum_args(0, len, sums_off, bs);
    struct words w = {.seg = &bells, .bell_off = 64, .bell_seq = 5, .done_off = 128, .done_seq = 9};
    uint64_t rid = submit(fd, lease, S0, LT_OP_CHECKSUM_VERIFY, &args, 0, &w);
    uint64_t rel = th_release_send(fd, lease);
    /* Nothing runs, nothing is answered, while the bell is not rung. */
    th_expect_silence(fd, 300);
    ck_assert_uint_eq(__atomic_load_n(done, __ATOMIC_ACQUIRE), 0);
    /* The GPU reads the bytes after the bell: a block changed now is seen. */
    p.map[3 * bs + 17] ^= 0x40;
    __atomic_store_n(bell, 5, __ATOMIC_RELEASE);
    union lt_msg_buffer b;
    th_expect(fd, &b, LT_MSG_COMPLETION);
    ck_assert_uint_eq(b.hdr.request_id, rid);
    const struct lt_msg_completion *c = (const void *)b.bytes;
    ck_assert_uint_eq(c->status, LT_E_CHECKSUM_MISMATCH);
    ck_assert_uint_eq(c->result.checksum.first_bad_block, 3);
    ck_assert_uint_eq(c->result.checksum.bad_blocks, 1);
    ck_assert_uint_eq(__atomic_load_n(done, __ATOMIC_ACQUIRE), 9);
    th_expect(fd, &b, LT_MSG_RELEASE_COMPLETE);
    ck_assert_uint_eq(b.hdr.request_id, rel);
    ck_assert_uint_eq(((const struct lt_msg_release_complete *)(const void *)b.bytes)->status,
                      LT_OK);
    close(fd);
    ck_assert_int_eq(th_agent_stop(&a), 0);
    th_agent_cleanup(&a);
}
END_TEST

/* One client's SUBMITs parked behind a bell it does not ring until it
 * has run out of result slots, then another client's. */
struct parker {
    int fd;
    uint64_t *bell, *done;
    struct seg bells, data;
    struct lt_lease_id lease;
    union lt_op_args args;
    uint64_t rids[512];
    int n;
};

static void parker_open(struct parker *p, const char *sock, uint64_t seed)
{
    p->fd = th_hello(sock, CAPS, NULL);
    p->bells = bells_offer(p->fd, seed, &p->bell, &p->done);
    p->data = seg_offer(p->fd, 128 * KiB, LT_CLASS_PINNED, seed + 1);
    uint64_t *sums = NULL;
    const uint64_t sums_off = write_sums(&p->data, 64 * KiB, 4 * KiB, &sums);
    p->lease = lease_ok(p->fd, &p->data, 0, p->data.size, LT_CLASS_PINNED);
    p->args = checksum_args(0, 64 * KiB, sums_off, 4 * KiB);
    p->n = 0;
}

/* Parks @n more SUBMITs: none of them may be refused. */
static void parker_park(struct parker *p, int n)
{
    const struct words w = {.seg = &p->bells, .bell_off = 64, .bell_seq = 5};
    ck_assert_int_le(p->n + n, (int)(sizeof p->rids / sizeof p->rids[0]));
    for (int i = 0; i < n; i++)
        p->rids[p->n++] = submit(p->fd, p->lease, S0, LT_OP_CHECKSUM_VERIFY, &p->args, 0, &w);
    th_expect_silence(p->fd, 100);
}

/* One more SUBMIT, which must be refused LIMIT because the client holds
 * its share and the rest is kept for others. */
static void parker_refused(struct parker *p, const char *who)
{
    const struct words w = {.seg = &p->bells, .bell_off = 64, .bell_seq = 5};
    const uint64_t rid = submit(p->fd, p->lease, S0, LT_OP_CHECKSUM_VERIFY, &p->args, 0, &w);
    union lt_msg_buffer b;
    expect_any(p->fd, &b);
    ck_assert_msg(b.hdr.type == LT_MSG_ERROR && b.hdr.request_id == rid,
                  "%s's SUBMIT %d: expected its ERROR, found %s", who, p->n + 1,
                  lt_msg_type_name(b.hdr.type));
    const struct lt_msg_error *e = (const void *)b.bytes;
    ck_assert_msg(e->code == LT_E_LIMIT && strstr(e->message, "kept for others"),
                  "%s's SUBMIT %d: expected LIMIT (kept for others), found %s: %s", who,
                  p->n + 1, lt_error_name(e->code), e->message);
}

/* Rings the bell: every parked SUBMIT completes clean. */
static void parker_ring_and_close(struct parker *p)
{
    __atomic_store_n(p->bell, 5, __ATOMIC_RELEASE);
    for (int i = 0; i < p->n; i++) {
        struct lt_msg_completion c = completion_of(p->fd, p->rids[i]);
        ck_assert_msg(c.status == LT_OK, "parked SUBMIT %d: %s", i + 1, lt_error_name(c.status));
    }
    release_ok(p->fd, p->lease);
    close(p->fd);
}

/* --result-slots 32 for --max-clients 2: each client is sure of 4
 * (a quarter of the slots, shared out), so a client that parks SUBMITs
 * behind a bell it never rings takes 24 and is refused the 25th, and the
 * other client still gets its 4. Before, the first took all 32 and the
 * other's first SUBMIT was refused. */
START_TEST(a_client_parking_submits_leaves_each_other_client_its_result_slots)
{
    static const char *const args[] = {"--pinned-budget", "1G", "--mapped-budget", "64M",
                                       "--seals", "legacy", "--result-slots", "32",
                                       "--max-clients", "2", NULL};
    struct th_agent a;
    th_agent_start(&a, NULL, args);
    struct parker greedy, other;
    parker_open(&greedy, a.sock, 71);
    parker_open(&other, a.sock, 81);
    parker_park(&greedy, 24);
    parker_refused(&greedy, "the parking client");
    parker_park(&other, 4);
    parker_refused(&other, "the other client");
    parker_ring_and_close(&greedy);
    parker_ring_and_close(&other);
    ck_assert_int_eq(th_agent_stop(&a), 0);
    th_agent_cleanup(&a);
}
END_TEST

/* The agent's bell poller looks at the watched bells a batch at a time
 * (gpu/cuda/bell_poll.c): one client's 400 unrung bells do not hide
 * another client's rung one, and all 400 run once their bell rings. */
START_TEST(a_rung_bell_is_seen_among_hundreds_of_unrung_ones)
{
    struct th_agent a;
    th_agent_start(&a, NULL, agent_args);
    struct parker many, one;
    parker_open(&many, a.sock, 91);
    parker_open(&one, a.sock, 95);
    parker_park(&many, 400);
    parker_park(&one, 1);
    parker_ring_and_close(&one);
    th_expect_silence(many.fd, 50);
    parker_ring_and_close(&many);
    ck_assert_int_eq(th_agent_stop(&a), 0);
    th_agent_cleanup(&a);
}
END_TEST

/* The bounce path (a STAGED lease: host functions copy through a pinned
 * buffer) behind a bell rung late: while the GPU waits on the bell, the
 * same client's control requests are still answered (docs/reliability.md:
 * on the H200 a 64 MiB bounce copy behind a late bell once left the next
 * request unanswered). */
START_TEST(a_doorbell_gated_bounce_copy_leaves_control_requests_answered)
{
    struct th_agent a;
    th_agent_start(&a, NULL, agent_args);
    int fd = th_hello(a.sock, CAPS, NULL);
    uint64_t *bell, *done;
    struct seg bells = bells_offer(fd, 43, &bell, &done);
    struct seg p = seg_offer(fd, 72 * MiB, LT_CLASS_PINNED, 44);
    const uint64_t len = 64 * MiB;
    const uint32_t bs = 1 * MiB;
    uint64_t *sums = NULL;
    uint64_t sums_off = write_sums(&p, len, bs, &sums);
    struct lt_lease_id staged = lease_ok(fd, &p, 0, p.size, LT_CLASS_STAGED);
    union lt_op_args args = checksum_args(0, len, sums_off, bs);
    struct words w = {.seg = &bells, .bell_off = 64, .bell_seq = 3, .done_off = 128, .done_seq = 4};
    uint64_t rid = submit(fd, staged, S0, LT_OP_CHECKSUM_VERIFY, &args, 0, &w);
    th_expect_silence(fd, 200);
    /* A control request while the copy waits on the bell: answered. */
    struct lt_lease_id other = lease_ok(fd, &bells, 0, bells.size, LT_CLASS_MAPPED);
    release_ok(fd, other);
    ck_assert_uint_eq(__atomic_load_n(done, __ATOMIC_ACQUIRE), 0);
    __atomic_store_n(bell, 3, __ATOMIC_RELEASE);
    union lt_msg_buffer b;
    th_expect(fd, &b, LT_MSG_COMPLETION);
    ck_assert_uint_eq(b.hdr.request_id, rid);
    const struct lt_msg_completion *c = (const void *)b.bytes;
    ck_assert_msg(c->status == LT_OK, "the bounce-path verify behind the bell: %s",
                  lt_error_name(c->status));
    ck_assert_uint_eq(__atomic_load_n(done, __ATOMIC_ACQUIRE), 4);
    /* And the next request after it, too. */
    release_ok(fd, staged);
    close(fd);
    ck_assert_int_eq(th_agent_stop(&a), 0);
    th_agent_cleanup(&a);
}
END_TEST

START_TEST(release_of_a_long_pinned_copy_completes_only_after_the_gpu_read_it)
{
    struct th_agent a;
    th_agent_start(&a, NULL, agent_args);
    int fd = th_hello(a.sock, CAPS, NULL);
    const uint64_t len = 1 * GiB;
    const uint32_t bs = 1 * MiB;
    struct seg p = seg_offer(fd, len + 64 * KiB, LT_CLASS_PINNED, 51);
    uint64_t *sums = NULL;
    uint64_t sums_off = write_sums(&p, len, bs, &sums);
    for (int round = 0; round < 2; round++) {
        struct lt_lease_id lease = lease_ok(fd, &p, 0, p.size, LT_CLASS_PINNED);
        union lt_op_args args = checksum_args(0, len, sums_off, bs);
        uint64_t rid = submit(fd, lease, S0, LT_OP_CHECKSUM_VERIFY, &args, 0, NULL);
        uint64_t t_release = base_now_ns();
        uint64_t rel = th_release_send(fd, lease);
        /* The instant the release completes the bytes are reused: were the
         * GPU still reading, the op would see the pattern and fail. */
        bool got_completion = false, got_release = false;
        struct lt_msg_completion c = {0};
        uint64_t t_done = 0;
        while (!got_completion || !got_release) {
            union lt_msg_buffer b;
            expect_any(fd, &b);
            if (b.hdr.type == LT_MSG_RELEASE_COMPLETE) {
                ck_assert_uint_eq(b.hdr.request_id, rel);
                ck_assert_msg(got_completion, "RELEASE_COMPLETE came before the op's COMPLETION");
                memset(p.map, 0xa5 + round, (size_t)len);
                got_release = true;
            } else {
                ck_assert_uint_eq(b.hdr.type, LT_MSG_COMPLETION);
                ck_assert_uint_eq(b.hdr.request_id, rid);
                memcpy(&c, b.bytes, sizeof c);
                t_done = base_now_ns();
                got_completion = true;
            }
        }
        ck_assert_msg(c.status == LT_OK && c.result.checksum.bad_blocks == 0,
                      "round %d: the GPU saw bytes written after the release: %s, %" PRIu64
                      " bad blocks",
                      round, lt_error_name(c.status), c.result.checksum.bad_blocks);
        ck_assert_uint_eq(c.result.checksum.blocks_checked, 1024);
        /* The release went out while the op still ran (1 GiB: ~20 ms on PCIe 5). */
        ck_assert_uint_gt(c.elapsed_ns, 5000000);
        ck_assert_uint_gt(t_done, t_release);
        fprintf(stderr, "long copy round %d: 1 GiB PINNED H2D + checksum in %.2f ms\n", round,
                (double)c.elapsed_ns / 1e6);
        /* The pattern is what a verify sees now; restore the data for the next round. */
        struct lt_lease_id l2 = lease_ok(fd, &p, 0, p.size, LT_CLASS_PINNED);
        c = completion_of(fd, submit(fd, l2, S0, LT_OP_CHECKSUM_VERIFY, &args, 0, NULL));
        ck_assert_uint_eq(c.status, LT_E_CHECKSUM_MISMATCH);
        ck_assert_uint_eq(c.result.checksum.bad_blocks, 1024);
        release_ok(fd, l2);
        th_fill(p.map, (size_t)len, 51);
        ck_assert_int_eq(kr_block_verify(p.map, (size_t)len, bs, sums), -1);
    }
    close(fd);
    ck_assert_int_eq(th_agent_stop(&a), 0);
    th_agent_cleanup(&a);
}
END_TEST

/* The child: a client that holds segments, leases and GPU work (one op
 * waiting on a bell nobody will ring), then waits to be killed. */
static void killed_client(const char *sock, int ready_w)
{
    int fd = th_hello(sock, CAPS, NULL);
    struct seg bells = seg_offer(fd, 4096, LT_CLASS_MAPPED, 61);
    memset(bells.map, 0, 4096);
    struct seg p = seg_offer(fd, 64 * MiB, LT_CLASS_PINNED, 62);
    struct lt_lease_id lease = lease_ok(fd, &p, 0, p.size, LT_CLASS_PINNED);
    union lt_op_args args = copy_args(0, 64 * MiB);
    struct words w = {.seg = &bells, .bell_off = 0, .bell_seq = 1};
    submit(fd, lease, S0, LT_OP_COPY_H2D, &args, 0, &w);
    submit(fd, lease, S0, LT_OP_COPY_H2D, &args, 0, NULL);
    struct lt_lease_id l2 = lease_ok(fd, &bells, 0, 4096, LT_CLASS_MAPPED);
    (void)l2;
    char c = 'r';
    if (write(ready_w, &c, 1) != 1)
        _exit(3);
    for (;;)
        pause();
}

static const struct lt_msg_stats_reply *stats_all(int fd, union lt_msg_buffer *b)
{
    th_stats(fd, LT_STATS_F_ALL_CLIENTS, b);
    return (const void *)b->bytes;
}

START_TEST(a_sigkilled_client_leaves_no_lease_registration_or_fd)
{
    struct th_agent a;
    th_agent_start(&a, NULL, agent_args);
    int fd = th_hello(a.sock, CAPS, NULL);
    union lt_msg_buffer b;
    const struct lt_msg_stats_reply *s = stats_all(fd, &b);
    ck_assert_uint_eq(s->client_count, 1);
    int fds0 = th_fd_count(a.pid);
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        close(p[0]);
        killed_client(a.sock, p[1]);
    }
    close(p[1]);
    char c = 0;
    ck_assert_int_eq(read(p[0], &c, 1), 1);
    close(p[0]);
    s = stats_all(fd, &b);
    ck_assert_uint_eq(s->client_count, 2);
    ck_assert_uint_eq(s->classes[LT_CLASS_PINNED].segments, 1);
    ck_assert_uint_eq(s->classes[LT_CLASS_MAPPED].segments, 1);
    ck_assert_uint_eq(s->classes[LT_CLASS_PINNED].live_leases, 1);
    ck_assert_uint_gt(th_fd_count(a.pid), fds0);
    ck_assert_int_eq(kill(child, SIGKILL), 0);
    int status = 0;
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    /* The bell-gated copy never gets its bell from the client: the agent
     * rings it itself, the work drains, the leases complete, the segments
     * are unregistered, unmapped and closed. */
    bool clean = false;
    for (int i = 0; i < 500 && !clean; i++) {
        s = stats_all(fd, &b);
        clean = s->client_count == 1 && s->classes[LT_CLASS_PINNED].segments == 0 &&
                s->classes[LT_CLASS_MAPPED].segments == 0 &&
                s->classes[LT_CLASS_PINNED].live_leases == 0 &&
                s->classes[LT_CLASS_MAPPED].live_leases == 0 &&
                s->classes[LT_CLASS_PINNED].bytes_registered == 0 &&
                s->classes[LT_CLASS_MAPPED].bytes_registered == 0 && th_fd_count(a.pid) == fds0;
        if (!clean)
            usleep(20000);
    }
    ck_assert_msg(clean,
                  "after the kill: %u clients, PINNED %" PRIu64 " segments %" PRIu64
                  " leases %" PRIu64 " bytes registered, MAPPED %" PRIu64 " segments, agent fds %d "
                  "(before: %d)",
                  s->client_count, s->classes[LT_CLASS_PINNED].segments,
                  s->classes[LT_CLASS_PINNED].live_leases,
                  s->classes[LT_CLASS_PINNED].bytes_registered,
                  s->classes[LT_CLASS_MAPPED].segments, th_fd_count(a.pid), fds0);
    for (int k = LT_CLASS_PINNED; k <= LT_CLASS_MAPPED; k++)
        ck_assert_uint_eq(s->classes[k].registrations, s->classes[k].unregistrations);
    ck_assert(th_file_wait_for(a.log, "drained", 2000));
    close(fd);
    ck_assert_int_eq(th_agent_stop(&a), 0);
    th_agent_cleanup(&a);
}
END_TEST

START_TEST(streams_and_events_work_over_the_socket)
{
    struct th_agent a;
    th_agent_start(&a, NULL, agent_args);
    int fd = th_hello(a.sock, CAPS, NULL);
    union lt_msg_buffer b;
    const struct lt_event_id E0 = {0, 0};
    struct seg bells = seg_offer(fd, 4096, LT_CLASS_MAPPED, 71);
    memset(bells.map, 0, 4096);
    struct seg p = seg_offer(fd, 64 * MiB, LT_CLASS_PINNED, 72);
    struct lt_lease_id lease = lease_ok(fd, &p, 0, p.size, LT_CLASS_PINNED);

    struct lt_stream_id st = th_ctl(fd, LT_MSG_STREAM_CREATE, S0, E0, E0, 0, &b)->stream;
    ck_assert_uint_ne(st.gen, 0);
    th_ctl(fd, LT_MSG_STREAM_VALIDATE, st, E0, E0, 0, &b);
    struct lt_event_id e1 =
        th_ctl(fd, LT_MSG_EVENT_RECORD, st, E0, E0, LT_EVENT_F_TIMING, &b)->event;
    union lt_op_args args = copy_args(0, 64 * MiB);
    struct words w = {.seg = &bells, .bell_off = 8, .bell_seq = 3};
    uint64_t rid = submit(fd, lease, st, LT_OP_COPY_H2D, &args, 0, &w);
    struct lt_event_id e2 =
        th_ctl(fd, LT_MSG_EVENT_RECORD, st, E0, E0, LT_EVENT_F_TIMING, &b)->event;
    ck_assert(e1.slot != e2.slot || e1.gen != e2.gen);
    /* The stream waits on the bell: not ready, neither is the event after it. */
    ck_assert_uint_eq(th_ctl(fd, LT_MSG_STREAM_QUERY, st, E0, E0, 0, &b)->ready, 0);
    ck_assert_uint_eq(th_ctl(fd, LT_MSG_EVENT_QUERY, S0, e2, E0, 0, &b)->ready, 0);
    uint64_t sync = th_ctl_send(fd, LT_MSG_EVENT_SYNCHRONIZE, S0, e2, E0, 0);
    th_expect_silence(fd, 200);
    __atomic_store_n((uint64_t *)(void *)(bells.map + 8), 3, __ATOMIC_RELEASE);
    struct lt_msg_completion c = completion_of(fd, rid);
    ck_assert_uint_eq(c.status, LT_OK);
    wait_for(fd, sync, LT_MSG_CTL_REPLY, &b);
    ck_assert_uint_eq(th_ctl(fd, LT_MSG_EVENT_QUERY, S0, e2, E0, 0, &b)->ready, 1);
    uint32_t bits = th_ctl(fd, LT_MSG_EVENT_ELAPSED, S0, e1, e2, 0, &b)->elapsed_ms_bits;
    float ms = lt_f32_from_bits(bits);
    ck_assert_msg(isfinite(ms) && ms > 0.0f, "elapsed %g ms", (double)ms);
    th_ctl(fd, LT_MSG_STREAM_SYNCHRONIZE, st, E0, E0, 0, &b);
    ck_assert_uint_eq(th_ctl(fd, LT_MSG_STREAM_QUERY, st, E0, E0, 0, &b)->ready, 1);
    th_ctl(fd, LT_MSG_DEVICE_SYNCHRONIZE, S0, E0, E0, 0, &b);
    /* The stream waits for an event recorded on the default stream. */
    struct lt_event_id e3 = th_ctl(fd, LT_MSG_EVENT_RECORD, S0, E0, E0, 0, &b)->event;
    th_ctl(fd, LT_MSG_EVENT_WAIT, st, e3, E0, 0, &b);
    /* ELAPSED needs timing events. */
    expect_error_for(fd, th_ctl_send(fd, LT_MSG_EVENT_ELAPSED, S0, e1, e3, 0), LT_E_BAD_VALUE);
    th_stats(fd, 0, &b);
    const struct lt_msg_stats_reply *s = (const void *)b.bytes;
    ck_assert_uint_eq(s->clients[0].streams, 1);
    ck_assert_uint_eq(s->clients[0].events, 3);

    /* Another client may not touch them. */
    int fd2 = th_hello(a.sock, CAPS, NULL);
    expect_error_for(fd2, th_ctl_send(fd2, LT_MSG_EVENT_QUERY, S0, e2, E0, 0), LT_E_NOT_OWNER);
    expect_error_for(fd2, th_ctl_send(fd2, LT_MSG_STREAM_QUERY, st, E0, E0, 0), LT_E_NOT_OWNER);
    close(fd2);

    /* Destroyed ids are stale. */
    th_ctl(fd, LT_MSG_EVENT_DESTROY, S0, e1, E0, 0, &b);
    expect_error_for(fd, th_ctl_send(fd, LT_MSG_EVENT_QUERY, S0, e1, E0, 0), LT_E_STALE_ID);
    th_ctl(fd, LT_MSG_STREAM_DESTROY, st, E0, E0, 0, &b);
    expect_error_for(fd, submit(fd, lease, st, LT_OP_COPY_H2D, &args, 0, NULL), LT_E_STALE_ID);
    expect_error_for(fd, th_ctl_send(fd, LT_MSG_STREAM_QUERY, st, E0, E0, 0), LT_E_STALE_ID);
    th_stats(fd, 0, &b);
    s = (const void *)b.bytes;
    ck_assert_uint_eq(s->clients[0].streams, 0);
    ck_assert_uint_eq(s->clients[0].events, 2);
    release_ok(fd, lease);
    close(fd);
    ck_assert_int_eq(th_agent_stop(&a), 0);
    th_agent_cleanup(&a);
}
END_TEST

START_TEST(host_backend_is_chosen_by_name_and_announced)
{
    struct th_agent a;
    const char *const args[] = {"--backend", "host", NULL};
    th_agent_start(&a, NULL, args);
    struct lt_msg_hello_reply r;
    int fd = th_hello(a.sock, CAPS, &r);
    ck_assert_uint_ne(r.caps & LT_CAP_HOST_BACKEND, 0);
    ck_assert(th_file_wait_for(a.log, "HOST BACKEND (--backend host)", 0));
    close(fd);
    ck_assert_int_eq(th_agent_stop(&a), 0);
    th_agent_cleanup(&a);
}
END_TEST

START_TEST(a_cuda_start_that_fails_is_an_error_not_a_fallback)
{
    char log[] = "/tmp/agent-cuda-refusal-XXXXXX";
    int lfd = mkstemp(log);
    ck_assert_int_ge(lfd, 0);
    close(lfd);
    const char *const args[] = {
        LEASE_AGENT_HOST, "--device", "63", "--socket", "/tmp/agent-cuda-never/agent.sock", NULL};
    int st = th_agent_run_once(args, log);
    ck_assert_int_eq(st, 1);
    ck_assert(th_file_wait_for(log, "the CUDA backend cannot start on device 63", 0));
    ck_assert(th_file_wait_for(log, "--backend host", 0));
    ck_assert(!th_file_wait_for(log, "HOST BACKEND", 0));
    unlink(log);
}
END_TEST

static Suite *agent_cuda_suite(void)
{
    Suite *s = suite_create("agent_cuda");
    TCase *tc = tcase_create("ops");
    tcase_add_test(tc, handshake_grants_the_gpu_capabilities_and_no_host_backend);
    tcase_add_test(tc, checksum_verify_names_the_corrupted_block_on_every_path);
    tcase_add_test(tc, vector_scan_matches_the_reference_on_every_path);
    tcase_add_test(tc, copies_complete_and_quiet_submits_answer_only_through_the_release);
    tcase_set_timeout(tc, 30);
    suite_add_tcase(s, tc);

    tc = tcase_create("lifetimes");
    tcase_add_test(tc, release_waits_for_a_doorbell_gated_submit);
    tcase_add_test(tc, a_doorbell_gated_bounce_copy_leaves_control_requests_answered);
    tcase_add_test(tc, release_of_a_long_pinned_copy_completes_only_after_the_gpu_read_it);
    tcase_add_test(tc, a_sigkilled_client_leaves_no_lease_registration_or_fd);
    tcase_add_test(tc, a_client_parking_submits_leaves_each_other_client_its_result_slots);
    tcase_add_test(tc, a_rung_bell_is_seen_among_hundreds_of_unrung_ones);
    tcase_set_timeout(tc, 30);
    suite_add_tcase(s, tc);

    tc = tcase_create("control");
    tcase_add_test(tc, streams_and_events_work_over_the_socket);
    tcase_add_test(tc, host_backend_is_chosen_by_name_and_announced);
    tcase_add_test(tc, a_cuda_start_that_fails_is_an_error_not_a_fallback);
    tcase_set_timeout(tc, 30);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(agent_cuda_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
