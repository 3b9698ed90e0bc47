#!/usr/bin/env python3
"""What the main-job tests expect, derived from the recordings' script
(examples/recordings/generate.py) and the scripted sandbox's timings.

    mainjob.py table TABLE EXPECT     write the table child's table and the
                                      expected outcome of every task
    mainjob.py report REPORT EXPECT   check `kclaw report --json` output
    mainjob.py events EVENTS EXPECT NAME  check a task's events (kclaw
                                      watch --json lines) against its
                                      expectation
    mainjob.py ids REPORT             "id name" per task of a report
    mainjob.py compile NVRTC_CHECK    the failing seeds through NVRTC
    mainjob.py tensors-bundle EXAMPLE OUT BASELINE_MS COMPILE_MS
                                      the example with a `tensors` reference
    mainjob.py compile-report REPORT NAME REF_MS COMPILE_MS BEST_MS
                                      check the torch.compile figures

The expected states come from a model of orchestrator/fsm.c's rules (k
Generator jobs of one seed each, the best correct seed as the base,
promotion when base_ms / ms >= 1 + rt or the speedup over the reference
beats the base's by at least at, a repair chain after a failed
optimisation, the end when the round budget is spent), kept deliberately
small: if the state machine changes, this test says where the recordings
no longer fit.
"""

import json
import math
import os
import sys

SRC = os.environ.get("KCLAW_SRC", os.path.join(os.path.dirname(
    os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "examples", "recordings"))
import generate  # noqa: E402

RT, AT = 0.3, 0.3


def timings():
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "timings.json")) as f:
        return json.load(f)


def kernel_ms(tim, task, what):
    t = tim[task]
    if what == "reference":
        return t["reference"]
    if what in t:
        return t["reference"] / t[what]
    return None


def speedup_of(tim, task, ms):
    """A correct kernel's speedup: the reference's time over its own (the
    table child times the reference in every evaluation)."""
    return tim[task]["reference"] / ms


def promotes(base_ms, base_sp, ms, sp):
    """The paper's promotion (orchestrator/fsm.c, fsm_promotes): at least
    1 + rt times as fast as the base, or a speedup over the reference at
    least `at` (in speedup units) above the base's."""
    eps = 1e-9
    return base_ms / ms >= 1 + RT - eps or sp - base_sp >= AT - eps


def expect_task(task, tim):
    """States entered after SUBMITTED, the seeds' and rounds' statuses, the
    candidates promoted to base, best ms.

    Seeding: k independent Generator jobs, job i answering seed i (its
    recording generator/i), numbered c000(i+1) before any answer; all are
    evaluated once every Generator has answered, and the best correct seed
    (highest speedup, ties to the lower number) becomes the base. Then each
    scripted round reviews one new candidate, numbered on from k + 1 (the
    script has no duplicate: generate.check_distinct)."""
    seeds = [w for w, _ in generate.TASKS[task]["seeds"]]
    k = len(seeds)
    script = generate.rounds(task)
    states = ["SEEDING", "REVIEW_SEEDS"]
    seed_status = [generate.expected_status(w) for w in seeds]
    base = None  # (number, ms, speedup)
    for i, w in enumerate(seeds):
        if seed_status[i] != "OK":
            continue
        ms = kernel_ms(tim, task, w)
        sp = speedup_of(tim, task, ms)
        if base is None or sp > base[2]:
            base = (i + 1, ms, sp)
    if base is None:
        fail("%s: the recordings have no correct seed; the model covers "
             "a correct one only" % task)
    promoted = [base[0]]
    best = base
    states += ["FEATURES", "RETRIEVE", "PLAN", "OPTIMIZE", "REVIEW"]
    for n, r in enumerate(script):
        num = k + 1 + n
        last = n + 1 == len(script)
        if r["status"] == "OK":
            ms = kernel_ms(tim, task, r["kernel"])
            sp = speedup_of(tim, task, ms)
            if sp > best[2]:
                best = (num, ms, sp)
            promote = promotes(base[1], base[2], ms, sp)
            if promote:
                base = (num, ms, sp)
                promoted.append(num)
            nxt = ["FEATURES", "RETRIEVE", "PLAN", "OPTIMIZE", "REVIEW"] \
                if promote else ["PLAN", "OPTIMIZE", "REVIEW"]
        else:
            nxt = ["DIAGNOSE", "REPAIR", "REVIEW"]
        if last:
            states.append("DONE")
        else:
            states += nxt
    ref = tim[task]["reference"]
    return {"task": task, "states": states, "seed_status": seed_status,
            "round_status": [r["status"] for r in script],
            "promoted": ["c%04d" % x for x in promoted],
            "rounds": len(script), "best": "c%04d" % best[0],
            "best_ms": best[1], "speedup": ref / best[1],
            "repairs": sum(r["origin"] == "repairer" for r in script)}


def cmd_table(table_path, expect_path):
    tim = timings()
    with open(table_path, "w") as f:
        for task, what, src, status in generate.sources():
            ms = kernel_ms(tim, task, what) if status == "OK" else 0
            f.write("%s %s %.9f\n" % (generate.source_key(src), status, ms))
    exp = {t: expect_task(t, tim) for t in generate.TASKS}
    with open(expect_path, "w") as f:
        json.dump(exp, f, indent=1)


def close(a, b):
    return a is not None and abs(a - b) <= 1e-6 * max(1.0, abs(b))


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def cmd_report(report_path, expect_path, *names):
    exp = json.load(open(expect_path))
    rep = json.load(open(report_path))
    names = list(names) or list(exp)
    got = {t["name"]: t for t in rep["tasks"]}
    if sorted(got) != sorted(names):
        fail("report has tasks %s, expected %s" % (sorted(got), names))
    speedups = []
    for name in names:
        e, t = exp[name], got[name]
        if t["state"] != "done":
            fail("%s is %s: %s" % (name, t["state"], t["error"]))
        if t["rounds"] != e["rounds"]:
            fail("%s: %d rounds, expected %d" % (name, t["rounds"],
                                                 e["rounds"]))
        if t["repairs"] != e["repairs"]:
            fail("%s: %d repairs, expected %d" % (name, t["repairs"],
                                                  e["repairs"]))
        if not close(t["best_ms"], e["best_ms"]):
            fail("%s: best %s ms, expected %s" % (name, t["best_ms"],
                                                  e["best_ms"]))
        if not close(t["speedup"], e["speedup"]):
            fail("%s: speedup %s, expected %s" % (name, t["speedup"],
                                                  e["speedup"]))
        if t["speedup_vs_torch_compile"] is not None:
            fail("%s: no torch.compile time is known" % name)
        if "recordings" in (t["error"] or ""):
            fail("%s: %s" % (name, t["error"]))
        speedups.append(e["speedup"])
    s = rep["set"]
    n = len(names)
    want = {"tasks": n, "success": n, "success_rate": 1.0,
            "fast_1": sum(x >= 1 for x in speedups) / n,
            "mean_speedup": sum(speedups) / n,
            "geomean_speedup": math.exp(sum(map(math.log, speedups)) / n)}
    for k, v in want.items():
        if not close(s[k], v):
            fail("set %s = %s, expected %s" % (k, s[k], v))
    if s["geomean_speedup_vs_torch_compile"] is not None:
        fail("set: no torch.compile time is known")
    print("report ok: %d tasks, geomean %.3fx" % (n, s["geomean_speedup"]))


def cand(ev):
    """The candidate number of an event: "c0004" of "<task>-c0004"."""
    return (ev.get("candidate_id") or "").rsplit("-", 1)[-1]


def cmd_events(events_path, expect_path, name):
    e = json.load(open(expect_path))[name]
    evs = [json.loads(line) for line in open(events_path) if line.strip()]
    states = [ev["detail"].split(" -> ")[1] for ev in evs
              if ev.get("kind") == "state_changed"]
    if states != e["states"]:
        fail("%s went through\n  %s\nexpected\n  %s" % (
            name, " ".join(states), " ".join(e["states"])))
    rounds = [ev["detail"] for ev in evs if ev.get("kind") ==
              "round_finished"]
    want = ["round %d: %s" % (i + 1, s) for i, s in
            enumerate(e["round_status"])]
    if rounds != want:
        fail("%s rounds %s, expected %s" % (name, rounds, want))
    n_seeds = len(e["seed_status"])
    gens = [ev["detail"] for ev in evs if ev.get("kind") == "agent_replied"
            and ev.get("role") == "generator"]
    if gens != ["generator replied: 1 candidate(s), 0 tokens, 0 ms"] * \
            n_seeds:
        fail("%s: Generator replies %s, expected %d of one seed each" % (
            name, gens, n_seeds))
    finished = [ev for ev in evs if ev.get("kind") == "eval_finished"]
    evals = [ev["detail"].split(" ")[0] for ev in finished]
    if len(evals) != n_seeds + e["rounds"]:
        fail("%s: %d evaluations, expected %d" % (
            name, len(evals), n_seeds + e["rounds"]))
    # Seed i is candidate c000(i+1), whatever order the evaluations end in.
    seeds = {cand(ev): ev["detail"].split(" ")[0] for ev in
             finished[:n_seeds]}
    want = {"c%04d" % (i + 1): s for i, s in enumerate(e["seed_status"])}
    if seeds != want:
        fail("%s: seeds %s, expected %s" % (name, seeds, want))
    promoted = [cand(ev) for ev in evs if ev.get("kind") == "base_promoted"]
    if promoted != e["promoted"]:
        fail("%s: promoted %s, expected %s" % (name, promoted,
                                               e["promoted"]))
    end = [cand(ev) for ev in evs if ev.get("kind") == "task_finished"]
    if end != [e["best"]]:
        fail("%s: finished with best %s, expected %s" % (name, end,
                                                         e["best"]))
    retried = [ev for ev in evs if ev.get("kind") == "job_retried"]
    if retried:
        fail("%s: jobs were retried: %s" % (name, retried[0]["detail"]))
    print("events ok: %s (%d states, %d rounds)" % (name, len(states),
                                                    len(rounds)))


def cmd_compile(nvrtc):
    """The failing seeds (typos) through NVRTC, and the reference port they
    sit beside as a control: the typos must fail, the port compile (the
    hand-written candidates are compiled by tasks_examples)."""
    import subprocess
    import tempfile
    want = {}
    with tempfile.TemporaryDirectory() as d:
        for task, what, src, status in generate.sources():
            if status != "COMPILE_ERROR" and what != "reference":
                continue
            path = os.path.join(d, "%s-%s.cu" % (task, what.replace(
                ":", "")))
            with open(path, "w") as f:
                f.write(src)
            want[path] = status
        r = subprocess.run([nvrtc] + sorted(want), capture_output=True,
                           text=True)
    got = dict(line.split() for line in r.stdout.splitlines())
    for path, status in sorted(want.items()):
        if got.get(path) != status:
            fail("%s: %s, expected %s" % (os.path.basename(path),
                                          got.get(path), status))
    print("compile ok: %d kernels" % len(want))


def write_npy(path, shape, values):
    """A little-endian f32 .npy file (format 1.0) without NumPy."""
    import struct
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % (
        "".join("%d, " % d for d in shape))
    pad = 64 - (10 + len(header) + 1) % 64
    header += " " * pad + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)))
        f.write(header.encode())
        f.write(struct.pack("<%df" % len(values), *values))


def cmd_tensors_bundle(example, out, baseline_ms, compile_ms):
    """The example as a KernelBench-style bundle: a `tensors` reference
    with stored inputs and outputs (8 rows instead of 8192, which nothing
    of the scripted run reads), its baseline and a torch.compile time."""
    with open(os.path.join(SRC, "examples", example, "task.json")) as f:
        task = json.load(f)
    os.makedirs(os.path.join(out, "set0"))
    inputs, expected = {}, {}
    for t in task["tensors"]:
        t.pop("init", None)
        if len(t["shape"]) == 2:
            t["shape"][0] = 8
        n = 1
        for d in t["shape"]:
            n *= d
        rel = "set0/%s.npy" % t["name"]
        write_npy(os.path.join(out, rel), t["shape"], [0.5] * n)
        (expected if t["kind"] == "output" else inputs)[t["name"]] = rel
    task["reference"] = {"kind": "tensors", "baseline_ms": float(
        baseline_ms), "torch_compile_ms": float(compile_ms),
        "sets": [{"seed": 1, "inputs": inputs, "expected": expected}]}
    task.pop("context", None)
    with open(os.path.join(out, "task.json"), "w") as f:
        json.dump(task, f, indent=1)


def cmd_compile_report(report_path, name, ref_ms, compile_ms, best_ms):
    """The report of one task whose bundle recorded a torch.compile time."""
    rep = json.load(open(report_path))
    t = [t for t in rep["tasks"] if t["name"] == name][0]
    best, ref, tc = float(best_ms), float(ref_ms), float(compile_ms)
    for k, v in (("best_ms", best), ("speedup", ref / best),
                 ("torch_compile_ms", tc),
                 ("speedup_vs_torch_compile", tc / best)):
        if not close(t[k], v):
            fail("%s: %s = %s, expected %s" % (name, k, t[k], v))
    s = rep["set"]
    want = {"torch_compile_known": 1,
            "fast_1_vs_torch_compile": 1.0 if tc >= best else 0.0,
            "geomean_speedup_vs_torch_compile": tc / best}
    for k, v in want.items():
        if not close(s[k], v):
            fail("set %s = %s, expected %s" % (k, s[k], v))
    print("torch.compile report ok: %.3fx" % (tc / best))


def cmd_ids(report_path):
    for t in json.load(open(report_path))["tasks"]:
        print(t["id"], t["name"])


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    {"table": cmd_table, "report": cmd_report, "events": cmd_events,
     "ids": cmd_ids, "compile": cmd_compile,
     "tensors-bundle": cmd_tensors_bundle,
     "compile-report": cmd_compile_report}[cmd](
        *args)


if __name__ == "__main__":
    main()
