/* Corrupt shard data (docs/reliability.md): one bit of one shard's payload
 * flipped (seeded: which shard, byte and bit), the checksum table left as
 * it was. `stagingd job --op verify` against lease-agent-host must name that
 * shard and that block, count it as bad, exit 3 (CORRUPT), never report it
 * clean, and report every other shard clean; `--op both` must also keep the
 * corrupt shard's records out of the merged top-k (which then equals the
 * CPU's top-k of the clean shards) and mark its scan row; the CPU check
 * agrees. A flipped bit in the checksum table instead fails the table's own
 * checksum: the shard fails naming its table (no block of it can be
 * trusted), never clean, the others stay clean.
 *
 * argv[1]: stagingd, argv[2]: lease-agent-host. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "e2e_util.h"
#include "kernels/scan_ref.h"
#include "rel_util.h"
#include "stagingd/job.h"
#include "stagingd/shard.h"

#define KIB (1ull << 10)
#define SHARDS 8
#define SHARD_BYTES (256 * KIB)
#define BLOCK (64 * KIB) /* e2e_store_make's */

static void flip_bit(const char *store, unsigned shard, uint64_t off, unsigned bit)
{
    char path[256];
    snprintf(path, sizeof path, "%s/shard-%06u.sds", store, shard);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    unsigned char b;
    ck_assert_int_eq(pread(fd, &b, 1, (off_t)off), 1);
    b ^= (unsigned char)(1u << bit);
    ck_assert_int_eq(pwrite(fd, &b, 1, (off_t)off), 1);
    close(fd);
}

static int run_job(struct e2e_env *e, const char *op, char **out_p, char **err_p)
{
    char out[256], err[256];
    snprintf(out, sizeof out, "%s/out-%s.txt", e->dir, op);
    snprintf(err, sizeof err, "%s/err-%s.txt", e->dir, op);
    unlink(out); /* e2e_run appends */
    unlink(err);
    const char *argv[] = {e2e_stagingd, "job",  "--store", e->store, "--agent", e->sock,
                          "--op",       op,     "--list",  "--k",    "10",      "--pages",
                          "small",      "--agent-timeout", "20",     NULL};
    int st = e2e_run(argv, out, err, 60000);
    *out_p = e2e_slurp(out);
    *err_p = e2e_slurp(err);
    return st;
}

/* The true top-k of every shard but @skip, as the job must merge it. */
static size_t cpu_topk_without(const char *store, unsigned skip, uint32_t k,
                               struct kn_scan_hit *out_p)
{
    /* Per-shard top-k lists, then the merge without @skip. */
    char err[SD_ERR_LEN];
    struct sd_store *st = NULL;
    ck_assert_int_eq(sd_store_open(store, err, sizeof err, &st), 0);
    static struct kn_scan_hit tops[SHARDS][KN_SCAN_MAX_K];
    const struct kn_scan_hit *lists[SHARDS];
    size_t counts[SHARDS];
    uint32_t ids[SHARDS];
    size_t n = 0;
    for (unsigned i = 0; i < sd_store_count(st); i++) {
        if (i == skip)
            continue;
        struct sd_shard *sh = NULL;
        ck_assert_int_eq(sd_store_shard_open(st, i, err, sizeof err, &sh), 0);
        const struct sd_shard_header *h = sd_shard_header_get(sh);
        void *payload = malloc(h->payload_len);
        float *q = malloc(h->dim * sizeof *q);
        ck_assert_ptr_nonnull(payload);
        ck_assert_ptr_nonnull(q);
        ck_assert_int_eq(pread(sd_shard_fd(sh), payload, h->payload_len,
                               (off_t)sd_shard_payload_offset(sh)),
                         (ssize_t)h->payload_len);
        sd_job_query_make(1, h->record_type, h->dim, q);
        long got = kr_scan_topk(payload, h->record_type, h->record_count, h->dim, q, k, tops[n]);
        ck_assert_int_gt(got, 0);
        lists[n] = tops[n];
        counts[n] = (size_t)got;
        ids[n] = i;
        n++;
        free(q);
        free(payload);
        sd_shard_close(sh);
    }
    sd_store_close(st);
    long rows = kr_topk_merge(lists, counts, n, ids, k, out_p);
    ck_assert_int_gt(rows, 0);
    return (size_t)rows;
}

START_TEST(one_flipped_bit_is_named_with_shard_and_block_and_never_passed_on)
{
    uint64_t seed = rel_seed("corrupt shard");
    struct e2e_env e;
    e2e_env_init(&e);
    e2e_store_make(&e, SHARDS, SHARD_BYTES, 64, 0, 0xc0ffeeu);
    unsigned shard = (unsigned)(rel_rand(&seed) % SHARDS);
    uint64_t at = rel_rand(&seed) % SHARD_BYTES;
    unsigned bit = (unsigned)(rel_rand(&seed) % 8);
    uint64_t block = at / BLOCK;
    flip_bit(e.store, shard, 4096 + at, bit);
    fprintf(stderr, "flipped bit %u of payload byte %" PRIu64 " of shard %u (block %" PRIu64 ")\n",
            bit, at, shard, block);

    /* The CPU check agrees first. */
    int rc[64];
    uint64_t bad[64];
    ck_assert_uint_eq(e2e_cpu_verify(e.store, rc, bad, 64), SHARDS);
    ck_assert_int_eq(rc[shard], -EBADMSG);
    ck_assert_uint_eq(bad[shard], block);

    e2e_agent_start(&e);
    char *out, *err;
    int st = run_job(&e, "verify", &out, &err);
    ck_assert_msg(st == 3, "verify: expected exit 3 (corrupt), found %d\n%s\n%s", st, out, err);
    struct e2e_report r;
    e2e_report_parse(out, &r);
    char want[128];
    snprintf(want, sizeof want, "shard-%06u.sds   verify BAD: block %" PRIu64 " of %" PRIu64,
             shard, block, (uint64_t)(SHARD_BYTES / BLOCK));
    ck_assert_msg(strstr(out, want), "expected \"%s\" in\n%s", want, out);
    ck_assert_uint_eq(r.verify_bad[shard], 1);
    ck_assert_uint_eq(r.verify_ok[shard], 0);
    ck_assert_uint_eq(r.bad_block[shard], block);
    for (unsigned i = 0; i < SHARDS; i++)
        if (i != shard)
            ck_assert_msg(r.verify_ok[i] == 1 && r.verify_bad[i] == 0, "shard %u\n%s", i, out);
    ck_assert_ptr_nonnull(strstr(out, "1 with bad blocks"));
    ck_assert_msg(strstr(err, "CORRUPT: 1 of 8 shard(s) with bad blocks"),
                  "expected the CORRUPT verdict\n%s", err);
    free(out);
    free(err);

    /* Both ops: the corrupt shard's records stay out of the top-k. */
    st = run_job(&e, "both", &out, &err);
    ck_assert_msg(st == 3, "both: expected exit 3, found %d\n%s\n%s", st, out, err);
    e2e_report_parse(out, &r);
    ck_assert_uint_eq(r.verify_bad[shard], 1);
    ck_assert_uint_eq(r.verify_ok[shard], 0);
    ck_assert_ptr_nonnull(strstr(out, "not in the top-k: corrupt blocks"));
    struct kn_scan_hit top[64];
    size_t rows = cpu_topk_without(e.store, shard, 10, top);
    ck_assert_uint_eq(r.ntop, rows);
    for (size_t i = 0; i < rows; i++) {
        ck_assert_msg(r.top[i].shard != shard, "top-k row %zu comes from the corrupt shard\n%s",
                      i + 1, out);
        ck_assert_msg(r.top[i].shard == top[i].shard && r.top[i].index == top[i].index,
                      "top-k row %zu: expected shard %u record %llu, found shard %u record %llu",
                      i + 1, top[i].shard, (unsigned long long)top[i].index, r.top[i].shard,
                      (unsigned long long)r.top[i].index);
    }
    free(out);
    free(err);

    /* One bit of the same block's table entry instead: a corrupt table
     * entry, of that block, never clean. */
    flip_bit(e.store, shard, 4096 + at, bit); /* the payload as it was */
    uint64_t table = 4096 + SHARD_BYTES; /* payload_offset + payload_len, 4 KiB aligned */
    flip_bit(e.store, shard, table + 8 * block, bit);
    st = run_job(&e, "verify", &out, &err);
    /* The table fails its own checksum: no block of it can be trusted, so
     * the shard fails (exit 1) naming the table, before any byte is read. */
    ck_assert_msg(st == 1, "a corrupt table entry: expected exit 1, found %d\n%s", st, out);
    e2e_report_parse(out, &r);
    ck_assert_uint_eq(r.verify_ok[shard], 0);
    snprintf(want, sizeof want, "shard-%06u.sds", shard);
    const char *row = strstr(out, want);
    ck_assert_msg(row && strstr(row, "checksum table corrupt"),
                  "the shard with a corrupt table entry was not reported\n%s", out);
    for (unsigned i = 0; i < SHARDS; i++)
        if (i != shard)
            ck_assert_uint_eq(r.verify_ok[i], 1);
    free(out);
    free(err);
    e2e_env_cleanup(&e);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s STAGINGD LEASE_AGENT_HOST\n", argv[0]);
        return 2;
    }
    e2e_stagingd = argv[1];
    e2e_agent = argv[2];
    Suite *s = suite_create("corrupt");
    TCase *tc = tcase_create("corrupt");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, one_flipped_bit_is_named_with_shard_and_block_and_never_passed_on);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
