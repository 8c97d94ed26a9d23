/* Helpers for the test_reader suite: a temporary root per test case, seeded
 * random files, a small pool, a log capture and completion records. */
#ifndef READER_TEST_UTIL_H
#define READER_TEST_UTIL_H

#include <check.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "lease/client.h"
#include "stagingd/reader.h"

#define KIB ((uint64_t)1 << 10)
#define MIB ((uint64_t)1 << 20)

/* Unchecked fixture (runs in the parent, so cleanup survives a failed
 * test): creates and removes the case's temporary root under @base (NULL:
 * $TMPDIR or /tmp). */
void rt_root_setup(void);
void rt_root_teardown(void);
/* Makes the root under @base instead; returns 0 or -errno. */
int rt_root_make(const char *base);

/* "@root/@name" in a static buffer (valid until the next call). */
const char *rt_path(const char *name);

/* A seeded splitmix64 stream for test data. */
uint64_t rt_rand(uint64_t *state);
void rt_fill(void *buf, size_t len, uint64_t seed);

/* Writes @len seeded random bytes to @name under the root and returns them
 * (malloc'ed, caller frees; NULL for len 0). */
unsigned char *rt_write_file(const char *name, size_t len, uint64_t seed);

/* Opens @name under the root read-only (fails the test on error). */
int rt_open(const char *name, int extra_flags);

/* Reads [off, off + len) of @fd with pread into a new buffer (caller frees). */
unsigned char *rt_pread_all(int fd, uint64_t off, size_t len);

/* A pool with @pinned bytes of PINNED memory in @segment-byte segments. */
struct leasec_pool *rt_pool_make(uint64_t pinned, uint64_t segment);

/* Log capture: every line the reader (or pool) logs, thread-safe. */
struct rt_log {
    unsigned lines;
    char all[32768];
};
extern struct rt_log rt_log;
void rt_log_fn(void *ctx, int level, const char *subsys, const char *line);
void rt_log_reset(void);
int rt_log_has(const char *needle);

/* A reader config with the log capture and the given shape. */
struct sd_reader_config rt_config(unsigned threads, unsigned qd, size_t chunk, unsigned flags);
struct sd_reader *rt_reader_make(const struct sd_reader_config *c);

/* One request's completion. */
struct rt_done {
    atomic_int calls;
    atomic_int result;
    atomic_ullong bytes;
};
void rt_done_init(struct rt_done *d);
void rt_done_fn(void *arg, int result, uint64_t bytes);
/* Readable accessors, so assertion messages stay short. */
int rt_calls(struct rt_done *d);
int rt_result(struct rt_done *d);
uint64_t rt_bytes(struct rt_done *d);

/* Submits a read of @len bytes at @off of @fd into @buf and fails the test
 * if it is refused. */
void rt_submit(struct sd_reader *r, int fd, uint64_t off, uint64_t len, void *buf, const char *path,
               char *err, size_t err_len, struct rt_done *d);

/* The suite's test cases. */
TCase *rt_core_tcase(void);
TCase *rt_fault_tcase(void);
TCase *rt_direct_tcase(void);
/* Where O_DIRECT tests can run (a directory whose file system reports a
 * direct-I/O alignment), or NULL. */
const char *rt_direct_dir(void);

#endif /* READER_TEST_UTIL_H */
