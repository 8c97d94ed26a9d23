/* What every fuzz target of tests/fuzz/ defines, so one replay test
 * (test_fuzz_replay.c) and libFuzzer's driver can run each of them. Each
 * target is one .c file: built with -fsanitize=fuzzer it is the fuzzer;
 * built plainly with test_fuzz_replay.c it is the replay test of its kept
 * corpus (tests/fuzz/corpus/<name>/) and the writer of its seeds. */
#ifndef TESTS_FUZZ_H
#define TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* The target's name: its corpus folder and its binary's suffix. */
extern const char fz_name[];

/* Runs one input. Returns 0 when the input was taken through, 1 when it was
 * refused (a clean error); it aborts on any broken promise, which is what
 * libFuzzer and the replay test report. */
int fz_one(const uint8_t *data, size_t size);

/* Writes the target's seeds (valid inputs built by the code under test's
 * own writers) into @dir as seed-<name> files. Returns how many, or -errno. */
int fz_seeds(const char *dir);

/* Writes @size bytes to @dir/@name. Returns 0 or -errno. */
int fz_write_file(const char *dir, const char *name, const void *data, size_t size);

/* Reports a broken promise on standard error and aborts. */
void fz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif /* TESTS_FUZZ_H */
