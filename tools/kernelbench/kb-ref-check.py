#!/usr/bin/env python3
"""kb-ref-check: the live PyTorch reference over a folder of KernelBench
problems, without the C sandbox (for the GPU machine).

    kb-ref-check.py ../shared/kernelbench/level1 [more folders or files]
                    [--out results.jsonl] [--timeout 120] [--compile]
                    [--iters 10] [--filter REGEX] [--limit N] [--resume]

For every problem file: kb2bundle's torch conversion into a temporary
folder (shapes from the meta device), then gpu-sandbox/torchref.py's
request handlers called in this process (no sockets, no child): load (all
shared buffers in one arena, none overlapping), three `inputs` with keep
(serials 0 and 1 drawn as get_inputs() makes them, whose difference is
var_norm, then serial 2 shifted), each followed by a self-check (the
expected outputs copied into the shared outputs must give bad = 0 at zero
tolerance; serial 0 also checks that poisoned outputs are all bad, serial 1
that a byte changed in an input is reported as written, serial 2 holds the
outputs and compares them again), a baseline in eager mode (and with
--compile torch.compile's), then unload.

One JSON line per problem in --out (name, level, status, stage, error,
peak GPU memory, bytes of inputs/outputs/parameters, eager and compile ms,
the smallest var_norm/exp_norm and "degenerate" when it is < 1e-3, wall
seconds, GPU memory left after unload) and a summary at the end (per level
ok/failed/timeout, the failures with their first error line), also in
OUT.summary.json. Progress goes to stdout, the reference's log to stderr.

A problem gets --timeout seconds (signal.alarm; a call into CUDA or a
compiler is interrupted only when it returns). Past --timeout + --grace, or
after an error that loses the CUDA context, the run records the problem and
starts itself again with --resume (the problems already in --out are
skipped).
"""
import argparse
import gc
import hashlib
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(SRC, "gpu-sandbox"))

import kb2bundle as kb  # noqa: E402
import torchref as tr  # noqa: E402
import torchref_common as trc  # noqa: E402
import torchref_cuda as trcuda  # noqa: E402
import torchref_task as trt  # noqa: E402

DEGENERATE = 1e-3


class ProblemTimeout(BaseException):
    """Raised by the alarm: a BaseException, so no `except Exception` in a
    problem's code or the handlers swallows it."""


class Fail(Exception):
    def __init__(self, stage, msg):
        Exception.__init__(self, msg)
        self.stage, self.msg = stage, msg


def say(msg):
    print(msg, flush=True)


def first_line(s, n=300):
    s = (str(s).strip().splitlines() or [""])[0]
    return s if len(s) <= n else s[:n - 3] + "..."


def level_of(path):
    for part in reversed(os.path.abspath(path).split(os.sep)):
        m = re.fullmatch(r"level(\d+)", part)
        if m:
            return int(m.group(1))
    return None


def problem_key(path):
    m = re.match(r"(\d+)", os.path.basename(path))
    return (level_of(path) or 0, int(m.group(1)) if m else 1 << 30, os.path.basename(path))


def find_problems(paths):
    out = []
    for p in paths:
        if os.path.isfile(p):
            out.append(p)
            continue
        if not os.path.isdir(p):
            sys.exit("kb-ref-check: %s is neither a file nor a folder" % p)
        for root, dirs, files in os.walk(p):
            dirs.sort()
            for f in files:
                if f.endswith(".py") and not f.startswith("_"):
                    out.append(os.path.join(root, f))
    return sorted(set(out), key=problem_key)


def rel_name(path):
    lv = level_of(path)
    stem = os.path.splitext(os.path.basename(path))[0]
    return "level%d/%s" % (lv, stem) if lv is not None else stem


CUR = {}  # the problem being run: its record, for the stages' peaks


def note_peak(stage):
    """The peak GPU memory of PyTorch's allocator since the last stage,
    recorded per stage, then reset (the arena is outside the allocator:
    it is added to peak_bytes at the end)."""
    rec, torch = CUR.get("rec"), trc.torch
    if rec is None or torch is None:
        return
    p = int(torch.cuda.max_memory_allocated())
    rec.setdefault("stage_peaks_mb", {})[stage] = round(p / 1e6, 1)
    rec["_peak"] = max(rec.get("_peak", 0), p)
    torch.cuda.reset_peak_memory_stats()


def call(st, req, stage):
    r = tr.handle(st, req)
    note_peak(stage)
    if st.fatal:
        raise Fail(stage, "%s: %s" % (r.get("code"), r.get("error")))
    if not r.get("ok"):
        raise Fail(stage, "%s: %s" % (r.get("code"), r.get("error")))
    return r


def run_problem(st, path, a, rec):
    torch = trc.torch
    tmp = tempfile.mkdtemp(prefix="kb-ref-check-")
    try:
        rec["stage"] = "convert"
        t0 = time.monotonic()
        task_path = kb.convert_torch(path, os.path.join(tmp, "bundle"),
                                     log=lambda m: say("    kb2bundle: %s" % m))
        rec["convert_s"] = round(time.monotonic() - t0, 3)
        with open(task_path) as f:
            task = json.load(f)
        with open(os.path.join(tmp, "bundle", "model.py")) as f:
            source = f.read()
        with open(os.path.join(tmp, "bundle", "kb2bundle.json")) as f:
            rec["shapes_from"] = json.load(f)["provenance"].get("shapes_from")
        tensors = task["tensors"]
        rec["n_tensors"] = len(tensors)
        rec["n_parameters"] = sum(t["kind"] == "parameter" for t in tensors)
        rec["scalars"] = [t["name"] for t in tensors if t["kind"] == "scalar"]

        rec["stage"] = "load"
        r = call(st, {"op": "load", "key": hashlib.sha256(source.encode()).hexdigest(),
                      "source": source, "init_seed": task["reference"]["init_seed"],
                      "tensors": tensors, "scalars": rec["scalars"]}, "load")
        rec["flops"] = r.get("flops")
        kinds = {t["name"]: t["kind"] for t in tensors}
        for kind in ("input", "output", "parameter"):
            rec[kind + "_bytes"] = sum(b["bytes"] for b in r["buffers"] if kinds[b["name"]] == kind)
        # One arena: every buffer under one handle, none overlapping.
        if len({b["handle"] for b in r["buffers"]}) > 1:
            raise Fail("load", "the shared buffers are not in one arena (%d IPC handles)"
                       % len({b["handle"] for b in r["buffers"]}))
        spans = sorted((b["offset"], b["offset"] + b["bytes"]) for b in r["buffers"])
        if any(lo < prev_hi for (_, prev_hi), (lo, _) in zip(spans, spans[1:])):
            raise Fail("load", "two shared buffers overlap in the arena")
        t = st.task
        outs = t.by_kind("output")
        ins = t.by_kind("input")

        ratios, checks = [], []
        # As the child's trials: serials 0 and 1 of the drawn distribution
        # (var_norm, at serial 1, is their difference), then a shifted one.
        for v in range(3):
            serial = v
            if v == 2 and t.param_span is not None:
                # A written parameter is rebuilt from the recorded seed by
                # the next inputs.
                t.arena[t.param_span[0]:t.param_span[0] + 1].bitwise_xor_(1)
            rec["stage"] = "inputs %d" % serial
            r = call(st, {"op": "inputs", "serial": serial, "seed": a.seed + 1000 * v,
                          "variant": (0, 0, 2)[v], "keep": True}, rec["stage"])
            if v == 2 and t.param_span is not None and trt._param_sum(t) != t.param_sum:
                raise Fail(rec["stage"], "a written parameter was not restored by inputs")
            for o in r["outputs"]:
                if o.get("var_norm") is not None and o.get("exp_norm"):
                    ratios.append(o["var_norm"] / o["exp_norm"])
                elif o.get("var_norm") is not None:
                    ratios.append(0.0 if o["var_norm"] == 0 else float("inf"))
            rec["stage"] = "self-check %d" % serial
            ck = {"op": "check", "serial": serial, "atol": 0.0, "rtol": 0.0, "max_rel_norm": 0.0,
                  "hold": False, "compare_held": False}
            if v == 0:
                # Poisoned outputs (what inputs left there) are all wrong.
                r = call(st, ck, rec["stage"])
                for o, b in zip(r["outputs"], outs):
                    if o["bad"] == 0:
                        raise Fail(rec["stage"], "output %s still holds the 0xFF poison but check "
                                   "finds no bad element" % b.name)
                    if b.dtype in ("f32", "f16", "bf16", "f64") and o["nan"] != o["count"]:
                        raise Fail(rec["stage"], "output %s is all NaN but check counts %s NaN of %s"
                                   % (b.name, o["nan"], o["count"]))
            for b, e in zip(outs, st.cur.expected):
                b.view.copy_(e)
            if v == 1 and ins:
                b0 = ins[0]
                b0.raw[0:1].bitwise_xor_(1)
            torch.cuda.synchronize()
            ck["hold"] = v == 2
            r = call(st, ck, rec["stage"])
            bad = {o["name"]: o["bad"] for o in r["outputs"] if o["bad"]}
            if bad:
                o = next(o for o in r["outputs"] if o["bad"])
                raise Fail(rec["stage"], "the expected outputs copied into the shared ones do not "
                           "match: %s bad (worst at %s: expected %r, got %r)"
                           % (bad, o["worst"], o["expected"], o["got"]))
            want_written = [ins[0].name] if v == 1 and ins else []
            if r["written"] != want_written:
                raise Fail(rec["stage"], "written is %r, expected %r" % (r["written"], want_written))
            if v == 2:
                ck["hold"], ck["compare_held"] = False, True
                r = call(st, ck, rec["stage"])
                for o in r["outputs"]:
                    if o["held_diff_count"] != 0:
                        raise Fail(rec["stage"], "compare_held finds %s differing elements in %s "
                                   "of the same outputs" % (o["held_diff_count"], o["name"]))
            checks.append(serial)
        rec["self_checks"] = len(checks)
        rec["var_over_exp_min"] = min(ratios) if ratios else None
        rec["degenerate"] = bool(ratios) and min(ratios) < DEGENERATE

        rec["stage"] = "baseline eager"
        r = call(st, {"op": "baseline", "mode": "eager", "warmup": a.warmup, "iters": a.iters,
                      "flush": True, "seed": a.seed + 7}, rec["stage"])
        rec["eager_ms"] = r["median_ms"]
        rec["eager_stddev_ms"] = r["stddev_ms"]
        if a.compile:
            rec["stage"] = "baseline compile"
            r = tr.handle(st, {"op": "baseline", "mode": "compile", "warmup": a.warmup,
                               "iters": a.iters, "flush": True, "seed": a.seed + 7})
            if st.fatal:
                raise Fail(rec["stage"], "%s: %s" % (r.get("code"), r.get("error")))
            if r.get("ok"):
                rec["compile_ms"] = r["median_ms"]
                rec["compile_setup_s"] = round(r["setup_s"], 2)
            else:
                rec["compile_error"] = "%s: %s" % (r.get("code"), first_line(r.get("error")))
        rec["stage"] = None
        rec["status"] = "ok"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def cleanup(st):
    torch = trc.torch
    try:
        trt.unload(st)
    except BaseException as e:  # noqa: B902 - whatever happens, go on
        say("    unload failed: %s" % first_line(e))
    gc.collect()
    if torch is not None:
        try:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        except Exception as e:
            say("    freeing GPU memory failed: %s" % first_line(e))


def ipc_selftest(st):
    """The driver's handle for a fresh allocation against PyTorch's."""
    torch = trc.torch
    if st.driver is None:
        return "driver unavailable: PyTorch's _share_cuda_ is used (memory leaks at unload)"
    try:
        x = torch.empty(trc.SHARED_MIN, dtype=torch.uint8, device=st.dev)
        h1, off1, seg = st.driver.share(x.data_ptr())
        h2, off2, _ = trcuda.torch_share(x)
        same = h1 == h2 and off1 == off2
        return "handles %s (driver offset %d, segment %d bytes; PyTorch offset %d)" % (
            "agree" if same else "DIFFER", off1, seg, off2)
    except Exception as e:
        return "self-test failed: %s" % trc.describe_exc(e)


def restart(reason):
    say("kb-ref-check: %s; starting again with --resume" % reason)
    sys.stdout.flush()
    sys.stderr.flush()
    argv = [x for x in sys.argv if x != "--resume"] + ["--resume"]
    os.execv(sys.executable, [sys.executable] + argv)


def summarize(out_path):
    recs = []
    if os.path.exists(out_path):
        with open(out_path) as f:
            for line in f:
                try:
                    recs.append(json.loads(line))
                except ValueError:
                    pass
    levels = {}
    for r in recs:
        lv = levels.setdefault(str(r.get("level")), {"ok": 0, "failed": 0, "timeout": 0})
        lv[r.get("status", "failed") if r.get("status") in lv else "failed"] += 1
    fails = [{"name": r["name"], "status": r.get("status"), "stage": r.get("stage"),
              "error": first_line(r.get("error") or "")}
             for r in recs if r.get("status") != "ok"]
    summary = {
        "problems": len(recs), "levels": levels, "failures": fails,
        "degenerate": [r["name"] for r in recs if r.get("degenerate")],
        "compile_failed": [{"name": r["name"], "error": r["compile_error"]}
                           for r in recs if r.get("compile_error")],
        "largest_peak": sorted(({"name": r["name"], "peak_gb": round(r.get("peak_bytes", 0) / 1e9, 2)}
                                for r in recs), key=lambda x: -x["peak_gb"])[:10],
        "leaks": [{"name": r["name"], "left_bytes": r["gpu_left_bytes"]}
                  for r in recs if (r.get("gpu_left_bytes") or 0) > (64 << 20)],
        "wall_s": round(sum(r.get("wall_s", 0) for r in recs), 1),
    }
    say("")
    say("summary: %d problems, %.0f s" % (summary["problems"], summary["wall_s"]))
    for lv in sorted(levels):
        c = levels[lv]
        say("  level %s: %d ok, %d failed, %d timeout" % (lv, c["ok"], c["failed"], c["timeout"]))
    if fails:
        say("failures:")
        for f in fails:
            say("  %s [%s, %s]: %s" % (f["name"], f["status"], f["stage"], f["error"]))
    if summary["degenerate"]:
        say("degenerate (outputs barely vary with the inputs): %s" % ", ".join(summary["degenerate"]))
    if summary["compile_failed"]:
        say("torch.compile failed: %s" % ", ".join(x["name"] for x in summary["compile_failed"]))
    if summary["leaks"]:
        say("GPU memory left after unload: %s" % ", ".join(
            "%s %.1f MB" % (x["name"], x["left_bytes"] / 1e6) for x in summary["leaks"]))
    say("largest peaks: %s" % ", ".join("%s %.1f GB" % (x["name"], x["peak_gb"])
                                        for x in summary["largest_peak"][:5]))
    with open(out_path + ".summary.json", "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    say("summary written to %s.summary.json" % out_path)
    return summary


def main(argv=None):
    ap = argparse.ArgumentParser(description="Run the live PyTorch reference (torchref.py's "
                                 "handlers, in-process) over KernelBench problems.")
    ap.add_argument("paths", nargs="+", help="problem files or folders (searched recursively)")
    ap.add_argument("--out", default="kb-ref-check.jsonl", help="one JSON line per problem")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per problem (default 120)")
    ap.add_argument("--grace", type=int, default=180,
                    help="seconds past --timeout before the run restarts itself (default 180)")
    ap.add_argument("--compile", action="store_true", help="also time torch.compile")
    ap.add_argument("--iters", type=int, default=10, help="timed baseline runs (default 10)")
    ap.add_argument("--warmup", type=int, default=2, help="baseline warm-up runs (default 2)")
    ap.add_argument("--seed", type=int, default=1234, help="first input seed")
    ap.add_argument("--filter", default=None, help="only problems whose name matches this regex")
    ap.add_argument("--limit", type=int, default=0, help="at most this many problems")
    ap.add_argument("--resume", action="store_true", help="skip the problems already in --out")
    ap.add_argument("--device", type=int, default=0, help="CUDA device ordinal")
    a = ap.parse_args(argv)

    probs = find_problems(a.paths)
    if a.filter:
        probs = [p for p in probs if re.search(a.filter, rel_name(p))]
    if a.limit:
        probs = probs[:a.limit]
    done = set()
    if a.resume and os.path.exists(a.out):
        with open(a.out) as f:
            for line in f:
                try:
                    done.add(json.loads(line)["name"])
                except (ValueError, KeyError):
                    pass
    elif os.path.exists(a.out):
        os.remove(a.out)

    st = trt.State()
    r = tr.handle(st, {"op": "hello", "device": a.device})
    if not r.get("ok"):
        sys.exit("kb-ref-check: hello failed: %s: %s" % (r.get("code"), r.get("error")))
    torch = trc.torch
    free, total = torch.cuda.mem_get_info()
    say("kb-ref-check: %d problems (%d done), PyTorch %s, %s, %.1f of %.1f GiB free, IPC %s"
        % (len(probs), len(done & {rel_name(p) for p in probs}), r["torch"], r["device_name"],
           free / 2**30, total / 2**30, ipc_selftest(st)))

    state = {"name": None, "start": None, "rec": None}
    lock = threading.Lock()
    outf = open(a.out, "a")

    def write(rec):
        with lock:
            outf.write(json.dumps(trc.sanitize(rec)) + "\n")
            outf.flush()
            os.fsync(outf.fileno())

    def watchdog():
        while True:
            time.sleep(5)
            with lock:
                name, start, rec = state["name"], state["start"], state["rec"]
            if name and time.monotonic() - start > a.timeout + a.grace:
                rec = dict(rec or {})
                rec.update(status="timeout", wall_s=round(time.monotonic() - start, 1),
                           error="hard timeout: still running %d s past --timeout %d (in %s)"
                           % (a.grace, a.timeout, rec.get("stage")))
                write(rec)
                restart("%s hung in %s" % (name, rec.get("stage")))

    threading.Thread(target=watchdog, daemon=True).start()

    def on_alarm(signum, frame):
        raise ProblemTimeout()

    signal.signal(signal.SIGALRM, on_alarm)
    todo = [p for p in probs if rel_name(p) not in done]
    for i, path in enumerate(todo):
        name = rel_name(path)
        rec = {"name": name, "level": level_of(path), "status": "failed", "stage": None,
               "error": None}
        t0 = time.monotonic()
        with lock:
            state.update(name=name, start=t0, rec=rec)
        try:
            torch.cuda.reset_peak_memory_stats()
        except Exception:
            pass
        CUR["rec"] = rec
        say("[%d/%d] %s ..." % (i + 1 + len(done), len(probs), name))
        signal.alarm(max(1, a.timeout))
        try:
            run_problem(st, path, a, rec)
        except ProblemTimeout:
            rec["status"] = "timeout"
            rec["error"] = "took more than %d s (in %s)" % (a.timeout, rec.get("stage"))
        except Fail as e:
            rec["error"] = e.msg
        except kb.BridgeError as e:
            rec["error"] = "kb2bundle: %s" % e
        except Exception as e:
            rec["error"] = trc.describe_exc(e)
            say("    %s" % traceback.format_exc().replace("\n", "\n    "))
        finally:
            signal.alarm(0)
        try:
            note_peak("end")
            arena = st.task.arena_bytes if st.task is not None else 0
            rec["arena_bytes"] = arena
            rec["peak_bytes"] = rec.pop("_peak", 0) + arena
        except Exception:
            pass
        try:
            cleanup(st)
            rec["gpu_left_bytes"] = int(torch.cuda.memory_allocated())
        except ProblemTimeout:
            pass
        rec["wall_s"] = round(time.monotonic() - t0, 2)
        with lock:
            state.update(name=None, start=None, rec=None)
        write(rec)
        gb = lambda k: (rec.get(k) or 0) / 1e9
        if rec["status"] == "ok":
            say("    ok %.1f s, peak %.2f GB, in %.2f GB, out %.2f GB, params %.2f GB, eager %.4g ms%s%s%s"
                % (rec["wall_s"], gb("peak_bytes"), gb("input_bytes"), gb("output_bytes"),
                   gb("parameter_bytes"), rec.get("eager_ms") or 0,
                   ", compile %.4g ms" % rec["compile_ms"] if rec.get("compile_ms") else
                   (", compile failed" if rec.get("compile_error") else ""),
                   ", var/exp %.3g" % rec["var_over_exp_min"]
                   if rec.get("var_over_exp_min") is not None else "",
                   " DEGENERATE" if rec.get("degenerate") else ""))
        else:
            say("    %s in %s after %.1f s: %s" % (rec["status"].upper(), rec.get("stage"),
                                                   rec["wall_s"], first_line(rec["error"], 400)))
        if st.fatal:
            outf.close()
            restart("the CUDA context was lost in %s" % name)
    outf.close()
    summarize(a.out)


if __name__ == "__main__":
    main()
