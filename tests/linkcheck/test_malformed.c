/* Malformed input: a real program truncated at every length, each header
 * field that locates something pointed out of bounds, foreign ELF kinds and
 * seeded random corruption. linkcheck must refuse each with exit 2 and an
 * error that says what it expected, and never crash (the sanitizer build
 * proves no read goes out of bounds). */
#include <check.h>
#include <elf.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lc_test_util.h"
#include "linkcheck/linkcheck.h"

#define SEED 0x1c5eed0fULL

static unsigned char *base;
static size_t base_size;
static char base_path[PATH_MAX];
static char *tmp;

/* xorshift64*: reproducible from SEED on every machine. */
static uint64_t rng_state;

static uint64_t rng_next(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}

/* The first error line a check reported. */
struct capture {
    char error[1024];
    int findings;
};

static void capture_line(void *arg, enum lc_severity severity, const char *line)
{
    struct capture *cap = arg;
    if (severity == LC_SEVERITY_ERROR && !cap->error[0])
        snprintf(cap->error, sizeof(cap->error), "%s", line);
    if (severity == LC_SEVERITY_FINDING)
        cap->findings++;
}

/* Checks @size bytes in memory, searching nothing on disk. */
static int check_mem(const void *data, size_t size, struct capture *cap)
{
    struct lc_checker *c;
    ck_assert_int_eq(lc_checker_create(&c), 0);
    memset(cap, 0, sizeof(*cap));
    lc_checker_set_reporter(c, capture_line, cap);
    lc_checker_set_flags(c, LC_FLAG_NO_SEARCH | LC_FLAG_SYMBOLS_RECURSIVE);
    int rc = lc_checker_check_buffer(c, "mutant", data, size);
    lc_checker_destroy(c);
    return rc;
}

/* Writes @data to a scratch file and runs the linkcheck program on it:
 * exit 2, an error line naming the file and containing @says, no sanitizer. */
static void expect_cli_refuses(const void *data, size_t size, const char *name, const char *says)
{
    char *path = lc_test_join(tmp, name);
    ck_assert_ptr_nonnull(path);
    ck_assert_int_eq(lc_test_write_file(path, data, size, 0644), 0);
    struct lc_test_run run;
    ck_assert_int_eq(lc_test_run((const char *const[]){path, NULL}, &run), 0);
    ck_assert_msg(!lc_test_run_sanitizer_fired(&run), "%s: sanitizer fired:\n%s", name, run.out);
    ck_assert_msg(run.status == 2, "%s: exit %d, expected 2:\n%s", name, run.status, run.out);
    char want[PATH_MAX + 64];
    snprintf(want, sizeof(want), "linkcheck: error %s: ", path);
    ck_assert_msg(strstr(run.out, want) != NULL, "%s: no error line:\n%s", name, run.out);
    ck_assert_msg(strstr(run.out, says) != NULL, "%s: error lacks '%s':\n%s", name, says, run.out);
    lc_test_run_free(&run);
    free(path);
}

static void setup(void)
{
    snprintf(base_path, sizeof(base_path), "%s/bin/clean", LC_TEST_FIXTURES);
    ck_assert_int_eq(lc_test_read_file(base_path, &base, &base_size), 0);
    ck_assert_uint_gt(base_size, sizeof(Elf64_Ehdr));
    tmp = lc_test_mkdtemp();
    ck_assert_ptr_nonnull(tmp);
    rng_state = SEED;
}

static void teardown(void)
{
    free(base);
    base = NULL;
    lc_test_rm_rf(tmp);
    free(tmp);
    tmp = NULL;
}

/* ---- the base image's layout, read with trust (we built it) ------------- */

static Elf64_Ehdr *ehdr(unsigned char *d)
{
    return (Elf64_Ehdr *)d;
}

static Elf64_Shdr *shdr(unsigned char *d, size_t i)
{
    return (Elf64_Shdr *)(d + ehdr(d)->e_shoff) + i;
}

static Elf64_Phdr *phdr(unsigned char *d, size_t i)
{
    return (Elf64_Phdr *)(d + ehdr(d)->e_phoff) + i;
}

static size_t section_index(unsigned char *d, const char *name)
{
    const char *names = (const char *)d + shdr(d, ehdr(d)->e_shstrndx)->sh_offset;
    for (size_t i = 1; i < ehdr(d)->e_shnum; i++)
        if (strcmp(names + shdr(d, i)->sh_name, name) == 0)
            return i;
    ck_abort_msg("the base program has no %s section", name);
    return 0;
}

static size_t segment_index(unsigned char *d, uint32_t type)
{
    for (size_t i = 0; i < ehdr(d)->e_phnum; i++)
        if (phdr(d, i)->p_type == type)
            return i;
    ck_abort_msg("the base program has no segment of type %u", type);
    return 0;
}

static Elf64_Dyn *dyn_entry(unsigned char *d, int64_t tag)
{
    Elf64_Dyn *dyn = (Elf64_Dyn *)(d + phdr(d, segment_index(d, PT_DYNAMIC))->p_offset);
    for (; dyn->d_tag != DT_NULL; dyn++)
        if (dyn->d_tag == tag)
            return dyn;
    ck_abort_msg("the base program has no dynamic tag %lld", (long long)tag);
    return NULL;
}

/* ---- tests -------------------------------------------------------------- */

START_TEST(base_program_is_clean)
{
    struct capture cap;
    ck_assert_int_eq(check_mem(base, base_size, &cap), 0);
    ck_assert_str_eq(cap.error, "");
}
END_TEST

START_TEST(every_truncation_is_refused)
{
    for (size_t len = 0; len < base_size; len++) {
        struct capture cap;
        int rc = check_mem(base, len, &cap);
        ck_assert_msg(rc == -ENOEXEC, "truncated to %zu of %zu bytes: rc %d (%s)", len, base_size,
                      rc, cap.error);
        ck_assert_msg(strncmp(cap.error, "linkcheck: error mutant: ", 25) == 0,
                      "truncated to %zu: no error line", len);
    }
    /* The program too, at the edges of each structure and at seeded lengths. */
    const Elf64_Ehdr *eh = ehdr(base);
    size_t lens[40] = {0,
                       1,
                       4,
                       15,
                       16,
                       63,
                       64,
                       eh->e_phoff + sizeof(Elf64_Phdr) - 1,
                       eh->e_shoff,
                       eh->e_shoff + 1,
                       base_size - 1};
    size_t n = 11;
    while (n < sizeof(lens) / sizeof(lens[0]))
        lens[n++] = (size_t)(rng_next() % base_size);
    for (size_t i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof(name), "truncated-%zu", lens[i]);
        expect_cli_refuses(base, lens[i], name,
                           lens[i] == 0  ? "the file is empty"
                           : lens[i] < 4 ? "not an ELF file"
                                         : "");
    }
}
END_TEST

/* One corruption of the base program and what the error must say. */
struct mutation {
    const char *name;
    int rc;
    const char *says;
};

static void apply(unsigned char *d, size_t size, const char *name)
{
    Elf64_Ehdr *eh = ehdr(d);
    size_t rodata = section_index(d, ".rodata"), dynsym = section_index(d, ".dynsym");
    if (!strcmp(name, "class32")) {
        d[EI_CLASS] = ELFCLASS32;
    } else if (!strcmp(name, "class-bogus")) {
        d[EI_CLASS] = 7;
    } else if (!strcmp(name, "big-endian")) {
        d[EI_DATA] = ELFDATA2MSB;
    } else if (!strcmp(name, "machine-aarch64")) {
        eh->e_machine = EM_AARCH64;
    } else if (!strcmp(name, "core-file")) {
        eh->e_type = ET_CORE;
    } else if (!strcmp(name, "shoff-past-end")) {
        eh->e_shoff = size + 64;
    } else if (!strcmp(name, "shoff-wraps")) {
        eh->e_shoff = UINT64_MAX - 8;
    } else if (!strcmp(name, "shnum-huge")) {
        eh->e_shnum = 0xffff;
    } else if (!strcmp(name, "shentsize")) {
        eh->e_shentsize = 10;
    } else if (!strcmp(name, "shstrndx")) {
        eh->e_shstrndx = (Elf64_Half)(eh->e_shnum + 3);
    } else if (!strcmp(name, "phoff-past-end")) {
        eh->e_phoff = size - 16;
    } else if (!strcmp(name, "phoff-wraps")) {
        eh->e_phoff = UINT64_MAX;
    } else if (!strcmp(name, "sh-offset-past-end")) {
        shdr(d, rodata)->sh_offset = size + 1;
    } else if (!strcmp(name, "sh-size-wraps")) {
        shdr(d, rodata)->sh_size = UINT64_MAX - 2;
    } else if (!strcmp(name, "sh-name")) {
        shdr(d, rodata)->sh_name = 0xfffff;
    } else if (!strcmp(name, "sh-link-out-of-range")) {
        shdr(d, dynsym)->sh_link = (Elf64_Word)(eh->e_shnum + 5);
    } else if (!strcmp(name, "sh-link-not-strtab")) {
        shdr(d, dynsym)->sh_link = (Elf64_Word)rodata;
    } else if (!strcmp(name, "sh-entsize")) {
        shdr(d, dynsym)->sh_entsize = 23;
    } else if (!strcmp(name, "dt-strtab")) {
        dyn_entry(d, DT_STRTAB)->d_un.d_ptr = 0x7fff0000000ULL;
    } else if (!strcmp(name, "dt-strsz")) {
        dyn_entry(d, DT_STRSZ)->d_un.d_val = size * 4;
    } else if (!strcmp(name, "dt-needed")) {
        dyn_entry(d, DT_NEEDED)->d_un.d_val = 0x100000;
    } else if (!strcmp(name, "pt-dynamic-vaddr")) {
        phdr(d, segment_index(d, PT_DYNAMIC))->p_vaddr = 0x7fff00000000ULL;
    } else if (!strcmp(name, "pt-dynamic-twice")) {
        phdr(d, segment_index(d, PT_GNU_STACK))->p_type = PT_DYNAMIC;
    } else if (!strcmp(name, "pt-load-filesz")) {
        phdr(d, segment_index(d, PT_LOAD))->p_filesz = size + 4096;
    } else {
        ck_abort_msg("unknown mutation %s", name);
    }
}

static const struct mutation mutations[] = {
    {"class32", -ENOTSUP, "unsupported ELF class ELFCLASS32"},
    {"class-bogus", -ENOEXEC, "invalid ELF class 7"},
    {"big-endian", -ENOTSUP, "unsupported data encoding ELFDATA2MSB (big-endian)"},
    {"machine-aarch64", -ENOTSUP, "unsupported machine 183"},
    {"core-file", -ENOTSUP, "unsupported ELF type 4"},
    {"shoff-past-end", -ENOEXEC, "section header table at e_shoff"},
    {"shoff-wraps", -ENOEXEC, "section header table at e_shoff 0xfffffffffffffff7"},
    {"shnum-huge", -ENOEXEC, "section header table of 65535 entries"},
    {"shentsize", -ENOEXEC, "e_shentsize is 10, expected 64"},
    {"shstrndx", -ENOEXEC, "e_shstrndx is"},
    {"phoff-past-end", -ENOEXEC, "program header table of"},
    {"phoff-wraps", -ENOEXEC, "program header table of"},
    {"sh-offset-past-end", -ENOEXEC, "past the end of the file"},
    {"sh-size-wraps", -ENOEXEC, "past the end of the file"},
    {"sh-name", -ENOEXEC, "name offset 0xfffff is past the end of the section name table"},
    {"sh-link-out-of-range", -ENOEXEC, "is not a section index"},
    {"sh-link-not-strtab", -ENOEXEC, "is not a NUL-terminated SHT_STRTAB"},
    {"sh-entsize", -ENOEXEC, "entry size 23"},
    {"dt-strtab", -ENOEXEC, "DT_STRTAB at address 0x7fff0000000"},
    {"dt-strsz", -ENOEXEC, "is not inside the file bytes of a PT_LOAD segment"},
    {"dt-needed", -ENOEXEC, "DT_NEEDED string offset 0x100000 is past the end"},
    {"pt-dynamic-vaddr", -ENOEXEC, "PT_DYNAMIC at address 0x7fff00000000"},
    {"pt-dynamic-twice", -ENOEXEC, "more than one PT_DYNAMIC"},
    {"pt-load-filesz", -ENOEXEC, "(PT_LOAD) covers file bytes"},
};

START_TEST(each_bogus_header_field_is_refused_by_name)
{
    const struct mutation *m = &mutations[_i];
    unsigned char *d = malloc(base_size);
    ck_assert_ptr_nonnull(d);
    memcpy(d, base, base_size);
    apply(d, base_size, m->name);
    struct capture cap;
    int rc = check_mem(d, base_size, &cap);
    ck_assert_msg(rc == m->rc, "%s: rc %d, expected %d (%s)", m->name, rc, m->rc, cap.error);
    ck_assert_msg(strstr(cap.error, m->says) != NULL, "%s: error lacks '%s': %s", m->name, m->says,
                  cap.error);
    expect_cli_refuses(d, base_size, m->name, m->says);
    free(d);
}
END_TEST

START_TEST(random_bytes_are_not_elf)
{
    for (int i = 0; i < 200; i++) {
        size_t size = 1 + (size_t)(rng_next() % 4096);
        unsigned char *d = malloc(size);
        ck_assert_ptr_nonnull(d);
        for (size_t k = 0; k < size; k++)
            d[k] = (unsigned char)rng_next();
        d[0] = (unsigned char)(d[0] == 0x7f ? 0x7e : d[0]);
        struct capture cap;
        ck_assert_int_eq(check_mem(d, size, &cap), -ENOEXEC);
        ck_assert_msg(strstr(cap.error, "not an ELF file") != NULL, "%s", cap.error);
        if (i < 3) {
            char name[32];
            snprintf(name, sizeof(name), "random-%d", i);
            expect_cli_refuses(d, size, name, "not an ELF file: expected the magic 7f 45 4c 46");
        }
        free(d);
    }
}
END_TEST

/* Seeded corruption aimed at the bytes that locate things: every outcome is
 * a verdict or a clean error, never a crash or an unreported failure. */
START_TEST(seeded_corruption_never_crashes)
{
    const Elf64_Ehdr *eh = ehdr(base);
    struct {
        uint64_t off, len;
    } hot[] = {
        {0, sizeof(Elf64_Ehdr)},
        {eh->e_phoff, (uint64_t)eh->e_phnum * sizeof(Elf64_Phdr)},
        {eh->e_shoff, (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr)},
        {phdr(base, segment_index(base, PT_DYNAMIC))->p_offset,
         phdr(base, segment_index(base, PT_DYNAMIC))->p_filesz},
        {0, base_size},
    };
    unsigned char *d = malloc(base_size);
    ck_assert_ptr_nonnull(d);
    int verdicts[3] = {0, 0, 0};
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(d, base, base_size);
        int flips = 1 + (int)(rng_next() % 8);
        for (int f = 0; f < flips; f++) {
            size_t h = (size_t)(rng_next() % (sizeof(hot) / sizeof(hot[0])));
            uint64_t at = hot[h].off + rng_next() % hot[h].len;
            d[at] = (unsigned char)rng_next();
        }
        struct capture cap;
        int rc = check_mem(d, base_size, &cap);
        ck_assert_msg(rc >= 0 || rc == -ENOEXEC || rc == -ENOTSUP,
                      "iteration %d (seed 0x%llx): rc %d", iter, (unsigned long long)SEED, rc);
        if (rc < 0)
            ck_assert_msg(cap.error[0], "iteration %d: rc %d without an error line", iter, rc);
        verdicts[rc < 0 ? 0 : rc == 0 ? 1 : 2]++;
    }
    free(d);
    /* Both refusals and survivors must occur, or the corruption missed its aim. */
    ck_assert_int_gt(verdicts[0], 100);
    ck_assert_int_gt(verdicts[1], 100);
}
END_TEST

START_TEST(extended_section_numbering_is_followed)
{
    /* e_shnum 0 and e_shstrndx SHN_XINDEX move the real values into section
     * 0; a correct reader sees the same clean program. */
    unsigned char *d = malloc(base_size);
    ck_assert_ptr_nonnull(d);
    memcpy(d, base, base_size);
    Elf64_Ehdr *eh = ehdr(d);
    shdr(d, 0)->sh_size = eh->e_shnum;
    shdr(d, 0)->sh_link = eh->e_shstrndx;
    eh->e_shnum = 0;
    eh->e_shstrndx = SHN_XINDEX;
    struct capture cap;
    ck_assert_int_eq(check_mem(d, base_size, &cap), 0);
    /* And a count in section 0 larger than the file is refused. */
    shdr(d, 0)->sh_size = base_size;
    ck_assert_int_eq(check_mem(d, base_size, &cap), -ENOEXEC);
    ck_assert_msg(strstr(cap.error, "section header table of") != NULL, "%s", cap.error);
    free(d);
}
END_TEST

START_TEST(program_without_section_headers_is_still_checked)
{
    /* Stripping the section headers must not hide the dynamic symbols or
     * the strings: the loader's view (DT_SYMTAB, PT_LOAD) is read instead. */
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/bin/dlopen_ro", LC_TEST_FIXTURES);
    unsigned char *d;
    size_t size;
    ck_assert_int_eq(lc_test_read_file(path, &d, &size), 0);
    struct capture cap;
    int with_sections = check_mem(d, size, &cap);
    ck_assert_int_eq(with_sections, 1);
    Elf64_Ehdr *eh = ehdr(d);
    eh->e_shoff = 0;
    eh->e_shnum = 0;
    eh->e_shstrndx = SHN_UNDEF;
    ck_assert_int_eq(check_mem(d, size, &cap), 1);
    free(d);

    snprintf(path, sizeof(path), "%s/bin/import", LC_TEST_FIXTURES);
    ck_assert_int_eq(lc_test_read_file(path, &d, &size), 0);
    eh = ehdr(d);
    eh->e_shoff = 0;
    eh->e_shnum = 0;
    eh->e_shstrndx = SHN_UNDEF;
    ck_assert_int_eq(check_mem(d, size, &cap), 1); /* cuDeviceGet through DT_SYMTAB */
    free(d);
}
END_TEST

/* The classifier the link trace and stagingd's self check use reads ar
 * archives too: truncated or corrupted, each must come back judged or
 * refused, never read out of bounds. */
START_TEST(archives_truncated_or_corrupted_never_crash_the_classifier)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/ar/libfakecuinit.a", LC_TEST_FIXTURES);
    unsigned char *ar;
    size_t size;
    ck_assert_int_eq(lc_test_read_file(path, &ar, &size), 0);
    struct lc_checker *c;
    ck_assert_int_eq(lc_checker_create(&c), 0);
    char *why = NULL;
    ck_assert_int_eq(lc_checker_classify_file(c, path, LC_CLASSIFY_SYMBOLS, &why), 1);
    ck_assert_msg(strstr(why, "cuInit") != NULL, "%s", why);
    free(why);
    char *copy = lc_test_join(tmp, "libmutant.a");
    unsigned char *d = malloc(size);
    ck_assert_ptr_nonnull(d);
    for (int iter = 0; iter < 1500; iter++) {
        size_t len = size;
        memcpy(d, ar, size);
        if (iter < 500) {
            len = 8 + (size_t)(rng_next() % (size - 8));
        } else {
            int flips = 1 + (int)(rng_next() % 6);
            for (int f = 0; f < flips; f++) {
                /* Aim at the member headers: the first 200 bytes and around 68+. */
                size_t at = (size_t)(rng_next() % (iter % 2 ? size : (size < 200 ? size : 200)));
                static const char ar_chars[] = "0123456789/ `";
                d[at] = iter % 3 ? (unsigned char)rng_next()
                                 : (unsigned char)ar_chars[rng_next() % (sizeof(ar_chars) - 1)];
            }
        }
        ck_assert_int_eq(lc_test_write_file(copy, d, len, 0644), 0);
        why = NULL;
        int rc = lc_checker_classify_file(c, copy, LC_CLASSIFY_SYMBOLS, &why);
        ck_assert_msg(rc == 1 || rc == 0 || rc == -ENOEXEC, "iteration %d: rc %d", iter, rc);
        ck_assert_msg((rc == 1) == (why != NULL), "iteration %d: rc %d, why %p", iter, rc,
                      (void *)why);
        free(why);
    }
    free(d);
    free(copy);
    free(ar);
    lc_checker_destroy(c);
}
END_TEST

static Suite *linkcheck_malformed_suite(void)
{
    Suite *s = suite_create("linkcheck_malformed");
    TCase *tc = tcase_create("malformed");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, base_program_is_clean);
    tcase_add_test(tc, every_truncation_is_refused);
    tcase_add_loop_test(tc, each_bogus_header_field_is_refused_by_name, 0,
                        (int)(sizeof(mutations) / sizeof(mutations[0])));
    tcase_add_test(tc, random_bytes_are_not_elf);
    tcase_add_test(tc, seeded_corruption_never_crashes);
    tcase_add_test(tc, extended_section_numbering_is_followed);
    tcase_add_test(tc, program_without_section_headers_is_still_checked);
    tcase_add_test(tc, archives_truncated_or_corrupted_never_crash_the_classifier);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(linkcheck_malformed_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
