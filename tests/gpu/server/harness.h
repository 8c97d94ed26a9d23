/* Test harness for the agent's socket server: starts a real lease-agent-host
 * on a private socket in a mkdtemp directory, and speaks the protocol as a
 * client would (every received message validated with lease-types). */
#ifndef TESTS_SERVER_HARNESS_H
#define TESTS_SERVER_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "lease_types/validate.h"

#define TH_TIMEOUT_MS 10000 /* the longest any single expected event may take */

struct th_agent {
    pid_t pid;
    char dir[64];
    char sock[128];
    char log[128];
};

/* When > 0, the next agents start with RLIMIT_NOFILE soft = hard = this. */
extern int th_agent_nofile;

/* Starts lease-agent-host (or $TH_AGENT, to test another build) on @dir/agent.sock (a fresh mkdtemp dir when
 * @dir is NULL) with small budgets and @extra arguments (NULL-terminated
 * list, may be NULL); waits for --ready-fd. Asserts on failure. */
void th_agent_start(struct th_agent *a, const char *dir, const char *const *extra);
/* Runs lease-agent-host with @args to completion (for refusals); returns its
 * exit status and leaves its stderr in @log_path. */
int th_agent_run_once(const char *const *args, const char *log_path);
/* SIGTERM, then waits; returns the exit status (-1 if it had to be killed). */
int th_agent_stop(struct th_agent *a);
/* Removes the directory and what the agent left in it. */
void th_agent_cleanup(struct th_agent *a);
/* Open fds of process @pid, from /proc. */
int th_fd_count(pid_t pid);
/* 1 when @path's contents contain @needle within @timeout_ms. */
bool th_file_wait_for(const char *path, const char *needle, int timeout_ms);

/* ---- a protocol client ---- */

/* Connects to @path; returns the fd (asserts). */
int th_connect(const char *path);
/* Sends one message with @nfds fds. Returns 0 or -errno. */
int th_send(int fd, const void *msg, size_t len, const int *fds, size_t nfds);
/* Receives one message into @buf within @timeout_ms: its length, 0 at end of
 * stream, -ETIMEDOUT, or -errno. Asserts it validates as from the agent. */
ssize_t th_recv(int fd, union lt_msg_buffer *buf, int timeout_ms);
/* As th_recv, asserting a message of @type (or failing with the ERROR's text). */
void th_expect(int fd, union lt_msg_buffer *buf, uint16_t type);
/* Asserts the next message is an ERROR with @code for @rid; returns it. */
const struct lt_msg_error *th_expect_error(int fd, union lt_msg_buffer *buf, uint64_t rid,
                                           uint32_t code);
/* Asserts nothing arrives within @ms. */
void th_expect_silence(int fd, int ms);
/* Asserts the agent closes the connection (after any messages) within the
 * timeout; returns how many messages came first. */
int th_expect_eof(int fd);

/* A fresh request id, nonzero. */
uint64_t th_rid(void);
/* HELLO with @caps, asserting the reply; returns the connection fd. */
int th_hello(const char *path, uint32_t caps, struct lt_msg_hello_reply *reply_p);

/* A memfd of @size bytes filled from @seed, sealed with @seals (0: none);
 * maps it into *@map_p when @map_p is not NULL. */
int th_memfd(uint64_t size, int seals, uint64_t seed, void **map_p);
/* What an agent before F_SEAL_FUTURE_WRITE wanted; the default agent now
 * takes that only for a MAPPED segment of doorbell and done words (never
 * leased), or with --seals legacy. */
#define TH_OLD_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
/* What the default agent wants of a leasable segment: the writer keeps its
 * own mapping writable, the agent can only map it read-only. */
#define TH_GOOD_SEALS (TH_OLD_SEALS | F_SEAL_FUTURE_WRITE)

/* Offers @fd; returns the segment id (asserts SEGMENT_ACCEPT). */
struct lt_segment_id th_offer(int fd, int segfd, uint64_t size, uint32_t cls, uint64_t cookie);
/* Sends an offer and returns the request id without reading the answer. */
uint64_t th_offer_send(int fd, const int *fds, size_t nfds, uint64_t size, uint32_t cls);
/* Leases one range; returns the grant entry (status may be an error). */
struct lt_lease_grant_entry th_lease(int fd, struct lt_segment_id seg, uint64_t off, uint64_t len,
                                     uint32_t cls);
/* Sends LEASE_RELEASE for one lease; returns its request id. */
uint64_t th_release_send(int fd, struct lt_lease_id lease);
/* Sends a SUBMIT; returns its request id. */
uint64_t th_submit_send(int fd, const struct lt_msg_submit *proto);
/* Makes @m (room for one argument word past it) a LAUNCH of @kernel in the
 * image launch_kernels: one thread block of @block threads, argument word 1,
 * one range [0, @length) of @lease with @flags, no result bytes. Returns its
 * length. */
size_t th_launch_init(struct lt_msg_launch *m, const char *kernel, uint32_t block,
                      struct lt_lease_id lease, uint64_t length, uint32_t flags);
/* A STATS_REQUEST answered: copies the reply into @buf. */
void th_stats(int fd, uint32_t flags, union lt_msg_buffer *buf);
/* Sends a stream or event command and expects CTL_REPLY; returns it. */
const struct lt_msg_ctl_reply *th_ctl(int fd, uint16_t type, struct lt_stream_id stream,
                                      struct lt_event_id ev, struct lt_event_id end, uint32_t flags,
                                      union lt_msg_buffer *buf);
/* As th_ctl, but returns the request id without reading. */
uint64_t th_ctl_send(int fd, uint16_t type, struct lt_stream_id stream, struct lt_event_id ev,
                     struct lt_event_id end, uint32_t flags);

/* Seeded bytes. */
void th_fill(void *p, size_t len, uint64_t seed);
uint64_t th_rand(uint64_t *s);

#endif /* TESTS_SERVER_HARNESS_H */
