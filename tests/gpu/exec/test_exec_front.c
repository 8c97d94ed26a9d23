/* The executor front (gpu/exec/front.c) over a fake backend, on the CPU:
 * managed ids (issue at generation 1, refusals that tell never issued,
 * malformed, stale and foreign apart, the table's limit with its numbers,
 * FIFO and LIFO reuse, a retired id held by a running op until it returns,
 * a seeded random run against a model), a client drop (ids retired at once,
 * queued work cancelled, the owner's objects left to the backend), a failed
 * first record giving its id back, a fault, record_allocation against the
 * lease service, and bad configurations. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/rand.h"
#include "exec_test_util.h"
#include "gpu/exec_backend.h"
#include "lease_types/validate.h"

/* ---- a fake backend: answers at once, except work and stream syncs ---- */

struct fb_obj {
    int kind; /* 1 owner, 2 stream, 3 event */
    struct fb_obj *owner;
    int closed, dropped;
    struct fb_obj *all_next; /* every object made, freed by the teardown */
};

#define FB_MAX 256

static struct {
    pthread_mutex_t mu;
    struct ga_exec_job *jobs[FB_MAX];
    struct fb_obj *job_owner[FB_MAX];
    int njobs;
    struct ga_exec_call *syncs[FB_MAX];
    struct fb_obj *sync_owner[FB_MAX];
    int nsyncs;
    int stream_closes, event_closes, owner_drops, opened;
    uint32_t record_status; /* nonzero: the next record is answered with it */
    void (*enqueue_hook)(void);
    struct fb_obj *all;
} FB = {.mu = PTHREAD_MUTEX_INITIALIZER};

static struct ga_executor *ex;

static struct fb_obj *fb_new(int kind, struct fb_obj *owner)
{
    struct fb_obj *o = calloc(1, sizeof(*o));
    ck_assert_ptr_nonnull(o);
    o->kind = kind;
    o->owner = owner;
    __atomic_add_fetch(&FB.opened, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&FB.mu);
    o->all_next = FB.all;
    FB.all = o;
    pthread_mutex_unlock(&FB.mu);
    return o;
}

static int fb_work_check(void *be, const struct ga_exec_work *w, struct lt_failure *why)
{
    (void)be;
    if (w->op > LT_OP_COPY_H2D)
        return lt_failure_set(why, LT_E_BAD_OP, 0, "fake: op %u", (unsigned)w->op);
    return 0;
}

static int fb_owner_open(void *be, uint64_t owner, void **bo_p)
{
    (void)be;
    (void)owner;
    *bo_p = fb_new(1, NULL);
    return 0;
}

/* The owner's queued work and syncs are answered as cancelled. */
static void fb_owner_drop(void *be, void *bo)
{
    (void)be;
    struct ga_exec_job *jobs[FB_MAX];
    struct ga_exec_call *syncs[FB_MAX];
    int nj = 0, ns = 0;
    pthread_mutex_lock(&FB.mu);
    for (int i = 0; i < FB.njobs;) {
        if (FB.job_owner[i] == bo) {
            jobs[nj++] = FB.jobs[i];
            FB.jobs[i] = FB.jobs[--FB.njobs];
            FB.job_owner[i] = FB.job_owner[FB.njobs];
        } else {
            i++;
        }
    }
    for (int i = 0; i < FB.nsyncs;) {
        if (FB.sync_owner[i] == bo) {
            syncs[ns++] = FB.syncs[i];
            FB.syncs[i] = FB.syncs[--FB.nsyncs];
            FB.sync_owner[i] = FB.sync_owner[FB.nsyncs];
        } else {
            i++;
        }
    }
    FB.owner_drops++;
    pthread_mutex_unlock(&FB.mu);
    for (int i = 0; i < nj; i++) {
        struct ga_exec_result r = {.status = LT_E_SHUTTING_DOWN};
        ga_exec_job_done(jobs[i], &r);
    }
    for (int i = 0; i < ns; i++) {
        struct ga_exec_answer a = {.status = LT_E_SHUTTING_DOWN};
        ga_exec_call_done(syncs[i], &a);
    }
    ((struct fb_obj *)bo)->dropped = 1; /* its streams and events go with it (freed at teardown) */
}

static int fb_stream_open(void *be, void *bo, uint32_t flags, void **bs_p)
{
    (void)be;
    (void)flags;
    *bs_p = fb_new(2, bo);
    return 0;
}

static void fb_stream_close(void *be, void *bs)
{
    (void)be;
    ck_assert(!((struct fb_obj *)bs)->closed);
    ((struct fb_obj *)bs)->closed = 1;
    __atomic_add_fetch(&FB.stream_closes, 1, __ATOMIC_RELAXED);
}

static int fb_event_open(void *be, void *bo, uint32_t flags, void **bev_p)
{
    (void)be;
    (void)flags;
    *bev_p = fb_new(3, bo);
    return 0;
}

static void fb_event_close(void *be, void *bev)
{
    (void)be;
    ck_assert(!((struct fb_obj *)bev)->closed);
    ((struct fb_obj *)bev)->closed = 1;
    __atomic_add_fetch(&FB.event_closes, 1, __ATOMIC_RELAXED);
}

static int fb_work_enqueue(void *be, void *bs, struct ga_exec_job *job, struct lt_failure *why)
{
    (void)be;
    (void)why;
    if (FB.enqueue_hook)
        FB.enqueue_hook();
    pthread_mutex_lock(&FB.mu);
    ck_assert_int_lt(FB.njobs, FB_MAX);
    FB.job_owner[FB.njobs] = ((struct fb_obj *)bs)->owner;
    FB.jobs[FB.njobs++] = job;
    pthread_mutex_unlock(&FB.mu);
    return 0;
}

static int fb_answer_ok(struct ga_exec_call *call)
{
    ga_exec_call_ok(call);
    return 0;
}

static int fb_stream_query(void *be, void *bs, struct ga_exec_call *call, struct lt_failure *why)
{
    (void)be;
    (void)why;
    struct ga_exec_answer a = {.status = LT_OK, .ready = 1};
    pthread_mutex_lock(&FB.mu);
    for (int i = 0; i < FB.njobs; i++)
        a.ready &= FB.job_owner[i] != ((struct fb_obj *)bs)->owner;
    pthread_mutex_unlock(&FB.mu);
    ga_exec_call_done(call, &a);
    return 0;
}

static int fb_stream_sync(void *be, void *bs, struct ga_exec_call *call, struct lt_failure *why)
{
    (void)be;
    (void)why;
    pthread_mutex_lock(&FB.mu);
    FB.sync_owner[FB.nsyncs] = ((struct fb_obj *)bs)->owner;
    FB.syncs[FB.nsyncs++] = call;
    pthread_mutex_unlock(&FB.mu);
    return 0;
}

static int fb_event_record(void *be, void *bs, void *bev, struct ga_exec_call *call,
                           struct lt_failure *why)
{
    (void)be;
    (void)bs;
    (void)bev;
    (void)why;
    uint32_t st = FB.record_status;
    FB.record_status = 0;
    struct ga_exec_answer a = {.status = st ? st : LT_OK, .message = st ? "fake: refused" : NULL};
    ga_exec_call_done(call, &a);
    return 0;
}

static int fb_event_wait(void *be, void *bs, void *bev, struct ga_exec_call *call,
                         struct lt_failure *why)
{
    (void)be;
    (void)bs;
    (void)bev;
    (void)why;
    return fb_answer_ok(call);
}

static int fb_event_one(void *be, void *bev, struct ga_exec_call *call, struct lt_failure *why)
{
    (void)be;
    (void)bev;
    (void)why;
    struct ga_exec_answer a = {.status = LT_OK, .ready = 1};
    ga_exec_call_done(call, &a);
    return 0;
}

static int fb_event_elapsed(void *be, void *a, void *b, struct ga_exec_call *call,
                            struct lt_failure *why)
{
    (void)be;
    (void)a;
    (void)b;
    (void)why;
    struct ga_exec_answer ans = {.status = LT_OK, .elapsed_ms = 1.5f};
    ga_exec_call_done(call, &ans);
    return 0;
}

static int fb_device_sync(void *be, void *bo, struct ga_exec_call *call, struct lt_failure *why)
{
    (void)be;
    (void)bo;
    (void)why;
    return fb_answer_ok(call);
}

static int fb_stats(void *be, char *buf, size_t len)
{
    (void)be;
    return snprintf(buf, len, "fake backend: jobs=%d\n", FB.njobs);
}

static void fb_shutdown(void *be)
{
    (void)be;
}

static void fb_destroy(void *be)
{
    (void)be;
}

static const struct ga_exec_backend_ops fb_ops = {
    .work_check = fb_work_check,
    .owner_open = fb_owner_open,
    .owner_drop = fb_owner_drop,
    .stream_open = fb_stream_open,
    .stream_close = fb_stream_close,
    .event_open = fb_event_open,
    .event_close = fb_event_close,
    .work_enqueue = fb_work_enqueue,
    .stream_query = fb_stream_query,
    .stream_sync = fb_stream_sync,
    .event_record = fb_event_record,
    .event_wait = fb_event_wait,
    .event_query = fb_event_one,
    .event_sync = fb_event_one,
    .event_elapsed = fb_event_elapsed,
    .device_sync = fb_device_sync,
    .stats_format = fb_stats,
    .shutdown = fb_shutdown,
    .destroy = fb_destroy,
};

/* Completes every queued job with @status, in order. */
static void fb_jobs_finish(uint32_t status)
{
    pthread_mutex_lock(&FB.mu);
    int n = FB.njobs;
    struct ga_exec_job *jobs[FB_MAX];
    memcpy(jobs, FB.jobs, sizeof(jobs[0]) * (size_t)n);
    FB.njobs = 0;
    pthread_mutex_unlock(&FB.mu);
    for (int i = 0; i < n; i++) {
        struct ga_exec_result r = {.status = status};
        ga_exec_job_done(jobs[i], &r);
    }
}

/* Answers every stream sync waiting (the work before it "ran"). */
static void fb_syncs_finish(void)
{
    pthread_mutex_lock(&FB.mu);
    int n = FB.nsyncs;
    struct ga_exec_call *calls[FB_MAX];
    memcpy(calls, FB.syncs, sizeof(calls[0]) * (size_t)n);
    FB.nsyncs = 0;
    pthread_mutex_unlock(&FB.mu);
    for (int i = 0; i < n; i++)
        ga_exec_call_ok(calls[i]);
}

/* ---- fixtures -------------------------------------------------------------- */

static void front_make(uint32_t table_streams, uint32_t table_events, enum base_idtab_reuse reuse,
                       uint32_t max_streams)
{
    pthread_mutex_lock(&FB.mu);
    FB.njobs = FB.nsyncs = 0;
    FB.stream_closes = FB.event_closes = FB.owner_drops = 0;
    FB.record_status = 0;
    FB.enqueue_hook = NULL;
    pthread_mutex_unlock(&FB.mu);
    struct ga_exec_config cfg = {
        .limits = {.max_streams = max_streams, .max_events = 4096},
        .table_streams = table_streams,
        .table_events = table_events,
        .reuse = reuse,
    };
    struct ga_exec_backend be = {.name = "fake", .caps = LT_CAP_DOORBELL, .ops = &fb_ops};
    ck_assert_int_eq(ga_executor_create(&cfg, &be, &ex), 0);
    for (uint64_t o = 1; o <= 4; o++)
        ck_assert_int_eq(ga_exec_client_add(ex, o), 0);
}

static void teardown(void)
{
    fb_jobs_finish(LT_OK);
    fb_syncs_finish();
    ga_executor_destroy(ex);
    ex = NULL;
    /* Closed and dropped objects stay readable until here, for the asserts. */
    for (struct fb_obj *o = FB.all, *next; o; o = next) {
        next = o->all_next;
        free(o);
    }
    FB.all = NULL;
}

static unsigned char bytes[4096];

static void on_work(void *arg, const struct ga_exec_result *res)
{
    uint32_t *status = arg;
    if (status)
        __atomic_store_n(status, res->status, __ATOMIC_RELEASE);
}

static struct ga_exec_work work_of(uint64_t owner, struct lt_stream_id stream, uint32_t *status)
{
    struct ga_exec_work w = {.owner = owner,
                             .stream = stream,
                             .op = LT_OP_COPY_H2D,
                             .host = bytes,
                             .length = sizeof bytes,
                             .done_cb = on_work,
                             .arg = status};
    w.args.copy = (struct lt_op_copy_h2d){.offset = 0, .length = 64};
    return w;
}

/* ---- ids ---------------------------------------------------------------------- */

START_TEST(issued_ids_start_at_generation_one_and_look_up_for_their_owner)
{
    front_make(8, 16, BASE_IDTAB_REUSE_FIFO, 64);
    struct lt_stream_id ids[8];
    for (int i = 0; i < 8; i++) {
        ck_assert_int_eq(et_stream_create(ex, 1 + (uint64_t)i % 4, 0, &ids[i]), 0);
        ck_assert_uint_ge(ids[i].slot, 1);
        ck_assert_uint_le(ids[i].slot, 8);
        ck_assert_uint_eq(ids[i].gen, 1);
        for (int j = 0; j < i; j++)
            ck_assert_uint_ne(ids[i].slot, ids[j].slot);
    }
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(et_stream_validate(ex, 1 + (uint64_t)i % 4, ids[i]), 0);
    struct ga_exec_client_stats st;
    ck_assert_int_eq(ga_exec_client_stats(ex, 1, &st), 0);
    ck_assert_uint_eq(st.streams, 2);
    teardown();
}
END_TEST

START_TEST(table_full_is_refused_with_both_numbers)
{
    front_make(4, 3, BASE_IDTAB_REUSE_FIFO, 64);
    struct lt_stream_id ids[5];
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(et_stream_create(ex, 1, 0, &ids[i]), 0);
    ids[4] = lt_stream_id_make(77, 77);
    ck_assert_int_eq(et_stream_create(ex, 2, 0, &ids[4]), -EMFILE);
    ck_assert_uint_eq(et_why.code, LT_E_LIMIT);
    ck_assert(lt_stream_id_eq(ids[4], lt_stream_id_make(77, 77))); /* untouched */
    ck_assert_msg(strstr(et_why.message, "stream table is full: 4 of 4 in use"), "%s",
                  et_why.message);
    /* One retired slot makes room again: the only free one, one generation on. */
    ck_assert_int_eq(et_stream_destroy(ex, 1, ids[3]), 0);
    ck_assert_int_eq(et_stream_create(ex, 2, 0, &ids[4]), 0);
    ck_assert_uint_eq(ids[4].slot, ids[3].slot);
    ck_assert_uint_eq(ids[4].gen, ids[3].gen + 1);
    struct lt_event_id ev[4], none = lt_event_id_make(0, 0);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(et_event_record(ex, 1, ids[0], none, 0, &ev[i]), 0);
    ck_assert_int_eq(et_event_record(ex, 1, ids[0], none, 0, &ev[3]), -EMFILE);
    ck_assert_msg(strstr(et_why.message, "event table is full: 3 of 3 in use"), "%s",
                  et_why.message);
    teardown();
}
END_TEST

START_TEST(per_owner_limits_are_refused_with_the_numbers)
{
    front_make(0, 0, BASE_IDTAB_REUSE_LIFO, 2);
    struct lt_stream_id a, b;
    ck_assert_int_eq(et_stream_create(ex, 1, 0, &a), 0);
    ck_assert_int_eq(et_stream_create(ex, 1, 0, &b), 0);
    ck_assert_int_eq(et_stream_create(ex, 1, 0, &b), -EMFILE);
    ck_assert_msg(strstr(et_why.message, "stream limit reached (2 of 2)"), "%s", et_why.message);
    ck_assert_int_eq(et_stream_create(ex, 2, 0, &b), 0); /* another owner's own limit */
    ck_assert_int_eq(et_stream_create(ex, 1, 0x80, &b), -EINVAL);
    ck_assert_uint_eq(et_why.code, LT_E_UNKNOWN_FLAGS);
    teardown();
}
END_TEST

START_TEST(malformed_unknown_stale_and_foreign_ids_are_refused_distinctly)
{
    front_make(16, 16, BASE_IDTAB_REUSE_FIFO, 64);
    struct lt_stream_id d = lt_stream_id_default();
    struct lt_event_id e;
    ck_assert_int_eq(et_event_record(ex, 1, d, lt_event_id_make(0, 0), 0, &e), 0);
    ck_assert_int_eq(et_event_query(ex, 1, lt_event_id_make(e.slot, 0)), -EINVAL);
    ck_assert_uint_eq(et_why.code, LT_E_BAD_ID);
    ck_assert_int_eq(et_event_query(ex, 1, lt_event_id_make(0, 1)), -EINVAL);
    ck_assert_int_eq(et_event_query(ex, 1, lt_event_id_make(17, 1)), -ENOENT);
    ck_assert_int_eq(et_event_query(ex, 1, lt_event_id_make(UINT32_MAX, 1)), -ENOENT);
    uint32_t other = e.slot == 16 ? 15 : 16; /* FIFO: the first issue took slot 1 */
    ck_assert_int_eq(et_event_query(ex, 1, lt_event_id_make(other, 1)), -ENOENT);
    ck_assert_msg(strstr(et_why.message, "never issued"), "%s", et_why.message);
    ck_assert_int_eq(et_event_query(ex, 2, e), -EPERM);
    ck_assert_uint_eq(et_why.code, LT_E_NOT_OWNER);
    ck_assert_msg(strstr(et_why.message, "belongs to another client"), "%s", et_why.message);
    /* A generation the slot never had is never issued (as the wire says). */
    ck_assert_int_eq(et_event_query(ex, 1, lt_event_id_make(e.slot, e.gen + 1)), -ENOENT);
    ck_assert_int_eq(et_event_destroy(ex, 1, e), 0);
    ck_assert_int_eq(et_event_query(ex, 1, e), -ESTALE);
    ck_assert_uint_eq(et_why.code, LT_E_STALE_ID);
    ck_assert_msg(strstr(et_why.message, "is stale"), "%s", et_why.message);
    ck_assert_int_eq(et_event_query(ex, 2, e), -EPERM); /* retired, still another's */
    teardown();
}
END_TEST

/* From inside the op: the id the op holds is destroyed. */
static struct lt_stream_id hook_stream;
static int hook_destroy_rc, hook_closes, hook_create_rc;
static char hook_words[LT_FAILURE_MSG_LEN];

static void destroy_while_held(void)
{
    hook_destroy_rc = et_stream_destroy(ex, 1, hook_stream);
    hook_closes = __atomic_load_n(&FB.stream_closes, __ATOMIC_RELAXED);
    struct lt_stream_id x;
    hook_create_rc = et_stream_create(ex, 1, 0, &x);
    snprintf(hook_words, sizeof hook_words, "%s", et_why.message);
}

START_TEST(held_id_keeps_its_stream_until_the_op_returns)
{
    front_make(2, 4, BASE_IDTAB_REUSE_FIFO, 64);
    struct lt_stream_id a, b;
    ck_assert_int_eq(et_stream_create(ex, 1, 0, &a), 0);
    ck_assert_int_eq(et_stream_create(ex, 1, 0, &b), 0);
    hook_stream = a;
    FB.enqueue_hook = destroy_while_held;
    struct ga_exec_work w = work_of(1, a, NULL);
    struct lt_failure why;
    ck_assert_int_eq(ga_exec_submit(ex, &w, &why), 0);
    FB.enqueue_hook = NULL;
    ck_assert_int_eq(hook_destroy_rc, 0); /* retired at once ... */
    ck_assert_int_eq(hook_closes, 0);     /* ... closed only once the op returned */
    ck_assert_int_eq(FB.stream_closes, 1);
    ck_assert_int_eq(hook_create_rc, -EMFILE); /* the held slot was still in use */
    ck_assert_msg(strstr(hook_words, "2 of 2 in use"), "%s", hook_words);
    ck_assert_int_eq(et_stream_validate(ex, 1, a), -ESTALE);
    struct lt_stream_id c;
    ck_assert_int_eq(et_stream_create(ex, 1, 0, &c), 0);
    ck_assert_uint_eq(c.slot, a.slot);
    ck_assert_uint_eq(c.gen, a.gen + 1);
    teardown();
}
END_TEST

START_TEST(freed_slots_are_reissued_in_fifo_order)
{
    front_make(5, 4, BASE_IDTAB_REUSE_FIFO, 64);
    struct lt_stream_id id[5], s;
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(et_stream_create(ex, 1, 0, &id[i]), 0);
    ck_assert_int_eq(et_stream_destroy(ex, 1, id[3]), 0);
    ck_assert_int_eq(et_stream_destroy(ex, 1, id[1]), 0);
    ck_assert_int_eq(et_stream_destroy(ex, 1, id[4]), 0);
    ck_assert_int_eq(et_stream_create(ex, 1, 0, &s), 0);
    ck_assert_uint_eq(s.slot, id[3].slot);
    ck_assert_int_eq(et_stream_create(ex, 1, 0, &s), 0);
    ck_assert_uint_eq(s.slot, id[1].slot);
    ck_assert_int_eq(et_stream_create(ex, 1, 0, &s), 0);
    ck_assert_uint_eq(s.slot, id[4].slot);
    teardown();
}
END_TEST

START_TEST(lifo_reissues_the_slot_freed_last_with_its_generation_moved_on)
{
    front_make(0, 0, BASE_IDTAB_REUSE_LIFO, 64);
    struct lt_stream_id a, b;
    ck_assert_int_eq(et_stream_create(ex, 1, 0, &a), 0);
    for (uint32_t i = 0; i < 100; i++) {
        ck_assert_int_eq(et_stream_destroy(ex, 1, a), 0);
        ck_assert_int_eq(et_stream_create(ex, 1, 0, &b), 0);
        ck_assert_uint_eq(b.slot, a.slot);
        ck_assert_uint_eq(b.gen, a.gen + 1);
        a = b;
    }
    teardown();
}
END_TEST

/* The model: per slot, the generation issued last, its owner, and whether
 * it is live. */
struct model_slot {
    uint32_t gen;
    uint64_t owner;
    int live;
};

START_TEST(random_operations_agree_with_a_model)
{
    enum { CAP = 37, IDS = 4000, STEPS = 100000 };
    front_make(CAP, 4, BASE_IDTAB_REUSE_FIFO, 1000);
    struct model_slot slots[CAP + 1] = {{0}};
    struct lt_stream_id *ids = calloc(IDS, sizeof(*ids));
    uint64_t *owners = calloc(IDS, sizeof(*owners));
    ck_assert(ids && owners);
    size_t n = 0;
    uint32_t live = 0;
    uint64_t rng = 0x1d7ab5eedULL;
    for (int step = 0; step < STEPS; step++) {
        uint64_t r = base_splitmix64(&rng);
        int op = (int)(r % 3);
        if (op == 0 && n < IDS) { /* issue */
            uint64_t owner = 1 + (r >> 8) % 4;
            struct lt_stream_id s;
            int rc = et_stream_create(ex, owner, 0, &s);
            if (live == CAP) {
                ck_assert_int_eq(rc, -EMFILE);
            } else {
                ck_assert_int_eq(rc, 0);
                ck_assert_uint_le(s.slot, CAP);
                ck_assert(!slots[s.slot].live);
                slots[s.slot] = (struct model_slot){s.gen, owner, 1};
                ids[n] = s;
                owners[n++] = owner;
                live++;
            }
        } else if (op == 1 && n) { /* look up any id ever issued, as any owner */
            size_t k = (r >> 8) % n;
            uint64_t as = 1 + (r >> 40) % 4;
            const struct model_slot *m = &slots[ids[k].slot];
            int want = m->gen != ids[k].gen ? -ESTALE
                       : as != owners[k]    ? -EPERM
                       : m->live            ? 0
                                            : -ESTALE;
            ck_assert_int_eq(et_stream_validate(ex, as, ids[k]), want);
        } else if (op == 2 && n) { /* retire a live id */
            size_t k = (r >> 8) % n;
            struct model_slot *m = &slots[ids[k].slot];
            if (m->live && m->gen == ids[k].gen) {
                ck_assert_int_eq(et_stream_destroy(ex, owners[k], ids[k]), 0);
                m->live = 0;
                live--;
            }
        }
    }
    ck_assert_uint_gt(n, 1000); /* the run did exercise reuse */
    free(ids);
    free(owners);
    teardown();
}
END_TEST

/* ---- work and drops ------------------------------------------------------------ */

START_TEST(work_on_another_clients_or_a_stale_stream_is_refused)
{
    front_make(16, 16, BASE_IDTAB_REUSE_FIFO, 64);
    struct lt_stream_id a;
    ck_assert_int_eq(et_stream_create(ex, 1, 0, &a), 0);
    uint64_t bell = 0;
    struct ga_exec_work w = work_of(2, a, NULL);
    w.bell = (struct ga_exec_word){.host = &bell, .seq = 1};
    struct lt_failure why;
    ck_assert_int_eq(ga_exec_submit(ex, &w, &why), -EPERM);
    ck_assert_uint_eq(why.code, LT_E_NOT_OWNER);
    ck_assert_int_eq(et_stream_destroy(ex, 1, a), 0);
    w.owner = 1;
    ck_assert_int_eq(ga_exec_submit(ex, &w, &why), -ESTALE);
    w.bell.seq = 0;
    ck_assert_int_eq(ga_exec_submit(ex, &w, &why), -EINVAL); /* a bell with seq 0 */
    w = work_of(1, lt_stream_id_default(), NULL);
    w.op = 9;
    ck_assert_int_lt(ga_exec_submit(ex, &w, &why), 0);
    ck_assert_uint_eq(why.code, LT_E_BAD_OP); /* the backend's refusal */
    ck_assert_int_eq(FB.njobs, 0);
    teardown();
}
END_TEST

START_TEST(a_drop_retires_ids_at_once_and_cancels_what_is_queued)
{
    front_make(16, 16, BASE_IDTAB_REUSE_FIFO, 64);
    struct lt_stream_id a, other;
    struct lt_event_id e;
    ck_assert_int_eq(et_stream_create(ex, 1, 0, &a), 0);
    ck_assert_int_eq(et_stream_create(ex, 2, 0, &other), 0);
    ck_assert_int_eq(et_event_record(ex, 1, a, lt_event_id_make(0, 0), 0, &e), 0);
    uint32_t st = 0xffff;
    struct ga_exec_work w = work_of(1, a, &st);
    struct lt_failure why;
    ck_assert_int_eq(ga_exec_submit(ex, &w, &why), 0);
    struct ga_exec_client_stats cs;
    ck_assert_int_eq(ga_exec_client_stats(ex, 1, &cs), 0);
    ck_assert_uint_eq(cs.queued, 1);
    ga_exec_client_drop(ex, 1);
    ck_assert_uint_eq(__atomic_load_n(&st, __ATOMIC_ACQUIRE), LT_E_SHUTTING_DOWN);
    ck_assert_int_eq(FB.owner_drops, 1);
    /* The backend releases the owner's objects: the front closes none. */
    ck_assert_int_eq(FB.stream_closes, 0);
    ck_assert_int_eq(FB.event_closes, 0);
    ck_assert_int_eq(ga_exec_client_stats(ex, 1, &cs), -ENOENT);
    ck_assert_int_lt(et_stream_query(ex, 1, a), 0);
    ck_assert_msg(et_why.code == LT_E_NOT_FOUND || et_why.code == LT_E_SHUTTING_DOWN, "%s",
                  lt_error_name(et_why.code));
    ck_assert_int_eq(et_stream_validate(ex, 2, other), 0); /* another owner untouched */
    ck_assert_int_eq(et_stream_validate(ex, 2, a), -EPERM);
    ga_exec_client_drop(ex, 1); /* twice: ignored */
    ck_assert_int_eq(FB.owner_drops, 1);
    char line[512];
    ck_assert_int_gt(ga_exec_stats_format(ex, line, sizeof line), 0);
    ck_assert_msg(strstr(line, "clients=3 streams=1 events=0"), "%s", line);
    ck_assert_msg(strstr(line, "cancelled=1"), "%s", line);
    ck_assert_msg(strstr(line, "fake backend: jobs=0"), "%s", line);
    teardown();
}
END_TEST

START_TEST(a_first_record_that_fails_gives_its_id_back)
{
    front_make(16, 16, BASE_IDTAB_REUSE_FIFO, 64);
    struct lt_stream_id d = lt_stream_id_default();
    struct lt_event_id e = lt_event_id_make(5, 5), none = lt_event_id_make(0, 0);
    FB.record_status = LT_E_GPU_FAULT;
    ck_assert_int_eq(et_event_record(ex, 1, d, none, 0, &e), -EIO);
    ck_assert_uint_eq(et_why.code, LT_E_GPU_FAULT);
    ck_assert(lt_event_id_eq(e, lt_event_id_make(5, 5))); /* no id handed out */
    struct ga_exec_client_stats cs;
    ck_assert_int_eq(ga_exec_client_stats(ex, 1, &cs), 0);
    ck_assert_uint_eq(cs.events, 0);
    ck_assert_int_eq(FB.event_closes, 1);
    ck_assert_int_eq(et_event_record(ex, 1, d, none, LT_EVENT_F_TIMING, &e), 0);
    ck_assert_int_eq(et_event_record(ex, 1, d, e, LT_EVENT_F_TIMING, &e), -EINVAL);
    ck_assert_uint_eq(et_why.code, LT_E_UNKNOWN_FLAGS); /* flags only when creating */
    struct lt_event_id plain;
    ck_assert_int_eq(et_event_record(ex, 1, d, none, 0, &plain), 0);
    float ms = 0;
    ck_assert_int_eq(et_event_elapsed(ex, 1, e, plain, &ms), -EINVAL);
    ck_assert_uint_eq(et_why.code, LT_E_BAD_VALUE);
    ck_assert_msg(strstr(et_why.message, "created with TIMING"), "%s", et_why.message);
    ck_assert_int_eq(et_event_elapsed(ex, 1, e, e, &ms), 0);
    ck_assert(ms == 1.5f);
    teardown();
}
END_TEST

START_TEST(a_fault_refuses_every_new_request)
{
    front_make(16, 16, BASE_IDTAB_REUSE_FIFO, 64);
    ga_exec_backend_fault(ex, -EIO);
    struct lt_stream_id a;
    ck_assert_int_eq(et_stream_create(ex, 1, 0, &a), -EIO);
    ck_assert_uint_eq(et_why.code, LT_E_GPU_FAULT);
    ck_assert_msg(strstr(et_why.message, "restarted"), "%s", et_why.message);
    struct ga_exec_work w = work_of(1, lt_stream_id_default(), NULL);
    struct lt_failure why;
    ck_assert_int_eq(ga_exec_submit(ex, &w, &why), -EIO);
    ck_assert_int_eq(ga_exec_client_add(ex, 9), -ESHUTDOWN);
    teardown();
}
END_TEST

START_TEST(shutdown_answers_everything_and_refuses_more)
{
    front_make(16, 16, BASE_IDTAB_REUSE_FIFO, 64);
    uint32_t st = 0xffff;
    struct ga_exec_work w = work_of(2, lt_stream_id_default(), &st);
    struct lt_failure why;
    ck_assert_int_eq(ga_exec_submit(ex, &w, &why), 0);
    ga_exec_shutdown(ex);
    ck_assert_uint_eq(st, LT_E_SHUTTING_DOWN);
    ck_assert_int_eq(ga_exec_submit(ex, &w, &why), -ESHUTDOWN);
    ck_assert_int_eq(ga_exec_client_add(ex, 9), -ESHUTDOWN);
    ga_exec_shutdown(ex); /* idempotent */
    ck_assert_int_eq(FB.owner_drops, 4);
    teardown();
}
END_TEST

/* ---- record_allocation ----------------------------------------------------------- */

static int released;

static void on_release(void *arg, struct lease_client_id client, struct lt_lease_id lease)
{
    (void)arg;
    (void)client;
    (void)lease;
    __atomic_add_fetch(&released, 1, __ATOMIC_RELAXED);
}

START_TEST(record_allocation_completes_the_release_only_after_the_stream)
{
    struct lease_backend be;
    ck_assert_int_eq(lease_host_backend_init(&be, NULL), 0);
    struct lease_service_config cfg = {.on_release_complete = on_release};
    struct lease_service *svc = NULL;
    ck_assert_int_eq(lease_service_create(&cfg, &be, &svc, NULL), 0);
    struct lease_client_id client;
    ck_assert_int_eq(lease_client_add(svc, NULL, &client, NULL), 0);
    int fd = memfd_create("front-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, 1 << 20), 0);
    ck_assert_int_eq(
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL | F_SEAL_FUTURE_WRITE), 0);
    struct lt_segment_id seg;
    ck_assert_int_eq(lease_segment_add(svc, client, fd, 1 << 20, LT_CLASS_STAGED, &seg, NULL), 0);
    struct lease_grant_req req = {.segment = seg, .length = 4096, .cls = LT_CLASS_STAGED};
    struct lease_grant_result res[2];
    ck_assert_int_eq(lease_grant(svc, client, 1, &req, &res[0], NULL), 1);
    req.offset = 4096;
    ck_assert_int_eq(lease_grant(svc, client, 1, &req, &res[1], NULL), 1);

    front_make(16, 16, BASE_IDTAB_REUSE_FIFO, 64);
    ck_assert_int_eq(ga_exec_client_add(ex, client.value), 0);
    struct lt_stream_id a;
    ck_assert_int_eq(et_stream_create(ex, client.value, 0, &a), 0);
    struct lt_failure why;
    ck_assert_int_eq(ga_exec_record_allocation(ex, a, svc, client, res[0].lease, &why), 0);
    struct lease_release_result rr;
    ck_assert_int_eq(lease_release(svc, client, 1, &res[0].lease, &rr, NULL), 1);
    ck_assert_int_eq(__atomic_load_n(&released, __ATOMIC_RELAXED), 0); /* the stream holds it */
    fb_syncs_finish(); /* the work before the marker is done */
    ck_assert_int_eq(__atomic_load_n(&released, __ATOMIC_RELAXED), 1);
    /* Refusals leave no pin: a released lease, another client's stream. */
    ck_assert_int_eq(ga_exec_record_allocation(ex, a, svc, client, res[0].lease, &why), -EALREADY);
    ck_assert_int_eq(
        ga_exec_record_allocation(ex, a, svc, (struct lease_client_id){1}, res[1].lease, &why),
        -EPERM);
    ck_assert_uint_eq(why.code, LT_E_NOT_OWNER);
    struct lease_info info;
    ck_assert_int_eq(lease_query(svc, client, res[1].lease, &info, NULL), 0);
    ck_assert_uint_eq(info.pending_work, 0);
    teardown();
    lease_service_destroy(svc);
    lease_backend_fini(&be);
}
END_TEST

START_TEST(bad_configurations_are_refused)
{
    struct ga_exec_backend be = {.name = "fake", .ops = &fb_ops};
    struct ga_exec_config cfg = {.table_streams = (1u << 20) + 1};
    struct ga_executor *e = NULL;
    ck_assert_int_eq(ga_executor_create(&cfg, &be, &e), -EINVAL);
    cfg = (struct ga_exec_config){.limits = {.max_events = (1u << 20) + 1}};
    ck_assert_int_eq(ga_executor_create(&cfg, &be, &e), -EINVAL);
    ck_assert_int_eq(ga_executor_create(NULL, NULL, &e), -EINVAL);
    ck_assert_ptr_null(e);
}
END_TEST

static Suite *front_suite(void)
{
    Suite *s = suite_create("exec_front");
    TCase *ids = tcase_create("ids");
    tcase_add_test(ids, issued_ids_start_at_generation_one_and_look_up_for_their_owner);
    tcase_add_test(ids, table_full_is_refused_with_both_numbers);
    tcase_add_test(ids, per_owner_limits_are_refused_with_the_numbers);
    tcase_add_test(ids, malformed_unknown_stale_and_foreign_ids_are_refused_distinctly);
    tcase_add_test(ids, held_id_keeps_its_stream_until_the_op_returns);
    tcase_add_test(ids, freed_slots_are_reissued_in_fifo_order);
    tcase_add_test(ids, lifo_reissues_the_slot_freed_last_with_its_generation_moved_on);
    tcase_add_test(ids, random_operations_agree_with_a_model);
    tcase_set_timeout(ids, 120);
    suite_add_tcase(s, ids);
    TCase *work = tcase_create("work");
    tcase_add_test(work, work_on_another_clients_or_a_stale_stream_is_refused);
    tcase_add_test(work, a_drop_retires_ids_at_once_and_cancels_what_is_queued);
    tcase_add_test(work, a_first_record_that_fails_gives_its_id_back);
    tcase_add_test(work, a_fault_refuses_every_new_request);
    tcase_add_test(work, shutdown_answers_everything_and_refuses_more);
    tcase_add_test(work, record_allocation_completes_the_release_only_after_the_stream);
    tcase_add_test(work, bad_configurations_are_refused);
    suite_add_tcase(s, work);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(front_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
