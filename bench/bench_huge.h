/* What the machine offers in 2 MiB hugetlb pages, for the benchmarks that
 * measure on them where an admin reserved some (bench-only: the tests keep
 * their own helpers in tests/huge_pages.h). */
#ifndef BENCH_HUGE_H
#define BENCH_HUGE_H

#include <stdio.h>

#include "base/hugepages.h"

#ifndef MFD_HUGE_2MB
#define MFD_HUGE_2MB (21U << 26) /* linux/memfd.h */
#endif

#define BENCH_HUGE_SYSFS BASE_HUGE_SYSFS

/* One counter of the 2 MiB hugetlb pool; 0 when it cannot be read. */
static inline long bench_huge_counter(const char *name)
{
    long v = base_hugepages_counter(name);
    return v < 0 ? 0 : v;
}

/* Available now: free, less those promised to existing mappings. */
static inline long bench_huge_pages_free(void)
{
    return bench_huge_counter("free_hugepages") - bench_huge_counter("resv_hugepages");
}

#endif /* BENCH_HUGE_H */
