/* base/rand: splitmix64's published outputs, and bit-identity with the
 * generator that defines stagingd's demo data (sd_gen_seed). */
#include <check.h>
#include <stdint.h>

#include "base/rand.h"
#include "check_main.h"
#include "stagingd/shard.h" /* sd_gen_seed */

START_TEST(splitmix64_gives_its_published_outputs)
{
    static const uint64_t from0[] = {0xe220a8397b1dcdafull, 0x6e789e6aa1b965f4ull,
                                     0x06c45d188009454full, 0xf88bb8a8724c81ecull};
    uint64_t s = 0;
    for (size_t i = 0; i < sizeof from0 / sizeof from0[0]; i++)
        ck_assert_uint_eq(base_splitmix64(&s), from0[i]);
    ck_assert_uint_eq(s, 4 * 0x9e3779b97f4a7c15ull); /* the state only steps */
    s = 1;
    ck_assert_uint_eq(base_splitmix64(&s), 0x910a2dec89025cc1ull);
    ck_assert_uint_eq(base_splitmix64(&s), 0xbeeb8da1658eec67ull);
}
END_TEST

START_TEST(the_generators_seeding_is_splitmix64_bit_for_bit)
{
    /* sd_gen_seed's recipe, rebuilt from base_splitmix64: if the two ever
     * differ, every demo store on disk changes meaning. */
    static const uint64_t seeds[] = {0, 1, 2, 42, 0x57a6e5eedull, UINT64_MAX};
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        for (uint64_t shard = 0; shard < 64; shard++) {
            uint64_t z = seeds[i];
            uint64_t k = base_splitmix64(&z) ^ (0xd1b54a32d192ed03ull * (shard + 1));
            uint64_t want[4];
            for (int w = 0; w < 4; w++)
                want[w] = base_splitmix64(&k);
            uint64_t got[4];
            sd_gen_seed(seeds[i], shard, got);
            for (int w = 0; w < 4; w++)
                ck_assert_uint_eq(got[w], want[w]);
        }
    }
}
END_TEST

static Suite *rand_suite(void)
{
    Suite *s = suite_create("base_rand");
    TCase *tc = tcase_create("splitmix64");
    tcase_add_test(tc, splitmix64_gives_its_published_outputs);
    tcase_add_test(tc, the_generators_seeding_is_splitmix64_bit_for_bit);
    suite_add_tcase(s, tc);
    return s;
}

BASE_CHECK_MAIN(rand_suite)
