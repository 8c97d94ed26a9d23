/* Importing (stagingd/import.h): every input validated first, then the
 * store written into a new directory next to the target, checked, synced
 * and renamed into place; any failure removes the new directory, so the
 * target is either the old store or the new one, never a mix. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "import_internal.h"
#include "kernels/scan.h"
#include "stagingd/shard.h"

#define IMPORT_PATH_MAX 4096

void sd_import_opts_default(struct sd_import_opts *o)
{
    memset(o, 0, sizeof *o);
    o->shard_size = 64ull << 20;
    o->block_size = SD_SHARD_BLOCK_DEFAULT;
    o->do_fsync = 1;
}

/* ---- directories ---- */

/* Whether @name is a file a store directory holds: MANIFEST, shards, and
 * the temporary names their writers use. */
static int import_store_file(const char *name)
{
    size_t n = strlen(name);
    if (strcmp(name, SD_STORE_MANIFEST) == 0 || strcmp(name, SD_STORE_MANIFEST ".tmp") == 0)
        return 1;
    return (n > 4 && strcmp(name + n - 4, ".sds") == 0) ||
           (n > 8 && strcmp(name + n - 8, ".sds.tmp") == 0);
}

/* What is at @dir now: 0 nothing, 1 an empty directory, 2 a directory
 * holding a store's files only; or the refusal. */
static int import_target_state(const char *dir, int force, char *err, size_t err_len)
{
    struct stat st;
    if (lstat(dir, &st) < 0) {
        if (errno == ENOENT)
            return 0;
        int rc = -errno;
        return base_errf(err, err_len, rc, "%s: stat: %s", dir, strerror(-rc));
    }
    if (!S_ISDIR(st.st_mode))
        return base_errf(err, err_len, -EEXIST, "%s exists and is not a directory: nothing written",
                         dir);
    DIR *d = opendir(dir);
    if (!d) {
        int rc = -errno;
        return base_errf(err, err_len, rc, "%s: cannot list: %s", dir, strerror(-rc));
    }
    int state = 1, rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (!force) {
            rc = base_errf(err, err_len, -EEXIST,
                           "%s is not empty: --force replaces a store there; nothing written", dir);
            break;
        }
        if (!import_store_file(de->d_name)) {
            rc = base_errf(err, err_len, -EEXIST,
                           "%s holds '%s', which is no part of a store: --force replaces only a "
                           "store (MANIFEST and *.sds files); nothing written",
                           dir, de->d_name);
            break;
        }
        state = 2;
    }
    closedir(d);
    return rc < 0 ? rc : state;
}

/* Removes the files in @dir (not below it) and @dir itself; best effort. */
static void import_dir_remove(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        int fd = dirfd(d);
        struct dirent *de;
        while ((de = readdir(d)) != NULL)
            if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
                unlinkat(fd, de->d_name, 0);
        closedir(d);
    }
    rmdir(dir);
}

static int import_fsync_path(const char *path, char *err, size_t err_len)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) < 0) {
        int rc = -errno;
        if (fd >= 0)
            close(fd);
        return base_errf(err, err_len, rc, "%s: fsync: %s", path, strerror(-rc));
    }
    close(fd);
    return 0;
}

/* The directory @out_dir is in ("." for a bare name), and its last name;
 * trailing slashes are dropped. */
static int import_split(const char *out_dir, char *parent, char *base, char *err, size_t err_len)
{
    char a[IMPORT_PATH_MAX];
    if ((size_t)snprintf(a, sizeof a, "%s", out_dir) >= sizeof a)
        return base_errf(err, err_len, -ENAMETOOLONG, "%s: path too long", out_dir);
    size_t n = strlen(a);
    while (n > 1 && a[n - 1] == '/')
        a[--n] = '\0';
    char *slash = strrchr(a, '/');
    const char *name = slash ? slash + 1 : a;
    if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return base_errf(err, err_len, -EINVAL, "%s: expected a directory to create, found '%s'",
                         out_dir, a);
    snprintf(base, IMPORT_PATH_MAX, "%s", name);
    if (!slash)
        snprintf(parent, IMPORT_PATH_MAX, ".");
    else if (slash == a)
        snprintf(parent, IMPORT_PATH_MAX, "/");
    else
        snprintf(parent, IMPORT_PATH_MAX, "%.*s", (int)(slash - a), a);
    return 0;
}

/* Moves the new store @tmp to @out. @state says what is at @out (see
 * import_target_state). A store already there is exchanged in one rename
 * where the file system can, else moved aside first; the old one is then
 * removed. */
static int import_install(const char *tmp, const char *out, const char *parent, const char *base,
                          int state, char *err, size_t err_len)
{
    if (state < 2) {
        /* rename(2) replaces an empty directory. */
        if (rename(tmp, out) < 0) {
            int rc = -errno;
            return base_errf(err, err_len, rc, "%s: rename to %s: %s%s", tmp, out, strerror(-rc),
                             rc == -ENOTEMPTY || rc == -EEXIST
                                 ? " (something was written there meanwhile)"
                                 : "");
        }
        return 0;
    }
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, out, RENAME_EXCHANGE) == 0) {
        import_dir_remove(tmp); /* the old store, now at tmp */
        return 0;
    }
    if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) {
        int rc = -errno;
        return base_errf(err, err_len, rc, "%s: exchange with %s: %s", tmp, out, strerror(-rc));
    }
    /* No exchange here: the old store goes aside, the new one in, and the
     * old one back should that fail. */
    char old[IMPORT_PATH_MAX];
    if ((size_t)snprintf(old, sizeof old, "%s/.%s.old-XXXXXX", parent, base) >= sizeof old)
        return base_errf(err, err_len, -ENAMETOOLONG, "%s: path too long", out);
    if (!mkdtemp(old) || rename(out, old) < 0) {
        int rc = -errno;
        rmdir(old);
        return base_errf(err, err_len, rc, "%s: moving the old store aside: %s", out,
                         strerror(-rc));
    }
    if (rename(tmp, out) < 0) {
        int rc = -errno;
        rename(old, out);
        return base_errf(err, err_len, rc, "%s: rename to %s: %s (the old store is back)", tmp, out,
                         strerror(-rc));
    }
    import_dir_remove(old);
    return 0;
}

/* ---- inputs ---- */

struct import_run {
    const struct sd_import_opts *o;
    struct sd_vec_file **files;
    uint32_t dim, type;
    uint64_t rows, done;
    /* the read cursor: input @cur, its row @cur_row */
    size_t cur;
    uint64_t cur_row;
    unsigned char *chunk;
    size_t chunk_rows;
};

static int import_inputs_open(struct import_run *r, char *err, size_t err_len)
{
    const struct sd_import_opts *o = r->o;
    int all_f16 = 1;
    size_t first = o->ninputs; /* the first input of data (not .ivecs) */
    for (size_t i = 0; i < o->ninputs; i++) {
        int rc = sd_vec_open(o->inputs[i], o->format, err, err_len, &r->files[i]);
        if (rc < 0)
            return rc;
        const struct sd_vec_info *in = sd_vec_info_get(r->files[i]);
        if (in->elem == SD_VEC_I32) {
            if (!o->check_only)
                return sd_vec__errf(o->inputs[i], 0, err, err_len, -EINVAL,
                                    ".ivecs holds int32 vectors (an ANN benchmark's ground-truth "
                                    "neighbour ids), not data: a store holds f32 or f16 records; "
                                    "nothing written (stagingd import --check validates an "
                                    ".ivecs file)");
            if (r->dim == 0)
                r->dim = in->dim; /* only ground truth: its dim sizes the chunk */
            continue;
        }
        if (first == o->ninputs) {
            first = i;
            r->dim = in->dim;
        } else if (in->dim != r->dim) {
            return sd_vec__errf(o->inputs[i], in->dim_offset, err, err_len, -EINVAL,
                                "dim %u disagrees with %s's dim %u: the inputs of one store "
                                "share one dim",
                                in->dim, o->inputs[first], r->dim);
        }
        if (r->rows > UINT64_MAX - in->rows)
            return base_errf(err, err_len, -EOVERFLOW, "%s: over 2^64 rows in all", o->inputs[i]);
        r->rows += in->rows;
        all_f16 &= in->elem == SD_VEC_F16;
    }
    r->type = o->record_type ? o->record_type : all_f16 ? SD_RECORD_F16 : SD_RECORD_F32;
    return 0;
}

static int import_progress(struct import_run *r, uint64_t rows)
{
    r->done += rows;
    if (r->o->progress && r->o->progress(r->o->progress_arg, r->done, r->rows) != 0)
        return -ECANCELED;
    return 0;
}

/* The next @n rows, in input order, converted to the store's type, into
 * r->chunk (n <= chunk_rows). */
static int import_rows_next(struct import_run *r, uint64_t n, char *err, size_t err_len)
{
    const size_t rec = (size_t)r->dim * sd_record_elem_size(r->type);
    unsigned char *at = r->chunk;
    while (n > 0) {
        const struct sd_vec_info *in = sd_vec_info_get(r->files[r->cur]);
        if (r->cur_row == in->rows) {
            r->cur++;
            r->cur_row = 0;
            continue;
        }
        uint64_t take = in->rows - r->cur_row < n ? in->rows - r->cur_row : n;
        int rc = sd_vec_read(r->files[r->cur], r->cur_row, take, r->type, err, err_len, at);
        if (rc < 0)
            return rc;
        r->cur_row += take;
        at += take * rec;
        n -= take;
    }
    return 0;
}

/* Reads every row of every input, as the import would: the whole check of
 * --check. */
static int import_check_all(struct import_run *r, struct sd_import_result *res, char *err,
                            size_t err_len)
{
    res->ivecs_min = INT64_MAX;
    res->ivecs_max = INT64_MIN;
    for (size_t i = 0; i < r->o->ninputs; i++) {
        struct sd_vec_file *f = r->files[i];
        const struct sd_vec_info *in = sd_vec_info_get(f);
        const uint64_t per = r->chunk_rows;
        for (uint64_t row = 0; row < in->rows; row += per) {
            const uint64_t n = in->rows - row < per ? in->rows - row : per;
            int rc;
            if (in->elem == SD_VEC_I32) {
                int32_t *v = (int32_t *)(void *)r->chunk;
                rc = sd_vec_read_i32(f, row, n, err, err_len, v);
                for (uint64_t j = 0; rc == 0 && j < n * in->dim; j++) {
                    if (v[j] < 0)
                        rc = sd_vec__errf(r->o->inputs[i],
                                          (row + j / in->dim) * in->row_bytes + 4 +
                                              4 * (j % in->dim),
                                          err, err_len, -EINVAL,
                                          "vector %" PRIu64 " element %" PRIu64
                                          ": neighbour id %" PRId32 " is negative",
                                          row + j / in->dim, j % in->dim, v[j]);
                    res->ivecs_min = v[j] < res->ivecs_min ? v[j] : res->ivecs_min;
                    res->ivecs_max = v[j] > res->ivecs_max ? v[j] : res->ivecs_max;
                }
            } else {
                rc = sd_vec_read(f, row, n, r->type, err, err_len, r->chunk);
            }
            if (rc == 0)
                rc = import_progress(r, n);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

/* ---- writing ---- */

static int import_shard(struct import_run *r, const char *dir, uint64_t index, uint64_t records,
                        struct sd_store_entry *e_p, uint64_t *file_bytes_p, char *err,
                        size_t err_len)
{
    char name[32], path[IMPORT_PATH_MAX];
    snprintf(name, sizeof name, "shard-%06" PRIu64 ".sds", index);
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        return base_errf(err, err_len, -ENAMETOOLONG, "%s: path too long", dir);
    struct sd_shard_writer *w = NULL;
    int rc =
        sd_shard_writer_create(path, r->type, r->dim, records, r->o->block_size, err, err_len, &w);
    if (rc < 0)
        return rc;
    const size_t rec = (size_t)r->dim * sd_record_elem_size(r->type);
    for (uint64_t done = 0; done < records;) {
        const uint64_t n = records - done < r->chunk_rows ? records - done : r->chunk_rows;
        if ((rc = import_rows_next(r, n, err, err_len)) < 0 ||
            (rc = sd_shard_writer_append(w, r->chunk, (size_t)n * rec, err, err_len)) < 0) {
            sd_shard_writer_abort(w);
            return rc;
        }
        done += n;
        if ((rc = import_progress(r, n)) < 0) {
            sd_shard_writer_abort(w);
            return base_errf(err, err_len, rc,
                             "import cancelled after %" PRIu64 " of %" PRIu64
                             " rows; nothing written",
                             r->done, r->rows);
        }
    }
    struct sd_shard_header h;
    if ((rc = sd_shard_writer_finish(w, r->o->do_fsync, err, err_len, &h)) < 0)
        return rc;
    *file_bytes_p += h.file_size;
    return sd_store_entry_from_header(name, &h, err, err_len, e_p);
}

/* Every shard and the MANIFEST into @tmp, then the store opened back. */
static int import_write(struct import_run *r, const char *tmp, struct sd_import_result *res,
                        char *err, size_t err_len)
{
    const struct sd_import_opts *o = r->o;
    const uint64_t rec = (uint64_t)r->dim * sd_record_elem_size(r->type);
    uint64_t per = o->shard_size / rec;
    if (per == 0)
        return base_errf(err, err_len, -EINVAL,
                         "--shard-size %" PRIu64 " bytes is smaller than one record (%u x %s = "
                         "%" PRIu64 " bytes)",
                         o->shard_size, r->dim, sd_record_type_name(r->type), rec);
    /* A shard's record index must fit the scan's 32-bit hit index. */
    if (per > KN_SCAN_MAX_RECORDS - 1)
        per = KN_SCAN_MAX_RECORDS - 1;
    const uint64_t shards = r->rows / per + (r->rows % per != 0);
    if (shards > SD_STORE_SHARDS_MAX)
        return base_errf(err, err_len, -EINVAL,
                         "%" PRIu64 " rows in shards of %" PRIu64 " make %" PRIu64
                         " shards, over a store's %u: raise --shard-size",
                         r->rows, per, shards, SD_STORE_SHARDS_MAX);
    struct sd_store_entry *entries = calloc((size_t)shards, sizeof *entries);
    if (!entries)
        return base_errf(err, err_len, -ENOMEM, "out of memory for %" PRIu64 " shards", shards);
    int rc = 0;
    for (uint64_t s = 0; s < shards && rc == 0; s++) {
        const uint64_t n = s + 1 < shards ? per : r->rows - s * per;
        rc = import_shard(r, tmp, s, n, &entries[s], &res->file_bytes, err, err_len);
    }
    if (rc == 0)
        rc = sd_store_manifest_write(tmp, entries, (size_t)shards, o->do_fsync, err, err_len);
    free(entries);
    if (rc < 0)
        return rc;
    struct sd_store *st = NULL;
    if ((rc = sd_store_open(tmp, err, err_len, &st)) < 0)
        return rc;
    sd_store_close(st);
    res->shards = shards;
    res->payload_bytes = r->rows * rec;
    return 0;
}

int sd_import_store(const struct sd_import_opts *o, char *err, size_t err_len,
                    struct sd_import_input *inputs_p, struct sd_import_result *res_p)
{
    if (o->ninputs == 0 || !o->inputs)
        return base_errf(err, err_len, -EINVAL, "expected at least one input file, found none");
    if (!o->check_only && (!o->out_dir || !o->out_dir[0]))
        return base_errf(err, err_len, -EINVAL, "expected an output directory, found none");
    if (o->record_type != 0 && !sd_record_type_name(o->record_type))
        return base_errf(err, err_len, -EINVAL, "record type %u: expected f32 or f16",
                         o->record_type);
    char parent[IMPORT_PATH_MAX] = "", base[IMPORT_PATH_MAX] = "", tmp[IMPORT_PATH_MAX] = "";
    int state = 0, rc;
    if (!o->check_only) {
        if ((rc = import_split(o->out_dir, parent, base, err, err_len)) < 0)
            return rc;
        /* Refused before anything is read or written. */
        if ((state = import_target_state(o->out_dir, o->force, err, err_len)) < 0)
            return state;
    }
    struct import_run r = {.o = o};
    struct sd_import_result res;
    memset(&res, 0, sizeof res);
    r.files = calloc(o->ninputs, sizeof *r.files);
    if (!r.files)
        return base_errf(err, err_len, -ENOMEM, "out of memory");
    if ((rc = import_inputs_open(&r, err, err_len)) < 0)
        goto out;
    /* The widest a row is in the chunk (f32, i32), of any input. */
    uint32_t widest = r.dim;
    for (size_t i = 0; i < o->ninputs; i++)
        if (sd_vec_info_get(r.files[i])->dim > widest)
            widest = sd_vec_info_get(r.files[i])->dim;
    size_t rec = (size_t)widest * 4;
    r.chunk_rows = SD_VEC__CHUNK / rec ? SD_VEC__CHUNK / rec : 1;
    r.chunk = malloc(r.chunk_rows * rec);
    if (!r.chunk) {
        rc = base_errf(err, err_len, -ENOMEM, "out of memory for the read chunk");
        goto out;
    }
    if (o->check_only) {
        rc = import_check_all(&r, &res, err, err_len);
    } else {
        if ((size_t)snprintf(tmp, sizeof tmp, "%s/.%s.import-XXXXXX", parent, base) >= sizeof tmp) {
            rc = base_errf(err, err_len, -ENAMETOOLONG, "%s: path too long", o->out_dir);
            goto out;
        }
        if (!mkdtemp(tmp)) {
            rc = -errno;
            base_errf(err, err_len, rc, "%s: cannot create a directory next to %s: %s", tmp,
                      o->out_dir, strerror(-rc));
            tmp[0] = '\0';
            goto out;
        }
        rc = import_write(&r, tmp, &res, err, err_len);
        if (rc == 0)
            rc = import_install(tmp, o->out_dir, parent, base, state, err, err_len);
        if (rc == 0) {
            tmp[0] = '\0'; /* it is the store now */
            if (o->do_fsync)
                rc = import_fsync_path(parent, err, err_len);
        }
    }
    if (rc < 0)
        goto out;
    res.rows = r.rows;
    res.dim = r.dim;
    res.record_type = r.type;
    for (size_t i = 0; i < o->ninputs; i++)
        res.input_bytes += sd_vec_info_get(r.files[i])->file_size;
    if (inputs_p) {
        uint64_t first = 0;
        for (size_t i = 0; i < o->ninputs; i++) {
            inputs_p[i].info = *sd_vec_info_get(r.files[i]);
            inputs_p[i].first_row = first;
            if (inputs_p[i].info.elem != SD_VEC_I32)
                first += inputs_p[i].info.rows;
        }
    }
    if (res_p)
        *res_p = res;
out:
    if (tmp[0])
        import_dir_remove(tmp);
    for (size_t i = 0; i < o->ninputs; i++)
        sd_vec_close(r.files[i]);
    free(r.files);
    free(r.chunk);
    return rc;
}
