/* base: the monotonic clock, in nanoseconds.
 *
 * Every duration, deadline and timeout in the tree is CLOCK_MONOTONIC:
 * timerfds (TFD_TIMER_ABSTIME), condition variables set up with
 * pthread_condattr_setclock(CLOCK_MONOTONIC), and elapsed times. Wall-clock
 * time appears only in log stamps (base/log.c), never in a deadline.
 *
 * Threads: reentrant. Nothing here fails: CLOCK_MONOTONIC always exists on
 * Linux, so clock_gettime's result is not checked. */
#ifndef BASE_TIME_H
#define BASE_TIME_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BASE_NS_PER_S 1000000000ull

static inline uint64_t base_timespec_ns(const struct timespec *ts)
{
    return (uint64_t)ts->tv_sec * BASE_NS_PER_S + (uint64_t)ts->tv_nsec;
}

static inline struct timespec base_ns_timespec(uint64_t ns)
{
    struct timespec ts;
    ts.tv_sec = (time_t)(ns / BASE_NS_PER_S);
    ts.tv_nsec = (long)(ns % BASE_NS_PER_S);
    return ts;
}

/* CLOCK_MONOTONIC now. */
static inline uint64_t base_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return base_timespec_ns(&ts);
}

/* CLOCK_MONOTONIC now, in seconds (for rates and progress lines). */
static inline double base_now_s(void)
{
    return (double)base_now_ns() * 1e-9;
}

/* The absolute CLOCK_MONOTONIC time @delta_ns from now, for
 * pthread_cond_timedwait on a monotonic condition variable or a timerfd. */
static inline struct timespec base_deadline_ns(uint64_t delta_ns)
{
    return base_ns_timespec(base_now_ns() + delta_ns);
}

/* A condition variable whose timed waits take base_deadline_ns deadlines.
 * Returns pthread_cond_init's result. */
static inline int base_cond_init_monotonic(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
    return rc;
}

/* Sleeps @ns on CLOCK_MONOTONIC, resuming after signals. */
static inline void base_sleep_ns(uint64_t ns)
{
    struct timespec until = base_deadline_ns(ns);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR)
        ;
}

#ifdef __cplusplus
}
#endif

#endif /* BASE_TIME_H */
