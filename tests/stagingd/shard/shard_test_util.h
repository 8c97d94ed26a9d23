/* Helpers for the test_shard suite: a temporary root per test case,
 * seeded random shards, and byte-level file surgery. */
#ifndef SHARD_TEST_UTIL_H
#define SHARD_TEST_UTIL_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

/* Unchecked fixture (runs in the parent, so cleanup survives a failed
 * test): creates and removes the case's temporary root. */
void st_root_setup(void);
void st_root_teardown(void);

/* A fresh directory under the root; the returned string is static storage
 * in the test process (valid until the next call). */
const char *st_dir_new(void);

/* "@dir/@name" in a static buffer (valid until the next call). */
const char *st_join(const char *dir, const char *name);

/* A seeded splitmix64 stream for test data. */
uint64_t st_rand(uint64_t *state);

/* Writes a shard at @path of @records random records (seeded by @seed),
 * appending in random-sized pieces. Returns the payload (malloc'ed, caller
 * frees); *@len_p gets its length. Fails the test on any error. */
unsigned char *st_write_shard(const char *path, uint32_t type, uint32_t dim, uint64_t records,
                              uint32_t block_size, uint64_t seed, uint64_t *len_p);

/* Whole-file helpers; all fail the test on I/O errors. */
unsigned char *st_read_file(const char *path, size_t *len_p);
void st_write_file(const char *path, const void *data, size_t len);
void st_patch(const char *path, uint64_t off, const void *data, size_t len);
void st_flip_bit(const char *path, uint64_t off, unsigned bit);
void st_truncate(const char *path, uint64_t len);
/* Reads the header at offset 0 / writes @h there (optionally resealed). */
struct sd_shard_header;
void st_header_read(const char *path, struct sd_shard_header *h);
void st_header_write(const char *path, const struct sd_shard_header *h, int reseal);

/* Whether two files have the same bytes. */
int st_files_equal(const char *a, const char *b);

/* The suite's test cases. */
TCase *st_format_tcase(void);
TCase *st_store_tcase(void);
TCase *st_gen_tcase(void);

#endif /* SHARD_TEST_UTIL_H */
