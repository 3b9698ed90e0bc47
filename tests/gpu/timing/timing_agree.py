#!/usr/bin/env python3
"""Does kclaw's reported kernel time agree with an independent measurement?

For every shipped example's candidates, `kclaw eval --profile --json` gives
both the timed runs' median (CUDA events around the plan's launches, L2
flushed before each, docs/plan.md "Timing") and the CUPTI activity records
of five more runs prepared the same way: `profile.cupti_span_ms`, the
median over those runs of each run's span by the profiler's clock (first
kernel start to last kernel end). Prints both, their difference, and the
kernels' summed busy time of one run (a multi-kernel plan's gaps between
its kernels are in the span and in the events, not in the busy time);
exits 1 when a plan of at least 10 us differs by more than the limit
(default 2 %).

    KCLAW=bin/kclaw python3 timing_agree.py [EXAMPLES_DIR] [--limit PCT]

GPU only (the H200 run in the README); CI has no GPU.
"""
import json
import os
import subprocess
import sys
import tempfile


def main(argv):
    kclaw = os.environ.get("KCLAW", "build/bin/kclaw")
    limit = 2.0
    args = list(argv)
    if "--limit" in args:
        i = args.index("--limit")
        limit = float(args[i + 1])
        del args[i:i + 2]
    root = args[0] if args else "examples"
    home = tempfile.mkdtemp(prefix="kclaw-agree-")
    bad = 0
    print("%-18s %-5s %11s %11s %7s" % ("task", "cand", "events ms", "CUPTI ms", "diff"))
    for task in sorted(os.listdir(root)):
        cdir = os.path.join(root, task, "candidates")
        if not os.path.isdir(cdir):
            continue
        for cand in sorted(os.listdir(cdir)):
            out = subprocess.run([kclaw, "eval", "--json", "--profile", "--home", home,
                                  os.path.join(root, task), os.path.join(cdir, cand)],
                                 capture_output=True, text=True)
            try:
                r = json.loads(out.stdout)
            except ValueError:
                print("%-18s %-5s no result: %s" % (task, cand, out.stderr.strip()[-200:]))
                bad = 1
                continue
            if (r.get("status") or "").lower() != "ok":
                print("%-18s %-5s %s: %s" % (task, cand, r.get("status"), r.get("message") or ""))
                bad = 1
                continue
            ev = (r.get("timing") or {}).get("median_ms") or 0.0
            acts = r.get("activities") or []
            # The median over the profiled runs of each run's span by
            # CUPTI's clock (first kernel start to last kernel end);
            # an older sandbox: the last run's kernels' durations summed.
            metrics = {m.get("name"): m.get("value") for m in r.get("metrics") or []}
            span = metrics.get("profile.cupti_span_ms")
            # The events' floor (an empty held run) and holds that gave up
            # waiting for the host (eval.c ev_hold): shown, not applied.
            extra = ""
            if metrics.get("sandbox.event_floor_ms"):
                extra += ", event floor %.4f ms" % metrics["sandbox.event_floor_ms"]
            if metrics.get("sandbox.candidate_hold_expired"):
                extra += ", %d holds expired" % metrics["sandbox.candidate_hold_expired"]
            busy = sum(a.get("duration_us") or 0.0 for a in acts) / 1000.0
            cupti = span if span else busy
            if ev <= 0 or cupti <= 0:
                print("%-18s %-5s events %.4f ms, no CUPTI records" % (task, cand, ev))
                bad = 1
                continue
            diff = 100.0 * (ev - cupti) / cupti
            note = ""
            if abs(diff) > limit:
                if cupti >= 0.010:
                    bad = 1
                    note = "  OVER %.0f %%" % limit
                else:
                    note = "  (under 10 us: launch latency)"
            print("%-18s %-5s %11.4f %11.4f %+6.2f%%%s (%d kernels, %.4f ms of them busy in one run%s)"
                  % (task, cand, ev, cupti, diff, note, len(acts), busy, extra))
    return bad


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
