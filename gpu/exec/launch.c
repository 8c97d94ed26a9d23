/* The executor front's part of LAUNCH (docs/launch.md): the per-client
 * limits, checked with the numbers in the refusal. The kernel, its
 * descriptor and the launch's shape against it are the backend's
 * (work_check); the rest of a launch is a submit like any other
 * (front.c), record_allocation included. */
#include <inttypes.h>

#include "front.h"

#define GA_EXEC_LAUNCHES_DEFAULT 64u
#define GA_EXEC_LAUNCH_SHARED_DEFAULT (48u << 10)
#define GA_EXEC_LAUNCH_THREADS_DEFAULT (1ull << 30)

void ga_exec__launch_limits_init(struct ga_exec_launch_limits *l)
{
    if (!l->max_inflight)
        l->max_inflight = GA_EXEC_LAUNCHES_DEFAULT;
    if (!l->max_shared)
        l->max_shared = GA_EXEC_LAUNCH_SHARED_DEFAULT;
    if (!l->max_threads)
        l->max_threads = GA_EXEC_LAUNCH_THREADS_DEFAULT;
    if (!l->max_arg_bytes || l->max_arg_bytes > LT_LAUNCH_ARGS_MAX)
        l->max_arg_bytes = LT_LAUNCH_ARGS_MAX;
}

int ga_exec__launch_check(const struct ga_executor *ex, const struct ga_exec_work *w,
                          struct lt_failure *why)
{
    const struct ga_exec_launch *l = w->launch;
    const struct ga_exec_launch_limits *lim = &ex->launch;
    uint64_t blocks = 0, per_block = (uint64_t)l->block[0] * l->block[1] * l->block[2], threads;
    /* three u32 dimensions can pass 2^64: saturate instead */
    if (__builtin_mul_overflow((uint64_t)l->grid[0] * l->grid[1], (uint64_t)l->grid[2], &blocks))
        blocks = UINT64_MAX;
    if (__builtin_mul_overflow(blocks, per_block, &threads))
        threads = UINT64_MAX;
    if (threads > lim->max_threads)
        return ga_exec__refuse(why, LT_E_LIMIT,
                               "launch of %s: %" PRIu64 " blocks of %" PRIu64
                               " threads, over the client limit of %" PRIu64 " threads",
                               l->kernel, blocks, per_block, lim->max_threads);
    if (l->shared_bytes > lim->max_shared)
        return ga_exec__refuse(why, LT_E_LIMIT,
                               "launch of %s: %" PRIu32 " bytes of shared memory, over the "
                               "client limit of %" PRIu32,
                               l->kernel, l->shared_bytes, lim->max_shared);
    if (l->arg_bytes > lim->max_arg_bytes)
        return ga_exec__refuse(why, LT_E_LIMIT,
                               "launch of %s: a %" PRIu32 "-byte argument block, over the client "
                               "limit of %" PRIu32,
                               l->kernel, l->arg_bytes, lim->max_arg_bytes);
    return 0;
}

int ga_exec__launch_admit(struct ga_executor *ex, struct ga_exec_owner *o, struct lt_failure *why)
{
    if (o->launches >= ex->launch.max_inflight)
        return ga_exec__refuse(why, LT_E_LIMIT,
                               "%" PRIu32 " launches of this client in flight, the limit",
                               o->launches);
    o->launches++;
    return 0;
}
