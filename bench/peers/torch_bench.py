#!/usr/bin/env python3
"""What PyTorch users write to get files onto the GPU, on every file of a
store, one path per process (bench/peers/README.md):

  --path bounce     N threads, each with two pinned bounce buffers and its
                    own stream: read a piece into one buffer while the other
                    one's copy to the GPU runs (an expert's hand-written loop)
  --path from_file  per file: torch.from_file(...).pin_memory().cuda(non_blocking=True)

Each file lands in its own device tensor; after every timed run the tensors
are checked on the GPU (through cupy, zero-copy over DLPack) against the
files' CPU checksums (peerlib.py).

  torch_bench.py --store DIR --id ID --label L --path bounce|from_file
                 [--threads 16] [--bounce 64M] [--repeat 2] [--json FILE] [--dry-run]
"""
import argparse
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peerlib  # noqa: E402

GROUP = "torch"


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    peerlib.add_common_args(ap)
    ap.add_argument("--path", choices=("bounce", "from_file"), required=True)
    ap.add_argument("--threads", type=int, default=16, help="bounce: reader threads (16)")
    ap.add_argument("--bounce", type=peerlib.parse_size, default=64 << 20, help="bounce: each of a thread's two buffers (64M)")
    return ap.parse_args(argv)


def pieces(size, piece):
    """(offset, length) of the pieces a file of `size` bytes is read in."""
    return [(off, min(piece, size - off)) for off in range(0, size, piece)]


def pread_full(fd, view, offset):
    done = 0
    while done < len(view):
        got = os.preadv(fd, [view[done:]], offset + done)
        if got <= 0:
            raise IOError("short read at offset %d" % (offset + done))
        done += got
    return done


class Bouncer:
    """One reader thread's state: two pinned buffers, their numpy views,
    one stream, and the event of each buffer's last copy."""

    def __init__(self, torch, piece):
        self.bufs = [torch.empty(piece, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
        self.views = [memoryview(b.numpy()) for b in self.bufs]
        self.stream = torch.cuda.Stream()
        self.events = [torch.cuda.Event(), torch.cuda.Event()]
        self.pending = [False, False]
        self.k = 0


def bounce_worker(torch, me, shards, dsts, next_file, lock, errors, counts):
    try:
        got = 0
        while True:
            with lock:
                i = next_file[0]
                next_file[0] += 1
            if i >= len(shards):
                break
            s, dst = shards[i], dsts[i]
            fd = os.open(s.path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                for off, n in pieces(s.size, len(me.views[0])):
                    b = me.k % 2
                    me.k += 1
                    if me.pending[b]:
                        me.events[b].synchronize()  # this buffer's last copy is done
                    got += pread_full(fd, me.views[b][:n], off)
                    with torch.cuda.stream(me.stream):
                        dst[off : off + n].copy_(me.bufs[b][:n], non_blocking=True)
                        me.events[b].record(me.stream)
                    me.pending[b] = True
            finally:
                os.close(fd)
        me.stream.synchronize()
        counts.append(got)
    except Exception as e:  # noqa: BLE001 - reported by the main thread
        errors.append("%s: %s" % (type(e).__name__, e))


def run_bounce(torch, shards, dsts, bouncers):
    next_file, lock, errors, counts = [0], threading.Lock(), [], []
    threads = [threading.Thread(target=bounce_worker, args=(torch, me, shards, dsts, next_file, lock, errors, counts)) for me in bouncers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.cuda.synchronize()
    if errors:
        raise RuntimeError(errors[0])
    return sum(counts)


def run_from_file(torch, shards):
    outs = []
    for s in shards:
        outs.append(torch.from_file(s.path, shared=False, size=s.size, dtype=torch.uint8).pin_memory().cuda(non_blocking=True))
    torch.cuda.synchronize()
    return outs


def main(argv):
    args = parse(argv)
    shards = peerlib.store_shards(args.store)
    total = sum(s.size for s in shards)
    settings = {"path": args.path}
    if args.path == "bounce":
        settings.update(threads=args.threads, bounce=args.bounce)
    if args.dry_run:
        print("dry run: %s: %d files, %d bytes, %s, %d run(s)" % (args.label, len(shards), total, settings, args.repeat))
        return 0
    try:
        import cupy
        import torch
    except ImportError as e:
        return peerlib.fail_exit(args, GROUP, "cannot import torch/cupy: %s" % e)
    try:
        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no GPU")
        settings.update(torch=str(torch.__version__), fake=bool(getattr(torch, "FAKE", False)))
        expected = peerlib.expected_sums(args.store, shards, log=peerlib.log_to_stderr)
        dsts, bouncers = None, None
        if args.path == "bounce":
            dsts = [torch.empty(peerlib.pad8(s.size), dtype=torch.uint8, device="cuda") for s in shards]
            bouncers = [Bouncer(torch, args.bounce) for _ in range(args.threads)]
        runs = []
        for i in range(args.repeat):
            if dsts is not None:
                for d in dsts:
                    d.zero_()  # a stale buffer must not pass the check; the padding stays zero
            outs = None
            torch.cuda.synchronize()
            with peerlib.Run() as r:
                if args.path == "bounce":
                    got = run_bounce(torch, shards, dsts, bouncers)
                else:
                    outs = run_from_file(torch, shards)
                    got = sum(o.numel() for o in outs)
            if got != total:
                raise RuntimeError("run %d moved %d bytes of %d" % (i + 1, got, total))
            bufs = dsts if outs is None else [padded(torch, o, s.size) for o, s in zip(outs, shards)]
            ok, bad = peerlib.cupy_check(cupy, shards, [cupy.from_dlpack(b) for b in bufs], expected)
            del outs, bufs
            if not ok:
                for line in bad[:8]:
                    peerlib.log_to_stderr("MISMATCH " + line)
                return peerlib.fail_exit(args, GROUP, "bytes on the GPU differ from the files in run %d: %s" % (i + 1, bad[0]), checked="MISMATCH")
            runs.append((r.seconds, r.cpu))
            peerlib.log_to_stderr("%s: run %d: %.3f s, %.2f GB/s, %.2f CPU-s" % (args.label, i + 1, r.seconds, total / r.seconds / peerlib.GB, r.cpu))
    except Exception as e:  # noqa: BLE001 - any failure is this path's result
        return peerlib.fail_exit(args, GROUP, "%s: %s" % (type(e).__name__, e))
    peerlib.emit(
        args.json, id=args.id, label=args.label, group=GROUP, ok=True, bytes=total, files=len(shards),
        checked="yes", check="chunk checksums of every device tensor on the GPU, each run, against the files",
        settings=settings, **peerlib.summarize(runs, total))
    return 0


def padded(torch, t, size):
    """A tensor of pad8(size) bytes for the check: `t` itself when the size
    is already a multiple of 8 (every stagingd shard's is)."""
    if peerlib.pad8(size) == size:
        return t
    p = torch.empty(peerlib.pad8(size), dtype=torch.uint8, device="cuda")
    p.zero_()
    p[:size].copy_(t)
    return p


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
