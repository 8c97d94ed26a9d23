// Kernels a client LAUNCHes in the tests (docs/launch.md), built outside
// kernels/ as launch_kernels.cubin and loaded by lease-agent --cubin-dir
// with launch_kernels.kdesc beside it. Each is emulated bit for bit in
// tests/fakecuda/kernels.c. The first two are safe for any grid and block
// (a grid-stride loop over every thread of any shape) and touch only what
// the descriptor gives them; k_launch_fault is not, on purpose: it writes
// wherever the client says, so a test can make the GPU fault.

// This thread's index and the thread count, over any grid and block shape.
static __device__ __forceinline__ void kl_thread(unsigned long long *tid_p,
                                                 unsigned long long *stride_p)
{
    const unsigned long long tpb = (unsigned long long)blockDim.x * blockDim.y * blockDim.z;
    const unsigned long long block =
        blockIdx.x + (unsigned long long)gridDim.x * (blockIdx.y + (unsigned long long)gridDim.y *
                                                                        blockIdx.z);
    *tid_p = block * tpb + threadIdx.x + (unsigned long long)blockDim.x *
                                             (threadIdx.y + (unsigned long long)blockDim.y *
                                                                threadIdx.z);
    *stride_p = tpb * gridDim.x * gridDim.y * gridDim.z;
}

// out[0] += the wrapping sum of every u32 word of the range times scale;
// out[1] += the number of words, when the result area holds them.
extern "C" __global__ void k_launch_sum_u32(const unsigned *data, unsigned long long bytes,
                                            unsigned scale, unsigned long long *out,
                                            unsigned long long out_len)
{
    unsigned long long tid, stride;
    kl_thread(&tid, &stride);
    const unsigned long long words = bytes / 4;
    unsigned long long sum = 0, count = 0;
    for (unsigned long long i = tid; i < words; i += stride) {
        sum += (unsigned long long)data[i] * scale;
        count++;
    }
    if (count == 0)
        return;
    if (out_len >= 8)
        atomicAdd(&out[0], sum);
    if (out_len >= 16)
        atomicAdd(&out[1], count);
}

// data[i] = a mix of i and seed, for every u32 word of the range.
extern "C" __global__ void k_launch_fill(unsigned *data, unsigned long long bytes, unsigned seed)
{
    unsigned long long tid, stride;
    kl_thread(&tid, &stride);
    for (unsigned long long i = tid; i < bytes / 4; i += stride) {
        unsigned v = (unsigned)i * 0x9e3779b1u ^ seed;
        v ^= v >> 15;
        v *= 0x2c1b3c6du;
        v ^= v >> 12;
        data[i] = v;
    }
}

// Thread 0 stores a word at the address the client gave: out of every lease
// (a test passes an address nothing is mapped at), so the GPU faults.
extern "C" __global__ void k_launch_fault(unsigned *data, unsigned long long bytes,
                                          unsigned long long where)
{
    (void)data;
    (void)bytes;
    unsigned long long tid, stride;
    kl_thread(&tid, &stride);
    if (tid == 0)
        *(volatile unsigned *)where = 0xfa17u;
}
