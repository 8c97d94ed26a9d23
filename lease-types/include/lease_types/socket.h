/* lease-types: where the agent listens unless told otherwise. A contract
 * between the two processes, so it is written once: the agent binds this
 * path and stagingd connects to it. Outside the umbrella header because it
 * reads the environment and the effective uid (<stdlib.h>, <unistd.h>). */
#ifndef LEASE_TYPES_SOCKET_H
#define LEASE_TYPES_SOCKET_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "lease_types/common.h"

LT_EXTERN_C_BEGIN

/* Writes the default socket path into @buf: $XDG_RUNTIME_DIR/lease-agent/
 * agent.sock when that variable is an absolute path, else
 * /run/lease-agent/agent.sock for root, else /tmp/lease-agent-<euid>/
 * agent.sock. Returns 0, or -ENAMETOOLONG when it does not fit in @len
 * bytes (then @buf holds a truncated, NUL-terminated prefix if @len > 0). */
static inline int lt_socket_default(char *buf, size_t len)
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    int n;
    if (xdg && xdg[0] == '/')
        n = snprintf(buf, len, "%s/lease-agent/agent.sock", xdg);
    else if (geteuid() == 0)
        n = snprintf(buf, len, "/run/lease-agent/agent.sock");
    else
        n = snprintf(buf, len, "/tmp/lease-agent-%u/agent.sock", (unsigned)geteuid());
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

LT_EXTERN_C_END

#endif /* LEASE_TYPES_SOCKET_H */
