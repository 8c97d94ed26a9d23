/* gpu/'s driver-free parts, run on every machine: CUresult -> errno, the
 * kernel module version parser and the arch refusal's words. */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cu_call.h"
#include "ga_internal.h"
#include "ring_words.h"

START_TEST(cuda_results_map_to_negative_errnos)
{
    ck_assert_int_eq(ga_cu_errno(CUDA_SUCCESS), 0);
    ck_assert_int_eq(ga_cu_errno(CUDA_ERROR_INVALID_VALUE), -EINVAL);
    ck_assert_int_eq(ga_cu_errno(CUDA_ERROR_OUT_OF_MEMORY), -ENOMEM);
    ck_assert_int_eq(ga_cu_errno(CUDA_ERROR_NO_DEVICE), -ENODEV);
    ck_assert_int_eq(ga_cu_errno(CUDA_ERROR_STUB_LIBRARY), -ENODEV);
    ck_assert_int_eq(ga_cu_errno(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH), -ENOTSUP);
    ck_assert_int_eq(ga_cu_errno(CUDA_ERROR_NO_BINARY_FOR_GPU), -ENOEXEC);
    ck_assert_int_eq(ga_cu_errno(CUDA_ERROR_INVALID_IMAGE), -ENOEXEC);
    ck_assert_int_eq(ga_cu_errno(CUDA_ERROR_JIT_COMPILATION_DISABLED), -ENOEXEC);
    ck_assert_int_eq(ga_cu_errno(CUDA_ERROR_NOT_FOUND), -ENOENT);
    ck_assert_int_eq(ga_cu_errno(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED), -EEXIST);
    ck_assert_int_eq(ga_cu_errno(CUDA_ERROR_NOT_READY), -EAGAIN);
    ck_assert_int_eq(ga_cu_errno(CUDA_ERROR_ILLEGAL_ADDRESS), -EIO);
    ck_assert_int_eq(ga_cu_errno(CUDA_ERROR_LAUNCH_FAILED), -EIO);
    ck_assert_int_eq(ga_cu_errno(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES), -ENOSPC);
    ck_assert_int_eq(ga_cu_errno(CUDA_ERROR_NOT_PERMITTED), -EPERM);
    ck_assert_int_eq(ga_cu_errno(CUDA_ERROR_UNKNOWN), -EIO);
    /* Every result is an error except success, and a negative errno. */
    for (int rc = 1; rc < 1000; rc++)
        ck_assert_int_lt(ga_cu_errno((CUresult)rc), 0);
}
END_TEST

START_TEST(kernel_module_version_is_read_from_both_module_kinds)
{
    int major = 0, minor = 0;
    const char *prop = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Release Build  "
                       "(dvs-builder@U16-I3-B14-1-1)  Thu Nov 13 2025\n"
                       "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n";
    ck_assert_int_eq(ga__kmd_version_parse(prop, &major, &minor), 0);
    ck_assert_int_eq(major, 580);
    ck_assert_int_eq(minor, 159);
    const char *open = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  575.57.08  "
                       "Release Build  (root@host)  Tue Jun 10 2025\nGCC version: gcc 13.2\n";
    ck_assert_int_eq(ga__kmd_version_parse(open, &major, &minor), 0);
    ck_assert_int_eq(major, 575);
    ck_assert_int_eq(minor, 57);
    const char *arm = "NVRM version: NVIDIA UNIX aarch64 Kernel Module  590.12  Release Build\n";
    ck_assert_int_eq(ga__kmd_version_parse(arm, &major, &minor), 0);
    ck_assert_int_eq(major, 590);
    ck_assert_int_eq(minor, 12);
}
END_TEST

START_TEST(kernel_module_garbage_is_refused_and_outputs_kept)
{
    int major = 7, minor = 8;
    ck_assert_int_eq(ga__kmd_version_parse("", &major, &minor), -EBADMSG);
    ck_assert_int_eq(ga__kmd_version_parse(NULL, &major, &minor), -EBADMSG);
    ck_assert_int_eq(ga__kmd_version_parse("GCC version: 12.3.0\n", &major, &minor), -EBADMSG);
    /* The version must be on the NVRM line, not the GCC line below it. */
    ck_assert_int_eq(ga__kmd_version_parse("NVRM version: NVIDIA x86_64 Module\n"
                                           "GCC version: gcc 12.3.0\n",
                                           &major, &minor),
                     -EBADMSG);
    ck_assert_int_eq(ga__kmd_version_parse("NVRM version: v580.1 1.. .2 580.\n", &major, &minor),
                     -EBADMSG);
    ck_assert_int_eq(major, 7);
    ck_assert_int_eq(minor, 8);
    ck_assert_int_eq(ga__kmd_version_read("/nonexistent/nvidia/version", &major, &minor), -ENOENT);

    char path[] = "/tmp/ga-kmd-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    const char *text = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.10  Release\n";
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    ck_assert_int_eq(ga__kmd_version_read(path, &major, &minor), 0);
    ck_assert_int_eq(major, 570);
    ck_assert_int_eq(minor, 86);
    unlink(path);
}
END_TEST

START_TEST(arch_refusal_says_found_required_and_how_to_build)
{
    struct ga_device_info info = {.ordinal = 0, .arch = 90};
    snprintf(info.name, sizeof(info.name), "NVIDIA H200");
    snprintf(info.pci_bus_id, sizeof(info.pci_bus_id), "0000:41:00.0");
    char msg[1024];
    int n = ga__arch_refusal_format(msg, sizeof(msg), &info, 120);
    ck_assert_int_gt(n, 0);
    ck_assert_int_lt(n, (int)sizeof(msg));
    const char *want[] = {"NVIDIA H200",
                          "0000:41:00.0",
                          "compute capability 9.0 (sm_90)",
                          "built only for sm_120 (compute capability 12.0)",
                          "no PTX",
                          "make build ARCH=90",
                          "-DLEASE_GPU_ARCH=90"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        ck_assert_msg(strstr(msg, want[i]) != NULL, "'%s' lacks '%s'", msg, want[i]);
}
END_TEST

struct capture {
    int calls;
    int level;
    char line[512];
};

static void capture_fn(void *ctx, int level, const char *subsys, const char *line)
{
    struct capture *c = ctx;
    ck_assert_str_eq(subsys, "cuda");
    c->calls++;
    c->level = level;
    snprintf(c->line, sizeof(c->line), "%s", line);
}

START_TEST(log_lines_reach_the_installed_sink)
{
    struct capture c = {0};
    struct base_log_sink sink = {.fn = capture_fn, .ctx = &c, .max_level = BASE_LOG_DEBUG};
    ga__log_sink_set(&sink);
    ga__warn("pin budget %d of %d", 3, 4);
    ck_assert_int_eq(c.calls, 1);
    ck_assert_int_eq(c.level, BASE_LOG_WARN);
    ck_assert_str_eq(c.line, "pin budget 3 of 4");
    ga__log_sink_set(NULL);
    ga__info("to stderr, not the sink");
    ck_assert_int_eq(c.calls, 1);
}
END_TEST

/* The rule the slot arithmetic must equal: chunk s is stored when its
 * slot's word v has (int64_t)(v - s) >= 0, one chunk at a time. */
static bool brute_first_unstored(const uint64_t *words, const bool *loaded, uint64_t n,
                                 uint64_t first, uint64_t nseq, uint64_t *seq_p)
{
    for (uint64_t s = first; s < first + nseq; s++) {
        const uint64_t j = s % n;
        if (!loaded[j] || (int64_t)(words[j] - s) < 0) {
            *seq_p = s;
            return true;
        }
    }
    return false;
}

static uint64_t pure_rand(uint64_t *st)
{
    *st = *st * 6364136223846793005ull + 1442695040888963407ull;
    return *st >> 17;
}

START_TEST(ring_slot_words_decide_what_each_chunk_word_would)
{
    uint64_t st = 5;
    for (int round = 0; round < 200000; round++) {
        const uint64_t n = 1 + pure_rand(&st) % 9, nseq = 1 + pure_rand(&st) % 40;
        /* Sequences from the start of a ring, and near where int64_t turns. */
        const uint64_t base = (round % 3 == 0) ? (1ull << 63) - 20 : 1 + pure_rand(&st) % 100;
        const uint64_t first = base + pure_rand(&st) % 50;
        uint64_t words[9];
        bool loaded[9];
        for (uint64_t j = 0; j < n; j++) {
            const uint64_t pick = pure_rand(&st) % 8;
            loaded[j] = pick != 0;
            words[j] = pick == 1   ? 0
                       : pick == 2 ? first + nseq + pure_rand(&st) % 20          /* ahead */
                       : pick == 3 ? first + pure_rand(&st) % 4 * n + (1ull << 63) /* far */
                                   : first - 10 + pure_rand(&st) % (nseq + 20);
        }
        uint64_t want = 0, got = 0;
        const bool want_any = brute_first_unstored(words, loaded, n, first, nseq, &want);
        bool got_any = false;
        const uint64_t end = first + nseq, slots = nseq < n ? nseq : n;
        for (uint64_t i = 0; i < slots; i++) {
            uint64_t s = 0;
            const uint64_t s0 = first + i;
            if (cx_slot_first_unstored(words[s0 % n], loaded[s0 % n], s0, end, n, &s) &&
                (!got_any || s < got)) {
                got = s;
                got_any = true;
            }
            const uint64_t last = cx_slot_last_seq(s0, end, n);
            ck_assert_uint_eq(last % n, s0 % n);
            ck_assert(last < end && last + n >= end);
        }
        ck_assert_msg(got_any == want_any && (!want_any || got == want),
                      "round %d: n %" PRIu64 " first %" PRIu64 " nseq %" PRIu64
                      ": expected %s %" PRIu64 ", found %s %" PRIu64,
                      round, n, first, nseq, want_any ? "unstored" : "none", want,
                      got_any ? "unstored" : "none", got);
    }
}
END_TEST

static Suite *ga_pure_suite(void)
{
    Suite *s = suite_create("ga_pure");
    TCase *tc = tcase_create("no_driver");
    tcase_add_test(tc, cuda_results_map_to_negative_errnos);
    tcase_add_test(tc, kernel_module_version_is_read_from_both_module_kinds);
    tcase_add_test(tc, kernel_module_garbage_is_refused_and_outputs_kept);
    tcase_add_test(tc, arch_refusal_says_found_required_and_how_to_build);
    tcase_add_test(tc, log_lines_reach_the_installed_sink);
    tcase_add_test(tc, ring_slot_words_decide_what_each_chunk_word_would);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(ga_pure_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
