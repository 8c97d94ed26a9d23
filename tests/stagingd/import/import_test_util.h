/* Helpers for the import suites: a private directory, vector files written
 * byte by byte here (so the tests see exactly what a reader gets), random
 * data, and reading a store back in row order. */
#ifndef TESTS_IMPORT_UTIL_H
#define TESTS_IMPORT_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* mkdtemp under /tmp into @dir (at least 64 bytes). */
void it_dir_make(char *dir);
/* Removes @path and everything below it. */
void it_rm_rf(const char *path);
/* Entries in directory @dir ("." and ".." not counted); -1 when missing. */
int it_dir_count(const char *dir);

/* A .npy file: the magic, version @major.0, the header length (u16 for
 * version 1, u32 after), @dict padded with spaces and a '\n' to a multiple
 * of 64, then @len bytes of @data. Returns the data's offset. */
uint64_t it_npy_write(const char *path, unsigned major, const char *dict, const void *data,
                      size_t len);
/* The offset in a version-@major file of @needle within @dict. */
uint64_t it_npy_at(unsigned major, const char *dict, const char *needle);

/* xvecs files: @rows vectors, each the int32 @dim then @dim elements of
 * @elem_size bytes from @data (rows x dim, packed). */
void it_xvecs_write(const char *path, uint64_t rows, uint32_t dim, const void *data,
                    size_t elem_size);

/* Writes @len bytes of @data to @path. */
void it_file_write(const char *path, const void *data, size_t len);

/* @n floats uniform in [-1, 1) from @seed. */
float *it_random_f32(size_t n, uint64_t seed);

/* Every record of the store at @dir, in row order (manifest, then record
 * order), as raw bytes of its type; *@rows_p, *@dim_p, *@type_p as found.
 * The caller frees the result. */
void *it_store_read(const char *dir, uint64_t *rows_p, uint32_t *dim_p, uint32_t *type_p,
                    uint64_t *shards_p);

#endif /* TESTS_IMPORT_UTIL_H */
