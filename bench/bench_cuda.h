/* The GPU benchmarks' first steps: --help (answered before anything needs
 * a GPU), then the driver, through the agent's lazily loaded table
 * (gpu/cu.h). Without a driver a benchmark says so and exits 1 instead of
 * the loader refusing to start it. */
#ifndef BENCH_CUDA_H
#define BENCH_CUDA_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/cu.h"

/* 1 when an argument is --help or -h. */
static inline int bench_help_wanted(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return 1;
    return 0;
}

static inline void bench_cuda_require(const char *prog)
{
    char why[512];
    if (ga_cu_load(why, sizeof why) < 0) {
        fprintf(stderr,
                "%s: no NVIDIA driver: %s; this benchmark needs a GPU (lease-bench measures the "
                "agent without one, against lease-agent-host)\n",
                prog, why);
        exit(1);
    }
}

/* Runs a driver call; on failure the project's ga_cu_check logs the call,
 * the CUresult's name and where, and the benchmark exits 1 with @prog's
 * name: a benchmark's figure is worthless after a failed call. */
#define BENCH_CK(prog, call)                                                                       \
    do {                                                                                           \
        if (ga_cu_check((call), #call, __FILE__, __LINE__) < 0) {                                  \
            fprintf(stderr, "%s: %s failed (see the line above)\n", (prog), #call);               \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#endif /* BENCH_CUDA_H */
