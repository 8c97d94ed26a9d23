/* Helpers for linkcheck's tests: run the linkcheck program, make and remove
 * scratch files. */
#ifndef LC_TEST_UTIL_H
#define LC_TEST_UTIL_H

#include <stddef.h>

/* One finished run of linkcheck. */
struct lc_test_run {
    int status; /* exit status, or 128 + signal number when killed */
    char *out;  /* stdout and stderr together, NUL-terminated */
};

/* Runs LC_TEST_LINKCHECK with @args (NULL-terminated, argv[0] excluded).
 * Returns 0 and fills @run_p, or -errno when it could not be started. */
int lc_test_run(const char *const *args, struct lc_test_run *run_p);

/* Frees what lc_test_run() filled. */
void lc_test_run_free(struct lc_test_run *run);

/* Whether the output shows a sanitizer report: a bad read is never "clean". */
int lc_test_run_sanitizer_fired(const struct lc_test_run *run);

/* Reads a whole file into a new buffer (caller frees). Returns 0 or -errno. */
int lc_test_read_file(const char *path, unsigned char **data_p, size_t *size_p);

/* Writes @size bytes to @path (created or truncated, mode @mode). Returns 0 or -errno. */
int lc_test_write_file(const char *path, const void *data, size_t size, int mode);

/* Creates a fresh scratch directory; returns a new string or NULL. */
char *lc_test_mkdtemp(void);

/* Removes @path and everything below it. */
void lc_test_rm_rf(const char *path);

/* Creates @path and its missing parents (mode 0755). Returns 0 or -errno. */
int lc_test_mkdir_p(const char *path);

/* A new string "<a>/<b>". */
char *lc_test_join(const char *a, const char *b);

#endif /* LC_TEST_UTIL_H */
