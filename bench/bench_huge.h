/* What the machine offers in 2 MiB hugetlb pages, for the benchmarks that
 * measure on them where an admin reserved some (bench-only: the tests keep
 * their own helpers in tests/huge_pages.h). */
#ifndef BENCH_HUGE_H
#define BENCH_HUGE_H

#include <stdio.h>

#ifndef MFD_HUGE_2MB
#define MFD_HUGE_2MB (21U << 26) /* linux/memfd.h */
#endif

#define BENCH_HUGE_SYSFS "/sys/kernel/mm/hugepages/hugepages-2048kB"

/* One counter of the 2 MiB hugetlb pool; 0 when it cannot be read. */
static inline long bench_huge_counter(const char *name)
{
    char path[128];
    snprintf(path, sizeof(path), BENCH_HUGE_SYSFS "/%s", name);
    FILE *f = fopen(path, "r");
    long v = 0;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1)
            v = 0;
        fclose(f);
    }
    return v;
}

/* Available now: free, less those promised to existing mappings. */
static inline long bench_huge_pages_free(void)
{
    return bench_huge_counter("free_hugepages") - bench_huge_counter("resv_hugepages");
}

#endif /* BENCH_HUGE_H */
