/* base: passing fds with a message over a Unix socket (SCM_RIGHTS).
 *
 * Made for SOCK_SEQPACKET, where one call moves one whole packet and the
 * fds that came with it. Both calls retry EINTR; a send never raises
 * SIGPIPE (MSG_NOSIGNAL); received fds are close-on-exec (MSG_CMSG_CLOEXEC).
 *
 * Threads: reentrant; no state. Ownership: base_send_fds leaves the caller's
 * fds open (the peer gets duplicates); every fd base_recv_fds stores is the
 * caller's to close, and it closes every fd it does not store. */
#ifndef BASE_FDPASS_H
#define BASE_FDPASS_H

#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Fds one message may carry: the kernel's SCM_MAX_FD. */
#define BASE_FDS_MAX 253u

/* Sends @len bytes of @buf and @nfds fds of @fds as one message; @flags
 * (MSG_DONTWAIT, ...) join MSG_NOSIGNAL. Returns 0 once all of it is sent,
 * -EINVAL (@nfds above BASE_FDS_MAX, or a NULL array with a nonzero
 * count), -EMSGSIZE (fewer bytes went: a stream socket's short write) or
 * sendmsg's -errno (-EAGAIN, -EPIPE, -EBADF for a bad fd, ...). */
int base_send_fds(int sock, const void *buf, size_t len, const int *fds, unsigned nfds, int flags);

/* base_recv_fds's report on a message, beyond its length. */
enum {
    /* The message was longer than @len: the rest is lost (SEQPACKET). */
    BASE_RECV_TRUNC = 1u << 0,
    /* The kernel dropped fds (MSG_CTRUNC): most likely this process hit
     * RLIMIT_NOFILE. The fds counted in nfds are those that arrived. */
    BASE_RECV_CTRUNC = 1u << 1,
    /* More fds came than @max_fds: the extras were closed (nfds_closed). */
    BASE_RECV_EXTRA_FDS = 1u << 2,
};

struct base_recv_info {
    unsigned flags;       /* BASE_RECV_* */
    unsigned nfds;        /* fds stored in @fds, in the order sent */
    unsigned nfds_closed; /* fds that came beyond @max_fds, closed here */
};

/* Receives one message into @buf (@len bytes) and up to @max_fds fds into
 * @fds; @flags (MSG_DONTWAIT, ...) join MSG_CMSG_CLOEXEC. Returns the bytes
 * received (0: end of file, or an empty message), with *info_p filled; or
 * -EINVAL (a NULL @fds with a nonzero @max_fds) or recvmsg's -errno
 * (-EAGAIN, -ECONNRESET, ...), with no fd left open. @info_p NULL: every fd
 * that came is closed, unseen. */
ssize_t base_recv_fds(int sock, void *buf, size_t len, int *fds, unsigned max_fds, int flags,
                      struct base_recv_info *info_p);

#ifdef __cplusplus
}
#endif

#endif /* BASE_FDPASS_H */
