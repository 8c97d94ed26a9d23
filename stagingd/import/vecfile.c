/* Vector files (stagingd/import.h): opening one (the format from its name
 * or magic), the xvecs layout (every vector an int32 dim word, then dim
 * elements), and reading rows converted to a record type. The .npy header
 * is npy.c's. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "import_internal.h"
#include "stagingd/shard.h"

/* The files are little-endian and read with memcpy. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "vector files are read as little-endian");

/* ---- names and helpers ---- */

static const char *const sd_vec__format_names[] = {NULL, "npy", "fvecs", "bvecs", "ivecs"};
static const char *const sd_vec__elem_names[] = {NULL, "f32", "f16", "u8", "i32"};

const char *sd_vec_format_name(uint32_t format)
{
    return format >= 1 && format <= 4 ? sd_vec__format_names[format] : NULL;
}

int sd_vec_format_parse(const char *s, uint32_t *format_p)
{
    if (strcmp(s, "auto") == 0) {
        *format_p = 0;
        return 0;
    }
    for (uint32_t i = 1; i <= 4; i++) {
        if (strcmp(s, sd_vec__format_names[i]) == 0) {
            *format_p = i;
            return 0;
        }
    }
    return -EINVAL;
}

const char *sd_vec_elem_name(uint32_t elem)
{
    return elem >= 1 && elem <= 4 ? sd_vec__elem_names[elem] : NULL;
}

uint32_t sd_vec__elem_size(uint32_t elem)
{
    switch (elem) {
    case SD_VEC_F32:
    case SD_VEC_I32:
        return 4;
    case SD_VEC_F16:
        return 2;
    case SD_VEC_U8:
        return 1;
    default:
        return 0;
    }
}

int sd_vec__errf(const char *path, uint64_t off, char *err, size_t err_len, int rc, const char *fmt,
                 ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    base_vfmt(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return base_errf(err, err_len, rc, "%s: byte %" PRIu64 ": %s", path, off, msg);
}

/* ---- the xvecs layout ---- */

static int32_t vec_i32_at(const unsigned char *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The format named by @path's suffix, or 0. */
static uint32_t vec_format_of_name(const char *path)
{
    const char *dot = strrchr(path, '.');
    const char *slash = strrchr(path, '/');
    if (!dot || (slash && dot < slash))
        return 0;
    for (uint32_t i = 1; i <= 4; i++)
        if (strcasecmp(dot + 1, sd_vec__format_names[i]) == 0)
            return i;
    return 0;
}

static int vec_buf_ensure(struct sd_vec_file *f, char *err, size_t err_len)
{
    if (f->buf)
        return 0;
    size_t cap = SD_VEC__CHUNK;
    if (f->info.row_bytes > cap)
        cap = (size_t)f->info.row_bytes;
    f->buf = malloc(cap);
    if (!f->buf)
        return base_errf(err, err_len, -ENOMEM, "%s: out of memory for a %zu-byte read buffer",
                         f->path, cap);
    f->buf_cap = cap;
    return 0;
}

/* Reads rows [@first, @first + @n) (n * row_bytes <= buf_cap) into f->buf
 * and checks each xvecs dim word. */
static int vec_chunk_read(struct sd_vec_file *f, uint64_t first, uint64_t n, char *err,
                          size_t err_len)
{
    const struct sd_vec_info *in = &f->info;
    const uint64_t off = in->data_offset + first * in->row_bytes;
    const size_t len = (size_t)(n * in->row_bytes);
    ssize_t got = base_pread_full(f->fd, f->buf, len, off);
    if (got < 0)
        return sd_vec__errf(f->path, off, err, err_len, (int)got, "read: %s", strerror((int)-got));
    if ((size_t)got != len)
        return sd_vec__errf(f->path, off + (uint64_t)got, err, err_len, -EIO,
                            "truncated: the file ends at byte %" PRIu64 "; it was %" PRIu64
                            " bytes when opened (it shrank while being read)",
                            off + (uint64_t)got, in->file_size);
    if (in->format == SD_VEC_NPY)
        return 0;
    for (uint64_t r = 0; r < n; r++) {
        int32_t d = vec_i32_at(f->buf + r * in->row_bytes);
        if (d != (int32_t)in->dim)
            return sd_vec__errf(f->path, off + r * in->row_bytes, err, err_len, -EBADMSG,
                                "vector %" PRIu64 " has dim %" PRId32
                                ", expected %u (the first vector's): the dims disagree",
                                first + r, d, in->dim);
    }
    return 0;
}

/* The file's size is not a whole number of vectors: find the first vector
 * whose dim word differs (dims disagree) or, failing that, say where the
 * last one is cut short. */
static int xvecs_size_fail(struct sd_vec_file *f, char *err, size_t err_len)
{
    const struct sd_vec_info *in = &f->info;
    const uint64_t whole = in->file_size / in->row_bytes;
    int rc = vec_buf_ensure(f, err, err_len);
    if (rc < 0)
        return rc;
    const uint64_t per = f->buf_cap / in->row_bytes;
    for (uint64_t r = 0; r < whole; r += per) {
        uint64_t n = whole - r < per ? whole - r : per;
        if ((rc = vec_chunk_read(f, r, n, err, err_len)) < 0)
            return rc;
    }
    const uint64_t at = whole * in->row_bytes;
    return sd_vec__errf(f->path, at, err, err_len, -EIO,
                        "truncated: vector %" PRIu64 " has %" PRIu64 " of its %" PRIu64
                        " bytes (a 4-byte dim word and %u x %s); the file ends at byte %" PRIu64,
                        whole, in->file_size - at, in->row_bytes, in->dim,
                        sd_vec_elem_name(in->elem), in->file_size);
}

static int xvecs_parse(struct sd_vec_file *f, uint32_t format, char *err, size_t err_len)
{
    struct sd_vec_info *in = &f->info;
    in->format = format;
    in->elem = format == SD_VEC_BVECS   ? SD_VEC_U8
               : format == SD_VEC_IVECS ? SD_VEC_I32
                                        : SD_VEC_F32;
    const uint64_t size = in->file_size;
    const char *name = sd_vec_format_name(format);
    if (size == 0)
        return sd_vec__errf(f->path, 0, err, err_len, -ENODATA,
                            "holds no vectors (the file is empty)");
    unsigned char pre[SD_VEC__NPY_MAGIC_LEN] = {0};
    ssize_t got = base_pread_full(f->fd, pre, sizeof pre, 0);
    if (got < 0)
        return sd_vec__errf(f->path, 0, err, err_len, (int)got, "read: %s", strerror((int)-got));
    if (got == (ssize_t)sizeof pre && memcmp(pre, SD_VEC__NPY_MAGIC, sizeof pre) == 0)
        return sd_vec__errf(f->path, 0, err, err_len, -EPROTO,
                            "starts with the .npy magic: a .npy file, not .%s (rename it, or "
                            "--format npy)",
                            name);
    if (got < 4)
        return sd_vec__errf(f->path, 0, err, err_len, -EIO,
                            "truncated: a .%s vector starts with a 4-byte dim word, the file "
                            "has %zd byte(s)",
                            name, got);
    const int32_t d = vec_i32_at(pre);
    if (d <= 0 || (uint32_t)d > SD_SHARD_DIM_MAX)
        return sd_vec__errf(f->path, 0, err, err_len, -EINVAL,
                            "vector 0 has dim %" PRId32 ": expected 1..%u%s", d, SD_SHARD_DIM_MAX,
                            d > 0 ? " (the scan's maximum)" : "");
    in->dim = (uint32_t)d;
    in->row_bytes = 4 + (uint64_t)in->dim * sd_vec__elem_size(in->elem);
    in->data_offset = 0;
    if (size % in->row_bytes != 0)
        return xvecs_size_fail(f, err, err_len);
    in->rows = size / in->row_bytes;
    return 0;
}

/* ---- opening ---- */

void sd_vec_close(struct sd_vec_file *f)
{
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    free(f->buf);
    free(f->path);
    free(f);
}

int sd_vec_open(const char *path, uint32_t format, char *err, size_t err_len,
                struct sd_vec_file **f_p)
{
    if (format > SD_VEC_IVECS)
        return base_errf(err, err_len, -EINVAL,
                         "%s: format %u: expected npy, fvecs, bvecs or "
                         "ivecs",
                         path, format);
    struct sd_vec_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return base_errf(err, err_len, -ENOMEM, "%s: out of memory", path);
    }
    int rc;
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) {
        rc = -errno;
        base_errf(err, err_len, rc, "%s: cannot open: %s", path, strerror(-rc));
        goto fail;
    }
    struct stat st;
    if (fstat(f->fd, &st) < 0) {
        rc = -errno;
        base_errf(err, err_len, rc, "%s: stat: %s", path, strerror(-rc));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = base_errf(err, err_len, -EINVAL, "%s: not a regular file", path);
        goto fail;
    }
    f->info.file_size = (uint64_t)st.st_size;
    if (format == 0)
        format = vec_format_of_name(path);
    if (format == 0) {
        unsigned char pre[SD_VEC__NPY_MAGIC_LEN];
        ssize_t got = base_pread_full(f->fd, pre, sizeof pre, 0);
        if (got == (ssize_t)sizeof pre && memcmp(pre, SD_VEC__NPY_MAGIC, sizeof pre) == 0) {
            format = SD_VEC_NPY;
        } else {
            rc = base_errf(err, err_len, -EINVAL,
                           "%s: cannot tell the format: expected a name ending in .npy, .fvecs, "
                           ".bvecs or .ivecs, or a .npy magic at byte 0 (or name it: --format)",
                           path);
            goto fail;
        }
    }
    rc = format == SD_VEC_NPY ? sd_vec__npy_parse(f, err, err_len)
                              : xvecs_parse(f, format, err, err_len);
    if (rc < 0)
        goto fail;
    *f_p = f;
    return 0;

fail:
    sd_vec_close(f);
    return rc;
}

const struct sd_vec_info *sd_vec_info_get(const struct sd_vec_file *f)
{
    return &f->info;
}

const char *sd_vec_path(const struct sd_vec_file *f)
{
    return f->path;
}

/* ---- reading rows ---- */

/* Converts @dim elements of @elem at @src to @type at @dst. Returns 0, or
 * -ERANGE with *@bad_p the first finite element f16 cannot hold. */
static int vec_convert(uint32_t elem, const unsigned char *src, uint32_t dim, uint32_t type,
                       void *dst, uint32_t *bad_p)
{
    if (type == SD_RECORD_F32) {
        float *out = dst;
        if (elem == SD_VEC_F32) {
            memcpy(out, src, (size_t)dim * 4);
        } else if (elem == SD_VEC_F16) {
            for (uint32_t i = 0; i < dim; i++) {
                uint16_t h;
                memcpy(&h, src + 2 * (size_t)i, 2);
                out[i] = sd_f16_to_f32(h);
            }
        } else {
            for (uint32_t i = 0; i < dim; i++)
                out[i] = (float)src[i];
        }
        return 0;
    }
    uint16_t *out = dst;
    if (elem == SD_VEC_F16) {
        memcpy(out, src, (size_t)dim * 2);
    } else if (elem == SD_VEC_F32) {
        for (uint32_t i = 0; i < dim; i++) {
            float v;
            memcpy(&v, src + 4 * (size_t)i, 4);
            out[i] = sd_f16_from_f32(v);
            if ((out[i] & 0x7fffu) == 0x7c00u && isfinite(v)) {
                *bad_p = i;
                return -ERANGE;
            }
        }
    } else {
        for (uint32_t i = 0; i < dim; i++)
            out[i] = sd_f16_from_f32((float)src[i]); /* 0..255: exact */
    }
    return 0;
}

/* The chunked loop of sd_vec_read and sd_vec_read_i32: @type 0 copies the
 * raw int32 elements. */
static int vec_read(struct sd_vec_file *f, uint64_t first, uint64_t n, uint32_t type, void *out,
                    char *err, size_t err_len)
{
    const struct sd_vec_info *in = &f->info;
    if (first > in->rows || n > in->rows - first)
        return base_errf(err, err_len, -EINVAL,
                         "%s: rows %" PRIu64 "..+%" PRIu64 ": expected rows below %" PRIu64,
                         f->path, first, n, in->rows);
    int rc = vec_buf_ensure(f, err, err_len);
    if (rc < 0)
        return rc;
    const size_t out_row = (size_t)in->dim * (type == 0 ? 4 : sd_record_elem_size(type));
    const size_t skip = in->format == SD_VEC_NPY ? 0 : 4;
    const uint64_t per = f->buf_cap / in->row_bytes;
    unsigned char *o = out;
    for (uint64_t r = 0; r < n;) {
        const uint64_t m = n - r < per ? n - r : per;
        if ((rc = vec_chunk_read(f, first + r, m, err, err_len)) < 0)
            return rc;
        for (uint64_t i = 0; i < m; i++, o += out_row) {
            const unsigned char *src = f->buf + i * in->row_bytes + skip;
            if (type == 0) {
                memcpy(o, src, out_row);
                continue;
            }
            uint32_t bad = 0;
            if (vec_convert(in->elem, src, in->dim, type, o, &bad) < 0) {
                float v;
                memcpy(&v, src + 4 * (size_t)bad, 4);
                const uint64_t row = first + r + i;
                return sd_vec__errf(f->path,
                                    in->data_offset + row * in->row_bytes + skip + 4ull * bad, err,
                                    err_len, -ERANGE,
                                    "row %" PRIu64 " element %u is %g: over f16's largest "
                                    "finite value 65504; import as f32 (--type f32)",
                                    row, bad, (double)v);
            }
        }
        r += m;
    }
    return 0;
}

int sd_vec_read(struct sd_vec_file *f, uint64_t first, uint64_t n, uint32_t type, char *err,
                size_t err_len, void *out_p)
{
    if (f->info.elem == SD_VEC_I32)
        return sd_vec__errf(f->path, 0, err, err_len, -EINVAL,
                            ".ivecs holds int32 vectors (an ANN benchmark's ground-truth "
                            "neighbour ids), not vectors to scan");
    if (type != SD_RECORD_F32 && type != SD_RECORD_F16)
        return base_errf(err, err_len, -EINVAL, "%s: record type %u: expected f32 or f16", f->path,
                         type);
    return vec_read(f, first, n, type, out_p, err, err_len);
}

int sd_vec_read_i32(struct sd_vec_file *f, uint64_t first, uint64_t n, char *err, size_t err_len,
                    int32_t *out_p)
{
    if (f->info.elem != SD_VEC_I32)
        return base_errf(err, err_len, -EINVAL, "%s: expected an .ivecs file, found .%s", f->path,
                         sd_vec_format_name(f->info.format));
    return vec_read(f, first, n, 0, out_p, err, err_len);
}
