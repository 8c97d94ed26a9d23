/* ga exec on a real GPU: the pool's moving context under thousands of
 * random calls on the CUDA stream layer, timing and GPU-side event waits,
 * record_allocation holding a lease's release until a copy completes; and
 * the executor front over the CUDA backend: its id tables (limits, stale and
 * foreign ids, the default stream, timing refusals), record_allocation by
 * id, and dropping a dead client's ids while its work still completes. Run
 * through gpu_gate. */
#include <check.h>
#include <cuda.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check_main.h"
#include "exec_test_util.h"
#include "gpu/exec_cuda.h"
#include "gpu/executor_cuda.h"
#include "gpu/lease_backend.h"
#include "gpu_test_util.h"
#include "kernels/blockhash_ref.h"
#include "lease/lease.h"

static struct ga_device *dev;
static CUdevice cu_dev;
static CUcontext primary;
static unsigned long long primary_id;

/* ---- the pool's moving context under random load ---- */

enum { OPS = 3000, WINDOW = 48, REGION = 16 << 10, SHARED = 8, POOL_THREADS = 8 };
enum { K_COPY, K_CHECKSUM, K_EVENTS, KINDS };

struct stress {
    struct ga_pool *pool;
    struct ga_streams *streams;
    unsigned char *host; /* pinned: OPS regions in, OPS regions out */
    CUdeviceptr dmem;    /* OPS regions */
    CUstream shared[SHARED];
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int inflight, finished, failed, multi_thread_ops;
    int ctx_wrong, ctx_inactive, jobs;
    uint64_t kinds_done[KINDS];
    char first_failure[512];
};

struct op {
    struct stress *st;
    int index, kind, step, nsteps;
    uint64_t seed;
    size_t len;
    int own_stream;
    CUstream stream;
    CUevent ev[2];
    uint32_t workers; /* bit per worker index that ran a step */
};

static unsigned char *op_in(struct op *o)
{
    return o->st->host + (size_t)o->index * 2 * REGION;
}

static unsigned char *op_out(struct op *o)
{
    return op_in(o) + REGION;
}

static CUdeviceptr op_dev(struct op *o)
{
    return o->st->dmem + (CUdeviceptr)o->index * REGION;
}

static void op_fail(struct op *o, const char *what, int rc)
{
    struct stress *st = o->st;
    pthread_mutex_lock(&st->lock);
    if (!st->first_failure[0])
        snprintf(st->first_failure, sizeof(st->first_failure), "op %d (kind %d) step %d: %s: rc %d",
                 o->index, o->kind, o->step, what, rc);
    pthread_mutex_unlock(&st->lock);
}

#define OP_TRY(expr)                                                                               \
    do {                                                                                           \
        int op_try_rc = (expr);                                                                    \
        if (op_try_rc < 0) {                                                                       \
            op_fail(o, #expr, op_try_rc);                                                          \
            return op_try_rc;                                                                      \
        }                                                                                          \
    } while (0)

#define OP_CU(expr)                                                                                \
    do {                                                                                           \
        CUresult op_cu_rc = (expr);                                                                \
        if (op_cu_rc != CUDA_SUCCESS) {                                                            \
            op_fail(o, #expr, -(int)op_cu_rc);                                                     \
            return -EIO;                                                                           \
        }                                                                                          \
    } while (0)

/* The context this worker runs in must be the retained primary, active. */
static void op_check_context(struct op *o)
{
    struct stress *st = o->st;
    CUcontext cur = NULL;
    unsigned long long id = 0;
    unsigned int flags = 0;
    int active = 0;
    int wrong = cuCtxGetCurrent(&cur) != CUDA_SUCCESS || cur != primary ||
                cuCtxGetId(cur, &id) != CUDA_SUCCESS || id != primary_id;
    int inactive = cuDevicePrimaryCtxGetState(cu_dev, &flags, &active) != CUDA_SUCCESS || !active;
    __atomic_add_fetch(&st->ctx_wrong, wrong, __ATOMIC_RELAXED);
    __atomic_add_fetch(&st->ctx_inactive, inactive, __ATOMIC_RELAXED);
    __atomic_add_fetch(&st->jobs, 1, __ATOMIC_RELAXED);
}

static int op_htod(struct op *o)
{
    OP_CU(cuMemcpyHtoDAsync(op_dev(o), op_in(o), o->len, o->stream));
    return 0;
}

static int op_copy_step(struct op *o)
{
    struct ga_streams *s = o->st->streams;
    switch (o->step) {
    case 0:
        if (o->own_stream)
            OP_TRY(ga_stream_new(s, &o->stream));
        tu_fill(op_in(o), o->len, o->seed);
        return op_htod(o);
    case 1:
        OP_CU(cuMemcpyDtoHAsync(op_out(o), op_dev(o), o->len, o->stream));
        OP_TRY(ga_event_new(s, 0, &o->ev[0]));
        OP_TRY(ga_event_record(s, o->ev[0], o->stream));
        return 0;
    default:
        OP_TRY(ga_event_synchronize(s, o->ev[0]));
        if (memcmp(op_in(o), op_out(o), o->len) != 0) {
            op_fail(o, "round trip differs", -EBADMSG);
            return -EBADMSG;
        }
        ga_event_free(s, o->ev[0]);
        if (o->own_stream)
            ga_stream_free(s, o->stream);
        return 0;
    }
}

static int op_checksum_step(struct op *o)
{
    if (o->step == 0) {
        tu_fill(op_in(o), o->len, o->seed);
        OP_TRY(op_htod(o));
        OP_TRY(ga_stream_synchronize(o->st->streams, o->stream));
        return 0;
    }
    uint64_t want[REGION / 1024], got[REGION / 1024];
    long n = kr_block_checksums(op_in(o), o->len, 1024, want);
    OP_TRY(ga_checksum_compute(dev, op_dev(o), o->len, 1024, got));
    if (n < 1 || memcmp(want, got, (size_t)n * sizeof(*got)) != 0) {
        op_fail(o, "GPU checksums differ from the reference", -EBADMSG);
        return -EBADMSG;
    }
    return 0;
}

static int op_events_step(struct op *o)
{
    struct ga_streams *s = o->st->streams;
    uint32_t pattern = (uint32_t)o->seed | 1u;
    CUstream other = o->st->shared[o->seed % SHARED];
    switch (o->step) {
    case 0:
        OP_TRY(ga_stream_new(s, &o->stream));
        OP_TRY(ga_event_new(s, GA_EVENT_TIMING, &o->ev[0]));
        OP_TRY(ga_event_record(s, o->ev[0], o->stream));
        OP_CU(cuMemsetD32Async(op_dev(o), pattern, o->len / 4, o->stream));
        OP_TRY(ga_event_new(s, GA_EVENT_TIMING, &o->ev[1]));
        OP_TRY(ga_event_record(s, o->ev[1], o->stream));
        return 0;
    case 1:
        OP_TRY(ga_event_wait(s, other, o->ev[1])); /* GPU-side only */
        OP_TRY(ga_event_query(s, o->ev[0]));
        OP_TRY(ga_stream_query(s, o->stream));
        return 0;
    default: {
        OP_TRY(ga_event_synchronize(s, o->ev[1]));
        float ms = -1;
        OP_TRY(ga_event_elapsed(s, o->ev[0], o->ev[1], &ms));
        if (!(ms >= 0)) {
            op_fail(o, "elapsed below 0", -ERANGE);
            return -ERANGE;
        }
        uint32_t *back = (uint32_t *)op_out(o);
        OP_CU(cuMemcpyDtoH(back, op_dev(o), o->len));
        for (size_t i = 0; i < o->len / 4; i++)
            if (back[i] != pattern) {
                op_fail(o, "memset pattern differs", -EBADMSG);
                return -EBADMSG;
            }
        ga_event_free(s, o->ev[0]);
        ga_event_free(s, o->ev[1]);
        ga_stream_free(s, o->stream);
        return 0;
    }
    }
}

static int op_job(void *arg)
{
    struct op *o = arg;
    op_check_context(o);
    int w = ga_pool_worker_index();
    if (w >= 0 && w < 32)
        o->workers |= 1u << w;
    switch (o->kind) {
    case K_COPY:
        return op_copy_step(o);
    case K_CHECKSUM:
        return op_checksum_step(o);
    default:
        return op_events_step(o);
    }
}

static void op_finish(struct op *o, int rc)
{
    struct stress *st = o->st;
    pthread_mutex_lock(&st->lock);
    st->inflight--;
    st->finished++;
    if (rc < 0)
        st->failed++;
    else
        st->kinds_done[o->kind]++;
    if (__builtin_popcount(o->workers) > 1)
        st->multi_thread_ops++;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->lock);
}

/* The next step goes back to the pool: any worker may take it. */
static void op_done(void *arg, int rc)
{
    struct op *o = arg;
    if (rc < 0 || ++o->step == o->nsteps) {
        op_finish(o, rc);
        return;
    }
    int src = ga_pool_submit(o->st->pool, op_job, o, op_done, o, NULL);
    if (src < 0) {
        op_fail(o, "resubmit", src);
        op_finish(o, src);
    }
}

START_TEST(pool_moves_one_primary_context_across_threads_under_random_load)
{
    static struct stress st;
    memset(&st, 0, sizeof(st));
    pthread_mutex_init(&st.lock, NULL);
    pthread_cond_init(&st.cv, NULL);
    struct ga_pool_opts popts = {.threads = POOL_THREADS};
    ck_assert_int_eq(ga_device_pool_create(dev, &popts, &st.pool), 0);
    ck_assert_int_eq(ga_streams_create(dev, &st.streams), 0);
    CU_OK(cuMemHostAlloc((void **)&st.host, (size_t)OPS * 2 * REGION, CU_MEMHOSTALLOC_PORTABLE));
    CU_OK(cuMemAlloc(&st.dmem, (size_t)OPS * REGION));
    for (int i = 0; i < SHARED; i++)
        ck_assert_int_eq(ga_stream_new(st.streams, &st.shared[i]), 0);

    struct op *ops = calloc(OPS, sizeof(*ops));
    ck_assert_ptr_nonnull(ops);
    uint64_t rng = 0xa11ce5eedULL;
    for (int i = 0; i < OPS; i++) {
        struct op *o = &ops[i];
        uint64_t r = tu_rng_next(&rng);
        o->st = &st;
        o->index = i;
        o->kind = (int)(r % KINDS);
        o->nsteps = o->kind == K_CHECKSUM ? 2 : 3;
        o->seed = tu_rng_next(&rng);
        o->len = 8 * (1 + (r >> 8) % (REGION / 8)); /* 8 .. REGION bytes */
        o->own_stream = o->kind == K_COPY && (r >> 32) % 2;
        o->stream = st.shared[(r >> 40) % SHARED];
        pthread_mutex_lock(&st.lock);
        while (st.inflight >= WINDOW)
            pthread_cond_wait(&st.cv, &st.lock);
        st.inflight++;
        pthread_mutex_unlock(&st.lock);
        int rc = ga_pool_submit(st.pool, op_job, o, op_done, o, NULL);
        ck_assert_int_eq(rc, 0);
    }
    pthread_mutex_lock(&st.lock);
    while (st.finished < OPS)
        pthread_cond_wait(&st.cv, &st.lock);
    pthread_mutex_unlock(&st.lock);

    struct ga_pool_stats ps;
    ck_assert_int_eq(ga_pool_stats_get(st.pool, &ps), 0);
    struct ga_streams_stats ss;
    ck_assert_int_eq(ga_streams_stats_get(st.streams, &ss), 0);
    printf("stress: %d ops (%" PRIu64 " copy, %" PRIu64 " checksum, %" PRIu64
           " events), %d jobs, %u of %u workers used, %d ops spread over >1 thread, "
           "context wrong %d, inactive %d\n",
           OPS, st.kinds_done[K_COPY], st.kinds_done[K_CHECKSUM], st.kinds_done[K_EVENTS], st.jobs,
           ps.threads_used, ps.threads, st.multi_thread_ops, st.ctx_wrong, st.ctx_inactive);
    ck_assert_msg(st.failed == 0, "%d ops failed; first: %s\n%s", st.failed, st.first_failure,
                  tu_captured);
    ck_assert_int_eq(st.jobs, (int)(st.kinds_done[K_CHECKSUM] * 2 +
                                    (st.kinds_done[K_COPY] + st.kinds_done[K_EVENTS]) * 3));
    ck_assert_int_ge(st.jobs, 7000);
    ck_assert_int_eq(st.ctx_wrong, 0);
    ck_assert_int_eq(st.ctx_inactive, 0);
    ck_assert_uint_gt(ps.threads_used, 1);
    ck_assert_int_gt(st.multi_thread_ops, 0);
    for (int k = 0; k < KINDS; k++)
        ck_assert_uint_gt(st.kinds_done[k], OPS / 5);
    ck_assert_uint_eq(ss.streams, SHARED); /* every op's own stream was freed */
    ck_assert_uint_eq(ss.events, 0);
    /* This thread too sees the primary context, still the only one. */
    CUcontext cur = NULL;
    ck_assert_int_eq(ga_device_make_current(dev), 0);
    CU_OK(cuCtxGetCurrent(&cur));
    ck_assert_ptr_eq(cur, primary);
    ck_assert_int_eq(ga_device_synchronize(dev), 0);

    ga_pool_destroy(st.pool);
    for (int i = 0; i < SHARED; i++)
        ga_stream_free(st.streams, st.shared[i]);
    ga_streams_destroy(st.streams);
    CU_OK(cuMemFree(st.dmem));
    CU_OK(cuMemFreeHost(st.host));
    free(ops);
    pthread_cond_destroy(&st.cv);
    pthread_mutex_destroy(&st.lock);
}
END_TEST

/* ---- the executor front's tables over the CUDA backend ---- */

/* A CUDA executor with @owners registered (0: its defaults for the tables). */
static struct ga_executor *cuda_front(uint32_t table_streams, uint32_t table_events,
                                      const uint64_t *owners, int n)
{
    struct ga_executor_cuda_opts o = {.table_streams = table_streams, .table_events = table_events};
    struct ga_executor *ex = NULL;
    ck_assert_int_eq(ga_executor_cuda_create(dev, &o, &ex), 0);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(ga_exec_client_add(ex, owners[i]), 0);
    return ex;
}

START_TEST(stream_and_event_tables_refuse_past_their_maximum_with_the_numbers)
{
    static const uint64_t owners[] = {1, 2};
    struct ga_executor *ex = cuda_front(4, 3, owners, 2);
    struct lt_stream_id ids[5];
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(et_stream_create(ex, 1, 0, &ids[i]), 0);
    ids[4] = lt_stream_id_make(77, 77);
    ck_assert_int_eq(et_stream_create(ex, 2, 0, &ids[4]), -EMFILE);
    ck_assert(lt_stream_id_eq(ids[4], lt_stream_id_make(77, 77))); /* untouched */
    ck_assert_msg(strstr(et_why.message, "stream table is full: 4 of 4 in use"), "%s",
                  et_why.message);
    ck_assert_int_eq(et_stream_destroy(ex, 1, ids[2]), 0);
    ck_assert_int_eq(et_stream_create(ex, 2, 0, &ids[4]), 0);

    struct lt_event_id ev[4], none = lt_event_id_make(0, 0);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(et_event_record(ex, 1, ids[0], none, 0, &ev[i]), 0);
    ck_assert_int_eq(et_event_record(ex, 1, ids[0], none, 0, &ev[3]), -EMFILE);
    ck_assert_msg(strstr(et_why.message, "event table is full: 3 of 3 in use"), "%s",
                  et_why.message);
    struct ga_exec_client_stats st1, st2;
    ck_assert_int_eq(ga_exec_client_stats(ex, 1, &st1), 0);
    ck_assert_int_eq(ga_exec_client_stats(ex, 2, &st2), 0);
    ck_assert_uint_eq(st1.streams + st2.streams, 4);
    ck_assert_uint_eq(st1.events, 3);
    ga_executor_destroy(ex);
    /* Tables above 2^20 are refused up front. */
    struct ga_executor_cuda_opts o = {.table_streams = (1u << 20) + 1};
    ck_assert_int_eq(ga_executor_cuda_create(dev, &o, &ex), -EINVAL);
}
END_TEST

START_TEST(stale_foreign_and_unknown_ids_are_refused)
{
    static const uint64_t owners[] = {0xa, 0xb};
    struct ga_executor *ex = cuda_front(0, 0, owners, 2);
    struct lt_stream_id a;
    struct lt_event_id e;
    ck_assert_int_eq(et_stream_create(ex, 0xa, 0, &a), 0);
    ck_assert_int_eq(et_event_record(ex, 0xa, a, lt_event_id_make(0, 0), 0, &e), 0);
    /* Another client: refused everywhere, and a refused destroy destroys nothing. */
    ck_assert_int_eq(et_stream_validate(ex, 0xb, a), -EPERM);
    ck_assert_msg(strstr(et_why.message, "belongs to another client"), "%s", et_why.message);
    ck_assert_int_eq(et_stream_query(ex, 0xb, a), -EPERM);
    ck_assert_int_eq(et_stream_synchronize(ex, 0xb, a), -EPERM);
    ck_assert_int_eq(et_stream_destroy(ex, 0xb, a), -EPERM);
    ck_assert_int_eq(et_event_query(ex, 0xb, e), -EPERM);
    ck_assert_int_eq(et_event_wait(ex, 0xb, lt_stream_id_default(), e), -EPERM);
    ck_assert_int_eq(et_event_destroy(ex, 0xb, e), -EPERM);
    ck_assert_int_eq(et_event_record(ex, 0xb, a, lt_event_id_make(0, 0), 0, &e), -EPERM);
    ck_assert_int_eq(et_stream_validate(ex, 0xa, a), 0);
    ck_assert_int_eq(et_event_synchronize(ex, 0xa, e), 0);
    ck_assert_int_eq(et_event_query(ex, 0xa, e), 1);
    ck_assert_int_eq(et_stream_synchronize(ex, 0xa, a), 0);
    ck_assert_int_eq(et_stream_query(ex, 0xa, a), 1);
    /* Destroyed: the old generation is stale, for the owner too. */
    ck_assert_int_eq(et_stream_destroy(ex, 0xa, a), 0);
    ck_assert_int_eq(et_event_destroy(ex, 0xa, e), 0);
    ck_assert_int_eq(et_stream_validate(ex, 0xa, a), -ESTALE);
    ck_assert_msg(strstr(et_why.message, "is stale"), "%s", et_why.message);
    ck_assert_int_eq(et_stream_query(ex, 0xa, a), -ESTALE);
    ck_assert_int_eq(et_stream_destroy(ex, 0xa, a), -ESTALE);
    ck_assert_int_eq(et_event_query(ex, 0xa, e), -ESTALE);
    ck_assert_int_eq(et_event_record(ex, 0xa, lt_stream_id_default(), e, 0, &e), -ESTALE);
    /* Never issued, out of range, malformed. */
    ck_assert_int_eq(et_stream_validate(ex, 0xa, lt_stream_id_make(900, 1)), -ENOENT);
    ck_assert_int_eq(et_stream_validate(ex, 0xa, lt_stream_id_make(1u << 20, 1)), -ENOENT);
    ck_assert_int_eq(et_stream_validate(ex, 0xa, lt_stream_id_make(3, 0)), -EINVAL);
    ck_assert_int_eq(et_event_query(ex, 0xa, lt_event_id_make(0, 0)), -EINVAL);
    ga_executor_destroy(ex);
}
END_TEST

START_TEST(default_stream_is_shared_and_cannot_be_destroyed)
{
    static const uint64_t owners[] = {1, 2};
    struct ga_executor *ex = cuda_front(0, 0, owners, 2);
    struct lt_stream_id d = lt_stream_id_default();
    struct lt_event_id e1, e2;
    ck_assert_int_eq(et_stream_validate(ex, 1, d), 0);
    ck_assert_int_eq(et_stream_validate(ex, 2, d), 0);
    ck_assert_int_eq(et_event_record(ex, 1, d, lt_event_id_make(0, 0), 0, &e1), 0);
    ck_assert_int_eq(et_event_record(ex, 2, d, lt_event_id_make(0, 0), 0, &e2), 0);
    ck_assert_int_eq(et_stream_synchronize(ex, 2, d), 0);
    /* {0,0} names each owner's own default stream (docs/gpu-exec.md): owner
     * 2's synchronize does not wait for owner 1's record, which a loaded
     * machine may not have run yet (FAKECUDA_HOSTFN_LAG_US under ASan did). */
    ck_assert_int_eq(et_stream_synchronize(ex, 1, d), 0);
    ck_assert_int_eq(et_stream_query(ex, 1, d), 1);
    ck_assert_int_eq(et_event_query(ex, 1, e1), 1);
    ck_assert_int_eq(et_stream_destroy(ex, 1, d), -EINVAL);
    ck_assert_msg(strstr(et_why.message, "default stream"), "%s", et_why.message);
    ck_assert_int_eq(et_stream_query(ex, 2, d), 1);
    ga_executor_destroy(ex);
}
END_TEST

START_TEST(untimed_events_are_refused_for_elapsed_time)
{
    static const uint64_t owners[] = {5};
    struct ga_executor *ex = cuda_front(0, 0, owners, 1);
    struct lt_stream_id a;
    ck_assert_int_eq(et_stream_create(ex, 5, 0, &a), 0);
    struct lt_event_id t0, t1, u0, u1, none = lt_event_id_make(0, 0);
    ck_assert_int_eq(et_event_record(ex, 5, a, none, LT_EVENT_F_TIMING, &t0), 0);
    ck_assert_int_eq(et_event_record(ex, 5, a, none, 0, &u0), 0);
    ck_assert_int_eq(et_event_record(ex, 5, a, none, LT_EVENT_F_TIMING, &t1), 0);
    ck_assert_int_eq(et_event_record(ex, 5, a, none, 0, &u1), 0);
    ck_assert_int_eq(et_event_synchronize(ex, 5, t1), 0);
    float ms = -1, keep = 123.0f;
    ck_assert_int_eq(et_event_elapsed(ex, 5, t0, t1, &ms), 0);
    ck_assert_msg(ms >= 0.0f && ms < 10000.0f, "elapsed %f ms", ms);
    ck_assert_int_eq(et_event_elapsed(ex, 5, u0, u1, &keep), -EINVAL);
    ck_assert_int_eq(et_event_elapsed(ex, 5, t0, u1, &keep), -EINVAL);
    ck_assert(keep == 123.0f);
    ck_assert_msg(strstr(et_why.message, "created with TIMING"), "%s", et_why.message);
    /* A non-timing event cannot be re-recorded as a timing one. */
    ck_assert_int_eq(et_event_record(ex, 5, a, u0, LT_EVENT_F_TIMING, &u0), -EINVAL);
    ck_assert_int_eq(et_event_record(ex, 5, a, none, 0x10, &u0), -EINVAL);
    ga_executor_destroy(ex);
}
END_TEST

/* Queues a doorbell wait on @st with nothing after it: the stream's later
 * work holds until *gate >= seq. */
static void gate_queue(struct ga_streams *s, CUstream st, uint64_t gate_dev, uint64_t seq,
                       ga_stream_work_fn work, void *work_arg)
{
    struct ga_doorbell_req req = {
        .bell_dev = gate_dev, .seq = seq, .work = work, .work_arg = work_arg};
    ck_assert_int_eq(ga_doorbell_queue(s, st, &req), 0);
}

struct host_word {
    uint64_t *host;
    CUdeviceptr dev;
};

static void host_word_alloc(struct host_word *w, uint64_t initial)
{
    CU_OK(cuMemHostAlloc((void **)&w->host, 64,
                         CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    *w->host = initial;
    CU_OK(cuMemHostGetDevicePointer(&w->dev, w->host, 0));
}

START_TEST(timed_region_has_positive_elapsed_and_unfinished_events_are_refused)
{
    struct ga_streams *s = NULL;
    ck_assert_int_eq(ga_streams_create(dev, &s), 0);
    CUstream a = NULL;
    ck_assert_int_eq(ga_stream_new(s, &a), 0);
    CUdeviceptr d = 0;
    const size_t n = 256u << 20;
    CU_OK(cuMemAlloc(&d, n));
    CUevent t0, t1;
    ck_assert_int_eq(ga_event_new(s, GA_EVENT_TIMING, &t0), 0);
    ck_assert_int_eq(ga_event_new(s, GA_EVENT_TIMING, &t1), 0);
    ck_assert_int_eq(ga_event_record(s, t0, a), 0);
    for (int i = 0; i < 8; i++)
        CU_OK(cuMemsetD32Async(d, 0x01020304u + (unsigned)i, n / 4, a));
    ck_assert_int_eq(ga_event_record(s, t1, a), 0);
    ck_assert_int_eq(ga_event_synchronize(s, t1), 0);
    float ms = -1;
    ck_assert_int_eq(ga_event_elapsed(s, t0, t1, &ms), 0);
    printf("timed region: 8 memsets of 256 MiB took %.3f ms\n", ms);
    ck_assert_msg(ms > 0.0f && ms < 10000.0f, "elapsed %f ms", ms);
    /* Unknown flags are refused before anything is made. */
    CUevent bad = NULL;
    ck_assert_int_eq(ga_event_new(s, 0x10, &bad), -EINVAL);
    ck_assert_ptr_null(bad);

    /* Re-recording behind a closed gate: elapsed is refused until complete. */
    struct host_word gate;
    host_word_alloc(&gate, 0);
    gate_queue(s, a, gate.dev, 1, NULL, NULL);
    ck_assert_int_eq(ga_event_record(s, t1, a), 0);
    ck_assert_int_eq(ga_event_query(s, t1), 0);
    tu_capture_clear();
    float keep = 123.0f;
    ck_assert_int_eq(ga_event_elapsed(s, t0, t1, &keep), -EAGAIN);
    ck_assert(keep == 123.0f);
    ck_assert_msg(tu_logged("has not completed yet"), "%s", tu_captured);
    ga_doorbell_ring(gate.host, 1);
    ck_assert_int_eq(ga_event_synchronize(s, t1), 0);
    ck_assert_int_eq(ga_event_elapsed(s, t0, t1, &keep), 0);
    ck_assert_msg(keep >= ms, "re-recorded end %f ms before the first end %f ms", keep, ms);
    ga_event_free(s, t0);
    ga_event_free(s, t1);
    ga_stream_free(s, a);
    ga_streams_destroy(s);
    CU_OK(cuMemFree(d));
    CU_OK(cuMemFreeHost(gate.host));
}
END_TEST

START_TEST(event_wait_holds_another_stream_on_the_gpu_not_the_host)
{
    struct ga_streams *s = NULL;
    ck_assert_int_eq(ga_streams_create(dev, &s), 0);
    CUstream a = NULL, b = NULL;
    ck_assert_int_eq(ga_stream_new(s, &a), 0);
    ck_assert_int_eq(ga_stream_new(s, &b), 0);
    struct host_word gate, done;
    host_word_alloc(&gate, 0x1000);
    host_word_alloc(&done, 0);
    gate_queue(s, a, gate.dev, 0x1007, NULL, NULL);
    CUevent ea = NULL;
    ck_assert_int_eq(ga_event_new(s, 0, &ea), 0);
    ck_assert_int_eq(ga_event_record(s, ea, a), 0);
    uint64_t t0 = base_now_ns();
    ck_assert_int_eq(ga_event_wait(s, b, ea), 0);
    ck_assert_int_eq(ga_doorbell_signal(s, b, done.dev, 0xabcdef42ULL), 0);
    ck_assert_uint_lt(base_now_ns() - t0, 500ull * 1000000); /* the host did not wait */
    tu_sleep_ms(50);
    ck_assert_uint_eq(ga_doorbell_peek(done.host), 0);
    ck_assert_int_eq(ga_stream_query(s, b), 0);
    ga_doorbell_ring(gate.host, 0x1006); /* below seq: still closed */
    tu_sleep_ms(20);
    ck_assert_uint_eq(ga_doorbell_peek(done.host), 0);
    ga_doorbell_ring(gate.host, 0x1007);
    ck_assert(tu_wait_word(done.host, 0xabcdef42ULL, 5000));
    ck_assert_uint_eq(ga_doorbell_peek(done.host), 0xabcdef42ULL);
    ck_assert_int_eq(ga_stream_synchronize(s, b), 0);
    ga_event_free(s, ea);
    ga_stream_free(s, a);
    ga_stream_free(s, b);
    ga_streams_destroy(s);
    CU_OK(cuMemFreeHost(gate.host));
    CU_OK(cuMemFreeHost(done.host));
}
END_TEST

/* ---- record_allocation against the lease service ---- */

#define LEASE_BYTES (256ull << 20)
#define SUM_BLOCK (1u << 20)
#define SUM_BLOCKS (LEASE_BYTES / SUM_BLOCK)

struct lease_fx {
    struct lease_backend backend;
    struct lease_service *svc;
    struct lease_client_id client; /* in the lease service */
    uint64_t owner;                /* the same client as the executor's owner: client.value */
    struct lt_segment_id seg;
    struct lt_lease_id lease, lease2;
    uint64_t *host;  /* the leased range in this process */
    uint64_t *host2; /* lease2's */
    struct ga_streams *streams;
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int completed; /* on_release_complete calls */
    uint64_t completed_lease;
    int event_done_at_complete;
    CUevent copy_done; /* recorded after the copy; NULL: none */
    int overwrite;     /* the callback stores pattern B at once */
};

static void on_release_complete(void *arg, struct lease_client_id client, struct lt_lease_id lease)
{
    struct lease_fx *fx = arg;
    (void)client;
    /* The lease is free: the daemon may reuse the bytes now. Prove the copy
     * was done by then, then reuse them. */
    int q = fx->copy_done ? ga_event_query(fx->streams, fx->copy_done) : -1;
    if (fx->overwrite)
        tu_fill_words(fx->host, LEASE_BYTES / 8, 0xbbbbbbbbULL);
    pthread_mutex_lock(&fx->lock);
    fx->event_done_at_complete = q;
    fx->completed++;
    fx->completed_lease = lt_lease_id_to_u64(lease);
    pthread_cond_broadcast(&fx->cv);
    pthread_mutex_unlock(&fx->lock);
}

static int wait_completed(struct lease_fx *fx, int want, unsigned int timeout_ms)
{
    uint64_t until = base_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    pthread_mutex_lock(&fx->lock);
    while (fx->completed < want && base_now_ns() < until) {
        pthread_mutex_unlock(&fx->lock);
        tu_sleep_ms(1);
        pthread_mutex_lock(&fx->lock);
    }
    int got = fx->completed;
    pthread_mutex_unlock(&fx->lock);
    return got;
}

static void lease_fx_setup(struct lease_fx *fx, uint64_t pattern_seed)
{
    memset(fx, 0, sizeof(*fx));
    pthread_mutex_init(&fx->lock, NULL);
    pthread_cond_init(&fx->cv, NULL);
    ck_assert_int_eq(ga_cuda_lease_backend_init(primary, 0, &fx->backend, NULL), 0);
    struct lease_service_config cfg = {
        .budget_pinned = 2 * LEASE_BYTES,
        .budget_mapped = 64ull << 20,
        .on_release_complete = on_release_complete,
        .cb_arg = fx,
        /* The release callback rewrites the bytes through this mapping, as
         * the daemon would: it must stay writable, as before the seal. */
        .seals = LEASE_SEALS_LEGACY,
    };
    ck_assert_int_eq(lease_service_create(&cfg, &fx->backend, &fx->svc, NULL), 0);
    ck_assert_int_eq(lease_client_add(fx->svc, NULL, &fx->client, NULL), 0);
    fx->owner = fx->client.value;
    /* A segment as stagingd makes one: a sealed memfd, data already in it. */
    int fd = memfd_create("ga-exec-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)LEASE_BYTES), 0);
    uint64_t *w = mmap(NULL, LEASE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ck_assert(w != MAP_FAILED);
    tu_fill_words(w, LEASE_BYTES / 8, pattern_seed);
    ck_assert_int_eq(munmap(w, LEASE_BYTES), 0);
    ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
    ck_assert_int_eq(
        lease_segment_add(fx->svc, fx->client, fd, LEASE_BYTES, LT_CLASS_PINNED, &fx->seg, NULL),
        0);
    struct lease_grant_req reqs[2] = {
        {.segment = fx->seg, .offset = 0, .length = LEASE_BYTES, .cls = LT_CLASS_PINNED},
        {.segment = fx->seg, .offset = 0, .length = 1 << 20, .cls = LT_CLASS_PINNED},
    };
    struct lease_grant_result res[2];
    ck_assert_int_eq(lease_grant(fx->svc, fx->client, 2, reqs, res, NULL), 2);
    ck_assert_int_eq(res[0].rc, 0);
    ck_assert_int_eq(res[1].rc, 0);
    fx->lease = res[0].lease;
    fx->lease2 = res[1].lease;
    fx->host = res[0].host_addr;
    fx->host2 = res[1].host_addr;
    ck_assert_int_eq(ga_streams_create(dev, &fx->streams), 0);
}

static void lease_fx_teardown(struct lease_fx *fx)
{
    ga_streams_destroy(fx->streams); /* every completion ran: every work_done */
    struct lease_stats st;
    ck_assert_int_eq(lease_service_stats(fx->svc, &st), 0);
    ck_assert_uint_eq(st.pending_work, 0);
    lease_service_destroy(fx->svc);
    lease_backend_fini(&fx->backend);
    pthread_cond_destroy(&fx->cv);
    pthread_mutex_destroy(&fx->lock);
}

struct copy_args {
    CUdeviceptr dst;
    const void *src;
    size_t len;
};

static int copy_work(void *arg, struct CUstream_st *stream)
{
    struct copy_args *c = arg;
    return cuMemcpyHtoDAsync(c->dst, c->src, c->len, stream) == CUDA_SUCCESS ? 0 : -EIO;
}

START_TEST(record_allocation_completes_the_release_only_after_the_copy)
{
    static struct lease_fx fx;
    lease_fx_setup(&fx, 0xaaaa5555ULL);
    uint64_t *want = calloc(SUM_BLOCKS, sizeof(*want));
    uint64_t *got = calloc(SUM_BLOCKS, sizeof(*got));
    ck_assert(want && got);
    ck_assert_int_eq(kr_block_checksums(fx.host, LEASE_BYTES, SUM_BLOCK, want), (long)SUM_BLOCKS);
    CUdeviceptr d = 0;
    CU_OK(cuMemAlloc(&d, LEASE_BYTES));
    CU_OK(cuMemsetD8(d, 0, LEASE_BYTES));
    struct host_word gate;
    host_word_alloc(&gate, 0);
    CUstream a = NULL;
    ck_assert_int_eq(ga_stream_new(fx.streams, &a), 0);

    /* gate -> copy of the leased bytes -> event, then record_allocation. */
    struct copy_args c = {.dst = d, .src = fx.host, .len = LEASE_BYTES};
    gate_queue(fx.streams, a, gate.dev, 1, copy_work, &c);
    CUevent done_ev = NULL;
    ck_assert_int_eq(ga_event_new(fx.streams, 0, &done_ev), 0);
    ck_assert_int_eq(ga_event_record(fx.streams, done_ev, a), 0);
    fx.copy_done = done_ev;
    fx.overwrite = 1;
    ck_assert_int_eq(ga_stream_record_allocation(fx.streams, a, fx.svc, fx.client, fx.lease), 0);

    struct lease_release_result rr = {.rc = 1};
    ck_assert_int_eq(lease_release(fx.svc, fx.client, 1, &fx.lease, &rr, NULL), 1);
    ck_assert_int_eq(rr.rc, 0);
    struct lease_info info;
    ck_assert_int_eq(lease_query(fx.svc, fx.client, fx.lease, &info, NULL), 0);
    ck_assert_uint_eq(info.released, 1);
    ck_assert_uint_eq(info.pending_work, 1);
    tu_sleep_ms(50);
    ck_assert_int_eq(wait_completed(&fx, 1, 0), 0); /* the copy cannot have run */
    ck_assert_int_eq(ga_stream_query(fx.streams, a), 0);

    ga_doorbell_ring(gate.host, 1);
    ck_assert_int_eq(wait_completed(&fx, 1, 10000), 1);
    ck_assert_uint_eq(fx.completed_lease, lt_lease_id_to_u64(fx.lease));
    ck_assert_int_eq(fx.event_done_at_complete, 1);
    ck_assert_int_eq(ga_stream_synchronize(fx.streams, a), 0);
    /* The callback overwrote the bytes after the release completed; the GPU
     * copy holds every block of the first pattern and none of the second. */
    ck_assert_int_eq(ga_checksum_compute(dev, d, LEASE_BYTES, SUM_BLOCK, got), (int)SUM_BLOCKS);
    for (size_t i = 0; i < SUM_BLOCKS; i++)
        ck_assert_msg(got[i] == want[i], "block %zu of the copy differs from the data leased", i);
    ck_assert_int_eq(kr_block_checksums(fx.host, LEASE_BYTES, SUM_BLOCK, got), (long)SUM_BLOCKS);
    ck_assert_msg(got[0] != want[0], "the callback did not overwrite the released bytes");
    /* The completion thread counts a completion once its function has
     * returned, which is after the callback waited for above. */
    struct ga_streams_stats ss;
    uint64_t settle = base_now_ns() + 10000000000ull;
    while (ga_streams_stats_get(fx.streams, &ss) == 0 && ss.completions_pending != 0 &&
           base_now_ns() < settle)
        tu_sleep_ms(1);
    ck_assert_int_eq(ga_streams_stats_get(fx.streams, &ss), 0);
    ck_assert_uint_eq(ss.completions_run, 1);
    ck_assert_uint_eq(ss.completions_pending, 0);

    /* Refusals: a released lease; no pin is left. */
    tu_capture_clear();
    ck_assert_int_eq(ga_stream_record_allocation(fx.streams, a, fx.svc, fx.client, fx.lease),
                     -EALREADY);
    ck_assert_msg(tu_logged("record_allocation"), "%s", tu_captured);
    ck_assert_int_eq(lease_query(fx.svc, fx.client, fx.lease2, &info, NULL), 0);
    ck_assert_uint_eq(info.pending_work, 0);
    /* On a stream with nothing queued it completes at once. */
    CUstream idle = NULL;
    ck_assert_int_eq(ga_stream_new(fx.streams, &idle), 0);
    ck_assert_int_eq(ga_stream_record_allocation(fx.streams, idle, fx.svc, fx.client, fx.lease2),
                     0);
    fx.overwrite = 0;
    fx.copy_done = NULL;
    ck_assert_int_eq(lease_release(fx.svc, fx.client, 1, &fx.lease2, &rr, NULL), 1);
    ck_assert_int_eq(wait_completed(&fx, 2, 10000), 2);
    ck_assert_uint_eq(fx.completed_lease, lt_lease_id_to_u64(fx.lease2));

    ga_event_free(fx.streams, done_ev);
    ga_stream_free(fx.streams, a);
    ga_stream_free(fx.streams, idle);
    lease_fx_teardown(&fx);
    CU_OK(cuMemFree(d));
    CU_OK(cuMemFreeHost(gate.host));
    free(want);
    free(got);
}
END_TEST

static void on_work(void *arg, const struct ga_exec_result *res)
{
    __atomic_store_n((uint32_t *)arg, res->status, __ATOMIC_RELEASE);
}

START_TEST(drop_owner_retires_ids_at_once_and_work_still_completes)
{
    static struct lease_fx fx;
    lease_fx_setup(&fx, 0x12345678ULL);
    const uint64_t owners[] = {fx.owner, fx.owner + 1};
    struct ga_executor *ex = cuda_front(0, 0, owners, 2);
    struct host_word gate;
    host_word_alloc(&gate, 0);
    struct lt_stream_id a, other;
    ck_assert_int_eq(et_stream_create(ex, fx.owner, 0, &a), 0);
    ck_assert_int_eq(et_stream_create(ex, fx.owner + 1, 0, &other), 0);

    /* By id: another client's stream is refused and leaves no pin; on the
     * default stream with nothing queued it completes at once. */
    tu_capture_clear();
    struct lt_failure why;
    ck_assert_int_eq(ga_exec_record_allocation(ex, other, fx.svc, fx.client, fx.lease2, &why),
                     -EPERM);
    ck_assert_uint_eq(why.code, LT_E_NOT_OWNER);
    ck_assert_msg(tu_logged("record_allocation"), "%s", tu_captured);
    struct lease_info info;
    ck_assert_int_eq(lease_query(fx.svc, fx.client, fx.lease2, &info, NULL), 0);
    ck_assert_uint_eq(info.pending_work, 0);
    ck_assert_int_eq(
        ga_exec_record_allocation(ex, lt_stream_id_default(), fx.svc, fx.client, fx.lease, &why),
        0);
    struct lease_release_result rr = {.rc = 1};
    ck_assert_int_eq(lease_release(fx.svc, fx.client, 1, &fx.lease, &rr, NULL), 1);
    ck_assert_int_eq(wait_completed(&fx, 1, 10000), 1);

    /* gate -> copy of lease2's bytes on a, an event, record_allocation. */
    uint32_t status = 0xffff;
    struct ga_exec_work w = {.owner = fx.owner,
                             .stream = a,
                             .op = LT_OP_COPY_H2D,
                             .host = (unsigned char *)fx.host2,
                             .length = 1 << 20,
                             .mem_class = LT_CLASS_PINNED,
                             .bell = {.host = gate.host, .dev = gate.dev, .seq = 42},
                             .done_cb = on_work,
                             .arg = &status};
    w.args.copy = (struct lt_op_copy_h2d){.offset = 0, .length = 1 << 20};
    ck_assert_int_eq(ga_exec_submit(ex, &w, &why), 0);
    struct lt_event_id ev;
    ck_assert_int_eq(et_event_record(ex, fx.owner, a, lt_event_id_make(0, 0), 0, &ev), 0);
    ck_assert_int_eq(ga_exec_record_allocation(ex, a, fx.svc, fx.client, fx.lease2, &why), 0);
    ck_assert_int_eq(et_stream_query(ex, fx.owner, a), 0); /* issued, held by the gate */
    ck_assert_int_eq(lease_release(fx.svc, fx.client, 1, &fx.lease2, &rr, NULL), 1);
    tu_sleep_ms(50);
    ck_assert_int_eq(wait_completed(&fx, 2, 0), 1); /* the copy holds the release */

    /* The client died: its ids go now; its queued work is answered as
     * cancelled once the GPU passed it (the agent rings its bells). */
    ga_exec_client_drop(ex, fx.owner);
    ck_assert_int_lt(et_stream_query(ex, fx.owner, a), 0);
    ck_assert_int_lt(et_event_query(ex, fx.owner, ev), 0);
    ck_assert_int_eq(et_stream_validate(ex, fx.owner + 1, other), 0);
    ck_assert_int_eq(wait_completed(&fx, 2, 10000), 2);
    ck_assert_uint_eq(fx.completed_lease, lt_lease_id_to_u64(fx.lease2));
    ck_assert_uint_eq(__atomic_load_n(&status, __ATOMIC_ACQUIRE), LT_E_SHUTTING_DOWN);
    char line[2048];
    ck_assert_int_gt(ga_exec_stats_format(ex, line, sizeof line), 0);
    ck_assert_msg(strstr(line, "clients=1 streams=1 events=0"), "%s", line);
    ga_executor_destroy(ex);
    ck_assert_int_eq(ga_device_synchronize(dev), 0);
    lease_fx_teardown(&fx);
    CU_OK(cuMemFreeHost(gate.host));
}
END_TEST

static int count_job(void *arg)
{
    CUcontext cur = NULL;
    if (cuCtxGetCurrent(&cur) != CUDA_SUCCESS || cur != primary)
        return -EBADF;
    __atomic_add_fetch((int *)arg, 1, __ATOMIC_RELAXED);
    return 0;
}

START_TEST(pool_refuses_a_missing_device_and_runs_jobs_in_the_primary_context)
{
    struct ga_pool *pool = NULL;
    tu_capture_clear();
    ck_assert_int_eq(ga_device_pool_create(NULL, NULL, &pool), -EINVAL);
    ck_assert_msg(tu_logged("expected an open device"), "%s", tu_captured);
    ck_assert_int_eq(ga_device_pool_create(dev, NULL, &pool), 0);
    int n = 0;
    for (int i = 0; i < 100; i++)
        ck_assert_int_eq(ga_pool_run(pool, count_job, &n), 0);
    ck_assert_int_eq(n, 100);
    ga_pool_destroy(pool);
}
END_TEST

static Suite *exec_suite(void)
{
    Suite *s = suite_create("ga_exec_gpu");
    TCase *pool = tcase_create("pool");
    tcase_add_test(pool, pool_refuses_a_missing_device_and_runs_jobs_in_the_primary_context);
    tcase_add_test(pool, pool_moves_one_primary_context_across_threads_under_random_load);
    tcase_set_timeout(pool, 120);
    suite_add_tcase(s, pool);
    TCase *streams = tcase_create("streams");
    tcase_add_test(streams, timed_region_has_positive_elapsed_and_unfinished_events_are_refused);
    tcase_add_test(streams, event_wait_holds_another_stream_on_the_gpu_not_the_host);
    tcase_set_timeout(streams, 60);
    suite_add_tcase(s, streams);
    TCase *ids = tcase_create("ids");
    tcase_add_test(ids, stream_and_event_tables_refuse_past_their_maximum_with_the_numbers);
    tcase_add_test(ids, stale_foreign_and_unknown_ids_are_refused);
    tcase_add_test(ids, default_stream_is_shared_and_cannot_be_destroyed);
    tcase_add_test(ids, untimed_events_are_refused_for_elapsed_time);
    tcase_set_timeout(ids, 60);
    suite_add_tcase(s, ids);
    TCase *lease = tcase_create("record_allocation");
    tcase_add_test(lease, record_allocation_completes_the_release_only_after_the_copy);
    tcase_add_test(lease, drop_owner_retires_ids_at_once_and_work_still_completes);
    tcase_set_timeout(lease, 120);
    suite_add_tcase(s, lease);
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
        snprintf(why, len, "the gates these tests use need stream memory operations\n%s",
                 tu_captured);
        ga_device_close(dev);
        return LEASE_CHECK_SKIP;
    }
    if (cuCtxGetCurrent(&primary) != CUDA_SUCCESS || cuCtxGetId(primary, &primary_id) ||
        cuCtxGetDevice(&cu_dev) != CUDA_SUCCESS) {
        snprintf(why, len, "cannot read the primary context");
        return -1;
    }
    return 0;
}

static void close_device(int failed)
{
    (void)failed;
    ga_device_close(dev);
    base_log_default_set(NULL);
}

LEASE_CHECK_MAIN_DONE(exec_suite, open_device, close_device)
