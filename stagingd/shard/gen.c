/* The synthetic store generator: the record stream (xoshiro256** seeded
 * by splitmix64; its output is part of the test contract), the store plan
 * and writing. */
#include "stagingd/shard.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/parse.h"
#include "base/rand.h"
#include "shard_internal.h"

#define GEN_NAME_FMT "shard-%06" PRIu64 ".sds"
#define GEN_CHUNK_BYTES (4u << 20)

/* ---- The record stream ---- */

static inline uint64_t gen_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/* xoshiro256** (Blackman and Vigna), written from its published definition. */
static inline uint64_t gen_next(uint64_t s[4])
{
    uint64_t result = gen_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = gen_rotl(s[3], 45);
    return result;
}

void sd_gen_seed(uint64_t seed, uint64_t shard, uint64_t state[4])
{
    /* Hash the seed first so nearby seeds and shard numbers do not give
     * related streams; splitmix64 never yields an all-zero xoshiro state in
     * practice, but guard it anyway. */
    uint64_t z = seed;
    uint64_t k = base_splitmix64(&z) ^ (0xd1b54a32d192ed03ULL * (shard + 1));
    for (int i = 0; i < 4; i++)
        state[i] = base_splitmix64(&k);
    if (!(state[0] | state[1] | state[2] | state[3]))
        state[0] = 1;
}

/* A 24-bit draw mapped to [-1, 1) exactly: u * 2^-23 - 1. */
static inline float gen_unit(uint32_t u)
{
    return (float)(int32_t)u * 0x1p-23f - 1.0f;
}

#define GEN_ZERO_DRAW 0x800000u /* the draw that maps to 0.0 */

/* One record of @dim floats; two elements per 64-bit draw. */
static void gen_record_f32(uint64_t s[4], uint32_t dim, float *out)
{
    uint32_t nonzero = 0;
    uint32_t j = 0;
    for (; j + 1 < dim; j += 2) {
        uint64_t r = gen_next(s);
        uint32_t a = (uint32_t)(r >> 40), b = (uint32_t)(r >> 16) & 0xffffff;
        nonzero |= (a ^ GEN_ZERO_DRAW) | (b ^ GEN_ZERO_DRAW);
        out[j] = gen_unit(a);
        out[j + 1] = gen_unit(b);
    }
    if (j < dim) {
        uint32_t a = (uint32_t)(gen_next(s) >> 40);
        nonzero |= a ^ GEN_ZERO_DRAW;
        out[j] = gen_unit(a);
    }
    if (!nonzero)
        out[0] = 1.0f;
}

/* The same stream as gen_record_f32, each element rounded to binary16; the
 * grid's nonzero values are all >= 2^-23, above binary16's smallest
 * subnormal, so a record that is nonzero in f32 stays nonzero. */
static void gen_record_f16(uint64_t s[4], uint32_t dim, uint16_t *out)
{
    uint32_t nonzero = 0;
    uint32_t j = 0;
    for (; j + 1 < dim; j += 2) {
        uint64_t r = gen_next(s);
        uint32_t a = (uint32_t)(r >> 40), b = (uint32_t)(r >> 16) & 0xffffff;
        nonzero |= (a ^ GEN_ZERO_DRAW) | (b ^ GEN_ZERO_DRAW);
        out[j] = sd__f16_from_f32(gen_unit(a));
        out[j + 1] = sd__f16_from_f32(gen_unit(b));
    }
    if (j < dim) {
        uint32_t a = (uint32_t)(gen_next(s) >> 40);
        nonzero |= a ^ GEN_ZERO_DRAW;
        out[j] = sd__f16_from_f32(gen_unit(a));
    }
    if (!nonzero)
        out[0] = 0x3c00; /* 1.0 */
}

void sd_gen_records(uint64_t state[4], uint32_t type, uint32_t dim, uint64_t n, void *out)
{
    if (type == SD_RECORD_F32) {
        float *o = out;
        for (uint64_t i = 0; i < n; i++, o += dim)
            gen_record_f32(state, dim, o);
    } else {
        uint16_t *o = out;
        for (uint64_t i = 0; i < n; i++, o += dim)
            gen_record_f16(state, dim, o);
    }
}

/* ---- The store ---- */

void sd_gen_opts_default(struct sd_gen_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->size = 1ull << 30;
    o->shard_size = 64ull << 20;
    o->dim = 128;
    o->record_type = SD_RECORD_F32;
    o->block_size = SD_SHARD_BLOCK_DEFAULT;
    o->seed = 1;
}

/* The store's shape: how many shards of how many records. */
struct gen_plan {
    uint64_t record_bytes;
    uint64_t per_shard;
    uint64_t records;
    uint64_t shards;
};

static int gen_plan_make(const struct sd_gen_opts *o, char *err, size_t err_len,
                         struct gen_plan *p_p)
{
    struct gen_plan p;
    uint32_t elem = sd_record_elem_size(o->record_type);
    if (!elem)
        return base_errf(err, err_len, -EINVAL, "record type: expected f32 or f16, found %u",
                         o->record_type);
    if (o->dim == 0 || o->dim > SD_SHARD_DIM_MAX)
        return base_errf(err, err_len, -EINVAL, "dim: expected 1..%u, found %u", SD_SHARD_DIM_MAX,
                         o->dim);
    if (o->block_size % 8 || o->block_size < SD_SHARD_BLOCK_MIN ||
        o->block_size > SD_SHARD_BLOCK_MAX)
        return base_errf(err, err_len, -EINVAL,
                         "block size: expected a multiple of 8 in %u..%u, found %u",
                         SD_SHARD_BLOCK_MIN, SD_SHARD_BLOCK_MAX, o->block_size);
    p.record_bytes = (uint64_t)o->dim * elem;
    p.per_shard = o->shard_size / p.record_bytes;
    p.records = o->size / p.record_bytes;
    if (p.per_shard == 0)
        return base_errf(err, err_len, -EINVAL,
                         "shard size: expected at least one %" PRIu64 "-byte record, found %" PRIu64
                         " bytes",
                         p.record_bytes, o->shard_size);
    if (p.records == 0)
        return base_errf(err, err_len, -EINVAL,
                         "size: expected at least one %" PRIu64 "-byte record, found %" PRIu64
                         " bytes",
                         p.record_bytes, o->size);
    p.shards = p.records / p.per_shard + (p.records % p.per_shard != 0);
    if (p.shards > SD_STORE_SHARDS_MAX)
        return base_errf(err, err_len, -EINVAL,
                         "expected at most %u shards, found %" PRIu64
                         " (size / shard size); raise --shard-size",
                         SD_STORE_SHARDS_MAX, p.shards);
    *p_p = p;
    return 0;
}

/* Makes @dir ready: created if missing, refused when non-empty without
 * @force, its MANIFEST removed with @force (so a store is never half old,
 * half new under a valid manifest). */
static int gen_prepare_dir(const char *dir, int force, char *err, size_t err_len)
{
    if (mkdir(dir, 0755) == 0)
        return 0;
    if (errno != EEXIST) {
        int rc = -errno;
        return base_errf(err, err_len, rc, "%s: mkdir: %s", dir, strerror(-rc));
    }
    DIR *d = opendir(dir);
    if (!d) {
        int rc = -errno;
        return base_errf(err, err_len, rc, "%s: expected a directory: %s", dir, strerror(-rc));
    }
    size_t entries = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            entries++;
    int rc = 0;
    if (entries && !force)
        rc = base_errf(err, err_len, -EEXIST,
                       "%s: expected an empty or missing directory, found %zu entries; pass "
                       "--force to write over it",
                       dir, entries);
    else if (entries && unlinkat(dirfd(d), SD_STORE_MANIFEST, 0) < 0 && errno != ENOENT)
        rc = base_errf(err, err_len, -errno, "%s/%s: unlink: %s", dir, SD_STORE_MANIFEST,
                       strerror(errno));
    closedir(d);
    return rc;
}

/* After a forced run: drops shard-NNNNNN.sds files of an older, larger
 * store. Only names this generator writes are touched. */
static int gen_remove_stale(const char *dir, uint64_t shards, char *err, size_t err_len)
{
    DIR *d = opendir(dir);
    if (!d) {
        int rc = -errno;
        return base_errf(err, err_len, rc, "%s: opendir: %s", dir, strerror(-rc));
    }
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        uint64_t idx;
        char digits[32], again[64];
        if (sscanf(de->d_name, "shard-%20[0-9].sds", digits) != 1 ||
            base_parse_size_flags(digits, BASE_PARSE_SIZE_STRICT, &idx, NULL, 0) < 0)
            continue;
        snprintf(again, sizeof(again), GEN_NAME_FMT, idx);
        if (strcmp(again, de->d_name) != 0 || idx < shards)
            continue;
        if (unlinkat(dirfd(d), de->d_name, 0) < 0) {
            rc = base_errf(err, err_len, -errno, "%s/%s: unlink: %s", dir, de->d_name,
                           strerror(errno));
            break;
        }
    }
    closedir(d);
    return rc;
}

static int gen_shard(const struct sd_gen_opts *o, const struct gen_plan *p, uint64_t index,
                     uint64_t records, void *buf, uint64_t *done, char *err, size_t err_len,
                     struct sd_store_entry *e_p)
{
    char name[64], path[4096 + 64];
    snprintf(name, sizeof(name), GEN_NAME_FMT, index);
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", o->out_dir, name) >= sizeof(path))
        return base_errf(err, err_len, -ENAMETOOLONG, "%s: path too long", o->out_dir);
    struct sd_shard_writer *w;
    int rc = sd_shard_writer_create(path, o->record_type, o->dim, records, o->block_size, err,
                                    err_len, &w);
    if (rc < 0)
        return rc;
    uint64_t state[4];
    sd_gen_seed(o->seed, index, state);
    uint64_t chunk = GEN_CHUNK_BYTES / p->record_bytes ? GEN_CHUNK_BYTES / p->record_bytes : 1;
    uint64_t total = p->records * p->record_bytes;
    for (uint64_t r = 0; r < records; r += chunk) {
        uint64_t n = records - r < chunk ? records - r : chunk;
        sd_gen_records(state, o->record_type, o->dim, n, buf);
        rc = sd_shard_writer_append(w, buf, (size_t)(n * p->record_bytes), err, err_len);
        if (rc < 0) {
            sd_shard_writer_abort(w);
            return rc;
        }
        *done += n * p->record_bytes;
        if (o->progress)
            o->progress(o->progress_arg, *done, total);
    }
    struct sd_shard_header h;
    rc = sd_shard_writer_finish(w, o->do_fsync, err, err_len, &h);
    if (rc < 0)
        return rc;
    return sd_store_entry_from_header(name, &h, err, err_len, e_p);
}

int sd_gen_store(const struct sd_gen_opts *o, char *err, size_t err_len,
                 struct sd_gen_result *res_p)
{
    if (!o->out_dir || !o->out_dir[0])
        return base_errf(err, err_len, -EINVAL, "expected an output directory, found none");
    struct gen_plan p;
    int rc = gen_plan_make(o, err, err_len, &p);
    if (rc < 0)
        return rc;
    rc = gen_prepare_dir(o->out_dir, o->force, err, err_len);
    if (rc < 0)
        return rc;
    uint64_t chunk = GEN_CHUNK_BYTES / p.record_bytes ? GEN_CHUNK_BYTES / p.record_bytes : 1;
    void *buf = malloc((size_t)(chunk * p.record_bytes));
    struct sd_store_entry *entries = calloc((size_t)p.shards, sizeof(*entries));
    if (!buf || !entries) {
        rc = base_errf(err, err_len, -ENOMEM, "out of memory");
        goto out;
    }
    struct sd_gen_result res = {p.shards, p.records, 0, 0, 0};
    uint64_t done = 0;
    for (uint64_t i = 0; i < p.shards; i++) {
        uint64_t records = i + 1 < p.shards ? p.per_shard : p.records - i * p.per_shard;
        rc = gen_shard(o, &p, i, records, buf, &done, err, err_len, &entries[i]);
        if (rc < 0)
            goto out;
        res.payload_bytes += entries[i].payload_len;
        res.blocks += entries[i].blocks;
        struct sd_shard_header h;
        sd_shard_header_init(o->record_type, o->dim, records, o->block_size, NULL, 0, &h);
        res.file_bytes += h.file_size;
    }
    if (o->force && (rc = gen_remove_stale(o->out_dir, p.shards, err, err_len)) < 0)
        goto out;
    rc = sd_store_manifest_write(o->out_dir, entries, (size_t)p.shards, o->do_fsync, err, err_len);
    if (rc < 0)
        goto out;
    if (res_p)
        *res_p = res;
out:
    free(entries);
    free(buf);
    return rc;
}
