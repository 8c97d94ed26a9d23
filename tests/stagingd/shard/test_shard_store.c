/* Stores: manifests checked against their shards, and refused when wrong. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shard_test_util.h"
#include "stagingd/shard.h"

#define ASSERT_HAS(msg, part)                                                                      \
    ck_assert_msg(strstr((msg), (part)), "expected '%s' in: %s", (part), (msg))

static char err[SD_ERR_LEN];
static char dir[4096];

/* A generated store of 3 shards (2 full, 1 short) in a fresh directory. */
static void make_store(uint64_t seed)
{
    snprintf(dir, sizeof(dir), "%s", st_dir_new());
    struct sd_gen_opts o;
    sd_gen_opts_default(&o);
    o.out_dir = dir;
    o.size = 300000;
    o.shard_size = 120000;
    o.dim = 13;
    o.block_size = 8192;
    o.seed = seed;
    struct sd_gen_result r;
    int rc = sd_gen_store(&o, err, sizeof(err), &r);
    ck_assert_msg(rc == 0, "gen: %d %s", rc, err);
    ck_assert_uint_eq(r.shards, 3);
}

/* The MANIFEST text, with a shard line replaced when @line_no > 0. */
static void rewrite_manifest(const char *edit_from, const char *edit_to)
{
    size_t len;
    char *text = (char *)st_read_file(st_join(dir, "MANIFEST"), &len);
    char *at = memmem(text, len, edit_from, strlen(edit_from));
    ck_assert_msg(at, "'%s' not in the manifest", edit_from);
    size_t head = (size_t)(at - text), from = strlen(edit_from), to = strlen(edit_to);
    char *out = malloc(len - from + to);
    memcpy(out, text, head);
    memcpy(out + head, edit_to, to);
    memcpy(out + head + to, at + from, len - head - from);
    st_write_file(st_join(dir, "MANIFEST"), out, len - from + to);
    free(out);
    free(text);
}

static void write_manifest(const char *text)
{
    st_write_file(st_join(dir, "MANIFEST"), text, strlen(text));
}

static const char *store_refused(int want)
{
    struct sd_store *st = NULL;
    err[0] = '\0';
    int rc = sd_store_open(dir, err, sizeof(err), &st);
    ck_assert_msg(rc == want, "store open: expected %d, found %d (%s)", want, rc, err);
    ck_assert_ptr_null(st);
    return err;
}

/* The manifest's line for shard @i (without its newline), into @out. */
static void manifest_line(int i, char *out, size_t out_len)
{
    size_t len;
    char *text = (char *)st_read_file(st_join(dir, "MANIFEST"), &len);
    char *p = text;
    for (int skip = 0; skip < i + 2; skip++)
        p = strchr(p, '\n') + 1;
    size_t n = (size_t)(strchr(p, '\n') - p);
    ck_assert_uint_lt(n, out_len);
    memcpy(out, p, n);
    out[n] = '\0';
    free(text);
}

START_TEST(generated_store_opens_lists_and_verifies)
{
    make_store(42);
    struct sd_store *st;
    ck_assert_int_eq(sd_store_open(dir, err, sizeof(err), &st), 0);
    ck_assert_uint_eq(sd_store_count(st), 3);
    ck_assert_str_eq(sd_store_path(st), dir);
    uint64_t records = 0;
    for (size_t i = 0; i < 3; i++) {
        const struct sd_store_entry *e = sd_store_entry_get(st, i);
        char name[32];
        snprintf(name, sizeof(name), "shard-%06zu.sds", i);
        ck_assert_str_eq(e->name, name);
        ck_assert_uint_eq(e->dim, 13);
        ck_assert_uint_eq(e->record_type, SD_RECORD_F32);
        ck_assert_uint_eq(e->payload_len, e->records * 13 * 4);
        records += e->records;
        struct sd_shard *s;
        ck_assert_int_eq(sd_store_shard_open(st, i, err, sizeof(err), &s), 0);
        ck_assert_uint_eq(sd_shard_header_get(s)->table_checksum, e->table_checksum);
        sd_shard_close(s);
    }
    ck_assert_uint_eq(records, 300000 / 52);
    ck_assert_ptr_null(sd_store_entry_get(st, 3));
    struct sd_shard *s = NULL;
    ck_assert_int_eq(sd_store_shard_open(st, 3, err, sizeof(err), &s), -ERANGE);
    ck_assert_int_eq(sd_store_verify(st, NULL, NULL, err, sizeof(err), NULL), 0);
    sd_store_close(st);
}
END_TEST

START_TEST(store_verify_names_the_corrupt_shard_and_block)
{
    make_store(43);
    /* Block 2 of shard 1 (payload at 4096, 8192-byte blocks). */
    st_flip_bit(st_join(dir, "shard-000001.sds"), 4096 + 2 * 8192 + 77, 3);
    struct sd_store *st;
    ck_assert_int_eq(sd_store_open(dir, err, sizeof(err), &st), 0); /* headers are fine */
    struct sd_shard_fault fault;
    ck_assert_int_eq(sd_store_verify(st, NULL, NULL, err, sizeof(err), &fault), -EBADMSG);
    ck_assert_uint_eq(fault.block, 2);
    ASSERT_HAS(err, "shard-000001.sds: block 2 of");
    sd_store_close(st);
}
END_TEST

START_TEST(manifest_naming_a_missing_file_is_refused)
{
    make_store(44);
    ck_assert_int_eq(unlink(st_join(dir, "shard-000002.sds")), 0);
    const char *m = store_refused(-ENOENT);
    ASSERT_HAS(m, "shard-000002.sds: cannot open");
    ASSERT_HAS(m, "MANIFEST line 5");
}
END_TEST

START_TEST(manifest_path_traversal_is_refused)
{
    static const char *const bad[] = {"../shard-000000.sds", "sub/shard-000000.sds", "/etc/passwd",
                                      "..", "a..b"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        make_store(45);
        rewrite_manifest("shard-000000.sds", bad[i]);
        const char *m = store_refused(-EINVAL);
        ASSERT_HAS(m, "path traversal");
        ASSERT_HAS(m, "line 3");
    }
    make_store(45);
    rewrite_manifest("shard-000000.sds", ".hidden");
    ASSERT_HAS(store_refused(-EINVAL), "not starting with '.'");
    make_store(45);
    rewrite_manifest("shard-000000.sds", "a\x01z");
    ASSERT_HAS(store_refused(-EINVAL), "byte 0x01");
}
END_TEST

START_TEST(manifest_with_a_duplicate_name_is_refused)
{
    make_store(46);
    char line0[512], line1[512], text[2048];
    manifest_line(0, line0, sizeof(line0));
    manifest_line(1, line1, sizeof(line1));
    snprintf(text, sizeof(text), "stagingd-store 1\n%s\n%s\n%s\n", line0, line1, line0);
    write_manifest(text);
    const char *m = store_refused(-EINVAL);
    ASSERT_HAS(m, "duplicate shard name 'shard-000000.sds'");
    ASSERT_HAS(m, "lines 2 and 4");
}
END_TEST

START_TEST(manifest_disagreeing_with_a_shard_is_refused)
{
    make_store(47);
    char line[512], text[2048];
    manifest_line(2, line, sizeof(line));
    /* shard 2 holds 5769 - 2 * 2307 = 1155 records of 52 bytes. */
    ck_assert_msg(strstr(line, " 1155 8192 60060 8 "), "unexpected line: %s", line);
    static const struct {
        const char *from, *to, *part;
    } cases[] = {
        {" 1155 8192 60060 8 ", " 1155 8192 60064 8 ", "payload bytes mismatch: expected 60064"},
        {" 1155 8192 60060 8 ", " 1156 8192 60112 8 ", "records mismatch"},
        {" 1155 8192 60060 8 ", " 1155 4096 60060 15 ", "block size mismatch"},
        {" 1155 8192 60060 8 ", " 1155 8192 60060 9 ", "blocks mismatch"},
        {" f32 13 ", " f16 13 ", "record type mismatch"},
        {" f32 13 ", " f32 12 ", "dim mismatch"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char edited[512];
        char *at = strstr(line, cases[i].from);
        ck_assert_ptr_nonnull(at);
        snprintf(edited, sizeof(edited), "%.*s%s%s", (int)(at - line), line, cases[i].to,
                 at + strlen(cases[i].from));
        snprintf(text, sizeof(text), "stagingd-store 1\n%s\n", edited);
        write_manifest(text);
        const char *m = store_refused(-EINVAL);
        ASSERT_HAS(m, cases[i].part);
        ASSERT_HAS(m, "shard-000002.sds");
    }
    /* A wrong table checksum (last field). */
    char edited[512];
    snprintf(edited, sizeof(edited), "%s", line);
    char *last = strrchr(edited, ' ') + 1;
    last[0] = last[0] == '0' ? '1' : '0';
    snprintf(text, sizeof(text), "stagingd-store 1\n%s\n", edited);
    write_manifest(text);
    ASSERT_HAS(store_refused(-EINVAL), "table checksum mismatch");
}
END_TEST

START_TEST(malformed_manifests_are_refused)
{
    make_store(48);
    char line[512], text[2048];
    manifest_line(0, line, sizeof(line));
    write_manifest("");
    ASSERT_HAS(store_refused(-EPROTO), "empty file");
    snprintf(text, sizeof(text), "stagingd-store 2\n%s\n", line);
    write_manifest(text);
    ASSERT_HAS(store_refused(-EPROTO), "manifest version: expected 1, found 2");
    snprintf(text, sizeof(text), "not-a-store 1\n%s\n", line);
    write_manifest(text);
    ASSERT_HAS(store_refused(-EPROTO), "line 1");
    write_manifest("stagingd-store 1\n# nothing\n");
    ASSERT_HAS(store_refused(-EINVAL), "at least one shard");
    write_manifest("stagingd-store 1\nshard-000000.sds f32 13\n");
    ASSERT_HAS(store_refused(-EINVAL), "expected 8 fields");
    write_manifest("stagingd-store 1\nshard-000000.sds f32 -13 1 8192 52 1 0000000000000000\n");
    ASSERT_HAS(store_refused(-EINVAL), "dim: expected an unsigned decimal integer, found '-13'");
    write_manifest("stagingd-store 1\nshard-000000.sds f32 13 99999999999999999999 8192 52 1 "
                   "0000000000000000\n");
    ASSERT_HAS(store_refused(-EINVAL), "records: expected");
    write_manifest("stagingd-store 1\nshard-000000.sds f64 13 1 8192 52 1 0000000000000000\n");
    ASSERT_HAS(store_refused(-EINVAL), "type: expected f32 or f16, found 'f64'");
    write_manifest("stagingd-store 1\nshard-000000.sds f32 13 1 8192 52 1 00000000000000g0\n");
    ASSERT_HAS(store_refused(-EINVAL), "16 lowercase hex digits");
    snprintf(text, sizeof(text), "stagingd-store 1\r\n%s\n", line);
    write_manifest(text);
    ASSERT_HAS(store_refused(-EINVAL), "'\\r'");
    /* A NUL byte is not text. */
    static const char nul[] = "stagingd-store 1\n\0";
    st_write_file(st_join(dir, "MANIFEST"), nul, sizeof(nul) - 1);
    ASSERT_HAS(store_refused(-EINVAL), "NUL byte");
    ck_assert_int_eq(unlink(st_join(dir, "MANIFEST")), 0);
    ASSERT_HAS(store_refused(-ENOENT), "MANIFEST: cannot open");
}
END_TEST

START_TEST(symlinked_shards_are_refused)
{
    make_store(49);
    char target[8192];
    snprintf(target, sizeof(target), "%s", st_join(dir, "shard-000000.sds"));
    char moved[8192];
    snprintf(moved, sizeof(moved), "%s", st_join(dir, "elsewhere.bin"));
    ck_assert_int_eq(rename(target, moved), 0);
    ck_assert_int_eq(symlink("elsewhere.bin", target), 0);
    ASSERT_HAS(store_refused(-ELOOP), "symbolic link");
}
END_TEST

START_TEST(manifest_written_by_the_api_round_trips)
{
    make_store(50);
    struct sd_store *st;
    ck_assert_int_eq(sd_store_open(dir, err, sizeof(err), &st), 0);
    struct sd_store_entry e[3];
    for (size_t i = 0; i < 3; i++)
        e[i] = *sd_store_entry_get(st, i);
    sd_store_close(st);
    /* Reversed order is still a valid store, listed in the new order. */
    struct sd_store_entry r[3] = {e[2], e[1], e[0]};
    ck_assert_int_eq(sd_store_manifest_write(dir, r, 3, 1, err, sizeof(err)), 0);
    ck_assert_int_eq(sd_store_open(dir, err, sizeof(err), &st), 0);
    ck_assert_str_eq(sd_store_entry_get(st, 0)->name, "shard-000002.sds");
    ck_assert_uint_eq(sd_store_entry_get(st, 0)->table_checksum, e[2].table_checksum);
    sd_store_close(st);
    snprintf(r[1].name, sizeof(r[1].name), "../x");
    ck_assert_int_eq(sd_store_manifest_write(dir, r, 3, 0, err, sizeof(err)), -EINVAL);
}
END_TEST

TCase *st_store_tcase(void)
{
    TCase *tc = tcase_create("store");
    tcase_add_unchecked_fixture(tc, st_root_setup, st_root_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, generated_store_opens_lists_and_verifies);
    tcase_add_test(tc, store_verify_names_the_corrupt_shard_and_block);
    tcase_add_test(tc, manifest_naming_a_missing_file_is_refused);
    tcase_add_test(tc, manifest_path_traversal_is_refused);
    tcase_add_test(tc, manifest_with_a_duplicate_name_is_refused);
    tcase_add_test(tc, manifest_disagreeing_with_a_shard_is_refused);
    tcase_add_test(tc, malformed_manifests_are_refused);
    tcase_add_test(tc, symlinked_shards_are_refused);
    tcase_add_test(tc, manifest_written_by_the_api_round_trips);
    return tc;
}
