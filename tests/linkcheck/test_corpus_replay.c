/* Replays every file of linkcheck's fuzz corpus through the fuzzer's entry
 * point in an ordinary build: each must give a verdict or a clean error. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_elf.h"
#include "lc_test_util.h"

START_TEST(every_corpus_file_returns_cleanly)
{
    DIR *dir = opendir(LC_TEST_CORPUS);
    ck_assert_msg(dir != NULL, "cannot open the corpus %s: %s", LC_TEST_CORPUS, strerror(errno));
    int files = 0, elf = 0, refused = 0;
    struct dirent *ent;
    while ((ent = readdir(dir)) != NULL) {
        if (ent->d_name[0] == '.')
            continue;
        char *path = lc_test_join(LC_TEST_CORPUS, ent->d_name);
        ck_assert_ptr_nonnull(path);
        struct stat st;
        if (stat(path, &st) < 0 || !S_ISREG(st.st_mode)) {
            free(path);
            continue;
        }
        unsigned char *data;
        size_t size;
        ck_assert_int_eq(lc_test_read_file(path, &data, &size), 0);
        int rc = lc_fuzz_one(data, size);
        ck_assert_msg(rc >= 0 || rc == -ENOEXEC || rc == -ENOTSUP, "%s: rc %d", path, rc);
        ck_assert_int_eq(LLVMFuzzerTestOneInput(data, size), 0);
        files++;
        if (rc >= 0)
            elf++;
        else
            refused++;
        free(data);
        free(path);
    }
    closedir(dir);
    /* The seeds are real ELF files; a corpus of only rejects has lost them. */
    ck_assert_int_ge(files, 4);
    ck_assert_int_ge(elf, 3);
    fprintf(stderr, "replayed %d corpus files: %d checked, %d refused\n", files, elf, refused);
}
END_TEST

static Suite *linkcheck_corpus_suite(void)
{
    Suite *s = suite_create("linkcheck_corpus_replay");
    TCase *tc = tcase_create("replay");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, every_corpus_file_returns_cleanly);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(linkcheck_corpus_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
