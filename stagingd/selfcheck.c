#include "stagingd/selfcheck.h"

#include <errno.h>
#include <link.h>
#include <stdio.h>

#include "linkcheck/forbidden.h"

struct selfcheck_walk {
    char *report;
    size_t report_len;
    unsigned int objects;
    int found;
};

static int selfcheck_visit(struct dl_phdr_info *info, size_t size, void *arg)
{
    struct selfcheck_walk *walk = arg;
    (void)size;
    walk->objects++;
    if (!info->dlpi_name || !info->dlpi_name[0])
        return 0; /* the main program */
    const char *stem = lc_forbidden_stem_of(info->dlpi_name);
    if (!stem)
        return 0;
    walk->found = 1;
    if (walk->report_len)
        snprintf(walk->report, walk->report_len,
                 "CUDA library mapped into stagingd: %s (matches forbidden '%s*'); "
                 "stagingd must stay CUDA-free",
                 info->dlpi_name, stem);
    return 1; /* stop at the first offender */
}

int sd_selfcheck_no_cuda(char *report, size_t report_len)
{
    struct selfcheck_walk walk = {report, report_len, 0, 0};
    dl_iterate_phdr(selfcheck_visit, &walk);
    if (walk.found)
        return -ENOTRECOVERABLE;
    if (report_len)
        snprintf(report, report_len, "no CUDA library among %u loaded objects", walk.objects);
    return 0;
}
