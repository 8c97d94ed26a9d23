/* The executor front's part of LAUNCH (gpu/exec/launch.c) over a fake
 * backend, on the CPU: each per-client limit (launches in flight, grid x
 * block threads, shared memory, argument bytes) refused LT_E_LIMIT with the
 * numbers, the in-flight count going down as launches are answered (and
 * not counting plain submits), a backend refusal (an unknown kernel, a bad
 * argument with its index) passed up as it was decided, the answer routed
 * back with what the backend wrote into the launch, and a drop cancelling
 * what is queued. */
#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/exec_backend.h"

#define FL_MAX 64

static struct {
    pthread_mutex_t mu;
    struct ga_exec_job *jobs[FL_MAX];
    int njobs;
    int objs;
} FL = {.mu = PTHREAD_MUTEX_INITIALIZER};

static struct ga_executor *ex;

static int fl_work_check(void *be, const struct ga_exec_work *w, struct lt_failure *why)
{
    (void)be;
    if (w->op != GA_EXEC_OP_LAUNCH)
        return 0;
    if (strcmp(w->launch->kernel, "k_missing") == 0)
        return lt_failure_set(why, LT_E_NOT_FOUND, 0, "fake: no launchable kernel %s",
                              w->launch->kernel);
    if (strcmp(w->launch->kernel, "k_badarg") == 0) {
        w->launch->arg_index = 2;
        return lt_failure_set(why, LT_E_BAD_VALUE, 0, "fake: argument 2 out of range");
    }
    return 0;
}

/* Objects are slots of a static array: nothing to free, whoever lets go. */
static char fl_slots[1024];

static void *fl_obj(void)
{
    int n = __atomic_fetch_add(&FL.objs, 1, __ATOMIC_RELAXED);
    return &fl_slots[n % (int)sizeof fl_slots];
}

static int fl_owner_open(void *be, uint64_t owner, void **bo_p)
{
    (void)be;
    (void)owner;
    *bo_p = fl_obj();
    return 0;
}

/* The owner went: its queued jobs are cancelled, then the objects go. */
static void fl_owner_drop(void *be, void *bo)
{
    (void)be;
    pthread_mutex_lock(&FL.mu);
    int n = FL.njobs;
    struct ga_exec_job *jobs[FL_MAX];
    memcpy(jobs, FL.jobs, sizeof(jobs[0]) * (size_t)n);
    FL.njobs = 0;
    pthread_mutex_unlock(&FL.mu);
    for (int i = 0; i < n; i++) {
        struct ga_exec_result r = {.status = LT_E_SHUTTING_DOWN};
        ga_exec_job_done(jobs[i], &r);
    }
    (void)bo;
}

static int fl_stream_open(void *be, void *bo, uint32_t flags, void **bs_p)
{
    (void)be;
    (void)bo;
    (void)flags;
    *bs_p = fl_obj();
    return 0;
}

static void fl_free(void *be, void *obj)
{
    (void)be;
    (void)obj;
}

static int fl_event_open(void *be, void *bo, uint32_t flags, void **bev_p)
{
    return fl_stream_open(be, bo, flags, bev_p);
}

static int fl_work_enqueue(void *be, void *bs, struct ga_exec_job *job, struct lt_failure *why)
{
    (void)be;
    (void)bs;
    (void)why;
    pthread_mutex_lock(&FL.mu);
    ck_assert_int_lt(FL.njobs, FL_MAX);
    FL.jobs[FL.njobs++] = job;
    pthread_mutex_unlock(&FL.mu);
    return 0;
}

static int fl_call(void *be, void *obj, struct ga_exec_call *call, struct lt_failure *why)
{
    (void)be;
    (void)obj;
    (void)why;
    ga_exec_call_ok(call);
    return 0;
}

static int fl_call2(void *be, void *a, void *b, struct ga_exec_call *call, struct lt_failure *why)
{
    (void)b;
    return fl_call(be, a, call, why);
}

static int fl_stats(void *be, char *buf, size_t len)
{
    (void)be;
    return snprintf(buf, len, "fake\n");
}

static void fl_nothing(void *be)
{
    (void)be;
}

static const struct ga_exec_backend_ops fl_ops = {
    .work_check = fl_work_check,
    .owner_open = fl_owner_open,
    .owner_drop = fl_owner_drop,
    .stream_open = fl_stream_open,
    .stream_close = fl_free,
    .event_open = fl_event_open,
    .event_close = fl_free,
    .work_enqueue = fl_work_enqueue,
    .stream_query = fl_call,
    .stream_sync = fl_call,
    .event_record = fl_call2,
    .event_wait = fl_call2,
    .event_query = fl_call,
    .event_sync = fl_call,
    .event_elapsed = fl_call2,
    .device_sync = fl_call,
    .stats_format = fl_stats,
    .shutdown = fl_nothing,
    .destroy = fl_nothing,
};

/* Answers the oldest queued job with @status, the backend writing @fill into
 * the launch's result first. */
static void fl_answer_one(uint32_t status, unsigned char fill)
{
    pthread_mutex_lock(&FL.mu);
    ck_assert_int_gt(FL.njobs, 0);
    struct ga_exec_job *job = FL.jobs[0];
    memmove(FL.jobs, FL.jobs + 1, sizeof(FL.jobs[0]) * (size_t)--FL.njobs);
    pthread_mutex_unlock(&FL.mu);
    struct ga_exec_launch *l = ga_exec_job_work(job)->launch;
    if (l) {
        memset(l->result, fill, l->result_bytes);
        snprintf(l->cu_error, sizeof l->cu_error, "%s", status ? "CUDA_ERROR_FAKE" : "");
    }
    struct ga_exec_result r = {.status = status, .detail = status ? 999 : 0};
    ga_exec_job_done(job, &r);
}

static void fl_answer_all(void)
{
    while (FL.njobs)
        fl_answer_one(LT_OK, 0);
}

static const struct ga_exec_launch_limits limits = {
    .max_inflight = 3,
    .max_shared = 1024,
    .max_threads = 4096,
    .max_arg_bytes = 64,
};

static void setup(void)
{
    struct ga_exec_config cfg = {.limits = {.launch = limits}};
    struct ga_exec_backend be = {.name = "fake", .caps = LT_CAP_LAUNCH, .ops = &fl_ops};
    ck_assert_int_eq(ga_executor_create(&cfg, &be, &ex), 0);
    ck_assert_int_eq(ga_exec_client_add(ex, 1), 0);
    ck_assert_int_eq(ga_exec_client_add(ex, 2), 0);
}

static void teardown(void)
{
    fl_answer_all();
    ga_executor_destroy(ex);
    ex = NULL;
}

struct answer {
    int done;
    struct ga_exec_result res;
};

static void on_done(void *arg, const struct ga_exec_result *res)
{
    struct answer *a = arg;
    a->res = *res;
    a->done++;
}

static unsigned char bytes[4096];

/* A launch of @kernel by @owner with one 4 KiB range, a 2x2 grid of 32-thread
 * blocks, no shared memory and 16 argument bytes. */
static void launch_init(struct ga_exec_launch *l, struct ga_exec_work *w, uint64_t owner,
                        const char *kernel, struct answer *a)
{
    memset(l, 0, sizeof *l);
    snprintf(l->image, sizeof l->image, "img");
    snprintf(l->kernel, sizeof l->kernel, "%s", kernel);
    l->grid[0] = l->grid[1] = 2;
    l->grid[2] = 1;
    l->block[0] = 32;
    l->block[1] = l->block[2] = 1;
    l->result_bytes = 16;
    l->nranges = 1;
    l->ranges[0] = (struct ga_exec_launch_range){
        .host = bytes, .length = sizeof bytes, .mem_class = LT_CLASS_PINNED};
    l->arg_bytes = 16;
    l->arg_index = LT_INDEX_NONE;
    *w = (struct ga_exec_work){.owner = owner,
                               .op = GA_EXEC_OP_LAUNCH,
                               .host = bytes,
                               .length = sizeof bytes,
                               .mem_class = LT_CLASS_PINNED,
                               .done_cb = on_done,
                               .arg = a,
                               .launch = l};
}

#define expect_refused(w, want, words)                                                             \
    do {                                                                                           \
        struct lt_failure f_ = {0};                                                                \
        int rc_ = ga_exec_submit(ex, (w), &f_);                                                    \
        ck_assert_msg(rc_ < 0 && f_.code == (want), "rc %d code %s: %s", rc_,                      \
                      lt_error_name(f_.code), f_.message);                                         \
        ck_assert_msg(strstr(f_.message, words), "'%s' lacks '%s'", f_.message, words);            \
    } while (0)

START_TEST(each_launch_limit_is_refused_with_its_numbers)
{
    struct ga_exec_launch l;
    struct ga_exec_work w;
    struct answer a = {0};
    launch_init(&l, &w, 1, "k_ok", &a);
    l.grid[0] = 64; /* 64 x 2 blocks of 32: 4096 threads, the limit */
    struct lt_failure f;
    ck_assert_int_eq(ga_exec_submit(ex, &w, &f), 0);
    l.grid[0] = 65;
    expect_refused(&w, LT_E_LIMIT, "130 blocks of 32 threads, over the client limit of 4096");
    l.grid[0] = l.grid[1] = l.grid[2] = UINT32_MAX; /* a product past 2^64 */
    expect_refused(&w, LT_E_LIMIT, "over the client limit of 4096 threads");
    l.grid[0] = l.grid[1] = 2;
    l.grid[2] = 1;
    l.shared_bytes = 1025;
    expect_refused(&w, LT_E_LIMIT, "1025 bytes of shared memory, over the client limit of 1024");
    l.shared_bytes = 1024;
    l.arg_bytes = 72;
    expect_refused(&w, LT_E_LIMIT, "a 72-byte argument block, over the client limit of 64");
    l.arg_bytes = 64;
    ck_assert_int_eq(ga_exec_submit(ex, &w, &f), 0);
    fl_answer_all();
    ck_assert_int_eq(a.done, 2);
}
END_TEST

START_TEST(launches_in_flight_are_bounded_per_client)
{
    struct ga_exec_launch l[5];
    struct ga_exec_work w[5];
    struct answer a[5] = {{0}};
    struct lt_failure f;
    for (int i = 0; i < 3; i++) {
        launch_init(&l[i], &w[i], 1, "k_ok", &a[i]);
        ck_assert_int_eq(ga_exec_submit(ex, &w[i], &f), 0);
    }
    launch_init(&l[3], &w[3], 1, "k_ok", &a[3]);
    expect_refused(&w[3], LT_E_LIMIT, "3 launches of this client in flight, the limit");
    /* another client has its own count; plain work is not a launch */
    launch_init(&l[4], &w[4], 2, "k_ok", &a[4]);
    ck_assert_int_eq(ga_exec_submit(ex, &w[4], &f), 0);
    struct answer pa = {0};
    struct ga_exec_work plain = {.owner = 1,
                                 .op = LT_OP_COPY_H2D,
                                 .args.copy = {.offset = 0, .length = 8},
                                 .host = bytes,
                                 .length = sizeof bytes,
                                 .mem_class = LT_CLASS_PINNED,
                                 .done_cb = on_done,
                                 .arg = &pa};
    ck_assert_int_eq(ga_exec_submit(ex, &plain, &f), 0);
    /* the oldest answered, with what the backend wrote into it */
    fl_answer_one(LT_OK, 0xab);
    ck_assert_int_eq(a[0].done, 1);
    ck_assert_uint_eq(a[0].res.status, LT_OK);
    ck_assert_uint_eq(l[0].result[15], 0xab);
    ck_assert_int_eq(ga_exec_submit(ex, &w[3], &f), 0);
    expect_refused(&w[3], LT_E_LIMIT, "3 launches of this client in flight");
    /* a failed launch frees its place too, and its words come back */
    fl_answer_one(LT_E_LAUNCH_FAILED, 0);
    ck_assert_uint_eq(a[1].res.status, LT_E_LAUNCH_FAILED);
    ck_assert_uint_eq(a[1].res.detail, 999);
    ck_assert_str_eq(l[1].cu_error, "CUDA_ERROR_FAKE");
    ck_assert_int_eq(ga_exec_submit(ex, &w[3], &f), 0);
    struct ga_exec_client_stats st;
    ck_assert_int_eq(ga_exec_client_stats(ex, 1, &st), 0);
    ck_assert_uint_eq(st.queued, 4); /* 3 launches and the copy */
    fl_answer_all();
}
END_TEST

START_TEST(backend_refusals_pass_up_as_decided)
{
    struct ga_exec_launch l;
    struct ga_exec_work w;
    struct answer a = {0};
    launch_init(&l, &w, 1, "k_missing", &a);
    expect_refused(&w, LT_E_NOT_FOUND, "no launchable kernel k_missing");
    ck_assert_uint_eq(l.arg_index, LT_INDEX_NONE);
    launch_init(&l, &w, 1, "k_badarg", &a);
    expect_refused(&w, LT_E_BAD_VALUE, "argument 2 out of range");
    ck_assert_uint_eq(l.arg_index, 2);
    /* a launch op without its request */
    launch_init(&l, &w, 1, "k_ok", &a);
    w.launch = NULL;
    expect_refused(&w, LT_E_BAD_VALUE, "expected the launch's request");
    /* an unknown client, a stale stream: the front's usual refusals */
    launch_init(&l, &w, 9, "k_ok", &a);
    expect_refused(&w, LT_E_NOT_FOUND, "client 0x9 is not registered");
    launch_init(&l, &w, 1, "k_ok", &a);
    w.stream = lt_stream_id_make(5, 1);
    expect_refused(&w, LT_E_NOT_FOUND, "was never issued");
    ck_assert_int_eq(a.done, 0);
    /* none of them counted against the limit */
    struct lt_failure f;
    struct ga_exec_launch ls[3];
    struct ga_exec_work ws[3];
    struct answer as[3] = {{0}};
    for (int i = 0; i < 3; i++) {
        launch_init(&ls[i], &ws[i], 1, "k_ok", &as[i]);
        ck_assert_int_eq(ga_exec_submit(ex, &ws[i], &f), 0);
    }
    fl_answer_all();
}
END_TEST

START_TEST(a_drop_cancels_queued_launches_and_frees_their_places)
{
    struct ga_exec_launch l[3];
    struct ga_exec_work w[3];
    struct answer a[3] = {{0}};
    struct lt_failure f;
    for (int i = 0; i < 3; i++) {
        launch_init(&l[i], &w[i], 2, "k_ok", &a[i]);
        ck_assert_int_eq(ga_exec_submit(ex, &w[i], &f), 0);
    }
    ga_exec_client_drop(ex, 2);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(a[i].done, 1);
        ck_assert_uint_eq(a[i].res.status, LT_E_SHUTTING_DOWN);
    }
    expect_refused(&w[0], LT_E_NOT_FOUND, "not registered");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("exec_launch");
    TCase *tc = tcase_create("launch");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, each_launch_limit_is_refused_with_its_numbers);
    tcase_add_test(tc, launches_in_flight_are_bounded_per_client);
    tcase_add_test(tc, backend_refusals_pass_up_as_decided);
    tcase_add_test(tc, a_drop_cancels_queued_launches_and_frees_their_places);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
