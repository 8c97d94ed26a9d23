/* Fd passing over Unix sockets: see base/fdpass.h. */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/fdpass.h"

/* Control space for the most fds a message can carry: a receive never
 * needs the kernel to cut the list short for lack of room, so MSG_CTRUNC
 * means the kernel could not install them. */
union cmsg_buf {
    struct cmsghdr align;
    char bytes[CMSG_SPACE(sizeof(int) * BASE_FDS_MAX)];
};

int base_send_fds(int sock, const void *buf, size_t len, const int *fds, unsigned nfds, int flags)
{
    if (nfds > BASE_FDS_MAX || (nfds && !fds) || (len && !buf))
        return -EINVAL;
    union cmsg_buf ctl;
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds) {
        memset(&ctl, 0, CMSG_SPACE(sizeof(int) * nfds));
        mh.msg_control = ctl.bytes;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        if (!cm) /* cannot happen: the buffer holds a header */
            return -EINVAL;
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
        memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
    }
    for (;;) {
        ssize_t n = sendmsg(sock, &mh, flags | MSG_NOSIGNAL);
        if (n >= 0)
            return (size_t)n == len ? 0 : -EMSGSIZE;
        if (errno != EINTR)
            return -errno;
    }
}

ssize_t base_recv_fds(int sock, void *buf, size_t len, int *fds, unsigned max_fds, int flags,
                      struct base_recv_info *info_p)
{
    if (max_fds && !fds)
        return -EINVAL;
    if (!info_p)
        max_fds = 0;
    union cmsg_buf ctl;
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct msghdr mh = {
        .msg_iov = &iov,
        .msg_iovlen = 1,
        .msg_control = ctl.bytes,
        .msg_controllen = sizeof ctl.bytes,
    };
    ssize_t n;
    do {
        n = recvmsg(sock, &mh, flags | MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    struct base_recv_info info = {0};
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
            if (info.nfds < max_fds) {
                fds[info.nfds++] = fd;
            } else {
                close(fd);
                info.nfds_closed++;
            }
        }
    }
    if (info.nfds_closed)
        info.flags |= BASE_RECV_EXTRA_FDS;
    if (mh.msg_flags & MSG_TRUNC)
        info.flags |= BASE_RECV_TRUNC;
    if (mh.msg_flags & MSG_CTRUNC)
        info.flags |= BASE_RECV_CTRUNC;
    if (info_p)
        *info_p = info;
    return n;
}
