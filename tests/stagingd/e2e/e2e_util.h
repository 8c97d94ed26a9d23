/* Helpers for the end-to-end suite: processes, files, a seeded store, the
 * CPU reference, and parsing stagingd's report. */
#ifndef TESTS_E2E_UTIL_H
#define TESTS_E2E_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <check.h>

#include "kernels/scan.h"

#define E2E_NAME_MAX 256

/* The binaries under test, from argv. */
extern const char *e2e_stagingd;
extern const char *e2e_agent;
/* Options every agent a test starts gets after its own (NULL-terminated,
 * at most 8; NULL: none), e.g. "--ring-dispatch poll". */
extern const char *const *e2e_agent_extra;

/* One test's private directory with the agent's socket in it. */
struct e2e_env {
    char dir[128];
    char store[192];
    char sock[192];
    char agent_log[192];
    pid_t agent;
};

/* mkdtemp under /tmp; the socket path is @dir/agent/agent.sock. */
void e2e_env_init(struct e2e_env *e);
/* Stops what is still running and removes the directory. */
void e2e_env_cleanup(struct e2e_env *e);

/* Writes a store of @shards shards of @shard_bytes payload (@dim elements
 * of f32 or f16, 64 KiB blocks) from @seed into e->store. */
void e2e_store_make(struct e2e_env *e, unsigned shards, uint64_t shard_bytes, uint32_t dim, int f16,
                    uint64_t seed);

/* Starts lease-agent-host on e->sock (6 MiB PINNED, 2 MiB MAPPED budgets:
 * they fit an 8 MiB RLIMIT_MEMLOCK) and waits for --ready-fd. */
void e2e_agent_start(struct e2e_env *e);
/* The same with budgets @pinned and @mapped ("1M"). */
void e2e_agent_start_budgets(struct e2e_env *e, const char *pinned, const char *mapped);

/* Starts @argv with stdout and stderr to files (NULL: /dev/null). */
pid_t e2e_spawn(const char *const *argv, const char *out_path, const char *err_path);

/* Waits for @pid up to @timeout_ms: its exit status, 128 + signal, or -1
 * after killing it at the timeout. */
int e2e_wait(pid_t pid, int timeout_ms);

/* Runs @argv to completion (up to @timeout_ms); stdout and stderr in the
 * files. Returns the exit status as e2e_wait. */
int e2e_run(const char *const *argv, const char *out_path, const char *err_path, int timeout_ms);

/* The whole file as a string (caller frees); "" when missing. */
char *e2e_slurp(const char *path);

/* Occurrences of @needle in @hay. */
unsigned e2e_count(const char *hay, const char *needle);

/* Polls @path until it holds @n occurrences of @needle; false at @timeout_ms. */
bool e2e_wait_count(const char *path, const char *needle, unsigned n, int timeout_ms);

/* Sleeps @ms milliseconds. */
void e2e_sleep_ms(int ms);

/* ---- the CPU reference ---- */

/* Verifies every shard of @store on the CPU: per shard 0, or -EBADMSG with
 * the first bad block in @bad_block_p[i]. Returns the shard count. */
size_t e2e_cpu_verify(const char *store, int *rc_p, uint64_t *bad_block_p, size_t cap);

/* The reference the job must match: the true top-@k (1..KN_SCAN_MAX_K) of
 * all records against sd_job_query_make(@seed, ...): each shard's top-k
 * (kr_scan_topk) merged across shards with kr_topk_merge into @out_p, and
 * each shard's best in @per_shard_p. Returns the rows written,
 * min(k, records). */
size_t e2e_cpu_topk(const char *store, uint64_t seed, uint32_t k, struct kn_scan_hit *out_p,
                    struct kn_scan_hit *per_shard_p, size_t cap);

/* ---- stagingd's report ---- */

struct e2e_report {
    unsigned verify_ok[64];  /* "verify ok" rows per shard index */
    unsigned verify_bad[64]; /* "verify BAD" rows per shard index */
    uint64_t bad_block[64];
    unsigned scan_rows[64];
    struct kn_scan_hit scan[64]; /* per shard index */
    unsigned ntop;
    struct kn_scan_hit top[64]; /* shard = index in the store */
    uint64_t granted, released;
    int exactly_once; /* the summary's "exactly once   yes" */
};

/* Parses stagingd's stdout; shard names are shard-NNNNNN.sds. */
void e2e_report_parse(const char *text, struct e2e_report *r);

/* ---- one `stagingd job` run's files ---- */

/* An environment and the paths and texts of a job's stdout and stderr. */
struct e2e_job {
    struct e2e_env e;
    char out[256], err[256];
    char *out_text, *err_text; /* owned; NULL until e2e_job_read */
};

/* Sets out and err to out.txt and err.txt in j->e.dir. */
void e2e_job_paths(struct e2e_job *j);
/* (Re)reads both files into out_text and err_text. */
void e2e_job_read(struct e2e_job *j);
/* Frees the texts and cleans the environment up. */
void e2e_job_done(struct e2e_job *j);

/* ---- test_e2e_first_run.c ---- */

/* What a first run meets: usage and help, no agent, a budget too small. */
void e2e_first_run_tests(TCase *tc);

#endif /* TESTS_E2E_UTIL_H */
