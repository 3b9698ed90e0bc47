#!/usr/bin/env python3
"""What a torch-task evaluation costs beyond the GPU time of its parts, on
the GPU machine (issue 30 items 1-3, issue 25 item 3). A benchmark, not a
test: it prints figures and a table, and exits 1 only when something that
must work did not (a verdict, a parity check, a missing field).

    bench_torch_eval.py --bin BIN_DIR [--kb KERNELBENCH_DIR] [--out DIR]
                        [--budget-s 420] [--l1 25] [--l2 8] [--l3 6]

BIN_DIR holds kclaw and the sandbox binaries (tools/pack-gpu-suite.sh's
bin/); KERNELBENCH_DIR the problems (default: $KB_DIR, else shared/kernelbench
or ../shared/kernelbench from the repository root). Python with PyTorch
and CUDA runs this script and the reference process (KCLAW_PYTHON, default
this interpreter); the reference script is this tree's
gpu-sandbox/torchref.py. Logs and results go to --out (default $OUT, else
./bench-torch-eval).

Parts, in order (each skipped once the budget is spent, and said so):

1. parity: the reference process's comparison kernel against the PyTorch
   path it replaced (_compare_torch), on tensors of every dtype with NaN,
   infinities and wrong elements planted: the same bad and NaN counts, the
   same worst element, the same norms.
2. relu_inprocess: level1/19_ReLU (6.4 GB of input) in this process,
   through torchref.handle as the sandbox drives it: per timed run (inputs,
   the candidate = torch.relu into the shared output, check) the wall time
   against the GPU time of its parts (the replies' gpu_ms plus the
   candidate's events), with the device kernels and with the chunked
   PyTorch comparison.
3. precision: PyTorch eager of a matmul, a conv and a norm (level1/1, 63,
   40) timed at f32, tf32, f16 and bf16 by baseline's "precision".
4. warm: `kclaw eval` of the softmax case three times in a fresh home (the
   first starts the warm reference process) and of the mlp case once,
   then once with the warm process off (KCLAW_TORCHREF_WARM=0): wall
   times and verdicts.
5. cases: the honest KernelBench cases (tests/gpu/kernelbench) through
   `kclaw eval --no-compile-baseline`: overhead = the evaluation's wall
   minus the GPU time of its parts (torch.reference_gpu_ms, the reference's
   draws, forwards and comparisons, plus the candidate's runs times its
   median); for relu, a timed run's cost against its parts
   (sandbox.time_ms over torch.timed_gpu_ms + runs x median).
6. refonly: samples of Levels 1, 2 and 3 (every k-th problem), each a
   reference-only `kclaw eval --no-compile-baseline`: wall minus
   torch.reference_gpu_ms.
7. matched: the matmul_lt case with its matmul step in TF32: the result's
   speedup_matched_precision beside its speedup.

Writes DIR/bench.jsonl (one record per measurement), DIR/summary.json and
the logs of every kclaw eval (DIR/evals/*.json, *.stderr), and the warm
process's log; prints a table at the end.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
TORCHREF = os.path.join(ROOT, "gpu-sandbox", "torchref.py")
sys.path.insert(0, os.path.join(ROOT, "gpu-sandbox"))
import torchref_common as trc  # noqa: E402  (the reference process's parts: no PyTorch yet)
import torchref_measure as trm  # noqa: E402
import torchref_task as trt  # noqa: E402
HONEST = ["relu", "matmul_lt", "softmax", "sum_reduce", "layernorm", "rmsnorm", "mse_loss",
          "depthwise_conv", "scalar_mul", "gemm_chain", "mlp"]
PRECISION_PROBLEMS = [("matmul", "level1/1_Square_matrix_multiplication_.py"),
                      ("conv", "level1/63_conv_standard_2D__square_input__square_kernel.py"),
                      ("norm", "level1/40_LayerNorm.py")]


# ------------------------------------------------------- pure helpers

def every_kth(names, n):
    """n names spread evenly over the sorted list (the first, then every
    len/n-th): a deterministic sample."""
    if n <= 0 or not names:
        return []
    if n >= len(names):
        return list(names)
    step = len(names) / float(n)
    return [names[int(i * step)] for i in range(n)]


def problem_sort_key(f):
    head = f.split("_")[0]
    return (int(head) if head.isdigit() else 1 << 30, f)


def metric(res, name):
    for m in res.get("metrics") or []:
        if m.get("name") == name:
            return m.get("value")
    return None


def eval_parts_ms(res):
    """The GPU time of an evaluation's parts: the reference's draws,
    forwards and comparisons (torch.reference_gpu_ms) plus the candidate's
    runs at its median. None when the result lacks the figures."""
    ref = metric(res, "torch.reference_gpu_ms")
    if ref is None:
        return None
    runs = metric(res, "sandbox.candidate_runs") or 0
    med = (res.get("timing") or {}).get("median_ms") or 0
    return ref + runs * med


def eval_overhead_ms(res):
    parts = eval_parts_ms(res)
    wall = res.get("wall_ms")
    if parts is None or wall is None:
        return None
    return wall - parts


# Where a candidate evaluation's wall time goes: the sandbox's clocks
# (eval.c's phase metrics, the compile's own figure), and how much of the
# reference process's replies was not its GPU time.
STEPS = (("ceilings", "sandbox.ceilings_ms"), ("setup", "sandbox.setup_ms"),
         ("inputs", "sandbox.inputs_ms"), ("verify", "sandbox.verify_ms"),
         ("time", "sandbox.time_ms"), ("profile", "sandbox.profile_ms"),
         ("baseline", "sandbox.baseline_ms"), ("cleanup", "sandbox.cleanup_ms"))


def eval_steps(res):
    """{step: ms} of one evaluation: compile (before the phases' clock
    starts), each phase metric, `other` (the wall not under any of them),
    and `reference_host` (the reference's replies' wait minus their GPU
    time, part of the phases above)."""
    wall = res.get("wall_ms")
    if wall is None:
        return None
    out = {"compile": res.get("compile_ms") or 0.0}
    for step, name in STEPS:
        out[step] = metric(res, name) or 0.0
    out["other"] = wall - sum(out.values())
    wait, gpu = metric(res, "torch.reference_wait_ms"), metric(res, "torch.reference_gpu_ms")
    if wait is not None and gpu is not None:
        out["reference_host"] = wait - gpu
    return out


def timed_run_ratio(res):
    """A timed run's cost over the GPU time of its parts: the timing
    phase's wall over the timed runs' reference GPU time plus the
    candidate's runs at its median."""
    t = metric(res, "sandbox.time_ms")
    g = metric(res, "torch.timed_gpu_ms")
    n = metric(res, "torch.timed_inputs")
    med = (res.get("timing") or {}).get("median_ms")
    if None in (t, g, n, med) or n <= 0:
        return None
    parts = g + n * med
    return {"wall_per_run_ms": t / n, "parts_per_run_ms": parts / n,
            "ratio": t / parts if parts > 0 else None}


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, f="%.1f"):
    return "-" if x is None else f % x


# ------------------------------------------------------------ running

class Bench:
    def __init__(self, a):
        self.a = a
        self.t0 = time.monotonic()
        self.out = a.out
        self.records = []
        self.failures = []
        self.summary = {}
        os.makedirs(os.path.join(self.out, "evals"), exist_ok=True)
        self.jsonl = open(os.path.join(self.out, "bench.jsonl"), "w")
        self.home = tempfile.mkdtemp(prefix="kcb.", dir="/tmp")  # short: a socket lives in it
        self.warm_pids = set()

    def left_s(self):
        return self.a.budget_s - (time.monotonic() - self.t0)

    def record(self, part, **kw):
        rec = dict(part=part, **kw)
        self.records.append(rec)
        self.jsonl.write(json.dumps(rec) + "\n")
        self.jsonl.flush()
        return rec

    def fail(self, what):
        self.failures.append(what)
        print("FAIL: " + what, flush=True)

    def kclaw_eval(self, tag, bundle, cand=None, extra=(), env=None, home=None):
        """One `kclaw eval --json`: (result dict or None, wall s)."""
        argv = [os.path.join(self.a.bin, "kclaw"), "eval", bundle] + ([cand] if cand else []) + \
            ["--json", "--timeout-ms", "300000", "--home", home or self.home] + list(extra)
        e = dict(os.environ)
        e.update(env or {})
        t0 = time.monotonic()
        r = subprocess.run(argv, capture_output=True, text=True, env=e)
        wall = time.monotonic() - t0
        with open(os.path.join(self.out, "evals", tag + ".json"), "w") as f:
            f.write(r.stdout)
        with open(os.path.join(self.out, "evals", tag + ".stderr"), "w") as f:
            f.write(r.stderr)
        for line in r.stderr.splitlines():
            # "PyTorch reference process N (warm, ...) connected": ours to
            # stop at the end.
            if "(warm," in line and "reference process" in line:
                try:
                    self.warm_pids.add(int(line.split("reference process")[1].split()[0]))
                except (IndexError, ValueError):
                    pass
        try:
            return json.loads(r.stdout), wall
        except ValueError:
            self.fail("%s: kclaw eval printed no result (rc %d): %s"
                      % (tag, r.returncode, r.stderr.strip()[-300:]))
            return None, wall

    def stop_warm(self):
        for pid in sorted(self.warm_pids):
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        for d, _, files in os.walk(self.home):
            for f in files:
                if f.endswith(".log"):
                    shutil.copy(os.path.join(d, f), os.path.join(self.out, "warm-" + f))
        shutil.rmtree(self.home, ignore_errors=True)


def convert(kb2bundle, kb, rel, cache):
    dst = os.path.join(cache, rel.replace("/", "_")[:-3])
    if not os.path.exists(os.path.join(dst, "task.json")):
        kb2bundle.convert_torch(os.path.join(kb, rel), dst, log=lambda m: None)
    return dst


# ------------------------------------------------------------- parts

def part_parity(b, tr, torch):
    dev = torch.device("cuda")
    n = 3 * 1024 * 1024 + 77  # several blocks per thread, a ragged end
    gen = torch.Generator(device=dev)
    gen.manual_seed(7)
    cases = 0
    for dt in ("f32", "f16", "bf16", "f64", "i32", "i64", "i8", "u8", "bool"):
        tdt = getattr(torch, trc.DTYPES[dt][0])
        if dt in ("f32", "f16", "bf16", "f64"):
            e = torch.randn(n, generator=gen, device=dev, dtype=torch.float32).to(tdt)
            g = (e.float() * (1 + 1e-3 * torch.randn(n, generator=gen, device=dev))).to(tdt)
            g[5] = float("nan")
            e[6] = float("nan")
            g[7] = e[7] = float("nan")
            g[8] = float("inf")
            e[9] = float("-inf")
            g[9] = float("-inf")
            g[n - 1] = e[n - 1] * 3 + 1
            g[12345] = g[12346] = e[12345] + 1000  # a tie: the lower index is the worst
            e[12346] = e[12345]
        elif dt == "bool":
            e = torch.rand(n, generator=gen, device=dev) < 0.5
            g = e.clone()
            g[3] = ~g[3]
        else:
            lo, hi = (0, 200) if dt == "u8" else (-100, 100)
            e = torch.randint(lo, hi, (n,), generator=gen, device=dev).to(tdt)
            g = e.clone()
            g[11] = g[11] + 1
            g[n - 2] = g[n - 2] - 1
        for atol, rtol in ((1e-2, 1e-2), (0.0, 0.0)):
            k = trc.KERN.compare(g, e, dt, atol, rtol)
            p = trm._compare_torch(g, e, dt, atol, rtol)
            cases += 1
            for key in ("count", "bad", "nan", "worst"):
                if k[key] != p[key]:
                    b.fail("parity %s atol %g: %s %r, the PyTorch path %r" % (dt, atol, key, k[key], p[key]))
            for key in ("max_abs", "max_rel", "err_norm", "exp_norm", "expected", "got"):
                x, y = k[key], p[key]
                if not ((x != x and y != y) or x == y or abs(x - y) <= 1e-9 * max(abs(x), abs(y))):
                    b.fail("parity %s atol %g: %s %r, the PyTorch path %r" % (dt, atol, key, x, y))
    # The checksum and the norms: a changed word changes the sum; the
    # norms agree with float64 PyTorch.
    w = torch.randint(-1 << 62, 1 << 62, (n,), generator=gen, device=dev, dtype=torch.int64)
    s0 = trc.KERN.checksum(w)
    w[n // 2] += 1
    if trc.KERN.checksum(w) == s0:
        b.fail("parity: the checksum did not change with a word")
    x = torch.randn(n, generator=gen, device=dev)
    y = torch.randn(n, generator=gen, device=dev)
    s1, s2, sd = trc.KERN.sums(x, y, "f32")
    want = (x.double().sum().item(), x.double().square().sum().item(), (x.double() - y.double()).square().sum().item())
    for got, w_ in zip((s1, s2, sd), want):
        if abs(got - w_) > 1e-9 * max(1.0, abs(w_)):
            b.fail("parity: sums %r, float64 PyTorch %r" % ((s1, s2, sd), want))
            break
    b.record("parity", cases=cases, kernels=trc.KERN.what)
    print("parity: %d comparisons of 9 dtypes agree with the PyTorch path (%s)" % (cases, trc.KERN.what),
          flush=True)


def _load(tr, st, kb, rel, kb2bundle, cache):
    bundle = convert(kb2bundle, kb, rel, cache)
    with open(os.path.join(bundle, "task.json")) as f:
        task = json.load(f)
    with open(os.path.join(bundle, task["reference"].get("source", "model.py"))) as f:
        source = f.read()
    req = {"op": "load", "key": rel, "source": source, "init_seed": task["reference"]["init_seed"],
           "tensors": task["tensors"], "scalars": [t["name"] for t in task["tensors"] if t["kind"] == "scalar"]}
    r = tr.handle(st, req)
    if not r.get("ok"):
        raise RuntimeError("load %s: %s" % (rel, r.get("error")))
    return task


def _call(tr, st, req):
    r = tr.handle(st, req)
    if not r.get("ok"):
        raise RuntimeError("%s: %s" % (req.get("op"), r.get("error")))
    return r


def part_relu_inprocess(b, tr, torch, kb, kb2bundle, cache, runs=8):
    st = trt.State()
    _call(tr, st, {"op": "hello", "device": 0})
    _load(tr, st, kb, "level1/19_ReLU.py", kb2bundle, cache)
    t = st.task
    x = t.by_kind("input")[0].view
    out = t.by_kind("output")[0].view
    chk = {"op": "check", "atol": 1e-2, "rtol": 1e-2, "max_rel_norm": 1e-2, "hold": False,
           "compare_held": False}
    for s in range(2):
        _call(tr, st, {"op": "inputs", "serial": s, "seed": 100 + s, "variant": 0, "keep": True})
        torch.clamp(x, min=0, out=out)
        _call(tr, st, dict(chk, serial=s))
    kern = trc.KERN
    for path in ("kernels", "pytorch"):
        trc.set_kernels(kern if path == "kernels" else None)
        walls, parts = [], []
        for i in range(runs if path == "kernels" else max(2, runs // 4)):
            serial = 1000 + i
            torch.cuda.synchronize()
            t0 = time.monotonic()
            r1 = _call(tr, st, {"op": "inputs", "serial": serial, "seed": 5000 + i, "variant": i % 7,
                                "keep": False})
            a = torch.cuda.Event(enable_timing=True)
            c = torch.cuda.Event(enable_timing=True)
            a.record()
            torch.clamp(x, min=0, out=out)
            c.record()
            r2 = _call(tr, st, dict(chk, serial=serial))
            wall = (time.monotonic() - t0) * 1e3
            if r2["outputs"][0]["bad"] != 0:
                b.fail("relu in-process: timed run %d checked bad (%s)" % (i, r2["outputs"][0]))
            walls.append(wall)
            parts.append(r1["gpu_ms"] + a.elapsed_time(c) + r2["gpu_ms"])
        rec = b.record("relu_inprocess", path=path, runs=len(walls), wall_ms=med(walls),
                       parts_ms=med(parts), ratio=med([w / p for w, p in zip(walls, parts)]))
        print("relu 6.4 GB in-process (%s): a timed run %.1f ms, its parts %.1f ms: %.2fx"
              % (path, rec["wall_ms"], rec["parts_ms"], rec["ratio"]), flush=True)
    trc.set_kernels(kern)
    _call(tr, st, {"op": "unload"})
    return st


def part_precision(b, tr, torch, kb, kb2bundle, cache):
    st = trt.State()
    _call(tr, st, {"op": "hello", "device": 0})
    for label, rel in PRECISION_PROBLEMS:
        if b.left_s() < 60:
            b.record("precision", problem=rel, skipped="budget")
            continue
        _load(tr, st, kb, rel, kb2bundle, cache)
        row = {}
        for prec in ("f32", "tf32", "f16", "bf16"):
            r = _call(tr, st, {"op": "baseline", "mode": "eager", "warmup": 3, "iters": 20, "flush": True,
                               "seed": 99, "precision": prec})
            if r.get("precision") != prec:
                b.fail("precision %s: the reply says %r" % (prec, r.get("precision")))
            row[prec] = r["median_ms"]
        b.record("precision", problem=rel, kind=label, **{p + "_ms": v for p, v in row.items()})
        print("precision %-6s %s: f32 %.3f ms, tf32 %.3f ms, f16 %.3f ms, bf16 %.3f ms"
              % (label, rel, row["f32"], row["tf32"], row["f16"], row["bf16"]), flush=True)
        _call(tr, st, {"op": "unload"})


def part_warm(b, kb, kb2bundle, cache):
    soft = convert(kb2bundle, kb, "level1/23_Softmax.py", cache)
    mlp = convert(kb2bundle, kb, "level3/1_MLP.py", cache)
    rows = []
    for i, (tag, bundle, case, env) in enumerate([
            ("softmax-1", soft, "softmax", {}), ("softmax-2", soft, "softmax", {}),
            ("softmax-3", soft, "softmax", {}), ("mlp-1", mlp, "mlp", {}),
            ("softmax-private", soft, "softmax", {"KCLAW_TORCHREF_WARM": "0"})]):
        if b.left_s() < 30:
            b.record("warm", eval=tag, skipped="budget")
            continue
        res, wall = b.kclaw_eval("warm-" + tag, bundle, os.path.join(HERE, case), env=env)
        st = (res or {}).get("status")
        rows.append((tag, wall, st))
        b.record("warm", eval=tag, wall_s=wall, status=st, speedup=(res or {}).get("speedup"),
                 compile_speedup=(res or {}).get("compile_speedup"))
        print("warm: kclaw eval %-16s %6.2f s  %s %.2fx" % (tag, wall, st, (res or {}).get("speedup") or 0),
              flush=True)
    verdicts = {st for tag, _, st in rows if tag.startswith("softmax")}
    if len(verdicts) > 1:
        b.fail("warm: the softmax verdicts differ: %s" % sorted(map(str, verdicts)))
    b.summary["warm_s"] = {tag: round(w, 2) for tag, w, _ in rows}


def part_cases(b, kb, kb2bundle, cache):
    for case in HONEST:
        if b.left_s() < 40:
            b.record("cases", case=case, skipped="budget")
            continue
        prob = None
        for line in open(os.path.join(HERE, case, "expect")):
            if line.startswith("problem "):
                prob = line.split(None, 1)[1].strip()
        bundle = convert(kb2bundle, kb, prob, cache)
        # Twice: the first evaluation loads the problem into the warm
        # reference process (what a new problem costs), the second finds
        # it loaded (what every later candidate of an optimisation run
        # costs: the sandbox keeps its task's reference loaded).
        for part, tag in (("cases", "case-"), ("cases_loaded", "case-again-")):
            res, wall = b.kclaw_eval(tag + case, bundle, os.path.join(HERE, case),
                                     extra=["--no-compile-baseline"])
            if res is None:
                break
            st = res.get("status")
            if st != "ok":
                b.fail("case %s: %s: %s" % (case, st, (res.get("message") or "")[:200]))
            rec = b.record(part, case=case, problem=prob, level=int(prob[5]), status=st,
                           wall_ms=res.get("wall_ms"), parts_ms=eval_parts_ms(res),
                           overhead_ms=eval_overhead_ms(res), timed=timed_run_ratio(res),
                           reference_wait_ms=metric(res, "torch.reference_wait_ms"),
                           reference_calls=metric(res, "torch.reference_calls"),
                           staged_serials=metric(res, "torch.staged_serials"),
                           compile_cached=bool(res.get("compile_cached")), steps=eval_steps(res))
            tr_ = rec["timed"] or {}
            print("%s %-15s %s: wall %s ms, parts %s ms, overhead %s ms; a timed run %s ms for %s ms of parts (%sx)"
                  % (part, case, st, fmt(rec["wall_ms"]), fmt(rec["parts_ms"]), fmt(rec["overhead_ms"]),
                     fmt(tr_.get("wall_per_run_ms")), fmt(tr_.get("parts_per_run_ms")),
                     fmt(tr_.get("ratio"), "%.2f")), flush=True)


def part_refonly(b, kb, kb2bundle, cache):
    for lv, n in ((1, b.a.l1), (2, b.a.l2), (3, b.a.l3)):
        d = os.path.join(kb, "level%d" % lv)
        names = sorted((f for f in os.listdir(d) if f.endswith(".py")), key=problem_sort_key)
        for f in every_kth(names, n):
            rel = "level%d/%s" % (lv, f)
            if b.left_s() < 25:
                b.record("refonly", problem=rel, level=lv, skipped="budget")
                continue
            try:
                bundle = convert(kb2bundle, kb, rel, cache)
            except Exception as e:
                b.record("refonly", problem=rel, level=lv, skipped="kb2bundle: %s" % str(e)[:200])
                continue
            res, wall = b.kclaw_eval("ref-L%d-%s" % (lv, f[:-3]), bundle, extra=["--no-compile-baseline"])
            if res is None:
                continue
            st = res.get("status")
            rec = b.record("refonly", problem=rel, level=lv, status=st, wall_ms=res.get("wall_ms"),
                           parts_ms=metric(res, "torch.reference_gpu_ms"),
                           overhead_ms=(res.get("wall_ms") - metric(res, "torch.reference_gpu_ms"))
                           if res.get("wall_ms") is not None and metric(res, "torch.reference_gpu_ms") is not None
                           else None,
                           load_ms=metric(res, "sandbox.load_ms"))
            print("refonly %-60s %s: wall %s ms, reference GPU %s ms, overhead %s ms"
                  % (rel, st, fmt(rec["wall_ms"]), fmt(rec["parts_ms"]), fmt(rec["overhead_ms"])), flush=True)


def part_matched(b, kb, kb2bundle, cache):
    src = os.path.join(HERE, "matmul_lt")
    dst = os.path.join(b.out, "matmul_lt_tf32")
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    with open(os.path.join(dst, "plan.json")) as f:
        plan = json.load(f)
    plan["steps"][0]["matmul"]["tf32"] = True
    with open(os.path.join(dst, "plan.json"), "w") as f:
        json.dump(plan, f)
    bundle = convert(kb2bundle, kb, "level1/1_Square_matrix_multiplication_.py", cache)
    res, wall = b.kclaw_eval("matched-matmul_lt_tf32", bundle, dst, extra=["--no-compile-baseline"])
    if res is None:
        return
    smp = res.get("speedup_matched_precision")
    b.record("matched", status=res.get("status"), speedup=res.get("speedup"), speedup_matched_precision=smp,
             tf32_ms=metric(res, "torch.matched_precision.tf32_ms"), reference_ms=res.get("reference_ms"))
    print("matched: matmul_lt in TF32: %s, %.2fx eager f32, %s at matched precision (eager TF32 %s ms)"
          % (res.get("status"), res.get("speedup") or 0, fmt(smp, "%.2fx"),
             fmt(metric(res, "torch.matched_precision.tf32_ms"), "%.4f")), flush=True)
    if res.get("status") == "ok" and not smp:
        b.fail("matched: an OK TF32 candidate without speedup_matched_precision")


def table(b):
    recs = b.records
    cases = [r for r in recs if r["part"] == "cases" and r.get("overhead_ms") is not None]
    ref = [r for r in recs if r["part"] == "refonly" and r.get("overhead_ms") is not None]
    relu = next((r for r in cases if r["case"] == "relu"), None)
    inproc = {r["path"]: r for r in recs if r["part"] == "relu_inprocess" and "path" in r}
    lines = ["", "| measurement | value | target |", "|---|---|---|"]
    lines.append("| overhead, candidate evaluations, Level 1 (median of %d, ms) | %s | < 100 |"
                 % (len([r for r in cases if r["level"] == 1]), fmt(med([r["overhead_ms"] for r in cases if r["level"] == 1]))))
    lines.append("| overhead, candidate evaluations, Levels 2-3 (median of %d, ms) | %s | < 150 |"
                 % (len([r for r in cases if r["level"] > 1]), fmt(med([r["overhead_ms"] for r in cases if r["level"] > 1]))))
    loaded = [r for r in recs if r["part"] == "cases_loaded" and r.get("overhead_ms") is not None]
    for lv, what, target in ((1, "Level 1", "< 100"), (2, "Levels 2-3", "< 150")):
        sel = [r["overhead_ms"] for r in loaded if (r["level"] == 1) == (lv == 1)]
        lines.append("| overhead, candidate evaluations of a problem already loaded, %s (median of %d, ms) | %s | %s |"
                     % (what, len(sel), fmt(med(sel)), target))
    lines.append("| overhead, reference-only evaluations, Level 1 (median of %d, ms) | %s | - |"
                 % (len([r for r in ref if r["level"] == 1]), fmt(med([r["overhead_ms"] for r in ref if r["level"] == 1]))))
    lines.append("| overhead, reference-only evaluations, Levels 2-3 (median of %d, ms) | %s | - |"
                 % (len([r for r in ref if r["level"] > 1]), fmt(med([r["overhead_ms"] for r in ref if r["level"] > 1]))))
    if relu and relu.get("timed"):
        t = relu["timed"]
        lines.append("| 6.4 GB ReLU, a timed run through the sandbox / its parts (ms) | %s / %s = %sx | <= 1.5x |"
                     % (fmt(t.get("wall_per_run_ms")), fmt(t.get("parts_per_run_ms")), fmt(t.get("ratio"), "%.2f")))
    for path, r in sorted(inproc.items()):
        lines.append("| 6.4 GB ReLU, a timed run in the reference alone, %s comparison (ms) | %s / %s = %sx | - |"
                     % (path, fmt(r["wall_ms"]), fmt(r["parts_ms"]), fmt(r["ratio"], "%.2f")))
    for tag, w in (b.summary.get("warm_s") or {}).items():
        lines.append("| kclaw eval %s (s) | %.2f | %s |" % (tag, w, "< 3" if tag in ("softmax-2", "softmax-3", "mlp-1") else "-"))
    for r in recs:
        if r["part"] == "precision" and "f32_ms" in r:
            lines.append("| eager %s (%s): f32 / tf32 / f16 / bf16 ms | %.3f / %.3f / %.3f / %.3f | - |"
                         % (r["kind"], r["problem"], r["f32_ms"], r["tf32_ms"], r["f16_ms"], r["bf16_ms"]))
        if r["part"] == "matched":
            lines.append("| matmul_lt in TF32: speedup / speedup_matched_precision | %s / %s | - |"
                         % (fmt(r.get("speedup"), "%.2f"), fmt(r.get("speedup_matched_precision"), "%.2f")))
    lines += steps_table(recs)
    skipped = [r for r in recs if r.get("skipped")]
    lines.append("")
    lines.append("%d measurements, %d skipped, %d failures, %.0f s" % (
        len(recs), len(skipped), len(b.failures), time.monotonic() - b.t0))
    return "\n".join(lines)


def steps_table(recs):
    """The median of each step of the candidate evaluations, first of a
    problem and with it already loaded (ms)."""
    names = ["compile"] + [s for s, _ in STEPS] + ["other", "reference_host"]
    cols = []
    for part in ("cases", "cases_loaded"):
        cols.append([r["steps"] for r in recs if r["part"] == part and r.get("steps")])
    if not any(cols):
        return []
    lines = ["", "| step of a candidate evaluation (median, ms) | new problem (%d) | already loaded (%d) |"
             % (len(cols[0]), len(cols[1])), "|---|---|---|"]
    for n in names:
        lines.append("| %s | %s | %s |" % (n, fmt(med([c.get(n) for c in cols[0]])),
                                          fmt(med([c.get(n) for c in cols[1]]))))
    return lines


def default_kb():
    for d in (os.environ.get("KB_DIR"), os.path.join(ROOT, "shared", "kernelbench"),
              os.path.join(ROOT, "..", "shared", "kernelbench")):
        if d and os.path.isdir(os.path.join(d, "level1")):
            return d
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--kb", default=None)
    ap.add_argument("--out", default=os.environ.get("OUT") or "bench-torch-eval")
    ap.add_argument("--budget-s", type=float, default=420)
    ap.add_argument("--l1", type=int, default=25)
    ap.add_argument("--l2", type=int, default=8)
    ap.add_argument("--l3", type=int, default=6)
    ap.add_argument("--skip", default="", help="parts to leave out, comma-separated")
    a = ap.parse_args(argv)
    a.kb = a.kb or default_kb()
    if a.kb is None:
        sys.exit("no KernelBench problems: give --kb DIR (the folder with level1/ level2/ level3/)")
    a.bin = os.path.abspath(a.bin)
    a.out = os.path.abspath(a.out)
    os.makedirs(a.out, exist_ok=True)
    os.environ.setdefault("KCLAW_PYTHON", sys.executable)
    os.environ["KCLAW_TORCHREF"] = TORCHREF
    os.environ.setdefault("KCLAW_TORCHREF_IDLE_S", "120")
    skip = set(x for x in a.skip.split(",") if x)
    b = Bench(a)
    sys.path.insert(0, os.path.join(ROOT, "gpu-sandbox"))
    sys.path.insert(0, os.path.join(ROOT, "tools", "kernelbench"))
    import torch
    import torchref as tr
    import kb2bundle
    cache = os.path.join(a.out, "bundles")
    os.makedirs(cache, exist_ok=True)
    print("bench_torch_eval: PyTorch %s, %s, problems %s, binaries %s, out %s"
          % (torch.__version__, torch.cuda.get_device_name(0), a.kb, a.bin, a.out), flush=True)
    parts = [("parity", lambda: part_parity(b, tr, torch)),
             ("relu_inprocess", lambda: part_relu_inprocess(b, tr, torch, a.kb, kb2bundle, cache)),
             ("precision", lambda: part_precision(b, tr, torch, a.kb, kb2bundle, cache)),
             ("warm", lambda: part_warm(b, a.kb, kb2bundle, cache)),
             ("cases", lambda: part_cases(b, a.kb, kb2bundle, cache)),
             ("matched", lambda: part_matched(b, a.kb, kb2bundle, cache)),
             ("refonly", lambda: part_refonly(b, a.kb, kb2bundle, cache))]
    try:
        # The in-process parts need the kernels: hello compiles them.
        st = trt.State()
        r = tr.handle(st, {"op": "hello", "device": 0})
        if not r.get("ok") or trc.KERN is None:
            b.fail("hello: %s; the device kernels: %s" % (r.get("error"), r.get("kernels")))
            skip |= {"parity", "relu_inprocess"}
        for name, fn in parts:
            if name in skip:
                b.record(name, skipped="--skip" if name in a.skip.split(",") else "no kernels")
                continue
            if b.left_s() < 20:
                b.record(name, skipped="budget")
                continue
            t0 = time.monotonic()
            try:
                fn()
            except Exception as e:
                b.fail("%s: %s: %s" % (name, type(e).__name__, str(e)[:300]))
            if name == "precision":
                # The service's parts want the GPU's memory.
                import gc
                gc.collect()
                torch.cuda.empty_cache()
            print("-- %s: %.1f s (%.0f s left)" % (name, time.monotonic() - t0, b.left_s()), flush=True)
    finally:
        b.stop_warm()
    text = table(b)
    b.summary.update(failures=b.failures, records=len(b.records))
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(b.summary, f, indent=1)
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write(text + "\n")
    print(text)
    for f in b.failures:
        print("FAIL: " + f)
    return 1 if b.failures else 0


if __name__ == "__main__":
    sys.exit(main())
