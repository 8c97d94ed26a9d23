/* lease-agent --self-test: proves on real hardware that the embedded
 * checksum kernel loads and agrees with the C reference, on device memory
 * and on mapped host memory, and that verify names exactly a flipped bit's
 * block. One result line on standard output. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "base/time.h"
#include "gpu/cu.h"
#include "gpu/ga.h"
#include "kernels/blockhash_ref.h"

static uint64_t agent_rng(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

/* Index of the first entry where @a and @b differ, or -1. */
static long agent_first_diff(const uint64_t *a, const uint64_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return (long)i;
    return -1;
}

struct agent_bufs {
    unsigned char *host;  /* cuMemHostAlloc, mapped */
    CUdeviceptr host_dev; /* its device address */
    CUdeviceptr dev;      /* cuMemAlloc copy */
    uint64_t *ref, *gpu;
    size_t n;
};

/* GPU sums of the @len bytes at @addr (which holds @host's bytes) against
 * the C reference over @host. */
static int agent_compare(struct ga_device *d, const char *what, const unsigned char *host,
                         uint64_t addr, size_t len, uint32_t bs, struct agent_bufs *b,
                         double *gbps_p)
{
    long n = kr_block_checksums(host, len, bs, b->ref);
    double t0 = base_now_s();
    int got = ga_checksum_compute(d, addr, len, bs, b->gpu);
    double dt = base_now_s() - t0;
    if (got < 0 || got != n) {
        printf("lease-agent self-test FAIL: %s: ga_checksum_compute returned %d, expected %ld "
               "blocks (%s)\n",
               what, got, n, got < 0 ? strerror(-got) : "count");
        return -1;
    }
    long diff = agent_first_diff(b->ref, b->gpu, (size_t)n);
    if (diff >= 0) {
        printf("lease-agent self-test FAIL: %s, %zu bytes: block %ld: GPU %#018" PRIx64
               ", C reference %#018" PRIx64 "\n",
               what, len, diff, b->gpu[diff], b->ref[diff]);
        return -1;
    }
    if (gbps_p)
        *gbps_p = (double)len / dt / 1e9;
    return 0;
}

static int agent_verify_one(struct ga_device *d, const char *what, uint64_t addr, size_t len,
                            uint32_t bs, const uint64_t *expected, int64_t want_first,
                            uint64_t want_count)
{
    int64_t first = 0;
    uint64_t count = 0;
    int rc = ga_checksum_verify(d, addr, len, bs, expected, &first, &count);
    if (rc < 0 || first != want_first || count != want_count) {
        printf("lease-agent self-test FAIL: verify on %s: rc %d, first bad block %" PRId64
               " (expected %" PRId64 "), %" PRIu64 " bad (expected %" PRIu64 ")\n",
               what, rc, first, want_first, count, want_count);
        return -1;
    }
    return 0;
}

static int agent_self_test_run(struct ga_device *d, const struct agent_self_test_args *a,
                               struct agent_bufs *b)
{
    const size_t len = a->bytes;
    const uint32_t bs = a->block_size;
    uint64_t s = a->seed;
    for (size_t i = 0; i < len; i += 8) {
        uint64_t v = agent_rng(&s);
        memcpy(b->host + i, &v, len - i < 8 ? len - i : 8);
    }
    if (GA_CU(cuMemcpyHtoD(b->dev, b->host, len)) < 0)
        return -1;

    double dev_gbps = 0, map_gbps = 0;
    if (agent_compare(d, "device memory", b->host, b->dev, len, bs, b, &dev_gbps) < 0 ||
        agent_compare(d, "mapped host memory", b->host, b->host_dev, len, bs, b, &map_gbps) < 0 ||
        agent_compare(d, "device memory, 3 bytes short", b->host, b->dev, len - 3, bs, b, NULL) <
            0 ||
        agent_compare(d, "mapped host memory, from byte 8", b->host + 8, b->host_dev + 8, len - 8,
                      bs, b, NULL) < 0)
        return -1;
    /* b->ref holds the last comparison's sums; recompute the full ones. */
    kr_block_checksums(b->host, len, bs, b->ref);
    if (agent_verify_one(d, "clean device memory", b->dev, len, bs, b->ref, -1, 0) < 0)
        return -1;

    size_t pos = (size_t)(agent_rng(&s) % len);
    unsigned char bit = (unsigned char)(1u << (agent_rng(&s) % 8));
    b->host[pos] ^= bit;
    if (GA_CU(cuMemcpyHtoD(b->dev + pos, b->host + pos, 1)) < 0)
        return -1;
    int64_t block = (int64_t)(pos / bs);
    if (agent_verify_one(d, "device memory with one flipped bit", b->dev, len, bs, b->ref, block,
                         1) < 0 ||
        agent_verify_one(d, "mapped memory with one flipped bit", b->host_dev, len, bs, b->ref,
                         block, 1) < 0)
        return -1;
    b->host[pos] ^= bit;

    const struct ga_device_info *in = ga_device_info_get(d);
    printf("lease-agent self-test PASS: device %d %s (sm_%u, driver API %d, kernel module "
           "%d.%d): %zu bytes in %zu blocks of %u: GPU == C reference on device memory "
           "(%.1f GB/s) and mapped host memory (%.1f GB/s), short and offset tails too; bit "
           "flipped at byte %zu -> verify named block %" PRId64 " only, on both\n",
           in->ordinal, in->name, in->arch, in->driver_version, in->kmd_major, in->kmd_minor, len,
           b->n, bs, dev_gbps, map_gbps, pos, block);
    return 0;
}

int agent_self_test(const struct agent_self_test_args *a)
{
    struct ga_device *d = NULL;
    struct ga_device_opts opts = {.ordinal = a->device};
    struct agent_images ai;
    char msg[768];
    if (agent_driver_load(msg, sizeof msg) < 0) {
        printf("lease-agent self-test FAIL: %s\n", msg);
        return 1;
    }
    if (agent_images_prepare(NULL, a->cubin_dir, &ai, &opts) < 0) {
        printf("lease-agent self-test FAIL: --cubin-dir %s refused (see the line above)\n",
               a->cubin_dir);
        return 1;
    }
    int rc = ga_device_open(&opts, &d);
    if (rc < 0) {
        agent_images_release(&ai);
        printf("lease-agent self-test FAIL: cannot open CUDA device %d: %s (see the lines "
               "above)\n",
               a->device, strerror(-rc));
        return 1;
    }
    struct agent_bufs b = {.n = kr_block_count(a->bytes, a->block_size)};
    int result = 1;
    b.ref = calloc(b.n, sizeof(*b.ref));
    b.gpu = calloc(b.n, sizeof(*b.gpu));
    if (!b.ref || !b.gpu) {
        printf("lease-agent self-test FAIL: out of host memory for %zu sums\n", b.n);
        goto out_free;
    }
    void *host = NULL;
    if (ga_device_make_current(d) < 0 ||
        GA_CU(cuMemHostAlloc(&host, a->bytes, CU_MEMHOSTALLOC_DEVICEMAP)) < 0) {
        printf("lease-agent self-test FAIL: cannot allocate %zu bytes of mapped host memory\n",
               a->bytes);
        goto out_free;
    }
    b.host = host;
    if (GA_CU(cuMemHostGetDevicePointer(&b.host_dev, host, 0)) < 0 ||
        GA_CU(cuMemAlloc(&b.dev, a->bytes)) < 0) {
        printf("lease-agent self-test FAIL: cannot map host memory or allocate %zu bytes of "
               "device memory\n",
               a->bytes);
        goto out_host;
    }
    if (agent_self_test_run(d, a, &b) == 0)
        result = 0;
    GA_CU(cuMemFree(b.dev));
out_host:
    GA_CU(cuMemFreeHost(b.host));
out_free:
    free(b.gpu);
    free(b.ref);
    ga_device_close(d);
    agent_images_release(&ai);
    return result;
}
