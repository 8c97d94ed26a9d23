/* test_shard: the shard file format, the store and the generator. */
#include <stdlib.h>

#include "shard_test_util.h"

int main(void)
{
    Suite *s = suite_create("shard");
    suite_add_tcase(s, st_format_tcase());
    suite_add_tcase(s, st_store_tcase());
    suite_add_tcase(s, st_gen_tcase());
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
