/* The host backend's two halves: backend_host.c (streams, workers, events,
 * the doorbell poller) runs what ops_host.c (the C reference ops) does. */
#ifndef GA_HOST_INTERNAL_H
#define GA_HOST_INTERNAL_H

#include <stdint.h>

#include "gpu/exec_backend.h"

/* Refuses work the C reference ops cannot run (a metric, a size, an op).
 * CUDA-free and quick: on the caller's thread. */
int hx__op_check(const struct ga_exec_work *w, struct lt_failure *why_p);

/* Runs @w's op on this thread, with @scratch (@scratch_bytes) standing in
 * for device memory, and fills @r (status and result; not elapsed_ns). */
void hx__op_run(const struct ga_exec_work *w, unsigned char *scratch, uint64_t scratch_bytes,
                struct ga_exec_result *r);

#endif /* GA_HOST_INTERNAL_H */
