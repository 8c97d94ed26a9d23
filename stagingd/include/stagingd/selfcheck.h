/* Layer 4 of the CUDA boundary: stagingd's start-up check that no CUDA
 * library is mapped into the process (DESIGN.md, "The boundary"). */
#ifndef STAGINGD_SELFCHECK_H
#define STAGINGD_SELFCHECK_H

#include <stddef.h>

/* Walks every object loaded in this process (dl_iterate_phdr).
 * Returns 0 when none is a forbidden library, -ENOTRECOVERABLE when one is,
 * and writes a one-line report naming the first offender and its path into
 * @report (always NUL-terminated when @report_len > 0). */
int sd_selfcheck_no_cuda(char *report, size_t report_len);

#endif /* STAGINGD_SELFCHECK_H */
