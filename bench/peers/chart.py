#!/usr/bin/env python3
"""The peer benchmark's bar chart, drawn again from a results file copied
back from the device (bench/peers/README.md, "The chart").

  chart.py PEERS.json|RESULTS.jsonl [OUT.png] [--title TEXT]

PEERS.json is what scripts/device-peers.sh writes to $OUT (its "rows" and
"meta"); RESULTS.jsonl its result lines (peers.log ends with them). OUT.png
defaults to bench/peers/peers.png, the chart the README shows. Draws with
matplotlib when it imports, else gnuplot when it is on PATH, else says so
and exits 2 (the chart is opt-in: neither is a project dependency).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402  (the table's own chart code, one place)


def rows_of(path):
    """The rows of a peers.json, or of a results.jsonl (one JSON per line)."""
    with open(path) as f:
        text = f.read()
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("rows"), list):
        order = {g: i for i, g in enumerate(report.GROUP_ORDER)}
        rows = sorted(doc["rows"], key=lambda r: order.get(r.get("group"), len(order)))
        return rows, doc.get("meta") or {}
    return report.load(path), {}


def default_title(meta):
    if not meta:
        return "peers on the same page-cache-hot files"
    return "peers on the same page-cache-hot files: %s, %s; %s" % (
        meta.get("size", "?"), meta.get("store", "?"), meta.get("gpu", "?"))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("png", nargs="?", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers.png"))
    ap.add_argument("--title")
    a = ap.parse_args(argv)
    rows, meta = rows_of(a.results)
    if not rows:
        print("chart: %s holds no result rows" % a.results, file=sys.stderr)
        return 1
    ref = report.reference(rows)
    if not report.chart(rows, ref, a.png, a.title or default_title(meta)):
        return 2
    print("chart: %s (%d rows)" % (a.png, sum(1 for r in rows if r.get("ok"))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
