/* Fault injection for tests (docs/reliability.md): the Nth call of malloc,
 * calloc, realloc, strdup, mmap, memfd_create, fcntl, sendmsg, recvmsg,
 * send, sendmmsg and liburing's submission, setup and registration calls
 * fails, as SQLite's and D-Bus's test hooks do. No product code changes:
 * a test links with `ld --wrap=<call>` for each (cmake: lease_add_fi_test),
 * so every call the program's own objects and static archives make
 * (liblease-client, liburing's callers, jemalloc inside liblease-client)
 * reaches fi.c's __wrap_<call> first; libc's calls to itself do not.
 *
 * A test arms a set of calls with a number N; the calls in the set are
 * counted from then on, by every thread except the ones that exempt
 * themselves (a test's own client), and the Nth fails with the errno a
 * real failure of that call gives (ENOMEM for allocations and mmap, EMFILE
 * for memfd_create, EINVAL for fcntl, ENOBUFS for sends, ENOMEM for
 * recvmsg, -ENOMEM for liburing). N = 0 only counts: a first run over a
 * path gives how many calls it makes, and then each N from 1 to that count
 * is run once. */
#ifndef TESTS_FAULTINJECT_FI_H
#define TESTS_FAULTINJECT_FI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum fi_call {
    FI_ALLOC = 1u << 0, /* malloc, calloc, realloc, strdup */
    FI_MMAP = 1u << 1,
    FI_MEMFD = 1u << 2,
    FI_FCNTL = 1u << 3,
    FI_MSG = 1u << 4,   /* sendmsg, recvmsg, send, sendmmsg */
    FI_URING = 1u << 5, /* io_uring_queue_init_params, _register_buffers,
                           _register_iowq_max_workers, _submit, _submit_and_wait */
};

/* "alloc", "mmap", ...: the set's name, for messages. */
const char *fi_call_name(unsigned calls);

/* Counts calls in @calls from now on and fails the @nth (0: none). */
void fi_arm(unsigned calls, uint64_t nth);
/* Stops counting. Returns how many calls were counted since fi_arm. */
uint64_t fi_disarm(void);
/* Whether the armed failure happened (since the last fi_arm). */
bool fi_fired(void);
/* The calling thread's calls are never counted while @on (a test's own
 * protocol client, say). Per thread; off by default. */
void fi_exempt(bool on);

/* ---- what a run must leave as it found it ---- */

struct fi_snapshot {
    int fds;        /* open fds of this process */
    int maps;       /* lines of /proc/self/maps */
    int memfd_maps; /* of those, memfd mappings (segments) */
};

void fi_snapshot_take(struct fi_snapshot *s);
/* Compares with @before: 0, or -1 with the difference in @msg. fds and
 * memfd mappings must be equal; all mappings may grow by @maps_slack
 * (thread stacks the C library caches), and are not compared under ASan,
 * whose allocator maps memory as it goes. */
int fi_snapshot_cmp(const struct fi_snapshot *before, int maps_slack, char *msg, size_t len);
/* LeakSanitizer's check of the heap now, when the build has it: 0 when
 * nothing leaked (or there is no leak checker), 1 when it found leaks (and
 * printed them). */
int fi_leak_check(void);
/* 1 when the build has a leak checker (ASan's LeakSanitizer). */
int fi_have_leak_check(void);

#endif /* TESTS_FAULTINJECT_FI_H */
