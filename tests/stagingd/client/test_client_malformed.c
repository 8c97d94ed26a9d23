/* The lease client against a fake agent: Malformed replies: every one disconnects with an error,
 * never a crash. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernels/blockhash_ref.h"
#include "client_test_util.h"

/* ---- malformed replies ---- */

enum {
    BAD_MAGIC,
    BAD_WRONG_TYPE,
    BAD_WRONG_DIRECTION,
    BAD_TRUNCATED,
    BAD_LENGTH_MISMATCH,
    BAD_OVERSIZED,
    BAD_UNKNOWN_ID,
    BAD_GRANT_COUNT,
    BAD_GRANT_DUP_LEASE,
    BAD_WITH_FD,
    BAD_ERROR_ID_ZERO,
    BAD_EMPTY,
    BAD_RELEASE_TWICE,
    BAD_RANDOM, /* the rest: seeded random bytes */
    BAD_CASES = BAD_RANDOM + 40
};

/* Sends malformed case @k in answer to lease request @rid (two entries).
 * Returns the error expected, 0 for "any", and what the message names. */
static int malformed_send(struct fake *f, struct leasec_client *c, int k, uint64_t rid,
                          uint64_t *rng, const char **needle_p)
{
    union lt_msg_buffer m;
    size_t len = sizeof(struct lt_msg_lease_grant) + 2 * sizeof(struct lt_lease_grant_entry);
    lt_msg_init(&m, len, LT_MSG_LEASE_GRANT, rid);
    struct lt_msg_lease_grant *g = (void *)&m;
    g->count = 2;
    g->entries[0] = (struct lt_lease_grant_entry){lt_lease_id_make(1, 1), LT_CLASS_PINNED, LT_OK};
    g->entries[1] = (struct lt_lease_grant_entry){lt_lease_id_make(2, 1), LT_CLASS_PINNED, LT_OK};
    *needle_p = "";
    switch (k) {
    case BAD_MAGIC:
        m.hdr.magic = 0xdeadbeef;
        *needle_p = "LT_E_BAD_MAGIC";
        break;
    case BAD_WRONG_TYPE: {
        struct lt_msg_segment_accept *a = (void *)&m;
        len = sizeof(*a);
        lt_msg_init(a, len, LT_MSG_SEGMENT_ACCEPT, rid);
        a->cookie = 1;
        a->segment = lt_segment_id_make(1, 1);
        a->size = MIB;
        a->mem_class = LT_CLASS_PINNED;
        *needle_p = "LT_E_WRONG_TYPE";
        break;
    }
    case BAD_WRONG_DIRECTION: {
        struct lt_msg_hello *h = (void *)&m;
        len = sizeof(*h);
        lt_msg_init(h, len, LT_MSG_HELLO, rid);
        h->version_min = h->version_max = 1;
        lt_name_set(h->name, sizeof(h->name), "evil");
        *needle_p = "LT_E_WRONG_DIRECTION";
        break;
    }
    case BAD_TRUNCATED:
        len = 10;
        *needle_p = "LT_E_TRUNCATED";
        break;
    case BAD_LENGTH_MISMATCH:
        m.hdr.length += 8;
        *needle_p = "LT_E_LENGTH_MISMATCH";
        break;
    case BAD_OVERSIZED: {
        static uint64_t big[(LT_MSG_MAX_BYTES + 104) / 8];
        memcpy(big, &m, len);
        fake_send(f, big, sizeof(big), -1);
        *needle_p = "larger than";
        return -EPROTO;
    }
    case BAD_UNKNOWN_ID:
        m.hdr.request_id = rid + 1000;
        *needle_p = "not in flight";
        break;
    case BAD_GRANT_COUNT:
        g->count = 1;
        len = sizeof(struct lt_msg_lease_grant) + sizeof(struct lt_lease_grant_entry);
        m.hdr.length = (uint32_t)len;
        *needle_p = "LT_E_BAD_LENGTH";
        break;
    case BAD_GRANT_DUP_LEASE:
        g->entries[1].lease = g->entries[0].lease;
        *needle_p = "granted twice";
        break;
    case BAD_WITH_FD: {
        int efd = eventfd(0, EFD_CLOEXEC);
        ck_assert_int_ge(efd, 0);
        fake_send(f, &m, len, efd);
        close(efd);
        *needle_p = "fd";
        return -EPROTO;
    }
    case BAD_ERROR_ID_ZERO: {
        struct lt_msg_error *x = (void *)&m;
        len = sizeof(*x);
        fake_error(x, 0, LT_MSG_LEASE_REQUEST, LT_E_BAD_MAGIC, LT_INDEX_NONE,
                   "your message had no magic");
        *needle_p = "your message had no magic";
        break;
    }
    case BAD_EMPTY:
        len = 0;
        *needle_p = "EOF";
        fake_send(f, &m, 0, -1);
        return -ECONNRESET;
    case BAD_RELEASE_TWICE: {
        /* grant properly, release both, complete the first one twice */
        fake_send(f, &m, len, -1);
        unsigned want = nev + 1;
        pump_until(c, want);
        ck_assert_int_eq(evs[want - 1].kind, EV_GRANT);
        struct leasec_client_lease l[2] = {evs[want - 1].ents[0].lease,
                                           evs[want - 1].ents[1].lease};
        uint64_t rel;
        union lt_msg_buffer b;
        ck_assert_int_eq(leasec_client_lease_release(c, l, 2, 0, &rel), 0);
        recv_type(f, c, &b, LT_MSG_LEASE_RELEASE);
        release_complete_send(f, rel, l[0].id, LT_OK);
        release_complete_send(f, rel, l[0].id, LT_OK);
        *needle_p = "does not hold";
        return -EPROTO;
    }
    default:
        len = 1 + (size_t)(rng_next(rng) % 200);
        for (size_t i = 0; i < len; i++)
            m.bytes[i] = (unsigned char)rng_next(rng);
        if (len >= sizeof(struct lt_header) && (k & 1)) {
            /* a plausible header over random bytes */
            m.hdr.magic = LT_MAGIC;
            m.hdr.version = LT_PROTO_VERSION;
            m.hdr.type = (uint16_t)(1 + rng_next(rng) % LT_MSG_TYPE_LAST);
            m.hdr.length = (uint32_t)len;
            m.hdr.request_id = rid;
        }
        fake_send(f, &m, len, -1);
        return 0;
    }
    fake_send(f, &m, len, -1);
    return k == BAD_ERROR_ID_ZERO ? lt_error_errno(LT_E_BAD_MAGIC) : -EPROTO;
}

START_TEST(test_malformed_replies_disconnect_with_an_error_never_a_crash)
{
    struct leasec_client *c = client_new(1, 4);
    int fd1;
    void *b1 = memfd_seg(MIB, &fd1);
    ck_assert_int_eq(leasec_client_segment_add(c, 1, fd1, b1, MIB, LT_CLASS_PINNED), 0);
    struct fake f;
    union lt_msg_buffer b;
    unsigned agent;
    uint64_t rng = SEED;
    fake_listen(&f, g_path);
    ck_assert_int_eq(leasec_client_agent_add(c, g_path, &agent), 0);
    int fds_before = -1;
    for (int k = 0; k < BAD_CASES; k++) {
        handshake(&f, c, 0, 8, 1, NULL);
        if (fds_before < 0)
            fds_before = count_fds();
        ck_assert_int_eq(count_fds(), fds_before);
        struct leasec_client_lease_req r[2] = {{.segment = 1, .offset = 0, .length = 4096},
                                               {.segment = 1, .offset = 8192, .length = 4096}};
        uint64_t rid;
        ck_assert_int_eq(leasec_client_lease_request(c, 0, r, 2, 0, 100 + (uint64_t)k, &rid), 0);
        recv_type(&f, c, &b, LT_MSG_LEASE_REQUEST);
        unsigned base = nev;
        const char *needle;
        int want_err = malformed_send(&f, c, k, rid, &rng, &needle);
        /* the disconnect, then the lease request (or release) failing */
        int d = -1;
        uint64_t end = now_ms() + WAIT_MS;
        while (d < 0) {
            ck_assert_msg(now_ms() < end, "case %d: no disconnect; log:\n%s", k, g_log);
            pump_for(c, 2);
            for (unsigned i = base; i < nev; i++)
                if (evs[i].kind == EV_DISCONNECT)
                    d = (int)i;
        }
        struct ev *e = &evs[d];
        ck_assert_int_lt(e->err, 0);
        if (want_err)
            ck_assert_msg(e->err == want_err, "case %d: err %d, expected %d (%s)", k, e->err,
                          want_err, e->msg);
        ck_assert_msg(strstr(e->msg, g_path) && strstr(e->msg, needle),
                      "case %d: message \"%s\" lacks \"%s\"", k, e->msg, needle);
        if (k != BAD_RELEASE_TWICE) {
            int x = ev_find(EV_ERROR, rid);
            ck_assert_msg(x > d, "case %d: the lease request did not fail after the disconnect", k);
            ck_assert_int_eq(evs[x].err, e->err);
            ck_assert_uint_eq(evs[x].tag, 100 + (uint64_t)k);
        }
        struct leasec_client_agent_info info;
        ck_assert_int_eq(leasec_client_agent_info(c, 0, &info), 0);
        /* nothing left but, if it reconnected already, its new HELLO */
        ck_assert_uint_eq(info.in_flight, info.state == LEASEC_CLIENT_DISCONNECTED ? 0u : 1u);
        ck_assert_uint_eq(info.leases, 0);
        fake_drop(&f);
        nev = 0;
    }
    leasec_client_destroy(c);
    fake_close(&f);
    munmap(b1, MIB);
    close(fd1);
}
END_TEST

void client_tests_malformed(TCase *tc)
{
    tcase_add_test(tc, test_malformed_replies_disconnect_with_an_error_never_a_crash);
}
