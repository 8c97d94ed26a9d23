/* Log lines of the GPU agent: one sink, stderr by default. */
#include <stdarg.h>
#include <stdio.h>

#include "ga_internal.h"

static ga_log_fn ga__sink;
static void *ga__sink_ctx;

void ga_log_set_sink(ga_log_fn fn, void *ctx)
{
    ga__sink = fn;
    ga__sink_ctx = ctx;
}

void ga__log(int level, const char *fmt, ...)
{
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (ga__sink) {
        ga__sink(ga__sink_ctx, level, line);
        return;
    }
    static const char *const names[] = {"error", "warning", "info"};
    const char *name = level >= GA_LOG_ERROR && level <= GA_LOG_INFO ? names[level] : "log";
    fprintf(stderr, "ga: %s: %s\n", name, line);
}
