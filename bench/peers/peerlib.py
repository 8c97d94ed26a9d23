"""Shared pieces of the peer benchmark (bench/peers/README.md).

The store: the shard files listed in a stagingd store's MANIFEST, read whole.
The check: every path leaves each file's bytes in its own device buffer; a
position-sensitive checksum of that buffer, computed on the GPU, must equal
the checksum of the file computed once on the CPU (cached in peers-sums.txt
beside the store). The result: one JSON line per path, appended to a file
that report.py turns into the table and the chart.

Run as a program it offers the small jobs the driver script needs:
    peerlib.py sums STORE           compute or refresh the CPU checksums
    peerlib.py fail --json F --id ID --label L --group G --error TEXT
    peerlib.py selftest             the pure-Python checks (no numpy needed)
"""

import argparse
import json
import os
import resource
import struct
import sys
import time

# The checksum: the file padded with zeros to a multiple of 8 bytes, read as
# little-endian u64 words; s_j is the sum (mod 2^64) of the words of 64 KiB
# chunk j; the file's value is sum_j s_j * (2j + 1) mod 2^64. A plain sum
# would miss data landing in the wrong place, which is the likeliest bug of
# a chunked reader; weighting each chunk by its index catches that.
CHUNK_WORDS = 8192
MASK = (1 << 64) - 1
SUMS_NAME = "peers-sums.txt"
SUMS_HEADER = "peers-sums 1 chunk-words=%d" % CHUNK_WORDS
GB = 1e9


def pad8(n):
    return (n + 7) & ~7


# ---- the checksum: pure Python (the reference), any array module (numpy, cupy)


def chunk_sums_ref(data):
    """Per-chunk word sums of bytes `data`, as Python ints (the reference)."""
    data = bytes(data) + b"\0" * (pad8(len(data)) - len(data))
    nwords = len(data) // 8
    sums = []
    for start in range(0, nwords, CHUNK_WORDS):
        end = min(start + CHUNK_WORDS, nwords)
        words = struct.unpack_from("<%dQ" % (end - start), data, start * 8)
        sums.append(sum(words) & MASK)
    return sums


def combine(sums):
    """The file's checksum from its chunk sums (any iterable of ints)."""
    h = 0
    for j, s in enumerate(sums):
        h = (h + int(s) * (2 * j + 1)) & MASK
    return h


def checksum_ref(data):
    return combine(chunk_sums_ref(data))


def chunk_sums_xp(xp, buf_u8, nbytes):
    """Per-chunk sums of the first `nbytes` of the uint8 array `buf_u8`,
    computed by array module `xp` where the array lives (numpy on the CPU,
    cupy on the GPU). `buf_u8` must hold pad8(nbytes) bytes whose padding is
    zero. Returns an array of xp.uint64 (still on the device)."""
    n8 = pad8(nbytes)
    if buf_u8.size < n8:
        raise ValueError("buffer of %d bytes is shorter than %d" % (buf_u8.size, n8))
    words = buf_u8[:n8].view(xp.uint64)
    nwords = words.size
    full = nwords // CHUNK_WORDS
    parts = []
    if full:
        parts.append(words[: full * CHUNK_WORDS].reshape(full, CHUNK_WORDS).sum(axis=1, dtype=xp.uint64))
    if nwords % CHUNK_WORDS:
        parts.append(words[full * CHUNK_WORDS :].sum(dtype=xp.uint64).reshape(1))
    if not parts:
        return xp.zeros(0, dtype=xp.uint64)
    return parts[0] if len(parts) == 1 else xp.concatenate(parts)


def combine_host(sums_host):
    """combine() for a numpy uint64 array: the same value, vectorised."""
    import numpy as np

    sums_host = np.asarray(sums_host, dtype=np.uint64)
    weights = np.arange(sums_host.size, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    with np.errstate(over="ignore"):
        return int((sums_host * weights).sum(dtype=np.uint64))


# ---- the store


class Shard:
    __slots__ = ("name", "path", "size")

    def __init__(self, name, path, size):
        self.name, self.path, self.size = name, path, size


def parse_manifest(text):
    """Shard names in MANIFEST order; raises ValueError on a file that is not
    a stagingd store manifest (docs/shard-format.md)."""
    lines = text.split("\n")
    if not lines or lines[0] != "stagingd-store 1":
        raise ValueError("not a stagingd store MANIFEST (line 1 is %r)" % (lines[0] if lines else ""))
    names = []
    for no, line in enumerate(lines[1:], 2):
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        if len(fields) != 8:
            raise ValueError("MANIFEST:%d: expected 8 fields, found %d" % (no, len(fields)))
        name = fields[0]
        if "/" in name or name.startswith(".") or ".." in name:
            raise ValueError("MANIFEST:%d: bad shard name %r" % (no, name))
        names.append(name)
    if not names:
        raise ValueError("MANIFEST lists no shards")
    return names


def store_shards(store):
    with open(os.path.join(store, "MANIFEST")) as f:
        names = parse_manifest(f.read())
    return [Shard(n, os.path.join(store, n), os.path.getsize(os.path.join(store, n))) for n in names]


def parse_size(text):
    """'4M', '16MiB', '1G', '4096' -> bytes (powers of 1024, as stagingd)."""
    t = text.strip()
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    num = t.rstrip("KMGTiBb")
    suffix = t[len(num) :].upper().replace("IB", "").replace("B", "")
    if not num or suffix not in units:
        raise ValueError("bad size %r" % text)
    return int(num) * units[suffix]


def fmt_size(n):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return "%d %s" % (n // scale, unit)
    return "%d B" % n


# ---- the CPU checksums, cached beside the store


def sums_parse(text):
    """{name: (size, mtime_ns, checksum)} from a peers-sums.txt."""
    lines = text.split("\n")
    if not lines or lines[0] != SUMS_HEADER:
        return {}
    out = {}
    for line in lines[1:]:
        f = line.split()
        if len(f) == 4:
            out[f[0]] = (int(f[1]), int(f[2]), int(f[3], 16))
    return out


def sums_format(entries):
    lines = [SUMS_HEADER]
    for name, (size, mtime, h) in entries:
        lines.append("%s %d %d %016x" % (name, size, mtime, h))
    return "\n".join(lines) + "\n"


def file_checksum_np(path, size):
    import numpy as np

    buf = np.zeros(pad8(size), dtype=np.uint8)
    with open(path, "rb", buffering=0) as f:
        got = f.readinto(memoryview(buf)[:size])
        while got < size:
            more = f.readinto(memoryview(buf)[got:size])
            if not more:
                raise IOError("%s: short read (%d of %d bytes)" % (path, got, size))
            got += more
    return combine_host(chunk_sums_xp(np, buf, size))


def file_checksum_py(path, size):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) != size:
        raise IOError("%s: read %d bytes, expected %d" % (path, len(data), size))
    return checksum_ref(data)


def expected_sums(store, shards, log=None):
    """{name: checksum} for every shard, from the cache where its size and
    mtime still match, else computed (numpy, in threads) and cached."""
    path = os.path.join(store, SUMS_NAME)
    try:
        with open(path) as f:
            cached = sums_parse(f.read())
    except OSError:
        cached = {}
    todo, out, stat = [], {}, {}
    for s in shards:
        st = os.stat(s.path)
        stat[s.name] = (st.st_size, st.st_mtime_ns)
        c = cached.get(s.name)
        if c and c[0] == st.st_size and c[1] == st.st_mtime_ns:
            out[s.name] = c[2]
        else:
            todo.append(s)
    if todo:
        t0 = time.monotonic()
        try:
            import numpy  # noqa: F401

            fn = file_checksum_np
        except ImportError:
            fn = file_checksum_py
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 1)) as ex:
            for s, h in zip(todo, ex.map(lambda sh: fn(sh.path, sh.size), todo)):
                out[s.name] = h
        if log:
            log("checksums of %d file(s) computed on the CPU in %.1f s" % (len(todo), time.monotonic() - t0))
        entries = [(s.name, (stat[s.name][0], stat[s.name][1], out[s.name])) for s in shards]
        tmp = path + ".tmp"
        try:
            with open(tmp, "w") as f:
                f.write(sums_format(entries))
            os.replace(tmp, path)
        except OSError as e:
            if log:
                log("could not cache the checksums in %s: %s" % (path, e))
    return out


def check_buffers(xp, to_host, shards, bufs, expected):
    """Checks every file's device buffer; returns (ok, list of mismatch lines).
    `to_host` copies a small device array to a numpy array."""
    bad = []
    for s, b in zip(shards, bufs):
        got = combine_host(to_host(chunk_sums_xp(xp, b, s.size)))
        if got != expected[s.name]:
            bad.append("%s: checksum on the GPU %016x, of the file %016x" % (s.name, got, expected[s.name]))
    return not bad, bad


# ---- CPU time and results


def cpu_seconds():
    """User + system CPU seconds of this process, every thread, so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Run:
    """One timed repetition: wall seconds and CPU seconds over the same span."""

    def __init__(self):
        self.t0 = self.c0 = self.seconds = self.cpu = None

    def __enter__(self):
        self.c0 = cpu_seconds()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0
        self.cpu = cpu_seconds() - self.c0
        return False


def summarize(runs, nbytes):
    """The result fields from a list of (seconds, cpu_seconds): best run's
    rate and its CPU cost, the median rate, and every run."""
    rows = [{"s": round(s, 6), "gbps": round(nbytes / s / GB, 3) if s > 0 else 0.0, "cpu_s": round(c, 4)} for s, c in runs]
    if not rows:
        return {"runs": []}
    best = max(rows, key=lambda r: r["gbps"])
    rates = sorted(r["gbps"] for r in rows)
    mid = len(rates) // 2
    median = rates[mid] if len(rates) % 2 else (rates[mid - 1] + rates[mid]) / 2
    return {
        "runs": rows,
        "gbps": best["gbps"],
        "gbps_median": round(median, 3),
        "cpu_s_per_gb": round(best["cpu_s"] / (nbytes / GB), 4) if nbytes else None,
    }


def result_line(**fields):
    """One result as the JSON text the report reads (keys in a fixed order)."""
    base = {"id": None, "label": None, "group": None, "ok": False}
    base.update(fields)
    return json.dumps(base, sort_keys=False)


def emit(path, **fields):
    line = result_line(**fields)
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")
    print(line, flush=True)
    return line


def log_to_stderr(msg):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


# ---- self-test of the pure logic


def selftest():
    fails = []

    def expect(cond, what):
        if not cond:
            fails.append(what)

    # The reference on hand-made data.
    expect(chunk_sums_ref(b"") == [], "empty input has no chunks")
    expect(chunk_sums_ref(b"\x01") == [1], "one byte pads to one word")
    w = struct.pack("<2Q", MASK, 2)
    expect(chunk_sums_ref(w) == [1], "sums wrap mod 2^64")
    two = struct.pack("<%dQ" % (CHUNK_WORDS + 1), *([1] * CHUNK_WORDS + [5]))
    expect(chunk_sums_ref(two) == [CHUNK_WORDS, 5], "a second chunk starts after 8192 words")
    expect(combine([CHUNK_WORDS, 5]) == CHUNK_WORDS + 15, "chunk j weighs 2j+1")
    # Position sensitivity: the same chunks swapped give another value.
    a = struct.pack("<%dQ" % (2 * CHUNK_WORDS), *([1] * CHUNK_WORDS + [2] * CHUNK_WORDS))
    b = struct.pack("<%dQ" % (2 * CHUNK_WORDS), *([2] * CHUNK_WORDS + [1] * CHUNK_WORDS))
    expect(checksum_ref(a) != checksum_ref(b), "swapped chunks change the checksum")
    expect(checksum_ref(a) != checksum_ref(a[: len(a) - 8] + b"\0" * 8), "a zeroed word changes it")
    # Sizes and the manifest.
    expect(parse_size("4M") == 4 << 20 and parse_size("16MiB") == 16 << 20, "parse_size M/MiB")
    expect(parse_size("1G") == 1 << 30 and parse_size("4096") == 4096, "parse_size G and bytes")
    for bad in ("", "M", "4X", "1.5G"):
        try:
            parse_size(bad)
            fails.append("parse_size(%r) accepted" % bad)
        except ValueError:
            pass
    m = "stagingd-store 1\n# name type ...\nshard-000000.sds f32 128 8 262144 4096 1 0123456789abcdef\n"
    expect(parse_manifest(m) == ["shard-000000.sds"], "parse_manifest reads a shard line")
    for bad in ("nope\n", "stagingd-store 1\n", "stagingd-store 1\nx f32 1\n", "stagingd-store 1\n../x a b c d e f g\n"):
        try:
            parse_manifest(bad)
            fails.append("parse_manifest accepted %r" % bad)
        except ValueError:
            pass
    # The cache file round-trips; a wrong header gives nothing.
    entries = [("a.sds", (10, 20, 0xABC)), ("b.sds", (1, 2, MASK))]
    expect(sums_parse(sums_format(entries)) == dict(entries), "peers-sums.txt round-trips")
    expect(sums_parse("other 1\na 1 2 3\n") == {}, "a foreign sums file is ignored")
    # Results.
    s = summarize([(2.0, 1.0), (1.0, 0.5), (4.0, 1.0)], 4 * GB)
    expect(s["gbps"] == 4.0 and s["gbps_median"] == 2.0, "best and median rates")
    expect(s["cpu_s_per_gb"] == 0.125, "CPU per GB of the best run")
    line = json.loads(result_line(id="x", label="X", group="g", ok=True, gbps=1.0))
    expect(list(line)[:4] == ["id", "label", "group", "ok"], "result keys come in a fixed order")
    expect('"id": "x"' in result_line(id="x"), "the driver greps for '\"id\": \"ID\"'")
    # numpy, where present, agrees with the reference.
    try:
        import numpy as np
    except ImportError:
        np = None
    if np is not None:
        rng = np.random.default_rng(1)
        for n in (0, 7, 8, 65536, 65536 * 3 + 24, 200001):
            data = rng.integers(0, 256, size=n, dtype=np.uint8).tobytes()
            buf = np.zeros(pad8(n), dtype=np.uint8)
            buf[:n] = np.frombuffer(data, dtype=np.uint8)
            got = combine_host(chunk_sums_xp(np, buf, n))
            expect(got == checksum_ref(data), "numpy checksum == reference for %d bytes" % n)
    for f in fails:
        print("FAIL:", f)
    print("peerlib selftest: %d failed%s" % (len(fails), "" if np is not None else " (numpy absent: its checks skipped)"))
    return 1 if fails else 0


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("sums", help="compute or refresh the CPU checksums of a store")
    p.add_argument("store")
    p = sub.add_parser("fail", help="append a failed result line for a path that left none")
    for k in ("json", "id", "label", "group", "error"):
        p.add_argument("--" + k, required=True)
    sub.add_parser("selftest", help="the pure-Python checks")
    a = ap.parse_args(argv)
    if a.cmd == "sums":
        shards = store_shards(a.store)
        sums = expected_sums(a.store, shards, log=log_to_stderr)
        print("%d shard(s), %d bytes, checksums in %s" % (len(sums), sum(s.size for s in shards), os.path.join(a.store, SUMS_NAME)))
        return 0
    if a.cmd == "fail":
        emit(a.json, id=a.id, label=a.label, group=a.group, ok=False, error=a.error)
        return 0
    return selftest()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


# ---- what every Python peer shares: arguments, set-up, the check, the result


def add_common_args(ap):
    ap.add_argument("--store", required=True, help="stagingd store directory (its MANIFEST lists the files)")
    ap.add_argument("--json", help="append the result line to this file")
    ap.add_argument("--id", required=True, help="the path's id in the results")
    ap.add_argument("--label", required=True, help="the path's name in the table")
    ap.add_argument("--repeat", type=int, default=2, help="timed runs; the best is reported (2)")
    ap.add_argument("--dry-run", action="store_true", help="print what would run; import no GPU library")


def fail_exit(args, group, err, **extra):
    log_to_stderr("%s: FAILED: %s" % (args.label, err))
    emit(args.json, id=args.id, label=args.label, group=group, ok=False, error=str(err), **extra)
    return 1


def cupy_device_buffers(cupy, shards):
    """One zeroed device buffer per file, pad8(size) bytes: the padding stays
    zero so the checksum's last word is the file's tail padded with zeros."""
    bufs = []
    for s in shards:
        b = cupy.empty(pad8(s.size), dtype=cupy.uint8)
        b[...] = 0
        bufs.append(b)
    return bufs


def cupy_check(cupy, shards, bufs, expected):
    cupy.cuda.runtime.deviceSynchronize()
    if os.environ.get("PEERS_CORRUPT_TEST") == "1" and bufs:
        # the self-test's proof that the check can fail: spoil one byte
        k = len(bufs) // 2
        b = bufs[k]
        i = shards[k].size // 3
        b[i : i + 1] = b[i : i + 1] ^ 0x5A
        cupy.cuda.runtime.deviceSynchronize()
    return check_buffers(cupy, cupy.asnumpy, shards, bufs, expected)
