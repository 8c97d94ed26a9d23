/* Shard files: records, headers, opening, the checksum table and
 * verification. The writer is in shard_write.c. */
#include "stagingd/shard.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/blockhash_ref.h"
#include "shard_internal.h"

/* The on-disk layout is the in-memory struct; both are little-endian. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "shard files are little-endian and read as in-memory structs"
#endif
_Static_assert(sizeof(struct sd_shard_header) == SD_SHARD_HEADER_SIZE, "header is 128 bytes");
_Static_assert(offsetof(struct sd_shard_header, magic) == 0, "magic at 0");
_Static_assert(offsetof(struct sd_shard_header, version) == 8, "version at 8");
_Static_assert(offsetof(struct sd_shard_header, header_size) == 12, "header_size at 12");
_Static_assert(offsetof(struct sd_shard_header, record_type) == 16, "record_type at 16");
_Static_assert(offsetof(struct sd_shard_header, dim) == 20, "dim at 20");
_Static_assert(offsetof(struct sd_shard_header, record_count) == 24, "record_count at 24");
_Static_assert(offsetof(struct sd_shard_header, block_size) == 32, "block_size at 32");
_Static_assert(offsetof(struct sd_shard_header, reserved0) == 36, "reserved0 at 36");
_Static_assert(offsetof(struct sd_shard_header, payload_len) == 40, "payload_len at 40");
_Static_assert(offsetof(struct sd_shard_header, block_count) == 48, "block_count at 48");
_Static_assert(offsetof(struct sd_shard_header, payload_offset) == 56, "payload_offset at 56");
_Static_assert(offsetof(struct sd_shard_header, table_offset) == 64, "table_offset at 64");
_Static_assert(offsetof(struct sd_shard_header, file_size) == 72, "file_size at 72");
_Static_assert(offsetof(struct sd_shard_header, table_checksum) == 80, "table_checksum at 80");
_Static_assert(offsetof(struct sd_shard_header, reserved) == 88, "reserved at 88");
_Static_assert(offsetof(struct sd_shard_header, header_checksum) == 120, "header_checksum at 120");
_Static_assert(sizeof(SD_SHARD_MAGIC) == 8, "magic is 8 bytes with its NUL");
_Static_assert(SD_SHARD_PAYLOAD_OFFSET % SD_SHARD_ALIGN == 0, "payload is aligned");
_Static_assert(SD_SHARD_BLOCK_MIN % 8 == 0 && SD_SHARD_BLOCK_MAX % 8 == 0, "blocks are words");

/* ---- Records ---- */

uint32_t sd_record_elem_size(uint32_t type)
{
    switch (type) {
    case SD_RECORD_F32:
        return 4;
    case SD_RECORD_F16:
        return 2;
    default:
        return 0;
    }
}

const char *sd_record_type_name(uint32_t type)
{
    switch (type) {
    case SD_RECORD_F32:
        return "f32";
    case SD_RECORD_F16:
        return "f16";
    default:
        return NULL;
    }
}

int sd_record_type_parse(const char *s, uint32_t *type_p)
{
    if (strcmp(s, "f32") == 0) {
        *type_p = SD_RECORD_F32;
        return 0;
    }
    if (strcmp(s, "f16") == 0) {
        *type_p = SD_RECORD_F16;
        return 0;
    }
    return -EINVAL;
}

uint16_t sd_f16_from_f32(float f)
{
    return sd__f16_from_f32(f);
}

float sd_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t x;
    if (exp == 0x1f) {
        x = sign | 0x7f800000 | (man << 13);
    } else if (exp != 0) {
        x = sign | ((exp - 15 + 127) << 23) | (man << 13);
    } else if (man == 0) {
        x = sign;
    } else {
        /* Normalize the subnormal: shift its leading one into the implicit bit. */
        int e = -14;
        while (!(man & 0x400)) {
            man <<= 1;
            e--;
        }
        x = sign | ((uint32_t)(e + 127) << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &x, sizeof(f));
    return f;
}

/* ---- Headers ---- */

/* The derived sizes of a shard; 0 on success, or an errno-style code with
 * @why set. */
struct shard_layout {
    uint64_t payload_len;
    uint64_t block_count;
    uint64_t table_offset;
    uint64_t file_size;
};

static int shard_layout_compute(uint32_t type, uint32_t dim, uint64_t records, uint32_t block_size,
                                const char *name, char *err, size_t err_len,
                                struct shard_layout *l_p)
{
    uint32_t elem = sd_record_elem_size(type);
    if (!elem)
        return base_errf(err, err_len, -EINVAL,
                         "%s: record type: expected %u (f32) or %u (f16), found %u", name,
                         SD_RECORD_F32, SD_RECORD_F16, type);
    if (dim == 0 || dim > SD_SHARD_DIM_MAX)
        return base_errf(err, err_len, -EINVAL, "%s: dim: expected 1..%u, found %u", name,
                         SD_SHARD_DIM_MAX, dim);
    if (records == 0)
        return base_errf(err, err_len, -EINVAL, "%s: record count: expected at least 1, found 0",
                         name);
    if (block_size % 8 || block_size < SD_SHARD_BLOCK_MIN || block_size > SD_SHARD_BLOCK_MAX)
        return base_errf(err, err_len, -EINVAL,
                         "%s: block size: expected a multiple of 8 in %u..%u, found %u", name,
                         SD_SHARD_BLOCK_MIN, SD_SHARD_BLOCK_MAX, block_size);
    struct shard_layout l = {0};
    if (__builtin_mul_overflow(records, (uint64_t)dim * elem, &l.payload_len))
        return base_errf(err, err_len, -EOVERFLOW,
                         "%s: %" PRIu64 " records x %u elements x %u bytes overflows 64 bits", name,
                         records, dim, elem);
    l.block_count = l.payload_len / block_size + (l.payload_len % block_size != 0);
    if (l.block_count > SD_SHARD_BLOCKS_MAX)
        return base_errf(err, err_len, -EINVAL,
                         "%s: %" PRIu64 " bytes in %u-byte blocks: expected at most %u blocks, "
                         "found %" PRIu64,
                         name, l.payload_len, block_size, SD_SHARD_BLOCKS_MAX, l.block_count);
    uint64_t payload_end;
    if (__builtin_add_overflow((uint64_t)SD_SHARD_PAYLOAD_OFFSET, l.payload_len, &payload_end) ||
        !(l.table_offset = sd__align_up(payload_end, SD_SHARD_ALIGN)) ||
        l.block_count > UINT64_MAX / 8 ||
        __builtin_add_overflow(l.table_offset, l.block_count * 8, &l.file_size) ||
        l.file_size > (uint64_t)INT64_MAX)
        return base_errf(err, err_len, -EOVERFLOW,
                         "%s: a payload of %" PRIu64
                         " bytes makes the file larger than the largest "
                         "file offset",
                         name, l.payload_len);
    *l_p = l;
    return 0;
}

int sd__shard_header_build(const char *name, uint32_t type, uint32_t dim, uint64_t records,
                           uint32_t block_size, char *err, size_t err_len,
                           struct sd_shard_header *h_p)
{
    struct shard_layout l = {0};
    int rc = shard_layout_compute(type, dim, records, block_size, name, err, err_len, &l);
    if (rc < 0)
        return rc;
    struct sd_shard_header h;
    memset(&h, 0, sizeof(h));
    memcpy(h.magic, SD_SHARD_MAGIC, sizeof(h.magic));
    h.version = SD_SHARD_VERSION;
    h.header_size = SD_SHARD_HEADER_SIZE;
    h.record_type = type;
    h.dim = dim;
    h.record_count = records;
    h.block_size = block_size;
    h.payload_len = l.payload_len;
    h.block_count = l.block_count;
    h.payload_offset = SD_SHARD_PAYLOAD_OFFSET;
    h.table_offset = l.table_offset;
    h.file_size = l.file_size;
    *h_p = h;
    return 0;
}

int sd_shard_header_init(uint32_t type, uint32_t dim, uint64_t records, uint32_t block_size,
                         char *err, size_t err_len, struct sd_shard_header *h_p)
{
    return sd__shard_header_build("new shard", type, dim, records, block_size, err, err_len, h_p);
}

uint64_t sd_shard_header_checksum(const struct sd_shard_header *h)
{
    struct sd_shard_header c = *h;
    c.header_checksum = 0;
    return kr_block_checksum(&c, sizeof(c));
}

void sd_shard_header_seal(struct sd_shard_header *h)
{
    h->header_checksum = sd_shard_header_checksum(h);
}

static void shard_hex_bytes(const uint8_t *b, size_t n, char *out, size_t out_len)
{
    size_t pos = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n && pos + 4 <= out_len; i++)
        pos += (size_t)snprintf(out + pos, out_len - pos, "%s%02x", i ? " " : "", b[i]);
}

/* A derived field that differs from what the others imply. */
static int shard_field_mismatch(const char *name, const char *field, uint64_t expected,
                                uint64_t found, char *err, size_t err_len)
{
    return base_errf(err, err_len, -EINVAL,
                     "%s: header field %s: expected %" PRIu64 ", found %" PRIu64, name, field,
                     expected, found);
}

int sd_shard_header_validate(const struct sd_shard_header *h, const char *name, char *err,
                             size_t err_len)
{
    if (memcmp(h->magic, SD_SHARD_MAGIC, sizeof(h->magic)) != 0) {
        char want[32], got[32];
        shard_hex_bytes((const uint8_t *)SD_SHARD_MAGIC, 8, want, sizeof(want));
        shard_hex_bytes(h->magic, 8, got, sizeof(got));
        return base_errf(err, err_len, -EPROTO,
                         "%s: not a shard file: magic expected %s (\"%s\"), found %s", name, want,
                         SD_SHARD_MAGIC, got);
    }
    if (h->version != SD_SHARD_VERSION)
        return base_errf(err, err_len, -EPROTO,
                         "%s: unsupported shard format version: expected %u, found %u", name,
                         SD_SHARD_VERSION, h->version);
    if (h->header_size != SD_SHARD_HEADER_SIZE)
        return base_errf(err, err_len, -EPROTO, "%s: header size: expected %u, found %u", name,
                         SD_SHARD_HEADER_SIZE, h->header_size);
    uint64_t sum = sd_shard_header_checksum(h);
    if (sum != h->header_checksum)
        return base_errf(err, err_len, -EBADMSG,
                         "%s: header checksum mismatch: expected %016" PRIx64
                         " (computed), found %016" PRIx64 " "
                         "(stored); the header is corrupt",
                         name, sum, h->header_checksum);
    if (h->reserved0)
        return base_errf(err, err_len, -EINVAL,
                         "%s: reserved header field at 36: expected 0, "
                         "found %u",
                         name, h->reserved0);
    for (size_t i = 0; i < sizeof(h->reserved) / sizeof(h->reserved[0]); i++)
        if (h->reserved[i])
            return base_errf(err, err_len, -EINVAL,
                             "%s: reserved header field at %zu: expected 0, found %" PRIu64, name,
                             offsetof(struct sd_shard_header, reserved) + 8 * i, h->reserved[i]);

    struct shard_layout l = {0};
    int rc = shard_layout_compute(h->record_type, h->dim, h->record_count, h->block_size, name, err,
                                  err_len, &l);
    if (rc < 0)
        return rc == -EOVERFLOW ? -EINVAL : rc;
    if (h->payload_len != l.payload_len)
        return shard_field_mismatch(name, "payload_len (records x dim x element size)",
                                    l.payload_len, h->payload_len, err, err_len);
    if (h->block_count != l.block_count)
        return shard_field_mismatch(name, "block_count (payload_len / block_size, rounded up)",
                                    l.block_count, h->block_count, err, err_len);
    if (h->payload_offset != SD_SHARD_PAYLOAD_OFFSET)
        return shard_field_mismatch(name, "payload_offset", SD_SHARD_PAYLOAD_OFFSET,
                                    h->payload_offset, err, err_len);
    if (h->table_offset != l.table_offset)
        return shard_field_mismatch(name, "table_offset (payload end, aligned)", l.table_offset,
                                    h->table_offset, err, err_len);
    if (h->file_size != l.file_size)
        return shard_field_mismatch(name, "file_size (table_offset + 8 x block_count)", l.file_size,
                                    h->file_size, err, err_len);
    return 0;
}

/* ---- Reading ---- */

struct sd_shard {
    int fd;
    char *path;
    struct sd_shard_header hdr;
    uint64_t *table;
    uint64_t table_sum; /* computed over the loaded table */
};

/* Non-zero when any of @len bytes at @p is non-zero; its offset in *@at_p. */
static int shard_find_nonzero(const unsigned char *p, size_t len, size_t *at_p)
{
    for (size_t i = 0; i < len; i++)
        if (p[i]) {
            *at_p = i;
            return 1;
        }
    return 0;
}

static int shard_open_common(int dirfd, const char *name, const char *display, int nofollow,
                             char *err, size_t err_len, struct sd_shard **shard_p)
{
    const char *shown = display ? display : name;
    unsigned char *page = NULL;
    struct sd_shard *s = calloc(1, sizeof(*s));
    if (!s)
        return base_errf(err, err_len, -ENOMEM, "%s: out of memory", shown);
    s->fd = -1;
    int rc;
    s->path = strdup(shown);
    if (!s->path) {
        rc = base_errf(err, err_len, -ENOMEM, "%s: out of memory", shown);
        goto fail;
    }
    /* O_NONBLOCK so a FIFO planted in a store cannot hang the open. */
    int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | (nofollow ? O_NOFOLLOW : 0);
    s->fd = openat(dirfd, name, flags);
    if (s->fd < 0) {
        rc = -errno;
        if (rc == -ELOOP && nofollow)
            rc =
                base_errf(err, err_len, -ELOOP,
                          "%s: is a symbolic link; shards in a store must be regular files", shown);
        else
            base_errf(err, err_len, rc, "%s: cannot open: %s", shown, strerror(-rc));
        goto fail;
    }
    struct stat st;
    if (fstat(s->fd, &st) < 0) {
        rc = -errno;
        base_errf(err, err_len, rc, "%s: fstat: %s", shown, strerror(-rc));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = base_errf(err, err_len, -EINVAL, "%s: expected a regular file, found file type 0%o",
                       shown, (unsigned)(st.st_mode & S_IFMT));
        goto fail;
    }
    if (fcntl(s->fd, F_SETFL, 0) < 0) {
        rc = -errno;
        base_errf(err, err_len, rc, "%s: fcntl(F_SETFL): %s", shown, strerror(-rc));
        goto fail;
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size < SD_SHARD_HEADER_SIZE) {
        rc =
            base_errf(err, err_len, -EIO,
                      "%s: truncated: a shard header needs %u bytes, found a %" PRIu64 "-byte file",
                      shown, SD_SHARD_HEADER_SIZE, size);
        goto fail;
    }
    page = malloc(SD_SHARD_PAYLOAD_OFFSET);
    if (!page) {
        rc = base_errf(err, err_len, -ENOMEM, "%s: out of memory", shown);
        goto fail;
    }
    size_t want = size < SD_SHARD_PAYLOAD_OFFSET ? (size_t)size : SD_SHARD_PAYLOAD_OFFSET;
    ssize_t got = base_pread_full(s->fd, page, want, 0);
    if (got < 0 || (size_t)got != want) {
        rc = got < 0 ? (int)got : -EIO;
        base_errf(err, err_len, rc, "%s: reading the header: expected %zu bytes, %s", shown, want,
                  got < 0 ? strerror((int)-got) : "found fewer");
        goto fail;
    }
    memcpy(&s->hdr, page, sizeof(s->hdr));
    rc = sd_shard_header_validate(&s->hdr, shown, err, err_len);
    if (rc < 0)
        goto fail;
    if (size != s->hdr.file_size) {
        rc = base_errf(err, err_len, -EIO,
                       "%s: %s: the header says %" PRIu64 " bytes, found %" PRIu64, shown,
                       size < s->hdr.file_size ? "truncated" : "trailing bytes after the table",
                       s->hdr.file_size, size);
        goto fail;
    }
    size_t at;
    if (shard_find_nonzero(page + SD_SHARD_HEADER_SIZE,
                           SD_SHARD_PAYLOAD_OFFSET - SD_SHARD_HEADER_SIZE, &at)) {
        rc = base_errf(
            err, err_len, -EBADMSG,
            "%s: header padding: expected zero bytes up to offset %u, found 0x%02x at %zu", shown,
            SD_SHARD_PAYLOAD_OFFSET, page[SD_SHARD_HEADER_SIZE + at], SD_SHARD_HEADER_SIZE + at);
        goto fail;
    }
    /* The size check above bounds the table by the file's real length. */
    size_t table_bytes = (size_t)(s->hdr.block_count * 8);
    s->table = malloc(table_bytes);
    if (!s->table) {
        rc = base_errf(err, err_len, -ENOMEM, "%s: out of memory for a %zu-byte checksum table",
                       shown, table_bytes);
        goto fail;
    }
    got = base_pread_full(s->fd, s->table, table_bytes, s->hdr.table_offset);
    if (got < 0 || (size_t)got != table_bytes) {
        rc = got < 0 ? (int)got : -EIO;
        base_errf(err, err_len, rc,
                  "%s: reading the checksum table: expected %zu bytes at %" PRIu64 ", %s", shown,
                  table_bytes, s->hdr.table_offset, got < 0 ? strerror((int)-got) : "found fewer");
        goto fail;
    }
    /* A table that fails its checksum is kept: verification then names the
     * block whose entry is wrong instead of refusing the whole file. */
    s->table_sum = kr_block_checksum(s->table, table_bytes);
    free(page);
    *shard_p = s;
    return 0;

fail:
    free(page);
    sd_shard_close(s);
    return rc;
}

int sd_shard_open(const char *path, char *err, size_t err_len, struct sd_shard **shard_p)
{
    return shard_open_common(AT_FDCWD, path, NULL, 0, err, err_len, shard_p);
}

int sd_shard_openat(int dirfd, const char *name, const char *display, char *err, size_t err_len,
                    struct sd_shard **shard_p)
{
    return shard_open_common(dirfd, name, display, 1, err, err_len, shard_p);
}

void sd_shard_close(struct sd_shard *s)
{
    if (!s)
        return;
    if (s->fd >= 0)
        close(s->fd);
    free(s->table);
    free(s->path);
    free(s);
}

const struct sd_shard_header *sd_shard_header_get(const struct sd_shard *s)
{
    return &s->hdr;
}

const char *sd_shard_path(const struct sd_shard *s)
{
    return s->path;
}

int sd_shard_fd(const struct sd_shard *s)
{
    return s->fd;
}

uint64_t sd_shard_payload_offset(const struct sd_shard *s)
{
    return s->hdr.payload_offset;
}

uint64_t sd_shard_payload_len(const struct sd_shard *s)
{
    return s->hdr.payload_len;
}

static int shard_table_ok(const struct sd_shard *s)
{
    return s->table_sum == s->hdr.table_checksum;
}

int sd_shard_table(const struct sd_shard *s, char *err, size_t err_len, const uint64_t **table_p,
                   uint64_t *count_p)
{
    if (!shard_table_ok(s))
        return base_errf(err, err_len, -EBADMSG,
                         "%s: checksum table corrupt: table checksum expected %016" PRIx64
                         " (header), "
                         "found %016" PRIx64,
                         s->path, s->hdr.table_checksum, s->table_sum);
    *table_p = s->table;
    *count_p = s->hdr.block_count;
    return 0;
}

/* Checks whole blocks [@first, @first + n) held at @buf (@len bytes). */
static int shard_check_blocks(const struct sd_shard *s, const unsigned char *buf, uint64_t first,
                              size_t len, char *err, size_t err_len, struct sd_shard_fault *fault)
{
    uint32_t bs = s->hdr.block_size;
    long bad = kr_block_verify(buf, len, bs, s->table + first);
    if (bad == -1)
        return 0;
    if (bad < 0) /* block sizes were validated at open */
        return base_errf(err, err_len, (int)bad, "%s: block checksum: invalid block size %u",
                         s->path, bs);
    uint64_t idx = first + (uint64_t)bad;
    size_t off = (size_t)bad * bs;
    size_t n = len - off < bs ? len - off : bs;
    uint64_t found = kr_block_checksum(buf + off, n);
    uint64_t start = s->hdr.payload_offset + idx * bs;
    struct sd_shard_fault f = {idx, s->table[idx], found, !shard_table_ok(s)};
    if (fault)
        *fault = f;
    if (f.table_corrupt)
        return base_errf(err, err_len, -EBADMSG,
                         "%s: block %" PRIu64 " of %" PRIu64
                         ": checksum table entry corrupt (table checksum "
                         "expected %016" PRIx64 ", found %016" PRIx64 "): entry says %016" PRIx64
                         ", the payload's "
                         "bytes %" PRIu64 "..%" PRIu64 " give %016" PRIx64,
                         s->path, idx, s->hdr.block_count, s->hdr.table_checksum, s->table_sum,
                         f.expected, start, (start + n), found);
    return base_errf(err, err_len, -EBADMSG,
                     "%s: block %" PRIu64 " of %" PRIu64 " corrupt (file bytes %" PRIu64
                     "..%" PRIu64 "): checksum expected "
                     "%016" PRIx64 " (table), found %016" PRIx64,
                     s->path, idx, s->hdr.block_count, start, (start + n), f.expected, found);
}

int sd_shard_verify_mem(const struct sd_shard *s, const void *buf, uint64_t payload_off,
                        uint64_t len, char *err, size_t err_len, struct sd_shard_fault *fault)
{
    uint64_t bs = s->hdr.block_size, plen = s->hdr.payload_len;
    if (payload_off % bs || payload_off > plen || len > plen - payload_off ||
        (len % bs && payload_off + len != plen))
        return base_errf(err, err_len, -EINVAL,
                         "%s: verify range: expected whole %" PRIu64
                         "-byte blocks within a %" PRIu64 "-byte "
                         "payload, found %" PRIu64 " bytes at %" PRIu64,
                         s->path, bs, plen, len, payload_off);
    if (len == 0)
        return 0;
    return shard_check_blocks(s, buf, payload_off / bs, (size_t)len, err, err_len, fault);
}

int sd_shard_verify(const struct sd_shard *s, char *err, size_t err_len,
                    struct sd_shard_fault *fault)
{
    uint64_t bs = s->hdr.block_size, plen = s->hdr.payload_len;
    /* Read several blocks per call; a block never straddles two reads. No
     * more than the payload's blocks: a small shard gets a small buffer
     * (still at least one block, which holds the padding before the table). */
    uint64_t chunk = (8u << 20) / bs * bs;
    if (chunk == 0)
        chunk = bs;
    if (chunk > (plen + bs - 1) / bs * bs)
        chunk = (plen + bs - 1) / bs * bs;
    unsigned char *buf = malloc((size_t)chunk);
    if (!buf)
        return base_errf(err, err_len, -ENOMEM,
                         "%s: out of memory for a %" PRIu64 "-byte read buffer", s->path, chunk);
    int rc = 0;
    for (uint64_t off = 0; off < plen; off += chunk) {
        size_t n = (size_t)(plen - off < chunk ? plen - off : chunk);
        uint64_t at = s->hdr.payload_offset + off;
        ssize_t got = base_pread_full(s->fd, buf, n, at);
        if (got < 0 || (size_t)got != n) {
            rc = got < 0 ? (int)got : -EIO;
            base_errf(err, err_len, rc,
                      "%s: reading the payload: expected %zu bytes at %" PRIu64 ", %s", s->path, n,
                      at, got < 0 ? strerror((int)-got) : "found fewer");
            goto out;
        }
        rc = shard_check_blocks(s, buf, off / bs, n, err, err_len, fault);
        if (rc < 0)
            goto out;
    }
    uint64_t pad_at = s->hdr.payload_offset + plen;
    size_t pad = (size_t)(s->hdr.table_offset - pad_at);
    ssize_t got = base_pread_full(s->fd, buf, pad, pad_at);
    if (got < 0 || (size_t)got != pad) {
        rc = got < 0 ? (int)got : -EIO;
        base_errf(err, err_len, rc,
                  "%s: reading the payload padding: expected %zu bytes at %" PRIu64 ", %s", s->path,
                  pad, pad_at, got < 0 ? strerror((int)-got) : "found fewer");
        goto out;
    }
    size_t bad;
    if (shard_find_nonzero(buf, pad, &bad)) {
        rc = base_errf(err, err_len, -EBADMSG,
                       "%s: payload padding: expected zero bytes up to offset %" PRIu64
                       ", found 0x%02x "
                       "at %" PRIu64,
                       s->path, s->hdr.table_offset, buf[bad], (pad_at + bad));
        goto out;
    }
    if (!shard_table_ok(s)) /* every block matched a table the header disowns */
        rc = base_errf(err, err_len, -EBADMSG,
                       "%s: checksum table corrupt: table checksum expected %016" PRIx64
                       " (header), "
                       "found %016" PRIx64,
                       s->path, s->hdr.table_checksum, s->table_sum);
out:
    free(buf);
    return rc;
}
