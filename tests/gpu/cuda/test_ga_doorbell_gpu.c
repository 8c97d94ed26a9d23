/* Doorbells on a real GPU: a stream queued behind a bell does nothing until
 * another thread stores seq (a lower value does not open it), the data stored
 * before the ring is what the GPU reads, sequences run in order, and bad
 * arguments are refused before anything is queued. Run through gpu_gate. */
#include <check.h>
#include <cuda.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "gpu/cu.h"
#include "gpu/exec_cuda.h"
#include "gpu_test_util.h"
#include "kernels/blockhash_ref.h"
#include "kernels/checksum.h"

static struct ga_device *dev;
static struct ga_streams *streams;
static CUfunction k_checksum;

struct mapped {
    void *host;
    CUdeviceptr dev;
    size_t len;
};

static void mapped_alloc(struct mapped *m, size_t len)
{
    m->len = len;
    CU_OK(cuMemHostAlloc(&m->host, len, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    memset(m->host, 0, len);
    CU_OK(cuMemHostGetDevicePointer(&m->dev, m->host, 0));
}

static void mapped_free(struct mapped *m)
{
    CU_OK(cuMemFreeHost(m->host));
}

/* The work: the block checksum kernel over mapped host data (zero-copy). */
struct sum_work {
    CUdeviceptr data;
    unsigned long long len;
    unsigned int block;
    CUdeviceptr sums;
};

static int sum_launch(void *arg, struct CUstream_st *stream)
{
    struct sum_work *w = arg;
    void *params[] = {&w->data, &w->len, &w->block, &w->sums};
    unsigned int blocks = (unsigned int)kr_block_count(w->len, w->block);
    return cuLaunchKernel(k_checksum, blocks, 1, 1, KN_CHECKSUM_THREADS, 1, 1, 0, stream, params,
                          NULL) == CUDA_SUCCESS
               ? 0
               : -EIO;
}

struct ringer {
    uint64_t *bell;
    uint64_t seq;
    unsigned int delay_ms;
};

static void *ring_later(void *arg)
{
    struct ringer *r = arg;
    tu_sleep_ms(r->delay_ms);
    ga_doorbell_ring(r->bell, r->seq);
    return NULL;
}

START_TEST(stream_waits_until_another_thread_rings_the_bell)
{
    struct mapped bell, done, data, sums;
    mapped_alloc(&bell, 64);
    mapped_alloc(&done, 64);
    mapped_alloc(&data, 1 << 20);
    mapped_alloc(&sums, 4096);
    uint64_t rng = 0x0d00b311ULL;
    uint64_t seq = (tu_rng_next(&rng) >> 24) + 1000; /* not a small number */
    *(uint64_t *)bell.host = seq - 500;
    tu_fill(data.host, data.len, tu_rng_next(&rng));
    CUstream a = NULL;
    ck_assert_int_eq(ga_stream_new(streams, &a), 0);
    struct sum_work w = {.data = data.dev, .len = data.len, .block = 65536, .sums = sums.dev};
    struct ga_doorbell_req req = {
        .bell_dev = bell.dev, .seq = seq, .work = sum_launch, .work_arg = &w, .done_dev = done.dev};
    ck_assert_int_eq(ga_doorbell_queue(streams, a, &req), 0);
    /* Not rung: nothing runs, however long we look. */
    for (int i = 0; i < 20; i++) {
        tu_sleep_ms(5);
        ck_assert_uint_eq(ga_doorbell_peek(done.host), 0);
    }
    ck_assert_int_eq(ga_stream_query(streams, a), 0);
    ga_doorbell_ring(bell.host, seq - 1); /* one short: GEQ still false */
    tu_sleep_ms(30);
    ck_assert_uint_eq(ga_doorbell_peek(done.host), 0);
    ck_assert_int_eq(ga_stream_query(streams, a), 0);

    pthread_t t;
    struct ringer r = {.bell = bell.host, .seq = seq, .delay_ms = 20};
    uint64_t t0 = base_now_ns();
    ck_assert_int_eq(pthread_create(&t, NULL, ring_later, &r), 0);
    ck_assert(tu_wait_word(done.host, seq, 5000));
    uint64_t waited_ms = (base_now_ns() - t0) / 1000000;
    pthread_join(t, NULL);
    ck_assert_uint_eq(ga_doorbell_peek(done.host), seq);
    ck_assert_uint_ge(waited_ms, 19); /* it ran after the ring, not before */
    ck_assert_int_eq(ga_stream_synchronize(streams, a), 0);
    uint64_t want[16];
    ck_assert_int_eq(kr_block_checksums(data.host, data.len, 65536, want), 16);
    ck_assert_int_eq(memcmp(want, sums.host, sizeof(want)), 0);
    ga_stream_free(streams, a);
    mapped_free(&bell);
    mapped_free(&done);
    mapped_free(&data);
    mapped_free(&sums);
}
END_TEST

START_TEST(data_stored_before_the_ring_is_what_the_gpu_reads)
{
    enum { ROUNDS = 64 };
    struct mapped bell, done, data, sums;
    mapped_alloc(&bell, 64);
    mapped_alloc(&done, 64);
    mapped_alloc(&data, 256 << 10);
    mapped_alloc(&sums, ROUNDS * 4 * sizeof(uint64_t));
    CUstream a = NULL;
    ck_assert_int_eq(ga_stream_new(streams, &a), 0);
    uint64_t rng = 0x5eed0fdb11ULL;
    struct sum_work w[ROUNDS];
    /* Every round is queued before any data is there: the daemon's view. */
    for (int i = 0; i < ROUNDS; i++) {
        w[i] = (struct sum_work){.data = data.dev,
                                 .len = data.len,
                                 .block = 65536,
                                 .sums = sums.dev + (CUdeviceptr)i * 4 * sizeof(uint64_t)};
        struct ga_doorbell_req req = {.bell_dev = bell.dev,
                                      .seq = (uint64_t)i + 1,
                                      .work = sum_launch,
                                      .work_arg = &w[i],
                                      .done_dev = done.dev};
        ck_assert_int_eq(ga_doorbell_queue(streams, a, &req), 0);
    }
    uint64_t want[ROUNDS][4];
    for (int i = 0; i < ROUNDS; i++) {
        tu_fill(data.host, data.len, tu_rng_next(&rng));
        ck_assert_int_eq(kr_block_checksums(data.host, data.len, 65536, want[i]), 4);
        ck_assert_uint_eq(ga_doorbell_peek(done.host), (uint64_t)i);
        ga_doorbell_ring(bell.host, (uint64_t)i + 1);
        ck_assert_msg(tu_wait_word(done.host, (uint64_t)i + 1, 5000), "round %d never completed",
                      i);
    }
    ck_assert_int_eq(ga_stream_synchronize(streams, a), 0);
    for (int i = 0; i < ROUNDS; i++)
        ck_assert_msg(memcmp(want[i], (uint64_t *)sums.host + i * 4, sizeof(want[i])) == 0,
                      "round %d read other data than was stored before its ring", i);
    ga_stream_free(streams, a);
    mapped_free(&bell);
    mapped_free(&done);
    mapped_free(&data);
    mapped_free(&sums);
}
END_TEST

static int failing_work(void *arg, struct CUstream_st *stream)
{
    (void)arg;
    (void)stream;
    return -ENOSPC;
}

START_TEST(bad_doorbell_arguments_are_refused)
{
    struct mapped words;
    mapped_alloc(&words, 64);
    CUstream a = NULL;
    ck_assert_int_eq(ga_stream_new(streams, &a), 0);
    tu_capture_clear();
    struct ga_doorbell_req req = {.bell_dev = words.dev + 4, .seq = 1};
    ck_assert_int_eq(ga_doorbell_queue(streams, a, &req), -EINVAL);
    ck_assert_msg(tu_logged("8-byte aligned device address of the bell word"), "%s", tu_captured);
    req.bell_dev = 0;
    ck_assert_int_eq(ga_doorbell_queue(streams, a, &req), -EINVAL);
    req.bell_dev = words.dev;
    req.done_dev = words.dev + 12;
    ck_assert_int_eq(ga_doorbell_queue(streams, a, &req), -EINVAL);
    ck_assert_int_eq(ga_doorbell_signal(streams, a, words.dev + 1, 5), -EINVAL);
    req.done_dev = words.dev + 8;
    /* (Another client's or a stale stream id is the executor front's
     * refusal, before any doorbell is queued: tests/gpu/exec.) */
    ck_assert_int_eq(ga_doorbell_queue(streams, NULL, &req), -EINVAL);
    ck_assert_int_eq(ga_doorbell_queue(streams, a, NULL), -EINVAL);
    /* The work's own error comes back; the wait before it stays queued. */
    *(uint64_t *)words.host = 1;
    req.work = failing_work;
    ck_assert_int_eq(ga_doorbell_queue(streams, a, &req), -ENOSPC);
    ck_assert_int_eq(ga_stream_synchronize(streams, a), 0);
    ck_assert_uint_eq(ga_doorbell_peek((uint64_t *)words.host + 1), 0); /* no completion write */
    ck_assert_int_eq(ga_doorbell_check(dev), 0);
    ck_assert_int_eq(ga_doorbell_check(NULL), -EINVAL);
    ga_stream_free(streams, a);
    mapped_free(&words);
}
END_TEST

START_TEST(sequence_numbers_compare_across_wraparound)
{
    struct mapped bell, done;
    mapped_alloc(&bell, 64);
    mapped_alloc(&done, 64);
    const uint64_t seq = 3; /* the bell is just below 2^64: behind seq, modulo 2^64 */
    *(uint64_t *)bell.host = UINT64_MAX - 2;
    CUstream a = NULL;
    ck_assert_int_eq(ga_stream_new(streams, &a), 0);
    struct ga_doorbell_req req = {.bell_dev = bell.dev, .seq = seq, .done_dev = done.dev};
    ck_assert_int_eq(ga_doorbell_queue(streams, a, &req), 0);
    tu_sleep_ms(30);
    ck_assert_uint_eq(ga_doorbell_peek(done.host), 0);
    ga_doorbell_ring(bell.host, 4); /* past seq after the wrap: opens */
    ck_assert(tu_wait_word(done.host, seq, 5000));
    ga_stream_free(streams, a);
    mapped_free(&bell);
    mapped_free(&done);
}
END_TEST

static Suite *doorbell_suite(void)
{
    Suite *s = suite_create("ga_doorbell_gpu");
    TCase *tc = tcase_create("doorbell");
    tcase_add_test(tc, stream_waits_until_another_thread_rings_the_bell);
    tcase_add_test(tc, data_stored_before_the_ring_is_what_the_gpu_reads);
    tcase_add_test(tc, bad_doorbell_arguments_are_refused);
    tcase_add_test(tc, sequence_numbers_compare_across_wraparound);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}

static int open_device(char *why, size_t len)
{
    base_log_default_set(&tu_capture_sink);
    struct ga_device_opts opts = {.ordinal = 0};
    int rc = ga_device_open(&opts, &dev);
    if (rc == -ENODEV) {
        snprintf(why, len, "no usable CUDA device\n%s", tu_captured);
        return LEASE_CHECK_SKIP;
    }
    if (rc < 0) {
        snprintf(why, len, "ga_device_open failed: %d\n%s", rc, tu_captured);
        return -1;
    }
    if (ga_doorbell_check(dev) < 0) {
        snprintf(why, len, "this device has no stream memory operations\n%s", tu_captured);
        ga_device_close(dev);
        return LEASE_CHECK_SKIP;
    }
    if (ga_device_kernel(dev, KN_CHECKSUM_IMAGE, KN_K_BLOCK_CHECKSUM, &k_checksum) < 0 ||
        ga_streams_create(dev, &streams) < 0) {
        snprintf(why, len, "setup failed\n%s", tu_captured);
        return -1;
    }
    return 0;
}

static void close_device(int failed)
{
    if (!failed) /* after a failure a stream may wait on a bell nobody rings */
        ga_streams_destroy(streams);
    ga_device_close(dev);
    base_log_default_set(NULL);
}

LEASE_CHECK_MAIN_DONE(doorbell_suite, open_device, close_device)
