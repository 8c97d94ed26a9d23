/* Fault injection into the staging reader, in-process (docs/reliability.md):
 * creating the reader over a pool (an io_uring per staging thread, the
 * pool's segments registered as fixed buffers), a read of a file into a
 * pool buffer in 64 KiB chunks, destroying it. For every N the Nth io_uring
 * setup, registration or submission call fails, or the Nth allocation,
 * mmap or fcntl. Promises: the reader is created or refused; a refused
 * io_uring or registration falls back (pread, plain reads) as documented;
 * the read's callback runs exactly once, with 0 and every byte in place, or
 * with a negative errno; nothing leaks. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fi.h"
#include "fi_run.h"
#include "lease/client.h"
#include "stagingd/reader.h"

#define FILE_BYTES (256u << 10)

static struct leasec_pool *pool;
static char path[64];
static int file_fd;
static unsigned char *expect;

struct done {
    int calls, result;
    uint64_t bytes;
};

static void on_done(void *arg, int result, uint64_t bytes)
{
    struct done *d = arg;
    __atomic_add_fetch(&d->calls, 1, __ATOMIC_SEQ_CST);
    d->result = result;
    d->bytes = bytes;
}

static void quiet(void *ctx, int level, const char *subsys, const char *line)
{
    (void)ctx;
    (void)level;
    (void)subsys;
    (void)line;
}

static int run(void *ctx, char *msg, size_t len)
{
    (void)ctx;
    struct sd_reader_config cfg = {.threads = 1,
                                   .queue_depth = 4,
                                   .chunk_size = 64u << 10,
                                   .fixed = SD_READER_FIXED_ON,
                                   .pool = pool,
                                   .log = {.fn = quiet}};
    struct sd_reader *r = NULL;
    int rc = sd_reader_create(&cfg, &r);
    if (rc < 0) {
        snprintf(msg, len, "create refused: %s", strerror(-rc));
        return FI_REFUSED;
    }
    struct leasec_pool_buf buf;
    /* The test's own buffer is not the reader's path; and no ck_assert
     * while armed: Check allocates for each one that passes. */
    fi_exempt(true);
    int arc = leasec_pool_alloc(pool, LT_CLASS_PINNED, FILE_BYTES, &buf);
    fi_exempt(false);
    if (arc < 0) {
        snprintf(msg, len, "the test's pool buffer: %s", strerror(-arc));
        sd_reader_destroy(r);
        return -1;
    }
    memset(buf.base, 0, FILE_BYTES);
    struct done d = {0};
    char err[256] = "";
    struct sd_read_req req = {.fd = file_fd,
                              .len = FILE_BYTES,
                              .buf = buf.base,
                              .buf_len = FILE_BYTES,
                              .path = path,
                              .err = err,
                              .err_len = sizeof err,
                              .done = on_done,
                              .arg = &d};
    int out = FI_OK;
    rc = sd_reader_submit(r, &req);
    if (rc < 0) {
        snprintf(msg, len, "submit refused: %s", strerror(-rc));
        out = FI_REFUSED;
    } else {
        sd_reader_drain(r);
        if (d.calls != 1) {
            snprintf(msg, len, "the read's callback ran %d times", d.calls);
            out = -1;
        } else if (d.result < 0) {
            snprintf(msg, len, "read failed: %s (%s)", strerror(-d.result), err);
            out = FI_REFUSED;
        } else if (d.bytes != FILE_BYTES || memcmp(buf.base, expect, FILE_BYTES) != 0) {
            snprintf(msg, len, "the read reported success with %llu bytes, not the file's",
                     (unsigned long long)d.bytes);
            out = -1;
        }
    }
    sd_reader_destroy(r);
    fi_exempt(true);
    leasec_pool_free(pool, &buf);
    fi_exempt(false);
    return out;
}

static void setup(void)
{
    struct leasec_pool_config pc;
    ck_assert_int_eq(leasec_pool_config_default(&pc), 0);
    memset(pc.class_bytes, 0, sizeof pc.class_bytes);
    pc.class_bytes[LT_CLASS_PINNED] = 2u << 20;
    pc.segment_bytes = 2u << 20;
    pc.prefault_threads = 1;
    pc.pages = LEASEC_POOL_PAGES_SMALL;
    pc.log.fn = quiet;
    ck_assert_int_eq(leasec_pool_create(&pc, &pool), 0);
    snprintf(path, sizeof path, "/tmp/fi-reader-XXXXXX");
    file_fd = mkstemp(path);
    ck_assert_int_ge(file_fd, 0);
    expect = malloc(FILE_BYTES);
    for (size_t i = 0; i < FILE_BYTES; i++)
        expect[i] = (unsigned char)(i * 2654435761u >> 13);
    ck_assert_int_eq(pwrite(file_fd, expect, FILE_BYTES, 0), (ssize_t)FILE_BYTES);
}

static void teardown(void)
{
    close(file_fd);
    unlink(path);
    free(expect);
    leasec_pool_destroy(pool);
}

static void run_set(unsigned calls)
{
    setup();
    struct fi_path p = {.name = "staging reader", .run = run, .maps_slack = 4};
    fi_run_all(&p, calls, 0, NULL);
    teardown();
}

START_TEST(every_io_uring_setup_registration_and_submission_fails_cleanly)
{
    run_set(FI_URING);
}
END_TEST

START_TEST(every_allocation_mmap_and_fcntl_of_the_reader_fails_cleanly)
{
    run_set(FI_ALLOC);
    run_set(FI_MMAP);
    run_set(FI_FCNTL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fi_reader");
    TCase *tc = tcase_create("reader");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, every_io_uring_setup_registration_and_submission_fails_cleanly);
    tcase_add_test(tc, every_allocation_mmap_and_fcntl_of_the_reader_fails_cleanly);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
