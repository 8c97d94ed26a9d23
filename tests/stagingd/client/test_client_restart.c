/* The lease client against a fake agent: End to end: the agent is killed and restarted mid-run;
 * every shard is processed once and correctly. */
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

/* ---- end to end: the agent is killed and restarted mid-run ---- */

#define E2E_SHARDS 48
#define E2E_DATA (64u << 10)
#define E2E_BLOCK 4096u
#define E2E_BLOCKS (E2E_DATA / E2E_BLOCK)
#define E2E_BUF (E2E_DATA + E2E_BLOCKS * 8)
#define E2E_WINDOW 8
#define E2E_DIE_AFTER 20

enum { S_TODO, S_LEASING, S_SUBMITTED, S_RELEASING, S_FREED, S_LOST };

struct e2e_shard {
    int state;
    struct leasec_pool_buf buf;
    unsigned char *copy; /* the staged bytes, to prove nothing was lost */
    struct lt_checksum_result expect;
    uint64_t lease_rid;
    struct leasec_client_lease lease;
    uint64_t seq;
    unsigned completions;
};

struct e2e {
    struct leasec_client *c;
    struct leasec_pool *pool;
    uint32_t mapped_seg;
    uint64_t *mapped_base;
    struct e2e_shard s[E2E_SHARDS];
    uint64_t seq;
    unsigned disconnects, conn_failures, lost_releases, done;
    int ready;
    char first_failure[1024];
};

static struct e2e g_e2e;

static void e2e_drive(struct e2e *x)
{
    if (!x->ready)
        return;
    unsigned busy = 0;
    for (unsigned i = 0; i < E2E_SHARDS; i++)
        busy += x->s[i].state == S_LEASING || x->s[i].state == S_SUBMITTED;
    struct leasec_client_agent_info info;
    ck_assert_int_eq(leasec_client_agent_info(x->c, 0, &info), 0);
    struct leasec_client_lease_req reqs[E2E_WINDOW];
    unsigned idx[E2E_WINDOW], n = 0;
    for (unsigned i = 0; i < E2E_SHARDS && busy + n < E2E_WINDOW && n < info.hello.max_lease_batch;
         i++) {
        if (x->s[i].state != S_TODO)
            continue;
        reqs[n] = (struct leasec_client_lease_req){
            .segment = x->s[i].buf.segment_id, .offset = x->s[i].buf.offset, .length = E2E_BUF};
        idx[n++] = i;
    }
    if (n == 0)
        return;
    uint64_t rid;
    int rc = leasec_client_lease_request(x->c, 0, reqs, n, 0, 0, &rid);
    if (rc == -ENOTCONN || rc == -ECONNRESET)
        return; /* on_ready drives again */
    ck_assert_msg(rc == 0, "lease request: %s", leasec_client_last_error(x->c));
    for (unsigned k = 0; k < n; k++) {
        x->s[idx[k]].state = S_LEASING;
        x->s[idx[k]].lease_rid = rid;
    }
}

static void e2e_on_grant(void *ctx, const struct leasec_client_grant *g)
{
    struct e2e *x = ctx;
    unsigned k = 0;
    for (unsigned i = 0; i < E2E_SHARDS && k < g->count; i++) {
        struct e2e_shard *s = &x->s[i];
        if (s->state != S_LEASING || s->lease_rid != g->request_id)
            continue;
        const struct leasec_client_grant_entry *en = &g->entries[k++];
        ck_assert_int_eq(en->err, 0);
        ck_assert_uint_eq(en->lease.offset, s->buf.offset);
        s->lease = en->lease;
        s->seq = ++x->seq;
        /* queued behind its doorbell before the "read" lands, as the
         * daemon does; completion comes back through the done word too */
        struct leasec_client_work w = checksum_work(0, E2E_DATA, E2E_DATA);
        w.bell =
            (struct leasec_client_word){.segment = x->mapped_seg, .offset = 8 * i, .seq = s->seq};
        /* The pool's segments are read-only to the agent: the done word is
         * in its words area. */
        w.done =
            (struct leasec_client_word){.segment = LEASEC_WORDS_KEY, .offset = 8 * i, .seq = s->seq};
        uint64_t rid;
        int rc = leasec_client_submit(x->c, &s->lease, &w, i, &rid);
        if (rc < 0) {
            ck_assert_msg(rc == -ECONNRESET || rc == -ENOTCONN, "submit: %s",
                          leasec_client_last_error(x->c));
            s->state = S_TODO;
            continue;
        }
        s->state = S_SUBMITTED;
        leasec_client_ring(&x->mapped_base[i], s->seq); /* the read landed */
    }
    ck_assert_uint_eq(k, g->count);
}

static void e2e_on_completion(void *ctx, const struct leasec_client_completion *cp)
{
    struct e2e *x = ctx;
    struct e2e_shard *s = &x->s[cp->tag];
    ck_assert_int_eq(s->state, S_SUBMITTED);
    ck_assert(lt_lease_id_eq(cp->lease.id, s->lease.id));
    ck_assert_uint_eq(++s->completions, 1); /* exactly once */
    const unsigned char *words = NULL;
    uint64_t words_size = 0;
    ck_assert_int_eq(leasec_client_words(x->c, cp->agent, &words, &words_size), 0);
    ck_assert_uint_ge(words_size, 8 * (cp->tag + 1));
    ck_assert_uint_eq(
        leasec_client_done_word_read((const uint64_t *)(const void *)(words + 8 * cp->tag)),
        s->seq);
    const struct leasec_checksum_result *r = &cp->result.checksum;
    ck_assert_uint_eq(cp->status, s->expect.bad_blocks ? LT_E_CHECKSUM_MISMATCH : (uint32_t)LT_OK);
    ck_assert_uint_eq(r->blocks_checked, s->expect.blocks_checked);
    ck_assert_uint_eq(r->first_bad_block, s->expect.first_bad_block);
    ck_assert_uint_eq(r->bad_blocks, s->expect.bad_blocks);
    ck_assert_uint_eq(r->expected, s->expect.expected);
    ck_assert_uint_eq(r->actual, s->expect.actual);
    x->done++;
    uint64_t rid;
    int rc = leasec_client_lease_release(x->c, &s->lease, 1, cp->tag, &rid);
    if (rc == 0) {
        s->state = S_RELEASING;
    } else {
        ck_assert(rc == -ECONNRESET || rc == -ENOTCONN);
        s->state = S_LOST;
    }
}

static void e2e_on_release(void *ctx, const struct leasec_client_release *r)
{
    struct e2e *x = ctx;
    struct e2e_shard *s = &x->s[r->tag];
    ck_assert_int_eq(s->state, S_RELEASING);
    if (r->reusable) {
        ck_assert_int_eq(memcmp(s->buf.base, s->copy, E2E_BUF), 0);
        ck_assert_int_eq(leasec_pool_free(x->pool, &s->buf), 0);
        s->state = S_FREED;
    } else {
        /* the lease died with the connection: the bytes stay ours, untouched */
        ck_assert_int_eq(r->err, -ECONNRESET);
        x->lost_releases++;
        s->state = S_LOST;
    }
}

static void e2e_on_error(void *ctx, const struct leasec_client_error *e)
{
    struct e2e *x = ctx;
    ck_assert_msg(e->err == -ECONNRESET, "unexpected failure: %s", e->message);
    ck_assert_ptr_nonnull(strstr(e->message, g_path));
    if (!x->conn_failures++)
        snprintf(x->first_failure, sizeof(x->first_failure), "%s", e->message);
    if (e->request_type == LT_MSG_SUBMIT)
        x->s[e->tag].state = S_TODO; /* resubmitted after the reconnect */
    else
        for (unsigned i = 0; i < E2E_SHARDS; i++)
            if (x->s[i].state == S_LEASING && x->s[i].lease_rid == e->request_id)
                x->s[i].state = S_TODO;
}

static void e2e_on_ready(void *ctx, unsigned agent, uint32_t epoch)
{
    struct e2e *x = ctx;
    (void)agent;
    (void)epoch;
    x->ready = 1;
    e2e_drive(x);
}

static void e2e_on_disconnect(void *ctx, unsigned agent, int err, const char *message)
{
    struct e2e *x = ctx;
    (void)agent;
    (void)message;
    ck_assert_int_eq(err, -ECONNRESET);
    x->ready = 0;
    x->disconnects++;
}

START_TEST(test_agent_killed_and_restarted_mid_run_every_shard_once_and_correct)
{
    struct e2e *x = &g_e2e;
    memset(x, 0, sizeof(*x));
    struct leasec_pool_config pc = {0};
    pc.class_bytes[LT_CLASS_PINNED] = 8 * MIB;
    pc.class_bytes[LT_CLASS_MAPPED] = 2 * MIB;
    pc.segment_bytes = 2 * MIB;
    pc.prefault_threads = 1;
    pc.pages = LEASEC_POOL_PAGES_SMALL; /* leaves reserved huge pages to test_hugepages */
    pc.log = (struct leasec_log){capture_log, NULL, LEASEC_LOG_DEBUG};
    ck_assert_int_eq(leasec_pool_create(&pc, &x->pool), 0);

    /* stage the shards: random data, its checksum table, and a bad block in some */
    uint64_t rng = SEED;
    for (unsigned i = 0; i < E2E_SHARDS; i++) {
        struct e2e_shard *s = &x->s[i];
        ck_assert_int_eq(leasec_pool_alloc(x->pool, LT_CLASS_PINNED, E2E_BUF, &s->buf), 0);
        uint64_t *words = s->buf.base;
        for (size_t k = 0; k < E2E_DATA / 8; k++)
            words[k] = rng_next(&rng);
        uint64_t *sums = (uint64_t *)(void *)((unsigned char *)s->buf.base + E2E_DATA);
        ck_assert_int_eq(kr_block_checksums(s->buf.base, E2E_DATA, E2E_BLOCK, sums), E2E_BLOCKS);
        if (i % 5 == 2) {
            unsigned bad = (unsigned)(rng_next(&rng) % E2E_BLOCKS);
            ((unsigned char *)s->buf.base)[bad * E2E_BLOCK + rng_next(&rng) % E2E_BLOCK] ^= 0x5a;
        }
        /* the CPU's answer */
        s->expect.blocks_checked = E2E_BLOCKS;
        s->expect.first_bad_block = LT_BLOCK_NONE;
        for (unsigned blk = 0; blk < E2E_BLOCKS; blk++) {
            uint64_t got =
                kr_block_checksum((unsigned char *)s->buf.base + blk * E2E_BLOCK, E2E_BLOCK);
            if (got == sums[blk])
                continue;
            if (!s->expect.bad_blocks++) {
                s->expect.first_bad_block = blk;
                s->expect.expected = sums[blk];
                s->expect.actual = got;
            }
        }
        s->copy = malloc(E2E_BUF);
        memcpy(s->copy, s->buf.base, E2E_BUF);
    }
    unsigned nseg = leasec_pool_segment_count(x->pool);
    for (unsigned i = 0; i < nseg; i++) {
        struct leasec_pool_segment seg;
        ck_assert_int_eq(leasec_pool_segment_at(x->pool, i, &seg), 0);
        if (seg.mem_class == LT_CLASS_MAPPED) {
            x->mapped_seg = seg.id;
            x->mapped_base = seg.base;
        }
    }
    ck_assert_ptr_nonnull(x->mapped_base);

    pid_t first = auto_agent_start(g_path, E2E_DIE_AFTER, 4);
    struct leasec_client_config cfg;
    leasec_client_config_default(&cfg);
    cfg.name = "stagingd-e2e";
    cfg.caps |= LEASEC_CAP_WORDS;
    cfg.backoff_min_ms = 2;
    cfg.backoff_max_ms = 50;
    cfg.seed = SEED;
    cfg.cb.on_grant = e2e_on_grant;
    cfg.cb.on_completion = e2e_on_completion;
    cfg.cb.on_release = e2e_on_release;
    cfg.cb.on_error = e2e_on_error;
    cfg.cb.on_ready = e2e_on_ready;
    cfg.cb.on_disconnect = e2e_on_disconnect;
    cfg.cb_ctx = x;
    cfg.log = (struct leasec_log){capture_log, NULL, LEASEC_LOG_DEBUG};
    ck_assert_int_eq(leasec_client_create(&cfg, &x->c), 0);
    ck_assert_int_eq(offer_pool(x->c, x->pool), (int)nseg);
    unsigned agent;
    ck_assert_int_eq(leasec_client_agent_add(x->c, g_path, &agent), 0);

    pid_t second = -1;
    uint64_t end = now_ms() + 30000;
    for (;;) {
        unsigned settled = 0;
        for (unsigned i = 0; i < E2E_SHARDS; i++)
            settled += x->s[i].state == S_FREED || x->s[i].state == S_LOST;
        if (settled == E2E_SHARDS)
            break;
        ck_assert_msg(now_ms() < end, "run stuck: %u of %u shards settled, %u done; log:\n%s",
                      settled, E2E_SHARDS, x->done, g_log);
        struct pollfd p = {.fd = leasec_client_fd(x->c), .events = POLLIN};
        poll(&p, 1, 20);
        ck_assert_int_ge(leasec_client_process(x->c), 0);
        e2e_drive(x);
        if (x->disconnects == 1 && second < 0) {
            int status;
            ck_assert_int_eq(waitpid(first, &status, 0), first);
            ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
                          "the first agent was meant to be killed, status 0x%x", status);
            second = auto_agent_start(g_path, -1, 4);
        }
    }
    ck_assert_uint_eq(x->disconnects, 1);
    ck_assert_uint_ge(x->conn_failures, 1);
    /* an EOF, a reset or a failed send, depending on what the client was doing */
    ck_assert_msg(strstr(x->first_failure, "connection lost"), "failure message: %s",
                  x->first_failure);
    ck_assert_uint_eq(x->done, E2E_SHARDS);
    for (unsigned i = 0; i < E2E_SHARDS; i++) {
        ck_assert_uint_eq(x->s[i].completions, 1);
        ck_assert_int_eq(memcmp(x->s[i].buf.base, x->s[i].copy, E2E_BUF), 0);
    }
    struct leasec_client_agent_info info;
    ck_assert_int_eq(leasec_client_agent_info(x->c, 0, &info), 0);
    ck_assert_uint_eq(info.epoch, 2);
    ck_assert_uint_eq(info.offers_sent, 2 * nseg); /* once per connection */
    ck_assert_uint_eq(info.in_flight, 0);

    leasec_client_destroy(x->c);
    kill(second, SIGKILL);
    waitpid(second, NULL, 0);
    for (unsigned i = 0; i < E2E_SHARDS; i++) {
        if (x->s[i].state == S_LOST)
            ck_assert_int_eq(leasec_pool_free(x->pool, &x->s[i].buf), 0);
        free(x->s[i].copy);
    }
    leasec_pool_destroy(x->pool);
}
END_TEST

void client_tests_restart(TCase *tc)
{
    tcase_add_test(tc, test_agent_killed_and_restarted_mid_run_every_shard_once_and_correct);
}
