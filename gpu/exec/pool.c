/* The worker pool: one FIFO of jobs, N threads taking from it, so
 * consecutive jobs (and the CUDA calls in them) land on whichever thread is
 * free. Driver-free: what makes the context current is the enter hook. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/pool.h"

#define GA_POOL_SUBSYS "exec"

struct ga_job {
    struct ga_job *next;
    struct ga_pool *pool;
    ga_job_fn fn;
    void *arg;
    ga_job_done_fn done;
    void *done_arg;
    int rc;
    int finished;
    int has_waiter; /* ga_job_wait frees it; else the worker does */
};

struct ga__worker {
    struct ga_pool *pool;
    int index;
    pthread_t thread;
    uint64_t jobs;
};

struct ga_pool {
    pthread_mutex_t lock;
    pthread_cond_t work_cv; /* a job was queued, or stopping */
    pthread_cond_t done_cv; /* a waited-for job finished */
    struct ga_job *head, *tail;
    int stopping;
    unsigned int threads, started;
    struct ga__worker *workers;
    ga_pool_enter_fn enter;
    const struct base_log_sink *log;
    void *enter_ctx;
    uint64_t submitted, completed;
};

static __thread int ga__worker_index = -1;

int ga_pool_worker_index(void)
{
    return ga__worker_index;
}

static void ga__job_run(struct ga_pool *pool, struct ga_job *job)
{
    int rc = pool->enter ? pool->enter(pool->enter_ctx) : 0;
    if (rc == 0)
        rc = job->fn(job->arg);
    if (job->done)
        job->done(job->done_arg, rc);
    job->rc = rc;
}

static void *ga__worker_main(void *p)
{
    struct ga__worker *w = p;
    struct ga_pool *pool = w->pool;
    ga__worker_index = w->index;
    pthread_mutex_lock(&pool->lock);
    for (;;) {
        while (!pool->head && !pool->stopping)
            pthread_cond_wait(&pool->work_cv, &pool->lock);
        struct ga_job *job = pool->head;
        if (!job)
            break; /* stopping and drained */
        pool->head = job->next;
        if (!pool->head)
            pool->tail = NULL;
        pthread_mutex_unlock(&pool->lock);

        ga__job_run(pool, job);

        pthread_mutex_lock(&pool->lock);
        w->jobs++;
        pool->completed++;
        if (job->has_waiter) {
            job->finished = 1;
            pthread_cond_broadcast(&pool->done_cv);
        } else {
            free(job);
        }
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

/* Stops and joins the started workers; the queue must be empty by then. */
static void ga__pool_stop(struct ga_pool *pool)
{
    pthread_mutex_lock(&pool->lock);
    pool->stopping = 1;
    pthread_cond_broadcast(&pool->work_cv);
    pthread_mutex_unlock(&pool->lock);
    for (unsigned int i = 0; i < pool->started; i++)
        pthread_join(pool->workers[i].thread, NULL);
    pool->started = 0;
}

static void ga__pool_free(struct ga_pool *pool)
{
    pthread_cond_destroy(&pool->done_cv);
    pthread_cond_destroy(&pool->work_cv);
    pthread_mutex_destroy(&pool->lock);
    free(pool->workers);
    free(pool);
}

int ga_pool_create(const struct ga_pool_opts *opts, ga_pool_enter_fn enter, void *enter_ctx,
                   struct ga_pool **pool_p)
{
    unsigned int threads = opts && opts->threads ? opts->threads : GA_POOL_DEFAULT_THREADS;
    const struct base_log_sink *log = opts ? opts->log : NULL;
    if (!pool_p || threads > GA_POOL_MAX_THREADS) {
        base_log(log, BASE_LOG_ERROR, GA_POOL_SUBSYS,
                 "pool: expected 1..%u worker threads and a result pointer, found %u%s",
                 GA_POOL_MAX_THREADS, threads, pool_p ? "" : " and NULL");
        return -EINVAL;
    }
    struct ga_pool *pool = calloc(1, sizeof(*pool));
    if (!pool)
        return -ENOMEM;
    pool->workers = calloc(threads, sizeof(*pool->workers));
    if (!pool->workers) {
        free(pool);
        return -ENOMEM;
    }
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->work_cv, NULL);
    pthread_cond_init(&pool->done_cv, NULL);
    pool->threads = threads;
    pool->enter = enter;
    pool->enter_ctx = enter_ctx;
    pool->log = log;
    for (unsigned int i = 0; i < threads; i++) {
        struct ga__worker *w = &pool->workers[i];
        w->pool = pool;
        w->index = (int)i;
        int err = pthread_create(&w->thread, NULL, ga__worker_main, w);
        if (err) {
            base_log(log, BASE_LOG_ERROR, GA_POOL_SUBSYS,
                     "pool: starting worker %u of %u failed: %s", i + 1, threads, strerror(err));
            ga__pool_stop(pool);
            ga__pool_free(pool);
            return -err;
        }
        pool->started++;
    }
    *pool_p = pool;
    return 0;
}

void ga_pool_destroy(struct ga_pool *pool)
{
    if (!pool)
        return;
    ga__pool_stop(pool); /* workers drain the queue before they see stopping */
    ga__pool_free(pool);
}

int ga_pool_submit(struct ga_pool *pool, ga_job_fn fn, void *arg, ga_job_done_fn done,
                   void *done_arg, struct ga_job **job_p)
{
    if (!pool || !fn) {
        base_log(pool ? pool->log : NULL, BASE_LOG_ERROR, GA_POOL_SUBSYS,
                 "pool submit: expected a pool and a job function, found NULL");
        return -EINVAL;
    }
    struct ga_job *job = calloc(1, sizeof(*job));
    if (!job)
        return -ENOMEM;
    job->pool = pool;
    job->fn = fn;
    job->arg = arg;
    job->done = done;
    job->done_arg = done_arg;
    job->has_waiter = job_p != NULL;
    pthread_mutex_lock(&pool->lock);
    if (pool->stopping) {
        pthread_mutex_unlock(&pool->lock);
        free(job);
        base_log(pool->log, BASE_LOG_ERROR, GA_POOL_SUBSYS,
                 "pool submit: the pool is being destroyed; no new jobs");
        return -ESHUTDOWN;
    }
    if (pool->tail)
        pool->tail->next = job;
    else
        pool->head = job;
    pool->tail = job;
    pool->submitted++;
    pthread_cond_signal(&pool->work_cv);
    /* Written while the lock still keeps the worker from freeing the job. */
    if (job_p)
        *job_p = job;
    pthread_mutex_unlock(&pool->lock);
    return 0;
}

int ga_job_wait(struct ga_job *job)
{
    if (!job || !job->has_waiter) {
        base_log(job ? job->pool->log : NULL, BASE_LOG_ERROR, GA_POOL_SUBSYS,
                 "job wait: expected a handle from ga_pool_submit, found %s",
                 job ? "a job submitted without one" : "NULL");
        return -EINVAL;
    }
    struct ga_pool *pool = job->pool;
    pthread_mutex_lock(&pool->lock);
    while (!job->finished)
        pthread_cond_wait(&pool->done_cv, &pool->lock);
    pthread_mutex_unlock(&pool->lock);
    int rc = job->rc;
    free(job);
    return rc;
}

int ga_pool_run(struct ga_pool *pool, ga_job_fn fn, void *arg)
{
    struct ga_job *job = NULL;
    int rc = ga_pool_submit(pool, fn, arg, NULL, NULL, &job);
    return rc < 0 ? rc : ga_job_wait(job);
}

int ga_pool_stats_get(struct ga_pool *pool, struct ga_pool_stats *stats_p)
{
    if (!pool || !stats_p)
        return -EINVAL;
    struct ga_pool_stats st = {.threads = pool->threads};
    pthread_mutex_lock(&pool->lock);
    st.submitted = pool->submitted;
    st.completed = pool->completed;
    for (unsigned int i = 0; i < pool->threads; i++)
        st.threads_used += pool->workers[i].jobs > 0;
    pthread_mutex_unlock(&pool->lock);
    *stats_p = st;
    return 0;
}
