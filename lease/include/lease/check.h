/* A consistency check of the lease service's tables, for tests (fault
 * injection, fuzzing, soaks): every counter the service keeps is recomputed
 * from the objects it counts, and every link between objects is followed.
 * Kept apart from lease.h: it reads the service's internals and promises
 * nothing to the agent. */
#ifndef LEASE_CHECK_H
#define LEASE_CHECK_H

#include <stddef.h>

#include "lease/lease.h"

LT_EXTERN_C_BEGIN

/* Walks @svc's clients, segments, leases and work tickets under its lock and
 * checks that they agree with each other and with the service's counters
 * and budgets. Returns 0 when they do; -EUCLEAN at the first disagreement,
 * described in @msg (NUL-terminated when @len > 0; may be NULL); -EINVAL for
 * a NULL @svc. Safe from any thread; no callback runs and nothing changes. */
int lease_service_check(struct lease_service *svc, char *msg, size_t len);

LT_EXTERN_C_END

#endif /* LEASE_CHECK_H */
