/* ring-read-bench: the CPU side of the streaming path (docs/streaming.md).
 * Each thread reads a page-cache-hot file in chunks into a small ring of
 * reused slots, as a stagingd ring thread does, with pread or with io_uring
 * (the ring registered as fixed buffers, one read per slot in flight), and
 * optionally hashes each chunk with the block checksum while it is still in
 * cache (cpu-verify inline). Against it, "whole": each thread reads
 * shard-sized pieces into buffers it rotates through (as the whole-shard
 * path's pool buffers), then hashes the piece afterwards. "mmap" and
 * "mmapf" map the file a shard at a time (populated, or faulted) and copy
 * each chunk out with memcpy: the read without the kernel's per-page copy
 * loop. No GPU and no
 * agent: it measures what the staging threads cost and how fast they can
 * fill slots, per chunk size, thread count and method, and prints GB/s and
 * CPU seconds per GB (getrusage) per configuration, median of --repeat. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <liburing.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "bench_clock.h"
#include "base/parse.h"
#include "base/time.h"
#include "kernels/blockhash_ref.h"

#define MIB ((uint64_t)1 << 20)
#define MAX_LIST 16
#define BLOCK 65536u

enum mode { M_PREAD, M_URING, M_WHOLE, M_MMAP, M_MMAPF, M_NMODES };
static const char *const mode_name[] = {"pread", "uring", "whole", "mmap", "mmapf"};

struct conf {
    enum mode mode;
    unsigned threads, slots;
    uint64_t chunk; /* whole: the piece (shard) size */
    int hash;
};

struct worker {
    const struct conf *c;
    int fd;
    uint64_t lo, hi; /* the file range this thread reads */
    uint64_t piece;  /* mmap, mmapf: how much is mapped at once (--shard) */
    unsigned char *mem;
    uint64_t sums[(64 * MIB) / BLOCK + 1];
    int rc;
};

static int read_full(int fd, unsigned char *dst, uint64_t len, uint64_t off)
{
    uint64_t got = 0;
    while (got < len) {
        ssize_t n = pread(fd, dst + got, (size_t)(len - got), (off_t)(off + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -errno : -ENODATA;
        got += (uint64_t)n;
    }
    return 0;
}

static void hash(struct worker *w, const unsigned char *p, uint64_t len)
{
    kr_block_checksums(p, (size_t)len, BLOCK, w->sums);
}

/* pread into slot (i mod slots), hash in cache; whole: pread a piece into
 * buffer (i mod slots), then hash it. */
static int run_pread(struct worker *w)
{
    const struct conf *c = w->c;
    uint64_t i = 0;
    for (uint64_t off = w->lo; off < w->hi; off += c->chunk, i++) {
        uint64_t len = off + c->chunk < w->hi ? c->chunk : w->hi - off;
        unsigned char *slot = w->mem + (i % c->slots) * c->chunk;
        int rc = read_full(w->fd, slot, len, off);
        if (rc < 0)
            return rc;
        if (c->hash)
            hash(w, slot, len);
    }
    return 0;
}

/* One read_fixed per slot in flight; a completed slot is hashed and read
 * again. */
static int run_uring(struct worker *w)
{
    const struct conf *c = w->c;
    struct io_uring ring;
    int rc = io_uring_queue_init(c->slots, &ring, 0);
    if (rc < 0)
        return rc;
    struct iovec iov[MAX_LIST * 16];
    for (unsigned s = 0; s < c->slots; s++)
        iov[s] = (struct iovec){.iov_base = w->mem + s * c->chunk, .iov_len = c->chunk};
    rc = io_uring_register_buffers(&ring, iov, c->slots);
    if (rc < 0) {
        io_uring_queue_exit(&ring);
        return rc;
    }
    uint64_t next = w->lo, inflight = 0;
    uint64_t lens[MAX_LIST * 16] = {0};
    unsigned free_slot = 0;
    for (;;) {
        while (inflight < c->slots && next < w->hi) {
            struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
            uint64_t len = next + c->chunk < w->hi ? c->chunk : w->hi - next;
            unsigned s = free_slot;
            free_slot = (free_slot + 1) % c->slots;
            io_uring_prep_read_fixed(sqe, w->fd, iov[s].iov_base, (unsigned)len, next, (int)s);
            io_uring_sqe_set_data64(sqe, s);
            lens[s] = len;
            next += len;
            inflight++;
        }
        if (inflight == 0)
            break;
        struct io_uring_cqe *cqe;
        rc = io_uring_submit_and_wait(&ring, 1);
        if (rc < 0)
            break;
        rc = io_uring_peek_cqe(&ring, &cqe);
        if (rc < 0)
            break;
        unsigned s = (unsigned)io_uring_cqe_get_data64(cqe);
        if (cqe->res != (int)lens[s]) {
            rc = cqe->res < 0 ? cqe->res : -ENODATA; /* short reads of a hot file: not expected */
            io_uring_cqe_seen(&ring, cqe);
            break;
        }
        io_uring_cqe_seen(&ring, cqe);
        if (c->hash)
            hash(w, iov[s].iov_base, lens[s]);
        inflight--;
        free_slot = s; /* refill the slot that came back (in order per slot) */
        rc = 0;
    }
    io_uring_queue_exit(&ring);
    return rc;
}

/* mmap: the file mapped a shard-sized piece at a time (MAP_POPULATE), each
 * chunk copied with memcpy into slot (i mod slots), the piece unmapped;
 * mmapf: the same, the pages faulted in as the copy meets them. */
static int run_mmap(struct worker *w)
{
    const struct conf *c = w->c;
    const uint64_t piece = w->piece;
    uint64_t i = 0;
    for (uint64_t p = w->lo; p < w->hi; p += piece) {
        const uint64_t plen = p + piece < w->hi ? piece : w->hi - p;
        const int flags = MAP_SHARED | (c->mode == M_MMAP ? MAP_POPULATE : 0);
        unsigned char *m = mmap(NULL, (size_t)plen, PROT_READ, flags, w->fd, (off_t)p);
        if (m == MAP_FAILED)
            return -errno;
        if (c->mode == M_MMAPF)
            madvise(m, (size_t)plen, MADV_SEQUENTIAL);
        for (uint64_t off = 0; off < plen; off += c->chunk, i++) {
            uint64_t len = off + c->chunk < plen ? c->chunk : plen - off;
            unsigned char *slot = w->mem + (i % c->slots) * c->chunk;
            memcpy(slot, m + off, (size_t)len);
            if (c->hash)
                hash(w, slot, len);
        }
        munmap(m, (size_t)plen);
    }
    return 0;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    w->rc = w->c->mode == M_URING                             ? run_uring(w)
            : w->c->mode == M_MMAP || w->c->mode == M_MMAPF ? run_mmap(w)
                                                              : run_pread(w);
    return NULL;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A size of base's spellings (64M, 4KiB, 1G, ...), not zero. */
static int parse_size(const char *s, uint64_t *v)
{
    return base_parse_size(s, v, NULL, 0) < 0 || *v == 0 ? -1 : 0;
}

static int parse_list(char *s, uint64_t *v, unsigned *n, int sizes)
{
    *n = 0;
    for (char *tok = strtok(s, ","); tok && *n < MAX_LIST; tok = strtok(NULL, ",")) {
        if (sizes ? parse_size(tok, &v[*n]) < 0 : (v[*n] = strtoull(tok, NULL, 10)) == 0)
            return -1;
        (*n)++;
    }
    return *n ? 0 : -1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: ring-read-bench --file PATH [--create SIZE] [--threads 1,2] [--chunk "
               "256K,1M,4M] [--slots 4] [--mode pread,uring,whole,mmap,mmapf] [--shard 64M] [--hash] "
               "[--repeat 5]\n");
}

int main(int argc, char **argv)
{
    const char *file = NULL;
    uint64_t create = 0, shard = 64 * MIB;
    uint64_t threads[MAX_LIST] = {1, 2}, chunks[MAX_LIST] = {MIB, 4 * MIB};
    unsigned nthreads = 2, nchunks = 2, slots = 4, repeat = 5, modes = 3;
    int hash_on = 0;
    static const struct option opts[] = {
        {"file", 1, 0, 'f'},   {"create", 1, 0, 'c'}, {"threads", 1, 0, 't'}, {"chunk", 1, 0, 'k'},
        {"slots", 1, 0, 's'},  {"mode", 1, 0, 'm'},   {"shard", 1, 0, 'S'},   {"hash", 0, 0, 'H'},
        {"repeat", 1, 0, 'r'}, {"help", 0, 0, 'h'},   {0, 0, 0, 0},
    };
    for (int o; (o = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        int bad = 0;
        switch (o) {
        case 'f':
            file = optarg;
            break;
        case 'c':
            bad = parse_size(optarg, &create);
            break;
        case 't':
            bad = parse_list(optarg, threads, &nthreads, 0);
            break;
        case 'k':
            bad = parse_list(optarg, chunks, &nchunks, 1);
            break;
        case 's':
            slots = (unsigned)strtoul(optarg, NULL, 10), bad = slots < 1 || slots > 16;
            break;
        case 'S':
            bad = parse_size(optarg, &shard) || shard > 64 * MIB;
            break;
        case 'H':
            hash_on = 1;
            break;
        case 'r':
            repeat = (unsigned)strtoul(optarg, NULL, 10), bad = repeat < 1 || repeat > 101;
            break;
        case 'm':
            modes = 0;
            for (char *tok = strtok(optarg, ","); tok; tok = strtok(NULL, ",")) {
                unsigned m = 0;
                while (m < M_NMODES && strcmp(tok, mode_name[m]))
                    m++;
                bad |= m == M_NMODES;
                modes |= 1u << m;
            }
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "ring-read-bench: bad value: %s\n", optarg);
            usage(stderr);
            return 2;
        }
    }
    if (!file) {
        usage(stderr);
        return 2;
    }
    if (create) {
        int fd = open(file, O_CREAT | O_TRUNC | O_WRONLY, 0644);
        unsigned char *b = malloc(MIB);
        if (fd < 0 || !b)
            return perror(file), 1;
        uint64_t x = 0x9e3779b97f4a7c15ull;
        for (uint64_t done = 0; done < create; done += MIB) {
            for (size_t i = 0; i < MIB; i += 8) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                memcpy(b + i, &x, 8);
            }
            if (write(fd, b, MIB) != (ssize_t)MIB)
                return perror(file), 1;
        }
        free(b);
        close(fd);
    }
    int fd = open(file, O_RDONLY);
    if (fd < 0)
        return perror(file), 1;
    const uint64_t size = (uint64_t)lseek(fd, 0, SEEK_END);
    { /* warm the page cache */
        unsigned char *b = malloc(4 * MIB);
        for (uint64_t off = 0; b && off < size; off += 4 * MIB)
            if (pread(fd, b, 4 * MIB, (off_t)off) < 0)
                break;
        free(b);
    }
    printf("file %s, %" PRIu64 " MiB, page-cache hot; %u slot(s) per thread; %s; median of %u\n",
           file, size / MIB, slots,
           hash_on ? "hash each chunk (block checksum, 64 KiB blocks)" : "no hash", repeat);
    printf("%-6s %7s %8s %9s %10s\n", "mode", "threads", "chunk", "GB/s", "CPU s/GB");
    for (unsigned m = 0; m < M_NMODES; m++) {
        if (!(modes & (1u << m)))
            continue;
        for (unsigned ti = 0; ti < nthreads; ti++) {
            for (unsigned ci = 0; ci < (m == M_WHOLE ? 1u : nchunks); ci++) {
                struct conf c = {.mode = (enum mode)m,
                                 .threads = (unsigned)threads[ti],
                                 .slots = slots,
                                 .chunk = m == M_WHOLE ? shard : chunks[ci],
                                 .hash = hash_on};
                double gbs[101], cpg[101];
                struct worker *w = calloc(c.threads, sizeof *w);
                for (unsigned t = 0; t < c.threads; t++) {
                    w[t].c = &c;
                    w[t].fd = fd;
                    w[t].mem = aligned_alloc(4096, c.slots * c.chunk);
                    if (!w[t].mem)
                        return fprintf(stderr, "out of memory\n"), 1;
                    memset(w[t].mem, 0, c.slots * c.chunk);
                    uint64_t per = size / c.threads / c.chunk * c.chunk;
                    w[t].lo = per * t;
                    w[t].hi = t + 1 == c.threads ? size : per * (t + 1);
                    w[t].piece = shard;
                }
                for (unsigned r = 0; r < repeat; r++) {
                    pthread_t th[MAX_LIST * 16];
                    double c0 = bench_cpu_seconds();
                    uint64_t t0 = base_now_ns();
                    for (unsigned t = 0; t < c.threads; t++)
                        pthread_create(&th[t], NULL, worker_main, &w[t]);
                    for (unsigned t = 0; t < c.threads; t++)
                        pthread_join(th[t], NULL);
                    double secs = (double)(base_now_ns() - t0) / 1e9;
                    double cpu = bench_cpu_seconds() - c0;
                    for (unsigned t = 0; t < c.threads; t++)
                        if (w[t].rc < 0)
                            return fprintf(stderr, "%s: %s\n", mode_name[m], strerror(-w[t].rc)), 1;
                    gbs[r] = (double)size / secs / 1e9;
                    cpg[r] = cpu / ((double)size / 1e9);
                }
                qsort(gbs, repeat, sizeof gbs[0], cmp_d);
                qsort(cpg, repeat, sizeof cpg[0], cmp_d);
                char ck[32];
                snprintf(ck, sizeof ck, "%" PRIu64 "K", c.chunk / 1024);
                printf("%-6s %7u %8s %9.2f %10.3f\n", mode_name[m], c.threads, ck, gbs[repeat / 2],
                       cpg[repeat / 2]);
                fflush(stdout);
                for (unsigned t = 0; t < c.threads; t++)
                    free(w[t].mem);
                free(w);
            }
        }
    }
    close(fd);
    return 0;
}
