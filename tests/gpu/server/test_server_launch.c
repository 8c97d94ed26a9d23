/* LAUNCH (protocol 1.2) against lease-agent-host, which runs no kernels: the
 * capability is never granted to a client that asks for it, a LAUNCH is then
 * refused with an ERROR (and the connection stays), a malformed LAUNCH is a
 * framing error like any message's; and the host executor itself refuses a
 * launch that reached it (UNSUPPORTED, with the words). CPU. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/executor_host.h"
#include "harness.h"

static uint64_t launch_send(int fd, struct lt_lease_id lease, size_t extra_len)
{
    union {
        uint64_t align;
        unsigned char b[sizeof(struct lt_msg_launch) + 16];
    } u;
    struct lt_msg_launch *m = (void *)u.b;
    const size_t len = th_launch_init(m, "k_launch_sum_u32", 1, lease, 64, 0);
    /* @extra_len bytes past what arg_words says: a framing error */
    ((struct lt_header *)m)->length = (uint32_t)(len + extra_len);
    ck_assert_int_eq(th_send(fd, m, len + extra_len, NULL, 0), 0);
    return m->hdr.request_id;
}

START_TEST(the_host_agent_grants_no_launch_and_refuses_one)
{
    struct th_agent a;
    th_agent_start(&a, NULL, NULL);
    struct lt_msg_hello_reply hr;
    int fd = th_hello(a.sock, LT_CAP_DOORBELL | LT_CAP_LAUNCH, &hr);
    ck_assert_uint_eq(hr.caps & LT_CAP_LAUNCH, 0);
    ck_assert(hr.caps & LT_CAP_HOST_BACKEND);
    union lt_msg_buffer b;
    uint64_t rid = launch_send(fd, lt_lease_id_make(1, 1), 0);
    const struct lt_msg_error *e = th_expect_error(fd, &b, rid, LT_E_UNSUPPORTED);
    ck_assert_msg(strstr(e->message, "not granted at HELLO"), "%s", e->message);
    ck_assert_uint_eq(e->failed_type, LT_MSG_LAUNCH);
    /* the connection stays: a stats request is still answered */
    th_stats(fd, 0, &b);
    /* a LAUNCH whose length disagrees with its count: framing, disconnect */
    rid = launch_send(fd, lt_lease_id_make(1, 1), 8);
    e = th_expect_error(fd, &b, rid, LT_E_BAD_LENGTH);
    ck_assert_int_eq(th_expect_eof(fd), 0);
    close(fd);
    ck_assert_int_eq(th_agent_stop(&a), 0);
    th_agent_cleanup(&a);
}
END_TEST

static void on_done(void *arg, const struct ga_exec_result *res)
{
    (void)arg;
    (void)res;
    ck_abort_msg("a refused launch was answered");
}

START_TEST(the_host_executor_refuses_a_launch)
{
    struct ga_executor *ex = NULL;
    ck_assert_int_eq(ga_executor_host_create(NULL, &ex), 0);
    ck_assert_uint_eq(ga_executor_info(ex)->caps & LT_CAP_LAUNCH, 0);
    ck_assert_int_eq(ga_exec_client_add(ex, 1), 0);
    static unsigned char bytes[64];
    struct ga_exec_launch l;
    memset(&l, 0, sizeof l);
    snprintf(l.image, sizeof l.image, "img");
    snprintf(l.kernel, sizeof l.kernel, "k");
    l.grid[0] = l.grid[1] = l.grid[2] = l.block[0] = l.block[1] = l.block[2] = 1;
    l.nranges = 1;
    l.ranges[0] = (struct ga_exec_launch_range){.host = bytes, .length = sizeof bytes};
    l.arg_index = LT_INDEX_NONE;
    struct ga_exec_work w = {.owner = 1,
                             .op = GA_EXEC_OP_LAUNCH,
                             .host = bytes,
                             .length = sizeof bytes,
                             .mem_class = LT_CLASS_PINNED,
                             .done_cb = on_done,
                             .launch = &l};
    struct lt_failure f;
    ck_assert_int_lt(ga_exec_submit(ex, &w, &f), 0);
    ck_assert_uint_eq(f.code, LT_E_UNSUPPORTED);
    ck_assert_msg(strstr(f.message, "the host backend runs no kernels"), "%s", f.message);
    ga_executor_destroy(ex);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("server_launch");
    TCase *tc = tcase_create("launch");
    tcase_add_test(tc, the_host_agent_grants_no_launch_and_refuses_one);
    tcase_add_test(tc, the_host_executor_refuses_a_launch);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
