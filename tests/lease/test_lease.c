/* The lease service: segments, leases, two-phase release, budgets and LRU,
 * peer death, stats and threads, on the host backend and a counting fake. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/time.h"
#include "huge_pages.h" /* test_smaps_kb */
#include "lease/check.h"
#include "lease/lease.h"

#define KiB 1024ull
#define MiB (1024ull * 1024ull)
#define OLD_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
#define GOOD_SEALS (OLD_SEALS | F_SEAL_FUTURE_WRITE)
#define PINNED LT_CLASS_PINNED
#define MAPPED LT_CLASS_MAPPED
#define STAGED LT_CLASS_STAGED

/* The last refusal a call below explained: every call passes &why, and the
 * helpers copy a refused batch entry's own failure here. */
static struct lt_failure why;

/* Ids as the numbers the service logs and the callbacks record. */
static uint64_t L(struct lt_lease_id id)
{
    return lt_lease_id_to_u64(id);
}

static uint64_t S(struct lt_segment_id id)
{
    return lt_segment_id_to_u64(id);
}

/* ---- seeded data ------------------------------------------------------- */

static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void fill_random(void *p, size_t len, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    uint8_t *b = p;
    for (size_t i = 0; i < len; i += 8) {
        uint64_t v = xorshift(&s);
        memcpy(b + i, &v, len - i < 8 ? len - i : 8);
    }
}

static uint8_t *ref_data(size_t len, uint64_t seed)
{
    uint8_t *b = malloc(len);
    ck_assert_ptr_nonnull(b);
    fill_random(b, len, seed);
    return b;
}

/* A memfd as stagingd makes one: sized, written with seeded data, sealed. */
static int make_memfd(uint64_t size, int seals, uint64_t seed)
{
    int fd = memfd_create("lease-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
    if (size) {
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        ck_assert_ptr_ne(p, MAP_FAILED);
        fill_random(p, size, seed);
        munmap(p, size);
    }
    if (seals)
        ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, seals), 0);
    return fd;
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the directory's own fd */
}

static bool fd_open(int fd)
{
    return fcntl(fd, F_GETFD) != -1;
}

static uint64_t vm_locked_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    ck_assert_ptr_nonnull(f);
    char line[256];
    uint64_t kib = UINT64_MAX;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmLck: %" SCNu64, &kib) == 1)
            break;
    fclose(f);
    ck_assert_uint_ne(kib, UINT64_MAX);
    return kib;
}

/* ASan turns mlock into a no-op; probe whether locking shows in VmLck. */
static bool mlock_shows_in_vmlck(void)
{
    size_t len = 64 * 4096;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    uint64_t before = vm_locked_kib();
    bool shows = mlock(p, len) == 0 && vm_locked_kib() >= before + len / 1024;
    munlock(p, len);
    munmap(p, len);
    return shows;
}

/* ---- a counting fake backend ------------------------------------------- */

struct fake_op {
    char op; /* 'R' or 'U' */
    void *base;
    uint64_t len;
};

struct fake_be {
    pthread_mutex_t mu;
    uint64_t regs;
    uint64_t unregs;
    uint64_t live; /* registrations not yet undone */
    uint64_t capacity;
    int fail_rc;        /* a register returns this once... */
    int fail_countdown; /* ...after this many more succeed... */
    bool fail_silent;   /* ...without explaining it */
    struct fake_op ops[256];
    int nops;
};

static void fake_log(struct fake_be *f, char op, void *base, uint64_t len)
{
    if (f->nops < (int)(sizeof(f->ops) / sizeof(f->ops[0])))
        f->ops[f->nops++] = (struct fake_op){op, base, len};
}

static int fake_register(void *ctx, void *base, uint64_t len, enum lt_class cls, uint64_t *dev_p,
                         struct lt_failure *why_p)
{
    struct fake_be *f = ctx;
    pthread_mutex_lock(&f->mu);
    if (f->fail_rc && f->fail_countdown-- == 0) {
        int rc = f->fail_rc;
        f->fail_rc = 0;
        bool silent = f->fail_silent;
        pthread_mutex_unlock(&f->mu);
        if (silent)
            return rc;
        return lt_failure_set(why_p, LT_E_GPU_FAULT, rc, "fake backend: injected failure");
    }
    f->regs++;
    f->live++;
    fake_log(f, 'R', base, len);
    /* Device pointers deliberately unrelated to host addresses, 1 GiB apart. */
    uint64_t dev = 0x100000000000ull + f->regs * (1ull << 30);
    pthread_mutex_unlock(&f->mu);
    *dev_p = cls == MAPPED ? dev : 0;
    return 0;
}

static int fake_unregister(void *ctx, void *base, uint64_t len, enum lt_class cls,
                           struct lt_failure *why_p)
{
    struct fake_be *f = ctx;
    (void)cls;
    (void)why_p;
    pthread_mutex_lock(&f->mu);
    f->unregs++;
    f->live--;
    fake_log(f, 'U', base, len);
    pthread_mutex_unlock(&f->mu);
    return 0;
}

static int fake_capacity(void *ctx, uint64_t *bytes_p, struct lt_failure *why_p)
{
    (void)why_p;
    *bytes_p = ((struct fake_be *)ctx)->capacity;
    return 0;
}

static struct fake_be fake;

static struct lease_backend fake_backend(uint64_t chunk)
{
    memset(&fake, 0, sizeof(fake));
    pthread_mutex_init(&fake.mu, NULL);
    fake.capacity = UINT64_MAX;
    return (struct lease_backend){
        .name = "fake",
        .ctx = &fake,
        .chunk_bytes = chunk,
        .register_range = fake_register,
        .unregister_range = fake_unregister,
        .capacity = fake_capacity,
    };
}

/* ---- callbacks and log -------------------------------------------------- */

struct recorder {
    pthread_mutex_t mu;
    uint64_t completions;
    uint64_t last_client;
    uint64_t last_lease;
    uint64_t *ids;
    size_t cap;
    uint64_t drained;
    uint64_t last_drained;
    uint64_t logs;
    char last_log[1024];
};

static struct recorder rec = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void on_complete(void *arg, struct lease_client_id client, struct lt_lease_id lease)
{
    struct recorder *r = arg;
    pthread_mutex_lock(&r->mu);
    if (r->completions < r->cap)
        r->ids[r->completions] = L(lease);
    r->completions++;
    r->last_client = client.value;
    r->last_lease = L(lease);
    pthread_mutex_unlock(&r->mu);
}

static void on_drained(void *arg, struct lease_client_id client)
{
    struct recorder *r = arg;
    pthread_mutex_lock(&r->mu);
    r->drained++;
    r->last_drained = client.value;
    pthread_mutex_unlock(&r->mu);
}

static void test_log(void *arg, int level, const char *subsys, const char *line)
{
    (void)level;
    (void)subsys;
    struct recorder *r = arg;
    pthread_mutex_lock(&r->mu);
    r->logs++;
    snprintf(r->last_log, sizeof(r->last_log), "%s", line);
    pthread_mutex_unlock(&r->mu);
}

static uint64_t completions(void)
{
    pthread_mutex_lock(&rec.mu);
    uint64_t n = rec.completions;
    pthread_mutex_unlock(&rec.mu);
    return n;
}

static struct lease_service_config config(uint64_t pinned, uint64_t mapped)
{
    return (struct lease_service_config){
        .budget_pinned = pinned,
        .budget_mapped = mapped,
        .on_release_complete = on_complete,
        .on_client_drained = on_drained,
        .cb_arg = &rec,
        .log = {.fn = test_log, .ctx = &rec, .max_level = BASE_LOG_DEBUG},
    };
}

static struct lease_service *new_svc(const struct lease_backend *be, uint64_t pinned,
                                     uint64_t mapped)
{
    struct lease_service_config cfg = config(pinned, mapped);
    struct lease_service *svc = NULL;
    int rc = lease_service_create(&cfg, be, &svc, &why);
    ck_assert_msg(rc == 0, "lease_service_create: %d: %s", rc, why.message);
    return svc;
}

static struct lease_client_id new_client(struct lease_service *svc)
{
    struct lease_client_id c = {0};
    ck_assert_int_eq(lease_client_add(svc, NULL, &c, &why), 0);
    return c;
}

/* A client id with its generation or slot moved by @delta: never issued. */
static struct lease_client_id client_plus(struct lease_client_id c, uint64_t delta)
{
    return (struct lease_client_id){c.value + delta};
}

/* Adds a sealed memfd of @size with seeded data; returns the segment id. */
static struct lt_segment_id add_seg(struct lease_service *svc, struct lease_client_id client,
                                    uint64_t size, enum lt_class cls, uint64_t seed, int *fd_p)
{
    int fd = make_memfd(size, GOOD_SEALS, seed);
    struct lt_segment_id id = {0, 0};
    int rc = lease_segment_add(svc, client, fd, size, cls, &id, &why);
    ck_assert_msg(rc == 0, "lease_segment_add: %d: %s", rc, why.message);
    if (fd_p)
        *fd_p = fd;
    return id;
}

static int grant1(struct lease_service *svc, struct lease_client_id client,
                  struct lt_segment_id seg, uint64_t off, uint64_t len, uint32_t cls,
                  uint32_t flags, struct lease_grant_result *r)
{
    struct lease_grant_req q = {seg, off, len, cls, flags};
    int n = lease_grant(svc, client, 1, &q, r, &why);
    if (n < 0)
        return n;
    ck_assert_int_eq(n, r->rc == 0);
    if (r->rc < 0)
        why = r->why;
    return r->rc;
}

static struct lt_lease_id must_grant(struct lease_service *svc, struct lease_client_id client,
                                     struct lt_segment_id seg, uint64_t off, uint64_t len,
                                     uint32_t cls)
{
    struct lease_grant_result r;
    int rc = grant1(svc, client, seg, off, len, cls, 0, &r);
    ck_assert_msg(rc == 0, "grant: %d: %s", rc, why.message);
    return r.lease;
}

static int release1(struct lease_service *svc, struct lease_client_id client, struct lt_lease_id id)
{
    struct lease_release_result rr = {.rc = 1};
    int n = lease_release(svc, client, 1, &id, &rr, &why);
    if (n < 0)
        return n;
    ck_assert_int_eq(n, rr.rc == 0);
    if (rr.rc < 0)
        why = rr.why;
    return rr.rc;
}

static struct lease_stats stats(struct lease_service *svc)
{
    struct lease_stats st;
    ck_assert_int_eq(lease_service_stats(svc, &st), 0);
    return st;
}

/* @rc_expr refuses with @want, and its failure says @needle with the same
 * errno (the code is checked where a test names it: assert_refused). */
#define assert_error(rc_expr, want, needle)                                                        \
    do {                                                                                           \
        memset(&why, 0, sizeof why);                                                               \
        int rc_ = (rc_expr);                                                                       \
        ck_assert_msg(rc_ == (want), "%s: expected %d, got %d (%s)", #rc_expr, (want), rc_,        \
                      why.message);                                                                \
        ck_assert_msg(strstr(why.message, (needle)) != NULL, "%s: message lacks '%s': %s",         \
                      #rc_expr, (needle), why.message);                                            \
        ck_assert_int_eq(why.err, rc_);                                                            \
    } while (0)

/* assert_error, and the protocol code the failure carries is @code. */
#define assert_refused(rc_expr, want, want_code, needle)                                           \
    do {                                                                                           \
        assert_error(rc_expr, want, needle);                                                       \
        ck_assert_msg(why.code == (want_code), "%s: expected %s, got %s", #rc_expr,                \
                      lt_error_name(want_code), lt_error_name(why.code));                          \
    } while (0)

/* ---- leases: grant, release, release-complete ---------------------------- */

START_TEST(grant_exposes_daemon_bytes_and_release_completes_once)
{
    struct lease_backend be;
    ck_assert_int_eq(lease_host_backend_init(&be, &why), 0);
    struct lease_service *svc = new_svc(&be, 2 * MiB, 1 * MiB);
    struct lease_client_id c = new_client(svc);
    uint64_t seed = 0xa11ce;
    struct lt_segment_id seg = add_seg(svc, c, 1 * MiB, MAPPED, seed, NULL);
    uint8_t *ref = ref_data(1 * MiB, seed);

    struct lease_grant_req q[3] = {
        {seg, 0, 4 * KiB, MAPPED, 0},
        {seg, 12345, 100000, PINNED, 0},
        {seg, 1 * MiB - 777, 777, STAGED, 0},
    };
    struct lease_grant_result r[3];
    ck_assert_int_eq(lease_grant(svc, c, 3, q, r, &why), 3);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(r[i].rc, 0);
        ck_assert_uint_eq(r[i].cls, q[i].cls);
        ck_assert_uint_eq(r[i].fell_back, 0);
        ck_assert_mem_eq(r[i].host_addr, ref + q[i].offset, q[i].length);
    }
    /* Host backend: what "kernels" dereference is the host address. */
    ck_assert_uint_eq(r[0].dev_ptr, (uint64_t)(uintptr_t)r[0].host_addr);
    ck_assert_uint_eq(r[1].dev_ptr, 0);
    ck_assert(!lt_lease_id_eq(r[0].lease, r[1].lease));

    struct lease_stats st = stats(svc);
    ck_assert_uint_eq(st.cls[MAPPED].live_leases, 1);
    ck_assert_uint_eq(st.cls[PINNED].bytes_leased, 100000);
    ck_assert_uint_eq(st.cls[MAPPED].bytes_registered, 1 * MiB);
    ck_assert_uint_eq(lease_host_backend_locked(&be), 1 * MiB);

    struct lt_lease_id ids[3] = {r[0].lease, r[1].lease, r[2].lease};
    struct lease_release_result rr[3] = {{.rc = 1}, {.rc = 1}, {.rc = 1}};
    ck_assert_int_eq(lease_release(svc, c, 3, ids, rr, &why), 3);
    ck_assert_int_eq(rr[0].rc | rr[1].rc | rr[2].rc, 0);
    ck_assert_uint_eq(completions(), 3);
    ck_assert_uint_eq(rec.last_client, c.value);
    ck_assert_uint_eq(rec.last_lease, L(ids[2]));
    st = stats(svc);
    for (int k = STAGED; k <= MAPPED; k++) {
        ck_assert_uint_eq(st.cls[k].live_leases, 0);
        ck_assert_uint_eq(st.cls[k].bytes_leased, 0);
    }
    ck_assert_uint_eq(st.draining_leases, 0);
    lease_service_destroy(svc);
    ck_assert_uint_eq(lease_host_backend_locked(&be), 0);
    lease_backend_fini(&be);
    free(ref);
}
END_TEST

START_TEST(release_with_pending_work_completes_after_last_work_done)
{
    struct lease_backend be = fake_backend(0);
    struct lease_service *svc = new_svc(&be, 4 * MiB, 0);
    struct lease_client_id c = new_client(svc);
    struct lt_segment_id seg = add_seg(svc, c, 1 * MiB, PINNED, 7, NULL);
    struct lt_lease_id id = must_grant(svc, c, seg, 64 * KiB, 64 * KiB, PINNED);

    struct lease_ticket t1 = {0}, t2 = {0};
    ck_assert_int_eq(lease_work_pin(svc, c, id, &t1, &why), 0);
    ck_assert_int_eq(lease_work_pin(svc, c, id, &t2, &why), 0);
    ck_assert_uint_ne(t1.value, t2.value);
    ck_assert_int_eq(release1(svc, c, id), 0);
    ck_assert_uint_eq(completions(), 0);

    struct lease_info info;
    ck_assert_int_eq(lease_query(svc, c, id, &info, &why), 0);
    ck_assert_uint_eq(info.released, 1);
    ck_assert_uint_eq(info.pending_work, 2);
    ck_assert_uint_eq(stats(svc).draining_leases, 1);
    ck_assert_uint_eq(stats(svc).pending_work, 2);
    /* New work on a released lease is a bug in the caller. */
    struct lease_ticket t3;
    assert_error(lease_work_pin(svc, c, id, &t3, &why), -EALREADY, "already released");
    /* The segment is busy until the release completes. */
    assert_error(lease_segment_remove(svc, c, seg, &why), -EBUSY, "not release-complete");

    ck_assert_int_eq(lease_work_done(svc, t2, &why), 0);
    ck_assert_uint_eq(completions(), 0);
    ck_assert_int_eq(lease_work_done(svc, t1, &why), 0);
    ck_assert_uint_eq(completions(), 1);
    ck_assert_uint_eq(rec.last_lease, L(id));
    ck_assert_uint_eq(rec.last_client, c.value);

    assert_error(lease_work_done(svc, t1, &why), -EALREADY, "already done");
    assert_error(lease_work_done(svc, (struct lease_ticket){0}, &why), -ENOENT, "never issued");
    assert_error(lease_work_done(svc, (struct lease_ticket){t1.value + (1ull << 40)}, &why),
                 -ENOENT, "never issued");
    ck_assert_uint_eq(completions(), 1);
    ck_assert_uint_eq(stats(svc).draining_leases, 0);
    ck_assert_uint_eq(stats(svc).pending_work, 0);
    ck_assert_int_eq(lease_segment_remove(svc, c, seg, &why), 0);
    lease_service_destroy(svc);
}
END_TEST

START_TEST(stale_lease_id_is_refused_after_its_slot_is_reused)
{
    struct lease_backend be = fake_backend(0);
    struct lease_service *svc = new_svc(&be, 4 * MiB, 0);
    struct lease_client_id c = new_client(svc);
    struct lt_segment_id seg = add_seg(svc, c, 1 * MiB, PINNED, 8, NULL);
    struct lt_lease_id old = must_grant(svc, c, seg, 0, 4 * KiB, PINNED);
    ck_assert_int_eq(release1(svc, c, old), 0);
    struct lt_lease_id now = must_grant(svc, c, seg, 8 * KiB, 4 * KiB, PINNED);
    /* Same slot, newer generation: the old id must not alias the new lease. */
    ck_assert_uint_eq(old.slot, now.slot);
    ck_assert(!lt_lease_id_eq(old, now));
    assert_refused(release1(svc, c, old), -ESTALE, LT_E_STALE_ID, "stale");
    struct lease_ticket t;
    assert_error(lease_work_pin(svc, c, old, &t, &why), -ESTALE, "stale");
    struct lease_info info;
    ck_assert_int_eq(lease_query(svc, c, now, &info, &why), 0);
    ck_assert_uint_eq(info.offset, 8 * KiB);
    ck_assert_uint_eq(info.released, 0);
    ck_assert_uint_eq(completions(), 1);
    lease_service_destroy(svc);
}
END_TEST

START_TEST(foreign_lease_and_segment_ids_are_refused)
{
    struct lease_backend be = fake_backend(0);
    struct lease_service *svc = new_svc(&be, 4 * MiB, 0);
    struct lease_client_id a = new_client(svc);
    struct lease_client_id b = new_client(svc);
    struct lt_segment_id seg_a = add_seg(svc, a, 1 * MiB, PINNED, 9, NULL);
    struct lt_lease_id id = must_grant(svc, a, seg_a, 0, 4 * KiB, PINNED);

    assert_error(release1(svc, b, id), -EPERM, "another client");
    struct lease_ticket t;
    assert_error(lease_work_pin(svc, b, id, &t, &why), -EPERM, "another client");
    struct lease_info info;
    assert_error(lease_query(svc, b, id, &info, &why), -EPERM, "another client");
    struct lease_grant_result r;
    assert_error(grant1(svc, b, seg_a, 0, 4 * KiB, PINNED, 0, &r), -EPERM, "another client");
    assert_error(lease_segment_remove(svc, b, seg_a, &why), -EPERM, "another client");
    /* A's lease is untouched. */
    ck_assert_int_eq(lease_query(svc, a, id, &info, &why), 0);
    ck_assert_uint_eq(info.released, 0);
    /* Once released and complete, B still gets "foreign", not "already released". */
    ck_assert_int_eq(release1(svc, a, id), 0);
    assert_error(release1(svc, b, id), -EPERM, "another client");
    lease_service_destroy(svc);
}
END_TEST

START_TEST(double_release_is_refused_before_and_after_completion)
{
    struct lease_backend be = fake_backend(0);
    struct lease_service *svc = new_svc(&be, 4 * MiB, 0);
    struct lease_client_id c = new_client(svc);
    struct lt_segment_id seg = add_seg(svc, c, 1 * MiB, PINNED, 10, NULL);
    struct lt_lease_id id = must_grant(svc, c, seg, 0, 4 * KiB, PINNED);
    struct lease_ticket t;
    ck_assert_int_eq(lease_work_pin(svc, c, id, &t, &why), 0);
    ck_assert_int_eq(release1(svc, c, id), 0);
    assert_error(release1(svc, c, id), -EALREADY, "1 GPU work items still pending");
    ck_assert_int_eq(lease_work_done(svc, t, &why), 0);
    assert_error(release1(svc, c, id), -EALREADY, "release complete");
    ck_assert_uint_eq(completions(), 1);
    /* A batch naming one id twice releases it once. */
    struct lt_lease_id id2 = must_grant(svc, c, seg, 0, 4 * KiB, PINNED);
    struct lt_lease_id ids[3] = {id2, id2, lt_lease_id_from_u64(0x123456789abcull)};
    struct lease_release_result rr[3];
    ck_assert_int_eq(lease_release(svc, c, 3, ids, rr, &why), 1);
    ck_assert_int_eq(rr[0].rc, 0);
    ck_assert_int_eq(rr[1].rc, -EALREADY);
    ck_assert_int_eq(rr[2].rc, -ENOENT);
    /* Each refused entry carries its own code, as RELEASE_COMPLETE sends it. */
    ck_assert_uint_eq(rr[1].why.code, LT_E_STALE_ID);
    ck_assert_uint_eq(rr[2].why.code, LT_E_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(rr[2].why.message, "never issued"));
    ck_assert_uint_eq(completions(), 2);
    lease_service_destroy(svc);
}
END_TEST

START_TEST(ids_never_issued_are_refused)
{
    struct lease_backend be = fake_backend(0);
    struct lease_service *svc = new_svc(&be, 4 * MiB, 0);
    struct lease_client_id c = new_client(svc);
    struct lt_segment_id seg = add_seg(svc, c, 1 * MiB, PINNED, 11, NULL);
    struct lt_lease_id id = must_grant(svc, c, seg, 0, 4 * KiB, PINNED);
    uint64_t forged[] = {0, id.slot, L(id) + (1ull << 32), L(id) + 1, UINT64_MAX};
    for (size_t i = 0; i < sizeof(forged) / sizeof(forged[0]); i++)
        assert_refused(release1(svc, c, lt_lease_id_from_u64(forged[i])), -ENOENT, LT_E_NOT_FOUND,
                       "never issued");
    struct lease_grant_result r;
    assert_error(
        grant1(svc, c, lt_segment_id_from_u64(S(seg) + (1ull << 32)), 0, 4 * KiB, PINNED, 0, &r),
        -ENOENT, "never issued");
    assert_error(lease_grant(svc, client_plus(c, 5ull << 32), 1,
                             &(struct lease_grant_req){seg, 0, 4096, PINNED, 0}, &r, &why),
                 -ENOENT, "never issued");
    ck_assert_uint_eq(stats(svc).cls[PINNED].live_leases, 1);
    lease_service_destroy(svc);
}
END_TEST

START_TEST(out_of_range_and_overflowing_ranges_are_refused)
{
    struct lease_backend be = fake_backend(0);
    struct lease_service *svc = new_svc(&be, 4 * MiB, 0);
    struct lease_client_id c = new_client(svc);
    struct lt_segment_id seg = add_seg(svc, c, 1 * MiB, PINNED, 12, NULL);
    const struct {
        uint64_t off, len;
    } bad[] = {
        {UINT64_MAX - 10, 100}, /* offset + length wraps to a small number */
        {UINT64_MAX, 1},        {4096, UINT64_MAX},
        {1, UINT64_MAX - 1},    {1 * MiB - 4096, 8192}, /* runs past the end */
        {1 * MiB, 1},                                   /* starts at the end */
        {0, 1 * MiB + 1},       {0, 0},                 /* empty */
        {2 * MiB, 4096},
    };
    struct lease_grant_result r;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_refused(grant1(svc, c, seg, bad[i].off, bad[i].len, PINNED, 0, &r), -ERANGE,
                       LT_E_OUT_OF_RANGE, "expected 0 < length, end <= 1048576");
    ck_assert_int_eq(grant1(svc, c, seg, 1 * MiB - 4096, 4096, PINNED, 0, &r), 0);
    ck_assert_int_eq(grant1(svc, c, seg, 0, 1 * MiB, PINNED, 0, &r), 0);
    ck_assert_uint_eq(stats(svc).cls[PINNED].live_leases, 2);
    lease_service_destroy(svc);
}
END_TEST

START_TEST(class_must_not_exceed_the_segments)
{
    struct lease_backend be = fake_backend(0);
    struct lease_service *svc = new_svc(&be, 4 * MiB, 4 * MiB);
    struct lease_client_id c = new_client(svc);
    struct lt_segment_id pinned = add_seg(svc, c, 1 * MiB, PINNED, 13, NULL);
    struct lt_segment_id staged = add_seg(svc, c, 1 * MiB, STAGED, 14, NULL);
    struct lt_segment_id mapped = add_seg(svc, c, 1 * MiB, MAPPED, 15, NULL);
    struct lease_grant_result r;
    assert_refused(grant1(svc, c, pinned, 0, 4096, MAPPED, 0, &r), -EINVAL, LT_E_BAD_CLASS,
                   "a MAPPED lease needs a segment of class MAPPED or above, found PINNED");
    assert_error(grant1(svc, c, staged, 0, 4096, PINNED, 0, &r), -EINVAL, "found STAGED");
    assert_error(grant1(svc, c, pinned, 0, 4096, 0, 0, &r), -EINVAL, "found 0");
    assert_error(grant1(svc, c, pinned, 0, 4096, 4, 0, &r), -EINVAL, "found 4");
    assert_error(grant1(svc, c, pinned, 0, 4096, PINNED, 0x80, &r), -EINVAL, "unknown bits 0x80");
    ck_assert_int_eq(grant1(svc, c, pinned, 0, 4096, STAGED, 0, &r), 0);
    ck_assert_uint_eq(r.dev_ptr, 0);
    ck_assert_int_eq(grant1(svc, c, mapped, 0, 4096, PINNED, 0, &r), 0);
    ck_assert_uint_eq(r.dev_ptr, 0);
    ck_assert_int_eq(grant1(svc, c, mapped, 4096, 4096, MAPPED, 0, &r), 0);
    ck_assert_uint_ne(r.dev_ptr, 0);
    /* The STAGED segment was never registered: 2 registrations in all. */
    ck_assert_uint_eq(fake.regs, 2);
    struct lt_segment_id id;
    int fd = make_memfd(1 * MiB, GOOD_SEALS, 16);
    assert_refused(lease_segment_add(svc, c, fd, 1 * MiB, 9, &id, &why), -EINVAL, LT_E_BAD_CLASS,
                   "found 9");
    ck_assert(fd_open(fd));
    close(fd);
    lease_service_destroy(svc);
}
END_TEST

START_TEST(per_client_limits_are_enforced)
{
    struct lease_backend be = fake_backend(0);
    struct lease_service *svc = new_svc(&be, 8 * MiB, 0);
    struct lease_client_id c;
    struct lease_client_limits lim = {.max_leases = 3, .max_bytes = 64 * KiB, .max_segments = 1};
    ck_assert_int_eq(lease_client_add(svc, &lim, &c, &why), 0);
    struct lt_segment_id seg = add_seg(svc, c, 1 * MiB, PINNED, 17, NULL);
    int fd = make_memfd(1 * MiB, GOOD_SEALS, 18);
    struct lt_segment_id id;
    assert_refused(lease_segment_add(svc, c, fd, 1 * MiB, PINNED, &id, &why), -EDQUOT, LT_E_LIMIT,
                   "segment limit reached (1 of 1 for this client)");
    ck_assert(fd_open(fd));
    close(fd);

    struct lease_grant_result r;
    ck_assert_int_eq(grant1(svc, c, seg, 0, 32 * KiB, PINNED, 0, &r), 0);
    assert_error(grant1(svc, c, seg, 0, 32 * KiB + 1, PINNED, 0, &r), -EDQUOT,
                 "byte limit 65536 exceeded: 32768 leased, 32769 requested");
    ck_assert_int_eq(grant1(svc, c, seg, 0, 16 * KiB, PINNED, 0, &r), 0);
    ck_assert_int_eq(grant1(svc, c, seg, 0, 16 * KiB, PINNED, 0, &r), 0);
    struct lt_lease_id last = r.lease;
    assert_error(grant1(svc, c, seg, 0, 1, PINNED, 0, &r), -EDQUOT, "lease limit reached (3 of 3)");
    struct lease_client_stats cs;
    ck_assert_int_eq(lease_client_stats(svc, c, &cs, &why), 0);
    ck_assert_uint_eq(cs.leases, 3);
    ck_assert_uint_eq(cs.bytes, 64 * KiB);
    ck_assert_uint_eq(cs.segments, 1);
    /* Releasing gives the room back. */
    ck_assert_int_eq(release1(svc, c, last), 0);
    ck_assert_int_eq(grant1(svc, c, seg, 0, 16 * KiB, PINNED, 0, &r), 0);
    lease_service_destroy(svc);
}
END_TEST

START_TEST(mapped_leases_get_per_chunk_device_pointers_and_never_span_chunks)
{
    struct lease_backend be = fake_backend(256 * KiB);
    struct lease_service *svc = new_svc(&be, 4 * MiB, 4 * MiB);
    struct lease_client_id c = new_client(svc);
    struct lt_segment_id seg = add_seg(svc, c, 1 * MiB, MAPPED, 19, NULL);
    /* Each chunk is its own registration. */
    ck_assert_uint_eq(fake.regs, 4);
    ck_assert_int_eq(fake.nops, 4);
    for (int i = 1; i < 4; i++) {
        ck_assert_uint_eq(fake.ops[i].len, 256 * KiB);
        ck_assert_ptr_eq(fake.ops[i].base, (char *)fake.ops[0].base + i * 256 * KiB);
    }
    struct lease_grant_result r;
    ck_assert_int_eq(grant1(svc, c, seg, 300 * KiB, 4 * KiB, MAPPED, 0, &r), 0);
    /* Chunk 1 got the second device pointer the fake handed out. */
    ck_assert_uint_eq(r.dev_ptr, 0x100000000000ull + 2 * (1ull << 30) + 44 * KiB);
    ck_assert_ptr_eq(r.host_addr, (char *)fake.ops[0].base + 300 * KiB);
    assert_error(grant1(svc, c, seg, 500 * KiB, 24 * KiB, MAPPED, 0, &r), -EINVAL,
                 "crosses a chunk boundary at 524288");
    assert_error(grant1(svc, c, seg, 0, 1 * MiB, PINNED, 0, &r), -EINVAL, "chunk boundary");
    ck_assert_int_eq(grant1(svc, c, seg, 500 * KiB, 24 * KiB, STAGED, 0, &r), 0);
    ck_assert_int_eq(grant1(svc, c, seg, 768 * KiB, 256 * KiB, MAPPED, 0, &r), 0);
    ck_assert_uint_eq(r.dev_ptr, 0x100000000000ull + 4 * (1ull << 30));
    /* A segment unregistered chunk by chunk. */
    lease_service_destroy(svc);
    ck_assert_uint_eq(fake.unregs, 4);
    ck_assert_uint_eq(fake.live, 0);
}
END_TEST

START_TEST(registration_is_cached_across_leases)
{
    struct lease_backend be = fake_backend(0);
    struct lease_service *svc = new_svc(&be, 4 * MiB, 0);
    struct lease_client_id c = new_client(svc);
    struct lt_segment_id seg = add_seg(svc, c, 1 * MiB, PINNED, 20, NULL);
    uint64_t s = 42;
    for (int i = 0; i < 200; i++) {
        uint64_t off = (xorshift(&s) % 255) * 4 * KiB;
        struct lt_lease_id id = must_grant(svc, c, seg, off, 4 * KiB, PINNED);
        ck_assert_int_eq(release1(svc, c, id), 0);
    }
    ck_assert_uint_eq(fake.regs, 1);
    ck_assert_uint_eq(fake.unregs, 0);
    struct lease_stats st = stats(svc);
    ck_assert_uint_eq(st.cls[PINNED].registrations, 1);
    ck_assert_uint_eq(completions(), 200);
    lease_service_destroy(svc);
    ck_assert_uint_eq(fake.unregs, 1);
}
END_TEST

/* ---- segments: what fds are accepted ------------------------------------ */

struct bad_fd {
    const char *what;
    int fd;
    uint64_t claim;
    int rc;
    uint32_t code; /* what the agent's ERROR says */
    const char *needle;
};

START_TEST(wrong_kinds_of_fd_are_refused_and_left_open)
{
    struct lease_backend be = fake_backend(0);
    struct lease_service *svc = new_svc(&be, 8 * MiB, 8 * MiB);
    struct lease_client_id c = new_client(svc);
    int before = count_fds();

    int pipefd[2], sv[2];
    ck_assert_int_eq(pipe(pipefd), 0);
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
    char tmpl[] = "/tmp/lease-test-XXXXXX";
    int reg = mkstemp(tmpl);
    ck_assert_int_ge(reg, 0);
    unlink(tmpl);
    ck_assert_int_eq(ftruncate(reg, 1 * MiB), 0);
    char shm_name[64];
    snprintf(shm_name, sizeof(shm_name), "/lease-test-%d", (int)getpid());
    int shm = shm_open(shm_name, O_RDWR | O_CREAT | O_EXCL, 0600);
    ck_assert_int_ge(shm, 0);
    shm_unlink(shm_name);
    ck_assert_int_eq(ftruncate(shm, 1 * MiB), 0);
    int good = make_memfd(1 * MiB, GOOD_SEALS, 21);
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", good);
    int opath = open(path, O_PATH | O_CLOEXEC);
    ck_assert_int_ge(opath, 0);
    int rdonly = open(path, O_RDONLY | O_CLOEXEC);
    ck_assert_int_ge(rdonly, 0);

    const uint32_t U = LT_E_SEGMENT_UNSEALED, Z = LT_E_SEGMENT_SIZE;
    struct bad_fd cases[] = {
        {"pipe", pipefd[0], 1 * MiB, -EINVAL, U, "found a pipe or FIFO"},
        {"socket", sv[0], 1 * MiB, -EINVAL, U, "found a socket"},
        {"regular file", reg, 1 * MiB, -EINVAL, U, "found a regular file"},
        {"shm file", shm, 1 * MiB, -EINVAL, U, "found a regular file '/dev/shm/lease-test-"},
        {"O_PATH", opath, 1 * MiB, -EINVAL, U, "found an O_PATH descriptor"},
        {"read-only", rdonly, 1 * MiB, -EACCES, U, "found read-only"},
        {"unsealed", make_memfd(1 * MiB, 0, 22), 1 * MiB, -EPERM, U,
         "missing seals F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL (found none)"},
        {"no GROW seal", make_memfd(1 * MiB, F_SEAL_SHRINK | F_SEAL_SEAL, 23), 1 * MiB, -EPERM, U,
         "missing seals F_SEAL_GROW (found F_SEAL_SHRINK|F_SEAL_SEAL)"},
        {"write seal", make_memfd(1 * MiB, GOOD_SEALS | F_SEAL_WRITE, 24), 1 * MiB, -EPERM, U,
         "found a write seal"},
        {"short", make_memfd(1 * MiB, GOOD_SEALS, 25), 2 * MiB, -EINVAL, Z,
         "claimed size 2097152 bytes, found 1048576"},
        {"long", make_memfd(2 * MiB, GOOD_SEALS, 26), 1 * MiB, -EINVAL, Z,
         "claimed size 1048576 bytes, found 2097152"},
        {"not page multiple", make_memfd(1 * MiB + 100, GOOD_SEALS, 27), 1 * MiB + 100, -EINVAL,
         LT_E_MISALIGNED, "multiple of its 4096-byte base page, found 1048676"},
        {"empty", make_memfd(0, GOOD_SEALS, 28), 0, -EINVAL, Z, "above 0, claimed 0"},
        {"negative", -1, 1 * MiB, -EBADF, U, "found -1"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct stat st0, st1;
        int fd = cases[i].fd;
        bool real = fd >= 0;
        if (real)
            ck_assert_int_eq(fstat(fd, &st0), 0);
        struct lt_segment_id id = {0xdead, 0xbeef};
        memset(&why, 0, sizeof why);
        int rc = lease_segment_add(svc, c, fd, cases[i].claim, PINNED, &id, &why);
        ck_assert_msg(rc == cases[i].rc, "%s: expected %d, got %d (%s)", cases[i].what, cases[i].rc,
                      rc, why.message);
        ck_assert_msg(strstr(why.message, cases[i].needle) != NULL, "%s: message lacks '%s': %s",
                      cases[i].what, cases[i].needle, why.message);
        ck_assert_msg(why.code == cases[i].code, "%s: expected %s, got %s", cases[i].what,
                      lt_error_name(cases[i].code), lt_error_name(why.code));
        ck_assert_int_eq(why.err, rc);
        /* The words name no fd number: the peer's fd is not the agent's. */
        ck_assert_msg(strncmp(why.message, "segment fd: ", 12) == 0, "%s: %s", cases[i].what,
                      why.message);
        ck_assert_uint_eq(id.slot, 0xdead);
        ck_assert_uint_eq(id.gen, 0xbeef);
        if (real) {
            /* Not taken: still open, still the same file. */
            ck_assert_msg(fd_open(fd), "%s: fd was closed", cases[i].what);
            ck_assert_int_eq(fstat(fd, &st1), 0);
            ck_assert_uint_eq(st0.st_ino, st1.st_ino);
            ck_assert_uint_eq(st0.st_dev, st1.st_dev);
        }
    }
    struct lease_stats st = stats(svc);
    ck_assert_uint_eq(st.cls[PINNED].segments, 0);
    ck_assert_uint_eq(fake.regs, 0);
    /* A closed fd. */
    int closed = make_memfd(1 * MiB, GOOD_SEALS, 29);
    close(closed);
    struct lt_segment_id id;
    assert_refused(lease_segment_add(svc, c, closed, 1 * MiB, PINNED, &id, &why), -EBADF,
                   LT_E_SEGMENT_UNSEALED, "found none");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        if (cases[i].fd >= 0)
            close(cases[i].fd);
    close(pipefd[1]);
    close(sv[1]);
    /* The valid memfd the O_PATH and read-only fds came from is accepted. */
    ck_assert_int_eq(lease_segment_add(svc, c, good, 1 * MiB, PINNED, &id, &why), 0);
    ck_assert_int_eq(count_fds(), before + 1);
    lease_service_destroy(svc);
    ck_assert_int_eq(count_fds(), before);
}
END_TEST

START_TEST(segment_ids_are_generation_checked_and_remove_closes_the_fd)
{
    struct lease_backend be = fake_backend(0);
    struct lease_service *svc = new_svc(&be, 4 * MiB, 0);
    struct lease_client_id c = new_client(svc);
    int before = count_fds();
    int fd;
    struct lt_segment_id seg = add_seg(svc, c, 1 * MiB, PINNED, 30, &fd);
    ck_assert_int_eq(count_fds(), before + 1);
    struct lt_lease_id id = must_grant(svc, c, seg, 0, 4096, PINNED);
    assert_error(lease_segment_remove(svc, c, seg, &why), -EBUSY, "1 leases not release-complete");
    ck_assert(fd_open(fd));
    ck_assert_int_eq(release1(svc, c, id), 0);
    ck_assert_int_eq(lease_segment_remove(svc, c, seg, &why), 0);
    ck_assert(!fd_open(fd));
    ck_assert_int_eq(count_fds(), before);
    ck_assert_uint_eq(fake.unregs, 1);
    struct lease_grant_result r;
    assert_error(grant1(svc, c, seg, 0, 4096, PINNED, 0, &r), -ESTALE, "it was removed");
    assert_error(lease_segment_remove(svc, c, seg, &why), -ESTALE, "it was removed");
    struct lt_segment_id seg2 = add_seg(svc, c, 1 * MiB, PINNED, 31, NULL);
    ck_assert_uint_eq(seg2.slot, seg.slot);
    assert_error(grant1(svc, c, seg, 0, 4096, PINNED, 0, &r), -ESTALE, "newer segment");
    ck_assert_int_eq(grant1(svc, c, seg2, 0, 4096, PINNED, 0, &r), 0);
    lease_service_destroy(svc);
    ck_assert_int_eq(count_fds(), before);
}
END_TEST

/* A backend that records, at registration time, how much of the range is
 * already in the agent's page tables (smaps Rss of the mapping). */
struct rss_probe {
    void *base;
    long rss_kb;
};

static int rss_register(void *ctx, void *base, uint64_t length, enum lt_class cls,
                        uint64_t *dev_ptr_p, struct lt_failure *why_p)
{
    (void)length;
    (void)cls;
    (void)why_p;
    struct rss_probe *p = ctx;
    p->base = base;
    p->rss_kb = test_smaps_kb(base, "Rss:");
    *dev_ptr_p = (uint64_t)(uintptr_t)base;
    return 0;
}

static int rss_unregister(void *ctx, void *base, uint64_t length, enum lt_class cls,
                          struct lt_failure *why_p)
{
    (void)ctx;
    (void)why_p;
    (void)base;
    (void)length;
    (void)cls;
    return 0;
}

START_TEST(registration_finds_the_page_tables_populated_and_the_bytes_unchanged)
{
    /* One thread populates the small segment; the large one is split
     * between threads, its last slice longer than the others. */
    static const uint64_t sizes[] = {4 * MiB, 130 * MiB};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        const uint64_t size = sizes[k];
        struct rss_probe probe = {0};
        struct lease_backend be = {.name = "rss probe",
                                   .ctx = &probe,
                                   .register_range = rss_register,
                                   .unregister_range = rss_unregister};
        /* Legacy seals: the last check writes through the agent's mapping,
         * which F_SEAL_FUTURE_WRITE would make read-only. */
        struct lease_service_config cfg = {
            .budget_pinned = size, .budget_mapped = size, .seals = LEASE_SEALS_LEGACY};
        struct lease_service *svc = NULL;
        ck_assert_int_eq(lease_service_create(&cfg, &be, &svc, &why), 0);
        struct lease_client_id c = {0};
        ck_assert_int_eq(lease_client_add(svc, NULL, &c, &why), 0);
        int fd = make_memfd(size, OLD_SEALS, 4242 + k); /* written, then unmapped */
        struct lt_segment_id seg = {0, 0};
        ck_assert_int_eq(lease_segment_add(svc, c, fd, size, PINNED, &seg, &why), 0);
        /* Mapped on a 2 MiB boundary. A small segment is populated before
         * the backend is called; a large one alongside it, by threads that
         * have finished when the add returns. Either way every page ends in
         * the page tables, so the pin has no fault of its own to take. */
        ck_assert_ptr_nonnull(probe.base);
        ck_assert_uint_eq((uintptr_t)probe.base % (2 * MiB), 0);
        if (size < 64 * MiB)
            ck_assert_msg(probe.rss_kb == (long)(size / 1024), "%llu MiB: Rss %ld kB",
                          (unsigned long long)(size / MiB), probe.rss_kb);
        long rss_after = test_smaps_kb(probe.base, "Rss:");
        ck_assert_msg(rss_after == (long)(size / 1024), "%llu MiB: Rss %ld kB after the add",
                      (unsigned long long)(size / MiB), rss_after);
        unsigned char *want = malloc(size);
        ck_assert_ptr_nonnull(want);
        fill_random(want, size, 4242 + k);
        ck_assert_int_eq(memcmp(probe.base, want, size), 0);
        /* Writes through the agent's mapping reach the daemon's fd. */
        ((unsigned char *)probe.base)[size - 1] ^= 0xff;
        unsigned char last = 0;
        ck_assert_int_eq(pread(fd, &last, 1, (off_t)(size - 1)), 1);
        ck_assert_uint_eq(last, (unsigned char)(want[size - 1] ^ 0xff));
        free(want);
        ck_assert_int_eq(lease_client_drop(svc, c, &why), 0);
        lease_service_destroy(svc);
    }
}
END_TEST

START_TEST(backend_failure_leaves_the_fd_with_the_caller)
{
    struct lease_backend be = fake_backend(256 * KiB);
    struct lease_service *svc = new_svc(&be, 4 * MiB, 0);
    struct lease_client_id c = new_client(svc);
    int fd = make_memfd(1 * MiB, GOOD_SEALS, 32);
    int before = count_fds();
    struct lt_segment_id id;
    /* Fails on the first chunk, then on the third (two to unwind). */
    for (int countdown = 0; countdown <= 2; countdown += 2) {
        fake.fail_rc = -EIO;
        fake.fail_countdown = countdown;
        assert_refused(lease_segment_add(svc, c, fd, 1 * MiB, PINNED, &id, &why), -EIO,
                       LT_E_GPU_FAULT, "injected failure");
        ck_assert(fd_open(fd));
        ck_assert_int_eq(count_fds(), before);
        ck_assert_uint_eq(fake.live, 0);
        ck_assert_uint_eq(fake.unregs, (uint64_t)countdown);
    }
    struct lease_stats st = stats(svc);
    ck_assert_uint_eq(st.cls[PINNED].segments, 0);
    ck_assert_uint_eq(st.cls[PINNED].bytes_registered, 0);
    /* The budget reservation was returned: the whole budget is still there. */
    ck_assert_int_eq(lease_segment_add(svc, c, fd, 1 * MiB, PINNED, &id, &why), 0);
    struct lt_segment_id s2 = add_seg(svc, c, 3 * MiB, PINNED, 33, NULL);
    (void)s2;
    ck_assert_uint_eq(stats(svc).cls[PINNED].bytes_registered, 4 * MiB);
    lease_service_destroy(svc);
    ck_assert_uint_eq(fake.live, 0);
}
END_TEST

/* A backend that fails without words still gets a code the agent can send:
 * -ENOMEM is the contract's "no lockable memory". */
START_TEST(a_silent_backend_failure_still_carries_a_code_and_words)
{
    struct lease_backend be = fake_backend(0);
    struct lease_service *svc = new_svc(&be, 4 * MiB, 0);
    struct lease_client_id c = new_client(svc);
    int fd = make_memfd(1 * MiB, GOOD_SEALS, 90);
    struct lt_segment_id id;
    fake.fail_silent = true;
    fake.fail_rc = -EIO;
    assert_refused(lease_segment_add(svc, c, fd, 1 * MiB, PINNED, &id, &why), -EIO, LT_E_GPU_FAULT,
                   "backend failed with errno 5 and no message");
    fake.fail_rc = -ENOMEM;
    fake.fail_countdown = 0;
    assert_refused(lease_segment_add(svc, c, fd, 1 * MiB, PINNED, &id, &why), -ENOMEM, LT_E_MEMLOCK,
                   "backend failed with errno 12 and no message");
    ck_assert(fd_open(fd));
    close(fd);
    lease_service_destroy(svc);
}
END_TEST

/* ---- budgets, LRU, fallback ----------------------------------------------- */

START_TEST(budget_exhaustion_is_refused_with_the_numbers)
{
    struct lease_backend be = fake_backend(0);
    struct lease_service *svc = new_svc(&be, 2 * MiB, 1 * MiB);
    struct lease_client_id c = new_client(svc);
    struct lt_segment_id a = add_seg(svc, c, 1 * MiB, PINNED, 34, NULL);
    struct lt_segment_id b = add_seg(svc, c, 1 * MiB, PINNED, 35, NULL);
    must_grant(svc, c, a, 0, 4096, PINNED);
    must_grant(svc, c, b, 0, 4096, PINNED);
    int fd = make_memfd(1 * MiB, GOOD_SEALS, 36);
    struct lt_segment_id id;
    assert_refused(lease_segment_add(svc, c, fd, 1 * MiB, PINNED, &id, &why), -ENOSPC, LT_E_BUDGET,
                   "PINNED pin budget: 1048576 asked, 2097152 of 2097152 in use (0 idle)");
    ck_assert_str_eq(rec.last_log, why.message);
    ck_assert(fd_open(fd));
    /* Larger than the whole budget: refused even with nothing registered. */
    int big = make_memfd(2 * MiB, GOOD_SEALS, 37);
    assert_error(lease_segment_add(svc, c, big, 2 * MiB, MAPPED, &id, &why), -ENOSPC,
                 "MAPPED pin budget: 2097152 asked, 0 of 1048576 in use");
    /* STAGED needs no budget. */
    ck_assert_int_eq(lease_segment_add(svc, c, fd, 1 * MiB, STAGED, &id, &why), 0);
    struct lease_stats st = stats(svc);
    ck_assert_uint_eq(st.cls[PINNED].budget_refusals, 1);
    ck_assert_uint_eq(st.cls[MAPPED].budget_refusals, 1);
    ck_assert_uint_eq(st.cls[PINNED].bytes_registered, 2 * MiB);
    ck_assert_uint_eq(st.cls[PINNED].budget, 2 * MiB);
    ck_assert_uint_eq(st.cls[STAGED].segments, 1);
    close(big);
    lease_service_destroy(svc);
}
END_TEST

START_TEST(lru_unregisters_the_least_recently_used_idle_segment)
{
    struct lease_backend be = fake_backend(0);
    struct lease_service *svc = new_svc(&be, 2 * MiB, 0);
    struct lease_client_id c = new_client(svc);
    struct lt_segment_id a = add_seg(svc, c, 1 * MiB, PINNED, 38, NULL);
    struct lt_segment_id b = add_seg(svc, c, 1 * MiB, PINNED, 39, NULL);
    void *base_a = fake.ops[0].base, *base_b = fake.ops[1].base;
    ck_assert_ptr_ne(base_a, base_b);
    /* Both idle; A is least recently used. C needs room: A goes, not B. */
    add_seg(svc, c, 1 * MiB, PINNED, 40, NULL);
    ck_assert_int_eq(fake.nops, 4);
    ck_assert_int_eq(fake.ops[2].op, 'U');
    ck_assert_ptr_eq(fake.ops[2].base, base_a);
    ck_assert_int_eq(fake.ops[3].op, 'R');
    struct lease_stats st = stats(svc);
    ck_assert_uint_eq(st.cls[PINNED].evictions, 1);
    ck_assert_uint_eq(st.cls[PINNED].unregistrations, 1);
    ck_assert_uint_eq(st.cls[PINNED].bytes_registered, 2 * MiB);
    ck_assert_uint_eq(st.cls[PINNED].segments, 3);
    /* B is still registered: a lease on it registers nothing. */
    must_grant(svc, c, b, 0, 4096, PINNED);
    ck_assert_uint_eq(fake.regs, 3);
    /* A is re-registered on its next lease; B is leased, so C (idle) goes. */
    struct lease_grant_result r;
    ck_assert_int_eq(grant1(svc, c, a, 4096, 4096, PINNED, 0, &r), 0);
    ck_assert_uint_eq(fake.regs, 4);
    ck_assert_int_eq(fake.ops[4].op, 'U');
    ck_assert_ptr_ne(fake.ops[4].base, base_b);
    ck_assert_ptr_ne(fake.ops[4].base, base_a);
    ck_assert_int_eq(fake.ops[5].op, 'R');
    ck_assert_ptr_eq(fake.ops[5].base, base_a);
    st = stats(svc);
    ck_assert_uint_eq(st.cls[PINNED].evictions, 2);
    ck_assert_uint_eq(st.cls[PINNED].registrations, 4);
    lease_service_destroy(svc);
}
END_TEST

START_TEST(lru_order_follows_use_not_age)
{
    struct lease_backend be = fake_backend(0);
    struct lease_service *svc = new_svc(&be, 2 * MiB, 0);
    struct lease_client_id c = new_client(svc);
    struct lt_segment_id a = add_seg(svc, c, 1 * MiB, PINNED, 41, NULL);
    add_seg(svc, c, 1 * MiB, PINNED, 42, NULL);
    void *base_b = fake.ops[1].base;
    /* Touch A after B was added: B is now least recently used. */
    struct lt_lease_id id = must_grant(svc, c, a, 0, 4096, PINNED);
    ck_assert_int_eq(release1(svc, c, id), 0);
    add_seg(svc, c, 1 * MiB, PINNED, 43, NULL);
    ck_assert_int_eq(fake.ops[2].op, 'U');
    ck_assert_ptr_eq(fake.ops[2].base, base_b);
    lease_service_destroy(svc);
}
END_TEST

START_TEST(segments_with_leases_or_pending_work_are_never_evicted)
{
    struct lease_backend be = fake_backend(0);
    struct lease_service *svc = new_svc(&be, 2 * MiB, 0);
    struct lease_client_id c = new_client(svc);
    struct lt_segment_id a = add_seg(svc, c, 1 * MiB, PINNED, 44, NULL);
    struct lt_segment_id b = add_seg(svc, c, 1 * MiB, PINNED, 45, NULL);
    void *base_b = fake.ops[1].base;
    /* A (older) has a released lease whose GPU work is still pending. */
    struct lt_lease_id la = must_grant(svc, c, a, 0, 4096, PINNED);
    struct lease_ticket t;
    ck_assert_int_eq(lease_work_pin(svc, c, la, &t, &why), 0);
    ck_assert_int_eq(release1(svc, c, la), 0);
    /* A STAGED lease does not hold B's registration. */
    must_grant(svc, c, b, 0, 4096, STAGED);
    struct lt_segment_id cseg = add_seg(svc, c, 1 * MiB, PINNED, 46, NULL);
    ck_assert_int_eq(fake.ops[2].op, 'U');
    ck_assert_ptr_eq(fake.ops[2].base, base_b);
    /* Now A (pending) and C (leased) are both pinned down: D is refused. */
    must_grant(svc, c, cseg, 0, 4096, PINNED);
    int fd = make_memfd(1 * MiB, GOOD_SEALS, 47);
    struct lt_segment_id id;
    assert_error(lease_segment_add(svc, c, fd, 1 * MiB, PINNED, &id, &why), -ENOSPC,
                 "2097152 of 2097152 in use (0 idle)");
    /* When the work is done A becomes evictable. */
    ck_assert_int_eq(lease_work_done(svc, t, &why), 0);
    ck_assert_int_eq(lease_segment_add(svc, c, fd, 1 * MiB, PINNED, &id, &why), 0);
    ck_assert_uint_eq(stats(svc).cls[PINNED].evictions, 2);
    lease_service_destroy(svc);
}
END_TEST

/* A backend whose retire_range keeps the jobs until the test (or a helper
 * thread) finishes them: the reaper held by a peer's unrung doorbell. */
static struct {
    pthread_mutex_t mu;
    struct lease_retire *jobs[64];
    int n;
    bool run; /* the helper thread finishes jobs while set */
} held = {.mu = PTHREAD_MUTEX_INITIALIZER};

static int held_retire(void *ctx, struct lease_retire *job)
{
    (void)ctx;
    pthread_mutex_lock(&held.mu);
    ck_assert_int_lt(held.n, 64);
    held.jobs[held.n++] = job;
    pthread_mutex_unlock(&held.mu);
    return 0;
}

/* Unregisters and hands back every job held, in order; returns how many. */
static int held_finish(void)
{
    int done = 0;
    for (;;) {
        pthread_mutex_lock(&held.mu);
        struct lease_retire *j = held.n ? held.jobs[0] : NULL;
        if (j) {
            memmove(held.jobs, held.jobs + 1, (size_t)(held.n - 1) * sizeof(held.jobs[0]));
            held.n--;
        }
        pthread_mutex_unlock(&held.mu);
        if (!j)
            return done;
        uint64_t chunk = j->chunk_bytes ? j->chunk_bytes : j->size;
        for (uint64_t off = 0; off < j->size; off += chunk)
            fake_unregister(&fake, (char *)j->base + off,
                            j->size - off < chunk ? j->size - off : chunk, j->cls, NULL);
        j->done(j);
        done++;
    }
}

static void *held_thread(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&held.mu);
        bool run = held.run;
        pthread_mutex_unlock(&held.mu);
        if (!run)
            return NULL;
        base_sleep_ns(2 * 1000 * 1000);
        held_finish();
    }
}

static struct lease_backend held_backend(void)
{
    struct lease_backend be = fake_backend(0);
    be.retire_range = held_retire;
    held.n = 0;
    held.run = false;
    return be;
}

static void check_consistent(struct lease_service *svc)
{
    char msg[512];
    ck_assert_msg(lease_service_check(svc, msg, sizeof msg) == 0, "%s", msg);
}

START_TEST(an_eviction_in_flight_counts_against_the_budget_and_blocks_no_one)
{
    struct lease_backend be = held_backend();
    struct lease_service *svc = new_svc(&be, 2 * MiB, 0);
    struct lease_client_id c = new_client(svc);
    struct lt_segment_id a = add_seg(svc, c, 1 * MiB, PINNED, 60, NULL);
    add_seg(svc, c, 1 * MiB, PINNED, 61, NULL);
    void *base_a = fake.ops[0].base;
    /* C needs A evicted; the backend holds the job: refused busy, bounded. */
    int fd = make_memfd(1 * MiB, GOOD_SEALS, 62);
    struct lt_segment_id cs;
    uint64_t t0 = base_now_ns();
    assert_refused(lease_segment_add(svc, c, fd, 1 * MiB, PINNED, &cs, &why), -EBUSY, LT_E_BUSY,
                   "1048576 unregistering: retry");
    ck_assert_uint_lt(base_now_ns() - t0, 1000ull * 1000 * 1000);
    ck_assert_int_eq(held.n, 1);
    struct lease_stats st = stats(svc);
    ck_assert_uint_eq(st.cls[PINNED].evictions, 1);
    ck_assert_uint_eq(st.cls[PINNED].bytes_registered, 1 * MiB);
    ck_assert_uint_eq(st.cls[PINNED].bytes_retiring, 1 * MiB);
    check_consistent(svc);
    /* A itself: not registered again while the driver still holds it, and
     * with the backend stuck, not waited for either. */
    uint64_t regs = fake.regs;
    struct lease_grant_result r;
    t0 = base_now_ns();
    assert_refused(grant1(svc, c, a, 0, 4096, PINNED, 0, &r), -EBUSY, LT_E_BUSY,
                   "was evicted and is still being unregistered");
    ck_assert_uint_lt(base_now_ns() - t0, 50ull * 1000 * 1000);
    ck_assert_uint_eq(fake.regs, regs);
    ck_assert_int_eq(grant1(svc, c, a, 0, 4096, PINNED, LEASE_GRANT_ALLOW_STAGED, &r), 0);
    ck_assert_int_eq(r.cls, STAGED);
    ck_assert_uint_eq(r.fell_back, 1);
    ck_assert_int_eq(release1(svc, c, r.lease), 0);
    /* The backend done: the bytes are back, C fits. */
    ck_assert_int_eq(held_finish(), 1);
    ck_assert_uint_eq(stats(svc).cls[PINNED].bytes_retiring, 0);
    ck_assert_int_eq(lease_segment_add(svc, c, fd, 1 * MiB, PINNED, &cs, &why), 0);
    check_consistent(svc);
    /* A backend that finishes soon: A's grant evicts B and waits for it,
     * and A is registered only after its own old registration went. */
    pthread_mutex_lock(&held.mu);
    held.run = true;
    pthread_mutex_unlock(&held.mu);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, held_thread, NULL), 0);
    must_grant(svc, c, a, 0, 4096, PINNED);
    pthread_mutex_lock(&held.mu);
    held.run = false;
    pthread_mutex_unlock(&held.mu);
    pthread_join(th, NULL);
    held_finish();
    int last_u = -1, last_r = -1;
    for (int i = 0; i < fake.nops; i++) {
        if (fake.ops[i].base == base_a)
            *(fake.ops[i].op == 'U' ? &last_u : &last_r) = i;
    }
    ck_assert_int_gt(last_r, last_u);
    ck_assert_uint_eq(stats(svc).cls[PINNED].bytes_registered, 2 * MiB);
    check_consistent(svc);
    lease_service_destroy(svc);
    ck_assert_int_eq(held_finish(), 2); /* destroyed: its registered segments retire */
    ck_assert_uint_eq(fake.live, 0);
}
END_TEST

START_TEST(a_segment_removed_or_a_service_destroyed_mid_eviction_is_unmapped_after_it)
{
    struct lease_backend be = held_backend();
    struct lease_service *svc = new_svc(&be, 1 * MiB, 0);
    struct lease_client_id c = new_client(svc);
    struct lt_segment_id a = add_seg(svc, c, 1 * MiB, PINNED, 63, NULL);
    void *base_a = fake.ops[0].base;
    int fd = make_memfd(1 * MiB, GOOD_SEALS, 64);
    struct lt_segment_id bs;
    assert_refused(lease_segment_add(svc, c, fd, 1 * MiB, PINNED, &bs, &why), -EBUSY, LT_E_BUSY,
                   "unregistering: retry");
    /* A removed while its eviction is held: its mapping stays until then. */
    ck_assert_int_eq(lease_segment_remove(svc, c, a, &why), 0);
    unsigned char vec;
    ck_assert_int_eq(mincore(base_a, 4096, &vec), 0);
    ck_assert_int_eq(held_finish(), 1);
    ck_assert_int_eq(mincore(base_a, 4096, &vec), -1);
    ck_assert_int_eq(errno, ENOMEM);
    ck_assert_int_eq(lease_segment_add(svc, c, fd, 1 * MiB, PINNED, &bs, &why), 0);
    check_consistent(svc);
    /* Destroyed with a job held: the job comes back to no service. */
    lease_service_destroy(svc);
    ck_assert_int_eq(held_finish(), 1);
    ck_assert_uint_eq(fake.live, 0);
}
END_TEST

START_TEST(fallback_to_staged_when_the_client_allows_it)
{
    struct lease_backend be = fake_backend(0);
    struct lease_service *svc = new_svc(&be, 1 * MiB, 0);
    struct lease_client_id c = new_client(svc);
    uint64_t seed = 48;
    struct lt_segment_id a = add_seg(svc, c, 1 * MiB, PINNED, seed, NULL);
    struct lt_segment_id b = add_seg(svc, c, 1 * MiB, PINNED, 49, NULL); /* evicts A */
    must_grant(svc, c, b, 0, 4096, PINNED);
    struct lease_grant_result r;
    assert_refused(grant1(svc, c, a, 8192, 4096, PINNED, 0, &r), -ENOSPC, LT_E_BUDGET,
                   "PINNED pin budget: 1048576 asked, 1048576 of 1048576 in use");
    ck_assert_int_eq(grant1(svc, c, a, 8192, 4096, PINNED, LEASE_GRANT_ALLOW_STAGED, &r), 0);
    ck_assert_uint_eq(r.cls, STAGED);
    ck_assert_uint_eq(r.fell_back, 1);
    ck_assert_uint_eq(r.dev_ptr, 0);
    ck_assert_ptr_nonnull(strstr(rec.last_log, "PINNED lease served as STAGED"));
    uint8_t *ref = ref_data(1 * MiB, seed);
    ck_assert_mem_eq(r.host_addr, ref + 8192, 4096);
    free(ref);
    struct lease_info info;
    ck_assert_int_eq(lease_query(svc, c, r.lease, &info, &why), 0);
    ck_assert_uint_eq(info.cls, STAGED);
    struct lease_stats st = stats(svc);
    ck_assert_uint_eq(st.cls[PINNED].fallbacks, 1);
    ck_assert_uint_eq(st.cls[PINNED].budget_refusals, 1);
    ck_assert_uint_eq(st.cls[STAGED].live_leases, 1);
    ck_assert_uint_eq(st.cls[PINNED].live_leases, 1);
    ck_assert_uint_eq(fake.regs, 2);
    /* A request that fits is served as asked even with the flag. */
    ck_assert_int_eq(grant1(svc, c, b, 0, 4096, PINNED, LEASE_GRANT_ALLOW_STAGED, &r), 0);
    ck_assert_uint_eq(r.cls, PINNED);
    ck_assert_uint_eq(r.fell_back, 0);
    lease_service_destroy(svc);
}
END_TEST

/* The failure record is written only when the call fails, even when a
 * refusal inside it was recovered from (a fallback to STAGED), and the
 * function that decides a refusal logs its words once. */
START_TEST(a_refusal_is_written_only_on_failure_and_logged_once)
{
    struct lease_backend be = fake_backend(0);
    struct lease_service *svc = new_svc(&be, 1 * MiB, 0);
    struct lease_client_id c = new_client(svc);
    struct lt_segment_id a = add_seg(svc, c, 1 * MiB, PINNED, 91, NULL);
    struct lt_segment_id b = add_seg(svc, c, 1 * MiB, PINNED, 92, NULL); /* evicts A */
    struct lt_lease_id lb = must_grant(svc, c, b, 0, 4096, PINNED);
    struct lt_failure untouched, w;
    memset(&untouched, 0x5a, sizeof untouched);
    w = untouched;
    struct lease_grant_req q = {a, 0, 4096, PINNED, LEASE_GRANT_ALLOW_STAGED};
    struct lease_grant_result r;
    memset(&r.why, 0x5a, sizeof r.why);
    ck_assert_int_eq(lease_grant(svc, c, 1, &q, &r, &w), 1);
    ck_assert_uint_eq(r.fell_back, 1);
    ck_assert_mem_eq(&w, &untouched, sizeof w);
    ck_assert_mem_eq(&r.why, &untouched, sizeof r.why);
    struct lease_info info;
    ck_assert_int_eq(lease_query(svc, c, lb, &info, &w), 0);
    ck_assert_mem_eq(&w, &untouched, sizeof w);

    uint64_t logs = rec.logs;
    assert_refused(lease_segment_remove(svc, c, b, &why), -EBUSY, LT_E_BUSY,
                   "1 leases not release-complete");
    ck_assert_uint_eq(rec.logs, logs + 1);
    ck_assert_str_eq(rec.last_log, why.message);
    /* Without a record to fill, the refusal is still logged. */
    ck_assert_int_eq(lease_segment_remove(svc, c, b, NULL), -EBUSY);
    ck_assert_uint_eq(rec.logs, logs + 2);
    lease_service_destroy(svc);
}
END_TEST

/* ---- host backend and RLIMIT_MEMLOCK ------------------------------------- */

static void lower_memlock(uint64_t soft)
{
    struct rlimit rl;
    ck_assert_int_eq(getrlimit(RLIMIT_MEMLOCK, &rl), 0);
    rl.rlim_cur = soft;
    ck_assert_int_eq(setrlimit(RLIMIT_MEMLOCK, &rl), 0);
}

START_TEST(impossible_budgets_are_refused_at_creation)
{
    lower_memlock(1 * MiB);
    struct lease_backend be;
    ck_assert_int_eq(lease_host_backend_init(&be, &why), 0);
    struct lease_service_config cfg = config(4 * MiB, 2 * MiB);
    struct lease_service *svc = (struct lease_service *)0x1;
    assert_error(lease_service_create(&cfg, &be, &svc, &why), -EINVAL,
                 "budgets PINNED 4194304 + MAPPED 2097152 = 6291456 bytes exceed what backend "
                 "'host (mlock)' can lock, 1048576 bytes");
    ck_assert_ptr_eq(svc, (struct lease_service *)0x1);
    ck_assert_ptr_nonnull(strstr(rec.last_log, "RLIMIT_MEMLOCK"));
    /* Over physical memory, whatever the backend. */
    struct lease_backend fb = fake_backend(0);
    cfg = config(UINT64_MAX / 2, UINT64_MAX / 4);
    assert_error(lease_service_create(&cfg, &fb, &svc, &why), -EINVAL, "exceed physical memory");
    cfg = config(UINT64_MAX, 1);
    assert_error(lease_service_create(&cfg, &fb, &svc, &why), -EINVAL, "overflow");
    fb.chunk_bytes = 1000;
    cfg = config(1 * MiB, 0);
    assert_error(lease_service_create(&cfg, &fb, &svc, &why), -EINVAL, "chunk size 1000");
    /* Within the limit it starts. */
    cfg = config(512 * KiB, 512 * KiB);
    ck_assert_int_eq(lease_service_create(&cfg, &be, &svc, &why), 0);
    lease_service_destroy(svc);
    lease_backend_fini(&be);
}
END_TEST

START_TEST(registration_over_rlimit_memlock_is_refused_with_the_numbers)
{
    struct lease_backend be;
    ck_assert_int_eq(lease_host_backend_init(&be, &why), 0);
    struct lease_service *svc = new_svc(&be, 2 * MiB, 0);
    struct lease_client_id c = new_client(svc);
    uint64_t vm0 = vm_locked_kib();
    struct lt_segment_id a = add_seg(svc, c, 512 * KiB, PINNED, 50, NULL);
    /* The pages really are locked (where mlock is not intercepted). */
    if (mlock_shows_in_vmlck())
        ck_assert_uint_eq(vm_locked_kib(), vm0 + 512);
    ck_assert_uint_eq(lease_host_backend_locked(&be), 512 * KiB);
    /* The limit drops under the service's feet (another component locked memory). */
    lower_memlock(1 * MiB);
    int fd = make_memfd(1 * MiB, GOOD_SEALS, 51);
    struct lt_segment_id id;
    assert_refused(lease_segment_add(svc, c, fd, 1 * MiB, PINNED, &id, &why), -ENOMEM, LT_E_MEMLOCK,
                   "1048576 more PINNED bytes exceed RLIMIT_MEMLOCK 1048576 (524288 locked)");
    ck_assert(fd_open(fd));
    ck_assert_uint_eq(stats(svc).cls[PINNED].budget_refusals, 1);
    ck_assert_uint_eq(stats(svc).cls[PINNED].bytes_registered, 512 * KiB);
    /* A STAGED segment of the same fd is fine, and removing A unlocks. */
    ck_assert_int_eq(lease_segment_add(svc, c, fd, 1 * MiB, STAGED, &id, &why), 0);
    ck_assert_int_eq(lease_segment_remove(svc, c, a, &why), 0);
    ck_assert_uint_eq(vm_locked_kib(), vm0);
    ck_assert_uint_eq(lease_host_backend_locked(&be), 0);
    lease_service_destroy(svc);
    lease_backend_fini(&be);
}
END_TEST

START_TEST(rlimit_refusal_at_grant_falls_back_to_staged_when_allowed)
{
    struct lease_backend be;
    ck_assert_int_eq(lease_host_backend_init(&be, &why), 0);
    struct lease_service *svc = new_svc(&be, 2 * MiB, 0);
    struct lease_client_id c = new_client(svc);
    uint64_t seed = 52;
    struct lt_segment_id a = add_seg(svc, c, 1 * MiB, PINNED, seed, NULL);
    struct lt_segment_id b = add_seg(svc, c, 1 * MiB, PINNED, 53, NULL);
    struct lt_segment_id x = add_seg(svc, c, 1 * MiB, PINNED, 54, NULL); /* evicts A */
    must_grant(svc, c, b, 0, 4096, PINNED);
    ck_assert_int_eq(lease_segment_remove(svc, c, x, &why), 0);
    ck_assert_uint_eq(lease_host_backend_locked(&be), 1 * MiB);
    /* The budget has room for A again, RLIMIT_MEMLOCK does not. */
    lower_memlock(1 * MiB + 512 * KiB);
    struct lease_grant_result r;
    assert_refused(grant1(svc, c, a, 0, 4096, PINNED, 0, &r), -ENOMEM, LT_E_MEMLOCK,
                   "exceed RLIMIT_MEMLOCK 1572864 (1048576 locked)");
    ck_assert_int_eq(grant1(svc, c, a, 4096, 4096, PINNED, LEASE_GRANT_ALLOW_STAGED, &r), 0);
    ck_assert_uint_eq(r.cls, STAGED);
    ck_assert_uint_eq(r.fell_back, 1);
    uint8_t *ref = ref_data(1 * MiB, seed);
    ck_assert_mem_eq(r.host_addr, ref + 4096, 4096);
    free(ref);
    struct lease_stats st = stats(svc);
    ck_assert_uint_eq(st.cls[PINNED].budget_refusals, 1);
    ck_assert_uint_eq(st.cls[PINNED].fallbacks, 1);
    ck_assert_uint_eq(st.cls[PINNED].bytes_registered, 1 * MiB);
    ck_assert_uint_eq(lease_host_backend_locked(&be), 1 * MiB);
    lease_service_destroy(svc);
    ck_assert_uint_eq(lease_host_backend_locked(&be), 0);
    lease_backend_fini(&be);
}
END_TEST

/* ---- peer death and teardown --------------------------------------------- */

START_TEST(client_drop_reclaims_everything_after_work_drains)
{
    struct lease_backend be;
    ck_assert_int_eq(lease_host_backend_init(&be, &why), 0);
    struct lease_service *svc = new_svc(&be, 2 * MiB, 1 * MiB);
    int fds0 = count_fds();
    uint64_t vm0 = vm_locked_kib();
    struct lease_stats base = stats(svc);

    struct lease_client_id a = new_client(svc);
    struct lease_client_id b = new_client(svc);
    int fd_p, fd_m, fd_s, fd_b;
    struct lt_segment_id ap = add_seg(svc, a, 1 * MiB, PINNED, 55, &fd_p);
    struct lt_segment_id am = add_seg(svc, a, 512 * KiB, MAPPED, 56, &fd_m);
    struct lt_segment_id as = add_seg(svc, a, 256 * KiB, STAGED, 57, &fd_s);
    struct lt_segment_id bp = add_seg(svc, b, 512 * KiB, PINNED, 58, &fd_b);
    struct lt_lease_id l1 = must_grant(svc, a, ap, 0, 64 * KiB, PINNED);
    must_grant(svc, a, ap, 64 * KiB, 64 * KiB, STAGED);
    struct lt_lease_id l3 = must_grant(svc, a, am, 0, 4096, MAPPED);
    must_grant(svc, a, as, 0, 4096, STAGED);
    struct lt_lease_id lb = must_grant(svc, b, bp, 0, 4096, PINNED);
    struct lease_ticket t1, t3, tb;
    ck_assert_int_eq(lease_work_pin(svc, a, l1, &t1, &why), 0);
    ck_assert_int_eq(lease_work_pin(svc, a, l3, &t3, &why), 0);
    ck_assert_int_eq(lease_work_pin(svc, b, lb, &tb, &why), 0);
    ck_assert_int_eq(count_fds(), fds0 + 4);

    /* Two leases still have GPU work in flight. */
    ck_assert_int_eq(lease_client_drop(svc, a, &why), 2);
    ck_assert_uint_eq(rec.drained, 0);
    ck_assert_uint_eq(completions(), 0);
    struct lease_grant_result r;
    assert_error(grant1(svc, a, ap, 0, 4096, PINNED, 0, &r), -ESHUTDOWN, "being dropped");
    assert_error(lease_client_drop(svc, a, &why), -EALREADY, "already being dropped");
    struct lease_client_stats cs;
    ck_assert_int_eq(lease_client_stats(svc, a, &cs, &why), 0);
    ck_assert_uint_eq(cs.dropping, 1);
    ck_assert_uint_eq(cs.leases, 2);
    /* Memory still pinned and mapped while the GPU may read it. */
    ck_assert(fd_open(fd_p) && fd_open(fd_m) && fd_open(fd_s));
    ck_assert_uint_eq(lease_host_backend_locked(&be), 2 * MiB);

    /* B is unaffected. */
    struct lease_info info;
    ck_assert_int_eq(lease_query(svc, b, lb, &info, &why), 0);
    ck_assert_int_eq(grant1(svc, b, bp, 8192, 4096, PINNED, 0, &r), 0);

    ck_assert_int_eq(lease_work_done(svc, t1, &why), 0);
    ck_assert_uint_eq(rec.drained, 0);
    ck_assert_int_eq(lease_work_done(svc, t3, &why), 0);
    ck_assert_uint_eq(rec.drained, 1);
    ck_assert_uint_eq(rec.last_drained, a.value);
    /* A's releases are not reported: the peer is gone. */
    ck_assert_uint_eq(completions(), 0);
    ck_assert(!fd_open(fd_p) && !fd_open(fd_m) && !fd_open(fd_s));
    ck_assert_int_eq(count_fds(), fds0 + 1);
    ck_assert_uint_eq(lease_host_backend_locked(&be), 512 * KiB);
    assert_error(lease_client_stats(svc, a, &cs, &why), -ESTALE, "dropped");
    assert_error(lease_client_drop(svc, a, &why), -ESTALE, "already dropped");
    struct lease_stats st = stats(svc);
    ck_assert_uint_eq(st.clients, 1);
    ck_assert_uint_eq(st.cls[PINNED].segments, 1);
    ck_assert_uint_eq(st.cls[MAPPED].segments, 0);
    ck_assert_uint_eq(st.cls[STAGED].segments, 0);
    ck_assert_uint_eq(st.cls[PINNED].live_leases, 2);
    ck_assert_uint_eq(st.cls[MAPPED].bytes_registered, 0);

    /* B dies with work pending on one lease, then everything is back to zero. */
    ck_assert_int_eq(lease_client_drop(svc, b, &why), 1);
    ck_assert_int_eq(lease_work_done(svc, tb, &why), 0);
    ck_assert_uint_eq(rec.drained, 2);
    ck_assert_int_eq(count_fds(), fds0);
    ck_assert_uint_eq(vm_locked_kib(), vm0);
    ck_assert_uint_eq(lease_host_backend_locked(&be), 0);
    st = stats(svc);
    ck_assert_uint_eq(st.clients, base.clients);
    ck_assert_uint_eq(st.pending_work, 0);
    ck_assert_uint_eq(st.draining_leases, 0);
    for (int k = STAGED; k <= MAPPED; k++) {
        ck_assert_uint_eq(st.cls[k].segments, base.cls[k].segments);
        ck_assert_uint_eq(st.cls[k].bytes_registered, 0);
        ck_assert_uint_eq(st.cls[k].live_leases, 0);
        ck_assert_uint_eq(st.cls[k].bytes_leased, 0);
        ck_assert_uint_eq(st.cls[k].registrations, st.cls[k].unregistrations);
    }
    lease_service_destroy(svc);
    lease_backend_fini(&be);
}
END_TEST

START_TEST(client_drop_with_nothing_pending_drains_at_once)
{
    struct lease_backend be = fake_backend(0);
    struct lease_service *svc = new_svc(&be, 2 * MiB, 0);
    int fds0 = count_fds();
    struct lease_client_id c = new_client(svc);
    struct lt_segment_id s = add_seg(svc, c, 1 * MiB, PINNED, 59, NULL);
    must_grant(svc, c, s, 0, 4096, PINNED);
    ck_assert_int_eq(lease_client_drop(svc, c, &why), 0);
    ck_assert_uint_eq(rec.drained, 1);
    ck_assert_int_eq(count_fds(), fds0);
    ck_assert_uint_eq(fake.live, 0);
    assert_error(lease_client_drop(svc, client_plus(c, 1ull << 32), &why), -ENOENT, "never issued");
    /* The slot is reused with a new generation; the old id stays dead. */
    struct lease_client_id c2 = new_client(svc);
    ck_assert_uint_eq((uint32_t)c2.value, (uint32_t)c.value);
    struct lt_segment_id id;
    int fd = make_memfd(1 * MiB, GOOD_SEALS, 60);
    assert_error(lease_segment_add(svc, c, fd, 1 * MiB, PINNED, &id, &why), -ESTALE, "dropped");
    ck_assert(fd_open(fd));
    close(fd);
    lease_service_destroy(svc);
}
END_TEST

START_TEST(destroy_unregisters_unmaps_and_closes_everything)
{
    struct lease_backend be;
    ck_assert_int_eq(lease_host_backend_init(&be, &why), 0);
    int fds0 = count_fds();
    uint64_t vm0 = vm_locked_kib();
    struct lease_service *svc = new_svc(&be, 2 * MiB, 1 * MiB);
    struct lease_client_id c = new_client(svc);
    struct lt_segment_id p = add_seg(svc, c, 1 * MiB, PINNED, 61, NULL);
    struct lt_segment_id m = add_seg(svc, c, 1 * MiB, MAPPED, 62, NULL);
    add_seg(svc, c, 1 * MiB, STAGED, 63, NULL);
    struct lt_lease_id l = must_grant(svc, c, p, 0, 4096, PINNED);
    must_grant(svc, c, m, 0, 4096, MAPPED);
    struct lease_ticket t;
    ck_assert_int_eq(lease_work_pin(svc, c, l, &t, &why), 0);
    ck_assert_int_eq(count_fds(), fds0 + 3);
    lease_service_destroy(svc);
    ck_assert_int_eq(count_fds(), fds0);
    ck_assert_uint_eq(vm_locked_kib(), vm0);
    ck_assert_uint_eq(lease_host_backend_locked(&be), 0);
    ck_assert_ptr_nonnull(strstr(rec.last_log, "2 leases not release-complete and 1 GPU work"));
    ck_assert_uint_eq(completions(), 0);
    lease_backend_fini(&be);
}
END_TEST

/* ---- stats ------------------------------------------------------------------ */

START_TEST(stats_text_names_every_class_and_client)
{
    struct lease_backend be = fake_backend(0);
    struct lease_service *svc = new_svc(&be, 2 * MiB, 1 * MiB);
    struct lease_client_id c = new_client(svc);
    struct lt_segment_id s = add_seg(svc, c, 1 * MiB, PINNED, 64, NULL);
    must_grant(svc, c, s, 0, 12288, PINNED);
    char buf[2048];
    int n = lease_stats_format(svc, buf, sizeof(buf));
    ck_assert_int_gt(n, 0);
    ck_assert_uint_eq(strlen(buf), (size_t)n);
    ck_assert_ptr_nonnull(strstr(buf, "clients=1"));
    ck_assert_ptr_nonnull(strstr(buf, "STAGED: segments=0"));
    ck_assert_ptr_nonnull(strstr(buf,
                                 "PINNED: segments=1 (huge 0) registered=1048576/2097152B leases=1 "
                                 "leased=12288B registrations=1"));
    ck_assert_ptr_nonnull(strstr(buf, "MAPPED: segments=0 (huge 0) registered=0/1048576B"));
    char want[64];
    snprintf(want, sizeof(want), "client %#" PRIx64 ": leases=1 bytes=12288 segments=1", c.value);
    ck_assert_ptr_nonnull(strstr(buf, want));
    /* Truncation: terminated, and the full length is still reported. */
    char small[16];
    memset(small, 'x', sizeof(small));
    ck_assert_int_eq(lease_stats_format(svc, small, sizeof(small)), n);
    ck_assert_uint_eq(strlen(small), sizeof(small) - 1);
    ck_assert(strncmp(small, buf, sizeof(small) - 1) == 0);
    ck_assert_int_eq(lease_stats_format(svc, NULL, 0), n);
    lease_service_destroy(svc);
}
END_TEST

/* ---- threads ---------------------------------------------------------------- */

#define NSEGS 5
#define NTHREADS 4
#define ITERS 1500

struct shared {
    struct lease_service *svc;
    struct lease_client_id client;
    struct lt_segment_id seg[NSEGS];
    enum lt_class cls[NSEGS];
    uint8_t *ref[NSEGS];
    pthread_mutex_t mu;
    uint64_t grants;
    uint64_t fallbacks;
    uint64_t failures;
    char first_failure[512];
    uint64_t churn_drops;
};

static void fail_once(struct shared *sh, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void fail_once(struct shared *sh, const char *fmt, ...)
{
    pthread_mutex_lock(&sh->mu);
    if (sh->failures++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(sh->first_failure, sizeof(sh->first_failure), fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&sh->mu);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

struct worker {
    struct shared *sh;
    uint64_t seed;
};

/* The words of the first refused entry of @r[0..n), or of the batch. */
static const char *first_refusal(const struct lease_grant_result *r, size_t n,
                                 const struct lt_failure *batch)
{
    for (size_t i = 0; i < n; i++)
        if (r[i].rc < 0)
            return r[i].why.message;
    return batch->message;
}

/* The threads keep their own failures: the shared `why` is the main thread's. */
static void *grant_release_worker(void *arg)
{
    struct worker *w = arg;
    struct shared *sh = w->sh;
    uint64_t s = w->seed;
    uint64_t grants = 0, fallbacks = 0;
    struct lt_failure tw = {0};
    for (int it = 0; it < ITERS; it++) {
        struct lease_grant_req q[8];
        struct lease_grant_result r[8];
        size_t n = 1 + xorshift(&s) % 8;
        for (size_t i = 0; i < n; i++) {
            int k = (int)(xorshift(&s) % NSEGS);
            uint64_t off = (xorshift(&s) % 250) * 4096;
            uint64_t len = 1 + xorshift(&s) % (24 * KiB);
            q[i] = (struct lease_grant_req){sh->seg[k], off, len,
                                            (uint32_t)(1 + xorshift(&s) % sh->cls[k]),
                                            LEASE_GRANT_ALLOW_STAGED};
        }
        int got = lease_grant(sh->svc, sh->client, n, q, r, &tw);
        if (got != (int)n) {
            fail_once(sh, "grant: %d of %zu (%s)", got, n, first_refusal(r, got < 0 ? 0 : n, &tw));
            continue;
        }
        struct lt_lease_id ids[8];
        struct lease_ticket tickets[8];
        size_t nt = 0;
        for (size_t i = 0; i < n; i++) {
            int k = 0;
            while (!lt_segment_id_eq(sh->seg[k], q[i].segment))
                k++;
            size_t cmp = q[i].length < 256 ? q[i].length : 256;
            if (memcmp(r[i].host_addr, sh->ref[k] + q[i].offset, cmp) != 0)
                fail_once(sh, "lease %#" PRIx64 ": bytes differ from the daemon's", L(r[i].lease));
            if (r[i].cls == MAPPED && r[i].dev_ptr == 0)
                fail_once(sh, "MAPPED lease without a device pointer");
            fallbacks += r[i].fell_back;
            ids[i] = r[i].lease;
            if (xorshift(&s) % 3 == 0 &&
                lease_work_pin(sh->svc, sh->client, ids[i], &tickets[nt], &tw) == 0)
                nt++;
        }
        grants += n;
        struct lease_release_result rr[8];
        if (lease_release(sh->svc, sh->client, n, ids, rr, &tw) != (int)n)
            fail_once(sh, "release refused: %s", tw.message);
        while (nt > 0)
            if (lease_work_done(sh->svc, tickets[--nt], &tw) != 0)
                fail_once(sh, "work_done refused: %s", tw.message);
    }
    pthread_mutex_lock(&sh->mu);
    sh->grants += grants;
    sh->fallbacks += fallbacks;
    pthread_mutex_unlock(&sh->mu);
    return NULL;
}

/* Another peer comes and dies over and over, with work in flight. */
static void *churn_worker(void *arg)
{
    struct worker *w = arg;
    struct shared *sh = w->sh;
    struct lt_failure tw = {0};
    for (int it = 0; it < 60; it++) {
        struct lease_client_id c;
        if (lease_client_add(sh->svc, NULL, &c, &tw) != 0) {
            fail_once(sh, "client_add: %s", tw.message);
            continue;
        }
        int fd = make_memfd(256 * KiB, GOOD_SEALS, 1000 + (uint64_t)it);
        struct lt_segment_id seg;
        enum lt_class cls = it % 2 ? PINNED : STAGED;
        int rc = lease_segment_add(sh->svc, c, fd, 256 * KiB, cls, &seg, &tw);
        struct lease_ticket ticket = {0};
        if (rc == 0) {
            struct lease_grant_req q = {seg, 4096, 8192, cls, LEASE_GRANT_ALLOW_STAGED};
            struct lease_grant_result r;
            if (lease_grant(sh->svc, c, 1, &q, &r, &tw) != 1 ||
                lease_work_pin(sh->svc, c, r.lease, &ticket, &tw) != 0)
                fail_once(sh, "churn grant: %s", first_refusal(&r, 1, &tw));
        } else {
            close(fd);
            if (rc != -ENOSPC)
                fail_once(sh, "churn segment_add: %d %s", rc, tw.message);
        }
        int waiting = lease_client_drop(sh->svc, c, &tw);
        if (waiting != (ticket.value ? 1 : 0))
            fail_once(sh, "churn drop: %d waiting", waiting);
        if (ticket.value && lease_work_done(sh->svc, ticket, &tw) != 0)
            fail_once(sh, "churn work_done: %s", tw.message);
        sh->churn_drops++;
    }
    return NULL;
}

START_TEST(concurrent_grants_and_releases_keep_the_invariants)
{
    struct lease_backend be = fake_backend(0);
    /* Tight budgets so evictions and fallbacks race with grants. */
    struct lease_service *svc = new_svc(&be, 2 * MiB, 1 * MiB);
    int fds0 = count_fds();
    rec.cap = NTHREADS * ITERS * 8;
    rec.ids = calloc(rec.cap, sizeof(uint64_t));
    ck_assert_ptr_nonnull(rec.ids);
    struct shared sh = {.svc = svc, .mu = PTHREAD_MUTEX_INITIALIZER};
    sh.client = new_client(svc);
    enum lt_class cls[NSEGS] = {PINNED, PINNED, PINNED, MAPPED, STAGED};
    for (int k = 0; k < NSEGS; k++) {
        sh.cls[k] = cls[k];
        sh.seg[k] = add_seg(svc, sh.client, 1 * MiB, cls[k], 100 + (uint64_t)k, NULL);
        sh.ref[k] = ref_data(1 * MiB, 100 + (uint64_t)k);
    }
    pthread_t th[NTHREADS + 1];
    struct worker w[NTHREADS + 1];
    for (int i = 0; i < NTHREADS; i++) {
        w[i] = (struct worker){&sh, 0x1234567ull + (uint64_t)i * 7919};
        ck_assert_int_eq(pthread_create(&th[i], NULL, grant_release_worker, &w[i]), 0);
    }
    w[NTHREADS] = (struct worker){&sh, 1};
    ck_assert_int_eq(pthread_create(&th[NTHREADS], NULL, churn_worker, &w[NTHREADS]), 0);
    for (int i = 0; i <= NTHREADS; i++)
        pthread_join(th[i], NULL);
    ck_assert_msg(sh.failures == 0, "%" PRIu64 " failures, first: %s", sh.failures,
                  sh.first_failure);

    /* Every grant completed exactly once, ids never reused. */
    ck_assert_uint_eq(rec.completions, sh.grants);
    ck_assert_uint_le(rec.completions, rec.cap);
    qsort(rec.ids, rec.completions, sizeof(uint64_t), cmp_u64);
    for (uint64_t i = 1; i < rec.completions; i++)
        ck_assert_uint_ne(rec.ids[i - 1], rec.ids[i]);
    ck_assert_uint_eq(rec.drained, sh.churn_drops);

    struct lease_stats st = stats(svc);
    ck_assert_uint_eq(st.clients, 1);
    ck_assert_uint_eq(st.pending_work, 0);
    ck_assert_uint_eq(st.draining_leases, 0);
    uint64_t registered = 0, fallbacks = 0;
    for (int k = STAGED; k <= MAPPED; k++) {
        ck_assert_uint_eq(st.cls[k].live_leases, 0);
        ck_assert_uint_eq(st.cls[k].bytes_leased, 0);
        ck_assert_uint_le(st.cls[k].bytes_registered, st.cls[k].budget);
        registered += st.cls[k].bytes_registered;
        fallbacks += st.cls[k].fallbacks;
    }
    ck_assert_uint_ge(fallbacks, sh.fallbacks);
    /* What the fake holds is exactly what the stats say is registered. */
    ck_assert_uint_eq(fake.live * 1 * MiB, registered);
    struct lease_client_stats cs;
    ck_assert_int_eq(lease_client_stats(svc, sh.client, &cs, &why), 0);
    ck_assert_uint_eq(cs.leases, 0);
    ck_assert_uint_eq(cs.bytes, 0);
    ck_assert_uint_eq(cs.segments, NSEGS);
    char text[2048];
    ck_assert_int_gt(lease_stats_format(svc, text, sizeof(text)), 0);
    lease_service_destroy(svc);
    ck_assert_uint_eq(fake.live, 0);
    ck_assert_uint_eq(fake.regs, fake.unregs);
    ck_assert_int_eq(count_fds(), fds0);
    for (int k = 0; k < NSEGS; k++)
        free(sh.ref[k]);
    free(rec.ids);
}
END_TEST

/* ---- segment queries and holds (doorbell and done words) ------------------ */

START_TEST(segment_query_reports_class_registration_and_the_chunks_device_pointer)
{
    struct lease_backend be = fake_backend(256 * KiB);
    struct lease_service *svc = new_svc(&be, 4 * MiB, 4 * MiB);
    struct lease_client_id c = new_client(svc);
    struct lease_client_id other = new_client(svc);
    struct lt_segment_id m = add_seg(svc, c, 1 * MiB, MAPPED, 71, NULL);
    struct lt_segment_id p = add_seg(svc, c, 512 * KiB, PINNED, 72, NULL);
    struct lt_segment_id st = add_seg(svc, c, 64 * KiB, STAGED, 73, NULL);
    struct lease_segment_info in;
    ck_assert_int_eq(lease_segment_query(svc, c, m, 300 * KiB + 8, &in, &why), 0);
    ck_assert_uint_eq(in.size, 1 * MiB);
    ck_assert_uint_eq(in.cls, MAPPED);
    ck_assert_uint_eq(in.registered, 1);
    ck_assert_uint_eq(in.chunk_bytes, 256 * KiB);
    ck_assert_ptr_eq(in.host_base, fake.ops[0].base);
    /* Chunk 1 is the fake's second registration: its own device pointer. */
    ck_assert_uint_eq(in.dev_ptr, 0x100000000000ull + 2 * (1ull << 30) + 44 * KiB + 8);
    ck_assert_uint_eq(in.leases, 0);
    ck_assert_uint_eq(in.holds, 0);
    /* The host address and the lease's agree. */
    struct lt_lease_id l = must_grant(svc, c, m, 300 * KiB, 4096, MAPPED);
    struct lease_info li;
    ck_assert_int_eq(lease_query(svc, c, l, &li, &why), 0);
    ck_assert_ptr_eq(li.host_addr, (char *)in.host_base + 300 * KiB);
    ck_assert_uint_eq(li.dev_ptr + 8, in.dev_ptr);
    ck_assert_int_eq(lease_segment_query(svc, c, m, 0, &in, &why), 0);
    ck_assert_uint_eq(in.leases, 1);
    /* PINNED: registered, no device pointer; STAGED: neither. */
    ck_assert_int_eq(lease_segment_query(svc, c, p, 4096, &in, &why), 0);
    ck_assert_uint_eq(in.cls, PINNED);
    ck_assert_uint_eq(in.registered, 1);
    ck_assert_uint_eq(in.dev_ptr, 0);
    ck_assert_int_eq(lease_segment_query(svc, c, st, 0, &in, &why), 0);
    ck_assert_uint_eq(in.cls, STAGED);
    ck_assert_uint_eq(in.registered, 0);
    ck_assert_uint_eq(in.dev_ptr, 0);
    /* Refusals. */
    assert_error(lease_segment_query(svc, c, m, 1 * MiB, &in, &why), -ERANGE,
                 "end <= 1048576");
    assert_error(lease_segment_query(svc, other, m, 0, &in, &why), -EPERM, "another client");
    assert_error(lease_segment_query(svc, c, lt_segment_id_make(m.slot, m.gen + 5), 0, &in, &why),
                 -ENOENT, "never issued");
    assert_error(lease_segment_query(svc, c, m, 0, NULL, &why), -EINVAL, "output pointer");
    lease_service_destroy(svc);
}
END_TEST

/* A strict service leases an unsealed MAPPED segment only with
 * LEASE_GRANT_ALLOW_WORDS, and marks that lease words-only: its client can
 * free the pages, so the agent takes it as a ring's words, never as data.
 * A sealed segment's lease is never words-only, with the flag or without,
 * nor is an unsealed one's under legacy seals (leasable there). */
START_TEST(an_unsealed_mapped_lease_is_words_only)
{
    struct lease_backend be = fake_backend(0);
    struct lease_service *svc = new_svc(&be, 0, 4 * MiB);
    struct lease_client_id c = new_client(svc);
    int fd = make_memfd(1 * MiB, OLD_SEALS, 81);
    struct lt_segment_id u = {0, 0};
    ck_assert_int_eq(lease_segment_add(svc, c, fd, 1 * MiB, MAPPED, &u, &why), 0);
    struct lt_segment_id s = add_seg(svc, c, 1 * MiB, MAPPED, 82, NULL);
    struct lease_grant_result r;
    assert_refused(grant1(svc, c, u, 0, 4096, MAPPED, 0, &r), -EPERM, LT_E_SEGMENT_UNSEALED,
                   "lacks F_SEAL_FUTURE_WRITE: words only");
    ck_assert_int_eq(grant1(svc, c, u, 0, 4096, MAPPED, LEASE_GRANT_ALLOW_WORDS, &r), 0);
    struct lease_info li;
    ck_assert_int_eq(lease_query(svc, c, r.lease, &li, &why), 0);
    ck_assert_uint_eq(li.words_only, 1);
    ck_assert_uint_eq(li.writable, 1);
    ck_assert_int_eq(release1(svc, c, r.lease), 0);
    ck_assert_int_eq(grant1(svc, c, s, 0, 4096, MAPPED, LEASE_GRANT_ALLOW_WORDS, &r), 0);
    ck_assert_int_eq(lease_query(svc, c, r.lease, &li, &why), 0);
    ck_assert_uint_eq(li.words_only, 0);
    ck_assert_uint_eq(li.writable, 0);
    ck_assert_int_eq(grant1(svc, c, s, 4096, 4096, MAPPED, 0, &r), 0);
    ck_assert_int_eq(lease_query(svc, c, r.lease, &li, &why), 0);
    ck_assert_uint_eq(li.words_only, 0);
    lease_service_destroy(svc);

    struct lease_service_config cfg = config(0, 4 * MiB);
    cfg.seals = LEASE_SEALS_LEGACY;
    be = fake_backend(0);
    ck_assert_int_eq(lease_service_create(&cfg, &be, &svc, &why), 0);
    c = new_client(svc);
    fd = make_memfd(1 * MiB, OLD_SEALS, 83);
    ck_assert_int_eq(lease_segment_add(svc, c, fd, 1 * MiB, MAPPED, &u, &why), 0);
    ck_assert_int_eq(grant1(svc, c, u, 0, 4096, MAPPED, LEASE_GRANT_ALLOW_WORDS, &r), 0);
    ck_assert_int_eq(lease_query(svc, c, r.lease, &li, &why), 0);
    ck_assert_uint_eq(li.words_only, 0);
    ck_assert_uint_eq(li.writable, 1);
    lease_service_destroy(svc);
}
END_TEST

START_TEST(held_segment_is_never_evicted_or_removed_and_is_reregistered_when_needed)
{
    struct lease_backend be = fake_backend(0);
    struct lease_service *svc = new_svc(&be, 0, 2 * MiB);
    struct lease_client_id c = new_client(svc);
    struct lt_segment_id a = add_seg(svc, c, 1 * MiB, MAPPED, 74, NULL);
    struct lt_segment_id b = add_seg(svc, c, 1 * MiB, MAPPED, 75, NULL);
    void *base_b = fake.ops[1].base;
    struct lease_segment_info in;
    ck_assert_int_eq(lease_segment_hold(svc, c, a, 64, 8, &in, &why), 0);
    ck_assert_uint_eq(in.holds, 1);
    ck_assert_uint_ne(in.dev_ptr, 0);
    uint64_t dev_a = in.dev_ptr;
    /* A is least recently used by age, but held: B is evicted instead. */
    struct lt_segment_id cseg = add_seg(svc, c, 1 * MiB, MAPPED, 76, NULL);
    ck_assert_int_eq(fake.ops[2].op, 'U');
    ck_assert_ptr_eq(fake.ops[2].base, base_b);
    ck_assert_int_eq(lease_segment_query(svc, c, b, 0, &in, &why), 0);
    ck_assert_uint_eq(in.registered, 0);
    ck_assert_uint_eq(in.dev_ptr, 0);
    assert_error(lease_segment_remove(svc, c, a, &why), -EBUSY, "held by 1 GPU operations");
    /* With A and C both held nothing is evictable: holding B is refused. */
    ck_assert_int_eq(lease_segment_hold(svc, c, cseg, 0, 8, &in, &why), 0);
    assert_error(lease_segment_hold(svc, c, b, 0, 8, &in, &why), -ENOSPC, "(0 idle)");
    ck_assert_uint_eq(stats(svc).cls[MAPPED].budget_refusals, 1);
    /* C unheld: holding B evicts C and registers B again, with a fresh pointer. */
    ck_assert_int_eq(lease_segment_unhold(svc, cseg, &why), 0);
    uint64_t regs = fake.regs;
    ck_assert_int_eq(lease_segment_hold(svc, c, b, 4096, 8, &in, &why), 0);
    ck_assert_uint_eq(fake.regs, regs + 1);
    ck_assert_uint_eq(in.registered, 1);
    ck_assert_uint_eq(in.dev_ptr, 0x100000000000ull + fake.regs * (1ull << 30) + 4096);
    ck_assert_int_eq(lease_segment_query(svc, c, a, 64, &in, &why), 0);
    ck_assert_uint_eq(in.dev_ptr, dev_a);
    /* Range checks, and undoing more holds than taken. */
    assert_error(lease_segment_hold(svc, c, a, 1 * MiB - 4, 8, &in, &why), -ERANGE,
                 "segment range");
    ck_assert_int_eq(lease_segment_unhold(svc, a, &why), 0);
    assert_error(lease_segment_unhold(svc, a, &why), -EALREADY, "no hold");
    assert_error(lease_segment_unhold(svc, lt_segment_id_make(a.slot, a.gen + 5), &why), -ENOENT,
                 "never issued");
    ck_assert_int_eq(lease_segment_remove(svc, c, a, &why), 0);
    assert_error(lease_segment_unhold(svc, a, &why), -ESTALE, "stale");
    ck_assert_int_eq(lease_segment_unhold(svc, b, &why), 0);
    lease_service_destroy(svc);
    ck_assert_uint_eq(fake.live, 0);
}
END_TEST

START_TEST(holds_never_span_a_registration_chunk)
{
    struct lease_backend be = fake_backend(256 * KiB);
    struct lease_service *svc = new_svc(&be, 0, 2 * MiB);
    struct lease_client_id c = new_client(svc);
    struct lt_segment_id m = add_seg(svc, c, 1 * MiB, MAPPED, 77, NULL);
    struct lease_segment_info in;
    assert_error(lease_segment_hold(svc, c, m, 256 * KiB - 8, 16, &in, &why), -EINVAL,
                 "spans a chunk boundary (chunks of 262144)");
    ck_assert_int_eq(lease_segment_hold(svc, c, m, 256 * KiB - 8, 8, &in, &why), 0);
    ck_assert_uint_eq(in.dev_ptr, 0x100000000000ull + 1 * (1ull << 30) + 256 * KiB - 8);
    ck_assert_int_eq(lease_segment_hold(svc, c, m, 256 * KiB, 8, &in, &why), 0);
    ck_assert_uint_eq(in.dev_ptr, 0x100000000000ull + 2 * (1ull << 30));
    ck_assert_uint_eq(in.holds, 2);
    ck_assert_int_eq(lease_segment_unhold(svc, m, &why), 0);
    ck_assert_int_eq(lease_segment_unhold(svc, m, &why), 0);
    lease_service_destroy(svc);
}
END_TEST

START_TEST(dropped_client_drains_only_after_its_last_hold)
{
    struct lease_backend be = fake_backend(0);
    struct lease_service *svc = new_svc(&be, 1 * MiB, 1 * MiB);
    int fds0 = count_fds();
    struct lease_client_id c = new_client(svc);
    int fd_m = -1, fd_p = -1;
    struct lt_segment_id m = add_seg(svc, c, 1 * MiB, MAPPED, 78, &fd_m);
    struct lt_segment_id p = add_seg(svc, c, 1 * MiB, PINNED, 79, &fd_p);
    must_grant(svc, c, p, 0, 4096, PINNED);
    struct lease_segment_info in;
    ck_assert_int_eq(lease_segment_hold(svc, c, m, 8, 8, &in, &why), 0);
    ck_assert_int_eq(lease_segment_hold(svc, c, m, 16, 8, &in, &why), 0);
    /* No lease waits for work, but the GPU may still touch the words. */
    ck_assert_int_eq(lease_client_drop(svc, c, &why), 0);
    ck_assert_uint_eq(rec.drained, 0);
    ck_assert(fd_open(fd_m) && fd_open(fd_p));
    ck_assert_uint_eq(fake.live, 2);
    assert_error(lease_segment_hold(svc, c, m, 8, 8, &in, &why), -ESHUTDOWN, "being dropped");
    ck_assert_int_eq(lease_segment_unhold(svc, m, &why), 0);
    ck_assert_uint_eq(rec.drained, 0);
    ck_assert_int_eq(lease_segment_unhold(svc, m, &why), 0);
    ck_assert_uint_eq(rec.drained, 1);
    ck_assert_uint_eq(rec.last_drained, c.value);
    ck_assert(!fd_open(fd_m) && !fd_open(fd_p));
    ck_assert_uint_eq(fake.live, 0);
    ck_assert_int_eq(count_fds(), fds0);
    lease_service_destroy(svc);
}
END_TEST

static Suite *lease_suite(void)
{
    Suite *s = suite_create("lease");
    TCase *tc = tcase_create("leases");
    tcase_add_test(tc, grant_exposes_daemon_bytes_and_release_completes_once);
    tcase_add_test(tc, release_with_pending_work_completes_after_last_work_done);
    tcase_add_test(tc, stale_lease_id_is_refused_after_its_slot_is_reused);
    tcase_add_test(tc, foreign_lease_and_segment_ids_are_refused);
    tcase_add_test(tc, double_release_is_refused_before_and_after_completion);
    tcase_add_test(tc, ids_never_issued_are_refused);
    tcase_add_test(tc, out_of_range_and_overflowing_ranges_are_refused);
    tcase_add_test(tc, class_must_not_exceed_the_segments);
    tcase_add_test(tc, per_client_limits_are_enforced);
    tcase_add_test(tc, mapped_leases_get_per_chunk_device_pointers_and_never_span_chunks);
    tcase_add_test(tc, registration_is_cached_across_leases);
    suite_add_tcase(s, tc);

    tc = tcase_create("segments");
    tcase_add_test(tc, wrong_kinds_of_fd_are_refused_and_left_open);
    tcase_add_test(tc, segment_ids_are_generation_checked_and_remove_closes_the_fd);
    tcase_add_test(tc, backend_failure_leaves_the_fd_with_the_caller);
    tcase_add_test(tc, a_silent_backend_failure_still_carries_a_code_and_words);
    tcase_add_test(tc, registration_finds_the_page_tables_populated_and_the_bytes_unchanged);
    suite_add_tcase(s, tc);

    tc = tcase_create("budgets");
    tcase_add_test(tc, budget_exhaustion_is_refused_with_the_numbers);
    tcase_add_test(tc, lru_unregisters_the_least_recently_used_idle_segment);
    tcase_add_test(tc, lru_order_follows_use_not_age);
    tcase_add_test(tc, segments_with_leases_or_pending_work_are_never_evicted);
    tcase_add_test(tc, fallback_to_staged_when_the_client_allows_it);
    tcase_add_test(tc, an_eviction_in_flight_counts_against_the_budget_and_blocks_no_one);
    tcase_add_test(tc, a_segment_removed_or_a_service_destroyed_mid_eviction_is_unmapped_after_it);
    tcase_add_test(tc, a_refusal_is_written_only_on_failure_and_logged_once);
    suite_add_tcase(s, tc);

    tc = tcase_create("host_backend");
    tcase_add_test(tc, impossible_budgets_are_refused_at_creation);
    tcase_add_test(tc, registration_over_rlimit_memlock_is_refused_with_the_numbers);
    tcase_add_test(tc, rlimit_refusal_at_grant_falls_back_to_staged_when_allowed);
    suite_add_tcase(s, tc);

    tc = tcase_create("peer_death");
    tcase_add_test(tc, client_drop_reclaims_everything_after_work_drains);
    tcase_add_test(tc, client_drop_with_nothing_pending_drains_at_once);
    tcase_add_test(tc, destroy_unregisters_unmaps_and_closes_everything);
    suite_add_tcase(s, tc);

    tc = tcase_create("segment_holds");
    tcase_add_test(tc, segment_query_reports_class_registration_and_the_chunks_device_pointer);
    tcase_add_test(tc, held_segment_is_never_evicted_or_removed_and_is_reregistered_when_needed);
    tcase_add_test(tc, holds_never_span_a_registration_chunk);
    tcase_add_test(tc, dropped_client_drains_only_after_its_last_hold);
    tcase_add_test(tc, an_unsealed_mapped_lease_is_words_only);
    suite_add_tcase(s, tc);

    tc = tcase_create("stats_and_threads");
    tcase_add_test(tc, stats_text_names_every_class_and_client);
    tcase_add_test(tc, concurrent_grants_and_releases_keep_the_invariants);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(lease_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
