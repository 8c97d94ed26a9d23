/* liblease-client's own calls: its version and the CUDA boundary's start-up
 * check, which is stagingd's (stagingd/selfcheck.c, compiled into the
 * library as well) so every user of the library gets the same layer 4. */
#include <errno.h>

#include "lease/client.h"
#include "stagingd/selfcheck.h"

#ifndef LEASEC_VERSION_STRING
#error "LEASEC_VERSION_STRING comes from stagingd/lib/CMakeLists.txt (the project version)"
#endif

const char *leasec_version(void)
{
    return LEASEC_VERSION_STRING;
}

int leasec_selfcheck(char *report, size_t report_len)
{
    if (!report && report_len)
        return -EINVAL;
    return sd_selfcheck_no_cuda(report, report_len);
}
