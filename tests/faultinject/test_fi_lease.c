/* Fault injection into the lease service, in-process over the host backend
 * (docs/reliability.md): for every N, the Nth allocation, mmap or fcntl of
 * the agent side's offer (lease_segment_add), grant, submit (work pin,
 * doorbell hold) and release paths (two-phase release, a dropped client's
 * drain) fails. Each run must end in an error return or a completed path,
 * the service's tables must stay consistent (lease_service_check), a fresh
 * client must then run the whole path on the same service, and nothing may
 * leak: fds, mappings, heap (LeakSanitizer in the sanitizer build). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fi.h"
#include "fi_run.h"
#include "lease/check.h"
#include "lease/lease.h"

#define SEG_BYTES (64u << 10)
/* What the default (strict) service wants of a leasable segment. */
#define GOOD_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL | F_SEAL_FUTURE_WRITE)

/* The segments every run offers (dup'ed each time): STAGED, PINNED, MAPPED. */
static int memfds[4];
static int released, drained;

static void on_release(void *arg, struct lease_client_id client, struct lt_lease_id lease)
{
    (void)arg;
    (void)client;
    (void)lease;
    released++;
}

static void on_drained(void *arg, struct lease_client_id client)
{
    (void)arg;
    (void)client;
    drained++;
}

static void quiet(void *ctx, int level, const char *subsys, const char *line)
{
    (void)ctx;
    (void)level;
    (void)subsys;
    (void)line;
}

static void memfds_make(void)
{
    for (int i = 0; i < 4; i++) {
        memfds[i] = memfd_create("fi-lease", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        ck_assert_int_ge(memfds[i], 0);
        ck_assert_int_eq(ftruncate(memfds[i], SEG_BYTES), 0);
        ck_assert_int_eq(fcntl(memfds[i], F_ADD_SEALS, GOOD_SEALS), 0);
    }
}

static void memfds_close(void)
{
    for (int i = 0; i < 4; i++)
        close(memfds[i]);
}

/* Offers memfd @which as @cls; the fd is the service's only on success. */
static int offer(struct lease_service *svc, struct lease_client_id c, int which, enum lt_class cls,
                 struct lt_segment_id *seg_p)
{
    int fd = fcntl(memfds[which], F_DUPFD_CLOEXEC, 3);
    if (fd < 0)
        return -errno;
    int rc = lease_segment_add(svc, c, fd, SEG_BYTES, cls, seg_p, NULL);
    if (rc < 0)
        close(fd);
    return rc;
}

/* One client's whole life: offers, a batch grant, a submit's pin and
 * doorbell hold, the two-phase release, removal; then a second client that
 * dies with work in flight. Returns 0 or the first error. */
static int client_path(struct lease_service *svc)
{
    struct lease_client_id c;
    struct lt_segment_id seg[3];
    int rc = lease_client_add(svc, NULL, &c, NULL);
    if (rc < 0)
        return rc;
    static const enum lt_class cls[3] = {LT_CLASS_STAGED, LT_CLASS_PINNED, LT_CLASS_MAPPED};
    int nseg = 0;
    for (; nseg < 3; nseg++)
        if ((rc = offer(svc, c, nseg, cls[nseg], &seg[nseg])) < 0)
            goto drop;
    struct lease_grant_req req[4] = {
        {.segment = seg[1], .offset = 0, .length = 16384, .cls = LT_CLASS_PINNED},
        {.segment = seg[2], .offset = 4096, .length = 4096, .cls = LT_CLASS_MAPPED},
        {.segment = seg[0], .offset = 0, .length = 4096, .cls = LT_CLASS_STAGED},
        {.segment = seg[2], .offset = 8192, .length = 4096, .cls = LT_CLASS_PINNED,
         .flags = LEASE_GRANT_ALLOW_STAGED},
    };
    struct lease_grant_result res[4];
    int granted = lease_grant(svc, c, 4, req, res, NULL);
    if (granted < 0) {
        rc = granted;
        goto drop;
    }
    struct lt_lease_id ids[4];
    int n = 0;
    for (int i = 0; i < 4; i++) {
        if (res[i].rc < 0 && rc == 0)
            rc = res[i].rc;
        if (res[i].rc == 0)
            ids[n++] = res[i].lease;
    }
    struct lease_ticket t = {0};
    struct lease_segment_info info;
    int pinned = -1, held = -1;
    if (rc == 0)
        rc = pinned = lease_work_pin(svc, c, ids[0], &t, NULL);
    if (rc == 0)
        rc = held = lease_segment_hold(svc, c, seg[2], 0, 8, &info, NULL);
    struct lease_release_result rr[4];
    int before = released;
    int r = n ? lease_release(svc, c, (size_t)n, ids, rr, NULL) : 0;
    if (r < 0 && rc == 0)
        rc = r;
    if (pinned == 0 && (r = lease_work_done(svc, t, NULL)) < 0 && rc == 0)
        rc = r;
    if (held == 0 && (r = lease_segment_unhold(svc, seg[2], NULL)) < 0 && rc == 0)
        rc = r;
    if (rc == 0 && released - before != n)
        return -EUCLEAN; /* a release that never completed: a broken promise */
    for (int i = 0; rc == 0 && i < nseg; i++)
        rc = lease_segment_remove(svc, c, seg[i], NULL);
drop:
    r = lease_client_drop(svc, c, NULL);
    if (rc == 0 && r != 0)
        rc = r < 0 ? r : -EUCLEAN;
    if (rc < 0)
        return rc;

    /* Peer death with work in flight: the drain waits for it. */
    int drained_before = drained;
    if ((rc = lease_client_add(svc, NULL, &c, NULL)) < 0)
        return rc;
    struct lt_segment_id s;
    if ((rc = offer(svc, c, 3, LT_CLASS_PINNED, &s)) < 0)
        goto drop2;
    struct lease_grant_req one = {.segment = s, .length = 8192, .cls = LT_CLASS_PINNED};
    struct lease_grant_result res1;
    if ((rc = lease_grant(svc, c, 1, &one, &res1, NULL)) < 0 || (rc = res1.rc) < 0)
        goto drop2;
    if ((rc = lease_work_pin(svc, c, res1.lease, &t, NULL)) < 0)
        goto drop2;
    r = lease_client_drop(svc, c, NULL);
    if (r != 1)
        return r < 0 ? r : -EUCLEAN;
    if ((rc = lease_work_done(svc, t, NULL)) < 0)
        return rc;
    return drained - drained_before == 1 ? 0 : -EUCLEAN;
drop2:
    lease_client_drop(svc, c, NULL);
    return rc;
}

struct lease_ctx {
    struct lease_backend be;
    struct lease_service *svc;
    int result; /* client_path's */
};

static int lease_run(void *arg, char *msg, size_t len)
{
    struct lease_ctx *x = arg;
    memset(&x->be, 0, sizeof x->be);
    x->svc = NULL;
    struct lt_failure why;
    int rc = lease_host_backend_init(&x->be, &why);
    if (rc == 0) {
        struct lease_service_config cfg = {
            .budget_pinned = 1u << 20,
            .budget_mapped = 1u << 20,
            .on_release_complete = on_release,
            .on_client_drained = on_drained,
            .log = {.fn = quiet},
        };
        rc = lease_service_create(&cfg, &x->be, &x->svc, &why);
    }
    if (rc == 0)
        rc = client_path(x->svc);
    x->result = rc;
    if (rc == -EUCLEAN)
        snprintf(msg, len, "a promise of the path broke (a release or drain not completed)");
    else if (rc < 0)
        snprintf(msg, len, "refused: %s", strerror(-rc));
    return rc == 0 ? FI_OK : rc == -EUCLEAN ? -1 : FI_REFUSED;
}

/* After each run: the tables agree, a fresh client runs the whole path on
 * the same service, and everything is freed. */
static int lease_check(void *arg, char *msg, size_t len)
{
    struct lease_ctx *x = arg;
    int rc = 0;
    if (x->svc) {
        if (lease_service_check(x->svc, msg, len) < 0)
            return -1;
        int again = client_path(x->svc);
        if (again < 0) {
            snprintf(msg, len, "after the failure, a fresh client's path fails: %s",
                     strerror(-again));
            rc = -1;
        } else if (lease_service_check(x->svc, msg, len) < 0) {
            rc = -1;
        }
        struct lease_stats st;
        lease_service_stats(x->svc, &st);
        if (rc == 0 && (st.clients || st.pending_work || st.draining_leases)) {
            snprintf(msg, len, "after every client left: %llu clients, %llu work items",
                     (unsigned long long)st.clients, (unsigned long long)st.pending_work);
            rc = -1;
        }
    }
    lease_service_destroy(x->svc);
    x->svc = NULL;
    lease_backend_fini(&x->be);
    return rc;
}

static void run_set(unsigned calls)
{
    memfds_make();
    struct lease_ctx x = {0};
    struct fi_path p = {.name = "lease service", .run = lease_run, .check = lease_check, .ctx = &x};
    struct fi_tally t;
    fi_run_all(&p, calls, 0, &t);
    ck_assert_uint_gt(t.calls, 0);
    memfds_close();
}

START_TEST(every_allocation_of_offer_grant_submit_release_fails_cleanly)
{
    run_set(FI_ALLOC);
}
END_TEST

START_TEST(every_mmap_of_the_paths_fails_cleanly)
{
    run_set(FI_MMAP);
}
END_TEST

START_TEST(every_fcntl_of_the_paths_fails_cleanly)
{
    run_set(FI_FCNTL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fi_lease");
    TCase *tc = tcase_create("paths");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, every_allocation_of_offer_grant_submit_release_fails_cleanly);
    tcase_add_test(tc, every_mmap_of_the_paths_fails_cleanly);
    tcase_add_test(tc, every_fcntl_of_the_paths_fails_cleanly);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
