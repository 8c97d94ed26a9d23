/* leasectl's stagingd connection: one command line to the control socket
 * (stagingd/daemon/control.c), its reply read up to "ok" or "error: ...",
 * the JSON line parsed with jansson. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "leasectl.h"

#define LCTL__REPLY_MAX (16u << 20)

int lctl_stagingd_json(const char *path, const char *command, int timeout_ms, json_t **reply_p,
                       char *err, size_t err_len)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) == 0 || strlen(path) >= sizeof addr.sun_path) {
        snprintf(err, err_len, "stagingd control socket '%s': expected a path of 1..%zu bytes",
                 path, sizeof addr.sun_path - 1);
        return -ENAMETOOLONG;
    }
    memcpy(addr.sun_path, path, strlen(path));
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, err_len, "socket: %s", strerror(errno));
        return -errno;
    }
    int rc = 0;
    char *buf = NULL;
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        rc = -errno;
        snprintf(err, err_len,
                 "no stagingd answers at %s (%s): start it (stagingd run --control %s ...) or "
                 "pass --stagingd SOCK",
                 path, strerror(-rc), path);
        goto out;
    }
    char line[256];
    int n = snprintf(line, sizeof line, "%s\n", command);
    if (send(fd, line, (size_t)n, MSG_NOSIGNAL) != n) {
        rc = -errno;
        snprintf(err, err_len, "stagingd at %s: send: %s", path, strerror(-rc));
        goto out;
    }
    size_t cap = 1 << 16, len = 0;
    buf = malloc(cap);
    if (!buf) {
        rc = -ENOMEM;
        snprintf(err, err_len, "out of memory");
        goto out;
    }
    /* Lines until the last one is "ok" or "error: ...". */
    for (;;) {
        buf[len] = '\0';
        char *last = len ? buf + len - 1 : NULL;
        if (last && *last == '\n') {
            *last = '\0';
            char *start = strrchr(buf, '\n');
            start = start ? start + 1 : buf;
            *last = '\n';
            if (strncmp(start, "ok\n", 3) == 0 || strncmp(start, "error", 5) == 0)
                break;
        }
        if (len + 1 >= cap) {
            if (cap >= LCTL__REPLY_MAX) {
                rc = -EMSGSIZE;
                snprintf(err, err_len, "stagingd at %s: reply longer than %u bytes", path,
                         LCTL__REPLY_MAX);
                goto out;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                rc = -ENOMEM;
                snprintf(err, err_len, "out of memory");
                goto out;
            }
            buf = nb;
            cap *= 2;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int pn = poll(&p, 1, timeout_ms);
        if (pn < 0 && errno == EINTR)
            continue;
        if (pn == 0) {
            rc = -ETIMEDOUT;
            snprintf(err, err_len, "stagingd at %s did not answer '%s' within %d ms", path, command,
                     timeout_ms);
            goto out;
        }
        ssize_t got = recv(fd, buf + len, cap - len - 1, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            rc = got < 0 ? -errno : -ECONNRESET;
            snprintf(err, err_len,
                     "stagingd at %s closed the connection before answering '%s' (only its own "
                     "uid or root may use the control socket)",
                     path, command);
            goto out;
        }
        len += (size_t)got;
    }
    char *nl = strchr(buf, '\n');
    if (strncmp(buf, "error", 5) == 0) {
        *nl = '\0';
        snprintf(err, err_len, "stagingd at %s refused '%s': %s", path, command, buf);
        rc = -EINVAL;
        goto out;
    }
    *nl = '\0';
    json_error_t je;
    json_t *doc = json_loads(buf, 0, &je);
    if (!doc) {
        snprintf(err, err_len,
                 "stagingd at %s answered '%s' with something that is not JSON (%s): an older "
                 "stagingd? leasectl needs its 'stats json', 'leases' and 'segments' commands",
                 path, command, je.text);
        rc = -EPROTO;
        goto out;
    }
    *reply_p = doc;
out:
    free(buf);
    close(fd);
    return rc;
}
