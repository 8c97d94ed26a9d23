#!/usr/bin/env python3
"""h2d-shape: how fast pinned host-to-device copies run in the streaming
path's shape, without files, reads or doorbells (docs/streaming.md).

S CUDA streams each copy chunks of C bytes from their own ring of N pinned
slots (reused in turn, as a staging thread's ring is) to consecutive places
in device memory, all queued up front from this one thread while the GPU sleeps; the figure is
the bytes copied over the time between events recorded before the first
and after the last copy. Against it: the same bytes from one stream, and
from one large pinned buffer that is never reused (the "pinned H2D"
ceiling's shape). Every run's device bytes are checked against the source
(the last copy of each slot region is compared). Needs torch with CUDA.

  python3 bench/peers/h2d_shape.py [--gib 4] [--streams 1,2,4,8,16]
                                   [--chunks 1M,2M,4M] [--slots 4] [--repeat 3]
"""
import argparse
import sys

import torch

try:
    import cupy
except ImportError:  # the SM rows are left out
    cupy = None

# A copy by the SMs: each thread moves 16-byte words from mapped host
# memory to device memory (the copy engines are not used).
SM_COPY_SRC = r"""
extern "C" __global__ void sm_copy(const uint4 *__restrict__ src, uint4 *__restrict__ dst,
                                   unsigned long long n)
{
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (; i < n; i += step)
        dst[i] = src[i];
}
extern "C" __global__ void spin(long long cycles)
{
    long long t0 = clock64();
    while (clock64() - t0 < cycles)
        ;
}
"""


def run_sm(streams, chunk, slots, total, repeat, blocks):
    """The ring shape with the copies made by a kernel reading mapped host
    memory: median GB/s of `repeat` runs."""
    mod = cupy.RawModule(code=SM_COPY_SRC)
    k_copy, k_spin = mod.get_function("sm_copy"), mod.get_function("spin")
    per_stream = total // streams // chunk * chunk
    rt = cupy.cuda.runtime
    hosts = [rt.hostAlloc(slots * chunk, 2) for _ in range(streams)]  # cudaHostAllocMapped
    # With unified addressing (every 64-bit Linux system CUDA 13 runs on) a
    # mapped host allocation has the same address on the device.
    devs = list(hosts)
    for i, h in enumerate(hosts):
        ctypes_memset(h, (i * 7 + 3) % 251, slots * chunk)
    dst = cupy.empty(per_stream * streams, dtype=cupy.uint8)
    sts = [cupy.cuda.Stream(non_blocking=True) for _ in range(streams)]
    main = cupy.cuda.Stream(non_blocking=True)
    n16 = chunk // 16
    rates = []
    for _ in range(repeat):
        t0, t1 = cupy.cuda.Event(), cupy.cuda.Event()
        k_spin((1,), (1,), (cupy.int64(2_000_000_000),), stream=main)
        t0.record(main)
        for st in sts:
            st.wait_event(t0)
        for k in range(per_stream // chunk):
            for i, st in enumerate(sts):
                src = devs[i] + (k % slots) * chunk
                off = dst.data.ptr + i * per_stream + k * chunk
                k_copy((blocks,), (256,), (cupy.uint64(src), cupy.uint64(off), cupy.uint64(n16)),
                       stream=st)
        for st in sts:
            ev = cupy.cuda.Event()
            ev.record(st)
            main.wait_event(ev)
        t1.record(main)
        t1.synchronize()
        rates.append(per_stream * streams / (cupy.cuda.get_elapsed_time(t0, t1) / 1e3) / 1e9)
    for i in range(streams):
        want = (i * 7 + 3) % 251
        got = dst[(i + 1) * per_stream - chunk:(i + 1) * per_stream]
        if not bool((got == want).all()):
            raise SystemExit(f"h2d-shape: SM copy, stream {i}: device bytes differ from the source")
    for h in hosts:
        rt.freeHost(h)
    del dst
    rates.sort()
    return rates[len(rates) // 2]


def ctypes_memset(ptr, value, n):
    import ctypes
    ctypes.memset(ptr, value, n)


def size(s):
    m = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * m[s[-1]] if s[-1] in m else int(s)


def run(streams, chunk, slots, total, repeat):
    """Median GB/s of `repeat` runs of `total` bytes in the ring shape."""
    per_stream = total // streams // chunk * chunk
    srcs = [torch.empty(slots * chunk, dtype=torch.uint8).pin_memory() for _ in range(streams)]
    for i, s in enumerate(srcs):
        s.fill_((i * 7 + 3) % 251)
    dst = torch.empty(per_stream * streams, dtype=torch.uint8, device="cuda")
    sts = [torch.cuda.Stream() for _ in range(streams)]
    rates = []
    for _ in range(repeat):
        torch.cuda.synchronize()
        t0 = torch.cuda.Event(enable_timing=True)
        t1 = torch.cuda.Event(enable_timing=True)
        # The GPU sleeps while this thread queues every copy, so the timing
        # starts with all of them queued (Python issues slower than 1 MiB
        # copies run).
        torch.cuda._sleep(int(1e9))
        t0.record()
        for st in sts:
            st.wait_event(t0)
        n = per_stream // chunk
        for k in range(n):
            for i, st in enumerate(sts):
                slot = k % slots
                off = i * per_stream + k * chunk
                with torch.cuda.stream(st):
                    dst[off:off + chunk].copy_(srcs[i][slot * chunk:(slot + 1) * chunk],
                                               non_blocking=True)
        for st in sts:
            torch.cuda.current_stream().wait_stream(st)
        t1.record()
        t1.synchronize()
        rates.append(per_stream * streams / (t0.elapsed_time(t1) / 1e3) / 1e9)
    # check: the last chunk each stream wrote holds its slot's bytes
    for i in range(streams):
        want = (i * 7 + 3) % 251
        got = dst[(i + 1) * per_stream - chunk:(i + 1) * per_stream]
        if not bool((got == want).all()):
            raise SystemExit(f"h2d-shape: stream {i}: device bytes differ from the source")
    del dst, srcs
    torch.cuda.empty_cache()
    rates.sort()
    return rates[len(rates) // 2]


def big(total, repeat):
    """One pinned buffer of `total` bytes copied once per run: the ceiling."""
    src = torch.empty(total, dtype=torch.uint8).pin_memory()
    src.fill_(5)
    dst = torch.empty(total, dtype=torch.uint8, device="cuda")
    rates = []
    for _ in range(repeat):
        torch.cuda.synchronize()
        t0 = torch.cuda.Event(enable_timing=True)
        t1 = torch.cuda.Event(enable_timing=True)
        t0.record()
        dst.copy_(src, non_blocking=True)
        t1.record()
        t1.synchronize()
        rates.append(total / (t0.elapsed_time(t1) / 1e3) / 1e9)
    if not bool((dst[-4096:] == 5).all()):
        raise SystemExit("h2d-shape: the big copy's device bytes differ from the source")
    del src, dst
    torch.cuda.empty_cache()
    rates.sort()
    return rates[len(rates) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=float, default=4)
    ap.add_argument("--streams", default="1,2,4,8,16")
    ap.add_argument("--chunks", default="1M,2M,4M")
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sm-blocks", default="",
                    help="also copy with a kernel reading mapped host memory, these grid sizes (e.g. 16,64)")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("h2d-shape: no CUDA device", file=sys.stderr)
        return 77
    total = int(a.gib * (1 << 30))
    print(f"{'shape':<40} {'GB/s':>8}")
    print(f"{'one pinned buffer, one copy':<40} {big(total, a.repeat):8.2f}", flush=True)
    for c in a.chunks.split(","):
        for s in a.streams.split(","):
            label = f"{s} stream(s) x {a.slots} slots of {c}"
            print(f"{label:<40} {run(int(s), size(c), a.slots, total, a.repeat):8.2f}", flush=True)
            if not a.sm_blocks or cupy is None:
                continue
            for b in a.sm_blocks.split(","):
                lab = f"  SM copy, {b} blocks"
                print(f"{lab:<40} {run_sm(int(s), size(c), a.slots, total, a.repeat, int(b)):8.2f}",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
