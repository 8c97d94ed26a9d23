/* Fuzz target "shard": the shard file parser (header, padding, table,
 * payload verification) and the store MANIFEST parser.
 *
 * Input: a mode byte, then
 *   0  MANIFEST text for a store directory holding two valid shards
 *      (shard-a.sds: f32, one block; shard-b.sds: f16, two blocks);
 *   1  a shard file, byte for byte;
 *   2  a shard file as patches over zeros: a u32 file size (at most 1 MiB),
 *      then (u32 offset, u16 length, bytes) records, so a mostly zero 8 KiB
 *      file costs a few hundred input bytes.
 * Promises checked: an accepted store lists only shards that exist, each
 * once, and both verify clean; an accepted shard's header describes the
 * file's real size; verification from the file and from memory agree;
 * a shard that verifies clean has every block's checksum equal to its table
 * entry (recomputed here with the kernels' reference), and a reported bad
 * block really differs. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"
#include "kernels/blockhash_ref.h"
#include "stagingd/shard.h"

const char fz_name[] = "shard";

#define SHARD_FILE_MAX (1u << 20)

static char shard__dir[64];    /* holds store/ and one.sds */
static char shard__store[128]; /* the store: MANIFEST, shard-a.sds, shard-b.sds */
static char shard__file[128];  /* the file the shard modes write */

/* Writes a shard of @records records; fills *@h_p. */
static int shard__make(const char *path, uint32_t type, uint32_t dim, uint64_t records,
                       struct sd_shard_header *h_p)
{
    char err[SD_ERR_LEN];
    struct sd_shard_writer *w;
    int rc = sd_shard_writer_create(path, type, dim, records, SD_SHARD_BLOCK_MIN, err, sizeof err,
                                    &w);
    if (rc < 0)
        fz_fail("setup: %s", err);
    uint64_t len = records * dim * sd_record_elem_size(type);
    uint8_t *p = malloc(len);
    for (uint64_t i = 0; i < len; i++)
        p[i] = (uint8_t)(i * 131 + 7);
    if (sd_shard_writer_append(w, p, len, err, sizeof err) < 0 ||
        sd_shard_writer_finish(w, 0, err, sizeof err, h_p) < 0)
        fz_fail("setup: %s", err);
    free(p);
    return 0;
}

/* Removes what setup made (at exit: the fuzzer never returns otherwise). */
static void shard__cleanup(void)
{
    const char *names[] = {"store/shard-a.sds", "store/shard-b.sds", "store/MANIFEST",
                           "store/MANIFEST.tmp", "one.sds"};
    char path[256];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", shard__dir, names[i]);
        unlink(path);
    }
    rmdir(shard__store);
    rmdir(shard__dir);
}

static void shard__setup(void)
{
    if (shard__dir[0])
        return;
    /* tmpfs when there is one: each input is written and read back. */
    snprintf(shard__dir, sizeof shard__dir, "/dev/shm/fuzz-shard-XXXXXX");
    if (!mkdtemp(shard__dir)) {
        snprintf(shard__dir, sizeof shard__dir, "/tmp/fuzz-shard-XXXXXX");
        if (!mkdtemp(shard__dir))
            fz_fail("setup: mkdtemp: %s", strerror(errno));
    }
    snprintf(shard__store, sizeof shard__store, "%s/store", shard__dir);
    snprintf(shard__file, sizeof shard__file, "%s/one.sds", shard__dir);
    if (mkdir(shard__store, 0700) < 0)
        fz_fail("setup: mkdir: %s", strerror(errno));
    atexit(shard__cleanup);
    char path[256];
    struct sd_shard_header h;
    snprintf(path, sizeof path, "%s/shard-a.sds", shard__store);
    shard__make(path, SD_RECORD_F32, 4, 4, &h);
    snprintf(path, sizeof path, "%s/shard-b.sds", shard__store);
    shard__make(path, SD_RECORD_F16, 2, 1025, &h);
}

/* Replaces @path's contents with @size bytes. */
static void shard__put(const char *path, const void *data, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        fz_fail("open %s: %s", path, strerror(errno));
    if (size && pwrite(fd, data, size, 0) != (ssize_t)size)
        fz_fail("write %s: %s", path, strerror(errno));
    close(fd);
}

/* Mode 2: a zero file of the given size with the patches applied. */
static int shard__put_patched(const uint8_t *in, size_t n)
{
    if (n < 4)
        return -1;
    uint32_t size;
    memcpy(&size, in, 4);
    if (size > SHARD_FILE_MAX)
        return -1;
    int fd = open(shard__file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, size) < 0)
        fz_fail("patch %s: %s", shard__file, strerror(errno));
    for (size_t at = 4; at + 6 <= n;) {
        uint32_t off;
        uint16_t len;
        memcpy(&off, in + at, 4);
        memcpy(&len, in + at + 4, 2);
        at += 6;
        if (len > n - at)
            len = (uint16_t)(n - at);
        if (off < size) {
            size_t k = size - off < len ? size - off : len;
            if (pwrite(fd, in + at, k, off) != (ssize_t)k)
                fz_fail("patch write: %s", strerror(errno));
        }
        at += len;
    }
    close(fd);
    return 0;
}

/* Checks an opened shard: sizes, verification both ways, and the verdict
 * against checksums recomputed here. */
static void shard__check_open(struct sd_shard *s, uint64_t file_size)
{
    const struct sd_shard_header *h = sd_shard_header_get(s);
    if (h->file_size != file_size || h->payload_offset != SD_SHARD_PAYLOAD_OFFSET ||
        h->table_offset + 8 * h->block_count != h->file_size || h->block_count == 0 ||
        h->payload_len == 0 || h->block_size < SD_SHARD_BLOCK_MIN ||
        (h->payload_len + h->block_size - 1) / h->block_size != h->block_count)
        fz_fail("accepted a header that does not describe its %llu-byte file",
                (unsigned long long)file_size);
    char err[SD_ERR_LEN];
    struct sd_shard_fault ff = {0}, fm = {0};
    int rf = sd_shard_verify(s, err, sizeof err, &ff);
    if (rf < 0 && rf != -EBADMSG)
        fz_fail("verify: unexpected %d: %s", rf, err);
    uint8_t *payload = malloc(h->payload_len);
    if (!payload)
        abort();
    if (pread(sd_shard_fd(s), payload, h->payload_len, (off_t)h->payload_offset) !=
        (ssize_t)h->payload_len)
        fz_fail("reading back the payload: %s", strerror(errno));
    int rm = sd_shard_verify_mem(s, payload, 0, h->payload_len, err, sizeof err, &fm);
    if (rm < 0 && rm != -EBADMSG)
        fz_fail("verify_mem: unexpected %d: %s", rm, err);
    /* The file path also checks the padding and the table's own checksum,
     * which the memory path leaves to its caller. */
    if (rm == -EBADMSG && (rf != -EBADMSG || ff.block != fm.block))
        fz_fail("verify_mem names block %llu, verify %s",
                (unsigned long long)fm.block, rf == 0 ? "found it clean" : "another block");
    const uint64_t *table = NULL;
    uint64_t count = 0;
    int table_ok = sd_shard_table(s, err, sizeof err, &table, &count) == 0;
    for (uint64_t b = 0; table_ok && b < h->block_count; b++) {
        uint64_t off = b * h->block_size;
        uint64_t n = h->payload_len - off < h->block_size ? h->payload_len - off : h->block_size;
        uint64_t sum = kr_block_checksum(payload + off, (size_t)n);
        if (rf == 0 && sum != table[b])
            fz_fail("verified clean, yet block %llu sums to %016llx, table %016llx",
                    (unsigned long long)b, (unsigned long long)sum, (unsigned long long)table[b]);
        if (rm == -EBADMSG && b == fm.block && sum == table[b])
            fz_fail("block %llu reported bad, yet it matches its table entry",
                    (unsigned long long)b);
        if (rm == -EBADMSG && b < fm.block && sum != table[b])
            fz_fail("block %llu is bad, yet block %llu was reported first",
                    (unsigned long long)b, (unsigned long long)fm.block);
    }
    free(payload);
}

static int shard__one_file(void)
{
    char err[SD_ERR_LEN];
    struct sd_shard *s = NULL;
    int rc = sd_shard_open(shard__file, err, sizeof err, &s);
    if (rc < 0) {
        if (rc != -EPROTO && rc != -EBADMSG && rc != -EINVAL && rc != -EIO)
            fz_fail("open: unexpected %d: %s", rc, err);
        if (!err[0])
            fz_fail("open refused (%d) without saying why", rc);
        return 1;
    }
    struct stat st;
    if (stat(shard__file, &st) < 0)
        fz_fail("stat: %s", strerror(errno));
    shard__check_open(s, (uint64_t)st.st_size);
    sd_shard_close(s);
    return 0;
}

static int shard__one_manifest(const uint8_t *in, size_t n)
{
    char path[256], err[SD_ERR_LEN];
    snprintf(path, sizeof path, "%s/%s", shard__store, SD_STORE_MANIFEST);
    shard__put(path, in, n);
    struct sd_store *st = NULL;
    int rc = sd_store_open(shard__store, err, sizeof err, &st);
    if (rc < 0) {
        if (!err[0])
            fz_fail("store refused (%d) without saying why", rc);
        return 1;
    }
    size_t count = sd_store_count(st);
    if (count < 1 || count > 2)
        fz_fail("store accepted with %zu shards; the directory holds 2", count);
    for (size_t i = 0; i < count; i++) {
        const struct sd_store_entry *e = sd_store_entry_get(st, i);
        if (strcmp(e->name, "shard-a.sds") != 0 && strcmp(e->name, "shard-b.sds") != 0)
            fz_fail("store accepted a line naming '%s'", e->name);
        if (i && strcmp(e->name, sd_store_entry_get(st, 0)->name) == 0)
            fz_fail("store accepted '%s' twice", e->name);
        struct sd_shard *s = NULL;
        if (sd_store_shard_open(st, i, err, sizeof err, &s) < 0)
            fz_fail("an accepted store's shard %zu does not open: %s", i, err);
        sd_shard_close(s);
    }
    struct sd_shard_fault f;
    if (sd_store_verify(st, NULL, NULL, err, sizeof err, &f) < 0)
        fz_fail("an accepted store of valid shards does not verify: %s", err);
    if (sd_store_entry_get(st, count) != NULL)
        fz_fail("an entry past the end");
    sd_store_close(st);
    return 0;
}

int fz_one(const uint8_t *data, size_t size)
{
    shard__setup();
    if (size < 1)
        return 1;
    switch (data[0] % 3) {
    case 0:
        return shard__one_manifest(data + 1, size - 1);
    case 1:
        if (size - 1 > SHARD_FILE_MAX)
            return 1;
        shard__put(shard__file, data + 1, size - 1);
        return shard__one_file();
    default:
        if (shard__put_patched(data + 1, size - 1) < 0)
            return 1;
        return shard__one_file();
    }
}

/* ---- seeds ---- */

/* A shard file as mode 2 input: its header, payload and table as patches. */
static int shard__seed_patched(const char *dir, const char *name, const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0)
        return -errno;
    uint8_t *file = malloc((size_t)st.st_size);
    if (!file || pread(fd, file, (size_t)st.st_size, 0) != st.st_size) {
        free(file);
        close(fd);
        return -EIO;
    }
    close(fd);
    struct sd_shard_header h;
    memcpy(&h, file, sizeof h);
    uint8_t *out = malloc(16 + sizeof h + h.payload_len + 8 * h.block_count + 32);
    size_t n = 0;
    out[n++] = 2;
    uint32_t size = (uint32_t)st.st_size;
    memcpy(out + n, &size, 4);
    n += 4;
    struct {
        uint64_t off, len;
    } parts[] = {{0, sizeof h}, {h.payload_offset, h.payload_len}, {h.table_offset, 8 * h.block_count}};
    for (size_t i = 0; i < 3; i++) {
        uint32_t off = (uint32_t)parts[i].off;
        uint16_t len = (uint16_t)parts[i].len;
        memcpy(out + n, &off, 4);
        memcpy(out + n + 4, &len, 2);
        n += 6;
        memcpy(out + n, file + off, len);
        n += len;
    }
    int rc = fz_write_file(dir, name, out, n);
    free(out);
    free(file);
    return rc;
}

static int shard__seed_raw(const char *dir, const char *name, const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0)
        return -errno;
    uint8_t *out = malloc((size_t)st.st_size + 1);
    out[0] = 1;
    ssize_t got = pread(fd, out + 1, (size_t)st.st_size, 0);
    close(fd);
    int rc = got == st.st_size ? fz_write_file(dir, name, out, (size_t)st.st_size + 1) : -EIO;
    free(out);
    return rc;
}

int fz_seeds(const char *dir)
{
    shard__setup();
    char a[256], b[256], err[SD_ERR_LEN];
    snprintf(a, sizeof a, "%s/shard-a.sds", shard__store);
    snprintf(b, sizeof b, "%s/shard-b.sds", shard__store);
    /* The MANIFEST the store's own writer makes for both shards. */
    struct sd_store_entry e[2];
    const char *paths[2] = {a, b}, *names[2] = {"shard-a.sds", "shard-b.sds"};
    for (int i = 0; i < 2; i++) {
        struct sd_shard *s;
        if (sd_shard_open(paths[i], err, sizeof err, &s) < 0 ||
            sd_store_entry_from_header(names[i], sd_shard_header_get(s), err, sizeof err, &e[i]) < 0)
            return -EINVAL;
        sd_shard_close(s);
    }
    if (sd_store_manifest_write(shard__store, e, 2, 0, err, sizeof err) < 0)
        return -EIO;
    char mpath[256];
    snprintf(mpath, sizeof mpath, "%s/%s", shard__store, SD_STORE_MANIFEST);
    int fd = open(mpath, O_RDONLY | O_CLOEXEC);
    uint8_t text[4096];
    ssize_t got = fd >= 0 ? pread(fd, text + 1, sizeof text - 1, 0) : -1;
    if (fd >= 0)
        close(fd);
    if (got <= 0)
        return -EIO;
    text[0] = 0;
    int rc = fz_write_file(dir, "seed-manifest", text, (size_t)got + 1);
    if (rc == 0)
        rc = shard__seed_patched(dir, "seed-shard-a", a);
    if (rc == 0)
        rc = shard__seed_patched(dir, "seed-shard-b", b);
    if (rc == 0)
        rc = shard__seed_raw(dir, "seed-shard-a-raw", a);
    return rc < 0 ? rc : 4;
}
