/* The pool's tie to the device: before every job the worker makes the one
 * retained primary context current (a thread-local store in the driver when
 * it already is), so CUDA calls can land on any worker. */
#include <errno.h>

#include "cu_call.h"
#include "device_internal.h"
#include "gpu/exec_cuda.h"

static int ga__pool_enter_device(void *ctx)
{
    struct ga_device *dev = ctx;
    return GA_CU(cuCtxSetCurrent(dev->ctx));
}

int ga_device_pool_create(struct ga_device *dev, const struct ga_pool_opts *opts,
                          struct ga_pool **pool_p)
{
    if (!dev) {
        ga__err("pool: expected an open device, found NULL");
        return -EINVAL;
    }
    return ga_pool_create(opts, ga__pool_enter_device, dev, pool_p);
}
