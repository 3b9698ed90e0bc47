#!/usr/bin/env python3
"""Compares two runs of run-gpu-suite.sh (tools/gpu-before-after.sh).

    compare-gpu-logs.py BEFORE_DIR AFTER_DIR [--noise 0.05]

For every case of the GPU suite (gpu-suite.jsonl) and the adversarial
suite (adversarial.jsonl): the status before and after, and when both are
OK the median time and the speedup with their change. A changed status is
a changed verdict (exit 1); a time that moved by more than --noise
(relative) is marked for a look, since one run's noise on a shared GPU can
exceed it. timing_agree.py's and the bench's logs are printed side by side
by line.
"""
import argparse
import json
import os
import sys


def load(path):
    cases = {}
    if not os.path.exists(path):
        return None
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        try:
            row = json.loads(line)
        except ValueError:
            continue
        name = row.get("case", "?")
        if row.get("compile_only"):
            name += " (compile-only)"
        cases[name] = row.get("result", {})
    return cases


def figure(res, key):
    t = res.get("timing") or {}
    if key == "median_ms":
        return t.get("median_ms") or t.get("medianMs")
    return res.get(key)


def compare(title, before, after, noise):
    changed = 0
    print("== %s" % title)
    if before is None or after is None:
        print("   (missing: %s)" % ("before" if before is None else "after"))
        return 0
    for name in sorted(set(before) | set(after)):
        b, a = before.get(name), after.get(name)
        if b is None or a is None:
            print("   %-40s only %s" % (name, "after" if b is None else "before"))
            changed += 1
            continue
        sb, sa = b.get("status", "?"), a.get("status", "?")
        mark = ""
        extra = ""
        if sb != sa:
            mark = "  <-- VERDICT CHANGED"
            changed += 1
        elif sb == "OK":
            mb, ma = figure(b, "median_ms"), figure(a, "median_ms")
            if mb and ma:
                d = ma / mb - 1
                extra = "  %.4f -> %.4f ms (%+.1f %%)" % (mb, ma, 100 * d)
                if abs(d) > noise:
                    mark = "  <-- look"
            xb, xa = figure(b, "speedup"), figure(a, "speedup")
            if xb and xa:
                extra += ", %.2fx -> %.2fx" % (xb, xa)
        print("   %-40s %-14s %-14s%s%s" % (name, sb, sa, extra, mark))
    return changed


def side_by_side(title, pb, pa):
    print("== %s" % title)
    lb = open(pb).read().splitlines() if os.path.exists(pb) else ["(missing)"]
    la = open(pa).read().splitlines() if os.path.exists(pa) else ["(missing)"]
    for i in range(max(len(lb), len(la))):
        x = lb[i] if i < len(lb) else ""
        y = la[i] if i < len(la) else ""
        print("   before: %s" % x)
        if y != x:
            print("   after:  %s" % y)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--noise", type=float, default=0.05)
    o = ap.parse_args()
    changed = 0
    for title, f in (("GPU suite", "gpu-suite.jsonl"),
                     ("adversarial suite", "adversarial.jsonl")):
        changed += compare(title, load(os.path.join(o.before, f)),
                           load(os.path.join(o.after, f)), o.noise)
    for title, f in (("timing_agree.py", "timing-agree.log"),
                     ("kclaw-sandbox-bench", "bench.log")):
        side_by_side(title, os.path.join(o.before, f), os.path.join(o.after, f))
    print("%d verdict(s) changed" % changed)
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
