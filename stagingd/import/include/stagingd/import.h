/* The import module: vector files in, a shard store out (docs/import.md).
 *
 * Vector files are NumPy .npy arrays (format versions 1, 2 and 3; dtype
 * '<f4', '<f2' or '|u1'; C order; shape (rows, dim) or (dim,)) and the
 * .fvecs / .bvecs / .ivecs files ANN benchmarks ship (each vector an int32
 * dim, then dim float32 / uint8 / int32 elements). sd_vec_* opens and
 * validates one file and reads its rows converted to a record type;
 * sd_import_store writes a store from one or more files, through a
 * temporary directory renamed into place at the end, so a failed import
 * leaves nothing behind and an existing store is never half overwritten.
 *
 * Every refusal of input names the file and the byte offset the problem
 * is at, and what was expected and found, in one line:
 *   "base.fvecs: byte 51600: vector 100 has dim 64, expected 128 (the first vector's)".
 * Functions that can fail take @err/@err_len (@err may be NULL) like the
 * shard module's; nothing here prints. */
#ifndef STAGINGD_IMPORT_H
#define STAGINGD_IMPORT_H

#include <stddef.h>
#include <stdint.h>

/* ---- Vector files ---- */

enum sd_vec_format {
    SD_VEC_NPY = 1,
    SD_VEC_FVECS = 2,
    SD_VEC_BVECS = 3,
    SD_VEC_IVECS = 4, /* int32: ground-truth neighbour ids, never imported as data */
};

/* Element types as they are in a file. */
enum sd_vec_elem {
    SD_VEC_F32 = 1,
    SD_VEC_F16 = 2,
    SD_VEC_U8 = 3,
    SD_VEC_I32 = 4,
};

/* Queries a job takes at most (the SIFT query set's size): every query and
 * its hits live in each shard's staging buffer. */
#define SD_VEC_QUERIES_MAX 10000u

/* "npy", "fvecs", "bvecs", "ivecs", or NULL. */
const char *sd_vec_format_name(uint32_t format);

/* Parses "auto" (0: by the file's name), "npy", "fvecs", "bvecs" or
 * "ivecs". Returns 0 or -EINVAL. */
int sd_vec_format_parse(const char *s, uint32_t *format_p);

/* "f32", "f16", "u8", "i32", or NULL. */
const char *sd_vec_elem_name(uint32_t elem);

/* What a validated file holds. */
struct sd_vec_info {
    uint32_t format;      /* enum sd_vec_format */
    uint32_t elem;        /* enum sd_vec_elem */
    uint32_t dim;         /* 1..SD_SHARD_DIM_MAX */
    uint32_t npy_version; /* .npy: the format's major version (1, 2 or 3); else 0 */
    uint64_t rows;        /* >= 1 */
    uint64_t data_offset; /* file offset of row 0 (.npy: the header's end; xvecs: 0) */
    uint64_t dim_offset;  /* where the dim is declared (.npy: the shape; xvecs: 0) */
    uint64_t row_bytes;   /* bytes of one row in the file (xvecs: its dim word included) */
    uint64_t file_size;
};

struct sd_vec_file;

/* Opens and validates the file at @path as @format (0: by its name: .npy,
 * .fvecs, .bvecs, .ivecs; a name without one of those is read as .npy when
 * it starts with the .npy magic). Checks the whole header and that the
 * file's size is exactly what it declares (xvecs: a whole number of
 * vectors of the first vector's dim); the dim word of every further xvecs
 * vector is checked as it is read. Returns 0; -EPROTO (not that format:
 * magic, version, header syntax), -EINVAL (a dtype, order, shape or dim
 * refused), -EIO (truncated, or bytes after the data), -ENODATA (no
 * vectors), -EOVERFLOW, -ENOMEM or -errno. The caller closes *@f_p with
 * sd_vec_close. */
int sd_vec_open(const char *path, uint32_t format, char *err, size_t err_len,
                struct sd_vec_file **f_p);

/* Closes the file and frees @f. NULL is a no-op. */
void sd_vec_close(struct sd_vec_file *f);

/* The validated layout; valid until sd_vec_close. */
const struct sd_vec_info *sd_vec_info_get(const struct sd_vec_file *f);

/* The path given to sd_vec_open; valid until sd_vec_close. */
const char *sd_vec_path(const struct sd_vec_file *f);

/* Reads rows [@first, @first + @n) into @out_p as @n x dim elements of
 * @type (SD_RECORD_F32 or SD_RECORD_F16, stagingd/shard.h): f32, f16 and
 * u8 widen exactly; f32 to f16 rounds to nearest even. Returns 0; -EINVAL
 * for an ivecs file or a bad range or type; -EBADMSG for an xvecs vector
 * whose dim word differs from the first's; -ERANGE for a finite value
 * that f16 cannot hold (the import would turn it into infinity); -EIO
 * for a short read (the file shrank); -errno. On failure @out_p may hold
 * the rows before the bad one. */
int sd_vec_read(struct sd_vec_file *f, uint64_t first, uint64_t n, uint32_t type, char *err,
                size_t err_len, void *out_p);

/* Reads rows [@first, @first + @n) of an .ivecs file as int32 into @out_p.
 * Returns 0; -EINVAL for any other format or a bad range; -EBADMSG, -EIO
 * or -errno as sd_vec_read. */
int sd_vec_read_i32(struct sd_vec_file *f, uint64_t first, uint64_t n, char *err, size_t err_len,
                    int32_t *out_p);

/* ---- Queries ---- */

/* Queries taken from a vector file, as f32. */
struct sd_vec_queries {
    float *v;      /* n x dim */
    uint64_t *ids; /* each query's row in the file */
    size_t n;
    uint32_t dim;
};

/* Loads the rows of @path (.npy, .fvecs or .bvecs; @format as
 * sd_vec_open) listed by @select, in its order: comma-separated row
 * numbers and ranges "A-B" (both ends included), e.g. "0,5-9"; NULL or
 * "all": every row. At most @max rows (<= SD_VEC_QUERIES_MAX). Returns 0
 * and fills *@q_p (free it with sd_vec_queries_free); -EINVAL for a bad
 * or out-of-range list, too many rows or an ivecs file; or as
 * sd_vec_open and sd_vec_read. */
int sd_vec_queries_load(const char *path, uint32_t format, const char *select, size_t max,
                        char *err, size_t err_len, struct sd_vec_queries *q_p);

/* Frees what sd_vec_queries_load allocated and zeroes @q. */
void sd_vec_queries_free(struct sd_vec_queries *q);

/* ---- Importing ---- */

/* Called as rows are written (@done grows to @total); a non-zero return
 * stops the import (-ECANCELED), which then removes what it wrote. */
typedef int (*sd_import_progress_fn)(void *arg, uint64_t done, uint64_t total);

struct sd_import_opts {
    const char *out_dir;       /* the store to write; its parent must exist */
    const char *const *inputs; /* files, imported in order: their rows follow each other */
    size_t ninputs;            /* >= 1 */
    uint32_t format;           /* enum sd_vec_format for every input; 0: each by its name */
    uint32_t record_type;      /* SD_RECORD_F32 or _F16; 0: f16 when every input is f16 */
    uint64_t shard_size;       /* payload bytes per shard at most, in whole records (>= 1) */
    uint32_t block_size;       /* checksum block size */
    int force;                 /* replace the store at out_dir (only a store) */
    int do_fsync;              /* fsync every file and directory before the rename */
    int check_only;            /* validate every row of every input (ivecs too); write nothing */
    sd_import_progress_fn progress; /* may be NULL */
    void *progress_arg;
};

/* One input's place in the store: its rows are [first_row, first_row + rows). */
struct sd_import_input {
    struct sd_vec_info info;
    uint64_t first_row;
};

struct sd_import_result {
    uint64_t shards; /* 0 with check_only */
    uint64_t rows;
    uint32_t dim;
    uint32_t record_type;
    uint64_t payload_bytes;
    uint64_t file_bytes;
    uint64_t input_bytes;
    /* check_only over .ivecs inputs: the smallest and largest id seen */
    int64_t ivecs_min, ivecs_max;
};

/* Sets @o to the CLI's defaults: 64 MiB shards, 256 KiB blocks, type and
 * format from the inputs, fsync on, no inputs and no output. */
void sd_import_opts_default(struct sd_import_opts *o);

/* Validates every input (and that their dims agree), then writes the store:
 * shard-NNNNNN.sds files of at most shard_size payload bytes each, holding
 * the rows in input order, and MANIFEST, all in a new directory next to
 * out_dir (".NAME.import-XXXXXX"), which is checked (sd_store_open), synced
 * and renamed to out_dir. out_dir may be missing or an empty directory;
 * with force it may hold a store (only MANIFEST and *.sds files), which is
 * replaced in one rename where the file system can exchange directories.
 * On any failure the new directory is removed and out_dir is as it was.
 * Store row r (manifest order, then record order) is input row r counted
 * across the inputs in order. @inputs_p (may be NULL) receives
 * o->ninputs entries. Returns 0; -EEXIST (out_dir not empty, or not a
 * store with force); -ECANCELED; the codes of sd_vec_open / sd_vec_read;
 * -EINVAL for bad options or an ivecs input; or -errno. *@res_p (may be
 * NULL) is written on success. */
int sd_import_store(const struct sd_import_opts *o, char *err, size_t err_len,
                    struct sd_import_input *inputs_p, struct sd_import_result *res_p);

#endif /* STAGINGD_IMPORT_H */
