/* Helpers for the end-to-end suite: see e2e_util.h. */
#include "e2e_util.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpu/server_marks.h"
#include "kernels/scan_ref.h"
#include "stagingd/job.h"
#include "stagingd/shard.h"

const char *e2e_stagingd;
const char *e2e_agent;
const char *const *e2e_agent_extra;

static uint64_t e2e__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void e2e_sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

void e2e_env_init(struct e2e_env *e)
{
    memset(e, 0, sizeof *e);
    snprintf(e->dir, sizeof e->dir, "/tmp/sd-e2e-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(e->dir));
    snprintf(e->store, sizeof e->store, "%s/store", e->dir);
    snprintf(e->sock, sizeof e->sock, "%s/agent/agent.sock", e->dir);
    snprintf(e->agent_log, sizeof e->agent_log, "%s/agent.log", e->dir);
}

static void e2e__rm_rf(const char *path)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *de;
        while (d && (de = readdir(d)) != NULL) {
            if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                continue;
            char sub[512];
            snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
            e2e__rm_rf(sub);
        }
        if (d)
            closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

void e2e_env_cleanup(struct e2e_env *e)
{
    if (e->agent > 0) {
        kill(e->agent, SIGTERM);
        if (e2e_wait(e->agent, 5000) < 0)
            kill(e->agent, SIGKILL);
        e->agent = 0;
    }
    /* Every refusal the agent sent must have fit the wire (as the server
     * suites' harness checks): its log marks a text it had to cut. */
    char *log = e->agent_log[0] ? e2e_slurp(e->agent_log) : NULL;
    const char *cut = log ? strstr(log, GA_SERVER_CUT_MARK) : NULL;
    char line[512] = "";
    if (cut) {
        const char *b = cut;
        while (b > log && b[-1] != '\n')
            b--;
        snprintf(line, sizeof line, "%.*s", (int)strcspn(b, "\n"), b);
    }
    free(log);
    e2e__rm_rf(e->dir);
    ck_assert_msg(!line[0], "the agent sent a refusal longer than the wire holds: %s", line);
}

void e2e_store_make(struct e2e_env *e, unsigned shards, uint64_t shard_bytes, uint32_t dim, int f16,
                    uint64_t seed)
{
    struct sd_gen_opts o;
    sd_gen_opts_default(&o);
    o.out_dir = e->store;
    o.size = shards * shard_bytes;
    o.shard_size = shard_bytes;
    o.dim = dim;
    o.record_type = f16 ? SD_RECORD_F16 : SD_RECORD_F32;
    o.block_size = 64u << 10;
    o.seed = seed;
    char err[SD_ERR_LEN];
    struct sd_gen_result res;
    ck_assert_msg(sd_gen_store(&o, err, sizeof err, &res) == 0, "gen: %s", err);
    ck_assert_uint_eq(res.shards, shards);
}

/* As e2e_spawn, with @keep_fd passed on as fd 3 (-1: none). */
static pid_t e2e__spawn_fd(const char *const *argv, const char *out_path, const char *err_path,
                           int keep_fd)
{
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int out = open(out_path ? out_path : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0600);
        int err = open(err_path ? err_path : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (out < 0 || err < 0)
            _exit(126);
        dup2(out, 1);
        dup2(err, 2);
        if (keep_fd >= 0 && keep_fd != 3) {
            dup2(keep_fd, 3);
            keep_fd = 3;
        }
        for (int fd = 3; fd < 1024; fd++)
            if (fd != keep_fd)
                close(fd);
        if (keep_fd == 3)
            fcntl(3, F_SETFD, 0);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

pid_t e2e_spawn(const char *const *argv, const char *out_path, const char *err_path)
{
    return e2e__spawn_fd(argv, out_path, err_path, -1);
}

int e2e_wait(pid_t pid, int timeout_ms)
{
    int st = 0;
    uint64_t end = e2e__now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            break;
        if (r < 0)
            return -1;
        if (e2e__now_ms() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        e2e_sleep_ms(2);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int e2e_run(const char *const *argv, const char *out_path, const char *err_path, int timeout_ms)
{
    return e2e_wait(e2e_spawn(argv, out_path, err_path), timeout_ms);
}

void e2e_agent_start(struct e2e_env *e)
{
    e2e_agent_start_budgets(e, "6M", "2M");
}

void e2e_agent_start_budgets(struct e2e_env *e, const char *pinned, const char *mapped)
{
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    const char *argv[20] = {e2e_agent, "--socket",        e->sock, "--pinned-budget",
                            pinned,    "--mapped-budget", mapped,  "--workers",
                            "2",       "--ready-fd",      "3"};
    size_t n = 11;
    for (size_t i = 0; e2e_agent_extra && e2e_agent_extra[i]; i++) {
        ck_assert_msg(n + 1 < sizeof argv / sizeof argv[0], "more than 8 extra agent options");
        argv[n++] = e2e_agent_extra[i];
    }
    argv[n] = NULL;
    e->agent = e2e__spawn_fd(argv, e->agent_log, e->agent_log, p[1]);
    close(p[1]);
    struct pollfd pfd = {.fd = p[0], .events = POLLIN};
    int r = poll(&pfd, 1, 20000);
    char line[256] = {0};
    ssize_t got = r == 1 ? read(p[0], line, sizeof line - 1) : -1;
    close(p[0]);
    ck_assert_msg(got > 0 && strncmp(line, "ready ", 6) == 0, "%s did not report ready; see %s",
                  e2e_agent, e->agent_log);
}

char *e2e_slurp(const char *path)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return strdup("");
    char *buf = NULL;
    size_t len = 0, cap = 0;
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (len + n + 1 > cap) {
            cap = (len + n + 1) * 2;
            buf = realloc(buf, cap);
            ck_assert_ptr_nonnull(buf);
        }
        memcpy(buf + len, chunk, n);
        len += n;
    }
    fclose(f);
    if (!buf)
        return strdup("");
    buf[len] = '\0';
    return buf;
}

unsigned e2e_count(const char *hay, const char *needle)
{
    unsigned n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

bool e2e_wait_count(const char *path, const char *needle, unsigned n, int timeout_ms)
{
    uint64_t end = e2e__now_ms() + (uint64_t)timeout_ms;
    while (e2e__now_ms() <= end) {
        char *text = e2e_slurp(path);
        unsigned c = e2e_count(text, needle);
        free(text);
        if (c >= n)
            return true;
        e2e_sleep_ms(1);
    }
    return false;
}

/* ---- the CPU reference ---- */

size_t e2e_cpu_verify(const char *store, int *rc_p, uint64_t *bad_block_p, size_t cap)
{
    char err[SD_ERR_LEN];
    struct sd_store *st = NULL;
    ck_assert_msg(sd_store_open(store, err, sizeof err, &st) == 0, "%s", err);
    size_t n = sd_store_count(st);
    ck_assert_uint_le(n, cap);
    for (size_t i = 0; i < n; i++) {
        struct sd_shard *sh = NULL;
        ck_assert_int_eq(sd_store_shard_open(st, i, err, sizeof err, &sh), 0);
        struct sd_shard_fault fault = {0};
        rc_p[i] = sd_shard_verify(sh, err, sizeof err, &fault);
        bad_block_p[i] = rc_p[i] == -EBADMSG ? fault.block : UINT64_MAX;
        sd_shard_close(sh);
    }
    sd_store_close(st);
    return n;
}

size_t e2e_cpu_topk(const char *store, uint64_t seed, uint32_t k, struct kn_scan_hit *out_p,
                    struct kn_scan_hit *per_shard_p, size_t cap)
{
    char err[SD_ERR_LEN];
    struct sd_store *st = NULL;
    ck_assert_msg(sd_store_open(store, err, sizeof err, &st) == 0, "%s", err);
    size_t n = sd_store_count(st);
    ck_assert_uint_le(n, cap);
    static struct kn_scan_hit shard_top[64][KN_SCAN_MAX_K];
    const struct kn_scan_hit *lists[64];
    size_t counts[64];
    uint32_t ids[64];
    uint64_t records = 0;
    ck_assert_uint_le(k, KN_SCAN_MAX_K);
    for (size_t i = 0; i < n; i++) {
        struct sd_shard *sh = NULL;
        ck_assert_int_eq(sd_store_shard_open(st, i, err, sizeof err, &sh), 0);
        const struct sd_shard_header *h = sd_shard_header_get(sh);
        void *payload = malloc(h->payload_len);
        ck_assert_ptr_nonnull(payload);
        ck_assert_int_eq(
            pread(sd_shard_fd(sh), payload, h->payload_len, (off_t)sd_shard_payload_offset(sh)),
            (ssize_t)h->payload_len);
        float *q = malloc(h->dim * sizeof(float));
        ck_assert_ptr_nonnull(q);
        sd_job_query_make(seed, h->record_type, h->dim, q);
        long got =
            kr_scan_topk(payload, h->record_type, h->record_count, h->dim, q, k, shard_top[i]);
        ck_assert_int_eq(got, h->record_count < k ? (long)h->record_count : (long)k);
        per_shard_p[i] = shard_top[i][0];
        lists[i] = shard_top[i];
        counts[i] = (size_t)got;
        ids[i] = (uint32_t)i;
        records += h->record_count;
        free(q);
        free(payload);
        sd_shard_close(sh);
    }
    long rows = kr_topk_merge(lists, counts, n, ids, k, out_p);
    ck_assert_int_eq(rows, records < k ? (long)records : (long)k);
    sd_store_close(st);
    return (size_t)rows;
}

/* ---- the report ---- */

static int e2e__shard_index(const char *name)
{
    unsigned idx;
    if (sscanf(name, "shard-%6u.sds", &idx) != 1 || idx >= 64)
        return -1;
    return (int)idx;
}

void e2e_report_parse(const char *text, struct e2e_report *r)
{
    memset(r, 0, sizeof *r);
    char *copy = strdup(text);
    ck_assert_ptr_nonnull(copy);
    char *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char name[E2E_NAME_MAX];
        uint64_t a = 0, b = 0;
        unsigned rank = 0;
        float score = 0;
        int idx;
        if (sscanf(line, " %255s verify ok: %" SCNu64 " blocks", name, &a) == 2 &&
            (idx = e2e__shard_index(name)) >= 0) {
            r->verify_ok[idx]++;
        } else if (sscanf(line, " %255s verify BAD: block %" SCNu64 " of %" SCNu64, name, &a, &b) ==
                       3 &&
                   (idx = e2e__shard_index(name)) >= 0) {
            r->verify_bad[idx]++;
            r->bad_block[idx] = a;
        } else if (sscanf(line, " %255s scan best: record %" SCNu64 " score %f", name, &a,
                          &score) == 3 &&
                   (idx = e2e__shard_index(name)) >= 0) {
            r->scan_rows[idx]++;
            r->scan[idx] = (struct kn_scan_hit){.score = score, .shard = 0, .index = a};
        } else if (sscanf(line, " #%u %255s %" SCNu64 " %f", &rank, name, &a, &score) == 4 &&
                   (idx = e2e__shard_index(name)) >= 0 && r->ntop < 64) {
            r->top[r->ntop++] =
                (struct kn_scan_hit){.score = score, .shard = (uint32_t)idx, .index = a};
        } else if (sscanf(line, " leases %" SCNu64 " granted, %" SCNu64 " released", &a, &b) == 2) {
            r->granted = a;
            r->released = b;
        } else if (strstr(line, "exactly once") && strstr(line, " yes: ")) {
            r->exactly_once = 1;
        }
    }
    free(copy);
}

void e2e_job_paths(struct e2e_job *j)
{
    snprintf(j->out, sizeof j->out, "%s/out.txt", j->e.dir);
    snprintf(j->err, sizeof j->err, "%s/err.txt", j->e.dir);
}

void e2e_job_read(struct e2e_job *j)
{
    free(j->out_text);
    free(j->err_text);
    j->out_text = e2e_slurp(j->out);
    j->err_text = e2e_slurp(j->err);
}

void e2e_job_done(struct e2e_job *j)
{
    free(j->out_text);
    free(j->err_text);
    e2e_env_cleanup(&j->e);
}
