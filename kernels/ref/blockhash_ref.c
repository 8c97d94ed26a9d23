#include "kernels/blockhash_ref.h"

#include <errno.h>
#include <string.h>

#include "kernels/blockhash.h"

uint64_t kr_block_checksum(const void *data, size_t len)
{
    const unsigned char *p = data;
    size_t words = len / 8;
    uint64_t sum = 0;
    for (size_t i = 0; i < words; i++) {
        uint64_t w;
        memcpy(&w, p + i * 8, 8); /* little-endian hosts only; see CMakeLists */
        sum += kn_word_term(w, i);
    }
    size_t tail = len % 8;
    if (tail) {
        uint64_t w = 0;
        memcpy(&w, p + words * 8, tail);
        sum += kn_word_term(w, words);
    }
    return kn_finish(sum, len);
}

size_t kr_block_count(size_t len, uint32_t block_size)
{
    if (block_size == 0)
        return 0;
    return len / block_size + (len % block_size != 0);
}

static int block_size_valid(uint32_t block_size)
{
    return block_size != 0 && block_size % 8 == 0;
}

long kr_block_checksums(const void *data, size_t len, uint32_t block_size, uint64_t *sums)
{
    if (!block_size_valid(block_size))
        return -EINVAL;
    const unsigned char *p = data;
    long n = 0;
    for (size_t off = 0; off < len; off += block_size, n++) {
        size_t this_len = len - off < block_size ? len - off : block_size;
        sums[n] = kr_block_checksum(p + off, this_len);
    }
    return n;
}

long kr_block_verify(const void *data, size_t len, uint32_t block_size, const uint64_t *expected)
{
    if (!block_size_valid(block_size))
        return -EINVAL;
    const unsigned char *p = data;
    long n = 0;
    for (size_t off = 0; off < len; off += block_size, n++) {
        size_t this_len = len - off < block_size ? len - off : block_size;
        if (kr_block_checksum(p + off, this_len) != expected[n])
            return n;
    }
    return -1;
}
