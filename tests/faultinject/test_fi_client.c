/* Fault injection into liblease-client, in-process against a real
 * lease-agent-host (docs/reliability.md): the pool's creation (memfd_create,
 * mmap, sealing fcntls, jemalloc's arenas), the client's segment offers
 * (sendmsg with the fd), the handshake, a lease request, a submit behind a
 * doorbell with a done word and the two-phase release, then both torn down.
 * For every N the Nth allocation, mmap, memfd_create, fcntl or
 * sendmsg/recvmsg of this process fails. Promises: every call returns or
 * every request ends in its callback (no 10 s silence), nothing leaks
 * (fds, mappings, heap under LeakSanitizer), and the agent, which lived
 * through it all, holds nothing of the client once it is gone.
 *
 * argv[1]: stagingd (unused), argv[2]: lease-agent-host. */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2e_util.h"
#include "fi.h"
#include "fi_run.h"
#include "lease/client.h"
#include "rel_util.h"

#define MIB (1ull << 20)
#define WAIT_MS 10000

static struct e2e_env env;

struct seen {
    int granted, completed, released, failed, reusable;
    struct leasec_client_lease lease;
    struct leasec_client_completion done;
    char why[256];
};

static void on_grant(void *ctx, const struct leasec_client_grant *g)
{
    struct seen *s = ctx;
    if (g->entries[0].err == 0) {
        s->lease = g->entries[0].lease;
        s->granted = 1;
    } else {
        snprintf(s->why, sizeof s->why, "lease refused: %s", lt_error_name(g->entries[0].status));
        s->failed = 1;
    }
}

static void on_completion(void *ctx, const struct leasec_client_completion *c)
{
    struct seen *s = ctx;
    s->done = *c;
    s->completed = 1;
}

static void on_release(void *ctx, const struct leasec_client_release *r)
{
    struct seen *s = ctx;
    s->reusable = r->reusable;
    s->released = 1;
    if (!r->reusable)
        snprintf(s->why, sizeof s->why, "release: %s", r->message);
}

static void on_error(void *ctx, const struct leasec_client_error *e)
{
    struct seen *s = ctx;
    snprintf(s->why, sizeof s->why, "%s", e->message);
    s->failed = 1;
}

static void quiet(void *ctx, int level, const char *subsys, const char *line)
{
    (void)ctx;
    (void)level;
    (void)subsys;
    (void)line;
}

/* Processes until @flag or a failure; -ETIMEDOUT is a broken promise. */
static int pump_until(struct leasec_client *c, const int *flag, const struct seen *s)
{
    for (int waited = 0; !*flag && !s->failed; waited += 50) {
        if (waited >= WAIT_MS)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = leasec_client_fd(c), .events = POLLIN};
        poll(&p, 1, 50);
        int rc = leasec_client_process(c);
        if (rc < 0)
            return rc;
    }
    return s->failed ? -EIO : 0;
}

/* A request's wait: its callback fired (0), a refusal (-EIO) or silence. */
static int wait_for(struct leasec_client *c, unsigned agent, uint64_t rid, const int *flag,
                    const struct seen *s)
{
    int rc = leasec_client_wait(c, agent, rid, WAIT_MS);
    if (rc == -ETIMEDOUT)
        return rc;
    if (rc < 0)
        return rc;
    return *flag ? 0 : s->failed ? -EIO : -EPROTO; /* answered, yet no callback of ours */
}

/* The whole client. FI_OK, FI_REFUSED, or -1 with @msg (a hang). */
static int client_path(char *msg, size_t len)
{
    struct seen s;
    memset(&s, 0, sizeof s);
    struct leasec_pool *pool = NULL;
    struct leasec_client *c = NULL;
    const char *step = "pool config";
    struct leasec_pool_config pc;
    int rc = leasec_pool_config_default(&pc);
    if (rc == 0) {
        memset(pc.class_bytes, 0, sizeof pc.class_bytes);
        pc.class_bytes[LT_CLASS_PINNED] = 2 * MIB;
        pc.class_bytes[LT_CLASS_MAPPED] = 2 * MIB;
        pc.segment_bytes = 2 * MIB;
        pc.prefault_threads = 1;
        pc.pages = LEASEC_POOL_PAGES_SMALL;
        /* The bell and done word's MAPPED segment writable to the agent. */
        pc.flags |= LEASEC_POOL_MAPPED_WRITABLE;
        pc.log.fn = quiet;
        step = "pool create";
        rc = leasec_pool_create(&pc, &pool);
    }
    struct leasec_client_config cc;
    leasec_client_config_default(&cc);
    cc.name = "fi-client";
    cc.cb = (struct leasec_client_callbacks){.on_grant = on_grant,
                                             .on_completion = on_completion,
                                             .on_release = on_release,
                                             .on_error = on_error};
    cc.cb_ctx = &s;
    cc.log.fn = quiet;
    cc.backoff_min_ms = 1;
    cc.backoff_max_ms = 20;
    if (rc == 0) {
        step = "client create";
        rc = leasec_client_create(&cc, &c);
    }
    struct leasec_pool_buf data = {0}, words = {0};
    int have_data = 0, have_words = 0;
    if (rc == 0) {
        step = "pool alloc";
        rc = leasec_pool_alloc(pool, LT_CLASS_PINNED, 65536, &data);
        have_data = rc == 0;
    }
    if (rc == 0) {
        rc = leasec_pool_alloc(pool, LT_CLASS_MAPPED, 64, &words);
        have_words = rc == 0;
    }
    for (unsigned i = 0; rc == 0 && i < leasec_pool_segment_count(pool); i++) {
        struct leasec_pool_segment seg;
        step = "segment add";
        if ((rc = leasec_pool_segment_at(pool, i, &seg)) == 0)
            rc = leasec_client_segment_add(c, seg.id, seg.fd, seg.base, seg.size, seg.mem_class);
    }
    unsigned agent = 0;
    if (rc == 0) {
        step = "agent add";
        rc = leasec_client_agent_add(c, env.sock, &agent);
    }
    if (rc == 0) {
        step = "wait ready";
        rc = leasec_client_wait_ready(c, agent, WAIT_MS);
    }
    struct leasec_client_agent_info info;
    if (rc == 0) {
        leasec_client_agent_info(c, agent, &info);
        if (info.segments_accepted != leasec_pool_segment_count(pool)) {
            step = "offers";
            rc = -EIO;
        }
    }
    uint64_t rid;
    if (rc == 0) {
        step = "lease";
        const struct leasec_client_lease_req req = {
            .segment = data.segment_id, .offset = data.offset, .length = data.len};
        rc = leasec_client_lease_request(c, agent, &req, 1, 0, 1, &rid);
        if (rc == 0)
            rc = wait_for(c, agent, rid, &s.granted, &s);
    }
    uint64_t *bell = have_words ? words.base : NULL;
    if (rc == 0) {
        step = "submit";
        bell[0] = bell[1] = 0;
        struct leasec_client_work w;
        memset(&w, 0, sizeof w);
        w.op = LEASEC_OP_COPY_H2D;
        w.args.copy.length = data.len;
        w.bell = (struct leasec_client_word){words.segment_id, words.offset, 1};
        w.done = (struct leasec_client_word){words.segment_id, words.offset + 8, 1};
        rc = leasec_client_submit(c, &s.lease, &w, 2, &rid);
        if (rc == 0) {
            leasec_client_ring(bell, 1);
            rc = pump_until(c, &s.completed, &s);
        }
        if (rc == 0 && (s.done.err != 0 || s.done.result.copy.bytes_copied != data.len))
            rc = -EIO;
        if (rc == 0 && leasec_client_done_word_read(bell + 1) != 1)
            rc = -EPROTO; /* completed before the done word showed it */
    }
    int freeable = 1;
    if (rc == 0) {
        step = "release";
        rc = leasec_client_lease_release(c, &s.lease, 1, 3, &rid);
        if (rc == 0)
            rc = wait_for(c, agent, rid, &s.released, &s);
        if (rc == 0 && !s.reusable)
            rc = -EIO;
    } else if (s.granted && !s.released) {
        /* Leased and never released: the bytes are not ours; the agent
         * reclaims the lease when the connection closes. */
        freeable = 0;
    }
    if (rc == -ETIMEDOUT)
        snprintf(msg, len, "%s: no answer in %d ms (%s)", step, WAIT_MS,
                 c ? leasec_client_last_error(c) : "");
    else if (rc == -EPROTO)
        snprintf(msg, len, "%s: a broken promise (%s)", step, s.why);
    else if (rc < 0)
        snprintf(msg, len, "%s: %s %s", step, strerror(-rc), s.why);
    leasec_client_destroy(c);
    if (freeable && have_data)
        leasec_pool_free(pool, &data);
    if (freeable && have_words)
        leasec_pool_free(pool, &words);
    leasec_pool_destroy(pool);
    if (rc == -ETIMEDOUT || rc == -EPROTO)
        return -1;
    return rc == 0 ? FI_OK : FI_REFUSED;
}

static int run(void *ctx, char *msg, size_t len)
{
    (void)ctx;
    return client_path(msg, len);
}

/* The agent survived and dropped every trace of the client. */
static int check(void *ctx, char *msg, size_t len)
{
    (void)ctx;
    if (kill(env.agent, 0) < 0) {
        snprintf(msg, len, "the agent died");
        return -1;
    }
    return rel_agent_wait_clean(env.sock, "fi-client", 5000, msg, len);
}

static void run_set(unsigned calls)
{
    e2e_env_init(&env);
    e2e_agent_start_budgets(&env, "4M", "4M");
    struct fi_path p = {.name = "liblease-client", .run = run, .check = check, .maps_slack = 4};
    struct fi_tally t;
    fi_run_all(&p, calls, 0, &t);
    ck_assert_uint_gt(t.calls, 0);
    e2e_env_cleanup(&env);
}

START_TEST(every_allocation_of_pool_offer_lease_submit_release_fails_cleanly)
{
    run_set(FI_ALLOC);
}
END_TEST

START_TEST(every_mmap_memfd_and_fcntl_of_the_client_fails_cleanly)
{
    run_set(FI_MMAP);
    run_set(FI_MEMFD);
    run_set(FI_FCNTL);
}
END_TEST

START_TEST(every_sendmsg_and_recvmsg_of_the_client_fails_cleanly)
{
    run_set(FI_MSG);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s STAGINGD LEASE_AGENT_HOST\n", argv[0]);
        return 2;
    }
    e2e_stagingd = argv[1];
    e2e_agent = argv[2];
    Suite *s = suite_create("fi_client");
    TCase *tc = tcase_create("client");
    tcase_set_timeout(tc, 280);
    tcase_add_test(tc, every_allocation_of_pool_offer_lease_submit_release_fails_cleanly);
    tcase_add_test(tc, every_mmap_memfd_and_fcntl_of_the_client_fails_cleanly);
    tcase_add_test(tc, every_sendmsg_and_recvmsg_of_the_client_fails_cleanly);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
