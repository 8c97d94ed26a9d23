/* base: the counters of the 2 MiB hugetlb pool, as sysfs shows them.
 *
 * Under BASE_HUGE_SYSFS whatever the default huge page size: stagingd's
 * pool, leasectl doctor, the tests and the benchmarks read the same pool.
 *
 * Threads: reentrant; no state. */
#ifndef BASE_HUGEPAGES_H
#define BASE_HUGEPAGES_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BASE_HUGE_SYSFS "/sys/kernel/mm/hugepages/hugepages-2048kB"

/* Counter @name of the pool (nr_hugepages, free_hugepages, resv_hugepages,
 * nr_overcommit_hugepages, ...), or -1 when it cannot be read. */
static inline long base_hugepages_counter(const char *name)
{
    char path[128];
    snprintf(path, sizeof(path), BASE_HUGE_SYSFS "/%s", name);
    FILE *f = fopen(path, "re");
    long v = -1;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

#ifdef __cplusplus
}
#endif

#endif /* BASE_HUGEPAGES_H */
