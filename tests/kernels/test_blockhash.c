/* The shard block checksum's C reference, its vector implementations (each
 * against the reference), and the way k_block_checksum splits a block among
 * threads (kernels/checksum_part.h), run on the CPU. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
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

/* The fast implementations, each forced in turn through kr_block_impl_set. */

static const enum kr_block_impl all_impls[] = {KR_BLOCK_IMPL_SCALAR, KR_BLOCK_IMPL_SSE2,
                                               KR_BLOCK_IMPL_AVX2, KR_BLOCK_IMPL_AVX512};
#define N_IMPLS (sizeof(all_impls) / sizeof(all_impls[0]))

/* Forces @impl; 0 (and a note, once per test) where this CPU lacks it. */
static int use_impl(enum kr_block_impl impl)
{
    static unsigned int noted; /* per test: Check forks each one */
    int rc = kr_block_impl_set(impl);
    if (rc == -ENOTSUP) {
        if (!(noted & (1u << impl)))
            fprintf(stderr, "blockhash: %s not supported here; its cases skipped\n",
                    kr_block_impl_name(impl));
        noted |= 1u << impl;
        return 0;
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(kr_block_impl_get(), impl);
    return 1;
}

/* Words that make the mixer's input 0 or all ones (word == its index key,
 * or its complement), then all-zero and all-ones words, then random. */
static void fill_pattern(unsigned char *p, size_t n, int pattern, uint64_t seed)
{
    if (pattern >= 4) {
        rng_fill(p, n, seed);
        return;
    }
    for (size_t i = 0; i < n; i += 8) {
        uint64_t key = KN_SEED + (uint64_t)(i / 8) * KN_INDEX_KEY;
        uint64_t v = pattern == 0 ? key : pattern == 1 ? ~key : pattern == 2 ? 0 : ~(uint64_t)0;
        memcpy(p + i, &v, n - i < 8 ? n - i : 8);
    }
}

START_TEST(every_impl_matches_reference_at_every_length_and_alignment)
{
    /* Every length up to 1100 bytes: word counts on both sides of each
     * vector step (2 x 8 lanes = 128 bytes at most), every 0..7-byte tail,
     * at every start offset modulo 16. */
    const size_t max_len = 1100, slack = 16;
    unsigned char *buf = malloc(max_len + slack);
    uint64_t *want = malloc((max_len + 1) * slack * sizeof(*want));
    ck_assert_ptr_nonnull(buf);
    ck_assert_ptr_nonnull(want);
    for (int pattern = 0; pattern < 5; pattern++) {
        for (size_t off = 0; off < slack; off++) {
            fill_pattern(buf + off, max_len, pattern, 31 + off);
            for (size_t len = 0; len <= max_len; len++)
                want[off * (max_len + 1) + len] = kr_block_checksum_scalar(buf + off, len);
        }
        for (size_t m = 0; m < N_IMPLS; m++) {
            if (!use_impl(all_impls[m]))
                continue;
            for (size_t off = 0; off < slack; off++) {
                fill_pattern(buf + off, max_len, pattern, 31 + off);
                for (size_t len = 0; len <= max_len; len++)
                    ck_assert_msg(kr_block_checksum(buf + off, len) ==
                                      want[off * (max_len + 1) + len],
                                  "%s: pattern %d, offset %zu, %zu bytes",
                                  kr_block_impl_name(all_impls[m]), pattern, off, len);
            }
        }
    }
    ck_assert_int_eq(kr_block_impl_set(KR_BLOCK_IMPL_AUTO), 0);
    free(want);
    free(buf);
}
END_TEST

START_TEST(every_impl_matches_reference_on_large_blocks)
{
    /* Up to the shard format's largest block (64 MiB, 8M words: index keys
     * far from 0), with and without a tail, at an odd start. */
    const size_t lens[] = {4096,
                           4096 + 8,
                           4096 + 5,
                           (256u << 10),
                           (256u << 10) + 3,
                           (1u << 20) + 7 * 8 + 1,
                           (64u << 20) - 8,
                           64u << 20};
    const size_t max_len = 64u << 20;
    unsigned char *raw = rng_buffer(max_len + 8, 37);
    unsigned char *p = raw + 3;
    for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
        uint64_t want = kr_block_checksum_scalar(p, lens[l]);
        for (size_t m = 0; m < N_IMPLS; m++)
            if (use_impl(all_impls[m]))
                ck_assert_msg(kr_block_checksum(p, lens[l]) == want, "%s: %zu bytes",
                              kr_block_impl_name(all_impls[m]), lens[l]);
    }
    ck_assert_int_eq(kr_block_impl_set(KR_BLOCK_IMPL_AUTO), 0);
    free(raw);
}
END_TEST

START_TEST(every_impl_matches_reference_for_every_block_size_class)
{
    /* The smallest multiples of 8, odd multiples around the vector step,
     * the shard sizes (4 KiB minimum, 256 KiB default), each over a length
     * whose last block is short and ends in a tail. */
    const uint32_t sizes[] = {8,        16,   24,   120,  128,   136,
                              4096 - 8, 4096, 4104, 8200, 65536, 256u << 10};
    const size_t len = 3 * (256u << 10) + 4096 + 13;
    unsigned char *raw = rng_buffer(len + 8, 41);
    for (size_t o = 0; o < 2; o++) {
        const unsigned char *p = raw + o * 5;
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
            const uint32_t bs = sizes[k];
            const size_t n = kr_block_count(len, bs);
            uint64_t *want = malloc(n * sizeof(*want)), *got = malloc(n * sizeof(*got));
            ck_assert_ptr_nonnull(want);
            ck_assert_ptr_nonnull(got);
            for (size_t b = 0; b < n; b++) {
                size_t off = b * bs, this_len = len - off < bs ? len - off : bs;
                want[b] = kr_block_checksum_scalar(p + off, this_len);
            }
            for (size_t m = 0; m < N_IMPLS; m++) {
                if (!use_impl(all_impls[m]))
                    continue;
                memset(got, 0, n * sizeof(*got));
                ck_assert_int_eq(kr_block_checksums(p, len, bs, got), (long)n);
                ck_assert_msg(memcmp(got, want, n * sizeof(*got)) == 0,
                              "%s: block size %u, offset %zu", kr_block_impl_name(all_impls[m]), bs,
                              o * 5);
                ck_assert_int_eq(kr_block_verify(p, len, bs, want), -1);
            }
            free(got);
            free(want);
        }
    }
    ck_assert_int_eq(kr_block_impl_set(KR_BLOCK_IMPL_AUTO), 0);
    free(raw);
}
END_TEST

START_TEST(every_impl_verify_finds_a_flip_anywhere_in_a_block)
{
    /* One bit in: the first word, the last vector step, the words the vector
     * loop leaves to the scalar one, the tail. Blocks of 4104 bytes (513
     * words); the last block of 1037 bytes (129 words and a 5-byte tail). */
    const uint32_t bs = 4104;
    const size_t len = 3 * 4104 + 1037;
    unsigned char *b = rng_buffer(len, 43);
    uint64_t sums[4];
    ck_assert_int_eq(kr_block_checksums(b, len, bs, sums), 4);
    const size_t where[] = {0,
                            7,
                            8 * 496,
                            8 * 511 + 3,
                            8 * 512 + 7,
                            bs + 100,
                            2 * bs + 8 * 512,
                            3 * bs + 8 * 128,
                            3 * bs + 8 * 129,
                            len - 1};
    for (size_t m = 0; m < N_IMPLS; m++) {
        if (!use_impl(all_impls[m]))
            continue;
        for (size_t w = 0; w < sizeof(where) / sizeof(where[0]); w++) {
            b[where[w]] ^= 0x10;
            ck_assert_msg(kr_block_verify(b, len, bs, sums) == (long)(where[w] / bs),
                          "%s: flipped byte %zu", kr_block_impl_name(all_impls[m]), where[w]);
            b[where[w]] ^= 0x10;
        }
        ck_assert_int_eq(kr_block_verify(b, len, bs, sums), -1);
    }
    ck_assert_int_eq(kr_block_impl_set(KR_BLOCK_IMPL_AUTO), 0);
    free(b);
}
END_TEST

START_TEST(every_impl_gives_the_known_answers)
{
    unsigned char *b = rng_buffer(10000, 1);
    for (size_t m = 0; m <= N_IMPLS; m++) {
        /* m == N_IMPLS: kr_block_checksum_scalar itself. */
        const int scalar = m == N_IMPLS;
        if (!scalar && !use_impl(all_impls[m]))
            continue;
        uint64_t (*const sum)(const void *, size_t) =
            scalar ? kr_block_checksum_scalar : kr_block_checksum;
        rng_fill(b, 10000, 1);
        ck_assert_uint_eq(sum("", 0), 0x958f16febfcf7b14ULL);
        ck_assert_uint_eq(sum("a", 1), 0x8d2dbc66f0ec0f3eULL);
        ck_assert_uint_eq(sum("ab", 2), 0xe178592d1f87781eULL);
        ck_assert_uint_eq(sum("ab\0", 3), 0x1012106b9a5c55baULL);
        ck_assert_uint_eq(sum("lease_v1", 8), 0xbf33bbba65ea92c2ULL);
        ck_assert_uint_eq(sum("shard block 0", 13), 0xe5e6e17aa3994a3dULL);
        ck_assert_uint_eq(sum(b, 4096), 0x83e94e501fc589eaULL);
        rng_fill(b, 10000, 0x5eed);
        ck_assert_uint_eq(sum(b, 4096), 0x0e529c8fafdd5d0dULL);
        ck_assert_uint_eq(sum(b + 4096, 4096), 0x364b87cf2c9f66bcULL);
        ck_assert_uint_eq(sum(b + 8192, 10000 - 8192), 0x8ebd277320e72234ULL);
        if (!scalar) {
            uint64_t sums[3];
            ck_assert_int_eq(kr_block_checksums(b, 10000, 4096, sums), 3);
            ck_assert_uint_eq(sums[0], 0x0e529c8fafdd5d0dULL);
            ck_assert_uint_eq(sums[1], 0x364b87cf2c9f66bcULL);
            ck_assert_uint_eq(sums[2], 0x8ebd277320e72234ULL);
        }
    }
    ck_assert_int_eq(kr_block_impl_set(KR_BLOCK_IMPL_AUTO), 0);
    free(b);
}
END_TEST

/* 1 when /proc/cpuinfo's first flags line names @flag; -1 when unreadable. */
static int cpuinfo_has(const char *flag)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return -1;
    char line[8192];
    int found = -1;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "flags", 5) != 0)
            continue;
        found = 0;
        for (char *tok = strtok(strchr(line, ':') + 1, " \n"); tok; tok = strtok(NULL, " \n"))
            if (strcmp(tok, flag) == 0)
                found = 1;
        break;
    }
    fclose(f);
    return found;
}

START_TEST(dispatch_picks_the_widest_supported_and_refuses_the_rest)
{
    ck_assert_int_eq(kr_block_impl_set(KR_BLOCK_IMPL_AUTO), 0);
    const enum kr_block_impl chosen = kr_block_impl_get();
    ck_assert_int_ne(chosen, KR_BLOCK_IMPL_AUTO);
    ck_assert_int_eq(kr_block_impl_supported(chosen), 1);
    ck_assert_int_eq(kr_block_impl_supported(KR_BLOCK_IMPL_AUTO), 1);
    ck_assert_int_eq(kr_block_impl_supported(KR_BLOCK_IMPL_SCALAR), 1);
    fprintf(stderr, "blockhash: auto chose %s; supported here:", kr_block_impl_name(chosen));
    for (size_t m = 0; m < N_IMPLS; m++)
        if (kr_block_impl_supported(all_impls[m]))
            fprintf(stderr, " %s", kr_block_impl_name(all_impls[m]));
    fprintf(stderr, "\n");

    /* Fastest first: nothing after the chosen one in this list is used. */
    const enum kr_block_impl fastest_first[] = {KR_BLOCK_IMPL_AVX512, KR_BLOCK_IMPL_AVX2,
                                                KR_BLOCK_IMPL_SSE2, KR_BLOCK_IMPL_SCALAR};
    for (size_t i = 0; fastest_first[i] != chosen; i++)
        ck_assert_msg(!kr_block_impl_supported(fastest_first[i]), "%s is supported, %s chosen",
                      kr_block_impl_name(fastest_first[i]), kr_block_impl_name(chosen));

#if defined(__x86_64__)
    /* The kernel's view of the CPU, independent of the dispatcher's CPUID. */
    const int avx2 = cpuinfo_has("avx2"), f = cpuinfo_has("avx512f"), dq = cpuinfo_has("avx512dq");
    if (avx2 >= 0) {
        ck_assert_int_eq(kr_block_impl_supported(KR_BLOCK_IMPL_SSE2), 1);
        ck_assert_int_eq(kr_block_impl_supported(KR_BLOCK_IMPL_AVX2), avx2);
        ck_assert_int_eq(kr_block_impl_supported(KR_BLOCK_IMPL_AVX512), f == 1 && dq == 1);
        ck_assert_int_eq(chosen, f == 1 && dq == 1 ? KR_BLOCK_IMPL_AVX512
                                 : avx2            ? KR_BLOCK_IMPL_AVX2
                                                   : KR_BLOCK_IMPL_SSE2);
    }
#else
    ck_assert_int_eq(chosen, KR_BLOCK_IMPL_SCALAR);
#endif

    /* Refusals change nothing. */
    for (size_t m = 0; m < N_IMPLS; m++) {
        ck_assert_ptr_nonnull(kr_block_impl_name(all_impls[m]));
        if (!kr_block_impl_supported(all_impls[m])) {
            ck_assert_int_eq(kr_block_impl_set(all_impls[m]), -ENOTSUP);
            ck_assert_int_eq(kr_block_impl_get(), chosen);
        }
    }
    ck_assert_int_eq(kr_block_impl_set(KR_BLOCK_IMPL_SCALAR), 0);
    ck_assert_int_eq(kr_block_impl_set(KR_BLOCK_IMPL__COUNT), -EINVAL);
    ck_assert_int_eq(kr_block_impl_set((enum kr_block_impl) - 1), -EINVAL);
    ck_assert_int_eq(kr_block_impl_get(), KR_BLOCK_IMPL_SCALAR);
    ck_assert_int_eq(kr_block_impl_supported(KR_BLOCK_IMPL__COUNT), 0);
    ck_assert_ptr_null(kr_block_impl_name(KR_BLOCK_IMPL__COUNT));
    ck_assert_str_eq(kr_block_impl_name(KR_BLOCK_IMPL_AUTO), "auto");
    for (size_t a = 0; a < N_IMPLS; a++)
        for (size_t c = a + 1; c < N_IMPLS; c++)
            ck_assert_str_ne(kr_block_impl_name(all_impls[a]), kr_block_impl_name(all_impls[c]));
    /* AUTO again: the same choice as at first use. */
    ck_assert_int_eq(kr_block_impl_set(KR_BLOCK_IMPL_AUTO), 0);
    ck_assert_int_eq(kr_block_impl_get(), chosen);
}
END_TEST

struct hash_worker {
    const unsigned char *buf;
    size_t len;
    const uint64_t *want; /* 4096-byte blocks */
    atomic_int *done;     /* workers finished */
    long bad;             /* what kr_block_verify returned other than -1 */
};

static void *hash_worker_run(void *arg)
{
    struct hash_worker *w = arg;
    w->bad = -1;
    for (int i = 0; i < 300 && w->bad == -1; i++)
        w->bad = kr_block_verify(w->buf, w->len, 4096, w->want);
    atomic_fetch_add(w->done, 1);
    return NULL;
}

START_TEST(threads_hash_while_the_impl_changes)
{
    const size_t len = 16 * 4096 + 77;
    unsigned char *b = rng_buffer(len, 47);
    uint64_t want[17];
    for (size_t i = 0; i < 17; i++) {
        size_t off = i * 4096;
        want[i] = kr_block_checksum_scalar(b + off, len - off < 4096 ? len - off : 4096);
    }
    struct hash_worker w[3];
    pthread_t t[3];
    atomic_int done = 0;
    for (int i = 0; i < 3; i++) {
        w[i] = (struct hash_worker){.buf = b, .len = len, .want = want, .done = &done};
        ck_assert_int_eq(pthread_create(&t[i], NULL, hash_worker_run, &w[i]), 0);
    }
    /* Every implementation in turn until the workers are done. */
    for (size_t i = 0; atomic_load(&done) < 3; i++)
        kr_block_impl_set(all_impls[i % N_IMPLS]); /* -ENOTSUP for some: fine */
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(pthread_join(t[i], NULL), 0);
        ck_assert_int_eq(w[i].bad, -1);
    }
    ck_assert_int_eq(kr_block_impl_set(KR_BLOCK_IMPL_AUTO), 0);
    free(b);
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
    TCase *fast = tcase_create("fast");
    tcase_add_test(fast, dispatch_picks_the_widest_supported_and_refuses_the_rest);
    tcase_add_test(fast, every_impl_gives_the_known_answers);
    tcase_add_test(fast, every_impl_matches_reference_at_every_length_and_alignment);
    tcase_add_test(fast, every_impl_matches_reference_on_large_blocks);
    tcase_add_test(fast, every_impl_matches_reference_for_every_block_size_class);
    tcase_add_test(fast, every_impl_verify_finds_a_flip_anywhere_in_a_block);
    tcase_add_test(fast, threads_hash_while_the_impl_changes);
    tcase_set_timeout(fast, 120);
    suite_add_tcase(s, fast);
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
