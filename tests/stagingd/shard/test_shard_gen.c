/* The generator, size parsing and the binary16 conversion. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h" /* sd_gen_cli, sd_verify_cli */
#include "shard_test_util.h"
#include "stagingd/shard.h"

static char err[SD_ERR_LEN];

/* Runs `stagingd gen --quiet` with @args (NULL-terminated). */
static int run_gen(const char *const *args)
{
    char *argv[32];
    int argc = 0;
    argv[argc++] = (char *)"gen";
    argv[argc++] = (char *)"--quiet";
    for (; *args; args++)
        argv[argc++] = (char *)*args;
    argv[argc] = NULL;
    return sd_gen_cli(argc, argv);
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Every file generated into @a has an identical twin in @b. */
static int stores_identical(const char *a, const char *b, int shards)
{
    char pa[8192], pb[8192];
    for (int i = -1; i < shards; i++) {
        char name[32];
        if (i < 0)
            snprintf(name, sizeof(name), "MANIFEST");
        else
            snprintf(name, sizeof(name), "shard-%06d.sds", i);
        snprintf(pa, sizeof(pa), "%s", st_join(a, name));
        snprintf(pb, sizeof(pb), "%s", st_join(b, name));
        if (!st_files_equal(pa, pb))
            return 0;
    }
    return 1;
}

START_TEST(same_seed_gives_identical_bytes_and_another_seed_differs)
{
    static const char *const types[] = {"f32", "f16"};
    for (int t = 0; t < 2; t++) {
        char a[4096], b[4096], c[4096];
        snprintf(a, sizeof(a), "%s/s", st_dir_new());
        snprintf(b, sizeof(b), "%s/s", st_dir_new());
        snprintf(c, sizeof(c), "%s/s", st_dir_new());
        const char *args_a[] = {"--out", a,        "--size", "1MiB",   "--shard-size=300K",
                                "--dim", "33",     "--type", types[t], "--block-size",
                                "4KiB",  "--seed", "7",      NULL};
        const char *args_b[] = {"--out", b,          "--size", "1MiB",   "--shard-size",
                                "300K",  "--dim=33", "--type", types[t], "--block-size",
                                "4096",  "--seed",   "7",      NULL};
        const char *args_c[] = {"--out",        c,       "--size", "1MiB",   "--shard-size",
                                "300K",         "--dim", "33",     "--type", types[t],
                                "--block-size", "4KiB",  "--seed", "8",      NULL};
        ck_assert_int_eq(run_gen(args_a), 0);
        ck_assert_int_eq(run_gen(args_b), 0);
        ck_assert_int_eq(run_gen(args_c), 0);
        ck_assert_msg(file_exists(st_join(a, "shard-000003.sds")), "expected 4 shards");
        ck_assert_msg(!file_exists(st_join(a, "shard-000004.sds")), "expected 4 shards");
        ck_assert_msg(stores_identical(a, b, 4), "same seed, different bytes (%s)", types[t]);
        char pa[8192], pc[8192];
        for (int i = 0; i < 4; i++) {
            char name[32];
            snprintf(name, sizeof(name), "shard-%06d.sds", i);
            snprintf(pa, sizeof(pa), "%s", st_join(a, name));
            snprintf(pc, sizeof(pc), "%s", st_join(c, name));
            ck_assert_msg(!st_files_equal(pa, pc), "seeds 7 and 8 gave the same %s", name);
        }
        struct sd_store *st;
        ck_assert_int_eq(sd_store_open(a, err, sizeof(err), &st), 0);
        ck_assert_int_eq(sd_store_verify(st, NULL, NULL, err, sizeof(err), NULL), 0);
        sd_store_close(st);
    }
}
END_TEST

/* Reads shard @i of store @dir whole; *@n_p = payload bytes. */
static unsigned char *payload_of(const char *dir, int i, size_t *n_p)
{
    char name[32], path[8192];
    snprintf(name, sizeof(name), "shard-%06d.sds", i);
    snprintf(path, sizeof(path), "%s", st_join(dir, name));
    struct sd_shard *s;
    ck_assert_int_eq(sd_shard_open(path, err, sizeof(err), &s), 0);
    size_t len;
    unsigned char *file = st_read_file(path, &len);
    size_t n = (size_t)sd_shard_payload_len(s);
    memmove(file, file + sd_shard_payload_offset(s), n);
    sd_shard_close(s);
    *n_p = n;
    return file;
}

START_TEST(vectors_lie_in_range_are_never_zero_and_f16_rounds_f32)
{
    char d32[4096], d16[4096];
    snprintf(d32, sizeof(d32), "%s", st_dir_new());
    snprintf(d16, sizeof(d16), "%s", st_dir_new());
    const char *a32[] = {"--out", d32, "--size", "512K",   "--shard-size", "512K",
                         "--dim", "3", "--seed", "0x5eed", "--force",      NULL};
    const char *a16[] = {"--out", d16,      "--size", "256K",   "--shard-size", "256K",    "--dim",
                         "3",     "--type", "f16",    "--seed", "0x5eed",       "--force", NULL};
    ck_assert_int_eq(run_gen(a32), 0);
    ck_assert_int_eq(run_gen(a16), 0);
    size_t n32, n16;
    unsigned char *p32 = payload_of(d32, 0, &n32), *p16 = payload_of(d16, 0, &n16);
    ck_assert_uint_eq(n32 / 4, n16 / 2); /* the same records, half the bytes */
    size_t elems = n32 / 4, negative = 0;
    double sum = 0;
    for (size_t i = 0; i < elems; i++) {
        float f;
        uint16_t h;
        memcpy(&f, p32 + 4 * i, 4);
        memcpy(&h, p16 + 2 * i, 2);
        ck_assert_msg(f >= -1.0f && f <= 1.0f, "element %zu = %g out of [-1, 1]", i, (double)f);
        ck_assert_uint_eq(h, sd_f16_from_f32(f));
        negative += f < 0;
        sum += f;
    }
    for (size_t r = 0; r < elems / 3; r++) {
        float v[3];
        memcpy(v, p32 + 12 * r, 12);
        ck_assert_msg(v[0] != 0 || v[1] != 0 || v[2] != 0, "record %zu is all zeros", r);
    }
    /* Uniform on [-1, 1): about half negative, mean near 0. */
    ck_assert_msg(negative > elems * 45 / 100 && negative < elems * 55 / 100, "%zu of %zu negative",
                  negative, elems);
    ck_assert_msg(fabs(sum / (double)elems) < 0.02, "mean %g", sum / (double)elems);
    free(p32);
    free(p16);
}
END_TEST

START_TEST(a_record_that_draws_all_zeros_is_replaced)
{
    /* Find a seed whose first draw of shard 0 maps to 0.0 in a 1-dim record
     * (1 in 2^24 per try is too rare), so drive the state directly: the
     * record function must turn a zero record into 1.0. xoshiro's output for
     * state {s0, s1, ...} is rotl(s1 * 5, 7) * 9; pick s1 with the top 24
     * bits of the output equal to 0x800000. */
    uint64_t want = 0x800000ull << 40;
    /* Invert: out = rotl(s1*5, 7) * 9 => s1 = rotr(out * 9^-1, 7) * 5^-1 (mod 2^64). */
    uint64_t inv9 = 0x8e38e38e38e38e39ull, inv5 = 0xcccccccccccccccdull;
    ck_assert_uint_eq(9 * inv9, 1);
    ck_assert_uint_eq(5 * inv5, 1);
    uint64_t x = want * inv9;
    x = (x >> 7) | (x << 57);
    uint64_t state[4] = {0x1234, x * inv5, 0x5678, 0x9abc};
    float f;
    sd_gen_records(state, SD_RECORD_F32, 1, 1, &f);
    ck_assert_msg(f == 1.0f, "an all-zero record came out as %g", (double)f);
    uint64_t state16[4] = {0x1234, x * inv5, 0x5678, 0x9abc};
    uint16_t h;
    sd_gen_records(state16, SD_RECORD_F16, 1, 1, &h);
    ck_assert_uint_eq(h, 0x3c00);
}
END_TEST

START_TEST(cli_refuses_bad_arguments_and_non_empty_directories)
{
    char d[4096];
    snprintf(d, sizeof(d), "%s", st_dir_new());
    const char *no_out[] = {"--size", "1M", NULL};
    const char *bad_size[] = {"--out", d, "--size", "1GB", NULL};
    const char *bad_type[] = {"--out", d, "--type", "f64", NULL};
    const char *unknown[] = {"--out", d, "--fast", NULL};
    const char *missing[] = {"--out", d, "--dim", NULL};
    const char *bad_seed[] = {"--out", d, "--seed", "-1", NULL};
    const char *bad_block[] = {"--out", d, "--size", "1M", "--block-size", "4100", NULL};
    const char *tiny_shard[] = {"--out", d, "--size", "1M", "--shard-size", "100", NULL};
    ck_assert_int_eq(run_gen(no_out), 2);
    ck_assert_int_eq(run_gen(bad_size), 2);
    ck_assert_int_eq(run_gen(bad_type), 2);
    ck_assert_int_eq(run_gen(unknown), 2);
    ck_assert_int_eq(run_gen(missing), 2);
    ck_assert_int_eq(run_gen(bad_seed), 2);
    ck_assert_int_eq(run_gen(bad_block), 1);
    ck_assert_int_eq(run_gen(tiny_shard), 1);
    ck_assert_msg(!file_exists(st_join(d, "MANIFEST")), "a refused run wrote a store");

    /* Four shards, then two over them with --force: the stale ones go. */
    const char *four[] = {"--out", d, "--size", "64K", "--shard-size", "16K", NULL};
    const char *two[] = {"--out", d, "--size", "32K", "--shard-size", "16K", NULL};
    const char *two_forced[] = {"--out",        d,     "--size",  "32K",
                                "--shard-size", "16K", "--force", NULL};
    ck_assert_int_eq(run_gen(four), 0);
    ck_assert_msg(file_exists(st_join(d, "shard-000003.sds")), "expected 4 shards");
    ck_assert_int_eq(run_gen(two), 1);
    st_write_file(st_join(d, "keep.txt"), "x", 1);
    ck_assert_int_eq(run_gen(two_forced), 0);
    ck_assert_msg(!file_exists(st_join(d, "shard-000002.sds")), "stale shard 2 left behind");
    ck_assert_msg(!file_exists(st_join(d, "shard-000003.sds")), "stale shard 3 left behind");
    ck_assert_msg(file_exists(st_join(d, "keep.txt")), "a foreign file was removed");
    struct sd_store *st;
    ck_assert_int_eq(sd_store_open(d, err, sizeof(err), &st), 0);
    ck_assert_uint_eq(sd_store_count(st), 2);
    sd_store_close(st);

    /* The output must be a directory; its parent must exist. */
    const char *on_file[] = {"--out", st_join(d, "keep.txt"), NULL};
    ck_assert_int_eq(run_gen(on_file), 1);
}
END_TEST

START_TEST(verify_cli_accepts_good_and_refuses_corrupt_stores)
{
    char d[4096];
    snprintf(d, sizeof(d), "%s/v", st_dir_new());
    const char *args[] = {"--out", d, "--size", "100K", "--shard-size", "40K", NULL};
    ck_assert_int_eq(run_gen(args), 0);
    char *ok_dir[] = {(char *)"verify", d, (char *)"--quiet", NULL};
    ck_assert_int_eq(sd_verify_cli(3, ok_dir), 0);
    char shard[8192];
    snprintf(shard, sizeof(shard), "%s", st_join(d, "shard-000001.sds"));
    char *ok_file[] = {(char *)"verify", shard, (char *)"--quiet", NULL};
    ck_assert_int_eq(sd_verify_cli(3, ok_file), 0);
    st_flip_bit(shard, 4096 + 100, 0);
    ck_assert_int_eq(sd_verify_cli(3, ok_dir), 1);
    ck_assert_int_eq(sd_verify_cli(3, ok_file), 1);
    char *usage[] = {(char *)"verify", NULL};
    ck_assert_int_eq(sd_verify_cli(1, usage), 2);
}
END_TEST

START_TEST(sizes_parse_with_binary_suffixes)
{
    static const struct {
        const char *s;
        uint64_t v;
    } ok[] = {
        {"0", 0},
        {"4096", 4096},
        {"7B", 7},
        {"1K", 1024},
        {"256KiB", 256 << 10},
        {"64M", 64 << 20},
        {"64MiB", 64 << 20},
        {"1G", 1ull << 30},
        {"3GiB", 3ull << 30},
        {"2TiB", 2ull << 40},
        {"18446744073709551615", UINT64_MAX},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        uint64_t v = 12345;
        ck_assert_msg(base_parse_size_flags(ok[i].s, BASE_PARSE_SIZE_STRICT, &v, NULL, 0) == 0,
                      "'%s' refused", ok[i].s);
        ck_assert_uint_eq(v, ok[i].v);
    }
    static const char *const bad[] = {"",   "K",   "-1",   "+1",  " 1",   "1 K",  "1KB",
                                      "1k", "1MB", "1.5G", "1Gi", "0x10", "1GiBs"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t v = 12345;
        ck_assert_msg(base_parse_size_flags(bad[i], BASE_PARSE_SIZE_STRICT, &v, NULL, 0) == -EINVAL,
                      "'%s' accepted", bad[i]);
        ck_assert_uint_eq(v, 12345);
    }
    uint64_t v;
    ck_assert_int_eq(
        base_parse_size_flags("18446744073709551616", BASE_PARSE_SIZE_STRICT, &v, NULL, 0),
        -ERANGE);
    ck_assert_int_eq(base_parse_size_flags("16777216TiB", BASE_PARSE_SIZE_STRICT, &v, NULL, 0),
                     -ERANGE);
    ck_assert_int_eq(base_parse_size_flags("16777215TiB", BASE_PARSE_SIZE_STRICT, &v, NULL, 0), 0);
}
END_TEST

static float from_bits(uint32_t x)
{
    float f;
    memcpy(&f, &x, 4);
    return f;
}

START_TEST(f16_conversion_is_exact_and_rounds_ties_to_even)
{
    static const struct {
        float f;
        uint16_t h;
    } cases[] = {
        {1.0f, 0x3c00},
        {-2.0f, 0xc000},
        {0.5f, 0x3800},
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {65504.0f, 0x7bff}, /* largest finite */
        {65519.0f, 0x7bff}, /* below the halfway point to 65536 */
        {65520.0f, 0x7c00}, /* the tie rounds to even: 65536, infinity */
        {1e10f, 0x7c00},
        {-1e10f, 0xfc00},
        {0x1p-24f, 0x0001}, /* smallest subnormal */
        {-0x1p-24f, 0x8001},
        {0x1p-25f, 0x0000},                   /* half of it: a tie, to even 0 */
        {0x1.8p-25f, 0x0001},                 /* above the tie */
        {0x1.8p-24f, 0x0002},                 /* 1.5 units: tie, to even 2 */
        {0x1.4p-23f, 0x0002},                 /* 2.5 units: tie, to even 2 */
        {0x1.ff8p-15f, 0x03ff},               /* largest subnormal, 1023 units */
        {0x1.ffcp-15f, 0x0400},               /* 1023.5 units: tie, to even 1024, a normal */
        {0x1.ff9p-15f, 0x03ff},               /* just above 1023 units */
        {0x1p-14f, 0x0400},                   /* smallest normal */
        {1.0f + 0x1p-11f, 0x3c00},            /* tie between 1 and 1+2^-10: even is 1 */
        {1.0f + 0x3p-11f, 0x3c02},            /* tie between 0x3c01 and 0x3c02: even */
        {1.0f + 0x1p-11f + 0x1p-20f, 0x3c01}, /* just above the tie */
        {0x1p-40f, 0x0000},                   /* underflows to zero */
        {3.14159265f, 0x4248},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        ck_assert_msg(sd_f16_from_f32(cases[i].f) == cases[i].h,
                      "f16(%a): expected %04x, found %04x", (double)cases[i].f, cases[i].h,
                      sd_f16_from_f32(cases[i].f));
    ck_assert_uint_eq(sd_f16_from_f32(INFINITY), 0x7c00);
    ck_assert_uint_eq(sd_f16_from_f32(-INFINITY), 0xfc00);
    uint16_t nan = sd_f16_from_f32(NAN);
    ck_assert_msg((nan & 0x7c00) == 0x7c00 && (nan & 0x3ff), "NaN became %04x", nan);
    ck_assert_msg(sd_f16_from_f32(from_bits(0x7f800001)) & 0x3ff, "a signalling NaN became inf");
}
END_TEST

START_TEST(every_f16_value_survives_a_round_trip_through_f32)
{
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = sd_f16_to_f32((uint16_t)h);
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
            ck_assert_msg(isnan(f), "%04x is NaN, found %g", h, (double)f);
            continue;
        }
        ck_assert_msg(sd_f16_from_f32(f) == h, "%04x -> %a -> %04x", h, (double)f,
                      sd_f16_from_f32(f));
    }
    ck_assert_msg(sd_f16_to_f32(0x0001) == 0x1p-24f, "smallest subnormal");
    ck_assert_msg(sd_f16_to_f32(0x7bff) == 65504.0f, "largest finite");
}
END_TEST

START_TEST(f16_conversion_matches_the_compiler_on_random_floats)
{
#ifdef __FLT16_MAX__
    uint64_t seed = 0xf16f16;
    for (int i = 0; i < 2000000; i++) {
        uint32_t x = (uint32_t)st_rand(&seed);
        /* Half the draws near binary16's range, where rounding matters. */
        if (i & 1)
            x = (x & 0x80ffffffu) | ((uint32_t)(100 + st_rand(&seed) % 45) << 23);
        float f = from_bits(x);
        if (isnan(f))
            continue;
        _Float16 c = (_Float16)f;
        uint16_t want;
        memcpy(&want, &c, 2);
        ck_assert_msg(sd_f16_from_f32(f) == want, "f16(%a): compiler %04x, ours %04x", (double)f,
                      want, sd_f16_from_f32(f));
    }
#else
    fprintf(stderr, "no _Float16 in this compiler: cross-check skipped\n");
#endif
}
END_TEST

TCase *st_gen_tcase(void)
{
    TCase *tc = tcase_create("gen");
    tcase_add_unchecked_fixture(tc, st_root_setup, st_root_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, same_seed_gives_identical_bytes_and_another_seed_differs);
    tcase_add_test(tc, vectors_lie_in_range_are_never_zero_and_f16_rounds_f32);
    tcase_add_test(tc, a_record_that_draws_all_zeros_is_replaced);
    tcase_add_test(tc, cli_refuses_bad_arguments_and_non_empty_directories);
    tcase_add_test(tc, verify_cli_accepts_good_and_refuses_corrupt_stores);
    tcase_add_test(tc, sizes_parse_with_binary_suffixes);
    tcase_add_test(tc, f16_conversion_is_exact_and_rounds_ties_to_even);
    tcase_add_test(tc, every_f16_value_survives_a_round_trip_through_f32);
    tcase_add_test(tc, f16_conversion_matches_the_compiler_on_random_floats);
    return tc;
}
