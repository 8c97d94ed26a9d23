/* The block checksum on the CPU: the scalar reference (the definition, word
 * by word as blockhash.h states it) and the same sum over vector lanes for
 * the CPUs that have them, chosen once per process by CPUID.
 *
 * The sum is modular, so the order of its terms is free: the fast loops
 * keep two vectors of lanes, each lane summing every (2 * lanes)-th word,
 * with its index key stepped by an add instead of a multiply, and add the
 * lanes up at the end. Only the two 64-bit multiplies of the mix differ in
 * cost between instruction sets: AVX-512DQ has vpmullq; SSE2 and AVX2 build
 * one from three 32x32-bit (v)pmuludq, which the compiler emits for a plain
 * vector multiply. */
#include "kernels/blockhash_ref.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/blockhash.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KR__HAVE_X86 1
#else
#define KR__HAVE_X86 0
#endif

/* The sum of the terms of words 0..words-1 at @p (any alignment). */
typedef uint64_t (*terms_fn)(const unsigned char *p, size_t words);

static uint64_t terms_scalar(const unsigned char *p, size_t words)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < words; i++) {
        uint64_t w;
        memcpy(&w, p + i * 8, 8); /* little-endian hosts only; see CMakeLists */
        sum += kn_word_term(w, i);
    }
    return sum;
}

#if KR__HAVE_X86
/* kn_fmix64 of blockhash.h, lane by lane; the tests hold the two equal. */
#define KR__FMIX_LANES(k)                                                                          \
    do {                                                                                           \
        (k) ^= (k) >> 33;                                                                          \
        (k) *= 0xff51afd7ed558ccdULL;                                                              \
        (k) ^= (k) >> 33;                                                                          \
        (k) *= 0xc4ceb9fe1a85ec53ULL;                                                              \
        (k) ^= (k) >> 33;                                                                          \
    } while (0)

/* terms_<isa>: the term sum over two @vbytes-byte vectors per step. The
 * vector type is a typedef because GCC's vector_size has no other spelling;
 * it stays inside the function, so no vector crosses a call (or an ABI). */
#define KR__DEFINE_TERMS(isa, features, vbytes)                                                    \
    __attribute__((target(features))) static uint64_t terms_##isa(const unsigned char *p,          \
                                                                  size_t words)                    \
    {                                                                                              \
        typedef uint64_t lanes __attribute__((vector_size(vbytes)));                               \
        enum { L = (vbytes) / 8 };                                                                 \
        lanes key0, key1, acc0 = {0}, acc1 = {0};                                                  \
        for (int j = 0; j < L; j++) {                                                              \
            key0[j] = KN_SEED + (uint64_t)j * KN_INDEX_KEY;                                        \
            key1[j] = KN_SEED + (uint64_t)(L + j) * KN_INDEX_KEY;                                  \
        }                                                                                          \
        const uint64_t step = (uint64_t)(2 * L) * KN_INDEX_KEY;                                    \
        size_t i = 0;                                                                              \
        for (; words - i >= 2 * L; i += 2 * L) {                                                   \
            lanes w0, w1;                                                                          \
            memcpy(&w0, p + 8 * i, sizeof(w0));                                                    \
            memcpy(&w1, p + 8 * (i + L), sizeof(w1));                                              \
            w0 ^= key0;                                                                            \
            w1 ^= key1;                                                                            \
            KR__FMIX_LANES(w0);                                                                    \
            KR__FMIX_LANES(w1);                                                                    \
            acc0 += w0;                                                                            \
            acc1 += w1;                                                                            \
            key0 += step;                                                                          \
            key1 += step;                                                                          \
        }                                                                                          \
        acc0 += acc1;                                                                              \
        uint64_t sum = 0;                                                                          \
        for (int j = 0; j < L; j++)                                                                \
            sum += acc0[j];                                                                        \
        for (; i < words; i++) {                                                                   \
            uint64_t w;                                                                            \
            memcpy(&w, p + 8 * i, 8);                                                              \
            sum += kn_word_term(w, i);                                                             \
        }                                                                                          \
        return sum;                                                                                \
    }

KR__DEFINE_TERMS(sse2, "sse2", 16)
KR__DEFINE_TERMS(avx2, "avx2", 32)
KR__DEFINE_TERMS(avx512, "avx512f,avx512dq", 64)
#endif

static const struct {
    const char *name;
    terms_fn terms; /* NULL: not built for this architecture */
} impls[KR_BLOCK_IMPL__COUNT] = {
    [KR_BLOCK_IMPL_AUTO] = {"auto", NULL},
    [KR_BLOCK_IMPL_SCALAR] = {"scalar", terms_scalar},
#if KR__HAVE_X86
    [KR_BLOCK_IMPL_SSE2] = {"sse2", terms_sse2},
    [KR_BLOCK_IMPL_AVX2] = {"avx2", terms_avx2},
    [KR_BLOCK_IMPL_AVX512] = {"avx512", terms_avx512},
#else
    [KR_BLOCK_IMPL_SSE2] = {"sse2", NULL},     [KR_BLOCK_IMPL_AVX2] = {"avx2", NULL},
    [KR_BLOCK_IMPL_AVX512] = {"avx512", NULL},
#endif
};

static int cpu_has(enum kr_block_impl impl)
{
#if KR__HAVE_X86
    __builtin_cpu_init();
    switch (impl) {
    case KR_BLOCK_IMPL_SSE2:
        return __builtin_cpu_supports("sse2");
    case KR_BLOCK_IMPL_AVX2:
        return __builtin_cpu_supports("avx2");
    case KR_BLOCK_IMPL_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
    default:
        break;
    }
#endif
    return impl == KR_BLOCK_IMPL_SCALAR;
}

int kr_block_impl_supported(enum kr_block_impl impl)
{
    if ((unsigned)impl >= KR_BLOCK_IMPL__COUNT)
        return 0;
    return impl == KR_BLOCK_IMPL_AUTO || (impls[impl].terms && cpu_has(impl));
}

static enum kr_block_impl best_impl(void)
{
    /* Fastest first, as bench/hash_bench measured them. */
    static const enum kr_block_impl order[] = {KR_BLOCK_IMPL_AVX512, KR_BLOCK_IMPL_AVX2,
                                               KR_BLOCK_IMPL_SSE2};
    for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++)
        if (kr_block_impl_supported(order[i]))
            return order[i];
    return KR_BLOCK_IMPL_SCALAR;
}

/* The dispatch choice, the only process-wide state: 0 (KR_BLOCK_IMPL_AUTO)
 * until the first call resolves it. Threads racing on that first call all
 * store the same value; one racing kr_block_impl_set gets either, and every
 * implementation gives the same sums. */
static _Atomic int current_impl;

enum kr_block_impl kr_block_impl_get(void)
{
    int impl = atomic_load_explicit(&current_impl, memory_order_relaxed);
    if (impl == KR_BLOCK_IMPL_AUTO) {
        impl = (int)best_impl();
        atomic_store_explicit(&current_impl, impl, memory_order_relaxed);
    }
    return (enum kr_block_impl)impl;
}

int kr_block_impl_set(enum kr_block_impl impl)
{
    if ((unsigned)impl >= KR_BLOCK_IMPL__COUNT)
        return -EINVAL;
    if (!kr_block_impl_supported(impl))
        return -ENOTSUP;
    atomic_store_explicit(&current_impl, (int)impl, memory_order_relaxed);
    return 0;
}

const char *kr_block_impl_name(enum kr_block_impl impl)
{
    if ((unsigned)impl >= KR_BLOCK_IMPL__COUNT)
        return NULL;
    return impls[impl].name;
}

static terms_fn current_terms(void)
{
    return impls[kr_block_impl_get()].terms;
}

/* The whole words through @terms, then the zero-padded tail and the length. */
static uint64_t checksum_with(terms_fn terms, const void *data, size_t len)
{
    const unsigned char *p = data;
    size_t words = len / 8;
    uint64_t sum = terms(p, words);
    size_t tail = len % 8;
    if (tail) {
        uint64_t w = 0;
        memcpy(&w, p + words * 8, tail);
        sum += kn_word_term(w, words);
    }
    return kn_finish(sum, len);
}

uint64_t kr_block_checksum_scalar(const void *data, size_t len)
{
    return checksum_with(terms_scalar, data, len);
}

uint64_t kr_block_checksum(const void *data, size_t len)
{
    return checksum_with(current_terms(), data, len);
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
    const terms_fn terms = current_terms();
    const unsigned char *p = data;
    long n = 0;
    for (size_t off = 0; off < len; off += block_size, n++) {
        size_t this_len = len - off < block_size ? len - off : block_size;
        sums[n] = checksum_with(terms, p + off, this_len);
    }
    return n;
}

long kr_block_verify(const void *data, size_t len, uint32_t block_size, const uint64_t *expected)
{
    if (!block_size_valid(block_size))
        return -EINVAL;
    const terms_fn terms = current_terms();
    const unsigned char *p = data;
    long n = 0;
    for (size_t off = 0; off < len; off += block_size, n++) {
        size_t this_len = len - off < block_size ? len - off : block_size;
        if (checksum_with(terms, p + off, this_len) != expected[n])
            return n;
    }
    return -1;
}
