/* The executor front's commands, waited for: each et_* helper issues one
 * verb and waits for its answer, returning 0 (and what it answered), the
 * refusal's -errno, or the errno of the code it was answered with. The
 * words of the last refusal or failed answer are in et_why. For the CPU
 * tests of gpu/exec and gpu/host and the GPU tests of gpu/cuda. */
#ifndef TESTS_GPU_EXEC_TEST_UTIL_H
#define TESTS_GPU_EXEC_TEST_UTIL_H

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/time.h"
#include "gpu/executor.h"
#include "lease_types/validate.h"

static struct lt_failure et_why;

struct et_answer {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    struct ga_exec_ctl_result r;
};

static inline void et__answered(void *arg, const struct ga_exec_ctl_result *r)
{
    struct et_answer *a = arg;
    pthread_mutex_lock(&a->mu);
    a->r = *r;
    a->done = 1;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

/* The verb returned @rc: its refusal, or wait (up to 30 s) for the answer. */
static inline int et__wait(int rc, struct et_answer *a, struct ga_exec_ctl_result *r_p)
{
    if (rc == 0) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 30;
        pthread_mutex_lock(&a->mu);
        while (!a->done && pthread_cond_timedwait(&a->cv, &a->mu, &until) == 0)
            ;
        int done = a->done;
        pthread_mutex_unlock(&a->mu);
        ck_assert_msg(done, "a command was accepted and never answered");
        if (a->r.status != LT_OK) {
            et_why.code = a->r.status;
            et_why.err = lt_error_errno(a->r.status);
            snprintf(et_why.message, sizeof et_why.message, "%s", a->r.message);
            rc = et_why.err;
        }
    }
    if (r_p)
        *r_p = a->r;
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    return rc;
}

#define ET__BEGIN                                                                                  \
    struct et_answer et__a = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};    \
    struct ga_exec_reply et__r = {et__answered, &et__a};                                           \
    struct ga_exec_ctl_result et__res;                                                             \
    (void)et__res;                                                                                 \
    memset(&et_why, 0, sizeof et_why)

static inline int et_stream_create(struct ga_executor *ex, uint64_t owner, uint32_t flags,
                                   struct lt_stream_id *id_p)
{
    ET__BEGIN;
    int rc = et__wait(ga_exec_stream_create(ex, owner, flags, &et__r, &et_why), &et__a, &et__res);
    if (rc == 0)
        *id_p = et__res.stream;
    return rc;
}

static inline int et_stream_validate(struct ga_executor *ex, uint64_t owner, struct lt_stream_id id)
{
    ET__BEGIN;
    return et__wait(ga_exec_stream_validate(ex, owner, id, &et__r, &et_why), &et__a, NULL);
}

/* 1 when done, 0 when pending, or -errno. */
static inline int et_stream_query(struct ga_executor *ex, uint64_t owner, struct lt_stream_id id)
{
    ET__BEGIN;
    int rc = et__wait(ga_exec_stream_query(ex, owner, id, &et__r, &et_why), &et__a, &et__res);
    return rc < 0 ? rc : (int)et__res.ready;
}

static inline int et_stream_synchronize(struct ga_executor *ex, uint64_t owner,
                                        struct lt_stream_id id)
{
    ET__BEGIN;
    return et__wait(ga_exec_stream_synchronize(ex, owner, id, &et__r, &et_why), &et__a, NULL);
}

static inline int et_stream_destroy(struct ga_executor *ex, uint64_t owner, struct lt_stream_id id)
{
    ET__BEGIN;
    return et__wait(ga_exec_stream_destroy(ex, owner, id, &et__r, &et_why), &et__a, NULL);
}

static inline int et_event_record(struct ga_executor *ex, uint64_t owner,
                                  struct lt_stream_id stream, struct lt_event_id event,
                                  uint32_t flags, struct lt_event_id *event_p)
{
    ET__BEGIN;
    int rc = et__wait(ga_exec_event_record(ex, owner, stream, event, flags, &et__r, &et_why),
                      &et__a, &et__res);
    if (rc == 0)
        *event_p = et__res.event;
    return rc;
}

static inline int et_event_wait(struct ga_executor *ex, uint64_t owner, struct lt_stream_id stream,
                                struct lt_event_id event)
{
    ET__BEGIN;
    return et__wait(ga_exec_event_wait(ex, owner, stream, event, &et__r, &et_why), &et__a, NULL);
}

/* 1 when complete, 0 when pending, or -errno. */
static inline int et_event_query(struct ga_executor *ex, uint64_t owner, struct lt_event_id event)
{
    ET__BEGIN;
    int rc = et__wait(ga_exec_event_query(ex, owner, event, &et__r, &et_why), &et__a, &et__res);
    return rc < 0 ? rc : (int)et__res.ready;
}

static inline int et_event_synchronize(struct ga_executor *ex, uint64_t owner,
                                       struct lt_event_id event)
{
    ET__BEGIN;
    return et__wait(ga_exec_event_synchronize(ex, owner, event, &et__r, &et_why), &et__a, NULL);
}

static inline int et_event_destroy(struct ga_executor *ex, uint64_t owner, struct lt_event_id event)
{
    ET__BEGIN;
    return et__wait(ga_exec_event_destroy(ex, owner, event, &et__r, &et_why), &et__a, NULL);
}

static inline int et_event_elapsed(struct ga_executor *ex, uint64_t owner, struct lt_event_id a,
                                   struct lt_event_id b, float *ms_p)
{
    ET__BEGIN;
    int rc = et__wait(ga_exec_event_elapsed(ex, owner, a, b, &et__r, &et_why), &et__a, &et__res);
    if (rc == 0)
        *ms_p = lt_f32_from_bits(et__res.elapsed_ms_bits);
    return rc;
}

static inline int et_device_synchronize(struct ga_executor *ex, uint64_t owner)
{
    ET__BEGIN;
    return et__wait(ga_exec_device_synchronize(ex, owner, &et__r, &et_why), &et__a, NULL);
}

#endif /* TESTS_GPU_EXEC_TEST_UTIL_H */
