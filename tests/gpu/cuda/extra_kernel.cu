// A tiny kernel built outside kernels/ and loaded by lease-agent --cubin-dir
// in the tests: each out[i] becomes a value only a run of this kernel writes.
extern "C" __global__ void k_extra_fill(unsigned *out, unsigned n)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = (i * 2654435761u) ^ 0x9e3779b9u;
}
