/* Issue #12, finding 4: STAGED bytes had no budget, so 127 sparse 1 TiB
 * STAGED memfds mapped 127 TiB into the agent, after which other clients'
 * 4 MiB offers were refused (and mislabelled LT_E_MEMLOCK). Now STAGED
 * bytes mapped have a budget per client and in total, and every class's
 * mapped bytes an address-space budget: the first 1 TiB offer is refused
 * with the numbers, and the next client's small offers are accepted. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check_main.h"
#include "hostile.h"

#define TIB (1024ull * 1024ull * 1024ull * 1024ull)

/* A sparse memfd of @size bytes, never mapped here. */
static int sparse_memfd(uint64_t size, int seals)
{
    int fd = memfd_create("hs-sparse", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
    ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, seals), 0);
    return fd;
}

START_TEST(test_sparse_terabyte_segments_cannot_lock_others_out)
{
    struct th_agent a;
    th_agent_start(&a, NULL, NULL);
    int x = th_hello(a.sock, 0, NULL);
    char msg[128];
    int seals = HS_OLD_SEALS;
    unsigned accepted = 0;
    uint32_t code = LT_OK;
    for (int i = 0; i < 127; i++) {
        struct hs_seg s = {.fd = sparse_memfd(TIB, seals), .size = TIB};
        code = hs_offer(x, &s, LT_CLASS_STAGED, msg, sizeof msg);
        close(s.fd);
        if (code == LT_E_SEGMENT_UNSEALED && seals == HS_OLD_SEALS) {
            seals = HS_SEALS;
            i--;
            continue;
        }
        if (code != LT_OK)
            break;
        accepted++;
    }
    /* The 1 TiB segments stop at a budget, said as such with numbers. */
    ck_assert_msg(code == LT_E_LIMIT || code == LT_E_BUDGET,
                  "after %u TiB STAGED: %s: %s (expected a budget refusal)", accepted,
                  lt_error_name(code), msg);
    ck_assert_msg(strstr(msg, "STAGED") || strstr(msg, "mapped"), "refusal: %s", msg);

    /* Someone else's small offers still get in, of every class. */
    int y = th_hello(a.sock, 0, NULL);
    const uint32_t classes[] = {LT_CLASS_STAGED, LT_CLASS_PINNED, LT_CLASS_MAPPED};
    for (size_t i = 0; i < 3; i++) {
        struct hs_seg s;
        uint64_t size = classes[i] == LT_CLASS_MAPPED ? HS_MIB : 4 * HS_MIB;
        ck_assert_int_eq(hs_offer_accepted(y, &s, size, 0, classes[i], 9 + i), 0);
        hs_seg_close(&s);
    }
    close(y);
    close(x);
    hs_agent_finish(&a);
}
END_TEST

static Suite *as_suite(void)
{
    Suite *s = suite_create("hostile_address_space");
    TCase *tc = tcase_create("address_space");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_sparse_terabyte_segments_cannot_lock_others_out);
    suite_add_tcase(s, tc);
    return s;
}

LEASE_CHECK_MAIN(as_suite, NULL)
