/* The metrics endpoint's address: "HOST:PORT" parsed without name lookups,
 * and the loopback rule. See lm_listen_parse in lease_metrics/metrics.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/err.h"
#include "base/parse.h"
#include "metrics_internal.h"

int lm_listen_parse(const char *text, unsigned flags, void *addr_p, size_t addr_len,
                    size_t *addr_len_p, char *err, size_t err_len)
{
    static const char want[] = "expected HOST:PORT (127.0.0.1:9464, [::1]:9464, localhost:9464)";
    if (!text || addr_len < sizeof(struct sockaddr_in6))
        return base_errf(err, err_len, -EINVAL, "%s, found nothing", want);
    char host[64];
    const char *port;
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (!close || close[1] != ':' || (size_t)(close - text - 1) >= sizeof host)
            return base_errf(err, err_len, -EINVAL, "%s, found '%s'", want, text);
        memcpy(host, text + 1, (size_t)(close - text - 1));
        host[close - text - 1] = '\0';
        port = close + 2;
    } else {
        const char *colon = strrchr(text, ':');
        if (!colon || colon == text || (size_t)(colon - text) >= sizeof host ||
            memchr(text, ':', (size_t)(colon - text)))
            return base_errf(err, err_len, -EINVAL, "%s, found '%s'", want, text);
        memcpy(host, text, (size_t)(colon - text));
        host[colon - text] = '\0';
        port = colon + 1;
    }
    uint64_t p;
    if (base_parse_u64(port, 0, 65535, &p, NULL, 0) < 0)
        return base_errf(err, err_len, -EINVAL, "%s: port: expected 0..65535, found '%s'", want,
                         port);
    if (strcmp(host, "localhost") == 0)
        snprintf(host, sizeof host, "127.0.0.1");

    struct sockaddr_in in4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p)};
    struct sockaddr_in6 in6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)p)};
    int loopback;
    if (inet_pton(AF_INET, host, &in4.sin_addr) == 1) {
        loopback = (ntohl(in4.sin_addr.s_addr) >> 24) == 127;
    } else if (text[0] == '[' && inet_pton(AF_INET6, host, &in6.sin6_addr) == 1) {
        loopback = IN6_IS_ADDR_LOOPBACK(&in6.sin6_addr);
    } else {
        return base_errf(err, err_len, -EINVAL,
                         "%s: host: expected an IPv4 address, [IPv6] or localhost (no name "
                         "lookups), found '%s'",
                         want, host);
    }
    if (!loopback && !(flags & LM_SERVER_ALLOW_REMOTE))
        return base_errf(err, err_len, -EPERM,
                         "%s is not a loopback address: metrics stay on this machine unless "
                         "remote scrapes are allowed",
                         text);
    memset(addr_p, 0, addr_len);
    if (in6.sin6_family == AF_INET6 && text[0] == '[') {
        memcpy(addr_p, &in6, sizeof in6);
        *addr_len_p = sizeof in6;
    } else {
        memcpy(addr_p, &in4, sizeof in4);
        *addr_len_p = sizeof in4;
    }
    return 0;
}
