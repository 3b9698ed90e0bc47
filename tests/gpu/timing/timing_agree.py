#!/usr/bin/env python3
"""Does kclaw's reported kernel time agree with an independent measurement?

For every shipped example's candidates, `kclaw eval --profile
--trace-timing --json` gives the timed runs' median (CUDA events around the
plan's launches, L2 flushed before each, less the events' own cost around
a launch that the sandbox child measured at its start; docs/plan.md "Timing") and, from CUPTI's
activity records of those same timed runs, `profile.timed_cupti_ms`: the
median over them of each run's span by the profiler's clock (first kernel
start to last kernel end). An older sandbox gives only
`profile.cupti_span_ms`, nine more runs prepared the same way. Prints both,
their difference, and the kernels' summed busy time of one run (a
multi-kernel plan's gaps between its kernels are in the span and in the
events, not in the busy time); exits 1 when a plan of at least 10 us
differs by more than the limit (default 1.5 %). Tracing can slow a
kernel, so each candidate is evaluated once more untraced and that median is shown
beside (not compared: CUPTI cannot see those runs).

    KCLAW=bin/kclaw python3 timing_agree.py [EXAMPLES_DIR] [--limit PCT]

GPU only (the H200 run in the README); CI has no GPU.
"""
import json
import os
import subprocess
import sys
import tempfile


def evaluate(kclaw, home, dirs, *flags):
    """`kclaw eval --json` of [TASK_DIR, CANDIDATE_DIR]: (the result,
    stderr), the result None when stdout is not JSON."""
    out = subprocess.run([kclaw, "eval", "--json", "--home", home] + list(flags) + dirs,
                         capture_output=True, text=True)
    try:
        return json.loads(out.stdout), out.stderr
    except ValueError:
        return None, out.stderr


def main(argv):
    kclaw = os.environ.get("KCLAW", "build/bin/kclaw")
    limit = 1.5
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
            dirs = [os.path.join(root, task), os.path.join(cdir, cand)]
            # The timed runs traced (--trace-timing), then the same
            # evaluation untraced: CUPTI's tracing can slow a kernel.
            r, err = evaluate(kclaw, home, dirs, "--profile", "--trace-timing")
            plain = None
            if r is not None:
                plain, err = evaluate(kclaw, home, dirs)
            if r is None or plain is None:
                print("%-18s %-5s no result: %s" % (task, cand, err.strip()[-200:]))
                bad = 1
                continue
            if (r.get("status") or "").lower() != "ok":
                print("%-18s %-5s %s: %s" % (task, cand, r.get("status"), r.get("message") or ""))
                bad = 1
                continue
            ev = (r.get("timing") or {}).get("median_ms") or 0.0
            acts = r.get("activities") or []
            metrics = {m.get("name"): m.get("value") for m in r.get("metrics") or []}
            # The median over the timed runs themselves, traced by CUPTI,
            # of each run's span by CUPTI's clock (first kernel start to
            # last kernel end; eval.c ev_time_traced); an older sandbox:
            # the profiled runs after them, or the last run's kernels'
            # durations summed.
            timed = metrics.get("profile.timed_cupti_ms")
            span = timed or metrics.get("profile.cupti_span_ms")
            # The timed runs are reported less the events' own cost
            # around a launch (sandbox.launch_cost_ms, measured at the
            # child's start); the profiled runs' raw events and their
            # median difference from the span show that cost on this
            # plan's own runs (eval.c ev_profile).
            extra = ""
            untraced = (plain.get("timing") or {}).get("median_ms")
            if untraced:
                extra += ", untraced %.4f ms" % untraced
            if metrics.get("sandbox.launch_cost_ms"):
                extra += ", launch cost %.4f ms" % metrics["sandbox.launch_cost_ms"]
            # What was taken off this plan's runs: its own runs' cost
            # under CUPTI where it is short (timing.c ev_plan_calibrate).
            if metrics.get("sandbox.candidate_launch_cost_ms") is not None:
                extra += " (this plan's %.4f ms)" % metrics["sandbox.candidate_launch_cost_ms"]
            # The median over the timed runs of each one's reported time
            # less its own span: the per-run difference, where `diff`
            # compares the two medians.
            if metrics.get("profile.timed_excess_ms") is not None:
                extra += ", per run %+.4f ms" % metrics["profile.timed_excess_ms"]
            if timed and metrics.get("profile.cupti_span_ms"):
                extra += ", profiled runs' span %.4f ms" % metrics["profile.cupti_span_ms"]
            if metrics.get("profile.events_ms"):
                extra += ", profiled runs' raw events %.4f ms (+%.4f)" % (
                    metrics["profile.events_ms"], metrics.get("profile.event_overhead_ms") or 0)
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
                    note = "  OVER %g %%" % limit
                else:
                    note = "  (under 10 us: launch latency)"
            print("%-18s %-5s %11.4f %11.4f %+6.2f%%%s (%d kernels, %.4f ms of them busy in one run%s)"
                  % (task, cand, ev, cupti, diff, note, len(acts), busy, extra))
    return bad


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
