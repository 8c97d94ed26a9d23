/* kn_kdesc, the launch descriptor: good descriptors parse into what they
 * say (types, sizes, lease indices, the argument block's layout); every
 * rule broken gives its line and words; no bytes (cut, random, unterminated)
 * make the parser read past its buffer; a descriptor is checked against
 * real cubins (the launch test kernels, the checksum image) and every
 * disagreement is named; argument blocks are checked against a kernel. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/cubin.h"
#include "kernels/kdesc.h"

static const char good[] = "# a comment\n"
                           "kdesc 1\n"
                           "\n"
                           "kernel k_sum block_max=256 shared_max=64 result_max=16   # trailing\n"
                           "arg data  lease_ptr lease=0 access=read align=4\n"
                           "arg bytes lease_len lease=0\n"
                           "arg scale u32 min=1 max=0x10\n"
                           "arg big   u64\n"
                           "arg out   result_ptr\n"
                           "arg n     result_len\n"
                           "kernel k_two\n"
                           "\targ a lease_ptr lease=1 access=write\n"
                           "\targ b lease_ptr lease=0\n"
                           "\targ x i32 min=-5 max=5\n"
                           "\targ y f32\n"
                           "\targ z f64\n";

static int parse(const char *text, struct kn_kdesc *d, char *err, size_t n)
{
    return kn_kdesc_parse(text, strlen(text), d, err, n);
}

START_TEST(a_good_descriptor_says_what_it_declares)
{
    struct kn_kdesc d;
    char err[256];
    ck_assert_msg(parse(good, &d, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(d.count, 2);
    const struct kn_kdesc_kernel *k = kn_kdesc_find(&d, "k_sum");
    ck_assert_ptr_nonnull(k);
    ck_assert_uint_eq(k->block_max, 256);
    ck_assert_uint_eq(k->shared_max, 64);
    ck_assert_uint_eq(k->result_max, 16);
    ck_assert_uint_eq(k->nparams, 6);
    ck_assert_uint_eq(k->leases, 1);
    ck_assert_uint_eq(k->writes, 0);
    ck_assert_int_eq(k->params[0].type, KN_KDESC_LEASE_PTR);
    ck_assert_uint_eq(k->params[0].align, 4);
    ck_assert_uint_eq(k->params[1].size, 8);
    ck_assert_int_eq(k->params[2].type, KN_KDESC_U32);
    ck_assert_uint_eq(k->params[2].umin, 1);
    ck_assert_uint_eq(k->params[2].umax, 16);
    ck_assert_uint_eq(k->params[2].arg_offset, 0);
    ck_assert_uint_eq(k->params[3].arg_offset, 8); /* a u64 after a u32: aligned to 8 */
    ck_assert_uint_eq(k->arg_bytes, 16);
    ck_assert_int_eq(k->params[5].type, KN_KDESC_RESULT_LEN);
    k = kn_kdesc_find(&d, "k_two");
    ck_assert_ptr_nonnull(k);
    ck_assert_uint_eq(k->block_max, KN_KDESC_BLOCK_MAX);
    ck_assert_uint_eq(k->leases, 2);
    ck_assert_uint_eq(k->writes, 2);
    ck_assert_int_eq(k->params[2].imin, -5);
    ck_assert_uint_eq(k->params[3].arg_offset, 4);
    ck_assert_uint_eq(k->params[4].arg_offset, 8);
    ck_assert_uint_eq(k->arg_bytes, 16);
    ck_assert_ptr_null(kn_kdesc_find(&d, "k_none"));
    ck_assert_str_eq(kn_kdesc_type_name(KN_KDESC_RESULT_PTR), "result_ptr");
    kn_kdesc_free(&d);
    kn_kdesc_free(&d); /* twice is fine */
}
END_TEST

static const struct {
    const char *text;
    int rc;
    const char *words;
} bad[] = {
    {"", -EINVAL, "expected 'kdesc 1' first"},
    {"kernel k\n", -EINVAL, "line 1: expected 'kdesc 1' first"},
    {"kdesc 2\n", -EINVAL, "expected 'kdesc 1' first, found 'kdesc 2'"},
    {"kdesc 1\n", -EINVAL, "at least one kernel"},
    {"kdesc 1\narg a lease_ptr lease=0\n", -EINVAL, "line 2: expected a 'kernel' line"},
    {"kdesc 1\nkernel 9k\n", -EINVAL, "line 2: expected a kernel name"},
    {"kdesc 1\nkernel k\n", -EINVAL, "kernel k: expected a lease_ptr argument"},
    {"kdesc 1\nkernel k\narg a lease_ptr lease=0\nkernel k\n", -EINVAL, "declared twice"},
    {"kdesc 1\nkernel k block_max=0\n", -EINVAL, "expected block_max=1..1024"},
    {"kdesc 1\nkernel k block_max=1025\n", -EINVAL, "expected block_max=1..1024"},
    {"kdesc 1\nkernel k result_max=257\n", -EINVAL, "result_max=0..256"},
    {"kdesc 1\nkernel k color=blue\n", -EINVAL, "color=blue"},
    {"kdesc 1\nkernel k block_max=12x\n", -EINVAL, "expected a number, found '12x'"},
    {"kdesc 1\nkernel k block_max\n", -EINVAL, "expected key=value, found 'block_max'"},
    {"kdesc 1\nkernel k\narg a lease_ptr\n", -EINVAL, "line 3: lease_ptr a: expected lease=N"},
    {"kdesc 1\nkernel k\narg a lease_ptr lease=4\n", -EINVAL, "lease: expected 0..3"},
    {"kdesc 1\nkernel k\narg a lease_ptr lease=1\n", -EINVAL, "without gaps"},
    {"kdesc 1\nkernel k\narg a lease_ptr lease=0 access=rw\n", -EINVAL, "read or write"},
    {"kdesc 1\nkernel k\narg a lease_ptr lease=0 align=3\n", -EINVAL, "power of two"},
    {"kdesc 1\nkernel k\narg a lease_ptr lease=0\narg a u32\n", -EINVAL, "declared twice"},
    {"kdesc 1\nkernel k\narg a lease_ptr lease=0\narg b u16\n", -EINVAL, "expected a type"},
    {"kdesc 1\nkernel k\narg a lease_ptr lease=0\narg b f32 min=0\n", -EINVAL,
     "does not apply to a f32"},
    {"kdesc 1\nkernel k\narg a lease_ptr lease=0\narg b u32 min=-1\n", -EINVAL,
     "expected a u32 value"},
    {"kdesc 1\nkernel k\narg a lease_ptr lease=0\narg b u32 max=4294967296\n", -EINVAL,
     "expected a u32 value"},
    {"kdesc 1\nkernel k\narg a lease_ptr lease=0\narg b i32 min=5 max=4\n", -EINVAL,
     "expected min <= max"},
    {"kdesc 1\nkernel k\narg a lease_ptr lease=0\narg r result_ptr\n", -EINVAL, "needs result_max"},
    {"kdesc 1\nkernel k\narg a lease_ptr lease=0\narg b u32 lease=0\n", -EINVAL, "does not apply"},
    {"kdesc 1\nkernel k\narg a\n", -EINVAL, "expected 'arg NAME TYPE"},
    {"kdesc 1\nfunction k\n", -EINVAL, "expected 'kernel' or 'arg', found 'function'"},
    {"kdesc 1\nkernel k\xc3\xa9\n", -EINVAL, "printable ASCII"},
};

START_TEST(every_rule_broken_is_named_with_its_line)
{
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct kn_kdesc d = {.count = 99};
        char err[256] = "";
        int rc = parse(bad[i].text, &d, err, sizeof err);
        ck_assert_msg(rc == bad[i].rc, "case %zu: rc %d, expected %d (%s)", i, rc, bad[i].rc, err);
        ck_assert_msg(strstr(err, bad[i].words), "case %zu: '%s' lacks '%s'", i, err, bad[i].words);
        ck_assert_uint_eq(d.count, 99); /* untouched on failure */
    }
    /* limits: too many kernels, too many arguments, too many bytes */
    size_t cap = 70 * 64;
    char *t = malloc(cap), *p = t;
    p += sprintf(p, "kdesc 1\n");
    for (int k = 0; k < KN_KDESC_MAX_KERNELS + 1; k++)
        p += sprintf(p, "kernel k%d\narg a lease_ptr lease=0\n", k);
    struct kn_kdesc d;
    char err[256];
    ck_assert_int_eq(kn_kdesc_parse(t, (size_t)(p - t), &d, err, sizeof err), -E2BIG);
    p = t + sprintf(t, "kdesc 1\nkernel k\narg a lease_ptr lease=0\n");
    for (int a = 0; a < KN_KDESC_MAX_PARAMS; a++)
        p += sprintf(p, "arg s%d u32\n", a);
    ck_assert_int_eq(kn_kdesc_parse(t, (size_t)(p - t), &d, err, sizeof err), -E2BIG);
    ck_assert_int_eq(kn_kdesc_parse(t, KN_KDESC_MAX_BYTES + 1, &d, err, sizeof err), -EFBIG);
    free(t);
}
END_TEST

START_TEST(cut_and_random_text_is_refused_without_overread)
{
    size_t n = strlen(good);
    for (size_t len = 0; len < n; len++) {
        char *p = malloc(len ? len : 1); /* exactly len: ASan sees any overread */
        memcpy(p, good, len);
        struct kn_kdesc d;
        char err[256];
        if (kn_kdesc_parse(p, len, &d, err, sizeof err) == 0)
            kn_kdesc_free(&d);
        free(p);
    }
    uint64_t s = 0x6b64657363ull;
    for (int i = 0; i < 3000; i++) {
        size_t len = 1 + (size_t)(i % 300);
        char *p = malloc(len);
        for (size_t k = 0; k < len; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            const char alphabet[] = "kdesc 1\nkernel arg lease_ptr u32=0x_-#\t";
            p[k] = (i % 3) ? alphabet[(s >> 33) % (sizeof alphabet - 1)] : (char)(s >> 56);
        }
        if (i % 5 == 0 && len > 8)
            memcpy(p, "kdesc 1\n", 8);
        struct kn_kdesc d;
        char err[256];
        if (kn_kdesc_parse(p, len, &d, err, sizeof err) == 0)
            kn_kdesc_free(&d);
        free(p);
    }
}
END_TEST

START_TEST(argument_blocks_are_held_to_the_kernel)
{
    struct kn_kdesc d;
    char err[256];
    ck_assert(parse(good, &d, err, sizeof err) == 0);
    const struct kn_kdesc_kernel *k = kn_kdesc_find(&d, "k_sum");
    unsigned char b[32];
    uint32_t idx = 7;
    memset(b, 0, sizeof b);
    uint32_t scale = 3;
    memcpy(b, &scale, 4);
    ck_assert_msg(kn_kdesc_args_check(k, b, 16, &idx, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(kn_kdesc_args_check(k, b, 8, &idx, err, sizeof err), -EINVAL);
    ck_assert_uint_eq(idx, 3); /* big (u64) does not fit */
    ck_assert_int_eq(kn_kdesc_args_check(k, b, 24, &idx, err, sizeof err), -EINVAL);
    ck_assert_uint_eq(idx, UINT32_MAX);
    ck_assert_msg(strstr(err, "24 bytes"), "%s", err);
    scale = 17;
    memcpy(b, &scale, 4);
    ck_assert_int_eq(kn_kdesc_args_check(k, b, 16, &idx, err, sizeof err), -EINVAL);
    ck_assert_uint_eq(idx, 2);
    ck_assert_msg(strstr(err, "expected 1..16, found 17"), "%s", err);
    scale = 0;
    memcpy(b, &scale, 4);
    ck_assert_int_eq(kn_kdesc_args_check(k, b, 16, &idx, err, sizeof err), -EINVAL);
    scale = 16;
    memcpy(b, &scale, 4);
    b[5] = 1; /* the padding between scale and big */
    ck_assert_int_eq(kn_kdesc_args_check(k, b, 16, &idx, err, sizeof err), -EINVAL);
    ck_assert_uint_eq(idx, 3);
    b[5] = 0;
    k = kn_kdesc_find(&d, "k_two");
    int32_t x = -6;
    memset(b, 0, sizeof b);
    memcpy(b, &x, 4);
    ck_assert_int_eq(kn_kdesc_args_check(k, b, 16, &idx, err, sizeof err), -EINVAL);
    ck_assert_uint_eq(idx, 2);
    x = -5;
    memcpy(b, &x, 4);
    ck_assert_int_eq(kn_kdesc_args_check(k, b, 16, &idx, err, sizeof err), 0);
    kn_kdesc_free(&d);
}
END_TEST

#ifdef KN_TEST_LAUNCH_CUBIN
static unsigned char *file_read(const char *path, size_t *size_p)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    unsigned char *p = malloc((size_t)n + 1);
    ck_assert_uint_eq(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    p[n] = 0;
    *size_p = (size_t)n;
    return p;
}

/* Parses @text and checks it against @cubin; returns the check's rc. */
static int against(const char *text, const unsigned char *cubin, size_t size, char *err, size_t n)
{
    struct kn_kdesc d;
    int rc = parse(text, &d, err, n);
    ck_assert_msg(rc == 0, "%s", err);
    rc = kn_kdesc_check_cubin(&d, cubin, size, err, n);
    kn_kdesc_free(&d);
    return rc;
}

START_TEST(descriptors_are_held_to_their_cubins)
{
    size_t size, ksize;
    unsigned char *cubin = file_read(KN_TEST_LAUNCH_CUBIN, &size);
    unsigned char *text = file_read(KN_TEST_LAUNCH_KDESC, &ksize);
    char err[512];
    /* the shipped descriptor agrees with its cubin */
    struct kn_kdesc d;
    ck_assert_msg(kn_kdesc_parse((const char *)text, ksize, &d, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(kn_kdesc_check_cubin(&d, cubin, size, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(d.count, 3);
    kn_kdesc_free(&d);
    /* the cubin's own table: k_launch_sum_u32(ptr, u64, u32, ptr, u64) */
    struct kn_cubin_kernel_info info;
    ck_assert_int_eq(kn_cubin_kernel_info(cubin, size, "k_launch_sum_u32", &info, err, sizeof err),
                     0);
    ck_assert_uint_eq(info.nparams, 5);
    const uint16_t sizes[] = {8, 8, 4, 8, 8}, offs[] = {0, 8, 16, 24, 32};
    for (int i = 0; i < 5; i++) {
        ck_assert_uint_eq(info.params[i].size, sizes[i]);
        ck_assert_uint_eq(info.params[i].offset, offs[i]);
        ck_assert_uint_eq(info.params[i].ordinal, i);
    }
    ck_assert_uint_eq(info.param_bytes, 40);
    ck_assert_int_eq(kn_cubin_kernel_info(cubin, size, "k_nope", &info, err, sizeof err), -ENOENT);
    /* disagreements, each named */
    const char *head = "kdesc 1\nkernel k_launch_fill\narg data lease_ptr lease=0\n"
                       "arg bytes lease_len lease=0\n";
    char t[512];
    snprintf(t, sizeof t, "%sarg seed u64\n", head);
    ck_assert_int_eq(against(t, cubin, size, err, sizeof err), -EPROTO);
    ck_assert_msg(strstr(err, "parameter 2 (seed, u64) is 8 bytes in the descriptor, 4 in the "
                              "cubin"),
                  "%s", err);
    snprintf(t, sizeof t, "%s", head);
    ck_assert_int_eq(against(t, cubin, size, err, sizeof err), -EPROTO);
    ck_assert_msg(strstr(err, "declares 2 parameters, the cubin's parameter table has 3"), "%s",
                  err);
    snprintf(t, sizeof t, "%sarg seed u32\narg more u32\n", head);
    ck_assert_int_eq(against(t, cubin, size, err, sizeof err), -EPROTO);
    ck_assert_int_eq(against("kdesc 1\nkernel k_absent\narg a lease_ptr lease=0\n", cubin, size,
                             err, sizeof err),
                     -ENOENT);
    ck_assert_msg(strstr(err, "kernel k_absent"), "%s", err);
    ck_assert_int_eq(against("kdesc 1\nkernel k_launch_fill\narg a lease_ptr lease=0\n", cubin,
                             size / 2, err, sizeof err) < 0,
                     1);
    free(text);
    free(cubin);
#ifdef KN_TEST_CUBIN
    /* a launch bound: the checksum kernels are built for 256 threads */
    cubin = file_read(KN_TEST_CUBIN, &size);
#define SUM_KDESC(bound)                                                                           \
    "kdesc 1\nkernel k_block_checksum block_max=" bound "\n"                                       \
    "arg data lease_ptr lease=0\narg len lease_len lease=0\n"                                      \
    "arg bs u32\narg sums lease_ptr lease=1 access=write\n"
    snprintf(t, sizeof t, "%s", SUM_KDESC("256"));
    ck_assert_msg(against(t, cubin, size, err, sizeof err) == 0, "%s", err);
    snprintf(t, sizeof t, "%s", SUM_KDESC("512"));
    ck_assert_int_eq(against(t, cubin, size, err, sizeof err), -EPROTO);
    ck_assert_msg(strstr(err, "block_max=512, but the cubin's launch bound is 256"), "%s", err);
    free(cubin);
#endif
}
END_TEST

/* cubincheck --kdesc: the gate at build time, and what --emit-c embeds. */
START_TEST(cubincheck_checks_and_embeds_the_descriptor)
{
    char cmd[2048], inc[] = "/tmp/kdesc-test-XXXXXX";
    int fd = mkstemp(inc);
    ck_assert_int_ge(fd, 0);
    close(fd);
    snprintf(cmd, sizeof cmd, "%s --arch %s --kdesc %s --emit-c %s --symbol kn_t %s >/dev/null",
             KN_TEST_CUBINCHECK, KN_TEST_ARCH_S, KN_TEST_LAUNCH_KDESC, inc, KN_TEST_LAUNCH_CUBIN);
    ck_assert_int_eq(system(cmd), 0);
    size_t n;
    unsigned char *out = file_read(inc, &n);
    ck_assert_msg(strstr((const char *)out, "static const char kn_t_kdesc["), "no descriptor");
    free(out);
    /* a disagreeing descriptor: refused, nothing left behind */
    char bad_path[] = "/tmp/kdesc-bad-XXXXXX";
    fd = mkstemp(bad_path);
    const char bad_text[] = "kdesc 1\nkernel k_launch_fill\narg data lease_ptr lease=0\n";
    ck_assert_int_eq(write(fd, bad_text, sizeof bad_text - 1), (ssize_t)(sizeof bad_text - 1));
    close(fd);
    snprintf(cmd, sizeof cmd,
             "%s --arch %s --kdesc %s --emit-c %s --symbol kn_t %s 2>%s.err >/dev/null",
             KN_TEST_CUBINCHECK, KN_TEST_ARCH_S, bad_path, inc, KN_TEST_LAUNCH_CUBIN, inc);
    int st = system(cmd);
    ck_assert_int_eq(WEXITSTATUS(st), 1);
    FILE *f = fopen(inc, "r");
    ck_assert_ptr_null(f);
    char errf[64];
    snprintf(errf, sizeof errf, "%s.err", inc);
    out = file_read(errf, &n);
    ck_assert_msg(strstr((const char *)out, "REFUSED: descriptor") &&
                      strstr((const char *)out, "declares 1 parameters"),
                  "%s", out);
    free(out);
    unlink(errf);
    unlink(bad_path);
}
END_TEST
#endif

int main(void)
{
    Suite *s = suite_create("kdesc");
    TCase *tc = tcase_create("kdesc");
    tcase_add_test(tc, a_good_descriptor_says_what_it_declares);
    tcase_add_test(tc, every_rule_broken_is_named_with_its_line);
    tcase_add_test(tc, cut_and_random_text_is_refused_without_overread);
    tcase_add_test(tc, argument_blocks_are_held_to_the_kernel);
#ifdef KN_TEST_LAUNCH_CUBIN
    tcase_add_test(tc, descriptors_are_held_to_their_cubins);
    tcase_add_test(tc, cubincheck_checks_and_embeds_the_descriptor);
#endif
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
