/* lease_metrics: names and labels refused, the exact text of counters,
 * gauges and histograms, escaping, counters that never go down, updates
 * from many threads, the collect callback, the loopback rule, and the HTTP
 * endpoint answering GET /metrics, 404 and 405 on a port of its choosing. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lease_metrics/metrics.h"

static char *render(struct lm_registry *reg)
{
    char *text = NULL;
    size_t len = 0;
    ck_assert_int_eq(lm_registry_render(reg, &text, &len), 0);
    ck_assert_uint_eq(strlen(text), len);
    return text;
}

START_TEST(test_names_refused)
{
    struct lm_registry *reg;
    struct lm_family *f;
    ck_assert_int_eq(lm_registry_create(&reg), 0);
    ck_assert_int_eq(lm_family_add(reg, LM_GAUGE, "9lives", "h", NULL, NULL, 0, &f), -EINVAL);
    ck_assert_int_eq(lm_family_add(reg, LM_GAUGE, "a-b", "h", NULL, NULL, 0, &f), -EINVAL);
    ck_assert_int_eq(lm_family_add(reg, LM_GAUGE, "", "h", NULL, NULL, 0, &f), -EINVAL);
    ck_assert_int_eq(lm_family_add(reg, LM_GAUGE, "ok", "", NULL, NULL, 0, &f), -EINVAL);
    const char *bad1[] = {"__x", NULL}, *bad2[] = {"a:b", NULL}, *dup[] = {"a", "a", NULL};
    const char *five[] = {"a", "b", "c", "d", "e", NULL}, *le[] = {"le", NULL};
    ck_assert_int_eq(lm_family_add(reg, LM_GAUGE, "g", "h", bad1, NULL, 0, &f), -EINVAL);
    ck_assert_int_eq(lm_family_add(reg, LM_GAUGE, "g", "h", bad2, NULL, 0, &f), -EINVAL);
    ck_assert_int_eq(lm_family_add(reg, LM_GAUGE, "g", "h", dup, NULL, 0, &f), -EINVAL);
    ck_assert_int_eq(lm_family_add(reg, LM_GAUGE, "g", "h", five, NULL, 0, &f), -EINVAL);
    const double b[] = {1, 1};
    ck_assert_int_eq(lm_family_add(reg, LM_HISTOGRAM, "h", "h", NULL, b, 2, &f), -EINVAL);
    ck_assert_int_eq(lm_family_add(reg, LM_HISTOGRAM, "h", "h", NULL, NULL, 0, &f), -EINVAL);
    ck_assert_int_eq(lm_family_add(reg, LM_HISTOGRAM, "h", "h", le, b, 1, &f), -EINVAL);
    ck_assert_int_eq(lm_family_add(reg, LM_GAUGE, "g", "h", NULL, b, 1, &f), -EINVAL);
    ck_assert_int_eq(lm_family_add(reg, LM_GAUGE, "ns:g_1", "h", NULL, NULL, 0, &f), 0);
    ck_assert_int_eq(lm_family_add(reg, LM_COUNTER, "ns:g_1", "h", NULL, NULL, 0, &f), -EEXIST);
    struct lm_series *s;
    const char *v[] = {"x", NULL};
    ck_assert_int_eq(lm_series_get(f, v, &s), -EINVAL); /* no labels declared */
    lm_registry_destroy(reg);
}
END_TEST

START_TEST(test_text_exact)
{
    struct lm_registry *reg;
    struct lm_family *c, *g, *h;
    struct lm_series *s1, *s2, *sg, *sh;
    ck_assert_int_eq(lm_registry_create(&reg), 0);
    const char *labels[] = {"class", "client", NULL};
    ck_assert_int_eq(lm_family_add(reg, LM_COUNTER, "x_bytes_total", "Bytes.\nSecond \\ line.",
                                   labels, NULL, 0, &c),
                     0);
    ck_assert_int_eq(lm_family_add(reg, LM_GAUGE, "x_up", "Up.", NULL, NULL, 0, &g), 0);
    const double bounds[] = {0.25, 0.5, 2};
    ck_assert_int_eq(lm_family_add(reg, LM_HISTOGRAM, "x_seconds", "Time.", NULL, bounds, 3, &h),
                     0);
    const char *v1[] = {"PINNED", "stagingd", NULL};
    const char *v2[] = {"MAPPED", "a \"q\" \\ b\nc", NULL};
    ck_assert_int_eq(lm_series_get(c, v1, &s1), 0);
    ck_assert_int_eq(lm_series_get(c, v2, &s2), 0);
    struct lm_series *again;
    ck_assert_int_eq(lm_series_get(c, v1, &again), 0);
    ck_assert_ptr_eq(again, s1);
    ck_assert_int_eq(lm_series_get(g, NULL, &sg), 0);
    ck_assert_int_eq(lm_series_get(h, NULL, &sh), 0);
    lm_counter_add(s1, 4096);
    lm_counter_add(s1, -5); /* ignored */
    lm_counter_add(s2, 0.25);
    lm_gauge_set(sg, 1);
    lm_histogram_observe(sh, 0.125);
    lm_histogram_observe(sh, 0.5);
    lm_histogram_observe(sh, 3);
    char *text = render(reg);
    const char *want = "# HELP x_bytes_total Bytes.\\nSecond \\\\ line.\n"
                       "# TYPE x_bytes_total counter\n"
                       "x_bytes_total{class=\"PINNED\",client=\"stagingd\"} 4096\n"
                       "x_bytes_total{class=\"MAPPED\",client=\"a \\\"q\\\" \\\\ b\\nc\"} 0.25\n"
                       "# HELP x_up Up.\n"
                       "# TYPE x_up gauge\n"
                       "x_up 1\n"
                       "# HELP x_seconds Time.\n"
                       "# TYPE x_seconds histogram\n"
                       "x_seconds_bucket{le=\"0.25\"} 1\n"
                       "x_seconds_bucket{le=\"0.5\"} 2\n"
                       "x_seconds_bucket{le=\"2\"} 2\n"
                       "x_seconds_bucket{le=\"+Inf\"} 3\n"
                       "x_seconds_sum 3.625\n"
                       "x_seconds_count 3\n";
    ck_assert_str_eq(text, want);
    free(text);
    lm_registry_destroy(reg);
}
END_TEST

START_TEST(test_values)
{
    struct lm_registry *reg;
    struct lm_family *c, *g;
    struct lm_series *sc, *sg;
    ck_assert_int_eq(lm_registry_create(&reg), 0);
    ck_assert_int_eq(lm_family_add(reg, LM_COUNTER, "c_total", "c", NULL, NULL, 0, &c), 0);
    ck_assert_int_eq(lm_family_add(reg, LM_GAUGE, "g", "g", NULL, NULL, 0, &g), 0);
    ck_assert_int_eq(lm_series_get(c, NULL, &sc), 0);
    ck_assert_int_eq(lm_series_get(g, NULL, &sg), 0);
    char *text = render(reg); /* rendered as 0 before any update */
    ck_assert_ptr_nonnull(strstr(text, "\nc_total 0\n"));
    ck_assert_ptr_nonnull(strstr(text, "\ng 0\n"));
    free(text);
    lm_counter_set(sc, 10);
    lm_counter_set(sc, 7); /* a counter never goes down */
    ck_assert(lm_series_value(sc) == 10);
    lm_counter_set(sc, 12);
    ck_assert(lm_series_value(sc) == 12);
    lm_gauge_set(sg, 5);
    lm_gauge_add(sg, -7.5);
    ck_assert(lm_series_value(sg) == -2.5);
    lm_gauge_set(sg, INFINITY);
    text = render(reg);
    ck_assert_ptr_nonnull(strstr(text, "\ng +Inf\n"));
    free(text);
    lm_gauge_set(sg, NAN);
    text = render(reg);
    ck_assert_ptr_nonnull(strstr(text, "\ng NaN\n"));
    free(text);
    lm_gauge_set(sg, 0.1);
    text = render(reg);
    ck_assert_ptr_nonnull(strstr(text, "\ng 0.1\n"));
    free(text);
    lm_gauge_set(sg, 1e300);
    text = render(reg);
    ck_assert_ptr_nonnull(strstr(text, "\ng 1e+300\n"));
    free(text);
    lm_registry_destroy(reg);
}
END_TEST

#define THREADS 4
#define ADDS 100000

struct adder {
    struct lm_series *c, *h;
};

static void *adder_main(void *arg)
{
    struct adder *a = arg;
    for (int i = 0; i < ADDS; i++) {
        lm_counter_add(a->c, 1);
        lm_histogram_observe(a->h, (double)(i % 3));
    }
    return NULL;
}

START_TEST(test_threads)
{
    struct lm_registry *reg;
    struct lm_family *c, *h;
    struct adder a;
    ck_assert_int_eq(lm_registry_create(&reg), 0);
    ck_assert_int_eq(lm_family_add(reg, LM_COUNTER, "n_total", "n", NULL, NULL, 0, &c), 0);
    const double b[] = {0.5, 1.5};
    ck_assert_int_eq(lm_family_add(reg, LM_HISTOGRAM, "v", "v", NULL, b, 2, &h), 0);
    ck_assert_int_eq(lm_series_get(c, NULL, &a.c), 0);
    ck_assert_int_eq(lm_series_get(h, NULL, &a.h), 0);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, adder_main, &a), 0);
    /* Renders while they add: never a torn line. */
    for (int i = 0; i < 20; i++)
        free(render(reg));
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    ck_assert(lm_series_value(a.c) == (double)THREADS * ADDS);
    char *text = render(reg);
    char want[128];
    snprintf(want, sizeof want, "\nv_count %d\n", THREADS * ADDS);
    ck_assert_ptr_nonnull(strstr(text, want));
    free(text);
    lm_registry_destroy(reg);
}
END_TEST

static int collected;

static void collect(void *ctx, struct lm_registry *reg)
{
    (void)reg;
    struct lm_family *f = ctx;
    const char *v[] = {"made-at-scrape", NULL};
    struct lm_series *s;
    ck_assert_int_eq(lm_series_get(f, v, &s), 0);
    lm_gauge_set(s, ++collected);
}

START_TEST(test_collect)
{
    struct lm_registry *reg;
    struct lm_family *f;
    ck_assert_int_eq(lm_registry_create(&reg), 0);
    const char *labels[] = {"what", NULL};
    ck_assert_int_eq(lm_family_add(reg, LM_GAUGE, "c", "c", labels, NULL, 0, &f), 0);
    char *text = render(reg); /* no series yet: HELP and TYPE only */
    ck_assert_str_eq(text, "# HELP c c\n# TYPE c gauge\n");
    free(text);
    lm_registry_collect_set(reg, collect, f);
    free(render(reg));
    text = render(reg);
    ck_assert_ptr_nonnull(strstr(text, "c{what=\"made-at-scrape\"} 2\n"));
    free(text);
    lm_registry_destroy(reg);
}
END_TEST

START_TEST(test_family_clear)
{
    struct lm_registry *reg;
    struct lm_family *f, *g;
    struct lm_series *s;
    ck_assert_int_eq(lm_registry_create(&reg), 0);
    const char *labels[] = {"client", NULL};
    ck_assert_int_eq(lm_family_add(reg, LM_COUNTER, "per_client_total", "p", labels, NULL, 0, &f),
                     0);
    ck_assert_int_eq(lm_family_add(reg, LM_GAUGE, "plain", "p", NULL, NULL, 0, &g), 0);
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "c%d", i);
        const char *v[] = {name, NULL};
        ck_assert_int_eq(lm_series_get(f, v, &s), 0);
        lm_counter_add(s, i + 1);
    }
    char *text = render(reg);
    ck_assert_ptr_nonnull(strstr(text, "per_client_total{client=\"c2\"} 3\n"));
    free(text);
    ck_assert_int_eq(lm_family_clear(f), 0);
    ck_assert_int_eq(lm_family_clear(g), -EINVAL); /* no labels: its series stays */
    text = render(reg);
    ck_assert_ptr_null(strstr(text, "per_client_total{"));
    ck_assert_ptr_nonnull(strstr(text, "# TYPE per_client_total counter\n"));
    ck_assert_ptr_nonnull(strstr(text, "plain 0\n"));
    free(text);
    /* Remade after the clear, from zero. */
    const char *v[] = {"c1", NULL};
    ck_assert_int_eq(lm_series_get(f, v, &s), 0);
    lm_counter_add(s, 5);
    text = render(reg);
    ck_assert_ptr_nonnull(strstr(text, "per_client_total{client=\"c1\"} 5\n"));
    free(text);
    lm_registry_destroy(reg);
}
END_TEST

START_TEST(test_listen_parse)
{
    struct sockaddr_storage ss;
    size_t len = 0;
    char err[256];
    ck_assert_int_eq(lm_listen_parse("127.0.0.1:9464", 0, &ss, sizeof ss, &len, err, sizeof err),
                     0);
    ck_assert_int_eq(ss.ss_family, AF_INET);
    ck_assert_uint_eq(ntohs(((struct sockaddr_in *)&ss)->sin_port), 9464);
    ck_assert_int_eq(lm_listen_parse("localhost:0", 0, &ss, sizeof ss, &len, err, sizeof err), 0);
    ck_assert_int_eq(lm_listen_parse("[::1]:80", 0, &ss, sizeof ss, &len, err, sizeof err), 0);
    ck_assert_int_eq(ss.ss_family, AF_INET6);
    ck_assert_int_eq(lm_listen_parse("127.8.9.10:1", 0, &ss, sizeof ss, &len, err, sizeof err), 0);
    /* Not loopback: refused unless asked for. */
    ck_assert_int_eq(lm_listen_parse("0.0.0.0:9464", 0, &ss, sizeof ss, &len, err, sizeof err),
                     -EPERM);
    ck_assert_ptr_nonnull(strstr(err, "not a loopback address"));
    ck_assert_int_eq(lm_listen_parse("[::]:9464", 0, &ss, sizeof ss, &len, err, sizeof err),
                     -EPERM);
    ck_assert_int_eq(lm_listen_parse("0.0.0.0:9464", LM_SERVER_ALLOW_REMOTE, &ss, sizeof ss, &len,
                                     err, sizeof err),
                     0);
    /* Malformed. */
    const char *bad[] = {"9464",      ":9464",    "127.0.0.1:", "127.0.0.1:65536",
                         "host:9464", "::1:9464", "[::1]9464",  "127.0.0.1:9x",
                         "[nope]:1",  "1.2.3:4",  NULL};
    for (int i = 0; bad[i]; i++)
        ck_assert_msg(lm_listen_parse(bad[i], LM_SERVER_ALLOW_REMOTE, &ss, sizeof ss, &len, err,
                                      sizeof err) == -EINVAL,
                      "'%s' accepted", bad[i]);
}
END_TEST

/* One HTTP/1.0 exchange with 127.0.0.1:@port; the whole answer. */
static char *http(uint16_t port, const char *request)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(send(fd, request, strlen(request), MSG_NOSIGNAL), (ssize_t)strlen(request));
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    ssize_t n;
    while ((n = recv(fd, buf + len, cap - len - 1, 0)) > 0)
        len += (size_t)n;
    buf[len] = '\0';
    close(fd);
    return buf;
}

START_TEST(test_server)
{
    if (!lm_server_available()) {
        fprintf(stderr, "test_server: built without libmicrohttpd: skipped\n");
        return;
    }
    struct lm_registry *reg;
    struct lm_family *f;
    struct lm_series *s;
    ck_assert_int_eq(lm_registry_create(&reg), 0);
    ck_assert_int_eq(lm_family_add(reg, LM_COUNTER, "t_total", "T.", NULL, NULL, 0, &f), 0);
    ck_assert_int_eq(lm_series_get(f, NULL, &s), 0);
    lm_counter_add(s, 42);
    struct lm_server_config cfg = {.listen = "127.0.0.1:0"};
    struct lm_server *srv;
    char err[256];
    ck_assert_int_eq(lm_server_start(reg, &cfg, err, sizeof err, &srv), 0);
    uint16_t port = lm_server_port(srv);
    ck_assert_uint_ne(port, 0);
    char want[64];
    snprintf(want, sizeof want, "127.0.0.1:%u", port);
    ck_assert_str_eq(lm_server_address(srv), want);

    char *r = http(port, "GET /metrics HTTP/1.0\r\n\r\n");
    ck_assert_msg(strncmp(r, "HTTP/1.0 200", 12) == 0 || strncmp(r, "HTTP/1.1 200", 12) == 0, "%s",
                  r);
    ck_assert_ptr_nonnull(strstr(r, "Content-Type: " LM_CONTENT_TYPE));
    ck_assert_ptr_nonnull(
        strstr(r, "\r\n\r\n# HELP t_total T.\n# TYPE t_total counter\nt_total 42\n"));
    free(r);
    r = http(port, "GET /nope HTTP/1.0\r\n\r\n");
    ck_assert_ptr_nonnull(strstr(r, " 404 "));
    free(r);
    r = http(port, "POST /metrics HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc");
    ck_assert_ptr_nonnull(strstr(r, " 405 "));
    free(r);

    /* The port is taken now. */
    struct lm_server *second;
    struct lm_server_config same = {.listen = want};
    ck_assert_int_eq(lm_server_start(reg, &same, err, sizeof err, &second), -EADDRINUSE);
    ck_assert_ptr_nonnull(strstr(err, "cannot listen there"));
    /* Not loopback without the flag: refused before binding. */
    struct lm_server_config remote = {.listen = "0.0.0.0:0"};
    ck_assert_int_eq(lm_server_start(reg, &remote, err, sizeof err, &second), -EPERM);
    lm_server_stop(srv);
    lm_registry_destroy(reg);
}
END_TEST

static Suite *metrics_suite(void)
{
    Suite *s = suite_create("lease_metrics");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_names_refused);
    tcase_add_test(tc, test_text_exact);
    tcase_add_test(tc, test_values);
    tcase_add_test(tc, test_threads);
    tcase_add_test(tc, test_collect);
    tcase_add_test(tc, test_family_clear);
    tcase_add_test(tc, test_listen_parse);
    tcase_add_test(tc, test_server);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(metrics_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
