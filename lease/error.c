/* The service's log line, and the two ways a failure is decided: here, or
 * below (fd checks, a backend) and passed up. */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

#define LINE_MAX_LEN 512

static void emit(const struct lease_service *svc, const char *line)
{
    if (svc && svc->cfg.log)
        svc->cfg.log(svc->cfg.log_arg, line);
    else
        fprintf(stderr, "lease: %s\n", line);
}

void lease__log(const struct lease_service *svc, const char *fmt, ...)
{
    char line[LINE_MAX_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    emit(svc, line);
}

int lease__fail(const struct lease_service *svc, struct lt_failure *why_p, uint32_t code, int err,
                const char *fmt, ...)
{
    struct lt_failure f;
    va_list ap;
    va_start(ap, fmt);
    lt_failure_vset(&f, code, err, fmt, ap);
    va_end(ap);
    emit(svc, f.message);
    if (why_p)
        *why_p = f;
    return f.err;
}

int lease__fail_logged(const struct lease_service *svc, struct lt_failure *why_p,
                       const struct lt_failure *f)
{
    emit(svc, f->message);
    if (why_p && why_p != f)
        *why_p = *f;
    return f->err;
}
