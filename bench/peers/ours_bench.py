#!/usr/bin/env python3
"""The project's own path on the store: `stagingd job` against a running
lease-agent, timed and costed like the peers (bench/peers/README.md).

The rate is the job's own "end to end" figure (first shard started to last
result, the window every shard's bytes crossed); the rate over the whole
process (start-up, opening the store, the pool, registering it) is kept too.
CPU time is the job process's (wait4) plus the agent's over the same span
(/proc/PID/stat), both whole.

  ours_bench.py --stagingd BIN --agent SOCK --agent-pid PID --store DIR
                --id ID --label L [--repeat 2] [--json FILE] [--log FILE] -- JOB_ARGS...
"""
import argparse
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peerlib  # noqa: E402

GROUP = "ours"


def parse(argv):
    if "--" in argv:
        i = argv.index("--")
        argv, job_args = argv[:i], argv[i + 1 :]
    else:
        job_args = []
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    peerlib.add_common_args(ap)
    ap.add_argument("--stagingd", required=True)
    ap.add_argument("--agent", required=True, help="the agent's socket")
    ap.add_argument("--agent-pid", type=int, help="the agent's pid, for its CPU time")
    ap.add_argument("--log", help="append each job's output here")
    a = ap.parse_args(argv)
    a.job_args = job_args
    return a


def proc_cpu_seconds(pid):
    """utime + stime of a process from /proc/PID/stat (fields 14 and 15)."""
    if not pid:
        return 0.0
    with open("/proc/%d/stat" % pid) as f:
        text = f.read()
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_E2E = re.compile(r"^\s*end to end\s+([0-9.]+) GB/s \(([0-9.]+) s ", re.M)
_BYTES = re.compile(r"^\s*bytes\s+(\d+) staged", re.M)
_SHARDS = re.compile(r"^\s*shards\s+(\d+) of (\d+) done: (\d+) clean, (\d+) with bad blocks, (\d+) failed, (\d+) not run", re.M)
_BAD = re.compile(r"^\s*bad blocks\s+(\d+)", re.M)
_TOPK = re.compile(r"^\s*#(\d+)\s+(\S+)\s+(\d+)\s+(\S+)\s*$", re.M)
_HEAD = re.compile(r"^job \d+: (\S+) of .*doorbell (\S+), inflight (\d+)", re.M)
_PATH = re.compile(r"^job \d+: .*, path ([a-z]+)", re.M)
_GPU = re.compile(r"^\s*gpu path\s+([0-9.]+) GB/s", re.M)
_CPU = re.compile(r"^\s*cpu check\s+([0-9.]+) GB/s", re.M)
_MSGS = re.compile(r"^\s*messages\s+(\d+) RING_SHARD for (\d+) task\(s\).*per chunk 0 messages, 0 lease calls \((\d+) chunks\)", re.M)
_REGS = re.compile(r"^\s*registrations\s+(\d+) during the job", re.M)


def parse_report(text):
    """The figures of a `stagingd job` report (stagingd/job.c); raises
    ValueError when a line the benchmark needs is missing."""
    out = {}
    m = _E2E.search(text)
    if not m:
        raise ValueError("no 'end to end' line in the job's report")
    out["gbps_job"], out["seconds_job"] = float(m.group(1)), float(m.group(2))
    m = _BYTES.search(text)
    if not m:
        raise ValueError("no 'bytes' line in the job's report")
    out["bytes"] = int(m.group(1))
    m = _SHARDS.search(text)
    if not m:
        raise ValueError("no 'shards' line in the job's report")
    done, total, clean, bad, failed, skipped = (int(x) for x in m.groups())
    out.update(shards=total, shards_clean=clean, shards_bad=bad, shards_failed=failed, shards_not_run=skipped)
    m = _BAD.search(text)
    out["bad_blocks"] = int(m.group(1)) if m else None
    out["topk"] = [[mm.group(2), int(mm.group(3)), mm.group(4)] for mm in _TOPK.finditer(text)]
    m = _HEAD.search(text)
    if m:
        out.update(op=m.group(1), doorbell=m.group(2), inflight=int(m.group(3)))
    # The streaming path's own lines (docs/streaming.md): what crossed the
    # socket per chunk (nothing), registrations during the job, and the GPU
    # path's and the CPU check's figures apart.
    m = _PATH.search(text)
    out["path"] = m.group(1) if m else "whole"
    m = _GPU.search(text)
    out["gbps_gpu_path"] = float(m.group(1)) if m else None
    m = _CPU.search(text)
    out["gbps_cpu_check"] = float(m.group(1)) if m else None
    m = _MSGS.search(text)
    if m:
        out.update(ring_shards=int(m.group(1)), tasks=int(m.group(2)), chunks=int(m.group(3)), per_chunk_messages=0)
    m = _REGS.search(text)
    out["registrations_during_job"] = int(m.group(1)) if m else None
    return out


def job_op(job_args):
    for i, a in enumerate(job_args):
        if a == "--op" and i + 1 < len(job_args):
            return job_args[i + 1]
        if a.startswith("--op="):
            return a[5:]
    return "verify"  # stagingd's default


def run_job(args):
    cmd = [args.stagingd, "job", "--store", args.store, "--agent", args.agent] + args.job_args
    agent0 = proc_cpu_seconds(args.agent_pid)
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = p.stdout.read().decode("utf-8", "replace")
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    agent_cpu = proc_cpu_seconds(args.agent_pid) - agent0
    if args.log:
        with open(args.log, "a") as f:
            f.write("$ %s\n%s\n(exit %d, %.3f s)\n" % (" ".join(cmd), out, p.returncode, wall))
    return p.returncode, out, wall, ru.ru_utime + ru.ru_stime, agent_cpu


def main(argv):
    args = parse(argv)
    op = job_op(args.job_args)
    if args.dry_run:
        print("dry run: %s: %s job --store %s --agent %s %s, %d run(s)" % (args.label, args.stagingd, args.store, args.agent, " ".join(args.job_args), args.repeat))
        return 0
    runs, rows = [], []
    try:
        for i in range(args.repeat):
            rc, out, wall, job_cpu, agent_cpu = run_job(args)
            if rc != 0:
                tail = " | ".join(out.strip().splitlines()[-3:])
                return peerlib.fail_exit(args, GROUP, "stagingd job exited %d: %s" % (rc, tail), checked="NO" if rc == 3 else None)
            rep = parse_report(out)
            if rep["shards_clean"] != rep["shards"]:
                return peerlib.fail_exit(args, GROUP, "%d of %d shards clean" % (rep["shards_clean"], rep["shards"]), checked="NO")
            rep.update(wall=wall, job_cpu=job_cpu, agent_cpu=agent_cpu)
            rows.append(rep)
            # The job's own window, and the CPU of both processes, whole.
            runs.append((rep["seconds_job"], job_cpu + agent_cpu))
            peerlib.log_to_stderr("%s: run %d: %.2f GB/s end to end (%.3f s; process %.3f s), CPU job %.2f s + agent %.2f s"
                                  % (args.label, i + 1, rep["gbps_job"], rep["seconds_job"], wall, job_cpu, agent_cpu))
    except Exception as e:  # noqa: BLE001 - any failure is this path's result
        return peerlib.fail_exit(args, GROUP, "%s: %s" % (type(e).__name__, e))
    nbytes = rows[0]["bytes"]
    summary = peerlib.summarize(runs, nbytes)
    best = rows[max(range(len(runs)), key=lambda k: summary["runs"][k]["gbps"])]
    if op in ("verify", "both"):
        checked, check = "yes", "the GPU verified every block's checksum against the shard's table (%d bad)" % (best["bad_blocks"] or 0)
    else:
        checked, check = "top-k", "the job checks each shard's hits and merges the top-k; report.py compares the top-k of every scan row"
    topks = [r["topk"] for r in rows]
    if any(t != topks[0] for t in topks):
        checked, check = "NO", "the top-k differed between runs"
    peerlib.emit(
        args.json, id=args.id, label=args.label, group=GROUP, ok=checked != "NO", bytes=nbytes, files=best["shards"],
        checked=checked, check=check, op=op, topk=best["topk"],
        gbps_process=round(nbytes / best["wall"] / peerlib.GB, 3),
        cpu={"job_s": round(best["job_cpu"], 3), "agent_s": round(best["agent_cpu"], 3)},
        settings={"job_args": args.job_args, "doorbell": best.get("doorbell"), "inflight": best.get("inflight"),
                  "path": best.get("path")},
        stream={k: best.get(k) for k in ("gbps_gpu_path", "gbps_cpu_check", "ring_shards", "tasks", "chunks",
                                         "per_chunk_messages", "registrations_during_job") if best.get(k) is not None},
        **summary)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
