/* The synthetic store generator: reproducible shard stores of random
 * vectors for tests, demos and benchmarks. The same options and seed give
 * byte-identical files. Errors go to @err/@err_len as in shard.h. */
#ifndef STAGINGD_GEN_H
#define STAGINGD_GEN_H

#include <stddef.h>
#include <stdint.h>

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

/* Parses a byte count: digits with an optional suffix B, K, M, G, T or
 * KiB, MiB, GiB, TiB (all powers of 1024). Returns 0, -EINVAL for a bad
 * string, -ERANGE on overflow. */
int sd_size_parse(const char *s, uint64_t *v_p);

/* `stagingd gen --out DIR [options]`; argv[0] is "gen". Prints a progress
 * bar (stderr a tty, or --progress) and a summary line to stderr. Returns
 * the process exit status: 0 success, 1 failure, 2 usage. */
int sd_gen_cli(int argc, char **argv);

#endif /* STAGINGD_GEN_H */
