/* The worker pool's machinery (gpu/pool.c) with a counting enter hook in
 * place of the device: every job runs once, on whichever worker is free,
 * after the hook; results, callbacks, chains, draining and refusals.
 * Driver-free: runs on every machine. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpu/pool.h"

static char captured[4096];
static pthread_mutex_t captured_lock = PTHREAD_MUTEX_INITIALIZER;

static void capture_fn(void *ctx, int level, const char *subsys, const char *line)
{
    (void)ctx;
    (void)subsys;
    pthread_mutex_lock(&captured_lock);
    size_t used = strlen(captured);
    snprintf(captured + used, sizeof(captured) - used, "[%d] %s\n", level, line);
    pthread_mutex_unlock(&captured_lock);
}

static const struct base_log_sink capture_sink = {.fn = capture_fn, .max_level = BASE_LOG_DEBUG};

/* The hook counts per thread how often it ran; a job checks it ran first. */
static __thread uint64_t entered;
static int enter_fail_rc;

static int count_enter(void *ctx)
{
    uint64_t *total = ctx;
    __atomic_add_fetch(total, 1, __ATOMIC_RELAXED);
    entered++;
    return enter_fail_rc;
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

struct job_rec {
    uint64_t value;   /* seeded; the job returns a function of it */
    int runs;         /* how often fn ran */
    int dones;        /* how often done ran */
    int worker;       /* ga_pool_worker_index in fn */
    int done_worker;  /* ... in done */
    uint64_t entered; /* the hook's count on that thread when fn ran */
    int done_rc;
};

static int rec_job(void *arg)
{
    struct job_rec *r = arg;
    r->runs++;
    r->worker = ga_pool_worker_index();
    r->entered = entered;
    return -(int)(r->value % 50); /* 0 or a "negative errno" derived from the data */
}

static void rec_done(void *arg, int rc)
{
    struct job_rec *r = arg;
    r->dones++;
    r->done_rc = rc;
    r->done_worker = ga_pool_worker_index();
}

START_TEST(every_job_runs_once_after_the_hook_with_its_result)
{
    enum { JOBS = 20000, THREADS = 4 };
    uint64_t hook_total = 0;
    struct ga_pool *pool = NULL;
    struct ga_pool_opts opts = {.threads = THREADS};
    ck_assert_int_eq(ga_pool_create(&opts, count_enter, &hook_total, &pool), 0);
    struct job_rec *recs = calloc(JOBS, sizeof(*recs));
    struct ga_job **jobs = calloc(JOBS, sizeof(*jobs));
    ck_assert(recs && jobs);
    uint64_t rng = 0xfeedbeef1234ULL;
    for (int i = 0; i < JOBS; i++) {
        recs[i].value = rng_next(&rng);
        recs[i].worker = recs[i].done_worker = -2;
        ck_assert_int_eq(
            ga_pool_submit(pool, rec_job, &recs[i], rec_done, &recs[i], i % 3 ? &jobs[i] : NULL),
            0);
    }
    for (int i = 0; i < JOBS; i++)
        if (i % 3)
            ck_assert_int_eq(ga_job_wait(jobs[i]), -(int)(recs[i].value % 50));
    ga_pool_destroy(pool); /* the unwaited third has run by the time this returns */
    for (int i = 0; i < JOBS; i++) {
        ck_assert_int_eq(recs[i].runs, 1);
        ck_assert_int_eq(recs[i].dones, 1);
        ck_assert_int_eq(recs[i].done_rc, -(int)(recs[i].value % 50));
        ck_assert_int_ge(recs[i].worker, 0);
        ck_assert_int_lt(recs[i].worker, THREADS);
        ck_assert_int_eq(recs[i].done_worker, recs[i].worker);
        ck_assert_uint_ge(recs[i].entered, 1);
    }
    ck_assert_uint_eq(hook_total, JOBS);
    ck_assert_int_eq(ga_pool_worker_index(), -1);
    free(jobs);
    free(recs);
}
END_TEST

/* Each job waits, up to 5 s, until @want jobs are inside at once: they can
 * only all arrive if they run on @want distinct workers. */
struct rendezvous {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int arrived, want;
    int workers[16];
};

static int rendezvous_job(void *arg)
{
    struct rendezvous *r = arg;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    pthread_mutex_lock(&r->lock);
    r->workers[r->arrived++] = ga_pool_worker_index();
    pthread_cond_broadcast(&r->cv);
    int rc = 0;
    while (r->arrived < r->want && rc == 0)
        rc = pthread_cond_timedwait(&r->cv, &r->lock, &until);
    int ok = r->arrived >= r->want;
    pthread_mutex_unlock(&r->lock);
    return ok ? 0 : -ETIMEDOUT;
}

START_TEST(jobs_run_concurrently_on_distinct_workers)
{
    enum { THREADS = 6 };
    uint64_t hook_total = 0;
    struct ga_pool *pool = NULL;
    struct ga_pool_opts opts = {.threads = THREADS};
    ck_assert_int_eq(ga_pool_create(&opts, count_enter, &hook_total, &pool), 0);
    struct rendezvous r = {.want = THREADS};
    pthread_mutex_init(&r.lock, NULL);
    pthread_cond_init(&r.cv, NULL);
    struct ga_job *jobs[THREADS];
    for (int i = 0; i < THREADS; i++)
        ck_assert_int_eq(ga_pool_submit(pool, rendezvous_job, &r, NULL, NULL, &jobs[i]), 0);
    for (int i = 0; i < THREADS; i++)
        ck_assert_int_eq(ga_job_wait(jobs[i]), 0);
    for (int i = 0; i < THREADS; i++)
        for (int j = 0; j < i; j++)
            ck_assert_int_ne(r.workers[i], r.workers[j]);
    struct ga_pool_stats st;
    ck_assert_int_eq(ga_pool_stats_get(pool, &st), 0);
    ck_assert_uint_eq(st.threads, THREADS);
    ck_assert_uint_eq(st.threads_used, THREADS);
    ck_assert_uint_eq(st.submitted, THREADS);
    ck_assert_uint_eq(st.completed, THREADS);
    ga_pool_destroy(pool);
    pthread_cond_destroy(&r.cv);
    pthread_mutex_destroy(&r.lock);
}
END_TEST

START_TEST(failed_hook_skips_the_job_and_is_its_result)
{
    uint64_t hook_total = 0;
    struct ga_pool *pool = NULL;
    ck_assert_int_eq(ga_pool_create(NULL, count_enter, &hook_total, &pool), 0);
    struct job_rec rec = {.value = 0};
    enter_fail_rc = -ENODEV;
    struct ga_job *job = NULL;
    ck_assert_int_eq(ga_pool_submit(pool, rec_job, &rec, rec_done, &rec, &job), 0);
    ck_assert_int_eq(ga_job_wait(job), -ENODEV);
    enter_fail_rc = 0;
    ck_assert_int_eq(rec.runs, 0);
    ck_assert_int_eq(rec.dones, 1);
    ck_assert_int_eq(rec.done_rc, -ENODEV);
    ck_assert_uint_eq(hook_total, 1);
    struct ga_pool_stats st;
    ck_assert_int_eq(ga_pool_stats_get(pool, &st), 0);
    ck_assert_uint_eq(st.threads, GA_POOL_DEFAULT_THREADS);
    ga_pool_destroy(pool);
}
END_TEST

/* A chain: each link's done callback submits the next link from the worker. */
struct chain {
    struct ga_pool *pool;
    int links, done_links;
    int workers_seen[GA_POOL_MAX_THREADS];
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int finished, submit_rc;
};

static int chain_job(void *arg)
{
    struct chain *c = arg;
    c->workers_seen[ga_pool_worker_index()] = 1;
    usleep(200); /* leave the next link to whichever worker wakes */
    return 0;
}

static void chain_done(void *arg, int rc)
{
    struct chain *c = arg;
    int more = rc == 0 && ++c->done_links < c->links;
    int src = more ? ga_pool_submit(c->pool, chain_job, c, chain_done, c, NULL) : 0;
    if (more)
        usleep(1000); /* the woken worker takes the link while this one is busy */
    if (!more || src < 0) {
        pthread_mutex_lock(&c->lock);
        c->submit_rc = src;
        c->finished = 1;
        pthread_cond_signal(&c->cv);
        pthread_mutex_unlock(&c->lock);
    }
}

START_TEST(done_callbacks_chain_jobs_across_workers)
{
    struct ga_pool *pool = NULL;
    struct ga_pool_opts opts = {.threads = 4};
    ck_assert_int_eq(ga_pool_create(&opts, NULL, NULL, &pool), 0);
    struct chain c = {.pool = pool, .links = 200};
    pthread_mutex_init(&c.lock, NULL);
    pthread_cond_init(&c.cv, NULL);
    ck_assert_int_eq(ga_pool_submit(pool, chain_job, &c, chain_done, &c, NULL), 0);
    pthread_mutex_lock(&c.lock);
    while (!c.finished)
        pthread_cond_wait(&c.cv, &c.lock);
    pthread_mutex_unlock(&c.lock);
    ck_assert_int_eq(c.submit_rc, 0);
    ck_assert_int_eq(c.done_links, 200);
    int distinct = 0;
    for (int i = 0; i < 4; i++)
        distinct += c.workers_seen[i];
    /* One link at a time, yet the links do not stay on one thread. */
    ck_assert_int_ge(distinct, 2);
    ga_pool_destroy(pool);
    pthread_cond_destroy(&c.cv);
    pthread_mutex_destroy(&c.lock);
}
END_TEST

struct gate {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int open;
    int late_rc;
    struct ga_pool *pool;
    int ran;
};

static int gated_job(void *arg)
{
    struct gate *g = arg;
    pthread_mutex_lock(&g->lock);
    while (!g->open)
        pthread_cond_wait(&g->cv, &g->lock);
    pthread_mutex_unlock(&g->lock);
    return 0;
}

static int count_job(void *arg)
{
    __atomic_add_fetch((int *)arg, 1, __ATOMIC_RELAXED);
    return 0;
}

static void *opener(void *arg)
{
    struct gate *g = arg;
    usleep(100 * 1000); /* ga_pool_destroy is waiting by now */
    /* Destroy has begun: a new job is refused. */
    g->late_rc = ga_pool_submit(g->pool, count_job, &g->ran, NULL, NULL, NULL);
    pthread_mutex_lock(&g->lock);
    g->open = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

START_TEST(destroy_runs_every_queued_job_and_refuses_new_ones)
{
    struct ga_pool *pool = NULL;
    struct ga_pool_opts opts = {.threads = 1};
    ck_assert_int_eq(ga_pool_create(&opts, NULL, NULL, &pool), 0);
    struct gate g = {.pool = pool};
    pthread_mutex_init(&g.lock, NULL);
    pthread_cond_init(&g.cv, NULL);
    ck_assert_int_eq(ga_pool_submit(pool, gated_job, &g, NULL, NULL, NULL), 0);
    for (int i = 0; i < 100; i++) /* queued behind the gate on the one worker */
        ck_assert_int_eq(ga_pool_submit(pool, count_job, &g.ran, NULL, NULL, NULL), 0);
    pthread_t t;
    captured[0] = '\0';
    base_log_default_set(&capture_sink);
    ck_assert_int_eq(pthread_create(&t, NULL, opener, &g), 0);
    ga_pool_destroy(pool);
    pthread_join(t, NULL);
    base_log_default_set(NULL);
    ck_assert_int_eq(g.ran, 100);
    ck_assert_int_eq(g.late_rc, -ESHUTDOWN);
    ck_assert_msg(strstr(captured, "being destroyed"), "%s", captured);
    pthread_cond_destroy(&g.cv);
    pthread_mutex_destroy(&g.lock);
}
END_TEST

START_TEST(bad_arguments_are_refused)
{
    struct ga_pool *pool = NULL;
    captured[0] = '\0';
    base_log_default_set(&capture_sink);
    struct ga_pool_opts opts = {.threads = GA_POOL_MAX_THREADS + 1};
    ck_assert_int_eq(ga_pool_create(&opts, NULL, NULL, &pool), -EINVAL);
    ck_assert_ptr_null(pool);
    ck_assert_msg(strstr(captured, "expected 1..256 worker threads"), "%s", captured);
    ck_assert_int_eq(ga_pool_create(NULL, NULL, NULL, &pool), 0);
    ck_assert_int_eq(ga_pool_submit(pool, NULL, NULL, NULL, NULL, NULL), -EINVAL);
    ck_assert_int_eq(ga_pool_submit(NULL, count_job, NULL, NULL, NULL, NULL), -EINVAL);
    ck_assert_int_eq(ga_job_wait(NULL), -EINVAL);
    int n = 0;
    ck_assert_int_eq(ga_pool_run(pool, count_job, &n), 0);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(ga_pool_stats_get(pool, NULL), -EINVAL);
    ga_pool_destroy(pool);
    ga_pool_destroy(NULL);
    base_log_default_set(NULL);
}
END_TEST

static Suite *pool_suite(void)
{
    Suite *s = suite_create("ga_pool");
    TCase *tc = tcase_create("pool");
    tcase_add_test(tc, every_job_runs_once_after_the_hook_with_its_result);
    tcase_add_test(tc, jobs_run_concurrently_on_distinct_workers);
    tcase_add_test(tc, failed_hook_skips_the_job_and_is_its_result);
    tcase_add_test(tc, done_callbacks_chain_jobs_across_workers);
    tcase_add_test(tc, destroy_runs_every_queued_job_and_refuses_new_ones);
    tcase_add_test(tc, bad_arguments_are_refused);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(pool_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
