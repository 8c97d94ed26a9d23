/* struct ga_streams, shared by streams.c, events.c and doorbell.c. */
#ifndef GPU_STREAMS_INTERNAL_H
#define GPU_STREAMS_INTERNAL_H

#include <cuda.h>
#include <pthread.h>

#include "device_internal.h"
#include "exec_internal.h"

struct ga_streams {
    struct ga_device *dev;
    pthread_mutex_t lock; /* both tables */
    struct ga__idtab streams; /* obj: CUstream */
    struct ga__idtab events;  /* obj: CUevent; flags: GA_EVENT_TIMING */
    CUstream default_stream;
    struct ga_completer *completer;
    int memops; /* 64-bit stream wait/write supported */
};

/* Makes the primary context of @s's device current on this thread. */
int ga__streams_enter(struct ga_streams *s);

#endif /* GPU_STREAMS_INTERNAL_H */
