/* systemd's readiness protocol without libsystemd (base/notify.h). Both
 * daemons' units say Type=notify (scripts/systemd/); anywhere else
 * $NOTIFY_SOCKET is unset and this is a no-op. */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/notify.h"

int base_notify(const char *state)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !path[0])
        return 0;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    size_t n = strlen(path);
    if ((path[0] != '/' && path[0] != '@') || n >= sizeof addr.sun_path)
        return -EINVAL;
    memcpy(addr.sun_path, path, n);
    if (path[0] == '@')
        addr.sun_path[0] = '\0';
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    /* An abstract name is exactly its bytes; a path takes its NUL too. */
    socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (path[0] == '/'));
    ssize_t sent = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&addr, alen);
    int rc = sent < 0 ? -errno : 1;
    close(fd);
    return rc;
}
