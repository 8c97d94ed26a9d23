/* The runner main() of a Check suite, shared by the GPU suites (and any
 * other that has to decide first whether it can run here).
 *
 *   LEASE_CHECK_MAIN(suite_fn, skip_probe_fn)
 *   LEASE_CHECK_MAIN_DONE(suite_fn, skip_probe_fn, done_fn)
 *
 * skip_probe_fn (may be NULL) runs first: int probe(char *why, size_t len)
 * returns 0 to run the suite, LEASE_CHECK_SKIP to skip it (it wrote why:
 * "SKIP <suite>: <why>" is printed and the process exits 77, which ctest
 * reports as skipped, never passed), or anything else to fail before a test
 * ran (exit 1, why printed). It may open what every test shares (a device).
 * A suite with a probe runs in CK_NOFORK mode: a CUDA process must not fork.
 * done_fn (may be NULL) runs after the suite with the number of tests that
 * failed, to close what the probe opened. The exit status is 0 only when every test passed. */
#ifndef TESTS_CHECK_MAIN_H
#define TESTS_CHECK_MAIN_H

#include <check.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#define LEASE_CHECK_SKIP 77

typedef int (*lease_check_probe_fn)(char *why, size_t len);
typedef void (*lease_check_done_fn)(int failed);

static inline int lease_check_run(Suite *(*suite_fn)(void), const char *name,
                                  lease_check_probe_fn probe, lease_check_done_fn done)
{
    char why[1024] = "";
    if (probe) {
        int p = probe(why, sizeof why);
        if (p == LEASE_CHECK_SKIP) {
            printf("SKIP %s: %s\n", name, why);
            return LEASE_CHECK_SKIP;
        }
        if (p != 0) {
            printf("%s cannot run: %s\n", name, why);
            return EXIT_FAILURE;
        }
    }
    SRunner *sr = srunner_create(suite_fn());
    if (probe)
        srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    if (done)
        done(failed);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#define LEASE_CHECK_MAIN_DONE(suite_fn, skip_probe_fn, done_fn)                                    \
    int main(void)                                                                                 \
    {                                                                                              \
        return lease_check_run(suite_fn, #suite_fn, skip_probe_fn, done_fn);                       \
    }

#define LEASE_CHECK_MAIN(suite_fn, skip_probe_fn)                                                  \
    LEASE_CHECK_MAIN_DONE(suite_fn, skip_probe_fn, NULL)

#endif /* TESTS_CHECK_MAIN_H */
