#!/usr/bin/env python3
"""Runs the KernelBench cases (tests/gpu/kernelbench/<case>) on a GPU machine.

    run.py KCLAW_BIN_DIR KERNELBENCH_DIR [--out results.jsonl] [--only CASE,...]
           [--budget-s 500]

For each case: converts its problem with tools/kernelbench/kb2bundle.py
(a torch-reference bundle, cached per problem under $TMPDIR/kclaw-kb),
evaluates the case with `kclaw eval BUNDLE CASE --json` against the live
PyTorch reference, and compares the status (and speedup, when OK) with the
case's `expect` (status; speedup_min / speedup_max; staged_min / staged_max:
the serials the reference process drew while the candidate compiled,
metric torch.staged_serials). Prints one line per case and a table of the honest ones
(speedup over eager and over torch.compile); exit 1 when a case got what it
must not. Cases left when --budget-s runs out are reported as not run.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))


def read_expect(path):
    e = {"status": ["OK"]}
    for line in open(path):
        line = line.strip()
        if not line or " " not in line:
            continue
        k, v = line.split(" ", 1)
        if k == "status":
            e["status"] = v.split()
        elif k in ("speedup_min", "speedup_max", "staged_min", "staged_max"):
            e[k] = float(v)
        else:
            e[k] = v
    return e


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("kb")
    ap.add_argument("--out", default=None)
    ap.add_argument("--only", default="")
    ap.add_argument("--budget-s", type=float, default=1e9)
    a = ap.parse_args(argv)
    cases = sorted(d for d in os.listdir(HERE)
                   if os.path.isfile(os.path.join(HERE, d, "expect")))
    if a.only:
        cases = [c for c in cases if c in a.only.split(",")]
    cache = os.path.join(tempfile.gettempdir(), "kclaw-kb")
    os.makedirs(cache, exist_ok=True)
    start, bad, rows, skipped = time.monotonic(), 0, [], 0
    out = open(a.out, "w") if a.out else None
    for c in cases:
        e = read_expect(os.path.join(HERE, c, "expect"))
        if time.monotonic() - start > a.budget_s:
            print("%-18s not run (budget)" % c, flush=True)
            skipped += 1
            continue
        prob = e["problem"]
        bundle = os.path.join(cache, prob.replace("/", "_").replace(".py", ""))
        t0 = time.monotonic()
        if not os.path.exists(os.path.join(bundle, "task.json")):
            r = subprocess.run([sys.executable, os.path.join(ROOT, "tools/kernelbench/kb2bundle.py"),
                                os.path.join(a.kb, prob), bundle, "--force"],
                               capture_output=True, text=True)
            if r.returncode != 0:
                print("%-18s kb2bundle failed: %s" % (c, r.stderr.strip()[-300:]), flush=True)
                bad += 1
                continue
        import_s = time.monotonic() - t0
        t1 = time.monotonic()
        r = subprocess.run([os.path.join(a.bin, "kclaw"), "eval", bundle, os.path.join(HERE, c),
                            "--json", "--timeout-ms", "400000"], capture_output=True, text=True)
        wall = time.monotonic() - t1
        try:
            res = json.loads(r.stdout)
        except ValueError:
            print("%-18s no result (rc %d): %s" % (c, r.returncode, r.stderr.strip()[-300:]),
                  flush=True)
            bad += 1
            continue
        st = (res.get("status") or "?").upper()  # --json: lower case
        ok = st in e["status"]
        sp = res.get("speedup", 0) or 0
        if ok and st == "OK" and "speedup_min" in e and sp < e["speedup_min"]:
            ok = False
        if ok and st == "OK" and "speedup_max" in e and sp > e["speedup_max"]:
            ok = False
        # Serials the reference process drew while the candidate compiled
        # (docs/torchref.md "Staged serials"): within the case's bounds.
        staged = {m.get("name"): m.get("value") for m in res.get("metrics") or []}.get(
            "torch.staged_serials", 0) or 0
        if ok and st == "OK" and staged < e.get("staged_min", 0):
            ok = False
        if ok and st == "OK" and staged > e.get("staged_max", 1e9):
            ok = False
        bad += not ok
        print("%-18s %-13s %6.2fx eager %6.2fx compile  %6.1f s  staged %d  %s%s" % (
            c, st, sp, res.get("compile_speedup", 0) or 0, wall, staged,
            "" if ok else "<-- UNEXPECTED (want %s) " % " ".join(e["status"]),
            (res.get("message") or "")[:200]), flush=True)
        rec = {"case": c, "problem": prob, "pass": ok, "import_s": round(import_s, 2),
               "eval_wall_s": round(wall, 2), "result": res}
        if out:
            out.write(json.dumps(rec) + "\n")
            out.flush()
        if st == "OK" and e["status"][0] == "OK":
            rows.append((c, prob, res))
    print("\n| case | problem | candidate ms | eager ms | torch.compile ms | vs eager | vs compile | speed of light |")
    print("|---|---|---|---|---|---|---|---|")
    for c, prob, res in rows:
        tm = res.get("timing", {}) or {}
        print("| %s | %s | %.4f | %.4f | %.4f | %.2fx | %.2fx | %.0f%% |" % (
            c, prob, tm.get("median_ms", 0), res.get("reference_ms", 0),
            res.get("torch_compile_ms", 0), res.get("speedup", 0) or 0,
            res.get("compile_speedup", 0) or 0, 100 * (res.get("sol_fraction", 0) or 0)))
    ran = len(cases) - skipped
    print("\n%d of %d cases run as expected%s" % (
        ran - bad, ran, ", %d not run (budget)" % skipped if skipped else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
