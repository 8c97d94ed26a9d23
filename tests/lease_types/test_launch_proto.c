/* LAUNCH and LAUNCH_COMPLETION (protocol 1.2): every message built valid
 * passes; each field corrupted in turn gives its code; truncated copies
 * (exact-size heap buffers, for ASan) and random bytes are refused without
 * reading past the end; the reply check and the type table know the pair. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lease_types/lease_types.h"

static uint64_t g_state = 0x6c61756e6368ull;

static uint64_t rnd(void)
{
    uint64_t z = (g_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t below(uint64_t n)
{
    return n ? rnd() % n : 0;
}

static void rnd_name(char *dst, size_t cap)
{
    size_t n = 1 + below(cap - 1);
    for (size_t i = 0; i < cap; i++)
        dst[i] = i < n ? (char)(0x21 + below(94)) : '\0';
}

/* A valid LAUNCH of @words argument words with @leases ranges (0: random). */
static struct lt_msg_launch *launch_build(uint32_t words, uint32_t leases, size_t *len_p)
{
    size_t len = sizeof(struct lt_msg_launch) + (size_t)words * 8;
    struct lt_msg_launch *m = aligned_alloc(8, len);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(lt_msg_init(m, len, LT_MSG_LAUNCH, 1 + below(1000)), LT_OK);
    m->arg_words = words;
    rnd_name(m->image, sizeof m->image);
    rnd_name(m->kernel, sizeof m->kernel);
    m->grid[0] = 1 + (uint32_t)below(1u << 20);
    m->grid[1] = 1 + (uint32_t)below(4);
    m->grid[2] = 1;
    m->block[0] = 1 + (uint32_t)below(256);
    m->block[1] = 1 + (uint32_t)below(4);
    m->block[2] = 1;
    m->shared_bytes = (uint32_t)below(49152);
    m->result_bytes = (uint32_t)below(LT_LAUNCH_RESULT_MAX + 1);
    m->stream = below(2) ? lt_stream_id_default() : lt_stream_id_make((uint32_t)rnd(), 7);
    m->lease_count = leases ? leases : 1 + (uint32_t)below(LT_LAUNCH_MAX_LEASES);
    for (uint32_t k = 0; k < m->lease_count; k++) {
        /* distinct leases, so no write overlaps */
        m->leases[k].lease = lt_lease_id_make(k + 1, 1 + (uint32_t)below(1000));
        m->leases[k].offset = below(1u << 30);
        m->leases[k].length = 1 + below(1u << 30);
        m->leases[k].flags = below(2) ? LT_LAUNCH_LEASE_F_WRITE : 0;
    }
    for (uint32_t w = 0; w < words; w++)
        m->args[w] = rnd();
    *len_p = len;
    return m;
}

static struct lt_msg_launch_completion completion_build(int ok)
{
    struct lt_msg_launch_completion c;
    lt_msg_init(&c, sizeof c, LT_MSG_LAUNCH_COMPLETION, 5);
    c.arg_index = LT_INDEX_NONE;
    c.elapsed_ns = rnd();
    if (ok) {
        c.result_bytes = (uint32_t)below(LT_LAUNCH_RESULT_MAX + 1);
        for (uint32_t i = 0; i < c.result_bytes; i++)
            c.result[i] = (uint8_t)rnd();
    } else {
        c.status = LT_E_LAUNCH_FAILED;
        c.detail = 1;
        lt_name_set(c.cu_error, sizeof c.cu_error, "CUDA_ERROR_INVALID_VALUE");
        lt_name_set(c.message, sizeof c.message, "cuLaunchKernel refused the shape");
    }
    return c;
}

static void expect_launch(const void *m, size_t len, enum lt_error want, const char *what)
{
    ck_assert_msg(lt_validate_launch(m, len) == want, "%s: launch validator gave %s, want %s", what,
                  lt_error_name(lt_validate_launch(m, len)), lt_error_name(want));
    ck_assert_int_eq(lt_validate(m, len, NULL), want);
    ck_assert_int_eq(lt_validate_from_client(m, len, NULL), want);
}

static void expect_completion(const struct lt_msg_launch_completion *c, enum lt_error want,
                              const char *what)
{
    enum lt_error got = lt_validate_launch_completion(c, sizeof *c);
    ck_assert_msg(got == want, "%s: completion validator gave %s, want %s", what,
                  lt_error_name(got), lt_error_name(want));
    ck_assert_int_eq(lt_validate_from_agent(c, sizeof *c, NULL), want);
}

START_TEST(valid_launches_pass_in_their_direction_only)
{
    for (int i = 0; i < 500; i++) {
        size_t len;
        uint32_t words = (uint32_t)below(LT_LAUNCH_ARGS_MAX / 8 + 1);
        struct lt_msg_launch *m = launch_build(words, 0, &len);
        uint16_t type = 0;
        expect_launch(m, len, LT_OK, "as built");
        ck_assert_int_eq(lt_validate(m, len, &type), LT_OK);
        ck_assert_uint_eq(type, LT_MSG_LAUNCH);
        ck_assert_int_eq(lt_validate_from_agent(m, len, NULL), LT_E_WRONG_DIRECTION);
        ck_assert_int_eq(lt_validate_fd_count(LT_MSG_LAUNCH, 0), LT_OK);
        ck_assert_int_eq(lt_validate_fd_count(LT_MSG_LAUNCH, 1), LT_E_FD_COUNT);
        free(m);
    }
    for (int i = 0; i < 200; i++) {
        struct lt_msg_launch_completion c = completion_build(i % 2);
        expect_completion(&c, LT_OK, "as built");
        ck_assert_int_eq(lt_validate_from_client(&c, sizeof c, NULL), LT_E_WRONG_DIRECTION);
    }
}
END_TEST

START_TEST(every_launch_field_is_checked)
{
    size_t len;
    struct lt_msg_launch *m = launch_build(4, 2, &len);
    struct lt_msg_launch saved;
    memcpy(&saved, m, sizeof saved);
#define RESTORE() memcpy(m, &saved, sizeof saved)
    m->flags = 1;
    expect_launch(m, len, LT_E_UNKNOWN_FLAGS, "launch flags");
    RESTORE();
    m->reserved = 1;
    expect_launch(m, len, LT_E_RESERVED_NONZERO, "reserved");
    RESTORE();
    memset(m->image, 0, sizeof m->image);
    expect_launch(m, len, LT_E_NAME_EMPTY, "image empty");
    RESTORE();
    memset(m->kernel, 'k', sizeof m->kernel);
    expect_launch(m, len, LT_E_NAME_UNTERMINATED, "kernel unterminated");
    RESTORE();
    m->kernel[1] = '\n';
    expect_launch(m, len, LT_E_NAME_BAD_CHAR, "kernel control byte");
    RESTORE();
    for (int d = 0; d < 3; d++) {
        m->grid[d] = 0;
        expect_launch(m, len, LT_E_BAD_VALUE, "grid dimension 0");
        RESTORE();
        m->block[d] = 0;
        expect_launch(m, len, LT_E_BAD_VALUE, "block dimension 0");
        RESTORE();
    }
    m->block[0] = 1025;
    m->block[1] = m->block[2] = 1;
    expect_launch(m, len, LT_E_BAD_VALUE, "1025 threads a block");
    m->block[0] = 32;
    m->block[1] = 32;
    expect_launch(m, len, LT_OK, "1024 threads a block");
    m->block[2] = 2;
    expect_launch(m, len, LT_E_BAD_VALUE, "2048 threads a block");
    RESTORE();
    m->result_bytes = LT_LAUNCH_RESULT_MAX + 1;
    expect_launch(m, len, LT_E_BAD_VALUE, "result area over 256");
    RESTORE();
    m->stream = lt_stream_id_make(5, 0);
    expect_launch(m, len, LT_E_BAD_ID, "stream generation 0");
    RESTORE();
    m->lease_count = 0;
    expect_launch(m, len, LT_E_BAD_VALUE, "no lease");
    m->lease_count = LT_LAUNCH_MAX_LEASES + 1;
    expect_launch(m, len, LT_E_BAD_VALUE, "five leases");
    RESTORE();
    m->leases[1].lease.gen = 0;
    expect_launch(m, len, LT_E_BAD_ID, "lease generation 0");
    RESTORE();
    m->leases[0].length = 0;
    expect_launch(m, len, LT_E_ZERO_LENGTH, "empty range");
    RESTORE();
    m->leases[0].offset = UINT64_MAX;
    expect_launch(m, len, LT_E_RANGE_OVERFLOW, "range wraps");
    RESTORE();
    m->leases[0].offset = LT_SEGMENT_SIZE_MAX;
    expect_launch(m, len, LT_E_OUT_OF_RANGE, "range past 1 TiB");
    RESTORE();
    m->leases[1].flags = 2;
    expect_launch(m, len, LT_E_UNKNOWN_FLAGS, "lease flag");
    RESTORE();
    m->leases[1].reserved = 3;
    expect_launch(m, len, LT_E_RESERVED_NONZERO, "lease reserved");
    RESTORE();
    m->leases[3].offset = 8;
    expect_launch(m, len, LT_E_RESERVED_NONZERO, "an unused range not zero");
    RESTORE();
    /* two ranges of one lease: fine to read, not to write over each other */
    m->leases[1] = m->leases[0];
    m->leases[0].flags = m->leases[1].flags = 0;
    expect_launch(m, len, LT_OK, "one lease read twice");
    m->leases[1].flags = LT_LAUNCH_LEASE_F_WRITE;
    expect_launch(m, len, LT_E_BAD_VALUE, "a written range over a read one");
    m->leases[1].offset = m->leases[0].offset + m->leases[0].length;
    m->leases[1].length = 8;
    expect_launch(m, len, LT_OK, "a written range beside a read one");
    RESTORE();
    /* the argument count and the length must agree */
    m->arg_words = 5;
    expect_launch(m, len, LT_E_BAD_LENGTH, "one word more than sent");
    m->arg_words = LT_LAUNCH_ARGS_MAX / 8 + 1;
    expect_launch(m, len, LT_E_BATCH_TOO_LARGE, "129 words");
    RESTORE();
#undef RESTORE
    free(m);
}
END_TEST

START_TEST(every_completion_field_is_checked)
{
    struct lt_msg_launch_completion ok = completion_build(1), bad = completion_build(0), c;
    ok.result_bytes = 16;
    memset(ok.result + 16, 0, sizeof ok.result - 16);
    c = ok;
    c.status = LT_E__COUNT;
    expect_completion(&c, LT_E_BAD_VALUE, "unknown status");
    c = ok;
    c.result_bytes = LT_LAUNCH_RESULT_MAX + 1;
    expect_completion(&c, LT_E_BAD_VALUE, "result over 256");
    c = ok;
    c.result[100] = 1;
    expect_completion(&c, LT_E_RESERVED_NONZERO, "result past result_bytes");
    c = ok;
    c.arg_index = 2;
    expect_completion(&c, LT_E_BAD_VALUE, "an argument index on success");
    c = ok;
    c.message[0] = 'x';
    expect_completion(&c, LT_E_RESERVED_NONZERO, "words on success");
    c = ok;
    c.cu_error[0] = 'C';
    expect_completion(&c, LT_E_RESERVED_NONZERO, "a CUresult name without detail");
    c = bad;
    c.arg_index = LT_LAUNCH_PARAMS_MAX;
    expect_completion(&c, LT_E_BAD_VALUE, "argument index out of range");
    c.arg_index = LT_LAUNCH_PARAMS_MAX - 1;
    expect_completion(&c, LT_OK, "the last argument index");
    c = bad;
    c.result_bytes = 8;
    c.result[0] = 1;
    expect_completion(&c, LT_E_RESERVED_NONZERO, "a result on failure");
    c = bad;
    memset(c.message, 0, sizeof c.message);
    expect_completion(&c, LT_E_NAME_EMPTY, "a failure without words");
    c = bad;
    memset(c.cu_error, 0, sizeof c.cu_error);
    expect_completion(&c, LT_E_NAME_EMPTY, "detail without its name");
    c = bad;
    c.detail = 0;
    expect_completion(&c, LT_E_RESERVED_NONZERO, "a name without detail");
    memset(c.cu_error, 0, sizeof c.cu_error);
    expect_completion(&c, LT_OK, "a failure with no CUresult");
}
END_TEST

START_TEST(truncated_and_random_bytes_are_refused_without_overread)
{
    size_t len;
    struct lt_msg_launch *m = launch_build(3, 0, &len);
    for (size_t n = 0; n < len; n++) {
        unsigned char *p = malloc(n ? n : 1);
        memcpy(p, m, n);
        enum lt_error e = lt_validate_launch(p, n);
        ck_assert_int_eq(e, n < sizeof(struct lt_header) ? LT_E_TRUNCATED : LT_E_LENGTH_MISMATCH);
        if (n >= sizeof(struct lt_header)) {
            ((struct lt_header *)(void *)p)->length = (uint32_t)n;
            ck_assert_int_eq(lt_validate_launch(p, n), LT_E_BAD_LENGTH);
        }
        free(p);
    }
    struct lt_msg_launch_completion c = completion_build(1);
    /* through a pointer the compiler cannot see into: these buffers are
     * short on purpose, and the validator must not read past them */
    enum lt_error (*volatile check)(const void *, size_t) = lt_validate_launch_completion;
    for (size_t n = sizeof(struct lt_header); n < sizeof c; n++) {
        unsigned char *p = malloc(n);
        memcpy(p, &c, n);
        ((struct lt_header *)(void *)p)->length = (uint32_t)n;
        ck_assert_int_eq(check(p, n), LT_E_BAD_LENGTH);
        free(p);
    }
    /* random bodies under a valid header: never a crash, rarely valid */
    unsigned refused = 0;
    for (int i = 0; i < 20000; i++) {
        size_t n = i % 2 ? len : sizeof c;
        unsigned char *p = malloc(n);
        for (size_t k = 0; k < n; k++)
            p[k] = (uint8_t)rnd();
        memcpy(p, i % 2 ? (const void *)m : (const void *)&c, sizeof(struct lt_header));
        if (i % 2)
            ((struct lt_msg_launch *)(void *)p)->arg_words = 3;
        refused += lt_validate(p, n, NULL) != LT_OK;
        free(p);
    }
    ck_assert_uint_gt(refused, 19900);
    free(m);
}
END_TEST

START_TEST(the_type_table_and_the_reply_check_know_the_pair)
{
    struct lt_msg_info i = lt_msg_info(LT_MSG_LAUNCH);
    ck_assert_str_eq(i.name, "LAUNCH");
    ck_assert_uint_eq(i.dir, LT_DIR_TO_AGENT);
    ck_assert_uint_eq(i.reply, LT_MSG_LAUNCH_COMPLETION);
    ck_assert_uint_eq(i.fds, 0);
    i = lt_msg_info(LT_MSG_LAUNCH_COMPLETION);
    ck_assert_str_eq(i.name, "LAUNCH_COMPLETION");
    ck_assert_uint_eq(i.dir, LT_DIR_TO_CLIENT);
    ck_assert_uint_eq(i.reply, 0);
    ck_assert(lt_msg_type_is_known(LT_MSG_LAUNCH));
    ck_assert(lt_msg_type_is_known(LT_MSG_LAUNCH_COMPLETION));
    /* reserved for LAUNCH's later messages: not yet defined */
    ck_assert(!lt_msg_type_is_known(40));
    ck_assert(!lt_msg_type_is_known(41));
    size_t size = 0;
    ck_assert_int_eq(lt_msg_size(LT_MSG_LAUNCH, LT_LAUNCH_ARGS_MAX / 8, &size), LT_OK);
    ck_assert_uint_eq(size, sizeof(struct lt_msg_launch) + LT_LAUNCH_ARGS_MAX);
    ck_assert_uint_le(size, LT_MSG_MAX_BYTES);
    ck_assert_int_eq(lt_msg_size(LT_MSG_LAUNCH, LT_LAUNCH_ARGS_MAX / 8 + 1, &size),
                     LT_E_BATCH_TOO_LARGE);
    ck_assert_uint_eq(LT_PROTO_MINOR, 4); /* 1.3 (WORDS) and 1.4 (INTROSPECT) are implemented too */
    ck_assert(LT_CAP_CLIENT_KNOWN & LT_CAP_LAUNCH);
    ck_assert_str_eq(lt_error_name(LT_E_LAUNCH_FAILED), "LT_E_LAUNCH_FAILED");

    size_t len;
    struct lt_msg_launch *q = launch_build(0, 1, &len);
    q->result_bytes = 32;
    struct lt_msg_launch_completion r = completion_build(1);
    r.hdr.request_id = q->hdr.request_id;
    r.result_bytes = 32;
    memset(r.result + 32, 0, sizeof r.result - 32);
    ck_assert_int_eq(lt_validate_reply_matches(q, &r), LT_OK);
    r.result_bytes = 33;
    ck_assert_int_eq(lt_validate_reply_matches(q, &r), LT_E_BAD_VALUE);
    r.hdr.request_id++;
    ck_assert_int_eq(lt_validate_reply_matches(q, &r), LT_E_BAD_REQUEST_ID);
    struct lt_msg_completion wrong;
    memset(&wrong, 0, sizeof wrong);
    lt_msg_init(&wrong, sizeof wrong, LT_MSG_COMPLETION, q->hdr.request_id);
    ck_assert_int_eq(lt_validate_reply_matches(q, &wrong), LT_E_WRONG_TYPE);
    struct lt_msg_error err;
    memset(&err, 0, sizeof err);
    lt_msg_init(&err, sizeof err, LT_MSG_ERROR, q->hdr.request_id);
    err.failed_type = LT_MSG_LAUNCH;
    ck_assert_int_eq(lt_validate_reply_matches(q, &err), LT_OK);
    free(q);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("launch_proto");
    TCase *tc = tcase_create("launch");
    tcase_add_test(tc, valid_launches_pass_in_their_direction_only);
    tcase_add_test(tc, every_launch_field_is_checked);
    tcase_add_test(tc, every_completion_field_is_checked);
    tcase_add_test(tc, truncated_and_random_bytes_are_refused_without_overread);
    tcase_add_test(tc, the_type_table_and_the_reply_check_know_the_pair);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
