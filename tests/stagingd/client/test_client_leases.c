/* The lease client against a fake agent: Batched leases mapped to the agent's ids, submits matched
 * by request id in any order, agent errors with their text, and release-complete gating (single and
 * batched). */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernels/blockhash_ref.h"
#include "client_internal.h" /* the raw request path */
#include "client_test_util.h"

/* ---- leases ---- */

START_TEST(test_lease_batch_maps_segments_and_grant_entries)
{
    struct leasec_client *c = client_new(5, 50);
    int fd1, fd2;
    void *b1 = memfd_seg(MIB, &fd1), *b2 = memfd_seg(64 << 10, &fd2);
    ck_assert_int_eq(leasec_client_segment_add(c, 11, fd1, b1, MIB, LT_CLASS_PINNED), 0);
    ck_assert_int_eq(leasec_client_segment_add(c, 22, fd2, b2, 64 << 10, LT_CLASS_MAPPED), 0);
    ck_assert_int_eq(leasec_client_segment_add(c, 22, fd2, b2, 64 << 10, LT_CLASS_MAPPED), -EEXIST);
    ck_assert_int_eq(leasec_client_segment_add(c, 23, fd2, b2, 1000, LT_CLASS_MAPPED), -EINVAL);
    struct fake f;
    union lt_msg_buffer b;
    unsigned agent;
    uint64_t cookies[8];
    fake_listen(&f, g_path);
    ck_assert_int_eq(leasec_client_agent_add(c, g_path, &agent), 0);
    handshake(&f, c, 0, 4, 2, cookies);

    struct leasec_client_lease_req reqs[5] = {
        {.segment = 11, .offset = 0, .length = 4096},
        {.segment = 22, .offset = 4096, .length = 8192},
        {.segment = 11, .offset = 65536, .length = 65536, .flags = LT_LEASE_F_ALLOW_STAGED},
        {.segment = 11, .offset = 8192, .length = 4096},
        {.segment = 11, .offset = 0, .length = 4096},
    };
    uint64_t rid;
    ck_assert_int_eq(leasec_client_lease_request(c, 0, reqs, 5, 0, 0, &rid), -E2BIG);
    struct leasec_client_lease_req bad = {.segment = 11, .offset = MIB - 4096, .length = 8192};
    ck_assert_int_eq(leasec_client_lease_request(c, 0, &bad, 1, 0, 0, &rid), -ERANGE);
    bad = (struct leasec_client_lease_req){.segment = 33, .length = 4096};
    ck_assert_int_eq(leasec_client_lease_request(c, 0, &bad, 1, 0, 0, &rid), -ENOENT);
    ck_assert_int_eq(fake_recv(&f, &b, 20, NULL, NULL), -1); /* refused locally: nothing sent */

    ck_assert_int_eq(leasec_client_lease_request(c, 0, reqs, 4, 0, 555, &rid), 0);
    recv_type(&f, c, &b, LT_MSG_LEASE_REQUEST);
    const struct lt_msg_lease_request *q = (const void *)&b;
    ck_assert_uint_eq(q->hdr.request_id, rid);
    ck_assert_uint_eq(q->count, 4);
    for (unsigned k = 0; k < 4; k++) {
        unsigned si = reqs[k].segment == cookies[0] ? 0 : 1;
        ck_assert(lt_segment_id_eq(q->entries[k].segment, agent_seg_id(si)));
        ck_assert_uint_eq(q->entries[k].offset, reqs[k].offset);
        ck_assert_uint_eq(q->entries[k].length, reqs[k].length);
        ck_assert_uint_eq(q->entries[k].mem_class,
                          reqs[k].segment == 11 ? LT_CLASS_PINNED : LT_CLASS_MAPPED);
        ck_assert_uint_eq(q->entries[k].flags, reqs[k].flags);
    }
    union lt_msg_buffer out;
    size_t len = sizeof(struct lt_msg_lease_grant) + 4 * sizeof(struct lt_lease_grant_entry);
    lt_msg_init(&out, len, LT_MSG_LEASE_GRANT, rid);
    struct lt_msg_lease_grant *g = (void *)&out;
    g->count = 4;
    g->entries[0] = (struct lt_lease_grant_entry){lt_lease_id_make(40, 2), LT_CLASS_PINNED, LT_OK};
    g->entries[1] = (struct lt_lease_grant_entry){lt_lease_id_make(41, 9), LT_CLASS_MAPPED, LT_OK};
    g->entries[2] = (struct lt_lease_grant_entry){lt_lease_id_make(42, 1), LT_CLASS_STAGED, LT_OK};
    g->entries[3] = (struct lt_lease_grant_entry){lt_lease_id_make(0, 0), 0, LT_E_BUDGET};
    fake_send(&f, &out, len, -1);
    unsigned want = nev + 1;
    pump_until(c, want);
    struct ev *e = &evs[want - 1];
    ck_assert_int_eq(e->kind, EV_GRANT);
    ck_assert_uint_eq(e->rid, rid);
    ck_assert_uint_eq(e->tag, 555);
    ck_assert_uint_eq(e->count, 4);
    for (unsigned k = 0; k < 3; k++) {
        ck_assert_int_eq(e->ents[k].err, 0);
        ck_assert(lt_lease_id_eq(e->ents[k].lease.id, g->entries[k].lease));
        ck_assert_uint_eq(e->ents[k].lease.segment, reqs[k].segment);
        ck_assert_uint_eq(e->ents[k].lease.offset, reqs[k].offset);
        ck_assert_uint_eq(e->ents[k].lease.length, reqs[k].length);
        ck_assert_uint_eq(e->ents[k].lease.mem_class, g->entries[k].mem_class);
        ck_assert_uint_eq(e->ents[k].lease.epoch, 1);
        ck_assert_uint_eq(e->ents[k].lease.agent, 0);
    }
    ck_assert_int_eq(e->ents[3].err, -ENOSPC);
    ck_assert_uint_eq(e->ents[3].status, LT_E_BUDGET);
    struct leasec_client_agent_info info;
    ck_assert_int_eq(leasec_client_agent_info(c, 0, &info), 0);
    ck_assert_uint_eq(info.leases, 3);
    ck_assert_uint_eq(info.in_flight, 0);

    leasec_client_destroy(c);
    fake_close(&f);
    munmap(b1, MIB);
    munmap(b2, 64 << 10);
    close(fd1);
    close(fd2);
}
END_TEST

/* ---- submits ---- */

START_TEST(test_submit_replies_out_of_order_match_by_request_id)
{
    struct leasec_client *c = client_new(5, 50);
    int fd1, fd2;
    void *b1 = memfd_seg(MIB, &fd1), *b2 = memfd_seg(64 << 10, &fd2);
    ck_assert_int_eq(leasec_client_segment_add(c, 1, fd1, b1, MIB, LT_CLASS_PINNED), 0);
    ck_assert_int_eq(leasec_client_segment_add(c, 2, fd2, b2, 64 << 10, LT_CLASS_MAPPED), 0);
    struct fake f;
    union lt_msg_buffer b;
    unsigned agent;
    fake_listen(&f, g_path);
    ck_assert_int_eq(leasec_client_agent_add(c, g_path, &agent), 0);
    handshake(&f, c, LT_CAP_DOORBELL | LT_CAP_DONE_WORD, 8, 2, NULL);
    struct leasec_client_lease_req r = {.segment = 1, .offset = 0, .length = 65536 + 4096};
    struct leasec_client_lease lease;
    lease_all(&f, c, &r, 1, 1, &lease);

    uint64_t rids[3];
    for (unsigned k = 0; k < 3; k++) {
        struct leasec_client_work w = checksum_work(0, 4096 * (k + 1), 65536);
        w.bell = (struct leasec_client_word){.segment = 2, .offset = 8 * k, .seq = k + 1};
        w.done = (struct leasec_client_word){.segment = 2, .offset = 512 + 8 * k, .seq = 100 + k};
        ck_assert_int_eq(leasec_client_submit(c, &lease, &w, 1000 + k, &rids[k]), 0);
    }
    ck_assert(rids[0] < rids[1] && rids[1] < rids[2]);
    struct leasec_client_work bad = checksum_work(0, 4096, 65536);
    bad.bell = (struct leasec_client_word){.segment = 1, .offset = 0, .seq = 1};
    uint64_t rid;
    ck_assert_int_eq(leasec_client_submit(c, &lease, &bad, 0, &rid), -EINVAL); /* PINNED bell */
    bad.bell = (struct leasec_client_word){.segment = 2, .offset = 4, .seq = 1};
    ck_assert_int_eq(leasec_client_submit(c, &lease, &bad, 0, &rid), -EINVAL); /* misaligned */

    for (unsigned k = 0; k < 3; k++) {
        recv_type(&f, c, &b, LT_MSG_SUBMIT);
        const struct lt_msg_submit *s = (const void *)&b;
        ck_assert_uint_eq(s->hdr.request_id, rids[k]);
        ck_assert(lt_lease_id_eq(s->lease, lease.id));
        ck_assert_uint_eq(s->flags, LT_SUBMIT_F_WAIT_BELL | LT_SUBMIT_F_SIGNAL_DONE);
        ck_assert(lt_segment_id_eq(s->bell.segment, agent_seg_id(1)));
        ck_assert_uint_eq(s->bell.offset, 8 * k);
        ck_assert_uint_eq(s->bell_seq, k + 1);
        ck_assert(lt_segment_id_eq(s->done.segment, agent_seg_id(1)));
        ck_assert_uint_eq(s->done.offset, 512 + 8 * k);
        ck_assert_uint_eq(s->done_seq, 100 + k);
        ck_assert_uint_eq(s->args.checksum.length, 4096 * (k + 1));
    }
    /* answer 3, 1, 2 */
    const unsigned order[3] = {2, 0, 1};
    unsigned base = nev;
    for (unsigned i = 0; i < 3; i++)
        completion_send(&f, rids[order[i]], lease.id, 10 + order[i]);
    pump_until(c, base + 3);
    for (unsigned i = 0; i < 3; i++) {
        struct ev *e = &evs[base + i];
        unsigned k = order[i];
        ck_assert_int_eq(e->kind, EV_COMPLETION);
        ck_assert_uint_eq(e->rid, rids[k]);
        ck_assert_uint_eq(e->tag, 1000 + k);
        ck_assert_uint_eq(e->result.checksum.blocks_checked, 10 + k);
        ck_assert(lt_lease_id_eq(e->lease.id, lease.id));
        ck_assert_int_eq(e->err, 0);
    }
    struct leasec_client_agent_info info;
    ck_assert_int_eq(leasec_client_agent_info(c, 0, &info), 0);
    ck_assert_uint_eq(info.in_flight, 0);
    leasec_client_destroy(c);
    fake_close(&f);
    munmap(b1, MIB);
    munmap(b2, 64 << 10);
    close(fd1);
    close(fd2);
}
END_TEST

struct responder {
    struct fake *f;
    int mode; /* 0: CTL_REPLY with a new stream; 1: ERROR */
};

static void *respond_once(void *arg)
{
    struct responder *r = arg;
    union lt_msg_buffer b;
    if (fake_recv(r->f, &b, WAIT_MS, NULL, NULL) < 0)
        return NULL;
    if (r->mode == 0) {
        struct lt_msg_ctl_reply m;
        lt_msg_init(&m, sizeof(m), LT_MSG_CTL_REPLY, b.hdr.request_id);
        m.request_type = b.hdr.type;
        m.stream = lt_stream_id_make(3, 1);
        fake_send(r->f, &m, sizeof(m), -1);
    } else {
        struct lt_msg_error m;
        fake_error(&m, b.hdr.request_id, b.hdr.type, LT_E_LIMIT, LT_INDEX_NONE,
                   "stream limit 16 reached");
        fake_send(r->f, &m, sizeof(m), -1);
    }
    return NULL;
}

START_TEST(test_agent_errors_surface_with_the_agents_message)
{
    struct leasec_client *c = client_new(5, 50);
    int fd1, fd2;
    void *b1 = memfd_seg(MIB, &fd1), *b2 = memfd_seg(64 << 10, &fd2);
    ck_assert_int_eq(leasec_client_segment_add(c, 1, fd1, b1, MIB, LT_CLASS_PINNED), 0);
    ck_assert_int_eq(leasec_client_segment_add(c, 2, fd2, b2, 64 << 10, LT_CLASS_MAPPED), 0);
    struct fake f;
    union lt_msg_buffer b;
    unsigned agent;
    fake_listen(&f, g_path);
    ck_assert_int_eq(leasec_client_agent_add(c, g_path, &agent), 0);
    handshake(&f, c, 0, 8, 2, NULL); /* no doorbell capability granted */
    struct leasec_client_lease_req r = {.segment = 1, .offset = 0, .length = 65536 + 4096};
    struct leasec_client_lease lease;
    lease_all(&f, c, &r, 1, 1, &lease);

    struct leasec_client_work w = checksum_work(0, 65536, 65536);
    uint64_t rid;
    w.bell = (struct leasec_client_word){.segment = 2, .offset = 0, .seq = 1};
    ck_assert_int_eq(leasec_client_submit(c, &lease, &w, 0, &rid), -EOPNOTSUPP);
    ck_assert_ptr_nonnull(strstr(leasec_client_last_error(c), "capability"));
    w.bell.seq = 0;
    ck_assert_int_eq(leasec_client_submit(c, &lease, &w, 31, &rid), 0);
    recv_type(&f, c, &b, LT_MSG_SUBMIT);
    struct lt_msg_error em;
    fake_error(&em, rid, LT_MSG_SUBMIT, LT_E_NOT_FOUND, LT_INDEX_NONE,
               "lease 1:1 is not known here");
    fake_send(&f, &em, sizeof(em), -1);
    unsigned want = nev + 1;
    pump_until(c, want);
    struct ev *e = &evs[want - 1];
    ck_assert_int_eq(e->kind, EV_ERROR);
    ck_assert_uint_eq(e->rid, rid);
    ck_assert_uint_eq(e->tag, 31);
    ck_assert_uint_eq(e->type, LT_MSG_SUBMIT);
    ck_assert_uint_eq(e->code, LT_E_NOT_FOUND);
    ck_assert_int_eq(e->err, -ENOENT);
    ck_assert_msg(strstr(e->msg, "lease 1:1 is not known here") && strstr(e->msg, g_path) &&
                      strstr(e->msg, "LT_E_NOT_FOUND"),
                  "message: %s", e->msg);

    /* a batch refused at one entry */
    struct leasec_client_lease_req two[2] = {{.segment = 1, .length = 4096},
                                             {.segment = 1, .offset = 4096, .length = 4096}};
    ck_assert_int_eq(
        leasec_client_lease_request(c, 0, two, 2, LT_LEASE_REQ_F_ALL_OR_NOTHING, 32, &rid), 0);
    recv_type(&f, c, &b, LT_MSG_LEASE_REQUEST);
    fake_error(&em, rid, LT_MSG_LEASE_REQUEST, LT_E_LIMIT, 1, "lease limit 1 reached");
    fake_send(&f, &em, sizeof(em), -1);
    pump_until(c, ++want);
    e = &evs[want - 1];
    ck_assert_int_eq(e->kind, EV_ERROR);
    ck_assert_uint_eq(e->index, 1);
    ck_assert_int_eq(e->err, -EMFILE);
    ck_assert_ptr_nonnull(strstr(e->msg, "lease limit 1 reached"));

    /* the blocking call: a reply, then an ERROR; raw (the internal path
     * the typed calls build on), then typed */
    struct lt_msg_stream_cmd sc;
    lt_msg_init(&sc, sizeof(sc), LT_MSG_STREAM_CREATE, 1);
    struct responder rs = {.f = &f, .mode = 0};
    pthread_t th;
    union lt_msg_buffer reply;
    ck_assert_int_eq(pthread_create(&th, NULL, respond_once, &rs), 0);
    ck_assert_int_eq(leasec_client__msg_call(c, 0, &sc, sizeof(sc), WAIT_MS, &reply), 0);
    pthread_join(th, NULL);
    ck_assert_uint_eq(reply.hdr.type, LT_MSG_CTL_REPLY);
    ck_assert(lt_stream_id_eq(((struct lt_msg_ctl_reply *)(void *)&reply)->stream,
                              lt_stream_id_make(3, 1)));
    rs.mode = 1;
    ck_assert_int_eq(pthread_create(&th, NULL, respond_once, &rs), 0);
    ck_assert_int_eq(leasec_client__msg_call(c, 0, &sc, sizeof(sc), WAIT_MS, &reply), -EMFILE);
    pthread_join(th, NULL);
    ck_assert_ptr_nonnull(strstr(leasec_client_last_error(c), "stream limit 16 reached"));

    const struct leasec_ctl create = {.type = LEASEC_REQ_STREAM_CREATE,
                                      .flags = LEASEC_STREAM_F_NONBLOCKING};
    struct leasec_client_reply typed;
    rs.mode = 0;
    ck_assert_int_eq(pthread_create(&th, NULL, respond_once, &rs), 0);
    ck_assert_int_eq(leasec_client_ctl_call(c, 0, &create, WAIT_MS, &typed), 0);
    pthread_join(th, NULL);
    ck_assert_uint_eq(typed.request_type, LEASEC_REQ_STREAM_CREATE);
    ck_assert(lt_stream_id_eq(typed.stream, lt_stream_id_make(3, 1)));
    ck_assert_ptr_null(typed.stats);
    ck_assert_ptr_null(leasec_client_last_refusal(c));
    rs.mode = 1;
    ck_assert_int_eq(pthread_create(&th, NULL, respond_once, &rs), 0);
    ck_assert_int_eq(leasec_client_ctl_call(c, 0, &create, WAIT_MS, &typed), -EMFILE);
    pthread_join(th, NULL);
    ck_assert_ptr_nonnull(strstr(leasec_client_last_error(c), "stream limit 16 reached"));
    const struct lt_failure *why = leasec_client_last_refusal(c);
    ck_assert_ptr_nonnull(why);
    ck_assert_uint_eq(why->code, LT_E_LIMIT);
    ck_assert_int_eq(why->err, -EMFILE);
    ck_assert_str_eq(why->message, "stream limit 16 reached");
    ck_assert_int_eq(ev_count(EV_REPLY), 0); /* blocking answers bypass on_reply */

    struct lt_msg_submit not_ctl;
    lt_msg_init(&not_ctl, sizeof(not_ctl), LT_MSG_SUBMIT, 1);
    ck_assert_int_eq(leasec_client__msg_send(c, 0, &not_ctl, sizeof(not_ctl), 0, &rid), -EINVAL);
    const struct leasec_ctl typed_not_ctl = {.type = LEASEC_REQ_SUBMIT};
    ck_assert_int_eq(leasec_client_ctl_send(c, 0, &typed_not_ctl, 0, &rid), -EINVAL);
    const struct leasec_ctl device_with_stream = {.type = LEASEC_REQ_DEVICE_SYNCHRONIZE,
                                                  .stream = {1, 1}};
    ck_assert_int_eq(leasec_client_ctl_send(c, 0, &device_with_stream, 0, &rid), -EINVAL);

    leasec_client_destroy(c);
    fake_close(&f);
    munmap(b1, MIB);
    munmap(b2, 64 << 10);
    close(fd1);
    close(fd2);
}
END_TEST

/* ---- release ---- */

START_TEST(test_buffer_reusable_only_after_its_release_complete)
{
    struct leasec_client *c = client_new(5, 50);
    int fd1;
    void *b1 = memfd_seg(MIB, &fd1);
    ck_assert_int_eq(leasec_client_segment_add(c, 1, fd1, b1, MIB, LT_CLASS_PINNED), 0);
    struct fake f;
    union lt_msg_buffer b;
    unsigned agent;
    fake_listen(&f, g_path);
    ck_assert_int_eq(leasec_client_agent_add(c, g_path, &agent), 0);
    handshake(&f, c, 0, 8, 1, NULL);
    struct leasec_client_lease_req r[3] = {{.segment = 1, .offset = 0, .length = 65536 + 4096},
                                           {.segment = 1, .offset = 131072, .length = 4096},
                                           {.segment = 1, .offset = 262144, .length = 4096}};
    struct leasec_client_lease l[3];
    lease_all(&f, c, r, 3, 1, l);

    uint64_t quiet_rid, rid, rel;
    struct leasec_client_work w = checksum_work(0, 65536, 65536);
    w.flags = LT_SUBMIT_F_QUIET;
    ck_assert_int_eq(leasec_client_submit(c, &l[0], &w, 77, &quiet_rid), 0);
    recv_type(&f, c, &b, LT_MSG_SUBMIT);
    ck_assert_uint_eq(((struct lt_msg_submit *)(void *)&b)->flags, LT_SUBMIT_F_QUIET);

    ck_assert_int_eq(leasec_client_lease_release(c, l, 2, 88, &rel), 0);
    ck_assert_int_eq(leasec_client_submit(c, &l[0], &w, 0, &rid), -EBUSY);
    ck_assert_int_eq(leasec_client_lease_release(c, l, 1, 0, &rid), -EBUSY);
    struct leasec_client_lease dup[2] = {l[2], l[2]};
    ck_assert_int_eq(leasec_client_lease_release(c, dup, 2, 0, &rid), -EINVAL);
    recv_type(&f, c, &b, LT_MSG_LEASE_RELEASE);
    const struct lt_msg_lease_release *q = (const void *)&b;
    ck_assert_uint_eq(q->count, 2);
    ck_assert(lt_lease_id_eq(q->leases[0], l[0].id));
    ck_assert(lt_lease_id_eq(q->leases[1], l[1].id));

    /* the second lease drains first; the first is still busy on the GPU */
    unsigned base = nev;
    release_complete_send(&f, rel, l[1].id, LT_OK);
    pump_until(c, base + 1);
    pump_for(c, 30);
    ck_assert_uint_eq(nev, base + 1);
    ck_assert_int_eq(evs[base].kind, EV_RELEASE);
    ck_assert(lt_lease_id_eq(evs[base].lease.id, l[1].id));
    ck_assert_uint_eq(evs[base].lease.offset, 131072);
    ck_assert_int_eq(evs[base].reusable, 1);
    ck_assert_uint_eq(evs[base].tag, 88);
    struct leasec_client_agent_info info;
    ck_assert_int_eq(leasec_client_agent_info(c, 0, &info), 0);
    ck_assert_uint_eq(info.in_flight, 2); /* the release and the quiet submit */

    release_complete_send(&f, rel, l[0].id, LT_OK);
    pump_until(c, base + 2);
    ck_assert_int_eq(evs[base + 1].kind, EV_RELEASE);
    ck_assert(lt_lease_id_eq(evs[base + 1].lease.id, l[0].id));
    ck_assert_int_eq(evs[base + 1].reusable, 1);
    ck_assert_int_eq(leasec_client_agent_info(c, 0, &info), 0);
    ck_assert_uint_eq(info.in_flight, 0); /* the quiet submit retired with its lease */
    ck_assert_uint_eq(info.leases, 1);
    ck_assert_int_eq(leasec_client_wait(c, 0, quiet_rid, 0), 0);

    /* a release that completes with an error is not a reuse permit */
    ck_assert_int_eq(leasec_client_lease_release(c, &l[2], 1, 0, &rel), 0);
    recv_type(&f, c, &b, LT_MSG_LEASE_RELEASE);
    release_complete_send(&f, rel, l[2].id, LT_E_GPU_FAULT);
    pump_until(c, base + 3);
    ck_assert_int_eq(evs[base + 2].kind, EV_RELEASE);
    ck_assert_int_eq(evs[base + 2].reusable, 0);
    ck_assert_int_eq(evs[base + 2].err, -EIO);
    ck_assert_ptr_nonnull(strstr(evs[base + 2].msg, "LT_E_GPU_FAULT"));
    ck_assert_int_eq(leasec_client_agent_info(c, 0, &info), 0);
    ck_assert_uint_eq(info.leases, 0);

    leasec_client_destroy(c);
    fake_close(&f);
    munmap(b1, MIB);
    close(fd1);
}
END_TEST

/* Release @rel delivered nothing before the disconnect at event @d: its
 * leases come back only as failures (no reuse permit) after it. */
static void release_fails_after(int d, uint64_t rel)
{
    unsigned n = 0;
    for (unsigned i = 0; i < nev; i++) {
        if (evs[i].kind != EV_RELEASE || evs[i].rid != rel)
            continue;
        ck_assert_int_gt((int)i, d);
        ck_assert_int_eq(evs[i].reusable, 0);
        ck_assert_int_lt(evs[i].err, 0);
        n++;
    }
    ck_assert_uint_eq(n, 2);
}

/* A RELEASE_COMPLETE_BATCH is delivered exactly as its entries would be as
 * single RELEASE_COMPLETEs (same callbacks, order, tags, reuse permits),
 * mixes with singles for the same release, and retires the release's quiet
 * submits; a batch naming a lease its release does not hold, or sent
 * without the cap granted, breaks the connection and delivers nothing. */
START_TEST(test_release_batch_acts_as_single_completes)
{
    struct leasec_client *c = client_new(5, 50);
    int fd1;
    void *b1 = memfd_seg(MIB, &fd1);
    ck_assert_int_eq(leasec_client_segment_add(c, 1, fd1, b1, MIB, LT_CLASS_PINNED), 0);
    struct fake f;
    union lt_msg_buffer b;
    unsigned agent;
    uint64_t rng = SEED ^ 0xba7c;
    fake_listen(&f, g_path);
    ck_assert_int_eq(leasec_client_agent_add(c, g_path, &agent), 0);
    handshake(&f, c, LT_CAP_RC_BATCH, 8, 1, NULL);

    enum { N = 5 };
    struct leasec_client_lease_req r[N];
    for (unsigned k = 0; k < N; k++)
        r[k] = (struct leasec_client_lease_req){
            .segment = 1, .offset = 65536 * k + 4096 * (rng_next(&rng) % 8), .length = 4096};
    struct leasec_client_lease l[N];
    lease_all(&f, c, r, N, 1, l);
    uint64_t quiet_rid, rel;
    struct leasec_client_work w = checksum_work(0, 2048, 2048);
    w.flags = LT_SUBMIT_F_QUIET;
    ck_assert_int_eq(leasec_client_submit(c, &l[0], &w, 5, &quiet_rid), 0);
    recv_type(&f, c, &b, LT_MSG_SUBMIT);
    ck_assert_int_eq(leasec_client_lease_release(c, l, N, 91, &rel), 0);
    recv_type(&f, c, &b, LT_MSG_LEASE_RELEASE);

    /* two in one batch, out of request order, one failed */
    unsigned base = nev;
    struct lt_lease_id ids[2] = {l[3].id, l[1].id};
    uint32_t st[2] = {LT_OK, LT_E_GPU_FAULT};
    release_batch_send(&f, rel, ids, st, 2);
    pump_until(c, base + 2);
    pump_for(c, 20);
    ck_assert_uint_eq(nev, base + 2);
    for (unsigned k = 0; k < 2; k++) {
        ck_assert_int_eq(evs[base + k].kind, EV_RELEASE);
        ck_assert_uint_eq(evs[base + k].rid, rel);
        ck_assert_uint_eq(evs[base + k].tag, 91);
        ck_assert(lt_lease_id_eq(evs[base + k].lease.id, ids[k]));
    }
    ck_assert_uint_eq(evs[base].lease.offset, r[3].offset);
    ck_assert_int_eq(evs[base].reusable, 1);
    ck_assert_int_eq(evs[base + 1].reusable, 0);
    ck_assert_int_eq(evs[base + 1].err, -EIO);
    ck_assert_ptr_nonnull(strstr(evs[base + 1].msg, "LT_E_GPU_FAULT"));
    struct leasec_client_agent_info info;
    ck_assert_int_eq(leasec_client_agent_info(c, 0, &info), 0);
    ck_assert_uint_eq(info.in_flight, 2); /* the release and the quiet submit */
    ck_assert_uint_eq(info.leases, 3);

    /* a single for the same release, then a batch with the rest */
    release_complete_send(&f, rel, l[4].id, LT_OK);
    pump_until(c, base + 3);
    ck_assert(lt_lease_id_eq(evs[base + 2].lease.id, l[4].id));
    struct lt_lease_id rest[2] = {l[2].id, l[0].id};
    uint32_t ok2[2] = {LT_OK, LT_OK};
    release_batch_send(&f, rel, rest, ok2, 2);
    pump_until(c, base + 5);
    ck_assert(lt_lease_id_eq(evs[base + 3].lease.id, l[2].id));
    ck_assert(lt_lease_id_eq(evs[base + 4].lease.id, l[0].id));
    ck_assert_int_eq(evs[base + 4].reusable, 1);
    ck_assert_int_eq(leasec_client_agent_info(c, 0, &info), 0);
    ck_assert_uint_eq(info.in_flight, 0); /* the quiet submit retired with its lease */
    ck_assert_uint_eq(info.leases, 0);
    ck_assert_int_eq(leasec_client_wait(c, 0, quiet_rid, 0), 0);

    /* a batch naming one held lease and one of an earlier release: nothing delivered */
    struct leasec_client_lease m[2];
    lease_all(&f, c, r, 2, 10, m);
    ck_assert_int_eq(leasec_client_lease_release(c, m, 2, 92, &rel), 0);
    recv_type(&f, c, &b, LT_MSG_LEASE_RELEASE);
    base = nev;
    struct lt_lease_id bad[2] = {m[0].id, l[3].id};
    release_batch_send(&f, rel, bad, ok2, 2);
    pump_until(c, base + 1);
    pump_for(c, 20);
    int d = ev_find(EV_DISCONNECT, 0);
    ck_assert_int_ge(d, (int)base);
    ck_assert_msg(strstr(evs[d].msg, "RELEASE_COMPLETE_BATCH") &&
                      strstr(evs[d].msg, "does not answer"),
                  "message: %s", evs[d].msg);
    release_fails_after(d, rel);
    fake_drop(&f);

    /* reconnected without the cap granted: a batch is a protocol error */
    handshake(&f, c, 0, 8, 1, NULL);
    lease_all(&f, c, r, 2, 20, m);
    ck_assert_int_eq(leasec_client_lease_release(c, m, 2, 93, &rel), 0);
    recv_type(&f, c, &b, LT_MSG_LEASE_RELEASE);
    base = nev;
    struct lt_lease_id good[2] = {m[1].id, m[0].id};
    release_batch_send(&f, rel, good, ok2, 2);
    pump_until(c, base + 1);
    pump_for(c, 20);
    d = -1;
    for (unsigned i = base; i < nev; i++)
        if (evs[i].kind == EV_DISCONNECT && d < 0)
            d = (int)i;
    ck_assert_int_ge(d, 0);
    ck_assert_msg(strstr(evs[d].msg, "did not grant"), "message: %s", evs[d].msg);
    release_fails_after(d, rel);

    leasec_client_destroy(c);
    fake_close(&f);
    munmap(b1, MIB);
    close(fd1);
}
END_TEST

void client_tests_leases(TCase *tc)
{
    tcase_add_test(tc, test_lease_batch_maps_segments_and_grant_entries);
    tcase_add_test(tc, test_submit_replies_out_of_order_match_by_request_id);
    tcase_add_test(tc, test_agent_errors_surface_with_the_agents_message);
    tcase_add_test(tc, test_buffer_reusable_only_after_its_release_complete);
    tcase_add_test(tc, test_release_batch_acts_as_single_completes);
}
