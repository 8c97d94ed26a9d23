/* The lease service (DESIGN.md, "Two processes, one contract"): turns memfd
 * segments offered by stagingd into leases on pinned, mapped or staged memory.
 *
 * Threading: every function on a struct lease_service may be called from any
 * thread; one mutex per service serialises them. The only exception is
 * lease_service_destroy, which must not run concurrently with any other call.
 * Callbacks (on_release_complete, on_client_drained) are invoked WITHOUT the
 * lock held, on the thread whose call completed the event, before that call
 * returns; they may call back into the service. The log function may be
 * invoked with the lock held and must not call into the service.
 * Backend calls: lease_segment_add registers without the lock (the segment is
 * not visible yet); a re-registration after an LRU eviction (in lease_grant)
 * and every unregistration run with the lock held.
 *
 * Errors: functions return 0 or a count on success, -errno on failure. The
 * function that decides a failure writes a one-line message saying what was
 * expected and what was found; lease_error_last() returns it on the calling
 * thread, and the service's log function receives it too.
 * See docs/lease-service.md for the error table. */
#ifndef LEASE_LEASE_H
#define LEASE_LEASE_H

#include <stddef.h>
#include <stdint.h>

/* Memory classes. The numbers are part of the wire contract: lease-types uses
 * the same values (STAGED=1, PINNED=2, MAPPED=3); never renumber. */
enum lease_class {
    LEASE_CLASS_STAGED = 1, /* no registration: pageable shared memfd */
    LEASE_CLASS_PINNED = 2, /* page-locked for copy-engine transfers */
    LEASE_CLASS_MAPPED = 3, /* page-locked and mapped into the GPU (zero-copy) */
};
#define LEASE_CLASS_MAX 3

/* Name of a class ("STAGED", ...), or "INVALID". */
const char *lease_class_name(int cls);

/* ---- errors ---------------------------------------------------------- */

/* The message of the most recent failure on the calling thread ("" if none).
 * Valid until the next failing call on this thread. */
const char *lease_error_last(void);

/* Records @rc with a printf-style message as the calling thread's last error
 * and returns @rc. For backends (including test fakes) to explain a failure. */
int lease_error_set(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- registration backends -------------------------------------------- */

/* How memory gets registered. Both functions may be called concurrently from
 * several threads, with or without the service lock held. register_range is
 * called once per chunk of at most chunk_bytes (0 = no limit) and must write
 * *dev_ptr_p for LEASE_CLASS_MAPPED (the address kernels use for @base);
 * unregister_range is called with exactly the base and length registered.
 * On failure they return -errno and explain through lease_error_set(); a
 * refusal for lack of lockable memory must be -ENOMEM. capacity (optional)
 * reports how many bytes may be registered in total (UINT64_MAX = no cap);
 * fini (optional) frees ctx. The service copies this struct and never frees
 * ctx; the caller calls lease_backend_fini after lease_service_destroy. */
struct lease_backend {
    const char *name;
    void *ctx;
    uint64_t chunk_bytes;
    int (*register_range)(void *ctx, void *base, uint64_t length, enum lease_class cls,
                          uint64_t *dev_ptr_p);
    int (*unregister_range)(void *ctx, void *base, uint64_t length, enum lease_class cls);
    int (*capacity)(void *ctx, uint64_t *bytes_p);
    void (*fini)(void *ctx);
};

/* Fills @backend_p with the host backend: mlock/munlock, refusing (-ENOMEM,
 * with the numbers) a registration that would take the bytes it holds locked
 * past the RLIMIT_MEMLOCK soft limit, read at each call (RLIM_INFINITY = no
 * cap). MAPPED device pointers equal host addresses. Returns 0 or -ENOMEM. */
int lease_host_backend_init(struct lease_backend *backend_p);

/* Bytes the host backend @backend currently holds locked. */
uint64_t lease_host_backend_locked(const struct lease_backend *backend);

/* Frees a backend's context (calls its fini); safe on a zeroed struct. */
void lease_backend_fini(struct lease_backend *backend);

/* ---- the service ------------------------------------------------------ */

struct lease_service;

/* Per-client bounds on what one peer may hold; 0 in a field = the default. */
struct lease_client_limits {
    uint64_t max_leases;   /* leases not yet release-complete (default 65536) */
    uint64_t max_bytes;    /* bytes in those leases (default: no limit) */
    uint64_t max_segments; /* segments added and not removed (default 1024) */
};

struct lease_service_config {
    uint64_t budget_pinned; /* bytes of PINNED segments registered at once */
    uint64_t budget_mapped; /* bytes of MAPPED segments registered at once */
    struct lease_client_limits default_limits;
    /* A released lease's pending work is done and the bytes may be reused;
     * not called for leases released by lease_client_drop. Optional. */
    void (*on_release_complete)(void *arg, uint64_t client, uint64_t lease_id);
    /* A dropped client is fully drained: its segments are unregistered,
     * unmapped and their fds closed. Optional. */
    void (*on_client_drained)(void *arg, uint64_t client);
    void *cb_arg;
    /* Receives every error and notice (one line, no newline). NULL: stderr. */
    void (*log)(void *arg, const char *line);
    void *log_arg;
};

/* Creates a service over a copy of @backend. Refuses (-EINVAL, with the
 * numbers) budgets that cannot be met: their sum above the backend's capacity
 * (RLIMIT_MEMLOCK for the host backend) or above physical memory. */
int lease_service_create(const struct lease_service_config *cfg,
                         const struct lease_backend *backend, struct lease_service **svc_p);

/* Releases every lease, treating pending GPU work as done (the caller must have
 * synchronised the device first; a warning counts what was still pending),
 * unregisters and unmaps every segment and closes every fd. No callbacks.
 * Must not run concurrently with any other call on @svc. NULL is a no-op. */
void lease_service_destroy(struct lease_service *svc);

/* ---- clients ---------------------------------------------------------- */

/* Adds a client (one peer connection) with @limits (NULL = defaults).
 * Writes its id (slot and generation) to *client_p. */
int lease_client_add(struct lease_service *svc, const struct lease_client_limits *limits,
                     uint64_t *client_p);

/* Peer death: releases every lease of @client through the two-phase path and
 * refuses further calls for it (-ESHUTDOWN). Once no lease is waiting for GPU
 * work, its segments are unregistered, unmapped and their fds closed, the id
 * is retired and on_client_drained runs. Returns the number of leases still
 * waiting for work (0: drained before returning), or -ENOENT / -ESTALE /
 * -EALREADY (already dropping). */
int lease_client_drop(struct lease_service *svc, uint64_t client);

/* ---- segments --------------------------------------------------------- */

/* Verifies @fd is a memfd, read-write, sealed SHRINK|GROW|SEAL and not WRITE,
 * of exactly @claimed_size bytes (> 0, a page multiple); maps it MAP_SHARED,
 * MADV_DONTFORK, and registers it for @cls (STAGED: not registered).
 * Takes ownership of @fd on success only: on failure the caller still owns it
 * and it is left open. Writes the segment id to *seg_id_p.
 * Returns -EBADF, -EINVAL (wrong kind of fd, bad size or class), -EACCES
 * (not opened read-write), -EPERM (seals), -ENOSPC (class budget), -ENOMEM, -EDQUOT (client limit),
 * -ENOENT / -ESTALE / -ESHUTDOWN (client), or a backend error. */
int lease_segment_add(struct lease_service *svc, uint64_t client, int fd, uint64_t claimed_size,
                      enum lease_class cls, uint64_t *seg_id_p);

/* Unregisters, unmaps and closes a segment of @client that has no lease left.
 * Returns 0, -EBUSY (a lease is not yet release-complete), or an id error. */
int lease_segment_remove(struct lease_service *svc, uint64_t client, uint64_t seg_id);

/* What the service knows about a segment, for callers that reach its bytes
 * outside a lease (doorbell and completion words in MAPPED segments). */
struct lease_segment_info {
    uint64_t size;
    uint32_t cls;         /* enum lease_class: the segment's own */
    uint32_t registered;  /* 1 while registered (PINNED, MAPPED); 0 for STAGED or evicted */
    void *host_base;      /* the service's mapping of the whole segment */
    uint64_t chunk_bytes; /* the registration chunk: dev_ptr is contiguous within one */
    uint64_t dev_ptr;     /* MAPPED and registered: the device address of the asked offset
                             (per chunk, as kernels and cuStreamWaitValue64 use it); else 0 */
    uint64_t leases;      /* leases not yet release-complete */
    uint64_t holds;       /* lease_segment_hold calls not yet undone */
};

/* Describes segment @seg_id of @client, with dev_ptr for byte @offset.
 * Returns 0, an id error (-ENOENT, -ESTALE, -EPERM, -ESHUTDOWN) or -ERANGE
 * (@offset not inside). Registers nothing: an evicted segment reads as
 * registered = 0 and dev_ptr = 0. */
int lease_segment_query(struct lease_service *svc, uint64_t client, uint64_t seg_id,
                        uint64_t offset, struct lease_segment_info *info_p);

/* Keeps segment @seg_id of @client registered and alive for GPU work that
 * reads or writes [@offset, @offset + @length) outside any lease (a doorbell
 * or done word): re-registers it first if it was evicted, then neither LRU
 * eviction nor lease_segment_remove (-EBUSY) nor a dropped client's drain
 * touches it until lease_segment_unhold. Fills *@info_p as
 * lease_segment_query, dev_ptr for @offset. Returns 0, an id error, -ERANGE,
 * -EINVAL (the range spans a registration chunk), or -ENOSPC / -ENOMEM /
 * a backend error when re-registration fails (nothing held then). */
int lease_segment_hold(struct lease_service *svc, uint64_t client, uint64_t seg_id, uint64_t offset,
                       uint64_t length, struct lease_segment_info *info_p);

/* Undoes one lease_segment_hold on @seg_id. Needs no client: it works after
 * lease_client_drop, and the last hold of a dropped client lets its drain
 * finish (on_client_drained may run before this returns). Returns 0, -ENOENT,
 * -ESTALE or -EALREADY (no hold). */
int lease_segment_unhold(struct lease_service *svc, uint64_t seg_id);

/* ---- leases ----------------------------------------------------------- */

/* Serve the request as STAGED when the class budget (or RLIMIT_MEMLOCK)
 * leaves no room, instead of refusing it. */
#define LEASE_GRANT_ALLOW_STAGED 0x1u

struct lease_grant_req {
    uint64_t seg_id;
    uint64_t offset;
    uint64_t length;
    uint32_t cls;   /* enum lease_class; at most the segment's class */
    uint32_t flags; /* LEASE_GRANT_* */
};

struct lease_grant_result {
    int rc;             /* 0 or -errno for this entry; the rest only if 0 */
    uint32_t cls;       /* class granted: the requested one, or STAGED */
    uint32_t fell_back; /* 1 when served as STAGED for lack of room */
    uint64_t lease_id;
    void *host_addr;  /* the range in this process */
    uint64_t dev_ptr; /* MAPPED only: what kernels dereference; else 0 */
};

/* Grants @n leases for @client. Every entry of @results_p is written with its
 * own rc: 0, -ENOENT / -ESTALE / -EPERM (segment id), -ERANGE (offset/length),
 * -EINVAL (class above the segment's, unknown flags, or a PINNED/MAPPED range
 * spanning a backend registration chunk), -EDQUOT (client limit), -ENOSPC or
 * -ENOMEM (no room to re-register and no fallback allowed), a backend error.
 * Returns the number granted, or a negative errno for the whole batch (bad
 * client or arguments), in which case @results_p is untouched. */
int lease_grant(struct lease_service *svc, uint64_t client, size_t n,
                const struct lease_grant_req *reqs, struct lease_grant_result *results_p);

/* Releases @n leases of @client (phase one). Each entry of @rcs_p gets 0 or
 * -ENOENT (never issued), -ESTALE (older generation), -EPERM (another
 * client's), -EALREADY (already released). A released lease completes when
 * its pending work is done: on_release_complete then runs exactly once (within
 * this call when nothing is pending). Returns the number released or a
 * negative errno for the whole batch (@rcs_p untouched). */
int lease_release(struct lease_service *svc, uint64_t client, size_t n, const uint64_t *lease_ids,
                  int *rcs_p);

/* Records GPU work submitted on a live lease of @client: the lease cannot
 * complete its release until lease_work_done(*ticket_p). Returns 0 or the
 * lease id errors above (-EALREADY once released). */
int lease_work_pin(struct lease_service *svc, uint64_t client, uint64_t lease_id,
                   uint64_t *ticket_p);

/* That work has completed. May complete a release (callback) or a dropped
 * client's drain. Returns 0, -ENOENT, -ESTALE or -EALREADY (done twice). */
int lease_work_done(struct lease_service *svc, uint64_t ticket);

struct lease_info {
    uint64_t seg_id;
    uint64_t offset;
    uint64_t length;
    uint32_t cls;
    uint32_t released; /* released, waiting for pending work */
    uint64_t pending_work;
    void *host_addr;
    uint64_t dev_ptr;
};

/* Describes a lease of @client that is not yet release-complete. */
int lease_query(struct lease_service *svc, uint64_t client, uint64_t lease_id,
                struct lease_info *info_p);

/* ---- statistics ------------------------------------------------------- */

struct lease_class_stats {
    uint64_t budget;           /* configured bytes (0 for STAGED) */
    uint64_t segments;         /* segments of this class */
    uint64_t bytes_registered; /* bytes of those registered now */
    uint64_t live_leases;      /* granted with this class, not release-complete */
    uint64_t bytes_leased;
    uint64_t registrations;   /* segment registrations (all chunks of one = 1) */
    uint64_t registration_ns; /* total time spent in them */
    uint64_t unregistrations;
    uint64_t evictions; /* unregistrations made to free budget (LRU) */
    uint64_t budget_refusals;
    uint64_t fallbacks; /* requests for this class served as STAGED */
    /* Of the segments, those on hugetlb pages (MFD_HUGETLB). In the log
     * lines and here only: protocol v1's stats reply has no field for it. */
    uint64_t huge_segments;
};

struct lease_stats {
    struct lease_class_stats cls[LEASE_CLASS_MAX + 1]; /* indexed by class; [0] unused */
    uint64_t clients;                                  /* including dropping ones */
    uint64_t draining_leases;                          /* released, waiting for work */
    uint64_t pending_work;                             /* tickets not done */
};

struct lease_client_stats {
    uint64_t leases; /* not yet release-complete */
    uint64_t bytes;
    uint64_t segments;
    uint32_t dropping;
};

/* Snapshot of the service's counters. */
int lease_service_stats(struct lease_service *svc, struct lease_stats *stats_p);

/* Snapshot of one client's usage. */
int lease_client_stats(struct lease_service *svc, uint64_t client,
                       struct lease_client_stats *stats_p);

/* Formats the service's and every client's counters as text lines for logs
 * into @buf (always NUL-terminated when @len > 0). Returns the length the
 * full text needs, as snprintf does. */
int lease_stats_format(struct lease_service *svc, char *buf, size_t len);

#endif /* LEASE_LEASE_H */
