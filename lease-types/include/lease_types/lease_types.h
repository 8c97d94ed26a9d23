/* lease-types: the only thing stagingd (CUDA-free) and the GPU agent share.
 * Type-only: memory classes, ids, the v1 wire protocol, error codes, the
 * failure record and validators, all static inline, including nothing beyond
 * <stdint.h>, <stddef.h>, <errno.h>, and <stdarg.h> / <stdio.h> for
 * lt_failure_set. The agent's default socket path is in lease_types/socket.h,
 * included on its own. See docs/protocol.md. */
#ifndef LEASE_TYPES_H
#define LEASE_TYPES_H

#include "lease_types/common.h"
#include "lease_types/errors.h"
#include "lease_types/classes.h"
#include "lease_types/ids.h"
#include "lease_types/proto.h"
#include "lease_types/validate.h"

#endif /* LEASE_TYPES_H */
