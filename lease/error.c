/* Per-thread error messages and the service's log line. */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

#define MSG_MAX 512

static _Thread_local char last_error[MSG_MAX];

const char *lease_error_last(void)
{
    return last_error;
}

int lease_error_set(int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
    return rc;
}

static void emit(const struct lease_service *svc, const char *line)
{
    if (svc && svc->cfg.log)
        svc->cfg.log(svc->cfg.log_arg, line);
    else
        fprintf(stderr, "lease: %s\n", line);
}

void lease__log(const struct lease_service *svc, const char *fmt, ...)
{
    char line[MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    emit(svc, line);
}

int lease__fail(const struct lease_service *svc, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
    emit(svc, last_error);
    return rc;
}

void lease__error_clear(void)
{
    last_error[0] = '\0';
}

int lease__fail_logged(const struct lease_service *svc, int rc)
{
    if (last_error[0] == '\0')
        snprintf(last_error, sizeof(last_error), "backend failed with errno %d and no message",
                 -rc);
    emit(svc, last_error);
    return rc;
}

const char *lease_class_name(int cls)
{
    switch (cls) {
    case LEASE_CLASS_STAGED:
        return "STAGED";
    case LEASE_CLASS_PINNED:
        return "PINNED";
    case LEASE_CLASS_MAPPED:
        return "MAPPED";
    default:
        return "INVALID";
    }
}
