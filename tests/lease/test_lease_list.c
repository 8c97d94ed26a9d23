/* The lease service's lists (lease/list.c): every live lease and segment
 * once, a page at a time, with the fields leasectl shows; one client's or
 * every client's; a walk that survives entries coming and going. Host
 * backend, small PINNED segments under any RLIMIT_MEMLOCK. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/time.h"
#include "lease/lease.h"

#define KiB 1024ull
/* What the default (strict) service wants of a leasable segment. */
#define GOOD_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL | F_SEAL_FUTURE_WRITE)

static struct lt_failure why;
static struct lease_backend be;
static struct lease_service *svc;

static void setup(void)
{
    ck_assert_int_eq(lease_host_backend_init(&be, &why), 0);
    struct lease_service_config cfg = {.budget_pinned = 256 * KiB, .budget_mapped = 64 * KiB};
    ck_assert_int_eq(lease_service_create(&cfg, &be, &svc, &why), 0);
}

static void teardown(void)
{
    lease_service_destroy(svc);
    lease_backend_fini(&be);
}

static struct lt_segment_id add_seg(struct lease_client_id c, uint64_t size, enum lt_class cls)
{
    int fd = memfd_create("list-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
    ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, GOOD_SEALS), 0);
    struct lt_segment_id id;
    ck_assert_int_eq(lease_segment_add(svc, c, fd, size, cls, &id, &why), 0);
    return id;
}

static struct lt_lease_id grant(struct lease_client_id c, struct lt_segment_id seg, uint64_t off,
                                enum lt_class cls)
{
    struct lease_grant_req q = {.segment = seg, .offset = off, .length = 4 * KiB, .cls = cls};
    struct lease_grant_result r;
    ck_assert_int_eq(lease_grant(svc, c, 1, &q, &r, &why), 1);
    ck_assert_int_eq(r.rc, 0);
    return r.lease;
}

/* Every lease of @c (0: all) through pages of @page; returns the count and
 * checks no lease comes twice. */
static size_t walk_leases(struct lease_client_id c, size_t page, uint64_t *seen, size_t cap)
{
    struct lease_list_lease *out = calloc(page, sizeof *out);
    ck_assert_ptr_nonnull(out);
    uint64_t cursor = 0;
    size_t total = 0, pages = 0;
    do {
        uint64_t next = 12345;
        int n = lease_service_leases_list(svc, c, cursor, out, page, &next);
        ck_assert_int_ge(n, 0);
        ck_assert_uint_le((size_t)n, page);
        if (next != 0)
            ck_assert_uint_eq((size_t)n, page); /* only a full page has a next one */
        for (int i = 0; i < n; i++) {
            uint64_t id = lt_lease_id_to_u64(out[i].lease);
            for (size_t k = 0; k < total; k++)
                ck_assert_uint_ne(seen[k], id);
            ck_assert_uint_lt(total, cap);
            seen[total++] = id;
            if (c.value)
                ck_assert_uint_eq(out[i].client.value, c.value);
        }
        cursor = next;
        pages++;
    } while (cursor != 0);
    ck_assert_uint_ge(pages, 1);
    free(out);
    return total;
}

START_TEST(every_lease_comes_once_through_pages_of_any_size)
{
    struct lease_client_id a, b;
    ck_assert_int_eq(lease_client_add(svc, NULL, &a, &why), 0);
    ck_assert_int_eq(lease_client_add(svc, NULL, &b, &why), 0);
    struct lt_segment_id sa = add_seg(a, 1024 * KiB, LT_CLASS_STAGED);
    struct lt_segment_id sb = add_seg(b, 1024 * KiB, LT_CLASS_STAGED);
    for (int i = 0; i < 200; i++)
        grant(a, sa, (uint64_t)i * 4 * KiB, LT_CLASS_STAGED);
    for (int i = 0; i < 100; i++)
        grant(b, sb, (uint64_t)i * 4 * KiB, LT_CLASS_STAGED);
    uint64_t *seen = calloc(400, sizeof *seen);
    const size_t pages[] = {1, 7, 127, 300, 301, 1000};
    for (size_t p = 0; p < sizeof pages / sizeof pages[0]; p++) {
        ck_assert_uint_eq(walk_leases((struct lease_client_id){0}, pages[p], seen, 400), 300);
        ck_assert_uint_eq(walk_leases(a, pages[p], seen, 400), 200);
        ck_assert_uint_eq(walk_leases(b, pages[p], seen, 400), 100);
    }
    free(seen);
}
END_TEST

START_TEST(a_lease_shows_its_range_class_age_and_release_state)
{
    struct lease_client_id c;
    ck_assert_int_eq(lease_client_add(svc, NULL, &c, &why), 0);
    struct lt_segment_id s = add_seg(c, 64 * KiB, LT_CLASS_PINNED);
    uint64_t t0 = base_now_ns();
    struct lt_lease_id l = grant(c, s, 8 * KiB, LT_CLASS_PINNED);
    struct lease_ticket t;
    ck_assert_int_eq(lease_work_pin(svc, c, l, &t, &why), 0);
    struct lease_release_result rr;
    ck_assert_int_eq(lease_release(svc, c, 1, &l, &rr, &why), 1);
    struct lease_list_lease out[4];
    uint64_t next = 1;
    ck_assert_int_eq(lease_service_leases_list(svc, c, 0, out, 4, &next), 1);
    ck_assert_uint_eq(next, 0);
    ck_assert(lt_lease_id_eq(out[0].lease, l));
    ck_assert(lt_segment_id_eq(out[0].segment, s));
    ck_assert_uint_eq(out[0].offset, 8 * KiB);
    ck_assert_uint_eq(out[0].length, 4 * KiB);
    ck_assert_int_eq(out[0].cls, LT_CLASS_PINNED);
    ck_assert_uint_eq(out[0].released, 1); /* waiting for the pinned work */
    ck_assert_uint_eq(out[0].pending_work, 1);
    ck_assert_uint_ge(out[0].granted_ns, t0);
    ck_assert_uint_le(out[0].granted_ns, base_now_ns());
    ck_assert_int_eq(lease_work_done(svc, t, &why), 0);
    ck_assert_int_eq(lease_service_leases_list(svc, c, 0, out, 4, &next), 0); /* complete */
}
END_TEST

START_TEST(a_segment_shows_class_size_registration_pages_and_holds)
{
    struct lease_client_id c, d;
    ck_assert_int_eq(lease_client_add(svc, NULL, &c, &why), 0);
    ck_assert_int_eq(lease_client_add(svc, NULL, &d, &why), 0);
    uint64_t t0 = base_now_ns();
    struct lt_segment_id p = add_seg(c, 64 * KiB, LT_CLASS_PINNED);
    struct lt_segment_id m = add_seg(c, 4 * KiB, LT_CLASS_MAPPED);
    struct lt_segment_id st = add_seg(d, 8 * KiB, LT_CLASS_STAGED);
    grant(c, p, 0, LT_CLASS_PINNED);
    struct lease_segment_info info;
    ck_assert_int_eq(lease_segment_hold(svc, c, m, 0, 8, &info, &why), 0);
    struct lease_list_segment out[8];
    uint64_t next = 1;
    ck_assert_int_eq(lease_service_segments_list(svc, (struct lease_client_id){0}, 0, out, 8, &next),
                     3);
    ck_assert_uint_eq(next, 0);
    int found = 0;
    for (int i = 0; i < 3; i++) {
        const struct lease_list_segment *e = &out[i];
        ck_assert_uint_eq(e->page_size, (uint64_t)sysconf(_SC_PAGESIZE));
        ck_assert_uint_ge(e->added_ns, t0);
        ck_assert_uint_eq(e->dropping, 0);
        if (lt_segment_id_eq(e->segment, p)) {
            found |= 1;
            ck_assert_int_eq(e->cls, LT_CLASS_PINNED);
            ck_assert_uint_eq(e->size, 64 * KiB);
            ck_assert_uint_eq(e->registered, 1);
            ck_assert_uint_gt(e->registration_ns, 0);
            ck_assert_uint_eq(e->leases, 1);
            ck_assert_uint_eq(e->client.value, c.value);
        } else if (lt_segment_id_eq(e->segment, m)) {
            found |= 2;
            ck_assert_int_eq(e->cls, LT_CLASS_MAPPED);
            ck_assert_uint_eq(e->holds, 1);
            ck_assert_uint_eq(e->leases, 0);
        } else if (lt_segment_id_eq(e->segment, st)) {
            found |= 4;
            ck_assert_int_eq(e->cls, LT_CLASS_STAGED);
            ck_assert_uint_eq(e->registered, 0);
            ck_assert_uint_eq(e->registration_ns, 0);
            ck_assert_uint_eq(e->client.value, d.value);
        }
    }
    ck_assert_int_eq(found, 7);
    /* One client's only; a dropped client's segments while the hold keeps
     * its drain from finishing. */
    ck_assert_int_eq(lease_service_segments_list(svc, d, 0, out, 8, &next), 1);
    ck_assert_int_eq(lease_client_drop(svc, c, &why), 0);
    ck_assert_int_eq(lease_service_segments_list(svc, c, 0, out, 8, &next), 2);
    ck_assert_uint_eq(out[0].dropping, 1);
    ck_assert_uint_eq(out[1].dropping, 1);
    ck_assert_int_eq(lease_segment_unhold(svc, m, &why), 0);
    ck_assert_int_eq(lease_service_segments_list(svc, c, 0, out, 8, &next), 0);
}
END_TEST

START_TEST(a_walk_survives_leases_released_and_granted_between_pages)
{
    struct lease_client_id c;
    ck_assert_int_eq(lease_client_add(svc, NULL, &c, &why), 0);
    struct lt_segment_id s = add_seg(c, 1024 * KiB, LT_CLASS_STAGED);
    struct lt_lease_id ids[100];
    for (int i = 0; i < 100; i++)
        ids[i] = grant(c, s, (uint64_t)i * 4 * KiB, LT_CLASS_STAGED);
    struct lease_list_lease out[10];
    uint64_t cursor = 0, next = 0, listed = 0;
    int round = 0;
    do {
        int n = lease_service_leases_list(svc, c, cursor, out, 10, &next);
        ck_assert_int_ge(n, 0);
        listed += (uint64_t)n;
        /* Release one not listed yet and grant one more: neither repeats an entry. */
        if (round < 5) {
            struct lease_release_result rr;
            ck_assert_int_eq(lease_release(svc, c, 1, &ids[99 - round], &rr, &why), 1);
            grant(c, s, (uint64_t)(100 + round) * 4 * KiB, LT_CLASS_STAGED);
        }
        cursor = next;
        round++;
    } while (cursor);
    ck_assert_uint_ge(listed, 95);
    ck_assert_uint_le(listed, 105);
}
END_TEST

START_TEST(bad_arguments_are_refused)
{
    struct lease_list_lease l[1];
    struct lease_list_segment g[1];
    uint64_t next = 7;
    struct lease_client_id any = {0};
    ck_assert_int_eq(lease_service_leases_list(NULL, any, 0, l, 1, &next), -EINVAL);
    ck_assert_int_eq(lease_service_leases_list(svc, any, 0, l, 0, &next), -EINVAL);
    ck_assert_int_eq(lease_service_leases_list(svc, any, 0, NULL, 1, &next), -EINVAL);
    ck_assert_int_eq(lease_service_leases_list(svc, any, 0, l, 1, NULL), -EINVAL);
    ck_assert_int_eq(lease_service_leases_list(svc, any, 1ull << 32, l, 1, &next), -EINVAL);
    ck_assert_int_eq(lease_service_segments_list(svc, any, 1ull << 40, g, 1, &next), -EINVAL);
    ck_assert_uint_eq(next, 7); /* untouched */
    ck_assert_int_eq(lease_service_segments_list(svc, any, 0, g, 1, &next), 0);
    ck_assert_uint_eq(next, 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("lease_list");
    TCase *tc = tcase_create("list");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, every_lease_comes_once_through_pages_of_any_size);
    tcase_add_test(tc, a_lease_shows_its_range_class_age_and_release_state);
    tcase_add_test(tc, a_segment_shows_class_size_registration_pages_and_holds);
    tcase_add_test(tc, a_walk_survives_leases_released_and_granted_between_pages);
    tcase_add_test(tc, bad_arguments_are_refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
