#!/usr/bin/env python3
"""Prints the README's table of a KernelBench sweep: per level, from the
JSON lines kb-ref-check.py wrote (one file per level or all in one).

    kb-sweep-table.py level1.jsonl level2.jsonl level3.jsonl
"""
import json
import statistics
import sys


def main(paths):
    by = {}
    for p in paths:
        for line in open(p):
            r = json.loads(line)
            by.setdefault(r.get("level", 0), []).append(r)
    print("| level | problems | converted and evaluated | import s (median / max) "
          "| reference-only evaluation s (median / max) | peak GPU memory / data (median / max) "
          "| largest peak GB | degenerate | most tensors |")
    print("|---|---|---|---|---|---|---|---|---|")
    for lvl in sorted(by):
        rs = by[lvl]
        ok = [r for r in rs if r.get("status") == "ok"]
        if not ok:
            print("| %s | %d | 0 | | | | | | |" % (lvl, len(rs)))
            continue
        conv = [r.get("convert_s", 0) for r in ok]
        wall = [r.get("wall_s", 0) for r in ok]
        ratio = [r["peak_bytes"] / max(1, r["input_bytes"] + r["output_bytes"] + r["parameter_bytes"])
                 for r in ok]
        print("| %s | %d | %d | %.2f / %.2f | %.2f / %.2f | %.1f / %.1f | %.1f | %d | %d |" % (
            lvl, len(rs), len(ok), statistics.median(conv), max(conv), statistics.median(wall),
            max(wall), statistics.median(ratio), max(ratio), max(r["peak_bytes"] for r in ok) / 1e9,
            sum(1 for r in ok if r.get("degenerate")), max(r.get("n_tensors", 0) for r in ok)))


if __name__ == "__main__":
    main(sys.argv[1:])
