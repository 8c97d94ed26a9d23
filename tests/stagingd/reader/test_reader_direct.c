/* O_DIRECT reads (run as the separate ctest test_reader_direct, which skips
 * where no file system here does direct I/O): aligned reads land exact
 * through a reopened descriptor, misaligned ones are refused with the
 * expected and found alignment, and direct reads work into registered pool
 * buffers and under the reader-wide flag. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "reader_test_util.h"

#define SEED 0xD1EC7ull

static const unsigned backends[] = {0, SD_READER_FORCE_PREAD};

static int dio_align(int fd, uint32_t *off_p, uint32_t *mem_p)
{
    struct statx sx;
    memset(&sx, 0, sizeof(sx));
    if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) < 0 || !(sx.stx_mask & STATX_DIOALIGN) ||
        !sx.stx_dio_offset_align || !sx.stx_dio_mem_align)
        return -EOPNOTSUPP;
    *off_p = sx.stx_dio_offset_align;
    *mem_p = sx.stx_dio_mem_align;
    return 0;
}

const char *rt_direct_dir(void)
{
    static char found[4096];
    const char *tmp = getenv("TMPDIR");
    const char *cands[] = {tmp && *tmp ? tmp : "/tmp", "/var/tmp", "."};
    for (size_t i = 0; i < sizeof(cands) / sizeof(cands[0]); i++) {
        char path[4200];
        snprintf(path, sizeof(path), "%s/rt_direct_probe.XXXXXX", cands[i]);
        int fd = mkstemp(path);
        if (fd < 0)
            continue;
        unlink(path);
        uint32_t oa, ma;
        int ok = dio_align(fd, &oa, &ma) == 0;
        close(fd);
        if (ok && realpath(cands[i], found))
            return found;
    }
    return NULL;
}

static void direct_root_setup(void)
{
    const char *dir = rt_direct_dir();
    if (!dir || rt_root_make(dir) < 0) {
        fprintf(stderr, "test_reader: no directory for O_DIRECT files\n");
        abort();
    }
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* Aligned direct reads through a buffered descriptor (reopened with
 * O_DIRECT by the reader, the caller's left as it was) and through an
 * O_DIRECT one land byte-exact. */
START_TEST(test_direct_aligned_reads_land_exact)
{
    unsigned flags = backends[_i];
    rt_log_reset();
    size_t n = 2 * MIB + 8192;
    unsigned char *data = rt_write_file("dio", n, SEED);
    int fd = rt_open("dio", 0), dfd = rt_open("dio", O_DIRECT);
    uint32_t oa, ma;
    ck_assert_int_eq(dio_align(fd, &oa, &ma), 0);
    struct sd_reader_config c = rt_config(2, 4, 256 * KIB, flags);
    struct sd_reader *r = rt_reader_make(&c);
    int fds_before = count_fds();
    unsigned char *b1, *b2, *b3;
    ck_assert_int_eq(posix_memalign((void **)&b1, 4096, n), 0);
    ck_assert_int_eq(posix_memalign((void **)&b2, 4096, MIB), 0);
    ck_assert_int_eq(posix_memalign((void **)&b3, 4096, n), 0);
    struct rt_done d1, d2, d3;
    rt_done_init(&d1);
    rt_done_init(&d2);
    rt_done_init(&d3);
    struct sd_read_req q = {.fd = fd,
                            .len = n,
                            .buf = b1,
                            .buf_len = n,
                            .flags = SD_READ_DIRECT,
                            .path = "dio",
                            .done = rt_done_fn,
                            .arg = &d1};
    ck_assert_int_eq(sd_reader_submit(r, &q), 0);
    q.offset = 3 * (uint64_t)oa;
    q.len = MIB;
    q.buf = b2;
    q.buf_len = MIB;
    q.arg = &d2;
    ck_assert_int_eq(sd_reader_submit(r, &q), 0);
    q = (struct sd_read_req){.fd = dfd,
                             .len = n,
                             .buf = b3,
                             .buf_len = n,
                             .flags = SD_READ_DIRECT,
                             .path = "dio",
                             .done = rt_done_fn,
                             .arg = &d3};
    ck_assert_int_eq(sd_reader_submit(r, &q), 0);
    sd_reader_drain(r);
    ck_assert_int_eq(rt_result(&d1), 0);
    ck_assert_int_eq(rt_result(&d2), 0);
    ck_assert_int_eq(rt_result(&d3), 0);
    ck_assert_int_eq(memcmp(b1, data, n), 0);
    ck_assert_int_eq(memcmp(b2, data + 3 * (uint64_t)oa, MIB), 0);
    ck_assert_int_eq(memcmp(b3, data, n), 0);
    ck_assert_int_eq(fcntl(fd, F_GETFL) & O_DIRECT, 0);
    ck_assert_int_eq(count_fds(), fds_before); /* the reopened descriptors are closed */
    sd_reader_destroy(r);
    close(fd);
    close(dfd);
    free(b1);
    free(b2);
    free(b3);
    free(data);
}
END_TEST

/* Misaligned offset, length or buffer: refused at submit, saying what
 * alignment was expected and what was found; no callback, no fd left open. */
START_TEST(test_direct_misaligned_refused_with_expected_and_found)
{
    rt_log_reset();
    unsigned char *data = rt_write_file("mis", 64 * KIB, SEED + 1);
    int fd = rt_open("mis", 0);
    uint32_t oa, ma;
    ck_assert_int_eq(dio_align(fd, &oa, &ma), 0);
    struct sd_reader_config c = rt_config(1, 2, 0, 0);
    struct sd_reader *r = rt_reader_make(&c);
    int fds_before = count_fds();
    unsigned char *buf;
    ck_assert_int_eq(posix_memalign((void **)&buf, 4096, 64 * KIB), 0);
    char err[512], want[256];
    struct rt_done d;
    rt_done_init(&d);
    struct sd_read_req base = {.fd = fd,
                               .offset = oa,
                               .len = 4 * (uint64_t)oa,
                               .buf = buf,
                               .buf_len = 64 * KIB,
                               .flags = SD_READ_DIRECT,
                               .path = "mis",
                               .err = err,
                               .err_len = sizeof(err),
                               .done = rt_done_fn,
                               .arg = &d};
    snprintf(want, sizeof(want),
             "mis: O_DIRECT read refused: expected offset and length multiples of %u and a "
             "buffer address multiple of %u, found offset ",
             oa, ma);

    struct sd_read_req q = base;
    q.offset = oa + 100;
    ck_assert_int_eq(sd_reader_submit(r, &q), -EINVAL);
    ck_assert_msg(strstr(err, want), "got: %s", err);
    char found[128];
    snprintf(found, sizeof(found), "offset %u (remainder 100)", oa + 100);
    ck_assert_msg(strstr(err, found), "expected \"%s\" in: %s", found, err);

    q = base;
    q.len = oa + 1;
    ck_assert_int_eq(sd_reader_submit(r, &q), -EINVAL);
    snprintf(found, sizeof(found), "length %u (remainder 1)", oa + 1);
    ck_assert_msg(strstr(err, found), "expected \"%s\" in: %s", found, err);

    if (ma > 1) {
        q = base;
        q.buf = buf + 1;
        ck_assert_int_eq(sd_reader_submit(r, &q), -EINVAL);
        ck_assert_msg(strstr(err, "(remainder 1)"), "got: %s", err);
    }
    ck_assert(rt_log_has("O_DIRECT read refused"));
    ck_assert_int_eq(count_fds(), fds_before);
    sd_reader_drain(r);
    ck_assert_int_eq(rt_calls(&d), 0);

    /* The same request aligned goes through. */
    ck_assert_int_eq(sd_reader_submit(r, &base), 0);
    sd_reader_drain(r);
    ck_assert_int_eq(rt_result(&d), 0);
    ck_assert_int_eq(memcmp(buf, data + oa, 4 * (size_t)oa), 0);
    sd_reader_destroy(r);
    close(fd);
    free(buf);
    free(data);
}
END_TEST

/* Direct reads into a registered pool buffer use READ_FIXED and land exact;
 * with SD_READER_DIRECT every request is direct, so a misaligned one is
 * refused even without the request flag. */
START_TEST(test_direct_into_pool_and_reader_wide_flag)
{
    rt_log_reset();
    size_t n = 1 * MIB + 4 * 4096;
    unsigned char *data = rt_write_file("pooled", n, SEED + 2);
    int fd = rt_open("pooled", 0);
    struct leasec_pool *pool = rt_pool_make(4 * MIB, 4 * MIB);
    struct sd_reader_config c = rt_config(2, 4, 256 * KIB, SD_READER_DIRECT);
    c.pool = pool;
    c.fixed = SD_READER_FIXED_ON;
    struct sd_reader *r = rt_reader_make(&c);
    struct sd_reader_info info;
    sd_reader_info_get(r, &info);
    ck_assert_msg(info.fixed, "fixed buffers not registered; log:\n%s", rt_log.all);
    struct leasec_pool_buf pb;
    ck_assert_int_eq(leasec_pool_alloc(pool, LT_CLASS_PINNED, n, &pb), 0);
    struct rt_done d;
    rt_done_init(&d);
    rt_submit(r, fd, 0, n, pb.base, "pooled", NULL, 0, &d);
    sd_reader_drain(r);
    ck_assert_int_eq(rt_result(&d), 0);
    ck_assert_int_eq(memcmp(pb.base, data, n), 0);
    struct sd_reader_stats st;
    sd_reader_stats_get(r, &st);
    ck_assert_uint_eq(st.fixed_reads, st.reads);
    ck_assert_uint_eq(st.reads, 5);

    char err[512];
    struct sd_read_req q = {.fd = fd,
                            .offset = 1,
                            .len = 4096,
                            .buf = pb.base,
                            .buf_len = pb.len,
                            .path = "pooled",
                            .err = err,
                            .err_len = sizeof(err),
                            .done = rt_done_fn,
                            .arg = &d};
    ck_assert_int_eq(sd_reader_submit(r, &q), -EINVAL);
    ck_assert_msg(strstr(err, "O_DIRECT read refused"), "got: %s", err);
    sd_reader_destroy(r);
    leasec_pool_free(pool, &pb);
    leasec_pool_destroy(pool);
    close(fd);
    free(data);
}
END_TEST

TCase *rt_direct_tcase(void)
{
    TCase *tc = tcase_create("direct");
    tcase_add_unchecked_fixture(tc, direct_root_setup, rt_root_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_direct_aligned_reads_land_exact, 0, 2);
    tcase_add_test(tc, test_direct_misaligned_refused_with_expected_and_found);
    tcase_add_test(tc, test_direct_into_pool_and_reader_wide_flag);
    return tc;
}
