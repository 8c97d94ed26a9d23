/* Helpers for tests/hostile: see hostile.h. */
#include "hostile.h"

#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "huge_pages.h"
#include "kernels/blockhash_ref.h"

#ifndef MFD_HUGETLB
#define MFD_HUGETLB 0x0004U
#endif

int hs_memfd(struct hs_seg *s, uint64_t size, int huge, int seals, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    s->fd = -1;
    unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING | (huge ? MFD_HUGETLB | MFD_HUGE_2MB : 0);
    int fd = memfd_create(huge ? "hs-huge" : "hs-seg", flags);
    if (fd < 0)
        return -errno;
    ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        close(fd);
        return -e;
    }
    th_fill(p, size, seed);
    if (seals)
        ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, seals), 0);
    *s = (struct hs_seg){.fd = fd, .map = p, .size = size, .huge = huge, .seals = seals};
    return 0;
}

void hs_seg_close(struct hs_seg *s)
{
    if (s->map)
        munmap(s->map, s->size);
    if (s->fd >= 0)
        close(s->fd);
    s->map = NULL;
    s->fd = -1;
}

uint32_t hs_offer(int conn, struct hs_seg *s, uint32_t cls, char *msg, size_t msglen)
{
    uint64_t rid = th_offer_send(conn, &s->fd, 1, s->size, cls);
    union lt_msg_buffer buf;
    ssize_t n = th_recv(conn, &buf, TH_TIMEOUT_MS);
    ck_assert_msg(n > 0, "no answer to SEGMENT_OFFER: %s",
                  n == 0 ? "end of stream" : strerror((int)-n));
    ck_assert_uint_eq(buf.hdr.request_id, rid);
    if (buf.hdr.type == LT_MSG_SEGMENT_ACCEPT) {
        s->id = ((const struct lt_msg_segment_accept *)(const void *)buf.bytes)->segment;
        if (msg && msglen)
            msg[0] = '\0';
        return LT_OK;
    }
    ck_assert_uint_eq(buf.hdr.type, LT_MSG_ERROR);
    const struct lt_msg_error *e = (const void *)buf.bytes;
    if (msg && msglen)
        snprintf(msg, msglen, "%s", e->message);
    return e->code;
}

int hs_offer_accepted(int conn, struct hs_seg *s, uint64_t size, int huge, uint32_t cls,
                      uint64_t seed)
{
    char msg[128];
    int rc = hs_memfd(s, size, huge, HS_OLD_SEALS, seed);
    if (rc < 0)
        return rc;
    uint32_t code = hs_offer(conn, s, cls, msg, sizeof msg);
    if (code == LT_E_SEGMENT_UNSEALED) {
        hs_seg_close(s);
        rc = hs_memfd(s, size, huge, HS_SEALS, seed);
        if (rc < 0)
            return rc;
        code = hs_offer(conn, s, cls, msg, sizeof msg);
    }
    ck_assert_msg(code == LT_OK, "offer of %llu bytes (%s) refused: %s: %s",
                  (unsigned long long)size, lt_class_name(cls), lt_error_name(code), msg);
    return 0;
}

void hs_checksum_fill(unsigned char *map, uint64_t data, uint64_t seed)
{
    th_fill(map, data, seed);
    ck_assert_int_eq(kr_block_checksums(map, data, 4096, (uint64_t *)(void *)(map + data)),
                     (long)(data / 4096));
}

void hs_checksum_submit(struct lt_msg_submit *s, struct lt_lease_id lease, uint64_t data)
{
    memset(s, 0, sizeof *s);
    s->lease = lease;
    s->op = LT_OP_CHECKSUM_VERIFY;
    s->args.checksum.offset = 0;
    s->args.checksum.length = data;
    s->args.checksum.sums_offset = data;
    s->args.checksum.block_size = 4096;
}

uint64_t hs_unrung_bell_submit(int conn, struct hs_seg *bells, struct hs_seg *data, uint64_t len,
                               uint64_t seed)
{
    char msg[128];
    ck_assert_int_eq(hs_memfd(bells, 64 * HS_KIB, 0, HS_OLD_SEALS, seed), 0);
    memset(bells->map, 0, 64);
    ck_assert_uint_eq(hs_offer(conn, bells, LT_CLASS_MAPPED, msg, sizeof msg), LT_OK);
    struct lt_lease_grant_entry g =
        hs_offer_and_lease(conn, data, 64 * HS_KIB, 0, LT_CLASS_STAGED, seed + 1, len, NULL);
    struct lt_msg_submit sub;
    hs_checksum_submit(&sub, g.lease, len);
    sub.flags = LT_SUBMIT_F_WAIT_BELL;
    sub.bell = (struct lt_word_ref){.segment = bells->id, .offset = 0};
    sub.bell_seq = 1;
    uint64_t rid = th_submit_send(conn, &sub);
    th_expect_silence(conn, 50);
    return rid;
}

static void *hs_bell_rewriter(void *arg)
{
    struct hs_rewriter *r = arg;
    while (__atomic_load_n(&r->running, __ATOMIC_ACQUIRE))
        __atomic_store_n(r->bell, 0, __ATOMIC_RELEASE);
    return NULL;
}

void hs_bell_rewriter_start(struct hs_rewriter *r, void *bell)
{
    r->bell = bell;
    __atomic_store_n(&r->running, 1, __ATOMIC_RELEASE);
    ck_assert_int_eq(pthread_create(&r->thread, NULL, hs_bell_rewriter, r), 0);
}

void hs_bell_rewriter_stop(struct hs_rewriter *r)
{
    __atomic_store_n(&r->running, 0, __ATOMIC_RELEASE);
    pthread_join(r->thread, NULL);
}

int hs_alive(pid_t pid)
{
    int st;
    return waitpid(pid, &st, WNOHANG) == 0;
}

void hs_assert_serving(struct th_agent *a)
{
    ck_assert_msg(hs_alive(a->pid), "the agent died; its log: %s", a->log);
    union lt_msg_buffer buf;
    int c = th_hello(a->sock, 0, NULL);
    th_stats(c, 0, &buf);
    close(c);
    ck_assert_msg(hs_alive(a->pid), "the agent died; its log: %s", a->log);
}

void hs_agent_finish(struct th_agent *a)
{
    hs_assert_serving(a);
    int st = th_agent_stop(a);
    ck_assert_msg(st == 0, "the agent exited with status %d; its log: %s", st, a->log);
    th_agent_cleanup(a);
}

long hs_huge_free(void)
{
    return test_huge_pages_free();
}

struct lt_lease_grant_entry hs_offer_and_lease(int conn, struct hs_seg *s, uint64_t size, int huge,
                                               uint32_t cls, uint64_t seed, uint64_t data,
                                               int *old_p)
{
    char msg[128];
    struct lt_lease_grant_entry g = {0};
    for (int round = 0; round < 2; round++) {
        ck_assert_int_eq(hs_memfd(s, size, huge, round ? HS_SEALS : HS_OLD_SEALS, seed), 0);
        if (data)
            hs_checksum_fill(s->map, data, seed);
        uint32_t code = hs_offer(conn, s, cls, msg, sizeof msg);
        if (code == LT_OK) {
            g = th_lease(conn, s->id, 0, s->size, cls);
            code = g.status;
            if (code != LT_OK)
                snprintf(msg, sizeof msg, "(the lease was refused)");
        }
        if (code == LT_OK) {
            if (old_p)
                *old_p = round == 0;
            return g;
        }
        ck_assert_msg(round == 0 && code == LT_E_SEGMENT_UNSEALED, "%s %s: %s: %s",
                      round ? "sealed" : "old-sealed", lt_class_name(cls), lt_error_name(code),
                      msg);
        ck_assert_msg(strstr(msg, "F_SEAL_FUTURE_WRITE") || strstr(msg, "lease was refused"),
                      "refusal does not name the seal: %s", msg);
        hs_seg_close(s);
    }
    return g;
}

uint64_t hs_launch_send(int c, struct lt_lease_id lease, uint32_t flags, const char *kernel)
{
    union {
        uint64_t align;
        unsigned char b[sizeof(struct lt_msg_launch) + 8];
    } u;
    struct lt_msg_launch *m = (void *)u.b;
    const size_t len = th_launch_init(m, kernel, 32, lease, 4096, flags);
    m->result_bytes = (flags & LT_LAUNCH_LEASE_F_WRITE) ? 0 : 8;
    ck_assert_int_eq(lt_validate_launch(m, len), LT_OK);
    ck_assert_int_eq(th_send(c, m, len, NULL, 0), 0);
    return m->hdr.request_id;
}

struct lt_msg_launch_completion hs_launch_wait(int c, uint64_t rid)
{
    union lt_msg_buffer buf;
    th_expect(c, &buf, LT_MSG_LAUNCH_COMPLETION);
    ck_assert_uint_eq(buf.hdr.request_id, rid);
    struct lt_msg_launch_completion lc;
    memcpy(&lc, buf.bytes, sizeof lc);
    return lc;
}
