#include "stagingd/shard.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/parse.h"
#include "shard_internal.h"

struct sd_store {
    int dirfd;
    char *path;
    size_t count;
    struct sd_store_entry *entries;
    size_t *lines; /* manifest line of each entry, for messages */
};

/* ---- Names and entries ---- */

int sd_store_name_check(const char *name, char *err, size_t err_len)
{
    size_t n = strnlen(name, SD_STORE_NAME_MAX + 1);
    if (n == 0)
        return base_errf(err, err_len, -EINVAL, "shard name: expected 1..%d bytes, found none",
                         SD_STORE_NAME_MAX);
    if (n > SD_STORE_NAME_MAX)
        return base_errf(err, err_len, -EINVAL,
                         "shard name '%.40s...': expected at most %d bytes, found more", name,
                         SD_STORE_NAME_MAX);
    if (strchr(name, '/') || strstr(name, ".."))
        return base_errf(err, err_len, -EINVAL,
                         "shard name '%s': path traversal: expected a plain file name in the store "
                         "directory, found '/' or '..'",
                         name);
    if (name[0] == '.')
        return base_errf(err, err_len, -EINVAL,
                         "shard name '%s': expected a name not starting with '.', found one", name);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-';
        if (!ok)
            return base_errf(
                err, err_len, -EINVAL,
                "shard name '%s': expected only [A-Za-z0-9._-], found byte 0x%02x at %zu", name, c,
                i);
    }
    return 0;
}

int sd_store_entry_from_header(const char *name, const struct sd_shard_header *h, char *err,
                               size_t err_len, struct sd_store_entry *e_p)
{
    int rc = sd_store_name_check(name, err, err_len);
    if (rc < 0)
        return rc;
    struct sd_store_entry e;
    memset(&e, 0, sizeof(e));
    memcpy(e.name, name, strlen(name) + 1);
    e.record_type = h->record_type;
    e.dim = h->dim;
    e.block_size = h->block_size;
    e.records = h->record_count;
    e.payload_len = h->payload_len;
    e.blocks = h->block_count;
    e.table_checksum = h->table_checksum;
    *e_p = e;
    return 0;
}

/* Compares a manifest line with the shard's header; the first difference
 * is the error. */
static int store_entry_match(const struct sd_store_entry *e, const struct sd_shard_header *h,
                             const char *display, size_t line, char *err, size_t err_len)
{
    struct {
        const char *field;
        uint64_t listed, found;
    } f[] = {
        {"record type", e->record_type, h->record_type},
        {"dim", e->dim, h->dim},
        {"records", e->records, h->record_count},
        {"block size", e->block_size, h->block_size},
        {"payload bytes", e->payload_len, h->payload_len},
        {"blocks", e->blocks, h->block_count},
    };
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        if (f[i].listed != f[i].found)
            return base_errf(err, err_len, -EINVAL,
                             "%s: %s mismatch: expected %" PRIu64
                             " (MANIFEST line %zu), found %" PRIu64 " (shard header)",
                             display, f[i].field, f[i].listed, line, f[i].found);
    if (e->table_checksum != h->table_checksum)
        return base_errf(err, err_len, -EINVAL,
                         "%s: table checksum mismatch: expected %016" PRIx64
                         " (MANIFEST line %zu), "
                         "found %016" PRIx64 " (shard header)",
                         display, e->table_checksum, line, h->table_checksum);
    return 0;
}

/* ---- Writing the manifest ---- */

static int store_fsync_dir(const char *dir, char *err, size_t err_len)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        int rc = -errno;
        return base_errf(err, err_len, rc, "%s: open for fsync: %s", dir, strerror(-rc));
    }
    int rc = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    if (rc < 0)
        return base_errf(err, err_len, rc, "%s: fsync: %s", dir, strerror(-rc));
    return 0;
}

int sd_store_manifest_write(const char *dir, const struct sd_store_entry *entries, size_t n,
                            int do_fsync, char *err, size_t err_len)
{
    for (size_t i = 0; i < n; i++) {
        int rc = sd_store_name_check(entries[i].name, err, err_len);
        if (rc < 0)
            return rc;
        if (!sd_record_type_name(entries[i].record_type))
            return base_errf(err, err_len, -EINVAL, "%s: record type %u is not f32 or f16",
                             entries[i].name, entries[i].record_type);
    }
    char path[4096], tmp[4096];
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, SD_STORE_MANIFEST) >= sizeof(path) ||
        (size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp))
        return base_errf(err, err_len, -ENAMETOOLONG, "%s: path too long", dir);
    FILE *f = fopen(tmp, "we");
    if (!f) {
        int rc = -errno;
        return base_errf(err, err_len, rc, "%s: cannot create: %s", tmp, strerror(-rc));
    }
    int rc = 0;
    fprintf(f, "%s %u\n", SD_STORE_FORMAT_TAG, SD_STORE_FORMAT_VERSION);
    fprintf(f, "# name type dim records block_size payload_bytes blocks table_checksum\n");
    for (size_t i = 0; i < n; i++) {
        const struct sd_store_entry *e = &entries[i];
        fprintf(f, "%s %s %u %" PRIu64 " %u %" PRIu64 " %" PRIu64 " %016" PRIx64 "\n", e->name,
                sd_record_type_name(e->record_type), e->dim, e->records, e->block_size,
                e->payload_len, e->blocks, e->table_checksum);
    }
    if (fflush(f) != 0 || ferror(f) || (do_fsync && fsync(fileno(f)) < 0))
        rc = errno ? -errno : -EIO;
    if (fclose(f) != 0 && rc == 0)
        rc = errno ? -errno : -EIO;
    if (rc < 0) {
        unlink(tmp);
        return base_errf(err, err_len, rc, "%s: write: %s", tmp, strerror(-rc));
    }
    if (rename(tmp, path) < 0) {
        rc = -errno;
        unlink(tmp);
        return base_errf(err, err_len, rc, "%s: rename to %s: %s", tmp, path, strerror(-rc));
    }
    return do_fsync ? store_fsync_dir(dir, err, err_len) : 0;
}

/* ---- Parsing the manifest ---- */

/* Strict unsigned decimal: digits only (base_parse_u64 would take 0x too),
 * no sign, no overflow. */
static int store_parse_u64(const char *s, uint64_t *v_p)
{
    if (!*s || s[strspn(s, "0123456789")] != '\0')
        return -EINVAL;
    return base_parse_u64(s, 0, UINT64_MAX, v_p, NULL, 0);
}

static int store_parse_u32(const char *s, uint32_t *v_p)
{
    if (!*s || s[strspn(s, "0123456789")] != '\0')
        return -EINVAL;
    return base_parse_u32(s, 0, UINT32_MAX, v_p, NULL, 0);
}

static int store_parse_hex64(const char *s, uint64_t *v_p)
{
    if (strlen(s) != 16)
        return -EINVAL;
    uint64_t v = 0;
    for (; *s; s++) {
        int d;
        if (*s >= '0' && *s <= '9')
            d = *s - '0';
        else if (*s >= 'a' && *s <= 'f')
            d = *s - 'a' + 10;
        else
            return -EINVAL;
        v = v << 4 | (uint64_t)d;
    }
    *v_p = v;
    return 0;
}

#define STORE_FIELDS 8

/* Parses one shard line (modified in place) into *@e_p. */
static int store_parse_line(char *line, const char *mpath, size_t lineno, char *err, size_t err_len,
                            struct sd_store_entry *e_p)
{
    static const char *const names[STORE_FIELDS] = {"name",    "type",          "dim",
                                                    "records", "block_size",    "payload_bytes",
                                                    "blocks",  "table_checksum"};
    char *field[STORE_FIELDS];
    size_t nf = 0;
    char *save = NULL;
    for (char *tok = strtok_r(line, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
        if (nf == STORE_FIELDS)
            return base_errf(err, err_len, -EINVAL,
                             "%s line %zu: expected %d fields (%s ... %s), found more", mpath,
                             lineno, STORE_FIELDS, names[0], names[STORE_FIELDS - 1]);
        field[nf++] = tok;
    }
    if (nf != STORE_FIELDS)
        return base_errf(err, err_len, -EINVAL,
                         "%s line %zu: expected %d fields (name type dim records block_size "
                         "payload_bytes blocks table_checksum), found %zu",
                         mpath, lineno, STORE_FIELDS, nf);
    char why[SD_ERR_LEN];
    int rc = sd_store_name_check(field[0], why, sizeof(why));
    if (rc < 0)
        return base_errf(err, err_len, rc, "%s line %zu: %s", mpath, lineno, why);
    struct sd_store_entry e;
    memset(&e, 0, sizeof(e));
    memcpy(e.name, field[0], strlen(field[0]) + 1);
    if (sd_record_type_parse(field[1], &e.record_type) < 0)
        return base_errf(err, err_len, -EINVAL,
                         "%s line %zu: type: expected f32 or f16, found '%s'", mpath, lineno,
                         field[1]);
    int bad = -1;
    if (store_parse_u32(field[2], &e.dim) < 0)
        bad = 2;
    else if (store_parse_u64(field[3], &e.records) < 0)
        bad = 3;
    else if (store_parse_u32(field[4], &e.block_size) < 0)
        bad = 4;
    else if (store_parse_u64(field[5], &e.payload_len) < 0)
        bad = 5;
    else if (store_parse_u64(field[6], &e.blocks) < 0)
        bad = 6;
    if (bad >= 0)
        return base_errf(err, err_len, -EINVAL,
                         "%s line %zu: %s: expected an unsigned decimal integer, found '%s'", mpath,
                         lineno, names[bad], field[bad]);
    if (store_parse_hex64(field[7], &e.table_checksum) < 0)
        return base_errf(
            err, err_len, -EINVAL,
            "%s line %zu: table_checksum: expected 16 lowercase hex digits, found '%s'", mpath,
            lineno, field[7]);
    *e_p = e;
    return 0;
}

/* Reads @dirfd/MANIFEST whole, NUL-terminated, into *@buf_p. */
static int store_read_manifest(int dirfd, const char *mpath, char *err, size_t err_len,
                               char **buf_p)
{
    int fd = openat(dirfd, SD_STORE_MANIFEST, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        int rc = -errno;
        return base_errf(err, err_len, rc, "%s: cannot open: %s", mpath, strerror(-rc));
    }
    int rc;
    char *buf = NULL;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        base_errf(err, err_len, rc, "%s: fstat: %s", mpath, strerror(-rc));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = base_errf(err, err_len, -EINVAL, "%s: expected a regular file, found file type 0%o",
                       mpath, (unsigned)(st.st_mode & S_IFMT));
        goto out;
    }
    if ((uint64_t)st.st_size > SD_STORE_MANIFEST_MAX) {
        rc = base_errf(err, err_len, -EFBIG, "%s: expected at most %u bytes, found %" PRIu64, mpath,
                       SD_STORE_MANIFEST_MAX, (uint64_t)st.st_size);
        goto out;
    }
    size_t size = (size_t)st.st_size;
    buf = malloc(size + 1);
    if (!buf) {
        rc = base_errf(err, err_len, -ENOMEM, "%s: out of memory", mpath);
        goto out;
    }
    ssize_t got = base_pread_full(fd, buf, size, 0);
    if (got < 0 || (size_t)got != size) {
        rc = got < 0 ? (int)got : -EIO;
        base_errf(err, err_len, rc, "%s: read: expected %zu bytes, %s", mpath, size,
                  got < 0 ? strerror((int)-got) : "found fewer");
        goto out;
    }
    buf[size] = '\0';
    if (memchr(buf, '\0', size)) {
        rc = base_errf(err, err_len, -EINVAL, "%s: expected text, found a NUL byte at %zu", mpath,
                       (size_t)((char *)memchr(buf, '\0', size) - buf));
        goto out;
    }
    *buf_p = buf;
    buf = NULL;
    rc = 0;
out:
    free(buf);
    close(fd);
    return rc;
}

/* Checks the first line, "stagingd-store 1". */
static int store_check_tag(const char *line, const char *mpath, char *err, size_t err_len)
{
    size_t tag_len = strlen(SD_STORE_FORMAT_TAG);
    if (strncmp(line, SD_STORE_FORMAT_TAG " ", tag_len + 1) != 0)
        return base_errf(err, err_len, -EPROTO, "%s line 1: expected \"%s %u\", found \"%.60s\"",
                         mpath, SD_STORE_FORMAT_TAG, SD_STORE_FORMAT_VERSION, line);
    uint32_t version;
    if (store_parse_u32(line + tag_len + 1, &version) < 0)
        return base_errf(err, err_len, -EPROTO, "%s line 1: version: expected %u, found \"%.20s\"",
                         mpath, SD_STORE_FORMAT_VERSION, line + tag_len + 1);
    if (version != SD_STORE_FORMAT_VERSION)
        return base_errf(err, err_len, -EPROTO,
                         "%s: unsupported manifest version: expected %u, found %u", mpath,
                         SD_STORE_FORMAT_VERSION, version);
    return 0;
}

static int store_add_entry(struct sd_store *st, size_t *cap, const struct sd_store_entry *e,
                           size_t lineno)
{
    if (st->count == *cap) {
        size_t ncap = *cap ? *cap * 2 : 16;
        struct sd_store_entry *ne = realloc(st->entries, ncap * sizeof(*ne));
        if (!ne)
            return -ENOMEM;
        st->entries = ne;
        size_t *nl = realloc(st->lines, ncap * sizeof(*nl));
        if (!nl)
            return -ENOMEM;
        st->lines = nl;
        *cap = ncap;
    }
    st->entries[st->count] = *e;
    st->lines[st->count] = lineno;
    st->count++;
    return 0;
}

static int store_parse_manifest(struct sd_store *st, char *text, const char *mpath, char *err,
                                size_t err_len)
{
    size_t cap = 0, lineno = 0;
    char *p = text;
    while (*p) {
        char *nl = strchr(p, '\n');
        if (nl)
            *nl = '\0';
        lineno++;
        char *line = p;
        p = nl ? nl + 1 : p + strlen(p);
        if (strchr(line, '\r'))
            return base_errf(err, err_len, -EINVAL,
                             "%s line %zu: expected '\\n' line ends, found '\\r'", mpath, lineno);
        if (lineno == 1) {
            int rc = store_check_tag(line, mpath, err, err_len);
            if (rc < 0)
                return rc;
            continue;
        }
        if (line[0] == '#')
            continue;
        if (st->count == SD_STORE_SHARDS_MAX)
            return base_errf(err, err_len, -EINVAL, "%s: expected at most %u shards, found more",
                             mpath, SD_STORE_SHARDS_MAX);
        struct sd_store_entry e;
        int rc = store_parse_line(line, mpath, lineno, err, err_len, &e);
        if (rc < 0)
            return rc;
        if (store_add_entry(st, &cap, &e, lineno) < 0)
            return base_errf(err, err_len, -ENOMEM, "%s: out of memory", mpath);
    }
    if (lineno == 0)
        return base_errf(err, err_len, -EPROTO,
                         "%s: expected \"%s %u\" on line 1, found an empty file", mpath,
                         SD_STORE_FORMAT_TAG, SD_STORE_FORMAT_VERSION);
    if (st->count == 0)
        return base_errf(err, err_len, -EINVAL, "%s: expected at least one shard line, found none",
                         mpath);
    return 0;
}

static int store_cmp_entry(const void *a, const void *b)
{
    const struct sd_store_entry *ea = *(const struct sd_store_entry *const *)a;
    const struct sd_store_entry *eb = *(const struct sd_store_entry *const *)b;
    int c = strcmp(ea->name, eb->name);
    return c ? c : (ea > eb) - (ea < eb);
}

static int store_check_duplicates(const struct sd_store *st, const char *mpath, char *err,
                                  size_t err_len)
{
    const struct sd_store_entry **by_name = malloc(st->count * sizeof(*by_name));
    if (!by_name)
        return base_errf(err, err_len, -ENOMEM, "%s: out of memory", mpath);
    for (size_t i = 0; i < st->count; i++)
        by_name[i] = &st->entries[i];
    qsort(by_name, st->count, sizeof(*by_name), store_cmp_entry);
    int rc = 0;
    for (size_t i = 1; i < st->count; i++) {
        if (strcmp(by_name[i - 1]->name, by_name[i]->name) == 0) {
            size_t a = (size_t)(by_name[i - 1] - st->entries),
                   b = (size_t)(by_name[i] - st->entries);
            rc = base_errf(
                err, err_len, -EINVAL,
                "%s: duplicate shard name '%s': expected once, found on lines %zu and %zu", mpath,
                st->entries[a].name, st->lines[a], st->lines[b]);
            break;
        }
    }
    free(by_name);
    return rc;
}

/* ---- Opening ---- */

static int store_display_name(const struct sd_store *st, size_t index, char *out, size_t out_len)
{
    if ((size_t)snprintf(out, out_len, "%s/%s", st->path, st->entries[index].name) >= out_len)
        return -ENAMETOOLONG;
    return 0;
}

int sd_store_shard_open(const struct sd_store *st, size_t index, char *err, size_t err_len,
                        struct sd_shard **shard_p)
{
    if (index >= st->count)
        return base_errf(err, err_len, -ERANGE, "%s: shard index: expected < %zu, found %zu",
                         st->path, st->count, index);
    char display[4096 + SD_STORE_NAME_MAX + 2];
    if (store_display_name(st, index, display, sizeof(display)) < 0)
        return base_errf(err, err_len, -ENAMETOOLONG, "%s: path too long", st->path);
    struct sd_shard *s;
    int rc = sd_shard_openat(st->dirfd, st->entries[index].name, display, err, err_len, &s);
    if (rc < 0)
        return rc;
    rc = store_entry_match(&st->entries[index], sd_shard_header_get(s), display, st->lines[index],
                           err, err_len);
    if (rc < 0) {
        sd_shard_close(s);
        return rc;
    }
    *shard_p = s;
    return 0;
}

void sd_store_close(struct sd_store *st)
{
    if (!st)
        return;
    if (st->dirfd >= 0)
        close(st->dirfd);
    free(st->entries);
    free(st->lines);
    free(st->path);
    free(st);
}

int sd_store_open(const char *dir, char *err, size_t err_len, struct sd_store **store_p)
{
    char *text = NULL;
    char mpath[4096 + sizeof(SD_STORE_MANIFEST) + 1];
    if ((size_t)snprintf(mpath, sizeof(mpath), "%s/%s", dir, SD_STORE_MANIFEST) >= sizeof(mpath))
        return base_errf(err, err_len, -ENAMETOOLONG, "%s: path too long", dir);
    struct sd_store *st = calloc(1, sizeof(*st));
    if (!st)
        return base_errf(err, err_len, -ENOMEM, "%s: out of memory", dir);
    st->dirfd = -1;
    int rc;
    st->path = strdup(dir);
    if (!st->path) {
        rc = base_errf(err, err_len, -ENOMEM, "%s: out of memory", dir);
        goto fail;
    }
    st->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (st->dirfd < 0) {
        rc = -errno;
        base_errf(err, err_len, rc, "%s: cannot open the store directory: %s", dir, strerror(-rc));
        goto fail;
    }
    rc = store_read_manifest(st->dirfd, mpath, err, err_len, &text);
    if (rc < 0)
        goto fail;
    rc = store_parse_manifest(st, text, mpath, err, err_len);
    if (rc < 0)
        goto fail;
    rc = store_check_duplicates(st, mpath, err, err_len);
    if (rc < 0)
        goto fail;
    for (size_t i = 0; i < st->count; i++) {
        struct sd_shard *s;
        char why[SD_ERR_LEN];
        rc = sd_store_shard_open(st, i, why, sizeof(why), &s);
        if (rc < 0) {
            base_errf(err, err_len, rc, "%s (listed on MANIFEST line %zu)", why, st->lines[i]);
            goto fail;
        }
        sd_shard_close(s);
    }
    free(text);
    *store_p = st;
    return 0;

fail:
    free(text);
    sd_store_close(st);
    return rc;
}

const char *sd_store_path(const struct sd_store *st)
{
    return st->path;
}

size_t sd_store_count(const struct sd_store *st)
{
    return st->count;
}

const struct sd_store_entry *sd_store_entry_get(const struct sd_store *st, size_t index)
{
    return index < st->count ? &st->entries[index] : NULL;
}

int sd_store_verify(const struct sd_store *st, sd_store_progress_fn progress, void *arg, char *err,
                    size_t err_len, struct sd_shard_fault *fault)
{
    for (size_t i = 0; i < st->count; i++) {
        struct sd_shard *s;
        int rc = sd_store_shard_open(st, i, err, err_len, &s);
        if (rc < 0)
            return rc;
        rc = sd_shard_verify(s, err, err_len, fault);
        sd_shard_close(s);
        if (rc < 0)
            return rc;
        if (progress && progress(arg, i, st->entries[i].payload_len))
            return base_errf(err, err_len, -ECANCELED, "%s: verification stopped after shard %zu",
                             st->path, i);
    }
    return 0;
}
