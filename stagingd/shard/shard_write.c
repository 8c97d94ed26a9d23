/* Shard files: the writer (a temporary file, blocks checksummed as they
 * fill, the table and header last, then a rename into place). */
#include "stagingd/shard.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/blockhash_ref.h"
#include "shard_internal.h"

/* ---- Writing ---- */

struct sd_shard_writer {
    int fd;
    char *path;
    char *tmp_path;
    struct sd_shard_header hdr;
    uint64_t *table;
    unsigned char *buf; /* whole blocks, flushed when full */
    size_t buf_cap;
    size_t buf_len;
    uint64_t appended; /* payload bytes taken from the caller */
    uint64_t flushed;  /* payload bytes checksummed and written */
};

void sd_shard_writer_abort(struct sd_shard_writer *w)
{
    if (!w)
        return;
    if (w->fd >= 0) {
        close(w->fd);
        unlink(w->tmp_path);
    }
    free(w->table);
    free(w->buf);
    free(w->tmp_path);
    free(w->path);
    free(w);
}

int sd_shard_writer_create(const char *path, uint32_t type, uint32_t dim, uint64_t records,
                           uint32_t block_size, char *err, size_t err_len,
                           struct sd_shard_writer **w_p)
{
    struct sd_shard_header h;
    int rc = sd__shard_header_build(path, type, dim, records, block_size, err, err_len, &h);
    if (rc < 0)
        return rc;
    if (h.block_count > SIZE_MAX / 8)
        return base_errf(err, err_len, -EOVERFLOW, "%s: %" PRIu64 " blocks do not fit in memory",
                         path, h.block_count);
    struct sd_shard_writer *w = calloc(1, sizeof(*w));
    if (!w)
        return base_errf(err, err_len, -ENOMEM, "%s: out of memory", path);
    w->fd = -1;
    w->hdr = h;
    w->buf_cap = (size_t)block_size * ((4u << 20) / block_size > 0 ? (4u << 20) / block_size : 1);
    w->path = strdup(path);
    size_t plen = strlen(path);
    w->tmp_path = malloc(plen + sizeof(".tmp"));
    w->table = calloc((size_t)h.block_count, 8);
    w->buf = malloc(w->buf_cap);
    if (!w->path || !w->tmp_path || !w->table || !w->buf) {
        rc = base_errf(err, err_len, -ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    memcpy(w->tmp_path, path, plen);
    memcpy(w->tmp_path + plen, ".tmp", sizeof(".tmp"));
    w->fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        rc = -errno;
        base_errf(err, err_len, rc, "%s: cannot create: %s", w->tmp_path, strerror(-rc));
        goto fail;
    }
    *w_p = w;
    return 0;

fail:
    sd_shard_writer_abort(w);
    return rc;
}

/* Checksums and writes @len bytes of whole blocks (the last may be short
 * only at the payload's end). */
static int shard_writer_emit(struct sd_shard_writer *w, const void *data, size_t len, char *err,
                             size_t err_len)
{
    uint32_t bs = w->hdr.block_size;
    long n = kr_block_checksums(data, len, bs, w->table + w->flushed / bs);
    if (n < 0)
        return base_errf(err, err_len, (int)n, "%s: block checksum: invalid block size %u",
                         w->tmp_path, bs);
    int rc = sd__pwrite_full(w->fd, data, len, w->hdr.payload_offset + w->flushed);
    if (rc < 0)
        return base_errf(err, err_len, rc, "%s: write at %" PRIu64 ": %s", w->tmp_path,
                         (w->hdr.payload_offset + w->flushed), strerror(-rc));
    w->flushed += len;
    return 0;
}

int sd_shard_writer_append(struct sd_shard_writer *w, const void *data, size_t len, char *err,
                           size_t err_len)
{
    if (len > w->hdr.payload_len - w->appended)
        return base_errf(err, err_len, -EOVERFLOW,
                         "%s: appending %zu bytes: the payload is declared as %" PRIu64
                         " bytes and %" PRIu64 " "
                         "are written",
                         w->tmp_path, len, w->hdr.payload_len, w->appended);
    const unsigned char *p = data;
    while (len) {
        size_t take;
        if (w->buf_len == 0 && len >= w->buf_cap) {
            /* Whole buffers straight from the caller: no copy. */
            take = len / w->buf_cap * w->buf_cap;
            int rc = shard_writer_emit(w, p, take, err, err_len);
            if (rc < 0)
                return rc;
        } else {
            take = w->buf_cap - w->buf_len < len ? w->buf_cap - w->buf_len : len;
            memcpy(w->buf + w->buf_len, p, take);
            w->buf_len += take;
            if (w->buf_len == w->buf_cap) {
                int rc = shard_writer_emit(w, w->buf, w->buf_len, err, err_len);
                if (rc < 0)
                    return rc;
                w->buf_len = 0;
            }
        }
        p += take;
        len -= take;
        w->appended += take;
    }
    return 0;
}

uint64_t sd_shard_writer_written(const struct sd_shard_writer *w)
{
    return w->appended;
}

int sd_shard_writer_finish(struct sd_shard_writer *w, int do_fsync, char *err, size_t err_len,
                           struct sd_shard_header *h_p)
{
    int rc;
    struct sd_shard_header *h = &w->hdr;
    if (w->appended != h->payload_len) {
        rc = base_errf(err, err_len, -EINVAL,
                       "%s: finishing: the payload is declared as %" PRIu64 " bytes, found %" PRIu64
                       " appended",
                       w->tmp_path, h->payload_len, w->appended);
        goto fail;
    }
    if (w->buf_len) {
        rc = shard_writer_emit(w, w->buf, w->buf_len, err, err_len);
        if (rc < 0)
            goto fail;
        w->buf_len = 0;
    }
    /* Zero the gap to the table (an aligned reader sees it) and write the
     * table; the file's size is then file_size exactly. */
    uint64_t pad_at = h->payload_offset + h->payload_len;
    size_t pad = (size_t)(h->table_offset - pad_at);
    memset(w->buf, 0, pad);
    size_t table_bytes = (size_t)(h->block_count * 8);
    if ((rc = sd__pwrite_full(w->fd, w->buf, pad, pad_at)) < 0 ||
        (rc = sd__pwrite_full(w->fd, w->table, table_bytes, h->table_offset)) < 0) {
        base_errf(err, err_len, rc, "%s: writing the checksum table: %s", w->tmp_path,
                  strerror(-rc));
        goto fail;
    }
    h->table_checksum = kr_block_checksum(w->table, table_bytes);
    sd_shard_header_seal(h);
    memset(w->buf, 0, SD_SHARD_PAYLOAD_OFFSET);
    memcpy(w->buf, h, sizeof(*h));
    if ((rc = sd__pwrite_full(w->fd, w->buf, SD_SHARD_PAYLOAD_OFFSET, 0)) < 0) {
        base_errf(err, err_len, rc, "%s: writing the header: %s", w->tmp_path, strerror(-rc));
        goto fail;
    }
    if (do_fsync && fsync(w->fd) < 0) {
        rc = -errno;
        base_errf(err, err_len, rc, "%s: fsync: %s", w->tmp_path, strerror(-rc));
        goto fail;
    }
    int fd = w->fd;
    w->fd = -1;
    if (close(fd) < 0) {
        rc = -errno;
        base_errf(err, err_len, rc, "%s: close: %s", w->tmp_path, strerror(-rc));
        unlink(w->tmp_path);
        goto fail;
    }
    if (rename(w->tmp_path, w->path) < 0) {
        rc = -errno;
        base_errf(err, err_len, rc, "%s: rename to %s: %s", w->tmp_path, w->path, strerror(-rc));
        unlink(w->tmp_path);
        goto fail;
    }
    if (h_p)
        *h_p = *h;
    sd_shard_writer_abort(w); /* fd is -1: frees only */
    return 0;

fail:
    sd_shard_writer_abort(w);
    return rc;
}
