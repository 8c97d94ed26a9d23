/* lease-agent's pieces (gpu/cuda/agent_main.c: options and the server;
 * agent_self_test.c: --self-test; agent_images.c: --cubin-dir). Private to
 * the program. */
#ifndef GPU_CUDA_AGENT_H
#define GPU_CUDA_AGENT_H

#include <stddef.h>
#include <stdint.h>

#include "base/log.h"
#include "gpu/ga.h"
#include "kernels/images.h"

#define AGENT_SUBSYS "agent"

/* What --self-test checks. */
struct agent_self_test_args {
    int device;
    size_t bytes;
    uint32_t block_size;
    uint64_t seed;
    const char *cubin_dir;
};

#define AGENT_DEFAULT_BYTES (256u << 20)
#define AGENT_DEFAULT_BLOCK (64u << 10)
#define AGENT_DEFAULT_SEED 0x6167656e74ULL /* never zero: xorshift would stick */

/* Runs the self-test; prints one result line on standard output. Returns
 * the exit status (0: everything matched). */
int agent_self_test(const struct agent_self_test_args *a);

/* The image table for ga_device_open: the embedded images, plus those of
 * --cubin-dir when given. */
struct agent_images {
    struct kn_image *extra;
    size_t extra_count;
    struct kn_image *table; /* embedded + extra; NULL: the embedded table alone */
};

/* Loads @dir's cubins (NULL: none), logs what was found, and points @opts
 * at the combined table. Returns 0 or a negative errno after logging why. */
int agent_images_prepare(const struct base_log_sink *log, const char *dir, struct agent_images *ai,
                         struct ga_device_opts *opts);

/* Call after ga_device_close: the device points into the table. */
void agent_images_release(struct agent_images *ai);

/* ga_cu_load with lease-agent's words on failure: "no NVIDIA driver:
 * <dlerror>; use lease-agent-host or --backend host" in @msg. Returns 0 or
 * a negative errno. */
int agent_driver_load(char *msg, size_t len);

#endif /* GPU_CUDA_AGENT_H */
