/* doorbell-bench: how fast a CUDA-free process can start GPU work, by
 * doorbell against by socket message (DESIGN.md, "The doorbell").
 *
 * The child is forked before this process touches CUDA and never does; it
 * shares one memfd page set with the parent, which registers it
 * (cuMemHostRegister PORTABLE|DEVICEMAP). Per iteration the child times from
 * its action to seeing the GPU's completion word:
 *   doorbell: the parent has queued wait(bell >= seq) -> tiny kernel ->
 *             write(flag, seq) on a stream; the child stores seq in the bell.
 *   socket:   the child sends seq over a SOCK_SEQPACKET socketpair; the
 *             parent's socket loop hands a job to the worker pool, which
 *             launches the same kernel and write (the agent's path).
 *   socket, loop launches: as socket, but the loop thread launches itself
 *             (a lower bound for any socket path; the agent does not do it).
 * --work picks what the GPU runs once started, the same on every path:
 *   kernel      (default) one block of the checksum kernel, then
 *               cuStreamWriteValue64(flag, seq): the full ga_doorbell_queue
 *               sequence;
 *   write       cuStreamWriteValue64(flag, seq) alone: the doorbell's floor;
 *   kernel-flag the kernel itself hashes the 8-byte seq word (the bell, or a
 *               word the loop stored) into the flag, one hop, no write after;
 *               the child waits for the hash, computed with the C reference.
 * Prints p50/p99 per path and, last, a table. Exit 0 when every iteration
 * completed (the goal line says whether the latency goal was met). */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/time.h"
#include "bench_cuda.h"
#include "gpu/cu.h"
#include "gpu/exec_cuda.h"
#include "kernels/blockhash_ref.h"
#include "kernels/checksum.h"

enum { P_DOORBELL, P_SOCKET_POOL, P_SOCKET_DIRECT, PATHS };
static const char *const path_names[PATHS] = {
    "doorbell (store -> GPU wait -> flag)",
    "socket -> pool job -> launch (agent)",
    "socket, loop launches (reference)",
};

#define MAX_ITERS 20000
#define WARMUP 200
#define END_PATH 0xffffffffu

enum work_mode { W_KERNEL, W_WRITE, W_KERNEL_FLAG, WORK_MODES };
static const char *const work_names[WORK_MODES] = {"kernel", "write", "kernel-flag"};

struct line {
    _Alignas(64) uint64_t v;
};

/* The shared memfd: the bell and each completion word on its own line, so
 * the GPU's polling and the child's spinning never share one. */
struct shm {
    struct line bell;
    struct line flag[PATHS];
    struct line seqw[PATHS]; /* kernel-flag: the seq the socket loop stored for the kernel */
    struct line armed;       /* doorbell seq the parent has queued */
    struct line child_error;
    uint32_t iters;
    uint32_t pause_us;
    uint32_t work; /* enum work_mode */
    uint64_t lat_ns[PATHS][MAX_ITERS];
};

struct msg {
    uint32_t path;
    uint32_t pad;
    uint64_t seq;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Spins until *w >= want (wrap-safe; with @exact: == want) or @timeout_ns
 * passes; 0 or -ETIMEDOUT. */
static int spin_until_mode(const uint64_t *w, uint64_t want, int exact, uint64_t timeout_ns)
{
    uint64_t start = base_now_ns();
    for (unsigned int n = 0;; n++) {
        uint64_t v = ga_doorbell_peek(w);
        if (exact ? v == want : (int64_t)(v - want) >= 0)
            return 0;
        if ((n & 1023) == 0 && base_now_ns() - start > timeout_ns)
            return -ETIMEDOUT;
        cpu_relax();
    }
}

static int spin_until(const uint64_t *w, uint64_t want, uint64_t timeout_ns)
{
    return spin_until_mode(w, want, 0, timeout_ns);
}

/* What the completion word holds once iteration @seq is done. CUDA-free. */
static uint64_t flag_expected(uint32_t work, uint64_t seq)
{
    uint64_t h = seq;
    if (work == W_KERNEL_FLAG)
        kr_block_checksums(&seq, sizeof(seq), sizeof(seq), &h);
    return h;
}

/* Waits for iteration @seq's completion word. */
static int flag_wait(const struct shm *m, int path, uint64_t seq)
{
    return spin_until_mode(&m->flag[path].v, flag_expected(m->work, seq), m->work == W_KERNEL_FLAG,
                           5000000000ull);
}

static void spin_for_us(uint32_t us)
{
    uint64_t until = base_now_ns() + (uint64_t)us * 1000;
    while (base_now_ns() < until)
        cpu_relax();
}

/* ---- the CUDA-free child ---- */

static int child_run(struct shm *m, int sock)
{
    const uint32_t total = WARMUP + m->iters;
    for (int path = 0; path < PATHS; path++) {
        for (uint32_t i = 0; i < total; i++) {
            uint64_t seq = (uint64_t)i + 1;
            if (path == P_DOORBELL && spin_until(&m->armed.v, seq, 5000000000ull) < 0)
                return 10 + path;
            spin_for_us(m->pause_us); /* the GPU is waiting, the loop is asleep */
            uint64_t t0 = base_now_ns();
            if (path == P_DOORBELL) {
                ga_doorbell_ring(&m->bell.v, seq);
            } else {
                struct msg msg = {.path = (uint32_t)path, .seq = seq};
                if (send(sock, &msg, sizeof(msg), 0) != (ssize_t)sizeof(msg))
                    return 20 + path;
            }
            if (flag_wait(m, path, seq) < 0)
                return 30 + path;
            uint64_t t1 = base_now_ns();
            if (i >= WARMUP)
                m->lat_ns[path][i - WARMUP] = t1 - t0;
        }
    }
    struct msg end = {.path = END_PATH};
    return send(sock, &end, sizeof(end), 0) == (ssize_t)sizeof(end) ? 0 : 40;
}

/* ---- the agent side ---- */

struct bench {
    struct shm *m;
    uint32_t work;
    struct ga_device *dev;
    struct ga_streams *streams;
    struct ga_pool *pool;
    struct CUstream_st *stream;
    CUfunction kernel;
    CUdeviceptr data, sums;
    CUdeviceptr bell_dev, flag_dev[PATHS], seqw_dev[PATHS];
};

/* One block of the checksum kernel over the 8 bytes at @data, into @sums. */
static int tiny_kernel(struct bench *b, struct CUstream_st *stream, CUdeviceptr data,
                       CUdeviceptr sums)
{
    unsigned long long len = 8;
    unsigned int block = 8;
    void *params[] = {&data, &len, &block, &sums};
    return cuLaunchKernel(b->kernel, 1, 1, 1, KN_CHECKSUM_THREADS, 1, 1, 0, stream, params, NULL) ==
                   CUDA_SUCCESS
               ? 0
               : -EIO;
}

struct arm_args {
    struct bench *b;
    uint64_t seq;
};

/* The doorbell path's work, queued behind the wait. */
static int doorbell_work(void *arg, struct CUstream_st *stream)
{
    struct bench *b = arg;
    if (b->work == W_KERNEL_FLAG) /* hashes the bell word itself into the flag */
        return tiny_kernel(b, stream, b->bell_dev, b->flag_dev[P_DOORBELL]);
    return tiny_kernel(b, stream, b->data, b->sums);
}

static int arm_job(void *arg)
{
    struct arm_args *a = arg;
    struct bench *b = a->b;
    struct ga_doorbell_req req = {.bell_dev = b->bell_dev,
                                  .seq = a->seq,
                                  .work = b->work == W_WRITE ? NULL : doorbell_work,
                                  .work_arg = b,
                                  .done_dev =
                                      b->work == W_KERNEL_FLAG ? 0 : b->flag_dev[P_DOORBELL]};
    return ga_doorbell_queue(b->streams, b->stream, &req);
}

struct launch_args {
    struct bench *b;
    uint32_t path;
    uint64_t seq;
};

static int launch(struct bench *b, uint32_t path, uint64_t seq)
{
    struct CUstream_st *st = b->stream;
    int rc = 0;
    if (b->work == W_KERNEL_FLAG) {
        /* The same one hop as the doorbell's: the kernel hashes the seq. */
        ga_doorbell_ring(&b->m->seqw[path].v, seq);
        rc = tiny_kernel(b, st, b->seqw_dev[path], b->flag_dev[path]);
    } else if (b->work == W_KERNEL) {
        rc = tiny_kernel(b, st, b->data, b->sums);
    }
    if (rc == 0 && b->work != W_KERNEL_FLAG)
        rc = ga_doorbell_signal(b->streams, b->stream, b->flag_dev[path], seq);
    return rc;
}

static int launch_job(void *arg)
{
    struct launch_args *l = arg;
    return launch(l->b, l->path, l->seq);
}

static void launch_done(void *arg, int rc)
{
    (void)arg;
    if (rc < 0)
        fprintf(stderr, "doorbell-bench: a socket-path launch failed: %d\n", rc);
}

static int parent_doorbell(struct bench *b, struct shm *m)
{
    const uint32_t total = WARMUP + m->iters;
    for (uint32_t i = 0; i < total; i++) {
        struct arm_args a = {.b = b, .seq = (uint64_t)i + 1};
        int rc = ga_pool_run(b->pool, arm_job, &a);
        if (rc < 0)
            return rc;
        ga_doorbell_ring(&m->armed.v, a.seq); /* not the bell: tells the child it may ring */
        if ((rc = flag_wait(m, P_DOORBELL, a.seq)) < 0) {
            fprintf(stderr, "doorbell-bench: doorbell %u never completed\n", i + 1);
            return rc;
        }
    }
    return 0;
}

/* The socket loop: never calls CUDA for the agent's path, only hands jobs on. */
static int parent_socket(struct bench *b, int sock, uint32_t iters, struct launch_args *args)
{
    const uint32_t total = WARMUP + iters;
    int rc = 0, direct_ready = 0;
    for (;;) {
        struct msg msg;
        ssize_t n = recv(sock, &msg, sizeof(msg), 0);
        if (n != (ssize_t)sizeof(msg)) {
            fprintf(stderr,
                    "doorbell-bench: socket loop: expected a %zu-byte message, got %zd "
                    "(%s)\n",
                    sizeof(msg), n, n < 0 ? strerror(errno) : "short or closed");
            rc = -EPROTO;
            break;
        }
        if (msg.path == END_PATH)
            break;
        if (msg.seq == 0 || msg.seq > total) {
            rc = -EPROTO;
            break;
        }
        if (msg.path == P_SOCKET_POOL) {
            struct launch_args *l = &args[msg.seq - 1];
            *l = (struct launch_args){.b = b, .path = msg.path, .seq = msg.seq};
            rc = ga_pool_submit(b->pool, launch_job, l, launch_done, NULL, NULL);
        } else if (msg.path == P_SOCKET_DIRECT) {
            if (!direct_ready && (rc = ga_device_make_current(b->dev)) == 0)
                direct_ready = 1;
            if (rc == 0)
                rc = launch(b, msg.path, msg.seq);
        } else {
            rc = -EPROTO;
        }
        if (rc < 0)
            break;
    }
    return rc;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

struct stats {
    double p50, p99, min, mean;
};

static struct stats stats_of(uint64_t *v, uint32_t n)
{
    qsort(v, n, sizeof(*v), cmp_u64);
    double sum = 0;
    for (uint32_t i = 0; i < n; i++)
        sum += (double)v[i];
    struct stats s = {
        .p50 = (double)v[n / 2] / 1000.0,
        .p99 = (double)v[(size_t)n * 99 / 100] / 1000.0,
        .min = (double)v[0] / 1000.0,
        .mean = sum / n / 1000.0,
    };
    return s;
}

static int bench_setup(struct bench *b, struct shm *m, size_t shm_len)
{
    struct ga_device_opts opts = {.ordinal = 0};
    int rc = ga_device_open(&opts, &b->dev);
    if (rc < 0)
        return rc;
    if ((rc = ga_doorbell_check(b->dev)) < 0)
        return rc;
    struct ga_pool_opts popts = {.threads = 4};
    if ((rc = ga_device_pool_create(b->dev, &popts, &b->pool)) < 0 ||
        (rc = ga_streams_create(b->dev, &b->streams)) < 0 ||
        (rc = ga_stream_new(b->streams, &b->stream)) < 0 ||
        (rc = ga_device_kernel(b->dev, KN_CHECKSUM_IMAGE, KN_K_BLOCK_CHECKSUM, &b->kernel)) < 0)
        return rc;
    if ((rc = ga_device_make_current(b->dev)) < 0)
        return rc;
    CUdeviceptr base = 0;
    if (cuMemHostRegister(m, shm_len, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP) !=
            CUDA_SUCCESS ||
        cuMemHostGetDevicePointer(&base, m, 0) != CUDA_SUCCESS ||
        cuMemAlloc(&b->data, 64) != CUDA_SUCCESS || cuMemAlloc(&b->sums, 64) != CUDA_SUCCESS ||
        cuMemsetD8(b->data, 0x5a, 64) != CUDA_SUCCESS) {
        fprintf(stderr, "doorbell-bench: registering the shared words or allocating failed\n");
        return -EIO;
    }
    b->bell_dev = base + offsetof(struct shm, bell);
    for (int p = 0; p < PATHS; p++) {
        b->flag_dev[p] = base + offsetof(struct shm, flag) + (CUdeviceptr)p * sizeof(struct line);
        b->seqw_dev[p] = base + offsetof(struct shm, seqw) + (CUdeviceptr)p * sizeof(struct line);
    }
    return 0;
}

static void usage_to(FILE *f)
{
    fprintf(f,
            "usage: doorbell-bench [--iters N (1..%d, default 2000)] [--pause-us N "
            "(default 50)]\n"
            "                      [--work kernel|write|kernel-flag (default kernel)]\n",
            MAX_ITERS);
}

static void usage(void)
{
    usage_to(stderr);
}

int main(int argc, char **argv)
{
    if (bench_help_wanted(argc, argv)) {
        usage_to(stdout);
        return 0;
    }
    uint32_t iters = 2000, pause_us = 50, work = W_KERNEL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
            iters = (uint32_t)strtoul(argv[++i], NULL, 0);
        } else if (!strcmp(argv[i], "--pause-us") && i + 1 < argc) {
            pause_us = (uint32_t)strtoul(argv[++i], NULL, 0);
        } else if (!strcmp(argv[i], "--work") && i + 1 < argc) {
            const char *w = argv[++i];
            for (work = 0; work < WORK_MODES && strcmp(w, work_names[work]); work++)
                ;
            if (work == WORK_MODES) {
                usage();
                return 2;
            }
        } else {
            usage();
            return 2;
        }
    }
    if (iters < 1 || iters > MAX_ITERS) {
        usage();
        return 2;
    }
    bench_cuda_require("doorbell-bench");
    /* Everything shared exists before the fork; CUDA only after it. */
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t shm_len = (sizeof(struct shm) + page - 1) / page * page;
    int mfd = memfd_create("doorbell-bench", MFD_CLOEXEC);
    if (mfd < 0 || ftruncate(mfd, (off_t)shm_len) < 0) {
        perror("doorbell-bench: memfd");
        return 1;
    }
    struct shm *m = mmap(NULL, shm_len, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    if (m == MAP_FAILED) {
        perror("doorbell-bench: mmap");
        return 1;
    }
    memset(m, 0, shm_len); /* also faults every page in before registration */
    m->iters = iters;
    m->pause_us = pause_us;
    m->work = work;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
        perror("doorbell-bench: socketpair");
        return 1;
    }
    pid_t child = fork();
    if (child < 0) {
        perror("doorbell-bench: fork");
        return 1;
    }
    if (child == 0) {
        close(sv[0]);
        int rc = child_run(m, sv[1]);
        __atomic_store_n(&m->child_error.v, (uint64_t)rc, __ATOMIC_RELEASE);
        _exit(rc ? 1 : 0);
    }
    close(sv[1]);

    struct bench b = {.m = m, .work = work};
    /* Job arguments of the socket path: freed after the pool, which runs them. */
    struct launch_args *args = calloc(WARMUP + iters, sizeof(*args));
    int rc = args ? bench_setup(&b, m, shm_len) : -ENOMEM;
    if (rc == 0)
        rc = parent_doorbell(&b, m);
    if (rc == 0)
        rc = parent_socket(&b, sv[0], iters, args);
    if (rc < 0) /* the child spins on words that will never come: stop it */
        kill(child, SIGKILL);
    int status = 0;
    waitpid(child, &status, 0);
    if (rc == 0) /* after a failure a wait may never open: do not block on it */
        rc = ga_stream_synchronize(b.streams, b.stream);
    int child_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (rc < 0 || !child_ok) {
        fprintf(stderr,
                "doorbell-bench: FAILED (agent side %d, child status %#x, child error %" PRIu64
                ")\n",
                rc, status, m->child_error.v);
        return 1;
    }
    const struct ga_device_info *in = ga_device_info_get(b.dev);
    printf("doorbell-bench: %s (sm_%u), work '%s', %u iterations per path after %d warm-up, "
           "%u us pause before each\n",
           in->name, in->arch, work_names[work], iters, WARMUP, pause_us);
    struct stats st[PATHS];
    for (int p = 0; p < PATHS; p++) {
        st[p] = stats_of(m->lat_ns[p], iters);
        printf("  %-38s min %7.2f us  mean %7.2f us\n", path_names[p], st[p].min, st[p].mean);
    }
    double ratio = st[P_DOORBELL].p50 / st[P_SOCKET_POOL].p50;
    int goal = ratio <= 0.5 && st[P_DOORBELL].p50 < 8.0;
    printf("goal (doorbell p50 <= half the socket path's and < 8 us): %s (doorbell/socket p50 "
           "= %.2f)\n\n",
           goal ? "MET" : "NOT MET", ratio);
    printf("%-38s | %8s | %8s | %s\n", "path", "p50 us", "p99 us", "ratio (p50 / doorbell p50)");
    for (int p = 0; p < PATHS; p++)
        printf("%-38s | %8.2f | %8.2f | %.2f\n", path_names[p], st[p].p50, st[p].p99,
               st[p].p50 / st[P_DOORBELL].p50);

    ga_pool_destroy(b.pool);
    free(args);
    ga_stream_free(b.streams, b.stream);
    ga_streams_destroy(b.streams);
    cuMemFree(b.data);
    cuMemFree(b.sums);
    cuMemHostUnregister(m);
    ga_device_close(b.dev);
    munmap(m, shm_len);
    close(mfd);
    close(sv[0]);
    return 0;
}
