/* LAUNCH over lease-agent's socket (docs/launch.md): a real agent per test
 * with the launch test kernels (tests/gpu/cuda/launch_kernels.cu and its
 * descriptor) in --cubin-dir. Results on PINNED and MAPPED leases checked
 * against C; writable ranges copied back (PINNED) or written in place
 * (MAPPED); every refusal (no capability, unknown kernel, bad arguments with
 * their index, over-limit, a released lease, a range outside its lease) and
 * its words; a release waiting for the launch before it; a kernel that
 * faults answered GPU_FAULT with every other pending completion, then the
 * agent serving again on the same socket; a descriptor that disagrees with
 * its cubin failing start-up. GPU test (gpu_gate), and on the CPU against
 * tests/fakecuda as test_agent_launch_fakecuda. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"

#define MiB (1024ull * 1024ull)
#define CAPS (LT_CAP_DOORBELL | LT_CAP_DONE_WORD | LT_CAP_TIMING | LT_CAP_LAUNCH)
#define IMAGE "launch_kernels"
#define FAULT_ADDRESS 0x7a5a00000000ull /* nothing is mapped there (tests/gpu/cuda fault test) */

static const struct lt_stream_id S0 = {0, 0};

static const char *const agent_args[] = {"--cubin-dir",
                                         GA_LAUNCH_CUBIN_DIR,
                                         "--pinned-budget",
                                         "64M",
                                         "--mapped-budget",
                                         "64M",
                                         "--max-launches",
                                         "4",
                                         NULL};
/* For kernels that write leases: segments without F_SEAL_FUTURE_WRITE, which
 * only an agent run --seals legacy leases (a sealed one it maps read-only). */
static const char *const agent_args_legacy[] = {"--cubin-dir",
                                                GA_LAUNCH_CUBIN_DIR,
                                                "--pinned-budget",
                                                "64M",
                                                "--mapped-budget",
                                                "64M",
                                                "--max-launches",
                                                "4",
                                                "--seals",
                                                "legacy",
                                                NULL};

struct seg {
    struct lt_segment_id id;
    unsigned char *map;
    uint64_t size;
};

static struct seg seg_offer_sealed(int fd, uint64_t size, uint32_t cls, uint64_t seed, int seals)
{
    struct seg s = {.size = size};
    void *map = NULL;
    int mfd = th_memfd(size, seals, seed, &map);
    s.map = map;
    s.id = th_offer(fd, mfd, size, cls, seed);
    close(mfd);
    return s;
}

static struct seg seg_offer(int fd, uint64_t size, uint32_t cls, uint64_t seed)
{
    return seg_offer_sealed(fd, size, cls, seed, TH_GOOD_SEALS);
}

static struct lt_lease_id lease_ok(int fd, struct seg *s, uint64_t off, uint64_t len, uint32_t cls)
{
    struct lt_lease_grant_entry g = th_lease(fd, s->id, off, len, cls);
    ck_assert_msg(g.status == LT_OK, "lease refused: %s", lt_error_name(g.status));
    return g.lease;
}

/* ---- messages in any order --------------------------------------------------- */

#define STASH 32
static union lt_msg_buffer stash[STASH];
static int nstash;

static void wait_for(int fd, uint64_t rid, uint16_t type, union lt_msg_buffer *out)
{
    for (int i = 0; i < nstash; i++)
        if (stash[i].hdr.request_id == rid && stash[i].hdr.type == type) {
            *out = stash[i];
            stash[i] = stash[--nstash];
            return;
        }
    for (;;) {
        ssize_t n = th_recv(fd, out, TH_TIMEOUT_MS);
        ck_assert_msg(n > 0, "waiting for %s #%" PRIu64 ": %s", lt_msg_type_name(type), rid,
                      n == 0 ? "end of stream" : strerror((int)-n));
        if (out->hdr.request_id == rid && out->hdr.type == type)
            return;
        if (out->hdr.type == LT_MSG_ERROR && out->hdr.request_id == rid) {
            const struct lt_msg_error *e = (const void *)out->bytes;
            ck_abort_msg("expected %s #%" PRIu64 ", found ERROR %s: %s", lt_msg_type_name(type),
                         rid, lt_error_name(e->code), e->message);
        }
        ck_assert_msg(nstash < STASH, "too many unexpected messages");
        stash[nstash++] = *out;
    }
}

/* ---- launches ------------------------------------------------------------------- */

struct range {
    struct lt_lease_id lease;
    uint64_t offset, length;
    uint32_t flags;
};

struct launch {
    const char *image, *kernel;
    uint32_t grid[3], block[3];
    uint32_t shared, result_bytes;
    struct lt_stream_id stream;
    uint32_t nranges;
    struct range r[LT_LAUNCH_MAX_LEASES];
    uint32_t arg_words;
    uint64_t args[8];
};

static struct launch launch_of(const char *kernel, struct lt_lease_id lease, uint64_t len)
{
    struct launch l = {.image = IMAGE,
                       .kernel = kernel,
                       .grid = {4, 1, 1},
                       .block = {128, 1, 1},
                       .nranges = 1,
                       .r = {{.lease = lease, .offset = 0, .length = len}},
                       .arg_words = 1};
    return l;
}

static uint64_t launch_send(int fd, const struct launch *l)
{
    union {
        uint64_t align;
        unsigned char b[sizeof(struct lt_msg_launch) + 64];
    } u;
    size_t len = sizeof(struct lt_msg_launch) + (size_t)l->arg_words * 8;
    struct lt_msg_launch *m = (void *)u.b;
    ck_assert_int_eq(lt_msg_init(m, len, LT_MSG_LAUNCH, th_rid()), LT_OK);
    m->arg_words = l->arg_words;
    lt_name_set(m->image, sizeof m->image, l->image);
    lt_name_set(m->kernel, sizeof m->kernel, l->kernel);
    memcpy(m->grid, l->grid, sizeof m->grid);
    memcpy(m->block, l->block, sizeof m->block);
    m->shared_bytes = l->shared;
    m->result_bytes = l->result_bytes;
    m->stream = l->stream;
    m->lease_count = l->nranges;
    for (uint32_t i = 0; i < l->nranges; i++)
        m->leases[i] = (struct lt_launch_lease){.lease = l->r[i].lease,
                                                .offset = l->r[i].offset,
                                                .length = l->r[i].length,
                                                .flags = l->r[i].flags};
    memcpy(m->args, l->args, (size_t)l->arg_words * 8);
    ck_assert_int_eq(lt_validate_launch(m, len), LT_OK);
    ck_assert_int_eq(th_send(fd, m, len, NULL, 0), 0);
    return m->hdr.request_id;
}

static struct lt_msg_launch_completion launch_wait(int fd, uint64_t rid)
{
    union lt_msg_buffer b;
    wait_for(fd, rid, LT_MSG_LAUNCH_COMPLETION, &b);
    struct lt_msg_launch_completion c;
    memcpy(&c, b.bytes, sizeof c);
    return c;
}

static struct lt_msg_launch_completion launch_run(int fd, const struct launch *l)
{
    return launch_wait(fd, launch_send(fd, l));
}

#define expect_refused(c, want, index, words)                                                      \
    do {                                                                                           \
        ck_assert_msg((c).status == (want), "expected %s, found %s: %s", lt_error_name(want),      \
                      lt_error_name((c).status), (c).message);                                     \
        ck_assert_uint_eq((c).arg_index, (index));                                                 \
        ck_assert_msg(strstr((c).message, words), "'%s' lacks '%s'", (c).message, words);          \
    } while (0)

/* What k_launch_sum_u32 leaves: the wrapping sum of the u32 words times scale. */
static uint64_t sum_ref(const unsigned char *p, uint64_t bytes, uint32_t scale)
{
    uint64_t s = 0;
    for (uint64_t i = 0; i < bytes / 4; i++) {
        uint32_t w;
        memcpy(&w, p + i * 4, 4);
        s += (uint64_t)w * scale;
    }
    return s;
}

static uint32_t fill_ref(uint64_t i, uint32_t seed)
{
    uint32_t v = (uint32_t)i * 0x9e3779b1u ^ seed;
    v ^= v >> 15;
    v *= 0x2c1b3c6du;
    v ^= v >> 12;
    return v;
}

/* ---- the tests ----------------------------------------------------------------------- */

START_TEST(launch_is_a_capability_granted_to_those_who_ask)
{
    struct th_agent a;
    th_agent_start(&a, NULL, agent_args);
    struct lt_msg_hello_reply hr;
    int fd = th_hello(a.sock, CAPS, &hr);
    ck_assert_msg(hr.caps & LT_CAP_LAUNCH, "caps %#x", hr.caps);
    close(fd);
    /* an old client: never asks, never sees it; a LAUNCH is an ERROR */
    fd = th_hello(a.sock, LT_CAP_DOORBELL, &hr);
    ck_assert_uint_eq(hr.caps & LT_CAP_LAUNCH, 0);
    struct seg p = seg_offer(fd, 1 * MiB, LT_CLASS_PINNED, 3);
    struct lt_lease_id lease = lease_ok(fd, &p, 0, p.size, LT_CLASS_PINNED);
    struct launch l = launch_of("k_launch_sum_u32", lease, 4096);
    l.args[0] = 1;
    uint64_t rid = launch_send(fd, &l);
    union lt_msg_buffer b;
    const struct lt_msg_error *e = th_expect_error(fd, &b, rid, LT_E_UNSUPPORTED);
    ck_assert_msg(strstr(e->message, "LAUNCH capability"), "%s", e->message);
    ck_assert(th_file_wait_for(a.log, "kernel k_launch_sum_u32 launchable", 0));
    close(fd);
    ck_assert_int_eq(th_agent_stop(&a), 0);
    th_agent_cleanup(&a);
    munmap(p.map, p.size);
}
END_TEST

START_TEST(sums_match_c_on_pinned_and_mapped_leases)
{
    struct th_agent a;
    th_agent_start(&a, NULL, agent_args);
    int fd = th_hello(a.sock, CAPS, NULL);
    struct seg p = seg_offer(fd, 4 * MiB, LT_CLASS_PINNED, 11);
    struct seg m = seg_offer(fd, 2 * MiB, LT_CLASS_MAPPED, 12);
    struct lt_lease_id lp = lease_ok(fd, &p, 0, p.size, LT_CLASS_PINNED);
    struct lt_lease_id lm = lease_ok(fd, &m, 0, m.size, LT_CLASS_MAPPED);
    const struct {
        struct lt_lease_id lease;
        struct seg *s;
        uint64_t off, len;
        uint32_t g[3], b[3], scale, result;
    } cases[] = {
        {lp, &p, 0, 3 * MiB + 6, {8, 1, 1}, {256, 1, 1}, 3, 16},
        {lp, &p, 4096, 1000, {1, 1, 1}, {1, 1, 1}, 1000000, 16},
        {lp, &p, 12, 64 * 1024, {3, 2, 2}, {8, 4, 2}, 7, 8},
        {lm, &m, 0, 2 * MiB, {16, 1, 1}, {1024, 1, 1}, 5, 16},
        {lm, &m, 64, 77777, {2, 2, 1}, {32, 2, 1}, 2, 16},
        {lm, &m, 0, 3, {1, 1, 1}, {32, 1, 1}, 9, 16}, /* not a whole word: nothing counted */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct launch l = launch_of("k_launch_sum_u32", cases[i].lease, cases[i].len);
        l.r[0].offset = cases[i].off;
        memcpy(l.grid, cases[i].g, sizeof l.grid);
        memcpy(l.block, cases[i].b, sizeof l.block);
        l.args[0] = cases[i].scale;
        l.result_bytes = cases[i].result;
        struct lt_msg_launch_completion c = launch_run(fd, &l);
        ck_assert_msg(c.status == LT_OK, "case %zu: %s: %s", i, lt_error_name(c.status), c.message);
        ck_assert_uint_eq(c.result_bytes, cases[i].result);
        uint64_t got[2] = {0, 0};
        memcpy(got, c.result, c.result_bytes);
        uint64_t want = sum_ref(cases[i].s->map + cases[i].off, cases[i].len, cases[i].scale);
        ck_assert_msg(got[0] == want, "case %zu: sum %#" PRIx64 ", C says %#" PRIx64, i, got[0],
                      want);
        if (cases[i].result == 16)
            ck_assert_uint_eq(got[1], cases[i].len / 4);
    }
    close(fd);
    ck_assert_int_eq(th_agent_stop(&a), 0);
    th_agent_cleanup(&a);
    munmap(p.map, p.size);
    munmap(m.map, m.size);
}
END_TEST

START_TEST(writable_ranges_in_sealed_segments_are_refused_untouched)
{
    /* The agent maps and registers a segment sealed F_SEAL_FUTURE_WRITE
     * read-only: a kernel writing it would fault the device for everyone. */
    struct th_agent a;
    th_agent_start(&a, NULL, agent_args);
    int fd = th_hello(a.sock, CAPS, NULL);
    struct seg p = seg_offer(fd, 1 * MiB, LT_CLASS_PINNED, 23);
    struct seg m = seg_offer(fd, 1 * MiB, LT_CLASS_MAPPED, 24);
    struct lt_lease_id leases[2] = {lease_ok(fd, &p, 0, p.size, LT_CLASS_PINNED),
                                    lease_ok(fd, &m, 0, m.size, LT_CLASS_MAPPED)};
    struct seg *segs[2] = {&p, &m};
    for (int k = 0; k < 2; k++) {
        unsigned char *before = malloc(1 * MiB);
        memcpy(before, segs[k]->map, 1 * MiB);
        struct launch l = launch_of("k_launch_fill", leases[k], 4096);
        l.r[0].flags = LT_LAUNCH_LEASE_F_WRITE;
        l.block[0] = 512;
        struct lt_msg_launch_completion c = launch_run(fd, &l);
        expect_refused(c, LT_E_UNSUPPORTED, LT_INDEX_NONE, "F_SEAL_FUTURE_WRITE");
        ck_assert(memcmp(before, segs[k]->map, 1 * MiB) == 0);
        free(before);
    }
    /* and the device is still fine: a read-only launch runs */
    struct launch l = launch_of("k_launch_sum_u32", leases[0], 4096);
    l.result_bytes = 8;
    l.args[0] = 1;
    struct lt_msg_launch_completion c = launch_run(fd, &l);
    ck_assert_msg(c.status == LT_OK, "%s: %s", lt_error_name(c.status), c.message);
    close(fd);
    ck_assert_int_eq(th_agent_stop(&a), 0);
    th_agent_cleanup(&a);
    munmap(p.map, p.size);
    munmap(m.map, m.size);
}
END_TEST

START_TEST(writable_ranges_are_written_back_and_others_are_not)
{
    struct th_agent a;
    th_agent_start(&a, NULL, agent_args_legacy);
    int fd = th_hello(a.sock, CAPS, NULL);
    struct seg p = seg_offer_sealed(fd, 1 * MiB, LT_CLASS_PINNED, 21, TH_OLD_SEALS);
    struct seg m = seg_offer_sealed(fd, 1 * MiB, LT_CLASS_MAPPED, 22, TH_OLD_SEALS);
    struct lt_lease_id lp = lease_ok(fd, &p, 0, p.size, LT_CLASS_PINNED);
    struct lt_lease_id lm = lease_ok(fd, &m, 0, m.size, LT_CLASS_MAPPED);
    struct seg *segs[2] = {&p, &m};
    struct lt_lease_id leases[2] = {lp, lm};
    for (int k = 0; k < 2; k++) {
        unsigned char *before = malloc(1 * MiB);
        memcpy(before, segs[k]->map, 1 * MiB);
        const uint64_t off = 8192, len = 256 * 1024 + 2;
        struct launch l = launch_of("k_launch_fill", leases[k], len);
        l.r[0].offset = off;
        l.args[0] = 0x1234u + (uint32_t)k;
        /* not marked writable: refused, argument 0 named */
        struct lt_msg_launch_completion c = launch_run(fd, &l);
        expect_refused(c, LT_E_BAD_VALUE, 0, "must mark it LT_LAUNCH_LEASE_F_WRITE");
        ck_assert(memcmp(before, segs[k]->map, 1 * MiB) == 0);
        l.r[0].flags = LT_LAUNCH_LEASE_F_WRITE;
        l.block[0] = 512;
        c = launch_run(fd, &l);
        ck_assert_msg(c.status == LT_OK, "%s: %s", lt_error_name(c.status), c.message);
        ck_assert_uint_eq(c.result_bytes, 0);
        /* the range's words, in the lease once the completion is here */
        for (uint64_t i = 0; i < len / 4; i++) {
            uint32_t w;
            memcpy(&w, segs[k]->map + off + i * 4, 4);
            ck_assert_msg(w == fill_ref(i, 0x1234u + (uint32_t)k), "%s word %" PRIu64,
                          k ? "MAPPED" : "PINNED", i);
        }
        /* and nothing else: before it, the tail of the last word, after it */
        ck_assert(memcmp(before, segs[k]->map, off) == 0);
        ck_assert(memcmp(before + off + len / 4 * 4, segs[k]->map + off + len / 4 * 4,
                         1 * MiB - off - len / 4 * 4) == 0);
        free(before);
    }
    close(fd);
    ck_assert_int_eq(th_agent_stop(&a), 0);
    th_agent_cleanup(&a);
    munmap(p.map, p.size);
    munmap(m.map, m.size);
}
END_TEST

START_TEST(every_refusal_is_a_completion_with_its_words)
{
    /* --seals legacy: the shape refusals below are of a writing kernel */
    struct th_agent a;
    th_agent_start(&a, NULL, agent_args_legacy);
    int fd = th_hello(a.sock, CAPS, NULL);
    struct seg p = seg_offer_sealed(fd, 1 * MiB, LT_CLASS_PINNED, 31, TH_OLD_SEALS);
    struct seg s = seg_offer(fd, 1 * MiB, LT_CLASS_STAGED, 32);
    struct lt_lease_id lp = lease_ok(fd, &p, 0, 512 * 1024, LT_CLASS_PINNED);
    struct lt_lease_id ls = lease_ok(fd, &s, 0, s.size, LT_CLASS_STAGED);
    struct launch l = launch_of("k_launch_sum_u32", lp, 4096);
    l.args[0] = 2;
    l.result_bytes = 16;
    struct lt_msg_launch_completion c;

    l.kernel = "k_launch_nothing";
    c = launch_run(fd, &l);
    expect_refused(c, LT_E_NOT_FOUND, LT_INDEX_NONE, "no launchable kernel k_launch_nothing");
    l.kernel = "k_extra_fill"; /* an image this agent did not load */
    l.image = "extra_kernel";
    c = launch_run(fd, &l);
    ck_assert_uint_eq(c.status, LT_E_NOT_FOUND);
    l.image = "no_such_image";
    l.kernel = "k_launch_sum_u32";
    c = launch_run(fd, &l);
    ck_assert_uint_eq(c.status, LT_E_NOT_FOUND);
    l.image = IMAGE;

    l.args[0] = 0; /* scale: min=1 */
    c = launch_run(fd, &l);
    expect_refused(c, LT_E_BAD_VALUE, 2, "argument 2 (u32 scale): expected 1..1000000, found 0");
    l.args[0] = 2 | (1ull << 40); /* padding after the u32 */
    c = launch_run(fd, &l);
    ck_assert_uint_eq(c.status, LT_E_BAD_VALUE);
    l.args[0] = 2;
    l.arg_words = 2; /* one word more than the kernel takes */
    c = launch_run(fd, &l);
    expect_refused(c, LT_E_BAD_VALUE, LT_INDEX_NONE, "16 bytes");
    l.arg_words = 0;
    c = launch_run(fd, &l);
    expect_refused(c, LT_E_BAD_VALUE, 2, "scale");
    l.arg_words = 1;
    l.result_bytes = 32;
    c = launch_run(fd, &l);
    expect_refused(c, LT_E_BAD_VALUE, 3, "a 32-byte result area, its descriptor fills at most 16");
    l.result_bytes = 16;
    l.nranges = 2;
    l.r[1] = l.r[0];
    c = launch_run(fd, &l);
    expect_refused(c, LT_E_BAD_VALUE, LT_INDEX_NONE, "runs on 1 lease range, the launch gives 2");
    l.nranges = 1;

    /* shapes: the descriptor's bounds and the client's limits */
    struct launch f = launch_of("k_launch_fill", lp, 4096);
    f.r[0].flags = LT_LAUNCH_LEASE_F_WRITE;
    f.block[0] = 513;
    c = launch_run(fd, &f);
    expect_refused(c, LT_E_BAD_VALUE, LT_INDEX_NONE,
                   "513 threads a block, its descriptor allows 512");
    f.block[0] = 64;
    f.shared = 16;
    c = launch_run(fd, &f);
    expect_refused(c, LT_E_BAD_VALUE, LT_INDEX_NONE, "16 bytes of dynamic shared memory");
    f.shared = 0;
    f.grid[0] = 1u << 30;
    c = launch_run(fd, &f);
    expect_refused(c, LT_E_LIMIT, LT_INDEX_NONE, "1073741824 blocks of 64 threads, over the");
    f.grid[0] = 1;

    /* the leases: a STAGED one, a range outside, a foreign or released one */
    l.r[0].lease = ls;
    c = launch_run(fd, &l);
    expect_refused(c, LT_E_UNSUPPORTED, 0, "served STAGED; LAUNCH needs PINNED or MAPPED");
    l.r[0].lease = lp;
    l.r[0].offset = 512 * 1024 - 8;
    l.r[0].length = 16;
    c = launch_run(fd, &l);
    expect_refused(c, LT_E_OUT_OF_RANGE, LT_INDEX_NONE, "within the lease's 524288 bytes");
    l.r[0].offset = 0;
    l.r[0].lease = lt_lease_id_make(lp.slot, lp.gen + 7);
    c = launch_run(fd, &l);
    ck_assert_msg(c.status == LT_E_STALE_ID || c.status == LT_E_NOT_FOUND, "%s",
                  lt_error_name(c.status));
    l.r[0].lease = lp;
    uint64_t rel = th_release_send(fd, lp);
    union lt_msg_buffer b;
    wait_for(fd, rel, LT_MSG_RELEASE_COMPLETE, &b);
    c = launch_run(fd, &l);
    ck_assert_msg(c.status == LT_E_STALE_ID, "%s: %s", lt_error_name(c.status), c.message);
    close(fd);
    ck_assert_int_eq(th_agent_stop(&a), 0);
    th_agent_cleanup(&a);
    munmap(p.map, p.size);
    munmap(s.map, s.size);
}
END_TEST

/* A stream held behind an unrung doorbell: a COPY_H2D waiting for it. */
static uint64_t hold_stream(int fd, struct seg *bells, struct lt_lease_id lease,
                            struct lt_stream_id stream, uint64_t seq)
{
    struct lt_msg_submit s;
    memset(&s, 0, sizeof s);
    s.lease = lease;
    s.stream = stream;
    s.op = LT_OP_COPY_H2D;
    s.flags = LT_SUBMIT_F_WAIT_BELL;
    s.args.copy = (struct lt_op_copy_h2d){.offset = 0, .length = 4096};
    s.bell = (struct lt_word_ref){.segment = bells->id, .offset = 64};
    s.bell_seq = seq;
    return th_submit_send(fd, &s);
}

START_TEST(launches_in_flight_are_bounded_and_a_release_waits_for_them)
{
    struct th_agent a;
    th_agent_start(&a, NULL, agent_args); /* --max-launches 4 */
    int fd = th_hello(a.sock, CAPS, NULL);
    /* bells: in a segment writable to the agent */
    struct seg bells = seg_offer_sealed(fd, 4096, LT_CLASS_MAPPED, 41, TH_OLD_SEALS);
    uint64_t *bell = (uint64_t *)(void *)(bells.map + 64);
    __atomic_store_n(bell, 0, __ATOMIC_RELEASE);
    struct seg p = seg_offer(fd, 1 * MiB, LT_CLASS_PINNED, 42);
    struct lt_lease_id lp = lease_ok(fd, &p, 0, p.size, LT_CLASS_PINNED);
    uint64_t hold = hold_stream(fd, &bells, lp, S0, 7);
    uint64_t rids[4];
    struct launch l = launch_of("k_launch_sum_u32", lp, 64 * 1024);
    l.args[0] = 3;
    l.result_bytes = 8;
    for (int i = 0; i < 4; i++)
        rids[i] = launch_send(fd, &l);
    struct lt_msg_launch_completion c = launch_run(fd, &l);
    expect_refused(c, LT_E_LIMIT, LT_INDEX_NONE, "4 launches of this client in flight, the limit");
    /* the lease is released while its launches wait: no RELEASE_COMPLETE yet */
    uint64_t rel = th_release_send(fd, lp);
    th_expect_silence(fd, 300);
    __atomic_store_n(bell, 7, __ATOMIC_RELEASE);
    union lt_msg_buffer b;
    wait_for(fd, hold, LT_MSG_COMPLETION, &b);
    for (int i = 0; i < 4; i++) {
        c = launch_wait(fd, rids[i]);
        ck_assert_msg(c.status == LT_OK, "%s", c.message);
        uint64_t got;
        memcpy(&got, c.result, 8);
        ck_assert_uint_eq(got, sum_ref(p.map, 64 * 1024, 3));
    }
    /* every completion came before the release's */
    ck_assert_int_eq(nstash, 0);
    th_expect(fd, &b, LT_MSG_RELEASE_COMPLETE);
    ck_assert_uint_eq(b.hdr.request_id, rel);
    ck_assert_uint_eq(((const struct lt_msg_release_complete *)(const void *)b.bytes)->status,
                      LT_OK);
    close(fd);
    ck_assert_int_eq(th_agent_stop(&a), 0);
    th_agent_cleanup(&a);
    munmap(p.map, p.size);
    munmap(bells.map, bells.size);
}
END_TEST

/* A LAUNCH's copies of its PINNED ranges take device memory until its
 * stream passes it: reserved when it is queued, within --device-budget and
 * --max-client-device, refused LIMIT past them, given back at completion.
 * Queued behind an unrung bell, two 1 MiB launches fit this client's 3 MiB
 * and the third is refused; once the bell rings they run, and a launch
 * fits again. */
START_TEST(launches_device_copies_are_budgeted)
{
    struct th_agent a;
    const char *const args[] = {"--cubin-dir",        GA_LAUNCH_CUBIN_DIR, "--pinned-budget",
                                "64M",                "--mapped-budget",   "64M",
                                "--device-budget",    "8M",                "--max-client-device",
                                "3M",                 NULL};
    th_agent_start(&a, NULL, args);
    int fd = th_hello(a.sock, CAPS, NULL);
    struct seg bells = seg_offer_sealed(fd, 4096, LT_CLASS_MAPPED, 43, TH_OLD_SEALS);
    uint64_t *bell = (uint64_t *)(void *)(bells.map + 64);
    __atomic_store_n(bell, 0, __ATOMIC_RELEASE);
    struct seg p = seg_offer(fd, 1 * MiB, LT_CLASS_PINNED, 44);
    struct lt_lease_id lp = lease_ok(fd, &p, 0, p.size, LT_CLASS_PINNED);
    const uint64_t hold = hold_stream(fd, &bells, lp, S0, 9);
    struct launch l = launch_of("k_launch_sum_u32", lp, 1 * MiB);
    l.args[0] = 5;
    l.result_bytes = 8;
    uint64_t rids[2];
    for (int i = 0; i < 2; i++)
        rids[i] = launch_send(fd, &l);
    struct lt_msg_launch_completion c = launch_run(fd, &l);
    expect_refused(c, LT_E_LIMIT, LT_INDEX_NONE,
                   "LAUNCH: needs 2 MiB of device memory, 0 MiB left to this client");
    __atomic_store_n(bell, 9, __ATOMIC_RELEASE);
    union lt_msg_buffer b;
    wait_for(fd, hold, LT_MSG_COMPLETION, &b);
    for (int i = 0; i < 2; i++) {
        c = launch_wait(fd, rids[i]);
        ck_assert_msg(c.status == LT_OK, "%s", c.message);
    }
    c = launch_run(fd, &l); /* the reservations went with the completions */
    ck_assert_msg(c.status == LT_OK, "after the completions: %s", c.message);
    uint64_t got;
    memcpy(&got, c.result, 8);
    ck_assert_uint_eq(got, sum_ref(p.map, 1 * MiB, 5));
    close(fd);
    ck_assert_int_eq(th_agent_stop(&a), 0);
    th_agent_cleanup(&a);
    munmap(p.map, p.size);
    munmap(bells.map, bells.size);
}
END_TEST

START_TEST(a_fault_is_answered_and_the_agent_serves_again_on_its_socket)
{
    struct th_agent a;
    th_agent_start(&a, NULL, agent_args);
    int fd = th_hello(a.sock, CAPS, NULL);
    struct seg bells = seg_offer_sealed(fd, 4096, LT_CLASS_MAPPED, 51, TH_OLD_SEALS);
    uint64_t *bell = (uint64_t *)(void *)(bells.map + 64);
    __atomic_store_n(bell, 0, __ATOMIC_RELEASE);
    struct seg p = seg_offer(fd, 1 * MiB, LT_CLASS_PINNED, 52);
    struct lt_lease_id lp = lease_ok(fd, &p, 0, p.size, LT_CLASS_PINNED);
    /* pending elsewhere: a submit on a stream of its own behind an unrung bell */
    struct lt_msg_ctl_reply cr;
    union lt_msg_buffer b;
    cr = *th_ctl(fd, LT_MSG_STREAM_CREATE, S0, (struct lt_event_id){0, 0},
                 (struct lt_event_id){0, 0}, LT_STREAM_F_NONBLOCKING, &b);
    uint64_t pending = hold_stream(fd, &bells, lp, cr.stream, 9);
    struct launch l = launch_of("k_launch_fault", lp, 4096);
    l.block[0] = 32;
    l.args[0] = FAULT_ADDRESS;
    struct lt_msg_launch_completion c = launch_run(fd, &l);
    ck_assert_msg(c.status == LT_E_GPU_FAULT, "expected GPU_FAULT, found %s: %s",
                  lt_error_name(c.status), c.message);
    ck_assert_msg(strstr(c.message, "the GPU faulted"), "%s", c.message);
    ck_assert_msg(c.detail != 0 && strncmp(c.cu_error, "CUDA_ERROR_", 11) == 0, "cu_error '%s'",
                  c.cu_error);
    wait_for(fd, pending, LT_MSG_COMPLETION, &b);
    ck_assert_uint_eq(((const struct lt_msg_completion *)(const void *)b.bytes)->status,
                      LT_E_GPU_FAULT);
    /* the connection ends; the process stays, re-executed on the same socket */
    for (ssize_t n; (n = th_recv(fd, &b, TH_TIMEOUT_MS)) > 0;)
        ;
    close(fd);
    ck_assert(th_file_wait_for(a.log, "re-executing after a GPU fault", TH_TIMEOUT_MS));
    ck_assert(th_file_wait_for(a.log, "took over the listening socket", TH_TIMEOUT_MS));
    ck_assert_int_eq(kill(a.pid, 0), 0);
    fd = th_hello(a.sock, CAPS, NULL);
    struct seg q = seg_offer(fd, 1 * MiB, LT_CLASS_PINNED, 53);
    struct lt_lease_id lq = lease_ok(fd, &q, 0, q.size, LT_CLASS_PINNED);
    struct launch s = launch_of("k_launch_sum_u32", lq, 8192);
    s.args[0] = 11;
    s.result_bytes = 16;
    c = launch_run(fd, &s);
    ck_assert_msg(c.status == LT_OK, "after the restart: %s: %s", lt_error_name(c.status),
                  c.message);
    uint64_t got;
    memcpy(&got, c.result, 8);
    ck_assert_uint_eq(got, sum_ref(q.map, 8192, 11));
    close(fd);
    ck_assert_int_eq(th_agent_stop(&a), 0);
    th_agent_cleanup(&a);
    munmap(p.map, p.size);
    munmap(q.map, q.size);
    munmap(bells.map, bells.size);
}
END_TEST

START_TEST(a_descriptor_that_disagrees_with_its_cubin_fails_start_up)
{
    char dir[] = "/tmp/agent-kdesc-XXXXXX", path[256], log[288];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/launch_kernels.cubin", dir);
    snprintf(log, sizeof log, "%s.log", dir);
    char cmd[768];
    snprintf(cmd, sizeof cmd, "cp %s/launch_kernels.cubin %s", GA_LAUNCH_CUBIN_DIR, path);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(path, sizeof path, "%s/launch_kernels.kdesc", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("kdesc 1\nkernel k_launch_fill\narg data lease_ptr lease=0 access=write\n"
          "arg bytes lease_len lease=0\narg seed u64\n",
          f);
    fclose(f);
    const char *const args[] = {LEASE_AGENT_HOST,
                                "--cubin-dir",
                                dir,
                                "--socket",
                                "/tmp/agent-kdesc-never/agent.sock",
                                NULL};
    ck_assert_int_eq(th_agent_run_once(args, log), 1);
    ck_assert(th_file_wait_for(log, "launch_kernels.kdesc disagrees with launch_kernels.cubin", 0));
    ck_assert(th_file_wait_for(log,
                               "parameter 2 (seed, u64) is 8 bytes in the descriptor, 4 in "
                               "the cubin",
                               0));
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", dir, log);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

static Suite *agent_launch_suite(void)
{
    Suite *s = suite_create("agent_launch");
    TCase *tc = tcase_create("launch");
    tcase_add_test(tc, launch_is_a_capability_granted_to_those_who_ask);
    tcase_add_test(tc, sums_match_c_on_pinned_and_mapped_leases);
    tcase_add_test(tc, writable_ranges_are_written_back_and_others_are_not);
    tcase_add_test(tc, writable_ranges_in_sealed_segments_are_refused_untouched);
    tcase_add_test(tc, every_refusal_is_a_completion_with_its_words);
    tcase_add_test(tc, launches_in_flight_are_bounded_and_a_release_waits_for_them);
    tcase_add_test(tc, launches_device_copies_are_budgeted);
    tcase_add_test(tc, a_descriptor_that_disagrees_with_its_cubin_fails_start_up);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    tc = tcase_create("fault");
    tcase_add_test(tc, a_fault_is_answered_and_the_agent_serves_again_on_its_socket);
    tcase_set_timeout(tc, 90);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(agent_launch_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
