/* The words of the hardware gate, kept free of driver calls so that the CPU
 * tests can check them on machines without a GPU. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ga_internal.h"

/* Whether @tok (length @n) reads DIGITS.DIGITS[.DIGITS...]. */
static int ga__is_version(const char *tok, size_t n)
{
    int dots = 0;
    if (n == 0 || !isdigit((unsigned char)tok[0]) || !isdigit((unsigned char)tok[n - 1]))
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (tok[i] == '.') {
            if (tok[i + 1] == '.')
                return 0;
            dots++;
        } else if (!isdigit((unsigned char)tok[i])) {
            return 0;
        }
    }
    return dots >= 1;
}

int ga__kmd_version_parse(const char *text, int *major_p, int *minor_p)
{
    const char *p = text ? strstr(text, "NVRM version:") : NULL;
    if (!p)
        return -EBADMSG;
    const char *end = strchr(p, '\n');
    if (!end)
        end = p + strlen(p);
    /* The version is the first DIGITS.DIGITS token on the line; the words
     * around it differ between the proprietary and the open module. */
    for (p += strlen("NVRM version:"); p < end;) {
        while (p < end && isspace((unsigned char)*p))
            p++;
        const char *tok = p;
        while (p < end && !isspace((unsigned char)*p))
            p++;
        size_t n = (size_t)(p - tok);
        if (!ga__is_version(tok, n))
            continue;
        char *dot = NULL;
        long major = strtol(tok, &dot, 10);
        long minor = strtol(dot + 1, NULL, 10);
        if (major <= 0 || major > 100000 || minor < 0 || minor > 100000)
            return -EBADMSG;
        *major_p = (int)major;
        *minor_p = (int)minor;
        return 0;
    }
    return -EBADMSG;
}

int ga__kmd_version_read(const char *path, int *major_p, int *minor_p)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    char text[4096];
    size_t used = 0;
    int rc = 0;
    while (used < sizeof(text) - 1) {
        ssize_t n = read(fd, text + used, sizeof(text) - 1 - used);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            break;
        }
        if (n == 0)
            break;
        used += (size_t)n;
    }
    close(fd);
    if (rc < 0)
        return rc;
    text[used] = '\0';
    return ga__kmd_version_parse(text, major_p, minor_p);
}

int ga__arch_refusal_format(char *buf, size_t len, const struct ga_device_info *info,
                            unsigned int required)
{
    return snprintf(buf, len,
                    "device %d (%s, PCI %s) has compute capability %u.%u (sm_%u), but this "
                    "agent's kernels are built only for sm_%u (compute capability %u.%u) "
                    "with no PTX, so they cannot run there. Build for this GPU with "
                    "`make build ARCH=%u` or `cmake -DLEASE_GPU_ARCH=%u`",
                    info->ordinal, info->name, info->pci_bus_id, info->arch / 10, info->arch % 10,
                    info->arch, required, required / 10, required % 10, info->arch, info->arch);
}
