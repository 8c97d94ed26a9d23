/* What the import module's files share; not part of the API. The files
 * depend one way: import.c (the store writer) and vecquery.c (queries)
 * over vecfile.c (opening, xvecs, reading rows) over npy.c (the .npy
 * header). */
#ifndef STAGINGD_IMPORT_INTERNAL_H
#define STAGINGD_IMPORT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/io.h" /* base_pread_full */
#include "stagingd/import.h"

/* The .npy magic and the largest header this reader takes (numpy's own
 * reader refuses more than 10000 bytes unless told otherwise). */
#define SD_VEC__NPY_MAGIC "\x93NUMPY"
#define SD_VEC__NPY_MAGIC_LEN 6u
#define SD_VEC__NPY_HEADER_MAX (1u << 20)

/* Bytes read at once while converting rows. */
#define SD_VEC__CHUNK (4u << 20)

struct sd_vec_file {
    int fd;
    char *path;
    struct sd_vec_info info;
    unsigned char *buf; /* a read chunk, SD_VEC__CHUNK bytes or one row if larger */
    size_t buf_cap;
};

/* Formats "PATH: byte OFF: MESSAGE" into @err and returns @rc. */
int sd_vec__errf(const char *path, uint64_t off, char *err, size_t err_len, int rc, const char *fmt,
                 ...) __attribute__((format(printf, 6, 7)));

/* Parses and checks the .npy header of @f (fd and path set, file_size
 * known) into f->info: magic, version, the header dict (descr,
 * fortran_order, shape) and that the data fills the rest of the file
 * exactly. Codes as sd_vec_open. */
int sd_vec__npy_parse(struct sd_vec_file *f, char *err, size_t err_len);

/* Bytes per element of @elem (4, 2, 1, 4), 0 for an unknown one. */
uint32_t sd_vec__elem_size(uint32_t elem);

#endif /* STAGINGD_IMPORT_INTERNAL_H */
