/* The shard block checksum's C reference, and the way k_block_checksum
 * splits a block among threads (kernels/checksum_part.h), run on the CPU. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/blockhash.h"
#include "kernels/blockhash_ref.h"
#include "kernels/checksum.h"
#include "kernels/checksum_part.h"

/* xorshift64*: the seeded source of every test buffer (never all zeros). */
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

static unsigned char *rng_buffer(size_t n, uint64_t seed)
{
    unsigned char *p = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(p);
    rng_fill(p, n, seed);
    return p;
}

START_TEST(known_answers_freeze_the_format)
{
    /* Computed once from the reference; stored shards depend on them. */
    ck_assert_uint_eq(kr_block_checksum("", 0), 0x958f16febfcf7b14ULL);
    ck_assert_uint_eq(kr_block_checksum("a", 1), 0x8d2dbc66f0ec0f3eULL);
    ck_assert_uint_eq(kr_block_checksum("ab", 2), 0xe178592d1f87781eULL);
    ck_assert_uint_eq(kr_block_checksum("ab\0", 3), 0x1012106b9a5c55baULL);
    ck_assert_uint_eq(kr_block_checksum("lease_v1", 8), 0xbf33bbba65ea92c2ULL);
    ck_assert_uint_eq(kr_block_checksum("shard block 0", 13), 0xe5e6e17aa3994a3dULL);

    unsigned char *b = rng_buffer(10000, 1);
    ck_assert_uint_eq(kr_block_checksum(b, 4096), 0x83e94e501fc589eaULL);
    rng_fill(b, 10000, 0x5eed);
    /* The generator itself is part of the vector. */
    ck_assert_uint_eq(b[0], 0x4a);
    ck_assert_uint_eq(b[1], 0x18);
    ck_assert_uint_eq(b[9999], 0xa9);
    uint64_t sums[3];
    ck_assert_int_eq(kr_block_checksums(b, 10000, 4096, sums), 3);
    ck_assert_uint_eq(sums[0], 0x0e529c8fafdd5d0dULL);
    ck_assert_uint_eq(sums[1], 0x364b87cf2c9f66bcULL);
    ck_assert_uint_eq(sums[2], 0x8ebd277320e72234ULL);
    free(b);
}
END_TEST

START_TEST(same_bytes_give_same_checksum_at_any_alignment)
{
    unsigned char *b = rng_buffer(4096 + 16, 42);
    unsigned char *copy = malloc(4096 + 16);
    ck_assert_ptr_nonnull(copy);
    uint64_t want = kr_block_checksum(b, 4093);
    ck_assert_uint_eq(kr_block_checksum(b, 4093), want);
    for (size_t shift = 1; shift < 16; shift++) {
        memmove(copy + shift, b, 4093);
        ck_assert_uint_eq(kr_block_checksum(copy + shift, 4093), want);
    }
    free(copy);
    free(b);
}
END_TEST

START_TEST(every_single_bit_flip_changes_checksum)
{
    /* 1027 bytes: whole words and a 3-byte tail; every bit of both. */
    const size_t len = 1027;
    unsigned char *b = rng_buffer(len, 7);
    uint64_t want = kr_block_checksum(b, len);
    for (size_t bit = 0; bit < len * 8; bit++) {
        b[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        uint64_t got = kr_block_checksum(b, len);
        b[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        ck_assert_msg(got != want, "flipping bit %zu left the checksum at %#llx", bit,
                      (unsigned long long)want);
    }
    ck_assert_uint_eq(kr_block_checksum(b, len), want);

    /* Scattered flips in a large block. */
    const size_t big = 1 << 20;
    unsigned char *c = rng_buffer(big, 8);
    uint64_t s = 99, want_big = kr_block_checksum(c, big);
    for (int i = 0; i < 200; i++) {
        size_t bit = rng_next(&s) % (big * 8);
        c[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        ck_assert_uint_ne(kr_block_checksum(c, big), want_big);
        c[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    }
    free(c);
    free(b);
}
END_TEST

START_TEST(swapping_two_different_words_changes_checksum)
{
    const size_t words = 4096 / 8;
    unsigned char *b = rng_buffer(words * 8, 11);
    uint64_t want = kr_block_checksum(b, words * 8), s = 5;
    int swaps = 0;
    for (int i = 0; i < 2000; i++) {
        size_t x = rng_next(&s) % words, y = rng_next(&s) % words;
        if (x == y || memcmp(b + x * 8, b + y * 8, 8) == 0)
            continue;
        unsigned char t[8];
        memcpy(t, b + x * 8, 8);
        memcpy(b + x * 8, b + y * 8, 8);
        memcpy(b + y * 8, t, 8);
        ck_assert_msg(kr_block_checksum(b, words * 8) != want, "swapping words %zu and %zu", x, y);
        memcpy(b + y * 8, b + x * 8, 8);
        memcpy(b + x * 8, t, 8);
        swaps++;
    }
    ck_assert_int_gt(swaps, 1900);
    ck_assert_uint_eq(kr_block_checksum(b, words * 8), want);
    free(b);
}
END_TEST

START_TEST(appending_a_zero_byte_changes_checksum)
{
    unsigned char *b = rng_buffer(600, 13);
    for (size_t len = 0; len < 520; len++) {
        unsigned char keep = b[len];
        b[len] = 0;
        ck_assert_msg(kr_block_checksum(b, len) != kr_block_checksum(b, len + 1),
                      "length %zu and %zu + a zero byte collide", len, len);
        b[len] = keep;
    }
    free(b);
}
END_TEST

START_TEST(block_sums_cover_each_block_and_depend_on_block_size)
{
    const size_t len = 100000 + 5;
    unsigned char *b = rng_buffer(len, 17);
    const uint32_t sizes[] = {8, 64, 4096, 65536, 1u << 20};
    uint64_t firsts[5];
    for (size_t k = 0; k < 5; k++) {
        uint32_t bs = sizes[k];
        size_t n = kr_block_count(len, bs);
        ck_assert_uint_eq(n, (len + bs - 1) / bs);
        uint64_t *sums = calloc(n, sizeof(*sums));
        ck_assert_ptr_nonnull(sums);
        ck_assert_int_eq(kr_block_checksums(b, len, bs, sums), (long)n);
        for (size_t i = 0; i < n; i++) {
            size_t off = i * bs, this_len = len - off < bs ? len - off : bs;
            ck_assert_uint_eq(sums[i], kr_block_checksum(b + off, this_len));
        }
        ck_assert_int_eq(kr_block_verify(b, len, bs, sums), -1);
        firsts[k] = sums[0];
        free(sums);
    }
    for (size_t i = 0; i < 5; i++)
        for (size_t j = i + 1; j < 5; j++)
            ck_assert_uint_ne(firsts[i], firsts[j]);
    free(b);
}
END_TEST

START_TEST(verify_names_the_first_bad_block)
{
    const size_t len = 10 * 4096 + 100;
    unsigned char *b = rng_buffer(len, 19);
    uint64_t sums[11];
    ck_assert_int_eq(kr_block_checksums(b, len, 4096, sums), 11);
    b[7 * 4096 + 5] ^= 0x40;
    b[len - 1] ^= 1; /* the short last block */
    ck_assert_int_eq(kr_block_verify(b, len, 4096, sums), 7);
    b[7 * 4096 + 5] ^= 0x40;
    ck_assert_int_eq(kr_block_verify(b, len, 4096, sums), 10);
    free(b);
}
END_TEST

START_TEST(bad_block_sizes_are_refused)
{
    unsigned char b[64] = {1, 2, 3};
    uint64_t sums[64];
    const uint32_t bad[] = {0, 1, 7, 12, 4097};
    for (size_t i = 0; i < 5; i++) {
        ck_assert_int_eq(kr_block_checksums(b, sizeof(b), bad[i], sums), -EINVAL);
        ck_assert_int_eq(kr_block_verify(b, sizeof(b), bad[i], sums), -EINVAL);
    }
    ck_assert_uint_eq(kr_block_count(100, 0), 0);
    ck_assert_uint_eq(kr_block_count(0, 8), 0);
}
END_TEST

/* The kernel's thread shares, summed as the reduction does, finished. */
static uint64_t part_checksum(const unsigned char *p, size_t len, unsigned int nthreads)
{
    uint64_t sum = 0;
    for (unsigned int t = 0; t < nthreads; t++)
        sum += kn_thread_terms(p, len, t, nthreads);
    return kn_finish(sum, len);
}

START_TEST(kernel_thread_shares_add_up_to_reference)
{
    /* Starts 16-aligned and 8-but-not-16-aligned, as shard blocks do. */
    unsigned char *raw = rng_buffer((1 << 17) + 64, 23);
    unsigned char *a16 = (unsigned char *)(((uintptr_t)raw + 15) & ~(uintptr_t)15);
    const size_t lens[] = {0,  1,  7,   8,    9,    15,   16,   17,   23,   24,         25,     31,
                           32, 33, 100, 2048, 2051, 4088, 4095, 4096, 4097, 65536 + 13, 1 << 17};
    const unsigned int threads[] = {1, 2, 3, 32, KN_CHECKSUM_THREADS, 1000};
    for (size_t o = 0; o < 2; o++) {
        const unsigned char *p = a16 + 8 * o;
        for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
            uint64_t want = kr_block_checksum(p, lens[l]);
            for (size_t t = 0; t < sizeof(threads) / sizeof(threads[0]); t++)
                ck_assert_msg(part_checksum(p, lens[l], threads[t]) == want,
                              "offset %zu mod 16, %zu bytes, %u threads", 8 * o, lens[l],
                              threads[t]);
        }
    }
    free(raw);
}
END_TEST

START_TEST(kernel_grid_matches_reference_sums)
{
    /* The whole launch: one CUDA block per shard block, the last short. */
    const size_t len = 5 * 4104 + 1001;
    unsigned char *raw = rng_buffer(len + 16, 29);
    unsigned char *base = (unsigned char *)(((uintptr_t)raw + 15) & ~(uintptr_t)15);
    const uint32_t sizes[] = {8, 24, 4096, 4104};
    for (size_t k = 0; k < 4; k++) {
        size_t n = kr_block_count(len, sizes[k]);
        uint64_t *want = calloc(n, sizeof(*want));
        ck_assert_ptr_nonnull(want);
        ck_assert_int_eq(kr_block_checksums(base, len, sizes[k], want), (long)n);
        for (size_t b = 0; b < n; b++) {
            size_t off = b * sizes[k], this_len = len - off < sizes[k] ? len - off : sizes[k];
            ck_assert_uint_eq(part_checksum(base + off, this_len, KN_CHECKSUM_THREADS), want[b]);
        }
        free(want);
    }
    free(raw);
}
END_TEST

static Suite *blockhash_suite(void)
{
    Suite *s = suite_create("blockhash");
    TCase *ref = tcase_create("reference");
    tcase_add_test(ref, known_answers_freeze_the_format);
    tcase_add_test(ref, same_bytes_give_same_checksum_at_any_alignment);
    tcase_add_test(ref, every_single_bit_flip_changes_checksum);
    tcase_add_test(ref, swapping_two_different_words_changes_checksum);
    tcase_add_test(ref, appending_a_zero_byte_changes_checksum);
    tcase_add_test(ref, block_sums_cover_each_block_and_depend_on_block_size);
    tcase_add_test(ref, verify_names_the_first_bad_block);
    tcase_add_test(ref, bad_block_sizes_are_refused);
    tcase_set_timeout(ref, 60);
    suite_add_tcase(s, ref);
    TCase *part = tcase_create("kernel_partition");
    tcase_add_test(part, kernel_thread_shares_add_up_to_reference);
    tcase_add_test(part, kernel_grid_matches_reference_sums);
    tcase_set_timeout(part, 60);
    suite_add_tcase(s, part);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(blockhash_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
