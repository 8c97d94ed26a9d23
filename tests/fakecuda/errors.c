/* fakecuda: the name and a one-line description of every CUresult that
 * cuda.h defines. Names come from the enum constants themselves. */
#include "fakecuda.h"

struct fk_error {
    CUresult rc;
    const char *name;
    const char *text;
};

#define FK_E(code, text) {code, #code, text}
static const struct fk_error fk_errors[] = {
    FK_E(CUDA_SUCCESS, "no error"),
    FK_E(CUDA_ERROR_INVALID_VALUE, "an argument is out of range"),
    FK_E(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
    FK_E(CUDA_ERROR_NOT_INITIALIZED, "the driver is not initialised (cuInit)"),
    FK_E(CUDA_ERROR_DEINITIALIZED, "the driver is shutting down"),
    FK_E(CUDA_ERROR_PROFILER_DISABLED, "profiler disabled"),
    FK_E(CUDA_ERROR_PROFILER_NOT_INITIALIZED, "profiler not initialized"),
    FK_E(CUDA_ERROR_PROFILER_ALREADY_STARTED, "profiler already started"),
    FK_E(CUDA_ERROR_PROFILER_ALREADY_STOPPED, "profiler already stopped"),
    FK_E(CUDA_ERROR_STUB_LIBRARY, "the stub library was loaded instead of a driver"),
    FK_E(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, "call requires newer driver"),
    FK_E(CUDA_ERROR_DEVICE_UNAVAILABLE, "device unavailable"),
    FK_E(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device"),
    FK_E(CUDA_ERROR_INVALID_DEVICE, "no such device ordinal"),
    FK_E(CUDA_ERROR_DEVICE_NOT_LICENSED, "device not licensed"),
    FK_E(CUDA_ERROR_INVALID_IMAGE, "the image is not a valid kernel image"),
    FK_E(CUDA_ERROR_INVALID_CONTEXT, "no current context, or an invalid one"),
    FK_E(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current"),
    FK_E(CUDA_ERROR_MAP_FAILED, "map failed"),
    FK_E(CUDA_ERROR_UNMAP_FAILED, "unmap failed"),
    FK_E(CUDA_ERROR_ARRAY_IS_MAPPED, "array is mapped"),
    FK_E(CUDA_ERROR_ALREADY_MAPPED, "already mapped"),
    FK_E(CUDA_ERROR_NO_BINARY_FOR_GPU, "the image has no code for this device"),
    FK_E(CUDA_ERROR_ALREADY_ACQUIRED, "already acquired"),
    FK_E(CUDA_ERROR_NOT_MAPPED, "not mapped"),
    FK_E(CUDA_ERROR_NOT_MAPPED_AS_ARRAY, "not mapped as array"),
    FK_E(CUDA_ERROR_NOT_MAPPED_AS_POINTER, "not mapped as pointer"),
    FK_E(CUDA_ERROR_ECC_UNCORRECTABLE, "ecc uncorrectable"),
    FK_E(CUDA_ERROR_UNSUPPORTED_LIMIT, "unsupported limit"),
    FK_E(CUDA_ERROR_CONTEXT_ALREADY_IN_USE, "context already in use"),
    FK_E(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "peer access unsupported"),
    FK_E(CUDA_ERROR_INVALID_PTX, "the PTX could not be compiled"),
    FK_E(CUDA_ERROR_INVALID_GRAPHICS_CONTEXT, "invalid graphics context"),
    FK_E(CUDA_ERROR_NVLINK_UNCORRECTABLE, "nvlink uncorrectable"),
    FK_E(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, "jit compiler not found"),
    FK_E(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "unsupported ptx version"),
    FK_E(CUDA_ERROR_JIT_COMPILATION_DISABLED, "PTX JIT compilation is disabled"),
    FK_E(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, "unsupported exec affinity"),
    FK_E(CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC, "unsupported devside sync"),
    FK_E(CUDA_ERROR_CONTAINED, "contained"),
    FK_E(CUDA_ERROR_INVALID_SOURCE, "invalid source"),
    FK_E(CUDA_ERROR_FILE_NOT_FOUND, "file not found"),
    FK_E(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, "shared object symbol not found"),
    FK_E(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, "shared object init failed"),
    FK_E(CUDA_ERROR_OPERATING_SYSTEM, "operating system"),
    FK_E(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
    FK_E(CUDA_ERROR_ILLEGAL_STATE, "illegal state"),
    FK_E(CUDA_ERROR_LOSSY_QUERY, "lossy query"),
    FK_E(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
    FK_E(CUDA_ERROR_NOT_READY, "the work has not completed yet"),
    FK_E(CUDA_ERROR_ILLEGAL_ADDRESS, "a kernel or copy touched memory it may not (illegal address)"),
    FK_E(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for the launch"),
    FK_E(CUDA_ERROR_LAUNCH_TIMEOUT, "launch timeout"),
    FK_E(CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING, "launch incompatible texturing"),
    FK_E(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access already enabled"),
    FK_E(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access not enabled"),
    FK_E(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "primary context active"),
    FK_E(CUDA_ERROR_CONTEXT_IS_DESTROYED, "the context was destroyed"),
    FK_E(CUDA_ERROR_ASSERT, "assert"),
    FK_E(CUDA_ERROR_TOO_MANY_PEERS, "too many peers"),
    FK_E(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "part of the range is already registered"),
    FK_E(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "the pointer was not registered"),
    FK_E(CUDA_ERROR_HARDWARE_STACK_ERROR, "hardware stack error"),
    FK_E(CUDA_ERROR_ILLEGAL_INSTRUCTION, "illegal instruction"),
    FK_E(CUDA_ERROR_MISALIGNED_ADDRESS, "a kernel made a misaligned access"),
    FK_E(CUDA_ERROR_INVALID_ADDRESS_SPACE, "invalid address space"),
    FK_E(CUDA_ERROR_INVALID_PC, "invalid pc"),
    FK_E(CUDA_ERROR_LAUNCH_FAILED, "the launch failed"),
    FK_E(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "cooperative launch too large"),
    FK_E(CUDA_ERROR_TENSOR_MEMORY_LEAK, "tensor memory leak"),
    FK_E(CUDA_ERROR_NOT_PERMITTED, "the operation is not permitted here"),
    FK_E(CUDA_ERROR_NOT_SUPPORTED, "the operation is not supported"),
    FK_E(CUDA_ERROR_SYSTEM_NOT_READY, "system not ready"),
    FK_E(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "system driver mismatch"),
    FK_E(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, "compat not supported on device"),
    FK_E(CUDA_ERROR_MPS_CONNECTION_FAILED, "mps connection failed"),
    FK_E(CUDA_ERROR_MPS_RPC_FAILURE, "mps rpc failure"),
    FK_E(CUDA_ERROR_MPS_SERVER_NOT_READY, "mps server not ready"),
    FK_E(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED, "mps max clients reached"),
    FK_E(CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED, "mps max connections reached"),
    FK_E(CUDA_ERROR_MPS_CLIENT_TERMINATED, "mps client terminated"),
    FK_E(CUDA_ERROR_CDP_NOT_SUPPORTED, "cdp not supported"),
    FK_E(CUDA_ERROR_CDP_VERSION_MISMATCH, "cdp version mismatch"),
    FK_E(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "stream capture unsupported"),
    FK_E(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "stream capture invalidated"),
    FK_E(CUDA_ERROR_STREAM_CAPTURE_MERGE, "stream capture merge"),
    FK_E(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "stream capture unmatched"),
    FK_E(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "stream capture unjoined"),
    FK_E(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "stream capture isolation"),
    FK_E(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "stream capture implicit"),
    FK_E(CUDA_ERROR_CAPTURED_EVENT, "captured event"),
    FK_E(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "stream capture wrong thread"),
    FK_E(CUDA_ERROR_TIMEOUT, "the wait timed out"),
    FK_E(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, "graph exec update failure"),
    FK_E(CUDA_ERROR_EXTERNAL_DEVICE, "external device"),
    FK_E(CUDA_ERROR_INVALID_CLUSTER_SIZE, "invalid cluster size"),
    FK_E(CUDA_ERROR_FUNCTION_NOT_LOADED, "function not loaded"),
    FK_E(CUDA_ERROR_INVALID_RESOURCE_TYPE, "invalid resource type"),
    FK_E(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, "invalid resource configuration"),
    FK_E(CUDA_ERROR_KEY_ROTATION, "key rotation"),
    FK_E(CUDA_ERROR_UNKNOWN, "unknown error"),
};

static const struct fk_error *fk_error_find(CUresult rc)
{
    for (size_t i = 0; i < sizeof(fk_errors) / sizeof(fk_errors[0]); i++)
        if (fk_errors[i].rc == rc)
            return &fk_errors[i];
    return NULL;
}

const char *fk__error_name(CUresult rc)
{
    const struct fk_error *e = fk_error_find(rc);
    return e ? e->name : NULL;
}

CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    const struct fk_error *e = fk_error_find(error);
    *pStr = e ? e->text : NULL;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
