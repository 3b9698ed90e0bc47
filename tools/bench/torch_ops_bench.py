#!/usr/bin/env python3
"""The exported kernels as PyTorch operators, on a GPU: correctness and
speed of model_new.py's ModelNew against the problem's Model, eagerly,
under torch.compile and replayed from a CUDA graph.

    tools/bench/torch_ops_bench.py --export BIN/kc-export-test
        [--kb KERNELBENCH_DIR] [--out DIR] [--only CASE,...] [--iters N]

For each case of tests/gpu/kernelbench (default: the eight of docs/
benchmarks.md), in this one process (PyTorch starts once):

1. the problem becomes a bundle (tools/kernelbench/kb2bundle.py) and the
   case's kernel.cu + plan.json are exported as `kclaw result --out` does
   (kc-export-test: the same exporter, without an orchestrator);
2. Model and ModelNew are built with the same init arguments, ModelNew
   takes Model's weights by load_state_dict;
3. checks (each a failure when it does not hold): eager outputs within the
   task's tolerance of Model's; torch.compile(ModelNew, fullgraph=True)
   compiles (no graph break) and its outputs agree; a CUDA graph captured
   around ModelNew replays on fresh inputs copied into its static ones
   and agrees; ModelNew on a non-default stream agrees; inputs with other
   strides run the reference with exactly one warning and agree;
4. times Model and ModelNew in each mode (CUDA events around --iters
   calls, median of 5 repeats, warm L2) and prints the speedups.

Writes DIR/torch_ops.jsonl (one record per case) and DIR/torch_ops.md (the
table); exit 1 when a check failed.
"""
import argparse
import gc
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CASES = os.path.join(ROOT, "tests", "gpu", "kernelbench")
DEFAULT = ["relu", "softmax", "sum_reduce", "layernorm", "rmsnorm", "mse_loss",
           "depthwise_conv", "gemm_chain"]


def expect(case):
    e = {}
    for line in open(os.path.join(CASES, case, "expect")):
        if " " in line.strip():
            k, v = line.strip().split(" ", 1)
            e[k] = v
    return e


def load(path, name):
    """The module at path, imported as `name` would be: registered in
    sys.modules (torch.compile imports a custom op's module by name)."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def export(case, kb, exporter, work):
    """The case's model_new.py (and the problem module's path)."""
    problem = os.path.join(kb, expect(case)["problem"])
    bundle, out = os.path.join(work, case, "bundle"), os.path.join(work, case, "out")
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "kernelbench", "kb2bundle.py"),
                    problem, bundle, "--force"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([exporter, bundle, os.path.join(CASES, case), out], check=True,
                   stdout=subprocess.DEVNULL)
    return os.path.join(out, "model_new.py"), problem


def as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def agree(mod, got, want, what):
    for g, w in zip(as_tuple(got), as_tuple(want)):
        ok, max_abs, rel = mod._close(g, w.reshape(g.shape), mod._TASK["tolerance"])
        if not ok:
            raise AssertionError("%s: max abs error %.3g, relative norm %.3g" % (what, max_abs, rel))


def time_ms(torch, fn, iters):
    """Median over 5 repeats of the mean time of one call of fn, in ms."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            fn()
        b.record()
        b.synchronize()
        runs.append(a.elapsed_time(b) / iters)
    return sorted(runs)[2]


def capture(torch, fn, inputs):
    """A CUDA graph of fn(*inputs), warmed up on a side stream first."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn(*inputs)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn(*inputs)
    return g, out


def restrided(torch, x):
    """x with the same values and shape, other strides."""
    y = torch.empty(tuple(x.shape) + (2,), dtype=x.dtype, device=x.device)[..., 0]
    y.copy_(x)
    return y


def run_case(torch, case, model_new, problem, iters):
    rec = {"case": case, "checks": {}}
    prob = load(problem, "kclaw_problem_" + case)
    mod = load(model_new, "kclaw_model_new_" + case)
    rec["op"] = str(mod.KERNEL_OP)
    init = prob.get_init_inputs() if hasattr(prob, "get_init_inputs") else []
    torch.manual_seed(mod._TASK.get("init_seed", 0))
    model = prob.Model(*init).cuda().eval()
    new = mod.ModelNew(*init).cuda()
    missing = new.load_state_dict(model.state_dict(), strict=False).missing_keys
    assert not missing, "ModelNew's weights not in Model's state_dict: %s" % missing

    def inputs(seed):
        torch.manual_seed(seed)
        return [x.cuda() if isinstance(x, torch.Tensor) else x for x in prob.get_inputs()]

    # Each check drops what it made before the next: the largest case
    # (level1/36 RMSNorm, 7.5 GB a tensor) needs about nine tensors alive
    # at the peak, which fits; keeping every check's outputs did not.
    xs = inputs(1)
    with torch.no_grad():
        want = model(*xs)
    got = new(*xs)
    agree(mod, got, want, "eager")
    rec["checks"]["eager"] = True
    del got

    # Another stream: the operator launches on the current one.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = new(*xs)
    torch.cuda.current_stream().wait_stream(side)
    agree(mod, got, want, "side stream")
    rec["checks"]["side_stream"] = True
    del got

    # torch.compile: fullgraph=True fails on any graph break.
    torch._dynamo.reset()
    cnew = torch.compile(new, fullgraph=True)
    cmodel = torch.compile(model)
    t0 = time.monotonic()
    got = cnew(*xs)
    agree(mod, got, want, "compiled")
    rec["compile_s"] = round(time.monotonic() - t0, 1)
    del got, want
    expl = torch._dynamo.explain(new)(*xs)
    assert expl.graph_break_count == 0, "graph breaks: %s" % expl.break_reasons
    rec["checks"]["compiled_fullgraph"] = True
    del expl

    # A CUDA graph around ModelNew, replayed on fresh inputs (copied into
    # the captured ones; the reference's answer from those).
    g_new, out_new = capture(torch, new, xs)
    ys = inputs(2)
    for s, y in zip(xs, ys):
        if isinstance(s, torch.Tensor):
            s.copy_(y)
    del ys
    g_new.replay()
    torch.cuda.synchronize()
    with torch.no_grad():
        want2 = model(*xs)
    agree(mod, out_new, want2, "graph replay")
    rec["checks"]["graph_replay"] = True
    with torch.no_grad():
        g_model, _ = capture(torch, model, xs)

    # Other strides: the reference, one warning for two calls.
    zs = [restrided(torch, x) if isinstance(x, torch.Tensor) and x.dim() > 0 else x for x in xs]
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = new(*zs)
        new(*zs)
    ours = [x for x in w if "kclaw:" in str(x.message)]
    assert len(ours) == 1, "fallback warnings: %s" % [str(x.message) for x in ours]
    agree(mod, got, want2, "fallback")
    rec["checks"]["fallback_one_warning"] = True
    del got, zs, want2
    torch.cuda.empty_cache()

    with torch.no_grad():
        t = {
            "eager": (time_ms(torch, lambda: model(*xs), iters),
                      time_ms(torch, lambda: new(*xs), iters)),
            "compiled": (time_ms(torch, lambda: cmodel(*xs), iters),
                         time_ms(torch, lambda: cnew(*xs), iters)),
            "graph": (time_ms(torch, g_model.replay, iters),
                      time_ms(torch, g_new.replay, iters)),
        }
    for k, (m, n) in t.items():
        rec[k] = {"model_ms": round(m, 5), "model_new_ms": round(n, 5),
                  "speedup": round(m / n, 3) if n > 0 else None}
    return rec


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--export", required=True, help="the kc-export-test binary")
    ap.add_argument("--kb", default=None, help="the KernelBench tree")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--only", default="")
    ap.add_argument("--iters", type=int, default=50)
    a = ap.parse_args(argv)
    kb = a.kb or next((d for d in (os.path.join(ROOT, "..", "shared", "kernelbench"),
                                   os.path.join(ROOT, "shared", "kernelbench"),
                                   "/work/shared/kernelbench") if os.path.isdir(d)), None)
    if kb is None:
        sys.exit("no KernelBench tree: give --kb")
    import torch
    cases = a.only.split(",") if a.only else DEFAULT
    os.makedirs(a.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="kclaw-torch-ops-")
    bad, rows = 0, []
    with open(os.path.join(a.out, "torch_ops.jsonl"), "w") as jl:
        for c in cases:
            try:
                path, problem = export(c, kb, a.export, work)
                rec = run_case(torch, c, path, problem, a.iters)
                rec["ok"] = True
            except Exception as e:  # one case's failure is reported, the rest run
                bad += 1
                rec = {"case": c, "ok": False, "error": "%s: %s" % (type(e).__name__, e),
                       "trace": traceback.format_exc()[-2000:]}
            gc.collect()  # the case's models, graphs and tensors
            torch._dynamo.reset()
            torch.cuda.empty_cache()
            jl.write(json.dumps(rec) + "\n")
            jl.flush()
            rows.append(rec)
            print(c, "ok" if rec["ok"] else "FAILED: " + rec["error"], flush=True)
    lines = ["| case | eager: Model ms | ModelNew ms | speedup | compiled: Model ms | ModelNew ms | "
             "speedup | CUDA graph: Model ms | ModelNew ms | speedup |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if not r["ok"]:
            lines.append("| %s | failed: %s |" % (r["case"], r["error"].replace("|", "/")[:120]))
            continue
        cells = [r["case"]]
        for k in ("eager", "compiled", "graph"):
            cells += ["%.4f" % r[k]["model_ms"], "%.4f" % r[k]["model_new_ms"],
                      "%.2fx" % r[k]["speedup"]]
        lines.append("| " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    print("\n%s on %s, PyTorch %s\n" % ("torch_ops_bench", torch.cuda.get_device_name(),
                                        torch.__version__))
    print(table)
    with open(os.path.join(a.out, "torch_ops.md"), "w") as f:
        f.write(table + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
