/* libFuzzer harness: bytes in, every rule run, nothing searched on disk. */
#include "fuzz_elf.h"

#include <string.h>

#include "linkcheck/linkcheck.h"

/* Touches every byte of each line, so a report built from a bad read shows
 * up under ASan, and nothing is printed. */
static void fuzz_sink(void *arg, enum lc_severity severity, const char *line)
{
    size_t *total = arg;
    *total += strlen(line) + (size_t)severity;
}

int lc_fuzz_one(const uint8_t *data, size_t size)
{
    struct lc_checker *checker = NULL;
    int rc = lc_checker_create(&checker);
    if (rc < 0)
        return rc;
    size_t total = 0;
    lc_checker_set_reporter(checker, fuzz_sink, &total);
    lc_checker_set_flags(checker, LC_FLAG_NO_SEARCH | LC_FLAG_VERBOSE);
    /* An extra stem, so the added-stem path is exercised too. */
    rc = lc_checker_forbid(checker, "libfuzzstem");
    if (rc == 0)
        rc = lc_checker_check_buffer(checker, "fuzz/input.so", data, size);
    lc_checker_destroy(checker);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    (void)lc_fuzz_one(data, size);
    return 0;
}
