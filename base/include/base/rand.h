/* base: splitmix64, the seeding generator.
 *
 * Vigna's splitmix64: add the golden-ratio increment to the state, then mix.
 * Its output defines stagingd's demo data (stagingd gen seeds xoshiro256**
 * with it), so this sequence is a file-format contract: never change it.
 * From state 0 the first outputs are 0xe220a8397b1dcdaf,
 * 0x6e789e6aa1b965f4, 0x06c45d188009454f.
 *
 * Not for secrets. Threads: reentrant; the state is the caller's. */
#ifndef BASE_RAND_H
#define BASE_RAND_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The next output; advances *state. */
static inline uint64_t base_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#ifdef __cplusplus
}
#endif

#endif /* BASE_RAND_H */
