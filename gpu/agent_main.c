/* lease-agent: the GPU agent. It serves the lease protocol on its socket
 * (docs/agent.md) with the CUDA backend (the default: hardware gate,
 * cuMemHostRegister, the CUDA executor) or, asked for by name, the host
 * backend; a CUDA start that fails is an error, never a silent fallback.
 * --self-test proves on real hardware that the embedded checksum kernel
 * loads and agrees with the C reference. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cu_call.h"
#include "device_internal.h"
#include "gpu/executor_cuda.h"
#include "gpu/extra_images.h"
#include "gpu/ga.h"
#include "gpu/server.h"
#include "kernels/blockhash_ref.h"
#include "kernels/images.h"
#include "lease/cuda_backend.h"

#define AGENT_DEFAULT_BYTES (256u << 20)
#define AGENT_DEFAULT_BLOCK (64u << 10)
#define AGENT_DEFAULT_SEED 0x6167656e74ULL /* never zero: xorshift would stick */

struct agent_args {
    int self_test;
    int device;
    size_t bytes;
    uint32_t block_size;
    uint64_t seed;
    const char *cubin_dir;
};

static void agent_usage(FILE *f)
{
    fprintf(f,
            "usage: lease-agent --self-test [--device N] [--bytes N[K|M|G]] [--block-size N]\n"
            "                   [--seed N] [--cubin-dir DIR]\n"
            "\n"
            "  --self-test   open GPU N through the hardware gate (driver >= 580 / CUDA 13,\n"
            "                compute capability == the embedded cubins' arch), load every\n"
            "                embedded kernel, checksum --bytes of seeded random data on the GPU\n"
            "                (device memory and mapped host memory) and with the C reference,\n"
            "                flip one bit and check that verify names exactly that block.\n"
            "                Prints one result line; exit 0 only if everything matched.\n"
            "  --cubin-dir DIR  also load every DIR/*.cubin (SASS-only, this arch, kernels\n"
            "                named k_*) with the embedded images; a bad file fails start-up.\n"
            "  defaults: --device 0 --bytes %u --block-size %u\n"
            "\n"
            "lease-agent links libcuda.so.1 from the NVIDIA driver: on a machine without the\n"
            "driver the dynamic loader refuses to start it (\"libcuda.so.1: cannot open shared\n"
            "object file\"), before any of this runs.\n",
            AGENT_DEFAULT_BYTES, AGENT_DEFAULT_BLOCK);
}

static int agent_size_parse(const char *s, uint64_t *out)
{
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || s[0] == '-')
        return -EINVAL;
    unsigned shift = 0;
    if (*end == 'K' || *end == 'k')
        shift = 10;
    else if (*end == 'M' || *end == 'm')
        shift = 20;
    else if (*end == 'G' || *end == 'g')
        shift = 30;
    if (shift)
        end++;
    if (*end || v > (UINT64_MAX >> shift))
        return -EINVAL;
    *out = (uint64_t)v << shift;
    return 0;
}

static int agent_args_parse(int argc, char **argv, struct agent_args *a)
{
    *a = (struct agent_args){.bytes = AGENT_DEFAULT_BYTES,
                             .block_size = AGENT_DEFAULT_BLOCK,
                             .seed = AGENT_DEFAULT_SEED};
    for (int i = 1; i < argc; i++) {
        uint64_t v = 0;
        const char *opt = argv[i];
        if (strcmp(opt, "--help") == 0 || strcmp(opt, "-h") == 0) {
            agent_usage(stdout);
            exit(0);
        } else if (strcmp(opt, "--self-test") == 0) {
            a->self_test = 1;
            continue;
        } else if (strcmp(opt, "--cubin-dir") == 0) {
            if (i + 1 >= argc || !argv[i + 1][0]) {
                fprintf(stderr, "lease-agent: --cubin-dir: expected a directory, found nothing\n");
                return -EINVAL;
            }
            a->cubin_dir = argv[++i];
            continue;
        }
        if (i + 1 >= argc || agent_size_parse(argv[i + 1], &v) < 0) {
            fprintf(stderr, "lease-agent: %s: expected a number, found '%s'\n", opt,
                    i + 1 < argc ? argv[i + 1] : "nothing");
            return -EINVAL;
        }
        i++;
        if (strcmp(opt, "--device") == 0 && v < 64) {
            a->device = (int)v;
        } else if (strcmp(opt, "--bytes") == 0 && v >= 64 && v <= SIZE_MAX / 2) {
            a->bytes = (size_t)v;
        } else if (strcmp(opt, "--block-size") == 0 && v && v % 8 == 0 && v <= UINT32_MAX) {
            a->block_size = (uint32_t)v;
        } else if (strcmp(opt, "--seed") == 0 && v) {
            a->seed = v;
        } else {
            fprintf(stderr,
                    "lease-agent: %s %s: unknown option or value out of range "
                    "(--device 0..63, --bytes >= 64, --block-size a multiple of 8, "
                    "--seed non-zero)\n",
                    opt, argv[i]);
            return -EINVAL;
        }
    }
    return 0;
}

static uint64_t agent_rng(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

static double agent_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
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
    double t0 = agent_now();
    int got = ga_checksum_compute(d, addr, len, bs, b->gpu);
    double dt = agent_now() - t0;
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

static int agent_self_test_run(struct ga_device *d, const struct agent_args *a,
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

/* The image table for ga_device_open: the embedded images, plus those of
 * --cubin-dir when given. */
struct agent_images {
    struct kn_image *extra;
    size_t extra_count;
    struct kn_image *table; /* embedded + extra; NULL: the embedded table alone */
};

/* Loads @dir's cubins (NULL: none) and points @opts at the combined table.
 * Returns 0 or a negative errno after saying why on stderr. */
static int agent_images_prepare(const char *dir, struct agent_images *ai,
                                struct ga_device_opts *opts)
{
    *ai = (struct agent_images){0};
    if (!dir)
        return 0;
    char err[1024];
    unsigned int arch = kn_images[0].arch;
    int rc = ga_extra_images_load(dir, arch, &ai->extra, &ai->extra_count, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "lease-agent: error: --cubin-dir: %s\n", err);
        return rc;
    }
    fprintf(stderr, "lease-agent: --cubin-dir %s: %zu extra image%s for sm_%u\n", dir,
            ai->extra_count, ai->extra_count == 1 ? "" : "s", arch);
    for (size_t i = 0; i < ai->extra_count; i++) {
        const struct kn_image *img = &ai->extra[i];
        fprintf(stderr, "lease-agent: extra image '%s' (%s/%s.cubin, %zu bytes, sm_%u), kernels:",
                img->name, dir, img->name, img->size, img->arch);
        for (size_t k = 0; k < img->kernel_count; k++)
            fprintf(stderr, "%s %s", k ? "," : "", img->kernels[k]);
        fprintf(stderr, "\n");
    }
    size_t count = 0;
    rc = ga_extra_images_combine(kn_images, kn_image_count, ai->extra, ai->extra_count, &ai->table,
                                 &count, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "lease-agent: error: --cubin-dir %s: %s\n", dir, err);
        ga_extra_images_free(ai->extra, ai->extra_count);
        *ai = (struct agent_images){0};
        return rc;
    }
    opts->images = ai->table;
    opts->image_count = count;
    opts->required_arch = arch;
    return 0;
}

/* Call after ga_device_close: the device points into the table. */
static void agent_images_release(struct agent_images *ai)
{
    free(ai->table);
    ga_extra_images_free(ai->extra, ai->extra_count);
    *ai = (struct agent_images){0};
}

static int agent_self_test(const struct agent_args *a)
{
    struct ga_device *d = NULL;
    struct ga_device_opts opts = {.ordinal = a->device};
    struct agent_images ai;
    if (agent_images_prepare(a->cubin_dir, &ai, &opts) < 0) {
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

/* ---- server mode ---------------------------------------------------------- */

#define AGENT_PINNED_DEFAULT (8ull << 30)
#define AGENT_MAPPED_DEFAULT (1ull << 30)

enum agent_backend { AGENT_BACKEND_CUDA = 0, AGENT_BACKEND_HOST = 1 };

static struct ga_server *agent_srv; /* for the fault callback */
static volatile int agent_faulted;

static void agent_server_usage(FILE *f)
{
    fprintf(f,
            "usage: lease-agent [--backend cuda|host] [--device N] [server options]\n"
            "       lease-agent --self-test [--device N] [--bytes N] [--block-size N] [--seed N]\n"
            "\n"
            "  --backend cuda   (default) open GPU N through the hardware gate, register\n"
            "                   segments with cuMemHostRegister and run the work on the GPU.\n"
            "                   If that cannot start, lease-agent exits with the reason; it\n"
            "                   never falls back to the host backend by itself.\n"
            "  --backend host   the host backend (mlock, C reference kernels on CPU threads,\n"
            "                   polled doorbells): no GPU is touched; announced in the log.\n"
            "  --device N       CUDA device index (default 0)\n"
            "  --chunk-bytes SIZE  copy/compute pipeline chunk of the CUDA executor\n"
            "                   (default 64M; 4K..1G, a multiple of 4K)\n"
            "  --cubin-dir DIR  also load every DIR/*.cubin at start-up (SASS-only for this\n"
            "                   GPU's arch, no PTX, kernels named k_*); any bad file, or a\n"
            "                   kernel name already taken, fails start-up\n"
            "\n"
            "Server options (as lease-agent-host):\n");
    ga_server_cli_usage(f, "lease-agent");
}

/* Log lines of gpu/ (device, executor) in the server's format. */
static void agent_ga_log(void *ctx, int level, const char *line)
{
    (void)ctx;
    static const char *const names[] = {"error", "warn", "info"};
    fprintf(stderr, "lease-agent: %s: %s\n", names[level >= 0 && level <= 2 ? level : 0], line);
}

static void agent_on_fault(void *arg, int err)
{
    (void)arg;
    fprintf(stderr,
            "lease-agent: error: the GPU faulted (%s); every request in flight was answered "
            "GPU_FAULT. Stopping: restart the agent.\n",
            strerror(-err));
    agent_faulted = 1;
    if (agent_srv)
        ga_server_stop(agent_srv);
}

/* Budgets not given on the command line: 8 GiB / 1 GiB, scaled down to 3/4
 * and 1/4 of @cap when they would not fit. */
static void agent_budgets_default(struct ga_server_cli *cli, uint64_t cap, const char *what)
{
    uint64_t pin = AGENT_PINNED_DEFAULT, map = AGENT_MAPPED_DEFAULT;
    if (cap < pin + map) {
        pin = cap / 4 * 3;
        map = cap / 4;
    }
    pin -= pin % 4096;
    map -= map % 4096;
    if (!cli->budget_pinned_set)
        cli->cfg.budget_pinned = pin;
    if (!cli->budget_mapped_set)
        cli->cfg.budget_mapped = map;
    if (!cli->budget_pinned_set || !cli->budget_mapped_set)
        fprintf(stderr,
                "lease-agent: budgets PINNED %" PRIu64 " MAPPED %" PRIu64 " bytes (%s: %" PRIu64
                " bytes; set them with --pinned-budget and --mapped-budget)\n",
                cli->cfg.budget_pinned, cli->cfg.budget_mapped, what, cap);
}

static uint64_t agent_half_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES);
    long page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page / 2 : UINT64_MAX;
}

/* Serves until a signal or a fault. Returns the exit status. */
static int agent_serve(struct ga_server_cli *cli, struct lease_backend *be, struct ga_executor *ex)
{
    cli->cfg.backend = be;
    cli->cfg.executor = ex;
    cli->cfg.handle_signals = 1;
    struct ga_server *srv = NULL;
    int rc = ga_server_create(&cli->cfg, &srv);
    if (rc < 0) {
        fprintf(stderr, "lease-agent: not started: %s\n", strerror(-rc));
        return 1;
    }
    agent_srv = srv;
    if (cli->ready_fd >= 0) {
        if (dprintf(cli->ready_fd, "ready %ld %s\n", (long)getpid(), ga_server_socket_path(srv)) <
            0)
            fprintf(stderr, "lease-agent: --ready-fd %d: %s\n", cli->ready_fd, strerror(errno));
        close(cli->ready_fd);
    }
    rc = ga_server_run(srv);
    agent_srv = NULL;
    ga_server_destroy(srv);
    return rc < 0 || agent_faulted ? 1 : 0;
}

static int agent_serve_cuda(struct ga_server_cli *cli, int device, uint64_t chunk,
                            const char *cubin_dir)
{
    static const char hint[] = "To serve without a GPU, start it with the host backend explicitly: "
                               "'lease-agent --backend host' or 'lease-agent-host'.";
    ga_log_set_sink(agent_ga_log, NULL);
    struct ga_device *dev = NULL;
    struct ga_device_opts opts = {.ordinal = device};
    struct agent_images ai;
    if (agent_images_prepare(cubin_dir, &ai, &opts) < 0)
        return 1;
    int rc = ga_device_open(&opts, &dev);
    if (rc < 0) {
        agent_images_release(&ai);
        fprintf(stderr,
                "lease-agent: error: the CUDA backend cannot start on device %d: %s (the lines "
                "above say what was found and what is required). %s\n",
                device, strerror(-rc), hint);
        return 1;
    }
    int status = 1;
    struct lease_backend be = {0};
    struct lt_failure why;
    rc = lease_cuda_backend_init(dev->ctx, 0, &be, &why);
    if (rc < 0) {
        fprintf(stderr, "lease-agent: error: CUDA registration backend: %s. %s\n", why.message,
                hint);
        goto out_dev;
    }
    const struct ga_device_info *in = ga_device_info_get(dev);
    agent_budgets_default(cli, agent_half_memory(), "half the physical memory");
    struct ga_executor_cuda_opts xo = {
        .workers = cli->host.workers,
        .max_streams = cli->host.max_streams,
        .max_events = cli->host.max_events,
        .chunk_bytes = chunk,
        .on_fault = agent_on_fault,
    };
    struct ga_executor *ex = NULL;
    rc = ga_executor_cuda_create(dev, &xo, &ex);
    if (rc < 0) {
        fprintf(stderr,
                "lease-agent: error: the CUDA executor cannot start on device %d (%s): "
                "%s (see above). %s\n",
                device, in->name, strerror(-rc), hint);
        goto out_be;
    }
    fprintf(stderr,
            "lease-agent: CUDA backend on device %d %s (sm_%u, %s, driver API %d, kernel module "
            "%d.%d)\n",
            in->ordinal, in->name, in->arch, in->pci_bus_id, in->driver_version, in->kmd_major,
            in->kmd_minor);
    status = agent_serve(cli, &be, ex);
    ga_executor_destroy(ex);
out_be:
    lease_backend_fini(&be);
out_dev:
    ga_device_close(dev);
    agent_images_release(&ai);
    return status;
}

static int agent_serve_host(struct ga_server_cli *cli)
{
    fprintf(stderr, "lease-agent: HOST BACKEND (--backend host): no GPU is used. mlock stands "
                    "in for registration, the C reference kernels run on CPU threads, doorbells "
                    "are polled.\n");
    struct lease_backend be;
    struct lt_failure why;
    int rc = lease_host_backend_init(&be, &why);
    if (rc < 0) {
        fprintf(stderr, "lease-agent: host backend: %s\n", why.message);
        return 1;
    }
    uint64_t cap = UINT64_MAX;
    if (be.capacity && be.capacity(be.ctx, &cap, NULL) < 0)
        cap = 0;
    uint64_t half = agent_half_memory();
    agent_budgets_default(cli, cap < half ? cap : half, "lockable");
    struct ga_executor *ex = NULL;
    rc = ga_executor_host_create(&cli->host, &ex);
    if (rc < 0) {
        fprintf(stderr, "lease-agent: host executor: %s\n", strerror(-rc));
        lease_backend_fini(&be);
        return 1;
    }
    int status = agent_serve(cli, &be, ex);
    ga_executor_destroy(ex);
    lease_backend_fini(&be);
    return status;
}

/* Takes --backend, --device, --chunk-bytes and --cubin-dir out of @argv (into *@rest_p, argv[0]
 * kept) and leaves the rest to ga_server_cli_parse. */
static int agent_server_args(int argc, char **argv, enum agent_backend *backend_p, int *device_p,
                             uint64_t *chunk_p, const char **cubin_dir_p, char **rest, int *nrest_p)
{
    int n = 0;
    rest[n++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i];
        const char *val = NULL;
        bool backend = false, device = false;
        if (strncmp(opt, "--backend", 9) == 0 && (opt[9] == '\0' || opt[9] == '=')) {
            backend = true;
            val = opt[9] == '=' ? opt + 10 : (i + 1 < argc ? argv[++i] : NULL);
        } else if (strncmp(opt, "--device", 8) == 0 && (opt[8] == '\0' || opt[8] == '=')) {
            device = true;
            val = opt[8] == '=' ? opt + 9 : (i + 1 < argc ? argv[++i] : NULL);
        } else if (strncmp(opt, "--chunk-bytes", 13) == 0 && (opt[13] == '\0' || opt[13] == '=')) {
            val = opt[13] == '=' ? opt + 14 : (i + 1 < argc ? argv[++i] : NULL);
            uint64_t v = 0;
            if (!val || ga_server_size_parse(val, &v) < 0 || v < 4096 || v % 4096 != 0 ||
                v > (1ull << 30)) {
                fprintf(stderr,
                        "lease-agent: --chunk-bytes: expected a multiple of 4K from 4K "
                        "to 1G, found '%s'\n",
                        val ? val : "nothing");
                return -EINVAL;
            }
            *chunk_p = v;
            continue;
        } else if (strncmp(opt, "--cubin-dir", 11) == 0 && (opt[11] == '\0' || opt[11] == '=')) {
            val = opt[11] == '=' ? opt + 12 : (i + 1 < argc ? argv[++i] : NULL);
            if (!val || !*val) {
                fprintf(stderr, "lease-agent: --cubin-dir: expected a directory, found nothing\n");
                return -EINVAL;
            }
            *cubin_dir_p = val;
            continue;
        } else {
            rest[n++] = argv[i];
            continue;
        }
        if (backend) {
            if (val && strcmp(val, "cuda") == 0) {
                *backend_p = AGENT_BACKEND_CUDA;
            } else if (val && strcmp(val, "host") == 0) {
                *backend_p = AGENT_BACKEND_HOST;
            } else {
                fprintf(stderr, "lease-agent: --backend: expected 'cuda' or 'host', found '%s'\n",
                        val ? val : "nothing");
                return -EINVAL;
            }
        } else if (device) {
            char *end = NULL;
            long v = val ? strtol(val, &end, 10) : -1;
            if (!val || !*val || *end || v < 0 || v > 63) {
                fprintf(stderr, "lease-agent: --device: expected 0..63, found '%s'\n",
                        val ? val : "nothing");
                return -EINVAL;
            }
            *device_p = (int)v;
        }
    }
    rest[n] = NULL;
    *nrest_p = n;
    return 0;
}

static int agent_server_main(int argc, char **argv)
{
    enum agent_backend backend = AGENT_BACKEND_CUDA;
    int device = 0, nrest = 0;
    uint64_t chunk = 0;
    const char *cubin_dir = NULL;
    char **rest = calloc((size_t)argc + 1, sizeof(*rest));
    if (!rest)
        return 1;
    if (agent_server_args(argc, argv, &backend, &device, &chunk, &cubin_dir, rest, &nrest) < 0) {
        free(rest);
        return 2;
    }
    if (cubin_dir && backend != AGENT_BACKEND_CUDA) {
        fprintf(stderr,
                "lease-agent: --cubin-dir %s: expected the CUDA backend, found --backend "
                "host (which loads no cubins)\n",
                cubin_dir);
        free(rest);
        return 2;
    }
    struct ga_server_cli cli;
    char err[256];
    int rc = ga_server_cli_parse(nrest, rest, &cli, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "lease-agent: %s (see --help)\n", err);
        free(rest);
        return 2;
    }
    if (cli.help) {
        agent_server_usage(stdout);
        free(rest);
        return 0;
    }
    /* Blocked before any thread starts, so only the server's signalfd sees them. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    int status = backend == AGENT_BACKEND_CUDA ? agent_serve_cuda(&cli, device, chunk, cubin_dir)
                                               : agent_serve_host(&cli);
    free(rest); /* cli's strings point into argv, not here */
    return status;
}

int main(int argc, char **argv)
{
    bool self_test = false;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--self-test") == 0)
            self_test = true;
    if (!self_test)
        return agent_server_main(argc, argv);
    struct agent_args a;
    if (agent_args_parse(argc, argv, &a) < 0) {
        agent_usage(stderr);
        return 2;
    }
    return agent_self_test(&a);
}
