/* The lease service (DESIGN.md, "Two processes, one contract"): turns memfd
 * segments offered by stagingd into leases on pinned, mapped or staged memory.
 *
 * Threading: every function on a struct lease_service may be called from any
 * thread; one mutex per service serialises them. The only exception is
 * lease_service_destroy, which must not run concurrently with any other call.
 * Callbacks (on_release_complete, on_client_drained) are invoked WITHOUT the
 * lock held, on the thread whose call completed the event, before that call
 * returns; they may call back into the service. The log sink may be
 * invoked with the lock held and must not call into the service.
 * Backend calls: lease_segment_add registers without the lock (the segment is
 * not visible yet); a re-registration after an LRU eviction (in lease_grant)
 * and every unregistration run with the lock held. With a backend that has
 * retire_range, evictions and destroyed segments are unregistered on the
 * backend's thread instead; their bytes count against the budget until it
 * is done, and a grant, hold or segment_add that needs them waits for that
 * (dropping the lock) at most ~100 ms plus 1 ns per byte, and not at all
 * while the backend's thread is held by queued device work: then it is
 * refused LT_E_BUSY (-EBUSY) with the numbers, or served STAGED where
 * LEASE_GRANT_ALLOW_STAGED allows. docs/reliability.md, "a peer's unrung
 * doorbell".
 *
 * Errors: functions return 0 or a count on success, -errno on failure. A
 * call that can be refused takes an optional struct lt_failure *why_p as
 * its last parameter (NULL: not wanted), written only on failure: the
 * protocol code (enum lt_error) the agent sends for it, the errno, and one
 * line saying what was expected and what was found. The function that
 * decides a failure fills it and logs the same line through the service's
 * log sink once; callers pass it up. See docs/lease-service.md for the
 * error table.
 *
 * Vocabulary: classes are lease-types' enum lt_class, segment and lease ids
 * its struct lt_segment_id and struct lt_lease_id (slot and generation, the
 * values the wire carries); client ids and work tickets are this header's own
 * struct types, so no kind of id can be passed where another is expected. */
#ifndef LEASE_LEASE_H
#define LEASE_LEASE_H

#include <stddef.h>
#include <stdint.h>

#include "base/log.h"
#include "lease_types/classes.h"
#include "lease_types/errors.h"
#include "lease_types/ids.h"

LT_EXTERN_C_BEGIN

/* A client (one peer connection) of the service: gen << 32 | slot, never 0
 * once issued. The value is for logs and hash keys; compare with
 * lease_client_id_eq. */
struct lease_client_id {
    uint64_t value;
};

/* One piece of GPU work recorded on a lease (lease_work_pin), undone by
 * lease_work_done: gen << 32 | slot, never 0 once issued. */
struct lease_ticket {
    uint64_t value;
};

static inline int lease_client_id_eq(struct lease_client_id a, struct lease_client_id b)
{
    return a.value == b.value;
}

/* ---- registration backends -------------------------------------------- */

/* A registered range being unregistered by a backend's retire_range. The
 * service fills and owns it; the backend links it through @next while it
 * holds it and calls done(job) once, after the last chunk is unregistered
 * (failures logged by the backend), from a thread that holds none of the
 * service's locks; done takes the job back. */
struct lease_retire {
    struct lease_retire *next; /* the backend's */
    void *base;
    uint64_t size;
    uint64_t chunk_bytes;
    enum lt_class cls;
    void (*done)(struct lease_retire *job);
};

/* How memory gets registered. Both functions may be called concurrently from
 * several threads, with or without the service lock held. register_range is
 * called once per chunk of at most chunk_bytes (0 = no limit) and must write
 * *dev_ptr_p for LT_CLASS_MAPPED (the address kernels use for @base);
 * unregister_range is called with exactly the base and length registered.
 * On failure they return -errno and fill *why_p (never NULL when the service
 * calls): a refusal for lack of lockable memory is -ENOMEM with code
 * LT_E_MEMLOCK, a driver failure LT_E_GPU_FAULT or LT_E_SYSTEM; a backend
 * that leaves why_p untouched gets "backend failed with errno N" and the
 * code lt_error_from_errno gives (LT_E_MEMLOCK for -ENOMEM). capacity
 * (optional) reports how many bytes may be registered in total (UINT64_MAX =
 * no cap); fini (optional) frees ctx. The service copies this struct and
 * never frees ctx; the caller calls lease_backend_fini after
 * lease_service_destroy. */
struct lease_backend {
    const char *name;
    void *ctx;
    uint64_t chunk_bytes;
    int (*register_range)(void *ctx, void *base, uint64_t length, enum lt_class cls,
                          uint64_t *dev_ptr_p, struct lt_failure *why_p);
    int (*unregister_range)(void *ctx, void *base, uint64_t length, enum lt_class cls,
                            struct lt_failure *why_p);
    int (*capacity)(void *ctx, uint64_t *bytes_p, struct lt_failure *why_p);
    void (*fini)(void *ctx);
    /* Optional: registers a range the service mapped read-only (a segment
     * sealed F_SEAL_FUTURE_WRITE), which the device may only read; as
     * register_range otherwise. NULL: register_range serves both (mlock does
     * not care). */
    int (*register_range_ro)(void *ctx, void *base, uint64_t length, enum lt_class cls,
                             uint64_t *dev_ptr_p, struct lt_failure *why_p);
    /* Nonzero: the agent's words areas (lease_segment_add_words) need no
     * registration here, their host addresses serving as device ones (the
     * host backend: locking them would only eat RLIMIT_MEMLOCK). */
    int words_unregistered;
    /* Optional: unregisters a registered range off the caller's thread.
     * The CUDA driver's unregister waits for all the device's queued work,
     * which a peer's unrung doorbell can hold forever: the service's caller
     * (the agent's loop) must not. Takes @job (struct lease_retire below)
     * and returns 0: every chunk of job->chunk_bytes (the last one shorter)
     * will be unregistered as unregister_range would, jobs in the order
     * given, each then handed back through job->done on the backend's own
     * thread. Or -errno: @job not taken, the caller unregisters in place.
     * NULL: the service always unregisters in place (mlock's backend). */
    int (*retire_range)(void *ctx, struct lease_retire *job);
};

/* Fills @backend_p with the host backend: mlock/munlock, refusing (-ENOMEM,
 * LT_E_MEMLOCK, with the numbers) a registration that would take the bytes
 * it holds locked past the RLIMIT_MEMLOCK soft limit, read at each call
 * (RLIM_INFINITY = no cap). MAPPED device pointers equal host addresses.
 * Returns 0 or -ENOMEM. */
int lease_host_backend_init(struct lease_backend *backend_p, struct lt_failure *why_p);

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
    /* Bytes of its segments mapped at once, every class (default: half of
     * the service's max_mapped_bytes), and of those STAGED (default: half of
     * budget_staged). */
    uint64_t max_mapped_bytes;
    uint64_t max_staged_bytes;
};

/* What a segment's seals must be (lease_service_config.seals; the table in
 * docs/lease-service.md, "What a peer can and cannot do to shared memory"). */
enum lease_seal_policy {
    /* Where the kernel has F_SEAL_FUTURE_WRITE, a leasable segment must
     * carry it (and is mapped read-only); a MAPPED segment without it is
     * taken for doorbell and done words only. The default. */
    LEASE_SEALS_STRICT = 0,
    /* SHRINK|GROW|SEAL suffices, as before: a client can free its own leased
     * pages (it reads zeros, the agent survives through its SIGBUS guard). */
    LEASE_SEALS_LEGACY = 1,
};

struct lease_service_config {
    uint64_t budget_pinned; /* bytes of PINNED segments registered at once */
    uint64_t budget_mapped; /* bytes of MAPPED segments registered at once */
    struct lease_client_limits default_limits;
    /* A released lease's pending work is done and the bytes may be reused;
     * not called for leases released by lease_client_drop. Optional. */
    void (*on_release_complete)(void *arg, struct lease_client_id client, struct lt_lease_id lease);
    /* A dropped client is fully drained: its segments are unregistered,
     * unmapped and their fds closed. Optional. */
    void (*on_client_drained)(void *arg, struct lease_client_id client);
    void *cb_arg;
    /* Receives every line the service logs, subsystem "lease": refusals
     * (info), registrations (info), fallbacks (notice), leftovers at destroy
     * (warning). Zeroed: the process default (base/log.h). */
    struct base_log_sink log;
    /* Mapped bytes: STAGED segments at once, all clients (0: physical
     * memory), and every class's segments at once, the address space they
     * take (0: 4x physical memory, at least 64 GiB, at most 32 TiB). */
    uint64_t budget_staged;
    uint64_t max_mapped_bytes;
    uint64_t max_segments_total; /* segments held at once, all clients: each holds an
                                    fd (0: no limit) */
    uint32_t seals;              /* enum lease_seal_policy */
};

/* Creates a service over a copy of @backend. Refuses (-EINVAL, with the
 * numbers) budgets that cannot be met: their sum above the backend's capacity
 * (RLIMIT_MEMLOCK for the host backend) or above physical memory. */
int lease_service_create(const struct lease_service_config *cfg,
                         const struct lease_backend *backend, struct lease_service **svc_p,
                         struct lt_failure *why_p);

/* Releases every lease, treating pending GPU work as done (the caller must have
 * synchronised the device first; a warning counts what was still pending),
 * unregisters and unmaps every segment and closes every fd. No callbacks.
 * Must not run concurrently with any other call on @svc. NULL is a no-op. */
void lease_service_destroy(struct lease_service *svc);

/* ---- clients ---------------------------------------------------------- */

/* Adds a client (one peer connection) with @limits (NULL = defaults).
 * Writes its id to *client_p. Returns 0, -ENOMEM or -ENOSPC (no slot). */
int lease_client_add(struct lease_service *svc, const struct lease_client_limits *limits,
                     struct lease_client_id *client_p, struct lt_failure *why_p);

/* Peer death: releases every lease of @client through the two-phase path and
 * refuses further calls for it (-ESHUTDOWN). Once no lease is waiting for GPU
 * work, its segments are unregistered, unmapped and their fds closed, the id
 * is retired and on_client_drained runs. Returns the number of leases still
 * waiting for work (0: drained before returning), or -ENOENT / -ESTALE /
 * -EALREADY (already dropping). */
int lease_client_drop(struct lease_service *svc, struct lease_client_id client,
                      struct lt_failure *why_p);

/* ---- segments --------------------------------------------------------- */

/* Verifies @fd is a memfd, read-write, sealed SHRINK|GROW|SEAL and not WRITE,
 * and (LEASE_SEALS_STRICT, where the kernel has it) FUTURE_WRITE unless @cls
 * is MAPPED (then words only: never leased), of exactly @claimed_size bytes
 * (> 0, a page multiple); maps it MAP_SHARED (read-only when sealed
 * FUTURE_WRITE), MADV_DONTFORK, and registers it for @cls (STAGED: not
 * registered; read-only: through register_range_ro when the backend has it).
 * Takes ownership of @fd on success only: on failure the caller still owns it
 * and it is left open. Writes the segment id to *seg_id_p.
 * Returns, with the code in *why_p:
 *   -EBADF, -EINVAL (not a memfd), -EACCES (not read-write), -EPERM (seals):
 *     LT_E_SEGMENT_UNSEALED;
 *   -EINVAL (size 0 or not the claimed size): LT_E_SEGMENT_SIZE;
 *   -EINVAL (size not a multiple of the fd's page): LT_E_MISALIGNED;
 *   -EINVAL (@cls not a class): LT_E_BAD_CLASS;
 *   -ENOSPC (class budget): LT_E_BUDGET; -EDQUOT (client limit, the
 *     service's segment or mapped-bytes limits): LT_E_LIMIT;
 *   -ENOMEM from mmap (the address space): LT_E_LIMIT;
 *   -EFAULT (pages that cannot be faulted in): LT_E_SEGMENT_GONE;
 *   -ENOENT / -ESTALE / -ESHUTDOWN (client); -ENOMEM and other mmap errors:
 *     LT_E_SYSTEM; or the backend's refusal (RLIMIT_MEMLOCK: LT_E_MEMLOCK). */
int lease_segment_add(struct lease_service *svc, struct lease_client_id client, int fd,
                      uint64_t claimed_size, enum lt_class cls, struct lt_segment_id *seg_id_p,
                      struct lt_failure *why_p);

/* Adds the agent's own words area for @client: @fd, a memfd of @size bytes
 * the caller made (MFD_ALLOW_SEALING, not yet sealed), is mapped read-write,
 * then sealed SHRINK|GROW|SEAL|FUTURE_WRITE so the client it is sent to can
 * only read it, and registered MAPPED. It is never leased; done words and
 * scan hits go there. Ownership of @fd as lease_segment_add (the caller may
 * still send it to the client while the segment lives). Errors as
 * lease_segment_add. */
int lease_segment_add_words(struct lease_service *svc, struct lease_client_id client, int fd,
                            uint64_t size, struct lt_segment_id *seg_id_p,
                            struct lt_failure *why_p);

/* Unregisters, unmaps and closes a segment of @client that has no lease left.
 * Returns 0, -EBUSY (a lease is not yet release-complete, or a hold), or an
 * id error. */
int lease_segment_remove(struct lease_service *svc, struct lease_client_id client,
                         struct lt_segment_id seg, struct lt_failure *why_p);

/* What the service knows about a segment, for callers that reach its bytes
 * outside a lease (doorbell and completion words in MAPPED segments). */
struct lease_segment_info {
    uint64_t size;
    enum lt_class cls;    /* the segment's own */
    uint32_t registered;  /* 1 while registered (PINNED, MAPPED); 0 for STAGED or evicted */
    void *host_base;      /* the service's mapping of the whole segment: valid while the
                             segment exists, so across a lease_segment_hold until its
                             lease_segment_unhold */
    uint64_t chunk_bytes; /* the registration chunk: dev_ptr is contiguous within one */
    uint64_t dev_ptr;     /* MAPPED and registered: the device address of the asked offset
                             (per chunk, as kernels and cuStreamWaitValue64 use it); else 0 */
    uint64_t leases;      /* leases not yet release-complete */
    uint64_t holds;       /* lease_segment_hold calls not yet undone */
    uint32_t writable;    /* 1: host_base is a writable mapping (the agent's words area,
                             or a segment without F_SEAL_FUTURE_WRITE); 0: read-only */
    uint32_t words;       /* 1: the agent's own words area (lease_segment_add_words) */
};

/* Describes segment @seg of @client, with dev_ptr for byte @offset.
 * Returns 0, an id error (-ENOENT, -ESTALE, -EPERM, -ESHUTDOWN) or -ERANGE
 * (@offset not inside). Registers nothing: an evicted segment reads as
 * registered = 0 and dev_ptr = 0. */
int lease_segment_query(struct lease_service *svc, struct lease_client_id client,
                        struct lt_segment_id seg, uint64_t offset,
                        struct lease_segment_info *info_p, struct lt_failure *why_p);

/* Keeps segment @seg of @client registered, mapped and alive for GPU work
 * that reads or writes [@offset, @offset + @length) outside any lease (a
 * doorbell or done word): re-registers it first if it was evicted, then
 * neither LRU eviction nor lease_segment_remove (-EBUSY) nor a dropped
 * client's drain touches it until lease_segment_unhold. Fills *@info_p as
 * lease_segment_query, dev_ptr for @offset; info_p->host_base stays valid
 * until the unhold. Returns 0, an id error, -ERANGE, -EINVAL (the range
 * spans a registration chunk), or -ENOSPC / -ENOMEM / a backend error when
 * re-registration fails (nothing held then). */
int lease_segment_hold(struct lease_service *svc, struct lease_client_id client,
                       struct lt_segment_id seg, uint64_t offset, uint64_t length,
                       struct lease_segment_info *info_p, struct lt_failure *why_p);

/* Undoes one lease_segment_hold on @seg. Needs no client: it works after
 * lease_client_drop, and the last hold of a dropped client lets its drain
 * finish (on_client_drained may run before this returns). Returns 0, -ENOENT,
 * -ESTALE or -EALREADY (no hold). */
int lease_segment_unhold(struct lease_service *svc, struct lt_segment_id seg,
                         struct lt_failure *why_p);

/* ---- leases ----------------------------------------------------------- */

/* Serve the request as STAGED when the class budget (or RLIMIT_MEMLOCK)
 * leaves no room, instead of refusing it. */
#define LEASE_GRANT_ALLOW_STAGED 0x1u
/* May lease (as MAPPED) a MAPPED segment taken without F_SEAL_FUTURE_WRITE,
 * otherwise words only: a ring's words lease (RING_OPEN), which the device
 * writes and the service maps read-write. Its client can free those pages
 * itself (every CPU access to them is guarded), so such a lease is marked
 * words-only (lease_info.words_only) and its user must refuse it as data. */
#define LEASE_GRANT_ALLOW_WORDS 0x2u

struct lease_grant_req {
    struct lt_segment_id segment;
    uint64_t offset;
    uint64_t length;
    enum lt_class cls; /* at most the segment's class */
    uint32_t flags;    /* LEASE_GRANT_* */
};

struct lease_grant_result {
    int rc;             /* 0 or -errno for this entry; the rest only if 0 */
    enum lt_class cls;  /* class granted: the requested one, or STAGED */
    uint32_t fell_back; /* 1 when served as STAGED for lack of room */
    struct lt_lease_id lease;
    void *host_addr;       /* the range in this process */
    uint64_t dev_ptr;      /* MAPPED only: what kernels dereference; else 0 */
    struct lt_failure why; /* rc < 0 only: this entry's code and words */
};

/* Grants @n leases for @client. Every entry of @results_p is written with its
 * own rc (and, when refused, its own why): 0, -ENOENT / -ESTALE / -EPERM
 * (segment id), -ERANGE (offset/length: LT_E_OUT_OF_RANGE), -EINVAL (a class
 * above the segment's or not a class: LT_E_BAD_CLASS; unknown flags:
 * LT_E_UNKNOWN_FLAGS; a PINNED/MAPPED range spanning a backend registration
 * chunk: LT_E_BAD_VALUE), -EDQUOT (client limit), -ENOSPC or -ENOMEM (no room
 * to re-register and no fallback allowed), a backend error. Returns the
 * number granted, or a negative errno for the whole batch (bad client or
 * arguments, in *why_p), in which case @results_p is untouched. */
int lease_grant(struct lease_service *svc, struct lease_client_id client, size_t n,
                const struct lease_grant_req *reqs, struct lease_grant_result *results_p,
                struct lt_failure *why_p);

struct lease_release_result {
    int rc;                /* 0 or -errno for this entry */
    struct lt_failure why; /* rc < 0 only */
};

/* Releases @n leases of @client (phase one). Each entry of @results_p gets
 * rc 0 or -ENOENT (never issued), -ESTALE (older generation), -EPERM
 * (another client's), -EALREADY (already released: LT_E_STALE_ID). A
 * released lease completes when its pending work is done:
 * on_release_complete then runs exactly once (within this call when nothing
 * is pending). Returns the number released or a negative errno for the
 * whole batch (in *why_p; @results_p untouched). */
int lease_release(struct lease_service *svc, struct lease_client_id client, size_t n,
                  const struct lt_lease_id *leases, struct lease_release_result *results_p,
                  struct lt_failure *why_p);

/* Records GPU work submitted on a live lease of @client: the lease cannot
 * complete its release until lease_work_done(*ticket_p). Returns 0 or the
 * lease id errors above (-EALREADY once released). */
int lease_work_pin(struct lease_service *svc, struct lease_client_id client,
                   struct lt_lease_id lease, struct lease_ticket *ticket_p,
                   struct lt_failure *why_p);

/* That work has completed. May complete a release (callback) or a dropped
 * client's drain. Returns 0, -ENOENT, -ESTALE or -EALREADY (done twice). */
int lease_work_done(struct lease_service *svc, struct lease_ticket ticket,
                    struct lt_failure *why_p);

struct lease_info {
    struct lt_segment_id segment;
    uint64_t offset;
    uint64_t length;
    enum lt_class cls;
    uint32_t released; /* released, waiting for pending work */
    uint64_t pending_work;
    void *host_addr;
    uint64_t dev_ptr;
    uint32_t writable;   /* 1: host_addr is writable (a segment without F_SEAL_FUTURE_WRITE) */
    uint32_t words_only; /* 1: granted only through LEASE_GRANT_ALLOW_WORDS, in a segment
                            not leasable (unsealed MAPPED under strict seals): its client
                            can free these pages, so only a ring's words may live here,
                            never bytes read or written as data */
};

/* Describes a lease of @client that is not yet release-complete. Returns 0
 * or the lease id errors above. */
int lease_query(struct lease_service *svc, struct lease_client_id client, struct lt_lease_id lease,
                struct lease_info *info_p, struct lt_failure *why_p);

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
    /* Bytes evicted or destroyed that the backend is still unregistering
     * (retire_range): counted against the budget until it has. In the log
     * lines and here only, like huge_segments. */
    uint64_t bytes_retiring;
    uint64_t budget_refusals;
    uint64_t fallbacks; /* requests for this class served as STAGED */
    /* Of the segments, those on hugetlb pages (MFD_HUGETLB). In the log
     * lines and here only: protocol v1's stats reply has no field for it. */
    uint64_t huge_segments;
};

struct lease_stats {
    struct lease_class_stats cls[LT_CLASS_SLOTS]; /* indexed by class; [0] unused */
    uint64_t clients;                             /* including dropping ones */
    uint64_t draining_leases;                     /* released, waiting for work */
    uint64_t pending_work;                        /* tickets not done */
    uint64_t bytes_mapped;                        /* every segment's, and its budget */
    uint64_t max_mapped_bytes;
    uint64_t staged_mapped; /* STAGED segments', and their budget */
    uint64_t budget_staged;
    uint64_t segments;     /* held, every class (each holds an fd) */
    uint64_t max_segments; /* max_segments_total (UINT64_MAX: none) */
};

struct lease_client_stats {
    uint64_t leases; /* not yet release-complete */
    uint64_t bytes;
    uint64_t segments;
    uint32_t dropping;
    uint64_t mapped; /* bytes of its segments mapped, and of those STAGED */
    uint64_t staged;
};

/* Snapshot of the service's counters. Returns 0 or -EINVAL (NULL). */
int lease_service_stats(struct lease_service *svc, struct lease_stats *stats_p);

/* Snapshot of one client's usage. Returns 0, -ENOENT or -ESTALE. */
int lease_client_stats(struct lease_service *svc, struct lease_client_id client,
                       struct lease_client_stats *stats_p, struct lt_failure *why_p);

/* Formats the service's and every client's counters as text lines for logs
 * into @buf (always NUL-terminated when @len > 0). Returns the length the
 * full text needs, as snprintf does, or -EINVAL. */
int lease_stats_format(struct lease_service *svc, char *buf, size_t len);

/* ---- listing (list.c): what leasectl's lists show ---------------------- */

struct lease_list_lease {
    struct lt_lease_id lease;
    struct lease_client_id client;
    struct lt_segment_id segment;
    uint64_t offset;
    uint64_t length;
    enum lt_class cls;     /* served */
    uint32_t released;     /* released, waiting for its pending work */
    uint64_t pending_work; /* lease_work_pin tickets not done */
    uint64_t granted_ns;   /* base_now_ns() at the grant */
};

struct lease_list_segment {
    struct lt_segment_id segment;
    struct lease_client_id client;
    enum lt_class cls;
    uint64_t size;
    uint64_t page_size;       /* of the pages backing it */
    uint32_t registered;      /* 1 while registered */
    uint32_t dropping;        /* its client was dropped: the segment waits for work */
    uint64_t leases;          /* not yet release-complete */
    uint64_t holds;           /* lease_segment_hold calls not yet undone */
    uint64_t added_ns;        /* base_now_ns() once accepted */
    uint64_t registration_ns; /* its first registration took this long (0: STAGED) */
};

/* Copies up to @max (>= 1) leases not yet release-complete into @out_p,
 * those of @client only unless client.value is 0 (every client), in id
 * table order from @cursor (0: the start; else a *@next_cursor_p this
 * returned). *@next_cursor_p is 0 when nothing follows, else where the
 * next call resumes: a walk never repeats an entry and may miss one made
 * meanwhile. One lock hold per call. Returns the count, or -EINVAL. */
int lease_service_leases_list(struct lease_service *svc, struct lease_client_id client,
                              uint64_t cursor, struct lease_list_lease *out_p, size_t max,
                              uint64_t *next_cursor_p);

/* The same for segments (removed ones are gone at once; a dropped client's
 * are listed until its drain finishes). */
int lease_service_segments_list(struct lease_service *svc, struct lease_client_id client,
                                uint64_t cursor, struct lease_list_segment *out_p, size_t max,
                                uint64_t *next_cursor_p);

LT_EXTERN_C_END

#endif /* LEASE_LEASE_H */
