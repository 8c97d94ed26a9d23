/* test_reader: the staging reader (stagingd/reader.c). With no argument it
 * runs the core and fault cases; with --direct only the O_DIRECT cases,
 * exiting 77 (skipped) where no file system here does direct I/O. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reader_test_util.h"

int main(int argc, char **argv)
{
    int direct = argc > 1 && strcmp(argv[1], "--direct") == 0;
    Suite *s = suite_create("reader");
    if (direct) {
        const char *dir = rt_direct_dir();
        if (!dir) {
            fprintf(stderr, "test_reader --direct: SKIP: no directory among $TMPDIR or /tmp, "
                            "/var/tmp and the working directory is on a file system that "
                            "reports a direct-I/O alignment (statx STATX_DIOALIGN)\n");
            return 77;
        }
        fprintf(stderr, "test_reader --direct: O_DIRECT files under %s\n", dir);
        suite_add_tcase(s, rt_direct_tcase());
    } else {
        suite_add_tcase(s, rt_core_tcase());
        suite_add_tcase(s, rt_fault_tcase());
    }
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
