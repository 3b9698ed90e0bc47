"""Tuning's share of a task's final speedup and the GPU's busy fraction,
from `kclaw result ID --json` (its history) and the task's wall time.

As a module (tools/bench/parallel_candidates.sh): tune_share_and_busy().
As a command, over every task of a kclaw home (tools/bench/kb_tune.sh):

    python3 tools/bench/tune_share.py DIR

where DIR holds tasks.json (`kclaw status --json`) and, for each task,
status-ID.json and result-ID.json; prints a line per task and a summary.
"""
import json
import math
import os
import sys


def find(o, *names):
    """The first value under any of names, anywhere in o."""
    if isinstance(o, dict):
        for n in names:
            if n in o:
                return o[n]
        for v in o.values():
            r = find(v, *names)
            if r is not None:
                return r
    return None


def tune_share_and_busy(path, wall):
    """Tuning's share of the task's final speedup S: log(S / S0) / log(S),
    S0 the best speedup of a candidate not made by tuning (0 when tuning
    gave nothing, 1 when all of it), and the GPU's busy fraction: the
    evaluations' wall time in the sandbox over the task's wall time. None
    where the result says too little."""
    try:
        res = json.load(open(path))
    except (OSError, ValueError):
        return None, None
    best, best_model, gpu_ms = 0.0, 0.0, 0.0
    for h in res.get("history") or []:
        ev, cand = h.get("eval") or {}, h.get("candidate") or {}
        gpu_ms += float(ev.get("wall_ms") or 0)
        if str(ev.get("status")).lower() != "ok" or not ev.get("speedup"):
            continue
        sp = float(ev["speedup"])
        best = max(best, sp)
        if cand.get("origin") != "tune":
            best_model = max(best_model, sp)
    share = None
    if best > 1 and best_model > 0:
        share = max(0.0, math.log(best / best_model)) / math.log(best)
    busy = gpu_ms / 1000 / wall if wall and wall == wall and wall > 0 else None
    return share, busy


def best_eval(path):
    """The evaluation of the fastest correct candidate in the result's
    history, or None."""
    try:
        res = json.load(open(path))
    except (OSError, ValueError):
        return None
    evs = [h.get("eval") or {} for h in res.get("history") or []]
    evs = [e for e in evs if str(e.get("status")).lower() == "ok"]
    return max(evs, key=lambda e: float(e.get("speedup") or 0), default=None)


def wall_s(status):
    c = find(status, "created_unix_ms", "createdUnixMs")
    f = find(status, "finished_unix_ms", "finishedUnixMs")
    return (float(f) - float(c)) / 1000 if c and f else float("nan")


def pct(x):
    return "-" if x is None else "%.1f%%" % (100 * x)


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def main(argv):
    d = argv[1]
    tasks = json.load(open(os.path.join(d, "tasks.json"))).get("tasks", [])
    lines, shares, busies, tunes_all, promoted_all = [], [], [], 0, 0
    for t in tasks:
        st = json.load(open(os.path.join(d, "status-%s.json" % t["id"])))
        wall = wall_s(st)
        tunes = find(st, "tune_candidates") or 0
        promoted = find(st, "tune_promotions") or 0
        res = os.path.join(d, "result-%s.json" % t["id"])
        share, busy = tune_share_and_busy(res, wall)
        best = best_eval(res) or {}
        shares.append(share)
        busies.append(busy)
        tunes_all += tunes
        promoted_all += promoted
        lines.append("%-40s %-6s wall %7.1f s  best %s  tunes %d promoted %d "
                     "best_from_tune %s  tuning's share %s  GPU busy %s  "
                     "best's sol_fraction %s" % (
                         find(t, "name") or t["id"], t["state"], wall,
                         "%.3fx" % best["speedup"] if best.get("speedup") else "-",
                         tunes, promoted, bool(find(st, "best_from_tune")),
                         pct(share), pct(busy),
                         "%.3f" % best["sol_fraction"] if best.get("sol_fraction") else "-"))
    lines.append("summary: %d tasks, %d tune candidates, %d promoted; tuning's "
                 "share of the final speedup %s (mean), GPU busy %s (mean)" % (
                     len(tasks), tunes_all, promoted_all, pct(mean(shares)),
                     pct(mean(busies))))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
