/* ga pool: a worker pool whose threads take jobs in submission order,
 * whichever is free (library ga_exec: driver-free, built and tested on any
 * machine). An enter hook runs on the worker before every job: the CUDA
 * layer makes the device's one primary context current there
 * (ga_device_pool_create in gpu/exec_cuda.h), so CUDA calls hop between
 * threads and no other context is ever created.
 *
 * Functions return 0 on success and a negative errno on failure; the
 * function that decides an error logs it once through the pool's sink
 * (subsystem "exec"). Threads: every call may run on any thread. */
#ifndef GPU_POOL_H
#define GPU_POOL_H

#include <stdint.h>

#include "base/log.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ga_pool;
struct ga_job;

/* A job: runs on a worker after the enter hook; returns 0 or a negative
 * errno, which becomes the job's result. */
typedef int (*ga_job_fn)(void *arg);
/* Runs on the same worker right after the job, with its result. */
typedef void (*ga_job_done_fn)(void *arg, int rc);
/* Runs on the worker before every job; a negative return is the job's
 * result and the job is skipped. */
typedef int (*ga_pool_enter_fn)(void *ctx);

#define GA_POOL_DEFAULT_THREADS 4
#define GA_POOL_MAX_THREADS 256

struct ga_pool_opts {
    unsigned int threads;            /* workers; 0: GA_POOL_DEFAULT_THREADS */
    const struct base_log_sink *log; /* NULL: the process default */
};

/* Starts @opts->threads workers (NULL opts: defaults) that call @enter(@ctx)
 * (may be NULL) before each job. *pool_p is the caller's: free it with
 * ga_pool_destroy. Returns 0, -EINVAL (threads above GA_POOL_MAX_THREADS),
 * -ENOMEM or the errno of pthread_create. */
int ga_pool_create(const struct ga_pool_opts *opts, ga_pool_enter_fn enter, void *ctx,
                   struct ga_pool **pool_p);

/* Refuses new jobs, runs every job already queued, joins the workers and
 * frees the pool. Handles from ga_pool_submit must still be waited for, but
 * before this call: a job must not outlive the pool. NULL is a no-op. */
void ga_pool_destroy(struct ga_pool *pool);

/* Queues @fn(@arg). If the enter hook fails @fn is skipped and the failure
 * is the result. @done(@done_arg, result), when not NULL, then runs on that
 * worker; it may submit further jobs. With @job_p, *job_p is a handle the
 * caller must pass to ga_job_wait exactly once; without it the pool frees
 * the job itself. A job must not wait for another job (the workers could
 * all be waiting). Returns 0, -EINVAL, -ENOMEM, -ESHUTDOWN (ga_pool_destroy
 * has begun). */
int ga_pool_submit(struct ga_pool *pool, ga_job_fn fn, void *arg, ga_job_done_fn done,
                   void *done_arg, struct ga_job **job_p);

/* Waits until @job (from ga_pool_submit) and its done callback have run,
 * frees it and returns the job's result (0 or a negative errno). */
int ga_job_wait(struct ga_job *job);

/* ga_pool_submit without a callback, then ga_job_wait: the job's result, or
 * the submission's error. */
int ga_pool_run(struct ga_pool *pool, ga_job_fn fn, void *arg);

/* The calling thread's index among its pool's workers, or -1 when it is not a
 * worker. */
int ga_pool_worker_index(void);

struct ga_pool_stats {
    uint64_t submitted;
    uint64_t completed;
    uint32_t threads;
    uint32_t threads_used; /* workers that have run at least one job */
};

/* A snapshot of @pool's counters. Returns 0 or -EINVAL. */
int ga_pool_stats_get(struct ga_pool *pool, struct ga_pool_stats *stats_p);

#ifdef __cplusplus
}
#endif

#endif /* GPU_POOL_H */
