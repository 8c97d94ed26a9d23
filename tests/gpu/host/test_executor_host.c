/* The host backend behind the executor front's typed verbs: the C reference
 * kernels on worker threads, streams as FIFOs, events, doorbells, done
 * words, cancellation on client drop and shutdown, and managed ids. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpu/executor_host.h"
#include "kernels/blockhash_ref.h"
#include "lease_types/validate.h"

#define OWNER_A 0x100000001ull
#define OWNER_B 0x200000002ull

/* ---- a recorder for callbacks ------------------------------------------ */

struct rec_ev {
    int kind; /* 1 work, 2 ctl */
    uint64_t tag;
    uint16_t type; /* ctl: the command answered */
    struct ga_exec_result w;
    struct ga_exec_ctl_result c;
};

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct rec_ev ev[512];
    int n;
} R = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {{0}}, 0};

static void rec_work(void *arg, const struct ga_exec_result *r)
{
    pthread_mutex_lock(&R.mu);
    if (R.n < 512)
        R.ev[R.n++] = (struct rec_ev){.kind = 1, .tag = (uintptr_t)arg, .w = *r};
    pthread_cond_broadcast(&R.cv);
    pthread_mutex_unlock(&R.mu);
}

/* A command's reply argument: its tag and its type. */
#define CTL_ARG(tag, type) ((void *)(uintptr_t)((uint64_t)(tag) << 8 | (type)))

static void rec_ctl(void *arg, const struct ga_exec_ctl_result *r)
{
    uint64_t v = (uintptr_t)arg;
    pthread_mutex_lock(&R.mu);
    if (R.n < 512)
        R.ev[R.n++] =
            (struct rec_ev){.kind = 2, .tag = v >> 8, .type = (uint16_t)(v & 0xff), .c = *r};
    pthread_cond_broadcast(&R.cv);
    pthread_mutex_unlock(&R.mu);
}

/* Waits until @n callbacks have run; returns how many had. */
static int rec_wait(int n, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&R.mu);
    while (R.n < n && pthread_cond_timedwait(&R.cv, &R.mu, &ts) == 0)
        ;
    int got = R.n;
    pthread_mutex_unlock(&R.mu);
    return got;
}

static struct rec_ev rec_get(int i)
{
    pthread_mutex_lock(&R.mu);
    struct rec_ev e = R.ev[i];
    pthread_mutex_unlock(&R.mu);
    return e;
}

/* ---- fixtures ------------------------------------------------------------ */

static struct ga_executor *ex;

static void ex_make(const struct ga_executor_host_opts *o)
{
    R.n = 0;
    ck_assert_int_eq(ga_executor_host_create(o, &ex), 0);
    ck_assert_int_eq(ga_exec_client_add(ex, OWNER_A), 0);
    ck_assert_int_eq(ga_exec_client_add(ex, OWNER_B), 0);
    ck_assert_int_eq(ga_exec_client_add(ex, OWNER_A), -EEXIST);
}

static void setup(void)
{
    struct ga_executor_host_opts o = {.workers = 2, .max_streams = 2, .max_events = 4};
    ex_make(&o);
}

static void teardown(void)
{
    ga_executor_destroy(ex);
    ex = NULL;
}

static uint64_t seed_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* A buffer of seeded data with its block sums placed after it. */
static unsigned char *data_make(size_t len, uint32_t bs, uint64_t seed, size_t *sums_off_p)
{
    size_t sums_off = (len + 7) / 8 * 8;
    size_t blocks = kr_block_count(len, bs);
    unsigned char *p = aligned_alloc(64, (sums_off + blocks * 8 + 63) / 64 * 64);
    ck_assert_ptr_nonnull(p);
    for (size_t i = 0; i < len; i += 8) {
        uint64_t v = seed_next(&seed);
        memcpy(p + i, &v, len - i < 8 ? len - i : 8);
    }
    ck_assert_int_eq(kr_block_checksums(p, len, bs, (uint64_t *)(void *)(p + sums_off)),
                     (long)blocks);
    *sums_off_p = sums_off;
    return p;
}

static struct ga_exec_work verify_work(uint64_t owner, unsigned char *p, size_t len, uint32_t bs,
                                       size_t sums_off, uint64_t tag)
{
    struct ga_exec_work w = {.owner = owner,
                             .op = LT_OP_CHECKSUM_VERIFY,
                             .host = p,
                             .length = sums_off + kr_block_count(len, bs) * 8,
                             .mem_class = LT_CLASS_PINNED,
                             .done_cb = rec_work,
                             .arg = (void *)(uintptr_t)tag};
    w.args.checksum = (struct lt_op_checksum_verify){
        .offset = 0, .length = len, .sums_offset = sums_off, .block_size = bs};
    return w;
}

static void submit_ok(const struct ga_exec_work *w)
{
    struct lt_failure why;
    int rc = ga_exec_submit(ex, w, &why);
    ck_assert_msg(rc == 0, "submit refused: %s", rc ? why.message : "");
}

/* A command as the protocol names it, issued through the typed verbs. */
struct test_ctl {
    uint16_t type;
    uint64_t owner;
    struct lt_stream_id stream;
    struct lt_event_id event;
    struct lt_event_id end;
    uint32_t flags;
    uint64_t tag;
};

static struct test_ctl ctl_of(uint16_t type, uint64_t owner, uint64_t tag)
{
    return (struct test_ctl){.type = type, .owner = owner, .tag = tag};
}

static int ctl_issue(const struct test_ctl *c, struct lt_failure *why)
{
    struct ga_exec_reply r = {rec_ctl, CTL_ARG(c->tag, c->type)};
    switch (c->type) {
    case LT_MSG_STREAM_CREATE:
        return ga_exec_stream_create(ex, c->owner, c->flags, &r, why);
    case LT_MSG_STREAM_VALIDATE:
        return ga_exec_stream_validate(ex, c->owner, c->stream, &r, why);
    case LT_MSG_STREAM_QUERY:
        return ga_exec_stream_query(ex, c->owner, c->stream, &r, why);
    case LT_MSG_STREAM_SYNCHRONIZE:
        return ga_exec_stream_synchronize(ex, c->owner, c->stream, &r, why);
    case LT_MSG_STREAM_DESTROY:
        return ga_exec_stream_destroy(ex, c->owner, c->stream, &r, why);
    case LT_MSG_EVENT_RECORD:
        return ga_exec_event_record(ex, c->owner, c->stream, c->event, c->flags, &r, why);
    case LT_MSG_EVENT_WAIT:
        return ga_exec_event_wait(ex, c->owner, c->stream, c->event, &r, why);
    case LT_MSG_EVENT_QUERY:
        return ga_exec_event_query(ex, c->owner, c->event, &r, why);
    case LT_MSG_EVENT_SYNCHRONIZE:
        return ga_exec_event_synchronize(ex, c->owner, c->event, &r, why);
    case LT_MSG_EVENT_DESTROY:
        return ga_exec_event_destroy(ex, c->owner, c->event, &r, why);
    case LT_MSG_EVENT_ELAPSED:
        return ga_exec_event_elapsed(ex, c->owner, c->event, c->end, &r, why);
    case LT_MSG_DEVICE_SYNCHRONIZE:
        return ga_exec_device_synchronize(ex, c->owner, &r, why);
    }
    ck_abort_msg("not a command: %u", c->type);
    return -EINVAL;
}

/* Runs @c, expects it accepted and answered at once; returns the answer. */
static struct ga_exec_ctl_result ctl_now(struct test_ctl c)
{
    int before = rec_wait(0, 0);
    struct lt_failure why;
    int rc = ctl_issue(&c, &why);
    ck_assert_msg(rc == 0, "%s refused: %s", lt_msg_type_name(c.type), rc ? why.message : "");
    ck_assert_int_eq(rec_wait(before + 1, 5000), before + 1);
    struct rec_ev e = rec_get(before);
    ck_assert_int_eq(e.kind, 2);
    ck_assert_uint_eq(e.type, c.type);
    return e.c;
}

static uint32_t ctl_refused(struct test_ctl c)
{
    struct lt_failure why = {0};
    int rc = ctl_issue(&c, &why);
    ck_assert_int_lt(rc, 0);
    ck_assert_int_eq(rc, lt_error_errno(why.code));
    ck_assert_uint_ge(strlen(why.message), 1);
    return why.code;
}

/* ---- tests --------------------------------------------------------------- */

START_TEST(test_checksum_verify_names_the_first_bad_block_and_counts_all)
{
    const size_t len = 64 * 512 + 100; /* a short last block */
    size_t so;
    unsigned char *p = data_make(len, 512, 0xc0ffee, &so);
    uint64_t *sums = (uint64_t *)(void *)(p + so);
    uint64_t done_word = 0;

    struct ga_exec_work w = verify_work(OWNER_A, p, len, 512, so, 1);
    w.done = (struct ga_exec_word){.host = &done_word, .seq = 41};
    w.accepted_ns = 1;
    submit_ok(&w);
    ck_assert_int_eq(rec_wait(1, 5000), 1);
    struct rec_ev e = rec_get(0);
    ck_assert_uint_eq(e.w.status, LT_OK);
    ck_assert_uint_eq(e.w.result.checksum.blocks_checked, 65);
    ck_assert_uint_eq(e.w.result.checksum.first_bad_block, LT_BLOCK_NONE);
    ck_assert_uint_eq(e.w.result.checksum.bad_blocks, 0);
    ck_assert_uint_eq(__atomic_load_n(&done_word, __ATOMIC_ACQUIRE), 41);
    ck_assert_uint_gt(e.w.elapsed_ns, 0);

    p[5 * 512 + 3] ^= 0x80;
    p[64 * 512 + 99] ^= 0x01; /* the short tail block */
    uint64_t actual = kr_block_checksum(p + 5 * 512, 512);
    w.done.seq = 42;
    submit_ok(&w);
    ck_assert_int_eq(rec_wait(2, 5000), 2);
    e = rec_get(1);
    ck_assert_uint_eq(e.w.status, LT_E_CHECKSUM_MISMATCH);
    ck_assert_uint_eq(e.w.result.checksum.first_bad_block, 5);
    ck_assert_uint_eq(e.w.result.checksum.bad_blocks, 2);
    ck_assert_uint_eq(e.w.result.checksum.expected, sums[5]);
    ck_assert_uint_eq(e.w.result.checksum.actual, actual);
    ck_assert_int_eq(lt_validate_op_result(LT_OP_CHECKSUM_VERIFY, &e.w.result), LT_OK);
    ck_assert_uint_eq(done_word, 42); /* a mismatch still ran: the word says so */
    free(p);
}
END_TEST

START_TEST(test_copy_h2d_streams_through_a_small_scratch)
{
    teardown();
    struct ga_executor_host_opts o = {.workers = 1, .scratch_bytes = 4096};
    ex_make(&o);
    unsigned char *p = malloc(100000);
    ck_assert_ptr_nonnull(p);
    memset(p, 0x5c, 100000);
    struct ga_exec_work w = {
        .owner = OWNER_A, .op = LT_OP_COPY_H2D, .host = p, .length = 100000, .done_cb = rec_work};
    w.args.copy = (struct lt_op_copy_h2d){.offset = 7, .length = 99993};
    submit_ok(&w);
    ck_assert_int_eq(rec_wait(1, 5000), 1);
    ck_assert_uint_eq(rec_get(0).w.status, LT_OK);
    ck_assert_uint_eq(rec_get(0).w.result.copy.bytes_copied, 99993);
    free(p);
}
END_TEST

START_TEST(test_a_stream_is_fifo_and_other_streams_run_past_its_bell)
{
    size_t so;
    unsigned char *p = data_make(8192, 512, 7, &so);
    uint64_t bell = 0;
    struct lt_stream_id s = ctl_now(ctl_of(LT_MSG_STREAM_CREATE, OWNER_A, 0)).stream;
    int base = rec_wait(0, 0);

    struct ga_exec_work a = verify_work(OWNER_A, p, 8192, 512, so, 10);
    a.stream = s;
    a.bell = (struct ga_exec_word){.host = &bell, .seq = 3};
    struct ga_exec_work b = verify_work(OWNER_A, p, 8192, 512, so, 11);
    b.stream = s;
    struct ga_exec_work c = verify_work(OWNER_A, p, 8192, 512, so, 12);
    submit_ok(&a);
    submit_ok(&b);
    submit_ok(&c); /* the default stream */
    ck_assert_int_eq(rec_wait(base + 1, 5000), base + 1);
    ck_assert_uint_eq(rec_get(base).tag, 12);
    usleep(50000);
    ck_assert_int_eq(rec_wait(0, 0), base + 1); /* a waits for its bell, b behind it */
    ck_assert_uint_eq(ctl_now(ctl_of(LT_MSG_STREAM_QUERY, OWNER_A, 0)).ready, 1);
    struct test_ctl q = ctl_of(LT_MSG_STREAM_QUERY, OWNER_A, 0);
    q.stream = s;
    ck_assert_uint_eq(ctl_now(q).ready, 0);
    base = rec_wait(0, 0);
    __atomic_store_n(&bell, 2, __ATOMIC_RELEASE);
    usleep(20000);
    ck_assert_int_eq(rec_wait(0, 0), base);
    __atomic_store_n(&bell, 5, __ATOMIC_RELEASE); /* >= seq opens it */
    ck_assert_int_eq(rec_wait(base + 2, 5000), base + 2);
    ck_assert_uint_eq(rec_get(base).tag, 10);
    ck_assert_uint_eq(rec_get(base + 1).tag, 11);
    ck_assert_uint_eq(rec_get(base + 1).w.status, LT_OK);
    free(p);
}
END_TEST

START_TEST(test_events_order_streams_and_time_the_work)
{
    size_t so;
    unsigned char *p = data_make(8192, 512, 8, &so);
    uint64_t bell = 0;
    struct lt_stream_id s = ctl_now(ctl_of(LT_MSG_STREAM_CREATE, OWNER_A, 0)).stream;
    struct lt_stream_id t = ctl_now(ctl_of(LT_MSG_STREAM_CREATE, OWNER_A, 0)).stream;
    struct test_ctl rec = ctl_of(LT_MSG_EVENT_RECORD, OWNER_A, 0);
    rec.stream = s;
    rec.flags = LT_EVENT_F_TIMING;
    struct lt_event_id e0 = ctl_now(rec).event;
    struct ga_exec_work a = verify_work(OWNER_A, p, 8192, 512, so, 20);
    a.stream = s;
    a.bell = (struct ga_exec_word){.host = &bell, .seq = 1};
    submit_ok(&a);
    struct lt_event_id e1 = ctl_now(rec).event;
    struct test_ctl wt = ctl_of(LT_MSG_EVENT_WAIT, OWNER_A, 0);
    wt.stream = t;
    wt.event = e1;
    ctl_now(wt);
    struct ga_exec_work w = verify_work(OWNER_A, p, 8192, 512, so, 21);
    w.stream = t;
    submit_ok(&w);
    struct test_ctl q = ctl_of(LT_MSG_EVENT_QUERY, OWNER_A, 0);
    q.event = e1;
    ck_assert_uint_eq(ctl_now(q).ready, 0);
    struct test_ctl el = ctl_of(LT_MSG_EVENT_ELAPSED, OWNER_A, 0);
    el.event = e0;
    el.end = e1;
    ck_assert_uint_eq(ctl_refused(el), LT_E_BUSY);
    struct test_ctl sync = ctl_of(LT_MSG_EVENT_SYNCHRONIZE, OWNER_A, 77);
    sync.event = e1;
    struct lt_failure why;
    ck_assert_int_eq(ctl_issue(&sync, &why), 0);
    int base = rec_wait(0, 0);
    usleep(60000);
    ck_assert_int_eq(rec_wait(0, 0), base); /* w waits on t for e1, e1 for the bell */

    __atomic_store_n(&bell, 1, __ATOMIC_RELEASE);
    ck_assert_int_eq(rec_wait(base + 3, 5000), base + 3);
    ck_assert_uint_eq(rec_get(base).tag, 20); /* a before what waited for it */
    bool saw_w = false, saw_sync = false;
    for (int i = base + 1; i < base + 3; i++) {
        saw_w |= rec_get(i).kind == 1 && rec_get(i).tag == 21;
        saw_sync |= rec_get(i).kind == 2 && rec_get(i).tag == 77;
    }
    ck_assert(saw_w && saw_sync);
    ck_assert_uint_eq(ctl_now(q).ready, 1);
    float ms = lt_f32_from_bits(ctl_now(el).elapsed_ms_bits);
    ck_assert(ms >= 50.0f && ms < 60000.0f);
    /* An event without TIMING cannot be timed; a never-recorded one is ready. */
    rec.flags = 0;
    struct lt_event_id plain = ctl_now(rec).event;
    el.end = plain;
    ck_assert_uint_eq(ctl_refused(el), LT_E_BAD_VALUE);
    free(p);
}
END_TEST

START_TEST(test_stream_and_device_sync_answer_after_the_work)
{
    size_t so;
    unsigned char *p = data_make(4096, 512, 9, &so);
    uint64_t bell = 0;
    struct lt_stream_id s = ctl_now(ctl_of(LT_MSG_STREAM_CREATE, OWNER_A, 0)).stream;
    struct ga_exec_work a = verify_work(OWNER_A, p, 4096, 512, so, 30);
    a.stream = s;
    a.bell = (struct ga_exec_word){.host = &bell, .seq = 1};
    submit_ok(&a);
    int base = rec_wait(0, 0);
    struct lt_failure why;
    struct test_ctl ss = ctl_of(LT_MSG_STREAM_SYNCHRONIZE, OWNER_A, 31);
    ss.stream = s;
    ck_assert_int_eq(ctl_issue(&ss, &why), 0);
    struct test_ctl ds = ctl_of(LT_MSG_DEVICE_SYNCHRONIZE, OWNER_A, 32);
    ck_assert_int_eq(ctl_issue(&ds, &why), 0);
    /* Another owner's device sync does not wait for OWNER_A's work. */
    ctl_now(ctl_of(LT_MSG_DEVICE_SYNCHRONIZE, OWNER_B, 33));
    base++;
    usleep(50000);
    ck_assert_int_eq(rec_wait(0, 0), base);
    __atomic_store_n(&bell, 1, __ATOMIC_RELEASE);
    ck_assert_int_eq(rec_wait(base + 3, 5000), base + 3);
    ck_assert_uint_eq(rec_get(base).tag, 30);
    for (int i = base + 1; i < base + 3; i++)
        ck_assert_uint_eq(rec_get(i).c.status, LT_OK);
    free(p);
}
END_TEST

START_TEST(test_client_drop_cancels_queued_and_waiting_work)
{
    size_t so;
    unsigned char *p = data_make(4096, 512, 10, &so);
    uint64_t bell = 0, done = 0;
    struct lt_stream_id s = ctl_now(ctl_of(LT_MSG_STREAM_CREATE, OWNER_A, 0)).stream;
    struct ga_exec_work a = verify_work(OWNER_A, p, 4096, 512, so, 40);
    a.stream = s;
    a.bell = (struct ga_exec_word){.host = &bell, .seq = 1};
    a.done = (struct ga_exec_word){.host = &done, .seq = 9};
    submit_ok(&a);
    struct ga_exec_work b = verify_work(OWNER_A, p, 4096, 512, so, 41);
    b.stream = s;
    submit_ok(&b);
    struct test_ctl ss = ctl_of(LT_MSG_STREAM_SYNCHRONIZE, OWNER_A, 42);
    ss.stream = s;
    struct lt_failure why;
    ck_assert_int_eq(ctl_issue(&ss, &why), 0);
    struct ga_exec_client_stats st;
    ck_assert_int_eq(ga_exec_client_stats(ex, OWNER_A, &st), 0);
    ck_assert_uint_eq(st.streams, 1);
    ck_assert_uint_eq(st.queued, 2);
    int base = rec_wait(0, 0);
    usleep(20000);

    ga_exec_client_drop(ex, OWNER_A);
    ck_assert_int_eq(rec_wait(base + 3, 5000), base + 3);
    for (int i = base; i < base + 3; i++) {
        struct rec_ev e = rec_get(i);
        ck_assert_uint_eq(e.kind == 1 ? e.w.status : e.c.status, LT_E_SHUTTING_DOWN);
    }
    ck_assert_uint_eq(done, 0); /* cancelled work never ran */
    ck_assert_int_eq(ga_exec_client_stats(ex, OWNER_A, &st), -ENOENT);
    ck_assert_int_lt(ga_exec_submit(ex, &b, &why), 0);
    ck_assert_msg(why.code == LT_E_NOT_FOUND || why.code == LT_E_SHUTTING_DOWN, "%s",
                  lt_error_name(why.code)); /* gone, or still draining */
    /* OWNER_B is untouched. */
    struct ga_exec_work c = verify_work(OWNER_B, p, 4096, 512, so, 43);
    submit_ok(&c);
    ck_assert_int_eq(rec_wait(base + 4, 5000), base + 4);
    ck_assert_uint_eq(rec_get(base + 3).w.status, LT_OK);
    free(p);
}
END_TEST

START_TEST(test_stream_and_event_ids_are_owner_and_generation_checked)
{
    struct lt_stream_id s = ctl_now(ctl_of(LT_MSG_STREAM_CREATE, OWNER_A, 0)).stream;
    ck_assert(lt_stream_id_is_issued(s));
    struct test_ctl q = ctl_of(LT_MSG_STREAM_VALIDATE, OWNER_B, 0);
    q.stream = s;
    ck_assert_uint_eq(ctl_refused(q), LT_E_NOT_OWNER);
    q.owner = OWNER_A;
    ctl_now(q);
    q.stream.gen++;
    ck_assert_uint_eq(ctl_refused(q), LT_E_NOT_FOUND);
    q.stream = (struct lt_stream_id){500, 1};
    ck_assert_uint_eq(ctl_refused(q), LT_E_NOT_FOUND);

    /* Limit of 2 streams per owner; destroying one makes room again. */
    struct lt_stream_id s2 = ctl_now(ctl_of(LT_MSG_STREAM_CREATE, OWNER_A, 0)).stream;
    ck_assert_uint_eq(ctl_refused(ctl_of(LT_MSG_STREAM_CREATE, OWNER_A, 0)), LT_E_LIMIT);
    ctl_now(ctl_of(LT_MSG_STREAM_CREATE, OWNER_B, 0)); /* B has its own limit */
    struct test_ctl d = ctl_of(LT_MSG_STREAM_DESTROY, OWNER_A, 0);
    d.stream = s2;
    ctl_now(d);
    ck_assert_uint_eq(ctl_refused(d), LT_E_STALE_ID);
    struct lt_stream_id s3 = ctl_now(ctl_of(LT_MSG_STREAM_CREATE, OWNER_A, 0)).stream;
    ck_assert_uint_eq(s3.slot, s2.slot); /* the slot came back ... */
    ck_assert_uint_ne(s3.gen, s2.gen);   /* ... with a new generation */
    d.stream = (struct lt_stream_id){0, 0};
    ck_assert_uint_eq(ctl_refused(d), LT_E_BAD_ID);

    /* Events: 4 per owner, owner-checked, stale once destroyed. */
    struct test_ctl r = ctl_of(LT_MSG_EVENT_RECORD, OWNER_A, 0);
    struct lt_event_id ev[4];
    for (int i = 0; i < 4; i++)
        ev[i] = ctl_now(r).event;
    ck_assert_uint_eq(ctl_refused(r), LT_E_LIMIT);
    struct test_ctl eq = ctl_of(LT_MSG_EVENT_QUERY, OWNER_B, 0);
    eq.event = ev[0];
    ck_assert_uint_eq(ctl_refused(eq), LT_E_NOT_OWNER);
    struct test_ctl ed = ctl_of(LT_MSG_EVENT_DESTROY, OWNER_A, 0);
    ed.event = ev[0];
    ctl_now(ed);
    eq.owner = OWNER_A;
    ck_assert_uint_eq(ctl_refused(eq), LT_E_STALE_ID);
    r.event = ev[1];
    r.flags = LT_EVENT_F_TIMING; /* flags only when creating */
    ck_assert_uint_eq(ctl_refused(r), LT_E_UNKNOWN_FLAGS);
    struct ga_exec_client_stats st;
    ck_assert_int_eq(ga_exec_client_stats(ex, OWNER_A, &st), 0);
    ck_assert_uint_eq(st.streams, 2);
    ck_assert_uint_eq(st.events, 3);
}
END_TEST

START_TEST(test_unsupported_and_malformed_work_is_refused)
{
    unsigned char buf[4096] = {0};
    struct lt_failure why;
    struct ga_exec_work w = {.owner = OWNER_A,
                             .op = LT_OP_VECTOR_SCAN,
                             .host = buf,
                             .length = sizeof buf,
                             .done_cb = rec_work};
    ck_assert_int_eq(ga_exec_submit(ex, &w, &why), -EOPNOTSUPP);
    ck_assert_uint_eq(why.code, LT_E_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(why.message, "VECTOR_SCAN"));
    w.op = 9;
    ck_assert_int_lt(ga_exec_submit(ex, &w, &why), 0);
    ck_assert_uint_eq(why.code, LT_E_BAD_OP);
    w.op = LT_OP_COPY_H2D;
    w.owner = 0x999;
    ck_assert_int_lt(ga_exec_submit(ex, &w, &why), 0);
    ck_assert_uint_eq(why.code, LT_E_NOT_FOUND);
    w.owner = OWNER_A;
    w.stream = (struct lt_stream_id){3, 7};
    ck_assert_int_lt(ga_exec_submit(ex, &w, &why), 0);
    ck_assert_uint_eq(why.code, LT_E_NOT_FOUND);
    ck_assert_int_eq(rec_wait(0, 0), 0); /* refusals never call back */
}
END_TEST

START_TEST(test_shutdown_answers_everything_and_refuses_more)
{
    size_t so;
    unsigned char *p = data_make(4096, 512, 11, &so);
    uint64_t bell = 0;
    struct ga_exec_work a = verify_work(OWNER_A, p, 4096, 512, so, 50);
    a.bell = (struct ga_exec_word){.host = &bell, .seq = 1};
    submit_ok(&a);
    struct ga_exec_work b = verify_work(OWNER_B, p, 4096, 512, so, 51);
    submit_ok(&b);
    ck_assert_int_eq(rec_wait(1, 5000), 1); /* b ran */
    ga_exec_shutdown(ex);
    ck_assert_int_eq(rec_wait(0, 0), 2); /* every callback ran before it returned */
    ck_assert_uint_eq(rec_get(1).tag, 50);
    ck_assert_uint_eq(rec_get(1).w.status, LT_E_SHUTTING_DOWN);
    struct lt_failure why;
    ck_assert_int_eq(ga_exec_submit(ex, &b, &why), -ESHUTDOWN);
    ck_assert_int_eq(ga_exec_client_add(ex, 0x77), -ESHUTDOWN);
    ga_exec_shutdown(ex); /* idempotent */
    char line[512];
    ck_assert_int_gt(ga_exec_stats_format(ex, line, sizeof line), 0);
    ck_assert_ptr_nonnull(strstr(line, "cancelled=1"));
    free(p);
}
END_TEST

static Suite *executor_suite(void)
{
    Suite *s = suite_create("executor_host");
    TCase *tc = tcase_create("host");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_checksum_verify_names_the_first_bad_block_and_counts_all);
    tcase_add_test(tc, test_copy_h2d_streams_through_a_small_scratch);
    tcase_add_test(tc, test_a_stream_is_fifo_and_other_streams_run_past_its_bell);
    tcase_add_test(tc, test_events_order_streams_and_time_the_work);
    tcase_add_test(tc, test_stream_and_device_sync_answer_after_the_work);
    tcase_add_test(tc, test_client_drop_cancels_queued_and_waiting_work);
    tcase_add_test(tc, test_stream_and_event_ids_are_owner_and_generation_checked);
    tcase_add_test(tc, test_unsupported_and_malformed_work_is_refused);
    tcase_add_test(tc, test_shutdown_answers_everything_and_refuses_more);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(executor_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
