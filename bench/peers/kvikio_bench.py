#!/usr/bin/env python3
"""KvikIO (compat mode: POSIX reads into pinned bounce buffers, then copies)
reading every file of a store into its own device buffer, one configuration
per process. `--mode all` issues every file's pread before waiting on any;
`--mode file` reads one file after another. The time runs from the first
open to the last completion; every buffer is then checked on the GPU
against the files' CPU checksums (peerlib.py). bench/peers/README.md.

  kvikio_bench.py --store DIR --id ID --label L [--threads N] [--task-size 4M]
                  [--mode all|file] [--repeat 2] [--json FILE] [--dry-run]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peerlib  # noqa: E402

GROUP = "kvikio"


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    peerlib.add_common_args(ap)
    ap.add_argument("--threads", type=int, help="num_threads (default: KvikIO's own)")
    ap.add_argument("--task-size", type=peerlib.parse_size, help="task_size, e.g. 4M (default: KvikIO's own)")
    ap.add_argument("--mode", choices=("all", "file"), default="all", help="all files at once, or file by file")
    return ap.parse_args(argv)


def configure_env(args):
    """Settings go in through the environment before the import (every
    KvikIO version reads these) and again through the API after it."""
    os.environ["KVIKIO_COMPAT_MODE"] = "ON"
    for key, value in (("KVIKIO_NTHREADS", args.threads), ("KVIKIO_TASK_SIZE", args.task_size)):
        if value:
            os.environ[key] = str(value)
        else:
            os.environ.pop(key, None)  # KvikIO's own default, whatever the caller's environment says


def kv_get(kvikio, key):
    d = kvikio.defaults
    if hasattr(d, "get"):
        try:
            return d.get(key)
        except (KeyError, TypeError, ValueError):
            pass
    old = {"num_threads": ("get_num_threads", "num_threads"), "task_size": ("task_size",), "compat_mode": ("compat_mode",)}
    for name in old.get(key, ()):
        fn = getattr(d, name, None)
        if callable(fn):
            return fn()
    return None


def kv_set(kvikio, key, value):
    d = kvikio.defaults
    if hasattr(d, "set"):
        try:
            d.set({key: value})
            return
        except TypeError:
            d.set(key, value)
            return
    fn = getattr(d, key + "_reset", None)
    if fn is None:
        raise RuntimeError("this KvikIO has neither defaults.set nor defaults.%s_reset" % key)
    fn(value)


def read_all(kvikio, shards, bufs, task_size):
    kw = {"task_size": task_size} if task_size else {}
    files = [kvikio.CuFile(s.path, "r") for s in shards]
    try:
        futs = [f.pread(b, s.size, 0, **kw) for f, b, s in zip(files, bufs, shards)]
        return sum(fut.get() for fut in futs)
    finally:
        for f in files:
            f.close()


def read_file_by_file(kvikio, shards, bufs, task_size):
    kw = {"task_size": task_size} if task_size else {}
    got = 0
    for s, b in zip(shards, bufs):
        with kvikio.CuFile(s.path, "r") as f:
            got += f.pread(b, s.size, 0, **kw).get()
    return got


def main(argv):
    args = parse(argv)
    shards = peerlib.store_shards(args.store)
    total = sum(s.size for s in shards)
    settings = {"threads": args.threads or "default", "task_size": args.task_size or "default", "mode": args.mode}
    if args.dry_run:
        print("dry run: %s: %d files, %d bytes, %s, %d run(s)" % (args.label, len(shards), total, settings, args.repeat))
        return 0
    configure_env(args)
    try:
        import cupy
        import kvikio
        import kvikio.defaults  # noqa: F401
    except ImportError as e:
        return fail_missing(args, e)
    try:
        if args.threads and kv_get(kvikio, "num_threads") != args.threads:
            kv_set(kvikio, "num_threads", args.threads)
        if args.task_size and kv_get(kvikio, "task_size") != args.task_size:
            kv_set(kvikio, "task_size", args.task_size)
        seen = {k: str(kv_get(kvikio, k)) for k in ("compat_mode", "num_threads", "task_size")}
        peerlib.log_to_stderr("%s: KvikIO %s says %s" % (args.label, getattr(kvikio, "__version__", "?"), seen))
        if args.threads and seen["num_threads"] != str(args.threads):
            raise RuntimeError("asked for %d threads, KvikIO has %s" % (args.threads, seen["num_threads"]))
        expected = peerlib.expected_sums(args.store, shards, log=peerlib.log_to_stderr)
        bufs = peerlib.cupy_device_buffers(cupy, shards)
        cupy.cuda.runtime.deviceSynchronize()
        read = read_all if args.mode == "all" else read_file_by_file
        runs = []
        for i in range(args.repeat):
            for b in bufs:
                b[...] = 0  # a stale buffer must not pass the check
            cupy.cuda.runtime.deviceSynchronize()
            with peerlib.Run() as r:
                got = read(kvikio, shards, bufs, args.task_size)
                cupy.cuda.runtime.deviceSynchronize()
            if got != total:
                raise RuntimeError("run %d read %d bytes of %d" % (i + 1, got, total))
            ok, bad = peerlib.cupy_check(cupy, shards, bufs, expected)
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
        checked="yes", check="chunk checksums of every device buffer on the GPU, each run, against the files",
        settings=dict(settings, seen=seen, version=str(getattr(kvikio, "__version__", "?")), fake=bool(getattr(kvikio, "FAKE", False))),
        **peerlib.summarize(runs, total))
    return 0


def fail_missing(args, e):
    return peerlib.fail_exit(args, GROUP, "cannot import cupy/kvikio (%s): were the wheels installed (.whl, PYTHONPATH)?" % e)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
