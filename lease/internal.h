/* Internals shared by the lease service's source files. */
#ifndef LEASE_INTERNAL_H
#define LEASE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/idtab.h"
#include "base/log.h"
#include "lease/lease.h"

/* ---- ids ------------------------------------------------------------------
 * Every table is a base_idtab (LIFO reuse, slot 0 issued, a slot retired for
 * good at its last generation); the owner is kept after an id is retired,
 * for foreign-id checks. The service answers about an id in four words. */

enum lease__lookup {
    LEASE__ID_LIVE,
    LEASE__ID_FREED, /* generation matches, object gone (retired) */
    LEASE__ID_STALE, /* an older generation of a reused slot */
    LEASE__ID_NEVER, /* not an id this table issued (generation 0 included) */
};

static inline enum lease__lookup lease__id_lookup(const struct base_idtab *t, uint64_t id,
                                                  struct base_idtab_slot **slot_p)
{
    switch (base_idtab_lookup(t, id, slot_p)) {
    case BASE_IDTAB_LIVE:
        return LEASE__ID_LIVE;
    case BASE_IDTAB_RETIRED:
        return LEASE__ID_FREED;
    case BASE_IDTAB_STALE:
        return LEASE__ID_STALE;
    case BASE_IDTAB_NEVER:
    case BASE_IDTAB_MALFORMED:
    case BASE_IDTAB_FOREIGN: /* not answered by an unowned lookup */
        break;
    }
    return LEASE__ID_NEVER;
}

/* The object of the next live id at or after *cursor_p (start at 0), or
 * NULL at the end; retiring ids during the walk is safe. */
static inline void *lease__next(const struct base_idtab *t, uint32_t *cursor_p)
{
    struct base_idtab_slot *s = base_idtab_next(t, cursor_p, NULL);
    return s ? s->obj : NULL;
}

/* ---- errors and logging ----------------------------------------------- */

/* The service's log subsystem: lines go to base_log(&svc->cfg.log, ...). */
#define LEASE__SUBSYS "lease"

/* Decides a failure: fills *why_p (NULL: not wanted) with @code, @err (0:
 * lt_error_errno(code)) and the message, logs the message once through
 * @svc, and returns the errno. */
int lease__fail(const struct lease_service *svc, struct lt_failure *why_p, uint32_t code, int err,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* A failure decided below the service (fd checks, a backend) in *@f: logs
 * its words once, copies it to *why_p (NULL: not wanted), returns its errno. */
int lease__fail_logged(const struct lease_service *svc, struct lt_failure *why_p,
                       const struct lt_failure *f);

/* ---- segments: fd checks and mapping (segment.c) ---------------------- */

/* What an fd's checks found. */
struct lease__fd_kind {
    uint64_t page;  /* the pages backing it (hugetlb: the huge page) */
    bool read_only; /* sealed F_SEAL_FUTURE_WRITE: mapped PROT_READ */
    bool leasable;  /* false: a MAPPED segment without F_SEAL_FUTURE_WRITE, taken
                       for its doorbell and done words only (docs/lease-service.md) */
};

/* Whether this kernel has F_SEAL_FUTURE_WRITE (probed once). */
bool lease__future_write_supported(void);

/* Validates @fd as described for lease_segment_add under seal @policy and
 * maps it at a 2 MiB boundary, read-only when it is sealed
 * F_SEAL_FUTURE_WRITE; fills *kind_p. A refusal fills *why_p (not logged:
 * the caller logs it). */
int lease__fd_map(int fd, uint64_t claimed_size, enum lt_class cls, uint32_t policy, void **base_p,
                  struct lease__fd_kind *kind_p, struct lt_failure *why_p);
/* Maps the agent's own words memfd @fd of @size bytes read-write, then
 * seals it SHRINK|GROW|SEAL and FUTURE_WRITE (where the kernel has it), so
 * the client it goes to can only read it and nobody can free its pages. */
int lease__words_map(int fd, uint64_t size, void **base_p, struct lease__fd_kind *kind_p,
                     struct lt_failure *why_p);
/* Populating a segment's page tables (by read faults, which map shmem pages
 * writable) while it is being registered; changes no byte, reports nothing:
 * whatever is left unpopulated the registration faults in itself. */
#define LEASE__POPULATE_THREADS 4
/* Below this a segment is populated by lease__populate_start itself. */
#define LEASE__POPULATE_SPLIT_MIN ((uint64_t)64 << 20)

struct lease__populate;

struct lease__populate_thread {
    struct lease__populate *job;
    unsigned index;
    bool started;
    pthread_t thread;
};

struct lease__populate {
    char *base;
    uint64_t len;
    int err; /* the first -EFAULT / -ENOMEM a stripe met: pages that cannot be
                faulted in (a hugetlb hole with no free page), atomic */
    struct lease__populate_thread threads[LEASE__POPULATE_THREADS];
};

/* Starts populating [base, base+len) front to back on LEASE__POPULATE_THREADS
 * threads and returns, so the caller's registration runs behind them; a
 * range under LEASE__POPULATE_SPLIT_MIN is populated before returning. */
void lease__populate_start(struct lease__populate *job, void *base, uint64_t len);
/* Joins the threads; call once after every lease__populate_start. */
void lease__populate_wait(struct lease__populate *job);

/* ---- the service's objects -------------------------------------------- */

struct lease__client {
    uint64_t id;
    struct lease_client_limits lim;
    uint64_t leases;
    uint64_t bytes;
    uint64_t segments;
    uint64_t mapped; /* bytes of its segments mapped, every class */
    uint64_t staged; /* of those, STAGED */
    uint32_t busy;   /* calls that may drop the lock midway (segment_add, grant, hold) */
    uint64_t holds;  /* lease_segment_hold calls not yet undone, on any of its segments */
    bool dropping;
};

struct lease__segment {
    uint64_t id;
    uint64_t client;
    int fd;
    enum lt_class cls;
    void *base;
    uint64_t size;
    uint64_t page_size; /* of the pages backing the fd (hugetlb: the huge page) */
    bool read_only;     /* sealed F_SEAL_FUTURE_WRITE: the service's mapping is PROT_READ */
    bool leasable;      /* false: words only (unsealed MAPPED, or the agent's words area) */
    bool words;         /* the agent's own words area (lease_segment_add_words) */
    bool registered;
    /* Evicted, and the backend's thread is still unregistering it: the
     * driver holds the old registration, so registering it again now would
     * be refused (CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED). */
    struct lease__retiring *retire;
    uint32_t waiters; /* calls registering it that may drop the lock to wait */
    uint32_t nchunks;
    uint64_t *chunk_dev; /* per chunk, MAPPED device pointers */
    uint64_t leases;     /* not yet release-complete */
    uint64_t reg_leases; /* of those, PINNED or MAPPED: pin the registration */
    uint64_t holds;      /* lease_segment_hold: pin the registration and the segment */
    uint64_t last_use;
    uint64_t added_ns;        /* base_now_ns() once accepted (list.c) */
    uint64_t registration_ns; /* its first registration took this long (0: STAGED) */
};

struct lease__lease {
    uint64_t id;
    uint64_t client;
    struct lease__segment *seg;
    uint64_t offset;
    uint64_t length;
    enum lt_class cls;
    bool released;
    bool words_only; /* granted on a segment that is not leasable, only for
                        LEASE_GRANT_ALLOW_WORDS: its client can free these
                        pages, so the agent takes it as ring words, never data */
    uint64_t pending;
    uint64_t dev_ptr;
    uint64_t granted_ns; /* base_now_ns() at the grant (list.c) */
};

struct lease__class_acct {
    uint64_t registered; /* bytes registered now */
    uint64_t reserved;   /* bytes being registered outside the lock */
    uint64_t retiring;   /* bytes a backend's thread is still unregistering */
};

/* What a retire_range callback reaches the service through: it may come
 * after lease_service_destroy (the backend drains its queue at fini), so
 * @svc is cleared then, under @mu. @refs: the service's one and one per
 * job in flight (atomic); the last to drop it frees the hub. */
struct lease__retire_hub {
    pthread_mutex_t mu;
    struct lease_service *svc;
    uint64_t refs;
};

/* One retire_range job of the service (service.c). */
struct lease__retiring {
    struct lease_retire job; /* first: done() gets &job */
    struct lease__retire_hub *hub;
    uint64_t seg_id; /* the evicted segment (0: destroyed, or never published) */
    bool budgeted;   /* its bytes count in acct[].retiring (not a words area) */
    bool unmap;      /* the mapping goes with the registration (under svc->mu) */
};

struct lease_service {
    pthread_mutex_t mu;
    struct lease_backend be;
    struct lease_service_config cfg; /* budgets resolved: no 0 left where 0 is "default" */
    struct base_idtab clients;
    struct base_idtab segs;
    struct base_idtab leases;
    struct base_idtab tickets;
    struct lease__class_acct acct[LT_CLASS_SLOTS];
    struct lease_stats st;
    uint64_t tick;
    uint64_t mapped;   /* bytes of every segment mapped (and being added) */
    uint64_t staged;   /* of those, STAGED */
    uint64_t segments; /* segments held (and being added): each holds an fd */
    struct lease__retire_hub *hub;
    pthread_cond_t retire_cv;    /* a retire_range job came back (CLOCK_MONOTONIC) */
    uint64_t retire_pending;     /* jobs handed to the backend, not yet back */
    uint64_t retire_progress_ns; /* the last job came back (or the first left) */
};

/* Backend chunking shared by service.c: registers/unregisters every chunk of
 * @seg, timing and counting it. No budget accounting. @populate_first: fill
 * the mapping's page tables alongside (a segment's first registration). A
 * refused registration is undone and explained in *why_p (not logged); a
 * failed unregistration is logged. */
int lease__seg_backend_register(struct lease_service *svc, struct lease__segment *seg,
                                bool populate_first, struct lt_failure *why_p);
void lease__seg_backend_unregister(struct lease_service *svc, struct lease__segment *seg);

uint64_t lease__budget(const struct lease_service *svc, enum lt_class cls);

#endif /* LEASE_INTERNAL_H */
