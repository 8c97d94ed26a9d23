/* ga_extra_images on temporary directories, without a GPU: a built cubin is
 * accepted with its k_* kernels; another arch, PTX, a fatbin, relocatable
 * code, a truncated cubin, random bytes, a symlink, a directory and kernel
 * name collisions are refused with a message naming the file. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpu/extra_images.h"
#include "kernels/images.h"

#define STR2(x) #x
#define STR(x) STR2(x)

static char dir[256];
static char err[2048];

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

static unsigned char *file_slurp(const char *path, size_t *size_p)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    ck_assert_int_gt(n, 0);
    rewind(f);
    unsigned char *b = malloc((size_t)n);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size_p = (size_t)n;
    return b;
}

static void file_put(const char *name, const void *data, size_t size)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot create %s", path);
    ck_assert_uint_eq(fwrite(data, 1, size, f), size);
    ck_assert_int_eq(fclose(f), 0);
}

/* Copies the first @limit bytes (SIZE_MAX: all) of @src to DIR/@name. */
static size_t file_copy(const char *src, const char *name, size_t limit)
{
    size_t size = 0;
    unsigned char *b = file_slurp(src, &size);
    size_t n = size < limit ? size : limit;
    file_put(name, b, n);
    free(b);
    return size;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return flag == FTW_DP ? rmdir(path) : unlink(path);
}

static void dir_make(void)
{
    snprintf(dir, sizeof(dir), "/tmp/ga_extra_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    err[0] = '\0';
}

static void dir_remove(void)
{
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Expects @rc from loading DIR, and a message holding each of the strings. */
static void expect_refused(int want, const char *const *needles, size_t n)
{
    struct kn_image *imgs = (struct kn_image *)(uintptr_t)0x1;
    size_t count = 12345;
    int rc = ga_extra_images_load(dir, LEASE_GPU_ARCH, &imgs, &count, err, sizeof(err));
    ck_assert_msg(rc == want, "expected %d (%s), found %d: %s", want, strerror(-want), rc, err);
    ck_assert_msg(imgs == (struct kn_image *)(uintptr_t)0x1 && count == 12345,
                  "outputs written on failure");
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(strstr(err, needles[i]) != NULL, "message lacks '%s': %s", needles[i], err);
}

static size_t kernel_index(const struct kn_image *img, const char *name)
{
    for (size_t k = 0; k < img->kernel_count; k++)
        if (strcmp(img->kernels[k], name) == 0)
            return k;
    return SIZE_MAX;
}

START_TEST(copy_of_built_cubin_is_accepted_with_its_kernels)
{
    size_t size = file_copy(KN_TEST_CUBIN, "extra.cubin", SIZE_MAX);
    file_put("README.txt", "not a cubin\n", 12); /* other names are ignored */
    struct kn_image *imgs = NULL;
    size_t count = 0;
    int rc = ga_extra_images_load(dir, LEASE_GPU_ARCH, &imgs, &count, err, sizeof(err));
    ck_assert_msg(rc == 1, "rc %d: %s", rc, err);
    ck_assert_uint_eq(count, 1);
    ck_assert_str_eq(imgs[0].name, "extra");
    ck_assert_uint_eq(imgs[0].arch, LEASE_GPU_ARCH);
    ck_assert_uint_eq(imgs[0].size, size);
    ck_assert_uint_eq((uintptr_t)imgs[0].data % 64, 0);
    size_t ref_size = 0;
    unsigned char *ref = file_slurp(KN_TEST_CUBIN, &ref_size);
    ck_assert(memcmp(imgs[0].data, ref, size) == 0);
    free(ref);
    /* Exactly the k_* entries of checksum.cu, NULL-terminated like kn_images. */
    ck_assert_uint_eq(imgs[0].kernel_count, 2);
    ck_assert_uint_ne(kernel_index(&imgs[0], "k_block_checksum"), SIZE_MAX);
    ck_assert_uint_ne(kernel_index(&imgs[0], "k_block_verify"), SIZE_MAX);
    ck_assert_ptr_null(imgs[0].kernels[2]);
    ga_extra_images_free(imgs, count);
}
END_TEST

START_TEST(images_come_sorted_by_file_name)
{
    file_copy(EXTRA_CUBIN, "b_fill.cubin", SIZE_MAX);
    file_copy(KN_TEST_CUBIN, "a_sum.cubin", SIZE_MAX);
    struct kn_image *imgs = NULL;
    size_t count = 0;
    int rc = ga_extra_images_load(dir, LEASE_GPU_ARCH, &imgs, &count, err, sizeof(err));
    ck_assert_msg(rc == 2, "rc %d: %s", rc, err);
    ck_assert_str_eq(imgs[0].name, "a_sum");
    ck_assert_str_eq(imgs[1].name, "b_fill");
    ck_assert_uint_eq(imgs[1].kernel_count, 1);
    ck_assert_str_eq(imgs[1].kernels[0], "k_extra_fill");
    ga_extra_images_free(imgs, count);
}
END_TEST

START_TEST(empty_directory_gives_no_images)
{
    struct kn_image *imgs = (struct kn_image *)(uintptr_t)0x1;
    size_t count = 99;
    int rc = ga_extra_images_load(dir, LEASE_GPU_ARCH, &imgs, &count, err, sizeof(err));
    ck_assert_msg(rc == 0, "rc %d: %s", rc, err);
    ck_assert_ptr_null(imgs);
    ck_assert_uint_eq(count, 0);
    ga_extra_images_free(imgs, count);
}
END_TEST

START_TEST(missing_directory_is_refused)
{
    char gone[300];
    snprintf(gone, sizeof(gone), "%s/nope", dir);
    struct kn_image *imgs = NULL;
    size_t count = 0;
    int rc = ga_extra_images_load(gone, LEASE_GPU_ARCH, &imgs, &count, err, sizeof(err));
    ck_assert_int_eq(rc, -ENOENT);
    ck_assert_msg(strstr(err, gone) && strstr(err, "directory"), "%s", err);
    file_put("plain", "x", 1);
    snprintf(gone, sizeof(gone), "%s/plain", dir);
    rc = ga_extra_images_load(gone, LEASE_GPU_ARCH, &imgs, &count, err, sizeof(err));
    ck_assert_msg(rc == -ENOTDIR, "rc %d: %s", rc, err);
}
END_TEST

START_TEST(other_arch_cubin_is_refused)
{
    file_copy(KN_TEST_DIR "/checksum.sm_" STR(KN_TEST_OTHER_ARCH) ".cubin", "other.cubin",
              SIZE_MAX);
    const char *needles[] = {"other.cubin", "wrong GPU architecture",
                             "expected sm_" STR(LEASE_GPU_ARCH),
                             "found sm_" STR(KN_TEST_OTHER_ARCH)};
    expect_refused(-ENOTSUP, needles, 4);
}
END_TEST

START_TEST(ptx_renamed_cubin_is_refused)
{
    file_copy(KN_TEST_DIR "/checksum.ptx", "ptx.cubin", SIZE_MAX);
    const char *needles[] = {"ptx.cubin", "PTX"};
    expect_refused(-ENOEXEC, needles, 2);
}
END_TEST

START_TEST(fatbin_renamed_cubin_is_refused)
{
    file_copy(KN_TEST_DIR "/checksum.fatbin", "fat.cubin", SIZE_MAX);
    const char *needles[] = {"fat.cubin", "fatbin"};
    expect_refused(-ENOEXEC, needles, 2);
}
END_TEST

START_TEST(relocatable_cubin_is_refused)
{
    file_copy(KN_TEST_DIR "/checksum.rdc.cubin", "rdc.cubin", SIZE_MAX);
    const char *needles[] = {"rdc.cubin", "ET_EXEC"};
    expect_refused(-ENOEXEC, needles, 2);
}
END_TEST

START_TEST(truncated_cubin_is_refused)
{
    uint64_t s = 0x7472756e63ULL;
    size_t size = 0;
    free(file_slurp(KN_TEST_CUBIN, &size));
    /* Anywhere past the ELF header and short of the end: a section or segment is cut. */
    size_t cut = 64 + (size_t)(rng_next(&s) % (size - 64 - 1));
    file_copy(KN_TEST_CUBIN, "short.cubin", cut);
    const char *needles[] = {"short.cubin", "truncated"};
    expect_refused(-EBADMSG, needles, 2);
}
END_TEST

START_TEST(random_bytes_are_refused)
{
    uint64_t s = 0x72616e64ULL;
    unsigned char junk[4096];
    for (size_t i = 0; i < sizeof(junk); i += 8) {
        uint64_t v = rng_next(&s);
        memcpy(junk + i, &v, 8);
    }
    junk[0] = 0x01; /* neither ELF, fatbin nor text */
    file_put("junk.cubin", junk, sizeof(junk));
    const char *needles[] = {"junk.cubin", "expected magic 7f 45 4c 46"};
    expect_refused(-ENOEXEC, needles, 2);
}
END_TEST

START_TEST(symlink_is_refused)
{
    char target[300];
    snprintf(target, sizeof(target), "%s/real.bin", dir);
    file_copy(KN_TEST_CUBIN, "real.bin", SIZE_MAX);
    char link[300];
    snprintf(link, sizeof(link), "%s/link.cubin", dir);
    ck_assert_int_eq(symlink(target, link), 0);
    const char *needles[] = {"link.cubin", "expected a regular file, found a symbolic link"};
    expect_refused(-ELOOP, needles, 2);
}
END_TEST

START_TEST(directory_named_cubin_is_refused)
{
    char sub[300];
    snprintf(sub, sizeof(sub), "%s/sub.cubin", dir);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    const char *needles[] = {"sub.cubin", "expected a regular file"};
    expect_refused(-EINVAL, needles, 2);
}
END_TEST

START_TEST(one_bad_file_fails_the_whole_directory)
{
    file_copy(EXTRA_CUBIN, "a_good.cubin", SIZE_MAX);
    file_copy(KN_TEST_DIR "/checksum.ptx", "z_bad.cubin", SIZE_MAX);
    const char *needles[] = {"z_bad.cubin", "PTX"};
    expect_refused(-ENOEXEC, needles, 2);
}
END_TEST

START_TEST(kernel_in_two_files_is_refused)
{
    file_copy(KN_TEST_CUBIN, "one.cubin", SIZE_MAX);
    file_copy(KN_TEST_CUBIN, "two.cubin", SIZE_MAX);
    const char *needles[] = {"k_block_", "'two'", "'one'", "expected each kernel name once"};
    expect_refused(-EEXIST, needles, 4);
}
END_TEST

START_TEST(collision_with_embedded_kernel_is_refused)
{
    file_copy(KN_TEST_CUBIN, "extra.cubin", SIZE_MAX);
    struct kn_image *extra = NULL, *table = (struct kn_image *)(uintptr_t)0x1;
    size_t extra_count = 0, count = 7;
    ck_assert_int_eq(
        ga_extra_images_load(dir, LEASE_GPU_ARCH, &extra, &extra_count, err, sizeof(err)), 1);
    int rc = ga_extra_images_combine(kn_images, kn_image_count, extra, extra_count, &table, &count,
                                     err, sizeof(err));
    ck_assert_msg(rc == -EEXIST, "rc %d: %s", rc, err);
    ck_assert_msg(strstr(err, "k_block_") && strstr(err, "'extra'") && strstr(err, "'checksum'"),
                  "%s", err);
    ck_assert(table == (struct kn_image *)(uintptr_t)0x1 && count == 7);
    ga_extra_images_free(extra, extra_count);
}
END_TEST

START_TEST(image_named_like_embedded_is_refused)
{
    file_copy(EXTRA_CUBIN, "checksum.cubin", SIZE_MAX);
    struct kn_image *extra = NULL, *table = NULL;
    size_t extra_count = 0, count = 0;
    ck_assert_int_eq(
        ga_extra_images_load(dir, LEASE_GPU_ARCH, &extra, &extra_count, err, sizeof(err)), 1);
    int rc = ga_extra_images_combine(kn_images, kn_image_count, extra, extra_count, &table, &count,
                                     err, sizeof(err));
    ck_assert_msg(rc == -EEXIST, "rc %d: %s", rc, err);
    ck_assert_msg(strstr(err, "image name 'checksum'"), "%s", err);
    ga_extra_images_free(extra, extra_count);
}
END_TEST

START_TEST(new_kernel_combines_after_the_embedded_ones)
{
    file_copy(EXTRA_CUBIN, "extra_kernel.cubin", SIZE_MAX);
    struct kn_image *extra = NULL, *table = NULL;
    size_t extra_count = 0, count = 0;
    ck_assert_int_eq(
        ga_extra_images_load(dir, LEASE_GPU_ARCH, &extra, &extra_count, err, sizeof(err)), 1);
    int rc = ga_extra_images_combine(kn_images, kn_image_count, extra, extra_count, &table, &count,
                                     err, sizeof(err));
    ck_assert_msg(rc == 0, "rc %d: %s", rc, err);
    ck_assert_uint_eq(count, kn_image_count + 1);
    for (size_t i = 0; i < kn_image_count; i++)
        ck_assert_ptr_eq(table[i].data, kn_images[i].data);
    ck_assert_ptr_eq(table[kn_image_count].data, extra[0].data);
    ck_assert_str_eq(table[kn_image_count].kernels[0], "k_extra_fill");
    free(table);
    ga_extra_images_free(extra, extra_count);
}
END_TEST

static Suite *extra_images_suite(void)
{
    Suite *s = suite_create("ga_extra_images");
    TCase *tc = tcase_create("load");
    tcase_add_checked_fixture(tc, dir_make, dir_remove);
    tcase_add_test(tc, copy_of_built_cubin_is_accepted_with_its_kernels);
    tcase_add_test(tc, images_come_sorted_by_file_name);
    tcase_add_test(tc, empty_directory_gives_no_images);
    tcase_add_test(tc, missing_directory_is_refused);
    tcase_add_test(tc, other_arch_cubin_is_refused);
    tcase_add_test(tc, ptx_renamed_cubin_is_refused);
    tcase_add_test(tc, fatbin_renamed_cubin_is_refused);
    tcase_add_test(tc, relocatable_cubin_is_refused);
    tcase_add_test(tc, truncated_cubin_is_refused);
    tcase_add_test(tc, random_bytes_are_refused);
    tcase_add_test(tc, symlink_is_refused);
    tcase_add_test(tc, directory_named_cubin_is_refused);
    tcase_add_test(tc, one_bad_file_fails_the_whole_directory);
    tcase_add_test(tc, kernel_in_two_files_is_refused);
    tcase_add_test(tc, collision_with_embedded_kernel_is_refused);
    tcase_add_test(tc, image_named_like_embedded_is_refused);
    tcase_add_test(tc, new_kernel_combines_after_the_embedded_ones);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(extra_images_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
