/* The CUDA layer's log sink: one per process, as the device is (every line
 * goes through base_log, subsystem "cuda"). */
#include "ga_internal.h"

static _Atomic(const struct base_log_sink *) ga__sink;

const struct base_log_sink *ga__log_sink(void)
{
    return ga__sink;
}

void ga__log_sink_set(const struct base_log_sink *sink)
{
    ga__sink = sink;
}
