/* Doorbells: the GPU waits on a mapped host word (cuStreamWaitValue64) and
 * answers in another (cuStreamWriteValue64), so a CUDA-free process starts
 * queued work by storing a number and learns it finished by reading one. */
#include <errno.h>
#include <inttypes.h>

#include "cu_call.h"
#include "streams_internal.h"

int ga_doorbell_check(struct ga_device *dev)
{
    if (!dev)
        return -EINVAL;
    int mem64 = 0;
    int rc = GA_CU(cuDeviceGetAttribute(&mem64, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
                                        dev->cu_device));
    if (rc < 0)
        return rc;
    if (!mem64 || !dev->info.can_map_host_memory) {
        ga__err("doorbells need 64-bit stream memory operations and mapped host memory; device "
                "%d (%s) reports CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS=%d, "
                "CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY=%d; use the socket path",
                dev->info.ordinal, dev->info.name, mem64, dev->info.can_map_host_memory);
        return -ENOTSUP;
    }
    return 0;
}

/* A doorbell call's shared checks: memory operations and the word address. */
static int ga__doorbell_args(struct ga_streams *s, const char *what, uint64_t addr)
{
    if (!s->memops) {
        ga_doorbell_check(s->dev); /* logs what the device lacks */
        return -ENOTSUP;
    }
    if (addr == 0 || addr % 8 != 0) {
        ga__err("doorbell: expected the 8-byte aligned device address of the %s word, found "
                "%#" PRIx64,
                what, addr);
        return -EINVAL;
    }
    return 0;
}

int ga_doorbell_queue(struct ga_streams *s, struct CUstream_st *stream,
                      const struct ga_doorbell_req *req)
{
    if (!s || !stream || !req)
        return -EINVAL;
    int rc = ga__doorbell_args(s, "bell", req->bell_dev);
    if (rc == 0 && req->done_dev)
        rc = ga__doorbell_args(s, "completion", req->done_dev);
    if (rc < 0)
        return rc;
    CUstream st = stream;
    if ((rc = ga__streams_enter(s)) < 0)
        return rc;
    /* GEQ compares (int64_t)(*bell - seq) >= 0: sequence numbers may wrap. */
    rc = GA_CU(
        cuStreamWaitValue64(st, (CUdeviceptr)req->bell_dev, req->seq, CU_STREAM_WAIT_VALUE_GEQ));
    if (rc == 0 && req->work)
        rc = req->work(req->work_arg, st);
    /* The default write flushes the work's memory writes before the word. */
    if (rc == 0 && req->done_dev)
        rc = GA_CU(cuStreamWriteValue64(st, (CUdeviceptr)req->done_dev, req->seq,
                                        CU_STREAM_WRITE_VALUE_DEFAULT));
    return rc;
}

int ga_doorbell_signal(struct ga_streams *s, struct CUstream_st *stream, uint64_t done_dev,
                       uint64_t value)
{
    if (!s || !stream)
        return -EINVAL;
    int rc = ga__doorbell_args(s, "completion", done_dev);
    if (rc < 0)
        return rc;
    if ((rc = ga__streams_enter(s)) < 0)
        return rc;
    return GA_CU(
        cuStreamWriteValue64(stream, (CUdeviceptr)done_dev, value, CU_STREAM_WRITE_VALUE_DEFAULT));
}
