#!/usr/bin/env python3
"""The same kernel through kclaw and through KernelBench's own evaluator.

    side_by_side.py KCLAW_BIN_DIR KERNELBENCH_PROBLEMS KERNELBENCH_SRC
                    [--cases relu,scalar_mul,...] [--trials 100]

For each case of tests/gpu/kernelbench (kernel.cu + plan.json for a
KernelBench problem), on one GPU in one run:

  kclaw        tools/kernelbench/kb2bundle.py, then `kclaw eval BUNDLE CASE
               --json` (a fresh sandbox per evaluation, the live PyTorch
               reference, every check of docs/plan.md);
  KernelBench  its eval.py's eval_kernel_against_ref(Model source, ModelNew
               source, measure_performance=True), where ModelNew loads the
               same kernel.cu with torch.utils.cpp_extension.load_inline and
               launches it as plan.json says.

Prints both wall times and both measured kernel times (kclaw: the median
of its timed runs; KernelBench: the mean of its cuda_event trials) and
both reference times. KERNELBENCH_SRC is KernelBench's `src` folder, fetched
from its repository (not part of kclaw). Its package imports LLM clients
(openai, litellm, dotenv, tqdm, requests, pydantic) that evaluation never
calls; those missing here are replaced by empty stand-ins, and the script
says which. GPU machine with PyTorch, nvcc and ninja only.
"""
import argparse
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CASES = os.path.join(ROOT, "tests", "gpu", "kernelbench")


def stub_missing():
    """Empty stand-ins for the LLM-client modules KernelBench imports at
    module level; returns the names stubbed."""
    stubbed = []

    def need(name, build):
        try:
            __import__(name)
        except Exception:
            m = types.ModuleType(name)
            build(m)
            sys.modules[name] = m
            stubbed.append(name)

    need("dotenv", lambda m: setattr(m, "load_dotenv", lambda *a, **k: None))
    need("tqdm", lambda m: setattr(m, "tqdm", lambda it=None, *a, **k: it))
    need("openai", lambda m: setattr(m, "OpenAI", object))
    need("litellm", lambda m: setattr(m, "completion", lambda *a, **k: None))
    need("requests", lambda m: None)

    def pyd(m):
        class BaseModel:
            def __init__(self, **kw):
                for k, v in type(self).__dict__.items():
                    if not k.startswith("_") and not callable(v):
                        setattr(self, k, v)
                self.__dict__.update(kw)
        m.BaseModel = BaseModel
    need("pydantic", pyd)
    return stubbed


def read_expect(path):
    e = {}
    for line in open(path):
        if " " in line.strip():
            k, v = line.strip().split(" ", 1)
            e[k] = v
    return e


def forward_shape(problem_src):
    """forward()'s argument names, and the output's shape, from meta tensors
    (no memory, no GPU)."""
    import torch
    ctx = {}
    exec(compile(problem_src, "<problem>", "exec"), ctx)
    names = [p for p in inspect.signature(ctx["Model"].forward).parameters if p != "self"]
    with torch.device("meta"):
        model = ctx["Model"](*ctx["get_init_inputs"]())
        args = ctx["get_inputs"]()
        out = model(*args)
    return names, list(out.shape), [torch.is_tensor(a) for a in args]


def launcher(kernel_cu, plan, names, is_tensor, out_shape):
    """CUDA C++ for load_inline: the kernel's own source, then kclaw_run(tensors,
    scalars), which allocates the output and the plan's scratch and launches
    every step as plan.json says (cudaLaunchKernel, so no parameter types are
    needed)."""
    tensors = [n for n, t in zip(names, is_tensor) if t]
    scalars = [n for n, t in zip(names, is_tensor) if not t]
    lines = ["#include <torch/extension.h>", "#include <ATen/cuda/CUDAContext.h>",
             "#include <cuda_runtime.h>", kernel_cu, "",
             "torch::Tensor kclaw_run(std::vector<torch::Tensor> t, std::vector<double> s) {",
             "  auto out = torch::empty({%s}, t[0].options().dtype(torch::kFloat32));"
             % ", ".join(str(d) for d in out_shape) if out_shape else
             "  auto out = torch::empty({}, t[0].options().dtype(torch::kFloat32));",
             "  cudaStream_t stream = at::cuda::getCurrentCUDAStream();"]
    ptr = {n: "t[%d].data_ptr()" % i for i, n in enumerate(tensors)}
    ptr["out"] = "out.data_ptr()"
    for i, sc in enumerate(plan.get("scratch", [])):
        lines.append("  auto scratch%d = torch::empty({%d}, t[0].options().dtype(torch::kUInt8));"
                     % (i, sc["bytes"]))
        ptr[sc["name"]] = "scratch%d.data_ptr()" % i
    ctype = {"i32": "int", "i64": "long long", "f32": "float", "f64": "double"}
    for k, st in enumerate(plan["steps"]):
        lines.append("  {")
        refs = []
        for j, a in enumerate(st["args"]):
            v = "a%d_%d" % (k, j)
            if isinstance(a, str) and a in ptr:
                lines.append("    void *%s = %s;" % (v, ptr[a]))
            elif isinstance(a, str) and a in scalars:
                lines.append("    float %s = (float)s[%d];" % (v, scalars.index(a)))
            elif isinstance(a, dict) and len(a) == 1:
                (ty, val), = a.items()
                lines.append("    %s %s = (%s)%r;" % (ctype[ty], v, ctype[ty], val))
            else:
                raise ValueError("plan argument %r is not supported here" % (a,))
            refs.append("&" + v)
        g = st["grid"] + [1] * (3 - len(st["grid"]))
        b = st["block"] + [1] * (3 - len(st["block"]))
        lines += ["    void *args[] = {%s};" % ", ".join(refs),
                  "    cudaLaunchKernel((const void *)%s, dim3(%d, %d, %d), dim3(%d, %d, %d), args, %d, stream);"
                  % (st["kernel"], g[0], g[1], g[2], b[0], b[1], b[2], st.get("shared_bytes", 0)),
                  "  }"]
    lines += ["  return out;", "}"]
    return "\n".join(lines)


def model_new(cuda_src, name):
    return '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_ext = load_inline(name=%r, cpp_sources="torch::Tensor kclaw_run(std::vector<torch::Tensor> t, std::vector<double> s);",
                   cuda_sources=%r, functions=["kclaw_run"], verbose=False,
                   extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, *args):
        ts = [a.contiguous() for a in args if torch.is_tensor(a)]
        ss = [float(a) for a in args if not torch.is_tensor(a)]
        return _ext.kclaw_run(ts, ss)
''' % (name, cuda_src)


def run_kclaw(bindir, problem, case, home):
    bundle = os.path.join(home, "bundle")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools/kernelbench/kb2bundle.py"),
                        problem, bundle, "--force"], capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": "kb2bundle: " + r.stderr.strip()[-300:]}
    t1 = time.monotonic()
    r = subprocess.run([os.path.join(bindir, "kclaw"), "eval", "--home", home, bundle, case,
                        "--json", "--timeout-ms", "400000"], capture_output=True, text=True)
    t2 = time.monotonic()
    try:
        res = json.loads(r.stdout)
    except ValueError:
        return {"error": "kclaw eval: " + r.stderr.strip()[-300:]}
    return {"import_s": t1 - t0, "wall_s": t2 - t1, "status": res.get("status"),
            "kernel_ms": (res.get("timing") or {}).get("median_ms"),
            "ref_ms": res.get("reference_ms"), "runs": (res.get("timing") or {}).get("iterations")}


def run_kernelbench(kb_src, problem_src, custom_src, trials, build_dir):
    sys.path.insert(0, kb_src)
    from kernelbench import eval as kbeval
    t0 = time.monotonic()
    r = kbeval.eval_kernel_against_ref(problem_src, custom_src, measure_performance=True,
                                       num_correct_trials=5, num_perf_trials=trials,
                                       build_dir=build_dir, verbose=False,
                                       check_for_excessive_speedup=False)
    wall = time.monotonic() - t0
    if r is None:
        return {"error": "eval_kernel_against_ref returned None (compilation failed)"}
    d = r.__dict__ if not hasattr(r, "model_dump") else r.model_dump()
    return {"wall_s": wall, "correct": d.get("correctness"), "compiled": d.get("compiled"),
            "kernel_ms": d.get("runtime"), "ref_ms": d.get("ref_runtime"),
            "meta": {k: str(v)[:200] for k, v in (d.get("metadata") or {}).items()}}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("problems")
    ap.add_argument("kb_src")
    ap.add_argument("--cases", default="relu,scalar_mul,softmax")
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    if shutil.which("ninja") is None:
        try:
            import ninja  # noqa: F401 (the pip package puts the binary on a path torch finds)
        except ImportError:
            print("side_by_side: ninja is not installed; torch's load_inline needs it")
            return 2
    stubbed = stub_missing()
    if stubbed:
        print("KernelBench's LLM-client imports stood in for (not used by evaluation): "
              + ", ".join(stubbed))
    # Shapes and launchers first: importing KernelBench changes torch.randn.
    todo = []
    for c in a.cases.split(","):
        e = read_expect(os.path.join(CASES, c, "expect"))
        problem = os.path.join(a.problems, e["problem"])
        src = open(problem).read()
        names, shape, is_tensor = forward_shape(src)
        plan = json.load(open(os.path.join(CASES, c, "plan.json")))
        cuda = launcher(open(os.path.join(CASES, c, "kernel.cu")).read(), plan, names,
                        is_tensor, shape)
        todo.append((c, e, problem, src, cuda))
    rows = []
    for c, e, problem, src, cuda in todo:
        home = tempfile.mkdtemp(prefix="kclaw-sbs-")
        k = run_kclaw(a.bin, problem, os.path.join(CASES, c), home)
        b = run_kernelbench(a.kb_src, src, model_new(cuda, "kclaw_" + c), a.trials,
                            os.path.join(home, "kb-build"))
        rows.append((c, e["problem"], k, b))
        print(json.dumps({"case": c, "kclaw": k, "kernelbench": b}), flush=True)
        if a.out:
            with open(a.out, "a") as f:
                f.write(json.dumps({"case": c, "kclaw": k, "kernelbench": b}) + "\n")
    print()
    print("| case | problem | kclaw wall s | KernelBench wall s | kclaw kernel ms (median) "
          "| KernelBench kernel ms (mean) | kclaw eager ms | KernelBench eager ms |")
    print("|---|---|---|---|---|---|---|---|")
    # KernelBench's eval leaves ref_runtime at -1: it times the reference
    # only through timing.measure_ref_program_time.
    fmt = lambda v, p=4: ("%.*f" % (p, v)) if isinstance(v, (int, float)) and v >= 0 else "-"
    for c, p, k, b in rows:
        print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            c, p, fmt(k.get("wall_s"), 1), fmt(b.get("wall_s"), 1), fmt(k.get("kernel_ms")),
            fmt(b.get("kernel_ms")), fmt(k.get("ref_ms")), fmt(b.get("ref_ms"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
