/* The driver behaviours the project relies on, as one suite that runs on a
 * real GPU (label gpu, through gpu_gate) and against tests/fakecuda
 * (fakecuda_contract_test_fakecuda): so the fake is held to what the real
 * driver does, and a real-GPU run tells when they part. Each expectation
 * was first measured on an H200 with CUDA 13 (README.md here, "Measured").
 * No fork: a CUDA process must not fork after cuInit. The fault test case
 * runs last: a fault leaves the process without a usable device. */
#include <check.h>
#include <cuda.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "base/time.h"
#include "kernels/blockhash_ref.h"
#include "kernels/checksum.h"
#include "kernels/images.h"

#define SKIP 77

static CUdevice dev;
static CUcontext ctx;
static CUmodule mod;
static CUfunction k_sum;

#define CU_EQ(call, want)                                                                          \
    do {                                                                                           \
        CUresult cu_eq_rc = (call);                                                                \
        const char *cu_eq_n = NULL;                                                                \
        cuGetErrorName(cu_eq_rc, &cu_eq_n);                                                        \
        ck_assert_msg(cu_eq_rc == (want), "%s -> %s (%d), expected %s", #call,                     \
                      cu_eq_n ? cu_eq_n : "?", (int)cu_eq_rc, #want);                              \
    } while (0)
#define CU_OK(call) CU_EQ(call, CUDA_SUCCESS)

static void sleep_ms(unsigned int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void fill(void *p, size_t n, uint64_t seed)
{
    unsigned char *b = p;
    uint64_t s = seed | 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        b[i] = (unsigned char)s;
    }
}

/* A mapped host word the GPU can wait on. */
struct word {
    uint64_t *host;
    CUdeviceptr dev;
};

static void word_alloc(struct word *w, uint64_t v)
{
    CU_OK(cuMemHostAlloc((void **)&w->host, 64, CU_MEMHOSTALLOC_DEVICEMAP));
    __atomic_store_n(w->host, v, __ATOMIC_RELEASE);
    CU_OK(cuMemHostGetDevicePointer(&w->dev, w->host, 0));
}

static void ring(struct word *w, uint64_t v)
{
    __atomic_store_n(w->host, v, __ATOMIC_RELEASE);
}

static void setup(void)
{
    CU_OK(cuCtxSetCurrent(ctx));
}

/* ---- the current context ---- */

struct noctx {
    CUstream s;
    CUevent e;
    CUdeviceptr d;
    void *registered;
    CUresult alloc, create, sync_ctx, query, sync, record, memset_async, free_rc, launch_null;
    CUresult reg, devptr, unreg, getfn, ev_sync;
};

static void *noctx_main(void *arg)
{
    struct noctx *n = arg;
    CUdeviceptr x = 0;
    CUstream s2 = NULL;
    n->alloc = cuMemAlloc(&x, 64);
    n->create = cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING);
    n->sync_ctx = cuCtxSynchronize();
    n->query = cuStreamQuery(n->s);
    n->record = cuEventRecord(n->e, n->s);
    n->memset_async = cuMemsetD32Async(n->d, 7, 16, n->s);
    n->sync = cuStreamSynchronize(n->s);
    unsigned long long len = 64;
    unsigned int bs = 64;
    CUdeviceptr sums = n->d + 1024;
    void *params[] = {&n->d, &len, &bs, &sums};
    n->launch_null = cuLaunchKernel(k_sum, 1, 1, 1, KN_CHECKSUM_THREADS, 1, 1, 0, NULL, params,
                                    NULL);
    n->ev_sync = cuEventSynchronize(n->e);
    n->free_rc = cuMemFree(n->d);
    CUdeviceptr dp = 0;
    CUfunction fn = NULL;
    n->reg = cuMemHostRegister((char *)n->registered + 8192, 4096, 0);
    n->devptr = cuMemHostGetDevicePointer(&dp, n->registered, 0);
    n->unreg = cuMemHostUnregister(n->registered);
    n->getfn = cuModuleGetFunction(&fn, mod, KN_K_BLOCK_VERIFY);
    return NULL;
}

START_TEST(creating_needs_a_current_context_handles_do_not)
{
    struct noctx n = {0};
    CU_OK(cuStreamCreate(&n.s, CU_STREAM_NON_BLOCKING));
    CU_OK(cuEventCreate(&n.e, CU_EVENT_DISABLE_TIMING));
    CU_OK(cuMemAlloc(&n.d, 4096));
    n.registered = mmap(NULL, 16384, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(n.registered, MAP_FAILED);
    CU_OK(cuMemHostRegister(n.registered, 4096, 0));
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, noctx_main, &n), 0);
    pthread_join(t, NULL);
    CU_EQ(n.alloc, CUDA_ERROR_INVALID_CONTEXT);
    CU_EQ(n.create, CUDA_ERROR_INVALID_CONTEXT);
    CU_EQ(n.sync_ctx, CUDA_ERROR_INVALID_CONTEXT);
    CU_EQ(n.launch_null, CUDA_ERROR_INVALID_CONTEXT);
    CU_EQ(n.reg, CUDA_ERROR_INVALID_CONTEXT);
    CU_EQ(n.devptr, CUDA_ERROR_INVALID_CONTEXT);
    CU_OK(n.unreg);
    CU_OK(n.getfn);
    CU_OK(n.ev_sync);
    munmap(n.registered, 16384);
    CU_OK(n.query);
    CU_OK(n.record);
    CU_OK(n.memset_async);
    CU_OK(n.sync);
    CU_OK(n.free_rc);
    CU_OK(cuEventQuery(n.e));
    CU_OK(cuEventDestroy(n.e));
    CU_OK(cuStreamDestroy(n.s));
}
END_TEST

/* ---- memory ---- */

START_TEST(device_memory_frees_and_copies_check_their_pointers)
{
    CUdeviceptr d = 0, d2 = 0;
    char host[64] = {0};
    CU_OK(cuMemAlloc(&d, 1 << 20));
    CU_OK(cuMemFree(0));
    CU_EQ(cuMemFree(d + 8), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemAlloc(&d2, 4096));
    CU_OK(cuMemFree(d2));
    CU_EQ(cuMemFree(d2), CUDA_ERROR_INVALID_VALUE);
    CU_EQ(cuMemsetD32Async(d + 2, 0, 4, NULL), CUDA_ERROR_INVALID_VALUE);
    CU_EQ(cuMemcpyHtoD(d + (1 << 20) - 32, host, 64), CUDA_ERROR_INVALID_VALUE);
    CU_EQ(cuMemcpyHtoD((CUdeviceptr)0x7a5a00000000ull, host, 64), CUDA_ERROR_INVALID_VALUE);
    CU_EQ(cuMemcpyDtoH(host, (CUdeviceptr)(uintptr_t)host, 64), CUDA_ERROR_INVALID_VALUE);
    unsigned int type = 0;
    CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 100));
    ck_assert_uint_eq(type, CU_MEMORYTYPE_DEVICE);
    CU_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                (CUdeviceptr)(uintptr_t)host),
          CUDA_ERROR_INVALID_VALUE);
    /* A round trip through device memory. */
    char in[4096], out[4096];
    fill(in, sizeof(in), 3);
    CU_OK(cuMemcpyHtoD(d + 64, in, sizeof(in)));
    CU_OK(cuMemcpyDtoD(d + 8192, d + 64, sizeof(in)));
    CU_OK(cuMemcpyDtoH(out, d + 8192, sizeof(out)));
    ck_assert_mem_eq(in, out, sizeof(in));
    CU_OK(cuMemsetD8(d, 0x5a, 100));
    CU_OK(cuMemcpyDtoH(out, d, 100));
    for (int i = 0; i < 100; i++)
        ck_assert_uint_eq((unsigned char)out[i], 0x5a);
    CU_OK(cuMemFree(d));
}
END_TEST

START_TEST(host_memory_registers_by_byte_range_and_unregisters_by_pointer)
{
    char *big = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(big, MAP_FAILED);
    memset(big, 1, 1 << 20);
    const size_t K64 = 65536;
    CU_OK(cuMemHostRegister(big, K64, 0));
    CUdeviceptr dp = 0;
    CU_OK(cuMemHostGetDevicePointer(&dp, big + 5000, 0)); /* DEVICEMAP or not */
    ck_assert_uint_eq(dp, (CUdeviceptr)(uintptr_t)(big + 5000));
    unsigned int type = 0;
    CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)big));
    ck_assert_uint_eq(type, CU_MEMORYTYPE_HOST);
    CU_EQ(cuMemHostRegister(big, K64, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    CU_EQ(cuMemHostRegister(big + 4096, 4096, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    CU_EQ(cuMemHostRegister(big + K64 - 100, 200, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    /* Byte ranges, not pages: two registrations may share a page. */
    CU_OK(cuMemHostRegister(big + 2 * K64 + 10, 100, 0));
    CU_OK(cuMemHostRegister(big + 2 * K64 + 200, 100, 0));
    CU_EQ(cuMemHostUnregister(big + 2 * K64), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    CU_EQ(cuMemHostUnregister(big + 2 * K64 + 20), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemHostUnregister(big + 2 * K64 + 10));
    CU_OK(cuMemHostUnregister(big + 2 * K64 + 200));
    CU_EQ(cuMemHostUnregister(big + 4096), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemHostUnregister(big));
    CU_EQ(cuMemHostUnregister(big), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    CU_EQ(cuMemHostRegister(big, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CU_EQ(cuMemHostRegister(NULL, 4096, 0), CUDA_ERROR_INVALID_VALUE);

    void *ha = NULL;
    CU_OK(cuMemHostAlloc(&ha, K64, 0));
    CU_OK(cuMemHostGetDevicePointer(&dp, ha, 0));
    ck_assert_uint_eq(dp, (CUdeviceptr)(uintptr_t)ha);
    CU_EQ(cuMemHostGetDevicePointer(&dp, ha, 1), CUDA_ERROR_INVALID_VALUE);
    CU_EQ(cuMemHostRegister(ha, 4096, 0), CUDA_ERROR_INVALID_VALUE);
    CU_EQ(cuMemFreeHost((char *)ha + 64), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemFreeHost(ha));
    munmap(big, 1 << 20);
}
END_TEST

START_TEST(registration_refuses_mappings_the_kernel_cannot_pin)
{
    char *ro = mmap(NULL, 65536, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(ro, MAP_FAILED);
    CU_EQ(cuMemHostRegister(ro, 65536, 0), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemHostRegister(ro, 65536, CU_MEMHOSTREGISTER_READ_ONLY));
    CU_OK(cuMemHostUnregister(ro));
    munmap(ro, 65536);
    char *none = mmap(NULL, 65536, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CU_EQ(cuMemHostRegister(none, 65536, 0), CUDA_ERROR_INVALID_VALUE);
    munmap(none, 65536);
    CU_EQ(cuMemHostRegister(none, 65536, 0), CUDA_ERROR_INVALID_VALUE); /* unmapped now */
    /* A writable shared mapping of a regular file (not tmpfs) is refused;
     * a private one is fine. */
    char path[] = "/var/tmp/fakecuda-contract-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    ck_assert_int_eq(ftruncate(fd, 1 << 20), 0);
    void *sh = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    void *pr = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    ck_assert(sh != MAP_FAILED && pr != MAP_FAILED);
    CU_EQ(cuMemHostRegister(sh, 1 << 20, 0), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemHostRegister(pr, 1 << 20, 0));
    CU_OK(cuMemHostUnregister(pr));
    munmap(sh, 1 << 20);
    munmap(pr, 1 << 20);
    close(fd);
    /* A memfd (shmem), as stagingd's segments. */
    int mfd = memfd_create("fakecuda-contract", MFD_CLOEXEC);
    ck_assert_int_ge(mfd, 0);
    ck_assert_int_eq(ftruncate(mfd, 1 << 20), 0);
    void *m = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    CU_OK(cuMemHostRegister(m, 1 << 20, CU_MEMHOSTREGISTER_DEVICEMAP));
    CU_OK(cuMemHostUnregister(m));
    munmap(m, 1 << 20);
    close(mfd);
}
END_TEST

struct blocker {
    int what;
    CUdeviceptr d;
    void *p;
    CUresult rc;
    uint64_t ns;
};

static void *blocker_main(void *arg)
{
    struct blocker *b = arg;
    cuCtxSetCurrent(ctx);
    uint64_t t0 = base_now_ns();
    if (b->what == 0)
        b->rc = cuMemFree(b->d);
    else if (b->what == 1)
        b->rc = cuMemHostUnregister(b->p);
    else
        b->rc = cuMemAlloc(&b->d, 4096); /* freed by the caller, after the ring */
    __atomic_store_n(&b->ns, base_now_ns() - t0, __ATOMIC_RELEASE);
    return NULL;
}

/* Whether call @what waits for a stream held behind a bell. */
static int blocks_behind_a_bell(int what, CUdeviceptr d, void *p)
{
    CUstream s;
    struct word bell;
    CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    word_alloc(&bell, 0);
    CU_OK(cuStreamWaitValue64(s, bell.dev, 1, CU_STREAM_WAIT_VALUE_GEQ));
    struct blocker b = {.what = what, .d = d, .p = p};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, blocker_main, &b), 0);
    /* A call that does not wait returns within the second, however loaded
     * the machine; one that waits returns only after the ring. */
    int waited = 1;
    for (int i = 0; i < 1000 && waited; i++) {
        sleep_ms(1);
        waited = __atomic_load_n(&b.ns, __ATOMIC_ACQUIRE) == 0;
    }
    ring(&bell, 1);
    pthread_join(t, NULL);
    CU_OK(b.rc);
    if (what == 2)
        CU_OK(cuMemFree(b.d));
    CU_OK(cuStreamSynchronize(s));
    CU_OK(cuStreamDestroy(s));
    CU_OK(cuMemFreeHost(bell.host));
    return waited;
}

START_TEST(frees_and_unregisters_wait_for_queued_work_allocations_do_not)
{
    CUdeviceptr d = 0;
    CU_OK(cuMemAlloc(&d, 4096));
    ck_assert(blocks_behind_a_bell(0, d, NULL));
    char *r = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CU_OK(cuMemHostRegister(r, 65536, 0));
    ck_assert(blocks_behind_a_bell(1, 0, r));
    ck_assert(!blocks_behind_a_bell(2, 0, NULL));
    munmap(r, 65536);
}
END_TEST

/* ---- streams ---- */

static void stamp(void *arg)
{
    *(uint64_t *)arg = base_now_ns();
}

START_TEST(stream_waits_compare_as_the_flags_say)
{
    struct word w, done;
    word_alloc(&w, UINT64_MAX - 2);
    word_alloc(&done, 0);
    CUstream s;
    CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    /* GEQ compares modulo 2^64. */
    CU_OK(cuStreamWaitValue64(s, w.dev, 3, CU_STREAM_WAIT_VALUE_GEQ));
    CU_OK(cuStreamWriteValue64(s, done.dev, 1, CU_STREAM_WRITE_VALUE_DEFAULT));
    sleep_ms(30);
    CU_EQ(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    ck_assert_uint_eq(__atomic_load_n(done.host, __ATOMIC_ACQUIRE), 0);
    ring(&w, 4);
    CU_OK(cuStreamSynchronize(s));
    ck_assert_uint_eq(__atomic_load_n(done.host, __ATOMIC_ACQUIRE), 1);
    /* EQ, AND, NOR. */
    ring(&w, 6);
    CU_OK(cuStreamWaitValue64(s, w.dev, 6, CU_STREAM_WAIT_VALUE_EQ));
    CU_OK(cuStreamWaitValue64(s, w.dev, 2, CU_STREAM_WAIT_VALUE_AND));
    CU_OK(cuStreamWaitValue64(s, w.dev, ~(uint64_t)6 & ~(uint64_t)1, CU_STREAM_WAIT_VALUE_NOR));
    CU_OK(cuStreamWriteValue64(s, done.dev, 2, CU_STREAM_WRITE_VALUE_DEFAULT));
    CU_OK(cuStreamSynchronize(s));
    ck_assert_uint_eq(__atomic_load_n(done.host, __ATOMIC_ACQUIRE), 2);
    CU_OK(cuStreamWaitValue64(s, w.dev, 1, CU_STREAM_WAIT_VALUE_AND)); /* 6 & 1 == 0 */
    CU_OK(cuStreamWriteValue64(s, done.dev, 3, CU_STREAM_WRITE_VALUE_DEFAULT));
    sleep_ms(30);
    ck_assert_uint_eq(__atomic_load_n(done.host, __ATOMIC_ACQUIRE), 2);
    ring(&w, 7);
    CU_OK(cuStreamSynchronize(s));
    ck_assert_uint_eq(__atomic_load_n(done.host, __ATOMIC_ACQUIRE), 3);
    /* Bad words are refused when queued. */
    char plain[16] __attribute__((aligned(8)));
    CU_EQ(cuStreamWaitValue64(s, (CUdeviceptr)(uintptr_t)plain, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CU_EQ(cuStreamWaitValue64(s, w.dev + 4, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuStreamDestroy(s));
    CU_OK(cuMemFreeHost(w.host));
    CU_OK(cuMemFreeHost(done.host));
}
END_TEST

static CUresult hostfn_alloc_rc = CUDA_SUCCESS;
static CUresult hostfn_query_rc = CUDA_SUCCESS;
static CUresult hostfn_ctx_rc = CUDA_SUCCESS, hostfn_set_rc = CUDA_SUCCESS;
static CUresult hostfn_event_rc = CUDA_ERROR_UNKNOWN;
static CUevent hostfn_event;

static void hostfn_probe(void *arg)
{
    CUdeviceptr x = 0;
    CUcontext cur = NULL;
    hostfn_alloc_rc = cuMemAlloc(&x, 64);
    hostfn_query_rc = cuStreamQuery((CUstream)arg);
    hostfn_ctx_rc = cuCtxGetCurrent(&cur);
    hostfn_set_rc = cuCtxSetCurrent(ctx);
    hostfn_event_rc = cuEventQuery(hostfn_event);
}

START_TEST(host_functions_run_in_order_and_may_not_call_cuda)
{
    CUstream s;
    struct word gate;
    word_alloc(&gate, 0);
    CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU_OK(cuEventCreate(&hostfn_event, CU_EVENT_DISABLE_TIMING));
    CU_OK(cuEventRecord(hostfn_event, s));
    uint64_t t_fn = 0;
    CU_OK(cuStreamWaitValue64(s, gate.dev, 1, CU_STREAM_WAIT_VALUE_GEQ));
    CU_OK(cuLaunchHostFunc(s, stamp, &t_fn));
    CU_OK(cuLaunchHostFunc(s, hostfn_probe, s));
    sleep_ms(50);
    ck_assert_uint_eq(__atomic_load_n(&t_fn, __ATOMIC_ACQUIRE), 0);
    uint64_t t_ring = base_now_ns();
    ring(&gate, 1);
    CU_OK(cuStreamSynchronize(s));
    ck_assert_uint_ge(t_fn, t_ring);
    CU_EQ(hostfn_alloc_rc, CUDA_ERROR_NOT_PERMITTED);
    CU_EQ(hostfn_query_rc, CUDA_ERROR_NOT_READY); /* its own stream is running it */
    CU_EQ(hostfn_ctx_rc, CUDA_ERROR_NOT_PERMITTED);
    CU_EQ(hostfn_set_rc, CUDA_ERROR_NOT_PERMITTED);
    CU_OK(hostfn_event_rc); /* queries are allowed */
    CU_OK(cuEventDestroy(hostfn_event));
    /* A destroyed stream still runs what it was given. */
    ring(&gate, 0);
    t_fn = 0;
    CU_OK(cuStreamWaitValue64(s, gate.dev, 2, CU_STREAM_WAIT_VALUE_GEQ));
    CU_OK(cuLaunchHostFunc(s, stamp, &t_fn));
    CU_OK(cuStreamDestroy(s));
    sleep_ms(20);
    ring(&gate, 2);
    for (int i = 0; i < 5000 && !__atomic_load_n(&t_fn, __ATOMIC_ACQUIRE); i++)
        sleep_ms(1);
    ck_assert_uint_ne(__atomic_load_n(&t_fn, __ATOMIC_ACQUIRE), 0);
    CU_EQ(cuStreamCreate(&s, 2), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemFreeHost(gate.host));
}
END_TEST

START_TEST(the_null_stream_waits_for_blocking_streams_only)
{
    struct word gate, done;
    word_alloc(&gate, 0);
    word_alloc(&done, 0);
    CUstream blocking, nonblocking;
    CU_OK(cuStreamCreate(&blocking, CU_STREAM_DEFAULT));
    CU_OK(cuStreamCreate(&nonblocking, CU_STREAM_NON_BLOCKING));
    CU_OK(cuStreamWaitValue64(nonblocking, gate.dev, 1, CU_STREAM_WAIT_VALUE_GEQ));
    CU_OK(cuStreamWriteValue64(NULL, done.dev, 1, 0));
    CU_OK(cuStreamSynchronize(NULL)); /* a non-blocking stream holds nothing */
    ck_assert_uint_eq(__atomic_load_n(done.host, __ATOMIC_ACQUIRE), 1);
    CU_OK(cuStreamWaitValue64(blocking, gate.dev, 1, CU_STREAM_WAIT_VALUE_GEQ));
    CU_OK(cuStreamWriteValue64(NULL, done.dev, 2, 0));
    sleep_ms(50);
    ck_assert_uint_eq(__atomic_load_n(done.host, __ATOMIC_ACQUIRE), 1);
    ring(&gate, 1);
    CU_OK(cuCtxSynchronize());
    ck_assert_uint_eq(__atomic_load_n(done.host, __ATOMIC_ACQUIRE), 2);
    CU_OK(cuStreamDestroy(blocking));
    CU_OK(cuStreamDestroy(nonblocking));
    CU_OK(cuMemFreeHost(gate.host));
    CU_OK(cuMemFreeHost(done.host));
}
END_TEST

/* ---- events ---- */

START_TEST(events_report_what_their_last_record_covers)
{
    CUevent t0, t1, nt, never;
    CU_OK(cuEventCreate(&t0, CU_EVENT_DEFAULT));
    CU_OK(cuEventCreate(&t1, CU_EVENT_BLOCKING_SYNC));
    CU_OK(cuEventCreate(&nt, CU_EVENT_DISABLE_TIMING));
    CU_OK(cuEventCreate(&never, CU_EVENT_DEFAULT));
    float ms = -1;
    CU_OK(cuEventQuery(never));
    CU_OK(cuEventSynchronize(never));
    CU_EQ(cuEventElapsedTime(&ms, never, never), CUDA_ERROR_INVALID_HANDLE);
    CU_EQ(cuEventCreate(&never, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE);
    CU_EQ(cuEventCreate(&never, 0x40), CUDA_ERROR_INVALID_VALUE);
    CUstream s, other;
    struct word gate;
    word_alloc(&gate, 0);
    CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU_OK(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
    CU_OK(cuEventRecord(t0, s));
    CU_OK(cuStreamWaitValue64(s, gate.dev, 1, CU_STREAM_WAIT_VALUE_GEQ));
    CU_OK(cuEventRecord(t1, s));
    CU_OK(cuEventRecord(nt, s));
    CU_EQ(cuEventQuery(t1), CUDA_ERROR_NOT_READY);
    CU_EQ(cuEventElapsedTime(&ms, t0, t1), CUDA_ERROR_NOT_READY);
    /* Another stream waits on the GPU, not the host. */
    uint64_t t_other = 0;
    CU_OK(cuStreamWaitEvent(other, t1, 0));
    CU_OK(cuLaunchHostFunc(other, stamp, &t_other));
    CU_EQ(cuStreamWaitEvent(other, t1, 4), CUDA_ERROR_INVALID_VALUE);
    sleep_ms(50);
    ck_assert_uint_eq(__atomic_load_n(&t_other, __ATOMIC_ACQUIRE), 0);
    ring(&gate, 1);
    CU_OK(cuEventSynchronize(t1));
    CU_OK(cuEventElapsedTime(&ms, t0, t1));
    ck_assert_msg(ms >= 40.0f && ms < 5000.0f, "elapsed %f ms across a 50 ms gate", ms);
    CU_OK(cuEventElapsedTime(&ms, t0, t0));
    ck_assert(ms == 0.0f);
    CU_EQ(cuEventElapsedTime(&ms, t0, nt), CUDA_ERROR_INVALID_HANDLE);
    CU_OK(cuStreamSynchronize(other));
    ck_assert_uint_ne(t_other, 0);
    /* Re-recording behind a closed gate: the event is pending again. */
    ring(&gate, 0);
    CU_OK(cuStreamWaitValue64(s, gate.dev, 2, CU_STREAM_WAIT_VALUE_GEQ));
    CU_OK(cuEventRecord(t1, s));
    CU_EQ(cuEventQuery(t1), CUDA_ERROR_NOT_READY);
    CU_OK(cuEventDestroy(t1)); /* pending: destroyed once done */
    ring(&gate, 2);
    CU_OK(cuStreamSynchronize(s));
    CU_OK(cuEventDestroy(t0));
    CU_OK(cuEventDestroy(nt));
    CU_OK(cuStreamDestroy(s));
    CU_OK(cuStreamDestroy(other));
    CU_OK(cuMemFreeHost(gate.host));
}
END_TEST

/* ---- modules and launches ---- */

START_TEST(modules_load_only_this_arch_and_name_their_kernels)
{
    CUfunction f;
    CU_EQ(cuModuleGetFunction(&f, mod, "k_absent"), CUDA_ERROR_NOT_FOUND);
    int v = 0;
    CU_OK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k_sum));
    ck_assert_int_eq(v, KN_CHECKSUM_THREADS);
    CU_OK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, k_sum));
    ck_assert_int_gt(v, 0);
    CUfunctionLoadingState st;
    CU_OK(cuFuncIsLoaded(&st, k_sum));
    ck_assert_int_eq(st, CU_FUNCTION_LOADING_STATE_LOADED);
    int occ = 0;
    CU_OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k_sum, KN_CHECKSUM_THREADS, 0));
    ck_assert_int_ge(occ, 1);
    char junk[4096];
    memset(junk, 0x41, sizeof(junk));
    junk[sizeof(junk) - 1] = '\0';
    CUmodule m;
    CU_EQ(cuModuleLoadData(&m, junk), CUDA_ERROR_INVALID_IMAGE);
    memset(junk, 0xee, sizeof(junk));
    CU_EQ(cuModuleLoadData(&m, junk), CUDA_ERROR_INVALID_IMAGE);
#ifdef OTHER_ARCH_CUBIN
    FILE *fp = fopen(OTHER_ARCH_CUBIN, "rb");
    ck_assert_ptr_nonnull(fp);
    static unsigned char other[1 << 20];
    size_t n = fread(other, 1, sizeof(other), fp);
    fclose(fp);
    ck_assert_uint_gt(n, 64);
    CU_EQ(cuModuleLoadData(&m, other), CUDA_ERROR_NO_BINARY_FOR_GPU);
#endif
}
END_TEST

START_TEST(launches_check_their_shape_and_take_parameters_by_value)
{
    CUdeviceptr d = 0;
    const size_t len = 3 * 4096 + 5;
    CU_OK(cuMemAlloc(&d, 65536));
    unsigned char host[3 * 4096 + 5];
    fill(host, sizeof(host), 11);
    CU_OK(cuMemcpyHtoD(d, host, len));
    CUdeviceptr data = d, sums = d + 32768;
    unsigned long long l = len;
    unsigned int bs = 4096;
    void *params[] = {&data, &l, &bs, &sums};
    CU_EQ(cuLaunchKernel(k_sum, 4, 1, 1, 512, 1, 1, 0, NULL, params, NULL),
          CUDA_ERROR_INVALID_VALUE);
    CU_EQ(cuLaunchKernel(k_sum, 0, 1, 1, 256, 1, 1, 0, NULL, params, NULL),
          CUDA_ERROR_INVALID_VALUE);
    CU_EQ(cuLaunchKernel(k_sum, 4, 1, 1, 256, 1, 1, 60000, NULL, params, NULL),
          CUDA_ERROR_INVALID_VALUE);
    CU_EQ(cuLaunchKernel(k_sum, 4, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL),
          CUDA_ERROR_INVALID_VALUE);
    struct word gate;
    word_alloc(&gate, 0);
    CUstream s;
    CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU_OK(cuStreamWaitValue64(s, gate.dev, 1, CU_STREAM_WAIT_VALUE_GEQ));
    CU_OK(cuLaunchKernel(k_sum, 4, 1, 1, KN_CHECKSUM_THREADS, 1, 1, 0, s, params, NULL));
    /* Changed after the launch, before it runs: the launch kept its copy. */
    l = 1;
    bs = 8;
    sums = d;
    ring(&gate, 1);
    CU_OK(cuStreamSynchronize(s));
    uint64_t got[4], want[4];
    CU_OK(cuMemcpyDtoH(got, d + 32768, sizeof(got)));
    ck_assert_int_eq(kr_block_checksums(host, len, 4096, want), 4);
    ck_assert_mem_eq(got, want, sizeof(got));
    CU_OK(cuStreamDestroy(s));
    CU_OK(cuMemFreeHost(gate.host));
    CU_OK(cuMemFree(d));
}
END_TEST

/* ---- the context's lifetime ---- */

START_TEST(a_released_primary_context_is_destroyed_and_can_be_retained_again)
{
    unsigned long long id0 = 0, id1 = 0;
    CU_OK(cuCtxGetId(ctx, &id0));
    CUdeviceptr d = 0;
    CU_OK(cuMemAlloc(&d, 4096));
    CU_OK(cuModuleUnload(mod));
    CU_OK(cuDevicePrimaryCtxRelease(dev));
    unsigned int flags = 0;
    int active = 1;
    CU_OK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
    ck_assert_int_eq(active, 0);
    CUdeviceptr x = 0;
    CU_EQ(cuMemAlloc(&x, 64), CUDA_ERROR_CONTEXT_IS_DESTROYED); /* still current, but gone */
    CU_OK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU_OK(cuCtxSetCurrent(ctx));
    CU_OK(cuCtxGetId(ctx, &id1));
    ck_assert_uint_ne(id0, id1);
    CU_EQ(cuMemFree(d), CUDA_ERROR_INVALID_VALUE); /* it went with the old context */
    CU_OK(cuMemAlloc(&x, 64));
    CU_OK(cuMemFree(x));
    CU_OK(cuModuleLoadData(&mod, kn_images[0].data));
    CU_OK(cuModuleGetFunction(&k_sum, mod, KN_K_BLOCK_CHECKSUM));
}
END_TEST

/* ---- a fault (last: the process keeps no usable device) ---- */

START_TEST(a_fault_is_sticky_and_outlives_the_context)
{
    CUstream s, idle;
    CUevent done;
    CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU_OK(cuStreamCreate(&idle, CU_STREAM_NON_BLOCKING));
    CU_OK(cuEventCreate(&done, 0));
    CU_OK(cuEventRecord(done, s));
    CU_OK(cuStreamSynchronize(s));
    CUdeviceptr bad = (CUdeviceptr)0x7a5a00000000ull, sums = 0;
    CU_OK(cuMemAlloc(&sums, 4096));
    unsigned long long len = 1 << 20;
    unsigned int bs = 65536;
    void *params[] = {&bad, &len, &bs, &sums};
    CU_OK(cuLaunchKernel(k_sum, 16, 1, 1, KN_CHECKSUM_THREADS, 1, 1, 0, s, params, NULL));
    CU_EQ(cuStreamSynchronize(s), CUDA_ERROR_ILLEGAL_ADDRESS);
    CU_EQ(cuStreamQuery(idle), CUDA_ERROR_ILLEGAL_ADDRESS);
    CU_EQ(cuEventQuery(done), CUDA_ERROR_ILLEGAL_ADDRESS);
    CU_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
    CUdeviceptr x = 0;
    CU_EQ(cuMemAlloc(&x, 64), CUDA_ERROR_ILLEGAL_ADDRESS);
    CU_EQ(cuMemFree(sums), CUDA_ERROR_ILLEGAL_ADDRESS);
    CU_EQ(cuStreamDestroy(idle), CUDA_ERROR_ILLEGAL_ADDRESS);
    CU_OK(cuCtxSetCurrent(ctx));
    int v = 0;
    CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    CU_OK(cuDriverGetVersion(&v));
    unsigned long long id = 0;
    CU_OK(cuCtxGetId(ctx, &id));
    CU_OK(cuDevicePrimaryCtxRelease(dev));
    CUcontext again = NULL;
    CU_EQ(cuDevicePrimaryCtxRetain(&again, dev), CUDA_ERROR_ILLEGAL_ADDRESS);
}
END_TEST

static Suite *contract_suite(void)
{
    Suite *s = suite_create("fakecuda_contract");
    TCase *tc = tcase_create("driver");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, creating_needs_a_current_context_handles_do_not);
    tcase_add_test(tc, device_memory_frees_and_copies_check_their_pointers);
    tcase_add_test(tc, host_memory_registers_by_byte_range_and_unregisters_by_pointer);
    tcase_add_test(tc, registration_refuses_mappings_the_kernel_cannot_pin);
    tcase_add_test(tc, frees_and_unregisters_wait_for_queued_work_allocations_do_not);
    tcase_add_test(tc, stream_waits_compare_as_the_flags_say);
    tcase_add_test(tc, host_functions_run_in_order_and_may_not_call_cuda);
    tcase_add_test(tc, the_null_stream_waits_for_blocking_streams_only);
    tcase_add_test(tc, events_report_what_their_last_record_covers);
    tcase_add_test(tc, modules_load_only_this_arch_and_name_their_kernels);
    tcase_add_test(tc, launches_check_their_shape_and_take_parameters_by_value);
    tcase_add_test(tc, a_released_primary_context_is_destroyed_and_can_be_retained_again);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    TCase *fault = tcase_create("fault");
    tcase_add_checked_fixture(fault, setup, NULL);
    tcase_add_test(fault, a_fault_is_sticky_and_outlives_the_context);
    suite_add_tcase(s, fault);
    return s;
}

int main(void)
{
    int count = 0;
    CUresult rc = cuInit(0);
    if (rc == CUDA_SUCCESS)
        rc = cuDeviceGetCount(&count);
    if (rc != CUDA_SUCCESS || count < 1) {
        printf("SKIP fakecuda_contract: no CUDA device (CUresult %d, %d devices)\n", (int)rc,
               count);
        return SKIP;
    }
    if (cuDeviceGet(&dev, 0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cuCtxSetCurrent(ctx) || cuModuleLoadData(&mod, kn_images[0].data) ||
        cuModuleGetFunction(&k_sum, mod, KN_K_BLOCK_CHECKSUM)) {
        printf("fakecuda_contract: cannot open device 0 and load the checksum image\n");
        return EXIT_FAILURE;
    }
    SRunner *sr = srunner_create(contract_suite());
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
