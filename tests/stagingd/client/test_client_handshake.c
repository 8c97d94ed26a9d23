/* The lease client against a fake agent: The handshake (HELLO, the agent's limits, a version the
 * client does not speak) and segment offers carrying the very memfd. */
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

/* ---- handshake ---- */

START_TEST(test_handshake_sends_hello_and_adopts_agent_limits)
{
    struct leasec_client *c = client_new(5, 50);
    struct fake f;
    union lt_msg_buffer b;
    unsigned agent = 99;
    fake_listen(&f, g_path);
    ck_assert_int_eq(leasec_client_agent_add(c, g_path, &agent), 0);
    ck_assert_uint_eq(agent, 0);

    struct leasec_client_agent_info info;
    ck_assert_int_eq(leasec_client_agent_info(c, 0, &info), 0);
    ck_assert_int_eq(info.state, LEASEC_CLIENT_HANDSHAKE);
    ck_assert_uint_eq(info.epoch, 1);
    struct leasec_client_lease_req r = {.segment = 1, .length = 4096};
    uint64_t rid;
    ck_assert_int_eq(leasec_client_lease_request(c, 0, &r, 1, 0, 0, &rid), -ENOTCONN);

    fake_accept(&f);
    recv_type(&f, c, &b, LT_MSG_HELLO);
    const struct lt_msg_hello *h = (const void *)&b;
    ck_assert_uint_eq(h->version_min, 1);
    ck_assert_uint_eq(h->version_max, 1);
    ck_assert_uint_eq(h->caps, LT_CAP_DOORBELL | LT_CAP_DONE_WORD | LT_CAP_RC_BATCH);
    ck_assert_str_eq(h->name, "test-client");

    struct lt_msg_hello_reply hr;
    fake_hello_reply(&hr, h->hdr.request_id, LT_CAP_DOORBELL | LT_CAP_HOST_BACKEND, 4);
    fake_send(&f, &hr, sizeof(hr), -1);
    pump_until(c, 1);
    ck_assert_int_eq(evs[0].kind, EV_READY);
    ck_assert_uint_eq(evs[0].epoch, 1);
    ck_assert_int_eq(evs[0].nested_rc, -EDEADLK);
    ck_assert_int_eq(leasec_client_wait_ready(c, 0, 0), 0);

    ck_assert_int_eq(leasec_client_agent_info(c, 0, &info), 0);
    ck_assert_int_eq(info.state, LEASEC_CLIENT_READY);
    ck_assert_uint_eq(info.hello.client_id, 7);
    ck_assert_uint_eq(info.hello.max_lease_batch, 4);
    ck_assert_uint_eq(info.hello.caps, LT_CAP_DOORBELL | LT_CAP_HOST_BACKEND);
    ck_assert_str_eq(info.hello.agent_name, "fake-agent");
    ck_assert_uint_eq(info.in_flight, 0);
    ck_assert_int_eq(leasec_client_agent_info(c, 1, &info), -ENOENT);

    leasec_client_destroy(c);
    fake_close(&f);
}
END_TEST

START_TEST(test_version_mismatch_is_refused_with_a_message)
{
    struct leasec_client *c = client_new(2, 10);
    struct fake f;
    union lt_msg_buffer b;
    unsigned agent;
    fake_listen(&f, g_path);
    ck_assert_int_eq(leasec_client_agent_add(c, g_path, &agent), 0);

    /* 1: the agent refuses our HELLO */
    fake_accept(&f);
    recv_type(&f, c, &b, LT_MSG_HELLO);
    struct lt_msg_error em;
    fake_error(&em, b.hdr.request_id, LT_MSG_HELLO, LT_E_BAD_VERSION, LT_INDEX_NONE,
               "this agent speaks only v2");
    fake_send(&f, &em, sizeof(em), -1);
    ck_assert_int_eq(leasec_client_wait_ready(c, 0, WAIT_MS), -EPROTONOSUPPORT);
    const char *msg = leasec_client_last_error(c);
    ck_assert_msg(strstr(msg, "this agent speaks only v2") && strstr(msg, g_path) &&
                      strstr(msg, "LT_E_BAD_VERSION"),
                  "message: %s", msg);
    int d = ev_find(EV_DISCONNECT, 0);
    ck_assert_int_ge(d, 0);
    ck_assert_int_eq(evs[d].err, -EPROTONOSUPPORT);
    ck_assert_int_eq(ev_find(EV_READY, 0), -1);
    fake_drop(&f);

    /* 2: the reply's header is version 2; 3: the reply chooses version 2 */
    for (int round = 0; round < 2; round++) {
        accept_pumped(&f, c);
        recv_type(&f, c, &b, LT_MSG_HELLO);
        struct lt_msg_hello_reply hr;
        fake_hello_reply(&hr, b.hdr.request_id, 0, 4);
        if (round == 0)
            hr.hdr.version = 2;
        else
            hr.version = 2;
        fake_send(&f, &hr, sizeof(hr), -1);
        ck_assert_int_eq(leasec_client_wait_ready(c, 0, WAIT_MS), -EPROTONOSUPPORT);
        msg = leasec_client_last_error(c);
        ck_assert_msg(strstr(msg, "version mismatch") && strstr(msg, "version 2") &&
                          strstr(msg, g_path),
                      "message: %s", msg);
        fake_drop(&f);
    }
    struct leasec_client_agent_info info;
    ck_assert_int_eq(leasec_client_agent_info(c, 0, &info), 0);
    ck_assert_int_ne(info.state, LEASEC_CLIENT_READY);
    ck_assert_int_eq(info.last_err, -EPROTONOSUPPORT);
    ck_assert_int_eq(ev_find(EV_READY, 0), -1);
    leasec_client_destroy(c);
    fake_close(&f);
}
END_TEST

/* ---- segments ---- */

START_TEST(test_segment_offer_passes_exactly_one_fd_of_the_same_memfd)
{
    struct leasec_pool_config pc = {0};
    pc.class_bytes[LT_CLASS_STAGED] = 2 * MIB;
    pc.class_bytes[LT_CLASS_PINNED] = 4 * MIB;
    pc.class_bytes[LT_CLASS_MAPPED] = 2 * MIB;
    pc.segment_bytes = 2 * MIB;
    pc.prefault_threads = 1;
    pc.pages = LEASEC_POOL_PAGES_SMALL; /* leaves reserved huge pages to test_hugepages */
    pc.log = (struct leasec_log){capture_log, NULL, LEASEC_LOG_DEBUG};
    struct leasec_pool *pool = NULL;
    ck_assert_int_eq(leasec_pool_create(&pc, &pool), 0);
    unsigned nseg = leasec_pool_segment_count(pool);
    ck_assert_uint_eq(nseg, 4);

    struct leasec_client *c = client_new(5, 50);
    ck_assert_int_eq(offer_pool(c, pool), 4);
    struct fake f;
    union lt_msg_buffer b;
    unsigned agent;
    uint64_t rng = SEED;
    fake_listen(&f, g_path);
    ck_assert_int_eq(leasec_client_agent_add(c, g_path, &agent), 0);
    fake_accept(&f);
    int fds[4];
    unsigned nfds;
    ssize_t n = recv_pumped(&f, c, &b, fds, &nfds);
    ck_assert_uint_eq(b.hdr.type, LT_MSG_HELLO);
    ck_assert_uint_eq(nfds, 0); /* only offers carry an fd */
    struct lt_msg_hello_reply hr;
    fake_hello_reply(&hr, b.hdr.request_id, 0, 8);
    fake_send(&f, &hr, sizeof(hr), -1);

    unsigned seen = 0;
    for (unsigned k = 0; k < nseg; k++) {
        n = recv_pumped(&f, c, &b, fds, &nfds);
        ck_assert_int_eq(lt_validate_from_client(b.bytes, (size_t)n, NULL), LT_OK);
        ck_assert_uint_eq(b.hdr.type, LT_MSG_SEGMENT_OFFER);
        ck_assert_uint_eq(nfds, 1);
        const struct lt_msg_segment_offer *o = (const void *)&b;
        struct leasec_pool_segment seg;
        ck_assert_int_eq(leasec_pool_segment_find(pool, (uint32_t)o->cookie, &seg), 0);
        ck_assert_uint_eq(o->size, seg.size);
        ck_assert_uint_eq(o->mem_class, (uint32_t)seg.mem_class);
        struct stat mine, theirs;
        ck_assert_int_eq(fstat(seg.fd, &mine), 0);
        ck_assert_int_eq(fstat(fds[0], &theirs), 0);
        ck_assert_uint_eq(theirs.st_ino, mine.st_ino);
        ck_assert_uint_eq(theirs.st_dev, mine.st_dev);
        ck_assert_int_ne(fds[0], seg.fd);
        int seals = fcntl(fds[0], F_GET_SEALS);
        ck_assert_int_eq(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
                         F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
        /* The pool seals F_SEAL_FUTURE_WRITE after its own mapping: the
         * agent's copy maps read-only, and no one can free the pages. */
        ck_assert_int_eq(seals & F_SEAL_FUTURE_WRITE, F_SEAL_FUTURE_WRITE);
        ck_assert_ptr_eq(mmap(NULL, seg.size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0),
                         MAP_FAILED);
        ck_assert_int_eq(errno, EPERM);
        ck_assert_int_ne(fallocate(fds[0], FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096), 0);
        ck_assert_int_eq(errno, EPERM);
        /* the same bytes: ours, written, are what the agent reads */
        const uint64_t *theirs_map = mmap(NULL, seg.size, PROT_READ, MAP_SHARED, fds[0], 0);
        ck_assert_ptr_ne(theirs_map, MAP_FAILED);
        uint64_t *mine_map = seg.base;
        for (int i = 0; i < 64; i++) {
            size_t at = (size_t)(rng_next(&rng) % (seg.size / 8));
            uint64_t v = rng_next(&rng);
            mine_map[at] = v;
            ck_assert_uint_eq(theirs_map[at], v);
            mine_map[at] = ~v;
            ck_assert_uint_eq(theirs_map[at], ~v);
        }
        munmap((void *)theirs_map, seg.size);
        close(fds[0]);
        seen |= 1u << k;
        struct lt_msg_segment_accept a;
        lt_msg_init(&a, sizeof(a), LT_MSG_SEGMENT_ACCEPT, b.hdr.request_id);
        a.cookie = o->cookie;
        a.segment = agent_seg_id(k);
        a.size = o->size;
        a.mem_class = o->mem_class;
        fake_send(&f, &a, sizeof(a), -1);
    }
    ck_assert_int_eq(leasec_client_wait_ready(c, 0, WAIT_MS), 0);
    ck_assert_int_eq(fake_recv(&f, &b, 20, fds, &nfds), -1); /* offered once, no more */
    struct leasec_client_agent_info info;
    ck_assert_int_eq(leasec_client_agent_info(c, 0, &info), 0);
    ck_assert_uint_eq(info.offers_sent, 4);
    ck_assert_uint_eq(info.segments_accepted, 4);
    leasec_client_destroy(c);
    leasec_pool_destroy(pool);
    fake_close(&f);
}
END_TEST

void client_tests_handshake(TCase *tc)
{
    tcase_add_test(tc, test_handshake_sends_hello_and_adopts_agent_limits);
    tcase_add_test(tc, test_version_mismatch_is_refused_with_a_message);
    tcase_add_test(tc, test_segment_offer_passes_exactly_one_fd_of_the_same_memfd);
}
