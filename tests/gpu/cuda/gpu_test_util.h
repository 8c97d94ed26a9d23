/* Shared by the ga exec GPU tests: seeded data, a thread-safe log capture,
 * CUDA result checks, and waiting on host words the GPU writes. Each test
 * binary opens the device once (CK_NOFORK: a CUDA process must not fork). */
#ifndef TESTS_GPU_EXEC_GPU_TEST_UTIL_H
#define TESTS_GPU_EXEC_GPU_TEST_UTIL_H

#include <check.h>
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/time.h"
#include "gpu/exec_cuda.h"

#define CU_OK(call)                                                                                \
    do {                                                                                           \
        CUresult cu_ok_rc = (call);                                                                \
        ck_assert_msg(cu_ok_rc == CUDA_SUCCESS, "%s -> CUresult %d", #call, (int)cu_ok_rc);        \
    } while (0)

static inline uint64_t tu_rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

/* Fills @n bytes with a xorshift stream from @seed (nonzero). */
static inline void tu_fill(void *p, size_t n, uint64_t seed)
{
    unsigned char *b = p;
    uint64_t s = seed | 1;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = tu_rng_next(&s);
        memcpy(b + i, &v, n - i < 8 ? n - i : 8);
    }
}

/* A fast word pattern for big buffers: word i is a mix of @seed and i. */
static inline void tu_fill_words(uint64_t *w, size_t words, uint64_t seed)
{
    for (size_t i = 0; i < words; i++)
        w[i] = (seed ^ (i * 0x9E3779B97F4A7C15ULL)) * 0xBF58476D1CE4E5B9ULL;
}

static char tu_captured[65536];
static pthread_mutex_t tu_captured_lock = PTHREAD_MUTEX_INITIALIZER;

static inline void tu_capture_fn(void *ctx, int level, const char *subsys, const char *line)
{
    (void)ctx;
    (void)subsys;
    pthread_mutex_lock(&tu_captured_lock);
    size_t used = strlen(tu_captured);
    if (used > sizeof(tu_captured) * 3 / 4) /* keep the newest lines */
        used = 0;
    snprintf(tu_captured + used, sizeof(tu_captured) - used, "[%d] %s\n", level, line);
    pthread_mutex_unlock(&tu_captured_lock);
}

/* The sink every GPU test captures with (ga_device_opts.log, or the
 * process default). */
static const struct base_log_sink tu_capture_sink = {.fn = tu_capture_fn,
                                                     .max_level = BASE_LOG_DEBUG};

static inline void tu_capture_clear(void)
{
    pthread_mutex_lock(&tu_captured_lock);
    tu_captured[0] = '\0';
    pthread_mutex_unlock(&tu_captured_lock);
}

/* 1 when the captured log holds @text. */
static inline int tu_logged(const char *text)
{
    pthread_mutex_lock(&tu_captured_lock);
    int found = strstr(tu_captured, text) != NULL;
    pthread_mutex_unlock(&tu_captured_lock);
    return found;
}

/* Waits up to @timeout_ms for the host word @w to reach @want (as GEQ does);
 * returns 1 when it did. */
static inline int tu_wait_word(const uint64_t *w, uint64_t want, unsigned int timeout_ms)
{
    uint64_t until = base_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    while ((int64_t)(ga_doorbell_peek(w) - want) < 0) {
        if (base_now_ns() > until)
            return 0;
        struct timespec pause = {0, 20000};
        nanosleep(&pause, NULL);
    }
    return 1;
}

static inline void tu_sleep_ms(unsigned int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* LEASE_CHECK_MAIN's probe for suites that open the device themselves: a
 * driver with at least one device, else skip. */
static inline int tu_cuda_probe(char *why, size_t len)
{
    int count = 0;
    CUresult rc = cuInit(0);
    if (rc == CUDA_SUCCESS)
        rc = cuDeviceGetCount(&count);
    if (rc != CUDA_SUCCESS || count < 1) {
        snprintf(why, len, "no CUDA device (CUresult %d, %d devices)", (int)rc, count);
        return 77;
    }
    return 0;
}

#endif /* TESTS_GPU_EXEC_GPU_TEST_UTIL_H */
