/* Replays a fuzz target's kept corpus (tests/fuzz/corpus/<name>/) through
 * its entry point in an ordinary build (and under ASan+UBSan in the
 * sanitizer build): each file must be taken or refused cleanly, never abort.
 * Also writes the target's seeds: `<binary> --write-seeds DIR`.
 *
 * argv[1]: the corpus folder. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static const char *corpus_dir;

static int read_file(const char *path, uint8_t **data_p, size_t *size_p)
{
    FILE *f = fopen(path, "rbe");
    if (!f)
        return -errno;
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0, n;
    uint8_t chunk[4096];
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (len + n > cap) {
            cap = (len + n) * 2;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return -ENOMEM;
            }
            buf = nb;
        }
        memcpy(buf + len, chunk, n);
        len += n;
    }
    fclose(f);
    *data_p = buf;
    *size_p = len;
    return 0;
}

START_TEST(every_kept_input_is_taken_or_refused_cleanly)
{
    DIR *dir = opendir(corpus_dir);
    ck_assert_msg(dir != NULL, "cannot open the corpus %s: %s", corpus_dir, strerror(errno));
    unsigned files = 0, seeds = 0, taken = 0;
    struct dirent *ent;
    while ((ent = readdir(dir)) != NULL) {
        if (ent->d_name[0] == '.')
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", corpus_dir, ent->d_name);
        struct stat st;
        if (stat(path, &st) < 0 || !S_ISREG(st.st_mode))
            continue;
        uint8_t *data = NULL;
        size_t size = 0;
        ck_assert_int_eq(read_file(path, &data, &size), 0);
        int rc = fz_one(data, size);
        ck_assert_msg(rc == 0 || rc == 1, "%s: fz_one returned %d", path, rc);
        ck_assert_int_eq(LLVMFuzzerTestOneInput(data, size), 0);
        files++;
        taken += rc == 0;
        if (strncmp(ent->d_name, "seed-", 5) == 0) {
            seeds++;
            ck_assert_msg(rc == 0, "seed %s was refused: the seeds are valid inputs", path);
        }
        free(data);
    }
    closedir(dir);
    ck_assert_msg(seeds >= 3, "%s: expected the target's seeds, found %u", corpus_dir, seeds);
    fprintf(stderr, "fuzz %s: replayed %u kept inputs (%u seeds): %u taken through, %u refused\n",
            fz_name, files, seeds, taken, files - taken);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--write-seeds") == 0) {
        int n = fz_seeds(argv[2]);
        if (n < 0) {
            fprintf(stderr, "fuzz %s: writing seeds to %s: %s\n", fz_name, argv[2], strerror(-n));
            return 1;
        }
        printf("fuzz %s: %d seeds written to %s\n", fz_name, n, argv[2]);
        return 0;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR | --write-seeds DIR\n", argv[0]);
        return 2;
    }
    corpus_dir = argv[1];
    Suite *s = suite_create("fuzz_replay");
    TCase *tc = tcase_create("replay");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, every_kept_input_is_taken_or_refused_cleanly);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
