/* Helpers every fuzz target links (tests/fuzz/fuzz.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fuzz.h"

int fz_write_file(const char *dir, const char *name, const void *data, size_t size)
{
    char path[512];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        return -ENAMETOOLONG;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    const unsigned char *p = data;
    while (size > 0) {
        ssize_t n = write(fd, p, size);
        if (n < 0) {
            int rc = -errno;
            close(fd);
            return rc;
        }
        p += n;
        size -= (size_t)n;
    }
    return close(fd) < 0 ? -errno : 0;
}

void fz_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fuzz %s: BROKEN PROMISE: ", fz_name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    (void)fz_one(data, size);
    return 0;
}
