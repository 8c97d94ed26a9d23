/* stagingd's settings (stagingd/daemon/config.c): the defaults, every kind
 * of key with what a bad value is told, the config file with its comments
 * and "path:line" errors, the agent's default socket, and the key table the
 * command line is built from. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lease_types/socket.h"
#include "stagingd/daemon.h"

static char err[SD_CONFIG_ERR_LEN];

/* Sets @key to @value on a default config and returns the result. */
static int set1(struct sd_config *cfg, const char *key, const char *value)
{
    err[0] = '\0';
    return sd_config_set(cfg, key, value, err, sizeof err);
}

static void expect_refused(struct sd_config *cfg, const char *key, const char *value,
                           const char *want)
{
    ck_assert_msg(set1(cfg, key, value) == -EINVAL, "%s = '%s' was accepted", key, value);
    ck_assert_msg(strstr(err, want) != NULL, "%s = '%s': expected \"%s\" in \"%s\"", key, value,
                  want, err);
}

/* A file under /tmp holding @text; the path is static storage. */
static const char *conf_file(const char *text)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/sdconf-XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

START_TEST(defaults_are_the_documented_ones)
{
    struct sd_config c;
    memset(&c, 0x5a, sizeof c);
    sd_config_default(&c);
    ck_assert_str_eq(c.store, "");
    ck_assert_str_eq(c.control, "");
    ck_assert_uint_eq(c.nagents, 1);
    char def[SD_CONFIG_SOCK_MAX];
    ck_assert_int_eq(lt_socket_default(def, sizeof def), 0);
    ck_assert_str_eq(c.agents[0], def);
    ck_assert_uint_eq(c.threads, 0);
    ck_assert_uint_eq(c.pinned_pool, 0);
    ck_assert_uint_eq(c.mapped_pool, 2u << 20);
    ck_assert_uint_eq(c.segment_size, 0);
    ck_assert_int_eq(c.pages, LEASEC_POOL_PAGES_AUTO);
    ck_assert_int_eq(c.op, SD_JOB_VERIFY);
    ck_assert_uint_eq(c.job.inflight, 4);
    ck_assert_uint_eq(c.job.batch, 16);
    ck_assert_int_eq(c.job.doorbell, SD_DOORBELL_AUTO);
    ck_assert_int_eq(c.job.cpu_verify, 0);
    ck_assert_uint_eq(c.job.query_seed, 1);
    ck_assert_uint_eq(c.job.k, 10);
    ck_assert_uint_eq(c.job.rate_limit, 0);
    ck_assert_uint_eq(c.job.agent_timeout_s, 30);
    ck_assert_int_eq(c.job.list, 0);
    ck_assert_uint_eq(c.drain_timeout_s, 10);
    ck_assert_int_eq(c.log_level, BASE_LOG_INFO);
    ck_assert_ptr_null(c.log.fn); /* the process default until a command line sets one */
    ck_assert_ptr_null(c.log_file);
}
END_TEST

START_TEST(agent_default_follows_the_runtime_dir_then_the_uid)
{
    struct sd_config c;
    char want[SD_CONFIG_SOCK_MAX];
    const char *saved = getenv("XDG_RUNTIME_DIR");
    char *keep = saved ? strdup(saved) : NULL;
    ck_assert_int_eq(setenv("XDG_RUNTIME_DIR", "/run/user/4242", 1), 0);
    sd_config_default(&c);
    ck_assert_str_eq(c.agents[0], "/run/user/4242/lease-agent/agent.sock");
    /* A relative runtime dir is ignored, as lease-agent ignores it. */
    ck_assert_int_eq(setenv("XDG_RUNTIME_DIR", "run/user", 1), 0);
    sd_config_default(&c);
    if (geteuid() == 0)
        snprintf(want, sizeof want, "/run/lease-agent/agent.sock");
    else
        snprintf(want, sizeof want, "/tmp/lease-agent-%u/agent.sock", (unsigned)geteuid());
    ck_assert_str_eq(c.agents[0], want);
    ck_assert_int_eq(unsetenv("XDG_RUNTIME_DIR"), 0);
    sd_config_default(&c);
    ck_assert_str_eq(c.agents[0], want);
    ck_assert_uint_eq(c.nagents, 1);
    if (keep)
        setenv("XDG_RUNTIME_DIR", keep, 1);
    free(keep);
}
END_TEST

START_TEST(numbers_sizes_and_ranges_are_parsed_or_refused_with_what_was_expected)
{
    struct sd_config c;
    sd_config_default(&c);
    ck_assert_int_eq(set1(&c, "inflight", "7"), 0);
    ck_assert_uint_eq(c.job.inflight, 7);
    ck_assert_int_eq(set1(&c, "threads", "0"), 0);
    ck_assert_uint_eq(c.threads, 0);
    expect_refused(&c, "inflight", "0", "inflight: expected an integer in 1..1024, found '0'");
    expect_refused(&c, "inflight", "1025", "expected an integer in 1..1024, found '1025'");
    expect_refused(&c, "batch", "-1", "batch: expected an integer in 1..256");
    expect_refused(&c, "k", "ten", "k: expected an integer in 1..4096, found 'ten'");
    expect_refused(&c, "agent-timeout", "0", "agent-timeout: expected an integer in 1..86400");
    ck_assert_uint_eq(c.job.inflight, 7); /* a refused value changes nothing */

    ck_assert_int_eq(set1(&c, "query-seed", "0x10"), 0);
    ck_assert_uint_eq(c.job.query_seed, 16);
    ck_assert_int_eq(set1(&c, "query-seed", "18446744073709551615"), 0);
    ck_assert_uint_eq(c.job.query_seed, UINT64_MAX);
    expect_refused(&c, "query-seed", "seven", "query-seed: expected an unsigned integer");
    expect_refused(&c, "query-seed", "18446744073709551616", "expected an unsigned integer");

    ck_assert_int_eq(set1(&c, "pinned-pool", "512MiB"), 0);
    ck_assert_uint_eq(c.pinned_pool, 512ull << 20);
    ck_assert_int_eq(set1(&c, "segment-size", "2M"), 0);
    ck_assert_uint_eq(c.segment_size, 2ull << 20);
    ck_assert_int_eq(set1(&c, "rate-limit", "1G"), 0);
    ck_assert_uint_eq(c.job.rate_limit, 1ull << 30);
    expect_refused(&c, "mapped-pool", "2MB", "mapped-pool: expected a size such as 512MiB");
    expect_refused(&c, "pinned-pool", "", "found ''");
}
END_TEST

START_TEST(words_and_yes_no_keys_take_their_spellings)
{
    struct sd_config c;
    sd_config_default(&c);
    static const char *const yes[] = {"yes", "true", "on", "1", "YES", "On"};
    static const char *const no[] = {"no", "false", "off", "0", "NO", "Off"};
    for (size_t i = 0; i < 6; i++) {
        ck_assert_int_eq(set1(&c, "cpu-verify", yes[i]), 0);
        ck_assert_int_eq(c.job.cpu_verify, 1);
        ck_assert_int_eq(set1(&c, "cpu-verify", no[i]), 0);
        ck_assert_int_eq(c.job.cpu_verify, 0);
    }
    ck_assert_int_eq(set1(&c, "list", "yes"), 0);
    ck_assert_int_eq(c.job.list, 1);
    expect_refused(&c, "list", "maybe", "list: expected yes or no, found 'maybe'");

    ck_assert_int_eq(set1(&c, "op", "scan"), 0);
    ck_assert_int_eq(c.op, SD_JOB_SCAN);
    ck_assert_int_eq(set1(&c, "op", "both"), 0);
    ck_assert_int_eq(c.op, SD_JOB_BOTH);
    expect_refused(&c, "op", "Verify", "op: expected verify, scan or both, found 'Verify'");

    ck_assert_int_eq(set1(&c, "doorbell", "off"), 0);
    ck_assert_int_eq(c.job.doorbell, SD_DOORBELL_OFF);
    ck_assert_int_eq(set1(&c, "doorbell", "on"), 0);
    ck_assert_int_eq(c.job.doorbell, SD_DOORBELL_ON);
    expect_refused(&c, "doorbell", "sometimes", "expected auto, on or off, found 'sometimes'");

    ck_assert_int_eq(set1(&c, "pages", "huge"), 0);
    ck_assert_int_eq(c.pages, LEASEC_POOL_PAGES_HUGE);
    ck_assert_int_eq(set1(&c, "pages", "thp"), 0);
    ck_assert_int_eq(c.pages, LEASEC_POOL_PAGES_THP);
    expect_refused(&c, "pages", "large", "expected auto, small, huge or thp, found 'large'");

    ck_assert_int_eq(set1(&c, "log-level", "debug"), 0);
    ck_assert_int_eq(c.log_level, BASE_LOG_DEBUG);
    ck_assert_int_eq(set1(&c, "log-level", "error"), 0);
    ck_assert_int_eq(c.log_level, BASE_LOG_ERROR);
    expect_refused(&c, "log-level", "warning", "expected error, warn, info or debug");
}
END_TEST

START_TEST(paths_and_agent_lists_are_bounded)
{
    struct sd_config c;
    sd_config_default(&c);
    ck_assert_int_eq(set1(&c, "store", "/data/store"), 0);
    ck_assert_str_eq(c.store, "/data/store");
    expect_refused(&c, "store", "", "store: expected a path of 1..4095 bytes, found 0 bytes");
    char long_path[SD_CONFIG_PATH_MAX + 1];
    memset(long_path, 'p', sizeof long_path - 1);
    long_path[sizeof long_path - 1] = '\0';
    expect_refused(&c, "store", long_path, "found 4096 bytes");
    ck_assert_str_eq(c.store, "/data/store");

    /* The control socket may be "": none. */
    ck_assert_int_eq(set1(&c, "control", "/run/sd.sock"), 0);
    ck_assert_int_eq(set1(&c, "control", ""), 0);
    ck_assert_str_eq(c.control, "");
    expect_refused(&c, "control", long_path, "control: expected a path of 1..107 bytes");

    ck_assert_int_eq(set1(&c, "agent", "/a/one.sock,/b/two.sock"), 0);
    ck_assert_uint_eq(c.nagents, 2);
    ck_assert_str_eq(c.agents[0], "/a/one.sock");
    ck_assert_str_eq(c.agents[1], "/b/two.sock");
    expect_refused(&c, "agent", "/a.sock,,/b.sock", "agent: expected a socket path between commas");
    expect_refused(&c, "agent", "/a.sock,", "between commas");
    char many[17 * 3 + 1] = "";
    for (int i = 0; i < 17; i++)
        strcat(many, i ? ",/x" : "/x");
    expect_refused(&c, "agent", many, "agent: expected at most 16 agents");
    char sock[SD_CONFIG_SOCK_MAX + 1];
    memset(sock, 's', sizeof sock - 1);
    sock[sizeof sock - 1] = '\0';
    expect_refused(&c, "agent", sock, "socket path of 108 bytes: expected at most 107");
    ck_assert_uint_eq(c.nagents, 2); /* untouched by the refusals */
}
END_TEST

START_TEST(unknown_keys_are_told_apart_from_bad_values)
{
    struct sd_config c;
    sd_config_default(&c);
    ck_assert_int_eq(set1(&c, "inflght", "3"), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "unknown key 'inflght'"));
    ck_assert_int_eq(set1(&c, "config", "/etc/x"), -ENOENT);
    ck_assert_int_eq(sd_config_set(&c, "inflight", "0", NULL, 0), -EINVAL); /* no err buffer */
}
END_TEST

START_TEST(file_lines_apply_comments_and_blanks_are_skipped)
{
    struct sd_config c;
    sd_config_default(&c);
    const char *path = conf_file("# stagingd settings\n"
                                 "\n"
                                 "store = /srv/store\n"
                                 "   inflight=  8   \n"
                                 "\top\t=\tscan\r\n"
                                 "cpu-verify = yes\n"
                                 "  # indented comment\n"
                                 "agent = /x.sock,/y.sock\n");
    ck_assert_msg(sd_config_load(&c, path, err, sizeof err) == 0, "%s", err);
    unlink(path);
    ck_assert_str_eq(c.store, "/srv/store");
    ck_assert_uint_eq(c.job.inflight, 8);
    ck_assert_int_eq(c.op, SD_JOB_SCAN);
    ck_assert_int_eq(c.job.cpu_verify, 1);
    ck_assert_uint_eq(c.nagents, 2);
}
END_TEST

START_TEST(file_errors_name_the_file_and_line_and_keep_earlier_lines)
{
    char want[256];
    struct sd_config c;
    sd_config_default(&c);
    const char *path = conf_file("batch = 32\n# ok\nop verify\nk = 99\n");
    ck_assert_int_eq(sd_config_load(&c, path, err, sizeof err), -EINVAL);
    snprintf(want, sizeof want, "%s:3: expected 'key = value', found 'op verify'", path);
    ck_assert_str_eq(err, want);
    ck_assert_uint_eq(c.job.batch, 32); /* before the bad line: applied */
    ck_assert_uint_eq(c.job.k, 10);     /* after it: not */
    unlink(path);

    path = conf_file("inflght = 3\n");
    ck_assert_int_eq(sd_config_load(&c, path, err, sizeof err), -ENOENT);
    snprintf(want, sizeof want, "%s:1: unknown key 'inflght'", path);
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "%s", err);
    unlink(path);

    path = conf_file("inflight = many\n");
    ck_assert_int_eq(sd_config_load(&c, path, err, sizeof err), -EINVAL);
    snprintf(want, sizeof want, "%s:1: inflight: expected an integer in 1..1024, found 'many'",
             path);
    ck_assert_str_eq(err, want);
    unlink(path);

    path = conf_file("config = /etc/other.conf\n");
    ck_assert_int_eq(sd_config_load(&c, path, err, sizeof err), -EINVAL);
    snprintf(want, sizeof want, "%s:1: 'config' is a command-line option only", path);
    ck_assert_str_eq(err, want);
    unlink(path);

    ck_assert_int_eq(sd_config_load(&c, "/nonexistent/stagingd.conf", err, sizeof err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/stagingd.conf: cannot open the config file"));
}
END_TEST

START_TEST(file_lines_longer_than_the_buffer_are_refused)
{
    size_t n = SD_CONFIG_PATH_MAX + 256;
    char *text = malloc(n + 16);
    ck_assert_ptr_nonnull(text);
    memcpy(text, "store = ", 8);
    memset(text + 8, 'x', n - 8);
    memcpy(text + n, "\n", 2);
    const char *path = conf_file(text);
    free(text);
    struct sd_config c;
    sd_config_default(&c);
    ck_assert_int_eq(sd_config_load(&c, path, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, ":1: line longer than"));
    unlink(path);
}
END_TEST

START_TEST(streaming_keys_take_their_values)
{
    struct sd_config c;
    sd_config_default(&c);
    ck_assert_int_eq(c.job.path, SD_JOB_PATH_AUTO);
    ck_assert_uint_eq(c.job.chunk_size, SD_JOB_CHUNK_DEFAULT);
    ck_assert_uint_eq(c.job.ring_slots, SD_JOB_RING_SLOTS_DEFAULT);
    ck_assert_uint_eq(c.job.ring_depth, SD_JOB_RING_DEPTH_DEFAULT);
    ck_assert_int_eq(set1(&c, "path", "stream"), 0);
    ck_assert_int_eq(c.job.path, SD_JOB_PATH_STREAM);
    ck_assert_int_eq(set1(&c, "path", "whole"), 0);
    ck_assert_int_eq(c.job.path, SD_JOB_PATH_WHOLE);
    ck_assert_int_eq(set1(&c, "path", "ring"), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "stream"));
    ck_assert_int_eq(set1(&c, "chunk-size", "4MiB"), 0);
    ck_assert_uint_eq(c.job.chunk_size, 4u << 20);
    ck_assert_int_eq(set1(&c, "ring-slots", "0"), -EINVAL);
    ck_assert_int_eq(set1(&c, "ring-slots", "257"), -EINVAL);
    ck_assert_int_eq(set1(&c, "ring-depth", "8"), 0);
    ck_assert_uint_eq(c.job.ring_depth, 8);
    ck_assert_int_eq(set1(&c, "cpu-verify-threads", "0"), 0);
    ck_assert_uint_eq(c.job.cpu_verify_threads, 0);
}
END_TEST

START_TEST(key_table_lists_every_settable_key_once)
{
    struct sd_config_key_info k;
    size_t n = 0, flags = 0;
    struct sd_config c;
    sd_config_default(&c);
    for (; sd_config_key_get(n, &k) == 0; n++) {
        ck_assert_ptr_nonnull(k.name);
        ck_assert_ptr_nonnull(k.arg);
        ck_assert_ptr_nonnull(k.help);
        /* Every key the table lists is one sd_config_set knows. */
        ck_assert_int_ne(set1(&c, k.name, "?"), -ENOENT);
        for (size_t j = 0; j < n; j++) {
            struct sd_config_key_info other;
            ck_assert_int_eq(sd_config_key_get(j, &other), 0);
            ck_assert_str_ne(other.name, k.name);
        }
        if (k.is_flag) {
            flags++;
            ck_assert_int_eq(set1(&c, k.name, "yes"), 0);
        }
    }
    ck_assert_uint_eq(n, 28); /* 23, and the streaming path's five (docs/streaming.md) */
    ck_assert_uint_eq(flags, 3); /* cpu-verify, list and metrics-remote */
    ck_assert_int_eq(sd_config_key_get(n, &k), -ENOENT);

    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(f);
    sd_config_usage(f);
    fclose(f);
    for (size_t i = 0; sd_config_key_get(i, &k) == 0; i++) {
        char opt[64];
        snprintf(opt, sizeof opt, "--%s %s", k.name, k.arg);
        ck_assert_msg(strstr(text, opt) != NULL, "usage lacks \"%s\"", opt);
    }
    ck_assert_ptr_nonnull(strstr(text, "--config FILE"));
    free(text);
}
END_TEST

static Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("config");
    tcase_add_test(tc, defaults_are_the_documented_ones);
    tcase_add_test(tc, agent_default_follows_the_runtime_dir_then_the_uid);
    tcase_add_test(tc, numbers_sizes_and_ranges_are_parsed_or_refused_with_what_was_expected);
    tcase_add_test(tc, words_and_yes_no_keys_take_their_spellings);
    tcase_add_test(tc, paths_and_agent_lists_are_bounded);
    tcase_add_test(tc, unknown_keys_are_told_apart_from_bad_values);
    tcase_add_test(tc, file_lines_apply_comments_and_blanks_are_skipped);
    tcase_add_test(tc, file_errors_name_the_file_and_line_and_keep_earlier_lines);
    tcase_add_test(tc, file_lines_longer_than_the_buffer_are_refused);
    tcase_add_test(tc, key_table_lists_every_settable_key_once);
    tcase_add_test(tc, streaming_keys_take_their_values);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(config_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
