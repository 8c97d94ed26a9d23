/* The lease client's LAUNCH (stagingd/client/launch.c) against a scripted
 * fake agent: refused before sending when the agent did not grant it, or
 * for bad names, counts, argument blocks and leases; on the wire exactly
 * what was asked (the lease translated, zero dimensions as 1, the argument
 * block as given); every LAUNCH_COMPLETION, refused ones too, ending in
 * on_launch with its status, argument index, CUresult name and result; an
 * ERROR in on_error; the blocking call writing the answer; a connection's
 * end failing a launch in flight. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client_test_util.h"

/* A client ready on the fake with one 1 MiB PINNED segment and a lease of
 * it; the agent grants @caps. */
static struct leasec_client *ready_with_lease(struct fake *f, uint32_t caps, void **mem_p,
                                              int *fd_p, struct leasec_client_lease *lease_p)
{
    g_extra_caps = LEASEC_CAP_LAUNCH;
    struct leasec_client *c = client_new(5, 50);
    g_extra_caps = 0;
    *mem_p = memfd_seg(MIB, fd_p);
    ck_assert_int_eq(leasec_client_segment_add(c, 1, *fd_p, *mem_p, MIB, LT_CLASS_PINNED), 0);
    unsigned agent;
    fake_listen(f, g_path);
    ck_assert_int_eq(leasec_client_agent_add(c, g_path, &agent), 0);
    handshake(f, c, caps, 8, 1, NULL);
    struct leasec_client_lease_req r = {.segment = 1, .offset = 0, .length = MIB};
    lease_all(f, c, &r, 1, 7, lease_p);
    return c;
}

static void finish(struct leasec_client *c, struct fake *f, void *mem, int fd)
{
    leasec_client_destroy(c);
    fake_close(f);
    munmap(mem, MIB);
    close(fd);
}

static struct leasec_launch a_launch(const struct leasec_client_lease *lease, const uint64_t *args,
                                     size_t arg_bytes)
{
    struct leasec_launch l;
    memset(&l, 0, sizeof l);
    l.image = "launch_kernels";
    l.kernel = "k_launch_sum_u32";
    l.grid[0] = 3;
    l.block[0] = 64;
    l.block[1] = 2;
    l.result_bytes = 16;
    l.nranges = 1;
    l.ranges[0] = (struct leasec_launch_range){.lease = *lease, .offset = 64, .length = 4096};
    l.args = args;
    l.arg_bytes = arg_bytes;
    return l;
}

static void completion_reply(struct fake *f, uint64_t rid, uint32_t status, uint32_t index,
                             const char *words, uint32_t result_bytes)
{
    struct lt_msg_launch_completion m;
    lt_msg_init(&m, sizeof m, LT_MSG_LAUNCH_COMPLETION, rid);
    m.status = status;
    m.arg_index = index;
    m.elapsed_ns = 777;
    if (status == LT_OK) {
        m.result_bytes = result_bytes;
        for (uint32_t i = 0; i < result_bytes; i++)
            m.result[i] = (uint8_t)(i + 1);
    } else {
        lt_name_set(m.message, sizeof m.message, words);
        if (status == LT_E_LAUNCH_FAILED) {
            m.detail = 1;
            lt_name_set(m.cu_error, sizeof m.cu_error, "CUDA_ERROR_INVALID_VALUE");
        }
    }
    ck_assert_int_eq(lt_validate_launch_completion(&m, sizeof m), LT_OK);
    fake_send(f, &m, sizeof m, -1);
}

START_TEST(test_launch_needs_the_capability_and_valid_input)
{
    struct fake f;
    void *mem;
    int fd;
    struct leasec_client_lease lease;
    struct leasec_client *c = ready_with_lease(&f, LT_CAP_DOORBELL, &mem, &fd, &lease);
    uint64_t args[1] = {3}, rid = 0;
    struct leasec_launch l = a_launch(&lease, args, 8);
    ck_assert_int_eq(leasec_client_launch(c, 0, &l, 1, &rid), -EOPNOTSUPP);
    ck_assert_msg(strstr(leasec_client_last_error(c), "did not grant LAUNCH"), "%s",
                  leasec_client_last_error(c));
    finish(c, &f, mem, fd);

    c = ready_with_lease(&f, LT_CAP_LAUNCH, &mem, &fd, &lease);
    l = a_launch(&lease, args, 8);
    l.nranges = 0;
    ck_assert_int_eq(leasec_client_launch(c, 0, &l, 1, &rid), -EINVAL);
    l = a_launch(&lease, args, 4); /* not whole words */
    ck_assert_int_eq(leasec_client_launch(c, 0, &l, 1, &rid), -EINVAL);
    l = a_launch(&lease, NULL, 8);
    ck_assert_int_eq(leasec_client_launch(c, 0, &l, 1, &rid), -EINVAL);
    l = a_launch(&lease, args, 8);
    l.kernel = "k_a_kernel_name_far_longer_than_the_sixty_three_bytes_a_launch_may_carry";
    ck_assert_int_eq(leasec_client_launch(c, 0, &l, 1, &rid), -EINVAL);
    ck_assert_msg(strstr(leasec_client_last_error(c), "too long"), "%s",
                  leasec_client_last_error(c));
    l = a_launch(&lease, args, 8);
    l.block[0] = 1024; /* 2048 threads a block */
    ck_assert_int_eq(leasec_client_launch(c, 0, &l, 1, &rid), -EINVAL);
    ck_assert_msg(strstr(leasec_client_last_error(c), "LT_E_BAD_VALUE"), "%s",
                  leasec_client_last_error(c));
    l = a_launch(&lease, args, 8);
    l.ranges[0].lease.agent = 1;
    ck_assert_int_eq(leasec_client_launch(c, 0, &l, 1, &rid), -EINVAL);
    l = a_launch(&lease, args, 8);
    l.ranges[0].lease.epoch++;
    ck_assert_int_eq(leasec_client_launch(c, 0, &l, 1, &rid), -ESTALE);
    l = a_launch(&lease, args, 8);
    l.ranges[0].lease.id.gen++;
    ck_assert_int_eq(leasec_client_launch(c, 0, &l, 1, &rid), -ENOENT);
    ck_assert_int_eq(leasec_client_launch(c, 3, &l, 1, &rid), -ENOENT);
    /* nothing of it reached the agent */
    union lt_msg_buffer b;
    ck_assert_int_lt(fake_recv(&f, &b, 100, NULL, NULL), 0);
    finish(c, &f, mem, fd);
}
END_TEST

START_TEST(test_launch_goes_as_asked_and_every_answer_ends_in_one_callback)
{
    struct fake f;
    void *mem;
    int fd;
    struct leasec_client_lease lease;
    struct leasec_client *c =
        ready_with_lease(&f, LT_CAP_LAUNCH | LT_CAP_DOORBELL, &mem, &fd, &lease);
    uint64_t args[2] = {0x1122334455667788ull, 5}, rid[3];
    struct leasec_launch l = a_launch(&lease, args, 16);
    l.ranges[0].flags = LEASEC_LAUNCH_RANGE_F_WRITE;
    l.stream = lt_stream_id_make(2, 3);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(leasec_client_launch(c, 0, &l, 40 + (uint64_t)i, &rid[i]), 0);
    union lt_msg_buffer b;
    for (int i = 0; i < 3; i++) {
        size_t n = recv_type(&f, c, &b, LT_MSG_LAUNCH);
        const struct lt_msg_launch *m = (const void *)b.bytes;
        ck_assert_uint_eq(n, sizeof *m + 16);
        ck_assert_uint_eq(m->hdr.request_id, rid[i]);
        ck_assert_str_eq(m->image, "launch_kernels");
        ck_assert_str_eq(m->kernel, "k_launch_sum_u32");
        ck_assert_uint_eq(m->grid[0], 3);
        ck_assert_uint_eq(m->grid[1], 1); /* 0 is taken as 1 */
        ck_assert_uint_eq(m->block[1], 2);
        ck_assert_uint_eq(m->result_bytes, 16);
        ck_assert(lt_stream_id_eq(m->stream, l.stream));
        ck_assert_uint_eq(m->lease_count, 1);
        ck_assert(lt_lease_id_eq(m->leases[0].lease, lease.id));
        ck_assert_uint_eq(m->leases[0].offset, 64);
        ck_assert_uint_eq(m->leases[0].length, 4096);
        ck_assert_uint_eq(m->leases[0].flags, LT_LAUNCH_LEASE_F_WRITE);
        ck_assert_uint_eq(m->arg_words, 2);
        ck_assert_uint_eq(m->args[0], args[0]);
        ck_assert_uint_eq(m->args[1], args[1]);
    }
    unsigned base = nev;
    completion_reply(&f, rid[1], LT_E_BAD_VALUE, 2, "argument 2 (u32 scale): expected 1..10", 0);
    completion_reply(&f, rid[0], LT_OK, LT_INDEX_NONE, NULL, 16);
    struct lt_msg_error e;
    fake_error(&e, rid[2], LT_MSG_LAUNCH, LT_E_UNSUPPORTED, LT_INDEX_NONE, "LAUNCH not granted");
    fake_send(&f, &e, sizeof e, -1);
    pump_until(c, base + 3);
    struct ev *r1 = &evs[base], *r0 = &evs[base + 1], *r2 = &evs[base + 2];
    ck_assert_int_eq(r1->kind, EV_LAUNCH);
    ck_assert_uint_eq(r1->tag, 41);
    ck_assert_uint_eq(r1->status, LT_E_BAD_VALUE);
    ck_assert_int_eq(r1->err, -EINVAL);
    ck_assert_uint_eq(r1->index, 2);
    ck_assert_str_eq(r1->launch.message, "argument 2 (u32 scale): expected 1..10");
    ck_assert_uint_eq(r1->launch.result_bytes, 0);
    ck_assert_int_eq(r0->kind, EV_LAUNCH);
    ck_assert_uint_eq(r0->status, LT_OK);
    ck_assert_uint_eq(r0->index, LEASEC_INDEX_NONE);
    ck_assert_uint_eq(r0->launch.result_bytes, 16);
    ck_assert_uint_eq(r0->launch.result[15], 16);
    ck_assert_uint_eq(r0->launch.elapsed_ns, 777);
    ck_assert_str_eq(r0->launch.message, "");
    ck_assert_int_eq(r2->kind, EV_ERROR);
    ck_assert_uint_eq(r2->type, LT_MSG_LAUNCH);
    ck_assert_uint_eq(r2->code, LT_E_UNSUPPORTED);
    /* a launch in flight when the connection ends */
    ck_assert_int_eq(leasec_client_launch(c, 0, &l, 50, &rid[0]), 0);
    recv_type(&f, c, &b, LT_MSG_LAUNCH);
    base = nev;
    fake_drop(&f);
    pump_until(c, base + 2);
    int k = ev_find(EV_ERROR, rid[0]);
    ck_assert_int_ge(k, 0);
    ck_assert_int_lt(evs[k].err, 0);
    finish(c, &f, mem, fd);
}
END_TEST

struct responder {
    struct fake *f;
    uint32_t status;
};

static void *answer_one(void *arg)
{
    struct responder *r = arg;
    union lt_msg_buffer b;
    if (fake_recv(r->f, &b, WAIT_MS, NULL, NULL) < 0 || b.hdr.type != LT_MSG_LAUNCH)
        return NULL;
    if (r->status == LT_OK)
        completion_reply(r->f, b.hdr.request_id, LT_OK, LT_INDEX_NONE, NULL, 8);
    else
        completion_reply(r->f, b.hdr.request_id, r->status, LT_INDEX_NONE,
                         "cuLaunchKernel refused k_launch_sum_u32", 0);
    return NULL;
}

START_TEST(test_launch_call_writes_the_answer)
{
    struct fake f;
    void *mem;
    int fd;
    struct leasec_client_lease lease;
    struct leasec_client *c = ready_with_lease(&f, LT_CAP_LAUNCH, &mem, &fd, &lease);
    uint64_t args[1] = {3};
    struct leasec_launch l = a_launch(&lease, args, 8);
    l.result_bytes = 8;
    struct responder r = {.f = &f, .status = LT_OK};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, answer_one, &r), 0);
    struct leasec_launch_result res;
    ck_assert_int_eq(leasec_client_launch_call(c, 0, &l, WAIT_MS, &res), 0);
    pthread_join(t, NULL);
    ck_assert_uint_eq(res.status, LT_OK);
    ck_assert_uint_eq(res.result_bytes, 8);
    ck_assert_uint_eq(res.result[7], 8);
    r.status = LT_E_LAUNCH_FAILED;
    ck_assert_int_eq(pthread_create(&t, NULL, answer_one, &r), 0);
    memset(&res, 0, sizeof res);
    ck_assert_int_eq(leasec_client_launch_call(c, 0, &l, WAIT_MS, &res), -ENOEXEC);
    pthread_join(t, NULL);
    ck_assert_uint_eq(res.status, LT_E_LAUNCH_FAILED);
    ck_assert_uint_eq(res.detail, 1);
    ck_assert_str_eq(res.cu_error, "CUDA_ERROR_INVALID_VALUE");
    ck_assert_msg(strstr(leasec_client_last_error(c), "LT_E_LAUNCH_FAILED") &&
                      strstr(leasec_client_last_error(c), "CUDA_ERROR_INVALID_VALUE"),
                  "%s", leasec_client_last_error(c));
    finish(c, &f, mem, fd);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("client_launch");
    TCase *tc = tcase_create("launch");
    tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_launch_needs_the_capability_and_valid_input);
    tcase_add_test(tc, test_launch_goes_as_asked_and_every_answer_ends_in_one_callback);
    tcase_add_test(tc, test_launch_call_writes_the_answer);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
