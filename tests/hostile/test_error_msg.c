/* Issue #12, finding 6: a client that sent an ERROR got WRONG_DIRECTION
 * and stayed connected. An ERROR from a client means it refuses the
 * conversation (or does not speak it): the agent now says why and closes
 * the connection, before HELLO and after it alike. */
#include <check.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "hostile.h"

static void send_error(int c)
{
    /* In a whole message buffer: the validator reads it as any type. */
    union lt_msg_buffer buf;
    struct lt_msg_error *e = (struct lt_msg_error *)(void *)buf.bytes;
    memset(&buf, 0, sizeof buf);
    lt_msg_init(e, sizeof *e, LT_MSG_ERROR, th_rid());
    e->code = LT_E_SYSTEM;
    e->err = -5;
    e->failed_type = LT_MSG_HELLO_REPLY;
    e->index = LT_INDEX_NONE;
    lt_name_set(e->message, sizeof e->message, "a client that gives up");
    ck_assert_int_eq(lt_validate(buf.bytes, sizeof *e, NULL), LT_OK);
    ck_assert_int_eq(th_send(c, e, sizeof *e, NULL, 0), 0);
}

START_TEST(test_a_client_that_sends_error_is_disconnected)
{
    struct th_agent a;
    th_agent_start(&a, NULL, NULL);
    int c = th_hello(a.sock, 0, NULL);
    send_error(c);
    th_expect_eof(c);
    close(c);
    c = th_connect(a.sock); /* before HELLO too */
    send_error(c);
    th_expect_eof(c);
    close(c);
    ck_assert(th_file_wait_for(a.log, "sent an ERROR", TH_TIMEOUT_MS));
    hs_agent_finish(&a);
}
END_TEST

static Suite *error_suite(void)
{
    Suite *s = suite_create("hostile_error_msg");
    TCase *tc = tcase_create("error_msg");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_a_client_that_sends_error_is_disconnected);
    suite_add_tcase(s, tc);
    return s;
}

LEASE_CHECK_MAIN(error_suite, NULL)
