/* The fuzzing entry point, shared by the libFuzzer harness and the corpus
 * replay test. */
#ifndef LINKCHECK_FUZZ_ELF_H
#define LINKCHECK_FUZZ_ELF_H

#include <stddef.h>
#include <stdint.h>

/* Runs every rule of a fresh checker over @data[0..size) as an in-memory ELF
 * file, with no file system search for DT_NEEDED. Returns what
 * lc_checker_check_buffer() returned: findings >= 0 or a negative errno. */
int lc_fuzz_one(const uint8_t *data, size_t size);

/* libFuzzer's entry point; always returns 0. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif /* LINKCHECK_FUZZ_ELF_H */
