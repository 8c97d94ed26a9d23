/* lease_launch: a storage daemon launching a kernel the agent shipped, with
 * liblease-client (docs/client-api.md, docs/launch.md).
 *
 *   usage: lease_launch AGENT_SOCKET [IMAGE]
 *
 * The agent must serve the launch test kernels: lease-agent --cubin-dir
 * with tests/gpu/cuda/launch_kernels.cubin and its launch_kernels.kdesc
 * (IMAGE, default "launch_kernels", is the cubin's name), and, since step 2
 * has a kernel write the lease, run --seals legacy: the pool leaves
 * F_SEAL_FUTURE_WRITE off (LEASEC_POOL_AGENT_WRITES), and an agent maps a
 * segment sealed with it read-only (docs/reliability.md). It makes a
 * staging pool, offers its PINNED segment, leases a 1 MiB buffer, writes
 * known words into it, then
 *   1. launches k_launch_sum_u32 over the lease and waits for the answer
 *      (leasec_client_launch_call): the kernel's sum of the words times a
 *      scale, returned in the result area, must equal the sum done here;
 *   2. launches k_launch_fill on a writable range (leasec_client_launch,
 *      answered through on_launch): the words in the buffer must be the
 *      kernel's once the answer is here;
 * and releases the lease (two-phase). The last line is "PASS: ..." (exit 0)
 * or "FAIL: <step>: <why>" (exit 1).
 *
 * Built outside the project with nothing but
 *   cc lease_launch.c $(pkg-config --cflags --libs lease-client) */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lease/client.h>

#define MIB ((uint64_t)1 << 20)
#define WAIT_MS 30000

struct seen {
    int granted, launched, released, failed;
    struct leasec_client_lease lease;
    struct leasec_launch_result fill;
    int reusable;
    char why[320];
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

static void on_launch(void *ctx, const struct leasec_client_launch_done *d)
{
    struct seen *s = ctx;
    s->fill = *d->result; /* a copy: the callback's struct is gone after it returns */
    s->launched = 1;
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

/* k_launch_fill's word i (tests/gpu/cuda/launch_kernels.cu). */
static uint32_t fill_word(uint64_t i, uint32_t seed)
{
    uint32_t v = (uint32_t)i * 0x9e3779b1u ^ seed;
    v ^= v >> 15;
    v *= 0x2c1b3c6du;
    v ^= v >> 12;
    return v;
}

static int run(const char *sock, const char *image, struct leasec_pool *pool,
               struct leasec_client *c, struct seen *s)
{
    struct leasec_pool_buf data;
    int rc = leasec_pool_alloc(pool, LT_CLASS_PINNED, (size_t)MIB, &data);
    if (rc < 0)
        return fail_rc("pool alloc", rc, NULL);
    uint32_t *words = data.base;
    const uint64_t nwords = data.len / 4;
    for (uint64_t i = 0; i < nwords; i++)
        words[i] = (uint32_t)(i * 2654435761u + 12345u);
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
    if (!(info.hello.caps & LEASEC_CAP_LAUNCH))
        return fail("connect", "the agent did not grant LAUNCH: start lease-agent with "
                               "--cubin-dir holding launch_kernels.cubin and .kdesc");
    const struct leasec_client_lease_req req = {
        .segment = data.segment_id, .offset = data.offset, .length = data.len};
    uint64_t rid;
    if ((rc = leasec_client_lease_request(c, agent, &req, 1, 0, 1, &rid)) < 0)
        return fail_rc("lease request", rc, c);
    if ((rc = leasec_client_wait(c, agent, rid, WAIT_MS)) < 0 || !s->granted)
        return rc < 0 ? fail_rc("lease", rc, c) : fail("lease", s->why);

    /* 1. The sum, waited for. Its one scalar, a u32 scale, fills the
     * first word of the argument block (the descriptor says so). */
    uint64_t args[1] = {3};
    struct leasec_launch l;
    memset(&l, 0, sizeof l);
    l.image = image;
    l.kernel = "k_launch_sum_u32";
    l.grid[0] = 64;
    l.block[0] = 256;
    l.result_bytes = 16;
    l.nranges = 1;
    l.ranges[0] = (struct leasec_launch_range){.lease = s->lease, .length = data.len};
    l.args = args;
    l.arg_bytes = sizeof args;
    struct leasec_launch_result r;
    if ((rc = leasec_client_launch_call(c, agent, &l, WAIT_MS, &r)) < 0)
        return fail_rc("sum", rc, c);
    uint64_t want = 0, got[2];
    for (uint64_t i = 0; i < nwords; i++)
        want += (uint64_t)words[i] * 3u;
    memcpy(got, r.result, sizeof got);
    if (got[0] != want || got[1] != nwords)
        return fail("sum", "the kernel's sum differs from the one done here");

    /* 2. The fill, answered by on_launch; the range must be writable. */
    args[0] = 0xfeedu;
    l.kernel = "k_launch_fill";
    l.result_bytes = 0;
    l.ranges[0].offset = 4096;
    l.ranges[0].length = 64 * 1024;
    l.ranges[0].flags = LEASEC_LAUNCH_RANGE_F_WRITE;
    if ((rc = leasec_client_launch(c, agent, &l, 2, &rid)) < 0)
        return fail_rc("fill", rc, c);
    if ((rc = pump_until(c, &s->launched, s)) < 0)
        return s->failed ? fail("fill", s->why) : fail_rc("fill", rc, c);
    if (s->fill.status != LT_OK)
        return fail("fill", s->fill.message);
    for (uint64_t i = 0; i < 64 * 1024 / 4; i++)
        if (words[1024 + i] != fill_word(i, 0xfeedu))
            return fail("fill", "the buffer does not hold what the kernel wrote");

    if ((rc = leasec_client_lease_release(c, &s->lease, 1, 3, &rid)) < 0)
        return fail_rc("release", rc, c);
    if ((rc = leasec_client_wait(c, agent, rid, WAIT_MS)) < 0)
        return fail_rc("release", rc, c);
    if (!s->reusable)
        return fail("release", s->why);
    leasec_pool_free(pool, &data);
    printf("PASS: lease_launch against %s (\"%s\"): k_launch_sum_u32 over %llu bytes = %#llx "
           "(%llu words), k_launch_fill wrote %u bytes back into the lease, released\n",
           sock, info.hello.agent_name, (unsigned long long)data.len, (unsigned long long)got[0],
           (unsigned long long)got[1], 64u * 1024u);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: lease_launch AGENT_SOCKET [IMAGE]\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    char report[512];
    int rc = leasec_selfcheck(report, sizeof report);
    if (rc < 0)
        return fail("self check", report);
    struct leasec_pool_config pc;
    if ((rc = leasec_pool_config_default(&pc)) < 0)
        return fail_rc("pool config", rc, NULL);
    memset(pc.class_bytes, 0, sizeof pc.class_bytes);
    pc.class_bytes[LT_CLASS_PINNED] = 2 * MIB;
    pc.segment_bytes = 2 * MIB;
    pc.prefault_threads = 1;
    pc.flags |= LEASEC_POOL_AGENT_WRITES; /* step 2's kernel writes the lease */
    pc.log.max_level = LEASEC_LOG_WARN;
    struct leasec_pool *pool = NULL;
    if ((rc = leasec_pool_create(&pc, &pool)) < 0)
        return fail_rc("pool create", rc, NULL);
    struct seen s;
    memset(&s, 0, sizeof s);
    struct leasec_client_config cc;
    leasec_client_config_default(&cc);
    cc.name = "lease-launch";
    cc.caps |= LEASEC_CAP_LAUNCH; /* asked for, or never granted */
    cc.cb.on_grant = on_grant;
    cc.cb.on_launch = on_launch;
    cc.cb.on_release = on_release;
    cc.cb.on_error = on_error;
    cc.cb_ctx = &s;
    cc.log.max_level = LEASEC_LOG_WARN;
    struct leasec_client *c = NULL;
    if ((rc = leasec_client_create(&cc, &c)) < 0) {
        leasec_pool_destroy(pool);
        return fail_rc("client create", rc, NULL);
    }
    int status = run(argv[1], argc == 3 ? argv[2] : "launch_kernels", pool, c, &s);
    leasec_client_destroy(c);
    leasec_pool_destroy(pool);
    return status;
}
