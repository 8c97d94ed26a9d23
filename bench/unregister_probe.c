/* unregister-probe: what a cuMemHostUnregister that waits behind a stream
 * stalled on an unwritten word does to the rest of the context (issue #12,
 * docs/reliability.md, "A peer's unrung doorbell").
 *
 * Stream A waits (cuStreamWaitValue64) on a mapped host word nobody writes
 * yet, as the agent's stream waits on a client's unrung bell. A thread then
 * calls cuMemHostUnregister on an idle registered buffer (as the reaper
 * does for an evicted segment). Meanwhile the main thread times work on
 * another stream B: a copy and a host function, issued and waited for, as
 * another client's work would be. After --hold-ms the word is written, A
 * passes and the unregistration returns. Prints when each finished, so it
 * shows whether the pending unregistration blocks only itself or every
 * caller of the driver.
 *
 * Then, with no unregistration pending, it times each other driver call
 * the agent makes while serving (allocating pinned memory, registering,
 * making streams and events, allocating device memory) with stream A
 * again waiting on the word, and says which of them wait for the word.
 * Every CUresult is checked. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_cuda.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

#define CK(call) BENCH_CK("unregister-probe", call)

static CUcontext ctx;
static void *reg_buf;
static double t_start, t_unreg_done;

static void *unregister_main(void *arg)
{
    (void)arg;
    CK(cuCtxSetCurrent(ctx));
    CK(cuMemHostUnregister(reg_buf));
    t_unreg_done = now_ms() - t_start;
    return NULL;
}

static uint64_t *word;
static uint64_t word_value = 1; /* what the writer stores; A waits for >= it */
static int hold_ms = 2000;
static double t_write;

/* Writes the word at hold_ms whatever the main thread is doing: if the
 * other work is stuck behind the unregistration, this is what frees it. */
static void *writer_main(void *arg)
{
    (void)arg;
    double left = hold_ms - (now_ms() - t_start);
    if (left > 0)
        usleep((useconds_t)(left * 1000));
    t_write = now_ms() - t_start;
    __atomic_store_n(word, word_value, __ATOMIC_RELEASE);
    return NULL;
}

static volatile int host_fn_ran;
static void host_fn(void *arg)
{
    (void)arg;
    host_fn_ran = 1;
}

/* One round of other work on @st: a 1 MiB copy from pinned memory and a host
 * function, waited for. Returns the ms it took. */
static double other_work(CUstream st, CUdeviceptr d, void *pinned)
{
    double t0 = now_ms();
    host_fn_ran = 0;
    CK(cuMemcpyHtoDAsync(d, pinned, 1 << 20, st));
    CK(cuLaunchHostFunc(st, host_fn, NULL));
    CK(cuStreamSynchronize(st));
    if (!host_fn_ran) {
        fprintf(stderr, "unregister-probe: the host function did not run\n");
        exit(1);
    }
    return now_ms() - t0;
}

/* The driver calls timed against a waiting stream, each undone at once. */
enum call_kind {
    CALL_HOST_ALLOC,
    CALL_HOST_FREE,
    CALL_REGISTER,
    CALL_STREAM,
    CALL_STREAM_DESTROY,
    CALL_EVENT,
    CALL_EVENT_DESTROY,
    CALL_DEV_ALLOC,
    CALL_LAST = CALL_DEV_ALLOC
};
static const char *const call_names[] = {
    "cuMemHostAlloc 2 MiB", "cuMemFreeHost 2 MiB", "cuMemHostRegister 64 MiB",
    "cuStreamCreate",       "cuStreamDestroy",     "cuEventCreate",
    "cuEventDestroy",       "cuMemAlloc 2 MiB",
};
static CUstream spare_stream; /* made before the wait for CALL_STREAM_DESTROY */
static CUevent spare_event;   /* and for CALL_EVENT_DESTROY */

static void *spare_pinned;     /* made before the wait for CALL_HOST_FREE */
static void *spare_host;       /* plain memory for CALL_REGISTER */
enum { SPARE_HOST_BYTES = 64 << 20 };

/* Runs @kind once and undoes what it made (the undo is not timed). */
static double time_call(enum call_kind kind)
{
    void *p = NULL;
    CUstream st;
    CUevent ev;
    CUdeviceptr dp;
    double t0 = now_ms(), took;
    switch (kind) {
    case CALL_HOST_ALLOC:
        CK(cuMemHostAlloc(&p, 2 << 20, 0));
        took = now_ms() - t0;
        CK(cuMemFreeHost(p));
        return took;
    case CALL_HOST_FREE:
        CK(cuMemFreeHost(spare_pinned));
        spare_pinned = NULL;
        return now_ms() - t0;
    case CALL_REGISTER:
        CK(cuMemHostRegister(spare_host, SPARE_HOST_BYTES, 0));
        return now_ms() - t0; /* unregistered after the word is written */
    case CALL_STREAM:
        CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
        took = now_ms() - t0;
        CK(cuStreamDestroy(st));
        return took;
    case CALL_STREAM_DESTROY:
        CK(cuStreamDestroy(spare_stream));
        return now_ms() - t0;
    case CALL_EVENT_DESTROY:
        CK(cuEventDestroy(spare_event));
        return now_ms() - t0;
    case CALL_EVENT:
        CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
        took = now_ms() - t0;
        CK(cuEventDestroy(ev));
        return took;
    case CALL_DEV_ALLOC:
        CK(cuMemAlloc(&dp, 2 << 20));
        took = now_ms() - t0;
        CK(cuMemFree(dp));
        return took;
    }
    return 0;
}

/* Queues a wait on @a for the next word value, times @kind while it stands,
 * then lets the writer end it at hold_ms. Returns 1 if the call waited for
 * the word (took more than half the hold). */
static int probe_call(CUstream a, CUdeviceptr word_dev, enum call_kind kind)
{
    word_value++;
    if (kind == CALL_HOST_FREE)
        CK(cuMemHostAlloc(&spare_pinned, 2 << 20, 0));
    if (kind == CALL_STREAM_DESTROY)
        CK(cuStreamCreate(&spare_stream, CU_STREAM_NON_BLOCKING));
    if (kind == CALL_EVENT_DESTROY)
        CK(cuEventCreate(&spare_event, CU_EVENT_DISABLE_TIMING));
    CK(cuStreamWaitValue64(a, word_dev, word_value, CU_STREAM_WAIT_VALUE_GEQ));
    t_start = now_ms();
    pthread_t wr;
    if (pthread_create(&wr, NULL, writer_main, NULL) != 0) {
        fprintf(stderr, "unregister-probe: pthread_create failed\n");
        exit(1);
    }
    usleep(50 * 1000);
    double took = time_call(kind);
    pthread_join(wr, NULL);
    CK(cuStreamSynchronize(a));
    if (kind == CALL_REGISTER)
        CK(cuMemHostUnregister(spare_host));
    int waited = took > hold_ms / 2.0;
    printf("  %-26s %9.3f ms  %s\n", call_names[kind], took,
           waited ? "WAITS for the word" : "does not wait");
    return waited;
}

int main(int argc, char **argv)
{
    if (bench_help_wanted(argc, argv)) {
        printf("usage: unregister-probe [HOLD_MS]   (default 2000; needs a GPU)\n");
        return 0;
    }
    hold_ms = argc > 1 ? atoi(argv[1]) : 2000;
    setvbuf(stdout, NULL, _IOLBF, 0);
    bench_cuda_require("unregister-probe");
    CUdevice dev;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CUstream a, b;
    CK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
    CK(cuMemHostAlloc((void **)&word, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
    *word = 0;
    CUdeviceptr word_dev;
    CK(cuMemHostGetDevicePointer(&word_dev, word, 0));
    void *pinned;
    CK(cuMemHostAlloc(&pinned, 1 << 20, 0));
    CUdeviceptr d;
    CK(cuMemAlloc(&d, 1 << 20));
    size_t reg_len = 64u << 20;
    reg_buf = aligned_alloc(4096, reg_len);
    memset(reg_buf, 1, reg_len);
    CK(cuMemHostRegister(reg_buf, reg_len, 0));

    printf("other work, idle device:                 %8.3f ms\n", other_work(b, d, pinned));
    CK(cuStreamWaitValue64(a, word_dev, 1, CU_STREAM_WAIT_VALUE_GEQ));
    printf("other work, stream A waiting on the word: %8.3f ms\n", other_work(b, d, pinned));

    t_start = now_ms();
    pthread_t th, wr;
    if (pthread_create(&wr, NULL, writer_main, NULL) != 0 ||
        pthread_create(&th, NULL, unregister_main, NULL) != 0)
        return 1;
    usleep(100 * 1000);
    double t0 = now_ms() - t_start;
    double took = other_work(b, d, pinned);
    printf("other work, unregistration pending:       %8.3f ms (started %.0f ms after it)\n", took,
           t0);
    pthread_join(wr, NULL);
    pthread_join(th, NULL);
    printf("word written at %.0f ms; the unregistration returned at %.0f ms\n", t_write,
           t_unreg_done);
    CK(cuStreamSynchronize(a));
    printf("verdict: %s\n",
           took > (hold_ms - t0) / 2.0 ? "a pending unregistration BLOCKS other work in the context"
                                : "a pending unregistration blocks only its own caller");

    printf("each call, stream A waiting on the word (hold %d ms):\n", hold_ms);
    spare_host = aligned_alloc(4096, SPARE_HOST_BYTES);
    if (!spare_host)
        return 1;
    memset(spare_host, 2, SPARE_HOST_BYTES);
    int waiting_calls = 0;
    for (int k = CALL_HOST_ALLOC; k <= CALL_LAST; k++)
        waiting_calls += probe_call(a, word_dev, (enum call_kind)k);
    printf("verdict: %d of %d calls wait for a stream's unwritten word\n", waiting_calls,
           CALL_LAST + 1);
    free(spare_host);
    CK(cuMemFree(d));
    CK(cuMemFreeHost(pinned));
    CK(cuMemFreeHost(word));
    CK(cuStreamDestroy(a));
    CK(cuStreamDestroy(b));
    CK(cuDevicePrimaryCtxRelease(dev));
    free(reg_buf);
    return 0;
}
