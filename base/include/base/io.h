/* base: whole reads at an offset.
 *
 * Threads: reentrant; no state. */
#ifndef BASE_IO_H
#define BASE_IO_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Reads @len bytes of @fd at @off into @buf, retrying short reads and
 * EINTR. Returns the bytes read (fewer than @len only at end of file) or
 * -errno. */
static inline ssize_t base_pread_full(int fd, void *buf, size_t len, uint64_t off)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            break;
        done += (size_t)n;
    }
    return (ssize_t)done;
}

#ifdef __cplusplus
}
#endif

#endif /* BASE_IO_H */
