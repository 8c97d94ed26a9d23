/* The import module (stagingd/import/): vector files written here byte by
 * byte, imported, and the store read back row by row against them; every
 * class of bad input refused with a message naming the file and the exact
 * byte offset, and nothing left on disk; the store replaced only whole;
 * query rows picked from a file. */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "import_test_util.h"
#include "stagingd/import.h"
#include "stagingd/shard.h"

static char dir[64];
static char out[128];
static char err[SD_ERR_LEN];

static void setup(void)
{
    it_dir_make(dir);
    snprintf(out, sizeof out, "%s/store", dir);
}

static void teardown(void)
{
    it_rm_rf(dir);
}

static const char *in(const char *name)
{
    static char paths[8][128];
    static unsigned next;
    char *p = paths[next++ % 8];
    snprintf(p, 128, "%s/%s", dir, name);
    return p;
}

/* Imports @files into out; returns sd_import_store's code. */
static int import_files(const char *const *files, size_t n, uint32_t type, uint64_t shard_size,
                        int force, struct sd_import_result *res)
{
    struct sd_import_opts o;
    sd_import_opts_default(&o);
    o.out_dir = out;
    o.inputs = files;
    o.ninputs = n;
    o.record_type = type;
    o.shard_size = shard_size;
    o.block_size = 4096;
    o.force = force;
    o.do_fsync = 0;
    err[0] = '\0';
    return sd_import_store(&o, err, sizeof err, NULL, res);
}

/* The import of @file is refused with code @rc, a message that starts
 * "FILE: byte OFFSET: " and holds @phrase, and leaves the directory as it
 * was: no store, no temporary directory. */
static void expect_refused(const char *file, int rc, uint64_t offset, const char *phrase)
{
    const int before = it_dir_count(dir);
    const char *files[] = {file};
    int got = import_files(files, 1, 0, 1u << 20, 0, NULL);
    ck_assert_msg(got == rc, "%s: expected %d (%s), found %d: %s", file, rc, strerror(-rc), got,
                  err);
    char want[256];
    snprintf(want, sizeof want, "%s: byte %" PRIu64 ": ", file, offset);
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0,
                  "expected the message to start '%s', "
                  "found '%s'",
                  want, err);
    ck_assert_msg(strstr(err, phrase), "expected '%s' in '%s'", phrase, err);
    ck_assert_int_eq(it_dir_count(dir), before);
    struct stat st;
    ck_assert_int_eq(stat(out, &st), -1);
}

static const char DICT_F32[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 8), }";

/* ---- good files, read back ---- */

START_TEST(npy_versions_1_2_3_import_every_row_in_order_across_shards)
{
    const uint32_t dim = 12;
    const uint64_t rows = 95;
    float *v = it_random_f32(rows * dim, 11);
    char dict[128];
    snprintf(dict, sizeof dict,
             "{'descr': '<f4', 'fortran_order': False, 'shape': (%" PRIu64 ", %u), }", rows, dim);
    for (unsigned major = 1; major <= 3; major++) {
        it_npy_write(in("a.npy"), major, dict, v, rows * dim * 4);
        const char *files[] = {in("a.npy")};
        struct sd_import_result res;
        /* Ten records a shard: 48 * 10 bytes plus a little. */
        ck_assert_msg(import_files(files, 1, 0, 10 * dim * 4 + 5, major > 1, &res) == 0, "%s", err);
        ck_assert_uint_eq(res.shards, 10);
        ck_assert_uint_eq(res.rows, rows);
        ck_assert_uint_eq(res.record_type, SD_RECORD_F32);
        uint64_t n, shards;
        uint32_t d, type;
        float *back = it_store_read(out, &n, &d, &type, &shards);
        ck_assert_uint_eq(n, rows);
        ck_assert_uint_eq(d, dim);
        ck_assert_uint_eq(type, SD_RECORD_F32);
        ck_assert_uint_eq(shards, 10);
        ck_assert(memcmp(back, v, rows * dim * 4) == 0);
        free(back);
    }
    /* Only the store is left next to the inputs. */
    ck_assert_int_eq(it_dir_count(dir), 2);
    free(v);
}
END_TEST

START_TEST(header_spellings_python_writes_are_all_taken)
{
    static const char *const dicts[] = {
        "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (3, 2)}",
        "{'shape': (3, 2), 'fortran_order': False, 'descr': '<f4'}",
        "{ 'descr' : '<f4' ,\t'fortran_order' : False , 'shape' : ( 3 , 2 , ) , }",
    };
    const float v[6] = {1, 2, 3, 4, 5, 6};
    for (size_t i = 0; i < 3; i++) {
        it_npy_write(in("s.npy"), 1, dicts[i], v, sizeof v);
        struct sd_vec_file *f = NULL;
        ck_assert_msg(sd_vec_open(in("s.npy"), 0, err, sizeof err, &f) == 0, "%s: %s", dicts[i],
                      err);
        ck_assert_uint_eq(sd_vec_info_get(f)->rows, 3);
        ck_assert_uint_eq(sd_vec_info_get(f)->dim, 2);
        float back[6];
        ck_assert_int_eq(sd_vec_read(f, 0, 3, SD_RECORD_F32, err, sizeof err, back), 0);
        ck_assert(memcmp(back, v, sizeof v) == 0);
        sd_vec_close(f);
    }
    /* One vector: shape (dim,). */
    it_npy_write(in("one.npy"), 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", v,
                 sizeof v);
    struct sd_vec_file *f = NULL;
    ck_assert_msg(sd_vec_open(in("one.npy"), 0, err, sizeof err, &f) == 0, "%s", err);
    ck_assert_uint_eq(sd_vec_info_get(f)->rows, 1);
    ck_assert_uint_eq(sd_vec_info_get(f)->dim, 6);
    sd_vec_close(f);
}
END_TEST

START_TEST(f16_stays_f16_and_converts_both_ways_exactly_or_rounded)
{
    const uint32_t dim = 8;
    const uint64_t rows = 20;
    float *v = it_random_f32(rows * dim, 5);
    uint16_t *h = malloc(rows * dim * 2);
    ck_assert_ptr_nonnull(h);
    for (size_t i = 0; i < rows * dim; i++)
        h[i] = sd_f16_from_f32(v[i] * 1000.0f);
    it_npy_write(in("h.npy"), 2, "{'descr': '<f2', 'fortran_order': False, 'shape': (20, 8), }", h,
                 rows * dim * 2);
    const char *files[] = {in("h.npy")};
    struct sd_import_result res;
    ck_assert_msg(import_files(files, 1, 0, 1u << 20, 0, &res) == 0, "%s", err);
    ck_assert_uint_eq(res.record_type, SD_RECORD_F16); /* every input f16: f16 */
    uint64_t n, shards;
    uint32_t d, type;
    uint16_t *back16 = it_store_read(out, &n, &d, &type, &shards);
    ck_assert_uint_eq(type, SD_RECORD_F16);
    ck_assert(memcmp(back16, h, rows * dim * 2) == 0);
    free(back16);

    /* f16 in, f32 out: exact. */
    ck_assert_msg(import_files(files, 1, SD_RECORD_F32, 1u << 20, 1, &res) == 0, "%s", err);
    float *back32 = it_store_read(out, &n, &d, &type, &shards);
    ck_assert_uint_eq(type, SD_RECORD_F32);
    for (size_t i = 0; i < rows * dim; i++)
        ck_assert(back32[i] == sd_f16_to_f32(h[i]));
    free(back32);

    /* f32 in, f16 out: rounded to nearest even. */
    it_npy_write(in("f.npy"), 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (20, 8), }", v,
                 rows * dim * 4);
    const char *ffiles[] = {in("f.npy")};
    ck_assert_msg(import_files(ffiles, 1, SD_RECORD_F16, 1u << 20, 1, &res) == 0, "%s", err);
    back16 = it_store_read(out, &n, &d, &type, &shards);
    ck_assert_uint_eq(type, SD_RECORD_F16);
    for (size_t i = 0; i < rows * dim; i++)
        ck_assert_uint_eq(back16[i], sd_f16_from_f32(v[i]));
    free(back16);
    free(h);
    free(v);
}
END_TEST

START_TEST(fvecs_bvecs_and_u8_npy_import_as_their_values)
{
    const uint32_t dim = 16;
    const uint64_t rows = 30;
    float *v = it_random_f32(rows * dim, 9);
    it_xvecs_write(in("a.fvecs"), rows, dim, v, 4);
    unsigned char *b = malloc(rows * dim);
    ck_assert_ptr_nonnull(b);
    for (size_t i = 0; i < rows * dim; i++)
        b[i] = (unsigned char)(i * 37 % 256);
    it_xvecs_write(in("b.bvecs"), rows, dim, b, 1);
    it_npy_write(in("u.npy"), 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (30, 16), }", b,
                 rows * dim);
    /* Three inputs, one store: their rows one after another. */
    const char *files[] = {in("a.fvecs"), in("b.bvecs"), in("u.npy")};
    struct sd_import_input inputs[3];
    struct sd_import_opts o;
    sd_import_opts_default(&o);
    o.out_dir = out;
    o.inputs = files;
    o.ninputs = 3;
    o.shard_size = 7 * dim * 4;
    o.block_size = 4096;
    o.do_fsync = 0;
    struct sd_import_result res;
    ck_assert_msg(sd_import_store(&o, err, sizeof err, inputs, &res) == 0, "%s", err);
    ck_assert_uint_eq(res.rows, 3 * rows);
    ck_assert_uint_eq(res.record_type, SD_RECORD_F32);
    ck_assert_uint_eq(inputs[0].info.format, SD_VEC_FVECS);
    ck_assert_uint_eq(inputs[1].info.format, SD_VEC_BVECS);
    ck_assert_uint_eq(inputs[2].info.format, SD_VEC_NPY);
    ck_assert_uint_eq(inputs[1].first_row, rows);
    ck_assert_uint_eq(inputs[2].first_row, 2 * rows);
    uint64_t n, shards;
    uint32_t d, type;
    float *back = it_store_read(out, &n, &d, &type, &shards);
    ck_assert_uint_eq(n, 3 * rows);
    ck_assert_uint_eq(shards, (3 * rows + 6) / 7);
    ck_assert(memcmp(back, v, rows * dim * 4) == 0);
    for (size_t i = 0; i < rows * dim; i++) {
        ck_assert(back[rows * dim + i] == (float)b[i]);
        ck_assert(back[2 * rows * dim + i] == (float)b[i]);
    }
    free(back);
    free(b);
    free(v);
}
END_TEST

/* ---- bad input: one test per class ---- */

START_TEST(truncated_data_is_refused_at_the_files_end)
{
    const float v[32] = {0};
    uint64_t data = it_npy_write(in("t.npy"), 1, DICT_F32, v, 100);
    expect_refused(in("t.npy"), -EIO, data + 100, "truncated data");
    /* Bytes past the data are refused too, where the data ends. */
    float w[33] = {0};
    data = it_npy_write(in("l.npy"), 1, DICT_F32, w, sizeof w);
    expect_refused(in("l.npy"), -EIO, data + 128, "bytes after the data");
}
END_TEST

START_TEST(truncated_header_is_refused_where_the_file_ends)
{
    const unsigned char head[] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 118, 0, '{', '\'', 'd'};
    it_file_write(in("h.npy"), head, sizeof head);
    expect_refused(in("h.npy"), -EIO, sizeof head, "truncated header");
    /* Cut inside the header length itself. */
    it_file_write(in("h2.npy"), head, 9);
    expect_refused(in("h2.npy"), -EIO, 9, "truncated header");
}
END_TEST

START_TEST(wrong_magic_is_refused_at_byte_0)
{
    const float v[32] = {0};
    it_npy_write(in("m.npy"), 1, DICT_F32, v, sizeof v);
    FILE *f = fopen(in("m.npy"), "r+b");
    ck_assert_ptr_nonnull(f);
    fputc('X', f); /* 0x93 -> 'X' */
    fclose(f);
    expect_refused(in("m.npy"), -EPROTO, 0, "expected the magic \\x93NUMPY");
    /* An .npy named .fvecs is told apart too. */
    it_npy_write(in("n.fvecs"), 1, DICT_F32, v, sizeof v);
    expect_refused(in("n.fvecs"), -EPROTO, 0, "a .npy file, not .fvecs");
}
END_TEST

START_TEST(unknown_version_is_refused_at_byte_6)
{
    const float v[32] = {0};
    it_npy_write(in("v.npy"), 4, DICT_F32, v, sizeof v);
    expect_refused(in("v.npy"), -EPROTO, 6, "unknown .npy version 4.0");
}
END_TEST

START_TEST(fortran_order_is_refused_at_its_value)
{
    static const char d[] = "{'descr': '<f4', 'fortran_order': True, 'shape': (4, 8), }";
    const float v[32] = {0};
    it_npy_write(in("o.npy"), 1, d, v, sizeof v);
    expect_refused(in("o.npy"), -EINVAL, it_npy_at(1, d, "True"), "fortran_order is True");
}
END_TEST

START_TEST(object_and_structured_dtypes_are_refused_at_the_descr)
{
    static const char d[] = "{'descr': '|O', 'fortran_order': False, 'shape': (4, 8), }";
    const uint64_t v[32] = {0};
    it_npy_write(in("o.npy"), 1, d, v, sizeof v);
    expect_refused(in("o.npy"), -EINVAL, it_npy_at(1, d, "'|O'"), "an object array");
    static const char s[] =
        "{'descr': [('x', '<f4'), ('y', '<f4')], 'fortran_order': False, 'shape': (4,), }";
    it_npy_write(in("s.npy"), 3, s, v, 32);
    expect_refused(in("s.npy"), -EINVAL, it_npy_at(3, s, "[("), "a structured dtype");
}
END_TEST

START_TEST(big_endian_is_refused_at_the_descr)
{
    static const char d[] = "{'descr': '>f4', 'fortran_order': False, 'shape': (4, 8), }";
    const float v[32] = {0};
    it_npy_write(in("b.npy"), 2, d, v, sizeof v);
    expect_refused(in("b.npy"), -EINVAL, it_npy_at(2, d, "'>f4'"), "big-endian");
    /* float64 likewise, with what to do. */
    static const char d8[] = "{'descr': '<f8', 'fortran_order': False, 'shape': (4, 8), }";
    const double w[32] = {0};
    it_npy_write(in("d.npy"), 1, d8, w, sizeof w);
    expect_refused(in("d.npy"), -EINVAL, it_npy_at(1, d8, "'<f8'"), "astype('<f4')");
}
END_TEST

START_TEST(three_d_shape_is_refused_at_the_shape)
{
    static const char d[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 2, 4), }";
    const float v[32] = {0};
    it_npy_write(in("3.npy"), 1, d, v, sizeof v);
    expect_refused(in("3.npy"), -EINVAL, it_npy_at(1, d, "(4, 2, 4)"), "has 3 dimensions");
    static const char s[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (), }";
    it_npy_write(in("0.npy"), 1, s, v, 4);
    expect_refused(in("0.npy"), -EINVAL, it_npy_at(1, s, "()"), "has 0 dimensions");
}
END_TEST

START_TEST(header_syntax_errors_are_refused_where_they_are)
{
    static const char d[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 8) }!";
    const float v[32] = {0};
    it_npy_write(in("x.npy"), 1, d, v, sizeof v);
    expect_refused(in("x.npy"), -EPROTO, it_npy_at(1, d, "!"), "a final '\\n'");
    static const char u[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 8), 'x': 1}";
    it_npy_write(in("u.npy"), 1, u, v, sizeof v);
    expect_refused(in("u.npy"), -EPROTO, it_npy_at(1, u, "'x'"), "unknown key 'x'");
    static const char t[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (128), }";
    it_npy_write(in("t.npy"), 1, t, v, sizeof v);
    expect_refused(in("t.npy"), -EPROTO, it_npy_at(1, t, ")"), "'(128,)'");
}
END_TEST

START_TEST(fvecs_dims_that_disagree_are_refused_at_the_vector)
{
    /* Vector 6 of 10 has dim 4 among dims of 8: the file's size is not a
     * whole number of vectors, found before anything is written. */
    const float v[80] = {0};
    FILE *f = fopen(in("d.fvecs"), "wb");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 10; i++) {
        int32_t dim = i == 6 ? 4 : 8;
        fwrite(&dim, 4, 1, f);
        fwrite(v, 4, (size_t)dim, f);
    }
    fclose(f);
    expect_refused(in("d.fvecs"), -EBADMSG, 6 * 36, "vector 6 has dim 4, expected 8");
    /* Sizes that add up (vector 3 has dim 17, one dim-8 vector fewer):
     * found as the rows are read, after shards were started. */
    f = fopen(in("e.fvecs"), "wb");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 6; i++) {
        int32_t dim = i == 3 ? 17 : 8;
        if (i == 4)
            continue;
        fwrite(&dim, 4, 1, f);
        fwrite(v, 4, (size_t)dim, f);
    }
    fclose(f);
    expect_refused(in("e.fvecs"), -EBADMSG, 3 * 36, "vector 3 has dim 17, expected 8");
}
END_TEST

START_TEST(fvecs_cut_short_is_refused_at_its_last_vector)
{
    const float v[40] = {0};
    it_xvecs_write(in("c.fvecs"), 5, 8, v, 4);
    truncate(in("c.fvecs"), 4 * 36 + 10);
    expect_refused(in("c.fvecs"), -EIO, 4 * 36, "vector 4 has 10 of its 36 bytes");
    it_file_write(in("w.bvecs"), "\x08\x00", 2);
    expect_refused(in("w.bvecs"), -EIO, 0, "4-byte dim word");
}
END_TEST

START_TEST(zero_vectors_and_dim_0_are_refused)
{
    it_file_write(in("z.fvecs"), "", 0);
    expect_refused(in("z.fvecs"), -ENODATA, 0, "holds no vectors");
    static const char d[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 8), }";
    it_npy_write(in("z.npy"), 1, d, NULL, 0);
    expect_refused(in("z.npy"), -ENODATA, it_npy_at(1, d, "(0, 8)"), "holds no vectors");
    const int32_t zero = 0;
    it_file_write(in("d0.fvecs"), &zero, 4);
    expect_refused(in("d0.fvecs"), -EINVAL, 0, "vector 0 has dim 0");
    static const char d0[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (5, 0), }";
    it_npy_write(in("d0.npy"), 1, d0, NULL, 0);
    expect_refused(in("d0.npy"), -EINVAL, it_npy_at(1, d0, "(5, 0)"), "dim 0");
}
END_TEST

START_TEST(dims_over_the_scans_maximum_are_refused)
{
    const uint32_t big = SD_SHARD_DIM_MAX + 1;
    float *v = calloc(big, sizeof *v);
    ck_assert_ptr_nonnull(v);
    it_xvecs_write(in("b.fvecs"), 1, big, v, 4);
    expect_refused(in("b.fvecs"), -EINVAL, 0, "the scan's maximum");
    char d[128];
    snprintf(d, sizeof d, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, %u), }", big);
    it_npy_write(in("b.npy"), 1, d, v, (size_t)big * 4);
    expect_refused(in("b.npy"), -EINVAL, it_npy_at(1, d, "(1,"), "the scan's maximum");
    free(v);
}
END_TEST

START_TEST(ivecs_is_not_data_and_f16_overflow_and_mixed_dims_are_refused)
{
    const int32_t ids[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    it_xvecs_write(in("g.ivecs"), 2, 4, ids, 4);
    expect_refused(in("g.ivecs"), -EINVAL, 0, "ground-truth neighbour ids");

    /* An f32 value f16 cannot hold, imported as f16: row 2 element 3. */
    float v[32] = {0};
    v[2 * 8 + 3] = 1e6f;
    uint64_t data = it_npy_write(in("o.npy"), 1, DICT_F32, v, sizeof v);
    const char *files[] = {in("o.npy")};
    const int before = it_dir_count(dir);
    ck_assert_int_eq(import_files(files, 1, SD_RECORD_F16, 1u << 20, 0, NULL), -ERANGE);
    char want[160];
    snprintf(want, sizeof want, "%s: byte %" PRIu64 ": row 2 element 3 is 1e+06", in("o.npy"),
             data + (2 * 8 + 3) * 4);
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "expected '%s', found '%s'", want, err);
    ck_assert_int_eq(it_dir_count(dir), before);

    /* Two inputs whose dims disagree: the second's shape is named. */
    static const char d6[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 6), }";
    it_npy_write(in("six.npy"), 2, d6, v, 4 * 6 * 4);
    const char *two[] = {in("o.npy"), in("six.npy")};
    ck_assert_int_eq(import_files(two, 2, 0, 1u << 20, 0, NULL), -EINVAL);
    snprintf(want, sizeof want, "%s: byte %" PRIu64 ": dim 6 disagrees with %s's dim 8",
             in("six.npy"), it_npy_at(2, d6, "(4, 6)"), in("o.npy"));
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "expected '%s', found '%s'", want, err);
    ck_assert_int_eq(it_dir_count(dir), before + 1);
}
END_TEST

/* ---- the store: replaced whole or not at all ---- */

START_TEST(an_existing_store_is_replaced_whole_or_left_as_it_was)
{
    const float a[32] = {1}, b[32] = {2};
    it_npy_write(in("a.npy"), 1, DICT_F32, a, sizeof a);
    it_npy_write(in("b.npy"), 1, DICT_F32, b, sizeof b);
    const char *fa[] = {in("a.npy")}, *fb[] = {in("b.npy")};
    ck_assert_msg(import_files(fa, 1, 0, 64, 0, NULL) == 0, "%s", err);
    /* Not again without --force. */
    ck_assert_int_eq(import_files(fb, 1, 0, 64, 0, NULL), -EEXIST);
    ck_assert_ptr_nonnull(strstr(err, "is not empty: --force"));
    /* Input that fails halfway through writing (a value f16 cannot hold in
     * the second file's last row), with --force: the old store stays. */
    float w[32] = {0};
    w[31] = 1e9f;
    it_npy_write(in("bad.npy"), 1, DICT_F32, w, sizeof w);
    const char *fbad[] = {in("b.npy"), in("bad.npy")};
    ck_assert_int_eq(import_files(fbad, 2, SD_RECORD_F16, 64, 1, NULL), -ERANGE);
    uint64_t n, shards;
    uint32_t d, type;
    float *back = it_store_read(out, &n, &d, &type, &shards);
    ck_assert(memcmp(back, a, sizeof a) == 0);
    free(back);
    ck_assert_int_eq(it_dir_count(dir), 4); /* three inputs and the store */
    /* With --force and good input: the new store, nothing else left. */
    ck_assert_msg(import_files(fb, 1, 0, 64, 1, NULL) == 0, "%s", err);
    back = it_store_read(out, &n, &d, &type, &shards);
    ck_assert(memcmp(back, b, sizeof b) == 0);
    ck_assert_uint_eq(shards, 2);
    free(back);
    ck_assert_int_eq(it_dir_count(dir), 4);
    ck_assert_int_eq(it_dir_count(out), 3); /* two shards and MANIFEST */
}
END_TEST

START_TEST(force_replaces_only_a_store_and_never_a_file)
{
    const float a[32] = {1};
    it_npy_write(in("a.npy"), 1, DICT_F32, a, sizeof a);
    const char *fa[] = {in("a.npy")};
    ck_assert_int_eq(mkdir(out, 0755), 0);
    char other[160];
    snprintf(other, sizeof other, "%s/notes.txt", out);
    it_file_write(other, "mine", 4);
    ck_assert_int_eq(import_files(fa, 1, 0, 1u << 20, 1, NULL), -EEXIST);
    ck_assert_ptr_nonnull(strstr(err, "holds 'notes.txt', which is no part of a store"));
    ck_assert_int_eq(it_dir_count(out), 1);
    it_rm_rf(out);
    it_file_write(out, "x", 1);
    ck_assert_int_eq(import_files(fa, 1, 0, 1u << 20, 1, NULL), -EEXIST);
    ck_assert_ptr_nonnull(strstr(err, "is not a directory"));
    unlink(out);
    /* An empty directory is taken as it is. */
    ck_assert_int_eq(mkdir(out, 0755), 0);
    ck_assert_msg(import_files(fa, 1, 0, 1u << 20, 0, NULL) == 0, "%s", err);
    ck_assert_int_eq(it_dir_count(out), 2);
}
END_TEST

static int stop_at_once(void *arg, uint64_t done, uint64_t total)
{
    (void)done;
    (void)total;
    ++*(int *)arg;
    return 1;
}

START_TEST(a_cancelled_import_leaves_nothing_and_check_writes_nothing)
{
    float *v = it_random_f32(64 * 8, 3);
    char d[96];
    snprintf(d, sizeof d, "{'descr': '<f4', 'fortran_order': False, 'shape': (64, 8), }");
    it_npy_write(in("a.npy"), 1, d, v, 64 * 8 * 4);
    const char *fa[] = {in("a.npy")};
    struct sd_import_opts o;
    sd_import_opts_default(&o);
    o.out_dir = out;
    o.inputs = fa;
    o.ninputs = 1;
    o.shard_size = 8 * 8 * 4;
    o.block_size = 4096;
    int calls = 0;
    o.progress = stop_at_once;
    o.progress_arg = &calls;
    ck_assert_int_eq(sd_import_store(&o, err, sizeof err, NULL, NULL), -ECANCELED);
    ck_assert_int_eq(calls, 1);
    ck_assert_int_eq(it_dir_count(dir), 1);

    /* --check reads every row, ivecs too, and writes nothing. */
    const int32_t ids[8] = {0, 5, 9, 2, 7, 1, 3, 4};
    it_xvecs_write(in("g.ivecs"), 2, 4, ids, 4);
    const char *both[] = {in("a.npy"), in("g.ivecs")};
    sd_import_opts_default(&o);
    o.inputs = both;
    o.ninputs = 2;
    o.check_only = 1;
    struct sd_import_result res;
    ck_assert_msg(sd_import_store(&o, err, sizeof err, NULL, &res) == 0, "%s", err);
    ck_assert_uint_eq(res.rows, 64);
    ck_assert_uint_eq(res.shards, 0);
    ck_assert_int_eq(res.ivecs_min, 0);
    ck_assert_int_eq(res.ivecs_max, 9);
    ck_assert_int_eq(it_dir_count(dir), 2);
    /* A negative neighbour id is named with its offset. */
    const int32_t neg[4] = {0, 1, -3, 2};
    it_xvecs_write(in("n.ivecs"), 1, 4, neg, 4);
    const char *fn[] = {in("n.ivecs")};
    o.inputs = fn;
    o.ninputs = 1;
    ck_assert_int_eq(sd_import_store(&o, err, sizeof err, NULL, &res), -EINVAL);
    char want[160];
    snprintf(want, sizeof want, "%s: byte 12: vector 0 element 2: neighbour id -3", in("n.ivecs"));
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "expected '%s', found '%s'", want, err);
    free(v);
}
END_TEST

/* ---- queries ---- */

START_TEST(query_rows_are_picked_by_list_and_range)
{
    float *v = it_random_f32(10 * 4, 21);
    it_xvecs_write(in("q.fvecs"), 10, 4, v, 4);
    struct sd_vec_queries q;
    ck_assert_msg(sd_vec_queries_load(in("q.fvecs"), 0, "7,2-4", 0, err, sizeof err, &q) == 0, "%s",
                  err);
    ck_assert_uint_eq(q.n, 4);
    ck_assert_uint_eq(q.dim, 4);
    const uint64_t want[] = {7, 2, 3, 4};
    for (size_t i = 0; i < 4; i++) {
        ck_assert_uint_eq(q.ids[i], want[i]);
        ck_assert(memcmp(q.v + i * 4, v + want[i] * 4, 16) == 0);
    }
    sd_vec_queries_free(&q);
    ck_assert_int_eq(sd_vec_queries_load(in("q.fvecs"), 0, NULL, 0, err, sizeof err, &q), 0);
    ck_assert_uint_eq(q.n, 10);
    sd_vec_queries_free(&q);
    ck_assert_int_eq(sd_vec_queries_load(in("q.fvecs"), 0, "3,10", 0, err, sizeof err, &q),
                     -EINVAL);
    ck_assert_msg(strstr(err, "row 10 is past the end") && strstr(err, "holds 10 vectors"), "%s",
                  err);
    ck_assert_int_eq(sd_vec_queries_load(in("q.fvecs"), 0, "3-x", 0, err, sizeof err, &q), -EINVAL);
    ck_assert_msg(strstr(err, "expected row numbers and ranges"), "%s", err);
    ck_assert_int_eq(sd_vec_queries_load(in("q.fvecs"), 0, "all", 5, err, sizeof err, &q), -EINVAL);
    ck_assert_msg(strstr(err, "at most 5 queries"), "%s", err);
    const int32_t ids[4] = {1, 2, 3, 4};
    it_xvecs_write(in("g.ivecs"), 1, 4, ids, 4);
    ck_assert_int_eq(sd_vec_queries_load(in("g.ivecs"), 0, NULL, 0, err, sizeof err, &q), -EINVAL);
    free(v);
}
END_TEST

static Suite *import_suite(void)
{
    Suite *s = suite_create("import");
    TCase *good = tcase_create("good");
    tcase_add_checked_fixture(good, setup, teardown);
    tcase_add_test(good, npy_versions_1_2_3_import_every_row_in_order_across_shards);
    tcase_add_test(good, header_spellings_python_writes_are_all_taken);
    tcase_add_test(good, f16_stays_f16_and_converts_both_ways_exactly_or_rounded);
    tcase_add_test(good, fvecs_bvecs_and_u8_npy_import_as_their_values);
    suite_add_tcase(s, good);
    TCase *bad = tcase_create("bad");
    tcase_add_checked_fixture(bad, setup, teardown);
    tcase_add_test(bad, truncated_data_is_refused_at_the_files_end);
    tcase_add_test(bad, truncated_header_is_refused_where_the_file_ends);
    tcase_add_test(bad, wrong_magic_is_refused_at_byte_0);
    tcase_add_test(bad, unknown_version_is_refused_at_byte_6);
    tcase_add_test(bad, fortran_order_is_refused_at_its_value);
    tcase_add_test(bad, object_and_structured_dtypes_are_refused_at_the_descr);
    tcase_add_test(bad, big_endian_is_refused_at_the_descr);
    tcase_add_test(bad, three_d_shape_is_refused_at_the_shape);
    tcase_add_test(bad, header_syntax_errors_are_refused_where_they_are);
    tcase_add_test(bad, fvecs_dims_that_disagree_are_refused_at_the_vector);
    tcase_add_test(bad, fvecs_cut_short_is_refused_at_its_last_vector);
    tcase_add_test(bad, zero_vectors_and_dim_0_are_refused);
    tcase_add_test(bad, dims_over_the_scans_maximum_are_refused);
    tcase_add_test(bad, ivecs_is_not_data_and_f16_overflow_and_mixed_dims_are_refused);
    suite_add_tcase(s, bad);
    TCase *store = tcase_create("store");
    tcase_add_checked_fixture(store, setup, teardown);
    tcase_add_test(store, an_existing_store_is_replaced_whole_or_left_as_it_was);
    tcase_add_test(store, force_replaces_only_a_store_and_never_a_file);
    tcase_add_test(store, a_cancelled_import_leaves_nothing_and_check_writes_nothing);
    tcase_add_test(store, query_rows_are_picked_by_list_and_range);
    suite_add_tcase(s, store);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(import_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
