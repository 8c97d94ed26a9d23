/* The executor's requests: SUBMIT (the lease, its argument ranges, the bell
 * and done words resolved against the lease service and held while the work
 * runs, record_allocation through lease_work_pin) and the stream, event and
 * device commands, each handed to the executor by its typed verb; then
 * their answers (COMPLETION, CTL_REPLY or ERROR) once the executor is done.
 * Depends on conn.h and jobs.h; used by dispatch.c. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sigbus.h"
#include "conn.h"
#include "jobs.h"
#include "ring.h"
#include "server_metrics.h"
#include "work.h"

static uint64_t ga_work__rid(const void *buf)
{
    return ((const struct lt_header *)buf)->request_id;
}

/* Undoes the job's holds on its bell, done and hits segments. */
static void ga_work__unhold(struct ga_server *srv, struct ga_server__job *j)
{
    if (!lt_segment_id_is_null(j->bell_hold))
        lease_segment_unhold(srv->svc, j->bell_hold, NULL);
    if (!lt_segment_id_is_null(j->done_hold))
        lease_segment_unhold(srv->svc, j->done_hold, NULL);
    if (!lt_segment_id_is_null(j->hits_hold))
        lease_segment_unhold(srv->svc, j->hits_hold, NULL);
}

static void ga_work__work_done(void *arg, const struct ga_exec_result *res)
{
    struct ga_server__job *j = arg;
    j->res = *res;
    ga_server__post(j->conn->srv, j);
}

static void ga_work__ctl_done(void *arg, const struct ga_exec_ctl_result *res)
{
    struct ga_server__job *j = arg;
    j->ctl = *res;
    ga_server__post(j->conn->srv, j);
}

/* Resolves a bell or done word to one of @c's MAPPED segments. */
static int ga_work__word(struct ga_server__conn *c, const char *what, const struct lt_word_ref *w,
                         struct ga_server__seg **seg_p, uint32_t *code_p, char *msg, size_t msglen)
{
    struct ga_server *srv = c->srv;
    uint64_t id = lt_segment_id_to_u64(w->segment);
    struct ga_server__seg *seg = base_u64map_get(&srv->segs, id);
    if (!seg) {
        uint64_t cur = 0;
        bool stale = base_u64map_get_u64(&srv->seg_slots, w->segment.slot, &cur) &&
                     (uint32_t)(cur >> 32) > w->segment.gen;
        *code_p = stale ? LT_E_STALE_ID : LT_E_NOT_FOUND;
        snprintf(msg, msglen, "%s segment {%" PRIu32 ",%" PRIu32 "} %s", what, w->segment.slot,
                 w->segment.gen, stale ? "is stale: it was retired" : "is not a live segment");
        return -1;
    }
    if (seg->conn != c) {
        *code_p = LT_E_NOT_OWNER;
        snprintf(msg, msglen, "%s segment {%" PRIu32 ",%" PRIu32 "} belongs to another client",
                 what, w->segment.slot, w->segment.gen);
        return -1;
    }
    if (seg->mem_class != LT_CLASS_MAPPED) {
        *code_p = LT_E_BAD_CLASS;
        snprintf(msg, msglen, "%s word: expected a MAPPED segment, found %s", what,
                 lt_class_name(seg->mem_class));
        return -1;
    }
    /* The agent writes a done word (in its own words area, or in a segment
     * it maps writable: one without F_SEAL_FUTURE_WRITE), and a doorbell
     * too, to let the stream pass when the client goes (the CUDA backend):
     * refused here, never a fault at the write. */
    if (!seg->writable) {
        *code_p = LT_E_UNSUPPORTED;
        /* Short enough for the wire's LT_ERROR_MSG_LEN, remedy included. */
        snprintf(msg, msglen,
                 "%s word: segment {%" PRIu32 ",%" PRIu32 "} sealed F_SEAL_FUTURE_WRITE; %s", what,
                 w->segment.slot, w->segment.gen,
                 strcmp(what, "done") == 0 ? "use words area or unsealed MAPPED"
                                           : "use an unsealed MAPPED segment");
        return -1;
    }
    if (w->offset > seg->size - 8) {
        *code_p = LT_E_OUT_OF_RANGE;
        snprintf(msg, msglen,
                 "%s word at %" PRIu64 ": expected at most %" PRIu64 " (segment of %" PRIu64
                 " bytes)",
                 what, w->offset, seg->size - 8, seg->size);
        return -1;
    }
    *seg_p = seg;
    return 0;
}

/* Whether the word at @off of a held segment faults when read (its page
 * freed by the client); the failure is set in *@why when it does. */
static bool ga_work__word_gone(const struct lease_segment_info *info, uint64_t off,
                               const char *what, struct lt_failure *why)
{
    uint64_t v;
    const uint64_t *w =
        (const uint64_t *)(const void *)((const unsigned char *)info->host_base + off);
    if (base_guard_load_u64(w, &v) == 0)
        return false;
    lt_failure_set(why, LT_E_SEGMENT_GONE, -EFAULT,
                   "%s word at offset %" PRIu64 ": its page is gone (a hole punched?)", what, off);
    return true;
}

int ga_server__lease_as_data(const char *what, const struct lease_info *li, struct lt_failure *why)
{
    if (!li->words_only)
        return 0;
    return lt_failure_set(why, LT_E_SEGMENT_UNSEALED, -EPERM,
                          "%s: segment {%" PRIu32 ",%" PRIu32
                          "} lacks F_SEAL_FUTURE_WRITE: ring words only, not data",
                          what, li->segment.slot, li->segment.gen);
}

/* Whether a page of @li's bytes is gone, for a lease whose segment lacks
 * F_SEAL_FUTURE_WRITE (--seals legacy): its client can punch its pages
 * out, and the CUDA driver reads a registered range on the CPU for some
 * copies, outside any guard of ours (the agent died of that SIGBUS on the
 * H200, test_hostile_sigbus). One guarded read a page before the op is
 * queued turns a freed page into LT_E_SEGMENT_GONE; a punch after it, in
 * legacy mode only, is not covered (docs/reliability.md). Sealed leases,
 * the default, cannot lose pages and are not read. */
struct ga_work__probe {
    const volatile unsigned char *p;
    uint64_t len, step;
};

static void ga_work__probe_pages(void *arg)
{
    const struct ga_work__probe *pr = arg;
    for (uint64_t off = 0; off < pr->len; off += pr->step)
        (void)pr->p[off];
    if (pr->len)
        (void)pr->p[pr->len - 1];
}

void ga_server__drop_gone(struct ga_server__conn *c, const struct lt_failure *why)
{
    base_log(&c->srv->cfg.log, BASE_LOG_WARN, GA_SERVER__SUBSYS,
             "client %" PRIu32 " (pid %ld): %s: dropping it", c->id, (long)c->pid, why->message);
    ga_server__conn_kill(c, "its memory vanished (SIGBUS)");
}

bool ga_server__lease_gone(const struct lease_info *li, struct lt_failure *why)
{
    if (!li->writable || li->cls == LT_CLASS_STAGED || !li->host_addr)
        return false;
    struct ga_work__probe pr = {li->host_addr, li->length, 4096};
    if (base_guard_run(li->host_addr, (size_t)li->length, ga_work__probe_pages, &pr) == 0)
        return false;
    lt_failure_set(why, LT_E_SEGMENT_GONE, -EFAULT,
                   "lease in segment {%" PRIu32 ",%" PRIu32 "}: a page is gone (hole punched?)",
                   li->segment.slot, li->segment.gen);
    return true;
}

/* The op's ranges against the lease and the alignment the kernels need;
 * a scan's hits against @words (the client's words area) when it has one. */
static int ga_work__args(const struct lt_msg_submit *m, const struct lease_info *li,
                         const struct ga_server__seg *words, uint32_t *code_p, char *msg,
                         size_t msglen)
{
    uint64_t len = li->length;
    uintptr_t base = (uintptr_t)li->host_addr;
    enum lt_error e = LT_OK;
    const char *what = "range";
    switch (m->op) {
    case LT_OP_CHECKSUM_VERIFY: {
        const struct lt_op_checksum_verify *a = &m->args.checksum;
        uint64_t blocks = a->length / a->block_size + (a->length % a->block_size != 0);
        e = lt_range_check(a->offset, a->length, len);
        if (e == LT_OK) {
            what = "checksum table";
            e = lt_range_check(a->sums_offset, blocks * 8, len);
        }
        if (e == LT_OK && ((base + a->offset) % 8 != 0 || (base + a->sums_offset) % 8 != 0)) {
            *code_p = LT_E_MISALIGNED;
            snprintf(msg, msglen,
                     "CHECKSUM_VERIFY: data and sums must be 8-aligned in memory; "
                     "the lease starts at segment offset %" PRIu64,
                     li->offset);
            return -1;
        }
        break;
    }
    case LT_OP_VECTOR_SCAN: {
        const struct lt_op_vector_scan *a = &m->args.scan;
        e = lt_range_check(a->offset, a->length, len);
        if (e == LT_OK) {
            what = "query";
            e = lt_range_check(a->query_offset, (uint64_t)a->dim * lt_elem_size(a->elem), len);
        }
        if (e == LT_OK && a->k != 0 && words) {
            /* The area is page-aligned: the offset alone sets the alignment. */
            e = lt_range_check(a->hits_offset, (uint64_t)a->k * sizeof(struct lt_scan_hit),
                               words->size);
            if (e != LT_OK) {
                *code_p = e;
                snprintf(msg, msglen,
                         "VECTOR_SCAN top-k hits: expected them within the words area's %" PRIu64
                         " bytes",
                         words->size);
                return -1;
            }
            if (a->hits_offset % 8 != 0) {
                *code_p = LT_E_MISALIGNED;
                snprintf(msg, msglen, "VECTOR_SCAN: hits must be 8-aligned in the words area");
                return -1;
            }
        } else if (e == LT_OK && a->k != 0) {
            if (!li->writable) {
                *code_p = LT_E_UNSUPPORTED;
                /* Short enough for the wire's LT_ERROR_MSG_LEN, remedy included. */
                snprintf(msg, msglen,
                         "VECTOR_SCAN hits: lease sealed F_SEAL_FUTURE_WRITE; use the words area "
                         "(LT_CAP_WORDS)");
                return -1;
            }
            what = "top-k hits";
            e = lt_range_check(a->hits_offset, (uint64_t)a->k * sizeof(struct lt_scan_hit), len);
            if (e == LT_OK && (base + a->hits_offset) % 8 != 0) {
                *code_p = LT_E_MISALIGNED;
                snprintf(msg, msglen,
                         "VECTOR_SCAN: hits must be 8-aligned in memory; "
                         "the lease starts at segment offset %" PRIu64,
                         li->offset);
                return -1;
            }
        }
        break;
    }
    case LT_OP_COPY_H2D:
        e = lt_range_check(m->args.copy.offset, m->args.copy.length, len);
        break;
    }
    if (e == LT_OK)
        return 0;
    *code_p = e;
    snprintf(msg, msglen, "%s %s: expected it within the lease's %" PRIu64 " bytes",
             lt_msg_type_name(LT_MSG_SUBMIT), what, len);
    return -1;
}

void ga_server__submit(struct ga_server__conn *c, const struct lt_msg_submit *m)
{
    struct ga_server *srv = c->srv;
    uint64_t rid = m->hdr.request_id;
    uint32_t code = LT_OK;
    char msg[160];
    struct ga_server__seg *bell = NULL, *done = NULL;
    struct lease_info li;
    struct lt_failure why;

    char full[LT_ERROR_MSG_LEN];
    if (!ga_server__inflight_room(c, full, sizeof full)) {
        ga_server__send_error(c, rid, LT_MSG_SUBMIT, LT_E_LIMIT, 0, LT_INDEX_NONE, "%s", full);
        return;
    }
    if (((m->flags & LT_SUBMIT_F_WAIT_BELL) && !(c->caps & LT_CAP_DOORBELL)) ||
        ((m->flags & LT_SUBMIT_F_SIGNAL_DONE) && !(c->caps & LT_CAP_DONE_WORD))) {
        ga_server__send_error(c, rid, LT_MSG_SUBMIT, LT_E_UNSUPPORTED, 0, LT_INDEX_NONE,
                              "%s needs the %s capability, not granted at HELLO",
                              (m->flags & LT_SUBMIT_F_WAIT_BELL) ? "WAIT_BELL" : "SIGNAL_DONE",
                              (m->flags & LT_SUBMIT_F_WAIT_BELL) ? "DOORBELL" : "DONE_WORD");
        return;
    }
    int rc = lease_query(srv->svc, c->client, m->lease, &li, &why);
    /* Every op reads the lease's bytes (a scan may write its hits there). */
    if (rc == 0) {
        char what[48];
        snprintf(what, sizeof what, "lease {%" PRIu32 ",%" PRIu32 "}", m->lease.slot, m->lease.gen);
        rc = ga_server__lease_as_data(what, &li, &why);
    }
    if (rc < 0) {
        ga_server__send_failure(c, rid, LT_MSG_SUBMIT, LT_INDEX_NONE, &why);
        return;
    }
    if (li.released) {
        ga_server__send_error(c, rid, LT_MSG_SUBMIT, LT_E_STALE_ID, 0, LT_INDEX_NONE,
                              "lease {%" PRIu32 ",%" PRIu32 "} was released; no new work on it",
                              m->lease.slot, m->lease.gen);
        return;
    }
    struct ga_server__seg *hits_in = m->op == LT_OP_VECTOR_SCAN && m->args.scan.k ? c->words : NULL;
    if (ga_work__args(m, &li, hits_in, &code, msg, sizeof msg) < 0 ||
        ((m->flags & LT_SUBMIT_F_WAIT_BELL) &&
         ga_work__word(c, "bell", &m->bell, &bell, &code, msg, sizeof msg) < 0) ||
        ((m->flags & LT_SUBMIT_F_SIGNAL_DONE) &&
         ga_work__word(c, "done", &m->done, &done, &code, msg, sizeof msg) < 0)) {
        ga_server__send_error(c, rid, LT_MSG_SUBMIT, code, 0, LT_INDEX_NONE, "%s", msg);
        return;
    }
    struct ga_server__job *j = calloc(1, sizeof(*j));
    if (!j) {
        ga_server__send_error(c, rid, LT_MSG_SUBMIT, LT_E_SYSTEM, -ENOMEM, LT_INDEX_NONE,
                              "agent out of memory");
        return;
    }
    /* The GPU waits on and writes the words through the lease service's
     * mapping and registration: hold them (no eviction, no removal, no
     * drain) until the work is done, and take the host and device addresses
     * of the words from it. */
    struct lease_segment_info bell_info = {0}, done_info = {0};
    if (bell) {
        rc = lease_segment_hold(srv->svc, c->client, bell->id, m->bell.offset, 8, &bell_info, &why);
        if (rc == 0)
            j->bell_hold = bell->id;
    }
    if (rc == 0 && done) {
        rc = lease_segment_hold(srv->svc, c->client, done->id, m->done.offset, 8, &done_info, &why);
        if (rc == 0)
            j->done_hold = done->id;
    }
    struct lease_segment_info hits_info = {0};
    if (rc == 0 && hits_in) {
        rc = lease_segment_hold(srv->svc, c->client, hits_in->id, m->args.scan.hits_offset,
                                (uint64_t)m->args.scan.k * sizeof(struct lt_scan_hit), &hits_info,
                                &why);
        if (rc == 0)
            j->hits_hold = hits_in->id;
    }
    /* The words must be there now: a bell or done page the client freed
     * (a hole punched in a segment it could punch, no huge page left) would
     * fault only where the CPU reads it (the host backend), and on the GPU
     * the wait would never pass. One guarded read each; a fault is this
     * client's doing, and it goes (as after any SIGBUS on its memory). */
    bool gone = false;
    if (rc == 0 && bell)
        gone = ga_work__word_gone(&bell_info, m->bell.offset, "bell", &why);
    if (rc == 0 && !gone && done)
        gone = ga_work__word_gone(&done_info, m->done.offset, "done", &why);
    if (rc == 0 && !gone)
        gone = ga_server__lease_gone(&li, &why);
    if (gone)
        rc = -EFAULT;
    /* record_allocation: the lease cannot complete its release until this
     * work is done (lease_work_done in ga_server__complete). */
    if (rc == 0)
        rc = lease_work_pin(srv->svc, c->client, m->lease, &j->ticket, &why);
    if (rc < 0) {
        ga_server__send_failure(c, rid, LT_MSG_SUBMIT, LT_INDEX_NONE, &why);
        ga_work__unhold(srv, j);
        free(j);
        if (gone)
            ga_server__drop_gone(c, &why);
        return;
    }
    j->kind = GA_JOB_WORK;
    j->conn = c;
    j->request_id = rid;
    j->lease = m->lease;
    j->op = m->op;
    j->flags = m->flags;
    j->bell_seg = bell;
    j->done_seg = done;
    struct ga_exec_work w = {
        .owner = c->client.value,
        .stream = m->stream,
        .op = m->op,
        .args = m->args,
        .host = li.host_addr,
        .dev = li.dev_ptr,
        .length = li.length,
        .mem_class = li.cls,
        .accepted_ns = base_now_ns(),
        .done_cb = ga_work__work_done,
        .arg = j,
    };
    if (bell) {
        w.bell.host = (uint64_t *)(void *)((unsigned char *)bell_info.host_base + m->bell.offset);
        w.bell.dev = bell_info.dev_ptr;
        w.bell.seq = m->bell_seq;
        bell->refs++;
    }
    if (done) {
        w.done.host = (uint64_t *)(void *)((unsigned char *)done_info.host_base + m->done.offset);
        w.done.dev = done_info.dev_ptr;
        w.done.seq = m->done_seq;
        done->refs++;
    }
    if (hits_in)
        w.hits = (unsigned char *)hits_info.host_base + m->args.scan.hits_offset;
    c->inflight++;
    j->op_bytes = li.length;
    why = (struct lt_failure){0};
    rc = ga_exec_submit(srv->ex, &w, &why);
    if (rc < 0) {
        c->inflight--;
        if (bell)
            ga_server__seg_unref(bell);
        if (done)
            ga_server__seg_unref(done);
        lease_work_done(srv->svc, j->ticket, NULL);
        ga_work__unhold(srv, j);
        free(j);
        ga_server__send_failure(c, rid, LT_MSG_SUBMIT, LT_INDEX_NONE, &why);
        return;
    }
    c->submits++;
    ga_server__metrics_submit(srv, j, m);
}

/* The executor's typed verb for wire command @type. */
static int ga_work__verb(struct ga_executor *ex, uint64_t owner, const void *buf, uint16_t type,
                         struct ga_server__job *j, struct lt_failure *why)
{
    const struct ga_exec_reply r = {.done_cb = ga_work__ctl_done, .arg = j};
    const struct lt_msg_stream_cmd *sc = buf;
    const struct lt_msg_event_cmd *ec = buf;
    switch (type) {
    case LT_MSG_STREAM_CREATE:
        return ga_exec_stream_create(ex, owner, sc->flags, &r, why);
    case LT_MSG_STREAM_VALIDATE:
        return ga_exec_stream_validate(ex, owner, sc->stream, &r, why);
    case LT_MSG_STREAM_QUERY:
        return ga_exec_stream_query(ex, owner, sc->stream, &r, why);
    case LT_MSG_STREAM_SYNCHRONIZE:
        return ga_exec_stream_synchronize(ex, owner, sc->stream, &r, why);
    case LT_MSG_STREAM_DESTROY:
        return ga_exec_stream_destroy(ex, owner, sc->stream, &r, why);
    case LT_MSG_EVENT_RECORD:
        return ga_exec_event_record(ex, owner, ec->stream, ec->event, ec->flags, &r, why);
    case LT_MSG_EVENT_WAIT:
        return ga_exec_event_wait(ex, owner, ec->stream, ec->event, &r, why);
    case LT_MSG_EVENT_QUERY:
        return ga_exec_event_query(ex, owner, ec->event, &r, why);
    case LT_MSG_EVENT_SYNCHRONIZE:
        return ga_exec_event_synchronize(ex, owner, ec->event, &r, why);
    case LT_MSG_EVENT_DESTROY:
        return ga_exec_event_destroy(ex, owner, ec->event, &r, why);
    case LT_MSG_EVENT_ELAPSED:
        return ga_exec_event_elapsed(ex, owner, ec->event, ec->end, &r, why);
    case LT_MSG_DEVICE_SYNCHRONIZE:
        return ga_exec_device_synchronize(ex, owner, &r, why);
    default: /* unreachable: lt_msg_type_is_ctl admitted it */
        return lt_failure_set(why, LT_E_WRONG_TYPE, 0,
                              "%s is not a stream, event or device command",
                              lt_msg_type_name(type));
    }
}

void ga_server__ctl(struct ga_server__conn *c, const void *buf, uint16_t type)
{
    struct ga_server *srv = c->srv;
    uint64_t rid = ga_work__rid(buf);
    char full[LT_ERROR_MSG_LEN];
    if (!ga_server__inflight_room(c, full, sizeof full)) {
        ga_server__send_error(c, rid, type, LT_E_LIMIT, 0, LT_INDEX_NONE, "%s", full);
        return;
    }
    struct ga_server__job *j = calloc(1, sizeof(*j));
    if (!j) {
        ga_server__send_error(c, rid, type, LT_E_SYSTEM, -ENOMEM, LT_INDEX_NONE,
                              "agent out of memory");
        return;
    }
    j->kind = GA_JOB_CTL;
    j->conn = c;
    j->request_id = rid;
    j->ctl_type = type;
    c->inflight++; /* before: the answer may be posted before the verb returns */
    struct lt_failure why = {0};
    int rc = ga_work__verb(srv->ex, c->client.value, buf, type, j, &why);
    if (rc < 0) {
        c->inflight--;
        free(j);
        ga_server__send_failure(c, rid, type, LT_INDEX_NONE, &why);
    }
}

void ga_server__completion_build(const struct ga_server__job *j, struct lt_msg_completion *r)
{
    lt_msg_init(r, sizeof *r, LT_MSG_COMPLETION, j->request_id);
    r->lease = j->lease;
    r->op = j->op;
    r->status = lt_error_is_known(j->res.status) ? j->res.status : LT_E_GPU_FAULT;
    r->detail = j->res.detail;
    r->elapsed_ns = j->res.elapsed_ns;
    if (r->status == LT_OK || r->status == LT_E_CHECKSUM_MISMATCH)
        r->result = j->res.result;
    /* Results the op never produced still have to read as "none". */
    if (lt_validate_op_result(r->op, &r->result) != LT_OK) {
        memset(&r->result, 0, sizeof r->result);
        if (r->op == LT_OP_CHECKSUM_VERIFY)
            r->result.checksum.first_bad_block = LT_BLOCK_NONE;
        else if (r->op == LT_OP_VECTOR_SCAN)
            r->result.scan.best_index = LT_BLOCK_NONE;
        if (r->status == LT_OK)
            r->status = LT_E_GPU_FAULT;
    }
}

static void ga_work__completion(struct ga_server__conn *c, struct ga_server__job *j)
{
    struct lt_msg_completion r;
    ga_server__completion_build(j, &r);
    if (r.status != LT_OK || !(j->flags & LT_SUBMIT_F_QUIET))
        ga_server__send(c, &r, sizeof r);
}

static void ga_work__ctl_reply(struct ga_server__conn *c, struct ga_server__job *j)
{
    const struct ga_exec_ctl_result *x = &j->ctl;
    if (x->status != LT_OK) {
        ga_server__send_error(c, j->request_id, j->ctl_type, x->status, 0, LT_INDEX_NONE, "%s",
                              x->message[0] ? x->message : lt_error_describe(x->status));
        return;
    }
    struct lt_msg_ctl_reply r;
    lt_msg_init(&r, sizeof r, LT_MSG_CTL_REPLY, j->request_id);
    r.request_type = j->ctl_type;
    if (j->ctl_type == LT_MSG_STREAM_QUERY || j->ctl_type == LT_MSG_EVENT_QUERY)
        r.ready = x->ready ? 1u : 0u;
    if (j->ctl_type == LT_MSG_STREAM_CREATE)
        r.stream = x->stream;
    if (j->ctl_type == LT_MSG_EVENT_RECORD)
        r.event = x->event;
    if (j->ctl_type == LT_MSG_EVENT_ELAPSED)
        r.elapsed_ms_bits = lt_f32_bits_finite(x->elapsed_ms_bits) ? x->elapsed_ms_bits : 0u;
    ga_server__send(c, &r, sizeof r);
}

void ga_server__work_complete(struct ga_server *srv, struct ga_server__job *j)
{
    struct ga_server__conn *c = j->conn;
    if (j->kind == GA_JOB_CTL) {
        if (c->closed)
            return;
        if (j->ctl_type == LT_MSG_RING_CLOSE)
            ga_server__ring_closed_reply(c, j);
        else
            ga_work__ctl_reply(c, j);
        return;
    }
    ga_server__metrics_completion(srv, j);
    if (!c->closed)
        ga_work__completion(c, j);
    if (j->res.status == LT_E_SEGMENT_GONE && !c->closed) {
        /* A page of its memory could not be read: it freed pages it had
         * leased (or offered as a bell), which the contract forbids. */
        base_log(&srv->cfg.log, BASE_LOG_WARN, GA_SERVER__SUBSYS,
                 "client %" PRIu32 " (pid %ld): its memory vanished under the agent (SIGBUS "
                 "caught, %" PRIu64 " so far): dropping it",
                 c->id, (long)c->pid, base_guard_faults());
        ga_server__conn_kill(c, "its segment memory vanished (SIGBUS)");
    }
    /* After the COMPLETION: a release waiting on this work completes now
     * and its RELEASE_COMPLETE follows on the wire. */
    lease_work_done(srv->svc, j->ticket, NULL);
    if (j->bell_seg)
        ga_server__seg_unref(j->bell_seg);
    if (j->done_seg)
        ga_server__seg_unref(j->done_seg);
    /* Last: the final hold of a dropped client lets its drain finish,
     * and the words' mapping goes only after the work that used it. */
    ga_work__unhold(srv, j);
}
