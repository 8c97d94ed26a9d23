/* base: systemd's readiness protocol (sd_notify(3)) in a few lines of libc,
 * for both daemons, without libsystemd. The service manager puts the path
 * of a Unix datagram socket in $NOTIFY_SOCKET ('@' first: the abstract
 * namespace); a Type=notify unit's main process sends it "READY=1",
 * "STATUS=...", "STOPPING=1" lines. Outside such a unit the variable is
 * unset and every call is a no-op. Thread-safe; nothing is kept open. */
#ifndef BASE_NOTIFY_H
#define BASE_NOTIFY_H

#ifdef __cplusplus
extern "C" {
#endif

/* Sends @state (one or more "KEY=value" lines) to $NOTIFY_SOCKET in one
 * datagram. Returns 1 when sent, 0 when $NOTIFY_SOCKET is unset or empty,
 * -EINVAL for a value that is not an absolute or abstract socket path that
 * fits sun_path, or socket(2)'s / sendto(2)'s -errno. */
int base_notify(const char *state);

#ifdef __cplusplus
}
#endif

#endif /* BASE_NOTIFY_H */
