/* The CUDA registration backend under the lease service, on a real GPU:
 * registrations the driver can see, per-chunk device pointers that read the
 * daemon's bytes, eviction that really unregisters, driver errors mapped. */
#include <check.h>
#include <cuda.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check_main.h"
#include "gpu_test_util.h"
#include "huge_pages.h"
#include "gpu/lease_backend.h"

#define KiB 1024ull
#define MiB (1024ull * 1024ull)
/* As stagingd seals now: registered with CU_MEMHOSTREGISTER_READ_ONLY. */
#define SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL | F_SEAL_FUTURE_WRITE)

static CUdevice dev;
static CUcontext primary;

static void fill_random(void *p, size_t len, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < len; i += 8) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        memcpy((uint8_t *)p + i, &s, len - i < 8 ? len - i : 8);
    }
}

static int make_memfd(uint64_t size, uint64_t seed)
{
    int fd = memfd_create("lease-cuda-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    fill_random(p, size, seed);
    munmap(p, size);
    ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, SEALS), 0);
    return fd;
}

/* Whether the driver sees @p as registered host memory. */
static bool registered(const void *p)
{
    unsigned type = 0;
    return cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)p) ==
               CUDA_SUCCESS &&
           type == CU_MEMORYTYPE_HOST;
}

static void setup(void)
{
    ck_assert_int_eq(cuInit(0), CUDA_SUCCESS);
    ck_assert_int_eq(cuDeviceGet(&dev, 0), CUDA_SUCCESS);
    ck_assert_int_eq(cuDevicePrimaryCtxRetain(&primary, dev), CUDA_SUCCESS);
}

static void teardown(void)
{
    cuDevicePrimaryCtxRelease(dev);
}

static struct lease_service *new_svc(struct lease_backend *be, uint64_t pinned, uint64_t mapped)
{
    struct lease_service_config cfg = {.budget_pinned = pinned, .budget_mapped = mapped};
    struct lease_service *svc;
    struct lt_failure why;
    int rc = lease_service_create(&cfg, be, &svc, &why);
    ck_assert_msg(rc == 0, "create: %s", why.message);
    return svc;
}

struct add_args {
    struct lease_service *svc;
    struct lease_client_id client;
    int fd;
    uint64_t size;
    enum lt_class cls;
    struct lt_segment_id seg;
    int rc;
    struct lt_failure why;
};

static void *add_on_fresh_thread(void *arg)
{
    struct add_args *a = arg;
    a->rc = lease_segment_add(a->svc, a->client, a->fd, a->size, a->cls, &a->seg, &a->why);
    return NULL;
}

START_TEST(mapped_chunks_read_the_daemons_bytes_through_device_pointers)
{
    struct lease_backend be;
    ck_assert_int_eq(ga_cuda_lease_backend_init(primary, 1 * MiB, &be, NULL), 0);
    struct lease_service *svc = new_svc(&be, 8 * MiB, 8 * MiB);
    struct lease_client_id c;
    ck_assert_int_eq(lease_client_add(svc, NULL, &c, NULL), 0);
    uint8_t *ref = malloc(4 * MiB);
    fill_random(ref, 4 * MiB, 77);
    /* Added from a thread with no current context: the backend sets it. */
    struct add_args a = {.svc = svc,
                         .client = c,
                         .fd = make_memfd(4 * MiB, 77),
                         .size = 4 * MiB,
                         .cls = LT_CLASS_MAPPED,
                         .rc = -1};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, add_on_fresh_thread, &a), 0);
    pthread_join(th, NULL);
    ck_assert_msg(a.rc == 0, "segment_add: %s", a.why.message);

    ck_assert_int_eq(cuCtxSetCurrent(primary), CUDA_SUCCESS);
    for (int chunk = 0; chunk < 4; chunk++) {
        uint64_t off = (uint64_t)chunk * MiB + 12288;
        struct lease_grant_req q = {a.seg, off, 64 * KiB, LT_CLASS_MAPPED, 0};
        struct lease_grant_result r;
        ck_assert_int_eq(lease_grant(svc, c, 1, &q, &r, NULL), 1);
        ck_assert_uint_ne(r.dev_ptr, 0);
        ck_assert(registered(r.host_addr));
        uint8_t buf[64 * KiB];
        ck_assert_int_eq(cuMemcpyDtoH(buf, (CUdeviceptr)r.dev_ptr, sizeof(buf)), CUDA_SUCCESS);
        ck_assert_mem_eq(buf, ref + off, sizeof(buf));
    }
    struct lease_grant_req span = {a.seg, 1 * MiB - 4096, 8192, LT_CLASS_MAPPED, 0};
    struct lease_grant_result r;
    ck_assert_int_eq(lease_grant(svc, c, 1, &span, &r, NULL), 0);
    ck_assert_int_eq(r.rc, -EINVAL);
    ck_assert_int_eq(lease_client_drop(svc, c, NULL), 0);
    lease_service_destroy(svc);
    lease_backend_fini(&be);
    free(ref);
}
END_TEST

/* stagingd's segments on 2 MiB hugetlb pages (its default where huge pages
 * are reserved): both classes register, and the GPU reads the daemon's bytes
 * by copy (PINNED) and through the device pointer (MAPPED). */
START_TEST(hugetlb_segments_register_and_the_gpu_reads_them)
{
    const uint64_t size = 4 * MiB;
    if (test_huge_pages_free() < (long)(2 * size / (2 * MiB))) {
        printf("hugetlb case not run: %ld free 2 MiB huge pages, 4 needed "
               "(scripts/device-proof.sh reserves them)\n",
               test_huge_pages_free());
        return;
    }
    struct lease_backend be;
    ck_assert_int_eq(ga_cuda_lease_backend_init(primary, 0, &be, NULL), 0);
    struct lease_service *svc = new_svc(&be, size, size);
    struct lease_client_id c;
    ck_assert_int_eq(lease_client_add(svc, NULL, &c, NULL), 0);
    uint8_t *ref = malloc(size);
    uint8_t *back = malloc(size);
    ck_assert_ptr_nonnull(ref);
    ck_assert_ptr_nonnull(back);
    CUdeviceptr d = 0;
    ck_assert_int_eq(cuCtxSetCurrent(primary), CUDA_SUCCESS);
    ck_assert_int_eq(cuMemAlloc(&d, size), CUDA_SUCCESS);
    for (int k = 0; k < 2; k++) {
        enum lt_class cls = k ? LT_CLASS_MAPPED : LT_CLASS_PINNED;
        int fd = memfd_create("lease-cuda-huge",
                              MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB | MFD_HUGE_2MB);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
        void *daemon = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        ck_assert_ptr_ne(daemon, MAP_FAILED);
        fill_random(ref, size, 91 + (uint64_t)k);
        memcpy(daemon, ref, size);
        ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, SEALS), 0);
        struct lt_segment_id seg = {0, 0};
        struct lt_failure why;
        ck_assert_msg(lease_segment_add(svc, c, fd, size, cls, &seg, &why) == 0, "%s", why.message);
        struct lease_stats st;
        ck_assert_int_eq(lease_service_stats(svc, &st), 0);
        ck_assert_uint_eq(st.cls[cls].huge_segments, 1);
        struct lease_grant_req q = {seg, 0, size, cls, 0};
        struct lease_grant_result r;
        ck_assert_int_eq(lease_grant(svc, c, 1, &q, &r, NULL), 1);
        ck_assert_msg(r.rc == 0, "grant: %s", r.why.message);
        ck_assert(registered(r.host_addr));
        ck_assert_int_eq(cuCtxSetCurrent(primary), CUDA_SUCCESS);
        CUdeviceptr src = cls == LT_CLASS_MAPPED ? (CUdeviceptr)r.dev_ptr : 0;
        if (cls == LT_CLASS_MAPPED) {
            ck_assert_uint_ne(r.dev_ptr, 0);
            ck_assert_int_eq(cuMemcpyDtoD(d, src, size), CUDA_SUCCESS); /* a zero-copy read */
        } else {
            ck_assert_int_eq(cuMemcpyHtoD(d, r.host_addr, size), CUDA_SUCCESS);
        }
        memset(back, 0, size);
        ck_assert_int_eq(cuMemcpyDtoH(back, d, size), CUDA_SUCCESS);
        ck_assert_msg(memcmp(back, ref, size) == 0, "%s: the GPU read other bytes",
                      lt_class_name(cls));
        struct lease_release_result rr;
        ck_assert_int_eq(lease_release(svc, c, 1, &r.lease, &rr, NULL), 1);
        ck_assert_int_eq(lease_segment_remove(svc, c, seg, NULL), 0);
        munmap(daemon, size);
    }
    ck_assert_int_eq(cuMemFree(d), CUDA_SUCCESS);
    ck_assert_int_eq(lease_client_drop(svc, c, NULL), 0);
    lease_service_destroy(svc);
    lease_backend_fini(&be);
    free(ref);
    free(back);
}
END_TEST

START_TEST(eviction_really_unregisters_and_the_next_lease_registers_again)
{
    struct lease_backend be;
    ck_assert_int_eq(ga_cuda_lease_backend_init(primary, 0, &be, NULL), 0);
    struct lease_service *svc = new_svc(&be, 4 * MiB, 0);
    struct lease_client_id c;
    struct lt_segment_id sa, sb;
    ck_assert_int_eq(lease_client_add(svc, NULL, &c, NULL), 0);
    ck_assert_int_eq(
        lease_segment_add(svc, c, make_memfd(4 * MiB, 1), 4 * MiB, LT_CLASS_PINNED, &sa, NULL), 0);
    struct lease_grant_req q = {sa, 0, 4 * MiB, LT_CLASS_PINNED, 0};
    struct lease_grant_result ra;
    ck_assert_int_eq(lease_grant(svc, c, 1, &q, &ra, NULL), 1);
    ck_assert(registered(ra.host_addr));
    struct lease_release_result rr;
    ck_assert_int_eq(lease_release(svc, c, 1, &ra.lease, &rr, NULL), 1);
    ck_assert_int_eq(
        lease_segment_add(svc, c, make_memfd(4 * MiB, 2), 4 * MiB, LT_CLASS_PINNED, &sb, NULL), 0);
    /* A was idle and the budget holds one: the driver no longer knows it. */
    ck_assert(!registered(ra.host_addr));
    ck_assert_int_eq(lease_grant(svc, c, 1, &q, &ra, NULL), 1);
    ck_assert(registered(ra.host_addr));
    /* H2D from the leased range lands the daemon's bytes on the device. */
    CUdeviceptr d;
    ck_assert_int_eq(cuCtxSetCurrent(primary), CUDA_SUCCESS);
    ck_assert_int_eq(cuMemAlloc(&d, 4 * MiB), CUDA_SUCCESS);
    ck_assert_int_eq(cuMemcpyHtoD(d, ra.host_addr, 4 * MiB), CUDA_SUCCESS);
    uint8_t *back = malloc(4 * MiB), *ref = malloc(4 * MiB);
    fill_random(ref, 4 * MiB, 1);
    ck_assert_int_eq(cuMemcpyDtoH(back, d, 4 * MiB), CUDA_SUCCESS);
    ck_assert_mem_eq(back, ref, 4 * MiB);
    cuMemFree(d);
    struct lease_stats st;
    ck_assert_int_eq(lease_service_stats(svc, &st), 0);
    ck_assert_uint_eq(st.cls[LT_CLASS_PINNED].registrations, 3);
    ck_assert_uint_eq(st.cls[LT_CLASS_PINNED].evictions, 2);
    lease_service_destroy(svc);
    lease_backend_fini(&be);
    free(back);
    free(ref);
}
END_TEST

START_TEST(driver_errors_are_named_and_mapped_to_errno)
{
    struct lease_backend be;
    ck_assert_int_eq(ga_cuda_lease_backend_init(primary, 0, &be, NULL), 0);
    struct lt_failure why;
    /* A writable page-cache mapping cannot be pinned (MEASURED.md). */
    char path[] = "/tmp/lease-cuda-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    ck_assert_int_eq(ftruncate(fd, 1 * MiB), 0);
    void *p = mmap(NULL, 1 * MiB, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    uint64_t dp;
    ck_assert_int_eq(be.register_range(be.ctx, p, 1 * MiB, LT_CLASS_PINNED, &dp, &why), -EINVAL);
    ck_assert_msg(strstr(why.message, "CUDA_ERROR_INVALID_VALUE"), "%s", why.message);
    ck_assert_uint_eq(why.code, LT_E_GPU_FAULT);
    ck_assert_int_eq(why.err, -EINVAL);
    munmap(p, 1 * MiB);
    close(fd);
    /* Registering twice, unregistering twice. */
    void *q = mmap(NULL, 1 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(q, 0x5a, 1 * MiB);
    ck_assert_int_eq(be.register_range(be.ctx, q, 1 * MiB, LT_CLASS_MAPPED, &dp, &why), 0);
    ck_assert_uint_ne(dp, 0);
    ck_assert_int_eq(be.register_range(be.ctx, q, 1 * MiB, LT_CLASS_MAPPED, &dp, &why), -EEXIST);
    ck_assert_msg(strstr(why.message, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"), "%s",
                  why.message);
    ck_assert_int_eq(be.unregister_range(be.ctx, q, 1 * MiB, LT_CLASS_MAPPED, &why), 0);
    ck_assert_int_eq(be.unregister_range(be.ctx, q, 1 * MiB, LT_CLASS_MAPPED, &why), -ENOENT);
    ck_assert_msg(strstr(why.message, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"), "%s", why.message);
    munmap(q, 1 * MiB);
    struct lease_backend bad;
    ck_assert_int_eq(ga_cuda_lease_backend_init(primary, 1000, &bad, &why), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why.message, "found 1000"));
    ck_assert_int_eq(ga_cuda_lease_backend_init(primary, 512ull << 30, &bad, NULL), -EINVAL);
    lease_backend_fini(&be);
}
END_TEST

static Suite *lease_cuda_suite(void)
{
    Suite *s = suite_create("lease_cuda");
    TCase *tc = tcase_create("cuda_backend");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, mapped_chunks_read_the_daemons_bytes_through_device_pointers);
    tcase_add_test(tc, eviction_really_unregisters_and_the_next_lease_registers_again);
    tcase_add_test(tc, driver_errors_are_named_and_mapped_to_errno);
    tcase_add_test(tc, hugetlb_segments_register_and_the_gpu_reads_them);
    suite_add_tcase(s, tc);
    return s;
}

LEASE_CHECK_MAIN(lease_cuda_suite, tu_cuda_probe)
