/* struct ga_streams, shared by streams.c, events.c and doorbell.c. */
#ifndef GPU_STREAMS_INTERNAL_H
#define GPU_STREAMS_INTERNAL_H

#include <stdint.h>

#include "device_internal.h"
#include "gpu/completer.h"
#include "gpu/exec_cuda.h"

struct ga_streams {
    struct ga_device *dev;
    struct ga_completer *completer;
    int memops;               /* 64-bit stream wait/write supported */
    uint64_t streams, events; /* made and not freed (atomic) */
};

/* Makes the primary context of @s's device current on this thread. */
int ga__streams_enter(struct ga_streams *s);

#endif /* GPU_STREAMS_INTERNAL_H */
