/* stagingd's log: one line per event on stderr, each stamped with the time,
 * the program and the level, written with one write(2) so lines from
 * several threads never interleave. Colours only when stderr is a terminal;
 * under systemd (a pipe or the journal) lines are plain.
 *
 * A status line (job progress) can be drawn on a terminal: it is redrawn in
 * place and cleared before any log line, so the two never mix. Off a
 * terminal the status line is not drawn. Thread-safe. */
#ifndef STAGINGD_LOG_H
#define STAGINGD_LOG_H

enum sd_log_level {
    SD_LOG_ERROR = 0,
    SD_LOG_WARN = 1,
    SD_LOG_INFO = 2,
    SD_LOG_DEBUG = 3,
};

/* Sets the program name in each line (copied, up to 31 bytes), the most
 * verbose level printed, and whether stderr is a terminal (colours and the
 * status line). May be called again to change them. */
void sd_log_setup(const char *prog, enum sd_log_level level);

/* The level set by sd_log_setup (SD_LOG_INFO before). */
enum sd_log_level sd_log_level_get(void);

/* 1 when stderr is a terminal (colours and the status line are on). */
int sd_log_is_tty(void);

/* Logs one line at @level; a trailing newline in @fmt is dropped. */
void sd_log(enum sd_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Draws @text as the status line on a terminal (NULL or "" clears it); a
 * no-op off a terminal. */
void sd_log_status(const char *text);

/* Log sinks for the pool, reader and client (their *_log_fn): @ctx is a
 * string naming the module; lines go out at warning (pool, reader) or info
 * (client) level. */
void sd_log_sink_warn(void *ctx, const char *line);
void sd_log_sink_info(void *ctx, const char *line);

#endif /* STAGINGD_LOG_H */
