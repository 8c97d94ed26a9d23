/* The runner main() every tests/base suite shares. */
#ifndef TESTS_BASE_CHECK_MAIN_H
#define TESTS_BASE_CHECK_MAIN_H

#include <check.h>
#include <stdlib.h>

#define BASE_CHECK_MAIN(suite_fn)                                                                  \
    int main(void)                                                                                 \
    {                                                                                              \
        SRunner *sr = srunner_create(suite_fn());                                                  \
        srunner_run_all(sr, CK_NORMAL);                                                            \
        int failed = srunner_ntests_failed(sr);                                                    \
        srunner_free(sr);                                                                          \
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;                                          \
    }

#endif /* TESTS_BASE_CHECK_MAIN_H */
