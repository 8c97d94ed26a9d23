/* Helpers the reliability suites share (tests/reliability/, and the
 * client-side fault injection): a process's fds, flags and memory from
 * /proc, the agent's own view through a probe client, seeds. Processes and
 * stores come from tests/stagingd/e2e/e2e_util.h. */
#ifndef TESTS_RELIABILITY_REL_UTIL_H
#define TESTS_RELIABILITY_REL_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "lease/client.h"

/* Open fds of @pid (-1 if unreadable). */
int rel_proc_fds(pid_t pid);
/* As rel_proc_fds, once two reads 50 ms apart agree (a connection just
 * closed by its peer takes the agent a loop turn to close), up to 1 s. */
int rel_proc_fds_settled(pid_t pid);
/* VmRSS of @pid in KiB (-1 if unreadable). */
long rel_proc_rss_kb(pid_t pid);
/* Threads of @pid (-1 if unreadable). */
int rel_proc_threads(pid_t pid);
/* Every fd of @pid but 0, 1 and 2 has O_CLOEXEC (/proc/PID/fdinfo flags).
 * Returns how many were checked, or -1 with the first offender (its fd
 * number and what it points at) in @msg. */
int rel_proc_all_cloexec(pid_t pid, char *msg, size_t len);

/* The agent's counters, every client (STATS_REQUEST with ALL_CLIENTS) from
 * a probe client named "rel-probe". 0, or -errno with the reason in @msg. */
int rel_agent_stats(const char *sock, struct leasec_agent_stats *st_p, char *msg, size_t len);
/* Until the agent lists no client named @name (other than the probe) and
 * no live lease and no segment of any class, or @timeout_ms passes. 0, or -1
 * with what it still holds in @msg. */
int rel_agent_wait_clean(const char *sock, const char *name, int timeout_ms, char *msg,
                         size_t len);

/* The seed of a randomized test: LEASE_RELIABILITY_SEED, else from the
 * clock; printed with @what so a failure can be replayed. */
uint64_t rel_seed(const char *what);
/* xorshift64*: the next number from *@s. */
uint64_t rel_rand(uint64_t *s);
/* The long (opt-in) versions: LEASE_RELIABILITY_LONG=1 (make soak). */
bool rel_long(void);

#endif /* TESTS_RELIABILITY_REL_UTIL_H */
