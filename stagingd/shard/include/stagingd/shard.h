/* The shard module: shard files (format v1: a fixed header, a payload of
 * packed vector records at an aligned offset, and a table of per-block
 * checksums), stores (a directory of shards and a MANIFEST) and the
 * synthetic store generator (docs/shard-format.md). Writing, opening,
 * validating and verifying.
 *
 * Every function that can fail on input takes @err/@err_len: on failure it
 * writes one line (NUL-terminated when @err_len > 0) naming the file and
 * what was expected and found. @err may be NULL. Nothing here prints. */
#ifndef STAGINGD_SHARD_H
#define STAGINGD_SHARD_H

#include <stddef.h>
#include <stdint.h>

#define SD_SHARD_MAGIC "SDSHARD" /* 8 bytes with its NUL */
#define SD_SHARD_VERSION 1u
#define SD_SHARD_HEADER_SIZE 128u
/* The payload and the table start on this boundary, so both can be read
 * with O_DIRECT and registered; the gaps before them are zero. */
#define SD_SHARD_ALIGN 4096u
#define SD_SHARD_PAYLOAD_OFFSET 4096u
#define SD_SHARD_BLOCK_MIN (4u << 10)
#define SD_SHARD_BLOCK_MAX (64u << 20)
#define SD_SHARD_BLOCK_DEFAULT (256u << 10)
#define SD_SHARD_DIM_MAX 65536u
/* Bounds the table a reader loads (128 MiB): 64 GiB of payload in 4 KiB
 * blocks, 4 TiB in 256 KiB blocks. */
#define SD_SHARD_BLOCKS_MAX (1u << 24)
/* A suggested size for @err buffers: long enough for two paths. */
#define SD_ERR_LEN 1024

enum sd_record_type {
    SD_RECORD_F32 = 1,
    SD_RECORD_F16 = 2,
};

/* The on-disk header, little-endian, at offset 0. All reserved fields are
 * zero. header_checksum is kr_block_checksum() of these 128 bytes with
 * header_checksum itself zeroed. */
struct sd_shard_header {
    uint8_t magic[8];      /* SD_SHARD_MAGIC */
    uint32_t version;      /* SD_SHARD_VERSION */
    uint32_t header_size;  /* SD_SHARD_HEADER_SIZE */
    uint32_t record_type;  /* enum sd_record_type */
    uint32_t dim;          /* elements per record, 1..SD_SHARD_DIM_MAX */
    uint64_t record_count; /* >= 1 */
    uint32_t block_size;   /* bytes, multiple of 8, BLOCK_MIN..BLOCK_MAX */
    uint32_t reserved0;
    uint64_t payload_len;    /* record_count * dim * element size */
    uint64_t block_count;    /* ceil(payload_len / block_size), <= SD_SHARD_BLOCKS_MAX */
    uint64_t payload_offset; /* SD_SHARD_PAYLOAD_OFFSET */
    uint64_t table_offset;   /* payload end rounded up to SD_SHARD_ALIGN */
    uint64_t file_size;      /* table_offset + 8 * block_count */
    uint64_t table_checksum; /* kr_block_checksum() of the table's bytes */
    uint64_t reserved[4];
    uint64_t header_checksum;
};

/* Which block failed and why; filled by the verify functions on -EBADMSG. */
struct sd_shard_fault {
    uint64_t block;    /* index of the first bad block */
    uint64_t expected; /* the table's entry */
    uint64_t found;    /* the checksum of the bytes read */
    int table_corrupt; /* the table fails its own checksum: the entry, not the data, is suspect */
};

/* ---- Records ---- */

/* Bytes per element of @type: 4, 2, or 0 for an unknown type. */
uint32_t sd_record_elem_size(uint32_t type);

/* "f32", "f16", or NULL for an unknown type. */
const char *sd_record_type_name(uint32_t type);

/* Parses "f32" or "f16". Returns 0, or -EINVAL for anything else. */
int sd_record_type_parse(const char *s, uint32_t *type_p);

/* IEEE 754 binary32 to binary16, rounding to nearest, ties to even;
 * overflow gives infinity, NaN stays NaN. */
uint16_t sd_f16_from_f32(float f);

/* binary16 to binary32, exact. */
float sd_f16_to_f32(uint16_t h);

/* ---- Headers ---- */

/* Fills @h for a shard of @records records of @dim elements of @type in
 * @block_size-byte blocks: every derived size and offset, zeroed reserved
 * fields, table_checksum and header_checksum 0 (see sd_shard_header_seal).
 * Returns 0, -EINVAL for an out-of-range argument, -EOVERFLOW when the sizes
 * do not fit 64 bits; @h is written only on success. */
int sd_shard_header_init(uint32_t type, uint32_t dim, uint64_t records, uint32_t block_size,
                         char *err, size_t err_len, struct sd_shard_header *h_p);

/* The header checksum of @h (its header_checksum field taken as 0). */
uint64_t sd_shard_header_checksum(const struct sd_shard_header *h);

/* Sets @h's header_checksum from its other fields. */
void sd_shard_header_seal(struct sd_shard_header *h);

/* Checks every field of @h, read from the file named @name, and that its
 * checksum matches. Returns 0, -EPROTO (bad magic, version or header size),
 * -EBADMSG (checksum mismatch) or -EINVAL (an impossible field). */
int sd_shard_header_validate(const struct sd_shard_header *h, const char *name, char *err,
                             size_t err_len);

/* ---- Reading ---- */

struct sd_shard;

/* Opens the shard at @path: validates the header and the zero gap after it,
 * checks the file's size against it, and loads the checksum table. The
 * payload is not read (see sd_shard_verify). Refuses anything but a regular
 * file. Returns 0, -errno from the file system, or the codes of
 * sd_shard_header_validate (-EPROTO, -EBADMSG, -EINVAL), or -EIO for a file
 * of the wrong size. The caller closes *@shard_p with sd_shard_close. */
int sd_shard_open(const char *path, char *err, size_t err_len, struct sd_shard **shard_p);

/* As sd_shard_open, for @name in the directory @dirfd, never following a
 * symbolic link; @display names the file in messages (NULL: @name). */
int sd_shard_openat(int dirfd, const char *name, const char *display, char *err, size_t err_len,
                    struct sd_shard **shard_p);

/* Closes the file and frees @s. NULL is a no-op. */
void sd_shard_close(struct sd_shard *s);

/* The validated header; valid until sd_shard_close. */
const struct sd_shard_header *sd_shard_header_get(const struct sd_shard *s);

/* The path the shard was opened by; valid until sd_shard_close. */
const char *sd_shard_path(const struct sd_shard *s);

/* The open read-only descriptor; borrowed, closed by sd_shard_close. */
int sd_shard_fd(const struct sd_shard *s);

/* File offset of the payload (a multiple of SD_SHARD_ALIGN). */
uint64_t sd_shard_payload_offset(const struct sd_shard *s);

/* Payload bytes. The bytes from the payload's end up to the next
 * SD_SHARD_ALIGN boundary are zero, so an aligned read past it is safe. */
uint64_t sd_shard_payload_len(const struct sd_shard *s);

/* The checksum table (header.block_count entries, borrowed until
 * sd_shard_close). Returns 0, or -EBADMSG when the table fails the header's
 * table checksum, in which case nothing is written. */
int sd_shard_table(const struct sd_shard *s, char *err, size_t err_len, const uint64_t **table_p,
                   uint64_t *count_p);

/* Reads the whole payload and checks every block against the table, and the
 * padding before the table. Returns 0; -EBADMSG on the first bad block,
 * naming the file and the block in @err and filling @fault (may be NULL);
 * -EIO when the file has changed size or a read fails; -ENOMEM. */
int sd_shard_verify(const struct sd_shard *s, char *err, size_t err_len,
                    struct sd_shard_fault *fault);

/* Checks @len payload bytes already in memory at @buf, which hold the
 * payload from byte @payload_off on. @payload_off must be a multiple of the
 * block size and @len must end on a block boundary or at the payload's end.
 * Returns 0, -EINVAL for a bad range, or -EBADMSG as sd_shard_verify. */
int sd_shard_verify_mem(const struct sd_shard *s, const void *buf, uint64_t payload_off,
                        uint64_t len, char *err, size_t err_len, struct sd_shard_fault *fault);

/* ---- Writing ---- */

struct sd_shard_writer;

/* Starts a shard at @path, writing to "@path.tmp" until finished. The caller
 * then appends exactly header.payload_len bytes and calls
 * sd_shard_writer_finish or sd_shard_writer_abort (each frees the writer).
 * Returns 0, -EINVAL/-EOVERFLOW as sd_shard_header_init, -errno, -ENOMEM. */
int sd_shard_writer_create(const char *path, uint32_t type, uint32_t dim, uint64_t records,
                           uint32_t block_size, char *err, size_t err_len,
                           struct sd_shard_writer **w_p);

/* Appends @len payload bytes, checksumming each block as it fills. Returns
 * 0, -EOVERFLOW past the declared payload length, or -errno from write. On
 * failure the writer can only be aborted. */
int sd_shard_writer_append(struct sd_shard_writer *w, const void *data, size_t len, char *err,
                           size_t err_len);

/* Payload bytes appended so far. */
uint64_t sd_shard_writer_written(const struct sd_shard_writer *w);

/* Writes the table and the header, optionally fsyncs (@do_fsync), and
 * renames the file into place. Frees @w on every path; on failure the
 * temporary file is removed. Returns 0, -EINVAL when fewer bytes than
 * declared were appended, or -errno. *@h_p (may be NULL) gets the final
 * header on success. */
int sd_shard_writer_finish(struct sd_shard_writer *w, int do_fsync, char *err, size_t err_len,
                           struct sd_shard_header *h_p);

/* Removes the temporary file and frees @w. NULL is a no-op. */
void sd_shard_writer_abort(struct sd_shard_writer *w);

/* ---- Stores ---- */

/* A store is one directory holding shard files and a text MANIFEST that
 * lists them. Opening a store checks the manifest against every shard's
 * header; verifying reads every payload. */

#define SD_STORE_MANIFEST "MANIFEST"
#define SD_STORE_FORMAT_TAG "stagingd-store"
#define SD_STORE_FORMAT_VERSION 1u
#define SD_STORE_NAME_MAX 255
/* Bounds that keep a hostile manifest from exhausting memory. */
#define SD_STORE_MANIFEST_MAX (64u << 20)
#define SD_STORE_SHARDS_MAX 1000000u

/* One manifest line: what the store promises about a shard. */
struct sd_store_entry {
    char name[SD_STORE_NAME_MAX + 1]; /* a plain file name in the store directory */
    uint32_t record_type;             /* enum sd_record_type */
    uint32_t dim;
    uint32_t block_size;
    uint64_t records;
    uint64_t payload_len;
    uint64_t blocks;
    uint64_t table_checksum; /* the shard header's table_checksum */
};

struct sd_store;

/* Checks that @name is a plain file name a manifest may list: 1..255 bytes
 * of [A-Za-z0-9._-], not starting with '.', no "..", no '/'. 0 or -EINVAL. */
int sd_store_name_check(const char *name, char *err, size_t err_len);

/* Fills *@e_p from a validated shard header, for the shard called @name.
 * Returns 0, or -EINVAL for a bad name. */
int sd_store_entry_from_header(const char *name, const struct sd_shard_header *h, char *err,
                               size_t err_len, struct sd_store_entry *e_p);

/* Writes @dir/MANIFEST listing @n entries (through a temporary file and a
 * rename; @do_fsync also syncs the file and the directory). Returns 0,
 * -EINVAL for a bad entry, or -errno. */
int sd_store_manifest_write(const char *dir, const struct sd_store_entry *entries, size_t n,
                            int do_fsync, char *err, size_t err_len);

/* Opens the store in directory @dir: parses MANIFEST and opens every shard
 * it names, refusing a malformed manifest, unsafe or duplicate names, missing
 * files, and any shard whose header disagrees with its line. Payloads are not
 * read (see sd_store_verify). Returns 0, -EINVAL/-EPROTO for a bad manifest,
 * the codes of sd_shard_open, or -errno. The caller frees *@store_p with
 * sd_store_close. */
int sd_store_open(const char *dir, char *err, size_t err_len, struct sd_store **store_p);

/* Frees @st and closes its directory. NULL is a no-op. */
void sd_store_close(struct sd_store *st);

/* The store's directory as given to sd_store_open. */
const char *sd_store_path(const struct sd_store *st);

/* Number of shards listed. */
size_t sd_store_count(const struct sd_store *st);

/* The entry at @index (manifest order), borrowed until sd_store_close;
 * NULL when @index is out of range. */
const struct sd_store_entry *sd_store_entry_get(const struct sd_store *st, size_t index);

/* Opens shard @index and checks it still matches its manifest line.
 * Returns 0, -ERANGE for a bad index, or as sd_shard_openat; the caller
 * closes *@shard_p with sd_shard_close. */
int sd_store_shard_open(const struct sd_store *st, size_t index, char *err, size_t err_len,
                        struct sd_shard **shard_p);

/* Called after each shard is verified; a non-zero return stops the walk. */
typedef int (*sd_store_progress_fn)(void *arg, size_t index, uint64_t payload_bytes);

/* Verifies every block of every shard. Returns 0, or the first failure of
 * sd_store_shard_open / sd_shard_verify (@fault as there, may be NULL), or
 * -ECANCELED when @progress (may be NULL) asked to stop. */
int sd_store_verify(const struct sd_store *st, sd_store_progress_fn progress, void *arg, char *err,
                    size_t err_len, struct sd_shard_fault *fault);

/* ---- The generator ---- */

/* Reproducible shard stores of random vectors for tests, demos and
 * benchmarks: the same options and seed give byte-identical files. */

/* Called as payload bytes are written; @done grows to @total. */
typedef void (*sd_gen_progress_fn)(void *arg, uint64_t done, uint64_t total);

struct sd_gen_opts {
    const char *out_dir;  /* created if missing (its parent must exist) */
    uint64_t size;        /* payload bytes in all, rounded down to whole records */
    uint64_t shard_size;  /* payload bytes per shard at most, rounded down likewise */
    uint32_t dim;         /* elements per record */
    uint32_t record_type; /* enum sd_record_type */
    uint32_t block_size;  /* checksum block size */
    uint64_t seed;
    int force;                   /* write into a non-empty directory */
    int do_fsync;                /* fsync every file and the directory */
    sd_gen_progress_fn progress; /* may be NULL */
    void *progress_arg;
};

struct sd_gen_result {
    uint64_t shards;
    uint64_t records;
    uint64_t payload_bytes;
    uint64_t file_bytes;
    uint64_t blocks;
};

/* Sets @o to the CLI's defaults: 1 GiB in 64 MiB shards of 128-dim f32
 * records, 256 KiB blocks, seed 1, no output directory. */
void sd_gen_opts_default(struct sd_gen_opts *o);

/* Writes the store described by @o: shards "shard-NNNNNN.sds" (each through
 * a temporary name and a rename), then MANIFEST. Refuses a non-empty
 * directory unless o->force; with force it removes the old MANIFEST first
 * and stale shard-NNNNNN.sds files beyond the new count last. Returns 0,
 * -EINVAL for bad options, -EEXIST, or -errno; *@res_p (may be NULL) is
 * written on success. */
int sd_gen_store(const struct sd_gen_opts *o, char *err, size_t err_len,
                 struct sd_gen_result *res_p);

/* The record stream of shard @shard: sd_gen_seed keys a xoshiro256**
 * state (4 words) by (@seed, @shard); sd_gen_records writes the next @n
 * records (n * dim * element size bytes) to @out and advances the state.
 * Elements are uniform in [-1, 1) on a 2^-23 grid, a record is never all
 * zeros, and f16 elements are the f32 values rounded to nearest even. */
void sd_gen_seed(uint64_t seed, uint64_t shard, uint64_t state[4]);
void sd_gen_records(uint64_t state[4], uint32_t type, uint32_t dim, uint64_t n, void *out);

#endif /* STAGINGD_SHARD_H */
