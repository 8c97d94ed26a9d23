/* The log front end, the default sink and the file sink: see base/log.h. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"

#define PROGRAM_MAX 32
#define STATUS_MAX 256
/* Room around a message: time, program, pid, level, colours, subsys. */
#define FRAME_MAX 512

_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the reopen request is set from signal handlers");

struct base_log_file {
    pthread_mutex_t mu;
    int fd;
    bool owned;      /* opened from path: closed and reopened by us */
    atomic_bool tty; /* written under mu, read by base_log_file_is_tty without it */
    unsigned flags;
    atomic_int reopen;
    char program[PROGRAM_MAX]; /* "": the program's short name */
    char *path;
    char status[STATUS_MAX];
};

const struct base_enum base_log_levels[] = {
    {"error", BASE_LOG_ERROR},
    {"warn", BASE_LOG_WARN},
    {"warning", BASE_LOG_WARN},
    {"notice", BASE_LOG_NOTICE},
    {"info", BASE_LOG_INFO},
    {"debug", BASE_LOG_DEBUG},
    {NULL, 0},
};

const char *base_log_level_name(int level)
{
    switch (level) {
    case BASE_LOG_ERROR:
        return "error";
    case BASE_LOG_WARN:
        return "warning";
    case BASE_LOG_NOTICE:
        return "notice";
    case BASE_LOG_INFO:
        return "info";
    case BASE_LOG_DEBUG:
        return "debug";
    }
    return "log";
}

static const char *level_colour(int level)
{
    switch (level) {
    case BASE_LOG_ERROR:
        return "\033[1;31m";
    case BASE_LOG_WARN:
        return "\033[1;33m";
    case BASE_LOG_NOTICE:
        return "\033[1m";
    case BASE_LOG_INFO:
        return "\033[32m";
    case BASE_LOG_DEBUG:
        return "\033[2m";
    }
    return "";
}

/* ---- composing and writing one line ---- */

struct out {
    char *buf;
    size_t len, cap;
};

static void out_puts(struct out *o, const char *s)
{
    size_t n = strlen(s);
    if (n > o->cap - o->len)
        n = o->cap - o->len;
    memcpy(o->buf + o->len, s, n);
    o->len += n;
}

/* Writes all of @len bytes: a line cut short is worse than a slow one. */
static void write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        buf += n;
        len -= (size_t)n;
    }
}

static void stamp(char *buf, size_t len)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    char date[32], zone[8];
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &tm);
    strftime(zone, sizeof zone, "%z", &tm);
    snprintf(buf, len, "%s.%03ld%s ", date, ts.tv_nsec / 1000000L, zone);
}

/* One line for @f into @o (which has room for the frame, the message, the
 * newline and the status line), under f->mu. */
static void compose(const struct base_log_file *f, int level, const char *subsys, const char *line,
                    struct out *o)
{
    char part[96];
    if (f->tty)
        out_puts(o, "\r\033[K"); /* clears a status line */
    if (f->flags & BASE_LOG_FILE_TIME) {
        stamp(part, sizeof part);
        out_puts(o, part);
    }
    const char *prog = f->program[0] ? f->program : program_invocation_short_name;
    if (f->flags & BASE_LOG_FILE_PID)
        snprintf(part, sizeof part, "%.31s[%ld]: ", prog, (long)getpid());
    else
        snprintf(part, sizeof part, "%.31s: ", prog);
    out_puts(o, part);
    bool colour = f->tty && (f->flags & BASE_LOG_FILE_COLOUR);
    if (colour)
        out_puts(o, level_colour(level));
    out_puts(o, base_log_level_name(level));
    if (colour)
        out_puts(o, "\033[0m");
    out_puts(o, ": ");
    if (subsys && subsys[0]) {
        snprintf(part, sizeof part, "%.63s: ", subsys);
        out_puts(o, part);
    }
    /* The message gets what is left, less the newline and the status. */
    size_t tail = 1 + (f->tty ? strlen(f->status) : 0);
    size_t room = o->cap - o->len > tail ? o->cap - o->len - tail : 0;
    if (room > 1)
        o->len += base_fmt(o->buf + o->len, room, "%s", line);
    out_puts(o, "\n");
    if (f->tty)
        out_puts(o, f->status);
}

static int reopen_locked(struct base_log_file *f)
{
    if (!f->owned)
        return 0;
    int fd = open(f->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640);
    if (fd < 0) {
        int rc = -errno;
        char why[512];
        base_fmt(why, sizeof why,
                 "log: cannot reopen %s: %s; still writing to the file open before", f->path,
                 strerror(-rc));
        char buf[FRAME_MAX + sizeof why + STATUS_MAX];
        struct out o = {buf, 0, sizeof buf};
        compose(f, BASE_LOG_ERROR, "", why, &o);
        write_all(f->fd, o.buf, o.len);
        return rc;
    }
    close(f->fd);
    f->fd = fd;
    f->tty = isatty(fd) == 1;
    return 0;
}

void base_log_file_write(void *ctx, int level, const char *subsys, const char *line)
{
    struct base_log_file *f = ctx;
    if (!f || !line)
        return;
    char buf[FRAME_MAX + BASE_LOG_LINE_MAX + STATUS_MAX];
    struct out o = {buf, 0, sizeof buf};
    pthread_mutex_lock(&f->mu);
    if (atomic_exchange(&f->reopen, 0))
        reopen_locked(f);
    compose(f, level, subsys, line, &o);
    write_all(f->fd, o.buf, o.len);
    pthread_mutex_unlock(&f->mu);
}

/* ---- the front end ---- */

static struct base_log_file stderr_file = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .fd = STDERR_FILENO,
};
static const struct base_log_sink stderr_sink = {base_log_file_write, &stderr_file, 0};
static _Atomic(const struct base_log_sink *) default_sink;

void base_log_default_set(const struct base_log_sink *sink)
{
    atomic_store(&default_sink, sink);
}

static const struct base_log_sink *resolve(const struct base_log_sink *sink)
{
    if (sink && sink->fn)
        return sink;
    const struct base_log_sink *d = atomic_load(&default_sink);
    return d && d->fn ? d : &stderr_sink;
}

bool base_log_enabled(const struct base_log_sink *sink, int level)
{
    const struct base_log_sink *s = resolve(sink);
    return level <= (s->max_level ? s->max_level : BASE_LOG_INFO);
}

void base_vlog(const struct base_log_sink *sink, int level, const char *subsys, const char *fmt,
               va_list ap)
{
    const struct base_log_sink *s = resolve(sink);
    if (level > (s->max_level ? s->max_level : BASE_LOG_INFO))
        return;
    char msg[BASE_LOG_LINE_MAX];
    size_t n = base_vfmt(msg, sizeof msg, fmt, ap);
    if (n > 0 && msg[n - 1] == '\n')
        msg[--n] = '\0';
    s->fn(s->ctx, level, subsys ? subsys : "", msg);
}

void base_log(const struct base_log_sink *sink, int level, const char *subsys, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    base_vlog(sink, level, subsys, fmt, ap);
    va_end(ap);
}

/* ---- the file sink's life ---- */

static int file_new(int fd, const char *program, unsigned flags, struct base_log_file **f_p)
{
    struct base_log_file *f = calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    int rc = pthread_mutex_init(&f->mu, NULL);
    if (rc != 0) {
        free(f);
        return -rc;
    }
    f->fd = fd;
    f->tty = isatty(fd) == 1;
    f->flags = flags;
    if (program)
        snprintf(f->program, sizeof f->program, "%s", program);
    *f_p = f;
    return 0;
}

int base_log_file_fd(int fd, const char *program, unsigned flags, struct base_log_file **f_p)
{
    if (fd < 0 || !f_p)
        return -EINVAL;
    return file_new(fd, program, flags, f_p);
}

int base_log_file_open(const char *path, const char *program, unsigned flags,
                       struct base_log_file **f_p)
{
    if (!path || !path[0] || !f_p)
        return -EINVAL;
    char *copy = strdup(path);
    if (!copy)
        return -ENOMEM;
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640);
    if (fd < 0) {
        int rc = -errno;
        free(copy);
        return rc;
    }
    struct base_log_file *f = NULL;
    int rc = file_new(fd, program, flags, &f);
    if (rc != 0) {
        close(fd);
        free(copy);
        return rc;
    }
    f->owned = true;
    f->path = copy;
    *f_p = f;
    return 0;
}

void base_log_file_destroy(struct base_log_file *f)
{
    if (!f)
        return;
    if (f->tty && f->status[0])
        write_all(f->fd, "\r\033[K", 4);
    if (f->owned)
        close(f->fd);
    pthread_mutex_destroy(&f->mu);
    free(f->path);
    free(f);
}

struct base_log_sink base_log_file_sink(struct base_log_file *f, int max_level)
{
    return (struct base_log_sink){base_log_file_write, f, max_level};
}

void base_log_file_request_reopen(struct base_log_file *f)
{
    if (f)
        atomic_store(&f->reopen, 1);
}

int base_log_file_reopen(struct base_log_file *f)
{
    if (!f)
        return -EINVAL;
    pthread_mutex_lock(&f->mu);
    atomic_store(&f->reopen, 0);
    int rc = reopen_locked(f);
    pthread_mutex_unlock(&f->mu);
    return rc;
}

void base_log_file_status(struct base_log_file *f, const char *text)
{
    if (!f)
        return;
    char buf[STATUS_MAX + 8];
    pthread_mutex_lock(&f->mu);
    if (!f->tty) {
        pthread_mutex_unlock(&f->mu);
        return;
    }
    base_fmt(f->status, sizeof f->status, "%s", text ? text : "");
    int n = snprintf(buf, sizeof buf, "\r\033[K%s", f->status);
    write_all(f->fd, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
    pthread_mutex_unlock(&f->mu);
}

bool base_log_file_is_tty(const struct base_log_file *f)
{
    return f && f->tty;
}
