/* lease-types' shared vocabulary beyond the wire: the failure record a C API
 * fills, the errno-to-code map used where no record came back, the class
 * names, and the agent's default socket path both processes compute. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lease_types/lease_types.h"
#include "lease_types/socket.h"

START_TEST(failure_set_fills_code_errno_and_words_and_returns_the_errno)
{
    struct lt_failure why;
    memset(&why, 0x5a, sizeof why);
    int rc =
        lt_failure_set(&why, LT_E_SEGMENT_SIZE, -EINVAL, "expected %d MiB, found %d MiB", 64, 60);
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_uint_eq(why.code, LT_E_SEGMENT_SIZE);
    ck_assert_int_eq(why.err, -EINVAL);
    ck_assert_str_eq(why.message, "expected 64 MiB, found 60 MiB");
    /* err 0: the code's own errno. */
    ck_assert_int_eq(lt_failure_set(&why, LT_E_BUSY, 0, "busy"), -EBUSY);
    ck_assert_int_eq(why.err, -EBUSY);
    /* No record to fill: only the errno comes back. */
    ck_assert_int_eq(lt_failure_set(NULL, LT_E_STALE_ID, 0, "stale"), -ESTALE);
    /* Longer than the room: cut, terminated. */
    char big[2 * LT_FAILURE_MSG_LEN];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    lt_failure_set(&why, LT_E_SYSTEM, -EIO, "%s", big);
    ck_assert_uint_eq(strlen(why.message), LT_FAILURE_MSG_LEN - 1);
    /* Room for more than an ERROR message carries. */
    ck_assert_uint_gt(sizeof why.message, LT_ERROR_MSG_LEN);
}
END_TEST

START_TEST(error_from_errno_inverts_the_service_codes)
{
    /* Codes whose errno names them alone come back from it. */
    static const uint32_t round_trip[] = {
        LT_OK,      LT_E_NOT_FOUND,    LT_E_STALE_ID,      LT_E_NOT_OWNER,   LT_E_BUSY,
        LT_E_LIMIT, LT_E_OUT_OF_RANGE, LT_E_SHUTTING_DOWN, LT_E_UNSUPPORTED, LT_E_GPU_FAULT,
    };
    for (size_t i = 0; i < sizeof round_trip / sizeof round_trip[0]; i++)
        ck_assert_msg(lt_error_from_errno(lt_error_errno(round_trip[i])) == round_trip[i],
                      "%s does not come back from its errno", lt_error_name(round_trip[i]));
    ck_assert_uint_eq(lt_error_from_errno(-EINVAL), LT_E_BAD_VALUE);
    /* Errnos that share a code. */
    ck_assert_uint_eq(lt_error_from_errno(-EALREADY), LT_E_STALE_ID);
    ck_assert_uint_eq(lt_error_from_errno(-EAGAIN), LT_E_BUSY);
    ck_assert_uint_eq(lt_error_from_errno(-EDQUOT), LT_E_LIMIT);
    ck_assert_uint_eq(lt_error_from_errno(-ENOTSUP), LT_E_UNSUPPORTED);
    /* Not a statement about RLIMIT_MEMLOCK, the budget or the peer's bytes. */
    ck_assert_uint_eq(lt_error_from_errno(-ENOMEM), LT_E_SYSTEM);
    ck_assert_uint_eq(lt_error_from_errno(-ENOSPC), LT_E_SYSTEM);
    ck_assert_uint_eq(lt_error_from_errno(-EBADF), LT_E_SYSTEM);
    ck_assert_uint_eq(lt_error_from_errno(-EPROTO), LT_E_SYSTEM);
    ck_assert_uint_eq(lt_error_from_errno(-ETIMEDOUT), LT_E_SYSTEM);
    ck_assert_uint_eq(lt_error_from_errno(12345), LT_E_SYSTEM);
}
END_TEST

START_TEST(class_names_and_bounds)
{
    ck_assert_str_eq(lt_class_name(LT_CLASS_STAGED), "STAGED");
    ck_assert_str_eq(lt_class_name(LT_CLASS_PINNED), "PINNED");
    ck_assert_str_eq(lt_class_name(LT_CLASS_MAPPED), "MAPPED");
    ck_assert_str_eq(lt_class_name(LT_CLASS_INVALID), "INVALID");
    ck_assert_str_eq(lt_class_name(LT_CLASS_MAX + 1), "INVALID");
    ck_assert_int_eq(LT_CLASS_MAX, LT_CLASS_MAPPED);
    for (uint32_t c = 0; c <= LT_CLASS_MAX + 1; c++)
        ck_assert_int_eq(lt_class_is_valid(c), c >= LT_CLASS_STAGED && c <= LT_CLASS_MAX);
}
END_TEST

static void env_set(const char *v)
{
    if (v)
        ck_assert_int_eq(setenv("XDG_RUNTIME_DIR", v, 1), 0);
    else
        ck_assert_int_eq(unsetenv("XDG_RUNTIME_DIR"), 0);
}

START_TEST(socket_default_follows_the_runtime_dir_then_the_uid)
{
    const char *saved = getenv("XDG_RUNTIME_DIR");
    char *keep = saved ? strdup(saved) : NULL;
    char buf[256], want[256];

    env_set("/run/user/4242");
    ck_assert_int_eq(lt_socket_default(buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "/run/user/4242/lease-agent/agent.sock");

    /* A relative runtime dir is ignored: the uid decides. */
    env_set("relative/dir");
    ck_assert_int_eq(lt_socket_default(buf, sizeof buf), 0);
    if (geteuid() == 0)
        snprintf(want, sizeof want, "/run/lease-agent/agent.sock");
    else
        snprintf(want, sizeof want, "/tmp/lease-agent-%u/agent.sock", (unsigned)geteuid());
    ck_assert_str_eq(buf, want);
    env_set(NULL);
    ck_assert_int_eq(lt_socket_default(buf, sizeof buf), 0);
    ck_assert_str_eq(buf, want);

    /* Exactly the room it needs, and one byte less. */
    size_t need = strlen(want) + 1;
    ck_assert_int_eq(lt_socket_default(buf, need), 0);
    ck_assert_int_eq(lt_socket_default(buf, need - 1), -ENAMETOOLONG);

    env_set(keep);
    free(keep);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("lt_failure");
    TCase *tc = tcase_create("vocabulary");
    tcase_add_test(tc, failure_set_fills_code_errno_and_words_and_returns_the_errno);
    tcase_add_test(tc, error_from_errno_inverts_the_service_codes);
    tcase_add_test(tc, class_names_and_bounds);
    tcase_add_test(tc, socket_default_follows_the_runtime_dir_then_the_uid);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
