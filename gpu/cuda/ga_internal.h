/* gpu/ internals shared by its .c files and its tests. */
#ifndef GPU_GA_INTERNAL_H
#define GPU_GA_INTERNAL_H

#include <stddef.h>

#include "gpu/ga.h"

/* The oldest driver the agent accepts: the CUDA 13.0 driver API, shipped
 * with the r580 kernel module. */
#define GA_DRIVER_API_MIN 13000
#define GA_KMD_MAJOR_MIN 580
#define GA_KMD_VERSION_PATH "/proc/driver/nvidia/version"
#define GA_MAX_DEVICES 64

/* ---- log (log.c) ---- */
__attribute__((format(printf, 2, 3))) void ga__log(int level, const char *fmt, ...);
#define ga__err(...) ga__log(GA_LOG_ERROR, __VA_ARGS__)
#define ga__warn(...) ga__log(GA_LOG_WARN, __VA_ARGS__)
#define ga__info(...) ga__log(GA_LOG_INFO, __VA_ARGS__)

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
