/* Shard files: layout, round trips, and every way a file is refused. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kernels/blockhash_ref.h"
#include "shard_test_util.h"
#include "stagingd/shard.h"

#define ASSERT_HAS(msg, part)                                                                      \
    ck_assert_msg(strstr((msg), (part)), "expected '%s' in: %s", (part), (msg))

static char err[SD_ERR_LEN];

/* Opens @path expecting @want; the message must name the file. */
static const char *open_refused(const char *path, int want)
{
    struct sd_shard *s = NULL;
    err[0] = '\0';
    int rc = sd_shard_open(path, err, sizeof(err), &s);
    ck_assert_msg(rc == want, "open %s: expected %d, found %d (%s)", path, want, rc, err);
    ck_assert_ptr_null(s);
    ASSERT_HAS(err, path);
    return err;
}

static struct sd_shard *open_ok(const char *path)
{
    struct sd_shard *s = NULL;
    int rc = sd_shard_open(path, err, sizeof(err), &s);
    ck_assert_msg(rc == 0, "open %s: %d %s", path, rc, err);
    return s;
}

/* A small f32 shard of 3 blocks with a short last one, in a new dir. */
static const char *small_shard(uint64_t seed, unsigned char **payload, uint64_t *len)
{
    static char path[8192];
    snprintf(path, sizeof(path), "%s", st_join(st_dir_new(), "s.sds"));
    /* 11 x 4 = 44-byte records; 250 records = 11000 bytes = 2 x 4096 + 2808 */
    unsigned char *p = st_write_shard(path, SD_RECORD_F32, 11, 250, 4096, seed, len);
    if (payload)
        *payload = p;
    else
        free(p);
    return path;
}

START_TEST(header_init_derives_sizes_offsets_and_counts)
{
    struct sd_shard_header h;
    ck_assert_int_eq(sd_shard_header_init(SD_RECORD_F16, 3, 1001, 4096, err, sizeof(err), &h), 0);
    ck_assert_uint_eq(h.payload_len, 1001 * 3 * 2);
    ck_assert_uint_eq(h.block_count, 2);
    ck_assert_uint_eq(h.payload_offset, 4096);
    ck_assert_uint_eq(h.table_offset, 4096 + 8192);
    ck_assert_uint_eq(h.file_size, 4096 + 8192 + 16);
    ck_assert_int_eq(memcmp(h.magic, "SDSHARD", 8), 0);
    sd_shard_header_seal(&h);
    ck_assert_int_eq(sd_shard_header_validate(&h, "x", err, sizeof(err)), 0);
    /* Exactly one block when the payload fills it. */
    ck_assert_int_eq(sd_shard_header_init(SD_RECORD_F32, 256, 4, 4096, err, sizeof(err), &h), 0);
    ck_assert_uint_eq(h.block_count, 1);
    ck_assert_uint_eq(h.table_offset, 8192);
    ck_assert_int_eq(sd_shard_header_init(SD_RECORD_F32, 0, 4, 4096, err, sizeof(err), &h),
                     -EINVAL);
    ck_assert_int_eq(sd_shard_header_init(SD_RECORD_F32, 4, 0, 4096, err, sizeof(err), &h),
                     -EINVAL);
    ck_assert_int_eq(sd_shard_header_init(9, 4, 4, 4096, err, sizeof(err), &h), -EINVAL);
    ck_assert_int_eq(sd_shard_header_init(SD_RECORD_F32, 4, 4, 4100, err, sizeof(err), &h),
                     -EINVAL);
    ck_assert_int_eq(
        sd_shard_header_init(SD_RECORD_F32, 65536, UINT64_MAX / 1000, 4096, err, sizeof(err), &h),
        -EOVERFLOW);
}
END_TEST

/* Write with random appends, read back, compare bytes and table. */
static void round_trip(uint32_t type, uint32_t dim, uint64_t records, uint32_t bs, uint64_t seed)
{
    const char *path = st_join(st_dir_new(), "rt.sds");
    char saved[8192];
    snprintf(saved, sizeof(saved), "%s", path);
    uint64_t len;
    unsigned char *payload = st_write_shard(saved, type, dim, records, bs, seed, &len);
    ck_assert_msg(len % bs != 0, "the case must end in a short block");

    struct sd_shard *s = open_ok(saved);
    const struct sd_shard_header *h = sd_shard_header_get(s);
    ck_assert_uint_eq(h->record_type, type);
    ck_assert_uint_eq(h->dim, dim);
    ck_assert_uint_eq(h->record_count, records);
    ck_assert_uint_eq(h->block_size, bs);
    ck_assert_uint_eq(sd_shard_payload_len(s), len);
    ck_assert_uint_eq(sd_shard_payload_offset(s) % 4096, 0);
    ck_assert_str_eq(sd_shard_path(s), saved);
    ck_assert_int_ge(sd_shard_fd(s), 0);

    size_t flen;
    unsigned char *file = st_read_file(saved, &flen);
    ck_assert_uint_eq(flen, h->file_size);
    ck_assert_int_eq(memcmp(file + sd_shard_payload_offset(s), payload, len), 0);
    for (uint64_t i = sd_shard_payload_offset(s) + len; i < h->table_offset; i++)
        ck_assert_uint_eq(file[i], 0);

    const uint64_t *table;
    uint64_t count;
    ck_assert_int_eq(sd_shard_table(s, err, sizeof(err), &table, &count), 0);
    ck_assert_uint_eq(count, (len + bs - 1) / bs);
    uint64_t *want = malloc(count * 8);
    ck_assert_int_eq(kr_block_checksums(payload, len, bs, want), (long)count);
    ck_assert_int_eq(memcmp(table, want, count * 8), 0);

    ck_assert_int_eq(sd_shard_verify(s, err, sizeof(err), NULL), 0);
    ck_assert_int_eq(sd_shard_verify_mem(s, payload, 0, len, err, sizeof(err), NULL), 0);
    /* The short last block alone, and a middle range of whole blocks. */
    uint64_t last = (count - 1) * bs;
    ck_assert_int_eq(
        sd_shard_verify_mem(s, payload + last, last, len - last, err, sizeof(err), NULL), 0);
    if (count > 2)
        ck_assert_int_eq(sd_shard_verify_mem(s, payload + bs, bs, bs, err, sizeof(err), NULL), 0);
    ck_assert_int_eq(sd_shard_verify_mem(s, payload + 8, 8, bs, err, sizeof(err), NULL), -EINVAL);
    ck_assert_int_eq(sd_shard_verify_mem(s, payload, 0, bs + 1, err, sizeof(err), NULL), -EINVAL);
    ck_assert_int_eq(sd_shard_verify_mem(s, payload, 0, len + 1, err, sizeof(err), NULL), -EINVAL);

    /* The same bytes in memory with one bit flipped: the block is named. */
    struct sd_shard_fault fault;
    payload[len - 1] ^= 0x10;
    ck_assert_int_eq(sd_shard_verify_mem(s, payload, 0, len, err, sizeof(err), &fault), -EBADMSG);
    ck_assert_uint_eq(fault.block, count - 1);
    ck_assert_int_eq(fault.table_corrupt, 0);

    sd_shard_close(s);
    free(want);
    free(file);
    free(payload);
}

START_TEST(f32_round_trip_with_short_last_block)
{
    round_trip(SD_RECORD_F32, 7, 1237, 4096, 0x1234);
    round_trip(SD_RECORD_F32, 128, 2049, 8192, 0x99);
}
END_TEST

START_TEST(f16_round_trip_with_short_last_block)
{
    round_trip(SD_RECORD_F16, 5, 4001, 4096, 0x777);
    round_trip(SD_RECORD_F16, 3, 999, 4104, 0x31337); /* a block size not a multiple of 4096 */
}
END_TEST

START_TEST(writer_refuses_too_many_or_too_few_bytes)
{
    const char *dir = st_dir_new();
    char path[8192], tmp[8300];
    snprintf(path, sizeof(path), "%s", st_join(dir, "w.sds"));
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    unsigned char data[64] = {1, 2, 3};
    struct sd_shard_writer *w = NULL;
    ck_assert_int_eq(sd_shard_writer_create(path, SD_RECORD_F32, 0, 3, 4096, err, sizeof(err), &w),
                     -EINVAL);
    ck_assert_ptr_null(w);
    ASSERT_HAS(err, path);
    ASSERT_HAS(err, "dim: expected 1..65536, found 0");
    ck_assert_int_eq(sd_shard_writer_create(path, SD_RECORD_F32, 4, 3, 4096, err, sizeof(err), &w),
                     0);
    ck_assert_int_eq(sd_shard_writer_append(w, data, 49, err, sizeof(err)), -EOVERFLOW);
    ck_assert_int_eq(sd_shard_writer_append(w, data, 47, err, sizeof(err)), 0);
    ck_assert_int_eq(sd_shard_writer_finish(w, 0, err, sizeof(err), NULL), -EINVAL);
    ASSERT_HAS(err, "48 bytes, found 47");
    struct stat st;
    ck_assert_int_eq(stat(path, &st), -1);
    ck_assert_int_eq(stat(tmp, &st), -1);

    ck_assert_int_eq(sd_shard_writer_create(path, SD_RECORD_F32, 4, 3, 4096, err, sizeof(err), &w),
                     0);
    ck_assert_int_eq(stat(tmp, &st), 0);
    sd_shard_writer_abort(w);
    ck_assert_int_eq(stat(tmp, &st), -1);
}
END_TEST

START_TEST(truncated_files_are_refused_at_every_length)
{
    uint64_t len;
    const char *path = small_shard(5, NULL, &len);
    char p[8192];
    snprintf(p, sizeof(p), "%s", path);
    struct sd_shard_header h;
    st_header_read(p, &h);
    size_t flen;
    unsigned char *whole = st_read_file(p, &flen);
    const uint64_t cuts[] = {0,
                             1,
                             64,
                             127,
                             128,
                             129,
                             4095,
                             4096,
                             4097,
                             4096 + 5000,
                             h.table_offset - 1,
                             h.table_offset,
                             h.table_offset + 7,
                             h.file_size - 1};
    for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
        st_write_file(p, whole, cuts[i]);
        const char *m = open_refused(p, -EIO);
        ASSERT_HAS(m, "truncated");
    }
    /* One byte too many is refused as well. */
    unsigned char *more = malloc(flen + 1);
    memcpy(more, whole, flen);
    more[flen] = 0;
    st_write_file(p, more, flen + 1);
    ASSERT_HAS(open_refused(p, -EIO), "trailing");
    st_write_file(p, whole, flen);
    sd_shard_close(open_ok(p));
    free(more);
    free(whole);
}
END_TEST

START_TEST(bad_magic_is_refused)
{
    uint64_t len;
    const char *p = small_shard(6, NULL, &len);
    st_patch(p, 2, "X", 1);
    const char *m = open_refused(p, -EPROTO);
    ASSERT_HAS(m, "magic expected 53 44 53 48 41 52 44 00");
    ASSERT_HAS(m, "found 53 44 58");
}
END_TEST

START_TEST(wrong_version_is_refused_even_with_a_valid_checksum)
{
    uint64_t len;
    const char *p = small_shard(7, NULL, &len);
    struct sd_shard_header h;
    st_header_read(p, &h);
    h.version = 2;
    st_header_write(p, &h, 1);
    ASSERT_HAS(open_refused(p, -EPROTO), "version: expected 1, found 2");
}
END_TEST

START_TEST(changed_header_field_fails_the_header_checksum)
{
    static const size_t offsets[] = {16, 20, 24, 32, 40, 48, 56, 64, 72, 80, 100, 120};
    uint64_t len;
    const char *p = small_shard(8, NULL, &len);
    for (size_t i = 0; i < sizeof(offsets) / sizeof(offsets[0]); i++) {
        st_flip_bit(p, offsets[i], (unsigned)i % 8);
        ASSERT_HAS(open_refused(p, -EBADMSG), "header checksum mismatch");
        st_flip_bit(p, offsets[i], (unsigned)i % 8);
        sd_shard_close(open_ok(p));
    }
}
END_TEST

/* Rewrites one header, resealed so only the field checks can catch it. */
static void hostile(const char *p, const struct sd_shard_header *good,
                    void (*edit)(struct sd_shard_header *), int want, const char *part)
{
    struct sd_shard_header h = *good;
    edit(&h);
    st_header_write(p, &h, 1);
    ASSERT_HAS(open_refused(p, want), part);
    st_header_write(p, good, 0);
}

static void edit_count_overflow(struct sd_shard_header *h)
{
    h->record_count = 1ull << 62;
}
static void edit_count_overflow_consistent(struct sd_shard_header *h)
{
    h->record_count = (1ull << 62) + 1;
    h->payload_len = h->record_count * h->dim * 4; /* wraps, as a forger would write it */
}
static void edit_table_beyond_file(struct sd_shard_header *h)
{
    h->table_offset = 1ull << 40;
}
static void edit_block_zero(struct sd_shard_header *h)
{
    h->block_size = 0;
}
static void edit_block_odd(struct sd_shard_header *h)
{
    h->block_size = 4100;
}
static void edit_block_huge(struct sd_shard_header *h)
{
    h->block_size = 1u << 30;
}
static void edit_type(struct sd_shard_header *h)
{
    h->record_type = 3;
}
static void edit_dim_zero(struct sd_shard_header *h)
{
    h->dim = 0;
}
static void edit_dim_huge(struct sd_shard_header *h)
{
    h->dim = SD_SHARD_DIM_MAX + 1;
}
static void edit_reserved(struct sd_shard_header *h)
{
    h->reserved[2] = 1;
}
static void edit_blocks(struct sd_shard_header *h)
{
    h->block_count++;
}
static void edit_payload_offset(struct sd_shard_header *h)
{
    h->payload_offset = 8192;
}
static void edit_header_size(struct sd_shard_header *h)
{
    h->header_size = 256;
}
/* Every derived field consistent, but describing a larger file than exists. */
static void edit_consistent_but_larger(struct sd_shard_header *h)
{
    struct sd_shard_header n;
    ck_assert_int_eq(sd_shard_header_init(h->record_type, h->dim, h->record_count * 100,
                                          h->block_size, NULL, 0, &n),
                     0);
    n.table_checksum = h->table_checksum;
    *h = n;
}

/* Consistent, and the file could even be that large (sparse), but the
 * table would be too big to load. */
static void edit_too_many_blocks(struct sd_shard_header *h)
{
    h->record_count = (uint64_t)SD_SHARD_BLOCKS_MAX * 4096 / (h->dim * 4) + 1000;
    h->payload_len = h->record_count * h->dim * 4;
    h->block_size = 4096;
    h->block_count = (h->payload_len + 4095) / 4096;
    h->table_offset = (4096 + h->payload_len + 4095) / 4096 * 4096;
    h->file_size = h->table_offset + 8 * h->block_count;
}

START_TEST(hostile_headers_with_valid_checksums_are_refused)
{
    uint64_t len;
    const char *p = small_shard(9, NULL, &len);
    char path[8192];
    snprintf(path, sizeof(path), "%s", p);
    struct sd_shard_header good;
    st_header_read(path, &good);
    hostile(path, &good, edit_count_overflow, -EINVAL, "overflows 64 bits");
    hostile(path, &good, edit_count_overflow_consistent, -EINVAL, "overflows 64 bits");
    hostile(path, &good, edit_table_beyond_file, -EINVAL, "table_offset");
    hostile(path, &good, edit_block_zero, -EINVAL, "block size: expected a multiple of 8");
    hostile(path, &good, edit_block_odd, -EINVAL, "found 4100");
    hostile(path, &good, edit_block_huge, -EINVAL, "found 1073741824");
    hostile(path, &good, edit_type, -EINVAL, "record type");
    hostile(path, &good, edit_dim_zero, -EINVAL, "dim: expected 1..65536, found 0");
    hostile(path, &good, edit_dim_huge, -EINVAL, "found 65537");
    hostile(path, &good, edit_reserved, -EINVAL, "reserved header field at 104");
    hostile(path, &good, edit_blocks, -EINVAL, "block_count");
    hostile(path, &good, edit_payload_offset, -EINVAL, "payload_offset: expected 4096, found 8192");
    hostile(path, &good, edit_header_size, -EPROTO, "header size");
    hostile(path, &good, edit_consistent_but_larger, -EIO, "truncated");
    hostile(path, &good, edit_too_many_blocks, -EINVAL, "expected at most 16777216 blocks");
    sd_shard_close(open_ok(path));
}
END_TEST

START_TEST(nonzero_header_padding_is_refused)
{
    uint64_t len;
    const char *p = small_shard(10, NULL, &len);
    st_patch(p, 2000, "\x7f", 1);
    ASSERT_HAS(open_refused(p, -EBADMSG), "found 0x7f at 2000");
}
END_TEST

START_TEST(payload_bit_flip_names_the_block)
{
    uint64_t seed = 0xabcdef;
    for (int round = 0; round < 6; round++) {
        uint64_t len;
        char p[8192];
        snprintf(p, sizeof(p), "%s", small_shard(11 + (uint64_t)round, NULL, &len));
        uint64_t at = st_rand(&seed) % len;
        uint64_t block = at / 4096;
        st_flip_bit(p, 4096 + at, (unsigned)(st_rand(&seed) % 8));
        struct sd_shard *s = open_ok(p); /* the header and table are intact */
        struct sd_shard_fault fault;
        ck_assert_int_eq(sd_shard_verify(s, err, sizeof(err), &fault), -EBADMSG);
        ck_assert_uint_eq(fault.block, block);
        ck_assert_int_eq(fault.table_corrupt, 0);
        ck_assert_uint_ne(fault.expected, fault.found);
        char want[64];
        snprintf(want, sizeof(want), "block %llu of 3 corrupt", (unsigned long long)block);
        ASSERT_HAS(err, want);
        ASSERT_HAS(err, p);
        const uint64_t *table;
        uint64_t count;
        ck_assert_int_eq(sd_shard_table(s, err, sizeof(err), &table, &count), 0);
        sd_shard_close(s);
    }
}
END_TEST

START_TEST(table_bit_flip_names_the_block_and_blames_the_table)
{
    uint64_t seed = 0x5eed;
    for (uint64_t entry = 0; entry < 3; entry++) {
        uint64_t len;
        char p[8192];
        snprintf(p, sizeof(p), "%s", small_shard(20 + entry, NULL, &len));
        struct sd_shard_header h;
        st_header_read(p, &h);
        st_flip_bit(p, h.table_offset + 8 * entry + st_rand(&seed) % 8,
                    (unsigned)(st_rand(&seed) % 8));
        struct sd_shard *s = open_ok(p);
        struct sd_shard_fault fault;
        ck_assert_int_eq(sd_shard_verify(s, err, sizeof(err), &fault), -EBADMSG);
        ck_assert_uint_eq(fault.block, entry);
        ck_assert_int_eq(fault.table_corrupt, 1);
        char want[64];
        snprintf(want, sizeof(want), "block %llu of 3: checksum table entry corrupt",
                 (unsigned long long)entry);
        ASSERT_HAS(err, want);
        ASSERT_HAS(err, p);
        const uint64_t *table = NULL;
        uint64_t count = 0;
        ck_assert_int_eq(sd_shard_table(s, err, sizeof(err), &table, &count), -EBADMSG);
        ck_assert_ptr_null(table);
        ASSERT_HAS(err, "checksum table corrupt");
        sd_shard_close(s);
    }
}
END_TEST

START_TEST(nonzero_payload_padding_fails_verification)
{
    uint64_t len;
    const char *p = small_shard(30, NULL, &len);
    st_patch(p, 4096 + len + 3, "\x01", 1);
    struct sd_shard *s = open_ok(p);
    ck_assert_int_eq(sd_shard_verify(s, err, sizeof(err), NULL), -EBADMSG);
    ASSERT_HAS(err, "payload padding");
    sd_shard_close(s);
}
END_TEST

START_TEST(missing_files_and_directories_are_refused)
{
    const char *dir = st_dir_new();
    char d[8192];
    snprintf(d, sizeof(d), "%s", dir);
    ASSERT_HAS(open_refused(d, -EINVAL), "expected a regular file");
    ASSERT_HAS(open_refused(st_join(d, "nope.sds"), -ENOENT), "cannot open");
}
END_TEST

TCase *st_format_tcase(void)
{
    TCase *tc = tcase_create("format");
    tcase_add_unchecked_fixture(tc, st_root_setup, st_root_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, header_init_derives_sizes_offsets_and_counts);
    tcase_add_test(tc, f32_round_trip_with_short_last_block);
    tcase_add_test(tc, f16_round_trip_with_short_last_block);
    tcase_add_test(tc, writer_refuses_too_many_or_too_few_bytes);
    tcase_add_test(tc, truncated_files_are_refused_at_every_length);
    tcase_add_test(tc, bad_magic_is_refused);
    tcase_add_test(tc, wrong_version_is_refused_even_with_a_valid_checksum);
    tcase_add_test(tc, changed_header_field_fails_the_header_checksum);
    tcase_add_test(tc, hostile_headers_with_valid_checksums_are_refused);
    tcase_add_test(tc, nonzero_header_padding_is_refused);
    tcase_add_test(tc, payload_bit_flip_names_the_block);
    tcase_add_test(tc, table_bit_flip_names_the_block_and_blames_the_table);
    tcase_add_test(tc, nonzero_payload_padding_fails_verification);
    tcase_add_test(tc, missing_files_and_directories_are_refused);
    return tc;
}
