/* The block checksum kernels on a real GPU against the C reference, in
 * device memory and in mapped host memory, and the hardware gate's refusals.
 * Run through gpu_gate; main itself exits 77 without a device. The suite
 * runs without fork: a CUDA process must not fork after cuInit. */
#include <check.h>
#include <cuda.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "check_main.h"
#include "gpu_test_util.h"
#include "gpu/ga.h"
#include "kernels/blockhash_ref.h"
#include "kernels/images.h"

static struct ga_device *dev;

#define CU_OK(call)                                                                                \
    do {                                                                                           \
        CUresult cu_ok_rc = (call);                                                                \
        ck_assert_msg(cu_ok_rc == CUDA_SUCCESS, "%s -> CUresult %d", #call, (int)cu_ok_rc);        \
    } while (0)

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

static void rng_fill(unsigned char *p, size_t n, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = rng_next(&s);
        memcpy(p + i, &v, n - i < 8 ? n - i : 8);
    }
}

/* Log lines captured during a test, to check what a refusal said. */
static char captured[8192];

static void capture_fn(void *ctx, int level, const char *subsys, const char *line)
{
    (void)subsys;
    (void)ctx;
    size_t used = strlen(captured);
    snprintf(captured + used, sizeof(captured) - used, "[%d] %s\n", level, line);
}

static struct base_log_sink capture_sink = {.fn = capture_fn, .max_level = BASE_LOG_DEBUG};

static void device_open(void)
{
    captured[0] = '\0';
    base_log_default_set(&capture_sink);
    struct ga_device_opts opts = {.ordinal = 0};
    int rc = ga_device_open(&opts, &dev);
    ck_assert_msg(rc == 0, "ga_device_open: %d\n%s", rc, captured);
    ck_assert_int_eq(ga_device_make_current(dev), 0);
}

static void device_close(void)
{
    ga_device_close(dev);
    dev = NULL;
    base_log_default_set(NULL);
}

/* GPU sums of @len bytes at @addr (a copy of @host) equal the reference. */
static void expect_sums_match(uint64_t addr, const unsigned char *host, size_t len, uint32_t bs,
                              const char *what)
{
    size_t n = kr_block_count(len, bs);
    uint64_t *want = calloc(n + 1, sizeof(*want));
    uint64_t *got = calloc(n + 1, sizeof(*got));
    ck_assert(want && got);
    ck_assert_int_eq(kr_block_checksums(host, len, bs, want), (long)n);
    got[n] = 0x5a5a5a5a5a5a5a5aULL; /* nothing is written past the last block */
    int rc = ga_checksum_compute(dev, addr, len, bs, got);
    ck_assert_msg(rc == (int)n, "%s, %zu bytes, block %u: rc %d, expected %zu\n%s", what, len, bs,
                  rc, n, captured);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(got[i] == want[i],
                      "%s, %zu bytes, block size %u: block %zu of %zu: GPU %#" PRIx64
                      ", reference %#" PRIx64,
                      what, len, bs, i, n, got[i], want[i]);
    ck_assert_uint_eq(got[n], 0x5a5a5a5a5a5a5a5aULL);
    free(got);
    free(want);
}

static const size_t lens[] = {
    1, 7, 8, 9, 15, 16, 17, 100, 4095, 4096, 4097, 3 * 65536 + 5, (1 << 20) + 13, (32 << 20) + 1};
static const uint32_t block_sizes[] = {8, 24, 4096, 4104, 65536, 1 << 20};
#define NLENS (sizeof(lens) / sizeof(lens[0]))
#define NBS (sizeof(block_sizes) / sizeof(block_sizes[0]))
#define MAXLEN ((32 << 20) + 1)

START_TEST(device_info_matches_the_build)
{
    const struct ga_device_info *in = ga_device_info_get(dev);
    ck_assert_uint_eq(in->arch, LEASE_GPU_ARCH);
    ck_assert_uint_eq(in->arch, kn_images[0].arch);
    ck_assert_int_ge(in->driver_version, 13000);
    ck_assert(in->name[0] != '\0');
    ck_assert_msg(strchr(in->pci_bus_id, ':') != NULL, "PCI bus id '%s'", in->pci_bus_id);
    ck_assert_msg(strncmp(in->uuid, "GPU-", 4) == 0 && strlen(in->uuid) == 40, "uuid '%s'",
                  in->uuid);
    ck_assert_uint_gt(in->total_mem, 0);
    ck_assert(in->kmd_major == -1 || in->kmd_major >= 580);
    ck_assert_msg(strstr(captured, "kernel k_block_checksum loaded") &&
                      strstr(captured, "kernel k_block_verify loaded"),
                  "%s", captured);
}
END_TEST

START_TEST(sums_match_reference_in_device_memory)
{
    unsigned char *host = malloc(MAXLEN + 8);
    ck_assert_ptr_nonnull(host);
    rng_fill(host, MAXLEN + 8, 0x1234567);
    CUdeviceptr d = 0;
    CU_OK(cuMemAlloc(&d, MAXLEN + 8));
    CU_OK(cuMemcpyHtoD(d, host, MAXLEN + 8));
    for (size_t l = 0; l < NLENS; l++)
        for (size_t b = 0; b < NBS; b++) {
            expect_sums_match(d, host, lens[l], block_sizes[b], "device memory");
            /* 8 bytes in: blocks start on odd words, off the 16-byte loads. */
            expect_sums_match(d + 8, host + 8, lens[l], block_sizes[b], "device memory + 8");
        }
    CU_OK(cuMemFree(d));
    free(host);
}
END_TEST

START_TEST(sums_match_reference_in_mapped_host_memory)
{
    void *mapped = NULL;
    CU_OK(cuMemHostAlloc(&mapped, MAXLEN + 8, CU_MEMHOSTALLOC_DEVICEMAP));
    rng_fill(mapped, MAXLEN + 8, 0x7654321);
    CUdeviceptr d = 0;
    CU_OK(cuMemHostGetDevicePointer(&d, mapped, 0));
    for (size_t l = 0; l < NLENS; l++)
        for (size_t b = 0; b < NBS; b += 2) {
            expect_sums_match(d, mapped, lens[l], block_sizes[b], "cuMemHostAlloc mapped");
            expect_sums_match(d + 8, (unsigned char *)mapped + 8, lens[l], block_sizes[b],
                              "cuMemHostAlloc mapped + 8");
        }
    CU_OK(cuMemFreeHost(mapped));
}
END_TEST

START_TEST(sums_match_reference_in_registered_host_memory)
{
    const size_t size = (8 << 20) + 4096;
    unsigned char *host = aligned_alloc(4096, size);
    ck_assert_ptr_nonnull(host);
    rng_fill(host, size, 0xabcdef);
    CU_OK(
        cuMemHostRegister(host, size, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE));
    CUdeviceptr d = 0;
    CU_OK(cuMemHostGetDevicePointer(&d, host, 0));
    expect_sums_match(d, host, size - 3, 65536, "cuMemHostRegister mapped");
    expect_sums_match(d + 16, host + 16, size - 21, 4096, "cuMemHostRegister mapped + 16");
    CU_OK(cuMemHostUnregister(host));
    free(host);
}
END_TEST

/* Verify on @d (holding @host, corrupted) against @expected. */
static void expect_verify(uint64_t d, size_t len, uint32_t bs, const uint64_t *expected,
                          int64_t want_first, uint64_t want_count, const char *what)
{
    int64_t first = 99;
    uint64_t count = 99;
    int rc = ga_checksum_verify(dev, d, len, bs, expected, &first, &count);
    ck_assert_msg(rc == 0, "%s: rc %d\n%s", what, rc, captured);
    ck_assert_msg(first == want_first && count == want_count,
                  "%s: first bad %" PRId64 " (want %" PRId64 "), %" PRIu64 " bad (want %" PRIu64
                  ")",
                  what, first, want_first, count, want_count);
}

START_TEST(verify_names_the_first_of_two_bad_blocks)
{
    const size_t len = 40 * 4096 + 77; /* 41 blocks, the last short */
    const uint32_t bs = 4096;
    void *mapped = NULL;
    CU_OK(cuMemHostAlloc(&mapped, len, CU_MEMHOSTALLOC_DEVICEMAP));
    unsigned char *h = mapped;
    rng_fill(h, len, 0x600d);
    uint64_t sums[41];
    ck_assert_int_eq(kr_block_checksums(h, len, bs, sums), 41);
    CUdeviceptr d = 0, m = 0;
    CU_OK(cuMemAlloc(&d, len));
    CU_OK(cuMemHostGetDevicePointer(&m, mapped, 0));
    CU_OK(cuMemcpyHtoD(d, h, len));
    expect_verify(d, len, bs, sums, -1, 0, "clean device memory");
    expect_verify(m, len, bs, sums, -1, 0, "clean mapped memory");

    /* Later block first, so "first" cannot just be the first one found. */
    h[33 * 4096 + 1000] ^= 0x10;
    h[7 * 4096 + 4095] ^= 0x01;
    CU_OK(cuMemcpyHtoD(d, h, len));
    expect_verify(d, len, bs, sums, 7, 2, "device memory, blocks 7 and 33 bad");
    expect_verify(m, len, bs, sums, 7, 2, "mapped memory, blocks 7 and 33 bad");
    ck_assert_int_eq(kr_block_verify(h, len, bs, sums), 7);

    /* A bad byte in the short last block's tail. */
    h[33 * 4096 + 1000] ^= 0x10;
    h[7 * 4096 + 4095] ^= 0x01;
    h[len - 1] ^= 0x80;
    CU_OK(cuMemcpyHtoD(d, h, len));
    expect_verify(d, len, bs, sums, 40, 1, "device memory, last byte bad");
    expect_verify(m, len, bs, sums, 40, 1, "mapped memory, last byte bad");
    CU_OK(cuMemFree(d));
    CU_OK(cuMemFreeHost(mapped));
}
END_TEST

START_TEST(bad_arguments_are_refused_before_any_launch)
{
    CUdeviceptr d = 0;
    CU_OK(cuMemAlloc(&d, 4096));
    uint64_t sums[64];
    int64_t first = 5;
    uint64_t count = 5;
    ck_assert_int_eq(ga_checksum_compute(dev, d, 4096, 0, sums), -EINVAL);
    ck_assert_int_eq(ga_checksum_compute(dev, d, 4096, 12, sums), -EINVAL);
    ck_assert_int_eq(ga_checksum_compute(dev, d + 4, 4000, 64, sums), -EINVAL);
    ck_assert_int_eq(ga_checksum_compute(dev, 0, 4096, 64, sums), -EINVAL);
    ck_assert_int_eq(ga_checksum_compute(dev, d, 4096, 64, NULL), -EINVAL);
    ck_assert_int_eq(ga_checksum_compute(NULL, d, 4096, 64, sums), -EINVAL);
    ck_assert_int_eq(ga_checksum_verify(dev, d, 4096, 12, sums, &first, &count), -EINVAL);
    ck_assert_int_eq(ga_checksum_verify(dev, d, 4096, 64, sums, NULL, &count), -EINVAL);
    ck_assert_int_eq(first, 5);
    ck_assert_int_eq(count, 5);
    ck_assert_msg(strstr(captured, "non-zero multiple of 8, found 12"), "%s", captured);
    /* Nothing to hash is no launch and no blocks. */
    ck_assert_int_eq(ga_checksum_compute(dev, d, 0, 64, sums), 0);
    ck_assert_int_eq(ga_checksum_verify(dev, d, 0, 64, sums, &first, &count), 0);
    ck_assert_int_eq(first, -1);
    ck_assert_uint_eq(count, 0);
    CU_OK(cuMemFree(d));
}
END_TEST

START_TEST(second_open_of_the_device_is_refused)
{
    struct ga_device *again = NULL;
    struct ga_device_opts opts = {.ordinal = 0};
    ck_assert_int_eq(ga_device_open(&opts, &again), -EBUSY);
    ck_assert_ptr_null(again);
    ck_assert_msg(strstr(captured, "already open in this process"), "%s", captured);
}
END_TEST

/* Opens with @opts and expects @want_rc, the log holding @text. */
static void expect_open_refused(const struct ga_device_opts *opts, int want_rc, const char *text)
{
    captured[0] = '\0';
    base_log_default_set(&capture_sink);
    struct ga_device *d = NULL;
    int rc = ga_device_open(opts, &d);
    base_log_default_set(NULL);
    if (rc == 0)
        ga_device_close(d);
    ck_assert_msg(rc == want_rc, "rc %d, expected %d\n%s", rc, want_rc, captured);
    ck_assert_ptr_null(d);
    ck_assert_msg(strstr(captured, text) != NULL, "log lacks '%s':\n%s", text, captured);
}

START_TEST(gpu_of_another_arch_is_refused_with_how_to_build)
{
    unsigned int other = LEASE_GPU_ARCH == 90 ? 120 : 90;
    struct ga_device_opts opts = {.ordinal = 0, .required_arch = other};
    char found[64], required[64], how[64];
    snprintf(found, sizeof(found), "(sm_%u), but", (unsigned)LEASE_GPU_ARCH);
    snprintf(required, sizeof(required), "built only for sm_%u", other);
    snprintf(how, sizeof(how), "-DLEASE_GPU_ARCH=%u", (unsigned)LEASE_GPU_ARCH);
    expect_open_refused(&opts, -ENOEXEC, found);
    ck_assert_msg(strstr(captured, required) && strstr(captured, how), "%s", captured);
    /* The refusal left nothing open: a normal open works. */
    struct ga_device *d = NULL;
    struct ga_device_opts ok = {.ordinal = 0};
    ck_assert_int_eq(ga_device_open(&ok, &d), 0);
    ga_device_close(d);
}
END_TEST

START_TEST(corrupt_or_incomplete_images_fail_open)
{
    struct kn_image img = kn_images[0];
    struct ga_device_opts opts = {.ordinal = 0, .images = &img, .image_count = 1};

    img.size = img.size / 2;
    expect_open_refused(&opts, -ENOEXEC, "refused before loading: truncated ELF");

    img = kn_images[0];
    static const char *const missing[] = {"k_block_checksum", "k_block_absent", NULL};
    img.kernels = missing;
    img.kernel_count = 2;
    expect_open_refused(&opts, -ENOEXEC, "kernel 'k_block_absent' not found");

    /* An image that loads but lacks the kernels the agent needs. */
    img = kn_images[0];
    img.name = "renamed";
    expect_open_refused(&opts, -ENOEXEC, "the images lack image 'checksum'");

    struct ga_device_opts bad = {.ordinal = 63};
    expect_open_refused(&bad, -ENODEV, "CUDA device 63 requested");
}
END_TEST

static Suite *ga_checksum_suite(void)
{
    Suite *s = suite_create("ga_checksum");
    TCase *open = tcase_create("device_open");
    tcase_add_checked_fixture(open, device_open, device_close);
    tcase_add_test(open, device_info_matches_the_build);
    tcase_add_test(open, sums_match_reference_in_device_memory);
    tcase_add_test(open, sums_match_reference_in_mapped_host_memory);
    tcase_add_test(open, sums_match_reference_in_registered_host_memory);
    tcase_add_test(open, verify_names_the_first_of_two_bad_blocks);
    tcase_add_test(open, bad_arguments_are_refused_before_any_launch);
    tcase_add_test(open, second_open_of_the_device_is_refused);
    tcase_set_timeout(open, 240);
    suite_add_tcase(s, open);
    TCase *gate = tcase_create("gate");
    tcase_add_test(gate, gpu_of_another_arch_is_refused_with_how_to_build);
    tcase_add_test(gate, corrupt_or_incomplete_images_fail_open);
    tcase_set_timeout(gate, 120);
    suite_add_tcase(s, gate);
    return s;
}

LEASE_CHECK_MAIN(ga_checksum_suite, tu_cuda_probe)
