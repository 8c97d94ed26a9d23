/* The lease service: clients, segments and their cached registrations under a
 * per-class pin budget, leases, and the two-phase release tied to GPU work. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define DEFAULT_MAX_LEASES 65536u
#define DEFAULT_MAX_SEGMENTS 1024u

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
    if (svc->cfg.on_release_complete)
        for (size_t i = 0; i < ev->n; i++)
            svc->cfg.on_release_complete(svc->cfg.cb_arg, ev->client, ev->leases[i]);
    if (ev->drained && svc->cfg.on_client_drained)
        svc->cfg.on_client_drained(svc->cfg.cb_arg, ev->drained_client);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static bool class_valid(uint64_t cls)
{
    return cls >= LEASE_CLASS_STAGED && cls <= LEASE_CLASS_MAX;
}

static bool needs_reg(enum lease_class cls)
{
    return cls == LEASE_CLASS_PINNED || cls == LEASE_CLASS_MAPPED;
}

uint64_t lease__budget(const struct lease_service *svc, enum lease_class cls)
{
    if (cls == LEASE_CLASS_PINNED)
        return svc->cfg.budget_pinned;
    if (cls == LEASE_CLASS_MAPPED)
        return svc->cfg.budget_mapped;
    return 0;
}

static uint64_t chunk_of(const struct lease_service *svc, const struct lease__segment *seg)
{
    return svc->be.chunk_bytes ? svc->be.chunk_bytes : seg->size;
}

/* ---- registration ----------------------------------------------------- */

int lease__seg_backend_register(struct lease_service *svc, struct lease__segment *seg,
                                bool populate_first)
{
    uint64_t chunk = chunk_of(svc, seg);
    char *base = seg->base;
    struct lease__populate populate = {0};
    if (populate_first)
        lease__populate_start(&populate, base, seg->size);
    int rc = 0;
    uint32_t done = 0;
    for (; done < seg->nchunks; done++) {
        uint64_t off = (uint64_t)done * chunk;
        uint64_t len = seg->size - off < chunk ? seg->size - off : chunk;
        uint64_t dev = 0;
        lease__error_clear();
        rc = svc->be.register_range(svc->be.ctx, base + off, len, seg->cls, &dev);
        if (rc < 0)
            break;
        seg->chunk_dev[done] = dev;
    }
    /* The threads touch the mapping: they finish before anyone may unmap it. */
    if (populate_first)
        lease__populate_wait(&populate);
    if (rc == 0)
        return 0;
    /* Keep the backend's message: unwinding must not replace it. */
    char why[512];
    strncpy(why, lease_error_last(), sizeof(why) - 1);
    why[sizeof(why) - 1] = '\0';
    while (done-- > 0) {
        uint64_t off = (uint64_t)done * chunk;
        uint64_t len = seg->size - off < chunk ? seg->size - off : chunk;
        svc->be.unregister_range(svc->be.ctx, base + off, len, seg->cls);
        seg->chunk_dev[done] = 0;
    }
    return lease_error_set(rc, "%s", why[0] ? why : "backend registration failed");
}

void lease__seg_backend_unregister(struct lease_service *svc, struct lease__segment *seg)
{
    uint64_t chunk = chunk_of(svc, seg);
    char *base = seg->base;
    for (uint32_t i = 0; i < seg->nchunks; i++) {
        uint64_t off = (uint64_t)i * chunk;
        uint64_t len = seg->size - off < chunk ? seg->size - off : chunk;
        lease__error_clear();
        int rc = svc->be.unregister_range(svc->be.ctx, base + off, len, seg->cls);
        if (rc < 0)
            lease__fail_logged(svc, rc);
        seg->chunk_dev[i] = 0;
    }
}

/* Locked. Unregisters a registered segment and returns its budget. */
static void seg_unregister_locked(struct lease_service *svc, struct lease__segment *seg)
{
    if (!seg->registered)
        return;
    lease__seg_backend_unregister(svc, seg);
    seg->registered = false;
    svc->acct[seg->cls].registered -= seg->size;
    svc->st.cls[seg->cls].bytes_registered -= seg->size;
    svc->st.cls[seg->cls].unregistrations++;
}

static bool evictable(const struct lease__segment *seg, enum lease_class cls,
                      const struct lease__segment *except)
{
    return seg && seg != except && seg->cls == cls && seg->registered && seg->reg_leases == 0 &&
           seg->holds == 0;
}

/* Locked. Makes room for @need more registered bytes of @cls, unregistering
 * idle segments least recently used first, but only once it is known that
 * enough of them exist. Returns 0 or -ENOSPC with the numbers (not logged). */
static int make_room(struct lease_service *svc, enum lease_class cls, uint64_t need,
                     const struct lease__segment *except)
{
    struct lease__class_acct *a = &svc->acct[cls];
    uint64_t budget = lease__budget(svc, cls);
    uint64_t in_use = a->registered + a->reserved;
    if (need <= budget && in_use <= budget - need)
        return 0;
    uint64_t idle = 0;
    for (uint32_t i = 0; i < svc->segs.n; i++) {
        struct lease__segment *s = svc->segs.slots[i].obj;
        if (evictable(s, cls, except))
            idle += s->size;
    }
    if (need > budget || in_use - idle > budget - need)
        return lease_error_set(-ENOSPC,
                               "%s pin budget exhausted: request %" PRIu64 " bytes, budget %" PRIu64
                               " bytes, in use %" PRIu64 " bytes (%" PRIu64
                               " of them idle and evictable)",
                               lease_class_name(cls), need, budget, in_use, idle);
    while (need > budget - (a->registered + a->reserved)) {
        struct lease__segment *lru = NULL;
        for (uint32_t i = 0; i < svc->segs.n; i++) {
            struct lease__segment *s = svc->segs.slots[i].obj;
            if (evictable(s, cls, except) && (!lru || s->last_use < lru->last_use))
                lru = s;
        }
        seg_unregister_locked(svc, lru);
        svc->st.cls[cls].evictions++;
    }
    return 0;
}

/* Locked. Registers a published segment (a lease needs it after an eviction). */
static int seg_register_locked(struct lease_service *svc, struct lease__segment *seg)
{
    int rc = make_room(svc, seg->cls, seg->size, seg);
    if (rc < 0)
        return rc;
    uint64_t t0 = now_ns();
    /* Under the lock, and the page tables outlive an unregistration: no
     * populating threads for a re-registration. */
    rc = lease__seg_backend_register(svc, seg, false);
    if (rc < 0)
        return rc;
    seg->registered = true;
    svc->acct[seg->cls].registered += seg->size;
    svc->st.cls[seg->cls].bytes_registered += seg->size;
    svc->st.cls[seg->cls].registrations++;
    svc->st.cls[seg->cls].registration_ns += now_ns() - t0;
    return 0;
}

/* ---- object lifetimes (all locked) ------------------------------------ */

static bool seg_huge(const struct lease__segment *seg)
{
    return seg->page_size > (uint64_t)sysconf(_SC_PAGESIZE);
}

static void seg_destroy(struct lease_service *svc, struct lease__segment *seg)
{
    seg_unregister_locked(svc, seg);
    munmap(seg->base, (size_t)seg->size);
    close(seg->fd);
    lease__table_remove(&svc->segs, seg->id);
    svc->st.cls[seg->cls].segments--;
    if (seg_huge(seg))
        svc->st.cls[seg->cls].huge_segments--;
    free(seg->chunk_dev);
    free(seg);
}

static struct lease__client *client_of(struct lease_service *svc, uint64_t client)
{
    struct lease__slot *s = NULL;
    if (lease__table_lookup(&svc->clients, client, &s) != LEASE__ID_LIVE)
        return NULL;
    return s->obj;
}

/* A dropped client whose leases are all complete loses its segments and id. */
static void client_maybe_finalize(struct lease_service *svc, struct lease__client *c,
                                  struct events *ev)
{
    if (!c->dropping || c->leases != 0 || c->busy != 0 || c->holds != 0)
        return;
    for (uint32_t i = 0; i < svc->segs.n; i++) {
        struct lease__segment *s = svc->segs.slots[i].obj;
        if (s && s->client == c->id)
            seg_destroy(svc, s);
    }
    lease__table_remove(&svc->clients, c->id);
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
    lease__table_remove(&svc->leases, l->id);
    if (!c->dropping && ev->n < ev->cap)
        ev->leases[ev->n++] = l->id;
    free(l);
}

/* ---- id resolution with distinct errors ------------------------------- */

static int client_get(struct lease_service *svc, uint64_t client, struct lease__client **c_p)
{
    struct lease__slot *s = NULL;
    switch (lease__table_lookup(&svc->clients, client, &s)) {
    case LEASE__ID_NEVER:
        return lease__fail(svc, -ENOENT, "client id %#" PRIx64 " was never issued", client);
    case LEASE__ID_STALE:
    case LEASE__ID_FREED:
        return lease__fail(svc, -ESTALE, "client id %#" PRIx64 " is stale: that client was dropped",
                           client);
    case LEASE__ID_LIVE:
        break;
    }
    struct lease__client *c = s->obj;
    if (c->dropping)
        return lease__fail(svc, -ESHUTDOWN,
                           "client id %#" PRIx64 " is being dropped; no new requests", client);
    *c_p = c;
    return 0;
}

static int seg_get(struct lease_service *svc, const struct lease__client *c, uint64_t seg_id,
                   struct lease__segment **seg_p)
{
    struct lease__slot *s = NULL;
    switch (lease__table_lookup(&svc->segs, seg_id, &s)) {
    case LEASE__ID_NEVER:
        return lease__fail(svc, -ENOENT, "segment id %#" PRIx64 " was never issued", seg_id);
    case LEASE__ID_STALE:
        return lease__fail(svc, -ESTALE,
                           "segment id %#" PRIx64 " is stale: its slot now holds a newer segment",
                           seg_id);
    case LEASE__ID_FREED:
        if (s->owner != c->id)
            break;
        return lease__fail(svc, -ESTALE, "segment id %#" PRIx64 " is stale: it was removed",
                           seg_id);
    case LEASE__ID_LIVE:
        break;
    }
    if (s->owner != c->id)
        return lease__fail(svc, -EPERM, "segment id %#" PRIx64 " belongs to another client",
                           seg_id);
    *seg_p = s->obj;
    return 0;
}

/* Resolves a lease id of @c that is not yet released. */
static int lease_get(struct lease_service *svc, const struct lease__client *c, uint64_t lease_id,
                     struct lease__lease **l_p)
{
    struct lease__slot *s = NULL;
    switch (lease__table_lookup(&svc->leases, lease_id, &s)) {
    case LEASE__ID_NEVER:
        return lease__fail(svc, -ENOENT, "lease id %#" PRIx64 " was never issued", lease_id);
    case LEASE__ID_STALE:
        return lease__fail(svc, -ESTALE,
                           "lease id %#" PRIx64 " is stale: its slot now holds a newer lease",
                           lease_id);
    case LEASE__ID_FREED:
        if (s->owner != c->id)
            break;
        return lease__fail(svc, -EALREADY,
                           "lease id %#" PRIx64 " was already released (release complete)",
                           lease_id);
    case LEASE__ID_LIVE:
        break;
    }
    if (s->owner != c->id)
        return lease__fail(svc, -EPERM, "lease id %#" PRIx64 " belongs to another client",
                           lease_id);
    struct lease__lease *l = s->obj;
    if (l->released)
        return lease__fail(svc, -EALREADY,
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
}

/* Refuses budgets no backend or machine could honour, with the numbers. */
static int check_config(const struct lease_service *probe)
{
    const struct lease_service_config *cfg = &probe->cfg;
    const struct lease_backend *be = &probe->be;
    long page = sysconf(_SC_PAGESIZE);
    if (!be->register_range || !be->unregister_range)
        return lease__fail(probe, -EINVAL,
                           "backend '%s': expected register_range and unregister_range, found "
                           "%s missing",
                           be->name ? be->name : "?",
                           be->register_range ? "unregister" : "register");
    if (be->chunk_bytes % (uint64_t)page != 0)
        return lease__fail(probe, -EINVAL,
                           "backend '%s': chunk size %" PRIu64 " is not a multiple of the %ld-byte "
                           "page",
                           be->name ? be->name : "?", be->chunk_bytes, page);
    uint64_t total = cfg->budget_pinned + cfg->budget_mapped;
    if (total < cfg->budget_pinned)
        return lease__fail(probe, -EINVAL,
                           "budgets PINNED %" PRIu64 " + MAPPED %" PRIu64 " bytes overflow 64 bits",
                           cfg->budget_pinned, cfg->budget_mapped);
    long pages = sysconf(_SC_PHYS_PAGES);
    if (pages > 0 && total > (uint64_t)pages * (uint64_t)page)
        return lease__fail(probe, -EINVAL,
                           "budgets PINNED %" PRIu64 " + MAPPED %" PRIu64 " = %" PRIu64
                           " bytes exceed physical memory, %" PRIu64 " bytes",
                           cfg->budget_pinned, cfg->budget_mapped, total,
                           (uint64_t)pages * (uint64_t)page);
    if (be->capacity) {
        uint64_t cap;
        lease__error_clear();
        int rc = be->capacity(be->ctx, &cap);
        if (rc < 0)
            return lease__fail_logged(probe, rc);
        if (total > cap)
            return lease__fail(probe, -EINVAL,
                               "budgets PINNED %" PRIu64 " + MAPPED %" PRIu64 " = %" PRIu64
                               " bytes exceed what backend '%s' can lock, %" PRIu64
                               " bytes (for the host backend: the RLIMIT_MEMLOCK soft limit)",
                               cfg->budget_pinned, cfg->budget_mapped, total,
                               be->name ? be->name : "?", cap);
    }
    return 0;
}

int lease_service_create(const struct lease_service_config *cfg,
                         const struct lease_backend *backend, struct lease_service **svc_p)
{
    if (!cfg || !backend || !svc_p)
        return lease_error_set(-EINVAL, "lease_service_create: expected config, backend and "
                                        "output pointer, found a NULL");
    struct lease_service *svc = calloc(1, sizeof(*svc));
    if (!svc)
        return lease_error_set(-ENOMEM, "lease_service_create: out of memory");
    svc->cfg = *cfg;
    svc->be = *backend;
    int rc = check_config(svc);
    if (rc < 0)
        goto fail_free;
    rc = -pthread_mutex_init(&svc->mu, NULL);
    if (rc < 0) {
        lease__fail(svc, rc, "pthread_mutex_init failed: %s", strerror(-rc));
        goto fail_free;
    }
    lease__table_init(&svc->clients);
    lease__table_init(&svc->segs);
    lease__table_init(&svc->leases);
    lease__table_init(&svc->tickets);
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
    uint64_t leases = svc->leases.live;
    uint64_t pending = svc->st.pending_work;
    for (uint32_t i = 0; i < svc->leases.n; i++)
        free(svc->leases.slots[i].obj);
    for (uint32_t i = 0; i < svc->segs.n; i++) {
        struct lease__segment *s = svc->segs.slots[i].obj;
        if (s)
            seg_destroy(svc, s);
    }
    for (uint32_t i = 0; i < svc->clients.n; i++)
        free(svc->clients.slots[i].obj);
    if (leases || pending)
        lease__log(svc,
                   "service destroyed with %" PRIu64 " leases not release-complete and %" PRIu64
                   " GPU work items pending, treated as done",
                   leases, pending);
    lease__table_fini(&svc->clients);
    lease__table_fini(&svc->segs);
    lease__table_fini(&svc->leases);
    lease__table_fini(&svc->tickets);
    pthread_mutex_unlock(&svc->mu);
    pthread_mutex_destroy(&svc->mu);
    free(svc);
}

/* ---- clients ---------------------------------------------------------- */

int lease_client_add(struct lease_service *svc, const struct lease_client_limits *limits,
                     uint64_t *client_p)
{
    if (!svc || !client_p)
        return lease_error_set(-EINVAL, "lease_client_add: expected service and output pointer");
    struct lease__client *c = calloc(1, sizeof(*c));
    if (!c)
        return lease__fail(svc, -ENOMEM, "lease_client_add: out of memory");
    limits_resolve(&c->lim, limits, &svc->cfg.default_limits);
    pthread_mutex_lock(&svc->mu);
    int rc = lease__table_insert(&svc->clients, c, 0, &c->id);
    pthread_mutex_unlock(&svc->mu);
    if (rc < 0) {
        free(c);
        return lease__fail(svc, rc, "lease_client_add: no client slot left");
    }
    *client_p = c->id;
    return 0;
}

int lease_client_drop(struct lease_service *svc, uint64_t client)
{
    if (!svc)
        return lease_error_set(-EINVAL, "lease_client_drop: expected a service");
    struct events ev;
    events_init(&ev, client, NULL, 0);
    pthread_mutex_lock(&svc->mu);
    struct lease__slot *s = NULL;
    int rc = 0;
    switch (lease__table_lookup(&svc->clients, client, &s)) {
    case LEASE__ID_NEVER:
        rc = lease__fail(svc, -ENOENT, "client id %#" PRIx64 " was never issued", client);
        break;
    case LEASE__ID_STALE:
    case LEASE__ID_FREED:
        rc = lease__fail(svc, -ESTALE, "client id %#" PRIx64 " is stale: already dropped", client);
        break;
    case LEASE__ID_LIVE:
        if (((struct lease__client *)s->obj)->dropping)
            rc = lease__fail(svc, -EALREADY, "client id %#" PRIx64 " is already being dropped",
                             client);
        break;
    }
    if (rc < 0) {
        pthread_mutex_unlock(&svc->mu);
        return rc;
    }
    struct lease__client *c = s->obj;
    c->dropping = true;
    for (uint32_t i = 0; i < svc->leases.n; i++) {
        struct lease__lease *l = svc->leases.slots[i].obj;
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

int lease_segment_add(struct lease_service *svc, uint64_t client, int fd, uint64_t claimed_size,
                      enum lease_class cls, uint64_t *seg_id_p)
{
    if (!svc || !seg_id_p)
        return lease_error_set(-EINVAL, "lease_segment_add: expected service and output pointer");
    if (!class_valid(cls))
        return lease__fail(svc, -EINVAL,
                           "segment class: expected 1 (STAGED), 2 (PINNED) or "
                           "3 (MAPPED), found %d",
                           (int)cls);
    void *base;
    uint64_t page_size = 0;
    int rc = lease__fd_map(fd, claimed_size, &base, &page_size);
    if (rc < 0)
        return lease__fail_logged(svc, rc);
    struct lease__segment *seg = calloc(1, sizeof(*seg));
    if (!seg) {
        rc = lease__fail(svc, -ENOMEM, "lease_segment_add: out of memory");
        goto fail_unmap;
    }
    seg->fd = -1;
    seg->cls = cls;
    seg->base = base;
    seg->size = claimed_size;
    seg->page_size = page_size;
    seg->client = client;
    uint64_t chunk = chunk_of(svc, seg);
    uint64_t nchunks = (claimed_size + chunk - 1) / chunk;
    if (nchunks > UINT32_MAX) {
        rc = lease__fail(svc, -EINVAL, "segment of %" PRIu64 " bytes needs %" PRIu64 " chunks",
                         claimed_size, nchunks);
        goto fail_free;
    }
    seg->nchunks = (uint32_t)nchunks;
    seg->chunk_dev = calloc(nchunks, sizeof(*seg->chunk_dev));
    if (!seg->chunk_dev) {
        rc = lease__fail(svc, -ENOMEM, "lease_segment_add: out of memory");
        goto fail_free;
    }

    pthread_mutex_lock(&svc->mu);
    struct lease__client *c = NULL;
    rc = client_get(svc, client, &c);
    if (rc < 0)
        goto fail_unlock;
    if (c->segments >= c->lim.max_segments) {
        rc = lease__fail(svc, -EDQUOT,
                         "client %#" PRIx64 ": segment limit reached (%" PRIu64 " of %" PRIu64 ")",
                         client, c->segments, c->lim.max_segments);
        goto fail_unlock;
    }
    if (needs_reg(cls)) {
        rc = make_room(svc, cls, claimed_size, NULL);
        if (rc < 0) {
            svc->st.cls[cls].budget_refusals++;
            lease__fail_logged(svc, rc);
            goto fail_unlock;
        }
        svc->acct[cls].reserved += claimed_size;
    }
    /* Registering GiBs takes seconds: do it without the lock, on a segment
     * nobody else can see yet, its bytes reserved against the budget. */
    c->busy++;
    c->segments++;
    pthread_mutex_unlock(&svc->mu);

    uint64_t t0 = now_ns();
    if (needs_reg(cls))
        rc = lease__seg_backend_register(svc, seg, true);
    uint64_t t1 = now_ns();

    struct events ev;
    events_init(&ev, client, NULL, 0);
    pthread_mutex_lock(&svc->mu);
    c->busy--;
    if (needs_reg(cls)) {
        svc->acct[cls].reserved -= claimed_size;
        if (rc == 0) {
            seg->registered = true;
            svc->acct[cls].registered += claimed_size;
            svc->st.cls[cls].bytes_registered += claimed_size;
            svc->st.cls[cls].registrations++;
            svc->st.cls[cls].registration_ns += t1 - t0;
        } else if (rc == -ENOMEM) {
            svc->st.cls[cls].budget_refusals++;
        }
    }
    if (rc < 0) {
        lease__fail_logged(svc, rc);
    } else if (c->dropping) {
        rc = lease__fail(svc, -ESHUTDOWN,
                         "client id %#" PRIx64 " was dropped while its segment was registered",
                         client);
    } else {
        rc = lease__table_insert(&svc->segs, seg, client, &seg->id);
        if (rc < 0)
            lease__fail(svc, rc, "lease_segment_add: no segment slot left");
    }
    if (rc < 0) {
        seg_unregister_locked(svc, seg);
        c->segments--;
        client_maybe_finalize(svc, c, &ev);
        pthread_mutex_unlock(&svc->mu);
        events_fire(svc, &ev);
        goto fail_free;
    }
    seg->fd = fd;
    seg->last_use = ++svc->tick;
    svc->st.cls[cls].segments++;
    if (seg_huge(seg))
        svc->st.cls[cls].huge_segments++;
    uint64_t id = seg->id;
    pthread_mutex_unlock(&svc->mu);
    if (needs_reg(cls))
        lease__log(svc,
                   "segment %#" PRIx64 " of client %#" PRIx64 ": %s, %" PRIu64 " bytes on %" PRIu64
                   "-byte pages, registered in %.1f ms (%.1f GB/s)",
                   id, client, lease_class_name(cls), claimed_size, page_size,
                   (double)(t1 - t0) / 1e6,
                   t1 > t0 ? (double)claimed_size / (double)(t1 - t0) : 0.0);
    *seg_id_p = id;
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

int lease_segment_remove(struct lease_service *svc, uint64_t client, uint64_t seg_id)
{
    if (!svc)
        return lease_error_set(-EINVAL, "lease_segment_remove: expected a service");
    pthread_mutex_lock(&svc->mu);
    struct lease__client *c = NULL;
    struct lease__segment *seg = NULL;
    int rc = client_get(svc, client, &c);
    if (rc == 0)
        rc = seg_get(svc, c, seg_id, &seg);
    if (rc == 0 && seg->leases != 0)
        rc =
            lease__fail(svc, -EBUSY,
                        "segment id %#" PRIx64 " still has %" PRIu64 " leases not release-complete",
                        seg_id, seg->leases);
    if (rc == 0 && seg->holds != 0)
        rc = lease__fail(svc, -EBUSY,
                         "segment id %#" PRIx64 " is held by %" PRIu64
                         " GPU operations (doorbell or done words)",
                         seg_id, seg->holds);
    if (rc == 0) {
        seg_destroy(svc, seg);
        c->segments--;
    }
    pthread_mutex_unlock(&svc->mu);
    return rc;
}

/* ---- leases ----------------------------------------------------------- */

static int grant_one(struct lease_service *svc, struct lease__client *c,
                     const struct lease_grant_req *req, struct lease_grant_result *res)
{
    if (!class_valid(req->cls))
        return lease__fail(svc, -EINVAL,
                           "lease class: expected 1 (STAGED), 2 (PINNED) or "
                           "3 (MAPPED), found %" PRIu32,
                           req->cls);
    if (req->flags & ~LEASE_GRANT_ALLOW_STAGED)
        return lease__fail(svc, -EINVAL, "lease flags: unknown bits %#" PRIx32,
                           req->flags & ~LEASE_GRANT_ALLOW_STAGED);
    struct lease__segment *seg = NULL;
    int rc = seg_get(svc, c, req->seg_id, &seg);
    if (rc < 0)
        return rc;
    if (req->length == 0 || req->offset > seg->size || req->length > seg->size - req->offset)
        return lease__fail(svc, -ERANGE,
                           "lease range: expected 0 < length and offset + length <= %" PRIu64
                           " (segment size), found offset %" PRIu64 " length %" PRIu64,
                           seg->size, req->offset, req->length);
    enum lease_class cls = (enum lease_class)req->cls;
    if (cls > seg->cls)
        return lease__fail(
            svc, -EINVAL, "a %s lease needs a segment of class %s or above, found %s",
            lease_class_name(cls), lease_class_name(cls), lease_class_name(seg->cls));
    if (c->leases >= c->lim.max_leases)
        return lease__fail(svc, -EDQUOT,
                           "client %#" PRIx64 ": lease limit reached (%" PRIu64 " of %" PRIu64 ")",
                           c->id, c->leases, c->lim.max_leases);
    if (req->length > c->lim.max_bytes - c->bytes)
        return lease__fail(svc, -EDQUOT,
                           "client %#" PRIx64 ": byte limit %" PRIu64 " exceeded: %" PRIu64
                           " leased, %" PRIu64 " requested",
                           c->id, c->lim.max_bytes, c->bytes, req->length);
    uint64_t chunk = chunk_of(svc, seg);
    uint64_t first = req->offset / chunk;
    if (needs_reg(cls) && first != (req->offset + req->length - 1) / chunk)
        return lease__fail(svc, -EINVAL,
                           "a %s lease may not span a registration chunk boundary: offset %" PRIu64
                           " length %" PRIu64 " crosses %" PRIu64 " (chunk size %" PRIu64 ")",
                           lease_class_name(cls), req->offset, req->length, (first + 1) * chunk,
                           chunk);
    uint32_t fell_back = 0;
    if (needs_reg(cls) && !seg->registered) {
        rc = seg_register_locked(svc, seg);
        if (rc == -ENOSPC || rc == -ENOMEM) {
            /* Counted against the class whose budget ran out: the segment's. */
            if (!(req->flags & LEASE_GRANT_ALLOW_STAGED)) {
                svc->st.cls[seg->cls].budget_refusals++;
                return lease__fail_logged(svc, rc);
            }
            lease__log(svc, "%s lease served as STAGED: %s", lease_class_name(cls),
                       lease_error_last());
            svc->st.cls[seg->cls].fallbacks++;
            cls = LEASE_CLASS_STAGED;
            fell_back = 1;
        } else if (rc < 0) {
            return lease__fail_logged(svc, rc);
        }
    }
    struct lease__lease *l = calloc(1, sizeof(*l));
    if (!l)
        return lease__fail(svc, -ENOMEM, "lease grant: out of memory");
    rc = lease__table_insert(&svc->leases, l, c->id, &l->id);
    if (rc < 0) {
        free(l);
        return lease__fail(svc, rc, "lease grant: no lease slot left");
    }
    l->client = c->id;
    l->seg = seg;
    l->offset = req->offset;
    l->length = req->length;
    l->cls = cls;
    if (cls == LEASE_CLASS_MAPPED)
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
    res->lease_id = l->id;
    res->host_addr = (char *)seg->base + l->offset;
    res->dev_ptr = l->dev_ptr;
    return 0;
}

int lease_grant(struct lease_service *svc, uint64_t client, size_t n,
                const struct lease_grant_req *reqs, struct lease_grant_result *results_p)
{
    if (!svc || (n && (!reqs || !results_p)))
        return lease_error_set(-EINVAL, "lease_grant: expected service, requests and results");
    pthread_mutex_lock(&svc->mu);
    struct lease__client *c = NULL;
    int rc = client_get(svc, client, &c);
    if (rc < 0) {
        pthread_mutex_unlock(&svc->mu);
        return rc;
    }
    int granted = 0;
    for (size_t i = 0; i < n; i++) {
        struct lease_grant_result res = {0};
        res.rc = grant_one(svc, c, &reqs[i], &res);
        if (res.rc == 0)
            granted++;
        results_p[i] = res;
    }
    pthread_mutex_unlock(&svc->mu);
    return granted;
}

int lease_release(struct lease_service *svc, uint64_t client, size_t n, const uint64_t *lease_ids,
                  int *rcs_p)
{
    if (!svc || (n && (!lease_ids || !rcs_p)))
        return lease_error_set(-EINVAL, "lease_release: expected service, ids and results");
    uint64_t *done = NULL;
    if (n > 1) {
        done = calloc(n, sizeof(*done));
        if (!done)
            return lease__fail(svc, -ENOMEM, "lease_release: out of memory for %zu ids", n);
    }
    struct events ev;
    events_init(&ev, client, done, n);
    pthread_mutex_lock(&svc->mu);
    struct lease__client *c = NULL;
    int rc = client_get(svc, client, &c);
    if (rc < 0) {
        pthread_mutex_unlock(&svc->mu);
        free(done);
        return rc;
    }
    int released = 0;
    for (size_t i = 0; i < n; i++) {
        struct lease__lease *l = NULL;
        rcs_p[i] = lease_get(svc, c, lease_ids[i], &l);
        if (rcs_p[i] < 0)
            continue;
        l->released = true;
        svc->st.draining_leases++;
        released++;
        if (l->pending == 0)
            lease_complete(svc, l, &ev);
    }
    pthread_mutex_unlock(&svc->mu);
    events_fire(svc, &ev);
    free(done);
    return released;
}

int lease_work_pin(struct lease_service *svc, uint64_t client, uint64_t lease_id,
                   uint64_t *ticket_p)
{
    if (!svc || !ticket_p)
        return lease_error_set(-EINVAL, "lease_work_pin: expected service and output pointer");
    pthread_mutex_lock(&svc->mu);
    struct lease__client *c = NULL;
    struct lease__lease *l = NULL;
    uint64_t ticket = 0;
    int rc = client_get(svc, client, &c);
    if (rc == 0)
        rc = lease_get(svc, c, lease_id, &l);
    if (rc == 0) {
        rc = lease__table_insert(&svc->tickets, l, lease_id, &ticket);
        if (rc < 0)
            lease__fail(svc, rc, "lease_work_pin: no ticket slot left");
    }
    if (rc == 0) {
        l->pending++;
        svc->st.pending_work++;
    }
    pthread_mutex_unlock(&svc->mu);
    if (rc == 0)
        *ticket_p = ticket;
    return rc;
}

int lease_work_done(struct lease_service *svc, uint64_t ticket)
{
    if (!svc)
        return lease_error_set(-EINVAL, "lease_work_done: expected a service");
    struct events ev;
    int rc = 0;
    pthread_mutex_lock(&svc->mu);
    struct lease__slot *s = NULL;
    switch (lease__table_lookup(&svc->tickets, ticket, &s)) {
    case LEASE__ID_NEVER:
        rc = lease__fail(svc, -ENOENT, "work ticket %#" PRIx64 " was never issued", ticket);
        break;
    case LEASE__ID_STALE:
        rc = lease__fail(svc, -ESTALE, "work ticket %#" PRIx64 " is stale", ticket);
        break;
    case LEASE__ID_FREED:
        rc = lease__fail(svc, -EALREADY, "work ticket %#" PRIx64 " is already done", ticket);
        break;
    case LEASE__ID_LIVE:
        break;
    }
    if (rc < 0) {
        pthread_mutex_unlock(&svc->mu);
        return rc;
    }
    struct lease__lease *l = s->obj;
    lease__table_remove(&svc->tickets, ticket);
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

int lease_query(struct lease_service *svc, uint64_t client, uint64_t lease_id,
                struct lease_info *info_p)
{
    if (!svc || !info_p)
        return lease_error_set(-EINVAL, "lease_query: expected service and output pointer");
    pthread_mutex_lock(&svc->mu);
    struct lease__client *c = NULL;
    struct lease__slot *s = NULL;
    int rc = client_get(svc, client, &c);
    if (rc == 0) {
        enum lease__lookup k = lease__table_lookup(&svc->leases, lease_id, &s);
        if (k == LEASE__ID_LIVE && s->owner == c->id) {
            const struct lease__lease *l = s->obj;
            *info_p = (struct lease_info){
                .seg_id = l->seg->id,
                .offset = l->offset,
                .length = l->length,
                .cls = l->cls,
                .released = l->released,
                .pending_work = l->pending,
                .host_addr = (char *)l->seg->base + l->offset,
                .dev_ptr = l->dev_ptr,
            };
        } else {
            struct lease__lease *unused = NULL;
            rc = lease_get(svc, c, lease_id, &unused);
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
    };
    if (seg->cls == LEASE_CLASS_MAPPED && seg->registered)
        info->dev_ptr = seg->chunk_dev[first] + (offset - first * chunk);
}

/* Locked. Resolves @seg_id of @client and checks [@offset, @offset + @length)
 * against it: inside, nonempty, and within one registration chunk. */
static int seg_range_get(struct lease_service *svc, uint64_t client, uint64_t seg_id,
                         uint64_t offset, uint64_t length, struct lease__client **c_p,
                         struct lease__segment **seg_p)
{
    struct lease__client *c = NULL;
    struct lease__segment *seg = NULL;
    int rc = client_get(svc, client, &c);
    if (rc == 0)
        rc = seg_get(svc, c, seg_id, &seg);
    if (rc < 0)
        return rc;
    if (length == 0 || offset >= seg->size || length > seg->size - offset)
        return lease__fail(svc, -ERANGE,
                           "segment range: expected 0 < length and offset + length <= %" PRIu64
                           " (segment size), found offset %" PRIu64 " length %" PRIu64,
                           seg->size, offset, length);
    uint64_t chunk = chunk_of(svc, seg);
    if (offset / chunk != (offset + length - 1) / chunk)
        return lease__fail(svc, -EINVAL,
                           "segment range at %" PRIu64 " of %" PRIu64
                           " bytes spans a registration chunk boundary (chunk size %" PRIu64 ")",
                           offset, length, chunk);
    *c_p = c;
    *seg_p = seg;
    return 0;
}

int lease_segment_query(struct lease_service *svc, uint64_t client, uint64_t seg_id,
                        uint64_t offset, struct lease_segment_info *info_p)
{
    if (!svc || !info_p)
        return lease_error_set(-EINVAL, "lease_segment_query: expected service and output pointer");
    pthread_mutex_lock(&svc->mu);
    struct lease__client *c = NULL;
    struct lease__segment *seg = NULL;
    int rc = seg_range_get(svc, client, seg_id, offset, 1, &c, &seg);
    if (rc == 0)
        seg_info_fill(svc, seg, offset, info_p);
    pthread_mutex_unlock(&svc->mu);
    return rc;
}

int lease_segment_hold(struct lease_service *svc, uint64_t client, uint64_t seg_id, uint64_t offset,
                       uint64_t length, struct lease_segment_info *info_p)
{
    if (!svc || !info_p)
        return lease_error_set(-EINVAL, "lease_segment_hold: expected service and output pointer");
    pthread_mutex_lock(&svc->mu);
    struct lease__client *c = NULL;
    struct lease__segment *seg = NULL;
    int rc = seg_range_get(svc, client, seg_id, offset, length, &c, &seg);
    if (rc == 0 && needs_reg(seg->cls) && !seg->registered) {
        /* Evicted while idle: the GPU needs the registration back first. */
        rc = seg_register_locked(svc, seg);
        if (rc == -ENOSPC || rc == -ENOMEM)
            svc->st.cls[seg->cls].budget_refusals++;
        if (rc < 0)
            lease__fail_logged(svc, rc);
    }
    if (rc == 0) {
        seg->holds++;
        c->holds++;
        seg->last_use = ++svc->tick;
        seg_info_fill(svc, seg, offset, info_p);
    }
    pthread_mutex_unlock(&svc->mu);
    return rc;
}

int lease_segment_unhold(struct lease_service *svc, uint64_t seg_id)
{
    if (!svc)
        return lease_error_set(-EINVAL, "lease_segment_unhold: expected a service");
    struct events ev;
    events_init(&ev, 0, NULL, 0);
    pthread_mutex_lock(&svc->mu);
    struct lease__slot *s = NULL;
    int rc = 0;
    switch (lease__table_lookup(&svc->segs, seg_id, &s)) {
    case LEASE__ID_NEVER:
        rc = lease__fail(svc, -ENOENT, "segment id %#" PRIx64 " was never issued", seg_id);
        break;
    case LEASE__ID_STALE:
    case LEASE__ID_FREED:
        rc =
            lease__fail(svc, -ESTALE, "segment id %#" PRIx64 " is stale: it holds no hold", seg_id);
        break;
    case LEASE__ID_LIVE:
        break;
    }
    struct lease__segment *seg = rc == 0 ? s->obj : NULL;
    if (rc == 0 && seg->holds == 0)
        rc = lease__fail(svc, -EALREADY, "segment id %#" PRIx64 " has no hold to undo", seg_id);
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
