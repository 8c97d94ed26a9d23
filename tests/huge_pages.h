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

/* The bracketed word of the shmem THP policy ("never" when unreadable). */
static inline void test_shmem_thp_policy(char *buf, size_t len)
{
    snprintf(buf, len, "never");
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "r");
    char line[160];
    if (f && fgets(line, sizeof(line), f)) {
        char *open = strchr(line, '['), *close = open ? strchr(open, ']') : NULL;
        if (open && close)
            snprintf(buf, len, "%.*s", (int)(close - open - 1), open + 1);
    }
    if (f)
        fclose(f);
}

/* Whether MADV_HUGEPAGE gets 2 MiB shmem folios under that policy. */
static inline int test_shmem_thp_allowed(void)
{
    char p[32];
    test_shmem_thp_policy(p, sizeof(p));
    return strcmp(p, "advise") == 0 || strcmp(p, "always") == 0 ||
           strcmp(p, "within_size") == 0 || strcmp(p, "force") == 0;
}

#endif /* TESTS_HUGE_PAGES_H */
