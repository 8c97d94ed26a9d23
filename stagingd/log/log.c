/* stagingd's log lines: see stagingd/log.h. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "stagingd/log.h"

#define SD_LOG_LINE_MAX 2048

static pthread_mutex_t sd_log__mu = PTHREAD_MUTEX_INITIALIZER;
static char sd_log__prog[32] = "stagingd";
static enum sd_log_level sd_log__level = SD_LOG_INFO;
static int sd_log__tty = -1; /* -1: not probed yet */

static const char *const sd_log__names[] = {"error", "warning", "info", "debug"};
static const char *const sd_log__colours[] = {"\033[1;31m", "\033[1;33m", "\033[32m", "\033[2m"};

static int sd_log__tty_get(void)
{
    if (sd_log__tty < 0)
        sd_log__tty = isatty(STDERR_FILENO) ? 1 : 0;
    return sd_log__tty;
}

void sd_log_setup(const char *prog, enum sd_log_level level)
{
    pthread_mutex_lock(&sd_log__mu);
    if (prog)
        snprintf(sd_log__prog, sizeof sd_log__prog, "%s", prog);
    sd_log__level = level;
    sd_log__tty = isatty(STDERR_FILENO) ? 1 : 0;
    pthread_mutex_unlock(&sd_log__mu);
}

enum sd_log_level sd_log_level_get(void)
{
    return sd_log__level;
}

int sd_log_is_tty(void)
{
    return sd_log__tty_get();
}

/* Writes all of @len bytes; a log line cut short is worse than a slow one. */
static void sd_log__write(const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(STDERR_FILENO, buf, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        buf += n;
        len -= (size_t)n;
    }
}

static void sd_log__vlog(enum sd_log_level level, const char *fmt, va_list ap)
{
    if (level > sd_log__level)
        return;
    char line[SD_LOG_LINE_MAX];
    char stamp[64], zone[16];
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    localtime_r(&tv.tv_sec, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    strftime(zone, sizeof zone, "%z", &tm);
    int tty = sd_log__tty_get();
    char msg[SD_LOG_LINE_MAX];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t mlen = strlen(msg);
    if (mlen > 0 && msg[mlen - 1] == '\n')
        msg[--mlen] = '\0';
    int n = snprintf(line, sizeof line, "%s%s.%03ld%s %s[%ld] %s%s%s: %s\n", tty ? "\r\033[K" : "",
                     stamp, (long)(tv.tv_usec / 1000), zone, sd_log__prog, (long)getpid(),
                     tty ? sd_log__colours[level] : "", sd_log__names[level], tty ? "\033[0m" : "",
                     msg);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof line) {
        n = (int)sizeof line - 1;
        line[n - 1] = '\n'; /* cut long lines, keep the newline */
    }
    pthread_mutex_lock(&sd_log__mu);
    sd_log__write(line, (size_t)n);
    pthread_mutex_unlock(&sd_log__mu);
}

void sd_log(enum sd_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sd_log__vlog(level, fmt, ap);
    va_end(ap);
}

void sd_log_status(const char *text)
{
    if (!sd_log__tty_get())
        return;
    char line[512];
    int n;
    if (text && text[0])
        n = snprintf(line, sizeof line, "\r\033[K%s", text);
    else
        n = snprintf(line, sizeof line, "\r\033[K");
    if (n < 0)
        return;
    pthread_mutex_lock(&sd_log__mu);
    sd_log__write(line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    pthread_mutex_unlock(&sd_log__mu);
}

void sd_log_sink_warn(void *ctx, const char *line)
{
    sd_log(SD_LOG_WARN, "%s: %s", ctx ? (const char *)ctx : "stagingd", line);
}

void sd_log_sink_info(void *ctx, const char *line)
{
    sd_log(SD_LOG_INFO, "%s: %s", ctx ? (const char *)ctx : "stagingd", line);
}
