/* The staging reader's normal paths: byte-exact reads of odd sizes into
 * plain and pool memory, a real shard store staged and verified, registered
 * buffers, the pread fallback (forced, and with io_uring refused by the
 * kernel), and many concurrent requests each completed exactly once. */
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "reader_test_util.h"
#include "stagingd/shard.h"

#define CANARY 0x5Cu
#define SEED 0x5EAD2026ull

static const size_t odd_sizes[] = {1, 4095, 4096, 1 * MIB + 3, 3 * MIB, 5 * MIB + 17};
#define N_ODD (sizeof(odd_sizes) / sizeof(odd_sizes[0]))

/* Reads every odd-sized file whole and from offset 7 into plain buffers with
 * a canary tail, and whole into pool buffers; everything must equal pread's
 * bytes and nothing may be written past a request's end. */
static void odd_sizes_exact(unsigned flags)
{
    rt_log_reset();
    struct leasec_pool *pool = rt_pool_make(16 * MIB, 8 * MIB);
    struct sd_reader_config c = rt_config(2, 4, 0, flags);
    struct sd_reader *r = rt_reader_make(&c);
    int fds[N_ODD];
    unsigned char *data[N_ODD], *plain[N_ODD], *part[N_ODD];
    struct leasec_pool_buf pbuf[N_ODD];
    struct rt_done d_plain[N_ODD], d_part[N_ODD], d_pool[N_ODD];
    char name[32];
    for (size_t i = 0; i < N_ODD; i++) {
        size_t n = odd_sizes[i];
        snprintf(name, sizeof(name), "odd-%zu", i);
        data[i] = rt_write_file(name, n, SEED + i);
        fds[i] = rt_open(name, 0);
        plain[i] = malloc(n + 64);
        part[i] = malloc(n + 64);
        ck_assert_ptr_nonnull(plain[i]);
        ck_assert_ptr_nonnull(part[i]);
        memset(plain[i], CANARY, n + 64);
        memset(part[i], CANARY, n + 64);
        ck_assert_int_eq(leasec_pool_alloc(pool, LT_CLASS_PINNED, n, &pbuf[i]), 0);
        memset(pbuf[i].base, CANARY, n);
        rt_done_init(&d_plain[i]);
        rt_done_init(&d_part[i]);
        rt_done_init(&d_pool[i]);
        rt_submit(r, fds[i], 0, n, plain[i], name, NULL, 0, &d_plain[i]);
        if (n > 7)
            rt_submit(r, fds[i], 7, n - 7, part[i], name, NULL, 0, &d_part[i]);
        rt_submit(r, fds[i], 0, n, pbuf[i].base, name, NULL, 0, &d_pool[i]);
    }
    ck_assert_int_eq(sd_reader_drain(r), 0);
    uint64_t expect_bytes = 0;
    for (size_t i = 0; i < N_ODD; i++) {
        size_t n = odd_sizes[i];
        unsigned char *ref = rt_pread_all(fds[i], 0, n);
        ck_assert_msg(memcmp(ref, data[i], n) == 0, "the file itself is wrong");
        ck_assert_int_eq(rt_calls(&d_plain[i]), 1);
        ck_assert_int_eq(rt_result(&d_plain[i]), 0);
        ck_assert_uint_eq(rt_bytes(&d_plain[i]), n);
        ck_assert_msg(memcmp(plain[i], ref, n) == 0, "size %zu: plain buffer differs", n);
        ck_assert_int_eq(rt_calls(&d_pool[i]), 1);
        ck_assert_int_eq(rt_result(&d_pool[i]), 0);
        ck_assert_msg(memcmp(pbuf[i].base, ref, n) == 0, "size %zu: pool buffer differs", n);
        expect_bytes += 2 * n;
        if (n > 7) {
            ck_assert_int_eq(rt_calls(&d_part[i]), 1);
            ck_assert_int_eq(rt_result(&d_part[i]), 0);
            ck_assert_uint_eq(rt_bytes(&d_part[i]), n - 7);
            ck_assert_msg(memcmp(part[i], ref + 7, n - 7) == 0, "size %zu: offset 7 differs", n);
            for (size_t k = n - 7; k < n + 64; k++)
                ck_assert_msg(part[i][k] == CANARY, "size %zu: byte %zu past the end written", n,
                              k);
            expect_bytes += n - 7;
        } else {
            ck_assert_int_eq(rt_calls(&d_part[i]), 0);
        }
        for (size_t k = n; k < n + 64; k++)
            ck_assert_msg(plain[i][k] == CANARY, "size %zu: byte %zu past the end written", n, k);
        free(ref);
    }
    struct sd_reader_stats st;
    sd_reader_stats_get(r, &st);
    ck_assert_uint_eq(st.bytes, expect_bytes);
    ck_assert_uint_eq(st.failed, 0);
    ck_assert_uint_ge(st.reads, st.requests);
    struct sd_reader_info info;
    sd_reader_info_get(r, &info);
    ck_assert_int_eq(info.uring, !(flags & SD_READER_FORCE_PREAD));
    sd_reader_destroy(r);
    for (size_t i = 0; i < N_ODD; i++) {
        close(fds[i]);
        free(data[i]);
        free(plain[i]);
        free(part[i]);
        ck_assert_int_eq(leasec_pool_free(pool, &pbuf[i]), 0);
    }
    leasec_pool_destroy(pool);
}

START_TEST(test_odd_sizes_land_byte_exact_through_io_uring)
{
    odd_sizes_exact(0);
}
END_TEST

START_TEST(test_odd_sizes_land_byte_exact_through_pread_fallback)
{
    odd_sizes_exact(SD_READER_FORCE_PREAD);
}
END_TEST

/* The same random ranges through both back ends give identical bytes. */
START_TEST(test_pread_fallback_gives_identical_results)
{
    rt_log_reset();
    size_t n = 3 * MIB + 777;
    unsigned char *data = rt_write_file("same", n, SEED ^ 0xF00);
    int fd = rt_open("same", 0);
    struct sd_reader_config cu = rt_config(2, 4, 64 * KIB, 0);
    struct sd_reader_config cp = rt_config(2, 4, 64 * KIB, SD_READER_FORCE_PREAD);
    struct sd_reader *ru = rt_reader_make(&cu), *rp = rt_reader_make(&cp);
    struct sd_reader_info iu, ip;
    sd_reader_info_get(ru, &iu);
    sd_reader_info_get(rp, &ip);
    ck_assert_int_eq(iu.uring, 1);
    ck_assert_int_eq(ip.uring, 0);
    enum { N = 40 };
    uint64_t rng = SEED, off[N], len[N];
    unsigned char *bu[N], *bp[N];
    struct rt_done du[N], dp[N];
    for (int i = 0; i < N; i++) {
        off[i] = rt_rand(&rng) % n;
        len[i] = 1 + rt_rand(&rng) % (n - off[i]);
        bu[i] = malloc(len[i]);
        bp[i] = malloc(len[i]);
        memset(bu[i], 0x11, len[i]);
        memset(bp[i], 0x22, len[i]);
        rt_done_init(&du[i]);
        rt_done_init(&dp[i]);
        rt_submit(ru, fd, off[i], len[i], bu[i], "same", NULL, 0, &du[i]);
        rt_submit(rp, fd, off[i], len[i], bp[i], "same", NULL, 0, &dp[i]);
    }
    sd_reader_drain(ru);
    sd_reader_drain(rp);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(rt_result(&du[i]), 0);
        ck_assert_int_eq(rt_result(&dp[i]), 0);
        ck_assert_msg(memcmp(bu[i], bp[i], len[i]) == 0, "range %d: back ends differ", i);
        ck_assert_msg(memcmp(bu[i], data + off[i], len[i]) == 0, "range %d: differs from file", i);
        free(bu[i]);
        free(bp[i]);
    }
    struct sd_reader_stats su, sp;
    sd_reader_stats_get(ru, &su);
    sd_reader_stats_get(rp, &sp);
    ck_assert_uint_eq(su.bytes, sp.bytes);
    ck_assert_uint_eq(su.reads, sp.reads); /* same chunking, no short reads */
    sd_reader_destroy(ru);
    sd_reader_destroy(rp);
    close(fd);
    free(data);
}
END_TEST

/* Makes io_uring_setup fail with ENOSYS in this process, as on a kernel
 * built without io_uring. Returns 0 or -errno. */
static int refuse_io_uring(void)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof(f) / sizeof(f[0]), .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return -errno;
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
        return -errno;
    return 0;
}

/* A kernel that refuses io_uring: the reader says so once and reads with
 * pread. Runs in a child so the filter never outlives the test. */
START_TEST(test_io_uring_refused_by_kernel_falls_back_to_pread)
{
    size_t n = 2 * MIB + 5;
    unsigned char *data = rt_write_file("refused", n, SEED + 99);
    int fd = rt_open("refused", 0);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        rt_log_reset();
        if (refuse_io_uring() < 0)
            _exit(10);
        struct sd_reader_config c = rt_config(2, 4, 256 * KIB, 0);
        struct sd_reader *r = NULL;
        if (sd_reader_create(&c, &r) != 0)
            _exit(11);
        struct sd_reader_info info;
        sd_reader_info_get(r, &info);
        if (info.uring != 0)
            _exit(12);
        if (!rt_log_has("io_uring unavailable") || rt_log.lines != 1)
            _exit(13);
        unsigned char *buf = malloc(n);
        struct rt_done d;
        rt_done_init(&d);
        struct sd_read_req q = {.fd = fd,
                                .len = n,
                                .buf = buf,
                                .buf_len = n,
                                .path = "refused",
                                .done = rt_done_fn,
                                .arg = &d};
        if (!buf || sd_reader_submit(r, &q) != 0)
            _exit(14);
        sd_reader_drain(r);
        if (rt_calls(&d) != 1 || rt_result(&d) != 0 || memcmp(buf, data, n))
            _exit(15);
        sd_reader_destroy(r);
        free(buf);
        _exit(0);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status), "child died (status 0x%x)", status);
    static const char *why[] = {[10] = "seccomp filter could not be installed",
                                [11] = "sd_reader_create failed",
                                [12] = "reader still claims io_uring",
                                [13] = "no single 'io_uring unavailable' log line",
                                [14] = "submit failed",
                                [15] = "read through the fallback wrong"};
    int code = WEXITSTATUS(status);
    ck_assert_msg(code == 0, "child: %s (exit %d)",
                  code >= 10 && code <= 15 ? why[code] : "unexpected", code);
    close(fd);
    free(data);
}
END_TEST

/* A store written by the generator, staged into pool memory through
 * registered buffers, passes every block checksum; a flipped byte fails. */
START_TEST(test_shard_store_staged_into_pool_passes_checksums)
{
    rt_log_reset();
    char err[SD_ERR_LEN];
    struct sd_gen_opts o;
    sd_gen_opts_default(&o);
    const char *dir = rt_path("store");
    char dirbuf[4096];
    snprintf(dirbuf, sizeof(dirbuf), "%s", dir);
    o.out_dir = dirbuf;
    o.size = 2 * MIB + 300 * 256; /* the last shard is partial */
    o.shard_size = 1 * MIB;
    o.dim = 64;
    o.block_size = 64 * KIB;
    o.seed = 2026;
    struct sd_gen_result res;
    ck_assert_msg(sd_gen_store(&o, err, sizeof(err), &res) == 0, "sd_gen_store: %s", err);
    ck_assert_uint_eq(res.shards, 3);
    struct sd_store *st = NULL;
    ck_assert_msg(sd_store_open(dirbuf, err, sizeof(err), &st) == 0, "sd_store_open: %s", err);

    struct leasec_pool *pool = rt_pool_make(4 * MIB, 4 * MIB);
    struct sd_reader_config c = rt_config(2, 4, 256 * KIB, 0);
    c.pool = pool;
    c.fixed = SD_READER_FIXED_ON;
    struct sd_reader *r = rt_reader_make(&c);
    struct sd_reader_info info;
    sd_reader_info_get(r, &info);
    ck_assert_msg(info.uring && info.fixed && info.regions == 1,
                  "expected the pool's segment registered on both rings, found uring %d fixed %d "
                  "regions %u; log:\n%s",
                  info.uring, info.fixed, info.regions, rt_log.all);

    size_t n = sd_store_count(st);
    struct sd_shard *sh[3];
    struct leasec_pool_buf buf[3];
    struct rt_done d[3];
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(sd_store_shard_open(st, i, err, sizeof(err), &sh[i]) == 0, "%s", err);
        uint64_t len = sd_shard_payload_len(sh[i]);
        ck_assert_int_eq(leasec_pool_alloc(pool, LT_CLASS_PINNED, len, &buf[i]), 0);
        memset(buf[i].base, 0xEE, len);
        rt_done_init(&d[i]);
        rt_submit(r, sd_shard_fd(sh[i]), sd_shard_payload_offset(sh[i]), len, buf[i].base,
                  sd_shard_path(sh[i]), NULL, 0, &d[i]);
    }
    sd_reader_drain(r);
    struct sd_reader_stats s1;
    sd_reader_stats_get(r, &s1);
    ck_assert_uint_gt(s1.reads, 0);
    ck_assert_uint_eq(s1.fixed_reads, s1.reads);
    for (size_t i = 0; i < n; i++) {
        uint64_t len = sd_shard_payload_len(sh[i]);
        ck_assert_int_eq(rt_result(&d[i]), 0);
        ck_assert_uint_eq(rt_bytes(&d[i]), len);
        int rc = sd_shard_verify_mem(sh[i], buf[i].base, 0, len, err, sizeof(err), NULL);
        ck_assert_msg(rc == 0, "shard %zu: %s", i, err);
    }
    /* The check is real: one flipped byte in block 5 of shard 1 is caught. */
    ((unsigned char *)buf[1].base)[5 * 64 * KIB + 123] ^= 0x40;
    struct sd_shard_fault fault;
    ck_assert_int_eq(sd_shard_verify_mem(sh[1], buf[1].base, 0, sd_shard_payload_len(sh[1]), err,
                                         sizeof(err), &fault),
                     -EBADMSG);
    ck_assert_uint_eq(fault.block, 5);

    /* A plain (unregistered) destination on the same reader is read too,
     * without READ_FIXED. */
    uint64_t len0 = sd_shard_payload_len(sh[0]);
    unsigned char *plain = malloc(len0);
    struct rt_done dp;
    rt_done_init(&dp);
    rt_submit(r, sd_shard_fd(sh[0]), sd_shard_payload_offset(sh[0]), len0, plain, "plain", NULL, 0,
              &dp);
    sd_reader_drain(r);
    struct sd_reader_stats s2;
    sd_reader_stats_get(r, &s2);
    ck_assert_int_eq(rt_result(&dp), 0);
    ck_assert_uint_gt(s2.reads, s1.reads);
    ck_assert_uint_eq(s2.fixed_reads, s1.fixed_reads);
    ck_assert_int_eq(memcmp(plain, buf[0].base, len0), 0);
    free(plain);

    sd_reader_destroy(r);
    for (size_t i = 0; i < n; i++) {
        leasec_pool_free(pool, &buf[i]);
        sd_shard_close(sh[i]);
    }
    leasec_pool_destroy(pool);
    sd_store_close(st);
}
END_TEST

/* --- many requests --- */

#define MANY_FILES 4
#define MANY_PER_SUBMITTER 700
#define MANY_SUBMITTERS 2
#define MANY_FOLLOWUP_EVERY 25

struct many_req {
    int file;
    uint64_t off, len;
    unsigned char *dst;
    atomic_int calls;
    atomic_int result;
    atomic_ullong bytes;
    struct many_ctx *ctx;
    int followup; /* index of the request this one's callback submits, or -1 */
};

struct many_ctx {
    struct sd_reader *r;
    int fds[MANY_FILES];
    unsigned char *data[MANY_FILES];
    size_t sizes[MANY_FILES];
    struct many_req *reqs;
    size_t nreqs;
    atomic_int submit_errors;
};

static void many_submit(struct many_ctx *m, struct many_req *q);

static void many_done(void *arg, int result, uint64_t bytes)
{
    struct many_req *q = arg;
    atomic_store(&q->result, result);
    atomic_store(&q->bytes, bytes);
    /* Submitting from a callback (on a staging thread) must work. */
    if (q->followup >= 0)
        many_submit(q->ctx, &q->ctx->reqs[q->followup]);
    atomic_fetch_add(&q->calls, 1);
}

static void many_submit(struct many_ctx *m, struct many_req *q)
{
    struct sd_read_req rq = {.fd = m->fds[q->file],
                             .offset = q->off,
                             .len = q->len,
                             .buf = q->dst,
                             .buf_len = q->len,
                             .done = many_done,
                             .arg = q};
    if (sd_reader_submit(m->r, &rq) != 0)
        atomic_fetch_add(&m->submit_errors, 1);
}

struct submitter {
    struct many_ctx *m;
    size_t first, count;
};

static void *many_submitter(void *arg)
{
    struct submitter *s = arg;
    for (size_t i = s->first; i < s->first + s->count; i++)
        if (s->m->reqs[i].followup != -2) /* -2: submitted by a callback */
            many_submit(s->m, &s->m->reqs[i]);
    return NULL;
}

/* Two threads with queue depth 4 serve 1400 requests (0 bytes to 200 KiB)
 * submitted by two threads at once and by callbacks: each completes exactly
 * once with the right bytes. */
START_TEST(test_many_concurrent_requests_complete_exactly_once)
{
    rt_log_reset();
    struct many_ctx m;
    memset(&m, 0, sizeof(m));
    atomic_init(&m.submit_errors, 0);
    char name[32];
    for (int f = 0; f < MANY_FILES; f++) {
        m.sizes[f] = 1 * MIB + 4093 * (size_t)(f + 1);
        snprintf(name, sizeof(name), "many-%d", f);
        m.data[f] = rt_write_file(name, m.sizes[f], SEED * (f + 3));
        m.fds[f] = rt_open(name, 0);
    }
    struct sd_reader_config c = rt_config(2, 4, 64 * KIB, 0);
    m.r = rt_reader_make(&c);
    m.nreqs = MANY_PER_SUBMITTER * MANY_SUBMITTERS;
    m.reqs = calloc(m.nreqs, sizeof(*m.reqs));
    ck_assert_ptr_nonnull(m.reqs);
    uint64_t rng = SEED + 1;
    for (size_t i = 0; i < m.nreqs; i++) {
        struct many_req *q = &m.reqs[i];
        q->file = (int)(rt_rand(&rng) % MANY_FILES);
        q->off = rt_rand(&rng) % m.sizes[q->file];
        uint64_t room = m.sizes[q->file] - q->off, want = rt_rand(&rng) % (200 * KIB);
        q->len = i % 97 == 0 ? 0 : (want < room ? want : room);
        q->dst = malloc(q->len ? q->len : 1);
        ck_assert_ptr_nonnull(q->dst);
        q->ctx = &m;
        q->followup = -1;
        atomic_init(&q->calls, 0);
        atomic_init(&q->result, 1);
        atomic_init(&q->bytes, 0);
    }
    /* Every 25th request, when done, submits the request after it. */
    for (size_t i = 0; i + 1 < m.nreqs; i += MANY_FOLLOWUP_EVERY) {
        m.reqs[i].followup = (int)(i + 1);
        m.reqs[i + 1].followup = -2;
    }
    pthread_t tid[MANY_SUBMITTERS];
    struct submitter sub[MANY_SUBMITTERS];
    for (int s = 0; s < MANY_SUBMITTERS; s++) {
        sub[s] = (struct submitter){&m, (size_t)s * MANY_PER_SUBMITTER, MANY_PER_SUBMITTER};
        ck_assert_int_eq(pthread_create(&tid[s], NULL, many_submitter, &sub[s]), 0);
    }
    for (int s = 0; s < MANY_SUBMITTERS; s++)
        pthread_join(tid[s], NULL);
    ck_assert_int_eq(sd_reader_drain(m.r), 0);
    ck_assert_int_eq(atomic_load(&m.submit_errors), 0);
    uint64_t total = 0;
    for (size_t i = 0; i < m.nreqs; i++) {
        struct many_req *q = &m.reqs[i];
        ck_assert_msg(atomic_load(&q->calls) == 1, "request %zu: %d callbacks", i,
                      atomic_load(&q->calls));
        ck_assert_msg(atomic_load(&q->result) == 0, "request %zu: %s", i,
                      strerror(-atomic_load(&q->result)));
        ck_assert_msg(atomic_load(&q->bytes) == q->len, "request %zu: %llu bytes, expected %llu", i,
                      (unsigned long long)atomic_load(&q->bytes), (unsigned long long)q->len);
        ck_assert_msg(memcmp(q->dst, m.data[q->file] + q->off, q->len) == 0,
                      "request %zu (file %d, %llu+%llu): bytes differ", i, q->file,
                      (unsigned long long)q->off, (unsigned long long)q->len);
        total += q->len;
        free(q->dst);
    }
    struct sd_reader_stats st;
    sd_reader_stats_get(m.r, &st);
    ck_assert_uint_eq(st.requests, m.nreqs);
    ck_assert_uint_eq(st.bytes, total);
    ck_assert_uint_eq(st.failed, 0);
    sd_reader_destroy(m.r);
    for (int f = 0; f < MANY_FILES; f++) {
        close(m.fds[f]);
        free(m.data[f]);
    }
    free(m.reqs);
}
END_TEST

/* --- life cycle --- */

struct thread_rec {
    atomic_int calls;
    pthread_t tid;
    int drain_rc;
    struct sd_reader *r;
};

static void thread_rec_done(void *arg, int result, uint64_t bytes)
{
    struct thread_rec *t = arg;
    ck_assert_int_eq(result, 0);
    ck_assert_uint_eq(bytes, 0);
    t->tid = pthread_self();
    t->drain_rc = sd_reader_drain(t->r); /* from a callback: refused */
    atomic_fetch_add(&t->calls, 1);
}

/* A request of 0 bytes completes once, on a staging thread; draining from a
 * callback is refused with -EDEADLK instead of hanging. */
START_TEST(test_zero_length_completes_on_staging_thread_and_drain_from_callback_refused)
{
    rt_log_reset();
    struct sd_reader_config c = rt_config(1, 2, 0, 0);
    struct sd_reader *r = rt_reader_make(&c);
    struct thread_rec t = {.r = r};
    atomic_init(&t.calls, 0);
    char dummy;
    struct sd_read_req q = {.fd = 0, .len = 0, .buf = &dummy, .done = thread_rec_done, .arg = &t};
    ck_assert_int_eq(sd_reader_submit(r, &q), 0);
    ck_assert_int_eq(sd_reader_drain(r), 0);
    ck_assert_int_eq(atomic_load(&t.calls), 1);
    ck_assert_msg(!pthread_equal(t.tid, pthread_self()), "callback ran on the submitter");
    ck_assert_int_eq(t.drain_rc, -EDEADLK);
    sd_reader_destroy(r);
}
END_TEST

/* Destroy without drain: every queued request still completes first. */
START_TEST(test_destroy_completes_queued_requests)
{
    rt_log_reset();
    size_t n = 2 * MIB + 1;
    unsigned char *data = rt_write_file("destroy", n, SEED + 5);
    int fd = rt_open("destroy", 0);
    struct sd_reader_config c = rt_config(2, 2, 64 * KIB, 0);
    struct sd_reader *r = rt_reader_make(&c);
    enum { N = 8 };
    unsigned char *buf[N];
    struct rt_done d[N];
    for (int i = 0; i < N; i++) {
        buf[i] = malloc(n);
        rt_done_init(&d[i]);
        rt_submit(r, fd, 0, n, buf[i], "destroy", NULL, 0, &d[i]);
    }
    sd_reader_destroy(r);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(rt_calls(&d[i]), 1);
        ck_assert_int_eq(rt_result(&d[i]), 0);
        ck_assert_int_eq(memcmp(buf[i], data, n), 0);
        free(buf[i]);
    }
    close(fd);
    free(data);
}
END_TEST

/* Defaults: three threads a four online cores (one below two), QD 16,
 * 1 MiB chunks; bad configs
 * are refused with the expected and found values. */
START_TEST(test_defaults_and_bad_configs)
{
    struct sd_reader *r = NULL;
    ck_assert_int_eq(sd_reader_create(NULL, &r), 0);
    struct sd_reader_info info;
    sd_reader_info_get(r, &info);
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    ck_assert_uint_eq(info.threads, cores < 2 ? 1u : (unsigned)(cores - cores / 4));
    ck_assert_uint_eq(info.threads, sd_reader_threads_default());
    ck_assert_uint_eq(info.queue_depth, SD_READER_QUEUE_DEPTH_DEFAULT);
    ck_assert_uint_eq(info.chunk_size, SD_READER_CHUNK_DEFAULT);
    ck_assert_int_eq(info.fixed, 0); /* no pool given */
    sd_reader_destroy(r);
    sd_reader_destroy(NULL);

    rt_log_reset();
    struct sd_reader_config c = rt_config(1, 1, 4096 + 512, 0);
    r = (struct sd_reader *)&c;
    ck_assert_int_eq(sd_reader_create(&c, &r), -EINVAL);
    ck_assert_ptr_eq(r, (struct sd_reader *)&c); /* untouched on failure */
    ck_assert(rt_log_has("expected chunk_size a multiple of 4096"));
    ck_assert(rt_log_has("found 4608"));
    c = rt_config(1, SD_READER_QUEUE_DEPTH_MAX + 1, 0, 0);
    ck_assert_int_eq(sd_reader_create(&c, &r), -EINVAL);
    ck_assert(rt_log_has("expected queue_depth"));
    c = rt_config(SD_READER_THREADS_MAX + 1, 0, 0, 0);
    ck_assert_int_eq(sd_reader_create(&c, &r), -EINVAL);
    c = rt_config(1, 0, 0, 0x80);
    ck_assert_int_eq(sd_reader_create(&c, &r), -EINVAL);
    ck_assert(rt_log_has("unknown flags 0x80"));
    c = rt_config(1, 0, 0, 0);
    c.fixed = (enum sd_reader_fixed)7;
    ck_assert_int_eq(sd_reader_create(&c, &r), -EINVAL);
}
END_TEST

/* With a pool and no preference the pool's segments are registered (the
 * measured default); FIXED_OFF leaves them unregistered; reads land either
 * way. */
START_TEST(test_fixed_buffers_default_on_with_pool_off_on_request)
{
    rt_log_reset();
    size_t n = 1 * MIB + 77;
    unsigned char *data = rt_write_file("fixed", n, SEED + 9);
    int fd = rt_open("fixed", 0);
    struct leasec_pool *pool = rt_pool_make(4 * MIB, 2 * MIB);
    for (int off = 0; off < 2; off++) {
        struct sd_reader_config c = rt_config(2, 4, 256 * KIB, 0);
        c.pool = pool;
        c.fixed = off ? SD_READER_FIXED_OFF : SD_READER_FIXED_DEFAULT;
        struct sd_reader *r = rt_reader_make(&c);
        struct sd_reader_info info;
        sd_reader_info_get(r, &info);
        ck_assert_msg(info.fixed == !off, "fixed %d with %s; log:\n%s", info.fixed,
                      off ? "FIXED_OFF" : "the default", rt_log.all);
        ck_assert_uint_eq(info.regions, off ? 0 : 2); /* two 2 MiB segments */
        struct leasec_pool_buf pb;
        ck_assert_int_eq(leasec_pool_alloc(pool, LT_CLASS_PINNED, n, &pb), 0);
        memset(pb.base, 0, n);
        struct rt_done d;
        rt_done_init(&d);
        rt_submit(r, fd, 0, n, pb.base, "fixed", NULL, 0, &d);
        sd_reader_drain(r);
        ck_assert_int_eq(rt_result(&d), 0);
        ck_assert_int_eq(memcmp(pb.base, data, n), 0);
        struct sd_reader_stats st;
        sd_reader_stats_get(r, &st);
        ck_assert_uint_eq(st.reads, 5);
        ck_assert_uint_eq(st.fixed_reads, off ? 0 : 5);
        sd_reader_destroy(r);
        leasec_pool_free(pool, &pb);
    }
    leasec_pool_destroy(pool);
    close(fd);
    free(data);
}
END_TEST

TCase *rt_core_tcase(void)
{
    TCase *tc = tcase_create("core");
    tcase_add_unchecked_fixture(tc, rt_root_setup, rt_root_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_odd_sizes_land_byte_exact_through_io_uring);
    tcase_add_test(tc, test_odd_sizes_land_byte_exact_through_pread_fallback);
    tcase_add_test(tc, test_pread_fallback_gives_identical_results);
    tcase_add_test(tc, test_io_uring_refused_by_kernel_falls_back_to_pread);
    tcase_add_test(tc, test_shard_store_staged_into_pool_passes_checksums);
    tcase_add_test(tc, test_fixed_buffers_default_on_with_pool_off_on_request);
    tcase_add_test(tc, test_many_concurrent_requests_complete_exactly_once);
    tcase_add_test(tc,
                   test_zero_length_completes_on_staging_thread_and_drain_from_callback_refused);
    tcase_add_test(tc, test_destroy_completes_queued_requests);
    tcase_add_test(tc, test_defaults_and_bad_configs);
    return tc;
}
