/* What the machine offers in 2 MiB hugetlb pages, for tests that use them
 * where reserved (vm.nr_hugepages) and skip or narrow themselves elsewhere. */
#ifndef TESTS_HUGE_PAGES_H
#define TESTS_HUGE_PAGES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hugepages.h"

#ifndef HUGETLBFS_MAGIC
#define HUGETLBFS_MAGIC 0x958458f6 /* linux/magic.h */
#endif
#ifndef MFD_HUGE_2MB
#define MFD_HUGE_2MB (21U << 26) /* linux/memfd.h */
#endif

#define TEST_HUGE_SYSFS BASE_HUGE_SYSFS

/* One counter of the 2 MiB hugetlb pool, whatever the default huge page
 * size; 0 when it cannot be read. */
static inline long test_huge_counter(const char *name)
{
    long v = base_hugepages_counter(name);
    return v < 0 ? 0 : v;
}

/* Available now (free, less those promised to existing mappings): other
 * tests running at the same time may take or return some. */
static inline long test_huge_pages_free(void)
{
    return test_huge_counter("free_hugepages") - test_huge_counter("resv_hugepages");
}

/* Reserved in all: fixed while tests run. */
static inline long test_huge_pages_total(void)
{
    return test_huge_counter("nr_hugepages");
}

/* Surplus pages the kernel may add on demand beyond the reserved ones. */
static inline long test_huge_pages_overcommit(void)
{
    return test_huge_counter("nr_overcommit_hugepages");
}

/* Field @field (e.g. "Rss:") of this process's mapping that starts at
 * @start, in kB, as /proc/self/smaps shows it: 0 when the mapping lacks the
 * field, -1 when there is no such mapping. */
static inline long test_smaps_kb(const void *start, const char *field)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[512];
    size_t n = strlen(field);
    int inside = 0;
    long kb = -1;
    while (fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
            if (inside)
                break;
            inside = lo == (unsigned long)(uintptr_t)start;
            if (inside)
                kb = 0;
        } else if (inside && strncmp(line, field, n) == 0) {
            kb = strtol(line + n, NULL, 10);
            break;
        }
    }
    fclose(f);
    return kb;
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
    return strcmp(p, "advise") == 0 || strcmp(p, "always") == 0 || strcmp(p, "within_size") == 0 ||
           strcmp(p, "force") == 0;
}

#endif /* TESTS_HUGE_PAGES_H */
