/* A soak (docs/reliability.md): 8 clients (liblease-client, one thread
 * each) against one lease-agent-host, each holding 2048 leases (4096 with
 * LEASE_RELIABILITY_LONG=1) of its own 2 MiB segment, three of them PINNED
 * (the agent's whole PINNED budget) and five STAGED, and cycling them for
 * 20 s (5 minutes long; LEASE_SOAK_SECONDS=N to choose): release 64 random
 * leases, lease 64 free ranges, again and again. The agent's RSS and open
 * fds are sampled every second: after a warm-up third they must stay flat
 * (fds exactly, RSS within 4 MiB; under ASan see SOAK_ASAN). Reported:
 * grants per second and the p50 / p99 / max latency of a 64-lease grant. At the end every lease is
 * released and the agent holds nothing.
 *
 * argv[1]: stagingd (unused), argv[2]: lease-agent-host. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "base/time.h"
#include "e2e_util.h"
#include "rel_util.h"

#define CLIENTS 8
#define PINNED_CLIENTS 3
#define SEG_BYTES (2u << 20)
#define LEASE_BYTES 512u
#define SLOTS (SEG_BYTES / LEASE_BYTES)
#define BATCH 64u
#define MAX_SAMPLES 4096

/* Under ASan freed blocks wait in the agent's quarantine (256 MiB by
 * default) before their memory is reused, so its RSS climbs for as long as
 * the soak frees, as a leak's would. The agent gets a small quarantine
 * instead, full within the warm-up, and the bound allows for it (and the
 * threads' own quarantines): a leak still shows, the normal build's bound
 * is unchanged. */
#if defined(__SANITIZE_ADDRESS__)
#define SOAK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SOAK_ASAN 1
#endif
#endif
#ifdef SOAK_ASAN
#define SOAK_QUARANTINE_MB 8
#define SOAK_RSS_SLACK_KB (4096 + 2 * SOAK_QUARANTINE_MB * 1024)
#else
#define SOAK_RSS_SLACK_KB 4096
#endif

static struct e2e_env env;
static volatile int stop_flag;
static unsigned hold_target;

struct worker {
    unsigned idx;
    pthread_t thread;
    uint64_t seed;
    int memfd;
    void *base;
    struct leasec_client *c;
    unsigned agent;
    struct leasec_client_lease *held; /* by slot; held[i].length 0: free */
    unsigned nheld;
    /* the current request's answers */
    unsigned granted_now, released_now, refused_now;
    uint64_t *lat_ns; /* one per grant batch */
    size_t nlat, caplat;
    uint64_t grants, releases;
    char err[512];
};

static void on_grant(void *ctx, const struct leasec_client_grant *g)
{
    struct worker *w = ctx;
    for (unsigned i = 0; i < g->count; i++) {
        if (g->entries[i].err != 0) {
            w->refused_now++;
            continue;
        }
        const struct leasec_client_lease *l = &g->entries[i].lease;
        w->held[l->offset / LEASE_BYTES] = *l;
        w->nheld++;
        w->granted_now++;
    }
}

static void on_release(void *ctx, const struct leasec_client_release *r)
{
    struct worker *w = ctx;
    if (!r->reusable) {
        w->refused_now++;
        return;
    }
    w->held[r->lease.offset / LEASE_BYTES].length = 0;
    w->nheld--;
    w->released_now++;
}

static void on_error(void *ctx, const struct leasec_client_error *e)
{
    struct worker *w = ctx;
    snprintf(w->err, sizeof w->err, "%s", e->message);
    w->refused_now++;
}

static void quiet(void *ctx, int level, const char *subsys, const char *line)
{
    (void)ctx;
    (void)level;
    (void)subsys;
    (void)line;
}

/* Leases up to @n free slots chosen at random; records the latency. */
static int grant_some(struct worker *w, unsigned n)
{
    struct leasec_client_lease_req req[BATCH];
    unsigned k = 0;
    for (unsigned tries = 0; k < n && tries < 8 * SLOTS; tries++) {
        unsigned s = (unsigned)(rel_rand(&w->seed) % SLOTS);
        int dup = 0;
        for (unsigned j = 0; j < k; j++)
            dup |= req[j].offset == (uint64_t)s * LEASE_BYTES;
        if (w->held[s].length || dup)
            continue;
        req[k++] = (struct leasec_client_lease_req){
            .segment = 1, .offset = (uint64_t)s * LEASE_BYTES, .length = LEASE_BYTES};
    }
    w->granted_now = w->refused_now = 0;
    uint64_t rid, t0 = base_now_ns();
    int rc = leasec_client_lease_request(w->c, w->agent, req, k, 0, 0, &rid);
    if (rc == 0)
        rc = leasec_client_wait(w->c, w->agent, rid, 10000);
    uint64_t dt = base_now_ns() - t0;
    if (rc < 0 || w->granted_now != k || w->refused_now) {
        snprintf(w->err + strlen(w->err), sizeof w->err - strlen(w->err),
                 "; grant of %u: rc %d, %u granted, %u refused (%s)", k, rc, w->granted_now,
                 w->refused_now, leasec_client_last_error(w->c));
        return -1;
    }
    if (w->nlat == w->caplat) {
        size_t cap = w->caplat ? 2 * w->caplat : 1024;
        uint64_t *p = realloc(w->lat_ns, cap * sizeof *p);
        if (!p)
            return -1;
        w->lat_ns = p;
        w->caplat = cap;
    }
    w->lat_ns[w->nlat++] = dt;
    w->grants += k;
    return 0;
}

/* Releases @n held leases (all when n is 0) and waits for their completes. */
static int release_some(struct worker *w, unsigned n)
{
    struct leasec_client_lease rel[BATCH];
    unsigned k = 0;
    if (n == 0) {
        for (unsigned s = 0; s < SLOTS && k < BATCH; s++)
            if (w->held[s].length)
                rel[k++] = w->held[s];
    } else {
        for (unsigned tries = 0; k < n && tries < 8 * SLOTS; tries++) {
            unsigned s = (unsigned)(rel_rand(&w->seed) % SLOTS);
            int dup = 0;
            for (unsigned j = 0; j < k; j++)
                dup |= rel[j].offset == w->held[s].offset;
            if (w->held[s].length && !dup)
                rel[k++] = w->held[s];
        }
    }
    if (k == 0)
        return 0;
    w->released_now = w->refused_now = 0;
    uint64_t rid;
    int rc = leasec_client_lease_release(w->c, rel, k, 0, &rid);
    if (rc == 0)
        rc = leasec_client_wait(w->c, w->agent, rid, 10000);
    /* Each lease answers for itself: drive the client until all have. */
    uint64_t end = base_now_ns() + 10000000000ull;
    while (rc == 0 && w->released_now + w->refused_now < k && base_now_ns() < end) {
        struct pollfd p = {.fd = leasec_client_fd(w->c), .events = POLLIN};
        poll(&p, 1, 10);
        rc = leasec_client_process(w->c) < 0 ? -EIO : 0;
    }
    if (rc < 0 || w->released_now != k) {
        snprintf(w->err + strlen(w->err), sizeof w->err - strlen(w->err),
                 "; release of %u: rc %d, %u complete, %u refused", k, rc, w->released_now,
                 w->refused_now);
        return -1;
    }
    w->releases += k;
    return 0;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct leasec_client_config cc;
    leasec_client_config_default(&cc);
    cc.name = "soak";
    cc.cb.on_grant = on_grant;
    cc.cb.on_release = on_release;
    cc.cb.on_error = on_error;
    cc.cb_ctx = w;
    cc.log.fn = quiet;
    int rc = leasec_client_create(&cc, &w->c);
    uint32_t cls = w->idx < PINNED_CLIENTS ? LT_CLASS_PINNED : LT_CLASS_STAGED;
    if (rc == 0)
        rc = leasec_client_segment_add(w->c, 1, w->memfd, w->base, SEG_BYTES, cls);
    if (rc == 0)
        rc = leasec_client_agent_add(w->c, env.sock, &w->agent);
    if (rc == 0)
        rc = leasec_client_wait_ready(w->c, w->agent, 10000);
    if (rc < 0) {
        snprintf(w->err, sizeof w->err, "client %u: setting up: %s (%s)", w->idx, strerror(-rc),
                 w->c ? leasec_client_last_error(w->c) : "");
        return NULL;
    }
    while (rc == 0 && w->nheld < hold_target)
        rc = grant_some(w, hold_target - w->nheld < BATCH ? hold_target - w->nheld : BATCH);
    while (rc == 0 && !__atomic_load_n(&stop_flag, __ATOMIC_ACQUIRE)) {
        rc = release_some(w, BATCH);
        if (rc == 0)
            rc = grant_some(w, BATCH);
    }
    while (rc == 0 && w->nheld)
        rc = release_some(w, 0);
    if (rc < 0 && !w->err[0])
        snprintf(w->err, sizeof w->err, "client %u failed", w->idx);
    leasec_client_destroy(w->c);
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

START_TEST(eight_clients_holding_thousands_of_leases_keep_the_agent_flat)
{
    unsigned seconds = rel_long() ? 300 : 20;
    const char *env_s = getenv("LEASE_SOAK_SECONDS");
    if (env_s && *env_s)
        seconds = (unsigned)strtoul(env_s, NULL, 10);
    hold_target = rel_long() ? 4096 - BATCH : 2048;
    uint64_t seed = rel_seed("soak");
    e2e_env_init(&env);
#ifdef SOAK_ASAN
    char asan[1024];
    const char *was = getenv("ASAN_OPTIONS");
    snprintf(asan, sizeof asan, "%s%squarantine_size_mb=%d", was ? was : "", was && *was ? ":" : "",
             SOAK_QUARANTINE_MB);
    ck_assert_int_eq(setenv("ASAN_OPTIONS", asan, 1), 0);
#endif
    e2e_agent_start(&env);
    static struct worker ws[CLIENTS];
    for (unsigned i = 0; i < CLIENTS; i++) {
        struct worker *w = &ws[i];
        memset(w, 0, sizeof *w);
        w->idx = i;
        w->seed = seed + i * 0x9e3779b97f4a7c15ull;
        w->memfd = memfd_create("soak", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        ck_assert_int_ge(w->memfd, 0);
        ck_assert_int_eq(ftruncate(w->memfd, SEG_BYTES), 0);
        w->base = mmap(NULL, SEG_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, w->memfd, 0);
        ck_assert_ptr_ne(w->base, MAP_FAILED);
        /* After the writer's own mapping, as a strict agent wants. */
        ck_assert_int_eq(fcntl(w->memfd, F_ADD_SEALS,
                               F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL),
                         0);
        w->held = calloc(SLOTS, sizeof *w->held);
        ck_assert_ptr_nonnull(w->held);
    }
    stop_flag = 0;
    for (unsigned i = 0; i < CLIENTS; i++)
        ck_assert_int_eq(pthread_create(&ws[i].thread, NULL, worker_main, &ws[i]), 0);
    static long rss[MAX_SAMPLES];
    static int fds[MAX_SAMPLES];
    unsigned n = 0;
    uint64_t t0 = base_now_ns();
    while (n < MAX_SAMPLES && base_now_ns() - t0 < (uint64_t)seconds * 1000000000u) {
        e2e_sleep_ms(1000);
        rss[n] = rel_proc_rss_kb(env.agent);
        fds[n] = rel_proc_fds(env.agent);
        n++;
    }
    __atomic_store_n(&stop_flag, 1, __ATOMIC_RELEASE);
    uint64_t grants = 0, releases = 0;
    size_t nlat = 0;
    for (unsigned i = 0; i < CLIENTS; i++) {
        pthread_join(ws[i].thread, NULL);
        ck_assert_msg(ws[i].err[0] == '\0', "client %u: %s", i, ws[i].err);
        grants += ws[i].grants;
        releases += ws[i].releases;
        nlat += ws[i].nlat;
    }
    double secs = (double)(base_now_ns() - t0) / 1e9;
    uint64_t *lat = malloc(nlat * sizeof *lat);
    ck_assert_ptr_nonnull(lat);
    size_t k = 0;
    for (unsigned i = 0; i < CLIENTS; i++) {
        memcpy(lat + k, ws[i].lat_ns, ws[i].nlat * sizeof *lat);
        k += ws[i].nlat;
        free(ws[i].lat_ns);
        free(ws[i].held);
        munmap(ws[i].base, SEG_BYTES);
        close(ws[i].memfd);
    }
    qsort(lat, nlat, sizeof *lat, cmp_u64);
    /* Flat after the warm-up third. */
    unsigned warm = n / 3;
    long rmin = rss[warm], rmax = rss[warm];
    int fmin = fds[warm], fmax = fds[warm];
    for (unsigned i = warm; i < n; i++) {
        rmin = rss[i] < rmin ? rss[i] : rmin;
        rmax = rss[i] > rmax ? rss[i] : rmax;
        fmin = fds[i] < fmin ? fds[i] : fmin;
        fmax = fds[i] > fmax ? fds[i] : fmax;
    }
    fprintf(stderr,
            "soak: %u clients x %u leases for %.1f s: %" PRIu64 " grants and %" PRIu64
            " releases (%.0f grants/s); grant of %u leases: p50 %.1f us, p99 %.1f us, max %.1f "
            "us; agent RSS %ld KiB at 1 s, %ld..%ld KiB after %u s, fds %d..%d (%u samples)\n",
            CLIENTS, hold_target, secs, grants, releases, (double)grants / secs, BATCH,
            (double)lat[nlat / 2] / 1e3, (double)lat[nlat * 99 / 100] / 1e3,
            (double)lat[nlat - 1] / 1e3, rss[0], rmin, rmax, warm, fmin, fmax, n);
    free(lat);
    ck_assert_uint_ge(n, 3);
    ck_assert_msg(fmin == fmax, "the agent's fds moved after the warm-up: %d..%d", fmin, fmax);
    ck_assert_msg(rmax - rmin <= SOAK_RSS_SLACK_KB,
                  "the agent's RSS moved after the warm-up: %ld..%ld KiB (at most %d allowed)",
                  rmin, rmax, SOAK_RSS_SLACK_KB);
    char msg[512];
    ck_assert_msg(rel_agent_wait_clean(env.sock, "soak", 10000, msg, sizeof msg) == 0, "%s", msg);
    e2e_env_cleanup(&env);
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
    Suite *s = suite_create("soak");
    TCase *tc = tcase_create("soak");
    tcase_set_timeout(tc, rel_long() ? 3600 : 300);
    tcase_add_test(tc, eight_clients_holding_thousands_of_leases_keep_the_agent_flat);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
