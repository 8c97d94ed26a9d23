/* ga executor, host backend: the agent's work on CPU threads, for machines
 * without a GPU (library ga_host, CUDA-free), behind the front of
 * gpu/executor.h. */
#ifndef GPU_EXECUTOR_HOST_H
#define GPU_EXECUTOR_HOST_H

#include "base/log.h"
#include "gpu/executor.h"

LT_EXTERN_C_BEGIN

struct ga_executor_host_opts {
    uint32_t workers;           /* worker threads; 0: min(4, online CPUs) */
    uint32_t max_streams;       /* per owner; 0: 64 */
    uint32_t max_events;        /* per owner; 0: 1024 */
    uint64_t scratch_bytes;     /* per-worker stand-in for device memory (COPY_H2D); 0: 4 MiB */
    uint32_t bell_sleep_max_us; /* the doorbell poller's longest sleep; 0: 1000 */
    struct base_log_sink log;   /* the front's lines; zeroed: the process default */
};

/* Creates the front over the host backend: worker threads run the C
 * reference kernels (CHECKSUM_VERIFY through kr_block_verify, VECTOR_SCAN
 * through kr_scan_topk by dot product; COPY_H2D as a memcpy through a
 * scratch buffer), each stream is a FIFO served by one worker at a time,
 * events are markers with host timestamps, and one poller thread watches
 * doorbell words with backoff. Stream ids are reused last-freed-first.
 * @opts may be NULL. On success *ex_p is the caller's: free it with
 * ga_executor_destroy. Returns 0, -EINVAL (an option out of range: workers
 * over 256, scratch over 1 GiB), -ENOMEM, or pthread_create's error. */
int ga_executor_host_create(const struct ga_executor_host_opts *opts, struct ga_executor **ex_p);

LT_EXTERN_C_END

#endif /* GPU_EXECUTOR_HOST_H */
