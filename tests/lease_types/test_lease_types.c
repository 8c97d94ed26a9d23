/* Check suite for lease-types: every message built valid passes; every field
 * corrupted in turn gives its specific error; truncated buffers (exact-size
 * heap allocations, so the ASan build catches any read past the end) and
 * random bytes are refused without crashing; the helpers do what their
 * comments say. Randomness is seeded: LT_TEST_SEED=<n> replays a run. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lease_types/lease_types.h"
#include "second_tu.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the corruption helpers write little-endian fields"
#endif

/* ---- Seeded randomness (splitmix64) ---- */

static uint64_t g_seed = 0x6c745f7465737431ull;
static uint64_t g_state;

static void rng_seed(uint64_t salt)
{
    g_state = g_seed ^ (salt * 0x9e3779b97f4a7c15ull);
}

static uint64_t rnd(void)
{
    uint64_t z = (g_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform-enough in [0, n); 0 when n is 0. */
static uint64_t rnd_below(uint64_t n)
{
    return n ? rnd() % n : 0;
}

static uint32_t rnd_gen(void)
{
    return 1 + (uint32_t)rnd_below(UINT32_MAX);
}

static uint32_t rnd_class(void)
{
    return LT_CLASS_STAGED + (uint32_t)rnd_below(3);
}

static struct lt_segment_id rnd_segment(void)
{
    return lt_segment_id_make((uint32_t)rnd(), rnd_gen());
}

static struct lt_lease_id rnd_lease(void)
{
    return lt_lease_id_make((uint32_t)rnd(), rnd_gen());
}

static struct lt_ring_id rnd_ring(void)
{
    return lt_ring_id_make((uint32_t)rnd(), rnd_gen());
}

static struct lt_event_id rnd_event(void)
{
    return lt_event_id_make((uint32_t)rnd(), rnd_gen());
}

static struct lt_stream_id rnd_stream_issued(void)
{
    return lt_stream_id_make((uint32_t)rnd(), rnd_gen());
}

static struct lt_stream_id rnd_stream_usable(void)
{
    return rnd_below(3) ? rnd_stream_issued() : lt_stream_id_default();
}

/* A valid name: 1..cap-1 printable bytes, then zeros. */
static void rnd_name(char *dst, size_t cap)
{
    size_t n = 1 + rnd_below(cap - 1);
    for (size_t i = 0; i < cap; i++)
        dst[i] = i < n ? (char)(0x20 + rnd_below(95)) : '\0';
}

/* Types run FIRST..LAST with reserved gaps (proto.h): 1 when @t is defined. */
/* A defined type this suite builds and corrupts: LAUNCH's (1.2) have their
 * own suite, test_launch_proto.c. */
static int type_defined(uint32_t t)
{
    return lt_msg_info(t).name != NULL && !(t >= LT_MSG_LAUNCH_FIRST && t <= LT_MSG_LAUNCH_LAST);
}

/* A defined type, uniformly among them. */
static uint16_t rnd_type(void)
{
    uint16_t t;
    do
        t = (uint16_t)(LT_MSG_TYPE_FIRST + rnd_below(LT_MSG_TYPE_LAST));
    while (!type_defined(t));
    return t;
}

/* ---- Building valid messages ---- */

/* Sub-shapes some types come in (the builder's variant argument). */
#define V_ANY 0u
#define V_OP_MASK 0xffu   /* SUBMIT, COMPLETION: the op; CTL_REPLY: the request type */
#define V_WORDS 0x100u    /* SUBMIT: doorbell and done words both used */
#define V_NO_WORDS 0x200u /* SUBMIT: neither */
#define V_BAD 0x100u      /* COMPLETION: a checksum mismatch / a scan that found a record */
#define V_GOOD 0x200u     /* COMPLETION: all blocks good / nothing scanned */
#define V_ALL_OK 0x100u   /* LEASE_GRANT: every entry granted */
#define V_ALL_REFUSED 0x200u
#define V_NEW 0x100u      /* EVENT_RECORD: creates an event */
#define V_RERECORD 0x200u /* EVENT_RECORD: records an issued one */
#define V_TOPK 0x400u     /* SUBMIT (scan): k hits asked for */
#define V_NO_TOPK 0x800u  /* SUBMIT (scan): k 0, the single best only */

#define COUNT_RANDOM UINT32_MAX

struct msg {
    unsigned char *p;
    size_t len;
};

static void fill_word(struct lt_word_ref *w, uint64_t *seq)
{
    w->segment = rnd_segment();
    w->offset = 8 * rnd_below(LT_SEGMENT_SIZE_MAX / 8);
    *seq = 1 + rnd_below(UINT64_MAX);
}

static void fill_args(uint32_t op, unsigned variant, union lt_op_args *a)
{
    switch (op) {
    case LT_OP_CHECKSUM_VERIFY:
        a->checksum.block_size = 8 * (1 + (uint32_t)rnd_below(1u << 16));
        a->checksum.offset = 8 * rnd_below(1ull << 34);
        a->checksum.length = 1 + rnd_below(1ull << 34);
        a->checksum.sums_offset = 8 * rnd_below(1ull << 34);
        break;
    case LT_OP_VECTOR_SCAN: {
        uint32_t es;
        a->scan.elem = (uint16_t)(LT_ELEM_F32 + rnd_below(2));
        es = lt_elem_size(a->scan.elem);
        a->scan.metric = (uint16_t)(LT_SCAN_DOT + rnd_below(2));
        a->scan.dim = 1 + (uint32_t)(rnd_below(8) ? rnd_below(1024) : rnd_below(LT_SCAN_DIM_MAX));
        a->scan.offset = es * rnd_below(1ull << 36);
        a->scan.length = (uint64_t)a->scan.dim * es * (1 + rnd_below(1u << 16));
        a->scan.query_offset = es * rnd_below(1ull << 36);
        if ((variant & V_TOPK) || (!(variant & V_NO_TOPK) && rnd_below(4))) {
            a->scan.k = 1 + (uint32_t)rnd_below(LT_SCAN_MAX_K);
            a->scan.hits_offset = 8 * rnd_below(1ull << 36);
        }
        break;
    }
    case LT_OP_COPY_H2D:
        a->copy.offset = rnd_below(1ull << 39);
        a->copy.length = 1 + rnd_below(1ull << 39);
        break;
    default:
        ck_abort_msg("fill_args: op %u", op);
    }
}

static void fill_result(uint32_t op, unsigned variant, union lt_op_result *r)
{
    int good = (variant & V_GOOD) || (!(variant & V_BAD) && rnd_below(2));
    switch (op) {
    case LT_OP_CHECKSUM_VERIFY: {
        struct lt_checksum_result *c = &r->checksum;
        c->blocks_checked = 1 + rnd_below(1u << 20);
        if (good) {
            c->first_bad_block = LT_BLOCK_NONE;
        } else {
            c->first_bad_block = rnd_below(c->blocks_checked);
            c->bad_blocks = 1 + rnd_below(c->blocks_checked);
            c->expected = rnd();
            c->actual = rnd();
        }
        break;
    }
    case LT_OP_VECTOR_SCAN:
        if (good) {
            r->scan.best_index = LT_BLOCK_NONE;
        } else {
            r->scan.records_scanned = 1 + rnd_below(1u << 30);
            r->scan.best_index = rnd_below(r->scan.records_scanned);
            r->scan.best_score_bits = (uint32_t)rnd();
        }
        break;
    case LT_OP_COPY_H2D:
        r->copy.bytes_copied = rnd();
        break;
    default:
        ck_abort_msg("fill_result: op %u", op);
    }
}

/* A valid message of @type (and @variant) with @count entries for a batch
 * (COUNT_RANDOM: chosen here), in a malloc'ed buffer of exactly its size. */
static struct msg build(uint16_t type, unsigned variant, uint32_t count)
{
    struct lt_msg_info info = lt_msg_info(type);
    struct msg m;
    unsigned op = variant & V_OP_MASK;

    ck_assert_msg(info.name != NULL, "build: type %u is not defined", type);
    if (info.entry == 0)
        count = 0;
    else if (count == COUNT_RANDOM)
        count = rnd_below(8) == 0 ? info.max_count : info.min_count + (uint32_t)rnd_below(9);
    ck_assert_int_eq(lt_msg_size(type, count, &m.len), LT_OK);
    m.p = malloc(m.len);
    ck_assert_ptr_nonnull(m.p);
    memset(m.p, 0xa5, m.len); /* lt_msg_init must clear it */
    ck_assert_int_eq(lt_msg_init(m.p, m.len, type, 1 + rnd_below(UINT64_MAX)), LT_OK);
    if (info.entry)
        *(uint32_t *)(void *)(m.p + 24) = count;

    switch (type) {
    case LT_MSG_HELLO: {
        struct lt_msg_hello *h = (void *)m.p;
        h->version_min = 1;
        h->version_max = (uint16_t)(1 + rnd_below(3));
        h->caps = (uint32_t)rnd() & LT_CAP_CLIENT_KNOWN;
        rnd_name(h->name, sizeof h->name);
        break;
    }
    case LT_MSG_HELLO_REPLY: {
        struct lt_msg_hello_reply *h = (void *)m.p;
        h->version = LT_PROTO_VERSION;
        h->caps = (uint32_t)rnd() & LT_CAP_AGENT_KNOWN;
        h->client_id = rnd_gen();
        h->max_lease_batch = 1 + (uint32_t)rnd_below(LT_MAX_BATCH);
        h->max_streams = (uint32_t)rnd();
        h->max_events = (uint32_t)rnd();
        h->max_segments = (uint32_t)rnd();
        h->max_segment_bytes =
            LT_SEGMENT_ALIGN * (1 + rnd_below(LT_SEGMENT_SIZE_MAX / LT_SEGMENT_ALIGN));
        for (int c = LT_CLASS_STAGED; c < LT_CLASS_SLOTS; c++)
            h->class_budget[c] = rnd();
        rnd_name(h->agent_name, sizeof h->agent_name);
        break;
    }
    case LT_MSG_SEGMENT_OFFER: {
        struct lt_msg_segment_offer *o = (void *)m.p;
        o->cookie = rnd();
        o->size = LT_SEGMENT_ALIGN * (1 + rnd_below(LT_SEGMENT_SIZE_MAX / LT_SEGMENT_ALIGN));
        o->mem_class = rnd_class();
        break;
    }
    case LT_MSG_SEGMENT_ACCEPT: {
        struct lt_msg_segment_accept *a = (void *)m.p;
        a->cookie = rnd();
        a->segment = rnd_segment();
        a->size = LT_SEGMENT_ALIGN * (1 + rnd_below(LT_SEGMENT_SIZE_MAX / LT_SEGMENT_ALIGN));
        a->mem_class = rnd_class();
        break;
    }
    case LT_MSG_SEGMENT_RETIRE:
        ((struct lt_msg_segment_retire *)(void *)m.p)->segment = rnd_segment();
        break;
    case LT_MSG_SEGMENT_RETIRED: {
        struct lt_msg_segment_retired *r = (void *)m.p;
        r->segment = rnd_segment();
        r->cookie = rnd();
        break;
    }
    case LT_MSG_LEASE_REQUEST: {
        struct lt_msg_lease_request *q = (void *)m.p;
        q->flags = (uint32_t)rnd() & LT_LEASE_REQ_F_KNOWN;
        for (uint32_t k = 0; k < count; k++) {
            q->entries[k].segment = rnd_segment();
            q->entries[k].offset = rnd_below(1ull << 39);
            q->entries[k].length = 1 + rnd_below(1ull << 39);
            q->entries[k].mem_class = rnd_class();
            q->entries[k].flags = (uint32_t)rnd() & LT_LEASE_F_KNOWN;
        }
        break;
    }
    case LT_MSG_LEASE_GRANT: {
        struct lt_msg_lease_grant *g = (void *)m.p;
        for (uint32_t k = 0; k < count; k++) {
            int ok = (variant & V_ALL_OK) || (!(variant & V_ALL_REFUSED) && rnd_below(2));
            if (ok) {
                g->entries[k].lease = rnd_lease();
                g->entries[k].mem_class = rnd_class();
            } else {
                g->entries[k].status = 1 + (uint32_t)rnd_below(LT_E__COUNT - 1);
            }
        }
        break;
    }
    case LT_MSG_LEASE_RELEASE: {
        struct lt_msg_lease_release *r = (void *)m.p;
        uint32_t base = (uint32_t)rnd_below(UINT32_MAX - 2 * LT_MAX_BATCH);
        for (uint32_t k = 0; k < count; k++)
            r->leases[k] = lt_lease_id_make(base + k, rnd_gen());
        break;
    }
    case LT_MSG_RELEASE_COMPLETE: {
        struct lt_msg_release_complete *r = (void *)m.p;
        r->lease = rnd_lease();
        r->status = (uint32_t)rnd_below(LT_E__COUNT);
        break;
    }
    case LT_MSG_RELEASE_COMPLETE_BATCH: {
        struct lt_msg_release_complete_batch *r = (void *)m.p;
        uint32_t base = (uint32_t)rnd_below(UINT32_MAX - 2 * LT_MAX_BATCH);
        for (uint32_t k = 0; k < count; k++) {
            r->entries[k].lease = lt_lease_id_make(base + k, rnd_gen());
            r->entries[k].status = (uint32_t)rnd_below(LT_E__COUNT);
        }
        break;
    }
    case LT_MSG_SUBMIT: {
        struct lt_msg_submit *s = (void *)m.p;
        uint32_t flags = (uint32_t)rnd() & LT_SUBMIT_F_KNOWN;
        if (variant & V_WORDS)
            flags |= LT_SUBMIT_F_WAIT_BELL | LT_SUBMIT_F_SIGNAL_DONE;
        if (variant & V_NO_WORDS)
            flags &= ~(LT_SUBMIT_F_WAIT_BELL | LT_SUBMIT_F_SIGNAL_DONE);
        s->lease = rnd_lease();
        s->stream = rnd_stream_usable();
        s->op = (uint16_t)(op ? op : LT_OP_FIRST + rnd_below(LT_OP_LAST));
        s->flags = flags;
        if (flags & LT_SUBMIT_F_WAIT_BELL)
            fill_word(&s->bell, &s->bell_seq);
        if (flags & LT_SUBMIT_F_SIGNAL_DONE)
            fill_word(&s->done, &s->done_seq);
        fill_args(s->op, variant, &s->args);
        break;
    }
    case LT_MSG_COMPLETION: {
        struct lt_msg_completion *c = (void *)m.p;
        c->lease = rnd_lease();
        c->op = (uint16_t)(op ? op : LT_OP_FIRST + rnd_below(LT_OP_LAST));
        c->status = (uint32_t)rnd_below(LT_E__COUNT);
        c->detail = (uint32_t)rnd();
        c->elapsed_ns = rnd();
        fill_result(c->op, variant, &c->result);
        break;
    }
    case LT_MSG_STREAM_CREATE:
    case LT_MSG_STREAM_VALIDATE:
    case LT_MSG_STREAM_QUERY:
    case LT_MSG_STREAM_SYNCHRONIZE:
    case LT_MSG_STREAM_DESTROY: {
        struct lt_msg_stream_cmd *s = (void *)m.p;
        if (type == LT_MSG_STREAM_CREATE)
            s->flags = (uint32_t)rnd() & LT_STREAM_F_KNOWN;
        else if (type == LT_MSG_STREAM_DESTROY)
            s->stream = rnd_stream_issued();
        else
            s->stream = rnd_stream_usable();
        break;
    }
    case LT_MSG_EVENT_RECORD:
    case LT_MSG_EVENT_WAIT:
    case LT_MSG_EVENT_QUERY:
    case LT_MSG_EVENT_SYNCHRONIZE:
    case LT_MSG_EVENT_DESTROY:
    case LT_MSG_EVENT_ELAPSED: {
        struct lt_msg_event_cmd *e = (void *)m.p;
        if (type == LT_MSG_EVENT_RECORD) {
            int create = (variant & V_NEW) || (!(variant & V_RERECORD) && rnd_below(2));
            if (create)
                e->flags = (uint32_t)rnd() & LT_EVENT_F_KNOWN;
            else
                e->event = rnd_event();
        } else {
            e->event = rnd_event();
        }
        if (type == LT_MSG_EVENT_ELAPSED)
            e->end = rnd_event();
        if (type == LT_MSG_EVENT_RECORD || type == LT_MSG_EVENT_WAIT)
            e->stream = rnd_stream_usable();
        break;
    }
    case LT_MSG_DEVICE_SYNCHRONIZE:
        break;
    case LT_MSG_CTL_REPLY: {
        struct lt_msg_ctl_reply *c = (void *)m.p;
        uint16_t rt = (uint16_t)(op ? op : LT_MSG_STREAM_CREATE + rnd_below(12));
        c->request_type = rt;
        if (rt == LT_MSG_STREAM_QUERY || rt == LT_MSG_EVENT_QUERY)
            c->ready = (uint32_t)rnd_below(2);
        if (rt == LT_MSG_STREAM_CREATE)
            c->stream = rnd_stream_issued();
        if (rt == LT_MSG_EVENT_RECORD)
            c->event = rnd_event();
        if (rt == LT_MSG_EVENT_ELAPSED) {
            float ms = (float)rnd_below(100000000) / 1000.0f;
            c->elapsed_ms_bits = lt_f32_to_bits(rnd_below(4) ? ms : -ms);
        }
        break;
    }
    case LT_MSG_STATS_REQUEST:
        ((struct lt_msg_stats_request *)(void *)m.p)->flags = (uint32_t)rnd() & LT_STATS_F_KNOWN;
        break;
    case LT_MSG_STATS_REPLY: {
        struct lt_msg_stats_reply *s = (void *)m.p;
        uint32_t base = (uint32_t)rnd_below(UINT32_MAX - 2 * LT_MAX_STATS_CLIENTS);
        s->uptime_ns = rnd();
        for (int c = LT_CLASS_STAGED; c < LT_CLASS_SLOTS; c++) {
            uint64_t *f = &s->classes[c].segments;
            for (size_t i = 0; i < sizeof s->classes[c] / sizeof *f; i++)
                f[i] = rnd();
        }
        for (uint32_t k = 0; k < count; k++) {
            struct lt_client_stats *c = &s->clients[k];
            c->client_id = base + k + 1;
            c->pid = (uint32_t)rnd();
            rnd_name(c->name, sizeof c->name);
            c->segments = rnd();
            c->bytes_registered = rnd();
            c->live_leases = rnd();
            c->bytes_leased = rnd();
            c->leases_granted = rnd();
            c->submits = rnd();
            c->streams = (uint32_t)rnd();
            c->events = (uint32_t)rnd();
        }
        break;
    }
    case LT_MSG_ERROR: {
        struct lt_msg_error *e = (void *)m.p;
        e->code = 1 + (uint32_t)rnd_below(LT_E__COUNT - 1);
        e->err = rnd_below(2) ? lt_error_errno(e->code) : -(int32_t)(1 + rnd_below(4095));
        e->failed_type = (uint16_t)rnd();
        e->index = rnd_below(2) ? LT_INDEX_NONE : (uint32_t)rnd_below(LT_MAX_BATCH);
        rnd_name(e->message, sizeof e->message);
        if (rnd_below(4) == 0)
            e->hdr.request_id = 0; /* an ERROR about an unreadable message */
        break;
    }
    case LT_MSG_WORDS_REQUEST:
        ((struct lt_msg_words_request *)(void *)m.p)->bytes =
            4096u * (1 + (uint32_t)rnd_below(LT_WORDS_MAX_BYTES / 4096));
        break;
    case LT_MSG_WORDS_GRANT: {
        struct lt_msg_words_grant *g = (void *)m.p;
        g->segment = rnd_segment();
        g->size = 4096u * (1 + rnd_below(LT_WORDS_MAX_BYTES / 4096));
        break;
    }
    case LT_MSG_LEASE_LIST_REQUEST:
    case LT_MSG_SEGMENT_LIST_REQUEST: {
        struct lt_msg_list_request *q = (void *)m.p;
        q->client_id = rnd_below(2) ? 0 : (uint32_t)rnd();
        q->cursor = rnd_below(2) ? 0 : rnd();
        break;
    }
    case LT_MSG_LEASE_LIST_REPLY: {
        struct lt_msg_lease_list_reply *r = (void *)m.p;
        uint32_t base = (uint32_t)rnd_below(UINT32_MAX - 2 * LT_LIST_MAX_ENTRIES);
        if (rnd_below(2)) {
            r->flags = LT_LIST_F_MORE;
            r->next_cursor = 1 + rnd_below(UINT64_MAX);
        }
        for (uint32_t k = 0; k < count; k++) {
            struct lt_lease_info *e = &r->entries[k];
            e->lease = lt_lease_id_make(base + k, rnd_gen());
            e->segment = rnd_segment();
            e->client_id = rnd_gen();
            e->mem_class = rnd_class();
            e->offset = rnd_below(1ull << 39);
            e->length = 1 + rnd_below(1ull << 39);
            e->age_ns = rnd();
            e->work_inflight = (uint32_t)rnd();
            e->state = LT_LEASE_STATE_HELD + (uint32_t)rnd_below(2);
        }
        break;
    }
    case LT_MSG_SEGMENT_LIST_REPLY: {
        struct lt_msg_segment_list_reply *r = (void *)m.p;
        uint32_t base = (uint32_t)rnd_below(UINT32_MAX - 2 * LT_LIST_MAX_ENTRIES);
        if (rnd_below(2)) {
            r->flags = LT_LIST_F_MORE;
            r->next_cursor = 1 + rnd_below(UINT64_MAX);
        }
        for (uint32_t k = 0; k < count; k++) {
            struct lt_segment_info *e = &r->entries[k];
            e->segment = lt_segment_id_make(base + k, rnd_gen());
            e->client_id = rnd_gen();
            e->mem_class = rnd_class();
            e->size = LT_SEGMENT_ALIGN * (1 + rnd_below(LT_SEGMENT_SIZE_MAX / LT_SEGMENT_ALIGN));
            e->cookie = rnd();
            e->age_ns = rnd();
            e->registration_ns = rnd();
            e->live_leases = (uint32_t)rnd();
            e->holds = (uint32_t)rnd();
            e->flags = (uint32_t)rnd() & LT_SEGMENT_INFO_F_KNOWN;
            e->page_kib = 4u << rnd_below(20);
        }
        break;
    }
    case LT_MSG_RING_OPEN: {
        struct lt_msg_ring_open *o = (void *)m.p;
        o->slots = rnd_lease();
        do
            o->words = rnd_lease();
        while (lt_lease_id_eq(o->words, o->slots));
        o->slot_bytes =
            LT_RING_SLOT_ALIGN * (1 + rnd_below(LT_RING_SLOT_BYTES_MAX / LT_RING_SLOT_ALIGN));
        o->nslots = 1 + (uint32_t)rnd_below(LT_RING_SLOTS_MAX);
        o->depth = 1 + (uint32_t)rnd_below(LT_RING_DEPTH_MAX);
        /* the two arrays apart, in either order */
        uint64_t a = 8 * rnd_below(1ull << 30), b = a + 8ull * o->nslots + 8 * rnd_below(1000);
        o->seq_offset = rnd_below(2) ? a : b;
        o->done_offset = o->seq_offset == a ? b : a;
        o->max_shard_bytes = 1 + rnd_below(LT_SEGMENT_SIZE_MAX);
        break;
    }
    case LT_MSG_RING_OPENED: {
        struct lt_msg_ring_opened *o = (void *)m.p;
        o->ring = rnd_ring();
        o->depth = 1 + (uint32_t)rnd_below(LT_RING_DEPTH_MAX);
        o->nslots = 1 + (uint32_t)rnd_below(LT_RING_SLOTS_MAX);
        o->max_shard_bytes = 1 + rnd_below(LT_SEGMENT_SIZE_MAX);
        break;
    }
    case LT_MSG_RING_SHARD: {
        struct lt_msg_ring_shard *r = (void *)m.p;
        r->ring = rnd_ring();
        r->first_seq = 1 + rnd_below(UINT64_MAX);
        r->length = 1 + rnd_below(LT_SEGMENT_SIZE_MAX);
        r->op = (uint16_t)(op ? op : LT_OP_FIRST + rnd_below(LT_OP_LAST));
        fill_args(r->op, variant, &r->args);
        break;
    }
    case LT_MSG_RING_CLOSE:
        ((struct lt_msg_ring_close *)(void *)m.p)->ring = rnd_ring();
        break;
    case LT_MSG_RING_CLOSED: {
        struct lt_msg_ring_closed *r = (void *)m.p;
        r->ring = rnd_ring();
        r->shards = rnd();
        r->chunks = rnd();
        break;
    }
    default:
        ck_abort_msg("build: no builder for type %u", type);
    }
    return m;
}

/* ---- Validators by type ---- */

typedef enum lt_error (*validator_fn)(const void *buf, size_t len);

static validator_fn validator_for(uint32_t type)
{
    switch (type) {
    case LT_MSG_HELLO:
        return lt_validate_hello;
    case LT_MSG_HELLO_REPLY:
        return lt_validate_hello_reply;
    case LT_MSG_SEGMENT_OFFER:
        return lt_validate_segment_offer;
    case LT_MSG_SEGMENT_ACCEPT:
        return lt_validate_segment_accept;
    case LT_MSG_SEGMENT_RETIRE:
        return lt_validate_segment_retire;
    case LT_MSG_SEGMENT_RETIRED:
        return lt_validate_segment_retired;
    case LT_MSG_LEASE_REQUEST:
        return lt_validate_lease_request;
    case LT_MSG_LEASE_GRANT:
        return lt_validate_lease_grant;
    case LT_MSG_LEASE_RELEASE:
        return lt_validate_lease_release;
    case LT_MSG_RELEASE_COMPLETE:
        return lt_validate_release_complete;
    case LT_MSG_RELEASE_COMPLETE_BATCH:
        return lt_validate_release_complete_batch;
    case LT_MSG_SUBMIT:
        return lt_validate_submit;
    case LT_MSG_COMPLETION:
        return lt_validate_completion;
    case LT_MSG_STREAM_CREATE:
    case LT_MSG_STREAM_VALIDATE:
    case LT_MSG_STREAM_QUERY:
    case LT_MSG_STREAM_SYNCHRONIZE:
    case LT_MSG_STREAM_DESTROY:
        return lt_validate_stream_cmd;
    case LT_MSG_EVENT_RECORD:
    case LT_MSG_EVENT_WAIT:
    case LT_MSG_EVENT_QUERY:
    case LT_MSG_EVENT_SYNCHRONIZE:
    case LT_MSG_EVENT_DESTROY:
    case LT_MSG_EVENT_ELAPSED:
        return lt_validate_event_cmd;
    case LT_MSG_DEVICE_SYNCHRONIZE:
        return lt_validate_device_sync;
    case LT_MSG_CTL_REPLY:
        return lt_validate_ctl_reply;
    case LT_MSG_STATS_REQUEST:
        return lt_validate_stats_request;
    case LT_MSG_STATS_REPLY:
        return lt_validate_stats_reply;
    case LT_MSG_ERROR:
        return lt_validate_error;
    case LT_MSG_WORDS_REQUEST:
        return lt_validate_words_request;
    case LT_MSG_WORDS_GRANT:
        return lt_validate_words_grant;
    case LT_MSG_LEASE_LIST_REQUEST:
    case LT_MSG_SEGMENT_LIST_REQUEST:
        return lt_validate_list_request;
    case LT_MSG_LEASE_LIST_REPLY:
        return lt_validate_lease_list_reply;
    case LT_MSG_SEGMENT_LIST_REPLY:
        return lt_validate_segment_list_reply;
    case LT_MSG_RING_OPEN:
        return lt_validate_ring_open;
    case LT_MSG_RING_OPENED:
        return lt_validate_ring_opened;
    case LT_MSG_RING_SHARD:
        return lt_validate_ring_shard;
    case LT_MSG_RING_CLOSE:
        return lt_validate_ring_close;
    case LT_MSG_RING_CLOSED:
        return lt_validate_ring_closed;
    default:
        return NULL;
    }
}

/* Every way of validating @type's bytes must say @expect: its own
 * validator, lt_validate, the direction-checked one for the side that
 * receives it, and lt_validate in another TU. */
static void expect_everywhere(uint16_t type, const void *p, size_t len, enum lt_error expect,
                              const char *what)
{
    struct lt_msg_info info = lt_msg_info(type);
    enum lt_error own = validator_for(type)(p, len);
    enum lt_error any = lt_validate(p, len, NULL);
    int other = lt_test_second_tu_validate(p, len);
    ck_assert_msg(own == expect, "%s %s: expected %s, found %s from its validator", info.name, what,
                  lt_error_name(expect), lt_error_name(own));
    ck_assert_msg(any == expect, "%s %s: expected %s, found %s from lt_validate", info.name, what,
                  lt_error_name(expect), lt_error_name(any));
    ck_assert_msg(other == (expect == LT_OK ? (int)type : -(int)expect),
                  "%s %s: expected %s from the second TU, found %d", info.name, what,
                  lt_error_name(expect), other);
    if (info.dir & LT_DIR_TO_AGENT)
        ck_assert_int_eq(lt_validate_from_client(p, len, NULL), expect);
    if (info.dir & LT_DIR_TO_CLIENT)
        ck_assert_int_eq(lt_validate_from_agent(p, len, NULL), expect);
}

static void put_le(unsigned char *p, unsigned width, uint64_t v)
{
    memcpy(p, &v, width); /* little-endian host: the low bytes */
}

static uint64_t get_le(const unsigned char *p, unsigned width)
{
    uint64_t v = 0;
    memcpy(&v, p, width);
    return v;
}

static uint32_t msg_count(const struct msg *m)
{
    return (uint32_t)get_le(m->p + 24, 4);
}

/* ---- Valid messages ---- */

START_TEST(valid_messages_of_every_type_pass)
{
    rng_seed(1);
    for (uint16_t t = LT_MSG_TYPE_FIRST; t <= LT_MSG_TYPE_LAST; t++) {
        if (!type_defined(t))
            continue;
        for (int iter = 0; iter < 300; iter++) {
            struct msg m = build(t, V_ANY, COUNT_RANDOM);
            uint16_t got = 0;
            struct lt_msg_info info = lt_msg_info(t);
            expect_everywhere(t, m.p, m.len, LT_OK, "as built");
            ck_assert_int_eq(lt_validate(m.p, m.len, &got), LT_OK);
            ck_assert_uint_eq(got, t);
            if (info.dir == LT_DIR_TO_AGENT)
                ck_assert_int_eq(lt_validate_from_agent(m.p, m.len, &got), LT_E_WRONG_DIRECTION);
            if (info.dir == LT_DIR_TO_CLIENT)
                ck_assert_int_eq(lt_validate_from_client(m.p, m.len, &got), LT_E_WRONG_DIRECTION);
            free(m.p);
        }
    }
}
END_TEST

START_TEST(largest_batches_pass_and_fit_the_buffer)
{
    rng_seed(2);
    const uint16_t batched[] = {LT_MSG_LEASE_REQUEST,          LT_MSG_LEASE_GRANT,
                                LT_MSG_LEASE_RELEASE,          LT_MSG_STATS_REPLY,
                                LT_MSG_RELEASE_COMPLETE_BATCH, LT_MSG_LEASE_LIST_REPLY,
                                LT_MSG_SEGMENT_LIST_REPLY};
    for (size_t i = 0; i < sizeof batched / sizeof *batched; i++) {
        struct lt_msg_info info = lt_msg_info(batched[i]);
        struct msg m = build(batched[i], V_ANY, info.max_count);
        ck_assert_uint_le(m.len, LT_MSG_MAX_BYTES);
        expect_everywhere(batched[i], m.p, m.len, LT_OK, "at the maximum count");
        free(m.p);
    }
    /* the largest message is exactly LT_MSG_MAX_BYTES */
    size_t size = 0;
    ck_assert_int_eq(lt_msg_size(LT_MSG_LEASE_REQUEST, LT_MAX_BATCH, &size), LT_OK);
    ck_assert_uint_eq(size, LT_MSG_MAX_BYTES);
    ck_assert_uint_ge(sizeof(union lt_msg_buffer), LT_MSG_MAX_BYTES + 1);
}
END_TEST

/* ---- Header corruptions, every type ---- */

START_TEST(header_corruptions_give_their_codes)
{
    rng_seed(3);
    for (uint16_t t = LT_MSG_TYPE_FIRST; t <= LT_MSG_TYPE_LAST; t++) {
        if (!type_defined(t))
            continue;
        for (int iter = 0; iter < 20; iter++) {
            struct msg m = build(t, V_ANY, COUNT_RANDOM);
            struct lt_header *h = (void *)m.p;
            const struct lt_header saved = *h;

            h->magic = LT_MAGIC ^ (1u << rnd_below(32));
            expect_everywhere(t, m.p, m.len, LT_E_BAD_MAGIC, "magic bit flipped");
            h->magic = (uint32_t)rnd() | 1u; /* LT_MAGIC is odd; keep it from matching */
            if (h->magic != LT_MAGIC)
                expect_everywhere(t, m.p, m.len, LT_E_BAD_MAGIC, "random magic");
            *h = saved;

            const uint16_t versions[] = {0, 2, (uint16_t)(2 + rnd_below(0xfffe))};
            for (size_t v = 0; v < 3; v++) {
                h->version = versions[v];
                expect_everywhere(t, m.p, m.len, LT_E_BAD_VERSION, "version not 1");
            }
            *h = saved;

            /* A random unknown type: past 1.0's, skipping later minors' (known),
             * and a hole: reserved for a minor version this build lacks. */
            uint16_t unknown;
            do
                unknown = (uint16_t)(LT_MSG_TYPE_LAST + 1 + rnd_below(0xffff - LT_MSG_TYPE_LAST));
            while (lt_msg_type_is_known(unknown));
            const uint16_t types[] = {0, LT_MSG_TYPE_LAST + 1, unknown, 35};
            for (size_t k = 0; k < 4; k++) {
                h->type = types[k];
                ck_assert_int_eq(validator_for(t)(m.p, m.len), LT_E_UNKNOWN_TYPE);
                ck_assert_int_eq(lt_validate(m.p, m.len, NULL), LT_E_UNKNOWN_TYPE);
                ck_assert_int_eq(lt_validate_from_client(m.p, m.len, NULL), LT_E_UNKNOWN_TYPE);
            }
            /* a defined type another validator owns */
            uint16_t other;
            do
                other = rnd_type();
            while (validator_for(other) == validator_for(t));
            h->type = other;
            h->request_id |= 1; /* an ERROR may carry 0, which other types refuse first */
            ck_assert_msg(validator_for(t)(m.p, m.len) == LT_E_WRONG_TYPE,
                          "%s validator given a %s header", lt_msg_type_name(t),
                          lt_msg_type_name(other));
            *h = saved;

            const uint32_t lengths[] = {(uint32_t)m.len - 1, (uint32_t)m.len + 1,
                                        (uint32_t)m.len + 8, 0, UINT32_MAX};
            for (size_t k = 0; k < 5; k++) {
                h->length = lengths[k];
                expect_everywhere(t, m.p, m.len, LT_E_LENGTH_MISMATCH,
                                  "header length differs from bytes received");
            }
            *h = saved;

            h->flags = (uint16_t)(1u << rnd_below(16));
            expect_everywhere(t, m.p, m.len, LT_E_UNKNOWN_FLAGS, "header flag bit set");
            *h = saved;

            h->reserved = (uint16_t)(1u << rnd_below(16));
            expect_everywhere(t, m.p, m.len, LT_E_RESERVED_NONZERO, "header reserved set");
            *h = saved;

            h->request_id = 0;
            expect_everywhere(t, m.p, m.len, t == LT_MSG_ERROR ? LT_OK : LT_E_BAD_REQUEST_ID,
                              "request id 0");
            free(m.p);
        }
    }
}
END_TEST

START_TEST(short_and_long_lengths_give_bad_length)
{
    rng_seed(4);
    for (uint16_t t = LT_MSG_TYPE_FIRST; t <= LT_MSG_TYPE_LAST; t++) {
        if (!type_defined(t))
            continue;
        struct msg m = build(t, V_ANY, COUNT_RANDOM);
        struct lt_msg_info info = lt_msg_info(t);
        /* shorter, with the header agreeing: every length from a bare header up */
        for (size_t len = sizeof(struct lt_header); len < m.len; len++) {
            unsigned char *p = malloc(len);
            ck_assert_ptr_nonnull(p);
            memcpy(p, m.p, len);
            ((struct lt_header *)(void *)p)->length = (uint32_t)len;
            expect_everywhere(t, p, len, LT_E_BAD_LENGTH, "shortened, header agreeing");
            free(p);
        }
        /* longer: trailing bytes, and for batches one entry more than the count says */
        size_t extra[] = {1, 7, 8, 64, info.entry ? info.entry : 16};
        for (size_t k = 0; k < sizeof extra / sizeof *extra; k++) {
            size_t len = m.len + extra[k];
            unsigned char *p = calloc(1, len);
            ck_assert_ptr_nonnull(p);
            memcpy(p, m.p, m.len);
            ((struct lt_header *)(void *)p)->length = (uint32_t)len;
            expect_everywhere(t, p, len, LT_E_BAD_LENGTH, "lengthened, header agreeing");
            free(p);
        }
        free(m.p);
    }
}
END_TEST

START_TEST(truncated_buffers_are_refused_without_overread)
{
    rng_seed(5);
    for (uint16_t t = LT_MSG_TYPE_FIRST; t <= LT_MSG_TYPE_LAST; t++) {
        if (!type_defined(t))
            continue;
        for (int iter = 0; iter < 3; iter++) {
            struct msg m = build(t, V_ANY, COUNT_RANDOM);
            for (size_t len = 0; len < m.len; len++) {
                /* exactly len bytes on the heap: ASan reports any read past them */
                unsigned char *p = malloc(len);
                ck_assert(len == 0 || p != NULL);
                if (len)
                    memcpy(p, m.p, len);
                expect_everywhere(t, p, len,
                                  len < sizeof(struct lt_header) ? LT_E_TRUNCATED
                                                                 : LT_E_LENGTH_MISMATCH,
                                  "truncated");
                free(p);
            }
            free(m.p);
        }
    }
}
END_TEST

START_TEST(misaligned_buffers_are_refused)
{
    rng_seed(6);
    struct msg m = build(LT_MSG_HELLO, V_ANY, 0);
    unsigned char *p = malloc(m.len + 8);
    ck_assert_ptr_nonnull(p);
    for (size_t shift = 1; shift < 8; shift++) {
        memcpy(p + shift, m.p, m.len);
        ck_assert_int_eq(lt_validate(p + shift, m.len, NULL), LT_E_UNALIGNED);
        ck_assert_int_eq(lt_validate_hello(p + shift, m.len), LT_E_UNALIGNED);
    }
    free(p);
    free(m.p);
}
END_TEST

/* ---- Field corruptions, message by message ---- */

enum kind {
    K_WRITE,          /* store value in the field (width bytes) */
    K_ADD,            /* add value to the field */
    K_FILL,           /* fill the whole field with the byte value */
    K_NAME_PAD,       /* a nonzero byte somewhere after the name's NUL */
    K_NAME_EMPTY,     /* an all-zero name */
    K_NAME_CHAR,      /* one of the name's characters becomes value */
    K_COUNT,          /* the batch count becomes value, the length stays */
    K_COUNT_DELTA,    /* the batch count moves by (int32)value, the length stays */
    K_RANGE_WRAP,     /* offset field = 2^64 - the length field after it: the end wraps to 0 */
    K_RANGE_AT_LIMIT, /* offset + length == LT_SEGMENT_SIZE_MAX: still valid */
    K_RANGE_PAST,     /* offset + length == LT_SEGMENT_SIZE_MAX + 1 */
    K_DUP,            /* the last entry's field copies the first's */
};

struct corruption {
    uint16_t type;
    unsigned variant;
    const char *what;
    enum kind kind;
    int entry; /* the offset is inside a randomly chosen batch entry */
    size_t off;
    unsigned width;
    uint64_t value;
    enum lt_error expect;
};

#define FLD(s, f) offsetof(struct s, f), (unsigned)sizeof(((struct s *)0)->f)
#define CW(t, v, s, f, val, exp)                                                                   \
    {                                                                                              \
        t, v, #f " = " #val, K_WRITE, 0, FLD(s, f), (uint64_t)(val), exp                           \
    }
#define CE(t, v, s, f, val, exp)                                                                   \
    {                                                                                              \
        t, v, "entry " #f " = " #val, K_WRITE, 1, FLD(s, f), (uint64_t)(val), exp                  \
    }
#define CK(t, v, kind, ent, s, f, val, exp)                                                        \
    {                                                                                              \
        t, v, #kind " " #f " " #val, kind, ent, FLD(s, f), (uint64_t)(val), exp                    \
    }
#define NAME_CASES(t, v, ent, s, f)                                                                \
    CK(t, v, K_FILL, ent, s, f, 'a', LT_E_NAME_UNTERMINATED),                                      \
        CK(t, v, K_NAME_PAD, ent, s, f, 'x', LT_E_NAME_PADDING),                                   \
        CK(t, v, K_NAME_PAD, ent, s, f, 0xff, LT_E_NAME_PADDING),                                  \
        CK(t, v, K_NAME_EMPTY, ent, s, f, 0, LT_E_NAME_EMPTY),                                     \
        CK(t, v, K_NAME_CHAR, ent, s, f, '\n', LT_E_NAME_BAD_CHAR),                                \
        CK(t, v, K_NAME_CHAR, ent, s, f, 0x7f, LT_E_NAME_BAD_CHAR),                                \
        CK(t, v, K_NAME_CHAR, ent, s, f, 0xc3, LT_E_NAME_BAD_CHAR)
#define COUNT_CASES(t, max, zero_code)                                                             \
    CK(t, 0, K_COUNT, 0, lt_header, magic, (max) + 1, LT_E_BATCH_TOO_LARGE),                       \
        CK(t, 0, K_COUNT, 0, lt_header, magic, UINT32_MAX, LT_E_BATCH_TOO_LARGE),                  \
        CK(t, 0, K_COUNT, 0, lt_header, magic, 0, zero_code),                                      \
        CK(t, 0, K_COUNT_DELTA, 0, lt_header, magic, -1, LT_E_BAD_LENGTH),                         \
        CK(t, 0, K_COUNT_DELTA, 0, lt_header, magic, 1, LT_E_BAD_LENGTH)

/* A whole id as one field, for K_DUP on release entries. */
struct whole_lease_id {
    struct lt_lease_id id;
};

#define SEGMAX LT_SEGMENT_SIZE_MAX
#define CSUM LT_OP_CHECKSUM_VERIFY
#define SCAN LT_OP_VECTOR_SCAN
#define COPY LT_OP_COPY_H2D

/* clang-format off */
static const struct corruption corruptions[] = {
    /* HELLO */
    CW(LT_MSG_HELLO, 0, lt_msg_hello, version_min, 0, LT_E_BAD_VERSION),
    CW(LT_MSG_HELLO, 0, lt_msg_hello, version_min, 2, LT_E_BAD_VERSION),
    CW(LT_MSG_HELLO, 0, lt_msg_hello, version_max, 0, LT_E_BAD_VERSION),
    CW(LT_MSG_HELLO, 0, lt_msg_hello, version_max, 0xffff, LT_OK),
    CW(LT_MSG_HELLO, 0, lt_msg_hello, caps, 1u << 31, LT_OK), /* a newer client's cap */
    CW(LT_MSG_HELLO, 0, lt_msg_hello, caps, LT_CAP_HOST_BACKEND, LT_E_UNKNOWN_FLAGS),
    CW(LT_MSG_HELLO, 0, lt_msg_hello, caps, 1u << 5, LT_OK),
    CW(LT_MSG_HELLO, 0, lt_msg_hello, caps, LT_CAP_RC_BATCH, LT_OK),
    NAME_CASES(LT_MSG_HELLO, 0, 0, lt_msg_hello, name),

    /* HELLO_REPLY */
    CW(LT_MSG_HELLO_REPLY, 0, lt_msg_hello_reply, version, 0, LT_E_BAD_VERSION),
    CW(LT_MSG_HELLO_REPLY, 0, lt_msg_hello_reply, version, 2, LT_E_BAD_VERSION),
    CW(LT_MSG_HELLO_REPLY, 0, lt_msg_hello_reply, reserved0, 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_HELLO_REPLY, 0, lt_msg_hello_reply, reserved1, 1u << 31, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_HELLO_REPLY, 0, lt_msg_hello_reply, caps, 1u << 10, LT_E_UNKNOWN_FLAGS), /* not yet defined */
    CW(LT_MSG_HELLO_REPLY, 0, lt_msg_hello_reply, caps, LT_CAP_WORDS, LT_OK), /* bit 7: 1.3 */
    CW(LT_MSG_HELLO_REPLY, 0, lt_msg_hello_reply, caps, LT_CAP_STREAM, LT_OK), /* bit 5: 1.1 */
    CW(LT_MSG_HELLO_REPLY, 0, lt_msg_hello_reply, caps, LT_CAP_LAUNCH, LT_OK), /* bit 6: 1.2 */
    CW(LT_MSG_HELLO_REPLY, 0, lt_msg_hello_reply, caps, LT_CAP_RC_BATCH, LT_OK),
    CW(LT_MSG_HELLO_REPLY, 0, lt_msg_hello_reply, caps, LT_CAP_INTROSPECT, LT_OK),
    CW(LT_MSG_HELLO_REPLY, 0, lt_msg_hello_reply, caps, 1u << 9, LT_E_UNKNOWN_FLAGS),
    CW(LT_MSG_HELLO_REPLY, 0, lt_msg_hello_reply, client_id, 0, LT_E_BAD_ID),
    CW(LT_MSG_HELLO_REPLY, 0, lt_msg_hello_reply, max_lease_batch, 0, LT_E_BAD_VALUE),
    CW(LT_MSG_HELLO_REPLY, 0, lt_msg_hello_reply, max_lease_batch, LT_MAX_BATCH + 1, LT_E_BAD_VALUE),
    CW(LT_MSG_HELLO_REPLY, 0, lt_msg_hello_reply, max_lease_batch, LT_MAX_BATCH, LT_OK),
    CW(LT_MSG_HELLO_REPLY, 0, lt_msg_hello_reply, max_segment_bytes, 0, LT_E_ZERO_LENGTH),
    CW(LT_MSG_HELLO_REPLY, 0, lt_msg_hello_reply, max_segment_bytes, 4097, LT_E_MISALIGNED),
    CW(LT_MSG_HELLO_REPLY, 0, lt_msg_hello_reply, max_segment_bytes, SEGMAX + 4096, LT_E_OUT_OF_RANGE),
    CW(LT_MSG_HELLO_REPLY, 0, lt_msg_hello_reply, max_segment_bytes, UINT64_MAX, LT_E_MISALIGNED),
    CW(LT_MSG_HELLO_REPLY, 0, lt_msg_hello_reply, class_budget[0], 1, LT_E_RESERVED_NONZERO),
    NAME_CASES(LT_MSG_HELLO_REPLY, 0, 0, lt_msg_hello_reply, agent_name),

    /* SEGMENT_OFFER */
    CW(LT_MSG_SEGMENT_OFFER, 0, lt_msg_segment_offer, size, 0, LT_E_ZERO_LENGTH),
    CW(LT_MSG_SEGMENT_OFFER, 0, lt_msg_segment_offer, size, 4095, LT_E_MISALIGNED),
    CW(LT_MSG_SEGMENT_OFFER, 0, lt_msg_segment_offer, size, UINT64_MAX, LT_E_MISALIGNED),
    CW(LT_MSG_SEGMENT_OFFER, 0, lt_msg_segment_offer, size, SEGMAX + 4096, LT_E_OUT_OF_RANGE),
    CW(LT_MSG_SEGMENT_OFFER, 0, lt_msg_segment_offer, size, UINT64_MAX - 4095, LT_E_OUT_OF_RANGE),
    CW(LT_MSG_SEGMENT_OFFER, 0, lt_msg_segment_offer, size, SEGMAX, LT_OK),
    CW(LT_MSG_SEGMENT_OFFER, 0, lt_msg_segment_offer, mem_class, 0, LT_E_BAD_CLASS),
    CW(LT_MSG_SEGMENT_OFFER, 0, lt_msg_segment_offer, mem_class, 4, LT_E_BAD_CLASS),
    CW(LT_MSG_SEGMENT_OFFER, 0, lt_msg_segment_offer, mem_class, UINT32_MAX, LT_E_BAD_CLASS),
    CW(LT_MSG_SEGMENT_OFFER, 0, lt_msg_segment_offer, reserved, 1, LT_E_RESERVED_NONZERO),

    /* SEGMENT_ACCEPT, RETIRE, RETIRED */
    CW(LT_MSG_SEGMENT_ACCEPT, 0, lt_msg_segment_accept, segment.gen, 0, LT_E_BAD_ID),
    CW(LT_MSG_SEGMENT_ACCEPT, 0, lt_msg_segment_accept, size, 0, LT_E_ZERO_LENGTH),
    CW(LT_MSG_SEGMENT_ACCEPT, 0, lt_msg_segment_accept, size, 100, LT_E_MISALIGNED),
    CW(LT_MSG_SEGMENT_ACCEPT, 0, lt_msg_segment_accept, mem_class, 0, LT_E_BAD_CLASS),
    CW(LT_MSG_SEGMENT_ACCEPT, 0, lt_msg_segment_accept, reserved, 0x100, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_SEGMENT_RETIRE, 0, lt_msg_segment_retire, segment.gen, 0, LT_E_BAD_ID),
    CW(LT_MSG_SEGMENT_RETIRED, 0, lt_msg_segment_retired, segment.gen, 0, LT_E_BAD_ID),

    /* LEASE_REQUEST */
    COUNT_CASES(LT_MSG_LEASE_REQUEST, LT_MAX_BATCH, LT_E_BATCH_EMPTY),
    CW(LT_MSG_LEASE_REQUEST, 0, lt_msg_lease_request, flags, 1u << 1, LT_E_UNKNOWN_FLAGS),
    CE(LT_MSG_LEASE_REQUEST, 0, lt_lease_req_entry, segment.gen, 0, LT_E_BAD_ID),
    CE(LT_MSG_LEASE_REQUEST, 0, lt_lease_req_entry, offset, UINT64_MAX, LT_E_RANGE_OVERFLOW),
    CK(LT_MSG_LEASE_REQUEST, 0, K_RANGE_WRAP, 1, lt_lease_req_entry, offset, 0, LT_E_RANGE_OVERFLOW),
    CK(LT_MSG_LEASE_REQUEST, 0, K_RANGE_AT_LIMIT, 1, lt_lease_req_entry, offset, 0, LT_OK),
    CK(LT_MSG_LEASE_REQUEST, 0, K_RANGE_PAST, 1, lt_lease_req_entry, offset, 0, LT_E_OUT_OF_RANGE),
    CE(LT_MSG_LEASE_REQUEST, 0, lt_lease_req_entry, length, 0, LT_E_ZERO_LENGTH),
    CE(LT_MSG_LEASE_REQUEST, 0, lt_lease_req_entry, mem_class, 0, LT_E_BAD_CLASS),
    CE(LT_MSG_LEASE_REQUEST, 0, lt_lease_req_entry, mem_class, 4, LT_E_BAD_CLASS),
    CE(LT_MSG_LEASE_REQUEST, 0, lt_lease_req_entry, flags, 1u << 1, LT_E_UNKNOWN_FLAGS),
    CE(LT_MSG_LEASE_REQUEST, 0, lt_lease_req_entry, flags, 1u << 31, LT_E_UNKNOWN_FLAGS),

    /* LEASE_GRANT */
    COUNT_CASES(LT_MSG_LEASE_GRANT, LT_MAX_BATCH, LT_E_BATCH_EMPTY),
    CW(LT_MSG_LEASE_GRANT, 0, lt_msg_lease_grant, reserved, 1, LT_E_RESERVED_NONZERO),
    CE(LT_MSG_LEASE_GRANT, 0, lt_lease_grant_entry, status, LT_E__COUNT, LT_E_BAD_VALUE),
    CE(LT_MSG_LEASE_GRANT, 0, lt_lease_grant_entry, status, UINT32_MAX, LT_E_BAD_VALUE),
    CE(LT_MSG_LEASE_GRANT, V_ALL_OK, lt_lease_grant_entry, lease.gen, 0, LT_E_BAD_ID),
    CE(LT_MSG_LEASE_GRANT, V_ALL_OK, lt_lease_grant_entry, mem_class, 0, LT_E_BAD_CLASS),
    CE(LT_MSG_LEASE_GRANT, V_ALL_OK, lt_lease_grant_entry, mem_class, 5, LT_E_BAD_CLASS),
    CE(LT_MSG_LEASE_GRANT, V_ALL_REFUSED, lt_lease_grant_entry, lease.slot, 1, LT_E_RESERVED_NONZERO),
    CE(LT_MSG_LEASE_GRANT, V_ALL_REFUSED, lt_lease_grant_entry, mem_class, LT_CLASS_PINNED, LT_E_RESERVED_NONZERO),
    CE(LT_MSG_LEASE_GRANT, V_ALL_REFUSED, lt_lease_grant_entry, status, LT_OK, LT_E_BAD_ID),

    /* LEASE_RELEASE */
    COUNT_CASES(LT_MSG_LEASE_RELEASE, LT_MAX_BATCH, LT_E_BATCH_EMPTY),
    CW(LT_MSG_LEASE_RELEASE, 0, lt_msg_lease_release, reserved, 1, LT_E_RESERVED_NONZERO),
    CE(LT_MSG_LEASE_RELEASE, 0, lt_lease_id, gen, 0, LT_E_BAD_ID),
    CK(LT_MSG_LEASE_RELEASE, 0, K_DUP, 0, whole_lease_id, id, 0, LT_E_DUPLICATE_ID),

    /* RELEASE_COMPLETE */
    CW(LT_MSG_RELEASE_COMPLETE, 0, lt_msg_release_complete, lease.gen, 0, LT_E_BAD_ID),
    CW(LT_MSG_RELEASE_COMPLETE, 0, lt_msg_release_complete, status, LT_E__COUNT, LT_E_BAD_VALUE),
    CW(LT_MSG_RELEASE_COMPLETE, 0, lt_msg_release_complete, reserved, 1, LT_E_RESERVED_NONZERO),

    /* RELEASE_COMPLETE_BATCH */
    COUNT_CASES(LT_MSG_RELEASE_COMPLETE_BATCH, LT_MAX_BATCH, LT_E_BATCH_EMPTY),
    CW(LT_MSG_RELEASE_COMPLETE_BATCH, 0, lt_msg_release_complete_batch, reserved, 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_RELEASE_COMPLETE_BATCH, 0, lt_msg_release_complete_batch, reserved, 1u << 31, LT_E_RESERVED_NONZERO),
    CE(LT_MSG_RELEASE_COMPLETE_BATCH, 0, lt_release_complete_entry, lease.gen, 0, LT_E_BAD_ID),
    CE(LT_MSG_RELEASE_COMPLETE_BATCH, 0, lt_release_complete_entry, lease, 0, LT_E_BAD_ID),
    CE(LT_MSG_RELEASE_COMPLETE_BATCH, 0, lt_release_complete_entry, status, LT_E__COUNT, LT_E_BAD_VALUE),
    CE(LT_MSG_RELEASE_COMPLETE_BATCH, 0, lt_release_complete_entry, status, UINT32_MAX, LT_E_BAD_VALUE),
    CE(LT_MSG_RELEASE_COMPLETE_BATCH, 0, lt_release_complete_entry, status, LT_E__COUNT - 1, LT_OK),
    CE(LT_MSG_RELEASE_COMPLETE_BATCH, 0, lt_release_complete_entry, reserved, 1, LT_E_RESERVED_NONZERO),
    CE(LT_MSG_RELEASE_COMPLETE_BATCH, 0, lt_release_complete_entry, reserved, 1u << 31, LT_E_RESERVED_NONZERO),
    CK(LT_MSG_RELEASE_COMPLETE_BATCH, 0, K_DUP, 0, whole_lease_id, id, 0, LT_E_DUPLICATE_ID),

    /* SUBMIT: the common part */
    CW(LT_MSG_SUBMIT, 0, lt_msg_submit, lease.gen, 0, LT_E_BAD_ID),
    CW(LT_MSG_SUBMIT, 0, lt_msg_submit, stream, 3, LT_E_BAD_ID), /* slot 3, generation 0 */
    CW(LT_MSG_SUBMIT, 0, lt_msg_submit, stream, 0, LT_OK),       /* the default stream */
    CW(LT_MSG_SUBMIT, 0, lt_msg_submit, op, 0, LT_E_BAD_OP),
    CW(LT_MSG_SUBMIT, 0, lt_msg_submit, op, LT_OP_LAST + 1, LT_E_BAD_OP),
    CW(LT_MSG_SUBMIT, 0, lt_msg_submit, op, 0xffff, LT_E_BAD_OP),
    CW(LT_MSG_SUBMIT, 0, lt_msg_submit, reserved0, 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_SUBMIT, 0, lt_msg_submit, flags, 1u << 3, LT_E_UNKNOWN_FLAGS),
    CW(LT_MSG_SUBMIT, 0, lt_msg_submit, flags, 1u << 31, LT_E_UNKNOWN_FLAGS),
    /* SUBMIT: doorbell and done words in use */
    CW(LT_MSG_SUBMIT, CSUM | V_WORDS, lt_msg_submit, bell.segment.gen, 0, LT_E_BAD_ID),
    CW(LT_MSG_SUBMIT, CSUM | V_WORDS, lt_msg_submit, bell.offset, UINT64_MAX - 7, LT_E_RANGE_OVERFLOW),
    CW(LT_MSG_SUBMIT, CSUM | V_WORDS, lt_msg_submit, bell.offset, UINT64_MAX, LT_E_RANGE_OVERFLOW),
    CW(LT_MSG_SUBMIT, CSUM | V_WORDS, lt_msg_submit, bell.offset, SEGMAX, LT_E_OUT_OF_RANGE),
    CW(LT_MSG_SUBMIT, CSUM | V_WORDS, lt_msg_submit, bell.offset, SEGMAX - 8, LT_OK),
    CW(LT_MSG_SUBMIT, CSUM | V_WORDS, lt_msg_submit, bell.offset, 12, LT_E_MISALIGNED),
    CW(LT_MSG_SUBMIT, CSUM | V_WORDS, lt_msg_submit, bell_seq, 0, LT_E_BAD_VALUE),
    CW(LT_MSG_SUBMIT, CSUM | V_WORDS, lt_msg_submit, done.segment.gen, 0, LT_E_BAD_ID),
    CW(LT_MSG_SUBMIT, CSUM | V_WORDS, lt_msg_submit, done.offset, 4, LT_E_MISALIGNED),
    CW(LT_MSG_SUBMIT, CSUM | V_WORDS, lt_msg_submit, done.offset, UINT64_MAX - 7, LT_E_RANGE_OVERFLOW),
    CW(LT_MSG_SUBMIT, CSUM | V_WORDS, lt_msg_submit, done_seq, 0, LT_E_BAD_VALUE),
    /* SUBMIT: words unused must be zero */
    CW(LT_MSG_SUBMIT, CSUM | V_NO_WORDS, lt_msg_submit, bell.segment.slot, 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_SUBMIT, CSUM | V_NO_WORDS, lt_msg_submit, bell.offset, 8, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_SUBMIT, CSUM | V_NO_WORDS, lt_msg_submit, bell_seq, 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_SUBMIT, CSUM | V_NO_WORDS, lt_msg_submit, done.segment.gen, 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_SUBMIT, CSUM | V_NO_WORDS, lt_msg_submit, done_seq, 7, LT_E_RESERVED_NONZERO),
    /* SUBMIT: checksum verify arguments */
    CK(LT_MSG_SUBMIT, CSUM, K_RANGE_WRAP, 0, lt_msg_submit, args.checksum.offset, 0, LT_E_RANGE_OVERFLOW),
    CW(LT_MSG_SUBMIT, CSUM, lt_msg_submit, args.checksum.length, 0, LT_E_ZERO_LENGTH),
    CW(LT_MSG_SUBMIT, CSUM, lt_msg_submit, args.checksum.offset, 4, LT_E_MISALIGNED),
    CW(LT_MSG_SUBMIT, CSUM, lt_msg_submit, args.checksum.block_size, 0, LT_E_BAD_VALUE),
    CW(LT_MSG_SUBMIT, CSUM, lt_msg_submit, args.checksum.block_size, 12, LT_E_MISALIGNED),
    CW(LT_MSG_SUBMIT, CSUM, lt_msg_submit, args.checksum.sums_offset, UINT64_MAX - 7, LT_E_RANGE_OVERFLOW),
    CW(LT_MSG_SUBMIT, CSUM, lt_msg_submit, args.checksum.sums_offset, SEGMAX, LT_E_OUT_OF_RANGE),
    CW(LT_MSG_SUBMIT, CSUM, lt_msg_submit, args.checksum.sums_offset, 4, LT_E_MISALIGNED),
    CW(LT_MSG_SUBMIT, CSUM, lt_msg_submit, args.checksum.reserved, 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_SUBMIT, CSUM, lt_msg_submit, args.bytes[32], 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_SUBMIT, CSUM, lt_msg_submit, args.bytes[63], 0x80, LT_E_RESERVED_NONZERO),
    /* SUBMIT: vector scan arguments */
    CW(LT_MSG_SUBMIT, SCAN, lt_msg_submit, args.scan.elem, 0, LT_E_BAD_VALUE),
    CW(LT_MSG_SUBMIT, SCAN, lt_msg_submit, args.scan.elem, 3, LT_E_BAD_VALUE),
    CW(LT_MSG_SUBMIT, SCAN, lt_msg_submit, args.scan.metric, 0, LT_E_BAD_VALUE),
    CW(LT_MSG_SUBMIT, SCAN, lt_msg_submit, args.scan.metric, 3, LT_E_BAD_VALUE),
    CW(LT_MSG_SUBMIT, SCAN, lt_msg_submit, args.scan.dim, 0, LT_E_BAD_VALUE),
    CW(LT_MSG_SUBMIT, SCAN, lt_msg_submit, args.scan.dim, LT_SCAN_DIM_MAX + 1, LT_E_BAD_VALUE),
    CK(LT_MSG_SUBMIT, SCAN, K_RANGE_WRAP, 0, lt_msg_submit, args.scan.offset, 0, LT_E_RANGE_OVERFLOW),
    CW(LT_MSG_SUBMIT, SCAN, lt_msg_submit, args.scan.length, 0, LT_E_ZERO_LENGTH),
    CK(LT_MSG_SUBMIT, SCAN, K_ADD, 0, lt_msg_submit, args.scan.length, 1, LT_E_MISALIGNED),
    CK(LT_MSG_SUBMIT, SCAN, K_ADD, 0, lt_msg_submit, args.scan.offset, 1, LT_E_MISALIGNED),
    CW(LT_MSG_SUBMIT, SCAN, lt_msg_submit, args.scan.query_offset, UINT64_MAX - 1, LT_E_RANGE_OVERFLOW),
    CW(LT_MSG_SUBMIT, SCAN, lt_msg_submit, args.scan.query_offset, SEGMAX, LT_E_OUT_OF_RANGE),
    CK(LT_MSG_SUBMIT, SCAN, K_ADD, 0, lt_msg_submit, args.scan.query_offset, 1, LT_E_MISALIGNED),
    CW(LT_MSG_SUBMIT, SCAN, lt_msg_submit, args.bytes[48], 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_SUBMIT, SCAN, lt_msg_submit, args.bytes[63], 0x80, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_SUBMIT, SCAN, lt_msg_submit, args.scan.reserved, 1, LT_E_RESERVED_NONZERO),
    /* SUBMIT: vector scan top-k */
    CW(LT_MSG_SUBMIT, SCAN | V_TOPK, lt_msg_submit, args.scan.k, LT_SCAN_MAX_K + 1, LT_E_BAD_VALUE),
    CW(LT_MSG_SUBMIT, SCAN | V_TOPK, lt_msg_submit, args.scan.k, UINT32_MAX, LT_E_BAD_VALUE),
    CW(LT_MSG_SUBMIT, SCAN | V_TOPK, lt_msg_submit, args.scan.k, LT_SCAN_MAX_K, LT_OK),
    CW(LT_MSG_SUBMIT, SCAN | V_TOPK, lt_msg_submit, args.scan.k, 1, LT_OK),
    CW(LT_MSG_SUBMIT, SCAN | V_TOPK, lt_msg_submit, args.scan.hits_offset, UINT64_MAX - 7, LT_E_RANGE_OVERFLOW),
    CW(LT_MSG_SUBMIT, SCAN | V_TOPK, lt_msg_submit, args.scan.hits_offset, SEGMAX, LT_E_OUT_OF_RANGE),
    CW(LT_MSG_SUBMIT, SCAN | V_TOPK, lt_msg_submit, args.scan.hits_offset, SEGMAX - 8, LT_E_OUT_OF_RANGE),
    CK(LT_MSG_SUBMIT, SCAN | V_TOPK, K_ADD, 0, lt_msg_submit, args.scan.hits_offset, 4, LT_E_MISALIGNED),
    CW(LT_MSG_SUBMIT, SCAN | V_TOPK, lt_msg_submit, args.scan.reserved, 1u << 31, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_SUBMIT, SCAN | V_NO_TOPK, lt_msg_submit, args.scan.hits_offset, 8, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_SUBMIT, SCAN | V_NO_TOPK, lt_msg_submit, args.scan.hits_offset, 1ull << 63, LT_E_RESERVED_NONZERO),
    /* SUBMIT: copy arguments */
    CK(LT_MSG_SUBMIT, COPY, K_RANGE_WRAP, 0, lt_msg_submit, args.copy.offset, 0, LT_E_RANGE_OVERFLOW),
    CK(LT_MSG_SUBMIT, COPY, K_RANGE_AT_LIMIT, 0, lt_msg_submit, args.copy.offset, 0, LT_OK),
    CK(LT_MSG_SUBMIT, COPY, K_RANGE_PAST, 0, lt_msg_submit, args.copy.offset, 0, LT_E_OUT_OF_RANGE),
    CW(LT_MSG_SUBMIT, COPY, lt_msg_submit, args.copy.length, 0, LT_E_ZERO_LENGTH),
    CW(LT_MSG_SUBMIT, COPY, lt_msg_submit, args.bytes[16], 0xff, LT_E_RESERVED_NONZERO),

    /* COMPLETION */
    CW(LT_MSG_COMPLETION, 0, lt_msg_completion, lease.gen, 0, LT_E_BAD_ID),
    CW(LT_MSG_COMPLETION, 0, lt_msg_completion, op, 0, LT_E_BAD_OP),
    CW(LT_MSG_COMPLETION, 0, lt_msg_completion, op, LT_OP_LAST + 1, LT_E_BAD_OP),
    CW(LT_MSG_COMPLETION, 0, lt_msg_completion, reserved0, 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_COMPLETION, 0, lt_msg_completion, reserved1, 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_COMPLETION, 0, lt_msg_completion, status, LT_E__COUNT, LT_E_BAD_VALUE),
    CW(LT_MSG_COMPLETION, CSUM | V_BAD, lt_msg_completion, result.checksum.first_bad_block, UINT64_MAX - 1, LT_E_BAD_VALUE),
    CW(LT_MSG_COMPLETION, CSUM | V_BAD, lt_msg_completion, result.checksum.bad_blocks, 0, LT_E_BAD_VALUE),
    CW(LT_MSG_COMPLETION, CSUM | V_BAD, lt_msg_completion, result.checksum.bad_blocks, UINT64_MAX, LT_E_BAD_VALUE),
    CW(LT_MSG_COMPLETION, CSUM | V_BAD, lt_msg_completion, result.bytes[40], 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_COMPLETION, CSUM | V_GOOD, lt_msg_completion, result.checksum.bad_blocks, 1, LT_E_BAD_VALUE),
    CW(LT_MSG_COMPLETION, CSUM | V_GOOD, lt_msg_completion, result.checksum.expected, 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_COMPLETION, CSUM | V_GOOD, lt_msg_completion, result.checksum.actual, 9, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_COMPLETION, SCAN | V_BAD, lt_msg_completion, result.scan.best_index, UINT64_MAX - 1, LT_E_BAD_VALUE),
    CW(LT_MSG_COMPLETION, SCAN | V_BAD, lt_msg_completion, result.scan.reserved, 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_COMPLETION, SCAN | V_BAD, lt_msg_completion, result.bytes[24], 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_COMPLETION, SCAN | V_GOOD, lt_msg_completion, result.scan.best_index, 0, LT_E_BAD_VALUE),
    CW(LT_MSG_COMPLETION, SCAN | V_GOOD, lt_msg_completion, result.scan.best_score_bits, 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_COMPLETION, COPY, lt_msg_completion, result.bytes[8], 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_COMPLETION, COPY, lt_msg_completion, result.bytes[47], 1, LT_E_RESERVED_NONZERO),

    /* STREAM_* */
    CW(LT_MSG_STREAM_CREATE, 0, lt_msg_stream_cmd, flags, 1u << 2, LT_E_UNKNOWN_FLAGS),
    CW(LT_MSG_STREAM_CREATE, 0, lt_msg_stream_cmd, stream, 0x100000001ull, LT_E_BAD_ID),
    CW(LT_MSG_STREAM_CREATE, 0, lt_msg_stream_cmd, stream.slot, 2, LT_E_BAD_ID),
    CW(LT_MSG_STREAM_CREATE, 0, lt_msg_stream_cmd, reserved, 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_STREAM_VALIDATE, 0, lt_msg_stream_cmd, flags, 1, LT_E_UNKNOWN_FLAGS),
    CW(LT_MSG_STREAM_VALIDATE, 0, lt_msg_stream_cmd, stream, 3, LT_E_BAD_ID),
    CW(LT_MSG_STREAM_VALIDATE, 0, lt_msg_stream_cmd, reserved, 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_STREAM_QUERY, 0, lt_msg_stream_cmd, stream, 3, LT_E_BAD_ID),
    CW(LT_MSG_STREAM_QUERY, 0, lt_msg_stream_cmd, flags, LT_STREAM_F_NONBLOCKING, LT_E_UNKNOWN_FLAGS),
    CW(LT_MSG_STREAM_SYNCHRONIZE, 0, lt_msg_stream_cmd, stream, 3, LT_E_BAD_ID),
    CW(LT_MSG_STREAM_SYNCHRONIZE, 0, lt_msg_stream_cmd, stream, 0, LT_OK),
    CW(LT_MSG_STREAM_DESTROY, 0, lt_msg_stream_cmd, stream, 0, LT_E_BAD_ID),
    CW(LT_MSG_STREAM_DESTROY, 0, lt_msg_stream_cmd, stream, 3, LT_E_BAD_ID),
    CW(LT_MSG_STREAM_DESTROY, 0, lt_msg_stream_cmd, flags, LT_STREAM_F_NONBLOCKING, LT_E_UNKNOWN_FLAGS),

    /* EVENT_* */
    CW(LT_MSG_EVENT_RECORD, V_NEW, lt_msg_event_cmd, flags, 1u << 1, LT_E_UNKNOWN_FLAGS),
    CW(LT_MSG_EVENT_RECORD, V_NEW, lt_msg_event_cmd, end, 0x100000001ull, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_EVENT_RECORD, V_NEW, lt_msg_event_cmd, stream, 3, LT_E_BAD_ID),
    CW(LT_MSG_EVENT_RECORD, V_NEW, lt_msg_event_cmd, reserved, 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_EVENT_RECORD, V_RERECORD, lt_msg_event_cmd, flags, LT_EVENT_F_TIMING, LT_E_UNKNOWN_FLAGS),
    CW(LT_MSG_EVENT_RECORD, V_RERECORD, lt_msg_event_cmd, event, 3, LT_E_BAD_ID),
    CW(LT_MSG_EVENT_WAIT, 0, lt_msg_event_cmd, event, 0, LT_E_BAD_ID),
    CW(LT_MSG_EVENT_WAIT, 0, lt_msg_event_cmd, stream, 3, LT_E_BAD_ID),
    CW(LT_MSG_EVENT_WAIT, 0, lt_msg_event_cmd, end, 1ull << 32, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_EVENT_WAIT, 0, lt_msg_event_cmd, flags, 1, LT_E_UNKNOWN_FLAGS),
    CW(LT_MSG_EVENT_QUERY, 0, lt_msg_event_cmd, event.gen, 0, LT_E_BAD_ID),
    CW(LT_MSG_EVENT_QUERY, 0, lt_msg_event_cmd, stream, 0x100000001ull, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_EVENT_SYNCHRONIZE, 0, lt_msg_event_cmd, end, 0x100000001ull, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_EVENT_SYNCHRONIZE, 0, lt_msg_event_cmd, flags, LT_EVENT_F_TIMING, LT_E_UNKNOWN_FLAGS),
    CW(LT_MSG_EVENT_DESTROY, 0, lt_msg_event_cmd, event.gen, 0, LT_E_BAD_ID),
    CW(LT_MSG_EVENT_DESTROY, 0, lt_msg_event_cmd, stream.slot, 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_EVENT_ELAPSED, 0, lt_msg_event_cmd, end.gen, 0, LT_E_BAD_ID),
    CW(LT_MSG_EVENT_ELAPSED, 0, lt_msg_event_cmd, event.gen, 0, LT_E_BAD_ID),
    CW(LT_MSG_EVENT_ELAPSED, 0, lt_msg_event_cmd, stream, 0x100000001ull, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_EVENT_ELAPSED, 0, lt_msg_event_cmd, flags, 1, LT_E_UNKNOWN_FLAGS),

    /* CTL_REPLY */
    CW(LT_MSG_CTL_REPLY, 0, lt_msg_ctl_reply, request_type, 0, LT_E_BAD_VALUE),
    CW(LT_MSG_CTL_REPLY, 0, lt_msg_ctl_reply, request_type, LT_MSG_HELLO, LT_E_BAD_VALUE),
    CW(LT_MSG_CTL_REPLY, 0, lt_msg_ctl_reply, request_type, LT_MSG_CTL_REPLY, LT_E_BAD_VALUE),
    CW(LT_MSG_CTL_REPLY, 0, lt_msg_ctl_reply, request_type, 0xffff, LT_E_BAD_VALUE),
    CW(LT_MSG_CTL_REPLY, 0, lt_msg_ctl_reply, reserved0, 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_CTL_REPLY, 0, lt_msg_ctl_reply, reserved1, 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_CTL_REPLY, LT_MSG_STREAM_QUERY, lt_msg_ctl_reply, ready, 2, LT_E_BAD_VALUE),
    CW(LT_MSG_CTL_REPLY, LT_MSG_STREAM_QUERY, lt_msg_ctl_reply, stream.gen, 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_CTL_REPLY, LT_MSG_EVENT_QUERY, lt_msg_ctl_reply, ready, UINT32_MAX, LT_E_BAD_VALUE),
    CW(LT_MSG_CTL_REPLY, LT_MSG_EVENT_QUERY, lt_msg_ctl_reply, event.slot, 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_CTL_REPLY, LT_MSG_STREAM_SYNCHRONIZE, lt_msg_ctl_reply, ready, 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_CTL_REPLY, LT_MSG_STREAM_SYNCHRONIZE, lt_msg_ctl_reply, elapsed_ms_bits, 0x3f800000u, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_CTL_REPLY, LT_MSG_STREAM_CREATE, lt_msg_ctl_reply, stream.gen, 0, LT_E_BAD_ID),
    CW(LT_MSG_CTL_REPLY, LT_MSG_EVENT_RECORD, lt_msg_ctl_reply, event.gen, 0, LT_E_BAD_ID),
    CW(LT_MSG_CTL_REPLY, LT_MSG_EVENT_ELAPSED, lt_msg_ctl_reply, elapsed_ms_bits, 0x7f800000u, LT_E_BAD_VALUE),
    CW(LT_MSG_CTL_REPLY, LT_MSG_EVENT_ELAPSED, lt_msg_ctl_reply, elapsed_ms_bits, 0xff800000u, LT_E_BAD_VALUE),
    CW(LT_MSG_CTL_REPLY, LT_MSG_EVENT_ELAPSED, lt_msg_ctl_reply, elapsed_ms_bits, 0x7fc00000u, LT_E_BAD_VALUE),
    CW(LT_MSG_CTL_REPLY, LT_MSG_EVENT_ELAPSED, lt_msg_ctl_reply, elapsed_ms_bits, 0xffffffffu, LT_E_BAD_VALUE),
    CW(LT_MSG_CTL_REPLY, LT_MSG_EVENT_ELAPSED, lt_msg_ctl_reply, elapsed_ms_bits, 0x80000000u, LT_OK),
    CW(LT_MSG_CTL_REPLY, LT_MSG_EVENT_ELAPSED, lt_msg_ctl_reply, elapsed_ms_bits, 0x7f7fffffu, LT_OK),
    CW(LT_MSG_CTL_REPLY, LT_MSG_DEVICE_SYNCHRONIZE, lt_msg_ctl_reply, event.gen, 1, LT_E_RESERVED_NONZERO),

    /* STATS */
    CW(LT_MSG_STATS_REQUEST, 0, lt_msg_stats_request, flags, 1u << 1, LT_E_UNKNOWN_FLAGS),
    CW(LT_MSG_STATS_REQUEST, 0, lt_msg_stats_request, reserved, 1, LT_E_RESERVED_NONZERO),
    COUNT_CASES(LT_MSG_STATS_REPLY, LT_MAX_STATS_CLIENTS, LT_E_BAD_LENGTH),
    CW(LT_MSG_STATS_REPLY, 0, lt_msg_stats_reply, reserved, 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_STATS_REPLY, 0, lt_msg_stats_reply, classes[0].segments, 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_STATS_REPLY, 0, lt_msg_stats_reply, classes[0].budget_refusals, 1ull << 63, LT_E_RESERVED_NONZERO),
    CE(LT_MSG_STATS_REPLY, 0, lt_client_stats, client_id, 0, LT_E_BAD_ID),
    NAME_CASES(LT_MSG_STATS_REPLY, 0, 1, lt_client_stats, name),
    CK(LT_MSG_STATS_REPLY, 0, K_DUP, 0, lt_client_stats, client_id, 0, LT_E_DUPLICATE_ID),

    /* WORDS_REQUEST, WORDS_GRANT */
    CW(LT_MSG_WORDS_REQUEST, 0, lt_msg_words_request, bytes, 0, LT_E_ZERO_LENGTH),
    CW(LT_MSG_WORDS_REQUEST, 0, lt_msg_words_request, bytes, 4095, LT_E_MISALIGNED),
    CW(LT_MSG_WORDS_REQUEST, 0, lt_msg_words_request, bytes, LT_WORDS_MAX_BYTES + 4096, LT_E_OUT_OF_RANGE),
    CW(LT_MSG_WORDS_REQUEST, 0, lt_msg_words_request, bytes, LT_WORDS_MAX_BYTES, LT_OK),
    CW(LT_MSG_WORDS_REQUEST, 0, lt_msg_words_request, reserved, 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_WORDS_GRANT, 0, lt_msg_words_grant, segment.gen, 0, LT_E_BAD_ID),
    CW(LT_MSG_WORDS_GRANT, 0, lt_msg_words_grant, size, 0, LT_E_ZERO_LENGTH),
    CW(LT_MSG_WORDS_GRANT, 0, lt_msg_words_grant, size, 4097, LT_E_MISALIGNED),
    CW(LT_MSG_WORDS_GRANT, 0, lt_msg_words_grant, size, LT_WORDS_MAX_BYTES + 4096, LT_E_OUT_OF_RANGE),
    CW(LT_MSG_WORDS_GRANT, 0, lt_msg_words_grant, reserved, 1, LT_E_RESERVED_NONZERO),

    /* ERROR */
    CW(LT_MSG_ERROR, 0, lt_msg_error, code, LT_OK, LT_E_BAD_VALUE),
    CW(LT_MSG_ERROR, 0, lt_msg_error, code, LT_E__COUNT, LT_E_BAD_VALUE),
    CW(LT_MSG_ERROR, 0, lt_msg_error, err, 0, LT_E_BAD_VALUE),
    CW(LT_MSG_ERROR, 0, lt_msg_error, err, 5, LT_E_BAD_VALUE),
    CW(LT_MSG_ERROR, 0, lt_msg_error, err, -4096, LT_E_BAD_VALUE),
    CW(LT_MSG_ERROR, 0, lt_msg_error, err, -4095, LT_OK),
    CW(LT_MSG_ERROR, 0, lt_msg_error, reserved, 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_ERROR, 0, lt_msg_error, index, LT_MAX_BATCH, LT_E_BAD_VALUE),
    CW(LT_MSG_ERROR, 0, lt_msg_error, index, LT_INDEX_NONE - 1, LT_E_BAD_VALUE),
    CW(LT_MSG_ERROR, 0, lt_msg_error, index, LT_MAX_BATCH - 1, LT_OK),
    CW(LT_MSG_ERROR, 0, lt_msg_error, failed_type, 0xffff, LT_OK),
    NAME_CASES(LT_MSG_ERROR, 0, 0, lt_msg_error, message),

    /* LEASE_LIST_REQUEST, SEGMENT_LIST_REQUEST */
    CW(LT_MSG_LEASE_LIST_REQUEST, 0, lt_msg_list_request, flags, 1, LT_E_UNKNOWN_FLAGS),
    CW(LT_MSG_LEASE_LIST_REQUEST, 0, lt_msg_list_request, flags, 1u << 31, LT_E_UNKNOWN_FLAGS),
    CW(LT_MSG_LEASE_LIST_REQUEST, 0, lt_msg_list_request, cursor, UINT64_MAX, LT_OK),
    CW(LT_MSG_LEASE_LIST_REQUEST, 0, lt_msg_list_request, client_id, UINT32_MAX, LT_OK),
    CW(LT_MSG_SEGMENT_LIST_REQUEST, 0, lt_msg_list_request, flags, 1u << 4, LT_E_UNKNOWN_FLAGS),
    CW(LT_MSG_SEGMENT_LIST_REQUEST, 0, lt_msg_list_request, client_id, 0, LT_OK),

    /* LEASE_LIST_REPLY */
    COUNT_CASES(LT_MSG_LEASE_LIST_REPLY, LT_LIST_MAX_ENTRIES, LT_E_BAD_LENGTH),
    CW(LT_MSG_LEASE_LIST_REPLY, 0, lt_msg_lease_list_reply, flags, 1u << 1, LT_E_UNKNOWN_FLAGS),
    CW(LT_MSG_LEASE_LIST_REPLY, 0, lt_msg_lease_list_reply, flags, LT_LIST_F_MORE | (1u << 31), LT_E_UNKNOWN_FLAGS),
    CE(LT_MSG_LEASE_LIST_REPLY, 0, lt_lease_info, lease.gen, 0, LT_E_BAD_ID),
    CE(LT_MSG_LEASE_LIST_REPLY, 0, lt_lease_info, segment.gen, 0, LT_E_BAD_ID),
    CE(LT_MSG_LEASE_LIST_REPLY, 0, lt_lease_info, client_id, 0, LT_E_BAD_ID),
    CE(LT_MSG_LEASE_LIST_REPLY, 0, lt_lease_info, mem_class, 0, LT_E_BAD_CLASS),
    CE(LT_MSG_LEASE_LIST_REPLY, 0, lt_lease_info, mem_class, 4, LT_E_BAD_CLASS),
    CE(LT_MSG_LEASE_LIST_REPLY, 0, lt_lease_info, length, 0, LT_E_ZERO_LENGTH),
    CK(LT_MSG_LEASE_LIST_REPLY, 0, K_RANGE_WRAP, 1, lt_lease_info, offset, 0, LT_E_RANGE_OVERFLOW),
    CK(LT_MSG_LEASE_LIST_REPLY, 0, K_RANGE_AT_LIMIT, 1, lt_lease_info, offset, 0, LT_OK),
    CK(LT_MSG_LEASE_LIST_REPLY, 0, K_RANGE_PAST, 1, lt_lease_info, offset, 0, LT_E_OUT_OF_RANGE),
    CE(LT_MSG_LEASE_LIST_REPLY, 0, lt_lease_info, state, 0, LT_E_BAD_VALUE),
    CE(LT_MSG_LEASE_LIST_REPLY, 0, lt_lease_info, state, 3, LT_E_BAD_VALUE),
    CE(LT_MSG_LEASE_LIST_REPLY, 0, lt_lease_info, state, LT_LEASE_STATE_RELEASING, LT_OK),
    CE(LT_MSG_LEASE_LIST_REPLY, 0, lt_lease_info, work_inflight, UINT32_MAX, LT_OK),
    CE(LT_MSG_LEASE_LIST_REPLY, 0, lt_lease_info, reserved, 1, LT_E_RESERVED_NONZERO),
    CK(LT_MSG_LEASE_LIST_REPLY, 0, K_DUP, 0, lt_lease_info, lease, 0, LT_E_DUPLICATE_ID),

    /* SEGMENT_LIST_REPLY */
    COUNT_CASES(LT_MSG_SEGMENT_LIST_REPLY, LT_LIST_MAX_ENTRIES, LT_E_BAD_LENGTH),
    CW(LT_MSG_SEGMENT_LIST_REPLY, 0, lt_msg_segment_list_reply, flags, 1u << 2, LT_E_UNKNOWN_FLAGS),
    CE(LT_MSG_SEGMENT_LIST_REPLY, 0, lt_segment_info, segment.gen, 0, LT_E_BAD_ID),
    CE(LT_MSG_SEGMENT_LIST_REPLY, 0, lt_segment_info, client_id, 0, LT_E_BAD_ID),
    CE(LT_MSG_SEGMENT_LIST_REPLY, 0, lt_segment_info, mem_class, 0, LT_E_BAD_CLASS),
    CE(LT_MSG_SEGMENT_LIST_REPLY, 0, lt_segment_info, size, 0, LT_E_ZERO_LENGTH),
    CE(LT_MSG_SEGMENT_LIST_REPLY, 0, lt_segment_info, size, 4095, LT_E_MISALIGNED),
    CE(LT_MSG_SEGMENT_LIST_REPLY, 0, lt_segment_info, size, SEGMAX + 4096, LT_E_OUT_OF_RANGE),
    CE(LT_MSG_SEGMENT_LIST_REPLY, 0, lt_segment_info, flags, 1u << 3, LT_E_UNKNOWN_FLAGS),
    CE(LT_MSG_SEGMENT_LIST_REPLY, 0, lt_segment_info, page_kib, 0, LT_E_BAD_VALUE),
    CE(LT_MSG_SEGMENT_LIST_REPLY, 0, lt_segment_info, page_kib, 2, LT_E_BAD_VALUE),
    CE(LT_MSG_SEGMENT_LIST_REPLY, 0, lt_segment_info, page_kib, 12, LT_E_BAD_VALUE),
    CE(LT_MSG_SEGMENT_LIST_REPLY, 0, lt_segment_info, page_kib, 2048, LT_OK),
    CE(LT_MSG_SEGMENT_LIST_REPLY, 0, lt_segment_info, holds, UINT32_MAX, LT_OK),
    CK(LT_MSG_SEGMENT_LIST_REPLY, 0, K_DUP, 0, lt_segment_info, segment, 0, LT_E_DUPLICATE_ID),

    /* RING_OPEN (the duplicate lease and overlapping arrays: streaming_messages_check_the_ring) */
    CW(LT_MSG_RING_OPEN, 0, lt_msg_ring_open, slots.gen, 0, LT_E_BAD_ID),
    CW(LT_MSG_RING_OPEN, 0, lt_msg_ring_open, words.gen, 0, LT_E_BAD_ID),
    CW(LT_MSG_RING_OPEN, 0, lt_msg_ring_open, flags, 1, LT_E_UNKNOWN_FLAGS),
    CW(LT_MSG_RING_OPEN, 0, lt_msg_ring_open, flags, 1u << 31, LT_E_UNKNOWN_FLAGS),
    CW(LT_MSG_RING_OPEN, 0, lt_msg_ring_open, reserved, 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_RING_OPEN, 0, lt_msg_ring_open, slot_bytes, 0, LT_E_ZERO_LENGTH),
    CW(LT_MSG_RING_OPEN, 0, lt_msg_ring_open, slot_bytes, 4095, LT_E_MISALIGNED),
    CW(LT_MSG_RING_OPEN, 0, lt_msg_ring_open, slot_bytes, UINT64_MAX, LT_E_MISALIGNED),
    CW(LT_MSG_RING_OPEN, 0, lt_msg_ring_open, slot_bytes, LT_RING_SLOT_BYTES_MAX + 4096, LT_E_OUT_OF_RANGE),
    CW(LT_MSG_RING_OPEN, 0, lt_msg_ring_open, slot_bytes, LT_RING_SLOT_BYTES_MAX, LT_OK),
    CW(LT_MSG_RING_OPEN, 0, lt_msg_ring_open, nslots, 0, LT_E_BAD_VALUE),
    CW(LT_MSG_RING_OPEN, 0, lt_msg_ring_open, nslots, LT_RING_SLOTS_MAX + 1, LT_E_BAD_VALUE),
    CW(LT_MSG_RING_OPEN, 0, lt_msg_ring_open, depth, 0, LT_E_BAD_VALUE),
    CW(LT_MSG_RING_OPEN, 0, lt_msg_ring_open, depth, LT_RING_DEPTH_MAX + 1, LT_E_BAD_VALUE),
    CW(LT_MSG_RING_OPEN, 0, lt_msg_ring_open, seq_offset, UINT64_MAX - 7, LT_E_RANGE_OVERFLOW),
    CW(LT_MSG_RING_OPEN, 0, lt_msg_ring_open, seq_offset, SEGMAX, LT_E_OUT_OF_RANGE),
    CK(LT_MSG_RING_OPEN, 0, K_ADD, 0, lt_msg_ring_open, seq_offset, 4, LT_E_MISALIGNED),
    CW(LT_MSG_RING_OPEN, 0, lt_msg_ring_open, done_offset, UINT64_MAX, LT_E_RANGE_OVERFLOW),
    CW(LT_MSG_RING_OPEN, 0, lt_msg_ring_open, done_offset, SEGMAX, LT_E_OUT_OF_RANGE),
    CK(LT_MSG_RING_OPEN, 0, K_ADD, 0, lt_msg_ring_open, done_offset, 1, LT_E_MISALIGNED),
    CW(LT_MSG_RING_OPEN, 0, lt_msg_ring_open, max_shard_bytes, 0, LT_E_ZERO_LENGTH),
    CW(LT_MSG_RING_OPEN, 0, lt_msg_ring_open, max_shard_bytes, SEGMAX + 1, LT_E_OUT_OF_RANGE),
    CW(LT_MSG_RING_OPEN, 0, lt_msg_ring_open, max_shard_bytes, SEGMAX, LT_OK),

    /* RING_OPENED */
    CW(LT_MSG_RING_OPENED, 0, lt_msg_ring_opened, ring.gen, 0, LT_E_BAD_ID),
    CW(LT_MSG_RING_OPENED, 0, lt_msg_ring_opened, depth, 0, LT_E_BAD_VALUE),
    CW(LT_MSG_RING_OPENED, 0, lt_msg_ring_opened, depth, LT_RING_DEPTH_MAX + 1, LT_E_BAD_VALUE),
    CW(LT_MSG_RING_OPENED, 0, lt_msg_ring_opened, nslots, 0, LT_E_BAD_VALUE),
    CW(LT_MSG_RING_OPENED, 0, lt_msg_ring_opened, nslots, LT_RING_SLOTS_MAX + 1, LT_E_BAD_VALUE),
    CW(LT_MSG_RING_OPENED, 0, lt_msg_ring_opened, max_shard_bytes, 0, LT_E_ZERO_LENGTH),
    CW(LT_MSG_RING_OPENED, 0, lt_msg_ring_opened, max_shard_bytes, SEGMAX + 1, LT_E_OUT_OF_RANGE),

    /* RING_SHARD */
    CW(LT_MSG_RING_SHARD, 0, lt_msg_ring_shard, ring.gen, 0, LT_E_BAD_ID),
    CW(LT_MSG_RING_SHARD, 0, lt_msg_ring_shard, first_seq, 0, LT_E_BAD_VALUE),
    CW(LT_MSG_RING_SHARD, 0, lt_msg_ring_shard, first_seq, UINT64_MAX, LT_OK),
    CW(LT_MSG_RING_SHARD, 0, lt_msg_ring_shard, length, 0, LT_E_ZERO_LENGTH),
    CW(LT_MSG_RING_SHARD, 0, lt_msg_ring_shard, length, SEGMAX + 1, LT_E_OUT_OF_RANGE),
    CW(LT_MSG_RING_SHARD, 0, lt_msg_ring_shard, length, SEGMAX, LT_OK),
    CW(LT_MSG_RING_SHARD, 0, lt_msg_ring_shard, op, 0, LT_E_BAD_OP),
    CW(LT_MSG_RING_SHARD, 0, lt_msg_ring_shard, op, LT_OP_LAST + 1, LT_E_BAD_OP),
    CW(LT_MSG_RING_SHARD, 0, lt_msg_ring_shard, reserved0, 1, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_RING_SHARD, 0, lt_msg_ring_shard, flags, 1, LT_E_UNKNOWN_FLAGS),
    CW(LT_MSG_RING_SHARD, CSUM, lt_msg_ring_shard, args.checksum.block_size, 0, LT_E_BAD_VALUE),
    CW(LT_MSG_RING_SHARD, CSUM, lt_msg_ring_shard, args.checksum.sums_offset, 4, LT_E_MISALIGNED),
    CW(LT_MSG_RING_SHARD, SCAN | V_TOPK, lt_msg_ring_shard, args.scan.k, LT_SCAN_MAX_K + 1, LT_E_BAD_VALUE),
    CW(LT_MSG_RING_SHARD, SCAN | V_NO_TOPK, lt_msg_ring_shard, args.scan.hits_offset, 8, LT_E_RESERVED_NONZERO),
    CW(LT_MSG_RING_SHARD, COPY, lt_msg_ring_shard, args.copy.length, 0, LT_E_ZERO_LENGTH),
    CW(LT_MSG_RING_SHARD, COPY, lt_msg_ring_shard, args.bytes[63], 1, LT_E_RESERVED_NONZERO),

    /* RING_CLOSE, RING_CLOSED */
    CW(LT_MSG_RING_CLOSE, 0, lt_msg_ring_close, ring.gen, 0, LT_E_BAD_ID),
    CW(LT_MSG_RING_CLOSE, 0, lt_msg_ring_close, ring, 0, LT_E_BAD_ID),
    CW(LT_MSG_RING_CLOSED, 0, lt_msg_ring_closed, ring.gen, 0, LT_E_BAD_ID),
    CW(LT_MSG_RING_CLOSED, 0, lt_msg_ring_closed, shards, UINT64_MAX, LT_OK),
};
/* clang-format on */
#define N_CORRUPTIONS (sizeof corruptions / sizeof corruptions[0])

static void apply(const struct corruption *c, struct msg *m)
{
    struct lt_msg_info info = lt_msg_info(c->type);
    uint32_t count = info.entry ? msg_count(m) : 0;
    size_t base = 0;
    unsigned char *p;
    if (c->entry) {
        ck_assert_uint_gt(count, 0);
        base = info.fixed + rnd_below(count) * info.entry;
    }
    p = m->p + base + c->off;
    ck_assert_uint_le(base + c->off + c->width, m->len);
    switch (c->kind) {
    case K_WRITE:
        put_le(p, c->width, c->value);
        break;
    case K_ADD:
        put_le(p, c->width, get_le(p, c->width) + c->value);
        break;
    case K_FILL:
        memset(p, (int)c->value, c->width);
        break;
    case K_NAME_PAD: {
        size_t n = strnlen((const char *)p, c->width);
        ck_assert_uint_lt(n, c->width);
        if (n + 1 == c->width) /* no room after the NUL: shorten the name by one */
            p[--n] = '\0';
        p[n + 1 + rnd_below(c->width - n - 1)] = (unsigned char)c->value;
        break;
    }
    case K_NAME_EMPTY:
        memset(p, 0, c->width);
        break;
    case K_NAME_CHAR: {
        size_t n = strnlen((const char *)p, c->width);
        ck_assert_uint_gt(n, 0);
        p[rnd_below(n)] = (unsigned char)c->value;
        break;
    }
    case K_COUNT:
        put_le(m->p + 24, 4, c->value);
        break;
    case K_COUNT_DELTA:
        put_le(m->p + 24, 4, (uint32_t)(count + (uint32_t)c->value));
        break;
    case K_RANGE_WRAP:
    case K_RANGE_AT_LIMIT:
    case K_RANGE_PAST: {
        uint64_t len = get_le(p + 8, 8); /* every range's length follows its offset */
        ck_assert_uint_gt(len, 0);
        ck_assert_uint_le(len, LT_SEGMENT_SIZE_MAX);
        uint64_t off = c->kind == K_RANGE_WRAP       ? UINT64_MAX - len + 1
                       : c->kind == K_RANGE_AT_LIMIT ? LT_SEGMENT_SIZE_MAX - len
                                                     : LT_SEGMENT_SIZE_MAX - len + 1;
        put_le(p, 8, off);
        break;
    }
    case K_DUP: {
        ck_assert_uint_ge(count, 2);
        unsigned char *first = m->p + info.fixed + c->off;
        unsigned char *last = m->p + info.fixed + (size_t)(count - 1) * info.entry + c->off;
        memcpy(last, first, c->width);
        break;
    }
    }
}

START_TEST(field_corruption_gives_its_code)
{
    const struct corruption *c = &corruptions[_i];
    for (int rep = 0; rep < 24; rep++) {
        rng_seed(1000 + (uint64_t)_i * 100 + (uint64_t)rep);
        struct lt_msg_info info = lt_msg_info(c->type);
        uint32_t count = info.entry ? 2 + (uint32_t)rnd_below(7) : 0;
        struct msg m = build(c->type, c->variant, count);
        char what[160];
        snprintf(what, sizeof what, "[case %d, variant %#x] %s", _i, c->variant, c->what);
        ck_assert_msg(validator_for(c->type)(m.p, m.len) == LT_OK,
                      "%s: the message built for the case is valid", what);
        apply(c, &m);
        expect_everywhere(c->type, m.p, m.len, c->expect, what);
        free(m.p);
    }
}
END_TEST

START_TEST(every_type_has_field_cases)
{
    /* DEVICE_SYNCHRONIZE is a bare header, covered by the header cases */
    for (uint16_t t = LT_MSG_TYPE_FIRST; t <= LT_MSG_TYPE_LAST; t++) {
        if (!type_defined(t))
            continue;
        size_t n = 0;
        for (size_t i = 0; i < N_CORRUPTIONS; i++)
            n += corruptions[i].type == t;
        if (t != LT_MSG_DEVICE_SYNCHRONIZE)
            ck_assert_msg(n > 0, "%s has no field corruption cases", lt_msg_type_name(t));
    }
}
END_TEST

/* ---- Random input ---- */

static void validate_all_ways(const unsigned char *p, size_t len)
{
    uint16_t type = 0;
    enum lt_error any = lt_validate(p, len, &type);
    ck_assert_msg(lt_error_is_known(any), "lt_validate returned %d", any);
    for (uint16_t t = LT_MSG_TYPE_FIRST; t <= LT_MSG_TYPE_LAST; t++) {
        if (!type_defined(t))
            continue;
        enum lt_error own = validator_for(t)(p, len);
        ck_assert(lt_error_is_known(own));
        if (len >= sizeof(struct lt_header) &&
            ((const struct lt_header *)(const void *)p)->type == t)
            ck_assert_msg(own == any, "%s: own validator says %s, lt_validate %s",
                          lt_msg_type_name(t), lt_error_name(own), lt_error_name(any));
    }
    enum lt_error fc = lt_validate_from_client(p, len, NULL);
    enum lt_error fa = lt_validate_from_agent(p, len, NULL);
    ck_assert(lt_error_is_known(fc) && lt_error_is_known(fa));
    if (any == LT_OK) {
        ck_assert(fc == LT_OK || fc == LT_E_WRONG_DIRECTION);
        ck_assert(fa == LT_OK || fa == LT_E_WRONG_DIRECTION);
    }
}

START_TEST(random_bytes_never_crash_validation)
{
    rng_seed(7);
    size_t deep = 0;
    for (int iter = 0; iter < 20000; iter++) {
        size_t len = rnd_below(4) == 0 ? rnd_below(LT_MSG_MAX_BYTES + 64) : rnd_below(320);
        uint16_t t = rnd_type();
        uint32_t count = (uint32_t)rnd_below(70);
        if (rnd_below(3) == 0) { /* a length the type accepts, so its body checks run */
            struct lt_msg_info info = lt_msg_info(t);
            count = info.entry ? (uint32_t)rnd_below(info.max_count + 1) : 0;
            if (lt_msg_size(t, count, &len) != LT_OK)
                len = info.fixed;
        }
        unsigned char *p = malloc(len);
        ck_assert(len == 0 || p != NULL);
        for (size_t i = 0; i < len; i++)
            p[i] = (unsigned char)rnd();
        if (len >= sizeof(struct lt_header) && rnd_below(4) != 0) {
            /* a plausible header, so validation gets past the framing */
            lt_header_init((struct lt_header *)(void *)p, t, (uint32_t)len, 1 + rnd_below(1000));
            if (lt_msg_info(t).entry && len >= 28)
                put_le(p + 24, 4, rnd_below(4) ? count : rnd_below(300));
            deep++;
        }
        validate_all_ways(p, len);
        free(p);
    }
    ck_assert_uint_gt(deep, 10000);
}
END_TEST

START_TEST(mutated_valid_messages_never_crash_validation)
{
    rng_seed(8);
    size_t still_valid = 0, refused = 0;
    for (int iter = 0; iter < 8000; iter++) {
        uint16_t t = rnd_type();
        struct msg m = build(t, V_ANY, COUNT_RANDOM);
        size_t flips = 1 + rnd_below(4);
        /* past the header, so the body is what gets hit */
        for (size_t f = 0; f < flips; f++) {
            size_t at = sizeof(struct lt_header) + rnd_below(m.len - sizeof(struct lt_header) + 1);
            if (at < m.len)
                m.p[at] ^= (unsigned char)(1u << rnd_below(8));
        }
        size_t len = m.len;
        if (rnd_below(8) == 0)
            len = rnd_below(m.len + 1); /* and sometimes truncated too */
        unsigned char *p = malloc(len);
        ck_assert(len == 0 || p != NULL);
        if (len)
            memcpy(p, m.p, len);
        validate_all_ways(p, len);
        if (lt_validate(p, len, NULL) == LT_OK)
            still_valid++;
        else
            refused++;
        free(p);
        free(m.p);
    }
    /* counters, cookies and ids take any value, so some flips stay valid */
    ck_assert_uint_gt(still_valid, 0);
    ck_assert_uint_gt(refused, 0);
}
END_TEST

/* ---- Helpers ---- */

START_TEST(error_codes_have_names_descriptions_and_errnos)
{
    for (uint32_t a = 0; a < LT_E__COUNT; a++) {
        const char *name = lt_error_name(a);
        ck_assert(lt_error_is_known(a));
        ck_assert_msg(strncmp(name, a == LT_OK ? "LT_OK" : "LT_E_", 5) == 0, "code %u: %s", a,
                      name);
        ck_assert_str_ne(name, "LT_E_UNKNOWN_CODE");
        ck_assert_str_ne(lt_error_describe(a), "unknown error code");
        ck_assert_uint_gt(strlen(lt_error_describe(a)), 3);
        for (uint32_t b = 0; b < a; b++) {
            ck_assert_str_ne(name, lt_error_name(b));
            ck_assert_str_ne(lt_error_describe(a), lt_error_describe(b));
        }
        int e = lt_error_errno(a);
        if (a == LT_OK)
            ck_assert_int_eq(e, 0);
        else
            ck_assert_msg(e < 0 && e >= -4095, "%s maps to %d", name, e);
    }
    ck_assert_str_eq(lt_error_name(LT_E__COUNT), "LT_E_UNKNOWN_CODE");
    ck_assert_str_eq(lt_error_name(UINT32_MAX), "LT_E_UNKNOWN_CODE");
    ck_assert_int_eq(lt_error_errno(UINT32_MAX), -EPROTO);
    ck_assert(!lt_error_is_known(LT_E__COUNT));
    ck_assert_int_eq(lt_error_errno(LT_E_BAD_MAGIC), -EPROTO);
    ck_assert_int_eq(lt_error_errno(LT_E_BAD_VERSION), -EPROTONOSUPPORT);
    ck_assert_int_eq(lt_error_errno(LT_E_STALE_ID), -ESTALE);
    ck_assert_int_eq(lt_error_errno(LT_E_BATCH_TOO_LARGE), -E2BIG);
    ck_assert_int_eq(lt_error_errno(LT_E_RANGE_OVERFLOW), -EOVERFLOW);
    ck_assert_int_eq(lt_error_errno(LT_E_BUDGET), -ENOSPC);
    ck_assert_int_eq(lt_error_errno(LT_E_NAME_UNTERMINATED), -ENAMETOOLONG);
    ck_assert_str_eq(lt_error_name(LT_E_BAD_MAGIC), "LT_E_BAD_MAGIC");
}
END_TEST

START_TEST(message_type_table_is_consistent)
{
    for (uint32_t t = LT_MSG_TYPE_FIRST; t <= LT_MSG_TYPE_LAST; t++) {
        struct lt_msg_info i = lt_msg_info(t);
        size_t size = 0;
        /* reserved for the later messages of 1.1 (rings), LAUNCH (1.2) and
         * WORDS (1.3): not defined here */
        if ((t >= 35 && t <= 37) || (t >= 40 && t <= 41) || (t >= 44 && t <= 45)) {
            ck_assert(!lt_msg_type_is_known(t));
            ck_assert_ptr_null(i.name);
            ck_assert_ptr_null(validator_for(t));
            continue;
        }
        if (t >= LT_MSG_LAUNCH_FIRST && t <= LT_MSG_LAUNCH_LAST) { /* test_launch_proto.c */
            ck_assert(lt_msg_type_is_known(t));
            ck_assert_ptr_nonnull(i.name);
            continue;
        }
        ck_assert(lt_msg_type_is_known(t));
        ck_assert_ptr_nonnull(i.name);
        ck_assert_ptr_nonnull(validator_for(t));
        for (uint32_t u = LT_MSG_TYPE_FIRST; u < t; u++)
            if (type_defined(u))
                ck_assert_str_ne(i.name, lt_msg_info(u).name);
        ck_assert_uint_ge(i.fixed, sizeof(struct lt_header));
        ck_assert_uint_eq(i.fixed % 8, 0);
        ck_assert_uint_eq(i.entry % 8, 0);
        ck_assert(i.dir == LT_DIR_TO_AGENT || i.dir == LT_DIR_TO_CLIENT || i.dir == LT_DIR_EITHER);
        ck_assert_uint_eq(i.fds, t == LT_MSG_SEGMENT_OFFER || t == LT_MSG_WORDS_GRANT ? 1 : 0);
        if (i.dir == LT_DIR_TO_AGENT) {
            ck_assert_msg(lt_msg_info(i.reply).dir == LT_DIR_TO_CLIENT, "%s's reply", i.name);
        } else {
            ck_assert_uint_eq(i.reply, 0);
        }
        if (i.entry == 0) {
            ck_assert_int_eq(lt_msg_size(t, 0, &size), LT_OK);
            ck_assert_uint_eq(size, i.fixed);
            ck_assert_int_eq(lt_msg_size(t, 1, &size), LT_E_BATCH_TOO_LARGE);
        } else {
            ck_assert_int_eq(lt_msg_size(t, i.max_count, &size), LT_OK);
            ck_assert_uint_eq(size, i.fixed + (size_t)i.max_count * i.entry);
            ck_assert_uint_le(size, LT_MSG_MAX_BYTES);
            ck_assert_int_eq(lt_msg_size(t, i.max_count + 1, &size), LT_E_BATCH_TOO_LARGE);
            ck_assert_int_eq(lt_msg_size(t, UINT32_MAX, &size), LT_E_BATCH_TOO_LARGE);
            if (i.min_count > 0)
                ck_assert_int_eq(lt_msg_size(t, 0, &size), LT_E_BATCH_EMPTY);
        }
    }
    ck_assert_ptr_null(lt_msg_info(0).name);
    ck_assert_ptr_null(lt_msg_info(LT_MSG_TYPE_LAST + 1).name);
    ck_assert_str_eq(lt_msg_type_name(0xffff), "UNKNOWN");
    ck_assert_str_eq(lt_msg_type_name(LT_MSG_LEASE_GRANT), "LEASE_GRANT");
    size_t size = 12345;
    ck_assert_int_eq(lt_msg_size(0, 0, &size), LT_E_UNKNOWN_TYPE);
    ck_assert_uint_eq(size, 12345); /* untouched on failure */
}
END_TEST

START_TEST(msg_init_refuses_sizes_the_type_cannot_have)
{
    unsigned char *p = malloc(LT_MSG_MAX_BYTES + 64);
    ck_assert_ptr_nonnull(p);
    memset(p, 0x5a, LT_MSG_MAX_BYTES + 64);
    ck_assert_int_eq(lt_msg_init(p, sizeof(struct lt_msg_hello) + 8, LT_MSG_HELLO, 1),
                     LT_E_BAD_LENGTH);
    ck_assert_int_eq(lt_msg_init(p, 16, LT_MSG_DEVICE_SYNCHRONIZE, 1), LT_E_BAD_LENGTH);
    ck_assert_int_eq(lt_msg_init(p, 32 + 33, LT_MSG_LEASE_REQUEST, 1), LT_E_BAD_LENGTH);
    ck_assert_int_eq(lt_msg_init(p, LT_MSG_MAX_BYTES + 32, LT_MSG_LEASE_REQUEST, 1),
                     LT_E_BAD_LENGTH);
    ck_assert_int_eq(lt_msg_init(p, 64, 0, 1), LT_E_UNKNOWN_TYPE);
    ck_assert_uint_eq(p[0], 0x5a); /* nothing written on failure */
    ck_assert_int_eq(
        lt_msg_init(p, sizeof(struct lt_msg_device_sync), LT_MSG_DEVICE_SYNCHRONIZE, 77), LT_OK);
    ck_assert_int_eq(lt_validate_device_sync(p, sizeof(struct lt_msg_device_sync)), LT_OK);
    ck_assert_uint_eq(((struct lt_header *)(void *)p)->request_id, 77);
    ck_assert_uint_eq(p[sizeof(struct lt_msg_device_sync)], 0x5a); /* nothing past the size */
    free(p);
}
END_TEST

START_TEST(ids_carry_generations)
{
    rng_seed(9);
    for (int i = 0; i < 10000; i++) {
        uint32_t slot = (uint32_t)rnd(), gen = (uint32_t)rnd();
        struct lt_lease_id l = lt_lease_id_make(slot, gen);
        ck_assert_uint_eq(l.slot, slot);
        ck_assert_uint_eq(l.gen, gen);
        ck_assert(lt_lease_id_eq(lt_lease_id_from_u64(lt_lease_id_to_u64(l)), l));
        ck_assert_int_eq(lt_lease_id_is_issued(l), gen != 0);
        ck_assert(!lt_lease_id_eq(l, lt_lease_id_make(slot, lt_gen_next(gen))));
        struct lt_segment_id s = lt_segment_id_from_u64(rnd());
        ck_assert(lt_segment_id_eq(s, lt_segment_id_make(s.slot, s.gen)));
        ck_assert_uint_ne(lt_gen_next(gen), 0);
    }
    ck_assert_uint_eq(lt_gen_next(UINT32_MAX), 1);
    ck_assert_uint_eq(lt_gen_next(0), 1);
    ck_assert_uint_eq(lt_gen_next(41), 42);
    ck_assert(lt_stream_id_is_default(lt_stream_id_default()));
    ck_assert(lt_stream_id_is_usable(lt_stream_id_default()));
    ck_assert(!lt_stream_id_is_usable(lt_stream_id_make(5, 0)));
    ck_assert(lt_stream_id_is_usable(lt_stream_id_make(0, 5)));
    ck_assert(lt_event_id_is_null(lt_event_id_make(0, 0)));
    ck_assert(!lt_event_id_is_issued(lt_event_id_make(7, 0)));
    ck_assert_uint_eq(lt_lease_id_to_u64(lt_lease_id_make(1, 2)), 0x200000001ull);
}
END_TEST

START_TEST(checked_arithmetic_catches_wrap)
{
    uint64_t s = 99;
    ck_assert_int_eq(lt_u64_add_checked(UINT64_MAX, 1, &s), -EOVERFLOW);
    ck_assert_uint_eq(s, 99);
    ck_assert_int_eq(lt_u64_add_checked(UINT64_MAX - 1, 1, &s), 0);
    ck_assert_uint_eq(s, UINT64_MAX);
    ck_assert_int_eq(lt_u64_add_checked(1ull << 63, 1ull << 63, &s), -EOVERFLOW);
    size_t p = 5;
    ck_assert_int_eq(lt_size_mul_checked(SIZE_MAX / 2 + 1, 2, &p), -EOVERFLOW);
    ck_assert_uint_eq(p, 5);
    ck_assert_int_eq(lt_size_mul_checked(0, SIZE_MAX, &p), 0);
    ck_assert_uint_eq(p, 0);
    ck_assert_int_eq(lt_range_check(0, 0, 100), LT_E_ZERO_LENGTH);
    ck_assert_int_eq(lt_range_check(UINT64_MAX, 1, UINT64_MAX), LT_E_RANGE_OVERFLOW);
    ck_assert_int_eq(lt_range_check(UINT64_MAX - 10, 10, UINT64_MAX), LT_OK);
    ck_assert_int_eq(lt_range_check(UINT64_MAX - 9, 10, UINT64_MAX),
                     LT_E_RANGE_OVERFLOW); /* ends at 2^64 */
    ck_assert_int_eq(lt_range_check(1, UINT64_MAX, UINT64_MAX), LT_E_RANGE_OVERFLOW);
    ck_assert_int_eq(lt_range_check(90, 10, 100), LT_OK);
    ck_assert_int_eq(lt_range_check(91, 10, 100), LT_E_OUT_OF_RANGE);
    ck_assert_int_eq(lt_segment_size_check(LT_SEGMENT_SIZE_MAX), LT_OK);
    ck_assert_int_eq(lt_segment_size_check(LT_SEGMENT_SIZE_MAX + LT_SEGMENT_ALIGN),
                     LT_E_OUT_OF_RANGE);
    rng_seed(10);
    for (int i = 0; i < 10000; i++) {
        uint64_t a = rnd(), b = rnd() >> rnd_below(64);
        int wraps = a + b < a;
        ck_assert_int_eq(lt_u64_add_checked(a, b, &s), wraps ? -EOVERFLOW : 0);
        if (!wraps)
            ck_assert_uint_eq(s, a + b);
    }
}
END_TEST

START_TEST(names_are_set_and_checked)
{
    char name[LT_NAME_LEN];
    memset(name, 0x55, sizeof name);
    ck_assert_uint_eq(lt_name_set(name, sizeof name, "stagingd"), 8);
    ck_assert_str_eq(name, "stagingd");
    ck_assert(lt_bytes_all_zero(name + 8, sizeof name - 8));
    ck_assert_int_eq(lt_name_check(name, sizeof name), LT_OK);
    /* too long: truncated to cap - 1 and still valid */
    ck_assert_uint_eq(lt_name_set(name, sizeof name, "0123456789abcdefghijklmnopqrstuvwxyz"),
                      LT_NAME_LEN - 1);
    ck_assert_int_eq(lt_name_check(name, sizeof name), LT_OK);
    ck_assert_uint_eq((unsigned char)name[LT_NAME_LEN - 1], 0);
    /* control bytes become '?' */
    ck_assert_uint_eq(lt_name_set(name, sizeof name, "a\nb\x1b"), 4);
    ck_assert_str_eq(name, "a?b?");
    ck_assert_int_eq(lt_name_check(name, sizeof name), LT_OK);
    ck_assert_uint_eq(lt_name_set(name, sizeof name, NULL), 0);
    ck_assert_int_eq(lt_name_check(name, sizeof name), LT_E_NAME_EMPTY);
    memset(name, 'q', sizeof name);
    ck_assert_int_eq(lt_name_check(name, sizeof name), LT_E_NAME_UNTERMINATED);
    /* the check reads nothing past cap: a heap array of exactly cap bytes */
    char *exact = malloc(5);
    ck_assert_ptr_nonnull(exact);
    memcpy(exact, "abcde", 5);
    ck_assert_int_eq(lt_name_check(exact, 5), LT_E_NAME_UNTERMINATED);
    memcpy(exact, "abcd", 5);
    ck_assert_int_eq(lt_name_check(exact, 5), LT_OK);
    free(exact);
}
END_TEST

START_TEST(f32_bit_patterns_round_trip)
{
    rng_seed(11);
    for (int i = 0; i < 10000; i++) {
        uint32_t bits = (uint32_t)rnd();
        if (!lt_f32_bits_finite(bits))
            continue; /* NaN payloads need not survive a float register */
        ck_assert_uint_eq(lt_f32_to_bits(lt_f32_from_bits(bits)), bits);
    }
    ck_assert_uint_eq(lt_f32_to_bits(1.0f), 0x3f800000u);
    ck_assert(lt_f32_from_bits(0x40490fdbu) > 3.14159f && lt_f32_from_bits(0x40490fdbu) < 3.1416f);
    ck_assert(!lt_f32_bits_finite(0x7f800000u));
    ck_assert(!lt_f32_bits_finite(0xffc00001u));
    ck_assert(lt_f32_bits_finite(0x7f7fffffu));
    ck_assert(lt_f32_bits_finite(0x00000001u));
}
END_TEST

START_TEST(fd_rule_allows_one_fd_with_offer_and_words_grant_only)
{
    for (uint32_t t = 0; t <= LT_MSG_TYPE_LAST + 1; t++) {
        for (size_t n = 0; n < 4; n++) {
            int ok = (t == LT_MSG_SEGMENT_OFFER || t == LT_MSG_WORDS_GRANT) ? n == 1 : n == 0;
            ck_assert_int_eq(lt_validate_fd_count(t, n), ok ? LT_OK : LT_E_FD_COUNT);
        }
    }
}
END_TEST

START_TEST(hello_reply_grants_only_what_was_asked)
{
    rng_seed(13);
    struct msg q = build(LT_MSG_HELLO, V_ANY, 0);
    struct msg r = build(LT_MSG_HELLO_REPLY, V_ANY, 0);
    struct lt_msg_hello *h = (void *)q.p;
    struct lt_msg_hello_reply *a = (void *)r.p;
    /* a newer client asks for a cap this version does not know */
    h->caps = LT_CAP_DOORBELL | LT_CAP_RC_BATCH | (1u << 30);
    ck_assert_int_eq(lt_validate_hello(q.p, q.len), LT_OK);
    a->hdr.request_id = h->hdr.request_id;
    a->caps = LT_CAP_DOORBELL | LT_CAP_HOST_BACKEND; /* a subset, plus an agent-only bit */
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_OK);
    a->caps = LT_CAP_DOORBELL | LT_CAP_TIMING; /* TIMING was not asked for */
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_E_UNKNOWN_FLAGS);
    free(q.p);
    free(r.p);
}
END_TEST

START_TEST(list_replies_pair_more_with_a_cursor_and_name_the_client_asked)
{
    rng_seed(14);
    const uint16_t types[] = {LT_MSG_LEASE_LIST_REPLY, LT_MSG_SEGMENT_LIST_REPLY};
    for (size_t t = 0; t < 2; t++) {
        struct msg r = build(types[t], V_ANY, 3);
        struct lt_msg_lease_list_reply *l = (void *)r.p; /* the fixed part both share */
        l->flags = LT_LIST_F_MORE;
        l->next_cursor = 0;
        expect_everywhere(types[t], r.p, r.len, LT_E_BAD_VALUE, "MORE without a cursor");
        l->next_cursor = 7;
        expect_everywhere(types[t], r.p, r.len, LT_OK, "MORE with a cursor");
        l->flags = 0;
        expect_everywhere(types[t], r.p, r.len, LT_E_RESERVED_NONZERO, "a cursor without MORE");
        l->next_cursor = 0;
        expect_everywhere(types[t], r.p, r.len, LT_OK, "the last page");

        /* the reply to a request for client 5 lists client 5 only */
        uint16_t qt = types[t] == LT_MSG_LEASE_LIST_REPLY ? LT_MSG_LEASE_LIST_REQUEST
                                                          : LT_MSG_SEGMENT_LIST_REQUEST;
        struct msg q = build(qt, V_ANY, 0);
        struct lt_msg_list_request *lq = (void *)q.p;
        l->hdr.request_id = lq->hdr.request_id;
        lq->client_id = 5;
        for (int k = 0; k < 3; k++) {
            if (types[t] == LT_MSG_LEASE_LIST_REPLY)
                l->entries[k].client_id = 5;
            else
                ((struct lt_msg_segment_list_reply *)(void *)r.p)->entries[k].client_id = 5;
        }
        ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_OK);
        if (types[t] == LT_MSG_LEASE_LIST_REPLY)
            l->entries[2].client_id = 6;
        else
            ((struct lt_msg_segment_list_reply *)(void *)r.p)->entries[2].client_id = 6;
        ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_E_BAD_VALUE);
        lq->client_id = 0; /* every client: any */
        ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_OK);
        /* the other list's reply does not answer this request */
        struct msg o = build(types[1 - t], V_ANY, 0);
        ((struct lt_header *)(void *)o.p)->request_id = lq->hdr.request_id;
        ck_assert_int_eq(lt_validate_reply_matches(q.p, o.p), LT_E_WRONG_TYPE);
        free(o.p);
        free(q.p);
        free(r.p);
    }
    /* A request's validator refuses the reply type between the two requests. */
    struct msg q = build(LT_MSG_LEASE_LIST_REQUEST, V_ANY, 0);
    ((struct lt_header *)(void *)q.p)->type = LT_MSG_LEASE_LIST_REPLY;
    ck_assert_int_eq(lt_validate_list_request(q.p, q.len), LT_E_WRONG_TYPE);
    free(q.p);
    ck_assert(LT_CAP_CLIENT_KNOWN & LT_CAP_INTROSPECT);
    ck_assert_uint_eq(LT_CAP_INTROSPECT, 256);
}
END_TEST

START_TEST(replies_match_their_requests)
{
    rng_seed(12);
    /* segment offer -> accept */
    struct msg q = build(LT_MSG_SEGMENT_OFFER, V_ANY, 0);
    struct msg r = build(LT_MSG_SEGMENT_ACCEPT, V_ANY, 0);
    struct lt_msg_segment_offer *o = (void *)q.p;
    struct lt_msg_segment_accept *a = (void *)r.p;
    a->hdr.request_id = o->hdr.request_id;
    a->cookie = o->cookie;
    a->size = o->size;
    a->mem_class = o->mem_class;
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_OK);
    a->cookie ^= 1;
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_E_BAD_VALUE);
    a->cookie ^= 1;
    a->hdr.request_id++;
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_E_BAD_REQUEST_ID);
    free(r.p);
    /* an ERROR answers any request whose type it names */
    r = build(LT_MSG_ERROR, V_ANY, 0);
    struct lt_msg_error *e = (void *)r.p;
    e->hdr.request_id = o->hdr.request_id;
    e->failed_type = LT_MSG_SEGMENT_OFFER;
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_OK);
    e->failed_type = LT_MSG_HELLO;
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_E_BAD_VALUE);
    free(r.p);
    /* the wrong reply type */
    r = build(LT_MSG_HELLO_REPLY, V_ANY, 0);
    ((struct lt_header *)(void *)r.p)->request_id = o->hdr.request_id;
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_E_WRONG_TYPE);
    free(r.p);
    free(q.p);

    /* lease request -> grant: counts equal, classes as asked or STAGED on fallback */
    q = build(LT_MSG_LEASE_REQUEST, V_ANY, 4);
    r = build(LT_MSG_LEASE_GRANT, V_ALL_OK, 4);
    struct lt_msg_lease_request *lq = (void *)q.p;
    struct lt_msg_lease_grant *lg = (void *)r.p;
    lg->hdr.request_id = lq->hdr.request_id;
    for (int k = 0; k < 4; k++) {
        lq->entries[k].mem_class = LT_CLASS_PINNED;
        lq->entries[k].flags = k == 3 ? LT_LEASE_F_ALLOW_STAGED : 0;
        lg->entries[k].mem_class = LT_CLASS_PINNED;
    }
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_OK);
    lg->entries[3].mem_class = LT_CLASS_STAGED; /* fallback allowed */
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_OK);
    lg->entries[2].mem_class = LT_CLASS_STAGED; /* fallback not allowed */
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_E_BAD_VALUE);
    free(r.p);
    r = build(LT_MSG_LEASE_GRANT, V_ALL_OK, 3);
    ((struct lt_header *)(void *)r.p)->request_id = lq->hdr.request_id;
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_E_BAD_LENGTH);
    free(r.p);
    free(q.p);

    /* release -> release-complete names a released lease */
    q = build(LT_MSG_LEASE_RELEASE, V_ANY, 5);
    r = build(LT_MSG_RELEASE_COMPLETE, V_ANY, 0);
    struct lt_msg_lease_release *rq = (void *)q.p;
    struct lt_msg_release_complete *rc = (void *)r.p;
    rc->hdr.request_id = rq->hdr.request_id;
    rc->lease = rq->leases[4];
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_OK);
    rc->lease.gen = lt_gen_next(rc->lease.gen); /* the same slot, a stale generation */
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_E_BAD_VALUE);
    free(r.p);
    /* release -> release-complete batch: every entry names a released lease */
    r = build(LT_MSG_RELEASE_COMPLETE_BATCH, V_ANY, 3);
    struct lt_msg_release_complete_batch *rb = (void *)r.p;
    rb->hdr.request_id = rq->hdr.request_id;
    rb->entries[0].lease = rq->leases[3];
    rb->entries[1].lease = rq->leases[0];
    rb->entries[2].lease = rq->leases[4];
    ck_assert_int_eq(lt_validate(r.p, r.len, NULL), LT_OK);
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_OK);
    rb->entries[1].lease.gen = lt_gen_next(rb->entries[1].lease.gen);
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_E_BAD_VALUE);
    rb->entries[1].lease = rq->leases[1];
    rb->hdr.request_id++;
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_E_BAD_REQUEST_ID);
    free(r.p);
    free(q.p);
    /* a batch answers nothing but a release */
    q = build(LT_MSG_SEGMENT_RETIRE, V_ANY, 0);
    r = build(LT_MSG_RELEASE_COMPLETE_BATCH, V_ANY, 1);
    ((struct lt_header *)(void *)r.p)->request_id = ((struct lt_header *)(void *)q.p)->request_id;
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_E_WRONG_TYPE);
    free(r.p);
    free(q.p);

    /* submit -> completion; stream command -> ctl reply */
    q = build(LT_MSG_SUBMIT, LT_OP_COPY_H2D, 0);
    r = build(LT_MSG_COMPLETION, LT_OP_COPY_H2D, 0);
    ((struct lt_msg_completion *)(void *)r.p)->hdr.request_id =
        ((struct lt_header *)(void *)q.p)->request_id;
    ((struct lt_msg_completion *)(void *)r.p)->lease = ((struct lt_msg_submit *)(void *)q.p)->lease;
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_OK);
    ((struct lt_msg_completion *)(void *)r.p)->op = LT_OP_VECTOR_SCAN;
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_E_BAD_VALUE);
    free(r.p);
    free(q.p);
    q = build(LT_MSG_STREAM_QUERY, V_ANY, 0);
    r = build(LT_MSG_CTL_REPLY, LT_MSG_STREAM_QUERY, 0);
    ((struct lt_header *)(void *)r.p)->request_id = ((struct lt_header *)(void *)q.p)->request_id;
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_OK);
    ((struct lt_msg_ctl_reply *)(void *)r.p)->request_type = LT_MSG_EVENT_QUERY;
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_E_BAD_VALUE);
    free(r.p);
    free(q.p);
}
END_TEST

START_TEST(streaming_messages_check_the_ring)
{
    rng_seed(14);
    /* RING_OPEN: one lease cannot be both; the word arrays must be apart */
    struct msg q = build(LT_MSG_RING_OPEN, V_ANY, 0);
    struct lt_msg_ring_open *o = (void *)q.p;
    ck_assert_int_eq(lt_validate_ring_open(q.p, q.len), LT_OK);
    struct lt_lease_id words = o->words;
    o->words = o->slots;
    expect_everywhere(LT_MSG_RING_OPEN, q.p, q.len, LT_E_DUPLICATE_ID, "one lease for both");
    o->words = words;
    uint64_t done = o->done_offset;
    o->nslots = 4;
    o->seq_offset = 64;
    o->done_offset = 64 + 24; /* the seqs end at 96 */
    expect_everywhere(LT_MSG_RING_OPEN, q.p, q.len, LT_E_BAD_VALUE, "done words over the seqs");
    o->done_offset = 32; /* ends at 64: touching, not overlapping */
    expect_everywhere(LT_MSG_RING_OPEN, q.p, q.len, LT_OK, "arrays back to back");
    o->done_offset = 64;
    expect_everywhere(LT_MSG_RING_OPEN, q.p, q.len, LT_E_BAD_VALUE, "the same array twice");
    o->done_offset = done;

    /* RING_OPEN -> RING_OPENED: slots and size echoed, depth at most the asked */
    struct msg r = build(LT_MSG_RING_OPENED, V_ANY, 0);
    struct lt_msg_ring_opened *a = (void *)r.p;
    o->nslots = 16;
    o->depth = 4;
    a->hdr.request_id = o->hdr.request_id;
    a->nslots = 16;
    a->max_shard_bytes = o->max_shard_bytes;
    a->depth = 4;
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_OK);
    a->depth = 1;
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_OK);
    a->depth = 5;
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_E_BAD_VALUE);
    a->depth = 4;
    a->nslots = 15;
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_E_BAD_VALUE);
    a->nslots = 16;
    a->max_shard_bytes ^= 1;
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_E_BAD_VALUE);
    free(r.p);
    /* a COMPLETION does not answer a RING_OPEN */
    r = build(LT_MSG_COMPLETION, V_ANY, 0);
    ((struct lt_header *)(void *)r.p)->request_id = o->hdr.request_id;
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_E_WRONG_TYPE);
    free(r.p);
    free(q.p);

    /* RING_SHARD -> COMPLETION: the op echoed, any lease (the ring's) */
    q = build(LT_MSG_RING_SHARD, LT_OP_CHECKSUM_VERIFY, 0);
    r = build(LT_MSG_COMPLETION, LT_OP_CHECKSUM_VERIFY, 0);
    ((struct lt_header *)(void *)r.p)->request_id = ((struct lt_header *)(void *)q.p)->request_id;
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_OK);
    ((struct lt_msg_completion *)(void *)r.p)->op = LT_OP_COPY_H2D;
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_E_BAD_VALUE);
    free(r.p);
    free(q.p);

    /* RING_CLOSE -> RING_CLOSED: the same ring */
    q = build(LT_MSG_RING_CLOSE, V_ANY, 0);
    r = build(LT_MSG_RING_CLOSED, V_ANY, 0);
    struct lt_msg_ring_closed *c = (void *)r.p;
    c->hdr.request_id = ((struct lt_header *)(void *)q.p)->request_id;
    c->ring = ((struct lt_msg_ring_close *)(void *)q.p)->ring;
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_OK);
    c->ring.gen = lt_gen_next(c->ring.gen);
    ck_assert_int_eq(lt_validate_reply_matches(q.p, r.p), LT_E_BAD_VALUE);
    free(r.p);
    free(q.p);

    /* the capability is known to both sides now; minor 1.1 is implemented (the
     * build's highest, LT_PROTO_MINOR, is 1.2's launch at least) */
    ck_assert_uint_eq(LT_CAP_CLIENT_KNOWN & LT_CAP_STREAM, LT_CAP_STREAM);
    ck_assert_uint_ge(LT_PROTO_MINOR, 1);
    for (uint32_t t = LT_MSG_RING_OPEN; t <= LT_MSG_RING_CLOSED; t++)
        ck_assert(lt_msg_type_is_known(t));
    for (uint32_t t = 35; t <= 37; t++) /* reserved for 1.1's later messages */
        ck_assert(!lt_msg_type_is_known(t));
    ck_assert_str_eq(lt_msg_type_name(LT_MSG_RING_SHARD), "RING_SHARD");
    ck_assert_uint_eq(lt_msg_info(LT_MSG_RING_SHARD).reply, LT_MSG_COMPLETION);
}
END_TEST

START_TEST(receive_buffer_is_aligned_and_large_enough)
{
    union lt_msg_buffer b;
    ck_assert_uint_eq((uintptr_t)&b % LT_MSG_ALIGN, 0);
    ck_assert_uint_eq((uintptr_t)b.bytes % LT_MSG_ALIGN, 0);
    ck_assert_uint_gt(sizeof b.bytes, LT_MSG_MAX_BYTES);
    rng_seed(13);
    struct msg m = build(LT_MSG_LEASE_REQUEST, V_ANY, LT_MAX_BATCH);
    memcpy(b.bytes, m.p, m.len);
    ck_assert_int_eq(lt_validate(b.bytes, m.len, NULL), LT_OK);
    free(m.p);
}
END_TEST

static Suite *lease_types_suite(void)
{
    Suite *s = suite_create("lease_types");
    TCase *tc = tcase_create("messages");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, valid_messages_of_every_type_pass);
    tcase_add_test(tc, largest_batches_pass_and_fit_the_buffer);
    tcase_add_test(tc, header_corruptions_give_their_codes);
    tcase_add_test(tc, short_and_long_lengths_give_bad_length);
    tcase_add_test(tc, truncated_buffers_are_refused_without_overread);
    tcase_add_test(tc, misaligned_buffers_are_refused);
    tcase_add_loop_test(tc, field_corruption_gives_its_code, 0, (int)N_CORRUPTIONS);
    tcase_add_test(tc, every_type_has_field_cases);
    tcase_add_test(tc, replies_match_their_requests);
    tcase_add_test(tc, list_replies_pair_more_with_a_cursor_and_name_the_client_asked);
    tcase_add_test(tc, hello_reply_grants_only_what_was_asked);
    tcase_add_test(tc, receive_buffer_is_aligned_and_large_enough);
    tcase_add_test(tc, streaming_messages_check_the_ring);
    suite_add_tcase(s, tc);

    TCase *fz = tcase_create("random");
    tcase_set_timeout(fz, 240);
    tcase_add_test(fz, random_bytes_never_crash_validation);
    tcase_add_test(fz, mutated_valid_messages_never_crash_validation);
    suite_add_tcase(s, fz);

    TCase *h = tcase_create("helpers");
    tcase_add_test(h, error_codes_have_names_descriptions_and_errnos);
    tcase_add_test(h, message_type_table_is_consistent);
    tcase_add_test(h, msg_init_refuses_sizes_the_type_cannot_have);
    tcase_add_test(h, ids_carry_generations);
    tcase_add_test(h, checked_arithmetic_catches_wrap);
    tcase_add_test(h, names_are_set_and_checked);
    tcase_add_test(h, f32_bit_patterns_round_trip);
    tcase_add_test(h, fd_rule_allows_one_fd_with_offer_and_words_grant_only);
    suite_add_tcase(s, h);
    return s;
}

int main(void)
{
    const char *env = getenv("LT_TEST_SEED");
    if (env && *env)
        g_seed = strtoull(env, NULL, 0);
    printf("lease_types: seed %#llx (set LT_TEST_SEED to replay)\n", (unsigned long long)g_seed);
    SRunner *sr = srunner_create(lease_types_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
