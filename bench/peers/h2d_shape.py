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
    return 0


if __name__ == "__main__":
    sys.exit(main())
