/* base: one log front end and one sink type for every module.
 *
 * A module's config carries a struct base_log_sink; the module logs with
 * base_log(sink, level, "subsys", fmt, ...). The front end drops lines above
 * the sink's level before formatting, formats the message into at most
 * BASE_LOG_LINE_MAX bytes (a longer one is cut at a word and ends in "...",
 * see base/err.h), drops one trailing newline and hands the sink one line.
 *
 * A NULL sink, or one whose fn is NULL, means the process default: the sink
 * given to base_log_default_set, else standard error as
 * "<program>: <level>: <subsys>: <message>\n" in one write(2).
 *
 * The file sink (base_log_file_*) writes such lines to a file or an fd, with
 * an optional timestamp and pid, coloured levels on a terminal, a status
 * line a terminal redraws in place, and a reopen for log rotation that a
 * signal handler may request.
 *
 * Threads: base_log and base_vlog are reentrant (the message is formatted on
 * the stack); a sink's fn must be safe on every thread that logs through it.
 * The file sink is. Ownership: the sink's ctx stays the caller's. */
#ifndef BASE_LOG_H
#define BASE_LOG_H

#include <stdarg.h>
#include <stdbool.h>

#include "base/parse.h"

#ifdef __cplusplus
extern "C" {
#endif

/* syslog(3)'s numbers: a sink may hand them on unchanged. */
enum base_log_level {
    BASE_LOG_ERROR = 3,
    BASE_LOG_WARN = 4,
    BASE_LOG_NOTICE = 5,
    BASE_LOG_INFO = 6,
    BASE_LOG_DEBUG = 7,
};

/* Bytes of one formatted message, its NUL included. */
#define BASE_LOG_LINE_MAX 2048

/* Receives one complete line: no trailing newline, @subsys never NULL (""
 * when the caller gave none). */
typedef void (*base_log_fn)(void *ctx, int level, const char *subsys, const char *line);

struct base_log_sink {
    base_log_fn fn; /* NULL: the process default */
    void *ctx;
    int max_level; /* the most verbose level delivered; 0: BASE_LOG_INFO */
};

/* "error", "warning", "notice", "info", "debug"; "log" for other numbers. */
const char *base_log_level_name(int level);

/* Names for base_parse_enum: error, warn, warning, notice, info, debug. */
extern const struct base_enum base_log_levels[];

/* 1 when a line at @level would reach @sink (for costly arguments). */
bool base_log_enabled(const struct base_log_sink *sink, int level);

void base_log(const struct base_log_sink *sink, int level, const char *subsys, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void base_vlog(const struct base_log_sink *sink, int level, const char *subsys, const char *fmt,
               va_list ap) __attribute__((format(printf, 4, 0)));

/* Makes @sink (kept by pointer: it must stay valid until replaced) what a
 * NULL sink means; NULL restores standard error. Safe while other threads
 * log: each line uses the old or the new default. A default whose fn is
 * NULL means standard error too. */
void base_log_default_set(const struct base_log_sink *sink);

/* ---- the file sink ---- */

struct base_log_file;

enum {
    /* "2026-12-01T10:00:00.123+0100 " first: local time, ms, UTC offset. */
    BASE_LOG_FILE_TIME = 1u << 0,
    /* "<program>[<pid>]" instead of "<program>". */
    BASE_LOG_FILE_PID = 1u << 1,
    /* Colour the level name when the fd is a terminal. */
    BASE_LOG_FILE_COLOUR = 1u << 2,
};

/* Logs to @path, opened O_APPEND (created 0640), which base_log_file_reopen
 * opens again. @program (NULL: the program's short name) is copied, up to
 * 31 bytes. Returns 0, -EINVAL, -ENOMEM or open(2)'s -errno. */
int base_log_file_open(const char *path, const char *program, unsigned flags,
                       struct base_log_file **f_p);

/* Logs to @fd (STDERR_FILENO, a pipe...), which stays the caller's: it is
 * never closed and never reopened. Returns 0, -EINVAL (@fd < 0) or -ENOMEM. */
int base_log_file_fd(int fd, const char *program, unsigned flags, struct base_log_file **f_p);

/* Closes the file it opened (never a caller's fd) and frees @f. No line may
 * be logged through it any more. NULL is a no-op. */
void base_log_file_destroy(struct base_log_file *f);

/* A sink writing to @f. */
struct base_log_sink base_log_file_sink(struct base_log_file *f, int max_level);

/* The sink function itself (ctx: a struct base_log_file *). One write(2)
 * per line under the file's lock, so lines of several threads never
 * interleave. Handles a requested reopen first. */
void base_log_file_write(void *ctx, int level, const char *subsys, const char *line);

/* Async-signal-safe: asks for base_log_file_reopen before the next line is
 * written (from a SIGHUP handler, after logrotate moved the file). */
void base_log_file_request_reopen(struct base_log_file *f);

/* Opens the path again now and writes to the new file from the next line;
 * on failure keeps the old one and writes a line there saying why. A no-op
 * (0) for base_log_file_fd. Returns 0 or open(2)'s -errno. */
int base_log_file_reopen(struct base_log_file *f);

/* On a terminal, draws @text as a status line that each log line clears
 * first, and redraws in place (NULL or "" clears it). Off a terminal a
 * no-op. */
void base_log_file_status(struct base_log_file *f, const char *text);

/* 1 when @f writes to a terminal (colours and the status line are on). */
bool base_log_file_is_tty(const struct base_log_file *f);

#ifdef __cplusplus
}
#endif

#endif /* BASE_LOG_H */
