/* Layer 4 of the CUDA boundary: stagingd's start-up check that no CUDA
 * library is mapped into the process (docs/boundary.md). */
#ifndef STAGINGD_SELFCHECK_H
#define STAGINGD_SELFCHECK_H

#include <stddef.h>

/* Judges every object in this process -- those dl_iterate_phdr() lists and
 * every file /proc/self/maps shows (dlmopen() and LD_AUDIT namespaces
 * included) -- by name, SONAME, real path, folder and the CUDA symbols it
 * defines or imports, and what LD_PRELOAD, LD_AUDIT and /etc/ld.so.preload
 * name, against the fixed forbidden stems and the CUDA toolkit and driver
 * libraries installed here.
 * Returns 0 when nothing is CUDA, -ENOTRECOVERABLE when something is, or
 * another negative errno when the check could not run (refuse then too).
 * Writes a one-line report naming the first offender and how it got in into
 * @report (always NUL-terminated when @report_len > 0). Allocates and frees
 * its own memory; reads the file system; not async-signal-safe. */
int sd_selfcheck_no_cuda(char *report, size_t report_len);

#endif /* STAGINGD_SELFCHECK_H */
