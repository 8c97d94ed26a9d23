/* What the machine offers in 2 MiB hugetlb pages, for tests that use them
 * where reserved (vm.nr_hugepages) and skip or narrow themselves elsewhere. */
#ifndef TESTS_HUGE_PAGES_H
#define TESTS_HUGE_PAGES_H

#include <stdio.h>

#ifndef HUGETLBFS_MAGIC
#define HUGETLBFS_MAGIC 0x958458f6 /* linux/magic.h */
#endif
#ifndef MFD_HUGE_2MB
#define MFD_HUGE_2MB (21U << 26) /* linux/memfd.h */
#endif

/* HugePages_Free from /proc/meminfo; 0 when it cannot be read. */
static inline long test_huge_pages_free(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    long v = 0;
    char line[256];
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "HugePages_Free: %ld", &v) == 1)
            break;
    if (f)
        fclose(f);
    return v;
}

#endif /* TESTS_HUGE_PAGES_H */
