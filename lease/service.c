/* The lease service: clients, segments and their cached registrations under a
 * per-class pin budget, leases, and the two-phase release tied to GPU work.
 * Ids are kept as gen << 32 | slot inside (lease__table); the API speaks
 * lease-types' typed ids and lease.h's client and ticket types. Over 800
 * lines because it is one lock domain: every path that takes svc->mu reads
 * in this file (registration and eviction could move to a budget.c). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "base/time.h"
#include "internal.h"

#define DEFAULT_MAX_LEASES 65536u
#define DEFAULT_MAX_SEGMENTS 1024u
/* The address space segments may take, all classes: 4x physical memory
 * within these bounds (x86-64 user space is 128 TiB). */
#define DEFAULT_MAPPED_MIN (64ull << 30)
#define DEFAULT_MAPPED_MAX (32ull << 40)

/* Callbacks gathered under the lock and run after it is dropped. */
struct events {
    uint64_t client; /* the owner of every completed lease */
    uint64_t *leases;
    size_t n;
    size_t cap;
    uint64_t one;
    bool drained;
    uint64_t drained_client;
};

static void events_init(struct events *ev, uint64_t client, uint64_t *storage, size_t cap)
{
    ev->client = client;
    ev->leases = storage ? storage : &ev->one;
    ev->n = 0;
    ev->cap = storage ? cap : 1;
    ev->drained = false;
    ev->drained_client = 0;
}

static void events_fire(const struct lease_service *svc, const struct events *ev)
{
    struct lease_client_id client = {ev->client};
    if (svc->cfg.on_release_complete)
        for (size_t i = 0; i < ev->n; i++)
            svc->cfg.on_release_complete(svc->cfg.cb_arg, client,
                                         lt_lease_id_from_u64(ev->leases[i]));
    if (ev->drained && svc->cfg.on_client_drained)
        svc->cfg.on_client_drained(svc->cfg.cb_arg, (struct lease_client_id){ev->drained_client});
}

static bool needs_reg(enum lt_class cls)
{
    return cls == LT_CLASS_PINNED || cls == LT_CLASS_MAPPED;
}

uint64_t lease__budget(const struct lease_service *svc, enum lt_class cls)
{
    if (cls == LT_CLASS_PINNED)
        return svc->cfg.budget_pinned;
    if (cls == LT_CLASS_MAPPED)
        return svc->cfg.budget_mapped;
    return 0;
}

static uint64_t chunk_of(const struct lease_service *svc, const struct lease__segment *seg)
{
    return svc->be.chunk_bytes ? svc->be.chunk_bytes : seg->size;
}

/* A backend that failed without saying why still gets words and a code;
 * -ENOMEM is the contract's "no lockable memory". */
static void backend_why(struct lt_failure *f, int rc)
{
    uint32_t code = f->code != LT_OK ? f->code
                    : rc == -ENOMEM  ? LT_E_MEMLOCK
                                     : lt_error_from_errno(rc);
    if (f->message[0] == '\0')
        lt_failure_set(f, code, rc, "backend failed with errno %d and no message", -rc);
    f->code = code;
    f->err = rc;
}

/* ---- registration ----------------------------------------------------- */

int lease__seg_backend_register(struct lease_service *svc, struct lease__segment *seg,
                                bool populate_first, struct lt_failure *why_p)
{
    uint64_t chunk = chunk_of(svc, seg);
    char *base = seg->base;
    if (seg->words && svc->be.words_unregistered) {
        for (uint32_t i = 0; i < seg->nchunks; i++)
            seg->chunk_dev[i] = (uint64_t)(uintptr_t)(base + (uint64_t)i * chunk);
        return 0;
    }
    struct lease__populate populate = {0};
    if (populate_first)
        lease__populate_start(&populate, base, seg->size);
    int rc = 0;
    uint32_t done = 0;
    struct lt_failure f = {0};
    for (; done < seg->nchunks; done++) {
        uint64_t off = (uint64_t)done * chunk;
        uint64_t len = seg->size - off < chunk ? seg->size - off : chunk;
        uint64_t dev = 0;
        if (seg->read_only && svc->be.register_range_ro)
            rc = svc->be.register_range_ro(svc->be.ctx, base + off, len, seg->cls, &dev, &f);
        else
            rc = svc->be.register_range(svc->be.ctx, base + off, len, seg->cls, &dev, &f);
        if (rc < 0)
            break;
        seg->chunk_dev[done] = dev;
    }
    /* The threads touch the mapping: they finish before anyone may unmap it. */
    if (populate_first)
        lease__populate_wait(&populate);
    int perr = __atomic_load_n(&populate.err, __ATOMIC_RELAXED);
    if (rc == 0 && perr == 0)
        return 0;
    if (perr != 0) {
        /* Pages that cannot be faulted in explain a refusal better than
         * whatever the backend said about them; and if it pinned what was
         * there, the holes would still fault later. */
        rc = perr == -ENOMEM ? -ENOMEM : -EFAULT;
        lt_failure_set(&f, LT_E_SEGMENT_GONE, -EFAULT,
                       "segment: pages cannot be faulted in (MADV_POPULATE_READ: %s)",
                       strerror(-perr));
        rc = -EFAULT;
    }
    backend_why(&f, rc);
    /* Unwinding keeps the refusal's words: its own failures are only logged. */
    while (done-- > 0) {
        uint64_t off = (uint64_t)done * chunk;
        uint64_t len = seg->size - off < chunk ? seg->size - off : chunk;
        struct lt_failure u = {0};
        int urc = svc->be.unregister_range(svc->be.ctx, base + off, len, seg->cls, &u);
        if (urc < 0) {
            backend_why(&u, urc);
            lease__fail_logged(svc, NULL, &u);
        }
        seg->chunk_dev[done] = 0;
    }
    if (why_p)
        *why_p = f;
    return rc;
}

void lease__seg_backend_unregister(struct lease_service *svc, struct lease__segment *seg)
{
    uint64_t chunk = chunk_of(svc, seg);
    char *base = seg->base;
    if (seg->words && svc->be.words_unregistered)
        return;
    for (uint32_t i = 0; i < seg->nchunks; i++) {
        uint64_t off = (uint64_t)i * chunk;
        uint64_t len = seg->size - off < chunk ? seg->size - off : chunk;
        struct lt_failure f = {0};
        int rc = svc->be.unregister_range(svc->be.ctx, base + off, len, seg->cls, &f);
        if (rc < 0) {
            backend_why(&f, rc);
            lease__fail_logged(svc, NULL, &f);
        }
        seg->chunk_dev[i] = 0;
    }
}

/* Locked. Unregisters a registered segment in place and returns its budget. */
static void seg_unregister_locked(struct lease_service *svc, struct lease__segment *seg)
{
    if (!seg->registered)
        return;
    lease__seg_backend_unregister(svc, seg);
    seg->registered = false;
    /* Words areas are the agent's own memory, outside the clients' budget. */
    if (!seg->words) {
        svc->acct[seg->cls].registered -= seg->size;
        svc->st.cls[seg->cls].bytes_registered -= seg->size;
    }
    svc->st.cls[seg->cls].unregistrations++;
}

/* ---- unregistration off the caller's thread (retire_range) -------------
 * The bytes of a job in flight count against the budget (acct[].retiring)
 * until the backend hands it back: the driver still holds them pinned.
 * A caller that needs them waits for that at most RETIRE_WAIT_NS (more for
 * big jobs), and not at all while no job has come back for that long (the
 * backend's thread is held by queued device work, e.g. a peer's unrung
 * doorbell); then it is refused -EBUSY with the numbers, never blocked. */
#define RETIRE_WAIT_NS (100ull * 1000 * 1000)
#define RETIRE_NS_PER_BYTE 1ull /* 1 GB/s: unpinning runs well above it */

static void hub_unref(struct lease__retire_hub *hub)
{
    if (__atomic_sub_fetch(&hub->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    pthread_mutex_destroy(&hub->mu);
    free(hub);
}

/* Locked. A job came back: its bytes leave the budget, its segment (if it
 * is still the one evicted) may be registered again. */
static void retire_settle_locked(struct lease_service *svc, struct lease__retiring *r)
{
    enum lt_class cls = r->job.cls;
    if (r->budgeted) {
        svc->acct[cls].retiring -= r->job.size;
        svc->st.cls[cls].bytes_retiring -= r->job.size;
    }
    struct base_idtab_slot *slot = NULL;
    if (r->seg_id && lease__id_lookup(&svc->segs, r->seg_id, &slot) == LEASE__ID_LIVE) {
        struct lease__segment *seg = slot->obj;
        if (seg->retire == r)
            seg->retire = NULL;
    }
    svc->retire_pending--;
    svc->retire_progress_ns = base_now_ns();
    pthread_cond_broadcast(&svc->retire_cv);
}

/* The backend's thread, no service lock held: every chunk is unregistered. */
static void retire_done(struct lease_retire *job)
{
    struct lease__retiring *r = (struct lease__retiring *)(void *)job;
    struct lease__retire_hub *hub = r->hub;
    pthread_mutex_lock(&hub->mu);
    struct lease_service *svc = hub->svc;
    if (svc) {
        pthread_mutex_lock(&svc->mu);
        retire_settle_locked(svc, r);
        pthread_mutex_unlock(&svc->mu);
    }
    /* Set under svc->mu, and before the hub lets go of the service. */
    bool unmap = r->unmap;
    pthread_mutex_unlock(&hub->mu);
    if (unmap)
        munmap(job->base, (size_t)job->size);
    free(r);
    hub_unref(hub);
}

/* Locked. Hands @seg's unregistration (and with @unmap its mapping) to the
 * backend's thread, its bytes moved from registered to retiring. Returns
 * false when the backend has no such thread (or no memory was left): the
 * caller unregisters in place. */
static bool seg_retire_locked(struct lease_service *svc, struct lease__segment *seg, bool unmap)
{
    if (!seg->registered || !svc->be.retire_range || (seg->words && svc->be.words_unregistered))
        return false;
    struct lease__retiring *r = calloc(1, sizeof(*r));
    if (!r)
        return false;
    r->job = (struct lease_retire){.base = seg->base,
                                   .size = seg->size,
                                   .chunk_bytes = chunk_of(svc, seg),
                                   .cls = seg->cls,
                                   .done = retire_done};
    r->hub = svc->hub;
    r->seg_id = unmap ? 0 : seg->id;
    r->budgeted = !seg->words;
    r->unmap = unmap;
    __atomic_add_fetch(&svc->hub->refs, 1, __ATOMIC_ACQ_REL);
    if (svc->be.retire_range(svc->be.ctx, &r->job) < 0) {
        hub_unref(svc->hub); /* the service's own reference remains */
        free(r);
        return false;
    }
    if (svc->retire_pending++ == 0)
        svc->retire_progress_ns = base_now_ns();
    seg->registered = false;
    if (!unmap)
        seg->retire = r;
    if (r->budgeted) {
        svc->acct[seg->cls].registered -= seg->size;
        svc->acct[seg->cls].retiring += seg->size;
        svc->st.cls[seg->cls].bytes_registered -= seg->size;
        svc->st.cls[seg->cls].bytes_retiring += seg->size;
    }
    svc->st.cls[seg->cls].unregistrations++;
    return true;
}

/* The hub and the condition variable of a new service. */
static int retire_init(struct lease_service *svc)
{
    struct lease__retire_hub *hub = calloc(1, sizeof(*hub));
    if (!hub)
        return -ENOMEM;
    pthread_condattr_t ca;
    int rc = -pthread_condattr_init(&ca);
    if (rc == 0) {
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        rc = -pthread_cond_init(&svc->retire_cv, &ca);
        pthread_condattr_destroy(&ca);
    }
    if (rc == 0 && (rc = -pthread_mutex_init(&hub->mu, NULL)) < 0)
        pthread_cond_destroy(&svc->retire_cv);
    if (rc < 0) {
        free(hub);
        return rc;
    }
    hub->svc = svc;
    hub->refs = 1;
    svc->hub = hub;
    return 0;
}

/* Locked. When the caller may wait for retiring bytes of @cls (@bytes of
 * them wanted), until when; 0: not at all, the backend's thread is held. */
static uint64_t retire_deadline(const struct lease_service *svc, uint64_t bytes)
{
    uint64_t now = base_now_ns();
    if (svc->retire_pending == 0 || now - svc->retire_progress_ns > RETIRE_WAIT_NS)
        return 0;
    return now + RETIRE_WAIT_NS + bytes * RETIRE_NS_PER_BYTE;
}

/* Locked. Waits for a job to come back, until @deadline; -ETIMEDOUT after. */
static int retire_wait_locked(struct lease_service *svc, uint64_t deadline)
{
    if (deadline == 0 || base_now_ns() >= deadline)
        return -ETIMEDOUT;
    struct timespec ts = base_ns_timespec(deadline);
    int rc = pthread_cond_timedwait(&svc->retire_cv, &svc->mu, &ts);
    return rc == ETIMEDOUT ? -ETIMEDOUT : 0;
}

/* ---- the budget ------------------------------------------------------- */

static bool evictable(const struct lease__segment *seg, enum lt_class cls,
                      const struct lease__segment *except)
{
    return seg && seg != except && seg->cls == cls && seg->registered && seg->reg_leases == 0 &&
           seg->holds == 0 && !seg->words;
}

/* Locked. Evicts @seg: off this thread when the backend can, else here. */
static void seg_evict_locked(struct lease_service *svc, struct lease__segment *seg)
{
    if (!seg_retire_locked(svc, seg, false))
        seg_unregister_locked(svc, seg);
    svc->st.cls[seg->cls].evictions++;
}

/* Locked. Refuses @need bytes of @cls while evicted bytes are still being
 * unregistered behind queued device work. */
static int room_busy(const struct lease_service *svc, enum lt_class cls, uint64_t need,
                     struct lt_failure *why_p)
{
    const struct lease__class_acct *a = &svc->acct[cls];
    return lt_failure_set(
        why_p, LT_E_BUSY, -EBUSY,
        "%s pin budget: %" PRIu64 " asked, %" PRIu64 " of %" PRIu64 " held, %" PRIu64
        " unregistering: retry",
        lt_class_name(cls), need, a->registered + a->reserved, lease__budget(svc, cls), a->retiring);
}

/* Locked. Makes room for @need more registered bytes of @cls, unregistering
 * idle segments least recently used first, but only once it is known that
 * enough of them exist. An eviction handed to the backend's thread frees
 * its bytes when that thread is done: this waits for it as
 * retire_deadline allows (dropping the lock meanwhile; @except must stay
 * published). Returns 0, -ENOSPC (LT_E_BUDGET) or -EBUSY (LT_E_BUSY) with
 * the numbers in *why_p (not logged). */
static int make_room(struct lease_service *svc, enum lt_class cls, uint64_t need,
                     const struct lease__segment *except, struct lt_failure *why_p)
{
    struct lease__class_acct *a = &svc->acct[cls];
    uint64_t budget = lease__budget(svc, cls);
    uint64_t deadline = UINT64_MAX; /* not yet decided */
    for (;;) {
        uint64_t held = a->registered + a->reserved;
        uint64_t in_use = held + a->retiring;
        if (need <= budget && in_use <= budget - need)
            return 0;
        uint64_t idle = 0;
        struct lease__segment *s;
        for (uint32_t cur = 0; (s = lease__next(&svc->segs, &cur));) {
            if (evictable(s, cls, except))
                idle += s->size;
        }
        if (need > budget || held - idle > budget - need) {
            char more[64] = "";
            if (a->retiring)
                snprintf(more, sizeof more, ", %" PRIu64 " unregistering", a->retiring);
            return lt_failure_set(why_p, LT_E_BUDGET, -ENOSPC,
                                  "%s pin budget: %" PRIu64 " asked, %" PRIu64 " of %" PRIu64
                                  " in use (%" PRIu64 " idle%s)",
                                  lt_class_name(cls), need, held, budget, idle, more);
        }
        while (need > budget - (a->registered + a->reserved)) {
            struct lease__segment *lru = NULL;
            for (uint32_t cur = 0; (s = lease__next(&svc->segs, &cur));) {
                if (evictable(s, cls, except) && (!lru || s->last_use < lru->last_use))
                    lru = s;
            }
            seg_evict_locked(svc, lru);
        }
        if (need <= budget - (a->registered + a->reserved + a->retiring))
            return 0;
        if (deadline == UINT64_MAX)
            deadline = retire_deadline(svc, a->retiring);
        if (retire_wait_locked(svc, deadline) < 0)
            return room_busy(svc, cls, need, why_p);
    }
}

/* Locked. Registers a published segment (a lease needs it after an
 * eviction). A segment whose eviction is still in flight waits for it as
 * make_room does. A refusal is explained in *why_p, not logged. */
static int seg_register_wait_locked(struct lease_service *svc, struct lease__segment *seg,
                                    struct lt_failure *why_p);

/* Locked. The lock may be dropped inside: seg->waiters keeps @seg from
 * lease_segment_remove meanwhile (its client is kept by the caller's
 * c->busy), so it is still there when this returns. */
static int seg_register_locked(struct lease_service *svc, struct lease__segment *seg,
                               struct lt_failure *why_p)
{
    seg->waiters++;
    int rc = seg_register_wait_locked(svc, seg, why_p);
    seg->waiters--;
    return rc;
}

static int seg_register_wait_locked(struct lease_service *svc, struct lease__segment *seg,
                                    struct lt_failure *why_p)
{
    uint64_t deadline = seg->retire ? retire_deadline(svc, svc->acct[seg->cls].retiring) : 0;
    while (seg->retire) {
        if (retire_wait_locked(svc, deadline) < 0)
            return lt_failure_set(why_p, LT_E_BUSY, -EBUSY,
                                  "segment %#" PRIx64 " (%s) was evicted and is still being "
                                  "unregistered: retry later",
                                  seg->id, lt_class_name(seg->cls));
    }
    if (seg->registered) /* the lock was dropped: a concurrent call registered it */
        return 0;
    int rc = make_room(svc, seg->cls, seg->size, seg, why_p);
    if (rc < 0)
        return rc;
    if (seg->registered)
        return 0;
    uint64_t t0 = base_now_ns();
    /* Under the lock, and the page tables outlive an unregistration: no
     * populating threads for a re-registration. */
    rc = lease__seg_backend_register(svc, seg, false, why_p);
    if (rc < 0)
        return rc;
    seg->registered = true;
    svc->acct[seg->cls].registered += seg->size;
    svc->st.cls[seg->cls].bytes_registered += seg->size;
    svc->st.cls[seg->cls].registrations++;
    svc->st.cls[seg->cls].registration_ns += base_now_ns() - t0;
    return 0;
}

/* ---- object lifetimes (all locked) ------------------------------------ */

static bool seg_huge(const struct lease__segment *seg)
{
    return seg->page_size > (uint64_t)sysconf(_SC_PAGESIZE);
}

/* Locked. Gives back what a segment's mapping counts against. */
static void seg_unaccount(struct lease_service *svc, struct lease__client *c, uint64_t size,
                          enum lt_class cls)
{
    svc->mapped -= size;
    svc->segments--;
    if (c)
        c->mapped -= size;
    if (cls == LT_CLASS_STAGED) {
        svc->staged -= size;
        if (c)
            c->staged -= size;
    }
}

static struct lease__client *client_of(struct lease_service *svc, uint64_t client);

static void seg_destroy(struct lease_service *svc, struct lease__segment *seg)
{
    if (seg->retire) {
        /* Evicted, its unregistration still in flight: the mapping goes
         * when that is done, so its addresses are not reused before. */
        seg->retire->unmap = true;
        seg->retire->seg_id = 0;
        seg->retire = NULL;
    } else if (!seg_retire_locked(svc, seg, true)) {
        seg_unregister_locked(svc, seg);
        munmap(seg->base, (size_t)seg->size);
    }
    close(seg->fd);
    seg_unaccount(svc, client_of(svc, seg->client), seg->size, seg->cls);
    base_idtab_retire(&svc->segs, seg->id);
    svc->st.cls[seg->cls].segments--;
    if (seg_huge(seg))
        svc->st.cls[seg->cls].huge_segments--;
    free(seg->chunk_dev);
    free(seg);
}

static struct lease__client *client_of(struct lease_service *svc, uint64_t client)
{
    struct base_idtab_slot *s = NULL;
    if (lease__id_lookup(&svc->clients, client, &s) != LEASE__ID_LIVE)
        return NULL;
    return s->obj;
}

/* A dropped client whose leases are all complete loses its segments and id. */
static void client_maybe_finalize(struct lease_service *svc, struct lease__client *c,
                                  struct events *ev)
{
    if (!c->dropping || c->leases != 0 || c->busy != 0 || c->holds != 0)
        return;
    struct lease__segment *s;
    for (uint32_t cur = 0; (s = lease__next(&svc->segs, &cur));) {
        if (s && s->client == c->id)
            seg_destroy(svc, s);
    }
    base_idtab_retire(&svc->clients, c->id);
    ev->drained = true;
    ev->drained_client = c->id;
    free(c);
}

/* Release-complete: the bytes go back to the client. Does not finalize a
 * dropped client; the caller does once it has finished iterating. */
static void lease_complete(struct lease_service *svc, struct lease__lease *l, struct events *ev)
{
    struct lease__segment *seg = l->seg;
    struct lease__client *c = client_of(svc, l->client);
    seg->leases--;
    if (needs_reg(l->cls))
        seg->reg_leases--;
    c->leases--;
    c->bytes -= l->length;
    svc->st.cls[l->cls].live_leases--;
    svc->st.cls[l->cls].bytes_leased -= l->length;
    svc->st.draining_leases--;
    base_idtab_retire(&svc->leases, l->id);
    if (!c->dropping && ev->n < ev->cap)
        ev->leases[ev->n++] = l->id;
    free(l);
}

/* ---- id resolution with distinct errors ------------------------------- */

static int client_get(struct lease_service *svc, uint64_t client, struct lease__client **c_p,
                      struct lt_failure *why_p)
{
    struct base_idtab_slot *s = NULL;
    switch (lease__id_lookup(&svc->clients, client, &s)) {
    case LEASE__ID_NEVER:
        return lease__fail(svc, why_p, LT_E_NOT_FOUND, -ENOENT,
                           "client id %#" PRIx64 " was never issued", client);
    case LEASE__ID_STALE:
    case LEASE__ID_FREED:
        return lease__fail(svc, why_p, LT_E_STALE_ID, -ESTALE,
                           "client id %#" PRIx64 " is stale: that client was dropped", client);
    case LEASE__ID_LIVE:
        break;
    }
    struct lease__client *c = s->obj;
    if (c->dropping)
        return lease__fail(svc, why_p, LT_E_SHUTTING_DOWN, -ESHUTDOWN,
                           "client id %#" PRIx64 " is being dropped; no new requests", client);
    *c_p = c;
    return 0;
}

static int seg_get(struct lease_service *svc, const struct lease__client *c, uint64_t seg_id,
                   struct lease__segment **seg_p, struct lt_failure *why_p)
{
    struct base_idtab_slot *s = NULL;
    switch (lease__id_lookup(&svc->segs, seg_id, &s)) {
    case LEASE__ID_NEVER:
        return lease__fail(svc, why_p, LT_E_NOT_FOUND, -ENOENT,
                           "segment id %#" PRIx64 " was never issued", seg_id);
    case LEASE__ID_STALE:
        return lease__fail(svc, why_p, LT_E_STALE_ID, -ESTALE,
                           "segment id %#" PRIx64 " is stale: its slot now holds a newer segment",
                           seg_id);
    case LEASE__ID_FREED:
        if (s->owner != c->id)
            break;
        return lease__fail(svc, why_p, LT_E_STALE_ID, -ESTALE,
                           "segment id %#" PRIx64 " is stale: it was removed", seg_id);
    case LEASE__ID_LIVE:
        break;
    }
    if (s->owner != c->id)
        return lease__fail(svc, why_p, LT_E_NOT_OWNER, -EPERM,
                           "segment id %#" PRIx64 " belongs to another client", seg_id);
    *seg_p = s->obj;
    return 0;
}

/* Resolves a lease id of @c that is not yet released. */
static int lease_get(struct lease_service *svc, const struct lease__client *c, uint64_t lease_id,
                     struct lease__lease **l_p, struct lt_failure *why_p)
{
    struct base_idtab_slot *s = NULL;
    switch (lease__id_lookup(&svc->leases, lease_id, &s)) {
    case LEASE__ID_NEVER:
        return lease__fail(svc, why_p, LT_E_NOT_FOUND, -ENOENT,
                           "lease id %#" PRIx64 " was never issued", lease_id);
    case LEASE__ID_STALE:
        return lease__fail(svc, why_p, LT_E_STALE_ID, -ESTALE,
                           "lease id %#" PRIx64 " is stale: its slot now holds a newer lease",
                           lease_id);
    case LEASE__ID_FREED:
        if (s->owner != c->id)
            break;
        /* Released and complete: gone, as a stale id is. */
        return lease__fail(svc, why_p, LT_E_STALE_ID, -EALREADY,
                           "lease id %#" PRIx64 " was already released (release complete)",
                           lease_id);
    case LEASE__ID_LIVE:
        break;
    }
    if (s->owner != c->id)
        return lease__fail(svc, why_p, LT_E_NOT_OWNER, -EPERM,
                           "lease id %#" PRIx64 " belongs to another client", lease_id);
    struct lease__lease *l = s->obj;
    if (l->released)
        return lease__fail(svc, why_p, LT_E_STALE_ID, -EALREADY,
                           "lease id %#" PRIx64 " was already released (%" PRIu64
                           " GPU work items still pending)",
                           lease_id, l->pending);
    *l_p = l;
    return 0;
}

/* ---- service ---------------------------------------------------------- */

static void limits_resolve(struct lease_client_limits *out, const struct lease_client_limits *want,
                           const struct lease_client_limits *dflt)
{
    out->max_leases = want && want->max_leases ? want->max_leases
                      : dflt->max_leases       ? dflt->max_leases
                                               : DEFAULT_MAX_LEASES;
    out->max_bytes = want && want->max_bytes ? want->max_bytes
                     : dflt->max_bytes       ? dflt->max_bytes
                                             : UINT64_MAX;
    out->max_segments = want && want->max_segments ? want->max_segments
                        : dflt->max_segments       ? dflt->max_segments
                                                   : DEFAULT_MAX_SEGMENTS;
    out->max_mapped_bytes = want && want->max_mapped_bytes ? want->max_mapped_bytes
                            : dflt->max_mapped_bytes       ? dflt->max_mapped_bytes
                                                           : UINT64_MAX;
    out->max_staged_bytes = want && want->max_staged_bytes ? want->max_staged_bytes
                            : dflt->max_staged_bytes       ? dflt->max_staged_bytes
                                                           : UINT64_MAX;
}

/* Physical memory in bytes, UINT64_MAX when unknown. */
static uint64_t phys_bytes(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_MAX;
}

/* The mapped-bytes budgets and their per-client halves, where left 0. */
static void budgets_resolve(struct lease_service_config *cfg)
{
    uint64_t phys = phys_bytes();
    if (!cfg->budget_staged)
        cfg->budget_staged = phys;
    if (!cfg->max_mapped_bytes) {
        uint64_t want = phys > UINT64_MAX / 4 ? UINT64_MAX : 4 * phys;
        want = want < DEFAULT_MAPPED_MIN ? DEFAULT_MAPPED_MIN : want;
        cfg->max_mapped_bytes = want > DEFAULT_MAPPED_MAX ? DEFAULT_MAPPED_MAX : want;
    }
    if (!cfg->max_segments_total)
        cfg->max_segments_total = UINT64_MAX;
    if (!cfg->default_limits.max_mapped_bytes)
        cfg->default_limits.max_mapped_bytes = cfg->max_mapped_bytes / 2;
    if (!cfg->default_limits.max_staged_bytes)
        cfg->default_limits.max_staged_bytes = cfg->budget_staged / 2;
}

/* Refuses budgets no backend or machine could honour, with the numbers. */
static int check_config(const struct lease_service *probe, struct lt_failure *why_p)
{
    const struct lease_service_config *cfg = &probe->cfg;
    const struct lease_backend *be = &probe->be;
    long page = sysconf(_SC_PAGESIZE);
    if (!be->register_range || !be->unregister_range)
        return lease__fail(probe, why_p, LT_E_BAD_VALUE, -EINVAL,
                           "backend '%s': expected register_range and unregister_range, found "
                           "%s missing",
                           be->name ? be->name : "?",
                           be->register_range ? "unregister" : "register");
    if (be->chunk_bytes % (uint64_t)page != 0)
        return lease__fail(probe, why_p, LT_E_BAD_VALUE, -EINVAL,
                           "backend '%s': chunk size %" PRIu64 " is not a multiple of the %ld-byte "
                           "page",
                           be->name ? be->name : "?", be->chunk_bytes, page);
    uint64_t total = cfg->budget_pinned + cfg->budget_mapped;
    if (total < cfg->budget_pinned)
        return lease__fail(probe, why_p, LT_E_BAD_VALUE, -EINVAL,
                           "budgets PINNED %" PRIu64 " + MAPPED %" PRIu64 " bytes overflow 64 bits",
                           cfg->budget_pinned, cfg->budget_mapped);
    long pages = sysconf(_SC_PHYS_PAGES);
    if (pages > 0 && total > (uint64_t)pages * (uint64_t)page)
        return lease__fail(probe, why_p, LT_E_BAD_VALUE, -EINVAL,
                           "budgets PINNED %" PRIu64 " + MAPPED %" PRIu64 " = %" PRIu64
                           " bytes exceed physical memory, %" PRIu64 " bytes",
                           cfg->budget_pinned, cfg->budget_mapped, total,
                           (uint64_t)pages * (uint64_t)page);
    if (be->capacity) {
        uint64_t cap;
        struct lt_failure f = {0};
        int rc = be->capacity(be->ctx, &cap, &f);
        if (rc < 0) {
            backend_why(&f, rc);
            return lease__fail_logged(probe, why_p, &f);
        }
        if (total > cap)
            return lease__fail(probe, why_p, LT_E_BAD_VALUE, -EINVAL,
                               "budgets PINNED %" PRIu64 " + MAPPED %" PRIu64 " = %" PRIu64
                               " bytes exceed what backend '%s' can lock, %" PRIu64
                               " bytes (for the host backend: the RLIMIT_MEMLOCK soft limit)",
                               cfg->budget_pinned, cfg->budget_mapped, total,
                               be->name ? be->name : "?", cap);
    }
    return 0;
}

int lease_service_create(const struct lease_service_config *cfg,
                         const struct lease_backend *backend, struct lease_service **svc_p,
                         struct lt_failure *why_p)
{
    if (!cfg || !backend || !svc_p)
        return lt_failure_set(why_p, LT_E_BAD_VALUE, -EINVAL,
                              "lease_service_create: expected config, backend and output "
                              "pointer, found a NULL");
    struct lease_service *svc = calloc(1, sizeof(*svc));
    if (!svc)
        return lt_failure_set(why_p, LT_E_SYSTEM, -ENOMEM, "lease_service_create: out of memory");
    svc->cfg = *cfg;
    svc->be = *backend;
    budgets_resolve(&svc->cfg);
    int rc = check_config(svc, why_p);
    if (rc < 0)
        goto fail_free;
    if (svc->cfg.seals > LEASE_SEALS_LEGACY) {
        rc = lease__fail(svc, why_p, LT_E_BAD_VALUE, -EINVAL,
                         "seal policy: expected 0 (strict) or 1 (legacy), found %" PRIu32,
                         svc->cfg.seals);
        goto fail_free;
    }
    base_log(&svc->cfg.log, BASE_LOG_INFO, LEASE__SUBSYS,
             "seals: %s; mapped bytes: at most %" PRIu64 " in all, %" PRIu64
             " of them STAGED; per client %" PRIu64 " and %" PRIu64,
             svc->cfg.seals == LEASE_SEALS_LEGACY
                 ? "legacy (SHRINK|GROW|SEAL suffices: clients can free their own leased pages)"
             : lease__future_write_supported()
                 ? "strict (leasable segments need F_SEAL_FUTURE_WRITE)"
                 : "strict, but this kernel has no F_SEAL_FUTURE_WRITE: SHRINK|GROW|SEAL "
                   "suffices and the SIGBUS guard is the only defence",
             svc->cfg.max_mapped_bytes, svc->cfg.budget_staged,
             svc->cfg.default_limits.max_mapped_bytes, svc->cfg.default_limits.max_staged_bytes);
    rc = -pthread_mutex_init(&svc->mu, NULL);
    if (rc < 0) {
        lease__fail(svc, why_p, LT_E_SYSTEM, rc, "pthread_mutex_init failed: %s", strerror(-rc));
        goto fail_free;
    }
    rc = retire_init(svc);
    if (rc < 0) {
        lease__fail(svc, why_p, LT_E_SYSTEM, rc, "retire hub: %s", strerror(-rc));
        pthread_mutex_destroy(&svc->mu);
        goto fail_free;
    }
    /* LIFO: a freed slot is reused first, while it is warm in the cache. */
    base_idtab_init(&svc->clients, NULL);
    base_idtab_init(&svc->segs, NULL);
    base_idtab_init(&svc->leases, NULL);
    base_idtab_init(&svc->tickets, NULL);
    *svc_p = svc;
    return 0;

fail_free:
    free(svc);
    return rc;
}

void lease_service_destroy(struct lease_service *svc)
{
    if (!svc)
        return;
    pthread_mutex_lock(&svc->mu);
    uint64_t leases = base_idtab_live(&svc->leases);
    uint64_t pending = svc->st.pending_work;
    void *obj;
    for (uint32_t cur = 0; (obj = lease__next(&svc->leases, &cur));)
        free(obj);
    for (uint32_t cur = 0; (obj = lease__next(&svc->segs, &cur));)
        seg_destroy(svc, obj);
    for (uint32_t cur = 0; (obj = lease__next(&svc->clients, &cur));)
        free(obj);
    if (leases || pending)
        base_log(&svc->cfg.log, BASE_LOG_WARN, LEASE__SUBSYS,
                 "service destroyed with %" PRIu64 " leases not release-complete and %" PRIu64
                 " GPU work items pending, treated as done",
                 leases, pending);
    base_idtab_fini(&svc->clients);
    base_idtab_fini(&svc->segs);
    base_idtab_fini(&svc->leases);
    base_idtab_fini(&svc->tickets);
    pthread_mutex_unlock(&svc->mu);
    /* Jobs still with the backend come back after this: they find no
     * service, unmap what they were given and free themselves. */
    pthread_mutex_lock(&svc->hub->mu);
    svc->hub->svc = NULL;
    pthread_mutex_unlock(&svc->hub->mu);
    hub_unref(svc->hub);
    pthread_cond_destroy(&svc->retire_cv);
    pthread_mutex_destroy(&svc->mu);
    free(svc);
}

/* A table had no slot (-ENOSPC) or no memory (-ENOMEM) for a new @what. */
static int table_full(const struct lease_service *svc, struct lt_failure *why_p, int rc,
                      const char *what)
{
    if (rc == -ENOSPC)
        return lease__fail(svc, why_p, LT_E_LIMIT, rc, "%s: no slot left", what);
    return lease__fail(svc, why_p, LT_E_SYSTEM, rc, "%s: out of memory", what);
}

/* ---- clients ---------------------------------------------------------- */

int lease_client_add(struct lease_service *svc, const struct lease_client_limits *limits,
                     struct lease_client_id *client_p, struct lt_failure *why_p)
{
    if (!svc || !client_p)
        return lt_failure_set(why_p, LT_E_BAD_VALUE, -EINVAL,
                              "lease_client_add: expected service and output pointer");
    struct lease__client *c = calloc(1, sizeof(*c));
    if (!c)
        return lease__fail(svc, why_p, LT_E_SYSTEM, -ENOMEM, "lease_client_add: out of memory");
    limits_resolve(&c->lim, limits, &svc->cfg.default_limits);
    pthread_mutex_lock(&svc->mu);
    int rc = base_idtab_insert(&svc->clients, c, 0, &c->id);
    pthread_mutex_unlock(&svc->mu);
    if (rc < 0) {
        free(c);
        return table_full(svc, why_p, rc, "lease_client_add");
    }
    client_p->value = c->id;
    return 0;
}

int lease_client_drop(struct lease_service *svc, struct lease_client_id client_id,
                      struct lt_failure *why_p)
{
    if (!svc)
        return lt_failure_set(why_p, LT_E_BAD_VALUE, -EINVAL,
                              "lease_client_drop: expected a service");
    uint64_t client = client_id.value;
    struct events ev;
    events_init(&ev, client, NULL, 0);
    pthread_mutex_lock(&svc->mu);
    struct base_idtab_slot *s = NULL;
    int rc = 0;
    switch (lease__id_lookup(&svc->clients, client, &s)) {
    case LEASE__ID_NEVER:
        rc = lease__fail(svc, why_p, LT_E_NOT_FOUND, -ENOENT,
                         "client id %#" PRIx64 " was never issued", client);
        break;
    case LEASE__ID_STALE:
    case LEASE__ID_FREED:
        rc = lease__fail(svc, why_p, LT_E_STALE_ID, -ESTALE,
                         "client id %#" PRIx64 " is stale: already dropped", client);
        break;
    case LEASE__ID_LIVE:
        if (((struct lease__client *)s->obj)->dropping)
            rc = lease__fail(svc, why_p, LT_E_SHUTTING_DOWN, -EALREADY,
                             "client id %#" PRIx64 " is already being dropped", client);
        break;
    }
    if (rc < 0) {
        pthread_mutex_unlock(&svc->mu);
        return rc;
    }
    struct lease__client *c = s->obj;
    c->dropping = true;
    struct lease__lease *l;
    for (uint32_t cur = 0; (l = lease__next(&svc->leases, &cur));) {
        if (!l || l->client != client || l->released)
            continue;
        l->released = true;
        svc->st.draining_leases++;
        if (l->pending == 0)
            lease_complete(svc, l, &ev);
    }
    uint64_t waiting = c->leases;
    client_maybe_finalize(svc, c, &ev);
    pthread_mutex_unlock(&svc->mu);
    events_fire(svc, &ev);
    return waiting > INT32_MAX ? INT32_MAX : (int)waiting;
}

/* ---- segments --------------------------------------------------------- */

/* Locked. Whether @c may map @size more bytes of @cls, under its own limits
 * and the service's; reserves them when so. A refusal says which limit,
 * with the numbers. */
static int seg_account(struct lease_service *svc, struct lease__client *c, uint64_t size,
                       enum lt_class cls, struct lt_failure *why_p)
{
    const struct lease_service_config *cfg = &svc->cfg;
    if (c->segments >= c->lim.max_segments)
        return lease__fail(svc, why_p, LT_E_LIMIT, -EDQUOT,
                           "segment limit reached (%" PRIu64 " of %" PRIu64
                           " for this client): each holds an agent fd",
                           c->segments, c->lim.max_segments);
    if (svc->segments >= cfg->max_segments_total)
        return lease__fail(svc, why_p, LT_E_LIMIT, -EDQUOT,
                           "the agent's segment limit reached (%" PRIu64 " of %" PRIu64
                           ", all clients): each holds an agent fd",
                           svc->segments, cfg->max_segments_total);
    if (size > c->lim.max_mapped_bytes - c->mapped)
        return lease__fail(svc, why_p, LT_E_LIMIT, -EDQUOT,
                           "mapped-bytes limit of this client: %" PRIu64 " of %" PRIu64
                           " mapped, %" PRIu64 " more asked",
                           c->mapped, c->lim.max_mapped_bytes, size);
    if (size > cfg->max_mapped_bytes - svc->mapped)
        return lease__fail(svc, why_p, LT_E_LIMIT, -EDQUOT,
                           "agent mapped-bytes budget: %" PRIu64 " of %" PRIu64
                           " mapped, %" PRIu64 " more asked",
                           svc->mapped, cfg->max_mapped_bytes, size);
    if (cls == LT_CLASS_STAGED && size > c->lim.max_staged_bytes - c->staged)
        return lease__fail(svc, why_p, LT_E_LIMIT, -EDQUOT,
                           "STAGED bytes limit of this client: %" PRIu64 " of %" PRIu64
                           " mapped, %" PRIu64 " more asked",
                           c->staged, c->lim.max_staged_bytes, size);
    if (cls == LT_CLASS_STAGED && size > cfg->budget_staged - svc->staged)
        return lease__fail(svc, why_p, LT_E_LIMIT, -EDQUOT,
                           "agent STAGED budget: %" PRIu64 " of %" PRIu64
                           " mapped, %" PRIu64 " more asked",
                           svc->staged, cfg->budget_staged, size);
    svc->mapped += size;
    svc->segments++;
    c->mapped += size;
    if (cls == LT_CLASS_STAGED) {
        svc->staged += size;
        c->staged += size;
    }
    return 0;
}

/* lease_segment_add and lease_segment_add_words: @words picks the mapping. */
static int segment_add(struct lease_service *svc, struct lease_client_id client_id, int fd,
                       uint64_t claimed_size, enum lt_class cls, bool words,
                       struct lt_segment_id *seg_id_p, struct lt_failure *why_p)
{
    uint64_t client = client_id.value;
    void *base;
    struct lease__fd_kind kind;
    struct lt_failure f = {0};
    int rc = words ? lease__words_map(fd, claimed_size, &base, &kind, &f)
                   : lease__fd_map(fd, claimed_size, cls, svc->cfg.seals, &base, &kind, &f);
    if (rc < 0)
        return lease__fail_logged(svc, why_p, &f);
    struct lease__segment *seg = calloc(1, sizeof(*seg));
    if (!seg) {
        rc = lease__fail(svc, why_p, LT_E_SYSTEM, -ENOMEM, "lease_segment_add: out of memory");
        goto fail_unmap;
    }
    seg->fd = -1;
    seg->cls = cls;
    seg->base = base;
    seg->size = claimed_size;
    seg->page_size = kind.page;
    seg->read_only = kind.read_only;
    seg->leasable = kind.leasable && !words;
    seg->words = words;
    seg->client = client;
    uint64_t page_size = kind.page;
    uint64_t chunk = chunk_of(svc, seg);
    uint64_t nchunks = (claimed_size + chunk - 1) / chunk;
    if (nchunks > UINT32_MAX) {
        rc = lease__fail(svc, why_p, LT_E_BAD_VALUE, -EINVAL,
                         "segment of %" PRIu64 " bytes needs %" PRIu64 " chunks", claimed_size,
                         nchunks);
        goto fail_free;
    }
    seg->nchunks = (uint32_t)nchunks;
    seg->chunk_dev = calloc(nchunks, sizeof(*seg->chunk_dev));
    if (!seg->chunk_dev) {
        rc = lease__fail(svc, why_p, LT_E_SYSTEM, -ENOMEM, "lease_segment_add: out of memory");
        goto fail_free;
    }

    pthread_mutex_lock(&svc->mu);
    struct lease__client *c = NULL;
    rc = client_get(svc, client, &c, why_p);
    if (rc < 0)
        goto fail_unlock;
    rc = seg_account(svc, c, claimed_size, cls, why_p);
    if (rc < 0)
        goto fail_unlock;
    /* A words area (at most LT_WORDS_MAX_BYTES per client) is registered
     * outside the class budget and never evicted: the agent's own memory. */
    const bool budgeted = needs_reg(cls) && !words;
    if (budgeted) {
        /* make_room may drop the lock to wait for evictions: busy keeps c. */
        c->busy++;
        rc = make_room(svc, cls, claimed_size, NULL, &f);
        c->busy--;
        if (rc < 0) {
            seg_unaccount(svc, c, claimed_size, cls);
            if (rc == -ENOSPC)
                svc->st.cls[cls].budget_refusals++;
            lease__fail_logged(svc, why_p, &f);
            struct events dev;
            events_init(&dev, client, NULL, 0);
            client_maybe_finalize(svc, c, &dev);
            pthread_mutex_unlock(&svc->mu);
            events_fire(svc, &dev);
            goto fail_free;
        }
        svc->acct[cls].reserved += claimed_size;
    }
    /* Registering GiBs takes seconds: do it without the lock, on a segment
     * nobody else can see yet, its bytes reserved against the budget. */
    c->busy++;
    c->segments++;
    pthread_mutex_unlock(&svc->mu);

    uint64_t t0 = base_now_ns();
    if (needs_reg(cls))
        rc = lease__seg_backend_register(svc, seg, true, &f);
    uint64_t t1 = base_now_ns();

    struct events ev;
    events_init(&ev, client, NULL, 0);
    pthread_mutex_lock(&svc->mu);
    c->busy--;
    if (needs_reg(cls)) {
        if (budgeted)
            svc->acct[cls].reserved -= claimed_size;
        if (rc == 0) {
            seg->registered = true;
            if (budgeted) {
                svc->acct[cls].registered += claimed_size;
                svc->st.cls[cls].bytes_registered += claimed_size;
            }
            svc->st.cls[cls].registrations++;
            svc->st.cls[cls].registration_ns += t1 - t0;
        } else if (rc == -ENOMEM) {
            svc->st.cls[cls].budget_refusals++;
        }
    }
    if (rc < 0) {
        lease__fail_logged(svc, why_p, &f);
    } else if (c->dropping) {
        rc = lease__fail(svc, why_p, LT_E_SHUTTING_DOWN, -ESHUTDOWN,
                         "client id %#" PRIx64 " was dropped while its segment was registered",
                         client);
    } else {
        rc = base_idtab_insert(&svc->segs, seg, client, &seg->id);
        if (rc < 0)
            table_full(svc, why_p, rc, "lease_segment_add");
    }
    bool handed = false; /* the mapping went with the unregistration */
    if (rc < 0) {
        handed = seg_retire_locked(svc, seg, true);
        if (!handed)
            seg_unregister_locked(svc, seg);
        c->segments--;
        seg_unaccount(svc, c, claimed_size, cls);
        client_maybe_finalize(svc, c, &ev);
        pthread_mutex_unlock(&svc->mu);
        events_fire(svc, &ev);
        free(seg->chunk_dev);
        free(seg);
        if (!handed)
            munmap(base, (size_t)claimed_size);
        return rc;
    }
    seg->fd = fd;
    seg->last_use = ++svc->tick;
    seg->added_ns = t1;
    seg->registration_ns = needs_reg(cls) ? t1 - t0 : 0;
    svc->st.cls[cls].segments++;
    if (seg_huge(seg))
        svc->st.cls[cls].huge_segments++;
    uint64_t id = seg->id;
    pthread_mutex_unlock(&svc->mu);
    if (needs_reg(cls))
        base_log(&svc->cfg.log, BASE_LOG_INFO, LEASE__SUBSYS,
                 "segment %#" PRIx64 " of client %#" PRIx64 ": %s%s, %" PRIu64 " bytes on %" PRIu64
                 "-byte pages, registered in %.1f ms (%.1f GB/s)",
                 id, client, words ? "the agent's words area, " : "", lt_class_name(cls),
                 claimed_size, page_size, (double)(t1 - t0) / 1e6,
                 t1 > t0 ? (double)claimed_size / (double)(t1 - t0) : 0.0);
    *seg_id_p = lt_segment_id_from_u64(id);
    return 0;

fail_unlock:
    pthread_mutex_unlock(&svc->mu);
fail_free:
    free(seg->chunk_dev);
    free(seg);
fail_unmap:
    munmap(base, (size_t)claimed_size);
    return rc;
}

int lease_segment_add(struct lease_service *svc, struct lease_client_id client_id, int fd,
                      uint64_t claimed_size, enum lt_class cls, struct lt_segment_id *seg_id_p,
                      struct lt_failure *why_p)
{
    if (!svc || !seg_id_p)
        return lt_failure_set(why_p, LT_E_BAD_VALUE, -EINVAL,
                              "lease_segment_add: expected service and output pointer");
    if (!lt_class_is_valid(cls))
        return lease__fail(svc, why_p, LT_E_BAD_CLASS, -EINVAL,
                           "segment class: expected 1 (STAGED), 2 (PINNED) or "
                           "3 (MAPPED), found %d",
                           (int)cls);
    return segment_add(svc, client_id, fd, claimed_size, cls, false, seg_id_p, why_p);
}

int lease_segment_add_words(struct lease_service *svc, struct lease_client_id client_id, int fd,
                            uint64_t size, struct lt_segment_id *seg_id_p, struct lt_failure *why_p)
{
    if (!svc || !seg_id_p)
        return lt_failure_set(why_p, LT_E_BAD_VALUE, -EINVAL,
                              "lease_segment_add_words: expected service and output pointer");
    return segment_add(svc, client_id, fd, size, LT_CLASS_MAPPED, true, seg_id_p, why_p);
}

int lease_segment_remove(struct lease_service *svc, struct lease_client_id client,
                         struct lt_segment_id seg_id, struct lt_failure *why_p)
{
    if (!svc)
        return lt_failure_set(why_p, LT_E_BAD_VALUE, -EINVAL,
                              "lease_segment_remove: expected a service");
    uint64_t id = lt_segment_id_to_u64(seg_id);
    pthread_mutex_lock(&svc->mu);
    struct lease__client *c = NULL;
    struct lease__segment *seg = NULL;
    int rc = client_get(svc, client.value, &c, why_p);
    if (rc == 0)
        rc = seg_get(svc, c, id, &seg, why_p);
    if (rc == 0 && seg->leases != 0)
        rc =
            lease__fail(svc, why_p, LT_E_BUSY, -EBUSY,
                        "segment id %#" PRIx64 " still has %" PRIu64 " leases not release-complete",
                        id, seg->leases);
    if (rc == 0 && seg->holds != 0)
        rc = lease__fail(svc, why_p, LT_E_BUSY, -EBUSY,
                         "segment id %#" PRIx64 " is held by %" PRIu64
                         " GPU operations (doorbell or done words)",
                         id, seg->holds);
    if (rc == 0 && seg->waiters != 0)
        rc = lease__fail(svc, why_p, LT_E_BUSY, -EBUSY,
                         "segment id %#" PRIx64 " is being registered for a lease or hold", id);
    if (rc == 0) {
        seg_destroy(svc, seg);
        c->segments--;
    }
    pthread_mutex_unlock(&svc->mu);
    return rc;
}

/* ---- leases ----------------------------------------------------------- */

/* Grants one lease; a refusal fills res->why (and logs it). */
static int grant_one(struct lease_service *svc, struct lease__client *c,
                     const struct lease_grant_req *req, struct lease_grant_result *res)
{
    struct lt_failure *why = &res->why;
    if (!lt_class_is_valid(req->cls))
        return lease__fail(svc, why, LT_E_BAD_CLASS, -EINVAL,
                           "lease class: expected 1 (STAGED), 2 (PINNED) or "
                           "3 (MAPPED), found %" PRIu32,
                           (uint32_t)req->cls);
    const uint32_t known = LEASE_GRANT_ALLOW_STAGED | LEASE_GRANT_ALLOW_WORDS;
    if (req->flags & ~known)
        return lease__fail(svc, why, LT_E_UNKNOWN_FLAGS, -EINVAL,
                           "lease flags: unknown bits %#" PRIx32, req->flags & ~known);
    struct lease__segment *seg = NULL;
    int rc = seg_get(svc, c, lt_segment_id_to_u64(req->segment), &seg, why);
    if (rc < 0)
        return rc;
    bool words_lease = !seg->words && (req->flags & LEASE_GRANT_ALLOW_WORDS) &&
                       req->cls == LT_CLASS_MAPPED && seg->cls == LT_CLASS_MAPPED;
    if (!seg->leasable && !words_lease)
        return lease__fail(svc, why, LT_E_SEGMENT_UNSEALED, -EPERM,
                           seg->words ? "segment %#" PRIx64 " is the agent's words area: "
                                        "never leased"
                                      : "segment %#" PRIx64 " lacks F_SEAL_FUTURE_WRITE: "
                                        "words only, no leases",
                           seg->id);
    if (req->length == 0 || req->offset > seg->size || req->length > seg->size - req->offset)
        return lease__fail(svc, why, LT_E_OUT_OF_RANGE, -ERANGE,
                           "lease range: offset %" PRIu64 " length %" PRIu64
                           ", expected 0 < length, end <= %" PRIu64,
                           req->offset, req->length, seg->size);
    enum lt_class cls = req->cls;
    if (cls > seg->cls)
        return lease__fail(svc, why, LT_E_BAD_CLASS, -EINVAL,
                           "a %s lease needs a segment of class %s or above, found %s",
                           lt_class_name(cls), lt_class_name(cls), lt_class_name(seg->cls));
    if (c->leases >= c->lim.max_leases)
        return lease__fail(svc, why, LT_E_LIMIT, -EDQUOT,
                           "client %#" PRIx64 ": lease limit reached (%" PRIu64 " of %" PRIu64 ")",
                           c->id, c->leases, c->lim.max_leases);
    if (req->length > c->lim.max_bytes - c->bytes)
        return lease__fail(svc, why, LT_E_LIMIT, -EDQUOT,
                           "client %#" PRIx64 ": byte limit %" PRIu64 " exceeded: %" PRIu64
                           " leased, %" PRIu64 " requested",
                           c->id, c->lim.max_bytes, c->bytes, req->length);
    uint64_t chunk = chunk_of(svc, seg);
    uint64_t first = req->offset / chunk;
    if (needs_reg(cls) && first != (req->offset + req->length - 1) / chunk)
        return lease__fail(svc, why, LT_E_BAD_VALUE, -EINVAL,
                           "%s lease: offset %" PRIu64 " length %" PRIu64
                           " crosses a chunk boundary at %" PRIu64,
                           lt_class_name(cls), req->offset, req->length, (first + 1) * chunk);
    uint32_t fell_back = 0;
    if (needs_reg(cls) && !seg->registered) {
        /* Not yet the caller's: a fallback to STAGED succeeds. */
        struct lt_failure f = {0};
        rc = seg_register_locked(svc, seg, &f);
        if (rc == -ENOSPC || rc == -ENOMEM || rc == -EBUSY) {
            /* Counted against the class whose budget ran out: the segment's. */
            if (!(req->flags & LEASE_GRANT_ALLOW_STAGED)) {
                svc->st.cls[seg->cls].budget_refusals++;
                return lease__fail_logged(svc, why, &f);
            }
            base_log(&svc->cfg.log, BASE_LOG_NOTICE, LEASE__SUBSYS, "%s lease served as STAGED: %s",
                     lt_class_name(cls), f.message);
            svc->st.cls[seg->cls].fallbacks++;
            cls = LT_CLASS_STAGED;
            fell_back = 1;
        } else if (rc < 0) {
            return lease__fail_logged(svc, why, &f);
        }
    }
    if (c->dropping) /* while a registration waited with the lock dropped */
        return lease__fail(svc, why, LT_E_SHUTTING_DOWN, -ESHUTDOWN,
                           "client id %#" PRIx64 " was dropped while its lease was registered",
                           c->id);
    struct lease__lease *l = calloc(1, sizeof(*l));
    if (!l)
        return lease__fail(svc, why, LT_E_SYSTEM, -ENOMEM, "lease grant: out of memory");
    rc = base_idtab_insert(&svc->leases, l, c->id, &l->id);
    if (rc < 0) {
        free(l);
        return table_full(svc, why, rc, "lease grant");
    }
    l->client = c->id;
    l->seg = seg;
    l->offset = req->offset;
    l->length = req->length;
    l->cls = cls;
    /* Only words_lease let it through: the caller must not read it as data. */
    l->words_only = !seg->leasable;
    l->granted_ns = base_now_ns();
    if (cls == LT_CLASS_MAPPED)
        l->dev_ptr = seg->chunk_dev[first] + (req->offset - first * chunk);
    seg->leases++;
    if (needs_reg(cls))
        seg->reg_leases++;
    seg->last_use = ++svc->tick;
    c->leases++;
    c->bytes += l->length;
    svc->st.cls[cls].live_leases++;
    svc->st.cls[cls].bytes_leased += l->length;

    res->cls = cls;
    res->fell_back = fell_back;
    res->lease = lt_lease_id_from_u64(l->id);
    res->host_addr = (char *)seg->base + l->offset;
    res->dev_ptr = l->dev_ptr;
    return 0;
}

int lease_grant(struct lease_service *svc, struct lease_client_id client, size_t n,
                const struct lease_grant_req *reqs, struct lease_grant_result *results_p,
                struct lt_failure *why_p)
{
    if (!svc || (n && (!reqs || !results_p)))
        return lt_failure_set(why_p, LT_E_BAD_VALUE, -EINVAL,
                              "lease_grant: expected service, requests and results");
    pthread_mutex_lock(&svc->mu);
    struct lease__client *c = NULL;
    int rc = client_get(svc, client.value, &c, why_p);
    if (rc < 0) {
        pthread_mutex_unlock(&svc->mu);
        return rc;
    }
    int granted = 0;
    /* A registration may wait for evictions with the lock dropped: busy
     * keeps c (and so its segments) until the last request is answered. */
    c->busy++;
    for (size_t i = 0; i < n; i++) {
        struct lease_grant_result *res = &results_p[i];
        res->cls = LT_CLASS_INVALID;
        res->fell_back = 0;
        res->lease = lt_lease_id_make(0, 0);
        res->host_addr = NULL;
        res->dev_ptr = 0;
        res->rc = grant_one(svc, c, &reqs[i], res);
        if (res->rc == 0)
            granted++;
    }
    c->busy--;
    struct events ev;
    events_init(&ev, client.value, NULL, 0);
    client_maybe_finalize(svc, c, &ev);
    pthread_mutex_unlock(&svc->mu);
    events_fire(svc, &ev);
    return granted;
}

int lease_release(struct lease_service *svc, struct lease_client_id client, size_t n,
                  const struct lt_lease_id *leases, struct lease_release_result *results_p,
                  struct lt_failure *why_p)
{
    if (!svc || (n && (!leases || !results_p)))
        return lt_failure_set(why_p, LT_E_BAD_VALUE, -EINVAL,
                              "lease_release: expected service, ids and results");
    /* A wire batch (LT_MAX_BATCH ids at most) fits on the stack: no
     * allocation per RELEASE on the agent's hot path. */
    uint64_t done_stack[64];
    uint64_t *done = NULL;
    if (n > 1 && n <= sizeof done_stack / sizeof done_stack[0]) {
        done = done_stack;
    } else if (n > 1) {
        done = calloc(n, sizeof(*done));
        if (!done)
            return lease__fail(svc, why_p, LT_E_SYSTEM, -ENOMEM,
                               "lease_release: out of memory for %zu ids", n);
    }
    struct events ev;
    events_init(&ev, client.value, done, n);
    pthread_mutex_lock(&svc->mu);
    struct lease__client *c = NULL;
    int rc = client_get(svc, client.value, &c, why_p);
    if (rc < 0) {
        pthread_mutex_unlock(&svc->mu);
        if (done != done_stack)
            free(done);
        return rc;
    }
    int released = 0;
    for (size_t i = 0; i < n; i++) {
        struct lease__lease *l = NULL;
        results_p[i].rc = lease_get(svc, c, lt_lease_id_to_u64(leases[i]), &l, &results_p[i].why);
        if (results_p[i].rc < 0)
            continue;
        l->released = true;
        svc->st.draining_leases++;
        released++;
        if (l->pending == 0)
            lease_complete(svc, l, &ev);
    }
    pthread_mutex_unlock(&svc->mu);
    events_fire(svc, &ev);
    if (done != done_stack)
        free(done);
    return released;
}

int lease_work_pin(struct lease_service *svc, struct lease_client_id client,
                   struct lt_lease_id lease, struct lease_ticket *ticket_p,
                   struct lt_failure *why_p)
{
    if (!svc || !ticket_p)
        return lt_failure_set(why_p, LT_E_BAD_VALUE, -EINVAL,
                              "lease_work_pin: expected service and output pointer");
    uint64_t lease_id = lt_lease_id_to_u64(lease);
    pthread_mutex_lock(&svc->mu);
    struct lease__client *c = NULL;
    struct lease__lease *l = NULL;
    uint64_t ticket = 0;
    int rc = client_get(svc, client.value, &c, why_p);
    if (rc == 0)
        rc = lease_get(svc, c, lease_id, &l, why_p);
    if (rc == 0) {
        rc = base_idtab_insert(&svc->tickets, l, lease_id, &ticket);
        if (rc < 0)
            table_full(svc, why_p, rc, "lease_work_pin");
    }
    if (rc == 0) {
        l->pending++;
        svc->st.pending_work++;
    }
    pthread_mutex_unlock(&svc->mu);
    if (rc == 0)
        ticket_p->value = ticket;
    return rc;
}

int lease_work_done(struct lease_service *svc, struct lease_ticket ticket_id,
                    struct lt_failure *why_p)
{
    if (!svc)
        return lt_failure_set(why_p, LT_E_BAD_VALUE, -EINVAL,
                              "lease_work_done: expected a service");
    uint64_t ticket = ticket_id.value;
    struct events ev;
    int rc = 0;
    pthread_mutex_lock(&svc->mu);
    struct base_idtab_slot *s = NULL;
    switch (lease__id_lookup(&svc->tickets, ticket, &s)) {
    case LEASE__ID_NEVER:
        rc = lease__fail(svc, why_p, LT_E_NOT_FOUND, -ENOENT,
                         "work ticket %#" PRIx64 " was never issued", ticket);
        break;
    case LEASE__ID_STALE:
        rc = lease__fail(svc, why_p, LT_E_STALE_ID, -ESTALE, "work ticket %#" PRIx64 " is stale",
                         ticket);
        break;
    case LEASE__ID_FREED:
        rc = lease__fail(svc, why_p, LT_E_STALE_ID, -EALREADY,
                         "work ticket %#" PRIx64 " is already done", ticket);
        break;
    case LEASE__ID_LIVE:
        break;
    }
    if (rc < 0) {
        pthread_mutex_unlock(&svc->mu);
        return rc;
    }
    struct lease__lease *l = s->obj;
    base_idtab_retire(&svc->tickets, ticket);
    l->pending--;
    svc->st.pending_work--;
    events_init(&ev, l->client, NULL, 0);
    if (l->released && l->pending == 0) {
        struct lease__client *c = client_of(svc, l->client);
        lease_complete(svc, l, &ev);
        client_maybe_finalize(svc, c, &ev);
    }
    pthread_mutex_unlock(&svc->mu);
    events_fire(svc, &ev);
    return 0;
}

int lease_query(struct lease_service *svc, struct lease_client_id client, struct lt_lease_id lease,
                struct lease_info *info_p, struct lt_failure *why_p)
{
    if (!svc || !info_p)
        return lt_failure_set(why_p, LT_E_BAD_VALUE, -EINVAL,
                              "lease_query: expected service and output pointer");
    uint64_t lease_id = lt_lease_id_to_u64(lease);
    pthread_mutex_lock(&svc->mu);
    struct lease__client *c = NULL;
    struct base_idtab_slot *s = NULL;
    int rc = client_get(svc, client.value, &c, why_p);
    if (rc == 0) {
        enum lease__lookup k = lease__id_lookup(&svc->leases, lease_id, &s);
        if (k == LEASE__ID_LIVE && s->owner == c->id) {
            const struct lease__lease *l = s->obj;
            *info_p = (struct lease_info){
                .segment = lt_segment_id_from_u64(l->seg->id),
                .offset = l->offset,
                .length = l->length,
                .cls = l->cls,
                .released = l->released,
                .pending_work = l->pending,
                .host_addr = (char *)l->seg->base + l->offset,
                .dev_ptr = l->dev_ptr,
                .writable = !l->seg->read_only,
                .words_only = l->words_only,
            };
        } else {
            struct lease__lease *unused = NULL;
            rc = lease_get(svc, c, lease_id, &unused, why_p);
        }
    }
    pthread_mutex_unlock(&svc->mu);
    return rc;
}

/* ---- segment queries and holds ---------------------------------------- */

/* Locked. Fills @info from @seg for the byte range at @offset of @length
 * bytes, which the caller checked lies in the segment. */
static void seg_info_fill(const struct lease_service *svc, const struct lease__segment *seg,
                          uint64_t offset, struct lease_segment_info *info)
{
    uint64_t chunk = chunk_of(svc, seg);
    uint64_t first = offset / chunk;
    *info = (struct lease_segment_info){
        .size = seg->size,
        .cls = seg->cls,
        .registered = seg->registered,
        .host_base = seg->base,
        .chunk_bytes = chunk,
        .leases = seg->leases,
        .holds = seg->holds,
        .writable = !seg->read_only,
        .words = seg->words,
    };
    if (seg->cls == LT_CLASS_MAPPED && seg->registered)
        info->dev_ptr = seg->chunk_dev[first] + (offset - first * chunk);
}

/* Locked. Resolves @seg_id of @client and checks [@offset, @offset + @length)
 * against it: inside, nonempty, and within one registration chunk. */
static int seg_range_get(struct lease_service *svc, uint64_t client, uint64_t seg_id,
                         uint64_t offset, uint64_t length, struct lease__client **c_p,
                         struct lease__segment **seg_p, struct lt_failure *why_p)
{
    struct lease__client *c = NULL;
    struct lease__segment *seg = NULL;
    int rc = client_get(svc, client, &c, why_p);
    if (rc == 0)
        rc = seg_get(svc, c, seg_id, &seg, why_p);
    if (rc < 0)
        return rc;
    if (length == 0 || offset >= seg->size || length > seg->size - offset)
        return lease__fail(svc, why_p, LT_E_OUT_OF_RANGE, -ERANGE,
                           "segment range: offset %" PRIu64 " length %" PRIu64
                           ", expected 0 < length, end <= %" PRIu64,
                           offset, length, seg->size);
    uint64_t chunk = chunk_of(svc, seg);
    if (offset / chunk != (offset + length - 1) / chunk)
        return lease__fail(svc, why_p, LT_E_BAD_VALUE, -EINVAL,
                           "segment range: offset %" PRIu64 " length %" PRIu64
                           " spans a chunk boundary (chunks of %" PRIu64 ")",
                           offset, length, chunk);
    *c_p = c;
    *seg_p = seg;
    return 0;
}

int lease_segment_query(struct lease_service *svc, struct lease_client_id client,
                        struct lt_segment_id seg_id, uint64_t offset,
                        struct lease_segment_info *info_p, struct lt_failure *why_p)
{
    if (!svc || !info_p)
        return lt_failure_set(why_p, LT_E_BAD_VALUE, -EINVAL,
                              "lease_segment_query: expected service and output pointer");
    pthread_mutex_lock(&svc->mu);
    struct lease__client *c = NULL;
    struct lease__segment *seg = NULL;
    int rc =
        seg_range_get(svc, client.value, lt_segment_id_to_u64(seg_id), offset, 1, &c, &seg, why_p);
    if (rc == 0)
        seg_info_fill(svc, seg, offset, info_p);
    pthread_mutex_unlock(&svc->mu);
    return rc;
}

int lease_segment_hold(struct lease_service *svc, struct lease_client_id client,
                       struct lt_segment_id seg_id, uint64_t offset, uint64_t length,
                       struct lease_segment_info *info_p, struct lt_failure *why_p)
{
    if (!svc || !info_p)
        return lt_failure_set(why_p, LT_E_BAD_VALUE, -EINVAL,
                              "lease_segment_hold: expected service and output pointer");
    pthread_mutex_lock(&svc->mu);
    struct lease__client *c = NULL;
    struct lease__segment *seg = NULL;
    int rc = seg_range_get(svc, client.value, lt_segment_id_to_u64(seg_id), offset, length, &c,
                           &seg, why_p);
    if (rc == 0 && needs_reg(seg->cls) && !seg->registered) {
        /* Evicted while idle: the GPU needs the registration back first. */
        struct lt_failure f = {0};
        c->busy++; /* the lock may be dropped to wait for evictions */
        rc = seg_register_locked(svc, seg, &f);
        c->busy--;
        if (rc == -ENOSPC || rc == -ENOMEM)
            svc->st.cls[seg->cls].budget_refusals++;
        if (rc < 0)
            lease__fail_logged(svc, why_p, &f);
        else if (c->dropping)
            rc = lease__fail(svc, why_p, LT_E_SHUTTING_DOWN, -ESHUTDOWN,
                             "client id %#" PRIx64 " was dropped while its segment was registered",
                             c->id);
    }
    if (rc == 0) {
        seg->holds++;
        c->holds++;
        seg->last_use = ++svc->tick;
        seg_info_fill(svc, seg, offset, info_p);
    }
    struct events ev;
    events_init(&ev, client.value, NULL, 0);
    if (c)
        client_maybe_finalize(svc, c, &ev);
    pthread_mutex_unlock(&svc->mu);
    events_fire(svc, &ev);
    return rc;
}

int lease_segment_unhold(struct lease_service *svc, struct lt_segment_id seg_id,
                         struct lt_failure *why_p)
{
    if (!svc)
        return lt_failure_set(why_p, LT_E_BAD_VALUE, -EINVAL,
                              "lease_segment_unhold: expected a service");
    uint64_t id = lt_segment_id_to_u64(seg_id);
    struct events ev;
    events_init(&ev, 0, NULL, 0);
    pthread_mutex_lock(&svc->mu);
    struct base_idtab_slot *s = NULL;
    int rc = 0;
    switch (lease__id_lookup(&svc->segs, id, &s)) {
    case LEASE__ID_NEVER:
        rc = lease__fail(svc, why_p, LT_E_NOT_FOUND, -ENOENT,
                         "segment id %#" PRIx64 " was never issued", id);
        break;
    case LEASE__ID_STALE:
    case LEASE__ID_FREED:
        rc = lease__fail(svc, why_p, LT_E_STALE_ID, -ESTALE,
                         "segment id %#" PRIx64 " is stale: it holds no hold", id);
        break;
    case LEASE__ID_LIVE:
        break;
    }
    struct lease__segment *seg = rc == 0 ? s->obj : NULL;
    if (rc == 0 && seg->holds == 0)
        rc = lease__fail(svc, why_p, LT_E_STALE_ID, -EALREADY,
                         "segment id %#" PRIx64 " has no hold to undo", id);
    if (rc == 0) {
        struct lease__client *c = client_of(svc, seg->client);
        seg->holds--;
        c->holds--;
        client_maybe_finalize(svc, c, &ev); /* a dropped client's last hold frees it */
    }
    pthread_mutex_unlock(&svc->mu);
    events_fire(svc, &ev);
    return rc;
}
