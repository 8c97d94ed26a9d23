/* The CUDA executor: the executor front of gpu/executor.h over the CUDA
 * backend, the GPU agent's work on a real device (docs/agent.md, "The CUDA
 * executor").
 *
 * Every op is queued on the GPU and answered when the GPU has done it:
 * PINNED leases are copied to device memory in chunks, double-buffered on a
 * second stream so copies and kernels overlap; MAPPED leases are read by
 * the kernels in place (zero-copy); STAGED leases go through a pinned bounce
 * buffer that a stream host function fills (the pageable slow path).
 * Doorbells are cuStreamWaitValue64 on the lease service's registered
 * device address of the word, done words cuStreamWriteValue64. No CUDA call
 * runs on the caller's thread: requests queue per client and a worker of
 * the ga_pool issues them in the client's order. Functions return 0 or
 * -errno. */
#ifndef GPU_EXECUTOR_CUDA_H
#define GPU_EXECUTOR_CUDA_H

#include <stdint.h>

#include "base/log.h"
#include "gpu/executor.h"
#include "gpu/ga.h"

/* What the registration backend's reaper asks the executor before each
 * cuMemHostUnregister (issue 12, docs/reliability.md "A peer's unrung
 * doorbell"). A pending unregistration waits for every queued operation on
 * the device, and while it waits every other driver call in the context
 * blocks (measured on the H200, bench/unregister_probe.c): it must never be
 * stuck behind a wait only a client can end (a bell, a ring's sequence
 * word). Both calls are CUDA-free (guarded CPU loads and stores of the
 * clients' words), so they work while the driver is blocked. */
struct ga_cuda_retire_gate {
    /* How long (ns) the oldest client-controlled wait on the device has
     * stood unsatisfied; 0: none. */
    uint64_t (*stalled_ns)(void *arg);
    /* Satisfies every client-controlled wait unsatisfied for at least
     * @older_ns by storing its word (guarded), and answers that work
     * LT_E_BUSY; @why is logged with each. Returns how many it released. */
    uint32_t (*release)(void *arg, uint64_t older_ns, const char *why);
    void *arg;
};

/* The longest a stored chunk waits for its neighbour under ring_join. */
#define GA_CUDA_RING_JOIN_WAIT_NS 1000000u
/* The largest ring_join, as many chunks as the dispatcher joins at most. */
#define GA_CUDA_RING_JOIN_MAX 4u
/* Result slots (checksum, scan and launch results in flight at once). */
#define GA_CUDA_RESULT_SLOTS_DEFAULT 16384u
#define GA_CUDA_RESULT_SLOTS_MAX (1u << 20)
/* The result slots each client is sure of by default (fewer where the slots
 * are too few for every client: ga_executor_cuda_result_floor). */
#define GA_CUDA_RESULT_FLOOR_DEFAULT 64u

struct ga_executor_cuda_opts {
    uint32_t workers;       /* pool threads issuing CUDA calls; 0: GA_POOL_DEFAULT_THREADS */
    uint32_t max_streams;   /* streams one client may create; 0: 64 */
    uint32_t max_events;    /* events one client may hold; 0: 1024 */
    uint32_t table_streams; /* managed stream ids of all clients at once; 0: 4096 */
    uint32_t table_events;  /* managed event ids of all clients at once; 0: 16384 */
    uint64_t chunk_bytes;   /* copy/compute pipeline chunk, a multiple of 4096; 0: 64 MiB */
    uint32_t result_slots;  /* checksum, scan and launch results in flight at once; 0:
                               GA_CUDA_RESULT_SLOTS_DEFAULT */
    /* Result slots each of up to @result_floor_clients clients can always
     * take, whatever the others hold: that many x clients are kept back from
     * any client that holds @result_floor or more. 0: none kept. Their
     * product must be at most half of result_slots. */
    uint32_t result_floor;
    uint32_t result_floor_clients;
    /* Called once, from an executor thread, when the device faults (a sticky
     * error: the context is unusable). Every request in flight has then been
     * answered LT_E_GPU_FAULT; the agent should stop and be restarted. */
    void (*on_fault)(void *arg, int err);
    void *fault_arg;
    struct base_log_sink log; /* the front's lines ("exec"); zeroed: the process default */
    /* Streaming rings (docs/streaming.md): 0 gives each ring its own CUDA
     * stream; N (1..64) makes the rings share N streams, round robin, so a
     * ring's wait for its words also holds the rings behind it on that
     * stream. Measured on the device: bench/peers, --ring-streams. */
    uint32_t ring_streams;
    /* Who queues a ring's chunk copies (docs/streaming.md, "Who queues the
     * copies"): false, the wait shape, each queued ahead behind a
     * cuStreamWaitValue64 on its sequence word; true, the poll shape, an
     * agent thread polls the words and queues the copies of stored chunks
     * (adjacent ones joined), so no stream waits on a client's word. */
    bool ring_poll;
    /* Under the polling dispatcher: how many adjacent chunks one copy
     * waits to gather (1..4; 0 or 1: each stored chunk is queued at once).
     * A stored chunk whose next neighbour in the slots and in the shard
     * is still being read is held back until that neighbour is stored, at
     * most GA_CUDA_RING_JOIN_WAIT_NS; the last chunk of a shard, or one
     * before the ring wraps, never waits (docs/streaming.md, "Joining
     * copies"). */
    uint32_t ring_join;
    /* Device memory clients' work may take: a ring's images (depth x its
     * largest shard, reserved at RING_OPEN) and a LAUNCH's copies of its
     * PINNED ranges (reserved when it is queued, given back at its
     * completion), refused LT_E_LIMIT past these: all clients' together
     * (0: three quarters of the device's memory) and one client's (0:
     * half of that). */
    uint64_t device_budget;
    uint64_t device_client_max;
    struct ga_exec_launch_limits launch; /* LAUNCH per client (gpu/executor.h); 0s: defaults */
    /* Filled on success (may be NULL): the gate the lease backend's reaper
     * asks (ga_cuda_lease_backend_gate); valid until ga_executor_destroy. */
    struct ga_cuda_retire_gate *retire_gate;
};

/* The result slots each of @clients clients is sure of when @slots are
 * shared: GA_CUDA_RESULT_FLOOR_DEFAULT, or fewer so that at most a quarter
 * of the slots is kept back (0 when there are fewer than 4 a client). */
uint32_t ga_executor_cuda_result_floor(uint32_t slots, uint32_t clients);

/* Creates the CUDA executor on @dev (open, kernels loaded), which must
 * outlive it: a worker pool, the stream layer, a pinned result arena and a
 * fault monitor thread, under the front (ids in FIFO tables). The device must support 64-bit stream
 * memory operations and mapped host memory (doorbells), else -ENOTSUP with
 * the attribute values logged. @opts may be NULL. On success *@ex_p is the
 * caller's: ga_executor_destroy frees it (before ga_device_close). Returns 0,
 * -EINVAL (an option out of range), -ENOTSUP, -ENOMEM, or the errno of a
 * failed CUDA call or pthread_create. */
int ga_executor_cuda_create(struct ga_device *dev, const struct ga_executor_cuda_opts *opts,
                            struct ga_executor **ex_p);

#endif /* GPU_EXECUTOR_CUDA_H */
