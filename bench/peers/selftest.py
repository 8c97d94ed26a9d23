#!/usr/bin/env python3
"""Checks of the peer benchmark's Python that need no GPU and no numpy
(ctest peers_python): every file compiles; peerlib's checksum, store and
result logic (peerlib.selftest); ours_bench reads a real `stagingd job`
report; kvikio_bench finds its settings under both KvikIO spellings; the
bounce loop cuts files into the right pieces; report.py picks the reference,
computes ratios, shows failed and skipped rows and the verdicts; chart.py
reads both a results file and the device's peers.json."""
import io
import json
import os
import sys
import tempfile
from contextlib import redirect_stdout

sys.dont_write_bytecode = True  # nothing left in the source tree
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import peerlib  # noqa: E402

fails = []


def expect(cond, what):
    if not cond:
        fails.append(what)


def compile_all():
    for root, _, names in os.walk(here):
        for n in names:
            if n.endswith(".py"):
                path = os.path.join(root, n)
                try:
                    with open(path) as f:
                        compile(f.read(), path, "exec")  # what py_compile checks, writing nothing
                except SyntaxError as e:
                    fails.append("compile %s: %s" % (n, e))


JOB_REPORT = """job 1: scan of /dev/shm/peers-store: 128 shard(s), 8.0 GiB, doorbell on, inflight 4
top-10 by dot product (query seed 1; each shard's top-k, merged across shards)
  rank  shard              record       score
  #1    shard-000011.sds   1126         15.0392265
  #2    shard-000003.sds   602          14.9853067
summary
  shards         128 of 128 done: 128 clean, 0 with bad blocks, 0 failed, 0 not run
  bytes          8589934592 staged (8.0 GiB) of 8589934592
  staged         40.10 GB/s (0.214 s with reads in flight)
  end to end     35.60 GB/s (0.241 s from start to last result)
  leases         128 granted, 128 released, 0 lost with an agent, 0 refused; 40 request and 41 release batch(es)
"""


STREAM_REPORT = """job 1: verify of /dev/shm/peers-store: 128 shard(s), 8.0 GiB, doorbell on, inflight 4, path streaming, 16 ring(s) of 4 x 2097152 bytes
summary
  shards         128 of 128 done: 128 clean, 0 with bad blocks, 0 failed, 0 not run
  bytes          8589934592 staged (8.0 GiB) of 8589934592
  end to end     47.10 GB/s (0.182 s from start to last result)
  streaming      16 ring(s) of 4 x 2097152-byte slots, depth 2; 4224 chunk(s) stored (4224 copied by the agent); 10 slot wait(s), 2 sleep(s)
  messages       128 RING_SHARD for 128 task(s); 16 RING_OPEN, 16 RING_CLOSE, 16 lease request(s), 16 release(s); per chunk 0 messages, 0 lease calls (4224 chunks)
  registrations  0 during the job (the agent's, every class)
  gpu path       47.10 GB/s (0.182 s from start to the last GPU result)
  cpu check      20.00 GB/s (8589934592 bytes in 0.430 s, on its own threads)
  bad blocks     0
"""


def check_ours():
    import ours_bench

    s = ours_bench.parse_report(STREAM_REPORT)
    expect(s["path"] == "streaming" and s["inflight"] == 4 and s["doorbell"] == "on", "ours: a streaming head line")
    expect(s["gbps_gpu_path"] == 47.1 and s["gbps_cpu_check"] == 20.0, "ours: the GPU path and CPU check apart")
    expect(s["ring_shards"] == 128 and s["chunks"] == 4224 and s["per_chunk_messages"] == 0, "ours: the streaming counters")
    expect(s["registrations_during_job"] == 0, "ours: registrations during the job")

    r = ours_bench.parse_report(JOB_REPORT)
    expect(r["gbps_job"] == 35.6 and r["seconds_job"] == 0.241, "ours: the end-to-end line")
    expect(r["bytes"] == 8589934592 and r["shards"] == 128 and r["shards_clean"] == 128, "ours: bytes and shards")
    expect(r["topk"][0] == ["shard-000011.sds", 1126, "15.0392265"] and len(r["topk"]) == 2, "ours: the top-k rows")
    expect(r["op"] == "scan" and r["inflight"] == 4 and r["doorbell"] == "on", "ours: the job's head line")
    expect(r["bad_blocks"] is None, "ours: a scan has no bad-blocks line")
    expect(r["path"] == "whole" and r["gbps_gpu_path"] is None, "ours: an older report: whole shards")
    try:
        ours_bench.parse_report("job 1: nothing\n")
        fails.append("ours: a report without figures was accepted")
    except ValueError:
        pass
    expect(ours_bench.job_op(["--op", "scan"]) == "scan" and ours_bench.job_op(["--op=both"]) == "both", "ours: --op")
    expect(ours_bench.job_op([]) == "verify", "ours: stagingd's default op")
    a = ours_bench.parse(["--stagingd", "x", "--agent", "s", "--store", "d", "--id", "i", "--label", "l", "--", "--op", "scan"])
    expect(a.job_args == ["--op", "scan"], "ours: arguments after -- go to the job")
    expect(ours_bench.proc_cpu_seconds(os.getpid()) >= 0, "ours: /proc/PID/stat")


class _Defaults26:
    def __init__(self):
        self.v = {"num_threads": 1, "task_size": 4 << 20, "compat_mode": True}

    def get(self, k):
        return self.v[k]

    def set(self, cfg, value=None):
        self.v.update(cfg if isinstance(cfg, dict) else {cfg: value})


class _DefaultsOld:
    def __init__(self):
        self.n, self.t = 1, 4 << 20

    def get_num_threads(self):
        return self.n

    def task_size(self):
        return self.t

    def num_threads_reset(self, n):
        self.n = n

    def task_size_reset(self, t):
        self.t = t


def check_kvikio():
    import kvikio_bench

    class K:
        pass

    for d in (_Defaults26(), _DefaultsOld()):
        K.defaults = d
        kvikio_bench.kv_set(K, "num_threads", 16)
        kvikio_bench.kv_set(K, "task_size", 1 << 20)
        expect(kvikio_bench.kv_get(K, "num_threads") == 16, "kvikio: num_threads under %s" % type(d).__name__)
        expect(kvikio_bench.kv_get(K, "task_size") == 1 << 20, "kvikio: task_size under %s" % type(d).__name__)
    a = kvikio_bench.parse(["--store", "s", "--id", "i", "--label", "l", "--threads", "8", "--task-size", "16M"])
    expect(a.threads == 8 and a.task_size == 16 << 20 and a.mode == "all", "kvikio: arguments")
    saved = dict(os.environ)
    try:
        kvikio_bench.configure_env(a)
        expect(os.environ["KVIKIO_NTHREADS"] == "8" and os.environ["KVIKIO_TASK_SIZE"] == str(16 << 20), "kvikio: env")
        expect(os.environ["KVIKIO_COMPAT_MODE"] == "ON", "kvikio: compat mode forced on")
        kvikio_bench.configure_env(kvikio_bench.parse(["--store", "s", "--id", "i", "--label", "l"]))
        expect("KVIKIO_NTHREADS" not in os.environ and "KVIKIO_TASK_SIZE" not in os.environ, "kvikio: defaults are KvikIO's own")
    finally:
        os.environ.clear()
        os.environ.update(saved)


def check_torch():
    import torch_bench

    expect(torch_bench.pieces(10, 4) == [(0, 4), (4, 4), (8, 2)], "torch: pieces of a file")
    expect(torch_bench.pieces(8, 4) == [(0, 4), (4, 4)] and torch_bench.pieces(0, 4) == [], "torch: exact and empty")
    with tempfile.TemporaryFile() as f:
        f.write(b"abcdefgh")
        f.flush()
        buf = bytearray(5)
        expect(torch_bench.pread_full(f.fileno(), memoryview(buf), 2) == 5 and bytes(buf) == b"cdefg", "torch: pread_full")


def check_report():
    import report

    rows = [
        {"id": "k1", "label": "KvikIO a", "group": "kvikio", "ok": True, "gbps": 30.0, "gbps_median": 29.0, "cpu_s_per_gb": 0.3, "checked": "yes",
         "runs": [{"gbps": 28.0}, {"gbps": 30.0}]},
        {"id": "o1", "label": "ours scan", "group": "ours", "ok": True, "gbps": 35.6, "gbps_median": 35.0, "cpu_s_per_gb": 0.1, "checked": "top-k", "topk": [["a", 1, "2"]]},
        {"id": "o2", "label": "ours verify", "group": "ours", "ok": True, "gbps": 34.5, "gbps_median": 34.0, "cpu_s_per_gb": 0.1, "checked": "yes", "op": "verify"},
        {"id": "o3", "label": "ours stream", "group": "ours", "ok": False, "skipped": True, "error": "not built in this tree"},
        {"id": "c1", "label": "ceiling h2d", "group": "ceiling", "ok": True, "gbps": 55.2, "gbps_median": 55.1, "cpu_s_per_gb": 0.02, "checked": "yes"},
        {"id": "t1", "label": "torch x", "group": "torch", "ok": False, "error": "boom"},
    ]
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
        # second rounds: k1 slower (its first round's line stays, runs pooled), o2 failed
        f.write('{"id": "k1", "label": "KvikIO a", "group": "kvikio", "ok": true, "gbps": 27.0, "checked": "yes", "runs": [{"gbps": 27.0}, {"gbps": 26.0}]}\n')
        f.write('{"id": "o2", "label": "ours verify", "group": "ours", "ok": false, "error": "second round broke"}\n')
        path = f.name
    try:
        loaded = report.load(path)
        expect([r["group"] for r in loaded][:3] == ["ours"] * 3, "report: ours rows first")
        k1 = [r for r in loaded if r["id"] == "k1"][0]
        expect(k1["gbps"] == 30.0 and k1["rounds"] == 2, "report: two rounds of a path: the faster one's line")
        expect(len(k1["runs"]) == 4 and k1["gbps_median"] == 27.5, "report: two rounds: runs pooled, median over all")
        o2 = [r for r in loaded if r["id"] == "o2"][0]
        expect(o2["ok"] and o2["round_errors"] == ["second round broke"], "report: a failed round keeps the one that ran")
        expect(report.merge({"id": "x", "ok": False, "error": "a"}, {"id": "x", "ok": False, "error": "b"})["error"] == "b",
               "report: two failed rounds: the later")
        ref = report.reference(loaded)
        expect(ref["id"] == "o1", "report: the best ours row is the reference")
        text = "\n".join(report.table(loaded, ref, "t"))
        expect("SKIPPED" in text and "FAILED" in text and "boom" in text, "report: skipped and failed rows shown")
        expect("a round FAILED: second round broke" in text and "2 rounds" in text, "report: rounds shown")
        expect(" 1.55 " in text, "report: ratio of the ceiling to ours (55.2 / 35.6)")
        v, good = report.verdicts(loaded, ref)
        expect(any(x.startswith("ours (35.60 GB/s) is AHEAD of every KvikIO") for x in v), "report: ours ahead of KvikIO (30.0)")
        expect(v[0].startswith("ours verified (34.50 GB/s, ours verify) is AHEAD of every KvikIO"),
               "report: the best verify row's verdict comes first")
        expect(not good, "report: a failed row makes the run fail")
        marked = [dict(r) for r in loaded] + [
            {"id": report.MARK_KVIKIO, "label": "KvikIO 16x4", "group": "kvikio", "ok": True, "gbps": 23.0},
            {"id": report.MARK_H2D, "label": "h2d", "group": "ceiling", "ok": True, "gbps": 46.0},
            {"id": report.MARK_BOUNCE, "label": "bounce", "group": "torch", "ok": True, "gbps": 17.8}]
        v2, _ = report.verdicts(marked, report.reference(marked))
        expect(v2[1] == "ours verified (34.50 GB/s) is 1.50x KvikIO at 16 threads and 4 MiB tasks (23.00 GB/s), "
               "1.15x the best KvikIO (30.00 GB/s), 0.75x the pinned H2D ceiling (46.00 GB/s), "
               "the scan (35.60 GB/s) 2.00x PyTorch's bounce loop (17.80 GB/s)",
               "report: the goals' rows, second: %r" % (v2[1:2],))
        out = io.StringIO()
        with redirect_stdout(out):
            rc = report.main([path, "--out-json", path + ".json"])
        expect(rc == 1 and "x ours" in out.getvalue(), "report: main prints the table and fails on a failed row")
        with open(path + ".json") as f:
            expect(json.load(f)["reference"] == "o1", "report: the JSON names the reference")
        import chart

        for src in (path, path + ".json"):  # a results file or the device's peers.json
            crows, _ = chart.rows_of(src)
            expect([r["id"] for r in crows] == [r["id"] for r in loaded], "chart: reads %s" % os.path.basename(src))
            expect(report.reference(crows)["id"] == "o1", "chart: the same reference from %s" % os.path.basename(src))
        os.unlink(path + ".json")
    finally:
        os.unlink(path)


def main():
    compile_all()
    rc = peerlib.selftest()
    if rc:
        fails.append("peerlib.selftest")
    check_ours()
    check_kvikio()
    check_torch()
    check_report()
    for f in fails:
        print("FAIL:", f)
    print("bench/peers selftest: %d failed" % len(fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
