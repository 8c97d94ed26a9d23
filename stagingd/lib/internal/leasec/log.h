/* liblease-client's sinks: the public struct leasec_log as the struct
 * base_log_sink the pool and the client log through. Internal to the
 * library (the pool and the client include it; it is not installed).
 *
 * A zeroed public sink means standard error, at the level it names (0:
 * info). base's own default would be base's process default instead, which
 * inside the library is nobody's (the library's copy of base is private)
 * and ignores the level, so the library writes the line itself: one
 * "<program>: <level>: <subsys>: <line>\n" per write(2), as base's stderr
 * sink does. */
#ifndef LEASEC_LOG_INTERNAL_H
#define LEASEC_LOG_INTERNAL_H

#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#include "base/log.h"
#include "lease/client.h"

static inline void leasec__log_stderr(void *ctx, int level, const char *subsys, const char *line)
{
    (void)ctx;
    char buf[BASE_LOG_LINE_MAX + 128];
    int n = snprintf(buf, sizeof buf, "%s: %s: %s%s%s\n", program_invocation_short_name,
                     base_log_level_name(level), subsys, *subsys ? ": " : "", line);
    if (n < 0)
        return;
    size_t len = (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1;
    if (len && buf[len - 1] != '\n')
        buf[len - 1] = '\n'; /* cut: still one line */
    for (size_t off = 0; off < len;) {
        ssize_t w = write(STDERR_FILENO, buf + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        off += (size_t)w;
    }
}

/* The base sink for @log (the same three fields; a NULL fn writes to
 * standard error at @log's level). */
static inline struct base_log_sink leasec__log_sink(const struct leasec_log *log)
{
    struct base_log_sink s = {.fn = log->fn, .ctx = log->ctx, .max_level = log->max_level};
    if (!s.fn) {
        s.fn = leasec__log_stderr;
        s.ctx = NULL;
    }
    return s;
}

#endif /* LEASEC_LOG_INTERNAL_H */
