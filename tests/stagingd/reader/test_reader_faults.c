/* The staging reader's failure paths: files truncated before and while being
 * read, short reads, -EAGAIN retried (and given up after the bound), I/O
 * errors reported per request with the thread surviving, and malformed
 * requests refused without a callback. Each runs on io_uring and on pread. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "reader_internal.h"
#include "reader_test_util.h"

#define SEED 0xFA17ull

static const unsigned backends[] = {0, SD_READER_FORCE_PREAD};

static void expect_contains(const char *text, const char *needle)
{
    ck_assert_msg(strstr(text, needle), "expected \"%s\" in \"%s\"", needle, text);
}

/* A file cut short before the read: -ENODATA naming where it ends and how
 * many bytes are missing; what exists landed. */
START_TEST(test_truncated_before_read_reports_offset_and_missing_bytes)
{
    unsigned flags = backends[_i];
    rt_log_reset();
    size_t n = 3 * MIB + 5, cut = 1 * MIB + 100;
    unsigned char *data = rt_write_file("trunc", n, SEED);
    ck_assert_int_eq(truncate(rt_path("trunc"), (off_t)cut), 0);
    int fd = rt_open("trunc", 0);
    struct sd_reader_config c = rt_config(2, 4, 0, flags);
    struct sd_reader *r = rt_reader_make(&c);
    unsigned char *buf = calloc(1, n);
    char err[512] = "";
    struct rt_done d;
    rt_done_init(&d);
    rt_submit(r, fd, 0, n, buf, "shard-trunc.sds", err, sizeof(err), &d);
    sd_reader_drain(r);
    ck_assert_int_eq(rt_calls(&d), 1);
    ck_assert_int_eq(rt_result(&d), -ENODATA);
    ck_assert_uint_eq(rt_bytes(&d), cut);
    ck_assert_int_eq(memcmp(buf, data, cut), 0);
    char want[256];
    snprintf(want, sizeof(want),
             "shard-trunc.sds: file ends at offset %zu: expected %zu bytes from offset 0, %zu "
             "bytes missing",
             cut, n, n - cut);
    expect_contains(err, want);
    ck_assert(rt_log_has(want));
    sd_reader_destroy(r);
    close(fd);
    free(buf);
    free(data);
}
END_TEST

struct cut_ctx {
    const char *path;
    uint64_t at, to;
    int done;
};

static void cut_before_read(void *ctx, int fd, uint64_t off, uint32_t len)
{
    struct cut_ctx *c = ctx;
    (void)fd;
    (void)len;
    if (!c->done && off >= c->at) {
        c->done = 1;
        ck_assert_int_eq(truncate(c->path, (off_t)c->to), 0);
    }
}

/* Truncated between two chunks of one request: the chunk that straddles the
 * new end comes back short, is resumed, meets EOF; the rest of the request is
 * not read; the error names the offset. */
START_TEST(test_truncated_while_reading_reports_offset_and_stops)
{
    unsigned flags = backends[_i];
    rt_log_reset();
    size_t n = 6 * MIB;
    unsigned char *data = rt_write_file("cut", n, SEED + 1);
    int fd = rt_open("cut", 0);
    char path[4096];
    snprintf(path, sizeof(path), "%s", rt_path("cut"));
    struct cut_ctx cc = {.path = path, .at = 2 * MIB, .to = 2 * MIB + 300};
    sd_reader__hooks = (struct sd_reader__hooks){.before_read = cut_before_read, .ctx = &cc};
    struct sd_reader_config c = rt_config(1, 1, 1 * MIB, flags);
    struct sd_reader *r = rt_reader_make(&c);
    unsigned char *buf = calloc(1, n);
    char err[512] = "";
    struct rt_done d;
    rt_done_init(&d);
    rt_submit(r, fd, 0, n, buf, "cut", err, sizeof(err), &d);
    sd_reader_drain(r);
    ck_assert_int_eq(cc.done, 1);
    ck_assert_int_eq(rt_result(&d), -ENODATA);
    ck_assert_uint_eq(rt_bytes(&d), cc.to);
    ck_assert_int_eq(memcmp(buf, data, cc.to), 0);
    char want[200];
    snprintf(want, sizeof(want),
             "file ends at offset %llu: expected %zu bytes from offset 0, %llu "
             "bytes missing",
             (unsigned long long)cc.to, n, (unsigned long long)(n - cc.to));
    expect_contains(err, want);
    struct sd_reader_stats st;
    sd_reader_stats_get(r, &st);
    ck_assert_uint_eq(st.short_reads, 1);
    ck_assert_uint_eq(st.reads, 4); /* chunks 0, 1, 2, the resumed rest of 2; not 3..5 */
    ck_assert_uint_eq(st.failed, 1);
    sd_reader_destroy(r);
    sd_reader__hooks = (struct sd_reader__hooks){0};
    close(fd);
    free(buf);
    free(data);
}
END_TEST

static atomic_uint hook_calls;

static int every_other_eagain(void *ctx, uint64_t off, uint32_t len, int res)
{
    (void)ctx;
    (void)off;
    (void)len;
    return atomic_fetch_add(&hook_calls, 1) % 2 == 0 ? -EAGAIN : res;
}

/* -EAGAIN on every other read is retried; everything lands. */
START_TEST(test_eagain_is_retried_until_the_read_succeeds)
{
    unsigned flags = backends[_i];
    rt_log_reset();
    size_t n = 2 * MIB + 999;
    unsigned char *data = rt_write_file("again", n, SEED + 2);
    int fd = rt_open("again", 0);
    atomic_store(&hook_calls, 0);
    sd_reader__hooks = (struct sd_reader__hooks){.on_result = every_other_eagain};
    struct sd_reader_config c = rt_config(2, 4, 256 * KIB, flags);
    struct sd_reader *r = rt_reader_make(&c);
    unsigned char *buf = malloc(n);
    struct rt_done d;
    rt_done_init(&d);
    rt_submit(r, fd, 0, n, buf, "again", NULL, 0, &d);
    sd_reader_drain(r);
    ck_assert_int_eq(rt_result(&d), 0);
    ck_assert_int_eq(memcmp(buf, data, n), 0);
    struct sd_reader_stats st;
    sd_reader_stats_get(r, &st);
    unsigned chunks = (unsigned)((n + 256 * KIB - 1) / (256 * KIB));
    ck_assert_uint_ge(st.retries, chunks / 2);
    ck_assert_uint_eq(st.reads, chunks + st.retries);
    sd_reader_destroy(r);
    sd_reader__hooks = (struct sd_reader__hooks){0};
    close(fd);
    free(buf);
    free(data);
}
END_TEST

struct fail_at {
    uint64_t off;
    int err;
};

static int fail_at_offset(void *ctx, uint64_t off, uint32_t len, int res)
{
    const struct fail_at *f = ctx;
    (void)len;
    return off == f->off ? f->err : res;
}

/* A chunk that keeps answering -EAGAIN fails after max_retries with a
 * message saying so; the staging thread lives on and serves the next one. */
START_TEST(test_eagain_forever_fails_after_bounded_retries)
{
    unsigned flags = backends[_i];
    rt_log_reset();
    size_t n = 3 * MIB;
    unsigned char *data = rt_write_file("stuck", n, SEED + 3);
    int fd = rt_open("stuck", 0);
    struct fail_at fa = {.off = 1 * MIB, .err = -EAGAIN};
    sd_reader__hooks = (struct sd_reader__hooks){.on_result = fail_at_offset, .ctx = &fa};
    struct sd_reader_config c = rt_config(1, 4, 1 * MIB, flags);
    c.max_retries = 3;
    struct sd_reader *r = rt_reader_make(&c);
    unsigned char *buf = malloc(n);
    char err[512] = "";
    struct rt_done d;
    rt_done_init(&d);
    rt_submit(r, fd, 0, n, buf, "stuck", err, sizeof(err), &d);
    sd_reader_drain(r);
    ck_assert_int_eq(rt_result(&d), -EAGAIN);
    expect_contains(err, "stuck: read of 1048576 bytes at offset 1048576 failed after 3 retries");
    struct sd_reader_stats st;
    sd_reader_stats_get(r, &st);
    ck_assert_uint_eq(st.retries, 3);

    fa.off = UINT64_MAX; /* the thread is idle (drained): nothing reads the hook now */
    rt_done_init(&d);
    memset(buf, 0, n);
    rt_submit(r, fd, 0, n, buf, "stuck", NULL, 0, &d);
    sd_reader_drain(r);
    ck_assert_int_eq(rt_result(&d), 0);
    ck_assert_int_eq(memcmp(buf, data, n), 0);
    sd_reader_destroy(r);
    sd_reader__hooks = (struct sd_reader__hooks){0};
    close(fd);
    free(buf);
    free(data);
}
END_TEST

/* An I/O error on one chunk fails that request only, naming the offset;
 * the other chunks land and other requests complete. */
START_TEST(test_io_error_fails_only_its_request)
{
    unsigned flags = backends[_i];
    rt_log_reset();
    size_t n = 4 * MIB;
    unsigned char *data = rt_write_file("eio", n, SEED + 4);
    int fd = rt_open("eio", 0);
    struct fail_at fa = {.off = 2 * MIB, .err = -EIO};
    sd_reader__hooks = (struct sd_reader__hooks){.on_result = fail_at_offset, .ctx = &fa};
    struct sd_reader_config c = rt_config(2, 8, 1 * MIB, flags);
    struct sd_reader *r = rt_reader_make(&c);
    unsigned char *bad = malloc(n), *good = malloc(2 * MIB);
    char err[512] = "";
    struct rt_done d_bad, d_good;
    rt_done_init(&d_bad);
    rt_done_init(&d_good);
    rt_submit(r, fd, 0, n, bad, "eio", err, sizeof(err), &d_bad);
    rt_submit(r, fd, 0, 2 * MIB, good, "eio", NULL, 0, &d_good); /* never touches 2 MiB */
    sd_reader_drain(r);
    ck_assert_int_eq(rt_result(&d_bad), -EIO);
    expect_contains(err, "eio: read of 1048576 bytes at offset 2097152 failed: ");
    expect_contains(err, strerror(EIO));
    ck_assert_uint_le(rt_bytes(&d_bad), n - 1 * MIB);
    ck_assert_int_eq(rt_result(&d_good), 0);
    ck_assert_int_eq(memcmp(good, data, 2 * MIB), 0);
    sd_reader_destroy(r);
    sd_reader__hooks = (struct sd_reader__hooks){0};
    close(fd);
    free(bad);
    free(good);
    free(data);
}
END_TEST

/* A real error from the kernel, no hook: reading a directory. */
START_TEST(test_directory_fd_reports_eisdir)
{
    unsigned flags = backends[_i];
    rt_log_reset();
    int fd = open(rt_path("."), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    struct sd_reader_config c = rt_config(1, 2, 0, flags);
    struct sd_reader *r = rt_reader_make(&c);
    char buf[4096], err[512] = "";
    struct rt_done d;
    rt_done_init(&d);
    rt_submit(r, fd, 0, sizeof(buf), buf, "a-directory", err, sizeof(err), &d);
    sd_reader_drain(r);
    ck_assert_int_eq(rt_result(&d), -EISDIR);
    ck_assert_uint_eq(rt_bytes(&d), 0);
    expect_contains(err, "a-directory: read of 4096 bytes at offset 0 failed: ");
    expect_contains(err, strerror(EISDIR));
    sd_reader_destroy(r);
    close(fd);
}
END_TEST

static int third_of_it(void *ctx, uint64_t off, uint32_t len, int res)
{
    (void)ctx;
    (void)off;
    (void)len;
    return res > 3 ? res / 3 : res;
}

/* Every read reported as a third of what was asked: the rest is read again
 * until the chunk is whole. */
START_TEST(test_short_reads_are_resumed)
{
    unsigned flags = backends[_i];
    rt_log_reset();
    size_t n = 1 * MIB + 12345;
    unsigned char *data = rt_write_file("short", n, SEED + 5);
    int fd = rt_open("short", 0);
    sd_reader__hooks = (struct sd_reader__hooks){.on_result = third_of_it};
    struct sd_reader_config c = rt_config(2, 4, 128 * KIB, flags);
    struct sd_reader *r = rt_reader_make(&c);
    unsigned char *buf = malloc(n);
    struct rt_done d;
    rt_done_init(&d);
    rt_submit(r, fd, 0, n, buf, "short", NULL, 0, &d);
    sd_reader_drain(r);
    ck_assert_int_eq(rt_result(&d), 0);
    ck_assert_uint_eq(rt_bytes(&d), n);
    ck_assert_int_eq(memcmp(buf, data, n), 0);
    struct sd_reader_stats st;
    sd_reader_stats_get(r, &st);
    ck_assert_uint_gt(st.short_reads, 9 * 2);
    ck_assert_uint_eq(st.reads, st.short_reads + 9); /* 9 chunks, each finished once */
    sd_reader_destroy(r);
    sd_reader__hooks = (struct sd_reader__hooks){0};
    close(fd);
    free(buf);
    free(data);
}
END_TEST

/* Malformed requests are refused at submit with the expected and found
 * values, and their callback never runs. */
START_TEST(test_malformed_requests_refused_without_callback)
{
    rt_log_reset();
    struct sd_reader_config c = rt_config(1, 2, 0, 0);
    struct sd_reader *r = rt_reader_make(&c);
    char buf[100], err[512];
    struct rt_done d;
    rt_done_init(&d);
    struct sd_read_req base = {.fd = 0,
                               .len = 100,
                               .buf = buf,
                               .buf_len = 100,
                               .path = "p",
                               .err = err,
                               .err_len = sizeof(err),
                               .done = rt_done_fn,
                               .arg = &d};
    struct sd_read_req q = base;
    q.buf_len = 99;
    ck_assert_int_eq(sd_reader_submit(r, &q), -EINVAL);
    expect_contains(err, "p: submit: expected a buffer of at least 100 bytes, found 99");
    q = base;
    q.done = NULL;
    ck_assert_int_eq(sd_reader_submit(r, &q), -EINVAL);
    expect_contains(err, "expected a completion callback");
    q = base;
    q.fd = -1;
    ck_assert_int_eq(sd_reader_submit(r, &q), -EINVAL);
    expect_contains(err, "expected a file descriptor, found -1");
    q = base;
    q.offset = UINT64_MAX - 10;
    ck_assert_int_eq(sd_reader_submit(r, &q), -EINVAL);
    expect_contains(err, "exceeds the largest file offset");
    q = base;
    q.buf = NULL;
    ck_assert_int_eq(sd_reader_submit(r, &q), -EINVAL);
    q = base;
    q.flags = 0x10;
    ck_assert_int_eq(sd_reader_submit(r, &q), -EINVAL);
    expect_contains(err, "unknown flags 0x10");
    ck_assert_int_eq(sd_reader_submit(r, NULL), -EINVAL);
    sd_reader_drain(r);
    ck_assert_int_eq(rt_calls(&d), 0);
    struct sd_reader_stats st;
    sd_reader_stats_get(r, &st);
    ck_assert_uint_eq(st.requests, 0);
    sd_reader_destroy(r);
}
END_TEST

TCase *rt_fault_tcase(void)
{
    TCase *tc = tcase_create("faults");
    tcase_add_unchecked_fixture(tc, rt_root_setup, rt_root_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_truncated_before_read_reports_offset_and_missing_bytes, 0, 2);
    tcase_add_loop_test(tc, test_truncated_while_reading_reports_offset_and_stops, 0, 2);
    tcase_add_loop_test(tc, test_eagain_is_retried_until_the_read_succeeds, 0, 2);
    tcase_add_loop_test(tc, test_eagain_forever_fails_after_bounded_retries, 0, 2);
    tcase_add_loop_test(tc, test_io_error_fails_only_its_request, 0, 2);
    tcase_add_loop_test(tc, test_directory_fd_reports_eisdir, 0, 2);
    tcase_add_loop_test(tc, test_short_reads_are_resumed, 0, 2);
    tcase_add_test(tc, test_malformed_requests_refused_without_callback);
    return tc;
}
