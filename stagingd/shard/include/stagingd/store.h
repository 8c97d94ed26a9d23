/* A shard store: one directory holding shard files and a text MANIFEST
 * that lists them (docs/shard-format.md). Opening a store checks the
 * manifest against every shard's header; verifying reads every payload.
 * Errors go to @err/@err_len as in shard.h; nothing here prints. */
#ifndef STAGINGD_STORE_H
#define STAGINGD_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "stagingd/shard.h"

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

/* `stagingd verify PATH [--quiet]`: verifies a store directory or a single
 * shard file and prints a summary to stderr. argv[0] is "verify". Returns
 * the process exit status: 0 valid, 1 invalid or unreadable, 2 usage. */
int sd_verify_cli(int argc, char **argv);

#endif /* STAGINGD_STORE_H */
