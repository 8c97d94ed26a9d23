/* lease_copy: the smallest whole use of liblease-client, as an outside
 * storage daemon would write it (docs/client-api.md walks through it).
 *
 *   usage: lease_copy AGENT_SOCKET [BYTES]
 *
 * It proves it is CUDA-free, makes a staging pool (PINNED for the data,
 * MAPPED for a doorbell and a done word), offers the pool's segments to the
 * agent at AGENT_SOCKET, leases a buffer of BYTES (default 1 MiB), submits a
 * COPY_H2D queued behind the doorbell, rings the bell, waits on the client
 * fd until the completion arrives and the done word shows it, releases the
 * lease and waits for RELEASE_COMPLETE before it frees the buffer. The last
 * line is "PASS: ..." (exit 0) or "FAIL: <step>: <why>" (exit 1).
 *
 * Built outside the project with nothing but
 *   cc lease_copy.c $(pkg-config --cflags --libs lease-client)
 * and run against lease-agent-host or lease-agent (tests/examples). */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lease/client.h>

#define MIB ((uint64_t)1 << 20)
#define WAIT_MS 10000

/* What the callbacks saw; they run inside leasec_client_process and the
 * blocking helpers, on this thread. */
struct seen {
    int granted, completed, released, failed;
    struct leasec_client_lease lease;
    struct leasec_client_completion done;
    int reusable;
    char why[320];
};

static void on_grant(void *ctx, const struct leasec_client_grant *g)
{
    struct seen *s = ctx;
    if (g->entries[0].err == 0) {
        s->lease = g->entries[0].lease; /* a value: keep it for submit and release */
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
    if (!r->reusable)
        snprintf(s->why, sizeof s->why, "release: %s", r->message);
    s->released = 1;
}

static void on_error(void *ctx, const struct leasec_client_error *e)
{
    struct seen *s = ctx;
    /* e->refusal holds the agent's own words when it refused */
    snprintf(s->why, sizeof s->why, "%s", e->message);
    s->failed = 1;
}

static int fail(const char *step, const char *why)
{
    printf("FAIL: %s: %s\n", step, why);
    return 1;
}

static int fail_rc(const char *step, int rc, struct leasec_client *c)
{
    char why[400];
    snprintf(why, sizeof why, "%s%s%s", strerror(-rc), c ? ": " : "",
             c ? leasec_client_last_error(c) : "");
    return fail(step, why);
}

/* The event-loop shape: poll the client fd, then process. */
static int pump_until(struct leasec_client *c, const int *flag, const struct seen *s)
{
    for (int waited = 0; !*flag && !s->failed; waited += 100) {
        if (waited >= WAIT_MS)
            return -ETIMEDOUT;
        struct pollfd pfd = {.fd = leasec_client_fd(c), .events = POLLIN};
        if (poll(&pfd, 1, 100) < 0 && errno != EINTR)
            return -errno;
        int rc = leasec_client_process(c);
        if (rc < 0)
            return rc;
    }
    return s->failed ? -EIO : 0;
}

static int run(const char *sock, uint64_t bytes, struct leasec_pool *pool, struct leasec_client *c,
               struct seen *s)
{
    /* One PINNED buffer for the data, one MAPPED line for the doorbell (ours
     * to write; the agent only reads the pool's segments). */
    struct leasec_pool_buf data, words;
    int rc = leasec_pool_alloc(pool, LT_CLASS_PINNED, (size_t)bytes, &data);
    if (rc < 0)
        return fail_rc("pool alloc (PINNED)", rc, NULL);
    rc = leasec_pool_alloc(pool, LT_CLASS_MAPPED, 64, &words);
    if (rc < 0)
        return fail_rc("pool alloc (MAPPED)", rc, NULL);
    for (uint64_t i = 0; i < bytes; i++)
        ((unsigned char *)data.base)[i] = (unsigned char)(i * 31u + 7u);
    uint64_t *bell = words.base;
    *bell = 0;

    /* Offer every segment of the pool: the client has no pool type. */
    for (unsigned i = 0; i < leasec_pool_segment_count(pool); i++) {
        struct leasec_pool_segment seg;
        if ((rc = leasec_pool_segment_at(pool, i, &seg)) < 0 ||
            (rc = leasec_client_segment_add(c, seg.id, seg.fd, seg.base, seg.size, seg.mem_class)) <
                0)
            return fail_rc("segment add", rc, c);
    }
    unsigned agent;
    if ((rc = leasec_client_agent_add(c, sock, &agent)) < 0)
        return fail_rc("agent add", rc, c);
    if ((rc = leasec_client_wait_ready(c, agent, WAIT_MS)) < 0)
        return fail_rc("connect", rc, c);
    struct leasec_client_agent_info info;
    leasec_client_agent_info(c, agent, &info);
    if (info.segments_accepted != leasec_pool_segment_count(pool))
        return fail("offer", "the agent refused a segment (see the log above)");

    /* Lease the data buffer. */
    const struct leasec_client_lease_req req = {.segment = data.segment_id,
                                                .offset = data.offset,
                                                .length = data.len,
                                                .flags = LEASEC_LEASE_F_ALLOW_STAGED};
    uint64_t rid;
    if ((rc = leasec_client_lease_request(c, agent, &req, 1, 0, 1, &rid)) < 0)
        return fail_rc("lease request", rc, c);
    if ((rc = leasec_client_wait(c, agent, rid, WAIT_MS)) < 0 || !s->granted)
        return rc < 0 ? fail_rc("lease", rc, c) : fail("lease", s->why);

    /* A copy queued behind the doorbell, signalling the done word. */
    struct leasec_client_work w;
    memset(&w, 0, sizeof w);
    w.op = LEASEC_OP_COPY_H2D;
    w.args.copy.offset = 0;
    w.args.copy.length = data.len;
    const int bells = (info.hello.caps & LEASEC_CAP_DOORBELL) != 0;
    /* The done word: the agent writes it in its own words area, which
     * this process maps read-only (LEASEC_CAP_WORDS). */
    const unsigned char *area = NULL;
    uint64_t area_size = 0;
    const int words_ok = (info.hello.caps & LEASEC_CAP_DONE_WORD) != 0 &&
                         leasec_client_words(c, agent, &area, &area_size) == 0;
    const uint64_t *done = words_ok ? (const uint64_t *)(const void *)area : NULL;
    if (bells)
        w.bell = (struct leasec_client_word){words.segment_id, words.offset, 1};
    if (words_ok)
        w.done = (struct leasec_client_word){LEASEC_WORDS_KEY, 0, 1};
    if ((rc = leasec_client_submit(c, &s->lease, &w, 2, &rid)) < 0)
        return fail_rc("submit", rc, c);
    if (bells)
        leasec_client_ring(bell, 1); /* the bytes are in place: the GPU may start */
    if ((rc = pump_until(c, &s->completed, s)) < 0)
        return s->failed ? fail("copy", s->why) : fail_rc("copy", rc, c);
    if (s->done.err != 0)
        return fail("copy", lt_error_name(s->done.status));
    if (s->done.result.copy.bytes_copied != data.len)
        return fail("copy", "the agent copied another number of bytes");
    if (words_ok && leasec_client_done_word_read(done) != 1)
        return fail("done word", "the completion came before the done word showed it");

    /* Two-phase release: the bytes are ours again only on RELEASE_COMPLETE. */
    if ((rc = leasec_client_lease_release(c, &s->lease, 1, 3, &rid)) < 0)
        return fail_rc("release", rc, c);
    if ((rc = leasec_client_wait(c, agent, rid, WAIT_MS)) < 0)
        return fail_rc("release", rc, c);
    if (!s->reusable)
        return fail("release", s->why);
    leasec_pool_free(pool, &data);
    leasec_pool_free(pool, &words);

    printf("PASS: lease_copy against %s (\"%s\"%s): %u segment(s) offered, %llu bytes leased "
           "as %s, copied%s%s, released and reusable\n",
           sock, info.hello.agent_name,
           (info.hello.caps & LEASEC_CAP_HOST_BACKEND) ? ", host backend" : "",
           info.segments_accepted, (unsigned long long)data.len, lt_class_name(s->lease.mem_class),
           bells ? " behind the doorbell" : "", words_ok ? ", done word seen" : "");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: lease_copy AGENT_SOCKET [BYTES]\n");
        return 2;
    }
    uint64_t bytes = argc == 3 ? strtoull(argv[2], NULL, 0) : MIB;
    if (bytes == 0 || bytes > MIB)
        return fail("usage", "BYTES: expected 1 .. 1048576");
    setvbuf(stdout, NULL, _IOLBF, 0);

    /* 1. Stay CUDA-free: refuse to start with a CUDA library mapped in. */
    char report[512];
    int rc = leasec_selfcheck(report, sizeof report);
    if (rc < 0)
        return fail("self check", report);
    printf("lease_copy: liblease-client %s; self check: %s\n", leasec_version(), report);

    /* 2. The pool: one 2 MiB segment of each class it uses. */
    struct leasec_pool_config pc;
    if ((rc = leasec_pool_config_default(&pc)) < 0)
        return fail_rc("pool config", rc, NULL);
    memset(pc.class_bytes, 0, sizeof pc.class_bytes);
    pc.class_bytes[LT_CLASS_PINNED] = 2 * MIB;
    pc.class_bytes[LT_CLASS_MAPPED] = 2 * MIB;
    pc.segment_bytes = 2 * MIB;
    pc.prefault_threads = 1;
    /* The doorbell and done words' MAPPED segment: writable to the agent. */
    pc.flags |= LEASEC_POOL_MAPPED_WRITABLE;
    /* Warnings and errors on standard error (a zeroed sink; here warnings
     * say when segments got 4 KiB pages instead of 2 MiB ones). */
    pc.log.max_level = LEASEC_LOG_WARN;
    struct leasec_pool *pool = NULL;
    if ((rc = leasec_pool_create(&pc, &pool)) < 0)
        return fail_rc("pool create", rc, NULL);

    /* 3. The client, its callbacks writing into one struct. */
    struct seen s;
    memset(&s, 0, sizeof s);
    struct leasec_client_config cc;
    leasec_client_config_default(&cc);
    cc.caps |= LEASEC_CAP_WORDS; /* the done word lives in the agent's words area */
    cc.name = "lease-copy";
    cc.cb.on_grant = on_grant;
    cc.cb.on_completion = on_completion;
    cc.cb.on_release = on_release;
    cc.cb.on_error = on_error;
    cc.cb_ctx = &s;
    cc.log.max_level = LEASEC_LOG_WARN; /* connects and handshakes are info */
    struct leasec_client *c = NULL;
    if ((rc = leasec_client_create(&cc, &c)) < 0) {
        leasec_pool_destroy(pool);
        return fail_rc("client create", rc, NULL);
    }

    int status = run(argv[1], bytes, pool, c, &s);
    /* The client first: it never touches segment memory, the pool owns it. */
    leasec_client_destroy(c);
    leasec_pool_destroy(pool);
    return status;
}
