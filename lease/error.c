/* The service's log line, and the two ways a failure is decided: here, or
 * below (fd checks, a backend) and passed up. Every line goes through the
 * config's base_log_sink as subsystem "lease". */
#include <stdarg.h>

#include "internal.h"

/* Refusals are answers to a peer: info. The agent that sends one on logs
 * it at warning where an operator can act (the pin budget, RLIMIT_MEMLOCK),
 * with the option that changes it, which only the agent knows. */
static int refusal_level(uint32_t code)
{
    (void)code;
    return BASE_LOG_INFO;
}

static const struct base_log_sink *sink_of(const struct lease_service *svc)
{
    return svc ? &svc->cfg.log : NULL;
}

int lease__fail(const struct lease_service *svc, struct lt_failure *why_p, uint32_t code, int err,
                const char *fmt, ...)
{
    struct lt_failure f;
    va_list ap;
    va_start(ap, fmt);
    lt_failure_vset(&f, code, err, fmt, ap);
    va_end(ap);
    base_log(sink_of(svc), refusal_level(code), LEASE__SUBSYS, "%s", f.message);
    if (why_p)
        *why_p = f;
    return f.err;
}

int lease__fail_logged(const struct lease_service *svc, struct lt_failure *why_p,
                       const struct lt_failure *f)
{
    base_log(sink_of(svc), refusal_level(f->code), LEASE__SUBSYS, "%s", f->message);
    if (why_p && why_p != f)
        *why_p = *f;
    return f->err;
}
