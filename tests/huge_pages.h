/* What the machine offers in 2 MiB hugetlb pages, for tests that use them
 * where reserved (vm.nr_hugepages) and skip or narrow themselves elsewhere. */
#ifndef TESTS_HUGE_PAGES_H
#define TESTS_HUGE_PAGES_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef HUGETLBFS_MAGIC
#define HUGETLBFS_MAGIC 0x958458f6 /* linux/magic.h */
#endif
#ifndef MFD_HUGE_2MB
#define MFD_HUGE_2MB (21U << 26) /* linux/memfd.h */
#endif

/* The value of the /proc/meminfo line starting with @key (with its colon);
 * 0 when it cannot be read. */
static inline long test_meminfo_value(const char *key)
{
    FILE *f = fopen("/proc/meminfo", "r");
    long v = 0;
    char line[256];
    size_t n = strlen(key);
    while (f && fgets(line, sizeof(line), f)) {
        if (strncmp(line, key, n) == 0) {
            v = strtol(line + n, NULL, 10);
            break;
        }
    }
    if (f)
        fclose(f);
    return v;
}

/* Free now: other tests running at the same time may take or return some. */
static inline long test_huge_pages_free(void)
{
    return test_meminfo_value("HugePages_Free:");
}

/* Reserved in all: fixed while tests run. */
static inline long test_huge_pages_total(void)
{
    return test_meminfo_value("HugePages_Total:");
}

#endif /* TESTS_HUGE_PAGES_H */
