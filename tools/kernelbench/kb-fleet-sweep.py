#!/usr/bin/env python3
"""KernelBench problems through the real service: convert, submit, and the
orchestrator's reference check in the real sandbox child and reference
process (one long-lived sandbox, as a deployment runs).

    kb-fleet-sweep.py KCLAW_BIN_DIR KERNELBENCH_DIR --out DIR
                      [--levels 1,2,3] [--first N] [--budget-s S]

Starts `kclaw up --detach --agents 0 --gpus 1` in DIR/home (kclawd and one
sandbox, no agents: every task gets its reference-only evaluation at
seeding and then waits), converts each problem with kb2bundle's
convert_torch in this process (a torch bundle, shapes from the meta
device; PyTorch is imported once) and submits it with `kclaw submit`,
then polls `kclaw status --json` until every task's reference check has
answered. The check is a reference-only evaluation without torch.compile
(EvalOptions.no_compile_baseline): the problem's model loaded under its
recorded seed, two input sets of its distribution (the outputs' variation;
degenerate outputs named), the eager baseline timed with the candidate's
protocol.

Writes DIR/sweep.jsonl (one line per problem: convert and submit seconds,
the check's state, status and message, wall ms, eager ms, the reference
process's peak GPU memory and the problem's data bytes, the overhead: wall
minus the reference's own GPU time, i.e. its runs times the eager median)
and prints a Markdown table per level. Exit 1 when a problem that
converted did not get a successful check.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kb2bundle as kb  # noqa: E402
ESIZE = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8, "i32": 4, "i64": 8, "i8": 1, "u8": 1, "bool": 1}


def run(argv, **kw):
    t0 = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, **kw)
    return r, time.monotonic() - t0


def problems(kb, levels):
    out = []
    for lv in levels:
        d = os.path.join(kb, "level%d" % lv)
        files = [f for f in os.listdir(d) if f.endswith(".py")]
        files.sort(key=lambda f: (int(f.split("_")[0]) if f.split("_")[0].isdigit() else 1 << 30, f))
        out += [(lv, os.path.join(d, f)) for f in files]
    return out


def data_bytes(task):
    n = 0
    for t in task.get("tensors", []):
        if t.get("kind") == "scalar":
            continue
        k = 1
        for d in t.get("shape") or [1]:
            k *= int(d)
        n += k * ESIZE.get(t.get("dtype", "f32"), 4)
    return n


def metric(rc, name):
    for m in rc.get("metrics") or []:
        if m.get("name") == name:
            return m.get("value")
    return None


def med_max(xs, fmt="%.2f"):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    return (fmt + " / " + fmt) % (statistics.median(xs), max(xs))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("kb")
    ap.add_argument("--out", required=True)
    ap.add_argument("--levels", default="1,2,3")
    ap.add_argument("--first", type=int, default=0, help="only the first N problems of each level")
    ap.add_argument("--budget-s", type=float, default=1e9, help="stop waiting after this long")
    a = ap.parse_args(argv)
    kclaw = os.path.join(a.bin, "kclaw")
    home = os.path.join(a.out, "home")
    bundles = os.path.join(a.out, "bundles")
    os.makedirs(bundles, exist_ok=True)
    os.makedirs(home, exist_ok=True)
    start = time.monotonic()
    r, _ = run([kclaw, "--home", home, "up", "--detach", "--agents", "0", "--gpus", "1"])
    if r.returncode != 0:
        sys.exit("kclaw up failed: %s" % (r.stderr.strip() or r.stdout.strip()))
    recs, by_id = [], {}
    try:
        levels = [int(x) for x in a.levels.split(",") if x]
        probs = problems(a.kb, levels)
        if a.first:
            probs = [p for lv in levels for p in [q for q in probs if q[0] == lv][:a.first]]
        for lv, path in probs:
            name = "level%d/%s" % (lv, os.path.basename(path))
            rec = {"name": name, "level": lv, "state": "not converted"}
            recs.append(rec)
            dst = os.path.join(bundles, "L%d_%s" % (lv, os.path.basename(path)[:-3]))
            # In this process (PyTorch imported once, as a user converting
            # a folder of problems would): the conversion's own time.
            t0 = time.monotonic()
            try:
                kb.convert_torch(path, dst, log=lambda m: None)
            except Exception as e:
                rec["convert_s"] = round(time.monotonic() - t0, 3)
                rec["error"] = "kb2bundle: %s" % e
                continue
            rec["convert_s"] = round(time.monotonic() - t0, 3)
            with open(os.path.join(dst, "task.json")) as f:
                rec["data_bytes"] = data_bytes(json.load(f))
            r, dt = run([kclaw, "--home", home, "submit", dst, "--json"])
            rec["submit_s"] = round(dt, 3)
            try:
                rec["task_id"] = json.loads(r.stdout)["task_id"]
            except (ValueError, KeyError):
                rec["state"] = "not submitted"
                rec["error"] = (r.stderr.strip() or r.stdout.strip())[-300:]
                continue
            rec["state"] = "submitted"
            by_id[rec["task_id"]] = rec
        print("%d problems, %d submitted in %.1f s" % (len(recs), len(by_id), time.monotonic() - start),
              flush=True)
        pending = set(by_id)
        last = -1
        while pending and time.monotonic() - start < a.budget_s:
            time.sleep(2)
            r, _ = run([kclaw, "--home", home, "status", "--json"])
            try:
                tasks = json.loads(r.stdout).get("tasks") or []
            except ValueError:
                continue
            for t in tasks:
                rc = t.get("reference_check")
                if t.get("id") not in pending or not rc or rc.get("state") not in ("check_done", "check_failed"):
                    continue
                rec = by_id[t["id"]]
                pending.discard(t["id"])
                rec["state"] = rc["state"]
                rec["status"] = rc.get("status")
                rec["message"] = (rc.get("message") or "")[:300]
                rec["wall_ms"] = rc.get("wall_ms")
                rec["eager_ms"] = rc.get("reference_ms")
                rec["degenerate"] = [d.get("name") for d in rc.get("degenerate") or []]
                rec["output_variation"] = rc.get("output_variation")
                rec["peak_gpu_bytes"] = metric(rc, "torch.peak_gpu_bytes")
                rec["load_ms"] = metric(rc, "sandbox.load_ms")
                runs = metric(rc, "torch.baseline_runs")
                if rec["wall_ms"] is not None and rec["eager_ms"] and runs is not None:
                    # The load's forward, the two input sets' and the baseline's.
                    rec["overhead_ms"] = rec["wall_ms"] - (runs + 3) * rec["eager_ms"]
            done = len(by_id) - len(pending)
            if done != last:
                print("  %d of %d checked (%.0f s)" % (done, len(by_id), time.monotonic() - start), flush=True)
                last = done
        for i in pending:
            by_id[i]["state"] = "not checked (budget)"
    finally:
        run([kclaw, "--home", home, "up", "--stop"])
    with open(os.path.join(a.out, "sweep.jsonl"), "w") as f:
        for rec in recs:
            f.write(json.dumps(rec) + "\n")
    print("\n| level | problems | converted | submitted | checked OK | convert s (median / max) "
          "| submit s (median / max) | check wall s (median / max) | not the reference's GPU time s "
          "(median / max) | peak GPU memory / data (median / max) | degenerate |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    bad = 0
    for lv in sorted({r["level"] for r in recs}):
        rs = [r for r in recs if r["level"] == lv]
        conv = [r for r in rs if "data_bytes" in r]
        sub = [r for r in rs if "task_id" in r]
        ok = [r for r in sub if r.get("state") == "check_done" and r.get("status") == "ok"]
        bad += len(conv) - len(ok)
        ratio = [r["peak_gpu_bytes"] / r["data_bytes"] for r in ok if r.get("peak_gpu_bytes") and r["data_bytes"]]
        print("| %d | %d | %d | %d | %d | %s | %s | %s | %s | %s | %d |" % (
            lv, len(rs), len(conv), len(sub), len(ok),
            med_max([r.get("convert_s") for r in rs]), med_max([r.get("submit_s") for r in sub]),
            med_max([r["wall_ms"] / 1e3 for r in ok if r.get("wall_ms") is not None]),
            med_max([r["overhead_ms"] / 1e3 for r in ok if r.get("overhead_ms") is not None]),
            med_max(ratio), sum(1 for r in ok if r.get("degenerate"))))
    for r in recs:
        if not (r.get("state") == "check_done" and r.get("status") == "ok"):
            print("  %s: %s %s %s" % (r["name"], r.get("state"), r.get("status") or "",
                                      (r.get("message") or r.get("error") or "")[:200]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
