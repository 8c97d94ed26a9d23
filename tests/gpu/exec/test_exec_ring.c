/* The executor front's streaming rings (gpu/exec/ring.c) over a fake
 * backend, on the CPU: ids (issued, never issued, stale after a close,
 * another owner's), the limits (rings per owner, the depth), a ring's
 * sequence bookkeeping (a shard must continue the ring; a refused one gives
 * its sequences back), the close's answer and its counters, the gone
 * callback exactly once after it, an owner's drop and shutdown releasing
 * rings, and a backend without rings offering no LT_CAP_STREAM. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/exec_backend.h"
#include "lease_types/validate.h"

/* ---- a fake backend: shards wait until the test answers them ------------ */

#define FR_MAX 64

struct fr_ring {
    void *owner;
    struct ga_exec_ring *r;
    struct ga_exec_job *jobs[FR_MAX];
    int njobs;
    int released;
    uint32_t depth; /* the spec's, as the backend got it */
};

static struct {
    struct fr_ring rings[FR_MAX];
    int nrings;
    int refuse_next_shard;
    int owners;
} FR;

static int fr_work_check(void *be, const struct ga_exec_work *w, struct lt_failure *why)
{
    (void)be;
    (void)w;
    (void)why;
    return 0;
}

static int fr_owner_open(void *be, uint64_t owner, void **bo_p)
{
    (void)be;
    (void)owner;
    *bo_p = (void *)(uintptr_t)(++FR.owners);
    return 0;
}

static void fr_release(struct fr_ring *fr, struct ga_exec_call *close)
{
    for (int i = 0; i < fr->njobs; i++) {
        struct ga_exec_result res = {.status = LT_E_SHUTTING_DOWN};
        ga_exec_job_done(fr->jobs[i], &res);
    }
    fr->njobs = 0;
    fr->released = 1;
    ga_exec_ring_released(fr->r, close);
}

static void fr_owner_drop(void *be, void *bo)
{
    (void)be;
    for (int i = 0; i < FR.nrings; i++)
        if (FR.rings[i].owner == bo && !FR.rings[i].released)
            fr_release(&FR.rings[i], NULL);
}

static int fr_stream_open(void *be, void *bo, uint32_t flags, void **bs_p)
{
    (void)be;
    (void)flags;
    *bs_p = bo;
    return 0;
}

static void fr_nop(void *be, void *obj)
{
    (void)be;
    (void)obj;
}

static int fr_ring_open(void *be, void *bo, struct ga_exec_ring *r,
                        const struct ga_exec_ring_spec *spec, void **br_p, struct lt_failure *why)
{
    (void)be;
    (void)why;
    ck_assert_int_lt(FR.nrings, FR_MAX);
    struct fr_ring *fr = &FR.rings[FR.nrings++];
    memset(fr, 0, sizeof *fr);
    fr->depth = spec->depth;
    fr->owner = bo;
    fr->r = r;
    *br_p = fr;
    return 0;
}

static int fr_ring_shard(void *be, void *br, struct ga_exec_job *job, struct lt_failure *why)
{
    (void)be;
    struct fr_ring *fr = br;
    if (FR.refuse_next_shard) {
        FR.refuse_next_shard = 0;
        return lt_failure_set(why, LT_E_UNSUPPORTED, 0, "fake: refused");
    }
    ck_assert_ptr_nonnull(ga_exec_job_shard(job));
    fr->jobs[fr->njobs++] = job;
    return 0;
}

static void fr_ring_close(void *be, void *br, struct ga_exec_call *close)
{
    (void)be;
    fr_release(br, close);
}

static int fr_stats(void *be, char *buf, size_t len)
{
    (void)be;
    return snprintf(buf, len, "fake\n");
}

static void fr_shutdown(void *be)
{
    (void)be;
}

static struct ga_exec_backend_ops fr_ops = {
    .work_check = fr_work_check,
    .owner_open = fr_owner_open,
    .owner_drop = fr_owner_drop,
    .stream_open = fr_stream_open,
    .stream_close = fr_nop,
    .stats_format = fr_stats,
    .shutdown = fr_shutdown,
    .destroy = fr_shutdown,
    .ring_open = fr_ring_open,
    .ring_shard = fr_ring_shard,
    .ring_close = fr_ring_close,
};

static struct ga_executor *ex;

static struct ga_executor *make(const struct ga_exec_backend_ops *ops, uint32_t max_rings)
{
    memset(&FR, 0, sizeof FR);
    struct ga_exec_config cfg = {.limits = {.max_rings = max_rings}};
    struct ga_exec_backend be = {
        .name = "fake", .caps = LT_CAP_DOORBELL | LT_CAP_STREAM, .ops = ops, .ctx = NULL};
    struct ga_executor *e = NULL;
    ck_assert_int_eq(ga_executor_create(&cfg, &be, &e), 0);
    return e;
}

/* ---- callbacks the tests count ---- */

static int gone_calls, done_calls, close_answers, gone_before_close;
static uint32_t last_status;
static struct ga_exec_ctl_result last_close;

static void on_gone(void *arg)
{
    (void)arg;
    gone_calls++;
}

static void on_done(void *arg, const struct ga_exec_result *res)
{
    (void)arg;
    done_calls++;
    last_status = res->status;
}

static void on_close(void *arg, const struct ga_exec_ctl_result *res)
{
    (void)arg;
    close_answers++;
    last_close = *res;
    gone_before_close = gone_calls; /* the close is answered before its ring's gone */
}

static uint64_t words[2 * 8];
static unsigned char slots[8 * 4096];

static struct ga_exec_ring_spec spec_for(uint64_t owner, uint32_t depth)
{
    return (struct ga_exec_ring_spec){
        .owner = owner,
        .slots = slots,
        .slot_bytes = 4096,
        .nslots = 8,
        .depth = depth,
        .max_shard_bytes = 1 << 20,
        .seq = words,
        .seq_dev = 8,
        .done = words + 8,
        .done_dev = 72,
        .gone_fn = on_gone,
    };
}

static struct ga_exec_shard shard_for(uint64_t owner, struct lt_ring_id ring, uint64_t first,
                                      uint64_t len)
{
    return (struct ga_exec_shard){
        .owner = owner,
        .ring = ring,
        .first_seq = first,
        .length = len,
        .op = LT_OP_COPY_H2D,
        .args = {.copy = {.offset = 0, .length = len}},
        .done_cb = on_done,
    };
}

static void answer_all(uint32_t status)
{
    for (int i = 0; i < FR.nrings; i++) {
        struct fr_ring *fr = &FR.rings[i];
        for (int k = 0; k < fr->njobs; k++) {
            struct ga_exec_result res = {.status = status};
            ga_exec_job_done(fr->jobs[k], &res);
        }
        fr->njobs = 0;
    }
}

static void setup(void)
{
    gone_calls = done_calls = close_answers = 0;
    ex = make(&fr_ops, 2);
    ck_assert_int_eq(ga_exec_client_add(ex, 1), 0);
    ck_assert_int_eq(ga_exec_client_add(ex, 2), 0);
}

static void teardown(void)
{
    ga_executor_destroy(ex);
    ex = NULL;
}

START_TEST(test_a_ring_takes_shards_in_sequence_and_closes)
{
    struct lt_failure why;
    struct lt_ring_id id;
    uint32_t depth = 0;
    struct ga_exec_ring_spec sp = spec_for(1, 30);
    ck_assert_int_eq(ga_exec_ring_open(ex, &sp, &id, &depth, &why), 0);
    ck_assert_uint_eq(id.gen, 1);
    ck_assert_uint_eq(depth, GA_EXEC_RING_DEPTH_MAX); /* asked 30: the executor's bound */
    /* The backend sizes the ring for the depth granted, not the one asked. */
    ck_assert_uint_eq(FR.rings[FR.nrings - 1].depth, GA_EXEC_RING_DEPTH_MAX);
    ck_assert(ga_executor_info(ex)->caps & LT_CAP_STREAM);
    struct ga_exec_client_stats cs;
    ck_assert_int_eq(ga_exec_client_stats(ex, 1, &cs), 0);
    ck_assert_uint_eq(cs.rings, 1);

    /* 3 chunks, then 1, then 2: each shard continues the ring */
    struct ga_exec_shard s = shard_for(1, id, 1, 3 * 4096 - 5);
    ck_assert_int_eq(ga_exec_ring_shard(ex, &s, &why), 0);
    ck_assert_uint_eq(FR.rings[0].njobs, 1);
    ck_assert_uint_eq(ga_exec_job_shard(FR.rings[0].jobs[0])->chunks, 3);
    s = shard_for(1, id, 3, 4096);
    ck_assert_int_eq(ga_exec_ring_shard(ex, &s, &why), -EINVAL);
    ck_assert_uint_eq(why.code, LT_E_BAD_VALUE);
    ck_assert_ptr_nonnull(strstr(why.message, "expected 4"));
    s = shard_for(1, id, 4, 4096);
    ck_assert_int_eq(ga_exec_ring_shard(ex, &s, &why), 0);
    /* a refused shard gives its sequences back */
    FR.refuse_next_shard = 1;
    s = shard_for(1, id, 5, 2 * 4096);
    ck_assert_int_eq(ga_exec_ring_shard(ex, &s, &why), lt_error_errno(LT_E_UNSUPPORTED));
    ck_assert_int_eq(ga_exec_ring_shard(ex, &s, &why), 0);
    answer_all(LT_OK);
    ck_assert_int_eq(done_calls, 3);
    ck_assert_uint_eq(last_status, LT_OK);

    struct ga_exec_reply reply = {.done_cb = on_close};
    ck_assert_int_eq(ga_exec_ring_close(ex, 1, id, &reply, &why), 0);
    ck_assert_int_eq(close_answers, 1);
    ck_assert_int_eq(gone_before_close, 0);
    ck_assert_int_eq(gone_calls, 1);
    ck_assert_uint_eq(last_close.status, LT_OK);
    ck_assert(lt_ring_id_eq(last_close.ring, id));
    ck_assert_uint_eq(last_close.ring_shards, 3);
    ck_assert_uint_eq(last_close.ring_chunks, 6);
    /* closed: its id is stale, and closing twice is refused */
    s = shard_for(1, id, 7, 4096);
    ck_assert_int_eq(ga_exec_ring_shard(ex, &s, &why), lt_error_errno(LT_E_STALE_ID));
    ck_assert_uint_eq(why.code, LT_E_STALE_ID);
    ck_assert_int_eq(ga_exec_ring_close(ex, 1, id, &reply, &why), lt_error_errno(LT_E_STALE_ID));
    ck_assert_int_eq(ga_exec_client_stats(ex, 1, &cs), 0);
    ck_assert_uint_eq(cs.rings, 0);
}
END_TEST

START_TEST(test_ring_ids_limits_and_depth_are_checked)
{
    struct lt_failure why;
    struct lt_ring_id a, b, c;
    uint32_t depth;
    struct ga_exec_ring_spec sp = spec_for(1, 2);
    ck_assert_int_eq(ga_exec_ring_open(ex, &sp, &a, &depth, &why), 0);
    ck_assert_uint_eq(depth, 2);
    ck_assert_int_eq(ga_exec_ring_open(ex, &sp, &b, &depth, &why), 0);
    /* max_rings 2 per owner */
    ck_assert_int_eq(ga_exec_ring_open(ex, &sp, &c, &depth, &why), lt_error_errno(LT_E_LIMIT));
    ck_assert_uint_eq(why.code, LT_E_LIMIT);
    ck_assert_ptr_nonnull(strstr(why.message, "2 of 2"));
    /* the depth: two outstanding, the third refused until one is answered */
    struct ga_exec_shard s = shard_for(1, a, 1, 4096);
    ck_assert_int_eq(ga_exec_ring_shard(ex, &s, &why), 0);
    s.first_seq = 2;
    ck_assert_int_eq(ga_exec_ring_shard(ex, &s, &why), 0);
    s.first_seq = 3;
    ck_assert_int_eq(ga_exec_ring_shard(ex, &s, &why), lt_error_errno(LT_E_LIMIT));
    answer_all(LT_OK);
    ck_assert_int_eq(ga_exec_ring_shard(ex, &s, &why), 0);
    /* larger than the ring's images */
    s = shard_for(1, a, 4, (1 << 20) + 1);
    ck_assert_int_eq(ga_exec_ring_shard(ex, &s, &why), lt_error_errno(LT_E_OUT_OF_RANGE));
    /* another owner's ring, one never issued, a malformed id */
    s = shard_for(2, a, 4, 4096);
    ck_assert_int_eq(ga_exec_ring_shard(ex, &s, &why), lt_error_errno(LT_E_NOT_OWNER));
    s = shard_for(1, (struct lt_ring_id){a.slot + 40, 1}, 4, 4096);
    ck_assert_int_eq(ga_exec_ring_shard(ex, &s, &why), lt_error_errno(LT_E_NOT_FOUND));
    s = shard_for(1, (struct lt_ring_id){a.slot, 0}, 4, 4096);
    ck_assert_int_eq(ga_exec_ring_shard(ex, &s, &why), lt_error_errno(LT_E_BAD_ID));
    answer_all(LT_OK);
    struct ga_exec_reply reply = {.done_cb = on_close};
    ck_assert_int_eq(ga_exec_ring_close(ex, 2, a, &reply, &why), lt_error_errno(LT_E_NOT_OWNER));
    ck_assert_int_eq(ga_exec_ring_close(ex, 1, a, &reply, &why), 0);
    ck_assert_int_eq(ga_exec_ring_close(ex, 1, b, &reply, &why), 0);
    ck_assert_int_eq(gone_calls, 2);
}
END_TEST

START_TEST(test_a_drop_and_shutdown_release_every_ring_once)
{
    struct lt_failure why;
    struct lt_ring_id a, b, c;
    uint32_t depth;
    struct ga_exec_ring_spec s1 = spec_for(1, 4), s2 = spec_for(2, 4);
    ck_assert_int_eq(ga_exec_ring_open(ex, &s1, &a, &depth, &why), 0);
    ck_assert_int_eq(ga_exec_ring_open(ex, &s1, &b, &depth, &why), 0);
    ck_assert_int_eq(ga_exec_ring_open(ex, &s2, &c, &depth, &why), 0);
    struct ga_exec_shard s = shard_for(1, a, 1, 4096);
    ck_assert_int_eq(ga_exec_ring_shard(ex, &s, &why), 0);
    s = shard_for(1, b, 1, 4096);
    ck_assert_int_eq(ga_exec_ring_shard(ex, &s, &why), 0);
    ga_exec_client_drop(ex, 1);
    ck_assert_int_eq(done_calls, 2);
    ck_assert_uint_eq(last_status, LT_E_SHUTTING_DOWN);
    ck_assert_int_eq(gone_calls, 2);
    ck_assert_int_eq(close_answers, 0);
    /* owner 2's ring goes at shutdown, with its queued shard */
    s = shard_for(2, c, 1, 4096);
    ck_assert_int_eq(ga_exec_ring_shard(ex, &s, &why), 0);
    ga_exec_shutdown(ex);
    ck_assert_int_eq(done_calls, 3);
    ck_assert_int_eq(gone_calls, 3);
}
END_TEST

START_TEST(test_a_backend_without_rings_offers_no_stream)
{
    ga_executor_destroy(ex);
    struct ga_exec_backend_ops none = fr_ops;
    none.ring_open = NULL;
    none.ring_shard = NULL;
    none.ring_close = NULL;
    ex = make(&none, 0);
    ck_assert_int_eq(ga_exec_client_add(ex, 1), 0);
    ck_assert_uint_eq(ga_executor_info(ex)->caps & LT_CAP_STREAM, 0);
    ck_assert_uint_eq(ga_executor_info(ex)->max_rings, 0);
    struct lt_failure why;
    struct lt_ring_id id;
    uint32_t depth;
    struct ga_exec_ring_spec sp = spec_for(1, 2);
    ck_assert_int_eq(ga_exec_ring_open(ex, &sp, &id, &depth, &why),
                     lt_error_errno(LT_E_UNSUPPORTED));
    ck_assert_uint_eq(why.code, LT_E_UNSUPPORTED);
    /* a bad spec is refused before anything is made */
    ga_executor_destroy(ex);
    ex = make(&fr_ops, 0);
    ck_assert_int_eq(ga_exec_client_add(ex, 1), 0);
    sp.nslots = 0;
    ck_assert_int_eq(ga_exec_ring_open(ex, &sp, &id, &depth, &why), lt_error_errno(LT_E_BAD_VALUE));
    sp = spec_for(1, 2);
    sp.gone_fn = NULL;
    ck_assert_int_eq(ga_exec_ring_open(ex, &sp, &id, &depth, &why), lt_error_errno(LT_E_BAD_VALUE));
    ck_assert_int_eq(FR.nrings, 0);
}
END_TEST

static Suite *ring_suite(void)
{
    Suite *s = suite_create("exec_ring");
    TCase *tc = tcase_create("rings");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_a_ring_takes_shards_in_sequence_and_closes);
    tcase_add_test(tc, test_ring_ids_limits_and_depth_are_checked);
    tcase_add_test(tc, test_a_drop_and_shutdown_release_every_ring_once);
    tcase_add_test(tc, test_a_backend_without_rings_offers_no_stream);
    suite_add_tcase(s, tc);
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
