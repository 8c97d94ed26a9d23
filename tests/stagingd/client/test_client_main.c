/* test_client: the lease client against fake agents (scripted in-process,
 * and forked ones that serve the protocol and can be killed mid-run). One
 * file per behaviour group; they run in this order as one test case. */
#include <check.h>
#include <stdlib.h>

#include "client_test_util.h"

static Suite *client_suite(void)
{
    Suite *s = suite_create("client");
    TCase *tc = tcase_create("client");
    tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
    tcase_set_timeout(tc, 60);
    client_tests_handshake(tc);
    client_tests_leases(tc);
    client_tests_agents(tc);
    client_tests_malformed(tc);
    client_tests_doorbell(tc);
    client_tests_restart(tc);
    client_tests_api(tc);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(client_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
