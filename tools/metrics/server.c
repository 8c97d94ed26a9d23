/* The HTTP endpoint: libmicrohttpd on one internal epoll thread (not
 * select: a daemon holding thousands of segment fds would pass FD_SETSIZE),
 * serving GET /metrics from the registry. We bind the socket ourselves so
 * the loopback rule is checked on the address actually bound and port 0
 * works. Built as stubs answering -ENOTSUP without libmicrohttpd
 * (LEASE_HAVE_MHD unset). See lease_metrics/metrics.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/err.h"
#include "metrics_internal.h"

#ifdef LEASE_HAVE_MHD
#include <microhttpd.h>

struct lm_server {
    struct lm_registry *reg;
    struct MHD_Daemon *mhd;
    struct base_log_sink log;
    uint16_t port;
    char address[80];
};

#define lm__log(srv, level, ...) base_log(&(srv)->log, (level), "metrics", __VA_ARGS__)

/* libmicrohttpd's own format and arguments (clang's -Wformat-nonliteral
 * accepts the vsnprintf below only in a function marked as taking one). */
__attribute__((format(printf, 2, 0))) static void lm__mhd_log(void *cls, const char *fmt,
                                                             va_list ap)
{
    struct lm_server *srv = cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    lm__log(srv, BASE_LOG_WARN, "http: %s", line);
}

static enum MHD_Result lm__reply(struct MHD_Connection *conn, unsigned status, char *body,
                                 size_t len, const char *type, const char *allow)
{
    struct MHD_Response *r = MHD_create_response_from_buffer_with_free_callback(len, body, free);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (allow)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    enum MHD_Result rc = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result lm__text(struct MHD_Connection *conn, unsigned status, const char *text,
                                const char *allow)
{
    size_t n = strlen(text);
    char *body = malloc(n + 1);
    if (!body)
        return MHD_NO;
    memcpy(body, text, n + 1);
    return lm__reply(conn, status, body, n, "text/plain; charset=utf-8", allow);
}

static enum MHD_Result lm__handle(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_len, void **req_cls)
{
    struct lm_server *srv = cls;
    (void)version;
    (void)upload;
    if (*upload_len != 0) {
        /* A body we do not read: drop it and answer once it has arrived. */
        *upload_len = 0;
        return MHD_YES;
    }
    (void)req_cls;
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return lm__text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD are served\n",
                        "GET, HEAD");
    if (strcmp(url, "/metrics") == 0) {
        char *text = NULL;
        size_t len = 0;
        if (lm_registry_render(srv->reg, &text, &len) < 0)
            return lm__text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n", NULL);
        return lm__reply(conn, MHD_HTTP_OK, text, len, LM_CONTENT_TYPE, NULL);
    }
    if (strcmp(url, "/") == 0)
        return lm__text(conn, MHD_HTTP_OK, "the metrics are at /metrics (Prometheus text format)\n",
                        NULL);
    return lm__text(conn, MHD_HTTP_NOT_FOUND, "not found: the metrics are at /metrics\n", NULL);
}

int lm_server_available(void)
{
    return 1;
}

int lm_server_start(struct lm_registry *reg, const struct lm_server_config *cfg, char *err,
                    size_t err_len, struct lm_server **srv_p)
{
    struct sockaddr_storage ss;
    size_t alen = 0;
    int rc = lm_listen_parse(cfg->listen, cfg->flags, &ss, sizeof ss, &alen, err, err_len);
    if (rc < 0)
        return rc;
    struct lm_server *srv = calloc(1, sizeof *srv);
    if (!srv)
        return base_errf(err, err_len, -ENOMEM, "out of memory");
    srv->reg = reg;
    srv->log = cfg->log;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        rc =
            base_errf(err, err_len, -errno, "metrics %s: socket: %s", cfg->listen, strerror(errno));
        goto fail;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ss.ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, (socklen_t)alen) < 0 || listen(fd, 16) < 0) {
        rc = base_errf(err, err_len, -errno, "metrics %s: cannot listen there: %s", cfg->listen,
                       strerror(errno));
        goto fail;
    }
    socklen_t blen = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &blen);
    char host[INET6_ADDRSTRLEN] = "?";
    if (ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        srv->port = ntohs(a->sin6_port);
        snprintf(srv->address, sizeof srv->address, "[%s]:%u", host, srv->port);
    } else {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
        srv->port = ntohs(a->sin_port);
        snprintf(srv->address, sizeof srv->address, "%s:%u", host, srv->port);
    }
    srv->mhd =
        MHD_start_daemon(MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
                         lm__handle, srv, MHD_OPTION_EXTERNAL_LOGGER, lm__mhd_log, srv,
                         MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT, (unsigned)16,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_END);
    if (!srv->mhd) {
        rc = base_errf(err, err_len, -EIO, "metrics %s: libmicrohttpd would not start",
                       srv->address);
        goto fail;
    }
    /* MHD closes the listening socket in MHD_stop_daemon. */
    *srv_p = srv;
    return 0;
fail:
    if (fd >= 0)
        close(fd);
    free(srv);
    return rc;
}

uint16_t lm_server_port(const struct lm_server *srv)
{
    return srv->port;
}

const char *lm_server_address(const struct lm_server *srv)
{
    return srv->address;
}

void lm_server_stop(struct lm_server *srv)
{
    if (!srv)
        return;
    MHD_stop_daemon(srv->mhd);
    free(srv);
}

#else /* !LEASE_HAVE_MHD */

struct lm_server {
    int unused;
};

int lm_server_available(void)
{
    return 0;
}

int lm_server_start(struct lm_registry *reg, const struct lm_server_config *cfg, char *err,
                    size_t err_len, struct lm_server **srv_p)
{
    (void)reg;
    (void)srv_p;
    struct sockaddr_storage ss;
    size_t alen = 0;
    int rc = lm_listen_parse(cfg->listen, cfg->flags, &ss, sizeof ss, &alen, err, err_len);
    if (rc < 0)
        return rc;
    return base_errf(err, err_len, -ENOTSUP,
                     "metrics %s: this build has no HTTP server (libmicrohttpd was not found "
                     "at configure time; install libmicrohttpd-dev and reconfigure)",
                     cfg->listen);
}

uint16_t lm_server_port(const struct lm_server *srv)
{
    (void)srv;
    return 0;
}

const char *lm_server_address(const struct lm_server *srv)
{
    (void)srv;
    return "";
}

void lm_server_stop(struct lm_server *srv)
{
    (void)srv;
}

#endif
