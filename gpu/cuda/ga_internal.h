/* gpu/ internals shared by its .c files and its tests. */
#ifndef GPU_GA_INTERNAL_H
#define GPU_GA_INTERNAL_H

#include <stddef.h>

#include "base/log.h"
#include "gpu/ga.h"

/* The oldest driver the agent accepts: the CUDA 13.0 driver API, shipped
 * with the r580 kernel module. */
#define GA_DRIVER_API_MIN 13000
#define GA_KMD_MAJOR_MIN 580
#define GA_KMD_VERSION_PATH "/proc/driver/nvidia/version"
#define GA_MAX_DEVICES 64

/* ---- log lines: base_log as subsystem "cuda" (log.c) ---- */

/* The CUDA layer's sink: ga_device_opts.log of the device opened last, or
 * NULL (the process default). */
const struct base_log_sink *ga__log_sink(void);
void ga__log_sink_set(const struct base_log_sink *sink);

#define GA__SUBSYS "cuda"
#define ga__err(...) base_log(ga__log_sink(), BASE_LOG_ERROR, GA__SUBSYS, __VA_ARGS__)
#define ga__warn(...) base_log(ga__log_sink(), BASE_LOG_WARN, GA__SUBSYS, __VA_ARGS__)
#define ga__info(...) base_log(ga__log_sink(), BASE_LOG_INFO, GA__SUBSYS, __VA_ARGS__)
#define ga__debug(...) base_log(ga__log_sink(), BASE_LOG_DEBUG, GA__SUBSYS, __VA_ARGS__)

/* ---- the gate's words (gate_text.c; no driver calls) ---- */

/* Reads the kernel module's version from the text of
 * /proc/driver/nvidia/version ("NVRM version: ... Kernel Module  580.159.04 ...").
 * Returns 0 and writes both, or -EBADMSG when there is no version there. */
int ga__kmd_version_parse(const char *text, int *major_p, int *minor_p);

/* ga__kmd_version_parse on the file at @path. Returns 0, -errno of the read,
 * or -EBADMSG. */
int ga__kmd_version_read(const char *path, int *major_p, int *minor_p);

/* Writes the refusal for a device whose arch differs from @required: what
 * was found, what is required and how to build for this device. Returns
 * the length snprintf would have written. */
int ga__arch_refusal_format(char *buf, size_t len, const struct ga_device_info *info,
                            unsigned int required);

#endif /* GPU_GA_INTERNAL_H */
